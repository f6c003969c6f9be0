//! The agent's gRPC face for local clients: `Put` stores a piece and announces it; `Get` asks the
//! coordinator for a flow, fetches the piece from its source at the assigned rate and streams
//! it to the client as it arrives.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use coflow_core::{CoflowId, FlowId, MachineId};
use coflow_proto::pb::agent_server::Agent;
use coflow_proto::{DataId, PutSource, pb};
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use crate::data;
use crate::error::AgentError;
use crate::state::Shared;
use crate::store::{Piece, file_piece};

#[derive(Clone, Debug)]
pub(crate) struct AgentService {
    pub(crate) shared: Arc<Shared>,
    pub(crate) shutdown: watch::Receiver<bool>,
}

impl AgentService {
    fn machine(&self) -> MachineId {
        MachineId(self.shared.config.machine)
    }
}

#[tonic::async_trait]
impl Agent for AgentService {
    #[tracing::instrument(skip_all, fields(coflow = req.get_ref().coflow_id, data_id = %req.get_ref().data_id))]
    async fn put(&self, req: Request<pb::PutRequest>) -> Result<Response<pb::PutResponse>, Status> {
        coflow_proto::authorize(&req, "put", coflow_proto::Peer::may_use_api)?;
        let r = req.into_inner();
        let coflow = CoflowId(r.coflow_id);
        let data_id = DataId::new(r.data_id).map_err(AgentError::from)?;
        let source = r.source.ok_or(AgentError::Invalid(coflow_proto::ProtoError::Missing { field: "source" }))?;
        let piece = match PutSource::try_from(source).map_err(AgentError::from)? {
            PutSource::Content(bytes) => Piece::Memory(Arc::new(bytes)),
            PutSource::File { path, offset, length } => {
                file_piece(&self.shared.config.data_dir, &path, offset, length)?
            }
        };
        let size = piece.len();
        self.shared.store.insert(coflow, data_id.clone(), piece)?;
        let ann = pb::AnnouncePutRequest {
            coflow_id: coflow.0,
            data_id: data_id.as_str().to_string(),
            machine_id: self.machine().0,
            size,
            recovered: false,
            session: self.shared.session(),
        };
        if let Err(s) = self.shared.coordinator.clone().announce_put(ann).await {
            self.shared.store.remove(coflow, &data_id);
            return Err(AgentError::Coordinator(s).into());
        }
        self.shared.puts.fetch_add(1, Ordering::Relaxed);
        Ok(Response::new(pb::PutResponse { size }))
    }

    type GetStream = ReceiverStream<Result<pb::GetChunk, Status>>;

    #[tracing::instrument(skip_all, fields(coflow = req.get_ref().coflow_id, data_id = %req.get_ref().data_id))]
    async fn get(&self, req: Request<pb::GetRequest>) -> Result<Response<Self::GetStream>, Status> {
        coflow_proto::authorize(&req, "get", coflow_proto::Peer::may_use_api)?;
        let r = req.into_inner();
        let coflow = CoflowId(r.coflow_id);
        let data_id = DataId::new(r.data_id).map_err(AgentError::from)?;
        self.shared.gets.fetch_add(1, Ordering::Relaxed);
        let ann = pb::AnnounceGetRequest {
            coflow_id: coflow.0,
            data_id: data_id.as_str().to_string(),
            machine_id: self.machine().0,
            session: self.shared.session(),
        };
        let grant =
            self.shared.coordinator.clone().announce_get(ann).await.map_err(AgentError::Coordinator)?.into_inner();
        let (tx, rx) = mpsc::channel(16);
        let shared = self.shared.clone();
        let mut stop = self.shutdown.clone();
        // Ends when the transfer does, when the client hangs up (sends fail), or at shutdown.
        tokio::spawn(async move {
            let flow = FlowId(grant.flow_id);
            let (chunks_tx, mut chunks_rx) = mpsc::channel::<Vec<u8>>(8);
            let local = grant.src_machine_id == shared.config.machine;
            let (worker, id, addr, size) = (shared.clone(), data_id.clone(), grant.src_data_addr.clone(), grant.size);
            let src = MachineId(grant.src_machine_id);
            let work = async move {
                if local {
                    stream_local(&worker, coflow, &id, size, &chunks_tx).await
                } else {
                    data::fetch(&worker, &addr, src, coflow, flow, &id, size, &chunks_tx).await
                }
            };
            let client = tx.clone();
            // Owns the chunk receiver, so a client that hangs up stops the fetch too.
            let forward = async move {
                while let Some(c) = chunks_rx.recv().await {
                    if client.send(Ok(pb::GetChunk { data: c })).await.is_err() {
                        return false;
                    }
                }
                true
            };
            let result = tokio::select! {
                (r, client_ok) = async { tokio::join!(work, forward) } => {
                    if client_ok { r } else { Err(AgentError::ShuttingDown) }
                }
                _ = stop.changed() => Err(AgentError::ShuttingDown),
            };
            let ok = result.is_ok();
            if let Err(e) = result {
                shared.get_failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(%coflow, %data_id, error = %e, "get failed");
                let _ = tx.send(Err(e.into())).await;
            }
            let done = pb::FlowFinishedRequest { flow_id: flow.0, ok, bytes: grant.size };
            if let Err(s) = shared.coordinator.clone().flow_finished(done).await {
                tracing::debug!(%flow, status = %s.message(), "could not report flow end");
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

/// A piece held by this very agent crosses no port: it is read directly.
async fn stream_local(
    shared: &Shared,
    coflow: CoflowId,
    data_id: &DataId,
    size: u64,
    out: &mpsc::Sender<Vec<u8>>,
) -> Result<u64, AgentError> {
    let piece = shared.store.get(coflow, data_id).ok_or(AgentError::Refused("the piece is no longer held locally"))?;
    if piece.len() != size {
        return Err(AgentError::Corrupted("local piece size differs from the announcement".into()));
    }
    let mut reader = piece.reader().await?;
    let mut left = size;
    while left > 0 {
        let mut buf = Vec::new();
        let k = reader.next(&mut buf, shared.config.chunk_bytes.max(256 << 10)).await?;
        left -= k as u64;
        if out.send(buf).await.is_err() {
            return Err(AgentError::ShuttingDown);
        }
    }
    Ok(size)
}
