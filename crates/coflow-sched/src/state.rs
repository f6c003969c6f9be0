//! What a policy sees: the active coflows and routes, as the driver (simulator or coordinator)
//! maintains them, and what it answers: an [`Allocation`].
//!
//! Flows are never handed to a policy one by one.
//! The Facebook trace has 706,000 flows but only 150 machines, and a policy's decisions are the
//! same for many flows at once, so the state comes in aggregates that each service model defines:
//!
//! - [`ServiceModel::Proportional`] (the MADD family): a coflow's flows of one size between one pair
//!   of machines form a *leg* (in the coflow-benchmark traces, exactly one flow); they are alike
//!   under any policy. A policy gives each coflow a
//!   rate `σ`, a fraction of remaining bytes per second that every one of its legs sends
//!   (`remaining × σ` bytes per second until the next decision), and may add an extra `κ` to single
//!   legs. MADD (Varys §5.3.3) is one `σ = 1/Γ` per coflow; the backfill of §5.3.4 is the extras.
//!   Since `σ` shrinks every leg of a coflow by the same factor, the driver keeps a per-coflow
//!   `scale` and stores loads and legs relative to it: a decision reads a coflow's remaining bytes
//!   per resource without touching its legs, and only the few legs given an extra are followed one
//!   by one. A coflow with 20,000 flows costs a decision no more than its ports do.
//! - [`ServiceModel::Route`]: flows are pooled by route (source and destination) across coflows,
//!   and a policy gives each route one per-flow rate in bytes per second. Per-flow fair sharing
//!   needs nothing finer, since flows on one route see the same ports.

use coflow_core::{CoflowId, MachineId, Nanos};

use crate::fabric::{Fabric, ResourceId, Route};

/// How a policy allocates, and so how the driver keeps and aggregates the flows' state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServiceModel {
    /// One rate per coflow as a fraction of remaining bytes per second, plus extras for legs.
    Proportional,
    /// One per-flow rate per route, in bytes per second.
    Route,
}

/// An active coflow, as a [`ServiceModel::Proportional`] policy sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct CoflowState {
    /// Its id.
    pub id: CoflowId,
    /// When it arrived (was released: with parents, once they had all finished).
    pub arrival: Nanos,
    /// Its job: the id of the first coflow of its connected component of dependencies (its own
    /// id when it has no parents and no children).
    pub job: CoflowId,
    /// Its deadline relative to arrival, if any.
    pub deadline: Option<Nanos>,
    /// Its weight.
    pub weight: f64,
    /// Its number of flows (its width), finished or not.
    pub width: u32,
    /// Its flows that are not finished yet.
    pub active_flows: u32,
    /// Multiplies the scaled values of [`Input::loads`] and [`LegState::scaled`] into bytes or
    /// fractions remaining now.
    pub scale: f64,
    /// Its scaled remaining bytes on each resource it crosses: a range of [`Input::loads`].
    pub loads: std::ops::Range<usize>,
    /// Its legs: a range of [`Input::legs`], sorted by route.
    pub legs: std::ops::Range<usize>,
    /// Its legs grouped by the resource they leave through: a range of [`Input::senders`].
    pub senders: std::ops::Range<usize>,
}

/// The flows of one coflow of one size between one pair of machines.
#[derive(Clone, Debug, PartialEq)]
pub struct LegState {
    /// The resources its flows cross.
    pub route: Route,
    /// The original bytes of its flows together.
    pub bytes: f64,
    /// The number of its flows.
    pub flows: u32,
    /// The original size of its largest flow, in bytes.
    pub longest: f64,
    /// Its remaining fraction divided by its coflow's [`CoflowState::scale`]; zero once finished.
    pub scaled: f64,
    /// The machine its flows go to: legs to one receiver form a flow group (Siphon §3.2).
    pub receiver: MachineId,
}

impl LegState {
    /// Whether the leg still has bytes to send.
    pub fn is_active(&self) -> bool {
        self.scaled > 0.0
    }

    /// Its remaining bytes, given its coflow.
    pub fn remaining(&self, c: &CoflowState) -> f64 {
        self.bytes * self.scaled * c.scale
    }
}

/// The legs of one coflow that leave through one resource (a machine's ingress port).
#[derive(Clone, Debug, PartialEq)]
pub struct Sender {
    /// The first resource of the legs' routes.
    pub resource: ResourceId,
    /// The legs: a range of [`Input::legs`].
    pub legs: std::ops::Range<usize>,
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
    /// Legs, indexed by [`CoflowState::legs`] and [`Sender::legs`].
    pub legs: &'a [LegState],
    /// Senders, indexed by [`CoflowState::senders`].
    pub senders: &'a [Sender],
    /// Scaled remaining bytes per resource, indexed by [`CoflowState::loads`].
    pub loads: &'a [(ResourceId, f64)],
    /// Routes with unfinished flows ([`ServiceModel::Route`] only; empty otherwise).
    pub routes: &'a [RouteState],
}

impl<'a> Input<'a> {
    /// One coflow's remaining bytes on each resource it crosses.
    pub fn remaining_loads(&self, c: &CoflowState) -> impl Iterator<Item = (ResourceId, f64)> + 'a {
        let scale = c.scale;
        self.loads[c.loads.clone()].iter().map(move |&(r, b)| (r, b * scale))
    }

    /// One coflow's senders.
    pub fn senders_of(&self, c: &CoflowState) -> &'a [Sender] {
        &self.senders[c.senders.clone()]
    }

    /// One coflow's legs.
    pub fn legs_of(&self, c: &CoflowState) -> &'a [LegState] {
        &self.legs[c.legs.clone()]
    }
}

/// A policy's answer: the rates until the next decision.
///
/// `coflow_rate[k]` is the rate of `Input::coflows[k]` as a fraction of remaining bytes per second
/// for each of its legs, `leg_extra` adds to single legs (by index into `Input::legs`), and
/// `route_rate[i]` is the per-flow rate of `Input::routes[i]` in bytes per second.
/// The driver resets it before every decision.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Allocation {
    /// Per coflow: fraction of remaining bytes per second, for every leg.
    pub coflow_rate: Vec<f64>,
    /// Extra rate of single legs on top of their coflow's, as `(leg, fraction per second)`; each
    /// leg at most once.
    pub leg_extra: Vec<(usize, f64)>,
    /// Per route: bytes per second for each of its flows.
    pub route_rate: Vec<f64>,
}

/// The largest extra a leg is given, as a fraction of its remaining bytes per second: it finishes
/// within a picosecond, which the driver's nanosecond clock cannot tell from at once.
pub const MAX_LEG_EXTRA: f64 = 1e12;

impl Allocation {
    /// Gives leg `l`, with `remaining` bytes left, an extra `bytes_per_sec` on top of its coflow's
    /// rate, stored as the fraction of its remaining bytes per second. A leg a hair from its
    /// finish keeps a sliver of bytes until the driver's finish event retires it, and a rate over
    /// that sliver would overflow to an infinite fraction: it is capped at [`MAX_LEG_EXTRA`], so
    /// the leg then uses less than `bytes_per_sec`, never more. Nothing is given to a leg with
    /// nothing left or for a rate that is not a positive number.
    pub fn give_leg(&mut self, l: usize, bytes_per_sec: f64, remaining: f64) {
        if bytes_per_sec > 0.0 && bytes_per_sec.is_finite() && remaining > 0.0 {
            self.leg_extra.push((l, (bytes_per_sec / remaining).min(MAX_LEG_EXTRA)));
        }
    }

    /// Clears and resizes for an input.
    pub fn reset(&mut self, input: &Input<'_>) {
        self.coflow_rate.clear();
        self.coflow_rate.resize(input.coflows.len(), 0.0);
        self.leg_extra.clear();
        self.route_rate.clear();
        self.route_rate.resize(input.routes.len(), 0.0);
    }

    /// The bytes per second this allocation puts on every resource.
    pub fn usage(&self, input: &Input<'_>) -> Vec<f64> {
        let mut used = vec![0.0; input.fabric.resources()];
        let mut owner = vec![0usize; input.legs.len()];
        for (k, c) in input.coflows.iter().enumerate() {
            let sigma = self.coflow_rate[k];
            for (r, b) in input.remaining_loads(c) {
                used[r as usize] += b * sigma;
            }
            for l in c.legs.clone() {
                owner[l] = k;
            }
        }
        for &(l, extra) in &self.leg_extra {
            let leg = &input.legs[l];
            let bytes = leg.remaining(&input.coflows[owner[l]]) * extra;
            for &r in leg.route.hops() {
                used[r as usize] += bytes;
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
