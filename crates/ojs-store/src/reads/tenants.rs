//! Tenants (the multi-tenancy extension, lua/includes/tenant.lua): a tenant's counters, and its fair
//! share weight — the one plain write here: one HSET or HDEL, atomic by itself and with no clock.

use redis::Value;

use crate::reply::flat_map;
use crate::store::{Result, Store};

/// The minutes the share of the last hour adds up: the current one and the 59 before it.
pub const LAST_HOUR_MINUTES: i64 = 60;

/// What this shard counted for one tenant.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TenantCounts {
    /// Jobs enqueued with the tenant (kept 30 days past the tenant's last enqueue or claim).
    pub enqueued: u64,
    /// Claims of the tenant's jobs (each attempt counts).
    pub dispatched: u64,
}

/// One tenant of this shard's listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantSeen {
    pub tenant: String,
    /// Its last enqueue or claim on this shard (ms).
    pub last_active_ms: i64,
    pub counts: TenantCounts,
}

impl Store {
    /// The tenants active on this shard in the last 30 days, most recent first, at most `limit`, with
    /// their counters. One ZRANGE and one pipeline.
    pub async fn tenants_seen(&self, limit: usize) -> Result<Vec<TenantSeen>> {
        let mut conn = self.conn().await?;
        let seen: Vec<(String, f64)> = redis::cmd("ZRANGE")
            .arg(self.keys().tenants())
            .arg(0)
            .arg(limit.max(1) as i64 - 1)
            .arg("REV")
            .arg("WITHSCORES")
            .query_async(&mut conn)
            .await?;
        if seen.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for (t, _) in &seen {
            pipe.cmd("HGETALL").arg(self.keys().tenant_stats(t));
        }
        let stats: Vec<Value> = pipe.query_async(&mut conn).await?;
        Ok(seen
            .into_iter()
            .zip(stats)
            .map(|((tenant, at), v)| {
                let m = flat_map(&v);
                let g = |k: &str| m.get(k).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
                TenantSeen {
                    tenant,
                    last_active_ms: at as i64,
                    counts: TenantCounts {
                        enqueued: g("enqueued"),
                        dispatched: g("dispatched"),
                    },
                }
            })
            .collect())
    }

    /// For each queue (all on this shard), every other sorted set its available jobs wait in beside its
    /// own ready set: the ready sets of its tenants' sub-queues (from `P q:<queue>:subs`, by tenant id),
    /// then the rate-limit lanes of the queue and of each sub-queue (`P q:<q>:lane:<key>`, the keys of
    /// its open lanes, `P q:<q>:heads`, and of its parked ones, `P q:<q>:parked`: a lane's jobs behind
    /// its head, and a parked lane's head). Where listings find every available job, so that they agree
    /// with the queue's counts. Two pipelines.
    pub async fn waiting_sets(&self, queues: &[String]) -> Result<Vec<Vec<String>>> {
        if queues.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for q in queues {
            pipe.cmd("SMEMBERS").arg(self.keys().queue_subs(q));
        }
        let mut conn = self.conn().await?;
        let subs: Vec<Vec<String>> = pipe.query_async(&mut conn).await?;
        // Each queue's (sub-)queues: the queue, then its tenants' sub-queues by tenant id.
        let qs: Vec<Vec<String>> = queues
            .iter()
            .zip(subs)
            .map(|(q, mut ts)| {
                ts.sort();
                std::iter::once(q.clone())
                    .chain(ts.iter().map(|t| crate::keys::Keys::tenant_sub_queue(q, t)))
                    .collect()
            })
            .collect();
        let mut pipe = redis::pipe();
        for q in qs.iter().flatten() {
            pipe.cmd("HKEYS").arg(self.keys().queue_heads(q));
            pipe.cmd("HKEYS").arg(self.keys().queue_parked(q));
        }
        let lanes: Vec<Vec<String>> = pipe.query_async(&mut conn).await?;
        let mut lanes = lanes.into_iter();
        Ok(qs
            .iter()
            .map(|sqs| {
                let mut sets: Vec<String> = sqs.iter().skip(1).map(|sq| self.keys().queue_ready(sq)).collect();
                for sq in sqs {
                    let mut keys: Vec<String> = lanes.by_ref().take(2).flatten().collect();
                    keys.sort();
                    keys.dedup();
                    sets.extend(keys.iter().map(|k| self.keys().queue_lane(sq, k)));
                }
                sets
            })
            .collect())
    }

    /// Claims of the given tenants' jobs on this shard over the last hour (the current minute and the
    /// 59 before it, on Redis' clock: `P tenants:m:<minute>`, written by FETCH, lua/includes/tenant.lua),
    /// one per tenant in order, and of every tenant's jobs together. One TIME and one pipeline of 60
    /// HMGETs.
    pub async fn tenants_last_hour(&self, tenants: &[&str]) -> Result<(Vec<u64>, u64)> {
        let mut conn = self.conn().await?;
        let now = crate::store::redis_now_ms(&mut conn, self.keys()).await?;
        let minute = now.div_euclid(60_000);
        let mut pipe = redis::pipe();
        for m in minute - (LAST_HOUR_MINUTES - 1)..=minute {
            // Field '' holds every tenant's claims of the minute.
            pipe.cmd("HMGET")
                .arg(self.keys().tenants_minute(&m.to_string()))
                .arg("")
                .arg(tenants);
        }
        let rows: Vec<Vec<Option<u64>>> = pipe.query_async(&mut conn).await?;
        let mut per = vec![0u64; tenants.len()];
        let mut all = 0;
        for row in rows {
            all += row.first().copied().flatten().unwrap_or(0);
            for (p, v) in per.iter_mut().zip(row.iter().skip(1)) {
                *p += v.unwrap_or(0);
            }
        }
        Ok((per, all))
    }

    /// The tenant's counters on this shard.
    pub async fn tenant_counts(&self, tenant: &str) -> Result<TenantCounts> {
        let mut conn = self.conn().await?;
        let v: Value = redis::cmd("HGETALL")
            .arg(self.keys().tenant_stats(tenant))
            .query_async(&mut conn)
            .await?;
        let m = flat_map(&v);
        let g = |k: &str| m.get(k).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        Ok(TenantCounts {
            enqueued: g("enqueued"),
            dispatched: g("dispatched"),
        })
    }

    /// The tenant's fair-share weight on this shard (`None`: unset, FETCH uses 1).
    pub async fn tenant_weight(&self, tenant: &str) -> Result<Option<u32>> {
        let mut conn = self.conn().await?;
        let w: Option<String> = redis::cmd("HGET")
            .arg(self.keys().tenant_weights())
            .arg(tenant)
            .query_async(&mut conn)
            .await?;
        Ok(w.and_then(|w| w.parse().ok()))
    }

    /// Sets (or with `None` removes) the tenant's fair-share weight on this shard; FETCH reads it at
    /// its next call.
    pub async fn set_tenant_weight(&self, tenant: &str, weight: Option<u32>) -> Result<()> {
        let mut conn = self.conn().await?;
        let cmd = match weight {
            Some(w) => {
                let mut c = redis::cmd("HSET");
                c.arg(self.keys().tenant_weights()).arg(tenant).arg(w);
                c
            }
            None => {
                let mut c = redis::cmd("HDEL");
                c.arg(self.keys().tenant_weights()).arg(tenant);
                c
            }
        };
        let _: Value = cmd.query_async(&mut conn).await?;
        Ok(())
    }
}
