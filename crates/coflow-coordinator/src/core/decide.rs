//! A decision: what prompts the core to ask its policy again ([`Why`]), the snapshot of every
//! scheduled coflow's unfinished flows it hands the policy, and putting the answer in force (rates
//! that changed queue for their sources; coflows rejected by admission control go unscheduled).
//!
//! A flow whose receiving client holds it back (reads slower than it comes) is not the policy's
//! while it does: it gets what its client reads, with headroom ([`READER_HEADROOM`]), never more
//! than the policy gave it when it was first held back, taken off the resources it crosses before
//! the policy shares them out. A policy would otherwise give it a share its client cannot take
//! (the whole of its ports, for the first coflow of a smallest-first order), which its sender
//! leaves idle while every other flow through those ports waits. The headroom lets a client that
//! reads faster show it: its flow's chunks stop waiting, its receiver stops listing it, and the
//! policy has it back. The bound keeps a client from growing its flow's share past the policy's by
//! reading in bursts (its pace follows its rate, and its rate its pace).

use std::collections::BTreeMap;

use coflow_core::{CoflowId, FlowId, MachineId, Nanos};
use coflow_sched::{Fabric, Route, SnapshotCoflow, SnapshotFlow};

use super::heartbeat::Reservation;
use super::wide_area::Routing;
use super::{CoflowState, Core, RATE_TOLERANCE, held_back};
use crate::status::Admission;

/// Why the core decides again (logged with each decision, target `coflow::decide`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Why {
    /// An agent registered.
    Agent,
    /// A coflow's gets were released to the policy.
    Release,
    /// Flows finished and the policy's flow-finish gap has passed.
    FlowsFinished,
    /// A coflow left the policy.
    Departure,
    /// An agent was lost and its flows failed.
    AgentLost,
    /// A port's or a link's measured estimate changed.
    Estimate,
    /// Flows were routed, or their routes are due to be.
    Routing,
    /// The policy asked to be woken (a timer of its own, or its flow-finish gap closing).
    Wake,
    /// The policy's admission control rejected coflows, which the next decision serves as best
    /// effort.
    Rejected,
    /// A receiving client began to hold a flow back, stopped, or reads it at another pace.
    Readers,
}

/// A flow whose client holds it back gets this many times what that client reads.
const READER_HEADROOM: f64 = 1.5;

/// ... and at least this share of what the resources it crosses have left, so that a client that
/// has stopped reading still has bytes waiting for it, and shows as soon as it reads again.
const READER_FLOOR: f64 = 0.01;

impl Core {
    /// The next run decides, for this reason if none was given before.
    pub(super) fn mark(&mut self, why: Why) {
        self.dirty.get_or_insert(why);
    }

    pub(super) fn decide(&mut self, now: Nanos, why: Why) {
        self.dirty = None;
        self.wake = None;
        self.last_decision = now;
        if self.active.is_empty() {
            return;
        }
        self.counters.decisions += 1;
        tracing::debug!(target: "coflow::decide", ?why, coflows = self.active.len(), "decision");
        self.plan_pending(now);
        let heartbeat = Nanos::from_millis(self.cfg.heartbeat_interval_ms);
        let margin = Nanos::from_millis(self.cfg.deadline_margin_ms);
        let mut fabric = self.fabric();
        self.snapshot.clear(self.policy.model());
        let mut reserved = Vec::new();
        self.order.clear();
        let mut flows = Vec::new();
        let mut routes = Vec::new();
        let trace = tracing::enabled!(target: "coflow::decide", tracing::Level::TRACE);
        // Whether a coflow decided for has a deadline that the policy reads, and those whose
        // deadline its admission control judges now or judged before.
        let mut paced = false;
        let mut judged = Vec::new();
        let admission_control = self.policy.admission_control();
        for &(_, id) in &self.active {
            let c = &self.coflows[&id];
            let CoflowState::Scheduled(Some(p)) = &c.state else { unreachable!("active coflows are in the policy") };
            flows.clear();
            routes.clear();
            for &fid in &p.flows {
                let f = &self.flows[&fid];
                // A flow waiting to be routed, or for its receiver to resume it over its plan,
                // moves nothing meanwhile.
                if f.routing != Routing::Direct {
                    continue;
                }
                // A relayed part crosses the resources of both of its hops.
                let route = match f.via {
                    None => fabric.route(f.src, f.dst),
                    Some(r) => {
                        let hops: Vec<u32> = fabric
                            .route(f.src, r)
                            .hops()
                            .iter()
                            .chain(fabric.route(r, f.dst).hops())
                            .copied()
                            .collect();
                        coflow_sched::Route::new(&hops)
                    }
                };
                if let Some(r) = f.reader.filter(|_| held_back(&self.agents, f, fid)) {
                    let policy_rate = r.reserved.map_or(f.rate, |was| was.policy_rate);
                    reserved.push((fid, route, Reservation { pace: r.pace, policy_rate }));
                    continue;
                }
                routes.push(route);
                let size = (f.size as f64).max(1.0);
                // What the last report says is left, brought forward at the rates in force since
                // that report, for at most a heartbeat (the next report is due by then): the
                // bytes of the rates before the last change and those of the rate in force. A
                // flow its source has not reported yet is not brought forward: it may not have
                // started (its receiver still connecting), and a flow believed nearly done would
                // get whole ports from a smallest-first policy that others need.
                let moved = f.moved_before + f.moved_at_rate(now, heartbeat);
                let remaining = (f.size.saturating_sub(f.sent) as f64 - moved).clamp(1.0, size);
                flows.push(SnapshotFlow { src: f.src, dst: f.dst, size, remaining });
                self.order.push(fid);
            }
            if flows.is_empty() {
                // Every flow of it waits to be routed: it is not decided for meanwhile.
                continue;
            }
            if trace {
                trace_coflow(id, &c.reg.options.name, &flows);
            }
            let pending = c.pending();
            // The policy counts a deadline from the coflow's arrival in it, which may be long
            // after its registration (its first get) or again later (a coflow whose flows all
            // ended enters again with its next get): its deadline counts from its registration,
            // less the margin the control path needs, and so is the same at every entry.
            paced |= self.reads_deadlines && c.reg.options.deadline.is_some();
            if admission_control && c.reg.options.deadline.is_some() {
                judged.push(id);
            }
            let deadline = (c.reg.options.deadline)
                .map(|d| c.registered.saturating_add(d).saturating_sub(margin).saturating_sub(p.arrival));
            let spec = SnapshotCoflow {
                id,
                job: c.job,
                arrival: p.arrival,
                deadline,
                weight: c.reg.options.weight,
                width: c.width + pending,
                pending,
            };
            self.snapshot.push_coflow_routed(&spec, &flows, &routes);
        }
        let reserved = reserve(&mut fabric, reserved);
        let input = self.snapshot.input(now, &fabric);
        self.alloc.reset(&input);
        self.wake = self.policy.poll_allocation(&input, &mut self.alloc);
        if paced {
            // A rate paced to a deadline is made for the progress reported; a flow that fell
            // behind it (its first bytes late, its sender slower) catches up only if decided for
            // again, which nothing else may call for before the deadline: once a heartbeat.
            let again = now.saturating_add(heartbeat);
            self.wake = Some(self.wake.map_or(again, |w| w.min(again)));
        }
        self.snapshot.flow_rates(&self.alloc, &mut self.rates);
        let policy = self.order.iter().zip(&self.rates).map(|(&fid, &rate)| (fid, rate, None));
        for (fid, rate, reserved) in policy.chain(reserved) {
            let f = self.flows.get_mut(&fid).expect("scheduled flows are live");
            if let Some(r) = &mut f.reader {
                r.reserved = reserved;
            }
            let changed = if f.rate == 0.0 || rate == 0.0 {
                f.rate != rate
            } else {
                (rate - f.rate).abs() > RATE_TOLERANCE * f.rate
            };
            if changed {
                f.moved_before += f.moved_at_rate(now, heartbeat);
                f.asked += f.asked_at_rate(now);
                f.rate = rate;
                f.rate_since = now;
                self.pending.entry(f.src).or_default().insert(fid, rate);
            }
        }
        // A rejected coflow stays in the policy, which serves it as best effort from the next
        // decision on, below every guarantee: served outside the policy, unpaced, it would take
        // what admitted coflows were promised, and a member could jump the queue by asking for a
        // deadline it cannot meet.
        self.rejected.clear();
        self.policy.poll_rejected(&mut self.rejected);
        // Its first decision since it entered the policy judged it; one it admitted it judges
        // again only to reject it (it asked for more flows than it was admitted with).
        for id in judged {
            let c = self.coflows.get_mut(&id).expect("judged coflows are live");
            let rejected = self.rejected.contains(&id);
            if !c.judged || (rejected && c.admission != Admission::Rejected) {
                c.judged = true;
                c.admission = if rejected { Admission::Rejected } else { Admission::Admitted };
                *if rejected { &mut self.counters.coflows_rejected } else { &mut self.counters.coflows_admitted } += 1;
            }
        }
        if !self.rejected.is_empty() {
            for id in &self.rejected {
                tracing::info!(coflow = %id, "rejected by admission control; served as best effort");
            }
            self.mark(Why::Rejected);
        }
    }
}

/// Takes the rate of each flow held back by its client (with what its reservation is made for)
/// off the resources it crosses, in turn, each at most what they have left; returns each flow's
/// rate.
fn reserve(fabric: &mut Fabric, flows: Vec<(FlowId, Route, Reservation)>) -> Vec<(FlowId, f64, Option<Reservation>)> {
    let mut rates = Vec::with_capacity(flows.len());
    for (fid, route, made_for) in flows {
        let Reservation { pace, policy_rate } = made_for;
        let left = route.hops().iter().map(|&r| fabric.capacity(r)).fold(f64::INFINITY, f64::min);
        let rate = (pace * READER_HEADROOM).min(policy_rate).max(READER_FLOOR * left).min(left);
        for &r in route.hops() {
            fabric.set_capacity(r, (fabric.capacity(r) - rate).max(0.0));
        }
        tracing::debug!(target: "coflow::decide", flow = %fid, pace, policy_rate, rate, "held back by its reader");
        rates.push((fid, rate, Some(made_for)));
    }
    rates
}

/// Logs (target `coflow::decide`, trace) what a decision sees of a coflow: its flows, their
/// remaining bytes and the most of them on one port, the bytes its bottleneck must carry.
fn trace_coflow(id: CoflowId, name: &str, flows: &[SnapshotFlow]) {
    let mut ports: BTreeMap<(bool, MachineId), f64> = BTreeMap::new();
    for f in flows {
        *ports.entry((true, f.src)).or_default() += f.remaining;
        *ports.entry((false, f.dst)).or_default() += f.remaining;
    }
    let remaining: f64 = flows.iter().map(|f| f.remaining).sum();
    let (port, most) = ports.into_iter().fold((None, 0.0), |a, (p, b)| if b > a.1 { (Some(p), b) } else { a });
    let port = port.map(|(up, m)| format!("{}{}", if up { "up" } else { "down" }, m.0));
    tracing::trace!(target: "coflow::decide", coflow = %id, name, flows = flows.len(), remaining, port, most, "coflow");
}
