//! `coflow demo`: a coordinator and N agents in this process on loopback, each port capped, a
//! scaled synthetic workload replayed with real bytes under each policy, and the measured CCTs
//! printed next to what the simulator predicts for the same workload, rates and policy code.
//! The replay is the library's (`coflow_testkit::replay`); this module parses and prints.
//!
//! Decisions that keep measured and simulated comparable:
//! - The small-coflow bypass is off (`bypass_threshold_bytes = 0`): the simulator does not model
//!   it, and with every coflow scheduled both run exactly the same policy.
//! - Pieces are put before the clock starts (the map stage, time-decoupled); a coflow "arrives"
//!   when its reducers issue their gets, and its CCT runs from its scheduled arrival to its last
//!   byte, so control latency (get announcement, rate push) counts against the live system.
//! - Total bytes are kept modest (default 600 MB per policy) because every byte crosses loopback
//!   twice (agent to agent over TCP, agent to client over gRPC) on a machine that may have two
//!   cores; sizes and arrival times are scaled together, which keeps the load.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::Args;
use coflow_core::Rate;
use coflow_testkit::replay::{PolicyResult, replay_policy};
use serde::Serialize;

use crate::output::say;
use crate::workload::WorkloadArgs;

/// Options of `coflow demo`.
#[derive(Debug, Args)]
pub(crate) struct DemoArgs {
    #[arg(
        long,
        default_value = "varys,fair",
        value_parser = crate::policies::list,
        help = crate::policies::help("Policies to run, comma-separated (each the same code as in `coflow sim`)")
    )]
    policies: String,
    /// Number of agents (machines), at most 200.
    #[arg(long, default_value_t = 8)]
    agents: u32,
    /// Each agent's port capacity, e.g. `100Mbps` (12.5 MB/s: the default run takes well under a
    /// minute, and CCTs of seconds dwarf the few milliseconds of control latency).
    #[arg(long, default_value = "100Mbps")]
    port_rate: String,
    #[command(flatten)]
    workload: WorkloadArgs,
    /// Write the results as JSON to this file (`-`: standard output).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Run the cluster with the shared token in clear instead of mutual TLS (certificates made in
    /// a temporary directory), the default: a run with and one without show what TLS costs.
    #[arg(long)]
    plaintext: bool,
}

#[derive(Debug, Serialize)]
struct Report {
    agents: u32,
    port_rate_bytes_per_sec: f64,
    workload: String,
    coflows: usize,
    fabric_bytes: u64,
    results: Vec<PolicyResult>,
    wall_s: f64,
}

/// The most agents one process runs, each with its listener, store and TLS sessions (the
/// testbed's most hosts).
const MAX_AGENTS: u32 = coflow_testbed::topology::MAX_HOSTS as u32;

pub(crate) fn run(args: DemoArgs) -> Result<()> {
    crate::output::prepare(&[("--json", args.json.as_deref())], &[("--trace", args.workload.trace())])?;
    let outs = &[args.json.as_deref()];
    let port: Rate = args.port_rate.parse().with_context(|| format!("--port-rate {:?}", args.port_rate))?;
    // The simulator replays the same workload at the same rate, so its bounds hold too.
    coflow_sim::experiment::check_port_rate(port, "--port-rate", &args.port_rate)?;
    if port.bytes_per_sec() < coflow_agent::MIN_PORT_RATE_BPS {
        bail!("--port-rate {:?}: an agent's port takes at least 1000 bytes per second (8 kbit/s)", args.port_rate);
    }
    crate::policies::refuse_tcp(&args.policies, "demo")?;
    let policies = coflow_sched::policy::parse_list(&args.policies).context("--policies")?;
    if policies.is_empty() {
        bail!("--policies names no policy");
    }
    if args.agents == 0 || args.agents > MAX_AGENTS {
        bail!("--agents must be 1 to {MAX_AGENTS}, got {}", args.agents);
    }
    let (w, source) = args.workload.build(args.agents, port, 600_000_000, "--agents", false)?;
    say!(
        outs,
        "coflow demo: {} on loopback{}, ports capped at {port}, {source}",
        crate::output::count(args.agents as usize, "agent", "agents"),
        if args.plaintext { " with the token in clear" } else { " over mutual TLS" }
    );
    say!(
        outs,
        "  {}, {}, {:.0} MB across the fabric; bypass off (the simulator does not model it)",
        crate::output::count(w.coflows.len(), "coflow", "coflows"),
        crate::output::count(w.flow_count(), "flow", "flows"),
        coflow_testbed::workload::fabric_bytes(&w) as f64 / 1e6
    );
    let started = Instant::now();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("tokio runtime")?;
    let mut results = Vec::new();
    say!(outs);
    say!(
        outs,
        "{:<14} {:>9} {:>13} {:>13} {:>13} {:>13} {:>8} {:>7}",
        "policy",
        "completed",
        "measured avg",
        "simulated avg",
        "measured p95",
        "simulated p95",
        "avg err",
        "wall"
    );
    for &p in &policies {
        // Ctrl-C drops the replay, and with it the cluster, whose drop removes its keys and data
        // directories; then the demo ends as a process killed by SIGINT would.
        let replay = rt.block_on(async {
            tokio::select! {
                r = replay_policy(&w, p, args.agents, port, !args.plaintext) => Some(r),
                _ = tokio::signal::ctrl_c() => None,
            }
        });
        let Some(r) = replay else { std::process::exit(130) };
        let r = r?;
        if std::env::var_os("COFLOW_DEMO_DEBUG").is_some() {
            for ((c, sim_cct), m) in w.coflows.iter().zip(&r.simulated).zip(&r.measured) {
                say!(
                    outs,
                    "  coflow {:>3} at {:>7.3}s flows {:>3} bytes {:>11} simulated {:>7.3}s measured {:>7.3}s",
                    c.id,
                    c.arrival.as_secs_f64(),
                    c.flows.len(),
                    c.total_bytes().get(),
                    sim_cct,
                    m.unwrap_or(f64::NAN)
                );
            }
        }
        say!(
            outs,
            "{:<14} {:>9} {:>12.3}s {:>12.3}s {:>12.3}s {:>12.3}s {:>7.1}% {:>6.1}s",
            r.policy,
            format!("{}/{}", r.completed, r.coflows),
            r.measured_avg_cct_s,
            r.simulated_avg_cct_s,
            r.measured_p95_cct_s,
            r.simulated_p95_cct_s,
            r.avg_error * 100.0,
            r.wall_s
        );
        results.push(r);
    }
    let wall = started.elapsed().as_secs_f64();
    say!(outs);
    if let (Some(v), Some(f)) =
        (results.iter().find(|r| r.policy == "varys"), results.iter().find(|r| r.policy == "fair"))
    {
        say!(
            outs,
            "varys vs fair, average CCT: {:.2}x measured, {:.2}x simulated",
            f.measured_avg_cct_s / v.measured_avg_cct_s,
            f.simulated_avg_cct_s / v.simulated_avg_cct_s
        );
    }
    say!(outs, "wall time {wall:.1}s");
    if let Some(path) = &args.json {
        let report = Report {
            agents: args.agents,
            port_rate_bytes_per_sec: port.bytes_per_sec(),
            workload: source,
            coflows: w.coflows.len(),
            fabric_bytes: coflow_testbed::workload::fabric_bytes(&w),
            results,
            wall_s: wall,
        };
        crate::output::json(path, &report)?;
    }
    Ok(())
}
