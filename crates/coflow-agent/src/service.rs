//! The agent's gRPC face for local clients: `Put` stores a piece and announces it; `Get` asks the
//! coordinator for a flow, fetches the piece from its source at the assigned rate and streams
//! it to the client as it arrives.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use coflow_core::{CoflowId, FlowId, MachineId};
use coflow_proto::pb::agent_message::Body;
use coflow_proto::pb::agent_server::Agent;
use coflow_proto::{DataId, ErrorKind, PutSource, Registration, pb};
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use crate::data;
use crate::error::AgentError;
use crate::state::{Receiving, Shared};
use crate::store::{Piece, file_piece};

/// How many data idle timeouts a failed get waits for its stalled client to take the error.
const STALLED_CLIENT_WAIT: u32 = 10;

#[derive(Clone, Debug)]
pub(crate) struct AgentService {
    pub(crate) shared: Arc<Shared>,
    pub(crate) shutdown: watch::Receiver<bool>,
    /// A get's control path, observed at each grant.
    pub(crate) get_control: coflow_telemetry::prometheus_client::metrics::histogram::Histogram,
}

impl AgentService {
    fn machine(&self) -> MachineId {
        MachineId(self.shared.config.machine_id())
    }

    /// Refuses a client call, as retryable, until the agent has a session: before it, the
    /// coordinator would refuse the agent's announcements (another session may still be live).
    fn registered(&self) -> Result<(), AgentError> {
        if self.shared.session() == 0 { Err(AgentError::NotRegistered) } else { Ok(()) }
    }

    /// Asks the coordinator for a get's flow, and the link epoch the grant belongs to.
    ///
    /// A coordinator that is away (restarting: its address refuses connections, or this agent
    /// has not registered with it yet) is waited for, with backoff, for at most
    /// `coordinator_grace_ms`: transfers keep going while the coordinator is away, and a get
    /// issued meanwhile starts once it is back instead of failing at once; a coordinator that has
    /// just started answers "not yet" (`UNAVAILABLE` without an error kind) for what agents may
    /// still be re-announcing, which is waited for the same way. Every other answer (a typed
    /// error such as `no-such-data`) is returned as it is.
    async fn announce_get(
        &self,
        coflow: CoflowId,
        data_id: &DataId,
        client: &str,
    ) -> Result<(u64, pb::AnnounceGetResponse), AgentError> {
        let deadline = tokio::time::Instant::now() + Duration::from_millis(self.shared.config.coordinator_grace_ms);
        let mut backoff = Duration::from_millis(20);
        let started = std::time::Instant::now();
        loop {
            let session = self.shared.session();
            let attempt = async {
                self.registered()?;
                let ann = pb::AnnounceGetRequest {
                    coflow_id: coflow.0,
                    data_id: data_id.as_str().to_string(),
                    machine_id: self.machine().0,
                    client: client.to_string(),
                    ..Default::default()
                };
                // Read before the grant: a coordinator that restarts after granting is a later epoch.
                let epoch = self.shared.link_epoch.load(Ordering::SeqCst);
                let left =
                    deadline.saturating_duration_since(tokio::time::Instant::now()).max(Duration::from_millis(100));
                match self.shared.link.call(Body::Get(ann), left).await.map_err(unanswered)? {
                    pb::agent_reply::Result::Get(grant) => Ok((epoch, grant)),
                    _ => Err(AgentError::Coordinator(tonic::Status::internal(
                        "the coordinator answered a get with another reply",
                    ))),
                }
            }
            .await;
            match attempt {
                // A registration that changed while the call was out (the coordinator restarted
                // and this agent registered again) is retried under the new session.
                // `permission-denied` for this agent's own machine can only be such a race (its
                // new session not stored yet when the answer came): retried for a short while.
                Err(e)
                    if (coordinator_away(&e)
                        || self.shared.session() != session
                        || (session_race(&e) && started.elapsed() < Duration::from_secs(2)))
                        && tokio::time::Instant::now() + backoff < deadline =>
                {
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_millis(500));
                }
                other => return other,
            }
        }
    }
}

/// A coordinator's answer that did not come within its deadline is `agent-unreachable`
/// (retryable), like a coordinator that cannot be reached; any other answer is kept as it is.
fn unanswered(s: tonic::Status) -> AgentError {
    if s.code() == tonic::Code::DeadlineExceeded && ErrorKind::of(&s).is_none() {
        let msg = format!("the coordinator did not answer in time: {}", s.message());
        return AgentError::Coordinator(ErrorKind::AgentUnreachable.status(tonic::Code::Unavailable, msg));
    }
    AgentError::Coordinator(s)
}

impl AgentService {
    /// Announces a piece just stored for `client` (its identity); it is forgotten again if the
    /// coordinator refuses it.
    async fn announce_put(
        &self,
        coflow: CoflowId,
        data_id: DataId,
        size: u64,
        client: String,
    ) -> Result<Response<pb::PutResponse>, Status> {
        let ann = pb::AnnouncePutRequest {
            coflow_id: coflow.0,
            data_id: data_id.as_str().to_string(),
            machine_id: self.machine().0,
            size,
            recovered: false,
            registration: None,
            client,
        };
        let deadline = Duration::from_millis(self.shared.config.coordinator_grace_ms);
        match self.shared.link.call(Body::Put(ann), deadline).await {
            Ok(pb::agent_reply::Result::Put(resp)) => {
                if let Some(reg) = resp.registration.and_then(|r| Registration::try_from(r).ok()) {
                    self.shared.store.learn(coflow, reg);
                }
            }
            Ok(_) => {
                self.shared.store.remove(coflow, &data_id);
                return Err(tonic::Status::internal("the coordinator answered a put with another reply"));
            }
            Err(s) => {
                self.shared.store.remove(coflow, &data_id);
                if s.code() == tonic::Code::DeadlineExceeded && ErrorKind::of(&s).is_none() {
                    // The coordinator may still take the announcement when it runs again: it is
                    // told, after it on the same session, that the piece is gone, so that the
                    // client's retry is not a duplicate of a piece nobody holds.
                    let w = pb::WithdrawPutRequest { coflow_id: coflow.0, data_id: data_id.as_str().to_string() };
                    self.shared.link.tell(Body::WithdrawPut(w));
                }
                return Err(unanswered(s).into());
            }
        }
        self.shared.puts.fetch_add(1, Ordering::Relaxed);
        Ok(Response::new(pb::PutResponse { size }))
    }
}

/// The identity of a local client (its certificate's name; empty in token mode), which the
/// coordinator checks against the coflow's owner.
fn client_of<T>(req: &Request<T>) -> String {
    coflow_proto::Peer::of(req).map(coflow_proto::Peer::identity).unwrap_or_default()
}

/// Whether the coordinator refused this agent's session (see [`AgentService::announce_get`]).
fn session_race(e: &AgentError) -> bool {
    matches!(e, AgentError::Coordinator(s) if ErrorKind::of(s) == Some(ErrorKind::PermissionDenied))
}

/// Whether an error says the coordinator is away (not that it answered): this agent is not
/// registered with it, or the call did not reach it (a transport error carries no error kind).
fn coordinator_away(e: &AgentError) -> bool {
    match e {
        AgentError::NotRegistered => true,
        AgentError::Coordinator(s) => s.code() == tonic::Code::Unavailable && ErrorKind::of(s).is_none(),
        _ => false,
    }
}

#[tonic::async_trait]
impl Agent for AgentService {
    #[tracing::instrument(skip_all, fields(coflow = req.get_ref().coflow_id, data_id = %req.get_ref().data_id))]
    async fn put(&self, req: Request<pb::PutRequest>) -> Result<Response<pb::PutResponse>, Status> {
        coflow_proto::authorize(&req, "put", coflow_proto::Peer::may_use_api)?;
        self.registered()?;
        let client = client_of(&req);
        let r = req.into_inner();
        let coflow = CoflowId(r.coflow_id);
        let data_id = DataId::new(r.data_id).map_err(AgentError::from)?;
        let source = r.source.ok_or(AgentError::Invalid(coflow_proto::ProtoError::Missing { field: "source" }))?;
        let block = self.shared.config.chunk_bytes;
        let piece = match PutSource::try_from(source).map_err(AgentError::from)? {
            PutSource::Content(bytes) => Piece::memory(bytes, block),
            PutSource::File { path, offset, length } => {
                let dir = self.shared.config.data_dir.clone();
                // Reads the segment once, to fix its checksums: off the async threads.
                tokio::task::spawn_blocking(move || file_piece(&dir, &path, offset, length, block))
                    .await
                    .map_err(|e| AgentError::BadFile(e.to_string()))??
            }
        };
        let size = piece.len();
        self.shared.store.insert(coflow, data_id.clone(), piece)?;
        self.announce_put(coflow, data_id, size, client).await
    }

    /// A put of bytes streamed in chunks: the size its first message states is reserved against
    /// `max_stored_bytes` before a byte is accepted, and the bytes are gathered into the piece's
    /// one buffer as they come (each message within the data idle timeout).
    #[tracing::instrument(skip_all)]
    async fn put_stream(&self, req: Request<Streaming<pb::PutChunk>>) -> Result<Response<pb::PutResponse>, Status> {
        coflow_proto::authorize(&req, "put", coflow_proto::Peer::may_use_api)?;
        self.registered()?;
        let client = client_of(&req);
        let idle = self.shared.idle();
        let mut stream = req.into_inner();
        let silent = || {
            AgentError::Invalid(coflow_proto::ProtoError::Invalid {
                field: "chunks",
                reason: format!("none arrived for {} ms", idle.as_millis()),
            })
        };
        let first = tokio::time::timeout(idle, stream.message())
            .await
            .map_err(|_| silent())??
            .ok_or(AgentError::Invalid(coflow_proto::ProtoError::Missing { field: "first chunk" }))?;
        let coflow = CoflowId(first.coflow_id);
        let data_id = DataId::new(first.data_id).map_err(AgentError::from)?;
        let size = first.size;
        let wrong = |reason: String| AgentError::Invalid(coflow_proto::ProtoError::Invalid { field: "size", reason });
        if size > coflow_proto::MAX_PIECE_SIZE {
            return Err(wrong(format!("{size} bytes is more than {}", coflow_proto::MAX_PIECE_SIZE)).into());
        }
        let reservation = self.shared.store.reserve(coflow, &data_id, size)?;
        let mut bytes = Vec::new();
        bytes
            .try_reserve_exact(size as usize)
            .map_err(|_| AgentError::LimitExceeded(format!("the agent cannot allocate {size} bytes for the piece")))?;
        let mut chunk = first.data;
        loop {
            if (bytes.len() + chunk.len()) as u64 > size {
                return Err(wrong(format!("more bytes than the {size} stated")).into());
            }
            bytes.extend_from_slice(&chunk);
            match tokio::time::timeout(idle, stream.message()).await.map_err(|_| silent())?? {
                Some(c) => chunk = c.data,
                None => break,
            }
        }
        if bytes.len() as u64 != size {
            return Err(wrong(format!("the stream ended after {} of the {size} bytes stated", bytes.len())).into());
        }
        let piece = Piece::memory(bytes, self.shared.config.chunk_bytes);
        self.shared.store.insert_reserved(reservation, piece)?;
        self.announce_put(coflow, data_id, size, client).await
    }

    type GetStream = ReceiverStream<Result<pb::GetChunk, Status>>;

    #[tracing::instrument(skip_all, fields(coflow = req.get_ref().coflow_id, data_id = %req.get_ref().data_id))]
    async fn get(&self, req: Request<pb::GetRequest>) -> Result<Response<Self::GetStream>, Status> {
        coflow_proto::authorize(&req, "get", coflow_proto::Peer::may_use_api)?;
        let client = client_of(&req);
        let r = req.into_inner();
        let coflow = CoflowId(r.coflow_id);
        let data_id = DataId::new(r.data_id).map_err(AgentError::from)?;
        self.shared.gets.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(target: "coflow::path", coflow = coflow.0, data_id = data_id.as_str(), "get");
        let asked = std::time::Instant::now();
        let (epoch, grant) = self.announce_get(coflow, &data_id, &client).await?;
        self.get_control.observe(asked.elapsed().as_secs_f64());
        tracing::debug!(target: "coflow::path", coflow = coflow.0, data_id = data_id.as_str(), flow = grant.flow_id, "granted");
        let (tx, rx) = mpsc::channel(16);
        let shared = self.shared.clone();
        let mut stop = self.shutdown.clone();
        let flow = FlowId(grant.flow_id);
        let local = grant.src_machine_id == shared.config.machine_id();
        let received = Arc::new(AtomicU64::new(0));
        let (cancel, mut cancelled) = watch::channel(None::<String>);
        if !local {
            let rec = Receiving {
                coflow,
                data_id: data_id.clone(),
                src: MachineId(grant.src_machine_id),
                size: grant.size,
                received: received.clone(),
                epoch,
                cancel,
            };
            shared.receiving.lock().expect("receiving lock").insert(flow, rec);
        }
        // Ends when the transfer does, when the client hangs up (at once, whether or not bytes
        // are moving), when the coordinator fails the flow, or at shutdown.
        let gone_received = received.clone();
        tokio::spawn(async move {
            let (chunks_tx, mut chunks_rx) = mpsc::channel::<Vec<u8>>(8);
            let (worker, id, addr, size) = (shared.clone(), data_id.clone(), grant.src_data_addr.clone(), grant.size);
            let src = MachineId(grant.src_machine_id);
            // A grant without a ticket of the right length is refused by the source.
            let ticket = grant.ticket.as_slice().try_into().unwrap_or([0; coflow_proto::ticket::TICKET_LEN]);
            let work = async move {
                if local {
                    stream_local(&worker, coflow, &id, size, &chunks_tx).await
                } else {
                    data::fetch(&worker, &addr, src, coflow, flow, ticket, &id, size, &chunks_tx, &received).await
                }
            };
            let client = tx.clone();
            // The first message states the piece's size, which the client checks the stream
            // against. A client that takes no message for the data idle timeout has stopped
            // reading: its get fails (and the flow's end is reported, which frees its rate).
            let idle = shared.idle();
            let forward = async move {
                let deliver = |m: pb::GetChunk| {
                    let client = client.clone();
                    async move { matches!(tokio::time::timeout(idle, client.send(Ok(m))).await, Ok(Ok(()))) }
                };
                if !deliver(pb::GetChunk { data: Vec::new(), piece_size: Some(size) }).await {
                    return false;
                }
                while let Some(c) = chunks_rx.recv().await {
                    if !deliver(pb::GetChunk { data: c, piece_size: None }).await {
                        return false;
                    }
                }
                true
            };
            let result = tokio::select! {
                (r, client_ok) = async { tokio::join!(work, forward) } => {
                    if client_ok { r } else { Err(AgentError::ClientStalled { secs: idle.as_secs_f64() }) }
                }
                _ = tx.closed() => Err(AgentError::ClientDeparted),
                reason = async {
                    let said = cancelled.wait_for(Option::is_some).await.map(|r| r.clone());
                    match said {
                        Ok(r) => r.unwrap_or_default(),
                        // A local get has no canceller.
                        Err(_) => std::future::pending().await,
                    }
                } => Err(AgentError::SourceUnreachable { addr: grant.src_data_addr.clone(), reason }),
                // A local get needs no coordinator to move its bytes.
                _ = async {
                    if local {
                        std::future::pending().await
                    } else {
                        shared.coordinator_gone(&gone_received).await
                    }
                } => Err(AgentError::SourceUnreachable {
                    addr: grant.src_data_addr.clone(),
                    reason: "the coordinator is unreachable and the flow stalled".into(),
                }),
                _ = stop.changed() => Err(AgentError::ShuttingDown),
            };
            shared.receiving.lock().expect("receiving lock").remove(&flow);
            let ok = result.is_ok();
            let reason = result.as_ref().err().map(|e| e.kind().as_str().to_string()).unwrap_or_default();
            let done = pb::FlowFinishedRequest { flow_id: flow.0, ok, bytes: grant.size, reason };
            if !shared.link.tell(Body::Finished(done)) {
                tracing::debug!(%flow, "no session with the coordinator: the flow's end is reported when one opens");
            }
            if let Err(e) = result {
                shared.get_failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(%coflow, %data_id, error = %e, "get failed");
                // A stream that ends without an error ends with status OK, so every failure but
                // a departed client's is sent, after whatever chunks the client has yet to take.
                // A stalled client that never reads again nor hangs up is waited for no longer
                // than `STALLED_CLIENT_WAIT` idle timeouts.
                if !matches!(e, AgentError::ClientDeparted) {
                    let wait = idle * STALLED_CLIENT_WAIT;
                    let _ = tokio::time::timeout(wait, tx.send(Err(e.into()))).await;
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

/// A piece held by this very agent crosses no port: it is read directly, verified block by
/// block, and handed on in chunks of up to 256 KiB.
async fn stream_local(
    shared: &Shared,
    coflow: CoflowId,
    data_id: &DataId,
    size: u64,
    out: &mpsc::Sender<Vec<u8>>,
) -> Result<u64, AgentError> {
    let piece = shared
        .store
        .get(coflow, data_id)
        .ok_or_else(|| AgentError::DataLost("the piece is no longer held locally".into()))?;
    if piece.len() != size {
        return Err(AgentError::Corrupted("local piece size differs from the announcement".into()));
    }
    let mut reader = piece.reader(&shared.config.data_dir).await.inspect_err(warn_lost)?;
    let mut block = Vec::new();
    while reader.remaining() > 0 {
        let mut chunk = Vec::new();
        while reader.remaining() > 0 && chunk.len() < 256 << 10 {
            reader.next_block(&mut block).await.inspect_err(warn_lost)?;
            chunk.extend_from_slice(&block);
        }
        if out.send(chunk).await.is_err() {
            return Err(AgentError::ClientDeparted);
        }
    }
    Ok(size)
}

fn warn_lost(e: &AgentError) {
    if let AgentError::DataLost(msg) = e {
        tracing::warn!(error = %msg, "stored piece lost");
    }
}
