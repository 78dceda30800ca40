//! A job's checkpoint (the durable-execution extension): the state a worker saved for the job's next
//! attempt to resume from. One per job at most, stored beside its record (`lua/includes/checkpoint.lua`),
//! handed to the attempt FETCH starts, and shown by the checkpoint routes in the shapes the extension,
//! its conformance suite and the official SDKs read.

use serde::Serialize;
use serde_json::value::RawValue;

use crate::clock;

/// The largest checkpoint state, serialized (ojs-durable-execution §9.1: 1 MB); a larger one is a 413.
pub const MAX_STATE_BYTES: usize = 1_048_576;
/// The largest `metadata` the SDKs send beside it (their replay log lives there), serialized; a 413.
pub const MAX_METADATA_BYTES: usize = 1_048_576;

/// A checkpoint as stored and read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// The state, JSON text as the worker sent it.
    pub state: String,
    /// Saves since the checkpoint was last deleted (the first is 1).
    pub sequence: i64,
    /// When it was last saved (epoch ms, Redis' clock).
    pub saved_at_ms: i64,
    /// The SDKs' `metadata`: a JSON object of strings, as text.
    pub metadata: Option<String>,
    /// The SDKs' `step_index`.
    pub step_index: Option<i64>,
}

/// The JSON of a checkpoint: `{job_id?, state, sequence, created_at, step_index?, metadata?}`.
#[derive(Serialize)]
struct View<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    job_id: Option<&'a str>,
    state: &'a RawValue,
    sequence: i64,
    created_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    step_index: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    metadata: Option<&'a RawValue>,
}

impl Checkpoint {
    /// The checkpoint as JSON, naming `job_id` when given. Stored JSON is shown as stored (a state that
    /// does not parse, which the server never writes, shows as null).
    pub fn view(&self, job_id: Option<&str>) -> Box<RawValue> {
        let null = RawValue::from_string("null".into()).unwrap_or_else(|_| unreachable!("null is JSON"));
        let state = serde_json::from_str::<&RawValue>(&self.state).unwrap_or(&null);
        let view = View {
            job_id,
            state,
            sequence: self.sequence,
            created_at: clock::format_ms(self.saved_at_ms),
            step_index: self.step_index,
            metadata: self
                .metadata
                .as_deref()
                .and_then(|m| serde_json::from_str::<&RawValue>(m).ok()),
        };
        serde_json::value::to_raw_value(&view).unwrap_or(null)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkpoint_shows_its_state_as_stored_and_the_sdks_fields_only_when_sent() {
        let c = Checkpoint {
            state: r#"{"n":1.50,"big":12345678901234567890}"#.into(),
            sequence: 3,
            saved_at_ms: 0,
            metadata: None,
            step_index: None,
        };
        assert_eq!(
            c.view(Some("j")).get(),
            r#"{"job_id":"j","state":{"n":1.50,"big":12345678901234567890},"sequence":3,"created_at":"1970-01-01T00:00:00Z"}"#
        );
        let c = Checkpoint {
            metadata: Some(r#"{"attempt":"2"}"#.into()),
            step_index: Some(4),
            ..c
        };
        let v: serde_json::Value = serde_json::from_str(c.view(None).get()).unwrap();
        assert_eq!(v["metadata"]["attempt"], "2");
        assert_eq!(v["step_index"], 4);
        assert!(v.get("job_id").is_none());
    }
}
