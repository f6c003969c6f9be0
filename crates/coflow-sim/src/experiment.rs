//! The front door: one workload replayed under several policies at once, or swept over windows
//! of N coflows, as `coflow sim`, `coflow sim sweep` and the Python package run it, and the
//! reports they all write.
//!
//! A [`Config`] holds the experiment as the user gave it (workload, fabric, policies, model,
//! stages, deadlines, sweep, seed); errors name the option in the caller's [`Spelling`]
//! (`--port-rate` on the command line, `port_rate` in Python).
//! [`Config::plan`] validates it into a [`Plan`], with its workload, on the big switch or on a
//! wide area; [`Plan::run`] simulates the policies on up to [`Plan::threads`] threads (beside the
//! lower bounds on the big switch), and [`Plan::report_json`] and [`csv`] render what it found;
//! [`Plan::sweep`] runs a sweep ([`sweep`]).

mod config;
pub mod order;
pub mod sweep;

pub use config::{
    Config, ExperimentError, MAX_MC_CANDIDATES, MAX_PORT_BYTES_PER_SEC, MIN_PORT_BYTES_PER_SEC, WideAreaSpec,
    WorkloadSource, check_monte_carlo, check_port_rate, load_topology, wide_area_params,
};
pub use sweep::{Sweep, SweepSpec, Window, window};

use std::fmt;
use std::ops::ControlFlow;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Instant;

use coflow_core::{Nanos, Rate, Workload};
use coflow_sched::policy::Params;
use coflow_sched::{Fabric, Scheduler, policy};
use serde::Serialize;

use crate::coflowsim::{self, Rules};
use crate::topology::GBPS;
use crate::{
    BoundConfig, Halted, LowerBounds, SimConfig, SimResult, SizeBin, Stopped, Summary, WanConfig, assign_deadlines,
    assign_deadlines_to_fraction, lower_bounds, simulate_with_progress,
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
    /// with `option` (in snake case) in `spelling`, the option that named them.
    pub fn check(&self, policies: &[&str], option: &str, spelling: Spelling) -> Result<(), PlanError> {
        if let Some(rules) = &self.0 {
            for &name in policies {
                if let Err(e) = coflowsim::policy(name, rules) {
                    return Err(PlanError(format!("{}: {e}", spelling.name(option))));
                }
            }
        }
        Ok(())
    }

    /// Parses a list of policies under this model: `all` means every policy the model has, so
    /// under the reference model those the reference simulator has too (in the registry's order);
    /// a policy named on its own is kept for [`Model::check`] to refuse.
    pub fn parse_policies(&self, list: &str) -> Result<Vec<&'static str>, policy::UnknownPolicy> {
        if self.0.is_some() {
            let all: Vec<&'static str> =
                policy::NAMES.iter().copied().filter(|p| coflowsim::POLICIES.contains(p)).collect();
            policy::parse_list_within(list, &all)
        } else {
            policy::parse_list(list)
        }
    }

    /// The workload as the model sees it.
    pub fn workload(&self, w: Workload) -> Workload {
        match &self.0 {
            Some(rules) => coflowsim::workload(&w, rules),
            None => w,
        }
    }

    /// The name of port `name` of the model's fabric in the workload as given, whose `machines`
    /// machines the reference simulator's `ports` rule makes twice as many (each receiver `r`
    /// becomes machine `machines + r`): its `out{machines + r}` is receiver `r`'s `out{r}`.
    pub fn port_name(&self, name: String, machines: u32) -> String {
        let receiver = name.strip_prefix("out").and_then(|k| k.parse::<u32>().ok());
        match (&self.0, receiver) {
            (Some(rules), Some(k)) if rules.ports && k >= machines => format!("out{}", k - machines),
            _ => name,
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

/// The validated form of a [`Config`], with its workload.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The workload, as the model sees it.
    pub workload: Workload,
    /// What the workload is (a trace's path, or the synthetic generator's parameters).
    pub source: String,
    /// The workload as it was given, before the model's changes (the reference simulator's
    /// rules may round sizes and split each machine's ports into two): what reports describe.
    pub given: Given,
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
    /// The wide area the policies run on, if not the big switch.
    pub wide_area: Option<WideAreaPlan>,
    /// What validation left out and why (policies that cannot serve a wide area), one line each.
    pub notes: Vec<String>,
    /// The files read beside the trace and the topology file (a topology's samples files): a
    /// caller writing the run's outputs must not write over them.
    pub read: Vec<std::path::PathBuf>,
}

/// A wide-area run: the topology as the user named it, and the run's configuration.
#[derive(Clone, Debug)]
pub struct WideAreaPlan {
    /// The topology's name as given (`default` or a path), as the report states it.
    pub topology: String,
    /// The fabric, its capacity draws, multi-path and per-connection settings.
    pub config: WanConfig,
    /// The policies' parameters (the seed, the redraw interval, `siphon-mc`'s search).
    pub params: Params,
}

/// The baseline of wide-area runs: Siphon's, minimum remaining time first.
pub const WIDE_AREA_BASELINE: &str = "mrtf";

/// The results of [`Plan::run`].
#[derive(Debug)]
pub struct Runs {
    /// Every run, in [`Plan::to_run`] order, each with its wall time in seconds.
    pub runs: Vec<(SimResult, f64)>,
    /// The lower bounds on the average CCT (on the big switch only).
    pub bounds: Option<LowerBounds>,
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

    /// What the figures leave out beyond rejections: one note per policy asked for that left
    /// coflows unfinished, whose figures are then over those that finished.
    pub fn notes(&self) -> Vec<String> {
        let end = crate::replay_end();
        self.summaries
            .iter()
            .filter_map(|s| {
                let unfinished = s.coflows.saturating_sub(s.completed + s.rejected);
                // A coflow waiting on a rejected ancestor never starts: said beside the count.
                let (why, rejected) = match s.rejected {
                    0 => (end.clone(), String::new()),
                    n => {
                        let why = format!("{end}, and a coflow whose ancestor was rejected never starts");
                        (why, format!(" and {n} {} rejected", if n == 1 { "was" } else { "were" }))
                    }
                };
                (unfinished > 0).then(|| {
                    format!(
                        "{}: {unfinished} of {} did not finish ({why}){rejected}; its figures are over the {} that did",
                        s.policy,
                        coflow_core::counted(s.coflows, "coflow", "coflows"),
                        s.completed
                    )
                })
            })
            .collect()
    }
}

/// Shows one policy's progress: called with the coflows done so far, whenever that changes and
/// every few milliseconds besides; dropped when the policy ends. Answering
/// [`ControlFlow::Break`] stops the replay, and with it the others of the run.
pub type Progress = Box<dyn FnMut(usize) -> ControlFlow<()>>;

impl Plan {
    /// Prepares the workload of a single replay: deadlines for every coflow (if asked), for a
    /// seeded fraction of them, and every coflow released at time 0 (`offline`); the source says so.
    fn adjust_workload(&mut self, deadline_fraction: Option<f64>, offline: bool) {
        if let Some(x) = self.deadline_x {
            assign_deadlines(&mut self.workload, self.port_rate, x, self.seed);
        }
        if let Some(f) = deadline_fraction {
            assign_deadlines_to_fraction(&mut self.workload, self.port_rate, 1.0, f, self.seed);
            // Adding zero turns a fraction of -0 into 0%, not -0%.
            self.source.push_str(&format!(" ({:.0}% of coflows with deadlines)", 100.0 * f + 0.0));
        }
        if offline {
            self.workload.release_at_zero();
            self.source.push_str(" (offline: every coflow released at time 0)");
        }
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

    /// Runs the policies on the wide area `config` (named `topology` in reports) instead of the
    /// big switch, against [`WIDE_AREA_BASELINE`]; the policies asked for are kept (the caller
    /// leaves out those that cannot serve a wide area).
    ///
    /// # Errors
    /// A policy of the plan that cannot serve the wide area (the registry says which), before
    /// anything changes: the caller leaves such policies out first.
    pub fn on_wide_area(
        &mut self,
        topology: String,
        config: WanConfig,
        params: Params,
    ) -> Result<(), policy::Unservable> {
        for name in &self.policies {
            policy::check_serves(name, &config.fabric())?;
        }
        self.baseline = Some(WIDE_AREA_BASELINE);
        self.wide_area = Some(WideAreaPlan { topology, config, params });
        Ok(())
    }

    /// The configuration each run simulates with.
    pub fn sim_config(&self) -> SimConfig {
        match &self.wide_area {
            None => SimConfig::big_switch(self.port_rate),
            Some(wa) => SimConfig::wide_area(wa.config.clone()),
        }
    }

    /// The lines at the top of every report: the workload's, and the wide area's if any.
    pub fn describe(&self) -> String {
        let w = &self.given;
        let count = coflow_core::counted;
        let workload = format!(
            "workload: {} — {}, {}, {}",
            self.source,
            count(w.coflows, "coflow", "coflows"),
            count(w.flows, "flow", "flows"),
            count(w.machines as usize, "machine", "machines")
        );
        match &self.wide_area {
            None => format!("{workload}; ports at {}", self.port_rate),
            Some(wa) => format!("{workload}\n{}", describe_wide_area(&wa.config)),
        }
    }

    /// The workload as reports describe it.
    pub fn json_workload(&self) -> JsonWorkload<'_> {
        let w = &self.given;
        JsonWorkload { source: &self.source, coflows: w.coflows, flows: w.flows, machines: w.machines, bytes: w.bytes }
    }

    /// Simulates every policy of [`Plan::to_run`], as [`Plan::model`] builds it on the big
    /// switch or with the wide area's parameters; see [`Plan::run_with`].
    pub fn run(&self, progress: &(dyn Fn(&str, usize) -> Progress + Sync)) -> Result<Runs, Stopped> {
        match &self.wide_area {
            None => self.run_with(progress, &|name| self.model.policy(name)),
            Some(wa) => self.run_with(progress, &|name| policy::build(name, &wa.params).expect("names were validated")),
        }
    }

    /// Simulates every policy of [`Plan::to_run`], each a fresh instance from `policy`, on up to
    /// [`Plan::threads`] threads, the lower bounds (an LP among them) beside them on the big
    /// switch; `progress` is called as each policy starts with its name and the number of
    /// coflows, and a replay whose [`Progress`] answers [`ControlFlow::Break`] stops the run:
    /// the replays not yet started are skipped, and the result is [`Stopped`].
    pub fn run_with(
        &self,
        progress: &(dyn Fn(&str, usize) -> Progress + Sync),
        policy: &(dyn Fn(&str) -> Box<dyn Scheduler> + Sync),
    ) -> Result<Runs, Stopped> {
        let w = &self.workload;
        let to_run = self.to_run();
        let cfg = self.sim_config();
        let (runs, bounds) = std::thread::scope(|s| {
            let bounds = self.wide_area.is_none().then(|| {
                s.spawn(|| lower_bounds(w, &Fabric::big_switch(w.machines, self.port_rate), &BoundConfig::default()))
            });
            // Longest first, so that the threads end together: a policy that decides again
            // after every finished flow (gap zero) replays far more decisions than one that waits
            // 100 ms or only decides at arrivals and completions (`None`). Each policy is built
            // once, its gap read from the instance that then runs. Results come back in the
            // plan's order whatever the order they ran in.
            let (schedule, instances) = longest_first(to_run.iter().map(|&name| policy(name)).collect());
            let stopped = AtomicBool::new(false);
            let runs = parallel_map(to_run.len(), self.threads, |j| {
                let i = schedule[j];
                let name = to_run[i];
                let mut bar = progress(name, w.coflows.len());
                let started = Instant::now();
                let mut r = replay_unless_stopped(&stopped, &mut *bar, || {
                    let instance = instances[i].lock().expect("no run panicked holding an instance").take();
                    (w, instance.expect("each instance runs once"), &cfg)
                })?;
                drop(bar);
                // A variant of the reference model reports under the name asked for.
                r.policy = name.to_string();
                Some((i, r, started.elapsed().as_secs_f64()))
            });
            let bounds = bounds.map(|b| {
                let mut b = b.join().expect("the bounds do not panic");
                b.per_port_resource = b.per_port_resource.map(|p| self.model.port_name(p, self.given.machines));
                b
            });
            let Some(mut runs) = runs.into_iter().collect::<Option<Vec<_>>>() else {
                return Err(Stopped);
            };
            runs.sort_unstable_by_key(|&(i, _, _)| i);
            let runs: Vec<(SimResult, f64)> = runs.into_iter().map(|(_, r, wall)| (r, wall)).collect();
            Ok((runs, bounds))
        })?;
        let baseline = self.baseline.and_then(|b| runs.iter().position(|(r, _)| r.policy == b));
        let shown: Vec<usize> =
            (0..runs.len()).filter(|&i| self.policies.contains(&runs[i].0.policy.as_str())).collect();
        let base_run = baseline.map(|i| &runs[i].0);
        let summaries = shown
            .iter()
            .map(|&i| {
                let s = Summary::against(&runs[i].0, base_run);
                match &bounds {
                    Some(b) => s.with_bound(b.best_avg_cct_s),
                    None => s,
                }
            })
            .collect();
        Ok(Runs { runs, bounds, shown, baseline, summaries })
    }

    /// The JSON report of `runs`: pretty, with a final newline.
    ///
    /// # Panics
    /// If `runs` did not come from this plan's [`Plan::run`] (a big-switch report needs bounds).
    pub fn report_json(&self, runs: &Runs) -> String {
        let Some(wa) = &self.wide_area else {
            let bounds = runs.bounds.as_ref().expect("a big-switch run has bounds");
            return pretty_json(&JsonReport {
                workload: self.json_workload(),
                port_rate_bytes_per_s: self.port_rate.bytes_per_sec(),
                seed: self.seed,
                baseline: self.baseline,
                best_lower_bound_avg_cct_s: bounds.best_avg_cct_s,
                lower_bounds: bounds,
                results: &runs.summaries,
            });
        };
        let cfg = &wa.config;
        let wan = &cfg.wan;
        pretty_json(&JsonWideAreaReport {
            workload: self.json_workload(),
            topology: &wa.topology,
            links: (0..wan.links().len())
                .map(|r| JsonLink {
                    name: wan.link_name(r as u32),
                    mean_gbps: wan.links()[r].bandwidth.mean() / GBPS,
                    median_gbps: wan.links()[r].bandwidth.median() / GBPS,
                })
                .collect(),
            redraw_ms: (cfg.redraw != Nanos::MAX).then_some(cfg.redraw.0 / 1_000_000),
            multipath: cfg.multipath,
            per_connection: cfg.per_connection.is_some(),
            connection_redraw_ms: cfg.per_connection.filter(|&r| r != Nanos::MAX).map(|r| r.0 / 1_000_000),
            seed: self.seed,
            baseline: self.baseline,
            results: runs.summaries.iter().map(JsonWideAreaResult::of).collect(),
        })
    }
}

/// A policy built and waiting for the thread that runs it.
type Ready = Mutex<Option<Box<dyn Scheduler>>>;

/// The order to run `policies` in, longest first by their flow-finish gap (gap zero first,
/// `None` last, ties in the given order), as indices into `policies`, and each policy ready to
/// be taken by the thread that runs it.
fn longest_first(policies: Vec<Box<dyn Scheduler>>) -> (Vec<usize>, Vec<Ready>) {
    let mut schedule: Vec<(Nanos, usize)> =
        policies.iter().enumerate().map(|(i, p)| (p.flow_finish_gap().unwrap_or(Nanos::MAX), i)).collect();
    schedule.sort_unstable();
    (schedule.into_iter().map(|(_, i)| i).collect(), policies.into_iter().map(|p| Mutex::new(Some(p))).collect())
}

/// The line describing a wide area: its links' mean bandwidths, how often they are redrawn,
/// multi-path and per-connection bandwidth.
fn describe_wide_area(cfg: &WanConfig) -> String {
    use std::fmt::Write as _;
    let wan = &cfg.wan;
    let mut t = String::new();
    let _ = write!(t, "wide area: {};", coflow_core::counted(wan.dcs() as usize, "datacenter", "datacenters"));
    for (r, l) in wan.links().iter().enumerate() {
        // In the unit that suits it: a link of 30 Mbit/s is not "0.0 Gbit/s".
        let mean = coflow_core::Rate::from_bytes_per_sec(l.bandwidth.mean());
        let _ = write!(t, " {} {mean};", wan.link_name(r as u32));
    }
    let redraw = if cfg.redraw == Nanos::MAX { "never".to_string() } else { format!("every {}", cfg.redraw) };
    let _ = write!(t, " capacities redrawn {redraw}; multi-path {}", if cfg.multipath { "on" } else { "off" });
    match cfg.per_connection {
        None => {}
        Some(Nanos::MAX) => t.push_str("; per-connection bandwidth, held for each flow's life"),
        Some(r) => {
            let _ = write!(t, "; per-connection bandwidth, redrawn every {r}");
        }
    }
    t
}

/// The JSON report of a wide-area run.
#[derive(Debug, Serialize)]
struct JsonWideAreaReport<'a> {
    workload: JsonWorkload<'a>,
    topology: &'a str,
    links: Vec<JsonLink>,
    redraw_ms: Option<u64>,
    multipath: bool,
    per_connection: bool,
    connection_redraw_ms: Option<u64>,
    seed: u64,
    baseline: Option<&'a str>,
    results: Vec<JsonWideAreaResult<'a>>,
}

#[derive(Debug, Serialize)]
struct JsonLink {
    name: String,
    mean_gbps: f64,
    median_gbps: f64,
}

/// One policy's row of a wide-area report: Siphon's figures, in the layout wide-area reports
/// have had since before [`Summary`] carried them.
#[derive(Debug, Serialize)]
struct JsonWideAreaResult<'a> {
    policy: &'a str,
    coflows: usize,
    completed: usize,
    avg_cct_s: f64,
    p90_cct_s: f64,
    max_cct_s: f64,
    makespan_s: f64,
    factor_vs_baseline: Option<f64>,
    p90_factor_vs_baseline: Option<f64>,
    relayed_bytes: f64,
    decisions: u64,
    job_avg_jct_s: f64,
    job_p95_jct_s: f64,
    bins: &'a [SizeBin],
    /// The deadline figures, when any coflow has a deadline.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    deadlines: Option<JsonDeadlines>,
}

/// A wide-area row's deadline figures, as [`Summary`] has them.
#[derive(Debug, Serialize)]
struct JsonDeadlines {
    rejected: usize,
    deadline_met_fraction: Option<f64>,
    admitted_fraction: Option<f64>,
    met_among_admitted_fraction: Option<f64>,
    non_deadline_avg_cct_s: Option<f64>,
}

impl<'a> JsonWideAreaResult<'a> {
    fn of(s: &'a Summary) -> JsonWideAreaResult<'a> {
        let wa = s.wide_area.as_ref().expect("a wide-area run's summary has wide-area figures");
        JsonWideAreaResult {
            policy: &s.policy,
            coflows: s.coflows,
            completed: s.completed,
            avg_cct_s: s.avg_cct_s,
            p90_cct_s: wa.p90_cct_s,
            max_cct_s: wa.max_cct_s,
            makespan_s: s.makespan_s,
            // Siphon's factors need both averages above 0; `Summary`'s is 0 when the baseline's is.
            factor_vs_baseline: s.factor_vs_baseline.filter(|&f| f > 0.0),
            p90_factor_vs_baseline: wa.p90_factor_vs_baseline,
            relayed_bytes: wa.relayed_bytes,
            decisions: s.decisions,
            job_avg_jct_s: s.job_avg_jct_s,
            job_p95_jct_s: s.job_p95_jct_s,
            bins: &wa.bins,
            deadlines: s.deadline_met_fraction.is_some().then_some(JsonDeadlines {
                rejected: s.rejected,
                deadline_met_fraction: s.deadline_met_fraction,
                admitted_fraction: s.admitted_fraction,
                met_among_admitted_fraction: s.met_among_admitted_fraction,
                non_deadline_avg_cct_s: s.non_deadline_avg_cct_s,
            }),
        }
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

/// A workload's figures, as reports describe it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Given {
    /// Coflows.
    pub coflows: usize,
    /// Flows of all coflows.
    pub flows: usize,
    /// Machines.
    pub machines: u32,
    /// Bytes of all flows.
    pub bytes: u64,
}

impl Given {
    /// The figures of `w`.
    pub fn of(w: &Workload) -> Given {
        Given { coflows: w.coflows.len(), flows: w.flow_count(), machines: w.machines, bytes: w.total_bytes().get() }
    }
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

/// One replay of a run that may be stopped: none once `stopped` is set, and none, setting it,
/// if `progress` stops this one; `replay` gives the workload, the policy and the configuration.
pub(crate) fn replay_unless_stopped<'w>(
    stopped: &AtomicBool,
    progress: &mut dyn FnMut(usize) -> ControlFlow<()>,
    replay: impl FnOnce() -> (&'w Workload, Box<dyn Scheduler>, &'w SimConfig),
) -> Option<SimResult> {
    if stopped.load(Ordering::Relaxed) {
        return None;
    }
    let (w, policy, cfg) = replay();
    match simulate_with_progress(w, policy, cfg, progress) {
        Ok(r) => Some(r),
        Err(Halted::Stopped(_)) => {
            stopped.store(true, Ordering::Relaxed);
            None
        }
        Err(Halted::Unservable(e)) => unreachable!("plans refuse the policies that cannot serve their fabric: {e}"),
    }
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
    use std::ops::ControlFlow;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::{CSV_HEADER, Config, ExperimentError, Model, Spelling, WorkloadSource, csv, parallel_map};
    use crate::coflowsim::Rules;
    use coflow_core::{Bytes, Coflow, CoflowId, Flow, MIB, MachineId, Nanos, Workload};

    #[test]
    fn a_window_is_consecutive_coflows_released_together_in_a_seeded_order() {
        use super::window;
        use coflow_core::Rate;
        use coflow_trace::synth;
        let w = synth::generate(&synth::SynthConfig { seed: 4, coflows: 60, ..Default::default() });
        let a = window(&w, 10, 0, 7, Rate::GBPS, None);
        assert_eq!(a.workload, window(&w, 10, 0, 7, Rate::GBPS, None).workload, "seeded");
        assert_ne!(a.workload, window(&w, 10, 1, 7, Rate::GBPS, None).workload, "windows differ");
        assert_eq!(a.workload.coflows.len(), 10);
        assert!(a.workload.coflows.iter().all(|c| c.arrival == Nanos::ZERO && c.deadline.is_none()));
        // The same coflows (by their flows) as the trace's start..start+10, in some order.
        let key = |c: &Coflow| format!("{:?}", c.flows);
        let mut got: Vec<String> = a.workload.coflows.iter().map(key).collect();
        let mut want: Vec<String> = w.coflows[a.start..a.start + 10].iter().map(key).collect();
        got.sort();
        want.sort();
        assert_eq!(got, want);
        let ids: Vec<u64> = a.workload.coflows.iter().map(|c| c.id.get()).collect();
        assert_eq!(ids, (0..10).collect::<Vec<_>>());

        let d = window(&w, 10, 0, 7, Rate::GBPS, Some(1.0));
        assert!(d.workload.coflows.iter().all(|c| c.deadline.is_some()));
        // The whole workload is one window.
        assert_eq!(window(&w, 60, 3, 7, Rate::GBPS, None).start, 0);
    }

    #[test]
    fn results_come_back_in_job_order_on_any_number_of_threads() {
        for threads in [1, 2, 7] {
            assert_eq!(parallel_map(5, threads, |i| i * i), [0, 1, 4, 9, 16]);
        }
        assert!(parallel_map(0, 2, |i| i).is_empty());
    }

    /// The message of the error `config` plans into.
    fn refusal(config: &Config, spelling: Spelling) -> String {
        config.plan(spelling).map(|_| ()).unwrap_err().chain()
    }

    #[test]
    fn errors_name_the_option_in_the_callers_spelling() {
        let empty =
            WorkloadSource::Given { workload: Workload { machines: 1, coflows: vec![] }, source: String::new() };
        let opts = Config { policies: "varys".into(), port_rate: "fast".into(), workload: empty, ..Config::default() };
        let flag = refusal(&opts, Spelling::Flag);
        assert!(flag.starts_with("--port-rate \"fast\": "), "{flag}");
        let kw = refusal(&opts, Spelling::Keyword);
        assert!(kw.starts_with("port_rate \"fast\": "), "{kw}");
        let opts = Config { port_rate: "1Gbps".into(), policies: "varys,nope".into(), ..opts };
        let kw = refusal(&opts, Spelling::Keyword);
        assert!(kw.starts_with("policies: unknown policy \"nope\""), "{kw}");
        let opts = Config { policies: "varys".into(), deadline_fraction: Some(1.5), ..opts };
        assert!(refusal(&opts, Spelling::Flag).starts_with("--deadline-fraction must be between 0 and 1"));
        let opts = Config { deadline_fraction: None, stages: 0, ..opts };
        assert_eq!(refusal(&opts, Spelling::Keyword), "stages must be at least 1");
        let opts = Config { stages: 1, threads: Some(0), ..opts };
        assert_eq!(refusal(&opts, Spelling::Flag), "--threads must be at least 1");
        let one = Config {
            workload: WorkloadSource::Synthetic { coflows: Some(1), machines: Some(4) },
            sweep: Some(super::SweepSpec { concurrent: vec![2], windows: 1 }),
            ..Config::default()
        };
        assert_eq!(refusal(&one, Spelling::Keyword), "concurrent 2: must be between 1 and the workload's 1 coflow");
        let empty = Config {
            workload: WorkloadSource::Given {
                workload: Workload { machines: 2, coflows: vec![] },
                source: "none".into(),
            },
            ..one.clone()
        };
        assert_eq!(refusal(&empty, Spelling::Flag), "a sweep draws its windows from coflows: none has none");
        let staged = Config { stages: 3, ..one };
        assert_eq!(
            refusal(&staged, Spelling::Flag),
            "a sweep takes no --stages (a window's coflows are released together, without dependencies)"
        );
    }

    /// A sweep of coflows that have no flow is bounded too: each window still holds its coflows
    /// and is replayed, so windows past the bound are refused before any is drawn.
    #[test]
    fn a_sweep_of_coflows_without_flows_is_bounded() {
        let coflows = (0..5).map(|i| Coflow::new(CoflowId(i), Nanos::ZERO, vec![])).collect();
        let workload = Workload::new(4, coflows).unwrap();
        let sweep = |windows| Config {
            workload: WorkloadSource::Given { workload: workload.clone(), source: "empty".into() },
            policies: "varys".into(),
            sweep: Some(super::SweepSpec { concurrent: vec![5], windows }),
            ..Config::default()
        };
        let e = refusal(&sweep(usize::MAX), Spelling::Flag);
        assert!(e.starts_with("--windows 18446744073709551615 windows of each --concurrent would hold about"), "{e}");
        assert!(e.ends_with("more than 50000000: draw fewer"), "{e}");
        assert!(sweep(10_000_000).plan(Spelling::Flag).is_ok());
        assert!(sweep(10_000_001).plan(Spelling::Flag).is_err());
    }

    #[test]
    fn a_missing_trace_is_not_found_and_named() {
        let path = std::env::temp_dir().join("coflow-no-such-trace.txt");
        let e = Config { workload: WorkloadSource::Trace(path.clone()), ..Config::default() }
            .plan(Spelling::Keyword)
            .map(|_| ())
            .unwrap_err();
        assert!(
            matches!(e, ExperimentError::Trace { .. }) && e.io_kind() == Some(std::io::ErrorKind::NotFound),
            "{e:?}"
        );
        assert!(e.chain().starts_with(&format!("reading trace {}: ", path.display())), "{}", e.chain());
    }

    #[test]
    fn the_synthetic_workload_is_seeded_and_grouped_into_jobs_as_asked() {
        let synth = WorkloadSource::Synthetic { coflows: Some(30), machines: Some(10) };
        let config = Config { workload: synth, policies: "varys".into(), seed: 3, ..Config::default() };
        let plan = config.plan(Spelling::Flag).unwrap();
        assert_eq!(plan.source, "synthetic (seed 3, 30 coflows, 10 machines)");
        assert_eq!((plan.workload.coflows.len(), plan.workload.machines), (30, 10));
        assert!(plan.workload.coflows.iter().all(|c| c.parents.is_empty()));
        let staged = Config { stages: 3, ..config }.plan(Spelling::Flag).unwrap();
        assert_eq!(staged.source, "synthetic (seed 3, 30 coflows, 10 machines) (jobs of 3 stages)");
        assert!(staged.workload.coflows.iter().any(|c| !c.parents.is_empty()), "later stages have parents");
    }

    /// Coflow 1 sends 1 MiB from machine 0 to 1 at time 0; coflow 2, arriving at 0 too, sends
    /// 1 MiB the same way once coflow 1 has finished.
    fn chain() -> Workload {
        let flow = || vec![Flow { src: MachineId(0), dst: MachineId(1), size: Bytes(MIB) }];
        let mut second = Coflow::new(CoflowId(2), Nanos::ZERO, flow());
        second.parents = vec![CoflowId(1)];
        Workload::new(2, vec![Coflow::new(CoflowId(1), Nanos::ZERO, flow()), second]).unwrap()
    }

    /// Progress that lets every replay go on.
    fn go_on() -> super::Progress {
        Box::new(|_| ControlFlow::Continue(()))
    }

    /// A run whose replays would take hours: `varys` at the slowest port there is, where
    /// starvation freedom decides every 200 ms of simulated time.
    fn endless(threads: usize) -> super::Plan {
        let slow = Config {
            policies: "varys,fair".into(),
            port_rate: "1kbps".into(),
            threads: Some(threads),
            ..Config::default()
        };
        slow.plan(Spelling::Flag).unwrap()
    }

    #[test]
    fn a_replay_stops_soon_after_its_progress_says_so_though_no_coflow_finishes() {
        for threads in [1, 2] {
            let asked = std::sync::Arc::new(AtomicUsize::new(0));
            let runs = endless(threads).run(&|_, _| {
                let asked = asked.clone();
                Box::new(move |_| {
                    // Stop at the third question: the replays have run, with no coflow done.
                    if asked.fetch_add(1, Ordering::Relaxed) >= 2 {
                        ControlFlow::Break(())
                    } else {
                        ControlFlow::Continue(())
                    }
                })
            });
            assert_eq!(runs.err(), Some(super::Stopped), "on {threads} threads");
            assert!(asked.load(Ordering::Relaxed) <= 3 + threads, "every replay stops at its next question");
        }
        let spec = super::SweepSpec { concurrent: vec![50], windows: 3 };
        let ticks = AtomicUsize::new(0);
        let tick = || {
            ticks.fetch_add(1, Ordering::Relaxed);
        };
        let swept = endless(2).sweep(&spec, &tick, &|| ControlFlow::Break(()));
        assert_eq!(swept.err(), Some(super::Stopped));
        assert_eq!(ticks.load(Ordering::Relaxed), 0, "no replay of the sweep ends");
    }

    /// A coflow that needs longer than simulated time has (10 TB at 1 kbit/s: 2,500 years)
    /// beside one that does not: the figures are over the one, and a note says so.
    #[test]
    fn a_coflow_left_unfinished_is_told_of_in_a_note() {
        let flow = |src, dst, size| vec![Flow { src: MachineId(src), dst: MachineId(dst), size: Bytes(size) }];
        let coflows = vec![
            Coflow::new(CoflowId(1), Nanos::ZERO, flow(0, 1, 10_u64.pow(13))),
            Coflow::new(CoflowId(2), Nanos::ZERO, flow(1, 0, 1000)),
        ];
        let config = Config {
            workload: WorkloadSource::Given { workload: Workload::new(2, coflows).unwrap(), source: "two".into() },
            policies: "fair,varys".into(),
            port_rate: "1kbps".into(),
            threads: Some(1),
            ..Config::default()
        };
        let runs = config.plan(Spelling::Flag).unwrap().run(&|_, _| go_on()).expect("not stopped");
        let notes = runs.notes();
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(
            notes[0].starts_with("fair: 1 of 2 coflows did not finish (a replay ends at 584 years"),
            "{}",
            notes[0]
        );
        assert!(notes[1].starts_with("varys: 1 of 2") && notes[1].ends_with("over the 1 that did"), "{}", notes[1]);
        // A child of a coflow rejected for its deadline never starts: the note counts both.
        let mut parent = Coflow::new(CoflowId(1), Nanos::ZERO, flow(0, 1, 10_000));
        parent.deadline = Some(Nanos::from_millis(1));
        let mut child = Coflow::new(CoflowId(2), Nanos::ZERO, flow(1, 0, 1000));
        child.parents = vec![CoflowId(1)];
        let config = Config {
            workload: WorkloadSource::Given {
                workload: Workload::new(2, vec![parent, child, Coflow::new(CoflowId(3), Nanos::ZERO, flow(0, 1, 10))])
                    .unwrap(),
                source: "rejected".into(),
            },
            policies: "varys-deadline".into(),
            port_rate: "1kbps".into(),
            threads: Some(1),
            ..Config::default()
        };
        let runs = config.plan(Spelling::Flag).unwrap().run(&|_, _| go_on()).expect("not stopped");
        let notes = runs.notes();
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].starts_with("varys-deadline: 1 of 3 coflows did not finish (a replay ends"), "{}", notes[0]);
        assert!(
            notes[0].ends_with("a coflow whose ancestor was rejected never starts) and 1 was rejected; its figures are over the 1 that did"),
            "{}",
            notes[0]
        );
        // Every coflow finished: no note.
        assert!(options(Model::EXACT).plan(Spelling::Flag).unwrap().run(&|_, _| go_on()).unwrap().notes().is_empty());
    }

    fn options(model: Model) -> Config {
        Config {
            workload: WorkloadSource::Given { workload: chain(), source: "chain".into() },
            policies: "varys".into(),
            port_rate: "1MiB/s".into(),
            threads: Some(1),
            model,
            ..Config::default()
        }
    }

    #[test]
    fn csv_rows_give_the_cct_from_the_release_and_the_release_after_the_parents() {
        let plan = options(Model::EXACT).plan(Spelling::Flag);
        let runs = plan.unwrap().run(&|_, _| go_on()).expect("not stopped");
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
    fn a_wide_area_plan_runs_against_mrtf_and_reports_siphons_figures() {
        // Two datacenters joined by 1 MiB/s links both ways; machine 0 in one, machine 1 in the other.
        let mib_per_s_in_gbps = MIB as f64 / crate::topology::GBPS;
        let text = format!(
            r#"{{"datacenters": ["a", "b"], "redraw_ms": 0, "links": [
            {{"from": "a", "to": "b", "constant_gbps": {mib_per_s_in_gbps}}},
            {{"from": "b", "to": "a", "constant_gbps": {mib_per_s_in_gbps}}}]}}"#
        );
        let topology = crate::topology::Topology::from_json(&text, None).unwrap();
        let mut plan = options(Model::EXACT).plan(Spelling::Flag).unwrap();
        let params = coflow_sched::policy::Params::seeded(1);
        plan.on_wide_area("two.json".into(), topology.config(2, 1, &Default::default()).unwrap(), params).unwrap();
        assert_eq!(plan.to_run(), ["varys", "mrtf"], "the baseline is mrtf, whatever was asked");
        assert!(plan.describe().ends_with("capacities redrawn never; multi-path off"), "{}", plan.describe());
        let runs = plan.run(&|_, _| go_on()).expect("not stopped");
        assert!(runs.bounds.is_none(), "the lower bounds are the big switch's");
        let s = &runs.summaries[0];
        // Each coflow has the link to itself for 1 s: coflow 2 is released when coflow 1 ends.
        let wa = s.wide_area.as_ref().expect("a wide-area run");
        assert!((s.avg_cct_s - 1.0).abs() < 1e-6 && (wa.max_cct_s - 1.0).abs() < 1e-6, "{s:?}");
        assert!((s.factor_vs_baseline.unwrap() - 1.0).abs() < 1e-6 && wa.relayed_bytes == 0.0, "{s:?}");
        assert_eq!(wa.bins.iter().map(|b| b.coflows).collect::<Vec<_>>(), [2, 0, 0, 0]);
        let report: serde_json::Value = serde_json::from_str(&plan.report_json(&runs)).unwrap();
        assert_eq!(report["topology"], "two.json");
        assert_eq!(report["baseline"], "mrtf");
        let keys: Vec<&str> = report["results"][0].as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys.len(), 14, "Siphon's figures only: {keys:?}");
        assert!(keys.contains(&"p90_factor_vs_baseline") && !keys.contains(&"bound_ratio"), "{keys:?}");
    }

    #[test]
    fn each_policy_is_built_once_and_the_longest_run_first() {
        // fair (gap zero), sincronia (10 ms), aalo (40 ms), vc and varys (100 ms), asked for in
        // another order.
        let plan =
            Config { policies: "vc,aalo,fair,varys,sincronia".into(), ..options(Model::EXACT) }.plan(Spelling::Flag);
        let plan = plan.unwrap();
        let built = AtomicUsize::new(0);
        let started = Mutex::new(Vec::new());
        let runs = plan
            .run_with(
                &|name, _| {
                    started.lock().unwrap().push(name.to_string());
                    go_on()
                },
                &|name| {
                    built.fetch_add(1, Ordering::Relaxed);
                    coflow_sched::policy::by_name(name).unwrap()
                },
            )
            .expect("not stopped");
        assert_eq!(built.load(Ordering::Relaxed), 5, "one instance per policy");
        let longest_first = ["fair", "sincronia", "aalo", "vc", "varys"];
        assert_eq!(*started.lock().unwrap(), longest_first, "on one thread, ties in the plan's order");
        let names: Vec<&str> = runs.runs.iter().map(|(r, _)| r.policy.as_str()).collect();
        assert_eq!(names, ["vc", "aalo", "fair", "varys", "sincronia"], "results in the plan's order");
    }

    #[test]
    fn the_reference_model_refuses_policies_it_lacks_and_keeps_the_names_asked_for() {
        let model = Model(Some(Rules::all()));
        let e = refusal(&Config { policies: "varys,sincronia".into(), ..options(model) }, Spelling::Keyword);
        assert!(e.starts_with("policies: ") && e.contains("sincronia"), "{e}");
        let e = refusal(&Config { baseline: "sincronia".into(), ..options(model) }, Spelling::Flag);
        assert!(e.starts_with("--baseline: policy \"sincronia\""), "{e}");
        // No baseline, however said.
        for none in ["", "none", " none "] {
            let plan = Config { baseline: none.into(), ..options(model) }.plan(Spelling::Flag).unwrap();
            assert_eq!(plan.baseline, None, "{none:?}");
        }
        // `all` means the policies the model has.
        let plan = Config { policies: "all".into(), baseline: String::new(), ..options(model) }.plan(Spelling::Flag);
        assert_eq!(plan.unwrap().policies.len(), super::coflowsim::POLICIES.len(), "all under the reference model");
        // Within a list too, beside a policy named again or one the model lacks.
        let plan = Config { policies: "fair,all,varys".into(), baseline: String::new(), ..options(model) }
            .plan(Spelling::Flag)
            .unwrap();
        assert_eq!(plan.policies[0], "fair");
        assert_eq!(plan.policies.len(), super::coflowsim::POLICIES.len(), "each once");
        let e = refusal(&Config { policies: "all,sincronia".into(), ..options(model) }, Spelling::Flag);
        assert!(e.starts_with("--policies: ") && e.contains("sincronia"), "{e}");
        let e = refusal(
            &Config { wide_area: Some(super::WideAreaSpec::named("default")), ..options(model) },
            Spelling::Flag,
        );
        assert!(e.starts_with("--wan: ") && e.contains("big switch only"), "{e}");
        let plan = Config { policies: "varys,fair".into(), ..options(model) }.plan(Spelling::Flag).unwrap();
        assert_eq!(plan.source, "chain (model: coflowsim, every rule)");
        let runs = plan.run(&|_, _| go_on()).expect("not stopped");
        let names: Vec<&str> = runs.runs.iter().map(|(r, _)| r.policy.as_str()).collect();
        assert_eq!(names, ["varys", "fair"]);
        assert_eq!(runs.baseline, Some(1));
    }

    /// Under the reference simulator's `ports` rule the model's fabric has twice the machines
    /// (each receiver a machine of its own); reports describe the workload as given, and name
    /// the per-port bound's port as the workload's.
    #[test]
    fn the_reference_model_reports_the_workload_as_given() {
        let synthetic = WorkloadSource::Synthetic { coflows: Some(30), machines: Some(12) };
        let config = |model| Config { workload: synthetic.clone(), policies: "varys".into(), ..options(model) };
        let exact = config(Model::EXACT).plan(Spelling::Flag).unwrap();
        let reference = config(Model(Some(Rules::all()))).plan(Spelling::Flag).unwrap();
        assert_eq!(reference.workload.machines, 24, "the model's fabric");
        assert_eq!(reference.given, exact.given);
        assert_eq!(reference.given.machines, 12);
        assert!(reference.describe().contains(", 12 machines;"), "{}", reference.describe());
        let bounds = reference.run(&|_, _| go_on()).expect("not stopped").bounds.unwrap();
        let port = bounds.per_port_resource.unwrap();
        let k: u32 = port.trim_start_matches(char::is_alphabetic).parse().unwrap();
        assert!(k < 12, "{port}: a port of the workload's 12 machines");
        let model = Model(Some(Rules::all()));
        assert_eq!(
            (model.port_name("out17".into(), 12), model.port_name("in3".into(), 12)),
            ("out5".into(), "in3".into())
        );
    }

    #[test]
    fn a_monte_carlo_search_of_too_many_candidates_is_refused_naming_its_options() {
        use coflow_sched::policy::MonteCarlo;
        let mc = |depth, breadth| MonteCarlo { depth, breadth, ..MonteCarlo::default() };
        let check = |depth, breadth, spelling| super::check_monte_carlo(&mc(depth, breadth), spelling);
        assert_eq!(check(2, 12, Spelling::Flag), Ok(()), "the default: 132 candidates");
        // A depth past the breadth orders the whole breadth: 8! = 40320 candidates.
        assert_eq!(check(usize::MAX, 8, Spelling::Flag), Ok(()));
        let e = check(12, 12, Spelling::Flag).unwrap_err().0;
        assert!(e.starts_with("--mc-depth 12 with --mc-breadth 12: a search would compare more than 100000"), "{e}");
        let e = check(2, usize::MAX, Spelling::Keyword).unwrap_err().0;
        assert!(e.starts_with(&format!("mc_depth 2 with mc_breadth {}: ", usize::MAX)), "{e}");
    }
}
