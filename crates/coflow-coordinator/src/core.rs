//! The coordinator's state machine, in the shape of quinn-proto's `Connection`: typed
//! `handle_*` methods take `now` and an input and return what the caller must answer;
//! [`Core::handle_timeout`] runs what is due; [`Core::poll_timeout`] says when that is next and
//! [`Core::poll_transmit`] hands out what must be sent (rate batches and notices per agent).
//!
//! It owns the policy instance (the very code the simulator runs), reads no clock, holds no
//! channel and does no I/O: the service converts its clock to [`Nanos`] at the edge and owns
//! every channel, task and timer, so tests drive the core in simulated time by calling it and
//! asserting on what it returns.
//!
//! Readiness: a coflow's pieces are announced by puts, each with its exact size, before any get;
//! by default every get becomes a scheduled flow as it arrives, in its coflow's place in the
//! order, so reducers that run in waves never wait on gets that will not come. A coflow
//! registered with [`Readiness::AllGets`] holds its gets until it expects no more (`num_flows`
//! gets, or once the driver has sealed it, as many gets as pieces put; with `num_flows` 0 it
//! waits for the seal) or its timeout passed (Varys Pseudocode 3). A sealed coflow takes no more puts: its shape is final.
//! No answer waits for readiness: a get is granted at once and its flow holds at rate 0 until
//! released, so the core keeps no pending replies.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

// A socket address is a value, not I/O: `core::net` is there without the standard library.
use ::core::net::SocketAddr;

use coflow_core::{CoflowId, FlowId, MachineId, Nanos};
use coflow_proto::ticket::Scope;
use coflow_proto::{AgentRegistration, DataId, GetAnnouncement, PutAnnouncement, Readiness, Registration};
use coflow_sched::{Allocation, Fabric, Scheduler, Snapshot};

use crate::config::{CoordinatorConfig, TCP, dc_name};
use crate::error::CoordError;
use crate::status::{Admission, AgentView, CoflowView, FlowView};

mod decide;
mod heartbeat;
mod jobs;
mod leases;
mod output;
mod owners;
mod ports;
mod readiness;
mod recovery;
mod shape;
mod wide_area;

use decide::Why;
use heartbeat::Reader;
pub use output::{Notice, Observation, RateBatch, Transmit};
use recovery::Span;
use wide_area::{GATHER, RESUME_WAIT, Routing};
pub use wide_area::{GrantPart, MIN_PART_BYTES, Relay};

pub use coflow_proto::ADMIN;

/// How a receiving agent reports the end of a flow.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FlowOutcome {
    /// Every byte arrived.
    Completed,
    /// The receiver gave up, for a reason: the error kind it saw, e.g. `data-lost`.
    Failed(String),
}

impl FlowOutcome {
    /// The outcome of a `FlowFinished` report: `ok`, or failed for `reason`, an error kind's
    /// name (`unspecified` when the report gives none, `other` for a name that is no kind), so
    /// that what agents report cannot grow the reasons counted or end a flow as anything else.
    pub fn from_report(ok: bool, reason: String) -> FlowOutcome {
        match (ok, reason.parse::<coflow_proto::ErrorKind>()) {
            (true, _) => FlowOutcome::Completed,
            (false, Ok(kind)) => FlowOutcome::Failed(kind.as_str().into()),
            (false, Err(_)) if reason.is_empty() => FlowOutcome::Failed("unspecified".into()),
            (false, Err(_)) => FlowOutcome::Failed("other".into()),
        }
    }
}

/// What a get is told: the flow and where to fetch it.
#[derive(Clone, Debug, PartialEq)]
pub struct FlowGrant {
    /// The flow's id (its first part's, if it has parts).
    pub flow: FlowId,
    /// The sending machine.
    pub src: MachineId,
    /// The sending agent's data listener.
    pub src_data_addr: SocketAddr,
    /// The piece's size.
    pub size: u64,
    /// The flow's capability, told to the receiver only (see [`coflow_proto::ticket`]).
    pub ticket: coflow_proto::ticket::Ticket,
    /// The parts, in order of offset, when the get is split over several paths or resumed;
    /// empty: one part, the whole piece, fetched directly as `flow`.
    pub parts: Vec<GrantPart>,
    /// Whether the coordinator routes around lost paths: a part whose source cannot be reached
    /// is to be resumed rather than failed.
    pub reroutable: bool,
}

/// How a coflow's released flows are served. One value, so that a coflow cannot be both
/// bypassed and scheduled, or scheduled while out of the policy with flows in it.
#[derive(Debug)]
enum CoflowState {
    /// Nothing released yet (its gets, if any, wait for readiness): its size is not judged.
    Held,
    /// Small (its bottleneck under `bypass_threshold_bytes`, and so with its owner's coflows
    /// bypassing with flows in flight): its flows go unscheduled, at port rate. Judged again at
    /// each release, since later gets may make it large.
    Bypassed,
    /// Large, or no bypass threshold: the policy schedules its flows, for good (as best effort
    /// if its admission control rejects it). In the policy while it has unfinished scheduled
    /// flows.
    Scheduled(Option<InPolicy>),
}

/// A coflow the policy holds.
#[derive(Debug)]
struct InPolicy {
    /// When it last entered the policy (its key in [`Core`]'s active set).
    arrival: Nanos,
    /// Its released, unfinished flows the policy schedules; never empty.
    flows: BTreeSet<FlowId>,
}

#[derive(Debug)]
struct CoflowRec {
    /// Its registration, with its owner and nonce.
    reg: Registration,
    /// Its job, for job-aware policies ([`Core::job_of`]).
    job: CoflowId,
    puts: shape::Pieces,
    /// Its unfinished flows.
    flows: shape::Flows,
    sealed: bool,
    /// The gets asked of it, towards those it expects: a get asked again after its flow failed
    /// (its client cancelled it, its source was lost) is the same get.
    gets_seen: u32,
    /// Of its gets whose flows failed, how many of each receiver and piece are not asked again yet:
    /// the next get of that receiver and piece is one asked again, and counts neither in
    /// `gets_seen` nor in `width`.
    failed_gets: BTreeMap<(MachineId, DataId), u32>,
    first_get: Option<Nanos>,
    /// Whether a flow of it was served in the policy, when its last flow that delivered ended,
    /// and whether its completion was observed.
    scheduled: bool,
    last_end: Option<Nanos>,
    observed: bool,
    /// Flows created by gets but held until the coflow is ready. Usually only before the first
    /// release, but a seal or a recovered put may raise the gets expected after it.
    held: Vec<FlowId>,
    /// The readiness deadline it is filed under in [`Core`]'s `ready`, if any.
    filed: Option<Nanos>,
    state: CoflowState,
    width: u32,
    /// When it was registered (or adopted after a restart): its deadline counts from then.
    registered: Nanos,
    /// When its lease runs out unless renewed (none without a lease).
    lease_until: Option<Nanos>,
    /// What the policy's admission control made of its deadline at its latest judgement (read
    /// only under a policy with admission control, for a coflow with a deadline), and whether
    /// the policy judged it since it last entered (it judges a coflow afresh at each entry).
    admission: Admission,
    judged: bool,
}

impl CoflowRec {
    fn new(reg: Registration, job: CoflowId, registered: Nanos) -> CoflowRec {
        CoflowRec {
            reg,
            job,
            puts: shape::Pieces::default(),
            flows: shape::Flows::default(),
            sealed: false,
            gets_seen: 0,
            failed_gets: BTreeMap::new(),
            first_get: None,
            scheduled: false,
            last_end: None,
            observed: false,
            held: Vec::new(),
            filed: None,
            state: CoflowState::Held,
            width: 0,
            registered,
            lease_until: None,
            admission: Admission::Pending,
            judged: false,
        }
    }

    /// When its held flows are released whatever else happens, if it waits for all gets.
    fn ready_deadline(&self) -> Option<Nanos> {
        match (self.reg.options.readiness, self.first_get) {
            (Readiness::AllGets { timeout }, Some(first)) if !self.held.is_empty() => {
                Some(first.saturating_add(timeout))
            }
            _ => None,
        }
    }

    /// Whether it is served outside the policy (what `coflow status` shows as bypass).
    fn bypassed(&self) -> bool {
        matches!(self.state, CoflowState::Bypassed)
    }
}

/// Where a flow stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FlowState {
    /// Waiting for its coflow to be ready: no rate.
    Held,
    /// The policy sets its rate.
    Scheduled,
    /// Served outside the policy, at its sender's port rate: bypassed, local, or any flow under
    /// `tcp`.
    Unscheduled,
}

#[derive(Debug)]
struct FlowRec {
    coflow: CoflowId,
    data_id: DataId,
    src: MachineId,
    dst: MachineId,
    size: u64,
    /// Bytes sent as of the source's last report of it, and when that came (none yet: the
    /// source has not started it).
    sent: u64,
    reported_at: Option<Nanos>,
    /// Since when `rate` is in force.
    rate_since: Nanos,
    /// Bytes the rates in force before `rate` moved since the last report.
    moved_before: f64,
    state: FlowState,
    rate: f64,
    /// Its first byte in the piece (a part of a get split over several paths, or resumed);
    /// `size` is its own.
    offset: u64,
    /// The relay it goes through, if any.
    via: Option<MachineId>,
    /// On a wide area, the links it crosses (none inside a datacenter, two through a relay),
    /// and the bytes its assigned rates asked since its last report (for the links'
    /// measurements): nothing before its source reported bytes moved (it may not have started),
    /// nor while served outside the policy.
    links: Vec<usize>,
    asked: f64,
    /// Its receiver was told to reroute it.
    rerouting: bool,
    /// How its bytes are routed.
    routing: Routing,
    /// On a big switch, what it added to its ports' judgement in the measurement period ending
    /// then: bytes moved and asked ([`ports::carried`]).
    judged_in: (Nanos, f64, f64),
    /// While its receiving client holds it back, what that client reads ([`Reader`]).
    reader: Option<Reader>,
}

impl FlowRec {
    /// What a status page shows of it, as flow `id` whose receiving client holds it back or not.
    fn view(&self, id: FlowId, reader_limited: bool) -> FlowView {
        let data_id = self.data_id.to_string();
        let (src, dst, via) = (self.src, self.dst, self.via);
        FlowView { id, data_id, src, dst, via, size: self.size, sent: self.sent, rate: self.rate, reader_limited }
    }

    /// The rate its source is told: its assigned rate, or for a flow served outside the policy
    /// `f64::INFINITY`, "not paced: as fast as the network (and the agent's port cap) lets it".
    /// Its `rate` is then its sender's port rate, which the coordinator counts as its use.
    fn pushed_rate(&self) -> f64 {
        if self.state == FlowState::Unscheduled { f64::INFINITY } else { self.rate }
    }

    /// Bytes its rate asked from the later of its last report and the rate's start to `now`, if
    /// the policy schedules it and it has started (moved a byte).
    fn asked_at_rate(&self, now: Nanos) -> f64 {
        match self.reported_at {
            Some(at) if self.state == FlowState::Scheduled && self.sent > 0 => {
                self.rate * now.saturating_sub(at.max(self.rate_since)).as_secs_f64()
            }
            _ => 0.0,
        }
    }

    /// Bytes `rate` moved since the last report: from the later of the report and the rate's
    /// start to `now`, counting nothing past a heartbeat after the report (the next report is
    /// due by then). Nothing before the first report: the flow may not have started.
    fn moved_at_rate(&self, now: Nanos, heartbeat: Nanos) -> f64 {
        match self.reported_at {
            Some(at) => {
                let end = now.min(at.saturating_add(heartbeat));
                self.rate * end.saturating_sub(at.max(self.rate_since)).as_secs_f64()
            }
            None => 0.0,
        }
    }
}

#[derive(Debug)]
struct AgentRec {
    data_addr: SocketAddr,
    /// Its datacenter, on a wide area.
    dc: Option<u32>,
    port_rate: f64,
    alive: bool,
    /// Whether it deregistered at a clean stop (rather than being lost) since it last registered.
    departed: bool,
    last_seen: Nanos,
    /// Its heartbeats' cadence as seen here: each gap between two of them, or this one lessened
    /// by a quarter a heartbeat if longer (agents set their own interval). None before its
    /// second heartbeat.
    beat: Option<Nanos>,
    tx_bps: f64,
    rx_bps: f64,
    /// The flows it receives whose client holds them back (reads slower than they come, or not
    /// at all), as of its last report.
    unread: BTreeSet<FlowId>,
}

/// Whether flow `id` (`f`) is one its receiving agent reports its client holding back.
fn held_back(agents: &BTreeMap<MachineId, AgentRec>, f: &FlowRec, id: FlowId) -> bool {
    agents.get(&f.dst).is_some_and(|a| a.unread.contains(&id))
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
    /// Re-announcements refused (outside the restart window, inconsistent, or naming an id this
    /// coordinator could not adopt).
    pub recoveries_refused: u64,
    /// Times the core found it had not run for longer than it asked (its process was paused):
    /// agents' silence over such a gap is not held against them.
    pub pauses: u64,
    /// Flows ended because their receiver resumed their rest over another path.
    pub flows_rerouted: u64,
    /// Parts relayed through a third datacenter (multi-path routing), and their bytes.
    pub parts_relayed: u64,
    /// Bytes relayed: a relayed part's length once it completes, the bytes before the cut once
    /// it is resumed, what its source last reported sent once it fails.
    pub bytes_relayed: u64,
    /// Coflows unregistered because their lease ran out without a renewal.
    pub coflows_expired: u64,
    /// Under a policy with admission control, its judgements of coflows with a deadline that
    /// admitted them: a coflow is judged as it enters the policy (again with a later wave of
    /// gets), and an admitted one again when it asks for more flows.
    pub coflows_admitted: u64,
    /// Its judgements that rejected them.
    pub coflows_rejected: u64,
    /// Coflows with a deadline that completed by it, under any policy.
    pub deadlines_met: u64,
    /// Coflows with a deadline that completed after it, or were dropped past it unfinished.
    pub deadlines_missed: u64,
}

/// The coordinator's state and its policy.
#[derive(Debug)]
pub struct Core {
    cfg: CoordinatorConfig,
    policy: Box<dyn Scheduler>,
    coflows: BTreeMap<CoflowId, CoflowRec>,
    /// How many registered coflows each job has ([`Core::join_job`]).
    jobs: BTreeMap<CoflowId, usize>,
    /// Coflows in the policy, in arrival order.
    active: BTreeSet<(Nanos, CoflowId)>,
    flows: BTreeMap<FlowId, FlowRec>,
    agents: BTreeMap<MachineId, AgentRec>,
    /// Agents whose rate stream is open: rates and notices go to them.
    watching: BTreeSet<MachineId>,
    /// What is to be sent, in order, until [`Core::poll_transmit`] takes it.
    outbox: VecDeque<Transmit>,
    /// Measurements for the service's histograms, pulled by [`Core::poll_observation`].
    observations: VecDeque<Observation>,
    /// Since when rate changes wait to be pushed.
    pending_since: Option<Nanos>,
    /// The first coflow and flow id this coordinator allocates (see [`Core::set_id_base`]).
    id_base: u64,
    /// Failed flows by reason; timed-out ones are also counted in `timed_out`.
    failed: BTreeMap<String, u64>,
    timed_out: BTreeMap<&'static str, u64>,
    pending: BTreeMap<MachineId, BTreeMap<FlowId, f64>>,
    next_coflow: u64,
    next_flow: u64,
    /// The latest `now` the core was given.
    now: Nanos,
    /// Why the next run decides, if it must (the first reason given since the last decision).
    dirty: Option<Why>,
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
    /// Until when re-announced (recovered) coflows and flows of a previous coordinator may be
    /// adopted: three agent timeouts from the core's time zero, its start.
    recovery_until: Nanos,
    /// Coflows unregistered lately, oldest first (bounded), never adopted again.
    unregistered: VecDeque<CoflowId>,
    unregistered_set: BTreeSet<CoflowId>,
    /// When the core last asked to run at the latest (after its last [`Core::handle_timeout`]).
    due: Nanos,
    /// Keys the coflows' nonces.
    nonces: std::hash::RandomState,
    /// Per owner (none in token mode), how many of `coflows` and of their pieces it holds.
    owners: owners::Owners,
    /// The secret flow tickets and agents' flow keys derive from, drawn at start.
    tickets: coflow_proto::ticket::Tickets,
    /// The policy is blind to sizes (its registry entry says so): no coflow is judged by the
    /// sizes put, so none bypasses it for being small. It learns only what its adapter passes
    /// on: flows asked for, their routes, bytes reported sent, and sizes of finished flows.
    blind: bool,
    /// The policy's rates depend on deadlines (its registry entry says so): while a coflow with
    /// one runs, it is decided for once a heartbeat.
    reads_deadlines: bool,
    /// On a wide area: the direct link between each ordered pair of datacenters (at
    /// `from * dcs + to`), and what the links were measured to carry.
    links: Vec<Option<usize>>,
    meter: Option<crate::measure::Meter>,
    /// On a big switch, what the agents' ports were measured to carry.
    ports: crate::measure::PortMeter,
    /// Flows waiting to be water-filled with their coflow's other gets, by when they started to.
    routing_due: BTreeSet<(Nanos, FlowId)>,
    /// Flows planned over detours whose receivers were told to resume them, by when.
    resume_due: BTreeSet<(Nanos, FlowId)>,
    /// Relays a receiver could not reach, by (relay, receiver), each left out of that receiver's
    /// new paths until then (see `plan_resume` in `core/wide_area`).
    relays_failed: BTreeMap<(MachineId, MachineId), Nanos>,
    /// A previous coordinator's flows resumed in the restart window, with the get of each.
    resumed_previous: BTreeMap<FlowId, (CoflowId, DataId, MachineId)>,
    /// Coflows with a lease, by when it runs out.
    leases: BTreeSet<(Nanos, CoflowId)>,
    /// Coflows with held flows by readiness deadline ([`readiness`]).
    ready: readiness::Ready,
    /// Since when the core has run without a quiet spell (see [`Core::expire_leases`]).
    awake_since: Nanos,
    /// The earliest a lease may be found run out, when a look at the leases was put off.
    lease_check: Nanos,
}

/// How a flow whose receiver resumed its rest over another path ends.
const REROUTED: &str = "rerouted";

/// How a flow whose receiver resumed it over the parts planned for it ends.
const SPLIT: &str = "split";

/// A rate change smaller than this share of the old rate is not pushed.
const RATE_TOLERANCE: f64 = 0.005;

impl Core {
    /// A coordinator with no coflows and no agents, running `policy`.
    pub fn new(cfg: CoordinatorConfig, policy: Box<dyn Scheduler>) -> Core {
        let tcp = coflow_sched::policy::unscheduled(&cfg.policy).is_some();
        let cfg_agent_timeout = cfg.agent_timeout_ms;
        let entry = coflow_sched::policy::entry_of(&cfg.policy).ok();
        let (blind, reads_deadlines) = entry.map_or((false, false), |e| (e.blind, e.reads_deadlines));
        let (links, meter) = match &cfg.wide_area {
            None => (Vec::new(), None),
            Some(wa) => {
                let dcs = wa.datacenters.len();
                let mut links = vec![None; dcs * dcs];
                for (i, l) in wa.links.iter().enumerate() {
                    links[l.from as usize * dcs + l.to as usize] = Some(i);
                }
                let meter = crate::measure::Meter::new(wa.links.iter().map(|l| l.bandwidth.clone()), Nanos::ZERO);
                (links, Some(meter))
            }
        };
        Core {
            cfg,
            policy,
            coflows: BTreeMap::new(),
            jobs: BTreeMap::new(),
            active: BTreeSet::new(),
            flows: BTreeMap::new(),
            agents: BTreeMap::new(),
            watching: BTreeSet::new(),
            outbox: VecDeque::new(),
            observations: VecDeque::new(),
            pending_since: None,
            id_base: 1,
            failed: BTreeMap::new(),
            timed_out: BTreeMap::new(),
            pending: BTreeMap::new(),
            next_coflow: 1,
            next_flow: 1,
            now: Nanos::ZERO,
            dirty: None,
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
            recovery_until: Nanos::from_millis(3 * cfg_agent_timeout),
            unregistered: VecDeque::new(),
            unregistered_set: BTreeSet::new(),
            due: Nanos::MAX,
            nonces: std::hash::RandomState::new(),
            owners: owners::Owners::default(),
            tickets: coflow_proto::ticket::Tickets::generate(),
            blind,
            reads_deadlines,
            links,
            meter,
            ports: crate::measure::PortMeter::default(),
            routing_due: BTreeSet::new(),
            resume_due: BTreeSet::new(),
            relays_failed: BTreeMap::new(),
            resumed_previous: BTreeMap::new(),
            leases: BTreeSet::new(),
            ready: readiness::Ready::new(),
            awake_since: Nanos::ZERO,
            lease_check: Nanos::ZERO,
        }
    }

    /// What this coordinator issues flow tickets with (an agent's flow key comes from it).
    pub fn tickets(&self) -> &coflow_proto::ticket::Tickets {
        &self.tickets
    }

    /// The counters so far.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// A flow's assigned rate, if it is live.
    pub fn rate(&self, flow: FlowId) -> Option<f64> {
        self.flows.get(&flow).map(|f| f.rate)
    }

    /// The policy's name, or `tcp`.
    pub fn policy_name(&self) -> &str {
        if self.tcp { TCP } else { self.policy.name() }
    }

    /// Whether a live agent runs on `machine`.
    pub fn agent_alive(&self, machine: MachineId) -> bool {
        self.agents.get(&machine).is_some_and(|a| a.alive)
    }

    /// Every registered coflow, by id, without its flows.
    pub fn coflows(&self) -> impl Iterator<Item = CoflowView> + '_ {
        self.coflows_after(CoflowId(0), None)
    }

    /// The registered coflows with an id above `after`, by id, without their flows; with a
    /// `viewer`, only those it may use (its own, those without an owner, or all for the admin).
    pub fn coflows_after<'a>(
        &'a self,
        after: CoflowId,
        viewer: Option<&'a str>,
    ) -> impl Iterator<Item = CoflowView> + 'a {
        use std::ops::Bound;
        // A member's coflows are found among its own, so that a page costs what it shows.
        let ids: Box<dyn Iterator<Item = CoflowId> + 'a> = match viewer {
            Some(v) if v != ADMIN => Box::new(self.owners.visible_after(v, after)),
            _ => Box::new(self.coflows.range((Bound::Excluded(after), Bound::Unbounded)).map(|(&id, _)| id)),
        };
        ids.filter_map(|id| self.coflows.get(&id).map(|c| (id, c))).map(|(id, c)| CoflowView {
            id,
            name: c.reg.options.name.clone(),
            num_flows: c.reg.num_flows,
            puts: c.puts.len() as u32,
            bypass: c.bypassed(),
            bytes: c.puts.bytes(),
            age: c.first_get.map(|t| self.now.saturating_sub(t)),
            deadline: c.reg.options.deadline,
            admission: (self.policy.admission_control() && c.reg.options.deadline.is_some() && !c.bypassed())
                .then_some(c.admission),
            lease_left: c.lease_until.map(|until| until.saturating_sub(self.now)),
            job: c.job,
            flows: Vec::new(),
        })
    }

    /// Coflow `id`'s unfinished flows, by id (none if it is not live).
    pub fn flows_of(&self, id: CoflowId) -> impl Iterator<Item = FlowView> + '_ {
        let ids = self.coflows.get(&id).into_iter().flat_map(|c| c.flows.ids());
        ids.filter_map(|fid| self.flows.get(&fid).map(|f| f.view(fid, held_back(&self.agents, f, fid))))
    }

    /// Every agent that registered, by machine.
    pub fn agents(&self) -> impl Iterator<Item = AgentView> + '_ {
        self.agents.iter().map(|(&machine, a)| {
            let (uplink_bps, downlink_bps) = self.port_capacity(machine, a.port_rate);
            AgentView {
                machine,
                datacenter: a.dc.zip(self.cfg.wide_area.as_ref()).map(|(dc, wa)| dc_name(wa, dc).to_string()),
                data_addr: a.data_addr,
                alive: a.alive,
                departed: a.departed,
                tx_bps: a.tx_bps,
                rx_bps: a.rx_bps,
                port_rate: a.port_rate,
                uplink_bps,
                downlink_bps,
                silent: self.now.saturating_sub(a.last_seen),
            }
        })
    }

    /// Failed flows by reason.
    pub fn failures(&self) -> impl Iterator<Item = (&str, u64)> + '_ {
        self.failed.iter().map(|(r, &v)| (r.as_str(), v))
    }

    /// Flows failed on a timeout, by which timeout.
    pub fn timeouts(&self) -> impl Iterator<Item = (&str, u64)> + '_ {
        self.timed_out.iter().map(|(&r, &v)| (r, v))
    }

    /// How many coflows are registered.
    pub fn live_coflows(&self) -> usize {
        self.coflows.len()
    }

    /// How many coflows the policy schedules now.
    pub fn scheduled_coflows(&self) -> usize {
        self.active.len()
    }

    /// How many flows are unfinished.
    pub fn live_flows(&self) -> usize {
        self.flows.len()
    }

    /// How many agents are alive.
    pub fn agents_alive(&self) -> usize {
        self.agents.values().filter(|a| a.alive).count()
    }

    /// Notes one input at `now`.
    fn input(&mut self, now: Nanos) {
        self.counters.messages += 1;
        self.clock(now);
    }

    /// Takes `now` as the latest time. A `now` later than the core asked to run by more than a
    /// quarter of the agent timeout means the core did not run meanwhile (its process was
    /// paused, or starved): the agents could not be heard over that gap, so each alive agent's
    /// silence is counted from the core's last run rather than from its last report.
    fn clock(&mut self, now: Nanos) {
        let slack = Nanos::from_millis(self.cfg.agent_timeout_ms / 4);
        if now > self.due.saturating_add(slack) && now > self.now {
            let gap = now - self.now;
            self.counters.pauses += 1;
            tracing::warn!(
                gap_ms = gap.get() / 1_000_000,
                "the coordinator did not run for a while; agents' silence over the gap is not counted"
            );
            for a in self.agents.values_mut().filter(|a| a.alive) {
                a.last_seen = a.last_seen.saturating_add(gap).min(now);
            }
            // Nor could any framework renew its leases.
            self.lengthen_leases(gap);
            // Running again: the inputs queued over the gap are on time from here.
            self.due = now;
        }
        self.note_run(now);
        self.now = self.now.max(now);
    }

    /// Whether `by` may change (unregister, seal) or use (put, get) coflow `c`: its owner, the
    /// admin, or anyone when it has no owner (registered in token mode).
    fn may_change(c: &CoflowRec, by: &str) -> bool {
        c.reg.may_be_used_by(by)
    }

    /// The nonce of a coflow this coordinator registers.
    fn nonce(&self, id: CoflowId) -> u64 {
        use std::hash::BuildHasher;
        self.nonces.hash_one(id.0) | 1
    }

    /// A framework registers a coflow; it belongs to `reg.owner` (the caller's identity, which
    /// the service sets).
    pub fn handle_register(&mut self, now: Nanos, mut reg: Registration) -> Result<CoflowId, CoordError> {
        self.input(now);
        self.room_for(&reg.owner).map_err(CoordError::LimitExceeded)?;
        self.may_name_parents(&reg)?;
        let id = CoflowId(self.next_coflow);
        self.next_coflow =
            self.next_coflow.checked_add(1).ok_or_else(|| CoordError::LimitExceeded("coflow ids exhausted".into()))?;
        reg.nonce = self.nonce(id);
        self.counters.coflows_registered += 1;
        tracing::debug!(coflow = %id, name = %reg.options.name, num_flows = reg.num_flows, "registered");
        self.hold(now, id, reg);
        Ok(id)
    }

    /// Keeps coflow `id`, counted for its owner, its lease (if any) counted from `now`.
    fn hold(&mut self, now: Nanos, id: CoflowId, reg: Registration) {
        self.owners.hold(&reg.owner, id);
        debug_assert!(!self.coflows.contains_key(&id), "coflow {id} held twice");
        let lease_until = self.start_lease(now, id, &reg);
        let job = self.job_of(id, &reg);
        self.join_job(job);
        self.coflows.insert(id, CoflowRec { lease_until, ..CoflowRec::new(reg, job, now) });
    }

    /// A framework (`by`: the caller's identity) is done with a coflow: every agent is told to
    /// forget its pieces, and its flows still running end with it. Only its owner or the admin
    /// may.
    pub fn handle_unregister(&mut self, now: Nanos, by: &str, id: CoflowId) -> Result<(), CoordError> {
        self.input(now);
        let c = self.coflows.get(&id).ok_or(CoordError::UnknownCoflow(id))?;
        if !Self::may_change(c, by) {
            return Err(CoordError::NotTheOwner { coflow: id, caller: by.to_string() });
        }
        self.drop_coflow(now, id);
        Ok(())
    }

    /// Removes coflow `id`, unregistered or expired: every agent is told to forget its pieces,
    /// and its flows still running fail `unknown-coflow`, their receivers ending their gets on
    /// the notice. Served on outside the policy, they would go at full speed: a member could
    /// unregister a large coflow as its gets begin and jump every queue.
    fn drop_coflow(&mut self, now: Nanos, id: CoflowId) {
        self.leave_policy(now, id);
        let mut running = Vec::new();
        if let Some(mut c) = self.coflows.remove(&id) {
            if c.flows.is_empty() {
                output::observe_completion(&mut self.observations, &mut self.counters, &mut c);
            }
            output::observe_abandoned(&mut self.counters, &mut c, now);
            if let Some(until) = c.lease_until {
                self.leases.remove(&(until, id));
            }
            if let Some(due) = c.filed {
                self.ready.remove(&(due, id));
            }
            self.owners.release(&c.reg.owner, id, c.puts.len());
            running.extend(c.flows.ids());
            self.leave_job(c.job);
        }
        self.forget(id);
        // An agent that misses this notice is told `unknown-coflow` when it re-announces the
        // pieces, and forgets them then.
        for &m in &self.watching {
            self.outbox.push_back(Transmit::Notice(m, Notice::CoflowDropped(id)));
        }
        if !running.is_empty() {
            tracing::info!(coflow = %id, flows = running.len(), "coflow dropped with flows running; they end with it");
        }
        for fid in running {
            // Listed as the coflow's unfinished flows, so known.
            let _ = self.finish_flow(now, fid, Some(coflow_proto::ErrorKind::UnknownCoflow.as_str()));
        }
    }

    /// The receiving agent (`by`) finished a flow, or gave up on it; or its source gave it up
    /// (its receiver stopped reading). Only the flow's receiver may say it is complete, and only
    /// its two ends that it failed (a source can starve its flow anyway by not sending): a report
    /// from any other machine is refused and changes nothing. The source of a part relayed to its
    /// receiver serves the relay, so its giving up says that the relay stopped reading: the part
    /// is rerouted around the relay (`relay_stalled`), not failed.
    pub fn handle_flow_finished(
        &mut self,
        now: Nanos,
        by: MachineId,
        flow: FlowId,
        outcome: FlowOutcome,
    ) -> Result<(), CoordError> {
        self.input(now);
        match self.flows.get(&flow) {
            None => return Err(CoordError::UnknownFlow(flow)),
            Some(f) if f.dst == by => {}
            Some(f) if f.src == by && matches!(outcome, FlowOutcome::Failed(_)) => {
                if let Some(relay) = f.via {
                    let dst = f.dst;
                    self.relay_stalled(now, flow, relay, dst);
                    return Ok(());
                }
            }
            Some(_) => return Err(CoordError::NotTheReceiver { flow, machine: by }),
        }
        match outcome {
            FlowOutcome::Completed => self.finish_flow(now, flow, None),
            FlowOutcome::Failed(reason) => self.finish_flow(now, flow, Some(&reason)),
        }
    }

    /// An agent joins (again: then what it held is gone). On a wide area it must name one of
    /// the topology's datacenters.
    pub fn handle_register_agent(&mut self, now: Nanos, a: AgentRegistration) -> Result<(), CoordError> {
        self.input(now);
        let dc = match &self.cfg.wide_area {
            None => {
                if !a.datacenter.is_empty() {
                    // Likely a coordinator started without its topology: said, not refused.
                    let dc = &a.datacenter;
                    tracing::warn!(machine = a.machine.0, %dc, "agent names a datacenter; no --topology, so it is ignored");
                }
                None
            }
            Some(wa) => Some(wa.datacenter(&a.datacenter).ok_or_else(|| {
                let known = wa.datacenters.join(", ");
                let reason = if a.datacenter.is_empty() {
                    format!("none named; this coordinator schedules a wide area of {known}")
                } else {
                    format!("{:?} is not one of the wide area's datacenters ({known})", a.datacenter)
                };
                CoordError::Invalid(coflow_proto::ProtoError::Invalid { field: "datacenter", reason })
            })?),
        };
        if self.agent_alive(a.machine) {
            // Registering again means the agent restarted: what it held is gone.
            self.agent_lost(now, a.machine, "agent-restarted");
        }
        tracing::info!(machine = a.machine.0, data_addr = %a.data_addr, "agent registered");
        if dc.is_none() {
            self.ports.join(a.machine, a.port_rate);
        }
        self.agents.insert(
            a.machine,
            AgentRec {
                data_addr: a.data_addr,
                dc,
                port_rate: a.port_rate,
                alive: true,
                departed: false,
                last_seen: now,
                beat: None,
                tx_bps: 0.0,
                rx_bps: 0.0,
                unread: BTreeSet::new(),
            },
        );
        self.mark(Why::Agent);
        Ok(())
    }

    /// Whether a flow from `src` to `dst` crosses nothing the coordinator schedules: one machine,
    /// or on a wide area one datacenter (whose network is never the bottleneck).
    fn is_local(&self, src: MachineId, dst: MachineId) -> bool {
        if src == dst {
            return true;
        }
        match &self.cfg.wide_area {
            None => false,
            Some(_) => {
                let dc = |m: &MachineId| self.agents.get(m).and_then(|a| a.dc);
                dc(&src).is_some() && dc(&src) == dc(&dst)
            }
        }
    }

    /// An agent leaves (it stops cleanly): like a lost agent, at once rather than at its timeout.
    pub fn handle_deregister_agent(&mut self, now: Nanos, machine: MachineId) {
        self.input(now);
        if self.agent_alive(machine) {
            self.agent_lost(now, machine, "agent-departed");
        }
    }

    /// An agent opens its rate stream: from now on its rates and notices are transmitted; the
    /// answer is every rate in force for its outgoing flows, to send at once. It is told again of
    /// the seals of the coflows it holds pieces of, which it may have missed while not watching.
    pub fn handle_watch(&mut self, now: Nanos, machine: MachineId) -> RateBatch {
        self.input(now);
        self.watching.insert(machine);
        for (&id, c) in &self.coflows {
            if c.sealed && c.puts.holds(machine) {
                self.outbox.push_back(Transmit::Notice(machine, Notice::CoflowSealed(id)));
            }
        }
        self.flows
            .iter()
            .filter(|(_, f)| f.src == machine && f.state != FlowState::Held)
            .map(|(&id, f)| (id, f.pushed_rate()))
            .collect()
    }

    /// The agent's rate stream closed: transmit nothing more to it.
    pub fn handle_unwatch(&mut self, machine: MachineId) {
        self.watching.remove(&machine);
    }

    /// The next measurement for the service's histograms, if any, in the order they arose.
    pub fn poll_observation(&mut self) -> Option<Observation> {
        self.observations.pop_front()
    }

    /// What must be sent next, if anything, in the order it arose.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.outbox.pop_front()
    }

    /// An agent stored a piece (or re-announces one it holds, after it registered again); the
    /// answer is the coflow's registration, for the agent to keep. A re-announced piece joins a
    /// coflow the coordinator knows only with that coflow's nonce (it was told of the coflow),
    /// and a coflow it does not know only by adoption ([`Core::set_id_base`]); either way within
    /// `max_pieces_per_coflow`, but not refused for the seal (its piece was there before).
    pub fn handle_put(&mut self, now: Nanos, put: PutAnnouncement) -> Result<Registration, CoordError> {
        self.input(now);
        if !self.agents.get(&put.machine).is_some_and(|a| a.alive) {
            return Err(CoordError::AgentUnavailable(put.machine));
        }
        if put.recovered {
            match self.coflows.get(&put.coflow) {
                Some(c) => {
                    let nonce = put.registration.as_ref().map_or(0, |r| r.nonce);
                    if nonce == 0 || nonce != c.reg.nonce {
                        let msg =
                            format!("a piece re-announced into coflow {} does not carry its registration", put.coflow);
                        return self.refuse(CoordError::NotRecoverable(msg));
                    }
                }
                None => self.adopt(now, put.coflow, put.registration.clone())?,
            }
        }
        let max_pieces = self.cfg.max_pieces_per_coflow;
        let c = self.coflows.get_mut(&put.coflow).ok_or(CoordError::UnknownCoflow(put.coflow))?;
        if !put.recovered && !Self::may_change(c, &put.client) {
            return Err(CoordError::NotTheOwner { coflow: put.coflow, caller: put.client });
        }
        if put.recovered && c.puts.get(&put.data_id) == Some((put.machine, put.size)) {
            let reg = c.reg.clone();
            self.recover_seal(now, put.coflow, put.machine, put.sealed);
            return Ok(reg);
        }
        if c.puts.contains(&put.data_id) {
            return Err(CoordError::DuplicateDataId { coflow: put.coflow, data_id: put.data_id });
        }
        if c.sealed && !put.recovered {
            return Err(CoordError::Sealed(put.coflow));
        }
        if c.puts.len() >= max_pieces {
            let msg = format!("coflow {} has {} pieces (max_pieces_per_coflow)", put.coflow, c.puts.len());
            return Err(CoordError::LimitExceeded(msg));
        }
        self.owners.room_for_piece(&c.reg.owner, self.cfg.max_pieces_per_owner).map_err(CoordError::LimitExceeded)?;
        c.puts.insert(put.data_id, put.machine, put.size);
        self.owners.add_piece(&c.reg.owner);
        let reg = c.reg.clone();
        if put.recovered {
            self.recover_seal(now, put.coflow, put.machine, put.sealed);
        }
        Ok(reg)
    }

    /// Agent `by` dropped a piece whose announcement it gave up waiting for (the answer did not
    /// come within its deadline): forgotten if it was taken from that machine, so that its client
    /// may put it again. Anything else is ignored.
    pub fn handle_withdraw_put(&mut self, now: Nanos, by: MachineId, coflow: CoflowId, data_id: &DataId) {
        self.input(now);
        if let Some(c) = self.coflows.get_mut(&coflow)
            && c.puts.get(data_id).is_some_and(|(at, _)| at == by)
        {
            c.puts.remove(data_id);
            self.owners.forget(&c.reg.owner, 1);
            tracing::info!(%coflow, %data_id, machine = by.0, "a piece its agent gave up announcing is forgotten");
        }
    }

    /// An agent's client wants a piece: the answer is the flow and where to fetch it, at once,
    /// even while the flow is held for its coflow's readiness. On a wide area with multi-path
    /// routing the flow may be split into parts over detours through relays (Siphon §3.3); a
    /// resumed get ends the flow its receiver cut and grants the rest of that flow's bytes afresh.
    pub fn handle_get(&mut self, now: Nanos, get: GetAnnouncement) -> Result<FlowGrant, CoordError> {
        self.input(now);
        let c = self.coflows.get(&get.coflow).ok_or(CoordError::UnknownCoflow(get.coflow))?;
        if !Self::may_change(c, &get.client) {
            return Err(CoordError::NotTheOwner { coflow: get.coflow, caller: get.client });
        }
        let (src, size) = c
            .puts
            .get(&get.data_id)
            .ok_or_else(|| CoordError::NoSuchData { coflow: get.coflow, data_id: get.data_id.clone() })?;
        let src_agent = self.agents.get(&src).filter(|a| a.alive).ok_or(CoordError::AgentUnavailable(src))?;
        let src_data_addr = src_agent.data_addr;
        if !self.agents.get(&get.machine).is_some_and(|a| a.alive) {
            return Err(CoordError::AgentUnavailable(get.machine));
        }
        let Span { start, end, previous, new_get } = self.span(now, &get, size)?;
        // A fresh get goes direct, or waits to be water-filled with its coflow's other gets of the
        // moment; a resumed one follows its plan, or is planned alone (it lost its path).
        let (mut plan, routing) = match get.resume {
            None if self.may_split(src, get.machine, size) => (vec![(0, size, None)], Routing::Pending(now)),
            None => (vec![(0, size, None)], Routing::Direct),
            Some((old, _)) => (self.plan_resume(now, old, src, get.machine, start, end), Routing::Direct),
        };
        if plan.len() > 1 {
            tracing::debug!(coflow = %get.coflow, data_id = %get.data_id, ?plan, "split over detours");
        }
        let owner = self.coflows[&get.coflow].reg.owner.clone();
        let old = get.resume.and_then(|(old, _)| self.flows.get(&old)).map(|f| (f.src, f.dst, f.via));
        match self.plan_fits(&owner, (src, get.machine), &plan, old) {
            Ok(()) => {}
            Err(why) if get.resume.is_none() => return Err(CoordError::LimitExceeded(why)),
            // A resume takes the place of the flow it resumes: past the bound its rest goes
            // direct, which takes no more places than the flow held.
            Err(_) => plan = vec![(start, end - start, None)],
        }
        let mut parts = Vec::with_capacity(plan.len());
        for &(offset, length, via) in &plan {
            let flow = FlowId(self.next_flow);
            self.next_flow += 1;
            // The source serves the part to whoever fetches it from it: the relay, if any. Each
            // ticket names the part's range and the relay's the source it relays from, so that
            // no ticket asks for other bytes or has its agent connect elsewhere.
            let fetcher = via.unwrap_or(get.machine);
            let range = Scope::range(offset, length);
            let ticket = self.tickets.issue(src, flow, get.coflow, get.data_id.as_str(), fetcher, range);
            let src_addr = src_data_addr.to_string();
            let hop = Scope { hop: Some((src, &src_addr)), ..range };
            let relay = via.map(|r| Relay {
                machine: r,
                data_addr: self.agents[&r].data_addr,
                ticket: self.tickets.issue(r, flow, get.coflow, get.data_id.as_str(), get.machine, hop),
            });
            let mut links: Vec<usize> = Vec::new();
            match via {
                None => links.extend(self.link_between(src, get.machine)),
                Some(r) => {
                    links.extend(self.link_between(src, r));
                    links.extend(self.link_between(r, get.machine));
                    self.counters.parts_relayed += 1;
                }
            }
            self.flows.insert(
                flow,
                FlowRec {
                    coflow: get.coflow,
                    data_id: get.data_id.clone(),
                    src,
                    dst: get.machine,
                    size: length,
                    sent: 0,
                    reported_at: None,
                    rate_since: now,
                    moved_before: 0.0,
                    state: FlowState::Held,
                    rate: 0.0,
                    offset,
                    via,
                    links,
                    asked: 0.0,
                    rerouting: false,
                    judged_in: (Nanos::ZERO, 0.0, 0.0),
                    reader: None,
                    routing: routing.clone(),
                },
            );
            self.owners.serve(&owner, flow, owners::served_by(src, get.machine, via));
            if let Routing::Pending(since) = routing {
                self.routing_due.insert((since, flow));
            }
            parts.push(GrantPart { flow, offset, length, ticket, via: relay });
        }
        let c = self.coflows.get_mut(&get.coflow).expect("checked above");
        if new_get && !c.asked_again(get.machine, &get.data_id) {
            c.gets_seen += 1;
            c.width += 1;
        }
        c.first_get.get_or_insert(now);
        c.held.extend(parts.iter().map(|p| p.flow));
        readiness::file(&mut self.ready, get.coflow, c);
        for p in &parts {
            c.flows.insert(p.flow, get.machine, p.length);
        }
        let ready = match c.reg.options.readiness {
            Readiness::OnGet => true,
            Readiness::AllGets { timeout } => c.all_gets_in() || now >= c.first_get.unwrap() + timeout,
        };
        let resumed = match get.resume {
            // The new parts join the coflow where it stands before the cut flow leaves it, so
            // that the coflow keeps its place in the policy; the previous coordinator released
            // the coflow of a flow it granted.
            Some(_) if previous => {
                self.release(now, get.coflow);
                true
            }
            Some((old, _)) => {
                let released = matches!(c.state, CoflowState::Scheduled(Some(_)) | CoflowState::Bypassed);
                if released {
                    self.release(now, get.coflow);
                }
                // A flow split as planned ends as its parts begin; one that lost its path, rerouted.
                let planned = matches!(self.flows.get(&old).map(|f| &f.routing), Some(Routing::Split(_)));
                // A relayed part cut and resumed relayed the bytes before the cut.
                if let Some(f) = self.flows.get(&old).filter(|f| f.via.is_some()) {
                    self.counters.bytes_relayed += start.saturating_sub(f.offset).min(f.size);
                }
                self.finish_flow(now, old, Some(if planned { SPLIT } else { REROUTED }))?;
                true
            }
            None => false,
        };
        if ready && !resumed {
            self.release(now, get.coflow);
        }
        let first = &parts[0];
        // A resume always names its parts, even one that starts at the piece's first byte.
        let whole = get.resume.is_none() && parts.len() == 1 && first.via.is_none();
        Ok(FlowGrant {
            flow: first.flow,
            src,
            src_data_addr,
            size,
            ticket: first.ticket,
            parts: if whole { Vec::new() } else { parts },
            reroutable: self.routes() && self.link_between(src, get.machine).is_some(),
        })
    }

    /// Serves a flow outside the policy, at its sender's port rate: the one place that does,
    /// for bypassed coflows' flows, local flows and every flow under `tcp`.
    fn serve_unscheduled(&mut self, id: FlowId) {
        let Some(f) = self.flows.get_mut(&id) else { return };
        f.asked += f.asked_at_rate(self.now);
        f.state = FlowState::Unscheduled;
        f.rate = self.agents.get(&f.src).map_or(0.0, |a| a.port_rate);
        self.pending.entry(f.src).or_default().insert(id, f.pushed_rate());
    }

    /// Ends a flow: with every byte (`failure` none), or failed for a reason (an error kind).
    fn finish_flow(&mut self, now: Nanos, id: FlowId, failure: Option<&str>) -> Result<(), CoordError> {
        let f = self.flows.remove(&id).ok_or(CoordError::UnknownFlow(id))?;
        self.owners.served(id);
        if let Routing::Pending(since) = f.routing {
            self.routing_due.remove(&(since, id));
        }
        self.resume_due.retain(|&(_, r)| r != id);
        // A relayed part counts its bytes as it ends: all, or as last reported when it fails;
        // one resumed, up to its cut (`handle_get`).
        if f.via.is_some() && !matches!(failure, Some(REROUTED | SPLIT)) {
            self.counters.bytes_relayed += if failure.is_none() { f.size } else { f.sent.min(f.size) };
        }
        match failure {
            None => self.counters.flows_finished += 1,
            Some(REROUTED) => self.counters.flows_rerouted += 1,
            Some(SPLIT) => {}
            Some(reason) => {
                self.counters.flows_failed += 1;
                *self.failed.entry(reason.to_string()).or_default() += 1;
                if reason == "timed-out" {
                    *self.timed_out.entry("data-read").or_default() += 1;
                }
                // A client that hung up on its get ended the flow itself, and a coflow's owner that
                // unregistered it ended its flows: not a warning, which a client could otherwise
                // write once per get it starts and cancels.
                let kind = reason.parse::<coflow_proto::ErrorKind>().ok();
                if matches!(
                    kind,
                    Some(coflow_proto::ErrorKind::ClientDeparted | coflow_proto::ErrorKind::UnknownCoflow)
                ) {
                    tracing::debug!(flow = %id, coflow = %f.coflow, data_id = %f.data_id, reason, "flow failed");
                } else {
                    tracing::warn!(flow = %id, coflow = %f.coflow, data_id = %f.data_id, reason, "flow failed");
                }
            }
        }
        if let Some(p) = self.pending.get_mut(&f.src) {
            p.remove(&id);
        }
        let Some(c) = self.coflows.get_mut(&f.coflow) else { return Ok(()) };
        if failure.is_some_and(|r| r != REROUTED && r != SPLIT) {
            *c.failed_gets.entry((f.dst, f.data_id.clone())).or_default() += 1;
        }
        c.flows.remove(id, f.dst, f.size);
        c.held.retain(|&h| h != id);
        let in_policy = match &mut c.state {
            CoflowState::Scheduled(Some(p)) => p.flows.remove(&id),
            _ => false,
        };
        c.scheduled |= in_policy;
        if failure.is_none() {
            c.last_end = Some(now);
            if c.flows.is_empty() && c.all_gets_in() {
                output::observe_completion(&mut self.observations, &mut self.counters, c);
            }
        }
        if c.flows.is_empty() {
            self.owners.bypass(&c.reg.owner, f.coflow, None);
        }
        readiness::file(&mut self.ready, f.coflow, c);
        let CoflowState::Scheduled(Some(p)) = &c.state else { return Ok(()) };
        if !in_policy {
            return Ok(());
        }
        if p.flows.is_empty() {
            self.leave_policy(now, f.coflow);
        } else if let Some(gap) = self.policy.flow_finish_gap() {
            let due = self.last_decision.saturating_add(gap);
            if now >= due {
                self.mark(Why::FlowsFinished);
            } else {
                self.wake = Some(self.wake.unwrap_or(Nanos::MAX).min(due));
            }
        }
        Ok(())
    }

    fn leave_policy(&mut self, now: Nanos, id: CoflowId) {
        let Some(c) = self.coflows.get_mut(&id) else { return };
        if let CoflowState::Scheduled(in_policy) = &mut c.state
            && let Some(p) = in_policy.take()
        {
            self.active.remove(&(p.arrival, id));
            self.policy.handle_finished(now, id);
            c.judged = false;
            self.mark(Why::Departure);
        }
    }

    /// An agent died or restarted: the pieces it held are gone and its flows fail; the agents
    /// receiving from it are told, so their gets end at once.
    fn agent_lost(&mut self, now: Nanos, m: MachineId, reason: &'static str) {
        if reason == "agent-departed" {
            // It deregistered: a clean stop, not a failure.
            tracing::info!(machine = m.0, reason, "agent left");
        } else {
            tracing::warn!(machine = m.0, reason, "agent lost");
        }
        if let Some(a) = self.agents.get_mut(&m) {
            a.alive = false;
            a.departed = reason == "agent-departed";
        }
        if self.watching.remove(&m) {
            self.outbox.push_back(Transmit::EndWatch(m));
        }
        self.pending.remove(&m);
        for (&id, f) in self.flows.iter().filter(|(_, f)| f.src == m && f.dst != m) {
            if self.watching.contains(&f.dst) {
                self.outbox.push_back(Transmit::Notice(f.dst, Notice::FlowFailed(id)));
            }
            if reason == "agent-timed-out" {
                *self.timed_out.entry("agent-heartbeat").or_default() += 1;
            }
        }
        // Parts relayed through it lose their path, not their source: their receivers resume
        // them over another.
        let relayed: Vec<FlowId> = self
            .flows
            .iter()
            .filter(|(_, f)| f.via == Some(m) && f.src != m && f.dst != m)
            .map(|(&id, _)| id)
            .collect();
        for id in relayed {
            self.reroute(id);
        }
        for c in self.coflows.values_mut() {
            let lost = c.puts.remove_at(m);
            self.owners.forget(&c.reg.owner, lost);
        }
        let dead: Vec<FlowId> =
            self.flows.iter().filter(|(_, f)| f.src == m || f.dst == m).map(|(&id, _)| id).collect();
        for id in dead {
            let _ = self.finish_flow(now, id, Some(reason));
        }
        self.mark(Why::AgentLost);
    }

    /// Runs what is due at `now`: agent timeouts, leases run out, readiness timeouts, a decision,
    /// the push of changed rates (then [`Core::poll_transmit`] has them).
    pub fn handle_timeout(&mut self, now: Nanos) {
        self.clock(now);
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
        self.expire_leases(now);
        self.close_restart_window(now);
        for id in self.ready_by(now) {
            self.release(now, id);
        }
        if let Some(meter) = &mut self.meter
            && now >= meter.period_end()
        {
            let was: Vec<bool> = (0..meter.links()).map(|l| meter.down(l)).collect();
            if meter.tick(now) && !self.active.is_empty() {
                // A link's estimate changed: the rates were made for another bandwidth.
                self.dirty.get_or_insert(Why::Estimate);
            }
            for (l, was) in was.into_iter().enumerate() {
                if meter.down(l) != was {
                    tracing::info!(link = l, down = !was, estimate = meter.capacity(l), "wide-area link");
                }
            }
            // Flows granted over a link since it went down leave it too.
            self.reroute_around_down_links();
        }
        // The ports' periods end at the first run after their end: agents' heartbeats make the
        // core run every heartbeat. The pairs of an agent silent for three of its heartbeats
        // (stopped, its host gone, or dead already) tell nothing of their ports: its flows'
        // shortfalls are its own.
        if self.meter.is_none() && now >= self.ports.period_end() {
            let silent: BTreeSet<MachineId> = self.agents.keys().copied().filter(|&m| self.silent(m, now)).collect();
            self.ports.forget_machines(&silent);
        }
        if self.meter.is_none() && self.ports.tick(now) {
            self.log_ports();
            // A port's estimate changed: the rates were made for another capacity.
            if !self.active.is_empty() {
                self.mark(Why::Estimate);
            }
        }
        let route_due = self.routing_due.first().is_some_and(|&(since, _)| since.saturating_add(GATHER) <= now)
            || self.resume_due.first().is_some_and(|&(since, _)| since.saturating_add(RESUME_WAIT) <= now);
        let why = match self.dirty {
            Some(why) => Some(why),
            None if route_due => Some(Why::Routing),
            None if self.wake.is_some_and(|w| w <= now) => Some(Why::Wake),
            None => None,
        };
        if let Some(why) = why {
            self.decide(now, why);
            // The coflows it rejected are served as best effort by a decision at once.
            if matches!(self.dirty, Some(Why::Rejected)) {
                self.decide(now, Why::Rejected);
            }
        }
        if !self.pending.is_empty() {
            self.pending_since.get_or_insert(now);
        }
        if !self.pending.is_empty() && now >= self.flush_due() {
            self.flush(now);
        }
        self.due = self.poll_timeout().unwrap_or(Nanos::MAX);
    }

    /// When [`Core::handle_timeout`] must run next, if nothing else happens: at once after an
    /// input that calls for a decision, else the earliest of the policy's wake-up, a readiness
    /// timeout, a lease's end, the end of the push window with rates waiting, and an agent's
    /// timeout.
    pub fn poll_timeout(&self) -> Option<Nanos> {
        let mut next = self.wake.unwrap_or(Nanos::MAX);
        if self.dirty.is_some() {
            next = next.min(self.now);
        }
        if let Some(due) = self.next_ready() {
            next = next.min(due);
        }
        if !self.pending.is_empty() {
            next = next.min(self.flush_due());
        }
        if let Some(meter) = &self.meter
            && !self.active.is_empty()
        {
            next = next.min(meter.period_end());
        }
        if let Some(&(since, _)) = self.routing_due.first() {
            next = next.min(since.saturating_add(GATHER));
        }
        if let Some(&(since, _)) = self.resume_due.first() {
            next = next.min(since.saturating_add(RESUME_WAIT));
        }
        if let Some(&(until, _)) = self.leases.first() {
            next = next.min(until.max(self.lease_check));
        }
        // Declared dead once silent for longer than the timeout: one nanosecond after it.
        let timeout = Nanos::from_millis(self.cfg.agent_timeout_ms).saturating_add(Nanos(1));
        for a in self.agents.values().filter(|a| a.alive) {
            next = next.min(a.last_seen.saturating_add(timeout));
        }
        (next < Nanos::MAX).then_some(next)
    }

    fn flush_due(&self) -> Nanos {
        self.last_flush.saturating_add(Nanos::from_millis(self.cfg.push_window_ms))
    }

    fn flush(&mut self, now: Nanos) {
        self.last_flush = now;
        if let Some(since) = self.pending_since.take() {
            self.observations.push_back(Observation::PushDelay(now.saturating_sub(since)));
        }
        for (m, batch) in std::mem::take(&mut self.pending) {
            if batch.is_empty() || !self.watching.contains(&m) {
                continue;
            }
            self.counters.pushes += 1;
            self.counters.rate_changes += batch.len() as u64;
            self.outbox.push_back(Transmit::Rates(m, batch.into_iter().collect()));
        }
    }

    fn fabric(&self) -> Fabric {
        match (self.wan(), &self.meter) {
            (Some(wan), Some(meter)) => {
                let links = wan.links().len();
                let mut fabric = Fabric::new(wan);
                for l in 0..links {
                    fabric.set_capacity(l as u32, meter.capacity(l));
                }
                fabric
            }
            _ => self.big_switch(self.machines()),
        }
    }

    /// Machine ids below this one may have joined.
    fn machines(&self) -> u32 {
        self.agents.keys().next_back().map_or(1, |m| m.0 + 1)
    }
}
