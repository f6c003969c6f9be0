//! The channel between the coordinator's RPCs and the one task that owns its core: what the
//! core task is told ([`Event`], with where each answer goes) and the handle RPCs and the session
//! checks send through ([`CoreHandle`]).

use coflow_core::{CoflowId, FlowId, MachineId};
use coflow_proto::{
    AgentRegistration, DataId, FlowRecovery, GetAnnouncement, Heartbeat, PutAnnouncement, Registration, pb,
};
use tokio::sync::{mpsc, oneshot};

use crate::core::FlowOutcome;
use crate::error::CoordError;
use crate::status::{StatusPage, StatusView};

/// Where a reply goes.
pub(crate) type Reply<T> = oneshot::Sender<Result<T, CoordError>>;

/// An agent's session, as the core task feeds it.
pub(crate) type SessionTx = mpsc::UnboundedSender<pb::CoordinatorBatch>;

/// What the core task is told: every trigger of work from an RPC or a session, each with where
/// its answer goes.
#[derive(Debug)]
pub(crate) enum Event {
    /// A framework registers a coflow.
    Register(Registration, Reply<CoflowId>),
    /// A framework (the caller's identity) is done with a coflow.
    Unregister(CoflowId, String, Reply<()>),
    /// No more puts will come for a coflow (the caller's identity).
    Seal(CoflowId, String, Reply<()>),
    /// A framework (the caller's identity) renews its coflows' leases; the answer lists those
    /// not renewed.
    Renew(Vec<CoflowId>, String, Reply<Vec<CoflowId>>),
    /// An agent joins.
    RegisterAgent(AgentRegistration, Reply<()>),
    /// An agent leaves.
    Deregister(MachineId, Reply<()>),
    /// An agent opened a session (numbered, to tell it from a later one): its current rates are
    /// sent at once, and from then on its answers, rates and notices.
    Open(MachineId, u64, SessionTx),
    /// What an agent sent on a session, in order.
    Agent(MachineId, u64, Vec<AgentMsg>),
    /// An agent's session ended.
    Closed(MachineId, u64),
    /// Whether a live agent runs on a machine.
    AgentAlive(MachineId, Reply<bool>),
    /// Someone asks what is live: everything (the web page).
    Status(Reply<StatusView>),
    /// Someone asks one page of what is live: coflows after an id, at most so many.
    StatusPage(CoflowId, usize, String, Reply<StatusPage>),
    /// Prometheus asks for the counters and gauges.
    Metrics(Reply<Vec<coflow_telemetry::Sample>>),
}

/// One validated message of an agent's session.
#[derive(Debug)]
pub(crate) enum AgentMsg {
    /// The agent stored a piece; the reply is the coflow's registration, for the agent to keep.
    Put(u64, PutAnnouncement),
    /// The agent's client wants a piece. `recovering`: the coordinator has just restarted, so
    /// what is not known yet may still be re-announced, and is answered "not yet".
    Get(u64, GetAnnouncement, bool),
    /// The agent re-announces a flow a previous coordinator granted (after a restart).
    Recover(u64, FlowRecovery),
    /// The agent finished receiving a flow, or gave up on it.
    Finished(FlowId, FlowOutcome),
    /// The agent dropped a piece whose announcement it gave up waiting for.
    WithdrawPut(CoflowId, DataId),
    /// The agent reports progress and port use.
    Heartbeat(Heartbeat),
}

/// The handle RPCs use to reach the core task.
#[derive(Clone, Debug)]
pub(crate) struct CoreHandle {
    tx: mpsc::Sender<Event>,
}

impl CoreHandle {
    /// Sends an event built around a reply channel and waits for the reply.
    pub(crate) async fn ask<T>(&self, make: impl FnOnce(Reply<T>) -> Event) -> Result<T, CoordError> {
        let (reply, rx) = oneshot::channel();
        self.tx.send(make(reply)).await.map_err(|_| CoordError::ShuttingDown)?;
        rx.await.map_err(|_| CoordError::ShuttingDown)?
    }

    /// Sends an event that has no reply.
    pub(crate) async fn tell(&self, event: Event) -> Result<(), CoordError> {
        self.tx.send(event).await.map_err(|_| CoordError::ShuttingDown)
    }
}

/// Spawns nothing: builds the channel between RPCs and the core.
pub(crate) fn channel() -> (CoreHandle, mpsc::Receiver<Event>) {
    let (tx, rx) = mpsc::channel(65_536);
    (CoreHandle { tx }, rx)
}
