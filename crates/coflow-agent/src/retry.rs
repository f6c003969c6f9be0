//! Asking the coordinator again after a registration or an id assignment failed: waits that
//! double up to a cap, spread between machines so that a cluster's agents do not all come back
//! at the same instant, and failures logged at warn once per kind every [`RETRY_WARN_EVERY`]
//! (at debug between).

use std::time::{Duration, Instant};

/// The first wait after a failed registration; each failure in a row doubles it, up to
/// [`retry_cap`].
const RETRY_FIRST: Duration = Duration::from_millis(500);

/// How often a registration failing for a while is logged at warn (the others at debug).
pub(crate) const RETRY_WARN_EVERY: Duration = Duration::from_secs(30);

/// The longest wait between registrations: 2 s, or twenty heartbeats if less (at least
/// [`RETRY_FIRST`]), so that an agent meets a restarted coordinator well inside the window in
/// which it adopts what agents re-announce (three agent timeouts).
fn retry_cap(heartbeat: Duration) -> Duration {
    (heartbeat * 20).clamp(RETRY_FIRST, Duration::from_secs(2))
}

/// The wait before registration attempt `failures + 1` (`failures` ≥ 1 failed in a row): doubling
/// from [`RETRY_FIRST`] up to `cap`, less a share of up to a quarter that differs between
/// machines (`spread`).
fn retry_after(failures: u32, cap: Duration, spread: u32) -> Duration {
    let full = RETRY_FIRST.saturating_mul(1 << failures.saturating_sub(1).min(8)).min(cap);
    let share = u64::from(spread.wrapping_mul(2_654_435_761).wrapping_add(failures.wrapping_mul(40_503)) % 1000);
    full - full.mul_f64(share as f64 / 4000.0)
}

/// The failures in a row of one kind of call and when one was last warned of, with its code.
#[derive(Debug)]
pub(crate) struct Retries {
    cap: Duration,
    spread: u32,
    failures: u32,
    warned: Option<(Instant, tonic::Code)>,
}

impl Retries {
    /// None failed yet, for an agent whose heartbeat is `heartbeat` on the machine (or host)
    /// `spread` tells apart.
    pub(crate) fn new(heartbeat: Duration, spread: u32) -> Retries {
        Retries { cap: retry_cap(heartbeat), spread, failures: 0, warned: None }
    }

    /// Notes one more failure: the wait before the next try.
    pub(crate) fn failed(&mut self) -> Duration {
        self.failures = self.failures.saturating_add(1);
        retry_after(self.failures, self.cap, self.spread)
    }

    /// The failures in a row.
    pub(crate) fn failures(&self) -> u32 {
        self.failures
    }

    /// Whether a failure with `code` at `now` is to be warned of: the first of its code, or the
    /// first for [`RETRY_WARN_EVERY`]. If so, it counts as warned of.
    pub(crate) fn warn_due(&mut self, code: tonic::Code, now: Instant) -> bool {
        let due = self.warned.is_none_or(|(at, c)| now.duration_since(at) >= RETRY_WARN_EVERY || c != code);
        if due {
            self.warned = Some((now, code));
        }
        due
    }

    /// A call went through: the next failure starts afresh.
    pub(crate) fn reset(&mut self) {
        (self.failures, self.warned) = (0, None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registrations_back_off_to_the_cap_and_machines_spread() {
        let cap = retry_cap(Duration::from_millis(100));
        assert_eq!(cap, Duration::from_secs(2));
        assert_eq!(retry_cap(Duration::from_millis(10)), RETRY_FIRST, "never below the first wait");
        assert_eq!(retry_cap(Duration::from_millis(50)), Duration::from_secs(1));
        let waits: Vec<Duration> = (1..=8).map(|n| retry_after(n, cap, 7)).collect();
        for (n, w) in waits.iter().enumerate() {
            let full = (RETRY_FIRST * (1 << n)).min(cap);
            assert!(*w <= full && *w >= full.mul_f64(0.75), "attempt {}: {w:?} of {full:?}", n + 1);
        }
        assert!(waits[3..].iter().all(|w| *w > Duration::from_millis(1499)), "at the cap: {waits:?}");
        assert_eq!(retry_after(u32::MAX, cap, 7), retry_after(u32::MAX, cap, 7), "no overflow");
        let spread: std::collections::BTreeSet<Duration> = (0..64).map(|m| retry_after(9, cap, m)).collect();
        assert!(spread.len() > 32, "machines come back at different instants: {spread:?}");
        let mut r = Retries::new(Duration::from_millis(100), 7);
        let waits: Vec<Duration> = (0..8).map(|_| r.failed()).collect();
        assert_eq!(waits, (1..=8).map(|n| retry_after(n, cap, 7)).collect::<Vec<_>>());
        assert_eq!(r.failures(), 8);
        r.reset();
        assert_eq!((r.failures(), r.failed()), (0, retry_after(1, cap, 7)), "afresh after a success");
    }

    /// A failure is warned of once per code every [`RETRY_WARN_EVERY`]; another code, or the
    /// first failure after a success, at once.
    #[test]
    fn failures_are_warned_of_once_per_code_and_interval() {
        use tonic::Code;
        let (mut r, t) = (Retries::new(Duration::from_millis(100), 0), Instant::now());
        assert!(r.warn_due(Code::Unavailable, t));
        assert!(!r.warn_due(Code::Unavailable, t + Duration::from_secs(29)));
        assert!(r.warn_due(Code::Unauthenticated, t + Duration::from_secs(29)), "another code");
        assert!(r.warn_due(Code::Unavailable, t + Duration::from_secs(30)), "the code changed back");
        assert!(!r.warn_due(Code::Unavailable, t + Duration::from_secs(59)));
        assert!(r.warn_due(Code::Unavailable, t + Duration::from_secs(60)), "an interval on");
        r.reset();
        assert!(r.warn_due(Code::Unavailable, t + Duration::from_secs(61)), "after a success");
    }
}
