//! The coordinator: one per cluster. It keeps the global view of coflows, flows and agents, runs
//! the scheduling policy (the very code the simulator runs) on arrivals, completions and its
//! timers, and pushes the changed rates to agents, batched.
//!
//! # Layout
//! - `config`: [`CoordinatorConfig`], TOML with documented defaults, validated.
//! - `core`: [`Core`], the sans-I/O state machine fed by the closed [`Event`] enum; tests drive it
//!   in simulated time.
//! - `service`: the tonic service and the one task that owns the core.
//! - `identity`: who may make which call (roles from certificates, agent sessions).
//! - `error`: [`CoordError`] and its single mapping to gRPC status.

#![warn(missing_docs)]

mod config;
mod core;
mod error;
mod identity;
mod service;

use std::future::Future;
use std::sync::Arc;

use coflow_proto::Security;
use coflow_proto::pb::coordinator_server::CoordinatorServer;
use tokio::net::TcpListener;
use tokio::sync::watch;

pub use crate::config::{ConfigError, CoordinatorConfig, TCP, check_policy};
pub use crate::core::{
    AgentView, CoflowView, Core, Counters, Event, FlowGrant, FlowView, Notice, RateBatch, Reply, StatusView,
};
pub use crate::error::{CoordError, ERROR_KIND};
pub use crate::service::CoreHandle;

/// Why the coordinator could not run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The configuration is wrong.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The gRPC server failed.
    #[error("gRPC server: {0}")]
    Transport(#[from] tonic::transport::Error),
}

/// Serves the coordinator on `listener` (and Prometheus text on `metrics`) until `shutdown`
/// completes; then stops accepting, ends the core task and returns.
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
    // Under `tcp` no policy decides; `fair` stands by so that `Core` keeps one shape.
    let name = if config.policy == TCP { "fair" } else { config.policy.as_str() };
    let policy = coflow_sched::policy::by_name(name).expect("validated");
    tracing::info!(policy = %config.policy, addr = ?listener.local_addr().ok(), tls = security.tls().is_some(), "coordinator starting");
    // Agents hear of a restart when their rate stream breaks, then register again (every 500 ms)
    // and re-announce what they hold, one piece per call; three agent timeouts leave a loaded
    // agent with many pieces time to finish.
    let recovering_until = std::time::Instant::now() + std::time::Duration::from_millis(3 * config.agent_timeout_ms);
    let mut core = Core::new(config, policy);
    // Coflow and flow ids from a previous run, which agents re-announce, must not collide with
    // new ones: ids start at the clock in microseconds, so a previous run's ids are below unless
    // it allocated more than one id per microsecond of its life.
    let micros = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros());
    core.set_id_base(micros as u64);
    let (handle, rx) = service::channel();
    let (stop_tx, stop_rx) = watch::channel(false);
    let core_task = tokio::spawn(service::core_loop(core, rx, stop_rx.clone()));
    let metrics_task = metrics.map(|l| {
        let h = handle.clone();
        let render: coflow_proto::Render = Arc::new(move || {
            let h = h.clone();
            Box::pin(async move { h.ask(Event::Metrics).await.unwrap_or_default() })
        });
        tokio::spawn(coflow_proto::serve_metrics(l, render, stop_rx.clone()))
    });
    let svc = service::CoordinatorService {
        core: handle,
        sessions: Default::default(),
        recovering_until,
        restarted: Default::default(),
    };
    let svc = CoordinatorServer::with_interceptor(svc, security.authenticate());
    let router = tonic::transport::Server::builder().tcp_nodelay(true).add_service(svc);
    // Returns with `stop` raised, also when the server failed on its own: the core and metrics
    // tasks end too.
    let served = coflow_proto::serve_until_stopped(router, listener, security.tls(), &stop_tx, shutdown).await;
    let _ = core_task.await;
    if let Some(t) = metrics_task {
        let _ = t.await;
    }
    tracing::info!("coordinator stopped");
    Ok(served?)
}
