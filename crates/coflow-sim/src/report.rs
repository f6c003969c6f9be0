//! Per-coflow outcomes and the summary figures the field compares.

use coflow_core::{Bin, Coflow, CoflowId, MachineId, Nanos};
use serde::Serialize;

use crate::SimResult;

/// What happened to one coflow.
#[derive(Clone, Debug, PartialEq)]
pub struct CoflowOutcome {
    /// Its id.
    pub id: CoflowId,
    /// When it arrived.
    pub arrival: Nanos,
    /// When it was released to the policy: its arrival, or later when it waited for its parents
    /// to finish (never released if an ancestor was rejected; then it never finishes).
    pub release: Nanos,
    /// Its job: the workload index of the first coflow of its connected component of
    /// dependencies (its own index without parents and children).
    pub job: usize,
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
    /// Its deadline relative to its release (as its CCT), if it has one.
    pub deadline: Option<Nanos>,
    /// Whether admission control rejected it (it then never finishes).
    pub rejected: bool,
    /// The sum over its finished flows of their completion times (from the coflow's arrival), in
    /// seconds; local flows count zero.
    pub flow_time_s: f64,
    /// When each of its flow groups (its flows to one receiver, Siphon §3.2) finished, by
    /// receiver: recorded in wide-area runs of proportional policies, empty otherwise.
    pub groups: Vec<(MachineId, Nanos)>,
}

impl CoflowOutcome {
    /// The outcome of `c`: finished at `finish`, or rejected; `isolated` is its Γ_empty.
    pub fn new(c: &Coflow, finish: Option<Nanos>, rejected: bool, isolated: Nanos) -> CoflowOutcome {
        CoflowOutcome {
            id: c.id,
            arrival: c.arrival,
            release: c.arrival,
            job: 0,
            finish,
            bin: c.bin(),
            flows: c.flows.len(),
            bytes: c.total_bytes().get(),
            isolated,
            deadline: c.deadline,
            rejected,
            flow_time_s: 0.0,
            groups: Vec::new(),
        }
    }

    /// Whether it has a deadline and finished by it. Finish times are rounded up to the
    /// nanosecond at every decision, so a coflow finishing exactly at its deadline may land a few
    /// nanoseconds late: up to a microsecond counts as on time.
    pub fn met_deadline(&self) -> Option<bool> {
        let d = self.deadline?;
        Some(self.cct().is_some_and(|c| c.0 <= d.0.saturating_add(1_000)))
    }

    /// Its coflow completion time, if it finished: from its release (its arrival unless it
    /// waited for parents) to its last flow's finish.
    pub fn cct(&self) -> Option<Nanos> {
        self.finish.map(|f| f.saturating_sub(self.release))
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
    /// Average flow completion time (from its coflow's arrival) over the flows of finished
    /// coflows, in seconds: their summed `flow_time_s` over their summed flows. Local flows count
    /// zero.
    pub avg_fct_s: f64,
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
    /// Share of the coflows that finished under both this policy and the baseline that this policy
    /// made slower: whose CCT here exceeds the baseline's by more than [`SLOWER_TOLERANCE`].
    /// `None` without a baseline run (see [`Summary::against`]) or if no coflow finished under both.
    pub slower_than_baseline_fraction: Option<f64>,
    /// Average CCT over the lower bound's: the isolation bound's as [`Summary::of`] computes it,
    /// the best of all bounds once the driver has called [`Summary::with_bound`].
    pub bound_ratio: f64,
    /// Coflows rejected by admission control.
    pub rejected: usize,
    /// Share of the coflows with a deadline that met it (rejected ones did not), if any has one.
    pub deadline_met_fraction: Option<f64>,
    /// Share of the coflows with a deadline that were admitted, for policies with admission
    /// control, if any has one (a coflow without one is never turned away).
    pub admitted_fraction: Option<f64>,
    /// Share of the admitted coflows with a deadline that met it, for admission-control policies.
    pub met_among_admitted_fraction: Option<f64>,
    /// In a mix of coflows with and without deadlines, the average CCT of the finished coflows
    /// without one, in seconds (`None` unless the workload has both kinds).
    pub non_deadline_avg_cct_s: Option<f64>,
    /// Events the simulator processed.
    pub events: u64,
    /// Decisions the policy made.
    pub decisions: u64,
    /// Jobs in the workload (connected components of its dependencies; a coflow without
    /// parents or children is a job of its own).
    pub jobs: usize,
    /// Jobs all of whose coflows finished.
    pub jobs_completed: usize,
    /// Average job completion time over completed jobs, in seconds: a job's last coflow's
    /// finish minus the earliest arrival among its coflows.
    pub job_avg_jct_s: f64,
    /// 95th percentile job completion time over completed jobs, in seconds.
    pub job_p95_jct_s: f64,
    /// The same figures per Varys bin, in the order SN, LN, SW, LW (every bin, even empty ones).
    pub bins: Vec<BinSummary>,
    /// Siphon's figures, for a run on a wide area ([`SimResult::wide_area`]); `None` on the big
    /// switch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wide_area: Option<WideArea>,
}

/// The figures of a wide-area run beyond the common ones (Siphon §5.3): the 90th-percentile and
/// the largest CCT, bytes relayed by detours, and the figures per size bin.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WideArea {
    /// 90th percentile CCT, in seconds.
    pub p90_cct_s: f64,
    /// The slowest coflow's CCT, in seconds.
    pub max_cct_s: f64,
    /// Baseline p90 CCT over this policy's.
    pub p90_factor_vs_baseline: Option<f64>,
    /// Bytes sent over two-hop detours: the extra wide-area bytes multi-path routing costs.
    pub relayed_bytes: f64,
    /// Per size bin ([`SIZE_BINS`]), smallest first.
    pub bins: Vec<SizeBin>,
}

/// Upper bounds of Siphon's four size bins (§5.3 bins coflows by total size; the bounds are
/// ours): under 10 MiB, under 100 MiB, under 1 GiB, and the rest.
pub const SIZE_BINS: [(&str, u64); 4] =
    [("<10MiB", 10 << 20), ("10-100MiB", 100 << 20), ("100MiB-1GiB", 1 << 30), (">=1GiB", u64::MAX)];

/// One size bin of [`WideArea`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SizeBin {
    /// Its label, e.g. `10-100MiB`.
    pub bin: &'static str,
    /// Coflows of the workload in it.
    pub coflows: usize,
    /// Of them, finished.
    pub completed: usize,
    /// Their average CCT, in seconds.
    pub avg_cct_s: f64,
    /// Their 90th percentile CCT, in seconds.
    pub p90_cct_s: f64,
    /// Baseline average over this policy's, in this bin.
    pub factor_vs_baseline: Option<f64>,
}

impl WideArea {
    /// The figures of `r`, with no factor.
    fn of(r: &SimResult, ccts: &[f64]) -> WideArea {
        let mut lower = 0;
        let bins = SIZE_BINS
            .iter()
            .map(|&(bin, upper)| {
                let lo = lower;
                lower = upper;
                let in_bin = r.outcomes.iter().filter(|o| o.bytes >= lo && o.bytes < upper);
                let mut v: Vec<f64> = in_bin.clone().filter_map(|o| o.cct()).map(Nanos::as_secs_f64).collect();
                v.sort_by(f64::total_cmp);
                SizeBin {
                    bin,
                    coflows: in_bin.count(),
                    completed: v.len(),
                    avg_cct_s: mean(&v),
                    p90_cct_s: pct(&v, 90.0),
                    factor_vs_baseline: None,
                }
            })
            .collect();
        WideArea {
            p90_cct_s: pct(ccts, 90.0),
            max_cct_s: ccts.last().copied().unwrap_or(f64::NAN),
            p90_factor_vs_baseline: None,
            relayed_bytes: r.relayed_bytes,
            bins,
        }
    }

    /// Fills the factors against the baseline's figures (a factor needs both sides above 0).
    fn against(&mut self, base: &WideArea) {
        let ratio = |theirs: f64, mine: f64| (mine > 0.0 && theirs > 0.0).then(|| theirs / mine);
        self.p90_factor_vs_baseline = ratio(base.p90_cct_s, self.p90_cct_s);
        for (mine, theirs) in self.bins.iter_mut().zip(&base.bins) {
            mine.factor_vs_baseline = ratio(theirs.avg_cct_s, mine.avg_cct_s);
        }
    }
}

/// The figures of one Varys bin (Varys §7.1: short or long, narrow or wide) in one policy's run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BinSummary {
    /// The bin's short name: `SN`, `LN`, `SW` or `LW`.
    pub bin: &'static str,
    /// Coflows of the workload in this bin.
    pub coflows: usize,
    /// Of them, coflows that finished.
    pub completed: usize,
    /// Average CCT over the bin's finished coflows, in seconds (NaN if none).
    pub avg_cct_s: f64,
    /// 95th percentile CCT over the bin's finished coflows, in seconds (NaN if none).
    pub p95_cct_s: f64,
    /// The baseline's average CCT in this bin over this policy's, each over its own finished
    /// coflows of the bin, as the overall factor is; `None` without a baseline run or when either
    /// finished none of the bin's coflows.
    pub factor_vs_baseline: Option<f64>,
}

/// How much longer than the baseline's a coflow's CCT must be to count as slower: finish times
/// are rounded up to the nanosecond at every decision, so equal schedules can differ by a few
/// nanoseconds.
pub const SLOWER_TOLERANCE: Nanos = Nanos(1_000);

impl Summary {
    /// Summarises a run; `baseline_avg_cct_s` is the baseline policy's average CCT, if known.
    /// Figures that need the baseline's coflows one by one (per-bin factors, the share made
    /// slower) are left `None`: [`Summary::against`] fills them.
    pub fn of(r: &SimResult, baseline_avg_cct_s: Option<f64>) -> Summary {
        let mut ccts: Vec<f64> = r.outcomes.iter().filter_map(|o| o.cct()).map(Nanos::as_secs_f64).collect();
        ccts.sort_by(f64::total_cmp);
        let avg = mean(&ccts);
        let bound = lower_bound_avg_cct(r);
        let jobs = JobFigures::of(r);
        let (mut flow_time, mut flows) = (0.0, 0usize);
        for o in r.outcomes.iter().filter(|o| o.finish.is_some()) {
            flow_time += o.flow_time_s;
            flows += o.flows;
        }
        Summary {
            policy: r.policy.clone(),
            coflows: r.outcomes.len(),
            completed: ccts.len(),
            avg_cct_s: avg,
            avg_fct_s: if flows > 0 { flow_time / flows as f64 } else { f64::NAN },
            p50_cct_s: pct(&ccts, 50.0),
            p95_cct_s: pct(&ccts, 95.0),
            p99_cct_s: pct(&ccts, 99.0),
            makespan_s: if ccts.is_empty() { f64::NAN } else { r.makespan.as_secs_f64() },
            factor_vs_baseline: baseline_avg_cct_s.filter(|b| b.is_finite() && avg > 0.0).map(|b| b / avg),
            slower_than_baseline_fraction: None,
            bound_ratio: if bound > 0.0 { avg / bound } else { f64::NAN },
            rejected: r.outcomes.iter().filter(|o| o.rejected).count(),
            deadline_met_fraction: fraction(r.outcomes.iter().filter_map(|o| o.met_deadline())),
            admitted_fraction: r
                .admission_control
                .then(|| fraction(r.outcomes.iter().filter(|o| o.deadline.is_some()).map(|o| !o.rejected)))
                .flatten(),
            met_among_admitted_fraction: if r.admission_control {
                fraction(r.outcomes.iter().filter(|o| !o.rejected).filter_map(|o| o.met_deadline()))
            } else {
                None
            },
            non_deadline_avg_cct_s: non_deadline_avg_cct(r),
            events: r.events,
            decisions: r.decisions,
            jobs: jobs.jobs,
            jobs_completed: jobs.completed,
            job_avg_jct_s: jobs.avg_jct_s,
            job_p95_jct_s: jobs.p95_jct_s,
            bins: Bin::ALL.iter().map(|&b| BinSummary::of(r, b)).collect(),
            wide_area: r.wide_area.then(|| WideArea::of(r, &ccts)),
        }
    }

    /// The same summary with its bound ratio taken against `best_bound_avg_cct_s`, the best lower
    /// bound on the average CCT (see [`lower_bounds`](crate::lower_bounds)).
    pub fn with_bound(mut self, best_bound_avg_cct_s: f64) -> Summary {
        self.bound_ratio = if best_bound_avg_cct_s > 0.0 { self.avg_cct_s / best_bound_avg_cct_s } else { f64::NAN };
        self
    }

    /// Summarises a run against the baseline policy's run of the same workload (`None`: no
    /// baseline): the factors overall and per bin, and the share of coflows made slower.
    ///
    /// # Panics
    /// If the two runs are not of the same workload (their coflows differ).
    pub fn against(r: &SimResult, baseline: Option<&SimResult>) -> Summary {
        let Some(base) = baseline else { return Summary::of(r, None) };
        let b = Summary::of(base, None);
        let mut s = Summary::of(r, Some(b.avg_cct_s));
        for (mine, theirs) in s.bins.iter_mut().zip(&b.bins) {
            if mine.completed > 0 && theirs.completed > 0 && mine.avg_cct_s > 0.0 {
                mine.factor_vs_baseline = Some(theirs.avg_cct_s / mine.avg_cct_s);
            }
        }
        s.slower_than_baseline_fraction = slower_fraction(r, base);
        if let (Some(mine), Some(theirs)) = (&mut s.wide_area, &b.wide_area) {
            mine.against(theirs);
        }
        s
    }
}

impl BinSummary {
    /// The figures of bin `bin` in run `r`, with no factor.
    fn of(r: &SimResult, bin: Bin) -> BinSummary {
        let in_bin = r.outcomes.iter().filter(|o| o.bin == bin);
        let mut ccts: Vec<f64> = in_bin.clone().filter_map(|o| o.cct()).map(Nanos::as_secs_f64).collect();
        ccts.sort_by(f64::total_cmp);
        BinSummary {
            bin: bin.name(),
            coflows: in_bin.count(),
            completed: ccts.len(),
            avg_cct_s: mean(&ccts),
            p95_cct_s: pct(&ccts, 95.0),
            factor_vs_baseline: None,
        }
    }
}

/// The share of the coflows finished in both runs whose CCT in `r` exceeds the one in `baseline`
/// by more than [`SLOWER_TOLERANCE`]; `None` if no coflow finished in both.
///
/// # Panics
/// If the two runs are not of the same workload.
pub fn slower_fraction(r: &SimResult, baseline: &SimResult) -> Option<f64> {
    assert!(
        r.outcomes.len() == baseline.outcomes.len()
            && r.outcomes.iter().zip(&baseline.outcomes).all(|(a, b)| a.id == b.id),
        "{} and {} ran different workloads",
        r.policy,
        baseline.policy
    );
    fraction(
        r.outcomes
            .iter()
            .zip(&baseline.outcomes)
            .filter_map(|(a, b)| Some((a.cct()?, b.cct()?)))
            .map(|(a, b)| a > b.saturating_add(SLOWER_TOLERANCE)),
    )
}

/// Job completion times of a run (see [`Summary::job_avg_jct_s`]).
#[derive(Clone, Debug, PartialEq)]
pub struct JobFigures {
    /// Jobs in the workload.
    pub jobs: usize,
    /// Jobs all of whose coflows finished.
    pub completed: usize,
    /// Average JCT over completed jobs, in seconds (NaN if none).
    pub avg_jct_s: f64,
    /// 95th percentile JCT over completed jobs, in seconds, by nearest rank (NaN if none).
    pub p95_jct_s: f64,
    /// Each completed job's JCT, in seconds, by the workload index of its first coflow.
    pub jct_s: Vec<(usize, f64)>,
}

impl JobFigures {
    /// The job figures of run `r`.
    pub fn of(r: &SimResult) -> JobFigures {
        // Per job: earliest arrival, latest finish, whether every coflow finished.
        let mut per: std::collections::BTreeMap<usize, (Nanos, Nanos, bool)> = std::collections::BTreeMap::new();
        for o in &r.outcomes {
            let e = per.entry(o.job).or_insert((o.arrival, Nanos::ZERO, true));
            e.0 = e.0.min(o.arrival);
            match o.finish {
                Some(f) => e.1 = e.1.max(f),
                None => e.2 = false,
            }
        }
        let jct_s: Vec<(usize, f64)> = per
            .iter()
            .filter(|(_, e)| e.2)
            .map(|(&j, &(start, end, _))| (j, end.saturating_sub(start).as_secs_f64()))
            .collect();
        let mut sorted: Vec<f64> = jct_s.iter().map(|&(_, t)| t).collect();
        sorted.sort_by(f64::total_cmp);
        JobFigures {
            jobs: per.len(),
            completed: sorted.len(),
            avg_jct_s: mean(&sorted),
            p95_jct_s: pct(&sorted, 95.0),
            jct_s,
        }
    }
}

/// The mean of the values; NaN for none (a figure of nothing, which JSON writes as `null`: a
/// policy that finished no coflow has no average, not one of 0).
fn mean(values: &[f64]) -> f64 {
    if values.is_empty() { f64::NAN } else { values.iter().sum::<f64>() / values.len() as f64 }
}

/// [`percentile`], NaN for no values, as [`mean`].
fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() { f64::NAN } else { percentile(sorted, p) }
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

/// The average CCT of the finished coflows without a deadline, in seconds, when the run mixes
/// coflows with and without deadlines.
fn non_deadline_avg_cct(r: &SimResult) -> Option<f64> {
    let with = r.outcomes.iter().filter(|o| o.deadline.is_some()).count();
    if with == 0 || with == r.outcomes.len() {
        return None;
    }
    let ccts: Vec<f64> =
        r.outcomes.iter().filter(|o| o.deadline.is_none()).filter_map(|o| o.cct()).map(Nanos::as_secs_f64).collect();
    (!ccts.is_empty()).then(|| mean(&ccts))
}

#[cfg(test)]
mod tests {
    use coflow_core::{Bytes, Coflow, CoflowId, Flow, MIB, MachineId, Rate, Workload};
    use coflow_sched::policy;

    use super::*;
    use crate::{SimConfig, simulate};

    /// `n` flows of `bytes` each from `src` to `dst`.
    fn flows(n: usize, src: u32, dst: u32, bytes: u64) -> Vec<Flow> {
        vec![Flow { src: MachineId(src), dst: MachineId(dst), size: Bytes(bytes) }; n]
    }

    /// One coflow per bin, all at time 0, on 1 MiB/s ports; ids put the long ones first so that
    /// FIFO makes the short ones wait:
    /// - 1 (LN): one 8 MiB flow 0→1, and 2 (SN): one 1 MiB flow 0→1, share a port;
    /// - 3 (LW): 52 flows of 5 MiB 2→3, and 4 (SW): 64 flows of 16 KiB 2→3, share a route.
    fn run(name: &str) -> SimResult {
        let c = |id, f| Coflow::new(CoflowId(id), Nanos::ZERO, f);
        let w = Workload::new(
            4,
            vec![
                c(1, flows(1, 0, 1, 8 * MIB)),
                c(2, flows(1, 0, 1, MIB)),
                c(3, flows(52, 2, 3, 5 * MIB)),
                c(4, flows(64, 2, 3, MIB / 64)),
            ],
        )
        .unwrap();
        let cfg = SimConfig { check_invariants: true, ..SimConfig::big_switch(Rate::from_bytes_per_sec(MIB as f64)) };
        simulate(&w, policy::by_name(name).unwrap(), &cfg).unwrap()
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-6 * b.abs().max(1.0)
    }

    fn bin<'a>(s: &'a Summary, name: &str) -> &'a BinSummary {
        s.bins.iter().find(|b| b.bin == name).unwrap()
    }

    #[test]
    fn bins_factors_and_slower_shares_match_the_hand_computation() {
        // Fair: 2 ends at 2 s (half the port), 1 at 9 s; the 116 flows of 3 and 4 share the route,
        // so 4's 16 KiB flows end at 116/64 = 1.8125 s and 3 at 261 s (261 MiB at 1 MiB/s).
        // Varys (SEBF): 2 and 4 first, at 1 s; then 1 at 9 s and 3 at 261 s.
        // FIFO (by id): 1 at 8 s, then 2 at 9 s; 3 at 260 s, then 4 at 261 s.
        let (fair, varys, fifo) = (run("fair"), run("varys"), run("fifo"));
        let ccts = |r: &SimResult| r.outcomes.iter().map(|o| o.cct().unwrap().as_secs_f64()).collect::<Vec<_>>();
        for (r, expected) in
            [(&fair, [9.0, 2.0, 261.0, 1.8125]), (&varys, [9.0, 1.0, 261.0, 1.0]), (&fifo, [8.0, 9.0, 260.0, 261.0])]
        {
            assert!(ccts(r).iter().zip(expected).all(|(a, e)| close(*a, e)), "{}: {:?}", r.policy, ccts(r));
        }

        let f = Summary::against(&fair, Some(&fair));
        let v = Summary::against(&varys, Some(&fair));
        let o = Summary::against(&fifo, Some(&fair));
        assert!(close(v.factor_vs_baseline.unwrap(), (9.0 + 2.0 + 261.0 + 1.8125) / (9.0 + 1.0 + 261.0 + 1.0)));
        assert!(close(o.factor_vs_baseline.unwrap(), 273.8125 / 538.0));
        assert_eq!(f.slower_than_baseline_fraction, Some(0.0));
        // Varys is never slower (1 and 3 tie with fair to the nanosecond rounding), FIFO makes 2
        // and 4 slower.
        assert_eq!(v.slower_than_baseline_fraction, Some(0.0));
        assert_eq!(o.slower_than_baseline_fraction, Some(0.5));

        for s in [&f, &v, &o] {
            assert_eq!(s.bins.iter().map(|b| b.bin).collect::<Vec<_>>(), ["SN", "LN", "SW", "LW"]);
            assert_eq!(s.bins.iter().map(|b| b.coflows).sum::<usize>(), s.coflows);
            assert!(s.bins.iter().all(|b| b.coflows == 1 && b.completed == 1));
            assert!(close(bin(s, "SN").avg_cct_s, bin(s, "SN").p95_cct_s));
            assert!(close(bin(s, "LW").avg_cct_s, bin(s, "LW").p95_cct_s));
        }
        let factors = |s: &Summary| s.bins.iter().map(|b| b.factor_vs_baseline.unwrap()).collect::<Vec<_>>();
        let expect = |s: &Summary, e: [f64; 4]| {
            assert!(factors(s).iter().zip(e).all(|(a, e)| close(*a, e)), "{}: {:?}", s.policy, factors(s))
        };
        expect(&f, [1.0; 4]);
        expect(&v, [2.0, 1.0, 1.8125, 1.0]);
        expect(&o, [2.0 / 9.0, 9.0 / 8.0, 1.8125 / 261.0, 261.0 / 260.0]);

        // Without a baseline run, nothing that needs one is filled.
        let alone = Summary::of(&varys, None);
        assert_eq!(alone.slower_than_baseline_fraction, None);
        assert!(alone.bins.iter().all(|b| b.factor_vs_baseline.is_none()));
    }

    #[test]
    fn average_fct_weighs_every_flow_of_finished_coflows() {
        // Under varys every flow of a coflow ends with it (MADD): 1 + 9 + 64·1 + 52·261 seconds
        // over 118 flows.
        let v = Summary::of(&run("varys"), None);
        assert!(close(v.avg_fct_s, (1.0 + 9.0 + 64.0 + 52.0 * 261.0) / 118.0), "{}", v.avg_fct_s);
    }

    #[test]
    #[should_panic(expected = "different workloads")]
    fn runs_of_different_workloads_do_not_compare() {
        let mut other = run("fair");
        other.outcomes.pop();
        slower_fraction(&run("varys"), &other);
    }
}
