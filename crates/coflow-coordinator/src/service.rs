//! The gRPC face of the coordinator, and the one task that owns [`Core`].
//!
//! Every RPC converts its message at the edge (naming a wrong field), sends one [`Event`] to the
//! core task with a oneshot for the reply, and maps a [`CoordError`] to a status in one place.
//! Every channel, task and timer of the coordinator lives here: the core task reads the clock,
//! hands each event to the core's `handle_*` method with `now`, sends what
//! [`Core::poll_transmit`] gives on the agents' rate streams, and sleeps until
//! [`Core::poll_timeout`].

use std::collections::BTreeMap;
use std::pin::Pin;
use std::time::Instant;

use coflow_core::{CoflowId, FlowId, MachineId, Nanos};
use coflow_proto::pb::coordinator_server::Coordinator;
use coflow_proto::{AgentRegistration, FlowRecovery, GetAnnouncement, Heartbeat, PutAnnouncement, Registration, pb};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use crate::core::{Core, FlowGrant, FlowOutcome, Notice, RateBatch, Transmit};
use crate::error::CoordError;
use crate::identity::{Sessions, as_agent, as_client, as_some_agent};
use crate::views::StatusView;

/// Where a reply goes.
pub(crate) type Reply<T> = oneshot::Sender<Result<T, CoordError>>;

/// An agent's rate stream, as the core task feeds it.
type RateTx = mpsc::UnboundedSender<pb::RateUpdate>;

/// What the core task is told: every trigger of work from an RPC, each with where its answer
/// goes.
#[derive(Debug)]
pub(crate) enum Event {
    /// A framework registers a coflow.
    Register(Registration, Reply<CoflowId>),
    /// A framework is done with a coflow.
    Unregister(CoflowId, Reply<()>),
    /// No more puts will come for a coflow.
    Seal(CoflowId, Reply<()>),
    /// An agent stored a piece; the reply is the coflow's registration, for the agent to keep.
    Put(PutAnnouncement, Reply<Registration>),
    /// An agent's client wants a piece.
    Get(GetAnnouncement, Reply<FlowGrant>),
    /// A receiving agent re-announces a flow a previous coordinator granted (after a restart).
    RecoverFlow(FlowRecovery, Reply<FlowGrant>),
    /// A receiving agent finished a flow or gave up on it.
    FlowFinished(FlowId, FlowOutcome, Reply<()>),
    /// An agent joins.
    RegisterAgent(AgentRegistration, Reply<()>),
    /// An agent reports; the reply says whether the coordinator knows it.
    Heartbeat(Heartbeat, Reply<bool>),
    /// An agent leaves.
    Deregister(MachineId, Reply<()>),
    /// An agent listens for its flows' rates and notices; the current rates are sent at once.
    Watch(MachineId, RateTx),
    /// Whether a live agent runs on a machine.
    AgentAlive(MachineId, Reply<bool>),
    /// Someone asks what is live.
    Status(Reply<StatusView>),
    /// Prometheus asks for the counters and gauges.
    Metrics(Reply<Vec<coflow_telemetry::Sample>>),
}

/// The handle RPCs use to reach the core task.
#[derive(Clone, Debug)]
pub(crate) struct CoreHandle {
    tx: mpsc::Sender<Event>,
}

impl CoreHandle {
    /// Sends an event built around a reply channel and waits for the reply.
    pub(crate) async fn ask<T>(&self, make: impl FnOnce(Reply<T>) -> Event) -> Result<T, CoordError> {
        let (reply, rx) = oneshot::channel();
        self.tx.send(make(reply)).await.map_err(|_| CoordError::ShuttingDown)?;
        rx.await.map_err(|_| CoordError::ShuttingDown)?
    }

    /// Sends an event that has no reply.
    pub(crate) async fn tell(&self, event: Event) -> Result<(), CoordError> {
        self.tx.send(event).await.map_err(|_| CoordError::ShuttingDown)
    }
}

/// Runs the core until `shutdown` turns true or every handle is gone.
pub(crate) async fn core_loop(
    mut core: Core,
    mut rx: mpsc::Receiver<Event>,
    mut shutdown: watch::Receiver<bool>,
    observer: crate::telemetry::Observer,
) {
    let epoch = Instant::now();
    let now = || Nanos(epoch.elapsed().as_nanos() as u64);
    // The open rate stream of each watching agent.
    let mut streams: BTreeMap<MachineId, RateTx> = BTreeMap::new();
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
fn dispatch(core: &mut Core, now: Nanos, event: Event, streams: &mut BTreeMap<MachineId, RateTx>) {
    answer(core, now, event, streams);
    transmit(core, streams);
}

fn answer(core: &mut Core, now: Nanos, event: Event, streams: &mut BTreeMap<MachineId, RateTx>) {
    // A dropped reply is an RPC that went away meanwhile: nothing to do.
    match event {
        Event::Register(reg, reply) => drop(reply.send(core.handle_register(now, reg))),
        Event::Unregister(id, reply) => drop(reply.send(core.handle_unregister(now, id))),
        Event::Seal(id, reply) => drop(reply.send(core.handle_seal(now, id))),
        Event::Put(put, reply) => drop(reply.send(core.handle_put(now, put))),
        Event::Get(get, reply) => {
            let grant = core.handle_get(now, get);
            if let Ok(g) = &grant {
                tracing::debug!(target: "coflow::path", flow = g.flow.0, "grant");
            }
            drop(reply.send(grant))
        }
        Event::RecoverFlow(rec, reply) => drop(reply.send(core.handle_recover_flow(now, rec))),
        Event::FlowFinished(flow, outcome, reply) => drop(reply.send(core.handle_flow_finished(now, flow, outcome))),
        Event::RegisterAgent(a, reply) => {
            core.handle_register_agent(now, a);
            drop(reply.send(Ok(())));
        }
        Event::Heartbeat(hb, reply) => drop(reply.send(Ok(core.handle_heartbeat(now, hb)))),
        Event::Deregister(machine, reply) => {
            core.handle_deregister_agent(now, machine);
            drop(reply.send(Ok(())));
        }
        Event::Watch(machine, tx) => {
            let current = core.handle_watch(now, machine);
            if tx.send(rates(current)).is_ok() {
                streams.insert(machine, tx);
            } else {
                streams.remove(&machine);
                core.handle_unwatch(machine);
            }
        }
        Event::AgentAlive(machine, reply) => drop(reply.send(Ok(core.agent_alive(machine)))),
        Event::Status(reply) => drop(reply.send(Ok(core.status()))),
        Event::Metrics(reply) => drop(reply.send(Ok(core.samples()))),
    }
}

/// Sends what the core has for the agents; a stream found closed is reported back.
fn transmit(core: &mut Core, streams: &mut BTreeMap<MachineId, RateTx>) {
    while let Some(t) = core.poll_transmit() {
        let (machine, update) = match t {
            Transmit::Rates(m, batch) => (m, rates(batch)),
            Transmit::Notice(m, Notice::FlowFailed(f)) => {
                (m, pb::RateUpdate { failed_flows: vec![f.0], ..Default::default() })
            }
            Transmit::Notice(m, Notice::CoflowDropped(c)) => {
                (m, pb::RateUpdate { dropped_coflows: vec![c.0], ..Default::default() })
            }
            Transmit::EndWatch(m) => {
                // Dropping the sender ends the agent's stream.
                streams.remove(&m);
                continue;
            }
        };
        if let Some(tx) = streams.get(&machine)
            && tx.send(update).is_err()
        {
            streams.remove(&machine);
            core.handle_unwatch(machine);
        }
    }
}

fn rates(batch: RateBatch) -> pb::RateUpdate {
    for (f, r) in &batch {
        tracing::debug!(target: "coflow::path", flow = f.0, rate = r, "push");
    }
    pb::RateUpdate {
        rates: batch.into_iter().map(|(f, r)| pb::FlowRate { flow_id: f.0, rate_bps: r }).collect(),
        ..Default::default()
    }
}

/// Spawns nothing: builds the channel between RPCs and the core.
pub(crate) fn channel() -> (CoreHandle, mpsc::Receiver<Event>) {
    let (tx, rx) = mpsc::channel(65_536);
    (CoreHandle { tx }, rx)
}

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
}

fn status(e: CoordError) -> Status {
    e.into()
}

fn invalid(e: coflow_proto::ProtoError) -> Status {
    CoordError::Invalid(e).into()
}

type RateStream = Pin<Box<dyn Stream<Item = Result<pb::RateUpdate, Status>> + Send>>;

#[tonic::async_trait]
impl Coordinator for CoordinatorService {
    #[tracing::instrument(skip_all, fields(num_flows = req.get_ref().num_flows))]
    async fn register(&self, req: Request<pb::RegisterRequest>) -> Result<Response<pb::RegisterResponse>, Status> {
        as_client(&req)?;
        let reg = Registration::try_from(req.into_inner()).map_err(invalid)?;
        let id = self.core.ask(|r| Event::Register(reg, r)).await.map_err(status)?;
        Ok(Response::new(pb::RegisterResponse { coflow_id: id.0 }))
    }

    async fn unregister(
        &self,
        req: Request<pb::UnregisterRequest>,
    ) -> Result<Response<pb::UnregisterResponse>, Status> {
        as_client(&req)?;
        let id = CoflowId(req.into_inner().coflow_id);
        self.core.ask(|r| Event::Unregister(id, r)).await.map_err(status)?;
        Ok(Response::new(pb::UnregisterResponse {}))
    }

    async fn seal(&self, req: Request<pb::SealRequest>) -> Result<Response<pb::SealResponse>, Status> {
        as_client(&req)?;
        let id = CoflowId(req.into_inner().coflow_id);
        self.core.ask(|r| Event::Seal(id, r)).await.map_err(status)?;
        Ok(Response::new(pb::SealResponse {}))
    }

    #[tracing::instrument(skip_all, fields(coflow = req.get_ref().coflow_id, data_id = %req.get_ref().data_id))]
    async fn announce_put(
        &self,
        req: Request<pb::AnnouncePutRequest>,
    ) -> Result<Response<pb::AnnouncePutResponse>, Status> {
        let (machine, session) = (req.get_ref().machine_id, req.get_ref().session);
        as_agent(&req, machine)?;
        self.sessions.check(MachineId(machine), session).await?;
        let put = PutAnnouncement::try_from(req.into_inner()).map_err(invalid)?;
        let reg = self.core.ask(|r| Event::Put(put, r)).await.map_err(status)?;
        Ok(Response::new(pb::AnnouncePutResponse { registration: Some((&reg).into()) }))
    }

    #[tracing::instrument(skip_all, fields(coflow = req.get_ref().coflow_id, data_id = %req.get_ref().data_id))]
    async fn announce_get(
        &self,
        req: Request<pb::AnnounceGetRequest>,
    ) -> Result<Response<pb::AnnounceGetResponse>, Status> {
        let (machine, session) = (req.get_ref().machine_id, req.get_ref().session);
        as_agent(&req, machine)?;
        let known = self.sessions.check_known(MachineId(machine), session).await?;
        if session != 0 && !known {
            // A session from a previous coordinator: this is a restart, and the agent has not
            // registered again yet; it retries once it has.
            self.restarted.store(true, std::sync::atomic::Ordering::Relaxed);
            return Err(Status::unavailable(format!("machine {machine} has not registered with this coordinator yet")));
        }
        let req = req.into_inner();
        let g = match FlowRecovery::from_request(&req).map_err(invalid)? {
            Some(rec) => self.core.ask(|r| Event::RecoverFlow(rec, r)).await.map_err(status)?,
            None => {
                let get = GetAnnouncement::try_from(req).map_err(invalid)?;
                match self.core.ask(|r| Event::Get(get, r)).await {
                    Ok(g) => g,
                    Err(
                        e @ (CoordError::UnknownCoflow(_)
                        | CoordError::NoSuchData { .. }
                        | CoordError::AgentUnavailable(_)),
                    ) if self.restarted.load(std::sync::atomic::Ordering::Relaxed)
                        && Instant::now() < self.recovering_until =>
                    {
                        return Err(Status::unavailable(format!("the coordinator has just started: {e}; retry")));
                    }
                    Err(e) => return Err(status(e)),
                }
            }
        };
        Ok(Response::new(pb::AnnounceGetResponse {
            flow_id: g.flow.0,
            src_machine_id: g.src.0,
            src_data_addr: g.src_data_addr.to_string(),
            size: g.size,
        }))
    }

    async fn flow_finished(
        &self,
        req: Request<pb::FlowFinishedRequest>,
    ) -> Result<Response<pb::FlowFinishedResponse>, Status> {
        as_some_agent(&req)?;
        let r = req.into_inner();
        let (flow, outcome) = (FlowId(r.flow_id), FlowOutcome::from_report(r.ok, r.reason));
        self.core.ask(|reply| Event::FlowFinished(flow, outcome, reply)).await.map_err(status)?;
        Ok(Response::new(pb::FlowFinishedResponse {}))
    }

    async fn status(&self, _req: Request<pb::StatusRequest>) -> Result<Response<pb::StatusResponse>, Status> {
        let v = self.core.ask(Event::Status).await.map_err(status)?;
        Ok(Response::new(status_to_pb(v)))
    }

    async fn register_agent(
        &self,
        req: Request<pb::RegisterAgentRequest>,
    ) -> Result<Response<pb::RegisterAgentResponse>, Status> {
        let (machine, claimed) = (req.get_ref().machine_id, req.get_ref().session);
        as_agent(&req, machine)?;
        if claimed != 0 {
            self.restarted.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        let certified = coflow_proto::Peer::of(&req).is_some_and(coflow_proto::Peer::is_certified);
        let remote = req.remote_addr();
        let a = AgentRegistration::try_from(req.into_inner()).map_err(invalid)?;
        let session = self
            .sessions
            .register(&self.core, a.machine, claimed, certified, remote, |r| Event::RegisterAgent(a, r))
            .await?;
        Ok(Response::new(pb::RegisterAgentResponse { heartbeat_interval_ms: 0, session }))
    }

    async fn heartbeat(&self, req: Request<pb::HeartbeatRequest>) -> Result<Response<pb::HeartbeatResponse>, Status> {
        let (machine, session) = (req.get_ref().machine_id, req.get_ref().session);
        as_agent(&req, machine)?;
        self.sessions.check(MachineId(machine), session).await?;
        let hb = Heartbeat::try_from(req.into_inner()).map_err(invalid)?;
        let known = self.core.ask(|r| Event::Heartbeat(hb, r)).await.map_err(status)?;
        Ok(Response::new(pb::HeartbeatResponse { known }))
    }

    async fn assign_machine(
        &self,
        req: Request<pb::AssignMachineRequest>,
    ) -> Result<Response<pb::AssignMachineResponse>, Status> {
        as_some_agent(&req)?;
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

    type WatchRatesStream = RateStream;

    async fn watch_rates(&self, req: Request<pb::WatchRatesRequest>) -> Result<Response<RateStream>, Status> {
        let (machine, session) = (req.get_ref().machine_id, req.get_ref().session);
        as_agent(&req, machine)?;
        let machine = MachineId(machine);
        self.sessions.check(machine, session).await?;
        let (tx, rx) = mpsc::unbounded_channel();
        self.core.tell(Event::Watch(machine, tx)).await.map_err(status)?;
        use tokio_stream::StreamExt;
        Ok(Response::new(Box::pin(tokio_stream::wrappers::UnboundedReceiverStream::new(rx).map(Ok))))
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
                tx_bps: a.tx_bps,
                rx_bps: a.rx_bps,
            })
            .collect(),
    }
}
