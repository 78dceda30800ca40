//! The typed twins of the webhook scripts (the ojs-webhooks extension): `lua/webhook-sub-set-1.lua`
//! (a subscription written, on shard 0), `lua/webhook-fanout-1.lua` (events turned into deliveries),
//! `lua/webhook-claim-1.lua`, `lua/webhook-complete-1.lua` and `lua/webhook-fail-1.lua` (a delivery
//! claimed with a lease, then ended or rescheduled). See each script's header; the server's side is
//! crates/ojs-server/src/webhooks.rs.

use super::args::{
    WebhookClaimArgs, WebhookCompleteArgs, WebhookFailArgs, WebhookFanoutArgs, WebhookFanoutDeliveryRecord,
    WebhookSubSetArgs,
};

use crate::reply::{val_i64, val_str, Reply};
use crate::store::{Result, Store};

/// What writing a subscription did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SubSaved {
    /// Written; `before`: how many subscriptions the deployment held before.
    Written { before: u64 },
    /// A create refused: the deployment holds this many already (nothing written).
    Full(u64),
    /// An update of a subscription that no longer exists (nothing written).
    NotFound,
}

/// One delivery to write (webhook-fanout-1.lua's DELIVERY record).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewDelivery {
    /// Lowercase hex, the same for the same event and subscription.
    pub id: String,
    pub sub: String,
    pub event_type: String,
    pub event_id: String,
    /// The request body (the OJS event envelope as JSON), the same for every attempt.
    pub body: String,
}

/// One delivery a claim took (webhook-claim-1.lua).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimedDelivery {
    pub id: String,
    /// This attempt's number (1 for the first): the claim's fence.
    pub attempt: i64,
    pub sub: String,
    pub event_type: String,
    pub body: String,
}

/// How an attempt's end was taken (webhook-complete-1.lua, webhook-fail-1.lua).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeliveryEnd {
    /// The delivery is now in `state` (`delivered`, `retrying`, `dead` or `cancelled`); `next_at`: when a
    /// retrying one is due (ms, Redis' clock).
    Ended { state: String, next_at: Option<i64> },
    /// Recorded, but a newer claim holds the delivery (this pod's lease had lapsed); its state now.
    Stale(String),
    /// The delivery's record expired.
    NotFound,
}

/// How a failed attempt's delivery goes on (webhook-fail-1.lua's retry_in_ms and final).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterFailure {
    /// Due again this many ms from now.
    RetryIn(u64),
    /// Ends dead: retries exhausted, or an answer not worth retrying.
    Dead,
    /// Ends cancelled: its subscription is gone.
    Cancelled,
}

impl Store {
    fn webhook_sub_set_args(&self, id: &str, def: &str, create: bool, max_subs: u64) -> Vec<String> {
        WebhookSubSetArgs {
            prefix: self.keys().prefix().into(),
            id: id.into(),
            def: def.into(),
            mode: if create { "create" } else { "update" }.into(),
            max_subs: max_subs.to_string(),
        }
        .into_vec()
    }

    /// Creates (`create`) or replaces a subscription's definition; call it on shard 0.
    pub async fn webhook_sub_set(&self, id: &str, def: &str, create: bool, max_subs: u64) -> Result<SubSaved> {
        let args = self.webhook_sub_set_args(id, def, create, max_subs);
        let s = &self.scripts.webhook_sub_set;
        let items = self.run(s, &[self.keys().webhook_subs()], args).await?;
        let r = Reply::new(s.name, &items);
        match r.tag()? {
            "ok" => Ok(SubSaved::Written {
                before: r.i64(1)?.max(0) as u64,
            }),
            "full" => Ok(SubSaved::Full(r.i64(1)?.max(0) as u64)),
            "not_found" => Ok(SubSaved::NotFound),
            _ => Err(r.unknown_tag()),
        }
    }

    fn webhook_fanout_args(
        &self,
        group: &str,
        entries: &[String],
        keep_ms: u64,
        log_max: u64,
        deliveries: &[NewDelivery],
    ) -> Vec<String> {
        let mut args = Vec::with_capacity(WebhookFanoutArgs::LEN + WebhookFanoutDeliveryRecord::LEN * deliveries.len());
        WebhookFanoutArgs {
            prefix: self.keys().prefix().into(),
            group: group.into(),
            entries: entries.join(" "),
            keep_ms: keep_ms.to_string(),
            log_max: log_max.to_string(),
        }
        .push(&mut args);
        for d in deliveries {
            WebhookFanoutDeliveryRecord {
                id: d.id.clone(),
                sub: d.sub.clone(),
                event_type: d.event_type.clone(),
                event_id: d.event_id.clone(),
                body: d.body.clone(),
            }
            .push(&mut args);
        }
        args
    }

    /// Writes the deliveries that do not exist yet and acknowledges `entries` of this shard's event
    /// stream to `group`, in one script call: (deliveries created, entries acknowledged).
    pub async fn webhook_fanout(
        &self,
        group: &str,
        entries: &[String],
        keep_ms: u64,
        log_max: u64,
        deliveries: &[NewDelivery],
    ) -> Result<(u64, u64)> {
        let args = self.webhook_fanout_args(group, entries, keep_ms, log_max, deliveries);
        let s = &self.scripts.webhook_fanout;
        let items = self.run(s, &[self.keys().events()], args).await?;
        let r = Reply::new(s.name, &items);
        match r.tag()? {
            "ok" => Ok((r.i64(1)?.max(0) as u64, r.i64(2)?.max(0) as u64)),
            _ => Err(r.unknown_tag()),
        }
    }

    /// Claims up to `count` due deliveries of this shard, each for `lease_ms`: (Redis' time in ms, the
    /// claimed deliveries).
    pub async fn webhook_claim(&self, count: u32, lease_ms: u64) -> Result<(i64, Vec<ClaimedDelivery>)> {
        let args = WebhookClaimArgs {
            prefix: self.keys().prefix().into(),
            count: count.clamp(1, 1000).to_string(),
            lease_ms: lease_ms.to_string(),
        }
        .into_vec();
        let s = &self.scripts.webhook_claim;
        let items = self.run(s, &[self.keys().webhook_due()], args).await?;
        let r = Reply::new(s.name, &items);
        if r.tag()? != "ok" {
            return Err(r.unknown_tag());
        }
        let claimed = r
            .rest(2)
            .chunks_exact(5)
            .map(|c| ClaimedDelivery {
                id: val_str(&c[0]),
                attempt: val_i64(&c[1]),
                sub: val_str(&c[2]),
                event_type: val_str(&c[3]),
                body: val_str(&c[4]),
            })
            .collect();
        Ok((r.i64(1)?, claimed))
    }

    /// Records a successful attempt (a 2xx answer) of the claim `attempt`; the delivery ends delivered
    /// unless a newer claim holds it.
    pub async fn webhook_complete(&self, id: &str, attempt: i64, outcome: &str, keep_ms: u64) -> Result<DeliveryEnd> {
        let args = WebhookCompleteArgs {
            prefix: self.keys().prefix().into(),
            id: id.into(),
            attempt: attempt.to_string(),
            outcome: outcome.into(),
            keep_ms: keep_ms.to_string(),
        }
        .into_vec();
        let s = &self.scripts.webhook_complete;
        let items = self.run(s, &[self.keys().webhook_delivery(id)], args).await?;
        let r = Reply::new(s.name, &items);
        match r.tag()? {
            "ok" => Ok(DeliveryEnd::Ended {
                state: "delivered".into(),
                next_at: None,
            }),
            "stale" => Ok(DeliveryEnd::Stale(r.str(1)?)),
            "not_found" => Ok(DeliveryEnd::NotFound),
            _ => Err(r.unknown_tag()),
        }
    }

    fn webhook_fail_args(
        &self,
        id: &str,
        attempt: i64,
        outcome: &str,
        after: AfterFailure,
        keep_ms: u64,
    ) -> Vec<String> {
        let (retry_in_ms, last) = match after {
            AfterFailure::RetryIn(ms) => (ms.to_string(), "dead"),
            AfterFailure::Dead => (String::new(), "dead"),
            AfterFailure::Cancelled => (String::new(), "cancelled"),
        };
        WebhookFailArgs {
            prefix: self.keys().prefix().into(),
            id: id.into(),
            attempt: attempt.to_string(),
            outcome: outcome.into(),
            retry_in_ms,
            ends_as: last.into(),
            keep_ms: keep_ms.to_string(),
        }
        .into_vec()
    }

    /// Records a failed attempt of the claim `attempt`; the delivery is due again or ends, as `after`
    /// says, unless a newer claim holds it.
    pub async fn webhook_fail(
        &self,
        id: &str,
        attempt: i64,
        outcome: &str,
        after: AfterFailure,
        keep_ms: u64,
    ) -> Result<DeliveryEnd> {
        let args = self.webhook_fail_args(id, attempt, outcome, after, keep_ms);
        let s = &self.scripts.webhook_fail;
        let items = self.run(s, &[self.keys().webhook_delivery(id)], args).await?;
        let r = Reply::new(s.name, &items);
        match r.tag()? {
            "ok" => {
                let next_at = r.i64(2)?;
                Ok(DeliveryEnd::Ended {
                    state: r.str(1)?,
                    next_at: (next_at > 0).then_some(next_at),
                })
            }
            "stale" => Ok(DeliveryEnd::Stale(r.str(1)?)),
            "not_found" => Ok(DeliveryEnd::NotFound),
            _ => Err(r.unknown_tag()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_webhook_scripts_are_written_in_the_order_their_headers_declare() {
        let s = super::super::test_store();
        assert_eq!(
            s.webhook_sub_set_args("u", "{}", true, 100),
            ["ojs:{t}:", "u", "{}", "create", "100"]
        );
        let d = NewDelivery {
            id: "ab".into(),
            sub: "u".into(),
            event_type: "job.completed".into(),
            event_id: "1-0.2".into(),
            body: "{}".into(),
        };
        let args = s.webhook_fanout_args("g", &["1-0".into(), "2-0".into()], 5, 7, &[d]);
        assert_eq!(
            args,
            [
                "ojs:{t}:",
                "g",
                "1-0 2-0",
                "5",
                "7",
                "ab",
                "u",
                "job.completed",
                "1-0.2",
                "{}"
            ]
        );
        assert_eq!(
            s.webhook_fail_args("ab", 2, "{}", AfterFailure::RetryIn(30), 9)[4..6],
            ["30", "dead"]
        );
        assert_eq!(
            s.webhook_fail_args("ab", 2, "{}", AfterFailure::Cancelled, 9)[4..6],
            ["", "cancelled"]
        );
    }
}
