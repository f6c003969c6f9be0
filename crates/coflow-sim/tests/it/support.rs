//! Small builders shared by the tests.

use coflow_core::{Bytes, Coflow, CoflowId, Flow, MachineId, Nanos, Rate, Workload};
use coflow_sched::policy;
use coflow_sim::{SimConfig, SimResult, simulate};

/// One unit of data in the worked examples: 1 MiB.
pub(crate) const UNIT: u64 = 1 << 20;
/// One unit of time in the worked examples: a port moves one unit per millisecond.
pub(crate) fn unit_rate() -> Rate {
    Rate::from_bytes_per_sec(UNIT as f64 * 1000.0)
}

/// A flow of `units` units from `src` to `dst`.
pub(crate) fn flow(src: u32, dst: u32, units: u64) -> Flow {
    Flow { src: MachineId(src), dst: MachineId(dst), size: Bytes(units * UNIT) }
}

/// A coflow arriving at `at_ms`.
pub(crate) fn coflow(id: u64, at_ms: u64, flows: Vec<Flow>) -> Coflow {
    Coflow::new(CoflowId(id), Nanos::from_millis(at_ms), flows)
}

/// Runs `policy` on the coflows with every invariant checked.
pub(crate) fn run(policy: &str, machines: u32, rate: Rate, coflows: Vec<Coflow>) -> SimResult {
    let w = Workload::new(machines, coflows).expect("valid workload");
    let cfg = SimConfig { check_invariants: true, ..SimConfig::big_switch(rate) };
    simulate(&w, policy::by_name(policy).expect("known policy"), &cfg).unwrap()
}

/// The CCT of each coflow in milliseconds, in workload order; panics if one did not finish.
pub(crate) fn ccts_ms(r: &SimResult) -> Vec<f64> {
    r.outcomes.iter().map(|o| o.cct().expect("every coflow finishes").as_secs_f64() * 1e3).collect()
}

/// Asserts two lists of times in ms agree to within a microsecond (finish times are rounded up
/// to the nanosecond at every event).
#[track_caller]
pub(crate) fn assert_ms(actual: &[f64], expected: &[f64]) {
    assert_eq!(actual.len(), expected.len(), "{actual:?} vs {expected:?}");
    for (a, e) in actual.iter().zip(expected) {
        assert!((a - e).abs() < 1e-3, "got {actual:?}, expected {expected:?}");
    }
}
