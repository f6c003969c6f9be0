//! The data plane's connections: a stream with the bytes read from it that the codec has not
//! consumed yet ([`Reader`]), and the receiving side's [`Pool`] of warm connections to other
//! agents.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use coflow_core::MachineId;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};

use crate::wire::{self, Frame, Request, Status, WireError};

/// A byte stream of the data plane: TCP, or TLS over TCP.
pub(crate) trait DataStream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> DataStream for T {}

/// The most idle connections kept per source.
const POOLED_PER_SOURCE: usize = 16;

/// One side of a connection and the bytes read from it that the codec has not consumed yet.
#[derive(Debug)]
pub(crate) struct Reader<R> {
    pub(crate) io: R,
    buf: Vec<u8>,
    pos: usize,
}

impl<R: AsyncRead + Unpin> Reader<R> {
    pub(crate) fn new(io: R) -> Reader<R> {
        Reader { io, buf: Vec::with_capacity(64 << 10), pos: 0 }
    }

    /// What is buffered and not consumed.
    fn pending(&self) -> &[u8] {
        &self.buf[self.pos..]
    }

    fn consume(&mut self, n: usize) {
        self.pos += n;
        if self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
        }
    }

    /// Reads more bytes into the buffer; 0 at the end of the stream. Cancel-safe.
    pub(crate) async fn read_more(&mut self) -> std::io::Result<usize> {
        if self.pos > 0 && self.pos >= self.buf.len() / 2 {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        self.buf.reserve(64 << 10);
        self.io.read_buf(&mut self.buf).await
    }

    /// The next request, or `None` if the peer closed the connection between requests.
    pub(crate) async fn request(&mut self) -> Result<Option<Request>, ReadError> {
        loop {
            if let Some((req, n)) = Request::decode(self.pending())? {
                self.consume(n);
                return Ok(Some(req));
            }
            if self.read_more().await? == 0 {
                return if self.pending().is_empty() { Ok(None) } else { Err(ReadError::Closed) };
            }
        }
    }

    /// A response head.
    pub(crate) async fn head(&mut self) -> Result<(Status, u64), ReadError> {
        while self.pending().len() < wire::HEAD_LEN {
            if self.read_more().await? == 0 {
                return Err(ReadError::Closed);
            }
        }
        let head: [u8; wire::HEAD_LEN] = self.pending()[..wire::HEAD_LEN].try_into().expect("checked");
        self.consume(wire::HEAD_LEN);
        Ok(wire::decode_head(&head)?)
    }

    /// The next frame of a piece with `left` bytes to go, a data frame's bytes copied out
    /// (unchecked).
    pub(crate) async fn frame(&mut self, left: u64) -> Result<OwnedFrame, ReadError> {
        loop {
            if let Some((frame, n)) = wire::decode_frame(self.pending(), left)? {
                let owned = match frame {
                    Frame::Data { bytes, crc } => OwnedFrame::Data(bytes.to_vec(), crc),
                    Frame::Keepalive => OwnedFrame::Keepalive,
                    Frame::Error { code, message } => OwnedFrame::Error(code, message),
                };
                self.consume(n);
                return Ok(owned);
            }
            if self.read_more().await? == 0 {
                return Err(ReadError::Closed);
            }
        }
    }
}

/// A frame read, owning its bytes.
pub(crate) enum OwnedFrame {
    Data(Vec<u8>, u32),
    Keepalive,
    Error(u8, String),
}

/// Why bytes could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReadError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("the connection closed")]
    Closed,
    #[error(transparent)]
    Wire(#[from] WireError),
}

/// A warm connection to a source, idle since `since`.
type Warm = (Instant, Reader<Box<dyn DataStream>>);

/// The receiving side's idle connections to other agents, by source machine and address (a
/// connection verified for one machine serves only that machine).
#[derive(Default)]
pub(crate) struct Pool {
    idle: Mutex<HashMap<(MachineId, String), Vec<Warm>>>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n: usize = self.idle.lock().map(|m| m.values().map(Vec::len).sum()).unwrap_or(0);
        f.debug_struct("Pool").field("idle", &n).finish()
    }
}

impl Pool {
    /// An idle connection to `src` at `addr` that the source will not close for a while yet
    /// (idle for less than `max_idle`); older ones are dropped.
    pub(crate) fn take(&self, src: MachineId, addr: &str, max_idle: Duration) -> Option<Reader<Box<dyn DataStream>>> {
        let mut idle = self.idle.lock().expect("pool lock");
        let list = idle.get_mut(&(src, addr.to_string()))?;
        list.retain(|(since, _)| since.elapsed() < max_idle);
        list.pop().map(|(_, c)| c)
    }

    /// Keeps a connection whose fetch ended cleanly for the next fetch from `src`.
    pub(crate) fn put(&self, src: MachineId, addr: &str, conn: Reader<Box<dyn DataStream>>) {
        let mut idle = self.idle.lock().expect("pool lock");
        let list = idle.entry((src, addr.to_string())).or_default();
        if list.len() < POOLED_PER_SOURCE {
            list.push((Instant::now(), conn));
        }
    }

    /// Idle connections held.
    pub(crate) fn len(&self) -> usize {
        self.idle.lock().expect("pool lock").values().map(Vec::len).sum()
    }
}
