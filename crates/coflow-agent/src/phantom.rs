//! A phantom agent: it speaks an agent's side of the protocol with the coordinator (registers a
//! machine, opens its session, announces puts and gets, reports progress and flow ends) but
//! stores and moves no byte. The control-plane benchmark drives a coordinator with phantoms,
//! and tests use one to act as an agent would, or as one must not.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use coflow_core::{CoflowId, FlowId, MachineId};
use coflow_proto::pb::agent_message::Body;
use coflow_proto::pb::coordinator_client::CoordinatorClient;
use coflow_proto::{Security, pb};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tonic::Status;

use crate::session::{Batches, Link};
use crate::state::CoordClient;

/// What a phantom is told for a get: the flow and where its bytes would come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PhantomGrant {
    /// The flow.
    pub flow: FlowId,
    /// Its source machine.
    pub src: MachineId,
    /// The piece's size.
    pub size: u64,
    /// The flow's ticket (empty if the coordinator sent none).
    pub ticket: [u8; coflow_proto::ticket::TICKET_LEN],
}

/// An agent's session without an agent behind it.
#[derive(Debug)]
pub struct Phantom {
    machine: MachineId,
    link: Arc<Link>,
    rates: Arc<Mutex<HashMap<FlowId, f64>>>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
    deadline: Duration,
    client: String,
}

impl Phantom {
    /// Registers `machine` (data address `data_addr`, port capacity `port_rate_bps`) with the
    /// coordinator at `url` and opens its session; it heartbeats every `heartbeat` (with no
    /// progress) so that the coordinator keeps it alive, and answers wait at most `deadline`.
    pub async fn connect(
        url: &str,
        security: &Security,
        machine: u32,
        data_addr: &str,
        port_rate_bps: f64,
        heartbeat: Duration,
        deadline: Duration,
    ) -> Result<Phantom, Status> {
        let channel = security
            .endpoint(url)
            .map_err(Status::invalid_argument)?
            .tcp_nodelay(true)
            .connect()
            .await
            .map_err(|e| Status::unavailable(format!("coordinator at {url}: {e}")))?;
        let mut coord: CoordClient = CoordinatorClient::with_interceptor(channel, security.attach());
        let reg = pb::RegisterAgentRequest {
            machine_id: machine,
            data_addr: data_addr.to_string(),
            port_rate_bps,
            session: 0,
            incarnation: 0,
            datacenter: String::new(),
        };
        let session = coord.register_agent(reg).await?.into_inner().session;
        let link = Arc::new(Link::default());
        let open = pb::AgentBatch { machine_id: machine, session, messages: Vec::new() };
        let mut inbound = coord.agent_session(Batches::new(open, link.open())).await?.into_inner();
        let rates: Arc<Mutex<HashMap<FlowId, f64>>> = Arc::default();
        let (stop, mut stopped) = watch::channel(false);
        let task = {
            let (link, rates) = (link.clone(), rates.clone());
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(heartbeat);
                loop {
                    tokio::select! {
                        batch = inbound.message() => match batch {
                            Ok(Some(b)) => {
                                for r in b.replies {
                                    link.answer(r);
                                }
                                if let Some(u) = b.update {
                                    let mut rates = rates.lock().expect("rates lock");
                                    for r in u.rates {
                                        rates.insert(FlowId(r.flow_id), r.rate_bps);
                                    }
                                }
                            }
                            _ => break,
                        },
                        _ = tick.tick() => {
                            let hb = pb::HeartbeatRequest { machine_id: machine, ..Default::default() };
                            link.tell(Body::Heartbeat(hb));
                        }
                        _ = stopped.changed() => break,
                    }
                }
                link.close();
            })
        };
        Ok(Phantom { machine: MachineId(machine), link, rates, stop, task, deadline, client: String::new() })
    }

    /// The phantom's machine.
    pub fn machine(&self) -> MachineId {
        self.machine
    }

    /// Speaks for a local client of this identity in its puts and gets (empty, as in token mode,
    /// unless set).
    pub fn for_client(mut self, identity: &str) -> Phantom {
        self.set_client(identity);
        self
    }

    /// [`Phantom::for_client`] on a phantom in use.
    pub fn set_client(&mut self, identity: &str) {
        self.client = identity.to_string();
    }

    /// Announces a piece of `size` bytes stored on this machine.
    pub async fn put(&self, coflow: CoflowId, data_id: &str, size: u64) -> Result<(), Status> {
        let ann = pb::AnnouncePutRequest {
            coflow_id: coflow.0,
            data_id: data_id.to_string(),
            machine_id: self.machine.0,
            size,
            recovered: false,
            registration: None,
            client: self.client.clone(),
            sealed: false,
        };
        self.link.call(Body::Put(ann), self.deadline).await.map(|_| ())
    }

    /// Re-announces a piece of `size` bytes this machine holds, as an agent does after it
    /// registered again, with the coflow's registration as the agent learned it (if it did).
    pub async fn put_recovered(
        &self,
        coflow: CoflowId,
        data_id: &str,
        size: u64,
        registration: Option<pb::RegisterRequest>,
    ) -> Result<pb::RegisterRequest, Status> {
        let ann = pb::AnnouncePutRequest {
            coflow_id: coflow.0,
            data_id: data_id.to_string(),
            machine_id: self.machine.0,
            size,
            recovered: true,
            registration,
            client: String::new(),
            sealed: false,
        };
        match self.link.call(Body::Put(ann), self.deadline).await? {
            pb::agent_reply::Result::Put(p) => Ok(p.registration.unwrap_or_default()),
            _ => Err(Status::internal("the coordinator answered a put with another reply")),
        }
    }

    /// Re-announces a flow this machine receives, as granted by a previous coordinator: its id,
    /// coflow, piece, source machine and size.
    pub async fn recover_flow(
        &self,
        flow: FlowId,
        coflow: CoflowId,
        data_id: &str,
        src: MachineId,
        size: u64,
    ) -> Result<PhantomGrant, Status> {
        let ann = pb::AnnounceGetRequest {
            coflow_id: coflow.0,
            data_id: data_id.to_string(),
            machine_id: self.machine.0,
            recovered_flow_id: flow.0,
            recovered_src_machine_id: src.0,
            recovered_size: size,
            recovered_bytes_received: 0,
            ..Default::default()
        };
        match self.link.call(Body::Get(ann), self.deadline).await? {
            pb::agent_reply::Result::Get(g) => {
                let ticket = g.ticket.as_slice().try_into().unwrap_or_default();
                Ok(PhantomGrant { flow: FlowId(g.flow_id), src: MachineId(g.src_machine_id), size: g.size, ticket })
            }
            _ => Err(Status::internal("the coordinator answered a get with another reply")),
        }
    }

    /// Announces a get of a piece on this machine: the coordinator's grant.
    pub async fn get(&self, coflow: CoflowId, data_id: &str) -> Result<PhantomGrant, Status> {
        let ann = pb::AnnounceGetRequest {
            coflow_id: coflow.0,
            data_id: data_id.to_string(),
            machine_id: self.machine.0,
            client: self.client.clone(),
            ..Default::default()
        };
        match self.link.call(Body::Get(ann), self.deadline).await? {
            pb::agent_reply::Result::Get(g) => {
                let ticket = g.ticket.as_slice().try_into().unwrap_or_default();
                Ok(PhantomGrant { flow: FlowId(g.flow_id), src: MachineId(g.src_machine_id), size: g.size, ticket })
            }
            _ => Err(Status::internal("the coordinator answered a get with another reply")),
        }
    }

    /// Reports the end of a flow this machine receives.
    pub fn finished(&self, flow: FlowId, ok: bool) {
        let failed = (!ok).then_some(coflow_proto::ErrorKind::ClientDeparted);
        self.link.tell(crate::session::flow_end(flow, 0, failed));
    }

    /// Reports progress of flows this machine sends.
    pub fn heartbeat(&self, flows: &[(FlowId, u64)]) {
        let flows = flows.iter().map(|&(f, sent)| pb::FlowProgress { flow_id: f.0, bytes_sent: sent }).collect();
        let hb = pb::HeartbeatRequest { machine_id: self.machine.0, flows, ..Default::default() };
        self.link.tell(Body::Heartbeat(hb));
    }

    /// The last rate the coordinator pushed for a flow this machine sends.
    pub fn rate(&self, flow: FlowId) -> Option<f64> {
        self.rates.lock().expect("rates lock").get(&flow).copied()
    }

    /// Whether the session is still open.
    pub fn is_open(&self) -> bool {
        !self.task.is_finished()
    }

    /// Ends the session and waits for its task.
    pub async fn close(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}
