//! build.rs's rules, each on a small Lua snippet: a case it lets through (and what it makes of it) and a
//! case it refuses, with the message the build fails with. The rules live in `build/` (see
//! `build/rules.rs`); this test includes the same files as build.rs does.

#[allow(dead_code)]
#[path = "../build/rules.rs"]
mod rules;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use rules::checks::{
    check_call_state, check_header, check_include_caps, check_no_key_names, check_no_raw_emit, check_top_level_locals,
    count_top_level_locals, TOP_LEVEL_LOCALS_MAX,
};
use rules::generate::{camel, prologue, record_checker, rust_arg_structs, rust_key_methods};
use rules::rewrite::{inline_arg_names, inline_constants, inline_event_calls, inline_key_calls, inline_record_checks};
use rules::script::{arg_spec, flatten, include_records, own_body, writes, ArgSpec};

/// A script `ack-1.lua` whose header is whole: one key, three fixed arguments, a variable part of RES
/// records, two reply tags, CAPS and INVARIANTS.
const SCRIPT: &str = "\
-- ack-1.lua: a fixture.
-- KEYS
--   KEYS[1] P..'job:'..id   hash   the job
-- ARGV
--   ARGV[1] P        string   key prefix
--   ARGV[2] id       string   job id
--   ARGV[3] attempt  int(1..) the attempt
--   ARGV[4..] the results, one RES record each
--   record RES
--     +0  name     string   the result's name
--     +1  value    bytes    its value
-- RETURNS
--   {'ok', n} or {'missing'}
-- CAPS   the records given
-- INVARIANTS
--   writes the job
local k = KEYS[1]
if redis.call('EXISTS', k) == 0 then return {'missing'} end
return {'ok', 1}
";

/// An include path nothing is read from (the fixtures that name no shared record).
fn no_includes() -> &'static Path {
    Path::new("/nonexistent/includes")
}

/// The spec of [`SCRIPT`]'s header.
fn spec() -> ArgSpec {
    arg_spec(SCRIPT, no_includes()).expect("the fixture's ARGV section")
}

/// The spec of a script whose ARGV section is `argv` (lines without the `--`).
fn spec_of_argv(argv: &str) -> Result<ArgSpec, String> {
    let text: String = format!("-- KEYS\n-- ARGV\n{argv}-- RETURNS\n")
        .lines()
        .map(|l| {
            if l.starts_with("--") {
                format!("{l}\n")
            } else {
                format!("--   {l}\n")
            }
        })
        .collect();
    arg_spec(&text, no_includes())
}

/// The error of `r`, which must be one.
#[track_caller]
fn error<T>(r: Result<T, String>) -> String {
    match r {
        Ok(_) => panic!("accepted; expected a refusal"),
        Err(e) => e,
    }
}

/// Asserts `r` fails with a message containing `want`.
#[track_caller]
fn refused<T>(r: Result<T, String>, want: &str) {
    let e = error(r);
    assert!(e.contains(want), "message {e:?} lacks {want:?}");
}

/// Asserts that `rule` refuses each case's input with a message containing the case's text.
#[track_caller]
fn refuses<T>(rule: impl Fn(&str) -> Result<T, String>, cases: &[(&str, &str)]) {
    for (input, want) in cases {
        match rule(input) {
            Ok(_) => panic!("{input:?} accepted; expected a refusal naming {want:?}"),
            Err(e) => assert!(e.contains(want), "{input:?}: message {e:?} lacks {want:?}"),
        }
    }
}

/// Asserts that `rewrite` makes each case's code into the case's text.
#[track_caller]
fn rewrites(rewrite: impl Fn(&str) -> Result<String, String>, cases: &[(&str, &str)]) {
    for (code, want) in cases {
        assert_eq!(rewrite(code).as_deref(), Ok(*want), "rewriting {code:?}");
    }
}

/// A fresh folder of includes `<name>.lua` for one test, under cargo's scratch folder for tests.
fn includes_dir(test: &str, files: &[(&str, &str)]) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("build_rules").join(test);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the includes folder");
    for (name, text) in files {
        std::fs::write(dir.join(format!("{name}.lua")), text).expect("write an include");
    }
    dir
}

// The header against the body.

#[test]
fn a_whole_header_passes() {
    assert_eq!(check_header(SCRIPT, 1), Ok(()));
}

/// Asserts that [`SCRIPT`] with `from` replaced by `to` fails the header check of a one-key script with a
/// message containing `want`.
#[track_caller]
fn header_refused(from: &str, to: &str, want: &str) {
    assert!(SCRIPT.contains(from), "the fixture has {from:?}");
    refused(check_header(&SCRIPT.replace(from, to), 1), want);
}

#[test]
fn a_header_without_invariants_or_caps_fails() {
    header_refused("-- INVARIANTS\n", "", "header lacks a '-- INVARIANTS' section");
    header_refused("-- CAPS   the records given\n", "", "header lacks a '-- CAPS' line");
    header_refused("-- RETURNS\n", "", "header lacks a '-- RETURNS' section");
}

#[test]
fn the_file_names_key_count_must_be_the_headers() {
    refused(check_header(SCRIPT, 2), "file name says 2 keys, header declares 1");
}

#[test]
fn a_key_beyond_the_files_count_fails() {
    header_refused(
        "local k = KEYS[1]",
        "local k = KEYS[2]",
        "body uses KEYS[2] but declares 1 keys",
    );
    header_refused("local k = KEYS[1]", "local k = KEYS[0]", "body uses KEYS[0]");
}

#[test]
fn a_reply_tag_returns_does_not_declare_fails() {
    header_refused(
        "return {'missing'}",
        "return {'gone'}",
        "body returns tag 'gone' that RETURNS does not declare",
    );
}

#[test]
fn a_script_reads_only_when_its_invariants_say_so() {
    assert!(writes(SCRIPT));
    assert!(!writes(
        &SCRIPT.replace("--   writes the job", "--   reads only: a fixture")
    ));
    assert!(!writes(&SCRIPT.replace("--   writes the job", "--   writes nothing")));
}

#[test]
fn the_own_body_is_the_code_after_the_header_without_comments() {
    let text = format!("{SCRIPT}-- a comment\n--@include x\n--[[ kept ]]\nlocal y = 1\n");
    let body = own_body(&text);
    assert!(body.starts_with("local k = KEYS[1]\n"), "{body}");
    assert!(
        body.ends_with("return {'ok', 1}\n--[[ kept ]]\nlocal y = 1\n"),
        "{body}"
    );
    assert!(!body.contains("KEYS\n") && !body.contains("@include") && !body.contains("a comment"));
}

// The ARGV section.

#[test]
fn the_argv_section_declares_fixed_arguments_a_rest_and_records() {
    let spec = spec();
    let names: Vec<(&str, &str)> = spec.fixed.iter().map(|f| (f.name.as_str(), f.rust.as_str())).collect();
    assert_eq!(names, [("P", "prefix"), ("id", "id"), ("attempt", "attempt")]);
    assert!(spec.rest);
    assert_eq!(spec.records.len(), 1);
    let (record, fields) = &spec.records[0];
    assert_eq!(record, "RES");
    assert_eq!(
        fields.iter().map(|f| f.name.as_str()).collect::<Vec<_>>(),
        ["name", "value"]
    );
    assert!(!fields[0].bytes && fields[1].bytes);
    assert!(spec.bytes(), "a bytes field makes the script's values bytes");
    assert!(spec.shared.is_empty());
}

#[test]
fn fixed_arguments_are_numbered_in_order_and_the_rest_follows_them() {
    refuses(
        spec_of_argv,
        &[
            (
                "ARGV[1] P string\nARGV[3] id string\n",
                "`ARGV[3]`: fixed arguments are ARGV[1], ARGV[2], … in order",
            ),
            (
                "ARGV[1] P string\nARGV[3..] ids\n",
                "`ARGV[3..]`: the variable arguments start right after the 1 fixed ones",
            ),
            (
                "ARGV[1] P string\nARGV[2..] ids\nARGV[3] id string\n",
                "before any ARGV[k..]",
            ),
        ],
    );
    let ok = spec_of_argv("ARGV[1] P string\nARGV[2] W string\nARGV[3..] ids\n").expect("in order");
    assert_eq!(ok.fixed[1].rust, "workflow_id");
}

#[test]
fn an_argument_name_must_make_a_rust_field_and_its_type_be_known() {
    refuses(
        spec_of_argv,
        &[
            ("ARGV[1] type string\n", "argument name \"type\" must be snake_case"),
            ("ARGV[1] jobId string\n", "argument name \"jobId\" must be snake_case"),
            ("ARGV[1] id text\n", "argument id: unknown argument type \"text\""),
        ],
    );
    assert!(spec_of_argv("ARGV[1] id int(0..10)?\n").is_ok());
}

#[test]
fn a_records_fields_count_from_zero_in_order() {
    refuses(
        spec_of_argv,
        &[
            ("record REQ\n+1 id string\n", "record REQ: `+1` should be +0"),
            ("+0 id string\n", "`+0` outside a `record <NAME>`"),
            ("record REQ\n", "record REQ lists no fields"),
            (
                "record req\n+0 id string\n",
                "`record req`: a record's name is in capitals",
            ),
            ("record ARG\n+0 id string\n", "(not ARG)"),
            (
                "record REQ\n+0 id string\nrecord REQ\n+0 id string\n",
                "record REQ is declared twice",
            ),
        ],
    );
}

#[test]
fn a_shared_record_is_read_from_the_include_that_declares_it() {
    let dir = includes_dir(
        "shared_record",
        &[
            (
                "create",
                "-- record JOB\n--   +0 id string the id\n--   +1 queue string the queue\nlocal x = 1\n",
            ),
            ("argv", "-- ARGV[1] P string\n"),
        ],
    );
    let text = "-- ARGV\n--   ARGV[1] P string\n--   ARGV[2..] jobs\n--   record JOB = create\n-- RETURNS\n";
    let spec = arg_spec(text, &dir).expect("the include declares JOB");
    assert!(spec.shared.contains("JOB"));
    assert_eq!(
        spec.records[0].1.iter().map(|f| f.name.as_str()).collect::<Vec<_>>(),
        ["id", "queue"]
    );
    refused(
        arg_spec(&text.replace("JOB = create", "JOB = nope"), &dir),
        "`record JOB = nope`",
    );
    refused(
        arg_spec(&text.replace("JOB = create", "REQ = create"), &dir),
        "includes/create.lua declares no record REQ",
    );
    refused(
        include_records(&std::fs::read_to_string(dir.join("argv.lua")).expect("read"), &dir),
        "an include declares records only",
    );
}

// Argument names become numbers.

#[test]
fn argument_names_become_numbers() {
    let code = "local p, id, n = ARG.P, ARG.id, tonumber(ARG.attempt)\n\
                for i = ARG.REST, #ARGV, RES.STRIDE do\n  local v = ARGV[i + RES.value]\nend\n";
    let want = "local p, id, n = ARGV[1], ARGV[2], tonumber(ARGV[3])\n\
                for i = 4, #ARGV, 2 do\n  local v = ARGV[i + 1]\nend\n";
    rewrites(|c| inline_arg_names(c, &spec()), &[(code, want)]);
}

#[test]
fn a_record_offset_of_zero_is_left_out() {
    rewrites(
        |c| inline_arg_names(c, &spec()),
        &[
            ("local name = ARGV[base + RES.name]\n", "local name = ARGV[base]\n"),
            ("local name = ARGV[base +   RES.name]\n", "local name = ARGV[base]\n"),
            // Not after a `+`: the offset is written.
            ("f(RES.name)\n", "f(0)\n"),
        ],
    );
}

#[test]
fn a_record_offset_is_rewritten_in_a_real_scripts_shape() {
    let spec = spec_of_argv(
        "ARGV[1] P string\nARGV[2..] requests\nrecord REQ\n+0 worker_id string\n+1 count int\n\
         +2 strategy string\n+3 ack_id string\n",
    )
    .expect("spec");
    rewrites(
        |c| inline_arg_names(c, &spec),
        &[
            (
                "local ack_id = ARGV[base + REQ.ack_id]\n",
                "local ack_id = ARGV[base + 3]\n",
            ),
            ("local next = base + REQ.STRIDE\n", "local next = base + 4\n"),
        ],
    );
}

#[test]
fn an_undeclared_argument_name_fails() {
    refuses(
        |c| inline_arg_names(c, &spec()),
        &[
            ("local x = ARG.x\n", "ARG.x: the header declares no ARGV[i] x"),
            ("local x = RES.nope\n", "RES.nope: record RES declares no field nope"),
        ],
    );
    let no_rest = spec_of_argv("ARGV[1] P string\n").expect("spec");
    refused(
        inline_arg_names("for i = ARG.REST, #ARGV do end\n", &no_rest),
        "ARG.REST: the header declares",
    );
}

#[test]
fn a_numbered_argv_fails() {
    refuses(
        |c| inline_arg_names(c, &spec()),
        &[
            ("local x = ARGV[3]\n", "`ARGV[3]`: name the argument"),
            ("local x = ARGV[i + 1]\n", "`ARGV[i + 1]`: name the argument"),
        ],
    );
    // An index of names only is the script's own arithmetic.
    assert!(inline_arg_names("local x = ARGV[i]\n", &spec()).is_ok());
}

#[test]
fn only_whole_words_are_argument_names() {
    let code = "local a = MYARG.P .. XRES.name .. ARG_P\n";
    rewrites(|c| inline_arg_names(c, &spec()), &[(code, code)]);
}

// Record checks.

#[test]
fn a_record_check_becomes_its_checkers_call() {
    let code = "for i = ARG.REST, #ARGV, RES.STRIDE do check_RES(i) end\n";
    assert_eq!(
        inline_record_checks(code, "ack", &spec()).expect("checked"),
        "for i = ARG.REST, #ARGV, RES.STRIDE do ARG_RECORDS['ack.RES'](ARGV, i) end\n"
    );
}

#[test]
fn a_record_never_checked_or_unknown_fails() {
    refuses(
        |c| inline_record_checks(c, "ack", &spec()),
        &[
            ("local x = 1\n", "record RES is never checked"),
            (
                "check_RES(i) check_NOPE(i)\n",
                "check_<RECORD>(base) names a record the header declares",
            ),
        ],
    );
}

#[test]
fn a_record_checker_checks_the_whole_record_and_each_typed_field() {
    let spec = spec_of_argv("ARGV[1] P string\nrecord REQ\n+0 id string\n+1 count int(0..5)\n").expect("spec");
    let checker = record_checker("fetch", "fetch.REQ", &spec.records[0].1).expect("checker");
    assert!(checker.starts_with(
        "ARG_RECORDS['fetch.REQ'] = function(ARGV, b)\n\
         if #ARGV < b + 1 then arg_refuse('fetch', 'fetch.REQ', #ARGV, 'a whole record (2 arguments)') end\n"
    ));
    assert!(checker.contains("tonumber(ARGV[b + 1])"), "{checker}");
    assert!(!checker.contains("ARGV[b + 0]"), "a string needs no check: {checker}");
    assert!(checker.ends_with("end\nend\n"), "{checker}");
}

// Key calls.

#[test]
fn a_key_call_becomes_its_templates_concatenation() {
    rewrites(
        inline_key_calls,
        &[
            ("local k = key_job(P, id)\n", "local k = (P .. 'job:' .. (id))\n"),
            ("key_queue_ready(P, ARGV[2])", "(P .. 'q:' .. (ARGV[2]) .. ':ready')"),
            ("key_active(P)", "(P .. 'active')"),
            // Strings and brackets in an argument are one argument.
            ("key_job(P, f('a,b)', {1, 2}))", "(P .. 'job:' .. (f('a,b)', {1, 2})))"),
            // Calls within calls.
            ("key_job(P, key_active(P))", "(P .. 'job:' .. ((P .. 'active')))"),
            // Not at a word's start: not a key call.
            ("rekey_job(P, id)", "rekey_job(P, id)"),
        ],
    );
}

#[test]
fn a_key_call_of_no_family_or_the_wrong_parts_fails() {
    refuses(
        inline_key_calls,
        &[
            ("key_nope(P)", "key_nope(…) names no family of src/layout.rs"),
            (
                "key_job(P)",
                "key_job takes P and 1 part(s) ([\"id\"]); got 1 argument(s)",
            ),
            ("key_job(P, id", "unclosed call"),
        ],
    );
}

#[test]
fn a_key_name_written_by_hand_fails() {
    let e = error(check_no_key_names("local k = P .. 'x'\n"));
    assert!(e.contains("local k = P .. 'x'"), "the message shows the line: {e}");
    refuses(
        check_no_key_names,
        &[
            ("local k = P .. 'x'\n", "writes a key name itself"),
            ("local k = ARG.P .. 'job:' .. id\n", "writes a key name itself"),
            // A family's text after one of its parts.
            ("local k = base .. ':ready'\n", "writes a key name itself"),
        ],
    );
    assert_eq!(
        check_no_key_names("local k = key_job(P, id)\nlocal s = P .. suffix\n"),
        Ok(())
    );
    assert_eq!(check_no_key_names("local s = MYP .. 'x' -- P .. 'x'\n"), Ok(()));
}

// Event calls.

#[test]
fn an_event_call_becomes_its_emit() {
    rewrites(
        inline_event_calls,
        &[
            (
                "ev_job_available(P, id, q, t, now, 'ready')",
                "emit(P, 'job.available', id, q, t, now, '\\31' .. text('ready'))",
            ),
            (
                "ev_job_discarded(P, id, q, t, now)",
                "emit(P, 'job.discarded', id, q, t, now, '')",
            ),
            // Optional parts and flags.
            (
                "ev_job_retrying(P, id, q, t, now, a, d, e, limited)",
                "emit(P, 'job.retrying', id, q, t, now, '\\31' .. part_opt(a) .. '\\31' .. text(d) .. '\\31' .. \
                 part_opt(e) .. '\\31' .. ((limited) and '1' or ''))",
            ),
        ],
    );
}

#[test]
fn an_event_of_no_kind_or_the_wrong_parts_fails() {
    refuses(
        inline_event_calls,
        &[
            ("ev_job_nope(P, id, q, t, now)", "ev_job_nope(…) names no event"),
            (
                "ev_job_available(P, id, q, t, now)",
                "ev_job_available takes P, job_id, queue, job_type, now and [\"from\"]; got 5 argument(s)",
            ),
        ],
    );
}

#[test]
fn an_emit_written_by_hand_fails() {
    refuses(
        check_no_raw_emit,
        &[
            (
                "local a = 1\nlocal b = emit(P, 'job.x', id)\n",
                "line 2: emit(…) is written by build.rs",
            ),
            // At a line's start too (the count once said line 1 there).
            ("local a = 1\nemit(P, 'job.x', id)\n", "line 2: emit(…)"),
        ],
    );
    assert_eq!(
        check_no_raw_emit("rec_emit(x)\nev_job_deleted(P, id, q, t, now)\n"),
        Ok(())
    );
}

// Includes.

#[test]
fn includes_are_flattened_once_each_after_what_they_include() {
    let dir = includes_dir(
        "flatten",
        &[
            (
                "a",
                "-- a: a comment\n--@include b\nlocal function a() end\n--[[ kept ]]\n",
            ),
            ("b", "local function b() end\n"),
        ],
    );
    let mut seen = BTreeSet::new();
    let out = flatten("--@include a\n--@include b\n-- gone\nlocal x = 1\n", &dir, &mut seen).expect("flatten");
    assert_eq!(
        out,
        "local function b() end\nlocal function a() end\n--[[ kept ]]\nlocal x = 1\n"
    );
    assert_eq!(seen.into_iter().collect::<Vec<_>>(), ["a", "b"]);
    // Already in the library: not written again.
    let mut seen = BTreeSet::from(["b".to_string()]);
    assert_eq!(flatten("--@include b\n", &dir, &mut seen).expect("flatten"), "");
}

#[test]
fn an_include_cycle_ends_with_each_include_once() {
    let dir = includes_dir(
        "cycle",
        &[
            ("a", "--@include b\nlocal A = 1\n"),
            ("b", "--@include a\nlocal B = 2\n"),
        ],
    );
    let out = flatten("--@include a\n", &dir, &mut BTreeSet::new()).expect("a cycle ends");
    assert_eq!(out, "local B = 2\nlocal A = 1\n");
}

#[test]
fn an_unknown_include_fails() {
    let dir = includes_dir("unknown", &[("a", "--@include nope\n")]);
    refused(flatten("--@include a\n", &dir, &mut BTreeSet::new()), "include nope:");
}

#[test]
fn an_include_that_declares_records_reads_them_by_name() {
    let dir = includes_dir(
        "records",
        &[(
            "create",
            "-- record JOB\n--   +0 id string\n--   +1 queue string\nlocal q = ARGV[b + JOB.queue]\n",
        )],
    );
    let out = flatten("--@include create\n", &dir, &mut BTreeSet::new()).expect("flatten");
    assert_eq!(out, "local q = ARGV[b + 1]\n");
    let bad = includes_dir(
        "records_bad",
        &[("create", "-- record JOB\n--   +0 id string\nlocal q = JOB.nope\n")],
    );
    refused(
        flatten("--@include create\n", &bad, &mut BTreeSet::new()),
        "include create: JOB.nope",
    );
}

#[test]
fn a_loop_in_an_include_needs_caps() {
    let looped = "local function f(xs)\n  for _, x in ipairs(xs) do end\nend\n";
    refuses(
        check_include_caps,
        &[
            (looped, "has a loop but no CAPS comment"),
            ("while true do\nend\n", "has a loop"),
            ("repeat\nuntil done\n", "has a loop"),
        ],
    );
    assert_eq!(
        check_include_caps(&format!("-- CAPS: xs holds at most 100\n{looped}")),
        Ok(())
    );
    assert_eq!(check_include_caps("-- for each job\nlocal x = 1\n"), Ok(()));
}

// State per call.

const CALL_STATE: &str = "\
local memo = {}
local seen, count = {}, 0
local later
local function rec_begin()
  memo = {}
  seen = {}
end
local function f(x)
  memo[x] = true
  seen.last = x
end
later = function() return 1 end
";

#[test]
fn state_reset_by_a_calls_begin_passes() {
    assert_eq!(check_call_state(CALL_STATE), Ok(()));
}

#[test]
fn state_that_outlives_a_call_fails() {
    let kept = CALL_STATE.replace("  seen.last = x\n", "  seen.last = x\n  count = count + 1\n");
    let e = error(check_call_state(&kept));
    assert!(
        e.contains("state that outlives a call") && e.contains("count (\"count = count + 1\")"),
        "{e}"
    );
    assert!(!e.contains("memo") && !e.contains("seen"), "{e}");
    // A table filled in a function but not made anew per call.
    let unreset = CALL_STATE.replace("  memo = {}\n", "");
    refused(check_call_state(&unreset), "memo (\"memo[x] = true\")");
    // A local of the function itself is not the library's.
    assert_eq!(
        check_call_state(&CALL_STATE.replace("  memo[x] = true\n", "  local memo = 1\n  memo = 2\n")),
        Ok(())
    );
}

// Constants.

#[test]
fn constants_are_inlined() {
    let call = "local NOW = now_ms()\nf(NOW)\n";
    rewrites(
        inline_constants,
        &[
            (
                "local MAX = 10\nlocal NAME = 'ready'\nlocal SPAN = 2 * 60\nlocal lower = 3\n\
                 return MAX + SPAN, NAME, MAX_2, MAXIMUM, lower\n",
                "local lower = 3\nreturn 10 + (2 * 60), 'ready', MAX_2, MAXIMUM, lower\n",
            ),
            // The same definition twice (two includes) is one constant.
            ("local MAX = 10\nlocal MAX = 10\nf(MAX)\n", "f(10)\n"),
            // Not a literal: not a constant.
            (call, call),
        ],
    );
}

#[test]
fn a_constant_assigned_or_defined_twice_differently_fails() {
    refuses(
        inline_constants,
        &[
            (
                "local MAX = 10\nlocal function f()\n  MAX = 11\nend\n",
                "MAX is assigned besides its definition",
            ),
            (
                "local MAX = 10\nlocal MAX = 11\n",
                "MAX is defined twice, as 10 and as 11",
            ),
        ],
    );
}

// Top-level locals.

#[test]
fn top_level_locals_are_counted_by_name() {
    let body = "local function f() end\nlocal a, b, c = 1, 2, 3\nlocal d\n  local inner = 1\n\
                function g() local x = 1 end\nredis.register_function('op', function()\nlocal after = 1\nend)\n";
    assert_eq!(count_top_level_locals(body), 5);
}

#[test]
fn too_many_top_level_locals_fails() {
    let locals = |n: usize| (0..n).map(|i| format!("local x{i} = {i}\n")).collect::<String>();
    assert_eq!(check_top_level_locals(&locals(TOP_LEVEL_LOCALS_MAX)), Ok(()));
    refused(
        check_top_level_locals(&locals(TOP_LEVEL_LOCALS_MAX + 1)),
        &format!(
            "{} top-level locals, past {TOP_LEVEL_LOCALS_MAX} (Lua's limit is 200)",
            TOP_LEVEL_LOCALS_MAX + 1
        ),
    );
}

#[test]
fn the_librarys_top_level_locals_are_within_the_limit() {
    // The library is `#!lua name=…`, `local V = '<version>'`, then the body build.rs checked.
    let library = ojs_store::scripts::LIBRARY;
    let mut lines = library.splitn(3, '\n');
    assert!(lines.next().is_some_and(|l| l.starts_with("#!lua name=ojs_")));
    assert!(lines.next().is_some_and(|l| l.starts_with("local V = '")));
    let body = lines.next().expect("the body");
    let n = count_top_level_locals(body);
    println!("the library declares {n} top-level locals besides V (at most {TOP_LEVEL_LOCALS_MAX})");
    assert!(n > 0 && n <= TOP_LEVEL_LOCALS_MAX, "{n}");
    assert_eq!(count_top_level_locals(library), n + 1, "V is one more");
    assert!(n + 1 < 200, "Lua's limit");
    assert_eq!(check_top_level_locals(body), Ok(()));
}

// What build.rs generates.

#[test]
fn a_functions_prologue_checks_keys_and_fixed_arguments() {
    let checks = prologue("ack", SCRIPT, 1, &spec()).expect("prologue");
    let lines: Vec<&str> = checks.lines().collect();
    assert_eq!(
        lines[0],
        "if #KEYS ~= 2 then arg_refuse('ack', 'KEYS', #KEYS, '1 keys and the move guard') end"
    );
    assert_eq!(
        lines[1],
        "if #ARGV < 3 then arg_refuse('ack', 'ARGV', #ARGV, 'at least 3 arguments') end"
    );
    assert_eq!(
        lines[2],
        "if KEYS[1] ~= (ARGV[1] .. 'job:' .. ARGV[2]) then arg_refuse('ack', 'KEYS[1]', KEYS[1], 'the key P..job:..id') end"
    );
    assert!(
        lines[3].contains("tonumber(ARGV[3])") && lines[3].contains("n >= 1"),
        "{}",
        lines[3]
    );
    assert_eq!(lines.len(), 4, "P and id are strings: no check");
    // Without a variable part the count is exact.
    let exact = spec_of_argv("ARGV[1] P string\n").expect("spec");
    assert!(prologue("op", SCRIPT, 1, &exact)
        .expect("prologue")
        .contains("if #ARGV ~= 1 then arg_refuse('op', 'ARGV', #ARGV, '1 arguments') end"));
}

#[test]
fn the_twins_structs_follow_the_header() {
    let rust = rust_arg_structs("ack-1", "ack", &spec());
    assert!(rust.contains("pub struct AckArgs {\n"), "{rust}");
    assert!(
        rust.contains("    /// `ARGV[1]` P: string key prefix\n    pub prefix: String,\n"),
        "{rust}"
    );
    // A bytes field makes every value of the script bytes: the text ones are converted.
    assert!(rust.contains("pub fn push(self, out: &mut Vec<Vec<u8>>) {\n        out.push(self.prefix.into_bytes());"));
    assert!(
        rust.contains("pub const NAMES: [&'static str; 3] = [\"P\", \"id\", \"attempt\"];"),
        "{rust}"
    );
    assert!(rust.contains("pub struct AckResRecord {\n"), "{rust}");
    assert!(
        rust.contains("        out.push(self.name.into_bytes());\n        out.push(self.value);\n"),
        "{rust}"
    );
    assert!(rust.contains("pub const LEN: usize = 2;"), "{rust}");
    assert_eq!(camel("dead-retry"), "DeadRetry");
    assert_eq!(camel("REQ"), "Req");
}

#[test]
fn keys_methods_follow_the_layout() {
    let rust = rust_key_methods();
    assert!(
        rust.contains("    /// `Pq:{queue}:ready`\n    pub fn queue_ready(&self, queue: &str) -> String {\n"),
        "{rust}"
    );
    assert!(
        rust.contains("        k.push_str(queue);\n        k.push_str(\":ready\");\n"),
        "{rust}"
    );
}

#[test]
fn the_rules_assemble_the_library_the_crate_ships() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let generated = rules::library::generate(manifest).expect("lua/ passes every rule");
    let library = ojs_store::scripts::LIBRARY;
    assert!(generated
        .scripts_rs
        .contains(&format!("pub const LIBRARY: &str = {library:?};\n")));
    assert!(generated
        .keys_gen_rs
        .contains("pub fn queue_ready(&self, queue: &str) -> String"));
    assert!(generated.args_gen_rs.contains("pub struct HeartbeatArgs {"));
}
