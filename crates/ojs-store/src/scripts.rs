//! The Lua operations, built at compile time from `lua/` into one Redis Functions library ([`LIBRARY`];
//! see `build.rs`, which also checks each script's header against its body). A misspelt operation
//! name is a compile error.

/// One operation of the library: its name (also the metric label), its function's name without the
/// version suffix, its declared key count, and whether it changes state (from its header's INVARIANTS).
#[derive(Debug, Clone, Copy)]
pub struct ScriptSource {
    pub name: &'static str,
    pub function: &'static str,
    pub keys: usize,
    pub writes: bool,
}

impl ScriptSource {
    /// The name to `FCALL`: `<function>_<LIBRARY_VERSION>`.
    pub fn function_name(&self) -> String {
        format!("{}_{}", self.function, LIBRARY_VERSION)
    }
}

include!(concat!(env!("OUT_DIR"), "/scripts.rs"));
