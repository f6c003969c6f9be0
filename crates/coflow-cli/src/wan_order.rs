//! `coflow wan-order`: `siphon-mc` against `mrtf` on a trace over worlds of chosen link skew and
//! load, with how often the Monte Carlo search changed the decision.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::Args;
use coflow_sched::policy::MonteCarlo;
use coflow_sched::{Intra, Select};
use coflow_sim::ordering::{Skew, compare, reshape};
use coflow_sim::topology::Overrides;

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
}

/// The heaviest load factor, and the inverse of the lightest: links a thousand times slower than
/// the topology's already take a replay of the trace past days of simulated time.
const MAX_LOAD: f64 = 1000.0;

/// The items of the comma-separated list of `--{what}`, each once: an item given twice (`1,1`, or
/// `1,1.0`) would run its rows twice, or count its seed twice in the averages, so it is refused.
fn list<T: PartialEq>(what: &str, s: &str, parse: impl Fn(&str) -> Result<T, String>) -> Result<Vec<T>> {
    let mut out: Vec<T> = Vec::new();
    for x in s.split(',').map(str::trim) {
        let item = parse(x).map_err(|e| anyhow::anyhow!("--{what}: {e}"))?;
        if out.contains(&item) {
            bail!("--{what}: {x:?} is given twice");
        }
        out.push(item);
    }
    Ok(out)
}

/// Prints one row per (skew, load): the ratio of average CCTs and the probe's counts summed over
/// the seeds.
pub(crate) fn run(a: OrderArgs) -> Result<()> {
    let skews = list("skews", &a.skews, Skew::parse)?;
    let loads = list("loads", &a.loads, |x| match x.parse::<f64>() {
        Ok(v) if (1.0 / MAX_LOAD..=MAX_LOAD).contains(&v) => Ok(v),
        _ => Err(format!("{x:?} is not a number from {} to {MAX_LOAD}", 1.0 / MAX_LOAD)),
    })?;
    let seeds = list("seeds", &a.seeds, |x| x.parse::<u64>().map_err(|_| format!("{x:?} is not a whole number")))?;
    if seeds.is_empty() {
        bail!("--seeds: none given");
    }
    let w = coflow_trace::read_trace(&a.trace).with_context(|| format!("reading trace {}", a.trace.display()))?;
    // Every world is checked before the first row is run: a load that leaves a link without a
    // finite, positive mean is refused by flag, not after the rows before it.
    let first = coflow_sim::experiment::load_topology(&a.wan, w.machines, seeds[0], &Overrides::default())?;
    for skew in &skews {
        for &load in &loads {
            reshape(&first.wan, *skew, load)
                .with_context(|| format!("--loads {load:?} with --skews {}", skew.label()))?;
        }
    }
    let select = if a.mc_mean_cost { Select::MeanCost } else { Select::Wins };
    let mc = MonteCarlo { one_draw: a.mc_one_draw, select, ..MonteCarlo::default() };
    crate::output::say!(
        &[],
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
    for skew in &skews {
        for &load in &loads {
            let (mut m, mut s, mut ratio) = (0.0, 0.0, 0.0);
            // Coflows finished, by mrtf and by siphon-mc, and in the workload, over the seeds.
            let mut done = (0, 0, 0);
            let mut c = coflow_sim::ordering::OrderCounts::default();
            for &seed in &seeds {
                let overrides = Overrides { redraw_ms: a.redraw_ms, ..Overrides::default() };
                let base = coflow_sim::experiment::load_topology(&a.wan, w.machines, seed, &overrides)?;
                let world =
                    reshape(&base.wan, *skew, load).with_context(|| format!("reshaping to {}", skew.label()))?;
                let cfg = coflow_sim::WanConfig { wan: world, ..base.clone() };
                let r = compare(&w, &cfg, mc, Intra::Madd)?;
                let (mrtf, siphon) = (coflow_sim::Summary::of(&r.mrtf, None), coflow_sim::Summary::of(&r.siphon, None));
                m += mrtf.avg_cct_s;
                s += siphon.avg_cct_s;
                done = (done.0 + mrtf.completed, done.1 + siphon.completed, done.2 + mrtf.coflows);
                ratio += r.ratio();
                c += r.counts;
            }
            let n = seeds.len() as f64;
            crate::output::say!(
                &[],
                "{:<12} {:>5} {:>10.3} {:>10.3} {:>7.3}x {:>10} {:>10} {:>10} {:>9} {:>7}",
                skew.label(),
                load,
                m / n,
                s / n,
                ratio / n,
                c.decisions,
                c.contested,
                c.differing,
                c.searches,
                c.moved
            );
            if done.0 < done.2 || done.1 < done.2 {
                crate::output::say!(
                    &[],
                    "  unfinished: mrtf finished {} and siphon-mc {} of {}; the averages count finished ones only",
                    done.0,
                    done.1,
                    crate::output::count(done.2, "coflow", "coflows")
                );
            }
        }
    }
    Ok(())
}
