//! `coflow sim`: replay a workload under several policies, on the big switch or a wide area, and
//! print what the field compares.

use std::io::IsTerminal;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Result;
use clap::Args;
use coflow_sim::experiment::{Config, Progress, Spelling};
use coflow_sim::{SimResult, Summary};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::plan::CommonArgs;
use crate::{output, plot, table, wan};

/// Options of `coflow sim`.
#[derive(Debug, Args)]
pub(crate) struct SimArgs {
    // Boxed, as is the sweep's: options are large and `coflow`'s command enum holds them.
    #[command(flatten)]
    pub(crate) common: Box<CommonArgs>,
    /// Write one row per coflow and policy as CSV to this file (`-`: standard output).
    #[arg(long)]
    csv: Option<PathBuf>,
    /// Draw the CCT distributions of all policies (log axis) and each one's improvement per bin
    /// over the baseline into this file, SVG or PNG by its extension.
    #[arg(long, value_name = "FILE.svg|FILE.png")]
    plot: Option<PathBuf>,
    #[command(flatten)]
    wan: wan::WanArgs,
    /// Release every coflow at time 0 (the offline setting of the ordering literature), for
    /// every policy.
    #[arg(long)]
    offline: bool,
    /// Give a seeded fraction F of the coflows a deadline, drawn as --deadlines draws them (x = 1),
    /// and none to the others: a mix of deadline and non-deadline coflows (Karuna).
    #[arg(long, value_name = "F", conflicts_with = "deadlines")]
    deadline_fraction: Option<f64>,
}

pub(crate) fn run(args: SimArgs) -> Result<()> {
    // clap's `requires` on --deadline-x does not hold against --deadline-fraction, which
    // conflicts with --deadlines: said here, rather than the slack ignored.
    if args.deadline_fraction.is_some() && args.common.deadline_x.is_some() {
        anyhow::bail!("--deadline-x sets the slack of --deadlines; --deadline-fraction draws its deadlines with x = 1");
    }
    if let Some(p) = &args.plot {
        plot::Format::of(p)?;
    }
    let outputs = [args.common.json.as_deref(), args.csv.as_deref(), args.plot.as_deref()];
    let named = [("--json", outputs[0]), ("--csv", outputs[1]), ("--plot", outputs[2])];
    output::prepare(&named, &[("--trace", args.common.trace()), ("--wan", args.wan.file())])?;
    let config = Config {
        deadline_fraction: args.deadline_fraction,
        offline: args.offline,
        wide_area: args.wan.spec(),
        ..args.common.config()?
    };
    let plan = config.plan(Spelling::Flag)?;
    // The topology's samples files are known once it is read.
    output::not_over(&named, &output::samples_files(&plan.read))?;
    for note in &plan.notes {
        output::remark!("{note}");
    }
    output::human(&format!("{}\n", plan.describe()), &outputs);

    let started = Instant::now();
    let bars = MultiProgress::with_draw_target(if std::io::stderr().is_terminal() {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    });
    let style = ProgressStyle::with_template("{prefix:>8} [{bar:40}] {pos}/{len} coflows {elapsed}")
        .expect("static template")
        .progress_chars("=> ");
    let progress = |name: &str, coflows: usize| -> Progress {
        let bar = Bar(bars.add(ProgressBar::new(coflows as u64)));
        bar.0.set_style(style.clone());
        bar.0.set_prefix(name.to_string());
        Box::new(move |done| {
            bar.0.set_position(done as u64);
            ControlFlow::Continue(())
        })
    };
    let runs = plan.run(&progress)?;
    let wall = started.elapsed();

    let summaries = &runs.summaries;
    let shown: Vec<&(SimResult, f64)> = runs.shown().collect();
    let walls: Vec<f64> = shown.iter().map(|(_, s)| *s).collect();
    output::human(&table::table(summaries, &walls, plan.baseline, runs.bounds.as_ref()), &outputs);
    if let Some(path) = &args.common.json {
        output::write(path, plan.report_json(&runs))?;
    }
    if let Some(path) = &args.csv {
        output::write(path, coflow_sim::experiment::csv(shown.iter().map(|(r, _)| r)))?;
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
        let fabric = match &plan.wide_area {
            None => format!("ports at {}", plan.port_rate),
            Some(wa) => format!("wide area {}", wa.topology),
        };
        let fig =
            plot::Figure { title: format!("{} — {fabric}", plan.source), runs: fig_runs, baseline: plan.baseline };
        plot::write(path, &fig)?;
    }
    output::remark!(
        "simulated {} in {:.2} s wall time on {}",
        output::count(runs.runs.len(), "policy", "policies"),
        wall.as_secs_f64(),
        output::count(plan.threads.min(runs.runs.len()), "thread", "threads")
    );
    Ok(())
}

/// A progress bar that clears itself when its policy ends.
struct Bar(ProgressBar);

impl Drop for Bar {
    fn drop(&mut self) {
        self.0.finish_and_clear();
    }
}
