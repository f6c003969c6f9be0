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

/// The weather, running.
#[derive(Debug)]
pub struct WeatherRun {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<Result<Applied, TestbedError>>,
}

impl WeatherRun {
    /// Applies interval 0's draws at once (before returning), then redraws every interval on a
    /// thread until [`WeatherRun::finish`].
    pub fn start(names: &Names, dcs: &Datacenters, seed: u64) -> Result<WeatherRun, TestbedError> {
        let wan = dcs.wan.clone();
        let links: Vec<(usize, usize)> = wan.links().iter().map(|l| (l.from as usize, l.to as usize)).collect();
        let started = Instant::now();
        let mut applied: Applied = Vec::new();
        let rates = coflow_sim::draw(&wan, seed, 0);
        for (l, &(from, to)) in links.iter().enumerate() {
            set_link_rate(names, from, to, Rate::from_bytes_per_sec(rates[l]))?;
        }
        applied.push((Instant::now(), rates));
        let stop = Arc::new(AtomicBool::new(false));
        let (names, redraw, flag) = (names.clone(), dcs.redraw, stop.clone());
        let handle = std::thread::spawn(move || {
            let Some(redraw) = redraw else {
                // No weather: the links hold their first draw until the end.
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(20));
                }
                return Ok(applied);
            };
            for g in 1u64.. {
                let next = started + redraw * g as u32;
                // Sleep in short steps so that `finish` is heard at once.
                while !flag.load(Ordering::Relaxed) && Instant::now() < next {
                    std::thread::sleep(Duration::from_millis(20));
                }
                if flag.load(Ordering::Relaxed) {
                    break;
                }
                let rates = coflow_sim::draw(&wan, seed, g);
                for (l, &(from, to)) in links.iter().enumerate() {
                    set_link_rate(&names, from, to, Rate::from_bytes_per_sec(rates[l]))?;
                }
                applied.push((Instant::now(), rates));
            }
            Ok(applied)
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
