//! What an agent's heartbeat says: that it is alive, its throughput, the progress of the flows
//! it sends (whose bytes are the measurements of the links or ports they cross, against what
//! their rates asked), and the flows it receives whose client holds them back, which judge no
//! port or link: their senders' reports show what those clients read ([`Reader`]).

use std::collections::{BTreeMap, BTreeSet};

use coflow_core::{FlowId, MachineId, Nanos};
use coflow_proto::Heartbeat;

use super::decide::Why;
use super::wide_area::Routing;
use super::{Core, FlowState, held_back, ports};

/// What a client that holds its flow back reads, while its receiver lists the flow: the pace its
/// sender's reports show (bytes moved over each report's interval, averaged over about
/// [`PACE_WINDOW`]: the buffers between the sender and the client fill in bursts, so that one
/// report may show nothing moved while the client reads on), and the rate reserved for the flow
/// (none before a decision reserved one; see `Core::decide`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Reader {
    pub(super) pace: f64,
    pub(super) reserved: Option<Reservation>,
}

/// What a flow's reserved rate was made for: its client's pace, and the policy's rate for the flow
/// when it was first reserved, which no reservation passes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Reservation {
    pub(super) pace: f64,
    pub(super) policy_rate: f64,
}

/// The time over which a reader's pace is averaged: a report of `t` seconds weighs
/// `1 - e^(-t / PACE_WINDOW)`.
const PACE_WINDOW: f64 = 0.5;

/// A reader's pace that moved by more than this share of the pace its reservation was made for
/// calls for another decision.
const PACE_MOVED: f64 = 0.25;

impl Reader {
    /// The reader after a report that its flow moved `moved` bytes in `secs` seconds, and whether
    /// its reservation is due to be made again.
    fn report(reader: Option<Reader>, moved: f64, secs: f64) -> (Reader, bool) {
        let sample = moved / secs;
        let weight = 1.0 - (-secs / PACE_WINDOW).exp();
        let pace = reader.map_or(sample, |r| r.pace + (sample - r.pace) * weight);
        let reserved = reader.and_then(|r| r.reserved);
        let due = reserved.is_none_or(|was| (pace - was.pace).abs() > PACE_MOVED * was.pace);
        (Reader { pace, reserved }, due)
    }
}

impl Core {
    /// An agent reports; the answer says whether the coordinator knows it (if not, it must
    /// register again).
    pub fn handle_heartbeat(&mut self, now: Nanos, hb: Heartbeat) -> bool {
        self.input(now);
        let mut covered = Nanos::ZERO;
        let (mut newly_unread, mut no_longer) = (Vec::new(), Vec::new());
        let known = match self.agents.get_mut(&hb.machine) {
            Some(a) if a.alive => {
                covered = now.saturating_sub(a.last_seen);
                a.last_seen = now;
                let lessened = a.beat.map_or(Nanos::ZERO, |b| Nanos(b.0 / 4 * 3));
                a.beat = Some(covered.max(lessened));
                a.tx_bps = hb.tx_bps;
                a.rx_bps = hb.rx_bps;
                // Only flows it receives: it speaks for no other receiver.
                let flows = &self.flows;
                let unread: BTreeSet<FlowId> =
                    hb.unread.into_iter().filter(|id| flows.get(id).is_some_and(|f| f.dst == hb.machine)).collect();
                newly_unread.extend(unread.difference(&a.unread).copied());
                no_longer.extend(a.unread.difference(&unread).copied());
                a.unread = unread;
                true
            }
            _ => false,
        };
        // What a flow whose client just began to hold it back moved this period, reported before
        // its receiver said so, is no sample of its ports either; what its pair's other flows
        // moved still is.
        for id in newly_unread {
            if let Some(f) = self.flows.get_mut(&id) {
                let (period, moved, asked) = std::mem::take(&mut f.judged_in);
                if period == self.ports.period_end() {
                    self.ports.set_apart(f.src, f.dst, moved, asked);
                }
            }
        }
        // A flow its client no longer holds back is the policy's again.
        for id in no_longer {
            if let Some(f) = self.flows.get_mut(&id)
                && f.reader.take().is_some_and(|r| r.reserved.is_some())
            {
                self.mark(Why::Readers);
            }
        }
        let mut readers_due = false;
        if known {
            // What this report says of each wide-area link its flows cross, or on a big switch of
            // the ports, by receiver, over the interval since the agent's previous message.
            let mut links: BTreeMap<usize, crate::measure::Carried> = BTreeMap::new();
            let mut to: BTreeMap<MachineId, crate::measure::Carried> = BTreeMap::new();
            let big_switch = self.meter.is_none();
            for (id, sent) in hb.flows {
                if let Some(f) = self.flows.get_mut(&id)
                    && f.src == hb.machine
                {
                    let sent = sent.min(f.size);
                    // The bytes of a flow's first report may have moved at any time before it: it
                    // is measured from its first report on. One that has moved nothing yet may not
                    // have its rate yet either, and is not measured: a link that only such flows
                    // cross is found down by its receivers (who resume them) instead.
                    // A relayed part moves at the pace of its slower hop: its bytes load both links,
                    // but whether it kept up says nothing of either alone. Nor does a flow whose
                    // receiver reports that its client holds it back, reading slower than it comes
                    // or not at all (its sender's port would pass for slow).
                    // A flow never listed is not looked up.
                    let unread = held_back(&self.agents, f, id);
                    if f.sent > 0 {
                        let (moved, asked) = (sent.saturating_sub(f.sent) as f64, f.asked + f.asked_at_rate(now));
                        // An unread flow's bytes load what they cross as if it asked just them, and
                        // show what its client reads.
                        let asked = if unread { moved } else { asked };
                        if unread && covered > Nanos::ZERO {
                            let (reader, due) = Reader::report(f.reader, moved, covered.as_secs_f64());
                            f.reader = Some(reader);
                            // Only a flow the policy would decide for now is reserved for.
                            readers_due |= due && f.state == FlowState::Scheduled && f.routing == Routing::Direct;
                        }
                        for &l in &f.links {
                            let r = links.entry(l).or_default();
                            if f.via.is_some() || unread {
                                r.other_moved += moved;
                                r.other_asked += asked;
                            } else {
                                r.moved += moved;
                                r.asked += asked;
                            }
                        }
                        if big_switch {
                            let (m, a) = ports::carried(to.entry(f.dst).or_default(), f, moved, asked, unread);
                            let period = self.ports.period_end();
                            let (_, m0, a0) = if f.judged_in.0 == period { f.judged_in } else { Default::default() };
                            f.judged_in = (period, m0 + m, a0 + a);
                        }
                    }
                    f.asked = 0.0;
                    f.sent = f.sent.max(sent);
                    f.reported_at = Some(now);
                    f.moved_before = 0.0;
                }
            }
            if let Some(meter) = &mut self.meter {
                for (l, carried) in links {
                    meter.report(l, hb.machine, carried, covered.as_secs_f64());
                }
            }
            for (dst, carried) in to {
                self.ports.report(hb.machine, dst, carried, covered.as_secs_f64());
            }
        }
        if readers_due {
            self.mark(Why::Readers);
        }
        known
    }
}

#[cfg(test)]
mod tests {
    use super::{Reader, Reservation};

    /// A reader's pace is its first report's, then each report of `t` seconds moves it by
    /// `1 - e^(-t / 0.5 s)` of the way to its own: a report of nothing over one heartbeat (the
    /// buffers before the client full) moves it by under a tenth. A new reservation is due before
    /// the first and when the pace moved by more than a quarter of the one it was made for.
    #[test]
    fn a_readers_pace_is_averaged_and_its_reservation_made_again_when_it_moves() {
        let (r, due) = Reader::report(None, 1000.0, 0.5);
        assert_eq!((r, due), (Reader { pace: 2000.0, reserved: None }, true));
        let reserved = Some(Reservation { pace: 2000.0, policy_rate: 9000.0 });
        let r = Reader { reserved, ..r };
        let (r, due) = Reader::report(Some(r), 1100.0, 0.5);
        let near = |a: f64, b: f64| (a - b).abs() < 1e-9 * b;
        let expected = 2000.0 + 200.0 * (1.0 - (-1.0f64).exp());
        assert!(near(r.pace, expected) && !due, "{r:?} {due}");
        let (r, due) = Reader::report(Some(r), 2000.0, 0.5);
        assert!(r.pace > 2500.0 && due, "past a quarter above: {r:?}");
        assert_eq!(r.reserved, reserved, "until a decision makes another");
        let r = Reader { pace: 2000.0, reserved };
        let (r, due) = Reader::report(Some(r), 0.0, 0.05);
        assert!(r.pace > 1800.0 && !due, "one empty heartbeat: {r:?}");
        assert_eq!(r.reserved, reserved, "kept while listed");
    }
}
