//! What the coordinator shows of itself: the live view for `coflow status` and the web page, and
//! the counters and gauges for `/metrics`, all read from [`Core`] through its plain accessors.

use std::collections::BTreeMap;

use coflow_core::CoflowId;
pub(crate) use coflow_telemetry::Sample;
use coflow_telemetry::{Metrics, Value};

use crate::core::Core;
use crate::status::CoflowView;
pub(crate) use crate::status::StatusView;

impl Core {
    /// What is live: coflows with their unfinished flows, and agents.
    pub fn status(&self) -> StatusView {
        let mut coflows: BTreeMap<CoflowId, CoflowView> = self.coflows().map(|c| (c.id, c)).collect();
        for (coflow, flow) in self.flows() {
            if let Some(c) = coflows.get_mut(&coflow) {
                c.flows.push(flow);
            }
        }
        StatusView {
            policy: self.policy_name().to_string(),
            coflows: coflows.into_values().collect(),
            agents: self.agents().collect(),
        }
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
            Sample::gauge("live_coflows", "Registered coflows.", int(self.live_coflows())),
            Sample::gauge("scheduled_coflows", "Coflows the policy schedules.", int(self.scheduled_coflows())),
            Sample::gauge("live_flows", "Unfinished flows.", int(self.live_flows())),
            Sample::gauge("agents_alive", "Live agents.", int(self.agents_alive())),
        ];
        // The reasons the coordinator gives itself are listed at 0 from the start, so that each
        // series exists before its first failure (reasons agents report join as they come).
        let mut failed: BTreeMap<&str, u64> =
            ["agent-departed", "agent-restarted", "agent-timed-out"].map(|r| (r, 0)).into();
        failed.extend(self.failures());
        for (reason, v) in failed {
            let help = "Flows that failed, by reason (error kind).";
            out.push(Sample::counter("flows_failed_by_reason", help, v).with("reason", reason));
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
