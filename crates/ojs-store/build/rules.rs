//! build.rs's logic, as modules of their own (build.rs is only their `main`), so that
//! `tests/build_rules.rs` can include them too and test each rule on small Lua snippets (a build script's
//! own `#[cfg(test)]` tests are never run). Paths are relative to this file: both crates see the same.

#[path = "arg_types.rs"]
pub mod arg_types;
#[path = "checks.rs"]
pub mod checks;
#[path = "../../ojs-core/src/event_kinds.rs"]
pub mod event_kinds;
#[path = "../src/fnv.rs"]
pub mod fnv;
#[path = "generate.rs"]
pub mod generate;
#[path = "../src/layout.rs"]
pub mod layout;
#[path = "library.rs"]
pub mod library;
#[path = "../../ojs-core/src/retry_defaults.rs"]
pub mod retry_defaults;
#[path = "rewrite.rs"]
pub mod rewrite;
#[path = "script.rs"]
pub mod script;
