//! Coflows that wait for all their gets, filed by their readiness deadline (when their held
//! flows are released whatever else happens), so that finding those due and the next one costs
//! what is due, not a pass over every coflow at every event; the release of a coflow's held
//! flows into service, once ready; the count of the gets a coflow expects and has seen; and the
//! seal, after which a coflow expects one get per piece.

use std::collections::BTreeSet;

use coflow_core::{CoflowId, FlowId, MachineId, Nanos};
use coflow_proto::DataId;

use super::{CoflowRec, CoflowState, Core, FlowState, InPolicy, Notice, Transmit, Why};
use crate::error::CoordError;

impl CoflowRec {
    /// Whether, waiting for all gets, no more are expected: `num_flows` were seen, or the coflow
    /// is sealed and as many gets as pieces put were seen. A coflow registered with `num_flows`
    /// 0 (unknown) waits for its seal (or its timeout).
    pub(super) fn all_gets_in(&self) -> bool {
        self.expected_gets().is_some_and(|expected| self.gets_seen > 0 && self.gets_seen >= expected)
    }

    /// Whether a get of piece `data_id` at `machine` is one whose flow failed, asked again; if so,
    /// that failed get is taken as answered.
    pub(super) fn asked_again(&mut self, machine: MachineId, data_id: &DataId) -> bool {
        // Most coflows never had a get fail: their gets build no key.
        if self.failed_gets.is_empty() {
            return false;
        }
        let key = (machine, data_id.clone());
        let Some(n) = self.failed_gets.get_mut(&key) else { return false };
        *n -= 1;
        if *n == 0 {
            self.failed_gets.remove(&key);
        }
        true
    }

    /// How many gets it expects: as many as pieces put once sealed, else `num_flows` if given.
    pub(super) fn expected_gets(&self) -> Option<u32> {
        if self.sealed { Some(self.puts.len() as u32) } else { (self.reg.num_flows > 0).then_some(self.reg.num_flows) }
    }

    /// Of the flows it expects, those nobody has asked for yet ([`coflow_sched::CoflowState::pending`]).
    pub(super) fn pending(&self) -> u32 {
        self.expected_gets().map_or(0, |expected| expected.saturating_sub(self.width))
    }
}

/// Coflows by readiness deadline.
pub(super) type Ready = BTreeSet<(Nanos, CoflowId)>;

/// Files coflow `id` (`c`) in `ready` under its readiness deadline as it now stands (its held
/// flows and first get), or under none; to be called whenever either changes.
pub(super) fn file(ready: &mut Ready, id: CoflowId, c: &mut CoflowRec) {
    let due = c.ready_deadline();
    if due != c.filed {
        if let Some(old) = c.filed {
            ready.remove(&(old, id));
        }
        if let Some(new) = due {
            ready.insert((new, id));
        }
        c.filed = due;
    }
}

impl Core {
    /// No more puts will come for a coflow (`by`: the caller's identity; its owner or the admin
    /// only).
    pub fn handle_seal(&mut self, now: Nanos, by: &str, id: CoflowId) -> Result<(), CoordError> {
        self.input(now);
        let c = self.coflows.get_mut(&id).ok_or(CoordError::UnknownCoflow(id))?;
        if !Self::may_change(c, by) {
            return Err(CoordError::NotTheOwner { coflow: id, caller: by.to_string() });
        }
        if !c.sealed {
            c.sealed = true;
            // The agents holding its pieces keep the seal, to re-announce it after a restart (one
            // not watching is told when it watches again).
            for m in c.puts.machines().filter(|m| self.watching.contains(m)) {
                self.outbox.push_back(Transmit::Notice(m, Notice::CoflowSealed(id)));
            }
        }
        // Its gets may all be in already: the seal is what they waited for.
        if c.all_gets_in() {
            self.release(now, id);
        }
        Ok(())
    }

    /// The coflows whose readiness deadline is at or before `now`.
    pub(super) fn ready_by(&self, now: Nanos) -> Vec<CoflowId> {
        self.ready.iter().take_while(|&&(due, _)| due <= now).map(|&(_, id)| id).collect()
    }

    /// The earliest readiness deadline, if a coflow waits for one.
    pub(super) fn next_ready(&self) -> Option<Nanos> {
        self.ready.first().map(|&(due, _)| due)
    }

    /// Whether every coflow is filed under its readiness deadline and nothing else is; if not,
    /// the first that is not. For tests (see [`Core::recount`]).
    pub(super) fn check_ready(&self) -> Result<(), String> {
        let fresh: Ready = self.coflows.iter().filter_map(|(&id, c)| c.ready_deadline().map(|due| (due, id))).collect();
        if let Some((&id, c)) = self.coflows.iter().find(|(_, c)| c.filed != c.ready_deadline()) {
            return Err(format!("coflow {id} is filed under {:?}, due {:?}", c.filed, c.ready_deadline()));
        }
        if fresh != self.ready {
            return Err(format!("readiness deadlines {:?} filed, {fresh:?} due", self.ready));
        }
        Ok(())
    }

    /// Moves a coflow's held flows into service: judged small, they bypass the policy; else
    /// the policy schedules them (local flows and every flow under `tcp` go unscheduled). A
    /// blind policy's coflows are never judged by size.
    pub(super) fn release(&mut self, now: Nanos, id: CoflowId) {
        let threshold = if self.blind { 0 } else { self.cfg.bypass_threshold_bytes };
        let Some(c) = self.coflows.get_mut(&id) else { return };
        let held = std::mem::take(&mut c.held);
        if held.is_empty() {
            return;
        }
        file(&mut self.ready, id, c);
        if matches!(c.state, CoflowState::Held | CoflowState::Bypassed) {
            // The bottleneck: most bytes on one port, over every piece put and every flow asked
            // for; small if under the threshold, with the owner's other coflows bypassing too.
            let bottleneck = c.puts.heaviest_machine().max(c.flows.heaviest_machine());
            let small = threshold > 0 && self.owners.may_bypass(&c.reg.owner, id, bottleneck, threshold);
            c.state = if small { CoflowState::Bypassed } else { CoflowState::Scheduled(None) };
            // A coflow judged large after bypassing stays counted until its flows end: those
            // that went unscheduled still run at full speed.
            if small {
                self.owners.bypass(&c.reg.owner, id, Some(bottleneck));
            }
        }
        let by_policy = !self.tcp && matches!(c.state, CoflowState::Scheduled(_));
        let (scheduled, unscheduled): (Vec<FlowId>, Vec<FlowId>) = held.into_iter().partition(|f| {
            let f = &self.flows[f];
            by_policy && !self.is_local(f.src, f.dst)
        });
        let flows = &mut self.flows;
        let Some(c) = self.coflows.get_mut(&id) else { return };
        if let CoflowState::Scheduled(in_policy) = &mut c.state
            && !scheduled.is_empty()
        {
            for f in &scheduled {
                flows.get_mut(f).expect("held flows are live").state = FlowState::Scheduled;
            }
            match in_policy {
                Some(p) => p.flows.extend(scheduled),
                None => {
                    *in_policy = Some(InPolicy { arrival: now, flows: scheduled.into_iter().collect() });
                    self.active.insert((now, id));
                    self.policy.handle_arrival(now, id);
                }
            }
        }
        for f in unscheduled {
            self.serve_unscheduled(f);
        }
        self.mark(Why::Release);
    }
}
