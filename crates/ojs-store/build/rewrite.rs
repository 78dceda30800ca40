//! The rewrites build.rs makes of the Lua before Redis sees it: key and event calls inlined from
//! src/layout.rs and ojs-core's event_kinds.rs, argument names turned into numbers, record checks into
//! their checkers' calls, and named constants into their literals.

use super::event_kinds;
use super::layout;
use super::script::ArgSpec;

/// The library's code with every `key_<family>(P, part…)` call replaced by the concatenation of the
/// family's template, `(P .. 'q:' .. (queue) .. ':ready')`. Arguments are split at top-level commas
/// (strings and brackets respected) and inlined themselves; a call with the wrong number of arguments,
/// or of a family src/layout.rs does not have, fails the build.
pub fn inline_key_calls(code: &str) -> Result<String, String> {
    inline_calls(code, "key_", &inline_key_calls, |family, args, call| {
        let f = layout::KEY_FAMILIES
            .iter()
            .find(|f| f.name == family)
            .ok_or_else(|| format!("key_{family}(…) names no family of src/layout.rs"))?;
        let parts = layout::part_names(f.template);
        if args.len() != parts.len() + 1 {
            return Err(format!(
                "key_{family} takes P and {} part(s) ({parts:?}); got {} argument(s): {call:?}",
                parts.len(),
                args.len(),
            ));
        }
        let next = std::cell::Cell::new(1);
        let tail = layout::render(
            f.template,
            |_| {
                next.set(next.get() + 1);
                format!(" .. ({})", args[next.get() - 1])
            },
            |lit| format!(" .. '{lit}'"),
        );
        Ok(format!("({}{tail})", args[0]))
    })
}

/// `code` with every call `<prefix><name>(arg, …)` (at a word's start) replaced by what `expand(name,
/// args, the call's text)` makes of it, each argument first passed through `inner` (calls within calls).
pub fn inline_calls(
    code: &str,
    prefix: &str,
    inner: &dyn Fn(&str) -> Result<String, String>,
    expand: impl Fn(&str, &[String], &str) -> Result<String, String>,
) -> Result<String, String> {
    rewrite_words(code, |i, out| {
        if !code[i..].starts_with(prefix) {
            return Ok(None);
        }
        let name_end = i + code[i..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(code.len() - i);
        if code.as_bytes().get(name_end) != Some(&b'(') {
            return Ok(None);
        }
        let (args, end) = call_args(code, name_end)?;
        let args: Vec<String> = args.iter().map(|a| inner(a.trim())).collect::<Result<_, _>>()?;
        out.push_str(&expand(&code[i + prefix.len()..name_end], &args, &code[i..end])?);
        Ok(Some(end))
    })
}

/// `code` rewritten at word starts: `at_word(i, out)` may write what replaces the text from `i` to
/// `out` and return the index just past it; all else is copied as it is.
pub fn rewrite_words(
    code: &str,
    mut at_word: impl FnMut(usize, &mut String) -> Result<Option<usize>, String>,
) -> Result<String, String> {
    let mut out = String::with_capacity(code.len());
    let b = code.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let starts_word = i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
        if starts_word {
            if let Some(end) = at_word(i, &mut out)? {
                i = end;
                continue;
            }
        }
        let ch = code[i..].chars().next().expect("char");
        out.push(ch);
        i += ch.len_utf8();
    }
    Ok(out)
}

/// The library's code with every `ev_<kind>(P, job_id, queue, job_type, now, part…)` call replaced by
/// the `emit` of that event (`lua/includes/emit.lua`): its type, then its data as the parts' text, each
/// after a `\x1f` (a part the kind marks optional may be nil or false, and is then empty; a flag is a
/// Lua boolean). A call of a
/// kind `event_kinds.rs` does not list, or with the wrong number of parts, fails the build.
pub fn inline_event_calls(code: &str) -> Result<String, String> {
    inline_calls(code, "ev_", &inline_event_calls, |name, args, call| {
        let (index, kind) = event_kinds::EVENT_KINDS
            .iter()
            .enumerate()
            .find(|(_, k)| event_kinds::lua_name(k) == format!("ev_{name}"))
            .ok_or_else(|| format!("ev_{name}(…) names no event of ojs-core's event_kinds.rs"))?;
        // The server reads an event's type through EventType, whose k-th variant is the k-th kind.
        if kind.event as usize != index {
            return Err(format!("event_kinds.rs: {} is not in EventType's order", kind.name));
        }
        let members: Vec<&str> = kind.data.iter().map(|m| m.name).collect();
        if args.len() != 5 + members.len() {
            return Err(format!(
                "ev_{name} takes P, job_id, queue, job_type, now and {members:?}; got {} argument(s): {call:?}",
                args.len(),
            ));
        }
        // The separator as a Lua string literal ('\31').
        let separator = format!("'\\{}'", event_kinds::PART_SEPARATOR as u32);
        let data = if members.is_empty() {
            "''".to_string()
        } else {
            kind.data
                .iter()
                .zip(&args[5..])
                .map(|(m, a)| {
                    let value = match (m.part, m.optional) {
                        (event_kinds::Part::Flag, _) => format!("(({a}) and '1' or '')"),
                        (_, true) => format!("part_opt({a})"),
                        (_, false) => format!("text({a})"),
                    };
                    format!("{separator} .. {value}")
                })
                .collect::<Vec<_>>()
                .join(" .. ")
        };
        Ok(format!(
            "emit({}, '{}', {}, {}, {}, {}, {data})",
            args[0], kind.name, args[1], args[2], args[3], args[4]
        ))
    })
}

/// The arguments of the call whose `(` is at `open`, and the index just past its `)`.
pub fn call_args(code: &str, open: usize) -> Result<(Vec<&str>, usize), String> {
    let b = code.as_bytes();
    let (mut depth, mut start, mut i) = (0usize, open + 1, open + 1);
    let mut args = Vec::new();
    while i < b.len() {
        match b[i] {
            q @ (b'\'' | b'"') => {
                i += 1;
                while i < b.len() && b[i] != q {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
            }
            b'(' | b'[' | b'{' => depth += 1,
            b')' if depth == 0 => {
                args.push(&code[start..i]);
                return Ok((args, i + 1));
            }
            b')' | b']' | b'}' => depth = depth.saturating_sub(1),
            b',' if depth == 0 => {
                args.push(&code[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    Err(format!("unclosed call at {:?}", &code[open.saturating_sub(20)..open]))
}

/// A script's own code with its argument names replaced by numbers: `ARG.<name>` by `ARGV[i]`,
/// `ARG.REST` by the index after the fixed arguments, `<RECORD>.<field>` by the field's offset `k`
/// (`x + REC.f` with k = 0 by `x`), `<RECORD>.STRIDE` by the record's field count. A name the header
/// does not declare, or an `ARGV[…]` index written with a number, fails the build.
pub fn inline_arg_names(code: &str, spec: &ArgSpec) -> Result<String, String> {
    // The script writes no index itself.
    for (i, _) in code.match_indices("ARGV[") {
        let inside: String = code[i + 5..].chars().take_while(|c| *c != ']' && *c != '\n').collect();
        let numeric = inside
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
            .any(|w| w.starts_with(|c: char| c.is_ascii_digit()));
        if numeric {
            return Err(format!(
                "`ARGV[{inside}]`: name the argument (ARG.<name>, <RECORD>.<field>) instead of its number"
            ));
        }
    }
    let b = code.as_bytes();
    let is_word = |c: &u8| c.is_ascii_alphanumeric() || *c == b'_';
    rewrite_words(code, |i, out| {
        let end = i + code[i..].bytes().take_while(is_word).count();
        let scope = &code[i..end];
        let known = scope == "ARG" || spec.records.iter().any(|(r, _)| r == scope);
        if !known || b.get(end) != Some(&b'.') {
            return Ok(None);
        }
        let name_end = end + 1 + code[end + 1..].bytes().take_while(is_word).count();
        let name = &code[end + 1..name_end];
        let value = if scope == "ARG" {
            match (name, spec.fixed.iter().position(|f| f.name == name)) {
                (_, Some(k)) => format!("ARGV[{}]", k + 1),
                ("REST", None) if spec.rest => (spec.fixed.len() + 1).to_string(),
                _ => return Err(format!("ARG.{name}: the header declares no ARGV[i] {name}")),
            }
        } else {
            let fields = &spec.records.iter().find(|(r, _)| r == scope).expect("record").1;
            match (name, fields.iter().position(|f| f.name == name)) {
                // `x + <offset 0>` is `x`.
                (_, Some(0)) if out.trim_end().ends_with('+') => {
                    let keep = out.trim_end().len() - 1;
                    out.truncate(keep);
                    out.truncate(out.trim_end().len());
                    String::new()
                }
                (_, Some(k)) => k.to_string(),
                ("STRIDE", None) => fields.len().to_string(),
                _ => return Err(format!("{scope}.{name}: record {scope} declares no field {name}")),
            }
        };
        out.push_str(&value);
        Ok(Some(name_end))
    })
}

/// A script's own code with each `check_<RECORD>(base)` turned into its record's checker call; a script
/// that takes records and never checks one of them fails the build (its values would reach the code
/// unchecked).
pub fn inline_record_checks(code: &str, op: &str, spec: &ArgSpec) -> Result<String, String> {
    for (record, _) in &spec.records {
        if !code.contains(&format!("check_{record}(")) {
            return Err(format!(
                "record {record} is never checked: call check_{record}(base) for each one before the first write"
            ));
        }
    }
    inline_calls(code, "check_", &|a: &str| Ok(a.to_string()), |record, args, call| {
        if !spec.records.iter().any(|(r, _)| r == record) || args.len() != 1 {
            return Err(format!(
                "{call:?}: check_<RECORD>(base) names a record the header declares"
            ));
        }
        let name = if spec.shared.contains(record) {
            record.to_string()
        } else {
            format!("{op}.{record}")
        };
        Ok(format!("ARG_RECORDS['{name}'](ARGV, {})", args[0]))
    })
}

/// The library's top-level `local NAME = <literal>` lines (NAME in capitals; the literal a number, a quoted
/// text, or arithmetic of numbers), taken out, with every use of NAME replaced by the literal: a constant is
/// written once, by name, and costs neither a top-level local nor an upvalue read. A name assigned anywhere
/// else is not a constant (the build fails, so a constant cannot be changed by mistake).
pub fn inline_constants(body: &str) -> Result<String, String> {
    let mut consts: Vec<(String, String)> = Vec::new();
    let mut kept = String::with_capacity(body.len());
    for line in body.lines() {
        let def = line.strip_prefix("local ").and_then(|rest| {
            let (name, value) = rest.split_once(" = ")?;
            let value = value.trim();
            let is_name = name.starts_with(|c: char| c.is_ascii_uppercase())
                && name
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
            let quoted = value.len() >= 2
                && value.starts_with('\'')
                && value.ends_with('\'')
                && !value[1..value.len() - 1].contains(['\'', '\\']);
            let arithmetic = value.chars().any(|c| c.is_ascii_digit())
                && value.chars().all(|c| c.is_ascii_digit() || " .*+-/^()".contains(c));
            (is_name && (quoted || arithmetic)).then(|| {
                let v = if quoted || value.chars().all(|c| c.is_ascii_digit()) {
                    value.to_string()
                } else {
                    format!("({value})")
                };
                (name.to_string(), v)
            })
        });
        match def {
            Some((name, value)) => {
                if let Some((_, v)) = consts.iter().find(|(n, _)| *n == name) {
                    if *v != value {
                        return Err(format!("{name} is defined twice, as {v} and as {value}"));
                    }
                    continue;
                }
                consts.push((name, value));
            }
            None => {
                kept.push_str(line);
                kept.push('\n');
            }
        }
    }
    let mut out = kept;
    for (name, value) in &consts {
        let b = out.as_bytes();
        let assigned = out.match_indices(name.as_str()).any(|(i, _)| {
            let starts = i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
            let after = &out[i + name.len()..];
            starts && after.starts_with(" = ")
        });
        if assigned {
            return Err(format!(
                "{name} is assigned besides its definition: it cannot be a constant"
            ));
        }
        out = rewrite_words(&out, |i, o| {
            let word_end = i + out[i..]
                .bytes()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == b'_')
                .count();
            if &out[i..word_end] == name {
                o.push_str(value);
                Ok(Some(word_end))
            } else {
                Ok(None)
            }
        })?;
    }
    Ok(out)
}
