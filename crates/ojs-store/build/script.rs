//! Reading a Lua file of `lua/`: its header, its `--@include` lines and own code, the includes it
//! flattens, and its ARGV section as an [`ArgSpec`] (the one definition of its arguments). Part of
//! build.rs (see its doc comment for the rules), kept here so that `tests/build_rules.rs` can test it.

use std::collections::BTreeSet;
use std::path::Path;

use super::arg_types;
use super::rewrite::inline_arg_names;

/// Whether a script changes state: not when its header's INVARIANTS start with "reads only" or "writes
/// nothing" (the store then does not wait for replicas after it).
pub fn writes(text: &str) -> bool {
    let head = header(text);
    let first = head
        .iter()
        .skip_while(|l| l.trim_start_matches('-').trim() != "INVARIANTS")
        .nth(1)
        .map(|l| l.trim_start_matches('-').trim())
        .unwrap_or_default();
    !(first.starts_with("reads only") || first.starts_with("writes nothing"))
}

/// A file's header: its first lines, while they are comments.
pub fn header(text: &str) -> Vec<&str> {
    text.lines().take_while(|l| l.starts_with("--")).collect()
}

/// `text` with each `--@include <name>` line replaced by `<includes>/<name>.lua`, itself flattened, and
/// its comment lines left out (`--[[` lines are kept). An include already in `seen` is left out (each is
/// written once, so a cycle ends), one that does not exist fails, and one that declares records has
/// their names turned into numbers. Tells cargo to rerun the build when an include changes.
pub fn flatten(text: &str, includes: &Path, seen: &mut BTreeSet<String>) -> Result<String, String> {
    let mut out = String::new();
    for line in text.lines() {
        if let Some(name) = line.trim().strip_prefix("--@include ") {
            let name = name.trim();
            if !seen.insert(name.to_string()) {
                continue;
            }
            let path = includes.join(format!("{name}.lua"));
            println!("cargo:rerun-if-changed={}", path.display());
            let inc = std::fs::read_to_string(&path).map_err(|e| format!("include {name}: {e}"))?;
            let body = flatten(&inc, includes, seen)?;
            // An include that declares records reads them by name, as a script does.
            let spec = include_records(&inc, includes).map_err(|e| format!("include {name}: {e}"))?;
            match spec.records.is_empty() {
                true => out.push_str(&body),
                false => out.push_str(&inline_arg_names(&body, &spec).map_err(|e| format!("include {name}: {e}"))?),
            }
        } else if !line.trim_start().starts_with("--") || line.trim_start().starts_with("--[[") {
            out.push_str(line);
            out.push('\n');
        }
    }
    Ok(out)
}

/// A script's `--@include` lines only.
pub fn includes_only(text: &str) -> String {
    text.lines()
        .filter(|l| l.trim().starts_with("--@include "))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// A file's lines that are not comment lines.
pub fn code_lines(text: &str) -> String {
    text.lines()
        .filter(|l| !l.trim_start().starts_with("--"))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// A script's own code: what follows its header, without include lines and comment lines (`--[[` lines
/// are kept).
pub fn own_body(text: &str) -> String {
    text.lines()
        .skip(header(text).len())
        .filter(|l| !l.trim_start().starts_with("--") || l.trim_start().starts_with("--[["))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// One argument as a header declares it: `ARGV[i] <name> …` or, in a record, `+k <name> …`.
pub struct Field {
    /// The header's name, which the script writes (`ARG.<name>`, `<RECORD>.<name>`).
    pub name: String,
    /// Its Rust field name: the header's, but `P` is `prefix` and `W` is `workflow_id`.
    pub rust: String,
    /// Declared `bytes` (its type word): the twin passes it as bytes, not text.
    pub bytes: bool,
    /// The rest of its first header line.
    pub doc: String,
    /// Its type: the first word of `doc` (build/arg_types.rs).
    pub ty: arg_types::ArgType,
}

/// A script's arguments as its header's ARGV section declares them.
pub struct ArgSpec {
    /// `ARGV[1] <name>`, `ARGV[2] <name>`, …: the fixed arguments, in order.
    pub fixed: Vec<Field>,
    /// The first line `ARGV[k..…]` (k = one past the fixed arguments): what follows them varies.
    pub rest: bool,
    /// Each `record <NAME>` line with the `+0 <name>`, `+1 <name>`, … lines after it.
    pub records: Vec<(String, Vec<Field>)>,
    /// The records a line `record <NAME> = <include>` takes from `lua/includes/<include>.lua`, where
    /// they are declared once, for every script that passes them (their twins share one struct).
    pub shared: BTreeSet<String>,
}

impl ArgSpec {
    /// Whether any argument is bytes: then every value of the script is written as bytes.
    pub fn bytes(&self) -> bool {
        self.fixed
            .iter()
            .chain(self.records.iter().flat_map(|(_, f)| f))
            .any(|f| f.bytes)
    }
}

pub const RUST_KEYWORDS: &[&str] = &[
    "as", "async", "await", "box", "break", "const", "continue", "crate", "do", "dyn", "else", "enum", "extern",
    "false", "final", "fn", "for", "gen", "if", "impl", "in", "let", "loop", "macro", "match", "mod", "move", "mut",
    "override", "priv", "pub", "ref", "return", "self", "static", "struct", "super", "trait", "true", "try", "type",
    "typeof", "unsafe", "unsized", "use", "virtual", "where", "while", "yield",
];

/// A header's argument name and its Rust field name; a name that cannot be one fails the build.
pub fn field(name: &str, rest: &str) -> Result<Field, String> {
    let rust = match name {
        "P" => "prefix".to_string(),
        "W" => "workflow_id".to_string(),
        n if n.starts_with(|c: char| c.is_ascii_lowercase())
            && n.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            && !RUST_KEYWORDS.contains(&n) =>
        {
            n.to_string()
        }
        n => {
            return Err(format!(
                "argument name {n:?} must be snake_case and not a Rust keyword (it names the twin's field)"
            ))
        }
    };
    let word = rest.split_whitespace().next().unwrap_or_default();
    let ty = arg_types::ArgType::parse(word).map_err(|e| format!("argument {name}: {e}"))?;
    Ok(Field {
        name: name.to_string(),
        rust,
        bytes: word == "bytes",
        doc: rest.split_whitespace().collect::<Vec<_>>().join(" "),
        ty,
    })
}

/// The header's ARGV section: fixed arguments `ARGV[i] <name>` (i counting from 1 with no gap), the
/// first variable part `ARGV[k..…]` (k right after them), and records: a line `record <NAME>` (NAME in
/// capitals) and then its fields `+0 <name>`, `+1 <name>`, … in order. Other lines continue the one before.
pub fn arg_spec(text: &str, includes: &Path) -> Result<ArgSpec, String> {
    let mut in_argv = false;
    let lines = header(text).into_iter().filter(|line| {
        let body = line.trim_start_matches('-').trim();
        if ["KEYS", "ARGV", "RETURNS", "INVARIANTS", "COST", "CAPS", "CLOCK"]
            .iter()
            .any(|s| body == *s || body.starts_with(&format!("{s} ")))
        {
            in_argv = body == "ARGV";
            return false;
        }
        in_argv
    });
    spec_of(lines, includes)
}

/// The records an include declares in its header (`record <NAME>`, then `+k <name>` lines), for the
/// scripts that name them (`record <NAME> = <include>`); an include declares no `ARGV[i]`.
pub fn include_records(text: &str, includes: &Path) -> Result<ArgSpec, String> {
    let spec = spec_of(header(text).into_iter(), includes)?;
    if !spec.fixed.is_empty() || spec.rest || !spec.shared.is_empty() {
        return Err("an include declares records only (no ARGV[i], no `record <NAME> = …`)".into());
    }
    Ok(spec)
}

/// Argument lines (see [`arg_spec`]) into their spec.
pub fn spec_of<'a>(lines: impl Iterator<Item = &'a str>, includes: &Path) -> Result<ArgSpec, String> {
    let mut spec = ArgSpec {
        fixed: Vec::new(),
        rest: false,
        records: Vec::new(),
        shared: BTreeSet::new(),
    };
    for line in lines {
        let body = line.trim_start_matches('-').trim();
        let (first, rest) = body.split_once(char::is_whitespace).unwrap_or((body, ""));
        let rest = rest.trim_start();
        if let Some(index) = first.strip_prefix("ARGV[").and_then(|f| f.strip_suffix(']')) {
            if let Some((from, _)) = index.split_once("..") {
                if !spec.rest {
                    if from != (spec.fixed.len() + 1).to_string() {
                        return Err(format!(
                            "`{first}`: the variable arguments start right after the {} fixed ones",
                            spec.fixed.len()
                        ));
                    }
                    spec.rest = true;
                }
            } else if spec.rest || index != (spec.fixed.len() + 1).to_string() {
                return Err(format!(
                    "`{first}`: fixed arguments are ARGV[1], ARGV[2], … in order, before any ARGV[k..]"
                ));
            } else {
                let (name, doc) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
                spec.fixed.push(field(name, doc)?);
            }
        } else if let Some(name) = body.strip_prefix("record ") {
            let (name, from) = match name.split_once('=') {
                Some((n, inc)) => (n.trim(), inc.split_whitespace().next()),
                None => (name.trim(), None),
            };
            if !name.starts_with(|c: char| c.is_ascii_uppercase())
                || !name
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
                || name == "ARG"
            {
                return Err(format!("`record {name}`: a record's name is in capitals (not ARG)"));
            }
            if spec.records.iter().any(|(r, _)| r == name) {
                return Err(format!("record {name} is declared twice"));
            }
            match from {
                None => spec.records.push((name.to_string(), Vec::new())),
                Some(inc) => {
                    let path = includes.join(format!("{inc}.lua"));
                    let text = std::fs::read_to_string(&path).map_err(|e| format!("`record {name} = {inc}`: {e}"))?;
                    let fields = include_records(&text, includes)
                        .map_err(|e| format!("includes/{inc}.lua: {e}"))?
                        .records
                        .into_iter()
                        .find(|(r, _)| r == name)
                        .ok_or_else(|| {
                            format!("`record {name} = {inc}`: includes/{inc}.lua declares no record {name}")
                        })?
                        .1;
                    spec.records.push((name.to_string(), fields));
                    spec.shared.insert(name.to_string());
                }
            }
        } else if let Some(k) = first
            .strip_prefix('+')
            .filter(|k| !k.is_empty() && k.chars().all(|c| c.is_ascii_digit()))
        {
            let Some((record, fields)) = spec.records.last_mut().filter(|(r, _)| !spec.shared.contains(r)) else {
                return Err(format!(
                    "`{first}` outside a `record <NAME>` (a shared record's fields are its include's)"
                ));
            };
            if k != fields.len().to_string() {
                return Err(format!("record {record}: `{first}` should be +{}", fields.len()));
            }
            let (name, doc) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
            fields.push(field(name, doc)?);
        }
    }
    for (record, fields) in &spec.records {
        if fields.is_empty() {
            return Err(format!("record {record} lists no fields"));
        }
        if let Some(f) = fields
            .iter()
            .find(|f| f.name.starts_with(|c: char| c.is_ascii_uppercase()))
        {
            return Err(format!("record {record}: field {:?} must be snake_case", f.name));
        }
    }
    Ok(spec)
}
