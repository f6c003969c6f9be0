//! What the coordinator shows of itself: the live view for `coflow status` and the Prometheus
//! text for `/metrics`, both read from [`Core`] through its plain accessors.

use ::core::net::SocketAddr;
use std::collections::BTreeMap;
use std::fmt::Write;

use coflow_core::{CoflowId, FlowId, MachineId};

use crate::core::Core;

/// A snapshot of live state, for `coflow status`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StatusView {
    /// The policy.
    pub policy: String,
    /// Live coflows by id.
    pub coflows: Vec<CoflowView>,
    /// Known agents.
    pub agents: Vec<AgentView>,
}

/// One live coflow.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CoflowView {
    /// Its id.
    pub id: CoflowId,
    /// Its name.
    pub name: String,
    /// Its announced `num_flows`.
    pub num_flows: u32,
    /// Pieces put so far.
    pub puts: u32,
    /// Whether it is served outside the policy (bypassed, or rejected by admission control).
    pub bypass: bool,
    /// Its unfinished flows: id, data id, source, destination, size, bytes sent, rate.
    pub flows: Vec<FlowView>,
}

/// One unfinished flow.
#[derive(Clone, Debug, PartialEq)]
pub struct FlowView {
    /// Its id.
    pub id: FlowId,
    /// Its piece.
    pub data_id: String,
    /// Sender.
    pub src: MachineId,
    /// Receiver.
    pub dst: MachineId,
    /// Size.
    pub size: u64,
    /// Bytes sent as last reported.
    pub sent: u64,
    /// Assigned rate, bytes per second.
    pub rate: f64,
}

/// One agent.
#[derive(Clone, Debug, PartialEq)]
pub struct AgentView {
    /// Its machine.
    pub machine: MachineId,
    /// Its data listener.
    pub data_addr: SocketAddr,
    /// Whether it is alive.
    pub alive: bool,
    /// Its last reported sending rate.
    pub tx_bps: f64,
    /// Its last reported receiving rate.
    pub rx_bps: f64,
}

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

    /// The counters and gauges in Prometheus text format.
    pub fn metrics(&self) -> String {
        let c = self.counters();
        let mut s = String::new();
        let mut line = |name: &str, kind: &str, help: &str, v: f64| {
            let _ = write!(
                s,
                "# HELP coflow_coordinator_{name} {help}\n# TYPE coflow_coordinator_{name} {kind}\n\
                 coflow_coordinator_{name} {v}\n"
            );
        };
        line("messages_total", "counter", "Control messages handled.", c.messages as f64);
        line("decisions_total", "counter", "Policy decisions.", c.decisions as f64);
        line("rate_pushes_total", "counter", "Rate batches pushed to agents.", c.pushes as f64);
        line("rate_changes_total", "counter", "Flow rate changes pushed.", c.rate_changes as f64);
        line("flows_finished_total", "counter", "Flows finished with every byte.", c.flows_finished as f64);
        line("flows_failed_total", "counter", "Flows that failed.", c.flows_failed as f64);
        line("coflows_registered_total", "counter", "Coflows registered.", c.coflows_registered as f64);
        line("flows_recovered_total", "counter", "Flows re-announced after a restart.", c.flows_recovered as f64);
        line("coflows_adopted_total", "counter", "Coflows adopted after a restart.", c.coflows_adopted as f64);
        line("live_coflows", "gauge", "Registered coflows.", self.live_coflows() as f64);
        line("scheduled_coflows", "gauge", "Coflows the policy schedules.", self.scheduled_coflows() as f64);
        line("live_flows", "gauge", "Unfinished flows.", self.live_flows() as f64);
        line("agents_alive", "gauge", "Live agents.", self.agents_alive() as f64);
        let mut labelled = |name: &str, help: &str, rows: &mut dyn Iterator<Item = (&str, u64)>| {
            let _ = write!(s, "# HELP coflow_coordinator_{name} {help}\n# TYPE coflow_coordinator_{name} counter\n");
            for (reason, v) in rows {
                let _ = writeln!(s, "coflow_coordinator_{name}{{reason=\"{reason}\"}} {v}");
            }
        };
        labelled("flows_failed_by_reason_total", "Flows that failed, by reason (error kind).", &mut self.failures());
        labelled("flows_timed_out_total", "Flows that failed on a timeout, by which one.", &mut self.timeouts());
        s
    }
}
