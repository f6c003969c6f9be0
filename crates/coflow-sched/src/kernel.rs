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
use crate::state::{Allocation, CoflowState, Input};

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
    live: Option<&mut LiveLegs>,
    left: &mut [f64],
    capacity: &[f64],
    out: &mut Allocation,
) -> bool {
    let c = &input.coflows[k];
    // Senders whose port is full are skipped whole; with none left, neither is the list built.
    if input.senders_of(c).iter().all(|sd| left[sd.resource as usize] <= capacity[sd.resource as usize] * FULL) {
        return false;
    }
    let live = live.and_then(|l| l.get(input, k));
    let mut any = false;
    for (i, sender) in input.senders_of(c).iter().enumerate() {
        let first = sender.resource as usize;
        if left[first] <= capacity[first] * FULL {
            continue;
        }
        any |= match live {
            None => backfill_sender(input, c, first, sender.legs.clone(), left, capacity, out),
            Some(live) => {
                let base = c.legs.start;
                let (offsets, tails) = live.sender(i);
                if tails.is_empty() {
                    let legs = offsets.iter().map(|&o| base + o as usize);
                    backfill_sender(input, c, first, legs, left, capacity, out)
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
                        any |=
                            backfill_sender(input, c, first, std::iter::once(base + o as usize), left, capacity, out);
                    }
                    any
                }
            }
        };
    }
    any
}

/// [`backfill`] on the given legs of one sender of `c`, whose port is resource `first`, in
/// order, until that port is full.
fn backfill_sender(
    input: &Input<'_>,
    c: &CoflowState,
    first: usize,
    legs: impl Iterator<Item = usize>,
    left: &mut [f64],
    capacity: &[f64],
    out: &mut Allocation,
) -> bool {
    let mut any = false;
    for l in legs {
        if left[first] <= capacity[first] * FULL {
            break;
        }
        let leg = &input.legs[l];
        if !leg.is_active() {
            continue;
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
            }
            any = true;
        }
    }
    any
}

/// Marks a finished leg in [`Live::tails`].
const DEAD: ResourceId = ResourceId::MAX;

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
/// [`Changes::everything`]: crate::state::Changes::everything
#[derive(Debug, Default)]
pub(crate) struct LiveLegs {
    /// Per coflow of the input, in its order (arrival, then id).
    coflows: Vec<Live>,
    /// `(id, index in coflows)`, sorted by id, for the finished legs.
    by_id: Vec<(CoflowId, u32)>,
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
    /// Where each of the coflow's senders starts in `offsets`, and where the last one ends.
    bounds: Vec<u32>,
    /// The coflow's unfinished flows when the list was last built.
    flows: u32,
    /// Whether the list was built at all.
    built: bool,
}

impl Live {
    /// A list not built yet.
    fn of(c: &CoflowState) -> Live {
        Live {
            arrival: c.arrival,
            id: c.id,
            offsets: Vec::new(),
            tails: Vec::new(),
            bounds: Vec::new(),
            flows: 0,
            built: false,
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
        self.flows = c.active_flows;
        self.built = true;
    }
}

/// One coflow's list in [`LiveLegs`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct LiveCoflow<'a> {
    offsets: &'a [u32],
    tails: &'a [ResourceId],
    bounds: &'a [u32],
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
        // Both are in the input's order, (arrival, id), and the kept lists are a subsequence of
        // the input's coflows plus those that left: one merge.
        let before = self.coflows.len();
        let mut same = true;
        let mut old = std::mem::take(&mut self.coflows).into_iter().peekable();
        for c in input.coflows {
            while old.next_if(|l| (l.arrival, l.id) < (c.arrival, c.id)).is_some() {
                same = false;
            }
            let live = match old.next_if(|l| l.id == c.id) {
                Some(live) => live,
                None => {
                    same = false;
                    Live::of(c)
                }
            };
            self.coflows.push(live);
        }
        if !same || old.next().is_some() || before != self.coflows.len() {
            self.by_id.clear();
            self.by_id.extend(self.coflows.iter().enumerate().map(|(k, l)| (l.id, k as u32)));
            self.by_id.sort_unstable();
        }
        if !changes.everything {
            for &(id, offset) in &changes.legs_finished {
                let Ok(i) = self.by_id.binary_search_by(|&(x, _)| x.cmp(&id)) else { continue };
                let live = &mut self.coflows[self.by_id[i].1 as usize];
                if let Ok(j) = live.offsets.binary_search(&offset)
                    && !live.tails.is_empty()
                {
                    live.tails[j] = DEAD;
                }
            }
        }
        for (live, c) in self.coflows.iter_mut().zip(input.coflows) {
            if live.built && c.active_flows * 2 < live.flows {
                live.build(input, c);
            }
        }
    }

    /// The list of `input.coflows[k]`, built if it was not (after [`LiveLegs::update`] on that
    /// input).
    pub(crate) fn get(&mut self, input: &Input<'_>, k: usize) -> Option<LiveCoflow<'_>> {
        let live = self.coflows.get_mut(k)?;
        if !live.built {
            live.build(input, &input.coflows[k]);
        }
        Some(LiveCoflow { offsets: &live.offsets, tails: &live.tails, bounds: &live.bounds })
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
                arrival: Nanos(i as u64),
                deadline: None,
                weight: 1.0,
                width: flows.len() as u32,
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

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// Backfill over the live lists, kept through a decision after which some legs
        /// finished (marked from `Changes::legs_finished`), gives what visiting every leg gives.
        #[test]
        fn backfill_over_live_legs_equals_backfill_over_every_leg((coflows, ends, room) in instance()) {
            let fabric = Fabric::big_switch(5, Rate::from_bytes_per_sec(100.0));
            let left: Vec<f64> = room.iter().map(|&q| f64::from(q) * 25.0).collect();
            let mut live = LiveLegs::default();
            let snap = snapshot(&fabric, &coflows);
            let first = snap.input(Nanos::ZERO, &fabric);
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
            prop_assert_eq!(every_left, listed_left);
            // And from scratch, the lists rebuilt.
            let mut fresh = LiveLegs::default();
            let input = Input { changes: Changes::everything(), ..input };
            fresh.update(&input);
            let (rebuilt, _) = backfill_all(&input, Some(&mut fresh), left);
            prop_assert_eq!(&every, &rebuilt);
        }
    }
}
