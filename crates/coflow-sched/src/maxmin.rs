//! Weighted max-min fair sharing by progressive filling.
//!
//! Every route carries `weight` flows; all flows rise together until a resource fills, the
//! flows crossing it freeze at that level, and the rest keep rising.
//!
//! A resource's fill level, remaining capacity over unfrozen weight, never falls while others
//! fill: a route frozen at level `l` takes `w·l` of capacity and `w` of weight from a resource
//! whose level is at least `l`. So the queue of resources holds one entry per resource, keyed by
//! its level when queued, which may since have risen; a resource first in line whose level rose
//! past its key goes back in line. Every route's rate is the level of the first of its resources to
//! fill, which is the lowest of its resources' fill levels (levels are kept from falling below
//! the one before, which rounding could otherwise do by an ulp).
//!
//! A call is dominated by two passes over the routes (read the weights, write the rates), the
//! first of which a caller that knows which routes changed spares ([`MaxMin::solve_listed`], in
//! the dense layout). Between them, [`MaxMin`] fills resources in one of two layouts, both kept
//! from call to call since routes change far less often than weights (a route comes with its
//! first flow and goes with its last, while a weight changes whenever one of its flows arrives
//! or finishes):
//!
//! - dense, when every route crosses exactly two resources, a "sender" below some split and a
//!   "receiver" at or above it (the big switch: ingress, then egress), and the sender × receiver
//!   matrix is not too large. Weights sit in a sender ×
//!   receiver matrix and its transpose, and filling a resource is one pass over a row: `O(m²)`
//!   for `m` resources however many routes there are. A fill resumes the last one from its
//!   latest saved step before a resource whose weight changed could have changed a step, to
//!   the bit what a fill from the start gives;
//! - sparse, for anything else: a resource-to-route adjacency (CSR), rebuilt when the routes
//!   change, and `O(h·n)` per call for `n` routes of `h` hops.

use crate::fabric::{ResourceId, Route};
use crate::state::Shares;

/// The solver: the layout of the last call's routes and scratch space reused across calls, so
/// that the hot path does not allocate.
#[derive(Debug, Default)]
pub struct MaxMin {
    /// The routes of the last call, their weights, and the number of resources.
    routes: Vec<Route>,
    weights: Vec<f64>,
    resources: usize,
    layout: Layout,
    /// Dense layout: resources `0..split` send and `split..resources` receive; `wm` is the
    /// sender-major weight matrix and `wt` its transpose; `ends` holds each route's two
    /// resources, and `sum` each resource's total weight, which is summed again only for the
    /// resources in `dirty`.
    split: usize,
    wm: Vec<f64>,
    wt: Vec<f64>,
    ends: Vec<[u32; 2]>,
    /// Dense layout: per sender × receiver, one past the position of the route between them in
    /// the last call (zero if none), to find a listed route's position without a scan.
    at: Vec<u32>,
    sum: Vec<f64>,
    dirty: Vec<bool>,
    dirty_list: Vec<u32>,
    /// Sparse layout: routes crossing each resource, `start[r]..start[r+1]` into `adj`.
    start: Vec<u32>,
    adj: Vec<u32>,
    frozen: Vec<bool>,
    /// What the current call changed: the routes that left their position, the positions that
    /// got a new route, and those whose route kept its position but changed weight.
    gone: Vec<Route>,
    added: Vec<u32>,
    reweighed: Vec<u32>,
    /// Scratch: the positions whose route or weight differ from the last call's.
    differ: Vec<u32>,
    /// Per resource: capacity left, unfrozen weight, and the level at which it filled (infinite
    /// if it did not); `last` is the level of the last resource to fill.
    rem: Vec<f64>,
    weight: Vec<f64>,
    level: Vec<f64>,
    last: f64,
    /// Resources by queued fill level.
    queue: Queue,
    /// Sparse layout: the resource at which each route froze in this call.
    froze: Vec<u32>,
    /// Dense layout, by sender and by receiver (`[0]` sender × receiver, `[1]` its transpose):
    /// which cells hold a route, and which of those routes follow their sender.
    present: [BitRows; 2],
    sender_first: [BitRows; 2],
    /// Answering in shares: whether `follow` holds what the previous call wrote into `follows`
    /// (it answered in shares too), each resource's level in the previous call, and the resource
    /// each route follows.
    follows_kept: bool,
    was_level: Vec<f64>,
    follow: Vec<ResourceId>,
    /// Dense layout, scratch for [`MaxMin::write_changed_follows`]: per resource, which routes
    /// follow the sender, and the resources filled so far.
    first_bits: Vec<u64>,
    filled_bits: Vec<u64>,
    /// Dense layout: the last fill, kept so that the next can resume where it starts to differ
    /// (see [`MaxMin::resume_dense`]): whether it may be resumed, the capacities it filled,
    /// each step's resource and level, and the greatest `(key, resource)` each step took off
    /// the queue.
    resumable: bool,
    filled_capacity: Vec<f64>,
    steps: Vec<(u32, f64)>,
    reach: Vec<(u64, u32)>,
    /// The greatest `(key, resource)` taken off the queue in the current step.
    popped: (u64, u32),
    /// Dense layout: every `every` steps of the last fill, each resource's capacity left,
    /// unfrozen weight and queued key, one block of `resources` after another.
    saved_rem: Vec<f64>,
    saved_weight: Vec<f64>,
    saved_key: Vec<u64>,
    /// Steps between two saved states (zero: [`SAVE_EVERY`]).
    every: usize,
}

/// Steps of a dense fill between two saved states: a save copies three values per resource, and
/// a resumed fill repeats at most this many steps it could have skipped.
const SAVE_EVERY: usize = 32;

/// The most sender × receiver cells the dense layout takes (4,096 machines a side on the big
/// switch: its two weight matrices then hold 256 MiB); past it, the routes are laid out sparsely,
/// in memory that grows with the routes rather than with the square of the machines.
const MAX_DENSE_CELLS: u64 = 1 << 24;

/// A route that froze at no resource.
const NOWHERE: u32 = u32::MAX;

/// A matrix of bits, row by row in 64-bit words.
#[derive(Debug, Default)]
struct BitRows {
    words: usize,
    bits: Vec<u64>,
}

impl BitRows {
    fn new(rows: usize, cols: usize) -> BitRows {
        let words = cols.div_ceil(64);
        BitRows { words, bits: vec![0; rows * words] }
    }

    fn set(&mut self, row: usize, col: usize, on: bool) {
        let (w, b) = (row * self.words + col / 64, col % 64);
        self.bits[w] = (self.bits[w] & !(1 << b)) | ((on as u64) << b);
    }

    fn row(&self, row: usize) -> &[u64] {
        &self.bits[row * self.words..(row + 1) * self.words]
    }
}

/// The resources in line to fill, first the one of least key, and of those the least resource:
/// a winner tree of four children per node over resources, which replaces a resource's key at the
/// cost of the path from its leaf to the root, with no branch on the comparisons (a binary heap's
/// sifting takes one per level, which goes either way). A node holds its winner's key and
/// resource as one number, ordered as the queue orders them, so that a step up the path is the
/// least of four numbers loaded side by side.
#[derive(Debug, Default)]
struct Queue {
    /// A power of four, at least the number of resources: the first leaf.
    leaves: usize,
    /// `node[v]` is the first in line in the subtree of node `v` as an [`entry`] (`1` is the
    /// root, `v`'s children are `4v..4v + 4`, the nodes of a level `4^l..2·4^l`, and the leaves
    /// `leaves..2·leaves`), of key `OUT` once out of line, and for the leaves past the last
    /// resource.
    node: Vec<u128>,
}

/// The key of a resource out of line, above every fill level's.
const OUT: u64 = u64::MAX;

/// A key and its resource as one number, ordered by key, then by resource.
fn entry(key: u64, r: usize) -> u128 {
    (key as u128) << 64 | r as u128
}

impl Queue {
    /// Resets the queue to `m` resources with keys `key(r)`.
    fn reset(&mut self, m: usize, key: impl Fn(usize) -> u64) {
        let mut n = 1;
        while n < m {
            n *= 4;
        }
        self.leaves = n;
        self.node.clear();
        self.node.resize(n, 0);
        self.node.extend((0..n).map(|r| entry(if r < m { key(r) } else { OUT }, r)));
        let mut level = n / 4;
        while level > 0 {
            for v in level..2 * level {
                self.node[v] = self.node[4 * v..4 * v + 4].iter().copied().min().expect("four children");
            }
            level /= 4;
        }
    }

    /// The first in line and its key, if any is in line.
    fn first(&self) -> Option<(usize, u64)> {
        let (r, k) = (self.node[1] as u64 as usize, (self.node[1] >> 64) as u64);
        (k != OUT).then_some((r, k))
    }

    /// The key of resource `r`.
    fn key(&self, r: usize) -> u64 {
        (self.node[self.leaves + r] >> 64) as u64
    }

    /// Gives resource `r` key `k` (`OUT` takes it out of line).
    fn set(&mut self, r: usize, k: u64) {
        // Up the path from `r`'s leaf: each node on it takes the least of its four children, one
        // of which the step below just wrote.
        let node = &mut self.node[..2 * self.leaves];
        let mut v = self.leaves + r;
        node[v] = entry(k, r);
        while v > 1 {
            let g = v & !3;
            let c = &node[g..g + 4];
            let least = c[0].min(c[1]).min(c[2].min(c[3]));
            v = g / 4;
            node[v] = least;
        }
    }
}

/// Which layout the current routes are kept in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Layout {
    /// Nothing built yet.
    #[default]
    None,
    Dense,
    Sparse,
}

/// A fill level as a heap key: the bits of a non-negative float order like the float.
fn key(level: f64) -> u64 {
    // Adding zero turns a negative zero positive.
    (level.max(0.0) + 0.0).to_bits()
}

/// What is left of capacity `rem` once `used` is taken, never below zero.
fn take(rem: f64, used: f64) -> f64 {
    let left = rem - used;
    // Rather than `max`, whose care for NaN keeps it from vectorizing on plain x86-64.
    if left > 0.0 { left } else { 0.0 }
}

/// Freezes the routes of one row at `level`: each takes `w·level` of capacity `rem` and `w` of
/// weight `weight` from the resource across, where `w` is its weight in `row`.
///
/// The loop runs over 300 cells at each of the tens of millions of steps of a large replay, so
/// it runs in the widest vectors the processor has: each lane multiplies, subtracts and compares
/// alone, with no fused multiply-add, so every width gives the same bits.
fn freeze(rem: &mut [f64], weight: &mut [f64], row: &[f64], level: f64) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: `freeze_avx512` needs only AVX-512F, which the processor was just found
            // to have; it is the safe loop of `freeze_with` compiled for it.
            #[allow(unsafe_code)]
            return unsafe { freeze_avx512(rem, weight, row, level) };
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: as above, for AVX2.
            #[allow(unsafe_code)]
            return unsafe { freeze_avx2(rem, weight, row, level) };
        }
    }
    freeze_with(rem, weight, row, level);
}

/// The loop of [`freeze`], inlined into each of its copies for a set of processor features.
#[inline(always)]
fn freeze_with(rem: &mut [f64], weight: &mut [f64], row: &[f64], level: f64) {
    for ((x, y), &w) in rem.iter_mut().zip(weight.iter_mut()).zip(row) {
        *x = take(*x, w * level);
        *y -= w;
    }
}

/// [`freeze_with`] in AVX-512 vectors.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn freeze_avx512(rem: &mut [f64], weight: &mut [f64], row: &[f64], level: f64) {
    freeze_with(rem, weight, row, level);
}

/// [`freeze_with`] in AVX2 vectors.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn freeze_avx2(rem: &mut [f64], weight: &mut [f64], row: &[f64], level: f64) {
    freeze_with(rem, weight, row, level);
}

/// The sum of `xs`, the weights of resources `first..`, with four running sums so that it
/// vectorizes. Resource `r` goes to running sum `r % 4`, so that how far a row is padded with
/// zeros at either end does not change the result by a rounding.
fn sum(xs: &[f64], first: usize) -> f64 {
    let mut acc = [0.0; 4];
    let (head, body) = xs.split_at(((4 - first % 4) % 4).min(xs.len()));
    for (j, &x) in head.iter().enumerate() {
        acc[(first + j) % 4] += x;
    }
    let chunks = body.chunks_exact(4);
    let tail = chunks.remainder();
    for c in chunks {
        for k in 0..4 {
            acc[k] += c[k];
        }
    }
    for (k, &x) in tail.iter().enumerate() {
        acc[k] += x;
    }
    (acc[0] + acc[1]) + (acc[2] + acc[3])
}

impl MaxMin {
    /// Computes the max-min fair per-flow rate of every route and writes it into `rates`.
    ///
    /// `routes[i]` carries `weights[i] > 0` flows; `capacity[r]` is resource `r`'s bytes per
    /// second. Local routes (crossing nothing) get an infinite rate.
    pub fn solve(&mut self, capacity: &[f64], routes: &[Route], weights: &[f64], rates: &mut [f64]) {
        assert_eq!(weights.len(), routes.len(), "one weight per route");
        self.solve_by(capacity, routes.len(), |i| (&routes[i], weights[i]), rates);
    }

    /// Like [`MaxMin::solve`], for `n` routes where `route(i)` gives route `i` and its weight.
    ///
    /// Costs least when the routes are those of the previous call in the same order, or differ
    /// from them in a few positions.
    pub fn solve_by<'a>(
        &mut self,
        capacity: &[f64],
        n: usize,
        route: impl Fn(usize) -> (&'a Route, f64),
        rates: &mut [f64],
    ) {
        self.solve_listed(capacity, n, route, None, rates);
    }

    /// Like [`MaxMin::solve_by`], told which routes may differ from the previous call: with
    /// `Some(listed)`, a position whose route or weight differs from the previous call's is that
    /// of a route in `listed` in the previous call, or past the previous call's last (as with
    /// [`crate::Changes::routes`], which lists every route whose flows or position changed).
    /// The positions are then found without a pass over the routes, when the layout allows it.
    pub fn solve_listed<'a>(
        &mut self,
        capacity: &[f64],
        n: usize,
        route: impl Fn(usize) -> (&'a Route, f64),
        listed: Option<&[Route]>,
        rates: &mut [f64],
    ) {
        assert_eq!(rates.len(), n, "one rate per route");
        self.update(capacity, n, route, listed);
        match self.layout {
            Layout::Dense => {
                self.fill_dense(capacity);
                // A route froze when the first of its ends filled, at the lower level.
                let level = &self.level[..];
                for (rate, &[s, r]) in rates.iter_mut().zip(&self.ends) {
                    let (s, r) = (level[s as usize], level[r as usize]);
                    *rate = if s < r { s } else { r };
                }
            }
            Layout::Sparse => {
                self.fill_sparse(capacity);
                for ((rate, &r), rt) in rates.iter_mut().zip(&self.froze).zip(&self.routes) {
                    if r != NOWHERE {
                        *rate = self.level[r as usize];
                    } else if rt.is_local() {
                        *rate = f64::INFINITY;
                    }
                }
            }
            Layout::None => unreachable!("a layout was built"),
        }
        // The rates were not written as shares.
        self.follows_kept = false;
    }

    /// Like [`MaxMin::solve_listed`], answering in [`Shares`]: each resource's rate is the level
    /// at which it filled, and each route follows the first of its resources to fill (the sender
    /// on equal levels). `follows` is written at every position that holds another route than
    /// in the previous call (every position with `listed` `None`) and for every route whose
    /// resource changed, each position written listed once in `shares.written`; the rest of
    /// `follows` must be as the previous call of this solver left it.
    ///
    /// # Panics
    /// On a local route (one crossing nothing), which follows no resource.
    pub fn solve_shares<'a>(
        &mut self,
        capacity: &[f64],
        n: usize,
        route: impl Fn(usize) -> (&'a Route, f64),
        listed: Option<&[Route]>,
        shares: &mut Shares,
    ) {
        assert_eq!(shares.follows.len(), n, "one entry of `follows` per route");
        let rebuilt = self.update(capacity, n, route, listed);
        shares.on = true;
        shares.written.clear();
        match self.layout {
            Layout::Dense => self.fill_dense(capacity),
            Layout::Sparse => self.fill_sparse(capacity),
            Layout::None => unreachable!("a layout was built"),
        }
        shares.rate.clear();
        shares.rate.extend_from_slice(&self.level);
        let all = listed.is_none() || rebuilt || !self.follows_kept || self.layout == Layout::Sparse;
        self.follow.resize(n, 0);
        if all {
            for i in 0..n {
                match self.layout {
                    Layout::Dense => self.set_follow(i, self.bottleneck(i)),
                    _ => {
                        self.follow[i] = match self.froze[i] {
                            NOWHERE => *self.routes[i]
                                .hops()
                                .first()
                                .expect("a route that crosses nothing follows no resource"),
                            r => r,
                        }
                    }
                }
            }
            shares.follows.copy_from_slice(&self.follow);
            shares.written.extend(0..n as u32);
        } else {
            self.write_changed_follows(shares);
        }
        self.was_level.clear();
        self.was_level.extend_from_slice(&self.level);
        self.follows_kept = true;
    }

    /// The resource route `i` follows in the dense layout: the one of its ends that filled at
    /// the lower level, the sender on equal levels.
    fn bottleneck(&self, i: usize) -> ResourceId {
        let [s, r] = self.ends[i];
        if self.level[s as usize] <= self.level[r as usize] { s } else { r }
    }

    /// Records that route `i` follows `b` (dense layout), in `follow` and in the bits by cell.
    fn set_follow(&mut self, i: usize, b: ResourceId) {
        let [s, r] = self.ends[i];
        let (s, c) = (s as usize, r as usize - self.split);
        self.follow[i] = b;
        self.sender_first[0].set(s, c, b as usize == s);
        self.sender_first[1].set(c, s, b as usize == s);
    }

    /// Writes `follows` for the routes that came or moved in this call and for those at a
    /// resource whose level changed and that now follow the other end (dense layout). A route
    /// follows its sender when the sender's level is at most the receiver's. Levels rise along
    /// the fill's steps, so the resources across whose level is at least a sender's are those
    /// not yet filled at its step and those filled just before it at the same level (and the
    /// resources across whose level is at most a receiver's, those filled before it and those
    /// filled just after it at the same level): the routes of a resource whose level changed
    /// that turn are found a word of 64 cells at a time, from the resources filled before its
    /// step, against the bits of the routes present and of those that followed the sender.
    fn write_changed_follows(&mut self, shares: &mut Shares) {
        for k in 0..self.added.len() {
            let i = self.added[k] as usize;
            let b = self.bottleneck(i);
            self.set_follow(i, b);
            shares.follows[i] = b;
            shares.written.push(i as u32);
        }
        let (split, m) = (self.split, self.resources);
        let cols = m - split;
        let (w0, w1) = (self.present[0].words, self.present[1].words);
        let changed = |level: &[f64], was: &[f64], x: usize| level[x].to_bits() != was[x].to_bits();
        // Per resource whose level changed, bit `j` of its words: whether the route to the
        // `j`-th resource across follows the sender; senders' words first, then receivers'.
        let mut first = std::mem::take(&mut self.first_bits);
        first.resize(split * w0 + cols * w1, 0);
        let words = |x: usize| {
            if x < split {
                x * w0..(x + 1) * w0
            } else {
                split * w0 + (x - split) * w1..split * w0 + (x - split + 1) * w1
            }
        };
        // The receivers and the senders filled so far.
        let mut filled = std::mem::take(&mut self.filled_bits);
        filled.clear();
        filled.resize(w0 + w1, 0);
        let set = |bits: &mut [u64], j: usize| bits[j / 64] |= 1 << (j % 64);
        for (i, &(x, l)) in self.steps.iter().enumerate() {
            let x = x as usize;
            if changed(&self.level, &self.was_level, x) {
                let out = &mut first[words(x)];
                if x < split {
                    for (o, &f) in out.iter_mut().zip(&filled[..w0]) {
                        *o = !f;
                    }
                    for &(y, _) in self.steps[..i].iter().rev().take_while(|&&(_, ly)| ly == l) {
                        if y as usize >= split {
                            set(out, y as usize - split);
                        }
                    }
                } else {
                    out.copy_from_slice(&filled[w0..]);
                    for &(y, _) in self.steps[i + 1..].iter().take_while(|&&(_, ly)| ly == l) {
                        if (y as usize) < split {
                            set(out, y as usize);
                        }
                    }
                }
            }
            if x < split {
                set(&mut filled[w0..], x);
            } else {
                set(&mut filled[..w0], x - split);
            }
        }
        for x in 0..m {
            if !changed(&self.level, &self.was_level, x) {
                continue;
            }
            let sender = x < split;
            let (side, row) = if sender { (0, x) } else { (1, x - split) };
            let was_filled = if sender {
                filled[w0 + x / 64] >> (x % 64) & 1
            } else {
                filled[(x - split) / 64] >> ((x - split) % 64) & 1
            };
            if was_filled == 0 {
                // It did not fill (an infinite level): a sender is followed only by the routes to
                // receivers that did not fill either, and a receiver by every route.
                let out = &mut first[words(x)];
                if sender {
                    for (o, &f) in out.iter_mut().zip(&filled[..w0]) {
                        *o = !f;
                    }
                } else {
                    out.fill(!0);
                }
            }
            for w in 0..self.present[side].words {
                let first = first[words(x)][w];
                let mut turned = (first ^ self.sender_first[side].row(row)[w]) & self.present[side].row(row)[w];
                while turned != 0 {
                    let j = turned.trailing_zeros() as usize;
                    turned &= turned - 1;
                    let (s, r) = if sender { (x, split + w * 64 + j) } else { (w * 64 + j, x) };
                    let i = self.at[s * cols + r - split] as usize - 1;
                    let b = if (first >> j) & 1 == 1 { s } else { r } as ResourceId;
                    self.set_follow(i, b);
                    shares.follows[i] = b;
                    shares.written.push(i as u32);
                }
            }
        }
        self.first_bits = first;
        self.filled_bits = filled;
    }

    /// Brings the layout up to the routes of this call; returns whether it was built afresh.
    fn update<'a>(
        &mut self,
        capacity: &[f64],
        n: usize,
        route: impl Fn(usize) -> (&'a Route, f64),
        listed: Option<&[Route]>,
    ) -> bool {
        let m = capacity.len();
        if m != self.resources {
            self.resources = m;
            self.layout = Layout::None;
        }
        self.gone.clear();
        self.added.clear();
        self.reweighed.clear();
        let old = self.routes.len();
        let common = n.min(old);
        // The positions the last call had: one test per route in the common case, where
        // neither the route nor its weight changed. A dense layout compares the two ends, which
        // it reads anyway, rather than whole routes.
        let mut differ = std::mem::take(&mut self.differ);
        differ.clear();
        let (was, weights) = (&self.routes[..common], &self.weights[..common]);
        if let (Layout::Dense, Some(listed)) = (self.layout, listed) {
            for rt in listed {
                if let [s, r] = *rt.hops()
                    && self.fits_dense(*rt)
                {
                    let p = self.at[self.cell(s, r)] as usize;
                    // Those that do not differ after all are passed over below.
                    if p != 0 && p <= common {
                        differ.push(p as u32 - 1);
                    }
                }
            }
            // In the order a scan would find them.
            differ.sort_unstable();
            differ.dedup();
        } else if self.layout == Layout::Dense {
            for (i, (&[s0, r0], &weight)) in self.ends[..common].iter().zip(weights).enumerate() {
                let (rt, w) = route(i);
                if !matches!(*rt.hops(), [s, r] if s == s0 && r == r0) || w != weight {
                    differ.push(i as u32);
                }
            }
        } else {
            for (i, (was, &weight)) in was.iter().zip(weights).enumerate() {
                let (rt, w) = route(i);
                if rt != was || w != weight {
                    differ.push(i as u32);
                }
            }
        }
        for &i in &differ {
            let i = i as usize;
            let (rt, w) = route(i);
            if *rt == self.routes[i] && w == self.weights[i] {
                continue;
            }
            if *rt != self.routes[i] {
                self.gone.push(self.routes[i]);
                self.added.push(i as u32);
                self.routes[i] = *rt;
            } else {
                self.reweighed.push(i as u32);
            }
            self.weights[i] = w;
        }
        self.differ = differ;
        for i in common..n {
            let (rt, w) = route(i);
            self.added.push(i as u32);
            self.routes.push(*rt);
            self.weights.push(w);
        }
        if n < old {
            self.gone.extend_from_slice(&self.routes[n..]);
            self.routes.truncate(n);
            self.weights.truncate(n);
        }

        let kept = match self.layout {
            Layout::Dense => {
                self.added.iter().all(|&i| self.fits_dense(self.routes[i as usize])) && self.update_dense()
            }
            Layout::Sparse => self.added.is_empty() && self.gone.is_empty(),
            Layout::None => false,
        };
        if !kept {
            self.build();
        }
        !kept
    }

    /// Whether `rt` has a place in the current dense layout.
    fn fits_dense(&self, rt: Route) -> bool {
        matches!(*rt.hops(), [s, r] if (s as usize) < self.split && self.split <= r as usize && (r as usize) < self.resources)
    }

    /// Where the route from sender `s` to receiver `r` sits in the dense matrix `wm` (and `at`).
    fn cell(&self, s: ResourceId, r: ResourceId) -> usize {
        s as usize * (self.resources - self.split) + r as usize - self.split
    }

    /// Lays the current routes out afresh: densely if every route goes from a sender to a
    /// receiver, no two are the same and the matrix is not too large ([`MAX_DENSE_CELLS`]),
    /// sparsely otherwise.
    fn build(&mut self) {
        let (mut last_sender, mut first_receiver) = (0, usize::MAX);
        let two_hops = self.routes.iter().all(|rt| match *rt.hops() {
            [s, r] => {
                last_sender = last_sender.max(s as usize);
                first_receiver = first_receiver.min(r as usize);
                true
            }
            _ => false,
        });
        if !(two_hops
            && last_sender < first_receiver
            && first_receiver < self.resources
            && (first_receiver as u64) * ((self.resources - first_receiver) as u64) <= MAX_DENSE_CELLS
            && self.build_dense(first_receiver))
        {
            self.build_sparse();
        }
    }

    /// Lays the current routes out densely, with resources from `split` on receiving; fails if
    /// two routes are the same.
    fn build_dense(&mut self, split: usize) -> bool {
        let m = self.resources;
        self.split = split;
        self.wm.clear();
        self.wm.resize(split * (m - split), 0.0);
        self.wt.clear();
        self.wt.resize(split * (m - split), 0.0);
        self.at.clear();
        self.at.resize(split * (m - split), 0);
        self.ends.clear();
        self.ends.resize(self.routes.len(), [0; 2]);
        self.dirty.clear();
        self.dirty.resize(m, false);
        self.dirty_list.clear();
        self.added.clear();
        self.added.extend(0..self.routes.len() as u32);
        self.gone.clear();
        self.reweighed.clear();
        self.sum.clear();
        self.sum.resize(m, 0.0);
        self.present = [BitRows::new(split, m - split), BitRows::new(m - split, split)];
        self.sender_first = [BitRows::new(split, m - split), BitRows::new(m - split, split)];
        self.follows_kept = false;
        self.resumable = false;
        self.update_dense()
    }

    /// Brings the dense layout up to date with what the current call changed; fails if a route
    /// that came is one already there.
    fn update_dense(&mut self) -> bool {
        let (split, cols) = (self.split, self.resources - self.split);
        self.layout = Layout::Dense;
        self.ends.resize(self.routes.len(), [0; 2]);
        // Routes that left take their weight with them. Then the routes that came are written,
        // some of which may just have moved and been cleared as ones that left, and the new
        // weights of those that stayed.
        let gone = self.gone.iter().map(|rt| (rt.hops()[0], rt.hops()[1], 0.0, false, 0));
        let added = self.added.iter().map(|&i| (i, true));
        let set = added.chain(self.reweighed.iter().map(|&i| (i, false))).map(|(i, came)| {
            let (rt, w) = (self.routes[i as usize], self.weights[i as usize]);
            self.ends[i as usize] = [rt.hops()[0], rt.hops()[1]];
            (rt.hops()[0], rt.hops()[1], w, came, i + 1)
        });
        for (s, r, w, came, at) in gone.chain(set) {
            let (s, r) = (s as usize, r as usize);
            let cell = &mut self.wm[s * cols + r - split];
            if came && *cell != 0.0 {
                return false;
            }
            *cell = w;
            self.at[s * cols + r - split] = at;
            self.wt[(r - split) * split + s] = w;
            self.present[0].set(s, r - split, at != 0);
            self.present[1].set(r - split, s, at != 0);
            for x in [s, r] {
                if !self.dirty[x] {
                    self.dirty[x] = true;
                    self.dirty_list.push(x as u32);
                }
            }
        }
        true
    }

    /// Builds the resource-to-route adjacency of the current routes.
    fn build_sparse(&mut self) {
        let m = self.resources;
        self.layout = Layout::Sparse;
        self.start.clear();
        self.start.resize(m + 1, 0);
        for rt in &self.routes {
            for &r in rt.hops() {
                self.start[r as usize + 1] += 1;
            }
        }
        for r in 0..m {
            self.start[r + 1] += self.start[r];
        }
        self.adj.clear();
        self.adj.resize(self.start[m] as usize, 0);
        // `start[r]` serves as resource `r`'s fill cursor and ends at the next one's start;
        // shifting back by one restores it.
        for (i, rt) in self.routes.iter().enumerate() {
            for &r in rt.hops() {
                let c = &mut self.start[r as usize];
                self.adj[*c as usize] = i as u32;
                *c += 1;
            }
        }
        self.start.copy_within(0..m, 1);
        self.start[0] = 0;
    }

    /// Resets the per-resource state for `capacity`, with `weight` already summed, and queues
    /// every resource that carries weight.
    fn start_filling(&mut self, capacity: &[f64]) {
        let m = capacity.len();
        self.rem.clear();
        self.rem.extend_from_slice(capacity);
        self.level.clear();
        self.level.resize(m, f64::INFINITY);
        self.last = 0.0;
        let (rem, weight) = (&self.rem, &self.weight);
        self.queue.reset(m, |r| if weight[r] > 0.0 { key(rem[r] / weight[r]) } else { OUT });
    }

    /// Pops the resource that fills next and its level, skipping those whose routes all froze
    /// elsewhere, and records its level.
    fn next_to_fill(&mut self) -> Option<(usize, f64)> {
        while let Some((r, queued)) = self.queue.first() {
            self.popped = self.popped.max((queued, r as u32));
            if self.weight[r] <= 1e-12 {
                self.queue.set(r, OUT);
                continue;
            }
            let level = self.rem[r] / self.weight[r];
            if key(level) != queued {
                // Its level rose since it was queued: back in line, which may still be first.
                self.queue.set(r, key(level));
                continue;
            }
            self.queue.set(r, OUT);
            let level = level.max(self.last);
            self.level[r] = level;
            self.last = level;
            return Some((r, level));
        }
        None
    }

    /// Fills in the dense layout, resuming the last fill where it starts to differ.
    fn fill_dense(&mut self, capacity: &[f64]) {
        let (m, split) = (self.resources, self.split);
        let cols = m - split;
        for &x in &self.dirty_list {
            let x = x as usize;
            self.sum[x] = if x < split {
                sum(&self.wm[x * cols..(x + 1) * cols], split)
            } else {
                sum(&self.wt[(x - split) * split..(x - split + 1) * split], 0)
            };
            self.dirty[x] = false;
        }
        let same_capacity = self.filled_capacity.len() == m
            && self.filled_capacity.iter().zip(capacity).all(|(a, b)| a.to_bits() == b.to_bits());
        if !(self.resumable && same_capacity && self.resume_dense(capacity)) {
            self.weight.clear();
            self.weight.extend_from_slice(&self.sum);
            self.start_filling(capacity);
            self.steps.clear();
            self.reach.clear();
            self.saved_rem.clear();
            self.saved_weight.clear();
            self.saved_key.clear();
            self.popped = (0, 0);
            self.filled_capacity.clear();
            self.filled_capacity.extend_from_slice(capacity);
        }
        self.dirty_list.clear();
        let every = if self.every == 0 { SAVE_EVERY } else { self.every };
        while let Some((r, level)) = self.next_to_fill() {
            self.steps.push((r as u32, level));
            self.reach.push(self.popped);
            self.popped = (0, 0);
            // Every route of `r` whose other end has not filled freezes at `level`; updating
            // the ends that did fill is harmless, as they are never looked at again.
            let (row, rem, weight) = if r < split {
                (&self.wm[r * cols..(r + 1) * cols], &mut self.rem[split..], &mut self.weight[split..])
            } else {
                let c = r - split;
                (&self.wt[c * split..(c + 1) * split], &mut self.rem[..split], &mut self.weight[..split])
            };
            freeze(rem, weight, row, level);
            if self.steps.len().is_multiple_of(every) {
                self.saved_rem.extend_from_slice(&self.rem);
                self.saved_weight.extend_from_slice(&self.weight);
                let queue = &self.queue;
                self.saved_key.extend((0..m).map(|r| queue.key(r)));
            }
        }
        self.resumable = true;
    }

    /// Brings the state of the last fill back to its latest saved step before this fill may
    /// take another step than the last, with the resources whose weight may have changed
    /// (`dirty_list`) as this fill's weights make them; returns false if there is no such step
    /// (the fill starts afresh).
    ///
    /// A changed resource that the queue neither takes nor puts back below what a step took
    /// off the queue leaves that step as it was: the queue hands out the same resources in the
    /// same order, and every other resource receives the same subtractions from the same rows.
    /// So the changed resources are followed through the last fill's steps, with the same
    /// operations in the same order as the fill, until one of them might be taken.
    fn resume_dense(&mut self, capacity: &[f64]) -> bool {
        let m = self.resources;
        let every = if self.every == 0 { SAVE_EVERY } else { self.every };
        let mut same = self.steps.len().min(self.saved_rem.len() / m * every);
        for &t in &self.dirty_list {
            same = same.min(self.follow_changed(capacity, t as usize, same, |_, _, _, _| {}));
            if same < every {
                return false;
            }
        }
        if same < every {
            return false;
        }
        let c = same / every * every;
        let block = (c / every - 1) * m..(c / every) * m;
        self.rem.clear();
        self.rem.extend_from_slice(&self.saved_rem[block.clone()]);
        self.weight.clear();
        self.weight.extend_from_slice(&self.saved_weight[block.clone()]);
        let keys = &self.saved_key[block];
        self.queue.reset(m, |r| keys[r]);
        self.saved_rem.truncate((c / every) * m);
        self.saved_weight.truncate((c / every) * m);
        self.saved_key.truncate((c / every) * m);
        self.steps.truncate(c);
        self.reach.truncate(c);
        self.popped = (0, 0);
        self.level.clear();
        self.level.resize(m, f64::INFINITY);
        for &(r, level) in &self.steps {
            self.level[r as usize] = level;
        }
        self.last = self.steps[c - 1].1;
        let dirty = std::mem::take(&mut self.dirty_list);
        let (mut saved_rem, mut saved_weight, mut saved_key) = (
            std::mem::take(&mut self.saved_rem),
            std::mem::take(&mut self.saved_weight),
            std::mem::take(&mut self.saved_key),
        );
        for &t in &dirty {
            let t = t as usize;
            let mut now = (0.0, 0.0, OUT);
            self.follow_changed(capacity, t, c, |i, rem, weight, queued| {
                now = (rem, weight, queued);
                if i.is_multiple_of(every) {
                    // The saved states hold this fill's values for it too.
                    let at = (i / every - 1) * m + t;
                    (saved_rem[at], saved_weight[at], saved_key[at]) = now;
                }
            });
            (self.rem[t], self.weight[t]) = (now.0, now.1);
            self.queue.set(t, now.2);
        }
        (self.saved_rem, self.saved_weight, self.saved_key) = (saved_rem, saved_weight, saved_key);
        self.dirty_list = dirty;
        true
    }

    /// Follows resource `t` through the first `limit` steps of the last fill with this fill's
    /// weights, as the fill would move it, calling `after(i, rem, weight, key)` after each step
    /// `i - 1` with its capacity left, unfrozen weight and queued key; returns the first step at
    /// which the queue might take it (`limit` if none), the step before which it stops.
    fn follow_changed(
        &self,
        capacity: &[f64],
        t: usize,
        limit: usize,
        mut after: impl FnMut(usize, f64, f64, u64),
    ) -> usize {
        let split = self.split;
        let cols = self.resources - split;
        let (mut rem, mut weight) = (capacity[t], self.sum[t]);
        let mut queued = if weight > 0.0 { key(rem / weight) } else { OUT };
        for (i, (&(x, level), &reach)) in self.steps[..limit].iter().zip(&self.reach).enumerate() {
            let x = x as usize;
            if x == t {
                return i;
            }
            // Taken off the queue in step `i`, as `next_to_fill` would: dropped, or put back at
            // its level, which must stay above what the step took off (else it would be taken).
            if (queued, t as u32) <= reach {
                if weight <= 1e-12 {
                    queued = OUT;
                } else {
                    let level = key(rem / weight);
                    if level == queued || (level, t as u32) <= reach {
                        return i;
                    }
                    queued = level;
                }
            }
            if (x < split) != (t < split) {
                let w = if x < split { self.wm[x * cols + t - split] } else { self.wt[(x - split) * split + t] };
                rem = take(rem, w * level);
                weight -= w;
            }
            after(i + 1, rem, weight, queued);
        }
        limit
    }

    /// Fills in the sparse layout, recording in `froze` the resource at which each route froze
    /// (`NOWHERE` for one that did not; a local route gets an infinite level).
    fn fill_sparse(&mut self, capacity: &[f64]) {
        let (m, n) = (self.resources, self.routes.len());
        self.weight.clear();
        self.weight.resize(m, 0.0);
        self.frozen.clear();
        self.frozen.resize(n, false);
        self.froze.clear();
        self.froze.resize(n, NOWHERE);
        for (i, rt) in self.routes.iter().enumerate() {
            if rt.is_local() {
                self.frozen[i] = true;
            }
            for &r in rt.hops() {
                self.weight[r as usize] += self.weights[i];
            }
        }
        self.start_filling(capacity);
        while let Some((r, level)) = self.next_to_fill() {
            for k in self.start[r]..self.start[r + 1] {
                let i = self.adj[k as usize] as usize;
                if self.frozen[i] {
                    continue;
                }
                self.frozen[i] = true;
                self.froze[i] = r as u32;
                let w = self.weights[i];
                for &h in self.routes[i].hops() {
                    let h = h as usize;
                    self.rem[h] = take(self.rem[h], w * level);
                    self.weight[h] -= w;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn two_flows_share_a_port_and_a_third_takes_the_rest() {
        // Routes: a = 0->2, b = 1->2, c = 1->3 (resources are just ids here), capacities 1.
        let routes = [Route::new(&[0, 2]), Route::new(&[1, 2]), Route::new(&[1, 3])];
        let mut rates = [0.0; 3];
        MaxMin::default().solve(&[1.0; 4], &routes, &[1.0, 1.0, 1.0], &mut rates);
        assert_eq!(rates, [0.5, 0.5, 0.5]);
    }

    #[test]
    fn a_bottlenecked_flow_leaves_room_for_others() {
        // a = 0->2 with capacity of 2 at 0.25; b = 1->2 takes the rest of resource 2.
        let routes = [Route::new(&[0, 2]), Route::new(&[1, 2])];
        let mut rates = [0.0; 2];
        MaxMin::default().solve(&[0.25, 1.0, 1.0], &routes, &[1.0, 1.0], &mut rates);
        assert_eq!(rates, [0.25, 0.75]);
    }

    #[test]
    fn weights_count_flows() {
        // Three flows on route a and one on b share resource 1 equally per flow.
        let routes = [Route::new(&[0, 1]), Route::new(&[2, 1])];
        let mut rates = [0.0; 2];
        MaxMin::default().solve(&[1.0; 3], &routes, &[3.0, 1.0], &mut rates);
        assert_eq!(rates, [0.25, 0.25]);
    }

    /// Rows that reach every branch of the row update: capacity used up exactly, past zero, or
    /// not; weights and levels of every size, subnormal, zero of either sign, and infinite.
    fn rows(n: usize) -> impl Strategy<Value = (Vec<f64>, Vec<f64>, Vec<f64>, f64)> {
        let x = || {
            prop_oneof![
                4 => 0.0f64..10.0,
                1 => prop::sample::select(vec![0.0, -0.0, 1.0, 0.1, 0.3, 5e-324, 1e-300, 1e300, f64::INFINITY]),
                1 => any::<f64>().prop_map(f64::abs),
            ]
        };
        let v = move || prop::collection::vec(x(), n);
        (v(), v(), v(), x())
    }

    proptest! {
        #[test]
        fn the_row_update_gives_the_same_bits_in_every_vector_width(
            (rem, weight, row, level) in (0usize..80).prop_flat_map(rows)
        ) {
            let bits = |xs: &[f64]| xs.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            // The plain loop, one cell at a time, with no vectors at all.
            let (mut rem_one, mut weight_one) = (rem.clone(), weight.clone());
            for ((x, y), &w) in rem_one.iter_mut().zip(weight_one.iter_mut()).zip(&row) {
                *x = take(*x, w * level);
                *y -= w;
            }
            let expect = (bits(&rem_one), bits(&weight_one));
            let run = |f: &dyn Fn(&mut [f64], &mut [f64])| {
                let (mut r, mut w) = (rem.clone(), weight.clone());
                f(&mut r, &mut w);
                (bits(&r), bits(&w))
            };
            // The baseline copy, and the one this processor runs.
            prop_assert_eq!(&run(&|r, w| freeze_with(r, w, &row, level)), &expect);
            prop_assert_eq!(&run(&|r, w| freeze(r, w, &row, level)), &expect);
            #[cfg(target_arch = "x86_64")]
            {
                if std::arch::is_x86_feature_detected!("avx2") {
                    // SAFETY: the processor has AVX2, all `freeze_avx2` needs.
                    #[allow(unsafe_code)]
                    let avx2 = run(&|r, w| unsafe { freeze_avx2(r, w, &row, level) });
                    prop_assert_eq!(&avx2, &expect);
                }
                if std::arch::is_x86_feature_detected!("avx512f") {
                    // SAFETY: the processor has AVX-512F, all `freeze_avx512` needs.
                    #[allow(unsafe_code)]
                    let avx512 = run(&|r, w| unsafe { freeze_avx512(r, w, &row, level) });
                    prop_assert_eq!(&avx512, &expect);
                }
            }
        }

        #[test]
        fn the_queue_hands_out_the_least_key_then_the_least_resource(
            (m, sets) in (0usize..70).prop_flat_map(|m| {
                // Few distinct keys, so that many tie; now and then out of line.
                let key = prop_oneof![4 => 0u64..6, 1 => Just(OUT)];
                (Just(m), prop::collection::vec((0..m.max(1), key), 0..200))
            })
        ) {
            let mut keys: Vec<u64> = (0..m).map(|r| (r as u64 * 7) % 5).collect();
            let mut queue = Queue::default();
            queue.reset(m, |r| keys[r]);
            for (r, k) in sets.into_iter().filter(|_| m > 0) {
                queue.set(r, k);
                keys[r] = k;
                let least = (0..m).filter(|&r| keys[r] != OUT).map(|r| (r, keys[r])).min_by_key(|&(r, k)| (k, r));
                prop_assert_eq!(queue.first(), least);
                prop_assert!((0..m).all(|r| queue.key(r) == keys[r]));
                // A queue reset to the same keys agrees.
                let mut fresh = Queue::default();
                fresh.reset(m, |r| keys[r]);
                prop_assert_eq!(fresh.first(), least);
            }
        }
    }

    #[test]
    fn a_switch_too_large_for_the_matrix_is_laid_out_sparsely() {
        // 4,097 senders × 4,097 receivers is past `MAX_DENSE_CELLS`: the routes are laid out
        // sparsely, in memory that grows with them, and shared as the dense layout would.
        let n = 4097;
        assert!(n * n > MAX_DENSE_CELLS as usize);
        let capacity = vec![1.0; 2 * n];
        let (a, b) = (Route::new(&[0, n as u32]), Route::new(&[0, n as u32 + 1]));
        let mut mm = MaxMin::default();
        let mut rates = [0.0; 2];
        mm.solve(&capacity, &[a, b], &[1.0, 3.0], &mut rates);
        assert_eq!((mm.layout, rates), (Layout::Sparse, [0.25, 0.25]));
        assert!(mm.wm.is_empty(), "no matrix");
        // One machine fewer a side (4,096 × 4,096) and the matrix fits.
        let (c, d) = (Route::new(&[0, n as u32 - 1]), Route::new(&[0, n as u32]));
        mm.solve(&capacity[..2 * (n - 1)], &[c, d], &[1.0, 3.0], &mut rates);
        assert_eq!((mm.layout, rates), (Layout::Dense, [0.25, 0.25]));
    }

    #[test]
    fn layouts_follow_the_routes() {
        let mut mm = MaxMin::default();
        let mut rates = [0.0; 2];
        let (a, b) = (Route::new(&[0, 2]), Route::new(&[1, 3]));
        mm.solve(&[1.0; 4], &[a, b], &[1.0, 1.0], &mut rates);
        assert_eq!(mm.layout, Layout::Dense);
        // A route with three hops, or two routes that are the same, need the sparse layout.
        mm.solve(&[1.0; 4], &[a, Route::new(&[1, 2, 3])], &[1.0, 1.0], &mut rates);
        assert_eq!((mm.layout, rates), (Layout::Sparse, [0.5, 0.5]));
        mm.solve(&[1.0; 4], &[a, b], &[1.0, 1.0], &mut rates);
        assert_eq!((mm.layout, rates), (Layout::Dense, [1.0, 1.0]));
        mm.solve(&[1.0; 4], &[a, a], &[1.0, 3.0], &mut rates);
        assert_eq!((mm.layout, rates), (Layout::Sparse, [0.25, 0.25]));
    }

    /// The routes a driver lists between two calls: every route that left, came, moved or
    /// changed weight, sorted, each once.
    fn changed_routes(was: &[(Route, f64)], now: &[(Route, f64)]) -> Vec<Route> {
        let mut listed: Vec<Route> = (0..was.len().max(now.len()))
            .filter(|&i| was.get(i) != now.get(i))
            .flat_map(|i| was.get(i).into_iter().chain(now.get(i)).map(|&(rt, _)| rt))
            .collect();
        listed.sort_unstable();
        listed.dedup();
        listed
    }

    /// Solves each of `states` in turn with a solver kept from call to call, resuming its fills
    /// at every step, and checks it answers in shares as a fresh solver does; returns its steps.
    fn kept_agrees_with_fresh(capacity: &[f64], states: &[&[(Route, f64)]]) -> Vec<(u32, f64)> {
        let (mut kept, mut shares) = (MaxMin { every: 1, ..MaxMin::default() }, Shares::default());
        let mut was: &[(Route, f64)] = &[];
        for &now in states {
            let listed = changed_routes(was, now);
            shares.follows.resize(now.len(), 0);
            shares.written.clear();
            kept.solve_shares(capacity, now.len(), |i| (&now[i].0, now[i].1), Some(&listed), &mut shares);
            let mut fresh = Shares { follows: vec![0; now.len()], ..Shares::default() };
            MaxMin::default().solve_shares(capacity, now.len(), |i| (&now[i].0, now[i].1), None, &mut fresh);
            assert_eq!((&shares.rate, &shares.follows), (&fresh.rate, &fresh.follows), "routes {now:?}");
            was = now;
        }
        kept.steps
    }

    #[test]
    fn a_route_between_two_resources_filled_at_one_level_follows_what_a_fresh_fill_says() {
        // A sender of 2 B/s sends 3 flows to a receiver of 0.6 B/s and 7 to others. The receiver
        // fills first, at 0.6 / 3, which rounds to just below 0.2; then the sender's level,
        // (2 − 3 · that) / 7, rounds to the very same number: two resources filled at one level,
        // one after the other, with a route between them. Which of the two that route follows
        // must not depend on whether the solver resumes a kept fill, whether the sender's level
        // is the one that changed (first case) or the receiver's (second).
        let r = |s: u32, d: u32| Route::new(&[s, d]);
        let tie = |steps: &[(u32, f64)], receiver: u32, sender: u32| {
            let at = |x: u32| steps.iter().position(|&(y, _)| y == x).expect("filled");
            assert!(at(receiver) < at(sender) && steps[at(receiver)].1 == steps[at(sender)].1, "steps {steps:?}");
        };
        let capacity = [2.0, 0.0, 0.0, 2.1228782669570614, 3.593705555333294, 0.6, 0.0];
        let steps = kept_agrees_with_fresh(
            &capacity,
            &[
                &[],
                &[(r(0, 3), 1.0)],
                &[(r(0, 3), 4.0)],
                &[(r(0, 3), 4.0), (r(0, 5), 1.0)],
                &[(r(0, 3), 4.0), (r(0, 5), 3.0)],
                &[(r(0, 3), 4.0), (r(0, 5), 3.0), (r(0, 4), 3.0)],
            ],
        );
        tie(&steps, 5, 0);
        let capacity = [0.0, 2.0, 0.0, 4.487452841312799, 0.6, 9.60217203825175, 0.0];
        let steps = kept_agrees_with_fresh(
            &capacity,
            &[
                &[(r(1, 4), 1.0)],
                &[(r(1, 4), 1.0), (r(1, 5), 1.0)],
                &[(r(1, 4), 1.0), (r(1, 5), 1.0), (r(0, 3), 1.0)],
                &[(r(1, 4), 1.0), (r(1, 5), 2.0), (r(0, 3), 1.0)],
                &[(r(1, 4), 1.0), (r(1, 5), 2.0), (r(0, 3), 1.0), (r(1, 3), 5.0)],
                &[(r(1, 4), 3.0), (r(1, 5), 2.0), (r(0, 3), 1.0), (r(1, 3), 5.0)],
            ],
        );
        tie(&steps, 4, 1);
    }

    /// Solves with the sparse layout whatever the routes.
    fn solve_sparse(capacity: &[f64], routes: &[Route], weights: &[f64]) -> Vec<f64> {
        let mut mm = MaxMin { resources: capacity.len(), ..MaxMin::default() };
        mm.routes = routes.to_vec();
        mm.weights = weights.to_vec();
        mm.build_sparse();
        mm.fill_sparse(capacity);
        let level = |r: u32| if r == NOWHERE { f64::INFINITY } else { mm.level[r as usize] };
        mm.froze.iter().map(|&r| level(r)).collect()
    }

    /// Checks that `rates` are max-min fair: no resource carries more than its capacity, and
    /// every route crosses a full resource on which no route gets a larger rate per flow.
    fn assert_max_min_fair(
        capacity: &[f64],
        routes: &[Route],
        weights: &[f64],
        rates: &[f64],
    ) -> Result<(), TestCaseError> {
        let tol = |x: f64| 1e-9 * x.abs() + 1e-9;
        let mut used = vec![0.0; capacity.len()];
        for ((rt, &w), &rate) in routes.iter().zip(weights).zip(rates) {
            if rt.is_local() {
                prop_assert_eq!(rate, f64::INFINITY);
            }
            for &r in rt.hops() {
                used[r as usize] += w * rate;
            }
        }
        for (r, (&u, &cap)) in used.iter().zip(capacity).enumerate() {
            prop_assert!(u <= cap + tol(cap), "resource {} carries {} over its capacity {}", r, u, cap);
        }
        for (i, (rt, &rate)) in routes.iter().zip(rates).enumerate() {
            let bottleneck = rt.hops().iter().any(|&r| {
                let full = used[r as usize] >= capacity[r as usize] - tol(capacity[r as usize]);
                let top = routes.iter().zip(rates).all(|(o, &x)| !o.hops().contains(&r) || x <= rate + tol(rate));
                full && top
            });
            prop_assert!(rt.is_local() || bottleneck, "route {} ({:?}) at {} has no bottleneck", i, rt, rate);
        }
        Ok(())
    }

    fn close(a: &[f64], b: &[f64]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(&x, &y)| x == y || (x - y).abs() <= 1e-9 * x.abs().max(y.abs()))
    }

    /// Capacities of `m` resources, some of them zero, and some small whole numbers, so that
    /// resources often fill at the same level (as the ports of a big switch, all alike, do).
    fn capacities(m: usize) -> impl Strategy<Value = Vec<f64>> {
        prop::collection::vec(
            prop_oneof![
                1 => Just(0.0),
                4 => 0.1f64..10.0,
                4 => prop::sample::select(vec![0.1, 0.2, 0.3, 0.6, 0.7, 1.0, 1.0 / 3.0, 2.0 / 3.0, 2.0]),
            ],
            m,
        )
    }

    /// Flow counts, and now and then a fraction.
    fn weight() -> impl Strategy<Value = f64> {
        prop_oneof![4 => (1u32..6).prop_map(f64::from), 1 => 0.1f64..3.0]
    }

    /// Any routes of up to four distinct resources among `m`, possibly local or repeated.
    fn any_instance() -> impl Strategy<Value = (Vec<f64>, Vec<Route>, Vec<f64>)> {
        (1usize..8).prop_flat_map(|m| {
            let route = prop::sample::subsequence((0..m as u32).collect::<Vec<_>>(), 0..=m.min(4))
                .prop_shuffle()
                .prop_map(|hops| Route::new(&hops));
            (capacities(m), prop::collection::vec((route, weight()), 0..12)).prop_map(|(capacity, rw)| {
                let (routes, weights) = rw.into_iter().unzip();
                (capacity, routes, weights)
            })
        })
    }

    /// Distinct routes from one of `n` senders to one of `n` receivers, as on the big switch.
    fn switch_instance() -> impl Strategy<Value = (Vec<f64>, Vec<Route>, Vec<f64>)> {
        (1u32..6).prop_flat_map(|n| {
            let pairs = prop::collection::btree_map((0..n, n..2 * n), weight(), 0..(n * n) as usize);
            (capacities(2 * n as usize), pairs).prop_map(|(capacity, pairs)| {
                let (routes, weights) = pairs.into_iter().map(|((s, r), w)| (Route::new(&[s, r]), w)).unzip();
                (capacity, routes, weights)
            })
        })
    }

    /// What happens to the routes between two decisions of a driver like the simulator's.
    #[derive(Clone, Debug)]
    enum Step {
        /// A route's flow count changes.
        Reweigh(usize, f64),
        /// A route's last flow finishes: the last route takes its place.
        Leave(usize),
        /// A new route (if not there yet) with its first flows.
        Come(Route, f64),
    }

    fn steps(n: u32) -> impl Strategy<Value = Vec<Step>> {
        // Now and then a three-hop route, which needs the sparse layout until it leaves.
        let route = prop_oneof![
            8 => (0..n, n..2 * n).prop_map(|(s, r)| Route::new(&[s, r])),
            1 => (0..n, n..2 * n).prop_map(move |(s, r)| Route::new(&[s, 2 * n, r])),
        ];
        let step = prop_oneof![
            3 => (any::<prop::sample::Index>(), weight()).prop_map(|(i, w)| Step::Reweigh(i.index(usize::MAX), w)),
            2 => any::<prop::sample::Index>().prop_map(|i| Step::Leave(i.index(usize::MAX))),
            3 => (route, weight()).prop_map(|(rt, w)| Step::Come(rt, w)),
        ];
        prop::collection::vec(step, 1..40)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(500))]

        #[test]
        fn any_routes_share_max_min_fairly((capacity, routes, weights) in any_instance()) {
            let mut rates = vec![0.0; routes.len()];
            MaxMin::default().solve(&capacity, &routes, &weights, &mut rates);
            assert_max_min_fair(&capacity, &routes, &weights, &rates)?;
        }

        #[test]
        fn the_dense_layout_agrees_with_the_sparse((capacity, routes, weights) in switch_instance()) {
            let mut mm = MaxMin::default();
            let mut rates = vec![0.0; routes.len()];
            mm.solve(&capacity, &routes, &weights, &mut rates);
            prop_assert!(routes.is_empty() || mm.layout == Layout::Dense);
            assert_max_min_fair(&capacity, &routes, &weights, &rates)?;
            let sparse = solve_sparse(&capacity, &routes, &weights);
            prop_assert!(close(&rates, &sparse), "dense {:?}, sparse {:?}", rates, sparse);
        }

        #[test]
        fn a_solver_kept_across_changes_agrees_with_a_fresh_one(
            (n, capacity, steps, every) in (1u32..7).prop_flat_map(|n| (Just(n), capacities(2 * n as usize + 1), steps(n), 1usize..4))
        ) {
            // Each kept solver saves its fills every `every` steps and resumes them where they
            // start to differ: whatever the step, it answers as a fresh solver filling from the start.
            let (mut kept, mut routes, mut weights) = (MaxMin { every, ..MaxMin::default() }, Vec::new(), Vec::new());
            // A solver told which routes changed, as a driver's `Changes` does.
            let (mut told, mut was): (MaxMin, Vec<(Route, f64)>) = (MaxMin { every, ..MaxMin::default() }, Vec::new());
            // One answering in shares, told too, with the shares kept between calls as a driver does.
            let (mut shared, mut shares) = (MaxMin { every, ..MaxMin::default() }, Shares::default());
            for step in steps {
                match step {
                    Step::Reweigh(i, w) if !routes.is_empty() => weights[i % routes.len()] = w,
                    Step::Leave(i) if !routes.is_empty() => {
                        routes.swap_remove(i % routes.len());
                        weights.swap_remove(i % weights.len());
                    }
                    Step::Come(rt, w) if !routes.contains(&rt) => {
                        routes.push(rt);
                        weights.push(w);
                    }
                    _ => {}
                }
                let mut rates = vec![0.0; routes.len()];
                kept.solve(&capacity, &routes, &weights, &mut rates);
                let mut fresh = vec![0.0; routes.len()];
                MaxMin::default().solve(&capacity, &routes, &weights, &mut fresh);
                prop_assert_eq!(&rates, &fresh, "after {} routes over {} machines", routes.len(), n);
                // Listed: every route that left, came, moved or changed weight.
                let now: Vec<(Route, f64)> = routes.iter().copied().zip(weights.iter().copied()).collect();
                let listed = changed_routes(&was, &now);
                let mut rates_told = vec![0.0; routes.len()];
                told.solve_listed(&capacity, routes.len(), |i| (&routes[i], weights[i]), Some(&listed), &mut rates_told);
                prop_assert_eq!(&rates_told, &fresh, "told {:?}", listed);
                let before = shares.follows.clone();
                shares.follows.resize(routes.len(), 0);
                shares.written.clear();
                shared.solve_shares(&capacity, routes.len(), |i| (&routes[i], weights[i]), Some(&listed), &mut shares);
                let mut fresh_shares = Shares { follows: vec![0; routes.len()], ..Shares::default() };
                MaxMin::default().solve_shares(&capacity, routes.len(), |i| (&routes[i], weights[i]), None, &mut fresh_shares);
                // The same answer as a fresh solver's, in rates and in which resource each route follows.
                prop_assert_eq!(&shares.rate, &fresh_shares.rate);
                prop_assert_eq!(&shares.follows, &fresh_shares.follows);
                let resolved: Vec<f64> = shares.follows.iter().map(|&r| shares.rate[r as usize]).collect();
                prop_assert!(
                    resolved.iter().zip(&fresh).all(|(a, b)| a == b || routes.iter().any(|rt| rt.is_local())),
                    "shares {:?}, rates {:?}", resolved, fresh
                );
                // Every position written at most once, and every one that changed written.
                let mut written = shares.written.clone();
                written.sort_unstable();
                written.dedup();
                prop_assert_eq!(written.len(), shares.written.len());
                for (i, &f) in shares.follows.iter().enumerate() {
                    let came = was.get(i).map(|w| w.0) != now.get(i).map(|w| w.0);
                    if before.get(i) != Some(&f) || came {
                        prop_assert!(written.binary_search(&(i as u32)).is_ok(), "position {} not written", i);
                    }
                }
                was = now;
                assert_max_min_fair(&capacity, &routes, &weights, &rates)?;
            }
        }
    }
}
