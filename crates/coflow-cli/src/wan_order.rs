//! `coflow wan-order`: `siphon-mc` against `mrtf` on a trace over worlds of chosen link skew and
//! load, with how often the Monte Carlo search changed the decision; the grid is the library's
//! (`coflow_sim::experiment::order`), this module parses and prints.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args;
use coflow_sched::Select;
use coflow_sched::policy::MonteCarlo;
use coflow_sim::experiment::Spelling;
use coflow_sim::experiment::order::{MAX_LOAD, OrderReport, OrderRow, OrderSpec};
use coflow_sim::ordering::Skew;
use coflow_sim::topology::Overrides;
use serde::Serialize;

/// Options of `coflow wan-order`.
#[derive(Debug, Args)]
pub(crate) struct OrderArgs {
    /// The trace to replay.
    #[arg(long)]
    trace: PathBuf,
    /// The topology whose datacenters, placement and link means the worlds keep (as `coflow sim --wan`).
    #[arg(
        long,
        default_value = "default",
        value_name = "FILE|default",
        value_parser = clap::builder::NonEmptyStringValueParser::new()
    )]
    wan: String,
    /// Link shapes, comma-separated: `as-is`, `constant`, `uniform-S`, `dips-P`, `mixed-P`, with
    /// S (the spread around the mean) and P (the dip probability) strictly between 0 and 1.
    #[arg(long, default_value = "as-is,constant,uniform-0.5,dips-0.1,mixed-0.1")]
    skews: String,
    /// Load factors, comma-separated, each from 0.001 to 1000: every link's mean is divided by
    /// each.
    #[arg(long, default_value = "1,2,4")]
    loads: String,
    /// Weather seeds, comma-separated; each row averages its ratio over them.
    #[arg(long, default_value = "1,2,3")]
    seeds: String,
    /// Redraw link capacities every this many milliseconds, overriding the topology's (as
    /// `coflow sim --redraw-ms`; 0: one draw holds for the whole run).
    #[arg(long, value_name = "MS", value_parser = crate::units::millis)]
    redraw_ms: Option<u64>,
    /// One bandwidth draw per coflow and link, as the paper (see `coflow sim --mc-one-draw`).
    #[arg(long)]
    mc_one_draw: bool,
    /// Enforce the candidate of least mean total CCT over all rounds (see `coflow sim --mc-mean-cost`).
    #[arg(long)]
    mc_mean_cost: bool,
    /// Also write the rows as JSON to this file (`-`: standard output).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

/// The items of the comma-separated list of `--{what}`, each parsed by `parse`.
fn list<T>(what: &str, s: &str, parse: impl Fn(&str) -> Result<T, String>) -> Result<Vec<T>> {
    s.split(',').map(str::trim).map(|x| parse(x).map_err(|e| anyhow::anyhow!("--{what}: {e}"))).collect()
}

/// Prints one row per (skew, load) as it is done: the ratio of average CCTs and the probe's
/// counts summed over the seeds.
pub(crate) fn run(a: OrderArgs) -> Result<()> {
    crate::output::prepare(
        &[("--json", a.json.as_deref())],
        &[("--trace", Some(&a.trace)), ("--wan", wan_file(&a.wan))],
    )?;
    let skews = list("skews", &a.skews, Skew::parse)?;
    let loads = list("loads", &a.loads, |x| {
        x.parse::<f64>().map_err(|_| format!("{x:?} is not a number from {} to {MAX_LOAD}", 1.0 / MAX_LOAD))
    })?;
    let seeds = list("seeds", &a.seeds, |x| x.parse::<u64>().map_err(|_| format!("{x:?} is not a whole number")))?;
    let select = if a.mc_mean_cost { Select::MeanCost } else { Select::Wins };
    let spec = OrderSpec {
        topology: a.wan.clone(),
        overrides: Overrides { redraw_ms: a.redraw_ms, ..Overrides::default() },
        skews,
        loads,
        seeds,
        mc: MonteCarlo { one_draw: a.mc_one_draw, select, ..MonteCarlo::default() },
    };
    let w = coflow_trace::read_trace(&a.trace).with_context(|| format!("reading trace {}", a.trace.display()))?;
    let checked = spec.check(&w, Spelling::Flag)?;
    crate::output::not_over(&[("--json", a.json.as_deref())], &crate::output::samples_files(&checked.samples_files))?;
    let outs = &[a.json.as_deref()];
    crate::output::say!(
        outs,
        "{:<12} {:>5} {:>10} {:>10} {:>8} {:>10} {:>10} {:>10} {:>9} {:>7}",
        "skew",
        "load",
        "mrtf s",
        "siphon s",
        "ratio",
        "decisions",
        "contested",
        "differing",
        "searches",
        "moved"
    );
    let report = checked.run(&mut |r| print_row(r, outs))?;
    if let Some(path) = &a.json {
        crate::output::json(path, &Json { trace: &a.trace, report: &report })?;
    }
    Ok(())
}

/// The JSON report: the trace beside the grid's report.
#[derive(Serialize)]
struct Json<'a> {
    trace: &'a Path,
    #[serde(flatten)]
    report: &'a OrderReport,
}

/// The topology file `--wan` names, if it names one.
fn wan_file(wan: &str) -> Option<&Path> {
    (wan != "default").then_some(Path::new(wan))
}

/// One row of the table, and a line under it if a policy left coflows unfinished.
fn print_row(r: &OrderRow, outs: &[Option<&Path>]) {
    let n = r.counts;
    crate::output::say!(
        outs,
        "{:<12} {:>5} {:>10.3} {:>10.3} {:>7.3}x {:>10} {:>10} {:>10} {:>9} {:>7}",
        r.skew,
        r.load,
        r.mrtf_avg_cct_s,
        r.siphon_avg_cct_s,
        r.ratio,
        n.decisions,
        n.contested,
        n.differing,
        n.searches,
        n.moved
    );
    if r.unfinished() {
        crate::output::say!(
            outs,
            "  unfinished: mrtf finished {} and siphon-mc {} of {}; the averages count finished ones only",
            r.mrtf_completed,
            r.siphon_completed,
            crate::output::count(r.coflows, "coflow", "coflows")
        );
    }
}
