//! An emulated cluster on one Linux machine, for the live system on a real network stack: one
//! network namespace per host on a bridge (the big switch), each host's uplink and downlink
//! shaped with `htb`, the real `coflow` coordinator and agent processes talking over real
//! sockets, a workload replayed with real bytes (every byte checked), measured next to the
//! simulator, and faults injected (processes killed or frozen, links down, rates halved).
//!
//! # Layout
//! - `topology`: [`Topology`], hosts and link rates as data (JSON, a preset, or N hosts at one
//!   rate), with datacenters and wide-area links on a wide-area testbed.
//! - `net`: namespaces, bridge, veth links and shaping through `ip` and `tc`.
//! - `weather`: a wide-area testbed's link rates redrawn and applied with `tc`, recorded for the
//!   simulator to replay.
//! - `wide_area`: a wide-area testbed's network: datacenters behind routers, a shaped link per
//!   ordered pair.
//! - `state`: the per-run state file, `down`, and teardown on SIGINT/SIGTERM.
//! - `procs`: the coordinator, agent and client processes, and the [`Hub`] that talks to the
//!   clients.
//! - `client`: the client that runs inside a host's namespace (`coflow testbed client`).
//! - `workload`: the replayed workload, its scaling and the content of pieces.
//! - `testbed`: one testbed up, a replay on it, torn down when dropped.
//! - `run`: `coflow testbed run`, policies measured next to the simulator.
//! - `fidelity`: measured against simulated CCT coflow by coflow, summarized by bin.
//! - `faults`: `coflow testbed faults`, the five fault scenarios.
//! - `spark`: `coflow testbed spark`, a Spark standalone cluster on the hosts, jobs from the
//!   workload through the plugin and on Spark's own shuffle.

#![warn(missing_docs)]

pub mod client;
pub mod faults;
pub mod fidelity;
pub mod net;
pub mod procs;
pub mod run;
pub mod spark;
pub mod state;
pub mod testbed;
pub mod topology;
pub mod weather;
pub mod wide_area;
pub mod workload;

use std::path::Path;

pub use crate::faults::{FaultOptions, FaultReport, Scenario, ScenarioResult};
pub use crate::procs::Hub;
pub use crate::run::{PolicyResult, RunOptions, RunReport};
pub use crate::state::{DownReport, down, teardown_on_signal};
pub use crate::testbed::Testbed;
pub use crate::topology::{Topology, TopologyError};
pub use crate::workload::WorkloadSpec;

/// The name of the coordinator mode in which no policy assigns rates and kernel TCP shares the
/// links ([`coflow_sched::policy::TCP`]).
pub const TCP: &str = coflow_sched::policy::TCP.name;

/// Why a testbed could not be built or run.
#[derive(Debug, thiserror::Error)]
pub enum TestbedError {
    /// The topology is wrong.
    #[error(transparent)]
    Topology(#[from] TopologyError),
    /// The workload is wrong.
    #[error("workload: {0}")]
    Workload(String),
    /// An `ip`, `tc` or process command failed.
    #[error("`{cmd}` failed: {reason}")]
    Command {
        /// The command line.
        cmd: String,
        /// Its error output.
        reason: String,
    },
    /// A file could not be written or read.
    #[error("{path}: {reason}")]
    Io {
        /// The file.
        path: String,
        /// What happened.
        reason: String,
    },
    /// The testbed did not come up or broke.
    #[error("{0}")]
    Setup(String),
    /// The process is being torn down (SIGINT or SIGTERM).
    #[error("interrupted")]
    Interrupted,
}

impl TestbedError {
    pub(crate) fn io(path: &Path, e: std::io::Error) -> TestbedError {
        TestbedError::Io { path: path.display().to_string(), reason: e.to_string() }
    }
}
