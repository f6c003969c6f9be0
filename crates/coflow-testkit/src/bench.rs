//! The live system's benchmark (`coflow bench-live`): a coordinator and agents in this process
//! on loopback, measured as frameworks and agents use them.
//!
//! - **The control path**: gets of small pieces whose bytes are already at their source, one at
//!   a time, with 1, 100 and 1,000 coflows present (the others are held in the policy by phantom
//!   agents, [`coflow_agent::Phantom`], on machines of their own, so that their bytes cross no port
//!   the measured gets use); per get, the time from the client's call to the first byte at the
//!   receiving agent and to the last byte at the client, and where it went, step by step, from
//!   the services' `coflow::path` events ([`crate::path`]).
//! - **Control throughput**: phantom agents drive flow after flow through the coordinator over
//!   their sessions (announce a put, announce the get, report progress, report the end), as many
//!   at once as the window allows; the rate is the coordinator's own count of the messages its
//!   core applied, over the time. Then the same load, paced at a given rate, while the control
//!   path is measured again.
//! - **Decisions**: the coordinator's core alone, in process, with N coflows present: how many
//!   decisions a second a get and a flow end each cause.
//! - **Rate accuracy**: two flows into one receiver under `fair`, paced by their senders' token
//!   buckets, against the rate the coordinator assigned.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use coflow_agent::Phantom;
use coflow_client::{Client, CoflowId, CoflowOptions};
use coflow_coordinator::{CoordinatorConfig, Core, FlowOutcome};
use coflow_core::{FlowId, MachineId, Nanos};
use serde::Serialize;
use tracing_subscriber::Layer;
use tracing_subscriber::layer::SubscriberExt;

use crate::path::{self, Recorder};
use crate::{Cluster, ClusterConfig, ClusterError, scrape};

/// What to measure.
#[derive(Clone, Debug)]
pub struct LiveBench {
    /// How long the throughput load runs.
    pub load: Duration,
    /// Phantom agents driving the load.
    pub phantoms: u32,
    /// Flows each phantom pair keeps in flight at once, for the highest rate.
    pub window: usize,
    /// Messages a second offered while the control path is measured under load.
    pub load_rate: f64,
    /// Workers per phantom pair offering that load.
    pub paced_workers: usize,
    /// Coflows present while the control path is measured.
    pub present: Vec<usize>,
    /// Gets measured at each level.
    pub gets: usize,
    /// The size of a measured get's piece.
    pub piece_bytes: usize,
    /// Over mutual TLS rather than the token.
    pub tls: bool,
}

impl Default for LiveBench {
    fn default() -> Self {
        LiveBench {
            load: Duration::from_secs(3),
            phantoms: 8,
            window: 8,
            load_rate: 100_000.0,
            paced_workers: 32,
            present: vec![1, 100, 1000],
            gets: 1000,
            piece_bytes: 4096,
            tls: false,
        }
    }
}

/// The control path with some coflows present.
#[derive(Clone, Debug, Serialize)]
pub struct PathRow {
    /// Coflows present (the measured one among them).
    pub coflows: usize,
    /// Gets measured.
    pub gets: usize,
    /// From the client's call to the first byte at the receiving agent.
    pub first_byte_p50_ms: f64,
    /// The same, 99th percentile.
    pub first_byte_p99_ms: f64,
    /// The same, 99.9th percentile.
    pub first_byte_p999_ms: f64,
    /// From the client's call to the last byte at the client.
    pub last_byte_p50_ms: f64,
    /// The same, 99th percentile.
    pub last_byte_p99_ms: f64,
}

/// One step of the control path: between two events of a get.
#[derive(Clone, Debug, Serialize)]
pub struct Step {
    /// What happens in it.
    pub step: String,
    /// Median.
    pub p50_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
}

/// Decisions a second of the coordinator's core alone.
#[derive(Clone, Debug, Serialize)]
pub struct DecisionRow {
    /// Coflows present.
    pub coflows: usize,
    /// Decisions a second (each get and each flow end asks for one).
    pub decisions_per_s: f64,
}

/// Gets a second into one small coflow, by the coordinator's core alone.
#[derive(Clone, Debug, Serialize)]
pub struct WideRow {
    /// The coflow's pieces, each got once.
    pub pieces: usize,
    /// Other coflows registered meanwhile, one piece each and no get.
    pub others: usize,
    /// Gets a second (each judged the coflow small again, then a decision).
    pub gets_per_s: f64,
}

/// A rate assigned and achieved.
#[derive(Clone, Debug, Serialize)]
pub struct RateRow {
    /// The flow.
    pub flow: String,
    /// What the coordinator assigned, bytes a second.
    pub assigned_bps: f64,
    /// What the receiver saw between 20% and 80% of the bytes.
    pub achieved_bps: f64,
}

/// What was measured.
#[derive(Clone, Debug, Serialize)]
pub struct LiveReport {
    /// Control messages the coordinator's core applied a second under load.
    pub control_msgs_per_s: f64,
    /// Those messages in all.
    pub control_msgs: u64,
    /// The load's duration.
    pub load_s: f64,
    /// Decisions a second the coordinator made under that load.
    pub decisions_per_s_under_load: f64,
    /// Control messages applied a second under the paced load (`LiveBench::load_rate` offered).
    pub loaded_msgs_per_s: f64,
    /// The control path measured while the paced load ran: median first byte.
    pub loaded_first_byte_p50_ms: f64,
    /// The same, 99th percentile.
    pub loaded_first_byte_p99_ms: f64,
    /// Gets measured under load.
    pub loaded_gets: usize,
    /// The control path at each level of coflows present.
    pub control_path: Vec<PathRow>,
    /// Where the time goes, step by step, with 100 coflows present (or the middle level).
    pub steps: Vec<Step>,
    /// The core alone.
    pub decisions: Vec<DecisionRow>,
    /// The core alone, gets into one small coflow of many pieces.
    pub wide_coflow: Vec<WideRow>,
    /// Rates assigned against achieved.
    pub rate_accuracy: Vec<RateRow>,
}

/// Why the benchmark could not run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The cluster.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// A client call.
    #[error(transparent)]
    Client(#[from] coflow_client::ClientError),
    /// A phantom agent's call.
    #[error("phantom agent: {0}")]
    Phantom(String),
    /// The runtime.
    #[error("runtime: {0}")]
    Runtime(#[from] std::io::Error),
}

fn phantom_error(s: tonic::Status) -> BenchError {
    BenchError::Phantom(format!("{:?}: {}", s.code(), s.message()))
}

/// The value at quantile `q` (0 to 1) of `v`, which it sorts; 0 for none.
fn quantile(v: &mut [f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[(((v.len() - 1) as f64) * q).round() as usize]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Runs the benchmark on a runtime of its own, whose threads record the services' `coflow::path`
/// events (and log warnings to stderr, filtered by `RUST_LOG`).
pub fn run(cfg: &LiveBench) -> Result<LiveReport, BenchError> {
    let recorder = Recorder::default();
    let targets = tracing_subscriber::filter::Targets::new().with_target(path::TARGET, tracing::Level::DEBUG);
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()));
    let dispatch =
        tracing::Dispatch::new(tracing_subscriber::registry().with(recorder.clone().with_filter(targets)).with(logs));
    let rt = {
        let d = dispatch.clone();
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .on_thread_start(move || std::mem::forget(tracing::dispatcher::set_default(&d)))
            .build()?
    };
    let _main = tracing::dispatcher::set_default(&dispatch);
    let report = rt.block_on(measure(cfg, &recorder));
    rt.shutdown_timeout(Duration::from_secs(5));
    report
}

/// A cluster of 4 agents at 10 Gbit/s under `varys`, nothing bypassed, rates pushed at once.
fn cluster_config(tls: bool) -> ClusterConfig {
    let mut c = ClusterConfig::new(4, 1.25e9, "varys");
    c.coordinator.push_window_ms = 0;
    c.coordinator.heartbeat_interval_ms = 100;
    c.coordinator.agent_timeout_ms = 3000;
    c.heartbeat_interval_ms = 100;
    if tls { c.with_tls() } else { c }
}

async fn measure(cfg: &LiveBench, recorder: &Recorder) -> Result<LiveReport, BenchError> {
    let cluster = Cluster::start(cluster_config(cfg.tls)).await?;
    let (src, dst) = (cluster.client(0).await?, cluster.client(1).await?);
    let piece = vec![7u8; cfg.piece_bytes];
    // Warm up: the clients' connections, the agents' data connection.
    for _ in 0..20 {
        one_get(&src, &dst, &piece).await?;
    }
    recorder.take();
    let phantoms = phantoms(&cluster, cfg.phantoms.max(2)).await?;
    let mut present = Vec::new();
    let mut rows = Vec::new();
    let mut steps = Vec::new();
    let middle = cfg.present.iter().copied().find(|&n| n >= 100).or(cfg.present.last().copied());
    for &n in &cfg.present {
        // The measured get's coflow is one of those present.
        hold(&cluster, &phantoms, &mut present, n.saturating_sub(1)).await?;
        recorder.take();
        let (mut first, mut last) = (Vec::new(), Vec::new());
        let mut samples = Vec::with_capacity(cfg.gets);
        for _ in 0..cfg.gets {
            let s = one_get(&src, &dst, &piece).await?;
            last.push(ms(s.last));
            samples.push(s);
        }
        let marks = path::gets(&recorder.take());
        for s in &samples {
            if let Some(at) = marks.get(&(s.coflow.0, "p".to_string())).and_then(|g| g.at.get("first-byte")) {
                first.push(ms(at.duration_since(s.started)));
            }
        }
        if Some(n) == middle {
            steps = shares(&samples, &marks);
        }
        rows.push(PathRow {
            coflows: n,
            gets: samples.len(),
            first_byte_p50_ms: quantile(&mut first, 0.5),
            first_byte_p99_ms: quantile(&mut first, 0.99),
            first_byte_p999_ms: quantile(&mut first, 0.999),
            last_byte_p50_ms: quantile(&mut last, 0.5),
            last_byte_p99_ms: quantile(&mut last, 0.99),
        });
    }
    release(&cluster, &phantoms, present).await?;
    for p in phantoms {
        p.close().await;
    }
    let pairs = phantoms_pairs(&cluster, cfg).await?;
    let max = load(&cluster, &pairs, cfg.window, None, cfg.load, None).await?;
    let mut paced =
        load(&cluster, &pairs, cfg.paced_workers, Some(cfg.load_rate), cfg.load, Some((&src, &dst, &piece, recorder)))
            .await?;
    drop(pairs);
    let rate_accuracy = rate_accuracy(&cluster).await?;
    cluster.shutdown().await;
    let decisions =
        cfg.present.iter().map(|&n| DecisionRow { coflows: n, decisions_per_s: core_decisions(n) }).collect();
    let wide_coflow = [(1_000, 0), (30_000, 0), (1_000, 20_000)]
        .into_iter()
        .map(|(pieces, others)| WideRow { pieces, others, gets_per_s: core_wide_gets(pieces, others) })
        .collect();
    Ok(LiveReport {
        control_msgs_per_s: max.messages as f64 / max.seconds,
        control_msgs: max.messages,
        load_s: max.seconds,
        decisions_per_s_under_load: max.decisions as f64 / max.seconds,
        loaded_msgs_per_s: paced.messages as f64 / paced.seconds,
        loaded_first_byte_p50_ms: quantile(&mut paced.first, 0.5),
        loaded_first_byte_p99_ms: quantile(&mut paced.first, 0.99),
        loaded_gets: paced.first.len(),
        control_path: rows,
        steps,
        wide_coflow,
        decisions,
        rate_accuracy,
    })
}

/// One measured get.
struct Sample {
    coflow: CoflowId,
    started: Instant,
    last: Duration,
}

/// Registers a coflow of one piece at machine 0 and gets it at machine 1: the get is timed.
async fn one_get(src: &Client, dst: &Client, piece: &[u8]) -> Result<Sample, BenchError> {
    let c = src.register(1, CoflowOptions::default()).await?;
    src.put(c, "p", piece.to_vec()).await?;
    let started = Instant::now();
    dst.get_with(c, "p", |_| {}).await?;
    let last = started.elapsed();
    src.unregister(c).await?;
    Ok(Sample { coflow: c, started, last })
}

/// Where the time of the measured gets went, step by step.
fn shares(samples: &[Sample], marks: &std::collections::HashMap<(u64, String), path::GetSteps>) -> Vec<Step> {
    let pairs: [(&str, &str, &str); 7] = [
        ("client -> agent", "call", "get"),
        ("agent -> coordinator (the grant)", "get", "grant"),
        ("decision and push", "grant", "push"),
        ("rate push -> source agent", "push", "rate"),
        ("grant -> receiving agent -> request sent", "grant", "requested"),
        ("request -> source agent", "requested", "request"),
        ("first block: source -> receiver", "first-write", "first-byte"),
    ];
    let mut out = Vec::new();
    for (name, a, b) in pairs {
        let mut v: Vec<f64> = samples
            .iter()
            .filter_map(|s| {
                let g = marks.get(&(s.coflow.0, "p".to_string()))?;
                let from = if a == "call" { s.started } else { *g.at.get(a)? };
                Some(ms(g.at.get(b)?.saturating_duration_since(from)))
            })
            .collect();
        let p50 = quantile(&mut v, 0.5);
        out.push(Step { step: name.to_string(), p50_ms: p50, p99_ms: quantile(&mut v, 0.99) });
    }
    // The source starts once it has both the rate and the request.
    let mut v: Vec<f64> = samples
        .iter()
        .filter_map(|s| {
            let g = marks.get(&(s.coflow.0, "p".to_string()))?;
            let ready = (*g.at.get("rate")?).max(*g.at.get("request")?);
            Some(ms(g.at.get("first-write")?.saturating_duration_since(ready)))
        })
        .collect();
    let p50 = quantile(&mut v, 0.5);
    out.insert(
        6,
        Step { step: "rate and request in -> first block written".into(), p50_ms: p50, p99_ms: quantile(&mut v, 0.99) },
    );
    out
}

/// The most phantom agents a run takes (`LiveBench::phantoms`).
pub const MAX_PHANTOMS: u32 = 128;

/// The most flows a phantom pair keeps in flight (`LiveBench::window`).
pub const MAX_WINDOW: usize = 256;

/// The most gets measured at each level of coflows present (`LiveBench::gets`).
pub const MAX_GETS: usize = 100_000;

/// The range of messages a second the paced load may offer (`LiveBench::load_rate`).
pub const LOAD_RATE: std::ops::RangeInclusive<f64> = 1.0..=10_000_000.0;

/// The first machine of the phantom agents, after the cluster's own.
const FIRST_PHANTOM_MACHINE: u32 = 100;

/// The machines of the phantom agents of a run with `phantoms` phantoms: those holding coflows
/// while the control path is measured, then those of the load's pairs after them. A machine
/// stays live under its session for a while after its phantom closes, so no two share one.
fn phantom_machines(phantoms: u32) -> (std::ops::Range<u32>, std::ops::Range<u32>) {
    let holding = FIRST_PHANTOM_MACHINE..FIRST_PHANTOM_MACHINE + phantoms;
    let pairs = holding.end..holding.end + 2 * (phantoms / 2).max(1);
    (holding, pairs)
}

/// A phantom's data address: loopback, at a port of its own (a phantom takes no data).
fn phantom_data_addr(machine: u32) -> String {
    format!("127.0.0.1:{}", 9000 + machine - FIRST_PHANTOM_MACHINE)
}

/// A phantom agent for `machine`, speaking for the cluster's client.
async fn phantom(cluster: &Cluster, machine: u32) -> Result<Phantom, BenchError> {
    let p = Phantom::connect(
        &cluster.coordinator_url(),
        &cluster.agent_security(machine)?,
        machine,
        &phantom_data_addr(machine),
        1.25e9,
        Duration::from_millis(100),
        Duration::from_secs(10),
    )
    .await
    .map_err(phantom_error)?;
    Ok(p.for_client(cluster.client_identity()))
}

/// The phantom agents that hold coflows (see [`phantom_machines`]).
async fn phantoms(cluster: &Cluster, n: u32) -> Result<Vec<Phantom>, BenchError> {
    let mut out = Vec::new();
    for machine in phantom_machines(n).0 {
        out.push(phantom(cluster, machine).await?);
    }
    Ok(out)
}

/// A coflow held in the policy: its id, the receiving phantom's index and its flow.
type Held = (CoflowId, usize, FlowId);

/// Holds coflows in the policy until `n` are present: each a flow of 32 GiB between two
/// phantoms, which never moves (a phantom reports no progress).
async fn hold(cluster: &Cluster, phantoms: &[Phantom], held: &mut Vec<Held>, n: usize) -> Result<(), BenchError> {
    let client = cluster.client(0).await?;
    let p = phantoms.len();
    while held.len() < n {
        let k = held.len();
        let (a, mut b) = (k % p, (k + 1 + k / p) % p);
        if a == b {
            b = (k + 2) % p;
        }
        let c = client.register(1, CoflowOptions { name: format!("held-{k}"), ..Default::default() }).await?;
        phantoms[a].put(c, "held", 32 << 30).await.map_err(phantom_error)?;
        let g = phantoms[b].get(c, "held").await.map_err(phantom_error)?;
        held.push((c, b, g.flow));
    }
    Ok(())
}

/// Ends the held flows (their receivers give up) and unregisters their coflows.
async fn release(cluster: &Cluster, phantoms: &[Phantom], held: Vec<Held>) -> Result<(), BenchError> {
    let client = cluster.client(0).await?;
    for (c, b, flow) in held {
        phantoms[b].finished(flow, false);
        client.unregister(c).await?;
    }
    Ok(())
}

/// What a load gave.
struct Load {
    messages: u64,
    decisions: u64,
    seconds: f64,
    first: Vec<f64>,
}

/// The value of a counter on a metrics page.
fn counter(page: &str, name: &str) -> u64 {
    page.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

/// The coordinator's counts of messages applied and decisions made.
async fn counts(cluster: &Cluster) -> (u64, u64) {
    let page = scrape(cluster.coordinator_metrics).await;
    (counter(&page, "coflow_coordinator_messages_total"), counter(&page, "coflow_coordinator_decisions_total"))
}

/// Phantom pairs drive flows through the coordinator for `cfg.load`: `workers` per pair, each
/// flow four messages (the put, the get, a heartbeat with its progress, its end), as fast as the
/// coordinator answers or, with `rate`, at that many messages a second in all. With `measure`,
/// gets of small pieces are timed meanwhile (their first byte at the receiving agent).
#[allow(clippy::too_many_arguments)]
async fn load(
    cluster: &Cluster,
    pairs: &[(Arc<Phantom>, Arc<Phantom>)],
    workers: usize,
    rate: Option<f64>,
    duration: Duration,
    measure: Option<(&Client, &Client, &[u8], &Recorder)>,
) -> Result<Load, BenchError> {
    let stop = Arc::new(AtomicBool::new(false));
    // How many flows failed, and why the first did.
    let failures = Arc::new((AtomicU64::new(0), std::sync::OnceLock::<String>::new()));
    let total = workers * pairs.len();
    // Each worker's flows are this far apart, for the messages of all to come at `rate`.
    let period = rate.map(|r| Duration::from_secs_f64(total as f64 * 4.0 / r));
    let (m0, d0) = counts(cluster).await;
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for (a, b) in pairs {
        // One client registers the coflows of the pair's workers, so that the connections the
        // load holds do not grow with the workers.
        let client = cluster.client(0).await?;
        for w in 0..workers {
            let (a, b, stop, failures, client) = (a.clone(), b.clone(), stop.clone(), failures.clone(), client.clone());
            tasks.spawn(async move {
                let mut coflow = None;
                let mut k = 0u64;
                let mut tick = period.map(|p| {
                    // Spread the workers' ticks over one period.
                    let offset = p.mul_f64(w as f64 / workers as f64);
                    tokio::time::interval_at(tokio::time::Instant::now() + offset, p)
                });
                while !stop.load(Ordering::Relaxed) {
                    if let Some(t) = &mut tick {
                        t.tick().await;
                    }
                    // A coflow per worker, renewed every 1,000 flows so that none grows without end.
                    if k.is_multiple_of(1000) {
                        if let Some(c) = coflow.take() {
                            let _ = client.unregister(c).await;
                        }
                        match client
                            .register(1000, CoflowOptions { name: format!("load-{w}"), ..Default::default() })
                            .await
                        {
                            Ok(c) => coflow = Some(c),
                            Err(e) => {
                                failures.0.fetch_add(1, Ordering::Relaxed);
                                failures.1.get_or_init(|| format!("registering its coflow: {e}"));
                                break;
                            }
                        }
                    }
                    let c = coflow.expect("registered above");
                    let id = format!("f{k}");
                    k += 1;
                    let ok = async {
                        a.put(c, &id, 1000).await?;
                        let g = b.get(c, &id).await?;
                        a.heartbeat(&[(g.flow, 1000)]);
                        b.finished(g.flow, true);
                        Ok::<_, tonic::Status>(())
                    }
                    .await;
                    if let Err(e) = ok {
                        failures.0.fetch_add(1, Ordering::Relaxed);
                        failures.1.get_or_init(|| format!("{:?}: {}", e.code(), e.message()));
                    }
                }
                if let Some(c) = coflow {
                    let _ = client.unregister(c).await;
                }
            });
        }
    }
    let mut samples = Vec::new();
    match measure {
        Some((src, dst, piece, recorder)) => {
            recorder.take();
            while started.elapsed() < duration {
                samples.push(one_get(src, dst, piece).await?);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        None => tokio::time::sleep(duration).await,
    }
    let (m1, d1) = counts(cluster).await;
    let seconds = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    while tasks.join_next().await.is_some() {}
    let first = match measure {
        Some((.., recorder)) => {
            let marks = path::gets(&recorder.take());
            samples
                .iter()
                .filter_map(|s| {
                    let at = marks.get(&(s.coflow.0, "p".to_string()))?.at.get("first-byte")?;
                    Some(ms(at.duration_since(s.started)))
                })
                .collect()
        }
        None => Vec::new(),
    };
    if let Some(first) = failures.1.get() {
        tracing::warn!(failures = failures.0.load(Ordering::Relaxed), first, "some load flows failed");
    }
    Ok(Load { messages: m1.saturating_sub(m0), decisions: d1.saturating_sub(d0), seconds, first })
}

/// Fresh phantom pairs for the load, on machines after those of the phantoms that held coflows
/// (see [`phantom_machines`]).
async fn phantoms_pairs(cluster: &Cluster, cfg: &LiveBench) -> Result<Vec<(Arc<Phantom>, Arc<Phantom>)>, BenchError> {
    let mut out = Vec::new();
    let machines: Vec<u32> = phantom_machines(cfg.phantoms.max(2)).1.collect();
    for pair in machines.chunks(2) {
        let mut two = Vec::new();
        for &machine in pair {
            two.push(Arc::new(phantom(cluster, machine).await?));
        }
        let b = two.pop().expect("two");
        let a = two.pop().expect("two");
        out.push((a, b));
    }
    Ok(out)
}

/// A core running `varys` under `cfg`, with agents on `machines` machines, each watching.
fn core_with_agents(cfg: CoordinatorConfig, machines: u32, now: Nanos) -> Core {
    let mut core = Core::new(cfg, coflow_sched::policy::by_name("varys").expect("registered"));
    for m in 0..machines {
        let a = coflow_proto::AgentRegistration {
            machine: MachineId(m),
            data_addr: format!("127.0.0.1:{}", 9000 + m).parse().expect("an address"),
            port_rate: 1.25e9,
            datacenter: String::new(),
        };
        core.handle_register_agent(now, a).expect("a big switch takes any agent");
        core.handle_watch(now, MachineId(m));
    }
    core
}

/// A put of `size` bytes into `coflow` at `machine`, as a token-mode client announces it.
fn put(
    coflow: CoflowId,
    data_id: &coflow_proto::DataId,
    machine: MachineId,
    size: u64,
) -> coflow_proto::PutAnnouncement {
    coflow_proto::PutAnnouncement {
        coflow,
        data_id: data_id.clone(),
        machine,
        size,
        recovered: false,
        registration: None,
        client: String::new(),
        sealed: false,
    }
}

/// A get of `data_id` of `coflow` by `machine`.
fn get(coflow: CoflowId, data_id: coflow_proto::DataId, machine: MachineId) -> coflow_proto::GetAnnouncement {
    coflow_proto::GetAnnouncement { coflow, data_id, machine, client: String::new(), resume: None, resume_end: None }
}

/// Gets a second of the core alone into one coflow of `pieces` pieces of 100 bytes on 16
/// machines, under the default bypass threshold, with `others` coflows registered that wait for
/// gets (one piece each): each get finds the coflow small again (the most bytes on one port over
/// its pieces and its unfinished flows) and is followed by a decision, as a Spark shuffle of many
/// small blocks asks.
pub fn core_wide_gets(pieces: usize, others: usize) -> f64 {
    let machines = 16u32;
    let mut now = Nanos::from_secs(1);
    let most = CoordinatorConfig::default().max_pieces_per_coflow.max(pieces);
    let cfg = CoordinatorConfig { max_pieces_per_coflow: most, ..CoordinatorConfig::default() };
    let mut core = core_with_agents(cfg, machines, now);
    let reg = || coflow_proto::Registration { num_flows: 0, options: CoflowOptions::default(), ..Default::default() };
    let one = coflow_proto::DataId::new("p").expect("valid");
    for k in 0..others {
        let other = core.handle_register(now, reg()).expect("room");
        core.handle_put(now, put(other, &one, MachineId(k as u32 % machines), 100)).expect("room");
    }
    let c = core.handle_register(now, reg()).expect("room");
    let ids: Vec<coflow_proto::DataId> =
        (0..pieces).map(|k| coflow_proto::DataId::new(format!("p{k}")).expect("valid")).collect();
    for (k, id) in ids.iter().enumerate() {
        core.handle_put(now, put(c, id, MachineId(k as u32 % machines), 100)).expect("room");
    }
    let started = Instant::now();
    for (k, id) in ids.into_iter().enumerate() {
        now = now + Nanos(1_000);
        core.handle_get(now, get(c, id, MachineId((k as u32 + 1) % machines))).expect("a piece");
        core.handle_timeout(now);
        while core.poll_transmit().is_some() {}
    }
    pieces as f64 / started.elapsed().as_secs_f64()
}

/// Decisions a second of the core alone with `n` coflows present (one flow each, on 16
/// machines): each round announces a small flow's get, decides, ends it and decides again.
pub fn core_decisions(n: usize) -> f64 {
    use coflow_proto::{DataId, Registration};
    let cfg = CoordinatorConfig { bypass_threshold_bytes: 0, ..CoordinatorConfig::default() };
    let mut now = Nanos::from_secs(1);
    let machines = 16u32;
    let mut core = core_with_agents(cfg, machines, now);
    let flow = |core: &mut Core, now: Nanos, k: usize, size: u64| {
        let c = core
            .handle_register(
                now,
                Registration { num_flows: 1, options: CoflowOptions::default(), ..Default::default() },
            )
            .expect("room");
        let (src, dst) = (MachineId(k as u32 % machines), MachineId((k as u32 + 1 + k as u32 / machines) % machines));
        let dst = if dst == src { MachineId((src.0 + 1) % machines) } else { dst };
        let data_id = DataId::new("p").expect("valid");
        core.handle_put(now, put(c, &data_id, src, size)).expect("a live agent");
        let g = core.handle_get(now, get(c, data_id, dst)).expect("a piece");
        (c, g.flow, dst)
    };
    for k in 0..n.saturating_sub(1) {
        flow(&mut core, now, k, 32 << 30);
    }
    core.handle_timeout(now);
    while core.poll_transmit().is_some() {}
    let before = core.counters().decisions;
    let started = Instant::now();
    let mut k = 0;
    while started.elapsed() < Duration::from_millis(500) || k < 10 {
        now = now + Nanos(10_000);
        if k % 1000 == 0 {
            // The agents report, so that none times out in the core's clock.
            for m in 0..machines {
                let hb = coflow_proto::Heartbeat {
                    machine: MachineId(m),
                    flows: Vec::new(),
                    tx_bps: 0.0,
                    rx_bps: 0.0,
                    unread: Vec::new(),
                };
                core.handle_heartbeat(now, hb);
            }
        }
        let (c, f, dst): (CoflowId, FlowId, MachineId) = flow(&mut core, now, k, 4096);
        core.handle_timeout(now);
        core.handle_flow_finished(now, dst, f, FlowOutcome::Completed).expect("its receiver");
        core.handle_timeout(now);
        core.handle_unregister(now, "", c).expect("registered");
        while core.poll_transmit().is_some() {}
        k += 1;
    }
    (core.counters().decisions - before) as f64 / started.elapsed().as_secs_f64()
}

/// Two flows from different senders into one receiver under `fair`: each gets half the
/// receiver's port, enforced by its sender's token bucket.
async fn rate_accuracy(_cluster: &Cluster) -> Result<Vec<RateRow>, BenchError> {
    let cluster = Cluster::start(ClusterConfig::new(3, 8_000_000.0, "fair")).await?;
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
            Ok::<_, BenchError>((b2 - b1) as f64 / (t2 - t1).max(1e-9))
        }
    };
    let (ra, rb) = tokio::join!(measure("a"), measure("b"));
    let mut out = Vec::new();
    for (id, r) in [("a", ra?), ("b", rb?)] {
        out.push(RateRow { flow: id.to_string(), assigned_bps: 4_000_000.0, achieved_bps: r });
    }
    cluster.shutdown().await;
    Ok(out)
}

/// The report as the lines `coflow bench-live` prints.
impl LiveReport {
    /// The report as a table.
    pub fn table(&self) -> String {
        let mut s = String::new();
        s.push_str(
            "control path (client's get to first byte at the receiving agent; last byte at the client), loopback:\n",
        );
        s.push_str(&format!(
            "{:>8} {:>6} {:>10} {:>10} {:>11} {:>10} {:>10}\n",
            "coflows", "gets", "first p50", "first p99", "first p99.9", "last p50", "last p99"
        ));
        for r in &self.control_path {
            s.push_str(&format!(
                "{:>8} {:>6} {:>8.3}ms {:>8.3}ms {:>9.3}ms {:>8.3}ms {:>8.3}ms\n",
                r.coflows,
                r.gets,
                r.first_byte_p50_ms,
                r.first_byte_p99_ms,
                r.first_byte_p999_ms,
                r.last_byte_p50_ms,
                r.last_byte_p99_ms
            ));
        }
        s.push_str("\nwhere it goes (the level nearest 100 coflows):\n");
        for st in &self.steps {
            s.push_str(&format!("  {:<44} p50 {:>7.3} ms  p99 {:>7.3} ms\n", st.step, st.p50_ms, st.p99_ms));
        }
        s.push_str(&format!(
            "\ncontrol throughput: {} messages applied by the coordinator's core in {:.2} s = {:.0} messages/s ({:.0} decisions/s)\n",
            self.control_msgs, self.load_s, self.control_msgs_per_s, self.decisions_per_s_under_load
        ));
        s.push_str(&format!(
            "control path under a load of {:.0} messages/s: first byte p50 {:.3} ms, p99 {:.3} ms ({} gets)\n",
            self.loaded_msgs_per_s, self.loaded_first_byte_p50_ms, self.loaded_first_byte_p99_ms, self.loaded_gets
        ));
        s.push_str("\nthe coordinator's core alone (varys), decisions a second:\n");
        for d in &self.decisions {
            s.push_str(&format!("{:>8} coflows present: {:>10.0} decisions/s\n", d.coflows, d.decisions_per_s));
        }
        s.push_str("\nthe coordinator's core alone, gets into one small coflow, gets a second:\n");
        for w in &self.wide_coflow {
            s.push_str(&format!(
                "{:>8} pieces, {:>6} other coflows registered: {:>10.0} gets/s\n",
                w.pieces, w.others, w.gets_per_s
            ));
        }
        s.push('\n');
        for r in &self.rate_accuracy {
            s.push_str(&format!(
                "flow {}: assigned {:.0} B/s, achieved {:.0} B/s, error {:+.2}%\n",
                r.flow,
                r.assigned_bps,
                r.achieved_bps,
                (r.achieved_bps - r.assigned_bps) / r.assigned_bps * 100.0
            ));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::{FIRST_PHANTOM_MACHINE, MAX_PHANTOMS, phantom_data_addr, phantom_machines};

    /// For every number of phantoms a run takes, the phantoms that hold coflows and those of the
    /// load's pairs are on machines of their own, after the cluster's agents, each at a data
    /// address of its own.
    #[test]
    fn phantom_machines_do_not_overlap() {
        for n in 2..=MAX_PHANTOMS {
            let (holding, pairs) = phantom_machines(n);
            assert_eq!(holding.len(), n as usize);
            assert_eq!(pairs.len(), 2 * (n / 2) as usize);
            assert!(holding.start >= FIRST_PHANTOM_MACHINE && holding.end <= pairs.start, "{n}: {holding:?} {pairs:?}");
            let addrs: std::collections::HashSet<String> = holding.chain(pairs).map(phantom_data_addr).collect();
            assert_eq!(addrs.len(), n as usize + 2 * (n / 2) as usize);
            assert!(addrs.iter().all(|a| a.parse::<std::net::SocketAddr>().is_ok()));
        }
    }
}
