//! The checks build.rs holds the Lua to: each script's header against its body, no key name or event
//! written by hand, a CAPS comment in an include that loops, no state that outlives a call, and the
//! library's count of top-level locals. Each returns what is wrong as its error; build.rs fails the
//! build with it.

use std::collections::BTreeSet;

use super::layout;
use super::script::header;

/// Events are written through `ev_<kind>(…)` only: a script or include other than emit.lua that calls
/// `emit(…)` itself fails the build.
pub fn check_no_raw_emit(code: &str) -> Result<(), String> {
    let b = code.as_bytes();
    for (i, _) in code.match_indices("emit(") {
        let starts_word = i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
        if starts_word {
            let line = code[..i].matches('\n').count() + 1;
            return Err(format!(
                "line {line}: emit(…) is written by build.rs; call ev_<kind>(P, job_id, queue, job_type, now, …) \
                 with a kind of ojs-core's event_kinds.rs"
            ));
        }
    }
    Ok(())
}

/// Lua code (comments already gone or skipped here) must not write a key name: `P .. '…'`, or a key
/// family's text after a part (`wk .. ':jobs'`), is the sign.
pub fn check_no_key_names(code: &str) -> Result<(), String> {
    let suffixes: Vec<String> = layout::KEY_FAMILIES
        .iter()
        .flat_map(|f| {
            let pieces = layout::pieces(f.template);
            (1..pieces.len())
                .filter(|&i| !pieces[i].0 && pieces[i - 1].0)
                .map(|i| format!("'{}'", pieces[i].1))
                .collect::<Vec<_>>()
        })
        .collect();
    for line in code.lines() {
        let line = line.split("--").next().unwrap_or_default();
        for s in &suffixes {
            if let Some(i) = line.find(s.as_str()) {
                if line[..i].trim_end().ends_with("..") {
                    return Err(format!(
                        "writes a key name itself ({:?}); call key_<family>(P, …) from src/layout.rs",
                        line.trim()
                    ));
                }
            }
        }
        // The prefix under its other name: ARG.P is ARGV[1] in every script.
        if let Some(i) = line.find("ARG.P") {
            let rest = line[i + 5..].trim_start();
            if rest.starts_with("..") && rest[2..].trim_start().starts_with('\'') {
                return Err(format!(
                    "writes a key name itself ({:?}); call key_<family>(P, …) from src/layout.rs",
                    line.trim()
                ));
            }
        }
        let b = line.as_bytes();
        for (i, _) in line.match_indices('P') {
            let before_ok = i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
            let rest = line[i + 1..].trim_start();
            if before_ok && rest.starts_with("..") && rest[2..].trim_start().starts_with('\'') {
                return Err(format!(
                    "writes a key name itself ({:?}); add the family to src/layout.rs and call key_<family>(P, …)",
                    line.trim()
                ));
            }
        }
    }
    Ok(())
}

/// A script's header against its body and its file name's key count `nkeys` (see build.rs: the sections,
/// CAPS, the declared keys, `KEYS[i]` in range, every reply tag declared under RETURNS).
pub fn check_header(text: &str, nkeys: usize) -> Result<(), String> {
    let head = header(text);
    let mut section = "";
    let mut declared_keys = 0usize;
    let mut tags = BTreeSet::new();
    let mut sections = BTreeSet::new();
    for line in &head {
        let body = line.trim_start_matches('-').trim();
        if let Some(name) = ["KEYS", "ARGV", "RETURNS", "INVARIANTS"].iter().find(|s| body == **s) {
            section = name;
            sections.insert(*name);
            continue;
        }
        if section == "KEYS" && body.starts_with("KEYS[") {
            declared_keys += 1;
        }
        if section == "RETURNS" {
            let mut rest = body;
            while let Some(i) = rest.find("{'") {
                let after = &rest[i + 2..];
                if let Some(j) = after.find('\'') {
                    tags.insert(after[..j].to_string());
                    rest = &after[j..];
                } else {
                    break;
                }
            }
        }
    }
    for s in ["KEYS", "ARGV", "RETURNS", "INVARIANTS"] {
        if !sections.contains(s) {
            return Err(format!("header lacks a '-- {s}' section"));
        }
    }
    // Bounded work per call: every script says what bounds each of its loops (and its includes').
    if !head
        .iter()
        .any(|l| l.trim_start_matches('-').trim().starts_with("CAPS"))
    {
        return Err("header lacks a '-- CAPS' line: what bounds each loop the script runs".into());
    }
    if declared_keys != nkeys {
        return Err(format!("file name says {nkeys} keys, header declares {declared_keys}"));
    }
    let code: String = text.lines().skip(head.len()).map(|l| format!("{l}\n")).collect();
    let mut rest = code.as_str();
    while let Some(i) = rest.find("KEYS[") {
        let after = &rest[i + 5..];
        let n: String = after.chars().take_while(|c| c.is_ascii_digit()).collect();
        if let Ok(n) = n.parse::<usize>() {
            if n == 0 || n > nkeys {
                return Err(format!("body uses KEYS[{n}] but declares {nkeys} keys"));
            }
        }
        rest = after;
    }
    let mut rest = code.as_str();
    while let Some(i) = rest.find("return {'") {
        let after = &rest[i + 9..];
        let tag: String = after.chars().take_while(|c| *c != '\'').collect();
        if !tags.contains(&tag) {
            return Err(format!("body returns tag '{tag}' that RETURNS does not declare"));
        }
        rest = after;
    }
    Ok(())
}

/// An include whose code loops (`for`, `while`, `repeat`) says in its comments what bounds the loops.
pub fn check_include_caps(text: &str) -> Result<(), String> {
    let loops = text.lines().filter(|l| !l.trim_start().starts_with("--")).any(|l| {
        l.split_whitespace()
            .any(|w| w == "for" || w == "while" || w == "repeat")
    });
    let said = text
        .lines()
        .any(|l| l.trim_start().starts_with("--") && l.contains("CAPS"));
    if loops && !said {
        return Err("has a loop but no CAPS comment saying what bounds it".into());
    }
    Ok(())
}

/// The functions every call runs first (includes/record.lua rec_begin and what it calls): what they assign
/// is reset per call.
pub const CALL_BEGINS: &[&str] = &["rec_begin", "count_begin", "emit_begin"];

/// No mutable state outlives a call: the library's top level runs once, at load, so a top-level local that
/// a function assigns (`name = …`, `name[…] = …`, `name.f = …`, on a line inside a function) keeps its
/// value from one call to the next, across namespaces and shards sharing the Redis (issue 37 item 11: a
/// "once per call" memo there skipped another namespace's key expiry). Each such name must be assigned
/// whole by one of [`CALL_BEGINS`]. A forward declaration assigned at the top level (`burst_sync =
/// function …`, at column 0) is not a call's state.
pub fn check_call_state(includes: &str) -> Result<(), String> {
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut top: BTreeSet<String> = BTreeSet::new();
    for line in includes.lines() {
        if let Some(rest) = line.strip_prefix("local ") {
            if rest.starts_with("function ") {
                continue;
            }
            let names = rest.split('=').next().unwrap_or_default();
            top.extend(names.split(',').map(|n| ident(n.trim())).filter(|n| !n.is_empty()));
        }
    }
    // The targets assigned on each line inside a function, and those the call's begins assign whole.
    let targets = |line: &str| -> Vec<(String, bool)> {
        let code = line.split("--").next().unwrap_or_default().trim();
        let Some(eq) = code.find(" = ").filter(|&i| !code[..i].contains(['(', '"', '\''])) else {
            return Vec::new();
        };
        if code.starts_with("local ") || code.starts_with("if ") || code.starts_with("for ") {
            return Vec::new();
        }
        code[..eq]
            .split(',')
            .map(str::trim)
            .map(|t| {
                let name = ident(t);
                let whole = name.len() == t.len();
                (name, whole)
            })
            .filter(|(n, _)| !n.is_empty())
            .collect()
    };
    let mut reset = BTreeSet::new();
    let mut mutated: Vec<(String, String)> = Vec::new();
    let mut in_begin = false;
    for line in includes.lines() {
        if let Some(name) = line.strip_prefix("local function ") {
            in_begin = CALL_BEGINS.iter().any(|b| name.starts_with(&format!("{b}(")));
            continue;
        }
        if line == "end" {
            in_begin = false;
            continue;
        }
        if !line.starts_with([' ', '\t']) {
            continue;
        }
        for (name, whole) in targets(line) {
            if !top.contains(&name) {
                continue;
            }
            if in_begin && whole {
                reset.insert(name);
            } else {
                mutated.push((name, line.trim().to_string()));
            }
        }
    }
    let kept: Vec<String> = mutated
        .into_iter()
        .filter(|(n, _)| !reset.contains(n))
        .map(|(n, l)| format!("{n} ({l:?})"))
        .collect();
    if kept.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "state that outlives a call: these top-level locals are assigned inside a function but not reset \
             by {CALL_BEGINS:?}: {}",
            kept.join(", ")
        ))
    }
}

/// The most top-level locals the library may declare. Lua allows 200 in one function, and the library's
/// top level is one function: past it the next include would not load (the limit is met at FUNCTION
/// LOAD, on every pod, not at build time). 150 keeps a margin of 50: an include that offers more than a
/// few functions is a module, one table of them (lua/includes/ratelimit.lua's pieces, tenant.lua, …;
/// issue 38 item 3: the library had 179 before they were).
pub const TOP_LEVEL_LOCALS_MAX: usize = 150;

/// The library's top-level locals: `local function f`, and each name of a `local a, b = …` at column 0,
/// before the first `redis.register_function(`.
pub fn count_top_level_locals(body: &str) -> usize {
    let top = body.split("redis.register_function(").next().unwrap_or(body);
    top.lines()
        .filter_map(|l| l.strip_prefix("local "))
        .map(|rest| {
            if rest.starts_with("function ") {
                1
            } else {
                rest.split('=').next().unwrap_or_default().split(',').count()
            }
        })
        .sum()
}

/// Fails when the library has more than [`TOP_LEVEL_LOCALS_MAX`] top-level locals
/// ([`count_top_level_locals`]).
pub fn check_top_level_locals(body: &str) -> Result<(), String> {
    let n = count_top_level_locals(body);
    if n > TOP_LEVEL_LOCALS_MAX {
        return Err(format!(
            "{n} top-level locals, past {TOP_LEVEL_LOCALS_MAX} (Lua's limit is 200): fold an include's functions into a table"
        ));
    }
    Ok(())
}
