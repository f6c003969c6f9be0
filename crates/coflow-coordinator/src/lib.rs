//! The coordinator: one per cluster. It keeps the global view of coflows, flows and agents, runs
//! the scheduling policy (the very code the simulator runs) on arrivals, completions and its
//! timers, and pushes the changed rates to agents, batched.
//!
//! # Layout
//! - `config`: [`CoordinatorConfig`], TOML with documented defaults, validated.
//! - `core`: [`Core`], the sans-I/O state machine: typed `handle_*` inputs that take `now` and
//!   return the answer, `poll_transmit` (rate batches and notices per agent) and `poll_timeout`;
//!   no clock, channel or task, so tests drive it in simulated time by calling it.
//! - `status`: the live view's types ([`StatusView`] and the coflows, flows and agents in it).
//! - `views`: what the coordinator shows of itself, read from the core: the live view and the
//!   counters and gauges.
//! - `telemetry`: its HTTP face (metrics with histograms, health, readiness, the live web page).
//! - `service`: the tonic service and the one task that owns the core, with every channel and
//!   timer.
//! - `identity`: who may make which call (roles from certificates, agent sessions).
//! - `membership`: machine ids for agents that ask for one, and agents leaving.
//! - `error`: [`CoordError`] and its single mapping to gRPC status.

#![warn(missing_docs)]

mod config;
mod core;
mod error;
mod events;
mod identity;
mod measure;
mod membership;
mod service;
mod status;
mod telemetry;
mod views;

use std::future::Future;
use std::sync::Arc;

use coflow_proto::Security;
use coflow_proto::pb::coordinator_server::CoordinatorServer;
use tokio::net::TcpListener;
use tokio::sync::watch;

pub use crate::config::{ConfigError, CoordinatorConfig, TCP, check_policy};
pub use crate::core::ADMIN;
pub use crate::core::{
    Core, Counters, FlowGrant, FlowOutcome, GrantPart, MIN_PART_BYTES, Notice, Observation, RateBatch, Relay, Transmit,
};
pub use crate::error::CoordError;
pub use crate::status::{AgentView, CoflowView, FlowView, LinkView, STATUS_PAGE_BYTES, StatusPage, StatusView};
pub use crate::telemetry::status_json;
pub use coflow_proto::{ERROR_KIND, ErrorKind};

/// The coordinator's gRPC service name, as `grpc.health.v1` reports it.
pub const SERVICE_NAME: &str = "coflow.v1.Coordinator";

/// Why the coordinator could not run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The configuration is wrong.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The gRPC server failed.
    #[error("gRPC server: {0}")]
    Transport(#[from] tonic::transport::Error),
    /// The TLS certificate given is not a coordinator's.
    #[error(
        "tls_cert: the certificate is for {0}, not the coordinator (issue one with `coflow certs issue DIR --coordinator HOST`)"
    )]
    NotCoordinator(String),
}

/// Serves the coordinator on `listener` (and, on `metrics`, `/metrics`, `/healthz`, `/readyz` and
/// the live web page) until `shutdown` completes; then stops accepting, ends the core task and
/// returns. gRPC also serves `grpc.health.v1` (`coflow.v1.Coordinator` and the server as a whole).
/// `security` is the cluster token, or the coordinator's TLS identity ([`Security`]).
pub async fn run(
    config: CoordinatorConfig,
    security: impl Into<Security>,
    listener: TcpListener,
    metrics: Option<TcpListener>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), RunError> {
    config.validate()?;
    let security = security.into();
    // Another member's certificate would be refused by every peer at the handshake ("not for
    // server authentication"), long after the start: refused here instead.
    if let Some(role) = security.tls().map(|t| t.role())
        && *role != coflow_proto::Role::Coordinator
    {
        return Err(RunError::NotCoordinator(role.uri()));
    }
    // Under `tcp` no policy decides; its simulator's stand-in stands by so that `Core` keeps one
    // shape.
    let name = coflow_sched::policy::simulated(&config.policy);
    let policy = coflow_sched::policy::by_name(name).expect("validated");
    let policy_label = config.policy.clone();
    tracing::info!(policy = %config.policy, addr = ?listener.local_addr().ok(), tls = security.tls().is_some(), "coordinator starting");
    // Agents hear of a restart when their rate stream breaks, then register again (every 500 ms)
    // and re-announce what they hold, one piece per call; three agent timeouts leave a loaded
    // agent with many pieces time to finish.
    let recovering_until = std::time::Instant::now() + std::time::Duration::from_millis(3 * config.agent_timeout_ms);
    let config_agent_timeout_ms = config.agent_timeout_ms;
    let status_page = config.status_page;
    let mut core = Core::new(config, policy);
    // Coflow and flow ids from a previous run, which agents re-announce, must not collide with
    // new ones: ids start at the clock in microseconds, so a previous run's ids are below unless
    // it allocated more than one id per microsecond of its life.
    let micros = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros());
    core.set_id_base(micros as u64);
    let (handle, rx) = events::channel();
    let (stop_tx, stop_rx) = watch::channel(false);
    let (registry, observer) = telemetry::metrics(&policy_label);
    let tickets = core.tickets().clone();
    let core_task = tokio::spawn(service::core_loop(core, rx, stop_rx.clone(), observer));
    let health = coflow_telemetry::Health::new("starting");
    let metrics_task = metrics.map(|l| {
        let (h1, h2) = (handle.clone(), handle.clone());
        let samples: telemetry::Ask<_> = Arc::new(move || {
            let h = h1.clone();
            Box::pin(async move { h.ask(events::Event::Metrics).await.ok() })
        });
        // The live view's JSON, rendered one request at a time: with many coflows it is large,
        // and peers asking at once would each hold a copy.
        let one_at_a_time = Arc::new(tokio::sync::Semaphore::new(1));
        let status: telemetry::Ask<String> = Arc::new(move || {
            let (h, one_at_a_time) = (h2.clone(), one_at_a_time.clone());
            Box::pin(async move {
                let _turn = one_at_a_time.acquire().await;
                h.ask(events::Event::Status).await.ok().map(|v| telemetry::status_json(&v).to_string())
            })
        });
        let status = status_page.then_some(status);
        let router = telemetry::router(samples, status, Arc::new(registry), health.clone());
        tokio::spawn(coflow_telemetry::serve(l, router, stop_rx.clone()))
    });
    let (reporter, health_service) = tonic_health::server::health_reporter();
    let svc = service::CoordinatorService {
        core: handle,
        sessions: Default::default(),
        recovering_until,
        restarted: Default::default(),
        assignments: Arc::new(membership::Assignments::new(std::time::Duration::from_millis(config_agent_timeout_ms))),
        stop: stop_rx.clone(),
        tickets,
        fetches_per_peer: coflow_sched::policy::unscheduled(&policy_label).map_or(0, |u| u.fetches_per_peer),
    };
    let svc = coflow_proto::TypedErrors(CoordinatorServer::with_interceptor(svc, security.authenticate()));
    let router = coflow_proto::server().add_service(svc).add_service(health_service);
    // Ready once the listener serves (it is bound, so calls queue until then); not ready from the
    // moment a stop is asked.
    for name in ["", SERVICE_NAME] {
        reporter.set_service_status(name, tonic_health::ServingStatus::Serving).await;
    }
    health.set(true, "");
    let stopping = async move {
        shutdown.await;
        health.set(false, "stopping");
        for name in ["", SERVICE_NAME] {
            reporter.set_service_status(name, tonic_health::ServingStatus::NotServing).await;
        }
    };
    // Returns with `stop` raised, also when the server failed on its own: the core and metrics
    // tasks end too.
    let served = coflow_proto::serve_until_stopped(router, listener, security.tls(), &stop_tx, stopping).await;
    let _ = core_task.await;
    if let Some(t) = metrics_task {
        let _ = t.await;
    }
    tracing::info!("coordinator stopped");
    Ok(served?)
}
