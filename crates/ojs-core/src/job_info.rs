//! [`JobInfo`]: a job as the API shows it ([`crate::job::job_view`] writes it), read back typed with
//! the members a client acts on. Members it does not name are skipped when read, so a client of this
//! type keeps working when the server adds some.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::newtypes::{JobId, QueueName};
use crate::state::JobState;

/// A job as enqueue, fetch and `GET /ojs/v1/jobs/{id}` answer it: the envelope's members a worker
/// needs, the state, and the claim (`lease_id`, on a job fetched and still held).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobInfo {
    pub id: JobId,
    #[serde(rename = "type")]
    pub job_type: String,
    pub queue: QueueName,
    #[serde(default)]
    pub args: Value,
    pub state: JobState,
    /// How many times the job was claimed (1 on its first run).
    #[serde(default)]
    pub attempt: u32,
    /// As the client gave it, in the server's priority model (seed: lower runs first; core: higher
    /// runs first and possibly negative), so a plain integer rather than a [`crate::newtypes::Priority`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i64>,
    /// The claim's identity, sent back with ACK, NACK and heartbeat.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<Value>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_a_servers_job_view_and_round_trips() {
        // As job_view writes a fetched job (job.rs' test), with a real id.
        let text = r#"{"type":"email.send","queue":"default","args":[{"to":"a"}],"meta":{"z":1},"id":"019461a8-1a2b-7c3d-8e4f-5a6b7c8d9e0f","state":"active","priority":2,"attempt":1,"max_attempts":3,"created_at":"2026-11-27T05:34:30.771Z","worker_id":"w-1","visibility_deadline":"2026-11-27T05:35:00.800Z","lease_id":"1"}"#;
        let j: JobInfo = serde_json::from_str(text).expect("a job");
        assert_eq!(j.id, "019461a8-1a2b-7c3d-8e4f-5a6b7c8d9e0f");
        assert_eq!(
            (j.job_type.as_str(), j.queue.as_str(), j.state, j.attempt),
            ("email.send", "default", JobState::Active, 1)
        );
        assert_eq!(j.args, json!([{"to": "a"}]));
        assert_eq!((j.priority, j.lease_id.as_deref()), (Some(2), Some("1")));
        let back: JobInfo = serde_json::from_value(serde_json::to_value(&j).expect("json")).expect("back");
        assert_eq!(back, j);
    }

    #[test]
    fn refuses_a_view_with_a_bad_id_queue_or_state_and_defaults_the_rest() {
        let ok = json!({"id": "019461a8-1a2b-7c3d-8e4f-5a6b7c8d9e0f", "type": "t", "queue": "q", "state": "available"});
        let j: JobInfo = serde_json::from_value(ok.clone()).expect("minimal");
        assert_eq!((j.attempt, j.args.is_null(), j.lease_id.as_deref()), (0, true, None));
        assert!(!serde_json::to_value(&j)
            .expect("json")
            .as_object()
            .is_some_and(|o| o.contains_key("lease_id")));
        for (k, bad) in [("id", json!("j1")), ("queue", json!("Q")), ("state", json!("done"))] {
            let mut v = ok.clone();
            v[k] = bad;
            assert!(serde_json::from_value::<JobInfo>(v).is_err(), "{k}");
        }
    }
}
