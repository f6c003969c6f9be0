//! The state of the proportional service model: active coflows, their legs, and per-coflow scales.
//!
//! Under a decision every leg of coflow `c` sends `remaining × σ_c` bytes per second, so all of them
//! shrink by the same factor: `c.scale` carries it, and loads and legs are stored divided by it.
//! Bringing the state forward to a new time therefore costs one multiplication per coflow, plus one
//! update per leg that the decision gave an extra `κ` (backfill), which the policy keeps to at most
//! one per resource.
//! A policy that answers in standing rates (`Standing`) gives legs bytes per second that hold until
//! it changes them: such a leg keeps its own plan from its last change, which a change of rate
//! continues from what the plan says is left; the leg and its loads are brought forward only when
//! its rate stops, when it finishes, and when the model itself reads the loads.
//! Completions sit in a queue ([`Planned`]): one entry per coflow (its legs without extra all
//! finish together at `1/σ`) and one per leg with an extra or a standing rate.
//! A decision touches only what it rates: the coflows with a rate (before or after it), the legs
//! with an extra, and the legs whose standing rate it changes. The queue is kept between
//! decisions, and a finish that a decision moves is pushed again while its old entry stays
//! behind, stale: an entry counts only while it is the planned finish of a coflow or leg still
//! active, so stale ones are skipped when they come out, never left on top (the next event is
//! always a real one), dropped unseen when the queue splits its far part, and all dropped when
//! they outnumber the live ones three to one.

use coflow_core::{Coflow, CoflowId, MachineId, Nanos};
use coflow_sched::{Allocation, CoflowState, Fabric, LegState, ResourceId, Route, Sender, Standing};

use crate::dynamics::{ConnectionCaps, Split};
use crate::planned::Planned;

/// Tags a queued entry as a leg rather than a coflow.
const LEG: u32 = 1 << 31;

/// A coflow that finished: its index in the workload and its id.
pub(crate) type Finished = (usize, CoflowId);

#[derive(Debug, Default)]
pub(crate) struct LegModel {
    pub(crate) coflows: Vec<CoflowState>,
    pub(crate) legs: Vec<LegState>,
    pub(crate) senders: Vec<Sender>,
    pub(crate) loads: Vec<(ResourceId, f64)>,
    /// Per coflow: its index in the workload, its rate in force, its planned finish.
    widx: Vec<usize>,
    rate: Vec<f64>,
    /// Per coflow: its scale when the decision in force was made. Rates are constant in bytes per
    /// second, so fractions fall linearly from there: `scale = scale_dec · (1 − σ·(t − t_dec))`.
    scale_dec: Vec<f64>,
    finish: Vec<Nanos>,
    /// Per leg: its coflow, the index in `loads` of each of its hops, its planned finish when it
    /// has an extra.
    pub(crate) owner: Vec<u32>,
    slots: Vec<[u32; 4]>,
    leg_finish: Vec<Nanos>,
    /// Legs with an extra in force, in the order the decision gave them, and whether that order
    /// is ascending.
    extra: Vec<Extra>,
    extra_sorted: bool,
    /// The coflows of which a leg moved apart from the coflow's scale since the last decision read
    /// them (`Changes::reshaped`), sorted, each once: those of the extras it put in force and of
    /// the standing legs it or the model since brought forward. Kept by id, so that an extra
    /// dropped since (its leg finished, `compact` moved its coflow) still counts.
    extra_ids: Vec<CoflowId>,
    /// Coflows with a rate in force (indices, ascending).
    rated: Vec<u32>,
    /// The vectors of the decision before, kept so that a decision does not allocate.
    spare_rated: Vec<u32>,
    spare: Vec<Extra>,
    /// Scratch of `apply`: per coflow, the number of the decision that last rated it (`applied`
    /// counts them), to tell what the decision in force no longer rates.
    coflow_mark: Vec<u64>,
    applied: u64,
    /// Per leg: where its extra sits in `extra`, if it has one, so that a decision that gives
    /// extras in no order of legs finds what a leg's kept extra knows without its scattered
    /// fields. A value counts only when the entry there is that leg's; while `extra_indexed`,
    /// every entry of `extra` is where its leg's value says, so a leg found nowhere has no extra.
    extra_at: Vec<u32>,
    extra_indexed: bool,
    /// Scratch of `apply_extras`: per entry of the extras before, whether the decision kept it.
    taken: Vec<bool>,
    /// Per coflow: the number of the decision that last listed it in `extra_ids` (read within
    /// `apply` only: `compact` does not move them).
    id_mark: Vec<u64>,
    /// When the decision in force was made.
    dec_time: Nanos,
    queue: Planned,
    /// The time the state is current at (coflows' scales), and the time the legs with an extra
    /// and the loads are current at (the same unless `lazy`).
    time: Nanos,
    extras_time: Nanos,
    /// Whether the legs with an extra and the loads are brought forward only when read: at a
    /// decision ([`LegModel::sync_all`]), when a leg is retired, and before dust is swept, not at
    /// every event (for a policy that reads no loads, whose decisions read legs only). The loads
    /// are then as current at a decision, rounded otherwise.
    pub(crate) lazy: bool,
    /// Whether to record every leg's finish in `leg_done` (wide-area runs, for flow groups).
    pub(crate) track: bool,
    /// Finished legs: `(workload index, receiver, when)`.
    pub(crate) leg_done: Vec<(usize, MachineId, Nanos)>,
    /// Per workload coflow, its job (see `CoflowState::job`); empty: every coflow is its own.
    pub(crate) job_of: Vec<CoflowId>,
    /// Whether every flow is a leg of its own, a connection with its own throughput cap
    /// (per-connection wide-area bandwidth), instead of alike flows sharing one leg.
    pub(crate) connections: bool,
    /// Per leg: which connection of its coflow it is (`flow index · 4 + part`, the part counting
    /// multi-path detours first), and the cap on its bytes per second (infinite without
    /// per-connection bandwidth).
    pub(crate) conn: Vec<u32>,
    pub(crate) cap: Vec<f64>,
    /// Legs finished since the driver last took them, as `(coflow, offset among its legs)`
    /// (`Changes::legs_finished`).
    pub(crate) legs_finished: Vec<(CoflowId, u32)>,
    /// Scratch of `arrive`, kept so that an arrival does not allocate: the arriving coflow's
    /// leg keys, and per resource its bytes and its index in `loads` (zero and `u32::MAX`
    /// between calls), with the resources it touched.
    keys: Vec<(u32, u32, u64, u32)>,
    resource_bytes: Vec<f64>,
    resource_slot: Vec<u32>,
    touched: Vec<ResourceId>,
    /// Scratch for `compact`.
    shift: Vec<Option<(usize, usize, usize)>>,
    /// Legs at standing rates ([`Standing`]), each planned from its own last change, and per leg
    /// where its entry sits in `steady` (a value counts only when the entry there is that leg's).
    steady: Vec<Steady>,
    steady_at: Vec<u32>,
    /// Whether a leg may have come near its end since dust was last swept ([`LegModel::retire_dust`]):
    /// a leg arrived, or time passed with something at a rate. A sweep finds nothing otherwise,
    /// so it is skipped, which keeps a run where nothing moves (a policy serving nothing, through
    /// its capacity changes until the engine gives up) from scanning every leg at each.
    dusty: bool,
}

/// A leg at a standing rate: `rate` bytes per second from `since`, when it had `left` bytes.
/// Its coflow has no rate, so its scale holds; with the leg's bytes, hops and load slots, as an
/// [`Extra`] keeps them.
#[derive(Clone, Copy, Debug)]
struct Steady {
    leg: u32,
    coflow: u32,
    hops: u32,
    slots: [u32; 4],
    since: Nanos,
    left: f64,
    rate: f64,
    bytes: f64,
    /// The number of the decision that last listed it (a reset drops those it did not).
    listed: u64,
}

impl Steady {
    /// The bytes its leg has left at `now`.
    fn left_at(&self, now: Nanos) -> f64 {
        (self.left - self.rate * (now - self.since).as_secs_f64()).max(0.0)
    }

    /// Brings its leg (active) forward to `now`, with the loads it crosses, given its coflow's
    /// scale.
    fn bring(&self, now: Nanos, scale: f64, leg: &mut LegState, loads: &mut [(ResourceId, f64)]) {
        let left = self.left_at(now);
        let whole = self.bytes * scale;
        // A sliver stays until the leg's finish event retires it, as under an extra.
        let scaled = if whole > 0.0 { (left / whole).max(f64::MIN_POSITIVE) } else { f64::MIN_POSITIVE };
        let moved = (scaled - leg.scaled) * self.bytes;
        leg.scaled = scaled;
        for &slot in &self.slots[..self.hops as usize] {
            let load = &mut loads[slot as usize].1;
            *load = (*load + moved).max(0.0);
        }
    }
}

/// A leg with an extra in force, with what [`LegModel::sync`] reads at every event kept together:
/// the leg, its coflow (index), that coflow's rate `σ` and scale at the decision (which is its
/// scale until the next decision when it has no rate: only rated coflows' scales move), `σ + κ`,
/// the leg's remaining fraction at the decision, its bytes, and the indices in `loads` of its hops.
/// Indices are `u32` (legs already are, in queue tags), so that an entry takes 80 bytes.
#[derive(Clone, Copy, Debug)]
struct Extra {
    leg: u32,
    coflow: u32,
    hops: u32,
    slots: [u32; 4],
    sigma: f64,
    scale_dec: f64,
    speed: f64,
    phi_dec: f64,
    bytes: f64,
    /// Its planned finish (`Nanos::MAX` if none), as in `leg_finish`.
    finish: Nanos,
}

impl Extra {
    /// Brings its leg (active) forward to `dt` seconds after the decision, with the loads it
    /// crosses.
    #[inline(always)]
    fn bring(&self, dt: f64, leg: &mut LegState, loads: &mut [(ResourceId, f64)]) {
        // The coflow's scale as in `sync`, computed again from the same values; without a rate it
        // stays as it was at the decision, which `scale_dec` holds then.
        let scale = if self.sigma > 0.0 {
            (self.scale_dec * (1.0 - self.sigma * dt)).max(self.scale_dec * f64::EPSILON)
        } else {
            self.scale_dec
        };
        let phi = (self.phi_dec * (1.0 - self.speed * dt)).max(0.0);
        let scaled = if scale > 0.0 { (phi / scale).max(f64::MIN_POSITIVE) } else { f64::MIN_POSITIVE };
        // The same product for every hop, so computed once.
        let moved = (scaled - leg.scaled) * self.bytes;
        leg.scaled = scaled;
        let mut update = |slot: u32| {
            let load = &mut loads[slot as usize].1;
            *load = (*load + moved).max(0.0);
        };
        // Two hops (every leg on the big switch) without the loop.
        if self.hops == 2 {
            update(self.slots[0]);
            update(self.slots[1]);
        } else {
            self.slots[..self.hops as usize].iter().for_each(|&slot| update(slot));
        }
    }
}

impl LegModel {
    /// Brings every coflow forward to `now` at the rates in force, and every leg too unless the
    /// model is `lazy` (then [`LegModel::sync_all`] brings the legs with an extra forward).
    pub(crate) fn sync(&mut self, now: Nanos) {
        if now > self.time {
            self.dusty |= !(self.rated.is_empty() && self.extra.is_empty() && self.steady.is_empty());
            self.time = now;
            let dt = (now - self.dec_time).as_secs_f64();
            for &k in &self.rated {
                let k = k as usize;
                let (sigma, dec) = (self.rate[k], self.scale_dec[k]);
                // `σ·dt` can round to 1 a nanosecond before the finish, which is `1/σ` rounded up: a
                // scale of zero there would leave the coflow with active legs and no bytes, so that
                // no policy could ever finish it. A sliver stays until it finishes.
                self.coflows[k].scale = (dec * (1.0 - sigma * dt)).max(dec * f64::EPSILON);
            }
        }
        if !self.lazy {
            self.sync_extras();
        }
    }

    /// Brings every coflow and leg forward to `now` at the rates in force, lazy or not, except the
    /// legs at standing rates (which the policy answering in them does not read): what a decision
    /// reads.
    pub(crate) fn sync_all(&mut self, now: Nanos) {
        self.sync(now);
        self.sync_extras();
    }

    /// [`LegModel::sync_all`], and the legs at standing rates too: for a reader of the loads other
    /// than the policy (the multi-path split).
    pub(crate) fn sync_loads(&mut self, now: Nanos) {
        self.sync_all(now);
        self.sync_steady();
    }

    /// Brings the legs with an extra forward to the current time, with the loads they cross.
    fn sync_extras(&mut self) {
        if self.extras_time >= self.time {
            return;
        }
        self.extras_time = self.time;
        let dt = (self.time - self.dec_time).as_secs_f64();
        let (legs, loads) = (&mut self.legs, &mut self.loads);
        for e in &self.extra {
            let leg = &mut legs[e.leg as usize];
            if leg.is_active() {
                e.bring(dt, leg, loads);
            }
        }
    }

    /// Brings every leg at a standing rate forward to the current time, for a reader other than
    /// the policy. Such legs are brought forward only when read, lazy or not: the policy that
    /// answers in standing rates reads whether a leg is active, not what it has left, and no
    /// loads ([`Standing`]), so they move only when their rate stops, when they finish, and here.
    fn sync_steady(&mut self) {
        for at in 0..self.steady.len() {
            self.bring_steady(at);
        }
        // Between decisions the next one is told, by id: coflows may have moved since the last
        // decision marked them (`compact`).
        let before = self.extra_ids.len();
        for e in &self.steady {
            let id = self.coflows[e.coflow as usize].id;
            if self.extra_ids[..before].binary_search(&id).is_err() {
                self.extra_ids.push(id);
            }
        }
        if self.extra_ids.len() > before {
            self.extra_ids.sort_unstable();
            self.extra_ids.dedup();
        }
    }

    /// Brings the leg at a standing rate at `at` in `steady` forward to the current time.
    fn bring_steady(&mut self, at: usize) {
        let e = &self.steady[at];
        let leg = &mut self.legs[e.leg as usize];
        if leg.is_active() {
            e.bring(self.time, self.coflows[e.coflow as usize].scale, leg, &mut self.loads);
        }
    }

    /// Where leg `l`'s standing rate sits in `steady`, if it has one.
    fn steady_of(&self, l: usize) -> Option<usize> {
        let at = *self.steady_at.get(l)? as usize;
        (self.steady.get(at)?.leg as usize == l).then_some(at)
    }

    /// Drops the standing rate at `at` in `steady`.
    fn drop_steady(&mut self, at: usize) {
        let l = self.steady.swap_remove(at).leg as usize;
        self.leg_finish[l] = Nanos::MAX;
        if let Some(moved) = self.steady.get(at) {
            self.steady_at[moved.leg as usize] = at as u32;
        }
    }

    /// Puts a decision's standing rates in force at the current time (after its coflows' rates):
    /// a leg whose rate changed is planned again from what its plan leaves it now, a leg listed at
    /// the rate it had keeps its plan, and on a reset the legs not listed stop (brought forward).
    fn apply_standing(&mut self, standing: &Standing) {
        let now = self.time;
        let mark = self.applied;
        if self.steady_at.len() < self.legs.len() {
            self.steady_at.resize(self.legs.len(), u32::MAX);
        }
        let before = self.extra_ids.len();
        for &(l, rate) in &standing.changed {
            let at = self.steady_of(l);
            if let Some(at) = at {
                self.moved_apart(self.steady[at].coflow);
            }
            let go = rate > 0.0 && rate.is_finite() && self.legs[l].is_active();
            let e = match (at, go) {
                (Some(at), false) => {
                    self.bring_steady(at);
                    self.drop_steady(at);
                    continue;
                }
                (None, false) => continue,
                (Some(at), true) if self.steady[at].rate.to_bits() == rate.to_bits() => {
                    self.steady[at].listed = mark;
                    continue;
                }
                (Some(at), true) => {
                    // What it has left from its own plan: the leg and the loads it crosses stay
                    // where they were last brought, until read.
                    let e = &mut self.steady[at];
                    e.left = e.left_at(now);
                    e
                }
                (None, true) => {
                    let (coflow, bytes, hops, slots) = new_extra(&self.legs, &self.owner, &self.slots, l);
                    let k = coflow as usize;
                    assert!(
                        self.rate[k] == 0.0,
                        "coflow {} has a rate and a leg at a standing rate",
                        self.coflows[k].id
                    );
                    let left = self.legs[l].scaled * self.coflows[k].scale * bytes;
                    self.steady_at[l] = self.steady.len() as u32;
                    let e = Steady { leg: l as u32, coflow, hops, slots, since: now, left, rate, bytes, listed: mark };
                    self.steady.push(e);
                    self.steady.last_mut().expect("just pushed")
                }
            };
            (e.since, e.rate, e.listed) = (now, rate, mark);
            let finish = after(now, e.left / rate);
            if finish != self.leg_finish[l] {
                self.leg_finish[l] = finish;
                if finish != Nanos::MAX {
                    self.queue.push(finish, l as u32 | LEG);
                }
            }
        }
        if standing.reset {
            let mut at = 0;
            while at < self.steady.len() {
                if self.steady[at].listed == mark {
                    at += 1;
                } else {
                    self.bring_steady(at);
                    self.moved_apart(self.steady[at].coflow);
                    self.drop_steady(at);
                }
            }
        }
        if self.extra_ids.len() > before {
            self.extra_ids.sort_unstable();
        }
    }

    /// Lists coflow `k` (by id, once per decision) among those of which a leg moved apart from
    /// the coflow's scale since the decision read them (`Changes::reshaped`); within `apply`,
    /// where the marks are of the coflows' current places.
    fn moved_apart(&mut self, k: u32) {
        let k = k as usize;
        if self.id_mark[k] != self.applied {
            self.id_mark[k] = self.applied;
            self.extra_ids.push(self.coflows[k].id);
        }
    }

    /// Adds the bytes per second the standing rates in force put on each resource to `used`.
    pub(crate) fn steady_usage(&self, used: &mut [f64]) {
        for e in self.steady.iter().filter(|e| self.legs[e.leg as usize].is_active()) {
            for &r in self.legs[e.leg as usize].route.hops() {
                used[r as usize] += e.rate;
            }
        }
    }

    /// Brings leg `l` forward to the current time (with the loads it crosses) if it has a standing
    /// rate, or, lazy, an extra: before it is retired, so that it leaves with what it has left
    /// now.
    fn sync_leg(&mut self, l: usize) {
        if let Some(at) = self.steady_of(l) {
            self.bring_steady(at);
        }
        if !self.lazy || self.extras_time >= self.time {
            return;
        }
        let Some(e) = self.extra_at.get(l).and_then(|&at| self.extra.get(at as usize)).filter(|e| e.leg as usize == l)
        else {
            return;
        };
        let dt = (self.time - self.dec_time).as_secs_f64();
        e.bring(dt, &mut self.legs[l], &mut self.loads);
    }

    /// Sets the connection caps of legs `from..` to those `caps` hold now: each flow's, times
    /// the leg's flows.
    pub(crate) fn refresh_caps(&mut self, caps: &dyn ConnectionCaps, from: usize) {
        for l in from..self.legs.len() {
            let leg = &self.legs[l];
            let id = self.coflows[self.owner[l] as usize].id;
            self.cap[l] = caps.cap(id, self.conn[l], leg.route) * leg.flows as f64;
        }
    }

    /// Lists the coflows of which a leg was sent at other than its coflow's rate since the last
    /// decision (`Changes::reshaped`): `extra_ids`, each once, also when the leg has finished
    /// since.
    pub(crate) fn reshaped(&self, out: &mut Vec<CoflowId>) {
        out.extend_from_slice(&self.extra_ids);
    }

    /// Admits a coflow at the current time, with its flows that cross the fabric; `split` sends
    /// the given fraction of the bytes whose direct route is a key over each listed detour
    /// instead (multi-path routing), each part a leg of its own.
    pub(crate) fn arrive(&mut self, fabric: &Fabric, c: &Coflow, k: usize, split: &Split) {
        self.dusty = true;
        // One leg per pair of machines and flow size: its flows are alike under any policy. With
        // per-connection bandwidth each flow has its own throughput, so each is a leg of its own
        // (the key's last part, the flow's index, is 0 otherwise).
        // Grouped by sorting the keys and counting runs: the legs come out in key order.
        let mut keys = std::mem::take(&mut self.keys);
        keys.clear();
        for (i, f) in c.flows.iter().enumerate() {
            if f.crosses_fabric() && !fabric.route(f.src, f.dst).is_local() {
                let idx = if self.connections { i as u32 } else { 0 };
                keys.push((f.src.0, f.dst.0, f.size.get(), idx));
            }
        }
        keys.sort_unstable();
        // Each leg: its route, machines, flow size, the fraction of it taken, its flows, its
        // connection.
        let mut parts: Vec<(Route, u32, u32, u64, f64, u32, u32)> = Vec::with_capacity(keys.len());
        for run in keys.chunk_by(|a, b| a == b) {
            let ((s, d, size, idx), flows) = (run[0], run.len() as u32);
            let route = fabric.route(s.into(), d.into());
            let mut direct = 1.0;
            let mut part = 0;
            for &(detour, alpha) in split.get(&route).map_or(&[][..], Vec::as_slice) {
                parts.push((detour, s, d, size, alpha, flows, idx.saturating_mul(4) + part.min(3)));
                direct -= alpha;
                part += 1;
            }
            if direct > 1e-12 {
                parts.push((route, s, d, size, direct, flows, idx.saturating_mul(4) + part.min(3)));
            }
        }
        // Legs sorted by route (hop by hop), so that a sender's legs are contiguous; on the big
        // switch this is the order of the machine pairs.
        parts.sort_by(|a, b| a.0.hops().cmp(b.0.hops()).then((a.1, a.2, a.3, a.6).cmp(&(b.1, b.2, b.3, b.6))));
        // Each resource's bytes, summed in the legs' order, and the coflow's resources in
        // ascending order, each with its index in `loads`. The per-resource scratch is all zero
        // between calls.
        if self.resource_bytes.len() < fabric.resources() {
            self.resource_bytes.resize(fabric.resources(), 0.0);
            self.resource_slot.resize(fabric.resources(), u32::MAX);
        }
        let mut touched = std::mem::take(&mut self.touched);
        touched.clear();
        for &(route, _, _, size, fraction, flows, _) in &parts {
            let bytes = size as f64 * flows as f64 * fraction;
            for &r in route.hops() {
                if self.resource_slot[r as usize] == u32::MAX {
                    self.resource_slot[r as usize] = 0;
                    touched.push(r);
                }
                self.resource_bytes[r as usize] += bytes;
            }
        }
        touched.sort_unstable();
        let load_start = self.loads.len();
        for (i, &r) in touched.iter().enumerate() {
            self.resource_slot[r as usize] = (load_start + i) as u32;
            self.loads.push((r, std::mem::take(&mut self.resource_bytes[r as usize])));
        }

        let ci = self.coflows.len() as u32;
        let (leg_start, sender_start) = (self.legs.len(), self.senders.len());
        let mut active_flows = 0;
        for (route, _, d, size, fraction, flows, conn) in parts {
            let (bytes, longest) = (size as f64 * flows as f64 * fraction, size as f64 * fraction);
            active_flows += flows;
            let mut slots = [0u32; 4];
            for (slot, &r) in slots.iter_mut().zip(route.hops()) {
                *slot = self.resource_slot[r as usize];
            }
            let first = route.hops()[0];
            let same_sender =
                self.senders.len() > sender_start && self.senders.last().is_some_and(|sd| sd.resource == first);
            if same_sender {
                self.senders.last_mut().expect("checked above").legs.end += 1;
            } else {
                self.senders.push(Sender { resource: first, legs: self.legs.len()..self.legs.len() + 1 });
            }
            self.legs.push(LegState { route, bytes, flows, longest, scaled: 1.0, receiver: d.into() });
            self.owner.push(ci);
            self.slots.push(slots);
            self.leg_finish.push(Nanos::MAX);
            self.conn.push(conn);
            self.cap.push(f64::INFINITY);
        }
        for &r in &touched {
            self.resource_slot[r as usize] = u32::MAX;
        }
        self.touched = touched;
        self.keys = keys;
        self.coflows.push(CoflowState {
            id: c.id,
            arrival: c.arrival,
            job: self.job_of.get(k).copied().unwrap_or(c.id),
            deadline: c.deadline,
            weight: c.weight,
            width: c.flows.len() as u32,
            pending: 0,
            active_flows,
            scale: 1.0,
            loads: load_start..self.loads.len(),
            legs: leg_start..self.legs.len(),
            senders: sender_start..self.senders.len(),
        });
        self.widx.push(k);
        self.rate.push(0.0);
        self.scale_dec.push(1.0);
        self.finish.push(Nanos::MAX);
    }

    /// With per-connection caps, a coflow's legs held below its rate outlive its scale's fall to
    /// a sliver at `1/σ`, and the sliver would compound decision after decision until the scaled
    /// values overflow: before a decision, a coflow whose scale fell below 10⁻⁹ has its legs and
    /// loads multiplied out and its scale reset to 1. Only with per-connection caps, so other runs
    /// stay bit for bit as they were.
    /// Returns whether any coflow was renormalised.
    pub(crate) fn renormalize(&mut self) -> bool {
        if !self.connections {
            return false;
        }
        let mut any = false;
        for c in &mut self.coflows {
            let s = c.scale;
            if s >= 1e-9 || c.active_flows == 0 {
                continue;
            }
            for leg in &mut self.legs[c.legs.clone()] {
                leg.scaled *= s;
            }
            for load in &mut self.loads[c.loads.clone()] {
                load.1 *= s;
            }
            c.scale = 1.0;
            any = true;
        }
        // Multiplied out, a leg's share rounds anew.
        self.dusty |= any;
        any
    }

    /// Puts a decision in force at the current time.
    ///
    /// Only what the decision rates, or the one before rated, is touched: a coflow without a rate
    /// keeps no planned finish and its scale does not move, so its state is already right. A
    /// finish that moved is pushed to the queue again; one that did not keeps its entry.
    pub(crate) fn apply(&mut self, alloc: &Allocation) {
        let now = self.time;
        self.dec_time = now;
        self.applied += 1;
        let mark = self.applied;
        if self.coflow_mark.len() < self.coflows.len() {
            self.coflow_mark.resize(self.coflows.len(), 0);
        }
        let old_rated = std::mem::take(&mut self.rated);
        let mut rated = std::mem::take(&mut self.spare_rated);
        rated.clear();
        for (k, &sigma) in alloc.coflow_rate.iter().enumerate() {
            if sigma > 0.0 && self.coflows[k].active_flows > 0 {
                self.rate[k] = sigma;
                self.scale_dec[k] = self.coflows[k].scale;
                let finish = after(now, 1.0 / sigma);
                if finish != self.finish[k] {
                    self.finish[k] = finish;
                    self.queue.push(finish, k as u32);
                }
                rated.push(k as u32);
                self.coflow_mark[k] = mark;
            }
        }
        // Coflows rated before and not now lose their rate and their finish.
        for &k in &old_rated {
            let k = k as usize;
            if self.coflow_mark[k] != mark {
                self.rate[k] = 0.0;
                self.finish[k] = Nanos::MAX;
            }
        }
        self.rated = rated;
        self.spare_rated = old_rated;
        self.apply_extras(alloc.leg_extras(), now);
        if alloc.standing.on {
            self.apply_standing(&alloc.standing);
        } else {
            assert!(self.steady.is_empty(), "a decision not in standing rates left legs at them");
        }
        if self.queue.len() > 4 * (self.rated.len() + self.extra.len() + self.steady.len()) + 64 {
            self.rebuild_queue();
        }
        self.settle();
    }

    /// Puts the decision's extras in force (after the coflows' rates). A leg that keeps its extra
    /// keeps what its old entry knows of it (its coflow, bytes, load slots and planned finish),
    /// found by walking both lists in step when both are in ascending order of legs (as a policy
    /// that gives extras in the order of the input does), or else through `extra_at` (as for a
    /// policy that gives them in its order of priority), which saves looking up the leg's
    /// scattered fields again; a leg without an extra before has no planned finish to look up.
    fn apply_extras(&mut self, extras: &[(usize, f64)], now: Nanos) {
        let old = std::mem::take(&mut self.extra);
        let mut new = std::mem::take(&mut self.spare);
        new.clear();
        if self.id_mark.len() < self.coflows.len() {
            self.id_mark.resize(self.coflows.len(), 0);
        }
        self.extra_ids.clear();
        let sorted = self.extra_sorted && extras.windows(2).all(|w| w[0].0 < w[1].0);
        if sorted {
            self.merge_in_order(extras, &old, &mut new, now);
        } else {
            self.place_in_any_order(extras, &old, &mut new, now);
        }
        self.extra_indexed = !sorted;
        self.extra = new;
        if self.lazy && !self.extra_indexed {
            // Lazy, a leg retired between decisions finds its extra through `extra_at`.
            if self.extra_at.len() < self.legs.len() {
                self.extra_at.resize(self.legs.len(), u32::MAX);
            }
            for (i, e) in self.extra.iter().enumerate() {
                self.extra_at[e.leg as usize] = i as u32;
            }
            self.extra_indexed = true;
        }
        self.extra_sorted = sorted || self.extra.windows(2).all(|w| w[0].leg < w[1].leg);
        self.spare = old;
        // Each coflow once (marked as its extras were put in force), then sorted: fewer to sort
        // than the extras.
        self.extra_ids.sort_unstable();
    }

    /// `apply_extras` for extras given in ascending order of legs, as those before are: both
    /// lists walked in step, in one pass that also plans each finish and lists each coflow once
    /// (a policy that serves the same legs decision after decision, `pfp` and `edf`, comes here
    /// with nearly every extra kept).
    fn merge_in_order(&mut self, extras: &[(usize, f64)], old: &[Extra], new: &mut Vec<Extra>, now: Nanos) {
        let mark = self.applied;
        new.reserve(extras.len());
        // What the pass reads and writes, borrowed apart, so that it is not looked up through
        // `self` again after each write.
        let (legs, owner, slots) = (&self.legs[..], &self.owner[..], &self.slots[..]);
        let (rate, coflows) = (&self.rate[..], &self.coflows[..]);
        let (leg_finish, id_mark) = (&mut self.leg_finish[..], &mut self.id_mark[..]);
        let (queue, ids) = (&mut self.queue, &mut self.extra_ids);
        let room = (u64::MAX - now.0) as f64;
        let mut j = 0;
        for &(l, kappa) in extras {
            // A negative extra is a per-connection cap holding a leg below its coflow's rate.
            if kappa == 0.0 || !legs[l].is_active() {
                continue;
            }
            while let Some(o) = old.get(j)
                && (o.leg as usize) < l
            {
                // No longer given an extra.
                leg_finish[o.leg as usize] = Nanos::MAX;
                j += 1;
            }
            // Field by field from where they are (copying a whole kept entry through the stack and
            // reading it back in other widths stalls).
            let (c, bytes, hops, at, finish) = match old.get(j) {
                Some(o) if o.leg as usize == l => {
                    j += 1;
                    (o.coflow, o.bytes, o.hops, o.slots, o.finish)
                }
                // Not in force before, so no planned finish (`leg_finish` is `MAX`).
                _ => {
                    let (c, bytes, hops, at) = new_extra(legs, owner, slots, l);
                    (c, bytes, hops, at, Nanos::MAX)
                }
            };
            let k = c as usize;
            let (sigma, scale) = (rate[k], coflows[k].scale);
            let speed = sigma + kappa;
            let planned = if speed > 0.0 { after_within(now, room, 1.0 / speed) } else { Nanos::MAX };
            if planned != finish {
                leg_finish[l] = planned;
                if planned != Nanos::MAX {
                    queue.push(planned, l as u32 | LEG);
                }
            }
            if id_mark[k] != mark {
                id_mark[k] = mark;
                ids.push(coflows[k].id);
            }
            new.push(Extra {
                leg: l as u32,
                coflow: c,
                hops,
                slots: at,
                sigma,
                // Its scale now: `scale_dec[c]` when rated (set just before), its scale until
                // the next decision when not.
                scale_dec: scale,
                speed,
                phi_dec: legs[l].scaled * scale,
                bytes,
                finish: planned,
            });
        }
        for o in &old[j..] {
            leg_finish[o.leg as usize] = Nanos::MAX;
        }
    }

    /// `apply_extras` for extras in any other order: a kept extra is found through `extra_at`.
    fn place_in_any_order(&mut self, extras: &[(usize, f64)], old: &[Extra], new: &mut Vec<Extra>, now: Nanos) {
        if self.extra_at.len() < self.legs.len() {
            self.extra_at.resize(self.legs.len(), u32::MAX);
        }
        if !self.extra_indexed {
            for (i, e) in old.iter().enumerate() {
                self.extra_at[e.leg as usize] = i as u32;
            }
        }
        self.taken.clear();
        self.taken.resize(old.len(), false);
        for &(l, kappa) in extras {
            // A negative extra is a per-connection cap holding a leg below its coflow's rate.
            if kappa == 0.0 || !self.legs[l].is_active() {
                continue;
            }
            let mut kept = None;
            let at = self.extra_at[l] as usize;
            if at < old.len() && old[at].leg as usize == l {
                kept = Some(at);
                self.taken[at] = true;
            } else if at < new.len() && new[at].leg as usize == l {
                // Given twice (policies give each leg once): as the first time.
                kept = Some(usize::MAX);
            }
            self.extra_at[l] = new.len() as u32;
            // Field by field from where they are (copying a whole kept entry through the stack and
            // reading it back in other widths stalls).
            let (c, bytes, hops, slots, finish) = match kept {
                Some(usize::MAX) => {
                    let (c, bytes, hops, slots) = new_extra(&self.legs, &self.owner, &self.slots, l);
                    (c, bytes, hops, slots, self.leg_finish[l])
                }
                Some(i) => {
                    let o = &old[i];
                    (o.coflow, o.bytes, o.hops, o.slots, o.finish)
                }
                // Not in force before, so no planned finish (`leg_finish` is `MAX`).
                None => {
                    let (c, bytes, hops, slots) = new_extra(&self.legs, &self.owner, &self.slots, l);
                    (c, bytes, hops, slots, Nanos::MAX)
                }
            };
            let k = c as usize;
            let leg = &self.legs[l];
            new.push(Extra {
                leg: l as u32,
                coflow: c,
                hops,
                slots,
                sigma: self.rate[k],
                // Its scale now: `scale_dec[c]` when rated (set just before), its scale until
                // the next decision when not.
                scale_dec: self.coflows[k].scale,
                speed: self.rate[k] + kappa,
                phi_dec: leg.scaled * self.coflows[k].scale,
                bytes,
                finish,
            });
        }
        // The finishes in a loop of their own, which overlaps their divisions.
        for e in new.iter_mut() {
            let finish = if e.speed > 0.0 { after(now, 1.0 / e.speed) } else { Nanos::MAX };
            if finish != e.finish {
                e.finish = finish;
                self.leg_finish[e.leg as usize] = finish;
                if finish != Nanos::MAX {
                    self.queue.push(finish, e.leg | LEG);
                }
            }
        }
        // Not kept: dropped, unless its leg was given twice before and once now (then it points
        // at its new entry).
        for (e, _) in old.iter().zip(&self.taken).filter(|&(_, &taken)| !taken) {
            let at = self.extra_at[e.leg as usize] as usize;
            if at >= new.len() || new[at].leg != e.leg {
                self.leg_finish[e.leg as usize] = Nanos::MAX;
            }
        }
        let mark = self.applied;
        for e in new.iter() {
            let k = e.coflow as usize;
            if self.id_mark[k] != mark {
                self.id_mark[k] = mark;
                self.extra_ids.push(self.coflows[k].id);
            }
        }
    }

    /// Whether a queued entry is the planned finish of a coflow or leg still active.
    fn live(&self, t: Nanos, tag: u32) -> bool {
        live(&self.leg_finish, &self.legs, &self.finish, &self.coflows, t, tag)
    }

    /// Removes the top entry of the queue.
    fn pop(&mut self) {
        let (leg_finish, legs, finish, coflows) = (&self.leg_finish, &self.legs, &self.finish, &self.coflows);
        self.queue.pop(|&(t, tag)| live(leg_finish, legs, finish, coflows, t, tag));
    }

    /// Drops stale entries off the top of the queue, so that it shows the next real completion.
    fn settle(&mut self) {
        while let Some((t, tag)) = self.queue.peek() {
            if self.live(t, tag) {
                break;
            }
            self.pop();
        }
    }

    /// The queue again, with only the planned finishes in force, in linear time (the entries are
    /// unique, so the order they come out in does not depend on how it was built).
    fn rebuild_queue(&mut self) {
        let coflows = self.rated.iter().map(|&k| (self.finish[k as usize], k));
        let legs = self.extra.iter().map(|e| e.leg).chain(self.steady.iter().map(|e| e.leg));
        let legs = legs.map(|leg| (self.leg_finish[leg as usize], leg | LEG));
        self.queue.assign(coflows.chain(legs).filter(|&(t, _)| t != Nanos::MAX));
    }

    /// The next planned completion.
    pub(crate) fn next_time(&self) -> Nanos {
        self.queue.peek().map_or(Nanos::MAX, |(t, _)| t)
    }

    /// Retires every leg and coflow due at the current time; returns whether any leg finished,
    /// pushes finished coflows to `done`, and adds each finished flow's completion time (seconds
    /// since its coflow arrived) to `flow_time[workload index]`. `check` asserts each finishes
    /// with nothing left.
    pub(crate) fn complete(&mut self, check: bool, done: &mut Vec<Finished>, flow_time: &mut [f64]) -> bool {
        let now = self.time;
        let mut any = false;
        let before = done.len();
        while let Some((t, tag)) = self.queue.peek() {
            if t > now {
                break;
            }
            self.pop();
            if tag & LEG != 0 {
                let l = (tag & !LEG) as usize;
                if self.leg_finish[l] != t || !self.legs[l].is_active() {
                    continue;
                }
                let c = self.owner[l] as usize;
                flow_time[self.widx[c]] += self.legs[l].flows as f64 * (now - self.coflows[c].arrival).as_secs_f64();
                self.retire_leg(l, c, check);
                any = true;
                if self.coflows[c].active_flows == 0 {
                    done.push((self.widx[c], self.coflows[c].id));
                }
            } else {
                let c = tag as usize;
                if self.finish[c] != t || self.coflows[c].active_flows == 0 {
                    continue;
                }
                let fct = (now - self.coflows[c].arrival).as_secs_f64();
                for l in self.coflows[c].legs.clone() {
                    // A leg held below its coflow's rate by its connection's cap ends later.
                    let later = self.leg_finish[l] != Nanos::MAX && self.leg_finish[l] > now;
                    if self.legs[l].is_active() && !later {
                        flow_time[self.widx[c]] += self.legs[l].flows as f64 * fct;
                        self.retire_leg(l, c, check);
                    }
                }
                any = true;
                if self.coflows[c].active_flows == 0 {
                    done.push((self.widx[c], self.coflows[c].id));
                }
            }
        }
        if done.len() > before {
            self.compact();
        }
        self.settle();
        any
    }

    /// Retires, as finished now, every leg left with less than `DUST` of its bytes: a leg planned
    /// to end a nanosecond after a decision (finish times are rounded up) would otherwise hold a
    /// whole link for its last femtobytes. Wide-area runs only, at capacity changes (which fall
    /// on round times). Returns whether any leg was retired.
    pub(crate) fn retire_dust(&mut self, done: &mut Vec<Finished>, flow_time: &mut [f64]) -> bool {
        const DUST: f64 = 1e-12;
        self.sync_extras();
        self.sync_steady();
        let now = self.time;
        let before = done.len();
        let mut any = false;
        let coflows = if std::mem::take(&mut self.dusty) { self.coflows.len() } else { 0 };
        for c in 0..coflows {
            if self.coflows[c].active_flows == 0 {
                continue;
            }
            let scale = self.coflows[c].scale;
            for l in self.coflows[c].legs.clone() {
                let leg = &self.legs[l];
                if leg.is_active() && leg.scaled * scale < DUST {
                    let fct = (now - self.coflows[c].arrival).as_secs_f64();
                    flow_time[self.widx[c]] += leg.flows as f64 * fct;
                    self.retire_leg(l, c, true);
                    any = true;
                }
            }
            if any && self.coflows[c].active_flows == 0 {
                self.finish[c] = Nanos::MAX;
                done.push((self.widx[c], self.coflows[c].id));
            }
        }
        if done.len() > before {
            self.compact();
        }
        self.settle();
        any
    }

    /// Drops coflows a policy rejected, unfinished; returns their workload indices.
    pub(crate) fn reject(&mut self, ids: &[CoflowId]) -> Vec<usize> {
        let mut dropped = Vec::new();
        for (k, c) in self.coflows.iter_mut().enumerate() {
            if ids.contains(&c.id) && c.active_flows > 0 {
                c.active_flows = 0;
                dropped.push(self.widx[k]);
            }
        }
        if !dropped.is_empty() {
            self.compact();
            self.settle();
        }
        dropped
    }

    fn retire_leg(&mut self, l: usize, c: usize, check: bool) {
        self.sync_leg(l);
        let leg = &mut self.legs[l];
        let coflow = &mut self.coflows[c];
        if check {
            let left = leg.scaled * coflow.scale;
            assert!(left < 1e-6, "a leg of coflow {} finished with {left} of its bytes left", coflow.id);
        }
        for &slot in &self.slots[l][..leg.route.hops().len()] {
            let load = &mut self.loads[slot as usize].1;
            *load = (*load - leg.scaled * leg.bytes).max(0.0);
        }
        leg.scaled = 0.0;
        self.leg_finish[l] = Nanos::MAX;
        self.legs_finished.push((coflow.id, (l - coflow.legs.start) as u32));
        if self.track {
            self.leg_done.push((self.widx[c], leg.receiver, self.time));
        }
        coflow.active_flows -= leg.flows;
        if let Some(at) = self.steady_of(l) {
            self.drop_steady(at);
        }
    }

    /// Drops finished coflows with their legs, senders and loads, keeping the rest in order, in
    /// place: what comes before the first finished coflow stays where it is, so a coflow that
    /// finishes soon after it arrived (the usual case) moves only the few coflows that arrived
    /// after it.
    fn compact(&mut self) {
        let Some(first) = self.coflows.iter().position(|c| c.active_flows == 0) else { return };
        // Per coflow from `first` on: how far back it, its legs and its loads move, or `None`
        // when it is dropped.
        let mut shift = std::mem::take(&mut self.shift);
        shift.clear();
        let (mut kc, mut at, mut load_at) = (first, self.coflows[first].legs.start, self.coflows[first].loads.start);
        for (k, c) in self.coflows.iter().enumerate().skip(first) {
            if c.active_flows == 0 {
                shift.push(None);
            } else {
                shift.push(Some((k - kc, c.legs.start - at, c.loads.start - load_at)));
                kc += 1;
                at += c.legs.len();
                load_at += c.loads.len();
            }
        }
        // Extras and standing rates of legs that stay, in order, at their new places.
        let legs = &self.legs;
        let relocate = |coflow: &mut u32, leg: &mut u32, slots: &mut [u32]| {
            let k = *coflow as usize;
            let moved = if k < first { Some((0, 0, 0)) } else { shift[k - first] };
            match moved {
                Some((dc, dl, dd)) if legs[*leg as usize].is_active() => {
                    *coflow -= dc as u32;
                    *leg -= dl as u32;
                    for slot in slots {
                        *slot -= dd as u32;
                    }
                    true
                }
                _ => false,
            }
        };
        self.extra.retain_mut(|e| relocate(&mut e.coflow, &mut e.leg, &mut e.slots[..e.hops as usize]));
        self.steady.retain_mut(|e| relocate(&mut e.coflow, &mut e.leg, &mut e.slots[..e.hops as usize]));
        if self.extra_indexed {
            for (i, e) in self.extra.iter().enumerate() {
                self.extra_at[e.leg as usize] = i as u32;
            }
        }
        for (i, e) in self.steady.iter().enumerate() {
            self.steady_at[e.leg as usize] = i as u32;
        }
        let (mut kc, mut kl, mut kd, mut ks) = {
            let c = &self.coflows[first];
            (first, c.legs.start, c.loads.start, c.senders.start)
        };
        for k in first..self.coflows.len() {
            if shift[k - first].is_none() {
                continue;
            }
            let (legs, loads, senders) =
                (self.coflows[k].legs.clone(), self.coflows[k].loads.clone(), self.coflows[k].senders.clone());
            let (leg_shift, load_shift) = (legs.start - kl, loads.start - kd);
            // Moved in one copy (the legs before `kl` are those of coflows dropped).
            self.legs.copy_within(legs.clone(), kl);
            self.owner.copy_within(legs.clone(), kl);
            self.owner[kl..kl + legs.len()].fill(kc as u32);
            self.slots.copy_within(legs.clone(), kl);
            // Slots past a leg's hops are unused (0, never read): they wrap harmlessly.
            for slot in &mut self.slots[kl..kl + legs.len()] {
                *slot = slot.map(|s| s.wrapping_sub(load_shift as u32));
            }
            self.leg_finish.copy_within(legs.clone(), kl);
            self.conn.copy_within(legs.clone(), kl);
            self.cap.copy_within(legs.clone(), kl);
            self.loads.copy_within(loads.clone(), kd);
            for (j, i) in senders.clone().enumerate() {
                self.senders.swap(ks + j, i);
                let s = &mut self.senders[ks + j];
                s.legs = s.legs.start - leg_shift..s.legs.end - leg_shift;
            }
            self.coflows.swap(kc, k);
            let c = &mut self.coflows[kc];
            c.legs = kl..kl + legs.len();
            c.loads = kd..kd + loads.len();
            c.senders = ks..ks + senders.len();
            self.widx[kc] = self.widx[k];
            self.rate[kc] = self.rate[k];
            self.scale_dec[kc] = self.scale_dec[k];
            self.finish[kc] = self.finish[k];
            kc += 1;
            kl += legs.len();
            kd += loads.len();
            ks += senders.len();
        }
        self.coflows.truncate(kc);
        self.widx.truncate(kc);
        self.rate.truncate(kc);
        self.scale_dec.truncate(kc);
        self.finish.truncate(kc);
        self.legs.truncate(kl);
        self.owner.truncate(kl);
        self.slots.truncate(kl);
        self.leg_finish.truncate(kl);
        self.conn.truncate(kl);
        self.cap.truncate(kl);
        self.loads.truncate(kd);
        self.senders.truncate(ks);
        self.shift = shift;
        // The rated coflows at their new places, and the queue again, without the entries of what
        // left or went stale.
        self.rated.clear();
        self.rated.extend((0..kc as u32).filter(|&k| self.rate[k as usize] > 0.0));
        self.rebuild_queue();
    }
}

/// Whether a queued entry is the planned finish of a coflow or leg still active, given each leg's
/// and coflow's planned finish.
fn live(
    leg_finish: &[Nanos],
    legs: &[LegState],
    finish: &[Nanos],
    coflows: &[CoflowState],
    t: Nanos,
    tag: u32,
) -> bool {
    if tag & LEG != 0 {
        let l = (tag & !LEG) as usize;
        leg_finish[l] == t && legs[l].is_active()
    } else {
        let c = tag as usize;
        finish[c] == t && coflows[c].active_flows > 0
    }
}

/// What an extra keeps of leg `l` between decisions: its coflow, bytes, hops and load slots.
/// Out of line, so that the usual case, a leg that keeps its extra, does not load these scattered
/// fields at all.
#[cold]
#[inline(never)]
fn new_extra(legs: &[LegState], owner: &[u32], slots: &[[u32; 4]], l: usize) -> (u32, f64, u32, [u32; 4]) {
    let leg = &legs[l];
    (owner[l], leg.bytes, leg.route.hops().len() as u32, slots[l])
}

/// `now` plus `secs` seconds, rounded up to the next nanosecond (at least one), saturating.
pub(crate) fn after(now: Nanos, secs: f64) -> Nanos {
    after_within(now, (u64::MAX - now.0) as f64, secs)
}

/// [`after`], given the nanoseconds left after `now` as a float (`room`), which a loop that plans
/// many finishes from one `now` converts once.
#[inline(always)]
fn after_within(now: Nanos, room: f64, secs: f64) -> Nanos {
    const EXACT: f64 = (1u64 << 52) as f64;
    let x = secs * 1e9;
    if x > 0.0 && x < EXACT {
        // The ceiling (at least 1, at most 2⁵²) without a conversion instruction and its fix-ups
        // for numbers out of range: adding 2⁵² rounds `x` to the whole number `r` nearest it (the
        // sum lies where floats are one apart), which its bits count past 2⁵²'s, and `x` above
        // `r` (by at most a half) has the ceiling `r + 1`.
        let big = x + EXACT;
        let ns = big.to_bits() - EXACT.to_bits() + u64::from(big - EXACT < x);
        // Through `i64`, exact below 2⁶³, which the target converts in one instruction.
        if ns as i64 as f64 >= room { Nanos::MAX } else { Nanos(now.0 + ns) }
    } else {
        let ns = ceil(x);
        if !ns.is_finite() || ns >= room { Nanos::MAX } else { Nanos(now.0 + whole(ns).max(1)) }
    }
}

/// `x as u64` for a whole number `x`, through `i64` below 2⁶³ (one instruction there, where `u64`
/// takes several), so the same number.
fn whole(x: f64) -> u64 {
    const SIGNED: f64 = (1u64 << 63) as f64;
    if (0.0..SIGNED).contains(&x) { x as i64 as u64 } else { x as u64 }
}

/// `x.ceil()`, without a call into the C library where the target has no rounding instruction (the
/// default x86-64 one): below 2⁵², where a number can have a fraction, truncating to an integer
/// and back is exact, so this is `ceil` to the bit; elsewhere `ceil` itself. (Through `i64`, which
/// the target converts in one instruction each way, where `u64` takes several.)
fn ceil(x: f64) -> f64 {
    const EXACT: f64 = (1u64 << 52) as f64;
    if x > 0.0 && x < EXACT {
        let t = x as i64 as f64;
        if t < x { t + 1.0 } else { t }
    } else {
        x.ceil()
    }
}

#[cfg(test)]
mod tests;
