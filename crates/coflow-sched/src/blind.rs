//! The interface of policies that must not know flow sizes (Aalo's D-CLAS and its kin).
//!
//! A [`BlindScheduler`] reads a [`BlindInput`], which holds no flow size and no remaining byte
//! count: only what a coordinator learns without being told sizes, namely each coflow's flows and
//! routes, which of them have finished, and the bytes each coflow has sent as of the last progress
//! report. Reports come every [`BlindScheduler::report_interval`], so a blind policy sees progress
//! late, as the live system's coordinator does. Not being able to read sizes is a property of the
//! types, not a convention: nothing reachable from a `BlindInput` carries one.

use std::fmt;
use std::ops::Range;

use coflow_core::{CoflowId, Nanos};

use crate::fabric::{Fabric, Route};
use crate::scheduler::Scheduler;
use crate::state::{Allocation, CoflowState, Input, ServiceModel};

/// An active coflow as a blind policy sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct BlindCoflow {
    /// Its id.
    pub id: CoflowId,
    /// When it arrived.
    pub arrival: Nanos,
    /// Its weight.
    pub weight: f64,
    /// Bytes it had sent at the last progress report.
    pub sent: f64,
    /// Its job (see [`CoflowState::job`]).
    pub job: CoflowId,
    /// Bytes its whole job had sent at the last progress report: the finished coflows of the job
    /// (all their bytes, as seen when they finished) and the active ones (their `sent`). Equal to
    /// `sent` unless the policy is [`BlindScheduler::job_aware`].
    pub job_sent: f64,
    /// Its flows, finished or not, as the driver counts them ([`CoflowState::width`]): a
    /// coordinator knows how many flows a coflow has asked for, not their sizes.
    pub width: u32,
    /// Of its width, the flows nobody has asked for yet ([`CoflowState::pending`]).
    pub pending: u32,
    /// Its flows not finished yet.
    pub active_flows: u32,
    /// Its legs (alike flows between one pair of machines): a range of [`BlindInput::legs`].
    pub legs: Range<usize>,
}

impl BlindCoflow {
    /// Its legs on `route`, as a range of `legs` (its legs are sorted by route).
    pub(crate) fn legs_on(&self, legs: &[BlindLeg], route: Route) -> Range<usize> {
        let mine = &legs[self.legs.clone()];
        let a = mine.partition_point(|l| l.route < route);
        let b = a + mine[a..].partition_point(|l| l.route == route);
        self.legs.start + a..self.legs.start + b
    }
}

/// Flows of a coflow that finished since the previous decision, with the bytes each delivered:
/// what a coordinator learns when a flow completes. Only finished flows carry a size.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FlowsFinished {
    /// Their coflow.
    pub coflow: CoflowId,
    /// The resources they crossed.
    pub route: Route,
    /// How many finished.
    pub flows: u32,
    /// The bytes each of them delivered.
    pub bytes_per_flow: f64,
}

/// The flows of one coflow of one size between one pair of machines, without their size.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlindLeg {
    /// The resources its flows cross.
    pub route: Route,
    /// Its flows not finished yet.
    pub active_flows: u32,
}

/// Everything a blind policy may read when it decides.
#[derive(Clone, Copy, Debug)]
pub struct BlindInput<'a> {
    /// The time of the decision.
    pub now: Nanos,
    /// The fabric and each resource's capacity.
    pub fabric: &'a Fabric,
    /// Active coflows in arrival order.
    pub coflows: &'a [BlindCoflow],
    /// Legs, indexed by [`BlindCoflow::legs`]. It may also hold legs of coflows that have left,
    /// with no active flows, in no coflow's range: read legs through the coflows.
    pub legs: &'a [BlindLeg],
    /// When the next progress report is due: a decision from then on sees [`BlindCoflow::sent`]
    /// refreshed, none before.
    pub next_report: Nanos,
    /// Take every coflow and leg as possibly new: the adapter rebuilt its legs (when the coflows
    /// seen before are not kept in the same order, when a coflow's
    /// routes changed, when a finished leg has flows again, or to compact the legs of coflows that
    /// left). `legs_finished` then means nothing.
    pub everything: bool,
    /// Otherwise, the legs that finished since the previous decision, of coflows in `coflows`
    /// (it may list legs of coflows new to this decision, which the policy has not seen), as
    /// `(coflow, offset among its legs, index into legs)`: a policy that keeps state per coflow
    /// updates it from these, takes a coflow that was not in the previous decision's `coflows`
    /// whole, and forgets those that are no longer in `coflows`.
    pub legs_finished: &'a [(CoflowId, u32, usize)],
    /// The flows that finished since the previous decision, with their sizes, of coflows in
    /// `coflows`: listed also when `everything` is set (events cannot be found from the state),
    /// each finish once, in no particular order.
    pub flows_finished: &'a [FlowsFinished],
}

impl BlindInput<'_> {
    /// The ids of its coflows.
    pub(crate) fn ids(&self) -> std::collections::BTreeSet<CoflowId> {
        self.coflows.iter().map(|c| c.id).collect()
    }
}

/// A blind policy's answer: the rate of each flow of each leg, in bytes per second: its
/// coflow's rate, if any, and its own on top.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BlindAllocation {
    /// Per coflow of [`BlindInput::coflows`]: bytes per second for each active flow of each of
    /// its legs that crosses the fabric (a policy serving whole coflows gives a rate here once
    /// per coflow rather than once per leg).
    pub coflow_rate: Vec<f64>,
    /// Per leg of [`BlindInput::legs`]: bytes per second for each of its active flows, on top of
    /// its coflow's.
    pub leg_rate: Vec<f64>,
    /// The legs given a rate of their own (`leg_rate`), each once, if the policy lists them: the
    /// adapter then reads only these and every leg of a coflow with a `coflow_rate`, not every
    /// leg (with 100,000 legs alive, a scan per decision is most of its cost). Left empty, every
    /// leg is read, unless `listed`.
    pub served: Vec<usize>,
    /// Whether `served` lists the legs given a rate of their own even when it is empty (a policy
    /// that gives most of its rates by coflow, whose own pass may serve no leg).
    pub listed: bool,
}

impl BlindAllocation {
    /// Clears and resizes for an input.
    pub fn reset(&mut self, input: &BlindInput<'_>) {
        self.coflow_rate.clear();
        self.coflow_rate.resize(input.coflows.len(), 0.0);
        if self.served.is_empty() && !self.listed {
            self.leg_rate.clear();
        } else {
            for &l in &self.served {
                if let Some(r) = self.leg_rate.get_mut(l) {
                    *r = 0.0;
                }
            }
            self.served.clear();
        }
        self.leg_rate.resize(input.legs.len(), 0.0);
    }

    /// The bytes per second this allocation puts on every resource.
    pub fn usage(&self, input: &BlindInput<'_>) -> Vec<f64> {
        let mut used = vec![0.0; input.fabric.resources()];
        for (leg, &rate) in input.legs.iter().zip(&self.leg_rate) {
            for &r in leg.route.hops() {
                used[r as usize] += rate * leg.active_flows as f64;
            }
        }
        for (c, &rate) in input.coflows.iter().zip(&self.coflow_rate) {
            for leg in &input.legs[c.legs.clone()] {
                for &r in leg.route.hops() {
                    used[r as usize] += rate * leg.active_flows as f64;
                }
            }
        }
        used
    }
}

/// A policy that decides without knowing flow sizes. Pure, like [`crate::Scheduler`].
pub trait BlindScheduler: fmt::Debug + Send {
    /// The policy's short name.
    fn name(&self) -> &'static str;

    /// How often the driver refreshes [`BlindCoflow::sent`] (the agents' report interval).
    fn report_interval(&self) -> Nanos;

    /// As [`crate::Scheduler::flow_finish_gap`].
    fn flow_finish_gap(&self) -> Option<Nanos> {
        None
    }

    /// Whether the policy reads [`BlindCoflow::job_sent`]: only then does the adapter keep each
    /// job's bytes after its coflows finish (one number per job, kept until the driver says the
    /// job ended, which the simulator never does).
    fn job_aware(&self) -> bool {
        false
    }

    /// Whether the adapter hands a driver that keeps them standing rates ([`crate::Standing`]):
    /// a leg's bytes per second then stand until the policy gives it another, and its planned
    /// finish holds, instead of being planned again from what is left at every decision (which
    /// moves it by a rounding). For a policy whose served legs mostly keep their rates from one
    /// decision to the next, so that a decision costs the driver what changed. Only for a policy
    /// that takes no progress reports ([`BlindScheduler::report_interval`] of `Nanos::MAX`): the
    /// driver does not bring standing legs forward for a reader of the loads.
    fn standing_rates(&self) -> bool {
        false
    }

    /// A coflow arrived.
    fn handle_arrival(&mut self, _now: Nanos, _coflow: CoflowId) {}

    /// A coflow's last flow finished.
    fn handle_finished(&mut self, _now: Nanos, _coflow: CoflowId) {}

    /// Decides the rates until the next decision; returns when to decide again regardless.
    fn poll_allocation(&mut self, input: &BlindInput<'_>, out: &mut BlindAllocation) -> Option<Nanos>;
}

/// Runs a [`BlindScheduler`] behind the [`Scheduler`] interface, so that every driver runs blind
/// policies unchanged.
///
/// The adapter is the trusted side: it reads the driver's full [`Input`], hands the policy only a
/// [`BlindInput`] (with `sent` refreshed once per report interval), and turns each per-flow rate
/// back into a rate for the leg. A leg's flows have one size and one route, so they are alike.
#[derive(Debug)]
pub struct Blinded<B> {
    inner: B,
    coflows: Vec<BlindCoflow>,
    legs: Vec<BlindLeg>,
    alloc: BlindAllocation,
    /// Bytes sent per coflow at the last report, and when the next report is due.
    reported: std::collections::BTreeMap<CoflowId, f64>,
    /// Each coflow's bytes over the fabric: the most its legs have held.
    total: std::collections::BTreeMap<CoflowId, f64>,
    /// Scratch: whether each resource is one a coflow sends from.
    sending: Vec<bool>,
    next_report: Nanos,
    /// Each active coflow's job, and per job the bytes its finished coflows sent, until the
    /// driver says the job ended.
    job_of: std::collections::BTreeMap<CoflowId, CoflowId>,
    job_done: std::collections::BTreeMap<CoflowId, f64>,
    /// Each coflow's index in `coflows`, and the legs that finished, for [`BlindInput`].
    index: std::collections::BTreeMap<CoflowId, usize>,
    legs_finished: Vec<(CoflowId, u32, usize)>,
    /// Per leg of `legs`, the size of each of its flows: never handed to the policy, except as
    /// the size of flows once they have finished ([`BlindInput::flows_finished`]).
    leg_size: Vec<f64>,
    flows_finished: Vec<FlowsFinished>,
    /// Legs in `legs` of coflows no longer in `coflows` (left in place until they are as many as
    /// the live ones).
    dropped: usize,
    /// Standing rates handed to the driver: per leg of `legs`, the bytes per second of all its
    /// flows together (zero if none), and the legs with one, ascending; scratch for the next.
    given: Vec<f64>,
    given_legs: Vec<usize>,
    spare_given: Vec<usize>,
    /// Standing rates handed to the driver: each coflow's rate, in the order of `coflows`, and
    /// scratch for the next.
    given_coflow: Vec<(CoflowId, f64)>,
    spare_coflow: Vec<(CoflowId, f64)>,
}

impl<B: BlindScheduler> Blinded<B> {
    /// Wraps a blind policy.
    pub fn new(inner: B) -> Blinded<B> {
        Blinded {
            inner,
            coflows: Vec::new(),
            legs: Vec::new(),
            alloc: BlindAllocation::default(),
            reported: std::collections::BTreeMap::new(),
            total: std::collections::BTreeMap::new(),
            sending: Vec::new(),
            next_report: Nanos::ZERO,
            job_of: std::collections::BTreeMap::new(),
            job_done: std::collections::BTreeMap::new(),
            index: std::collections::BTreeMap::new(),
            legs_finished: Vec::new(),
            leg_size: Vec::new(),
            flows_finished: Vec::new(),
            dropped: 0,
            given: Vec::new(),
            given_legs: Vec::new(),
            spare_given: Vec::new(),
            given_coflow: Vec::new(),
            spare_coflow: Vec::new(),
        }
    }
}

/// The size of each flow of a leg.
fn per_flow(leg: &crate::state::LegState) -> f64 {
    leg.bytes / f64::from(leg.flows.max(1))
}

impl<B: BlindScheduler> Blinded<B> {
    /// Not told what changed: the flows that finished since the previous decision are those of
    /// coflows seen then that are no longer active now, found by comparing each such coflow's
    /// active flows by route and size. A coflow no longer in the input is not listed: the policy
    /// forgets it.
    fn find_finished(&mut self, input: &Input<'_>) {
        let mut before: Vec<(Route, u64, u32)> = Vec::new();
        let mut after: Vec<(Route, u64, u32)> = Vec::new();
        for c in input.coflows {
            let Some(b) = self.index.get(&c.id).and_then(|&k| self.coflows.get(k)).filter(|b| b.id == c.id) else {
                continue;
            };
            before.clear();
            after.clear();
            for l in b.legs.clone() {
                let leg = &self.legs[l];
                if leg.active_flows > 0 {
                    before.push((leg.route, self.leg_size[l].to_bits(), leg.active_flows));
                }
            }
            for leg in input.legs_of(c).iter().filter(|l| l.is_active()) {
                after.push((leg.route, per_flow(leg).to_bits(), leg.flows));
            }
            before.sort_unstable_by_key(|x| (x.0, x.1));
            after.sort_unstable_by_key(|x| (x.0, x.1));
            let mut a = after.iter().peekable();
            let mut k = 0;
            while k < before.len() {
                let (route, size) = (before[k].0, before[k].1);
                let mut had = 0u32;
                while k < before.len() && (before[k].0, before[k].1) == (route, size) {
                    had += before[k].2;
                    k += 1;
                }
                while a.peek().is_some_and(|x| (x.0, x.1) < (route, size)) {
                    a.next();
                }
                let mut has = 0u32;
                while let Some(x) = a.next_if(|x| (x.0, x.1) == (route, size)) {
                    has += x.2;
                }
                if had > has {
                    self.flows_finished.push(FlowsFinished {
                        coflow: c.id,
                        route,
                        flows: had - has,
                        bytes_per_flow: f64::from_bits(size),
                    });
                }
            }
        }
    }

    /// Whether coflow `c` of a rebuilt input has the legs `b` had, on the same routes in the same
    /// places. The routes are compared one by one: counts of flows cannot tell, since a driver
    /// that rebuilds its input may swap a flow for one on another route (the coordinator counts a
    /// flow in the width when it is asked for and adds it to the input only when it is released).
    fn same_legs(&self, b: &BlindCoflow, c: &CoflowState, input: &Input<'_>) -> bool {
        let legs = input.legs_of(c);
        b.legs.len() == legs.len() && self.legs[b.legs.clone()].iter().zip(legs).all(|(bl, l)| bl.route == l.route)
    }

    /// Drops the coflows that left and appends those that arrived, with their legs as they are
    /// now, leaving the legs of the others in place. The coflows that left are those the driver
    /// lists, or, not told what changed ([`crate::Changes::everything`]), those missing from the
    /// input, whose coflows must then be in the same order and on the same routes as before.
    /// Returns false, having changed nothing that a rebuild does not redo, when the input is not
    /// the previous coflows less those that left followed by new ones, when a kept coflow's routes
    /// changed, or when the dropped legs outnumber the live ones (then a rebuild compacts them).
    fn splice(&mut self, input: &Input<'_>) -> bool {
        let (finished, rebuilt) = (&input.changes.finished, input.changes.everything);
        let mut dropped = 0;
        let legs = &mut self.legs;
        let mut next = 0;
        self.coflows.retain(|b| {
            let keep = if rebuilt {
                let here = input.coflows.get(next).is_some_and(|c| c.id == b.id);
                next += usize::from(here);
                here
            } else {
                !finished.contains(&b.id)
            };
            if !keep {
                dropped += b.legs.len();
                for leg in &mut legs[b.legs.clone()] {
                    leg.active_flows = 0;
                }
            }
            keep
        });
        self.dropped += dropped;
        if self.coflows.len() > input.coflows.len()
            || !self.coflows.iter().zip(input.coflows).all(|(b, c)| b.id == c.id)
            || self.dropped * 2 > self.legs.len()
        {
            return false;
        }
        // Not told what changed, a coflow seen before must be where it was, on the same routes: one
        // that moved would look new here but not to the policy.
        if rebuilt
            && (!self.coflows.iter().zip(input.coflows).all(|(b, c)| self.same_legs(b, c, input))
                || input.coflows[self.coflows.len()..].iter().any(|c| self.index.contains_key(&c.id)))
        {
            return false;
        }
        for c in &input.coflows[self.coflows.len()..] {
            let first = self.legs.len();
            for leg in input.legs_of(c) {
                let active_flows = if leg.is_active() { leg.flows } else { 0 };
                self.legs.push(BlindLeg { route: leg.route, active_flows });
                self.leg_size.push(per_flow(leg));
            }
            self.coflows.push(BlindCoflow {
                id: c.id,
                arrival: c.arrival,
                weight: c.weight,
                sent: 0.0,
                job: c.job,
                job_sent: 0.0,
                width: c.width,
                pending: c.pending,
                active_flows: c.active_flows,
                legs: first..self.legs.len(),
            });
        }
        self.index.clear();
        self.index.extend(self.coflows.iter().enumerate().map(|(k, b)| (b.id, k)));
        true
    }
}

impl<B: BlindScheduler> Blinded<B> {
    /// Hands the driver the policy's rates as standing rates: only the legs whose bytes per
    /// second changed since the previous decision, or every leg with a rate after `reset` (the
    /// legs were rebuilt here, so their indices changed). A coflow whose rate holds costs only
    /// its legs with a rate of their own, now or before; one whose rate changed, all its legs.
    fn stand(&mut self, input: &Input<'_>, out: &mut Allocation, reset: bool) {
        out.standing.on = true;
        out.standing.reset = reset;
        if reset {
            self.given.clear();
            self.given_legs.clear();
            self.given_coflow.clear();
        }
        self.given.resize(self.legs.len(), 0.0);
        let mut next = std::mem::take(&mut self.spare_given);
        next.clear();
        let mut rates = std::mem::take(&mut self.spare_coflow);
        rates.clear();
        let listed = self.alloc.listed || !self.alloc.served.is_empty();
        // Cursors into the legs served now and those with a rate of their own before, both
        // ascending, as the coflows' legs are, and into the coflows' rates before, in the order
        // of the coflows (those kept stay in order, those new come after them).
        let (mut x, mut g, mut o) = (0, 0, 0);
        for k in 0..self.coflows.len() {
            let (id, legs) = (self.coflows[k].id, self.coflows[k].legs.clone());
            let rate = self.alloc.coflow_rate[k];
            rates.push((id, rate));
            let found = self.given_coflow[o..].iter().position(|&(was, _)| was == id);
            let before = found.map_or(0.0, |i| {
                o += i + 1;
                self.given_coflow[o - 1].1
            });
            let x2 = x + self.alloc.served[x..].partition_point(|&j| j < legs.end);
            // Legs before this coflow's are those of coflows that left, which the driver stopped.
            g += self.given_legs[g..].partition_point(|&j| j < legs.start);
            let g2 = g + self.given_legs[g..].partition_point(|&j| j < legs.end);
            if !listed || reset || rate.to_bits() != before.to_bits() {
                self.hand_all(input, out, k);
            } else {
                let (mut a, mut b) = (x, g);
                while a < x2 || b < g2 {
                    let (sa, sb) =
                        (self.alloc.served.get(a).filter(|_| a < x2), self.given_legs.get(b).filter(|_| b < g2));
                    let j = match (sa, sb) {
                        (Some(&ja), Some(&jb)) => ja.min(jb),
                        (Some(&ja), None) => ja,
                        (None, Some(&jb)) => jb,
                        (None, None) => unreachable!("one cursor has legs left"),
                    };
                    a += usize::from(sa == Some(&j));
                    b += usize::from(sb == Some(&j));
                    self.hand(input, out, k, j);
                }
            }
            if listed {
                next.extend(self.alloc.served[x..x2].iter().filter(|&&j| self.alloc.leg_rate[j] > 0.0));
            } else {
                next.extend(legs.filter(|&j| self.alloc.leg_rate[j] > 0.0));
            }
            (x, g) = (x2, g2);
        }
        self.spare_coflow = std::mem::replace(&mut self.given_coflow, rates);
        self.spare_given = std::mem::replace(&mut self.given_legs, next);
    }

    /// [`Blinded::hand`] for every active leg of coflow `k`, in order, in one pass over the
    /// coflow's legs side by side (a coflow whose rate changes hands thousands of them). Its own
    /// copy of the legs tells which are active without the driver's records.
    fn hand_all(&mut self, input: &Input<'_>, out: &mut Allocation, k: usize) {
        let (b, c) = (&self.coflows[k], &input.coflows[k]);
        let coflow = self.alloc.coflow_rate[k];
        let blind = &self.legs[b.legs.clone()];
        let own = &self.alloc.leg_rate[b.legs.clone()];
        let given = &mut self.given[b.legs.clone()];
        let legs = input.legs_of(c);
        for (x, (((bl, leg), &own), given)) in blind.iter().zip(legs).zip(own).zip(given).enumerate() {
            if bl.active_flows > 0 {
                stand_leg(out, c.legs.start + x, leg, coflow, own, given);
            }
        }
    }

    /// Hands the driver leg `j` of `legs` (of coflow `k`) at its rate now, for all its flows
    /// together, if that is not the one it stands at (after a reset nothing stands).
    fn hand(&mut self, input: &Input<'_>, out: &mut Allocation, k: usize, j: usize) {
        let (b, c) = (&self.coflows[k], &input.coflows[k]);
        let l = c.legs.start + (j - b.legs.start);
        let (coflow, own) = (self.alloc.coflow_rate[k], self.alloc.leg_rate[j]);
        stand_leg(out, l, &input.legs[l], coflow, own, &mut self.given[j]);
    }
}

/// Hands the driver leg `l` at `coflow` per flow plus `own`, for all its flows together, if that
/// is not `given`, the rate it stands at (which it then is).
#[inline(always)]
fn stand_leg(out: &mut Allocation, l: usize, leg: &crate::state::LegState, coflow: f64, own: f64, given: &mut f64) {
    let rate = per_flow_rate(leg, coflow, own) * leg.flows as f64;
    let rate = if rate.is_finite() { rate } else { 0.0 };
    if rate.to_bits() != given.to_bits() {
        if leg.is_active() {
            out.standing.changed.push((l, rate));
        }
        *given = rate;
    }
}

/// The bytes per second for each flow of `leg` given `coflow` as its coflow's rate and `own` on
/// top: the coflow's only if the leg crosses the fabric; zero unless the sum is a positive number
/// and the leg is active.
fn per_flow_rate(leg: &crate::state::LegState, coflow: f64, own: f64) -> f64 {
    let on_coflow = if leg.route.hops().is_empty() { 0.0 } else { coflow };
    let rate = on_coflow + own;
    if rate > 0.0 && rate.is_finite() && leg.is_active() { rate } else { 0.0 }
}

impl<B: BlindScheduler> Scheduler for Blinded<B> {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn model(&self) -> ServiceModel {
        ServiceModel::Proportional
    }

    fn flow_finish_gap(&self) -> Option<Nanos> {
        self.inner.flow_finish_gap()
    }

    /// The loads give the bytes sent at each progress report; a policy that takes no reports
    /// (an interval of `Nanos::MAX`) has one, at its first decision, and reads them never again.
    fn reads_loads(&self) -> bool {
        self.inner.report_interval() < Nanos::MAX
    }

    fn handle_arrival(&mut self, now: Nanos, coflow: CoflowId) {
        self.reported.insert(coflow, 0.0);
        self.inner.handle_arrival(now, coflow);
    }

    fn handle_finished(&mut self, now: Nanos, coflow: CoflowId) {
        let sent = self.total.get(&coflow).or(self.reported.get(&coflow)).copied().unwrap_or(0.0);
        if let Some(job) = self.job_of.remove(&coflow)
            && self.inner.job_aware()
        {
            *self.job_done.entry(job).or_default() += sent;
        }
        self.reported.remove(&coflow);
        self.total.remove(&coflow);
        self.inner.handle_finished(now, coflow);
    }

    fn handle_job_ended(&mut self, job: CoflowId) {
        self.job_done.remove(&job);
    }

    fn poll_allocation(&mut self, input: &Input<'_>, out: &mut Allocation) -> Option<Nanos> {
        // Bytes sent: a coflow's bytes, counted once, less what its senders have left.
        if input.now >= self.next_report {
            for c in input.coflows {
                // The most bytes the coflow has held: a simulated coflow comes whole and keeps
                // that total as its flows finish; a live coordinator's coflow gains flows while
                // it is scheduled (its gets come one by one) and drops the finished ones, so a
                // total counted once at first sight would miss the bytes of every later flow.
                // A driver that lists what changed keeps a coflow's legs for its life, so its
                // legs are summed once; only a rebuilt input may have changed them.
                let sum = |c: &CoflowState| input.legs_of(c).iter().map(|l| l.bytes).sum::<f64>();
                let total = match self.total.entry(c.id) {
                    std::collections::btree_map::Entry::Vacant(e) => *e.insert(sum(c)),
                    std::collections::btree_map::Entry::Occupied(mut e) => {
                        if input.changes.everything {
                            let t = e.get().max(sum(c));
                            e.insert(t);
                        }
                        *e.get()
                    }
                };
                self.sending.resize(input.fabric.resources(), false);
                for sd in input.senders_of(c) {
                    self.sending[sd.resource as usize] = true;
                }
                let remaining: f64 =
                    input.remaining_loads(c).filter(|&(r, _)| self.sending[r as usize]).map(|(_, b)| b).sum();
                for sd in input.senders_of(c) {
                    self.sending[sd.resource as usize] = false;
                }
                self.reported.insert(c.id, (total - remaining).max(0.0));
            }
            self.next_report = input.now.saturating_add(self.inner.report_interval());
        }
        let job_aware = self.inner.job_aware();
        if job_aware {
            for c in input.coflows {
                self.job_of.entry(c.id).or_insert(c.job);
            }
        }
        // The blind legs change only when flows finish, which changes their coflow's count of
        // active flows: with the same coflows on the same routes as last time, only those
        // coflows' legs are redone. A driver that tracks changes keeps a coflow's legs for its
        // life; one that rebuilds its input (`Changes::everything`: the coordinator's coflow gains
        // flows while it is scheduled and drops finished ones) may change its routes under the
        // same id, so only then are the routes compared too.
        let rebuilt = input.changes.everything;
        self.flows_finished.clear();
        if rebuilt {
            self.find_finished(input);
        } else {
            // Told which legs finished: those of coflows seen before and still active, with the
            // size their flows had, found before the legs are spliced or rebuilt.
            for &(id, j) in &input.changes.legs_finished {
                let Some(b) = self.index.get(&id).and_then(|&k| self.coflows.get(k)).filter(|b| b.id == id) else {
                    continue;
                };
                let l = b.legs.start + j as usize;
                let leg = &self.legs[l];
                if leg.active_flows > 0 && !input.changes.finished.contains(&id) {
                    self.flows_finished.push(FlowsFinished {
                        coflow: id,
                        route: leg.route,
                        flows: leg.active_flows,
                        bytes_per_flow: self.leg_size[l],
                    });
                }
            }
        }
        let same = self.coflows.len() == input.coflows.len()
            && self
                .coflows
                .iter()
                .zip(input.coflows)
                .all(|(b, c)| b.id == c.id && (!rebuilt || self.same_legs(b, c, input)));
        let spliced = !same && self.splice(input);
        // Whether the policy must take every coflow's legs as new: only when they were rebuilt
        // here; otherwise it is told which legs finished.
        let mut everything = false;
        self.legs_finished.clear();
        if same || spliced {
            if rebuilt {
                // Not told what changed, but the coflows seen before on the same routes: their legs
                // are compared one by one. A leg that finished is listed; one that came back or
                // lost only some of its flows is a change the policy is never told of leg by leg
                // (it keeps per-leg counts), so it takes everything as new.
                for (b, c) in self.coflows.iter_mut().zip(input.coflows) {
                    let legs = self.legs[b.legs.clone()].iter_mut().zip(input.legs_of(c));
                    for (j, (bl, leg)) in legs.enumerate() {
                        let active_flows = if leg.is_active() { leg.flows } else { 0 };
                        if bl.active_flows > 0 && active_flows == 0 {
                            self.legs_finished.push((b.id, j as u32, b.legs.start + j));
                        }
                        everything |= active_flows > 0 && bl.active_flows != active_flows;
                        bl.active_flows = active_flows;
                    }
                }
            } else {
                // Told which legs finished: only those change (a finished leg never comes back).
                // They are listed for the policy, those of coflows that arrived since the previous
                // decision too: the policy has not seen them, and skips them.
                for &(id, j) in &input.changes.legs_finished {
                    if let Some(&k) = self.index.get(&id) {
                        let l = self.coflows[k].legs.start + j as usize;
                        self.legs[l].active_flows = 0;
                        self.legs_finished.push((id, j, l));
                    }
                }
            }
            for (b, c) in self.coflows.iter_mut().zip(input.coflows) {
                b.active_flows = c.active_flows;
                b.width = c.width;
                b.pending = c.pending;
                b.sent = self.reported.get(&c.id).copied().unwrap_or(0.0);
            }
        } else {
            everything = true;
            self.coflows.clear();
            self.legs.clear();
            self.leg_size.clear();
            self.index.clear();
            self.dropped = 0;
            for c in input.coflows {
                let first = self.legs.len();
                for leg in input.legs_of(c) {
                    let active_flows = if leg.is_active() { leg.flows } else { 0 };
                    self.legs.push(BlindLeg { route: leg.route, active_flows });
                    self.leg_size.push(per_flow(leg));
                }
                self.index.insert(c.id, self.coflows.len());
                self.coflows.push(BlindCoflow {
                    id: c.id,
                    arrival: c.arrival,
                    weight: c.weight,
                    sent: self.reported.get(&c.id).copied().unwrap_or(0.0),
                    job: c.job,
                    job_sent: 0.0,
                    width: c.width,
                    pending: c.pending,
                    active_flows: c.active_flows,
                    legs: first..self.legs.len(),
                });
            }
        }
        // A job's bytes sent: its finished coflows' and its active ones' as last reported.
        if job_aware {
            let mut job_sent: std::collections::BTreeMap<CoflowId, f64> = std::collections::BTreeMap::new();
            for b in &self.coflows {
                *job_sent.entry(b.job).or_insert_with(|| self.job_done.get(&b.job).copied().unwrap_or(0.0)) += b.sent;
            }
            for b in &mut self.coflows {
                b.job_sent = job_sent[&b.job];
            }
        } else {
            for b in &mut self.coflows {
                b.job_sent = b.sent;
            }
        }
        let blind = BlindInput {
            now: input.now,
            fabric: input.fabric,
            coflows: &self.coflows,
            legs: &self.legs,
            next_report: self.next_report,
            everything,
            legs_finished: &self.legs_finished,
            flows_finished: &self.flows_finished,
        };
        self.alloc.reset(&blind);
        let wake = self.inner.poll_allocation(&blind, &mut self.alloc);
        // Standing legs are left with what they had at their last change: only for a policy that
        // takes no progress reports, which would read the loads.
        if out.standing.kept && self.inner.standing_rates() && !self.reads_loads() {
            if !self.alloc.served.is_empty() {
                self.alloc.served.sort();
            }
            self.stand(input, out, everything);
            return wake;
        }
        let give = |out: &mut Allocation, b: &BlindCoflow, c: &CoflowState, j: usize, coflow: f64| {
            let l = c.legs.start + (j - b.legs.start);
            let leg = &input.legs[l];
            let per_flow = per_flow_rate(leg, coflow, self.alloc.leg_rate[j]);
            if per_flow > 0.0 {
                out.give_leg(l, per_flow * leg.flows as f64, leg.remaining(c));
            }
        };
        // In the order of the legs, so that the extras come out as a scan would: every leg of a
        // coflow with a rate, or of every coflow when the policy does not list what it served,
        // and otherwise the legs listed, which a policy lists in ascending runs (coflow by
        // coflow), merged by a stable sort.
        let listed = self.alloc.listed || !self.alloc.served.is_empty();
        self.alloc.served.sort();
        let mut x = 0;
        for (k, (b, c)) in self.coflows.iter().zip(input.coflows).enumerate() {
            let (rate, end) = (self.alloc.coflow_rate[k], b.legs.end);
            let x2 = x + self.alloc.served[x..].partition_point(|&j| j < end);
            if rate > 0.0 || !listed {
                for j in b.legs.clone() {
                    give(out, b, c, j, rate);
                }
            } else {
                for &j in &self.alloc.served[x..x2] {
                    give(out, b, c, j, 0.0);
                }
            }
            x = x2;
        }
        wake
    }
}

/// A blind policy for tests and as a reference: per-flow max-min fair sharing, which needs no
/// sizes. Its results must equal [`crate::Fair`]'s, which checks the blind driver.
#[derive(Debug, Default)]
pub struct BlindFair {
    solver: crate::MaxMin,
    routes: Vec<Route>,
    weights: Vec<f64>,
    rates: Vec<f64>,
}

impl BlindScheduler for BlindFair {
    fn name(&self) -> &'static str {
        "fair-blind"
    }

    fn report_interval(&self) -> Nanos {
        Nanos::from_millis(8)
    }

    fn flow_finish_gap(&self) -> Option<Nanos> {
        Some(Nanos::ZERO)
    }

    fn poll_allocation(&mut self, input: &BlindInput<'_>, out: &mut BlindAllocation) -> Option<Nanos> {
        self.routes.clear();
        self.weights.clear();
        for c in input.coflows {
            for leg in &input.legs[c.legs.clone()] {
                self.routes.push(leg.route);
                self.weights.push(leg.active_flows as f64);
            }
        }
        self.rates.clear();
        self.rates.resize(self.routes.len(), 0.0);
        self.solver.solve(input.fabric.capacities(), &self.routes, &self.weights, &mut self.rates);
        let mut rates = self.rates.iter();
        for c in input.coflows {
            for (slot, &rate) in out.leg_rate[c.legs.clone()].iter_mut().zip(&mut rates) {
                *slot = rate;
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{Snapshot, SnapshotCoflow, SnapshotFlow};
    use crate::{Aalo, AaloConfig};
    use coflow_core::{MachineId, Rate};

    /// Gives each leg the per-flow rate its route's sender has in `rates` (none if absent).
    #[derive(Debug, Default)]
    struct BySender {
        rates: std::collections::BTreeMap<MachineId, f64>,
    }

    impl BlindScheduler for BySender {
        fn name(&self) -> &'static str {
            "by-sender"
        }

        fn report_interval(&self) -> Nanos {
            Nanos::MAX
        }

        fn standing_rates(&self) -> bool {
            true
        }

        fn poll_allocation(&mut self, input: &BlindInput<'_>, out: &mut BlindAllocation) -> Option<Nanos> {
            for (l, leg) in input.legs.iter().enumerate() {
                let sender = MachineId(leg.route.hops()[0]);
                out.leg_rate[l] = self.rates.get(&sender).copied().unwrap_or(0.0);
            }
            None
        }
    }

    /// Offered standing rates, the adapter hands over only the legs whose bytes per second
    /// changed (all their flows together), a leg no longer served at zero, and nothing when
    /// nothing changed; not offered them, it gives every served leg an extra.
    #[test]
    fn standing_rates_list_only_what_changed() {
        let mut policy = Blinded::new(BySender::default());
        // A coordinator's input has a leg per flow: two 0 -> 1, then one 2 -> 3.
        let coflows: Vec<Spec> = vec![(1, vec![(0, 1, 100.0), (0, 1, 100.0), (2, 3, 100.0)])];
        let decide = |policy: &mut Blinded<BySender>, rates: &[(u32, f64)]| {
            policy.inner.rates = rates.iter().map(|&(m, r)| (MachineId(m), r)).collect();
            let out = decide_into(policy, &coflows, Allocation::keeping_standing());
            assert!(out.standing.on && out.leg_extras().is_empty());
            out.standing.changed
        };
        assert_eq!(decide(&mut policy, &[(0, 10.0), (2, 10.0)]), vec![(0, 10.0), (1, 10.0), (2, 10.0)]);
        assert_eq!(decide(&mut policy, &[(0, 10.0), (2, 10.0)]), vec![]);
        assert_eq!(decide(&mut policy, &[(0, 10.0), (2, 30.0)]), vec![(2, 30.0)]);
        assert_eq!(decide(&mut policy, &[(2, 30.0)]), vec![(0, 0.0), (1, 0.0)]);
        assert_eq!(decide(&mut policy, &[(0, 5.0), (2, 30.0)]), vec![(0, 5.0), (1, 5.0)]);
        let out = decide_into(&mut policy, &coflows, Allocation::default());
        assert!(!out.standing.on);
        assert_eq!(out.leg_extras(), &[(0, 0.05), (1, 0.05), (2, 0.3)]);
    }

    /// Aalo, recording whether each decision took everything as new.
    #[derive(Debug)]
    struct Spy {
        inner: Aalo,
        everything: Vec<bool>,
    }

    impl BlindScheduler for Spy {
        fn name(&self) -> &'static str {
            "spy"
        }

        fn report_interval(&self) -> Nanos {
            self.inner.report_interval()
        }

        fn handle_finished(&mut self, now: Nanos, coflow: CoflowId) {
            self.inner.handle_finished(now, coflow);
        }

        fn poll_allocation(&mut self, input: &BlindInput<'_>, out: &mut BlindAllocation) -> Option<Nanos> {
            self.everything.push(input.everything);
            self.inner.poll_allocation(input, out)
        }
    }

    /// Coflow `id` of flows `(src, dst, remaining)`, each of 100 bytes, on machines 0 to 7.
    type Spec = (u64, Vec<(u32, u32, f64)>);

    /// The input a coordinator builds from these coflows (every decision from scratch), decided by
    /// `policy`.
    fn decide(policy: &mut dyn Scheduler, coflows: &[Spec]) -> Allocation {
        decide_into(policy, coflows, Allocation::default())
    }

    /// [`decide`] into `out` (which may offer standing rates).
    fn decide_into(policy: &mut dyn Scheduler, coflows: &[Spec], mut out: Allocation) -> Allocation {
        let fabric = Fabric::big_switch(8, Rate::from_bytes_per_sec(100.0));
        let mut snapshot = Snapshot::default();
        snapshot.clear(ServiceModel::Proportional);
        for (id, flows) in coflows {
            let coflow = SnapshotCoflow {
                id: CoflowId(*id),
                job: CoflowId(*id),
                arrival: Nanos::from_millis(*id),
                deadline: None,
                weight: 1.0,
                width: flows.len() as u32,
                pending: 0,
            };
            let flows: Vec<SnapshotFlow> = flows
                .iter()
                .map(|&(s, d, remaining)| SnapshotFlow { src: MachineId(s), dst: MachineId(d), size: 100.0, remaining })
                .collect();
            snapshot.push_coflow(&fabric, &coflow, &flows);
        }
        policy.poll_allocation(&snapshot.input(Nanos::ZERO, &fabric), &mut out);
        out
    }

    #[test]
    fn a_rebuilt_input_keeps_the_coflows_seen_before() {
        // Coflows in arrival order (a coflow's id is its arrival in milliseconds), as a driver
        // gives them.
        let a: Spec = (1, vec![(0, 4, 100.0), (0, 5, 50.0), (1, 4, 10.0)]);
        let b: Spec = (2, vec![(1, 5, 100.0), (2, 6, 100.0)]);
        let c: Spec = (3, vec![(2, 4, 30.0), (3, 7, 100.0)]);
        let d: Spec = (4, vec![(0, 6, 100.0), (3, 4, 100.0)]);
        let e: Spec = (5, vec![(1, 7, 100.0)]);
        let a_less: Spec = (1, vec![(0, 4, 100.0), (1, 4, 10.0)]);
        let c_less: Spec = (3, vec![(3, 7, 100.0)]);
        // C's one flow swapped for one on another route, as many flows and as many active: what
        // the coordinator gives when a flow finishes and a held one is released before the next
        // decision.
        let c_swapped: Spec = (3, vec![(3, 6, 100.0)]);
        // Decisions, and whether the policy must take everything as new at each: the first (all
        // new to both, so nothing to rebuild); B leaves and D arrives (kept); C leaves (kept); C
        // comes back before D, where it would look new to the adapter but not to the policy
        // (rebuilt); A and C lose a flow, so their legs changed (rebuilt); D leaves (kept); C's
        // flow is swapped (rebuilt); E arrives (kept, and new).
        let steps: Vec<(Vec<Spec>, bool)> = vec![
            (vec![a.clone(), b, c.clone()], false),
            (vec![a.clone(), c.clone(), d.clone()], false),
            (vec![a.clone(), d.clone()], false),
            (vec![a, c, d.clone()], true),
            (vec![a_less.clone(), c_less.clone(), d], true),
            (vec![a_less.clone(), c_less], false),
            (vec![a_less.clone(), c_swapped.clone()], true),
            (vec![a_less, c_swapped, e], false),
        ];
        let mut kept = Blinded::new(Spy { inner: Aalo::new(AaloConfig::default()), everything: Vec::new() });
        for (k, (coflows, everything)) in steps.iter().enumerate() {
            let fresh = decide(&mut Blinded::new(Aalo::new(AaloConfig::default())), coflows);
            assert_eq!(decide(&mut kept, coflows), fresh, "decision {k}");
            assert_eq!(kept.inner.everything.last(), Some(everything), "decision {k}");
        }
    }

    #[test]
    fn a_job_keeps_its_finished_coflows_bytes_until_it_ends() {
        let mut policy = Blinded::new(Aalo::new(AaloConfig { job_aware: true, ..Default::default() }));
        for id in [1, 2] {
            policy.handle_arrival(Nanos::ZERO, CoflowId(id));
            decide(&mut policy, &[(id, vec![(0, 4, 40.0)])]);
            policy.handle_finished(Nanos::ZERO, CoflowId(id));
        }
        assert_eq!(policy.job_done.get(&CoflowId(1)), Some(&100.0), "a coflow's bytes over the fabric");
        policy.handle_job_ended(CoflowId(1));
        assert_eq!(policy.job_done.keys().collect::<Vec<_>>(), [&CoflowId(2)], "only the ended job is forgotten");
    }
}
