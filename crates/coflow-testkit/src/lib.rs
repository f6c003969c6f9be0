//! An in-process cluster on loopback: a coordinator and N agents on `127.0.0.1:0`, each agent
//! with its own data directory and port cap, in token mode or (with [`ClusterConfig::tls`])
//! mutual TLS with certificates made for it in a temporary directory. Tests and `coflow demo`
//! use it.
//!
//! # Layout
//! - this file: [`Cluster`] and [`ClusterConfig`];
//! - `path`: a `tracing` layer recording the steps of each get, to see where its time goes;
//! - `bench`: the live system's benchmark (`coflow bench-live`): the control path, control
//!   throughput through phantom agents, decisions, rate accuracy;
//! - `replay`: a workload replayed with real bytes under a policy, measured against the
//!   simulator (`coflow demo`), as the testbed replays it.

#![warn(missing_docs)]

pub mod bench;
pub mod path;
pub mod replay;

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use coflow_agent::{AgentConfig, AgentListeners};
use coflow_client::{Client, ClientConfig, ClientError, ClusterToken, TlsFiles};
use coflow_coordinator::CoordinatorConfig;
use coflow_proto::certs::{CertAuthority, CertError, Subject};
use coflow_proto::{Security, TlsContext, TlsError};
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
    /// The settings of particular agents (by machine) in place of `agent`'s.
    pub agent_by_machine: BTreeMap<u32, AgentConfig>,
    /// Mutual TLS instead of the token: a CA and certificates for the coordinator, each agent
    /// and a client named `testkit` are made in the cluster's temporary directory.
    pub tls: bool,
    /// Agent `m`'s datacenter, on a coordinator that schedules a wide area
    /// (`coordinator.wide_area`); none named past the list's end.
    pub datacenters: Vec<String>,
    /// The agents (by machine) that run on a thread and a runtime of their own, so that
    /// [`Cluster::freeze_agent`] may stop them as a stopped process stops; the others share the
    /// caller's runtime.
    pub apart: Vec<u32>,
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
            agent_by_machine: BTreeMap::new(),
            tls: false,
            datacenters: Vec::new(),
            apart: Vec::new(),
        }
    }

    /// The same over mutual TLS.
    pub fn with_tls(mut self) -> ClusterConfig {
        self.tls = true;
        self
    }
}

/// Why a cluster could not start.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// A socket or file.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// The cluster's private directory could not be made.
    #[error("creating the cluster's directory {}", path.display())]
    Dir {
        /// The directory.
        path: PathBuf,
        /// Why not.
        source: std::io::Error,
    },
    /// A client.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// Agents did not register in time.
    #[error("agents did not all register within 10 s")]
    NotReady,
    /// Certificates could not be made.
    #[error(transparent)]
    Cert(#[from] CertError),
    /// Certificates could not be loaded.
    #[error(transparent)]
    Tls(#[from] TlsError),
}

#[derive(Debug)]
struct Service {
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
    /// For an agent that runs apart, what freezes and ends it.
    apart: Option<Apart>,
}

/// An agent on a thread and a current-thread runtime of its own (the blocking task `task` of
/// its [`Service`]), which ends with the runtime and every task of the agent when the agent
/// stops or `crash` is sent or dropped.
#[derive(Debug)]
struct Apart {
    runtime: tokio::runtime::Handle,
    crash: Option<oneshot::Sender<()>>,
    /// While the agent is frozen: sending or dropping it thaws the agent.
    thaw: Option<std::sync::mpsc::Sender<()>>,
}

impl Service {
    async fn stop(mut self) {
        self.thaw();
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        let _ = self.task.await;
    }

    /// Ends the service at once, as if its process were killed (a frozen agent is thawed for
    /// the moment it takes to end).
    async fn crash(mut self) {
        self.thaw();
        match self.apart.as_mut().and_then(|a| a.crash.take()) {
            Some(crash) => {
                let _ = crash.send(());
            }
            None => self.task.abort(),
        }
        let _ = self.task.await;
    }

    fn thaw(&mut self) {
        if let Some(a) = &mut self.apart {
            a.thaw = None;
        }
    }
}

/// Runs `agent` (its listeners bound on the caller's runtime, moved to the agent's) on a thread
/// and a current-thread runtime of its own.
fn start_apart<F, Fut>(agent: F, listeners: AgentListeners) -> Result<Service, ClusterError>
where
    F: FnOnce(AgentListeners) -> Fut + Send + 'static,
    Fut: Future<Output = ()>,
{
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let handle = runtime.handle().clone();
    let (crash, crashed) = oneshot::channel::<()>();
    let AgentListeners { grpc, data, metrics } = listeners;
    let (grpc, data) = (grpc.into_std()?, data.into_std()?);
    let metrics = metrics.map(TcpListener::into_std).transpose()?;
    let task = tokio::task::spawn_blocking(move || {
        runtime.block_on(async move {
            let listeners = (|| {
                let metrics = metrics.map(TcpListener::from_std).transpose()?;
                Ok::<_, std::io::Error>(AgentListeners {
                    grpc: TcpListener::from_std(grpc)?,
                    data: TcpListener::from_std(data)?,
                    metrics,
                })
            })();
            let listeners = match listeners {
                Ok(l) => l,
                Err(e) => {
                    tracing::error!(error = %e, "the agent's listeners could not move to its runtime");
                    return;
                }
            };
            tokio::select! {
                () = agent(listeners) => {}
                _ = crashed => {}
            }
        });
        // The runtime goes here, and with it every task of the agent and its connections.
    });
    Ok(Service { stop: None, task, apart: Some(Apart { runtime: handle, crash: Some(crash), thaw: None }) })
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
    root: PrivateDir,
    /// The certificates' directory, with TLS.
    tls_dir: Option<PathBuf>,
    coordinator_security: Security,
    coordinator_config: CoordinatorConfig,
    coordinator: Option<Service>,
    agents: Vec<Option<Service>>,
}

fn start_coordinator(cfg: CoordinatorConfig, token: Security, listener: TcpListener, metrics: TcpListener) -> Service {
    let (stop, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let shutdown = async move {
            let _ = rx.await;
        };
        if let Err(e) = coflow_coordinator::run(cfg, token, listener, Some(metrics), shutdown).await {
            tracing::error!(error = %e, "coordinator failed");
        }
    });
    Service { stop: Some(stop), task, apart: None }
}

/// The TLS files of `STEM` (e.g. `agent-3`) in the certificates' directory `dir`.
pub fn files(dir: &Path, stem: &str) -> TlsFiles {
    TlsFiles { ca: dir.join("ca.crt"), cert: dir.join(format!("{stem}.crt")), key: dir.join(format!("{stem}.key")) }
}

/// Distinct, position-dependent bytes for piece `tag` (an xorshift stream seeded by it), so that
/// a swapped, shifted or cut piece fails a comparison with what was put.
pub fn content(tag: u64, len: usize) -> Vec<u8> {
    let mut x = tag.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// The identity of the client that [`make_certs`] issues, which owns what it registers.
pub const CLIENT_IDENTITY: &str = "coflow://client/testkit";

/// A CA and certificates for a loopback cluster of `agents` agents in `dir`: the coordinator,
/// each agent (at 127.0.0.1) and a client named `testkit` ([`CLIENT_IDENTITY`]).
pub fn make_certs(dir: &Path, agents: u32) -> Result<PathBuf, CertError> {
    let ca = CertAuthority::generate()?;
    ca.write(dir, true)?;
    let host = vec!["127.0.0.1".to_string()];
    let mut subjects = vec![Subject::Coordinator { hosts: host.clone() }, Subject::Client { name: "testkit".into() }];
    subjects.extend((0..agents).map(|machine| Subject::Agent { machine, hosts: host.clone() }));
    for s in subjects {
        ca.issue(&s)?.write(dir, &s.file_stem(), true)?;
    }
    Ok(dir.to_path_buf())
}

static CLUSTERS: AtomicU64 = AtomicU64::new(0);

async fn local() -> std::io::Result<TcpListener> {
    TcpListener::bind("127.0.0.1:0").await
}

/// A cluster's directory for keys and data, removed with everything in it when dropped: by
/// [`Cluster::shutdown`], with a cluster dropped without it (a failed test, an interrupted demo),
/// or by a [`Cluster::start`] that fails before it has a cluster.
#[derive(Debug)]
struct PrivateDir(PathBuf);

impl Drop for PrivateDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl std::ops::Deref for PrivateDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

/// A new directory for a cluster's keys and data under the temporary directory, made by this
/// call and readable by its user only: a name someone else made first (the temporary directory
/// is shared) is passed over, never written into.
fn private_dir() -> Result<PrivateDir, ClusterError> {
    let mut builder = std::fs::DirBuilder::new();
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    let mut tries = 0;
    loop {
        let n = CLUSTERS.fetch_add(1, Ordering::Relaxed);
        let root = std::env::temp_dir().join(format!("coflow-cluster-{}-{n}", std::process::id()));
        match builder.create(&root) {
            Ok(()) => return Ok(PrivateDir(root)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && tries < 100 => tries += 1,
            Err(source) => return Err(ClusterError::Dir { path: root, source }),
        }
    }
}

impl Cluster {
    /// Starts a coordinator and the agents and waits until every agent is registered.
    pub async fn start(cfg: ClusterConfig) -> Result<Cluster, ClusterError> {
        let root = private_dir()?;
        let tls_dir = if cfg.tls { Some(make_certs(&root.join("certs"), cfg.agents)?) } else { None };
        let security = |stem: &str| -> Result<Security, ClusterError> {
            Ok(match &tls_dir {
                Some(d) => Security::Tls(TlsContext::load(&files(d, stem))?),
                None => Security::Token(cfg.token.clone()),
            })
        };
        let scheme = if cfg.tls { "https" } else { "http" };
        let listener = local().await?;
        let metrics = local().await?;
        let coordinator_addr = listener.local_addr()?;
        let coordinator_metrics = metrics.local_addr()?;
        let coordinator_security = security("coordinator")?;
        let coordinator =
            Some(start_coordinator(cfg.coordinator.clone(), coordinator_security.clone(), listener, metrics));
        let mut cluster = Cluster {
            coordinator_addr,
            agent_addrs: Vec::new(),
            data_dirs: Vec::new(),
            coordinator_metrics,
            agent_metrics: Vec::new(),
            token: cfg.token.clone(),
            root,
            tls_dir: tls_dir.clone(),
            coordinator_security,
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
                machine: Some(m),
                coordinator: format!("{scheme}://{coordinator_addr}"),
                data_dir: dir.clone(),
                port_rate_bps: cfg.port_rate_bps,
                heartbeat_interval_ms: cfg.heartbeat_interval_ms,
                datacenter: cfg.datacenters.get(m as usize).cloned(),
                ..cfg.agent_by_machine.get(&m).unwrap_or(&cfg.agent).clone()
            };
            cluster.data_dirs.push(dir);
            let (stop, rx) = oneshot::channel::<()>();
            let token = security(&format!("agent-{m}"))?;
            let agent = move |listeners| async move {
                let shutdown = async move {
                    let _ = rx.await;
                };
                if let Err(e) = coflow_agent::run(acfg, token, listeners, shutdown).await {
                    tracing::error!(error = %e, "agent failed");
                }
            };
            let listeners = AgentListeners { grpc, data, metrics: Some(metrics) };
            let service = if cfg.apart.contains(&m) {
                Service { stop: Some(stop), ..start_apart(agent, listeners)? }
            } else {
                Service { stop: Some(stop), task: tokio::spawn(agent(listeners)), apart: None }
            };
            cluster.agents.push(Some(service));
        }
        let client = cluster.client(0).await?;
        for _ in 0..200 {
            let st = client.status().await?;
            // The coordinator counts an agent alive as it answers its registration; the agent
            // serves clients once it has read that answer.
            if st.agents.iter().filter(|a| a.alive).count() == cfg.agents as usize && cluster.agents_registered().await
            {
                return Ok(cluster);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(ClusterError::NotReady)
    }

    /// Whether every agent holds a session with the coordinator, by its metrics page, and says
    /// so on its readiness probe (which follows within a heartbeat).
    async fn agents_registered(&self) -> bool {
        for &addr in &self.agent_metrics {
            if !scrape(addr).await.lines().any(|l| l.starts_with("coflow_agent_registered{") && l.ends_with(" 1"))
                || !http_get(addr, "/readyz").await.starts_with("HTTP/1.0 200")
            {
                return false;
            }
        }
        true
    }

    /// A client on machine `m` (its local agent is agent `m`).
    pub async fn client(&self, m: usize) -> Result<Client, ClientError> {
        self.client_with_token(m, self.token.clone()).await
    }

    /// A client on machine `m` that presents `token` (in a token-mode cluster).
    pub async fn client_with_token(&self, m: usize, token: ClusterToken) -> Result<Client, ClientError> {
        let mut cfg = self.client_config(m);
        cfg.token = Some(token);
        Client::connect(cfg).await
    }

    /// The configuration of a client on machine `m`: the cluster's token, or with TLS the
    /// certificate of client `testkit`.
    pub fn client_config(&self, m: usize) -> ClientConfig {
        let (coordinator, agent) = (self.coordinator_url(), self.agent_url(m));
        match &self.tls_dir {
            Some(d) => ClientConfig::tls(coordinator, agent, files(d, "client-testkit")),
            None => ClientConfig::new(coordinator, agent, self.token.clone()),
        }
    }

    /// The coordinator's URL (`https://` with TLS).
    pub fn coordinator_url(&self) -> String {
        format!("{}://{}", self.scheme(), self.coordinator_addr)
    }

    /// Agent `m`'s gRPC URL (`https://` with TLS).
    pub fn agent_url(&self, m: usize) -> String {
        format!("{}://{}", self.scheme(), self.agent_addrs[m])
    }

    fn scheme(&self) -> &'static str {
        if self.tls_dir.is_some() { "https" } else { "http" }
    }

    /// The directory of the cluster's CA and certificates (`ca.crt`, `ca.key`, `coordinator.*`,
    /// `agent-N.*`, `client-testkit.*`), with TLS.
    pub fn tls_dir(&self) -> Option<&Path> {
        self.tls_dir.as_deref()
    }

    /// The cluster's token.
    pub fn token(&self) -> &ClusterToken {
        &self.token
    }

    /// The identity the cluster's clients speak for: with TLS, the testkit client's; in token
    /// mode, none.
    pub fn client_identity(&self) -> &'static str {
        if self.tls_dir.is_some() { CLIENT_IDENTITY } else { "" }
    }

    /// The credentials of an agent for `machine`, which need not run: the token, or with TLS a
    /// certificate for that machine (issued by the cluster's CA on first use).
    pub fn agent_security(&self, machine: u32) -> Result<Security, ClusterError> {
        let Some(dir) = &self.tls_dir else { return Ok(Security::Token(self.token.clone())) };
        let stem = format!("agent-{machine}");
        if !dir.join(format!("{stem}.crt")).exists() {
            let subject = Subject::Agent { machine, hosts: vec!["127.0.0.1".to_string()] };
            coflow_proto::certs::issue(dir, &subject, false)?;
        }
        Ok(Security::Tls(TlsContext::load(&files(dir, &stem))?))
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
        self.coordinator = Some(start_coordinator(
            self.coordinator_config.clone(),
            self.coordinator_security.clone(),
            listener?,
            metrics,
        ));
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

    /// Ends agent `m` as if its process were killed: its listeners and connections close, and it
    /// neither deregisters nor says goodbye, so the coordinator learns of it only at its agent
    /// timeout.
    pub async fn crash_agent(&mut self, m: usize) {
        if let Some(s) = self.agents[m].take() {
            s.crash().await;
        }
    }

    /// Freezes agent `m`, one that runs apart ([`ClusterConfig::apart`]), as a stopped process
    /// is frozen: its runtime's only thread blocks, so that none of its tasks runs (it neither
    /// heartbeats nor reads nor writes on any connection) while its sockets stay open, and the
    /// kernel's buffers fill as a peer writes. Returns once the agent is frozen; it stays so until
    /// [`Cluster::thaw_agent`] or until it is stopped, crashed or the cluster dropped.
    ///
    /// # Panics
    /// If agent `m` does not run apart or is gone.
    pub async fn freeze_agent(&mut self, m: usize) {
        let apart = self.agents[m].as_mut().and_then(|s| s.apart.as_mut());
        let apart = apart.unwrap_or_else(|| panic!("agent {m} does not run apart (ClusterConfig::apart)"));
        if apart.thaw.is_some() {
            return;
        }
        let (thaw, thawed) = std::sync::mpsc::channel::<()>();
        let (frozen, now_frozen) = oneshot::channel::<()>();
        // Ends when thawed (its sender sent or dropped), or with the runtime.
        drop(apart.runtime.spawn(async move {
            let _ = frozen.send(());
            let _ = thawed.recv();
        }));
        let _ = now_frozen.await;
        apart.thaw = Some(thaw);
    }

    /// Lets a frozen agent run again (nothing if it is not frozen).
    pub fn thaw_agent(&mut self, m: usize) {
        if let Some(s) = &mut self.agents[m] {
            s.thaw();
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
    }
}

/// The Prometheus page at `addr`, or nothing if it cannot be read.
pub async fn scrape(addr: SocketAddr) -> String {
    http_get(addr, "/metrics").await
}

/// The whole HTTP/1.0 answer to `GET path` at `addr` (empty if it cannot be had).
async fn http_get(addr: SocketAddr, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut out = String::new();
    if let Ok(mut s) = tokio::net::TcpStream::connect(addr).await
        && s.write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes()).await.is_ok()
    {
        let _ = s.read_to_string(&mut out).await;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_private_dir_is_its_users_alone_and_goes_with_what_it_holds() {
        let dir = private_dir().unwrap();
        let path = dir.to_path_buf();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o700);
        }
        std::fs::create_dir_all(path.join("agent0")).unwrap();
        std::fs::write(path.join("agent0/piece"), b"bytes").unwrap();
        drop(dir);
        assert!(!path.exists(), "{} is left behind", path.display());
    }
}
