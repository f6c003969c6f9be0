//! Sweeps: how the policies compare as more coflows share the fabric at once (Varys §7.7,
//! Figures 13 and 14), each N replayed on windows of N coflows all released at time 0.
//!
//! [`window`] draws one workload; [`Plan::sweep`] runs every policy and the baseline on every
//! window beside each window's lower bounds, and averages each figure over the windows of an N
//! ([`SweepResult`]); [`Sweep::report_json`] and [`Sweep::tables`] render it.

use std::fmt::Write as _;
use std::ops::ControlFlow;
use std::sync::atomic::AtomicBool;

use coflow_core::{Coflow, CoflowId, Rate, Workload};
use coflow_sched::Fabric;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use super::{JsonWorkload, Plan, parallel_map, pretty_json, replay_unless_stopped};
use crate::{BoundConfig, SimConfig, SimResult, Stopped, Summary, assign_deadlines, lower_bounds};

/// The most flows a sweep's windows may hold together, as the workload's mean coflow makes them
/// (a coflow of no flow counting as one): every window is held in memory at once.
pub const MAX_FLOWS: f64 = 50e6;

/// What a sweep replays: for each N of `concurrent`, `windows` windows of N coflows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SweepSpec {
    /// Numbers of coflows present at once (repeats are run once).
    pub concurrent: Vec<usize>,
    /// How many windows (workloads) to draw per N; their figures are averaged.
    pub windows: usize,
}

/// One line stating the method, printed and written to the JSON report.
pub const METHOD: &str = "windows of N consecutive coflows from seeded random starts, all released at time 0 in a \
                          seeded random order; figures are means over windows";

/// The line that states a sweep of `windows` windows per N and its method, under the workload's.
pub fn describe(windows: usize) -> String {
    format!("sweep: {windows} windows per N; {METHOD}")
}

/// One workload of a sweep: `concurrent` coflows all present at once.
#[derive(Debug)]
pub struct Window {
    /// How many coflows it holds.
    pub concurrent: usize,
    /// The index in the source workload of its first coflow.
    pub start: usize,
    /// The coflows, renumbered `0..concurrent` and released at time 0.
    pub workload: Workload,
}

/// The `k`-th window of `n` concurrent coflows drawn from `w`: from a generator seeded by `seed`,
/// `n` and `k` (so a window does not depend on the other values of `n`), `n` consecutive coflows
/// from a uniformly drawn start, shuffled, renumbered `0..n` in that order, released at time 0,
/// without their dependencies; with `deadline_x`, each gets a deadline drawn as
/// [`assign_deadlines`] draws it, seeded by the same generator.
///
/// # Panics
/// If `n` is 0 or more than `w` has coflows.
pub fn window(w: &Workload, n: usize, k: usize, seed: u64, port_rate: Rate, deadline_x: Option<f64>) -> Window {
    assert!(n >= 1 && n <= w.coflows.len(), "a window of {n} of {} coflows", w.coflows.len());
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(((n as u64) << 32) | k as u64);
    let start = rng.gen_range(0..=w.coflows.len() - n);
    let mut picked: Vec<Coflow> = w.coflows[start..start + n].to_vec();
    picked.shuffle(&mut rng);
    for (i, c) in picked.iter_mut().enumerate() {
        c.id = CoflowId(i as u64);
        c.parents.clear();
    }
    let mut workload = Workload { machines: w.machines, coflows: picked };
    // Released together, they keep the shuffled order, which is also the order of their ids.
    workload.release_at_zero();
    workload.validate().expect("a window of a valid workload is valid");
    if let Some(x) = deadline_x {
        assign_deadlines(&mut workload, port_rate, x, rng.r#gen());
    }
    Window { concurrent: n, start, workload }
}

/// The figures of one N and one policy, each the mean over the windows of that window's figure
/// (`None` figures are left out of the mean; `None` if every window's is).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SweepResult {
    /// N.
    pub concurrent: usize,
    /// The policy.
    pub policy: &'static str,
    /// Windows of this N.
    pub windows: usize,
    /// Coflows over all windows (`concurrent · windows`).
    pub coflows: usize,
    /// Of them, those that finished.
    pub completed: usize,
    /// Average CCT: the mean of the windows' averages (NaN if no window finished a coflow).
    pub avg_cct_s: f64,
    /// Average FCT, the same way.
    pub avg_fct_s: f64,
    /// The factor of improvement of average CCT over the baseline.
    pub factor_vs_baseline: Option<f64>,
    /// Its minimum over the windows.
    pub factor_vs_baseline_min: Option<f64>,
    /// Its maximum over the windows.
    pub factor_vs_baseline_max: Option<f64>,
    /// The share of coflows made slower than under the baseline.
    pub slower_than_baseline_fraction: Option<f64>,
    /// Each window's average CCT over its best lower bound.
    pub bound_ratio: Option<f64>,
    /// The share of coflows that met their deadline.
    pub deadline_met_fraction: Option<f64>,
    /// The share of coflows admitted.
    pub admitted_fraction: Option<f64>,
    /// The share met among the admitted.
    pub met_among_admitted_fraction: Option<f64>,
}

impl SweepResult {
    fn of(concurrent: usize, policy: &'static str, s: &[Summary]) -> SweepResult {
        // Over the windows that have the figure (a window that finished no coflow has no average).
        let mean = |f: &dyn Fn(&Summary) -> Option<f64>| {
            let v: Vec<f64> = s.iter().filter_map(f).filter(|x| x.is_finite()).collect();
            (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
        };
        let factors = s.iter().filter_map(|s| s.factor_vs_baseline);
        SweepResult {
            concurrent,
            policy,
            windows: s.len(),
            coflows: s.iter().map(|s| s.coflows).sum(),
            completed: s.iter().map(|s| s.completed).sum(),
            avg_cct_s: mean(&|s| Some(s.avg_cct_s)).unwrap_or(f64::NAN),
            avg_fct_s: mean(&|s| Some(s.avg_fct_s)).unwrap_or(f64::NAN),
            factor_vs_baseline: mean(&|s| s.factor_vs_baseline),
            factor_vs_baseline_min: factors.clone().reduce(f64::min),
            factor_vs_baseline_max: factors.reduce(f64::max),
            slower_than_baseline_fraction: mean(&|s| s.slower_than_baseline_fraction),
            bound_ratio: mean(&|s| Some(s.bound_ratio)),
            deadline_met_fraction: mean(&|s| s.deadline_met_fraction),
            admitted_fraction: mean(&|s| s.admitted_fraction),
            met_among_admitted_fraction: mean(&|s| s.met_among_admitted_fraction),
        }
    }
}

/// What a sweep found.
#[derive(Debug)]
pub struct Sweep {
    /// The numbers of coflows present at once, repeats removed, in the order asked.
    pub ns: Vec<usize>,
    /// Windows per N.
    pub windows_per_n: usize,
    /// Per N (in the order of `ns`), the index in the workload of each window's first coflow.
    pub starts: Vec<Vec<usize>>,
    /// The figures, by N then by policy in report order.
    pub results: Vec<SweepResult>,
    /// How many simulations ran (windows × policies, the baseline among them).
    pub runs: usize,
    /// How many policies ran on each window (the baseline among them).
    pub policies_run: usize,
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

impl Plan {
    /// Runs every policy of [`Plan::to_run`] and each window's lower bounds on every window of
    /// `spec`, on up to [`Plan::threads`] threads; `tick` is called as each simulation ends, and
    /// `go_on` every few milliseconds of each: its [`ControlFlow::Break`] stops the sweep.
    ///
    /// # Panics
    /// If an N of `spec` is 0 or more than the workload has coflows ([`Config::plan`] refuses
    /// both), or the plan is on a wide area.
    ///
    /// [`Config::plan`]: super::Config::plan
    pub fn sweep(
        &self,
        spec: &SweepSpec,
        tick: &(dyn Fn() + Sync),
        go_on: &(dyn Fn() -> ControlFlow<()> + Sync),
    ) -> Result<Sweep, Stopped> {
        assert!(self.wide_area.is_none(), "a sweep runs on the big switch");
        let mut ns: Vec<usize> = Vec::new();
        for &n in &spec.concurrent {
            if !ns.contains(&n) {
                ns.push(n);
            }
        }
        let windows: Vec<Window> = ns
            .iter()
            .flat_map(|&n| (0..spec.windows).map(move |k| (n, k)))
            .map(|(n, k)| window(&self.workload, n, k, self.seed, self.port_rate, self.deadline_x))
            .collect();
        let to_run = self.to_run();
        let cfg = SimConfig::big_switch(self.port_rate);
        let stopped = AtomicBool::new(false);
        let runs = parallel_map(windows.len() * to_run.len(), self.threads, |j| {
            let name = to_run[j % to_run.len()];
            let w = &windows[j / to_run.len()].workload;
            let mut r = replay_unless_stopped(&stopped, &mut |_| go_on(), || (w, self.model.policy(name), &cfg))?;
            r.policy = name.to_string();
            tick();
            Some(r)
        });
        let runs: Vec<SimResult> = runs.into_iter().collect::<Option<_>>().ok_or(Stopped)?;
        let bounds = parallel_map(windows.len(), self.threads, |k| {
            let w = &windows[k].workload;
            lower_bounds(w, &Fabric::big_switch(w.machines, self.port_rate), &BoundConfig::default()).best_avg_cct_s
        });
        // Summaries per window, in the order of `to_run`.
        let per_window: Vec<Vec<Summary>> = runs
            .chunks(to_run.len())
            .zip(&bounds)
            .map(|(rs, &bound)| {
                let base = self.baseline.and_then(|b| rs.iter().find(|r| r.policy == b));
                rs.iter().map(|r| Summary::against(r, base).with_bound(bound)).collect()
            })
            .collect();
        let mut results = Vec::new();
        for (i, &n) in ns.iter().enumerate() {
            let of_n = &per_window[i * spec.windows..(i + 1) * spec.windows];
            for (p, &name) in to_run.iter().enumerate().filter(|(_, name)| self.policies.contains(name)) {
                let s: Vec<Summary> = of_n.iter().map(|w| w[p].clone()).collect();
                results.push(SweepResult::of(n, name, &s));
            }
        }
        let starts =
            ns.iter().map(|&n| windows.iter().filter(|w| w.concurrent == n).map(|w| w.start).collect()).collect();
        Ok(Sweep { ns, windows_per_n: spec.windows, starts, results, runs: runs.len(), policies_run: to_run.len() })
    }
}

impl Sweep {
    /// The JSON report: pretty, with a final newline.
    pub fn report_json(&self, plan: &Plan) -> String {
        pretty_json(&SweepReport {
            workload: plan.json_workload(),
            port_rate_bytes_per_s: plan.port_rate.bytes_per_sec(),
            seed: plan.seed,
            baseline: plan.baseline,
            method: METHOD,
            windows_per_n: self.windows_per_n,
            deadline_x: plan.deadline_x,
            windows: self
                .ns
                .iter()
                .zip(&self.starts)
                .map(|(&n, starts)| JsonWindows { concurrent: n, starts: starts.clone() })
                .collect(),
            results: &self.results,
        })
    }

    /// The text report: a row per N and a column per policy, for the factor of improvement, the
    /// ratio to the best bound and, with deadlines, the share of coflows that met theirs; an
    /// option it names is in `spelling`.
    pub fn tables(&self, plan: &Plan, spelling: super::Spelling) -> String {
        let policies = &plan.policies;
        let table = |title: &str, cell: &dyn Fn(&SweepResult) -> Option<String>| {
            let mut t = String::new();
            let width: Vec<usize> = policies.iter().map(|p| p.len().max(8)).collect();
            let _ = write!(t, "\n{title}\n{:<8}", "N");
            for (p, w) in policies.iter().zip(&width) {
                let _ = write!(t, " {p:>w$}");
            }
            t.push('\n');
            for &n in &self.ns {
                let _ = write!(t, "{n:<8}");
                for (p, w) in policies.iter().zip(&width) {
                    let r = self.results.iter().find(|r| r.concurrent == n && r.policy == *p);
                    let c = r.and_then(cell).unwrap_or_else(|| "-".to_string());
                    let _ = write!(t, " {c:>w$}");
                }
                t.push('\n');
            }
            t
        };
        // A factor is over the coflows that finished: mark those of policies that rejected some.
        let mark = |r: &SweepResult| if r.completed < r.coflows { "*" } else { "" };
        let title = format!("improvement of average CCT over {} (mean over windows)", plan.baseline.unwrap_or("-"));
        let mut t = table(&title, &|r| r.factor_vs_baseline.map(|f| format!("{f:.2}x{}", mark(r))));
        if self.results.iter().any(|r| !mark(r).is_empty()) {
            t.push_str("*: over the coflows that finished; admission control rejected the others\n");
        }
        t.push_str(&table("average CCT over the best lower bound of its window (mean over windows)", &|r| {
            r.bound_ratio.map(|f| format!("{f:.2}x{}", mark(r)))
        }));
        if plan.deadline_x.is_some() {
            t.push_str(&table("coflows that met their deadline (mean over windows)", &|r| {
                r.deadline_met_fraction.map(|f| format!("{:.1}%", 100.0 * f))
            }));
        } else {
            let deadlines = match spelling {
                super::Spelling::Flag => "--deadlines",
                super::Spelling::Keyword => "deadlines=True",
            };
            let _ = writeln!(t, "(add {deadlines} for the share of coflows that meet deadlines, Varys Figure 14)");
        }
        t
    }
}
