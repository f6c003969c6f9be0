//! Builds a policy's [`Input`] from a live snapshot of flows, and reads per-flow rates back from
//! its [`Allocation`]: what the live coordinator does at every decision.
//!
//! The simulator keeps its state in the aggregates of the service model and moves it in closed
//! form; the coordinator instead knows each flow's remaining bytes from agents' reports, so it
//! rebuilds the aggregates from scratch at each decision: one leg per flow (flows of one coflow
//! rarely share a size once some bytes have moved), every coflow at `scale` 1, and routes pooled
//! across coflows. It stays pure: no clock, no I/O.

use std::collections::BTreeMap;

use coflow_core::{CoflowId, MachineId, Nanos};

use crate::fabric::{Fabric, ResourceId, Route};
use crate::state::{Allocation, Changes, CoflowState, Input, LegState, RouteState, Sender, ServiceModel};

/// A coflow of the snapshot.
#[derive(Clone, Debug, PartialEq)]
pub struct SnapshotCoflow {
    /// Its id.
    pub id: CoflowId,
    /// Its job ([`CoflowState::job`]); the coordinator's is the earliest job among its parents
    /// still registered, since it learns dependencies one registration at a time.
    pub job: CoflowId,
    /// When it arrived (became schedulable).
    pub arrival: Nanos,
    /// Its deadline relative to arrival.
    pub deadline: Option<Nanos>,
    /// Its weight.
    pub weight: f64,
    /// Its number of flows, finished or not, counting those in `pending`.
    pub width: u32,
    /// Of its width, the flows nobody has asked for yet ([`CoflowState::pending`]).
    pub pending: u32,
}

#[cfg(test)]
impl SnapshotCoflow {
    /// Coflow `id` of `width` flows, all asked for, arrived at zero, alone in its job, with no
    /// deadline and weight 1: what the policies' unit tests push.
    pub(crate) fn plain(id: u64, width: u32) -> SnapshotCoflow {
        SnapshotCoflow {
            id: CoflowId(id),
            job: CoflowId(id),
            arrival: Nanos::ZERO,
            deadline: None,
            weight: 1.0,
            width,
            pending: 0,
        }
    }
}

/// An unfinished flow of the snapshot.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SnapshotFlow {
    /// The sending machine.
    pub src: MachineId,
    /// The receiving machine.
    pub dst: MachineId,
    /// Its size in bytes.
    pub size: f64,
    /// Its remaining bytes, positive and at most `size`.
    pub remaining: f64,
}

/// The aggregates a policy reads, rebuilt from flows at every decision.
#[derive(Debug, Default)]
pub struct Snapshot {
    model: Option<ServiceModel>,
    coflows: Vec<CoflowState>,
    legs: Vec<LegState>,
    senders: Vec<Sender>,
    loads: Vec<(ResourceId, f64)>,
    routes: Vec<RouteState>,
    route_index: BTreeMap<Route, usize>,
    /// Per pushed flow, in push order: its leg (proportional) or route (route model) index, and
    /// its coflow's index; `usize::MAX` for a flow that crosses no resource.
    slot: Vec<(usize, usize)>,
    /// Per pushed flow: its remaining bytes.
    remaining: Vec<f64>,
}

impl Snapshot {
    /// Empties the snapshot for a decision by a policy of `model`.
    pub fn clear(&mut self, model: ServiceModel) {
        self.model = Some(model);
        self.coflows.clear();
        self.legs.clear();
        self.senders.clear();
        self.loads.clear();
        self.routes.clear();
        self.route_index.clear();
        self.slot.clear();
        self.remaining.clear();
    }

    /// Adds a coflow and its unfinished flows. Coflows must come in arrival order. Flows are
    /// numbered in the order of all calls, for [`Snapshot::flow_rates`].
    pub fn push_coflow(&mut self, fabric: &Fabric, coflow: &SnapshotCoflow, flows: &[SnapshotFlow]) {
        let routes: Vec<Route> = flows.iter().map(|f| fabric.route(f.src, f.dst)).collect();
        self.push_coflow_routed(coflow, flows, &routes);
    }

    /// [`Snapshot::push_coflow`] with each flow's route given (`routes[k]` for `flows[k]`, routes
    /// of the fabric the input is then made for): a flow relayed through a third machine
    /// (multi-path routing) crosses the resources of both of its hops.
    pub fn push_coflow_routed(&mut self, coflow: &SnapshotCoflow, flows: &[SnapshotFlow], routes: &[Route]) {
        assert_eq!(flows.len(), routes.len(), "one route per flow");
        let model = self.model.expect("clear() before push_coflow()");
        let ci = self.coflows.len();
        for f in flows {
            assert!(f.remaining > 0.0 && f.remaining <= f.size * (1.0 + 1e-9), "bad remaining {f:?}");
        }
        match model {
            ServiceModel::Route => {
                for (f, &route) in flows.iter().zip(routes) {
                    self.remaining.push(f.remaining);
                    if route.is_local() {
                        self.slot.push((usize::MAX, ci));
                        continue;
                    }
                    let i = *self.route_index.entry(route).or_insert_with(|| {
                        self.routes.push(RouteState { route, flows: 0, min_remaining: f64::INFINITY });
                        self.routes.len() - 1
                    });
                    let rt = &mut self.routes[i];
                    rt.flows += 1;
                    rt.min_remaining = rt.min_remaining.min(f.remaining);
                    self.slot.push((i, ci));
                }
            }
            ServiceModel::Proportional => {
                // Legs sorted by route, so that a sender's legs are contiguous.
                let mut order: Vec<usize> = (0..flows.len()).collect();
                order.sort_by_key(|&k| routes[k]);
                let base = self.slot.len();
                self.slot.resize(base + flows.len(), (usize::MAX, ci));
                self.remaining.extend(flows.iter().map(|f| f.remaining));
                let (leg_start, sender_start) = (self.legs.len(), self.senders.len());
                let mut per_resource: BTreeMap<ResourceId, f64> = BTreeMap::new();
                for &k in &order {
                    let (f, route) = (&flows[k], routes[k]);
                    if route.is_local() {
                        continue;
                    }
                    for &r in route.hops() {
                        *per_resource.entry(r).or_default() += f.remaining;
                    }
                    let first = route.hops()[0];
                    let l = self.legs.len();
                    let same =
                        self.senders.len() > sender_start && self.senders.last().is_some_and(|s| s.resource == first);
                    if same {
                        self.senders.last_mut().expect("checked above").legs.end = l + 1;
                    } else {
                        self.senders.push(Sender { resource: first, legs: l..l + 1 });
                    }
                    self.legs.push(LegState {
                        route,
                        bytes: f.size,
                        flows: 1,
                        longest: f.size,
                        scaled: f.remaining / f.size,
                        receiver: f.dst,
                    });
                    self.slot[base + k] = (l, ci);
                }
                let load_start = self.loads.len();
                self.loads.extend(per_resource);
                self.coflows.push(CoflowState {
                    id: coflow.id,
                    arrival: coflow.arrival,
                    job: coflow.job,
                    deadline: coflow.deadline,
                    weight: coflow.weight,
                    width: coflow.width,
                    pending: coflow.pending,
                    active_flows: flows.len() as u32,
                    scale: 1.0,
                    loads: load_start..self.loads.len(),
                    legs: leg_start..self.legs.len(),
                    senders: sender_start..self.senders.len(),
                });
                return;
            }
        }
        // The route model lists no coflows; `ci` only numbers them.
        let _ = coflow;
    }

    /// Whether no flow crosses the fabric.
    pub fn is_idle(&self) -> bool {
        self.legs.is_empty() && self.routes.is_empty()
    }

    /// What the policy reads. The snapshot is rebuilt at every decision, so its changes are
    /// [`Changes::everything`].
    pub fn input<'a>(&'a self, now: Nanos, fabric: &'a Fabric) -> Input<'a> {
        Input {
            now,
            changes: Changes::everything(),
            fabric,
            coflows: &self.coflows,
            legs: &self.legs,
            senders: &self.senders,
            loads: &self.loads,
            routes: &self.routes,
        }
    }

    /// Each pushed flow's rate in bytes per second under `alloc`, in push order; a flow that
    /// crosses no resource gets `f64::INFINITY`.
    pub fn flow_rates(&self, alloc: &Allocation, out: &mut Vec<f64>) {
        out.clear();
        let mut extra = vec![0.0; self.legs.len()];
        for &(l, kappa) in alloc.leg_extras() {
            extra[l] += kappa;
        }
        let model = self.model.expect("clear() before flow_rates()");
        for (&(slot, ci), &remaining) in self.slot.iter().zip(&self.remaining) {
            let rate = if slot == usize::MAX {
                f64::INFINITY
            } else {
                match model {
                    ServiceModel::Route => alloc.rate_of_route(slot),
                    ServiceModel::Proportional => remaining * (alloc.coflow_rate[ci] + extra[slot]),
                }
            };
            out.push(rate.max(0.0));
        }
    }
}

#[cfg(test)]
mod tests {
    use coflow_core::Rate;

    use super::*;
    use crate::Scheduler;

    fn flow(src: u32, dst: u32, size: f64, remaining: f64) -> SnapshotFlow {
        SnapshotFlow { src: MachineId(src), dst: MachineId(dst), size, remaining }
    }

    fn coflow(id: u64, width: u32) -> SnapshotCoflow {
        SnapshotCoflow::plain(id, width)
    }

    fn rates(policy: &mut dyn Scheduler, fabric: &Fabric, coflows: &[(SnapshotCoflow, Vec<SnapshotFlow>)]) -> Vec<f64> {
        let mut snap = Snapshot::default();
        snap.clear(policy.model());
        for (c, flows) in coflows {
            policy.handle_arrival(Nanos::ZERO, c.id);
            snap.push_coflow(fabric, c, flows);
        }
        let input = snap.input(Nanos::ZERO, fabric);
        let mut alloc = Allocation::default();
        alloc.reset(&input);
        policy.poll_allocation(&input, &mut alloc);
        let mut out = Vec::new();
        snap.flow_rates(&alloc, &mut out);
        out
    }

    #[test]
    fn varys_gives_the_smaller_coflow_the_shared_port_and_madd_within_it() {
        let fabric = Fabric::big_switch(3, Rate::from_bytes_per_sec(100.0));
        // Coflow 1: 0->2 with 400 bytes left. Coflow 2: 1->2 with 100 and 0->1 with 50 left.
        let cs = vec![
            (coflow(1, 1), vec![flow(0, 2, 400.0, 400.0)]),
            (coflow(2, 2), vec![flow(1, 2, 100.0, 100.0), flow(0, 1, 100.0, 50.0)]),
        ];
        let r = rates(&mut crate::Varys::default(), &fabric, &cs);
        // Coflow 2 first: Γ = 1 s on out2 (100 B at 100 B/s), so MADD gives 100 and 50 B/s, and
        // backfill tops the second up with what in0 and out1 have left.
        assert!((r[1] - 100.0).abs() < 1e-6, "{r:?}");
        assert!((r[2] - 100.0).abs() < 1e-6, "{r:?}");
        // Coflow 1 crosses out2, which coflow 2 fills: nothing left for it but in0's leftover
        // is blocked by out2.
        assert!(r[0].abs() < 1e-6, "{r:?}");
    }

    #[test]
    fn fair_shares_a_port_per_flow_and_local_flows_are_unlimited() {
        let fabric = Fabric::big_switch(3, Rate::from_bytes_per_sec(100.0));
        let cs = vec![
            (coflow(1, 2), vec![flow(0, 2, 400.0, 400.0), flow(1, 1, 10.0, 10.0)]),
            (coflow(2, 1), vec![flow(1, 2, 100.0, 100.0)]),
        ];
        let r = rates(&mut crate::Fair::default(), &fabric, &cs);
        assert_eq!(r.len(), 3);
        assert!((r[0] - 50.0).abs() < 1e-6 && (r[2] - 50.0).abs() < 1e-6, "{r:?}");
        assert!(r[1].is_infinite());
    }
}
