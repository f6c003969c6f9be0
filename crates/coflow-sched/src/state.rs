//! What a policy sees: the active coflows and routes, as the driver (simulator or coordinator)
//! maintains them, and what it answers: an [`Allocation`].
//!
//! Flows are never handed to a policy one by one.
//! The Facebook trace has 706,000 flows but only 150 machines, and a policy's decisions are the
//! same for many flows at once, so the state comes in aggregates that each service model defines:
//!
//! - [`ServiceModel::Proportional`]: each coflow is split into *groups*, its flows between one pair
//!   of machines (in the coflow-benchmark traces, exactly one flow). A policy gives each group a
//!   rate `σ` as a fraction of its remaining bytes per second: every flow of the group sends
//!   `remaining × σ` bytes per second until the next decision. MADD (Varys §5.3.3) is exactly this
//!   with one `σ = 1/Γ` for the whole coflow, and the backfill of §5.3.4 raises single groups.
//!   A group's flows therefore keep remaining bytes proportional to their sizes, and the group is
//!   described by one fraction `phi`; the driver brings `phi` forward lazily, so a flow that
//!   finishes between decisions costs a heap pop, not a pass over every flow.
//! - [`ServiceModel::Route`]: flows are pooled by route (source and destination) across coflows,
//!   and a policy gives each route one per-flow rate in bytes per second. Per-flow fair sharing
//!   needs nothing finer, since flows on one route see the same ports.

use coflow_core::{CoflowId, Nanos};

use crate::fabric::{Fabric, ResourceId, Route};

/// How a policy allocates, and so how the driver keeps and aggregates the flows' state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServiceModel {
    /// One rate per group, as a fraction of the group's remaining bytes per second.
    Proportional,
    /// One per-flow rate per route, in bytes per second.
    Route,
}

/// An active coflow, as a [`ServiceModel::Proportional`] policy sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct CoflowState {
    /// Its id.
    pub id: CoflowId,
    /// When it arrived.
    pub arrival: Nanos,
    /// Its deadline relative to arrival, if any.
    pub deadline: Option<Nanos>,
    /// Its weight.
    pub weight: f64,
    /// Its groups: a range of [`Input::groups`].
    pub groups: std::ops::Range<usize>,
    /// Its flows that are not finished yet.
    pub active_flows: u32,
}

/// The flows of one coflow between one pair of machines.
#[derive(Clone, Debug, PartialEq)]
pub struct GroupState {
    /// The fraction of the group's bytes that remains, in `[0, 1]`; zero once it finished.
    pub phi: f64,
    /// The group's original bytes on each resource it crosses: a range of [`Input::loads`].
    pub loads: std::ops::Range<usize>,
    /// The number of flows in the group.
    pub flows: u32,
    /// The original size of its largest flow, in bytes.
    pub longest: f64,
}

impl GroupState {
    /// Whether the group still has bytes to send.
    pub fn is_active(&self) -> bool {
        self.phi > 0.0
    }
}

/// A route with unfinished flows, as a [`ServiceModel::Route`] policy sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RouteState {
    /// The resources its flows cross.
    pub route: Route,
    /// Its unfinished flows.
    pub flows: u32,
    /// The smallest remaining size among them, in bytes.
    pub min_remaining: f64,
}

/// Everything a policy may read when it decides. Built by the driver at every decision.
#[derive(Clone, Copy, Debug)]
pub struct Input<'a> {
    /// The time of the decision.
    pub now: Nanos,
    /// The fabric and each resource's capacity available to scheduled traffic.
    pub fabric: &'a Fabric,
    /// Active coflows in arrival order ([`ServiceModel::Proportional`] only; empty otherwise).
    pub coflows: &'a [CoflowState],
    /// Groups, indexed by [`CoflowState::groups`].
    pub groups: &'a [GroupState],
    /// Per-resource original bytes, indexed by [`GroupState::loads`].
    pub loads: &'a [(ResourceId, f64)],
    /// Routes with unfinished flows ([`ServiceModel::Route`] only; empty otherwise).
    pub routes: &'a [RouteState],
}

impl<'a> Input<'a> {
    /// The sender groups of one coflow.
    pub fn groups_of(&self, c: &CoflowState) -> &'a [GroupState] {
        &self.groups[c.groups.clone()]
    }

    /// One group's remaining bytes on each resource it crosses.
    pub fn remaining_loads(&self, g: &GroupState) -> impl Iterator<Item = (ResourceId, f64)> + 'a {
        let phi = g.phi;
        self.loads[g.loads.clone()].iter().map(move |&(r, b)| (r, b * phi))
    }
}

/// A policy's answer: the rates until the next decision.
///
/// `group_rate[i]` is the rate of `Input::groups[i]` as a fraction of its remaining bytes per
/// second, and `route_rate[i]` is the per-flow rate of `Input::routes[i]` in bytes per second.
/// The driver sizes both vectors and zeroes them before every decision.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Allocation {
    /// Per group: fraction of remaining bytes per second.
    pub group_rate: Vec<f64>,
    /// Per route: bytes per second for each of its flows.
    pub route_rate: Vec<f64>,
}

impl Allocation {
    /// Clears and resizes for an input.
    pub fn reset(&mut self, input: &Input<'_>) {
        self.group_rate.clear();
        self.group_rate.resize(input.groups.len(), 0.0);
        self.route_rate.clear();
        self.route_rate.resize(input.routes.len(), 0.0);
    }

    /// The bytes per second this allocation puts on every resource.
    pub fn usage(&self, input: &Input<'_>) -> Vec<f64> {
        let mut used = vec![0.0; input.fabric.resources()];
        for (i, g) in input.groups.iter().enumerate() {
            let sigma = self.group_rate[i];
            if sigma > 0.0 {
                for (r, b) in input.remaining_loads(g) {
                    used[r as usize] += b * sigma;
                }
            }
        }
        for (i, rt) in input.routes.iter().enumerate() {
            for &r in rt.route.hops() {
                used[r as usize] += self.route_rate[i] * rt.flows as f64;
            }
        }
        used
    }
}
