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
/// `home` ([`home_of`]), the file must lie beneath it and belong to its owner.
/// Blocking: call it off the async runtime.
pub(crate) fn file_piece(
    data_dir: &Path,
    home: Option<&str>,
    relative: &str,
    offset: u64,
    length: u64,
    block: usize,
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
mod tests {
    use super::*;

    impl Store {
        /// A streamed piece held and accepted at once.
        fn keep_reserved(&self, r: Reservation<'_>, piece: Piece) -> Result<(), AgentError> {
            let (coflow, data_id, client) = r.key.clone().expect("a reservation holds its name");
            self.insert_reserved(r, piece)?;
            self.confirm(coflow, &data_id, &client)
        }
    }

    /// A fresh directory for one test, with `data/sub` in it, and the guard that removes it when
    /// dropped.
    fn scratch(name: &str) -> (tempfile::TempDir, PathBuf) {
        let guard = tempfile::Builder::new().prefix(&format!("coflow-{name}-")).tempdir().unwrap();
        let base = guard.path().to_path_buf();
        std::fs::create_dir_all(base.join("data/sub")).unwrap();
        (guard, base)
    }

    #[test]
    fn paths_stay_inside_the_data_directory() {
        let (_guard, base) = scratch("confine");
        let dir = base.join("data");
        std::fs::write(dir.join("sub/piece"), b"hello").unwrap();
        std::fs::write(base.join("secret"), b"no").unwrap();
        assert!(confine(&dir, "sub/piece").is_ok());
        for bad in ["../secret", "/etc/passwd", "sub/../../secret", ""] {
            assert!(matches!(file_piece(&dir, None, bad, 0, 1, 4), Err(AgentError::PathEscapes(_))), "{bad}");
        }
        for bad in ["../secret", "/etc/passwd", "sub/../../secret"] {
            assert!(matches!(confine(&dir, bad), Err(AgentError::PathEscapes(_))), "{bad}");
        }
        // A symlink anywhere on the way is refused, even one that stays inside the directory.
        std::os::unix::fs::symlink(base.join("secret"), dir.join("link")).unwrap();
        std::os::unix::fs::symlink(dir.join("sub"), dir.join("inner")).unwrap();
        assert!(matches!(confine(&dir, "link"), Err(AgentError::PathEscapes(_))));
        for bad in ["link", "inner/piece"] {
            let e = file_piece(&dir, None, bad, 0, 1, 4).unwrap_err();
            assert!(matches!(e, AgentError::PathEscapes(_)), "{bad}: {e}");
        }
        assert!(matches!(file_piece(&dir, None, "sub", 0, 1, 4), Err(AgentError::BadFile(m)) if m.contains("regular")));
        assert!(matches!(file_piece(&dir, None, "sub/piece", 3, 5, 4), Err(AgentError::BadFile(_))));
        assert_eq!(file_piece(&dir, None, "sub/piece", 1, 4, 4).unwrap().len(), 4);
    }

    /// With TLS a client's file segments lie beneath its own directory, in a `clients/` that no
    /// client may rename entries of.
    #[test]
    fn a_client_puts_only_files_beneath_its_own_directory() {
        use coflow_proto::{Peer, Role};
        let alice = home_of(Some(&Peer::Tls(Role::Client("alice".into())))).unwrap();
        assert_eq!(alice.as_deref(), Some("clients/alice"));
        assert_eq!(home_of(Some(&Peer::Tls(Role::Admin))).unwrap().as_deref(), Some("admin"));
        assert_eq!(home_of(Some(&Peer::Token)).unwrap(), None, "token holders may read any piece anyway");
        assert!(home_of(Some(&Peer::Tls(Role::Agent(0)))).is_err());
        let (_guard, base) = scratch("homes");
        let dir = base.join("data");
        for who in ["alice", "bob"] {
            std::fs::create_dir_all(dir.join(format!("clients/{who}/app"))).unwrap();
            std::fs::write(dir.join(format!("clients/{who}/app/out")), b"secret of someone").unwrap();
        }
        let home = alice.as_deref();
        assert_eq!(file_piece(&dir, home, "clients/alice/app/out", 0, 6, 4).unwrap().len(), 6);
        assert_eq!(file_piece(&dir, home, "./clients/alice/./app/out", 0, 6, 4).unwrap().len(), 6);
        for theirs in ["clients/bob/app/out", "sub/piece", "clients/alice", "clients/alicex/out", "clients"] {
            let e = file_piece(&dir, home, theirs, 0, 1, 4).unwrap_err();
            assert!(matches!(&e, AgentError::NotYours(m) if m.contains("not beneath clients/alice/")), "{theirs}: {e}");
            assert_eq!(e.kind(), coflow_proto::ErrorKind::PermissionDenied);
        }
        // Out through `..` is refused as any escape is, before its directory is looked at.
        let e = file_piece(&dir, home, "clients/alice/../bob/app/out", 0, 1, 4).unwrap_err();
        assert!(matches!(e, AgentError::PathEscapes(_)), "{e}");
        // A home that does not exist, or is a link, is named.
        let carol = Some("clients/carol");
        std::fs::create_dir_all(dir.join("elsewhere")).unwrap();
        std::fs::write(dir.join("elsewhere/out"), b"x").unwrap();
        std::os::unix::fs::symlink(dir.join("elsewhere"), dir.join("clients/carol")).unwrap();
        let e = file_piece(&dir, carol, "clients/carol/out", 0, 1, 4).unwrap_err();
        // Opened as a directory without following it, a link is "not a directory" (or a loop).
        assert!(
            matches!(&e, AgentError::PathEscapes(_))
                || matches!(&e, AgentError::BadFile(m) if m.contains("clients/carol") && m.contains("Not a directory")),
            "{e}"
        );
        let e = file_piece(&dir, Some("clients/dave"), "clients/dave/out", 0, 1, 4).unwrap_err();
        assert!(
            matches!(&e, AgentError::BadFile(m) if m.contains("this client's directory") && m.contains("No such file") && m.contains("an operator makes it")),
            "{e}"
        );
        // A `clients/` in which others may rename entries would let one pass another's home off
        // as its own: refused unless sticky.
        use std::os::unix::fs::PermissionsExt;
        for (mode, ok) in [(0o777, false), (0o775, false), (0o1777, true), (0o755, true)] {
            std::fs::set_permissions(dir.join("clients"), std::fs::Permissions::from_mode(mode)).unwrap();
            let r = file_piece(&dir, home, "clients/alice/app/out", 0, 6, 4);
            assert_eq!(r.is_ok(), ok, "clients/ at mode {mode:o}: {r:?}");
            if let Err(e) = r {
                assert!(e.to_string().contains("lets others rename its entries"), "{e}");
            }
        }
    }

    /// A file in a client's directory that another user owns (a hard link to someone else's
    /// file, made where `fs.protected_hardlinks` is off) is not the client's. Needs root, to
    /// give the file away.
    #[test]
    fn a_file_of_another_user_in_a_clients_directory_is_refused() {
        let (_guard, base) = scratch("owner");
        let dir = base.join("data");
        std::fs::create_dir_all(dir.join("clients/alice")).unwrap();
        std::fs::write(dir.join("clients/alice/mine"), b"mine").unwrap();
        std::fs::write(dir.join("clients/alice/theirs"), b"theirs").unwrap();
        // A file just made is the user's own: root's, or it cannot give files away.
        if file_owner(&std::fs::metadata(dir.join("clients/alice/mine")).unwrap()) != 0 {
            eprintln!("skipped: giving a file to another user needs root");
            return;
        }
        let other = rustix::fs::Uid::from_raw(54_321);
        rustix::fs::chown(dir.join("clients/alice/theirs"), Some(other), None).unwrap();
        let home = Some("clients/alice");
        assert_eq!(file_piece(&dir, home, "clients/alice/mine", 0, 4, 4).unwrap().len(), 4);
        let e = file_piece(&dir, home, "clients/alice/theirs", 0, 4, 4).unwrap_err();
        assert!(matches!(&e, AgentError::NotYours(m) if m.contains("not owned by the owner of clients/alice/")), "{e}");
        // A token holder's put is not asked whose the file is.
        assert_eq!(file_piece(&dir, None, "clients/alice/theirs", 0, 4, 4).unwrap().len(), 4);
        // Nor may `clients/` itself be another user's, who could rename the homes in it.
        rustix::fs::chown(dir.join("clients"), Some(other), None).unwrap();
        let e = file_piece(&dir, home, "clients/alice/mine", 0, 4, 4).unwrap_err();
        assert!(e.to_string().contains("lets others rename its entries (owner 54321"), "{e}");
    }

    /// A FIFO in the data directory is refused at once, at put, with a typed error: no thread
    /// waits for a writer.
    #[test]
    fn a_fifo_is_refused_at_once() {
        let (_guard, base) = scratch("fifo");
        let dir = base.join("data");
        let d = std::fs::File::open(&dir).unwrap();
        rustix::fs::mknodat(&d, "fifo", rustix::fs::FileType::Fifo, rustix::fs::Mode::RUSR | rustix::fs::Mode::WUSR, 0)
            .unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let d2 = dir.clone();
        std::thread::spawn(move || tx.send(file_piece(&d2, None, "fifo", 0, 1, 4).map(|p| p.len())));
        let r = rx.recv_timeout(std::time::Duration::from_secs(2)).expect("a FIFO put returns at once");
        assert!(matches!(&r, Err(AgentError::BadFile(m)) if m.contains("not a regular file")), "{r:?}");
    }

    /// A directory swapped with a symlink to an outside directory (renameat2 exchange) while
    /// puts and reads run: no put captures, and no read serves, a byte of the outside file, in
    /// at least 1,000 tries.
    #[tokio::test]
    async fn a_symlink_swapped_in_never_serves_an_outside_byte() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let (_guard, base) = scratch("swap");
        let dir = base.join("data");
        std::fs::create_dir_all(dir.join("d")).unwrap();
        std::fs::create_dir_all(base.join("outside")).unwrap();
        let (inside, outside) = (vec![b'A'; 4096], vec![b'B'; 4096]);
        std::fs::write(dir.join("d/f"), &inside).unwrap();
        std::fs::write(base.join("outside/f"), &outside).unwrap();
        std::os::unix::fs::symlink(base.join("outside"), dir.join("l")).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let swapper = {
            let (stop, dir) = (stop.clone(), dir.clone());
            std::thread::spawn(move || {
                let d = std::fs::File::open(&dir).unwrap();
                let mut swaps = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    rustix::fs::renameat_with(&d, "d", &d, "l", rustix::fs::RenameFlags::EXCHANGE).unwrap();
                    swaps += 1;
                }
                swaps
            })
        };
        let (mut tries, mut served) = (0, 0);
        let inside_crc = crc32fast::hash(&inside[..1024]);
        while tries < 1000 || served == 0 {
            tries += 1;
            let Ok(piece) = file_piece(&dir, None, "d/f", 0, 4096, 1024) else { continue };
            assert!(piece.crcs.iter().all(|&c| c == inside_crc), "a put captured the outside file");
            if let Ok(bytes) = read_all(&piece, &dir).await {
                assert_eq!(bytes, inside, "a read served other bytes");
                served += 1;
            }
            assert!(tries < 100_000, "no put ever succeeded");
        }
        stop.store(true, Ordering::Relaxed);
        assert!(swapper.join().unwrap() > 0);
    }

    async fn read_all(p: &Piece, dir: &Path) -> Result<Vec<u8>, AgentError> {
        let mut r = p.reader(dir).await?;
        let (mut out, mut buf) = (Vec::new(), Vec::new());
        while r.remaining() > 0 {
            r.next_block(&mut buf).await?;
            out.extend_from_slice(&buf);
        }
        Ok(out)
    }

    /// Every range of a piece, in memory or a file segment, reads exactly its bytes, each share
    /// with the CRC of its own bytes; a changed byte inside a block the range touches is caught
    /// even when the range itself leaves that byte out.
    #[tokio::test]
    async fn a_range_reads_exactly_its_bytes_checked_by_whole_blocks() {
        let (_guard, base) = scratch("range");
        let dir = base.join("data");
        let bytes: Vec<u8> = (0..10_000u32).map(|i| (i * 13 % 251) as u8).collect();
        std::fs::write(dir.join("sub/out"), &bytes).unwrap();
        let file = file_piece(&dir, None, "sub/out", 100, 9000, 1024).unwrap();
        let memory = Piece::memory(bytes[100..9100].to_vec(), 1024);
        for piece in [&memory, &file] {
            for (start, len) in [(0, 9000), (0, 1), (1023, 2), (1024, 1024), (5000, 4000), (8999, 1), (700, 0)] {
                let mut r = piece.reader_range(&dir, start, len).await.unwrap();
                let (mut out, mut buf) = (Vec::new(), Vec::new());
                while r.remaining() > 0 {
                    let expect = r.next_len() as usize;
                    let crc = r.next_block(&mut buf).await.unwrap();
                    assert_eq!((buf.len(), crc), (expect, crc32fast::hash(&buf)));
                    out.extend_from_slice(&buf);
                }
                let (s, e) = (100 + start as usize, 100 + (start + len) as usize);
                assert_eq!(out, &bytes[s..e], "{start}+{len}");
            }
        }
        let mut flipped = bytes.clone();
        flipped[100 + 1030] ^= 0xff;
        std::fs::write(dir.join("sub/out"), &flipped).unwrap();
        let mut r = file.reader_range(&dir, 1040, 100).await.unwrap();
        let e = r.next_block(&mut Vec::new()).await.unwrap_err();
        assert!(matches!(e, AgentError::DataLost(_)), "{e}");
    }

    /// Every way a file segment can change after its put is `DataLost`, never other bytes, and
    /// the message names the path relative to the data directory only.
    #[tokio::test]
    async fn a_segment_changed_after_its_put_is_data_lost() {
        let (_guard, base) = scratch("segment");
        let dir = base.join("data");
        let bytes: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
        let write = |b: &[u8]| std::fs::write(dir.join("sub/out"), b).unwrap();
        write(&bytes);
        let piece = file_piece(&dir, None, "sub/out", 100, 9000, 1024).unwrap();
        assert_eq!(read_all(&piece, &dir).await.unwrap(), &bytes[100..9100]);

        let mut flipped = bytes.clone();
        flipped[5000] ^= 0xff;
        write(&flipped);
        let outside = base.join("outside");
        std::fs::write(&outside, &bytes).unwrap();
        type Change<'a> = Box<dyn Fn() + 'a>;
        let cases: Vec<(&str, Change)> = vec![
            ("flipped", Box::new(|| {})),
            (
                "replaced by a same-content file",
                Box::new(|| {
                    std::fs::write(dir.join("sub/new"), &bytes).unwrap();
                    std::fs::rename(dir.join("sub/new"), dir.join("sub/out")).unwrap();
                }),
            ),
            ("truncated", Box::new(|| write(&bytes[..5000]))),
            ("removed", Box::new(|| std::fs::remove_file(dir.join("sub/out")).unwrap())),
            #[cfg(unix)]
            (
                "replaced by a symlink out of the data directory",
                Box::new(|| {
                    let _ = std::fs::remove_file(dir.join("sub/out"));
                    std::os::unix::fs::symlink(&outside, dir.join("sub/out")).unwrap();
                }),
            ),
        ];
        for (what, change) in cases {
            change();
            // A rename over the file while it exists gives the new one another inode.
            let Err(e) = read_all(&piece, &dir).await else { panic!("{what}: read succeeded") };
            assert!(matches!(&e, AgentError::DataLost(_)), "{what}: {e}");
            let msg = e.to_string();
            assert!(msg.contains("\"sub/out\"") && !msg.contains(base.to_str().unwrap()), "{what}: {msg}");
        }
    }

    #[test]
    fn unregistering_frees_the_memory_and_refuses_the_coflow() {
        let s = Store::new(1000, 0);
        let id = |s: &str| DataId::new(s).unwrap();
        s.keep(CoflowId(1), id("a"), Piece::memory(vec![1; 600], 256), "").unwrap();
        let e = s.keep(CoflowId(2), id("b"), Piece::memory(vec![1; 600], 256), "").unwrap_err();
        assert!(matches!(e, AgentError::LimitExceeded(_)), "{e}");
        assert_eq!(s.drop_coflow(CoflowId(1)), 1);
        assert_eq!(s.usage(), Usage::default());
        s.keep(CoflowId(2), id("b"), Piece::memory(vec![1; 600], 256), "").unwrap();
        assert!(matches!(
            s.keep(CoflowId(1), id("c"), Piece::memory(vec![1], 256), ""),
            Err(AgentError::UnknownCoflow(_))
        ));
    }

    /// What a piece of `bytes` in memory, checksummed in blocks of `block` bytes, is charged as
    /// `id` for `client`: its bytes, its CRC table, its name, the client's name and the overhead.
    fn cost(bytes: u64, block: u64, id: &str, client: &str) -> u64 {
        bytes + 4 * bytes.div_ceil(block) + id.len() as u64 + client.len() as u64 + PIECE_OVERHEAD_BYTES
    }

    /// A name being streamed in is held from the same client only: another client's stream or
    /// put of the name goes ahead, the first piece stored wins, and a stream that lost gives its
    /// memory back.
    #[test]
    fn a_name_being_streamed_in_is_held_from_its_own_client_only() {
        let s = Store::new(10_000, 0);
        let x = DataId::new("x").unwrap();
        let stranger = s.reserve(CoflowId(1), &x, 300, "stranger", 1024).unwrap();
        assert!(matches!(s.reserve(CoflowId(1), &x, 300, "stranger", 1024), Err(AgentError::DuplicateDataId { .. })));
        let owner = s.reserve(CoflowId(1), &x, 300, "owner", 1024).unwrap();
        // A stream is charged the CRC table of 1 KiB blocks, the agent's least.
        let (reserved_s, reserved_o) = (cost(300, 1024, "x", "stranger"), cost(300, 1024, "x", "owner"));
        assert_eq!(
            s.usage(),
            Usage { pieces: 0, bytes: 0, memory: reserved_s + reserved_o, largest_client: reserved_s }
        );
        s.keep_reserved(owner, Piece::memory(vec![1; 300], 256)).unwrap();
        let lost = s.keep_reserved(stranger, Piece::memory(vec![2; 300], 256));
        assert!(matches!(lost, Err(AgentError::DuplicateDataId { .. })), "{lost:?}");
        let stored = cost(300, 256, "x", "owner");
        assert_eq!(
            s.usage(),
            Usage { pieces: 1, bytes: 300, memory: stored, largest_client: stored },
            "the stream that lost gave its memory back"
        );
        assert!(matches!(s.reserve(CoflowId(1), &x, 10, "stranger", 1024), Err(AgentError::DuplicateDataId { .. })));
        // A plain put is not held back by another client's stream either.
        let y = DataId::new("y").unwrap();
        let stream = s.reserve(CoflowId(1), &y, 100, "stranger", 1024).unwrap();
        s.keep(CoflowId(1), y.clone(), Piece::memory(vec![3; 100], 256), "").unwrap();
        drop(stream);
        let plain = cost(100, 256, "y", "");
        assert_eq!(s.usage(), Usage { pieces: 2, bytes: 400, memory: stored + plain, largest_client: stored });
    }

    /// A piece pending (its announcement not answered) holds its name from its own client only:
    /// a stranger's put of the owner's name does not make the owner's a duplicate, the piece the
    /// coordinator accepts is the one served, and a fetch waits while puts of its name pend.
    #[tokio::test]
    async fn a_pending_piece_holds_its_name_from_its_own_client_only() {
        let s = std::sync::Arc::new(Store::new(1 << 20, 0));
        let (c, x) = (CoflowId(1), DataId::new("x").unwrap());
        let mem = |b: u8| Piece::memory(vec![b; 10], 1024);
        s.insert(c, x.clone(), mem(6), "mallory").unwrap();
        assert!(matches!(s.insert(c, x.clone(), mem(6), "mallory"), Err(AgentError::DuplicateDataId { .. })));
        assert!(matches!(s.reserve(c, &x, 10, "mallory", 1024), Err(AgentError::DuplicateDataId { .. })));
        s.insert(c, x.clone(), mem(1), "alice").unwrap();
        assert_eq!(s.usage().pieces, 2, "both pending pieces are counted");
        assert!(s.get(c, &x).is_none(), "a pending piece is served to no one");
        assert!(s.list().is_empty(), "nor announced again after a restart");
        assert!(s.settled(c, &DataId::new("y").unwrap(), std::time::Duration::from_secs(60)).await.is_none());

        // A fetch of the name waits for the puts to settle, and gets the piece accepted.
        let fetch = tokio::spawn({
            let (s, x) = (s.clone(), x.clone());
            async move { s.settled(c, &x, std::time::Duration::from_secs(60)).await }
        });
        tokio::task::yield_now().await;
        s.withdraw(c, &x, "mallory");
        tokio::task::yield_now().await;
        assert!(!fetch.is_finished(), "alice's put still pends");
        s.confirm(c, &x, "alice").unwrap();
        let piece = fetch.await.unwrap().expect("the accepted piece");
        let dir = Path::new("/nonexistent");
        assert_eq!(read_all(&piece, dir).await.unwrap(), vec![1; 10], "alice's bytes, not mallory's");
        assert_eq!(s.usage().pieces, 1, "mallory's piece gave its memory back");
        assert!(matches!(s.insert(c, x.clone(), mem(6), "mallory"), Err(AgentError::DuplicateDataId { .. })));

        // With only a stranger's put pending, a fetch finds no piece once it is let go, and
        // finds none at all after its wait.
        let z = DataId::new("z").unwrap();
        s.insert(c, z.clone(), mem(6), "mallory").unwrap();
        assert!(s.settled(c, &z, std::time::Duration::from_millis(20)).await.is_none());
        s.withdraw(c, &z, "mallory");
        assert!(s.settled(c, &z, std::time::Duration::from_secs(60)).await.is_none());

        // One client has one piece of a name in flight: no plain put beside its own stream of the
        // name, nor a stream beside its own pending put.
        let (w, u) = (DataId::new("w").unwrap(), DataId::new("u").unwrap());
        let stream = s.reserve(c, &w, 10, "alice", 1024).unwrap();
        assert!(matches!(s.insert(c, w.clone(), mem(2), "alice"), Err(AgentError::DuplicateDataId { .. })));
        s.insert(c, u.clone(), mem(4), "alice").unwrap();
        assert!(matches!(s.reserve(c, &u, 10, "alice", 1024), Err(AgentError::DuplicateDataId { .. })));
        s.withdraw(c, &u, "alice");
        drop(stream);
        assert_eq!(s.usage().pieces, 1, "only x is held");

        // A piece accepted after its coflow was dropped is let go.
        s.insert(c, z.clone(), mem(1), "alice").unwrap();
        s.drop_coflow(c);
        assert!(matches!(s.confirm(c, &z, "alice"), Err(AgentError::UnknownCoflow(_))));
        assert_eq!(s.usage(), Usage::default());
    }

    /// One client identity holds at most its bound of memory, whatever the agent has left; what
    /// it gives back (a piece removed, a coflow dropped, a stream that ends) is its own to use
    /// again, and another client is not held back by it. Every piece here costs `k` beyond its
    /// bytes (a 2-byte name, a 1-byte client, one CRC), so the bounds leave room for it.
    #[test]
    fn one_client_holds_at_most_its_bound_of_memory() {
        let k = cost(0, 1024, "a1", "a") + 4;
        let s = Store::new(1000 + 4 * k, 400 + 2 * k);
        let id = |s: &str| DataId::new(s).unwrap();
        let mem = |n: usize| Piece::memory(vec![1; n], 1024);
        s.keep(CoflowId(1), id("a1"), mem(300), "a").unwrap();
        let e = s.reserve(CoflowId(1), &id("a2"), 200, "a", 1024).unwrap_err();
        assert!(matches!(&e, AgentError::LimitExceeded(m) if m.contains("max_stored_bytes_per_client")), "{e}");
        assert!(matches!(s.keep(CoflowId(1), id("a2"), mem(101), "a"), Err(AgentError::LimitExceeded(_))));
        s.keep(CoflowId(2), id("b1"), mem(400), "b").unwrap();
        let stream = s.reserve(CoflowId(1), &id("a2"), 100, "a", 1024).unwrap();
        assert_eq!((s.usage().memory, s.usage().largest_client), (800 + 3 * k, 400 + 2 * k));
        drop(stream);
        assert_eq!((s.usage().memory, s.usage().largest_client), (700 + 2 * k, 400 + k));
        s.remove(CoflowId(1), &id("a1"));
        s.keep(CoflowId(3), id("a3"), mem(400), "a").unwrap();
        assert!(matches!(s.keep(CoflowId(2), id("b2"), mem(1), "b"), Err(AgentError::LimitExceeded(_))));
        assert_eq!(s.drop_coflow(CoflowId(2)), 1);
        s.keep(CoflowId(4), id("b2"), mem(200), "b").unwrap();
        assert_eq!((s.usage().memory, s.usage().largest_client), (600 + 2 * k, 400 + k));
        // A bound of 0: none but the agent's.
        let unbounded = Store::new(1000 + k, 0);
        unbounded.keep(CoflowId(1), id("x1"), mem(1000), "a").unwrap();
    }

    /// Dropping a coflow with no piece here leaves every piece as it was; dropping one removes
    /// exactly its pieces, from every client, and gives back exactly the memory they held.
    #[test]
    fn dropping_a_coflow_removes_exactly_its_pieces_and_their_memory() {
        let s = Store::new(1 << 20, 0);
        let id = |s: &str| DataId::new(s).unwrap();
        let mem = |n: usize| Piece::memory(vec![1; n], 1024);
        for (coflow, name, n, client) in
            [(1, "a", 10, "ann"), (1, "b", 0, "bob"), (1, "c", 2000, "ann"), (2, "a", 30, "bob"), (2, "d", 0, "cy")]
        {
            s.keep(CoflowId(coflow), id(name), mem(n), client).unwrap();
        }
        let (kept_bob, kept_cy) = (cost(30, 1024, "a", "bob"), cost(0, 1024, "d", "cy"));
        let before = s.usage();
        assert_eq!(s.drop_coflow(CoflowId(7)), 0);
        assert_eq!(s.usage(), before, "a coflow with no piece here frees nothing");
        assert!(s.is_dropped(CoflowId(7)), "a coflow with no piece here is still refused from now on");
        assert_eq!(s.drop_coflow(CoflowId(1)), 3);
        assert_eq!(
            s.usage(),
            Usage { pieces: 2, bytes: 30, memory: kept_bob + kept_cy, largest_client: kept_bob },
            "exactly coflow 1's pieces and memory are gone"
        );
        for name in ["a", "b", "c"] {
            assert!(s.get(CoflowId(1), &id(name)).is_none(), "{name}");
        }
        assert_eq!(s.get(CoflowId(2), &id("a")).map(|p| p.len()), Some(30));
        let mut listed: Vec<_> = s.list().into_iter().map(|(c, d, n, ..)| (c.0, d.as_str().to_string(), n)).collect();
        listed.sort();
        assert_eq!(listed, [(2, "a".to_string(), 30), (2, "d".to_string(), 0)]);
        // Its names are not held: the same names in another coflow are stored afresh.
        s.keep(CoflowId(3), id("a"), mem(10), "ann").unwrap();
        assert_eq!(s.drop_coflow(CoflowId(2)), 2);
        assert_eq!(s.drop_coflow(CoflowId(3)), 1);
        assert_eq!(s.usage(), Usage::default());
    }

    /// A seal is kept for the coflow's pieces, also when it comes before the piece its put
    /// announced, and goes with the coflow; a dropped coflow is not sealed again.
    #[test]
    fn a_seal_is_listed_with_its_coflow_s_pieces_until_the_coflow_is_dropped() {
        let s = Store::new(1 << 20, 0);
        let id = |s: &str| DataId::new(s).unwrap();
        let sealed = |s: &Store| {
            let mut l: Vec<_> =
                s.list().into_iter().map(|(c, d, .., sealed)| (c.0, d.as_str().to_string(), sealed)).collect();
            l.sort();
            l
        };
        s.keep(CoflowId(1), id("a"), Piece::memory(vec![1; 10], 1024), "").unwrap();
        s.seal(CoflowId(2));
        s.keep(CoflowId(2), id("b"), Piece::memory(vec![2; 10], 1024), "").unwrap();
        assert_eq!(sealed(&s), [(1, "a".to_string(), false), (2, "b".to_string(), true)]);
        s.seal(CoflowId(1));
        assert_eq!(sealed(&s), [(1, "a".to_string(), true), (2, "b".to_string(), true)]);
        assert_eq!(s.drop_coflow(CoflowId(1)), 1);
        s.seal(CoflowId(1));
        assert!(!s.inner.lock().unwrap().sealed.contains(&CoflowId(1)), "a dropped coflow is not kept sealed");
        assert_eq!(sealed(&s), [(2, "b".to_string(), true)]);
    }

    /// Dropping a coflow looks at its own pieces only: every agent is told of every coflow
    /// unregistered in the cluster, so the work must not grow with what else the agent holds.
    #[test]
    fn dropping_a_coflow_looks_at_its_own_pieces_only() {
        let s = Store::new(u64::MAX, 0);
        for i in 0..10_000 {
            s.keep(CoflowId(1), DataId::new(format!("p{i}")).unwrap(), Piece::memory(Vec::new(), 1024), "").unwrap();
        }
        for i in 0..3 {
            s.keep(CoflowId(3), DataId::new(format!("p{i}")).unwrap(), Piece::memory(vec![1], 1024), "").unwrap();
        }
        let visited = || s.inner.lock().unwrap().visited;
        for absent in 100..1100 {
            assert_eq!(s.drop_coflow(CoflowId(absent)), 0);
        }
        assert_eq!(visited(), 0, "1,000 coflows with no piece here looked at no piece");
        assert_eq!(s.drop_coflow(CoflowId(3)), 3);
        assert_eq!(visited(), 3, "a coflow's drop looked at its own pieces only");
        assert_eq!(s.usage().pieces, 10_000);
    }

    /// Pieces of no bytes are charged their bookkeeping: a flood of them, with the longest names,
    /// is refused `limit-exceeded` once their cost fills `max_stored_bytes`, at the piece the
    /// arithmetic says, and a client's flood once it fills that client's bound.
    #[test]
    fn a_flood_of_empty_pieces_is_refused_at_the_memory_limit() {
        let name = |i: usize| DataId::new(format!("{i:0>256}")).unwrap();
        let each = cost(0, 1024, &"0".repeat(256), "tenant");
        assert_eq!(each, 256 + 6 + PIECE_OVERHEAD_BYTES);
        let limit = 1 << 20;
        let s = Store::new(limit, 0);
        let mut stored = 0;
        let e = loop {
            match s.keep(CoflowId(1), name(stored), Piece::memory(Vec::new(), 1024), "tenant") {
                Ok(()) => stored += 1,
                Err(e) => break e,
            }
            assert!(stored <= 1 << 20, "a million empty pieces were all taken");
        };
        assert!(matches!(&e, AgentError::LimitExceeded(m) if m.contains("max_stored_bytes")), "{e}");
        assert_eq!(stored as u64, limit / each);
        assert_eq!(
            s.usage(),
            Usage { pieces: stored, bytes: 0, memory: stored as u64 * each, largest_client: stored as u64 * each }
        );
        // A stream of no bytes is charged as well.
        assert!(matches!(s.reserve(CoflowId(1), &name(stored), 0, "tenant", 1024), Err(AgentError::LimitExceeded(_))));
        // Dropped, they give it all back.
        assert_eq!(s.drop_coflow(CoflowId(1)), stored);
        assert_eq!(s.usage(), Usage::default());

        let per_client = Store::new(u64::MAX, 10 * each);
        for i in 0..10 {
            per_client.keep(CoflowId(1), name(i), Piece::memory(Vec::new(), 1024), "tenant").unwrap();
        }
        let e = per_client.keep(CoflowId(1), name(10), Piece::memory(Vec::new(), 1024), "tenant").unwrap_err();
        assert!(matches!(&e, AgentError::LimitExceeded(m) if m.contains("max_stored_bytes_per_client")), "{e}");
        per_client.keep(CoflowId(1), name(10), Piece::memory(Vec::new(), 1024), "other").unwrap();
    }

    /// A file segment holds no bytes in memory, but its name, path and CRC table are charged.
    #[test]
    fn a_file_segment_is_charged_its_bookkeeping() {
        let (_guard, base) = scratch("charge");
        let dir = base.join("data");
        std::fs::write(dir.join("sub/out"), vec![5; 4096]).unwrap();
        let s = Store::new(1 << 20, 0);
        let piece = file_piece(&dir, None, "sub/out", 0, 4096, 1024).unwrap();
        s.keep(CoflowId(1), DataId::new("f").unwrap(), piece, "c").unwrap();
        let expect = cost(0, 1024, "f", "c") + 4 * 4 + "sub/out".len() as u64;
        assert_eq!(s.usage(), Usage { pieces: 1, bytes: 4096, memory: expect, largest_client: expect });
    }
}
