//! Wide-area runs (`coflow sim --wan`) and the Monte Carlo decision benchmark (`coflow wan-bench`).
//!
//! The topology file is JSON, documented in `docs/wan-topology.md`; `default` is the embedded
//! three-datacenter topology [`DEFAULT_TOPOLOGY`].

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::Args;
use coflow_core::{Nanos, Workload};
use coflow_sched::policy::{MonteCarlo, Needs, Params, Unservable};
use coflow_sched::{
    Allocation, Bandwidth, Fabric, Input, Link, Scheduler, Select, ServiceModel, SiphonConfig, SiphonMc, Wan,
};
use coflow_sim::{SimConfig, SimResult, WanConfig, WanSummary, simulate_wan};
use serde::{Deserialize, Serialize};

use crate::parallel::parallel_map;
use crate::sim::{SimPlan, write_json};

/// The built-in topology (`--wan default`): three datacenters, as Siphon's inter-coflow testbed
/// (Victoria, Toronto, Montreal), with links of unequal means and unequal spreads, sized so that
/// the Facebook trace spread evenly over them loads each link to about 0.5–0.7 on average.
pub(crate) const DEFAULT_TOPOLOGY: &str = include_str!("../../../docs/wan-default.json");

/// Options of wide-area runs.
#[derive(Debug, Args)]
pub(crate) struct WanArgs {
    /// Replay on a wide-area fabric: a topology file (JSON, see docs/wan-topology.md) or
    /// `default` (three datacenters with unequal, fluctuating links). Reports Siphon's figures
    /// against `mrtf`.
    #[arg(long, value_name = "FILE|default")]
    wan: Option<String>,
    /// Place machines in blocks of N per datacenter (machine m in datacenter m / N), overriding
    /// the topology's placement; by default machines are spread evenly (Siphon §5.3).
    #[arg(long, value_name = "N", requires = "wan")]
    machines_per_dc: Option<u32>,
    /// Route part of each arriving coflow's bytes over two-hop detours by water-filling (§3.3).
    #[arg(long, requires = "wan")]
    multipath: bool,
    /// Redraw link capacities every this many milliseconds, overriding the topology's
    /// `redraw_ms`; 0 never redraws (capacities stay at their means).
    #[arg(long, value_name = "MS", requires = "wan")]
    redraw_ms: Option<u64>,
    /// Per-connection bandwidth: every flow crossing a link gets its own throughput, drawn from
    /// the link's distribution when it starts and held, which caps its rate; the link's capacity
    /// still bounds their sum (proportional policies only).
    #[arg(long, requires = "wan")]
    per_connection: bool,
    /// With per-connection bandwidth, redraw every connection's throughput every this many
    /// milliseconds, overriding the topology's `connection_redraw_ms`; 0 holds it for the flow's
    /// life (the default).
    #[arg(long, value_name = "MS", requires = "wan")]
    connection_redraw_ms: Option<u64>,
    #[command(flatten)]
    mc: McArgs,
}

/// Parameters of `siphon-mc` in wide-area runs (defaults: `SiphonConfig::default()`).
#[derive(Debug, Args)]
pub(crate) struct McArgs {
    /// Most Monte Carlo rounds per search.
    #[arg(long, default_value_t = SiphonConfig::default().rounds, requires = "wan")]
    mc_rounds: u32,
    /// Positions of the order searched; the rest follows MRTF on median bandwidth.
    #[arg(long, default_value_t = SiphonConfig::default().depth, requires = "wan")]
    mc_depth: usize,
    /// Coflows (first by MRTF on medians) that may take the searched positions.
    #[arg(long, default_value_t = SiphonConfig::default().breadth, requires = "wan")]
    mc_breadth: usize,
    /// Enforce the candidate of least mean total CCT over all rounds instead of the one best in
    /// most rounds.
    #[arg(long, requires = "wan")]
    mc_mean_cost: bool,
    /// One bandwidth draw per coflow and link, as the paper, instead of averaging one draw per
    /// redraw interval the node is expected to last.
    #[arg(long, requires = "wan")]
    mc_one_draw: bool,
}

impl WanArgs {
    /// Whether a wide-area run was asked for.
    pub(crate) fn enabled(&self) -> bool {
        self.wan.is_some()
    }
}

/// A topology file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TopologyFile {
    datacenters: Vec<String>,
    links: Vec<LinkSpec>,
    #[serde(default)]
    redraw_ms: Option<u64>,
    #[serde(default)]
    machines_per_dc: Option<u32>,
    #[serde(default)]
    placement: Option<Vec<String>>,
    #[serde(default)]
    per_connection: bool,
    #[serde(default)]
    connection_redraw_ms: Option<u64>,
}

/// A parsed topology: the fabric, the capacity redraw interval, and per-connection bandwidth
/// (`Some(redraw)`, `Nanos::MAX` to hold a connection's draw for its life) or none.
pub(crate) type Topology = (Fabric, Nanos, Option<Nanos>);

/// How the command line changes a topology file's per-connection settings.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ConnectionArgs {
    /// `--per-connection`: on even if the file says nothing.
    pub(crate) on: bool,
    /// `--connection-redraw-ms`.
    pub(crate) redraw_ms: Option<u64>,
}

/// One link: its ends and exactly one bandwidth distribution, in Gbit/s.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LinkSpec {
    from: String,
    to: String,
    #[serde(default)]
    constant_gbps: Option<f64>,
    #[serde(default)]
    uniform_gbps: Option<[f64; 2]>,
    #[serde(default)]
    normal_gbps: Option<NormalSpec>,
    #[serde(default)]
    samples_gbps: Option<Vec<f64>>,
    #[serde(default)]
    samples_file: Option<PathBuf>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NormalSpec {
    mean: f64,
    sd: f64,
    min: f64,
}

/// Bytes per second in a Gbit/s.
const GBPS: f64 = 125_000_000.0;

/// The redraw interval when the topology names none.
const DEFAULT_REDRAW_MS: u64 = 5_000;

/// A parsed topology: the fabric for `machines` machines and the redraw interval.
pub(crate) fn load_topology(
    spec: &str,
    machines: u32,
    per_dc: Option<u32>,
    redraw_ms: Option<u64>,
    conn: ConnectionArgs,
) -> Result<Topology> {
    let (text, base) = if spec == "default" {
        (DEFAULT_TOPOLOGY.to_string(), None)
    } else {
        let p = Path::new(spec);
        (std::fs::read_to_string(p).with_context(|| format!("reading topology {spec}"))?, p.parent())
    };
    parse_topology(&text, base, machines, per_dc, redraw_ms, conn).with_context(|| format!("topology {spec}"))
}

fn parse_topology(
    text: &str,
    base: Option<&Path>,
    machines: u32,
    per_dc: Option<u32>,
    redraw_ms: Option<u64>,
    conn: ConnectionArgs,
) -> Result<Topology> {
    let f: TopologyFile = serde_json::from_str(text).context("parsing JSON")?;
    let dc = |name: &str| -> Result<u32> {
        f.datacenters
            .iter()
            .position(|d| d == name)
            .map(|i| i as u32)
            .with_context(|| format!("no datacenter {name:?}"))
    };
    let mut links = Vec::new();
    for (i, l) in f.links.iter().enumerate() {
        let set = [
            l.constant_gbps.is_some(),
            l.uniform_gbps.is_some(),
            l.normal_gbps.is_some(),
            l.samples_gbps.is_some(),
            l.samples_file.is_some(),
        ];
        if set.iter().filter(|&&s| s).count() != 1 {
            bail!("link {i} ({} -> {}): give exactly one bandwidth distribution", l.from, l.to);
        }
        let bandwidth = if let Some(v) = l.constant_gbps {
            Bandwidth::Constant(v * GBPS)
        } else if let Some([lo, hi]) = l.uniform_gbps {
            Bandwidth::Uniform(lo * GBPS, hi * GBPS)
        } else if let Some(n) = &l.normal_gbps {
            Bandwidth::Normal { mean: n.mean * GBPS, sd: n.sd * GBPS, min: n.min * GBPS }
        } else if let Some(s) = &l.samples_gbps {
            Bandwidth::Empirical(s.iter().map(|v| v * GBPS).collect())
        } else {
            let rel = l.samples_file.as_ref().expect("checked: one is set");
            let path = base.map_or_else(|| rel.clone(), |b| b.join(rel));
            let text = std::fs::read_to_string(&path).with_context(|| format!("reading samples {}", path.display()))?;
            let mut samples = Vec::new();
            for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty() && !l.starts_with('#')) {
                let v: f64 =
                    line.trim().parse().with_context(|| format!("{} line {}: not a number", path.display(), n + 1))?;
                samples.push(v * GBPS);
            }
            Bandwidth::Empirical(samples)
        };
        links.push(Link { from: dc(&l.from)?, to: dc(&l.to)?, bandwidth });
    }
    let dcs = f.datacenters.len() as u32;
    if dcs == 0 {
        bail!("no datacenters");
    }
    let placement = match (&f.placement, per_dc.or(f.machines_per_dc)) {
        (Some(p), None) => {
            if (p.len() as u32) < machines {
                bail!("placement names {} machines, the workload has {machines}", p.len());
            }
            p.iter().map(|d| dc(d)).collect::<Result<Vec<u32>>>()?
        }
        (_, Some(0)) => bail!("machines per datacenter must be at least 1"),
        (_, per) => {
            if let Some(n) = per
                && u64::from(n) * u64::from(dcs) < u64::from(machines)
            {
                bail!("{n} machines per datacenter in {dcs} datacenters cannot hold {machines} machines");
            }
            Wan::spread(dcs, machines, per)
        }
    };
    let wan = Wan::new(f.datacenters.clone(), links, placement)?;
    let redraw = match redraw_ms.or(f.redraw_ms).unwrap_or(DEFAULT_REDRAW_MS) {
        0 => Nanos::MAX,
        ms => Nanos::from_millis(ms),
    };
    let per_connection = f.per_connection || conn.on;
    if !per_connection && (f.connection_redraw_ms.is_some() || conn.redraw_ms.is_some()) {
        bail!("connection_redraw_ms needs per-connection bandwidth (\"per_connection\": true or --per-connection)");
    }
    let per_connection = per_connection.then(|| match conn.redraw_ms.or(f.connection_redraw_ms).unwrap_or(0) {
        0 => Nanos::MAX,
        ms => Nanos::from_millis(ms),
    });
    Ok((Fabric::new(wan), redraw, per_connection))
}

/// The JSON report of a wide-area run.
#[derive(Debug, Serialize)]
struct JsonReport<'a> {
    workload: crate::sim::JsonWorkload<'a>,
    topology: &'a str,
    links: Vec<JsonLink>,
    redraw_ms: Option<u64>,
    multipath: bool,
    per_connection: bool,
    connection_redraw_ms: Option<u64>,
    seed: u64,
    baseline: &'static str,
    results: &'a [WanSummary],
}

#[derive(Debug, Serialize)]
struct JsonLink {
    name: String,
    mean_gbps: f64,
    median_gbps: f64,
}

/// `coflow sim --wan`: runs the policies on the wide-area fabric, `mrtf` among them as the
/// baseline, and prints Siphon's figures.
pub(crate) fn run(plan: &SimPlan, a: &WanArgs, json: Option<&Path>) -> Result<()> {
    let spec = a.wan.as_deref().expect("checked by the caller");
    let conn = ConnectionArgs { on: a.per_connection, redraw_ms: a.connection_redraw_ms };
    let (fabric, redraw, per_connection) =
        load_topology(spec, plan.workload.machines, a.machines_per_dc, a.redraw_ms, conn)?;
    // The registry says which policies cannot serve the wide area; they are skipped, grouped by
    // what they assume.
    let refused: Vec<Unservable> =
        plan.policies.iter().filter_map(|p| coflow_sched::policy::check_serves(p, &fabric).err()).collect();
    let mut needs: Vec<Needs> = Vec::new();
    for u in &refused {
        if !needs.contains(&u.needs) {
            needs.push(u.needs);
        }
    }
    for need in needs {
        let names: Vec<&str> = refused.iter().filter(|u| u.needs == need).map(|u| u.policy.as_str()).collect();
        eprintln!("skipping {}: they assume {}", names.join(", "), need.assumption());
    }
    let policies: Vec<&'static str> =
        plan.policies.iter().copied().filter(|p| !refused.iter().any(|u| u.policy == *p)).collect();
    if policies.is_empty() {
        bail!("no policy left to run on the wide area");
    }
    let cfg = WanConfig { fabric, redraw, seed: plan.seed, multipath: a.multipath, per_connection };
    // Per-connection caps are per leg; route-model policies pool flows by route.
    let pooled: Vec<&str> = if per_connection.is_some() {
        policies
            .iter()
            .copied()
            .filter(|p| coflow_sched::policy::by_name(p).is_ok_and(|s| s.model() == ServiceModel::Route))
            .collect()
    } else {
        Vec::new()
    };
    if !pooled.is_empty() {
        eprintln!(
            "skipping {}: per-connection bandwidth caps flows one by one, and they pool flows by route",
            pooled.join(", ")
        );
    }
    let policies: Vec<&'static str> = policies.into_iter().filter(|p| !pooled.contains(p)).collect();
    if policies.is_empty() {
        bail!("no policy left to run with per-connection bandwidth");
    }
    println!("{}", plan.describe().split("; ports at").next().unwrap_or_default());
    println!("{}", describe(&cfg));
    let mut to_run = policies.clone();
    if !to_run.contains(&"mrtf") {
        to_run.push("mrtf");
    }
    let started = Instant::now();
    let runs = run_parallel(&plan.workload, &to_run, &cfg, plan.seed, plan.threads, &a.mc);
    let wall = started.elapsed();
    let base = runs.iter().map(|(r, _)| r).find(|r| r.policy == "mrtf");
    let shown: Vec<&(SimResult, f64)> = runs.iter().filter(|(r, _)| policies.contains(&r.policy.as_str())).collect();
    let summaries: Vec<WanSummary> = shown.iter().map(|(r, _)| WanSummary::against(r, base)).collect();
    print!("{}", table(&summaries, &shown.iter().map(|(_, w)| *w).collect::<Vec<_>>()));
    if plan.workload.has_dependencies() {
        println!("\n{:<16} {:>12} {:>12}", "jobs", "avg JCT s", "p95 JCT s");
        for s in &summaries {
            println!("{:<16} {:>12.3} {:>12.3}", s.policy, s.job_avg_jct_s, s.job_p95_jct_s);
        }
    }
    eprintln!("simulated {} policies in {:.2} s wall time on {} threads", runs.len(), wall.as_secs_f64(), plan.threads);
    if let Some(path) = json {
        let wan = cfg.fabric.topology::<Wan>().expect("a wide-area fabric");
        let report = JsonReport {
            workload: plan.json_workload(),
            topology: spec,
            links: (0..wan.links().len())
                .map(|r| JsonLink {
                    name: wan.link_name(r as u32),
                    mean_gbps: wan.links()[r].bandwidth.mean() / GBPS,
                    median_gbps: wan.links()[r].bandwidth.median() / GBPS,
                })
                .collect(),
            redraw_ms: (cfg.redraw != Nanos::MAX).then_some(cfg.redraw.0 / 1_000_000),
            multipath: cfg.multipath,
            per_connection: cfg.per_connection.is_some(),
            connection_redraw_ms: cfg.per_connection.filter(|&r| r != Nanos::MAX).map(|r| r.0 / 1_000_000),
            seed: plan.seed,
            baseline: "mrtf",
            results: &summaries,
        };
        write_json(path, &report)?;
    }
    Ok(())
}

fn describe(cfg: &WanConfig) -> String {
    let wan = cfg.fabric.topology::<Wan>().expect("a wide-area fabric");
    let mut t = String::new();
    let _ = write!(t, "wide area: {} datacenters;", wan.dcs());
    for (r, l) in wan.links().iter().enumerate() {
        let _ = write!(t, " {} {:.1} Gbit/s;", wan.link_name(r as u32), l.bandwidth.mean() / GBPS);
    }
    let redraw = if cfg.redraw == Nanos::MAX { "never".to_string() } else { format!("every {}", cfg.redraw) };
    let _ = write!(t, " capacities redrawn {redraw}; multi-path {}", if cfg.multipath { "on" } else { "off" });
    match cfg.per_connection {
        None => {}
        Some(Nanos::MAX) => t.push_str("; per-connection bandwidth, held for each flow's life"),
        Some(r) => {
            let _ = write!(t, "; per-connection bandwidth, redrawn every {r}");
        }
    }
    t
}

/// Runs each policy on its own thread, at most `threads` at once; results in the order asked,
/// each with its wall time in seconds.
fn run_parallel(
    w: &Workload,
    policies: &[&str],
    cfg: &WanConfig,
    seed: u64,
    threads: usize,
    mc: &McArgs,
) -> Vec<(SimResult, f64)> {
    let sim = SimConfig { check_invariants: false, ..SimConfig::default() };
    parallel_map(policies.len(), threads, |i| {
        let started = Instant::now();
        let sched = build(policies[i], seed, cfg.redraw, mc);
        let r = simulate_wan(w, sched, &sim, cfg, &mut |_| {}).expect("refused policies were skipped");
        (r, started.elapsed().as_secs_f64())
    })
}

/// The policy `name` from the registry; `siphon-mc` knows how long a bandwidth draw holds (the
/// redraw interval) and takes the Monte Carlo options.
fn build(name: &str, seed: u64, redraw: Nanos, mc: &McArgs) -> Box<dyn Scheduler> {
    let params = Params {
        seed,
        redraw: (redraw != Nanos::MAX).then_some(redraw),
        mc: MonteCarlo {
            rounds: mc.mc_rounds,
            depth: mc.mc_depth,
            breadth: mc.mc_breadth,
            select: if mc.mc_mean_cost { Select::MeanCost } else { Select::Wins },
            one_draw: mc.mc_one_draw,
        },
    };
    coflow_sched::policy::build(name, &params).expect("names were validated")
}

fn table(summaries: &[WanSummary], wall: &[f64]) -> String {
    let mut t = String::new();
    let factor = |f: Option<f64>| f.map_or("-".to_string(), |f| format!("{f:.3}x"));
    let _ = writeln!(
        t,
        "{:<16} {:>11} {:>10} {:>10} {:>10} {:>10} {:>10} {:>12} {:>14} {:>8}",
        "policy", "completed", "avg CCT s", "p90 s", "max s", "vs mrtf", "p90 vs", "makespan s", "relayed GB", "wall s"
    );
    for (s, w) in summaries.iter().zip(wall) {
        let _ = writeln!(
            t,
            "{:<16} {:>11} {:>10.3} {:>10.3} {:>10.3} {:>10} {:>10} {:>12.3} {:>14.3} {:>8.2}",
            s.policy,
            format!("{}/{}", s.completed, s.coflows),
            s.avg_cct_s,
            s.p90_cct_s,
            s.max_cct_s,
            factor(s.factor_vs_baseline),
            factor(s.p90_factor_vs_baseline),
            s.makespan_s,
            s.relayed_bytes / 1e9,
            w
        );
    }
    if let Some(first) = summaries.first() {
        let _ = write!(t, "\n{:<16}", "by total size");
        for b in &first.bins {
            let _ = write!(t, " {:>21}", format!("{} ({})", b.bin, b.coflows));
        }
        let _ = write!(t, "\n{:<16}", "policy");
        for _ in &first.bins {
            let _ = write!(t, " {:>10} {:>10}", "avg CCT s", "vs mrtf");
        }
        t.push('\n');
        for s in summaries {
            let _ = write!(t, "{:<16}", s.policy);
            for b in &s.bins {
                let _ = write!(t, " {:>10.3} {:>10}", b.avg_cct_s, factor(b.factor_vs_baseline));
            }
            t.push('\n');
        }
    }
    t
}

/// Options of `coflow wan-bench`.
#[derive(Debug, Args)]
pub(crate) struct BenchArgs {
    /// Coflows present at the timed decision.
    #[arg(long, default_value_t = 20)]
    coflows: usize,
    /// Decisions to time, each on a different workload seed.
    #[arg(long, default_value_t = 20)]
    repeat: u64,
    /// The topology (as `coflow sim --wan`).
    #[arg(long, default_value = "default")]
    wan: String,
    /// Monte Carlo rounds per search.
    #[arg(long, default_value_t = SiphonConfig::default().rounds)]
    rounds: u32,
    /// Search depth.
    #[arg(long, default_value_t = SiphonConfig::default().depth)]
    depth: usize,
    /// Coflows that may take the searched positions.
    #[arg(long, default_value_t = SiphonConfig::default().breadth)]
    breadth: usize,
}

/// Times the first decision of `siphon-mc` (a full search) with every coflow present, on
/// FB-shaped synthetic workloads of 150 machines whose coflows all arrive at time 0. The clock is
/// read here, around the policy.
pub(crate) fn bench(a: BenchArgs) -> Result<()> {
    if a.coflows < 2 || a.repeat == 0 {
        bail!("--coflows must be at least 2 and --repeat at least 1");
    }
    let (fabric, redraw, _) = load_topology(&a.wan, 150, None, None, ConnectionArgs::default())?;
    let mut times = Vec::new();
    let mut rounds = 0;
    for seed in 1..=a.repeat {
        // More than needed, keeping the first that cross the wide area (some are all local).
        let synth =
            coflow_trace::synth::SynthConfig { seed, coflows: 2 * a.coflows, machines: 150, ..Default::default() };
        let mut w = coflow_trace::synth::generate(&synth);
        w.coflows.retain(|c| c.flows.iter().any(|f| f.crosses_fabric() && !fabric.route(f.src, f.dst).is_local()));
        w.coflows.truncate(a.coflows);
        for c in &mut w.coflows {
            c.arrival = Nanos::ZERO;
        }
        // As `coflow sim --wan` builds it: a draw holds for the redraw interval.
        let coherence = (redraw != Nanos::MAX).then_some(redraw);
        let cfg = SiphonConfig {
            rounds: a.rounds,
            depth: a.depth,
            breadth: a.breadth,
            seed,
            coherence,
            ..Default::default()
        };
        let timed = FirstSearch { inner: SiphonMc::new(cfg), time_s: None, present: 0 };
        let probe = std::sync::Arc::new(Mutex::new(None));
        let wrapped = Probe { inner: timed, out: probe.clone() };
        let wan = WanConfig { fabric: fabric.clone(), redraw, seed, multipath: false, per_connection: None };
        simulate_wan(&w, Box::new(wrapped), &SimConfig::default(), &wan, &mut |_| {})?;
        let (t, present, r) = probe.lock().expect("no panic while held").take().context("no decision was made")?;
        if present != a.coflows {
            bail!("{present} coflows present at the first decision, expected {}", a.coflows);
        }
        times.push(t);
        rounds += r;
    }
    times.sort_by(f64::total_cmp);
    let mean = times.iter().sum::<f64>() / times.len() as f64;
    println!(
        "siphon-mc search with {} coflows present (rounds ≤ {}, depth {}, breadth {}, {} threads): \
         mean {:.2} ms, p50 {:.2} ms, max {:.2} ms over {} decisions; {:.0} rounds per search on average",
        a.coflows,
        a.rounds,
        a.depth,
        a.breadth,
        rayon::current_num_threads(),
        mean * 1e3,
        coflow_sim::percentile(&times, 50.0) * 1e3,
        times.last().copied().unwrap_or(0.0) * 1e3,
        times.len(),
        rounds as f64 / a.repeat as f64,
    );
    Ok(())
}

/// Times the first decision of the policy it wraps, then serves nothing (ending the run).
#[derive(Debug)]
struct FirstSearch {
    inner: SiphonMc,
    time_s: Option<f64>,
    present: usize,
}

/// Hands [`FirstSearch`]'s measurement out: (seconds, coflows present, rounds run).
#[derive(Debug)]
struct Probe {
    inner: FirstSearch,
    out: std::sync::Arc<Mutex<Option<(f64, usize, u64)>>>,
}

impl Scheduler for Probe {
    fn name(&self) -> &'static str {
        "siphon-mc"
    }

    fn model(&self) -> ServiceModel {
        ServiceModel::Proportional
    }

    fn handle_arrival(&mut self, now: Nanos, coflow: coflow_core::CoflowId) {
        self.inner.inner.handle_arrival(now, coflow);
    }

    fn poll_allocation(&mut self, input: &Input<'_>, out: &mut Allocation) -> Option<Nanos> {
        if self.inner.time_s.is_some() {
            return None;
        }
        let started = Instant::now();
        self.inner.inner.poll_allocation(input, out);
        let t = started.elapsed().as_secs_f64();
        self.inner.time_s = Some(t);
        self.inner.present = input.coflows.len();
        out.coflow_rate.iter_mut().for_each(|r| *r = 0.0);
        out.clear_leg_extras();
        *self.out.lock().expect("no panic while held") = Some((t, self.inner.present, self.inner.inner.searches().1));
        None
    }
}
