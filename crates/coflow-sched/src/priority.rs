//! Per-flow prioritization: `pfp` (pFabric/PDQ: smallest remaining flow first) and `edf`
//! (earliest deadline first, the flows of a coflow carrying its deadline).
//!
//! Both are preemptive and work-conserving: flows in priority order each get as much as every
//! port on their route still has, so a flow either fills a port or is blocked by one. They decide
//! again whenever a flow finishes or arrives.
//!
//! When every port has the same capacity, as in the simulator, a served flow takes both its ports
//! whole, so the allocation is a matching of flows to ports, and with a strict priority order the
//! greedy matching is the unique *stable* one: no unserved flow has each of its ports free or held
//! by a flow of lower priority. A flow's priority only changes while it is served, which does not
//! change who is served, so the matching is kept across decisions and repaired only around the
//! ports that changed (a flow finished or arrived): evicting a lower-priority holder frees its
//! other port, which is repaired in turn. A decision costs the repair, not a pass over every flow.
//! With unequal capacities the policy falls back to the full greedy pass.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{BuildHasherDefault, Hasher};

use coflow_core::{CoflowId, Nanos};

use crate::fabric::ResourceId;
use crate::kernel::FULL;
use crate::scheduler::Scheduler;
use crate::state::{Allocation, CoflowState, Input, ServiceModel};

/// What orders flows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlowOrder {
    /// Smallest remaining flow first (`pfp`).
    SmallestRemaining,
    /// Earliest deadline first, then smallest remaining (`edf`); flows without a deadline last.
    EarliestDeadline,
}

/// A leg's stable name: its coflow (by arrival and id, the order of `Input::coflows`) and its
/// offset among the coflow's legs.
type LegId = (Nanos, CoflowId, u32);

/// A leg's priority, smaller first, then its name.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Key {
    first: f64,
    second: f64,
    id: LegId,
}

impl Eq for Key {}

impl Ord for Key {
    fn cmp(&self, other: &Self) -> Ordering {
        self.first.total_cmp(&other.first).then(self.second.total_cmp(&other.second)).then(self.id.cmp(&other.id))
    }
}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

#[derive(Clone, Copy, Debug)]
struct Leg {
    /// Its priority when last computed: current while it is not served.
    key: Key,
    hops: [ResourceId; 2],
    served: bool,
}

/// `pfp` or `edf`.
#[derive(Debug)]
pub struct FlowPriority {
    order: FlowOrder,
    /// Every unfinished leg of every coflow seen (hashed: looked up at every repair step, never
    /// iterated in an order that reaches an output), and those being served.
    legs: HashMap<LegId, Leg, BuildHasherDefault<RouteHasher>>,
    served: BTreeSet<LegId>,
    /// Always take the full greedy pass (to check the repaired matching against it).
    full_greedy: bool,
    /// Whether `waiting` and `owner` hold the matching; false after a greedy pass.
    matching: bool,
    /// Coflows whose legs are known, with their arrival (the first part of their legs' names).
    seen: BTreeMap<CoflowId, Nanos>,
    /// Whether every resource has the same capacity, as of the last capacity change.
    uniform: bool,
    /// Unserved legs by route (their two ports) and priority; per port, the routes through it
    /// that have waiting legs, ordered by each one's best waiting key; per port, the served leg
    /// holding it.
    waiting: HashMap<[ResourceId; 2], BTreeSet<Key>, BuildHasherDefault<RouteHasher>>,
    /// (Sorted vectors rather than trees: a port has a route per other port at most, and a repair
    /// scans them in order, which a vector does without chasing pointers.)
    routes_at: Vec<Vec<(Key, [ResourceId; 2])>>,
    owner: Vec<Option<LegId>>,
    /// Current keys of holders, memoized for one decision (`decision` counts decisions).
    holder_key: Vec<(u64, Option<Key>)>,
    decision: u64,
    /// Ports whose holder or waiting legs changed and that must be repaired, each once.
    dirty: Vec<ResourceId>,
    is_dirty: Vec<bool>,
    left: Vec<f64>,
}

impl FlowPriority {
    /// A per-flow priority scheduler.
    pub fn new(order: FlowOrder) -> FlowPriority {
        FlowPriority {
            order,
            legs: HashMap::default(),
            served: BTreeSet::new(),
            full_greedy: false,
            matching: true,
            seen: BTreeMap::new(),
            uniform: true,
            waiting: HashMap::default(),
            routes_at: Vec::new(),
            owner: Vec::new(),
            holder_key: Vec::new(),
            decision: 0,
            dirty: Vec::new(),
            is_dirty: Vec::new(),
            left: Vec::new(),
        }
    }

    /// The same policy, always deciding by the full greedy pass.
    pub fn full_greedy(order: FlowOrder) -> FlowPriority {
        FlowPriority { full_greedy: true, ..FlowPriority::new(order) }
    }

    fn key(&self, c: &CoflowState, offset: u32, input: &Input<'_>) -> Key {
        key_of(self.order, c, offset, input)
    }

    /// The current key of a leg (its stored one is stale while it is served).
    fn current_key(&self, id: LegId, input: &Input<'_>) -> Option<Key> {
        current_key_of(self.order, id, input)
    }

    fn wait(&mut self, id: LegId) {
        let leg = self.legs[&id];
        let set = self.waiting.entry(leg.hops).or_default();
        let before = set.first().copied();
        set.insert(leg.key);
        let after = set.first().copied();
        self.rebest(leg.hops, before, after);
    }

    fn unwait(&mut self, id: LegId) {
        let leg = self.legs[&id];
        let Some(set) = self.waiting.get_mut(&leg.hops) else { return };
        let before = set.first().copied();
        set.remove(&leg.key);
        let after = set.first().copied();
        if after.is_none() {
            self.waiting.remove(&leg.hops);
        }
        self.rebest(leg.hops, before, after);
    }

    /// Keeps each port's routes ordered by their best waiting key.
    fn rebest(&mut self, hops: [ResourceId; 2], before: Option<Key>, after: Option<Key>) {
        if before == after {
            return;
        }
        for r in hops {
            let at = &mut self.routes_at[r as usize];
            if let Some(b) = before
                && let Ok(i) = at.binary_search(&(b, hops))
            {
                at.remove(i);
            }
            if let Some(a) = after
                && let Err(i) = at.binary_search(&(a, hops))
            {
                at.insert(i, (a, hops));
            }
        }
    }

    fn mark_dirty(&mut self, r: ResourceId) {
        if !self.is_dirty[r as usize] {
            self.is_dirty[r as usize] = true;
            self.dirty.push(r);
        }
    }

    /// Frees the ports of a leg that stops being served (finished or evicted).
    fn release(&mut self, id: LegId) {
        let hops = self.legs[&id].hops;
        for r in hops {
            if self.owner[r as usize] == Some(id) {
                self.owner[r as usize] = None;
                self.mark_dirty(r);
            }
        }
    }

    /// Repairs the matching until every dirty port is stable.
    fn repair(&mut self, input: &Input<'_>) {
        while let Some(p) = self.dirty.pop() {
            self.is_dirty[p as usize] = false;
            // The best waiting leg through p that may take both its ports: it is the best of its
            // route, so the routes through p are scanned best first, up to p's holder.
            let (order, decision) = (self.order, self.decision);
            let holder_p = holder_of(order, &self.owner, &mut self.holder_key, decision, input, p);
            let mut chosen: Option<Key> = None;
            for &(best, hops) in &self.routes_at[p as usize] {
                if holder_p.is_some_and(|h| h < best) {
                    break;
                }
                let q = if hops[0] == p { hops[1] } else { hops[0] };
                if holder_of(order, &self.owner, &mut self.holder_key, decision, input, q).is_none_or(|h| h > best) {
                    chosen = Some(best);
                    break;
                }
            }
            let Some(key) = chosen else { continue };
            let id = key.id;
            let hops = self.legs[&id].hops;
            for r in hops {
                if let Some(evicted) = self.owner[r as usize] {
                    self.release(evicted);
                    self.served.remove(&evicted);
                    if let Some(key) = self.current_key(evicted, input) {
                        let leg = self.legs.get_mut(&evicted).expect("held legs are known");
                        leg.served = false;
                        leg.key = key;
                        self.wait(evicted);
                    }
                }
            }
            self.unwait(id);
            self.legs.get_mut(&id).expect("waiting legs are known").served = true;
            self.served.insert(id);
            for r in hops {
                self.owner[r as usize] = Some(id);
            }
        }
    }

    /// The full greedy pass, for fabrics whose ports differ in capacity.
    fn greedy(&mut self, input: &Input<'_>, out: &mut Allocation) {
        let cap = input.fabric.capacities();
        self.left.clear();
        self.left.extend_from_slice(cap);
        let mut order: Vec<Key> = self.legs.keys().filter_map(|&id| self.current_key(id, input)).collect();
        order.sort();
        for key in order {
            let Some(k) = find(input, key.id) else { continue };
            let c = &input.coflows[k];
            let l = c.legs.start + key.id.2 as usize;
            let leg = &input.legs[l];
            let room = leg
                .route
                .hops()
                .iter()
                .map(|&r| if self.left[r as usize] <= cap[r as usize] * FULL { 0.0 } else { self.left[r as usize] })
                .fold(f64::INFINITY, f64::min);
            if room > 0.0 && room.is_finite() {
                out.give_leg(l, room, leg.remaining(c));
                for &r in leg.route.hops() {
                    self.left[r as usize] = (self.left[r as usize] - room).max(0.0);
                }
                self.served.insert(key.id);
            }
        }
    }

    /// A served leg finished (or its coflow left): it frees its ports and is forgotten.
    fn finish_leg(&mut self, id: LegId) {
        if self.matching {
            self.release(id);
        }
        self.served.remove(&id);
        self.legs.remove(&id);
    }

    /// The legs of a coflow seen for the first time wait at their ports.
    fn admit(&mut self, c: &CoflowState, input: &Input<'_>) {
        if self.seen.insert(c.id, c.arrival).is_some() {
            return;
        }
        for (offset, leg) in input.legs_of(c).iter().enumerate() {
            let hops = leg.route.hops();
            if !leg.is_active() || hops.len() != 2 {
                continue;
            }
            let key = self.key(c, offset as u32, input);
            self.legs.insert(key.id, Leg { key, hops: [hops[0], hops[1]], served: false });
            if self.matching {
                self.wait(key.id);
                self.mark_dirty(hops[0]);
                self.mark_dirty(hops[1]);
            }
        }
    }

    /// Rebuilds the matching from scratch: every leg waits, every port is dirty.
    fn rebuild(&mut self, input: &Input<'_>) {
        self.waiting.clear();
        for r in &mut self.routes_at {
            r.clear();
        }
        self.owner.iter_mut().for_each(|o| *o = None);
        self.served.clear();
        let ids: Vec<LegId> = self.legs.keys().copied().collect();
        for id in ids {
            if let Some(key) = self.current_key(id, input) {
                let leg = self.legs.get_mut(&id).expect("known");
                leg.key = key;
                leg.served = false;
                self.wait(id);
            }
        }
        for r in 0..self.owner.len() as ResourceId {
            self.mark_dirty(r);
        }
        self.matching = true;
    }
}

/// A fast hasher for route keys (two small integers) and leg names. Only lookups go through it,
/// never the order of anything that reaches an output, so it keeps runs deterministic.
#[derive(Debug, Default)]
struct RouteHasher(u64);

impl Hasher for RouteHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }

    fn write_u32(&mut self, x: u32) {
        self.write_u64(x as u64);
    }

    fn write_u64(&mut self, x: u64) {
        self.0 = (self.0.rotate_left(5) ^ x).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn write_usize(&mut self, x: usize) {
        self.write_u64(x as u64);
    }
}

/// A leg's priority under `order`.
fn key_of(order: FlowOrder, c: &CoflowState, offset: u32, input: &Input<'_>) -> Key {
    let leg = &input.legs[c.legs.start + offset as usize];
    // Flows are whole bytes: comparing to the byte keeps float noise from breaking ties,
    // which go to the earlier coflow.
    let per_flow = (leg.remaining(c) / leg.flows as f64).round();
    let (first, second) = match order {
        FlowOrder::SmallestRemaining => (per_flow, 0.0),
        FlowOrder::EarliestDeadline => {
            let deadline = c.deadline.map_or(f64::INFINITY, |d| c.arrival.saturating_add(d).as_secs_f64());
            (deadline, per_flow)
        }
    };
    Key { first, second, id: (c.arrival, c.id, offset) }
}

/// The current key of a leg, if its coflow is still active.
fn current_key_of(order: FlowOrder, id: LegId, input: &Input<'_>) -> Option<Key> {
    let k = find(input, id)?;
    Some(key_of(order, &input.coflows[k], id.2, input))
}

/// The current key of the leg holding port `r`, memoized for decision `decision`.
fn holder_of(
    order: FlowOrder,
    owner: &[Option<LegId>],
    memo: &mut [(u64, Option<Key>)],
    decision: u64,
    input: &Input<'_>,
    r: ResourceId,
) -> Option<Key> {
    let id = owner[r as usize]?;
    let (when, key) = memo[r as usize];
    if when == decision && key.is_some_and(|k| k.id == id) {
        return key;
    }
    let key = current_key_of(order, id, input);
    memo[r as usize] = (decision, key);
    key
}

/// The index in `input.coflows` of the coflow a leg belongs to, if it is still active.
fn find(input: &Input<'_>, id: LegId) -> Option<usize> {
    input.coflows.binary_search_by(|c| (c.arrival, c.id).cmp(&(id.0, id.1))).ok()
}

impl Scheduler for FlowPriority {
    fn name(&self) -> &'static str {
        match self.order {
            FlowOrder::SmallestRemaining => "pfp",
            FlowOrder::EarliestDeadline => "edf",
        }
    }

    fn model(&self) -> ServiceModel {
        ServiceModel::Proportional
    }

    fn flow_finish_gap(&self) -> Option<Nanos> {
        Some(Nanos::ZERO)
    }

    fn poll_allocation(&mut self, input: &Input<'_>, out: &mut Allocation) -> Option<Nanos> {
        let resources = input.fabric.resources();
        self.routes_at.resize_with(resources, Vec::new);
        self.owner.resize(resources, None);
        self.holder_key.resize(resources, (0, None));
        self.is_dirty.resize(resources, false);
        self.decision += 1;

        let changes = input.changes;
        if changes.everything {
            // Served legs that finished free their ports.
            let served: Vec<LegId> = self.served.iter().copied().collect();
            for id in served {
                let active = find(input, id).is_some_and(|k| {
                    let c = &input.coflows[k];
                    input.legs[c.legs.start + id.2 as usize].is_active()
                });
                if !active {
                    self.finish_leg(id);
                }
            }
            // Legs of coflows seen for the first time wait at their ports.
            for c in input.coflows {
                self.admit(c, input);
            }
            // Coflows that left are forgotten.
            if self.seen.len() > input.coflows.len() {
                self.seen.retain(|&id, &mut arrival| find(input, (arrival, id, 0)).is_some());
            }
        } else {
            // Only served legs move, so only they finish; a finished coflow's legs are listed.
            for &(coflow, offset) in &changes.legs_finished {
                if let Some(&arrival) = self.seen.get(&coflow) {
                    let id = (arrival, coflow, offset);
                    if self.served.contains(&id) {
                        self.finish_leg(id);
                    }
                }
            }
            for c in &changes.finished {
                self.seen.remove(c);
            }
            // Arrivals are the latest coflows, at the end of the input, unless they left again.
            let mut new = changes.arrived.len();
            for &c in &changes.finished {
                new -= changes.arrived.contains(&c) as usize;
            }
            for c in input.coflows.iter().rev() {
                if new == 0 {
                    break;
                }
                if changes.arrived.contains(&c.id) {
                    new -= 1;
                    self.admit(c, input);
                }
            }
        }

        let cap = input.fabric.capacities();
        if changes.everything || changes.capacities {
            self.uniform = cap.windows(2).all(|w| w[0] == w[1]);
        }
        let uniform = self.uniform;
        if self.full_greedy || !uniform {
            self.matching = false;
            for r in self.dirty.drain(..) {
                self.is_dirty[r as usize] = false;
            }
            self.served.clear();
            self.greedy(input, out);
            return None;
        }
        if !self.matching {
            self.rebuild(input);
        }
        self.repair(input);
        for &id in &self.served {
            let Some(k) = find(input, id) else { continue };
            let c = &input.coflows[k];
            let l = c.legs.start + id.2 as usize;
            let leg = &input.legs[l];
            let rate = leg.route.hops().iter().map(|&r| cap[r as usize]).fold(f64::INFINITY, f64::min);
            out.give_leg(l, rate, leg.remaining(c));
        }
        None
    }
}
