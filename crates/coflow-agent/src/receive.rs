//! A get's receiving side: the grant's parts fetched at once and handed to the client in order,
//! and a part cut and resumed over another path when the coordinator reroutes it or its relay
//! dies.
//!
//! A grant is one part (the whole piece, fetched directly) or several (a get split over detours
//! by multi-path routing, or resumed): each the bytes `[offset, offset + length)` of the piece as
//! a flow of its own, in order of offset, together covering the rest of the piece. Every part is
//! fetched at once; the first streams straight to the client (at the pace the client reads), and
//! each later one into a buffer of its own that is handed on once every part before it is done,
//! so that the client sees the piece's bytes in order. The buffers hold at most the bytes of the
//! later parts, which the coordinator keeps to flows it may split.
//!
//! A part the coordinator reroutes (its link went down, its relay died), or whose relay cannot be
//! reached, is cut at the bytes it verified: its receiver announces a get that resumes the rest
//! of the part ([`coflow_proto::pb::AnnounceGetRequest::resume_flow_id`]), and the new grant's
//! parts take its place, into the same sink, at most [`MAX_RESUMES`] times over. The resume names
//! where the cut part ends, so that a coordinator that restarted since it granted the part (and
//! never saw it) grants the rest all the same. The cut part leaves the agent's table and the
//! resume is announced at once; after a failure (not a reroute the coordinator ordered), a part
//! of the new grant that asks the peer that just failed again (the same relay, or without one
//! the same source) waits first, longer at each resume, so that the resumes outlast the time the
//! coordinator takes to find a dead peer dead; a part that avoids that peer starts at once. A
//! relay that cannot reach the source, or loses it, says so: the source is then the peer that
//! failed, and the cut part waits (the resume's backoff, and at least four heartbeats: `source_pause`)
//! before its rest is resumed, still listed, so that the
//! coordinator's failure of the flow (once it finds the source dead) ends the get, and a resume
//! finds the source silent and leaves the healthy relay in new paths.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use coflow_core::{CoflowId, FlowId, MachineId};
use coflow_proto::pb::agent_message::Body;
use coflow_proto::ticket::{TICKET_LEN, Ticket};
use coflow_proto::{DataId, ErrorKind, pb};
use tokio::sync::watch;
use tokio::task::JoinSet;

pub(crate) use crate::data::Sink;
use crate::data::{self, Part};
use crate::error::AgentError;
use crate::state::{Receiving, Shared, Stop};

/// How many times a part may be resumed over another path, all its successors counted.
pub(crate) const MAX_RESUMES: u32 = 4;

/// How long a part of a resume's grant that asks the peer that just failed again waits before
/// it fetches, at the first resume, at least; each later resume of the same bytes waits twice as
/// long (0.5 s, 1 s, 2 s, 4 s: 7.5 s in all, two and a half of the coordinator's default agent
/// timeouts of 3 s).
const RESUME_BACKOFF_FIRST: Duration = Duration::from_millis(500);

/// The wait after a failure of a part with `resumes` resumes left, for its rest's parts that ask
/// the same peer again. A coordinator that said its agent timeout (`timeout`) takes that long to
/// find a dead peer dead: the first wait is at least a sixth of it, so that the waits of all the
/// resumes add up to two and a half timeouts, however long the operator set it.
fn resume_backoff(resumes: u32, timeout: Option<Duration>) -> Duration {
    let first = RESUME_BACKOFF_FIRST.max(timeout.unwrap_or_default() / 6);
    first.saturating_mul(1 << MAX_RESUMES.saturating_sub(resumes).min(8))
}

/// How long a part whose relay lost its source waits, listed, before its rest is resumed, with
/// `resumes` resumes left: the resume's backoff (with the coordinator's agent timeout `timeout`),
/// and at least four of the coordinator's heartbeat intervals (`heartbeat`, as its registration
/// told), so that the coordinator, which takes an agent silent for three of them for a suspect,
/// sees a dead source so by then.
fn source_pause(resumes: u32, heartbeat: Duration, timeout: Option<Duration>) -> Duration {
    resume_backoff(resumes, timeout).max(heartbeat.saturating_mul(4))
}

/// The error of a resume the coordinator refused: `unknown-flow` (the coordinator failed the
/// cut part meanwhile, as it does a receiver's flows when it declares the receiver dead, say
/// after this agent was frozen past the agent timeout) says so, keeping its kind, which the
/// client may retry with a get of its own; any other refusal as it came.
fn flow_gone(e: AgentError, flow: FlowId) -> AgentError {
    match e {
        AgentError::Coordinator(s) if ErrorKind::of(&s) == Some(ErrorKind::UnknownFlow) => {
            AgentError::Coordinator(ErrorKind::UnknownFlow.status(
                s.code(),
                format!(
                    "the coordinator no longer knows flow {flow}, whose rest this agent resumed (it failed the flow \
                     meanwhile: its receiver or source was declared dead); get the piece again ({})",
                    s.message()
                ),
            ))
        }
        other => other,
    }
}

/// The peer a cut part could not reach (its relay, or without one its source): the parts of its
/// rest's grant that ask it again wait `pause` before they fetch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Failed {
    pub(crate) addr: String,
    pub(crate) pause: Duration,
}

/// How long `part` waits before it fetches: `failed`'s pause when it asks that peer again.
fn pause_before(part: &Part, failed: Option<&Failed>) -> Duration {
    failed.filter(|f| f.addr == part.peer().1).map_or(Duration::ZERO, |f| f.pause)
}

/// What every part of one get shares.
#[derive(Clone, Debug)]
pub(crate) struct Get {
    /// The agent.
    pub(crate) shared: Arc<Shared>,
    /// The piece.
    pub(crate) coflow: CoflowId,
    pub(crate) data_id: DataId,
    /// The client's identity, for the coordinator's ownership check on a resume.
    pub(crate) client: String,
    /// The piece's size.
    pub(crate) size: u64,
    /// The parts whose end has not been reported to the coordinator yet.
    pub(crate) open: crate::unread::OpenParts,
    /// The parts whose bytes go straight to the client as they come (the others are kept until
    /// their turn): only these can the client hold back, so only these are listed unread.
    pub(crate) streamed: crate::unread::OpenParts,
}

/// Asks the coordinator for a get's flow (or, with `resume`, for the rest of a flow this agent
/// cut: its id, and the bytes `[at, end)` of the piece wanted), and returns the link epoch the
/// grant belongs to.
///
/// A coordinator that is away (restarting: its address refuses connections, or this agent has
/// not registered with it yet) is waited for, with backoff, for at most `coordinator_grace_ms`:
/// transfers keep going while the coordinator is away, and a get issued meanwhile starts once it
/// is back instead of failing at once; a coordinator that has just started answers "not yet"
/// (`UNAVAILABLE` without an error kind) for what agents may still be re-announcing, which is
/// waited for the same way. A fresh get refused `limit-exceeded` (its coflows' owner has
/// `max_gets_per_owner_per_source` flows from that source already) is asked again the same way
/// for at most the data idle timeout, as a source that says busy is, so that it starts as a place
/// is given back. Every other answer (a typed error such as `no-such-data`) is returned as it is.
pub(crate) async fn announce_get(
    shared: &Shared,
    coflow: CoflowId,
    data_id: &DataId,
    client: &str,
    resume: Option<(FlowId, u64, u64)>,
) -> Result<(u64, pb::AnnounceGetResponse), AgentError> {
    let deadline = tokio::time::Instant::now() + Duration::from_millis(shared.config.coordinator_grace_ms);
    let full_until = tokio::time::Instant::now() + shared.idle();
    let mut backoff = Duration::from_millis(20);
    loop {
        let session = shared.session();
        let attempt = async {
            if shared.session() == 0 {
                return Err(AgentError::NotRegistered);
            }
            let ann = pb::AnnounceGetRequest {
                coflow_id: coflow.0,
                data_id: data_id.as_str().to_string(),
                machine_id: shared.config.machine_id(),
                client: client.to_string(),
                resume_flow_id: resume.map_or(0, |r| r.0.0),
                resume_offset: resume.map_or(0, |r| r.1),
                resume_end: resume.map_or(0, |r| r.2),
                ..Default::default()
            };
            // Read before the grant: a coordinator that restarts after granting is a later epoch.
            let epoch = shared.link_epoch.load(Ordering::SeqCst);
            let left = deadline.saturating_duration_since(tokio::time::Instant::now()).max(Duration::from_millis(100));
            match shared.link.call(Body::Get(ann), left).await.map_err(AgentError::Coordinator)? {
                pb::agent_reply::Result::Get(grant) => Ok((epoch, grant)),
                _ => Err(AgentError::Coordinator(tonic::Status::internal(
                    "the coordinator answered a get with another reply",
                ))),
            }
        }
        .await;
        match attempt {
            // A registration that changed while the call was out (the coordinator restarted and
            // this agent registered again) is retried under the new session: what a replaced
            // session sends goes unanswered, so a refusal (`permission-denied` included) is the
            // coordinator's answer to this get and is returned at once.
            Err(e)
                if {
                    let now = tokio::time::Instant::now();
                    let away = coordinator_away(&e) || shared.session() != session;
                    let full = resume.is_none()
                        && matches!(&e, AgentError::Coordinator(s) if ErrorKind::of(s) == Some(ErrorKind::LimitExceeded));
                    (away && now + backoff < deadline) || (full && now + backoff < full_until)
                } =>
            {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_millis(500));
            }
            other => return other,
        }
    }
}

/// Whether an error says the coordinator is away (not that it answered): this agent is not
/// registered with it, the call did not reach it (a transport error carries no error kind), or
/// it is stopping.
pub(crate) fn coordinator_away(e: &AgentError) -> bool {
    match e {
        AgentError::NotRegistered => true,
        AgentError::Coordinator(s) => {
            s.code() == tonic::Code::Unavailable && matches!(ErrorKind::of(s), None | Some(ErrorKind::ShuttingDown))
        }
        _ => false,
    }
}

fn ticket(bytes: &[u8]) -> Ticket {
    // A grant without a ticket of the right length is refused by the agent asked.
    bytes.try_into().unwrap_or([0; TICKET_LEN])
}

/// A grant's parts, checked: in order, contiguous, covering `[from, until)`; a grant without
/// parts is the whole piece from its source.
pub(crate) fn parts_of(grant: &pb::AnnounceGetResponse, from: u64, until: u64) -> Result<Vec<Part>, AgentError> {
    let bad = |why: String| AgentError::Coordinator(tonic::Status::internal(format!("a grant {why}")));
    if grant.parts.is_empty() {
        if (from, until) != (0, grant.size) {
            return Err(bad("resuming a flow named no part".into()));
        }
        return Ok(vec![Part {
            flow: FlowId(grant.flow_id),
            offset: 0,
            length: grant.size,
            src: MachineId(grant.src_machine_id),
            src_addr: grant.src_data_addr.clone(),
            ticket: ticket(&grant.ticket),
            via: None,
            reroutable: grant.reroutable,
        }]);
    }
    let mut at = from;
    let mut parts = Vec::with_capacity(grant.parts.len());
    for p in &grant.parts {
        if p.offset != at || p.length == 0 {
            return Err(bad(format!("with a part at {}+{} where {at} was next", p.offset, p.length)));
        }
        at = p.offset.checked_add(p.length).ok_or_else(|| bad("with a part past any size".into()))?;
        let via = p.via_machine_id.map(|m| (MachineId(m), p.via_data_addr.clone(), ticket(&p.via_ticket)));
        parts.push(Part {
            flow: FlowId(p.flow_id),
            offset: p.offset,
            length: p.length,
            src: MachineId(grant.src_machine_id),
            src_addr: grant.src_data_addr.clone(),
            ticket: ticket(&p.ticket),
            via,
            reroutable: grant.reroutable,
        });
    }
    if at != until {
        return Err(bad(format!("whose parts end at {at}, not at {until}")));
    }
    Ok(parts)
}

/// Receives `parts` (in order of offset, contiguous) into `out`: the first straight into it, each
/// later one into a buffer handed on once the parts before it are done; a part that asks the
/// peer `failed` names again waits its pause first. Fails with the first part that fails (the
/// others are then abandoned, and their ends left to the caller to report).
pub(crate) fn receive(
    get: Get,
    parts: Vec<Part>,
    out: Sink,
    epoch: u64,
    resumes: u32,
    failed: Option<Failed>,
) -> Pin<Box<dyn Future<Output = Result<(), AgentError>> + Send>> {
    Box::pin(async move {
        let mut tasks = JoinSet::new();
        let mut buffers = Vec::new();
        let n = parts.len();
        for (k, part) in parts.into_iter().enumerate() {
            let sink = if k == 0 {
                out.clone()
            } else {
                let spill = crate::spill::Spill::new(
                    get.shared.config.data_dir.clone(),
                    crate::spill::MEMORY_BYTES,
                    get.shared.spilled_bytes.clone(),
                );
                let spill = Arc::new(tokio::sync::Mutex::new(spill));
                buffers.push(spill.clone());
                // Counted when handed on to `out`.
                Sink::spill(spill)
            };
            let get = get.clone();
            let pause = pause_before(&part, failed.as_ref());
            tasks.spawn(async move { (k, receive_part(get, part, sink, epoch, resumes, pause).await) });
        }
        // Parts done, in order of offset: a buffered part is handed on once every part before it
        // is done and handed on.
        let mut done = vec![false; n];
        let mut next = 1;
        while let Some(joined) = tasks.join_next().await {
            let (k, result) = match joined {
                Ok(v) => v,
                // A part that panicked is a bug: it goes on as a panic of the get.
                Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                Err(_) => return Err(AgentError::ShuttingDown),
            };
            result?;
            done[k] = true;
            while next < n && done[next - 1] && done[next] {
                buffers[next - 1].lock().await.drain(&out).await?;
                next += 1;
            }
        }
        Ok(())
    })
}

/// One part: fetched into `sink` after `pause`; rerouted by the coordinator or cut off with its
/// relay, resumed over the paths a new grant names; its end reported to the coordinator.
async fn receive_part(
    get: Get,
    part: Part,
    sink: Sink,
    epoch: u64,
    resumes: u32,
    pause: Duration,
) -> Result<(), AgentError> {
    let shared = get.shared.clone();
    let (stop, mut stopped) = watch::channel(None::<Stop>);
    let got = Arc::new(AtomicU64::new(0));
    // Only a whole piece fetched directly is re-announced to a restarted coordinator: a part's
    // range and path are not part of that protocol, so a part is cut and its rest resumed with
    // the new coordinator instead (`link::resume_parts`).
    let whole = part.offset == 0 && part.length == get.size && part.via.is_none();
    let rec = Receiving {
        coflow: get.coflow,
        data_id: get.data_id.clone(),
        src: part.src,
        size: part.length,
        received: got.clone(),
        epoch,
        recoverable: whole,
        stop,
    };
    shared.list_receiving(part.flow, rec);
    // Gone from the agent's table however the part ends, aborted with its get too.
    let streamed = sink.is_stream().then(|| get.streamed.clone());
    if let Some(s) = &streamed {
        s.lock().expect("open parts lock").insert(part.flow);
    }
    let listed = Listed { shared: shared.clone(), flow: part.flow, streamed };
    get.open.lock().expect("open parts lock").insert(part.flow);
    // Listed and counted by the coordinator while it pauses, so that a stop the coordinator
    // sends meanwhile (the peer found dead) cuts it.
    let fetch = async {
        if !pause.is_zero() {
            tracing::info!(flow = %part.flow, peer = part.peer().1, ?pause, "asking a peer that just failed again; waiting first");
            tokio::time::sleep(pause).await;
        }
        data::fetch(&shared, get.coflow, &get.data_id, &part, &sink, &got).await
    };
    let result = tokio::select! {
        r = fetch => r.map(|_| ()).map_err(Cut::Failed),
        s = stopped.wait_for(Option::is_some) => match s.ok().and_then(|s| s.clone()) {
            Some(Stop::Reroute) => Err(Cut::Reroute),
            Some(Stop::Dropped) => Err(Cut::Ended(AgentError::UnknownCoflow(get.coflow))),
            // A failure the coordinator tells of just after this agent paused (it declared the
            // agent dead, or refuses its re-announced flow) is the pause's, not the source's.
            Some(Stop::Fail(reason)) => Err(Cut::Ended(
                shared.unless_paused(AgentError::SourceUnreachable { addr: part.src_addr.clone(), reason }),
            )),
            None => Err(Cut::Failed(AgentError::ShuttingDown)),
        },
    };
    let at = part.offset + got.load(Ordering::Relaxed);
    let end = part.offset + part.length;
    // Why the part is resumed: none when the coordinator moved it to other paths; else its relay
    // cannot be reached while its source may well be there, or its source cannot be reached
    // where the coordinator routes around a link down. Either way the rest goes another way.
    let failure = match result {
        Ok(()) => {
            report(&get, part.flow, Ok(()));
            return Ok(());
        }
        Err(Cut::Reroute) => None,
        Err(Cut::Failed(e @ (AgentError::SourceUnreachable { .. } | AgentError::SourceSilent { .. })))
            if part.via.is_some() || part.reroutable =>
        {
            Some(e)
        }
        Err(Cut::Failed(e) | Cut::Ended(e)) => {
            report(&get, part.flow, Err(&e));
            return Err(e);
        }
    };
    // The peer that failed: the relay when the part went through one, unless the relay said it
    // could not reach the source or lost it; else the source.
    let failed_addr = match &failure {
        Some(AgentError::SourceUnreachable { addr, .. } | AgentError::SourceSilent { addr, .. }) => addr.clone(),
        _ => part.peer().1.to_string(),
    };
    if resumes == 0 || at >= end {
        let addr = failed_addr;
        // The source is named once, as the error's own address.
        let last = match failure {
            None => "the coordinator rerouted it".to_string(),
            Some(e) => e.why_source_lost().unwrap_or_else(|| e.to_string()),
        };
        let e = AgentError::SourceUnreachable {
            addr,
            reason: format!("the path of flow {} was lost {} times; the last time: {last}", part.flow, MAX_RESUMES),
        };
        report(&get, part.flow, Err(&e));
        return Err(e);
    }
    // A source its relay lost is likely dead, which the coordinator finds at its agent timeout
    // and then fails the part: the part stays listed and waits before its rest is resumed, so
    // that the resumes outlast a source's death and a resume announced after the wait finds the
    // source silent (the coordinator then blames the source, not the relay, which it would
    // leave out of this receiver's new paths). A stop the coordinator sends meanwhile ends the wait.
    let source_lost = part.via.is_some() && failure.is_some() && failed_addr == part.src_addr;
    let terms = shared.coordinator.terms();
    if source_lost {
        let pause =
            source_pause(resumes, terms.heartbeat_every(shared.config.heartbeat_interval_ms), terms.agent_timeout());
        tracing::info!(flow = %part.flow, src = %part.src_addr, ?pause, "its relay lost its source; waiting before resuming");
        let waited = tokio::select! {
            () = tokio::time::sleep(pause) => None,
            s = stopped.wait_for(Option::is_some) => s.ok().and_then(|s| s.clone()),
        };
        match waited {
            None | Some(Stop::Reroute) => {}
            Some(Stop::Fail(reason)) => {
                let e = shared.unless_paused(AgentError::SourceUnreachable { addr: part.src_addr.clone(), reason });
                report(&get, part.flow, Err(&e));
                return Err(e);
            }
            Some(Stop::Dropped) => {
                let e = AgentError::UnknownCoflow(get.coflow);
                report(&get, part.flow, Err(&e));
                return Err(e);
            }
        }
    }
    tracing::info!(flow = %part.flow, at, end, error = failure.as_ref().map(tracing::field::display), "part cut; resuming the rest over another path");
    // The coordinator ends the cut flow when it grants the rest: its end is not reported. Nor is
    // the cut flow re-announced to a coordinator that restarts meanwhile: the resume names it
    // with its end, so that a coordinator that never granted it grants the rest all the same.
    get.open.lock().expect("open parts lock").remove(&part.flow);
    drop(listed);
    // A peer that fails at once (its address refuses connections) would otherwise spend every
    // resume before the coordinator has seen it die: a part of the rest that asks it again waits
    // first, longer at each resume, so that together they outlast the coordinator's agent timeout.
    // A source its relay lost was waited for already.
    let failed = failure
        .filter(|_| !source_lost)
        .map(|_| Failed { addr: part.peer().1.to_string(), pause: resume_backoff(resumes, terms.agent_timeout()) });
    let resume = Some((part.flow, at, end));
    let (epoch, grant) = announce_get(&shared, get.coflow, &get.data_id, &get.client, resume)
        .await
        .map_err(|e| flow_gone(e, part.flow))?;
    let parts = parts_of(&grant, at, end)?;
    receive(get, parts, sink, epoch, resumes - 1, failed).await
}

/// Removes a part from the agent's table of flows it receives when the part ends.
struct Listed {
    shared: Arc<Shared>,
    flow: FlowId,
    /// Its get's streamed parts, if it is one.
    streamed: Option<crate::unread::OpenParts>,
}

impl Drop for Listed {
    fn drop(&mut self) {
        self.shared.receiving.lock().expect("receiving lock").remove(&self.flow);
        if let Some(s) = &self.streamed {
            s.lock().expect("open parts lock").remove(&self.flow);
        }
    }
}

/// Why a part's fetch stopped.
enum Cut {
    /// The coordinator moved the part to other paths: its rest is resumed.
    Reroute,
    /// The fetch failed: its rest is resumed when its relay, or a source across datacenters,
    /// could not be reached; else the get fails.
    Failed(AgentError),
    /// The coordinator failed the flow (it declared its source dead, or its coflow was
    /// unregistered): the get fails at once.
    Ended(AgentError),
}

/// Reports a part's end to the coordinator, once.
pub(crate) fn report(get: &Get, flow: FlowId, result: Result<(), &AgentError>) {
    if !get.open.lock().expect("open parts lock").remove(&flow) {
        return;
    }
    if !get.shared.link.tell(crate::session::flow_end(flow, 0, result.err().map(AgentError::kind))) {
        tracing::debug!(%flow, "no session with the coordinator: the flow's end is reported when one opens");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(via: Option<&str>) -> Part {
        Part {
            flow: FlowId(7),
            offset: 0,
            length: 100,
            src: MachineId(0),
            src_addr: "src:1".into(),
            ticket: [0; TICKET_LEN],
            via: via.map(|a| (MachineId(2), a.to_string(), [0; TICKET_LEN])),
            reroutable: true,
        }
    }

    #[test]
    fn a_resume_after_a_failure_waits_longer_each_time() {
        let waits = |timeout| -> Vec<u64> {
            (1..=MAX_RESUMES).rev().map(|left| resume_backoff(left, timeout).as_millis() as u64).collect()
        };
        assert_eq!(waits(None), vec![500, 1000, 2000, 4000]);
        assert_eq!(waits(Some(Duration::from_secs(3))), vec![500, 1000, 2000, 4000], "the default agent timeout");
        assert_eq!(waits(Some(Duration::from_secs(1))), vec![500, 1000, 2000, 4000], "never shorter");
        // Two and a half agent timeouts in all, so that a dead peer is found dead before the last.
        assert_eq!(waits(Some(Duration::from_secs(30))), vec![5000, 10_000, 20_000, 40_000]);
    }

    #[test]
    fn only_a_part_that_asks_the_peer_that_failed_again_waits() {
        let pause = Duration::from_secs(1);
        let relay = Failed { addr: "relay:1".into(), pause };
        assert_eq!(pause_before(&part(Some("relay:1")), Some(&relay)), pause, "the same relay again");
        assert_eq!(pause_before(&part(Some("relay:2")), Some(&relay)), Duration::ZERO, "another relay");
        assert_eq!(pause_before(&part(None), Some(&relay)), Duration::ZERO, "direct from its source");
        let source = Failed { addr: "src:1".into(), pause };
        assert_eq!(pause_before(&part(None), Some(&source)), pause, "the same source directly again");
        assert_eq!(pause_before(&part(Some("relay:1")), Some(&source)), Duration::ZERO, "through a relay");
        assert_eq!(pause_before(&part(None), None), Duration::ZERO, "after a reroute");
    }

    /// A part whose relay lost its source waits, before its rest is resumed, the resume's
    /// backoff and at least four heartbeats, so that the coordinator sees a dead source silent
    /// (three of its heartbeats) when the resume comes, and blames the source, not the relay.
    #[test]
    fn a_part_whose_relay_lost_its_source_waits_past_three_heartbeats() {
        let ms = Duration::from_millis;
        assert_eq!(source_pause(MAX_RESUMES, ms(100), None), ms(500));
        assert_eq!(source_pause(MAX_RESUMES, ms(250), None), ms(1000), "four heartbeats");
        assert_eq!(source_pause(1, ms(100), None), Duration::from_secs(4), "the last backoff");
        assert_eq!(source_pause(MAX_RESUMES, ms(100), Some(ms(12_000))), ms(2000), "a long agent timeout");
    }

    /// A resume the coordinator refuses `unknown-flow` (it failed the part while this agent was
    /// away) reaches the client with that kind and says what happened; other refusals as they came.
    #[test]
    fn a_resume_of_a_flow_the_coordinator_failed_is_unknown_flow() {
        let refused = ErrorKind::UnknownFlow.status(tonic::Code::NotFound, "unknown flow 17");
        let e = flow_gone(AgentError::Coordinator(refused), FlowId(17));
        let s = tonic::Status::from(e);
        assert_eq!((s.code(), ErrorKind::of(&s)), (tonic::Code::NotFound, Some(ErrorKind::UnknownFlow)));
        assert!(s.message().contains("get the piece again") && s.message().contains("unknown flow 17"), "{s:?}");
        let other = ErrorKind::NoSuchData.status(tonic::Code::NotFound, "no such data");
        let s = tonic::Status::from(flow_gone(AgentError::Coordinator(other), FlowId(17)));
        assert_eq!((ErrorKind::of(&s), s.message()), (Some(ErrorKind::NoSuchData), "no such data"));
    }
}
