//! Builds the Redis Functions library from `lua/<op>-<nkeys>.lua` and their `--@include <name>` pieces
//! from `lua/includes/`, and checks every header against its body before anything runs:
//! - the file name's key count equals the number of `KEYS[i]` entries the header declares, and the body
//!   uses no `KEYS[i]` beyond it;
//! - the header has the sections KEYS, ARGV, RETURNS and INVARIANTS, and a CAPS line (what bounds each
//!   loop it runs); an include with a loop (`for`, `while`, `repeat`) says `CAPS` in its comments;
//! - every reply tag the body returns (`return {'tag'`) is declared under RETURNS;
//! - the ARGV section declares the arguments, and is their one definition: the fixed ones `ARGV[1]
//!   <name>`, `ARGV[2] <name>`, … in order, then at most a variable part `ARGV[k..…]` (k right after
//!   them), and for scripts that take repeated records, each record as a line `record <NAME>` followed
//!   by its fields `+0 <name>`, `+1 <name>`, … in order (a field whose type word is `bytes` is passed
//!   as bytes). Names are snake_case and no Rust keyword (`P` and `W` are allowed: `prefix`,
//!   `workflow_id` in Rust). A record that several scripts pass is declared once, in the header of the
//!   include that reads it (`lua/includes/create.lua`'s JOB), and each script names it with a line
//!   `record <NAME> = <include>`: the include's code reads its fields by name too, and the twins share
//!   one struct, `<Name>Record`;
//! - the script's code names its arguments and never numbers them: `ARG.<name>` is `ARGV[i]`,
//!   `ARG.REST` the index of the variable part, `<NAME>.<field>` the field's offset in the record
//!   (`ARGV[base + REQ.ack_id]`) and `<NAME>.STRIDE` the record's field count. A name the header does
//!   not declare, or an `ARGV[…]` written with a number, fails the build; the library gets the numbers
//!   (`ARGV[10]`, `ARGV[a + 5]`, `11`, with `x + <offset 0>` as `x`), so the names cost nothing per call;
//! - the operation has a typed twin, `src/ops/<op>.rs` (or, for scripts that share their arguments,
//!   the module named by the op's first word).
//!
//! A mismatch fails the build, so a header cannot drift from its script.
//!
//! It also writes the Redis Functions library the server runs (`LIBRARY`): every include once, at the
//! library's top level, and each operation's own body registered as a function `<op>_<version>` that
//! receives `KEYS` and `ARGV` as its two parameters. The library's top level runs once, at `FUNCTION
//! LOAD`, so a call pays only for its operation's own work (an `EVALSHA` of a flattened script re-runs
//! every include's definitions on each call: measured at ~19 µs of Redis CPU per call for fetch-1).
//! Each function's body runs between `rec_begin()` and `rec_end(reply)` of `includes/record.lua` (the
//! per-call cache of job records, written back when the body returns).
//! `<version>` is a hash of the library's text, so servers of different builds sharing one Redis each
//! call their own functions.
//!
//! From the same ARGV sections it writes `args_gen.rs` (the `ops::args` module): per script a struct
//! `<Op>Args` with one `pub` field per fixed argument and, per record, `<Op><Name>Record`, each with
//! `push` (its values in the header's order), `into_vec`, `LEN` and `NAMES`. A twin fills the struct
//! with a literal, so the compiler holds it to every argument, each once, and the order is the header's.
//!
//! Key names come from `src/layout.rs` only: the library starts with one Lua function per key family
//! (`key_<family>(P, part…)`), `keys_gen.rs` gives `Keys` the same as Rust methods, and a script or
//! include that writes a key name itself (`P .. '…'`) fails the build.

use std::path::PathBuf;

// The rules and the generators live in build/ (build/rules.rs), where tests/build_rules.rs tests them.
#[path = "build/rules.rs"]
mod rules;

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let generated = rules::library::generate(&manifest).unwrap_or_else(|e| panic!("{e}"));
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    std::fs::write(out_dir.join("scripts.rs"), generated.scripts_rs).expect("write scripts.rs");
    std::fs::write(out_dir.join("keys_gen.rs"), generated.keys_gen_rs).expect("write keys_gen.rs");
    std::fs::write(out_dir.join("args_gen.rs"), generated.args_gen_rs).expect("write args_gen.rs");
}
