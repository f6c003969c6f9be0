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

    /// Moves into `out` the coflows the policy rejected since the last call. The driver drops
    /// them: they are reported as rejected, not as completed or late.
    fn poll_rejected(&mut self, _out: &mut Vec<CoflowId>) {}

    /// A coflow arrived and its flows are known to the driver.
    fn handle_arrival(&mut self, _now: Nanos, _coflow: CoflowId) {}

    /// A coflow's last flow finished.
    fn handle_finished(&mut self, _now: Nanos, _coflow: CoflowId) {}

    /// Decides the rates from now until the next decision, writing them into `out` (which the
    /// driver has reset for `input`). Returns when the policy wants to decide again even if
    /// nothing happens (its timers), or `None`.
    fn poll_allocation(&mut self, input: &Input<'_>, out: &mut Allocation) -> Option<Nanos>;
}
