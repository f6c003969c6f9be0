//! What the coordinator measures of a wide area: each link's available bandwidth, from the bytes
//! its senders report moved and the rates it asked of the link, as samples of the link's
//! bandwidth distribution (Siphon §4: aggregators collect link statistics for the controller).
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
//! Pure: the core calls it with `now` and what it learnt; it reads no clock.

use std::collections::{BTreeMap, VecDeque};

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
/// that flows try it (and it is measured down again at once if it still is).
const RETRY_PERIODS: u32 = 5;

/// The lowest estimate, as a share of the prior's mean: a link that moved nothing is not taken
/// for dead for good (it is asked again, and grows back as it keeps up).
const FLOOR: f64 = 0.02;

#[derive(Clone, Debug)]
struct Link {
    /// The topology's distribution.
    prior: Bandwidth,
    /// Per source in the current period: what its reports said, and the seconds they cover.
    reports: BTreeMap<MachineId, (Carried, f64)>,
    /// The estimate of its bandwidth now; none before the first measurement.
    estimate: Option<f64>,
    /// Measured periods in a row in which it moved next to nothing of what it was asked.
    starved: u32,
    /// Measured periods in a row in which it kept up with nearly all of its estimate.
    kept_up: u32,
    /// Periods in a row in which it was down and asked nothing.
    idle_down: u32,
    samples: VecDeque<f64>,
}

/// What a source's flows carried on a link over one report's interval, in bytes: moved, and what
/// their assigned rates asked (nothing of a flow served outside the policy); those that cross the
/// link directly apart from the parts relayed through it (which move at the pace of their slower
/// hop, so that what they carried says nothing of this link alone).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Carried {
    pub(crate) moved: f64,
    pub(crate) asked: f64,
    pub(crate) relayed_moved: f64,
    pub(crate) relayed_asked: f64,
}

impl Carried {
    fn add(&mut self, o: &Carried) {
        self.moved += o.moved;
        self.asked += o.asked;
        self.relayed_moved += o.relayed_moved;
        self.relayed_asked += o.relayed_asked;
    }

    /// Over `secs`: bytes per second.
    fn per_sec(&self, secs: f64) -> Carried {
        Carried {
            moved: self.moved / secs,
            asked: self.asked / secs,
            relayed_moved: self.relayed_moved / secs,
            relayed_asked: self.relayed_asked / secs,
        }
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
        let links = priors
            .into_iter()
            .map(|prior| Link {
                prior,
                reports: BTreeMap::new(),
                estimate: None,
                starved: 0,
                kept_up: 0,
                idle_down: 0,
                samples: VecDeque::new(),
            })
            .collect();
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
            let prior = link.prior.mean();
            let estimate = link.estimate.unwrap_or(prior);
            // The link's own flows tell whether it held them back; everything it carried is what it
            // had then.
            let (direct, asked) = (rate.moved, rate.asked);
            let throughput = rate.moved + rate.relayed_moved;
            let asked_all = rate.asked + rate.relayed_asked;
            if asked_all <= 0.0 {
                // Routed around while down: after a while it is tried again.
                if link.starved >= DOWN_PERIODS {
                    link.idle_down += 1;
                    if link.idle_down >= RETRY_PERIODS {
                        (link.starved, link.idle_down) = (0, 0);
                        changed = true;
                    }
                }
                continue;
            }
            link.idle_down = 0;
            // Down by the word of its own flows alone, as for holding them back.
            link.starved = if asked > 0.0 && direct < DOWN * asked { link.starved + 1 } else { 0 };
            let saturated = asked > 0.0 && direct < SATURATED * asked;
            let kept_up = !saturated && throughput >= SATURATED * asked_all && asked_all >= ASKED_NEARLY_ALL * estimate;
            link.kept_up = if kept_up { link.kept_up + 1 } else { 0 };
            let next = if saturated {
                // The link was the bottleneck: what it moved is what it had (a link that moved
                // nothing counts at the floor, so that every sample is a bandwidth).
                let throughput = throughput.max(FLOOR * prior);
                link.samples.push_back(throughput);
                if link.samples.len() > WINDOW {
                    link.samples.pop_front();
                }
                self.samples_taken += 1;
                throughput
            } else if kept_up {
                // It kept up with nearly all it was believed to have: it may have more.
                let growth = (PROBE * f64::from(1u32 << (link.kept_up - 1).min(8))).min(1.0);
                estimate.max(throughput) * (1.0 + growth)
            } else {
                continue;
            };
            let next = next.max(FLOOR * prior);
            if link.estimate != Some(next) {
                link.estimate = Some(next);
                changed = true;
            }
        }
        self.period_start = now;
        changed
    }

    /// Link `l`'s bandwidth now, as far as the coordinator knows: its estimate, else its prior's
    /// mean.
    pub(crate) fn capacity(&self, l: usize) -> f64 {
        let link = &self.links[l];
        link.estimate.unwrap_or_else(|| link.prior.mean())
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
        let mut m = Meter::new([Bandwidth::Constant(1000.0)], Nanos::ZERO);
        let secs = PERIOD.as_secs_f64();
        let slow_relay = Carried {
            moved: 400.0 * secs,
            asked: 400.0 * secs,
            relayed_moved: 50.0 * secs,
            relayed_asked: 500.0 * secs,
        };
        m.report(0, MachineId(0), slow_relay, secs);
        m.tick(PERIOD);
        assert_eq!((m.samples(0), m.capacity(0)), (0, 1000.0), "not held back by this link");
        let held = Carried {
            moved: 300.0 * secs,
            asked: 600.0 * secs,
            relayed_moved: 200.0 * secs,
            relayed_asked: 400.0 * secs,
        };
        m.report(0, MachineId(0), held, secs);
        m.tick(ms(800));
        assert_eq!(m.samples(0), 1);
        assert!((m.capacity(0) - 500.0).abs() < 1e-9, "{}", m.capacity(0));
    }

    /// Two sources' reports add up: each one's rate over the time its own reports covered.
    #[test]
    fn sources_add_up_each_over_its_own_reports() {
        let mut m = Meter::new([Bandwidth::Constant(1000.0)], Nanos::ZERO);
        // Source 0 reported 30 bytes over 0.1 s, source 1 60 bytes over 0.3 s: 300 + 200 B/s,
        // asked 1000 in all.
        m.report(0, MachineId(0), direct(30.0, 50.0), 0.1);
        m.report(0, MachineId(1), direct(60.0, 150.0), 0.3);
        assert!(m.tick(PERIOD));
        assert!((m.capacity(0) - 500.0).abs() < 1e-9, "{}", m.capacity(0));
    }

    /// A link asked 100 B/s that moves 50 in a period was the bottleneck: 50 is a sample and the
    /// estimate; one that keeps up while asked nearly all of its estimate grows by the probe.
    #[test]
    fn a_saturated_link_is_measured_and_one_that_keeps_up_grows() {
        let mut m = Meter::new([Bandwidth::Constant(100.0)], Nanos::ZERO);
        period(&mut m, 50.0, 100.0);
        assert!(m.tick(PERIOD));
        assert!((m.capacity(0) - 50.0).abs() < 1e-9);
        assert_eq!(m.samples(0), 1);
        // Asked 50 (all of the estimate), it moves 50: it may have more.
        period(&mut m, 50.0, 50.0);
        assert!(m.tick(ms(800)));
        assert!((m.capacity(0) - 50.0 * (1.0 + PROBE)).abs() < 1e-9, "{}", m.capacity(0));
        assert_eq!(m.samples(0), 1, "a link that kept up gives no sample");
        // Keeping up again, it grows faster, to at most twice a period.
        let mut expect = 50.0 * (1.0 + PROBE);
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
        let mut m = Meter::new([Bandwidth::Constant(100.0)], Nanos::ZERO);
        for k in 1..=MIN_SAMPLES as u64 {
            period(&mut m, 10.0 * k as f64, 1000.0);
            m.tick(ms(400 * k));
        }
        let Some(Bandwidth::Empirical(s)) = m.distribution(0) else { panic!("a measured distribution") };
        assert_eq!(s.len(), MIN_SAMPLES);
        assert!((s[0] - 10.0).abs() < 1e-9 && (s[MIN_SAMPLES - 1] - 80.0).abs() < 1e-9, "{s:?}");
        period(&mut m, 0.0, 1000.0);
        m.tick(ms(400 * (MIN_SAMPLES as u64 + 1)));
        assert!((m.capacity(0) - FLOOR * 100.0).abs() < 1e-9, "{}", m.capacity(0));
        assert!(!m.down(0), "one period that carried nothing is not yet a link down");
        for k in 2..=u64::from(DOWN_PERIODS) {
            assert!(!m.down(0), "fewer than DOWN_PERIODS are not");
            period(&mut m, 0.0, 1000.0);
            m.tick(ms(400 * (MIN_SAMPLES as u64 + k)));
        }
        assert!(m.down(0), "DOWN_PERIODS are");
        // Every sample is a bandwidth a distribution takes: positive.
        let Some(Bandwidth::Empirical(s)) = m.distribution(0) else { panic!("a measured distribution") };
        assert!(s.iter().all(|&v| v > 0.0) && Bandwidth::Empirical(s).validate().is_ok());
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
