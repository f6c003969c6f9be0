//! Validated domain types for what crosses the control plane, and their conversions.
//!
//! A message from the network becomes a domain value only through [`TryFrom`], which checks
//! sizes and ids and names the offending field; past that edge nothing needs to check again.

use std::fmt;

use coflow_core::{CoflowId, FlowId, MachineId, Nanos};

use crate::pb;

/// The longest data id accepted, in bytes.
pub const MAX_DATA_ID_LEN: usize = 256;
/// The largest piece accepted, in bytes (64 GiB).
pub const MAX_PIECE_SIZE: u64 = 64 << 30;
/// The most parents a coflow may name.
pub const MAX_PARENTS: usize = 1024;
/// The most flows one heartbeat may report.
pub const MAX_HEARTBEAT_FLOWS: usize = 1_000_000;
/// The longest owner identity accepted, in bytes.
pub const MAX_OWNER_LEN: usize = 128;
/// The longest coflow name accepted, in bytes.
pub const MAX_NAME_LEN: usize = 256;
/// The longest coflow kind accepted, in bytes.
pub const MAX_KIND_LEN: usize = 64;
/// The longest deadline accepted, in milliseconds (a year).
pub const MAX_DEADLINE_MS: u64 = 365 * 86_400_000;
/// The longest wait for every get accepted, in milliseconds (a day).
pub const MAX_READY_TIMEOUT_MS: u64 = 86_400_000;
/// The shortest lease accepted, in milliseconds: shorter ones could not be renewed across a
/// network's ordinary hiccups.
pub const MIN_LEASE_MS: u64 = 1_000;
/// The longest lease accepted, in milliseconds (a day).
pub const MAX_LEASE_MS: u64 = 86_400_000;
/// The most coflow ids one renewal may name.
pub const MAX_RENEW_IDS: usize = 4_096;

/// A message from the network is missing a field or has a wrong one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProtoError {
    /// A required field is absent.
    #[error("missing field `{field}`")]
    Missing {
        /// The field's name.
        field: &'static str,
    },
    /// A field's value is out of range or malformed.
    #[error("invalid field `{field}`: {reason}")]
    Invalid {
        /// The field's name.
        field: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// A repeated field holds more entries than its limit.
    #[error("field `{field}` has {count} entries, more than the limit of {max}")]
    TooMany {
        /// The field's name.
        field: &'static str,
        /// How many it holds.
        count: usize,
        /// The most it may hold.
        max: usize,
    },
}

impl ProtoError {
    /// The field the error is about, as the message names it (`options.parents`, `num_flows`).
    pub fn field(&self) -> &'static str {
        match self {
            ProtoError::Missing { field } | ProtoError::Invalid { field, .. } | ProtoError::TooMany { field, .. } => {
                field
            }
        }
    }

    /// The kind a caller is told: `limit-exceeded` for a list over its limit, else `invalid`.
    pub fn kind(&self) -> crate::ErrorKind {
        match self {
            ProtoError::TooMany { .. } => crate::ErrorKind::LimitExceeded,
            _ => crate::ErrorKind::Invalid,
        }
    }
}

/// Refuses a repeated field of `count` entries past `max`.
fn at_most(field: &'static str, count: usize, max: usize) -> Result<(), ProtoError> {
    if count > max { Err(ProtoError::TooMany { field, count, max }) } else { Ok(()) }
}

fn invalid(field: &'static str, reason: impl Into<String>) -> ProtoError {
    ProtoError::Invalid { field, reason: reason.into() }
}

/// The name of one piece of data within a coflow, e.g. `shuffle_3_map_7_reduce_2`.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DataId(String);

impl DataId {
    /// Validates a data id: 1 to [`MAX_DATA_ID_LEN`] bytes, no control characters.
    pub fn new(s: impl Into<String>) -> Result<DataId, ProtoError> {
        let s = s.into();
        if s.is_empty() {
            return Err(invalid("data_id", "empty"));
        }
        if s.len() > MAX_DATA_ID_LEN {
            return Err(invalid("data_id", format!("{} bytes, at most {MAX_DATA_ID_LEN}", s.len())));
        }
        if s.chars().any(char::is_control) {
            return Err(invalid("data_id", "contains a control character"));
        }
        Ok(DataId(s))
    }

    /// The id's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for DataId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for DataId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// How a coflow becomes schedulable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Readiness {
    /// Each get is scheduled as it arrives: never waits, so reducers may run in waves.
    #[default]
    OnGet,
    /// Gets wait until `num_flows` gets were seen or the timeout passed (Varys Pseudocode 3).
    AllGets {
        /// How long to wait for every get.
        timeout: Nanos,
    },
}

/// The options of a coflow at registration.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct CoflowOptions {
    /// A human name: at most [`MAX_NAME_LEN`] bytes, no control characters.
    pub name: String,
    /// Deadline relative to registration.
    pub deadline: Option<Nanos>,
    /// Coflows this one depends on: the simulator releases it once they finished; the coordinator
    /// puts it in the earliest job among those still registered and does not wait for them.
    pub parents: Vec<CoflowId>,
    /// The coflow's type, e.g. `shuffle`: at most [`MAX_KIND_LEN`] bytes, no control characters.
    pub kind: String,
    /// How it becomes schedulable.
    pub readiness: Readiness,
    /// Its weight (1 if not given).
    pub weight: f64,
    /// Its lease: unless renewed within it, the coordinator unregisters it (none: it lives until
    /// unregistered).
    pub lease: Option<Nanos>,
}

/// The default wait of [`Readiness::AllGets`] when the request gives none.
const DEFAULT_READY_TIMEOUT: Nanos = Nanos::from_secs(10);

impl TryFrom<pb::CoflowOptions> for CoflowOptions {
    type Error = ProtoError;

    fn try_from(o: pb::CoflowOptions) -> Result<Self, ProtoError> {
        if o.name.len() > MAX_NAME_LEN {
            return Err(invalid("options.name", format!("longer than {MAX_NAME_LEN} bytes")));
        }
        if o.kind.len() > MAX_KIND_LEN {
            return Err(invalid("options.kind", format!("longer than {MAX_KIND_LEN} bytes")));
        }
        // Names and kinds reach logs, terminals and web pages: like a data id, neither may hold a
        // control character (an escape sequence, a line break that would forge a log line).
        if o.name.chars().any(char::is_control) {
            return Err(invalid("options.name", "contains a control character"));
        }
        if o.kind.chars().any(char::is_control) {
            return Err(invalid("options.kind", "contains a control character"));
        }
        // Refused rather than cut down to the limit: a number is never changed silently.
        if o.deadline_ms > MAX_DEADLINE_MS {
            return Err(invalid("options.deadline_ms", format!("{} is more than a year", o.deadline_ms)));
        }
        if o.ready_timeout_ms > MAX_READY_TIMEOUT_MS {
            return Err(invalid("options.ready_timeout_ms", format!("{} is more than a day", o.ready_timeout_ms)));
        }
        if o.lease_ms != 0 && !(MIN_LEASE_MS..=MAX_LEASE_MS).contains(&o.lease_ms) {
            return Err(invalid(
                "options.lease_ms",
                format!("{} is not 0 (no lease) nor from 1,000 (a second) to 86,400,000 (a day)", o.lease_ms),
            ));
        }
        at_most("options.parents", o.parents.len(), MAX_PARENTS)?;
        let weight = if o.weight == 0.0 { 1.0 } else { o.weight };
        if !(weight.is_finite() && weight > 0.0) {
            return Err(invalid("options.weight", format!("{} is not a positive number", o.weight)));
        }
        let readiness = match pb::Readiness::try_from(o.readiness) {
            Ok(pb::Readiness::Unspecified | pb::Readiness::OnGet) => Readiness::OnGet,
            Ok(pb::Readiness::AllGets) => Readiness::AllGets {
                timeout: if o.ready_timeout_ms == 0 {
                    DEFAULT_READY_TIMEOUT
                } else {
                    Nanos::from_millis(o.ready_timeout_ms)
                },
            },
            Err(_) => return Err(invalid("options.readiness", format!("unknown value {}", o.readiness))),
        };
        Ok(CoflowOptions {
            name: o.name,
            deadline: (o.deadline_ms > 0).then(|| Nanos::from_millis(o.deadline_ms)),
            parents: o.parents.into_iter().map(CoflowId).collect(),
            kind: o.kind,
            readiness,
            weight,
            lease: (o.lease_ms > 0).then(|| Nanos::from_millis(o.lease_ms)),
        })
    }
}

/// Milliseconds on the wire: a time that is not a whole number of them is rounded up (a deadline
/// or a wait never gets shorter on the way), and a deadline of 0 ns, which 0 ms would read as
/// none, becomes 1 ms.
fn wire_millis(t: Nanos) -> u64 {
    t.get().div_ceil(1_000_000).max(1)
}

impl From<&CoflowOptions> for pb::CoflowOptions {
    fn from(o: &CoflowOptions) -> Self {
        let (readiness, ready_timeout_ms) = match o.readiness {
            Readiness::OnGet => (pb::Readiness::OnGet, 0),
            Readiness::AllGets { timeout } => (pb::Readiness::AllGets, wire_millis(timeout)),
        };
        pb::CoflowOptions {
            name: o.name.clone(),
            deadline_ms: o.deadline.map_or(0, wire_millis),
            parents: o.parents.iter().map(|p| p.0).collect(),
            kind: o.kind.clone(),
            readiness: readiness as i32,
            ready_timeout_ms,
            weight: o.weight,
            lease_ms: o.lease.map_or(0, wire_millis),
        }
    }
}

/// A validated `RegisterRequest`.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Registration {
    /// Puts (or, waiting for all gets, gets) the coflow will have.
    pub num_flows: u32,
    /// Its options.
    pub options: CoflowOptions,
    /// The identity that registered it (a client certificate's role URI; empty in token mode,
    /// where every token holder is one identity). The coordinator sets it from the caller.
    pub owner: String,
    /// The number the coordinator drew for the coflow (0 until it did), which a re-announced
    /// piece must carry to be taken into a coflow the coordinator knows.
    pub nonce: u64,
}

/// The identity of the operator, who may use or change any coflow.
pub const ADMIN: &str = "coflow://admin";

impl Registration {
    /// Whether the caller of identity `by` may use (put, get) or change (unregister, seal) the
    /// coflow: its owner, the admin, or anyone when it has no owner (registered in token mode).
    pub fn may_be_used_by(&self, by: &str) -> bool {
        self.owner.is_empty() || self.owner == by || by == ADMIN
    }
}

/// The most `num_flows` a registration may announce.
pub const MAX_NUM_FLOWS: u64 = 10_000_000;

impl TryFrom<pb::RegisterRequest> for Registration {
    type Error = ProtoError;

    fn try_from(r: pb::RegisterRequest) -> Result<Self, ProtoError> {
        if r.num_flows > MAX_NUM_FLOWS {
            return Err(invalid("num_flows", format!("{} is more than 10,000,000", r.num_flows)));
        }
        let owner = identity("owner", r.owner)?;
        let options = r.options.map(CoflowOptions::try_from).transpose()?.unwrap_or_default();
        let options = CoflowOptions { weight: if options.weight == 0.0 { 1.0 } else { options.weight }, ..options };
        Ok(Registration { num_flows: r.num_flows as u32, options, owner, nonce: r.nonce })
    }
}

impl From<&Registration> for pb::RegisterRequest {
    fn from(r: &Registration) -> Self {
        pb::RegisterRequest {
            num_flows: u64::from(r.num_flows),
            options: Some((&r.options).into()),
            owner: r.owner.clone(),
            nonce: r.nonce,
        }
    }
}

/// A validated `RenewRequest`: the coflows whose leases to renew, at most [`MAX_RENEW_IDS`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Renewal {
    /// The coflows, in the request's order.
    pub coflows: Vec<CoflowId>,
}

impl TryFrom<pb::RenewRequest> for Renewal {
    type Error = ProtoError;

    fn try_from(r: pb::RenewRequest) -> Result<Self, ProtoError> {
        at_most("coflow_ids", r.coflow_ids.len(), MAX_RENEW_IDS)?;
        Ok(Renewal { coflows: r.coflow_ids.into_iter().map(CoflowId).collect() })
    }
}

/// An identity as a message names it (an owner, a client): at most `MAX_OWNER_LEN` bytes without
/// control characters.
fn identity(field: &'static str, s: String) -> Result<String, ProtoError> {
    if s.len() > MAX_OWNER_LEN || s.chars().any(char::is_control) {
        return Err(invalid(field, format!("at most {MAX_OWNER_LEN} bytes without control characters")));
    }
    Ok(s)
}

/// A validated `AnnouncePutRequest`: a piece stored at an agent.
#[derive(Clone, Debug, PartialEq)]
pub struct PutAnnouncement {
    /// Its coflow.
    pub coflow: CoflowId,
    /// Its name.
    pub data_id: DataId,
    /// Where it is stored.
    pub machine: MachineId,
    /// Its exact size.
    pub size: u64,
    /// Re-announced after the coordinator restarted.
    pub recovered: bool,
    /// With `recovered`: the coflow's registration as the agent learned it, if it did.
    pub registration: Option<Registration>,
    /// The identity of the agent's client that put it (empty in token mode, and for a piece
    /// re-announced by its agent).
    pub client: String,
    /// With `recovered`: the agent was told the coflow was sealed.
    pub sealed: bool,
}

fn piece_size(field: &'static str, size: u64) -> Result<u64, ProtoError> {
    if size > MAX_PIECE_SIZE {
        return Err(invalid(field, format!("{size} bytes is more than {MAX_PIECE_SIZE}")));
    }
    Ok(size)
}

impl TryFrom<pb::AnnouncePutRequest> for PutAnnouncement {
    type Error = ProtoError;

    fn try_from(r: pb::AnnouncePutRequest) -> Result<Self, ProtoError> {
        Ok(PutAnnouncement {
            coflow: CoflowId(r.coflow_id),
            data_id: DataId::new(r.data_id)?,
            machine: MachineId(r.machine_id),
            size: piece_size("size", r.size)?,
            recovered: r.recovered,
            registration: r.registration.map(Registration::try_from).transpose()?,
            client: identity("client", r.client)?,
            sealed: r.sealed,
        })
    }
}

/// A validated `AnnounceGetRequest`: a machine wants a piece.
#[derive(Clone, Debug, PartialEq)]
pub struct GetAnnouncement {
    /// Its coflow.
    pub coflow: CoflowId,
    /// The piece.
    pub data_id: DataId,
    /// The receiving machine.
    pub machine: MachineId,
    /// The identity of the receiving agent's client that asked (empty in token mode).
    pub client: String,
    /// A get the agent resumes: the flow it cut, and the offset from which the rest is wanted.
    pub resume: Option<(FlowId, u64)>,
    /// With `resume`: where the cut flow's bytes end, if the agent said (see
    /// `AnnounceGetRequest::resume_end`); past `resume`'s offset.
    pub resume_end: Option<u64>,
}

impl TryFrom<pb::AnnounceGetRequest> for GetAnnouncement {
    type Error = ProtoError;

    fn try_from(r: pb::AnnounceGetRequest) -> Result<Self, ProtoError> {
        let resume = match (r.resume_flow_id, r.resume_offset) {
            (0, 0) => None,
            (0, _) => return Err(invalid("resume_offset", "given without resume_flow_id")),
            (f, offset) => Some((FlowId(f), offset)),
        };
        let resume_end = match (resume, r.resume_end) {
            (_, 0) => None,
            (None, _) => return Err(invalid("resume_end", "given without resume_flow_id")),
            (Some((_, at)), end) if end <= at => {
                return Err(invalid("resume_end", format!("{end} is not past resume_offset {at}")));
            }
            (Some(_), end) => Some(end),
        };
        Ok(GetAnnouncement {
            coflow: CoflowId(r.coflow_id),
            data_id: DataId::new(r.data_id)?,
            machine: MachineId(r.machine_id),
            client: identity("client", r.client)?,
            resume,
            resume_end,
        })
    }
}

/// A validated `AnnounceGetRequest` with `recovered_flow_id` set: a receiving agent re-announces
/// a flow it is still fetching, granted by a previous coordinator.
#[derive(Clone, Debug, PartialEq)]
pub struct FlowRecovery {
    /// The flow's id, as the previous coordinator granted it.
    pub flow: FlowId,
    /// Its coflow.
    pub coflow: CoflowId,
    /// The piece.
    pub data_id: DataId,
    /// The sending machine.
    pub src: MachineId,
    /// The receiving machine.
    pub dst: MachineId,
    /// The piece's size.
    pub size: u64,
    /// Bytes received so far.
    pub received: u64,
}

impl FlowRecovery {
    /// The recovery an `AnnounceGetRequest` carries, if any (`recovered_flow_id` nonzero).
    pub fn from_request(r: &pb::AnnounceGetRequest) -> Result<Option<FlowRecovery>, ProtoError> {
        if r.recovered_flow_id == 0 {
            return Ok(None);
        }
        let size = piece_size("recovered_size", r.recovered_size)?;
        if r.recovered_bytes_received > size {
            return Err(invalid("recovered_bytes_received", format!("more than the size {size}")));
        }
        Ok(Some(FlowRecovery {
            flow: FlowId(r.recovered_flow_id),
            coflow: CoflowId(r.coflow_id),
            data_id: DataId::new(r.data_id.clone())?,
            src: MachineId(r.recovered_src_machine_id),
            dst: MachineId(r.machine_id),
            size,
            received: r.recovered_bytes_received,
        }))
    }
}

/// A validated `RegisterAgentRequest`.
#[derive(Clone, Debug, PartialEq)]
pub struct AgentRegistration {
    /// The agent's machine.
    pub machine: MachineId,
    /// Its data listener, `host:port`.
    pub data_addr: std::net::SocketAddr,
    /// Its port capacity, bytes per second.
    pub port_rate: f64,
    /// The datacenter it lives in, as named (empty: none named).
    pub datacenter: String,
}

/// Machine ids are below this.
pub const MACHINE_ID_LIMIT: u32 = 1 << 16;

/// The longest datacenter name accepted, in bytes.
const MAX_DATACENTER_LEN: usize = 256;

/// The lowest port rate an agent registers, in bytes per second (8 kbit/s).
pub const MIN_PORT_RATE_BPS: f64 = 1000.0;

/// The highest port rate an agent registers, in bytes per second (8 Pbit/s, the most a link's
/// bandwidth may be in a topology): far past any NIC, and far below the largest float, near which
/// the times and sums of the policies' arithmetic would overflow.
pub const MAX_PORT_RATE_BPS: f64 = 1e15;

impl TryFrom<pb::RegisterAgentRequest> for AgentRegistration {
    type Error = ProtoError;

    fn try_from(r: pb::RegisterAgentRequest) -> Result<Self, ProtoError> {
        if r.machine_id >= MACHINE_ID_LIMIT {
            return Err(invalid("machine_id", format!("{} is not below {MACHINE_ID_LIMIT}", r.machine_id)));
        }
        let data_addr = r.data_addr.parse().map_err(|e| invalid("data_addr", format!("{:?}: {e}", r.data_addr)))?;
        if !(MIN_PORT_RATE_BPS..=MAX_PORT_RATE_BPS).contains(&r.port_rate_bps) {
            let rate = coflow_core::shown(r.port_rate_bps);
            return Err(invalid("port_rate_bps", format!("{rate} is not 1000 to 1e15 bytes per second")));
        }
        at_most("datacenter", r.datacenter.len(), MAX_DATACENTER_LEN)?;
        if r.datacenter.chars().any(char::is_control) {
            return Err(invalid("datacenter", format!("{:?} holds a control character", r.datacenter)));
        }
        Ok(AgentRegistration {
            machine: MachineId(r.machine_id),
            data_addr,
            port_rate: r.port_rate_bps,
            datacenter: r.datacenter,
        })
    }
}

/// A validated `HeartbeatRequest`.
#[derive(Clone, Debug, PartialEq)]
pub struct Heartbeat {
    /// The reporting agent.
    pub machine: MachineId,
    /// Bytes sent so far by each flow it is sending.
    pub flows: Vec<(FlowId, u64)>,
    /// Measured sending rate since the last report.
    pub tx_bps: f64,
    /// Measured receiving rate since the last report.
    pub rx_bps: f64,
    /// Flows it receives whose client held them back since its previous heartbeat (read them
    /// slower than they came, or not at all).
    pub unread: Vec<FlowId>,
}

impl TryFrom<pb::HeartbeatRequest> for Heartbeat {
    type Error = ProtoError;

    fn try_from(r: pb::HeartbeatRequest) -> Result<Self, ProtoError> {
        for (field, v) in [("tx_bps", r.tx_bps), ("rx_bps", r.rx_bps)] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(invalid(field, format!("{v} is not a rate")));
            }
        }
        at_most("flows", r.flows.len(), MAX_HEARTBEAT_FLOWS)?;
        at_most("unread_flow_ids", r.unread_flow_ids.len(), MAX_HEARTBEAT_FLOWS)?;
        Ok(Heartbeat {
            machine: MachineId(r.machine_id),
            flows: r.flows.into_iter().map(|f| (FlowId(f.flow_id), f.bytes_sent)).collect(),
            tx_bps: r.tx_bps,
            rx_bps: r.rx_bps,
            unread: r.unread_flow_ids.into_iter().map(FlowId).collect(),
        })
    }
}

/// Where the bytes of a put come from.
#[derive(Clone, PartialEq)]
pub enum PutSource {
    /// Bytes in the request.
    Content(Vec<u8>),
    /// A segment of a file under the agent's data directory.
    File {
        /// The path, relative to the data directory.
        path: String,
        /// Where the segment starts.
        offset: u64,
        /// Its length.
        length: u64,
    },
}

impl fmt::Debug for PutSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PutSource::Content(b) => write!(f, "Content({} bytes)", b.len()),
            PutSource::File { path, offset, length } => write!(f, "File({path:?} @{offset} +{length})"),
        }
    }
}

impl TryFrom<pb::put_request::Source> for PutSource {
    type Error = ProtoError;

    fn try_from(s: pb::put_request::Source) -> Result<Self, ProtoError> {
        Ok(match s {
            pb::put_request::Source::Content(b) => PutSource::Content(b),
            pb::put_request::Source::File(f) => {
                if f.path.is_empty() || f.path.len() > 4096 || f.path.contains('\0') {
                    return Err(invalid("file.path", "must be 1 to 4096 bytes without NUL"));
                }
                piece_size("file.length", f.length)?;
                if f.offset.checked_add(f.length).is_none() {
                    return Err(invalid("file.offset", "offset + length overflows"));
                }
                PutSource::File { path: f.path, offset: f.offset, length: f.length }
            }
        })
    }
}

impl From<PutSource> for pb::put_request::Source {
    fn from(s: PutSource) -> Self {
        match s {
            PutSource::Content(b) => pb::put_request::Source::Content(b),
            PutSource::File { path, offset, length } => {
                pb::put_request::Source::File(pb::FileSegment { path, offset, length })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_field() {
        let e = DataId::new("").unwrap_err();
        assert_eq!(e.to_string(), "invalid field `data_id`: empty");
        let e = PutAnnouncement::try_from(pb::AnnouncePutRequest {
            coflow_id: 1,
            data_id: "a".into(),
            machine_id: 0,
            size: u64::MAX,
            recovered: false,
            ..Default::default()
        })
        .unwrap_err();
        assert!(matches!(e, ProtoError::Invalid { field: "size", .. }), "{e}");
        let e = AgentRegistration::try_from(pb::RegisterAgentRequest {
            machine_id: 0,
            data_addr: "nowhere".into(),
            port_rate_bps: 1.0,
            ..Default::default()
        })
        .unwrap_err();
        assert!(matches!(e, ProtoError::Invalid { field: "data_addr", .. }), "{e}");
        // A port rate no agent takes, which the policies would sum and divide by: refused at the
        // registration whoever sends it.
        for rate in [0.0, 999.0, 1.0000001e15, 1e308, f64::INFINITY, f64::NAN] {
            let r = pb::RegisterAgentRequest {
                machine_id: 0,
                data_addr: "127.0.0.1:7071".into(),
                port_rate_bps: rate,
                ..Default::default()
            };
            let e = AgentRegistration::try_from(r).unwrap_err();
            assert!(matches!(e, ProtoError::Invalid { field: "port_rate_bps", .. }), "{rate}: {e}");
        }
        for rate in [MIN_PORT_RATE_BPS, MAX_PORT_RATE_BPS] {
            let r = pb::RegisterAgentRequest {
                data_addr: "127.0.0.1:7071".into(),
                port_rate_bps: rate,
                ..Default::default()
            };
            assert!(AgentRegistration::try_from(r).is_ok(), "{rate}");
        }
        let e = CoflowOptions::try_from(pb::CoflowOptions { weight: -1.0, ..Default::default() }).unwrap_err();
        assert!(matches!(e, ProtoError::Invalid { field: "options.weight", .. }), "{e}");
    }

    /// A number past its range is refused, not truncated: `num_flows` of 2^32 + 3 would be 3 as
    /// a 32-bit field.
    #[test]
    fn a_num_flows_past_its_range_is_refused_not_truncated() {
        for n in [(1u64 << 32) + 3, MAX_NUM_FLOWS + 1, u64::MAX] {
            let e = Registration::try_from(pb::RegisterRequest { num_flows: n, ..Default::default() }).unwrap_err();
            assert!(matches!(e, ProtoError::Invalid { field: "num_flows", .. }), "{n}: {e}");
            assert_eq!(e.kind(), crate::ErrorKind::Invalid);
        }
        let r = Registration::try_from(pb::RegisterRequest { num_flows: MAX_NUM_FLOWS, ..Default::default() }).unwrap();
        assert_eq!(u64::from(r.num_flows), MAX_NUM_FLOWS);
    }

    /// Lists past their limit are `limit-exceeded`, at the limit they pass.
    #[test]
    fn lists_past_their_limit_are_limit_exceeded() {
        let opts = |n: usize| pb::CoflowOptions { parents: vec![7; n], ..Default::default() };
        assert_eq!(CoflowOptions::try_from(opts(MAX_PARENTS)).unwrap().parents.len(), MAX_PARENTS);
        let e = CoflowOptions::try_from(opts(MAX_PARENTS + 1)).unwrap_err();
        assert_eq!(e, ProtoError::TooMany { field: "options.parents", count: MAX_PARENTS + 1, max: MAX_PARENTS });
        assert_eq!(e.kind(), crate::ErrorKind::LimitExceeded);
        let hb = pb::HeartbeatRequest {
            flows: vec![pb::FlowProgress::default(); MAX_HEARTBEAT_FLOWS + 1],
            ..Default::default()
        };
        assert_eq!(Heartbeat::try_from(hb).unwrap_err().kind(), crate::ErrorKind::LimitExceeded);
    }

    /// A name or kind with a control character (an escape sequence that would drive a terminal, a
    /// line break that would forge a log line) is refused naming its field, as a data id is.
    #[test]
    fn a_name_or_kind_with_a_control_character_is_refused() {
        for bad in ["\u{1b}[2Jq1", "q1\nINFO forged", "q\u{7}", "\u{0}", "q\u{9b}1"] {
            let e = CoflowOptions::try_from(pb::CoflowOptions { name: bad.into(), ..Default::default() }).unwrap_err();
            assert!(matches!(e, ProtoError::Invalid { field: "options.name", .. }), "{bad:?}: {e}");
            assert_eq!(e.kind(), crate::ErrorKind::Invalid);
            let e = CoflowOptions::try_from(pb::CoflowOptions { kind: bad.into(), ..Default::default() }).unwrap_err();
            assert!(matches!(e, ProtoError::Invalid { field: "options.kind", .. }), "{bad:?}: {e}");
        }
        // Text beyond ASCII is a name like any other.
        let o = CoflowOptions::try_from(pb::CoflowOptions {
            name: "requête \u{202e}1".into(),
            kind: "mélange".into(),
            ..Default::default()
        })
        .unwrap();
        assert_eq!((o.name.as_str(), o.kind.as_str()), ("requête \u{202e}1", "mélange"));
    }

    #[test]
    fn options_round_trip() {
        let o = CoflowOptions {
            name: "q1".into(),
            deadline: Some(Nanos::from_millis(1500)),
            parents: vec![CoflowId(3)],
            kind: "shuffle".into(),
            readiness: Readiness::AllGets { timeout: Nanos::from_millis(250) },
            weight: 2.0,
            lease: Some(Nanos::from_secs(90)),
        };
        assert_eq!(CoflowOptions::try_from(pb::CoflowOptions::from(&o)).unwrap(), o);
    }

    /// A lease is 0 (none) or from a second to a day; anything else names the field, and a
    /// renewal names at most 4,096 coflows.
    #[test]
    fn a_lease_is_none_or_from_a_second_to_a_day() {
        let lease = |ms: u64| CoflowOptions::try_from(pb::CoflowOptions { lease_ms: ms, ..Default::default() });
        assert_eq!(lease(0).unwrap().lease, None);
        assert_eq!(lease(MIN_LEASE_MS).unwrap().lease, Some(Nanos::from_secs(1)));
        assert_eq!(lease(MAX_LEASE_MS).unwrap().lease, Some(Nanos::from_secs(86_400)));
        for ms in [1, MIN_LEASE_MS - 1, MAX_LEASE_MS + 1, u64::MAX] {
            let e = lease(ms).unwrap_err();
            assert!(matches!(e, ProtoError::Invalid { field: "options.lease_ms", .. }), "{ms}: {e}");
        }
        let renew = |n: usize| Renewal::try_from(pb::RenewRequest { coflow_ids: vec![9; n] });
        assert_eq!(renew(MAX_RENEW_IDS).unwrap().coflows.len(), MAX_RENEW_IDS);
        assert_eq!(renew(MAX_RENEW_IDS + 1).unwrap_err().kind(), crate::ErrorKind::LimitExceeded);
    }
}
