//! Lower bounds on the average coflow completion time that no policy can beat.
//!
//! Three bounds, each valid for any rate allocation that respects the fabric's capacities (not
//! only for orderings), and each computed from the workload as released (so `--offline` runs get
//! the bounds of the offline problem):
//! - **isolation**: every coflow takes at least its Γ, the time its most loaded resource needs
//!   on the empty fabric (Varys Eq. 1);
//! - **per-port**: one resource serves the coflows that use it one unit of work at a time. The
//!   least total completion time it can give them is that of shortest-remaining-processing-time
//!   first (SRPT, exact for one machine with release times and preemption; SPT when all arrive at
//!   once). The coflows it does not serve still take their Γ. The best resource is taken.
//! - **LP**: the linear relaxation of the ordering problem over all resources at once, in
//!   completion-time variables `C_j ≥ r_j + Γ_j` with, for every resource `i` and every set `S`
//!   of the coflows using it, the parallel inequality (Queyranne; with release times, its
//!   shifted form): `Σ_{j∈S} p_ij C_j ≥ min_{j∈S} r_j · p_i(S) + ½ (p_i(S)² + Σ_{j∈S} p_ij²)`.
//!   There are exponentially many of them, so the LP is solved by cutting planes: the most
//!   violated inequality of a resource, for a shift `ρ` (the smallest release allowed in `S`), is
//!   over a prefix of its coflows released from `ρ` on, sorted by current `C`.
//!   Every intermediate LP is itself a relaxation, so the bound holds even when the number of
//!   rounds runs out before no inequality is violated (the report says whether it converged).

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use coflow_core::Workload;
use coflow_sched::{Fabric, ResourceId};
use microlp::{ComparisonOp, OptimizationDirection, Problem, Variable};
use serde::Serialize;

/// Limits on the LP bound's work. They are counts, never wall time, so that reports stay
/// byte-identical from one machine to another.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BoundConfig {
    /// Above this many coflows that cross the fabric, the LP is not attempted.
    pub lp_max_coflows: usize,
    /// Rounds of cut separation at most.
    pub lp_max_rounds: usize,
    /// Cuts added per round at most (the most violated, at most one per resource).
    pub lp_cuts_per_round: usize,
}

impl Default for BoundConfig {
    fn default() -> BoundConfig {
        BoundConfig { lp_max_coflows: 1_000, lp_max_rounds: 60, lp_cuts_per_round: 40 }
    }
}

/// The lower bounds of one workload on one fabric, as averages over all its coflows, in seconds.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LowerBounds {
    /// The average Γ.
    pub isolation_avg_cct_s: f64,
    /// The per-port bound of the best resource (the isolation bound when the workload has
    /// dependencies: see [`DEPENDENCIES_SKIP`]).
    pub per_port_avg_cct_s: f64,
    /// That resource's name (e.g. `out12`), if any resource carries traffic.
    pub per_port_resource: Option<String>,
    /// The LP relaxation's bound, if it was solved.
    pub lp_avg_cct_s: Option<f64>,
    /// How the LP went: solved (rounds, cuts, converged or not), skipped and why, or failed.
    pub lp_status: String,
    /// The largest of the bounds.
    pub best_avg_cct_s: f64,
}

/// One coflow's work per resource, in seconds at the resource's capacity.
#[derive(Clone, Debug)]
struct Job {
    arrival_s: f64,
    gamma_s: f64,
}

/// The workload as the bounds see it: per coflow its release and Γ; per resource the coflows that
/// use it and their work there.
#[derive(Debug)]
struct Instance {
    jobs: Vec<Job>,
    /// Per resource, `(job, seconds of work)` in job order.
    ports: Vec<Vec<(usize, f64)>>,
}

impl Instance {
    fn of(workload: &Workload, fabric: &Fabric) -> Instance {
        let mut ports: Vec<Vec<(usize, f64)>> = vec![Vec::new(); fabric.resources()];
        let mut jobs = Vec::with_capacity(workload.coflows.len());
        let mut load = vec![0u64; fabric.resources()];
        let mut touched: Vec<ResourceId> = Vec::new();
        for (j, c) in workload.coflows.iter().enumerate() {
            for f in c.flows.iter().filter(|f| f.crosses_fabric()) {
                for &r in fabric.route(f.src, f.dst).hops() {
                    if load[r as usize] == 0 {
                        touched.push(r);
                    }
                    load[r as usize] += f.size.get();
                }
            }
            touched.sort_unstable();
            let mut gamma_s = 0.0f64;
            for &r in &touched {
                let p = load[r as usize] as f64 / fabric.capacity(r);
                gamma_s = gamma_s.max(p);
                ports[r as usize].push((j, p));
                load[r as usize] = 0;
            }
            touched.clear();
            jobs.push(Job { arrival_s: c.arrival.as_secs_f64(), gamma_s });
        }
        Instance { jobs, ports }
    }
}

/// How [`LowerBounds::lp_status`] starts when the workload has dependencies: then only the
/// isolation bound holds, and the per-port one is reported equal to it.
pub const DEPENDENCIES_SKIP: &str = "skipped: coflows wait for their parents";

/// Computes the three bounds of `workload` on `fabric`.
pub fn lower_bounds(workload: &Workload, fabric: &Fabric, cfg: &BoundConfig) -> LowerBounds {
    let inst = Instance::of(workload, fabric);
    let n = inst.jobs.len().max(1) as f64;
    // Plus zero: the sum of no floats is -0, which an empty workload's report would print.
    let total_gamma: f64 = inst.jobs.iter().map(|j| j.gamma_s).sum::<f64>() + 0.0;

    // Per port: the SRPT total over the port's coflows replaces their Γs where it is larger.
    let mut best_gain = 0.0f64;
    let mut best_port = None;
    for (r, users) in inst.ports.iter().enumerate() {
        if users.is_empty() {
            continue;
        }
        let mut work: Vec<(f64, f64)> = users.iter().map(|&(j, p)| (inst.jobs[j].arrival_s, p)).collect();
        let srpt = srpt_total_flow_time(&mut work);
        let gammas: f64 = users.iter().map(|&(j, _)| inst.jobs[j].gamma_s).sum();
        let gain = (srpt - gammas).max(0.0);
        if best_port.is_none() || gain > best_gain {
            best_gain = gain;
            best_port = Some(r as ResourceId);
        }
    }

    let isolation = total_gamma / n;
    let per_port = (total_gamma + best_gain) / n;
    let crossing = inst.jobs.iter().filter(|j| j.gamma_s > 0.0).count();
    if workload.has_dependencies() {
        // A coflow with parents is released when they finish, which the policy decides, and its
        // CCT counts from then: bounds built on arrivals as releases do not hold, only Γ does.
        return LowerBounds {
            isolation_avg_cct_s: isolation,
            per_port_avg_cct_s: isolation,
            per_port_resource: None,
            lp_avg_cct_s: None,
            lp_status: format!("{DEPENDENCIES_SKIP}, so only the isolation bound holds"),
            best_avg_cct_s: isolation,
        };
    }
    let (lp, lp_status) = if crossing == 0 {
        (Some(0.0), "solved: no coflow crosses the fabric".to_string())
    } else if crossing > cfg.lp_max_coflows {
        (None, format!("skipped: {crossing} coflows cross the fabric, more than the limit of {}", cfg.lp_max_coflows))
    } else {
        match lp_bound(&inst, cfg) {
            Ok(s) => {
                let state = if s.converged { "converged" } else { "stopped at the round limit (still a bound)" };
                (Some(s.total_flow_time_s / n), format!("solved: {} rounds, {} cuts, {state}", s.rounds, s.cuts))
            }
            Err(e) => (None, format!("failed: {e}")),
        }
    };
    let best = [Some(isolation), Some(per_port), lp].into_iter().flatten().fold(0.0, f64::max);
    LowerBounds {
        isolation_avg_cct_s: isolation,
        per_port_avg_cct_s: per_port,
        per_port_resource: best_port.map(|r| fabric.resource_name(r)),
        lp_avg_cct_s: lp,
        lp_status,
        best_avg_cct_s: best,
    }
}

/// A job waiting on the port: its remaining work, then its release and index for ties.
#[derive(Debug, PartialEq)]
struct Waiting {
    remaining: f64,
    arrival: f64,
    index: usize,
}

impl Eq for Waiting {}

impl Ord for Waiting {
    /// Reversed, so that the max-heap pops the least remaining work (then the earliest index).
    fn cmp(&self, other: &Self) -> Ordering {
        other.remaining.total_cmp(&self.remaining).then(other.index.cmp(&self.index))
    }
}

impl PartialOrd for Waiting {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// The least total flow time `Σ (C_j − r_j)` one unit-rate machine can give jobs
/// `(release, work)` with preemption: SRPT's. Sorts `jobs` by release.
fn srpt_total_flow_time(jobs: &mut [(f64, f64)]) -> f64 {
    jobs.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut heap = BinaryHeap::new();
    let (mut t, mut next, mut total) = (0.0f64, 0usize, 0.0f64);
    while next < jobs.len() || !heap.is_empty() {
        if heap.is_empty() {
            t = t.max(jobs[next].0);
        }
        while next < jobs.len() && jobs[next].0 <= t {
            heap.push(Waiting { remaining: jobs[next].1, arrival: jobs[next].0, index: next });
            next += 1;
        }
        let Some(mut w) = heap.pop() else { continue };
        let until = jobs.get(next).map_or(f64::INFINITY, |j| j.0);
        if t + w.remaining <= until {
            t += w.remaining;
            total += t - w.arrival;
        } else {
            w.remaining -= until - t;
            t = until;
            heap.push(w);
        }
    }
    total
}

/// What the cutting-plane loop reached.
#[derive(Debug)]
struct LpSolution {
    total_flow_time_s: f64,
    rounds: usize,
    cuts: usize,
    converged: bool,
}

/// An inequality to add: its relative violation, its terms and its right-hand side.
type Cut = (f64, Vec<(Variable, f64)>, f64);

/// A cut's coefficient below this share of its resource's largest work is left out: the
/// inequality over the smaller set is as valid, and the LP stays well conditioned.
const SMALL_WORK: f64 = 1e-5;

/// A cut must be violated by this share of its right-hand side to be added: smaller ones move the
/// bound by less than they cost. The LP over the cuts added is a bound whatever the threshold.
const MIN_VIOLATION: f64 = 1e-4;

/// Release times tried as the shift ρ of one resource's inequalities, at most (evenly spread
/// over its coflows' releases when there are more).
const MAX_SHIFTS: usize = 128;

/// Solves the LP relaxation by cutting planes; see the module docs.
fn lp_bound(inst: &Instance, cfg: &BoundConfig) -> Result<LpSolution, microlp::Error> {
    // Times in units of the mean Γ of the coflows that cross the fabric, for conditioning.
    let crossing: Vec<usize> = (0..inst.jobs.len()).filter(|&j| inst.jobs[j].gamma_s > 0.0).collect();
    let unit = crossing.iter().map(|&j| inst.jobs[j].gamma_s).sum::<f64>() / crossing.len() as f64;
    let origin = crossing.iter().map(|&j| inst.jobs[j].arrival_s).fold(f64::INFINITY, f64::min);
    let release = |j: usize| (inst.jobs[j].arrival_s - origin) / unit;

    let mut problem = Problem::new(OptimizationDirection::Minimize);
    let mut var: Vec<Option<Variable>> = vec![None; inst.jobs.len()];
    for &j in &crossing {
        var[j] = Some(problem.add_var(1.0, (release(j) + inst.jobs[j].gamma_s / unit, f64::INFINITY)));
    }
    // Per resource, its coflows with non-negligible work, in units.
    let ports: Vec<Vec<(usize, f64)>> = inst
        .ports
        .iter()
        .map(|users| {
            let max = users.iter().map(|u| u.1).fold(0.0, f64::max);
            users.iter().filter(|u| u.1 >= SMALL_WORK * max).map(|&(j, p)| (j, p / unit)).collect()
        })
        .filter(|users: &Vec<(usize, f64)>| users.len() > 1)
        .collect();

    let mut solution =
        problem.solve()?.into_solution().map_err(|_| microlp::Error::InternalError("interrupted".into()))?;
    let (mut rounds, mut cuts, mut converged) = (0, 0, false);
    let mut order: Vec<(usize, f64)> = Vec::new();
    let mut shifts: Vec<f64> = Vec::new();
    while rounds < cfg.lp_max_rounds {
        rounds += 1;
        let value = |j: usize| solution.var_value(var[j].expect("a crossing coflow has a variable"));
        // The most violated prefix inequality of each resource, by relative violation.
        let mut found: Vec<Cut> = Vec::new();
        for users in &ports {
            order.clear();
            order.extend(users.iter().copied());
            order.sort_by(|a, b| value(a.0).total_cmp(&value(b.0)).then(a.0.cmp(&b.0)));
            // For a set whose releases are all at least ρ, the inequality holds shifted by ρ; for
            // one ρ, the most violated set is a prefix in `C` order of the coflows released by
            // then. ρ runs over the releases on this resource (at most `MAX_SHIFTS` of them).
            shifts.clear();
            shifts.extend(order.iter().map(|&(j, _)| release(j)));
            shifts.sort_by(f64::total_cmp);
            shifts.dedup();
            if shifts.len() > MAX_SHIFTS {
                let all = std::mem::take(&mut shifts);
                shifts.extend((0..MAX_SHIFTS).map(|i| all[i * all.len() / MAX_SHIFTS]));
            }
            let mut best: Option<(f64, f64, usize, f64)> = None;
            for &rho in &shifts {
                let (mut p_sum, mut p_sq, mut lhs) = (0.0f64, 0.0f64, 0.0f64);
                for (k, &(j, p)) in order.iter().enumerate() {
                    if release(j) < rho {
                        continue;
                    }
                    p_sum += p;
                    p_sq += p * p;
                    lhs += p * value(j);
                    let rhs = rho * p_sum + 0.5 * (p_sum * p_sum + p_sq);
                    let violation = (rhs - lhs) / rhs.max(1e-12);
                    if violation > MIN_VIOLATION && best.is_none_or(|b| violation > b.0) {
                        best = Some((violation, rho, k, rhs));
                    }
                }
            }
            if let Some((violation, rho, k, rhs)) = best {
                let expr = order[..=k]
                    .iter()
                    .filter(|&&(j, _)| release(j) >= rho)
                    .map(|&(j, p)| (var[j].expect("a crossing coflow has a variable"), p))
                    .collect();
                found.push((violation, expr, rhs));
            }
        }
        if found.is_empty() {
            converged = true;
            break;
        }
        found.sort_by(|a, b| b.0.total_cmp(&a.0));
        for (_, expr, rhs) in found.into_iter().take(cfg.lp_cuts_per_round) {
            solution = solution
                .add_constraint(expr.as_slice(), ComparisonOp::Ge, rhs)?
                .into_solution()
                .map_err(|_| microlp::Error::InternalError("interrupted".into()))?;
            cuts += 1;
        }
    }
    // The objective is Σ C_j in units from `origin`; the bound is on Σ (C_j − r_j) in seconds.
    let releases: f64 = crossing.iter().map(|&j| release(j)).sum();
    Ok(LpSolution { total_flow_time_s: (solution.objective() - releases) * unit, rounds, cuts, converged })
}

#[cfg(test)]
mod tests {
    use coflow_core::{Bytes, Coflow, CoflowId, Flow, MIB, MachineId, Nanos, Rate};

    use super::*;

    fn coflow(id: u64, at_s: u64, flows: &[(u32, u32, u64)]) -> Coflow {
        let flows =
            flows.iter().map(|&(s, d, mib)| Flow { src: MachineId(s), dst: MachineId(d), size: Bytes(mib * MIB) });
        Coflow::new(CoflowId(id), Nanos::from_secs(at_s), flows.collect())
    }

    fn bounds(machines: u32, coflows: Vec<Coflow>) -> LowerBounds {
        let w = Workload::new(machines, coflows).unwrap();
        lower_bounds(&w, &Fabric::big_switch(machines, Rate::from_bytes_per_sec(MIB as f64)), &BoundConfig::default())
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-6 * b.abs().max(1.0)
    }

    #[test]
    fn srpt_on_one_machine_matches_the_hand_schedule() {
        // Jobs (release, work): (0, 4), (1, 1), (2, 2). SRPT runs 0 until 1, then job 1 (done at
        // 2, flow time 1), then job 2 (2 left < 3 left: done at 4, flow time 2), then job 0 (done
        // at 7, flow time 7).
        let mut jobs = [(0.0, 4.0), (1.0, 1.0), (2.0, 2.0)];
        assert!(close(srpt_total_flow_time(&mut jobs), 10.0));
        // All at once: SPT, 1 + 3 + 7 = 11.
        let mut jobs = [(0.0, 4.0), (0.0, 1.0), (0.0, 2.0)];
        assert!(close(srpt_total_flow_time(&mut jobs), 11.0));
        // Gaps: the machine idles until the next release.
        let mut jobs = [(5.0, 1.0), (0.0, 1.0)];
        assert!(close(srpt_total_flow_time(&mut jobs), 2.0));
    }

    #[test]
    fn an_empty_workload_has_bounds_of_zero_not_minus_zero() {
        let b = bounds(0, vec![]);
        for v in [b.isolation_avg_cct_s, b.per_port_avg_cct_s, b.best_avg_cct_s] {
            assert_eq!(v.to_bits(), 0.0f64.to_bits(), "{b:?}");
        }
    }

    #[test]
    fn three_coflows_on_one_port_get_the_spt_bound() {
        // 1, 2 and 3 MiB from machine 0 at 1 MiB/s, all at 0: Γs 1, 2, 3 (isolation 2), SPT
        // completions 1, 3, 6 (per-port 10/3). One resource is exactly one machine, so the LP
        // (whose parallel inequalities describe that machine's schedules) meets the per-port bound.
        let b = bounds(4, vec![coflow(1, 0, &[(0, 1, 1)]), coflow(2, 0, &[(0, 2, 2)]), coflow(3, 0, &[(0, 3, 3)])]);
        assert!(close(b.isolation_avg_cct_s, 2.0), "{b:?}");
        assert!(close(b.per_port_avg_cct_s, 10.0 / 3.0), "{b:?}");
        assert_eq!(b.per_port_resource.as_deref(), Some("in0"));
        assert!(close(b.lp_avg_cct_s.unwrap(), 10.0 / 3.0), "{b:?}");
        assert!(close(b.best_avg_cct_s, 10.0 / 3.0));
        assert!(b.lp_status.contains("converged"), "{}", b.lp_status);
    }

    #[test]
    fn ports_combine_in_the_lp_but_not_in_the_per_port_bound() {
        // Coflows 1 and 2 both need 2 s on in0; 2 and 3 both need 2 s on in1 (1 uses only in0, 3
        // only in1). Per port: one of them waits 2 s, so 2+4 on the port and 2 for the third
        // coflow: 8/3. The optimum is 8/3 as well (2 first: 2, 4, 4 would be 10; 1 and 3 first: 2,
        // 2, 4). The LP is at least the per-port bound's 8/3 and at most the optimum.
        let b = bounds(
            4,
            vec![coflow(1, 0, &[(0, 2, 2)]), coflow(2, 0, &[(0, 3, 2), (1, 2, 2)]), coflow(3, 0, &[(1, 3, 2)])],
        );
        assert!(close(b.isolation_avg_cct_s, 2.0));
        assert!(close(b.per_port_avg_cct_s, 8.0 / 3.0), "{b:?}");
        let lp = b.lp_avg_cct_s.unwrap();
        assert!((2.0 - 1e-9..=8.0 / 3.0 + 1e-9).contains(&lp), "{b:?}");
    }

    #[test]
    fn release_times_count_from_each_coflows_arrival() {
        // A 4 MiB coflow at 0 and a 1 MiB one at 1 s on one port: SRPT serves the small one at 1
        // (done at 2, CCT 1), the big one at 5 (CCT 5): per-port (1 + 5)/2 = 3.
        let b = bounds(2, vec![coflow(1, 0, &[(0, 1, 4)]), coflow(2, 1, &[(0, 1, 1)])]);
        assert!(close(b.isolation_avg_cct_s, 2.5));
        assert!(close(b.per_port_avg_cct_s, 3.0), "{b:?}");
        let lp = b.lp_avg_cct_s.unwrap();
        assert!((2.5 - 1e-9..=3.0 + 1e-9).contains(&lp), "{b:?}");
    }

    #[test]
    fn too_many_coflows_skip_the_lp_and_say_so() {
        let w = Workload::new(2, (0..5).map(|i| coflow(i, 0, &[(0, 1, 1)])).collect()).unwrap();
        let cfg = BoundConfig { lp_max_coflows: 3, ..BoundConfig::default() };
        let b = lower_bounds(&w, &Fabric::big_switch(2, Rate::from_bytes_per_sec(MIB as f64)), &cfg);
        assert_eq!(b.lp_avg_cct_s, None);
        assert!(b.lp_status.starts_with("skipped: 5 coflows"), "{}", b.lp_status);
        assert!(close(b.best_avg_cct_s, 3.0), "{b:?}");
    }
}
