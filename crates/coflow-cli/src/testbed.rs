//! `coflow testbed run|faults|spark|down`: an emulated cluster in network namespaces (the library
//! `coflow-testbed`); this module parses and prints. `coflow testbed client` is the hidden
//! client each host runs inside its namespace.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use coflow_core::Rate;
use coflow_testbed::Topology;
use coflow_testbed::faults::{self, FaultOptions, Scenario};
use coflow_testbed::run::{Multipath, RunOptions};
use coflow_testbed::weather::Outage;

use crate::workload::WorkloadArgs;

/// The testbed's subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum TestbedCommand {
    /// Replay a workload under each policy on hosts in network namespaces, links shaped by tc,
    /// measured next to the simulator (needs root).
    Run(RunArgs),
    /// Inject faults (agent killed or frozen, coordinator restarted, link down, rate halved)
    /// under load and count what every get did (needs root).
    Faults(FaultArgs),
    /// A Spark standalone cluster on the hosts: jobs made from the workload's coflows, and named
    /// jobs, through the coflow plugin under each policy and on Spark's own shuffle (needs root;
    /// `scripts/spark-dist` prepares Spark and the plugin).
    Spark(SparkArgs),
    /// Remove what killed runs left behind (namespaces, links, processes, files).
    Down(DownArgs),
    /// The client a host runs inside its namespace (JSON lines on stdin and stdout).
    #[command(hide = true)]
    Client(ClientArgs),
}

/// The topology options.
#[derive(Debug, Args)]
pub(crate) struct TopologyArgs {
    /// Hosts on the switch (not with --topology, which has its own).
    #[arg(long, default_value_t = 8, conflicts_with = "topology")]
    hosts: usize,
    /// Every link's rate, both ways, e.g. `100Mbps` (not with --topology, which has its own).
    #[arg(long, visible_alias = "port-rate", default_value = "100Mbps", conflicts_with = "topology")]
    link: String,
    /// A topology file instead (JSON: `{"hosts": [{"name", "uplink", "downlink"}]}`, with `dc`
    /// and `wan` for datacenters), or a preset: `siphon-3dc`, `siphon-3dc-bottleneck`, `siphon-5dc`.
    #[arg(long, value_name = "FILE|PRESET")]
    topology: Option<String>,
}

impl TopologyArgs {
    /// The topology file `--topology` names, if it names one (not a preset).
    fn file(&self) -> Option<&std::path::Path> {
        self.topology.as_deref().map(std::path::Path::new)
    }

    fn topology(&self) -> Result<Topology> {
        Ok(match &self.topology {
            Some(p) => Topology::load(p).with_context(|| format!("--topology {p}"))?,
            None => {
                let r: Rate = self.link.parse().with_context(|| format!("--link {:?}", self.link))?;
                Topology::uniform(self.hosts, r).context("--hosts/--link")?
            }
        })
    }
}

/// Options of `coflow testbed run`.
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    #[command(flatten)]
    topology: TopologyArgs,
    #[arg(
        long,
        default_value = "varys,fair,tcp",
        value_parser = crate::policies::list,
        help = crate::policies::live_help()
    )]
    policies: String,
    #[command(flatten)]
    workload: WorkloadArgs,
    /// The bound on each get, e.g. `2m` or a number of seconds: one not ended by then counts as
    /// failed (hung).
    #[arg(long, default_value_t = 120.0, value_parser = crate::units::seconds)]
    get_timeout: f64,
    /// Write the report as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Leave the last policy's testbed up (`coflow testbed down` removes it).
    #[arg(long)]
    keep: bool,
    /// On a wide-area topology, split flows over relays in a third datacenter (Siphon's
    /// multi-path routing, for policies of the proportional model): `on`, `off`, or `both` (each
    /// such policy both ways, one row each). `--multipath` alone is `on`.
    #[arg(long, value_enum, num_args = 0..=1, default_value = "off", default_missing_value = "on")]
    multipath: MultipathArg,
    /// On a wide-area topology, take the link between two datacenters down (both directions)
    /// during each replay: `A-B@AT+LASTS`, e.g. `toronto-montreal@3s+5s` (AT and LASTS at most
    /// an hour each).
    #[arg(long)]
    link_down: Option<String>,
}

/// `--multipath`'s values.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub(crate) enum MultipathArg {
    Off,
    On,
    Both,
}

/// Options of `coflow testbed faults`.
#[derive(Debug, Args)]
pub(crate) struct FaultArgs {
    #[command(flatten)]
    topology: TopologyArgs,
    #[command(flatten)]
    workload: WorkloadArgs,
    /// Scenarios, comma-separated (agent-kill, agent-freeze, coordinator-restart, link-down,
    /// rate-halved); default all.
    #[arg(long)]
    scenarios: Option<String>,
    /// When the fault strikes after the first arrival, e.g. `12s` or a number of seconds
    /// (default: 40% of the way to the last arrival).
    #[arg(long, value_name = "SECONDS", value_parser = crate::units::seconds)]
    fault_at: Option<f64>,
    /// The bound on each get, e.g. `30s` or a number of seconds: one not ended by then counts as
    /// hung.
    #[arg(long, default_value_t = 30.0, value_parser = crate::units::seconds)]
    get_timeout: f64,
    /// Write the report as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Leave the last scenario's testbed up, with its logs (`coflow testbed down` removes it).
    #[arg(long)]
    keep: bool,
}

/// Options of `coflow testbed spark`.
#[derive(Debug, Args)]
pub(crate) struct SparkArgs {
    /// Hosts on the switch (one Spark worker, executor and agent each).
    #[arg(long, default_value_t = 5)]
    hosts: usize,
    /// Every link's rate, both ways.
    #[arg(long, visible_alias = "port-rate", default_value = "20Mbps")]
    link: String,
    /// Modes, comma-separated: `spark` (Spark's own shuffle) or a coordinator policy (or `tcp`)
    /// for jobs through the plugin.
    #[arg(long, default_value = "spark,fair,varys")]
    modes: String,
    #[command(flatten)]
    workload: WorkloadArgs,
    /// Arrival times of the workload's coflows are divided by this.
    #[arg(long, default_value_t = 2.0)]
    compress_arrivals: f64,
    /// Task slots per executor.
    #[arg(long, default_value_t = 4)]
    executor_cores: u32,
    /// Each executor's heap, as Spark spells it.
    #[arg(long, default_value = "768m")]
    executor_memory: String,
    /// Records (100 bytes each) of the named sort job.
    #[arg(long, default_value_t = 400_000)]
    sort_records: u64,
    /// The bound on each mode's Spark application, e.g. `15m` or a number of seconds.
    #[arg(long, default_value_t = 900.0, value_parser = crate::units::seconds)]
    timeout: f64,
    /// Where `scripts/spark-dist` put Spark, the plugin and the driver (default
    /// `$COFLOW_SPARK_DIST`, else `~/.cache/coflow/spark-dist`).
    #[arg(long)]
    spark_dist: Option<PathBuf>,
    /// Write the report as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// Options of `coflow testbed down`.
#[derive(Debug, Args)]
pub(crate) struct DownArgs {
    /// Also remove runs whose owning process is still alive.
    #[arg(long)]
    all: bool,
}

/// Options of the hidden client.
#[derive(Debug, Args)]
pub(crate) struct ClientArgs {
    #[arg(long)]
    coordinator: String,
    #[arg(long)]
    agent: String,
    #[arg(long)]
    token_file: PathBuf,
}

fn seconds(v: f64, flag: &str) -> Result<Duration> {
    if !(v > 0.0 && v <= 3600.0) {
        bail!("{flag} must be in (0, 3600] seconds, got {v}");
    }
    Ok(Duration::from_secs_f64(v))
}

fn preflight() -> Result<()> {
    coflow_testbed::net::preflight().map_err(|why| anyhow::anyhow!("the testbed cannot run here: {why}"))?;
    let left = coflow_testbed::state::orphans();
    if !left.is_empty() {
        // They still hold namespaces, processes and link shaping that may skew this run.
        eprintln!(
            "note: killed runs left testbed{} {} up; `coflow testbed down` removes them",
            if left.len() == 1 { "" } else { "s" },
            left.join(", ")
        );
    }
    Ok(())
}

/// The workload on `t`'s hosts; `weather`: whether the run seeds a wide area's weather.
fn workload(
    a: &WorkloadArgs,
    t: &Topology,
    default_total: u64,
    weather: bool,
) -> Result<(coflow_core::Workload, String)> {
    let port = t.workload_port();
    a.build(t.hosts.len() as u32, port, default_total, "--hosts, --topology", weather)
}

fn write_json(path: &Option<PathBuf>, v: &impl serde::Serialize) -> Result<()> {
    match path {
        Some(p) => crate::output::json(p, v),
        None => Ok(()),
    }
}

/// A run's result, unless a signal is tearing the run down: then its errors (processes and
/// links vanishing) are consequences, and the handler exits with 130 when done.
fn settled(r: Result<()>) -> Result<()> {
    if r.is_err() && coflow_testbed::state::interrupted() {
        loop {
            std::thread::park();
        }
    }
    r
}

pub(crate) fn run(cmd: TestbedCommand) -> Result<()> {
    match cmd {
        TestbedCommand::Run(a) => settled(run_policies(a)),
        TestbedCommand::Faults(a) => settled(run_faults(a)),
        TestbedCommand::Spark(a) => settled(run_spark(a)),
        TestbedCommand::Down(a) => down(a),
        TestbedCommand::Client(a) => {
            let token = coflow_client::ClusterToken::from_file(&a.token_file)?;
            Ok(coflow_testbed::client::serve(&a.coordinator, &a.agent, token)?)
        }
    }
}

/// The names of a comma-separated list, each once: a list that names none, or one twice, is
/// refused naming the option.
fn names(list: &str, option: &str, what: &str) -> Result<Vec<String>> {
    let mut out: Vec<String> = Vec::new();
    for n in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        if out.iter().any(|o| o == n) {
            bail!("{option} names {n} twice");
        }
        out.push(n.to_string());
    }
    if out.is_empty() {
        bail!("{option} names no {what}");
    }
    Ok(out)
}

fn run_policies(a: RunArgs) -> Result<()> {
    let inputs = [("--trace", a.workload.trace()), ("--topology", a.topology.file())];
    crate::output::prepare(&[("--json", a.json.as_deref())], &inputs)?;
    let topology = a.topology.topology()?;
    let policies = names(&a.policies, "--policies", "policy")?;
    let outage = match (&a.link_down, &topology.wan) {
        (None, _) => None,
        (Some(_), None) => bail!("--link-down needs a wide-area topology (--topology with datacenters)"),
        (Some(spec), Some(dcs)) => Some(Outage::parse(spec, dcs).map_err(|e| anyhow::anyhow!("--link-down {e}"))?),
    };
    if !matches!(a.multipath, MultipathArg::Off) && topology.wan.is_none() {
        bail!("--multipath needs a wide-area topology (--topology with datacenters)");
    }
    for p in &policies {
        coflow_sched::policy::check_live(p).context("--policies")?;
    }
    // Twice the demo's bytes: coflows of about a second on average, so that the tenth of a
    // second a get's control path takes on a loaded machine does not dominate small coflows.
    let (w, source) = workload(&a.workload, &topology, 1_200_000_000, topology.wan.is_some())?;
    let get_bound = seconds(a.get_timeout, "--get-timeout")?;
    preflight()?;
    coflow_testbed::teardown_on_signal();
    let exe = std::env::current_exe().context("finding the coflow binary")?;
    crate::output::say!(
        &[a.json.as_deref()],
        "coflow testbed: {} in network namespaces {}, links shaped by htb at {}, {source}",
        crate::output::count(topology.hosts.len(), "host", "hosts"),
        topology.wan.as_ref().map_or("on one bridge".to_string(), |d| format!(
            "in {} joined by wide-area links (weather seeded by --seed)",
            crate::output::count(d.wan.dcs() as usize, "datacenter", "datacenters")
        )),
        topology.uniform_rate().map_or("per-host rates".to_string(), |r| r.to_string())
    );
    crate::output::say!(
        &[a.json.as_deref()],
        "  {}, {}, {:.0} MB across the fabric; each policy on a fresh testbed",
        crate::output::count(w.coflows.len(), "coflow", "coflows"),
        crate::output::count(w.flow_count(), "flow", "flows"),
        coflow_testbed::workload::fabric_bytes(&w) as f64 / 1e6
    );
    let weather_seed = a.workload.seed();
    let multipath = match a.multipath {
        MultipathArg::Off => Multipath::Off,
        MultipathArg::On => Multipath::On,
        MultipathArg::Both => Multipath::Both,
    };
    let opts = RunOptions {
        topology,
        policies,
        workload: w,
        source,
        exe,
        get_bound,
        keep: a.keep,
        weather_seed,
        multipath,
        outage,
    };
    let outputs = [a.json.as_deref()];
    let report = coflow_testbed::run::run(&opts, &mut |line| crate::output::human(&format!("  {line}\n"), &outputs))?;
    crate::output::human(&format!("\n{}", report.table()), &outputs);
    write_json(&a.json, &report)?;
    // The figures are printed and kept either way; a measurement with holes is not a success.
    let short = report.shortfalls();
    if !short.is_empty() {
        bail!("the measurement is incomplete: {}", short.join("; "));
    }
    Ok(())
}

fn run_faults(a: FaultArgs) -> Result<()> {
    let inputs = [("--trace", a.workload.trace()), ("--topology", a.topology.file())];
    crate::output::prepare(&[("--json", a.json.as_deref())], &inputs)?;
    let topology = a.topology.topology()?;
    let scenarios = match &a.scenarios {
        None => Scenario::ALL.to_vec(),
        Some(list) => names(list, "--scenarios", "scenario")?
            .iter()
            .map(|s| Scenario::by_name(s).with_context(|| format!("--scenarios: unknown scenario {s:?}")))
            .collect::<Result<_>>()?,
    };
    let (w, source) = workload(&a.workload, &topology, 150_000_000, false)?;
    let get_bound = seconds(a.get_timeout, "--get-timeout")?;
    let fault_at = a.fault_at.map(|f| seconds(f, "--fault-at")).transpose()?;
    preflight()?;
    coflow_testbed::teardown_on_signal();
    let exe = std::env::current_exe().context("finding the coflow binary")?;
    crate::output::say!(
        &[a.json.as_deref()],
        "coflow testbed faults: {}, {source}, varys",
        crate::output::count(topology.hosts.len(), "host", "hosts")
    );
    let opts = FaultOptions { topology, workload: w, source, exe, scenarios, get_bound, fault_at, keep: a.keep };
    let outputs = [a.json.as_deref()];
    let report = faults::run(&opts, &mut |line| crate::output::human(&format!("  {line}\n"), &outputs))?;
    crate::output::human(&format!("\n{}", report.table()), &outputs);
    write_json(&a.json, &report)
}

fn run_spark(a: SparkArgs) -> Result<()> {
    use coflow_testbed::spark::{SPARK, SparkDist, SparkOptions};
    crate::output::prepare(&[("--json", a.json.as_deref())], &[("--trace", a.workload.trace())])?;
    let r: Rate = a.link.parse().with_context(|| format!("--link {:?}", a.link))?;
    let topology = Topology::uniform(a.hosts, r).context("--hosts/--link")?;
    let modes = names(&a.modes, "--modes", "mode")?;
    for m in &modes {
        if m != SPARK {
            coflow_sched::policy::check_live(m).context("--modes")?;
        }
    }
    if a.executor_cores == 0 || a.executor_cores > 64 {
        bail!("--executor-cores must be 1 to 64, got {}", a.executor_cores);
    }
    coflow_testbed::spark::spark_size_mb(&a.executor_memory).context("--executor-memory")?;
    let (w, source) = workload(&a.workload, &topology, 300_000_000, false)?;
    let timeout = seconds(a.timeout, "--timeout")?;
    let dist = SparkDist::at(&a.spark_dist.clone().unwrap_or_else(SparkDist::default_dir))?;
    preflight()?;
    coflow_testbed::teardown_on_signal();
    let exe = std::env::current_exe().context("finding the coflow binary")?;
    crate::output::say!(
        &[a.json.as_deref()],
        "coflow testbed spark: {} at {r} (one Spark worker, executor of {} and {}, agent each), {source}",
        crate::output::count(topology.hosts.len(), "host", "hosts"),
        crate::output::count(a.executor_cores as usize, "core", "cores"),
        a.executor_memory
    );
    crate::output::say!(
        &[a.json.as_deref()],
        "  {} as jobs, arrivals compressed {}x, plus 4 named jobs; each mode on a fresh testbed",
        crate::output::count(w.coflows.len(), "coflow", "coflows"),
        a.compress_arrivals
    );
    let opts = SparkOptions {
        topology,
        modes,
        workload: w,
        source,
        compression: a.compress_arrivals,
        executor_cores: a.executor_cores,
        executor_memory: a.executor_memory,
        sort_records: a.sort_records,
        timeout,
        exe,
        dist,
    };
    let outputs = [a.json.as_deref()];
    let report = coflow_testbed::spark::run(&opts, &mut |line| crate::output::human(&format!("  {line}\n"), &outputs))?;
    crate::output::human(&format!("\n{}", report.table()), &outputs);
    write_json(&a.json, &report)
}

fn down(a: DownArgs) -> Result<()> {
    let r = coflow_testbed::down(a.all)?;
    for (prefix, pid) in &r.live {
        crate::output::say!(&[], "left alone: testbed {prefix} (its run, pid {pid}, is alive; --all removes it)");
    }
    for (prefix, items) in &r.removed {
        crate::output::say!(
            &[],
            "removed testbed {prefix}: {}",
            if items.is_empty() { "nothing was left".into() } else { items.join(", ") }
        );
    }
    if r.removed.is_empty() {
        crate::output::say!(&[], "nothing to remove");
    }
    Ok(())
}
