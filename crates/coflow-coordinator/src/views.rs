//! What the coordinator shows of itself: the live view for `coflow status` and the web page, and
//! the counters and gauges for `/metrics`, all read from [`Core`] through its plain accessors.

use std::collections::BTreeMap;

use coflow_core::CoflowId;
pub(crate) use coflow_telemetry::Sample;
use coflow_telemetry::{Metrics, Value};

use crate::core::Core;
pub(crate) use crate::status::StatusView;
use crate::status::{AgentView, CoflowView, STATUS_PAGE_BYTES, StatusPage};

impl Core {
    /// What is live: coflows with their unfinished flows, and agents.
    pub fn status(&self) -> StatusView {
        let coflows = self.coflows().map(|c| CoflowView { flows: self.flows_of(c.id).collect(), ..c }).collect();
        StatusView {
            policy: self.policy_name().to_string(),
            coflows,
            agents: self.agents().collect(),
            links: self.link_views(),
            bytes_relayed: self.counters().bytes_relayed,
            flows_rerouted: self.counters().flows_rerouted,
            decisions: self.counters().decisions,
        }
    }

    /// One page of what is live: up to `max_coflows` coflows with an id above `after`, by id, with
    /// their unfinished flows, within [`STATUS_PAGE_BYTES`] (a coflow whose flows alone pass it
    /// comes with those that fit, the rest counted as omitted); the agents on the first page. With
    /// a `viewer`, only the coflows it may use ([`Core::coflows_after`]).
    pub fn status_page(&self, after: CoflowId, max_coflows: usize, viewer: Option<&str>) -> StatusPage {
        let first = after == CoflowId(0);
        let agents: Vec<AgentView> = if first { self.agents().collect() } else { Vec::new() };
        let mut budget = STATUS_PAGE_BYTES.saturating_sub(agents.len() * 64);
        let mut coflows: BTreeMap<CoflowId, CoflowView> = BTreeMap::new();
        let mut more = None;
        let mut sizes: BTreeMap<CoflowId, usize> = BTreeMap::new();
        let candidates: Vec<CoflowView> = self.coflows_after(after, viewer).take(max_coflows.max(1) + 1).collect();
        let last = candidates.get(max_coflows.max(1).min(candidates.len()).saturating_sub(1)).map(|c| c.id);
        if let Some(last) = last {
            for c in candidates.iter().take_while(|c| c.id <= last) {
                sizes.insert(c.id, self.flows_of(c.id).map(|f| 64 + f.data_id.len()).sum());
            }
        }
        let mut omit_from = None;
        for (i, c) in candidates.into_iter().enumerate() {
            let cost = 48 + c.name.len() + sizes.get(&c.id).copied().unwrap_or(0);
            if i >= max_coflows.max(1) || (!coflows.is_empty() && cost > budget) {
                more = coflows.keys().next_back().copied();
                break;
            }
            if cost > budget {
                // Alone on its page and too big: it comes with the flows that fit.
                omit_from = Some((c.id, budget.saturating_sub(48 + c.name.len())));
            }
            budget = budget.saturating_sub(cost);
            coflows.insert(c.id, c);
        }
        let mut flows_omitted = 0;
        let mut room = omit_from.map(|(_, r)| r);
        for (&coflow, c) in coflows.iter_mut() {
            for flow in self.flows_of(coflow) {
                if omit_from.is_some_and(|(id, _)| id == coflow) {
                    let cost = 64 + flow.data_id.len();
                    match room.as_mut() {
                        Some(r) if *r >= cost => *r -= cost,
                        _ => {
                            flows_omitted += 1;
                            continue;
                        }
                    }
                }
                c.flows.push(flow);
            }
        }
        let c = self.counters();
        let links = if first { self.link_views() } else { Vec::new() };
        let view = StatusView {
            policy: self.policy_name().to_string(),
            coflows: coflows.into_values().collect(),
            agents,
            links,
            bytes_relayed: c.bytes_relayed,
            flows_rerouted: c.flows_rerouted,
            decisions: c.decisions,
        };
        StatusPage { view, next: more, flows_omitted }
    }

    /// The counters and gauges, read at each scrape (the histograms are the service's).
    pub fn samples(&self) -> Vec<Sample> {
        let c = self.counters();
        let int = |v: usize| Value::Int(v as u64);
        let mut out = vec![
            Sample::counter("messages", "Control messages handled.", c.messages),
            Sample::counter("decisions", "Policy decisions.", c.decisions),
            Sample::counter("rate_pushes", "Rate batches pushed to agents.", c.pushes),
            Sample::counter("rate_changes", "Flow rate changes pushed.", c.rate_changes),
            Sample::counter("flows_finished", "Flows finished with every byte.", c.flows_finished),
            Sample::counter("flows_failed", "Flows that failed.", c.flows_failed),
            Sample::counter("coflows_registered", "Coflows registered.", c.coflows_registered),
            Sample::counter("flows_recovered", "Flows re-announced after a restart.", c.flows_recovered),
            Sample::counter("coflows_adopted", "Coflows adopted after a restart.", c.coflows_adopted),
            Sample::counter(
                "coflows_expired",
                "Coflows unregistered because their lease ran out without a renewal.",
                c.coflows_expired,
            ),
            Sample::counter("recoveries_refused", "Re-announcements refused.", c.recoveries_refused),
            Sample::counter("pauses", "Times the coordinator found it had not run for a while.", c.pauses),
            Sample::counter("parts_relayed", "Get parts relayed through a third datacenter.", c.parts_relayed),
            Sample::counter(
                "bytes_relayed",
                "Bytes relayed through a third datacenter, counted as each relayed part ends (to its cut, when resumed).",
                c.bytes_relayed,
            ),
            Sample::counter("flows_rerouted", "Flows whose rest was resumed over another path.", c.flows_rerouted),
            Sample::gauge("live_coflows", "Registered coflows.", int(self.live_coflows())),
            Sample::gauge("scheduled_coflows", "Coflows the policy schedules.", int(self.scheduled_coflows())),
            Sample::gauge("live_flows", "Unfinished flows.", int(self.live_flows())),
            Sample::gauge("agents_alive", "Live agents.", int(self.agents_alive())),
        ];
        // What the coordinator believes the fabric carries: each wide-area link's estimate, and on
        // a big switch each alive agent's ports (its registered rate until measured lower).
        let links = self.link_views();
        let big_switch = links.is_empty();
        for l in links {
            let help = "A wide-area link's bandwidth as the coordinator measured it, bytes per second.";
            out.push(
                Sample::gauge("link_estimate_bytes_per_second", help, Value::Float(l.estimate)).with("link", l.name),
            );
        }
        for a in self.agents().filter(|a| a.alive && big_switch) {
            let help = "An agent's port capacity as the coordinator measured it, bytes per second.";
            for (direction, v) in [("up", a.uplink_bps), ("down", a.downlink_bps)] {
                let s = Sample::gauge("port_estimate_bytes_per_second", help, Value::Float(v));
                out.push(s.with("machine", a.machine.0.to_string()).with("direction", direction));
            }
        }
        // The reasons the coordinator gives itself are listed at 0 from the start, so that each
        // series exists before its first failure (reasons agents report join as they come).
        let mut failed: BTreeMap<&str, u64> =
            ["agent-departed", "agent-restarted", "agent-timed-out"].map(|r| (r, 0)).into();
        failed.extend(self.failures());
        for (reason, v) in failed {
            let help = "Flows that failed, by reason (error kind).";
            out.push(Sample::counter("flows_failed_by_reason", help, v).with("reason", reason));
        }
        for (outcome, v) in [("admitted", c.coflows_admitted), ("rejected", c.coflows_rejected)] {
            let help = "Admission control's judgements of coflows with a deadline, by outcome (a coflow is judged as it \
                        enters the policy, and again when it asks for more flows after its admission).";
            out.push(Sample::counter("admissions", help, v).with("outcome", outcome));
        }
        for (outcome, v) in [("met", c.deadlines_met), ("missed", c.deadlines_missed)] {
            let help = "Coflows with a deadline that completed, by whether their last flow ended by it (from \
                        registration); one dropped unfinished past it missed it.";
            out.push(Sample::counter("deadlines", help, v).with("outcome", outcome));
        }
        let mut timed_out: BTreeMap<&str, u64> = ["agent-heartbeat", "data-read"].map(|r| (r, 0)).into();
        timed_out.extend(self.timeouts());
        for (reason, v) in timed_out {
            let help = "Flows that failed on a timeout, by which one.";
            out.push(Sample::counter("flows_timed_out", help, v).with("reason", reason));
        }
        out
    }

    /// The counters and gauges as Prometheus text (without the service's histograms).
    pub fn metrics(&self) -> String {
        let m = Metrics::new("coordinator", env!("CARGO_PKG_VERSION"));
        m.snapshot().set(self.samples());
        m.encode()
    }
}
