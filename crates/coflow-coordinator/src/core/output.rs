//! What the core hands its caller besides answers: rates and notices to send to agents, and
//! measurements for the service's histograms.

use std::collections::VecDeque;

use coflow_core::{CoflowId, FlowId, MachineId, Nanos};

/// Rate changes for one agent's outgoing flows, bytes per second.
pub type RateBatch = Vec<(FlowId, f64)>;

/// What the coordinator tells an agent besides rates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Notice {
    /// A flow this agent receives was failed (its source was declared dead): end the get.
    FlowFailed(FlowId),
    /// A coflow was unregistered: forget its pieces, and end the gets of its flows this agent
    /// receives (the coordinator failed them `unknown-coflow`).
    CoflowDropped(CoflowId),
    /// A coflow this agent holds pieces of was sealed: re-announce them sealed after a restart.
    CoflowSealed(CoflowId),
    /// A flow this agent receives has lost its path (its link went down, its relay died): cut
    /// it at the bytes received and resume the rest.
    Reroute(FlowId),
}

/// What the core has for the service to send to agents watching their rates, in order.
#[derive(Clone, Debug, PartialEq)]
pub enum Transmit {
    /// Rate changes for one agent's outgoing flows.
    Rates(MachineId, RateBatch),
    /// A notice for one agent.
    Notice(MachineId, Notice),
    /// The agent was declared lost: end its rate stream, so it registers again.
    EndWatch(MachineId),
}

/// What the core measured, for the service's histograms (times from the `now` it was given).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Observation {
    /// Rate changes waited this long, from the decision that made them to their push (the push
    /// window's batching).
    PushDelay(Nanos),
    /// A scheduled coflow completed this long after its first get, at the end of its last flow
    /// that delivered: the last get it expects delivered, or it was dropped with none running
    /// (once per coflow); `bin` is its Varys bin by the pieces put (short: the largest under
    /// 5 MiB; narrow: at most 50 pieces).
    Completed {
        /// Its bin.
        bin: coflow_core::Bin,
        /// Its coflow completion time.
        cct: Nanos,
    },
}

/// Observes `c`'s completion, from its first get to the end of its last flow that delivered,
/// once: when the last get it expects has delivered, or else when it is dropped with no flow
/// running; however many waves its gets came in. Not while a get whose flow failed is still to
/// be asked again. Its completion time is observed only if a flow of it was served in the policy
/// (not bypassed, nor local only); a coflow with a deadline, under any policy and however it was
/// served, counts as having met it if that end came by its registration plus its deadline.
pub(super) fn observe_completion(
    observations: &mut VecDeque<Observation>,
    counters: &mut super::Counters,
    c: &mut super::CoflowRec,
) {
    if c.observed || !c.failed_gets.is_empty() {
        return;
    }
    if let (Some(first), Some(last)) = (c.first_get, c.last_end) {
        c.observed = true;
        if c.scheduled {
            let bin = coflow_core::Bin::of(coflow_core::Bytes(c.puts.longest()), c.puts.len());
            observations.push_back(Observation::Completed { bin, cct: last.saturating_sub(first) });
        }
        if let Some(d) = c.reg.options.deadline {
            if last <= c.registered.saturating_add(d) {
                counters.deadlines_met += 1;
            } else {
                counters.deadlines_missed += 1;
            }
        }
    }
}

/// A coflow dropped at `now` before its completion was observed (flows still running, or a get
/// whose flow failed not asked again), after a get and past its deadline, missed it.
pub(super) fn observe_abandoned(counters: &mut super::Counters, c: &mut super::CoflowRec, now: Nanos) {
    let Some(d) = c.reg.options.deadline else { return };
    if !c.observed && c.first_get.is_some() && now > c.registered.saturating_add(d) {
        c.observed = true;
        counters.deadlines_missed += 1;
    }
}
