//! The Lua scripts, flattened at build time from `lua/` (see `build.rs`, which also checks each
//! header against its body). A misspelt script name is a compile error.

/// One flattened script: its operation name (also the metric label), declared key count and source.
#[derive(Debug, Clone, Copy)]
pub struct ScriptSource {
    pub name: &'static str,
    pub keys: usize,
    pub source: &'static str,
}

include!(concat!(env!("OUT_DIR"), "/scripts.rs"));
