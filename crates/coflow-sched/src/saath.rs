//! `saath`: Saath's all-or-none, least-contention-first scheduler for coflows whose sizes are
//! unknown (Jajoo et al., CoNEXT 2017).
//!
//! Coflows sit in D-CLAS queues as in `aalo` (`K` queues, limits `A·Eⁱ`), but a coflow leaves a
//! queue as soon as any one of its flows has sent its share of the queue's limit, the limit over
//! the coflow's width (per-flow thresholds), so a coflow held up by one long flow moves down
//! early. Inside a queue coflows go by least contention first (how many other coflows of the queue
//! share a port with it), and one that has waited long unserved goes first (starvation freedom).
//! A coflow is served all or none: every one of its flows at one rate, the most its ports' shares
//! allow, or none of them, so its flows never drift apart. Queues share every port by weight as
//! in `aalo`; what the shares leave goes to the flows in the same order, so no port idles while a
//! flow through it could send.
//!
//! It reads a [`BlindInput`]: routes, counts of flows, and the sizes of flows once they finish.
//! The bytes an active flow has sent it integrates from the rates it gave, its own output.

use std::collections::{BTreeMap, BinaryHeap};

use coflow_core::{CoflowId, MIB, Nanos};

use crate::blind::{BlindAllocation, BlindCoflow, BlindInput, BlindLeg, BlindScheduler};
use crate::contention::Contention;
use crate::fabric::{ResourceId, Route};
use crate::kernel::FULL;
use crate::priority::ordered;
use crate::shape::{Leftover, Shapes};

/// Parameters of [`Saath`]: `aalo`'s queues, and ours where the paper is silent (the book's page
/// on policies).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SaathConfig {
    /// `K`, the number of queues.
    pub queues: usize,
    /// `A`, the first queue's limit, in bytes of the coflow (each flow's share is `A / width`).
    pub first_threshold: f64,
    /// `E`, the factor between consecutive limits.
    pub factor: f64,
    /// A coflow in queue `q` not served all-or-none for `aging · A·E^q / B` (`B` its slowest
    /// port) goes first in its queue; `None`: never.
    pub aging: Option<f64>,
    /// Give what the all-or-none pass leaves to the flows, in the same order.
    pub work_conserving: bool,
    /// After flows finish, decide again at most once per this interval.
    pub flow_finish_gap: Option<Nanos>,
}

impl Default for SaathConfig {
    fn default() -> Self {
        SaathConfig {
            queues: 10,
            first_threshold: (10 * MIB) as f64,
            factor: 10.0,
            aging: Some(4.0),
            work_conserving: true,
            flow_finish_gap: Some(Nanos::from_millis(40)),
        }
    }
}

impl SaathConfig {
    /// The limit of queue `q` in bytes of the coflow (infinite for the last queue).
    pub fn limit(&self, q: usize) -> f64 {
        if q + 1 >= self.queues { f64::INFINITY } else { self.first_threshold * self.factor.powi(q as i32) }
    }

    /// The queue of a coflow of `width` flows whose flow that sent most sent `sent` bytes.
    pub fn queue(&self, sent: f64, width: u32) -> usize {
        let w = f64::from(width.max(1));
        let mut q = 0;
        while q + 1 < self.queues && sent >= self.limit(q) / w {
            q += 1;
        }
        q
    }

    /// The weight of queue `q` in the sharing of a port: `K − q`.
    fn weight(&self, q: usize) -> f64 {
        (self.queues - q.min(self.queues - 1)) as f64
    }
}

/// What Saath keeps of a coflow for its life.
#[derive(Clone, Debug, Default)]
struct State {
    queue: usize,
    /// Since when it has waited unserved: when it entered its queue or was last served all or
    /// none.
    waiting_since: Nanos,
    /// Whether the previous decision served it all or none: it has not waited since.
    admitted: bool,
    /// Per leg, in the coflow's leg order: its route and its *own* bytes per flow: for an active
    /// leg that crosses the fabric, what each of its flows has sent less `along`, so that serving
    /// a coflow all or none costs one addition, not one per leg.
    legs: Vec<(Route, f64)>,
    /// The bytes per flow its all-or-none rates have given every active flow since its legs were
    /// last laid out (at its arrival, or when a rebuilt input moved them).
    along: f64,
    /// Its all-or-none rate per flow at the previous decision (zero if it was not served so).
    rate: f64,
    /// The most bytes one of its flows has sent (a finished flow counts with its size).
    most: f64,
    /// The legs the work-conserving pass served at the previous decision, as (offset, bytes per
    /// second per flow on top of `rate`), by ascending offset.
    served: Vec<(u32, f64)>,
    /// Its active legs that cross the fabric, except those in `served` (their own bytes change
    /// at every decision): how many have no bytes of their own, and the others by their own
    /// bytes, so that the flow that sent most is found without a walk over the legs: a heap of
    /// (own bytes as [`ordered`] keys them, offset), most first, in which an entry counts only
    /// while its leg is ranked (`is_ranked`) with those bytes (a ranked leg's own bytes hold);
    /// stale entries are dropped when they reach the top, and all of them once they outnumber
    /// the ranked legs.
    plain: u32,
    ranked: BinaryHeap<(u64, u32)>,
    is_ranked: Vec<bool>,
    ranked_legs: u32,
    /// The least capacity of its ports (NaN when not known: its ports or their capacities
    /// changed since).
    slowest: f64,
}

/// The larger of two numbers either of which may be missing.
fn max_of(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, y) => x.or(y),
    }
}

impl State {
    /// Ranks the active legs of `c` that cross the fabric afresh, with none in `served`.
    fn rank_active(&mut self, c: &BlindCoflow, legs: &[BlindLeg]) {
        self.served.clear();
        self.plain = 0;
        self.ranked.clear();
        self.is_ranked.clear();
        self.is_ranked.resize(self.legs.len(), false);
        self.ranked_legs = 0;
        for (j, l) in legs[c.legs.clone()].iter().enumerate() {
            if l.active_flows > 0 && !l.route.hops().is_empty() {
                self.rank_in(j);
            }
        }
    }

    /// Counts leg `j` (active, crossing the fabric) in the ranking.
    fn rank_in(&mut self, j: usize) {
        let own = self.legs[j].1;
        if own == 0.0 {
            self.plain += 1;
        } else {
            self.ranked.push((ordered(own), j as u32));
            self.is_ranked[j] = true;
            self.ranked_legs += 1;
        }
    }

    /// Takes leg `j` out of the ranking.
    fn rank_out(&mut self, j: usize) {
        let own = self.legs[j].1;
        if own == 0.0 {
            self.plain -= 1;
        } else {
            self.is_ranked[j] = false;
            self.ranked_legs -= 1;
            if self.ranked.len() > 2 * self.ranked_legs as usize + 32 {
                let (legs, is_ranked) = (&self.legs, &self.is_ranked);
                self.ranked.clear();
                self.ranked.extend((0..legs.len()).filter(|&j| is_ranked[j]).map(|j| (ordered(legs[j].1), j as u32)));
            }
        }
    }

    /// Whether leg `j` is in `served`.
    fn is_served(&self, j: usize) -> bool {
        self.served.binary_search_by_key(&(j as u32), |&(x, _)| x).is_ok()
    }

    /// The most own bytes of a ranked leg, if any.
    fn top(&mut self) -> Option<f64> {
        while let Some(&(r, j)) = self.ranked.peek() {
            if self.is_ranked[j as usize] && ordered(self.legs[j as usize].1) == r {
                break;
            }
            self.ranked.pop();
        }
        let ranked = self.ranked.peek().map(|&(_, j)| self.legs[j as usize].1);
        max_of(ranked, (self.plain > 0).then_some(0.0))
    }

    /// Lists the legs served now, `next` by ascending offset, in place of those of the previous
    /// decision: a leg no longer served goes back into the ranking if it is active and crosses
    /// the fabric, and one newly served leaves it.
    fn serve(&mut self, next: &mut Vec<(u32, f64)>, legs: &[BlindLeg]) {
        let crosses = |j: u32| !legs[j as usize].route.hops().is_empty();
        let (mut a, mut b) = (0, 0);
        loop {
            let old = self.served.get(a).map(|&(j, _)| j);
            let new = next.get(b).map(|&(j, _)| j);
            match (old, new) {
                (Some(x), Some(y)) if x == y => {
                    a += 1;
                    b += 1;
                }
                (Some(x), Some(y)) if y < x => {
                    if crosses(y) {
                        self.rank_out(y as usize);
                    }
                    b += 1;
                }
                (None, Some(y)) => {
                    if crosses(y) {
                        self.rank_out(y as usize);
                    }
                    b += 1;
                }
                (Some(x), _) => {
                    if legs[x as usize].active_flows > 0 && crosses(x) {
                        self.rank_in(x as usize);
                    }
                    a += 1;
                }
                (None, None) => break,
            }
        }
        std::mem::swap(&mut self.served, next);
        next.clear();
    }
}

/// Saath.
#[derive(Debug, Default)]
pub struct Saath {
    cfg: SaathConfig,
    states: BTreeMap<CoflowId, State>,
    shapes: Shapes,
    last: Nanos,
    /// Scratch.
    open: Vec<u64>,
    share: Vec<f64>,
    touched: Vec<usize>,
    total_weight: Vec<f64>,
    left: Vec<f64>,
    contention: Contention,
    /// The resources with room in `left`, as a bit set (the work-conserving pass).
    room: Vec<u64>,
    /// The legs of one coflow served now.
    next: Vec<(u32, f64)>,
    /// The capacities the states' `slowest` were found under.
    caps: Vec<f64>,
}

impl Saath {
    /// Saath with these parameters.
    pub fn new(cfg: SaathConfig) -> Saath {
        assert!(cfg.queues >= 1 && cfg.first_threshold > 0.0 && cfg.factor > 1.0, "invalid Saath parameters");
        assert!(cfg.aging.is_none_or(|a| a > 0.0), "invalid Saath aging");
        Saath { cfg, ..Saath::default() }
    }

    /// The queue a coflow is in.
    pub fn queue(&self, coflow: CoflowId) -> Option<usize> {
        self.states.get(&coflow).map(|s| s.queue)
    }

    /// The most bytes one flow of the coflow has sent, as the policy counts them.
    pub fn most_sent(&self, coflow: CoflowId) -> Option<f64> {
        self.states.get(&coflow).map(|s| s.most)
    }
}

impl BlindScheduler for Saath {
    fn name(&self) -> &'static str {
        "saath"
    }

    fn report_interval(&self) -> Nanos {
        // It counts the bytes flows sent from its own rates.
        Nanos::MAX
    }

    fn flow_finish_gap(&self) -> Option<Nanos> {
        self.cfg.flow_finish_gap
    }

    /// All or none keeps an admitted coflow's rate decision after decision.
    fn standing_rates(&self) -> bool {
        true
    }

    fn handle_finished(&mut self, _now: Nanos, coflow: CoflowId) {
        self.states.remove(&coflow);
        self.shapes.remove(coflow);
        self.contention.remove(coflow);
    }

    fn poll_allocation(&mut self, input: &BlindInput<'_>, out: &mut BlindAllocation) -> Option<Nanos> {
        let cap = input.fabric.capacities();
        let resources = cap.len();
        let k = self.cfg.queues;
        let now = input.now;
        // It lists the legs its work-conserving pass serves, none some decisions.
        out.listed = true;
        let dt = now.saturating_sub(self.last).as_secs_f64();
        self.last = now;
        // What each coflow's slowest port is holds while the capacities and its ports do.
        if input.everything || self.caps.as_slice() != cap {
            self.caps.clear();
            self.caps.extend_from_slice(cap);
            for s in self.states.values_mut() {
                s.slowest = f64::NAN;
            }
        }
        // The legs that finished leave the ranking; then the shapes and contention follow, and a
        // coflow that no longer crosses a resource has its slowest port found again.
        if !input.everything {
            for &(id, j, l) in input.legs_finished {
                if let Some(s) = self.states.get_mut(&id)
                    && (j as usize) < s.legs.len()
                    && !input.legs[l].route.hops().is_empty()
                    && !s.is_served(j as usize)
                {
                    s.rank_out(j as usize);
                }
            }
        }
        self.contention.follow(&mut self.shapes, &mut self.states, input, |s| s.slowest = f64::NAN);

        // Bytes sent: every active flow of a coflow served all or none sent its rate since the
        // previous decision, and each leg the work-conserving pass served its extra on top, if
        // it is still active (a flow that finished counts with its size, below). A coflow whose
        // legs are no longer where they were (a rebuilt input that dropped finished flows) keeps
        // its legs' counts by route.
        for c in input.coflows {
            let Some(s) = self.states.get_mut(&c.id) else { continue };
            let legs = &input.legs[c.legs.clone()];
            // Told what changed, the driver keeps a coflow's legs for its life: only a rebuilt
            // input may have moved them, and only then are the legs ranked afresh.
            let same = legs.len() == s.legs.len()
                && (!input.everything || legs.iter().zip(&s.legs).all(|(l, x)| l.route == x.0));
            s.along += s.rate * dt;
            // The legs with an extra are out of the ranking: the most one of them sent is found
            // here.
            let mut most: Option<f64> = None;
            for k in 0..s.served.len() {
                let (j, extra) = s.served[k];
                let j = j as usize;
                let active = if same {
                    legs[j].active_flows > 0
                } else {
                    input.legs[c.legs_on(input.legs, s.legs[j].0)].iter().any(|l| l.active_flows > 0)
                };
                if active {
                    s.legs[j].1 += extra * dt;
                    most = max_of(most, Some(s.legs[j].1));
                }
            }
            if !same {
                let old = std::mem::take(&mut s.legs);
                let mut o = 0;
                for l in legs {
                    while o < old.len() && old[o].0 < l.route {
                        o += 1;
                    }
                    let sent = if o < old.len() && old[o].0 == l.route {
                        o += 1;
                        old[o - 1].1 + s.along
                    } else {
                        0.0
                    };
                    s.legs.push((l.route, sent));
                }
                s.along = 0.0;
            }
            // Rebuilt, a finished leg may have flows again; the ranking then holds every active
            // leg.
            if !same || input.everything {
                s.rank_active(c, input.legs);
                most = None;
            }
            if let Some(top) = max_of(s.top(), most) {
                s.most = s.most.max(top + s.along);
            }
        }
        for f in input.flows_finished {
            if let Some(s) = self.states.get_mut(&f.coflow) {
                s.most = s.most.max(f.bytes_per_flow);
            }
        }
        for c in input.coflows {
            let s = self.states.entry(c.id).or_insert_with(|| {
                let mut s = State {
                    waiting_since: now,
                    legs: input.legs[c.legs.clone()].iter().map(|l| (l.route, 0.0)).collect(),
                    slowest: f64::NAN,
                    ..State::default()
                };
                s.rank_active(c, input.legs);
                s
            });
            if s.admitted {
                s.waiting_since = now;
            }
            let q = self.cfg.queue(s.most, c.width).max(s.queue);
            if q != s.queue {
                s.queue = q;
                s.waiting_since = now;
                self.contention.set_group(c.id, q);
            }
            if !self.contention.contains(c.id) {
                self.contention.add(c.id, s.queue, &self.shapes[&c.id].resources, resources);
            }
        }

        // The order: by queue; in a queue, those that waited too long first (longest first),
        // then least contention, then arrival.
        let shapes: Vec<&[(ResourceId, u32)]> =
            input.coflows.iter().map(|c| self.shapes[&c.id].resources.as_slice()).collect();
        let group: Vec<usize> = input.coflows.iter().map(|c| self.states[&c.id].queue).collect();
        let contention: Vec<u32> = input.coflows.iter().map(|c| self.contention.of(c.id)).collect();
        let mut aged_at: Vec<Nanos> = Vec::with_capacity(input.coflows.len());
        let mut order: Vec<(usize, bool, Nanos, u32, usize)> = Vec::with_capacity(input.coflows.len());
        for (i, c) in input.coflows.iter().enumerate() {
            let s = self.states.get_mut(&c.id).expect("a state");
            let at = match self.cfg.aging {
                Some(a) => {
                    if s.slowest.is_nan() {
                        s.slowest = shapes[i].iter().map(|&(r, _)| cap[r as usize]).fold(f64::INFINITY, f64::min);
                    }
                    let slowest = s.slowest;
                    let limit = self.cfg.first_threshold * self.cfg.factor.powi(s.queue as i32);
                    let wait = a * limit / slowest;
                    if wait.is_finite() {
                        s.waiting_since.saturating_add(Nanos::from_secs_f64(wait))
                    } else {
                        Nanos::MAX
                    }
                }
                None => Nanos::MAX,
            };
            aged_at.push(at);
            let aged = at <= now;
            order.push((s.queue, !aged, if aged { s.waiting_since } else { Nanos::ZERO }, contention[i], i));
        }
        order.sort_unstable();

        // Each port's share per queue present there.
        self.share.resize(k * resources, 0.0);
        self.total_weight.clear();
        self.total_weight.resize(resources, 0.0);
        self.touched.clear();
        for (i, rs) in shapes.iter().enumerate() {
            let q = group[i];
            for &(r, _) in *rs {
                let slot = q * resources + r as usize;
                if self.share[slot] == 0.0 {
                    self.share[slot] = -1.0;
                    self.touched.push(slot);
                    self.total_weight[r as usize] += self.cfg.weight(q);
                }
            }
        }
        for &slot in &self.touched {
            let (q, r) = (slot / resources, slot % resources);
            self.share[slot] = cap[r] * self.cfg.weight(q) / self.total_weight[r];
        }

        // All or none: one rate for every flow of a coflow, the most its queue's share of each of
        // its ports allows, or nothing.
        self.left.clear();
        self.left.extend_from_slice(cap);
        let mut admitted = vec![false; input.coflows.len()];
        for &(q, _, _, _, i) in &order {
            let base = q * resources;
            let mut rate = f64::INFINITY;
            for &(r, n) in shapes[i] {
                let x = self.share[base + r as usize];
                let room = if x <= cap[r as usize] * FULL { 0.0 } else { x };
                rate = rate.min(room / f64::from(n.max(1)));
            }
            if !(rate > 0.0 && rate.is_finite()) {
                continue;
            }
            admitted[i] = true;
            for &(r, n) in shapes[i] {
                let used = rate * f64::from(n);
                let x = &mut self.share[base + r as usize];
                *x = (*x - used).max(0.0);
                let y = &mut self.left[r as usize];
                *y = (*y - used).max(0.0);
            }
            // Every active flow of the coflow that crosses the fabric (the blind adapter gives the
            // rate to each).
            out.coflow_rate[i] = rate;
        }
        for &slot in &self.touched {
            self.share[slot] = 0.0;
        }

        // What all-or-none left, to the flows in the same order.
        if self.cfg.work_conserving {
            let weight = &self.total_weight;
            let mut rest = Leftover::new(cap, &mut self.left, |r| weight[r] > 0.0, &mut self.room);
            for &(_, _, _, _, i) in &order {
                if !rest.any() {
                    break;
                }
                let c = &input.coflows[i];
                rest.serve(c, &self.shapes[&c.id], input.legs, out, &mut self.open);
            }
        }

        // Remember what each coflow was given; wake when a served flow will cross its coflow's
        // per-flow limit, or a waiting coflow ages. Of a coflow served all or none, the flows
        // without an extra reach the limit first from the one that sent most; those with an
        // extra, each at its own pace.
        // The served legs come in runs, ascending within a coflow, which a stable sort merges.
        out.served.sort();
        // The soonest crossing, in seconds from now, made a time once (rounding is monotone).
        let mut soonest = f64::INFINITY;
        let mut k = 0;
        for (i, c) in input.coflows.iter().enumerate() {
            let run = out.served[k..].partition_point(|&l| l < c.legs.end);
            let rate = out.coflow_rate[i];
            let s = self.states.get_mut(&c.id).expect("a state");
            s.rate = rate;
            if run == 0 && rate == 0.0 {
                s.serve(&mut self.next, &input.legs[c.legs.clone()]);
                continue;
            }
            let limit = self.cfg.limit(s.queue) / f64::from(c.width.max(1));
            for &l in &out.served[k..k + run] {
                let extra = out.leg_rate[l];
                let j = l - c.legs.start;
                self.next.push((j as u32, extra));
                if limit.is_finite() && rate + extra > 0.0 {
                    soonest = soonest.min(((limit - (s.legs[j].1 + s.along)) / (rate + extra)).max(0.0));
                }
            }
            s.serve(&mut self.next, &input.legs[c.legs.clone()]);
            if limit.is_finite()
                && rate > 0.0
                && let Some(top) = s.top()
            {
                soonest = soonest.min(((limit - (top + s.along)) / rate).max(0.0));
            }
            k += run;
        }
        let mut wake = if soonest < f64::INFINITY {
            now.saturating_add(Nanos::from_secs_f64(soonest)).saturating_add(Nanos(1))
        } else {
            Nanos::MAX
        };
        for (i, c) in input.coflows.iter().enumerate() {
            let s = self.states.get_mut(&c.id).expect("a state");
            s.admitted = admitted[i];
            if admitted[i] {
                s.waiting_since = now;
            } else if aged_at[i] > now {
                wake = wake.min(aged_at[i]);
            }
        }
        (wake < Nanos::MAX).then_some(wake)
    }
}
