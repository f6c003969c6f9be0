//! Recovery after a coordinator restart: agents re-announce the pieces they hold and the flows
//! they still receive, and the coordinator adopts them only inside its restart window, only from
//! the agents that may claim them, and only when they agree; ids are adopted only from below the
//! range this coordinator issues, and an unregistered id is never revived. A part of a get split
//! by a previous coordinator is not re-announced but resumed: its receiver names the rest's
//! range, granted inside the restart window.

use coflow_core::{CoflowId, MachineId, Nanos};
use coflow_proto::{FlowRecovery, GetAnnouncement, ProtoError, Registration};

use super::{Core, FlowGrant, FlowRec, FlowState, Notice, Routing, Transmit};
use crate::error::CoordError;

/// Why an unknown id re-announced is not adopted.
enum Refusal {
    /// Not below the id base: not a previous coordinator's.
    NotIssued,
    /// The restart window has closed.
    Closed,
}

/// Which ids an id re-announced is one of, and so which counter it may lift.
#[derive(Clone, Copy)]
enum Ids {
    Coflows,
    Flows,
}

fn closed(id: CoflowId) -> String {
    format!("coflow {id}: re-announced coflows are adopted only in the restart window")
}

/// How many unregistered coflow ids the core remembers, to refuse their re-announcement.
const REMEMBERED_UNREGISTERED: usize = 65_536;

/// How many of a previous coordinator's flows the core lets be resumed in its restart window.
const REMEMBERED_RESUMES: usize = 65_536;

/// The bytes `[start, end)` of a piece a get is granted; whether it resumes a previous
/// coordinator's flow; whether it is a get this coordinator had not seen.
pub(super) struct Span {
    pub(super) start: u64,
    pub(super) end: u64,
    pub(super) previous: bool,
    pub(super) new_get: bool,
}

/// How far above its id base an id an agent re-announces may lift the next ids (a year in
/// microseconds): ids are the clock in microseconds at start, so an id above the base that this
/// coordinator did not issue is a previous run's under a clock set back (or a forgery); it is
/// never adopted, but new ids go above it, so that no id names two coflows, and a forged id
/// cannot wrap the counter.
const ID_HEADROOM: u64 = 365 * 86_400 * 1_000_000;

impl Core {
    /// Whether `now` is inside the restart window, in which re-announced coflows and flows of a
    /// previous coordinator may be adopted.
    pub fn in_restart_window(&self, now: Nanos) -> bool {
        now < self.recovery_until
    }

    /// Sets when the restart window closes (by default three agent timeouts after time zero).
    pub fn set_restart_window(&mut self, until: Nanos) {
        self.recovery_until = until;
    }

    /// Remembers that `id` was unregistered, so that it is never adopted again.
    pub(super) fn forget(&mut self, id: CoflowId) {
        if self.unregistered_set.insert(id) {
            self.unregistered.push_back(id);
            if self.unregistered.len() > REMEMBERED_UNREGISTERED
                && let Some(old) = self.unregistered.pop_front()
            {
                self.unregistered_set.remove(&old);
            }
        }
    }

    /// Coflow and flow ids start at `base` (the service passes the clock in microseconds, so
    /// that a previous coordinator's ids, which agents re-announce, lie below). Only an id below
    /// the base may be adopted from a re-announcement; an unknown id from `base` up to the last
    /// one this coordinator allocated was unregistered (or ended) here and is never adopted
    /// again; an id above that was never issued here (a clock set back, or a forgery): it is not
    /// adopted, but lifts the next ids above it (by at most a year of microseconds above the base).
    pub fn set_id_base(&mut self, base: u64) {
        self.id_base = self.id_base.max(base);
        self.next_coflow = self.next_coflow.max(base);
        self.next_flow = self.next_flow.max(base);
    }

    /// Refuses a re-announcement, counting it.
    pub(super) fn refuse<T>(&mut self, e: CoordError) -> Result<T, CoordError> {
        self.counters.recoveries_refused += 1;
        tracing::debug!(error = %e, "re-announcement refused");
        Err(e)
    }

    /// Whether an unknown id re-announced may be adopted: issued by a previous coordinator (below
    /// the base), not unregistered here, within the restart window. An id at or above the base
    /// this coordinator did not issue lifts the next id of its kind above it (within the headroom).
    fn adoptable(&mut self, now: Nanos, id: u64, ids: Ids) -> Result<(), Refusal> {
        if id >= self.id_base {
            let next = match ids {
                Ids::Coflows => &mut self.next_coflow,
                Ids::Flows => &mut self.next_flow,
            };
            if id >= *next && id < self.id_base.saturating_add(ID_HEADROOM) {
                *next = id + 1;
            }
            return Err(Refusal::NotIssued);
        }
        if !self.in_restart_window(now) {
            return Err(Refusal::Closed);
        }
        Ok(())
    }

    /// Adopts a coflow a previous coordinator registered, from a piece's re-announcement with its
    /// registration: within the restart window, below the id base, never one unregistered here,
    /// and within `max_coflows`.
    pub(super) fn adopt(&mut self, now: Nanos, id: CoflowId, reg: Option<Registration>) -> Result<(), CoordError> {
        if self.unregistered_set.contains(&id) {
            return self.refuse(CoordError::UnknownCoflow(id));
        }
        match self.adoptable(now, id.0, Ids::Coflows) {
            Ok(()) => {}
            Err(Refusal::NotIssued) => {
                return self.refuse(CoordError::UnknownCoflow(id));
            }
            Err(Refusal::Closed) => return self.refuse(CoordError::NotRecoverable(closed(id))),
        }
        let Some(reg) = reg else {
            return self
                .refuse(CoordError::NotRecoverable(format!("coflow {id} is re-announced without its registration")));
        };
        if let Err(why) = self.room_for(&reg.owner) {
            return self.refuse(CoordError::LimitExceeded(format!("{why}: coflow {id} not adopted")));
        }
        tracing::info!(coflow = %id, "coflow adopted from an agent's re-announcement");
        self.counters.coflows_adopted += 1;
        self.hold(now, id, reg);
        Ok(())
    }

    /// A piece of `coflow` re-announced by `machine`, `sealed` (its agent was told of the seal),
    /// inside the restart window seals the coflow again, and one re-announced unsealed into a
    /// sealed coflow gets its agent told, so that the seal outlives the next restart too. Past
    /// the window this coordinator saw every seal itself, and an agent's word seals nothing.
    pub(super) fn recover_seal(&mut self, now: Nanos, coflow: CoflowId, machine: MachineId, sealed: bool) {
        let window = self.in_restart_window(now);
        let Some(c) = self.coflows.get_mut(&coflow) else { return };
        if sealed && !c.sealed && window {
            c.sealed = true;
            if c.all_gets_in() {
                self.release(now, coflow);
            }
        } else if c.sealed && !sealed && self.watching.contains(&machine) {
            self.outbox.push_back(Transmit::Notice(machine, Notice::CoflowSealed(coflow)));
        }
    }

    /// What `get` (of a piece of `size` bytes) is granted: the piece, or the rest of the flow its
    /// receiver cut, which must be inside that flow's bytes; a flow this coordinator does not
    /// know is a previous coordinator's (see [`Core::resume_previous`]).
    pub(super) fn span(&mut self, now: Nanos, get: &GetAnnouncement, size: u64) -> Result<Span, CoordError> {
        let Some((old, at)) = get.resume else {
            return Ok(Span { start: 0, end: size, previous: false, new_get: true });
        };
        let Some(f) = self.flows.get(&old) else { return self.resume_previous(now, get, size) };
        if f.dst != get.machine || f.coflow != get.coflow || f.data_id != get.data_id {
            return Err(CoordError::NotTheReceiver { flow: old, machine: get.machine });
        }
        let end = f.offset + f.size;
        if !(f.offset..end).contains(&at) {
            let reason = format!("{at} is not inside flow {old}'s bytes {}..{end}", f.offset);
            return Err(CoordError::Invalid(ProtoError::Invalid { field: "resume_offset", reason }));
        }
        Ok(Span { start: at, end, previous: false, new_get: false })
    }

    /// The rest a receiver resumes of a flow this coordinator does not know, which a previous
    /// coordinator granted: an id below the base, resumed once, inside the restart window, of a
    /// coflow from before this coordinator, with the part's end named and within the piece's
    /// `size`. The caller has checked that the receiver's client may get the piece, so any range
    /// of it may be granted. The first resume of a get's parts counts the get, which this
    /// coordinator never saw (as a recovered flow is counted). Else `unknown-flow` (as a flow
    /// resumed twice here), `unknown-coflow`, `invalid-argument` naming `resume_end`, or
    /// `not-recoverable` once the window has closed.
    fn resume_previous(&mut self, now: Nanos, get: &GetAnnouncement, size: u64) -> Result<Span, CoordError> {
        let (old, at) = get.resume.expect("a resume");
        match self.adoptable(now, old.0, Ids::Flows) {
            Ok(()) => {}
            Err(Refusal::NotIssued) => {
                return self.refuse(CoordError::UnknownFlow(old));
            }
            Err(Refusal::Closed) => {
                return self.refuse(CoordError::NotRecoverable(format!(
                    "flow {old}: a previous coordinator's flows are resumed only in the restart window"
                )));
            }
        }
        if self.resumed_previous.contains_key(&old) {
            return self.refuse(CoordError::UnknownFlow(old));
        }
        if get.coflow.0 >= self.id_base {
            // A coflow of this coordinator's cannot hold a previous coordinator's flow.
            return self.refuse(CoordError::UnknownCoflow(get.coflow));
        }
        let Some(end) = get.resume_end else { return self.refuse(CoordError::UnknownFlow(old)) };
        if end > size {
            let reason = format!("{end} is past the end of piece {} ({size} bytes)", get.data_id);
            return self.refuse(CoordError::Invalid(ProtoError::Invalid { field: "resume_end", reason }));
        }
        if self.resumed_previous.len() >= REMEMBERED_RESUMES {
            let why = format!("flow {old}: {REMEMBERED_RESUMES} of a previous coordinator's flows resumed already");
            return self.refuse(CoordError::NotRecoverable(why));
        }
        let key = (get.coflow, get.data_id.clone(), get.machine);
        let new_get = !self.resumed_previous.values().any(|k| *k == key);
        self.resumed_previous.insert(old, key);
        tracing::info!(flow = %old, at, end, "a previous coordinator's flow resumed");
        Ok(Span { start: at, end, previous: true, new_get })
    }

    /// Forgets, once the restart window has closed, which of a previous coordinator's flows were
    /// resumed: none may be from then on.
    pub(super) fn close_restart_window(&mut self, now: Nanos) {
        if !self.in_restart_window(now) && !self.resumed_previous.is_empty() {
            self.resumed_previous.clear();
        }
    }

    /// A receiving agent re-announces a flow a previous coordinator granted: it is scheduled
    /// again under its old id, if it is consistent: within the restart window, an id below the
    /// base, of a coflow known here whose piece its source holds at the size it names. Before
    /// the source has re-announced the piece the answer is `unknown-coflow` or `no-such-data`
    /// (which the service tells as "not yet" inside the window).
    pub fn handle_recover_flow(&mut self, now: Nanos, r: FlowRecovery) -> Result<FlowGrant, CoordError> {
        self.input(now);
        let src_agent = self.agents.get(&r.src).filter(|a| a.alive).ok_or(CoordError::AgentUnavailable(r.src))?;
        // A re-announced flow is a whole piece fetched directly.
        let whole = coflow_proto::ticket::Scope::range(0, r.size);
        let ticket = self.tickets.issue(r.src, r.flow, r.coflow, r.data_id.as_str(), r.dst, whole);
        let grant = FlowGrant {
            flow: r.flow,
            src: r.src,
            src_data_addr: src_agent.data_addr,
            size: r.size,
            ticket,
            parts: Vec::new(),
            reroutable: false,
        };
        if !self.agents.get(&r.dst).is_some_and(|a| a.alive) {
            return Err(CoordError::AgentUnavailable(r.dst));
        }
        if let Some(f) = self.flows.get(&r.flow) {
            // Re-announced twice, or a flow of this very coordinator: nothing to do.
            return if f.src == r.src && f.dst == r.dst && f.coflow == r.coflow && f.size == r.size {
                Ok(grant)
            } else {
                self.refuse(CoordError::UnknownFlow(r.flow))
            };
        }
        if (self.id_base..self.next_flow).contains(&r.flow.0) {
            return self.refuse(CoordError::UnknownFlow(r.flow));
        }
        match self.adoptable(now, r.flow.0, Ids::Flows) {
            Ok(()) => {}
            Err(Refusal::NotIssued) => {
                return self.refuse(CoordError::UnknownFlow(r.flow));
            }
            Err(Refusal::Closed) => {
                return self.refuse(CoordError::NotRecoverable(format!(
                    "flow {}: recovered flows are adopted only in the restart window",
                    r.flow
                )));
            }
        }
        if r.coflow.0 >= self.id_base {
            // A coflow of this coordinator's cannot hold a previous coordinator's flow.
            return self.refuse(CoordError::UnknownCoflow(r.coflow));
        }
        let Some(c) = self.coflows.get(&r.coflow) else { return Err(CoordError::UnknownCoflow(r.coflow)) };
        if c.puts.get(&r.data_id) != Some((r.src, r.size)) {
            // Not (yet) re-announced by its source, or not at that size.
            return Err(CoordError::NoSuchData { coflow: r.coflow, data_id: r.data_id });
        }
        self.next_flow = self.next_flow.max(r.flow.0 + 1);
        self.counters.flows_recovered += 1;
        tracing::info!(flow = %r.flow, coflow = %r.coflow, received = r.received, "flow recovered");
        let c = self.coflows.get_mut(&r.coflow).expect("known");
        c.gets_seen += 1;
        c.width += 1;
        c.first_get.get_or_insert(now);
        c.held.push(r.flow);
        super::readiness::file(&mut self.ready, r.coflow, c);
        c.flows.insert(r.flow, r.dst, r.size);
        self.flows.insert(
            r.flow,
            FlowRec {
                coflow: r.coflow,
                data_id: r.data_id,
                src: r.src,
                dst: r.dst,
                size: r.size,
                sent: r.received,
                reported_at: None,
                rate_since: now,
                moved_before: 0.0,
                state: FlowState::Held,
                rate: 0.0,
                offset: 0,
                via: None,
                links: self.link_between(r.src, r.dst).into_iter().collect(),
                asked: 0.0,
                rerouting: false,
                judged_in: (Nanos::ZERO, 0.0, 0.0),
                reader: None,
                routing: Routing::Direct,
            },
        );
        let by = super::owners::served_by(r.src, r.dst, None);
        self.owners.serve(&self.coflows[&r.coflow].reg.owner, r.flow, by);
        // It was released by the previous coordinator: it waits for nothing.
        self.release(now, r.coflow);
        Ok(grant)
    }
}
