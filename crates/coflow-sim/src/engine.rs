//! The event loop.
//!
//! Between two events every rate is constant, so the state moves in closed form:
//! - a leg (proportional model) given rate `σ` at a decision at `t₀` keeps a remaining fraction
//!   `φ(t) = φ(t₀)·(1 − σ·(t − t₀))` and finishes at `t₀ + 1/σ`; all legs of a coflow without an
//!   extra share one factor, so `legs::LegModel` moves a coflow at a time;
//! - a route (route model) with per-flow rate `a` advances a clock `A(t) = A(t₀) + a·(t − t₀)`
//!   shared by its flows, and a flow that joined when the clock read `A₀` with `s` bytes finishes
//!   when the clock reaches `A₀ + s` (virtual time, as in fair queueing).
//!
//! Finish times are rounded up to the next nanosecond, so flows that end together end at the
//! same event, and events at equal times are processed together.

use std::ops::ControlFlow;
use std::sync::Arc;

use coflow_core::{Coflow, Nanos, Rate, Workload};
use coflow_sched::policy::{self, Unservable};
use coflow_sched::{Allocation, Changes, Fabric, Input, ResourceId, Scheduler, ServiceModel};

use crate::dynamics::{BigSwitchSpec, Capacities, ConnectionCaps, FabricRun, FabricSpec, Routing, Split};
use crate::legs::{Finished, LegModel};
use crate::report::CoflowOutcome;
use crate::routes::RouteModel;
use crate::wan::WanConfig;

/// How many policy wake-ups in a row may pass with nothing moving and nothing left to arrive
/// before the simulation gives up on the coflows still active.
const MAX_IDLE_WAKES: u32 = 10_000;

/// How far a replay's clock goes, in years: simulated time is counted in nanoseconds in 64 bits,
/// so a coflow unfinished by then (about 584 years) stays unfinished.
pub const END_OF_TIME_YEARS: f64 = u64::MAX as f64 / 1e9 / 3.156e7;

/// When a replay ends with coflows unfinished, in the words every report's note uses.
pub fn replay_end() -> String {
    format!(
        "a replay ends at {END_OF_TIME_YEARS:.0} years of simulated time, or once the policy serves none of the \
         coflows left"
    )
}

/// How many turns of the event loop may pass without asking `progress` whether to go on: a few
/// milliseconds of a replay whose coflows seldom finish.
const ASK_EVERY: u32 = 1024;

/// A replay its caller stopped before its end ([`simulate_with_progress`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the replay was stopped before its end")]
pub struct Stopped;

/// How to run a simulation: on which fabric (the big switch by default), and what to check.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// The fabric and its dynamics, built afresh for each run (default: the big switch with
    /// ports of 1 Gbit/s).
    pub fabric: Arc<dyn FabricSpec>,
    /// Check at every decision that no resource is allocated past its capacity and that every
    /// finishing flow has delivered exactly its bytes; panics on a violation (a bug). Costs time
    /// in the number of flows, so it is meant for tests.
    pub check_invariants: bool,
    /// Tell the policy at every decision to take everything as new ([`Changes::everything`])
    /// instead of what changed since its last decision. The results must not differ (a property
    /// test checks it for every policy); the decisions cost more. For tests and `coflow bench`.
    pub from_scratch: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig::big_switch(Rate::GBPS)
    }
}

impl SimConfig {
    /// The big switch with ports of `port_rate`, invariants unchecked.
    pub fn big_switch(port_rate: Rate) -> SimConfig {
        SimConfig::on(BigSwitchSpec { port_rate })
    }

    /// The wide area `wan`, invariants unchecked.
    pub fn wide_area(wan: WanConfig) -> SimConfig {
        SimConfig::on(wan)
    }

    /// The fabric `spec` builds, invariants unchecked.
    pub fn on(spec: impl FabricSpec + 'static) -> SimConfig {
        SimConfig { fabric: Arc::new(spec), check_invariants: false, from_scratch: false }
    }
}

/// The outcome of one simulation.
#[derive(Clone, Debug, PartialEq)]
pub struct SimResult {
    /// The policy's short name.
    pub policy: String,
    /// One outcome per coflow, in workload order.
    pub outcomes: Vec<CoflowOutcome>,
    /// When the last coflow finished.
    pub makespan: Nanos,
    /// Events processed (distinct times at which something happened).
    pub events: u64,
    /// Times the policy was asked for an allocation.
    pub decisions: u64,
    /// Whether the policy does admission control (and so may reject coflows).
    pub admission_control: bool,
    /// Bytes sent over multi-path detours (each crossed one more link than its direct route):
    /// the extra wide-area traffic routing cost. Zero unless multi-path routing is on.
    pub relayed_bytes: f64,
    /// Whether it ran on a wide area ([`FabricSpec::wide_area`]) rather than the big switch.
    pub wide_area: bool,
}

/// Replays `workload` under `policy` on the fabric `cfg` names; a policy that cannot serve that
/// fabric (the registry says so) is refused, not run.
///
/// # Panics
/// On a fabric that places fewer machines than the workload has.
pub fn simulate(workload: &Workload, policy: Box<dyn Scheduler>, cfg: &SimConfig) -> Result<SimResult, Unservable> {
    match simulate_with_progress(workload, policy, cfg, &mut |_| ControlFlow::Continue(())) {
        Ok(r) => Ok(r),
        Err(Halted::Unservable(e)) => Err(e),
        Err(Halted::Stopped(_)) => unreachable!("a replay that always goes on is never stopped"),
    }
}

/// Why [`simulate_with_progress`] has no result.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Halted {
    /// The policy cannot serve the fabric; nothing ran.
    #[error(transparent)]
    Unservable(#[from] Unservable),
    /// `progress` answered [`ControlFlow::Break`].
    #[error(transparent)]
    Stopped(#[from] Stopped),
}

/// [`simulate`], calling `progress` with the number of finished coflows whenever it changes and
/// at least every 1,024 turns of the event loop, so that a replay whose coflows seldom
/// finish can be stopped too: the replay ends, with no result, as soon as `progress` answers
/// [`ControlFlow::Break`].
pub fn simulate_with_progress(
    workload: &Workload,
    policy: Box<dyn Scheduler>,
    cfg: &SimConfig,
    progress: &mut dyn FnMut(usize) -> ControlFlow<()>,
) -> Result<SimResult, Halted> {
    let start = workload.coflows.first().map_or(Nanos::ZERO, |c| c.arrival);
    let run = cfg.fabric.build(workload.machines, start);
    policy::check_serves(policy.name(), &run.fabric)?;
    let mut e = Engine::new(workload, policy, cfg, run, start);
    match e.run(progress) {
        ControlFlow::Continue(()) => Ok(e.finish()),
        ControlFlow::Break(()) => Err(Stopped.into()),
    }
}

struct Engine<'w> {
    w: &'w Workload,
    policy: Box<dyn Scheduler>,
    cfg: SimConfig,
    fabric: Fabric,
    /// How the fabric's capacities change, how arrivals are routed, and the connections' caps.
    capacities: Box<dyn Capacities>,
    routing: Box<dyn Routing>,
    connections: Box<dyn ConnectionCaps>,
    model: ServiceModel,
    now: Nanos,
    next_arrival: usize,
    wake: Option<Nanos>,
    /// Per workload coflow: when it finished, whether a policy rejected it, and how many of its
    /// flows are unfinished.
    finish: Vec<Option<Nanos>>,
    /// Per workload coflow: the sum of its finished flows' completion times, in seconds.
    flow_time: Vec<f64>,
    rejected: Vec<bool>,
    rejected_ids: Vec<coflow_core::CoflowId>,
    pending: Vec<u32>,
    done: usize,
    /// Coflows released and not yet finished or rejected.
    live: usize,

    // Dependencies: per workload coflow, its parents not finished yet, its children, when it was
    // released (its arrival unless it waited for parents), and its job; coflows whose last parent
    // just finished and whose arrival has passed, to release now.
    parents_left: Vec<u32>,
    children: Vec<Vec<u32>>,
    release: Vec<Nanos>,
    jobs: Vec<usize>,
    ready: Vec<usize>,
    /// Whether any coflow has parents.
    deps: bool,

    // Proportional model: active coflows, their legs and scales.
    prop: LegModel,
    finished: Vec<Finished>,

    // Route model: routes with unfinished flows, their queues, clocks and planned completions.
    routes: RouteModel,

    /// What changed since the policy's last decision: filled as events happen, handed over and
    /// cleared at each decision.
    changes: Changes,
    alloc: Allocation,
    last_decision: Nanos,
    events: u64,
    decisions: u64,

    /// Whether the capacities changed at `now`.
    new_capacities: bool,
    /// Bytes sent over detours.
    relayed: f64,
}

impl<'w> Engine<'w> {
    fn new(w: &'w Workload, policy: Box<dyn Scheduler>, cfg: &SimConfig, run: FabricRun, start: Nanos) -> Engine<'w> {
        let n = w.coflows.len();
        let FabricRun { fabric, capacities, routing, connections } = run;
        let mut prop = LegModel::default();
        prop.track = cfg.fabric.wide_area();
        let jobs = w.jobs();
        let mut children = vec![Vec::new(); n];
        let mut parents_left = vec![0u32; n];
        if w.has_dependencies() {
            prop.job_of = jobs.iter().map(|&j| w.coflows[j].id).collect();
            for (k, parents) in w.parent_indices().into_iter().enumerate() {
                parents_left[k] = parents.len() as u32;
                for p in parents {
                    children[p].push(k as u32);
                }
            }
        }
        // Route-model policies pool flows by route; caps per connection apply to legs only.
        prop.connections = connections.per_flow() && policy.model() == ServiceModel::Proportional;
        // A policy that reads no loads has its legs brought forward when read, not at every event.
        prop.lazy = !policy.reads_loads();
        let connections_capped = prop.connections;
        Engine {
            w,
            model: policy.model(),
            policy,
            cfg: cfg.clone(),
            fabric,
            capacities,
            routing,
            connections,
            now: start,
            next_arrival: 0,
            wake: None,
            finish: vec![None; n],
            flow_time: vec![0.0; n],
            rejected: vec![false; n],
            rejected_ids: Vec::new(),
            pending: vec![0; n],
            done: 0,
            live: 0,
            parents_left,
            children,
            release: w.coflows.iter().map(|c| c.arrival).collect(),
            jobs,
            ready: Vec::new(),
            deps: w.has_dependencies(),
            prop,
            finished: Vec::new(),
            routes: RouteModel::default(),
            // The first decision takes everything as new.
            changes: Changes { everything: true, ..Changes::default() },
            // Legs keep standing rates, except under per-connection caps (which a standing leg
            // would have to follow as they change).
            alloc: if connections_capped { Allocation::default() } else { Allocation::keeping_standing() },
            last_decision: Nanos::ZERO,
            events: 0,
            decisions: 0,
            new_capacities: false,
            relayed: 0.0,
        }
    }

    fn run(&mut self, progress: &mut dyn FnMut(usize) -> ControlFlow<()>) -> ControlFlow<()> {
        // Consecutive wake-ups at which nothing was moving and no coflow was left to arrive: a
        // policy that keeps asking to decide while serving nothing would otherwise spin forever.
        let mut idle_wakes = 0u32;
        let mut unasked = 0u32;
        loop {
            // New capacities: decide again, so nothing runs over them.
            self.new_capacities = self.capacities.update(&mut self.fabric, self.now);
            let mut changed = self.new_capacities;
            self.changes.capacities |= self.new_capacities;
            if self.prop.connections && self.connections.update(self.now) {
                // New connection caps: redraw every leg's and decide again.
                self.prop.refresh_caps(&*self.connections, 0);
                changed = true;
            }
            while self.next_arrival < self.w.coflows.len() && self.w.coflows[self.next_arrival].arrival <= self.now {
                // A coflow with parents still running waits for them (`ready`). With dependencies,
                // arrivals join the coflows released now, after completions (see `release_ready`).
                if self.parents_left[self.next_arrival] == 0 {
                    if self.deps {
                        self.ready.push(self.next_arrival);
                    } else {
                        self.arrive(self.next_arrival);
                    }
                }
                self.next_arrival += 1;
                changed = true;
            }
            let before = self.done;
            let flows_finished = self.complete();
            // Coflows whose parents have all finished are released now; those that finish on
            // release may release others.
            if !self.ready.is_empty() {
                self.release_ready();
                changed = true;
            }
            unasked += 1;
            if self.done != before || unasked == ASK_EVERY {
                unasked = 0;
                progress(self.done)?;
                changed |= self.done != before;
            }
            if flows_finished && let Some(gap) = self.policy.flow_finish_gap() {
                let due = self.last_decision.saturating_add(gap);
                changed |= self.now >= due;
                // Flows that finish inside the gap are picked up when it closes.
                if !changed {
                    self.wake = Some(self.wake.unwrap_or(Nanos::MAX).min(due));
                }
            }
            if changed || self.wake.is_some_and(|t| t <= self.now) {
                self.decide();
            }
            let next = self.next_event();
            if next == Nanos::MAX {
                break;
            }
            let moving = self.prop.next_time() != Nanos::MAX || self.routes.next_time(self.now) != Nanos::MAX;
            // Coflows held for parents that can never finish (a rejected ancestor) stay unfinished.
            if moving || self.next_arrival < self.w.coflows.len() {
                idle_wakes = 0;
            } else {
                idle_wakes += 1;
                if idle_wakes > MAX_IDLE_WAKES {
                    // The policy serves nothing and nothing else will happen: its coflows are
                    // reported unfinished rather than simulated forever.
                    break;
                }
            }
            self.advance(next);
        }
        ControlFlow::Continue(())
    }

    /// A coflow finished (not rejected): its children whose parents have all finished and whose
    /// arrival has passed are released at once.
    fn on_finished(&mut self, k: usize) {
        self.finish[k] = Some(self.now);
        self.done += 1;
        for i in 0..self.children[k].len() {
            let ch = self.children[k][i] as usize;
            self.parents_left[ch] -= 1;
            if self.parents_left[ch] == 0 && ch < self.next_arrival {
                self.ready.push(ch);
            }
        }
    }

    /// Releases the coflows in `ready` at `now`, in the order of their ids.
    ///
    /// Policies see active coflows ordered by arrival and then id (`Input::coflows`), and a
    /// released coflow's arrival is its release: coflows arriving now and children whose parents
    /// finished now all have `now` as their arrival, so they enter by id. Those with nothing to
    /// send finish on release and may release others first.
    fn release_ready(&mut self) {
        let mut live = Vec::new();
        while !self.ready.is_empty() {
            for k in std::mem::take(&mut self.ready) {
                if self.remote_flows(&self.w.coflows[k]) == 0 {
                    self.arrive(k);
                } else {
                    live.push(k);
                }
            }
        }
        live.sort_by_key(|&k| self.w.coflows[k].id);
        for k in live {
            self.arrive(k);
        }
    }

    /// The flows of `c` that cross the fabric.
    fn remote_flows(&self, c: &Coflow) -> u32 {
        let fabric = &self.fabric;
        c.flows.iter().filter(|f| f.crosses_fabric() && !fabric.route(f.src, f.dst).is_local()).count() as u32
    }

    /// Admits (releases) workload coflow `k` at `now`: its arrival, or later if it waited for
    /// parents, in which case it enters the policy with `now` as its arrival.
    fn arrive(&mut self, k: usize) {
        let w = self.w;
        let released;
        let c = if w.coflows[k].arrival == self.now {
            &w.coflows[k]
        } else {
            released = Coflow { arrival: self.now, ..w.coflows[k].clone() };
            &released
        };
        self.release[k] = self.now;
        let remote = self.remote_flows(c);
        let fabric = &self.fabric;
        self.pending[k] = remote;
        if remote == 0 {
            // No flow has bytes to move across the fabric: the coflow is done on arrival.
            self.on_finished(k);
            return;
        }
        self.live += 1;
        self.policy.handle_arrival(self.now, c.id);
        self.changes.arrived.push(c.id);
        match self.model {
            ServiceModel::Proportional => {
                self.prop.sync(self.now);
                let split = if self.routing.splits() {
                    self.prop.sync_loads(self.now);
                    let mut loads = vec![0.0; self.fabric.resources()];
                    for c in &self.prop.coflows {
                        for (r, b) in self.prop.loads[c.loads.clone()].iter().map(|&(r, b)| (r, b * c.scale)) {
                            loads[r as usize] += b;
                        }
                    }
                    let (split, relayed) = self.routing.split(&self.fabric, &loads, c);
                    self.relayed += relayed;
                    split
                } else {
                    Split::new()
                };
                let first_leg = self.prop.legs.len();
                self.prop.arrive(&self.fabric, c, k, &split);
                if self.prop.connections {
                    self.prop.refresh_caps(&*self.connections, first_leg);
                }
            }
            ServiceModel::Route => {
                for f in c.flows.iter().filter(|f| f.crosses_fabric() && !fabric.route(f.src, f.dst).is_local()) {
                    self.routes.add_flow(self.fabric.route(f.src, f.dst), f.size.as_f64(), k as u32, self.now);
                }
            }
        }
    }

    /// Finishes everything due at `now`; returns whether anything finished.
    fn complete(&mut self) -> bool {
        match self.model {
            ServiceModel::Proportional => self.complete_legs(),
            ServiceModel::Route => self.complete_routes(),
        }
    }

    fn complete_legs(&mut self) -> bool {
        self.prop.sync(self.now);
        let mut any = self.prop.complete(self.cfg.check_invariants, &mut self.finished, &mut self.flow_time);
        if self.new_capacities {
            // A decision on new capacities is coming: legs due a nanosecond later end now.
            any |= self.prop.retire_dust(&mut self.finished, &mut self.flow_time);
        }
        for (k, id) in std::mem::take(&mut self.finished) {
            self.pending[k] = 0;
            self.live -= 1;
            self.on_finished(k);
            self.policy.handle_finished(self.now, id);
            self.changes.finished.push(id);
        }
        self.changes.legs_finished.append(&mut self.prop.legs_finished);
        any
    }

    fn complete_routes(&mut self) -> bool {
        let any = self.routes.complete(self.now, self.cfg.check_invariants);
        for i in 0..self.routes.finished.len() {
            let k = self.routes.finished[i] as usize;
            self.flow_time[k] += (self.now - self.release[k]).as_secs_f64();
            self.pending[k] -= 1;
            if self.pending[k] == 0 {
                self.live -= 1;
                self.on_finished(k);
                self.policy.handle_finished(self.now, self.w.coflows[k].id);
                self.changes.finished.push(self.w.coflows[k].id);
            }
        }
        any
    }

    fn decide(&mut self) {
        self.prop.sync_all(self.now);
        self.prop.reshaped(&mut self.changes.reshaped);
        // Renormalised scales round remaining bytes differently: take them as new.
        self.changes.everything |= self.prop.renormalize();
        self.routes.prepare(self.now, self.policy.reads_min_remaining());
        if self.cfg.from_scratch {
            self.changes.everything = true;
        }
        if self.changes.everything {
            self.changes.clear();
            self.changes.everything = true;
            self.routes.touched.clear();
        } else {
            let routes = &mut self.changes.routes;
            routes.append(&mut self.routes.touched);
            routes.sort_unstable();
            routes.dedup();
        }
        let input = Input {
            now: self.now,
            changes: &self.changes,
            fabric: &self.fabric,
            coflows: &self.prop.coflows,
            legs: &self.prop.legs,
            senders: &self.prop.senders,
            loads: &self.prop.loads,
            routes: &self.routes.states,
        };
        self.alloc.reset(&input);
        self.wake = self.policy.poll_allocation(&input, &mut self.alloc).map(|t| t.max(Nanos(self.now.0 + 1)));
        self.decisions += 1;
        self.last_decision = self.now;
        self.policy.poll_rejected(&mut self.rejected_ids);
        if !self.rejected_ids.is_empty() {
            assert!(self.model == ServiceModel::Proportional, "only proportional policies reject coflows");
            // The next decision is told that they left.
            self.changes.clear();
            for k in self.prop.reject(&self.rejected_ids) {
                // Its children are never released: their input never arrives.
                self.changes.finished.push(self.w.coflows[k].id);
                self.rejected[k] = true;
                self.pending[k] = 0;
                self.done += 1;
                self.live -= 1;
            }
            self.rejected_ids.clear();
            // The allocation was made for an input that still held them: decide again without.
            self.decide();
            return;
        }

        // Route rates are checked as the route model takes them. Every rate at once first, in two
        // plain passes without a branch per rate (`r >= 0.0` is false for a NaN), and only on a
        // failure again one by one, to name the first invalid rate.
        let valid = |ok: bool, r: f64| ok & (r >= 0.0);
        let rates = &self.alloc.coflow_rate;
        let (extras, standing) = (self.alloc.leg_extras(), &self.alloc.standing.changed);
        if !(rates.iter().fold(true, |ok, &r| valid(ok, r))
            && extras.iter().fold(true, |ok, &(_, r)| valid(ok, r))
            && standing.iter().fold(true, |ok, &(_, r)| valid(ok, r)))
        {
            for &r in rates.iter().chain(extras.iter().chain(standing).map(|(_, k)| k)) {
                assert!(r >= 0.0 && !r.is_nan(), "policy {} gave an invalid rate {r}", self.policy.name());
            }
        }
        if self.prop.connections {
            crate::wan::cap_connections(&input, &self.prop.cap, &mut self.alloc, self.cfg.check_invariants);
        }
        // What the allocation uses, checked once the standing rates in force are added to it.
        let used = self.cfg.check_invariants.then(|| self.alloc.usage(&input));
        // The legs this decision sends apart from their coflows' rates (those the model puts in
        // force), named for the next decision's `Changes::reshaped_legs`.
        let mut reshaped = std::mem::take(&mut self.changes.reshaped_legs);
        reshaped.clear();
        let prop = &self.prop;
        let listed = if self.policy.reads_reshaped_legs() { self.alloc.leg_extras() } else { &[] };
        reshaped.extend(listed.iter().filter(|&&(l, kappa)| kappa != 0.0 && prop.legs[l].is_active()).map(
            |&(l, _)| {
                let c = &prop.coflows[prop.owner[l] as usize];
                (c.id, (l - c.legs.start) as u32)
            },
        ));
        let now = self.now;
        self.prop.apply(&self.alloc);
        if let Some(mut used) = used {
            self.prop.steady_usage(&mut used);
            for (r, (&u, &cap)) in used.iter().zip(self.fabric.capacities()).enumerate() {
                assert!(
                    u <= cap * (1.0 + 1e-6) + 1e-6,
                    "{}: {} allocated {u} B/s over its capacity {cap} at {}",
                    self.policy.name(),
                    self.fabric.resource_name(r as ResourceId),
                    self.now
                );
            }
        }
        if self.alloc.shares.on {
            self.routes.apply_shares(&self.alloc.shares, now, self.policy.name());
        } else {
            self.routes.apply(&self.alloc.route_rate, now, self.policy.name());
        }
        self.changes.clear();
        self.changes.reshaped_legs = reshaped;
    }

    fn next_event(&self) -> Nanos {
        let mut next = self.w.coflows.get(self.next_arrival).map_or(Nanos::MAX, |c| c.arrival);
        if let Some(t) = self.wake {
            next = next.min(t);
        }
        let legs = self.prop.next_time();
        let routes = self.routes.next_time(self.now);
        // Capacities change only matter while something is active.
        if self.live > 0 {
            next = next.min(self.capacities.next_change());
            if self.prop.connections {
                next = next.min(self.connections.next_change());
            }
        }
        next.min(legs).min(routes)
    }

    /// Moves time forward to `to`; legs and routes follow lazily.
    fn advance(&mut self, to: Nanos) {
        debug_assert!(to > self.now, "time must move forward");
        self.now = to;
        self.events += 1;
    }

    fn finish(self) -> SimResult {
        let spec = &self.cfg.fabric;
        let mut outcomes: Vec<CoflowOutcome> = self
            .w
            .coflows
            .iter()
            .zip(self.finish.iter().zip(&self.rejected).zip(&self.flow_time))
            .map(|(c, ((&finish, &rejected), &flow_time))| {
                let isolated = spec.isolated_cct(&self.fabric, c);
                let mut o = CoflowOutcome::new(c, finish, rejected, isolated);
                o.flow_time_s = flow_time;
                o
            })
            .collect();
        for (k, o) in outcomes.iter_mut().enumerate() {
            o.release = self.release[k];
            o.job = self.jobs[k];
        }
        for &(k, receiver, t) in &self.prop.leg_done {
            let groups = &mut outcomes[k].groups;
            match groups.iter_mut().find(|(r, _)| *r == receiver) {
                Some(g) => g.1 = g.1.max(t),
                None => groups.push((receiver, t)),
            }
        }
        for o in &mut outcomes {
            o.groups.sort();
        }
        let makespan = self.finish.iter().flatten().copied().max().unwrap_or(Nanos::ZERO);
        SimResult {
            policy: self.policy.name().to_string(),
            outcomes,
            makespan,
            events: self.events,
            decisions: self.decisions,
            admission_control: self.policy.admission_control(),
            relayed_bytes: self.relayed,
            wide_area: spec.wide_area(),
        }
    }
}
