//! Per-coflow outcomes and the summary figures the field compares.

use coflow_core::{Bin, Coflow, CoflowId, Nanos};
use serde::Serialize;

use crate::SimResult;

/// What happened to one coflow.
#[derive(Clone, Debug, PartialEq)]
pub struct CoflowOutcome {
    /// Its id.
    pub id: CoflowId,
    /// When it arrived.
    pub arrival: Nanos,
    /// When its last flow finished, if it did.
    pub finish: Option<Nanos>,
    /// Its Varys bin.
    pub bin: Bin,
    /// Its number of flows.
    pub flows: usize,
    /// Its total bytes.
    pub bytes: u64,
    /// Its completion time alone on an empty fabric (Γ_empty).
    pub isolated: Nanos,
    /// Its deadline relative to arrival, if it has one.
    pub deadline: Option<Nanos>,
    /// Whether admission control rejected it (it then never finishes).
    pub rejected: bool,
    /// The sum over its finished flows of their completion times (from the coflow's arrival), in
    /// seconds; local flows count zero.
    pub flow_time_s: f64,
}

impl CoflowOutcome {
    /// The outcome of `c`: finished at `finish`, or rejected; `isolated` is its Γ_empty.
    pub fn new(c: &Coflow, finish: Option<Nanos>, rejected: bool, isolated: Nanos) -> CoflowOutcome {
        CoflowOutcome {
            id: c.id,
            arrival: c.arrival,
            finish,
            bin: c.bin(),
            flows: c.flows.len(),
            bytes: c.total_bytes().get(),
            isolated,
            deadline: c.deadline,
            rejected,
            flow_time_s: 0.0,
        }
    }

    /// Whether it has a deadline and finished by it. Finish times are rounded up to the
    /// nanosecond at every decision, so a coflow finishing exactly at its deadline may land a few
    /// nanoseconds late: up to a microsecond counts as on time.
    pub fn met_deadline(&self) -> Option<bool> {
        let d = self.deadline?;
        Some(self.cct().is_some_and(|c| c.0 <= d.0.saturating_add(1_000)))
    }

    /// Its coflow completion time, if it finished.
    pub fn cct(&self) -> Option<Nanos> {
        self.finish.map(|f| f.saturating_sub(self.arrival))
    }
}

/// The figures of one policy's run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Summary {
    /// The policy's short name.
    pub policy: String,
    /// Coflows in the workload.
    pub coflows: usize,
    /// Coflows that finished.
    pub completed: usize,
    /// Average CCT over finished coflows, in seconds.
    pub avg_cct_s: f64,
    /// Median CCT, in seconds.
    pub p50_cct_s: f64,
    /// 95th percentile CCT, in seconds.
    pub p95_cct_s: f64,
    /// 99th percentile CCT, in seconds.
    pub p99_cct_s: f64,
    /// When the last coflow finished, in seconds.
    pub makespan_s: f64,
    /// Baseline average CCT over this policy's: above 1 means this policy is faster.
    pub factor_vs_baseline: Option<f64>,
    /// Average CCT over the isolation lower bound's.
    pub bound_ratio: f64,
    /// Coflows rejected by admission control.
    pub rejected: usize,
    /// Share of the coflows with a deadline that met it (rejected ones did not), if any has one.
    pub deadline_met_fraction: Option<f64>,
    /// Share of coflows admitted, for policies with admission control.
    pub admitted_fraction: Option<f64>,
    /// Share of the admitted coflows with a deadline that met it, for admission-control policies.
    pub met_among_admitted_fraction: Option<f64>,
    /// Events the simulator processed.
    pub events: u64,
    /// Decisions the policy made.
    pub decisions: u64,
}

impl Summary {
    /// Summarises a run; `baseline_avg_cct_s` is the baseline policy's average CCT, if known.
    pub fn of(r: &SimResult, baseline_avg_cct_s: Option<f64>) -> Summary {
        let mut ccts: Vec<f64> = r.outcomes.iter().filter_map(|o| o.cct()).map(Nanos::as_secs_f64).collect();
        ccts.sort_by(f64::total_cmp);
        let avg = if ccts.is_empty() { 0.0 } else { ccts.iter().sum::<f64>() / ccts.len() as f64 };
        let bound = lower_bound_avg_cct(r);
        Summary {
            policy: r.policy.clone(),
            coflows: r.outcomes.len(),
            completed: ccts.len(),
            avg_cct_s: avg,
            p50_cct_s: percentile(&ccts, 50.0),
            p95_cct_s: percentile(&ccts, 95.0),
            p99_cct_s: percentile(&ccts, 99.0),
            makespan_s: r.makespan.as_secs_f64(),
            factor_vs_baseline: baseline_avg_cct_s.filter(|_| avg > 0.0).map(|b| b / avg),
            bound_ratio: if bound > 0.0 { avg / bound } else { f64::NAN },
            rejected: r.outcomes.iter().filter(|o| o.rejected).count(),
            deadline_met_fraction: fraction(r.outcomes.iter().filter_map(|o| o.met_deadline())),
            admitted_fraction: r
                .admission_control
                .then(|| fraction(r.outcomes.iter().map(|o| !o.rejected)).unwrap_or(0.0)),
            met_among_admitted_fraction: if r.admission_control {
                fraction(r.outcomes.iter().filter(|o| !o.rejected).filter_map(|o| o.met_deadline()))
            } else {
                None
            },
            events: r.events,
            decisions: r.decisions,
        }
    }
}

/// The share of `true` among the values, or `None` for no values.
fn fraction(values: impl Iterator<Item = bool>) -> Option<f64> {
    let (mut yes, mut all) = (0usize, 0usize);
    for v in values {
        all += 1;
        yes += v as usize;
    }
    (all > 0).then(|| yes as f64 / all as f64)
}

/// The isolation lower bound: the average over coflows of each one's completion time alone on
/// an empty fabric, in seconds. No policy can have a lower average CCT.
pub fn lower_bound_avg_cct(r: &SimResult) -> f64 {
    if r.outcomes.is_empty() {
        return 0.0;
    }
    r.outcomes.iter().map(|o| o.isolated.as_secs_f64()).sum::<f64>() / r.outcomes.len() as f64
}

/// The `p`-th percentile of sorted values by the nearest-rank method; 0 for no values.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}
