//! Weather as a recorded sequence: every link's capacity from given times on, as a testbed
//! applied it, so that a simulation can replay the very capacities a measured run saw.
//!
//! A [`WeatherLog`] is a list of steps, the first at time zero, each holding every link's
//! capacity (bytes per second) until the next. [`WeatherLog::drawn`] gives the seeded redraws a
//! run with [`WanConfig::redraw`](crate::WanConfig::redraw) would see (the same [`draw`]), which
//! a testbed applies; what it then records (the times it really applied them at) goes in [`WanConfig::weather`](crate::WanConfig::weather) and the simulator
//! follows it instead of drawing.

use coflow_core::Nanos;
use coflow_sched::Wan;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// Every link's capacity in interval `g`: a function of the seed and `g` alone.
pub fn draw(wan: &Wan, seed: u64, g: u64) -> Vec<f64> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(g);
    wan.links().iter().map(|l| l.bandwidth.sample(&mut rng)).collect()
}

/// Every link's capacity from `at_ns` on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WeatherStep {
    /// When it starts, from the start of the run.
    pub at_ns: u64,
    /// Per link (in the topology's link order), bytes per second.
    pub capacities: Vec<f64>,
}

/// Capacities over time, step by step (see the module doc).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WeatherLog {
    steps: Vec<WeatherStep>,
}

/// A weather log that cannot be replayed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum WeatherError {
    /// No step, or the first is not at time zero.
    #[error("steps[0]: the first step must be at time 0")]
    NoStart,
    /// Steps out of order.
    #[error("steps[{0}]: at_ns is not after the step before")]
    Unordered(usize),
    /// A step with another number of links.
    #[error("steps[{step}]: {got} capacities for {links} links")]
    Links {
        /// The step.
        step: usize,
        /// Its capacities.
        got: usize,
        /// The links of the first step.
        links: usize,
    },
    /// A capacity that is not a positive number.
    #[error("steps[{step}].capacities[{link}]: {value} is not a positive number")]
    Capacity {
        /// The step.
        step: usize,
        /// The link.
        link: usize,
        /// The value.
        value: f64,
    },
}

impl WeatherLog {
    /// A log of these steps, checked.
    pub fn new(steps: Vec<WeatherStep>) -> Result<WeatherLog, WeatherError> {
        let log = WeatherLog { steps };
        log.validate()?;
        Ok(log)
    }

    /// Checks what [`WeatherLog::new`] checks (for a log read from a file).
    pub fn validate(&self) -> Result<(), WeatherError> {
        let first = self.steps.first().filter(|s| s.at_ns == 0).ok_or(WeatherError::NoStart)?;
        let links = first.capacities.len();
        for (i, s) in self.steps.iter().enumerate() {
            if i > 0 && s.at_ns <= self.steps[i - 1].at_ns {
                return Err(WeatherError::Unordered(i));
            }
            if s.capacities.len() != links {
                return Err(WeatherError::Links { step: i, got: s.capacities.len(), links });
            }
            if let Some((link, &value)) = s.capacities.iter().enumerate().find(|(_, v)| !(v.is_finite() && **v > 0.0)) {
                return Err(WeatherError::Capacity { step: i, link, value });
            }
        }
        Ok(())
    }

    /// The seeded redraws of `wan` every `redraw` from time zero until `until` (the interval
    /// holding `until` included): interval `g`'s capacities are [`draw`]`(wan, seed, g)`, as the
    /// simulator draws them.
    pub fn drawn(wan: &Wan, seed: u64, redraw: Nanos, until: Nanos) -> WeatherLog {
        assert!(redraw.0 > 0, "a redraw interval of zero");
        let intervals = if redraw == Nanos::MAX { 1 } else { until.0 / redraw.0 + 1 };
        let steps =
            (0..intervals).map(|g| WeatherStep { at_ns: g * redraw.0, capacities: draw(wan, seed, g) }).collect();
        WeatherLog { steps }
    }

    /// The steps.
    pub fn steps(&self) -> &[WeatherStep] {
        &self.steps
    }

    /// Every capacity multiplied by `k` (e.g. wire rates to payload rates).
    pub fn scaled(&self, k: f64) -> WeatherLog {
        let steps = self
            .steps
            .iter()
            .map(|s| WeatherStep { at_ns: s.at_ns, capacities: s.capacities.iter().map(|c| c * k).collect() })
            .collect();
        WeatherLog { steps }
    }

    /// The index of the step holding `now`.
    pub fn step_at(&self, now: Nanos) -> usize {
        self.steps.partition_point(|s| s.at_ns <= now.0).saturating_sub(1)
    }

    /// When the step after `step` starts (`Nanos::MAX` after the last).
    pub fn next_change(&self, step: usize) -> Nanos {
        self.steps.get(step + 1).map_or(Nanos::MAX, |s| Nanos(s.at_ns))
    }
}

#[cfg(test)]
mod tests {
    use coflow_sched::{Bandwidth, Link};

    use super::*;

    fn wan() -> Wan {
        let l = |from, to| Link { from, to, bandwidth: Bandwidth::Uniform(1.0, 3.0) };
        Wan::new(vec!["a".into(), "b".into()], vec![l(0, 1), l(1, 0)], vec![0, 1]).unwrap()
    }

    #[test]
    fn drawn_steps_are_the_simulators_draws() {
        let log = WeatherLog::drawn(&wan(), 7, Nanos::from_secs(2), Nanos::from_secs(5));
        assert_eq!(log.steps().len(), 3);
        for (g, s) in log.steps().iter().enumerate() {
            assert_eq!(s.at_ns, g as u64 * 2_000_000_000);
            assert_eq!(s.capacities, draw(&wan(), 7, g as u64));
        }
        assert_eq!(log.step_at(Nanos::from_secs(3)), 1);
        assert_eq!(log.step_at(Nanos::from_secs(4)), 2);
        assert_eq!(log.next_change(1), Nanos::from_secs(4));
        assert_eq!(log.next_change(2), Nanos::MAX);
        log.validate().unwrap();
    }

    #[test]
    fn bad_logs_name_the_step() {
        let s = |at_ns, capacities: Vec<f64>| WeatherStep { at_ns, capacities };
        assert_eq!(WeatherLog::new(vec![]), Err(WeatherError::NoStart));
        assert_eq!(WeatherLog::new(vec![s(5, vec![1.0])]), Err(WeatherError::NoStart));
        assert_eq!(WeatherLog::new(vec![s(0, vec![1.0]), s(0, vec![1.0])]), Err(WeatherError::Unordered(1)));
        assert!(matches!(
            WeatherLog::new(vec![s(0, vec![1.0]), s(1, vec![1.0, 2.0])]),
            Err(WeatherError::Links { step: 1, .. })
        ));
        assert!(matches!(
            WeatherLog::new(vec![s(0, vec![1.0, f64::NAN])]),
            Err(WeatherError::Capacity { step: 0, link: 1, .. })
        ));
    }
}
