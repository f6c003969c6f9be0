//! What an agent's heartbeat says: that it is alive, its throughput, the progress of the flows
//! it sends (whose bytes are the measurements of the links or ports they cross, against what
//! their rates asked), and the flows it receives whose client holds them back, which judge no
//! port or link.

use std::collections::{BTreeMap, BTreeSet};

use coflow_core::{FlowId, MachineId, Nanos};
use coflow_proto::Heartbeat;

use super::{Core, held_back, ports};

impl Core {
    /// An agent reports; the answer says whether the coordinator knows it (if not, it must
    /// register again).
    pub fn handle_heartbeat(&mut self, now: Nanos, hb: Heartbeat) -> bool {
        self.input(now);
        let mut covered = Nanos::ZERO;
        let mut newly_unread = Vec::new();
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
                        // An unread flow's bytes load what they cross as if it asked just them.
                        let asked = if unread { moved } else { asked };
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
        known
    }
}
