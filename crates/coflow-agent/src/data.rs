//! The data plane: agents fetch pieces from each other over TCP, or with TLS over mutual TLS
//! 1.3 where the source accepts agents' certificates only and the receiver accepts only the
//! certificate of the agent the coordinator named as the source.
//!
//! Request (receiver to sender): magic `CFD2`, token length (u16) and token (empty with TLS,
//! where it is not checked), coflow id (u64),
//! flow id (u64), data id length (u16) and data id; integers big-endian.
//! Response: a status byte (0 ok, 1 wrong token, 2 no such piece, 3 bad request, 4 busy: the
//! source's `max_data_connections` is reached) and the size (u64); then, after ok, frames:
//! - `D`, length (u32), that many bytes, their CRC-32 (u32): one block of the piece, checked at
//!   the source against the CRC fixed at put and by the receiver before it hands the bytes on;
//! - `K`: a keepalive, sent while the flow waits (rate zero, or tokens), so that silence means
//!   a frozen source;
//! - `E`, a code (u8: 5 data lost) and a message (u16 length, UTF-8): the source's stored copy
//!   changed or cannot be read, and the transfer ends.
//!
//! The sender paces the blocks with the flow's token bucket (the coordinator's rate) and its
//! port's (the configured capacity). Either side closes a connection on which nothing moves for
//! `data_idle_timeout_ms`; the sender also stops at once when the receiver hangs up.
//! Both directions are generic over `AsyncRead + AsyncWrite`, so the sockets may be wrapped.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use coflow_core::{CoflowId, FlowId, MachineId};
use coflow_proto::{DataId, MAX_DATA_ID_LEN};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::task::JoinSet;

use crate::bucket::{Grant, burst_for};
use crate::error::AgentError;
use crate::state::Shared;

const MAGIC: &[u8; 4] = b"CFD2";
const OK: u8 = 0;
const BAD_TOKEN: u8 = 1;
const NO_PIECE: u8 = 2;
const BAD_REQUEST: u8 = 3;
const BUSY: u8 = 4;
const DATA_LOST: u8 = 5;

const FRAME_DATA: u8 = b'D';
const FRAME_KEEPALIVE: u8 = b'K';
const FRAME_ERROR: u8 = b'E';

/// The largest data frame accepted (the largest `chunk_bytes`).
const MAX_FRAME: u32 = 4 << 20;

/// Accepts fetches until shutdown, at most `max_data_connections` at once.
pub(crate) async fn serve(listener: TcpListener, shared: Arc<Shared>, mut shutdown: watch::Receiver<bool>) {
    let mut conns = JoinSet::new();
    let slots = Arc::new(Semaphore::new(shared.config.max_data_connections));
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((sock, peer)) = accepted else { continue };
                sock.set_nodelay(true).ok();
                socket2::SockRef::from(&sock).set_send_buffer_size(shared.config.socket_buffer_bytes).ok();
                let shared = shared.clone();
                let stop = shutdown.clone();
                match slots.clone().try_acquire_owned() {
                    Ok(slot) => {
                        conns.spawn(async move {
                            shared.data_connections.fetch_add(1, Ordering::Relaxed);
                            if let Err(e) = accept_and_send(sock, peer, &shared, stop).await {
                                tracing::debug!(%peer, error = %e, "fetch ended early");
                            }
                            shared.data_connections.fetch_sub(1, Ordering::Relaxed);
                            drop(slot);
                        });
                    }
                    Err(_) => {
                        tracing::debug!(%peer, "data connection refused: max_data_connections reached");
                        conns.spawn(async move { refuse_busy(sock, peer, &shared).await });
                    }
                }
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            _ = shutdown.changed() => break,
        }
    }
    conns.shutdown().await;
}

/// Says "busy" and drains what the peer sent for a moment, so that it reads the status rather
/// than a reset.
async fn refuse_busy(sock: TcpStream, peer: std::net::SocketAddr, shared: &Shared) {
    match shared.security.tls() {
        None => say_busy(sock).await,
        Some(tls) => {
            if let Ok(Some((stream, _))) =
                tokio::time::timeout(shared.idle(), coflow_proto::accept_agent(tls, sock, peer)).await
            {
                say_busy(stream).await;
            }
        }
    }
}

async fn say_busy<S: AsyncRead + AsyncWrite + Unpin>(mut sock: S) {
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        sock.write_all(&[BUSY, 0, 0, 0, 0, 0, 0, 0, 0]).await?;
        sock.shutdown().await?;
        let mut sink = [0u8; 1024];
        while sock.read(&mut sink).await? > 0 {}
        Ok::<_, std::io::Error>(())
    })
    .await;
}

/// Sends a piece on an accepted connection, after the TLS handshake in TLS mode (which, like
/// every read, waits at most the idle timeout).
async fn accept_and_send(
    sock: TcpStream,
    peer: std::net::SocketAddr,
    shared: &Shared,
    shutdown: watch::Receiver<bool>,
) -> Result<(), AgentError> {
    match shared.security.tls() {
        None => send_piece(sock, shared, shutdown).await,
        Some(tls) => match tokio::time::timeout(shared.idle(), coflow_proto::accept_agent(tls, sock, peer)).await {
            Ok(Some((stream, _))) => send_piece(stream, shared, shutdown).await,
            Ok(None) => Err(AgentError::Refused("not an agent of this cluster")),
            Err(_) => Err(AgentError::Refused("no TLS handshake within the idle timeout")),
        },
    }
}

struct Header {
    coflow: CoflowId,
    flow: FlowId,
    data_id: DataId,
}

async fn read_header<S: AsyncRead + Unpin>(sock: &mut S, shared: &Shared) -> Result<Header, u8> {
    let mut magic = [0u8; 4];
    sock.read_exact(&mut magic).await.map_err(|_| BAD_REQUEST)?;
    if &magic != MAGIC {
        return Err(BAD_REQUEST);
    }
    let tlen = sock.read_u16().await.map_err(|_| BAD_REQUEST)? as usize;
    if tlen > 512 {
        return Err(BAD_REQUEST);
    }
    let mut token = vec![0u8; tlen];
    sock.read_exact(&mut token).await.map_err(|_| BAD_REQUEST)?;
    if let Some(t) = shared.security.token()
        && !t.matches(&token)
    {
        return Err(BAD_TOKEN);
    }
    let coflow = CoflowId(sock.read_u64().await.map_err(|_| BAD_REQUEST)?);
    let flow = FlowId(sock.read_u64().await.map_err(|_| BAD_REQUEST)?);
    let dlen = sock.read_u16().await.map_err(|_| BAD_REQUEST)? as usize;
    if dlen > MAX_DATA_ID_LEN {
        return Err(BAD_REQUEST);
    }
    let mut id = vec![0u8; dlen];
    sock.read_exact(&mut id).await.map_err(|_| BAD_REQUEST)?;
    let id = String::from_utf8(id).map_err(|_| BAD_REQUEST)?;
    let data_id = DataId::new(id).map_err(|_| BAD_REQUEST)?;
    Ok(Header { coflow, flow, data_id })
}

fn peer_gone(e: std::io::Error) -> AgentError {
    AgentError::SourceUnreachable { addr: "receiver".into(), reason: e.to_string() }
}

/// Writes `bytes` within the idle timeout.
async fn write_within<W: AsyncWrite + Unpin>(w: &mut W, bytes: &[u8], idle: Duration) -> Result<(), AgentError> {
    match tokio::time::timeout(idle, w.write_all(bytes)).await {
        Ok(r) => r.map_err(peer_gone),
        Err(_) => Err(AgentError::SourceUnreachable { addr: "receiver".into(), reason: "stopped reading".into() }),
    }
}

/// Serves one fetch on `sock`.
pub(crate) async fn send_piece<S>(
    sock: S,
    shared: &Shared,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), AgentError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let idle = shared.idle();
    let mut sock = BufReader::new(sock);
    let header = match tokio::time::timeout(idle, read_header(&mut sock, shared)).await {
        Ok(Ok(h)) => h,
        Ok(Err(code)) => {
            let _ = write_within(&mut sock, &[code, 0, 0, 0, 0, 0, 0, 0, 0], idle).await;
            return Err(AgentError::Refused(if code == BAD_TOKEN { "wrong cluster token" } else { "bad request" }));
        }
        Err(_) => return Err(AgentError::Refused("header timeout")),
    };
    let Some(piece) = shared.store.get(header.coflow, &header.data_id) else {
        let _ = write_within(&mut sock, &[NO_PIECE, 0, 0, 0, 0, 0, 0, 0, 0], idle).await;
        return Err(AgentError::Refused("no such piece"));
    };
    let mut head = [0u8; 9];
    head[0] = OK;
    head[1..].copy_from_slice(&piece.len().to_be_bytes());
    write_within(&mut sock, &head, idle).await?;

    let (mut rd, mut wr) = tokio::io::split(sock);
    // The receiver sends nothing after its request: a read that returns means it hung up.
    let hung_up = async move {
        let mut b = [0u8; 1];
        let _ = rd.read(&mut b).await;
    };
    let progress = Arc::new(AtomicU64::new(0));
    shared.sending.lock().expect("sending lock").insert(header.flow, progress.clone());
    let result = tokio::select! {
        r = pace(&mut wr, shared, &piece, header.flow, &progress, &mut shutdown) => r,
        _ = hung_up => Err(AgentError::SourceUnreachable { addr: "receiver".into(), reason: "hung up".into() }),
    };
    shared.sending.lock().expect("sending lock").remove(&header.flow);
    shared.rates.remove(header.flow);
    if let Err(AgentError::DataLost(msg)) = &result {
        tracing::warn!(coflow = %header.coflow, data_id = %header.data_id, error = %msg, "stored piece lost");
        let msg = &msg.as_bytes()[..msg.len().min(1024)];
        let mut frame = vec![FRAME_ERROR, DATA_LOST];
        frame.extend_from_slice(&(msg.len() as u16).to_be_bytes());
        frame.extend_from_slice(msg);
        let _ = write_within(&mut wr, &frame, idle).await;
        let _ = wr.flush().await;
    }
    result
}

/// Sends the piece's blocks at the flow's assigned rate and within the port's, with keepalives
/// while it waits.
async fn pace<W: AsyncWrite + Unpin>(
    sock: &mut W,
    shared: &Shared,
    piece: &crate::store::Piece,
    flow: FlowId,
    progress: &AtomicU64,
    shutdown: &mut watch::Receiver<bool>,
) -> Result<(), AgentError> {
    let idle = shared.idle();
    let keepalive = idle / 5;
    let port_rate = shared.config.port_rate_bps;
    let mut reader = piece.reader(&shared.config.data_dir).await?;
    let block = reader.next_len().max(1) as usize;
    let mut rate_rx = shared.rates.subscribe(flow);
    let mut bucket = crate::bucket::TokenBucket::new(0.0, burst_for(0.0, block), shared.now());
    let mut buf = Vec::with_capacity(block);
    let mut frame = Vec::with_capacity(block + 9);
    let mut last_write = Instant::now();
    while reader.remaining() > 0 {
        let n = reader.next_len();
        loop {
            let assigned = (*rate_rx.borrow_and_update()).min(port_rate);
            if !shared.config.cap_port && assigned >= port_rate {
                // The whole port, on a network that enforces it: as fast as the network lets it.
                break;
            }
            if assigned != bucket.rate() {
                bucket.set_rate(shared.now(), assigned, burst_for(assigned, block));
            }
            let wait = match bucket.take(shared.now(), n) {
                Grant::Now => break,
                Grant::Wait(d) => Some(Duration::from_nanos(d.0).min(Duration::from_millis(20))),
                Grant::Paused => None,
            };
            if last_write.elapsed() >= keepalive {
                write_within(sock, &[FRAME_KEEPALIVE], idle).await?;
                sock.flush().await.map_err(peer_gone)?;
                last_write = Instant::now();
            }
            let nap = wait.unwrap_or(keepalive).min(keepalive.saturating_sub(last_write.elapsed()));
            tokio::select! {
                _ = tokio::time::sleep(nap) => {}
                _ = rate_rx.changed() => {}
                _ = shutdown.changed() => return Err(AgentError::ShuttingDown),
            }
        }
        shared.tx_port.wait(shared, n).await;
        let crc = reader.next_block(&mut buf).await?;
        frame.clear();
        frame.push(FRAME_DATA);
        frame.extend_from_slice(&(buf.len() as u32).to_be_bytes());
        frame.extend_from_slice(&buf);
        frame.extend_from_slice(&crc.to_be_bytes());
        write_within(sock, &frame, idle).await?;
        last_write = Instant::now();
        progress.fetch_add(buf.len() as u64, Ordering::Relaxed);
        shared.tx_bytes.fetch_add(buf.len() as u64, Ordering::Relaxed);
    }
    sock.flush().await.map_err(peer_gone)?;
    Ok(())
}

/// Fetches a piece from the agent at `addr`, sending each verified block to `out` as it arrives
/// (so the piece is never buffered whole) and counting it in `received`.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn fetch(
    shared: &Shared,
    addr: &str,
    src: MachineId,
    coflow: CoflowId,
    flow: FlowId,
    data_id: &DataId,
    size: u64,
    out: &mpsc::Sender<Vec<u8>>,
    received: &AtomicU64,
) -> Result<u64, AgentError> {
    let unreachable =
        |e: std::io::Error| AgentError::SourceUnreachable { addr: addr.to_string(), reason: e.to_string() };
    let target: std::net::SocketAddr = addr
        .parse()
        .map_err(|_| AgentError::SourceUnreachable { addr: addr.to_string(), reason: "not an address".into() })?;
    let socket = if target.is_ipv4() { tokio::net::TcpSocket::new_v4() } else { tokio::net::TcpSocket::new_v6() }
        .map_err(unreachable)?;
    socket.set_recv_buffer_size(shared.config.socket_buffer_bytes as u32).ok();
    let sock = tokio::time::timeout(Duration::from_secs(5), socket.connect(target))
        .await
        .map_err(|_| AgentError::SourceUnreachable { addr: addr.to_string(), reason: "connect timed out".into() })?
        .map_err(unreachable)?;
    sock.set_nodelay(true).ok();
    match shared.security.tls() {
        None => {
            fetch_over(
                BufReader::with_capacity(64 << 10, sock),
                shared,
                addr,
                coflow,
                flow,
                data_id,
                size,
                out,
                received,
            )
            .await
        }
        Some(tls) => {
            let idle = shared.idle();
            let sock = tokio::time::timeout(idle, coflow_proto::connect_agent(tls, sock, src.0))
                .await
                .map_err(|_| AgentError::SourceSilent { addr: addr.to_string(), secs: idle.as_secs_f64() })?
                .map_err(|reason| AgentError::SourceUnreachable { addr: addr.to_string(), reason })?;
            let sock = BufReader::with_capacity(64 << 10, sock);
            fetch_over(sock, shared, addr, coflow, flow, data_id, size, out, received).await
        }
    }
}

enum Frame {
    Keepalive,
    /// A block whose checksum matched.
    Data(Vec<u8>),
    /// The source said the data is lost, or the frame is malformed or corrupted.
    Failed(AgentError),
}

/// Reads one frame, checking a data block's checksum before anyone sees it.
async fn read_frame<S: AsyncRead + Unpin>(sock: &mut S, left: u64) -> std::io::Result<Frame> {
    Ok(match sock.read_u8().await? {
        FRAME_KEEPALIVE => Frame::Keepalive,
        FRAME_ERROR => {
            let code = sock.read_u8().await?;
            let len = sock.read_u16().await? as usize;
            let mut msg = vec![0u8; len];
            sock.read_exact(&mut msg).await?;
            let msg = String::from_utf8_lossy(&msg).into_owned();
            Frame::Failed(if code == DATA_LOST {
                AgentError::DataLost(msg)
            } else {
                AgentError::Corrupted(format!("unknown error frame {code}: {msg}"))
            })
        }
        FRAME_DATA => {
            let n = sock.read_u32().await?;
            if n == 0 || n > MAX_FRAME || u64::from(n) > left {
                return Ok(Frame::Failed(AgentError::Corrupted(format!("a frame of {n} bytes with {left} to go"))));
            }
            let mut buf = vec![0u8; n as usize];
            sock.read_exact(&mut buf).await?;
            let sum = sock.read_u32().await?;
            if sum != crc32fast::hash(&buf) {
                return Ok(Frame::Failed(AgentError::Corrupted(format!("checksum mismatch with {left} bytes to go"))));
            }
            Frame::Data(buf)
        }
        other => Frame::Failed(AgentError::Corrupted(format!("unknown frame type {other}"))),
    })
}

/// The receiving side of the protocol over any stream.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn fetch_over<S: AsyncRead + AsyncWrite + Unpin>(
    mut sock: S,
    shared: &Shared,
    addr: &str,
    coflow: CoflowId,
    flow: FlowId,
    data_id: &DataId,
    size: u64,
    out: &mpsc::Sender<Vec<u8>>,
    received: &AtomicU64,
) -> Result<u64, AgentError> {
    let idle = shared.idle();
    let unreachable =
        |e: std::io::Error| AgentError::SourceUnreachable { addr: addr.to_string(), reason: e.to_string() };
    let silent = || AgentError::SourceSilent { addr: addr.to_string(), secs: idle.as_secs_f64() };
    // Every read waits at most the idle timeout.
    macro_rules! within {
        ($e:expr) => {
            tokio::time::timeout(idle, $e).await.map_err(|_| silent())?.map_err(unreachable)?
        };
    }
    let token = shared.security.token().map_or(&[][..], |t| t.as_bytes());
    let mut req = Vec::with_capacity(32 + token.len() + data_id.as_str().len());
    req.extend_from_slice(MAGIC);
    req.extend_from_slice(&(token.len() as u16).to_be_bytes());
    req.extend_from_slice(token);
    req.extend_from_slice(&coflow.0.to_be_bytes());
    req.extend_from_slice(&flow.0.to_be_bytes());
    req.extend_from_slice(&(data_id.as_str().len() as u16).to_be_bytes());
    req.extend_from_slice(data_id.as_str().as_bytes());
    within!(sock.write_all(&req));
    within!(sock.flush());
    let status = within!(sock.read_u8());
    let announced = within!(sock.read_u64());
    match status {
        OK => {}
        BAD_TOKEN => return Err(AgentError::Refused("wrong cluster token")),
        // The source restarted (its memory is gone) or dropped the coflow: recompute the piece.
        NO_PIECE => return Err(AgentError::DataLost("the source agent no longer holds the piece".into())),
        BUSY => {
            return Err(AgentError::LimitExceeded(format!(
                "the source agent at {addr} serves its max_data_connections already"
            )));
        }
        _ => return Err(AgentError::Refused("bad request")),
    }
    if announced != size {
        return Err(AgentError::Corrupted(format!("source announces {announced} bytes, coordinator said {size}")));
    }
    let mut left = size;
    while left > 0 {
        // One timer per frame: a frame must arrive whole within the idle timeout.
        let frame = tokio::time::timeout(idle, read_frame(&mut sock, left)).await.map_err(|_| silent())?;
        let buf = match frame.map_err(unreachable)? {
            Frame::Keepalive => continue,
            Frame::Data(buf) => buf,
            Frame::Failed(e) => return Err(e),
        };
        let n = buf.len() as u64;
        shared.rx_port.wait(shared, n).await;
        left -= n;
        shared.rx_bytes.fetch_add(n, Ordering::Relaxed);
        received.fetch_add(n, Ordering::Relaxed);
        if out.send(buf).await.is_err() {
            return Err(AgentError::ClientDeparted);
        }
    }
    Ok(size)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::AgentConfig;
    use crate::store::Piece;
    use coflow_proto::{ClusterToken, Security, TokenAttach};

    fn shared(chunk: usize) -> Arc<Shared> {
        let token = ClusterToken::new("data-test").unwrap();
        let channel = tonic::transport::Endpoint::from_static("http://127.0.0.1:9").connect_lazy();
        let coordinator = coflow_proto::pb::coordinator_client::CoordinatorClient::with_interceptor(
            channel,
            TokenAttach::new(Some(token.clone())),
        );
        let config = AgentConfig { chunk_bytes: chunk, data_idle_timeout_ms: 500, ..AgentConfig::default() };
        Arc::new(Shared::new(config, Security::Token(token), coordinator))
    }

    fn bytes(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 31 % 251) as u8).collect()
    }

    fn frame(block: &[u8], crc: u32) -> Vec<u8> {
        let mut f = vec![FRAME_DATA];
        f.extend_from_slice(&(block.len() as u32).to_be_bytes());
        f.extend_from_slice(block);
        f.extend_from_slice(&crc.to_be_bytes());
        f
    }

    /// Runs `fetch_over` against a peer that answers `response`; returns what reached the
    /// client and how the fetch ended.
    async fn fetch_against(response: Vec<u8>, size: u64) -> (Vec<Vec<u8>>, Result<u64, AgentError>) {
        let s = shared(1024);
        let (near, mut far) = tokio::io::duplex(1 << 20);
        let peer = tokio::spawn(async move {
            let mut req = [0u8; 64];
            let _ = far.read(&mut req).await;
            far.write_all(&response).await.unwrap();
            // Then silence, with the connection open.
            tokio::time::sleep(Duration::from_secs(5)).await;
        });
        let (tx, mut rx) = mpsc::channel(64);
        let id = DataId::new("p").unwrap();
        let r = fetch_over(near, &s, "peer", CoflowId(1), FlowId(1), &id, size, &tx, &AtomicU64::new(0)).await;
        drop(tx);
        let mut got = Vec::new();
        while let Some(c) = rx.recv().await {
            got.push(c);
        }
        peer.abort();
        (got, r)
    }

    fn ok_head(size: u64) -> Vec<u8> {
        let mut h = vec![OK];
        h.extend_from_slice(&size.to_be_bytes());
        h
    }

    /// A block that fails its checksum never reaches the client: it holds the verified prefix
    /// and the fetch fails `Corrupted`.
    #[tokio::test]
    async fn a_corrupted_block_is_caught_before_the_client_sees_it() {
        let b = bytes(2048);
        let mut resp = ok_head(2048);
        resp.extend(frame(&b[..1024], crc32fast::hash(&b[..1024])));
        resp.push(FRAME_KEEPALIVE);
        let mut bad = b[1024..].to_vec();
        bad[7] ^= 1;
        resp.extend(frame(&bad, crc32fast::hash(&b[1024..])));
        let (got, r) = fetch_against(resp, 2048).await;
        assert!(matches!(r, Err(AgentError::Corrupted(_))), "{r:?}");
        assert_eq!(got, vec![b[..1024].to_vec()]);
    }

    #[tokio::test]
    async fn an_error_frame_is_data_lost_and_silence_is_a_timeout() {
        let mut resp = ok_head(2048);
        resp.extend([FRAME_ERROR, DATA_LOST, 0, 4]);
        resp.extend(b"gone");
        let (_, r) = fetch_against(resp, 2048).await;
        assert!(matches!(&r, Err(AgentError::DataLost(m)) if m == "gone"), "{r:?}");
        let t = Instant::now();
        let (_, r) = fetch_against(ok_head(2048), 2048).await;
        assert!(matches!(r, Err(AgentError::SourceSilent { .. })), "{r:?}");
        assert!(t.elapsed() >= Duration::from_millis(450) && t.elapsed() < Duration::from_secs(3));
    }

    /// Sender and receiver over an in-memory stream: the bytes arrive exactly, block by block.
    /// A source that no longer holds the piece (it restarted and lost its memory, which with
    /// sessions it reaches while the coordinator still names it) is data lost, to recompute, not
    /// a refusal the SDK would report as a credentials problem.
    #[tokio::test]
    async fn a_source_without_the_piece_is_data_lost() {
        let (got, r) = fetch_against(vec![NO_PIECE, 0, 0, 0, 0, 0, 0, 0, 0], 2048).await;
        assert!(got.is_empty());
        let e = r.unwrap_err();
        assert!(matches!(&e, AgentError::DataLost(m) if m.contains("no longer holds")), "{e}");
        assert_eq!(e.reason(), "data-lost");
    }

    /// An agent without a session tells its clients to retry, as `agent-unreachable`.
    #[test]
    fn not_registered_is_retryable() {
        let s = tonic::Status::from(AgentError::NotRegistered);
        assert_eq!(s.code(), tonic::Code::Unavailable);
        assert_eq!(s.metadata().get(crate::error::ERROR_KIND).unwrap().to_str().unwrap(), "agent-unreachable");
    }

    #[tokio::test]
    async fn a_piece_crosses_any_stream_exactly() {
        let s = shared(1024);
        let b = bytes(5000);
        s.store.insert(CoflowId(1), DataId::new("p").unwrap(), Piece::memory(b.clone(), 1024)).unwrap();
        s.rates.set(FlowId(1), 1e9);
        let (near, far) = tokio::io::duplex(4096);
        let (stop_tx, stop) = watch::channel(false);
        let sender = {
            let s = s.clone();
            tokio::spawn(async move { send_piece(far, &s, stop).await })
        };
        let (tx, mut rx) = mpsc::channel(64);
        let id = DataId::new("p").unwrap();
        let n = fetch_over(near, &s, "peer", CoflowId(1), FlowId(1), &id, 5000, &tx, &AtomicU64::new(0)).await;
        assert_eq!(n.unwrap(), 5000);
        drop(tx);
        let mut got = Vec::new();
        while let Some(c) = rx.recv().await {
            assert!(c.len() <= 1024);
            got.extend(c);
        }
        assert_eq!(got, b);
        sender.await.unwrap().unwrap();
        drop(stop_tx);
    }
}
