//! The default retry policy's numbers, plain data with no imports: [`crate::job::RetryPolicy`]'s
//! `Default` is made of them, and ojs-store's build.rs gives the Lua library the same values
//! (`RETRY_MAX_ATTEMPTS`, `RETRY_BACKOFF`) for a record that carries no policy of its own
//! (`lua/includes/fail.lua`, `lua/requeue-1.lua`), so each default is written once.

/// Attempts before a job is discarded (or dead-lettered).
pub const MAX_ATTEMPTS: u32 = 3;
/// The first retry's delay.
pub const INITIAL_INTERVAL_MS: u64 = 1_000;
/// Each later delay is the one before times this (exponential backoff).
pub const BACKOFF_COEFFICIENT: f64 = 2.0;
/// No delay is longer.
pub const MAX_INTERVAL_MS: u64 = 300_000;
/// Each delay is multiplied by a random factor from 0.5 to 1.5.
pub const JITTER: bool = true;
/// The strategy's name, as records spell it (`exponential`, `linear`, `constant`).
pub const STRATEGY: &str = "exponential";
