//! `philae`: Philae's sampling scheduler for coflows whose sizes are unknown (Jajoo et al., USENIX
//! ATC 2019, and its authors' public simulator).
//!
//! A coflow with few flows (*thin*: at most [`PhilaeConfig::thin_limit`]) is served whole at
//! once. A wide coflow first sends a few *pilot* flows, each between a sender and a receiver that
//! carry the fewest pilots of other coflows, while its other flows wait; when its pilots have
//! finished, the mean size of their flows is its estimated flow size, fixed for its life. It then
//! joins one of `N` main queues by its *impact*, with exponentially spaced limits: by default its
//! learned size, width times estimated flow size (the paper's Shortest Coflow First on learned
//! sizes); [`Impact::ContentionTimesSize`], the simulator's other choice, multiplies the estimated
//! flow size by its contention (how many coflows of its queue share a port with it) and places it
//! again at every decision as contention changes. Every decision serves, in strict priority, the
//! thin coflows by least contention, the pilots of probing coflows by arrival, then the main
//! queues first come first served inside each, each flow at as much as its ports have left. The
//! queues share time: each round gives the first non-empty queue 256 slots of 8 ms in front and
//! queue `q` below it `⌊256 / 10^(q − first)⌋`; a round is drawn anew when a queue ahead of its
//! first gains a coflow.
//!
//! A live coflow gains its flows as its gets come in: while some of the flows it declared are
//! still to come, a wide coflow is served as a thin one, and chooses its pilots among all its
//! flows once they are in (or [`PhilaeConfig::gather`] after it arrived, whichever comes first),
//! as a coflow that arrives whole does at once; the flows it finished meanwhile count as pilots.
//!
//! It reads a [`BlindInput`]: routes, counts of flows, and the sizes of flows once they have
//! finished (a pilot's size is learned when it completes), never a size of an unfinished flow.

use std::collections::{BTreeMap, VecDeque};

use coflow_core::{CoflowId, MIB, Nanos};

use crate::blind::{BlindAllocation, BlindCoflow, BlindInput, BlindLeg, BlindScheduler};
use crate::contention::Contention;
use crate::fabric::{ResourceId, Route};
use crate::shape::{Pool, Shapes, fill_bits, serve, serve_leg};

/// How many pilot flows a wide coflow sends.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Pilots {
    /// This many, at most the coflow's width.
    Constant(u32),
    /// This fraction of its senders times its receivers, rounded down.
    Fraction(f64),
    /// As many as the fewer of its senders and its receivers.
    MinSendersReceivers,
}

/// How a coflow that has finished probing is placed among the main queues.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Impact {
    /// Its learned size: width times its estimated flow size (the authors' `initialSizeImpact`),
    /// Shortest Coflow First on the sizes learned from the pilots.
    Size,
    /// Contention in its queue times its estimated flow size (the authors' `simpleJobWiseImpact`),
    /// which ranks a coflow of many small flows with one of few flows of that size.
    ContentionTimesSize,
}

/// Parameters of [`Philae`]; the defaults are the constants of the authors' simulator where it has
/// one; the impact, which it reads from a configuration file it does not publish, is the learned
/// size, the paper's Shortest Coflow First (see the book's page on policies).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PhilaeConfig {
    /// A coflow of at most this many flows is thin: all of its flows are pilots.
    pub thin_limit: u32,
    /// How many pilots a wide coflow sends.
    pub pilots: Pilots,
    /// How a coflow is placed once its pilots finished.
    pub impact: Impact,
    /// `N`, the number of main queues.
    pub queues: usize,
    /// The impact below which a coflow is in the first main queue.
    pub first_limit: f64,
    /// The factor between consecutive queue limits.
    pub factor: f64,
    /// Time slots per round for the first non-empty queue.
    pub slots: u32,
    /// The factor between the slots of consecutive queues.
    pub split: f64,
    /// One time slot.
    pub slot: Nanos,
    /// After flows finish, decide again at most once per this interval.
    pub flow_finish_gap: Option<Nanos>,
    /// How long after its arrival a wide coflow waits for the flows it declared before choosing
    /// its pilots among those it has (it is served as a thin one meanwhile). Its gets come in
    /// within milliseconds of each other when its tasks start together; the bound keeps a coflow
    /// that declared more flows than it asks for from being served as thin for longer.
    pub gather: Nanos,
}

impl Default for PhilaeConfig {
    fn default() -> Self {
        PhilaeConfig {
            thin_limit: 7,
            pilots: Pilots::Constant(5),
            impact: Impact::Size,
            queues: 10,
            first_limit: MIB as f64,
            factor: 10.0,
            slots: 256,
            split: 10.0,
            slot: Nanos::from_millis(8),
            flow_finish_gap: Some(Nanos::from_millis(8)),
            gather: Nanos::from_millis(50),
        }
    }
}

impl PhilaeConfig {
    /// The main queue of a coflow of this impact.
    pub fn queue(&self, impact: f64) -> usize {
        let mut q = 0;
        let mut limit = self.first_limit;
        while q + 1 < self.queues && impact >= limit {
            q += 1;
            limit *= self.factor;
        }
        q
    }

    /// The number of pilots of a wide coflow with `senders` and `receivers` distinct ports and
    /// `width` flows, before it is capped by the flows it can probe.
    pub fn pilot_count(&self, width: u32, senders: usize, receivers: usize) -> usize {
        let k = match self.pilots {
            Pilots::Constant(c) => c.min(width) as usize,
            Pilots::Fraction(f) => (f * (senders * receivers) as f64).floor() as usize,
            Pilots::MinSendersReceivers => senders.min(receivers),
        };
        k.max(1)
    }
}

/// Where a coflow is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    /// All its flows are pilots.
    Thin,
    /// Its pilots are sending; the rest of it waits.
    Probing,
    /// In main queue `q`.
    Main(usize),
}

impl Class {
    /// The group contention is counted in.
    fn group(self) -> usize {
        match self {
            Class::Thin => 0,
            Class::Probing => 1,
            Class::Main(q) => 2 + q,
        }
    }
}

/// What Philae keeps of a coflow for its life.
#[derive(Clone, Debug)]
struct State {
    class: Class,
    /// Its place in first-come first-served order in its class or queue.
    entered: u64,
    /// Its pilots, as routes (each the flows of the coflow between one sender and one receiver).
    pilots: Vec<Route>,
    /// The pilots' flows that finished, as (bytes per flow, flows).
    learned: Vec<(f64, u32)>,
    /// Its estimated flow size, once its pilots have finished.
    estimate: Option<f64>,
    /// How many times it moved between main queues.
    moves: u32,
    /// Its key in the contention count.
    key: u32,
}

/// Philae.
#[derive(Debug, Default)]
pub struct Philae {
    cfg: PhilaeConfig,
    states: BTreeMap<CoflowId, State>,
    shapes: Shapes,
    next_entry: u64,
    /// The round of time slots: each main queue's run and when it ends, in order.
    round: VecDeque<(usize, Nanos)>,
    /// The first queue of the round.
    round_first: usize,
    /// Scratch.
    open: Vec<u64>,
    left: Vec<f64>,
    room: Vec<u64>,
    contention: Contention,
}

impl Philae {
    /// Philae with these parameters.
    pub fn new(cfg: PhilaeConfig) -> Philae {
        assert!(cfg.queues >= 1 && cfg.first_limit > 0.0 && cfg.factor > 1.0, "invalid Philae parameters");
        assert!(cfg.slots >= 1 && cfg.split >= 1.0 && cfg.slot > Nanos::ZERO, "invalid Philae time slots");
        Philae { cfg, ..Philae::default() }
    }

    /// The estimated flow size of a coflow, once its pilots have finished (for tests and
    /// diagnostics).
    pub fn estimate(&self, coflow: CoflowId) -> Option<f64> {
        self.states.get(&coflow).and_then(|s| s.estimate)
    }

    /// The main queue a coflow is in, if it is in one.
    pub fn main_queue(&self, coflow: CoflowId) -> Option<usize> {
        match self.states.get(&coflow)?.class {
            Class::Main(q) => Some(q),
            _ => None,
        }
    }

    /// A coflow's pilots, as routes, in the order they were chosen.
    pub fn pilots(&self, coflow: CoflowId) -> &[Route] {
        self.states.get(&coflow).map_or(&[], |s| &s.pilots)
    }

    /// How many times a coflow moved between main queues.
    pub fn moves(&self, coflow: CoflowId) -> u32 {
        self.states.get(&coflow).map_or(0, |s| s.moves)
    }
}

impl BlindScheduler for Philae {
    fn name(&self) -> &'static str {
        "philae"
    }

    fn report_interval(&self) -> Nanos {
        // It never reads the bytes sent: only finished flows and their sizes.
        Nanos::MAX
    }

    fn flow_finish_gap(&self) -> Option<Nanos> {
        self.cfg.flow_finish_gap
    }

    fn handle_finished(&mut self, _now: Nanos, coflow: CoflowId) {
        self.states.remove(&coflow);
        self.shapes.remove(coflow);
        self.contention.remove(coflow);
    }

    fn poll_allocation(&mut self, input: &BlindInput<'_>, out: &mut BlindAllocation) -> Option<Nanos> {
        let cap = input.fabric.capacities();
        let resources = cap.len();
        self.contention.follow(&mut self.shapes, &mut self.states, input, |_| {});

        // What the pilots that finished delivered.
        for f in input.flows_finished {
            if let Some(s) = self.states.get_mut(&f.coflow)
                && (s.class == Class::Thin || s.class == Class::Probing && s.pilots.contains(&f.route))
            {
                s.learned.push((f.bytes_per_flow, f.flows));
            }
        }

        // Coflows seen for the first time, in arrival order: thin, or wide with pilots chosen on
        // the ports with the fewest pilots of other coflows. A thin coflow that has grown wide (a
        // live coflow gains flows as they are asked for) chooses its pilots then; the flows it
        // finished while thin were pilots.
        let mut pilots_at: Option<Vec<u32>> = None;
        let gather = self.cfg.gather;
        let gathering = |c: &BlindCoflow| c.pending > 0 && input.now < c.arrival.saturating_add(gather);
        for c in input.coflows {
            if let Some(s) = self.states.get(&c.id) {
                if s.class == Class::Thin && c.width > self.cfg.thin_limit && !gathering(c) {
                    let at = pilots_at.get_or_insert_with(|| self.pilot_load(input, resources));
                    let pilots = self.choose_pilots(c, input.legs, at);
                    let s = self.states.get_mut(&c.id).expect("just read");
                    s.class = Class::Probing;
                    s.pilots = pilots;
                    self.contention.set_group(c.id, s.class.group());
                }
                if input.everything && !self.contention.contains(c.id) {
                    let s = self.states.get_mut(&c.id).expect("just read");
                    s.key = self.contention.add(c.id, s.class.group(), &self.shapes[&c.id].resources, resources);
                }
                continue;
            }
            let entered = self.next_entry;
            self.next_entry += 1;
            let (class, pilots) = if c.width <= self.cfg.thin_limit || gathering(c) {
                (Class::Thin, Vec::new())
            } else {
                let at = pilots_at.get_or_insert_with(|| self.pilot_load(input, resources));
                (Class::Probing, self.choose_pilots(c, input.legs, at))
            };
            let key = self.contention.add(c.id, class.group(), &self.shapes[&c.id].resources, resources);
            let s = State { class, entered, pilots, learned: Vec::new(), estimate: None, moves: 0, key };
            self.states.insert(c.id, s);
        }

        // Probing ends when every pilot finished: the estimate is the mean size of the pilots'
        // flows, and the coflow joins the main queue of its impact, counted with the contention
        // it had among the probing coflows (before any of them moved).
        let mut done: Vec<(usize, u32)> = Vec::new();
        for (i, c) in input.coflows.iter().enumerate() {
            let s = &self.states[&c.id];
            if s.class != Class::Probing {
                continue;
            }
            let probing =
                s.pilots.iter().any(|&r| input.legs[c.legs_on(input.legs, r)].iter().any(|l| l.active_flows > 0));
            if !probing {
                done.push((i, self.contention.of_key(s.key)));
            }
        }
        for &(i, before) in &done {
            let c = &input.coflows[i];
            let s = self.states.get_mut(&c.id).expect("every coflow has a state");
            let mut learned = s.learned.clone();
            learned.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            let flows: u32 = learned.iter().map(|x| x.1).sum();
            let bytes: f64 = learned.iter().map(|x| x.0 * f64::from(x.1)).sum();
            let estimate = if flows > 0 { bytes / f64::from(flows) } else { 0.0 };
            s.estimate = Some(estimate);
            let impact = impact(&self.cfg, c, before, estimate);
            s.class = Class::Main(self.cfg.queue(impact));
            s.entered = self.next_entry;
            self.next_entry += 1;
        }
        for &(i, _) in &done {
            let id = input.coflows[i].id;
            self.contention.set_group(id, self.states[&id].class.group());
        }

        // Every main-queue coflow is placed again by its impact in its queue now; those that
        // move go last in their new queue, in the order of their old places.
        let mut moving: Vec<(usize, u64, usize, usize)> = Vec::new();
        for (i, c) in input.coflows.iter().enumerate() {
            let s = &self.states[&c.id];
            if let (Class::Main(q), Some(estimate)) = (s.class, s.estimate) {
                let to = self.cfg.queue(impact(&self.cfg, c, self.contention.of_key(s.key), estimate));
                if to != q {
                    moving.push((q, s.entered, i, to));
                }
            }
        }
        moving.sort_unstable();
        for &(_, _, i, to) in &moving {
            let s = self.states.get_mut(&input.coflows[i].id).expect("a state");
            s.class = Class::Main(to);
            s.entered = self.next_entry;
            s.moves += 1;
            self.next_entry += 1;
        }
        for &(_, _, i, to) in &moving {
            self.contention.set_group(input.coflows[i].id, Class::Main(to).group());
        }
        // The round of time slots.
        let mut nonempty = vec![false; self.cfg.queues];
        for c in input.coflows {
            if let Class::Main(q) = self.states[&c.id].class {
                nonempty[q] = true;
            }
        }
        while self.round.front().is_some_and(|&(_, end)| end <= input.now) {
            self.round.pop_front();
        }
        // A queue ahead of the round's first has coflows: the round is drawn anew, so that
        // the first non-empty queue always has the front (the authors' simulator finishes the
        // round's 256 slots first, up to 2 s in which a small coflow waits behind larger ones).
        let first = nonempty.iter().position(|&x| x);
        if first.is_some_and(|f| f < self.round_first) {
            self.round.clear();
        }
        if self.round.is_empty()
            && let Some(first) = first
        {
            let mut end = input.now;
            for (q, _) in nonempty.iter().enumerate().skip(first).filter(|(_, x)| **x) {
                let slots = (f64::from(self.cfg.slots) / self.cfg.split.powi((q - first) as i32)).floor() as u64;
                if slots == 0 {
                    break;
                }
                end = end.saturating_add(Nanos(self.cfg.slot.0.saturating_mul(slots)));
                self.round.push_back((q, end));
            }
            self.round_first = first;
        }
        let working = self.round.front().map(|&(q, _)| q);

        // Rates, in strict priority until no resource some coflow crosses has room.
        self.left.clear();
        self.left.extend_from_slice(cap);
        let mut open = (0..resources).filter(|&r| cap[r] > 0.0 && self.contention.crossed(r as ResourceId)).count();
        fill_bits(&mut self.room, resources, |r| cap[r] > 0.0);
        let mut order: Vec<(usize, u64, u64, usize)> = Vec::with_capacity(input.coflows.len());
        for (i, c) in input.coflows.iter().enumerate() {
            let s = &self.states[&c.id];
            let key = match s.class {
                Class::Thin => (0, u64::from(self.contention.of_key(s.key)), s.entered),
                Class::Probing => (1, 0, s.entered),
                Class::Main(q) if Some(q) == working => (2, 0, s.entered),
                Class::Main(q) => (3 + q, 0, s.entered),
            };
            order.push((key.0, key.1, key.2, i));
        }
        order.sort_unstable();
        for &(rank, _, _, i) in &order {
            if open == 0 {
                break;
            }
            let c = &input.coflows[i];
            let shape = &self.shapes[&c.id];
            if rank >= 2 && !shape.may_have_room(&self.room) {
                continue;
            }
            let mut pool =
                Pool { cap, avail: &mut self.left, base: 0, mirror: None, open: &mut open, room: Some(&mut self.room) };
            match rank {
                0 => {
                    for l in c.legs.clone() {
                        if !input.legs[l].route.hops().is_empty() {
                            serve_leg(l, input.legs, out, &mut pool);
                        }
                    }
                }
                1 => {
                    for &r in &self.states[&c.id].pilots {
                        for l in c.legs_on(input.legs, r) {
                            serve_leg(l, input.legs, out, &mut pool);
                        }
                    }
                }
                _ => {
                    serve(c, shape, input.legs, out, &mut pool, &mut self.open);
                }
            }
        }
        // A coflow gathering its flows is looked at again when it stops waiting for them.
        let gathered = input
            .coflows
            .iter()
            .filter(|c| c.width > self.cfg.thin_limit && gathering(c))
            .map(|c| c.arrival.saturating_add(gather))
            .min();
        let round_end = self.round.front().map(|&(_, end)| end);
        match (round_end, gathered) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// The impact of coflow `c` with this contention and estimated flow size.
fn impact(cfg: &PhilaeConfig, c: &BlindCoflow, contention: u32, estimate: f64) -> f64 {
    match cfg.impact {
        Impact::ContentionTimesSize => f64::from(contention) * estimate,
        Impact::Size => f64::from(c.width) * estimate,
    }
}

impl Philae {
    /// Active pilot flows on each resource: every active flow of a thin coflow and every active
    /// flow on a probing coflow's pilot routes.
    fn pilot_load(&self, input: &BlindInput<'_>, resources: usize) -> Vec<u32> {
        let mut at = vec![0u32; resources];
        for c in input.coflows {
            let Some(s) = self.states.get(&c.id) else { continue };
            let mut add = |leg: &BlindLeg| {
                for &r in leg.route.hops() {
                    at[r as usize] += leg.active_flows;
                }
            };
            match s.class {
                Class::Thin => input.legs[c.legs.clone()].iter().for_each(&mut add),
                Class::Probing => {
                    for &route in &s.pilots {
                        input.legs[c.legs_on(input.legs, route)].iter().for_each(&mut add);
                    }
                }
                Class::Main(_) => {}
            }
        }
        at
    }

    /// Chooses a wide coflow's pilots one at a time: its senders and its receivers each sorted
    /// by the pilots already on them (ties by resource), the first pair along the anti-diagonals
    /// of that grid with active flows of the coflow not yet a pilot. Adds them to `at`.
    fn choose_pilots(&self, c: &BlindCoflow, legs: &[BlindLeg], at: &mut [u32]) -> Vec<Route> {
        let mut pairs: BTreeMap<(ResourceId, ResourceId), (Route, u32)> = BTreeMap::new();
        for leg in &legs[c.legs.clone()] {
            let hops = leg.route.hops();
            if leg.active_flows == 0 || hops.is_empty() {
                continue;
            }
            let e = pairs.entry((hops[0], hops[hops.len() - 1])).or_insert((leg.route, 0));
            if e.0 == leg.route {
                e.1 += leg.active_flows;
            }
        }
        let mut senders: Vec<ResourceId> = pairs.keys().map(|k| k.0).collect();
        senders.dedup();
        let mut receivers: Vec<ResourceId> = pairs.keys().map(|k| k.1).collect();
        receivers.sort_unstable();
        receivers.dedup();
        let k = self.cfg.pilot_count(c.width, senders.len(), receivers.len()).min(pairs.len());
        let mut chosen: Vec<Route> = Vec::with_capacity(k);
        let mut flows = 0usize;
        while flows < k {
            senders.sort_by_key(|&s| at[s as usize]);
            receivers.sort_by_key(|&r| at[r as usize]);
            let mut found = None;
            'scan: for d in 0..senders.len() + receivers.len() {
                for (s, &sender) in senders.iter().enumerate().take(d + 1) {
                    let r = d - s;
                    if r >= receivers.len() {
                        continue;
                    }
                    if let Some(&(route, n)) = pairs.get(&(sender, receivers[r]))
                        && !chosen.contains(&route)
                    {
                        found = Some((route, n));
                        break 'scan;
                    }
                }
            }
            let Some((route, n)) = found else { break };
            chosen.push(route);
            flows += n as usize;
            for &r in route.hops() {
                at[r as usize] += n;
            }
        }
        chosen
    }
}
