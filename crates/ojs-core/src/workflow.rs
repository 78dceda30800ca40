//! Workflows (ojs-workflows): a chain, group or batch definition, validated into the jobs that
//! workflow-create-1.lua writes in one script (see lua/includes/workflow.lua for how they
//! advance). Two request forms:
//! - `POST /ojs/v1/workflows`: `{"type": "chain", "steps": [...]}`, `{"type": "group", "jobs": [...]}`,
//!   `{"type": "batch", "jobs": [...], "callbacks": {"on_complete"|"on_success"|"on_failure": job}}`;
//! - the seed's form on `POST /ojs/v1/jobs` (priority spec example 14.5): a job envelope with a
//!   `workflow: {"chain": [...]}` object; the envelope itself is the chain's first step.
//!
//! Priority (seed §9.2): a member that sets no priority inherits the workflow's (the workflow object's
//! own priority field in the model in force, or the root envelope's in the seed form); in the seed form
//! a step that names no queue also runs in the root's queue.

use serde_json::{Map, Value};

use crate::envelope::{self, EnvelopeRules};
use crate::error::{ErrorCode, OjsError};
use crate::job::NewJob;
use crate::names;
use crate::priority::PriorityModel;

/// Most steps or jobs one workflow may hold (callbacks come on top): they are written by one script.
pub const MAX_WORKFLOW_JOBS: usize = 10_000;

/// The batch callbacks, in the order the server fires them.
pub const CALLBACKS: [&str; 3] = ["on_complete", "on_success", "on_failure"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkflowKind {
    Chain,
    Group,
    Batch,
}

impl WorkflowKind {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "chain" => Some(Self::Chain),
            "group" => Some(Self::Group),
            "batch" => Some(Self::Batch),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Chain => "chain",
            Self::Group => "group",
            Self::Batch => "batch",
        }
    }

    /// The request field that lists the members: a chain's ordered `steps`, a group's or batch's `jobs`.
    pub fn members_field(self) -> &'static str {
        match self {
            Self::Chain => "steps",
            Self::Group | Self::Batch => "jobs",
        }
    }
}

/// A workflow that passed validation: its members, then its callbacks, as the jobs to write.
#[derive(Debug, Clone)]
pub struct NewWorkflow {
    pub id: String,
    /// Whether the server made `id` (the client sent none): only then may it name a shard.
    pub id_generated: bool,
    pub kind: WorkflowKind,
    pub name: String,
    /// The steps (chain) or jobs (group, batch), in order, followed by the callbacks.
    pub jobs: Vec<NewJob>,
    /// How many of `jobs` are steps or jobs; the rest are callbacks.
    pub members: usize,
    /// The callback name of each of `jobs[members..]`.
    pub callbacks: Vec<&'static str>,
}

fn invalid(msg: impl Into<String>) -> OjsError {
    OjsError::invalid(msg)
}

/// Copies what a member inherits from `from` (the workflow object or the root envelope) when the member
/// does not set it: the priority in the model's own field, and, when `queue` is set, the queue.
fn inherit(member: &mut Map<String, Value>, from: &Map<String, Value>, model: PriorityModel, queue: bool) {
    let set = |v: Option<&Value>| v.filter(|v| !v.is_null()).cloned();
    let options_of = |m: &Map<String, Value>| m.get("options").and_then(Value::as_object).cloned();
    let from_options = options_of(from).unwrap_or_default();
    let mut options = options_of(member).unwrap_or_default();
    match model {
        PriorityModel::Seed => {
            if set(member.get("priority")).is_none() {
                if let Some(p) = set(from.get("priority")) {
                    member.insert("priority".into(), p);
                }
            }
        }
        PriorityModel::Core => {
            if set(options.get("priority")).is_none() {
                if let Some(p) = set(from_options.get("priority")) {
                    options.insert("priority".into(), p);
                }
            }
        }
    }
    if queue && set(member.get("queue")).is_none() && set(options.get("queue")).is_none() {
        if let Some(q) = set(from.get("queue")).or_else(|| set(from_options.get("queue"))) {
            member.insert("queue".into(), q);
        }
    }
    if !options.is_empty() {
        member.insert("options".into(), Value::Object(options));
    }
}

/// Validates one member (`field[i]`) as a job envelope, after inheritance.
fn member(
    v: &Value,
    field: &str,
    from: &Map<String, Value>,
    rules: &EnvelopeRules,
    queue: bool,
) -> Result<NewJob, OjsError> {
    let Value::Object(m) = v else {
        return Err(invalid(format!(
            "{field} must be a job envelope (a JSON object); got {v}"
        )));
    };
    // A member that lists members of its own, or carries the seed's chain form, is a workflow.
    let nested = ["steps", "jobs"]
        .into_iter()
        .find(|k| m.get(*k).is_some_and(Value::is_array))
        .or(m.get("workflow").is_some_and(|w| !w.is_null()).then_some("workflow"));
    if let Some(k) = nested {
        return Err(OjsError::unprocessable(format!(
            "{field}: nested workflows (a chain, group or batch inside another) are not supported; \
             give job envelopes (this one carries {k})"
        )));
    }
    let mut m = m.clone();
    inherit(&mut m, from, rules.priority_model, queue);
    let job = envelope::parse(Value::Object(m), rules).map_err(|e| OjsError {
        message: format!("{field}: {}", e.message),
        ..e
    })?;
    // A member that is never written (a unique duplicate) or completed unrun (superseded) would leave
    // its workflow waiting for an outcome that has no place in it.
    if job.unique.is_some() || job.dedup.is_some() || job.root_job.is_some() {
        return Err(OjsError::unprocessable(format!(
            "{field}: a workflow's jobs cannot carry a unique policy, dedup or root_job"
        )));
    }
    Ok(job)
}

fn workflow_id(o: &Map<String, Value>) -> Result<String, OjsError> {
    match o.get("id") {
        None | Some(Value::Null) => Ok(names::new_job_id()),
        Some(Value::String(s)) => {
            names::check_job_id(s).map_err(|e| invalid(format!("id: {e}")))?;
            Ok(s.clone())
        }
        Some(v) => Err(invalid(format!("id must be a UUIDv7 string; got {v}"))),
    }
}

fn check_size(n: usize) -> Result<(), OjsError> {
    if n > MAX_WORKFLOW_JOBS {
        return Err(OjsError::new(
            ErrorCode::PayloadTooLarge,
            format!("a workflow holds at most {MAX_WORKFLOW_JOBS} steps or jobs; got {n}"),
        ));
    }
    Ok(())
}

/// Validates a `POST /ojs/v1/workflows` body.
pub fn parse(body: Value, rules: &EnvelopeRules) -> Result<NewWorkflow, OjsError> {
    let Value::Object(o) = body else {
        return Err(invalid("a workflow must be a JSON object"));
    };
    let kind = match o.get("type") {
        Some(Value::String(t)) => WorkflowKind::parse(t)
            .ok_or_else(|| invalid(format!("type must be one of chain, group, batch; got {t:?}")))?,
        None | Some(Value::Null) => return Err(invalid("type is required: chain, group or batch")),
        Some(v) => {
            return Err(invalid(format!(
                "type must be a string (chain, group or batch); got {v}"
            )))
        }
    };
    let name = match o.get("name") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) if s.len() <= names::MAX_NAME_LEN => s.clone(),
        Some(v) => {
            return Err(invalid(format!(
                "name must be a string of at most {} bytes; got {v}",
                names::MAX_NAME_LEN
            )))
        }
    };
    let field = kind.members_field();
    let list = match o.get(field) {
        Some(Value::Array(a)) if !a.is_empty() => a,
        Some(Value::Array(_)) => return Err(invalid(format!("{field} must hold at least one job"))),
        None | Some(Value::Null) => {
            return Err(invalid(format!(
                "{field} is required: a {} lists its members in {field}",
                kind.as_str()
            )))
        }
        Some(v) => return Err(invalid(format!("{field} must be an array of job envelopes; got {v}"))),
    };
    let callbacks = match (kind, o.get("callbacks")) {
        (WorkflowKind::Batch, Some(Value::Object(c))) => {
            if let Some(k) = c.keys().find(|k| !CALLBACKS.contains(&k.as_str())) {
                return Err(invalid(format!(
                    "callbacks.{k} is not a callback; give on_complete, on_success or on_failure"
                )));
            }
            let cbs: Vec<_> = CALLBACKS
                .iter()
                .filter_map(|n| c.get(*n).filter(|v| !v.is_null()).map(|v| (*n, v)))
                .collect();
            if cbs.is_empty() {
                return Err(invalid(
                    "callbacks must hold at least one of on_complete, on_success, on_failure",
                ));
            }
            cbs
        }
        (WorkflowKind::Batch, None | Some(Value::Null)) => return Err(invalid(
            "callbacks is required for a batch (on_complete, on_success or on_failure); without callbacks use a group",
        )),
        (WorkflowKind::Batch, Some(v)) => return Err(invalid(format!("callbacks must be an object; got {v}"))),
        (_, None | Some(Value::Null)) => Vec::new(),
        (_, Some(_)) => {
            return Err(invalid(format!(
                "callbacks belong to a batch; a {} has none",
                kind.as_str()
            )))
        }
    };
    check_size(list.len())?;
    let mut jobs = Vec::with_capacity(list.len() + callbacks.len());
    for (i, v) in list.iter().enumerate() {
        jobs.push(member(v, &format!("{field}[{i}]"), &o, rules, false)?);
    }
    for (n, v) in &callbacks {
        jobs.push(member(v, &format!("callbacks.{n}"), &o, rules, false)?);
    }
    Ok(NewWorkflow {
        id_generated: matches!(o.get("id"), None | Some(Value::Null)),
        id: workflow_id(&o)?,
        kind,
        name,
        members: list.len(),
        callbacks: callbacks.iter().map(|(n, _)| *n).collect(),
        jobs,
    })
}

/// The seed's form on `POST /ojs/v1/jobs`: an envelope with `workflow: {"chain": [...]}`. `None` when
/// the body has no `workflow` field (an ordinary job).
pub fn parse_job_form(body: &Value, rules: &EnvelopeRules) -> Option<Result<NewWorkflow, OjsError>> {
    let o = body.as_object()?;
    let wf = o.get("workflow").filter(|w| !w.is_null())?;
    Some((|| {
        let w = wf
            .as_object()
            .ok_or_else(|| invalid(format!("workflow must be an object holding a chain array; got {wf}")))?;
        if let Some(k) = w.keys().find(|k| k.as_str() != "chain") {
            return Err(invalid(format!(
                "workflow.{k} is not supported here: workflow holds a chain array (use POST /ojs/v1/workflows for groups and batches)"
            )));
        }
        let chain = match w.get("chain") {
            Some(Value::Array(a)) => a,
            _ => return Err(invalid("workflow.chain must be an array of job envelopes")),
        };
        check_size(chain.len() + 1)?;
        let mut root = o.clone();
        root.remove("workflow");
        let mut jobs = Vec::with_capacity(chain.len() + 1);
        jobs.push(envelope::parse(Value::Object(root.clone()), rules)?);
        for (i, v) in chain.iter().enumerate() {
            jobs.push(member(v, &format!("workflow.chain[{i}]"), &root, rules, true)?);
        }
        Ok(NewWorkflow {
            id_generated: true,
            id: names::new_job_id(),
            kind: WorkflowKind::Chain,
            name: jobs[0].job_type.clone(),
            members: jobs.len(),
            callbacks: Vec::new(),
            jobs,
        })
    })())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn seed() -> EnvelopeRules {
        EnvelopeRules::default()
    }

    #[test]
    fn chain_steps_inherit_the_workflow_priority_unless_they_set_their_own() {
        let w = parse(
            json!({"type": "chain", "priority": 1, "steps": [
                {"type": "a", "args": []}, {"type": "b", "args": [], "priority": 7}]}),
            &seed(),
        )
        .expect("valid");
        assert_eq!(w.jobs.iter().map(|j| j.priority).collect::<Vec<_>>(), [1, 7]);
        assert_eq!((w.members, w.callbacks.len()), (2, 0));
    }

    #[test]
    fn core_model_inherits_options_priority() {
        let rules = EnvelopeRules {
            priority_model: PriorityModel::Core,
            ..Default::default()
        };
        let w = parse(
            json!({"type": "group", "options": {"priority": 9}, "jobs": [
                {"type": "a", "args": [], "options": {"queue": "q"}}, {"type": "b", "args": [], "options": {"priority": -3}}]}),
            &rules,
        )
        .expect("valid");
        assert_eq!(w.jobs.iter().map(|j| j.priority).collect::<Vec<_>>(), [9, -3]);
        assert_eq!(w.jobs[0].queue, "q");
    }

    #[test]
    fn seed_job_form_runs_the_root_first_and_steps_inherit_priority_and_queue() {
        let body = json!({"type": "order.process", "queue": "orders", "args": [1], "priority": 1,
            "workflow": {"chain": [{"type": "payment.charge", "args": []},
                {"type": "shipping.schedule", "args": [], "priority": 3, "queue": "ship"}]}});
        let w = parse_job_form(&body, &seed()).expect("workflow").expect("valid");
        let got: Vec<_> = w
            .jobs
            .iter()
            .map(|j| (j.job_type.as_str(), j.priority, j.queue.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("order.process", 1, "orders"),
                ("payment.charge", 1, "orders"),
                ("shipping.schedule", 3, "ship")
            ]
        );
        assert!(!w.jobs[0].doc.contains("workflow"), "{}", w.jobs[0].doc);
        assert!(parse_job_form(&json!({"type": "a", "args": []}), &seed()).is_none());
    }

    #[test]
    fn bad_definitions_name_the_field() {
        for (body, needle) in [
            (json!({"type": "dag", "steps": []}), "chain, group, batch"),
            (
                json!({"type": "chain", "jobs": [{"type": "a", "args": []}]}),
                "steps is required",
            ),
            (json!({"type": "group", "jobs": []}), "at least one"),
            (
                json!({"type": "batch", "jobs": [{"type": "a", "args": []}]}),
                "callbacks is required",
            ),
            (
                json!({"type": "batch", "jobs": [{"type": "a", "args": []}], "callbacks": {"on_done": {}}}),
                "callbacks.on_done",
            ),
            (
                json!({"type": "group", "jobs": [{"type": "a", "args": []}], "callbacks": {}}),
                "belong to a batch",
            ),
            (
                json!({"type": "chain", "steps": [{"type": "a", "args": [], "priority": -1}]}),
                "steps[0]: ",
            ),
            (
                json!({"type": "chain", "steps": [{"type": "group", "jobs": []}]}),
                "nested",
            ),
            (
                json!({"type": "group", "jobs": [{"type": "a", "args": [], "workflow": {"chain": []}}]}),
                "jobs[0]: nested workflows",
            ),
        ] {
            let e = parse(body.clone(), &seed()).unwrap_err();
            assert!(e.message.contains(needle), "{body}: {}", e.message);
        }
        let many: Vec<Value> = (0..=MAX_WORKFLOW_JOBS)
            .map(|_| json!({"type": "a", "args": []}))
            .collect();
        let e = parse(json!({"type": "group", "jobs": many}), &seed()).unwrap_err();
        assert_eq!(e.code, ErrorCode::PayloadTooLarge);
    }
}
