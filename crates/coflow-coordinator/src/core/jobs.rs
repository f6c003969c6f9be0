//! Jobs: the coflows connected by their parents, which job-aware policies (`aalo-job`) rank
//! together. The simulator knows the whole workload and names a job by the first coflow of its
//! connected component; the coordinator learns parents one registration at a time, so a coflow
//! joins the earliest job among its parents still registered, and keeps it. Once a job's last
//! coflow is unregistered (or expired) no coflow can join it, and the policy is told it may
//! forget the job.

use coflow_core::CoflowId;
use coflow_proto::Registration;

use super::Core;
use crate::CoordError;

impl Core {
    /// Whether `reg` names as parents only coflows its owner may use: a parent of another
    /// identity's would join that coflow's job, and rank it by this coflow's bytes. A parent no
    /// longer registered (or never) is passed over.
    pub(super) fn may_name_parents(&self, reg: &Registration) -> Result<(), CoordError> {
        let foreign = |p: &&CoflowId| self.coflows.get(p).is_some_and(|c| !Self::may_change(c, &reg.owner));
        match reg.options.parents.iter().find(foreign) {
            Some(&coflow) => Err(CoordError::NotTheOwner { coflow, caller: reg.owner.clone() }),
            None => Ok(()),
        }
    }

    /// The job of coflow `id` registered as `reg`: the earliest job among its parents still
    /// registered that its owner may use, else its own.
    pub(super) fn job_of(&self, id: CoflowId, reg: &Registration) -> CoflowId {
        (reg.options.parents.iter())
            .filter_map(|p| self.coflows.get(p).filter(|c| Self::may_change(c, &reg.owner)))
            .map(|c| c.job)
            .min()
            .unwrap_or(id)
    }

    /// A coflow of `job` is registered.
    pub(super) fn join_job(&mut self, job: CoflowId) {
        *self.jobs.entry(job).or_default() += 1;
    }

    /// A coflow of `job` is unregistered or expired; the policy forgets a job left without
    /// coflows, which no coflow can join any more ([`Core::job_of`] looks at registered parents
    /// only).
    pub(super) fn leave_job(&mut self, job: CoflowId) {
        // A registered coflow's job is counted; were it not, the coordinator goes on serving
        // rather than stop on a client's call.
        let Some(n) = self.jobs.get_mut(&job) else {
            debug_assert!(false, "job {job} of a registered coflow is not counted");
            tracing::error!(%job, "a registered coflow's job was not counted");
            return;
        };
        *n -= 1;
        if *n == 0 {
            self.jobs.remove(&job);
            self.policy.handle_job_ended(job);
        }
    }
}
