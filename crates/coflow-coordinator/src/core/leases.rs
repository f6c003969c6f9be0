//! Leases: a coflow registered with one is unregistered once a lease has passed since its
//! registration (or adoption) and its last renewal, so that the coflows of a framework that died
//! without unregistering them do not hold their places and pieces for ever. Time the core did
//! not run (its process paused) counts for no lease, and no lease is found run out at the first
//! run after a quiet spell, before the renewals queued over it are in.

use coflow_core::{CoflowId, Nanos};
use coflow_proto::Registration;

use super::Core;

/// A run this long after the one before ends a quiet spell (the process paused, or simply
/// nothing to do), and a lease is found run out only this long after the last quiet spell ended:
/// the renewals that queued over it, in the channel or still being read off their connections,
/// come in first.
const QUIET: Nanos = Nanos::from_millis(250);

impl Core {
    /// A framework (`by`: the caller's identity) renews the leases of `ids` for another lease
    /// each, from `now`; returns those it did not renew: not live, or another identity's (a
    /// coflow without a lease is renewed as a no-op).
    pub fn handle_renew(&mut self, now: Nanos, by: &str, ids: &[CoflowId]) -> Vec<CoflowId> {
        self.input(now);
        let mut not_renewed = Vec::new();
        for &id in ids {
            let Some(c) = self.coflows.get_mut(&id).filter(|c| Self::may_change(c, by)) else {
                not_renewed.push(id);
                continue;
            };
            if let (Some(until), Some(lease)) = (c.lease_until, c.reg.options.lease) {
                let renewed = now.saturating_add(lease).max(until);
                c.lease_until = Some(renewed);
                self.leases.remove(&(until, id));
                self.leases.insert((renewed, id));
            }
        }
        not_renewed
    }

    /// Starts the lease of coflow `id`, registered (or adopted) at `now` as `reg`, if it has one:
    /// it is in line to expire from then; returns when it runs out.
    pub(super) fn start_lease(&mut self, now: Nanos, id: CoflowId, reg: &Registration) -> Option<Nanos> {
        let until = now.saturating_add(reg.options.lease?);
        self.leases.insert((until, id));
        Some(until)
    }

    /// Notes a run at `now` (before the core takes it as its time): one more than [`QUIET`]
    /// after the last ends a quiet spell, unless it is the look the core asked for at
    /// `lease_check` (a timer's wake-up comes a little late, and would put the look off again).
    pub(super) fn note_run(&mut self, now: Nanos) {
        if now.saturating_sub(self.now.max(self.lease_check)) > QUIET {
            self.awake_since = now;
        }
    }

    /// Unregisters every coflow whose lease ran out by `now`, once the core has run for
    /// [`QUIET`] since its last quiet spell ended (else it looks again then).
    pub(super) fn expire_leases(&mut self, now: Nanos) {
        if self.leases.first().is_none_or(|&(until, _)| until > now) {
            return;
        }
        let settled = self.awake_since.saturating_add(QUIET);
        if now < settled {
            self.lease_check = settled;
            return;
        }
        while let Some(&(until, id)) = self.leases.first()
            && until <= now
        {
            self.leases.pop_first();
            let owner = self.coflows.get(&id).map_or(String::new(), |c| c.reg.owner.clone());
            tracing::info!(coflow = %id, owner, "coflow unregistered: its lease ran out without a renewal");
            self.counters.coflows_expired += 1;
            self.drop_coflow(now, id);
        }
    }

    /// Lengthens every lease by `gap`, a time the core did not run, when no framework could
    /// renew.
    pub(super) fn lengthen_leases(&mut self, gap: Nanos) {
        for (until, id) in std::mem::take(&mut self.leases) {
            let until = until.saturating_add(gap);
            self.leases.insert((until, id));
            if let Some(c) = self.coflows.get_mut(&id) {
                c.lease_until = Some(until);
            }
        }
    }
}
