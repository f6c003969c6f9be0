//! The order grid: `siphon-mc` against `mrtf` on a workload over worlds of every chosen link
//! skew and load ([`crate::ordering`]), each row averaged over weather seeds.
//!
//! [`OrderSpec::check`] refuses a grid whose worlds cannot all be built before any is run, so
//! that a bad load fails at once rather than after the rows before it; [`OrderSpec::run`] hands
//! each row over as it is done, for a caller that shows rows as they come.

use std::path::PathBuf;

use coflow_core::Workload;
use coflow_sched::policy::MonteCarlo;
use coflow_sched::{Intra, Select};
use serde::Serialize;

use super::config::read_topology;
use super::{ExperimentError, PlanError, Spelling, load_topology};
use crate::ordering::{OrderCounts, Skew, compare, reshape};
use crate::topology::Overrides;
use crate::{Summary, WanConfig};

/// The heaviest load factor, and the inverse of the lightest: links a thousand times slower than
/// the topology's already take a replay of the trace past days of simulated time.
pub const MAX_LOAD: f64 = 1000.0;

/// What the grid replays: every world of `skews` × `loads`, each over every seed of `seeds`.
#[derive(Clone, Debug, PartialEq)]
pub struct OrderSpec {
    /// The topology whose datacenters, placement and link means the worlds keep (`default` or a
    /// file, as [`load_topology`] reads it).
    pub topology: String,
    /// What overrides the topology's own settings (the redraw interval).
    pub overrides: Overrides,
    /// Link shapes, each once.
    pub skews: Vec<Skew>,
    /// Load factors, each once, from `1 / MAX_LOAD` to [`MAX_LOAD`]: every link's mean is
    /// divided by each.
    pub loads: Vec<f64>,
    /// Weather seeds, each once: a row averages its figures over them.
    pub seeds: Vec<u64>,
    /// `siphon-mc`'s search.
    pub mc: MonteCarlo,
}

/// One world's figures, averaged over the seeds: `siphon-mc` against `mrtf`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OrderRow {
    /// The links' shape, as [`Skew::label`] writes it.
    pub skew: String,
    /// The load factor.
    pub load: f64,
    /// `mrtf`'s average CCT over its finished coflows, in seconds, averaged over the seeds.
    pub mrtf_avg_cct_s: f64,
    /// `siphon-mc`'s, the same way.
    pub siphon_avg_cct_s: f64,
    /// `siphon-mc`'s average CCT over `mrtf`'s, averaged over the seeds (below 1: `siphon-mc`
    /// is faster).
    pub ratio: f64,
    /// Coflows `mrtf` finished, summed over the seeds.
    pub mrtf_completed: usize,
    /// Coflows `siphon-mc` finished, summed over the seeds.
    pub siphon_completed: usize,
    /// Coflows of the workload, times the seeds.
    pub coflows: usize,
    /// What the probe counted in the `siphon-mc` runs, summed over the seeds.
    #[serde(flatten)]
    pub counts: OrderCounts,
}

/// The grid's rows with what they were run with.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OrderReport {
    /// The topology as named.
    pub topology: String,
    /// The weather seeds each row averages over.
    pub seeds: Vec<u64>,
    /// The capacity redraw interval set over the topology's, in milliseconds (none: the
    /// topology's own).
    pub redraw_ms: Option<u64>,
    /// `siphon-mc` draws once per coflow and link, as the paper.
    pub mc_one_draw: bool,
    /// `siphon-mc` enforces the candidate of least mean total CCT.
    pub mc_mean_cost: bool,
    /// One row per skew and load, skews outermost.
    pub rows: Vec<OrderRow>,
}

impl OrderRow {
    /// Whether either policy left coflows unfinished (the averages then count finished ones only).
    pub fn unfinished(&self) -> bool {
        self.mrtf_completed < self.coflows || self.siphon_completed < self.coflows
    }
}

/// A grid that passed [`OrderSpec::check`] on a workload.
#[derive(Debug)]
pub struct Checked<'a> {
    spec: &'a OrderSpec,
    workload: &'a Workload,
    spelling: Spelling,
    /// The files the topology reads (its samples files).
    pub samples_files: Vec<PathBuf>,
}

impl Checked<'_> {
    /// Runs every row, skews outermost, handing each to `on_row` as it is done.
    pub fn run(self, on_row: &mut dyn FnMut(&OrderRow)) -> Result<OrderReport, ExperimentError> {
        let s = self.spec;
        let mut rows = Vec::with_capacity(s.skews.len() * s.loads.len());
        for skew in &s.skews {
            for &load in &s.loads {
                let row = s.row(self.workload, *skew, load, self.spelling)?;
                on_row(&row);
                rows.push(row);
            }
        }
        Ok(OrderReport {
            topology: s.topology.clone(),
            seeds: s.seeds.clone(),
            redraw_ms: s.overrides.redraw_ms,
            mc_one_draw: s.mc.one_draw,
            mc_mean_cost: s.mc.select == Select::MeanCost,
            rows,
        })
    }
}

impl OrderSpec {
    /// Refuses a grid that repeats a value, has no seed or skew or load, or has a world that
    /// cannot be built on `workload`'s machines (a load that leaves a link without a finite,
    /// positive mean); errors name the options in `spelling`. The grid checked holds the files
    /// the topology reads (its samples files), for a caller that writes files to keep from
    /// writing over them, and runs as it stands.
    pub fn check<'a>(&'a self, workload: &'a Workload, spelling: Spelling) -> Result<Checked<'a>, ExperimentError> {
        let name = |o: &str| spelling.name(o);
        for (what, empty) in
            [("skews", self.skews.is_empty()), ("loads", self.loads.is_empty()), ("seeds", self.seeds.is_empty())]
        {
            if empty {
                return Err(PlanError(format!("{}: none given", name(what))).into());
            }
        }
        twice(&self.skews, |s| s.label(), &name("skews"))?;
        twice(&self.loads, |l| format!("{l:?}"), &name("loads"))?;
        twice(&self.seeds, u64::to_string, &name("seeds"))?;
        if let Some(load) = self.loads.iter().find(|l| !(1.0 / MAX_LOAD..=MAX_LOAD).contains(*l)) {
            let range = format!("from {} to {MAX_LOAD}", 1.0 / MAX_LOAD);
            return Err(PlanError(format!("{}: \"{load:?}\" is not a number {range}", name("loads"))).into());
        }
        let (first, read) = read_topology(&self.topology, workload.machines, self.seeds[0], &self.overrides)?;
        for skew in &self.skews {
            for &load in &self.loads {
                world(&first, *skew, load, spelling)?;
            }
        }
        Ok(Checked { spec: self, workload, spelling, samples_files: read })
    }

    /// Checks the grid ([`OrderSpec::check`]) and runs it ([`Checked::run`]).
    pub fn run(
        &self,
        workload: &Workload,
        spelling: Spelling,
        on_row: &mut dyn FnMut(&OrderRow),
    ) -> Result<OrderReport, ExperimentError> {
        self.check(workload, spelling)?.run(on_row)
    }

    /// One world, over the seeds.
    fn row(&self, workload: &Workload, skew: Skew, load: f64, spelling: Spelling) -> Result<OrderRow, ExperimentError> {
        let (mut mrtf_cct, mut siphon_cct, mut ratio) = (0.0, 0.0, 0.0);
        let (mut mrtf_completed, mut siphon_completed, mut coflows) = (0, 0, 0);
        let mut counts = OrderCounts::default();
        for &seed in &self.seeds {
            let base = load_topology(&self.topology, workload.machines, seed, &self.overrides)?;
            let cfg = world(&base, skew, load, spelling)?;
            let r = compare(workload, &cfg, self.mc, Intra::Madd).map_err(|e| PlanError(e.to_string()))?;
            let (mrtf, siphon) = (Summary::of(&r.mrtf, None), Summary::of(&r.siphon, None));
            mrtf_cct += mrtf.avg_cct_s;
            siphon_cct += siphon.avg_cct_s;
            // As `Comparison::ratio` computes it, from the summaries at hand.
            ratio += siphon.avg_cct_s / mrtf.avg_cct_s;
            mrtf_completed += mrtf.completed;
            siphon_completed += siphon.completed;
            coflows += mrtf.coflows;
            counts += r.counts;
        }
        let n = self.seeds.len() as f64;
        Ok(OrderRow {
            skew: skew.label(),
            load,
            mrtf_avg_cct_s: mrtf_cct / n,
            siphon_avg_cct_s: siphon_cct / n,
            ratio: ratio / n,
            mrtf_completed,
            siphon_completed,
            coflows,
            counts,
        })
    }
}

/// `base` reshaped to `skew` at `load`, or an error naming both options.
fn world(base: &WanConfig, skew: Skew, load: f64, spelling: Spelling) -> Result<WanConfig, PlanError> {
    let wan = reshape(&base.wan, skew, load).map_err(|e| {
        PlanError(format!("{} {load} with {} {}: {e}", spelling.name("loads"), spelling.name("skews"), skew.label()))
    })?;
    Ok(WanConfig { wan, ..base.clone() })
}

/// Refuses a value of `values` given twice (by its `label`): it would run its rows twice, or
/// count its seed twice in the averages.
fn twice<T>(values: &[T], label: impl Fn(&T) -> String, option: &str) -> Result<(), PlanError> {
    for (i, v) in values.iter().enumerate() {
        if values[..i].iter().any(|w| label(w) == label(v)) {
            return Err(PlanError(format!("{option}: {:?} is given twice", label(v))));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small synthetic workload of `coflows` coflows on 12 machines.
    fn workload(coflows: usize, seed: u64) -> Workload {
        coflow_trace::synth::generate(&coflow_trace::synth::SynthConfig {
            seed,
            coflows,
            machines: 12,
            ..Default::default()
        })
    }

    fn spec() -> OrderSpec {
        OrderSpec {
            topology: "default".into(),
            overrides: Overrides::default(),
            skews: vec![Skew::Constant],
            loads: vec![1.0],
            seeds: vec![1],
            mc: MonteCarlo { rounds: 4, ..MonteCarlo::default() },
        }
    }

    /// A repeated value, an empty list and a load out of range are refused by name before any row
    /// runs.
    #[test]
    fn a_grid_is_checked_before_it_runs() {
        let w = workload(4, 1);
        let err = |f: &dyn Fn(&mut OrderSpec)| {
            let mut s = spec();
            f(&mut s);
            s.run(&w, Spelling::Flag, &mut |_| panic!("no row runs")).unwrap_err().to_string()
        };
        assert_eq!(err(&|s| s.seeds = vec![1, 1]), "--seeds: \"1\" is given twice");
        assert_eq!(err(&|s| s.loads = vec![2.0, 2.0]), "--loads: \"2.0\" is given twice");
        assert_eq!(err(&|s| s.skews = vec![]), "--skews: none given");
        assert_eq!(err(&|s| s.loads = vec![1e4]), "--loads: \"10000.0\" is not a number from 0.001 to 1000");
    }

    /// Rows come in skew-major order, each handed over as it is done, and a row's ratio is that
    /// of its one seed's averages.
    #[test]
    fn rows_come_in_order_and_hold_their_seeds_figures() {
        let w = workload(6, 3);
        let s = OrderSpec { skews: vec![Skew::Constant, Skew::AsIs], loads: vec![1.0, 2.0], ..spec() };
        let mut seen = Vec::new();
        let rows = s.run(&w, Spelling::Keyword, &mut |r| seen.push((r.skew.clone(), r.load))).unwrap().rows;
        assert_eq!(seen, rows.iter().map(|r| (r.skew.clone(), r.load)).collect::<Vec<_>>());
        let order: Vec<(&str, f64)> = rows.iter().map(|r| (r.skew.as_str(), r.load)).collect();
        assert_eq!(order, [("constant", 1.0), ("constant", 2.0), ("as-is", 1.0), ("as-is", 2.0)]);
        for r in &rows {
            assert_eq!(r.coflows, 6);
            assert!(!r.unfinished());
            assert!((r.ratio - r.siphon_avg_cct_s / r.mrtf_avg_cct_s).abs() <= 1e-12 * r.ratio);
        }
    }
}
