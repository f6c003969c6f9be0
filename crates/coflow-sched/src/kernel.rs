//! `kernel`: the allocation steps the MADD family shares, whatever its order of coflows.
//!
//! - [`bottleneck`]: a coflow's effective bottleneck `Γ` (Varys Eq. 1).
//! - [`madd`]: Minimum-Allocation-for-Desired-Duration (Varys §5.3.3) on what earlier coflows
//!   left: one rate `σ = 1/Γ'` for every leg, so that all of a coflow's flows finish together.
//! - [`backfill`]: work conservation (Varys §5.3.4), single legs sped up by what their route has
//!   left, through the capped [`Allocation::give_leg`].
//! - [`FULL`]: when a resource counts as full.
//! - [`LiveLegs`]: each coflow's unfinished legs, kept from decision to decision, so that backfill
//!   visits those rather than every leg a long-lived coflow ever had.
//!
//! Policies order coflows; the kernel gives them bandwidth. `varys`, `deadline`, `karuna`,
//! `sincronia` and `mrtf` (with `siphon` on top) call it, and `priority`, `coflowsim` and `aalo`
//! share its notion of a full resource.

use coflow_core::{CoflowId, Nanos};

use crate::fabric::ResourceId;
use crate::state::{Allocation, CoflowState, Input, LegState};

/// A port with less than this fraction of its capacity left counts as full.
pub(crate) const FULL: f64 = 1e-9;

/// Varys Eq. 1: the time the most loaded resource needs for these bytes at these capacities.
pub fn bottleneck(loads: &[(ResourceId, f64)], capacity: &[f64]) -> f64 {
    loads.iter().map(|&(r, b)| b / capacity[r as usize]).fold(0.0, f64::max)
}

/// MADD on the leftover bandwidth `left`: the largest `σ = 1/Γ'` at which every flow can send
/// `remaining × σ`; takes that bandwidth out of `left` and returns `σ` (zero when a port is full).
pub(crate) fn madd(loads: &[(ResourceId, f64)], left: &mut [f64], capacity: &[f64]) -> f64 {
    let mut gamma: f64 = 0.0;
    for &(r, b) in loads {
        let l = left[r as usize];
        if l <= capacity[r as usize] * FULL {
            return 0.0;
        }
        gamma = gamma.max(b / l);
    }
    if gamma <= 0.0 {
        return 0.0;
    }
    let sigma = 1.0 / gamma;
    for &(r, b) in loads {
        left[r as usize] = (left[r as usize] - b * sigma).max(0.0);
    }
    sigma
}

/// A leg with fewer remaining bytes than this counts as finished for [`madd_on_loaded`]: one a
/// hair from its finish (the reference simulator's `ZERO`, in bytes).
pub(crate) const NO_BYTES: f64 = 1e-3;

/// [`madd`] as the reference simulator has it: only a full resource where the coflow still has
/// bytes (`loaded`, per resource, from its unfinished legs) blocks it; a resource where its legs
/// have all finished takes no part, whatever residue its load keeps.
pub(crate) fn madd_on_loaded(loads: &[(ResourceId, f64)], loaded: &[bool], left: &mut [f64], capacity: &[f64]) -> f64 {
    let mut gamma: f64 = 0.0;
    for &(r, b) in loads {
        if !loaded[r as usize] {
            continue;
        }
        let l = left[r as usize];
        if l <= capacity[r as usize] * FULL {
            return 0.0;
        }
        gamma = gamma.max(b / l);
    }
    if gamma <= 0.0 {
        return 0.0;
    }
    let sigma = 1.0 / gamma;
    for &(r, b) in loads {
        if loaded[r as usize] {
            left[r as usize] = (left[r as usize] - b * sigma).max(0.0);
        }
    }
    sigma
}

/// Backfill: speeds up single legs of coflow `k` of the input by as much as every resource on
/// their route has left, sender by sender; returns whether it sped any up.
///
/// Every leg it touches fills one of its resources, so a decision hands out at most as many
/// extras as the fabric has resources, and senders with a full port are skipped whole.
/// `live` ([`LiveLegs`]) lists at least every unfinished leg of the coflow in order, with the
/// second resource of each on two-hop routes: a leg whose receiver is full, or that finished, is
/// then passed over without reading it. `None` visits every leg. A finished leg or one with a
/// full resource gets nothing either way, so the result is the same.
pub(crate) fn backfill(
    input: &Input<'_>,
    k: usize,
    mut live: Option<&mut LiveLegs>,
    left: &mut [f64],
    capacity: &[f64],
    out: &mut Allocation,
) -> bool {
    let c = &input.coflows[k];
    // A coflow none of whose senders had room when the lists last looked has none now.
    if let Some(l) = live.as_deref_mut()
        && !l.sender_room(input, k, left, capacity)
    {
        return false;
    }
    // Senders whose port is full are skipped whole; with none left, neither is the list built.
    if input.senders_of(c).iter().all(|sd| left[sd.resource as usize] <= capacity[sd.resource as usize] * FULL) {
        return false;
    }
    let mut filled = NONE;
    match live {
        None => give(input, c, None, left, capacity, out, &mut filled),
        Some(l) => {
            let list = l.get_with_room(input, k, left, capacity);
            let any = give(input, c, list, left, capacity, out, &mut filled);
            if any {
                // Only the routes of the legs just given an extra lost bandwidth, and those of
                // their resources that are full now were filled by one of the gifts.
                l.filled(&filled, left);
            }
            any
        }
    }
}

/// [`backfill`]'s gifts to coflow `c`, over its listed legs or (`None`) all of them; adds to
/// `filled` the resources a gift filled.
fn give(
    input: &Input<'_>,
    c: &CoflowState,
    live: Option<LiveCoflow<'_>>,
    left: &mut [f64],
    capacity: &[f64],
    out: &mut Allocation,
    filled: &mut Mask,
) -> bool {
    let mut any = false;
    // The resources with room, as far as this coflow's gifts have told: cleared as they fill.
    let mut open = live.map_or(NONE, |l| *l.open);
    for (i, sender) in input.senders_of(c).iter().enumerate() {
        let first = sender.resource as usize;
        if left[first] <= capacity[first] * FULL {
            continue;
        }
        any |= match live {
            None => backfill_sender(input, c, first, sender.legs.clone(), left, capacity, out, filled),
            Some(live) => {
                let base = c.legs.start;
                let (offsets, tails) = live.sender(i);
                if tails.is_empty() {
                    let legs = offsets.iter().map(|&o| base + o as usize);
                    backfill_sender(input, c, first, legs, left, capacity, out, filled)
                } else if let Some(receivers) = live.receivers(i) {
                    let listed = (offsets, tails);
                    give_to_open(input, c, first, listed, &receivers, &mut open, left, capacity, out, filled)
                } else {
                    let mut any = false;
                    for (&o, &t) in offsets.iter().zip(tails) {
                        // A finished leg (`DEAD`) or a full receiver: nothing to give.
                        if t == DEAD || left[t as usize] <= capacity[t as usize] * FULL {
                            continue;
                        }
                        if left[first] <= capacity[first] * FULL {
                            break;
                        }
                        any |= give_one(input, c, base + o as usize, left, capacity, out, filled);
                    }
                    any
                }
            }
        };
    }
    any
}

/// [`give`] on one sender of `c` (port `first`) with many listed legs: only the legs whose
/// receiver is in `mask` (the sender's receivers) and in `open` (a superset of the resources with
/// room, from which it clears those it finds full) are visited, receiver by receiver in
/// increasing order, which is the legs' order since they are sorted by route ([`Live::build`]
/// checks it). A receiver with room and an unfinished leg gets a gift that fills it or the
/// sender, so the visits cost about what the gifts do. `(offsets, tails)` are the sender's
/// listed legs and their receivers (a leg marked [`DEAD`] finished), `receivers` its
/// [`Receivers`], `open` a copy of [`LiveLegs`]'s set, sharpened as receivers are found full.
///
/// It visits, in the same order, exactly the legs the plain scan gives to: those it passes over
/// have a full receiver or finished, and the scan passes over them too.
#[allow(clippy::too_many_arguments)]
fn give_to_open(
    input: &Input<'_>,
    c: &CoflowState,
    first: usize,
    (offsets, tails): (&[u32], &[ResourceId]),
    receivers: &Receivers<'_>,
    open: &mut Mask,
    left: &mut [f64],
    capacity: &[f64],
    out: &mut Allocation,
    filled: &mut Mask,
) -> bool {
    let base = c.legs.start;
    let mut any = false;
    let listed = receivers.listed;
    // Only the words that hold resources (the lists are kept for at most 512).
    let words = capacity.len().div_ceil(64).min(WORDS);
    for (w, (&m, o)) in receivers.live[..words].iter().zip(&mut open[..words]).enumerate() {
        let mut bits = m & *o;
        while bits != 0 {
            let b = bits & bits.wrapping_neg();
            bits ^= b;
            let r = (w * 64) as ResourceId + b.trailing_zeros();
            if left[r as usize] <= capacity[r as usize] * FULL {
                *o &= !b;
                continue;
            }
            if let Some(set) = receivers.each_once {
                // One listed leg to `r`, and it is the one the scan below would find. Its
                // receiver being in `live` says it was not reported finished; were it, it would
                // be inactive and get nothing, and a full sender gives nothing to any other.
                if left[first] <= capacity[first] * FULL {
                    return any;
                }
                let j = set.rank(w, b);
                any |= give_one(input, c, base + offsets[j] as usize, left, capacity, out, filled);
                continue;
            }
            for j in listed.partition_point(|&x| x < r)..listed.len() {
                if listed[j] != r || left[r as usize] <= capacity[r as usize] * FULL {
                    break;
                }
                if tails[j] == DEAD {
                    continue;
                }
                if left[first] <= capacity[first] * FULL {
                    return any;
                }
                any |= give_one(input, c, base + offsets[j] as usize, left, capacity, out, filled);
            }
        }
    }
    any
}

/// [`backfill`] on the given legs of one sender of `c`, whose port is resource `first`, in
/// order, until that port is full.
#[allow(clippy::too_many_arguments)]
fn backfill_sender(
    input: &Input<'_>,
    c: &CoflowState,
    first: usize,
    legs: impl Iterator<Item = usize>,
    left: &mut [f64],
    capacity: &[f64],
    out: &mut Allocation,
    filled: &mut Mask,
) -> bool {
    let mut any = false;
    for l in legs {
        if left[first] <= capacity[first] * FULL {
            break;
        }
        any |= give_one(input, c, l, left, capacity, out, filled);
    }
    any
}

/// [`backfill_sender`]'s gift to leg `l` of `c`: as much as every resource on its route has
/// left, nothing if it finished or one of them is full; whether it gave. The resources it fills
/// join `filled`.
#[inline(always)]
fn give_one(
    input: &Input<'_>,
    c: &CoflowState,
    l: usize,
    left: &mut [f64],
    capacity: &[f64],
    out: &mut Allocation,
    filled: &mut Mask,
) -> bool {
    let leg = &input.legs[l];
    if !leg.is_active() {
        return false;
    }
    let mut room = f64::INFINITY;
    for &r in leg.route.hops() {
        room = room.min(left[r as usize]);
        if left[r as usize] <= capacity[r as usize] * FULL {
            room = 0.0;
        }
    }
    let remaining = leg.remaining(c);
    if room > 0.0 && room.is_finite() && remaining > 0.0 {
        out.give_leg(l, room, remaining);
        for &r in leg.route.hops() {
            left[r as usize] = (left[r as usize] - room).max(0.0);
            if left[r as usize] <= capacity[r as usize] * FULL {
                let (w, b) = bit(r);
                filled[w] |= b;
            }
        }
        return true;
    }
    false
}

/// Where the largest stored with [`LiveLegs::set_memo`] was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Witness {
    /// At the leg with this offset among the coflow's legs; `u32::MAX` (no leg) for a largest
    /// of zero, loads' or legs', which stays the largest whatever finishes.
    Leg(u32),
    /// At this resource.
    Resource(ResourceId),
}

/// Marks a finished leg in [`Live::tails`].
const DEAD: ResourceId = ResourceId::MAX;

/// Words of a [`Mask`].
const WORDS: usize = 8;

/// Up to this many senders or resources, a coflow's ports are read rather than its masks: looking
/// at which resources have room again, after every coflow that took bandwidth, would cost more.
const FEW: usize = 8;

/// From this many listed legs on, a sender's legs are found from its receivers with room
/// ([`give_to_open`]) rather than scanned.
const MANY: usize = 16;

/// A set of resources as bits, resource `r` at bit `r mod 512`: exact on fabrics of at most 512
/// resources (the Facebook trace's big switch has 300), a superset beyond.
type Mask = [u64; WORDS];

/// The word and bit of resource `r` in a [`Mask`].
fn bit(r: ResourceId) -> (usize, u64) {
    let r = r as usize % (64 * WORDS);
    (r / 64, 1 << (r % 64))
}

/// The empty set.
const NONE: Mask = [0; WORDS];

/// Whether two masks share a bit.
fn meet(a: &Mask, b: &Mask) -> bool {
    a.iter().zip(b).any(|(x, y)| x & y != 0)
}

/// The unfinished legs of every coflow of the input, kept by a policy from one decision to the
/// next, for [`backfill`].
///
/// A long-lived coflow keeps every leg it ever had in the input, and backfill, finishing single
/// legs, leaves most of them finished: on the Facebook trace four of every five legs that
/// `sincronia`'s backfill visited had finished, and most of the rest had a full receiver. A
/// coflow's list is built when it arrives, sender by sender, with each leg's receiver (its
/// route's second resource) when every route has two; the legs the driver reports finished
/// ([`Changes::legs_finished`](crate::state::Changes::legs_finished)) are marked, and the list is
/// rebuilt once half the flows it was built over have finished. A finished leg never comes back,
/// so the list always holds every unfinished leg. [`Changes::everything`] rebuilds every list,
/// since the driver may have rebuilt the input. A list is built the first time it is asked for
/// ([`LiveLegs::get`]): with 10,000 coflows present, most never reach backfill with a sender
/// that has room.
///
/// Per coflow it also keeps, for the decision's passes over every coflow, what lets them pass over
/// a coflow without reading its ports:
/// - the set of its senders and of all its resources, as [`Mask`]s, against the set of resources
///   that had room when last looked ([`LiveLegs::sender_room`], [`LiveLegs::has_full`]). Within
///   a decision room only shrinks (MADD and backfill only take bandwidth out of `left`), so a
///   resource full then is full now, and a resource with room now had room then: both tests
///   are sound whatever was taken since, and exact when the set is kept up with what was
///   taken: looked at once per decision, then told where bandwidth went ([`LiveLegs::took`]:
///   MADD's resources, the routes of the legs backfill sped up);
/// - the largest of the coflow's scaled loads or of a value of each leg that falls as its bytes
///   do ([`LiveLegs::memo`]), with where it was found ([`Witness`]), kept until the driver may
///   have changed it: legs were sent apart from the coflow's rate
///   ([`Changes::reshaped`](crate::state::Changes::reshaped)), or the leg found, or a leg
///   crossing the resource found, finished (in a coflow not reshaped a finished leg's value
///   falls to zero and the loads on its route only fall, so the largest stays where it was
///   found);
/// - its place in the policy's previous order ([`LiveLegs::rank`]), to sort from.
///
/// [`Changes::everything`]: crate::state::Changes::everything
#[derive(Debug, Default)]
pub(crate) struct LiveLegs {
    /// Per coflow of the input, in its order (arrival, then id).
    coflows: Vec<Live>,
    /// `(id, index in coflows)`, sorted by id, for the finished legs.
    by_id: Vec<(CoflowId, u32)>,
    /// The resources that had room when last looked at in this decision.
    open: Mask,
    /// Whether `open` must be looked at again: at the start of a decision and after bandwidth
    /// was taken.
    stale: bool,
}

#[derive(Debug)]
struct Live {
    arrival: Nanos,
    id: CoflowId,
    /// Offsets among the coflow's legs of at least every unfinished one, in order.
    offsets: Vec<u32>,
    /// With `offsets` when every route has two resources (else empty): each leg's second
    /// resource, or [`DEAD`] once the leg finished.
    tails: Vec<ResourceId>,
    /// With `offsets`, when every route has two resources, each sender's legs are sorted by
    /// receiver and the fabric has at most 512 resources (else empty): each leg's receiver as
    /// listed (never [`DEAD`]), and per sender the set of the receivers of its listed legs that
    /// have not finished (a receiver leaves it once every listed leg to it is [`DEAD`]).
    receivers: Vec<ResourceId>,
    receiver_masks: Vec<Mask>,
    /// With `receiver_masks`, when no sender has two listed legs to one receiver: per sender the
    /// set of its listed receivers as built, whose bits below a receiver count the legs before
    /// its leg.
    receiver_sets: Vec<Ranked>,
    /// Where each of the coflow's senders starts in `offsets`, and where the last one ends.
    bounds: Vec<u32>,
    /// The coflow's unfinished flows when the list was last built.
    flows: u32,
    /// Whether the list was built at all.
    built: bool,
    /// Its senders, and every resource it crosses (once `masked`).
    senders: Mask,
    resources: Mask,
    masked: bool,
    /// [`LiveLegs::memo`].
    memo: Option<(f64, Witness)>,
    /// [`LiveLegs::leg_largest`]: a tree of maxima over a value of each of the coflow's legs (by
    /// offset, leaf `o` at `n + o`, node `i` the larger of `2i` and `2i + 1`, so node 1 is the
    /// largest), empty until asked for; and the offsets of the legs whose value may have moved
    /// since their leaf was written.
    tops: Vec<f64>,
    dirty: Vec<u32>,
    /// [`LiveLegs::rank`].
    rank: u32,
}

impl Live {
    /// A list not built yet.
    fn of(c: &CoflowState) -> Live {
        Live {
            arrival: c.arrival,
            id: c.id,
            offsets: Vec::new(),
            tails: Vec::new(),
            receivers: Vec::new(),
            receiver_masks: Vec::new(),
            receiver_sets: Vec::new(),
            bounds: Vec::new(),
            flows: 0,
            built: false,
            senders: [0; WORDS],
            resources: [0; WORDS],
            masked: false,
            memo: None,
            tops: Vec::new(),
            dirty: Vec::new(),
            rank: u32::MAX,
        }
    }

    /// Sets the masks of the coflow's senders and resources.
    fn mask(&mut self, input: &Input<'_>, c: &CoflowState) {
        for sd in input.senders_of(c) {
            let (w, b) = bit(sd.resource);
            self.senders[w] |= b;
        }
        for &(r, _) in &input.loads[c.loads.clone()] {
            let (w, b) = bit(r);
            self.resources[w] |= b;
        }
        self.masked = true;
    }

    /// Drops the receiver of listed leg `j`, just marked [`DEAD`], from its sender's set when no
    /// other listed leg of that sender goes there.
    fn forget_receiver(&mut self, j: usize) {
        if self.receiver_masks.is_empty() {
            return;
        }
        let i = self.bounds.partition_point(|&b| b as usize <= j) - 1;
        let (start, end) = (self.bounds[i] as usize, self.bounds[i + 1] as usize);
        let r = self.receivers[j];
        let from = start + self.receivers[start..end].partition_point(|&x| x < r);
        let to = from + self.receivers[from..end].partition_point(|&x| x == r);
        if self.tails[from..to].iter().all(|&t| t == DEAD) {
            let (w, b) = bit(r);
            self.receiver_masks[i][w] &= !b;
        }
    }

    /// The list as a [`LiveCoflow`], with its receivers and `open` (the set of resources with
    /// room) if given.
    fn list<'a>(&'a self, open: Option<&'a Mask>) -> LiveCoflow<'a> {
        let none = open.is_none();
        LiveCoflow {
            offsets: &self.offsets,
            tails: &self.tails,
            bounds: &self.bounds,
            receivers: if none { &[] } else { &self.receivers },
            receiver_masks: if none { &[] } else { &self.receiver_masks },
            receiver_sets: if none { &[] } else { &self.receiver_sets },
            open: open.unwrap_or(&NONE),
        }
    }

    /// Lists the coflow's unfinished legs sender by sender.
    fn build(&mut self, input: &Input<'_>, c: &CoflowState) {
        self.offsets.clear();
        self.tails.clear();
        self.bounds.clear();
        let mut two_hop = true;
        for sender in input.senders_of(c) {
            self.bounds.push(self.offsets.len() as u32);
            for l in sender.legs.clone() {
                let leg = &input.legs[l];
                if leg.is_active() {
                    self.offsets.push((l - c.legs.start) as u32);
                    match *leg.route.hops() {
                        [_, tail] if tail != DEAD => self.tails.push(tail),
                        _ => two_hop = false,
                    }
                }
            }
        }
        self.bounds.push(self.offsets.len() as u32);
        if !two_hop {
            self.tails.clear();
        }
        self.receivers.clear();
        self.receiver_masks.clear();
        self.receiver_sets.clear();
        let wide = self.bounds.windows(2).any(|b| (b[1] - b[0]) as usize >= MANY);
        if wide && !self.tails.is_empty() && input.fabric.capacities().len() <= 64 * WORDS {
            // Legs are sorted by route, so a sender's are by receiver; a driver that broke that
            // rule gets the plain scan.
            let sorted = self.bounds.windows(2).all(|b| self.tails[b[0] as usize..b[1] as usize].is_sorted());
            if sorted {
                self.receivers.extend_from_slice(&self.tails);
                for b in self.bounds.windows(2) {
                    let mut m: Mask = [0; WORDS];
                    for &r in &self.tails[b[0] as usize..b[1] as usize] {
                        let (w, x) = bit(r);
                        m[w] |= x;
                    }
                    self.receiver_masks.push(m);
                }
                let unique = self.bounds.windows(2).all(|b| {
                    let range = b[0] as usize..b[1] as usize;
                    self.tails[range].windows(2).all(|t| t[0] < t[1])
                });
                if unique {
                    self.receiver_sets.extend(self.receiver_masks.iter().map(Ranked::of));
                }
            }
        }
        self.flows = c.active_flows;
        self.built = true;
    }
}

/// One sender's receivers in a [`LiveCoflow`].
struct Receivers<'a> {
    /// Each listed leg's receiver, sorted.
    listed: &'a [ResourceId],
    /// The receivers of its unfinished listed legs (or more).
    live: &'a Mask,
    /// When no two listed legs go to one receiver, the set of `listed`.
    each_once: Option<&'a Ranked>,
}

/// A set of resources, with how many members the words before each word hold.
#[derive(Clone, Debug)]
struct Ranked {
    set: Mask,
    before: [u32; WORDS],
}

impl Ranked {
    /// `set`, with its counts.
    fn of(set: &Mask) -> Ranked {
        let mut before = [0; WORDS];
        for w in 1..WORDS {
            before[w] = before[w - 1] + set[w - 1].count_ones();
        }
        Ranked { set: *set, before }
    }

    /// The rank of its member at bit `b` of word `w`: where a receiver's one leg is among the
    /// listed ones, when [`Receivers::each_once`] is this set.
    fn rank(&self, w: usize, b: u64) -> usize {
        (self.before[w] + (self.set[w] & (b - 1)).count_ones()) as usize
    }
}

/// One coflow's list in [`LiveLegs`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct LiveCoflow<'a> {
    offsets: &'a [u32],
    tails: &'a [ResourceId],
    bounds: &'a [u32],
    receivers: &'a [ResourceId],
    receiver_masks: &'a [Mask],
    receiver_sets: &'a [Ranked],
    /// A superset of the resources with room, when `receiver_masks` is not empty.
    open: &'a Mask,
}

impl<'a> LiveCoflow<'a> {
    /// The listed legs of `c` (every unfinished one, perhaps some finished), as indices into
    /// [`Input::legs`], in order.
    pub(crate) fn legs(&self, c: &CoflowState) -> impl Iterator<Item = usize> + 'a {
        let base = c.legs.start;
        self.offsets.iter().map(move |&o| base + o as usize)
    }

    /// The bytes `c` has left, summed over its legs in order as over all of them: a leg not
    /// listed has finished and adds exactly zero. `None` when no leg is listed.
    pub(crate) fn remaining(&self, input: &Input<'_>, c: &CoflowState) -> Option<f64> {
        if self.offsets.is_empty() {
            return None;
        }
        Some(self.legs(c).map(|l| input.legs[l].remaining(c)).sum())
    }

    /// The listed legs of the coflow's `i`-th sender, as offsets among its legs in order, and
    /// their receivers (empty unless every route has two resources).
    fn sender(&self, i: usize) -> (&'a [u32], &'a [ResourceId]) {
        let range = self.bounds[i] as usize..self.bounds[i + 1] as usize;
        let tails = if self.tails.is_empty() { &[][..] } else { &self.tails[range.clone()] };
        (&self.offsets[range], tails)
    }

    /// The `i`-th sender's listed receivers (sorted), the set of those with an unfinished leg,
    /// and the set of all of them when each has one leg, if kept, for [`give_to_open`] (for a
    /// sender with many listed legs).
    fn receivers(&self, i: usize) -> Option<Receivers<'a>> {
        let range = self.bounds[i] as usize..self.bounds[i + 1] as usize;
        if self.receiver_masks.is_empty() || range.len() < MANY {
            return None;
        }
        Some(Receivers {
            listed: &self.receivers[range],
            live: &self.receiver_masks[i],
            each_once: self.receiver_sets.get(i),
        })
    }
}

impl LiveLegs {
    /// Brings the lists up to `input`: drops the coflows that left, adds those that arrived,
    /// marks the legs that finished and rebuilds the lists of coflows that lost half their
    /// flows; rebuilds everything when the changes say so. Call it at every decision, before
    /// [`LiveLegs::of`].
    pub(crate) fn update(&mut self, input: &Input<'_>) {
        let changes = input.changes;
        if changes.everything {
            self.coflows.clear();
        }
        let same = self.coflows.len() == input.coflows.len()
            && self.coflows.iter().zip(input.coflows).all(|(l, c)| l.id == c.id);
        if !same && changes.arrived.is_empty() && !changes.everything {
            // Only departures: the lists of the coflows still in, kept in place. Should a coflow
            // of the input have no list, every list is started again.
            let mut next = input.coflows.iter().peekable();
            self.coflows.retain(|l| next.next_if(|c| c.id == l.id).is_some());
            if next.peek().is_some() {
                self.coflows.clear();
                self.coflows.extend(input.coflows.iter().map(Live::of));
            }
        } else if !same {
            // Both are in the input's order, (arrival, id), and the kept lists are a subsequence
            // of the input's coflows plus those that left: one merge.
            let mut old =
                std::mem::replace(&mut self.coflows, Vec::with_capacity(input.coflows.len())).into_iter().peekable();
            for c in input.coflows {
                while old.next_if(|l| (l.arrival, l.id) < (c.arrival, c.id)).is_some() {}
                self.coflows.push(old.next_if(|l| l.id == c.id).unwrap_or_else(|| Live::of(c)));
            }
        }
        if !same {
            self.by_id.clear();
            self.by_id.extend(self.coflows.iter().enumerate().map(|(k, l)| (l.id, k as u32)));
            self.by_id.sort_unstable();
        }
        self.stale = true;
        if !changes.everything {
            for &(id, offset) in &changes.legs_finished {
                let Ok(i) = self.by_id.binary_search_by(|&(x, _)| x.cmp(&id)) else { continue };
                let k = self.by_id[i].1 as usize;
                let live = &mut self.coflows[k];
                // The largest stays where it was found unless the finished leg is there.
                let kept = match live.memo {
                    Some((_, Witness::Leg(o))) => o != offset,
                    Some((_, Witness::Resource(r))) => input.coflows.get(k).is_some_and(|c| {
                        input.legs.get(c.legs.start + offset as usize).is_some_and(|l| !l.route.hops().contains(&r))
                    }),
                    None => false,
                };
                if !kept {
                    live.memo = None;
                }
                if !live.tops.is_empty() {
                    live.dirty.push(offset);
                }
                if let Ok(j) = live.offsets.binary_search(&offset)
                    && !live.tails.is_empty()
                {
                    live.tails[j] = DEAD;
                    live.forget_receiver(j);
                }
            }
            for id in &changes.reshaped {
                if let Ok(i) = self.by_id.binary_search_by(|(x, _)| x.cmp(id)) {
                    self.coflows[self.by_id[i].1 as usize].memo = None;
                }
            }
            // Reshaped coflows without their legs named: every value may have moved.
            let unnamed = changes.reshaped_legs.is_empty();
            for id in changes.reshaped.iter().filter(|_| unnamed) {
                if let Ok(i) = self.by_id.binary_search_by(|(x, _)| x.cmp(id)) {
                    let live = &mut self.coflows[self.by_id[i].1 as usize];
                    live.tops.clear();
                    live.dirty.clear();
                }
            }
            for &(id, offset) in &changes.reshaped_legs {
                let Ok(i) = self.by_id.binary_search_by(|&(x, _)| x.cmp(&id)) else { continue };
                let live = &mut self.coflows[self.by_id[i].1 as usize];
                if !live.tops.is_empty() {
                    live.dirty.push(offset);
                    // Marks past the legs' number cost more to replay than building again.
                    if live.dirty.len() > live.tops.len() / 2 {
                        live.tops.clear();
                        live.dirty.clear();
                    }
                }
            }
        }
        for (live, c) in self.coflows.iter_mut().zip(input.coflows) {
            if live.built && c.active_flows * 2 < live.flows {
                live.build(input, c);
            }
        }
    }

    /// Looks at which resources have room again if bandwidth was taken since it last did.
    fn look(&mut self, left: &[f64], capacity: &[f64]) {
        if self.stale {
            self.open = [0; WORDS];
            for (r, (&l, &c)) in left.iter().zip(capacity).enumerate() {
                if l > c * FULL {
                    let (w, b) = bit(r as ResourceId);
                    self.open[w] |= b;
                }
            }
            self.stale = false;
        }
    }

    /// How many resources have room in `left` (as for [`LiveLegs::sender_room`]), or more when
    /// bandwidth was taken without telling [`LiveLegs::took`] since the set was last looked at:
    /// never fewer, so that none counts as surely full while it has room.
    pub(crate) fn free(&mut self, left: &[f64], capacity: &[f64]) -> usize {
        if left.len() > 64 * WORDS {
            return left.iter().zip(capacity).filter(|&(l, c)| *l > c * FULL).count();
        }
        self.look(left, capacity);
        self.open.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// Whether any sender of `input.coflows[k]` may have room in `left`: `false` only when none
    /// has (always `true` for a coflow with a few senders). `left` must be the decision's one vector of bandwidth left, which only shrinks.
    pub(crate) fn sender_room(&mut self, input: &Input<'_>, k: usize, left: &[f64], capacity: &[f64]) -> bool {
        // A few senders are read as fast as the set is looked at again: say nothing.
        if input.coflows.get(k).is_none_or(|c| c.senders.len() <= FEW) {
            return true;
        }
        self.look(left, capacity);
        let Some(live) = self.coflows.get_mut(k) else { return true };
        if !live.masked {
            live.mask(input, &input.coflows[k]);
        }
        meet(&live.senders, &self.open)
    }

    /// Whether some resource of `input.coflows[k]` is surely full in `left` (then [`madd`] gives
    /// it nothing): `false` when none is, or when the coflow has a few resources or the fabric
    /// too many to tell.
    /// `left` as for [`LiveLegs::sender_room`].
    pub(crate) fn has_full(&mut self, input: &Input<'_>, k: usize, left: &[f64], capacity: &[f64]) -> bool {
        if left.len() > 64 * WORDS || input.coflows.get(k).is_none_or(|c| c.loads.len() <= FEW) {
            return false;
        }
        self.look(left, capacity);
        let Some(live) = self.coflows.get_mut(k) else { return false };
        if !live.masked {
            live.mask(input, &input.coflows[k]);
        }
        live.resources.iter().zip(&self.open).any(|(x, o)| x & !o != 0)
    }

    /// Says that this decision took bandwidth out of `left` at `resources` (and nowhere else)
    /// since [`LiveLegs::sender_room`] or [`LiveLegs::has_full`] last looked: those now full
    /// leave the set of resources with room, which stays as sharp as a look at every resource
    /// would make it. Bandwidth taken without telling leaves them exact, only less sharp: a
    /// resource leaves the set only when found full, so the set stays a superset of the
    /// resources with room.
    pub(crate) fn took(&mut self, resources: impl IntoIterator<Item = ResourceId>, left: &[f64], capacity: &[f64]) {
        if self.stale {
            return;
        }
        let mut full = NONE;
        for r in resources {
            if left[r as usize] <= capacity[r as usize] * FULL {
                let (w, b) = bit(r);
                full[w] |= b;
            }
        }
        self.filled(&full, left);
    }

    /// [`LiveLegs::took`] for bandwidth taken by gifts alone, told by the set `filled` of
    /// resources full in `left` that holds every full resource of their routes: those leave the
    /// set of resources with room, as `took` over the routes would have them leave it.
    fn filled(&mut self, filled: &Mask, left: &[f64]) {
        if self.stale {
            return;
        }
        if left.len() > 64 * WORDS {
            // A bit stands for several resources: only a look at all of them can clear it.
            self.stale = true;
            return;
        }
        for (o, f) in self.open.iter_mut().zip(filled) {
            *o &= !f;
        }
    }

    /// The largest the policy last stored for `input.coflows[k]` with [`LiveLegs::set_memo`], if
    /// it cannot have changed since: the driver did not list the coflow as reshaped, and no leg
    /// finished where the largest was found.
    pub(crate) fn memo(&self, k: usize) -> Option<f64> {
        self.coflows.get(k).and_then(|l| l.memo).map(|(v, _)| v)
    }

    /// Stores the largest of `input.coflows[k]`'s scaled loads (found at a resource) or of a
    /// value of each leg that only falls as its scaled bytes do (found at a leg, by its offset
    /// among the coflow's legs), for [`LiveLegs::memo`].
    pub(crate) fn set_memo(&mut self, k: usize, value: f64, at: Witness) {
        if let Some(l) = self.coflows.get_mut(k) {
            l.memo = Some((value, at));
        }
    }

    /// The largest of `value` over `input.coflows[k]`'s legs, and zero for none (equal to the bit
    /// to folding them with `f64::max` from zero). `value` must be non-negative, zero for a
    /// finished leg, and read nothing of a leg but its fixed fields and its scaled value (as
    /// `longest × scaled`): the values are kept between decisions, and only those of the legs
    /// [`Changes::reshaped_legs`](crate::state::Changes::reshaped_legs) or
    /// [`Changes::legs_finished`](crate::state::Changes::legs_finished) list are read again.
    /// The same `value` at every call for one coflow.
    pub(crate) fn leg_largest(&mut self, input: &Input<'_>, k: usize, value: impl Fn(&LegState) -> f64) -> f64 {
        let c = &input.coflows[k];
        let legs = input.legs_of(c);
        let n = legs.len();
        let Some(live) = self.coflows.get_mut(k) else {
            return legs.iter().map(value).fold(0.0, f64::max);
        };
        if n == 0 {
            return 0.0;
        }
        let tops = &mut live.tops;
        if tops.is_empty() {
            tops.resize(2 * n, 0.0);
            for (o, leg) in legs.iter().enumerate() {
                tops[n + o] = value(leg);
            }
            for i in (1..n).rev() {
                tops[i] = tops[2 * i].max(tops[2 * i + 1]);
            }
            live.dirty.clear();
        } else {
            for o in live.dirty.drain(..).map(|o| o as usize).filter(|&o| o < n) {
                let mut i = n + o;
                tops[i] = value(&legs[o]);
                while i > 1 {
                    i /= 2;
                    tops[i] = tops[2 * i].max(tops[2 * i + 1]);
                }
            }
        }
        // With one leg, its leaf is node 1.
        tops[1]
    }

    /// `input.coflows[k]`'s place in the order last stored with [`LiveLegs::set_rank`]
    /// (`u32::MAX` for none): a hint to sort from, never trusted for the result.
    pub(crate) fn rank(&self, k: usize) -> u32 {
        self.coflows.get(k).map_or(u32::MAX, |l| l.rank)
    }

    /// Stores `input.coflows[k]`'s place in the policy's order.
    pub(crate) fn set_rank(&mut self, k: usize, rank: u32) {
        if let Some(l) = self.coflows.get_mut(k) {
            l.rank = rank;
        }
    }

    /// The list of `input.coflows[k]`, built if it was not (after [`LiveLegs::update`] on that
    /// input).
    pub(crate) fn get(&mut self, input: &Input<'_>, k: usize) -> Option<LiveCoflow<'_>> {
        self.built(input, k)?;
        Some(self.coflows[k].list(None))
    }

    /// [`LiveLegs::get`], with the set of resources with room in `left` (the decision's one
    /// vector of bandwidth left, which only shrinks) when the list keeps its receivers.
    fn get_with_room(&mut self, input: &Input<'_>, k: usize, left: &[f64], capacity: &[f64]) -> Option<LiveCoflow<'_>> {
        if self.built(input, k)? {
            self.look(left, capacity);
        }
        Some(self.coflows[k].list(Some(&self.open)))
    }

    /// Builds `input.coflows[k]`'s list if it was not; whether it keeps its receivers.
    fn built(&mut self, input: &Input<'_>, k: usize) -> Option<bool> {
        let live = self.coflows.get_mut(k)?;
        if !live.built {
            live.build(input, &input.coflows[k]);
        }
        Some(!live.receiver_masks.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use coflow_core::{MachineId, Rate};
    use proptest::prelude::*;

    use super::*;
    use crate::fabric::Fabric;
    use crate::snapshot::{Snapshot, SnapshotCoflow, SnapshotFlow};
    use crate::state::Changes;

    /// Per coflow, its flows as (source, destination, size); whether each leg (by index, modulo
    /// 64) finishes between the two decisions; the fraction of each resource left before
    /// backfill, in quarters.
    type Instance = (Vec<Vec<(u32, u32, u32)>>, Vec<bool>, Vec<u32>);

    fn instance() -> impl Strategy<Value = Instance> {
        let flow = (0u32..5, 0u32..5, 1u32..=4);
        (
            prop::collection::vec(prop::collection::vec(flow, 1..=12), 1..=5),
            prop::collection::vec(any::<bool>(), 64),
            prop::collection::vec(0u32..=4, 10),
        )
    }

    fn snapshot(fabric: &Fabric, coflows: &[Vec<(u32, u32, u32)>]) -> Snapshot {
        let mut snap = Snapshot::default();
        snap.clear(crate::state::ServiceModel::Proportional);
        for (i, flows) in coflows.iter().enumerate() {
            let c = SnapshotCoflow {
                id: CoflowId(i as u64),
                job: CoflowId(i as u64),
                arrival: Nanos(i as u64),
                deadline: None,
                weight: 1.0,
                width: flows.len() as u32,
                pending: 0,
            };
            let flows: Vec<SnapshotFlow> = flows
                .iter()
                .map(|&(s, d, size)| {
                    let size = f64::from(size) * 100.0;
                    SnapshotFlow { src: MachineId(s), dst: MachineId(d), size, remaining: size / 2.0 }
                })
                .collect();
            snap.push_coflow(fabric, &c, &flows);
        }
        snap
    }

    /// Backfills every coflow in order on `left`, with or without the lists.
    fn backfill_all(input: &Input<'_>, mut live: Option<&mut LiveLegs>, mut left: Vec<f64>) -> (Allocation, Vec<f64>) {
        let cap = input.fabric.capacities().to_vec();
        let mut out = Allocation::default();
        out.reset(input);
        for k in 0..input.coflows.len() {
            backfill(input, k, live.as_deref_mut(), &mut left, &cap, &mut out);
        }
        (out, left)
    }

    /// Backfill with lists kept through a decision after which the legs `ends` picks (by index,
    /// modulo its length) finished, and with lists built from scratch, against visiting every leg.
    fn check_backfill(
        fabric: &Fabric,
        coflows: &[Vec<(u32, u32, u32)>],
        ends: &[bool],
        left: Vec<f64>,
    ) -> Result<(), TestCaseError> {
        let mut live = LiveLegs::default();
        let snap = snapshot(fabric, coflows);
        let first = snap.input(Nanos::ZERO, fabric);
        live.update(&first);
        // Built now, so that the legs finishing below are marked rather than left out.
        for k in 0..first.coflows.len() {
            live.get(&first, k);
        }
        // The same legs in the same places, some of them finished since the first decision.
        let mut legs = first.legs.to_vec();
        let mut changes = Changes::default();
        for c in first.coflows {
            for l in c.legs.clone() {
                if ends[l % ends.len()] {
                    legs[l].scaled = 0.0;
                    changes.legs_finished.push((c.id, (l - c.legs.start) as u32));
                }
            }
        }
        let input = Input { now: Nanos(1), changes: &changes, legs: &legs, ..first };
        live.update(&input);
        let (every, every_left) = backfill_all(&input, None, left.clone());
        let (listed, listed_left) = backfill_all(&input, Some(&mut live), left.clone());
        prop_assert_eq!(&every, &listed);
        // Told of every take since they looked, the lists count the resources with room exactly.
        let cap = input.fabric.capacities();
        let free = listed_left.iter().zip(cap).filter(|&(l, c)| *l > c * FULL).count();
        prop_assert_eq!(live.free(&listed_left, cap), free);
        prop_assert_eq!(every_left, listed_left);
        // And from scratch, the lists rebuilt.
        let mut fresh = LiveLegs::default();
        let input = Input { changes: Changes::everything(), ..input };
        fresh.update(&input);
        let (rebuilt, _) = backfill_all(&input, Some(&mut fresh), left);
        prop_assert_eq!(&every, &rebuilt);
        Ok(())
    }

    /// A kept largest survives a leg finishing elsewhere and nothing else: not the leg or a leg
    /// crossing the resource where it was found finishing, not its coflow reshaped.
    #[test]
    fn a_kept_largest_goes_when_where_it_was_found_changes() {
        let fabric = Fabric::big_switch(4, Rate::from_bytes_per_sec(100.0));
        // One coflow, three legs: 0→2, 0→3, 1→3 (sorted by route), resources 0..4 ingress.
        let snap = snapshot(&fabric, &[vec![(0, 2, 1), (0, 3, 2), (1, 3, 3)]]);
        let input = snap.input(Nanos::ZERO, &fabric);
        let id = input.coflows[0].id;
        let egress = |m: u32| fabric.route(MachineId(0), MachineId(m)).hops()[1];
        let after = |live: &mut LiveLegs, changes: &Changes| {
            live.update(&Input { changes, ..input });
            live.memo(0)
        };
        let finished = |offset: u32| Changes { legs_finished: vec![(id, offset)], ..Changes::default() };
        let mut live = LiveLegs::default();
        live.update(&input);
        // Found at leg 2: legs 0 and 1 finishing keep it, leg 2 finishing drops it.
        live.set_memo(0, 7.0, Witness::Leg(2));
        assert_eq!(after(&mut live, &finished(0)), Some(7.0));
        assert_eq!(after(&mut live, &finished(1)), Some(7.0));
        assert_eq!(after(&mut live, &finished(2)), None);
        // Found at receiver 3's port: leg 0 (to 2) keeps it, leg 1 (to 3) drops it.
        live.set_memo(0, 5.0, Witness::Resource(egress(3)));
        assert_eq!(after(&mut live, &finished(0)), Some(5.0));
        assert_eq!(after(&mut live, &finished(1)), None);
        // Reshaped: dropped whatever the witness.
        live.set_memo(0, 5.0, Witness::Leg(u32::MAX));
        assert_eq!(after(&mut live, &Changes::default()), Some(5.0));
        assert_eq!(after(&mut live, &Changes { reshaped: vec![id], ..Changes::default() }), None);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// Backfill over the live lists, kept through a decision after which some legs
        /// finished (marked from `Changes::legs_finished`), gives what visiting every leg gives.
        #[test]
        fn backfill_over_live_legs_equals_backfill_over_every_leg((coflows, ends, room) in instance()) {
            let fabric = Fabric::big_switch(5, Rate::from_bytes_per_sec(100.0));
            let left: Vec<f64> = room.iter().map(|&q| f64::from(q) * 25.0).collect();
            check_backfill(&fabric, &coflows, &ends, left)?;
        }

        /// The same with senders of many legs, found from their receivers with room: each
        /// receiver once (one flow per pair), or some several times (flows of several sizes).
        #[test]
        fn backfill_from_receivers_with_room_equals_backfill_over_every_leg(
            (coflows, ends, room) in (
                prop::collection::vec(prop::collection::vec((0u32..3, 3u32..40, 1u32..=4), 1..=90), 1..=4),
                prop::collection::vec(prop_oneof![3 => Just(false), 1 => Just(true)], 64),
                prop::collection::vec(prop_oneof![2 => Just(0u32), 1 => 1u32..=4], 80),
            ),
            two_sizes in any::<bool>(),
        ) {
            let fabric = Fabric::big_switch(40, Rate::from_bytes_per_sec(100.0));
            // One flow per pair unless asked: then each receiver has one leg per sender.
            let coflows: Vec<Vec<(u32, u32, u32)>> = coflows
                .into_iter()
                .map(|mut flows| {
                    if !two_sizes {
                        let mut seen = std::collections::HashSet::new();
                        flows.retain(|&(s, d, _)| seen.insert((s, d)));
                    }
                    flows
                })
                .collect();
            let left: Vec<f64> = room.iter().map(|&q| f64::from(q) * 25.0).collect();
            check_backfill(&fabric, &coflows, &ends, left)?;
        }

        /// The same with coflows of many senders (some of many legs, so that the lists keep
        /// their receivers).
        #[test]
        fn backfill_over_many_senders_equals_backfill_over_every_leg(
            (coflows, ends, room) in (
                prop::collection::vec(
                    prop::collection::vec((prop_oneof![0u32..2, 0u32..20], 20u32..40, 1u32..=4), 1..=120),
                    1..=4,
                ),
                prop::collection::vec(prop_oneof![3 => Just(false), 1 => Just(true)], 64),
                prop::collection::vec(prop_oneof![2 => Just(0u32), 1 => 1u32..=4], 80),
            ),
        ) {
            let fabric = Fabric::big_switch(40, Rate::from_bytes_per_sec(100.0));
            let left: Vec<f64> = room.iter().map(|&q| f64::from(q) * 25.0).collect();
            check_backfill(&fabric, &coflows, &ends, left)?;
        }

        /// The largest of a value of each leg, kept between decisions and told only of the legs
        /// listed as reshaped or finished, is the largest over every leg from scratch, to the bit,
        /// whichever coflows are asked at which decisions (some not for many, so that marks pile
        /// up past a rebuild), also when a driver lists reshaped coflows without their legs.
        #[test]
        fn a_kept_largest_over_legs_equals_the_largest_from_scratch(
            coflows in prop::collection::vec(prop::collection::vec((0u32..6, 0u32..6, 1u32..=4), 1..=30), 1..=4),
            steps in prop::collection::vec(
                (prop::collection::vec((any::<prop::sample::Index>(), 0u32..=8), 0..12), any::<u8>(), any::<bool>()),
                1..=25,
            ),
        ) {
            let fabric = Fabric::big_switch(6, Rate::from_bytes_per_sec(100.0));
            let snap = snapshot(&fabric, &coflows);
            let first = snap.input(Nanos::ZERO, &fabric);
            let value = |leg: &LegState| leg.longest * leg.scaled;
            let mut live = LiveLegs::default();
            let mut legs = first.legs.to_vec();
            let mut changes = Changes { everything: true, ..Changes::default() };
            for (at, (moves, asked, unnamed)) in steps.into_iter().enumerate() {
                let input = Input { now: Nanos(at as u64), changes: &changes, legs: &legs, ..first };
                live.update(&input);
                for k in 0..input.coflows.len() {
                    if asked & (1 << (k % 8)) != 0 {
                        let scratch = input.legs_of(&input.coflows[k]).iter().map(value).fold(0.0, f64::max);
                        prop_assert_eq!(live.leg_largest(&input, k, value).to_bits(), scratch.to_bits());
                    }
                }
                // Until the next decision some legs send apart from their coflow (listed as
                // reshaped, their scaled value falls or rises by eighths) or finish.
                changes = Changes::default();
                for (i, eighths) in moves {
                    // Flows within one machine make no legs.
                    if legs.is_empty() {
                        break;
                    }
                    let l = i.index(legs.len());
                    if !legs[l].is_active() {
                        continue;
                    }
                    let c = first.coflows.iter().find(|c| c.legs.contains(&l)).expect("a leg of a coflow");
                    let offset = (l - c.legs.start) as u32;
                    if eighths == 0 {
                        legs[l].scaled = 0.0;
                        changes.legs_finished.push((c.id, offset));
                    } else if !changes.reshaped_legs.contains(&(c.id, offset)) {
                        legs[l].scaled *= f64::from(eighths) / 4.0;
                        changes.reshaped_legs.push((c.id, offset));
                        if !changes.reshaped.contains(&c.id) {
                            changes.reshaped.push(c.id);
                        }
                    }
                }
                if unnamed {
                    changes.reshaped_legs.clear();
                }
            }
        }

        /// Γ from a coflow's largest scaled load, as `varys` keeps it, is Γ over each of its
        /// scaled loads to the bit when every resource has one capacity.
        #[test]
        fn bottleneck_from_the_largest_scaled_load_is_exact(
            loads in prop::collection::vec((0u32..6, 0.0f64..1e10), 0..12),
            scale in 1e-15f64..=1.0,
            c in 1e-3f64..1e12,
        ) {
            let cap = vec![c; 6];
            let remaining: Vec<(ResourceId, f64)> = loads.iter().map(|&(r, b)| (r, b * scale)).collect();
            let peak = loads.iter().map(|&(_, b)| b).fold(0.0, f64::max);
            prop_assert_eq!((peak * scale / c).to_bits(), bottleneck(&remaining, &cap).to_bits());
        }

        /// The masks tell which coflows have a full resource or a sender with room as reading
        /// every port does: exactly when told where room was taken, and soundly (never a full
        /// resource that has room, never no room where a sender has some) when room only shrank
        /// untold since they last looked.
        #[test]
        fn room_masks_tell_what_the_ports_tell(
            coflows in prop::collection::vec(prop::collection::vec((0u32..12, 0u32..12, 1u32..=4), 1..=40), 1..=5),
            room in prop::collection::vec(prop_oneof![3 => Just(0u32), 1 => 1u32..=4], 24),
            takes in prop::collection::vec((0usize..24, 0u32..=4), 0..40),
        ) {
            let fabric = Fabric::big_switch(12, Rate::from_bytes_per_sec(100.0));
            let cap = fabric.capacities().to_vec();
            let snap = snapshot(&fabric, &coflows);
            let input = snap.input(Nanos::ZERO, &fabric);
            let mut live = LiveLegs::default();
            live.update(&input);
            let mut left: Vec<f64> = room.iter().map(|&q| f64::from(q) * 25.0).collect();
            let mut takes = takes.into_iter();
            for round in 0..3 {
                for k in 0..input.coflows.len() {
                    let c = &input.coflows[k];
                    let is_full = |r: ResourceId| left[r as usize] <= cap[r as usize] * FULL;
                    let full = input.loads[c.loads.clone()].iter().any(|&(r, _)| is_full(r));
                    let sender = input.senders_of(c).iter().any(|sd| !is_full(sd.resource));
                    if live.has_full(&input, k, &left, &cap) {
                        prop_assert!(full, "coflow {k}: a full resource that has room");
                    }
                    if !live.sender_room(&input, k, &left, &cap) {
                        prop_assert!(!sender, "coflow {k}: no room at a sender that has some");
                    }
                    // Exact where the masks are read, when every take was told (after the first
                    // round, whose takes are not).
                    if round > 0 && c.loads.len() > FEW {
                        prop_assert_eq!(live.has_full(&input, k, &left, &cap), full);
                    }
                    if round > 0 && c.senders.len() > FEW {
                        prop_assert_eq!(live.sender_room(&input, k, &left, &cap), sender);
                    }
                    if let Some((r, q)) = takes.next() {
                        left[r] = (left[r] - f64::from(q) * 25.0).max(0.0);
                        if round > 0 {
                            live.took([r as ResourceId], &left, &cap);
                        }
                    }
                }
                if round == 0 {
                    // A decision starts again: the next look sees every take.
                    live.update(&Input { changes: &Changes::default(), ..input });
                }
            }
        }
    }
}
