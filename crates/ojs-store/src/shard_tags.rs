//! Where the shards of a deployment live on a Redis Cluster (issue 39). Each shard is one hash tag, so
//! one slot, so one primary. The legacy tags (`<ns>`, `<ns>.1`, `<ns>.2`, …) land wherever their CRC16
//! sends them: on a 3-primary cluster of even slot ranges, `--shards 3` of namespace `main` put two
//! shards on one primary and none on the third. So when a deployment first uses shard `i ≥ 1` on a
//! cluster, its tag is chosen for the primary that holds the fewest of the deployment's shards so far,
//! and recorded on shard 0 (`P tags`, a hash: shard index → tag, written with HSETNX and read back, so
//! pods racing to place one shard all use the one that was recorded first). A recorded tag never changes;
//! moving a shard to another primary is moving its slot (README, "Running on a Redis Cluster").
//!
//! A shard the deployment already used under its legacy tag keeps it: one below the directory's count of
//! shards (`P shards`, which this code raises only after recording the tags below it), or one whose
//! legacy keys exist. On one Redis nothing is recorded and every shard keeps its legacy tag, so a
//! single-node keyspace is the same, key for key, as before.

use std::collections::HashMap;

use redis::Value;

use crate::conn::Conn;
use crate::keys::{slot_of, Keys};
use crate::store::{Result, Store, StoreError};

/// How many candidate tags (`<ns>.<i>.<n>`, n = 1, 2, …) are tried for a shard before it keeps its
/// legacy tag: with P primaries of even ranges, each candidate misses a given primary with probability
/// 1 - 1/P, so 16,384 candidates find one for any cluster Redis allows.
const CANDIDATES: usize = 16_384;

/// A primary and the slot ranges it serves (`CLUSTER SLOTS`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Primary {
    /// `host:port` as the cluster announces it.
    pub addr: String,
    pub ranges: Vec<(u16, u16)>,
}

impl Primary {
    fn holds(&self, slot: u16) -> bool {
        self.ranges.iter().any(|(lo, hi)| (*lo..=*hi).contains(&slot))
    }
}

/// The primary of `primaries` that serves `tag`'s slot (its index), if any.
pub fn owner_of(primaries: &[Primary], tag: &str) -> Option<usize> {
    let slot = slot_of(tag);
    primaries.iter().position(|p| p.holds(slot))
}

/// The tag for shard `shard` given the tags of the deployment's other shards known so far (`placed`):
/// the first of `<ns>.<shard>`, `<ns>.<shard>.1`, `<ns>.<shard>.2`, … whose slot lies on a primary
/// holding the fewest of `placed`. The legacy tag when the slot map is empty or no candidate fits.
pub fn choose_tag(namespace: &str, shard: usize, placed: &[String], primaries: &[Primary]) -> String {
    let legacy = Keys::legacy_tag(namespace, shard);
    let mut load = vec![0usize; primaries.len()];
    for t in placed {
        if let Some(p) = owner_of(primaries, t) {
            load[p] += 1;
        }
    }
    let Some(least) = load.iter().min().copied() else {
        return legacy;
    };
    std::iter::once(legacy.clone())
        .chain((1..=CANDIDATES).map(|n| format!("{legacy}.{n}")))
        .find(|t| owner_of(primaries, t).is_some_and(|p| load[p] == least))
        .unwrap_or(legacy)
}

/// Whether `tag` may be shard `shard`'s tag in `namespace`: its legacy tag or one of its candidates
/// (so a recorded value never points into another namespace or shard).
fn valid_tag(namespace: &str, shard: usize, tag: &str) -> bool {
    let legacy = Keys::legacy_tag(namespace, shard);
    tag == legacy
        || tag
            .strip_prefix(&legacy)
            .and_then(|r| r.strip_prefix('.'))
            .and_then(|n| n.parse::<usize>().ok())
            .is_some_and(|n| (1..=CANDIDATES).contains(&n) && tag == format!("{legacy}.{n}"))
}

/// The cluster's primaries and their slot ranges, asked of the node that holds `key`.
pub async fn cluster_primaries(conn: &mut Conn, key: &str) -> Result<Vec<Primary>> {
    let v: Value = conn.on_tag(redis::cmd("CLUSTER").arg("SLOTS"), key).await?;
    Ok(parse_cluster_slots(&v))
}

fn parse_cluster_slots(v: &Value) -> Vec<Primary> {
    let mut out: Vec<Primary> = Vec::new();
    let Value::Array(ranges) = v else { return out };
    for r in ranges {
        let Value::Array(r) = r else { continue };
        let (Some(Value::Int(lo)), Some(Value::Int(hi)), Some(Value::Array(node))) = (r.first(), r.get(1), r.get(2))
        else {
            continue;
        };
        let host = match node.first() {
            Some(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
            Some(Value::SimpleString(s)) => s.clone(),
            _ => String::new(),
        };
        let Some(Value::Int(port)) = node.get(1) else { continue };
        let addr = format!("{host}:{port}");
        let (Ok(lo), Ok(hi)) = (u16::try_from(*lo), u16::try_from(*hi)) else {
            continue;
        };
        match out.iter_mut().find(|p| p.addr == addr) {
            Some(p) => p.ranges.push((lo, hi)),
            None => out.push(Primary {
                addr,
                ranges: vec![(lo, hi)],
            }),
        }
    }
    out.sort_by(|a, b| a.addr.cmp(&b.addr));
    out
}

impl Store {
    /// The hash tags of shards `0..n` of this deployment (shard 0's first), placing and recording the
    /// ones never used (see the module's documentation). On one Redis: the legacy tags, nothing written.
    /// Call it on shard 0's store before raising the directory's count to `n`.
    pub async fn shard_tags(&self, n: usize) -> Result<Vec<String>> {
        let ns = self.cfg.namespace.clone();
        let legacy: Vec<String> = (0..n.max(1)).map(|i| Keys::legacy_tag(&ns, i)).collect();
        if self.cfg.redis_cluster.is_empty() || n <= 1 {
            return Ok(legacy);
        }
        let first = Keys::new(&ns);
        let mut conn = self.conn().await?;
        let mut recorded = recorded_tags(&mut conn, &ns).await?;
        if (1..n).all(|i| recorded.contains_key(&i)) {
            return Ok((0..n)
                .map(|i| recorded.remove(&i).unwrap_or_else(|| legacy[i].clone()))
                .collect());
        }
        let used: Option<usize> = redis::cmd("GET")
            .arg(first.shard_count())
            .query_async(&mut conn)
            .await?;
        let used = used.unwrap_or(1);
        let primaries = cluster_primaries(&mut conn, &first.schema()).await?;
        // First what is fixed: recorded tags, and the legacy tags of shards an older build used; then the
        // others, in order, each on a primary holding the fewest of all those before it.
        let mut fixed: Vec<Option<String>> = vec![Some(legacy[0].clone())];
        for (i, old) in legacy.iter().enumerate().skip(1) {
            let keep = match recorded.remove(&i) {
                Some(t) => Some(t),
                None if i < used || legacy_keys_exist(&mut conn, &ns, i).await? => Some(old.clone()),
                None => None,
            };
            fixed.push(keep);
        }
        let mut known: Vec<String> = fixed.iter().flatten().cloned().collect();
        let mut tags = vec![legacy[0].clone()];
        for (i, keep) in fixed.into_iter().enumerate().skip(1) {
            let tag = match keep {
                Some(t) => t,
                None => {
                    let t = choose_tag(&ns, i, &known, &primaries);
                    known.push(t.clone());
                    t
                }
            };
            let _: bool = redis::cmd("HSETNX")
                .arg(first.shard_tags())
                .arg(i)
                .arg(&tag)
                .query_async(&mut conn)
                .await?;
            // Another pod may have recorded this shard first: use what is recorded.
            let now: Option<String> = redis::cmd("HGET")
                .arg(first.shard_tags())
                .arg(i)
                .query_async(&mut conn)
                .await?;
            let now =
                now.ok_or_else(|| StoreError::Reply(format!("shard {i}'s tag vanished from {}", first.shard_tags())))?;
            if !valid_tag(&ns, i, &now) {
                return Err(StoreError::Reply(format!(
                    "{} names {now:?} for shard {i}",
                    first.shard_tags()
                )));
            }
            tags.push(now);
        }
        Ok(tags)
    }
}

/// The tags recorded on shard 0 (`P tags`), by shard index; an entry that is not a tag of its shard is
/// an error (it would point into another shard's or namespace's keys).
pub async fn recorded_tags(conn: &mut Conn, namespace: &str) -> Result<HashMap<usize, String>> {
    let key = Keys::new(namespace).shard_tags();
    let raw: HashMap<String, String> = redis::cmd("HGETALL").arg(&key).query_async(conn).await?;
    let mut out = HashMap::new();
    for (i, tag) in raw {
        let Some(i) = i.parse::<usize>().ok().filter(|i| *i > 0) else {
            return Err(StoreError::Reply(format!("{key} has a field {i:?} that is no shard")));
        };
        if !valid_tag(namespace, i, &tag) {
            return Err(StoreError::Reply(format!("{key} names {tag:?} for shard {i}")));
        }
        out.insert(i, tag);
    }
    Ok(out)
}

/// Whether shard `i` already has keys under its legacy tag (a deployment of older code used it).
async fn legacy_keys_exist(conn: &mut Conn, namespace: &str, i: usize) -> Result<bool> {
    let k = Keys::for_shard(namespace, i);
    let n: u64 = redis::cmd("EXISTS")
        .arg(k.schema())
        .arg(k.queues())
        .arg(k.events())
        .arg(k.seq())
        .arg(k.scheduled())
        .arg(k.active())
        .arg(k.dead())
        .arg(k.workers())
        .arg(k.crons())
        .arg(k.workflows())
        .query_async(conn)
        .await?;
    Ok(n > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three primaries of even ranges, as `redis-cli --cluster create` makes them.
    fn three() -> Vec<Primary> {
        vec![
            Primary {
                addr: "a:1".into(),
                ranges: vec![(0, 5460)],
            },
            Primary {
                addr: "b:1".into(),
                ranges: vec![(5461, 10922)],
            },
            Primary {
                addr: "c:1".into(),
                ranges: vec![(10923, 16383)],
            },
        ]
    }

    fn place(ns: &str, n: usize, primaries: &[Primary]) -> Vec<String> {
        let mut tags = vec![Keys::legacy_tag(ns, 0)];
        for i in 1..n {
            let t = choose_tag(ns, i, &tags, primaries);
            tags.push(t);
        }
        tags
    }

    fn per_primary(tags: &[String], primaries: &[Primary]) -> Vec<usize> {
        let mut load = vec![0; primaries.len()];
        for t in tags {
            load[owner_of(primaries, t).expect("an owner")] += 1;
        }
        load
    }

    #[test]
    fn legacy_tags_of_main_crowd_one_primary_and_placed_ones_spread() {
        let p = three();
        let legacy: Vec<String> = (0..3).map(|i| Keys::legacy_tag("main", i)).collect();
        assert!(
            per_primary(&legacy, &p).contains(&0),
            "the issue's case: {:?}",
            per_primary(&legacy, &p)
        );
        for ns in ["main", "t", "a-b_c", "ns42"] {
            assert_eq!(per_primary(&place(ns, 3, &p), &p), [1, 1, 1], "{ns}");
            assert_eq!(per_primary(&place(ns, 6, &p), &p), [2, 2, 2], "{ns}");
        }
        // A shard whose legacy tag already fits keeps it.
        let tags = place("main", 3, &p);
        for (i, t) in tags.iter().enumerate() {
            assert!(valid_tag("main", i, t) || i == 0, "{t}");
        }
    }

    #[test]
    fn no_slot_map_keeps_the_legacy_tag_and_only_candidates_are_valid() {
        assert_eq!(choose_tag("main", 2, &["main".into()], &[]), "main.2");
        assert!(valid_tag("main", 2, "main.2"));
        assert!(valid_tag("main", 2, "main.2.17"));
        assert!(!valid_tag("main", 2, "main.2.017"));
        assert!(!valid_tag("main", 2, "main.3"));
        assert!(!valid_tag("main", 2, "main.2.0"));
        assert!(!valid_tag("main", 2, "other.2.1"));
        assert!(!valid_tag("main", 2, "main.2}x{"));
    }

    #[test]
    fn cluster_slots_replies_group_by_primary() {
        let node = |h: &str, p: i64| Value::Array(vec![Value::BulkString(h.as_bytes().to_vec()), Value::Int(p)]);
        let v = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(99),
                node("127.0.0.1", 7001),
                node("127.0.0.1", 7004),
            ]),
            Value::Array(vec![Value::Int(100), Value::Int(16383), node("127.0.0.1", 7002)]),
            Value::Array(vec![Value::Int(200), Value::Int(300), node("127.0.0.1", 7001)]),
        ]);
        let p = parse_cluster_slots(&v);
        assert_eq!(p.len(), 2);
        assert_eq!(p[0].addr, "127.0.0.1:7001");
        assert_eq!(p[0].ranges, [(0, 99), (200, 300)]);
    }
}
