//! `karuna`: Karuna's mix of deadline and non-deadline traffic (Chen et al., SIGCOMM 2016, the
//! slides in `shared/seeds/002_…`), for coflows.
//!
//! Deadline coflows should minimally impact the others: each gets, at the top priority and in
//! deadline order, the minimal rates that finish it just before its deadline (MADD with `τ = D`:
//! every flow sends `remaining / (D − now)`), its MCP. Non-deadline coflows take all the rest,
//! work-conserving, over a few strict priority levels that mimic smallest-job-first: by size when
//! sizes are known (Karuna's splitting thresholds), by bytes already sent when they are not (its
//! PIAS demotion thresholds). Inside a level, the smallest remaining coflow goes first; each gets
//! MADD on what the levels above left, then leftover bandwidth is backfilled flow by flow in the
//! same order, and last to the deadline coflows, so they finish early only on bandwidth no one
//! else wants.
//!
//! Karuna does not reject. A deadline coflow keeps its minimal rates once it has been given them
//! (so a later one cannot break it); one whose minimal rates do not fit next to those gets, after
//! them but above every non-deadline coflow, what is left on its ports (MADD on the leftover), in
//! case it still makes it, and is given its minimal rates as soon as they fit. Once its deadline
//! has passed it has missed and is served as a non-deadline coflow, so a hopeless coflow stops
//! taking bandwidth from the others.

use std::collections::{BTreeMap, BTreeSet, btree_map};

use coflow_core::{CoflowId, MIB, Nanos};

use crate::fabric::ResourceId;
use crate::kernel::{LiveLegs, backfill, madd};
use crate::scheduler::Scheduler;
use crate::state::{Allocation, CoflowState, Input, LegState, ServiceModel};

/// What the non-deadline levels are keyed on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Levels {
    /// Sizes are known: a coflow's level is set by its total bytes (splitting thresholds).
    BySize,
    /// Sizes are unknown: a coflow starts at the top level and is demoted as its bytes sent
    /// cross the thresholds (PIAS), and coflows inside a level go in arrival order.
    BySent,
}

/// Parameters of [`Karuna`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KarunaConfig {
    /// What sets a non-deadline coflow's level.
    pub levels: Levels,
    /// The number of strict priority levels for non-deadline coflows (Karuna's testbed switch
    /// has 8 queues, one of which serves deadline traffic: 7 are left).
    pub level_count: usize,
    /// The first threshold (bytes); each next one is `factor` times larger.
    pub first_threshold: f64,
    /// The growth factor between thresholds.
    pub factor: f64,
    /// After flows finish, reschedule at most once per this interval (as Varys does).
    pub flow_finish_gap: Option<Nanos>,
}

impl Default for KarunaConfig {
    fn default() -> Self {
        KarunaConfig {
            levels: Levels::BySize,
            level_count: 7,
            first_threshold: (10 * MIB) as f64,
            factor: 10.0,
            flow_finish_gap: Some(Nanos::from_millis(100)),
        }
    }
}

impl KarunaConfig {
    /// The level (0 first) of a coflow whose key (total or sent bytes) is `bytes`.
    pub fn level(&self, bytes: f64) -> usize {
        let mut level = 0;
        let mut threshold = self.first_threshold;
        while level + 1 < self.level_count && bytes >= threshold {
            level += 1;
            threshold *= self.factor;
        }
        level
    }
}

/// Karuna for coflows.
#[derive(Debug, Default)]
pub struct Karuna {
    cfg: KarunaConfig,
    /// Deadline coflows given their minimal rates by the last decision.
    committed: BTreeSet<CoflowId>,
    /// Every coflow's unfinished legs, for backfill and its bytes left.
    live: LiveLegs,
    /// Each coflow's total bytes, summed once (dropped when the driver rebuilds its input).
    bytes: BTreeMap<CoflowId, f64>,
    /// Each coflow's bytes left, as an interval kept between decisions (see [`Unfinished`]).
    unfinished: Unfinished,
    /// Per-decision buffer: the non-deadline coflows' levels and how many coflows each holds.
    per_level: Vec<u32>,
    /// Per-decision buffers: every coflow's remaining bytes per resource (`spans[k]` indexes
    /// `loads`), and the bandwidth left.
    loads: Vec<(ResourceId, f64)>,
    spans: Vec<std::ops::Range<usize>>,
    left: Vec<f64>,
}

impl Karuna {
    /// Karuna with these parameters.
    pub fn new(cfg: KarunaConfig) -> Karuna {
        assert!(cfg.level_count >= 1 && cfg.first_threshold > 0.0 && cfg.factor > 1.0, "invalid Karuna parameters");
        Karuna { cfg, ..Karuna::default() }
    }
}

/// A coflow's absolute deadline, if it has one.
fn deadline_of(c: &CoflowState) -> Option<Nanos> {
    c.deadline.map(|d| c.arrival.saturating_add(d))
}

impl Scheduler for Karuna {
    fn name(&self) -> &'static str {
        "karuna"
    }

    fn model(&self) -> ServiceModel {
        ServiceModel::Proportional
    }

    fn flow_finish_gap(&self) -> Option<Nanos> {
        self.cfg.flow_finish_gap
    }

    fn handle_finished(&mut self, _now: Nanos, coflow: CoflowId) {
        self.committed.remove(&coflow);
        self.bytes.remove(&coflow);
    }

    fn poll_allocation(&mut self, input: &Input<'_>, out: &mut Allocation) -> Option<Nanos> {
        let now = input.now;
        self.live.update(input);
        if input.changes.everything {
            self.bytes.clear();
        }
        self.unfinished.update(input);
        let cap = input.fabric.capacities();
        let left = &mut self.left;
        left.clear();
        left.extend_from_slice(cap);
        self.loads.clear();
        self.spans.clear();
        for c in input.coflows {
            let start = self.loads.len();
            self.loads.extend(input.remaining_loads(c));
            self.spans.push(start..self.loads.len());
        }
        let (all, spans) = (&self.loads, &self.spans);
        let loads = |k: usize| &all[spans[k].clone()];

        // Deadline coflows still before their deadline, earliest first; the others are ranked by
        // level, then (sizes known) smallest remaining, then arrival.
        let mut urgent: Vec<(Nanos, usize)> = Vec::new();
        let mut rest: Vec<(usize, f64, usize)> = Vec::new();
        for (k, c) in input.coflows.iter().enumerate() {
            match deadline_of(c) {
                // A coflow given its minimal rates finishes at its deadline, rounded up to the
                // nanosecond: it stays first until then.
                Some(d) if d > now || self.committed.contains(&c.id) => urgent.push((d, k)),
                _ => {
                    let bytes =
                        *self.bytes.entry(c.id).or_insert_with(|| input.legs_of(c).iter().map(|l| l.bytes).sum());
                    match self.cfg.levels {
                        // The bytes left are read below, and only where they decide something.
                        Levels::BySize => rest.push((self.cfg.level(bytes), f64::NAN, k)),
                        Levels::BySent => {
                            let remaining = exact(&mut self.live, input, k);
                            rest.push((self.cfg.level(bytes - remaining), 0.0, k));
                        }
                    }
                }
            }
        }
        if self.cfg.levels == Levels::BySize {
            // Inside a level the smallest remaining coflow goes first; a coflow alone in its level
            // is placed by its level, and the sum over its legs is not needed.
            self.per_level.clear();
            self.per_level.resize(self.cfg.level_count, 0);
            for &(level, _, _) in &rest {
                self.per_level[level] += 1;
            }
            let shared = |level: usize| self.per_level[level] > 1;
            if input.changes.everything || !input.fabric.is_big_switch() {
                for (level, within, k) in &mut rest {
                    if shared(*level) {
                        *within = exact(&mut self.live, input, *k);
                    }
                }
            } else {
                // Intervals first, by level and lower end; exact sums only where two overlap.
                let mut near: Vec<(usize, f64, f64, usize)> = Vec::new();
                for (i, &(level, _, k)) in rest.iter().enumerate() {
                    if shared(level) {
                        let (lo, hi) = self.unfinished.bounds(input, k);
                        near.push((level, lo, hi, i));
                    }
                }
                near.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)));
                let mut reach = f64::NEG_INFINITY;
                for j in 0..near.len() {
                    let (level, lo, hi, i) = near[j];
                    if j > 0 && near[j - 1].0 != level {
                        reach = f64::NEG_INFINITY;
                    }
                    let before = lo <= reach;
                    let after = near.get(j + 1).is_some_and(|n| n.0 == level && n.1 <= hi);
                    reach = reach.max(hi);
                    let k = rest[i].2;
                    // An interval disjoint from every other of its level orders as the exact
                    // sum it holds would.
                    rest[i].1 = if before || after { exact(&mut self.live, input, k) } else { lo };
                }
            }
        }
        urgent.sort_unstable();
        rest.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)).then(a.2.cmp(&b.2)));

        // 1. MCP: in deadline order, each deadline coflow gets the minimal rates that finish it at
        //    its deadline if they fit in what earlier deadlines left.
        let mut late: Vec<usize> = Vec::new();
        for &(d, k) in &urgent {
            let id = input.coflows[k].id;
            if d <= now {
                // Given its minimal rates before, it finishes at its deadline rounded up to the
                // nanosecond: as fast as it can.
                out.coflow_rate[k] = madd(loads(k), left, cap);
                continue;
            }
            let sigma = 1.0 / (d - now).as_secs_f64();
            let fits = loads(k).iter().all(|&(r, b)| b * sigma <= left[r as usize] * (1.0 + 1e-12));
            if fits {
                for &(r, b) in loads(k) {
                    left[r as usize] = (left[r as usize] - b * sigma).max(0.0);
                }
                out.coflow_rate[k] = sigma;
                self.committed.insert(id);
            } else {
                self.committed.remove(&id);
                late.push(k);
            }
        }
        //    Deadline coflows whose minimal rates do not fit get what is left on their ports,
        //    earliest deadline first, above every non-deadline coflow.
        late.sort_by_key(|&k| (deadline_of(&input.coflows[k]), k));
        for &k in &late {
            out.coflow_rate[k] = madd(loads(k), left, cap);
        }
        // 2. Non-deadline coflows by level, each by MADD on what is left.
        for &(_, _, k) in &rest {
            out.coflow_rate[k] = madd(loads(k), left, cap);
        }
        // 3. Work conservation: leftover bandwidth flow by flow, non-deadline coflows first.
        for k in rest.iter().map(|r| r.2).chain(urgent.iter().map(|u| u.1)) {
            let given = out.leg_extras().len();
            if backfill(input, k, Some(&mut self.live), left, cap, out) {
                let c = &input.coflows[k];
                let offsets = out.leg_extras()[given..].iter().map(|&(l, _)| (l - c.legs.start) as u32);
                self.unfinished.moved(c.id, offsets);
            }
        }
        // Decide again when the first of the others' deadlines passes: it then joins the levels.
        late.iter().filter_map(|&k| deadline_of(&input.coflows[k])).min()
    }
}

/// Each coflow's bytes left, kept from decision to decision, so that ordering a level costs what
/// changed rather than a sum over every leg of every coflow.
///
/// The order inside a level needs the bytes left only where two coflows are close. So each
/// coflow keeps `Q`, the sum of its legs' `bytes × scaled`, with a bound on its error: the bytes
/// left are `scale × Q` up to the rounding of the sum, an interval that a decision reads in
/// constant time. Between two decisions a leg's scaled value moves only when it had an extra or
/// finished ([`Changes`]: the coflow's rate moves its scale alone); on the big switch the extras
/// are exactly those the policy gave (the driver holds legs back only on the wide area), so `Q`
/// follows them leg by leg, and is summed again when its error bound grows. Coflows whose
/// intervals overlap another's in the same level are then given their exact bytes left, the sum
/// over their legs in order as a decision from scratch computes it; the others are ordered by
/// their intervals, which are disjoint, so the order is the same as with exact sums everywhere.
///
/// The exact sum ([`exact`]) visits only unfinished legs, through the kernel's [`LiveLegs`].
/// [`Changes::everything`] drops every entry, since the driver may have rebuilt its input.
///
/// [`Changes`]: crate::state::Changes
/// [`Changes::everything`]: crate::state::Changes::everything
#[derive(Debug, Default)]
struct Unfinished {
    /// `Q` and what keeps it current, per coflow once asked for.
    entries: BTreeMap<CoflowId, Approx>,
}

#[derive(Debug)]
struct Approx {
    /// `Σ bytes × scaled` over the coflow's legs, and a bound on its distance to the exact sum.
    q: f64,
    err: f64,
    /// Each leg's scaled value as `q` counts it.
    scaled: Vec<f64>,
    /// Offsets of legs whose scaled value may have moved since: given an extra, or finished.
    moved: Vec<u32>,
    /// The coflow's scale at the last read: it only falls, unless the driver renormalised.
    scale: f64,
}

/// Twice the unit roundoff of `f64`: each rounding below counts for at most this share.
const ROUNDING: f64 = 2.3e-16;

/// `Q` is summed again once its error bound passes this share of it.
const MAX_DRIFT: f64 = 1e-9;

impl Unfinished {
    /// Drops the entries of coflows that left, or every entry when the changes say so, and notes
    /// the legs that finished.
    fn update(&mut self, input: &Input<'_>) {
        if input.changes.everything {
            self.entries.clear();
            return;
        }
        for id in &input.changes.finished {
            self.entries.remove(id);
        }
        for &(id, offset) in &input.changes.legs_finished {
            self.moved(id, std::iter::once(offset));
        }
    }

    /// Legs of coflow `id` (offsets among its legs) whose scaled values may move before the next
    /// decision (given an extra) or moved (finished).
    fn moved(&mut self, id: CoflowId, offsets: impl Iterator<Item = u32>) {
        if let Some(a) = self.entries.get_mut(&id) {
            a.moved.extend(offsets);
            // A coflow not read for many decisions is summed again rather than followed.
            if a.moved.len() > a.scaled.len() {
                self.entries.remove(&id);
            }
        }
    }

    /// An interval that holds [`exact`] of `input.coflows[k]`, on the big switch
    /// and with the changes since the previous decision only.
    fn bounds(&mut self, input: &Input<'_>, k: usize) -> (f64, f64) {
        let c = &input.coflows[k];
        let legs = input.legs_of(c);
        let fresh = |legs: &[LegState]| {
            let scaled: Vec<f64> = legs.iter().map(|l| l.scaled).collect();
            let q: f64 = legs.iter().map(|l| l.bytes * l.scaled).sum();
            // Recursive summation of n rounded products: within (n + 1) roundings of the sum.
            let err = (legs.len() as f64 + 2.0) * ROUNDING * q;
            Approx { q, err, scaled, moved: Vec::new(), scale: c.scale }
        };
        let a = match self.entries.entry(c.id) {
            btree_map::Entry::Occupied(slot)
                if c.scale <= slot.get().scale && slot.get().scaled.len() == legs.len() =>
            {
                let a = slot.into_mut();
                for o in a.moved.drain(..) {
                    let o = o as usize;
                    let d = legs[o].bytes * (legs[o].scaled - a.scaled[o]);
                    a.scaled[o] = legs[o].scaled;
                    a.q += d;
                    a.err += ROUNDING * (d.abs() + a.q.abs());
                }
                if a.err > MAX_DRIFT * a.q {
                    *a = fresh(legs);
                }
                a.scale = c.scale;
                a
            }
            btree_map::Entry::Occupied(slot) => {
                let a = slot.into_mut();
                *a = fresh(legs);
                a
            }
            btree_map::Entry::Vacant(slot) => slot.insert(fresh(legs)),
        };
        // The exact sum rounds each of its n terms twice and each addition once: relatively,
        // and by at most the least subnormal where terms underflow.
        let rel = (legs.len() as f64 + 16.0) * ROUNDING;
        let dust = (legs.len() as f64 + 16.0) * f64::from_bits(1);
        (c.scale * (a.q - a.err) * (1.0 - rel) - dust, c.scale * (a.q + a.err) * (1.0 + rel) + dust)
    }
}

/// The bytes `input.coflows[k]` has left: the sum of its legs' remaining bytes, in order, over
/// the unfinished legs `live` lists (after [`LiveLegs::update`] on this input), which has the bits
/// of the sum over every leg (see `LiveCoflow::remaining`); over every leg when none is listed.
fn exact(live: &mut LiveLegs, input: &Input<'_>, k: usize) -> f64 {
    let c = &input.coflows[k];
    match live.get(input, k).and_then(|list| list.remaining(input, c)) {
        Some(r) => r,
        None => input.legs_of(c).iter().map(|l| l.remaining(c)).sum(),
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

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// The interval a decision reads holds the exact sum, before and after legs move (given
        /// extras or finished) and the scale falls.
        #[test]
        fn the_bounds_hold_the_exact_bytes_left(
            flows in prop::collection::vec((0u32..6, 0u32..6, 1u32..=1000, 1u32..=1000), 1..=40),
            moves in prop::collection::vec((0usize..40, 0u32..=4), 0..=20),
            scale in 1u32..=1000,
        ) {
            let fabric = Fabric::big_switch(6, Rate::from_bytes_per_sec(1e6));
            let mut snap = Snapshot::default();
            snap.clear(ServiceModel::Proportional);
            let c = SnapshotCoflow::plain(7, 1);
            let flows: Vec<SnapshotFlow> = flows
                .iter()
                .map(|&(s, d, size, left)| {
                    let size = f64::from(size) * 1e4;
                    SnapshotFlow { src: MachineId(s), dst: MachineId(d), size, remaining: size * f64::from(left) / 1e3 }
                })
                .collect();
            snap.push_coflow(&fabric, &c, &flows);
            let first = snap.input(Nanos::ZERO, &fabric);
            prop_assume!(first.coflows.len() == 1 && !first.coflows[0].legs.is_empty());
            let changes = Changes::default();
            let mut legs = first.legs.to_vec();
            let mut coflows = first.coflows.to_vec();
            let mut u = Unfinished::default();
            let mut live = LiveLegs::default();
            for round in 0..3 {
                let input = Input { changes: &changes, legs: &legs, coflows: &coflows, ..first };
                live.update(&input);
                let (lo, hi) = u.bounds(&input, 0);
                let sum = exact(&mut live, &input, 0);
                prop_assert!(lo <= sum && sum <= hi, "round {round}: {sum} outside [{lo}, {hi}]");
                // Over the unfinished legs the kernel lists, the bits of the sum over every leg.
                let every: f64 = input.legs_of(&coflows[0]).iter().map(|l| l.remaining(&coflows[0])).sum();
                prop_assert_eq!(sum.to_bits(), every.to_bits(), "round {}", round);
                // Some legs move (a quarter step each, or finish), and the scale falls.
                let range = coflows[0].legs.clone();
                let mut moved = Vec::new();
                for &(l, step) in &moves {
                    let o = l % range.len();
                    let leg = &mut legs[range.start + o];
                    leg.scaled = if step == 0 { 0.0 } else { leg.scaled * f64::from(step) / 4.0 };
                    moved.push(o as u32);
                }
                u.moved(CoflowId(7), moved.into_iter());
                coflows[0].scale *= f64::from(scale) / 1000.0;
            }
        }
    }

    #[test]
    fn levels_split_at_exponentially_spaced_thresholds() {
        let cfg = KarunaConfig::default();
        let mib = MIB as f64;
        assert_eq!(cfg.level(0.0), 0);
        assert_eq!(cfg.level(10.0 * mib), 1);
        assert_eq!(cfg.level(999.0 * mib), 2);
        assert_eq!(cfg.level(1e30), 6);
    }
}
