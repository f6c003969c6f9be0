//! The event loop.
//!
//! Between two events every rate is constant, so the state moves in closed form:
//! - a sender group (proportional model) with rate `σ` keeps a remaining fraction
//!   `φ(t) = φ(t₀)·(1 − σ·(t − t₀))` and finishes at `t₀ + 1/σ`;
//! - a route (route model) with per-flow rate `a` advances a clock `A(t) = A(t₀) + a·(t − t₀)`
//!   shared by its flows, and a flow that joined when the clock read `A₀` with `s` bytes finishes
//!   when the clock reaches `A₀ + s` (virtual time, as in fair queueing).
//!
//! Finish times are rounded up to the next nanosecond, so flows that end together end at the
//! same event, and events at equal times are processed together.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};

use coflow_core::{Nanos, Rate, Workload};
use coflow_sched::{
    Allocation, CoflowState, Fabric, GroupState, Input, ResourceId, Route, RouteState, Scheduler, ServiceModel,
};

use crate::report::CoflowOutcome;

/// How to run a simulation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SimConfig {
    /// Capacity of every ingress and egress port (default 1 Gbit/s).
    pub port_rate: Rate,
    /// Check at every decision that no resource is allocated past its capacity and that every
    /// finishing flow has delivered exactly its bytes; panics on a violation (a bug). Costs time
    /// in the number of flows, so it is meant for tests.
    pub check_invariants: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig { port_rate: Rate::GBPS, check_invariants: false }
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
}

/// Replays `workload` under `policy`.
pub fn simulate(workload: &Workload, policy: Box<dyn Scheduler>, cfg: &SimConfig) -> SimResult {
    simulate_with_progress(workload, policy, cfg, &mut |_| {})
}

/// Replays `workload` under `policy`, calling `progress` with the number of finished coflows
/// whenever it changes.
pub fn simulate_with_progress(
    workload: &Workload,
    policy: Box<dyn Scheduler>,
    cfg: &SimConfig,
    progress: &mut dyn FnMut(usize),
) -> SimResult {
    let mut e = Engine::new(workload, policy, cfg);
    e.run(progress);
    e.finish()
}

/// A pair of machines' flows of one coflow while it is being admitted: bytes per resource, flow
/// count, largest flow.
type PairAcc = (BTreeMap<ResourceId, f64>, u32, f64);

/// A route's flows, ordered by the clock reading at which each finishes.
#[derive(Debug, Default)]
struct RouteQueue {
    clock: f64,
    heap: BinaryHeap<Reverse<(Theta, u32)>>,
}

/// A finishing threshold on a route's clock, ordered totally.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Theta(f64);

impl Eq for Theta {}

impl Ord for Theta {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

impl PartialOrd for Theta {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

struct Engine<'w> {
    w: &'w Workload,
    policy: Box<dyn Scheduler>,
    cfg: SimConfig,
    fabric: Fabric,
    model: ServiceModel,
    now: Nanos,
    next_arrival: usize,
    wake: Option<Nanos>,
    /// Per workload coflow: when it finished, and how many of its flows are unfinished.
    finish: Vec<Option<Nanos>>,
    pending: Vec<u32>,
    done: usize,

    // Proportional model: active coflows, their sender groups and the groups' loads.
    coflows: Vec<CoflowState>,
    widx: Vec<usize>,
    groups: Vec<GroupState>,
    /// Each group's rate from the last decision and its planned finish time.
    group_rate: Vec<f64>,
    group_finish: Vec<Nanos>,
    /// Planned group completions, `(finish, group)`; entries whose time no longer matches
    /// `group_finish` are stale and skipped.
    group_heap: BinaryHeap<Reverse<(Nanos, u32)>>,
    /// The time up to which every group's `phi` is current. Groups are brought forward lazily,
    /// only when a decision needs them, so a flow finishing costs `O(log n)`.
    phi_time: Nanos,
    loads: Vec<(ResourceId, f64)>,

    // Route model: routes with unfinished flows, their queues and planned head completions.
    routes: Vec<RouteState>,
    queues: Vec<RouteQueue>,
    route_of: HashMap<Route, usize>,
    route_finish: Vec<Nanos>,

    alloc: Allocation,
    last_decision: Nanos,
    events: u64,
    decisions: u64,
}

impl<'w> Engine<'w> {
    fn new(w: &'w Workload, policy: Box<dyn Scheduler>, cfg: &SimConfig) -> Engine<'w> {
        let n = w.coflows.len();
        Engine {
            w,
            model: policy.model(),
            policy,
            cfg: *cfg,
            fabric: Fabric::big_switch(w.machines, cfg.port_rate),
            now: w.coflows.first().map_or(Nanos::ZERO, |c| c.arrival),
            next_arrival: 0,
            wake: None,
            finish: vec![None; n],
            pending: vec![0; n],
            done: 0,
            coflows: Vec::new(),
            widx: Vec::new(),
            groups: Vec::new(),
            group_rate: Vec::new(),
            group_finish: Vec::new(),
            group_heap: BinaryHeap::new(),
            phi_time: Nanos::ZERO,
            loads: Vec::new(),
            routes: Vec::new(),
            queues: Vec::new(),
            route_of: HashMap::new(),
            route_finish: Vec::new(),
            alloc: Allocation::default(),
            last_decision: Nanos::ZERO,
            events: 0,
            decisions: 0,
        }
    }

    fn run(&mut self, progress: &mut dyn FnMut(usize)) {
        loop {
            let mut changed = false;
            while self.next_arrival < self.w.coflows.len() && self.w.coflows[self.next_arrival].arrival <= self.now {
                self.arrive(self.next_arrival);
                self.next_arrival += 1;
                changed = true;
            }
            let before = self.done;
            let flows_finished = self.complete();
            if self.done != before {
                progress(self.done);
                changed = true;
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
            self.advance(next);
        }
    }

    /// Admits workload coflow `k` at `now`.
    fn arrive(&mut self, k: usize) {
        let c = &self.w.coflows[k];
        let remote = c.flows.iter().filter(|f| !f.is_local()).count() as u32;
        self.pending[k] = remote;
        if remote == 0 {
            // Every flow is local: nothing crosses the fabric, the coflow is done on arrival.
            self.finish[k] = Some(self.now);
            self.done += 1;
            return;
        }
        self.policy.handle_arrival(self.now, c.id);
        match self.model {
            ServiceModel::Proportional => {
                // One group per pair of machines; sum its bytes per resource it crosses.
                let mut by_pair: BTreeMap<(u32, u32), PairAcc> = BTreeMap::new();
                for f in c.flows.iter().filter(|f| !f.is_local()) {
                    let g = by_pair.entry((f.src.0, f.dst.0)).or_default();
                    for &r in self.fabric.route(f.src, f.dst).hops() {
                        *g.0.entry(r).or_default() += f.size.as_f64();
                    }
                    g.1 += 1;
                    g.2 = g.2.max(f.size.as_f64());
                }
                let first = self.groups.len();
                self.sync_phi();
                for (_, (loads, flows, longest)) in by_pair {
                    let start = self.loads.len();
                    self.loads.extend(loads);
                    self.groups.push(GroupState { phi: 1.0, loads: start..self.loads.len(), flows, longest });
                    self.group_rate.push(0.0);
                    self.group_finish.push(Nanos::MAX);
                }
                self.coflows.push(CoflowState {
                    id: c.id,
                    arrival: c.arrival,
                    deadline: c.deadline,
                    weight: c.weight,
                    groups: first..self.groups.len(),
                    active_flows: remote,
                });
                self.widx.push(k);
            }
            ServiceModel::Route => {
                for f in c.flows.iter().filter(|f| !f.is_local()) {
                    let route = self.fabric.route(f.src, f.dst);
                    let i = *self.route_of.entry(route).or_insert_with(|| {
                        self.routes.push(RouteState { route, flows: 0, min_remaining: 0.0 });
                        self.queues.push(RouteQueue::default());
                        self.route_finish.push(Nanos::MAX);
                        self.routes.len() - 1
                    });
                    let q = &mut self.queues[i];
                    q.heap.push(Reverse((Theta(q.clock + f.size.as_f64()), k as u32)));
                    self.routes[i].flows += 1;
                }
            }
        }
    }

    /// Finishes everything due at `now`; returns whether anything finished.
    fn complete(&mut self) -> bool {
        match self.model {
            ServiceModel::Proportional => self.complete_groups(),
            ServiceModel::Route => self.complete_routes(),
        }
    }

    fn complete_groups(&mut self) -> bool {
        let mut any = false;
        let mut finished_coflow = false;
        while let Some(&Reverse((t, gi))) = self.group_heap.peek() {
            if t > self.now {
                break;
            }
            self.group_heap.pop();
            let gi = gi as usize;
            if self.group_finish[gi] != t {
                continue;
            }
            if self.cfg.check_invariants {
                let g = &self.groups[gi];
                let dt = (self.now - self.phi_time).as_secs_f64();
                let left = g.phi * (1.0 - self.group_rate[gi] * dt);
                assert!(left.abs() < 1e-6, "group finished with {left} of its bytes left");
            }
            self.groups[gi].phi = 0.0;
            self.group_finish[gi] = Nanos::MAX;
            let ci = self.group_coflow(gi);
            let c = &mut self.coflows[ci];
            c.active_flows -= self.groups[gi].flows;
            any = true;
            if c.active_flows == 0 {
                let k = self.widx[ci];
                self.pending[k] = 0;
                self.finish[k] = Some(self.now);
                self.done += 1;
                self.policy.handle_finished(self.now, c.id);
                finished_coflow = true;
            }
        }
        if finished_coflow {
            self.sync_phi();
            self.compact_groups();
        }
        any
    }

    /// The active coflow that owns group `gi`.
    fn group_coflow(&self, gi: usize) -> usize {
        self.coflows.partition_point(|c| c.groups.end <= gi)
    }

    /// Brings every group's remaining fraction forward to `now` at the last decision's rates.
    fn sync_phi(&mut self) {
        if self.now > self.phi_time {
            let dt = (self.now - self.phi_time).as_secs_f64();
            for (g, &sigma) in self.groups.iter_mut().zip(&self.group_rate) {
                if sigma > 0.0 && g.phi > 0.0 {
                    // A group due exactly now may round to zero or below; it stays active until
                    // `complete` retires it at its finish time.
                    g.phi = (g.phi * (1.0 - sigma * dt)).max(f64::MIN_POSITIVE);
                }
            }
        }
        self.phi_time = self.now;
    }

    /// Drops finished coflows and their groups, keeping the rest in order.
    fn compact_groups(&mut self) {
        let (mut groups, mut finish, mut rates, mut loads) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut keep = Vec::with_capacity(self.coflows.len());
        let mut widx = Vec::with_capacity(self.coflows.len());
        for (c, &k) in self.coflows.iter().zip(&self.widx) {
            if c.active_flows == 0 {
                continue;
            }
            let first = groups.len();
            for gi in c.groups.clone() {
                let g = &self.groups[gi];
                let start = loads.len();
                loads.extend_from_slice(&self.loads[g.loads.clone()]);
                groups.push(GroupState { loads: start..loads.len(), ..g.clone() });
                finish.push(self.group_finish[gi]);
                rates.push(self.group_rate[gi]);
            }
            keep.push(CoflowState { groups: first..groups.len(), ..c.clone() });
            widx.push(k);
        }
        self.coflows = keep;
        self.widx = widx;
        self.groups = groups;
        self.group_finish = finish;
        self.group_rate = rates;
        self.loads = loads;
        // Group indices moved: re-plan the pending completions.
        self.group_heap.clear();
        for (i, &t) in self.group_finish.iter().enumerate() {
            if t != Nanos::MAX {
                self.group_heap.push(Reverse((t, i as u32)));
            }
        }
    }

    fn complete_routes(&mut self) -> bool {
        let mut any = false;
        let mut i = self.routes.len();
        while i > 0 {
            i -= 1;
            if self.route_finish[i] > self.now {
                continue;
            }
            let q = &mut self.queues[i];
            let mut first = true;
            while let Some(&Reverse((Theta(theta), k))) = q.heap.peek() {
                let slack = theta - q.clock;
                if !first && slack > 1e-9 * theta + 1e-6 {
                    break;
                }
                if self.cfg.check_invariants {
                    assert!(slack.abs() <= 1e-6 * theta.max(1.0), "flow finished with {slack} bytes left");
                }
                first = false;
                q.heap.pop();
                self.routes[i].flows -= 1;
                let k = k as usize;
                self.pending[k] -= 1;
                if self.pending[k] == 0 {
                    self.finish[k] = Some(self.now);
                    self.done += 1;
                    self.policy.handle_finished(self.now, self.w.coflows[k].id);
                }
            }
            any = true;
            self.route_finish[i] = Nanos::MAX;
            if self.routes[i].flows == 0 {
                self.route_of.remove(&self.routes[i].route);
                self.routes.swap_remove(i);
                self.queues.swap_remove(i);
                self.route_finish.swap_remove(i);
                if i < self.routes.len() {
                    self.route_of.insert(self.routes[i].route, i);
                }
            }
        }
        any
    }

    fn decide(&mut self) {
        self.sync_phi();
        for (rt, q) in self.routes.iter_mut().zip(&self.queues) {
            rt.min_remaining = q.heap.peek().map_or(0.0, |Reverse((t, _))| (t.0 - q.clock).max(0.0));
        }
        let input = Input {
            now: self.now,
            fabric: &self.fabric,
            coflows: &self.coflows,
            groups: &self.groups,
            loads: &self.loads,
            routes: &self.routes,
        };
        self.alloc.reset(&input);
        self.wake = self.policy.poll_allocation(&input, &mut self.alloc).map(|t| t.max(Nanos(self.now.0 + 1)));
        self.decisions += 1;
        self.last_decision = self.now;

        for &r in self.alloc.group_rate.iter().chain(&self.alloc.route_rate) {
            assert!(r >= 0.0 && !r.is_nan(), "policy {} gave an invalid rate {r}", self.policy.name());
        }
        if self.cfg.check_invariants {
            let used = self.alloc.usage(&input);
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
        let now = self.now;
        self.group_heap.clear();
        for (i, g) in self.groups.iter().enumerate() {
            let sigma = if g.phi > 0.0 { self.alloc.group_rate[i] } else { 0.0 };
            self.group_rate[i] = sigma;
            self.group_finish[i] = if sigma > 0.0 { after(now, 1.0 / sigma) } else { Nanos::MAX };
            if sigma > 0.0 {
                self.group_heap.push(Reverse((self.group_finish[i], i as u32)));
            }
        }
        for (i, q) in self.queues.iter().enumerate() {
            let rate = self.alloc.route_rate[i];
            self.route_finish[i] = match q.heap.peek() {
                Some(Reverse((t, _))) if rate > 0.0 => after(now, (t.0 - q.clock).max(0.0) / rate),
                _ => Nanos::MAX,
            };
        }
    }

    fn next_event(&self) -> Nanos {
        let mut next = self.w.coflows.get(self.next_arrival).map_or(Nanos::MAX, |c| c.arrival);
        if let Some(t) = self.wake {
            next = next.min(t);
        }
        let groups = self.group_heap.peek().map_or(Nanos::MAX, |Reverse((t, _))| *t);
        let routes = self.route_finish.iter().copied().min().unwrap_or(Nanos::MAX);
        next.min(groups).min(routes)
    }

    /// Moves every group and route forward to `to` at the current rates.
    fn advance(&mut self, to: Nanos) {
        debug_assert!(to > self.now, "time must move forward");
        let dt = (to - self.now).as_secs_f64();
        for (q, &rate) in self.queues.iter_mut().zip(&self.alloc.route_rate) {
            if rate > 0.0 {
                q.clock += rate * dt;
            }
        }
        self.now = to;
        self.events += 1;
    }

    fn finish(self) -> SimResult {
        let port = self.cfg.port_rate.bytes_per_sec();
        let outcomes: Vec<CoflowOutcome> = self
            .w
            .coflows
            .iter()
            .zip(&self.finish)
            .map(|(c, &finish)| CoflowOutcome::new(c, finish, c.isolated_cct(self.w.machines as usize, port)))
            .collect();
        let makespan = self.finish.iter().flatten().copied().max().unwrap_or(Nanos::ZERO);
        SimResult {
            policy: self.policy.name().to_string(),
            outcomes,
            makespan,
            events: self.events,
            decisions: self.decisions,
        }
    }
}

/// `now` plus `secs` seconds, rounded up to the next nanosecond (at least one), saturating.
fn after(now: Nanos, secs: f64) -> Nanos {
    let ns = (secs * 1e9).ceil();
    if !ns.is_finite() || ns >= (u64::MAX - now.0) as f64 { Nanos::MAX } else { Nanos(now.0 + (ns as u64).max(1)) }
}
