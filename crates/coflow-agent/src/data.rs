//! The data plane: agents fetch pieces from each other over TCP, or with TLS over mutual TLS
//! 1.3 where the source accepts agents' certificates only and the receiver accepts only the
//! certificate of the agent the coordinator named as the source.
//!
//! Request (receiver to sender): magic `CFD1`, token length (u16) and token (empty with TLS,
//! where it is not checked), coflow id (u64),
//! flow id (u64), data id length (u16) and data id; integers big-endian.
//! Response: a status byte (0 ok, 1 wrong token, 2 no such piece, 3 bad request), the size (u64),
//! the bytes, and their CRC-32 (u32). The sender paces the bytes with the flow's token bucket
//! (the coordinator's rate) and its port's (the configured capacity).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use coflow_core::{CoflowId, FlowId, MachineId};
use coflow_proto::{DataId, MAX_DATA_ID_LEN};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use crate::bucket::{Grant, burst_for};
use crate::error::AgentError;
use crate::state::Shared;

const MAGIC: &[u8; 4] = b"CFD1";
const OK: u8 = 0;
const BAD_TOKEN: u8 = 1;
const NO_PIECE: u8 = 2;
const BAD_REQUEST: u8 = 3;

/// How long a peer may take to send its request header.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// Accepts fetches until shutdown.
pub(crate) async fn serve(listener: TcpListener, shared: Arc<Shared>, mut shutdown: watch::Receiver<bool>) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((sock, peer)) = accepted else { continue };
                let shared = shared.clone();
                let stop = shutdown.clone();
                conns.spawn(async move {
                    if let Err(e) = accept_and_send(sock, peer, &shared, stop).await {
                        tracing::debug!(%peer, error = %e, "fetch ended early");
                    }
                });
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            _ = shutdown.changed() => break,
        }
    }
    conns.shutdown().await;
}

/// Sends a piece on an accepted connection, after the TLS handshake in TLS mode.
async fn accept_and_send(
    sock: TcpStream,
    peer: std::net::SocketAddr,
    shared: &Shared,
    shutdown: watch::Receiver<bool>,
) -> Result<(), AgentError> {
    sock.set_nodelay(true).ok();
    socket2::SockRef::from(&sock).set_send_buffer_size(shared.config.socket_buffer_bytes).ok();
    match shared.security.tls() {
        None => send_piece(sock, shared, shutdown).await,
        Some(tls) => match coflow_proto::accept_agent(tls, sock, peer).await {
            Some((stream, _)) => send_piece(stream, shared, shutdown).await,
            None => Err(AgentError::Refused("not an agent of this cluster")),
        },
    }
}

struct Header {
    coflow: CoflowId,
    flow: FlowId,
    data_id: DataId,
}

async fn read_header<S: AsyncRead + Unpin>(sock: &mut BufReader<S>, shared: &Shared) -> Result<Header, u8> {
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

async fn send_piece<S: AsyncRead + AsyncWrite + Unpin>(
    sock: S,
    shared: &Shared,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), AgentError> {
    let mut sock = BufReader::new(sock);
    let header = match tokio::time::timeout(HEADER_TIMEOUT, read_header(&mut sock, shared)).await {
        Ok(Ok(h)) => h,
        Ok(Err(code)) => {
            let _ = sock.get_mut().write_all(&[code, 0, 0, 0, 0, 0, 0, 0, 0]).await;
            return Err(AgentError::Refused(if code == BAD_TOKEN { "wrong cluster token" } else { "bad request" }));
        }
        Err(_) => return Err(AgentError::Refused("header timeout")),
    };
    let Some(piece) = shared.store.get(header.coflow, &header.data_id) else {
        let _ = sock.get_mut().write_all(&[NO_PIECE, 0, 0, 0, 0, 0, 0, 0, 0]).await;
        return Err(AgentError::Refused("no such piece"));
    };
    let mut sock = sock.into_inner();
    let size = piece.len();
    let mut head = [0u8; 9];
    head[0] = OK;
    head[1..].copy_from_slice(&size.to_be_bytes());
    sock.write_all(&head).await.map_err(|e| unreachable_peer("receiver", e))?;

    let progress = Arc::new(AtomicU64::new(0));
    shared.sending.lock().expect("sending lock").insert(header.flow, progress.clone());
    let result = pace(&mut sock, shared, &piece, header.flow, &progress, &mut shutdown).await;
    shared.sending.lock().expect("sending lock").remove(&header.flow);
    shared.rates.remove(header.flow);
    result
}

fn unreachable_peer(who: &str, e: std::io::Error) -> AgentError {
    AgentError::SourceUnreachable { addr: who.to_string(), reason: e.to_string() }
}

/// Sends the piece's bytes and checksum at the flow's assigned rate and within the port's.
async fn pace<S: AsyncWrite + Unpin>(
    sock: &mut S,
    shared: &Shared,
    piece: &crate::store::Piece,
    flow: FlowId,
    progress: &AtomicU64,
    shutdown: &mut watch::Receiver<bool>,
) -> Result<(), AgentError> {
    let chunk = shared.config.chunk_bytes;
    let port_rate = shared.config.port_rate_bps;
    let mut rate_rx = shared.rates.subscribe(flow);
    let mut bucket = crate::bucket::TokenBucket::new(0.0, burst_for(0.0, chunk), shared.now());
    let mut reader = piece.reader().await?;
    let mut buf = Vec::with_capacity(chunk);
    let mut crc = crc32fast::Hasher::new();
    let mut left = piece.len();
    while left > 0 {
        let n = (chunk as u64).min(left);
        loop {
            let assigned = (*rate_rx.borrow_and_update()).min(port_rate);
            if assigned != bucket.rate() {
                bucket.set_rate(shared.now(), assigned, burst_for(assigned, chunk));
            }
            match bucket.take(shared.now(), n) {
                Grant::Now => break,
                Grant::Wait(d) => {
                    let d = Duration::from_nanos(d.0).min(Duration::from_millis(20));
                    tokio::select! {
                        _ = tokio::time::sleep(d) => {}
                        _ = rate_rx.changed() => {}
                        _ = shutdown.changed() => return Err(AgentError::ShuttingDown),
                    }
                }
                Grant::Paused => {
                    tokio::select! {
                        _ = rate_rx.changed() => {}
                        _ = shutdown.changed() => return Err(AgentError::ShuttingDown),
                    }
                }
            }
        }
        shared.tx_port.wait(shared, n).await;
        let k = reader.next(&mut buf, n as usize).await?;
        crc.update(&buf[..k]);
        sock.write_all(&buf[..k]).await.map_err(|e| unreachable_peer("receiver", e))?;
        left -= k as u64;
        progress.fetch_add(k as u64, Ordering::Relaxed);
        shared.tx_bytes.fetch_add(k as u64, Ordering::Relaxed);
    }
    sock.write_all(&crc.finalize().to_be_bytes()).await.map_err(|e| unreachable_peer("receiver", e))?;
    sock.flush().await.map_err(|e| unreachable_peer("receiver", e))?;
    Ok(())
}

/// Fetches a piece from the agent at `addr`, sending each chunk to `out` as it arrives (so the
/// piece is never buffered whole) and checking size and checksum.
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
        None => fetch_over(sock, shared, addr, coflow, flow, data_id, size, out).await,
        Some(tls) => {
            let sock = coflow_proto::connect_agent(tls, sock, src.0)
                .await
                .map_err(|reason| AgentError::SourceUnreachable { addr: addr.to_string(), reason })?;
            fetch_over(sock, shared, addr, coflow, flow, data_id, size, out).await
        }
    }
}

/// The fetch on an established connection.
#[allow(clippy::too_many_arguments)]
async fn fetch_over<S: AsyncRead + AsyncWrite + Unpin>(
    sock: S,
    shared: &Shared,
    addr: &str,
    coflow: CoflowId,
    flow: FlowId,
    data_id: &DataId,
    size: u64,
    out: &mpsc::Sender<Vec<u8>>,
) -> Result<u64, AgentError> {
    let unreachable =
        |e: std::io::Error| AgentError::SourceUnreachable { addr: addr.to_string(), reason: e.to_string() };
    let mut sock = BufReader::with_capacity(64 << 10, sock);
    let token = shared.security.token().map_or(&[][..], |t| t.as_bytes());
    let mut req = Vec::with_capacity(32 + token.len() + data_id.as_str().len());
    req.extend_from_slice(MAGIC);
    req.extend_from_slice(&(token.len() as u16).to_be_bytes());
    req.extend_from_slice(token);
    req.extend_from_slice(&coflow.0.to_be_bytes());
    req.extend_from_slice(&flow.0.to_be_bytes());
    req.extend_from_slice(&(data_id.as_str().len() as u16).to_be_bytes());
    req.extend_from_slice(data_id.as_str().as_bytes());
    sock.get_mut().write_all(&req).await.map_err(unreachable)?;
    sock.get_mut().flush().await.map_err(unreachable)?;
    let status = sock.read_u8().await.map_err(unreachable)?;
    let announced = sock.read_u64().await.map_err(unreachable)?;
    match status {
        OK => {}
        BAD_TOKEN => return Err(AgentError::Refused("wrong cluster token")),
        NO_PIECE => return Err(AgentError::Refused("the source agent no longer holds the piece")),
        _ => return Err(AgentError::Refused("bad request")),
    }
    if announced != size {
        return Err(AgentError::Corrupted(format!("source announces {announced} bytes, coordinator said {size}")));
    }
    let chunk = shared.config.chunk_bytes;
    let mut crc = crc32fast::Hasher::new();
    let mut left = size;
    while left > 0 {
        let n = (chunk as u64).min(left) as usize;
        let mut buf = vec![0u8; n];
        let k = sock.read(&mut buf).await.map_err(unreachable)?;
        if k == 0 {
            return Err(AgentError::SourceUnreachable {
                addr: addr.to_string(),
                reason: format!("connection closed with {left} bytes to go"),
            });
        }
        buf.truncate(k);
        shared.rx_port.wait(shared, k as u64).await;
        crc.update(&buf);
        left -= k as u64;
        shared.rx_bytes.fetch_add(k as u64, Ordering::Relaxed);
        if out.send(buf).await.is_err() {
            return Err(AgentError::ShuttingDown);
        }
    }
    let sum = sock.read_u32().await.map_err(unreachable)?;
    if sum != crc.finalize() {
        return Err(AgentError::Corrupted("checksum mismatch".into()));
    }
    Ok(size)
}
