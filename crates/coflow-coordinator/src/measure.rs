//! What the coordinator measures of the resources it schedules: each wide-area link's available
//! bandwidth (Siphon §4: aggregators collect link statistics for the controller) and, on a big
//! switch, each machine's uplink and downlink, from the bytes their senders report moved and the
//! rates the coordinator asked of them, as samples of their bandwidth.
//!
//! Time is cut into periods. Each source's report covers the interval since its previous one; in
//! a period a link's throughput is, summed over its sources, the bytes each reported moved on it
//! over the time its reports covered, and what was asked of it the same for the bytes the rates
//! assigned to those flows would have moved over the same intervals (so that a report's lag behind
//! a rate change does not pass for a slow link, nor a period that began idle for a slow one). A
//! link that moved clearly less than it was asked
//! (`throughput < SATURATED × asked`) was the bottleneck: its throughput is a sample of its
//! bandwidth, kept in a sliding window, and the link's estimate. A link that moved what it was
//! asked while asked nearly all of its estimate may have more: its estimate grows by `PROBE`
//! of it (the coordinator offers policies the estimate and finds the rest by asking). A link
//! asked little tells nothing. The policies read the estimate as the link's capacity now and the
//! window (once it holds `MIN_SAMPLES`) as its distribution; before that the topology's prior.
//!
//! A port ([`PortMeter`]) is measured the same way, with three differences. Its prior is the rate
//! its agent registered, which is also its ceiling (the agent's own port cap, or its NIC, never
//! carries more, so a port that keeps up is never offered more than it registered). Every flow
//! crosses two ports, its sender's uplink and its receiver's downlink, so a period's shortfalls
//! are put down first to the port that explains them (the fullest of those held back: a
//! bottleneck carries all it has, its flows' other ends what it lets through), and a flow whose
//! shortfall one port explains does not count against the other; a port never explains the
//! shortfall of a pair that moved next to nothing while another of its pairs moved (a full port
//! shares what it has, never down to nothing for one flow), so a receiver that stops reading does
//! not pass for a slow uplink of its sender, whose other flows keep their rates. (A flow whose
//! receiving agent reports its client holding it back, reading slower than it comes or not at
//! all, comes here as load that asked just what it moved, and what it added to its pair's
//! judgement so far in the period is set apart when the report comes ([`PortMeter::set_apart`]),
//! so that a slow or stalled reader alone on both its ports is no port's fault either, while its
//! pair's other flows are judged as before; the pairs of an agent that fell silent are set apart
//! whole, [`PortMeter::forget_machines`], as a frozen receiver cannot report its reader.) A
//! port is sampled only once it held its flows back two periods in a row: a slower link stays
//! slow, while a flow stalled for a moment (its receiver busy, its agent descheduled) is no
//! port's fault. And a port asked less than a fifth of its estimate tells nothing of being
//! held back (a flow paced at a small rate moves block by block, too coarse to judge in one
//! period).
//!
//! Pure: the core calls it with `now` and what it learnt; it reads no clock.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use coflow_core::{MachineId, Nanos};
use coflow_sched::Bandwidth;

/// How long one measurement period lasts.
pub(crate) const PERIOD: Nanos = Nanos::from_millis(400);

/// A link that moved less than this share of what it was asked was the bottleneck.
const SATURATED: f64 = 0.85;

/// A link asked at least this share of its estimate, that moved what it was asked, grows.
const ASKED_NEARLY_ALL: f64 = 0.8;

/// How much a link that kept up with nearly all of its estimate grows in a period; the growth
/// doubles each period it keeps up in a row, to at most twice the estimate a period, so that a
/// link back from a fall (down, or a deep dip of its weather) is found again within a few periods.
const PROBE: f64 = 0.25;

/// The most samples a link keeps (the sliding window).
const WINDOW: usize = 64;

/// Samples a link needs before its window stands for its distribution.
const MIN_SAMPLES: usize = 8;

/// A link that moved less than this share of what it was asked, `DOWN_PERIODS` periods in a
/// row, is down.
const DOWN: f64 = 0.05;
const DOWN_PERIODS: u32 = 3;

/// A link down that nothing asked anything of for this many periods is taken for up again, so
/// that flows try it (and it is measured down again if it still is).
const RETRY_PERIODS: u32 = 5;

/// The lowest estimate, as a share of the prior's mean (and for a wide-area link at least
/// `MIN_LINK_BYTES_PER_SEC`): a link that moved nothing is not taken for dead for good (it is
/// asked again, and grows back as it keeps up).
const FLOOR: f64 = 0.02;

/// How a kind of resource is judged.
#[derive(Clone, Copy, Debug)]
struct Rules {
    /// Asked less than this share of its estimate in a period, it is not judged held back.
    least_asked: f64,
    /// Held back in this many periods in a row before it is sampled.
    held_periods: u32,
    /// It grows only if it carried nearly all of its estimate (`SATURATED` of it), not only
    /// nearly all it was asked: a period holds reports of the interval before it began, at the
    /// rates before a probe, which would otherwise pass a probe that fell short for one that kept
    /// up (and double the next).
    carried_estimate: bool,
    /// The least it is estimated at (a sample too), whatever its prior, in bytes per second.
    least: f64,
}

/// A wide-area link's rules: it is never estimated below what the agents' data plane can pace
/// ([`MIN_LINK_BYTES_PER_SEC`](crate::config::MIN_LINK_BYTES_PER_SEC)), which a link of a small
/// prior would otherwise reach at its floor, a share of that prior, and stall there.
const LINK: Rules =
    Rules { least_asked: 0.0, held_periods: 1, carried_estimate: false, least: crate::config::MIN_LINK_BYTES_PER_SEC };

/// A port's rules: one asked less than a fifth of its estimate is not judged, and one is sampled
/// once held back two periods in a row; its least estimate is the floor's share of the rate its
/// agent registered.
const PORT: Rules = Rules { least_asked: 0.2, held_periods: 2, carried_estimate: true, least: 0.0 };

#[derive(Clone, Debug)]
struct Link {
    /// The topology's distribution.
    prior: Bandwidth,
    /// The most it may be estimated at (a port's registered rate); none on a wide area.
    ceiling: Option<f64>,
    /// Per source in the current period: what its reports said, and the seconds they cover.
    reports: BTreeMap<MachineId, (Carried, f64)>,
    /// The estimate of its bandwidth now; none before the first measurement.
    estimate: Option<f64>,
    /// Measured periods in a row in which it moved next to nothing of what it was asked.
    starved: u32,
    /// Measured periods in a row in which it kept up with nearly all of its estimate.
    kept_up: u32,
    /// Measured periods in a row in which it held its own flows back.
    held: u32,
    /// Periods in a row in which it was down and asked nothing.
    idle_down: u32,
    samples: VecDeque<f64>,
}

/// What a source's flows carried on a link over one report's interval, in bytes: moved, and what
/// their assigned rates asked; apart, the bytes that load the link but whose pace says nothing of
/// it alone (`other_*`): on a wide area the parts relayed through it, which move at the pace of
/// their slower hop; on a port the flows served outside the policy, which asked for nothing and
/// took what they found (their `other_asked` is what they moved).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Carried {
    pub(crate) moved: f64,
    pub(crate) asked: f64,
    pub(crate) other_moved: f64,
    pub(crate) other_asked: f64,
}

impl Carried {
    fn add(&mut self, o: &Carried) {
        self.moved += o.moved;
        self.asked += o.asked;
        self.other_moved += o.other_moved;
        self.other_asked += o.other_asked;
    }

    /// Over `secs`: bytes per second.
    fn per_sec(&self, secs: f64) -> Carried {
        Carried {
            moved: self.moved / secs,
            asked: self.asked / secs,
            other_moved: self.other_moved / secs,
            other_asked: self.other_asked / secs,
        }
    }
}

impl Link {
    fn new(prior: Bandwidth, ceiling: Option<f64>) -> Link {
        Link {
            prior,
            ceiling,
            reports: BTreeMap::new(),
            estimate: None,
            starved: 0,
            kept_up: 0,
            held: 0,
            idle_down: 0,
            samples: VecDeque::new(),
        }
    }

    /// Its bandwidth now, as far as the coordinator knows: its estimate, else its prior's mean.
    fn capacity(&self) -> f64 {
        self.estimate.unwrap_or_else(|| self.prior.mean())
    }

    /// Whether its own flows were asked enough to judge it: something, and at least the rules'
    /// least share of its estimate.
    fn judged(&self, rate: &Carried, rules: Rules) -> bool {
        rate.asked > 0.0 && rate.asked >= rules.least_asked * self.capacity()
    }

    /// Whether its own flows, carrying `rate` (bytes per second over a period), were held back.
    fn held_back(&self, rate: &Carried, rules: Rules) -> bool {
        self.judged(rate, rules) && rate.moved < SATURATED * rate.asked
    }

    /// Ends a period in which it carried `rate`: a sample if it held its own flows back, growth
    /// if it kept up with nearly all of its estimate. Returns (the estimate changed, a sample was
    /// taken).
    fn measure(&mut self, rate: &Carried, rules: Rules) -> (bool, bool) {
        let prior = self.prior.mean();
        let estimate = self.capacity();
        // The link's own flows tell whether it held them back; everything it carried is what it
        // had then.
        let (direct, asked) = (rate.moved, rate.asked);
        let throughput = rate.moved + rate.other_moved;
        let asked_all = rate.asked + rate.other_asked;
        if asked_all <= 0.0 {
            // Routed around while down: after a while it is tried again.
            if self.starved >= DOWN_PERIODS {
                self.idle_down += 1;
                if self.idle_down >= RETRY_PERIODS {
                    (self.starved, self.idle_down) = (0, 0);
                    return (true, false);
                }
            }
            return (false, false);
        }
        self.idle_down = 0;
        // Down by the word of its own flows alone, as for holding them back.
        let judged = self.judged(rate, rules);
        self.starved = if judged && direct < DOWN * asked { self.starved + 1 } else { 0 };
        let held_back = self.held_back(rate, rules);
        self.held = if held_back { self.held + 1 } else { 0 };
        let saturated = held_back && self.held >= rules.held_periods;
        let kept_up = !held_back
            && throughput >= SATURATED * asked_all
            && asked_all >= ASKED_NEARLY_ALL * estimate
            && (!rules.carried_estimate || throughput >= SATURATED * estimate);
        self.kept_up = if kept_up { self.kept_up + 1 } else { 0 };
        let next = if saturated {
            // The link was the bottleneck: what it moved is what it had (a link that moved
            // nothing counts at the floor, so that every sample is a bandwidth).
            let throughput = throughput.max(FLOOR * prior).max(rules.least);
            self.samples.push_back(throughput);
            if self.samples.len() > WINDOW {
                self.samples.pop_front();
            }
            throughput
        } else if kept_up {
            // It kept up with nearly all it was believed to have: it may have more.
            let growth = (PROBE * f64::from(1u32 << (self.kept_up - 1).min(8))).min(1.0);
            estimate.max(throughput) * (1.0 + growth)
        } else {
            return (false, false);
        };
        let next = next.max(FLOOR * prior).max(rules.least).min(self.ceiling.unwrap_or(f64::INFINITY));
        let changed = estimate != next;
        self.estimate = Some(next);
        (changed, saturated)
    }
}

/// The links' measurements.
#[derive(Clone, Debug, Default)]
pub(crate) struct Meter {
    links: Vec<Link>,
    period_start: Nanos,
    /// Samples taken, for the metrics.
    pub(crate) samples_taken: u64,
}

impl Meter {
    /// A meter of links with these priors, from `now`.
    pub(crate) fn new(priors: impl IntoIterator<Item = Bandwidth>, now: Nanos) -> Meter {
        let links = priors.into_iter().map(|prior| Link::new(prior, None)).collect();
        Meter { links, period_start: now, samples_taken: 0 }
    }

    /// Source `src` reported what its flows carried on link `l` over an interval of `secs`
    /// seconds.
    pub(crate) fn report(&mut self, l: usize, src: MachineId, carried: Carried, secs: f64) {
        let r = self.links[l].reports.entry(src).or_default();
        r.0.add(&carried);
        r.1 += secs;
    }

    /// How many links it measures.
    pub(crate) fn links(&self) -> usize {
        self.links.len()
    }

    /// When the current period ends.
    pub(crate) fn period_end(&self) -> Nanos {
        self.period_start.saturating_add(PERIOD)
    }

    /// Ends the period if it is over at `now`: every link asked enough is measured. Returns
    /// whether an estimate changed.
    pub(crate) fn tick(&mut self, now: Nanos) -> bool {
        if now < self.period_end() || self.links.is_empty() {
            return false;
        }
        let mut changed = false;
        for link in &mut self.links {
            let mut rate = Carried::default();
            for (carried, secs) in std::mem::take(&mut link.reports).into_values() {
                if secs > 0.0 {
                    rate.add(&carried.per_sec(secs));
                }
            }
            let (c, sampled) = link.measure(&rate, LINK);
            changed |= c;
            self.samples_taken += u64::from(sampled);
        }
        self.period_start = now;
        changed
    }

    /// Link `l`'s bandwidth now, as far as the coordinator knows: its estimate, else its prior's
    /// mean.
    pub(crate) fn capacity(&self, l: usize) -> f64 {
        self.links[l].capacity()
    }

    /// Link `l`'s distribution: its measured samples once there are enough, else the prior.
    pub(crate) fn distribution(&self, l: usize) -> Option<Bandwidth> {
        let link = &self.links[l];
        (link.samples.len() >= MIN_SAMPLES).then(|| Bandwidth::Empirical(link.samples.iter().copied().collect()))
    }

    /// Whether link `l` is down: in its last measured periods it carried less than a twentieth of
    /// what it was asked.
    pub(crate) fn down(&self, l: usize) -> bool {
        self.links[l].starved >= DOWN_PERIODS
    }

    /// How many samples link `l` holds.
    pub(crate) fn samples(&self, l: usize) -> usize {
        self.links[l].samples.len()
    }
}

/// A port: a machine's uplink (what it sends) or downlink (what it receives).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Port {
    Up(MachineId),
    Down(MachineId),
}

impl Port {
    fn index(self) -> usize {
        match self {
            Port::Up(m) => 2 * m.0 as usize,
            Port::Down(m) => 2 * m.0 as usize + 1,
        }
    }
}

/// A big switch's ports' measurements: each machine's uplink and downlink, its registered port
/// rate the prior and the ceiling; machines join at any time.
#[derive(Clone, Debug, Default)]
pub(crate) struct PortMeter {
    /// By [`Port::index`]; a machine that never joined holds ports at its neighbours' rate,
    /// never asked.
    ports: Vec<Link>,
    /// Per (sender, receiver) in the current period: what the sender's reports said of the flows
    /// between them, and the seconds they cover.
    pairs: BTreeMap<(MachineId, MachineId), (Carried, f64)>,
    period_start: Nanos,
    /// Samples taken, for the metrics.
    pub(crate) samples_taken: u64,
}

impl PortMeter {
    /// Machine `m` joined (or joined again) with this port rate: its ports start from it.
    pub(crate) fn join(&mut self, m: MachineId, port_rate: f64) {
        let port = |rate: f64| Link::new(Bandwidth::Constant(rate), Some(rate));
        let need = Port::Down(m).index() + 1;
        while self.ports.len() < need {
            self.ports.push(port(port_rate));
        }
        self.ports[Port::Up(m).index()] = port(port_rate);
        self.ports[Port::Down(m).index()] = port(port_rate);
    }

    /// Sender `src` reported what its flows to `dst` carried over an interval of `secs` seconds.
    pub(crate) fn report(&mut self, src: MachineId, dst: MachineId, carried: Carried, secs: f64) {
        let r = self.pairs.entry((src, dst)).or_default();
        r.0.add(&carried);
        r.1 += secs;
    }

    /// A flow from `src` to `dst` was found held back by its receiving client: what it reported
    /// so far this period (`moved`, and `asked` by its rates) says nothing of the pair's ports,
    /// but still loads them, as traffic that asked just what it moved; the pair's other flows are
    /// judged as before.
    pub(crate) fn set_apart(&mut self, src: MachineId, dst: MachineId, moved: f64, asked: f64) {
        if let Some((c, _)) = self.pairs.get_mut(&(src, dst)) {
            let (moved, asked) = (moved.clamp(0.0, c.moved), asked.clamp(0.0, c.asked));
            c.moved -= moved;
            c.asked -= asked;
            c.other_moved += moved;
            c.other_asked += moved;
        }
    }

    /// Whether pair `src` to `dst` kept up so far this period says nothing of their ports (their
    /// agents fell silent): what it moved still loads them, as traffic that asked just what it
    /// moved.
    fn forget(&mut self, src: MachineId, dst: MachineId) {
        if let Some((c, _)) = self.pairs.get_mut(&(src, dst)) {
            c.other_moved += c.moved;
            c.other_asked += c.moved;
            (c.moved, c.asked) = (0.0, 0.0);
        }
    }

    /// The agents of `machines` fell silent (stopped, their hosts gone): what their pairs moved
    /// so far this period still loads their ports, but says nothing of whether a port held them
    /// back, as for a flow set apart ([`PortMeter::set_apart`]): a sender whose receiver froze is
    /// not slow.
    pub(crate) fn forget_machines(&mut self, machines: &BTreeSet<MachineId>) {
        if machines.is_empty() {
            return;
        }
        let pairs: Vec<(MachineId, MachineId)> =
            self.pairs.keys().filter(|(s, d)| machines.contains(s) || machines.contains(d)).copied().collect();
        for (s, d) in pairs {
            self.forget(s, d);
        }
    }

    /// When the current period ends.
    pub(crate) fn period_end(&self) -> Nanos {
        self.period_start.saturating_add(PERIOD)
    }

    /// Ends the period if it is over at `now`: the shortfalls are put down to the ports that
    /// explain them, most held back first, and every port asked enough is measured. Returns
    /// whether an estimate changed.
    pub(crate) fn tick(&mut self, now: Nanos) -> bool {
        if now < self.period_end() {
            return false;
        }
        self.period_start = now;
        let pairs: Vec<(Port, Port, Carried)> = std::mem::take(&mut self.pairs)
            .into_iter()
            .filter(|&((s, d), (_, secs))| secs > 0.0 && s != d && Port::Down(s.max(d)).index() < self.ports.len())
            .map(|((s, d), (c, secs))| (Port::Up(s), Port::Down(d), c.per_sec(secs)))
            .collect();
        let mut load: BTreeMap<Port, Carried> = BTreeMap::new();
        // Per port, the most any one pair of the policy's moved through it.
        let mut most: BTreeMap<Port, f64> = BTreeMap::new();
        for &(up, down, c) in &pairs {
            for p in [up, down] {
                load.entry(p).or_default().add(&c);
                let m = most.entry(p).or_default();
                *m = m.max(c.moved);
            }
        }
        // A pair that moved next to nothing (under `DOWN` of what it was asked) through a port
        // through which another pair moved clearly more was not held back by that port: a full
        // port shares what it has among its flows (unevenly under TCP, never down to nothing for
        // one while another keeps moving), so it stalled elsewhere (its other end, or a receiver
        // that stopped reading), and its shortfall is not that port's. A pair that moved a share,
        // even a small one, proves nothing (pairs carry different numbers of flows). Only the
        // policy's flows count here, as traffic outside it takes what it finds.
        let mut excused = vec![[false; 2]; pairs.len()];
        for (&(up, down, c), excused) in pairs.iter().zip(&mut excused) {
            if c.moved >= DOWN * c.asked {
                continue;
            }
            for (end, p) in [up, down].into_iter().enumerate() {
                if c.moved < SATURATED * most[&p] {
                    excused[end] = true;
                    let l = load.get_mut(&p).expect("every pair loads both its ports");
                    l.asked = (l.asked - (c.asked - c.moved)).max(0.0);
                }
            }
        }
        let mut bottlenecks = BTreeSet::new();
        // Of the ports held back, the fullest (what it carried, by the policy or outside it, over
        // its estimate): a bottleneck carries all it has, while its flows' other ends carry what
        // it lets through. Neither falling short by the greatest share (TCP shares a slow link
        // evenly, so the flow asked the most falls shortest) nor by the most bytes tells them
        // apart when traffic outside the policy fills a port.
        let fullest = |load: &BTreeMap<Port, Carried>, bottlenecks: &BTreeSet<Port>| {
            load.iter()
                .filter(|&(p, c)| !bottlenecks.contains(p) && self.ports[p.index()].held_back(c, PORT))
                .map(|(&p, c)| (p, (c.moved + c.other_moved) / self.ports[p.index()].capacity()))
                .reduce(|a, b| if b.1 > a.1 { b } else { a })
        };
        while let Some((p, _)) = fullest(&load, &bottlenecks) {
            bottlenecks.insert(p);
            // What held its flows back did not hold them back at their other ends (a pair
            // excused at either end was already put down to neither or to its other end).
            for (&(up, down, c), excused) in pairs.iter().zip(&excused) {
                let other = if excused[0] || excused[1] {
                    continue;
                } else if up == p {
                    down
                } else if down == p {
                    up
                } else {
                    continue;
                };
                if !bottlenecks.contains(&other) {
                    let o = load.get_mut(&other).expect("every pair loads both its ports");
                    o.asked = (o.asked - (c.asked - c.moved).max(0.0)).max(0.0);
                }
            }
        }
        let mut changed = false;
        for (p, c) in load {
            let (ch, sampled) = self.ports[p.index()].measure(&c, PORT);
            changed |= ch;
            self.samples_taken += u64::from(sampled);
        }
        changed
    }

    /// Port `p`'s bandwidth now, as far as the coordinator knows (none: its machine never joined).
    pub(crate) fn capacity(&self, p: Port) -> Option<f64> {
        self.ports.get(p.index()).map(Link::capacity)
    }

    /// How many samples port `p` holds.
    #[cfg(test)]
    fn samples(&self, p: Port) -> usize {
        self.ports.get(p.index()).map_or(0, |l| l.samples.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Nanos {
        Nanos::from_millis(v)
    }

    /// `rate` bytes per second moved and `asked` asked over one period, reported by one source.
    fn period(m: &mut Meter, moved: f64, asked: f64) {
        let secs = PERIOD.as_secs_f64();
        m.report(0, MachineId(0), direct(moved * secs, asked * secs), secs);
    }

    fn direct(moved: f64, asked: f64) -> Carried {
        Carried { moved, asked, ..Carried::default() }
    }

    /// Relayed parts load a link but do not say it held them back: a link whose own flows kept
    /// up is not measured down for a slow relayed part (its other hop was the bottleneck), yet
    /// when its own flows fall short, all it carried is the sample.
    #[test]
    fn relayed_parts_count_in_what_a_link_carried_not_in_whether_it_held_back() {
        let mut m = Meter::new([Bandwidth::Constant(1e7)], Nanos::ZERO);
        let secs = PERIOD.as_secs_f64();
        let slow_relay =
            Carried { moved: 4e6 * secs, asked: 4e6 * secs, other_moved: 5e5 * secs, other_asked: 5e6 * secs };
        m.report(0, MachineId(0), slow_relay, secs);
        m.tick(PERIOD);
        assert_eq!((m.samples(0), m.capacity(0)), (0, 1e7), "not held back by this link");
        let held = Carried { moved: 3e6 * secs, asked: 6e6 * secs, other_moved: 2e6 * secs, other_asked: 4e6 * secs };
        m.report(0, MachineId(0), held, secs);
        m.tick(ms(800));
        assert_eq!(m.samples(0), 1);
        assert!((m.capacity(0) - 5e6).abs() < 1e-6, "{}", m.capacity(0));
    }

    /// Two sources' reports add up: each one's rate over the time its own reports covered.
    #[test]
    fn sources_add_up_each_over_its_own_reports() {
        let mut m = Meter::new([Bandwidth::Constant(1e7)], Nanos::ZERO);
        // Source 0 reported 300 kB over 0.1 s, source 1 600 kB over 0.3 s: 3 + 2 MB/s, asked
        // 10 MB/s in all.
        m.report(0, MachineId(0), direct(3e5, 5e5), 0.1);
        m.report(0, MachineId(1), direct(6e5, 1.5e6), 0.3);
        assert!(m.tick(PERIOD));
        assert!((m.capacity(0) - 5e6).abs() < 1e-6, "{}", m.capacity(0));
    }

    /// A link asked 1 MB/s that moves 500 kB/s in a period was the bottleneck: 500 kB/s is a
    /// sample and the estimate; one that keeps up while asked nearly all of its estimate grows by
    /// the probe.
    #[test]
    fn a_saturated_link_is_measured_and_one_that_keeps_up_grows() {
        let mut m = Meter::new([Bandwidth::Constant(1e6)], Nanos::ZERO);
        period(&mut m, 5e5, 1e6);
        assert!(m.tick(PERIOD));
        assert!((m.capacity(0) - 5e5).abs() < 1e-6);
        assert_eq!(m.samples(0), 1);
        // Asked 500 kB/s (all of the estimate), it moves 500 kB/s: it may have more.
        period(&mut m, 5e5, 5e5);
        assert!(m.tick(ms(800)));
        assert!((m.capacity(0) - 5e5 * (1.0 + PROBE)).abs() < 1e-6, "{}", m.capacity(0));
        assert_eq!(m.samples(0), 1, "a link that kept up gives no sample");
        // Keeping up again, it grows faster, to at most twice a period.
        let mut expect = 5e5 * (1.0 + PROBE);
        for (k, growth) in [(3u64, 2.0 * PROBE), (4, 4.0 * PROBE), (5, 1.0), (6, 1.0)] {
            let c = m.capacity(0);
            period(&mut m, c, c);
            m.tick(ms(400 * k));
            expect *= 1.0 + growth;
            assert!((m.capacity(0) - expect).abs() < 1e-6, "period {k}: {} against {expect}", m.capacity(0));
        }
    }

    /// A link asked little, or nothing, says nothing of its bandwidth; before any measurement
    /// the capacity is the prior's mean and the distribution the prior (none returned).
    #[test]
    fn a_link_asked_little_tells_nothing() {
        let mut m = Meter::new([Bandwidth::Uniform(80.0, 120.0)], Nanos::ZERO);
        assert_eq!(m.capacity(0), 100.0);
        period(&mut m, 10.0, 10.0);
        assert!(!m.tick(PERIOD));
        assert_eq!(m.capacity(0), 100.0);
        assert!(m.distribution(0).is_none());
        period(&mut m, 0.0, 0.0);
        assert!(!m.tick(ms(500)), "a period is not over before its end");
        // Bytes moved outside the policy (nothing asked) say nothing either.
        period(&mut m, 500.0, 0.0);
        assert!(!m.tick(ms(800)));
        assert_eq!(m.capacity(0), 100.0);
    }

    /// Once enough periods were saturated, the window is the distribution; a link that moved
    /// nothing keeps a floor, so it is asked again.
    #[test]
    fn the_window_becomes_the_distribution() {
        let mut m = Meter::new([Bandwidth::Constant(1e7)], Nanos::ZERO);
        for k in 1..=MIN_SAMPLES as u64 {
            period(&mut m, 1e6 * k as f64, 1e8);
            m.tick(ms(400 * k));
        }
        let Some(Bandwidth::Empirical(s)) = m.distribution(0) else { panic!("a measured distribution") };
        assert_eq!(s.len(), MIN_SAMPLES);
        assert!((s[0] - 1e6).abs() < 1e-6 && (s[MIN_SAMPLES - 1] - 8e6).abs() < 1e-6, "{s:?}");
        period(&mut m, 0.0, 1e8);
        m.tick(ms(400 * (MIN_SAMPLES as u64 + 1)));
        assert!((m.capacity(0) - FLOOR * 1e7).abs() < 1e-6, "{}", m.capacity(0));
        assert!(!m.down(0), "one period that carried nothing is not yet a link down");
        for k in 2..=u64::from(DOWN_PERIODS) {
            assert!(!m.down(0), "fewer than DOWN_PERIODS are not");
            period(&mut m, 0.0, 1e8);
            m.tick(ms(400 * (MIN_SAMPLES as u64 + k)));
        }
        assert!(m.down(0), "DOWN_PERIODS are");
        // Every sample is a bandwidth a distribution takes: positive.
        let Some(Bandwidth::Empirical(s)) = m.distribution(0) else { panic!("a measured distribution") };
        assert!(s.iter().all(|&v| v > 0.0) && Bandwidth::Empirical(s).validate().is_ok());
    }

    /// A link of a small prior that moves nothing is estimated, and sampled, at the least the
    /// agents' data plane can pace, not at its floor's share of the prior (25 kB/s of a 10 Mbit/s
    /// link, a 4 KiB frame every 160 ms), at which a get across it would crawl a frame or two a
    /// period and its estimate never grow back; a port keeps its share of its registered rate.
    #[test]
    fn a_link_is_never_estimated_below_what_the_data_plane_can_pace() {
        use crate::config::MIN_LINK_BYTES_PER_SEC;
        let mut m = Meter::new([Bandwidth::Constant(1.25e6)], Nanos::ZERO);
        const { assert!(FLOOR * 1.25e6 < MIN_LINK_BYTES_PER_SEC) };
        for k in 1..=MIN_SAMPLES as u64 {
            period(&mut m, 0.0, 1.25e6);
            m.tick(ms(400 * k));
            assert_eq!(m.capacity(0), MIN_LINK_BYTES_PER_SEC, "period {k}");
        }
        let Some(Bandwidth::Empirical(s)) = m.distribution(0) else { panic!("a measured distribution") };
        assert!(s.iter().all(|&v| v == MIN_LINK_BYTES_PER_SEC), "{s:?}");
        let mut ports = ports(2, 1.25e6);
        for k in 0..4 {
            twice(&mut ports, ms(800 * k), &[(0, 1, 0.0, 1.25e6)]);
        }
        assert!(up(&ports, 0).unwrap().min(down(&ports, 1).unwrap()) < MIN_LINK_BYTES_PER_SEC);
    }

    fn port_period(m: &mut PortMeter, src: u32, dst: u32, moved: f64, asked: f64) {
        let secs = PERIOD.as_secs_f64();
        m.report(MachineId(src), MachineId(dst), direct(moved * secs, asked * secs), secs);
    }

    fn ports(machines: u32, rate: f64) -> PortMeter {
        let mut m = PortMeter::default();
        for k in 0..machines {
            m.join(MachineId(k), rate);
        }
        m
    }

    /// Two periods of the same reports, `(src, dst, moved, asked)`, from `at`: whether the
    /// either changed an estimate.
    fn twice(m: &mut PortMeter, at: Nanos, reports: &[(u32, u32, f64, f64)]) -> bool {
        let mut changed = false;
        for k in 1..=2 {
            for &(src, dst, moved, asked) in reports {
                port_period(m, src, dst, moved, asked);
            }
            changed |= m.tick(at.saturating_add(Nanos(PERIOD.0 * k)));
        }
        changed
    }

    fn up(m: &PortMeter, k: u32) -> Option<f64> {
        m.capacity(Port::Up(MachineId(k)))
    }

    fn down(m: &PortMeter, k: u32) -> Option<f64> {
        m.capacity(Port::Down(MachineId(k)))
    }

    /// A sender whose uplink carries half of what it is asked, to two healthy receivers: once it
    /// held its flows back two periods in a row its uplink is measured at what it moved, and the
    /// receivers' downlinks, whose shortfall it explains, keep their rate; the same the other way
    /// round for a slow downlink, even when TCP's even sharing of it makes the sender asked more
    /// fall short by the greater share.
    #[test]
    fn a_shortfall_is_put_down_to_the_port_that_explains_it() {
        let mut m = ports(3, 1000.0);
        port_period(&mut m, 0, 1, 250.0, 500.0);
        port_period(&mut m, 0, 2, 250.0, 500.0);
        assert!(!m.tick(PERIOD), "one period held back is not yet a slow port");
        assert!(twice(&mut m, PERIOD, &[(0, 1, 250.0, 500.0), (0, 2, 250.0, 500.0)]));
        assert_eq!(up(&m, 0), Some(500.0));
        assert_eq!(m.samples(Port::Up(MachineId(0))), 2);
        for k in [1, 2] {
            assert_eq!(down(&m, k), Some(1000.0), "downlink {k}");
            assert_eq!(m.samples(Port::Down(MachineId(k))), 0, "downlink {k}");
        }
        let mut m = ports(3, 1000.0);
        assert!(twice(&mut m, Nanos::ZERO, &[(1, 0, 250.0, 800.0), (2, 0, 250.0, 300.0)]));
        assert_eq!(down(&m, 0), Some(500.0));
        assert_eq!((up(&m, 1), up(&m, 2)), (Some(1000.0), Some(1000.0)));
    }

    /// A receiver that stops reading holds back only its own pair: its sender's uplink, whose other
    /// pair moved all it was asked, keeps its rate, so the flows it sends elsewhere keep theirs.
    /// A port that held back every pair alike is still measured, and a stalled pair that is its
    /// receiver's only one is put down to that receiver.
    #[test]
    fn a_pair_held_back_while_another_through_its_port_kept_up_is_not_that_ports_fault() {
        let mut m = ports(3, 1000.0);
        for k in 0..4 {
            twice(&mut m, ms(800 * k), &[(0, 1, 0.0, 500.0), (0, 2, 500.0, 500.0)]);
        }
        assert_eq!(up(&m, 0), Some(1000.0), "the sender's uplink");
        assert_eq!(m.samples(Port::Up(MachineId(0))), 0);
        assert_eq!(down(&m, 2), Some(1000.0), "the reading receiver's downlink");
        assert!(down(&m, 1).unwrap() < 1000.0, "the stalled pair's only other end: {:?}", down(&m, 1));
        // A slow uplink shared by two pairs that move alike is the uplink's fault, as before.
        let mut m = ports(3, 1000.0);
        twice(&mut m, Nanos::ZERO, &[(0, 1, 200.0, 500.0), (0, 2, 190.0, 500.0)]);
        assert_eq!(up(&m, 0), Some(390.0));
        assert_eq!((down(&m, 1), down(&m, 2)), (Some(1000.0), Some(1000.0)));
        // A stalled pair into a receiver that another sender fills: neither end is sampled.
        let mut m = ports(3, 1000.0);
        twice(&mut m, Nanos::ZERO, &[(0, 2, 0.0, 500.0), (1, 2, 500.0, 500.0), (0, 1, 500.0, 500.0)]);
        assert_eq!(m.samples(Port::Up(MachineId(0))) + m.samples(Port::Down(MachineId(2))), 0);
        assert_eq!((up(&m, 0), down(&m, 2)), (Some(1000.0), Some(1000.0)));
    }

    /// A slow uplink (400 a second) carries two flows to machine 1, one of which (50 of 500
    /// asked) is then found held back by its reader, and one to machine 2 that kept up (100 of
    /// 100): setting the held-back flow apart leaves its pair's other flow (250 of 500) to show
    /// the uplink held back, which is measured at what all three carried; forgetting the whole
    /// pair would leave the uplink unjudged.
    #[test]
    fn a_flow_set_apart_for_its_reader_leaves_its_pair_judged_by_the_others() {
        let secs = PERIOD.as_secs_f64();
        let mut m = ports(3, 1000.0);
        for k in 1..=2 {
            // One report of the pair's two flows, as a heartbeat makes.
            port_period(&mut m, 0, 1, 50.0 + 250.0, 500.0 + 500.0);
            port_period(&mut m, 0, 2, 100.0, 100.0);
            m.set_apart(MachineId(0), MachineId(1), 50.0 * secs, 500.0 * secs);
            m.tick(Nanos(PERIOD.0 * k));
        }
        assert_eq!(up(&m, 0), Some(400.0), "measured at what all three moved");
        assert_eq!((down(&m, 1), down(&m, 2)), (Some(1000.0), Some(1000.0)));
    }

    /// A slow port shares what it has unevenly (pairs of more flows, or luckier ones under TCP,
    /// get more): it is still the one measured, and the other ends of its pairs, which moved a
    /// share of what they were asked, are not taken for slow, however uneven the shares.
    #[test]
    fn a_slow_port_shared_unevenly_is_measured_and_its_pairs_other_ends_are_not() {
        // (reports, the slow port, its rate)
        type Case<'a> = (&'a [(u32, u32, f64, f64)], Port, f64);
        let cases: [Case; 4] = [
            (&[(0, 1, 225.0, 750.0), (0, 2, 75.0, 250.0)], Port::Up(MachineId(0)), 300.0),
            (&[(0, 1, 200.0, 500.0), (0, 2, 100.0, 500.0)], Port::Up(MachineId(0)), 300.0),
            (&[(0, 2, 225.0, 750.0), (1, 2, 75.0, 250.0)], Port::Down(MachineId(2)), 300.0),
            (&[(0, 1, 100.0, 100.0), (0, 2, 50.0, 900.0)], Port::Up(MachineId(0)), 150.0),
        ];
        for (reports, slow, rate) in cases {
            let mut m = ports(3, 1000.0);
            for k in 0..4 {
                twice(&mut m, ms(800 * k), reports);
            }
            assert_eq!(m.capacity(slow), Some(rate), "{reports:?}");
            for k in 0..3 {
                for p in [Port::Up(MachineId(k)), Port::Down(MachineId(k))] {
                    if p != slow {
                        assert_eq!(m.capacity(p), Some(1000.0), "{p:?} in {reports:?}");
                    }
                }
            }
        }
    }

    /// A receiver filled by traffic outside the policy holds back the policy's flows to it: the
    /// fullest port held back is the receiver's, not its scheduled senders', whose uplinks carry
    /// only what it lets through.
    #[test]
    fn a_port_filled_outside_the_policy_is_not_taken_for_its_senders_fault() {
        let mut m = ports(3, 1000.0);
        let secs = PERIOD.as_secs_f64();
        for k in 1..=2 {
            port_period(&mut m, 1, 0, 100.0, 500.0);
            let bypassed = Carried { other_moved: 900.0 * secs, other_asked: 900.0 * secs, ..Carried::default() };
            m.report(MachineId(2), MachineId(0), bypassed, secs);
            m.tick(ms(400 * k));
        }
        assert_eq!(up(&m, 1), Some(1000.0));
        assert_eq!(down(&m, 0), Some(1000.0), "it carried all it has");
    }

    /// A port asked its whole rate that moves nearly all of it is healthy: never offered more
    /// than it registered, never sampled; one asked a tenth of its rate that moves half of that
    /// is not judged; a port that fell grows back to its rate, and no further, as it keeps up.
    #[test]
    fn a_healthy_port_stays_at_its_rate_and_one_asked_little_is_not_judged() {
        let mut m = ports(2, 1000.0);
        for k in 1..=5 {
            port_period(&mut m, 0, 1, 900.0, 1000.0);
            assert!(!m.tick(ms(400 * k)));
        }
        assert_eq!(up(&m, 0), Some(1000.0));
        assert_eq!(m.samples(Port::Down(MachineId(1))), 0);
        assert!(!twice(&mut m, ms(2000), &[(0, 1, 50.0, 100.0)]));
        assert_eq!(up(&m, 0), Some(1000.0));
        assert!(twice(&mut m, ms(2800), &[(0, 1, 400.0, 1000.0)]));
        assert_eq!(up(&m, 0), Some(400.0));
        for k in 10..=14 {
            let c = up(&m, 0).unwrap();
            port_period(&mut m, 0, 1, c, c);
            m.tick(ms(400 * k));
        }
        assert_eq!(up(&m, 0), Some(1000.0));
    }

    /// Bytes served outside the policy load a port but do not say it held anything back; when
    /// the policy's own flows fall short, everything it carried is the sample.
    #[test]
    fn a_ports_unscheduled_bytes_count_in_what_it_carried() {
        let mut m = ports(2, 1000.0);
        let secs = PERIOD.as_secs_f64();
        let c =
            Carried { moved: 200.0 * secs, asked: 500.0 * secs, other_moved: 300.0 * secs, other_asked: 300.0 * secs };
        for k in 1..=2 {
            m.report(MachineId(0), MachineId(1), c, secs);
            m.tick(ms(400 * k));
        }
        assert_eq!(up(&m, 0), Some(500.0));
    }

    /// Machines join at any time, with ids in any order; one that joins again starts afresh.
    #[test]
    fn machines_join_at_any_time_and_start_afresh() {
        let mut m = PortMeter::default();
        assert_eq!(up(&m, 3), None);
        m.join(MachineId(3), 1000.0);
        m.join(MachineId(0), 2000.0);
        assert_eq!(down(&m, 3), Some(1000.0));
        assert_eq!(up(&m, 0), Some(2000.0));
        twice(&mut m, Nanos::ZERO, &[(3, 0, 100.0, 1000.0)]);
        assert_eq!(up(&m, 3), Some(100.0));
        m.join(MachineId(3), 1000.0);
        assert_eq!(up(&m, 3), Some(1000.0));
        // A report naming a machine that never joined is left out.
        port_period(&mut m, 0, 9, 0.0, 1000.0);
        assert!(!m.tick(ms(1200)));
    }

    /// A link down that flows were routed around is asked nothing: after `RETRY_PERIODS` of
    /// that it is taken for up again, and down again `DOWN_PERIODS` after flows find it still is.
    #[test]
    fn a_link_down_and_asked_nothing_is_tried_again() {
        let mut m = Meter::new([Bandwidth::Constant(100.0)], Nanos::ZERO);
        let mut k = 0;
        let mut next = |m: &mut Meter, moved: f64, asked: f64| {
            k += 1;
            period(m, moved, asked);
            m.tick(ms(400 * k))
        };
        for _ in 0..DOWN_PERIODS {
            next(&mut m, 0.0, 100.0);
        }
        assert!(m.down(0));
        for _ in 1..RETRY_PERIODS {
            assert!(!next(&mut m, 0.0, 0.0));
            assert!(m.down(0), "still down while it was not tried");
        }
        assert!(next(&mut m, 0.0, 0.0), "tried again: a change the policy must see");
        assert!(!m.down(0));
        for _ in 0..DOWN_PERIODS {
            next(&mut m, 0.0, 100.0);
        }
        assert!(m.down(0), "still down when tried");
    }
}
