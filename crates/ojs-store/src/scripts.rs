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

/// The scripts' argument types, as build.rs reads them (the tests hold their bounds to the boundary's).
#[cfg(test)]
#[allow(dead_code)]
#[path = "../build/arg_types.rs"]
mod arg_types;

#[cfg(test)]
mod tests {
    #[test]
    fn a_scripts_ms_argument_takes_every_time_the_boundary_accepts() {
        // The HTTP boundary refuses a time outside ojs_core::clock's range with a 400 naming the field;
        // past it, no script refuses one (a script's refusal is a 500).
        assert_eq!(super::arg_types::MS_LIMIT, ojs_core::clock::MS_LIMIT);
    }

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
