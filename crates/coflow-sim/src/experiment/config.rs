//! The front door's configuration: everything an experiment needs, as the user gave it
//! ([`Config`]), and its validation into a [`Plan`] (the workload loaded or generated, grouped
//! into jobs, seen by the model, given deadlines, placed on a wide area if asked).
//!
//! The command line and the Python package fill the same [`Config`]; only how errors name the
//! options differs ([`Spelling`]).

use std::path::PathBuf;

use coflow_core::{Rate, Workload};
use coflow_sched::ServiceModel;
use coflow_sched::policy::{self, MonteCarlo, Needs, Params, Unservable};
use coflow_trace::{TraceError, synth};

use super::{Model, Plan, PlanError, Spelling, SweepSpec};
use crate::topology::{Overrides, Topology, TopologyError};

/// Where an experiment's workload comes from.
#[derive(Clone, Debug)]
pub enum WorkloadSource {
    /// A trace file (coflow-benchmark or JSON Lines, told apart by content).
    Trace(PathBuf),
    /// The seeded synthetic generator, shaped like the Facebook trace (seeded by
    /// [`Config::seed`]); `None` keeps the generator's default.
    Synthetic {
        /// How many coflows.
        coflows: Option<usize>,
        /// How many machines.
        machines: Option<u32>,
    },
    /// A workload already in memory, and what it is as reports name it.
    Given {
        /// The workload.
        workload: Workload,
        /// What it is.
        source: String,
    },
}

/// A wide-area run: the topology and what may override it.
#[derive(Clone, Debug)]
pub struct WideAreaSpec {
    /// A topology file (JSON) or `default` (the embedded three-datacenter topology).
    pub topology: String,
    /// What overrides the file (placement, redraw intervals, per-connection bandwidth).
    pub overrides: Overrides,
    /// Route part of each arriving coflow's bytes over two-hop detours.
    pub multipath: bool,
    /// `siphon-mc`'s search.
    pub mc: MonteCarlo,
}

impl WideAreaSpec {
    /// The embedded topology with nothing overridden.
    pub fn named(topology: impl Into<String>) -> WideAreaSpec {
        WideAreaSpec {
            topology: topology.into(),
            overrides: Overrides::default(),
            multipath: false,
            mc: MonteCarlo::default(),
        }
    }
}

/// An experiment as the user asked for it; [`Config::plan`] validates it.
#[derive(Clone, Debug)]
pub struct Config {
    /// The workload.
    pub workload: WorkloadSource,
    /// Group the coflows into multi-stage jobs of this many coflows in arrival order (1:
    /// independent coflows).
    pub stages: usize,
    /// Comma-separated policies, or `all`.
    pub policies: String,
    /// The policy others are compared against (runs even when not asked for), empty or `none`
    /// for none; a wide area's is always `mrtf`.
    pub baseline: String,
    /// Capacity of every port, e.g. `1Gbps`.
    pub port_rate: String,
    /// Seed of the synthetic workload and of anything random in the run.
    pub seed: u64,
    /// How many simulations run at once; `None`: the machine's cores.
    pub threads: Option<usize>,
    /// The slack x of deadlines given to every coflow, if every coflow gets one.
    pub deadline_x: Option<f64>,
    /// Give a seeded fraction of the coflows a deadline (x = 1), and none to the others.
    pub deadline_fraction: Option<f64>,
    /// Release every coflow at time 0.
    pub offline: bool,
    /// Our exact model or the reference simulator's rules.
    pub model: Model,
    /// The wide area the policies run on, if not the big switch.
    pub wide_area: Option<WideAreaSpec>,
    /// Windows of N coflows present at once instead of one replay.
    pub sweep: Option<SweepSpec>,
}

impl Default for Config {
    /// The synthetic workload under every policy against `fair` on ports of 1 Gbit/s, seed 1.
    fn default() -> Config {
        Config {
            workload: WorkloadSource::Synthetic { coflows: None, machines: None },
            stages: 1,
            policies: "all".to_string(),
            baseline: "fair".to_string(),
            port_rate: "1Gbps".to_string(),
            seed: 1,
            threads: None,
            deadline_x: None,
            deadline_fraction: None,
            offline: false,
            model: Model::EXACT,
            wide_area: None,
            sweep: None,
        }
    }
}

/// Why an experiment cannot run.
#[derive(Debug, thiserror::Error)]
pub enum ExperimentError {
    /// An option does not hold; the message names it.
    #[error(transparent)]
    Option(#[from] PlanError),
    /// The trace cannot be read.
    #[error("reading trace {}", path.display())]
    Trace {
        /// The trace's path.
        path: PathBuf,
        /// Why.
        #[source]
        source: TraceError,
    },
    /// The topology cannot be read.
    #[error(transparent)]
    TopologyRead(TopologyError),
    /// The topology does not hold for this workload or these options.
    #[error("topology {spec}")]
    Topology {
        /// The topology as named.
        spec: String,
        /// Why.
        #[source]
        source: TopologyError,
    },
}

impl ExperimentError {
    /// The operating system's kind of error when the trace could not be opened or read (it does
    /// not exist, is a directory, may not be read), so that a caller can raise its own kind.
    pub fn io_kind(&self) -> Option<std::io::ErrorKind> {
        match self {
            ExperimentError::Trace { source: TraceError::Io { source, .. }, .. } => Some(source.kind()),
            _ => None,
        }
    }

    /// The message with its causes, `a: b: c`.
    pub fn chain(&self) -> String {
        let mut text = self.to_string();
        let mut cause = std::error::Error::source(self);
        while let Some(c) = cause {
            text.push_str(": ");
            text.push_str(&c.to_string());
            cause = c.source();
        }
        text
    }
}

/// The topology `spec` (`default` or a path) configured for `machines` machines; errors name the
/// topology, as reading it does.
pub fn load_topology(
    spec: &str,
    machines: u32,
    seed: u64,
    overrides: &Overrides,
) -> Result<crate::WanConfig, ExperimentError> {
    Ok(read_topology(spec, machines, seed, overrides)?.0)
}

/// [`load_topology`], with the samples files the topology read.
pub(super) fn read_topology(
    spec: &str,
    machines: u32,
    seed: u64,
    overrides: &Overrides,
) -> Result<(crate::WanConfig, Vec<PathBuf>), ExperimentError> {
    let topology = Topology::named(spec).map_err(|e| match e {
        e @ TopologyError::Read { .. } => ExperimentError::TopologyRead(e),
        source => ExperimentError::Topology { spec: spec.to_string(), source },
    })?;
    let cfg = topology
        .config(machines, seed, overrides)
        .map_err(|source| ExperimentError::Topology { spec: spec.to_string(), source })?;
    Ok((cfg, topology.samples_files))
}

/// The most candidate orders one `siphon-mc` search may compare. A search holds every candidate
/// as a full order of the live coflows at once: at the default depth and breadth it compares
/// 132, and past this bound it would take gigabytes where coflows are many.
pub const MAX_MC_CANDIDATES: u64 = 100_000;

/// Checks `siphon-mc`'s search options: a search of no round, no position or no coflow is
/// refused, and so is one of more than [`MAX_MC_CANDIDATES`] candidate orders (the orders of
/// `depth` coflows out of `breadth`), naming the options in `spelling`.
pub fn check_monte_carlo(mc: &MonteCarlo, spelling: Spelling) -> Result<(), PlanError> {
    for (option, value) in [("mc_rounds", mc.rounds as usize), ("mc_depth", mc.depth), ("mc_breadth", mc.breadth)] {
        if value == 0 {
            return Err(PlanError(format!("{} must be at least 1", spelling.name(option))));
        }
    }
    // breadth × (breadth - 1) × … over the searched positions, stopped once past the bound, so
    // that a depth of 2^63 takes a few steps.
    let mut candidates: u64 = 1;
    for taken in 0..mc.depth.min(mc.breadth) {
        candidates = candidates.saturating_mul((mc.breadth - taken) as u64);
        if candidates > MAX_MC_CANDIDATES {
            return Err(PlanError(format!(
                "{depth} {} with {breadth} {}: a search would compare more than {MAX_MC_CANDIDATES} candidate \
                 orders (the orders of {depth} coflows out of {breadth}): lower either",
                mc.depth,
                mc.breadth,
                depth = spelling.name("mc_depth"),
                breadth = spelling.name("mc_breadth"),
            )));
        }
    }
    Ok(())
}

/// The registry's parameters of a wide-area run: `siphon-mc` knows how long a bandwidth draw
/// holds (the redraw interval) and takes the Monte Carlo options.
pub fn wide_area_params(seed: u64, redraw: coflow_core::Nanos, mc: MonteCarlo) -> Params {
    Params { seed, redraw: (redraw != coflow_core::Nanos::MAX).then_some(redraw), mc }
}

/// The fastest port a simulation takes, in bytes per second (1 Pbit/s): at a petabit per second
/// a megabyte takes 8 ns, and the clock, which counts nanoseconds, would round completion times
/// (and their ratios to the lower bounds) by more than the policies differ.
pub const MAX_PORT_BYTES_PER_SEC: f64 = 1.25e14;

/// The most slack a drawn deadline takes: up to 1,001 times its coflow's isolated CCT, past which
/// a deadline is none in practice (and a deadline past the nanosecond clock's end is cut to it).
pub(crate) const MAX_DEADLINE_X: f64 = 1000.0;

/// The slowest port a simulation takes, in bytes per second (1 kbit/s): slower, a replay's
/// simulated time, and with it the periodic work of policies such as Varys's starvation-free
/// turns, grows past any use, and a rate given without its unit (`1`, one byte per second) is
/// the likelier meaning.
pub const MIN_PORT_BYTES_PER_SEC: f64 = crate::topology::MIN_LINK;

/// Refuses a port rate below [`MIN_PORT_BYTES_PER_SEC`] or past [`MAX_PORT_BYTES_PER_SEC`];
/// `option` names it, as given (`text`).
pub fn check_port_rate(rate: Rate, option: &str, text: &str) -> Result<(), PlanError> {
    if rate.bytes_per_sec() < MIN_PORT_BYTES_PER_SEC {
        // A bare number is bytes per second: one that reads as bits is a likely slip.
        let bare = text.trim().parse::<f64>().is_ok();
        let hint = if bare { " (a bare number is bytes per second: give a unit, as in 1Gbps)" } else { "" };
        return Err(PlanError(format!("{option} {text:?}: at least 1 kbit/s{hint}")));
    }
    if rate.bytes_per_sec() > MAX_PORT_BYTES_PER_SEC {
        return Err(PlanError(format!(
            "{option} {text:?}: at most 1 Pbit/s: the simulated clock counts nanoseconds, in which a faster port \
             would move a whole flow"
        )));
    }
    Ok(())
}

impl Config {
    /// Validates the options (the policies against the model too), then loads or generates the
    /// workload (only if they hold) and gives the plan: the workload grouped into jobs, as the
    /// model sees it, with deadlines and releases as asked (a sweep draws its deadlines per
    /// window), on the wide area if one is asked for.
    pub fn plan(&self, spelling: Spelling) -> Result<Plan, ExperimentError> {
        let name = |o: &str| spelling.name(o);
        let port_rate: Rate = self
            .port_rate
            .parse()
            .map_err(|e| PlanError(format!("{} {:?}: {e}", name("port_rate"), self.port_rate)))?;
        check_port_rate(port_rate, &name("port_rate"), &self.port_rate)?;
        let policies =
            self.model.parse_policies(&self.policies).map_err(|e| PlanError(format!("{}: {e}", name("policies"))))?;
        if policies.is_empty() {
            return Err(PlanError(format!("{} names no policy", name("policies"))).into());
        }
        // One policy, or none (empty, or `none`): not a list, and not `all`.
        let baseline = match self.baseline.trim() {
            "" | "none" => None,
            one if one.contains(',') || one == "all" => {
                return Err(PlanError(format!("{} names one policy, got {one:?}", name("baseline"))).into());
            }
            one => Some(policy::entry_of(one).map_err(|e| PlanError(format!("{}: {e}", name("baseline"))))?.name),
        };
        self.model.check(&policies, "policies", spelling)?;
        self.model.check(baseline.as_slice(), "baseline", spelling)?;
        if let Some(x) = self.deadline_x
            && !(0.0..=MAX_DEADLINE_X).contains(&x)
        {
            let x_name = name("deadline_x");
            return Err(PlanError(format!(
                "{x_name} must be a non-negative number, at most {MAX_DEADLINE_X}, got {}",
                coflow_core::shown(x)
            ))
            .into());
        }
        if let Some(f) = self.deadline_fraction
            && !(0.0..=1.0).contains(&f)
        {
            let shown = coflow_core::shown(f);
            return Err(PlanError(format!("{} must be between 0 and 1, got {shown}", name("deadline_fraction"))).into());
        }
        if self.stages == 0 {
            return Err(PlanError(format!("{} must be at least 1", name("stages"))).into());
        }
        if self.threads == Some(0) {
            return Err(PlanError(format!("{} must be at least 1", name("threads"))).into());
        }
        if self.wide_area.is_some() && !self.model.is_exact() {
            return Err(PlanError(format!(
                "{}: the reference simulator's model ({} coflowsim) is a big switch only",
                name("wan"),
                name("model")
            ))
            .into());
        }
        if let Some(spec) = &self.wide_area {
            check_monte_carlo(&spec.mc, spelling)?;
        }
        if let Some(sweep) = &self.sweep {
            let refuse = |what: &str| PlanError(format!("a sweep takes no {what}"));
            if self.wide_area.is_some() {
                return Err(refuse(&name("wan")).into());
            }
            if self.deadline_fraction.is_some() {
                return Err(refuse(&name("deadline_fraction")).into());
            }
            if self.offline {
                return Err(refuse(&format!("{} (every window is released at time 0)", name("offline"))).into());
            }
            if self.stages > 1 {
                return Err(refuse(&format!(
                    "{} (a window's coflows are released together, without dependencies)",
                    name("stages")
                ))
                .into());
            }
            if sweep.windows == 0 {
                return Err(PlanError(format!("{} must be at least 1", name("windows"))).into());
            }
        }
        let (workload, source) = self.workload.load(self.seed, self.stages, spelling)?;
        let given = super::Given::of(&workload);
        let (workload, source) = (self.model.workload(workload), source + &self.model.describe());
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut plan = Plan {
            workload,
            source,
            given,
            policies,
            baseline,
            port_rate,
            seed: self.seed,
            threads: self.threads.unwrap_or(cores).max(1),
            deadline_x: self.deadline_x,
            model: self.model,
            wide_area: None,
            notes: Vec::new(),
            read: Vec::new(),
        };
        if let Some(sweep) = &self.sweep {
            let total = plan.workload.coflows.len();
            if total == 0 {
                return Err(
                    PlanError(format!("a sweep draws its windows from coflows: {} has none", plan.source)).into()
                );
            }
            if let Some(n) = sweep.concurrent.iter().find(|&&n| n == 0 || n > total) {
                return Err(PlanError(format!(
                    "{} {n}: must be between 1 and the workload's {}",
                    name("concurrent"),
                    coflow_core::counted(total, "coflow", "coflows")
                ))
                .into());
            }
            if sweep.concurrent.is_empty() {
                return Err(PlanError(format!("{} names no number of coflows", name("concurrent"))).into());
            }
            // Every window is held at once: about N coflows of the workload's mean size each, a
            // coflow of no flow counting as one, as it is held and replayed all the same.
            let mut ns = sweep.concurrent.clone();
            ns.sort_unstable();
            ns.dedup();
            let per_coflow = (plan.workload.flow_count() as f64 / total as f64).max(1.0);
            let flows = sweep.windows as f64 * ns.iter().sum::<usize>() as f64 * per_coflow;
            if flows > super::sweep::MAX_FLOWS {
                return Err(PlanError(format!(
                    "{} {} windows of each {} would hold about {flows:.0} flows in memory, more than {:.0}: \
                     draw fewer",
                    name("windows"),
                    sweep.windows,
                    name("concurrent"),
                    super::sweep::MAX_FLOWS
                ))
                .into());
            }
            return Ok(plan);
        }
        plan.adjust_workload(self.deadline_fraction, self.offline);
        if let Some(spec) = &self.wide_area {
            plan.place_on_wide_area(spec)?;
            // What the wide area sets itself, said rather than dropped unsaid.
            let default = Config::default();
            if port_rate != default.port_rate.parse::<Rate>().expect("the default rate parses") {
                let rate = name("port_rate");
                plan.notes.push(format!("{rate} is not used on the wide area: its links' bandwidths set the rates"));
            }
            // No baseline asked for is not one overridden: the wide area's tables show theirs.
            let asked = self.baseline.trim();
            if !matches!(asked, "" | "none") && asked != default.baseline && asked != super::WIDE_AREA_BASELINE {
                let baseline = name("baseline");
                let (given, used) = (&self.baseline, super::WIDE_AREA_BASELINE);
                plan.notes.push(format!("{baseline} {given} is not used: the wide area compares with {used}"));
            }
        }
        Ok(plan)
    }
}

impl WorkloadSource {
    /// The workload and what it is: the trace read, the synthetic workload generated with `seed`,
    /// or the workload given; grouped into jobs of `stages` coflows (seeded by `seed`) unless
    /// `stages` is 1. Errors name the options in `spelling`.
    pub fn load(&self, seed: u64, stages: usize, spelling: Spelling) -> Result<(Workload, String), ExperimentError> {
        if stages == 0 {
            return Err(PlanError(format!("{} must be at least 1", spelling.name("stages"))).into());
        }
        let (w, source) = match self {
            WorkloadSource::Trace(path) => {
                let w = coflow_trace::read_trace(path)
                    .map_err(|source| ExperimentError::Trace { path: path.clone(), source })?;
                (w, path.display().to_string())
            }
            WorkloadSource::Synthetic { coflows, machines } => {
                let mut cfg = synth::SynthConfig { seed, ..Default::default() };
                if let Some(n) = coflows {
                    cfg.coflows = *n;
                }
                if let Some(m) = machines {
                    cfg.machines = *m;
                }
                cfg.validate().map_err(|e| {
                    let (c, m) = (spelling.name("coflows"), spelling.name("machines"));
                    PlanError(format!("synthetic workload ({c}, {m}): {e}"))
                })?;
                (synth::generate(&cfg), cfg.describe())
            }
            WorkloadSource::Given { workload, source } => (workload.clone(), source.clone()),
        };
        if stages <= 1 {
            return Ok((w, source));
        }
        if w.has_dependencies() {
            return Err(PlanError(format!(
                "{} {stages}: {source} already groups its coflows into jobs (some name parents)",
                spelling.name("stages")
            ))
            .into());
        }
        let source = format!("{source} (jobs of {stages} stages)");
        Ok((synth::multi_stage(&w, stages, seed), source))
    }
}

impl Plan {
    /// Places the plan on the wide area `spec` asks for (the topology loaded, placed on the
    /// workload's machines and overridden), leaving out, with a note, the policies that cannot run
    /// there.
    fn place_on_wide_area(&mut self, spec: &WideAreaSpec) -> Result<(), ExperimentError> {
        let (mut cfg, samples_files) =
            read_topology(&spec.topology, self.workload.machines, self.seed, &spec.overrides)?;
        self.read.extend(samples_files);
        cfg.multipath = spec.multipath;
        // The registry says which policies cannot serve the wide area; they are skipped, grouped
        // by what they assume.
        let refused: Vec<Unservable> =
            self.policies.iter().filter_map(|p| policy::check_serves(p, &cfg.fabric()).err()).collect();
        let mut needs: Vec<Needs> = Vec::new();
        for u in &refused {
            if !needs.contains(&u.needs) {
                needs.push(u.needs);
            }
        }
        for need in needs {
            let names: Vec<&str> = refused.iter().filter(|u| u.needs == need).map(|u| u.policy.as_str()).collect();
            self.notes.push(format!("skipping {}: they assume {}", names.join(", "), need.assumption()));
        }
        let policies: Vec<&'static str> =
            self.policies.iter().copied().filter(|p| !refused.iter().any(|u| u.policy == *p)).collect();
        if policies.is_empty() {
            return Err(PlanError("no policy left to run on the wide area".to_string()).into());
        }
        // Per-connection caps are per leg; route-model policies pool flows by route.
        let pooled: Vec<&str> = if cfg.per_connection.is_some() {
            policies
                .iter()
                .copied()
                .filter(|p| policy::by_name(p).is_ok_and(|s| s.model() == ServiceModel::Route))
                .collect()
        } else {
            Vec::new()
        };
        if !pooled.is_empty() {
            self.notes.push(format!(
                "skipping {}: per-connection bandwidth caps flows one by one, and they pool flows by route",
                pooled.join(", ")
            ));
        }
        self.policies = policies.into_iter().filter(|p| !pooled.contains(p)).collect();
        if self.policies.is_empty() {
            return Err(PlanError("no policy left to run with per-connection bandwidth".to_string()).into());
        }
        let params = wide_area_params(self.seed, cfg.redraw, spec.mc);
        self.on_wide_area(spec.topology.clone(), cfg, params).expect("the policies that cannot serve it were left out");
        Ok(())
    }
}
