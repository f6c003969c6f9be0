//! The route model: flows pooled by route, each route with a virtual clock that its flows share.
//!
//! A route with per-flow rate `a` advances a clock `A(t) = A(t₀) + a·(t − t₀)` shared by its
//! flows, and a flow that joined when the clock read `A₀` with `s` bytes finishes when the clock
//! reaches `A₀ + s` (virtual time, as in fair queueing). Finish times are kept exact, in
//! nanoseconds as floats, and rounded up to the next nanosecond once, for the earliest.
//!
//! A policy gives the routes' rates in one of two ways, and the model keeps the clocks to match:
//! - a rate per route (`Allocation::route_rate`): every route keeps its own clock, and taking a
//!   decision's rates is a pass over every route;
//! - shares (`Allocation::shares`): every route follows one resource and gets its rate, as in
//!   per-flow max-min fairness, where every route bottlenecked at a resource gets that
//!   resource's fair share. Then each resource keeps a clock, a route's clock is its resource's
//!   plus an offset set when it starts following it, and each resource keeps its routes in a
//!   queue by the reading of its clock at which their first flow finishes. Taking a decision
//!   costs the resources whose rate changed and the routes that changed resource, not a pass
//!   over every route.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use coflow_core::Nanos;
use coflow_sched::{Route, RouteState, Shares};

/// A route that follows no resource yet: its clock stands at its offset.
const NONE: u32 = u32::MAX;

/// The largest resource a route can follow.
const MAX_RESOURCE: u32 = NONE - 1;

/// A clock reading in bytes, in fixed point with 64 fractional bits: resources' clocks and the
/// routes' offsets from them are summed and subtracted exactly, so that a route's progress since
/// it started following a resource comes out as exactly as the route's own clock would have it,
/// however far the resource's clock has run.
type Fixed = i128;

/// `v` bytes in fixed point (exact for every float at or above 2⁻¹¹).
fn fixed(v: f64) -> Fixed {
    (v * FIXED_ONE) as Fixed
}

/// A fixed-point reading in bytes, rounded to the nearest float.
fn to_f64(v: Fixed) -> f64 {
    v as f64 / FIXED_ONE
}

/// One byte in fixed point.
const FIXED_ONE: f64 = 18_446_744_073_709_551_616.0;

/// How far the clock may run past [`RouteModel::epoch`] before the epoch moves up to it: about
/// five hours, over which a float counts nanoseconds to within a 256th of one.
const REBASE: u64 = 1 << 44;

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
pub(crate) struct RouteModel {
    /// What the policy sees; `min_remaining` is brought up to date before every decision of a
    /// policy that reads it.
    pub(crate) states: Vec<RouteState>,
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
    /// The origin of the planned finishes (`finish`, `next`, `res_finish`), kept in nanoseconds
    /// after it as floats: it follows the clock (see [`REBASE`]), so that a finish keeps a fraction
    /// of a nanosecond however late in a replay it falls.
    epoch: Nanos,
    /// Workload indices of the coflows whose flows the last `complete` finished, in order.
    pub(crate) finished: Vec<u32>,
    /// Routes whose flows changed since the last decision (see `Changes::routes`), unsorted.
    pub(crate) touched: Vec<Route>,
    /// Whether the policy answers in shares; then `clock`, `rate`, `finish`, `next` and `due` are
    /// unused and the route clocks follow the resources'.
    shared: bool,
    /// Shares: per route, the resource it follows (`NONE` before a decision gives it one) and
    /// its clock's offset from that resource's clock, in fixed point (see `Fixed`).
    follow: Vec<u32>,
    offset: Vec<Fixed>,
    /// Shares: per route, when it started following its resource or its first flow last
    /// changed, and that resource's clock then.
    switched: Vec<Nanos>,
    switch_reading: Vec<Fixed>,
    /// Shares: per resource, its clock as of `since` (when its rate last changed), its rate, its
    /// routes by the reading of its clock at which their first flow finishes (entries that no
    /// longer match their route are dropped when met), and when the first of them finishes, in
    /// nanoseconds.
    res_clock: Vec<Fixed>,
    res_since: Vec<Nanos>,
    /// Shares: per resource, its clock when its rate last changed and when that was, from
    /// which its routes' finishes are planned.
    plan_clock: Vec<Fixed>,
    plan_since: Vec<Nanos>,
    res_rate: Vec<f64>,
    res_queue: Vec<BinaryHeap<Reverse<(Fixed, u32)>>>,
    res_finish: Vec<f64>,
    /// Shares, scratch: resources whose first finish must be found again.
    res_stale: Vec<u32>,
    /// Shares: entries in the resources' queues, matching their route or not.
    queued: usize,
    /// Shares: routes removed since the last decision, with the position each left, and those
    /// added back at that very position. To the policy such a route is the one it saw there
    /// before, so it need not write it again: it follows the resource the policy keeps for that
    /// position. Any other new route the policy must write.
    left: Vec<(Route, usize)>,
    returned: Vec<Route>,
}

impl RouteModel {
    /// Nanoseconds from the epoch to `t` (negative before it), as a float.
    fn rel(&self, t: Nanos) -> f64 {
        if t >= self.epoch { (t.0 - self.epoch.0) as f64 } else { -((self.epoch.0 - t.0) as f64) }
    }

    /// Moves the epoch up to `now` once the clock has run [`REBASE`] past it, taking the planned
    /// finishes along (each is then at most a rounding away from what it was: for a finish within
    /// twice the move, none).
    fn rebase(&mut self, now: Nanos) {
        let ahead = now.0.saturating_sub(self.epoch.0);
        if ahead < REBASE {
            return;
        }
        // A move a float holds exactly, so that the finishes and the epoch move together.
        let shift = ahead as f64;
        self.epoch = Nanos(self.epoch.0.saturating_add(shift as u64));
        for f in self.finish.iter_mut().chain(&mut self.res_finish).chain(&mut self.next) {
            *f -= shift;
        }
    }

    /// Route `i`'s clock at `now`.
    fn clock_at(&self, i: usize, now: Nanos) -> f64 {
        if self.shared {
            return match self.follow[i] {
                NONE => to_f64(self.offset[i]),
                x => to_f64(self.offset[i] + self.res_clock_at(x as usize, now)),
            };
        }
        // The same expression as `prepare`'s, so that both agree to the bit.
        self.clock[i] + self.rate[i] * (now - self.time).as_secs_f64()
    }

    /// Shares: resource `x`'s clock at `now`.
    fn res_clock_at(&self, x: usize, now: Nanos) -> Fixed {
        if now == self.res_since[x] {
            // Also for a resource whose rate just became infinite, which no route follows on.
            return self.res_clock[x];
        }
        self.res_clock[x] + fixed(self.res_rate[x] * (now - self.res_since[x]).as_secs_f64())
    }

    /// Shares: the reading of its resource's clock at which route `i`'s first flow finishes.
    fn key(&self, i: usize) -> Fixed {
        fixed(self.head[i]) - self.offset[i]
    }

    /// Shares: plans route `i`'s finish from `now` on, as a clock per route would when its first
    /// flow changes.
    fn plan_route_from(&mut self, i: usize, now: Nanos) {
        if let x @ 0..=MAX_RESOURCE = self.follow[i] {
            self.switched[i] = now;
            self.switch_reading[i] = self.res_clock_at(x as usize, now);
        }
    }

    /// Shares: queues route `i` at the resource it follows, if any.
    fn queue_route(&mut self, i: usize) {
        let x = self.follow[i];
        if x != NONE && self.head[i] < f64::INFINITY {
            let key = self.key(i);
            self.res_queue[x as usize].push(Reverse((key, i as u32)));
            self.res_stale.push(x);
            self.queued += 1;
        }
    }

    /// Shares: rebuilds the resources' queues from the routes once they hold more entries that
    /// no longer match their route than routes.
    fn compact_queues(&mut self) {
        if self.queued <= 2 * self.states.len() + 4096 {
            return;
        }
        for q in &mut self.res_queue {
            q.clear();
        }
        self.queued = 0;
        // Each queue's first matching entry stays what it was, and so does its finish.
        let stale = self.res_stale.len();
        for i in 0..self.states.len() {
            self.queue_route(i);
        }
        self.res_stale.truncate(stale);
    }

    /// Shares: drops resource `x`'s first entries that no longer match their route, and returns
    /// the first that does (its key and route).
    fn res_first(&mut self, x: usize) -> Option<(Fixed, usize)> {
        while let Some(&Reverse((key, i))) = self.res_queue[x].peek() {
            let i = i as usize;
            if i < self.follow.len() && self.follow[i] == x as u32 && self.key(i) == key {
                return Some((key, i));
            }
            self.res_queue[x].pop();
            self.queued -= 1;
        }
        None
    }

    /// Shares: when route `i`, which follows resource `x`, finishes, in nanoseconds (infinite at
    /// rate zero). Planned from when its rate or first flow last changed, as a clock per route
    /// would have it: when its resource's rate changed, when it started following it, or when
    /// its first flow changed.
    fn res_plan(&self, x: usize, i: usize) -> f64 {
        let rate = self.res_rate[x];
        if rate > 0.0 {
            let (since, clock) = if self.switched[i] > self.plan_since[x] {
                (self.switched[i], self.switch_reading[i])
            } else {
                (self.plan_since[x], self.plan_clock[x])
            };
            // The route's clock then, as a float, and its first flow's bytes left as a clock per
            // route would find them.
            self.rel(since) + (self.head[i] - to_f64(self.offset[i] + clock)).max(0.0) / rate * 1e9
        } else {
            f64::INFINITY
        }
    }

    /// Shares: finds again when the first route of each resource in `res_stale` finishes.
    fn replan_stale(&mut self) {
        let mut stale = std::mem::take(&mut self.res_stale);
        for &x in &stale {
            let x = x as usize;
            self.res_finish[x] = self.res_first(x).map_or(f64::INFINITY, |(_, i)| self.res_plan(x, i));
        }
        stale.clear();
        self.res_stale = stale;
    }

    /// Adds a flow of `size` bytes of workload coflow `k` on `route` at `now`.
    pub(crate) fn add_flow(&mut self, route: Route, size: f64, k: u32, now: Nanos) {
        self.rebase(now);
        let shared = self.shared;
        let i = *self.index.entry(route).or_insert_with(|| {
            self.states.push(RouteState { route, flows: 0, min_remaining: 0.0 });
            self.queues.push(BinaryHeap::new());
            // Not served until a decision gives it a rate, so its clock may start at `time`.
            self.head.push(f64::INFINITY);
            if shared {
                self.follow.push(NONE);
                self.offset.push(0);
                self.switched.push(now);
                self.switch_reading.push(0);
                let at = self.states.len() - 1;
                if self.left.contains(&(route, at)) {
                    self.returned.push(route);
                }
            } else {
                self.clock.push(0.0);
                self.rate.push(0.0);
                self.finish.push(f64::INFINITY);
            }
            self.states.len() - 1
        });
        self.touched.push(route);
        let clock = self.clock_at(i, now);
        let theta = clock + size;
        self.queues[i].push(Reverse((Theta(theta), k)));
        self.states[i].flows += 1;
        if shared {
            if theta < self.head[i] {
                self.head[i] = theta;
                self.plan_route_from(i, now);
                self.queue_route(i);
                self.replan_stale();
            }
            return;
        }
        if theta < self.head[i] {
            // An earlier first flow can only bring the route's finish, and so the earliest, closer.
            self.head[i] = theta;
            self.finish[i] = self.plan(i, clock, self.rel(now));
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
        if self.shared {
            return self.res_finish.iter().fold(f64::INFINITY, |a, &b| a.min(b));
        }
        self.next.unwrap_or_else(|| self.finish.iter().fold(f64::INFINITY, |a, &b| a.min(b)))
    }

    /// When the next flow finishes at the current rates, rounded up to the nanosecond, and at
    /// least a nanosecond after `now`.
    pub(crate) fn next_time(&self, now: Nanos) -> Nanos {
        let t = self.earliest().ceil();
        if t < (u64::MAX - self.epoch.0) as f64 {
            // A finish before the epoch saturates to it, and then to a nanosecond after `now`.
            self.epoch.0.checked_add(t as u64).map_or(Nanos::MAX, |t| Nanos(t.max(now.0 + 1)))
        } else {
            // Past the last nanosecond (or NaN): never.
            Nanos::MAX
        }
    }

    /// Finishes the flows due at `now`, recording their coflows in `finished`; returns whether
    /// any did. Checks that each delivered exactly its bytes if `check`.
    pub(crate) fn complete(&mut self, now: Nanos, check: bool) -> bool {
        self.finished.clear();
        self.rebase(now);
        let now_ns = self.rel(now);
        if self.earliest() > now_ns {
            return false;
        }
        let mut due = std::mem::take(&mut self.due);
        if self.shared {
            // Every route queued at a resource whose first finish is due, that finishes by now.
            for x in 0..self.res_finish.len() {
                if self.res_finish[x] > now_ns {
                    continue;
                }
                while let Some((_, i)) = self.res_first(x) {
                    if self.res_plan(x, i) > now_ns {
                        break;
                    }
                    self.res_queue[x].pop();
                    self.queued -= 1;
                    due.push(i as u32);
                }
                self.res_stale.push(x as u32);
            }
            due.sort_unstable();
            due.dedup();
        } else if self.next.is_some() {
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
            if !self.shared && self.finish[i] > now_ns {
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
            } else if self.shared {
                self.plan_route_from(i, now);
                self.queue_route(i);
            } else {
                self.finish[i] = self.plan(i, clock, now_ns);
            }
        }
        due.clear();
        self.due = due;
        self.next = None;
        if self.shared {
            self.replan_stale();
        }
        true
    }

    /// Drops route `i`, moving the last route into its place.
    fn remove(&mut self, i: usize) {
        if self.shared {
            self.left.push((self.states[i].route, i));
        }
        self.index.remove(&self.states[i].route);
        self.states.swap_remove(i);
        self.queues.swap_remove(i);
        self.head.swap_remove(i);
        if self.shared {
            self.follow.swap_remove(i);
            self.offset.swap_remove(i);
            self.switched.swap_remove(i);
            self.switch_reading.swap_remove(i);
        } else {
            self.clock.swap_remove(i);
            self.rate.swap_remove(i);
            self.finish.swap_remove(i);
        }
        if i < self.states.len() {
            self.index.insert(self.states[i].route, i);
            // It moved: the policy is told (see `Changes::routes`).
            self.touched.push(self.states[i].route);
            if self.shared {
                // Its queue entry names its old position.
                self.queue_route(i);
            }
        }
    }

    /// Brings every route's `min_remaining` forward to `now`, for a decision, if `sizes` (the
    /// policy reads them); the clocks move on when the decision is applied.
    pub(crate) fn prepare(&mut self, now: Nanos, sizes: bool) {
        if !sizes {
            return;
        }
        if self.shared {
            for i in 0..self.states.len() {
                self.states[i].min_remaining = (self.head[i] - self.clock_at(i, now)).max(0.0);
            }
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
    pub(crate) fn apply(&mut self, rates: &[f64], now: Nanos, policy: &str) {
        assert!(!self.shared, "policy {policy} answered in shares before");
        self.rebase(now);
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
        let now_ns = self.rel(now);
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

    /// Takes `policy`'s rates in shares from `now` on: every resource whose rate changed
    /// brings its clock forward at the rate it had, and every route that follows another
    /// resource starts from its clock's reading now.
    pub(crate) fn apply_shares(&mut self, shares: &Shares, now: Nanos, policy: &str) {
        self.rebase(now);
        if !self.shared {
            self.start_sharing(now);
        }
        let m = shares.rate.len();
        if self.res_rate.len() < m {
            self.res_clock.resize(m, 0);
            self.res_since.resize(m, now);
            self.plan_clock.resize(m, 0);
            self.plan_since.resize(m, now);
            self.res_rate.resize(m, 0.0);
            self.res_queue.resize_with(m, BinaryHeap::new);
            self.res_finish.resize(m, f64::INFINITY);
        }
        // Every clock steps at every decision, by the same products of rate and time as a clock
        // per route would, summed exactly.
        for x in 0..m {
            let old = self.res_rate[x];
            // A resource with no finite rate has no routes following it: its clock starts again.
            self.res_clock[x] = if old.is_finite() { self.res_clock_at(x, now) } else { 0 };
            self.res_since[x] = now;
        }
        for (x, &new) in shares.rate.iter().enumerate() {
            if new.to_bits() == self.res_rate[x].to_bits() {
                continue;
            }
            assert!(new >= 0.0, "policy {policy} gave an invalid rate {new}");
            self.res_rate[x] = new;
            self.plan_clock[x] = self.res_clock[x];
            self.plan_since[x] = now;
            self.res_stale.push(x as u32);
        }
        for &i in &shares.written {
            self.follow_share(i as usize, shares, now, policy);
        }
        // Routes back at the position they left, not written, follow what the policy keeps there.
        let mut returned = std::mem::take(&mut self.returned);
        for route in &returned {
            if let Some(&i) = self.index.get(route)
                && self.follow[i] == NONE
            {
                self.follow_share(i, shares, now, policy);
            }
        }
        returned.clear();
        self.returned = returned;
        self.left.clear();
        debug_assert!(
            self.follow.iter().zip(&shares.follows).all(|(&a, &b)| a == b),
            "policy {policy} left routes out of `written`"
        );
        self.compact_queues();
        self.replan_stale();
        self.time = now;
    }

    /// Shares: route `i` follows the resource `shares` gives it from `now` on, its clock going on
    /// from where it stands.
    fn follow_share(&mut self, i: usize, shares: &Shares, now: Nanos, policy: &str) {
        let x = shares.follows[i];
        if x == self.follow[i] {
            return;
        }
        let m = shares.rate.len();
        assert!((x as usize) < m, "policy {policy} had route {i} follow resource {x} of {m}");
        let clock = match self.follow[i] {
            NONE => self.offset[i],
            y => self.offset[i] + self.res_clock_at(y as usize, now),
        };
        if self.follow[i] != NONE {
            self.res_stale.push(self.follow[i]);
        }
        self.follow[i] = x;
        self.switch_reading[i] = self.res_clock_at(x as usize, now);
        self.offset[i] = clock - self.switch_reading[i];
        self.switched[i] = now;
        self.queue_route(i);
    }

    /// Turns per-route clocks into shares: every route's clock stands at its reading now until
    /// a decision makes it follow a resource.
    fn start_sharing(&mut self, now: Nanos) {
        self.offset = (0..self.states.len()).map(|i| fixed(self.clock_at(i, now))).collect();
        self.follow = vec![NONE; self.states.len()];
        self.switched = vec![now; self.states.len()];
        self.switch_reading = vec![0; self.states.len()];
        self.shared = true;
        self.clock = Vec::new();
        self.rate = Vec::new();
        self.finish = Vec::new();
        self.due.clear();
        self.next = None;
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
