//! Deadline policies: `varys-deadline` (Varys §5.4, Pseudocode 2) and its reservation baseline
//! `vc` (the virtual-cluster abstraction of §7.3).
//!
//! Both admit a coflow on arrival only if it can meet its deadline without breaking a guarantee
//! already given, and reject it otherwise; rejected coflows are reported through
//! [`Scheduler::poll_rejected`], and one that the driver keeps is best effort from then on.
//! An admitted coflow is never preempted: at every decision it first gets the minimum rates that
//! finish it exactly at its deadline (MADD with `τ = D`: every flow sends `remaining / (D − now)`).
//! A live coflow that asks for more flows after its admission (a later get) is judged again, as a
//! whole, on what the other guarantees leave, and rejected if it no longer fits; one still
//! unfinished at its deadline missed it and is best effort from then on. In the simulator a
//! coflow arrives whole, and an admitted one misses its deadline only where its guarantee stopped
//! fitting (below).
//! Where the guarantees stop fitting after admission (a wide-area link's capacity fell, or a
//! coflow fell behind its guarantee), they are kept earliest deadline first as far as capacity
//! goes, and a coflow past that gets what is left and may miss its deadline: never more than a
//! resource carries.
//! - `varys-deadline` then backfills what is left, admitted coflows first, earliest deadline first
//!   (each first as a whole, in its current ratios, then flow by flow), then coflows without a
//!   deadline in SEBF order, so admitted coflows usually finish early.
//! - `vc` reserves, for the coflow's whole life, the same rate `B = max_p load_p / D` on every
//!   port it uses (a virtual non-blocking switch where all its machines talk at `B`), admits only if
//!   every such port still has `B` unreserved, and does not backfill: a reservation scheme.
//!
//! Coflows without a deadline are never rejected: they are best effort, SEBF with MADD and backfill
//! on what the guarantees leave. So is a coflow whose deadline falls in the clock's last second
//! or past it, which every schedule meets.

use std::collections::{BTreeMap, BTreeSet};

use coflow_core::{CoflowId, Nanos};

use crate::fabric::ResourceId;
use crate::kernel::{FULL, LiveLegs, backfill, bottleneck, madd};
use crate::scheduler::Scheduler;
use crate::state::{Allocation, Input, ServiceModel};

/// Which deadline policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeadlineMode {
    /// Varys §5.4: admission control on the minimum rates, MADD at the deadline, backfill.
    Varys,
    /// Virtual clusters: a uniform per-port reservation for the coflow's life, no backfill.
    VirtualCluster,
}

/// `varys-deadline` or `vc`.
#[derive(Debug)]
pub struct DeadlineScheduler {
    mode: DeadlineMode,
    /// Admitted coflows with their absolute deadlines (and, for `vc`, their per-port reservation).
    admitted: BTreeMap<CoflowId, Admitted>,
    /// Coflows already decided on (admitted, rejected, or without a deadline).
    seen: BTreeSet<CoflowId>,
    rejected: Vec<CoflowId>,
    /// Every coflow's unfinished legs, for backfill.
    live: LiveLegs,
}

#[derive(Clone, Copy, Debug)]
struct Admitted {
    deadline: Nanos,
    reservation: f64,
    /// The flows it had asked for when admitted ([`asked`]).
    asked: u32,
}

/// The flows coflow `c` has asked for so far: all of them in the simulator, where a coflow
/// arrives whole; in a live coflow, one more with each get (its declared flows not asked for yet,
/// `pending`, are not in its loads, so they were not in its admission).
fn asked(c: &crate::state::CoflowState) -> u32 {
    c.width.saturating_sub(c.pending)
}

impl DeadlineScheduler {
    /// A deadline scheduler of the given kind.
    pub fn new(mode: DeadlineMode) -> DeadlineScheduler {
        DeadlineScheduler {
            mode,
            admitted: BTreeMap::new(),
            seen: BTreeSet::new(),
            rejected: Vec::new(),
            live: LiveLegs::default(),
        }
    }
}

impl Scheduler for DeadlineScheduler {
    fn name(&self) -> &'static str {
        match self.mode {
            DeadlineMode::Varys => "varys-deadline",
            DeadlineMode::VirtualCluster => "vc",
        }
    }

    fn model(&self) -> ServiceModel {
        ServiceModel::Proportional
    }

    fn flow_finish_gap(&self) -> Option<Nanos> {
        Some(Nanos::from_millis(100))
    }

    fn admission_control(&self) -> bool {
        true
    }

    fn poll_rejected(&mut self, out: &mut Vec<CoflowId>) {
        // Still seen: a driver that keeps it has it judged no more, as best effort. One that
        // drops it leaves its id here, at most one per coflow of the workload.
        out.append(&mut self.rejected);
    }

    fn handle_finished(&mut self, _now: Nanos, coflow: CoflowId) {
        self.admitted.remove(&coflow);
        self.seen.remove(&coflow);
    }

    fn poll_allocation(&mut self, input: &Input<'_>, out: &mut Allocation) -> Option<Nanos> {
        let now = input.now;
        self.live.update(input);
        let cap = input.fabric.capacities();
        let mut left = cap.to_vec();
        let loads: Vec<Vec<(ResourceId, f64)>> =
            input.coflows.iter().map(|c| input.remaining_loads(c).collect()).collect();

        // 1. Guarantees first: every admitted coflow gets MADD at its deadline, but one that asked
        //    for more flows since it was admitted (a live coflow's later gets), which is judged
        //    again below with what it asks now, and one past its deadline, which missed it and is
        //    best effort from here (its guarantee would otherwise take what it likes, for ever).
        let mut admitted = Vec::new();
        let mut grown = BTreeSet::new();
        for (k, c) in input.coflows.iter().enumerate() {
            let Some(a) = self.admitted.get(&c.id) else { continue };
            if asked(c) > a.asked {
                self.admitted.remove(&c.id);
                grown.insert(k);
            } else if a.deadline <= now {
                self.admitted.remove(&c.id);
            } else {
                admitted.push(k);
            }
        }
        admitted.sort_by_key(|&k| {
            (self.admitted[&input.coflows[k].id].deadline, input.coflows[k].arrival, input.coflows[k].id)
        });
        for &k in &admitted {
            let a = self.admitted[&input.coflows[k].id];
            out.coflow_rate[k] = guarantee(&loads[k], a, now, &mut left, self.mode, cap);
        }

        // 2. Admission control for coflows seen for the first time and those that grew, in
        //    arrival order: a coflow is admitted only if it meets its deadline on what the
        //    guarantees given leave, so that growing cannot break another's guarantee.
        for (k, c) in input.coflows.iter().enumerate() {
            if !self.seen.insert(c.id) && !grown.contains(&k) {
                continue;
            }
            let Some(d) = c.deadline else { continue };
            let deadline = c.arrival.saturating_add(d);
            if deadline >= LATEST_DEADLINE {
                // Met by every schedule: best effort, as a coflow without a deadline.
                continue;
            }
            let time_left = deadline.saturating_sub(now).as_secs_f64();
            let fits = match self.mode {
                DeadlineMode::Varys => time_left > 0.0 && min_time(&loads[k], &left, cap) <= time_left,
                DeadlineMode::VirtualCluster => {
                    let b = loads[k].iter().map(|&(_, x)| x).fold(0.0, f64::max) / time_left.max(f64::MIN_POSITIVE);
                    time_left > 0.0 && loads[k].iter().all(|&(r, _)| left[r as usize] >= b * (1.0 - 1e-12))
                }
            };
            if fits {
                let reservation = loads[k].iter().map(|&(_, x)| x).fold(0.0, f64::max) / time_left;
                let a = Admitted { deadline, reservation, asked: asked(c) };
                self.admitted.insert(c.id, a);
                out.coflow_rate[k] = guarantee(&loads[k], a, now, &mut left, self.mode, cap);
                admitted.push(k);
            } else {
                self.rejected.push(c.id);
            }
        }

        // 3. Coflows without a deadline are best effort: SEBF with MADD and backfill on what the
        //    guarantees leave. Varys also backfills admitted coflows first, by deadline; virtual
        //    clusters keep to their reservations.
        {
            let rejected: BTreeSet<CoflowId> = self.rejected.iter().copied().collect();
            let best_effort: Vec<usize> = (0..input.coflows.len())
                .filter(|&k| {
                    let id = input.coflows[k].id;
                    !self.admitted.contains_key(&id) && !rejected.contains(&id)
                })
                .collect();
            // SEBF: Γ of each once, then the order (ties by id).
            let mut keyed: Vec<(f64, CoflowId, usize)> =
                best_effort.iter().map(|&k| (bottleneck(&loads[k], cap), input.coflows[k].id, k)).collect();
            keyed.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            let best_effort: Vec<usize> = keyed.into_iter().map(|(_, _, k)| k).collect();
            for &k in &best_effort {
                out.coflow_rate[k] = madd(&loads[k], &mut left, cap);
            }
            if self.mode == DeadlineMode::Varys {
                // Earliest deadline first, including the coflows admitted just now.
                admitted.sort_by_key(|&k| {
                    (self.admitted[&input.coflows[k].id].deadline, input.coflows[k].arrival, input.coflows[k].id)
                });
                // Speed each admitted coflow up as a whole first (MADD on what is left, in its
                // current ratios), so that its legs still finish together, then leg by leg.
                for &k in &admitted {
                    out.coflow_rate[k] += madd(&loads[k], &mut left, cap);
                }
                for &k in &admitted {
                    backfill(input, k, Some(&mut self.live), &mut left, cap, out);
                }
            }
            for &k in &best_effort {
                backfill(input, k, Some(&mut self.live), &mut left, cap, out);
            }
        }
        None
    }
}

/// The time a coflow needs on the bandwidth `left` (Eq. 1 on what is left), infinite when one
/// of its ports has nothing left.
fn min_time(loads: &[(ResourceId, f64)], left: &[f64], cap: &[f64]) -> f64 {
    let mut t: f64 = 0.0;
    for &(r, b) in loads {
        let l = left[r as usize];
        if l <= cap[r as usize] * FULL {
            return f64::INFINITY;
        }
        t = t.max(b / l);
    }
    t
}

/// Gives an admitted coflow its guaranteed rates and takes them out of `left`; returns its `σ`.
fn guarantee(
    loads: &[(ResourceId, f64)],
    a: Admitted,
    now: Nanos,
    left: &mut [f64],
    mode: DeadlineMode,
    cap: &[f64],
) -> f64 {
    let time_left = a.deadline.saturating_sub(now).as_secs_f64();
    if time_left <= 0.0 {
        // Not reached: a coflow past its deadline is best effort, not guaranteed.
        debug_assert!(false, "a guarantee past its deadline");
        return madd(loads, left, cap);
    }
    let used = |b: f64, sigma: f64| match mode {
        DeadlineMode::Varys => b * sigma,
        DeadlineMode::VirtualCluster => a.reservation.max(b * sigma),
    };
    let mut sigma = 1.0 / time_left;
    // Admission makes the guarantees fit together on the capacities of the time. They may stop
    // fitting later: where a capacity falls (a wide-area link), and where a coflow fell behind
    // its guarantee (cut after such a fall, or held below it by per-connection caps), so that
    // `remaining / (D − now)` grew. Then the coflows are guaranteed earliest deadline first (the
    // caller's order) as far as what is left goes, and one that no longer fits gets the largest
    // rate that does, and may miss its deadline. On capacities that never change and without
    // per-connection caps, the guarantees always fit but for rounding, far below the slack.
    if loads.iter().any(|&(r, b)| used(b, sigma) > left[r as usize] + cap[r as usize] * SHORTFALL) {
        sigma = loads.iter().map(|&(r, b)| left[r as usize] / b).fold(sigma, f64::min);
    }
    for &(r, b) in loads {
        left[r as usize] = (left[r as usize] - used(b, sigma)).max(0.0);
    }
    sigma
}

/// The latest deadline a coflow is admitted with, one second before the end of the clock: rates
/// paced to end later could, in 64-bit floating point (which resolves 2 µs there), end past the
/// clock's last nanosecond, and the coflow would never finish. A deadline that late is met by
/// every schedule, so its coflow is served as best effort, neither admitted nor rejected.
const LATEST_DEADLINE: Nanos = Nanos(u64::MAX - 1_000_000_000);

/// The share of a resource's capacity by which the guarantees may exceed what is left before a
/// guarantee is cut to fit: a billion times the rounding of the rates, a thousandth of the
/// driver's check that nothing is allocated over capacity.
const SHORTFALL: f64 = 1e-9;

#[cfg(test)]
mod tests {
    use coflow_core::{MachineId, Rate};

    use super::*;
    use crate::fabric::{BigSwitch, Fabric};
    use crate::snapshot::{Snapshot, SnapshotCoflow, SnapshotFlow};

    /// Each flow's rate in bytes per second when `policy` decides at `now` on `fabric`, for
    /// coflows of one flow each: `(id, src, dst, bytes, deadline in seconds)`, arrived at zero.
    fn decide(
        policy: &mut DeadlineScheduler,
        fabric: &Fabric,
        now: Nanos,
        coflows: &[(u64, u32, u32, f64, u64)],
    ) -> Vec<f64> {
        let (rates, rejected) = decide_rejecting(policy, fabric, now, coflows);
        assert!(rejected.is_empty(), "{}: rejected {rejected:?}", policy.name());
        rates
    }

    /// [`decide`], with the coflows the decision rejected.
    fn decide_rejecting(
        policy: &mut DeadlineScheduler,
        fabric: &Fabric,
        now: Nanos,
        coflows: &[(u64, u32, u32, f64, u64)],
    ) -> (Vec<f64>, Vec<CoflowId>) {
        let mut snapshot = Snapshot::default();
        snapshot.clear(ServiceModel::Proportional);
        for &(id, src, dst, bytes, deadline) in coflows {
            let coflow = SnapshotCoflow {
                id: CoflowId(id),
                job: CoflowId(id),
                arrival: Nanos::ZERO,
                deadline: Some(Nanos::from_secs(deadline)),
                weight: 1.0,
                width: 1,
                pending: 0,
            };
            let flow = SnapshotFlow { src: MachineId(src), dst: MachineId(dst), size: bytes, remaining: bytes };
            snapshot.push_coflow(fabric, &coflow, &[flow]);
        }
        let input = snapshot.input(now, fabric);
        let mut out = Allocation::default();
        out.reset(&input);
        policy.poll_allocation(&input, &mut out);
        let mut rejected = Vec::new();
        policy.poll_rejected(&mut rejected);
        let mut rates = Vec::new();
        snapshot.flow_rates(&out, &mut rates);
        (rates, rejected)
    }

    /// A rejected coflow that the driver keeps (as the coordinator does) is served from the next
    /// decision as best effort, on what the guarantees leave, never at their expense.
    #[test]
    fn a_rejected_coflow_kept_is_served_as_best_effort_below_the_guarantees() {
        for mode in [DeadlineMode::Varys, DeadlineMode::VirtualCluster] {
            let mut policy = DeadlineScheduler::new(mode);
            let fabric = Fabric::new(BigSwitch::new(4, Rate::from_bytes_per_sec(100.0)));
            // A needs 100 B in 2 s into machine 2 (50 B/s): admitted. B needs 1,000 B in 1 s into
            // machine 2, past its port's 100 B/s: rejected, and given nothing in that decision.
            let coflows = [(1, 0, 2, 100.0, 2), (2, 1, 2, 1_000.0, 1)];
            let (rates, rejected) = decide_rejecting(&mut policy, &fabric, Nanos::ZERO, &coflows);
            assert_eq!(rejected, [CoflowId(2)], "{mode:?}");
            assert_eq!(rates[1], 0.0, "{mode:?}: {rates:?}");
            // Kept: A keeps its 50 B/s and B gets the 50 B/s it leaves, rejected no more.
            let (rates, rejected) = decide_rejecting(&mut policy, &fabric, Nanos::ZERO, &coflows);
            assert!(rejected.is_empty(), "{mode:?}: {rejected:?}");
            assert!((rates[0] - 50.0).abs() < 1e-9, "{mode:?}: A at {rates:?}");
            assert!((rates[1] - 50.0).abs() < 1e-9, "{mode:?}: B at {rates:?}");
        }
    }

    /// A coflow still unfinished at its deadline (live: it grew, or its receiver read slowly)
    /// missed it and is best effort from then on, in SEBF order: its guarantee, paced for a
    /// deadline gone, would otherwise put it before everyone for as long as it has bytes left.
    #[test]
    fn an_admitted_coflow_past_its_deadline_is_best_effort() {
        for mode in [DeadlineMode::Varys, DeadlineMode::VirtualCluster] {
            let mut policy = DeadlineScheduler::new(mode);
            let fabric = Fabric::new(BigSwitch::new(4, Rate::from_bytes_per_sec(100.0)));
            // A: 100 B into machine 2 within 2 s, admitted at 50 B/s. B: 10 B into machine 2 with
            // a deadline at the end of the clock, best effort.
            let coflows = [(1, 0, 2, 100.0, 2), (2, 1, 2, 10.0, 18_446_744_073)];
            let rates = decide(&mut policy, &fabric, Nanos::ZERO, &coflows);
            assert!((rates[0] - 50.0).abs() < 1e-9, "{mode:?}: A at {rates:?}");
            // At 3 s A is still there: best effort, after B, the smaller.
            let rates = decide(&mut policy, &fabric, Nanos::from_secs(3), &coflows);
            assert_eq!(rates, [0.0, 100.0], "{mode:?}");
        }
    }

    #[test]
    fn guarantees_that_no_longer_fit_a_fallen_capacity_go_earliest_deadline_first() {
        for mode in [DeadlineMode::Varys, DeadlineMode::VirtualCluster] {
            let mut policy = DeadlineScheduler::new(mode);
            let switch = BigSwitch::new(4, Rate::from_bytes_per_sec(100.0));
            let into_2 = switch.egress(MachineId(2));
            let mut fabric = Fabric::new(switch);
            // A needs 100 B in 2 s (50 B/s), B 80 B in 4 s (20 B/s), both into machine 2: both fit
            // its 100 B/s and are admitted.
            let coflows = [(1, 0, 2, 100.0, 2), (2, 1, 2, 80.0, 4)];
            let rates = decide(&mut policy, &fabric, Nanos::ZERO, &coflows);
            assert!(rates.iter().sum::<f64>() <= 100.0 * (1.0 + 1e-12), "{mode:?}: {rates:?}");
            // Machine 2's port falls to 60 B/s: A, the earlier deadline, keeps its 50 B/s, and B
            // gets the 10 B/s left instead of its 20.
            fabric.set_capacity(into_2, 60.0);
            let rates = decide(&mut policy, &fabric, Nanos::ZERO, &coflows);
            assert!((rates[0] - 50.0).abs() < 1e-9, "{mode:?}: A at {rates:?}");
            assert!((rates[1] - 10.0).abs() < 1e-9, "{mode:?}: B at {rates:?}");
            // Down to 40 B/s: A gets what is left, all of it, and B nothing.
            fabric.set_capacity(into_2, 40.0);
            let rates = decide(&mut policy, &fabric, Nanos::ZERO, &coflows);
            assert!((rates[0] - 40.0).abs() < 1e-9, "{mode:?}: A at {rates:?}");
            assert_eq!(rates[1], 0.0, "{mode:?}: B at {rates:?}");
        }
    }
}
