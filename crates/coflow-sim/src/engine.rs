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
use std::collections::{BinaryHeap, HashMap};

use coflow_core::{Nanos, Rate, Workload};
use coflow_sched::{Allocation, Fabric, Input, ResourceId, Route, RouteState, Scheduler, ServiceModel};

use crate::legs::{Finished, LegModel, after};
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
    /// Whether the policy does admission control (and so may reject coflows).
    pub admission_control: bool,
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
    /// Per workload coflow: when it finished, whether a policy rejected it, and how many of its
    /// flows are unfinished.
    finish: Vec<Option<Nanos>>,
    /// Per workload coflow: the sum of its finished flows' completion times, in seconds.
    flow_time: Vec<f64>,
    rejected: Vec<bool>,
    rejected_ids: Vec<coflow_core::CoflowId>,
    pending: Vec<u32>,
    done: usize,

    // Proportional model: active coflows, their legs and scales.
    prop: LegModel,
    finished: Vec<Finished>,

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
            flow_time: vec![0.0; n],
            rejected: vec![false; n],
            rejected_ids: Vec::new(),
            pending: vec![0; n],
            done: 0,
            prop: LegModel::default(),
            finished: Vec::new(),
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
                self.prop.sync(self.now);
                self.prop.arrive(&self.fabric, c, k, remote);
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
        self.prop.sync(self.now);
        let any = self.prop.complete(self.cfg.check_invariants, &mut self.finished, &mut self.flow_time);
        for (k, id) in self.finished.drain(..) {
            self.pending[k] = 0;
            self.finish[k] = Some(self.now);
            self.done += 1;
            self.policy.handle_finished(self.now, id);
        }
        any
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
        self.prop.sync(self.now);
        for (rt, q) in self.routes.iter_mut().zip(&self.queues) {
            rt.min_remaining = q.heap.peek().map_or(0.0, |Reverse((t, _))| (t.0 - q.clock).max(0.0));
        }
        let input = Input {
            now: self.now,
            fabric: &self.fabric,
            coflows: &self.prop.coflows,
            legs: &self.prop.legs,
            senders: &self.prop.senders,
            loads: &self.prop.loads,
            routes: &self.routes,
        };
        self.alloc.reset(&input);
        self.wake = self.policy.poll_allocation(&input, &mut self.alloc).map(|t| t.max(Nanos(self.now.0 + 1)));
        self.decisions += 1;
        self.last_decision = self.now;
        self.policy.poll_rejected(&mut self.rejected_ids);
        if !self.rejected_ids.is_empty() {
            assert!(self.model == ServiceModel::Proportional, "only proportional policies reject coflows");
            for k in self.prop.reject(&self.rejected_ids) {
                self.rejected[k] = true;
                self.pending[k] = 0;
                self.done += 1;
            }
            self.rejected_ids.clear();
            // The allocation was made for an input that still held them: decide again without.
            self.decide();
            return;
        }

        for &r in self
            .alloc
            .coflow_rate
            .iter()
            .chain(self.alloc.leg_extra.iter().map(|(_, k)| k))
            .chain(&self.alloc.route_rate)
        {
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
        self.prop.apply(&self.alloc);
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
        let groups = self.prop.next_time();
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
            .zip(self.finish.iter().zip(&self.rejected).zip(&self.flow_time))
            .map(|(c, ((&finish, &rejected), &flow_time))| {
                let mut o = CoflowOutcome::new(c, finish, rejected, c.isolated_cct(self.w.machines as usize, port));
                o.flow_time_s = flow_time;
                o
            })
            .collect();
        let makespan = self.finish.iter().flatten().copied().max().unwrap_or(Nanos::ZERO);
        SimResult {
            policy: self.policy.name().to_string(),
            outcomes,
            makespan,
            events: self.events,
            decisions: self.decisions,
            admission_control: self.policy.admission_control(),
        }
    }
}
