//! The wide-area model of Siphon (§3.1): datacenters whose machines' edges are never the
//! bottleneck, joined by directed inter-datacenter links whose available bandwidth is a random
//! variable.
//!
//! A [`Wan`] is a [`Topology`]: datacenters, links, each link's [`Bandwidth`] distribution and
//! the datacenter of every machine. [`Fabric::new`](crate::Fabric::new) turns it into a fabric
//! whose resources are the links (resource `i` is link `i`, at first at its bandwidth's mean): a
//! flow between two datacenters crosses the direct link, a flow inside one crosses nothing. The fabric's capacities are the bandwidth
//! available now; the driver redraws them from the distributions, and policies read both.

use coflow_core::MachineId;

pub use crate::bandwidth::Bandwidth;
use crate::fabric::{ResourceId, Route, Topology};

/// A topology or bandwidth that cannot be used.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum WanError {
    /// A link names a datacenter that does not exist, or joins one to itself.
    #[error("link {link}: datacenters {from} -> {to} are not two of the {dcs} datacenters")]
    BadLink {
        /// Index of the link.
        link: usize,
        /// Its source datacenter.
        from: u32,
        /// Its destination datacenter.
        to: u32,
        /// How many there are.
        dcs: u32,
    },
    /// Two links join the same pair in the same direction.
    #[error("two links from datacenter {from} to {to}")]
    DuplicateLink {
        /// Source datacenter.
        from: u32,
        /// Destination datacenter.
        to: u32,
    },
    /// A bandwidth distribution is empty, not finite or not positive.
    #[error("link {link}: {what}")]
    BadBandwidth {
        /// Index of the link.
        link: usize,
        /// What is wrong.
        what: String,
    },
    /// A machine is placed in a datacenter that does not exist.
    #[error("machine {machine} placed in datacenter {dc}, but there are {dcs}")]
    BadPlacement {
        /// The machine.
        machine: u32,
        /// Its datacenter.
        dc: u32,
        /// How many there are.
        dcs: u32,
    },
    /// Two datacenters that exchange traffic have no direct link.
    #[error("no link from datacenter {from} to {to}")]
    MissingLink {
        /// Source datacenter.
        from: u32,
        /// Destination datacenter.
        to: u32,
    },
}

/// One directed inter-datacenter link.
#[derive(Clone, Debug, PartialEq)]
pub struct Link {
    /// The datacenter it leaves.
    pub from: u32,
    /// The datacenter it enters.
    pub to: u32,
    /// Its available bandwidth.
    pub bandwidth: Bandwidth,
}

/// A wide-area topology: datacenters, directed links between them, and where machines live.
#[derive(Clone, Debug, PartialEq)]
pub struct Wan {
    names: Vec<String>,
    links: Vec<Link>,
    /// Per ordered pair of datacenters `(a, b)` at `a * dcs + b`: the direct link.
    direct: Vec<Option<ResourceId>>,
    /// Per machine: its datacenter.
    dc_of: Vec<u32>,
}

impl Wan {
    /// A topology of the named datacenters and these links, with machine `m` in `dc_of[m]`.
    /// Every pair of datacenters that hold machines must have a direct link both ways.
    pub fn new(names: Vec<String>, links: Vec<Link>, dc_of: Vec<u32>) -> Result<Wan, WanError> {
        let dcs = names.len() as u32;
        let mut direct = vec![None; (dcs * dcs) as usize];
        let mut checked = Vec::with_capacity(links.len());
        for (i, l) in links.into_iter().enumerate() {
            if l.from >= dcs || l.to >= dcs || l.from == l.to {
                return Err(WanError::BadLink { link: i, from: l.from, to: l.to, dcs });
            }
            let slot = &mut direct[(l.from * dcs + l.to) as usize];
            if slot.is_some() {
                return Err(WanError::DuplicateLink { from: l.from, to: l.to });
            }
            *slot = Some(i as ResourceId);
            checked.push(Link {
                bandwidth: l.bandwidth.validate().map_err(|what| WanError::BadBandwidth { link: i, what })?,
                ..l
            });
        }
        if let Some((m, &dc)) = dc_of.iter().enumerate().find(|&(_, &d)| d >= dcs) {
            return Err(WanError::BadPlacement { machine: m as u32, dc, dcs });
        }
        let mut used = vec![false; dcs as usize];
        for &d in &dc_of {
            used[d as usize] = true;
        }
        for a in 0..dcs {
            for b in 0..dcs {
                if a != b && used[a as usize] && used[b as usize] && direct[(a * dcs + b) as usize].is_none() {
                    return Err(WanError::MissingLink { from: a, to: b });
                }
            }
        }
        Ok(Wan { names, links: checked, direct, dc_of })
    }

    /// `machines` machines spread over the datacenters in blocks of `per_dc` (machine `m` in
    /// datacenter `m / per_dc`); `per_dc` `None` spreads them evenly (Siphon §5.3: blocks of
    /// `ceil(machines / dcs)`).
    pub fn spread(dcs: u32, machines: u32, per_dc: Option<u32>) -> Vec<u32> {
        let per = per_dc.unwrap_or_else(|| machines.div_ceil(dcs.max(1))).max(1);
        (0..machines).map(|m| (m / per).min(dcs.saturating_sub(1))).collect()
    }

    /// The number of datacenters.
    pub fn dcs(&self) -> u32 {
        self.names.len() as u32
    }

    /// A datacenter's name.
    pub fn name(&self, dc: u32) -> &str {
        &self.names[dc as usize]
    }

    /// The number of machines placed.
    pub fn machines(&self) -> u32 {
        self.dc_of.len() as u32
    }

    /// The links; link `i` is resource `i`.
    pub fn links(&self) -> &[Link] {
        &self.links
    }

    /// The datacenter machine `m` lives in.
    pub fn dc_of(&self, m: u32) -> u32 {
        self.dc_of[m as usize]
    }

    /// The direct link from datacenter `a` to `b`, if any.
    pub fn link(&self, a: u32, b: u32) -> Option<ResourceId> {
        if a == b { None } else { self.direct[(a * self.dcs() + b) as usize] }
    }

    /// The route between two datacenters: the direct link, or nothing inside one.
    pub fn route(&self, a: u32, b: u32) -> Route {
        match self.link(a, b) {
            Some(l) => Route::new(&[l]),
            None if a == b => Route::LOCAL,
            None => panic!("no link from datacenter {a} to {b}; Wan::new checks every used pair has one"),
        }
    }

    /// The two-hop detours from `a` to `b`: `(relay datacenter, its route)`, by relay.
    pub fn detours(&self, a: u32, b: u32) -> impl Iterator<Item = (u32, Route)> + '_ {
        (0..self.dcs())
            .filter(move |&c| c != a && c != b)
            .filter_map(move |c| Some((c, Route::new(&[self.link(a, c)?, self.link(c, b)?]))))
    }

    /// A link's name, e.g. `victoria->toronto`.
    pub fn link_name(&self, r: ResourceId) -> String {
        let l = &self.links[r as usize];
        format!("{}->{}", self.name(l.from), self.name(l.to))
    }
}

impl Topology for Wan {
    fn kind(&self) -> &'static str {
        "wide area"
    }

    fn machines(&self) -> u32 {
        self.dc_of.len() as u32
    }

    fn initial_capacities(&self) -> Vec<f64> {
        self.links.iter().map(|l| l.bandwidth.mean()).collect()
    }

    fn route(&self, src: MachineId, dst: MachineId) -> Route {
        // The inherent `Wan::route`, between the machines' datacenters.
        Wan::route(self, self.dc_of(src.0), self.dc_of(dst.0))
    }

    fn resource_name(&self, r: ResourceId) -> String {
        self.link_name(r)
    }

    /// The link's bandwidth distribution's mean.
    fn expected_capacity(&self, r: ResourceId, _now: f64) -> f64 {
        self.links[r as usize].bandwidth.mean()
    }

    /// The link's bandwidth distribution's median.
    fn median_capacity(&self, r: ResourceId, _now: f64) -> f64 {
        self.links[r as usize].bandwidth.median()
    }

    fn distribution(&self, r: ResourceId) -> Option<&Bandwidth> {
        Some(&self.links[r as usize].bandwidth)
    }
}

/// A wide area as a cluster knows it before any machine joins: its datacenters and the links
/// between them, each with its bandwidth distribution (a long-term measurement, as Siphon's
/// controller starts from). Machines are placed as they join ([`WideArea::place`]).
#[derive(Clone, Debug, PartialEq)]
pub struct WideArea {
    /// Datacenter names; a datacenter's index is its position.
    pub datacenters: Vec<String>,
    /// Directed links with their distributions, in bytes per second; link `i` is resource `i`.
    pub links: Vec<Link>,
}

impl WideArea {
    /// Checks the datacenters and links on their own (no machine placed yet).
    pub fn validate(&self) -> Result<(), WanError> {
        Wan::new(self.datacenters.clone(), self.links.clone(), Vec::new()).map(|_| ())
    }

    /// The index of the datacenter named `name`.
    pub fn datacenter(&self, name: &str) -> Option<u32> {
        self.datacenters.iter().position(|d| d == name).map(|i| i as u32)
    }

    /// The topology with machine `m` in `dc_of[m]`, each link's bandwidth replaced by
    /// `bandwidth[i]` where given (what a cluster measured).
    pub fn place(&self, dc_of: Vec<u32>, bandwidth: &[Option<Bandwidth>]) -> Result<Wan, WanError> {
        let links = self
            .links
            .iter()
            .enumerate()
            .map(|(i, l)| match bandwidth.get(i).cloned().flatten() {
                Some(b) => Link { bandwidth: b, ..l.clone() },
                None => l.clone(),
            })
            .collect();
        Wan::new(self.datacenters.clone(), links, dc_of)
    }
}

/// Per direct route, the two-hop detours a multi-path split sends part of its bytes over, each
/// with the fraction of the direct route's bytes it takes.
pub type Detours = std::collections::BTreeMap<Route, Vec<(Route, f64)>>;

/// The balancing fraction of Siphon §3.3: moving `α` of the `d` bytes on a link of bandwidth `b`
/// onto a path whose most loaded link holds `d2` bytes at bandwidth `b2` equalises
/// `d(1 − α)/b = (dα + d2)/b2`; zero when the path is already slower.
pub fn detour_fraction(d: f64, b: f64, d2: f64, b2: f64) -> f64 {
    if d <= 0.0 {
        return 0.0;
    }
    ((d * b2 - d2 * b) / (d * (b + b2))).clamp(0.0, 1.0)
}

/// Multi-path routing of new bytes by water-filling (Siphon §3.3): `bw` holds every link's
/// expected bandwidth, `loads` its remaining bytes from traffic already routed, and `own` the new
/// bytes on each link's direct route (the only ones that may move). The link whose traffic takes
/// longest gives the fraction α of its new bytes to its least-loaded two-hop detour, from
/// `D(1 − α)/B = (Dα + D')/B'`, and this repeats while the longest time falls. Returns, per
/// direct route with bytes moved, the detours and the fraction of its new bytes each takes, and
/// the bytes detoured (each crosses one link more than it would have).
pub fn water_fill(wan: &Wan, bw: &[f64], loads: &[f64], own: &[f64]) -> (Detours, f64) {
    let links = wan.links();
    let mut d: Vec<f64> = loads.iter().zip(own).map(|(l, o)| l + o).collect();
    let mut own = own.to_vec();
    let total = own.clone();
    let mut moved: std::collections::BTreeMap<(ResourceId, Route), f64> = std::collections::BTreeMap::new();
    let time = |d: &[f64], r: usize| d[r] / bw[r];
    let longest = |d: &[f64]| (0..d.len()).map(|r| time(d, r)).fold(0.0, f64::max);
    for _ in 0..4 * links.len() {
        let before = longest(&d);
        // The most loaded link (the first of equals).
        let hot = (0..d.len()).fold(0, |best, r| if time(&d, r) > time(&d, best) { r } else { best });
        if own[hot] <= 0.0 {
            break;
        }
        let (from, to) = (links[hot].from, links[hot].to);
        // The detour whose most loaded link is least loaded (the first of equals).
        let best = wan
            .detours(from, to)
            .map(|(_, route)| {
                let worst = route.hops().iter().map(|&r| time(&d, r as usize)).fold(0.0, f64::max);
                (worst, route)
            })
            .fold(None, |best: Option<(f64, Route)>, x| match best {
                Some(b) if b.0 <= x.0 => Some(b),
                _ => Some(x),
            });
        let Some((_, route)) = best else { break };
        // Balance against each hop; the tightest one decides.
        let alpha = route
            .hops()
            .iter()
            .map(|&r| detour_fraction(d[hot], bw[hot], d[r as usize], bw[r as usize]))
            .fold(1.0, f64::min);
        let bytes = (alpha * d[hot]).min(own[hot]);
        if bytes <= 1e-9 * d[hot] {
            break;
        }
        let mut next = d.clone();
        next[hot] -= bytes;
        for &r in route.hops() {
            next[r as usize] += bytes;
        }
        if longest(&next) >= before * (1.0 - 1e-9) {
            break;
        }
        d = next;
        own[hot] -= bytes;
        *moved.entry((hot as ResourceId, route)).or_default() += bytes;
    }
    let mut split = Detours::new();
    let mut relayed = 0.0;
    for ((l, route), bytes) in moved {
        relayed += bytes;
        split.entry(Route::new(&[l])).or_default().push((route, bytes / total[l as usize]));
    }
    (split, relayed)
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;

    fn wan3() -> Wan {
        let mut links = Vec::new();
        for a in 0..3 {
            for b in 0..3 {
                if a != b {
                    links.push(Link { from: a, to: b, bandwidth: Bandwidth::Constant(1.0 + a as f64) });
                }
            }
        }
        Wan::new(vec!["a".into(), "b".into(), "c".into()], links, Wan::spread(3, 7, None)).unwrap()
    }

    #[test]
    fn machines_spread_in_even_blocks() {
        assert_eq!(Wan::spread(3, 7, None), vec![0, 0, 0, 1, 1, 1, 2]);
        assert_eq!(Wan::spread(3, 150, None).iter().filter(|&&d| d == 2).count(), 50);
        assert_eq!(Wan::spread(2, 5, Some(1)), vec![0, 1, 1, 1, 1]);
    }

    #[test]
    fn routes_cross_the_direct_link_and_detours_two() {
        let w = wan3();
        assert!(w.route(1, 1).is_local());
        assert_eq!(w.route(0, 2).hops(), &[w.link(0, 2).unwrap()]);
        let d: Vec<_> = w.detours(0, 2).collect();
        assert_eq!(d, vec![(1, Route::new(&[w.link(0, 1).unwrap(), w.link(1, 2).unwrap()]))]);
        assert_eq!(w.link_name(w.link(2, 0).unwrap()), "c->a");
    }

    #[test]
    fn invalid_topologies_are_errors() {
        let l = |from, to| Link { from, to, bandwidth: Bandwidth::Constant(1.0) };
        let names = || vec!["a".to_string(), "b".to_string()];
        assert!(matches!(Wan::new(names(), vec![l(0, 0)], vec![]), Err(WanError::BadLink { .. })));
        assert!(matches!(Wan::new(names(), vec![l(0, 1), l(0, 1)], vec![]), Err(WanError::DuplicateLink { .. })));
        assert!(matches!(Wan::new(names(), vec![l(0, 1)], vec![0, 1]), Err(WanError::MissingLink { .. })));
        assert!(matches!(Wan::new(names(), vec![l(0, 1), l(1, 0)], vec![2]), Err(WanError::BadPlacement { .. })));
        let empty = Link { from: 0, to: 1, bandwidth: Bandwidth::Empirical(vec![]) };
        assert!(matches!(Wan::new(names(), vec![empty], vec![]), Err(WanError::BadBandwidth { .. })));
    }

    #[test]
    fn distributions_have_their_moments() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let e = Bandwidth::Empirical(vec![3.0, 1.0, 2.0, 10.0]).validate().unwrap();
        assert_eq!((e.mean(), e.median()), (4.0, 2.0));
        let n = Bandwidth::Normal { mean: 10.0, sd: 2.0, min: 1.0 };
        let avg = (0..20_000).map(|_| n.sample(&mut rng)).sum::<f64>() / 20_000.0;
        assert!((avg - 10.0).abs() < 0.1, "{avg}");
        let u = Bandwidth::Uniform(2.0, 4.0);
        assert!((0..1000).map(|_| u.sample(&mut rng)).all(|v| (2.0..=4.0).contains(&v)));
    }
}
