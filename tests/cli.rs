//! The `ojs-server` binary's command line where it serves nothing: `--print-lua-library` prints the Redis
//! Functions library and exits, with no Redis to talk to.

use std::process::Command;

fn ojs_server(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ojs-server"))
        .args(args)
        // No OJS_* setting of the caller's, and a Redis that is not there.
        .env_clear()
        .env("OJS_REDIS_URL", "redis://127.0.0.1:1")
        .output()
        .expect("run ojs-server")
}

#[test]
fn print_lua_library_prints_the_library_redis_loads_and_exits() {
    let out = ojs_server(&["--print-lua-library"]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).expect("UTF-8");
    assert!(text.starts_with("#!lua name=ojs_"), "{}", &text[..text.len().min(200)]);
    assert!(text.contains("\nredis.register_function('fetch_' .. V, function(KEYS, ARGV)\n"));
    assert_eq!(text, ojs_store::scripts::LIBRARY, "byte for byte, and nothing else");
}

#[test]
fn help_names_print_lua_library() {
    let out = ojs_server(&["--help"]);
    assert!(out.status.success(), "{out:?}");
    let help = String::from_utf8(out.stdout).expect("UTF-8");
    assert!(help.contains("--print-lua-library"), "{help}");
    assert!(help.contains("Print the Redis Functions library"), "{help}");
}
