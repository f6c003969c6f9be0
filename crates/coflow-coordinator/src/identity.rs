//! Who may make which call: the coordinator's identity checks, in one place.
//!
//! - The coflow API (register, unregister, seal) is for clients; status for any member.
//! - Agent calls for machine `N` (register, heartbeat, announcements, rate watch) need agent
//!   `N`'s certificate in TLS mode, and in either mode the session that machine's live
//!   registration was given: a registration hands out a session id, and while the machine is
//!   live only calls carrying it are accepted. So a token holder cannot keep another machine
//!   alive with its heartbeats, take over its rate stream or announce pieces on it, and a second
//!   `RegisterAgent` for a live machine no longer drops that machine's pieces (it is refused).
//! - In TLS mode a registration under agent `N`'s own certificate may replace a live one: the
//!   agent restarted and lost its session. In token mode a restarted agent waits until its old
//!   registration times out (`agent_timeout_ms`).
//!
//! - Of two processes that claim one machine, the one that started later (its registration's
//!   `incarnation`) wins: a registration from an earlier one while the later one holds the
//!   machine is refused with `ABORTED`, which tells it to stop, so that the two do not replace
//!   each other in turn.
//!
//! Sessions are not secrets: in token mode they cross the network in clear text like the token,
//! so they guard against accidents and stale agents, not against a token holder who reads the
//! traffic.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};

use coflow_core::MachineId;
use coflow_proto::{Peer, Refusal, RefusalLog, permission_denied};
use tokio::sync::Mutex;
use tonic::{Request, Status};

use crate::events::{CoreHandle, Event, Reply};

/// The live session of each registered machine.
#[derive(Debug, Default)]
pub(crate) struct Sessions {
    /// Each machine's live session and the incarnation (process start) that holds it.
    live: Mutex<HashMap<MachineId, (u64, u64)>>,
    keys: RandomState,
    issued: AtomicU64,
    refusals: RefusalLog,
}

/// Refuses a caller whose role may not act for `machine`.
pub(crate) fn as_agent<T>(req: &Request<T>, machine: u32) -> Result<(), Status> {
    coflow_proto::authorize(req, &format!("act for machine {machine}"), |p| p.may_act_as_agent(machine))
}

/// Refuses a caller that is not a client (the coflow API).
pub(crate) fn as_client<T>(req: &Request<T>) -> Result<(), Status> {
    coflow_proto::authorize(req, "use the coflow API", Peer::may_use_api)
}

/// Refuses a caller that is not an agent; `what` names the call it may not make.
pub(crate) fn as_some_agent<T>(req: &Request<T>, what: &str) -> Result<(), Status> {
    coflow_proto::authorize(req, what, Peer::is_agent)
}

impl Sessions {
    /// A fresh, nonzero, hard to guess session id.
    fn fresh(&self) -> u64 {
        let n = self.issued.fetch_add(1, Ordering::Relaxed);
        self.keys.hash_one((n, std::time::SystemTime::now())) | 1
    }

    /// Checks that an agent call for `machine` carries its live session (any call passes for a
    /// machine without one: the core then says it does not know it, and the agent registers).
    pub(crate) async fn check(&self, machine: MachineId, session: u64) -> Result<(), Status> {
        self.check_known(machine, session).await.map(|_| ())
    }

    /// [`Sessions::check`], and whether `machine` has registered with this coordinator at all,
    /// under one lock.
    pub(crate) async fn check_known(&self, machine: MachineId, session: u64) -> Result<bool, Status> {
        match self.live.lock().await.get(&machine) {
            Some(&(s, _)) if s != session => {
                Err(permission_denied(format!("machine {machine} is registered under another session")))
            }
            known => Ok(known.is_some()),
        }
    }

    /// Registers `machine` (with the core, via `register`) for a caller that claims `claimed`:
    /// refused while another session of the machine is live, unless the caller's certificate
    /// proves it is that machine's agent; refused with `ABORTED` (stop) when a process that
    /// started later (`incarnation`, 0 for unknown) holds the machine. Returns the session the
    /// agent is to carry.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn register(
        &self,
        core: &CoreHandle,
        machine: MachineId,
        claimed: u64,
        incarnation: u64,
        certified: bool,
        remote: Option<std::net::SocketAddr>,
        register: impl FnOnce(Reply<()>) -> Event,
    ) -> Result<u64, Status> {
        let mut live = self.live.lock().await;
        if let Some(&(_, newer)) = live.get(&machine)
            && incarnation != 0
            && incarnation < newer
        {
            let msg = format!("machine {machine} is held by an agent process that started later; this one must stop");
            return Err(coflow_proto::ErrorKind::PermissionDenied.status(tonic::Code::Aborted, msg));
        }
        let session = match live.get(&machine) {
            Some(&(s, _)) if s == claimed => s,
            Some(_) if !certified => {
                if core.ask(|r| Event::AgentAlive(machine, r)).await.map_err(Status::from)? {
                    let msg = format!(
                        "machine {machine} is live under another session; an agent that restarted may register \
                         once it has timed out"
                    );
                    match remote {
                        Some(addr) => {
                            self.refusals.refuse(addr, "RegisterAgent", Refusal::NotAllowed, &msg);
                        }
                        None => tracing::debug!("{msg}"),
                    }
                    return Err(permission_denied(msg));
                }
                self.fresh()
            }
            _ => self.fresh(),
        };
        core.ask(register).await.map_err(Status::from)?;
        let incarnation = live.get(&machine).map_or(incarnation, |&(_, i)| i.max(incarnation));
        live.insert(machine, (session, incarnation));
        Ok(session)
    }
}
