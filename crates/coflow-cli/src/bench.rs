//! `coflow bench`: how fast the simulator runs and how long a policy takes to decide.
//!
//! Two measurements, each against a figure from the same run or the paper:
//! - a whole replay per policy: events per second of simulated work, and the wall time of every
//!   decision (mean, p99);
//! - decisions with N coflows present at once (a synthetic workload shaped like the Facebook
//!   trace, every coflow released at time 0): the wall time of the first decisions from scratch
//!   and told what changed, side by side, next to the 17 ms Varys reported per decision (§7.7,
//!   "scheduling latency").
//!
//! The measuring is `coflow_sim::bench`'s; this module parses, builds workloads and prints.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use coflow_core::{Rate, Workload};
use coflow_sim::SimConfig;
use coflow_sim::bench::{BenchReport, bench_policy, concurrent_workload};

use crate::workload::SynthArgs;

/// The decision time Varys reported (§7.7).
const VARYS_DECISION_MS: f64 = 17.0;

/// Options of `coflow bench`.
#[derive(Debug, Args)]
pub(crate) struct BenchArgs {
    /// A trace to replay (default: the embedded synthetic workload).
    #[arg(long)]
    trace: Option<PathBuf>,
    #[arg(
        long,
        default_value = "varys,fair",
        value_parser = crate::policies::list,
        help = crate::policies::help("Policies to measure, comma-separated")
    )]
    policies: String,
    /// Port capacity.
    #[arg(long, default_value = "128MiB/s")]
    port_rate: String,
    /// Numbers of coflows present at once for the decision-latency measurement: synthetic
    /// workloads shaped like the Facebook trace on 150 machines, whatever is replayed.
    #[arg(long, default_value = "1000,10000", value_delimiter = ',')]
    concurrent: Vec<usize>,
    /// Decisions to time at each concurrency, in each mode (after the first, which takes
    /// everything as new in both).
    #[arg(long, default_value_t = 20)]
    decisions: usize,
    /// Also write the figures as JSON to this file (`-`: standard output).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// The synthetic workload replayed when no trace is given; its seed also seeds the
    /// N-concurrent workloads.
    #[command(flatten)]
    synth: SynthArgs,
    #[command(flatten)]
    model: crate::model::ModelArgs,
}

pub(crate) fn run(a: BenchArgs) -> Result<()> {
    crate::output::prepare(&[("--json", a.json.as_deref())], &[("--trace", a.trace.as_deref())])?;
    let port_rate: Rate = a.port_rate.parse().with_context(|| format!("--port-rate {:?}", a.port_rate))?;
    coflow_sim::experiment::check_port_rate(port_rate, "--port-rate", &a.port_rate)?;
    let model = a.model.model()?;
    let policies = model.parse_policies(&a.policies).context("--policies")?;
    if policies.is_empty() {
        anyhow::bail!("--policies names no policy");
    }
    model.check(&policies, "policies", coflow_sim::experiment::Spelling::Flag)?;
    let most = coflow_trace::synth::MAX_COFLOWS;
    if let Some(&n) = a.concurrent.iter().find(|&&n| n == 0 || n > most) {
        anyhow::bail!("--concurrent {n}: between 1 and {most} coflows must be present");
    }
    if let Some(n) = a.concurrent.iter().enumerate().find_map(|(i, n)| a.concurrent[..i].contains(n).then_some(n)) {
        anyhow::bail!("--concurrent names {n} twice");
    }
    if a.decisions == 0 {
        anyhow::bail!("--decisions must be at least 1");
    }
    let (workload, source) = a.synth.load(a.trace.as_deref())?;
    let (workload, source) = (model.workload(workload), source + &model.describe());
    let cfg = SimConfig::big_switch(port_rate);
    let concurrent: Vec<Workload> = a
        .concurrent
        .iter()
        .map(|&n| {
            Ok(model.workload(concurrent_workload(n, a.synth.seed()).with_context(|| format!("--concurrent {n}"))?))
        })
        .collect::<Result<_>>()?;
    let mut report = BenchReport::default();
    for &name in &policies {
        let build = || model.policy(name);
        report.policies.push(bench_policy(name, &build, &workload, &concurrent, a.decisions, &cfg)?);
    }
    crate::output::human(&render(&report, &source, &workload, port_rate), &[a.json.as_deref()]);
    if let Some(path) = &a.json {
        crate::output::json(path, &report)?;
    }
    Ok(())
}

/// The report as tables: the replay per policy, then the decision times at each concurrency,
/// from scratch and incremental side by side.
fn render(report: &BenchReport, source: &str, workload: &Workload, port_rate: Rate) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "replay of {source} ({}, {}) at {port_rate}",
        crate::output::count(workload.coflows.len(), "coflow", "coflows"),
        crate::output::count(workload.flow_count(), "flow", "flows")
    );
    let _ = writeln!(
        out,
        "{:<16} {:>10} {:>10} {:>10} {:>12} {:>14} {:>14}",
        "policy", "events", "decisions", "wall s", "events/s", "decide mean ms", "decide p99 ms"
    );
    for p in &report.policies {
        let _ = writeln!(
            out,
            "{:<16} {:>10} {:>10} {:>10.2} {:>12.0} {:>14} {:>14}",
            p.policy,
            p.events,
            p.decisions,
            p.replay_wall_s,
            p.events as f64 / p.replay_wall_s.max(1e-9),
            ms(p.decide_mean_ms, 4),
            ms(p.decide_p99_ms, 4)
        );
    }
    let decisions = report.policies.iter().flat_map(|p| &p.concurrency).map(|c| c.decisions).max().unwrap_or(0);
    let decisions = crate::output::count(decisions, "decision", "decisions");
    let _ = writeln!(
        out,
        "\ndecision time with N coflows present at once, from scratch and told what changed (up to {decisions} \
         after the first; Varys: {VARYS_DECISION_MS} ms)"
    );
    let _ = writeln!(
        out,
        "{:<16} {:>8} {:>10} {:>12} {:>12} {:>12} {:>12} {:>8} {:>12}",
        "policy", "N", "flows", "scratch mean", "scratch p99", "incr mean", "incr p99", "gain", "below Varys"
    );
    for p in &report.policies {
        for c in &p.concurrency {
            let _ = writeln!(
                out,
                "{:<16} {:>8} {:>10} {:>12} {:>12} {:>12} {:>12} {:>8} {:>12}",
                p.policy,
                c.coflows,
                c.flows,
                ms(c.scratch_mean_ms, 3),
                ms(c.scratch_p99_ms, 3),
                ms(c.incremental_mean_ms, 3),
                ms(c.incremental_p99_ms, 3),
                times(c.scratch_mean_ms.zip(c.incremental_mean_ms).map(|(s, i)| s / i.max(1e-9)), 1),
                times(c.incremental_mean_ms.map(|i| VARYS_DECISION_MS / i.max(1e-9)), 0)
            );
        }
    }
    out
}

/// A time in milliseconds to `digits` decimals, `-` when none was measured.
fn ms(x: Option<f64>, digits: usize) -> String {
    x.map_or_else(|| "-".into(), |x| format!("{x:.digits$}"))
}

/// A ratio to `digits` decimals with its `x`, `-` when none was measured.
fn times(x: Option<f64>, digits: usize) -> String {
    x.map_or_else(|| "-".into(), |x| format!("{x:.digits$}x"))
}
