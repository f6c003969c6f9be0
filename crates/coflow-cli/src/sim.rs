//! `coflow sim`: replay a workload under several policies and print what the field compares.

use std::fmt::Write as _;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use coflow_sim::experiment::{Options, Spelling};
use coflow_sim::{LowerBounds, SimResult, Summary};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;

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
pub(crate) type SimPlan = coflow_sim::experiment::Plan;
pub(crate) use coflow_sim::experiment::JsonWorkload;

/// The validated form of [`CommonArgs`].
pub(crate) fn plan(a: &CommonArgs) -> Result<SimPlan> {
    crate::testbed::refuse_tcp(&a.policies, "sim")?;
    let options = Options {
        policies: &a.policies,
        baseline: &a.baseline,
        port_rate: &a.port_rate,
        seed: a.synth.seed,
        threads: a.threads,
        deadline_x: a.deadlines.then_some(a.deadline_x),
        model: a.model.model()?,
    };
    options.plan(Spelling::Flag, || match &a.trace {
        Some(p) => {
            let w = coflow_trace::read_trace(p).with_context(|| format!("reading trace {}", p.display()))?;
            Ok(a.synth.staged(w, p.display().to_string()))
        }
        None => a.synth.generate(),
    })
}

pub(crate) fn run(args: SimArgs) -> Result<()> {
    if let Some(SimCommand::Sweep(a)) = args.command {
        return sweep::run(*a);
    }
    if let Some(p) = &args.plot {
        plot::Format::of(p)?;
    }
    let mut plan = plan(&args.common)?;
    plan.adjust_workload(args.deadline_fraction, args.offline, Spelling::Flag)?;
    if args.wan.enabled() {
        if !plan.model.is_exact() {
            bail!("--wan: the reference simulator's model (--model coflowsim) is a big switch only");
        }
        return crate::wan::run(&plan, &args.wan, args.common.json.as_deref());
    }
    println!("{}", plan.describe());

    let started = Instant::now();
    let bars = MultiProgress::with_draw_target(if std::io::stderr().is_terminal() {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    });
    let style = ProgressStyle::with_template("{prefix:>8} [{bar:40}] {pos}/{len} coflows {elapsed}")
        .expect("static template")
        .progress_chars("=> ");
    let runs = plan.run(&|name, coflows| {
        let bar = Bar(bars.add(ProgressBar::new(coflows as u64)));
        bar.0.set_style(style.clone());
        bar.0.set_prefix(name.to_string());
        Box::new(move |done| bar.0.set_position(done as u64))
    });
    let wall = started.elapsed();

    let summaries = &runs.summaries;
    let shown: Vec<&(SimResult, f64)> = runs.shown().collect();
    print!("{}", table(summaries, &shown.iter().map(|(_, s)| *s).collect::<Vec<_>>(), plan.baseline, &runs.bounds));
    eprintln!(
        "simulated {} policies in {:.2} s wall time on {} threads",
        runs.runs.len(),
        wall.as_secs_f64(),
        plan.threads
    );

    if let Some(path) = &args.common.json {
        std::fs::write(path, plan.report_json(&runs)).with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &args.csv {
        let text = coflow_sim::experiment::csv(shown.iter().map(|(r, _)| r));
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &args.plot {
        let baseline_run = runs.baseline_run();
        // The baseline's curve is drawn even when it was not asked for: it is the reference.
        let base_summary =
            baseline_run.filter(|b| !plan.policies.contains(&b.policy.as_str())).map(|b| Summary::against(b, Some(b)));
        let mut fig_runs: Vec<(&SimResult, &Summary)> = shown.iter().map(|(r, _)| r).zip(summaries).collect();
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
    let text = coflow_sim::experiment::pretty_json(report);
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// A progress bar that clears itself when its policy ends.
struct Bar(ProgressBar);

impl Drop for Bar {
    fn drop(&mut self) {
        self.0.finish_and_clear();
    }
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
