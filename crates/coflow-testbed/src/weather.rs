//! The weather on a wide-area testbed: every link's rate redrawn over time from its
//! distribution and applied with `tc`, each change recorded when it took effect, so that the
//! simulator replays the very sequence the run saw ([`coflow_sim::weather::WeatherLog`]).
//!
//! Interval `g` (every [`Datacenters::redraw`] from the start) holds the draws
//! [`coflow_sim::draw`]`(wan, seed, g)`: the simulator's own draws for that seed. A thread
//! applies them link by link and records each link's change at the time its `tc` command
//! returned; [`WeatherRun::finish`] turns the record into steps from the replay's start, the
//! step in force then becoming the first.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use coflow_core::Rate;
use coflow_sim::weather::{WeatherLog, WeatherStep};

use crate::TestbedError;
use crate::net::Names;
use crate::topology::Datacenters;
use crate::wide_area::set_link_rate;

/// What the weather thread applied: when, and every link's rate (wire bytes per second) from then.
type Applied = Vec<(Instant, Vec<f64>)>;

/// A wide-area link down for a while: both directions between two datacenters carry next to
/// nothing ([`DOWN_RATE`]) from `at` after the weather starts, for `lasts`, then the weather's
/// draws again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outage {
    /// The two datacenters.
    pub between: (usize, usize),
    /// When the link goes down, from the weather's start (the replay's).
    pub at: Duration,
    /// How long it stays down.
    pub lasts: Duration,
}

/// A link that is down carries this, in wire bytes per second (8 kbit/s): `htb` shapes no rate of
/// zero, and a link this slow moves nothing a transfer notices.
pub const DOWN_RATE: f64 = 1_000.0;

/// The latest an outage starts, and the longest it lasts: an hour, as a fault strikes at most an
/// hour into a replay. Later, an outage would fall after any replay the testbed runs and take
/// nothing down.
pub const MAX_OUTAGE: Duration = Duration::from_secs(3600);

impl Outage {
    /// An outage written `A-B@AT+LASTS`, datacenters by name and times with their units, e.g.
    /// `toronto-montreal@3s+5s`; the error says what is wrong.
    pub fn parse(spec: &str, dcs: &Datacenters) -> Result<Outage, String> {
        let form = || format!("{spec:?}: expected A-B@AT+LASTS, e.g. toronto-montreal@3s+5s");
        let (pair, times) = spec.split_once('@').ok_or_else(form)?;
        let (at, lasts) = times.split_once('+').ok_or_else(form)?;
        let (a, b) = pair.split_once('-').ok_or_else(form)?;
        let dc = |name: &str| {
            (0..dcs.wan.dcs()).find(|&d| dcs.wan.name(d) == name).map(|d| d as usize).ok_or_else(|| {
                let known: Vec<&str> = (0..dcs.wan.dcs()).map(|d| dcs.wan.name(d)).collect();
                format!("{spec:?}: no datacenter {name:?} (known: {})", known.join(", "))
            })
        };
        let (a, b) = (dc(a)?, dc(b)?);
        if a == b {
            return Err(format!("{spec:?}: a link joins two datacenters"));
        }
        let time = |t: &str| {
            t.parse::<coflow_core::Nanos>()
                .map(|n| Duration::from_nanos(n.get()))
                .map_err(|e| format!("{spec:?}: {t:?}: {e}"))
        };
        let (at, lasts) = (time(at)?, time(lasts)?);
        if lasts.is_zero() {
            return Err(format!("{spec:?}: an outage lasts some time"));
        }
        if at > MAX_OUTAGE || lasts > MAX_OUTAGE {
            return Err(format!("{spec:?}: an outage starts and lasts at most {}s each", MAX_OUTAGE.as_secs()));
        }
        Ok(Outage { between: (a, b), at, lasts })
    }

    /// Whether the outage holds `t` after the start.
    fn holds(&self, t: Duration) -> bool {
        t >= self.at && t < self.at + self.lasts
    }

    /// `rates` with this outage's links down.
    fn apply(&self, links: &[(usize, usize)], rates: &mut [f64]) {
        let (a, b) = self.between;
        for (l, &(from, to)) in links.iter().enumerate() {
            if (from, to) == (a, b) || (from, to) == (b, a) {
                rates[l] = DOWN_RATE;
            }
        }
    }
}

/// The weather, running.
#[derive(Debug)]
pub struct WeatherRun {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<Result<Applied, TestbedError>>,
}

impl WeatherRun {
    /// Applies interval 0's draws at once (before returning), then redraws every interval on a
    /// thread until [`WeatherRun::finish`], with `outage`'s link down while it holds.
    pub fn start(
        names: &Names,
        dcs: &Datacenters,
        seed: u64,
        outage: Option<Outage>,
    ) -> Result<WeatherRun, TestbedError> {
        let wan = dcs.wan.clone();
        let links: Vec<(usize, usize)> = wan.links().iter().map(|l| (l.from as usize, l.to as usize)).collect();
        let started = Instant::now();
        let rates_at = move |g: u64, t: Duration| {
            let mut rates = coflow_sim::draw(&wan, seed, g);
            if let Some(o) = outage.filter(|o| o.holds(t)) {
                o.apply(&links, &mut rates);
            }
            rates
        };
        let links: Vec<(usize, usize)> = dcs.wan.links().iter().map(|l| (l.from as usize, l.to as usize)).collect();
        let apply = move |names: &Names, rates: &[f64]| -> Result<(), TestbedError> {
            for (l, &(from, to)) in links.iter().enumerate() {
                set_link_rate(names, from, to, Rate::from_bytes_per_sec(rates[l]))?;
            }
            Ok(())
        };
        let mut applied: Applied = Vec::new();
        let rates = rates_at(0, Duration::ZERO);
        apply(names, &rates)?;
        applied.push((Instant::now(), rates));
        let stop = Arc::new(AtomicBool::new(false));
        let (names, redraw, flag) = (names.clone(), dcs.redraw, stop.clone());
        let handle = std::thread::spawn(move || {
            // The times the rates change: every redraw, and the outage's start and end.
            let mut g = 0u64;
            let mut edges: Vec<Duration> = outage.iter().flat_map(|o| [o.at, o.at + o.lasts]).collect();
            edges.sort();
            loop {
                let next_redraw = redraw.map(|r| r * (g + 1) as u32);
                let next_edge = edges.iter().copied().find(|&e| started + e > Instant::now());
                let Some(next) = [next_redraw, next_edge].into_iter().flatten().min() else {
                    // Nothing changes any more: the links hold their rates until the end.
                    while !flag.load(Ordering::Relaxed) {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    return Ok(applied);
                };
                // Sleep in short steps so that `finish` is heard at once.
                while !flag.load(Ordering::Relaxed) && Instant::now() < started + next {
                    std::thread::sleep(Duration::from_millis(5));
                }
                if flag.load(Ordering::Relaxed) {
                    return Ok(applied);
                }
                if Some(next) == next_redraw {
                    g += 1;
                }
                let rates = rates_at(g, started.elapsed());
                apply(&names, &rates)?;
                applied.push((Instant::now(), rates));
            }
        });
        Ok(WeatherRun { stop, handle })
    }

    /// Stops the weather and returns what it applied, as steps from `t0` (the replay's start).
    pub fn finish(self, t0: Instant) -> Result<WeatherLog, TestbedError> {
        self.stop.store(true, Ordering::Relaxed);
        let applied = self.handle.join().map_err(|_| TestbedError::Setup("the weather thread panicked".into()))??;
        Ok(steps_from(&applied, t0))
    }
}

/// `applied` as steps from `t0`: the last change at or before `t0` at time 0, later ones at their
/// offsets (changes within the same nanosecond: the last wins).
fn steps_from(applied: &[(Instant, Vec<f64>)], t0: Instant) -> WeatherLog {
    let mut steps: Vec<WeatherStep> = Vec::new();
    for (at, caps) in applied {
        let at_ns = at.saturating_duration_since(t0).as_nanos() as u64;
        match steps.last_mut() {
            Some(last) if last.at_ns == at_ns => last.capacities = caps.clone(),
            _ => steps.push(WeatherStep { at_ns, capacities: caps.clone() }),
        }
    }
    WeatherLog::new(steps).expect("applied rates are positive and in time order, the first at or before t0")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An outage takes both directions between its datacenters down, and only while it holds.
    #[test]
    fn an_outage_downs_both_directions_while_it_holds() {
        let o = Outage { between: (2, 0), at: Duration::from_secs(3), lasts: Duration::from_secs(5) };
        let links = [(0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1)];
        let mut rates = vec![9.0; 6];
        o.apply(&links, &mut rates);
        assert_eq!(rates, vec![9.0, DOWN_RATE, 9.0, 9.0, DOWN_RATE, 9.0]);
        assert!(
            !o.holds(Duration::from_secs(2)) && o.holds(Duration::from_secs(3)) && o.holds(Duration::from_millis(7999))
        );
        assert!(!o.holds(Duration::from_secs(8)));
    }

    /// An outage that starts or lasts past an hour is refused by its spelling, not accepted to
    /// fall after the replay; an hour each is taken.
    #[test]
    fn an_outage_starts_and_lasts_at_most_an_hour() {
        let t = crate::Topology::load("siphon-3dc").unwrap();
        let dcs = t.wan.as_ref().unwrap();
        let o = Outage::parse("toronto-montreal@1h+3600s", dcs).unwrap();
        assert_eq!((o.at, o.lasts), (MAX_OUTAGE, MAX_OUTAGE));
        for spec in ["toronto-montreal@99999h+1s", "toronto-montreal@1s+3601s"] {
            let e = Outage::parse(spec, dcs).unwrap_err();
            assert!(e.contains("at most 3600s each"), "{spec}: {e}");
        }
    }

    #[test]
    fn changes_before_the_start_collapse_into_the_first_step() {
        let t = Instant::now();
        let applied = vec![
            (t, vec![1.0, 2.0]),
            (t + Duration::from_millis(5), vec![3.0, 4.0]),
            (t + Duration::from_millis(30), vec![5.0, 6.0]),
            (t + Duration::from_millis(30), vec![7.0, 8.0]),
            (t + Duration::from_millis(50), vec![9.0, 1.0]),
        ];
        let log = steps_from(&applied, t + Duration::from_millis(10));
        let s: Vec<(u64, Vec<f64>)> = log.steps().iter().map(|s| (s.at_ns, s.capacities.clone())).collect();
        assert_eq!(s, vec![(0, vec![3.0, 4.0]), (20_000_000, vec![7.0, 8.0]), (40_000_000, vec![9.0, 1.0])]);
    }
}
