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
//! - `data`: the TCP data plane, sending (paced) and fetching (checked).
//! - `service`: the gRPC service local clients call.
//! - `link`: registration, rate stream and heartbeats to the coordinator.
//! - `state`: what the tasks share.

#![warn(missing_docs)]

mod bucket;
mod config;
mod data;
mod error;
mod link;
mod service;
mod state;
mod store;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use coflow_proto::Security;
use coflow_proto::pb::agent_server::AgentServer;
use coflow_proto::pb::coordinator_client::CoordinatorClient;
use tokio::net::TcpListener;
use tokio::sync::watch;

pub use crate::bucket::{Grant, TokenBucket, burst_for};
pub use crate::config::{AgentConfig, ConfigError};
pub use crate::error::{AgentError, ERROR_KIND};
pub use crate::store::confine;

/// The largest gRPC message an agent accepts (a put of in-memory bytes): 1 GiB.
pub const MAX_MESSAGE_BYTES: usize = 1 << 30;

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
    /// The gRPC server failed.
    #[error("gRPC: {0}")]
    Transport(#[from] tonic::transport::Error),
    /// The coordinator URL is malformed or does not fit the mode (https:// with TLS).
    #[error("coordinator: {0}")]
    Coordinator(String),
    /// A listener has no address.
    #[error("listener: {0}")]
    Io(#[from] std::io::Error),
}

/// Runs an agent until `shutdown` completes; then stops its servers and tasks and returns.
/// `security` is the cluster token, or the agent's TLS identity ([`Security`]).
pub async fn run(
    config: AgentConfig,
    security: impl Into<Security>,
    listeners: AgentListeners,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), RunError> {
    config.validate()?;
    let security = security.into();
    let data_addr = match &config.data_advertise {
        Some(a) => a.clone(),
        None => listeners.data.local_addr()?.to_string(),
    };
    let channel = security
        .endpoint(&config.coordinator)
        .map_err(RunError::Coordinator)?
        .tcp_nodelay(true)
        .connect_timeout(std::time::Duration::from_secs(5))
        .connect_lazy();
    let coordinator = CoordinatorClient::with_interceptor(channel, security.attach());
    tracing::info!(machine = config.machine, data_addr = %data_addr, tls = security.tls().is_some(), "agent starting");
    let authenticate = security.authenticate();
    let tls = security.tls().cloned();
    let shared = Arc::new(state::Shared::new(config, security, coordinator));
    let (stop_tx, stop_rx) = watch::channel(false);

    let data_task = tokio::spawn(data::serve(listeners.data, shared.clone(), stop_rx.clone()));
    let link_task = tokio::spawn(link::run(shared.clone(), data_addr, stop_rx.clone()));
    let metrics_task = listeners.metrics.map(|l| {
        let s = shared.clone();
        let render: coflow_proto::Render = Arc::new(move || {
            let s = s.clone();
            Box::pin(async move { metrics(&s) })
        });
        tokio::spawn(coflow_proto::serve_metrics(l, render, stop_rx.clone()))
    });
    let svc = service::AgentService { shared: shared.clone(), shutdown: stop_rx.clone() };
    let svc =
        AgentServer::new(svc).max_decoding_message_size(MAX_MESSAGE_BYTES).max_encoding_message_size(MAX_MESSAGE_BYTES);
    let svc = tonic::service::interceptor::InterceptedService::new(svc, authenticate);
    let router = tonic::transport::Server::builder().tcp_nodelay(true).add_service(svc);
    let served = coflow_proto::serve_until_stopped(router, listeners.grpc, tls.as_ref(), &stop_tx, shutdown).await;
    let _ = data_task.await;
    let _ = link_task.await;
    if let Some(t) = metrics_task {
        let _ = t.await;
    }
    tracing::info!("agent stopped");
    Ok(served?)
}

fn metrics(s: &state::Shared) -> String {
    let (pieces, bytes, memory) = s.store.usage();
    let sending = s.sending.lock().expect("sending lock").len();
    let mut out = String::new();
    let mut line = |name: &str, kind: &str, help: &str, v: f64| {
        out.push_str(&format!("# HELP coflow_agent_{name} {help}\n# TYPE coflow_agent_{name} {kind}\n"));
        out.push_str(&format!("coflow_agent_{name}{{machine=\"{}\"}} {v}\n", s.config.machine));
    };
    let registered = if s.session() == 0 { 0.0 } else { 1.0 };
    line(
        "registered",
        "gauge",
        "1 once the agent holds a session with the coordinator (it serves clients).",
        registered,
    );
    line("tx_bytes_total", "counter", "Bytes sent to other agents.", s.tx_bytes.load(Ordering::Relaxed) as f64);
    line("rx_bytes_total", "counter", "Bytes received from other agents.", s.rx_bytes.load(Ordering::Relaxed) as f64);
    line("puts_total", "counter", "Pieces put.", s.puts.load(Ordering::Relaxed) as f64);
    line("gets_total", "counter", "Gets served to local clients.", s.gets.load(Ordering::Relaxed) as f64);
    line("get_failures_total", "counter", "Gets that failed.", s.get_failures.load(Ordering::Relaxed) as f64);
    line("pieces", "gauge", "Pieces held.", pieces as f64);
    line("piece_bytes", "gauge", "Bytes of the pieces held (in memory and in file segments).", bytes as f64);
    line("stored_bytes", "gauge", "Bytes of pieces held in memory (bounded by max_stored_bytes).", memory as f64);
    let conns = s.data_connections.load(Ordering::Relaxed);
    line("data_connections", "gauge", "Data connections being served.", conns as f64);
    let receiving = s.receiving.lock().expect("receiving lock").len();
    line("flows_receiving", "gauge", "Remote gets in progress.", receiving as f64);
    line("flows_sending", "gauge", "Flows being sent.", sending as f64);
    line("port_rate_bytes_per_second", "gauge", "Configured port capacity.", s.config.port_rate_bps);
    out
}
