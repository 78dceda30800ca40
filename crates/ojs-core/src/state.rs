//! The job states, below every module that names them (the job, its uniqueness policy).

/// The eight OJS job states.
pub const STATES: [&str; 8] = [
    "scheduled",
    "available",
    "pending",
    "active",
    "completed",
    "retryable",
    "cancelled",
    "discarded",
];

pub fn is_terminal(state: &str) -> bool {
    matches!(state, "completed" | "cancelled" | "discarded")
}
