//! The coordinator's state machine: one closed [`Event`] enum in, rate pushes out.
//!
//! It owns the policy instance (the very code the simulator runs) and never reads a clock:
//! `now` comes with every call, so tests drive it in simulated time through the same events
//! the gRPC service sends. Replies go back on oneshot channels and rate pushes on unbounded
//! channels, both of which work without a runtime.
//!
//! Readiness: a coflow's pieces are announced by puts, each with its exact size, before any get;
//! by default every get becomes a scheduled flow as it arrives, in its coflow's place in the
//! order, so reducers that run in waves never wait on gets that will not come. A coflow
//! registered with [`Readiness::AllGets`] holds its gets until it expects no more (`num_flows`
//! gets, or once the driver has sealed it, as many gets as pieces put; with `num_flows` 0 it
//! waits for the seal) or its timeout passed (Varys Pseudocode 3). A sealed coflow takes no more puts: its shape is final.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;

use coflow_core::{CoflowId, FlowId, MachineId, Nanos, Rate};
use coflow_proto::{
    AgentRegistration, DataId, FlowRecovery, GetAnnouncement, Heartbeat, PutAnnouncement, Readiness, Registration,
};
use coflow_sched::{Allocation, BigSwitch, Fabric, Scheduler, Snapshot, SnapshotCoflow, SnapshotFlow};
use tokio::sync::{mpsc, oneshot};

use crate::config::{CoordinatorConfig, TCP};
use crate::error::CoordError;

/// Where a reply goes.
pub type Reply<T> = oneshot::Sender<Result<T, CoordError>>;

/// Rate changes for one agent's outgoing flows, bytes per second.
pub type RateBatch = Vec<(FlowId, f64)>;

/// What the coordinator tells an agent besides rates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Notice {
    /// A flow this agent receives was failed (its source was declared dead): end the get.
    FlowFailed(FlowId),
    /// A coflow was unregistered: forget its pieces.
    CoflowDropped(CoflowId),
}

/// What the coordinator is told: every trigger of work.
#[derive(Debug)]
pub enum Event {
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
    /// A receiving agent finished a flow (`ok`) or gave up on it.
    FlowFinished(FlowId, bool, Reply<()>),
    /// A receiving agent gave up on a flow, for a reason (an error kind).
    FlowFailed(FlowId, String, Reply<()>),
    /// An agent joins.
    RegisterAgent(AgentRegistration, Reply<()>),
    /// An agent reports; the reply says whether the coordinator knows it.
    Heartbeat(Heartbeat, Reply<bool>),
    /// An agent listens for its flows' rates; the current ones are sent at once.
    Watch(MachineId, mpsc::UnboundedSender<RateBatch>),
    /// An agent listens for notices (failed flows, dropped coflows).
    Notices(MachineId, mpsc::UnboundedSender<Notice>),
    /// Someone asks what is live.
    Status(Reply<StatusView>),
    /// Prometheus asks for the counters.
    Metrics(Reply<String>),
}

/// What a get is told: the flow and where to fetch it.
#[derive(Clone, Debug, PartialEq)]
pub struct FlowGrant {
    /// The flow's id.
    pub flow: FlowId,
    /// The sending machine.
    pub src: MachineId,
    /// The sending agent's data listener.
    pub src_data_addr: SocketAddr,
    /// The piece's size.
    pub size: u64,
}

/// A snapshot of live state, for `coflow status`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StatusView {
    /// The policy.
    pub policy: String,
    /// Live coflows by id.
    pub coflows: Vec<CoflowView>,
    /// Known agents.
    pub agents: Vec<AgentView>,
}

/// One live coflow.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CoflowView {
    /// Its id.
    pub id: CoflowId,
    /// Its name.
    pub name: String,
    /// Its announced `num_flows`.
    pub num_flows: u32,
    /// Pieces put so far.
    pub puts: u32,
    /// Whether it bypasses scheduling.
    pub bypass: bool,
    /// Its unfinished flows: id, data id, source, destination, size, bytes sent, rate.
    pub flows: Vec<FlowView>,
}

/// One unfinished flow.
#[derive(Clone, Debug, PartialEq)]
pub struct FlowView {
    /// Its id.
    pub id: FlowId,
    /// Its piece.
    pub data_id: String,
    /// Sender.
    pub src: MachineId,
    /// Receiver.
    pub dst: MachineId,
    /// Size.
    pub size: u64,
    /// Bytes sent as last reported.
    pub sent: u64,
    /// Assigned rate, bytes per second.
    pub rate: f64,
}

/// One agent.
#[derive(Clone, Debug, PartialEq)]
pub struct AgentView {
    /// Its machine.
    pub machine: MachineId,
    /// Its data listener.
    pub data_addr: SocketAddr,
    /// Whether it is alive.
    pub alive: bool,
    /// Its last reported sending rate.
    pub tx_bps: f64,
    /// Its last reported receiving rate.
    pub rx_bps: f64,
}

#[derive(Debug)]
struct CoflowRec {
    reg: Registration,
    /// Adopted from a recovered flow before any re-announced put told its registration.
    bare: bool,
    puts: BTreeMap<DataId, (MachineId, u64)>,
    sealed: bool,
    gets_seen: u32,
    first_get: Option<Nanos>,
    /// Flows created by gets but held until the coflow is ready.
    held: Vec<FlowId>,
    /// Released flows the policy schedules, unfinished.
    scheduled: BTreeSet<FlowId>,
    /// When it last entered the policy.
    arrival: Nanos,
    in_policy: bool,
    bypass: bool,
    large: bool,
    width: u32,
}

impl CoflowRec {
    /// Whether, waiting for all gets, no more are expected: `num_flows` were seen, or the coflow
    /// is sealed and as many gets as pieces put were seen. A coflow registered with `num_flows`
    /// 0 (unknown) waits for its seal (or its timeout).
    fn all_gets_in(&self) -> bool {
        let expected = if self.sealed {
            self.puts.len() as u32
        } else if self.reg.num_flows > 0 {
            self.reg.num_flows
        } else {
            return false;
        };
        self.gets_seen > 0 && self.gets_seen >= expected
    }

    fn new(reg: Registration, now: Nanos) -> CoflowRec {
        CoflowRec {
            reg,
            bare: false,
            puts: BTreeMap::new(),
            sealed: false,
            gets_seen: 0,
            first_get: None,
            held: Vec::new(),
            scheduled: BTreeSet::new(),
            arrival: now,
            in_policy: false,
            bypass: false,
            large: false,
            width: 0,
        }
    }
}

#[derive(Debug)]
struct FlowRec {
    coflow: CoflowId,
    data_id: DataId,
    src: MachineId,
    dst: MachineId,
    size: u64,
    /// Bytes sent as of the source's last report, and when that report came.
    sent: u64,
    sent_at: Nanos,
    released: bool,
    /// Served outside the policy: bypass, local, or rejected by admission control.
    unscheduled: bool,
    rate: f64,
}

#[derive(Debug)]
struct AgentRec {
    data_addr: SocketAddr,
    port_rate: f64,
    alive: bool,
    last_seen: Nanos,
    tx_bps: f64,
    rx_bps: f64,
}

/// Counters for `/metrics` and the benchmark.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Counters {
    /// Events handled (control messages received).
    pub messages: u64,
    /// Policy decisions.
    pub decisions: u64,
    /// Rate batches pushed to agents.
    pub pushes: u64,
    /// Individual rate changes pushed.
    pub rate_changes: u64,
    /// Flows finished with every byte.
    pub flows_finished: u64,
    /// Flows that failed.
    pub flows_failed: u64,
    /// Coflows registered.
    pub coflows_registered: u64,
    /// Flows re-announced by receiving agents after a restart and scheduled again.
    pub flows_recovered: u64,
    /// Coflows adopted from agents' re-announcements after a restart.
    pub coflows_adopted: u64,
}

/// The coordinator's state and its policy.
#[derive(Debug)]
pub struct Core {
    cfg: CoordinatorConfig,
    policy: Box<dyn Scheduler>,
    coflows: BTreeMap<CoflowId, CoflowRec>,
    /// Coflows in the policy, in arrival order.
    active: BTreeSet<(Nanos, CoflowId)>,
    flows: BTreeMap<FlowId, FlowRec>,
    agents: BTreeMap<MachineId, AgentRec>,
    watchers: BTreeMap<MachineId, mpsc::UnboundedSender<RateBatch>>,
    notices: BTreeMap<MachineId, mpsc::UnboundedSender<Notice>>,
    /// The first coflow and flow id this coordinator allocates (see [`Core::set_id_base`]).
    id_base: u64,
    /// Failed flows by reason; timed-out ones are also counted in `timed_out`.
    failed: BTreeMap<String, u64>,
    timed_out: BTreeMap<&'static str, u64>,
    pending: BTreeMap<MachineId, BTreeMap<FlowId, f64>>,
    next_coflow: u64,
    next_flow: u64,
    dirty: bool,
    wake: Option<Nanos>,
    last_decision: Nanos,
    last_flush: Nanos,
    snapshot: Snapshot,
    alloc: Allocation,
    order: Vec<FlowId>,
    rates: Vec<f64>,
    rejected: Vec<CoflowId>,
    counters: Counters,
    /// The `tcp` mode: every flow is unscheduled, at its sender's port rate.
    tcp: bool,
}

/// A rate change smaller than this share of the old rate is not pushed.
const RATE_TOLERANCE: f64 = 0.005;

impl Core {
    /// A coordinator with no coflows and no agents, running `policy`.
    pub fn new(cfg: CoordinatorConfig, policy: Box<dyn Scheduler>) -> Core {
        let tcp = cfg.policy == TCP;
        Core {
            cfg,
            policy,
            coflows: BTreeMap::new(),
            active: BTreeSet::new(),
            flows: BTreeMap::new(),
            agents: BTreeMap::new(),
            watchers: BTreeMap::new(),
            notices: BTreeMap::new(),
            id_base: 1,
            failed: BTreeMap::new(),
            timed_out: BTreeMap::new(),
            pending: BTreeMap::new(),
            next_coflow: 1,
            next_flow: 1,
            dirty: false,
            wake: None,
            last_decision: Nanos::ZERO,
            last_flush: Nanos::ZERO,
            snapshot: Snapshot::default(),
            alloc: Allocation::default(),
            order: Vec::new(),
            rates: Vec::new(),
            rejected: Vec::new(),
            counters: Counters::default(),
            tcp,
        }
    }

    /// The counters so far.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// A flow's assigned rate, if it is live.
    pub fn rate(&self, flow: FlowId) -> Option<f64> {
        self.flows.get(&flow).map(|f| f.rate)
    }

    /// Handles one event at `now`. Call [`Core::poll`] after a batch of events.
    pub fn handle(&mut self, now: Nanos, event: Event) {
        self.counters.messages += 1;
        match event {
            Event::Register(reg, reply) => {
                if self.coflows.len() >= self.cfg.max_coflows {
                    let msg = format!("{} coflows registered (max_coflows)", self.coflows.len());
                    let _ = reply.send(Err(CoordError::LimitExceeded(msg)));
                    return;
                }
                let id = CoflowId(self.next_coflow);
                self.next_coflow += 1;
                self.counters.coflows_registered += 1;
                tracing::debug!(coflow = %id, name = %reg.options.name, num_flows = reg.num_flows, "registered");
                self.coflows.insert(id, CoflowRec::new(reg, now));
                let _ = reply.send(Ok(id));
            }
            Event::Unregister(id, reply) => {
                let _ = reply.send(self.unregister(now, id));
            }
            Event::Seal(id, reply) => {
                let r = match self.coflows.get_mut(&id) {
                    Some(c) => {
                        c.sealed = true;
                        // Its gets may all be in already: the seal is what they waited for.
                        if c.all_gets_in() {
                            self.release(now, id);
                        }
                        Ok(())
                    }
                    None => Err(CoordError::UnknownCoflow(id)),
                };
                let _ = reply.send(r);
            }
            Event::Put(put, reply) => {
                let _ = reply.send(self.put(now, put));
            }
            Event::Get(get, reply) => {
                let _ = reply.send(self.get(now, get));
            }
            Event::RecoverFlow(rec, reply) => {
                let _ = reply.send(self.recover_flow(now, rec));
            }
            Event::FlowFinished(flow, ok, reply) => {
                let r = self.finish_flow(now, flow, if ok { None } else { Some("unspecified") });
                let _ = reply.send(r);
            }
            Event::FlowFailed(flow, reason, reply) => {
                let r = self.finish_flow(now, flow, Some(&reason));
                let _ = reply.send(r);
            }
            Event::RegisterAgent(a, reply) => {
                if self.agents.get(&a.machine).is_some_and(|old| old.alive) {
                    // Registering again means the agent restarted: what it held is gone.
                    self.agent_lost(now, a.machine, "agent-restarted");
                }
                tracing::info!(machine = %a.machine, data_addr = %a.data_addr, "agent registered");
                self.agents.insert(
                    a.machine,
                    AgentRec {
                        data_addr: a.data_addr,
                        port_rate: a.port_rate,
                        alive: true,
                        last_seen: now,
                        tx_bps: 0.0,
                        rx_bps: 0.0,
                    },
                );
                self.dirty = true;
                let _ = reply.send(Ok(()));
            }
            Event::Heartbeat(hb, reply) => {
                let known = match self.agents.get_mut(&hb.machine) {
                    Some(a) if a.alive => {
                        a.last_seen = now;
                        a.tx_bps = hb.tx_bps;
                        a.rx_bps = hb.rx_bps;
                        true
                    }
                    _ => false,
                };
                if known {
                    for (id, sent) in hb.flows {
                        if let Some(f) = self.flows.get_mut(&id)
                            && f.src == hb.machine
                        {
                            f.sent = f.sent.max(sent.min(f.size));
                            f.sent_at = now;
                        }
                    }
                }
                let _ = reply.send(Ok(known));
            }
            Event::Watch(machine, tx) => {
                let current: RateBatch = self
                    .flows
                    .iter()
                    .filter(|(_, f)| f.src == machine && f.released)
                    .map(|(&id, f)| (id, f.rate))
                    .collect();
                if tx.send(current).is_ok() {
                    self.watchers.insert(machine, tx);
                }
            }
            Event::Notices(machine, tx) => {
                self.notices.insert(machine, tx);
            }
            Event::Status(reply) => {
                let _ = reply.send(Ok(self.status()));
            }
            Event::Metrics(reply) => {
                let _ = reply.send(Ok(self.metrics()));
            }
        }
    }

    /// Coflow and flow ids start at `base` (the service passes a clock reading, so that ids from
    /// before a restart, which agents re-announce, do not collide with new ones). An unknown id
    /// from `base` up to the last one this coordinator allocated was unregistered (or ended)
    /// here and is never adopted again; any other is a previous coordinator's, adopted, and new
    /// ids are allocated above it.
    pub fn set_id_base(&mut self, base: u64) {
        self.id_base = self.id_base.max(base);
        self.next_coflow = self.next_coflow.max(base);
        self.next_flow = self.next_flow.max(base);
    }

    /// Adopts a coflow a previous coordinator registered, if `id` is from before this one.
    fn adopt(&mut self, now: Nanos, id: CoflowId, reg: Option<Registration>) -> Result<(), CoordError> {
        if self.coflows.contains_key(&id) {
            return Ok(());
        }
        if (self.id_base..self.next_coflow).contains(&id.0) {
            return Err(CoordError::UnknownCoflow(id));
        }
        self.next_coflow = self.next_coflow.max(id.0 + 1);
        tracing::info!(coflow = %id, "coflow adopted from an agent's re-announcement");
        self.counters.coflows_adopted += 1;
        let bare = reg.is_none();
        let mut c = CoflowRec::new(reg.unwrap_or(Registration { num_flows: 0, options: Default::default() }), now);
        c.bare = bare;
        self.coflows.insert(id, c);
        Ok(())
    }

    fn put(&mut self, now: Nanos, put: PutAnnouncement) -> Result<Registration, CoordError> {
        if !self.agents.get(&put.machine).is_some_and(|a| a.alive) {
            return Err(CoordError::AgentUnavailable(put.machine));
        }
        if put.recovered {
            // Soft state: an agent that registered again re-announces what it holds.
            self.adopt(now, put.coflow, put.registration.clone())?;
        }
        let max_pieces = self.cfg.max_pieces_per_coflow;
        let c = self.coflows.get_mut(&put.coflow).ok_or(CoordError::UnknownCoflow(put.coflow))?;
        if put.recovered
            && c.bare
            && let Some(reg) = put.registration
        {
            c.reg = reg;
            c.bare = false;
        }
        if put.recovered && c.puts.get(&put.data_id) == Some(&(put.machine, put.size)) {
            return Ok(c.reg.clone());
        }
        if c.puts.contains_key(&put.data_id) {
            return Err(CoordError::DuplicateDataId { coflow: put.coflow, data_id: put.data_id });
        }
        if c.sealed && !put.recovered {
            return Err(CoordError::Sealed(put.coflow));
        }
        if c.puts.len() >= max_pieces && !put.recovered {
            let msg = format!("coflow {} has {} pieces (max_pieces_per_coflow)", put.coflow, c.puts.len());
            return Err(CoordError::LimitExceeded(msg));
        }
        c.puts.insert(put.data_id, (put.machine, put.size));
        Ok(c.reg.clone())
    }

    /// Schedules again a flow a previous coordinator granted, under its old id.
    fn recover_flow(&mut self, now: Nanos, r: FlowRecovery) -> Result<FlowGrant, CoordError> {
        let src_agent = self.agents.get(&r.src).filter(|a| a.alive).ok_or(CoordError::AgentUnavailable(r.src))?;
        let grant = FlowGrant { flow: r.flow, src: r.src, src_data_addr: src_agent.data_addr, size: r.size };
        if !self.agents.get(&r.dst).is_some_and(|a| a.alive) {
            return Err(CoordError::AgentUnavailable(r.dst));
        }
        if let Some(f) = self.flows.get(&r.flow) {
            // Re-announced twice, or a flow of this very coordinator: nothing to do.
            return if f.src == r.src && f.dst == r.dst && f.coflow == r.coflow {
                Ok(grant)
            } else {
                Err(CoordError::UnknownFlow(r.flow))
            };
        }
        if (self.id_base..self.next_flow).contains(&r.flow.0) {
            return Err(CoordError::UnknownFlow(r.flow));
        }
        self.adopt(now, r.coflow, None)?;
        self.next_flow = self.next_flow.max(r.flow.0 + 1);
        self.counters.flows_recovered += 1;
        tracing::info!(flow = %r.flow, coflow = %r.coflow, received = r.received, "flow recovered");
        let c = self.coflows.get_mut(&r.coflow).expect("adopted");
        c.gets_seen += 1;
        c.width += 1;
        c.first_get.get_or_insert(now);
        c.held.push(r.flow);
        self.flows.insert(
            r.flow,
            FlowRec {
                coflow: r.coflow,
                data_id: r.data_id,
                src: r.src,
                dst: r.dst,
                size: r.size,
                sent: r.received,
                sent_at: now,
                released: false,
                unscheduled: false,
                rate: 0.0,
            },
        );
        // It was released by the previous coordinator: it waits for nothing.
        self.release(now, r.coflow);
        Ok(grant)
    }

    fn get(&mut self, now: Nanos, get: GetAnnouncement) -> Result<FlowGrant, CoordError> {
        let c = self.coflows.get_mut(&get.coflow).ok_or(CoordError::UnknownCoflow(get.coflow))?;
        let &(src, size) = c
            .puts
            .get(&get.data_id)
            .ok_or_else(|| CoordError::NoSuchData { coflow: get.coflow, data_id: get.data_id.clone() })?;
        let src_agent = self.agents.get(&src).filter(|a| a.alive).ok_or(CoordError::AgentUnavailable(src))?;
        if !self.agents.get(&get.machine).is_some_and(|a| a.alive) {
            return Err(CoordError::AgentUnavailable(get.machine));
        }
        let grant = FlowGrant { flow: FlowId(self.next_flow), src, src_data_addr: src_agent.data_addr, size };
        self.next_flow += 1;
        c.gets_seen += 1;
        c.width += 1;
        c.first_get.get_or_insert(now);
        self.flows.insert(
            grant.flow,
            FlowRec {
                coflow: get.coflow,
                data_id: get.data_id,
                src,
                dst: get.machine,
                size,
                sent: 0,
                sent_at: now,
                released: false,
                unscheduled: false,
                rate: 0.0,
            },
        );
        c.held.push(grant.flow);
        let ready = match c.reg.options.readiness {
            Readiness::OnGet => true,
            Readiness::AllGets { timeout } => c.all_gets_in() || now >= c.first_get.unwrap() + timeout,
        };
        if ready {
            self.release(now, get.coflow);
        }
        Ok(grant)
    }

    /// Moves a coflow's held flows into service.
    fn release(&mut self, now: Nanos, id: CoflowId) {
        let threshold = self.cfg.bypass_threshold_bytes as f64;
        let Some(c) = self.coflows.get_mut(&id) else { return };
        let held = std::mem::take(&mut c.held);
        if held.is_empty() {
            return;
        }
        // The bottleneck: most bytes on one port, over every piece put and every flow asked for.
        if threshold > 0.0 && !c.large {
            let mut port: BTreeMap<(bool, MachineId), f64> = BTreeMap::new();
            for &(m, size) in c.puts.values() {
                *port.entry((false, m)).or_default() += size as f64;
            }
            for f in self.flows.values().filter(|f| f.coflow == id) {
                *port.entry((true, f.dst)).or_default() += f.size as f64;
            }
            let bottleneck = port.values().fold(0.0f64, |a, &b| a.max(b));
            c.bypass = bottleneck < threshold;
            c.large = !c.bypass;
        }
        let bypass = c.bypass || self.tcp;
        for flow in held {
            let f = self.flows.get_mut(&flow).expect("held flows are live");
            f.released = true;
            if bypass || f.src == f.dst {
                f.unscheduled = true;
                let cap = self.agents.get(&f.src).map_or(0.0, |a| a.port_rate);
                f.rate = cap;
                self.pending.entry(f.src).or_default().insert(flow, cap);
            } else {
                c.scheduled.insert(flow);
            }
        }
        if !c.in_policy && !c.scheduled.is_empty() {
            c.in_policy = true;
            c.arrival = now;
            self.active.insert((now, id));
            self.policy.handle_arrival(now, id);
        }
        self.dirty = true;
    }

    /// Ends a flow: with every byte (`failure` none), or failed for a reason (an error kind).
    fn finish_flow(&mut self, now: Nanos, id: FlowId, failure: Option<&str>) -> Result<(), CoordError> {
        let f = self.flows.remove(&id).ok_or(CoordError::UnknownFlow(id))?;
        match failure {
            None => self.counters.flows_finished += 1,
            Some(reason) => {
                self.counters.flows_failed += 1;
                // Reasons come from agents: keep the label set small and printable.
                let reason = if reason.len() <= 32 && reason.chars().all(|c| c.is_ascii_lowercase() || c == '-') {
                    reason
                } else {
                    "other"
                };
                *self.failed.entry(reason.to_string()).or_default() += 1;
                if reason == "timed-out" {
                    *self.timed_out.entry("data-read").or_default() += 1;
                }
                tracing::warn!(flow = %id, coflow = %f.coflow, data_id = %f.data_id, reason, "flow failed");
            }
        }
        if let Some(p) = self.pending.get_mut(&f.src) {
            p.remove(&id);
        }
        let Some(c) = self.coflows.get_mut(&f.coflow) else { return Ok(()) };
        c.held.retain(|&h| h != id);
        if c.scheduled.remove(&id) {
            if c.scheduled.is_empty() {
                self.leave_policy(now, f.coflow);
            } else if let Some(gap) = self.policy.flow_finish_gap() {
                let due = self.last_decision.saturating_add(gap);
                if now >= due {
                    self.dirty = true;
                } else {
                    self.wake = Some(self.wake.unwrap_or(Nanos::MAX).min(due));
                }
            }
        }
        Ok(())
    }

    fn leave_policy(&mut self, now: Nanos, id: CoflowId) {
        let Some(c) = self.coflows.get_mut(&id) else { return };
        if c.in_policy {
            c.in_policy = false;
            self.active.remove(&(c.arrival, id));
            self.policy.handle_finished(now, id);
            self.dirty = true;
        }
    }

    fn unregister(&mut self, now: Nanos, id: CoflowId) -> Result<(), CoordError> {
        if !self.coflows.contains_key(&id) {
            return Err(CoordError::UnknownCoflow(id));
        }
        self.leave_policy(now, id);
        self.coflows.remove(&id);
        // Every agent forgets the coflow's pieces (an agent that misses this notice is told
        // `unknown-coflow` when it re-announces them, and forgets them then).
        self.notices.retain(|_, tx| tx.send(Notice::CoflowDropped(id)).is_ok());
        // Flows still running finish unscheduled, at full speed, rather than hang.
        for (&fid, f) in self.flows.iter_mut().filter(|(_, f)| f.coflow == id) {
            f.unscheduled = true;
            f.released = true;
            let cap = self.agents.get(&f.src).map_or(0.0, |a| a.port_rate);
            f.rate = cap;
            self.pending.entry(f.src).or_default().insert(fid, cap);
        }
        Ok(())
    }

    /// An agent died or restarted: the pieces it held are gone and its flows fail; the agents
    /// receiving from it are told, so their gets end at once.
    fn agent_lost(&mut self, now: Nanos, m: MachineId, reason: &'static str) {
        tracing::warn!(machine = %m, reason, "agent lost");
        if let Some(a) = self.agents.get_mut(&m) {
            a.alive = false;
        }
        self.watchers.remove(&m);
        self.notices.remove(&m);
        self.pending.remove(&m);
        for (&id, f) in self.flows.iter().filter(|(_, f)| f.src == m && f.dst != m) {
            if let Some(tx) = self.notices.get(&f.dst) {
                let _ = tx.send(Notice::FlowFailed(id));
            }
            if reason == "agent-timed-out" {
                *self.timed_out.entry("agent-heartbeat").or_default() += 1;
            }
        }
        for c in self.coflows.values_mut() {
            c.puts.retain(|_, &mut (at, _)| at != m);
        }
        let dead: Vec<FlowId> =
            self.flows.iter().filter(|(_, f)| f.src == m || f.dst == m).map(|(&id, _)| id).collect();
        for id in dead {
            let _ = self.finish_flow(now, id, Some(reason));
        }
        self.dirty = true;
    }

    /// Runs what is due at `now`: agent timeouts, readiness timeouts, a decision, the push of
    /// changed rates. Returns when to be polled again if nothing else happens.
    pub fn poll(&mut self, now: Nanos) -> Option<Nanos> {
        let timeout = Nanos::from_millis(self.cfg.agent_timeout_ms);
        let lost: Vec<MachineId> = self
            .agents
            .iter()
            .filter(|(_, a)| a.alive && now.saturating_sub(a.last_seen) > timeout)
            .map(|(&m, _)| m)
            .collect();
        for m in lost {
            self.agent_lost(now, m, "agent-timed-out");
        }
        let mut next = Nanos::MAX;
        let waiting: Vec<(CoflowId, Nanos)> = self
            .coflows
            .iter()
            .filter(|(_, c)| !c.held.is_empty())
            .filter_map(|(&id, c)| match c.reg.options.readiness {
                Readiness::AllGets { timeout } => Some((id, c.first_get.unwrap_or(now) + timeout)),
                Readiness::OnGet => None,
            })
            .collect();
        for (id, due) in waiting {
            if now >= due {
                self.release(now, id);
            } else {
                next = next.min(due);
            }
        }
        if self.dirty || self.wake.is_some_and(|w| w <= now) {
            self.decide(now);
        }
        if let Some(w) = self.wake {
            next = next.min(w);
        }
        if !self.pending.is_empty() {
            let due = self.last_flush.saturating_add(Nanos::from_millis(self.cfg.push_window_ms));
            if now >= due {
                self.flush(now);
            } else {
                next = next.min(due);
            }
        }
        if self.agents.values().any(|a| a.alive) {
            next = next.min(now + Nanos::from_millis(self.cfg.heartbeat_interval_ms));
        }
        (next < Nanos::MAX).then_some(next)
    }

    fn flush(&mut self, now: Nanos) {
        self.last_flush = now;
        for (m, batch) in std::mem::take(&mut self.pending) {
            if batch.is_empty() {
                continue;
            }
            if let Some(tx) = self.watchers.get(&m) {
                self.counters.pushes += 1;
                self.counters.rate_changes += batch.len() as u64;
                if tx.send(batch.into_iter().collect()).is_err() {
                    self.watchers.remove(&m);
                }
            }
        }
    }

    fn fabric(&self) -> Fabric {
        let machines = self.agents.keys().next_back().map_or(1, |m| m.0 + 1);
        let ports = BigSwitch::new(machines, Rate::from_bytes_per_sec(1.0));
        let mut fabric = Fabric::new(ports);
        for r in 0..fabric.resources() as u32 {
            fabric.set_capacity(r, 0.0);
        }
        // Each port's capacity, less what unscheduled traffic was seen to use of it.
        let mut sched_tx: BTreeMap<MachineId, f64> = BTreeMap::new();
        let mut sched_rx: BTreeMap<MachineId, f64> = BTreeMap::new();
        let mut unsched_tx = BTreeSet::new();
        let mut unsched_rx = BTreeSet::new();
        for f in self.flows.values().filter(|f| f.released) {
            if f.unscheduled {
                unsched_tx.insert(f.src);
                unsched_rx.insert(f.dst);
            } else {
                *sched_tx.entry(f.src).or_default() += f.rate;
                *sched_rx.entry(f.dst).or_default() += f.rate;
            }
        }
        for (&m, a) in self.agents.iter().filter(|(_, a)| a.alive) {
            let others = |used: f64, sched: Option<&f64>, any: bool| {
                if any { (used - sched.copied().unwrap_or(0.0)).max(0.0) } else { 0.0 }
            };
            let tx = others(a.tx_bps, sched_tx.get(&m), unsched_tx.contains(&m));
            let rx = others(a.rx_bps, sched_rx.get(&m), unsched_rx.contains(&m));
            fabric.set_capacity(ports.ingress(m), (a.port_rate - tx).max(0.1 * a.port_rate));
            fabric.set_capacity(ports.egress(m), (a.port_rate - rx).max(0.1 * a.port_rate));
        }
        fabric
    }

    fn decide(&mut self, now: Nanos) {
        self.dirty = false;
        self.wake = None;
        self.last_decision = now;
        if self.active.is_empty() {
            return;
        }
        self.counters.decisions += 1;
        let fabric = self.fabric();
        self.snapshot.clear(self.policy.model());
        self.order.clear();
        let mut flows = Vec::new();
        for &(_, id) in &self.active {
            let c = &self.coflows[&id];
            flows.clear();
            for &fid in &c.scheduled {
                let f = &self.flows[&fid];
                let size = (f.size as f64).max(1.0);
                // The last report, brought forward at the rate in force since (reports are a
                // heartbeat old at most).
                let moved = f.rate * now.saturating_sub(f.sent_at).as_secs_f64();
                let remaining = (f.size.saturating_sub(f.sent) as f64 - moved).clamp(1.0, size);
                flows.push(SnapshotFlow { src: f.src, dst: f.dst, size, remaining });
                self.order.push(fid);
            }
            let spec = SnapshotCoflow {
                id,
                arrival: c.arrival,
                deadline: c.reg.options.deadline,
                weight: c.reg.options.weight,
                width: c.width,
            };
            self.snapshot.push_coflow(&fabric, &spec, &flows);
        }
        let input = self.snapshot.input(now, &fabric);
        self.alloc.reset(&input);
        self.wake = self.policy.poll_allocation(&input, &mut self.alloc);
        self.snapshot.flow_rates(&self.alloc, &mut self.rates);
        for (&fid, &rate) in self.order.iter().zip(&self.rates) {
            let f = self.flows.get_mut(&fid).expect("scheduled flows are live");
            let changed = if f.rate == 0.0 || rate == 0.0 {
                f.rate != rate
            } else {
                (rate - f.rate).abs() > RATE_TOLERANCE * f.rate
            };
            if changed {
                f.rate = rate;
                self.pending.entry(f.src).or_default().insert(fid, rate);
            }
        }
        // Rejected coflows are served unscheduled rather than left to hang.
        self.rejected.clear();
        self.policy.poll_rejected(&mut self.rejected);
        for id in std::mem::take(&mut self.rejected) {
            tracing::info!(coflow = %id, "rejected by admission control; served unscheduled");
            let Some(c) = self.coflows.get_mut(&id) else { continue };
            c.bypass = true;
            c.large = true;
            let flows = std::mem::take(&mut c.scheduled);
            if c.in_policy {
                c.in_policy = false;
                self.active.remove(&(c.arrival, id));
            }
            for fid in flows {
                let f = self.flows.get_mut(&fid).expect("scheduled flows are live");
                f.unscheduled = true;
                f.rate = self.agents.get(&f.src).map_or(0.0, |a| a.port_rate);
                self.pending.entry(f.src).or_default().insert(fid, f.rate);
            }
        }
    }

    fn status(&self) -> StatusView {
        let mut coflows: BTreeMap<CoflowId, CoflowView> = self
            .coflows
            .iter()
            .map(|(&id, c)| {
                (
                    id,
                    CoflowView {
                        id,
                        name: c.reg.options.name.clone(),
                        num_flows: c.reg.num_flows,
                        puts: c.puts.len() as u32,
                        bypass: c.bypass,
                        flows: Vec::new(),
                    },
                )
            })
            .collect();
        for (&id, f) in &self.flows {
            if let Some(c) = coflows.get_mut(&f.coflow) {
                c.flows.push(FlowView {
                    id,
                    data_id: f.data_id.to_string(),
                    src: f.src,
                    dst: f.dst,
                    size: f.size,
                    sent: f.sent,
                    rate: f.rate,
                });
            }
        }
        StatusView {
            policy: if self.tcp { TCP.to_string() } else { self.policy.name().to_string() },
            coflows: coflows.into_values().collect(),
            agents: self
                .agents
                .iter()
                .map(|(&machine, a)| AgentView {
                    machine,
                    data_addr: a.data_addr,
                    alive: a.alive,
                    tx_bps: a.tx_bps,
                    rx_bps: a.rx_bps,
                })
                .collect(),
        }
    }

    fn metrics(&self) -> String {
        let c = &self.counters;
        let alive = self.agents.values().filter(|a| a.alive).count();
        let mut s = String::new();
        let mut line = |name: &str, kind: &str, help: &str, v: f64| {
            s.push_str(&format!("# HELP coflow_coordinator_{name} {help}\n# TYPE coflow_coordinator_{name} {kind}\n"));
            s.push_str(&format!("coflow_coordinator_{name} {v}\n"));
        };
        line("messages_total", "counter", "Control messages handled.", c.messages as f64);
        line("decisions_total", "counter", "Policy decisions.", c.decisions as f64);
        line("rate_pushes_total", "counter", "Rate batches pushed to agents.", c.pushes as f64);
        line("rate_changes_total", "counter", "Flow rate changes pushed.", c.rate_changes as f64);
        line("flows_finished_total", "counter", "Flows finished with every byte.", c.flows_finished as f64);
        line("flows_failed_total", "counter", "Flows that failed.", c.flows_failed as f64);
        line("coflows_registered_total", "counter", "Coflows registered.", c.coflows_registered as f64);
        line("flows_recovered_total", "counter", "Flows re-announced after a restart.", c.flows_recovered as f64);
        line("coflows_adopted_total", "counter", "Coflows adopted after a restart.", c.coflows_adopted as f64);
        line("live_coflows", "gauge", "Registered coflows.", self.coflows.len() as f64);
        line("scheduled_coflows", "gauge", "Coflows the policy schedules.", self.active.len() as f64);
        line("live_flows", "gauge", "Unfinished flows.", self.flows.len() as f64);
        line("agents_alive", "gauge", "Live agents.", alive as f64);
        let mut labelled = |name: &str, help: &str, rows: Vec<(&str, u64)>| {
            s.push_str(&format!("# HELP coflow_coordinator_{name} {help}\n# TYPE coflow_coordinator_{name} counter\n"));
            for (reason, v) in rows {
                s.push_str(&format!("coflow_coordinator_{name}{{reason=\"{reason}\"}} {v}\n"));
            }
        };
        let failed = self.failed.iter().map(|(r, &v)| (r.as_str(), v)).collect();
        labelled("flows_failed_by_reason_total", "Flows that failed, by reason (error kind).", failed);
        let timed_out = self.timed_out.iter().map(|(&r, &v)| (r, v)).collect();
        labelled("flows_timed_out_total", "Flows that failed on a timeout, by which one.", timed_out);
        s
    }
}
