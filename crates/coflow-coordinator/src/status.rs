//! The live view's types: what `coflow status`, the web page and `/api/status` show of coflows,
//! their flows and agents. The core fills them (`Core::status`, in `views`).

use ::core::net::SocketAddr;

use coflow_core::{CoflowId, FlowId, MachineId, Nanos};

/// A snapshot of live state, for `coflow status`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StatusView {
    /// The policy.
    pub policy: String,
    /// Live coflows by id.
    pub coflows: Vec<CoflowView>,
    /// Known agents.
    pub agents: Vec<AgentView>,
    /// On a wide area, its links as measured.
    pub links: Vec<LinkView>,
    /// Bytes of get parts relayed through a third datacenter, since the start.
    pub bytes_relayed: u64,
    /// Flows whose rest was resumed over another path, since the start.
    pub flows_rerouted: u64,
    /// Policy decisions, since the start.
    pub decisions: u64,
}

/// A wide-area link as the coordinator measured it.
#[derive(Clone, Debug, PartialEq)]
pub struct LinkView {
    /// `from->to`, by datacenter names.
    pub name: String,
    /// Its bandwidth now as far as the coordinator knows, bytes per second.
    pub estimate: f64,
    /// Samples of its bandwidth in the measurement window.
    pub samples: usize,
    /// Its last measured period found it down.
    pub down: bool,
}

/// One page of [`StatusView`]: coflows after an id, within a budget.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StatusPage {
    /// The page: the policy, its coflows with their flows, and on the first page the agents.
    pub view: StatusView,
    /// The last coflow of the page, when more follow.
    pub next: Option<CoflowId>,
    /// Flows of the page's coflows left out for the budget.
    pub flows_omitted: u64,
}

/// What one status page may hold, in estimated encoded bytes: well under gRPC's 4 MB limit.
pub const STATUS_PAGE_BYTES: usize = 2 << 20;

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
    /// Whether it is served outside the policy (bypassed for being small).
    pub bypass: bool,
    /// Bytes of the pieces put.
    pub bytes: u64,
    /// How long since its first get (its arrival, from which its CCT counts), if it had one.
    pub age: Option<Nanos>,
    /// Its deadline, counted from its registration, if it has one.
    pub deadline: Option<Nanos>,
    /// Under a policy with admission control, what it made of the deadline.
    pub admission: Option<Admission>,
    /// With a lease, how long until it runs out unless renewed.
    pub lease_left: Option<Nanos>,
    /// Its job, which job-aware policies rank it with: its own id unless it joined a parent's.
    pub job: CoflowId,
    /// Its unfinished flows: id, data id, source, destination, size, bytes sent, rate.
    pub flows: Vec<FlowView>,
}

/// What a policy's admission control made of a coflow's deadline.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Admission {
    /// Not judged yet: the coflow was not decided for since it registered.
    #[default]
    Pending,
    /// Admitted: guaranteed the rates that meet its deadline.
    Admitted,
    /// Rejected, at its first judgement or, admitted, when it asked for more flows: served as
    /// best effort, below every guarantee.
    Rejected,
}

impl Admission {
    /// Its name in `coflow status`, the web page and the Python package.
    pub fn name(self) -> &'static str {
        match self {
            Admission::Pending => "pending",
            Admission::Admitted => "admitted",
            Admission::Rejected => "rejected",
        }
    }
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
    /// The relay it goes through, on a wide area with multi-path routing.
    pub via: Option<MachineId>,
    /// Size.
    pub size: u64,
    /// Bytes sent as last reported.
    pub sent: u64,
    /// Assigned rate, bytes per second.
    pub rate: f64,
    /// Its receiver reports its client holding it back (reading slower than it comes, or not
    /// at all).
    pub reader_limited: bool,
}

/// One agent.
#[derive(Clone, Debug, PartialEq)]
pub struct AgentView {
    /// Its machine.
    pub machine: MachineId,
    /// Its datacenter, on a wide area.
    pub datacenter: Option<String>,
    /// Its data listener.
    pub data_addr: SocketAddr,
    /// Whether it is alive.
    pub alive: bool,
    /// Not alive, whether it left at a clean stop (it deregistered) rather than being lost.
    pub departed: bool,
    /// Its last reported sending rate.
    pub tx_bps: f64,
    /// Its last reported receiving rate.
    pub rx_bps: f64,
    /// Its port's capacity, bytes per second, as it registered it.
    pub port_rate: f64,
    /// On a big switch, its uplink's and downlink's capacity as the coordinator measured them,
    /// bytes per second: `port_rate` until a port was measured to carry less (on a wide area,
    /// always `port_rate`).
    pub uplink_bps: f64,
    /// See `uplink_bps`.
    pub downlink_bps: f64,
    /// How long since it was last heard from.
    pub silent: Nanos,
}
