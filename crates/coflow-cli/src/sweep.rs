//! `coflow sim sweep`: how the policies compare as more coflows share the fabric at once
//! (Varys §7.7, Figures 13 and 14); the sweep is the library's (`coflow_sim::experiment::sweep`),
//! this module parses and prints.

use std::io::IsTerminal;
use std::ops::ControlFlow;
use std::time::Instant;

use anyhow::Result;
use clap::Args;
use coflow_sim::experiment::{Config, Spelling, SweepSpec};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::plan::CommonArgs;

/// The method, as `coflow sim sweep --help` prints it.
pub(crate) const LONG_ABOUT: &str = "\
Replay the workload's coflow mix with N coflows all present at once, for each N of --concurrent \
(Varys §7.7, Figures 13 and 14): an offline setting where load is the number of coflows that \
compete, not their arrival times.

How a workload of N concurrent coflows is built: for each N, --windows windows are drawn, each \
from its own generator seeded by --seed, N and the window's index (so a window does not depend \
on the other values of --concurrent). A window is N consecutive coflows of the trace (or of the \
synthetic workload), starting at a uniformly drawn coflow: coflows that were live close together \
in the trace, while the windows together sample its whole mix. Every coflow of a window is \
released at time 0, in an order shuffled by the same generator and renumbered 0..N in that order \
(the order breaks ties and decides admission for the deadline policies, and Varys randomised it \
across runs); dependencies between coflows are dropped, and the fabric keeps the trace's machines. \
With --deadlines, each window's coflows get deadlines drawn as `coflow sim` draws them, seeded \
per window (a trace's own deadlines are kept).

Every policy and the baseline run on every window. Each figure for an N and a policy is the mean \
over the windows of that window's figure: the factor of improvement of average CCT over the \
baseline (the JSON also gives its minimum and maximum), the average CCT and FCT, the share of \
coflows made slower than under the baseline, and with --deadlines the share of coflows that met \
their deadline, the share admitted and the share met among the admitted. Each window also gets the \
lower bounds of `coflow sim` (isolation, per-port, LP), and each policy's average CCT over the best \
of them is averaged the same way.";

/// Options of `coflow sim sweep`.
#[derive(Debug, Args)]
pub(crate) struct SweepArgs {
    /// Comma-separated numbers of coflows present at once, e.g. 10,20,50,100.
    #[arg(long, value_delimiter = ',', required = true)]
    concurrent: Vec<usize>,
    /// How many windows (workloads) to draw per N; their figures are averaged.
    #[arg(long, default_value_t = 5)]
    windows: usize,
    #[command(flatten)]
    common: CommonArgs,
}

pub(crate) fn run(args: SweepArgs) -> Result<()> {
    crate::output::prepare(&[("--json", args.common.json.as_deref())], &[("--trace", args.common.trace())])?;
    let outs = &[args.common.json.as_deref()];
    let spec = SweepSpec { concurrent: args.concurrent, windows: args.windows };
    let config = Config { sweep: Some(spec.clone()), ..args.common.config()? };
    let plan = config.plan(Spelling::Flag)?;
    crate::output::say!(outs, "{}", plan.describe());
    crate::output::say!(outs, "{}", coflow_sim::experiment::sweep::describe(args.windows));

    let started = Instant::now();
    let mut ns = spec.concurrent.clone();
    ns.sort_unstable();
    ns.dedup();
    let bar = progress_bar((ns.len() * spec.windows * plan.to_run().len()) as u64);
    let sweep = plan.sweep(&spec, &|| bar.inc(1), &|| ControlFlow::Continue(()))?;
    bar.finish_and_clear();
    let wall = started.elapsed();

    crate::output::human(&sweep.tables(&plan, Spelling::Flag), outs);
    if let Some(path) = &args.common.json {
        crate::output::write(path, sweep.report_json(&plan))?;
    }
    crate::output::remark!(
        "simulated {} ({} × {}) in {:.2} s wall time on {}",
        crate::output::count(sweep.runs, "run", "runs"),
        crate::output::count(sweep.ns.len() * sweep.windows_per_n, "window", "windows"),
        crate::output::count(sweep.policies_run, "policy", "policies"),
        wall.as_secs_f64(),
        crate::output::count(plan.threads.min(sweep.runs), "thread", "threads")
    );
    Ok(())
}

/// A progress bar of the sweep's `runs`, drawn on a terminal only.
fn progress_bar(runs: u64) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(
        Some(runs),
        if std::io::stderr().is_terminal() { ProgressDrawTarget::stderr() } else { ProgressDrawTarget::hidden() },
    );
    bar.set_style(
        ProgressStyle::with_template("   sweep [{bar:40}] {pos}/{len} runs {elapsed}")
            .expect("static template")
            .progress_chars("=> "),
    );
    bar
}
