//! `coflow bench`: how fast the simulator runs and how long a policy takes to decide.
//!
//! Two measurements, each against a figure from the same run or the paper:
//! - a whole replay per policy: events per second of simulated work, and the wall time of every
//!   decision (mean, p99);
//! - decisions with N coflows present at once (a synthetic workload shaped like the Facebook
//!   trace, every coflow released at time 0): the wall time of the first decisions, next to the
//!   17 ms Varys reported per decision (§7.7, "scheduling latency").
//!
//! The clock is read here, around the policy, never inside the policy or the simulator.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Args;
use coflow_core::{CoflowId, Nanos, Rate, Workload};
use coflow_sched::{Allocation, Input, Scheduler, ServiceModel, policy};
use coflow_sim::{SimConfig, SimResult, simulate};
use coflow_trace::synth;

use crate::model::Model;
use crate::workload::SynthArgs;

/// The decision time Varys reported (§7.7).
const VARYS_DECISION_MS: f64 = 17.0;

/// Options of `coflow bench`.
#[derive(Debug, Args)]
pub(crate) struct BenchArgs {
    /// A trace to replay (default: the embedded synthetic workload).
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Policies to measure.
    #[arg(long, default_value = "varys,fair")]
    policies: String,
    /// Port capacity.
    #[arg(long, default_value = "128MiB/s")]
    port_rate: String,
    /// Numbers of coflows present at once for the decision-latency measurement.
    #[arg(long, default_value = "1000,10000", value_delimiter = ',')]
    concurrent: Vec<usize>,
    /// Decisions to time at each concurrency.
    #[arg(long, default_value_t = 20)]
    decisions: usize,
    /// The synthetic workload replayed when no trace is given; its seed also seeds the
    /// N-concurrent workloads.
    #[command(flatten)]
    synth: SynthArgs,
    #[command(flatten)]
    model: crate::model::ModelArgs,
}

/// Times every decision of the policy it wraps into a shared list; after `limit` decisions it
/// stops deciding (zero rates, no wake-up), which ends a simulation early.
#[derive(Debug)]
struct Timed {
    inner: Box<dyn Scheduler>,
    times_s: Arc<Mutex<Vec<f64>>>,
    limit: Option<usize>,
    made: usize,
}

impl Timed {
    /// Replays `w` under `name`, returning the result and every decision's wall time.
    fn run(
        name: &str,
        model: &Model,
        w: &Workload,
        cfg: &SimConfig,
        limit: Option<usize>,
    ) -> Result<(SimResult, Vec<f64>)> {
        let times_s = Arc::new(Mutex::new(Vec::new()));
        let timed = Timed { inner: model.policy(name), times_s: times_s.clone(), limit, made: 0 };
        let r = simulate(w, Box::new(timed), cfg);
        let times = std::mem::take(&mut *times_s.lock().expect("no panic while held"));
        Ok((r, times))
    }
}

impl Scheduler for Timed {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn model(&self) -> ServiceModel {
        self.inner.model()
    }

    fn flow_finish_gap(&self) -> Option<Nanos> {
        self.inner.flow_finish_gap()
    }

    fn admission_control(&self) -> bool {
        self.inner.admission_control()
    }

    fn poll_rejected(&mut self, out: &mut Vec<CoflowId>) {
        self.inner.poll_rejected(out)
    }

    fn handle_arrival(&mut self, now: Nanos, coflow: CoflowId) {
        self.inner.handle_arrival(now, coflow)
    }

    fn handle_finished(&mut self, now: Nanos, coflow: CoflowId) {
        self.inner.handle_finished(now, coflow)
    }

    fn poll_allocation(&mut self, input: &Input<'_>, out: &mut Allocation) -> Option<Nanos> {
        if self.limit.is_some_and(|l| self.made >= l) {
            return None;
        }
        let started = Instant::now();
        let wake = self.inner.poll_allocation(input, out);
        let elapsed = started.elapsed().as_secs_f64();
        self.made += 1;
        self.times_s.lock().expect("no panic while held").push(elapsed);
        wake
    }
}

fn mean_p99_ms(times: &[f64]) -> (f64, f64) {
    if times.is_empty() {
        return (0.0, 0.0);
    }
    let mut sorted = times.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mean = sorted.iter().sum::<f64>() / sorted.len() as f64;
    (mean * 1e3, coflow_sim::percentile(&sorted, 99.0) * 1e3)
}

pub(crate) fn run(a: BenchArgs) -> Result<()> {
    let port_rate: Rate = a.port_rate.parse().with_context(|| format!("--port-rate {:?}", a.port_rate))?;
    let policies = policy::parse_list(&a.policies).context("--policies")?;
    let model = a.model.model()?;
    model.check(&policies, coflow_sim::experiment::Spelling::Flag)?;
    if let Some(&n) = a.concurrent.iter().find(|&&n| n == 0) {
        anyhow::bail!("--concurrent {n}: at least one coflow must be present");
    }
    if a.decisions == 0 {
        anyhow::bail!("--decisions must be at least 1");
    }
    let (workload, source) = match &a.trace {
        Some(p) => {
            (coflow_trace::read_trace(p).with_context(|| format!("reading {}", p.display()))?, p.display().to_string())
        }
        None => a.synth.generate()?,
    };
    let (workload, source) = (model.workload(workload), source + &model.describe());
    let cfg = SimConfig { port_rate, check_invariants: false, from_scratch: false };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "replay of {source} ({} coflows, {} flows) at {port_rate}",
        workload.coflows.len(),
        workload.flow_count()
    );
    let _ = writeln!(
        out,
        "{:<16} {:>10} {:>10} {:>10} {:>12} {:>14} {:>14}",
        "policy", "events", "decisions", "wall s", "events/s", "decide mean ms", "decide p99 ms"
    );
    for &name in &policies {
        let started = Instant::now();
        let (r, times) = Timed::run(name, &model, &workload, &cfg, None)?;
        let wall = started.elapsed().as_secs_f64();
        let (mean, p99) = mean_p99_ms(&times);
        let _ = writeln!(
            out,
            "{:<16} {:>10} {:>10} {:>10.2} {:>12.0} {:>14.4} {:>14.4}",
            name,
            r.events,
            r.decisions,
            wall,
            r.events as f64 / wall,
            mean,
            p99
        );
    }
    let _ = writeln!(
        out,
        "\ndecision time with N coflows present at once (first {} decisions; Varys: {VARYS_DECISION_MS} ms)",
        a.decisions
    );
    let _ = writeln!(
        out,
        "{:<16} {:>8} {:>10} {:>14} {:>14} {:>16}",
        "policy", "N", "flows", "decide mean ms", "decide p99 ms", "below Varys"
    );
    for &n in &a.concurrent {
        let w = model.workload(concurrent_workload(n, a.synth.seed));
        for &name in &policies {
            let (_, times) = Timed::run(name, &model, &w, &cfg, Some(a.decisions))?;
            let (mean, p99) = mean_p99_ms(&times);
            let _ = writeln!(
                out,
                "{:<16} {:>8} {:>10} {:>14.3} {:>14.3} {:>15.0}x",
                name,
                n,
                w.flow_count(),
                mean,
                p99,
                VARYS_DECISION_MS / mean.max(1e-9)
            );
        }
    }
    print!("{out}");
    Ok(())
}

/// `n` coflows shaped like the Facebook trace on 150 machines, all released at time 0.
fn concurrent_workload(n: usize, seed: u64) -> Workload {
    let mut w = synth::generate(&synth::SynthConfig { seed, coflows: n, machines: 150, ..Default::default() });
    for c in &mut w.coflows {
        c.arrival = Nanos::ZERO;
    }
    Workload::new(w.machines, w.coflows).expect("a generated workload is valid")
}
