//! The agent: one per machine. It stores pieces that local senders put (in memory, or as a
//! segment of a file in its data directory, so senders may exit), serves them to other agents
//! over TCP with a framed header and a checksum, fetches pieces for local gets at the rate the
//! coordinator assigns (a token bucket per flow), caps its own port at a configured capacity,
//! and reports progress and port utilization to the coordinator.
//!
//! # Layout
//! - `config`: [`AgentConfig`], TOML with documented defaults, validated.
//! - `bucket`: [`TokenBucket`], the pure rate limiter (takes `now`).
//! - `store`: pieces and the data-directory confinement of file paths.
//! - `segment`: file segments read at put to fix their checksums, bounded per client and in all.
//! - `wire`: the data plane's wire format, a pure codec over byte buffers.
//! - `conn`: a data connection with its read buffer, and the pool of warm ones.
//! - `data`: the TCP data plane, sending (paced) and fetching (checked) over warm connections.
//! - `service`: the gRPC service local clients call.
//! - `session`: the agent's side of its session with the coordinator, which its tasks speak
//!   through, batched per frame.
//! - `link`: registration and the session with the coordinator (announcements, flow ends,
//!   heartbeats out; answers, rates and notices in), batched per frame.
//! - `phantom`: [`Phantom`], the agent's side of the session without an agent, for benchmarks
//!   and tests.
//! - `membership`: which machine the agent is (certificate, flag, kept file, or assigned), the
//!   data directory held while the agent runs, what the coordinator asks of the agent at its
//!   registration (heartbeat interval, agent timeout), which of its refusals are for good (the
//!   agent then stops), and deregistering at a clean stop.
//! - `pulse`: the agent's own pulse, which tells a pause of its own from a silent peer.
//! - `state`: what the tasks share.

#![warn(missing_docs)]

mod bucket;
mod config;
mod conn;
mod data;
mod error;
mod link;
mod membership;
mod phantom;
mod pulse;
mod receive;
mod retry;
mod segment;
mod service;
mod session;
mod spill;
mod state;
mod store;
mod unread;
mod wire;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use coflow_proto::Security;
use coflow_proto::pb::agent_server::AgentServer;
use coflow_proto::pb::coordinator_client::CoordinatorClient;
use coflow_telemetry::prometheus_client::metrics::histogram::Histogram;
use coflow_telemetry::{Health, Metrics, Sample, Value};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tonic_health::ServingStatus;

pub use crate::bucket::{Grant, TokenBucket, burst_for};
pub use crate::config::{AgentConfig, ConfigError, MAX_PORT_RATE_BPS, MIN_PORT_RATE_BPS};
pub use crate::error::AgentError;
pub use crate::membership::{MACHINE_ID_FILE, Refusal};
pub use crate::phantom::{Phantom, PhantomGrant};
pub use crate::store::confine;
pub use coflow_proto::{ERROR_KIND, ErrorKind};

/// The agent's gRPC service name, as `grpc.health.v1` reports it.
pub const SERVICE_NAME: &str = "coflow.v1.Agent";

/// The largest gRPC message an agent accepts: 8 MiB. A unary put of in-memory bytes carries at
/// most that much (gRPC buffers a whole message before the agent sees it, so its size cannot be
/// refused before its bytes come); larger pieces are streamed (`PutStream`), their size stated
/// and reserved first.
pub const MAX_MESSAGE_BYTES: usize = 8 << 20;

/// How long the agent's connection to its coordinator may receive nothing before the agent pings
/// it (an HTTP/2 ping, which the coordinator's process answers, not its kernel), and
/// [`COORDINATOR_PING_TIMEOUT`] how long that ping may go unanswered before the connection is
/// dropped: a coordinator frozen (stopped, its host gone without a reset) is then unreachable, and
/// the gets it held fail after `coordinator_grace_ms`, as with one that exited, rather than
/// waiting for ever. Longer together than a coordinator's pause that its agents ride out.
pub const COORDINATOR_PING_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// How long a ping of [`COORDINATOR_PING_EVERY`] may go unanswered.
pub const COORDINATOR_PING_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The listeners an agent serves on.
#[derive(Debug)]
pub struct AgentListeners {
    /// gRPC for local clients.
    pub grpc: TcpListener,
    /// The TCP data plane.
    pub data: TcpListener,
    /// Prometheus text, if wanted.
    pub metrics: Option<TcpListener>,
}

/// Why an agent could not run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The configuration is wrong.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The gRPC server failed, or stopped because its acceptor did.
    #[error("gRPC: {0}")]
    Transport(#[from] coflow_proto::ServeError),
    /// The coordinator URL is malformed or does not fit the mode (https:// with TLS).
    #[error("coordinator: {0}")]
    Coordinator(String),
    /// A listener has no address.
    #[error("listener: {0}")]
    Io(#[from] std::io::Error),
    /// The machine id cannot be settled.
    #[error("machine id: {0}")]
    Machine(String),
    /// The data directory cannot be held: it cannot be made or opened, or another agent holds it.
    #[error("data_dir {0}")]
    DataDir(String),
    /// The data plane's listener failed in a way that lasts (its socket is unusable): the
    /// agent stopped cleanly, since it could serve no fetch.
    #[error("data plane: {0}")]
    DataPlane(#[source] std::io::Error),
    /// The coordinator refused this agent for good (superseded by a later process for its
    /// machine, or a registration it cannot take, such as an unknown datacenter): the agent
    /// stopped cleanly, since registering again could not succeed.
    #[error("refused by the coordinator: {0}")]
    Refused(Refusal),
}

/// Runs an agent until `shutdown` completes; then stops its servers and tasks, deregisters from
/// the coordinator and returns. An agent the coordinator refuses for good (see [`Refusal`])
/// stops the same way, within the servers' drain bound (`SHUTDOWN_DRAIN`, 5 s) of the refusal,
/// without deregistering, and returns [`RunError::Refused`].
/// Its HTTP listener serves `/metrics`, `/healthz` and `/readyz`
/// (ready: registered with the coordinator and its link up), and its gRPC listener
/// `grpc.health.v1` with the same readiness.
/// `security` is the cluster token, or the agent's TLS identity ([`Security`]).
pub async fn run(
    mut config: AgentConfig,
    security: impl Into<Security>,
    listeners: AgentListeners,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), RunError> {
    config.validate()?;
    // Held until the agent returns: its machine id and pieces are its own.
    let _data_dir = membership::hold_data_dir(&config.data_dir)?;
    let security = security.into();
    let data_addr = match &config.data_advertise {
        Some(a) => a.clone(),
        None => {
            let bound = listeners.data.local_addr()?;
            // Every address (0.0.0.0) is none another agent could connect to.
            if !config::reachable(bound) {
                return Err(RunError::Config(ConfigError {
                    field: "data_advertise",
                    reason: format!(
                        "data_listen {bound} listens on every address; give the one other agents reach this \
                         machine at, such as 10.0.0.1:{}",
                        bound.port()
                    ),
                }));
            }
            bound.to_string()
        }
    };
    let channel = security
        .endpoint(&config.coordinator)
        .map_err(RunError::Coordinator)?
        .tcp_nodelay(true)
        .connect_timeout(std::time::Duration::from_secs(5))
        .http2_keep_alive_interval(COORDINATOR_PING_EVERY)
        .keep_alive_timeout(COORDINATOR_PING_TIMEOUT)
        .connect_lazy();
    let coordinator = CoordinatorClient::with_interceptor(channel, security.attach());
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut registry = Metrics::new("agent", env!("CARGO_PKG_VERSION"));
    let get_control = Histogram::new(coflow_telemetry::exponential_buckets(1e-5, 2.0, 21));
    registry.registry("agent").register(
        "get_control_seconds",
        "A get's control path: from the get reaching the agent to the coordinator's grant of its flow",
        get_control.clone(),
    );
    let registry = Arc::new(registry);
    // The HTTP listener serves from the start, so that a liveness probe passes while the agent
    // waits for its machine id (a coordinator still starting); its samples come with the state.
    let health = Health::new("waiting for a machine id from the coordinator");
    let started: Arc<std::sync::OnceLock<Arc<state::Shared>>> = Arc::default();
    let metrics_task = listeners.metrics.map(|l| {
        let started = started.clone();
        let scrape: coflow_telemetry::Scrape = Arc::new(move || {
            let (started, registry) = (started.clone(), registry.clone());
            Box::pin(async move {
                if let Some(s) = started.get() {
                    registry.snapshot().set(samples(s));
                }
                registry.encode()
            })
        });
        tokio::spawn(coflow_telemetry::serve(l, coflow_telemetry::router(scrape, health.clone()), stop_rx.clone()))
    });
    let stop_metrics = |task: Option<tokio::task::JoinHandle<()>>| async {
        let _ = stop_tx.send(true);
        if let Some(t) = task {
            let _ = t.await;
        }
    };
    let mut shutdown = Box::pin(shutdown);
    let machine = tokio::select! {
        m = membership::resolve(&config, &security, coordinator.clone()) => match m {
            Ok(m) => m,
            Err(e) => {
                stop_metrics(metrics_task).await;
                return Err(e);
            }
        },
        _ = &mut shutdown => {
            stop_metrics(metrics_task).await;
            tracing::info!("agent stopped before it had a machine id");
            return Ok(());
        }
    };
    config.machine = Some(machine);
    tracing::info!(machine, data_addr = %data_addr, tls = security.tls().is_some(), "agent starting");
    let authenticate = security.authenticate();
    let tls = security.tls().cloned();
    let shared = Arc::new(state::Shared::new(config, security, coordinator));
    let _ = started.set(shared.clone());
    health.set(false, "not registered with the coordinator yet");

    let mut data_task = tokio::spawn(data::serve(listeners.data, shared.clone(), stop_rx.clone()));
    let link_task = tokio::spawn(link::run(shared.clone(), data_addr, stop_rx.clone()));
    let pulse_task = {
        let (shared, stop) = (shared.clone(), stop_rx.clone());
        tokio::spawn(async move { pulse::run(&shared.pulse, shared.pause_least(), stop).await })
    };
    let (reporter, health_service) = tonic_health::server::health_reporter();
    let readiness_task = tokio::spawn(track_readiness(shared.clone(), health.clone(), reporter, stop_rx.clone()));
    let hashing = Arc::new(segment::Hashing::default());
    let svc = service::AgentService { shared: shared.clone(), shutdown: stop_rx.clone(), get_control, hashing };
    let svc =
        AgentServer::new(svc).max_decoding_message_size(MAX_MESSAGE_BYTES).max_encoding_message_size(MAX_MESSAGE_BYTES);
    let svc = tonic::service::interceptor::InterceptedService::new(svc, authenticate);
    let svc = coflow_proto::Reception::new(svc);
    let health_service = svc.beside(health_service);
    let router = coflow_proto::server().add_service(coflow_proto::TypedErrors(svc)).add_service(health_service);
    // A refusal for good stops the agent as a shutdown does: registering again cannot succeed;
    // so does the data plane's listener failing for good: it could serve no fetch any more.
    let mut data_ended = None;
    let stopping = async {
        tokio::select! {
            () = shutdown => {}
            _ = shared.coordinator.terms().refused() => {}
            ended = &mut data_task => {
                if let Ok(Err(e)) = &ended {
                    tracing::error!(error = %e, "the data plane's listener failed; the agent stops");
                }
                data_ended = Some(ended);
            }
        }
    };
    let served = coflow_proto::serve_until_stopped(router, listeners.grpc, tls.as_ref(), &stop_tx, stopping).await;
    let _ = readiness_task.await;
    let data_ended = match data_ended {
        Some(ended) => ended,
        None => data_task.await,
    };
    let _ = link_task.await;
    let _ = pulse_task.await;
    if let Some(t) = metrics_task {
        let _ = t.await;
    }
    membership::deregister(&shared.coordinator, machine, shared.session()).await;
    if let Some(refusal) = shared.coordinator.terms().refusal() {
        tracing::error!(reason = %refusal, "agent stopped: refused by the coordinator");
        return Err(RunError::Refused(refusal));
    }
    if let Ok(Err(e)) = data_ended {
        tracing::error!(error = %e, "agent stopped: the data plane's listener failed");
        return Err(RunError::DataPlane(e));
    }
    tracing::info!("agent stopped");
    Ok(served?)
}

/// The counters and gauges, read at each scrape.
fn samples(s: &state::Shared) -> Vec<Sample> {
    let usage = s.store.usage();
    let sending = s.sending.lock().expect("sending lock").len();
    let receiving = s.receiving.lock().expect("receiving lock").len();
    let count = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    let int = |v: usize| Value::Int(v as u64);
    let machine = s.config.machine_id().to_string();
    [
        Sample::gauge(
            "registered",
            "1 once the agent holds a session with the coordinator (it serves clients).",
            Value::Int(u64::from(s.session() != 0)),
        ),
        Sample::gauge(
            "coordinator_link_up",
            "1 while the agent is registered and its link to the coordinator is up (it is ready); 0 while it \
             waits to register or the link is down (its gets wait for the coordinator).",
            Value::Int(u64::from(readiness(s).is_ok())),
        ),
        Sample::counter("tx_bytes", "Bytes sent to other agents.", count(&s.tx_bytes)),
        Sample::counter("rx_bytes", "Bytes received from other agents.", count(&s.rx_bytes)),
        Sample::counter(
            "relayed_bytes",
            "Bytes forwarded as a relay between two other agents (multi-path routing).",
            count(&s.relayed_bytes),
        ),
        Sample::counter("puts", "Pieces put.", count(&s.puts)),
        Sample::counter("gets", "Gets served to local clients.", count(&s.gets)),
        Sample::counter("get_failures", "Gets that failed.", count(&s.get_failures)),
        Sample::counter(
            "spilled_bytes",
            "Bytes of multi-path gets' later parts kept on disk while they waited for the parts before them.",
            count(&s.spilled_bytes),
        ),
        Sample::gauge("pieces", "Pieces held.", int(usage.pieces)),
        Sample::gauge(
            "piece_bytes",
            "Bytes of the pieces held (in memory and in file segments).",
            Value::Int(usage.bytes),
        ),
        Sample::gauge(
            "stored_bytes",
            "Memory charged for the pieces held: their bytes in memory, names and bookkeeping (bounded by \
             max_stored_bytes).",
            Value::Int(usage.memory),
        ),
        Sample::gauge(
            "stored_bytes_largest_client",
            "Memory charged for the client identity that holds the most (bounded by \
             max_stored_bytes_per_client).",
            Value::Int(usage.largest_client),
        ),
        Sample::gauge(
            "data_connections",
            "Data connections being served.",
            Value::Int(s.data_connections.load(Ordering::Relaxed)),
        ),
        Sample::gauge(
            "warm_connections",
            "Idle data connections to other agents, kept for the next fetch.",
            int(s.pool.len()),
        ),
        Sample::gauge("flows_receiving", "Remote gets in progress.", int(receiving)),
        Sample::gauge("flows_sending", "Flows being sent.", int(sending)),
        Sample::gauge("port_rate_bytes_per_second", "Configured port capacity.", Value::Float(s.config.port_rate_bps)),
    ]
    .into_iter()
    .map(|x| x.with("machine", machine.clone()))
    .collect()
}

/// Whether the agent is ready: registered with the coordinator and its link up.
fn readiness(s: &state::Shared) -> Result<(), &'static str> {
    if s.session() == 0 {
        Err("not registered with the coordinator yet")
    } else if s.link_down_since.lock().expect("link lock").is_some() {
        Err("the link to the coordinator is down")
    } else {
        Ok(())
    }
}

/// Keeps `/readyz` and `grpc.health.v1` up to date with [`readiness`] until `stop`.
async fn track_readiness(
    s: Arc<state::Shared>,
    health: Arc<Health>,
    reporter: tonic_health::server::HealthReporter,
    mut stop: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(s.config.heartbeat_interval_ms.min(500)));
    let mut last = None;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.wait_for(|&s| s) => break,
        }
        let now = readiness(&s);
        if last != Some(now) {
            health.set(now.is_ok(), now.err().unwrap_or(""));
            let status = if now.is_ok() { ServingStatus::Serving } else { ServingStatus::NotServing };
            for name in ["", SERVICE_NAME] {
                reporter.set_service_status(name, status).await;
            }
            last = Some(now);
        }
    }
    health.set(false, "stopping");
    for name in ["", SERVICE_NAME] {
        reporter.set_service_status(name, ServingStatus::NotServing).await;
    }
}
