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

/// How much a link that kept up with nearly all of its estimate grows in a period.
const PROBE: f64 = 0.25;

/// The most samples a link keeps (the sliding window).
const WINDOW: usize = 64;

/// Samples a link needs before its window stands for its distribution.
const MIN_SAMPLES: usize = 8;

/// A link that moved less than this share of what it was asked is down.
const DOWN: f64 = 0.05;

/// The lowest estimate, as a share of the prior's mean: a link that moved nothing is not taken
/// for dead for good (it is asked again, and grows back as it keeps up).
const FLOOR: f64 = 0.02;

#[derive(Clone, Debug)]
struct Link {
    /// The topology's distribution.
    prior: Bandwidth,
    /// Per source in the current period: bytes reported moved, bytes the assigned rates asked
    /// over the same reports' intervals, and the seconds those intervals cover.
    reports: BTreeMap<MachineId, (f64, f64, f64)>,
    /// The estimate of its bandwidth now; none before the first measurement.
    estimate: Option<f64>,
    /// Its last measured period found it down.
    down: bool,
    samples: VecDeque<f64>,
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
                down: false,
                samples: VecDeque::new(),
            })
            .collect();
        Meter { links, period_start: now, samples_taken: 0 }
    }

    /// Source `src` reported `moved` bytes of its flows on link `l` over an interval of `secs`
    /// seconds, in which their assigned rates asked `asked` bytes (nothing of a flow served
    /// outside the policy).
    pub(crate) fn report(&mut self, l: usize, src: MachineId, moved: f64, asked: f64, secs: f64) {
        let r = self.links[l].reports.entry(src).or_default();
        r.0 += moved;
        r.1 += asked;
        r.2 += secs;
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
            let (mut throughput, mut asked) = (0.0, 0.0);
            for (moved, asking, secs) in std::mem::take(&mut link.reports).into_values() {
                if secs > 0.0 {
                    throughput += moved / secs;
                    asked += asking / secs;
                }
            }
            let prior = link.prior.mean();
            let estimate = link.estimate.unwrap_or(prior);
            if asked <= 0.0 {
                continue;
            }
            link.down = throughput < DOWN * asked;
            let next = if throughput < SATURATED * asked {
                // The link was the bottleneck: what it moved is what it had.
                link.samples.push_back(throughput);
                if link.samples.len() > WINDOW {
                    link.samples.pop_front();
                }
                self.samples_taken += 1;
                throughput
            } else if asked >= ASKED_NEARLY_ALL * estimate {
                // It kept up with nearly all it was believed to have: it may have more.
                estimate.max(throughput) * (1.0 + PROBE)
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

    /// Whether link `l`'s last measured period found it down: it carried less than a twentieth
    /// of what it was asked.
    pub(crate) fn down(&self, l: usize) -> bool {
        self.links[l].down
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
        m.report(0, MachineId(0), moved * secs, asked * secs, secs);
    }

    /// Two sources' reports add up: each one's rate over the time its own reports covered.
    #[test]
    fn sources_add_up_each_over_its_own_reports() {
        let mut m = Meter::new([Bandwidth::Constant(1000.0)], Nanos::ZERO);
        // Source 0 reported 30 bytes over 0.1 s, source 1 60 bytes over 0.3 s: 300 + 200 B/s,
        // asked 1000 in all.
        m.report(0, MachineId(0), 30.0, 50.0, 0.1);
        m.report(0, MachineId(1), 60.0, 150.0, 0.3);
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
    }
}
