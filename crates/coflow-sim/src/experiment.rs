//! Experiments: one workload replayed under several policies at once, as `coflow sim` and the
//! Python package run it, and the report they both write.
//!
//! The options arrive as the user typed them ([`Options`]); errors name the option in the
//! caller's [`Spelling`] (`--port-rate` on the command line, `port_rate` in Python).
//! A [`Plan`] is the validated form with its workload; [`Plan::run`] simulates the policies on
//! up to [`Plan::threads`] threads beside the lower bounds, and [`Plan::report_json`] and
//! [`csv`] render what it found.

use std::fmt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use coflow_core::{Nanos, Rate, Workload};
use coflow_sched::{Fabric, Scheduler, policy};
use serde::Serialize;

use crate::coflowsim::{self, Rules};
use crate::{
    BoundConfig, LowerBounds, SimConfig, SimResult, Summary, assign_deadlines, assign_deadlines_to_fraction,
    lower_bounds, simulate_with_progress,
};

/// How errors name an option.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Spelling {
    /// As a command-line flag: `--port-rate`.
    Flag,
    /// As a keyword argument: `port_rate`.
    Keyword,
}

impl Spelling {
    /// `option` (in snake case) spelled this way.
    pub fn name(self, option: &str) -> String {
        match self {
            Spelling::Flag => format!("--{}", option.replace('_', "-")),
            Spelling::Keyword => option.to_string(),
        }
    }
}

/// An option that does not hold; the message names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanError(pub String);

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PlanError {}

/// The options of an experiment, as typed.
#[derive(Clone, Debug)]
pub struct Options<'a> {
    /// Comma-separated policies, or `all`.
    pub policies: &'a str,
    /// The policy others are compared against (runs even when not asked for).
    pub baseline: &'a str,
    /// Capacity of every port, e.g. `1Gbps`.
    pub port_rate: &'a str,
    /// Seed of anything random in the run.
    pub seed: u64,
    /// How many simulations run at once; `None`: the machine's cores.
    pub threads: Option<usize>,
    /// The slack x of deadlines given to every coflow, if every coflow gets one.
    pub deadline_x: Option<f64>,
    /// Our exact model or the reference simulator's rules.
    pub model: Model,
}

/// The model of a run: ours (exact arrivals and sizes, decisions when anything changes), or the
/// reference simulator's (CoflowSim's) rules that are on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Model(pub Option<Rules>);

impl Model {
    /// Our exact model.
    pub const EXACT: Model = Model(None);

    /// Whether this is our exact model.
    pub fn is_exact(&self) -> bool {
        self.0.is_none()
    }

    /// Refuses policies the model has no counterpart for, naming the first; the message starts
    /// with the `policies` option in `spelling`.
    pub fn check(&self, policies: &[&str], spelling: Spelling) -> Result<(), PlanError> {
        if let Some(rules) = &self.0 {
            for &name in policies {
                if let Err(e) = coflowsim::policy(name, rules) {
                    return Err(PlanError(format!("{}: {e}", spelling.name("policies"))));
                }
            }
        }
        Ok(())
    }

    /// The workload as the model sees it.
    pub fn workload(&self, w: Workload) -> Workload {
        match &self.0 {
            Some(rules) => coflowsim::workload(&w, rules),
            None => w,
        }
    }

    /// A fresh instance of policy `name` under this model (names were checked).
    pub fn policy(&self, name: &str) -> Box<dyn Scheduler> {
        match &self.0 {
            Some(rules) => coflowsim::policy(name, rules).expect("names were checked"),
            None => policy::by_name(name).expect("names were validated"),
        }
    }

    /// What the workload line says about the model, if anything.
    pub fn describe(&self) -> String {
        match &self.0 {
            None => String::new(),
            Some(r) if *r == Rules::all() => " (model: coflowsim, every rule)".to_string(),
            Some(r) => format!(" (model: coflowsim rules {})", r.names().join(",")),
        }
    }
}

/// The validated form of [`Options`] with the workload (without generated deadlines).
#[derive(Clone, Debug)]
pub struct Plan {
    /// The workload.
    pub workload: Workload,
    /// What the workload is (a trace's path, or the synthetic generator's parameters).
    pub source: String,
    /// The policies asked for, in report order.
    pub policies: Vec<&'static str>,
    /// The policy others are compared against.
    pub baseline: Option<&'static str>,
    /// Capacity of every port.
    pub port_rate: Rate,
    /// Seed of anything random in the run.
    pub seed: u64,
    /// How many simulations run at once.
    pub threads: usize,
    /// The slack of generated deadlines, if every coflow gets one.
    pub deadline_x: Option<f64>,
    /// Our exact model or the reference simulator's rules; the workload is already as it sees it.
    pub model: Model,
}

impl Options<'_> {
    /// Validates the options (the policies against the model too), then loads the workload with
    /// `load` (only if they hold) and gives the plan with the workload as the model sees it.
    pub fn plan<E: From<PlanError>>(
        &self,
        spelling: Spelling,
        load: impl FnOnce() -> Result<(Workload, String), E>,
    ) -> Result<Plan, E> {
        let name = |o: &str| spelling.name(o);
        let port_rate: Rate = self
            .port_rate
            .parse()
            .map_err(|e| PlanError(format!("{} {:?}: {e}", name("port_rate"), self.port_rate)))?;
        let policies =
            policy::parse_list(self.policies).map_err(|e| PlanError(format!("{}: {e}", name("policies"))))?;
        if policies.is_empty() {
            return Err(PlanError(format!("{} names no policy", name("policies"))).into());
        }
        let baseline = policy::parse_list(self.baseline)
            .map_err(|e| PlanError(format!("{}: {e}", name("baseline"))))?
            .first()
            .copied();
        self.model.check(&policies, spelling)?;
        self.model
            .check(baseline.as_slice(), spelling)
            .map_err(|e| PlanError(format!("{}: {}", name("baseline"), e.0)))?;
        if let Some(x) = self.deadline_x
            && !(x.is_finite() && x >= 0.0)
        {
            return Err(PlanError(format!("{} must be a non-negative number, got {x}", name("deadline_x"))).into());
        }
        let (workload, source) = load()?;
        let (workload, source) = (self.model.workload(workload), source + &self.model.describe());
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Ok(Plan {
            workload,
            source,
            policies,
            baseline,
            port_rate,
            seed: self.seed,
            threads: self.threads.unwrap_or(cores).max(1),
            deadline_x: self.deadline_x,
            model: self.model,
        })
    }
}

/// The results of [`Plan::run`].
#[derive(Debug)]
pub struct Runs {
    /// Every run, in [`Plan::to_run`] order, each with its wall time in seconds.
    pub runs: Vec<(SimResult, f64)>,
    /// The lower bounds on the average CCT.
    pub bounds: LowerBounds,
    /// Indices into `runs` of the policies asked for, in report order.
    pub shown: Vec<usize>,
    /// The index into `runs` of the baseline's run.
    pub baseline: Option<usize>,
    /// The shown policies' figures against the baseline and the best bound.
    pub summaries: Vec<Summary>,
}

impl Runs {
    /// The runs of the policies asked for, in report order.
    pub fn shown(&self) -> impl Iterator<Item = &(SimResult, f64)> {
        self.shown.iter().map(|&i| &self.runs[i])
    }

    /// The baseline's run.
    pub fn baseline_run(&self) -> Option<&SimResult> {
        self.baseline.map(|i| &self.runs[i].0)
    }
}

/// Shows one policy's progress: called with the coflows done so far; dropped when the policy ends.
pub type Progress = Box<dyn FnMut(usize)>;

impl Plan {
    /// Prepares the workload of a single replay: deadlines for every coflow (if asked), for a
    /// seeded fraction of them, and every coflow released at time 0 (`offline`); the source says so.
    pub fn adjust_workload(
        &mut self,
        deadline_fraction: Option<f64>,
        offline: bool,
        spelling: Spelling,
    ) -> Result<(), PlanError> {
        if let Some(x) = self.deadline_x {
            assign_deadlines(&mut self.workload, self.port_rate, x, self.seed);
        }
        if let Some(f) = deadline_fraction {
            if !(0.0..=1.0).contains(&f) {
                return Err(PlanError(format!(
                    "{} must be between 0 and 1, got {f}",
                    spelling.name("deadline_fraction")
                )));
            }
            assign_deadlines_to_fraction(&mut self.workload, self.port_rate, 1.0, f, self.seed);
            self.source.push_str(&format!(" ({:.0}% of coflows with deadlines)", 100.0 * f));
        }
        if offline {
            for c in &mut self.workload.coflows {
                c.arrival = Nanos::ZERO;
            }
            self.source.push_str(" (offline: every coflow released at time 0)");
        }
        Ok(())
    }

    /// The policies to simulate: those asked for, then the baseline if it is not among them (it
    /// runs anyway, so that factors can be reported).
    pub fn to_run(&self) -> Vec<&'static str> {
        let mut to_run = self.policies.clone();
        if let Some(b) = self.baseline
            && !to_run.contains(&b)
        {
            to_run.push(b);
        }
        to_run
    }

    /// The workload's line at the top of every report.
    pub fn describe(&self) -> String {
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

    /// The workload as reports describe it.
    pub fn json_workload(&self) -> JsonWorkload<'_> {
        let w = &self.workload;
        JsonWorkload {
            source: &self.source,
            coflows: w.coflows.len(),
            flows: w.flow_count(),
            machines: w.machines,
            bytes: w.total_bytes().get(),
        }
    }

    /// Simulates every policy of [`Plan::to_run`] on up to [`Plan::threads`] threads, the lower
    /// bounds (an LP among them) beside them; `progress` is called as each policy starts with its
    /// name and the number of coflows.
    pub fn run(&self, progress: &(dyn Fn(&str, usize) -> Progress + Sync)) -> Runs {
        let w = &self.workload;
        let to_run = self.to_run();
        let cfg = SimConfig { port_rate: self.port_rate, check_invariants: false, from_scratch: false };
        let (runs, bounds) = std::thread::scope(|s| {
            let bounds =
                s.spawn(|| lower_bounds(w, &Fabric::big_switch(w.machines, self.port_rate), &BoundConfig::default()));
            let runs = parallel_map(to_run.len(), self.threads, |i| {
                let name = to_run[i];
                let mut bar = progress(name, w.coflows.len());
                let started = Instant::now();
                let mut r = simulate_with_progress(w, self.model.policy(name), &cfg, &mut |done| bar(done));
                // A variant of the reference model reports under the name asked for.
                r.policy = name.to_string();
                drop(bar);
                (r, started.elapsed().as_secs_f64())
            });
            (runs, bounds.join().expect("the bounds do not panic"))
        });
        let baseline = self.baseline.and_then(|b| runs.iter().position(|(r, _)| r.policy == b));
        let shown: Vec<usize> =
            (0..runs.len()).filter(|&i| self.policies.contains(&runs[i].0.policy.as_str())).collect();
        let base_run = baseline.map(|i| &runs[i].0);
        let summaries =
            shown.iter().map(|&i| Summary::against(&runs[i].0, base_run).with_bound(bounds.best_avg_cct_s)).collect();
        Runs { runs, bounds, shown, baseline, summaries }
    }

    /// The JSON report of `runs`: pretty, with a final newline.
    pub fn report_json(&self, runs: &Runs) -> String {
        let report = JsonReport {
            workload: self.json_workload(),
            port_rate_bytes_per_s: self.port_rate.bytes_per_sec(),
            seed: self.seed,
            baseline: self.baseline,
            best_lower_bound_avg_cct_s: runs.bounds.best_avg_cct_s,
            lower_bounds: &runs.bounds,
            results: &runs.summaries,
        };
        pretty_json(&report)
    }
}

/// `value` as pretty JSON with a final newline.
pub fn pretty_json(value: &impl Serialize) -> String {
    let mut text = serde_json::to_string_pretty(value).expect("reports serialize");
    text.push('\n');
    text
}

/// The header of [`csv`].
pub const CSV_HEADER: &str =
    "policy,coflow,arrival_s,bin,flows,bytes,cct_s,rejected,deadline_s,met_deadline,release_s\n";

/// One row per coflow and run, after [`CSV_HEADER`].
pub fn csv<'a>(runs: impl IntoIterator<Item = &'a SimResult>) -> String {
    use std::fmt::Write as _;
    let mut text = String::from(CSV_HEADER);
    for r in runs {
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
    text
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

/// The workload as reports describe it.
#[derive(Debug, Serialize)]
pub struct JsonWorkload<'a> {
    source: &'a str,
    coflows: usize,
    flows: usize,
    machines: u32,
    bytes: u64,
}

/// `f(0)`, …, `f(jobs - 1)` on up to `threads` scoped threads, each idle thread taking the next
/// job; the results come back in job order, whatever order the jobs finished in.
pub fn parallel_map<T: Send>(jobs: usize, threads: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let next = AtomicUsize::new(0);
    let out: Mutex<Vec<Option<T>>> = Mutex::new((0..jobs).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..threads.clamp(1, jobs.max(1)) {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= jobs {
                        break;
                    }
                    let r = f(i);
                    out.lock().expect("no panics while holding the lock")[i] = Some(r);
                }
            });
        }
    });
    out.into_inner().expect("threads joined").into_iter().map(|r| r.expect("every job ran")).collect()
}

#[cfg(test)]
mod tests {
    use super::{CSV_HEADER, Model, Options, Spelling, csv, parallel_map};
    use crate::coflowsim::Rules;
    use coflow_core::{Bytes, Coflow, CoflowId, Flow, MIB, MachineId, Nanos, Workload};

    #[test]
    fn results_come_back_in_job_order_on_any_number_of_threads() {
        for threads in [1, 2, 7] {
            assert_eq!(parallel_map(5, threads, |i| i * i), [0, 1, 4, 9, 16]);
        }
        assert!(parallel_map(0, 2, |i| i).is_empty());
    }

    #[test]
    fn errors_name_the_option_in_the_callers_spelling() {
        let opts = Options {
            policies: "varys",
            baseline: "fair",
            port_rate: "fast",
            seed: 1,
            threads: None,
            deadline_x: None,
            model: super::Model::EXACT,
        };
        let load = || Ok::<_, super::PlanError>((Workload { machines: 1, coflows: vec![] }, String::new()));
        let flag = opts.plan(Spelling::Flag, load).unwrap_err().0;
        assert!(flag.starts_with("--port-rate \"fast\": "), "{flag}");
        let kw = opts.plan(Spelling::Keyword, load).unwrap_err().0;
        assert!(kw.starts_with("port_rate \"fast\": "), "{kw}");
        let opts = Options { port_rate: "1Gbps", policies: "varys,nope", ..opts };
        let kw = opts.plan(Spelling::Keyword, load).unwrap_err().0;
        assert!(kw.starts_with("policies: unknown policy \"nope\""), "{kw}");
    }

    /// Coflow 1 sends 1 MiB from machine 0 to 1 at time 0; coflow 2, arriving at 0 too, sends
    /// 1 MiB the same way once coflow 1 has finished.
    fn chain() -> Workload {
        let flow = || vec![Flow { src: MachineId(0), dst: MachineId(1), size: Bytes(MIB) }];
        let mut second = Coflow::new(CoflowId(2), Nanos::ZERO, flow());
        second.parents = vec![CoflowId(1)];
        Workload::new(2, vec![Coflow::new(CoflowId(1), Nanos::ZERO, flow()), second]).unwrap()
    }

    fn options(model: Model) -> Options<'static> {
        Options {
            policies: "varys",
            baseline: "fair",
            port_rate: "1MiB/s",
            seed: 1,
            threads: Some(1),
            deadline_x: None,
            model,
        }
    }

    #[test]
    fn csv_rows_give_the_cct_from_the_release_and_the_release_after_the_parents() {
        let plan = options(Model::EXACT).plan(Spelling::Flag, || Ok::<_, super::PlanError>((chain(), String::new())));
        let runs = plan.unwrap().run(&|_, _| Box::new(|_| {}));
        let text = csv(runs.shown().map(|(r, _)| r));
        let mut lines = text.lines();
        assert_eq!(lines.next(), CSV_HEADER.strip_suffix('\n'));
        let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
        assert_eq!(rows.len(), 2, "{text}");
        // Each coflow has the port to itself for 1 s: coflow 1 from 0 to 1 s, coflow 2 from 1 to 2 s.
        for (row, release) in rows.iter().zip([0.0, 1.0]) {
            assert_eq!(row.len(), 11, "{text}");
            let cct: f64 = row[6].parse().unwrap();
            let released: f64 = row[10].parse().unwrap();
            assert!((cct - 1.0).abs() < 1e-6 && (released - release).abs() < 1e-6, "{text}");
        }
    }

    #[test]
    fn the_reference_model_refuses_policies_it_lacks_and_keeps_the_names_asked_for() {
        let model = Model(Some(Rules::all()));
        let load = || Ok::<_, super::PlanError>((chain(), "chain".to_string()));
        let e = Options { policies: "varys,sincronia", ..options(model) }.plan(Spelling::Keyword, load).unwrap_err().0;
        assert!(e.starts_with("policies: ") && e.contains("sincronia"), "{e}");
        let e = Options { baseline: "sincronia", ..options(model) }.plan(Spelling::Flag, load).unwrap_err().0;
        assert!(e.starts_with("--baseline: --policies: ") && e.contains("sincronia"), "{e}");
        let plan = Options { policies: "varys,fair", ..options(model) }.plan(Spelling::Flag, load).unwrap();
        assert_eq!(plan.source, "chain (model: coflowsim, every rule)");
        let runs = plan.run(&|_, _| Box::new(|_| {}));
        let names: Vec<&str> = runs.runs.iter().map(|(r, _)| r.policy.as_str()).collect();
        assert_eq!(names, ["varys", "fair"]);
        assert_eq!(runs.baseline, Some(1));
    }
}
