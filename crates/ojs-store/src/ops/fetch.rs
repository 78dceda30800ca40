//! The typed twin of `lua/fetch-1.lua`: the workers' group commit. One script call serves many
//! requests, each an ACK, a FETCH, or both (ack-and-fetch-next); see the script's header.

use super::args::{FetchArgs, FetchQueueRecord, FetchReqRecord};

use super::{acked, Acked, ClaimRef, Transition};
use crate::reply::{decode_job, Reply};
use crate::store::{Result, Store, StoredJob};

/// The acknowledgement part of a [`WorkerRequest`].
#[derive(Debug, Clone)]
pub struct AckPart {
    pub job_id: String,
    pub claim: ClaimRef,
    /// The job's result as JSON text.
    pub result: Option<String>,
    /// The units the job really used (`cost_used`): its rate-limit window entry counts that instead
    /// of its cost.
    pub used: Option<u64>,
}

/// One worker request in a group commit: an ACK (`ack` set, `count` 0), a FETCH (`ack` unset), or an
/// ACK that claims the next jobs in the same step (both).
#[derive(Debug, Clone)]
pub struct WorkerRequest {
    pub ack: Option<AckPart>,
    /// (name, weight) pairs; weights only matter for [`Strategy::Weighted`].
    pub queues: Vec<(String, u32)>,
    pub strategy: Strategy,
    pub worker_id: String,
    /// Most jobs to claim; 0 claims nothing.
    pub count: u32,
    /// Lease length for claimed jobs that set none (the server's default when `None`).
    pub visibility_ms: Option<u64>,
    /// The tenant the request acts as: it claims only this tenant's jobs (`None`: every tenant's, by
    /// fair share), and its ACK of another tenant's job is not found. A request's ACK and claims act as
    /// one tenant: its `ack`'s claim names the same.
    pub tenant: Option<String>,
}

/// What one [`WorkerRequest`] got.
#[derive(Debug)]
pub struct WorkerReply {
    /// The ACK's outcome, when the request had one.
    pub acked: Option<Transition<Acked>>,
    pub claimed: Vec<Claimed>,
    /// The request stopped on the call's budget of jobs popped without a claim (`MAX_SKIPS` in
    /// `lua/fetch-1.lua`) before it claimed `count`: more may be claimable by calling again.
    pub cut: bool,
}

impl WorkerRequest {
    /// A request that only acknowledges `ack` (acting as the tenant its claim names) and claims nothing.
    pub fn ack_only(ack: AckPart) -> Self {
        let tenant = ack.claim.tenant.clone();
        WorkerRequest {
            ack: Some(ack),
            queues: Vec::new(),
            strategy: Strategy::Strict,
            worker_id: String::new(),
            count: 0,
            visibility_ms: None,
            tenant,
        }
    }

    /// Appends this request's arguments in the order of the script's header: its REQ record, then
    /// one QUEUE record per queue.
    fn push_args(&self, default_visibility_ms: u64, args: &mut Vec<String>) {
        let none = ClaimRef::default();
        let (ack_id, claim, result, used) = match &self.ack {
            Some(a) => (a.job_id.as_str(), &a.claim, a.result.as_deref().unwrap_or(""), a.used),
            None => ("", &none, "", None),
        };
        let [lease, attempt, worker] = claim.args();
        FetchReqRecord {
            worker_id: self.worker_id.clone(),
            count: self.count.to_string(),
            visibility_ms: self.visibility_ms.unwrap_or(default_visibility_ms).to_string(),
            strategy: self.strategy.as_str().into(),
            wrr_key: match self.strategy {
                Strategy::Strict => String::new(),
                Strategy::Weighted => wrr_key(&self.queues),
            },
            ack_id: ack_id.into(),
            ack_result: result.into(),
            ack_lease: lease,
            ack_attempt: attempt,
            ack_worker: worker,
            nqueues: self.queues.len().to_string(),
            tenant: self.tenant.clone().unwrap_or_default(),
            ack_used: used.map(|u| u.to_string()).unwrap_or_default(),
        }
        .push(args);
        for (q, w) in &self.queues {
            FetchQueueRecord {
                name: q.clone(),
                weight: w.to_string(),
            }
            .push(args);
        }
    }
}

impl WorkerReply {
    /// Request `i`'s reply, item `2 + i` of the call's: `{ack, cut, job_1, …}`, where ack is ack_job's
    /// reply when the request had an ACK.
    fn from_reply(call: &Reply, i: usize, had_ack: bool) -> Result<Self> {
        let script = "fetch (a request's reply)";
        let items = call.array(2 + i)?;
        let r = Reply::new(script, items);
        let acked = match had_ack {
            true => Some(acked(&Reply::new("fetch (an ACK's reply)", r.array(0)?))?),
            false => None,
        };
        Ok(WorkerReply {
            acked,
            cut: r.flag(1)?,
            // Each claimed job as the script returns it: its record, with its parents' results for a
            // workflow job that has them ([`decode_job`]), decoded straight into the typed job.
            claimed: (2..items.len())
                .map(|k| {
                    decode_job(&items[k])
                        .map(|job| Claimed { job })
                        .ok_or_else(|| r.error(k, "a claimed job's record"))
                })
                .collect::<Result<_>>()?,
        })
    }
}

impl Store {
    /// Serves `requests` in order in one script call (one round trip): each request's outcome is its
    /// own, exactly as if it had been sent alone. Returns Redis time and one reply per request.
    pub async fn worker_requests(&self, requests: &[WorkerRequest]) -> Result<(i64, Vec<WorkerReply>)> {
        let mut args = FetchArgs {
            prefix: self.keys().prefix().into(),
            retention_ms: self.cfg.retention_ms.to_string(),
        }
        .into_vec();
        for r in requests {
            r.push_args(self.cfg.default_visibility_ms, &mut args);
        }
        let items = self.run(&self.scripts.fetch, &[self.keys().active()], args).await?;
        let call = Reply::new(self.scripts.fetch.name, &items);
        let replies = requests
            .iter()
            .enumerate()
            .map(|(i, r)| WorkerReply::from_reply(&call, i, r.ack.is_some()))
            .collect::<Result<_>>()?;
        Ok((call.i64(1)?, replies))
    }

    /// One [`WorkerRequest`] alone.
    pub async fn worker_request(&self, request: WorkerRequest) -> Result<(i64, WorkerReply)> {
        let (now, mut replies) = self.worker_requests(std::slice::from_ref(&request)).await?;
        let reply = replies.pop().unwrap_or(WorkerReply {
            acked: request.ack.as_ref().map(|_| Transition::NotFound),
            claimed: Vec::new(),
            cut: false,
        });
        Ok((now, reply))
    }

    /// Claims up to `count` jobs in one script call. `queues` are (name, weight); weights only matter
    /// for `Weighted`. Fewer may come back while more are claimable when the call met its budget
    /// (see [`WorkerReply::cut`], which [`Store::worker_request`] gives).
    pub async fn fetch(
        &self,
        queues: &[(String, u32)],
        strategy: Strategy,
        worker_id: &str,
        count: u32,
        visibility_ms: Option<u64>,
    ) -> Result<(i64, Vec<Claimed>)> {
        let (now, reply) = self
            .worker_request(WorkerRequest {
                ack: None,
                queues: queues.to_vec(),
                strategy,
                worker_id: worker_id.to_string(),
                count: count.max(1),
                visibility_ms,
                tenant: None,
            })
            .await?;
        Ok((now, reply.claimed))
    }

    /// An active job succeeded.
    pub async fn ack(&self, id: &str, claim: &ClaimRef, result: Option<&str>) -> Result<Transition<Acked>> {
        let (_, reply) = self
            .worker_request(WorkerRequest::ack_only(AckPart {
                job_id: id.to_string(),
                claim: claim.clone(),
                result: result.map(str::to_owned),
                used: None,
            }))
            .await?;
        Ok(reply.acked.unwrap_or(Transition::NotFound))
    }
}

/// How FETCH chooses among several queues.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// In the order given, each drained before the next.
    Strict,
    /// Smooth weighted round-robin over the queues with ready jobs, state shared in Redis.
    Weighted,
}

impl Strategy {
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::Strict => "strict",
            Strategy::Weighted => "weighted",
        }
    }
}

/// The round-robin state is per set of (queue, weight): a short stable hash of it names the key.
pub(crate) fn wrr_key(queues: &[(String, u32)]) -> String {
    // Each queue name and weight, each followed by a zero byte.
    let weights: Vec<String> = queues.iter().map(|(_, w)| w.to_string()).collect();
    let h = crate::fnv::fnv1a(
        queues
            .iter()
            .zip(&weights)
            .flat_map(|((q, _), w)| [q.as_bytes(), &[0u8][..], w.as_bytes(), &[0u8][..]]),
    );
    format!("{h:016x}")
}

/// A job claimed by FETCH.
#[derive(Debug)]
pub struct Claimed {
    pub job: StoredJob,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_weighted_set_keeps_its_round_robin_key_name() {
        // `P wrr:<this>` names stored state: the hash of each queue name and weight, each followed by
        // a zero byte, must not change between versions.
        assert_eq!(wrr_key(&[("email".into(), 3), ("sms".into(), 1)]), "c7de1aac9d21f2ec");
    }

    #[test]
    fn a_request_is_written_in_the_order_the_header_declares() {
        let r = WorkerRequest {
            ack: Some(AckPart {
                job_id: "j".into(),
                claim: ClaimRef {
                    lease_id: Some("7".into()),
                    attempt: Some(2),
                    worker_id: Some("w".into()),
                    tenant: Some("acme".into()),
                },
                result: Some("{}".into()),
                used: Some(50),
            }),
            queues: vec![("a".into(), 3), ("b".into(), 1)],
            strategy: Strategy::Weighted,
            worker_id: "w".into(),
            count: 5,
            visibility_ms: None,
            tenant: Some("acme".into()),
        };
        let mut args = Vec::new();
        r.push_args(30_000, &mut args);
        assert_eq!(args.len(), FetchReqRecord::LEN + 2 * FetchQueueRecord::LEN);
        assert_eq!(&args[..3], ["w", "5", "30000"]);
        assert_eq!(&args[5..13], ["j", "{}", "7", "2", "w", "2", "acme", "50"]);
        assert_eq!(&args[13..], ["a", "3", "b", "1"]);
        // An ACK alone acts as the tenant its claim names.
        let only = WorkerRequest::ack_only(r.ack.clone().expect("an ACK"));
        assert_eq!(only.tenant.as_deref(), Some("acme"));
    }
}
