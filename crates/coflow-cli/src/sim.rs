//! `coflow sim`: replay a workload under several policies and print what the field compares.

use std::fmt::Write as _;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use coflow_core::{Rate, Workload};
use coflow_sched::{Fabric, policy};
use coflow_sim::{BoundConfig, LowerBounds, SimConfig, SimResult, Summary, lower_bounds, simulate_with_progress};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;

use crate::model::Model;
use crate::parallel::parallel_map;
use crate::workload::SynthArgs;

use crate::{plot, sweep};

/// Options of `coflow sim`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub(crate) struct SimArgs {
    #[command(subcommand)]
    command: Option<SimCommand>,
    // Boxed, as is the sweep's: options are large and `coflow`'s command enum holds them.
    #[command(flatten)]
    common: Box<CommonArgs>,
    /// Write one row per coflow and policy as CSV to this file.
    #[arg(long)]
    csv: Option<PathBuf>,
    /// Draw the CCT distributions of all policies (log axis) and each one's improvement per bin
    /// over the baseline into this file, SVG or PNG by its extension.
    #[arg(long, value_name = "FILE.svg|FILE.png")]
    plot: Option<PathBuf>,
    #[command(flatten)]
    wan: crate::wan::WanArgs,
    /// Release every coflow at time 0 (the offline setting of the ordering literature), for
    /// every policy.
    #[arg(long)]
    offline: bool,
    /// Give a seeded fraction F of the coflows a deadline, drawn as --deadlines draws them (x = 1),
    /// and none to the others: a mix of deadline and non-deadline coflows (Karuna).
    #[arg(long, value_name = "F", conflicts_with = "deadlines")]
    deadline_fraction: Option<f64>,
}

/// What `coflow sim` does instead of one replay.
#[derive(Debug, Subcommand)]
enum SimCommand {
    /// Replay the workload's coflow mix with N coflows all present at once, for several N
    /// (Varys §7.7).
    #[command(long_about = sweep::LONG_ABOUT)]
    Sweep(Box<sweep::SweepArgs>),
}

/// The options `coflow sim` and `coflow sim sweep` share.
#[derive(Debug, Args)]
pub(crate) struct CommonArgs {
    /// A trace to replay (coflow-benchmark or JSON Lines); without one, a synthetic workload
    /// shaped like the Facebook trace.
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Comma-separated policies to run, or `all`.
    #[arg(long, default_value = "all")]
    policies: String,
    /// The policy others are compared against.
    #[arg(long, default_value = "fair")]
    baseline: String,
    /// Capacity of every port, e.g. 1Gbps, 128MiB/s or 125000000 (bytes per second).
    #[arg(long, default_value = "1Gbps")]
    port_rate: String,
    #[command(flatten)]
    synth: SynthArgs,
    /// Write the figures as JSON to this file.
    #[arg(long)]
    pub(crate) json: Option<PathBuf>,
    /// How many simulations to run at once (default: the machine's cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Give every coflow a deadline: the trace's, or else one drawn as Varys §7.1 does,
    /// Γ_empty·(1 + U(0, x)) and at least 200 ms, seeded by --seed.
    #[arg(long)]
    pub(crate) deadlines: bool,
    /// The slack x of generated deadlines.
    #[arg(long, default_value_t = 1.0, requires = "deadlines")]
    pub(crate) deadline_x: f64,
    #[command(flatten)]
    model: crate::model::ModelArgs,
}

/// The validated form of [`CommonArgs`]: the workload (without generated deadlines) and the
/// policies to run.
pub(crate) struct SimPlan {
    pub(crate) workload: Workload,
    pub(crate) source: String,
    /// The policies asked for, in report order.
    pub(crate) policies: Vec<&'static str>,
    pub(crate) baseline: Option<&'static str>,
    pub(crate) port_rate: Rate,
    pub(crate) seed: u64,
    pub(crate) threads: usize,
    /// The slack of generated deadlines, if every coflow gets one.
    pub(crate) deadline_x: Option<f64>,
    /// Our exact model or the reference simulator's rules; the workload is already as it sees it.
    pub(crate) model: Model,
}

impl SimPlan {
    pub(crate) fn from_args(a: &CommonArgs) -> Result<SimPlan> {
        let port_rate: Rate = a.port_rate.parse().with_context(|| format!("--port-rate {:?}", a.port_rate))?;
        crate::testbed::refuse_tcp(&a.policies, "sim")?;
        let policies = policy::parse_list(&a.policies).context("--policies")?;
        if policies.is_empty() {
            bail!("--policies names no policy");
        }
        let baseline = policy::parse_list(&a.baseline).context("--baseline")?.first().copied();
        let model = a.model.model()?;
        model.check(&policies)?;
        model.check(baseline.as_slice()).context("--baseline")?;
        if a.deadlines && !(a.deadline_x.is_finite() && a.deadline_x >= 0.0) {
            bail!("--deadline-x must be a non-negative number, got {}", a.deadline_x);
        }
        let (workload, source) = match &a.trace {
            Some(p) => {
                let w = coflow_trace::read_trace(p).with_context(|| format!("reading trace {}", p.display()))?;
                a.synth.staged(w, p.display().to_string())
            }
            None => a.synth.generate()?,
        };
        let (workload, source) = (model.workload(workload), source + &model.describe());
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let threads = a.threads.unwrap_or(cores).max(1);
        Ok(SimPlan {
            workload,
            source,
            policies,
            baseline,
            port_rate,
            seed: a.synth.seed,
            threads,
            deadline_x: a.deadlines.then_some(a.deadline_x),
            model,
        })
    }

    /// The policies to simulate: those asked for, then the baseline if it is not among them (it
    /// runs anyway, so that factors can be reported).
    pub(crate) fn to_run(&self) -> Vec<&'static str> {
        let mut to_run = self.policies.clone();
        if let Some(b) = self.baseline
            && !to_run.contains(&b)
        {
            to_run.push(b);
        }
        to_run
    }

    /// The workload's line at the top of every report.
    pub(crate) fn describe(&self) -> String {
        let w = &self.workload;
        format!(
            "workload: {} — {} coflows, {} flows, {} machines; ports at {}",
            self.source,
            w.coflows.len(),
            w.flow_count(),
            w.machines,
            self.port_rate
        )
    }

    pub(crate) fn json_workload(&self) -> JsonWorkload<'_> {
        let w = &self.workload;
        JsonWorkload {
            source: &self.source,
            coflows: w.coflows.len(),
            flows: w.flow_count(),
            machines: w.machines,
            bytes: w.total_bytes().get(),
        }
    }
}

/// The JSON report.
#[derive(Debug, Serialize)]
struct JsonReport<'a> {
    workload: JsonWorkload<'a>,
    port_rate_bytes_per_s: f64,
    seed: u64,
    baseline: Option<&'a str>,
    /// The best of the lower bounds, which every result's `bound_ratio` is against.
    best_lower_bound_avg_cct_s: f64,
    lower_bounds: &'a LowerBounds,
    results: &'a [Summary],
}

#[derive(Debug, Serialize)]
pub(crate) struct JsonWorkload<'a> {
    source: &'a str,
    coflows: usize,
    flows: usize,
    machines: u32,
    bytes: u64,
}

pub(crate) fn run(args: SimArgs) -> Result<()> {
    if let Some(SimCommand::Sweep(a)) = args.command {
        return sweep::run(*a);
    }
    if let Some(p) = &args.plot {
        plot::Format::of(p)?;
    }
    let mut plan = SimPlan::from_args(&args.common)?;
    if let Some(x) = plan.deadline_x {
        coflow_sim::assign_deadlines(&mut plan.workload, plan.port_rate, x, plan.seed);
    }
    if let Some(f) = args.deadline_fraction {
        if !(0.0..=1.0).contains(&f) {
            bail!("--deadline-fraction must be between 0 and 1, got {f}");
        }
        coflow_sim::assign_deadlines_to_fraction(&mut plan.workload, plan.port_rate, 1.0, f, plan.seed);
        plan.source.push_str(&format!(" ({:.0}% of coflows with deadlines)", 100.0 * f));
    }
    if args.offline {
        for c in &mut plan.workload.coflows {
            c.arrival = coflow_core::Nanos::ZERO;
        }
        plan.source.push_str(" (offline: every coflow released at time 0)");
    }
    if args.wan.enabled() {
        if !plan.model.is_exact() {
            bail!("--wan: the reference simulator's model (--model coflowsim) is a big switch only");
        }
        return crate::wan::run(&plan, &args.wan, args.common.json.as_deref());
    }
    let w = &plan.workload;
    println!("{}", plan.describe());

    let started = Instant::now();
    // The bounds (an LP among them) are computed beside the simulations, not after them.
    let (runs, bounds) = std::thread::scope(|s| {
        let bounds =
            s.spawn(|| lower_bounds(w, &Fabric::big_switch(w.machines, plan.port_rate), &BoundConfig::default()));
        let runs = run_parallel(w, &plan.to_run(), &plan.model, plan.port_rate, plan.threads);
        (runs, bounds.join().expect("the bounds do not panic"))
    });
    let runs = runs?;
    let wall = started.elapsed();

    let baseline_run = plan.baseline.and_then(|b| runs.iter().find(|(r, _)| r.policy == b)).map(|(r, _)| r);
    let shown: Vec<&(SimResult, f64)> =
        runs.iter().filter(|(r, _)| plan.policies.contains(&r.policy.as_str())).collect();
    let summaries: Vec<Summary> =
        shown.iter().map(|(r, _)| Summary::against(r, baseline_run).with_bound(bounds.best_avg_cct_s)).collect();

    print!("{}", table(&summaries, &shown.iter().map(|(_, s)| *s).collect::<Vec<_>>(), plan.baseline, &bounds));
    eprintln!("simulated {} policies in {:.2} s wall time on {} threads", runs.len(), wall.as_secs_f64(), plan.threads);

    if let Some(path) = &args.common.json {
        let report = JsonReport {
            workload: plan.json_workload(),
            port_rate_bytes_per_s: plan.port_rate.bytes_per_sec(),
            seed: plan.seed,
            baseline: plan.baseline,
            best_lower_bound_avg_cct_s: bounds.best_avg_cct_s,
            lower_bounds: &bounds,
            results: &summaries,
        };
        write_json(path, &report)?;
    }
    if let Some(path) = &args.csv {
        let mut text =
            String::from("policy,coflow,arrival_s,bin,flows,bytes,cct_s,rejected,deadline_s,met_deadline,release_s\n");
        for (r, _) in &shown {
            for o in &r.outcomes {
                let cct = o.cct().map_or(String::new(), |c| format!("{:.9}", c.as_secs_f64()));
                let deadline = o.deadline.map_or(String::new(), |d| format!("{:.9}", d.as_secs_f64()));
                let met = o.met_deadline().map_or(String::new(), |m| m.to_string());
                let _ = writeln!(
                    text,
                    "{},{},{:.9},{},{},{},{},{},{},{},{:.9}",
                    r.policy,
                    o.id,
                    o.arrival.as_secs_f64(),
                    o.bin,
                    o.flows,
                    o.bytes,
                    cct,
                    o.rejected,
                    deadline,
                    met,
                    o.release.as_secs_f64()
                );
            }
        }
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &args.plot {
        // The baseline's curve is drawn even when it was not asked for: it is the reference.
        let base_summary =
            baseline_run.filter(|b| !plan.policies.contains(&b.policy.as_str())).map(|b| Summary::against(b, Some(b)));
        let mut fig_runs: Vec<(&SimResult, &Summary)> = shown.iter().map(|(r, _)| r).zip(&summaries).collect();
        if let (Some(b), Some(s)) = (baseline_run, &base_summary) {
            fig_runs.push((b, s));
        }
        let fig = plot::Figure {
            title: format!("{} — ports at {}", plan.source, plan.port_rate),
            runs: fig_runs,
            baseline: plan.baseline,
        };
        plot::write(path, &fig)?;
    }
    std::io::stdout().flush()?;
    Ok(())
}

/// Writes `report` as pretty JSON with a final newline.
pub(crate) fn write_json(path: &Path, report: &impl Serialize) -> Result<()> {
    let mut text = serde_json::to_string_pretty(report)?;
    text.push('\n');
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// Runs each policy on its own thread, at most `threads` at once, and returns the results in
/// the order asked with each one's wall time in seconds.
pub(crate) fn run_parallel(
    w: &Workload,
    policies: &[&'static str],
    model: &Model,
    port_rate: Rate,
    threads: usize,
) -> Result<Vec<(SimResult, f64)>> {
    let cfg = SimConfig { port_rate, check_invariants: false };
    let bars = MultiProgress::with_draw_target(if std::io::stderr().is_terminal() {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    });
    let style = ProgressStyle::with_template("{prefix:>8} [{bar:40}] {pos}/{len} coflows {elapsed}")
        .expect("static template")
        .progress_chars("=> ");
    Ok(parallel_map(policies.len(), threads, |i| {
        let name = policies[i];
        let bar = bars.add(ProgressBar::new(w.coflows.len() as u64));
        bar.set_style(style.clone());
        bar.set_prefix(name);
        let started = Instant::now();
        let mut r = simulate_with_progress(w, model.policy(name), &cfg, &mut |done| bar.set_position(done as u64));
        // A variant of the reference model reports under the name asked for.
        r.policy = name.to_string();
        bar.finish_and_clear();
        (r, started.elapsed().as_secs_f64())
    }))
}

fn table(summaries: &[Summary], wall: &[f64], baseline: Option<&str>, bounds: &LowerBounds) -> String {
    let mut t = String::new();
    let vs = format!("vs {}", baseline.unwrap_or("-"));
    let _ = writeln!(
        t,
        "{:<16} {:>11} {:>10} {:>10} {:>10} {:>10} {:>12} {:>9} {:>9} {:>8}",
        "policy", "completed", "avg CCT s", "p50 s", "p95 s", "p99 s", "makespan s", vs, "vs bound", "wall s"
    );
    for (s, w) in summaries.iter().zip(wall) {
        let factor = s.factor_vs_baseline.map_or("-".to_string(), |f| format!("{f:.2}x"));
        let vs_bound = if s.bound_ratio.is_finite() { format!("{:.2}x", s.bound_ratio) } else { "-".to_string() };
        let _ = writeln!(
            t,
            "{:<16} {:>11} {:>10.3} {:>10.3} {:>10.3} {:>10.3} {:>12.3} {:>9} {:>9} {:>8.2}",
            s.policy,
            format!("{}/{}", s.completed, s.coflows),
            s.avg_cct_s,
            s.p50_cct_s,
            s.p95_cct_s,
            s.p99_cct_s,
            s.makespan_s,
            factor,
            vs_bound,
            w
        );
    }
    t.push_str(&bounds_text(bounds));
    t.push_str(&jobs_text(summaries));
    t.push_str(&bin_table(summaries, baseline));
    if summaries.iter().any(|s| s.deadline_met_fraction.is_some()) {
        let pct = |f: Option<f64>| f.map_or("-".to_string(), |f| format!("{:.1}%", 100.0 * f));
        let _ = writeln!(
            t,
            "\n{:<16} {:>13} {:>10} {:>20} {:>9} {:>22}",
            "deadlines", "met (of all)", "admitted", "met among admitted", "rejected", "non-deadline avg CCT s"
        );
        for s in summaries {
            let _ = writeln!(
                t,
                "{:<16} {:>13} {:>10} {:>20} {:>9} {:>22}",
                s.policy,
                pct(s.deadline_met_fraction),
                pct(s.admitted_fraction),
                pct(s.met_among_admitted_fraction),
                s.rejected,
                s.non_deadline_avg_cct_s.map_or("-".to_string(), |a| format!("{a:.3}"))
            );
        }
    }
    t
}

/// The lower bounds, one line each, and which one the `vs bound` column is against.
pub(crate) fn bounds_text(b: &LowerBounds) -> String {
    let mut t = String::new();
    let _ = writeln!(t, "lower bounds on the average CCT (vs bound: over the best, {:.3} s):", b.best_avg_cct_s);
    let port = if b.lp_status.starts_with(coflow_sim::DEPENDENCIES_SKIP) {
        "per-port (not with dependencies)".to_string()
    } else {
        format!("per-port (SRPT on {})", b.per_port_resource.as_deref().unwrap_or("no port"))
    };
    let lp = b.lp_avg_cct_s.map_or("-".to_string(), |v| format!("{v:.3}"));
    let _ = writeln!(t, "  {:<38} {:>10.3} s", "isolation (each coflow's Γ alone)", b.isolation_avg_cct_s);
    let _ = writeln!(t, "  {port:<38} {:>10.3} s", b.per_port_avg_cct_s);
    let _ = writeln!(t, "  {:<38} {lp:>10} s  ({})", "LP relaxation of the ordering problem", b.lp_status);
    t
}

/// With multi-stage jobs (some job holds more than one coflow), one line per policy: jobs
/// completed and the average and p95 job completion time.
pub(crate) fn jobs_text(summaries: &[Summary]) -> String {
    let mut t = String::new();
    if !summaries.iter().any(|s| s.jobs < s.coflows) {
        return t;
    }
    let _ = writeln!(t, "\n{:<16} {:>11} {:>12} {:>12}", "jobs", "completed", "avg JCT s", "p95 JCT s");
    for s in summaries {
        let _ = writeln!(
            t,
            "{:<16} {:>11} {:>12.3} {:>12.3}",
            s.policy,
            format!("{}/{}", s.jobs_completed, s.jobs),
            s.job_avg_jct_s,
            s.job_p95_jct_s
        );
    }
    t
}

/// The per-bin table: each bin's average CCT and factor over the baseline, then the average flow
/// completion time and the share of coflows the policy made slower than the baseline.
fn bin_table(summaries: &[Summary], baseline: Option<&str>) -> String {
    let mut t = String::new();
    let Some(first) = summaries.first() else { return t };
    let vs = format!("vs {}", baseline.unwrap_or("-"));
    let _ = write!(t, "\n{:<16}", "by bin");
    for b in &first.bins {
        let _ = write!(t, " {:>19}", format!("{} ({} coflows)", b.bin, b.coflows));
    }
    let _ = write!(t, "\n{:<16}", "policy");
    for _ in &first.bins {
        let _ = write!(t, " {:>10} {:>8}", "avg CCT s", vs);
    }
    let _ = writeln!(t, " {:>10} {:>8}", "avg FCT s", "slower");
    let factor = |f: Option<f64>| f.map_or("-".to_string(), factor_text);
    for s in summaries {
        let _ = write!(t, "{:<16}", s.policy);
        for b in &s.bins {
            let avg = if b.completed > 0 { format!("{:.3}", b.avg_cct_s) } else { "-".to_string() };
            let _ = write!(t, " {:>10} {:>8}", avg, factor(b.factor_vs_baseline));
        }
        let slower = s.slower_than_baseline_fraction.map_or("-".to_string(), |f| format!("{:.1}%", 100.0 * f));
        let _ = writeln!(t, " {:>10.3} {:>8}", s.avg_fct_s, slower);
    }
    if let Some(b) = baseline {
        let _ =
            writeln!(t, "slower: share of the coflows finished under both whose CCT exceeds {b}'s by more than 1 µs");
    }
    t
}

/// A factor with two decimals, or two significant digits below 0.1 so that a large slowdown does
/// not print as `0.00x`.
fn factor_text(f: f64) -> String {
    let decimals = if f > 0.0 && f < 0.1 { (1 - f.log10().floor() as i32).min(6) as usize } else { 2 };
    format!("{f:.decimals$}x")
}

#[cfg(test)]
mod tests {
    use super::factor_text;

    #[test]
    fn small_factors_keep_two_significant_digits() {
        assert_eq!(factor_text(1.523), "1.52x");
        assert_eq!(factor_text(0.13), "0.13x");
        assert_eq!(factor_text(0.0514), "0.051x");
        assert_eq!(factor_text(0.00142), "0.0014x");
        assert_eq!(factor_text(0.0), "0.00x");
    }
}
