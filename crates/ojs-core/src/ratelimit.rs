//! The RateLimitPolicy of the rate-limiting seed (§6), validated. Also accepts the conformance suite's
//! older shapes: `{"max_per_second": N}` (a throttle of N per second on key `queue:<queue>`) and
//! `{"key", "rate": N, "period": "second"|"minute"|"hour"|"day"}` (a window of N per period).

use serde_json::{Map, Value};

use crate::duration::{format_iso8601_ms, parse_iso8601_ms};
use crate::error::OjsError;
use crate::names;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnLimit {
    Wait,
    Reschedule,
    Drop,
}

impl OnLimit {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Wait => "wait",
            Self::Reschedule => "reschedule",
            Self::Drop => "drop",
        }
    }
}

/// `limit` starts per `period_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub limit: u64,
    pub period_ms: u64,
}

impl Window {
    pub fn to_json(self) -> Value {
        serde_json::json!({ "limit": self.limit, "period": format_iso8601_ms(self.period_ms) })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimitPolicy {
    pub key: String,
    pub concurrency: Option<u64>,
    pub rate: Option<Window>,
    pub throttle: Option<Window>,
    pub on_limit: OnLimit,
    /// Ours, beyond the seed: the units this job counts against each of the key's limits (default 1).
    /// A job holds `min(cost, limit)` of each limit, so one that costs more than a whole limit runs
    /// alone rather than never. Its ACK may report what it really used (`cost_used`), and the window
    /// is corrected by the difference.
    pub cost: u64,
    /// Ours, beyond the seed: additive increase, multiplicative decrease of the key's concurrency and
    /// window limit (see [`Adaptive`]).
    pub adaptive: Option<Adaptive>,
    /// Ours, beyond the seed: burstable concurrency. The key's slots come from its queue's pool (the
    /// queue-level concurrency): it keeps `floor` of them while the pool is contended, and borrows idle
    /// ones up to `concurrency`, its ceiling (lua/includes/rl_pool.lua).
    pub floor: Option<u64>,
}

/// The largest `cost` a job may carry.
pub const MAX_COST: u64 = 1_000_000_000;

/// An adaptive key: each failure reported as a rate limit (a NACK with `rate_limit_until`, or whose
/// error type is in `errors`) halves the key's effective concurrency and window limit (never below 1,
/// once per round of starts), and gives the job its attempt back; every `increase_after` successes
/// raise them one step (concurrency by 1, the window by a tenth of the policy's limit) up to the
/// policy. An operator override wins over both.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Adaptive {
    pub increase_after: u64,
    pub errors: Vec<String>,
}

impl Adaptive {
    /// The policy's token in the job's `rl` spec (lua/includes/ratelimit.lua): `~N` or `~N:t1,t2`.
    pub fn spec_token(&self) -> String {
        match self.errors.is_empty() {
            true => format!("~{}", self.increase_after),
            false => format!("~{}:{}", self.increase_after, self.errors.join(",")),
        }
    }
}

fn error_type_ok(t: &str) -> bool {
    !t.is_empty() && t.len() <= 100 && t.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.:-".contains(&b))
}

fn adaptive(v: &Value, field: &str) -> Result<Adaptive, OjsError> {
    let o = v
        .as_object()
        .ok_or_else(|| bad(field, "must be an object {\"increase_after\", \"errors\"}", v))?;
    if let Some(k) = o.keys().find(|k| !["increase_after", "errors"].contains(&k.as_str())) {
        return Err(OjsError::invalid(format!(
            "{field}.{k} is not known (increase_after, errors)"
        )));
    }
    let increase_after = match o.get("increase_after") {
        None | Some(Value::Null) => 10,
        Some(n) => n.as_u64().filter(|n| (1..=1_000_000).contains(n)).ok_or_else(|| {
            bad(
                &format!("{field}.increase_after"),
                "must be an integer from 1 to 1000000 (successes per step up)",
                n,
            )
        })?,
    };
    let errors = match o.get("errors") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) if a.len() <= 20 => a
            .iter()
            .map(|t| {
                t.as_str()
                    .filter(|t| error_type_ok(t))
                    .map(str::to_owned)
                    .ok_or_else(|| {
                        bad(
                            &format!("{field}.errors"),
                            "must hold error types of 1 to 100 letters, digits, '_', '.', ':' or '-'",
                            t,
                        )
                    })
            })
            .collect::<Result<_, _>>()?,
        Some(other) => {
            return Err(bad(
                &format!("{field}.errors"),
                "must be an array of at most 20 error types",
                other,
            ))
        }
    };
    Ok(Adaptive { increase_after, errors })
}

fn bad(field: &str, rule: &str, v: &Value) -> OjsError {
    OjsError::invalid(format!("{field} {rule}; got {v}"))
}

fn window(v: &Value, field: &str) -> Result<Window, OjsError> {
    let o = v
        .as_object()
        .ok_or_else(|| bad(field, "must be an object {\"limit\", \"period\"}", v))?;
    let limit = o
        .get("limit")
        .and_then(Value::as_u64)
        .filter(|l| *l >= 1 && *l <= 1_000_000_000)
        .ok_or_else(|| {
            bad(
                &format!("{field}.limit"),
                "must be an integer >= 1",
                o.get("limit").unwrap_or(&Value::Null),
            )
        })?;
    let period_ms = match o.get("period") {
        Some(Value::String(p)) => parse_iso8601_ms(p).map_err(|e| OjsError::invalid(format!("{field}.period: {e}")))?,
        other => {
            return Err(bad(
                &format!("{field}.period"),
                "must be an ISO 8601 duration such as \"PT1M\"",
                other.unwrap_or(&Value::Null),
            ))
        }
    };
    if period_ms == 0 || period_ms > 366 * 86_400_000 {
        return Err(OjsError::invalid(format!(
            "{field}.period must be from 1 ms to 366 days"
        )));
    }
    Ok(Window { limit, period_ms })
}

fn period_word(w: &str) -> Option<u64> {
    match w {
        "second" | "s" => Some(1_000),
        "minute" | "m" => Some(60_000),
        "hour" | "h" => Some(3_600_000),
        "day" | "d" => Some(86_400_000),
        other => parse_iso8601_ms(other).ok(),
    }
}

/// Parses a `rate_limit` object (top-level or `options.rate_limit`) for a job in `queue`.
pub fn parse(v: &Value, field: &str, queue: &str) -> Result<RateLimitPolicy, OjsError> {
    let o: &Map<String, Value> = v.as_object().ok_or_else(|| bad(field, "must be an object", v))?;
    // Older per-queue shape: a throttle on the queue's own key.
    if let Some(mps) = o.get("max_per_second") {
        let n = mps
            .as_u64()
            .filter(|n| *n >= 1)
            .ok_or_else(|| bad(&format!("{field}.max_per_second"), "must be an integer >= 1", mps))?;
        return Ok(RateLimitPolicy {
            key: format!("queue:{queue}"),
            concurrency: None,
            rate: None,
            throttle: Some(Window {
                limit: n,
                period_ms: 1_000,
            }),
            on_limit: OnLimit::Wait,
            cost: 1,
            adaptive: None,
            floor: None,
        });
    }
    let key = match o.get("key") {
        Some(Value::String(k)) => {
            names::check_rate_limit_key(k).map_err(|e| OjsError::invalid(format!("{field}.key: {e}")))?;
            k.clone()
        }
        None | Some(Value::Null) => {
            return Err(OjsError::invalid(format!(
                "{field}.key is required (the partition the limits apply to)"
            )))
        }
        Some(other) => return Err(bad(&format!("{field}.key"), "must be a string", other)),
    };
    let concurrency = match o.get("concurrency") {
        None | Some(Value::Null) => None,
        Some(c) => Some(c.as_u64().filter(|c| *c <= 1_000_000).ok_or_else(|| {
            bad(
                &format!("{field}.concurrency"),
                "must be an integer >= 0 (0 pauses the key)",
                c,
            )
        })?),
    };
    let rate = match o.get("rate") {
        None | Some(Value::Null) => None,
        // Older shape: "rate": N with "period": "second".
        Some(Value::Number(n)) => {
            let limit = n.as_u64().filter(|l| *l >= 1).ok_or_else(|| {
                bad(
                    &format!("{field}.rate"),
                    "must be an integer >= 1",
                    &Value::Number(n.clone()),
                )
            })?;
            let p = o.get("period").and_then(Value::as_str).unwrap_or("second");
            let period_ms = period_word(p).ok_or_else(|| {
                OjsError::invalid(format!(
                    "{field}.period must be second, minute, hour, day or an ISO 8601 duration; got {p:?}"
                ))
            })?;
            Some(Window { limit, period_ms })
        }
        Some(w) => Some(window(w, &format!("{field}.rate"))?),
    };
    let throttle = match o.get("throttle") {
        None | Some(Value::Null) => None,
        Some(w) => {
            let w = window(w, &format!("{field}.throttle"))?;
            if w.period_ms / w.limit == 0 {
                return Err(OjsError::invalid(format!(
                    "{field}.throttle spaces starts period/limit apart; that must be at least 1 ms"
                )));
            }
            Some(w)
        }
    };
    let on_limit = match o.get("on_limit") {
        None | Some(Value::Null) => OnLimit::Wait,
        Some(Value::String(s)) if s == "wait" => OnLimit::Wait,
        Some(Value::String(s)) if s == "reschedule" => OnLimit::Reschedule,
        Some(Value::String(s)) if s == "drop" => OnLimit::Drop,
        Some(other) => {
            return Err(bad(
                &format!("{field}.on_limit"),
                "must be \"wait\", \"reschedule\" or \"drop\"",
                other,
            ))
        }
    };
    let cost = match o.get("cost") {
        None | Some(Value::Null) => 1,
        Some(c) => c.as_u64().filter(|c| (1..=MAX_COST).contains(c)).ok_or_else(|| {
            bad(
                &format!("{field}.cost"),
                &format!("must be an integer from 1 to {MAX_COST} (the units this job counts)"),
                c,
            )
        })?,
    };
    if concurrency.is_none() && rate.is_none() && throttle.is_none() {
        return Err(OjsError::invalid(format!(
            "{field} needs at least one of concurrency, rate or throttle"
        )));
    }
    let adaptive = match o.get("adaptive") {
        None | Some(Value::Null) => None,
        Some(a) => Some(adaptive(a, &format!("{field}.adaptive"))?),
    };
    if adaptive.is_some() && concurrency.is_none() && rate.is_none() {
        return Err(OjsError::invalid(format!(
            "{field}.adaptive needs a concurrency or a rate to adapt"
        )));
    }
    let floor = match o.get("floor") {
        None | Some(Value::Null) => None,
        Some(f) => {
            let Some(ceiling) = concurrency else {
                return Err(OjsError::invalid(format!(
                    "{field}.floor needs a concurrency, the ceiling it may burst to"
                )));
            };
            Some(f.as_u64().filter(|f| *f <= ceiling).ok_or_else(|| {
                bad(
                    &format!("{field}.floor"),
                    &format!("must be an integer from 0 to the concurrency ({ceiling})"),
                    f,
                )
            })?)
        }
    };
    Ok(RateLimitPolicy {
        key,
        concurrency,
        rate,
        throttle,
        on_limit,
        cost,
        adaptive,
        floor,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn full_policy() {
        let p = parse(
            &json!({"key": "stripe-api", "concurrency": 5, "rate": {"limit": 100, "period": "PT1M"},
            "throttle": {"limit": 10, "period": "PT1S"}, "on_limit": "reschedule"}),
            "rate_limit",
            "q",
        )
        .expect("valid");
        assert_eq!(p.concurrency, Some(5));
        assert_eq!(
            p.rate,
            Some(Window {
                limit: 100,
                period_ms: 60_000
            })
        );
        assert_eq!(
            p.throttle,
            Some(Window {
                limit: 10,
                period_ms: 1_000
            })
        );
        assert_eq!(p.on_limit, OnLimit::Reschedule);
        assert_eq!(p.cost, 1, "a job without a cost counts one unit");
        let p = parse(
            &json!({"key": "llm", "rate": {"limit": 1000, "period": "PT1M"}, "cost": 100}),
            "rate_limit",
            "q",
        )
        .expect("valid");
        assert_eq!(p.cost, 100);
        let p = parse(
            &json!({"key": "llm", "concurrency": 20, "adaptive": {"increase_after": 5, "errors": ["TooMany", "http.429"]}}),
            "rate_limit",
            "q",
        )
        .expect("valid");
        let a = p.adaptive.expect("adaptive");
        assert_eq!(a.spec_token(), "~5:TooMany,http.429");
        let p = parse(
            &json!({"key": "llm", "concurrency": 20, "adaptive": {}}),
            "rate_limit",
            "q",
        )
        .expect("valid");
        assert_eq!(p.adaptive.map(|a| a.spec_token()).as_deref(), Some("~10"));
        let p = parse(
            &json!({"key": "shop-1", "concurrency": 8, "floor": 2}),
            "rate_limit",
            "q",
        )
        .expect("valid");
        assert_eq!((p.floor, p.concurrency), (Some(2), Some(8)));
    }

    #[test]
    fn older_shapes_normalise() {
        let p = parse(&json!({"max_per_second": 2}), "options.rate_limit", "email").expect("valid");
        assert_eq!(
            (p.key.as_str(), p.throttle),
            (
                "queue:email",
                Some(Window {
                    limit: 2,
                    period_ms: 1000
                })
            )
        );
        let p = parse(&json!({"key": "k", "rate": 3, "period": "minute"}), "rate_limit", "q").expect("valid");
        assert_eq!(
            p.rate,
            Some(Window {
                limit: 3,
                period_ms: 60_000
            })
        );
    }

    #[test]
    fn errors_name_the_field() {
        for (v, needle) in [
            (json!({"concurrency": 1}), "rate_limit.key"),
            (json!({"key": "-bad", "concurrency": 1}), "rate_limit.key"),
            (json!({"key": "k", "concurrency": -1}), "rate_limit.concurrency"),
            (
                json!({"key": "k", "rate": {"limit": 0, "period": "PT1S"}}),
                "rate_limit.rate.limit",
            ),
            (
                json!({"key": "k", "rate": {"limit": 1, "period": "soon"}}),
                "rate_limit.rate.period",
            ),
            (
                json!({"key": "k", "throttle": {"limit": 5000, "period": "PT1S"}}),
                "rate_limit.throttle",
            ),
            (
                json!({"key": "k", "concurrency": 1, "on_limit": "explode"}),
                "rate_limit.on_limit",
            ),
            (json!({"key": "k"}), "at least one"),
            (
                json!({"key": "k", "concurrency": 1, "cost": 0}),
                "rate_limit.cost must be an integer from 1",
            ),
            (json!({"key": "k", "concurrency": 1, "cost": 1.5}), "rate_limit.cost"),
            (
                json!({"key": "k", "throttle": {"limit": 1, "period": "PT1S"}, "adaptive": {}}),
                "rate_limit.adaptive needs a concurrency or a rate",
            ),
            (
                json!({"key": "k", "concurrency": 1, "adaptive": {"increase_after": 0}}),
                "rate_limit.adaptive.increase_after",
            ),
            (
                json!({"key": "k", "concurrency": 1, "adaptive": {"errors": ["a b"]}}),
                "rate_limit.adaptive.errors",
            ),
            (
                json!({"key": "k", "concurrency": 1, "adaptive": {"step": 2}}),
                "rate_limit.adaptive.step is not known",
            ),
            (
                json!({"key": "k", "concurrency": 1, "cost": 1_000_000_001u64}),
                "rate_limit.cost",
            ),
            (
                json!({"key": "k", "rate": {"limit": 1, "period": "PT1S"}, "floor": 1}),
                "rate_limit.floor needs a concurrency",
            ),
            (
                json!({"key": "k", "concurrency": 2, "floor": 3}),
                "rate_limit.floor must be an integer from 0 to the concurrency (2)",
            ),
            (json!({"key": "k", "concurrency": 2, "floor": -1}), "rate_limit.floor"),
        ] {
            let e = parse(&v, "rate_limit", "q").unwrap_err();
            assert!(e.message.contains(needle), "{v}: {}", e.message);
        }
    }
}
