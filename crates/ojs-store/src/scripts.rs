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

#[cfg(test)]
mod tests {
    #[test]
    fn the_library_builds_keys_inline_from_the_layout() {
        // build.rs replaces every key_<family>(P, …) call by its template's concatenation.
        assert!(
            !super::LIBRARY.contains("key_"),
            "a key function call was left in the library"
        );
        assert!(super::LIBRARY.contains("(P .. 'q:' .. (queue) .. ':ready')"));
        assert!(super::LIBRARY.contains("(P .. 'job:' .. (id))"));
    }

    #[test]
    fn the_library_numbers_the_arguments_the_scripts_name() {
        // build.rs replaces ARG.<name>, <RECORD>.<field> and <RECORD>.STRIDE by their numbers.
        for name in ["ARG.", "REQ.", "JOB.", "QUEUE.", "STRIDE", "REQ_FIELDS"] {
            assert!(!super::LIBRARY.contains(name), "{name} was left in the library");
        }
        // nack-1.lua's `ARG.lease_id` is its header's ARGV[10].
        assert!(super::LIBRARY.contains("{ lease = ARGV[10], attempt = ARGV[11], worker = ARGV[12] }"));
    }
}
