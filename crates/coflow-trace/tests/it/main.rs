//! Integration tests of coflow-trace: one test binary, one module per area.

mod benchmark;
mod facebook;
mod format;
mod jsonl;
mod malformed;
mod roundtrip;
mod stats;
mod synth;

use coflow_core::{Bytes, Coflow, CoflowId, Flow, MachineId, Nanos, Workload};

/// A flow of `size` bytes from `src` to `dst`.
pub(crate) fn flow(src: u32, dst: u32, size: u64) -> Flow {
    Flow { src: MachineId(src), dst: MachineId(dst), size: Bytes(size) }
}

/// A small valid workload: a 2 × 2 shuffle with a local flow, and a one-flow coflow.
pub(crate) fn small_workload() -> Workload {
    let shuffle = Coflow::new(
        CoflowId(1),
        Nanos::from_millis(0),
        vec![flow(0, 2, 512), flow(1, 2, 512), flow(0, 0, 1024), flow(1, 0, 1024)],
    );
    let single = Coflow::new(CoflowId(2), Nanos::from_millis(10), vec![flow(3, 1, 6 << 20)]);
    Workload::new(4, vec![shuffle, single]).expect("valid workload")
}
