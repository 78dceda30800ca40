//! The type of a script argument, as its header declares it (the word after the argument's name), and
//! the Lua that checks a value of it. build.rs puts these checks at the start of every library function
//! (fixed arguments and keys) and into the record checkers a script calls before its first write
//! (`check_<RECORD>(base)`), so that an argument a script could not use fails the call before it has read
//! or written anything (issue 40: no transition half-happens). Included by build.rs, and by the crate's
//! tests (`src/lib.rs`), which hold the grammar and the generated Lua to their rules.
//!
//! The grammar (one word, no spaces):
//! - `string`, `bytes`: any value (present: the argument count is checked);
//! - `int`: a decimal integer, `-?[0-9]+`, in -(2^53 - 1)..=2^53 - 1 (exact in a Lua number);
//!   `int(lo..hi)` in lo..=hi (either bound may be left out: that of `int`);
//! - `ms`: a time or duration in milliseconds, `int(0..99999999999999)` (below 10^14: what a script
//!   computes from it, a time plus a duration, stays exact and is written in full);
//! - `number(lo..hi)`: a decimal number, `-?[0-9]+(.[0-9]*)?`, in lo..=hi;
//! - `flag`: `0` or `1`;
//! - `'a'|'b'|…`: one of these texts (`''` among them for the empty text);
//! - any of the above but `string` and `bytes` followed by `?`: that, or the empty text.

/// The largest integer a Lua number holds exactly, less one: the default bounds of `int`.
pub const INT_MAX: i64 = (1 << 53) - 1;
/// The bound of `ms` (exclusive): the HTTP boundary's `ojs_core::clock::MS_LIMIT`, which refuses a time
/// past it with a 400 (a test of src/scripts.rs holds the two equal).
pub const MS_LIMIT: i64 = 100_000_000_000_000;

#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    /// `string` or `bytes`: any value.
    Any,
    Int {
        lo: i64,
        hi: i64,
    },
    Number {
        lo: f64,
        hi: f64,
    },
    Flag,
    OneOf(Vec<String>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct ArgType {
    pub kind: Kind,
    /// The empty text is allowed too (`?`).
    pub empty_ok: bool,
}

impl ArgType {
    /// The type a header's type word names, or what is wrong with the word.
    pub fn parse(word: &str) -> Result<ArgType, String> {
        let (base, empty_ok) = match word.strip_suffix('?') {
            Some(b) => (b, true),
            None => (word, false),
        };
        let (name, range) = match base.split_once('(') {
            Some((n, r)) => (
                n,
                Some(
                    r.strip_suffix(')')
                        .ok_or_else(|| format!("type {word:?}: a range is written (lo..hi)"))?,
                ),
            ),
            None => (base, None),
        };
        let bounds = |lo_default: f64, hi_default: f64| -> Result<(f64, f64), String> {
            let Some(r) = range else {
                return Ok((lo_default, hi_default));
            };
            let (lo, hi) = r
                .split_once("..")
                .ok_or_else(|| format!("type {word:?}: a range is written (lo..hi)"))?;
            let num = |s: &str, d: f64| -> Result<f64, String> {
                if s.is_empty() {
                    return Ok(d);
                }
                s.parse::<f64>()
                    .map_err(|_| format!("type {word:?}: {s:?} is not a number"))
            };
            let (lo, hi) = (num(lo, lo_default)?, num(hi, hi_default)?);
            if lo > hi || lo < lo_default || hi > hi_default {
                return Err(format!(
                    "type {word:?}: the range must lie within {lo_default}..{hi_default}"
                ));
            }
            Ok((lo, hi))
        };
        let kind = match name {
            "string" | "bytes" if range.is_none() && !empty_ok => Kind::Any,
            "int" => {
                let (lo, hi) = bounds(-(INT_MAX as f64), INT_MAX as f64)?;
                if lo.fract() != 0.0 || hi.fract() != 0.0 {
                    return Err(format!("type {word:?}: an int's bounds are integers"));
                }
                Kind::Int {
                    lo: lo as i64,
                    hi: hi as i64,
                }
            }
            "ms" if range.is_none() => Kind::Int {
                lo: 0,
                hi: MS_LIMIT - 1,
            },
            "number" if range.is_some() => {
                let (lo, hi) = bounds(-(INT_MAX as f64), INT_MAX as f64)?;
                Kind::Number { lo, hi }
            }
            "flag" if range.is_none() => Kind::Flag,
            _ if name.starts_with('\'') && range.is_none() => {
                let mut texts = Vec::new();
                for alt in name.split('|') {
                    let t = alt
                        .strip_prefix('\'')
                        .and_then(|a| a.strip_suffix('\''))
                        .filter(|t| !t.contains(['\'', '\\']))
                        .ok_or_else(|| format!("type {word:?}: alternatives are quoted texts joined by |"))?;
                    texts.push(t.to_string());
                }
                Kind::OneOf(texts)
            }
            _ => {
                return Err(format!(
                    "unknown argument type {word:?}: string, bytes, int, int(lo..hi), ms, number(lo..hi), flag, \
                     'a'|'b', each but string and bytes with an optional ?"
                ))
            }
        };
        Ok(ArgType { kind, empty_ok })
    }

    /// Whether a value of this type needs a check beyond being present.
    pub fn checked(&self) -> bool {
        self.kind != Kind::Any
    }

    /// A Lua condition that holds when `v` (a Lua expression) is a value of this type.
    pub fn lua_condition(&self, v: &str) -> String {
        let cond = match &self.kind {
            Kind::Any => "true".to_string(),
            Kind::Int { lo, hi } => format!("arg_int({v}, {lo}, {hi})"),
            Kind::Number { lo, hi } => format!("arg_number({v}, {}, {})", lua_num(*lo), lua_num(*hi)),
            Kind::Flag => format!("({v} == '0' or {v} == '1')"),
            Kind::OneOf(texts) => format!(
                "({})",
                texts
                    .iter()
                    .map(|t| format!("{v} == '{t}'"))
                    .collect::<Vec<_>>()
                    .join(" or ")
            ),
        };
        if self.empty_ok && !matches!(&self.kind, Kind::OneOf(t) if t.iter().any(String::is_empty)) {
            format!("({v} == '' or {cond})")
        } else {
            cond
        }
    }

    /// What a value of this type is, for the refusal: `an integer in 0..=10`.
    pub fn rule(&self) -> String {
        let rule = match &self.kind {
            Kind::Any => "any text".to_string(),
            Kind::Int { lo, hi } => format!("an integer in {lo}..={hi}"),
            Kind::Number { lo, hi } => format!("a number in {}..={}", lua_num(*lo), lua_num(*hi)),
            Kind::Flag => "0 or 1".to_string(),
            Kind::OneOf(texts) => format!(
                "one of {}",
                texts
                    .iter()
                    .map(|t| if t.is_empty() { "(empty)" } else { t })
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        if self.empty_ok {
            format!("{rule}, or empty")
        } else {
            rule
        }
    }

    /// The Lua statement that refuses a value `v` of argument `name` of function `op` not of this type
    /// (nothing for a type every value has).
    /// A number's check is written out in place (one `tonumber`, no function call of the library's: a
    /// check runs for every field of every job, and a Lua call costs more than the check itself).
    pub fn lua_check(&self, op: &str, name: &str, v: &str) -> String {
        if !self.checked() {
            return String::new();
        }
        let refuse = format!("arg_refuse('{op}', '{name}', {v}, '{}')", self.rule());
        let number = |lo: String, hi: String, integral: bool| {
            let whole = if integral { " and n % 1 == 0" } else { "" };
            let check =
                format!("local n = tonumber({v}) if not (n{whole} and n >= {lo} and n <= {hi}) then {refuse} end");
            if self.empty_ok {
                format!("if {v} ~= '' then {check} end\n")
            } else {
                format!("do {check} end\n")
            }
        };
        match &self.kind {
            Kind::Int { lo, hi } => number(lo.to_string(), hi.to_string(), true),
            Kind::Number { lo, hi } => number(lua_num(*lo), lua_num(*hi), false),
            _ => format!("if not {} then {refuse} end\n", self.lua_condition(v)),
        }
    }
}

/// A number as Lua source.
fn lua_num(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e16 {
        format!("{}", x as i64)
    } else {
        format!("{x}")
    }
}
