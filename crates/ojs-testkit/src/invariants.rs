//! The keyspace invariant checker: after any sequence of requests (and any crash between them), every
//! job is in exactly the one index its state calls for, every index entry points at a job in that
//! state, and the per-queue gauges equal the index counts.

use std::collections::{HashMap, HashSet};

/// A Lua function `record(bytes)`: a job record's fields as one table, read like the server reads them
/// (lua/includes/record.lua): a MessagePack map of strings whose field `cold` (key schema v3) is a
/// MessagePack map of more fields. A record that is not v3 (its envelope `doc` outside `cold`) or a
/// field found in both places is an error; with `COLD` set (the set of cold field names), so is a cold
/// field outside `cold` or another field in it.
macro_rules! record_lua {
    () => {
        r#"
local COLD = nil
local function record(v)
  local f = cmsgpack.unpack(v)
  if f.doc ~= nil then error('job record holds its envelope outside cold: not a key-schema v3 record') end
  if COLD then
    for k in pairs(COLD) do
      if f[k] ~= nil then error('job record holds the cold field ' .. k .. ' outside cold') end
    end
  end
  local c = f.cold
  if c then
    f.cold = nil
    for k, x in pairs(cmsgpack.unpack(c)) do
      if f[k] ~= nil then error('job record field ' .. k .. ' is both in the record and in cold') end
      if COLD and not COLD[k] then error('job record holds ' .. k .. ' in cold, which is not a cold field') end
      f[k] = x
    end
  end
  return f
end
"#
    };
}

/// Dumps every key of a namespace in one script call, so the checker reads one atomic snapshot: the
/// server's timers and requests cannot move a job between two reads. Streams are left out. A job
/// record (a MessagePack map in a string, read by `record_lua!`) is read as a hash, under the type name
/// `record`.
const DUMP: &str = concat!(
    record_lua!(),
    r#"
local out = {}
COLD = {}
for i = 2, #ARGV do COLD[ARGV[i]] = true end
local jobs = ARGV[1] .. 'job:'
for _, k in ipairs(redis.call('KEYS', ARGV[1] .. '*')) do
  local t = redis.call('TYPE', k)['ok']
  local v = {}
  if t == 'string' and string.sub(k, 1, #jobs) == jobs then
    t = 'record'
    for f, x in pairs(record(redis.call('GET', k))) do
      v[#v + 1] = f
      v[#v + 1] = x
    end
  elseif t == 'hash' then v = redis.call('HGETALL', k)
  elseif t == 'zset' then v = redis.call('ZRANGE', k, 0, -1, 'WITHSCORES')
  elseif t == 'set' then v = redis.call('SMEMBERS', k)
  elseif t == 'list' then v = redis.call('LRANGE', k, 0, -1)
  elseif t == 'string' then v = {redis.call('GET', k)}
  end
  out[#out + 1] = k
  out[#out + 1] = t
  out[#out + 1] = v
end
return out
"#
);

/// Reads the fields of jobs (records, lua/includes/record.lua) behind the server's back,
/// as tests inspect them: for each job key, the named fields (None where the job or field is missing).
pub async fn job_fields(
    conn: &mut redis::aio::MultiplexedConnection,
    job_keys: &[String],
    fields: &[&str],
) -> Vec<Vec<Option<String>>> {
    const READ: &str = concat!(
        record_lua!(),
        r#"
local out = {}
for i, k in ipairs(KEYS) do
  local v = redis.call('GET', k)
  local f = v and record(v) or {}
  local row = {}
  for j, name in ipairs(ARGV) do row[j] = f[name] or false end
  out[i] = row
end
return out
"#
    );
    let read = redis::Script::new(READ);
    let mut script = read.prepare_invoke();
    for k in job_keys {
        script.key(k);
    }
    for f in fields {
        script.arg(*f);
    }
    script.invoke_async(conn).await.expect("job fields")
}

/// One namespace's keys as they were at one instant, read like Redis.
struct Snapshot {
    keys: HashMap<String, (String, Vec<String>)>,
}

impl Snapshot {
    async fn take(conn: &mut redis::aio::MultiplexedConnection, prefix: &str) -> Self {
        let flat: Vec<redis::Value> = redis::Script::new(DUMP)
            .arg(prefix)
            .arg(ojs_store::cold_fields())
            .invoke_async(conn)
            .await
            .expect("namespace dump");
        let text = |v: &redis::Value| -> String {
            match v {
                redis::Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                redis::Value::SimpleString(s) => s.clone(),
                redis::Value::Int(i) => i.to_string(),
                _ => String::new(),
            }
        };
        let mut keys = HashMap::new();
        for c in flat.chunks(3) {
            if let [k, t, redis::Value::Array(items)] = c {
                keys.insert(text(k), (text(t), items.iter().map(text).collect()));
            }
        }
        Self { keys }
    }

    fn items(&self, key: impl AsRef<str>) -> &[String] {
        self.keys
            .get(key.as_ref())
            .map(|(_, v)| v.as_slice())
            .unwrap_or_default()
    }

    /// The keys matching a glob pattern whose only wildcard is `*` (as SCAN MATCH reads it).
    fn scan(&self, pattern: impl AsRef<str>) -> Vec<String> {
        let parts: Vec<&str> = pattern.as_ref().split('*').collect();
        self.keys.keys().filter(|k| glob(&parts, k)).cloned().collect()
    }

    fn exists(&self, key: impl AsRef<str>) -> bool {
        self.keys.contains_key(key.as_ref())
    }

    fn zset(&self, key: impl AsRef<str>) -> HashMap<String, f64> {
        self.items(key)
            .chunks(2)
            .filter_map(|c| Some((c.first()?.clone(), c.get(1)?.parse().ok()?)))
            .collect()
    }

    /// A sorted set's members in score order.
    fn zrange(&self, key: impl AsRef<str>) -> Vec<String> {
        self.items(key).chunks(2).filter_map(|c| c.first().cloned()).collect()
    }

    fn smembers(&self, key: impl AsRef<str>) -> HashSet<String> {
        self.items(key).iter().cloned().collect()
    }

    fn hgetall<T: std::str::FromStr>(&self, key: impl AsRef<str>) -> HashMap<String, T> {
        self.items(key)
            .chunks(2)
            .filter_map(|c| Some((c.first()?.clone(), c.get(1)?.parse().ok()?)))
            .collect()
    }

    fn hget<T: std::str::FromStr>(&self, key: impl AsRef<str>, field: &str) -> Option<T> {
        self.items(key)
            .chunks(2)
            .find(|c| c.first().map(String::as_str) == Some(field))
            .and_then(|c| c.get(1)?.parse().ok())
    }

    fn hexists(&self, key: impl AsRef<str>, field: &str) -> bool {
        self.items(key)
            .chunks(2)
            .any(|c| c.first().map(String::as_str) == Some(field))
    }

    fn hlen(&self, key: impl AsRef<str>) -> i64 {
        (self.items(key).len() / 2) as i64
    }

    fn llen(&self, key: impl AsRef<str>) -> i64 {
        self.items(key).len() as i64
    }

    fn get(&self, key: impl AsRef<str>) -> Option<String> {
        match self.keys.get(key.as_ref()) {
            Some((t, v)) if t == "string" => v.first().cloned(),
            _ => None,
        }
    }
}

/// Glob match of `key` against a pattern split at its `*`s.
fn glob(parts: &[&str], key: &str) -> bool {
    let (Some(first), Some(last)) = (parts.first(), parts.last()) else {
        return false;
    };
    if parts.len() == 1 {
        return key == *first;
    }
    if !key.starts_with(first) || !key[first.len()..].ends_with(last) || key.len() < first.len() + last.len() {
        return false;
    }
    let mut rest = &key[first.len()..key.len() - last.len()];
    for mid in &parts[1..parts.len() - 1] {
        match rest.find(mid) {
            Some(i) => rest = &rest[i + mid.len()..],
            None => return false,
        }
    }
    true
}

/// Returns every broken invariant in namespace `ns` (empty when all hold), read from one atomic
/// snapshot of the namespace.
/// The first part of a key of `family` (its queue, id, …), or "" when it is not one.
fn first_part(keys: &ojs_store::Keys, family: &str, key: &str) -> String {
    keys.parts(family, key)
        .and_then(|p| p.first().map(|s| s.to_string()))
        .unwrap_or_default()
}

pub async fn check_invariants(redis_url: &str, ns: &str) -> Vec<String> {
    check_shard_invariants(redis_url, ns, 0).await
}

/// [`check_invariants`] of shard `shard` of a deployment run with `--shards` (its keys live on the
/// node at `redis_url`).
pub async fn check_shard_invariants(redis_url: &str, ns: &str, shard: usize) -> Vec<String> {
    let client = redis::Client::open(redis_url).expect("redis url");
    // redis-rs' default 500 ms response timeout is too short for a full keyspace walk on a loaded
    // machine; a slow answer is not a broken invariant.
    let cfg = redis::AsyncConnectionConfig::new().set_response_timeout(Some(std::time::Duration::from_secs(30)));
    let mut conn = client
        .get_multiplexed_async_connection_with_config(&cfg)
        .await
        .expect("redis connection");
    // On a cluster, the shard's recorded tag (read from shard 0, wherever it lives).
    let keys = crate::cluster::shard_keys_at(redis_url, ns, shard);
    let p = keys.prefix().to_string();
    let snap = Snapshot::take(&mut conn, &p).await;
    let mut problems = Vec::new();

    let scheduled = snap.zset(keys.scheduled());
    let active = snap.zset(keys.active());
    let dead = snap.zset(keys.dead());
    let ready_index: HashSet<String> = snap.smembers(keys.ready_index());

    // ready sets: queue -> member -> score
    let mut ready: HashMap<String, HashMap<String, f64>> = HashMap::new();
    for key in snap.scan(keys.pattern("queue_ready")) {
        let queue = first_part(&keys, "queue_ready", &key);
        ready.insert(queue, snap.zset(&key));
    }
    let mut ready_owner: HashMap<String, (String, String, f64)> = HashMap::new(); // id -> (queue, member, score)
    for (q, members) in &ready {
        for (m, score) in members {
            let id = m.get(m.len().saturating_sub(36)..).unwrap_or("").to_string();
            if let Some(prev) = ready_owner.insert(id.clone(), (q.clone(), m.clone(), *score)) {
                problems.push(format!("job {id} is ready twice: in {} and {q}", prev.0));
            }
        }
        // A tenant's sub-queue (queue@tenant, lua/includes/tenant.lua): its queue is indexed and the
        // tenant is in the queue's fair share.
        if let Some((base, part)) = q.split_once('@') {
            let tenant = part.replace("%3A", ":");
            // A tenant parked at its concurrency is out of the share, and its queue may be out of the
            // index (FETCH has nothing to take there until a slot comes back).
            let parked = snap.smembers(keys.queue_tenants_full(base)).contains(&tenant);
            if !parked && !ready_index.contains(base) {
                problems.push(format!(
                    "sub-queue {q} has ready jobs but queue {base} is not in the ready index"
                ));
            }
            if !parked && !snap.zset(keys.queue_tenants(base)).contains_key(&tenant) {
                problems.push(format!(
                    "sub-queue {q} has ready jobs but {tenant:?} is not in {base}'s fair share"
                ));
            }
            if !snap.smembers(keys.queue_subs(base)).contains(&tenant) {
                problems.push(format!(
                    "sub-queue {q} has ready jobs but {tenant:?} is not in {base}'s subs"
                ));
            }
            continue;
        }
        let indexed = ready_index.contains(q);
        if members.is_empty() == indexed {
            problems.push(format!(
                "queue {q}: ready-index membership {indexed} but {} ready jobs",
                members.len()
            ));
        }
    }
    for q in &ready_index {
        if !ready.contains_key(q) && snap.zset(keys.queue_tenants(q)).is_empty() {
            problems.push(format!(
                "queue {q} is in the ready index but has no ready set and no tenant"
            ));
        }
    }

    // Rate-limit lanes: queue -> key -> members; heads: queue -> key -> member; parked: (queue, key).
    let mut lane_owner: HashMap<String, (String, String, String, f64)> = HashMap::new(); // id -> (queue, key, member, score)
    for key in snap.scan(keys.pattern("queue_lane")) {
        let Some([queue, rl_key]) = keys.parts("queue_lane", &key).as_deref().map(|p| [p[0], p[1]]) else {
            continue;
        };
        if let Some((base, part)) = queue.split_once('@') {
            let tenant = part.replace("%3A", ":");
            if !snap.smembers(keys.queue_subs(base)).contains(&tenant) {
                problems.push(format!(
                    "lane {queue}/{rl_key} holds jobs but {tenant:?} is not in {base}'s subs"
                ));
            }
        }
        for (m, score) in snap.zset(&key) {
            let id = m.get(m.len().saturating_sub(36)..).unwrap_or("").to_string();
            if ready_owner.contains_key(&id) {
                problems.push(format!("job {id} is both in a ready set and in lane {queue}/{rl_key}"));
            }
            lane_owner.insert(id, (queue.to_string(), rl_key.to_string(), m, score));
        }
    }
    let mut heads: HashMap<(String, String), String> = HashMap::new();
    for key in snap.scan(keys.pattern("queue_heads")) {
        let queue = first_part(&keys, "queue_heads", &key);
        let m: HashMap<String, String> = snap.hgetall(&key);
        for (k, member) in m {
            let in_ready = ready.get(&queue).is_some_and(|r| r.contains_key(&member));
            if !in_ready {
                problems.push(format!("lane head {queue}/{k} = {member} is not in the ready set"));
            }
            let parked: bool = snap.hexists(keys.queue_parked(&queue), &k);
            if parked {
                problems.push(format!("lane {queue}/{k} is both open (has a head) and parked"));
            }
            heads.insert((queue.clone(), k), member);
        }
    }
    // An open lane's head is its best job: no job waiting in the lane ranks before it (seed §5.3; with
    // aging, §8.2), except while the queue is being re-scored.
    let mut lane_best: HashMap<(String, String), (f64, String)> = HashMap::new();
    for (q, k, m, sc) in lane_owner.values() {
        let best = lane_best.entry((q.clone(), k.clone())).or_insert((*sc, m.clone()));
        if (*sc, m) < (best.0, &best.1) {
            *best = (*sc, m.clone());
        }
    }
    for ((q, k), head) in &heads {
        let Some(hs) = ready.get(q).and_then(|r| r.get(head)).copied() else {
            continue;
        };
        let Some((sc, m)) = lane_best.get(&(q.clone(), k.clone())) else {
            continue;
        };
        if (*sc, m) < (hs, head) && !snap.hexists(keys.queue_conf(q), "rs_phase") {
            problems.push(format!(
                "lane {q}/{k}: {m} (score {sc}) ranks before its head {head} (score {hs})"
            ));
        }
    }
    // A queue whose lane for a key holds jobs (in the lane or as its head) is one of the key's queues:
    // that is how a released slot finds the lanes to re-open.
    let lanes_with_jobs: HashSet<(String, String)> = lane_owner
        .values()
        .map(|(q, k, _, _)| (q.clone(), k.clone()))
        .chain(heads.keys().cloned())
        .collect();
    for (q, k) in &lanes_with_jobs {
        if !snap.smembers(keys.rl_queues(k)).contains(q) {
            problems.push(format!("lane {q}/{k} holds jobs but {q} is not in the key's queues"));
        }
    }
    // Every parked lane is in its key's index of parked lanes, which a release wakes a few at a time
    // (lua/includes/rl_lanes.lua Lane.wake), and the index names no lane that is not parked.
    let mut parked_lanes: HashSet<(String, String)> = HashSet::new();
    for key in snap.scan(keys.pattern("queue_parked")) {
        let queue = first_part(&keys, "queue_parked", &key);
        let m: HashMap<String, String> = snap.hgetall(&key);
        for k in m.into_keys() {
            if !snap.zset(keys.rl_parked(&k)).contains_key(&queue) {
                problems.push(format!("lane {queue}/{k} is parked but not in the key's parked lanes"));
            }
            parked_lanes.insert((queue.clone(), k));
        }
    }
    for key in snap.scan(keys.pattern("rl_parked")) {
        let k = first_part(&keys, "rl_parked", &key);
        for q in snap.zset(&key).into_keys() {
            if !parked_lanes.contains(&(q.clone(), k.clone())) {
                problems.push(format!("{k}'s parked lanes name {q}, whose lane is not parked"));
            }
        }
    }

    // A checkpoint lives beside its job, whose record marks it ('cp'), and a marked job has one
    // (lua/includes/checkpoint.lua).
    for key in snap.scan(keys.pattern("checkpoint")) {
        let id = first_part(&keys, "checkpoint", &key);
        let job: HashMap<String, String> = snap.hgetall(keys.job(&id));
        if job.is_empty() {
            problems.push(format!("checkpoint of job {id} outlived its job"));
        } else if !job.contains_key("cp") {
            problems.push(format!("job {id} has a checkpoint but its record does not mark it"));
        }
    }
    for key in snap.scan(keys.pattern("job")) {
        let f: HashMap<String, String> = snap.hgetall(&key);
        let id = first_part(&keys, "job", &key);
        if f.contains_key("cp") && snap.hgetall::<String>(keys.checkpoint(&id)).is_empty() {
            problems.push(format!("{key} marks a checkpoint that is not there"));
        }
    }

    let mut gauges: HashMap<String, (i64, i64)> = HashMap::new(); // queue -> (active, scheduled)
    let mut ready_by_priority: HashMap<(String, String), i64> = HashMap::new();
    let mut seen = HashSet::new();
    for key in snap.scan(keys.pattern("job")) {
        let id = first_part(&keys, "job", &key);
        if let Some((t, _)) = snap.keys.get(&key) {
            if t != "record" {
                problems.push(format!("job {id} is a {t}, not a record (key schema v3)"));
            }
        }
        let f: HashMap<String, String> = snap.hgetall(&key);
        if f.is_empty() {
            continue;
        }
        seen.insert(id.clone());
        let state = f.get("state").cloned().unwrap_or_default();
        let queue = f.get("queue").cloned().unwrap_or_default();
        let rl_key = f.get("rl_key").cloned();
        // Where it waits when available: its queue, or its tenant's sub-queue (lua/includes/tenant.lua).
        let place = match f.get("tenant") {
            Some(t) => format!("{queue}@{}", t.replace(':', "%3A")),
            None => queue.clone(),
        };
        if let Some((lq, lk, lm, _)) = lane_owner.get(&id) {
            if state != "available" || Some(lk) != rl_key.as_ref() || lq != &place || f.get("member") != Some(lm) {
                problems.push(format!("job {id} ({state}, key {rl_key:?}) sits in lane {lq}/{lk}"));
            }
        }
        if let (Some(k), Some((_, member, _))) = (&rl_key, ready_owner.get(&id)) {
            if heads.get(&(place.clone(), k.clone())) != Some(member) {
                problems.push(format!(
                    "job {id} of key {k} is in the ready set but is not its lane's head"
                ));
            }
        }
        let where_ = (
            ready_owner.contains_key(&id) || lane_owner.contains_key(&id),
            scheduled.contains_key(&id),
            active.contains_key(&id),
            dead.contains_key(&id),
        );
        let expected = match state.as_str() {
            "available" => (true, false, false, false),
            "scheduled" | "retryable" => (false, true, false, false),
            "active" => (false, false, true, false),
            "completed" | "cancelled" => (false, false, false, false),
            // A workflow job waiting for its turn is in no index; its running workflow holds it.
            "pending" => {
                let wf = f.get("wf").cloned().unwrap_or_default();
                let wf_state: Option<String> = snap.hget(keys.workflow(&wf), "state");
                // A closed workflow's members end in sweep steps (lua/includes/workflow.lua).
                let sweeping = snap.smembers(keys.workflows_sweeping()).contains(&wf);
                if wf_state.as_deref() != Some("running") && !sweeping {
                    problems.push(format!(
                        "job {id} is pending but its workflow {wf:?} is {wf_state:?}, not running"
                    ));
                }
                (false, false, false, false)
            }
            "discarded" => (false, false, false, where_.3),
            other => {
                problems.push(format!("job {id} has unknown state {other:?}"));
                continue;
            }
        };
        if where_ != expected {
            problems.push(format!(
                "job {id} is {state} but indexed as (ready, scheduled, active, dead) = {where_:?}, expected {expected:?}"
            ));
        }
        if state == "available" {
            let placed = ready_owner
                .get(&id)
                .cloned()
                .or_else(|| lane_owner.get(&id).map(|(q, _, m, sc)| (q.clone(), m.clone(), *sc)));
            if let Some((q, member, score)) = placed.as_ref() {
                if q != &place {
                    problems.push(format!(
                        "job {id} of queue {queue} sits in the ready set of {q}, not {place}"
                    ));
                }
                if f.get("member") != Some(member) {
                    problems.push(format!(
                        "job {id}: member field {:?} differs from ready member {member}",
                        f.get("member")
                    ));
                }
                let rank: f64 = f.get("rank").and_then(|r| r.parse().ok()).unwrap_or(f64::NAN);
                let aging: Option<f64> = snap.hget(keys.queue_conf(&queue), "aging_s");
                // While an aging change is applied (lua/includes/rescore.lua) scores are on their way.
                let rescoring = snap.hexists(keys.queue_conf(&queue), "rs_phase");
                let expected = match aging {
                    Some(a) => {
                        let since: f64 = f.get("enqueued_at").and_then(|r| r.parse().ok()).unwrap_or(f64::NAN);
                        rank * a + (since / 1000.0).floor()
                    }
                    None => rank,
                };
                if expected != *score && !rescoring {
                    problems.push(format!(
                        "job {id}: ready score {score}, expected {expected} (rank {rank}, aging {aging:?})"
                    ));
                }
                *ready_by_priority
                    .entry((queue.clone(), f.get("priority").cloned().unwrap_or_default()))
                    .or_default() += 1;
            }
        } else if f.contains_key("member") {
            problems.push(format!("job {id} is {state} but still has a ready member field"));
        }
        if f.contains_key("superseded") && state != "completed" {
            problems.push(format!("job {id} was superseded but is {state}"));
        }
        if state == "active" {
            let lease: f64 = f.get("lease_until").and_then(|r| r.parse().ok()).unwrap_or(f64::NAN);
            if active.get(&id) != Some(&lease) {
                problems.push(format!(
                    "job {id}: active score {:?} differs from lease_until {lease}",
                    active.get(&id)
                ));
            }
            // Lease fencing (lua/includes/lease.lua): every claim got a lease id that is never given
            // back, so an active job's claim count is at least its attempt, and the claim recorded
            // the lease length heartbeats extend by.
            let num = |k: &str| f.get(k).and_then(|v| v.parse::<i64>().ok());
            match (num("claims"), num("attempt"), num("lease_ms")) {
                (Some(c), Some(a), Some(l)) if c >= 1 && c >= a && l >= 1 => {}
                (c, a, l) => problems.push(format!(
                    "job {id} is active with claims {c:?}, attempt {a:?}, lease_ms {l:?}: a claim must set claims >= max(1, attempt) and lease_ms"
                )),
            }
        }
        let g = gauges.entry(queue).or_default();
        match state.as_str() {
            "active" => g.0 += 1,
            "scheduled" | "retryable" => g.1 += 1,
            _ => {}
        }
    }
    for (name, index) in [("scheduled", &scheduled), ("active", &active), ("dead", &dead)] {
        for id in index.keys() {
            if !seen.contains(id) {
                problems.push(format!("{name} index holds {id}, which has no job hash"));
            }
        }
    }
    for id in ready_owner.keys().chain(lane_owner.keys()) {
        if !seen.contains(id) {
            problems.push(format!("a ready set holds {id}, which has no job hash"));
        }
    }
    for key in snap.scan(keys.pattern("queue_stats")) {
        let queue = first_part(&keys, "queue_stats", &key);
        let s: HashMap<String, i64> = snap.hgetall(&key);
        let (a, sch) = gauges.get(&queue).copied().unwrap_or_default();
        let (ga, gs) = (
            s.get("active").copied().unwrap_or(0),
            s.get("scheduled").copied().unwrap_or(0),
        );
        if (ga, gs) != (a, sch) {
            problems.push(format!(
                "queue {queue}: gauges (active, scheduled) = ({ga}, {gs}) but jobs say ({a}, {sch})"
            ));
        }
    }
    // Burstable concurrency (lua/includes/ratelimit.lua): the floors a queue's pool owes sum to its
    // conf's 'want', and only an open lane (its head in the ready set), or one parked by its key's own
    // concurrency, owes anything.
    // Parts owed in an earlier pool of the queue (the pool's want_gen is not its queue's pool_gen) count
    // for nothing and leave at the pool's next sync.
    let stale = |pool: &str| -> bool {
        let base = pool.split('@').next().unwrap_or(pool);
        let gen: Option<String> = snap.hget(keys.queue_conf(base), "pool_gen");
        let want_gen: Option<String> = snap.hget(keys.queue_conf(pool), "want_gen");
        gen.unwrap_or_default() != want_gen.unwrap_or_default()
    };
    let mut owed: HashMap<String, i64> = HashMap::new();
    for key in snap.scan(keys.pattern("queue_want")) {
        if keys.parts("queue_lane", &key).is_some() {
            continue;
        }
        let queue = first_part(&keys, "queue_want", &key);
        if stale(&queue) {
            continue;
        }
        let parts: HashMap<String, i64> = snap.hgetall(&key);
        for (lane, part) in &parts {
            let (q, k) = lane.split_once('\n').unwrap_or((lane.as_str(), ""));
            let parked: Option<String> = snap.hget(keys.queue_parked(q), k);
            let owes = snap.hexists(keys.queue_heads(q), k)
                || parked.is_some_and(|p| p.split(' ').nth(1) == Some("concurrency"));
            if *part <= 0 || !owes {
                problems.push(format!(
                    "queue {queue}: lane {q}/{k} owes {part} of its floor but is not open"
                ));
            }
        }
        owed.insert(queue, parts.values().sum());
    }
    for key in snap.scan(keys.pattern("queue_conf")) {
        let queue = first_part(&keys, "queue_conf", &key);
        let want: i64 = if stale(&queue) {
            0
        } else {
            snap.hget(&key, "want").unwrap_or(0)
        };
        let sum = owed.remove(&queue).unwrap_or(0);
        if want != sum {
            problems.push(format!("queue {queue}: conf want {want} but its lanes owe {sum}"));
        }
    }
    for (queue, sum) in owed.into_iter().filter(|(_, s)| *s != 0) {
        problems.push(format!("queue {queue}: lanes owe {sum} but it has no conf"));
    }
    // Workflows (lua/includes/workflow.lua): each ended member was counted once, as completed or failed,
    // and a workflow that ended for its jobs' sake counted all of them.
    for key in snap.scan(keys.pattern("workflow")) {
        let id = first_part(&keys, "workflow", &key);
        if keys.parts("workflow_jobs", &key).is_some() || keys.parts("workflow_results", &key).is_some() {
            continue;
        }
        let w: HashMap<String, String> = snap.hgetall(&key);
        let num = |k: &str| w.get(k).and_then(|v| v.parse::<i64>().ok()).unwrap_or(0);
        let (total, completed, failed) = (num("total"), num("completed"), num("failed"));
        let ended: i64 = snap.hlen(keys.workflow_results(&id));
        let listed: i64 = snap.llen(keys.workflow_jobs(&id));
        if completed + failed != ended || ended > total || listed != total {
            problems.push(format!(
                "workflow {key}: completed {completed} + failed {failed} vs {ended} results, {listed} listed, total {total}"
            ));
        }
        let state = w.get("state").map(String::as_str).unwrap_or("");
        let whole = match (w.get("type").map(String::as_str), state) {
            (Some("chain"), "completed") => completed == total,
            (Some("chain"), "failed") => failed == 1,
            (Some(_), "completed" | "failed") => completed + failed == total,
            (Some(_), "running" | "cancelled") => true,
            _ => false,
        };
        if !whole {
            problems.push(format!(
                "workflow {key} is {state} with completed {completed}, failed {failed} of {total}"
            ));
        }
    }
    // The listing index stays bounded (lua/includes/workflow.lua wf_close): a listed workflow whose keys
    // expired waits in P workflows:closed to be taken out, and nothing is there that is not listed.
    let listed: HashSet<String> = snap.zrange(keys.workflows()).into_iter().collect();
    let closed = snap.zset(keys.workflows_closed());
    for id in &listed {
        if !snap.exists(keys.workflow(id)) && !closed.contains_key(id) {
            problems.push(format!(
                "workflow {id} is listed, its keys expired, and nothing will take it out of the listing"
            ));
        }
    }
    for id in closed.keys().filter(|id| !listed.contains(*id)) {
        problems.push(format!("workflows:closed holds {id}, which is not listed"));
    }
    // Slots held as leases: every holder of a slot is an active job that holds it by its record (no
    // leaked or foreign slot), and its slot ends with the job's lease. `holds` says whether a job's
    // record holds it; `what` names the slot's owner.
    let mut slots = |key: &str, what: &str, holds: &dyn Fn(&HashMap<String, String>) -> bool| {
        for (id, deadline) in snap.zset(key) {
            let f: HashMap<String, String> = snap.hgetall(keys.job(&id));
            if f.get("state").map(String::as_str) != Some("active") || !holds(&f) {
                problems.push(format!(
                    "{what}: slot held by {id}, which is not an active job holding one"
                ));
            } else if f.get("lease_until").and_then(|l| l.parse::<f64>().ok()) != Some(deadline) {
                problems.push(format!(
                    "{what}: slot of {id} ends at {deadline}, its lease at {:?}",
                    f.get("lease_until")
                ));
            }
        }
    };
    // Rate-limit keys' slots.
    for key in snap.scan(keys.pattern("rl_active")) {
        let rl_key = first_part(&keys, "rl_active", &key);
        slots(&key, &format!("rate-limit key {rl_key}"), &|f| {
            f.get("rl_key") == Some(&rl_key)
        });
    }
    // A tenant's concurrency in a queue (lua/includes/tenant.lua): the record names the sub-queue's
    // slot in `tslot`; a tenant parked at its cap is out of the fair share and holds a slot (so a
    // slot's return will wake it).
    for key in snap.scan(keys.pattern("queue_rl_active")) {
        let q = first_part(&keys, "queue_rl_active", &key);
        let Some((base, part)) = q.split_once('@') else {
            continue;
        };
        let tenant = part.replace("%3A", ":");
        slots(&key, &format!("tenant {tenant:?} of queue {base}"), &|f| {
            f.get("tslot") == Some(&q)
                && f.get("queue").map(String::as_str) == Some(base)
                && f.get("tenant") == Some(&tenant)
        });
    }
    for key in snap.scan(keys.pattern("queue_tenants_full")) {
        let base = first_part(&keys, "queue_tenants_full", &key);
        for tenant in snap.smembers(&key) {
            if snap.zset(keys.queue_tenants(&base)).contains_key(&tenant) {
                problems.push(format!(
                    "tenant {tenant:?} is parked at its cap in {base} and in its fair share"
                ));
            }
            let sub = format!("{base}@{}", tenant.replace(':', "%3A"));
            if snap.zset(keys.queue_rl_active(&sub)).is_empty() {
                problems.push(format!(
                    "tenant {tenant:?} is parked at its cap in {base} and holds no slot: nothing will wake it"
                ));
            }
        }
    }

    // Costs (lua/includes/rl_policy.lua "Costs"): each holder listed in `active:cost` holds a slot and
    // the units its record says it took; `active:units` is the sum of units - 1 over them (absent when
    // 0); `win:units`, while it exists, is the sum of u - 1 over the window's entries `id:claim:u`.
    for key in snap.scan(keys.pattern("rl_active_cost")) {
        let rl_key = first_part(&keys, "rl_active_cost", &key);
        let slots = snap.zset(keys.rl_active(&rl_key));
        for (id, units) in snap.hgetall::<i64>(&key) {
            let took = snap
                .hgetall::<String>(keys.job(&id))
                .get("rl_units")
                .and_then(|u| u.split(' ').next()?.parse::<i64>().ok());
            if !slots.contains_key(&id) || took != Some(units) {
                problems.push(format!(
                    "rate-limit key {rl_key}: {id} holds {units} units by active:cost, slot held {}, its record says {took:?}",
                    slots.contains_key(&id)
                ));
            }
        }
    }
    for key in snap.scan(keys.pattern("rl_active")) {
        let rl_key = first_part(&keys, "rl_active", &key);
        let extra: i64 = snap
            .hgetall::<i64>(keys.rl_active_cost(&rl_key))
            .values()
            .map(|u| u - 1)
            .sum();
        let counted = snap
            .get(keys.rl_active_units(&rl_key))
            .and_then(|v| v.parse::<i64>().ok());
        if counted.unwrap_or(0) != extra || counted == Some(0) {
            problems.push(format!(
                "rate-limit key {rl_key}: active:units is {counted:?}, its holders hold {extra} beyond one each"
            ));
        }
    }
    for key in snap.scan(keys.pattern("rl_win_units")) {
        let rl_key = first_part(&keys, "rl_win_units", &key);
        let entries: i64 = snap
            .zrange(keys.rl_win(&rl_key))
            .iter()
            .filter_map(|m| {
                m.rsplit(':')
                    .next()
                    .filter(|_| m.matches(':').count() == 2)?
                    .parse::<i64>()
                    .ok()
            })
            .map(|u| u - 1)
            .sum();
        let counted = snap.get(&key).and_then(|v| v.parse::<i64>().ok()).unwrap_or(0);
        if counted != entries {
            problems.push(format!(
                "rate-limit key {rl_key}: win:units is {counted}, the window's entries count {entries} beyond one each"
            ));
        }
    }

    // Per-priority ready counts (priority-stats) equal the ready sets.
    let mut counted: HashMap<(String, String), i64> = HashMap::new();
    for key in snap.scan(keys.pattern("queue_pri")) {
        let queue = first_part(&keys, "queue_pri", &key);
        let m: HashMap<String, i64> = snap.hgetall(&key);
        for (prio, n) in m {
            counted.insert((queue.clone(), prio), n);
        }
    }
    if counted != ready_by_priority {
        problems.push(format!(
            "per-priority ready counts {counted:?} differ from the ready sets {ready_by_priority:?}"
        ));
    }
    // Unique locks (lua/includes/unique.lua): P unique:<key> names the job that last took the key; a
    // holder whose hash still exists carries that key (it may have moved on: the script reads its state
    // lazily, so a lock pointing at a finished or expired job is not a broken invariant).
    for key in snap.scan(keys.pattern("unique")) {
        let fp = first_part(&keys, "unique", &key);
        let holder: Option<String> = snap.get(&key);
        let Some(holder) = holder else { continue };
        let f: HashMap<String, String> = snap.hgetall(keys.job(&holder));
        if !f.is_empty() && f.get("unique") != Some(&fp) {
            problems.push(format!(
                "unique lock {fp} names job {holder}, whose uniqueness key is {:?}",
                f.get("unique")
            ));
        }
    }
    // Run-time deduplication (lua/includes/supersede.lua): P dedup:<fp> is '<ms> <id>', the start of a
    // job with that deduplication fingerprint (a job that started: it has started_at); P root:<sig> is
    // the newest started root's timestamp (ms); a superseded job is completed and was not claimed for it.
    for key in snap.scan(keys.pattern("dedup")) {
        let fp = first_part(&keys, "dedup", &key);
        let rec: Option<String> = snap.get(&key);
        let Some((at, id)) = rec.as_deref().and_then(|r| r.split_once(' ')) else {
            problems.push(format!("dedup record {fp} is {rec:?}, not '<ms> <job id>'"));
            continue;
        };
        let f: HashMap<String, String> = snap.hgetall(keys.job(&id));
        if at.parse::<i64>().is_err()
            || (!f.is_empty() && (f.get("dedup") != Some(&fp) || !f.contains_key("started_at")))
        {
            problems.push(format!(
                "dedup record {fp} = {rec:?}: its job has dedup {:?}, started_at {:?}",
                f.get("dedup"),
                f.get("started_at")
            ));
        }
    }
    for key in snap.scan(keys.pattern("root")) {
        let v: Option<String> = snap.get(&key);
        if v.as_deref()
            .and_then(|v| v.parse::<i64>().ok())
            .is_none_or(|ms| ms <= 0)
        {
            problems.push(format!("root record {key} is {v:?}, not a timestamp in ms"));
        }
    }
    // Cron entries (lua/cron-set-1.lua): every name in P crons has its hash, and P cron:due holds
    // exactly the entries with a next_run_at, scored by it.
    let names: Vec<String> = snap.zrange(keys.crons());
    let due = snap.zset(keys.cron_due());
    for name in &names {
        let next: Option<f64> = snap.hget(keys.cron(&name), "next_run_at");
        let exists: bool = snap.exists(keys.cron(&name));
        if !exists {
            problems.push(format!("cron entry {name} is listed in crons but has no hash"));
        }
        if next != due.get(name).copied() {
            problems.push(format!(
                "cron entry {name}: next_run_at {next:?} but cron:due says {:?}",
                due.get(name)
            ));
        }
    }
    for name in due.keys().filter(|n| !names.contains(n)) {
        problems.push(format!("cron:due holds {name}, which is not a registered entry"));
    }
    problems
}
