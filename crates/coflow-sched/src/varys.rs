//! `varys`: Smallest-Effective-Bottleneck-First ordering with MADD rates, work-conserving
//! backfill and starvation freedom (Varys §5.3, Pseudocode 1).
//!
//! At every decision:
//! 1. Each active coflow's effective bottleneck `Γ` is computed on its remaining bytes and the
//!    ports' bandwidth (Eq. 1), and coflows are sorted by it (ties: earlier arrival, smaller id).
//! 2. In that order, each coflow gets MADD on the bandwidth the coflows before it left: every flow
//!    sends `remaining / Γ'` where `Γ'` is the coflow's bottleneck on the leftover, so all its
//!    flows finish together and its bottleneck port fills. A coflow with a full port gets nothing.
//! 3. Backfill (§5.3.4): in the same order, each flow (each group of a coflow's flows between one
//!    pair of machines) is sped up by as much as both its ports still allow, so that no port stays
//!    idle while a flow that crosses it could use it.
//!
//! Starvation freedom alternates a `T` interval of the above with a `δ` interval in which only the
//! coflows that got no service during the `T` interval are served, as one coflow by MADD (a
//! coflow arriving as the interval ends was not there to be starved, and waits for the next).
//! The policy is called on arrivals, completions and its own `T`/`δ` timers.

use std::collections::{BTreeMap, BTreeSet};

use coflow_core::{CoflowId, Nanos};

use crate::coflowsim::{JavaRandom, PortShares};
use crate::fabric::ResourceId;
use crate::kernel::{LiveLegs, NO_BYTES, Witness, backfill, bottleneck, madd, madd_on_loaded};
use crate::scheduler::Scheduler;
use crate::state::{Allocation, CoflowState, Input, ServiceModel};

/// The order in which coflows get MADD and backfill.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    /// Smallest effective bottleneck first (Γ, Eq. 1): `varys`.
    Sebf,
    /// Shortest first: smallest remaining largest flow (`scf`).
    Scf,
    /// Narrowest first: fewest flows (`ncf`); width is a coflow's shape, so it is not updated as
    /// flows finish (else backfill, finishing single flows, would reorder coflows).
    Ncf,
    /// Smallest total first: fewest remaining bytes (`tcf`).
    Tcf,
    /// Arrival order (`fifo`, the FIFO baseline of Varys §7.4 and of its simulator): Varys's two
    /// passes with arrival order as the order, MADD for each coflow on what earlier ones left,
    /// then backfill. A later coflow never takes an earlier one's MADD share, only bandwidth
    /// backfill would have given flows off the earlier coflow's bottleneck.
    Fifo,
    /// Arrival order as strict priority (`fifo-strict`, Orchestra): each coflow gets its MADD and
    /// its backfill before the next one gets anything, so a later coflow only ever uses what
    /// earlier ones leave and nothing is preempted.
    FifoStrict,
}

impl Order {
    /// The policy name this order goes by.
    pub fn name(self) -> &'static str {
        match self {
            Order::Sebf => "varys",
            Order::Scf => "scf",
            Order::Ncf => "ncf",
            Order::Tcf => "tcf",
            Order::Fifo => "fifo",
            Order::FifoStrict => "fifo-strict",
        }
    }
}

/// Parameters of [`Varys`]; the defaults are the paper's (§7.1).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct VarysConfig {
    /// The coflow order (SEBF for Varys itself).
    pub order: Order,
    /// Whether to run the starvation-freedom intervals at all.
    pub starvation_freedom: bool,
    /// `T`: how long SEBF runs before starved coflows get a turn (2 s).
    pub period: Nanos,
    /// `δ`: how long the starved coflows' turn lasts (200 ms).
    pub slot: Nanos,
    /// Whether to backfill leftover bandwidth after MADD (work conservation).
    pub backfill: bool,
    /// After flows finish, reschedule at most once per this interval so that their bandwidth is
    /// used again (`None`: only on coflow arrivals, completions and the `T`/`δ` timers, §6.2).
    /// Default 100 ms, within the paper's `δ` scale.
    pub flow_finish_gap: Option<Nanos>,
    /// The reference simulator's keys (CoflowSim): each coflow's order key is computed once, when
    /// the policy first sees it, on its whole bytes (SEBF on the initial Γ, SCF on its largest
    /// flow, NCF on the fewer of its senders and receivers, TCF on its total bytes), and backfill
    /// goes in order of arrival plus initial Γ (its pseudo-deadline) instead of the policy's order.
    pub static_keys: bool,
    /// The reference simulator's first step of work conservation: before backfill, every coflow
    /// MADD gave nothing because one of its resources was full shares what MADD left, all of them
    /// together, every flow whose resources all have room getting, per resource, an equal share
    /// of what the resource has left among the flows counted there (its `updateRatesFairShare`).
    pub blocked_share: bool,
    /// The reference simulator's LCF, with [`Order::Tcf`]: a coflow takes its place in the order
    /// once, when first seen, before the first coflow already placed whose *remaining* bytes
    /// exceed its total (after those equal to it), and keeps it.
    pub lcf_insertion: bool,
    /// With [`VarysConfig::static_keys`], the reference simulator's deadline multiplier: the
    /// pseudo-deadline is arrival plus initial Γ times `1 + U`, `U` uniform in `[0, 1)` drawn
    /// from `java.util.Random(seed)` for each coflow in the order they are first seen.
    pub deadline_jitter: Option<u64>,
    /// The reference simulator's MADD: only a full resource where a coflow still has bytes
    /// blocks it. Otherwise a full resource where its legs have all finished blocks it too.
    pub loaded_ports_block: bool,
}

impl Default for VarysConfig {
    fn default() -> Self {
        VarysConfig {
            order: Order::Sebf,
            starvation_freedom: true,
            period: Nanos::from_secs(2),
            slot: Nanos::from_millis(200),
            backfill: true,
            flow_finish_gap: Some(Nanos::from_millis(100)),
            static_keys: false,
            blocked_share: false,
            lcf_insertion: false,
            deadline_jitter: None,
            loaded_ports_block: false,
        }
    }
}

impl VarysConfig {
    /// An ordering baseline of Varys §5.3.2 (or FIFO): the same MADD and backfill in another
    /// order, without starvation freedom.
    pub fn baseline(order: Order) -> VarysConfig {
        VarysConfig { order, starvation_freedom: false, ..VarysConfig::default() }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// No coflow in the system: no timer runs.
    Idle,
    /// Minimising CCT by SEBF until the given time.
    Sebf(Nanos),
    /// Serving the starved coflows until the given time.
    Starved(Nanos),
}

/// SEBF + MADD + backfill + starvation freedom.
#[derive(Debug)]
pub struct Varys {
    cfg: VarysConfig,
    phase: Phase,
    /// Coflows that received service during the current `T` interval.
    served: BTreeSet<CoflowId>,
    /// Coflows starved during the last `T` interval, served in the current `δ` interval.
    starved: BTreeSet<CoflowId>,
    /// Coflows given a positive rate by the previous decision, and when it was made.
    last: (Nanos, Vec<CoflowId>),
    /// With [`VarysConfig::static_keys`]: each coflow's order key and pseudo-deadline (arrival
    /// plus initial Γ times its multiplier, in seconds), fixed when first seen.
    fixed: BTreeMap<CoflowId, (f64, f64)>,
    /// With [`VarysConfig::deadline_jitter`]: the generator of the multipliers.
    jitter: Option<JavaRandom>,
    /// With [`VarysConfig::lcf_insertion`]: the coflows in the order they were placed in.
    placed: Vec<CoflowId>,
    /// With [`VarysConfig::blocked_share`]: the shares of the coflows MADD skipped.
    shares: PortShares,
    /// Every coflow's unfinished legs, for backfill, with its kept key and rank.
    live: LiveLegs,
    /// How many coflows the previous order ranked.
    ranked: usize,
    scratch: Scratch,
}

/// Per-decision buffers, kept to avoid allocating on the hot path.
#[derive(Debug, Default)]
struct Scratch {
    acc: Vec<f64>,
    /// Remaining bytes per resource of each participating coflow: `spans[k]` indexes `loads`.
    loads: Vec<(ResourceId, f64)>,
    spans: Vec<std::ops::Range<usize>>,
    gamma: Vec<f64>,
    members: Vec<usize>,
    order: Vec<usize>,
    /// The previous order's coflows by their rank, and those without one, to sort from.
    slots: Vec<u32>,
    rest: Vec<usize>,
    /// One coflow's loads, for MADD when they are not all copied.
    buf: Vec<(ResourceId, f64)>,
    left: Vec<f64>,
    served: Vec<bool>,
    /// The legs of the coflows MADD skipped, as `(coflow, leg)`.
    blocked: Vec<(usize, usize)>,
    /// Per coflow of the input, its place in [`Varys::placed`], and the input's coflows by id.
    place: Vec<u32>,
    by_id: Vec<(CoflowId, usize)>,
    /// Per resource, a mark: a sender of the coflow at hand (for LCF), or a resource where it
    /// has bytes (for MADD); all clear between uses.
    marks: Vec<bool>,
}

impl Varys {
    /// A Varys scheduler with these parameters.
    pub fn new(cfg: VarysConfig) -> Varys {
        Varys {
            cfg,
            phase: Phase::Idle,
            served: BTreeSet::new(),
            starved: BTreeSet::new(),
            last: (Nanos::ZERO, Vec::new()),
            fixed: BTreeMap::new(),
            jitter: cfg.deadline_jitter.map(JavaRandom::new),
            placed: Vec::new(),
            shares: PortShares::default(),
            live: LiveLegs::default(),
            ranked: 0,
            scratch: Scratch::default(),
        }
    }

    /// Moves the starvation-freedom phase forward to `now` and returns the time of its next turn.
    fn advance_phase(&mut self, input: &Input<'_>) -> Option<Nanos> {
        let now = input.now;
        if !self.cfg.starvation_freedom {
            return None;
        }
        if input.coflows.is_empty() {
            self.phase = Phase::Idle;
            self.served.clear();
            self.starved.clear();
            return None;
        }
        loop {
            match self.phase {
                Phase::Idle => {
                    self.served.clear();
                    self.phase = Phase::Sebf(now.saturating_add(self.cfg.period));
                }
                Phase::Sebf(end) if now >= end => {
                    self.starved = input
                        .coflows
                        .iter()
                        .filter(|c| c.arrival < end && !self.served.contains(&c.id))
                        .map(|c| c.id)
                        .collect();
                    self.served.clear();
                    self.phase = if self.starved.is_empty() {
                        Phase::Sebf(end.saturating_add(self.cfg.period))
                    } else {
                        Phase::Starved(end.saturating_add(self.cfg.slot))
                    };
                }
                Phase::Starved(end) if now >= end => {
                    self.starved.clear();
                    self.served.clear();
                    self.phase = Phase::Sebf(end.saturating_add(self.cfg.period));
                }
                Phase::Sebf(end) | Phase::Starved(end) => return Some(end),
            }
        }
    }
}

impl Default for Varys {
    fn default() -> Self {
        Varys::new(VarysConfig::default())
    }
}

impl Scheduler for Varys {
    fn name(&self) -> &'static str {
        self.cfg.order.name()
    }

    fn model(&self) -> ServiceModel {
        ServiceModel::Proportional
    }

    fn flow_finish_gap(&self) -> Option<Nanos> {
        self.cfg.flow_finish_gap
    }

    fn reads_reshaped_legs(&self) -> bool {
        // SCF's keys, kept leg by leg.
        self.cfg.order == Order::Scf && !self.cfg.static_keys
    }

    fn handle_finished(&mut self, _now: Nanos, coflow: CoflowId) {
        self.served.remove(&coflow);
        self.starved.remove(&coflow);
        self.fixed.remove(&coflow);
        if self.cfg.lcf_insertion {
            self.placed.retain(|&c| c != coflow);
        }
    }

    fn poll_allocation(&mut self, input: &Input<'_>, out: &mut Allocation) -> Option<Nanos> {
        // The previous decision held from its time until now: its coflows were served.
        if input.now > self.last.0 {
            self.served.extend(self.last.1.drain(..));
        }
        let wake = self.advance_phase(input);
        self.live.update(input);

        let s = &mut self.scratch;
        s.members.clear();
        match self.phase {
            Phase::Starved(_) => {
                s.members.extend((0..input.coflows.len()).filter(|&k| self.starved.contains(&input.coflows[k].id)))
            }
            _ => s.members.extend(0..input.coflows.len()),
        }
        let starved = matches!(self.phase, Phase::Starved(_));
        let cap = input.fabric.capacities();
        // With one capacity `C` on every resource, Γ is the coflow's largest scaled load `B` times
        // its scale over `C`: `x ↦ x·scale/C` rounds monotonically, so the largest of the rounded
        // per-resource times is the rounded time of `B`, to the bit. `B` moves only when a leg
        // of the coflow is sent apart from its rate or finishes, so it is kept between decisions.
        let uniform = cap.first().is_some_and(|&c0| c0 > 0.0 && c0.is_finite() && cap.iter().all(|&x| x == c0));
        // Every coflow's loads are copied out only where a key or the starved union reads them all.
        let copy = starved
            || self.cfg.static_keys
            || match self.cfg.order {
                Order::Sebf => !uniform,
                Order::Tcf => true,
                Order::Scf | Order::Ncf | Order::Fifo | Order::FifoStrict => false,
            };
        s.loads.clear();
        s.spans.clear();
        if copy {
            for &k in &s.members {
                let start = s.loads.len();
                s.loads.extend(input.remaining_loads(&input.coflows[k]));
                s.spans.push(start..s.loads.len());
            }
        }
        s.left.clear();
        s.left.extend_from_slice(cap);

        // The order key of each coflow: for SEBF, Γ on remaining bytes and the ports' bandwidth.
        s.gamma.clear();
        for (o, &k) in s.members.iter().enumerate() {
            let c = &input.coflows[k];
            if self.cfg.static_keys {
                let (order, loads) = (self.cfg.order, &s.loads[s.spans[o].clone()]);
                let jitter = &mut self.jitter;
                let (key, _) = *self.fixed.entry(c.id).or_insert_with(|| {
                    let (key, gamma) = static_key(order, input, c, loads, cap);
                    let multiplier = jitter.as_mut().map_or(1.0, |g| 1.0 + g.next_double());
                    (key, c.arrival.as_secs_f64() + gamma * multiplier)
                });
                s.gamma.push(key);
                continue;
            }
            s.gamma.push(match self.cfg.order {
                Order::Sebf if uniform => {
                    let peak = self.live.memo(k).unwrap_or_else(|| {
                        let loads = input.loads[c.loads.clone()].iter().map(|&(r, b)| (b, Witness::Resource(r)));
                        let (peak, at) = largest(loads);
                        self.live.set_memo(k, peak, at);
                        peak
                    });
                    peak * c.scale / cap[0]
                }
                Order::Sebf => bottleneck(&s.loads[s.spans[o].clone()], cap),
                // The largest remaining flow: the largest scaled one, kept leg by leg between
                // decisions, times the scale (`x ↦ x·scale` rounds monotonically too).
                Order::Scf => self.live.leg_largest(input, k, |leg| leg.longest * leg.scaled) * c.scale,
                Order::Ncf => c.width as f64,
                Order::Tcf => {
                    let loads = &s.loads[s.spans[o].clone()];
                    input.senders_of(c).iter().map(|sd| sender_load(loads, sd.resource)).sum()
                }
                Order::Fifo | Order::FifoStrict => 0.0,
            });
        }
        if self.cfg.lcf_insertion && self.cfg.order == Order::Tcf && !starved {
            place_lcf(&mut self.placed, input, s);
            for (o, &k) in s.members.iter().enumerate() {
                s.gamma[o] = f64::from(s.place[k]);
            }
        }
        // Sorted from the previous decision's order, which most keys keep (only served coflows'
        // move): the order is total, so where the sort starts from changes nothing but its cost.
        s.order.clear();
        if starved {
            s.order.extend(0..s.members.len());
        } else {
            let n = s.members.len();
            s.slots.clear();
            s.slots.resize(n.max(self.ranked), u32::MAX);
            s.rest.clear();
            for k in 0..n {
                match s.slots.get_mut(self.live.rank(k) as usize) {
                    Some(slot) if *slot == u32::MAX => *slot = k as u32,
                    _ => s.rest.push(k),
                }
            }
            s.order.extend(s.slots.iter().filter(|&&k| k != u32::MAX).map(|&k| k as usize));
            s.order.extend_from_slice(&s.rest);
        }
        let (gamma, members) = (&s.gamma, &s.members);
        s.order.sort_by(|&a, &b| {
            let (ca, cb) = (&input.coflows[members[a]], &input.coflows[members[b]]);
            gamma[a].total_cmp(&gamma[b]).then(ca.arrival.cmp(&cb.arrival)).then(ca.id.cmp(&cb.id))
        });
        if !starved {
            for (rank, &o) in s.order.iter().enumerate() {
                self.live.set_rank(s.members[o], rank as u32);
            }
            self.ranked = s.order.len();
        }

        // Varys's two passes (Pseudocode 1): MADD for every coflow in order, then backfill.
        // Strict FIFO instead gives each coflow its MADD and its backfill before the next one gets
        // anything, so a later coflow never takes bandwidth an earlier one uses.
        let strict = self.cfg.order == Order::FifoStrict && !starved;
        // Which coflows this decision serves, for starvation freedom: those with a rate, and those
        // backfill gives an extra.
        s.served.clear();
        s.served.resize(input.coflows.len(), false);
        if starved {
            // All starved coflows as one: MADD over their union on the full ports.
            s.acc.clear();
            s.acc.resize(cap.len(), 0.0);
            for &(r, b) in &s.loads {
                s.acc[r as usize] += b;
            }
            let union: Vec<(ResourceId, f64)> =
                s.acc.iter().enumerate().filter(|&(_, &b)| b > 0.0).map(|(r, &b)| (r as ResourceId, b)).collect();
            let sigma = madd(&union, &mut s.left, cap);
            for &k in &s.members {
                out.coflow_rate[k] = sigma;
            }
        } else {
            for &o in &s.order {
                let k = s.members[o];
                let sigma = if self.cfg.loaded_ports_block {
                    // Only where it has bytes: the masks know no loads, so its legs are read.
                    s.buf.clear();
                    s.buf.extend(input.remaining_loads(&input.coflows[k]));
                    madd_where_loaded(input, k, &mut self.live, &s.buf, &mut s.marks, &mut s.left, cap)
                } else if self.live.has_full(input, k, &s.left, cap) {
                    // A coflow with a full resource gets nothing from MADD: found without its loads.
                    0.0
                } else if copy {
                    madd(&s.loads[s.spans[o].clone()], &mut s.left, cap)
                } else {
                    s.buf.clear();
                    s.buf.extend(input.remaining_loads(&input.coflows[k]));
                    madd(&s.buf, &mut s.left, cap)
                };
                if sigma > 0.0 {
                    let loads =
                        if copy && !self.cfg.loaded_ports_block { &s.loads[s.spans[o].clone()] } else { &s.buf[..] };
                    self.live.took(loads.iter().map(|&(r, _)| r), &s.left, cap);
                }
                out.coflow_rate[k] = sigma;
                if strict && self.cfg.backfill {
                    s.served[k] = backfill(input, k, Some(&mut self.live), &mut s.left, cap, out);
                }
            }
        }
        // The reference's fair share of what MADD left among the coflows it skipped.
        let shared = self.cfg.blocked_share && !starved && !strict && {
            s.blocked.clear();
            for &o in &s.order {
                let k = s.members[o];
                if out.coflow_rate[k] > 0.0 {
                    continue;
                }
                let c = &input.coflows[k];
                match self.live.get(input, k) {
                    Some(list) => s.blocked.extend(list.legs(c).map(|l| (k, l))),
                    None => s.blocked.extend(c.legs.clone().map(|l| (k, l))),
                }
            }
            self.shares.give(input, &s.blocked, &mut s.left, cap, out, Some(&mut s.served))
        };
        if shared {
            self.live.took((0..cap.len()).map(|r| r as ResourceId), &s.left, cap);
        }
        if self.cfg.backfill && !strict {
            if self.cfg.static_keys {
                // The reference simulator's work conservation goes by pseudo-deadline.
                let (members, fixed) = (&s.members, &self.fixed);
                let due = |o: usize| fixed.get(&input.coflows[members[o]].id).map_or(f64::INFINITY, |f| f.1);
                // Stable: ties keep the policy's order, as the reference's sort does.
                s.order.sort_by(|&a, &b| due(a).total_cmp(&due(b)));
            }
            for &o in &s.order {
                let k = s.members[o];
                s.served[k] |= backfill(input, k, Some(&mut self.live), &mut s.left, cap, out);
            }
        }
        if shared {
            // Backfill may have sped up a leg the fair share gave to.
            out.merge_leg_extras();
        }

        self.last.0 = input.now;
        self.last.1.clear();
        for (k, c) in input.coflows.iter().enumerate() {
            if out.coflow_rate[k] > 0.0 || s.served[k] {
                self.last.1.push(c.id);
            }
        }
        wake
    }
}

/// The largest of non-negative `values` and where the first of it is; zero, found nowhere, for
/// none (a zero stays the largest whatever finishes). Equal to the bit to folding with
/// `f64::max` from zero.
fn largest(values: impl Iterator<Item = (f64, Witness)>) -> (f64, Witness) {
    let mut best = (0.0, Witness::Leg(u32::MAX));
    for (v, at) in values {
        if v > best.0 {
            best = (v, at);
        }
    }
    best
}

/// The reference simulator's LCF order: every coflow of the input not placed yet, in input
/// order, is placed before the first placed coflow whose remaining bytes exceed its own (which
/// are its total when first seen), after those with as many; `s.place` then holds each input
/// coflow's place.
fn place_lcf(placed: &mut Vec<CoflowId>, input: &Input<'_>, s: &mut Scratch) {
    s.by_id.clear();
    s.by_id.extend(input.coflows.iter().enumerate().map(|(k, c)| (c.id, k)));
    s.by_id.sort_unstable();
    let find = |by_id: &[(CoflowId, usize)], id: CoflowId| {
        by_id.binary_search_by(|&(x, _)| x.cmp(&id)).ok().map(|i| by_id[i].1)
    };
    // A coflow that left without the policy being told is no longer in the way.
    placed.retain(|&id| find(&s.by_id, id).is_some());
    let n = input.coflows.len();
    s.place.clear();
    s.place.resize(n, u32::MAX);
    for (i, &id) in placed.iter().enumerate() {
        if let Some(k) = find(&s.by_id, id) {
            s.place[k] = i as u32;
        }
    }
    if placed.len() < n {
        s.marks.resize(input.fabric.capacities().len(), false);
        let mut remaining: Vec<f64> = Vec::with_capacity(n);
        for &id in placed.iter() {
            let k = find(&s.by_id, id).expect("kept above");
            remaining.push(total_remaining(input, &input.coflows[k], &mut s.marks));
        }
        for (k, c) in input.coflows.iter().enumerate() {
            if s.place[k] != u32::MAX {
                continue;
            }
            let total = total_remaining(input, c, &mut s.marks);
            let at = remaining.iter().position(|&r| total < r).unwrap_or(remaining.len());
            remaining.insert(at, total);
            placed.insert(at, c.id);
        }
        for (i, &id) in placed.iter().enumerate() {
            s.place[find(&s.by_id, id).expect("placed from the input")] = i as u32;
        }
    }
}

/// A coflow's remaining bytes: its loads on its senders' resources. `marks` is clear, and is
/// left so.
fn total_remaining(input: &Input<'_>, c: &CoflowState, marks: &mut [bool]) -> f64 {
    let senders = input.senders_of(c);
    for sd in senders {
        marks[sd.resource as usize] = true;
    }
    let total = input.remaining_loads(c).filter(|&(r, _)| marks[r as usize]).map(|(_, b)| b).sum();
    for sd in senders {
        marks[sd.resource as usize] = false;
    }
    total
}

/// MADD for `input.coflows[k]`, whose remaining `loads` these are, blocked only by a full
/// resource where one of its unfinished legs (`live` lists them) still has bytes. `marks` is
/// clear, and is left so.
///
/// A coflow whose unfinished legs all have at most [`NO_BYTES`] left has no loaded resource: the
/// reference has removed such flows, but the driver retires a leg only at its finish event. It
/// gets [`madd`] on those residues, which finishes them together at once unless one of its
/// resources is full. Without a rate only backfill would serve them, one leg per port and
/// decision, and under `timing` no later decision comes for the rest.
fn madd_where_loaded(
    input: &Input<'_>,
    k: usize,
    live: &mut LiveLegs,
    loads: &[(ResourceId, f64)],
    marks: &mut Vec<bool>,
    left: &mut [f64],
    cap: &[f64],
) -> f64 {
    let c = &input.coflows[k];
    marks.resize(cap.len(), false);
    let mut loaded = false;
    let mut mark = |l: usize| {
        let leg = &input.legs[l];
        if leg.is_active() && leg.remaining(c) > NO_BYTES {
            loaded = true;
            for &r in leg.route.hops() {
                marks[r as usize] = true;
            }
        }
    };
    match live.get(input, k) {
        Some(list) => list.legs(c).for_each(&mut mark),
        None => c.legs.clone().for_each(&mut mark),
    }
    let sigma = if loaded { madd_on_loaded(loads, marks, left, cap) } else { madd(loads, left, cap) };
    for &(r, _) in loads {
        marks[r as usize] = false;
    }
    sigma
}

/// A coflow's order key under the reference simulator's rules, computed on its whole bytes, and
/// its initial Γ, in seconds (its pseudo-deadline is arrival plus Γ times a multiplier).
fn static_key(
    order: Order,
    input: &Input<'_>,
    c: &CoflowState,
    loads: &[(ResourceId, f64)],
    cap: &[f64],
) -> (f64, f64) {
    let gamma = bottleneck(loads, cap);
    let legs = input.legs_of(c);
    let key = match order {
        Order::Sebf => gamma,
        Order::Scf => legs.iter().map(|l| l.longest).fold(0.0, f64::max),
        Order::Ncf => {
            let receivers: BTreeSet<_> = legs.iter().map(|l| l.receiver).collect();
            input.senders_of(c).len().min(receivers.len()) as f64
        }
        Order::Tcf => input.senders_of(c).iter().map(|sd| sender_load(loads, sd.resource)).sum(),
        Order::Fifo | Order::FifoStrict => 0.0,
    };
    (key, gamma)
}

/// A coflow's remaining bytes through one of its resources.
fn sender_load(loads: &[(ResourceId, f64)], r: ResourceId) -> f64 {
    loads.iter().find(|&&(x, _)| x == r).map_or(0.0, |&(_, b)| b)
}
