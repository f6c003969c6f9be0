//! The wide area in the coordinator: the links a flow crosses, what they were measured to carry,
//! and multi-path routing (Siphon §3.3): a coflow's gets asked together are water-filled over
//! two-hop detours through relay agents, their receivers resume them over the parts planned, and
//! a flow that loses its path (a link down, a relay lost) is rerouted the same way.

use std::collections::{BTreeMap, BTreeSet};
// A socket address is a value, not I/O: `core::net` is there without the standard library.
use ::core::net::SocketAddr;

use coflow_core::{CoflowId, MachineId, Nanos};

use super::{Core, FlowId, FlowState, Notice, Transmit, Why};
use crate::config::dc_name;

/// One part of a get: the bytes `[offset, offset + length)` of the piece, as a flow of its own.
#[derive(Clone, Debug, PartialEq)]
pub struct GrantPart {
    /// The part's flow.
    pub flow: FlowId,
    /// Its first byte in the piece.
    pub offset: u64,
    /// Its bytes.
    pub length: u64,
    /// The source's ticket, naming the agent that fetches from it (the relay, if any).
    pub ticket: coflow_proto::ticket::Ticket,
    /// The relay it goes through, if any.
    pub via: Option<Relay>,
}

/// A relay agent in a third datacenter, and the ticket by which it relays a part.
#[derive(Clone, Debug, PartialEq)]
pub struct Relay {
    /// The relay's machine.
    pub machine: MachineId,
    /// Its data listener.
    pub data_addr: SocketAddr,
    /// Its ticket for the part (under the relay's flow key), naming the receiver.
    pub ticket: coflow_proto::ticket::Ticket,
}

/// A get's bytes smaller than this are not split over several paths, and a part smaller than
/// this joins another.
pub const MIN_PART_BYTES: u64 = 64 << 10;

/// How long a get that may be split over detours waits for the other gets of its coflow asked at
/// the same moment, so that their bytes are water-filled together (its flow holds at rate 0
/// meanwhile).
pub(super) const GATHER: Nanos = Nanos::from_millis(10);

/// How long a flow planned over detours waits for its receiver to resume it over its parts before
/// it goes on over its direct path (a receiver that missed the notice, or cannot resume).
pub(super) const RESUME_WAIT: Nanos = Nanos::from_millis(2000);

/// How a flow's bytes are routed.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Routing {
    /// Over its direct path (or it crosses no link).
    Direct,
    /// Since then, waiting for the gets asked with it, to be water-filled with them.
    Pending(Nanos),
    /// Planned over detours: each share of the rest of its bytes and its relay (none: direct);
    /// its receiver was told to resume it, and the parts follow this plan.
    Split(Vec<(f64, Option<MachineId>)>),
}

/// Bytes `[start, end)` as `(offset, length, relay)` parts in order of offset: each detour its
/// share, the direct path what is left, first; parts under [`MIN_PART_BYTES`] join the largest.
pub(super) fn parts_by_share(
    shares: &[(f64, Option<MachineId>)],
    start: u64,
    end: u64,
) -> Vec<(u64, u64, Option<MachineId>)> {
    let len = end - start;
    let mut sizes: Vec<(u64, Option<MachineId>)> = Vec::new();
    for &(share, via) in shares.iter().filter(|s| s.1.is_some()) {
        sizes.push(((share * len as f64) as u64, via));
    }
    let moved: u64 = sizes.iter().map(|s| s.0).sum();
    sizes.insert(0, (len - moved.min(len), None));
    while sizes.len() > 1 {
        let Some(k) = (0..sizes.len()).filter(|&k| sizes[k].0 < MIN_PART_BYTES).min_by_key(|&k| sizes[k].0) else {
            break;
        };
        let small = sizes.remove(k);
        let big = (0..sizes.len()).max_by_key(|&j| sizes[j].0).expect("at least one left");
        sizes[big].0 += small.0;
    }
    let mut at = start;
    sizes
        .into_iter()
        .map(|(n, via)| {
            let part = (at, n, via);
            at += n;
            part
        })
        .collect()
}

/// For how many agent timeouts a relay a receiver blamed stays out of that receiver's paths: ten
/// (30 s by default), longer than a relay that is alive but does not deliver takes to be found out
/// (its receiver's data idle timeout, 5 s by default) at each of a get's resumes, so that a get
/// whose relays all fail this way goes direct rather than back to a relay blamed before.
const RELAY_AVOIDED_FOR: u64 = 10;

impl Core {
    /// On a wide area, the link a flow from `src` to `dst` crosses (none inside a datacenter or
    /// on a big switch).
    pub(super) fn link_between(&self, src: MachineId, dst: MachineId) -> Option<usize> {
        let dcs = self.cfg.wide_area.as_ref()?.datacenters.len();
        let (a, b) = (self.agents.get(&src)?.dc?, self.agents.get(&dst)?.dc?);
        if a == b { None } else { self.links[a as usize * dcs + b as usize] }
    }

    /// Each wide-area link's estimated bandwidth now and how many samples of it were measured,
    /// by link (empty on a big switch).
    pub fn link_estimates(&self) -> Vec<(f64, usize)> {
        self.link_views().into_iter().map(|l| (l.estimate, l.samples)).collect()
    }

    /// Each wide-area link as measured, by link (empty on a big switch).
    pub fn link_views(&self) -> Vec<crate::status::LinkView> {
        let (Some(m), Some(wa)) = (&self.meter, &self.cfg.wide_area) else { return Vec::new() };
        wa.links
            .iter()
            .enumerate()
            .map(|(l, link)| crate::status::LinkView {
                name: format!("{}->{}", dc_name(wa, link.from), dc_name(wa, link.to)),
                estimate: m.capacity(l),
                samples: m.samples(l),
                down: m.down(l),
            })
            .collect()
    }

    /// The wide area the coordinator schedules, if it has one: the links between datacenters, each
    /// as measured (its window of samples), and each machine in the datacenter its agent
    /// registered (an id with no agent is placed in the first: it sends and receives nothing).
    pub(super) fn wan(&self) -> Option<coflow_sched::Wan> {
        let (wa, meter) = (self.cfg.wide_area.as_ref()?, self.meter.as_ref()?);
        let dc_of: Vec<u32> =
            (0..self.machines()).map(|m| self.agents.get(&MachineId(m)).and_then(|a| a.dc).unwrap_or(0)).collect();
        let measured: Vec<_> = (0..wa.links.len()).map(|l| meter.distribution(l)).collect();
        Some(wa.place(dc_of.clone(), &measured).unwrap_or_else(|e| {
            tracing::warn!(error = %e, "a measured distribution is unusable; deciding on the topology's");
            wa.place(dc_of, &[]).expect("the configuration checked the topology, every pair with a link")
        }))
    }

    /// Whether a get of `len` bytes from `src` to `dst` may be split over detours: multi-path
    /// routing is on, a policy of the proportional model decides (per-flow policies keep direct
    /// paths, as in the simulator), the flow crosses a wide-area link and is worth splitting.
    pub(super) fn may_split(&self, src: MachineId, dst: MachineId, len: u64) -> bool {
        self.routes() && len >= 2 * MIN_PART_BYTES && self.link_between(src, dst).is_some()
    }

    /// Whether the coordinator routes flows over detours: multi-path routing is on and a policy
    /// of the proportional model decides (per-flow policies keep direct paths, as in the
    /// simulator).
    pub(super) fn routes(&self) -> bool {
        self.cfg.multipath && !self.tcp && self.policy.model() == coflow_sched::ServiceModel::Proportional
    }

    /// Whether link `l` is measured down.
    fn down(&self, l: usize) -> bool {
        self.meter.as_ref().is_some_and(|m| m.down(l))
    }

    /// A relay for bytes from `src` to `dst` when their direct link is down: an agent of a third
    /// datacenter both of whose links are up, through the one whose slower link was measured the
    /// fastest, if any (none `dst` could not reach lately, as [`Core::relay_in`] says).
    pub(super) fn detour_around(&self, src: MachineId, dst: MachineId) -> Option<MachineId> {
        let (wa, meter) = (self.cfg.wide_area.as_ref()?, self.meter.as_ref()?);
        let dcs = wa.datacenters.len();
        let (a, b) = (self.agents.get(&src)?.dc? as usize, self.agents.get(&dst)?.dc? as usize);
        (0..dcs)
            .filter(|&c| c != a && c != b)
            .filter_map(|c| {
                let (l1, l2) = (self.links[a * dcs + c]?, self.links[c * dcs + b]?);
                if self.down(l1) || self.down(l2) {
                    return None;
                }
                Some((meter.capacity(l1).min(meter.capacity(l2)), self.relay_in(c as u32, dst)?))
            })
            .max_by(|x, y| x.0.total_cmp(&y.0))
            .map(|(_, m)| m)
    }

    /// Water-fills `own` new bytes on each link's direct route over the links' expected bandwidth,
    /// with the bytes every flow but those of `apart` has left on the links (Siphon §3.3): per
    /// direct link, the detours its new bytes take and the fraction each takes, each detour as
    /// the datacenter it goes through (one through a link down is left out). The relay of a
    /// detour is chosen per receiver ([`Core::relays_for`]), as one detour may serve flows of
    /// several receivers.
    pub(super) fn water_fill(&self, own: &[f64], apart: &BTreeSet<FlowId>) -> BTreeMap<usize, Vec<(f64, u32)>> {
        let Some(wan) = self.wan() else { return BTreeMap::new() };
        let links = wan.links().len();
        // Routing goes by the links' expected bandwidth (Siphon §3.3); a link measured down by what
        // it carries now.
        let meter = self.meter.as_ref().expect("a wide area is measured");
        let bw: Vec<f64> = (0..links)
            .map(|l| {
                let now = meter.capacity(l);
                if meter.down(l) { now } else { coflow_sched::Topology::expected_capacity(&wan, l as u32, now) }
            })
            .collect();
        let mut loads = vec![0.0; links];
        for (id, f) in &self.flows {
            if f.state == FlowState::Unscheduled || apart.contains(id) || matches!(f.routing, Routing::Pending(_)) {
                continue;
            }
            for &l in &f.links {
                loads[l] += f.size.saturating_sub(f.sent) as f64;
            }
        }
        let (detours, _) = coflow_sched::water_fill(&wan, &bw, &loads, own);
        detours
            .into_iter()
            .filter_map(|(direct, ways)| {
                let link = direct.hops()[0] as usize;
                let ways: Vec<(f64, u32)> = ways
                    .into_iter()
                    // A detour through a link down is no way: its share stays on the direct path.
                    .filter(|(route, _)| !route.hops().iter().any(|&r| meter.down(r as usize)))
                    .map(|(route, fraction)| (fraction, wan.links()[route.hops()[0] as usize].to))
                    .collect();
                (!ways.is_empty()).then_some((link, ways))
            })
            .collect()
    }

    /// How to send bytes `[start, end)` of a piece from `src` to `dst` now, alone: `(offset,
    /// length, relay)` parts in order of offset, split over detours as [`Core::water_fill`] says
    /// for its bytes alone (a resume of a flow that lost its path); all of it through a detour
    /// where the direct link is measured down or, `unreached`, its receiver could not reach the
    /// source over it.
    pub(super) fn plan_parts(
        &self,
        src: MachineId,
        dst: MachineId,
        start: u64,
        end: u64,
        unreached: bool,
    ) -> Vec<(u64, u64, Option<MachineId>)> {
        // Around a link down, all of it, whatever its size, where a detour is up.
        if self.routes()
            && self.link_between(src, dst).is_some_and(|l| unreached || self.down(l))
            && let Some(relay) = self.detour_around(src, dst)
        {
            return vec![(start, end - start, Some(relay))];
        }
        if !self.may_split(src, dst, end - start) {
            return vec![(start, end - start, None)];
        }
        let link = self.link_between(src, dst).expect("may_split checked");
        let mut own = vec![0.0; self.cfg.wide_area.as_ref().map_or(0, |wa| wa.links.len())];
        own[link] = (end - start) as f64;
        let ways = self.water_fill(&own, &BTreeSet::new()).remove(&link).unwrap_or_default();
        parts_by_share(&self.relays_for(&ways, dst, &mut BTreeMap::new()), start, end)
    }

    /// How to send bytes `[start, end)` of flow `old` from `src` to `dst`, which its receiver cut
    /// and resumes: as planned when it was split over detours; planned alone when a previous
    /// coordinator granted it; else, having lost its path, planned alone, around
    /// the relay it went through when the coordinator did not reroute it (its receiver could not
    /// reach the relay, which is left out of that receiver's new paths for ten agent timeouts, and
    /// out of everyone's once the coordinator finds it dead, within one, if it is; other
    /// receivers' paths may still use it, so that a receiver that blames relays degrades no one
    /// else's paths), and all through a detour when its receiver never reached its source
    /// directly. A relay whose flow's source is silent (no heartbeat for three of its heartbeats:
    /// a receiver whose relay lost the source waits longer than that before it resumes) is not
    /// blamed: the source is what failed.
    pub(super) fn plan_resume(
        &mut self,
        now: Nanos,
        old: FlowId,
        src: MachineId,
        dst: MachineId,
        start: u64,
        end: u64,
    ) -> Vec<(u64, u64, Option<MachineId>)> {
        let Some(f) = self.flows.get(&old) else { return self.plan_parts(src, dst, start, end, false) };
        if let Routing::Split(shares) = &f.routing {
            return parts_by_share(shares, start, end);
        }
        let unreached = f.reported_at.is_none() && f.via.is_none();
        if let (Some(relay), false) = (f.via, f.rerouting) {
            if self.silent(src, now) {
                tracing::info!(flow = %old, relay = relay.0, src = src.0, "its source is silent: its relay is not blamed");
            } else {
                tracing::info!(flow = %old, relay = relay.0, receiver = dst.0, "its receiver could not reach its relay; its new paths avoid it");
                self.avoid_relay(now, relay, dst);
            }
        }
        self.plan_parts(src, dst, start, end, unreached)
    }

    /// Leaves `relay` out of the new paths of receiver `dst` for ten agent timeouts ([`RELAY_AVOIDED_FOR`]).
    fn avoid_relay(&mut self, now: Nanos, relay: MachineId, dst: MachineId) {
        // Bounded: expired entries go at each insert, and a receiver blaming a relay again
        // replaces its one entry for that pair, so at most one per (relay, receiver) of
        // registered machines (machines², acceptable) and in practice those of ten agent timeouts.
        self.relays_failed.retain(|_, until| *until > now);
        let avoided = Nanos::from_millis(self.cfg.agent_timeout_ms.saturating_mul(RELAY_AVOIDED_FOR));
        let until = now.saturating_add(avoided);
        self.relays_failed.insert((relay, dst), until);
    }

    /// The source of flow `id`, a part relayed through `relay` to `dst`, gave it up: the relay
    /// stopped reading (it is frozen, or cut off from the source) while its agent may still look
    /// alive. Its receiver, which may hear nothing from the relay for as long, is told to resume
    /// the rest at once, over paths that leave the relay out as when it blames the relay itself;
    /// its bytes are not lost, so the flow is not failed. A receiver frozen behind the relay
    /// resumes nothing, and its flows fail when it is found dead.
    pub(super) fn relay_stalled(&mut self, now: Nanos, id: FlowId, relay: MachineId, dst: MachineId) {
        tracing::info!(flow = %id, relay = relay.0, receiver = dst.0, "its source says its relay stopped reading; rerouted around the relay");
        self.avoid_relay(now, relay, dst);
        self.reroute(id);
    }

    /// Whether machine `m` is silent at `now`: not alive, or no heartbeat for three of its
    /// heartbeats (its own cadence, at least the configured one).
    pub(super) fn silent(&self, m: MachineId, now: Nanos) -> bool {
        let configured = Nanos::from_millis(self.cfg.heartbeat_interval_ms);
        self.agents.get(&m).is_none_or(|a| {
            let beat = a.beat.unwrap_or(configured).max(configured);
            !a.alive || now.saturating_sub(a.last_seen) > Nanos(beat.0.saturating_mul(3))
        })
    }

    /// Plans the flows waiting to be routed whose gathering window is over, coflow by coflow:
    /// each coflow's new bytes are water-filled together over the detours (as the simulator
    /// water-fills a coflow at its arrival), and the receiver of each flow that some of them leave
    /// is told to resume it, which it then does over the parts planned here.
    pub(super) fn plan_pending(&mut self, now: Nanos) {
        // A planned flow whose receiver has not resumed it goes on over its direct path.
        while let Some(&(since, id)) = self.resume_due.first()
            && since.saturating_add(RESUME_WAIT) <= now
        {
            self.resume_due.pop_first();
            if let Some(f) = self.flows.get_mut(&id) {
                tracing::warn!(flow = %id, "not resumed over its detours in time; it goes on over its direct path");
                f.routing = Routing::Direct;
                f.rerouting = false;
            }
        }
        // Due: gathered long enough. A flow held for its coflow's readiness meanwhile goes direct.
        let due: Vec<FlowId> = self
            .routing_due
            .iter()
            .take_while(|&&(since, _)| since.saturating_add(GATHER) <= now)
            .map(|&(_, id)| id)
            .collect();
        if due.is_empty() {
            return;
        }
        self.routing_due.retain(|(_, id)| !due.contains(id));
        let (held, due): (Vec<FlowId>, Vec<FlowId>) =
            due.into_iter().partition(|id| self.flows.get(id).is_some_and(|f| f.state == FlowState::Held));
        for id in held {
            if let Some(f) = self.flows.get_mut(&id) {
                f.routing = Routing::Direct;
            }
        }
        let mut by_coflow: BTreeMap<CoflowId, Vec<FlowId>> = BTreeMap::new();
        for id in due {
            by_coflow.entry(self.flows[&id].coflow).or_default().push(id);
        }
        let links = self.cfg.wide_area.as_ref().map_or(0, |wa| wa.links.len());
        for (_, group) in by_coflow {
            let apart: BTreeSet<FlowId> = group.iter().copied().collect();
            let mut own = vec![0.0; links];
            for id in &group {
                let f = &self.flows[id];
                if f.state == FlowState::Scheduled {
                    for &l in &f.links {
                        own[l] += f.size as f64;
                    }
                }
            }
            let ways = self.water_fill(&own, &apart);
            // The group's relays, per datacenter and receiver: a relay is chosen once for all the
            // group's flows to one receiver, not looked for again per flow.
            let mut relays = BTreeMap::new();
            for id in group {
                let f = &self.flows[&id];
                let mut shares = match (f.state, f.links.as_slice()) {
                    (FlowState::Scheduled, &[l]) => {
                        ways.get(&l).map_or_else(Vec::new, |w| self.relays_for(w, f.dst, &mut relays))
                    }
                    _ => Vec::new(),
                };
                // Split only within its owner's bound on what each machine serves it: the parts
                // take the flow's place at its source, and one more each there and at a relay.
                if !shares.is_empty() {
                    let owner = self.coflows.get(&f.coflow).map_or("", |c| c.reg.owner.as_str());
                    let parts = parts_by_share(&shares, 0, f.size);
                    if self.plan_fits(owner, (f.src, f.dst), &parts, Some((f.src, f.dst, f.via))).is_err() {
                        shares.clear();
                    }
                }
                let f = self.flows.get_mut(&id).expect("due flows are live");
                if shares.is_empty() {
                    f.routing = Routing::Direct;
                } else {
                    f.routing = Routing::Split(shares);
                    self.resume_due.insert((now, id));
                    self.reroute(id);
                }
            }
        }
        self.mark(Why::Routing);
    }

    /// The alive agent of datacenter `dc` that relays the fewest parts now (the lowest machine of
    /// equals), if any, for bytes to `receiver`; a relay `receiver` could not reach lately is
    /// none for it (and may be another receiver's).
    pub(super) fn relay_in(&self, dc: u32, receiver: MachineId) -> Option<MachineId> {
        self.agents
            .iter()
            .filter(|&(&m, a)| {
                a.alive && a.dc == Some(dc) && self.relays_failed.get(&(m, receiver)).is_none_or(|&t| t <= self.now)
            })
            .map(|(&m, _)| (self.flows.values().filter(|f| f.via == Some(m)).count(), m))
            .min()
            .map(|(_, m)| m)
    }

    /// The shares of [`Core::water_fill`]'s detours `ways` (each as its datacenter) for a flow to
    /// `receiver`, each through a relay of its datacenter for that receiver ([`Core::relay_in`]):
    /// another agent of the datacenter where `receiver` could not reach one lately, and where
    /// none is left, the detour's share stays on the direct path (none: all of it direct).
    /// `chosen` keeps the relays chosen so far, by datacenter and receiver, for flows planned
    /// together.
    pub(super) fn relays_for(
        &self,
        ways: &[(f64, u32)],
        receiver: MachineId,
        chosen: &mut BTreeMap<(u32, MachineId), Option<MachineId>>,
    ) -> Vec<(f64, Option<MachineId>)> {
        ways.iter()
            .filter_map(|&(share, dc)| {
                let relay = *chosen.entry((dc, receiver)).or_insert_with(|| self.relay_in(dc, receiver));
                Some((share, Some(relay?)))
            })
            .collect()
    }

    /// Tells a flow's receiver to cut it and resume the rest over another path (once).
    pub(super) fn reroute(&mut self, id: FlowId) {
        let Some(f) = self.flows.get_mut(&id) else { return };
        if f.rerouting {
            return;
        }
        f.rerouting = true;
        tracing::info!(flow = %id, coflow = %f.coflow, "flow rerouted");
        if self.watching.contains(&f.dst) {
            self.outbox.push_back(Transmit::Notice(f.dst, Notice::Reroute(id)));
        }
    }

    /// With multi-path routing, the flows that cross a link measured down (it carried almost
    /// nothing of what it was asked) are rerouted where another path is up: their receivers
    /// resume them over the paths [`Core::plan_parts`] then chooses, which avoid it. A flow with
    /// no other path stays, to go on when its link comes back.
    pub(super) fn reroute_around_down_links(&mut self) {
        if !self.routes() {
            return;
        }
        let Some(meter) = &self.meter else { return };
        if !(0..meter.links()).any(|l| meter.down(l)) {
            return;
        }
        // Whether another path is up, once per pair of machines.
        let mut other_path: BTreeMap<(MachineId, MachineId), bool> = BTreeMap::new();
        let mut down = Vec::new();
        for (&id, f) in &self.flows {
            if f.state != FlowState::Scheduled || f.rerouting || !f.links.iter().any(|&l| self.down(l)) {
                continue;
            }
            let up = *other_path.entry((f.src, f.dst)).or_insert_with(|| {
                self.link_between(f.src, f.dst).is_some_and(|l| !self.down(l))
                    || self.detour_around(f.src, f.dst).is_some()
            });
            if up {
                down.push(id);
            }
        }
        for id in down {
            self.reroute(id);
        }
    }
}
