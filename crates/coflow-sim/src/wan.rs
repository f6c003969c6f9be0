//! Wide-area runs (Siphon): fluctuating link capacities, multi-path detours, and the figures a
//! wide-area run reports.
//!
//! - **Weather.** Time is cut into intervals of [`WanConfig::redraw`] from time zero; in interval
//!   `g` every link's capacity is a draw from its distribution by a generator seeded with
//!   `(seed, g)` alone, so every policy sees the very same capacities at the same times whatever
//!   it does. A new interval is an event: the policy decides again on the new capacities, so no
//!   allocation outlives the capacities it was made for.
//! - **Multi-path** (§3.3): when a coflow arrives, its bytes are routed by water-filling over the
//!   links' expected bandwidth: the link whose traffic (every active coflow's remaining bytes plus
//!   the new coflow's) takes longest gives the fraction α of the new coflow's bytes on it, from
//!   `D(1 − α)/B = (Dα + D')/B'`, to the least-loaded two-hop detour, and this repeats while the
//!   longest time falls. Each flow is split at arrival into a direct part and detour parts, each
//!   a leg of its own, so the fluid model stays exact; a detoured byte crosses two links, and the
//!   bytes relayed are reported.
//!
//! The figures a wide-area run reports are [`Summary::wide_area`](crate::Summary::wide_area).

use std::sync::Arc;

use coflow_core::{Coflow, CoflowId, Nanos};
use coflow_sched::{Allocation, Fabric, Input, ResourceId, Route, Wan};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::dynamics::{Capacities, ConnectionCaps, Direct, FabricRun, FabricSpec, Routing, Split, Uncapped};
use crate::weather::{WeatherLog, draw};

/// How to run on a wide-area fabric: the [`FabricSpec`] of Siphon's wide area.
#[derive(Clone, Debug, PartialEq)]
pub struct WanConfig {
    /// The topology; its links' capacities are redrawn during the run.
    pub wan: Wan,
    /// How often link capacities are redrawn (`Nanos::MAX`: never, the first draw holds for the
    /// whole run).
    pub redraw: Nanos,
    /// Seeds the capacity draws.
    pub seed: u64,
    /// Whether arriving coflows are routed over detours by water-filling (proportional policies
    /// only; per-flow policies keep direct routes).
    pub multipath: bool,
    /// Per-connection bandwidth (proportional policies only): `Some(redraw)` gives every flow
    /// (each part of a split flow) its own throughput cap, drawn from its link's distribution when
    /// it starts and redrawn every `redraw` (`Nanos::MAX`: held for its life); `None`: off.
    pub per_connection: Option<Nanos>,
    /// Recorded weather to replay (see [`crate::weather`]): when set, link capacities follow it
    /// and `redraw` and `seed` draw nothing; `None`: the seeded redraws.
    pub weather: Option<std::sync::Arc<WeatherLog>>,
}

impl WanConfig {
    /// The fabric of the topology, at its links' first capacities.
    pub fn fabric(&self) -> Fabric {
        Fabric::new(self.wan.clone())
    }
}

impl FabricSpec for WanConfig {
    fn build(&self, machines: u32, start: Nanos) -> FabricRun {
        assert!(self.wan.machines() >= machines, "the topology places fewer machines than the workload has");
        let wan = Arc::new(self.wan.clone());
        let mut fabric = self.fabric();
        let capacities = Weather::new(self, Arc::clone(&wan), &mut fabric, start);
        let routing: Box<dyn Routing> =
            if self.multipath { Box::new(WaterFill { wan: Arc::clone(&wan) }) } else { Box::new(Direct) };
        let connections: Box<dyn ConnectionCaps> = match self.per_connection {
            Some(redraw) => Box::new(Connections { wan, seed: self.seed, redraw, interval: 0 }),
            None => Box::new(Uncapped),
        };
        FabricRun { fabric, capacities: Box::new(capacities), routing, connections }
    }

    fn isolated_cct(&self, fabric: &Fabric, c: &Coflow) -> Nanos {
        isolated_cct(fabric, c)
    }

    fn wide_area(&self) -> bool {
        true
    }
}

/// Per-connection bandwidth: which interval's caps the legs hold.
#[derive(Debug)]
struct Connections {
    wan: Arc<Wan>,
    seed: u64,
    redraw: Nanos,
    interval: u64,
}

impl Connections {
    fn interval_at(&self, now: Nanos) -> u64 {
        if self.redraw == Nanos::MAX { 0 } else { now.0 / self.redraw.0.max(1) }
    }
}

impl ConnectionCaps for Connections {
    fn per_flow(&self) -> bool {
        true
    }

    fn update(&mut self, now: Nanos) -> bool {
        let g = self.interval_at(now);
        let new = g != self.interval;
        self.interval = g;
        new
    }

    fn next_change(&self) -> Nanos {
        if self.redraw == Nanos::MAX {
            return Nanos::MAX;
        }
        Nanos(self.interval.saturating_add(1).saturating_mul(self.redraw.0.max(1)))
    }

    fn cap(&self, coflow: CoflowId, conn: u32, route: Route) -> f64 {
        route
            .hops()
            .iter()
            .map(|&r| connection_draw(&self.wan, self.seed, coflow, conn, r, self.interval))
            .fold(f64::INFINITY, f64::min)
    }
}

/// The throughput of connection `conn` (see [`WanConfig::per_connection`]) of coflow `coflow`
/// on link `link` in redraw interval `interval`, in bytes per second: a draw from the link's
/// distribution, a function of these arguments and the seed alone, so that every policy sees
/// the same connections.
pub fn connection_draw(wan: &Wan, seed: u64, coflow: CoflowId, conn: u32, link: ResourceId, interval: u64) -> f64 {
    let key = [coflow.get(), u64::from(conn), u64::from(link)].iter().fold(mix(seed), |h, &v| mix(h ^ v));
    let mut rng = ChaCha8Rng::seed_from_u64(key);
    rng.set_stream(interval);
    wan.links()[link as usize].bandwidth.sample(&mut rng)
}

/// SplitMix64's finaliser: a well-spread 64-bit hash.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Holds every active leg's rate under `alloc` to its connection cap `caps[leg]`: a leg that the
/// policy gave more gets an extra that brings it down to the cap (negative if below its coflow's
/// rate). The policy does not know the caps; what they leave unused stays unused until its next
/// decision. With `check`, asserts that no leg then exceeds its cap.
pub(crate) fn cap_connections(input: &Input<'_>, caps: &[f64], alloc: &mut Allocation, check: bool) {
    let mut kappa = vec![0.0; input.legs.len()];
    for &(l, k) in alloc.leg_extras() {
        kappa[l] += k;
    }
    alloc.clear_leg_extras();
    for (ci, c) in input.coflows.iter().enumerate() {
        let sigma = alloc.coflow_rate[ci];
        for l in c.legs.clone() {
            let leg = &input.legs[l];
            let (mut k, remaining) = (kappa[l], leg.remaining(c));
            if leg.is_active() && remaining > 0.0 && (sigma + k) * remaining > caps[l] {
                k = caps[l] / remaining - sigma;
            }
            alloc.hold_leg(l, k);
            if check && leg.is_active() {
                let rate = (sigma + k) * remaining;
                assert!(rate <= caps[l] * (1.0 + 1e-9), "leg {l} sends {rate} B/s over its connection cap {}", caps[l]);
            }
        }
    }
}

/// The weather: which interval's (or recorded step's) capacities the fabric holds.
#[derive(Debug)]
struct Weather {
    wan: Arc<Wan>,
    redraw: Nanos,
    seed: u64,
    replay: Option<std::sync::Arc<WeatherLog>>,
    interval: u64,
}

impl Weather {
    fn new(cfg: &WanConfig, wan: Arc<Wan>, fabric: &mut Fabric, now: Nanos) -> Weather {
        if let Some(log) = &cfg.weather {
            let links = fabric.resources();
            assert!(
                log.steps().iter().all(|s| s.capacities.len() == links),
                "the replayed weather has {} capacities per step for {links} links",
                log.steps()[0].capacities.len()
            );
        }
        let mut w =
            Weather { wan, redraw: cfg.redraw, seed: cfg.seed, replay: cfg.weather.clone(), interval: u64::MAX };
        w.update(fabric, now);
        w
    }
}

impl Capacities for Weather {
    /// Draws (or reads from the recorded weather) the capacities of the interval holding `now`
    /// if the fabric does not hold them yet; returns whether they changed.
    fn update(&mut self, fabric: &mut Fabric, now: Nanos) -> bool {
        let g = match &self.replay {
            Some(log) => log.step_at(now) as u64,
            None if self.redraw == Nanos::MAX => 0,
            None => now.0 / self.redraw.0.max(1),
        };
        if g == self.interval {
            return false;
        }
        self.interval = g;
        let caps = match &self.replay {
            Some(log) => log.steps()[g as usize].capacities.clone(),
            None => draw(&self.wan, self.seed, g),
        };
        for (r, c) in caps.into_iter().enumerate() {
            fabric.set_capacity(r as ResourceId, c);
        }
        true
    }

    /// When the next interval starts.
    fn next_change(&self) -> Nanos {
        if let Some(log) = &self.replay {
            return log.next_change(self.interval as usize);
        }
        if self.redraw == Nanos::MAX {
            return Nanos::MAX;
        }
        Nanos(self.interval.saturating_add(1).saturating_mul(self.redraw.0.max(1)))
    }
}

/// One coflow's completion time alone on an empty wide-area fabric at the links' expected
/// bandwidth: its most loaded link's bytes over that link's mean (Γ_empty of the wide area).
fn isolated_cct(fabric: &Fabric, c: &Coflow) -> Nanos {
    let mut load = vec![0.0; fabric.resources()];
    for f in c.flows.iter().filter(|f| f.crosses_fabric()) {
        for &r in fabric.route(f.src, f.dst).hops() {
            load[r as usize] += f.size.as_f64();
        }
    }
    let t = load.iter().enumerate().map(|(r, &b)| b / fabric.expected_capacity(r as ResourceId)).fold(0.0, f64::max);
    Nanos::from_secs_f64(t)
}

pub use coflow_sched::detour_fraction;

/// Multi-path routing of arriving coflows by water-filling (§3.3, [`coflow_sched::water_fill`]),
/// on the links' expected bandwidth.
#[derive(Debug)]
struct WaterFill {
    wan: Arc<Wan>,
}

impl Routing for WaterFill {
    fn splits(&self) -> bool {
        true
    }

    fn split(&self, fabric: &Fabric, loads: &[f64], c: &Coflow) -> (Split, f64) {
        water_fill(&self.wan, fabric, loads, c)
    }
}

/// Water-fills coflow `c`'s bytes on `wan` (as `fabric`): `loads` holds every link's remaining
/// bytes from the coflows already active. Returns, per direct route of the coflow, the detours
/// and the fraction of its bytes each takes, and the bytes detoured (each crosses one link more
/// than it would have).
fn water_fill(wan: &Wan, fabric: &Fabric, loads: &[f64], c: &Coflow) -> (Split, f64) {
    let bw: Vec<f64> = (0..wan.links().len()).map(|r| fabric.expected_capacity(r as ResourceId)).collect();
    // The new coflow's bytes on each link's direct route: the only ones that may move.
    let mut own = vec![0.0; wan.links().len()];
    for f in c.flows.iter().filter(|f| f.crosses_fabric()) {
        if let [l] = fabric.route(f.src, f.dst).hops() {
            own[*l as usize] += f.size.as_f64();
        }
    }
    coflow_sched::water_fill(wan, &bw, loads, &own)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fraction_balances_both_sides() {
        // 300 bytes on a link of 1 B/s, a detour of 2 B/s already holding 60 bytes.
        let a = detour_fraction(300.0, 1.0, 60.0, 2.0);
        assert!((300.0 * (1.0 - a) / 1.0 - (300.0 * a + 60.0) / 2.0).abs() < 1e-9);
        assert_eq!(detour_fraction(10.0, 1.0, 100.0, 1.0), 0.0);
    }
}
