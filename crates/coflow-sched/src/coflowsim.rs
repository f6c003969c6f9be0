//! The reference simulator's policies (CoflowSim, the simulator the coflow papers' trace results
//! come from) where they differ from ours, each under its own internal name:
//!
//! - [`PortFair`] (`coflowsim-fair`, its FAIR): every flow gets `min(C / flows at its sender
//!   port, C / flows at its receiver port)`, per-port equal shares, not max-min: what one flow
//!   cannot use at one port is not passed on to the others there.
//! - [`ReceiverScan`] (`coflowsim-pfp`, its PFP): each receiver port keeps its flows sorted by
//!   size when they arrived, ascending; at every decision the receiver ports are scanned in index
//!   order and each sends, at line rate, its first flow whose sender port is still free.
//! - [`Dark`] (`coflowsim-dark`, its DARK, Aalo's D-CLAS as it simulated it): 10 queues on bytes
//!   sent (10 MiB, ×10), first come first served inside a queue, strict priority across queues,
//!   and inside a coflow each flow gets `min(sender free / its flows there, receiver free / its
//!   flows there)`; queues move only at arrivals and departures, a coflow one queue at a time,
//!   each time to the back.
//! - [`FlowFinishGap`]: any policy, deciding after finished flows at most once per quantum.
//! - `PortShares`: its per-port equal shares of what is left, as DARK gives them inside a
//!   coflow and its coflow-level policies to the coflows whose MADD it skipped.
//! - `JavaRandom`: `java.util.Random`, from which it draws its deadline multipliers.
//!
//! Its coflow-level policies (FIFO, SCF, NCF, LCF, SEBF) are [`Varys`](crate::Varys) with
//! [`VarysConfig::static_keys`](crate::VarysConfig::static_keys),
//! [`VarysConfig::loaded_ports_block`](crate::VarysConfig::loaded_ports_block),
//! [`VarysConfig::blocked_share`](crate::VarysConfig::blocked_share),
//! [`VarysConfig::lcf_insertion`](crate::VarysConfig::lcf_insertion),
//! [`VarysConfig::deadline_jitter`](crate::VarysConfig::deadline_jitter) and no flow-finish
//! decisions.

use std::collections::{BTreeMap, BTreeSet};

use coflow_core::{CoflowId, Nanos};

use crate::fabric::ResourceId;
use crate::kernel::FULL;
use crate::scheduler::Scheduler;
use crate::state::{Allocation, Input, ServiceModel};

/// The reference's FAIR: per-port equal shares over every active flow.
#[derive(Debug)]
pub struct PortFair {
    gap: Nanos,
    flows_at: Vec<f64>,
}

impl PortFair {
    /// Per-port equal shares, decided again at most once per `gap` after flows finish.
    pub fn new(gap: Nanos) -> PortFair {
        PortFair { gap, flows_at: Vec::new() }
    }
}

impl Scheduler for PortFair {
    fn name(&self) -> &'static str {
        "coflowsim-fair"
    }

    fn model(&self) -> ServiceModel {
        ServiceModel::Route
    }

    fn flow_finish_gap(&self) -> Option<Nanos> {
        Some(self.gap)
    }

    fn poll_allocation(&mut self, input: &Input<'_>, out: &mut Allocation) -> Option<Nanos> {
        let cap = input.fabric.capacities();
        self.flows_at.clear();
        self.flows_at.resize(cap.len(), 0.0);
        for rt in input.routes {
            for &r in rt.route.hops() {
                self.flows_at[r as usize] += rt.flows as f64;
            }
        }
        for (i, rt) in input.routes.iter().enumerate() {
            out.route_rate[i] = rt
                .route
                .hops()
                .iter()
                .map(|&r| cap[r as usize] / self.flows_at[r as usize])
                .fold(f64::INFINITY, f64::min);
            if !out.route_rate[i].is_finite() {
                out.route_rate[i] = 0.0;
            }
        }
        None
    }
}

/// A leg's stable name: its coflow (by arrival and id, the order of `Input::coflows`) and its
/// offset among the coflow's legs.
type LegId = (Nanos, CoflowId, u32);

/// A leg waiting at a receiver port: its size per flow when it arrived, its name and its sender
/// port.
type Entry = (u64, LegId, ResourceId);

/// The index in `input.coflows` of the coflow a leg belongs to, if it is still active.
fn find(input: &Input<'_>, id: LegId) -> Option<usize> {
    input.coflows.binary_search_by(|c| (c.arrival, c.id).cmp(&(id.0, id.1))).ok()
}

/// The reference's PFP: a receiver-driven scan in port order.
#[derive(Debug)]
pub struct ReceiverScan {
    gap: Nanos,
    /// Per receiver port, its waiting and served legs by size per flow when they arrived, then
    /// arrival; with each one's sender port.
    at: BTreeMap<ResourceId, BTreeSet<Entry>>,
    /// Each coflow's legs, as entries of `at`.
    of: BTreeMap<CoflowId, Vec<(ResourceId, Entry)>>,
    /// Legs served by the last decision, with their receiver port and entry.
    served: Vec<(ResourceId, Entry)>,
    busy: Vec<bool>,
}

impl ReceiverScan {
    /// The receiver scan, decided again at most once per `gap` after flows finish.
    pub fn new(gap: Nanos) -> ReceiverScan {
        ReceiverScan { gap, at: BTreeMap::new(), of: BTreeMap::new(), served: Vec::new(), busy: Vec::new() }
    }

    fn remove(&mut self, receiver: ResourceId, entry: &Entry) {
        if let Some(set) = self.at.get_mut(&receiver) {
            set.remove(entry);
            if set.is_empty() {
                self.at.remove(&receiver);
            }
        }
    }
}

impl Scheduler for ReceiverScan {
    fn name(&self) -> &'static str {
        "coflowsim-pfp"
    }

    fn model(&self) -> ServiceModel {
        ServiceModel::Proportional
    }

    fn flow_finish_gap(&self) -> Option<Nanos> {
        Some(self.gap)
    }

    fn handle_finished(&mut self, _now: Nanos, coflow: CoflowId) {
        for (receiver, entry) in self.of.remove(&coflow).unwrap_or_default() {
            self.remove(receiver, &entry);
        }
    }

    fn poll_allocation(&mut self, input: &Input<'_>, out: &mut Allocation) -> Option<Nanos> {
        // Only served legs move, so only they can have finished.
        for (receiver, entry) in std::mem::take(&mut self.served) {
            let id = entry.1;
            let done = find(input, id).is_none_or(|k| {
                let c = &input.coflows[k];
                !input.legs[c.legs.start + id.2 as usize].is_active()
            });
            if done {
                self.remove(receiver, &entry);
            }
        }
        for c in input.coflows {
            if self.of.contains_key(&c.id) {
                continue;
            }
            let mut mine = Vec::new();
            for (offset, leg) in input.legs_of(c).iter().enumerate() {
                let hops = leg.route.hops();
                if !leg.is_active() || hops.len() != 2 {
                    continue;
                }
                // Flows are whole bytes: the size to the byte, so float noise cannot reorder.
                let size = (leg.bytes / leg.flows as f64).round() as u64;
                let entry = (size, (c.arrival, c.id, offset as u32), hops[0]);
                self.at.entry(hops[1]).or_default().insert(entry);
                mine.push((hops[1], entry));
            }
            self.of.insert(c.id, mine);
        }

        let cap = input.fabric.capacities();
        self.busy.clear();
        self.busy.resize(cap.len(), false);
        for (&receiver, set) in &self.at {
            if cap[receiver as usize] <= 0.0 {
                continue;
            }
            let Some(&entry) = set.iter().find(|e| !self.busy[e.2 as usize] && cap[e.2 as usize] > 0.0) else {
                continue;
            };
            self.busy[entry.2 as usize] = true;
            self.served.push((receiver, entry));
            let id = entry.1;
            let Some(k) = find(input, id) else { continue };
            let c = &input.coflows[k];
            let l = c.legs.start + id.2 as usize;
            let rate = cap[entry.2 as usize].min(cap[receiver as usize]);
            out.give_leg(l, rate, input.legs[l].remaining(c));
        }
        None
    }
}

/// DARK's number of queues.
pub(crate) const DARK_QUEUES: usize = 10;
/// DARK's first queue limit: 10 MiB sent.
pub(crate) const DARK_FIRST_LIMIT: f64 = 10.0 * 1_048_576.0;
/// DARK's queue limit multiplier.
pub(crate) const DARK_MULTIPLIER: f64 = 10.0;

/// The reference's DARK.
#[derive(Debug, Default)]
pub struct Dark {
    /// Each queue's coflows, first come first served (a demoted coflow goes to the back).
    queues: [Vec<CoflowId>; DARK_QUEUES],
    queue_of: BTreeMap<CoflowId, usize>,
    free: Vec<f64>,
    /// One coflow's legs, as `(coflow, leg)`, for [`PortShares::give`].
    legs: Vec<(usize, usize)>,
    shares: PortShares,
}

impl Dark {
    /// The queue a coflow that has sent `sent` bytes belongs in.
    pub fn queue_for(sent: f64) -> usize {
        let mut q = 0;
        let mut limit = DARK_FIRST_LIMIT;
        while limit < sent && q + 1 < DARK_QUEUES {
            q += 1;
            limit *= DARK_MULTIPLIER;
        }
        q
    }
}

impl Scheduler for Dark {
    fn name(&self) -> &'static str {
        "coflowsim-dark"
    }

    fn model(&self) -> ServiceModel {
        ServiceModel::Proportional
    }

    fn handle_finished(&mut self, _now: Nanos, coflow: CoflowId) {
        if let Some(q) = self.queue_of.remove(&coflow) {
            self.queues[q].retain(|&c| c != coflow);
        }
    }

    fn poll_allocation(&mut self, input: &Input<'_>, out: &mut Allocation) -> Option<Nanos> {
        let index: BTreeMap<CoflowId, usize> = input.coflows.iter().enumerate().map(|(k, c)| (c.id, k)).collect();
        for c in input.coflows {
            if let std::collections::btree_map::Entry::Vacant(e) = self.queue_of.entry(c.id) {
                e.insert(0);
                self.queues[0].push(c.id);
            }
        }
        // Demotion: each pass over the queues moves a coflow down one queue, to the back.
        for q in 0..DARK_QUEUES - 1 {
            let (stay, go): (Vec<CoflowId>, Vec<CoflowId>) = self.queues[q].iter().partition(|id| {
                index.get(id).is_none_or(|&k| {
                    let c = &input.coflows[k];
                    let sent: f64 = input.legs_of(c).iter().map(|l| l.bytes - l.remaining(c)).sum();
                    Dark::queue_for(sent) <= q
                })
            });
            for &id in &go {
                self.queue_of.insert(id, q + 1);
            }
            self.queues[q] = stay;
            self.queues[q + 1].extend(go);
        }

        let cap = input.fabric.capacities();
        self.free.clear();
        self.free.extend_from_slice(cap);
        for queue in &self.queues {
            for id in queue {
                let Some(&k) = index.get(id) else { continue };
                let c = &input.coflows[k];
                self.legs.clear();
                self.legs.extend(c.legs.clone().map(|l| (k, l)));
                self.shares.give(input, &self.legs, &mut self.free, cap, out, None);
            }
        }
        None
    }
}

/// The reference's per-port equal shares of what is left (its `updateRatesFairShare`, which
/// DARK runs on one coflow at a time, and its coflow-level policies on all the coflows whose
/// MADD it skipped, together): every flow whose resources all have room gets the least, over its
/// resources, of what the resource has left divided by the flows counted there, and the sum is
/// then taken out of what is left. These are equal shares per port, not max-min: what a flow
/// cannot use at one resource is not passed on to the others there.
#[derive(Debug, Default)]
pub(crate) struct PortShares {
    flows_at: Vec<f64>,
    used: Vec<f64>,
}

impl PortShares {
    /// Gives the active ones of `legs` (`(coflow, leg)` as indices into the input) their shares
    /// of `left` through [`Allocation::give_leg`] and takes them out of `left`; marks in `served`
    /// the coflows it gave to, and says whether it gave any. Each leg must be listed once.
    pub(crate) fn give(
        &mut self,
        input: &Input<'_>,
        legs: &[(usize, usize)],
        left: &mut [f64],
        cap: &[f64],
        out: &mut Allocation,
        mut served: Option<&mut [bool]>,
    ) -> bool {
        self.flows_at.resize(cap.len(), 0.0);
        self.used.resize(cap.len(), 0.0);
        let counted = |left: &[f64], l: usize| {
            let leg = &input.legs[l];
            leg.is_active() && leg.route.hops().iter().all(|&r| left[r as usize] > cap[r as usize] * FULL)
        };
        for &(_, l) in legs {
            if counted(left, l) {
                for &r in input.legs[l].route.hops() {
                    self.flows_at[r as usize] += input.legs[l].flows as f64;
                }
            }
        }
        let mut any = false;
        for &(k, l) in legs {
            let leg = &input.legs[l];
            let hops = leg.route.hops();
            if hops.is_empty() || !counted(left, l) {
                continue;
            }
            // Read from `left` as it was before the pass: `used` is taken out after it.
            let per_flow =
                hops.iter().map(|&r| left[r as usize] / self.flows_at[r as usize]).fold(f64::INFINITY, f64::min);
            let rate = per_flow * leg.flows as f64;
            if rate > 0.0 {
                out.give_leg(l, rate, leg.remaining(&input.coflows[k]));
                for &r in hops {
                    self.used[r as usize] += rate;
                }
                if let Some(served) = served.as_deref_mut() {
                    served[k] = true;
                }
                any = true;
            }
        }
        for &(_, l) in legs {
            for &r in input.legs[l].route.hops() {
                let r = r as usize;
                left[r] = (left[r] - self.used[r]).max(0.0);
                self.used[r] = 0.0;
                self.flows_at[r] = 0.0;
            }
        }
        any
    }
}

/// `java.util.Random`, the 48-bit linear congruential generator the reference draws its
/// deadline multipliers from, to the bit: the seed scrambled with `0x5DEECE66D`, and a double
/// made of 26 and 27 bits of two steps.
#[derive(Clone, Debug)]
pub(crate) struct JavaRandom {
    seed: u64,
}

const JAVA_MULTIPLIER: u64 = 0x5_DEEC_E66D;
const JAVA_ADDEND: u64 = 0xB;
const JAVA_MASK: u64 = (1 << 48) - 1;

impl JavaRandom {
    /// `new Random(seed)`.
    pub(crate) fn new(seed: u64) -> JavaRandom {
        JavaRandom { seed: (seed ^ JAVA_MULTIPLIER) & JAVA_MASK }
    }

    /// `next(bits)`: the top `bits` of the next 48-bit state.
    fn next(&mut self, bits: u32) -> u64 {
        self.seed = self.seed.wrapping_mul(JAVA_MULTIPLIER).wrapping_add(JAVA_ADDEND) & JAVA_MASK;
        self.seed >> (48 - bits)
    }

    /// `nextDouble()`: uniform in `[0, 1)` on a grid of `2^-53`.
    pub(crate) fn next_double(&mut self) -> f64 {
        let hi = self.next(26);
        let lo = self.next(27);
        ((hi << 27) + lo) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// Any policy, but after finished flows deciding again at most once per `gap` (the reference's
/// quantum): a finished flow's bandwidth waits for the next quantum.
#[derive(Debug)]
pub struct FlowFinishGap {
    inner: Box<dyn Scheduler>,
    gap: Nanos,
}

impl FlowFinishGap {
    /// Wraps `inner`; a policy that never decides after finished flows keeps not doing so.
    pub fn new(inner: Box<dyn Scheduler>, gap: Nanos) -> FlowFinishGap {
        FlowFinishGap { inner, gap }
    }
}

impl Scheduler for FlowFinishGap {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn model(&self) -> ServiceModel {
        self.inner.model()
    }

    fn flow_finish_gap(&self) -> Option<Nanos> {
        self.inner.flow_finish_gap().map(|g| g.max(self.gap))
    }

    fn admission_control(&self) -> bool {
        self.inner.admission_control()
    }

    fn reads_min_remaining(&self) -> bool {
        self.inner.reads_min_remaining()
    }

    fn reads_reshaped_legs(&self) -> bool {
        self.inner.reads_reshaped_legs()
    }

    fn reads_loads(&self) -> bool {
        self.inner.reads_loads()
    }

    fn poll_rejected(&mut self, out: &mut Vec<CoflowId>) {
        self.inner.poll_rejected(out)
    }

    fn handle_arrival(&mut self, now: Nanos, coflow: CoflowId) {
        self.inner.handle_arrival(now, coflow)
    }

    fn handle_finished(&mut self, now: Nanos, coflow: CoflowId) {
        self.inner.handle_finished(now, coflow)
    }

    fn handle_job_ended(&mut self, job: CoflowId) {
        self.inner.handle_job_ended(job)
    }

    fn poll_allocation(&mut self, input: &Input<'_>, out: &mut Allocation) -> Option<Nanos> {
        self.inner.poll_allocation(input, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference's first deadline multipliers, `1 + new Random(17).nextDouble()`, as Java
    /// prints the draws.
    #[test]
    fn java_random_draws_what_java_draws() {
        let mut g = JavaRandom::new(17);
        let draws: Vec<f64> = (0..3).map(|_| g.next_double()).collect();
        assert_eq!(draws, [0.7323115139597316, 0.6973704783607497, 0.08295611145017068]);
        let mut g = JavaRandom::new(0);
        assert_eq!(g.next_double(), 0.730967787376657);
    }
}
