//! The one interface every policy implements, for the simulator and the coordinator alike.

use std::fmt;

use coflow_core::{CoflowId, Nanos};

use crate::state::{Allocation, Input, ServiceModel};

/// A coflow scheduling policy: a pure state machine.
///
/// The driver tells it what happened (`handle_*`) and asks it for rates (`poll_allocation`)
/// whenever a coflow arrives or finishes, or the wake-up time it asked for comes.
/// It never reads a clock, sleeps, or does I/O: `now` is always passed in, so the simulator's
/// virtual clock and the coordinator's real one drive the very same code.
pub trait Scheduler: fmt::Debug + Send {
    /// The policy's short name, as selected on the command line.
    fn name(&self) -> &'static str;

    /// How the policy allocates, which decides what the driver aggregates for it.
    fn model(&self) -> ServiceModel;

    /// Whether a single flow finishing (not its whole coflow) calls for a new decision, and at
    /// most how often: `None` never, `Some(gap)` once `gap` has passed since the last decision
    /// (`Some(Nanos::ZERO)`: at every finished flow). Flows finishing inside the gap are picked
    /// up when it closes.
    fn flow_finish_gap(&self) -> Option<Nanos> {
        None
    }

    /// Whether the policy may reject coflows (admission control); reports then give the admitted
    /// share.
    fn admission_control(&self) -> bool {
        false
    }

    /// Whether the policy reads [`RouteState::min_remaining`](crate::RouteState::min_remaining)
    /// ([`ServiceModel::Route`] only). A driver may leave it unset for a policy that does not:
    /// keeping it current costs a pass over every route at every decision.
    fn reads_min_remaining(&self) -> bool {
        true
    }

    /// Whether the policy reads [`Changes::reshaped_legs`](crate::Changes::reshaped_legs)
    /// ([`ServiceModel::Proportional`] only). A driver may leave the list empty for a policy that
    /// does not: naming every leg given an extra costs a look-up per extra at every decision.
    fn reads_reshaped_legs(&self) -> bool {
        false
    }

    /// Whether the policy reads [`Input::loads`](crate::Input::loads) ([`ServiceModel::Proportional`]
    /// only). A driver may, for a policy that does not, bring the loads forward at decisions
    /// only, not at every event between them: keeping them current costs a pass over every leg
    /// with an extra at every event. They are as current at a decision, rounded otherwise.
    fn reads_loads(&self) -> bool {
        true
    }

    /// Moves into `out` the coflows the policy rejected since the last call. The simulator drops
    /// them: they are reported as rejected, not as completed or late. A driver that keeps one in
    /// its input (the coordinator, so that its gets end) has it served as best effort, as a
    /// coflow without a deadline, from the next decision on.
    fn poll_rejected(&mut self, _out: &mut Vec<CoflowId>) {}

    /// A coflow arrived and its flows are known to the driver.
    fn handle_arrival(&mut self, _now: Nanos, _coflow: CoflowId) {}

    /// A coflow's last flow finished.
    fn handle_finished(&mut self, _now: Nanos, _coflow: CoflowId) {}

    /// No coflow of job `job` is left at the driver and none will join it: the policy may
    /// forget what it keeps of the job. A live coordinator, whose jobs never end on their own,
    /// says so when a job's last coflow is unregistered or its lease runs out; the simulator,
    /// whose workload ends, never does.
    fn handle_job_ended(&mut self, _job: CoflowId) {}

    /// Decides the rates from now until the next decision, writing them into `out` (which the
    /// driver has reset for `input`). Returns when the policy wants to decide again even if
    /// nothing happens (its timers), or `None`.
    fn poll_allocation(&mut self, input: &Input<'_>, out: &mut Allocation) -> Option<Nanos>;
}

/// What a [`Hooked`] policy does beside the policy it wraps: it hears what the driver tells the
/// policy and may wrap its decisions (to time them, check them, or stop them). Every method
/// defaults to passing through, so `()` hooks nothing.
pub trait Hooks: fmt::Debug + Send {
    /// The driver tells the policy that `coflow` arrived (heard just before the policy hears it).
    fn arrival(&mut self, _now: Nanos, _coflow: CoflowId) {}

    /// The driver tells the policy that `coflow` finished (heard just before the policy hears it).
    fn finished(&mut self, _now: Nanos, _coflow: CoflowId) {}

    /// The driver tells the policy that job `job` ended (heard just before the policy hears it).
    fn job_ended(&mut self, _job: CoflowId) {}

    /// The policy handed the driver these rejected coflows (heard after it handed them).
    fn rejected(&mut self, _coflows: &[CoflowId]) {}

    /// Makes the decision: by default the policy's own, untouched.
    fn decide(&mut self, policy: &mut dyn Scheduler, input: &Input<'_>, out: &mut Allocation) -> Option<Nanos> {
        policy.poll_allocation(input, out)
    }
}

impl Hooks for () {}

/// A policy with [`Hooks`] beside it: every method of [`Scheduler`] is forwarded to the policy
/// (those with a default too, so that a wrapped policy's admission control and flow-finish gap
/// hold), and the hooks hear what it is told and make its decisions.
///
/// The forwarding wrapper of the simulator's benchmark and the tests: the benchmark's timer and
/// their checks are hooks, so none of them can forget a method of the trait.
#[derive(Debug)]
pub struct Hooked<H> {
    /// The policy wrapped.
    pub policy: Box<dyn Scheduler>,
    /// What runs beside it.
    pub hooks: H,
}

impl<H: Hooks> Hooked<H> {
    /// `policy` with `hooks` beside it.
    pub fn new(policy: Box<dyn Scheduler>, hooks: H) -> Hooked<H> {
        Hooked { policy, hooks }
    }
}

impl<H: Hooks> Scheduler for Hooked<H> {
    fn name(&self) -> &'static str {
        self.policy.name()
    }

    fn model(&self) -> ServiceModel {
        self.policy.model()
    }

    fn flow_finish_gap(&self) -> Option<Nanos> {
        self.policy.flow_finish_gap()
    }

    fn admission_control(&self) -> bool {
        self.policy.admission_control()
    }

    fn reads_min_remaining(&self) -> bool {
        self.policy.reads_min_remaining()
    }

    fn reads_reshaped_legs(&self) -> bool {
        self.policy.reads_reshaped_legs()
    }

    fn reads_loads(&self) -> bool {
        self.policy.reads_loads()
    }

    fn poll_rejected(&mut self, out: &mut Vec<CoflowId>) {
        let before = out.len();
        self.policy.poll_rejected(out);
        self.hooks.rejected(&out[before..]);
    }

    fn handle_arrival(&mut self, now: Nanos, coflow: CoflowId) {
        self.hooks.arrival(now, coflow);
        self.policy.handle_arrival(now, coflow);
    }

    fn handle_finished(&mut self, now: Nanos, coflow: CoflowId) {
        self.hooks.finished(now, coflow);
        self.policy.handle_finished(now, coflow);
    }

    fn handle_job_ended(&mut self, job: CoflowId) {
        self.hooks.job_ended(job);
        self.policy.handle_job_ended(job);
    }

    fn poll_allocation(&mut self, input: &Input<'_>, out: &mut Allocation) -> Option<Nanos> {
        self.hooks.decide(self.policy.as_mut(), input, out)
    }
}

#[cfg(test)]
mod tests {
    use coflow_core::{CoflowId, MachineId, Nanos, Rate};

    use super::{Hooked, Scheduler};
    use crate::fabric::Fabric;
    use crate::snapshot::{Snapshot, SnapshotCoflow, SnapshotFlow};
    use crate::state::{Allocation, Input, ServiceModel};

    /// A policy that answers every method of the trait with something other than its default,
    /// and records what it was told.
    #[derive(Debug, Default)]
    struct Loud {
        told: Vec<(&'static str, Nanos, CoflowId)>,
    }

    impl Scheduler for Loud {
        fn name(&self) -> &'static str {
            "loud"
        }

        fn model(&self) -> ServiceModel {
            ServiceModel::Route
        }

        fn flow_finish_gap(&self) -> Option<Nanos> {
            Some(Nanos(7))
        }

        fn admission_control(&self) -> bool {
            true
        }

        fn reads_min_remaining(&self) -> bool {
            false
        }

        fn reads_reshaped_legs(&self) -> bool {
            true
        }

        fn reads_loads(&self) -> bool {
            false
        }

        fn poll_rejected(&mut self, out: &mut Vec<CoflowId>) {
            out.push(CoflowId(41));
        }

        fn handle_arrival(&mut self, now: Nanos, coflow: CoflowId) {
            self.told.push(("arrival", now, coflow));
        }

        fn handle_finished(&mut self, now: Nanos, coflow: CoflowId) {
            self.told.push(("finished", now, coflow));
        }

        fn handle_job_ended(&mut self, job: CoflowId) {
            self.told.push(("job ended", Nanos::ZERO, job));
        }

        fn poll_allocation(&mut self, input: &Input<'_>, out: &mut Allocation) -> Option<Nanos> {
            out.route_rate.iter_mut().for_each(|r| *r = 3.0);
            Some(input.now + Nanos(5))
        }
    }

    /// Everything the driver can read of a policy, or see it do, after one of each call.
    fn observe(p: &mut dyn Scheduler) -> impl PartialEq + std::fmt::Debug + use<> {
        let fabric = Fabric::big_switch(2, Rate::GBPS);
        let mut snap = Snapshot::default();
        snap.clear(ServiceModel::Route);
        let c = SnapshotCoflow::plain(1, 1);
        let flow = SnapshotFlow { src: MachineId(0), dst: MachineId(1), size: 1e6, remaining: 1e6 };
        snap.push_coflow(&fabric, &c, &[flow]);
        let input = snap.input(Nanos(100), &fabric);
        let mut out = Allocation::default();
        out.reset(&input);
        p.handle_arrival(Nanos(1), CoflowId(1));
        p.handle_finished(Nanos(2), CoflowId(1));
        p.handle_job_ended(CoflowId(1));
        let mut rejected = vec![CoflowId(9)];
        p.poll_rejected(&mut rejected);
        let wake = p.poll_allocation(&input, &mut out);
        (
            p.name(),
            p.model(),
            p.flow_finish_gap(),
            p.admission_control(),
            p.reads_min_remaining(),
            p.reads_reshaped_legs(),
            p.reads_loads(),
            rejected,
            wake,
            out.route_rate,
        )
    }

    #[test]
    fn a_hooked_policy_answers_every_method_as_the_policy_alone() {
        let mut alone = Loud::default();
        let seen = observe(&mut alone);
        let mut hooked = Hooked::new(Box::new(Loud::default()), ());
        assert_eq!(observe(&mut hooked), seen);
        // It was told what the policy alone was told.
        let told = format!("{:?}", hooked.policy);
        assert_eq!(told, format!("{alone:?}"));
        assert!(["arrival", "finished", "job ended"].iter().all(|w| told.contains(w)), "{told}");
    }
}
