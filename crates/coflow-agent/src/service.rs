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

use crate::error::AgentError;
use crate::receive;
use crate::state::Shared;
use crate::store::{Piece, home_of};

/// How many data idle timeouts a failed get waits for its stalled client to take the error.
const STALLED_CLIENT_WAIT: u32 = 10;

#[derive(Clone, Debug)]
pub(crate) struct AgentService {
    pub(crate) shared: Arc<Shared>,
    pub(crate) shutdown: watch::Receiver<bool>,
    /// A get's control path, observed at each grant.
    pub(crate) get_control: coflow_telemetry::prometheus_client::metrics::histogram::Histogram,
    /// The turns to read file segments at put.
    pub(crate) hashing: Arc<crate::segment::Hashing>,
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
}

impl AgentService {
    /// Refuses a put by `client` into a coflow whose registration, learned here, is another's.
    fn refuse_barred(&self, coflow: CoflowId, client: &str) -> Result<(), AgentError> {
        if self.shared.store.bars(coflow, client) {
            return Err(AgentError::PermissionDenied("the coflow belongs to another client"));
        }
        Ok(())
    }

    /// Announces a piece just held pending for `client` (its identity), and keeps it if the
    /// coordinator accepts it or lets it go if not. The announcement runs as a task of its own,
    /// so that a client that goes away meanwhile leaves no piece pending.
    async fn announce_put(
        &self,
        coflow: CoflowId,
        data_id: DataId,
        size: u64,
        client: String,
    ) -> Result<Response<pb::PutResponse>, Status> {
        let shared = self.shared.clone();
        let machine = self.machine();
        let announced = async move { announce(&shared, machine, coflow, data_id, size, client).await };
        let task = tokio::spawn(tracing::Instrument::in_current_span(announced));
        task.await.map_err(|e| Status::internal(format!("the put's announcement failed: {e}")))??;
        self.shared.puts.fetch_add(1, Ordering::Relaxed);
        Ok(Response::new(pb::PutResponse { size }))
    }
}

/// Announces `client`'s pending piece to the coordinator; keeps it if accepted, lets it go if
/// not.
async fn announce(
    shared: &Shared,
    machine: MachineId,
    coflow: CoflowId,
    data_id: DataId,
    size: u64,
    client: String,
) -> Result<(), Status> {
    let ann = pb::AnnouncePutRequest {
        coflow_id: coflow.0,
        data_id: data_id.as_str().to_string(),
        machine_id: machine.0,
        size,
        recovered: false,
        registration: None,
        client: client.clone(),
        sealed: false,
    };
    let deadline = Duration::from_millis(shared.config.coordinator_grace_ms);
    match shared.link.call(Body::Put(ann), deadline).await {
        Ok(pb::agent_reply::Result::Put(resp)) => {
            if let Some(reg) = resp.registration.and_then(|r| Registration::try_from(r).ok()) {
                shared.store.learn(coflow, reg);
            }
            shared.store.confirm(coflow, &data_id, &client)?;
            Ok(())
        }
        Ok(_) => {
            shared.store.withdraw(coflow, &data_id, &client);
            Err(tonic::Status::internal("the coordinator answered a put with another reply"))
        }
        Err(s) => {
            shared.store.withdraw(coflow, &data_id, &client);
            if s.code() == tonic::Code::DeadlineExceeded && ErrorKind::of(&s).is_none() {
                // The coordinator may still take the announcement when it runs again: it is
                // told, after it on the same session, that the piece is gone, so that the
                // client's retry is not a duplicate of a piece nobody holds.
                let w = pb::WithdrawPutRequest { coflow_id: coflow.0, data_id: data_id.as_str().to_string() };
                shared.link.tell(Body::WithdrawPut(w));
            }
            Err(AgentError::Coordinator(s).into())
        }
    }
}

/// The least rate, in bytes per second, at which a put stream must keep bringing the bytes it
/// stated (all of them so far, after a grace of the data idle timeout): the SDKs stream bytes
/// already in memory, at memory speed.
const MIN_PUT_RATE: f64 = (1 << 20) as f64;

/// The identity of a local client (its certificate's name; empty in token mode), which the
/// coordinator checks against the coflow's owner.
fn client_of<T>(req: &Request<T>) -> String {
    coflow_proto::Peer::of(req).map(coflow_proto::Peer::identity).unwrap_or_default()
}

#[tonic::async_trait]
impl Agent for AgentService {
    #[tracing::instrument(skip_all, fields(coflow = req.get_ref().coflow_id, data_id = %req.get_ref().data_id))]
    async fn put(&self, req: Request<pb::PutRequest>) -> Result<Response<pb::PutResponse>, Status> {
        coflow_proto::authorize(&req, "put", coflow_proto::Peer::may_use_api)?;
        self.registered()?;
        let client = client_of(&req);
        let home = home_of(coflow_proto::Peer::of(&req))?;
        let r = req.into_inner();
        let coflow = CoflowId(r.coflow_id);
        let data_id = DataId::new(r.data_id).map_err(AgentError::from)?;
        self.refuse_barred(coflow, &client)?;
        let source = r.source.ok_or(AgentError::Invalid(coflow_proto::ProtoError::Missing { field: "source" }))?;
        let block = self.shared.config.chunk_bytes;
        let piece = match PutSource::try_from(source).map_err(AgentError::from)? {
            PutSource::Content(bytes) => Piece::memory(bytes, block),
            PutSource::File { path, offset, length } => {
                // Reads the segment once, to fix its checksums, in this client's turn; a stop
                // ends the read at its next block.
                let dir = self.shared.config.data_dir.clone();
                let mut stopping = self.shutdown.clone();
                tokio::select! {
                    piece = self.hashing.piece(&client, dir, home, path, offset, length, block) => piece?,
                    _ = stopping.wait_for(|&s| s) => return Err(AgentError::ShuttingDown.into()),
                }
            }
        };
        let size = piece.len();
        self.shared.store.insert(coflow, data_id.clone(), piece, &client)?;
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
        self.refuse_barred(coflow, &client)?;
        let reservation = self.shared.store.reserve(coflow, &data_id, size, &client, self.shared.config.chunk_bytes)?;
        // The reservation holds `size` bytes of the agent's memory from now on: the bytes must
        // keep coming at `MIN_PUT_RATE` at least (all of them so far, counted after a grace of
        // the idle timeout), so that a client cannot hold memory, or a name, by stating a large
        // size and sending a trickle.
        let start = tokio::time::Instant::now();
        let due = |got: usize| start + idle + Duration::from_secs_f64(got as f64 / MIN_PUT_RATE);
        let slow = |got: usize| {
            AgentError::Invalid(coflow_proto::ProtoError::Invalid {
                field: "chunks",
                reason: format!(
                    "{got} of the {size} bytes stated came in {:.1} s, slower than the {} MiB/s a put stream must keep",
                    start.elapsed().as_secs_f64(),
                    MIN_PUT_RATE / (1 << 20) as f64
                ),
            })
        };
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
            let (next, due) = (tokio::time::Instant::now() + idle, due(bytes.len()));
            let message = tokio::time::timeout_at(next.min(due), stream.message()).await;
            match message.map_err(|_| if next <= due { silent() } else { slow(bytes.len()) })?? {
                Some(c) => chunk = c.data,
                None => break,
            }
            // A coflow unregistered meanwhile takes no more of the stream's bytes.
            if self.shared.store.is_dropped(coflow) {
                return Err(AgentError::UnknownCoflow(coflow).into());
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
        // A get waiting for the coordinator (for its grace, while the link is down) ends at once
        // when the agent stops, shut down or refused by the coordinator for good, rather than at
        // the servers' drain bound with its connection dropped; a grant that comes after is ended.
        let mut stopping = self.shutdown.clone();
        let announced = tokio::select! {
            r = receive::announce_get(&self.shared, coflow, &data_id, &client, None) => r,
            _ = stopping.wait_for(|&s| s) => Err(AgentError::ShuttingDown),
        };
        let (epoch, grant) = announced?;
        self.get_control.observe(asked.elapsed().as_secs_f64());
        tracing::debug!(target: "coflow::path", coflow = coflow.0, data_id = data_id.as_str(), flow = grant.flow_id, "granted");
        let parts = receive::parts_of(&grant, 0, grant.size)?;
        let (tx, rx) = mpsc::channel(CLIENT_QUEUE);
        let shared = self.shared.clone();
        let mut stop = self.shutdown.clone();
        let size = grant.size;
        let local = grant.parts.is_empty() && grant.src_machine_id == shared.config.machine_id();
        let received = Arc::new(AtomicU64::new(0));
        // Every flow of the grant is reported at its end, even one whose part never started
        // (its client hung up at once).
        let open: crate::unread::OpenParts =
            Arc::new(std::sync::Mutex::new(crate::session::flows_of(&grant).collect()));
        let streamed = Arc::default();
        let get =
            receive::Get { shared: shared.clone(), coflow, data_id: data_id.clone(), client, size, open, streamed };
        // Ends when the transfer does, when the client hangs up (at once, whether or not bytes
        // are moving), when the coordinator fails a flow of it, or at shutdown.
        let gone_received = received.clone();
        tokio::spawn(async move {
            let (chunks_tx, mut chunks_rx) = mpsc::channel::<Vec<u8>>(8);
            let (worker, id) = (shared.clone(), data_id.clone());
            let sink = receive::Sink::stream(chunks_tx.clone(), received);
            let receiving = get.clone();
            let work = async move {
                if local {
                    stream_local(&worker, coflow, &id, size, &chunks_tx).await.map(|_| ())
                } else {
                    drop(chunks_tx);
                    receive::receive(receiving, parts, sink, epoch, receive::MAX_RESUMES, None).await
                }
            };
            let client = tx.clone();
            // The first message states the piece's size, which the client checks the stream
            // against. A client whose messages wait for it (a tenth of a heartbeat's interval, or
            // one for `UNREAD_AFTER`) is reported holding its get back (its flows' ports are not
            // judged by them), and one that takes none for the data idle timeout has stopped
            // reading: its get fails (and the flow's end is reported, which frees its rate).
            let idle = shared.idle();
            let (waiter, streamed) = (shared.clone(), get.streamed.clone());
            let delivering = async move {
                let watched = waiter.unread.watch(&streamed);
                // The first message states the size; the queue to the client is empty then.
                if client.send(Ok(pb::GetChunk { data: Vec::new(), piece_size: Some(size) })).await.is_err() {
                    return false;
                }
                forward(&mut chunks_rx, &client, &watched, idle).await
            };
            let result = tokio::select! {
                (r, client_ok) = async { tokio::join!(work, delivering) } => {
                    if client_ok { r } else { Err(AgentError::ClientStalled { secs: idle.as_secs_f64() }) }
                }
                _ = tx.closed() => Err(AgentError::ClientDeparted),
                // A local get needs no coordinator to move its bytes.
                _ = async {
                    if local {
                        std::future::pending().await
                    } else {
                        shared.coordinator_gone(&gone_received).await
                    }
                } => Err(AgentError::Coordinator(tonic::Status::unavailable(
                    "the coordinator is unreachable and the flow stalled",
                ))),
                _ = stop.changed() => Err(AgentError::ShuttingDown),
            };
            // Every part whose end is not reported yet (a local get's one flow, parts abandoned
            // with a failed get) ends as the get did.
            let unreported: Vec<FlowId> = get.open.lock().expect("open parts lock").iter().copied().collect();
            for flow in unreported {
                receive::report(&get, flow, result.as_ref().map(|_| ()));
            }
            if let Err(e) = result {
                shared.get_failures.fetch_add(1, Ordering::Relaxed);
                // A client that hangs up ended its own get: no fault of the service's, and a client
                // could write a line per get it starts and cancels, so it is not a warning.
                if matches!(e, AgentError::ClientDeparted) {
                    tracing::debug!(%coflow, %data_id, error = %e, "get failed");
                } else {
                    tracing::warn!(%coflow, %data_id, error = %e, "get failed");
                }
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

/// Hands a get's blocks from `blocks` on to its client, a message at a time as room comes in its
/// queue: blocks that come while the queue is full wait for it as one message (up to
/// `COALESCED_BYTES`, and one block more), so that a client that takes messages slower than they
/// come gets bigger ones, not fewer bytes. Each wait for room is the client's (`watched`), at most
/// `idle`. Whether every block was handed on (false: the client is gone or stopped reading).
async fn forward(
    blocks: &mut mpsc::Receiver<Vec<u8>>,
    client: &mpsc::Sender<Result<pb::GetChunk, Status>>,
    watched: &crate::unread::Watched<'_>,
    idle: Duration,
) -> bool {
    let (mut waiting, mut more) = (Vec::new(), true);
    loop {
        if waiting.is_empty() {
            match blocks.recv().await {
                Some(c) => waiting = c,
                None => return true,
            }
        }
        let permit = match client.try_reserve() {
            Ok(p) => p,
            Err(mpsc::error::TrySendError::Closed(())) => return false,
            Err(mpsc::error::TrySendError::Full(())) => {
                let gather = async {
                    loop {
                        tokio::select! {
                            p = client.reserve() => return p,
                            c = blocks.recv(), if more && waiting.len() < COALESCED_BYTES => match c {
                                Some(c) => waiting.extend_from_slice(&c),
                                None => more = false,
                            },
                        }
                    }
                };
                match watched.deliver(gather, idle).await {
                    Some(p) => p,
                    None => return false,
                }
            }
        };
        permit.send(Ok(pb::GetChunk { data: std::mem::take(&mut waiting), piece_size: None }));
    }
}

/// The most bytes of blocks waiting for a client that go out in one message of its get (and one
/// block more).
const COALESCED_BYTES: usize = 256 << 10;

/// The messages of a get queued for its client: one, so that what comes while the client takes it
/// goes in the next. With the blocks gathered for that one and those on their way to the agent, a
/// client that reads slowly holds under 1 MiB of this agent's memory per get (at the largest
/// block size, `chunk_bytes` 4 MiB, about 44 MiB).
const CLIENT_QUEUE: usize = 1;

/// A piece held by this very agent crosses no port: it is read directly, verified block by
/// block, and handed on in chunks of up to 256 KiB.
async fn stream_local(
    shared: &Shared,
    coflow: CoflowId,
    data_id: &DataId,
    size: u64,
    out: &mpsc::Sender<Vec<u8>>,
) -> Result<u64, AgentError> {
    // The grant may come before the put's answer is read here: the piece is then still pending.
    let piece = shared
        .store
        .settled(coflow, data_id, shared.idle())
        .await
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
