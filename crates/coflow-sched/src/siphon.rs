//! `siphon-mc`: Siphon's Monte Carlo inter-coflow ordering (§3.1).
//!
//! Link bandwidth is a random variable, so a coflow's remaining time is one too, and ordering by
//! expected time (`mrtf`) cannot tell a flow that is likely short from one that is as long on
//! average but rarely short. At a search, for each candidate order, every round draws a bandwidth
//! for every (coflow, resource) node from the resource's distribution, plays the order out
//! (each resource serves the coflows one after the other, a coflow ends when its last resource
//! has served it) and costs it the sum of the completion times; the candidate with the lowest
//! cost wins the round. After all rounds the candidate that won most often is enforced.
//!
//! - **Bounded depth**: a candidate fixes the first `depth` positions only, from the `breadth`
//!   coflows first by MRTF on median bandwidth; the rest follow by MRTF on median bandwidth.
//! - **Early termination**: rounds run in batches; after each, a candidate that can no longer
//!   catch the leader's wins, or whose win share is below the leader's by more than a Hoeffding
//!   margin at `confidence`, is dropped, and the search stops when one is left.
//! - **Reuse**: a search runs when a coflow arrives, or when one of the first `depth` coflows of
//!   the order finishes (that changes every branch). When a coflow further down finishes, it drops
//!   a node every branch shares and the winning prefix stands; on a capacity change or a single
//!   finished flow the order stands too: the search already accounts for fluctuating bandwidth.
//!   (Searching only on arrivals was tried: on the Facebook trace it lost 3% to `mrtf`, as the
//!   order went stale while backfill shrank later coflows.)
//! - **Determinism and parallelism**: each round's draws come from a generator seeded with
//!   `(seed, search, round)` alone, rounds of a batch run in parallel with rayon and their winners
//!   are counted in round order, so the result is the same for any number of threads.

use coflow_core::{CoflowId, Nanos};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;

use crate::fabric::ResourceId;
use crate::mrtf::{FLOW_FINISH_GAP, Intra, Scratch, allocate, remaining_time, sort_by_key};
use crate::scheduler::Scheduler;
use crate::state::{Allocation, Input, ServiceModel};
use crate::wan::Bandwidth;

/// Parameters of [`SiphonMc`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SiphonConfig {
    /// Most rounds of simulation per search (default 256).
    pub rounds: u32,
    /// Rounds between two pruning steps, run in parallel (default 32).
    pub batch: u32,
    /// `d`: positions of the order searched (default 2); the rest follows MRTF on medians.
    pub depth: usize,
    /// How many coflows, first by MRTF on medians, may take the searched positions (default 12).
    pub breadth: usize,
    /// Confidence of the early-termination test (default 0.95).
    pub confidence: f64,
    /// Seeds the bandwidth draws.
    pub seed: u64,
    /// How bandwidth is shared inside a coflow.
    pub intra: Intra,
    /// How long one bandwidth draw holds on a link (its coherence time), if known: a node
    /// expected to last `k` such intervals draws its bandwidth as the mean of `k` draws (at most
    /// 16). `None` (default): one draw per node, as the paper.
    pub coherence: Option<Nanos>,
    /// How the enforced candidate is chosen.
    pub select: Select,
}

/// How `siphon-mc` picks the order it enforces from its rounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Select {
    /// The candidate that was best in most rounds (the paper's counter).
    Wins,
    /// The candidate of least total completion time averaged over the rounds (every round run,
    /// no early termination).
    MeanCost,
}

/// The most draws averaged for one node's bandwidth (see [`SiphonConfig::coherence`]).
pub(crate) const MAX_DRAWS_PER_NODE: u32 = 16;

impl Default for SiphonConfig {
    fn default() -> Self {
        SiphonConfig {
            rounds: 256,
            batch: 32,
            depth: 2,
            breadth: 12,
            confidence: 0.95,
            seed: 0,
            intra: Intra::Madd,
            coherence: None,
            select: Select::Wins,
        }
    }
}

/// Monte Carlo ordering over sampled link bandwidth.
#[derive(Debug)]
pub struct SiphonMc {
    cfg: SiphonConfig,
    /// The order in force, by id.
    order: Vec<CoflowId>,
    /// Whether a coflow arrived or finished since the last search.
    stale: bool,
    searches: u64,
    rounds_run: u64,
    /// Searches whose winner is not MRTF on median bandwidth (the first candidate).
    moved: u64,
    index: Vec<usize>,
    key: Vec<f64>,
    scratch: Scratch,
}

impl SiphonMc {
    /// A Monte Carlo scheduler with these parameters.
    pub fn new(cfg: SiphonConfig) -> SiphonMc {
        assert!(cfg.rounds > 0 && cfg.batch > 0 && cfg.depth > 0 && cfg.breadth > 0, "empty search: {cfg:?}");
        assert!(cfg.confidence > 0.0 && cfg.confidence < 1.0, "confidence must be in (0, 1)");
        SiphonMc {
            cfg,
            order: Vec::new(),
            stale: true,
            searches: 0,
            rounds_run: 0,
            moved: 0,
            index: Vec::new(),
            key: Vec::new(),
            scratch: Scratch::default(),
        }
    }

    /// The order in force after the last decision, first served first.
    pub fn order(&self) -> &[CoflowId] {
        &self.order
    }

    /// Searches run so far, and rounds simulated in them.
    pub fn searches(&self) -> (u64, u64) {
        (self.searches, self.rounds_run)
    }

    /// Searches whose winner was not the order of MRTF on median bandwidth, which is the first
    /// candidate and the order every other candidate's tail follows: how often the Monte Carlo
    /// search changed anything.
    pub fn moved(&self) -> u64 {
        self.moved
    }

    /// Runs a search over `input`'s coflows; returns the winning order as indices into them.
    pub fn search(&mut self, input: &Input<'_>) -> Vec<usize> {
        let winner = self.search_orders(input);
        if winner.moved {
            self.moved += 1;
        }
        winner.order
    }

    /// The search itself; the winner, and whether it is not the first candidate.
    fn search_orders(&mut self, input: &Input<'_>) -> Winner {
        let fabric = input.fabric;
        // The tail order, and the candidates' pool: MRTF on median bandwidth.
        self.key.clear();
        self.key.extend(input.coflows.iter().map(|c| remaining_time(input, c, |r| fabric.median_capacity(r))));
        let mut median_order = Vec::new();
        sort_by_key(input, &self.key, &mut median_order);
        let n = median_order.len();
        if n <= 1 {
            return Winner { order: median_order, moved: false };
        }
        self.searches += 1;
        let pool = &median_order[..self.cfg.breadth.min(n)];
        let depth = self.cfg.depth.min(pool.len());
        let mut prefixes: Vec<Vec<usize>> = vec![Vec::new()];
        for _ in 0..depth {
            let mut longer = Vec::with_capacity(prefixes.len() * pool.len());
            for p in &prefixes {
                for &k in pool.iter().filter(|k| !p.contains(k)) {
                    longer.push(p.iter().copied().chain([k]).collect());
                }
            }
            prefixes = longer;
        }
        // Each candidate's full order, as positions into `nodes`.
        let orders: Vec<Vec<usize>> = prefixes
            .iter()
            .map(|p| p.iter().copied().chain(median_order.iter().copied().filter(|k| !p.contains(k))).collect())
            .collect();
        debug_assert_eq!(orders[0], median_order, "the first candidate is MRTF on medians");
        let nodes: Vec<Vec<(ResourceId, f64)>> =
            input.coflows.iter().map(|c| input.remaining_loads(c).collect()).collect();
        let dist: Vec<Bandwidth> = (0..fabric.resources()).map(|r| fabric.distribution(r as ResourceId)).collect();
        // Draws per node: one, or as many coherence intervals as it is expected to last.
        let draws: Vec<Vec<u32>> = nodes
            .iter()
            .map(|loads| {
                loads
                    .iter()
                    .map(|&(r, b)| match self.cfg.coherence {
                        Some(t) if t.0 > 0 => {
                            let expected = b / dist[r as usize].mean() / t.as_secs_f64();
                            (expected.ceil() as u32).clamp(1, MAX_DRAWS_PER_NODE)
                        }
                        _ => 1,
                    })
                    .collect()
            })
            .collect();
        let problem =
            Problem { nodes: &nodes, draws: &draws, dist: &dist, orders: &orders, resources: fabric.resources() };

        if self.cfg.select == Select::MeanCost {
            let stream = mix(self.cfg.seed ^ mix(self.searches));
            let costs: Vec<Vec<f64>> =
                (0..self.cfg.rounds).into_par_iter().map(|round| problem.costs(stream, round)).collect();
            let mut total = vec![0.0; orders.len()];
            for c in &costs {
                for (t, x) in total.iter_mut().zip(c) {
                    *t += x;
                }
            }
            self.rounds_run += self.cfg.rounds as u64;
            let best = (0..total.len()).fold(0, |b, i| if total[i] < total[b] { i } else { b });
            return Winner { moved: best != 0, order: orders[best].clone() };
        }
        let mut alive: Vec<bool> = vec![true; orders.len()];
        let mut wins = vec![0u32; orders.len()];
        let mut done = 0u32;
        let delta = 1.0 - self.cfg.confidence;
        let stream = mix(self.cfg.seed ^ mix(self.searches));
        while done < self.cfg.rounds && alive.iter().filter(|&&a| a).count() > 1 {
            let end = (done + self.cfg.batch).min(self.cfg.rounds);
            let winners: Vec<usize> =
                (done..end).into_par_iter().map(|round| problem.round(stream, round, &alive)).collect();
            for w in winners {
                wins[w] += 1;
            }
            done = end;
            // Early termination: drop candidates that cannot win, or clearly lose.
            let leader = (0..wins.len()).filter(|&i| alive[i]).max_by_key(|&i| (wins[i], std::cmp::Reverse(i)));
            let leader = leader.expect("one alive");
            let left = self.cfg.rounds - done;
            let margin = 2.0 * ((1.0 / delta).ln() / (2.0 * done as f64)).sqrt() * done as f64;
            for i in 0..wins.len() {
                if i != leader && alive[i] {
                    let behind = (wins[leader] - wins[i]) as f64;
                    if wins[i] + left < wins[leader] || behind > margin {
                        alive[i] = false;
                    }
                }
            }
        }
        self.rounds_run += done as u64;
        let best = (0..wins.len()).filter(|&i| alive[i]).max_by_key(|&i| (wins[i], std::cmp::Reverse(i)));
        let best = best.expect("one alive");
        Winner { moved: best != 0, order: orders[best].clone() }
    }
}

impl Default for SiphonMc {
    fn default() -> Self {
        SiphonMc::new(SiphonConfig::default())
    }
}

/// A search's outcome.
struct Winner {
    /// The order enforced, as indices into the input's coflows.
    order: Vec<usize>,
    /// Whether it is not the first candidate (MRTF on median bandwidth).
    moved: bool,
}

/// One search's data, shared read-only by the rounds.
struct Problem<'a> {
    /// Per coflow: its remaining bytes per resource.
    nodes: &'a [Vec<(ResourceId, f64)>],
    /// Per node: how many draws its bandwidth averages.
    draws: &'a [Vec<u32>],
    dist: &'a [Bandwidth],
    orders: &'a [Vec<usize>],
    resources: usize,
}

impl Problem<'_> {
    /// Draws every node's duration and returns every candidate's total completion time.
    fn costs(&self, stream: u64, round: u32) -> Vec<f64> {
        let durations = self.durations(stream, round);
        let mut busy = vec![0.0; self.resources];
        self.orders.iter().map(|order| self.order_cost(order, &durations, &mut busy, f64::INFINITY)).collect()
    }

    /// The total completion time of `order` when every link serves its coflows one after another
    /// with the given node durations; stops adding once it reaches `cutoff` (the best so far),
    /// returning a value at least `cutoff` then. `busy` is scratch, one entry per resource.
    fn order_cost(&self, order: &[usize], durations: &[Vec<f64>], busy: &mut [f64], cutoff: f64) -> f64 {
        busy.iter_mut().for_each(|b| *b = 0.0);
        let mut cost = 0.0;
        for &k in order {
            let mut end: f64 = 0.0;
            for (&(r, _), &d) in self.nodes[k].iter().zip(&durations[k]) {
                busy[r as usize] += d;
                end = end.max(busy[r as usize]);
            }
            cost += end;
            if cost >= cutoff {
                break;
            }
        }
        cost
    }

    /// Every node's duration in one round.
    fn durations(&self, stream: u64, round: u32) -> Vec<Vec<f64>> {
        let mut rng = ChaCha8Rng::seed_from_u64(stream);
        rng.set_stream(round as u64);
        self.nodes
            .iter()
            .zip(self.draws)
            .map(|(loads, draws)| {
                loads
                    .iter()
                    .zip(draws)
                    .map(|(&(r, b), &n)| {
                        let d = &self.dist[r as usize];
                        let bw = (0..n).map(|_| d.sample(&mut rng)).sum::<f64>() / n as f64;
                        b / bw
                    })
                    .collect()
            })
            .collect()
    }

    /// Draws every node's duration and returns the alive candidate of least total completion
    /// time (the first of equals).
    fn round(&self, stream: u64, round: u32, alive: &[bool]) -> usize {
        let durations = self.durations(stream, round);
        let mut busy = vec![0.0; self.resources];
        let mut best = (f64::INFINITY, usize::MAX);
        for (i, order) in self.orders.iter().enumerate() {
            if !alive[i] {
                continue;
            }
            let cost = self.order_cost(order, &durations, &mut busy, best.0);
            if cost < best.0 {
                best = (cost, i);
            }
        }
        best.1
    }
}

/// SplitMix64's finaliser: spreads a counter over 64 bits.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Scheduler for SiphonMc {
    fn name(&self) -> &'static str {
        match self.cfg.intra {
            Intra::Madd => "siphon-mc",
            Intra::Lfgf => "siphon-mc+lfgf",
        }
    }

    fn model(&self) -> ServiceModel {
        ServiceModel::Proportional
    }

    fn flow_finish_gap(&self) -> Option<Nanos> {
        Some(FLOW_FINISH_GAP)
    }

    fn handle_arrival(&mut self, _now: Nanos, _coflow: CoflowId) {
        self.stale = true;
    }

    fn handle_finished(&mut self, _now: Nanos, coflow: CoflowId) {
        // A coflow of the searched prefix changes every branch; one of the tail only drops a
        // node that every branch shares, so the winning prefix stands.
        let searched = self.order.iter().take(self.cfg.depth).any(|&id| id == coflow);
        self.stale |= searched;
    }

    fn poll_allocation(&mut self, input: &Input<'_>, out: &mut Allocation) -> Option<Nanos> {
        if !self.stale {
            // Reuse: the last order, without the coflows that finished.
            self.index.clear();
            for id in &self.order {
                if let Some(k) = input.coflows.iter().position(|c| c.id == *id) {
                    self.index.push(k);
                }
            }
            // Every active coflow was ordered when it arrived, unless the driver never said.
            self.stale = self.index.len() != input.coflows.len();
        }
        if self.stale {
            self.index = self.search(input);
            self.stale = false;
        }
        self.order.clear();
        self.order.extend(self.index.iter().map(|&k| input.coflows[k].id));
        allocate(input, &self.index, self.cfg.intra, &mut self.scratch, out);
        None
    }
}
