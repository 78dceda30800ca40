//! The key schema's Rust side. Every key of a deployment's shard 0 starts with `ojs:{<namespace>}:`, of
//! shard `i > 0` with `ojs:{<namespace>.<i>}:`; the braces are a Redis Cluster hash tag, so all keys of
//! one shard live in one slot and every script is single-slot. (`.` is not allowed in a namespace, so
//! no namespace's shard 0 is another's shard.) On a Redis Cluster, a shard `i > 0` first used by this
//! code may instead live under a tag `<namespace>.<i>.<n>` chosen for its primary and recorded on shard 0
//! (`shard_tags.rs`); everything before the first `.` of a tag is still its namespace, so no two
//! namespaces share a tag. The families and their methods come from `layout.rs`.

use crate::layout;

#[derive(Debug, Clone)]
pub struct Keys {
    prefix: String,
}

impl Keys {
    /// The keys of the deployment's shard 0 (the only shard of a deployment that has one).
    /// `namespace` must already be validated (see [`Keys::check_namespace`]).
    pub fn new(namespace: &str) -> Self {
        Self::for_shard(namespace, 0)
    }

    /// The keys of shard `shard` under its legacy tag ([`Keys::legacy_tag`]): every shard on one Redis,
    /// shard 0 always, and on a cluster a shard whose tag shard 0 records as its legacy one. A placed
    /// shard's keys are [`Keys::for_tag`] of its recorded tag.
    pub fn for_shard(namespace: &str, shard: usize) -> Self {
        Self::for_tag(&Self::legacy_tag(namespace, shard))
    }

    /// The keys under the hash tag `tag` (without braces): `ojs:{<tag>}:`.
    pub fn for_tag(tag: &str) -> Self {
        Self {
            prefix: format!("ojs:{{{tag}}}:"),
        }
    }

    /// Shard `shard`'s tag before tags were placed: `<namespace>` for shard 0, `<namespace>.<i>` after.
    pub fn legacy_tag(namespace: &str, shard: usize) -> String {
        match shard {
            0 => namespace.to_string(),
            i => format!("{namespace}.{i}"),
        }
    }

    /// The hash tag of these keys (between the braces of the prefix).
    pub fn tag(&self) -> &str {
        let inner = self.prefix.strip_prefix("ojs:{").unwrap_or(&self.prefix);
        inner.strip_suffix("}:").unwrap_or(inner)
    }

    /// Namespaces: 1–64 of `[a-z0-9_-]`, so no namespace can contain another's hash tag.
    pub fn check_namespace(ns: &str) -> Result<(), String> {
        if !ns.is_empty()
            && ns.len() <= 64
            && ns
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
        {
            Ok(())
        } else {
            Err(format!("namespace must be 1-64 characters of [a-z0-9_-]; got {ns:?}"))
        }
    }

    /// The name under which a tenant's waiting jobs of `queue` live (its sub-queue, lua/includes/tenant.lua
    /// `sub_queue`, which a test below holds this to): the queue families take it as their queue part.
    pub fn tenant_sub_queue(queue: &str, tenant: &str) -> String {
        format!("{queue}@{}", tenant.replace(':', "%3A"))
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }
    /// SCAN's pattern for every key of a family (each part a `*`), e.g. `P q:*:ready`.
    pub fn pattern(&self, family: &str) -> String {
        let template = family_of(family).template;
        format!(
            "{}{}",
            self.prefix,
            layout::render(template, |_| "*".into(), str::to_string)
        )
    }

    /// The parts of `key` if it is a key of `family`, in template order (`P q:a:lane:k` of
    /// `queue_lane` is `["a", "k"]`). A part ends at the first text that follows it in the template, so
    /// only the last part may contain that text (rate-limit keys may contain `:`).
    pub fn parts<'a>(&self, family: &str, key: &'a str) -> Option<Vec<&'a str>> {
        let mut rest = key.strip_prefix(self.prefix.as_str())?;
        let pieces = layout::pieces(family_of(family).template);
        let mut out = Vec::new();
        for (i, (part, s)) in pieces.iter().enumerate() {
            if !part {
                rest = rest.strip_prefix(*s)?;
                continue;
            }
            let value = match pieces.get(i + 1) {
                None => rest,
                Some((_, next)) if i + 2 == pieces.len() => rest.strip_suffix(*next)?,
                Some((_, next)) => &rest[..rest.find(*next)?],
            };
            if value.is_empty() {
                return None;
            }
            out.push(value);
            rest = &rest[value.len()..];
        }
        rest.is_empty().then_some(out)
    }
}

/// The Redis Cluster slot of `key` (CRC16/XMODEM of its hash tag, or of the whole key without one,
/// modulo 16384), as `CLUSTER KEYSLOT` computes it.
pub fn slot_of(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let hashed = bytes
        .iter()
        .position(|b| *b == b'{')
        .and_then(|open| {
            let rest = &bytes[open + 1..];
            let close = rest.iter().position(|b| *b == b'}')?;
            (close > 0).then(|| &rest[..close])
        })
        .unwrap_or(bytes);
    crc16::State::<crc16::XMODEM>::calculate(hashed) % 16384
}

fn family_of(name: &str) -> &'static layout::KeyFamily {
    layout::KEY_FAMILIES
        .iter()
        .find(|f| f.name == name)
        .unwrap_or_else(|| panic!("no key family {name:?} in layout.rs"))
}

include!(concat!(env!("OUT_DIR"), "/keys_gen.rs"));

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenants_sub_queue_is_named_as_the_scripts_name_it() {
        let lua = include_str!("../../../lua/includes/tenant.lua");
        assert!(lua.contains("return queue .. '@' .. Tenant.part(tenant)"));
        assert!(lua.contains("string.gsub(tenant, ':', '%%3A')"));
        assert_eq!(Keys::tenant_sub_queue("q", "acme:eu"), "q@acme%3Aeu");
    }
    use ojs_core::names;

    /// Every family's key with each part set to `value`.
    fn key_of(k: &Keys, f: &layout::KeyFamily, value: &str) -> String {
        format!(
            "{}{}",
            k.prefix(),
            layout::render(f.template, |_| value.into(), str::to_string)
        )
    }

    /// Whether `value` can fill the part `part` (the checks the server applies before a name reaches a
    /// key; ids, fingerprints and weights are made by the server: a UUID or lowercase hex).
    fn may_fill(part: &str, value: &str) -> bool {
        let hex = |v: &str| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        match part {
            // Pool names follow the queue-name rules (ojs-server's pools.rs).
            "queue" | "pool" => names::check_queue(value).is_ok(),
            "name" => names::check_cron_name(value).is_ok(),
            "key" => names::check_rate_limit_key(value).is_ok(),
            "id" => value.len() == 36 && value.split('-').all(hex),
            "fingerprint" | "weights" => hex(value),
            "worker" => !value.is_empty(),
            other => panic!("part {other:?} has no check here: add one"),
        }
    }

    #[test]
    fn every_key_carries_the_hash_tag_and_reads_back_as_its_parts() {
        let k = Keys::new("main");
        for f in layout::KEY_FAMILIES {
            let key = key_of(&k, f, "a.b");
            assert!(key.starts_with("ojs:{main}:"), "{key}");
            assert!(!layout::pieces(f.template)
                .iter()
                .any(|(part, s)| !part && s.contains(['{', '}'])));
            let n = layout::part_names(f.template).len();
            assert_eq!(k.parts(f.name, &key), Some(vec!["a.b"; n]), "{}", f.name);
        }
        assert_eq!(k.queue_lane("q", "user:7"), "ojs:{main}:q:q:lane:user:7");
        assert_eq!(
            k.parts("queue_lane", &k.queue_lane("q", "user:7")),
            Some(vec!["q", "user:7"])
        );
        assert_eq!(k.parts("rl_state", &k.rl_state("a:b")), Some(vec!["a:b"]));
        assert_eq!(k.parts("queue_ready", &k.queue_stats("q")), None);
        assert_eq!(k.pattern("queue_lane"), "ojs:{main}:q:*:lane:*");
        assert!(Keys::check_namespace("main").is_ok());
        assert!(Keys::check_namespace("a}b").is_err());
    }

    #[test]
    fn no_key_of_one_family_is_a_key_of_another() {
        let k = Keys::new("main");
        // Values a client may send, some shaped like other families' literal text.
        let samples = [
            "a",
            "due",
            "keys",
            "wake",
            "x:state",
            "x:active",
            "ready",
            "q:a:ready",
            "1:jobs",
        ];
        for a in layout::KEY_FAMILIES {
            for value in samples {
                let key = key_of(&k, a, value);
                for b in layout::KEY_FAMILIES.iter().filter(|b| b.name != a.name) {
                    let Some(parts) = k.parts(b.name, &key) else { continue };
                    let names: Vec<&str> = layout::pieces(b.template)
                        .iter()
                        .filter(|(p, _)| *p)
                        .map(|(_, n)| *n)
                        .collect();
                    let collides = parts.iter().zip(&names).all(|(v, part)| may_fill(part, v))
                        && (a.template == "schema" || !a.template.contains('{') || may_fill_all(a, value));
                    assert!(
                        !collides,
                        "{key} is a key of both {} and {} (parts {parts:?})",
                        a.name, b.name
                    );
                }
            }
        }
    }

    fn may_fill_all(f: &layout::KeyFamily, value: &str) -> bool {
        layout::pieces(f.template)
            .iter()
            .filter(|(p, _)| *p)
            .all(|(_, n)| may_fill(n, value))
    }

    #[test]
    fn slots_are_the_ones_redis_computes() {
        // Values of CLUSTER KEYSLOT (Redis 7.2).
        assert_eq!(slot_of("123456789"), 12739);
        assert_eq!(slot_of("foo"), 12182);
        assert_eq!(slot_of("{user1000}.following"), slot_of("user1000"));
        assert_eq!(slot_of("foo{}{bar}"), slot_of("foo{}{bar}"));
        assert_ne!(slot_of("foo{}{bar}"), slot_of("bar"));
        assert_eq!(slot_of(&Keys::for_shard("main", 1).schema()), slot_of("main.1"));
    }

    #[test]
    fn a_tag_reads_back_and_legacy_tags_are_the_old_prefixes() {
        assert_eq!(Keys::for_shard("main", 0).prefix(), "ojs:{main}:");
        assert_eq!(Keys::for_shard("main", 2).prefix(), "ojs:{main.2}:");
        assert_eq!(Keys::for_shard("main", 2).tag(), "main.2");
        assert_eq!(Keys::for_tag("main.2.7").prefix(), "ojs:{main.2.7}:");
        assert_eq!(Keys::for_tag("main.2.7").tag(), "main.2.7");
    }

    #[test]
    fn the_architecture_doc_names_every_key_family() {
        let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/architecture.md"))
            .expect("docs/architecture.md");
        for f in layout::KEY_FAMILIES {
            let shown = layout::render(f.template, |p| format!("<{p}>"), str::to_string);
            assert!(
                doc.contains(&format!("`P {shown}`")),
                "docs/architecture.md does not name `P {shown}`"
            );
        }
    }
}
