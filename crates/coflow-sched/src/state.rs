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
    /// Its number of flows (its width), finished or not, counting those in [`CoflowState::pending`].
    pub width: u32,
    /// Of its width, the flows nobody has asked for yet: a live coflow declares how many flows it
    /// has when it registers and gains them as its gets come in; zero in the simulator, where a
    /// coflow arrives whole, and for a coflow that declared no count.
    pub pending: u32,
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
#[derive(Clone, Copy, Debug, PartialEq)]
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

/// What changed in the [`Input`] since the policy's previous decision, so that a policy that keeps
/// its own state between decisions can update it at the cost of what changed.
///
/// Between two decisions the input moves in two ways. Time passes under the allocation in force:
/// remaining bytes fall (scales, scaled legs, loads, `min_remaining`), and nothing else moves;
/// these are never listed, since every served coflow or route changes so, except which coflows'
/// scaled legs and loads moved ([`Changes::reshaped`]): under its rate `σ` alone a coflow's
/// scale falls and its scaled values stay. And events happen:
/// those are listed here, each list in the order the driver saw them.
///
/// **Invariant** (checked by a property over every policy): a policy given these lists decides
/// exactly as the same policy does when every decision comes with [`Changes::everything`] set.
/// Incremental bookkeeping is an optimisation, never a change of behaviour.
///
/// When [`Changes::everything`] is set the lists are empty and mean nothing: the policy must take
/// every coflow, leg, route and capacity as possibly new and find what changed from the input
/// itself (as every policy did before this interface). Drivers set it at the first decision, when
/// they rebuild the input (the coordinator's [`crate::Snapshot`]), and in a from-scratch mode.
/// A policy keeps the decisions of its own history (an order kept between arrivals, a queue a
/// coflow was demoted to) either way; what it may drop and rebuild is what it derived from
/// earlier inputs.
///
/// Stable names: input indices shift when coflows leave, so coflows are named by [`CoflowId`],
/// legs by `(coflow, offset among its legs)` (the offset is `l − CoflowState::legs.start`, which
/// never changes while the coflow is active), and routes by their [`Route`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Changes {
    /// Take everything as new; the lists below are empty.
    pub everything: bool,
    /// Coflows that entered the input (arrived or were released), in arrival order. Each is
    /// active in the input of this decision.
    pub arrived: Vec<CoflowId>,
    /// Coflows that left the input: finished, or dropped after the policy rejected them
    /// ([`crate::Scheduler::poll_rejected`]). None of them is in the input of this decision. A
    /// coflow that arrived and finished between two decisions is in both lists.
    pub finished: Vec<CoflowId>,
    /// ([`ServiceModel::Proportional`]) Legs that finished, as `(coflow, offset among its legs)`,
    /// including legs of coflows listed in `finished`. Each leg at most once: a finished leg
    /// never comes back. Legs of rejected coflows are not listed (they did not finish).
    pub legs_finished: Vec<(CoflowId, u32)>,
    /// ([`ServiceModel::Proportional`]) Coflows some of whose legs were sent at another rate
    /// than their coflow's `σ` since the previous decision (an extra, or a driver's
    /// per-connection cap), so that their scaled legs and loads moved; every other coflow's
    /// scaled legs and loads are as they were at the previous decision (legs that finished
    /// aside: their scaled value is zero and the loads on their routes only fell), only its
    /// scale fell. Each coflow at most once. A driver that lists what changed must list every
    /// such coflow, also one whose leg with an extra has finished since: policies keep values
    /// derived from the others' scaled legs and loads on this word (`varys`'s keys).
    pub reshaped: Vec<CoflowId>,
    /// ([`ServiceModel::Proportional`]) The legs of the coflows in [`Changes::reshaped`] that
    /// were sent at another rate than their coflow's `σ`, as `(coflow, offset among its legs)`:
    /// every leg whose scaled value moved other than by finishing is listed (a leg listed may
    /// also have finished since). Each leg at most once. Listed only for a policy that reads it
    /// ([`crate::Scheduler::reads_reshaped_legs`]); coflows listed as reshaped with no leg listed
    /// at all say nothing of which legs moved. Policies keep values derived from single legs on
    /// this word (`scf`'s largest remaining flow).
    pub reshaped_legs: Vec<(CoflowId, u32)>,
    /// ([`ServiceModel::Route`]) Routes whose set of unfinished flows changed (flows joined or
    /// finished), including routes that appeared in or left [`Input::routes`], and routes that
    /// moved to another index there; sorted, each once. A route not listed has the same flows
    /// at the same index as at the previous decision.
    pub routes: Vec<Route>,
    /// Whether any resource's capacity changed (wide-area weather).
    pub capacities: bool,
}

/// [`Changes`] with `everything` set, for drivers that do not track changes.
static EVERYTHING: Changes = Changes {
    everything: true,
    arrived: Vec::new(),
    finished: Vec::new(),
    legs_finished: Vec::new(),
    reshaped: Vec::new(),
    reshaped_legs: Vec::new(),
    routes: Vec::new(),
    capacities: false,
};

impl Changes {
    /// Changes that say "take everything as new".
    pub fn everything() -> &'static Changes {
        &EVERYTHING
    }

    /// Empties the lists and clears `everything`, after a decision has read them.
    pub fn clear(&mut self) {
        self.everything = false;
        self.arrived.clear();
        self.finished.clear();
        self.legs_finished.clear();
        self.reshaped.clear();
        self.reshaped_legs.clear();
        self.routes.clear();
        self.capacities = false;
    }

    /// Whether nothing is listed and `everything` is not set: only time passed.
    pub fn is_empty(&self) -> bool {
        !self.everything
            && !self.capacities
            && self.arrived.is_empty()
            && self.finished.is_empty()
            && self.legs_finished.is_empty()
            && self.reshaped.is_empty()
            && self.reshaped_legs.is_empty()
            && self.routes.is_empty()
    }
}

/// Everything a policy may read when it decides. Built by the driver at every decision.
#[derive(Clone, Copy, Debug)]
pub struct Input<'a> {
    /// The time of the decision.
    pub now: Nanos,
    /// What changed since the policy's previous decision.
    pub changes: &'a Changes,
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
/// for each of its legs, the extras ([`Allocation::leg_extras`]) add to single legs (by index into
/// `Input::legs`), and `route_rate[i]` is the per-flow rate of `Input::routes[i]` in bytes per
/// second, unless the policy answers in [`Shares`] (then read [`Allocation::rate_of_route`]).
/// The driver resets it before every decision.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Allocation {
    /// Per coflow: fraction of remaining bytes per second, for every leg.
    pub coflow_rate: Vec<f64>,
    /// Extra rate of single legs on top of their coflow's, as `(leg, fraction per second)`; each
    /// leg at most once. Private: written only through the capped [`Allocation::give_leg`] and its
    /// variants, read through [`Allocation::leg_extras`].
    leg_extra: Vec<(usize, f64)>,
    /// Per route: bytes per second for each of its flows (empty while [`Shares::on`]).
    pub route_rate: Vec<f64>,
    /// Routes' rates as shares of resources, for a policy that answers so.
    pub shares: Shares,
    /// Legs' rates in bytes per second that stand until changed, for a policy that answers so.
    pub standing: Standing,
}

/// ([`ServiceModel::Proportional`]) Legs' rates in bytes per second that stand from one decision
/// to the next until a decision changes them, for a policy whose legs mostly keep their rates
/// (a blind policy serving whole coflows: see [`crate::BlindScheduler::standing_rates`]). A
/// decision then lists only the legs whose rate changed, and a driver that keeps them plans
/// again only those legs' finishes, so that a decision costs what changed rather than what is
/// served. A leg keeps its bytes per second, not its fraction of what is left, so its planned
/// finish holds.
///
/// Offered by the driver, answered by the policy: the driver sets `kept` when it keeps standing
/// rates (the simulator's leg model does, except with per-connection caps; the coordinator,
/// which turns every decision into flow rates, does not), and a policy answers in standing rates
/// only then, setting `on`. The legs given standing rates belong to coflows given no
/// [`Allocation::coflow_rate`] and no extras. A leg that finishes stops; so does one whose
/// coflow leaves.
///
/// Such a policy reads whether a leg is active, not what it has left, and no loads
/// ([`crate::Scheduler::reads_loads`] is false): the driver may leave a leg at a standing rate
/// with the remaining bytes it had at its last change ([`LegState::scaled`] and the loads it
/// crosses), bringing it forward only when the driver itself reads it, so that a decision costs
/// what changed. [`Changes::reshaped`] lists the coflows of such legs that moved since the
/// previous decision read them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Standing {
    /// Set by the driver, kept across decisions: whether it keeps standing rates.
    pub kept: bool,
    /// Set by the policy at each decision: whether it answers in standing rates.
    pub on: bool,
    /// Whether `changed` lists every leg with a rate, so that every other leg stops (the policy
    /// lost track of what stands, e.g. when it rebuilt its view of the legs). A listed leg whose
    /// rate is the one it had keeps its plan, so a reset decides as listing the changes would.
    pub reset: bool,
    /// The legs whose rate changed, as `(leg, bytes per second of all its flows together)`, each
    /// leg at most once; a rate of zero stops the leg.
    pub changed: Vec<(usize, f64)>,
}

/// ([`ServiceModel::Route`]) Per-flow rates given by resource rather than by route: each resource
/// has a rate, and each route follows one resource and gets its rate per flow. Per-flow max-min
/// fairness answers so (every route gets the fair share of the first of its resources to fill),
/// and a driver then keeps one clock per resource instead of one per route, so that a decision
/// costs what changed rather than the number of routes.
///
/// Kept from one decision to the next, unlike the rest of the [`Allocation`]: the driver resizes
/// `follows` to the routes and empties `written`; a policy that answers in shares sets `on`,
/// writes every resource's `rate` at every decision, and writes `follows` for every route that
/// appeared in [`Input::routes`] or moved there (every route under [`Changes::everything`]) and
/// for every other route whose resource changes, listing each position it wrote in `written`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Shares {
    /// Whether the policy answers in shares; `Allocation::route_rate` is then unused.
    pub on: bool,
    /// Per resource: the per-flow rate of every route that follows it, in bytes per second.
    pub rate: Vec<f64>,
    /// Per route (as [`Input::routes`]): the resource it follows.
    pub follows: Vec<ResourceId>,
    /// Positions in `follows` written by this decision, each at most once.
    pub written: Vec<u32>,
}

/// The largest extra a leg is given, as a fraction of its remaining bytes per second: it finishes
/// within a picosecond, which the driver's nanosecond clock cannot tell from at once.
pub const MAX_LEG_EXTRA: f64 = 1e12;

impl Allocation {
    /// An allocation for a driver that keeps standing rates ([`Standing::kept`]).
    pub fn keeping_standing() -> Allocation {
        Allocation { standing: Standing { kept: true, ..Standing::default() }, ..Allocation::default() }
    }

    /// Gives leg `l`, with `remaining` bytes left, an extra `bytes_per_sec` on top of its coflow's
    /// rate, stored as the fraction of its remaining bytes per second. A leg a hair from its
    /// finish keeps a sliver of bytes until the driver's finish event retires it, and a rate over
    /// that sliver would overflow to an infinite fraction: it is capped at [`MAX_LEG_EXTRA`], so
    /// the leg then uses less than `bytes_per_sec`, never more. Nothing is given to a leg with
    /// nothing left or for a rate that is not a positive number.
    pub fn give_leg(&mut self, l: usize, bytes_per_sec: f64, remaining: f64) {
        self.give_leg_fraction(l, Allocation::leg_fraction(bytes_per_sec, remaining));
    }

    /// The extra fraction of its remaining bytes per second that [`Allocation::give_leg`] would
    /// give a leg with `remaining` bytes left for `bytes_per_sec`: capped at [`MAX_LEG_EXTRA`],
    /// zero for a leg with nothing left or a rate that is not a positive number. For a policy
    /// that sums a leg's extras over several passes before giving them.
    pub fn leg_fraction(bytes_per_sec: f64, remaining: f64) -> f64 {
        if bytes_per_sec > 0.0 && bytes_per_sec.is_finite() && remaining > 0.0 {
            (bytes_per_sec / remaining).min(MAX_LEG_EXTRA)
        } else {
            0.0
        }
    }

    /// Gives leg `l` an extra `fraction` of its remaining bytes per second, capped at
    /// [`MAX_LEG_EXTRA`]; nothing for a fraction that is not a positive number.
    pub fn give_leg_fraction(&mut self, l: usize, fraction: f64) {
        if fraction > 0.0 && !fraction.is_nan() {
            self.leg_extra.push((l, fraction.min(MAX_LEG_EXTRA)));
        }
    }

    /// The driver's side: sets leg `l`'s extra to `fraction`, which may be negative to hold the
    /// leg below its coflow's rate (a per-connection cap the policy does not know), and is capped
    /// at [`MAX_LEG_EXTRA`] as every extra. Call [`Allocation::clear_leg_extras`] first: each leg
    /// at most once.
    pub fn hold_leg(&mut self, l: usize, fraction: f64) {
        debug_assert!(!fraction.is_nan(), "leg {l} held at NaN");
        if fraction != 0.0 {
            self.leg_extra.push((l, fraction.min(MAX_LEG_EXTRA)));
        }
    }

    /// The extras, as `(leg, fraction per second)` in the order they were given; each leg at most
    /// once.
    pub fn leg_extras(&self) -> &[(usize, f64)] {
        &self.leg_extra
    }

    /// Sums the extras given to one leg in several passes into one, so that each leg has at
    /// most one again (capped at [`MAX_LEG_EXTRA`]); the extras end up in order of legs.
    pub(crate) fn merge_leg_extras(&mut self) {
        self.leg_extra.sort_by_key(|&(l, _)| l);
        self.leg_extra.dedup_by(|later, kept| {
            let same = later.0 == kept.0;
            if same {
                kept.1 = (kept.1 + later.1).min(MAX_LEG_EXTRA);
            }
            same
        });
    }

    /// Takes every extra back.
    pub fn clear_leg_extras(&mut self) {
        self.leg_extra.clear();
    }

    /// Serves nothing, whichever way the policy answers: no coflow rate, no extra, no route rate,
    /// every resource's share zero, and (to a driver that keeps standing rates) every standing
    /// leg stopped. For a wrapper that stops a policy deciding, so that the run ends.
    pub fn serve_nothing(&mut self) {
        self.coflow_rate.iter_mut().for_each(|r| *r = 0.0);
        self.leg_extra.clear();
        self.route_rate.iter_mut().for_each(|r| *r = 0.0);
        self.shares.rate.iter_mut().for_each(|r| *r = 0.0);
        // Every route as written: routes moved since the last answer in shares follow what
        // `follows` holds at their place (at a share of zero, whichever resource it is).
        if self.shares.on {
            self.shares.written.clear();
            self.shares.written.extend(0..self.shares.follows.len() as u32);
        }
        self.standing.on = self.standing.kept;
        self.standing.reset = self.standing.kept;
        self.standing.changed.clear();
    }

    /// Clears and resizes for an input.
    pub fn reset(&mut self, input: &Input<'_>) {
        self.coflow_rate.clear();
        self.coflow_rate.resize(input.coflows.len(), 0.0);
        self.leg_extra.clear();
        self.route_rate.clear();
        if !self.shares.on {
            self.route_rate.resize(input.routes.len(), 0.0);
        }
        self.shares.follows.resize(input.routes.len(), 0);
        self.shares.written.clear();
        self.standing.on = false;
        self.standing.reset = false;
        self.standing.changed.clear();
    }

    /// The per-flow rate of `Input::routes[i]`, whichever way the policy answered.
    pub fn rate_of_route(&self, i: usize) -> f64 {
        if self.shares.on { self.shares.rate[self.shares.follows[i] as usize] } else { self.route_rate[i] }
    }

    /// The bytes per second this allocation puts on every resource, apart from the standing
    /// rates that it does not list (the driver that keeps them adds them).
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
                used[r as usize] += self.rate_of_route(i) * rt.flows as f64;
            }
        }
        used
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_extra_is_capped_and_only_positive_numbers_are_given() {
        let mut a = Allocation::default();
        // 1 GB/s over a micro-byte left would be 1e15 of the leg per second.
        a.give_leg(0, 1e9, 1e-6);
        a.give_leg_fraction(1, f64::INFINITY);
        a.give_leg(2, 10.0, 4.0);
        a.give_leg_fraction(3, -1.0);
        a.give_leg_fraction(4, f64::NAN);
        a.give_leg(5, 1.0, 0.0);
        a.give_leg(6, f64::INFINITY, 1.0);
        assert_eq!(a.leg_extras(), &[(0, MAX_LEG_EXTRA), (1, MAX_LEG_EXTRA), (2, 2.5)]);
        assert_eq!(Allocation::leg_fraction(1e9, 1e-6), MAX_LEG_EXTRA);
        assert_eq!(Allocation::leg_fraction(10.0, 4.0), 2.5);
        assert_eq!(Allocation::leg_fraction(-1.0, 4.0), 0.0);
        // The driver may hold a leg below its coflow's rate, never above the cap.
        a.clear_leg_extras();
        a.hold_leg(7, -0.5);
        a.hold_leg(8, 1e20);
        a.hold_leg(9, 0.0);
        assert_eq!(a.leg_extras(), &[(7, -0.5), (8, MAX_LEG_EXTRA)]);
    }

    #[test]
    fn extras_given_to_one_leg_in_two_passes_merge_into_one() {
        let mut a = Allocation::default();
        a.give_leg(3, 1.0, 4.0);
        a.give_leg(1, 2.0, 4.0);
        a.give_leg(3, 2.0, 4.0);
        a.give_leg_fraction(1, MAX_LEG_EXTRA);
        a.merge_leg_extras();
        assert_eq!(a.leg_extras(), &[(1, MAX_LEG_EXTRA), (3, 0.75)]);
    }
}
