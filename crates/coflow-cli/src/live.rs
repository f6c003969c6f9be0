//! The live services as subcommands: `coflow coordinator`, `coflow agent`, `coflow status` (its
//! own submodule, `status`), and `coflow bench-live` (control-message throughput and rate
//! accuracy, in process over loopback).
//! Each service command reads its TOML config, applies flag overrides, validates and runs the
//! library's `run(config, listener, shutdown)` until SIGTERM or SIGINT.

pub(crate) mod status;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Args;
use coflow_agent::{AgentConfig, AgentListeners};
use coflow_client::{ClusterToken, CoflowOptions, TlsFiles};
use coflow_coordinator::CoordinatorConfig;
use coflow_proto::pb;
use coflow_proto::pb::coordinator_client::CoordinatorClient;
use coflow_testkit::{Cluster, ClusterConfig};
use tokio::net::TcpListener;

/// Where the cluster token comes from: `--token-file`, else `$COFLOW_TOKEN`. Never logged.
#[derive(Debug, Args)]
pub(crate) struct TokenArgs {
    /// A file holding the cluster token (else the COFLOW_TOKEN environment variable).
    #[arg(long, env = "COFLOW_TOKEN_FILE")]
    token_file: Option<PathBuf>,
}

impl TokenArgs {
    pub(crate) fn token(&self) -> Result<ClusterToken> {
        if let Some(p) = &self.token_file {
            return Ok(ClusterToken::from_file(p)?);
        }
        match std::env::var("COFLOW_TOKEN") {
            Ok(t) => ClusterToken::new(&t).context("COFLOW_TOKEN"),
            Err(_) => bail!("no cluster token: pass --token-file or set COFLOW_TOKEN"),
        }
    }
}

/// Mutual TLS files; with them no token is needed. Each overrides the TOML field of its name.
#[derive(Debug, Args)]
pub(crate) struct TlsArgs {
    /// The cluster CA's certificate (from `coflow certs init`).
    #[arg(long, env = "COFLOW_TLS_CA")]
    pub(crate) tls_ca: Option<PathBuf>,
    /// This member's certificate (from `coflow certs issue`).
    #[arg(long, env = "COFLOW_TLS_CERT")]
    pub(crate) tls_cert: Option<PathBuf>,
    /// This member's private key.
    #[arg(long, env = "COFLOW_TLS_KEY")]
    pub(crate) tls_key: Option<PathBuf>,
}

impl TlsArgs {
    /// Puts the flags given over the config's fields.
    fn apply(self, ca: &mut Option<PathBuf>, cert: &mut Option<PathBuf>, key: &mut Option<PathBuf>) {
        for (flag, field) in [(self.tls_ca, ca), (self.tls_cert, cert), (self.tls_key, key)] {
            if flag.is_some() {
                *field = flag;
            }
        }
    }
}

/// TLS if configured (the token is then not read), else the token.
fn security(files: Option<TlsFiles>, token: &TokenArgs) -> Result<coflow_proto::Security> {
    match files {
        Some(f) => Ok(coflow_proto::TlsContext::load(&f)?.into()),
        None => Ok(token.token()?.into()),
    }
}

fn read_toml<T: serde::de::DeserializeOwned + Default>(path: Option<&Path>) -> Result<T> {
    match path {
        None => Ok(T::default()),
        Some(p) => {
            let text = std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            toml::from_str(&text).with_context(|| format!("parsing {}", p.display()))
        }
    }
}

pub(crate) fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread().enable_all().build().context("tokio runtime")
}

/// Resolves on SIGTERM (what systemd and Kubernetes send to stop a service) or SIGINT (Ctrl-C),
/// logging which; the service then stops cleanly.
async fn stop_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        // Without signal handlers the service runs until killed.
        return std::future::pending().await;
    };
    let name = tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    };
    tracing::info!(signal = name, "stopping");
}

/// Options of `coflow coordinator`; flags override the TOML file.
#[derive(Debug, Args)]
pub(crate) struct CoordinatorArgs {
    /// TOML config file (fields of `CoordinatorConfig`).
    #[arg(long, env = "COFLOW_CONFIG")]
    config: Option<PathBuf>,
    /// gRPC listen address.
    #[arg(long, env = "COFLOW_LISTEN")]
    listen: Option<String>,
    /// Prometheus /metrics listen address.
    #[arg(long, env = "COFLOW_METRICS_LISTEN")]
    metrics_listen: Option<String>,
    /// Scheduling policy.
    #[arg(long, env = "COFLOW_POLICY")]
    policy: Option<String>,
    /// Bypass threshold in bytes (0: off).
    #[arg(long, env = "COFLOW_BYPASS_THRESHOLD_BYTES")]
    bypass_threshold_bytes: Option<u64>,
    /// Rate push batching window in milliseconds.
    #[arg(long, env = "COFLOW_PUSH_WINDOW_MS")]
    push_window_ms: Option<u64>,
    #[command(flatten)]
    token: TokenArgs,
    #[command(flatten)]
    tls: TlsArgs,
}

pub(crate) fn coordinator(a: CoordinatorArgs) -> Result<()> {
    let mut cfg: CoordinatorConfig = read_toml(a.config.as_deref())?;
    if let Some(v) = a.listen {
        cfg.listen = v;
    }
    if let Some(v) = a.metrics_listen {
        cfg.metrics_listen = Some(v);
    }
    if let Some(v) = a.policy {
        cfg.policy = v;
    }
    if let Some(v) = a.bypass_threshold_bytes {
        cfg.bypass_threshold_bytes = v;
    }
    if let Some(v) = a.push_window_ms {
        cfg.push_window_ms = v;
    }
    a.tls.apply(&mut cfg.tls_ca, &mut cfg.tls_cert, &mut cfg.tls_key);
    cfg.validate()?;
    let token = security(cfg.tls_files()?, &a.token)?;
    runtime()?.block_on(async move {
        let listener = TcpListener::bind(&cfg.listen).await.with_context(|| format!("binding {}", cfg.listen))?;
        let metrics = match &cfg.metrics_listen {
            Some(m) => Some(TcpListener::bind(m).await.with_context(|| format!("binding {m}"))?),
            None => None,
        };
        coflow_coordinator::run(cfg, token, listener, metrics, stop_signal()).await?;
        Ok(())
    })
}

/// Options of `coflow agent`; flags override the TOML file.
#[derive(Debug, Args)]
pub(crate) struct AgentArgs {
    /// TOML config file (fields of `AgentConfig`).
    #[arg(long, env = "COFLOW_CONFIG")]
    config: Option<PathBuf>,
    /// This machine's id (default: the certificate's, else kept in the data directory, else
    /// assigned by the coordinator).
    #[arg(long, env = "COFLOW_MACHINE")]
    machine: Option<u32>,
    /// The coordinator's URL.
    #[arg(long, env = "COFLOW_COORDINATOR")]
    coordinator: Option<String>,
    /// gRPC listen address for local clients.
    #[arg(long, env = "COFLOW_LISTEN")]
    listen: Option<String>,
    /// Data-plane listen address.
    #[arg(long, env = "COFLOW_DATA_LISTEN")]
    data_listen: Option<String>,
    /// Data-plane address other agents use.
    #[arg(long, env = "COFLOW_DATA_ADVERTISE")]
    data_advertise: Option<String>,
    /// Prometheus /metrics listen address.
    #[arg(long, env = "COFLOW_METRICS_LISTEN")]
    metrics_listen: Option<String>,
    /// Directory file-segment puts are confined to.
    #[arg(long, env = "COFLOW_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Port capacity, e.g. `1Gbps`.
    #[arg(long, env = "COFLOW_PORT_RATE")]
    port_rate: Option<String>,
    /// Register the port capacity but do not enforce it (the network does).
    #[arg(long, env = "COFLOW_UNCAPPED")]
    uncapped: bool,
    #[command(flatten)]
    token: TokenArgs,
    #[command(flatten)]
    tls: TlsArgs,
}

pub(crate) fn agent(a: AgentArgs) -> Result<()> {
    let mut cfg: AgentConfig = read_toml(a.config.as_deref())?;
    if let Some(v) = a.machine {
        cfg.machine = Some(v);
    }
    if let Some(v) = a.coordinator {
        cfg.coordinator = v;
    }
    if let Some(v) = a.listen {
        cfg.listen = v;
    }
    if let Some(v) = a.data_listen {
        cfg.data_listen = v;
    }
    if let Some(v) = a.data_advertise {
        cfg.data_advertise = Some(v);
    }
    if let Some(v) = a.metrics_listen {
        cfg.metrics_listen = Some(v);
    }
    if let Some(v) = a.data_dir {
        cfg.data_dir = v;
    }
    if let Some(v) = a.port_rate {
        let r: coflow_core::Rate = v.parse().with_context(|| format!("--port-rate {v:?}"))?;
        cfg.port_rate_bps = r.bytes_per_sec();
    }
    if a.uncapped {
        cfg.cap_port = false;
    }
    a.tls.apply(&mut cfg.tls_ca, &mut cfg.tls_cert, &mut cfg.tls_key);
    cfg.validate()?;
    std::fs::create_dir_all(&cfg.data_dir).with_context(|| format!("creating {}", cfg.data_dir.display()))?;
    let token = security(cfg.tls_files()?, &a.token)?;
    runtime()?.block_on(async move {
        let grpc = TcpListener::bind(&cfg.listen).await.with_context(|| format!("binding {}", cfg.listen))?;
        let data = TcpListener::bind(&cfg.data_listen).await.with_context(|| format!("binding {}", cfg.data_listen))?;
        let metrics = match &cfg.metrics_listen {
            Some(m) => Some(TcpListener::bind(m).await.with_context(|| format!("binding {m}"))?),
            None => None,
        };
        coflow_agent::run(cfg, token, AgentListeners { grpc, data, metrics }, stop_signal()).await?;
        Ok(())
    })
}

/// Options of `coflow bench-live`.
#[derive(Debug, Args)]
pub(crate) struct BenchLiveArgs {
    /// How long to send control messages, in seconds.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Concurrent senders (each an agent-like gRPC client on its own connection).
    #[arg(long, default_value_t = 32)]
    clients: usize,
}

/// Measures the coordinator's control-message throughput (heartbeats with flow progress, the
/// most frequent message, and register/unregister pairs) over loopback gRPC, and the achieved
/// against the assigned rate of fair-shared flows.
pub(crate) fn bench_live(a: BenchLiveArgs) -> Result<()> {
    if !(a.seconds > 0.0 && a.seconds <= 600.0) || a.clients == 0 {
        bail!("--seconds must be in (0, 600] and --clients at least 1");
    }
    runtime()?.block_on(async move {
        let cluster = Cluster::start(ClusterConfig::new(4, 8_000_000.0, "varys")).await?;
        let url = format!("http://{}", cluster.coordinator_addr);
        let stop = Arc::new(AtomicBool::new(false));
        let count = Arc::new(AtomicU64::new(0));
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..a.clients {
            let channel = tonic::transport::Endpoint::from_shared(url.clone())?.tcp_nodelay(true).connect().await?;
            let mut c = CoordinatorClient::with_interceptor(
                channel,
                coflow_proto::TokenAttach::new(Some(cluster.token().clone())),
            );
            // Each sender heartbeats for a machine of its own, registered first: heartbeats must
            // carry the session of the machine's registration.
            let machine_id = 100 + i as u32;
            let reg = pb::RegisterAgentRequest {
                machine_id,
                data_addr: format!("127.0.0.1:{}", 9000 + i),
                port_rate_bps: 1e8,
                session: 0,
            };
            let session = c.register_agent(reg).await?.into_inner().session;
            let (stop, count) = (stop.clone(), count.clone());
            tasks.spawn(async move {
                let mut k = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    k += 1;
                    let ok = if k.is_multiple_of(4) {
                        match c.register(pb::RegisterRequest { num_flows: 1, options: None }).await {
                            Ok(r) => {
                                let id = r.into_inner().coflow_id;
                                c.unregister(pb::UnregisterRequest { coflow_id: id }).await.is_ok()
                            }
                            Err(_) => false,
                        }
                    } else {
                        let flows = (0..8).map(|f| pb::FlowProgress { flow_id: f, bytes_sent: k }).collect();
                        let hb = pb::HeartbeatRequest { machine_id, flows, tx_bps: 0.0, rx_bps: 0.0, session };
                        c.heartbeat(hb).await.is_ok()
                    };
                    if ok {
                        count.fetch_add(if k.is_multiple_of(4) { 2 } else { 1 }, Ordering::Relaxed);
                    }
                }
            });
        }
        let t = Instant::now();
        tokio::time::sleep(Duration::from_secs_f64(a.seconds)).await;
        stop.store(true, Ordering::Relaxed);
        let n = count.load(Ordering::Relaxed);
        let dt = t.elapsed().as_secs_f64();
        while tasks.join_next().await.is_some() {}
        println!(
            "control messages: {n} in {dt:.2}s = {:.0} messages/s ({} concurrent clients over loopback gRPC; Varys reported 4,000+/s)",
            n as f64 / dt,
            a.clients
        );

        // The core alone, without gRPC: the same heartbeat events handed to it in process.
        let mut core = coflow_coordinator::Core::new(CoordinatorConfig::default(), coflow_sched::policy::by_name("varys")?);
        let now = coflow_core::Nanos::from_secs(1);
        for m in 0..4u32 {
            let reg = coflow_proto::AgentRegistration {
                machine: coflow_core::MachineId(m),
                data_addr: format!("127.0.0.1:{}", 9000 + m).parse()?,
                port_rate: 1e8,
            };
            core.handle_register_agent(now, reg);
        }
        let events = 1_000_000u64;
        let t = Instant::now();
        for k in 0..events {
            let flows = (0..8).map(|f| (coflow_core::FlowId(f), k)).collect();
            let hb = coflow_proto::Heartbeat { machine: coflow_core::MachineId((k % 4) as u32), flows, tx_bps: 0.0, rx_bps: 0.0 };
            core.handle_heartbeat(now, hb);
        }
        let dt = t.elapsed().as_secs_f64();
        println!("core event handling alone: {:.0} events/s (the gRPC stack, not the core, bounds the figure above)", events as f64 / dt);

        // Rate accuracy: two flows from different senders into one receiver; fair gives each
        // half of its port, enforced by each sender's token bucket.
        let c = cluster.client(0).await?;
        let coflow = c.register(2, CoflowOptions::default()).await?;
        let size = 8_000_000usize;
        cluster.client(0).await?.put(coflow, "a", vec![1; size]).await?;
        cluster.client(1).await?.put(coflow, "b", vec![2; size]).await?;
        let r = cluster.client(2).await?;
        let measure = |id: &'static str| {
            let r = r.clone();
            async move {
                let t0 = Instant::now();
                let mut marks = Vec::new();
                let mut n = 0u64;
                r.get_with(coflow, id, |b| {
                    n += b.len() as u64;
                    marks.push((t0.elapsed().as_secs_f64(), n));
                })
                .await?;
                let at = |s: f64| marks.iter().find(|&&(_, b)| b as f64 >= s * n as f64).copied().unwrap_or((0.0, 0));
                let ((t1, b1), (t2, b2)) = (at(0.2), at(0.8));
                anyhow::Ok((b2 - b1) as f64 / (t2 - t1).max(1e-9))
            }
        };
        let (ra, rb) = tokio::join!(measure("a"), measure("b"));
        let assigned = 4_000_000.0;
        for (id, r) in [("a", ra?), ("b", rb?)] {
            println!(
                "flow {id}: assigned {assigned:.0} B/s, achieved {r:.0} B/s, error {:+.2}%",
                (r - assigned) / assigned * 100.0
            );
        }
        cluster.shutdown().await;
        Ok(())
    })
}
