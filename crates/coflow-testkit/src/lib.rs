//! An in-process cluster on loopback: a coordinator and N agents on `127.0.0.1:0`, each agent
//! with its own data directory and port cap. Tests and `coflow demo` use it.
//!
//! # Layout
//! One module: [`Cluster`] and [`ClusterConfig`].

#![warn(missing_docs)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use coflow_agent::{AgentConfig, AgentListeners};
use coflow_client::{Client, ClientConfig, ClientError, ClusterToken};
use coflow_coordinator::CoordinatorConfig;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// What to start.
#[derive(Clone, Debug)]
pub struct ClusterConfig {
    /// How many agents (machines 0..n).
    pub agents: u32,
    /// Each agent's port capacity, bytes per second.
    pub port_rate_bps: f64,
    /// The coordinator's settings (its listen addresses are ignored).
    pub coordinator: CoordinatorConfig,
    /// Agent heartbeat interval.
    pub heartbeat_interval_ms: u64,
    /// The cluster token.
    pub token: ClusterToken,
    /// Every agent's settings (limits, timeouts); its machine, addresses, data directory, port
    /// rate and heartbeat interval are set per agent.
    pub agent: AgentConfig,
}

impl ClusterConfig {
    /// `agents` agents at `port_rate_bps`, policy `policy`, bypass off.
    pub fn new(agents: u32, port_rate_bps: f64, policy: &str) -> ClusterConfig {
        ClusterConfig {
            agents,
            port_rate_bps,
            coordinator: CoordinatorConfig {
                policy: policy.to_string(),
                bypass_threshold_bytes: 0,
                heartbeat_interval_ms: 50,
                agent_timeout_ms: 1000,
                push_window_ms: 2,
                ..CoordinatorConfig::default()
            },
            heartbeat_interval_ms: 50,
            token: ClusterToken::new("testkit-token").expect("valid"),
            agent: AgentConfig { data_idle_timeout_ms: 2000, ..AgentConfig::default() },
        }
    }
}

/// Why a cluster could not start.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// A socket or directory.
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    /// A client.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// Agents did not register in time.
    #[error("agents did not all register within 10 s")]
    NotReady,
}

#[derive(Debug)]
struct Service {
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl Service {
    async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        let _ = self.task.await;
    }
}

/// A running cluster.
#[derive(Debug)]
pub struct Cluster {
    /// The coordinator's gRPC address.
    pub coordinator_addr: SocketAddr,
    /// Each agent's gRPC address, by machine.
    pub agent_addrs: Vec<SocketAddr>,
    /// Each agent's data directory, by machine.
    pub data_dirs: Vec<PathBuf>,
    /// The coordinator's metrics address.
    pub coordinator_metrics: SocketAddr,
    /// Each agent's metrics address.
    pub agent_metrics: Vec<SocketAddr>,
    token: ClusterToken,
    root: PathBuf,
    coordinator_config: CoordinatorConfig,
    coordinator: Option<Service>,
    agents: Vec<Option<Service>>,
}

fn start_coordinator(
    cfg: CoordinatorConfig,
    token: ClusterToken,
    listener: TcpListener,
    metrics: TcpListener,
) -> Service {
    let (stop, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let shutdown = async move {
            let _ = rx.await;
        };
        if let Err(e) = coflow_coordinator::run(cfg, token, listener, Some(metrics), shutdown).await {
            tracing::error!(error = %e, "coordinator failed");
        }
    });
    Service { stop: Some(stop), task }
}

static CLUSTERS: AtomicU64 = AtomicU64::new(0);

async fn local() -> std::io::Result<TcpListener> {
    TcpListener::bind("127.0.0.1:0").await
}

impl Cluster {
    /// Starts a coordinator and the agents and waits until every agent is registered.
    pub async fn start(cfg: ClusterConfig) -> Result<Cluster, ClusterError> {
        let root = std::env::temp_dir().join(format!(
            "coflow-cluster-{}-{}",
            std::process::id(),
            CLUSTERS.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&root)?;
        let listener = local().await?;
        let metrics = local().await?;
        let coordinator_addr = listener.local_addr()?;
        let coordinator_metrics = metrics.local_addr()?;
        let coordinator = Some(start_coordinator(cfg.coordinator.clone(), cfg.token.clone(), listener, metrics));
        let mut cluster = Cluster {
            coordinator_addr,
            agent_addrs: Vec::new(),
            data_dirs: Vec::new(),
            coordinator_metrics,
            agent_metrics: Vec::new(),
            token: cfg.token.clone(),
            root,
            coordinator_config: cfg.coordinator.clone(),
            coordinator,
            agents: Vec::new(),
        };
        for m in 0..cfg.agents {
            let dir = cluster.root.join(format!("agent{m}"));
            std::fs::create_dir_all(&dir)?;
            let (grpc, data, metrics) = (local().await?, local().await?, local().await?);
            cluster.agent_addrs.push(grpc.local_addr()?);
            cluster.agent_metrics.push(metrics.local_addr()?);
            let acfg = AgentConfig {
                machine: m,
                coordinator: format!("http://{coordinator_addr}"),
                data_dir: dir.clone(),
                port_rate_bps: cfg.port_rate_bps,
                heartbeat_interval_ms: cfg.heartbeat_interval_ms,
                ..cfg.agent.clone()
            };
            cluster.data_dirs.push(dir);
            let (stop, rx) = oneshot::channel::<()>();
            let token = cfg.token.clone();
            let task = tokio::spawn(async move {
                let shutdown = async move {
                    let _ = rx.await;
                };
                let listeners = AgentListeners { grpc, data, metrics: Some(metrics) };
                if let Err(e) = coflow_agent::run(acfg, token, listeners, shutdown).await {
                    tracing::error!(error = %e, "agent failed");
                }
            });
            cluster.agents.push(Some(Service { stop: Some(stop), task }));
        }
        let client = cluster.client(0).await?;
        for _ in 0..200 {
            let st = client.status().await?;
            if st.agents.iter().filter(|a| a.alive).count() == cfg.agents as usize {
                return Ok(cluster);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(ClusterError::NotReady)
    }

    /// A client on machine `m` (its local agent is agent `m`).
    pub async fn client(&self, m: usize) -> Result<Client, ClientError> {
        self.client_with_token(m, self.token.clone()).await
    }

    /// A client on machine `m` that presents `token`.
    pub async fn client_with_token(&self, m: usize, token: ClusterToken) -> Result<Client, ClientError> {
        let cfg = ClientConfig::new(
            format!("http://{}", self.coordinator_addr),
            format!("http://{}", self.agent_addrs[m]),
            token,
        );
        Client::connect(cfg).await
    }

    /// The cluster's token.
    pub fn token(&self) -> &ClusterToken {
        &self.token
    }

    /// Stops the coordinator and starts a fresh one on the same address: its state is gone, and
    /// agents register again and re-announce the pieces they hold.
    pub async fn restart_coordinator(&mut self) -> Result<(), ClusterError> {
        if let Some(c) = self.coordinator.take() {
            c.stop().await;
        }
        let mut listener = TcpListener::bind(self.coordinator_addr).await;
        for _ in 0..50 {
            if listener.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            listener = TcpListener::bind(self.coordinator_addr).await;
        }
        let metrics = local().await?;
        self.coordinator_metrics = metrics.local_addr()?;
        self.coordinator =
            Some(start_coordinator(self.coordinator_config.clone(), self.token.clone(), listener?, metrics));
        Ok(())
    }

    /// Stops the coordinator for good (until [`Cluster::restart_coordinator`]).
    pub async fn stop_coordinator(&mut self) {
        if let Some(c) = self.coordinator.take() {
            c.stop().await;
        }
    }

    /// Stops agent `m` as if its machine died.
    pub async fn kill_agent(&mut self, m: usize) {
        if let Some(s) = self.agents[m].take() {
            s.stop().await;
        }
    }

    /// Stops every service and removes the data directories.
    pub async fn shutdown(mut self) {
        for a in self.agents.iter_mut() {
            if let Some(s) = a.take() {
                s.stop().await;
            }
        }
        if let Some(c) = self.coordinator.take() {
            c.stop().await;
        }
        let _ = std::fs::remove_dir_all(&self.root);
    }
}
