//! Coflows that wait for all their gets, filed by their readiness deadline (when their held
//! flows are released whatever else happens), so that finding those due and the next one costs
//! what is due, not a pass over every coflow at every event; and the seal, after which a coflow
//! expects one get per piece.

use std::collections::BTreeSet;

use coflow_core::{CoflowId, Nanos};

use super::{CoflowRec, Core, Notice, Transmit};
use crate::error::CoordError;

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
}
