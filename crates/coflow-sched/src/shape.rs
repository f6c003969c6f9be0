//! The shape of a coflow whose sizes are unknown, and the passes that serve it: what `aalo`,
//! `philae` and `saath` share.
//!
//! A [`Shape`] holds a coflow's legs in runs by sender (and, for two-resource legs, by receiver),
//! the resources its active legs cross, and bit sets of its senders and receivers, kept as legs
//! finish; [`Shapes`] keeps one per coflow of a blind policy's input from one decision to the
//! next. [`serve`] hands out a [`Pool`] of bandwidth to a coflow's active legs in leg order, each
//! as much as every resource of its route has left, visiting only the senders and receivers that
//! still have room; [`Leftover`] serves what a first pass left, coflow after coflow, so that no
//! port idles while a flow through it could send. The bit sets over resources the policies keep
//! beside these are read and written with this module's helpers ([`words`], [`set_bit`],
//! [`fill_bits`]).

use std::collections::{BTreeMap, BTreeSet};

use coflow_core::CoflowId;

use crate::blind::{BlindAllocation, BlindCoflow, BlindInput, BlindLeg};
use crate::fabric::ResourceId;
use crate::kernel::FULL;

/// A run of consecutive legs of a coflow with the same first resource.
#[derive(Debug, Default)]
struct Group {
    /// The first resource of the run's legs.
    sender: ResourceId,
    /// Whether every leg of the run (finished or not) crosses exactly two resources: then the legs
    /// are sorted by the second.
    two_hop: bool,
    /// Not a two-resource run: its active legs, as offsets among the coflow's legs, ascending.
    legs: Vec<u32>,
    /// A two-resource run: the offset of its first leg; its legs, finished or not, are the next
    /// `first.last()` ones.
    start: u32,
    /// A two-resource run: the receivers its legs go to, as indices into [`Shape::receivers`],
    /// ascending, each once.
    dist: Vec<u32>,
    /// A two-resource run: where the legs to `dist[k]` begin, relative to `start`, and after the
    /// last one, where they end.
    first: Vec<u32>,
    /// A two-resource run with at least as many receivers as a receiver set has words: the
    /// receivers some active leg of the run goes to, as a bit set over the coflow's receivers.
    /// Empty otherwise (then `dist` is walked).
    live: Vec<u64>,
    /// With `live`: `dist` as a bit set over the coflow's receivers, and per word the entries of
    /// `dist` in the words before, so that a receiver's place in `dist` is counted, not searched.
    dist_bits: Vec<u64>,
    dist_rank: Vec<u32>,
}

impl Group {
    /// The place in `dist` of receiver `i`, one of them, found through `dist_bits` (with `live`).
    fn place(&self, i: u32) -> usize {
        let (w, b) = ((i / 64) as usize, i % 64);
        debug_assert!(bit(&self.dist_bits, i), "a receiver of the run");
        self.dist_rank[w] as usize + (self.dist_bits[w] & ((1u64 << b) - 1)).count_ones() as usize
    }
}

/// A coflow's legs as the serving passes walk them: in runs by sender, a two-resource run's legs
/// by receiver, with the resources its active legs cross and bit sets of its senders and
/// receivers, kept as its legs finish (a leg's route never changes).
#[derive(Debug, Default)]
pub(crate) struct Shape {
    /// Its legs in runs by first resource, in leg order; a run stays (empty) when its legs finish.
    groups: Vec<Group>,
    /// Per run, its first resource and how many of its legs are active: what a pass reads of every
    /// run, apart, so that skipping runs reads little.
    runs: Vec<(ResourceId, u32)>,
    /// The index of the run after the last one that is not a two-resource run (0 if none).
    last_multi: usize,
    /// Per leg offset, its run in `groups` (`u32::MAX` for a leg that crosses nothing).
    group_of: Vec<u32>,
    /// Per leg offset, its active flows: as when the shape was built, and zero once it finished.
    flows: Vec<u32>,
    /// The resources its active legs cross, sorted, each with how many active flows cross it.
    pub(crate) resources: Vec<(ResourceId, u32)>,
    /// The second resources of its two-resource legs (receivers) when it was built, sorted.
    receivers: Vec<ResourceId>,
    /// Per receiver, how many active two-resource legs go to it.
    receiver_legs: Vec<u32>,
    /// The first and the last resources of its active legs, as bit sets over the resources (a
    /// resource's bits are cleared when no active leg crosses it).
    first_hops: Vec<u64>,
    last_hops: Vec<u64>,
    /// Whether its runs have distinct senders in ascending order (then a run is found by its
    /// sender).
    sender_ordered: bool,
    /// If `sender_ordered`, per resource the run it sends (`u32::MAX`: none), as many as the
    /// bit sets have bits.
    run_at: Vec<u32>,
    /// If `sender_ordered` and small enough ([`TRANSPOSED_WORDS`]), per receiver (as in
    /// `receivers`) the senders of the two-resource runs with an active leg to it, as a bit set
    /// over the resources (`first_hops`'s words, receiver after receiver); empty otherwise.
    senders_to: Vec<u64>,
    /// With `senders_to`: the senders of the runs that are not two-resource runs.
    multi_senders: Vec<u64>,
}

/// The most words [`Shape::senders_to`] may take (128 KiB).
const TRANSPOSED_WORDS: usize = 1 << 14;

/// Words of a bit set of `n` bits.
pub(crate) fn words(n: usize) -> usize {
    n.div_ceil(64)
}

/// Whether bit `i` of `set` is set.
fn bit(set: &[u64], i: u32) -> bool {
    set[(i / 64) as usize] & (1 << (i % 64)) != 0
}

/// Sets bit `i` of `set`.
pub(crate) fn set_bit(set: &mut [u64], i: u32) {
    set[(i / 64) as usize] |= 1 << (i % 64);
}

/// Clears bit `i` of `set`.
fn clear_bit(set: &mut [u64], i: u32) {
    set[(i / 64) as usize] &= !(1 << (i % 64));
}

/// Makes `set` the bit set over `0..n` with bit `i` where `pred(i)`, a word at a time (each built
/// in a register rather than bit by bit in memory).
pub(crate) fn fill_bits(set: &mut Vec<u64>, n: usize, pred: impl Fn(usize) -> bool) {
    set.clear();
    set.extend(
        (0..n)
            .step_by(64)
            .map(|start| (start..n.min(start + 64)).fold(0u64, |word, i| word | (u64::from(pred(i)) << (i - start)))),
    );
}

impl Shape {
    /// The shape of `c`; `count` is scratch, one per resource, all zero, left so.
    fn of(c: &BlindCoflow, legs: &[BlindLeg], count: &mut [u32]) -> Shape {
        let legs = &legs[c.legs.clone()];
        let mut groups: Vec<Group> = Vec::new();
        let mut group_of = Vec::with_capacity(legs.len());
        let mut flows = vec![0; legs.len()];
        let mut resources = Vec::new();
        let mut receivers = Vec::new();
        let mut last_end = usize::MAX;
        for (j, leg) in legs.iter().enumerate() {
            let hops = leg.route.hops();
            let Some(&first) = hops.first() else {
                group_of.push(u32::MAX);
                continue;
            };
            let two_hop = hops.len() == 2;
            match groups.last_mut() {
                Some(g) if g.sender == first && last_end == j => g.two_hop &= two_hop,
                _ => groups.push(Group { sender: first, two_hop, start: j as u32, ..Group::default() }),
            }
            last_end = j + 1;
            group_of.push((groups.len() - 1) as u32);
            if two_hop {
                receivers.push(hops[1]);
            }
            if leg.active_flows > 0 {
                flows[j] = leg.active_flows;
                groups.last_mut().expect("just pushed").legs.push(j as u32);
                for &r in hops {
                    if count[r as usize] == 0 {
                        resources.push(r);
                    }
                    count[r as usize] += leg.active_flows;
                }
            }
        }
        resources.sort_unstable();
        let resources = resources.into_iter().map(|r| (r, std::mem::take(&mut count[r as usize]))).collect();
        receivers.sort_unstable();
        receivers.dedup();
        let mut receiver_legs = vec![0; receivers.len()];
        let n = words(receivers.len());
        for (g, group) in groups.iter_mut().enumerate() {
            if !group.two_hop {
                continue;
            }
            let end = group_of[group.start as usize..].iter().take_while(|&&x| x == g as u32).count();
            for m in 0..end as u32 {
                let leg = &legs[(group.start + m) as usize];
                let i = receivers.binary_search(&leg.route.hops()[1]).expect("listed above") as u32;
                if group.dist.last() != Some(&i) {
                    group.dist.push(i);
                    group.first.push(m);
                }
                if leg.active_flows > 0 {
                    receiver_legs[i as usize] += 1;
                }
            }
            group.first.push(end as u32);
            group.legs = Vec::new();
            if n <= group.dist.len() {
                group.live = vec![0; n];
                group.dist_bits = vec![0; n];
                for &i in &group.dist {
                    set_bit(&mut group.dist_bits, i);
                }
                let mut before = 0;
                group.dist_rank = group
                    .dist_bits
                    .iter()
                    .map(|w| {
                        let r = before;
                        before += w.count_ones();
                        r
                    })
                    .collect();
                for (k, &i) in group.dist.iter().enumerate() {
                    let (a, b) = (group.first[k], group.first[k + 1]);
                    if (a..b).any(|m| legs[(group.start + m) as usize].active_flows > 0) {
                        set_bit(&mut group.live, i);
                    }
                }
            }
        }
        let last_multi = groups.iter().rposition(|g| !g.two_hop).map_or(0, |g| g + 1);
        let mut runs: Vec<(ResourceId, u32)> = groups.iter().map(|g| (g.sender, 0)).collect();
        for (j, &g) in group_of.iter().enumerate() {
            if g != u32::MAX && flows[j] > 0 {
                runs[g as usize].1 += 1;
            }
        }
        let n = words(count.len());
        let (mut first_hops, mut last_hops) = (vec![0; n], vec![0; n]);
        for leg in legs.iter().filter(|l| l.active_flows > 0) {
            if let (Some(&a), Some(&b)) = (leg.route.hops().first(), leg.route.hops().last()) {
                set_bit(&mut first_hops, a);
                set_bit(&mut last_hops, b);
            }
        }
        let sender_ordered =
            runs.windows(2).all(|w| w[0].0 < w[1].0) && runs.iter().all(|&(s, _)| (s as usize) < n * 64);
        let mut run_at = Vec::new();
        let (mut senders_to, mut multi_senders) = (Vec::new(), Vec::new());
        if sender_ordered {
            run_at = vec![u32::MAX; n * 64];
            for (g, &(s, _)) in runs.iter().enumerate() {
                run_at[s as usize] = g as u32;
            }
            if receivers.len() * n <= TRANSPOSED_WORDS {
                senders_to = vec![0; receivers.len() * n];
                multi_senders = vec![0; n];
                for group in &groups {
                    if !group.two_hop {
                        set_bit(&mut multi_senders, group.sender);
                        continue;
                    }
                    for (k, &i) in group.dist.iter().enumerate() {
                        let (a, b) = (group.first[k], group.first[k + 1]);
                        if (a..b).any(|m| flows[(group.start + m) as usize] > 0) {
                            set_bit(&mut senders_to[i as usize * n..(i as usize + 1) * n], group.sender);
                        }
                    }
                }
            }
        }
        Shape {
            groups,
            runs,
            last_multi,
            group_of,
            flows,
            resources,
            receivers,
            receiver_legs,
            first_hops,
            last_hops,
            sender_ordered,
            run_at,
            senders_to,
            multi_senders,
        }
    }

    /// The senders in word `w` (of the bit sets over resources) of the runs that may be given
    /// something: those of the runs that are not two-resource runs, and those with an active leg
    /// to a receiver in `open` (a bit set over its receivers). Needs `senders_to`.
    fn senders_to_open(&self, w: usize, open: &[u64]) -> u64 {
        let n = self.first_hops.len();
        let mut senders = self.multi_senders[w];
        for (v, &word) in open.iter().enumerate() {
            let mut y = word;
            while y != 0 {
                let i = v * 64 + y.trailing_zeros() as usize;
                y &= y - 1;
                senders |= self.senders_to[i * n + w];
            }
        }
        senders
    }

    /// Whether some active leg may have room: some first resource and some last resource of its
    /// active legs have room in `room` (a bit set over the resources). False only when [`serve`]
    /// would give the coflow nothing.
    pub(crate) fn may_have_room(&self, room: &[u64]) -> bool {
        let meets = |set: &[u64]| set.iter().zip(room).any(|(a, b)| a & b != 0);
        meets(&self.first_hops) && meets(&self.last_hops)
    }

    /// Leg `j` (an offset among the coflow's legs, whose first is `legs[0]`) finished; pushes onto
    /// `gone` the resources the coflow no longer crosses.
    fn finish(&mut self, j: u32, legs: &[BlindLeg], gone: &mut Vec<ResourceId>) {
        let Some(&g) = self.group_of.get(j as usize) else { return };
        let flows = self.flows[j as usize];
        if g == u32::MAX || flows == 0 {
            return;
        }
        self.flows[j as usize] = 0;
        let route = &legs[j as usize].route;
        let hops = route.hops();
        let group = &mut self.groups[g as usize];
        self.runs[g as usize].1 -= 1;
        if group.two_hop {
            let i = self.receivers.binary_search(&hops[1]).expect("a receiver of the coflow") as u32;
            self.receiver_legs[i as usize] -= 1;
            if !group.live.is_empty() || !self.senders_to.is_empty() {
                let k = if group.live.is_empty() {
                    group.dist.binary_search(&i).expect("a receiver of the run")
                } else {
                    group.place(i)
                };
                let (a, b) = (group.first[k], group.first[k + 1]);
                if !(a..b).any(|m| self.flows[(group.start + m) as usize] > 0) {
                    if !group.live.is_empty() {
                        clear_bit(&mut group.live, i);
                    }
                    if !self.senders_to.is_empty() {
                        let n = self.first_hops.len();
                        clear_bit(&mut self.senders_to[i as usize * n..(i as usize + 1) * n], group.sender);
                    }
                }
            }
        } else if let Ok(pos) = group.legs.binary_search(&j) {
            group.legs.remove(pos);
        }
        for &r in hops {
            if Shape::decrement(&mut self.resources, r, flows) {
                gone.push(r);
                for set in [&mut self.first_hops, &mut self.last_hops] {
                    if (r as usize) < set.len() * 64 {
                        clear_bit(set, r);
                    }
                }
            }
        }
    }

    /// Takes `n` flows off resource `r`; returns whether none is left there.
    fn decrement(counts: &mut Vec<(ResourceId, u32)>, r: ResourceId, n: u32) -> bool {
        if let Ok(i) = counts.binary_search_by_key(&r, |&(x, _)| x) {
            counts[i].1 = counts[i].1.saturating_sub(n);
            if counts[i].1 == 0 {
                counts.remove(i);
                return true;
            }
        }
        false
    }
}

/// Where one pass hands out bandwidth: `avail[base + r]` on resource `r`, also taken out of
/// `mirror[r]` if given; `open` counts down the resources whose `avail` this fills.
pub(crate) struct Pool<'a> {
    /// Each resource's capacity.
    pub(crate) cap: &'a [f64],
    /// What is left to hand out, resource `r`'s at `base + r`.
    pub(crate) avail: &'a mut [f64],
    pub(crate) base: usize,
    /// If given, per resource, what else the gifts are taken out of.
    pub(crate) mirror: Option<&'a mut [f64]>,
    /// Counted down as resources fill.
    pub(crate) open: &'a mut usize,
    /// If given, the resources with room in `avail` as a bit set (exactly those, with a word for
    /// every resource), a bit cleared as its resource fills.
    pub(crate) room: Option<&'a mut [u64]>,
}

impl Pool<'_> {
    /// What resource `r` has left to hand out: zero once it is full.
    pub(crate) fn room(&self, r: ResourceId) -> f64 {
        let x = self.avail[self.base + r as usize];
        if x <= self.cap[r as usize] * FULL { 0.0 } else { x }
    }

    /// Takes `x` out of resource `r`, counting it out (and clearing its bit) if that fills it.
    pub(crate) fn take(&mut self, r: ResourceId, x: f64) {
        let full = self.cap[r as usize] * FULL;
        let slot = &mut self.avail[self.base + r as usize];
        let before = *slot;
        *slot = (before - x).max(0.0);
        if before > full && *slot <= full {
            *self.open = self.open.saturating_sub(1);
            if let Some(room) = self.room.as_deref_mut() {
                clear_bit(room, r);
            }
        }
        if let Some(m) = self.mirror.as_deref_mut() {
            m[r as usize] = (m[r as usize] - x).max(0.0);
        }
    }
}

/// What a first pass left of each resource, served to coflows one after another as [`serve`]
/// serves them, until every resource some coflow uses is full: the second pass of `aalo` and of
/// `saath`, so that no port idles while a flow through it could send.
pub(crate) struct Leftover<'a> {
    cap: &'a [f64],
    left: &'a mut [f64],
    /// The resources with room in `left`, as a bit set.
    room: &'a mut Vec<u64>,
    /// How many resources some coflow uses still have room.
    open: usize,
}

impl<'a> Leftover<'a> {
    /// `left` of each resource of capacities `cap`, where `used(r)` says whether some coflow uses
    /// resource `r`; `room` is scratch.
    pub(crate) fn new(
        cap: &'a [f64],
        left: &'a mut [f64],
        used: impl Fn(usize) -> bool,
        room: &'a mut Vec<u64>,
    ) -> Self {
        let open = (0..cap.len()).filter(|&r| used(r) && left[r] > cap[r] * FULL).count();
        fill_bits(room, cap.len(), |r| left[r] > cap[r] * FULL);
        Leftover { cap, left, room, open }
    }

    /// Whether a resource some coflow uses still has room.
    pub(crate) fn any(&self) -> bool {
        self.open > 0
    }

    /// Serves coflow `c` from what is left; returns the bytes per second it gave. `scratch` as
    /// for [`serve`].
    pub(crate) fn serve(
        &mut self,
        c: &BlindCoflow,
        shape: &Shape,
        legs: &[BlindLeg],
        out: &mut BlindAllocation,
        scratch: &mut Vec<u64>,
    ) -> f64 {
        if !shape.may_have_room(self.room) {
            return 0.0;
        }
        let mut pool = Pool {
            cap: self.cap,
            avail: self.left,
            base: 0,
            mirror: None,
            open: &mut self.open,
            room: Some(self.room),
        };
        serve(c, shape, legs, out, &mut pool, scratch)
    }
}

/// Gives leg `l` as much as the pool has on every resource of its route; returns it.
pub(crate) fn serve_leg(l: usize, legs: &[BlindLeg], out: &mut BlindAllocation, pool: &mut Pool<'_>) -> f64 {
    let leg = &legs[l];
    if leg.active_flows == 0 {
        return 0.0;
    }
    let room = leg.route.hops().iter().map(|&r| pool.room(r)).fold(f64::INFINITY, f64::min);
    if !(room > 0.0 && room.is_finite()) {
        return 0.0;
    }
    if out.leg_rate[l] == 0.0 {
        out.served.push(l);
    }
    out.leg_rate[l] += room / leg.active_flows as f64;
    for &r in leg.route.hops() {
        pool.take(r, room);
    }
    room
}

/// [`serve_leg`] for a leg with `flows` active flows from `sender` to `receiver` only.
fn serve_two(
    l: usize,
    flows: u32,
    sender: ResourceId,
    receiver: ResourceId,
    out: &mut BlindAllocation,
    pool: &mut Pool<'_>,
) -> f64 {
    let room = f64::INFINITY.min(pool.room(sender)).min(pool.room(receiver));
    if !(room > 0.0 && room.is_finite()) {
        return 0.0;
    }
    if out.leg_rate[l] == 0.0 {
        out.served.push(l);
    }
    out.leg_rate[l] += room / flows as f64;
    pool.take(sender, room);
    pool.take(receiver, room);
    room
}

/// Hands out the pool to each active leg of `c` in turn, sender by sender and in route order, as
/// much as every resource of its route allows; a sender with no room is skipped whole. Returns the
/// bytes per second given to the coflow. `open` is scratch.
///
/// A wide coflow has many legs per sender and most of its receivers are often full. A leg whose
/// receiver is full gets nothing, and a full resource stays full for the rest of the pass, so when
/// a sender's legs all cross two resources (sorted by the second), only its legs towards the
/// coflow's receivers that still have room are visited: those receivers are a bit set, taken
/// out as they fill, and a sender's receivers are walked, or, when the sender sends to many,
/// met with it word by word. The same legs get the same rates in the same order as a scan of
/// every leg.
pub(crate) fn serve(
    c: &BlindCoflow,
    shape: &Shape,
    legs: &[BlindLeg],
    out: &mut BlindAllocation,
    pool: &mut Pool<'_>,
    open: &mut Vec<u64>,
) -> f64 {
    let mut run = Serving { c, shape, legs, given: 0.0, open_known: false, open_count: 0 };
    // With the pool's resources with room as a bit set and one run per sender (runs in order of
    // senders), only the runs of senders with room are visited, in the same order.
    if shape.sender_ordered
        && let Some(words) = pool.room.as_deref().map(|room| room.len().min(shape.first_hops.len()))
    {
        // With the senders to each receiver at hand, a two-resource run is visited only if it
        // has an active leg to a receiver still open (one with room when the pass found the
        // receivers, not yet found full since): the others would be given nothing.
        let transposed = !shape.senders_to.is_empty();
        if transposed {
            run.find_open(pool, open);
        }
        for w in 0..words {
            // Room only shrinks while serving: a sender without it at the start of its word gets
            // nothing, and one visited is asked again.
            let mut x = shape.first_hops[w] & pool.room.as_deref().map_or(0, |room| room[w]);
            if transposed && x != 0 {
                x &= shape.senders_to_open(w, open);
            }
            while x != 0 {
                let b = x.trailing_zeros();
                x &= x - 1;
                let g = shape.run_at[w * 64 + b as usize];
                if g != u32::MAX && !run.visit(g as usize, out, pool, open) {
                    return run.given;
                }
            }
        }
        return run.given;
    }
    for g in 0..shape.runs.len() {
        if !run.visit(g, out, pool, open) {
            break;
        }
    }
    run.given
}

/// One pass of [`serve`] over a coflow's runs.
struct Serving<'a> {
    c: &'a BlindCoflow,
    shape: &'a Shape,
    legs: &'a [BlindLeg],
    given: f64,
    open_known: bool,
    open_count: usize,
}

impl Serving<'_> {
    /// Finds, once a pass, the coflow's receivers with an active two-resource leg and room, as a
    /// bit set `open` over its receivers.
    fn find_open(&mut self, pool: &Pool<'_>, open: &mut Vec<u64>) {
        if self.open_known {
            return;
        }
        let (receivers, legs) = (&self.shape.receivers, &self.shape.receiver_legs);
        match pool.room.as_deref() {
            Some(room) => fill_bits(open, receivers.len(), |i| legs[i] > 0 && bit(room, receivers[i])),
            None => fill_bits(open, receivers.len(), |i| legs[i] > 0 && pool.room(receivers[i]) > 0.0),
        }
        self.open_count = open.iter().map(|w| w.count_ones() as usize).sum();
        self.open_known = true;
    }

    /// Serves run `g`; false when no later run can be given anything.
    fn visit(&mut self, g: usize, out: &mut BlindAllocation, pool: &mut Pool<'_>, open: &mut Vec<u64>) -> bool {
        let (c, shape, legs) = (self.c, self.shape, self.legs);
        let (sender, active) = shape.runs[g];
        if active == 0 || pool.room(sender) == 0.0 {
            return true;
        }
        let group = &shape.groups[g];
        if !group.two_hop {
            for &j in &group.legs {
                if pool.room(sender) == 0.0 {
                    break;
                }
                self.given += serve_leg(c.legs.start + j as usize, legs, out, pool);
            }
            return true;
        }
        self.find_open(pool, open);
        // Every receiver full, and only two-resource runs left: nothing more to give.
        if self.open_count == 0 {
            return g < shape.last_multi;
        }
        let base = c.legs.start + group.start as usize;
        let (given, open_count) = (&mut self.given, &mut self.open_count);
        // The legs of the run to receiver `i`, its `k`-th: served in turn; false once the sender
        // is full.
        let mut visit = |i: u32, k: usize, open: &mut Vec<u64>, pool: &mut Pool<'_>| {
            let r = shape.receivers[i as usize];
            if pool.room(r) > 0.0 {
                for m in group.first[k]..group.first[k + 1] {
                    let flows = shape.flows[(group.start + m) as usize];
                    if flows > 0 {
                        *given += serve_two(base + m as usize, flows, sender, r, out, pool);
                    }
                }
                if pool.room(r) > 0.0 {
                    return pool.room(sender) > 0.0;
                }
            }
            clear_bit(open, i);
            *open_count -= 1;
            pool.room(sender) > 0.0
        };
        if group.live.is_empty() {
            for (k, &i) in group.dist.iter().enumerate() {
                if bit(open, i) && !visit(i, k, open, pool) {
                    break;
                }
            }
        } else {
            'words: for w in 0..group.live.len() {
                let mut x = group.live[w] & open[w];
                while x != 0 {
                    let b = x.trailing_zeros();
                    x &= x - 1;
                    let i = w as u32 * 64 + b;
                    let k = group.place(i);
                    if !visit(i, k, open, pool) {
                        break 'words;
                    }
                }
            }
        }
        true
    }
}

/// The shapes of the coflows of a blind policy's input, one per coflow, kept from one decision to
/// the next: all built anew when the input takes everything as new ([`BlindInput::everything`]);
/// otherwise the legs that finished leave their coflow's shape, and a coflow seen for the first
/// time gets its own.
#[derive(Debug, Default)]
pub(crate) struct Shapes {
    of: BTreeMap<CoflowId, Shape>,
    /// Scratch for [`Shape::of`]: one count per resource, all zero between uses.
    count: Vec<u32>,
    /// Scratch: the resources a finished leg took its coflow off.
    gone: Vec<ResourceId>,
}

impl Shapes {
    /// Brings the shapes up to `input`: `off(id, resources)` hears of each finished leg that took
    /// its coflow off some resources (its last active flow there), with those resources. The
    /// coflows no longer in the input keep their shapes until [`Shapes::retain`] forgets them.
    pub(crate) fn update(&mut self, input: &BlindInput<'_>, mut off: impl FnMut(CoflowId, &[ResourceId])) {
        self.count.resize(input.fabric.capacities().len(), 0);
        if input.everything {
            self.of.clear();
        } else {
            for &(id, j, l) in input.legs_finished {
                if let Some(shape) = self.of.get_mut(&id) {
                    self.gone.clear();
                    shape.finish(j, &input.legs[l - j as usize..], &mut self.gone);
                    if !self.gone.is_empty() {
                        off(id, &self.gone);
                    }
                }
            }
        }
        for c in input.coflows {
            self.of.entry(c.id).or_insert_with(|| Shape::of(c, input.legs, &mut self.count));
        }
    }

    /// How many coflows have a shape.
    pub(crate) fn len(&self) -> usize {
        self.of.len()
    }

    /// Forgets the coflows not in `present`, so that one coming back under the same id is taken
    /// whole.
    pub(crate) fn retain(&mut self, present: &BTreeSet<CoflowId>) {
        self.of.retain(|id, _| present.contains(id));
    }

    /// Forgets a coflow.
    pub(crate) fn remove(&mut self, id: CoflowId) {
        self.of.remove(&id);
    }
}

impl std::ops::Index<&CoflowId> for Shapes {
    type Output = Shape;

    /// The shape of a coflow of the input [`Shapes::update`] last saw.
    fn index(&self, id: &CoflowId) -> &Shape {
        &self.of[id]
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use coflow_core::Nanos;

    /// A coflow of `legs` (sender, second resource or none, third or none, flows), sorted by route
    /// as the drivers sort them, over 400 resources of capacity 100.
    fn coflow(spec: &[(u32, Option<u32>, Option<u32>, u32)]) -> (BlindCoflow, Vec<BlindLeg>) {
        let mut legs: Vec<BlindLeg> = spec
            .iter()
            .map(|&(s, r, t, active_flows)| {
                let hops: Vec<ResourceId> = std::iter::once(s).chain(r).chain(r.and(t)).collect();
                BlindLeg { route: crate::fabric::Route::new(&hops), active_flows }
            })
            .collect();
        legs.sort_by(|a, b| a.route.hops().cmp(b.route.hops()));
        (blind_coflow(0, 0..legs.len(), &legs), legs)
    }

    /// `serve` on `shape`, and a scan that offers every leg of the coflow in turn, from the same
    /// pool: the same rates, in the same order, to the bit.
    fn serve_is_a_scan(c: &BlindCoflow, shape: &Shape, legs: &[BlindLeg], avail: &[f64]) {
        let cap = vec![100.0; avail.len()];
        // Scanned, served, and served with the resources with room as a bit set (as both of
        // `aalo`'s passes and `philae` serve), which must end as the resources with room.
        let with_room = |avail: &[f64]| {
            let mut room = Vec::new();
            fill_bits(&mut room, avail.len(), |r| avail[r] > cap[r] * FULL);
            room
        };
        let run = |fast: bool, with_set: bool| {
            let (mut avail, mut left, mut open) = (avail.to_vec(), avail.to_vec(), usize::MAX);
            let mut set = with_room(&avail);
            let mut out = BlindAllocation { leg_rate: vec![0.0; legs.len()], ..BlindAllocation::default() };
            let room = with_set.then_some(&mut set[..]);
            let mut pool =
                Pool { cap: &cap, avail: &mut avail, base: 0, mirror: Some(&mut left), open: &mut open, room };
            let given = if fast {
                serve(c, shape, legs, &mut out, &mut pool, &mut Vec::new())
            } else {
                c.legs.clone().map(|l| serve_leg(l, legs, &mut out, &mut pool)).sum()
            };
            if with_set {
                assert_eq!(set, with_room(&avail), "the bit set follows the resources with room");
            }
            let bits = |xs: &[f64]| xs.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            (given.to_bits(), bits(&out.leg_rate), out.served, bits(&avail), bits(&left))
        };
        let scan = run(false, false);
        assert_eq!(run(true, false), scan);
        assert_eq!(run(true, true), scan);
    }

    proptest::proptest! {
        /// Senders with many receivers (more than a word of them) and with few, several legs to one
        /// receiver, finished legs, three-resource routes, second resources that are also senders
        /// (as on a wide area), and ports full, nearly full or free: `serve` gives what a scan of
        /// every leg gives, before and after legs finish (the shape kept, and rebuilt).
        #[test]
        fn serving_a_coflow_equals_a_scan_of_its_legs(
            spec in proptest::collection::vec(
                (0u32..6, proptest::option::weighted(0.97, 3u32..400), proptest::option::weighted(0.05, 3u32..400), 0u32..4),
                1..600,
            ),
            avail in proptest::collection::vec(
                proptest::prop_oneof![proptest::strategy::Just(0.0), 0.0..5.0, 5.0..100.0],
                400,
            ),
            finish in proptest::collection::vec(proptest::bool::ANY, 600),
        ) {
            let (c, mut legs) = coflow(&spec);
            let mut count = vec![0; 400];
            let mut shape = Shape::of(&c, &legs, &mut count);
            serve_is_a_scan(&c, &shape, &legs, &avail);
            for (j, &done) in finish.iter().enumerate().take(legs.len()) {
                if done && legs[j].active_flows > 0 {
                    legs[j].active_flows = 0;
                    shape.finish(j as u32, &legs, &mut Vec::new());
                }
            }
            serve_is_a_scan(&c, &shape, &legs, &avail);
            let fresh = Shape::of(&c, &legs, &mut count);
            proptest::prop_assert_eq!(&shape.resources, &fresh.resources);
            serve_is_a_scan(&c, &fresh, &legs, &avail);
        }
    }

    /// A blind input at time zero with these coflows and legs, told which legs finished.
    pub(crate) fn input<'a>(
        fabric: &'a crate::fabric::Fabric,
        coflows: &'a [BlindCoflow],
        legs: &'a [BlindLeg],
        everything: bool,
        legs_finished: &'a [(CoflowId, u32, usize)],
    ) -> BlindInput<'a> {
        BlindInput {
            now: Nanos::ZERO,
            fabric,
            coflows,
            legs,
            next_report: Nanos::ZERO,
            everything,
            legs_finished,
            flows_finished: &[],
        }
    }

    /// Coflow `id` with `legs` of `all`, each with its flows active.
    pub(crate) fn blind_coflow(id: u64, legs: std::ops::Range<usize>, all: &[BlindLeg]) -> BlindCoflow {
        let flows = all[legs.clone()].iter().map(|l| l.active_flows).sum();
        BlindCoflow {
            id: CoflowId(id),
            arrival: Nanos::ZERO,
            weight: 1.0,
            sent: 0.0,
            job: CoflowId(id),
            job_sent: 0.0,
            width: flows,
            pending: 0,
            active_flows: flows,
            legs,
        }
    }

    /// The legs of one flow each from machine `a` to machine `b`, for each `(a, b, flows)`, on a big
    /// switch of 4 machines (ingress ports 0 to 3, egress 4 to 7).
    pub(crate) fn switch_legs(fabric: &crate::fabric::Fabric, legs: &[(u32, u32, u32)]) -> Vec<BlindLeg> {
        let route = |a, b| fabric.route(coflow_core::MachineId(a), coflow_core::MachineId(b));
        legs.iter().map(|&(a, b, active_flows)| BlindLeg { route: route(a, b), active_flows }).collect()
    }

    #[test]
    fn shapes_follow_finished_legs_and_forget_coflows_that_left() {
        // Coflow 7 sends one flow from machine 0 to 1, two from 0 to 2 and one from 3 to 2.
        let fabric = crate::fabric::Fabric::big_switch(4, coflow_core::Rate::from_bytes_per_sec(100.0));
        let mut legs = switch_legs(&fabric, &[(0, 1, 1), (0, 2, 2), (3, 2, 1)]);
        let coflows = [blind_coflow(7, 0..3, &legs)];
        let mut shapes = Shapes::default();
        let update = |shapes: &mut Shapes, coflows, legs: &[BlindLeg], everything, finished| {
            let mut heard = Vec::new();
            shapes.update(&input(&fabric, coflows, legs, everything, finished), |id, gone| {
                heard.push((id, gone.to_vec()))
            });
            heard
        };
        assert_eq!(update(&mut shapes, &coflows, &legs, true, &[]), []);
        assert_eq!(shapes[&CoflowId(7)].resources, [(0, 3), (3, 1), (5, 1), (6, 3)]);
        // The flow to machine 1 finishes: the coflow leaves machine 1's egress, not machine 0's
        // ingress, which its flows to machine 2 still cross.
        legs[0].active_flows = 0;
        let finished = [(CoflowId(7), 0, 0)];
        assert_eq!(update(&mut shapes, &coflows, &legs, false, &finished), [(CoflowId(7), vec![5])]);
        assert_eq!(shapes[&CoflowId(7)].resources, [(0, 2), (3, 1), (6, 3)]);
        // The flow from machine 3 finishes; told again of the first, nothing more is gone.
        legs[2].active_flows = 0;
        let finished = [(CoflowId(7), 0, 0), (CoflowId(7), 2, 2)];
        assert_eq!(update(&mut shapes, &coflows, &legs, false, &finished), [(CoflowId(7), vec![3])]);
        assert_eq!(shapes[&CoflowId(7)].resources, [(0, 2), (6, 2)]);
        // Taken as new, the shape is built from the legs as they are, whatever is listed: one of
        // the flows to machine 2 finished unlisted.
        legs[1].active_flows = 1;
        let listed = [(CoflowId(7), 1, 1)];
        assert_eq!(update(&mut shapes, &coflows, &legs, true, &listed), []);
        assert_eq!(shapes[&CoflowId(7)].resources, [(0, 1), (6, 1)]);
        // Coflow 8 comes between two decisions and gets its shape.
        legs.extend(switch_legs(&fabric, &[(1, 3, 1)]));
        let both = [coflows[0].clone(), blind_coflow(8, 3..4, &legs)];
        assert_eq!(update(&mut shapes, &both, &legs, false, &[]), []);
        assert_eq!((shapes.len(), &shapes[&CoflowId(8)].resources[..]), (2, &[(1, 1), (7, 1)][..]));
        // A coflow that left the input is kept until the policy forgets it.
        let none = input(&fabric, &both[1..], &legs, false, &[]);
        shapes.update(&none, |_, _| panic!("nothing finished"));
        assert_eq!(shapes.len(), 2);
        shapes.retain(&none.ids());
        assert_eq!(shapes.len(), 1);
    }
}
