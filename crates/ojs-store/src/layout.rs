//! The key schema (version 3), written once. Every Redis key this server writes is `P` followed by one
//! of these templates, where `P = ojs:{<namespace>}:` (the braces are the Redis Cluster hash tag) and
//! each `{part}` is filled in by the caller.
//!
//! This table is the only place key names are written. `build.rs` reads it (this file is plain data,
//! included there by path) and generates both sides: the Rust methods of [`crate::keys::Keys`]
//! (`keys.job(id)`, `keys.queue_ready(queue)`, …) and the Lua calls every script writes
//! (`key_job(P, id)`, `key_queue_ready(P, queue)`, …), which it replaces in the library by the template's
//! concatenation (`(P .. 'job:' .. (id))`: no function call per key at run time). `build.rs` fails the
//! build when a script writes a key name itself (`P .. '…'`) or calls a family with the wrong parts. `docs/architecture.md` describes each family; a test checks that it
//! names every template here.
//!
//! Parts never contain `{`, `}` (no input reaches another deployment's hash tag) and the names that
//! fill them are checked so that no key of one family is a key of another (`ojs_core::names`; a test in
//! `keys.rs` tries every pair).

/// One family of keys: `name` (the method and Lua function), `template` (after the prefix).
pub struct KeyFamily {
    pub name: &'static str,
    pub template: &'static str,
}

const fn k(name: &'static str, template: &'static str) -> KeyFamily {
    KeyFamily { name, template }
}

pub const KEY_FAMILIES: &[KeyFamily] = &[
    // The deployment.
    k("schema", "schema"),
    k("queues", "queues"),
    k("ready_index", "ready"),
    k("paused", "paused"),
    k("scheduled", "scheduled"),
    k("active", "active"),
    k("dead", "dead"),
    k("corrupt", "corrupt"),
    k("events", "events"),
    k("seq", "seq"),
    k("workers", "workers"),
    k("crons", "crons"),
    k("cron_due", "cron:due"),
    k("workflows", "workflows"),
    k("workflows_closed", "workflows:closed"),
    k("workflows_sweeping", "workflows:sweeping"),
    k("pools", "pools"),
    k("rl_keys", "rl:keys"),
    k("rl_wake", "rl:wake"),
    k("rl_rewake", "rl:rewake"),
    k("rl_idle", "rl:idle"),
    k("rescoring", "rescoring"),
    // Shard 0 only: the number of shards, and where each queue and rate-limit key lives.
    k("shard_count", "shards"),
    k("placement", "placement"),
    // Shard 0 only, on a Redis Cluster: shard index -> the hash tag its keys live under (shard_tags.rs).
    k("shard_tags", "tags"),
    // Every shard: a key that never exists, named by every script call (`Store::run`) so that Redis
    // refuses the call with TRYAGAIN, before it runs, while the shard's slot moves (conn.rs).
    k("move_guard", "moving"),
    k("rl_home", "rl:home"),
    k("unique_home", "unique:home"),
    // Shard 0 only: a client-chosen name being written on one shard (a lease), and where a root-job
    // signature lives.
    k("claim", "claim:{name}"),
    k("home", "home:{name}"),
    // Shard 0 only: the schema registry (JSON Schemas of job args, per type and version; ops/schemas.rs).
    k("arg_schemas", "args:schemas"),
    k("arg_schema_versions", "args:schemas:versions"),
    // The registry's stamp (changed by every registry write; on every shard): pods cache the registry
    // and the enqueue script checks their copy's stamp against it.
    k("arg_schemas_stamp", "args:schemas:stamp"),
    // One job, worker, cron entry, worker pool, workflow, uniqueness key, deduplication or root signature.
    k("job", "job:{id}"),
    // A job's checkpoint (ojs-durable-execution; lua/includes/checkpoint.lua): beside its record, gone with it.
    k("checkpoint", "cp:{id}"),
    k("worker", "worker:{worker}"),
    k("cron", "cron:{name}"),
    k("pool", "pool:{pool}"),
    k("workflow", "wf:{id}"),
    k("workflow_jobs", "wf:{id}:jobs"),
    k("workflow_results", "wf:{id}:results"),
    k("unique", "unique:{fingerprint}"),
    k("dedup", "dedup:{fingerprint}"),
    k("root", "root:{fingerprint}"),
    k("wrr", "wrr:{weights}"),
    // One queue.
    k("queue_ready", "q:{queue}:ready"),
    k("queue_stats", "q:{queue}:stats"),
    k("queue_conf", "q:{queue}:conf"),
    k("queue_pri", "q:{queue}:pri"),
    k("queue_heads", "q:{queue}:heads"),
    k("queue_parked", "q:{queue}:parked"),
    k("queue_lane", "q:{queue}:lane:{key}"),
    k("queue_rl_active", "q:{queue}:rl:active"),
    k("queue_rl_win", "q:{queue}:rl:win"),
    k("queue_tenants", "q:{queue}:tenants"),
    // The tenants of the queue's fair share parked at their concurrency in it (ours; lua/includes/tenant.lua).
    k("queue_tenants_full", "q:{queue}:tenants:full"),
    k("queue_subs", "q:{queue}:subs"),
    // Its ended jobs (completed, cancelled, discarded without the dead letter), by end time, bounded by
    // its retention setting (lua/includes/ended.lua).
    k("queue_ended", "q:{queue}:ended"),
    // Burstable concurrency (ours): the floors owed in the queue's pool, per lane, and the lanes the
    // pool holds back (lua/includes/rl_pool.lua).
    k("queue_want", "q:{queue}:want"),
    k("queue_pool_wait", "q:{queue}:pool:wait"),
    // Tenants (the multi-tenancy extension; a tenant's waiting jobs use the queue families above under
    // its sub-queue's name, lua/includes/tenant.lua).
    k("tenant_weights", "tenant_weights"),
    k("tenants", "tenants"),
    k("tenant_stats", "tenant:{tenant}:stats"),
    // Claims of tenants' jobs in one minute (minute = epoch ms / 60,000), for the share of the last hour.
    k("tenants_minute", "tenants:m:{minute}"),
    // Webhooks (the ojs-webhooks extension; crates/ojs-server/src/webhooks.rs). Shard 0 only: every
    // subscription (id -> its definition as JSON, secret included).
    k("webhook_subs", "wh:subs"),
    // Each shard: the deliveries of its events, by when each is due (a claimed one: when its lease lapses).
    k("webhook_due", "wh:due"),
    // One delivery (an event for a subscription) and the outcomes of its attempts, beside the event's shard.
    k("webhook_delivery", "wh:d:{fingerprint}"),
    k("webhook_attempts", "wh:d:{fingerprint}:attempts"),
    // A subscription's newest deliveries on one shard, by creation time.
    k("webhook_log", "wh:log:{id}"),
    // One rate-limit key.
    k("rl_policy", "rl:{key}:policy"),
    k("rl_queues", "rl:{key}:queues"),
    k("rl_parked", "rl:{key}:parked"),
    k("rl_state", "rl:{key}:state"),
    k("rl_stats", "rl:{key}:stats"),
    k("rl_active", "rl:{key}:active"),
    k("rl_win", "rl:{key}:win"),
    k("rl_tat", "rl:{key}:tat"),
    k("rl_until", "rl:{key}:until"),
    k("rl_ovr", "rl:{key}:ovr"),
    // Costs (ours): the units beyond one that the window's entries and the slots' holders count, and
    // each holder's units when they are not one (lua/includes/rl_policy.lua, "Costs").
    k("rl_win_units", "rl:{key}:win:units"),
    k("rl_active_units", "rl:{key}:active:units"),
    k("rl_active_cost", "rl:{key}:active:cost"),
    // Adaptive limits (ours): the key's effective concurrency and window limit while below its policy's.
    k("rl_adapt", "rl:{key}:adapt"),
];

/// A template's pieces in order: `(true, part name)` for a part, `(false, text)` for literal text.
pub fn pieces(template: &str) -> Vec<(bool, &str)> {
    let mut out = Vec::new();
    let mut rest = template;
    while let Some(i) = rest.find('{') {
        if i > 0 {
            out.push((false, &rest[..i]));
        }
        let j = rest[i..].find('}').map_or(rest.len(), |j| i + j);
        out.push((true, &rest[i + 1..j]));
        rest = rest.get(j + 1..).unwrap_or("");
    }
    if !rest.is_empty() {
        out.push((false, rest));
    }
    out
}

/// A template's part names, in order.
pub fn part_names(template: &str) -> Vec<&str> {
    pieces(template)
        .into_iter()
        .filter(|(part, _)| *part)
        .map(|(_, n)| n)
        .collect()
}

/// A template written out: each part as `part(name)`, each literal as `literal(text)`, concatenated.
pub fn render(template: &str, part: impl Fn(&str) -> String, literal: impl Fn(&str) -> String) -> String {
    pieces(template)
        .into_iter()
        .map(|(is_part, s)| if is_part { part(s) } else { literal(s) })
        .collect()
}
