//! Webhooks (the ojs-webhooks extension): the subscriptions (shard 0's `P wh:subs`, written by
//! webhook-sub-set-1.lua), the consumer group the pods read each shard's event stream with, and a
//! subscription's delivery log. The state changes are the twins in `ops/webhook.rs`.

use ojs_core::event::Event;
use redis::Value;

use crate::reads::events::stream_entries;
use crate::reply::{flat_map, val_str};
use crate::store::{Fields, Result, Store, StoreError};

/// One entry of the event stream as the group read it: its id and its events (none for an entry that
/// was trimmed while it was pending).
#[derive(Debug, Clone)]
pub struct GroupEntry {
    pub id: String,
    pub events: Vec<(String, Event)>,
}

/// A delivery as a subscription's log reads it: its id, its hash, and its attempts' outcomes (JSON, oldest
/// first).
#[derive(Debug, Clone)]
pub struct LoggedDelivery {
    pub id: String,
    pub fields: Fields,
    pub attempts: Vec<String>,
}

/// Where the group stands against the stream's cap (`webhook_group_lag`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroupLag {
    /// Entries written and not read by the group yet (None: the group does not exist).
    pub unread: Option<u64>,
    /// Of those, entries the stream's cap trimmed before the group read them: their events are never
    /// delivered.
    pub trimmed_unread: u64,
}

/// The entries of a stream reply's `[[id, [field, value, …]], …]`, each with its events.
fn group_entries(entries: &Value) -> Vec<GroupEntry> {
    let Value::Array(list) = entries else {
        return Vec::new();
    };
    let mut out: Vec<GroupEntry> = list
        .iter()
        .filter_map(|e| match e {
            Value::Array(pair) => pair.first().map(|id| GroupEntry {
                id: val_str(id),
                events: Vec::new(),
            }),
            _ => None,
        })
        .collect();
    for (event_id, event) in stream_entries(entries) {
        let entry = crate::reads::events::event_entry(&event_id).to_string();
        if let Some(g) = out.iter_mut().find(|g| g.id == entry) {
            g.events.push((event_id, event));
        }
    }
    out
}

/// The entries of an XREAD/XREADGROUP reply for one stream: `[[stream, entries]]` (RESP2) or a map
/// (RESP3); none on nil.
fn read_reply_entries(v: Value) -> Value {
    match v {
        Value::Array(streams) => streams
            .into_iter()
            .next()
            .and_then(|s| match s {
                Value::Array(pair) => pair.into_iter().nth(1),
                _ => None,
            })
            .unwrap_or(Value::Nil),
        Value::Map(m) => m.into_iter().next().map(|(_, e)| e).unwrap_or(Value::Nil),
        _ => Value::Nil,
    }
}

/// The members of an XINFO reply: a flat `[name, value, …]` array (RESP2) or a map (RESP3).
fn info_members(v: &Value) -> Vec<(String, &Value)> {
    match v {
        Value::Array(items) => items.chunks_exact(2).map(|kv| (val_str(&kv[0]), &kv[1])).collect(),
        Value::Map(m) => m.iter().map(|(k, v)| (val_str(k), v)).collect(),
        _ => Vec::new(),
    }
}

fn member<'a>(members: &[(String, &'a Value)], name: &str) -> Option<&'a Value> {
    members.iter().find(|(k, _)| k == name).map(|(_, v)| *v)
}

fn as_u64(v: Option<&Value>) -> Option<u64> {
    match v? {
        Value::Int(i) => u64::try_from(*i).ok(),
        other => val_str(other).parse().ok(),
    }
}

/// A stream id's position, `(ms, seq)`.
fn stream_pos(id: &str) -> Option<(u64, u64)> {
    let (ms, seq) = id.split_once('-')?;
    Some((ms.parse().ok()?, seq.parse().ok()?))
}

impl Store {
    /// Every subscription: (id, its definition as JSON). One HGETALL of shard 0's hash.
    pub async fn webhook_subs(&self) -> Result<Vec<(String, String)>> {
        let mut conn = self.conn().await?;
        let m: Vec<(String, String)> = redis::cmd("HGETALL")
            .arg(self.keys().webhook_subs())
            .query_async(&mut conn)
            .await?;
        Ok(m)
    }

    /// One subscription's definition as JSON, None when there is none.
    pub async fn webhook_sub(&self, id: &str) -> Result<Option<String>> {
        let mut conn = self.conn().await?;
        Ok(redis::cmd("HGET")
            .arg(self.keys().webhook_subs())
            .arg(id)
            .query_async(&mut conn)
            .await?)
    }

    /// How many subscriptions there are (one HLEN).
    pub async fn webhook_sub_count(&self) -> Result<u64> {
        let mut conn = self.conn().await?;
        Ok(redis::cmd("HLEN")
            .arg(self.keys().webhook_subs())
            .query_async(&mut conn)
            .await?)
    }

    /// Removes a subscription; true when it existed (one HDEL: nothing else refers to it by key, its
    /// pending deliveries are cancelled when they are next claimed).
    pub async fn webhook_sub_delete(&self, id: &str) -> Result<bool> {
        let mut conn = self.conn().await?;
        let n: u64 = redis::cmd("HDEL")
            .arg(self.keys().webhook_subs())
            .arg(id)
            .query_async(&mut conn)
            .await?;
        Ok(n > 0)
    }

    /// Creates the consumer group `group` on this shard's event stream at its newest entry (MKSTREAM: an
    /// empty stream is created). An existing group is left where it is, or with `reset` moved to the
    /// newest entry (the first subscription of a deployment that had none wants no older event). The
    /// group starts at the entry XINFO STREAM names newest, with that reply's count of entries ever
    /// added as its `ENTRIESREAD` (one reply, so the two agree; an entry added after it is read by the
    /// group), so that [`Store::webhook_group_lag`] can count what the cap trims unread from the start.
    pub async fn webhook_group_create(&self, group: &str, reset: bool) -> Result<()> {
        let mut conn = self.conn().await?;
        let key = self.keys().events();
        // Subcommands name their key second: routed to the shard's primary explicitly on a cluster.
        let mut info = redis::cmd("XINFO");
        info.arg("STREAM").arg(&key);
        let (last, added) = match conn.on_tag::<Value>(&info, &key).await {
            Ok(v) => {
                let s = info_members(&v);
                let last = member(&s, "last-generated-id").map(val_str);
                (
                    last.unwrap_or_else(|| "0-0".into()),
                    as_u64(member(&s, "entries-added")).unwrap_or(0),
                )
            }
            // No stream yet.
            Err(_) => ("0-0".into(), 0),
        };
        let mut create = redis::cmd("XGROUP");
        create.arg("CREATE").arg(&key).arg(group).arg(&last).arg("MKSTREAM");
        create.arg("ENTRIESREAD").arg(added);
        let created: redis::RedisResult<()> = conn.on_tag(&create, &key).await;
        match created {
            Ok(()) => Ok(()),
            Err(e) if e.code() == Some("BUSYGROUP") => {
                if reset {
                    let mut setid = redis::cmd("XGROUP");
                    setid.arg("SETID").arg(&key).arg(group).arg(&last);
                    setid.arg("ENTRIESREAD").arg(added);
                    let _: () = conn.on_tag(&setid, &key).await?;
                }
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Up to `count` entries of this shard's event stream that no consumer of `group` was given yet, now
    /// given to `consumer` (XREADGROUP, not blocking). None when the group does not exist.
    pub async fn webhook_group_read(
        &self,
        group: &str,
        consumer: &str,
        count: usize,
    ) -> Result<Option<Vec<GroupEntry>>> {
        let mut conn = self.conn().await?;
        let key = self.keys().events();
        let mut cmd = redis::cmd("XREADGROUP");
        cmd.arg("GROUP").arg(group).arg(consumer).arg("COUNT").arg(count);
        cmd.arg("STREAMS").arg(&key).arg(">");
        let read: redis::RedisResult<Value> = conn.on_tag(&cmd, &key).await;
        match read {
            Ok(v) => Ok(Some(group_entries(&read_reply_entries(v)))),
            Err(e) if e.code() == Some("NOGROUP") => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Takes over up to `count` entries another consumer of `group` was given more than `min_idle_ms`
    /// ago and never acknowledged (its pod stopped): XAUTOCLAIM from the start. Returns the entries, and
    /// the ids of pending entries the stream's cap trimmed meanwhile (XAUTOCLAIM forgets them: their
    /// events are lost).
    pub async fn webhook_group_autoclaim(
        &self,
        group: &str,
        consumer: &str,
        min_idle_ms: u64,
        count: usize,
    ) -> Result<(Vec<GroupEntry>, u64)> {
        let mut conn = self.conn().await?;
        let key = self.keys().events();
        let mut cmd = redis::cmd("XAUTOCLAIM");
        cmd.arg(&key).arg(group).arg(consumer).arg(min_idle_ms);
        cmd.arg("0-0").arg("COUNT").arg(count);
        let v: redis::RedisResult<Value> = conn.on_tag(&cmd, &key).await;
        let v = match v {
            Ok(v) => v,
            Err(e) if e.code() == Some("NOGROUP") => return Ok((Vec::new(), 0)),
            Err(e) => return Err(e.into()),
        };
        let Value::Array(parts) = v else {
            return Err(StoreError::Reply("XAUTOCLAIM: unexpected reply".into()));
        };
        let entries = parts.get(1).map(group_entries).unwrap_or_default();
        let deleted = match parts.get(2) {
            Some(Value::Array(d)) => d.len() as u64,
            _ => 0,
        };
        Ok((entries, deleted))
    }

    /// Where `group` stands on this shard's event stream: its unread entries, and how many of them the
    /// cap trimmed before it read them (XINFO STREAM and XINFO GROUPS: `entries-added`, `entries-read`,
    /// Redis 7.0 and later).
    pub async fn webhook_group_lag(&self, group: &str) -> Result<GroupLag> {
        let mut conn = self.conn().await?;
        let key = self.keys().events();
        // Subcommands name their key second: routed to the shard's primary explicitly on a cluster.
        let mut info = redis::cmd("XINFO");
        info.arg("STREAM").arg(&key);
        let stream: redis::RedisResult<Value> = conn.on_tag(&info, &key).await;
        let Ok(stream) = stream else {
            return Ok(GroupLag::default());
        };
        let mut info = redis::cmd("XINFO");
        info.arg("GROUPS").arg(&key);
        let groups: Value = conn.on_tag(&info, &key).await?;
        let s = info_members(&stream);
        let Value::Array(groups) = groups else {
            return Ok(GroupLag::default());
        };
        let Some(g) = groups
            .iter()
            .map(info_members)
            .find(|g| member(g, "name").map(val_str).as_deref() == Some(group))
        else {
            return Ok(GroupLag::default());
        };
        let added = as_u64(member(&s, "entries-added")).unwrap_or(0);
        let length = as_u64(member(&s, "length")).unwrap_or(0);
        let first = match member(&s, "first-entry") {
            Some(Value::Array(e)) => e.first().map(val_str),
            _ => None,
        };
        let delivered = member(&g, "last-delivered-id").map(val_str).unwrap_or_default();
        let Some(read) = as_u64(member(&g, "entries-read")) else {
            return Ok(GroupLag {
                unread: as_u64(member(&g, "lag")),
                trimmed_unread: 0,
            });
        };
        let unread = added.saturating_sub(read);
        // The group's last entry is older than the stream's first: what lies between was trimmed unread.
        let behind = match (first.as_deref().and_then(stream_pos), stream_pos(&delivered)) {
            (Some(f), Some(d)) => d < f,
            _ => false,
        };
        Ok(GroupLag {
            unread: Some(unread),
            trimmed_unread: if behind { unread.saturating_sub(length) } else { 0 },
        })
    }

    /// The newest `limit` deliveries of subscription `sub` on this shard, newest first, each with its
    /// attempts' outcomes; expired ones are left out.
    pub async fn webhook_log(&self, sub: &str, limit: usize) -> Result<Vec<LoggedDelivery>> {
        let mut conn = self.conn().await?;
        let ids: Vec<String> = redis::cmd("ZREVRANGE")
            .arg(self.keys().webhook_log(sub))
            .arg(0)
            .arg(limit.max(1) - 1)
            .query_async(&mut conn)
            .await?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for id in &ids {
            pipe.cmd("HGETALL").arg(self.keys().webhook_delivery(id));
            pipe.cmd("LRANGE").arg(self.keys().webhook_attempts(id)).arg(0).arg(-1);
        }
        let replies: Vec<Value> = pipe.query_async(&mut conn).await?;
        let mut out = Vec::with_capacity(ids.len());
        for (id, pair) in ids.into_iter().zip(replies.chunks_exact(2)) {
            let fields: Fields = flat_map(&pair[0]);
            if fields.is_empty() {
                continue;
            }
            let attempts: Vec<String> = match &pair[1] {
                Value::Array(a) => a.iter().map(val_str).collect(),
                _ => Vec::new(),
            };
            out.push(LoggedDelivery { id, fields, attempts });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_read_splits_entries_into_their_events_and_keeps_empty_ones() {
        let b = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let entries = Value::Array(vec![
            Value::Array(vec![
                b("5-0"),
                Value::Array(vec![b("job.started"), b("a q x 1 "), b("job.completed"), b("b q x 1 ")]),
            ]),
            Value::Array(vec![b("6-0"), Value::Nil]),
        ]);
        let got = group_entries(&entries);
        assert_eq!(got.len(), 2);
        let ids: Vec<&str> = got[0].events.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!((got[0].id.as_str(), ids), ("5-0", vec!["5-0", "5-0.1"]));
        assert!(got[1].events.is_empty());
        assert_eq!(stream_pos("12-3"), Some((12, 3)));
        assert!(stream_pos("9-9") < stream_pos("10-0"));
    }
}
