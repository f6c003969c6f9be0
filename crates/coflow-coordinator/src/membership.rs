//! Machine ids for agents that join without one (`AssignMachine`).
//!
//! An agent started without `--machine` and without a certificate naming its machine asks for an
//! id once and keeps it in its data directory, so that a DaemonSet needs no hand numbering. The
//! coordinator gives the smallest id that no agent it knows (alive or dead) holds and that it has
//! not given since it started. Each request gets a new id, even from the same host, since one host
//! may run several agents (an emulated cluster, the testbed).
//! Ids are not kept across coordinator restarts (the coordinator's state is soft): for the first
//! `agent_timeout_ms` after a start it answers `UNAVAILABLE`, so that the agents of a previous run
//! register again (their rate streams broke; they retry every 500 ms) before a new id is given.
//! An agent that is down through that whole window may find its id given to another; with TLS,
//! where ids come from certificates, that cannot happen.

use std::collections::BTreeSet;
use std::future::Future;
use std::time::{Duration, Instant};

use tokio::sync::Mutex;
use tonic::Status;

/// The ids this coordinator gave, and since when it may give them.
#[derive(Debug)]
pub(crate) struct Assignments {
    from: Instant,
    given: Mutex<BTreeSet<u32>>,
}

impl Assignments {
    /// Gives ids from `hold` after now.
    pub(crate) fn new(hold: Duration) -> Assignments {
        Assignments { from: Instant::now() + hold, given: Mutex::default() }
    }

    /// A machine id for an agent on `host`; `known` gives the machines the core knows.
    pub(crate) async fn assign<F>(&self, host: &str, known: impl FnOnce() -> F) -> Result<u32, Status>
    where
        F: Future<Output = Result<BTreeSet<u32>, Status>>,
    {
        if Instant::now() < self.from {
            return Err(Status::unavailable(
                "the coordinator has just started and agents are registering again; retry",
            ));
        }
        if host.len() > 253 {
            return Err(Status::invalid_argument("host: at most 253 bytes"));
        }
        let mut given = self.given.lock().await;
        let known = known().await?;
        let id = (0..=u32::MAX)
            .find(|id| !known.contains(id) && !given.contains(id))
            .ok_or_else(|| Status::resource_exhausted("no machine id left"))?;
        given.insert(id);
        tracing::info!(machine = id, host, "machine id assigned");
        Ok(id)
    }
}
