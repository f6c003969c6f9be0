//! The gRPC face of the coordinator, and the one task that owns [`Core`].
//!
//! Every RPC converts its message at the edge (naming a wrong field), sends one [`Event`] to the
//! core task, and maps a [`CoordError`] to a status in one place. An agent speaks on one session
//! stream: a reader task per session validates what the agent sends and hands each batch to the
//! core task as one event; the core task answers each announcement and pushes rates and notices
//! straight into the session's outbound queue, which the response stream drains, merging what
//! queued into one frame. Every task and timer of the coordinator lives here (the channel to the
//! core task is `events`): the core task reads the clock, hands each event to the core's
//! `handle_*` method with `now`, sends what [`Core::poll_transmit`] gives, and sleeps until
//! [`Core::poll_timeout`].

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Instant;

use coflow_core::{CoflowId, FlowId, MachineId, Nanos};
use coflow_proto::pb::coordinator_server::Coordinator;
use coflow_proto::{
    AgentRegistration, DataId, FlowRecovery, GetAnnouncement, Heartbeat, PutAnnouncement, Registration, Renewal, pb,
};
use tokio::sync::{mpsc, watch};
use tokio_stream::Stream;
use tonic::{Request, Response, Status, Streaming};

use crate::core::{Core, FlowOutcome, Notice, RateBatch, Transmit};
use crate::error::CoordError;
use crate::events::{AgentMsg, CoreHandle, Event, SessionTx};
use crate::identity::{Sessions, as_agent, as_client, as_some_agent};
use crate::status::{Admission, StatusView};

/// The open session of each agent, by machine: its number and its outbound queue.
type Open = BTreeMap<MachineId, (u64, SessionTx)>;

/// Runs the core until `shutdown` turns true or every handle is gone.
pub(crate) async fn core_loop(
    mut core: Core,
    mut rx: mpsc::Receiver<Event>,
    mut shutdown: watch::Receiver<bool>,
    observer: crate::telemetry::Observer,
) {
    let epoch = Instant::now();
    let now = || Nanos(epoch.elapsed().as_nanos() as u64);
    let mut streams: Open = BTreeMap::new();
    loop {
        let (decisions, started) = (core.counters().decisions, Instant::now());
        core.handle_timeout(now());
        if core.counters().decisions != decisions {
            observer.decision(started.elapsed());
        }
        while let Some(o) = core.poll_observation() {
            observer.observe(o);
        }
        transmit(&mut core, &mut streams);
        let wake = core.poll_timeout();
        let sleep = async {
            match wake {
                Some(t) => {
                    tokio::time::sleep_until(tokio::time::Instant::from_std(
                        epoch + std::time::Duration::from_nanos(t.0),
                    ))
                    .await
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            ev = rx.recv() => {
                let Some(ev) = ev else { break };
                dispatch(&mut core, now(), ev, &mut streams);
                // Drain what queued meanwhile, so one decision covers a burst.
                for _ in 0..4096 {
                    match rx.try_recv() {
                        Ok(ev) => dispatch(&mut core, now(), ev, &mut streams),
                        Err(_) => break,
                    }
                }
            }
            _ = sleep => {}
            _ = shutdown.changed() => break,
        }
    }
}

/// Hands one event to the core, sends its answer where it goes, then what the core has for the
/// agents: at once, so that a lost agent's stream ends before the stream it opens next is kept.
fn dispatch(core: &mut Core, now: Nanos, event: Event, streams: &mut Open) {
    answer(core, now, event, streams);
    transmit(core, streams);
}

/// Sends `batch` on `machine`'s session; a session found closed is forgotten.
fn send(core: &mut Core, streams: &mut Open, machine: MachineId, batch: pb::CoordinatorBatch) {
    if let Some((_, tx)) = streams.get(&machine)
        && tx.send(batch).is_err()
    {
        streams.remove(&machine);
        core.handle_unwatch(machine);
    }
}

/// The answer to one announcement, as the agent reads it.
fn reply(request_id: u64, result: Result<pb::agent_reply::Result, CoordError>) -> pb::CoordinatorBatch {
    let result = match result {
        Ok(r) => r,
        Err(e) => pb::agent_reply::Result::Failure(failure(&e)),
    };
    pb::CoordinatorBatch { replies: vec![pb::AgentReply { request_id, result: Some(result) }], update: None }
}

/// A [`CoordError`] as a session carries it: the status code it maps to, its kind and message.
fn failure(e: &CoordError) -> pb::Failure {
    let code = Status::from(e.clone()).code() as i32;
    pb::Failure { code, kind: e.kind().to_pb() as i32, message: e.to_string() }
}

fn answer(core: &mut Core, now: Nanos, event: Event, streams: &mut Open) {
    // A dropped reply is an RPC that went away meanwhile: nothing to do.
    match event {
        Event::Register(reg, reply) => drop(reply.send(core.handle_register(now, reg))),
        Event::Unregister(id, by, reply) => drop(reply.send(core.handle_unregister(now, &by, id))),
        Event::Seal(id, by, reply) => drop(reply.send(core.handle_seal(now, &by, id))),
        Event::Renew(ids, by, reply) => drop(reply.send(Ok(core.handle_renew(now, &by, &ids)))),
        Event::RegisterAgent(a, reply) => drop(reply.send(core.handle_register_agent(now, a))),
        Event::Deregister(machine, reply) => {
            core.handle_deregister_agent(now, machine);
            drop(reply.send(Ok(())));
        }
        Event::Open(machine, sid, tx) => {
            let current = core.handle_watch(now, machine);
            let sent = rates(current)
                .into_iter()
                .all(|u| tx.send(pb::CoordinatorBatch { replies: Vec::new(), update: Some(u) }).is_ok());
            // A later session of the machine replaces an earlier one, whose stream then ends.
            if sent {
                streams.insert(machine, (sid, tx));
            } else {
                streams.remove(&machine);
                core.handle_unwatch(machine);
            }
        }
        Event::Closed(machine, sid) => {
            if streams.get(&machine).is_some_and(|(s, _)| *s == sid) {
                streams.remove(&machine);
                core.handle_unwatch(machine);
            }
        }
        Event::Agent(machine, sid, msgs) => {
            // What a replaced session still sends is not this machine's any more.
            if streams.get(&machine).is_none_or(|(s, _)| *s != sid) {
                return;
            }
            for msg in msgs {
                agent_msg(core, now, machine, msg, streams);
            }
        }
        Event::AgentAlive(machine, reply) => drop(reply.send(Ok(core.agent_alive(machine)))),
        Event::Status(reply) => drop(reply.send(Ok(core.status()))),
        Event::StatusPage(after, max, viewer, reply) => {
            drop(reply.send(Ok(core.status_page(after, max, Some(&viewer)))));
        }
        Event::Metrics(reply) => drop(reply.send(Ok(core.samples()))),
    }
}

/// One message of `machine`'s session, applied to the core, and the answer sent back.
fn agent_msg(core: &mut Core, now: Nanos, machine: MachineId, msg: AgentMsg, streams: &mut Open) {
    use pb::agent_reply::Result as R;
    match msg {
        AgentMsg::Put(id, put) => {
            let r = core
                .handle_put(now, put)
                .map(|reg| R::Put(pb::AnnouncePutResponse { registration: Some((&reg).into()) }));
            send(core, streams, machine, reply(id, r));
        }
        AgentMsg::Get(id, get, recovering) => {
            let batch = match core.handle_get(now, get) {
                Ok(g) => {
                    tracing::debug!(target: "coflow::path", flow = g.flow.0, "grant");
                    reply(id, Ok(R::Get(grant(&g))))
                }
                Err(
                    e
                    @ (CoordError::UnknownCoflow(_) | CoordError::NoSuchData { .. } | CoordError::AgentUnavailable(_)),
                ) if recovering => not_yet(id, &e),
                Err(e) => reply(id, Err(e)),
            };
            send(core, streams, machine, batch);
        }
        AgentMsg::Recover(id, rec) => {
            let batch = match core.handle_recover_flow(now, rec) {
                Ok(g) => reply(id, Ok(R::Get(grant(&g)))),
                // Inside the restart window the source may not have re-announced its piece yet.
                Err(e @ (CoordError::UnknownCoflow(_) | CoordError::NoSuchData { .. }))
                    if core.in_restart_window(now) =>
                {
                    not_yet(id, &e)
                }
                Err(e) => reply(id, Err(e)),
            };
            send(core, streams, machine, batch);
        }
        AgentMsg::Finished(flow, outcome) => {
            if let Err(e) = core.handle_flow_finished(now, machine, flow, outcome) {
                // An unknown flow is one this coordinator failed already, or one of a previous
                // run's; a refused one is logged.
                match e {
                    CoordError::UnknownFlow(_) => tracing::debug!(%machine, error = %e, "flow end ignored"),
                    _ => tracing::warn!(%machine, error = %e, "flow end refused"),
                }
            }
        }
        AgentMsg::WithdrawPut(coflow, data_id) => core.handle_withdraw_put(now, machine, coflow, &data_id),
        AgentMsg::Heartbeat(hb) => {
            if !core.handle_heartbeat(now, hb) {
                // Not known (declared dead, or this coordinator restarted): ending the session
                // makes the agent register again.
                streams.remove(&machine);
                core.handle_unwatch(machine);
            }
        }
    }
}

/// "Not yet": a retryable UNAVAILABLE without an error kind, for what agents may still be
/// re-announcing after a restart.
fn not_yet(request_id: u64, e: &CoordError) -> pb::CoordinatorBatch {
    let f = pb::Failure {
        code: tonic::Code::Unavailable as i32,
        kind: pb::ErrorKind::Unspecified as i32,
        message: format!("the coordinator has just started: {e}; retry"),
    };
    let result = Some(pb::agent_reply::Result::Failure(f));
    pb::CoordinatorBatch { replies: vec![pb::AgentReply { request_id, result }], update: None }
}

fn grant(g: &crate::core::FlowGrant) -> pb::AnnounceGetResponse {
    pb::AnnounceGetResponse {
        flow_id: g.flow.0,
        src_machine_id: g.src.0,
        src_data_addr: g.src_data_addr.to_string(),
        size: g.size,
        ticket: g.ticket.to_vec(),
        parts: g
            .parts
            .iter()
            .map(|p| pb::FlowPart {
                flow_id: p.flow.0,
                offset: p.offset,
                length: p.length,
                ticket: p.ticket.to_vec(),
                via_machine_id: p.via.as_ref().map(|r| r.machine.0),
                via_data_addr: p.via.as_ref().map_or_else(String::new, |r| r.data_addr.to_string()),
                via_ticket: p.via.as_ref().map_or_else(Vec::new, |r| r.ticket.to_vec()),
            })
            .collect(),
        reroutable: g.reroutable,
    }
}

/// Sends what the core has for the agents; a stream found closed is reported back.
fn transmit(core: &mut Core, streams: &mut Open) {
    while let Some(t) = core.poll_transmit() {
        let (machine, update) = match t {
            Transmit::Rates(m, batch) => {
                let mut updates = rates(batch);
                let last = updates.pop().unwrap_or_default();
                for update in updates {
                    send(core, streams, m, pb::CoordinatorBatch { replies: Vec::new(), update: Some(update) });
                }
                (m, last)
            }
            Transmit::Notice(m, Notice::FlowFailed(f)) => {
                (m, pb::RateUpdate { failed_flows: vec![f.0], ..Default::default() })
            }
            Transmit::Notice(m, Notice::CoflowDropped(c)) => {
                (m, pb::RateUpdate { dropped_coflows: vec![c.0], ..Default::default() })
            }
            Transmit::Notice(m, Notice::CoflowSealed(c)) => {
                (m, pb::RateUpdate { sealed_coflows: vec![c.0], ..Default::default() })
            }
            Transmit::Notice(m, Notice::Reroute(f)) => {
                (m, pb::RateUpdate { reroute_flows: vec![f.0], ..Default::default() })
            }
            Transmit::EndWatch(m) => {
                // Dropping the sender ends the agent's stream.
                streams.remove(&m);
                continue;
            }
        };
        send(core, streams, machine, pb::CoordinatorBatch { replies: Vec::new(), update: Some(update) });
    }
}

/// A batch of rates as updates of at most [`MAX_RATES_PER_UPDATE`] rates each, in order (one
/// update, empty or not, for a batch that small).
fn rates(batch: RateBatch) -> Vec<pb::RateUpdate> {
    for (f, r) in &batch {
        tracing::debug!(target: "coflow::path", flow = f.0, rate = r, "push");
    }
    let mut updates: Vec<pb::RateUpdate> = batch
        .chunks(MAX_RATES_PER_UPDATE)
        .map(|c| pb::RateUpdate {
            rates: c.iter().map(|&(f, r)| pb::FlowRate { flow_id: f.0, rate_bps: r }).collect(),
            ..Default::default()
        })
        .collect();
    if updates.is_empty() {
        updates.push(pb::RateUpdate::default());
    }
    updates
}

/// The most messages merged into one outbound frame, so that one frame stays small.
const MAX_MERGED: usize = 1024;

/// The largest frame sent to an agent (merged messages are split across frames above it), well
/// under the 4 MiB a gRPC client decodes by default: an agent never refuses a frame as too large.
const MAX_FRAME_BYTES: usize = 1 << 20;

/// The most rates in one update: a `FlowRate` encodes in at most 22 bytes with its framing, so
/// an update of this many stays under [`MAX_FRAME_BYTES`].
const MAX_RATES_PER_UPDATE: usize = 32_768;

/// The coordinator's side of a session: what the core task queued for the agent, merged into
/// one batch per frame (whatever queued while the previous frame was being sent).
struct Outbound {
    rx: mpsc::UnboundedReceiver<pb::CoordinatorBatch>,
    /// A batch taken from the queue that did not fit in the previous frame.
    pending: Option<pb::CoordinatorBatch>,
}

/// Appends `more` to `batch`, keeping the order in which the agent applies them.
fn merge(batch: &mut pb::CoordinatorBatch, more: pb::CoordinatorBatch) {
    batch.replies.extend(more.replies);
    if let Some(m) = more.update {
        let u = batch.update.get_or_insert_with(Default::default);
        // Every field, by name: a field added to the message and not merged fails to compile.
        let pb::RateUpdate { rates, failed_flows, dropped_coflows, reroute_flows, sealed_coflows } = m;
        u.rates.extend(rates);
        u.failed_flows.extend(failed_flows);
        u.dropped_coflows.extend(dropped_coflows);
        u.reroute_flows.extend(reroute_flows);
        u.sealed_coflows.extend(sealed_coflows);
    }
}

impl Stream for Outbound {
    type Item = Result<pb::CoordinatorBatch, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let mut batch = match self.pending.take() {
            Some(b) => b,
            None => match self.rx.poll_recv(cx) {
                Poll::Ready(Some(b)) => b,
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => return Poll::Pending,
            },
        };
        // The sum of the parts' sizes bounds the merged frame's.
        let mut size = coflow_proto::encoded_len(&batch);
        for _ in 0..MAX_MERGED {
            match self.rx.try_recv() {
                Ok(more) => {
                    let n = coflow_proto::encoded_len(&more);
                    if size + n > MAX_FRAME_BYTES {
                        self.pending = Some(more);
                        break;
                    }
                    size += n;
                    merge(&mut batch, more);
                }
                Err(_) => break,
            }
        }
        Poll::Ready(Some(Ok(batch)))
    }
}

/// Numbers sessions, so that the core tells a session from the one that replaced it.
static SESSIONS: AtomicU64 = AtomicU64::new(1);

/// The tonic service.
#[derive(Clone, Debug)]
pub(crate) struct CoordinatorService {
    pub(crate) core: CoreHandle,
    pub(crate) sessions: std::sync::Arc<Sessions>,
    /// Until when agents may still be re-announcing what they hold after a restart: then a get
    /// for a coflow, piece or source not heard of yet is "not yet", a retryable `UNAVAILABLE`
    /// without an error kind that the asking agent waits out, rather than a `no-such-data` that
    /// would tell a framework to recompute.
    pub(crate) recovering_until: Instant,
    /// Whether this start is a restart: an agent registered carrying a session from a previous
    /// coordinator. A fresh cluster (every agent registering with none) has no recovery window.
    pub(crate) restarted: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Machine ids given to agents that asked for one.
    pub(crate) assignments: std::sync::Arc<crate::membership::Assignments>,
    /// Raised when the coordinator stops: session readers end.
    pub(crate) stop: watch::Receiver<bool>,
    /// Derives the flow key each agent is told at registration (the core issues the tickets).
    pub(crate) tickets: coflow_proto::ticket::Tickets,
    /// How many fetches an agent carries at once to one peer (the mode's; 0: no bound).
    pub(crate) fetches_per_peer: u32,
    /// The heartbeat interval and agent timeout (milliseconds) every registration is told, so
    /// that agents heartbeat at the interval this coordinator judges their silence by.
    pub(crate) heartbeat_interval_ms: u64,
    pub(crate) agent_timeout_ms: u64,
}

/// The most coflows one status page holds.
const STATUS_PAGE: usize = 1000;

/// The identity of a caller, which owns what it registers (see [`coflow_proto::Peer::identity`]).
fn caller<T>(req: &Request<T>) -> String {
    coflow_proto::Peer::of(req).map(coflow_proto::Peer::identity).unwrap_or_default()
}

fn status(e: CoordError) -> Status {
    e.into()
}

fn invalid(e: coflow_proto::ProtoError) -> Status {
    CoordError::Invalid(e).into()
}

type SessionStream = Pin<Box<dyn Stream<Item = Result<pb::CoordinatorBatch, Status>> + Send>>;

impl CoordinatorService {
    /// Whether a get for what is not known yet is "not yet" (the coordinator has just restarted).
    fn recovering(&self) -> bool {
        self.restarted.load(Ordering::Relaxed) && Instant::now() < self.recovering_until
    }

    /// Validates one message of `machine`'s session: what the core is to apply, or the failure
    /// to answer at once.
    fn validate(&self, machine: MachineId, m: pb::AgentMessage) -> Result<Option<AgentMsg>, pb::Failure> {
        use pb::agent_message::Body;
        let refuse = |e: CoordError| failure(&e);
        let not_yours = |what: &str, claimed: u32| {
            let msg = format!("a session of machine {machine} may not {what} for machine {claimed}");
            pb::Failure {
                code: tonic::Code::PermissionDenied as i32,
                kind: coflow_proto::ErrorKind::PermissionDenied.to_pb() as i32,
                message: msg,
            }
        };
        let id = m.request_id;
        Ok(Some(match m.body {
            None => return Err(refuse(CoordError::Invalid(coflow_proto::ProtoError::Missing { field: "body" }))),
            Some(Body::Put(p)) => {
                if p.machine_id != machine.0 {
                    return Err(not_yours("announce a piece", p.machine_id));
                }
                AgentMsg::Put(id, PutAnnouncement::try_from(p).map_err(|e| refuse(e.into()))?)
            }
            Some(Body::Get(g)) => {
                if g.machine_id != machine.0 {
                    return Err(not_yours("announce a get", g.machine_id));
                }
                match FlowRecovery::from_request(&g).map_err(|e| refuse(e.into()))? {
                    Some(rec) => AgentMsg::Recover(id, rec),
                    None => {
                        let get = GetAnnouncement::try_from(g).map_err(|e| refuse(e.into()))?;
                        AgentMsg::Get(id, get, self.recovering())
                    }
                }
            }
            Some(Body::Finished(f)) => AgentMsg::Finished(FlowId(f.flow_id), FlowOutcome::from_report(f.ok, f.reason)),
            Some(Body::WithdrawPut(w)) => {
                let data_id = DataId::new(w.data_id).map_err(|e| refuse(e.into()))?;
                AgentMsg::WithdrawPut(CoflowId(w.coflow_id), data_id)
            }
            Some(Body::Heartbeat(h)) => {
                if h.machine_id != machine.0 {
                    return Err(not_yours("report", h.machine_id));
                }
                match Heartbeat::try_from(h) {
                    Ok(hb) => AgentMsg::Heartbeat(hb),
                    Err(e) => {
                        tracing::debug!(%machine, error = %e, "malformed heartbeat ignored");
                        return Ok(None);
                    }
                }
            }
        }))
    }
}

/// Reads an agent's session until it ends (or the coordinator stops), handing each batch to the
/// core as one event; a malformed message is answered at once, a batch claiming another session
/// ends the stream.
async fn read_session(
    svc: CoordinatorService,
    machine: MachineId,
    sid: u64,
    session: u64,
    first: Vec<pb::AgentMessage>,
    mut inbound: Streaming<pb::AgentBatch>,
    out: mpsc::WeakUnboundedSender<pb::CoordinatorBatch>,
) {
    let mut stop = svc.stop.clone();
    let mut next = Some(first);
    loop {
        let msgs = match next.take() {
            Some(m) => m,
            None => tokio::select! {
                b = inbound.message() => match b {
                    Ok(Some(b)) if (b.machine_id == 0 && b.session == 0) || (b.machine_id == machine.0 && b.session == session) => b.messages,
                    Ok(Some(_)) => {
                        tracing::warn!(%machine, "a session batch named another machine or session; session ended");
                        break;
                    }
                    _ => break,
                },
                _ = stop.changed() => break,
            },
        };
        // At most `coflow_proto::codec::MAX_BATCH_MESSAGES`: a batch past it is refused before
        // it is decoded, and ends the session.
        let mut valid = Vec::with_capacity(msgs.len());
        for m in msgs {
            let id = m.request_id;
            match svc.validate(machine, m) {
                Ok(Some(v)) => valid.push(v),
                Ok(None) => {}
                Err(f) => {
                    let r = pb::AgentReply { request_id: id, result: Some(pb::agent_reply::Result::Failure(f)) };
                    if let Some(out) = out.upgrade() {
                        let _ = out.send(pb::CoordinatorBatch { replies: vec![r], update: None });
                    }
                }
            }
        }
        if !valid.is_empty() && svc.core.tell(Event::Agent(machine, sid, valid)).await.is_err() {
            break;
        }
    }
    let _ = svc.core.tell(Event::Closed(machine, sid)).await;
}

#[tonic::async_trait]
impl Coordinator for CoordinatorService {
    #[tracing::instrument(skip_all, fields(num_flows = req.get_ref().num_flows))]
    async fn register(&self, req: Request<pb::RegisterRequest>) -> Result<Response<pb::RegisterResponse>, Status> {
        as_client(&req)?;
        let owner = caller(&req);
        let mut reg = Registration::try_from(req.into_inner()).map_err(invalid)?;
        reg.owner = owner;
        let id = self.core.ask(|r| Event::Register(reg, r)).await.map_err(status)?;
        Ok(Response::new(pb::RegisterResponse { coflow_id: id.0 }))
    }

    async fn unregister(
        &self,
        req: Request<pb::UnregisterRequest>,
    ) -> Result<Response<pb::UnregisterResponse>, Status> {
        as_client(&req)?;
        let by = caller(&req);
        let id = CoflowId(req.into_inner().coflow_id);
        self.core.ask(|r| Event::Unregister(id, by, r)).await.map_err(status)?;
        Ok(Response::new(pb::UnregisterResponse {}))
    }

    async fn seal(&self, req: Request<pb::SealRequest>) -> Result<Response<pb::SealResponse>, Status> {
        as_client(&req)?;
        let by = caller(&req);
        let id = CoflowId(req.into_inner().coflow_id);
        self.core.ask(|r| Event::Seal(id, by, r)).await.map_err(status)?;
        Ok(Response::new(pb::SealResponse {}))
    }

    async fn renew(&self, req: Request<pb::RenewRequest>) -> Result<Response<pb::RenewResponse>, Status> {
        as_client(&req)?;
        let by = caller(&req);
        let renewal = Renewal::try_from(req.into_inner()).map_err(invalid)?;
        let not_renewed = self.core.ask(|r| Event::Renew(renewal.coflows, by, r)).await.map_err(status)?;
        Ok(Response::new(pb::RenewResponse { not_renewed: not_renewed.into_iter().map(|c| c.0).collect() }))
    }

    async fn status(&self, req: Request<pb::StatusRequest>) -> Result<Response<pb::StatusResponse>, Status> {
        // A member sees the coflows it may use (its own; the admin every one), and every agent.
        let viewer = caller(&req);
        let r = req.into_inner();
        let max = if r.max_coflows == 0 { STATUS_PAGE } else { (r.max_coflows as usize).min(STATUS_PAGE) };
        let page = self
            .core
            .ask(|reply| Event::StatusPage(CoflowId(r.after_coflow_id), max, viewer, reply))
            .await
            .map_err(status)?;
        let mut resp = status_to_pb(page.view);
        resp.next_after_coflow_id = page.next.map_or(0, |c| c.0);
        resp.flows_omitted = page.flows_omitted;
        Ok(Response::new(resp))
    }

    async fn register_agent(
        &self,
        req: Request<pb::RegisterAgentRequest>,
    ) -> Result<Response<pb::RegisterAgentResponse>, Status> {
        let (machine, claimed, incarnation) =
            (req.get_ref().machine_id, req.get_ref().session, req.get_ref().incarnation);
        as_agent(&req, machine)?;
        if claimed != 0 {
            self.restarted.store(true, Ordering::Relaxed);
        }
        let certified = coflow_proto::Peer::of(&req).is_some_and(coflow_proto::Peer::is_certified);
        let remote = req.remote_addr();
        let a = AgentRegistration::try_from(req.into_inner()).map_err(invalid)?;
        let a_machine = a.machine;
        let session = self
            .sessions
            .register(&self.core, a.machine, claimed, incarnation, certified, remote, |r| Event::RegisterAgent(a, r))
            .await?;
        let flow_key = self.tickets.key_of(a_machine).to_vec();
        Ok(Response::new(pb::RegisterAgentResponse {
            heartbeat_interval_ms: self.heartbeat_interval_ms,
            agent_timeout_ms: self.agent_timeout_ms,
            session,
            flow_key,
            fetches_per_peer: self.fetches_per_peer,
        }))
    }

    type AgentSessionStream = SessionStream;

    async fn agent_session(&self, req: Request<Streaming<pb::AgentBatch>>) -> Result<Response<SessionStream>, Status> {
        as_some_agent(&req, "open an agent session")?;
        let (meta, ext, mut inbound) = req.into_parts();
        let caller = Request::from_parts(meta, ext, ());
        let first = inbound
            .message()
            .await?
            .ok_or_else(|| Status::invalid_argument("a session opens with a batch naming its machine and session"))?;
        as_agent(&caller, first.machine_id)?;
        let machine = MachineId(first.machine_id);
        if !self.sessions.check_known(machine, first.session).await? {
            // A session of a previous coordinator, or none: the agent registers (again) first.
            return Err(Status::unavailable(format!("machine {machine} has not registered with this coordinator")));
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let sid = SESSIONS.fetch_add(1, Ordering::Relaxed);
        // Ends with the agent's stream or the coordinator's stop. The response stream ends when
        // the core drops the session's sender (the machine was declared dead or forgotten), so
        // the reader holds it weakly: the agent sees the end and registers again.
        let weak = tx.downgrade();
        self.core.tell(Event::Open(machine, sid, tx)).await.map_err(status)?;
        tokio::spawn(read_session(self.clone(), machine, sid, first.session, first.messages, inbound, weak));
        Ok(Response::new(Box::pin(Outbound { rx, pending: None })))
    }

    async fn assign_machine(
        &self,
        req: Request<pb::AssignMachineRequest>,
    ) -> Result<Response<pb::AssignMachineResponse>, Status> {
        as_some_agent(&req, "be assigned a machine id")?;
        if coflow_proto::Peer::of(&req).is_some_and(coflow_proto::Peer::is_certified) {
            return Err(Status::failed_precondition(
                "with TLS, an agent's machine id is the one its certificate names",
            ));
        }
        let known = || async {
            let view = self.core.ask(Event::Status).await.map_err(Status::from)?;
            Ok(view.agents.iter().map(|a| a.machine.0).collect())
        };
        let machine_id = self.assignments.assign(&req.get_ref().host, known).await?;
        Ok(Response::new(pb::AssignMachineResponse { machine_id }))
    }

    async fn deregister_agent(
        &self,
        req: Request<pb::DeregisterAgentRequest>,
    ) -> Result<Response<pb::DeregisterAgentResponse>, Status> {
        let (machine, session) = (req.get_ref().machine_id, req.get_ref().session);
        as_agent(&req, machine)?;
        self.sessions.check(MachineId(machine), session).await?;
        self.core.ask(|r| Event::Deregister(MachineId(machine), r)).await.map_err(status)?;
        tracing::info!(machine, "agent deregistered");
        Ok(Response::new(pb::DeregisterAgentResponse {}))
    }
}

fn status_to_pb(v: StatusView) -> pb::StatusResponse {
    pb::StatusResponse {
        policy: v.policy,
        coflows: v
            .coflows
            .into_iter()
            .map(|c| pb::CoflowStatus {
                coflow_id: c.id.0,
                name: c.name,
                num_flows: c.num_flows,
                puts: c.puts,
                bypass: c.bypass,
                lease_left_ms: c.lease_left.map_or(0, |l| l.get().div_ceil(1_000_000).max(1)),
                job: c.job.0,
                deadline_ms: c.deadline.map_or(0, |d| d.get().div_ceil(1_000_000).max(1)),
                admission: match c.admission {
                    None => pb::Admission::Unspecified,
                    Some(Admission::Pending) => pb::Admission::Pending,
                    Some(Admission::Admitted) => pb::Admission::Admitted,
                    Some(Admission::Rejected) => pb::Admission::Rejected,
                } as i32,
                flows: c
                    .flows
                    .into_iter()
                    .map(|f| pb::FlowStatus {
                        flow_id: f.id.0,
                        data_id: f.data_id,
                        src_machine_id: f.src.0,
                        dst_machine_id: f.dst.0,
                        size: f.size,
                        bytes_sent: f.sent,
                        rate_bps: f.rate,
                        via_machine_id: f.via.map(|m| m.0),
                        reader_limited: f.reader_limited,
                    })
                    .collect(),
            })
            .collect(),
        agents: v
            .agents
            .into_iter()
            .map(|a| pb::AgentStatus {
                machine_id: a.machine.0,
                data_addr: a.data_addr.to_string(),
                alive: a.alive,
                departed: a.departed,
                tx_bps: a.tx_bps,
                rx_bps: a.rx_bps,
                port_rate_bps: a.port_rate,
                uplink_bps: a.uplink_bps,
                downlink_bps: a.downlink_bps,
                datacenter: a.datacenter.unwrap_or_default(),
            })
            .collect(),
        next_after_coflow_id: 0,
        flows_omitted: 0,
        links: v
            .links
            .into_iter()
            .map(|l| pb::LinkStatus { name: l.name, estimate_bps: l.estimate, samples: l.samples as u32, down: l.down })
            .collect(),
        bytes_relayed: v.bytes_relayed,
        flows_rerouted: v.flows_rerouted,
        decisions: v.decisions,
    }
}

#[cfg(test)]
mod tests {
    use tokio_stream::StreamExt;

    use super::*;

    /// Rates of flows `from..to`, each at its id.
    fn batch(from: u64, to: u64) -> pb::CoordinatorBatch {
        let rates = (from..to).map(|f| pb::FlowRate { flow_id: f, rate_bps: f as f64 }).collect();
        pb::CoordinatorBatch { replies: Vec::new(), update: Some(pb::RateUpdate { rates, ..Default::default() }) }
    }

    /// Batches merged into one frame keep every notice they carry.
    #[test]
    fn merged_batches_keep_every_notice() {
        let notice = |k: u64| pb::CoordinatorBatch {
            replies: Vec::new(),
            update: Some(pb::RateUpdate {
                rates: vec![pb::FlowRate { flow_id: k, rate_bps: 1.0 }],
                failed_flows: vec![k],
                dropped_coflows: vec![k],
                reroute_flows: vec![k],
                sealed_coflows: vec![k],
            }),
        };
        let mut batch = notice(1);
        merge(&mut batch, notice(2));
        let u = batch.update.unwrap();
        assert_eq!((u.failed_flows, u.dropped_coflows, u.reroute_flows), (vec![1, 2], vec![1, 2], vec![1, 2]));
        assert_eq!(u.sealed_coflows, [1, 2]);
        assert_eq!(u.rates.len(), 2);
    }

    /// However much queues for an agent, no frame exceeds the frame limit, and every rate
    /// arrives once, in order.
    #[tokio::test]
    async fn frames_to_an_agent_stay_under_the_limit_and_keep_every_rate_in_order() {
        let (tx, rx) = mpsc::unbounded_channel();
        // 200 batches of 10,000 rates: about 30 MiB queued at once.
        for k in 0..200 {
            tx.send(batch(k * 10_000, (k + 1) * 10_000)).unwrap();
        }
        drop(tx);
        let mut out = Outbound { rx, pending: None };
        let (mut next, mut frames) = (0, 0);
        while let Some(frame) = out.next().await {
            let frame = frame.unwrap();
            assert!(
                coflow_proto::encoded_len(&frame) <= MAX_FRAME_BYTES,
                "a frame of {} bytes",
                coflow_proto::encoded_len(&frame)
            );
            for r in frame.update.unwrap().rates {
                assert_eq!(r.flow_id, next, "out of order or lost");
                next += 1;
            }
            frames += 1;
        }
        assert_eq!(next, 2_000_000);
        assert!(frames > 20, "about 30 MiB in frames of at most 1 MiB, not {frames}");
    }

    /// A batch of rates too large for one frame is split into updates that each fit.
    #[test]
    fn a_large_batch_of_rates_is_split_into_updates_that_fit() {
        let batch: RateBatch = (0..100_000).map(|f| (FlowId(u64::MAX - f), f64::MAX)).collect();
        let updates = rates(batch);
        assert_eq!(updates.len(), 4);
        assert!(updates.iter().all(|u| coflow_proto::encoded_len(u) <= MAX_FRAME_BYTES));
        let ids: Vec<u64> = updates.iter().flat_map(|u| u.rates.iter().map(|r| r.flow_id)).collect();
        assert_eq!(ids, (0..100_000).map(|f| u64::MAX - f).collect::<Vec<_>>());
        assert_eq!(rates(Vec::new()).len(), 1, "an empty batch is still one update");
    }
}
