//! How long a policy takes to decide, incrementally and from scratch, side by side.
//!
//! The only module of the crate that reads a wall clock: around the policy's `poll_allocation`,
//! never inside the policy or the event loop, and nothing it measures feeds back into a
//! simulation (the wrapped policy's decisions are passed through untouched).
//!
//! A policy told only what changed since its last decision ([`coflow_sched::Changes`]) decides
//! exactly as one told to take everything as new (`SimConfig::from_scratch`); a property test
//! checks that. So the two runs of a concurrency measurement make the very same decisions, and
//! the ratio of their times is the gain of incremental decisions and nothing else.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use coflow_core::{Nanos, Workload};
use coflow_sched::policy::Unservable;
use coflow_sched::{Allocation, Hooked, Hooks, Input, Scheduler};
use serde::Serialize;

use crate::engine::{SimConfig, SimResult, simulate};

/// One policy's figures.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PolicyBench {
    /// The policy's name, as asked for.
    pub policy: String,
    /// Wall time of the whole replay, incremental decisions.
    pub replay_wall_s: f64,
    /// Events and decisions of the replay.
    pub events: u64,
    /// Decisions of the replay.
    pub decisions: u64,
    /// Mean and p99 wall time of the replay's decisions, in milliseconds; none (`null`) when it
    /// made none (a workload with no coflow).
    pub decide_mean_ms: Option<f64>,
    /// See `decide_mean_ms`.
    pub decide_p99_ms: Option<f64>,
    /// Decision times with many coflows present at once.
    pub concurrency: Vec<ConcurrencyBench>,
}

/// Decision times with `coflows` coflows present at once, from scratch and incremental.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ConcurrencyBench {
    /// Coflows present.
    pub coflows: usize,
    /// Their flows.
    pub flows: usize,
    /// Decisions timed in each mode.
    pub decisions: usize,
    /// Mean and p99 decision wall time with `SimConfig::from_scratch`, in milliseconds; none
    /// (`null`) when no decision was timed.
    pub scratch_mean_ms: Option<f64>,
    /// See `scratch_mean_ms`.
    pub scratch_p99_ms: Option<f64>,
    /// Mean and p99 decision wall time told what changed, in milliseconds, as `scratch_mean_ms`.
    pub incremental_mean_ms: Option<f64>,
    /// See `incremental_mean_ms`.
    pub incremental_p99_ms: Option<f64>,
}

/// Every policy's figures: what `coflow bench --json` writes.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct BenchReport {
    /// One entry per policy, in the order asked for.
    pub policies: Vec<PolicyBench>,
}

/// Measures `build`'s policy: a replay of `replay`, then, on each workload of `concurrent`
/// (coflows all released at once), `decisions` decisions from scratch and as many incremental
/// ones. The first decision of a run sees every coflow new in both modes, so it is left out of
/// both.
pub fn bench_policy(
    name: &str,
    build: &dyn Fn() -> Box<dyn Scheduler>,
    replay: &Workload,
    concurrent: &[Workload],
    decisions: usize,
    cfg: &SimConfig,
) -> Result<PolicyBench, Unservable> {
    let incremental = SimConfig { from_scratch: false, ..cfg.clone() };
    let scratch = SimConfig { from_scratch: true, ..cfg.clone() };
    let started = Instant::now();
    let (r, times) = timed(build(), replay, &incremental, 0, None)?;
    let replay_wall_s = started.elapsed().as_secs_f64();
    let (decide_mean_ms, decide_p99_ms) = mean_p99_ms(&times).unzip();
    let concurrency = concurrent
        .iter()
        .map(|w| {
            let (_, s) = timed(build(), w, &scratch, 1, Some(decisions + 1))?;
            let (_, i) = timed(build(), w, &incremental, 1, Some(decisions + 1))?;
            let ((scratch_mean_ms, scratch_p99_ms), (incremental_mean_ms, incremental_p99_ms)) =
                (mean_p99_ms(&s).unzip(), mean_p99_ms(&i).unzip());
            Ok(ConcurrencyBench {
                coflows: w.coflows.len(),
                flows: w.flow_count(),
                decisions: s.len().min(i.len()),
                scratch_mean_ms,
                scratch_p99_ms,
                incremental_mean_ms,
                incremental_p99_ms,
            })
        })
        .collect::<Result<_, _>>()?;
    Ok(PolicyBench {
        policy: name.to_string(),
        replay_wall_s,
        events: r.events,
        decisions: r.decisions,
        decide_mean_ms,
        decide_p99_ms,
        concurrency,
    })
}

/// Mean and 99th percentile of times in seconds, in milliseconds; none for no time.
pub fn mean_p99_ms(times: &[f64]) -> Option<(f64, f64)> {
    if times.is_empty() {
        return None;
    }
    let mut sorted = times.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mean = sorted.iter().sum::<f64>() / sorted.len() as f64;
    Some((mean * 1e3, crate::percentile(&sorted, 99.0) * 1e3))
}

/// Replays `w` under `policy`, timing every decision after the first `skip`; after `limit`
/// decisions the policy stops deciding (no rates, no wake-up), which ends the run early.
fn timed(
    policy: Box<dyn Scheduler>,
    w: &Workload,
    cfg: &SimConfig,
    skip: usize,
    limit: Option<usize>,
) -> Result<(SimResult, Vec<f64>), Unservable> {
    let times_s = Arc::new(Mutex::new(Vec::new()));
    let timed = Hooked::new(policy, Timed { times_s: times_s.clone(), skip, limit, made: 0 });
    let r = simulate(w, Box::new(timed), cfg)?;
    let times = std::mem::take(&mut *times_s.lock().expect("no panic while held"));
    Ok((r, times))
}

/// Times the decisions of the policy it is hooked to into a shared list.
#[derive(Debug)]
struct Timed {
    times_s: Arc<Mutex<Vec<f64>>>,
    skip: usize,
    limit: Option<usize>,
    made: usize,
}

impl Hooks for Timed {
    fn decide(&mut self, policy: &mut dyn Scheduler, input: &Input<'_>, out: &mut Allocation) -> Option<Nanos> {
        if self.limit.is_some_and(|l| self.made >= l) {
            out.serve_nothing();
            return None;
        }
        let started = Instant::now();
        let wake = policy.poll_allocation(input, out);
        let elapsed = started.elapsed().as_secs_f64();
        self.made += 1;
        if self.made > self.skip {
            self.times_s.lock().expect("no panic while held").push(elapsed);
        }
        wake
    }
}

/// `n` coflows shaped like the Facebook trace on 150 machines, all released at time 0: the
/// workload of a decision-time measurement with `n` coflows present, seeded by `seed`; an error
/// if so many would not fit in memory.
pub fn concurrent_workload(n: usize, seed: u64) -> Result<Workload, coflow_trace::synth::SynthError> {
    let cfg = coflow_trace::synth::SynthConfig { seed, coflows: n, machines: 150, ..Default::default() };
    cfg.validate()?;
    let mut w = coflow_trace::synth::generate(&cfg);
    w.release_at_zero();
    Ok(Workload::new(w.machines, w.coflows).expect("a generated workload is valid"))
}

/// What [`siphon_search`] times: `siphon-mc`'s first decision (a full search) with `coflows`
/// coflows present on the wide area `topology`, once per workload seed `1..=repeat`.
#[derive(Clone, Debug)]
pub struct SearchBench {
    /// Coflows present at the timed decision (at least 2).
    pub coflows: usize,
    /// Decisions to time, each on a different workload seed (1 to [`MAX_SEARCH_REPEAT`]).
    pub repeat: u64,
    /// The topology, as [`crate::experiment::WideAreaSpec::topology`] names it.
    pub topology: String,
    /// The search's parameters (the selection and draws as given).
    pub mc: coflow_sched::policy::MonteCarlo,
}

/// The most decisions [`siphon_search`] times: each draws a workload and runs a full search, and
/// its time is kept, so past this a repetition count is a run of hours, not a measurement.
pub const MAX_SEARCH_REPEAT: u64 = 10_000;

/// What [`siphon_search`] measured.
#[derive(Clone, Debug, PartialEq)]
pub struct SearchTimes {
    /// Each search's wall time in seconds, sorted.
    pub times_s: Vec<f64>,
    /// Monte Carlo rounds per search, on average.
    pub rounds_per_search: f64,
}

/// Times the first decision of `siphon-mc` with every coflow present, on FB-shaped synthetic
/// workloads of 150 machines whose coflows all arrive at time 0 (keeping the first that cross the
/// wide area), each workload and the weather seeded by the repetition. Errors name the options in
/// `spelling`.
pub fn siphon_search(
    spec: &SearchBench,
    spelling: crate::experiment::Spelling,
) -> Result<SearchTimes, crate::experiment::ExperimentError> {
    use crate::experiment::{PlanError, check_monte_carlo, load_topology, wide_area_params};
    use coflow_sched::{Intra, SiphonMc};
    if spec.coflows < 2 || spec.repeat == 0 {
        let (c, r) = (spelling.name("coflows"), spelling.name("repeat"));
        return Err(PlanError(format!("{c} must be at least 2 and {r} at least 1")).into());
    }
    if spec.repeat > MAX_SEARCH_REPEAT {
        let r = spelling.name("repeat");
        return Err(PlanError(format!("{r} {}: at most {MAX_SEARCH_REPEAT} decisions are timed", spec.repeat)).into());
    }
    check_monte_carlo(&spec.mc, spelling)?;
    let base = load_topology(&spec.topology, 150, 0, &crate::topology::Overrides::default())?;
    let (fabric, redraw) = (base.fabric(), base.redraw);
    let mut times = Vec::new();
    let mut rounds = 0;
    for seed in 1..=spec.repeat {
        // More than needed, keeping the first that cross the wide area (some are all local).
        let synth = coflow_trace::synth::SynthConfig {
            seed,
            coflows: spec.coflows.saturating_mul(2),
            machines: 150,
            ..Default::default()
        };
        // Twice as many are drawn as asked for: the error says what was asked.
        synth.validate().map_err(|_| {
            PlanError(format!(
                "{} {}: too many to draw on 150 machines (a wide-area search bench draws twice as many and keeps \
                 those that cross the wide area)",
                spelling.name("coflows"),
                spec.coflows
            ))
        })?;
        let mut w = coflow_trace::synth::generate(&synth);
        w.coflows.retain(|c| c.flows.iter().any(|f| f.crosses_fabric() && !fabric.route(f.src, f.dst).is_local()));
        w.coflows.truncate(spec.coflows);
        w.release_at_zero();
        // As a wide-area experiment builds it: a draw holds for the redraw interval.
        let params = wide_area_params(seed, redraw, spec.mc);
        let out = Arc::new(Mutex::new(None));
        let probe = FirstSearch { inner: SiphonMc::new(params.siphon_config(Intra::Madd)), out: out.clone() };
        // The weather is seeded as the search is; per-connection bandwidth stays off.
        let wan = crate::WanConfig { seed, per_connection: None, ..base.clone() };
        simulate(&w, Box::new(probe), &SimConfig::wide_area(wan)).expect("siphon-mc serves the wide area");
        let taken = out.lock().expect("no panic while held").take();
        let Some((t, present, r)) = taken else {
            return Err(PlanError("no decision was made".to_string()).into());
        };
        if present != spec.coflows {
            let msg = format!("{present} coflows present at the first decision, expected {}", spec.coflows);
            return Err(PlanError(msg).into());
        }
        times.push(t);
        rounds += r;
    }
    times.sort_by(f64::total_cmp);
    Ok(SearchTimes { times_s: times, rounds_per_search: rounds as f64 / spec.repeat as f64 })
}

/// Times the first decision of the `siphon-mc` it holds and hands out (seconds, coflows present,
/// rounds run), then serves nothing, which ends the run.
#[derive(Debug)]
struct FirstSearch {
    inner: coflow_sched::SiphonMc,
    out: Arc<Mutex<Option<(f64, usize, u64)>>>,
}

impl Scheduler for FirstSearch {
    fn name(&self) -> &'static str {
        "siphon-mc"
    }

    fn model(&self) -> coflow_sched::ServiceModel {
        coflow_sched::ServiceModel::Proportional
    }

    fn handle_arrival(&mut self, now: Nanos, coflow: coflow_core::CoflowId) {
        self.inner.handle_arrival(now, coflow);
    }

    fn poll_allocation(&mut self, input: &Input<'_>, out: &mut Allocation) -> Option<Nanos> {
        let mut slot = self.out.lock().expect("no panic while held");
        if slot.is_some() {
            return None;
        }
        let started = Instant::now();
        self.inner.poll_allocation(input, out);
        let t = started.elapsed().as_secs_f64();
        out.serve_nothing();
        *slot = Some((t, input.coflows.len(), self.inner.searches().1));
        None
    }
}
