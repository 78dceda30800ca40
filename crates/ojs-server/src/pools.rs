//! Worker pools (ojs-fair-scheduling §6, §7): a named set of queues with the strategy that serves them,
//! kept in Redis on shard 0 (`P pool:<name>`, see docs/architecture.md), so every pod reads the same
//! pool and none keeps it. A FETCH that names a pool is served the pool's queues, strategy and weights
//! whatever the worker sent (the server's configuration wins, §5.2): [`Pool::fetch_plan`].
//!
//! The strategies are the FETCH's two: `strict` is FETCH's strict, `weighted` its smooth weighted
//! round-robin, and `round-robin` the same round-robin with every weight 1 (each run of as many claims
//! as the pool has queues takes one job of each queue that has work). `least-loaded` (§7.2) is not
//! served: it is refused by name.

use ojs_core::{clock, names, OjsError};
use ojs_store::Strategy;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::borrow::Cow;

use utoipa::openapi::schema::{AdditionalProperties, ArrayBuilder, ObjectBuilder, OneOfBuilder, Schema, Type};
use utoipa::openapi::RefOr;
use utoipa::ToSchema;

use crate::config::MAX_WEIGHT;
use crate::error::ApiResult;
use crate::state::AppState;

/// Most queues in one pool (as in one FETCH).
pub const MAX_POOL_QUEUES: usize = 100;
/// Most pools a deployment holds (so the listing is one bounded read).
pub const MAX_POOLS: u64 = 1_000;
/// The largest `concurrency` accepted.
pub const MAX_CONCURRENCY: u64 = 1_000_000;

/// How a pool's queues are served.
#[derive(Serialize, Deserialize, ToSchema, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum PoolStrategy {
    /// The queues in the pool's order, each drained before the next.
    Strict,
    /// Each queue with work in turn: the weighted round-robin with equal weights (the default).
    RoundRobin,
    /// Smooth weighted round-robin: in every run of sum(weights) claims, each queue with work gets
    /// its weight's share.
    Weighted,
}

/// What the strategies served are called, for error messages.
const SERVED: &str = "\"strict\", \"round-robin\" or \"weighted\"";

/// A pool as stored (`def` of `P pool:<name>`) and served.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct PoolDef {
    /// In the pool's order, each with its weight (1 unless the pool is weighted).
    pub queues: Vec<(String, u32)>,
    pub strategy: PoolStrategy,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u64>,
}

/// A pool read back: its definition and its times (ms, Redis' clock).
#[derive(Clone, Debug)]
pub struct Pool {
    pub name: String,
    pub def: PoolDef,
    pub created_at: i64,
    pub updated_at: i64,
}

/// The body of `PUT /admin/pools/{name}`. Unknown members are refused (a pool option this server does
/// not apply, such as `isolated`, is never silently dropped).
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PoolRequest {
    /// Optional; when given it must be the name in the path.
    #[serde(default)]
    #[schema(nullable = false)]
    pub name: Option<String>,
    /// The queues, in order (the order `strict` drains them in): names, `{"name", "weight"}` objects,
    /// or an object of queue name → weight or `{"weight"}`. 1 to 100 queues, each once.
    #[schema(value_type = PoolQueues)]
    pub queues: Value,
    /// `strict`, `round-robin` (default) or `weighted`.
    #[serde(default)]
    #[schema(value_type = Option<PoolStrategy>, nullable = false)]
    pub strategy: Option<String>,
    /// Weighted pools only: queue name → weight (1 to 1000). A queue given no weight, here or in
    /// `queues`, weighs 1.
    #[serde(default)]
    #[schema(value_type = Option<std::collections::HashMap<String, u32>>, nullable = false)]
    pub weights: Option<Value>,
    /// The most jobs the pool's workers should run at once (1 to 1,000,000). Recorded and shown beside
    /// `active_jobs`; the server does not hold FETCHes back by it.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 1000000, nullable = false)]
    pub concurrency: Option<u64>,
}

/// The forms `queues` may take in a pool: a list of names or `{"name", "weight"}` objects, or an
/// object of queue name → weight or `{"weight"}`. The server reads them by hand ([`parse_queues`],
/// to word each error by its place), so this schema is built here, beside that reader.
pub struct PoolQueues;

impl utoipa::PartialSchema for PoolQueues {
    fn schema() -> RefOr<Schema> {
        let weight = || {
            ObjectBuilder::new()
                .schema_type(Type::Integer)
                .minimum(Some(1))
                .maximum(Some(MAX_WEIGHT))
        };
        let weight_object = || {
            ObjectBuilder::new()
                .property("weight", weight())
                .additional_properties(Some(AdditionalProperties::FreeForm(false)))
        };
        let item = OneOfBuilder::new()
            .item(ObjectBuilder::new().schema_type(Type::String))
            .item(
                weight_object()
                    .property("name", ObjectBuilder::new().schema_type(Type::String))
                    .required("name"),
            );
        let by_name = OneOfBuilder::new().item(weight()).item(weight_object());
        OneOfBuilder::new()
            .item(
                ArrayBuilder::new()
                    .items(item)
                    .min_items(Some(1))
                    .max_items(Some(MAX_POOL_QUEUES)),
            )
            .item(
                ObjectBuilder::new()
                    .additional_properties(Some(AdditionalProperties::RefOr(RefOr::T(by_name.into()))))
                    .min_properties(Some(1))
                    .max_properties(Some(MAX_POOL_QUEUES)),
            )
            .into()
    }
}

impl ToSchema for PoolQueues {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("PoolQueues")
    }
}

/// A pool name from a request body or a PUT's path: the queue-name rules (it becomes a key part).
pub fn check_name(name: &str) -> Result<(), OjsError> {
    names::check_queue(name).map_err(|_| {
        OjsError::invalid(format!(
            "a pool name must match ^[a-z0-9][a-z0-9.-]*$ (the queue-name rules, at most {} characters); got {name:?}",
            names::MAX_NAME_LEN
        ))
    })
}

/// A weight from a request: an integer from 1 to [`MAX_WEIGHT`].
fn weight(v: &Value, at: &str) -> Result<u32, OjsError> {
    v.as_u64()
        .filter(|w| (1..=u64::from(MAX_WEIGHT)).contains(w))
        .map(|w| w as u32)
        .ok_or_else(|| OjsError::invalid(format!("{at} must be an integer from 1 to {MAX_WEIGHT}; got {v}")))
}

/// `queues` of a pool request: (name, weight given) in order.
fn parse_queues(v: Value) -> Result<Vec<(String, Option<u32>)>, OjsError> {
    let items: Vec<(String, Option<u32>)> = match v {
        Value::Array(list) => list
            .into_iter()
            .enumerate()
            .map(|(i, item)| match item {
                Value::String(s) => Ok((s, None)),
                Value::Object(mut m) => {
                    let name = match m.remove("name") {
                        Some(Value::String(s)) => s,
                        _ => {
                            return Err(OjsError::invalid(format!(
                                "queues[{i}] must be a queue name or {{\"name\": …, \"weight\": …}}"
                            )))
                        }
                    };
                    let w = match m.remove("weight") {
                        None | Some(Value::Null) => None,
                        Some(w) => Some(weight(&w, &format!("queues[{i}].weight"))?),
                    };
                    if let Some(k) = m.keys().next() {
                        return Err(OjsError::invalid(format!(
                            "queues[{i}] has an unknown member {k:?} (only name and weight)"
                        )));
                    }
                    Ok((name, w))
                }
                other => Err(OjsError::invalid(format!(
                    "queues[{i}] must be a queue name or an object; got {other}"
                ))),
            })
            .collect::<Result<_, _>>()?,
        Value::Object(m) => m
            .into_iter()
            .map(|(name, w)| {
                let at = format!("queues.{name}");
                let w = match w {
                    Value::Null => None,
                    Value::Number(_) => Some(weight(&w, &at)?),
                    Value::Object(mut o) => {
                        let w = match o.remove("weight") {
                            None | Some(Value::Null) => None,
                            Some(w) => Some(weight(&w, &format!("{at}.weight"))?),
                        };
                        if let Some(k) = o.keys().next() {
                            return Err(OjsError::invalid(format!(
                                "{at} has an unknown member {k:?} (only weight)"
                            )));
                        }
                        w
                    }
                    other => {
                        return Err(OjsError::invalid(format!(
                            "{at} must be a weight or {{\"weight\": …}}; got {other}"
                        )))
                    }
                };
                Ok((name, w))
            })
            .collect::<Result<_, _>>()?,
        Value::Null => return Err(OjsError::invalid("queues is required: the pool's queue names")),
        other => {
            return Err(OjsError::invalid(format!(
                "queues must be a list of queue names (or an object of queue name → weight); got {other}"
            )))
        }
    };
    if items.is_empty() || items.len() > MAX_POOL_QUEUES {
        return Err(OjsError::invalid(format!(
            "queues must name from 1 to {MAX_POOL_QUEUES} queues; got {}",
            items.len()
        )));
    }
    for (i, (name, _)) in items.iter().enumerate() {
        names::check_queue(name).map_err(|e| OjsError::invalid(format!("queues[{i}]: {e}")))?;
        if items[..i].iter().any(|(q, _)| q == name) {
            return Err(OjsError::invalid(format!("queues[{i}]: {name} is listed twice")));
        }
    }
    Ok(items)
}

/// A pool request checked into what is stored, for the pool named `name` in the path.
pub fn parse(name: &str, req: PoolRequest) -> Result<PoolDef, OjsError> {
    check_name(name)?;
    if let Some(n) = req.name.as_deref().filter(|n| *n != name) {
        return Err(OjsError::invalid(format!(
            "name {n:?} differs from the pool named in the path ({name:?}); leave name out or make them equal"
        )));
    }
    let strategy = match req.strategy.as_deref() {
        None => PoolStrategy::RoundRobin,
        Some("least-loaded") => {
            return Err(OjsError::invalid(format!(
                "strategy \"least-loaded\" is not served by this server; use {SERVED}"
            )))
        }
        Some(s) => crate::schemas::variant::<PoolStrategy>(s)
            .ok_or_else(|| OjsError::invalid(format!("strategy must be {SERVED}; got {s:?}")))?,
    };
    let mut queues = parse_queues(req.queues)?;
    let weighted = strategy == PoolStrategy::Weighted;
    match req.weights {
        None | Some(Value::Null) => {}
        Some(Value::Object(m)) => {
            if !weighted {
                return Err(OjsError::invalid(format!(
                    "weights apply to the \"weighted\" strategy only; this pool is {:?}",
                    crate::schemas::variant_name(&strategy)
                )));
            }
            for (q, w) in m {
                let w = weight(&w, &format!("weights.{q}"))?;
                let Some(slot) = queues.iter_mut().find(|(name, _)| *name == q) else {
                    return Err(OjsError::invalid(format!(
                        "weights.{q}: {q:?} is not one of the pool's queues"
                    )));
                };
                match slot.1 {
                    Some(given) if given != w => {
                        return Err(OjsError::invalid(format!(
                            "queue {q:?} is given two weights ({given} in queues, {w} in weights)"
                        )))
                    }
                    _ => slot.1 = Some(w),
                }
            }
        }
        Some(other) => {
            return Err(OjsError::invalid(format!(
                "weights must be an object of queue name → weight; got {other}"
            )))
        }
    }
    if !weighted {
        if let Some((q, _)) = queues.iter().find(|(_, w)| w.is_some_and(|w| w != 1)) {
            return Err(OjsError::invalid(format!(
                "queue {q:?} has a weight, but weights apply to the \"weighted\" strategy only; this pool is {:?}",
                crate::schemas::variant_name(&strategy)
            )));
        }
    }
    if let Some(c) = req.concurrency {
        if !(1..=MAX_CONCURRENCY).contains(&c) {
            return Err(OjsError::invalid(format!(
                "concurrency must be from 1 to {MAX_CONCURRENCY}; got {c}"
            )));
        }
    }
    Ok(PoolDef {
        queues: queues.into_iter().map(|(q, w)| (q, w.unwrap_or(1))).collect(),
        strategy,
        concurrency: req.concurrency,
    })
}

impl Pool {
    /// A pool from its stored hash; a hash this server cannot read is an internal error naming it.
    pub fn from_fields(name: &str, f: &ojs_core::Fields) -> Result<Self, OjsError> {
        let num = |k: &str| f.get(k).and_then(|v| v.parse::<i64>().ok()).unwrap_or(0);
        let def = f
            .get("def")
            .and_then(|d| serde_json::from_str::<PoolDef>(d).ok())
            .ok_or_else(|| {
                OjsError::new(
                    ojs_core::ErrorCode::Internal,
                    format!("pool {name:?} is stored in a form this server cannot read"),
                )
            })?;
        Ok(Self {
            name: name.to_string(),
            def,
            created_at: num("created_at"),
            updated_at: num("updated_at"),
        })
    }

    /// What a FETCH naming this pool claims from: the FETCH strategy and the (queue, weight) list.
    /// Round-robin is the weighted round-robin with every weight 1.
    pub fn fetch_plan(&self) -> (Strategy, Vec<(String, u32)>) {
        match self.def.strategy {
            PoolStrategy::Strict => (Strategy::Strict, self.def.queues.clone()),
            PoolStrategy::RoundRobin => (
                Strategy::Weighted,
                self.def.queues.iter().map(|(q, _)| (q.clone(), 1)).collect(),
            ),
            PoolStrategy::Weighted => (Strategy::Weighted, self.def.queues.clone()),
        }
    }

    /// The pool as the API shows it, with `active_jobs` (the active jobs of its queues now).
    pub fn view(&self, active_jobs: u64) -> PoolView {
        let weights = (self.def.strategy == PoolStrategy::Weighted).then(|| {
            self.def
                .queues
                .iter()
                .map(|(q, w)| (q.clone(), Value::from(*w)))
                .collect::<Map<String, Value>>()
        });
        PoolView {
            name: self.name.clone(),
            queues: self.def.queues.iter().map(|(q, _)| q.clone()).collect(),
            strategy: self.def.strategy,
            weights,
            concurrency: self.def.concurrency,
            active_jobs,
            created_at: clock::format_ms(self.created_at),
            updated_at: clock::format_ms(self.updated_at),
        }
    }
}

/// A worker pool as the API shows it.
#[derive(Serialize, ToSchema)]
pub struct PoolView {
    pub name: String,
    /// In the pool's order.
    pub queues: Vec<String>,
    pub strategy: PoolStrategy,
    /// Weighted pools: every queue's weight.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<std::collections::HashMap<String, u32>>, nullable = false)]
    pub weights: Option<Map<String, Value>>,
    /// As configured (recorded, not enforced by the server).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub concurrency: Option<u64>,
    /// Jobs active now in the pool's queues, whoever claimed them (the queues' `active` gauges).
    pub active_jobs: u64,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub updated_at: String,
}

/// The pool a FETCH names: one HGETALL on shard 0. An invalid name is a 400, a pool that does not
/// exist a 404.
pub async fn load(st: &AppState, name: &str) -> ApiResult<Pool> {
    check_name(name)?;
    match st.shards.first().pool_get(name).await? {
        Some(f) => Ok(Pool::from_fields(name, &f)?),
        None => Err(OjsError::not_found("pool", name).into()),
    }
}

/// The active jobs of each pool's queues (one read of every queue named, on its shard).
pub async fn active_jobs(st: &AppState, pools: &[Pool]) -> ApiResult<Vec<u64>> {
    let mut names: Vec<String> = pools
        .iter()
        .flat_map(|p| p.def.queues.iter().map(|(q, _)| q.clone()))
        .collect();
    names.sort_unstable();
    names.dedup();
    let counts = st.shards.queue_counts(&names).await?;
    let active: std::collections::HashMap<&str, u64> =
        counts.iter().map(|c| (c.name.as_str(), c.jobs.active)).collect();
    Ok(pools
        .iter()
        .map(|p| {
            p.def
                .queues
                .iter()
                .map(|(q, _)| active.get(q.as_str()).copied().unwrap_or(0))
                .sum()
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn req(v: Value) -> PoolRequest {
        serde_json::from_value(v).expect("shape")
    }

    #[test]
    fn every_form_of_queues_reads_as_one_ordered_weighted_list() {
        let want = PoolDef {
            queues: vec![("b".into(), 3), ("a".into(), 1)],
            strategy: PoolStrategy::Weighted,
            concurrency: None,
        };
        for q in [
            json!({"queues": {"b": {"weight": 3}, "a": {"weight": 1}}, "strategy": "weighted"}),
            json!({"queues": {"b": 3, "a": {}}, "strategy": "weighted"}),
            json!({"queues": [{"name": "b", "weight": 3}, "a"], "strategy": "weighted"}),
            json!({"queues": ["b", "a"], "strategy": "weighted", "weights": {"b": 3}}),
        ] {
            assert_eq!(parse("p", req(q.clone())).expect("valid"), want, "{q}");
        }
        let rr = parse("p", req(json!({"queues": ["a", "b"]}))).expect("valid");
        assert_eq!(rr.strategy, PoolStrategy::RoundRobin);
    }

    #[test]
    fn bad_pools_are_refused_with_a_message_naming_the_fault() {
        for (body, says) in [
            (json!({"queues": []}), "from 1 to 100"),
            (json!({"queues": ["a", "a"]}), "listed twice"),
            (json!({"queues": ["Bad Name"]}), "queues[0]"),
            (json!({"queues": ["a"], "strategy": "least-loaded"}), "not served"),
            (json!({"queues": ["a"], "strategy": "fifo"}), "round-robin"),
            (json!({"queues": ["a"], "weights": {"a": 2}}), "weighted"),
            (
                json!({"queues": ["a"], "strategy": "weighted", "weights": {"b": 2}}),
                "not one of",
            ),
            (
                json!({"queues": ["a"], "strategy": "weighted", "weights": {"a": 0}}),
                "from 1 to 1000",
            ),
            (
                json!({"queues": {"a": 2}, "strategy": "weighted", "weights": {"a": 3}}),
                "two weights",
            ),
            (json!({"queues": ["a"], "concurrency": 0}), "concurrency"),
            (json!({"queues": ["a"], "name": "other"}), "differs"),
            (json!({"queues": 7}), "list of queue names"),
        ] {
            let e = parse("p", req(body.clone())).expect_err("refused");
            assert_eq!(e.code.status(), 400, "{body}");
            assert!(e.message.contains(says), "{body}: {}", e.message);
        }
        assert!(parse("Bad Name", req(json!({"queues": ["a"]}))).is_err());
    }

    #[test]
    fn round_robin_is_the_weighted_round_robin_with_equal_weights() {
        let pool = |strategy| Pool {
            name: "p".into(),
            def: PoolDef {
                queues: vec![("a".into(), 1), ("b".into(), 1)],
                strategy,
                concurrency: None,
            },
            created_at: 0,
            updated_at: 0,
        };
        let (s, q) = pool(PoolStrategy::RoundRobin).fetch_plan();
        assert_eq!((s, q), (Strategy::Weighted, vec![("a".into(), 1), ("b".into(), 1)]));
        assert_eq!(pool(PoolStrategy::Strict).fetch_plan().0, Strategy::Strict);
        let stored = serde_json::to_string(&pool(PoolStrategy::RoundRobin).def).expect("json");
        assert_eq!(stored, r#"{"queues":[["a",1],["b",1]],"strategy":"round-robin"}"#);
    }
}
