//! The data plane: agents fetch pieces from each other over TCP, or with TLS over mutual TLS
//! 1.3 where the source accepts agents' certificates only and the receiver accepts only the
//! certificate of the agent the coordinator named as the source.
//!
//! The bytes on the wire are the pure codec's (`wire`); this module moves them between sockets
//! and the codec. A receiver keeps its connections to a source warm in a [`Pool`] and sends the
//! next fetch on one that is idle, so a fetch costs no connection set-up (nor TLS handshake) once
//! two agents have spoken; the source serves fetches on a connection one after another.
//!
//! The sender paces the blocks with the flow's token bucket (the coordinator's rate) and its
//! port's (the configured capacity). Either side closes a connection on which nothing moves for
//! `data_idle_timeout_ms` (a source waiting for the next request too; receivers drop warm
//! connections idle for half of it, so they never reuse one the source is about to close); the
//! sender also stops at once when the receiver hangs up. Both directions are generic over
//! `AsyncRead + AsyncWrite`, so the sockets may be wrapped.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use coflow_core::{CoflowId, FlowId, MachineId};
use coflow_proto::DataId;
use coflow_proto::ticket::Ticket;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::task::JoinSet;

use crate::bucket::{Grant, burst_for};
use crate::conn::{DataStream, OwnedFrame, ReadError, Reader};
use crate::error::AgentError;
use crate::state::{DataPeer, Shared};
use crate::wire::{self, Request, Status};

/// The granularity of the sender's timers.
const TIMER_STEP: Duration = Duration::from_millis(1);

/// Accepts fetches until shutdown, at most `max_data_connections` connections at once and at
/// most `max_data_connections_per_peer` of them from one peer (with TLS one agent, else one
/// address), so that one peer cannot take them from the others. With TLS a connection takes its
/// place among them only once its handshake shows an agent of the cluster, so that peers without
/// a certificate cannot fill them; until then it is one of the [`coflow_proto::Unproven`],
/// bounded per address. Ends with the error, its connections closed, when accepting fails in a
/// way that lasts (the listening socket is unusable: see [`coflow_proto::AcceptFailures`]).
pub(crate) async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let mut conns = JoinSet::new();
    let slots = Arc::new(Semaphore::new(shared.config.max_data_connections));
    let unproven = Arc::new(coflow_proto::Unproven::default());
    let mut failures = coflow_proto::AcceptFailures::default();
    let ended = loop {
        tokio::select! {
            accepted = failures.accept("data plane", || listener.accept()) => {
                let (sock, peer) = match accepted {
                    Ok(accepted) => accepted,
                    Err(e) => break Err(e),
                };
                sock.set_nodelay(true).ok();
                socket2::SockRef::from(&sock).set_send_buffer_size(shared.config.socket_buffer_bytes).ok();
                let (shared, stop, slots) = (shared.clone(), shutdown.clone(), slots.clone());
                if shared.security.tls().is_none() {
                    conns.spawn(async move { serve_one(sock, None, peer, &shared, &slots, stop).await });
                    continue;
                }
                let Some(place) = unproven.enter(coflow_proto::peer_group(peer.ip())) else {
                    tracing::debug!(%peer, "data connection closed: too many handshakes from its address");
                    continue;
                };
                conns.spawn(async move {
                    let Some(tls) = shared.security.tls() else { return };
                    match place.handshake(shared.idle(), coflow_proto::accept_agent(tls, sock, peer)).await {
                        Some(Some((stream, machine))) => {
                            serve_one(stream, Some(MachineId(machine)), peer, &shared, &slots, stop).await;
                        }
                        Some(None) => tracing::debug!(%peer, "data connection refused: not an agent of this cluster"),
                        None => tracing::debug!(%peer, "data connection closed: no TLS handshake within the idle timeout"),
                    }
                });
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            _ = shutdown.changed() => break Ok(()),
        }
    };
    conns.shutdown().await;
    ended
}

/// Serves fetches on a connection (with TLS, from agent `peer_machine`) in one of the `slots` and
/// within its peer's share of them, or says "busy" when none is free (a size of 0) or the peer
/// holds its share (the share as the size).
async fn serve_one<S: AsyncRead + AsyncWrite + Unpin + Send>(
    stream: S,
    peer_machine: Option<MachineId>,
    peer: std::net::SocketAddr,
    shared: &Shared,
    slots: &Arc<Semaphore>,
    stop: watch::Receiver<bool>,
) {
    // A connection refused holds no place while it is told so: one refused for its peer's
    // share takes none of the others'.
    let who = match peer_machine {
        Some(m) => DataPeer::Machine(m),
        None => DataPeer::Address(peer.ip().to_canonical()),
    };
    let share = shared.config.data_connections_per_peer();
    let Some(place) = shared.peer_shares.admit(who, share) else {
        let detail = format!("{who:?} holds max_data_connections_per_peer ({share}) already");
        shared.denials.refuse(peer, "data plane", coflow_proto::Refusal::TooManyConnections, &detail);
        return say_busy(stream, share as u64).await;
    };
    let Ok(slot) = slots.clone().try_acquire_owned() else {
        drop(place);
        tracing::debug!(%peer, "data connection refused: max_data_connections reached");
        return say_busy(stream, 0).await;
    };
    shared.data_connections.fetch_add(1, Ordering::Relaxed);
    if let Err(e) = send_pieces(stream, shared, peer_machine, peer, stop).await {
        tracing::debug!(%peer, error = %e, "fetch ended early");
    }
    shared.data_connections.fetch_sub(1, Ordering::Relaxed);
    drop((slot, place));
}

/// Says "busy" with `size` in the head: 0 when the source serves its `max_data_connections`,
/// else the share of them the peer holds already.
async fn say_busy<S: AsyncRead + AsyncWrite + Unpin>(mut sock: S, size: u64) {
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        sock.write_all(&wire::encode_head(Status::Busy, size)).await?;
        sock.shutdown().await?;
        let mut sink = [0u8; 1024];
        while sock.read(&mut sink).await? > 0 {}
        Ok::<_, std::io::Error>(())
    })
    .await;
}

fn peer_gone(e: std::io::Error) -> AgentError {
    AgentError::ReceiverGone(e.to_string())
}

/// Writes `bytes` within the idle timeout.
async fn write_within<W: AsyncWrite + Unpin>(w: &mut W, bytes: &[u8], idle: Duration) -> Result<(), AgentError> {
    match tokio::time::timeout(idle, w.write_all(bytes)).await {
        Ok(r) => r.map_err(peer_gone),
        Err(_) => Err(AgentError::ReceiverStalled { secs: idle.as_secs_f64() }),
    }
}

/// Why a request may not attach to its flow, if it may not: its ticket is not the flow's under
/// this agent's flow keys (for the range it asks and the hop it names), the requester's
/// certificate (with TLS, `peer`) is not the receiving agent the ticket names, or the flow
/// attached already. Checked before the piece is looked up,
/// so a refusal tells nothing of the piece.
fn admit(shared: &Shared, req: &Request, peer: Option<MachineId>) -> Result<(), &'static str> {
    if !shared.flow_keys.verify(req) {
        return Err("not the flow's ticket");
    }
    if shared.security.tls().is_some() && peer != Some(req.dst) {
        return Err("the certificate is not the receiving agent's");
    }
    if !shared.attached.attach(req.ticket) {
        return Err("the flow is attached already");
    }
    Ok(())
}

/// Serves the fetches of one connection, one after another, until the receiver closes it, sends
/// no request for the idle timeout, or a fetch fails. `peer` is the machine the requester's
/// certificate names, with TLS, and `addr` the requester's address. A denied request is logged
/// at warn the first time its address is denied, at debug after that.
pub(crate) async fn send_pieces<S: DataStream>(
    sock: S,
    shared: &Shared,
    peer: Option<MachineId>,
    addr: std::net::SocketAddr,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), AgentError> {
    let idle = shared.idle();
    let (rd, mut wr) = tokio::io::split(sock);
    let mut rd = Reader::new(rd);
    loop {
        let req = match tokio::time::timeout(idle, rd.request()).await {
            Ok(Ok(Some(req))) => req,
            // Closed between fetches, or idle: the receiver's pool no longer holds it.
            Ok(Ok(None)) | Err(_) => return Ok(()),
            Ok(Err(e)) => {
                let _ = write_within(&mut wr, &wire::encode_head(Status::BadRequest, 0), idle).await;
                tracing::debug!(error = %e, "bad data request");
                return Err(AgentError::Refused("bad request"));
            }
        };
        if let Some(t) = shared.security.token()
            && !t.matches(&req.token)
        {
            let _ = write_within(&mut wr, &wire::encode_head(Status::BadToken, 0), idle).await;
            return Err(AgentError::Refused("wrong cluster token"));
        }
        if let Err(why) = admit(shared, &req, peer) {
            let _ = write_within(&mut wr, &wire::encode_head(Status::Denied, 0), idle).await;
            let detail = format!("data request for flow {} of coflow {} denied: {why}", req.flow.0, req.coflow);
            shared.denials.refuse(addr, "data plane", coflow_proto::Refusal::NotAllowed, &detail);
            return Err(AgentError::PermissionDenied(why));
        }
        if let Some(hop) = &req.via {
            // A relay: the range comes from the hop's source and is forwarded as it arrives.
            let hop = hop.clone();
            let result = tokio::select! {
                biased;
                r = relay(&mut wr, shared, &req, &hop, &mut shutdown) => r,
                _ = rd.read_more() => Err(AgentError::ReceiverGone("closed".into())),
            };
            match result {
                Ok(()) => continue,
                Err(e) => return Err(e),
            }
        }
        let Some(piece) = shared.store.settled(req.coflow, &req.data_id, idle).await else {
            let _ = write_within(&mut wr, &wire::encode_head(Status::NoPiece, 0), idle).await;
            return Err(AgentError::Refused("no such piece"));
        };
        if req.offset.checked_add(req.length).is_none_or(|end| end > piece.len()) {
            let _ = write_within(&mut wr, &wire::encode_head(Status::BadRequest, 0), idle).await;
            return Err(AgentError::Refused("a range past the piece's end"));
        }
        tracing::debug!(target: "coflow::path", flow = req.flow.0, "request");
        if let Err(e) = write_within(&mut wr, &wire::encode_head(Status::Ok, req.length), idle).await {
            shared.attached.detach(req.ticket);
            return Err(e);
        }
        let progress = Arc::new(AtomicU64::new(0));
        shared.sending.lock().expect("sending lock").insert(req.flow, progress.clone());
        // The receiver sends nothing while a piece is on its way: a read that returns means it
        // hung up (or broke the protocol), and the piece is abandoned.
        let range = (req.offset, req.length);
        let result = tokio::select! {
            biased;
            r = pace(&mut wr, shared, &piece, range, req.flow, &progress, &mut shutdown) => r,
            _ = rd.read_more() => Err(AgentError::ReceiverGone("closed".into())),
        };
        shared.sending.lock().expect("sending lock").remove(&req.flow);
        shared.rates.remove(req.flow);
        if result.is_err() && progress.load(Ordering::Relaxed) == 0 {
            // Its connection was lost before a byte left: the receiver may ask again on another
            // (its warm connection had gone stale, or its path was down).
            shared.attached.detach(req.ticket);
        }
        match result {
            Ok(()) => {}
            Err(AgentError::DataLost(msg)) => {
                tracing::warn!(coflow = %req.coflow, data_id = %req.data_id, error = %msg, "stored piece lost");
                let mut frame = Vec::new();
                wire::encode_error(Status::DataLost, &msg, &mut frame);
                let _ = write_within(&mut wr, &frame, idle).await;
                let _ = wr.flush().await;
                return Err(AgentError::DataLost(msg));
            }
            Err(e) => {
                if matches!(e, AgentError::ReceiverStalled { .. }) {
                    // The receiver stopped reading: an honest one fails the get and reports it,
                    // but one that never reports must not keep the flow's rate.
                    tracing::debug!(flow = req.flow.0, "the receiver stopped reading; flow given up");
                    let sent = progress.load(Ordering::Relaxed);
                    shared.link.tell(crate::session::flow_end(req.flow, sent, Some(e.kind())));
                }
                return Err(e);
            }
        }
    }
}

/// Relays one fetch: asks the hop's source for the request's range on a warm connection (the
/// source checks the hop's ticket, which names this agent), and forwards its response head and
/// frames to the receiver as they arrive, every frame within the idle timeout, within this
/// machine's port capacity both ways. The receiver checks every block; the source paces them. A
/// source that cannot be reached, or that is lost or falls silent mid-transfer, is said to the
/// receiver ([`Status::Unreachable`], with why), so that it blames the source and not this relay,
/// and so is a source that refuses the hop's ticket (it registered again, losing the flow);
/// a source that says busy is said busy, and the flow may attach here again, as the receiver
/// asks again later; a receiver that goes is not told anything, nor is one whose fetch this
/// relay fails for its own reasons (it cannot open a socket), which then blames the relay.
async fn relay<W: AsyncWrite + Unpin>(
    wr: &mut W,
    shared: &Shared,
    req: &Request,
    hop: &wire::Hop,
    shutdown: &mut watch::Receiver<bool>,
) -> Result<(), AgentError> {
    let idle = shared.idle();
    let inner = Request {
        token: shared.security.token().map_or_else(Vec::new, |t| t.as_bytes().to_vec()),
        dst: MachineId(shared.config.machine_id()),
        ticket: hop.ticket,
        via: None,
        ..req.clone()
    };
    let mut bytes = Vec::with_capacity(64);
    inner.encode(&mut bytes);
    let unreachable = |reason: String| AgentError::SourceUnreachable { addr: hop.addr.clone(), reason };
    let silent = || shared.silent(&hop.addr);
    // On a warm connection the source may have closed it while idle: a fresh one then serves.
    let reached = async {
        loop {
            let (mut conn, warm) = match shared.pool.take(hop.src, &hop.addr, idle / 2) {
                Some(c) => (c, true),
                None => (connect(shared, &hop.addr, hop.src).await?, false),
            };
            let sent = tokio::time::timeout(idle, async {
                conn.io.write_all(&bytes).await?;
                conn.io.flush().await
            })
            .await
            .map_err(|_| silent())?;
            let head = match sent {
                Ok(()) => tokio::time::timeout(idle, conn.head()).await.map_err(|_| silent())?,
                Err(e) => Err(ReadError::Io(e)),
            };
            match head {
                Ok((status, size)) => return Ok((conn, status, size)),
                Err(ReadError::Io(_) | ReadError::Closed) if warm => continue,
                Err(e) => return Err(unreachable(e.to_string())),
            }
        }
    };
    let (mut conn, status, size) = match reached.await {
        // A source that refuses the hop's ticket, which the coordinator issued under its key, has
        // registered again since (its memory, and the flow with it, is gone): the source is what
        // failed, as when it refuses a receiver's own fetch.
        Ok((_, Status::Denied, _)) => {
            let e = unreachable("it refused the relayed fetch's ticket (it restarted)".into());
            say_source_lost(wr, false, &e, idle).await?;
            return Err(e);
        }
        Ok(v) => v,
        Err(e) => {
            say_source_lost(wr, false, &e, idle).await?;
            return Err(e);
        }
    };
    write_within(wr, &wire::encode_head(status, size), idle).await?;
    if status == Status::Busy {
        // No byte left: the receiver asks again later, as it would a busy source, and this
        // relay serves it then.
        shared.attached.detach(req.ticket);
        return Err(AgentError::Refused("the source is busy"));
    }
    if status != Status::Ok {
        return Err(AgentError::Refused("the source refused the relayed fetch"));
    }
    if size != req.length {
        return Err(AgentError::Corrupted(format!("the source announces {size} bytes of {}", req.length)));
    }
    let mut left = size;
    let mut frame = Vec::new();
    while left > 0 {
        let f = tokio::select! {
            f = tokio::time::timeout(idle, conn.frame(left)) => f.map_err(|_| silent()).and_then(|f| f.map_err(|e| unreachable(e.to_string()))),
            _ = shutdown.changed() => return Err(AgentError::ShuttingDown),
        };
        let f = match f {
            Ok(f) => f,
            Err(e) => {
                say_source_lost(wr, true, &e, idle).await?;
                return Err(e);
            }
        };
        frame.clear();
        match f {
            OwnedFrame::Keepalive => frame.extend_from_slice(&wire::KEEPALIVE),
            OwnedFrame::Data(buf, crc) => {
                // The relayed bytes cross this machine's port twice: in, then out.
                shared.rx_port.wait(shared, buf.len() as u64).await;
                shared.tx_port.wait(shared, buf.len() as u64).await;
                left -= buf.len() as u64;
                shared.rx_bytes.fetch_add(buf.len() as u64, Ordering::Relaxed);
                shared.tx_bytes.fetch_add(buf.len() as u64, Ordering::Relaxed);
                shared.relayed_bytes.fetch_add(buf.len() as u64, Ordering::Relaxed);
                wire::encode_data(&buf, crc, &mut frame);
            }
            OwnedFrame::Error(code, msg) => {
                let code = if code == Status::DataLost as u8 { Status::DataLost } else { Status::BadRequest };
                wire::encode_error(code, &msg, &mut frame);
                write_within(wr, &frame, idle).await?;
                return Err(AgentError::DataLost(msg));
            }
        }
        write_within(wr, &frame, idle).await?;
    }
    wr.flush().await.map_err(peer_gone)?;
    shared.pool.put(hop.src, &hop.addr, conn);
    Ok(())
}

/// Tells the receiver of a relayed fetch that the source could not be reached or was lost (`e`),
/// with why: an error frame of status [`Status::Unreachable`], after a head of that status unless
/// the source's head was already forwarded. The relay's own failures (it cannot open a socket)
/// are not said: the receiver, told nothing, finds the relay gone and blames it, so that the
/// coordinator leaves it out of that receiver's new paths.
async fn say_source_lost<W: AsyncWrite + Unpin>(
    wr: &mut W,
    head_sent: bool,
    e: &AgentError,
    idle: Duration,
) -> Result<(), AgentError> {
    // Without the source's address, which the receiver named in its request.
    let Some(why) = e.why_source_lost() else { return Ok(()) };
    let mut said = if head_sent { Vec::new() } else { wire::encode_head(Status::Unreachable, 0).to_vec() };
    wire::encode_error(Status::Unreachable, &why, &mut said);
    write_within(wr, &said, idle).await?;
    wr.flush().await.map_err(peer_gone)
}

/// Sends the range `(offset, length)` of the piece block by block at the flow's assigned rate
/// and within the port's, with keepalives while it waits.
async fn pace<W: AsyncWrite + Unpin>(
    sock: &mut W,
    shared: &Shared,
    piece: &crate::store::Piece,
    (offset, length): (u64, u64),
    flow: FlowId,
    progress: &AtomicU64,
    shutdown: &mut watch::Receiver<bool>,
) -> Result<(), AgentError> {
    let mut reader = piece.reader_range(&shared.config.data_dir, offset, length).await?;
    let block = reader.next_len().max(1) as usize;
    let mut pacer = Pacer::new(shared, flow, block);
    let idle = pacer.idle;
    let mut buf = Vec::with_capacity(block);
    let mut frame = Vec::with_capacity(block + 9);
    while reader.remaining() > 0 {
        let crc = reader.next_block(&mut buf).await?;
        let mut at = 0;
        while at < buf.len() {
            let n = pacer.grant(sock, shared, buf.len() - at, shutdown).await?;
            shared.tx_port.wait(shared, n as u64).await;
            if progress.load(Ordering::Relaxed) == 0 {
                tracing::debug!(target: "coflow::path", flow = flow.0, "first-write");
            }
            let part = &buf[at..at + n];
            // The block was checked against its stored CRC as it was read; a part of it carries
            // its own.
            let part_crc = if n == buf.len() { crc } else { crc32fast::hash(part) };
            frame.clear();
            wire::encode_data(part, part_crc, &mut frame);
            write_within(sock, &frame, idle).await?;
            pacer.last_write = Instant::now();
            at += n;
            progress.fetch_add(n as u64, Ordering::Relaxed);
            shared.tx_bytes.fetch_add(n as u64, Ordering::Relaxed);
        }
    }
    sock.flush().await.map_err(peer_gone)?;
    Ok(())
}

/// A flow's pacing: its assigned rate as the coordinator pushes it, held by a token bucket, and
/// when it last wrote (a keepalive goes out when it has waited long).
struct Pacer {
    rate_rx: watch::Receiver<f64>,
    bucket: crate::bucket::TokenBucket,
    block: usize,
    port_rate: f64,
    idle: Duration,
    keepalive: Duration,
    last_write: Instant,
    /// Whether the flow has had its first positive rate.
    started: bool,
}

impl Pacer {
    fn new(shared: &Shared, flow: FlowId, block: usize) -> Pacer {
        let idle = shared.idle();
        Pacer {
            rate_rx: shared.rates.subscribe(flow),
            bucket: crate::bucket::TokenBucket::new(0.0, burst_for(0.0, block), shared.now()),
            block,
            port_rate: shared.config.port_rate_bps,
            idle,
            keepalive: idle / 5,
            last_write: Instant::now(),
            started: false,
        }
    }

    /// Waits until the flow may send its next frame, of at most `left` bytes; returns its length.
    async fn grant<W: AsyncWrite + Unpin>(
        &mut self,
        sock: &mut W,
        shared: &Shared,
        left: usize,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<usize, AgentError> {
        loop {
            let pushed = *self.rate_rx.borrow_and_update();
            if pushed.is_infinite() {
                // Served outside the policy: as fast as the network (and the port cap) lets it.
                return Ok(left);
            }
            let assigned = pushed.min(self.port_rate);
            if assigned != self.bucket.rate() {
                self.set_rate(shared, assigned);
            }
            let n = frame_len(assigned, left);
            let wait = match self.bucket.take(shared.now(), n as u64) {
                Grant::Now => return Ok(n),
                Grant::Wait(d) => Some(Duration::from_nanos(d.0).min(Duration::from_millis(20))),
                Grant::Paused => None,
            };
            if self.last_write.elapsed() >= self.keepalive {
                write_within(sock, &wire::KEEPALIVE, self.idle).await?;
                sock.flush().await.map_err(peer_gone)?;
                self.last_write = Instant::now();
            }
            let nap = wait.unwrap_or(self.keepalive).min(self.keepalive.saturating_sub(self.last_write.elapsed()));
            tokio::select! {
                _ = tokio::time::sleep(nap) => {}
                // A rate table entry dropped under the flow leaves it at its last rate (and
                // never wakes it in a loop).
                Ok(()) = self.rate_rx.changed() => {}
                _ = shutdown.changed() => return Err(AgentError::ShuttingDown),
            }
        }
    }

    fn set_rate(&mut self, shared: &Shared, assigned: f64) {
        self.bucket.set_rate(shared.now(), assigned, burst_for(assigned, self.block));
        if !self.started && assigned > 0.0 {
            // The sender's timer has millisecond steps: a first frame that would take less than a
            // millisecond at this rate would otherwise wait a whole one. The flow starts with a
            // millisecond of credit; its average rate is unchanged.
            self.started = true;
            self.bucket.credit(shared.now(), assigned * TIMER_STEP.as_secs_f64());
        }
    }
}

/// The smallest frame a paced flow sends.
const MIN_FRAME: usize = 4 << 10;

/// The bytes of the next frame of a flow paced at `rate` bytes per second with `left` bytes of its
/// block to send: a millisecond's worth (at least [`MIN_FRAME`]), so that a slow flow's bytes
/// leave every timer step as a fluid flow's would instead of a whole block at once after the
/// block's time; the rest of the block when that is all that is left or the rate is unknown.
fn frame_len(rate: f64, left: usize) -> usize {
    if rate.is_finite() && rate > 0.0 {
        let step = (rate * TIMER_STEP.as_secs_f64()) as usize;
        step.max(MIN_FRAME).min(left)
    } else {
        left
    }
}

/// A fresh connection to the agent of `src` at `addr` (TLS when configured, checking that the
/// peer is that agent). With TLS it waits for a turn to open it ([`Shared::handshake_turn`]), at
/// most the data idle timeout, past which it fails `limit-exceeded`: the wait is this agent's.
async fn connect(shared: &Shared, addr: &str, src: MachineId) -> Result<Reader<Box<dyn DataStream>>, AgentError> {
    let _turn = match shared.security.tls() {
        None => None,
        Some(_) => Some(tokio::time::timeout(shared.idle(), shared.handshake_turn(src)).await.map_err(|_| {
            AgentError::LimitExceeded(format!(
                "this agent's {} connections being opened to the source at {addr} took longer than the data idle \
                 timeout ({} ms)",
                coflow_proto::HANDSHAKES_PER_ADDRESS,
                shared.idle().as_millis()
            ))
        })?),
    };
    let unreachable =
        |e: std::io::Error| AgentError::SourceUnreachable { addr: addr.to_string(), reason: e.to_string() };
    let target: std::net::SocketAddr = addr
        .parse()
        .map_err(|_| AgentError::SourceUnreachable { addr: addr.to_string(), reason: "not an address".into() })?;
    let socket = if target.is_ipv4() { tokio::net::TcpSocket::new_v4() } else { tokio::net::TcpSocket::new_v6() }
        .map_err(|e| out_of_sockets(e).unwrap_or_else(unreachable))?;
    socket.set_recv_buffer_size(shared.config.socket_buffer_bytes as u32).ok();
    let sock = tokio::time::timeout(Duration::from_secs(5), socket.connect(target))
        .await
        .map_err(|_| AgentError::SourceUnreachable { addr: addr.to_string(), reason: "connect timed out".into() })?
        .map_err(unreachable)?;
    sock.set_nodelay(true).ok();
    let io: Box<dyn DataStream> = match shared.security.tls() {
        None => Box::new(sock),
        Some(tls) => {
            let idle = shared.idle();
            let stream = tokio::time::timeout(idle, coflow_proto::connect_agent(tls, sock, src.0))
                .await
                .map_err(|_| shared.silent(addr))?
                .map_err(|reason| AgentError::SourceUnreachable { addr: addr.to_string(), reason })?;
            Box::new(stream)
        }
    };
    Ok(Reader::new(io))
}

/// A socket this agent could not create for want of its own resources (file descriptors, kernel
/// memory), as the limit it met, which no peer is to blame for; any other error as it came.
fn out_of_sockets(e: std::io::Error) -> Result<AgentError, std::io::Error> {
    use rustix::io::Errno;
    match Errno::from_io_error(&e) {
        Some(Errno::MFILE | Errno::NFILE) => Ok(AgentError::LimitExceeded(format!(
            "this agent's file descriptors (its file limit, `ulimit -n`, or the system's) are all in use: {e}"
        ))),
        Some(Errno::NOBUFS | Errno::NOMEM) => {
            Ok(AgentError::LimitExceeded(format!("this agent cannot create a socket for want of memory: {e}")))
        }
        _ => Err(e),
    }
}

/// Where a part's verified blocks go: the client's stream (which the client paces), or a buffer
/// held until the parts before it are done; every byte handed on is counted in `received`.
#[derive(Clone, Debug)]
pub(crate) struct Sink {
    to: To,
    /// Bytes handed on, over every sink of one get.
    pub(crate) received: Arc<AtomicU64>,
}

#[derive(Clone, Debug)]
enum To {
    /// Straight on, at the pace the next stage takes them.
    Stream(mpsc::Sender<Vec<u8>>),
    /// Kept until its turn comes, at once (in memory, then on disk).
    Spill(Arc<tokio::sync::Mutex<crate::spill::Spill>>),
}

impl Sink {
    /// Blocks go on into `tx`, at its pace.
    pub(crate) fn stream(tx: mpsc::Sender<Vec<u8>>, received: Arc<AtomicU64>) -> Sink {
        Sink { to: To::Stream(tx), received }
    }

    /// Blocks are kept in `spill` at once, counted when handed on from there.
    pub(crate) fn spill(spill: Arc<tokio::sync::Mutex<crate::spill::Spill>>) -> Sink {
        Sink { to: To::Spill(spill), received: Arc::default() }
    }

    /// Whether blocks go straight on to the next stage (rather than being kept).
    pub(crate) fn is_stream(&self) -> bool {
        matches!(self.to, To::Stream(_))
    }

    /// Hands `block` on: `ClientDeparted` if no one takes blocks any more, `LimitExceeded` if a
    /// block to keep cannot be.
    pub(crate) async fn send(&self, block: Vec<u8>) -> Result<(), AgentError> {
        let n = block.len() as u64;
        match &self.to {
            To::Stream(tx) => tx.send(block).await.map_err(|_| AgentError::ClientDeparted)?,
            To::Spill(spill) => spill.lock().await.push(block).await?,
        }
        self.received.fetch_add(n, Ordering::Relaxed);
        Ok(())
    }
}

/// One fetch: the bytes `[offset, offset + length)` of a piece as flow `flow`, from its source
/// directly or through a relay.
#[derive(Clone, Debug)]
pub(crate) struct Part {
    /// The part's flow.
    pub(crate) flow: FlowId,
    /// Its range of the piece.
    pub(crate) offset: u64,
    pub(crate) length: u64,
    /// The source, its data address and its ticket (naming the relay, if any, else this agent).
    pub(crate) src: MachineId,
    pub(crate) src_addr: String,
    pub(crate) ticket: Ticket,
    /// The relay, its data address and its ticket (naming this agent), if any.
    pub(crate) via: Option<(MachineId, String, Ticket)>,
    /// The coordinator routes around lost paths: a source that cannot be reached is a path to
    /// resume over, not a failed get.
    pub(crate) reroutable: bool,
}

impl Part {
    /// The agent asked, and its address: the relay if there is one, else the source.
    pub(crate) fn peer(&self) -> (MachineId, &str) {
        match &self.via {
            Some((m, addr, _)) => (*m, addr),
            None => (self.src, &self.src_addr),
        }
    }
}

/// The first pause before asking a source that said busy again; it doubles up to [`BUSY_PAUSE_MAX`].
const BUSY_PAUSE_FIRST: Duration = Duration::from_millis(10);
/// The longest pause between two asks of a source that says busy.
const BUSY_PAUSE_MAX: Duration = Duration::from_millis(500);

/// Fetches a part of a piece, from its source or through its relay, sending each verified block
/// to `out` as it arrives (so the piece is never buffered whole) and counting it in `received`.
/// The fetch goes on a warm connection to the agent asked if one is idle (one it closed
/// meanwhile is replaced by a fresh one, as no byte had come), and the connection is kept warm
/// after a clean end. A source that says busy (its connections, or this agent's share of them,
/// all taken) is asked again on a fresh connection after pauses from [`BUSY_PAUSE_FIRST`]
/// doubling up to [`BUSY_PAUSE_MAX`], for at most the data plane's idle timeout in all: a place
/// given back a moment later is taken, and the get fails `limit-exceeded` only if none is.
pub(crate) async fn fetch(
    shared: &Shared,
    coflow: CoflowId,
    data_id: &DataId,
    part: &Part,
    out: &Sink,
    received: &AtomicU64,
) -> Result<u64, AgentError> {
    let max_idle = shared.idle() / 2;
    let (peer, addr) = part.peer();
    let request = Request {
        token: shared.security.token().map_or_else(Vec::new, |t| t.as_bytes().to_vec()),
        coflow,
        flow: part.flow,
        dst: MachineId(shared.config.machine_id()),
        ticket: part.via.as_ref().map_or(part.ticket, |v| v.2),
        data_id: data_id.clone(),
        offset: part.offset,
        length: part.length,
        via: part.via.as_ref().map(|_| wire::Hop { src: part.src, addr: part.src_addr.clone(), ticket: part.ticket }),
    };
    // In a cluster that bounds the fetches to one peer, this one waits its turn.
    let _turn = shared.fetch_turn(peer).await;
    let (mut pause, mut waited) = (BUSY_PAUSE_FIRST, Duration::ZERO);
    loop {
        let (mut conn, warm) = match shared.pool.take(peer, addr, max_idle) {
            Some(c) => (c, true),
            None => (connect(shared, addr, peer).await?, false),
        };
        match fetch_over(&mut conn, shared, addr, &request, part.length, out, received).await {
            Ok(n) => {
                shared.pool.put(peer, addr, conn);
                return Ok(n);
            }
            Err(Fetch::Stale) if warm => continue,
            Err(Fetch::Stale) => {
                return Err(AgentError::SourceUnreachable {
                    addr: addr.to_string(),
                    reason: "closed the connection".into(),
                });
            }
            Err(Fetch::Busy(e)) => {
                // The source closes a connection it said busy on; this end goes too.
                drop(conn);
                if waited + pause > shared.idle() {
                    return Err(e);
                }
                tracing::debug!(flow = part.flow.0, %addr, ?pause, "the source is busy; asking again");
                tokio::time::sleep(pause).await;
                waited += pause;
                pause = (pause * 2).min(BUSY_PAUSE_MAX);
            }
            Err(Fetch::Failed(e)) => return Err(e),
        }
    }
}

/// How a fetch on one connection failed.
pub(crate) enum Fetch {
    /// The connection ended before the source answered: on a warm connection, the source closed
    /// it while idle, and a fresh one may serve the fetch.
    Stale,
    /// The source said busy before sending a byte: asked again later, it may serve the fetch.
    Busy(AgentError),
    /// The fetch failed.
    Failed(AgentError),
}

impl From<AgentError> for Fetch {
    fn from(e: AgentError) -> Fetch {
        Fetch::Failed(e)
    }
}

/// The receiving side of one fetch over `conn`.
pub(crate) async fn fetch_over<S: AsyncRead + AsyncWrite + Unpin>(
    conn: &mut Reader<S>,
    shared: &Shared,
    addr: &str,
    request: &Request,
    size: u64,
    out: &Sink,
    received: &AtomicU64,
) -> Result<u64, Fetch> {
    let idle = shared.idle();
    let flow = request.flow;
    // A connection lost just after this agent paused may be the source giving up on it.
    let failed = |e: ReadError| {
        let reason = match e {
            ReadError::Io(e) => e.to_string(),
            ReadError::Closed => "closed the connection".into(),
            ReadError::Wire(e) => return AgentError::Corrupted(e.to_string()),
        };
        shared.unless_paused(AgentError::SourceUnreachable { addr: addr.to_string(), reason })
    };
    let silent = || shared.silent(addr);
    // What the relay, if one is asked, says of the source it could not reach or lost: the
    // source is the peer to blame.
    let lost = |why: String| match &request.via {
        Some(hop) => AgentError::SourceUnreachable {
            addr: hop.addr.clone(),
            reason: format!("{why} (as its relay at {addr} reports)"),
        },
        None => AgentError::SourceUnreachable { addr: addr.to_string(), reason: why },
    };
    let mut req = Vec::with_capacity(64);
    request.encode(&mut req);
    let sent = tokio::time::timeout(idle, async {
        conn.io.write_all(&req).await?;
        conn.io.flush().await
    })
    .await
    .map_err(|_| silent())?;
    tracing::debug!(target: "coflow::path", flow = flow.0, "requested");
    let head = match sent {
        Ok(()) => tokio::time::timeout(idle, conn.head()).await.map_err(|_| silent())?,
        Err(e) => Err(ReadError::Io(e)),
    };
    let (status, announced) = match head {
        Ok(h) => h,
        Err(ReadError::Io(_) | ReadError::Closed) => return Err(Fetch::Stale),
        Err(e) => return Err(failed(e).into()),
    };
    match status {
        Status::Ok => {}
        Status::BadToken => return Err(AgentError::Refused("wrong cluster token").into()),
        // This agent asks only for flows the coordinator granted it, so a refused ticket is the
        // source's state, not the client's right: it restarted (a new key, its memory gone) or
        // has not yet heard the key of a coordinator that restarted. A get tried again learns
        // which (the piece, or `no-such-data`); the client is not told it may not read it.
        Status::Denied => {
            return Err(AgentError::SourceUnreachable {
                addr: addr.to_string(),
                reason: "it refused the flow's ticket: it restarted or has not yet heard the coordinator's key, \
                         or this agent's certificate is not the receiver the grant names"
                    .into(),
            }
            .into());
        }
        // The source restarted (its memory is gone) or dropped the coflow: recompute the piece.
        Status::NoPiece => {
            return Err(AgentError::DataLost("the source agent no longer holds the piece".into()).into());
        }
        Status::Busy if announced > 0 => {
            return Err(Fetch::Busy(AgentError::LimitExceeded(format!(
                "the source agent at {addr} serves max_data_connections_per_peer ({announced}) to this agent already"
            ))));
        }
        Status::Busy => {
            return Err(Fetch::Busy(AgentError::LimitExceeded(format!(
                "the source agent at {addr} serves its max_data_connections already"
            ))));
        }
        Status::BadRequest | Status::DataLost => return Err(AgentError::Refused("bad request").into()),
        Status::Unreachable => {
            let why = match tokio::time::timeout(idle, conn.frame(0)).await {
                Ok(Ok(OwnedFrame::Error(_, why))) => why,
                _ => "it could not be reached".to_string(),
            };
            return Err(lost(why).into());
        }
    }
    if announced != size {
        return Err(
            AgentError::Corrupted(format!("source announces {announced} bytes, coordinator said {size}")).into()
        );
    }
    let mut left = size;
    while left > 0 {
        // One timer per frame: a frame must arrive whole within the idle timeout.
        let frame = tokio::time::timeout(idle, conn.frame(left)).await.map_err(|_| silent())?.map_err(failed)?;
        let buf = match frame {
            OwnedFrame::Keepalive => continue,
            OwnedFrame::Data(buf, crc) => {
                if crc != crc32fast::hash(&buf) {
                    return Err(AgentError::Corrupted(format!("checksum mismatch with {left} bytes to go")).into());
                }
                buf
            }
            OwnedFrame::Error(code, msg) if code == Status::DataLost as u8 => {
                return Err(AgentError::DataLost(msg).into());
            }
            OwnedFrame::Error(code, why) if code == Status::Unreachable as u8 => return Err(lost(why).into()),
            OwnedFrame::Error(code, msg) => {
                return Err(AgentError::Corrupted(format!("unknown error frame {code}: {msg}")).into());
            }
        };
        let n = buf.len() as u64;
        if left == size {
            tracing::debug!(target: "coflow::path", flow = flow.0, "first-byte");
        }
        shared.rx_port.wait(shared, n).await;
        left -= n;
        shared.rx_bytes.fetch_add(n, Ordering::Relaxed);
        out.send(buf).await?;
        // Counted once handed on (a send is cancel-safe): a part cut here resumes from exactly
        // the bytes handed on.
        received.fetch_add(n, Ordering::Relaxed);
    }
    Ok(size)
}

#[cfg(test)]
mod tests;
