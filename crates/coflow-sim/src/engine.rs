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

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use coflow_core::{Coflow, Nanos, Rate, Workload};
use coflow_sched::policy::{self, Unservable};
use coflow_sched::{Allocation, Changes, Fabric, Input, ResourceId, Route, RouteState, Scheduler, ServiceModel, Wan};

use crate::legs::{Finished, LegModel, Split};
use crate::report::CoflowOutcome;
use crate::wan::{Connections, WanConfig, Weather};

/// How many policy wake-ups in a row may pass with nothing moving and nothing left to arrive
/// before the simulation gives up on the coflows still active.
const MAX_IDLE_WAKES: u32 = 10_000;

/// How to run a simulation: on the big switch (the default), or on a wide area.
#[derive(Clone, Debug, PartialEq)]
pub struct SimConfig {
    /// Capacity of every ingress and egress port of the big switch (default 1 Gbit/s); not used
    /// on a wide area.
    pub port_rate: Rate,
    /// Check at every decision that no resource is allocated past its capacity and that every
    /// finishing flow has delivered exactly its bytes; panics on a violation (a bug). Costs time
    /// in the number of flows, so it is meant for tests.
    pub check_invariants: bool,
    /// Run on this wide-area fabric (Siphon: links whose capacities fluctuate, multi-path)
    /// instead of the big switch.
    pub wan: Option<WanConfig>,
    /// Tell the policy at every decision to take everything as new ([`Changes::everything`])
    /// instead of what changed since its last decision. The results must not differ (a property
    /// test checks it for every policy); the decisions cost more. For tests and `coflow bench`.
    pub from_scratch: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig { port_rate: Rate::GBPS, check_invariants: false, wan: None, from_scratch: false }
    }
}

impl SimConfig {
    /// The big switch with ports of `port_rate`, invariants unchecked.
    pub fn big_switch(port_rate: Rate) -> SimConfig {
        SimConfig { port_rate, ..SimConfig::default() }
    }

    /// The wide area `wan`, invariants unchecked.
    pub fn wide_area(wan: WanConfig) -> SimConfig {
        SimConfig { wan: Some(wan), ..SimConfig::default() }
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
    /// Whether it ran on a wide area ([`SimConfig::wan`]) rather than the big switch.
    pub wide_area: bool,
}

/// Replays `workload` under `policy` on the fabric `cfg` names; a policy that cannot serve that
/// fabric (the registry says so) is refused, not run.
///
/// # Panics
/// On a wide area whose topology places fewer machines than the workload has.
pub fn simulate(workload: &Workload, policy: Box<dyn Scheduler>, cfg: &SimConfig) -> Result<SimResult, Unservable> {
    simulate_with_progress(workload, policy, cfg, &mut |_| {})
}

/// [`simulate`], calling `progress` with the number of finished coflows whenever it changes.
pub fn simulate_with_progress(
    workload: &Workload,
    policy: Box<dyn Scheduler>,
    cfg: &SimConfig,
    progress: &mut dyn FnMut(usize),
) -> Result<SimResult, Unservable> {
    if let Some(wan) = &cfg.wan {
        assert!(wan.fabric.topology::<Wan>().is_some(), "a wide-area run needs a wide-area fabric");
        assert!(wan.fabric.machines() >= workload.machines, "the topology places fewer machines than the workload has");
        policy::check_serves(policy.name(), &wan.fabric)?;
    }
    let mut e = Engine::new(workload, policy, cfg, cfg.wan.as_ref());
    e.run(progress);
    Ok(e.finish())
}

/// The route model's state: the routes with unfinished flows, in the order the policy sees them.
///
/// Kept by column, so that the passes a decision makes over every route touch only what they
/// need. Clocks move lazily: every clock is current as of `time` and moves on at its route's
/// rate, which only a decision changes, and applying a decision brings all of them forward in the
/// pass that takes the new rates; in between, a route's clock at `now` is computed when needed.
/// A route's finish is planned again only when its rate or its first flow changes, not at every
/// decision, and is kept exact (in nanoseconds, as a float): rounding up to the next nanosecond
/// happens once, for the earliest. Routes planned to finish by an event's time finish at it;
/// as that time is less than a nanosecond past the earliest finish, the routes that may finish
/// at the next event are noted while the earliest is found, and an event looks only at them.
#[derive(Debug, Default)]
struct RouteModel {
    /// What the policy sees; `min_remaining` is brought up to date before every decision of a
    /// policy that reads it.
    states: Vec<RouteState>,
    /// Each route's flows, ordered by the clock reading at which each finishes, with the
    /// workload index of its coflow.
    queues: Vec<BinaryHeap<Reverse<(Theta, u32)>>>,
    /// Each route's clock as of `time`, the reading at which its first flow finishes, its
    /// per-flow rate from the last decision, and when its first flow finishes at that rate, in
    /// nanoseconds (infinite at rate zero).
    clock: Vec<f64>,
    head: Vec<f64>,
    rate: Vec<f64>,
    finish: Vec<f64>,
    /// Where each route sits in the columns.
    index: HashMap<Route, usize>,
    time: Nanos,
    /// The earliest `finish`, unless a completion has changed plans since the last decision,
    /// and every route planned to finish within a nanosecond of it (and maybe others).
    next: Option<f64>,
    due: Vec<u32>,
    /// Scratch: the routes whose rate a decision changed, and those noted as maybe due.
    changed: Vec<u32>,
    noted: Vec<u32>,
    /// Workload indices of the coflows whose flows the last `complete` finished, in order.
    finished: Vec<u32>,
    /// Routes whose flows changed since the last decision (see `Changes::routes`), unsorted.
    touched: Vec<Route>,
}

impl RouteModel {
    /// Route `i`'s clock at `now`.
    fn clock_at(&self, i: usize, now: Nanos) -> f64 {
        // The same expression as `prepare`'s, so that both agree to the bit.
        self.clock[i] + self.rate[i] * (now - self.time).as_secs_f64()
    }

    /// Adds a flow of `size` bytes of workload coflow `k` on `route` at `now`.
    fn add_flow(&mut self, route: Route, size: f64, k: u32, now: Nanos) {
        let i = *self.index.entry(route).or_insert_with(|| {
            self.states.push(RouteState { route, flows: 0, min_remaining: 0.0 });
            self.queues.push(BinaryHeap::new());
            // Not served until a decision gives it a rate, so its clock may start at `time`.
            self.clock.push(0.0);
            self.head.push(f64::INFINITY);
            self.rate.push(0.0);
            self.finish.push(f64::INFINITY);
            self.states.len() - 1
        });
        self.touched.push(route);
        let clock = self.clock_at(i, now);
        let theta = clock + size;
        self.queues[i].push(Reverse((Theta(theta), k)));
        self.states[i].flows += 1;
        if theta < self.head[i] {
            // An earlier first flow can only bring the route's finish, and so the earliest, closer.
            self.head[i] = theta;
            self.finish[i] = self.plan(i, clock, now.0 as f64);
            if let Some(next) = self.next {
                self.next = Some(next.min(self.finish[i]));
                if self.finish[i] <= next + 1.0 && self.finish[i] < f64::INFINITY {
                    self.due.push(i as u32);
                }
            }
        }
    }

    /// When route `i`'s first flow finishes at its rate, its clock reading `clock` at `now_ns`.
    fn plan(&self, i: usize, clock: f64, now_ns: f64) -> f64 {
        let rate = self.rate[i];
        if rate > 0.0 { now_ns + (self.head[i] - clock).max(0.0) / rate * 1e9 } else { f64::INFINITY }
    }

    /// The earliest planned finish.
    fn earliest(&self) -> f64 {
        self.next.unwrap_or_else(|| self.finish.iter().fold(f64::INFINITY, |a, &b| a.min(b)))
    }

    /// When the next flow finishes at the current rates, rounded up to the nanosecond, and at
    /// least a nanosecond after `now`.
    fn next_time(&self, now: Nanos) -> Nanos {
        let t = self.earliest().ceil();
        if t < u64::MAX as f64 { Nanos((t as u64).max(now.0 + 1)) } else { Nanos::MAX }
    }

    /// Finishes the flows due at `now`, recording their coflows in `finished`; returns whether
    /// any did. Checks that each delivered exactly its bytes if `check`.
    fn complete(&mut self, now: Nanos, check: bool) -> bool {
        self.finished.clear();
        let now_ns = now.0 as f64;
        if self.earliest() > now_ns {
            return false;
        }
        let mut due = std::mem::take(&mut self.due);
        if self.next.is_some() {
            due.sort_unstable();
            due.dedup();
            debug_assert!(
                (0..self.finish.len()).all(|i| self.finish[i] > now_ns || due.binary_search(&(i as u32)).is_ok()),
                "a route due at {now} was not noted"
            );
        } else {
            due.clear();
            due.extend((0..self.finish.len() as u32).filter(|&i| self.finish[i as usize] <= now_ns));
        }
        // From the last, as removing a route moves the last one into its place.
        for &i in due.iter().rev() {
            let i = i as usize;
            if self.finish[i] > now_ns {
                continue;
            }
            self.touched.push(self.states[i].route);
            let clock = self.clock_at(i, now);
            let q = &mut self.queues[i];
            let mut first = true;
            while let Some(&Reverse((Theta(theta), k))) = q.peek() {
                let slack = theta - clock;
                if !first && slack > 1e-9 * theta + 1e-6 {
                    break;
                }
                if check {
                    assert!(slack.abs() <= 1e-6 * theta.max(1.0), "flow finished with {slack} bytes left");
                }
                first = false;
                q.pop();
                self.states[i].flows -= 1;
                self.finished.push(k);
            }
            self.head[i] = q.peek().map_or(f64::INFINITY, |Reverse((t, _))| t.0);
            if self.states[i].flows == 0 {
                self.remove(i);
            } else {
                self.finish[i] = self.plan(i, clock, now_ns);
            }
        }
        due.clear();
        self.due = due;
        self.next = None;
        true
    }

    /// Drops route `i`, moving the last route into its place.
    fn remove(&mut self, i: usize) {
        self.index.remove(&self.states[i].route);
        self.states.swap_remove(i);
        self.queues.swap_remove(i);
        self.clock.swap_remove(i);
        self.head.swap_remove(i);
        self.rate.swap_remove(i);
        self.finish.swap_remove(i);
        if i < self.states.len() {
            self.index.insert(self.states[i].route, i);
            // It moved: the policy is told (see `Changes::routes`).
            self.touched.push(self.states[i].route);
        }
    }

    /// Brings every route's `min_remaining` forward to `now`, for a decision, if `sizes` (the
    /// policy reads them); the clocks move on when the decision is applied.
    fn prepare(&mut self, now: Nanos, sizes: bool) {
        if !sizes {
            return;
        }
        let dt = (now - self.time).as_secs_f64();
        let columns = self.states.iter_mut().zip(&self.clock).zip(&self.rate).zip(&self.head);
        for (((st, &clock), &rate), &head) in columns {
            // `apply`'s clock, to the bit.
            st.min_remaining = (head - (clock + rate * dt)).max(0.0);
        }
    }

    /// Takes `policy`'s per-flow rates, one per route, from `now` on, first bringing every clock
    /// forward to `now` at the rate it had.
    // Kept out of `Engine::decide`, whose other work would crowd its loop's registers.
    #[inline(never)]
    fn apply(&mut self, rates: &[f64], now: Nanos, policy: &str) {
        let dt = (now - self.time).as_secs_f64();
        self.time = now;
        // Only the routes whose rate changed are planned again. Which ones did is anybody's
        // guess, so they are listed without a branch, sparing a misprediction for each.
        let n = self.rate.len();
        assert_eq!(rates.len(), n, "one rate per route");
        let mut changed = std::mem::take(&mut self.changed);
        // Both lists are written by position into room made beforehand, so that the loop calls
        // nothing (a call would have it spill what it holds in registers). A route is due either
        // with its rate kept or with one planned again, so `n` entries are room enough.
        changed.resize(changed.len().max(n), 0);
        let mut due = std::mem::take(&mut self.noted);
        due.resize(due.len().max(n), 0);
        // `limit` is a nanosecond past the earliest finish so far.
        let (mut k, mut d, mut next, mut limit) = (0, 0, f64::INFINITY, f64::INFINITY);
        let (clock, rate, finish) = (&mut self.clock[..n], &mut self.rate[..n], &self.finish[..n]);
        for i in 0..n {
            let (old, new) = (rate[i], rates[i]);
            clock[i] += old * dt;
            rate[i] = new;
            // Compared as bits, on which x86-64 selects without a branch (it branches on a float
            // comparison). That differs from `==` only for a zero against a negative zero, which
            // plans the route's finish again to the same infinity, and for a NaN, which fails
            // when planned.
            let same = new.to_bits() == old.to_bits();
            changed[k] = i as u32;
            k += !same as usize;
            // A route planned again below is left out here.
            let f = f64::from_bits(std::hint::select_unpredictable(same, finish[i].to_bits(), f64::INFINITY.to_bits()));
            if f <= limit && f < f64::INFINITY {
                next = next.min(f);
                limit = next + 1.0;
                due[d] = i as u32;
                d += 1;
            }
        }
        let now_ns = now.0 as f64;
        for &i in &changed[..k] {
            let i = i as usize;
            let rate = self.rate[i];
            assert!(rate >= 0.0, "policy {policy} gave an invalid rate {rate}");
            let finish = self.plan(i, self.clock[i], now_ns);
            self.finish[i] = finish;
            if finish <= limit && finish < f64::INFINITY {
                next = next.min(finish);
                limit = next + 1.0;
                due[d] = i as u32;
                d += 1;
            }
        }
        self.changed = changed;
        self.due.clear();
        self.due.extend(due[..d].iter().filter(|&&i| self.finish[i as usize] <= next + 1.0));
        self.noted = due;
        self.next = Some(next);
    }
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

    // Wide area: the capacity draws in force, whether arrivals are water-filled, bytes relayed.
    weather: Option<Weather>,
    /// Whether the capacities changed at `now`.
    new_weather: bool,
    multipath: bool,
    relayed: f64,
    /// Per-connection bandwidth: each leg's throughput cap, redrawn per interval.
    connections: Option<Connections>,
}

impl<'w> Engine<'w> {
    fn new(w: &'w Workload, policy: Box<dyn Scheduler>, cfg: &SimConfig, wan: Option<&WanConfig>) -> Engine<'w> {
        let n = w.coflows.len();
        let start = w.coflows.first().map_or(Nanos::ZERO, |c| c.arrival);
        let mut fabric = wan.map_or_else(|| Fabric::big_switch(w.machines, cfg.port_rate), |c| c.fabric.clone());
        let weather = wan.map(|c| Weather::new(c, &mut fabric, start));
        let mut prop = LegModel::default();
        prop.track = wan.is_some();
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
        let connections = wan.and_then(|c| c.per_connection.map(|redraw| Connections::new(c.seed, redraw)));
        // Route-model policies pool flows by route; caps per connection apply to legs only.
        prop.connections = connections.is_some() && policy.model() == ServiceModel::Proportional;
        Engine {
            w,
            model: policy.model(),
            policy,
            cfg: cfg.clone(),
            fabric,
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
            alloc: Allocation::default(),
            last_decision: Nanos::ZERO,
            events: 0,
            decisions: 0,
            weather,
            new_weather: false,
            multipath: wan.is_some_and(|c| c.multipath),
            relayed: 0.0,
            connections,
        }
    }

    fn run(&mut self, progress: &mut dyn FnMut(usize)) {
        // Consecutive wake-ups at which nothing was moving and no coflow was left to arrive: a
        // policy that keeps asking to decide while serving nothing would otherwise spin forever.
        let mut idle_wakes = 0u32;
        loop {
            let mut changed = false;
            if let Some(weather) = &mut self.weather {
                // New capacities: decide again, so nothing runs over them.
                self.new_weather = weather.update(&mut self.fabric, self.now);
                changed |= self.new_weather;
                self.changes.capacities |= self.new_weather;
            }
            if self.prop.connections
                && let Some(conns) = &mut self.connections
                && conns.update(self.now)
            {
                // New connection caps: redraw every leg's and decide again.
                conns.refresh(&self.fabric, &mut self.prop, 0);
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
                let split = if self.multipath {
                    let mut loads = vec![0.0; self.fabric.resources()];
                    for c in &self.prop.coflows {
                        for (r, b) in self.prop.loads[c.loads.clone()].iter().map(|&(r, b)| (r, b * c.scale)) {
                            loads[r as usize] += b;
                        }
                    }
                    let (split, relayed) = crate::wan::water_fill(&self.fabric, &loads, c);
                    self.relayed += relayed;
                    split
                } else {
                    Split::new()
                };
                let first_leg = self.prop.legs.len();
                self.prop.arrive(&self.fabric, c, k, &split);
                if self.prop.connections
                    && let Some(conns) = &self.connections
                {
                    conns.refresh(&self.fabric, &mut self.prop, first_leg);
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
        if self.new_weather {
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
        self.prop.sync(self.now);
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
        if !(rates.iter().fold(true, |ok, &r| valid(ok, r))
            && self.alloc.leg_extras().iter().fold(true, |ok, &(_, r)| valid(ok, r)))
        {
            for &r in rates.iter().chain(self.alloc.leg_extras().iter().map(|(_, k)| k)) {
                assert!(r >= 0.0 && !r.is_nan(), "policy {} gave an invalid rate {r}", self.policy.name());
            }
        }
        if self.prop.connections {
            crate::wan::cap_connections(&input, &self.prop.cap, &mut self.alloc, self.cfg.check_invariants);
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
        self.routes.apply(&self.alloc.route_rate, now, self.policy.name());
        self.changes.clear();
    }

    fn next_event(&self) -> Nanos {
        let mut next = self.w.coflows.get(self.next_arrival).map_or(Nanos::MAX, |c| c.arrival);
        if let Some(t) = self.wake {
            next = next.min(t);
        }
        let legs = self.prop.next_time();
        let routes = self.routes.next_time(self.now);
        // Capacities change only matter while something is active.
        if let Some(weather) = &self.weather
            && self.live > 0
        {
            next = next.min(weather.next_change());
            if self.prop.connections
                && let Some(conns) = &self.connections
            {
                next = next.min(conns.next_change());
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
        let port = self.cfg.port_rate.bytes_per_sec();
        let mut outcomes: Vec<CoflowOutcome> = self
            .w
            .coflows
            .iter()
            .zip(self.finish.iter().zip(&self.rejected).zip(&self.flow_time))
            .map(|(c, ((&finish, &rejected), &flow_time))| {
                let isolated = if self.weather.is_some() {
                    crate::wan::isolated_cct(&self.fabric, c)
                } else {
                    c.isolated_cct(self.w.machines as usize, port)
                };
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
            wide_area: self.weather.is_some(),
        }
    }
}
