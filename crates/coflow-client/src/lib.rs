//! The Rust SDK of the coflow API.
//!
//! A framework registers a coflow with the coordinator, puts each piece of data at the agent
//! on the machine that produced it, and gets pieces through the agent on the machine that needs
//! them; the agents move the bytes at the rates the coordinator assigns.
//!
//! ```no_run
//! # async fn demo() -> Result<(), coflow_client::ClientError> {
//! use coflow_client::{Client, ClientConfig, ClusterToken, CoflowOptions};
//!
//! let token = ClusterToken::new("s3cret").expect("a valid token");
//! let mapper = Client::connect(ClientConfig::new("http://127.0.0.1:7070", "http://127.0.0.1:7071", token.clone())).await?;
//! let reducer = Client::connect(ClientConfig::new("http://127.0.0.1:7070", "http://127.0.0.1:7081", token)).await?;
//! let shuffle = mapper.register(1, CoflowOptions::default()).await?;
//! mapper.put(shuffle, "map0-reduce0", b"hello".to_vec()).await?;
//! let bytes = reducer.get(shuffle, "map0-reduce0").await?;
//! assert_eq!(bytes, b"hello");
//! mapper.unregister(shuffle).await?;
//! # Ok(())
//! # }
//! ```
//!
//! A framework whose process may die without unregistering gives its coflows a lease
//! ([`CoflowOptions::lease`]) and renews it ([`Client::renew`]) about every third of it: the
//! coordinator unregisters a coflow whose lease runs out, so a dead framework's coflows stop
//! holding their places and pieces a lease after its last renewal.
//!
//! Errors are typed ([`ClientError`]) so that a framework can map them to its own retry: for
//! Spark, [`ClientError::NoSuchData`], [`ClientError::DataLost`] and a get's
//! [`ClientError::AgentUnreachable`] are fetch failures (the map output is to blame), while
//! [`ClientError::CoordinatorUnreachable`] is not.
//!
//! Every get ends: with exactly the bytes put, or with a typed error. A streaming get
//! ([`Client::get_with`]) hands the sink only bytes the receiving agent verified block by block
//! against the checksums fixed at put; if the stream then ends in an error, the sink holds a
//! verified prefix and the call returns the error, so the caller must discard what it got.
//!
//! In a TLS cluster, give the client its certificate (issued by `coflow certs issue DIR --client
//! NAME`) and use `https://` URLs:
//!
//! ```no_run
//! # async fn demo() -> Result<(), coflow_client::ClientError> {
//! use coflow_client::{Client, ClientConfig, TlsFiles};
//!
//! let files = TlsFiles { ca: "certs/ca.crt".into(), cert: "certs/client-spark.crt".into(), key: "certs/client-spark.key".into() };
//! let cfg = ClientConfig::tls("https://127.0.0.1:7070", "https://127.0.0.1:7071", files);
//! let client = Client::connect(cfg).await?;
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]

use std::sync::Arc;
use std::time::Duration;

use coflow_proto::pb;
use coflow_proto::pb::agent_client::AgentClient;
use coflow_proto::pb::coordinator_client::CoordinatorClient;
use coflow_proto::{DataId, Security, TlsContext, TokenAttach};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};

pub use coflow_core::{CoflowId, FlowId, MachineId, Nanos};
pub use coflow_proto::{
    ClusterToken, CoflowOptions, ErrorKind, MAX_DEADLINE_MS, MAX_KIND_LEN, MAX_LEASE_MS, MAX_NAME_LEN, MAX_NUM_FLOWS,
    MAX_PARENTS, MAX_PIECE_SIZE, MAX_READY_TIMEOUT_MS, MIN_LEASE_MS, Readiness, TlsFiles,
};

/// What can go wrong, typed so that frameworks can retry.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ClientError {
    /// The coordinator knows no such coflow.
    #[error("unknown coflow {0}")]
    UnknownCoflow(CoflowId),
    /// A piece of this name was already put for the coflow.
    #[error("duplicate data id {data_id:?} in coflow {coflow}")]
    DuplicateDataId {
        /// The coflow.
        coflow: CoflowId,
        /// The name.
        data_id: String,
    },
    /// No piece of this name was put for the coflow, or its agent is gone.
    #[error("no data id {data_id:?} in coflow {coflow}")]
    NoSuchData {
        /// The coflow.
        coflow: CoflowId,
        /// The name.
        data_id: String,
    },
    /// The coflow was sealed: it takes no more puts.
    #[error("coflow {0} is sealed")]
    Sealed(CoflowId),
    /// An agent (this client's own, named by its URL, or the piece's source) cannot be reached,
    /// or is stopping.
    #[error("agent unreachable: {0}")]
    AgentUnreachable(String),
    /// The coordinator cannot be reached, from this client or from its local agent, or is
    /// stopping: retry; no piece's source is to blame.
    #[error("coordinator unreachable: {0}")]
    CoordinatorUnreachable(String),
    /// The call took longer than the configured timeout.
    #[error("timed out after {0:?}")]
    TimedOut(Duration),
    /// This client read nothing of a get's stream for the agent's data idle timeout (or hung
    /// up): the agent ended the get. No source is to blame; a get asked again starts afresh.
    #[error("the get ended for want of a reader: {0}")]
    ClientDeparted(String),
    /// The coordinator no longer knows a flow of the get: it failed the flow while the
    /// receiving agent was away (frozen or cut off past the coordinator's agent timeout, so
    /// declared dead), and the agent's resume of its rest was refused. No byte was handed on
    /// twice; a get asked again starts afresh.
    #[error("unknown flow: {0}")]
    UnknownFlow(String),
    /// This client's identity was refused (the cluster token, or its certificate), or this
    /// client refused the service's certificate (a host name it does not name, another CA):
    /// asking again does not mend it.
    #[error("refused: {0}")]
    Unauthenticated(String),
    /// The caller's role may not make this call (e.g. a client certificate registering an
    /// agent, or an agent call for a machine under another session).
    #[error("permission denied: {0}")]
    PermissionDenied(String),
    /// The bytes did not arrive intact (checksum or size).
    #[error("data corrupted: {0}")]
    Corrupted(String),
    /// The source's stored copy of the piece was changed, truncated, removed or cannot be read
    /// since its put: it can never come from that source, so recompute it (a framework's fetch
    /// failure). Bytes already handed to a [`Client::get_with`] sink were verified.
    #[error("data lost: {0}")]
    DataLost(String),
    /// A configured limit of the cluster was reached (coflows, pieces per coflow, bytes stored
    /// at an agent, data connections at an agent); the message names it.
    #[error("limit exceeded: {0}")]
    LimitExceeded(String),
    /// A request was invalid; the message names the field.
    #[error("invalid request: {0}")]
    Invalid(String),
    /// Anything else the services said.
    #[error("{0}")]
    Other(String),
}

/// Which service a call went to: what a connection that broke under it could not reach.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Service {
    Coordinator,
    Agent,
}

impl ClientError {
    /// The error of a call to the coordinator that ended in `s`.
    #[cfg(test)]
    fn from_coordinator(s: tonic::Status, coflow: CoflowId) -> ClientError {
        ClientError::from_status(s, Service::Coordinator, "", coflow, "")
    }

    /// The error of a call to the local agent, about piece `data_id`, that ended in `s`.
    #[cfg(test)]
    fn from_agent(s: tonic::Status, coflow: CoflowId, data_id: &str) -> ClientError {
        ClientError::from_status(s, Service::Agent, "", coflow, data_id)
    }

    /// The error of a call to service `to` at URL `at` that ended in `s`: a service that could
    /// not be reached, or that is stopping, is named by its URL, with the deepest cause the
    /// transport gave (`Connection refused`, a keep-alive that timed out).
    fn from_status(s: tonic::Status, to: Service, at: &str, coflow: CoflowId, data_id: &str) -> ClientError {
        use coflow_proto::ErrorKind as K;
        let msg = s.message().to_string();
        let unreachable = |msg: String| {
            let mut cause = std::error::Error::source(&s);
            let mut deepest = None;
            while let Some(c) = cause {
                deepest = Some(c.to_string());
                cause = c.source();
            }
            let msg = match deepest {
                Some(d) if !msg.contains(&d) => format!("{msg}: {d}"),
                _ => msg,
            };
            match (to, at.is_empty()) {
                (Service::Coordinator, true) => ClientError::CoordinatorUnreachable(msg),
                (Service::Coordinator, false) => ClientError::CoordinatorUnreachable(format!("{at}: {msg}")),
                (Service::Agent, true) => ClientError::AgentUnreachable(msg),
                (Service::Agent, false) => ClientError::AgentUnreachable(format!("this client's agent at {at}: {msg}")),
            }
        };
        // The service's TLS alert says why it closed the connection: this member's certificate.
        if let Some(alert) = std::error::Error::source(&s).and_then(coflow_proto::certificate_refused) {
            return ClientError::Unauthenticated(format!(
                "the service refused this client's certificate (TLS alert {alert:?}): {}",
                coflow_proto::client_certificate_question(alert)
            ));
        }
        // This client refused the service's certificate: no retry mends that.
        if let Some(why) = std::error::Error::source(&s).and_then(coflow_proto::service_certificate_refused) {
            let named = if at.is_empty() { String::new() } else { format!("{at}: ") };
            return ClientError::Unauthenticated(format!("{named}{why}"));
        }
        let e = match (K::of(&s), s.code()) {
            (Some(K::UnknownCoflow), _) => ClientError::UnknownCoflow(coflow),
            (Some(K::DuplicateDataId), _) => ClientError::DuplicateDataId { coflow, data_id: data_id.to_string() },
            (Some(K::Sealed), _) => ClientError::Sealed(coflow),
            (Some(K::NoSuchData), _) => ClientError::NoSuchData { coflow, data_id: data_id.to_string() },
            (Some(K::DataLost), _) => ClientError::DataLost(msg),
            (Some(K::LimitExceeded), _) | (_, tonic::Code::ResourceExhausted) => ClientError::LimitExceeded(msg),
            (Some(K::CoordinatorUnreachable), _) => ClientError::CoordinatorUnreachable(msg),
            (Some(K::AgentUnreachable), _) => ClientError::AgentUnreachable(msg),
            (Some(K::ClientDeparted), _) => ClientError::ClientDeparted(msg),
            (Some(K::UnknownFlow), _) => ClientError::UnknownFlow(msg),
            (Some(K::ShuttingDown), _) | (_, tonic::Code::Unavailable) => unreachable(msg),
            (Some(K::Corrupted), _) | (_, tonic::Code::DataLoss) => ClientError::Corrupted(msg),
            (Some(K::PermissionDenied), _) => ClientError::PermissionDenied(msg),
            (Some(K::Unauthenticated | K::Refused), _)
            | (_, tonic::Code::Unauthenticated | tonic::Code::PermissionDenied) => ClientError::Unauthenticated(msg),
            (Some(K::Invalid), _) | (_, tonic::Code::InvalidArgument) => ClientError::Invalid(msg),
            (Some(K::TimedOut), _) | (_, tonic::Code::DeadlineExceeded) => ClientError::TimedOut(Duration::ZERO),
            // A service that does not serve the call: the coordinator's URL and the agent's swapped.
            (None, tonic::Code::Unimplemented) => ClientError::Invalid(format!(
                "the service does not serve this call: are the coordinator's and the agent's URLs the right way \
                 round, and are the client and the service of one version? ({msg})"
            )),
            // No kind and a local cause: the connection broke (the agent's process died
            // mid-stream, say, or the service spoke another HTTP/2 than this client's: a TLS
            // service hearing plaintext), which the services' own answers never are.
            (None, tonic::Code::Unknown | tonic::Code::Internal) if std::error::Error::source(&s).is_some() => {
                unreachable(msg)
            }
            // The connection closed under the call, without an answer: a service gone, or one
            // of the other security mode ([`mode_hint`] says which may be the case).
            (None, tonic::Code::Cancelled) if std::error::Error::source(&s).is_some() => {
                unreachable(format!("the connection closed before an answer ({msg})"))
            }
            _ => ClientError::Other(format!("{:?}: {msg}", s.code())),
        };
        e.without_repeated_prefix()
    }

    /// The error with `hint` said after it, if it tells why a service could not be reached.
    fn with_hint(self, hint: Option<&str>) -> ClientError {
        match (self, hint) {
            (ClientError::CoordinatorUnreachable(m), Some(h)) => {
                ClientError::CoordinatorUnreachable(format!("{m} ({h})"))
            }
            (ClientError::AgentUnreachable(m), Some(h)) => ClientError::AgentUnreachable(format!("{m} ({h})")),
            (e, _) => e,
        }
    }

    /// The error without its kind said twice: a service's message often opens with the words
    /// this error's display opens with too (`permission denied: permission denied: …`).
    fn without_repeated_prefix(self) -> ClientError {
        let strip =
            |m: String, prefix: &str| if let Some(rest) = m.strip_prefix(prefix) { rest.to_string() } else { m };
        match self {
            ClientError::AgentUnreachable(m) => {
                ClientError::AgentUnreachable(strip(strip(m, "agent unreachable: "), "unreachable: "))
            }
            ClientError::CoordinatorUnreachable(m) => {
                ClientError::CoordinatorUnreachable(strip(m, "coordinator unreachable: "))
            }
            ClientError::Unauthenticated(m) => ClientError::Unauthenticated(strip(m, "refused: ")),
            ClientError::PermissionDenied(m) => ClientError::PermissionDenied(strip(m, "permission denied: ")),
            ClientError::Corrupted(m) => ClientError::Corrupted(strip(m, "data corrupted: ")),
            ClientError::DataLost(m) => ClientError::DataLost(strip(m, "data lost: ")),
            ClientError::LimitExceeded(m) => ClientError::LimitExceeded(strip(m, "limit exceeded: ")),
            ClientError::Invalid(m) => ClientError::Invalid(strip(m, "invalid request: ")),
            ClientError::UnknownFlow(m) => ClientError::UnknownFlow(strip(m, "unknown flow: ")),
            other => other,
        }
    }

    /// The kind the services would name this error by; none for [`ClientError::Other`].
    pub fn kind(&self) -> Option<coflow_proto::ErrorKind> {
        use coflow_proto::ErrorKind as K;
        Some(match self {
            ClientError::UnknownCoflow(_) => K::UnknownCoflow,
            ClientError::DuplicateDataId { .. } => K::DuplicateDataId,
            ClientError::NoSuchData { .. } => K::NoSuchData,
            ClientError::Sealed(_) => K::Sealed,
            ClientError::AgentUnreachable(_) => K::AgentUnreachable,
            ClientError::CoordinatorUnreachable(_) => K::CoordinatorUnreachable,
            ClientError::TimedOut(_) => K::TimedOut,
            ClientError::ClientDeparted(_) => K::ClientDeparted,
            ClientError::UnknownFlow(_) => K::UnknownFlow,
            ClientError::Unauthenticated(_) => K::Unauthenticated,
            ClientError::Corrupted(_) => K::Corrupted,
            ClientError::DataLost(_) => K::DataLost,
            ClientError::LimitExceeded(_) => K::LimitExceeded,
            ClientError::PermissionDenied(_) => K::PermissionDenied,
            ClientError::Invalid(_) => K::Invalid,
            ClientError::Other(_) => return None,
        })
    }
}

/// Where the services are and how to reach them.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// The coordinator's URL, e.g. `http://127.0.0.1:7070`.
    pub coordinator: String,
    /// The local agent's URL, e.g. `http://127.0.0.1:7071` (`https://` with TLS).
    pub agent: String,
    /// The cluster token (token mode); not needed with TLS.
    pub token: Option<ClusterToken>,
    /// The client's TLS files (CA, certificate, key): with them every connection is mutual TLS
    /// and the URLs are `https://`.
    pub tls: Option<TlsFiles>,
    /// Timeout of control calls (register, put announcements); gets have none, as they last as
    /// long as the schedule says. Default 30 s.
    pub timeout: Duration,
}

impl ClientConfig {
    /// A token-mode config with the default timeout.
    pub fn new(coordinator: impl Into<String>, agent: impl Into<String>, token: ClusterToken) -> ClientConfig {
        ClientConfig {
            coordinator: coordinator.into(),
            agent: agent.into(),
            token: Some(token),
            tls: None,
            timeout: Duration::from_secs(30),
        }
    }

    /// A TLS config (no token) with the default timeout; the URLs are `https://`.
    pub fn tls(coordinator: impl Into<String>, agent: impl Into<String>, files: TlsFiles) -> ClientConfig {
        ClientConfig {
            coordinator: coordinator.into(),
            agent: agent.into(),
            token: None,
            tls: Some(files),
            timeout: Duration::from_secs(30),
        }
    }

    /// The same config over TLS with these files (the token, if any, is then not sent).
    pub fn with_tls(mut self, files: TlsFiles) -> ClientConfig {
        self.tls = Some(files);
        self
    }

    /// The first of the coordinator's and the agent's URL that [`Client::connect`] cannot take,
    /// named by its field (`coordinator` or `agent`), and why; `None` if it takes both. Reads no
    /// file, so a caller can name the argument at fault before it connects.
    pub fn url_error(&self) -> Option<(&'static str, String)> {
        let tls = self.tls.is_some();
        [("coordinator", &self.coordinator), ("agent", &self.agent)]
            .into_iter()
            .find_map(|(field, url)| coflow_proto::endpoint_url(url, tls).err().map(|e| (field, e)))
    }

    /// How the client authenticates: loads and checks the TLS files if any.
    fn security(&self) -> Result<Security, ClientError> {
        match (&self.tls, &self.token) {
            (Some(files), _) => {
                let tls = TlsContext::load(files).map_err(|e| ClientError::Invalid(e.to_string()))?;
                // The coordinator's certificate is a server's only: every service would refuse it
                // at the handshake of the first call, where the refusal may read as the connection
                // closing. Refused here instead. (An agent's may read the status; the services
                // refuse it the coflow API themselves.)
                if let role @ coflow_proto::Role::Coordinator = tls.role() {
                    return Err(ClientError::Invalid(format!(
                        "tls: {} is the certificate of {role}, a server's only; a client needs a client's or \
                         an admin's (`coflow certs issue DIR --client NAME` or `--admin`)",
                        files.cert.display()
                    )));
                }
                Ok(Security::Tls(tls))
            }
            (None, Some(t)) => Ok(Security::Token(t.clone())),
            (None, None) => Err(ClientError::Invalid("neither a cluster token nor TLS files".into())),
        }
    }
}

type Coord = CoordinatorClient<InterceptedService<Channel, TokenAttach>>;
type Agent = AgentClient<InterceptedService<Channel, TokenAttach>>;

/// A handle on the cluster, cheap to clone.
#[derive(Clone, Debug)]
pub struct Client {
    coord: Coord,
    agent: Agent,
    timeout: Duration,
    /// The services' URLs, which errors that could not reach them name.
    coord_at: Arc<str>,
    agent_at: Arc<str>,
    /// Whether this client speaks TLS, which an error that may come of a service that does not
    /// says.
    tls: bool,
}

/// What to say of a call that ended in `s` (made with TLS or not, as `tls` says) if the
/// connection broke as it does under a service of the other security mode, what that mode
/// takes: said as a condition, since a service that stops mid-call breaks a connection in the
/// same way. A TLS service drops a plaintext HTTP/2 connection (a broken pipe, an HTTP/2
/// protocol error, or the connection closed before an answer), and a plaintext service resets
/// a TLS handshake. A service that refused the connection or did not answer in time is not of
/// that kind. Over TLS, a connection closed before an answer may also be a service that refused
/// this client's certificate once the handshake was over (TLS 1.3), whose alert the call did
/// not hear.
fn mode_hint(s: &tonic::Status, tls: bool) -> Option<&'static str> {
    use std::io::ErrorKind as Io;
    if coflow_proto::ErrorKind::of(s).is_some() {
        return None;
    }
    let mut cause = std::error::Error::source(s);
    let closed = s.code() == tonic::Code::Cancelled && cause.is_some();
    if closed && tls {
        return Some("with TLS, the service may have refused this client's certificate");
    }
    let mut broken = closed || (s.code() == tonic::Code::Internal && cause.is_some());
    while let Some(c) = cause {
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            match io.kind() {
                Io::BrokenPipe | Io::ConnectionReset | Io::UnexpectedEof => broken = true,
                _ => return None,
            }
        }
        cause = c.source();
    }
    broken.then_some(if tls {
        "if the service runs without TLS, it takes the cluster token and an http:// URL"
    } else {
        "if the service uses TLS, it takes the cluster CA, a certificate and its key, and an https:// URL"
    })
}

/// While a call is in flight the client pings its service this often over HTTP/2 and gives the
/// connection up when a ping goes unanswered for [`PING_TIMEOUT`]: a get held at rate zero by
/// its schedule lasts as long as it must, but one whose agent froze (stopped, its host gone
/// without a reset) fails `AgentUnreachable` within the two, about 20 s, rather than hanging.
pub const PING_EVERY: Duration = Duration::from_secs(10);

/// How long a ping of [`PING_EVERY`] may go unanswered.
pub const PING_TIMEOUT: Duration = Duration::from_secs(10);

fn endpoint(security: &Security, url: &str) -> Result<Endpoint, ClientError> {
    Ok(security
        .endpoint(url)
        .map_err(ClientError::Invalid)?
        .tcp_nodelay(true)
        .connect_timeout(Duration::from_secs(5))
        .http2_keep_alive_interval(PING_EVERY)
        .keep_alive_timeout(PING_TIMEOUT))
}

/// The size of the chunks [`Client::put`] streams a piece's bytes in.
pub const PUT_CHUNK_BYTES: usize = 1 << 20;

impl Client {
    /// Connects (lazily: the first call opens the connections).
    pub async fn connect(cfg: ClientConfig) -> Result<Client, ClientError> {
        let security = cfg.security()?;
        let coord = CoordinatorClient::with_interceptor(
            endpoint(&security, &cfg.coordinator)?.connect_lazy(),
            security.attach(),
        );
        let agent = AgentClient::with_interceptor(endpoint(&security, &cfg.agent)?.connect_lazy(), security.attach())
            .max_decoding_message_size(1 << 30)
            .max_encoding_message_size(1 << 30);
        Ok(Client {
            coord,
            agent,
            timeout: cfg.timeout,
            coord_at: cfg.coordinator.into(),
            agent_at: cfg.agent.into(),
            tls: security.tls().is_some(),
        })
    }

    /// The error of a call to the coordinator that ended in `s`.
    fn coordinator_error(&self, s: tonic::Status, coflow: CoflowId) -> ClientError {
        let hint = mode_hint(&s, self.tls);
        ClientError::from_status(s, Service::Coordinator, &self.coord_at, coflow, "").with_hint(hint)
    }

    /// The error of a call to the local agent, about piece `data_id`, that ended in `s`.
    fn agent_error(&self, s: tonic::Status, coflow: CoflowId, data_id: &str) -> ClientError {
        let hint = mode_hint(&s, self.tls);
        ClientError::from_status(s, Service::Agent, &self.agent_at, coflow, data_id).with_hint(hint)
    }

    async fn timed<T>(&self, f: impl Future<Output = Result<T, ClientError>>) -> Result<T, ClientError> {
        tokio::time::timeout(self.timeout, f).await.map_err(|_| ClientError::TimedOut(self.timeout))?
    }

    /// Registers a coflow of `num_flows` pieces (or gets, with [`Readiness::AllGets`]).
    pub async fn register(&self, num_flows: u32, options: CoflowOptions) -> Result<CoflowId, ClientError> {
        if let Some(lease) = options.lease {
            let (min, max) = (Nanos::from_millis(MIN_LEASE_MS), Nanos::from_millis(MAX_LEASE_MS));
            if !(min..=max).contains(&lease) {
                return Err(ClientError::Invalid(format!(
                    "lease: {lease:?} is not from a second to a day (no lease: None)"
                )));
            }
        }
        let req = pb::RegisterRequest {
            num_flows: u64::from(num_flows),
            options: Some((&options).into()),
            ..Default::default()
        };
        let mut c = self.coord.clone();
        self.timed(async {
            let r = c.register(req).await.map_err(|s| self.coordinator_error(s, CoflowId(0)))?;
            Ok(CoflowId(r.into_inner().coflow_id))
        })
        .await
    }

    /// Says no more puts will come for `coflow`.
    pub async fn seal(&self, coflow: CoflowId) -> Result<(), ClientError> {
        let mut c = self.coord.clone();
        self.timed(async {
            c.seal(pb::SealRequest { coflow_id: coflow.0 }).await.map_err(|s| self.coordinator_error(s, coflow))?;
            Ok(())
        })
        .await
    }

    /// Renews the leases of `coflows` (registered with [`CoflowOptions::lease`]) for another
    /// lease each, from now; returns those not renewed: not live (unregistered, expired, or not
    /// yet adopted by a restarted coordinator) or another identity's. Call it about every third
    /// of the lease. Any number of ids, sent [`coflow_proto::MAX_RENEW_IDS`] to a request.
    pub async fn renew(&self, coflows: &[CoflowId]) -> Result<Vec<CoflowId>, ClientError> {
        let mut not_renewed = Vec::new();
        for ids in coflows.chunks(coflow_proto::MAX_RENEW_IDS) {
            let mut c = self.coord.clone();
            let req = pb::RenewRequest { coflow_ids: ids.iter().map(|c| c.0).collect() };
            let r =
                self.timed(async { c.renew(req).await.map_err(|s| self.coordinator_error(s, CoflowId(0))) }).await?;
            not_renewed.extend(r.into_inner().not_renewed.into_iter().map(CoflowId));
        }
        Ok(not_renewed)
    }

    /// Removes a coflow.
    pub async fn unregister(&self, coflow: CoflowId) -> Result<(), ClientError> {
        let mut c = self.coord.clone();
        self.timed(async {
            c.unregister(pb::UnregisterRequest { coflow_id: coflow.0 })
                .await
                .map_err(|s| self.coordinator_error(s, coflow))?;
            Ok(())
        })
        .await
    }

    /// Stores `content` as piece `data_id` of `coflow` at the local agent. The bytes are
    /// streamed in chunks of [`PUT_CHUNK_BYTES`] after a first message that states their size,
    /// which the agent reserves against its memory limit before it accepts any of them.
    pub async fn put(&self, coflow: CoflowId, data_id: &str, content: Vec<u8>) -> Result<u64, ClientError> {
        DataId::new(data_id).map_err(|e| ClientError::Invalid(e.to_string()))?;
        let size = content.len() as u64;
        let n = content.len().div_ceil(PUT_CHUNK_BYTES).max(1);
        let id = data_id.to_string();
        let chunks = tokio_stream::iter((0..n).map(move |i| {
            let data = content
                [(i * PUT_CHUNK_BYTES).min(content.len())..((i + 1) * PUT_CHUNK_BYTES).min(content.len())]
                .to_vec();
            if i == 0 {
                pb::PutChunk { coflow_id: coflow.0, data_id: id.clone(), size, data }
            } else {
                pb::PutChunk { data, ..Default::default() }
            }
        }));
        let mut a = self.agent.clone();
        self.timed(async {
            let r = a.put_stream(chunks).await.map_err(|s| self.agent_error(s, coflow, data_id))?;
            Ok(r.into_inner().size)
        })
        .await
    }

    /// Stores a segment of a file in the local agent's data directory as piece `data_id`; the
    /// caller may exit afterwards. `path` is relative to the data directory; with TLS it must
    /// lie beneath the client's own directory, `clients/NAME` (`PermissionDenied` otherwise).
    pub async fn put_file(
        &self,
        coflow: CoflowId,
        data_id: &str,
        path: &str,
        offset: u64,
        length: u64,
    ) -> Result<u64, ClientError> {
        let seg = pb::FileSegment { path: path.to_string(), offset, length };
        self.put_source(coflow, data_id, pb::put_request::Source::File(seg)).await
    }

    async fn put_source(
        &self,
        coflow: CoflowId,
        data_id: &str,
        source: pb::put_request::Source,
    ) -> Result<u64, ClientError> {
        DataId::new(data_id).map_err(|e| ClientError::Invalid(e.to_string()))?;
        let req = pb::PutRequest { coflow_id: coflow.0, data_id: data_id.to_string(), source: Some(source) };
        let mut a = self.agent.clone();
        self.timed(async {
            let r = a.put(req).await.map_err(|s| self.agent_error(s, coflow, data_id))?;
            Ok(r.into_inner().size)
        })
        .await
    }

    /// Fetches piece `data_id` of `coflow` through the local agent, at the rate the coordinator
    /// assigns. Returns exactly the bytes put, or an error.
    pub async fn get(&self, coflow: CoflowId, data_id: &str) -> Result<Vec<u8>, ClientError> {
        let mut out = Vec::new();
        self.get_with(coflow, data_id, |chunk| out.extend_from_slice(chunk)).await?;
        Ok(out)
    }

    /// Like [`Client::get`], but hands each chunk to `sink` as it arrives instead of collecting.
    /// Returns the number of bytes.
    pub async fn get_with(
        &self,
        coflow: CoflowId,
        data_id: &str,
        mut sink: impl FnMut(&[u8]),
    ) -> Result<u64, ClientError> {
        let mut chunks = self.get_chunks(coflow, data_id).await?;
        let mut n = 0u64;
        while let Some(chunk) = chunks.next().await? {
            n += chunk.len() as u64;
            sink(&chunk);
        }
        Ok(n)
    }

    /// Like [`Client::get`], but returns the chunks as they arrive, one [`Chunks::next`] at a
    /// time, so that a caller in another runtime (the Python package's iterators) pulls at its
    /// own pace and the transfer waits for it.
    pub async fn get_chunks(&self, coflow: CoflowId, data_id: &str) -> Result<Chunks, ClientError> {
        DataId::new(data_id).map_err(|e| ClientError::Invalid(e.to_string()))?;
        let req = pb::GetRequest { coflow_id: coflow.0, data_id: data_id.to_string() };
        let mut a = self.agent.clone();
        let stream = a.get(req).await.map_err(|s| self.agent_error(s, coflow, data_id))?.into_inner();
        Ok(Chunks {
            stream,
            coflow,
            data_id: data_id.to_string(),
            size: None,
            received: 0,
            agent_at: self.agent_at.clone(),
        })
    }

    /// What the coordinator is doing: live coflows, their flows and rates, and agents, every
    /// page of it (each page within gRPC's message limit) merged into one answer.
    pub async fn status(&self) -> Result<pb::StatusResponse, ClientError> {
        let mut all = self.status_page(0, 0).await?;
        let mut after = all.next_after_coflow_id;
        while after != 0 {
            let page = self.status_page(after, 0).await?;
            all.coflows.extend(page.coflows);
            all.flows_omitted += page.flows_omitted;
            // Ids grow page by page; a page that does not move on ends the walk.
            after = if page.next_after_coflow_id > after { page.next_after_coflow_id } else { 0 };
        }
        all.next_after_coflow_id = 0;
        Ok(all)
    }

    /// One page of [`Client::status`]: the coflows after `after_coflow_id` (0: from the first,
    /// with the agents), at most `max_coflows` (0: the coordinator's page size); the answer's
    /// `next_after_coflow_id` is where the next page starts, 0 after the last.
    pub async fn status_page(&self, after_coflow_id: u64, max_coflows: u32) -> Result<pb::StatusResponse, ClientError> {
        let mut c = self.coord.clone();
        self.timed(async {
            let req = pb::StatusRequest { after_coflow_id, max_coflows };
            let r = c.status(req).await.map_err(|s| self.coordinator_error(s, CoflowId(0)))?;
            Ok(r.into_inner())
        })
        .await
    }
}

/// A piece arriving chunk by chunk ([`Client::get_chunks`]).
#[derive(Debug)]
pub struct Chunks {
    stream: tonic::Streaming<pb::GetChunk>,
    coflow: CoflowId,
    data_id: String,
    /// The piece's size, as the agent's first message states it.
    size: Option<u64>,
    received: u64,
    /// The agent's URL, which an error that could not reach it names.
    agent_at: Arc<str>,
}

impl Chunks {
    /// The next chunk, or `None` once the piece is complete: exactly as many bytes as the agent
    /// said the piece holds. A stream that ends early (or runs over) is an error, never a short
    /// piece taken for a whole one.
    pub async fn next(&mut self) -> Result<Option<Vec<u8>>, ClientError> {
        loop {
            let chunk = match self.stream.message().await {
                Ok(chunk) => chunk,
                Err(s) => {
                    return Err(ClientError::from_status(
                        s,
                        Service::Agent,
                        &self.agent_at,
                        self.coflow,
                        &self.data_id,
                    ));
                }
            };
            let Some(chunk) = chunk else {
                return match self.size {
                    Some(size) if size == self.received => Ok(None),
                    Some(size) => Err(ClientError::AgentUnreachable(format!(
                        "the agent's stream ended after {} of the piece's {size} bytes",
                        self.received
                    ))),
                    None => {
                        Err(ClientError::AgentUnreachable("the agent's stream ended before the piece's size".into()))
                    }
                };
            };
            if let Some(size) = chunk.piece_size {
                self.size.get_or_insert(size);
            }
            let Some(size) = self.size else {
                return Err(ClientError::Corrupted("the agent sent bytes before the piece's size".into()));
            };
            self.received += chunk.data.len() as u64;
            if self.received > size {
                return Err(ClientError::Corrupted(format!("more bytes than the piece's {size}")));
            }
            if !chunk.data.is_empty() {
                return Ok(Some(chunk.data));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stream that breaks under the client (the agent died mid-get) is `agent-unreachable`,
    /// which a caller may retry; the same code from a service, with no cause here, is not.
    #[test]
    fn a_broken_connection_is_agent_unreachable() {
        let broken = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "error reading a body from connection");
        let s = Status::from_error(Box::new(broken));
        assert_eq!(s.code(), tonic::Code::Unknown);
        let e = ClientError::from_agent(s, CoflowId(1), "p");
        assert_eq!(e.kind(), Some(coflow_proto::ErrorKind::AgentUnreachable), "{e:?}");
        let said = ClientError::from_agent(Status::unknown("something"), CoflowId(1), "p");
        assert_eq!(said.kind(), None, "{said:?}");
    }

    /// A connection broken as a service of the other security mode breaks it is unreachable,
    /// with a word on that mode; one refused, a service's own internal error, or an answer with
    /// a kind, are not taken for it.
    #[test]
    fn a_connection_broken_as_by_the_other_security_mode_says_so() {
        use std::io::ErrorKind as Io;
        let cut = |kind: Io| Status::from_error(Box::new(std::io::Error::new(kind, "cut")));
        let mut h2 = Status::internal("h2 protocol error: http2 error");
        h2.set_source(std::sync::Arc::new(std::fmt::Error));
        // What a plaintext client hears from a TLS service over loopback: the connection closed.
        let mut closed = Status::cancelled("operation was canceled");
        closed.set_source(std::sync::Arc::new(std::fmt::Error));
        for (s, tls, word) in [
            (closed.clone(), false, Some("https://")),
            (closed.clone(), true, Some("refused this client's certificate")),
            (cut(Io::BrokenPipe), false, Some("https://")),
            (cut(Io::ConnectionReset), true, Some("http://")),
            (h2.clone(), false, Some("https://")),
            (cut(Io::ConnectionRefused), false, None),
            (Status::internal("a service's own"), false, None),
            (coflow_proto::ErrorKind::ShuttingDown.status(tonic::Code::Unavailable, "stopping"), true, None),
        ] {
            let hint = mode_hint(&s, tls);
            assert_eq!(hint.is_some(), word.is_some(), "{s:?}");
            if let (Some(h), Some(w)) = (hint, word) {
                assert!(h.contains(w), "{h}");
            }
        }
        let e = ClientError::from_coordinator(h2, CoflowId(1)).with_hint(Some("why"));
        assert!(matches!(&e, ClientError::CoordinatorUnreachable(m) if m.ends_with("(why)")), "{e:?}");
        // A client without TLS has no certificate to have refused.
        let hint = mode_hint(&closed, false);
        let e = ClientError::from_coordinator(closed, CoflowId(1)).with_hint(hint);
        assert!(
            matches!(&e, ClientError::CoordinatorUnreachable(m) if m.contains("closed before an answer")
                && m.contains("https://") && !m.contains("refused this client's certificate")),
            "{e}"
        );
    }

    /// What the coordinator's being out of reach looks like, from the client's own call or
    /// through its agent, is `coordinator-unreachable`, and never blames a source.
    #[test]
    fn the_coordinator_out_of_reach_is_named() {
        use coflow_proto::ErrorKind as K;
        let broken =
            || Status::from_error(Box::new(std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused")));
        let cases = [
            (ClientError::from_coordinator(broken(), CoflowId(1)), K::CoordinatorUnreachable),
            (
                ClientError::from_coordinator(Status::unavailable("connection refused"), CoflowId(1)),
                K::CoordinatorUnreachable,
            ),
            (
                ClientError::from_coordinator(
                    K::ShuttingDown.status(tonic::Code::Unavailable, "stopping"),
                    CoflowId(1),
                ),
                K::CoordinatorUnreachable,
            ),
            (
                ClientError::from_agent(
                    K::CoordinatorUnreachable.status(tonic::Code::Unavailable, "no session"),
                    CoflowId(1),
                    "p",
                ),
                K::CoordinatorUnreachable,
            ),
            (ClientError::from_agent(Status::unavailable("connection refused"), CoflowId(1), "p"), K::AgentUnreachable),
            (
                ClientError::from_agent(K::ShuttingDown.status(tonic::Code::Unavailable, "stopping"), CoflowId(1), "p"),
                K::AgentUnreachable,
            ),
        ];
        for (e, kind) in cases {
            assert_eq!(e.kind(), Some(kind), "{e:?}");
        }
        let e = ClientError::from_agent(
            K::CoordinatorUnreachable.status(tonic::Code::Unavailable, "coordinator unreachable: no session"),
            CoflowId(1),
            "p",
        );
        assert_eq!(e.to_string(), "coordinator unreachable: no session");
    }

    /// A get the agent ended because this client stopped reading is `client-departed`, not an
    /// agent out of reach: no source is to blame.
    #[test]
    fn a_stalled_reader_is_told_so() {
        use coflow_proto::ErrorKind as K;
        let s = K::ClientDeparted.status(tonic::Code::Unavailable, "the client read nothing for 5 s");
        let e = ClientError::from_agent(s, CoflowId(1), "p");
        assert!(matches!(&e, ClientError::ClientDeparted(m) if m.contains("read nothing")), "{e:?}");
        assert_eq!(e.kind(), Some(K::ClientDeparted));
    }

    /// A get whose flow the coordinator failed while its receiving agent was away (its resume
    /// refused `unknown-flow`) is typed, not `Other`: a framework may retry it.
    #[test]
    fn a_flow_the_coordinator_forgot_is_typed() {
        use coflow_proto::ErrorKind as K;
        let s = K::UnknownFlow.status(tonic::Code::NotFound, "unknown flow: unknown flow 1795799830877005");
        let e = ClientError::from_agent(s, CoflowId(1), "p");
        assert_eq!(e, ClientError::UnknownFlow("unknown flow 1795799830877005".into()));
        assert_eq!(e.kind(), Some(K::UnknownFlow));
        assert_eq!(e.to_string(), "unknown flow: unknown flow 1795799830877005");
    }

    /// A service's message that opens with the words the error's display opens with is not
    /// said twice; one that does not is kept whole.
    #[test]
    fn an_error_says_its_kind_once() {
        use coflow_proto::ErrorKind as K;
        let said = |kind: K, code, message: &str| {
            ClientError::from_agent(kind.status(code, message), CoflowId(1), "p").to_string()
        };
        let denied = said(K::PermissionDenied, tonic::Code::PermissionDenied, "permission denied: not yours");
        assert_eq!(denied, "permission denied: not yours");
        assert_eq!(said(K::DataLost, tonic::Code::DataLoss, "data lost: bytes 0..9"), "data lost: bytes 0..9");
        assert_eq!(
            said(K::Invalid, tonic::Code::InvalidArgument, "`name`: too long"),
            "invalid request: `name`: too long"
        );
        let wrong = ClientError::from_agent(Status::unimplemented(""), CoflowId(1), "p");
        assert!(matches!(&wrong, ClientError::Invalid(m) if m.contains("the right way round")), "{wrong:?}");
    }
    /// A get from an agent that takes the connection and then never says anything (its process
    /// stopped, say) fails `AgentUnreachable` once the client's ping goes unanswered: it never
    /// hangs, though a get waits on its schedule for as long as it must.
    #[tokio::test]
    async fn a_get_from_a_silent_agent_fails_when_its_ping_goes_unanswered() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let held = tokio::spawn(async move {
            let mut socks = Vec::new();
            while let Ok((sock, _)) = listener.accept().await {
                socks.push(sock);
            }
        });
        let token = coflow_proto::ClusterToken::new("a-token-for-the-silent-agent").unwrap();
        let client = Client::connect(ClientConfig::new(url.clone(), url.clone(), token)).await.unwrap();
        let t = std::time::Instant::now();
        let bound = PING_EVERY + PING_TIMEOUT + Duration::from_secs(5);
        let e = tokio::time::timeout(bound, client.get(CoflowId(1), "p"))
            .await
            .expect("a get from a silent agent hung")
            .map(|b| b.len())
            .unwrap_err();
        assert!(
            matches!(&e, ClientError::AgentUnreachable(m) if m.starts_with(&format!("this client's agent at {url}: "))),
            "after {:?}: {e:?}",
            t.elapsed()
        );
        held.abort();
    }

    /// A service that refuses the connection is named by its URL, with the cause: the
    /// coordinator's for a control call, the agent's for a put or a get.
    #[tokio::test]
    async fn a_service_that_cannot_be_reached_is_named_by_its_url() {
        // A port that was just free, and is again: nothing listens there.
        let free = |_| std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let (coord, agent) = (format!("http://{}", free(0)), format!("http://{}", free(1)));
        let token = coflow_proto::ClusterToken::new("a-token-for-no-one-listening").unwrap();
        let client = Client::connect(ClientConfig::new(coord.clone(), agent.clone(), token)).await.unwrap();
        let e = client.status().await.unwrap_err();
        assert!(
            matches!(&e, ClientError::CoordinatorUnreachable(m) if m.starts_with(&format!("{coord}: ")) && m.contains("refused")),
            "{e}"
        );
        assert!(e.to_string().starts_with(&format!("coordinator unreachable: {coord}: ")), "{e}");
        let e = client.put(CoflowId(1), "p", vec![1, 2, 3]).await.unwrap_err();
        assert!(
            matches!(&e, ClientError::AgentUnreachable(m) if m.starts_with(&format!("this client's agent at {agent}: ")) && m.contains("refused")),
            "{e}"
        );
        let e = client.get(CoflowId(1), "p").await.unwrap_err();
        assert!(e.to_string().starts_with(&format!("agent unreachable: this client's agent at {agent}: ")), "{e}");
    }

    use coflow_proto::pb::agent_server::{Agent as AgentApi, AgentServer};
    use tonic::{Request, Response, Status, Streaming};

    /// An agent that answers every get with the messages it was made with, then ends the stream
    /// with OK: as an agent whose get task died (its log on a full disk) would.
    struct Truncating(Vec<pb::GetChunk>);

    #[tonic::async_trait]
    impl AgentApi for Truncating {
        async fn put(&self, _: Request<pb::PutRequest>) -> Result<Response<pb::PutResponse>, Status> {
            Err(Status::unimplemented("put"))
        }

        type GetStream = tokio_stream::Iter<std::vec::IntoIter<Result<pb::GetChunk, Status>>>;

        async fn get(&self, _: Request<pb::GetRequest>) -> Result<Response<Self::GetStream>, Status> {
            let msgs: Vec<Result<pb::GetChunk, Status>> = self.0.iter().cloned().map(Ok).collect();
            Ok(Response::new(tokio_stream::iter(msgs)))
        }

        async fn put_stream(&self, _: Request<Streaming<pb::PutChunk>>) -> Result<Response<pb::PutResponse>, Status> {
            Err(Status::unimplemented("put_stream"))
        }
    }

    async fn get_from(msgs: Vec<pb::GetChunk>) -> Result<Vec<u8>, ClientError> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(AgentServer::new(Truncating(msgs)))
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        );
        let token = ClusterToken::new("client-test-token").unwrap();
        let c =
            Client::connect(ClientConfig::new("http://127.0.0.1:9", format!("http://{addr}"), token)).await.unwrap();
        let got = c.get(CoflowId(1), "p").await;
        server.abort();
        got
    }

    fn chunk(data: &[u8], size: Option<u64>) -> pb::GetChunk {
        pb::GetChunk { data: data.to_vec(), piece_size: size }
    }

    /// A get ends OK with exactly the piece's bytes, never fewer: a stream that ends early, runs
    /// over, or never states the size is an error even though it closed with OK.
    #[tokio::test]
    async fn a_get_checks_the_length_end_to_end() {
        let whole = get_from(vec![chunk(&[], Some(5)), chunk(b"hel", None), chunk(b"lo", None)]).await;
        assert_eq!(whole.unwrap(), b"hello");
        assert_eq!(get_from(vec![chunk(&[], Some(0))]).await.unwrap(), b"", "an empty piece");
        let short = get_from(vec![chunk(&[], Some(500_000)), chunk(b"hel", None)]).await.unwrap_err();
        assert!(matches!(&short, ClientError::AgentUnreachable(m) if m.contains("3 of the piece's 500000")), "{short}");
        let nothing = get_from(vec![chunk(&[], Some(500_000))]).await.unwrap_err();
        assert!(matches!(nothing, ClientError::AgentUnreachable(_)), "{nothing}");
        let no_size = get_from(vec![]).await.unwrap_err();
        assert!(matches!(no_size, ClientError::AgentUnreachable(_)), "{no_size}");
        let over = get_from(vec![chunk(b"hel", Some(2))]).await.unwrap_err();
        assert!(matches!(over, ClientError::Corrupted(_)), "{over}");
    }
}
