//! The pieces an agent holds: bytes in memory, or a segment of a file under the data directory
//! (a map task writes one file with every reducer's piece and may exit: time-decoupled).
//! A piece stays until its coflow is unregistered, so several gets (stages) may read it.
//!
//! A piece's content is fixed at put: a CRC-32 of every block (the agent's `chunk_bytes`) is
//! computed then, over the bytes or over the file segment as it was, and every block is checked
//! against it when it is read, before it leaves the agent. A file segment is opened, at put and
//! again at every read, relative to the data directory without following a link at any step
//! (`openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`, or one `openat` per component with
//! `O_NOFOLLOW` where the kernel has no `openat2`), non-blocking, and only a regular file is
//! read: a path that meets a symlink anywhere, even one swapped in while it is opened, is
//! refused, and a FIFO or device is refused at once rather than blocking a thread. At a read the
//! opened file must be the very file (device and inode) checked at put, so a file replaced by a
//! symlink, renamed over, changed, truncated or removed is `DataLost`, never other bytes.
//! With TLS, a client's file segments lie beneath its own directory, `clients/NAME`, and belong
//! to that directory's owner ([`home_of`]): the agent reads with its own rights, so it serves a
//! client no file that is not the client's.

use std::collections::{HashMap, HashSet, VecDeque};
use std::io::{Read, Seek};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use coflow_core::CoflowId;
use coflow_proto::{DataId, Registration};

use rustix::fs::{Mode, OFlags};

use crate::error::AgentError;

/// Where a piece's bytes are.
#[derive(Clone, Debug)]
enum Source {
    /// Bytes held in memory.
    Memory(Arc<Vec<u8>>),
    /// A segment of a file, confined to the data directory.
    File {
        /// The path as the client gave it, relative to the data directory.
        relative: String,
        /// Where the segment starts.
        offset: u64,
        /// The file's identity at put: device and inode.
        identity: (u64, u64),
    },
}

/// One stored piece: its bytes' whereabouts and the CRC-32 of each block, fixed at put.
#[derive(Clone, Debug)]
pub(crate) struct Piece {
    source: Source,
    len: u64,
    block: u64,
    crcs: Arc<Vec<u32>>,
}

fn block_crcs(bytes: &[u8], block: usize) -> Vec<u32> {
    bytes.chunks(block).map(crc32fast::hash).collect()
}

#[cfg(unix)]
fn identity(meta: &std::fs::Metadata) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    (meta.dev(), meta.ino())
}

#[cfg(not(unix))]
fn identity(_meta: &std::fs::Metadata) -> (u64, u64) {
    (0, 0)
}

impl Piece {
    /// Bytes in memory, checksummed in blocks of `block` bytes.
    pub(crate) fn memory(bytes: Vec<u8>, block: usize) -> Piece {
        let crcs = block_crcs(&bytes, block);
        Piece {
            len: bytes.len() as u64,
            source: Source::Memory(Arc::new(bytes)),
            block: block as u64,
            crcs: crcs.into(),
        }
    }

    /// Its size in bytes.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// The bytes it holds in the agent's memory.
    fn memory_bytes(&self) -> u64 {
        match self.source {
            Source::Memory(_) => self.len,
            Source::File { .. } => 0,
        }
    }

    /// What holding it costs the agent's memory, stored as `data_id` for `client`: its bytes,
    /// its table of block CRCs, a file segment's path, and the bookkeeping of any piece
    /// ([`charge`]).
    fn charge(&self, data_id: &DataId, client: &str) -> u64 {
        let path = match &self.source {
            Source::Memory(_) => 0,
            Source::File { relative, .. } => relative.len() as u64,
        };
        charge(self.memory_bytes(), data_id, client)
            .saturating_add(CRC_BYTES * self.crcs.len() as u64)
            .saturating_add(path)
    }

    /// A reader over its blocks; a file segment is opened now, checked against the put.
    pub(crate) async fn reader(&self, data_dir: &Path) -> Result<PieceReader, AgentError> {
        self.reader_range(data_dir, 0, self.len).await
    }

    /// A reader over bytes `[start, start + length)`, which must lie inside the piece: it reads
    /// the whole blocks that hold them, each checked against its CRC from the put, and yields the
    /// range's share of each (with the CRC of that share).
    pub(crate) async fn reader_range(
        &self,
        data_dir: &Path,
        start: u64,
        length: u64,
    ) -> Result<PieceReader, AgentError> {
        assert!(start.checked_add(length).is_some_and(|end| end <= self.len), "the range is checked by the caller");
        let index = (start / self.block) as usize;
        let at = index as u64 * self.block;
        let file = match &self.source {
            Source::Memory(_) => None,
            Source::File { relative, offset, identity: id } => {
                let (dir, relative, from, id, end) =
                    (data_dir.to_path_buf(), relative.clone(), offset + at, *id, offset + self.len);
                let f = tokio::task::spawn_blocking(move || reopen(&dir, &relative, from, id, end))
                    .await
                    .map_err(|e| AgentError::DataLost(format!("opening the segment: {e}")))??;
                Some(tokio::fs::File::from_std(f))
            }
        };
        Ok(PieceReader { piece: self.clone(), file, index, at, start, end: start + length })
    }
}

/// Opens a file segment's file again at get time, as at put ([`open_beneath`]): the same file
/// as at put, still long enough, positioned at the segment.
fn reopen(data_dir: &Path, relative: &str, offset: u64, id: (u64, u64), end: u64) -> Result<std::fs::File, AgentError> {
    let lost = |what: &str| AgentError::DataLost(format!("file {relative:?} {what} since it was put"));
    let (mut f, meta) = match open_beneath(data_dir, relative) {
        Ok(f) => f,
        Err(AgentError::PathEscapes(_)) => return Err(lost("now resolves through a symlink")),
        Err(_) => return Err(lost("was removed, replaced or became unreadable")),
    };
    if identity(&meta) != id {
        return Err(lost("was replaced by another file"));
    }
    if meta.len() < end {
        return Err(lost("was truncated"));
    }
    f.seek(std::io::SeekFrom::Start(offset)).map_err(|_| lost("became unreadable"))?;
    Ok(f)
}

/// Reads a range of a piece block by block, each block checked against its CRC from the put.
#[derive(Debug)]
pub(crate) struct PieceReader {
    piece: Piece,
    file: Option<tokio::fs::File>,
    /// The next block to read and where it starts.
    index: usize,
    at: u64,
    /// The range yielded.
    start: u64,
    end: u64,
}

impl PieceReader {
    /// The size of the next share of the range the reader yields; 0 at the end.
    pub(crate) fn next_len(&self) -> u64 {
        let block_end = (self.at + self.piece.block).min(self.piece.len);
        block_end.min(self.end).saturating_sub(self.at.max(self.start))
    }

    /// Bytes of the range not yielded yet.
    pub(crate) fn remaining(&self) -> u64 {
        self.end.saturating_sub(self.at.max(self.start))
    }

    /// Fills `buf` with the range's share of the next block, the block verified, and returns the
    /// share's CRC-32.
    pub(crate) async fn next_block(&mut self, buf: &mut Vec<u8>) -> Result<u32, AgentError> {
        use tokio::io::AsyncReadExt;
        let n = self.piece.block.min(self.piece.len - self.at) as usize;
        buf.clear();
        match (&self.piece.source, &mut self.file) {
            (Source::Memory(b), _) => buf.extend_from_slice(&b[self.at as usize..self.at as usize + n]),
            (Source::File { relative, .. }, Some(f)) => {
                buf.resize(n, 0);
                f.read_exact(buf).await.map_err(|e| {
                    let what = if e.kind() == std::io::ErrorKind::UnexpectedEof {
                        "was truncated"
                    } else {
                        "became unreadable"
                    };
                    AgentError::DataLost(format!("file {relative:?} {what} since it was put"))
                })?;
            }
            (Source::File { .. }, None) => unreachable!("a file reader holds its file"),
        }
        let crc = crc32fast::hash(buf);
        if crc != self.piece.crcs[self.index] {
            let whence = match &self.piece.source {
                Source::Memory(_) => "in memory".to_string(),
                Source::File { relative, .. } => format!("in file {relative:?}"),
            };
            return Err(AgentError::DataLost(format!(
                "bytes {}..{} {whence} changed since they were put",
                self.at,
                self.at + n as u64
            )));
        }
        // The range's share of the block: the block whole, or its CRC computed afresh.
        let (from, to) = (self.start.max(self.at) - self.at, self.end.min(self.at + n as u64) - self.at);
        self.index += 1;
        self.at += n as u64;
        if (from, to) == (0, n as u64) {
            return Ok(crc);
        }
        buf.truncate(to as usize);
        buf.drain(..from as usize);
        Ok(crc32fast::hash(buf))
    }
}

/// Every piece this agent holds, the registrations of their coflows, the coflows it was told
/// are sealed, and those it was told are gone.
///
/// A piece put here is pending until the coordinator accepts its announcement
/// ([`Store::confirm`]): pending, it holds its name from its own client only, as a name being
/// streamed in does, so a stranger's put of a name (which the coordinator refuses) cannot make
/// the owner's put of it a duplicate; and it is served to no one, since the coordinator issues
/// tickets for accepted pieces only. A fetch that comes while a put of its name is pending (the
/// coordinator's answer not read yet) waits for the puts to settle ([`Store::settled`]).
#[derive(Debug)]
pub(crate) struct Store {
    inner: Mutex<Inner>,
    /// Told whenever a pending piece is accepted or let go.
    settle: tokio::sync::Notify,
    max_memory_bytes: u64,
    /// The most of it one client identity's pieces may hold; 0: no bound of its own.
    max_client_bytes: u64,
}

#[derive(Debug, Default)]
struct Inner {
    /// The pieces held, by coflow and then by name: a coflow is dropped in the time of its own
    /// pieces, and a coflow with none here has no entry.
    coflows: HashMap<CoflowId, HashMap<DataId, Held>>,
    /// How many pieces `coflows` holds, and their bytes.
    pieces: usize,
    bytes: u64,
    /// The memory the pieces and reservations hold, as charged ([`charge`]).
    memory_bytes: u64,
    /// Per client identity, the bytes of memory its pieces and reservations hold (none at 0).
    client_bytes: HashMap<String, u64>,
    registrations: HashMap<CoflowId, Registration>,
    /// The coflows the coordinator said were sealed (it tells the agents holding their pieces),
    /// until they are dropped: a seal may come before the registration of a put it follows.
    sealed: HashSet<CoflowId>,
    dropped: HashSet<CoflowId>,
    dropped_order: VecDeque<CoflowId>,
    /// Pieces being streamed in, by name and client identity, whose bytes `memory_bytes` counts
    /// already.
    reserved: HashSet<ReservedName>,
    /// Pieces put and announced but not yet accepted, by name, at most one per client identity;
    /// `pieces`, `bytes` and `memory_bytes` count them.
    pending: HashMap<(CoflowId, DataId), Vec<Held>>,
    /// How many pieces [`Store::drop_coflow`] has looked at, to check the work it does.
    #[cfg(test)]
    visited: usize,
}

/// A piece held, the identity of the client that put it, and the memory it is charged.
#[derive(Debug)]
struct Held {
    piece: Piece,
    client: String,
    charge: u64,
}

/// Memory reserved for a piece being streamed in ([`Store::reserve`]); released when dropped
/// unless the piece was stored.
#[derive(Debug)]
pub(crate) struct Reservation<'a> {
    store: &'a Store,
    /// The name held; taken when the piece is stored.
    key: Option<ReservedName>,
    /// The piece's bytes as stated.
    size: u64,
    /// The memory held for it ([`reservation_charge`]).
    charge: u64,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            let mut s = self.store.inner.lock().expect("store lock");
            s.release(&key.2, self.charge);
            s.reserved.remove(&key);
        }
    }
}

impl Inner {
    /// Counts `bytes` more memory held for `client`.
    fn hold(&mut self, client: &str, bytes: u64) {
        self.memory_bytes += bytes;
        if bytes > 0 {
            *self.client_bytes.entry(client.to_string()).or_default() += bytes;
        }
    }

    /// Counts `bytes` of `client`'s memory given back.
    fn release(&mut self, client: &str, bytes: u64) {
        self.memory_bytes -= bytes;
        if let Some(held) = self.client_bytes.get_mut(client) {
            *held -= bytes;
            if *held == 0 {
                self.client_bytes.remove(client);
            }
        }
    }

    /// Whether a piece of this name is held.
    fn holds(&self, coflow: CoflowId, data_id: &DataId) -> bool {
        self.coflows.get(&coflow).is_some_and(|m| m.contains_key(data_id))
    }

    /// Whether `client` has a piece of this name pending.
    fn pends(&self, coflow: CoflowId, data_id: &DataId, client: &str) -> bool {
        let key = (coflow, data_id.clone());
        self.pending.get(&key).is_some_and(|p| p.iter().any(|h| h.client == client))
    }

    /// Holds a piece pending, charged `charge` for `client`, whose name is neither held nor
    /// pending for `client`.
    fn put(&mut self, coflow: CoflowId, data_id: DataId, piece: Piece, client: String, charge: u64) {
        self.hold(&client, charge);
        self.pieces += 1;
        self.bytes += piece.len();
        self.pending.entry((coflow, data_id)).or_default().push(Held { piece, client, charge });
    }

    /// Takes `client`'s pending piece of this name out of `pending`, if there is one.
    fn unpend(&mut self, coflow: CoflowId, data_id: &DataId, client: &str) -> Option<Held> {
        let key = (coflow, data_id.clone());
        let list = self.pending.get_mut(&key)?;
        let held = list.swap_remove(list.iter().position(|h| h.client == client)?);
        if list.is_empty() {
            self.pending.remove(&key);
        }
        Some(held)
    }

    /// Forgets a piece held and gives its memory back.
    fn forget(&mut self, held: &Held) {
        self.release(&held.client, held.charge);
        self.pieces -= 1;
        self.bytes -= held.piece.len();
    }
}

/// The memory, in bytes, that holding any piece costs beyond its bytes, its name and its
/// client's name: the entry in the store's maps (the name's and the client's `String`s, the
/// piece, the charge: about 140 bytes, in a table kept at most 7/8 full and as little as half
/// full after it grows), the allocator's headers on the name and the client's name, and the
/// reference-counted holders of the bytes and of the CRC table (40 bytes each, with headers).
/// Measured: 300,000 empty pieces with 256-byte names of a 6-byte client raise the resident
/// memory of a store by about 580 bytes each, 318 beyond the two names.
pub(crate) const PIECE_OVERHEAD_BYTES: u64 = 320;

/// The bytes of one block's CRC-32 in a piece's CRC table.
const CRC_BYTES: u64 = 4;

/// What a piece of `memory` bytes in memory stored as `data_id` for `client` costs the agent's
/// memory before its CRC table: its bytes, its name, the client's name and
/// [`PIECE_OVERHEAD_BYTES`]. So a piece of no bytes is not free, and a flood of empty pieces
/// meets `max_stored_bytes` as a flood of full ones does.
pub(crate) fn charge(memory: u64, data_id: &DataId, client: &str) -> u64 {
    memory
        .saturating_add(PIECE_OVERHEAD_BYTES)
        .saturating_add(data_id.as_str().len() as u64)
        .saturating_add(client.len() as u64)
}

/// What a piece of `size` bytes being streamed in is charged while its bytes come: as it will be
/// stored ([`charge`]) in blocks of `block` bytes, with its CRC table.
fn reservation_charge(size: u64, data_id: &DataId, client: &str, block: usize) -> u64 {
    charge(size, data_id, client).saturating_add(CRC_BYTES * size.div_ceil(block.max(1) as u64))
}

/// What a [`Store`] holds: its pieces, their bytes, the bytes of memory held (pieces and streams
/// being received, as charged: [`charge`]), and the most of those held for one client identity.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Usage {
    pub(crate) pieces: usize,
    pub(crate) bytes: u64,
    pub(crate) memory: u64,
    pub(crate) largest_client: u64,
}

/// A name being streamed in, and the identity of the client streaming it.
type ReservedName = (CoflowId, DataId, String);

/// How many unregistered coflow ids an agent remembers (to refuse their late puts).
const DROPPED_MEMORY: usize = 65_536;

impl Store {
    /// A store that holds at most `max_memory_bytes` of in-memory pieces, and at most
    /// `max_client_bytes` of them for one client identity (0: no bound of its own), each piece
    /// charged its bookkeeping as well as its bytes ([`charge`]).
    pub(crate) fn new(max_memory_bytes: u64, max_client_bytes: u64) -> Store {
        Store {
            inner: Mutex::new(Inner::default()),
            settle: tokio::sync::Notify::new(),
            max_memory_bytes,
            max_client_bytes,
        }
    }

    /// Holds a piece put by the client of identity `client`, pending until [`Store::confirm`];
    /// refuses a piece of a name held already, or pending or streaming in for the same client
    /// (one client has at most one piece of a name in flight at an agent), a piece of a
    /// coflow known to be unregistered, and bytes beyond the memory limits. Another client's
    /// piece pending, or stream coming in, under the name does not hold it: the piece the
    /// coordinator accepts is kept.
    pub(crate) fn insert(
        &self,
        coflow: CoflowId,
        data_id: DataId,
        piece: Piece,
        client: &str,
    ) -> Result<(), AgentError> {
        let mut s = self.inner.lock().expect("store lock");
        if s.dropped.contains(&coflow) {
            return Err(AgentError::UnknownCoflow(coflow));
        }
        let streaming = s.reserved.contains(&(coflow, data_id.clone(), client.to_string()));
        if s.holds(coflow, &data_id) || s.pends(coflow, &data_id, client) || streaming {
            return Err(AgentError::DuplicateDataId { coflow, data_id });
        }
        let add = piece.charge(&data_id, client);
        self.fits(&s, add, client)?;
        s.put(coflow, data_id, piece, client.to_string(), add);
        Ok(())
    }

    /// Reserves `size` bytes of memory for a piece about to be streamed in by the client of
    /// identity `client`, before its bytes come: refused, like [`Store::insert`], for a coflow
    /// known to be unregistered, a name stored already or pending for the same client, and bytes
    /// beyond the memory limit, and for a name the same client is streaming in already. Released
    /// when dropped unless the piece is held with [`Store::insert_reserved`].
    ///
    /// A name being streamed in holds back no other stream of another client, nor any plain put:
    /// the coordinator refuses the announcement of a client that does not own the coflow, so a
    /// stranger's put in flight cannot hold a name from the coflow's owner.
    pub(crate) fn reserve(
        &self,
        coflow: CoflowId,
        data_id: &DataId,
        size: u64,
        client: &str,
        block: usize,
    ) -> Result<Reservation<'_>, AgentError> {
        let mut s = self.inner.lock().expect("store lock");
        let key = (coflow, data_id.clone(), client.to_string());
        if s.dropped.contains(&coflow) {
            return Err(AgentError::UnknownCoflow(coflow));
        }
        if s.holds(coflow, data_id) || s.reserved.contains(&key) || s.pends(coflow, data_id, client) {
            return Err(AgentError::DuplicateDataId { coflow, data_id: data_id.clone() });
        }
        let charge = reservation_charge(size, data_id, client, block);
        self.fits(&s, charge, client)?;
        s.hold(client, charge);
        s.reserved.insert(key.clone());
        Ok(Reservation { store: self, key: Some(key), size, charge })
    }

    /// Holds a piece in the memory reserved for it, pending as [`Store::insert`] holds one,
    /// unless a piece was accepted under its name meanwhile. The piece is charged what it costs
    /// ([`charge`]), no more than was reserved for it when its blocks are of the size reserved
    /// for.
    pub(crate) fn insert_reserved(&self, mut r: Reservation<'_>, piece: Piece) -> Result<(), AgentError> {
        debug_assert_eq!(piece.memory_bytes(), r.size, "a reservation holds its piece's bytes");
        let mut s = self.inner.lock().expect("store lock");
        let key = r.key.take().expect("a reservation holds its name until stored");
        s.reserved.remove(&key);
        let (coflow, data_id, client) = key;
        s.release(&client, r.charge);
        if s.dropped.contains(&coflow) {
            return Err(AgentError::UnknownCoflow(coflow));
        }
        if s.holds(coflow, &data_id) || s.pends(coflow, &data_id, &client) {
            return Err(AgentError::DuplicateDataId { coflow, data_id });
        }
        let charge = piece.charge(&data_id, &client);
        s.put(coflow, data_id, piece, client, charge);
        Ok(())
    }

    fn fits(&self, s: &Inner, add: u64, client: &str) -> Result<(), AgentError> {
        if s.memory_bytes.saturating_add(add) > self.max_memory_bytes {
            return Err(AgentError::LimitExceeded(format!(
                "the agent holds {} bytes in memory; {add} more would pass max_stored_bytes {}",
                s.memory_bytes, self.max_memory_bytes
            )));
        }
        let held = s.client_bytes.get(client).copied().unwrap_or(0);
        if self.max_client_bytes > 0 && held.saturating_add(add) > self.max_client_bytes {
            return Err(AgentError::LimitExceeded(format!(
                "the agent holds {held} bytes in memory for this client; {add} more would pass \
                 max_stored_bytes_per_client {}",
                self.max_client_bytes
            )));
        }
        Ok(())
    }

    /// Keeps `client`'s pending piece of this name: the coordinator accepted its announcement.
    /// Refused if the coflow was dropped meanwhile, or (which the coordinator's refusal of a
    /// second announcement of a name rules out) another piece was accepted under the name.
    pub(crate) fn confirm(&self, coflow: CoflowId, data_id: &DataId, client: &str) -> Result<(), AgentError> {
        let mut s = self.inner.lock().expect("store lock");
        let Some(held) = s.unpend(coflow, data_id, client) else {
            // Only the put that holds a pending piece confirms or withdraws it, once.
            debug_assert!(false, "a piece confirmed that was not pending");
            return Err(AgentError::UnknownCoflow(coflow));
        };
        let refused = if s.dropped.contains(&coflow) {
            Some(AgentError::UnknownCoflow(coflow))
        } else if s.holds(coflow, data_id) {
            Some(AgentError::DuplicateDataId { coflow, data_id: data_id.clone() })
        } else {
            None
        };
        match refused {
            Some(_) => s.forget(&held),
            None => {
                s.coflows.entry(coflow).or_default().insert(data_id.clone(), held);
            }
        }
        drop(s);
        self.settle.notify_waiters();
        refused.map_or(Ok(()), Err)
    }

    /// Lets go of `client`'s pending piece of this name: the coordinator refused it, or did not
    /// answer.
    pub(crate) fn withdraw(&self, coflow: CoflowId, data_id: &DataId, client: &str) {
        let mut s = self.inner.lock().expect("store lock");
        if let Some(held) = s.unpend(coflow, data_id, client) {
            s.forget(&held);
        }
        drop(s);
        self.settle.notify_waiters();
    }

    /// The piece accepted under this name; while puts of the name are pending (a fetch the
    /// coordinator granted may come before its answer to the put is read), waits for them to
    /// settle, for at most `wait`.
    pub(crate) async fn settled(&self, coflow: CoflowId, data_id: &DataId, wait: std::time::Duration) -> Option<Piece> {
        // The piece, or none: Some when settled, None while puts of the name pend.
        let look = || {
            let s = self.inner.lock().expect("store lock");
            match s.coflows.get(&coflow).and_then(|m| m.get(data_id)) {
                Some(h) => Some(Some(h.piece.clone())),
                None => (!s.pending.contains_key(&(coflow, data_id.clone()))).then_some(None),
            }
        };
        // A fetch of a piece accepted already (nearly every one) takes no place among the waiters.
        if let Some(settled) = look() {
            return settled;
        }
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let told = self.settle.notified();
            tokio::pin!(told);
            told.as_mut().enable();
            if let Some(settled) = look() {
                return settled;
            }
            if tokio::time::timeout_at(deadline, told).await.is_err() {
                return self.get(coflow, data_id);
            }
        }
    }

    /// A piece held and accepted at once, as a put the coordinator accepts.
    #[cfg(test)]
    pub(crate) fn keep(&self, coflow: CoflowId, data_id: DataId, piece: Piece, client: &str) -> Result<(), AgentError> {
        self.insert(coflow, data_id.clone(), piece, client)?;
        self.confirm(coflow, &data_id, client)
    }

    /// Forgets a piece held.
    #[cfg(test)]
    pub(crate) fn remove(&self, coflow: CoflowId, data_id: &DataId) {
        let mut s = self.inner.lock().expect("store lock");
        let Some(pieces) = s.coflows.get_mut(&coflow) else { return };
        let Some(held) = pieces.remove(data_id) else { return };
        if pieces.is_empty() {
            s.coflows.remove(&coflow);
        }
        s.forget(&held);
    }

    /// Forgets a coflow: its pieces (memory is freed once running sends end; files are the
    /// user's and stay), its registration, and refuses it from now on; returns how many pieces
    /// it held here. It costs the time of the coflow's own pieces, whatever else the agent holds:
    /// every agent is told of every coflow unregistered in the cluster.
    pub(crate) fn drop_coflow(&self, coflow: CoflowId) -> usize {
        let mut s = self.inner.lock().expect("store lock");
        let pieces = s.coflows.remove(&coflow).unwrap_or_default();
        for held in pieces.values() {
            s.forget(held);
            #[cfg(test)]
            {
                s.visited += 1;
            }
        }
        s.registrations.remove(&coflow);
        s.sealed.remove(&coflow);
        if s.dropped.insert(coflow) {
            s.dropped_order.push_back(coflow);
            if s.dropped_order.len() > DROPPED_MEMORY
                && let Some(old) = s.dropped_order.pop_front()
            {
                s.dropped.remove(&old);
            }
        }
        // The pieces are let go once the lock is: their bytes are freed then, or when the sends
        // reading them end.
        drop(s);
        pieces.len()
    }

    /// Keeps a coflow's registration, as the coordinator told it, to re-announce after a restart.
    pub(crate) fn learn(&self, coflow: CoflowId, reg: Registration) {
        let mut s = self.inner.lock().expect("store lock");
        if !s.dropped.contains(&coflow) {
            s.registrations.insert(coflow, reg);
        }
    }

    /// Keeps that the coflow was sealed, to re-announce its pieces sealed after a restart.
    pub(crate) fn seal(&self, coflow: CoflowId) {
        let mut s = self.inner.lock().expect("store lock");
        if !s.dropped.contains(&coflow) {
            s.sealed.insert(coflow);
        }
    }

    /// Whether the coflow's registration, as far as this agent learned it, bars the caller of
    /// identity `by` from it: a put by another client is refused before its name is looked up
    /// or reserved, so that it can neither learn which names exist nor hold one from the owner.
    pub(crate) fn bars(&self, coflow: CoflowId, by: &str) -> bool {
        self.inner.lock().expect("store lock").registrations.get(&coflow).is_some_and(|r| !r.may_be_used_by(by))
    }

    /// Whether the coordinator said the coflow was unregistered.
    pub(crate) fn is_dropped(&self, coflow: CoflowId) -> bool {
        self.inner.lock().expect("store lock").dropped.contains(&coflow)
    }

    /// A piece, if held.
    pub(crate) fn get(&self, coflow: CoflowId, data_id: &DataId) -> Option<Piece> {
        let s = self.inner.lock().expect("store lock");
        s.coflows.get(&coflow).and_then(|m| m.get(data_id)).map(|h| h.piece.clone())
    }

    /// Every piece held: coflow, name, size, the coflow's registration if known, and whether it
    /// was sealed.
    pub(crate) fn list(&self) -> Vec<(CoflowId, DataId, u64, Option<Registration>, bool)> {
        let s = self.inner.lock().expect("store lock");
        s.coflows
            .iter()
            .flat_map(|(c, pieces)| {
                let (reg, sealed) = (s.registrations.get(c), s.sealed.contains(c));
                pieces.iter().map(move |(d, h)| (*c, d.clone(), h.piece.len(), reg.cloned(), sealed))
            })
            .collect()
    }

    /// What the store holds.
    pub(crate) fn usage(&self) -> Usage {
        let s = self.inner.lock().expect("store lock");
        Usage {
            pieces: s.pieces,
            bytes: s.bytes,
            memory: s.memory_bytes,
            largest_client: s.client_bytes.values().copied().max().unwrap_or(0),
        }
    }
}

/// Resolves a client's relative path inside `data_dir`: no absolute paths, no `..`, and after
/// following symlinks the file must still be inside the directory.
pub fn confine(data_dir: &Path, relative: &str) -> Result<PathBuf, AgentError> {
    let rel = Path::new(relative);
    if rel.components().any(|c| !matches!(c, Component::Normal(_) | Component::CurDir)) {
        return Err(AgentError::PathEscapes(relative.to_string()));
    }
    let dir = data_dir.canonicalize().map_err(|e| AgentError::BadFile(format!("the data directory: {e}")))?;
    let full = dir.join(rel).canonicalize().map_err(|e| AgentError::BadFile(format!("{relative:?}: {e}")))?;
    if !full.starts_with(&dir) {
        return Err(AgentError::PathEscapes(relative.to_string()));
    }
    Ok(full)
}

/// Opens `relative` inside `data_dir` for reading without following a link at any step and
/// without blocking (a FIFO does not wait for a writer), and returns it with its metadata if it
/// is a regular file. A path that is absolute, has `..`, or meets a symlink is `PathEscapes`;
/// anything that is not a regular file (FIFO, device, socket, directory) is `BadFile`, at once.
/// Blocking (a file system call): call it off the async runtime.
pub(crate) fn open_beneath(data_dir: &Path, relative: &str) -> Result<(std::fs::File, std::fs::Metadata), AgentError> {
    open_file_under(open_data_dir(data_dir)?, relative, relative)
}

/// Opens the regular file `relative` beneath the directory `dir` as [`open_beneath`] does;
/// errors name the path as `shown`.
fn open_file_under(
    dir: rustix::fd::OwnedFd,
    relative: &str,
    shown: &str,
) -> Result<(std::fs::File, std::fs::Metadata), AgentError> {
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
    let f = std::fs::File::from(open_under(dir, relative, shown, flags)?);
    let meta = f.metadata().map_err(|e| AgentError::BadFile(format!("{shown:?}: {e}")))?;
    if !meta.is_file() {
        return Err(AgentError::BadFile(format!("{shown:?} is not a regular file")));
    }
    Ok((f, meta))
}

/// The data directory, opened to resolve paths beneath it.
fn open_data_dir(data_dir: &Path) -> Result<rustix::fd::OwnedFd, AgentError> {
    rustix::fs::open(data_dir, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| AgentError::BadFile(format!("the data directory: {}", std::io::Error::from(e))))
}

/// Opens a caller's home ([`home_of`]) inside `data_dir` without following links and returns
/// it with its owner. The directory holding it (the data directory for `admin`, `clients`
/// otherwise) must let no client rename its entries, or one could pass another's home off as
/// its own: it must belong to root or to the data directory's owner, and be writable by no one
/// else unless sticky, as `/tmp` is.
fn open_home(data_dir: &Path, home: &str) -> Result<(rustix::fd::OwnedFd, u32), AgentError> {
    let dir_flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let made = |why: String| AgentError::BadFile(format!("{why} (an operator makes it)"));
    let stat = |fd: &rustix::fd::OwnedFd, what: &str| {
        rustix::fs::fstat(fd).map_err(|e| AgentError::BadFile(format!("{what}: {}", std::io::Error::from(e))))
    };
    let data = open_data_dir(data_dir)?;
    let operator = stat(&data, "the data directory")?.st_uid;
    let (parent_rel, name) = home.rsplit_once('/').unwrap_or(("", home));
    let parent = if parent_rel.is_empty() {
        data
    } else {
        open_under(data, parent_rel, parent_rel, dir_flags | OFlags::NOFOLLOW).map_err(|e| match e {
            AgentError::BadFile(why) => made(format!("{parent_rel}/ of the data directory: {why}")),
            e => e,
        })?
    };
    let st = stat(&parent, "the clients' directory")?;
    let sticky = st.st_mode & 0o1000 != 0;
    if !(st.st_uid == 0 || st.st_uid == operator) || (st.st_mode & 0o022 != 0 && !sticky) {
        return Err(AgentError::BadFile(format!(
            "{} of the data directory lets others rename its entries (owner {}, mode {:o}): it must be root's or \
             the data directory owner's, and writable by no one else unless sticky",
            if parent_rel.is_empty() { "the data directory itself".to_string() } else { format!("{parent_rel}/") },
            st.st_uid,
            st.st_mode & 0o7777
        )));
    }
    let fd = open_under(parent, name, home, dir_flags | OFlags::NOFOLLOW).map_err(|e| match e {
        AgentError::BadFile(why) => made(format!("this client's directory: {why}")),
        e => e,
    })?;
    let owner = stat(&fd, home)?.st_uid;
    Ok((fd, owner))
}

/// The owner (user id) of a file.
fn file_owner(meta: &std::fs::Metadata) -> u32 {
    use std::os::unix::fs::MetadataExt;
    meta.uid()
}

/// Opens `relative` beneath the directory `dir` with `flags`, without following a link at any
/// step; errors name the path as `shown`.
fn open_under(
    dir: rustix::fd::OwnedFd,
    relative: &str,
    shown: &str,
    flags: OFlags,
) -> Result<rustix::fd::OwnedFd, AgentError> {
    let rel = Path::new(relative);
    if relative.is_empty() || rel.components().any(|c| !matches!(c, Component::Normal(_) | Component::CurDir)) {
        return Err(AgentError::PathEscapes(shown.to_string()));
    }
    let bad = |e: rustix::io::Errno| AgentError::BadFile(format!("{shown:?}: {}", std::io::Error::from(e)));
    let escapes = |e: rustix::io::Errno| match e {
        // A symlink on the way (ELOOP), or a way out of the directory (EXDEV).
        rustix::io::Errno::LOOP | rustix::io::Errno::XDEV => AgentError::PathEscapes(shown.to_string()),
        // O_NOFOLLOW | O_DIRECTORY on a symlink may say "not a directory" instead.
        e => bad(e),
    };
    match open_beneath_at2(&dir, rel, flags) {
        Some(r) => r.map_err(escapes),
        None => {
            // No openat2: one component at a time, never following a link.
            let parts: Vec<&std::ffi::OsStr> = rel
                .components()
                .filter_map(|c| match c {
                    Component::Normal(p) => Some(p),
                    _ => None,
                })
                .collect();
            let (last, dirs) = parts.split_last().ok_or_else(|| AgentError::PathEscapes(shown.to_string()))?;
            let mut at = dir;
            for part in dirs {
                let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
                at = rustix::fs::openat(&at, *part, flags, Mode::empty()).map_err(escapes)?;
            }
            rustix::fs::openat(&at, *last, flags | OFlags::NOFOLLOW, Mode::empty()).map_err(escapes)
        }
    }
}

/// `openat2` beneath `dir` without symlinks; `None` where the kernel does not have it.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn open_beneath_at2(
    dir: &rustix::fd::OwnedFd,
    rel: &Path,
    flags: rustix::fs::OFlags,
) -> Option<rustix::io::Result<rustix::fd::OwnedFd>> {
    use rustix::fs::ResolveFlags;
    let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
    match rustix::fs::openat2(dir, rel, flags, rustix::fs::Mode::empty(), resolve) {
        Err(rustix::io::Errno::NOSYS) => None,
        r => Some(r),
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn open_beneath_at2(
    _dir: &rustix::fd::OwnedFd,
    _rel: &Path,
    _flags: rustix::fs::OFlags,
) -> Option<rustix::io::Result<rustix::fd::OwnedFd>> {
    None
}

/// Where the file segments of a caller must lie, relative to the data directory: a client's
/// beneath `clients/NAME`, the admin's beneath `admin`, and each a file owned by the owner of
/// that directory; a token holder's (or, with no authentication, anyone's) anywhere in it.
/// The agent reads files with its own rights, so without this a member could put another's
/// file into a coflow of its own and get it.
pub(crate) fn home_of(peer: Option<&coflow_proto::Peer>) -> Result<Option<String>, AgentError> {
    use coflow_proto::{Peer, Role};
    match peer {
        None | Some(Peer::Token) => Ok(None),
        Some(Peer::Tls(Role::Client(name))) => Ok(Some(format!("clients/{name}"))),
        Some(Peer::Tls(Role::Admin)) => Ok(Some("admin".to_string())),
        Some(Peer::Tls(_)) => Err(AgentError::PermissionDenied("only clients put pieces")),
    }
}

/// Checks a file segment, reads it once to checksum its blocks, and makes it a piece. With a
/// `home` ([`home_of`]), the file must lie beneath it and belong to its owner. Stops at the next
/// block once `stop` is set, with [`AgentError::ClientDeparted`].
/// Blocking: call it off the async runtime ([`crate::segment::Hashing`] does).
pub(crate) fn file_piece(
    data_dir: &Path,
    home: Option<&str>,
    relative: &str,
    offset: u64,
    length: u64,
    block: usize,
    stop: &AtomicBool,
) -> Result<Piece, AgentError> {
    let bad = |e: std::io::Error| AgentError::BadFile(format!("{relative:?}: {e}"));
    let (mut f, meta) = match home {
        None => open_beneath(data_dir, relative)?,
        Some(home) => {
            let inside: Vec<Component<'_>> =
                Path::new(relative).components().filter(|c| !matches!(c, Component::CurDir)).collect();
            let home_parts: Vec<Component<'_>> = Path::new(home).components().collect();
            if inside.len() <= home_parts.len() || inside[..home_parts.len()] != home_parts[..] {
                return Err(AgentError::NotYours(format!(
                    "{relative:?} is not beneath {home}/, where this client's files lie"
                )));
            }
            // The home first, then the file beneath the very directory whose owner is checked.
            let (dir, owner) = open_home(data_dir, home)?;
            let rest: PathBuf = inside[home_parts.len()..].iter().collect();
            let rest = rest.to_str().ok_or_else(|| AgentError::PathEscapes(relative.to_string()))?;
            let (f, meta) = open_file_under(dir, rest, relative)?;
            if file_owner(&meta) != owner {
                return Err(AgentError::NotYours(format!("{relative:?} is not owned by the owner of {home}/")));
            }
            (f, meta)
        }
    };
    if offset.checked_add(length).is_none_or(|end| end > meta.len()) {
        return Err(AgentError::BadFile(format!(
            "segment {offset}+{length} runs past the end of {relative:?} ({} bytes)",
            meta.len()
        )));
    }
    f.seek(std::io::SeekFrom::Start(offset)).map_err(bad)?;
    let mut crcs = Vec::with_capacity(length.div_ceil(block as u64) as usize);
    let mut buf = vec![0u8; block];
    let mut left = length;
    while left > 0 {
        if stop.load(Ordering::Relaxed) {
            return Err(AgentError::ClientDeparted);
        }
        let n = (block as u64).min(left) as usize;
        f.read_exact(&mut buf[..n]).map_err(bad)?;
        crcs.push(crc32fast::hash(&buf[..n]));
        left -= n as u64;
    }
    Ok(Piece {
        source: Source::File { relative: relative.to_string(), offset, identity: identity(&meta) },
        len: length,
        block: block as u64,
        crcs: crcs.into(),
    })
}

#[cfg(test)]
mod tests;
