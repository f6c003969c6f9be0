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
    /// Mean and p99 wall time of the replay's decisions, in milliseconds.
    pub decide_mean_ms: f64,
    /// See `decide_mean_ms`.
    pub decide_p99_ms: f64,
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
    /// Mean and p99 decision wall time with `SimConfig::from_scratch`, in milliseconds.
    pub scratch_mean_ms: f64,
    /// See `scratch_mean_ms`.
    pub scratch_p99_ms: f64,
    /// Mean and p99 decision wall time told what changed, in milliseconds.
    pub incremental_mean_ms: f64,
    /// See `incremental_mean_ms`.
    pub incremental_p99_ms: f64,
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
    let (decide_mean_ms, decide_p99_ms) = mean_p99_ms(&times);
    let concurrency = concurrent
        .iter()
        .map(|w| {
            let (_, s) = timed(build(), w, &scratch, 1, Some(decisions + 1))?;
            let (_, i) = timed(build(), w, &incremental, 1, Some(decisions + 1))?;
            let ((scratch_mean_ms, scratch_p99_ms), (incremental_mean_ms, incremental_p99_ms)) =
                (mean_p99_ms(&s), mean_p99_ms(&i));
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

/// Mean and 99th percentile of times in seconds, in milliseconds; zeros for none.
pub fn mean_p99_ms(times: &[f64]) -> (f64, f64) {
    if times.is_empty() {
        return (0.0, 0.0);
    }
    let mut sorted = times.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mean = sorted.iter().sum::<f64>() / sorted.len() as f64;
    (mean * 1e3, crate::percentile(&sorted, 99.0) * 1e3)
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
