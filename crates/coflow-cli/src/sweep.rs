//! `coflow sim sweep`: how the policies compare as more coflows share the fabric at once
//! (Varys §7.7, Figures 13 and 14).

use std::fmt::Write as _;
use std::io::{IsTerminal, Write as _};
use std::time::Instant;

use anyhow::{Result, bail};
use clap::Args;
use coflow_sched::Fabric;
use coflow_sim::experiment::{JsonWorkload, Window, window};
use coflow_sim::{BoundConfig, SimConfig, Summary, lower_bounds, simulate};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;

use crate::plan::{CommonArgs, write_json};

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

/// The figures of one N and one policy, each the mean over the windows of that window's figure
/// (`None` figures are left out of the mean; `None` if every window's is).
#[derive(Debug, PartialEq, Serialize)]
struct SweepResult {
    concurrent: usize,
    policy: &'static str,
    windows: usize,
    /// Coflows over all windows (`concurrent · windows`).
    coflows: usize,
    /// Of them, those that finished.
    completed: usize,
    avg_cct_s: f64,
    avg_fct_s: f64,
    factor_vs_baseline: Option<f64>,
    factor_vs_baseline_min: Option<f64>,
    factor_vs_baseline_max: Option<f64>,
    slower_than_baseline_fraction: Option<f64>,
    /// Each window's average CCT over its best lower bound (see `coflow sim`).
    bound_ratio: Option<f64>,
    deadline_met_fraction: Option<f64>,
    admitted_fraction: Option<f64>,
    met_among_admitted_fraction: Option<f64>,
}

impl SweepResult {
    fn of(concurrent: usize, policy: &'static str, s: &[Summary]) -> SweepResult {
        let mean = |f: &dyn Fn(&Summary) -> Option<f64>| {
            let v: Vec<f64> = s.iter().filter_map(f).collect();
            (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
        };
        let factors = s.iter().filter_map(|s| s.factor_vs_baseline);
        SweepResult {
            concurrent,
            policy,
            windows: s.len(),
            coflows: s.iter().map(|s| s.coflows).sum(),
            completed: s.iter().map(|s| s.completed).sum(),
            avg_cct_s: mean(&|s| Some(s.avg_cct_s)).unwrap_or(0.0),
            avg_fct_s: mean(&|s| Some(s.avg_fct_s)).unwrap_or(0.0),
            factor_vs_baseline: mean(&|s| s.factor_vs_baseline),
            factor_vs_baseline_min: factors.clone().reduce(f64::min),
            factor_vs_baseline_max: factors.reduce(f64::max),
            slower_than_baseline_fraction: mean(&|s| s.slower_than_baseline_fraction),
            bound_ratio: mean(&|s| s.bound_ratio.is_finite().then_some(s.bound_ratio)),
            deadline_met_fraction: mean(&|s| s.deadline_met_fraction),
            admitted_fraction: mean(&|s| s.admitted_fraction),
            met_among_admitted_fraction: mean(&|s| s.met_among_admitted_fraction),
        }
    }
}

/// The JSON report of a sweep.
#[derive(Debug, Serialize)]
struct SweepReport<'a> {
    workload: JsonWorkload<'a>,
    port_rate_bytes_per_s: f64,
    seed: u64,
    baseline: Option<&'a str>,
    method: &'static str,
    windows_per_n: usize,
    deadline_x: Option<f64>,
    /// Per N, the index in the workload of each window's first coflow.
    windows: Vec<JsonWindows>,
    results: &'a [SweepResult],
}

#[derive(Debug, Serialize)]
struct JsonWindows {
    concurrent: usize,
    starts: Vec<usize>,
}

/// One line stating the method, printed and written to the JSON report.
const METHOD: &str = "windows of N consecutive coflows from seeded random starts, all released at time 0 in a \
                      seeded random order; figures are means over windows";

pub(crate) fn run(args: SweepArgs) -> Result<()> {
    crate::output::check(args.common.json.as_deref())?;
    let outs = &[args.common.json.as_deref()];
    let plan = crate::plan::plan(&args.common)?;
    let total = plan.workload.coflows.len();
    let mut ns: Vec<usize> = Vec::new();
    for &n in &args.concurrent {
        if n == 0 || n > total {
            bail!("--concurrent {n}: must be between 1 and the workload's {total} coflows");
        }
        if !ns.contains(&n) {
            ns.push(n);
        }
    }
    if args.windows == 0 {
        bail!("--windows must be at least 1");
    }
    crate::output::say!(outs, "{}", plan.describe());
    crate::output::say!(outs, "sweep: {} windows per N; {METHOD}", args.windows);

    let windows: Vec<Window> = ns
        .iter()
        .flat_map(|&n| (0..args.windows).map(move |k| (n, k)))
        .map(|(n, k)| window(&plan.workload, n, k, plan.seed, plan.port_rate, plan.deadline_x))
        .collect();
    let to_run = plan.to_run();
    let cfg = SimConfig::big_switch(plan.port_rate);
    let started = Instant::now();
    let runs = parallel_map(windows.len() * to_run.len(), plan.threads, |j| {
        let name = to_run[j % to_run.len()];
        let mut r = simulate(&windows[j / to_run.len()].workload, plan.model.policy(name), &cfg)
            .expect("every policy serves the big switch");
        r.policy = name.to_string();
        r
    });
    let bounds = parallel_map(windows.len(), plan.threads, |k| {
        let w = &windows[k].workload;
        lower_bounds(w, &Fabric::big_switch(w.machines, plan.port_rate), &BoundConfig::default()).best_avg_cct_s
    });
    let wall = started.elapsed();

    // Summaries per window, in the order of `to_run`.
    let per_window: Vec<Vec<Summary>> = runs
        .chunks(to_run.len())
        .zip(&bounds)
        .map(|(rs, &bound)| {
            let base = plan.baseline.and_then(|b| rs.iter().find(|r| r.policy == b));
            rs.iter().map(|r| Summary::against(r, base).with_bound(bound)).collect()
        })
        .collect();
    let mut results = Vec::new();
    for (i, &n) in ns.iter().enumerate() {
        let of_n = &per_window[i * args.windows..(i + 1) * args.windows];
        for (p, &name) in to_run.iter().enumerate().filter(|(_, name)| plan.policies.contains(name)) {
            let s: Vec<Summary> = of_n.iter().map(|w| w[p].clone()).collect();
            results.push(SweepResult::of(n, name, &s));
        }
    }

    crate::output::human(&tables(&ns, &plan.policies, &results, plan.baseline, plan.deadline_x.is_some()), outs);
    eprintln!(
        "simulated {} runs ({} windows × {} policies) in {:.2} s wall time on {} threads",
        runs.len(),
        windows.len(),
        to_run.len(),
        wall.as_secs_f64(),
        plan.threads
    );
    if let Some(path) = &args.common.json {
        let report = SweepReport {
            workload: plan.json_workload(),
            port_rate_bytes_per_s: plan.port_rate.bytes_per_sec(),
            seed: plan.seed,
            baseline: plan.baseline,
            method: METHOD,
            windows_per_n: args.windows,
            deadline_x: plan.deadline_x,
            windows: ns
                .iter()
                .map(|&n| JsonWindows {
                    concurrent: n,
                    starts: windows.iter().filter(|w| w.concurrent == n).map(|w| w.start).collect(),
                })
                .collect(),
            results: &results,
        };
        write_json(path, &report)?;
    }
    std::io::stdout().flush()?;
    Ok(())
}

/// The text report: a row per N and a column per policy, for the factor of improvement and, with
/// deadlines, the share of coflows that met theirs.
fn tables(ns: &[usize], policies: &[&str], results: &[SweepResult], baseline: Option<&str>, deadlines: bool) -> String {
    let table = |title: &str, cell: &dyn Fn(&SweepResult) -> Option<String>| {
        let mut t = String::new();
        let width: Vec<usize> = policies.iter().map(|p| p.len().max(8)).collect();
        let _ = write!(t, "\n{title}\n{:<8}", "N");
        for (p, w) in policies.iter().zip(&width) {
            let _ = write!(t, " {p:>w$}");
        }
        t.push('\n');
        for &n in ns {
            let _ = write!(t, "{n:<8}");
            for (p, w) in policies.iter().zip(&width) {
                let r = results.iter().find(|r| r.concurrent == n && r.policy == *p);
                let c = r.and_then(cell).unwrap_or_else(|| "-".to_string());
                let _ = write!(t, " {c:>w$}");
            }
            t.push('\n');
        }
        t
    };
    // A factor is over the coflows that finished: mark those of policies that rejected some.
    let mark = |r: &SweepResult| if r.completed < r.coflows { "*" } else { "" };
    let mut t =
        table(&format!("improvement of average CCT over {} (mean over windows)", baseline.unwrap_or("-")), &|r| {
            r.factor_vs_baseline.map(|f| format!("{f:.2}x{}", mark(r)))
        });
    if results.iter().any(|r| !mark(r).is_empty()) {
        t.push_str("*: over the coflows that finished; admission control rejected the others\n");
    }
    t.push_str(&table("average CCT over the best lower bound of its window (mean over windows)", &|r| {
        r.bound_ratio.map(|f| format!("{f:.2}x{}", mark(r)))
    }));
    if deadlines {
        t.push_str(&table("coflows that met their deadline (mean over windows)", &|r| {
            r.deadline_met_fraction.map(|f| format!("{:.1}%", 100.0 * f))
        }));
    } else {
        t.push_str("(add --deadlines for the share of coflows that meet deadlines, Varys Figure 14)\n");
    }
    t
}

/// [`parallel::parallel_map`](crate::parallel::parallel_map) with a progress bar on a terminal.
fn parallel_map<T: Send>(jobs: usize, threads: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let bar = ProgressBar::with_draw_target(
        Some(jobs as u64),
        if std::io::stderr().is_terminal() { ProgressDrawTarget::stderr() } else { ProgressDrawTarget::hidden() },
    );
    bar.set_style(
        ProgressStyle::with_template("   sweep [{bar:40}] {pos}/{len} runs {elapsed}")
            .expect("static template")
            .progress_chars("=> "),
    );
    let out = crate::parallel::parallel_map(jobs, threads, |i| {
        let r = f(i);
        bar.inc(1);
        r
    });
    bar.finish_and_clear();
    out
}
