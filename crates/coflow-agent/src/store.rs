//! The pieces an agent holds: bytes in memory, or a segment of a file under the data directory
//! (a map task writes one file with every reducer's piece and may exit: time-decoupled).
//! A piece stays until its coflow is unregistered, so several gets (stages) may read it.
//!
//! A piece's content is fixed at put: a CRC-32 of every block (the agent's `chunk_bytes`) is
//! computed then, over the bytes or over the file segment as it was, and every block is checked
//! against it when it is read, before it leaves the agent. A file segment is re-resolved at
//! every read: its path must still canonicalize to the same place inside the data directory, and
//! the opened file must be the very file (device and inode) checked at put, so a file replaced
//! by a symlink, renamed over, changed, truncated or removed is `DataLost`, never other bytes.

use std::collections::{HashMap, HashSet, VecDeque};
use std::io::{Read, Seek};
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};

use coflow_core::CoflowId;
use coflow_proto::{DataId, Registration};

use crate::error::AgentError;

/// Where a piece's bytes are.
#[derive(Clone, Debug)]
enum Source {
    /// Bytes held in memory.
    Memory(Arc<Vec<u8>>),
    /// A segment of a file, confined to the data directory.
    File {
        /// The path as the client gave it (relative to the data directory), for messages.
        relative: String,
        /// The canonical path at put.
        path: PathBuf,
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

    /// A reader over its blocks; a file segment is opened now, checked against the put.
    pub(crate) async fn reader(&self, data_dir: &Path) -> Result<PieceReader, AgentError> {
        let file = match &self.source {
            Source::Memory(_) => None,
            Source::File { relative, path, offset, identity: id } => {
                let (dir, relative, path, offset, id, end) =
                    (data_dir.to_path_buf(), relative.clone(), path.clone(), *offset, *id, offset + self.len);
                let f = tokio::task::spawn_blocking(move || reopen(&dir, &relative, &path, offset, id, end))
                    .await
                    .map_err(|e| AgentError::DataLost(format!("opening the segment: {e}")))??;
                Some(tokio::fs::File::from_std(f))
            }
        };
        Ok(PieceReader { piece: self.clone(), file, index: 0, at: 0 })
    }
}

/// Opens a file segment's file again at get time: same canonical path inside the data
/// directory, same file as at put, still long enough, positioned at the segment.
fn reopen(
    data_dir: &Path,
    relative: &str,
    path: &Path,
    offset: u64,
    id: (u64, u64),
    end: u64,
) -> Result<std::fs::File, AgentError> {
    let lost = |what: &str| AgentError::DataLost(format!("file {relative:?} {what} since it was put"));
    let now = data_dir.join(relative).canonicalize().map_err(|_| lost("was removed or became unreadable"))?;
    if now != path {
        return Err(lost("now resolves elsewhere (moved, or replaced by a symlink)"));
    }
    let mut f = std::fs::File::open(path).map_err(|_| lost("became unreadable"))?;
    let meta = f.metadata().map_err(|_| lost("became unreadable"))?;
    if !meta.is_file() || identity(&meta) != id {
        return Err(lost("was replaced by another file"));
    }
    if meta.len() < end {
        return Err(lost("was truncated"));
    }
    f.seek(std::io::SeekFrom::Start(offset)).map_err(|_| lost("became unreadable"))?;
    Ok(f)
}

/// Reads a piece's blocks in order, each checked against its CRC from the put.
#[derive(Debug)]
pub(crate) struct PieceReader {
    piece: Piece,
    file: Option<tokio::fs::File>,
    index: usize,
    at: u64,
}

impl PieceReader {
    /// The size of the next block; 0 at the end.
    pub(crate) fn next_len(&self) -> u64 {
        self.piece.block.min(self.piece.len - self.at)
    }

    /// Bytes not read yet.
    pub(crate) fn remaining(&self) -> u64 {
        self.piece.len - self.at
    }

    /// Fills `buf` with the next block, verified, and returns its CRC-32.
    pub(crate) async fn next_block(&mut self, buf: &mut Vec<u8>) -> Result<u32, AgentError> {
        use tokio::io::AsyncReadExt;
        let n = self.next_len() as usize;
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
        self.index += 1;
        self.at += n as u64;
        Ok(crc)
    }
}

/// Every piece this agent holds, the registrations of their coflows, and the coflows it was
/// told are gone.
#[derive(Debug)]
pub(crate) struct Store {
    inner: Mutex<Inner>,
    max_memory_bytes: u64,
}

#[derive(Debug, Default)]
struct Inner {
    pieces: HashMap<(CoflowId, DataId), Piece>,
    memory_bytes: u64,
    registrations: HashMap<CoflowId, Registration>,
    dropped: HashSet<CoflowId>,
    dropped_order: VecDeque<CoflowId>,
}

/// How many unregistered coflow ids an agent remembers (to refuse their late puts).
const DROPPED_MEMORY: usize = 65_536;

impl Store {
    /// A store that holds at most `max_memory_bytes` of in-memory pieces.
    pub(crate) fn new(max_memory_bytes: u64) -> Store {
        Store { inner: Mutex::new(Inner::default()), max_memory_bytes }
    }

    /// Stores a piece; refuses a second piece of the same name, a piece of a coflow known to be
    /// unregistered, and bytes beyond the memory limit.
    pub(crate) fn insert(&self, coflow: CoflowId, data_id: DataId, piece: Piece) -> Result<(), AgentError> {
        let mut s = self.inner.lock().expect("store lock");
        if s.dropped.contains(&coflow) {
            return Err(AgentError::UnknownCoflow(coflow));
        }
        if s.pieces.contains_key(&(coflow, data_id.clone())) {
            return Err(AgentError::DuplicateDataId { coflow, data_id });
        }
        let add = piece.memory_bytes();
        if s.memory_bytes + add > self.max_memory_bytes {
            return Err(AgentError::LimitExceeded(format!(
                "the agent holds {} bytes in memory; {add} more would pass max_stored_bytes {}",
                s.memory_bytes, self.max_memory_bytes
            )));
        }
        s.memory_bytes += add;
        s.pieces.insert((coflow, data_id), piece);
        Ok(())
    }

    /// Forgets a piece.
    pub(crate) fn remove(&self, coflow: CoflowId, data_id: &DataId) {
        let mut s = self.inner.lock().expect("store lock");
        if let Some(p) = s.pieces.remove(&(coflow, data_id.clone())) {
            s.memory_bytes -= p.memory_bytes();
        }
    }

    /// Forgets a coflow: its pieces (memory is freed once running sends end; files are the
    /// user's and stay), its registration, and refuses it from now on.
    pub(crate) fn drop_coflow(&self, coflow: CoflowId) -> usize {
        let mut s = self.inner.lock().expect("store lock");
        let before = s.pieces.len();
        let mut freed = 0;
        s.pieces.retain(|(c, _), p| {
            let keep = *c != coflow;
            if !keep {
                freed += p.memory_bytes();
            }
            keep
        });
        s.memory_bytes -= freed;
        s.registrations.remove(&coflow);
        if s.dropped.insert(coflow) {
            s.dropped_order.push_back(coflow);
            if s.dropped_order.len() > DROPPED_MEMORY
                && let Some(old) = s.dropped_order.pop_front()
            {
                s.dropped.remove(&old);
            }
        }
        before - s.pieces.len()
    }

    /// Keeps a coflow's registration, as the coordinator told it, to re-announce after a restart.
    pub(crate) fn learn(&self, coflow: CoflowId, reg: Registration) {
        let mut s = self.inner.lock().expect("store lock");
        if !s.dropped.contains(&coflow) {
            s.registrations.insert(coflow, reg);
        }
    }

    /// Whether the coordinator said the coflow was unregistered.
    pub(crate) fn is_dropped(&self, coflow: CoflowId) -> bool {
        self.inner.lock().expect("store lock").dropped.contains(&coflow)
    }

    /// A piece, if held.
    pub(crate) fn get(&self, coflow: CoflowId, data_id: &DataId) -> Option<Piece> {
        self.inner.lock().expect("store lock").pieces.get(&(coflow, data_id.clone())).cloned()
    }

    /// Every piece held: coflow, name, size, and the coflow's registration if known.
    pub(crate) fn list(&self) -> Vec<(CoflowId, DataId, u64, Option<Registration>)> {
        let s = self.inner.lock().expect("store lock");
        s.pieces.iter().map(|((c, d), piece)| (*c, d.clone(), piece.len(), s.registrations.get(c).cloned())).collect()
    }

    /// The number of pieces, their bytes, and the bytes held in memory.
    pub(crate) fn usage(&self) -> (usize, u64, u64) {
        let s = self.inner.lock().expect("store lock");
        (s.pieces.len(), s.pieces.values().map(Piece::len).sum(), s.memory_bytes)
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

/// Checks a file segment, reads it once to checksum its blocks, and makes it a piece.
/// Blocking: call it off the async runtime.
pub(crate) fn file_piece(
    data_dir: &Path,
    relative: &str,
    offset: u64,
    length: u64,
    block: usize,
) -> Result<Piece, AgentError> {
    let path = confine(data_dir, relative)?;
    let bad = |e: std::io::Error| AgentError::BadFile(format!("{relative:?}: {e}"));
    let mut f = std::fs::File::open(&path).map_err(bad)?;
    let meta = f.metadata().map_err(bad)?;
    if !meta.is_file() {
        return Err(AgentError::BadFile(format!("{relative:?} is not a regular file")));
    }
    if offset + length > meta.len() {
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
        source: Source::File { relative: relative.to_string(), path, offset, identity: identity(&meta) },
        len: length,
        block: block as u64,
        crcs: crcs.into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let base = std::env::temp_dir().join(format!("coflow-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(base.join("data/sub")).unwrap();
        base
    }

    #[test]
    fn paths_stay_inside_the_data_directory() {
        let base = scratch("confine");
        let dir = base.join("data");
        std::fs::write(dir.join("sub/piece"), b"hello").unwrap();
        std::fs::write(base.join("secret"), b"no").unwrap();
        assert!(confine(&dir, "sub/piece").is_ok());
        for bad in ["../secret", "/etc/passwd", "sub/../../secret"] {
            assert!(matches!(confine(&dir, bad), Err(AgentError::PathEscapes(_))), "{bad}");
        }
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(base.join("secret"), dir.join("link")).unwrap();
            assert!(matches!(confine(&dir, "link"), Err(AgentError::PathEscapes(_))));
        }
        assert!(matches!(file_piece(&dir, "sub/piece", 3, 5, 4), Err(AgentError::BadFile(_))));
        assert_eq!(file_piece(&dir, "sub/piece", 1, 4, 4).unwrap().len(), 4);
        std::fs::remove_dir_all(&base).unwrap();
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

    /// Every way a file segment can change after its put is `DataLost`, never other bytes, and
    /// the message names the path relative to the data directory only.
    #[tokio::test]
    async fn a_segment_changed_after_its_put_is_data_lost() {
        let base = scratch("segment");
        let dir = base.join("data");
        let bytes: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
        let write = |b: &[u8]| std::fs::write(dir.join("sub/out"), b).unwrap();
        write(&bytes);
        let piece = file_piece(&dir, "sub/out", 100, 9000, 1024).unwrap();
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
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn unregistering_frees_the_memory_and_refuses_the_coflow() {
        let s = Store::new(1000);
        let id = |s: &str| DataId::new(s).unwrap();
        s.insert(CoflowId(1), id("a"), Piece::memory(vec![1; 600], 256)).unwrap();
        let e = s.insert(CoflowId(2), id("b"), Piece::memory(vec![1; 600], 256)).unwrap_err();
        assert!(matches!(e, AgentError::LimitExceeded(_)), "{e}");
        assert_eq!(s.drop_coflow(CoflowId(1)), 1);
        assert_eq!(s.usage(), (0, 0, 0));
        s.insert(CoflowId(2), id("b"), Piece::memory(vec![1; 600], 256)).unwrap();
        assert!(matches!(
            s.insert(CoflowId(1), id("c"), Piece::memory(vec![1], 256)),
            Err(AgentError::UnknownCoflow(_))
        ));
    }
}
