//! The job states, below every module that names them (the job, its uniqueness policy).

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa::openapi::RefOr;

/// An OJS job state. Its name ([`JobState::as_str`]) is how records, the API and the Lua scripts
/// spell it: serde reads and writes the name, and the OpenAPI schema `JobState` lists the names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JobState {
    Scheduled,
    Available,
    Pending,
    Active,
    Completed,
    Retryable,
    Cancelled,
    Discarded,
}

impl JobState {
    /// The eight states, in the order the API lists them.
    pub const ALL: [JobState; 8] = [
        JobState::Scheduled,
        JobState::Available,
        JobState::Pending,
        JobState::Active,
        JobState::Completed,
        JobState::Retryable,
        JobState::Cancelled,
        JobState::Discarded,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            JobState::Scheduled => "scheduled",
            JobState::Available => "available",
            JobState::Pending => "pending",
            JobState::Active => "active",
            JobState::Completed => "completed",
            JobState::Retryable => "retryable",
            JobState::Cancelled => "cancelled",
            JobState::Discarded => "discarded",
        }
    }

    /// Completed, cancelled or discarded: the job moves no more.
    pub const fn is_terminal(self) -> bool {
        matches!(self, JobState::Completed | JobState::Cancelled | JobState::Discarded)
    }
}

/// The names of the eight OJS job states ([`JobState::ALL`]).
pub const STATES: [&str; 8] = {
    let mut names = [""; 8];
    let mut i = 0;
    while i < names.len() {
        names[i] = JobState::ALL[i].as_str();
        i += 1;
    }
    names
};

pub fn is_terminal(state: &str) -> bool {
    state.parse().is_ok_and(JobState::is_terminal)
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is not one of [`STATES`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown job state {0:?}; the states are {states}", states = STATES.join(", "))]
pub struct UnknownState(pub String);

impl FromStr for JobState {
    type Err = UnknownState;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        JobState::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| UnknownState(s.to_string()))
    }
}

impl serde::Serialize for JobState {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for JobState {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = <Cow<'de, str>>::deserialize(d)?;
        name.parse()
            .map_err(|_| serde::de::Error::unknown_variant(&name, &STATES))
    }
}

impl utoipa::PartialSchema for JobState {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .enum_values(Some(STATES))
            .description(Some("The eight OJS job states (`ojs_core::job::STATES`)."))
            .into()
    }
}

impl utoipa::ToSchema for JobState {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("JobState")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_reads_and_writes_its_name() {
        for st in JobState::ALL {
            assert_eq!(st.as_str().parse::<JobState>(), Ok(st));
            assert_eq!(st.to_string(), st.as_str());
            let json = serde_json::to_value(st).expect("json");
            assert_eq!(json, st.as_str());
            assert_eq!(serde_json::from_value::<JobState>(json).expect("a state"), st);
            assert_eq!(is_terminal(st.as_str()), st.is_terminal());
        }
        assert_eq!(
            STATES,
            [
                "scheduled",
                "available",
                "pending",
                "active",
                "completed",
                "retryable",
                "cancelled",
                "discarded"
            ]
        );
        assert!(serde_json::from_str::<JobState>("\"done\"").is_err());
        assert!(!is_terminal("done"));
        assert!(is_terminal("completed") && is_terminal("cancelled") && is_terminal("discarded"));
    }
}
