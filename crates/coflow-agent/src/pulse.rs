//! The agent's own pulse: a task that notes the time every [`TICK`], so that a timeout that
//! fires once the process runs again after a pause of its own (`SIGSTOP`, a host that stopped
//! scheduling it) is told apart from a peer that went silent. Without it, a receiving agent
//! frozen for longer than the data idle timeout blames the source it was reading from, and a
//! framework recomputes a piece that was never lost.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::watch;

/// How often the pulse beats.
pub(crate) const TICK: Duration = Duration::from_millis(100);

/// The times of the agent's last beat and of its last pause, as nanoseconds since `epoch` (zero:
/// none yet).
#[derive(Debug)]
pub(crate) struct Pulse {
    epoch: Instant,
    last: AtomicU64,
    /// When the longest beat-to-beat gap seen lately ended, and how long it was.
    pause_end: AtomicU64,
    pause_len: AtomicU64,
}

impl Default for Pulse {
    fn default() -> Pulse {
        Pulse {
            epoch: Instant::now(),
            last: AtomicU64::new(0),
            pause_end: AtomicU64::new(0),
            pause_len: AtomicU64::new(0),
        }
    }
}

impl Pulse {
    fn since_epoch(&self, t: Instant) -> u64 {
        (t.saturating_duration_since(self.epoch).as_nanos() as u64).max(1)
    }

    /// Notes a beat at `now`: a gap since the last one longer than `gap` is a pause.
    pub(crate) fn beat(&self, now: Instant, gap: Duration) {
        let now = self.since_epoch(now);
        let last = self.last.swap(now, Ordering::Relaxed);
        if last != 0 && now.saturating_sub(last) > gap.as_nanos() as u64 {
            self.pause_len.store(now - last, Ordering::Relaxed);
            self.pause_end.store(now, Ordering::Relaxed);
        }
    }

    /// How long the agent did not run, if it paused for longer than `least` within the `window`
    /// before `now`, or has not beaten for longer than `least` (it runs again, and the pulse has
    /// not yet): `None` if the pulse never beat (it does not run, as in tests of parts).
    pub(crate) fn paused(&self, now: Instant, window: Duration, least: Duration) -> Option<Duration> {
        let last = self.last.load(Ordering::Relaxed);
        if last == 0 {
            return None;
        }
        let now = self.since_epoch(now);
        let (end, len) = (self.pause_end.load(Ordering::Relaxed), self.pause_len.load(Ordering::Relaxed));
        let least = least.as_nanos() as u64;
        let ongoing = now.saturating_sub(last);
        let lately = if end != 0 && now.saturating_sub(end) <= window.as_nanos() as u64 { len } else { 0 };
        let longest = ongoing.max(lately);
        (longest > least).then(|| Duration::from_nanos(longest))
    }
}

/// Beats every [`TICK`] until `stop`, noting gaps longer than `gap` as pauses.
pub(crate) async fn run(pulse: &Pulse, gap: Duration, mut stop: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(TICK);
    // A pause is one late tick, not a burst of them.
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => pulse.beat(Instant::now(), gap),
            _ = stop.changed() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    /// A pulse that never beat sees no pause; beats 100 ms apart are none; an 8 s gap is one,
    /// while it goes on (the pulse has not beaten since) and for the window after it ended.
    #[test]
    fn a_gap_between_beats_is_a_pause_for_a_window() {
        let p = Pulse::default();
        let t0 = Instant::now() + S;
        assert_eq!(p.paused(t0, 5 * S, S), None, "never beat");
        for k in 0..10 {
            p.beat(t0 + TICK * k, S);
        }
        let t1 = t0 + TICK * 9;
        assert_eq!(p.paused(t1, 5 * S, S), None, "beats 100 ms apart");
        // Frozen at t1 for 8 s: seen at once when the process runs again, before the pulse does.
        let back = t1 + 8 * S;
        assert_eq!(p.paused(back, 5 * S, S), Some(8 * S));
        p.beat(back, S);
        assert_eq!(p.paused(back + TICK, 5 * S, S), Some(8 * S), "after the pulse beat again");
        for k in 1..=50 {
            p.beat(back + TICK * k, S);
        }
        assert_eq!(p.paused(back + 5 * S, 5 * S, S), Some(8 * S), "within the window");
        for k in 51..=60 {
            p.beat(back + TICK * k, S);
        }
        assert_eq!(p.paused(back + 6 * S, 5 * S, S), None, "past the window");
        // A gap under `least` is not a pause worth naming.
        assert_eq!(p.paused(back + 6 * S, 10 * S, 9 * S), None);
    }
}
