//! The agent's own pulse: a task that notes the time every [`TICK`], so that a peer's silence
//! over a time in which the agent itself did not run (its process paused by `SIGSTOP`, or not
//! scheduled by its host) is put down to the pause, and a receiving agent continued after such a
//! pause does not blame the source it was reading from (a framework would recompute a piece
//! that is whole).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::sync::watch;

/// How often the pulse beats.
pub(crate) const TICK: Duration = Duration::from_millis(100);

/// The shortest gap between beats that counts as a pause: several ticks, so that a beat a tick
/// late (a busy runtime) is none.
pub(crate) const LEAST: Duration = Duration::from_millis(500);

/// The agent's last beat and its last pause, read and written together.
#[derive(Debug, Default)]
pub(crate) struct Pulse(Mutex<Beats>);

#[derive(Debug, Default)]
struct Beats {
    /// The last beat, if any.
    last: Option<Instant>,
    /// When the last pause (a gap between beats longer than the threshold) ended, and its length.
    pause: Option<(Instant, Duration)>,
}

impl Pulse {
    /// Notes a beat at `now`: a gap since the last one longer than `gap` is a pause.
    pub(crate) fn beat(&self, now: Instant, gap: Duration) {
        let mut b = self.0.lock().expect("pulse lock");
        if let Some(last) = b.last {
            let since = now.saturating_duration_since(last);
            if since > gap {
                b.pause = Some((now, since));
            }
        }
        b.last = Some(now);
    }

    /// How long the agent did not run, if it paused for longer than `least` within the `window`
    /// before `now` (the last pause ended inside it), or has not beaten for longer than `least`
    /// (it runs again, and its pulse not yet); `None` if the pulse never beat (it does not run,
    /// as in tests of parts).
    pub(crate) fn paused(&self, now: Instant, window: Duration, least: Duration) -> Option<Duration> {
        let b = self.0.lock().expect("pulse lock");
        let ongoing = now.saturating_duration_since(b.last?);
        let lately = match b.pause {
            Some((end, len)) if now.saturating_duration_since(end) <= window => len,
            _ => Duration::ZERO,
        };
        let longest = ongoing.max(lately);
        (longest > least).then_some(longest)
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

    /// Beats a tick late are no pause at the shortest threshold an agent uses.
    #[test]
    fn late_beats_are_no_pause() {
        let p = Pulse::default();
        let t0 = Instant::now();
        for k in 0..20 {
            p.beat(t0 + 2 * TICK * k, LEAST);
        }
        assert_eq!(p.paused(t0 + 2 * TICK * 19 + TICK, 5 * S, LEAST), None);
    }
}
