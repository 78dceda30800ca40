//! The workers' operations routed over the shards: a FETCH's claim round (with the ACK of
//! ack-and-fetch-next first), which visits the shards that hold the job and the queues, and a
//! heartbeat, which visits the shards that hold its jobs. The route handlers (`routes/workers.rs`)
//! validate requests and render answers; which shards serve a request, in what order, and how their
//! replies merge is decided here and in `shards.rs`, never in a handler.

use std::time::Duration;

use ojs_store::{AckPart, PickQueue, Strategy, Transition, WorkerRequest};

use crate::error::ApiResult;
use crate::state::AppState;

/// A validated FETCH (also the `fetch` part of an ack-and-fetch-next ACK).
pub(crate) struct FetchParams {
    pub(crate) queues: Vec<(String, u32)>,
    pub(crate) strategy: Strategy,
    pub(crate) worker: String,
    pub(crate) count: u32,
    pub(crate) visibility_ms: Option<u64>,
    pub(crate) wait: Duration,
    /// `X-OJS-Tenant`: claim only that tenant's jobs (else every tenant's, by fair share).
    pub(crate) tenant: Option<String>,
    /// When the FETCH began, for its claim spans: read only when tracing is on.
    pub(crate) began: Option<std::time::SystemTime>,
}

impl FetchParams {
    /// The store's request for this FETCH over `queues` (its own, or those of one shard), claiming at
    /// most `count`, acknowledging `ack` first when given (ack-and-fetch-next).
    pub(crate) fn request(&self, queues: &[(String, u32)], count: u32, ack: Option<AckPart>) -> WorkerRequest {
        WorkerRequest {
            ack,
            queues: queues.to_vec(),
            strategy: self.strategy,
            worker_id: self.worker.clone(),
            count,
            visibility_ms: self.visibility_ms,
            tenant: self.tenant.clone(),
        }
    }
}

/// One claim round, with the ACK of ack-and-fetch-next first when `ack` is given: one script call when
/// the job and the queues live on one shard (always, on a deployment of one shard). Otherwise the ACK
/// goes to the job's shard first, then the queues' shards are visited, each claiming what is still
/// wanted: in the order of the request (strict), or in an order drawn at random with each shard
/// weighing the sum of its queues' weights (weighted; inside a shard the script's weighted round
/// applies). Priority order holds within each shard; across shards, strict order of the queues does.
pub(crate) async fn claim_round(
    st: &AppState,
    p: Option<&FetchParams>,
    mut ack: Option<AckPart>,
) -> ApiResult<(Option<Transition<ojs_store::Acked>>, Claims)> {
    let (queues, at) = match p {
        Some(p) => {
            let names: Vec<&str> = p.queues.iter().map(|(q, _)| q.as_str()).collect();
            (p.queues.as_slice(), st.shards.find_queues(&names).await?)
        }
        None => (&[][..], Vec::new()),
    };
    let ack_shards: Vec<usize> = ack
        .as_ref()
        .map(|a| st.shards.for_id(&a.job_id).iter().map(|s| s.shard_index()).collect())
        .unwrap_or_default();
    let mut tried = 0;
    let mut acked = None;
    // The common case: the job and the queues on one shard, one script call.
    if let Some(p) = p {
        let s = ack_shards.first().copied().unwrap_or(at[0]);
        if at.iter().all(|x| *x == s) {
            // A client's own id may name the wrong shard: keep the ACK to try the others.
            let retry = (ack_shards.len() > 1).then(|| ack.clone()).flatten();
            let (_, mut reply) = st.worker_calls(s).call(p.request(queues, p.count, ack.take())).await?;
            match (reply.acked.take(), retry) {
                (Some(Transition::NotFound), Some(a)) => {
                    ack = Some(a);
                    tried = 1;
                }
                (acked, _) => return Ok((acked, Claims::from(reply))),
            }
        }
    }
    if let Some(a) = ack {
        for (i, s) in ack_shards.iter().enumerate().skip(tried) {
            let (_, reply) = st.worker_calls(*s).call(WorkerRequest::ack_only(a.clone())).await?;
            let found = !matches!(reply.acked, None | Some(Transition::NotFound));
            acked = reply.acked;
            if found || i + 1 == ack_shards.len() {
                break;
            }
        }
        if !matches!(acked, Some(Transition::Done(_))) {
            return Ok((acked, Claims::default()));
        }
    }
    let Some(p) = p else {
        return Ok((acked, Claims::default()));
    };
    if p.strategy == Strategy::Weighted && at.iter().any(|s| *s != at[0]) {
        return Ok((acked, claim_weighted_across(st, p, queues, &at).await?));
    }
    let mut claims = Claims::default();
    for (s, part) in visit_order(queues, &at) {
        let want = p.count - claims.jobs.len() as u32;
        if want == 0 {
            break;
        }
        let (_, reply) = st.worker_calls(s).call(p.request(&part, want, None)).await?;
        claims.cut |= reply.cut;
        claims.jobs.extend(reply.claimed);
    }
    Ok((acked, claims))
}

/// What a claim round got: the jobs, and whether a script call stopped on its budget of jobs popped
/// without a claim (`cut`: more may be claimable at once, so a FETCH that got none calls again
/// instead of waiting).
#[derive(Default)]
pub(crate) struct Claims {
    pub(crate) jobs: Vec<ojs_store::Claimed>,
    pub(crate) cut: bool,
}

impl From<ojs_store::WorkerReply> for Claims {
    fn from(r: ojs_store::WorkerReply) -> Self {
        Self {
            jobs: r.claimed,
            cut: r.cut,
        }
    }
}

/// The shards a strict FETCH over queues of several shards visits, each with its queues: runs of
/// consecutive queues on one shard, in the request's order (see [`claim_round`]).
fn visit_order(queues: &[(String, u32)], at: &[usize]) -> Vec<(usize, Vec<(String, u32)>)> {
    let mut runs: Vec<(usize, Vec<(String, u32)>)> = Vec::new();
    for (q, s) in queues.iter().zip(at) {
        match runs.last_mut() {
            Some((last, part)) if last == s => part.push(q.clone()),
            _ => runs.push((*s, vec![q.clone()])),
        }
    }
    runs
}

/// A weighted FETCH whose queues live on several shards (priority seed §7.2): the round-robin that
/// picks the queue of each claim runs on shard 0 over one state shared by every pod (`lua/pick-1.lua`),
/// and the claims are made on the queues' shards (the requests of one shard share its script call). A
/// pick whose queue ran dry meanwhile is refunded (its round undone, exactly) and picked again among
/// the others, so the sequence of claims is the one a single shard would make.
async fn claim_weighted_across(
    st: &AppState,
    p: &FetchParams,
    queues: &[(String, u32)],
    at: &[usize],
) -> ApiResult<Claims> {
    // Which queues can give a job now, asked of each shard at once.
    let mut shards: Vec<usize> = at.to_vec();
    shards.sort_unstable();
    shards.dedup();
    let asked = futures::future::try_join_all(shards.iter().map(|s| {
        let idx: Vec<usize> = (0..queues.len()).filter(|i| at[*i] == *s).collect();
        async move {
            let names: Vec<&str> = idx.iter().map(|i| queues[*i].0.as_str()).collect();
            let ready = st.shards.get(*s).queues_ready(&names).await?;
            Ok::<_, ojs_store::StoreError>(idx.into_iter().zip(ready).collect::<Vec<_>>())
        }
    }))
    .await?;
    let mut pq: Vec<PickQueue> = queues
        .iter()
        .map(|(name, weight)| PickQueue {
            name: name.clone(),
            weight: *weight,
            was_live: false,
            live: false,
        })
        .collect();
    for (i, ready) in asked.into_iter().flatten() {
        pq[i].live = ready;
    }
    let mut claims = Claims::default();
    let mut refunds: Vec<usize> = Vec::new();
    let mut want = p.count;
    // Each round claims what it picked, or takes at least one dry queue out (a call cut short by its
    // budget keeps its queue in: bounded by the extra rounds).
    for _ in 0..queues.len() + 4 {
        if want == 0 || !pq.iter().any(|q| q.live) {
            break;
        }
        let picks = st.shards.first().pick_weighted(want, &pq, &refunds).await?;
        refunds.clear();
        for q in &mut pq {
            q.was_live = q.live;
        }
        let mut per: std::collections::BTreeMap<usize, u32> = Default::default();
        for i in &picks {
            *per.entry(*i).or_default() += 1;
        }
        let replies = futures::future::try_join_all(per.iter().map(|(i, n)| {
            st.worker_calls(at[*i]).call(WorkerRequest {
                ack: None,
                queues: vec![queues[*i].clone()],
                strategy: Strategy::Strict,
                worker_id: p.worker.clone(),
                count: *n,
                visibility_ms: p.visibility_ms,
                tenant: p.tenant.clone(),
            })
        }))
        .await?;
        let mut got: std::collections::HashMap<usize, std::collections::VecDeque<ojs_store::Claimed>> =
            Default::default();
        for ((i, n), (_, reply)) in per.iter().zip(replies) {
            let short = *n as usize - reply.claimed.len();
            if short > 0 {
                refunds.extend(std::iter::repeat_n(*i, short));
                if reply.cut {
                    claims.cut = true;
                } else {
                    pq[*i].live = false;
                }
            }
            got.insert(*i, reply.claimed.into());
        }
        // In the order picked.
        for i in picks {
            if let Some(job) = got.get_mut(&i).and_then(|d| d.pop_front()) {
                claims.jobs.push(job);
                want -= 1;
            }
        }
    }
    if !refunds.is_empty() {
        for q in &mut pq {
            q.live = false;
        }
        st.shards.first().pick_weighted(0, &pq, &refunds).await?;
    }
    Ok(claims)
}

/// A heartbeat: on one shard, there; on a deployment of several shards: each shard that holds some of the jobs (by their ids;
/// a job a shard does not know is looked for on the others), and shard 0 in any case: it keeps the
/// worker registry and the operator's signal. A heartbeat acting as `tenant` extends none of another
/// tenant's jobs.
pub(crate) async fn heartbeat(
    st: &AppState,
    worker: &str,
    jobs: &[(String, Option<String>)],
    extend: Option<u64>,
    reported: Option<&str>,
    tenant: Option<&str>,
) -> ApiResult<ojs_store::Heartbeat> {
    let first = st.shards.first();
    if st.shards.count() == 1 {
        return Ok(first.heartbeat(worker, jobs, extend, reported, tenant).await?);
    }
    let leases: std::collections::HashMap<&str, &Option<String>> =
        jobs.iter().map(|(id, l)| (id.as_str(), l)).collect();
    let ids: Vec<String> = jobs.iter().map(|(id, _)| id.clone()).collect();
    let zero = std::sync::Mutex::new(None);
    let (leases, zero_ref) = (&leases, &zero);
    let per_job = st
        .shards
        .by_ids(
            &ids,
            |s, part| async move {
                let part: Vec<(String, Option<String>)> = part
                    .into_iter()
                    .map(|id| (id.clone(), leases.get(id.as_str()).and_then(|l| (*l).clone())))
                    .collect();
                let mut hb = s.heartbeat(worker, &part, extend, reported, tenant).await?;
                let items = std::mem::take(&mut hb.jobs);
                if s.shard_index() == 0 {
                    *zero_ref.lock().unwrap_or_else(|e| e.into_inner()) = Some(hb);
                }
                Ok(items)
            },
            |(_, state, _)| state != "missing",
            || (String::new(), "missing".to_string(), None),
        )
        .await?;
    let mut hb = match zero.into_inner().unwrap_or_else(|e| e.into_inner()) {
        Some(hb) => hb,
        None => first.heartbeat(worker, &[], extend, reported, tenant).await?,
    };
    hb.jobs = ids
        .into_iter()
        .zip(per_job)
        .map(|(id, (_, state, lease))| (id, state, lease))
        .collect();
    Ok(hb)
}
