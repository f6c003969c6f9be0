//! `coflow testbed run|faults|down`: an emulated cluster in network namespaces (the library
//! `coflow-testbed`); this module parses and prints. `coflow testbed client` is the hidden
//! client each host runs inside its namespace.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use coflow_core::Rate;
use coflow_testbed::faults::{self, FaultOptions, Scenario};
use coflow_testbed::run::RunOptions;
use coflow_testbed::topology::payload_rate;
use coflow_testbed::{Topology, WorkloadSpec};

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
    /// Remove what killed runs left behind (namespaces, links, processes, files).
    Down(DownArgs),
    /// The client a host runs inside its namespace (JSON lines on stdin and stdout).
    #[command(hide = true)]
    Client(ClientArgs),
}

/// The topology options.
#[derive(Debug, Args)]
pub(crate) struct TopologyArgs {
    /// Hosts on the switch.
    #[arg(long, default_value_t = 8)]
    hosts: usize,
    /// Every link's rate, both ways, e.g. `100Mbps`.
    #[arg(long, default_value = "100Mbps")]
    link: String,
    /// A topology file instead (JSON: `{"hosts": [{"name", "uplink", "downlink"}]}`).
    #[arg(long)]
    topology: Option<PathBuf>,
}

impl TopologyArgs {
    fn topology(&self) -> Result<Topology> {
        Ok(match &self.topology {
            Some(p) => {
                let text = std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
                Topology::from_json(&text).with_context(|| format!("in {}", p.display()))?
            }
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
        help = crate::policies::live_help()
    )]
    policies: String,
    #[command(flatten)]
    workload: WorkloadArgs,
    /// The bound on each get, in seconds: one not ended by then counts as failed (hung).
    #[arg(long, default_value_t = 120.0)]
    get_timeout: f64,
    /// Write the report as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Leave the last policy's testbed up (`coflow testbed down` removes it).
    #[arg(long)]
    keep: bool,
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
    /// When the fault strikes, seconds after the first arrival (default: 40% of the way to the
    /// last arrival).
    #[arg(long)]
    fault_at: Option<f64>,
    /// The bound on each get, in seconds: one not ended by then counts as hung.
    #[arg(long, default_value_t = 30.0)]
    get_timeout: f64,
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
    coflow_testbed::net::preflight().map_err(|why| anyhow::anyhow!("the testbed cannot run here: {why}"))
}

fn workload(a: &WorkloadArgs, t: &Topology, default_total: u64) -> Result<(coflow_core::Workload, String)> {
    let port = payload_rate(t.uniform_rate().unwrap_or(t.hosts[0].uplink));
    let spec: WorkloadSpec = a.spec();
    Ok(coflow_testbed::workload::build(&spec, t.hosts.len() as u32, port, default_total)?)
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
        TestbedCommand::Down(a) => down(a),
        TestbedCommand::Client(a) => {
            let token = coflow_client::ClusterToken::from_file(&a.token_file)?;
            Ok(coflow_testbed::client::serve(&a.coordinator, &a.agent, token)?)
        }
    }
}

fn run_policies(a: RunArgs) -> Result<()> {
    crate::output::check(a.json.as_deref())?;
    let topology = a.topology.topology()?;
    let policies: Vec<String> =
        a.policies.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_string).collect();
    if policies.is_empty() {
        bail!("--policies names no policy");
    }
    for p in &policies {
        coflow_sched::policy::check_live(p).context("--policies")?;
    }
    // Twice the demo's bytes: coflows of about a second on average, so that the tenth of a
    // second a get's control path takes on a loaded machine does not dominate small coflows.
    let (w, source) = workload(&a.workload, &topology, 1_200_000_000)?;
    let get_bound = seconds(a.get_timeout, "--get-timeout")?;
    preflight()?;
    coflow_testbed::teardown_on_signal();
    let exe = std::env::current_exe().context("finding the coflow binary")?;
    println!(
        "coflow testbed: {} hosts in network namespaces on one bridge, links shaped by htb at {}, {source}",
        topology.hosts.len(),
        topology.uniform_rate().map_or("per-host rates".to_string(), |r| r.to_string())
    );
    println!(
        "  {} coflows, {} flows, {:.0} MB across the fabric; each policy on a fresh testbed",
        w.coflows.len(),
        w.coflows.iter().map(|c| c.flows.len()).sum::<usize>(),
        coflow_testbed::workload::fabric_bytes(&w) as f64 / 1e6
    );
    let opts = RunOptions { topology, policies, workload: w, source, exe, get_bound, keep: a.keep };
    let outputs = [a.json.as_deref()];
    let report = coflow_testbed::run::run(&opts, &mut |line| crate::output::human(&format!("  {line}\n"), &outputs))?;
    crate::output::human(&format!("\n{}", report.table()), &outputs);
    write_json(&a.json, &report)
}

fn run_faults(a: FaultArgs) -> Result<()> {
    crate::output::check(a.json.as_deref())?;
    let topology = a.topology.topology()?;
    let scenarios = match &a.scenarios {
        None => Scenario::ALL.to_vec(),
        Some(list) => list
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| Scenario::by_name(s).with_context(|| format!("--scenarios: unknown scenario {s:?}")))
            .collect::<Result<_>>()?,
    };
    let (w, source) = workload(&a.workload, &topology, 150_000_000)?;
    let get_bound = seconds(a.get_timeout, "--get-timeout")?;
    let fault_at = a.fault_at.map(|f| seconds(f, "--fault-at")).transpose()?;
    preflight()?;
    coflow_testbed::teardown_on_signal();
    let exe = std::env::current_exe().context("finding the coflow binary")?;
    println!("coflow testbed faults: {} hosts, {source}, varys", topology.hosts.len());
    let opts = FaultOptions { topology, workload: w, source, exe, scenarios, get_bound, fault_at };
    let outputs = [a.json.as_deref()];
    let report = faults::run(&opts, &mut |line| crate::output::human(&format!("  {line}\n"), &outputs))?;
    crate::output::human(&format!("\n{}", report.table()), &outputs);
    write_json(&a.json, &report)
}

fn down(a: DownArgs) -> Result<()> {
    let r = coflow_testbed::down(a.all)?;
    for (prefix, pid) in &r.live {
        println!("left alone: testbed {prefix} (its run, pid {pid}, is alive; --all removes it)");
    }
    for (prefix, items) in &r.removed {
        println!(
            "removed testbed {prefix}: {}",
            if items.is_empty() { "nothing was left".into() } else { items.join(", ") }
        );
    }
    if r.removed.is_empty() {
        println!("nothing to remove");
    }
    Ok(())
}
