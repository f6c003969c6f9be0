//! Per-flow prioritization: `pfp` (pFabric/PDQ: smallest remaining flow first) and `edf`
//! (earliest deadline first, the flows of a coflow carrying its deadline).
//!
//! Both are preemptive and work-conserving: at every decision, flows in priority order each get
//! as much as every port on their route still has, so a flow either fills a port or is blocked by
//! one. They decide again whenever a flow finishes.
//!
//! The priority of a flow that is not being served does not change, so the policy keeps every
//! flow in a sorted set across decisions and re-keys only the flows it served last time: a decision
//! costs the flows it scans, not a sort of all of them.

use std::cmp::Ordering;
use std::collections::BTreeSet;

use coflow_core::{CoflowId, Nanos};

use crate::scheduler::Scheduler;
use crate::state::{Allocation, CoflowState, Input, ServiceModel};
use crate::varys::FULL;

/// What orders flows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlowOrder {
    /// Smallest remaining flow first (`pfp`).
    SmallestRemaining,
    /// Earliest deadline first, then smallest remaining (`edf`); flows without a deadline last.
    EarliestDeadline,
}

/// `pfp` or `edf`.
#[derive(Debug)]
pub struct FlowPriority {
    order: FlowOrder,
    /// Every unfinished leg of every coflow seen, by priority.
    queue: BTreeSet<Key>,
    /// Coflows whose legs are in the queue.
    seen: BTreeSet<CoflowId>,
    /// The keys of the legs served by the previous decision, whose priority may have changed.
    served: Vec<Key>,
    left: Vec<f64>,
}

/// A leg's priority and its stable name: the coflow and the leg's offset in it.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Key {
    first: f64,
    second: f64,
    arrival: Nanos,
    coflow: CoflowId,
    offset: u32,
}

impl Eq for Key {}

impl Ord for Key {
    fn cmp(&self, other: &Self) -> Ordering {
        self.first
            .total_cmp(&other.first)
            .then(self.second.total_cmp(&other.second))
            .then(self.arrival.cmp(&other.arrival))
            .then(self.coflow.cmp(&other.coflow))
            .then(self.offset.cmp(&other.offset))
    }
}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl FlowPriority {
    /// A per-flow priority scheduler.
    pub fn new(order: FlowOrder) -> FlowPriority {
        FlowPriority { order, queue: BTreeSet::new(), seen: BTreeSet::new(), served: Vec::new(), left: Vec::new() }
    }

    fn key(&self, c: &CoflowState, offset: usize, input: &Input<'_>) -> Key {
        let leg = &input.legs[c.legs.start + offset];
        // Flows are whole bytes: comparing to the byte keeps float noise from breaking ties,
        // which go to the earlier coflow.
        let per_flow = (leg.remaining(c) / leg.flows as f64).round();
        let (first, second) = match self.order {
            FlowOrder::SmallestRemaining => (per_flow, 0.0),
            FlowOrder::EarliestDeadline => {
                let deadline = c.deadline.map_or(f64::INFINITY, |d| c.arrival.saturating_add(d).as_secs_f64());
                (deadline, per_flow)
            }
        };
        Key { first, second, arrival: c.arrival, coflow: c.id, offset: offset as u32 }
    }
}

/// The index in `input.coflows` of the coflow a key names, if it is still active.
fn find(input: &Input<'_>, key: &Key) -> Option<usize> {
    input.coflows.binary_search_by(|c| (c.arrival, c.id).cmp(&(key.arrival, key.coflow))).ok()
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

    fn handle_finished(&mut self, _now: Nanos, coflow: CoflowId) {
        self.seen.remove(&coflow);
    }

    fn poll_allocation(&mut self, input: &Input<'_>, out: &mut Allocation) -> Option<Nanos> {
        // Re-key the legs served last time; drop the finished ones.
        for old in std::mem::take(&mut self.served) {
            self.queue.remove(&old);
            if let Some(k) = find(input, &old) {
                let c = &input.coflows[k];
                if input.legs[c.legs.start + old.offset as usize].is_active() {
                    self.queue.insert(self.key(c, old.offset as usize, input));
                }
            }
        }
        // Queue the legs of coflows seen for the first time.
        for c in input.coflows {
            if self.seen.insert(c.id) {
                for offset in 0..c.legs.len() {
                    if input.legs[c.legs.start + offset].is_active() {
                        self.queue.insert(self.key(c, offset, input));
                    }
                }
            }
        }

        // Greedy in priority order until no port has room left.
        let cap = input.fabric.capacities();
        self.left.clear();
        self.left.extend_from_slice(cap);
        let mut free = self.left.len();
        for key in &self.queue {
            if free < 2 {
                break;
            }
            let Some(k) = find(input, key) else { continue };
            let c = &input.coflows[k];
            let l = c.legs.start + key.offset as usize;
            let leg = &input.legs[l];
            let mut room = f64::INFINITY;
            for &r in leg.route.hops() {
                let x = self.left[r as usize];
                room = room.min(if x <= cap[r as usize] * FULL { 0.0 } else { x });
            }
            if room <= 0.0 || !room.is_finite() {
                continue;
            }
            out.leg_extra.push((l, room / leg.remaining(c)));
            for &r in leg.route.hops() {
                let x = &mut self.left[r as usize];
                *x -= room;
                if *x <= cap[r as usize] * FULL {
                    *x = 0.0;
                    free -= 1;
                }
            }
            self.served.push(*key);
        }
        None
    }
}
