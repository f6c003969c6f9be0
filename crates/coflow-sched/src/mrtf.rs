//! `mrtf`: Minimum-Remaining-Time-First ordering on the links' expected bandwidth, preemptive
//! (the deterministic baseline of Siphon §5.3), and the allocation every wide-area order shares.
//!
//! A coflow's remaining time is its most loaded resource's remaining bytes over that resource's
//! expected capacity (the mean of its bandwidth distribution on a wide-area fabric). Coflows are
//! served in that order, re-sorted at every decision; within a coflow the [`Intra`] policy
//! decides: MADD and backfill as Varys does, or Largest Flow Group First.

use std::collections::BTreeMap;

use coflow_core::{CoflowId, Nanos};

use crate::fabric::ResourceId;
use crate::kernel::{FULL, backfill, madd};
use crate::scheduler::Scheduler;
use crate::state::{Allocation, CoflowState, Input, ServiceModel};

/// How bandwidth is shared inside a coflow, once the order of coflows is set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Intra {
    /// MADD (all flows finish together) then work-conserving backfill, coflow by coflow in
    /// order, as Varys allocates.
    Madd,
    /// Largest Flow Group First (Siphon §3.2): a coflow's flow groups (its flows to one receiver)
    /// are served largest (total size) first, preemptively, each by MADD over the group on what the
    /// groups and coflows before it left; then backfill in the same order.
    Lfgf,
}

/// After flows finish, decide again at most this often, so that backfill reuses their bandwidth
/// (as `VarysConfig::flow_finish_gap`).
pub(crate) const FLOW_FINISH_GAP: Nanos = Nanos::from_millis(100);

/// Minimum remaining time first on expected bandwidth.
#[derive(Debug)]
pub struct Mrtf {
    intra: Intra,
    order: Vec<usize>,
    key: Vec<f64>,
    scratch: Scratch,
}

impl Mrtf {
    /// MRTF with this intra-coflow policy.
    pub fn new(intra: Intra) -> Mrtf {
        Mrtf { intra, order: Vec::new(), key: Vec::new(), scratch: Scratch::default() }
    }
}

impl Default for Mrtf {
    fn default() -> Self {
        Mrtf::new(Intra::Madd)
    }
}

/// A coflow's remaining time: its most loaded resource's bytes over `capacity` of it.
pub(crate) fn remaining_time(input: &Input<'_>, c: &CoflowState, capacity: impl Fn(ResourceId) -> f64) -> f64 {
    input.remaining_loads(c).map(|(r, b)| b / capacity(r)).fold(0.0, f64::max)
}

/// Sorts `order` (indices into `input.coflows`) by `key`, ties by arrival, then id.
pub(crate) fn sort_by_key(input: &Input<'_>, key: &[f64], order: &mut Vec<usize>) {
    order.clear();
    order.extend(0..input.coflows.len());
    order.sort_by(|&a, &b| {
        let (ca, cb) = (&input.coflows[a], &input.coflows[b]);
        key[a].total_cmp(&key[b]).then(ca.arrival.cmp(&cb.arrival)).then(ca.id.cmp(&cb.id))
    });
}

impl Scheduler for Mrtf {
    fn name(&self) -> &'static str {
        match self.intra {
            Intra::Madd => "mrtf",
            Intra::Lfgf => "mrtf+lfgf",
        }
    }

    fn model(&self) -> ServiceModel {
        ServiceModel::Proportional
    }

    fn flow_finish_gap(&self) -> Option<Nanos> {
        Some(FLOW_FINISH_GAP)
    }

    fn poll_allocation(&mut self, input: &Input<'_>, out: &mut Allocation) -> Option<Nanos> {
        self.key.clear();
        self.key.extend(input.coflows.iter().map(|c| remaining_time(input, c, |r| input.fabric.expected_capacity(r))));
        sort_by_key(input, &self.key, &mut self.order);
        allocate(input, &self.order, self.intra, &mut self.scratch, out);
        None
    }
}

/// Per-decision buffers of [`allocate`].
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    loads: Vec<(ResourceId, f64)>,
    left: Vec<f64>,
    rate: Vec<f64>,
    /// LFGF: each active coflow's flow groups.
    plans: BTreeMap<CoflowId, Groups>,
}

/// Serves the coflows of `input` in `order` (indices into `input.coflows`) with `intra` inside
/// each, on the fabric's current capacities.
pub(crate) fn allocate(input: &Input<'_>, order: &[usize], intra: Intra, s: &mut Scratch, out: &mut Allocation) {
    let cap = input.fabric.capacities();
    s.left.clear();
    s.left.extend_from_slice(cap);
    match intra {
        Intra::Madd => {
            for &k in order {
                s.loads.clear();
                s.loads.extend(input.remaining_loads(&input.coflows[k]));
                out.coflow_rate[k] = madd(&s.loads, &mut s.left, cap);
            }
            for &k in order {
                backfill(input, k, None, &mut s.left, cap, out);
            }
        }
        Intra::Lfgf => lfgf(input, order, s, out),
    }
}

/// A coflow's flow groups, largest total first (ties: smaller receiver), each as its legs'
/// offsets in the coflow's legs. Fixed for the coflow's life: its legs are set at arrival and
/// groups are ranked by total size.
type Groups = Vec<Vec<u32>>;

/// The flow groups of `c`. Groups are ranked by their total size (the data their reducer will
/// process), finished flows included, not by what is left: a group half sent is no less work
/// to compute.
fn groups_of(input: &Input<'_>, c: &CoflowState) -> Groups {
    let mut by_receiver: BTreeMap<u32, (f64, Vec<u32>)> = BTreeMap::new();
    for (i, leg) in input.legs_of(c).iter().enumerate() {
        let g = by_receiver.entry(leg.receiver.0).or_default();
        g.0 += leg.bytes;
        g.1.push(i as u32);
    }
    let mut groups: Vec<(f64, u32, Vec<u32>)> = by_receiver.into_iter().map(|(r, (b, legs))| (b, r, legs)).collect();
    groups.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    groups.into_iter().map(|g| g.2).collect()
}

/// Largest Flow Group First inside each coflow, coflows in `order`.
fn lfgf(input: &Input<'_>, order: &[usize], s: &mut Scratch, out: &mut Allocation) {
    let cap = input.fabric.capacities();
    // Per leg: fraction of its remaining bytes per second, summed over both passes.
    s.rate.clear();
    s.rate.resize(input.legs.len(), 0.0);
    // Each coflow's groups, kept from earlier decisions; coflows gone are dropped.
    let mut old = std::mem::take(&mut s.plans);
    for &k in order {
        let c = &input.coflows[k];
        let groups = old.remove(&c.id).unwrap_or_else(|| groups_of(input, c));
        s.plans.insert(c.id, groups);
    }
    let Scratch { plans, left, rate, loads, .. } = s;
    // Pass 1: MADD per group, in order.
    for &k in order {
        let c = &input.coflows[k];
        let base = c.legs.start;
        for group in &plans[&c.id] {
            loads.clear();
            for &i in group {
                let leg = &input.legs[base + i as usize];
                if !leg.is_active() {
                    continue;
                }
                for &r in leg.route.hops() {
                    match loads.iter_mut().find(|(x, _)| *x == r) {
                        Some(e) => e.1 += leg.remaining(c),
                        None => loads.push((r, leg.remaining(c))),
                    }
                }
            }
            let sigma = if loads.is_empty() { 0.0 } else { madd(loads, left, cap) };
            for &i in group {
                let l = base + i as usize;
                if input.legs[l].is_active() {
                    rate[l] += sigma;
                }
            }
        }
    }
    // Pass 2: backfill leg by leg in the same order.
    for &k in order {
        let c = &input.coflows[k];
        let base = c.legs.start;
        for group in &plans[&c.id] {
            for &i in group {
                let l = base + i as usize;
                let leg = &input.legs[l];
                if !leg.is_active() {
                    continue;
                }
                let mut room = f64::INFINITY;
                for &r in leg.route.hops() {
                    let free = left[r as usize];
                    room = room.min(if free <= cap[r as usize] * FULL { 0.0 } else { free });
                }
                let remaining = leg.remaining(c);
                if room > 0.0 && room.is_finite() && remaining > 0.0 {
                    // Capped as every extra: a leg a hair from its finish gets no infinite rate.
                    rate[l] += Allocation::leg_fraction(room, remaining);
                    for &r in leg.route.hops() {
                        left[r as usize] = (left[r as usize] - room).max(0.0);
                    }
                }
            }
        }
    }
    for (l, &rate) in s.rate.iter().enumerate() {
        out.give_leg_fraction(l, rate);
    }
}

#[cfg(test)]
mod tests {
    use coflow_core::{MachineId, Rate};

    use super::*;
    use crate::fabric::Fabric;
    use crate::snapshot::{Snapshot, SnapshotCoflow, SnapshotFlow};
    use crate::state::MAX_LEG_EXTRA;

    #[test]
    fn lfgf_caps_the_extras_of_a_leg_a_hair_from_its_finish() {
        // One leg with a micro-byte left on an idle 1 GB/s port: its group's MADD alone would be
        // 1e15 of the leg per second, and backfill adds what else the port has.
        let fabric = Fabric::big_switch(2, Rate::from_bytes_per_sec(1e9));
        let c = SnapshotCoflow::plain(1, 2);
        let flows = [
            SnapshotFlow { src: MachineId(0), dst: MachineId(1), size: 100.0, remaining: 1e-6 },
            SnapshotFlow { src: MachineId(1), dst: MachineId(0), size: 100.0, remaining: 50.0 },
        ];
        let mut snap = Snapshot::default();
        snap.clear(ServiceModel::Proportional);
        snap.push_coflow(&fabric, &c, &flows);
        let input = snap.input(Nanos::ZERO, &fabric);
        let mut out = Allocation::default();
        out.reset(&input);
        Mrtf::new(Intra::Lfgf).poll_allocation(&input, &mut out);
        let extras = out.leg_extras();
        assert_eq!(extras.len(), 2, "{extras:?}");
        assert!(extras.iter().all(|&(_, k)| k > 0.0 && k <= MAX_LEG_EXTRA), "{extras:?}");
        assert!(extras.iter().any(|&(_, k)| k == MAX_LEG_EXTRA), "the nearly finished leg is capped: {extras:?}");
        // The other leg gets its port: 1 GB/s over 50 bytes.
        assert!(extras.iter().any(|&(_, k)| (k - 2e7).abs() < 1.0), "{extras:?}");
    }
}
