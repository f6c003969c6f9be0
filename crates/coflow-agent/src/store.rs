//! The pieces an agent holds: bytes in memory, or a segment of a file under the data directory
//! (a map task writes one file with every reducer's piece and may exit: time-decoupled).
//! A piece stays until its coflow is gone, so several gets (stages) may read it.

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};

use coflow_core::CoflowId;
use coflow_proto::DataId;
use tokio::io::{AsyncReadExt, AsyncSeekExt};

use crate::error::AgentError;

/// One stored piece.
#[derive(Clone, Debug)]
pub(crate) enum Piece {
    /// Bytes held in memory.
    Memory(Arc<Vec<u8>>),
    /// A segment of a file, confined to the data directory.
    File {
        /// The canonical path.
        path: PathBuf,
        /// Where the segment starts.
        offset: u64,
        /// Its length.
        length: u64,
    },
}

impl Piece {
    /// Its size in bytes.
    pub(crate) fn len(&self) -> u64 {
        match self {
            Piece::Memory(b) => b.len() as u64,
            Piece::File { length, .. } => *length,
        }
    }

    /// A reader over its bytes, chunk by chunk.
    pub(crate) async fn reader(&self) -> Result<PieceReader, AgentError> {
        Ok(match self {
            Piece::Memory(b) => PieceReader::Memory(b.clone(), 0),
            Piece::File { path, offset, length } => {
                let mut f = tokio::fs::File::open(path)
                    .await
                    .map_err(|e| AgentError::BadFile(format!("{}: {e}", path.display())))?;
                f.seek(std::io::SeekFrom::Start(*offset)).await.map_err(|e| AgentError::BadFile(e.to_string()))?;
                PieceReader::File(f, *length)
            }
        })
    }
}

/// Reads a piece's bytes in order.
#[derive(Debug)]
pub(crate) enum PieceReader {
    /// From memory, at an offset.
    Memory(Arc<Vec<u8>>, usize),
    /// From a file, with the bytes left.
    File(tokio::fs::File, u64),
}

impl PieceReader {
    /// Fills `buf` with the next `n` bytes (fewer at the end); returns how many.
    pub(crate) async fn next(&mut self, buf: &mut Vec<u8>, n: usize) -> Result<usize, AgentError> {
        buf.clear();
        match self {
            PieceReader::Memory(b, at) => {
                let end = (*at + n).min(b.len());
                buf.extend_from_slice(&b[*at..end]);
                let k = end - *at;
                *at = end;
                Ok(k)
            }
            PieceReader::File(f, left) => {
                let k = (n as u64).min(*left) as usize;
                buf.resize(k, 0);
                f.read_exact(buf).await.map_err(|e| AgentError::BadFile(format!("file shrank or unreadable: {e}")))?;
                *left -= k as u64;
                Ok(k)
            }
        }
    }
}

/// Every piece this agent holds.
#[derive(Debug, Default)]
pub(crate) struct Store {
    pieces: Mutex<HashMap<(CoflowId, DataId), Piece>>,
}

impl Store {
    /// Stores a piece; refuses a second piece of the same name.
    pub(crate) fn insert(&self, coflow: CoflowId, data_id: DataId, piece: Piece) -> Result<(), AgentError> {
        let mut p = self.pieces.lock().expect("store lock");
        if p.contains_key(&(coflow, data_id.clone())) {
            return Err(AgentError::DuplicateDataId { coflow, data_id });
        }
        p.insert((coflow, data_id), piece);
        Ok(())
    }

    /// Forgets a piece.
    pub(crate) fn remove(&self, coflow: CoflowId, data_id: &DataId) {
        self.pieces.lock().expect("store lock").remove(&(coflow, data_id.clone()));
    }

    /// A piece, if held.
    pub(crate) fn get(&self, coflow: CoflowId, data_id: &DataId) -> Option<Piece> {
        self.pieces.lock().expect("store lock").get(&(coflow, data_id.clone())).cloned()
    }

    /// Every piece held: coflow, name, size.
    pub(crate) fn list(&self) -> Vec<(CoflowId, DataId, u64)> {
        let p = self.pieces.lock().expect("store lock");
        p.iter().map(|((c, d), piece)| (*c, d.clone(), piece.len())).collect()
    }

    /// The number of pieces and their bytes.
    pub(crate) fn usage(&self) -> (usize, u64) {
        let p = self.pieces.lock().expect("store lock");
        (p.len(), p.values().map(Piece::len).sum())
    }
}

/// Resolves a client's relative path inside `data_dir`: no absolute paths, no `..`, and after
/// following symlinks the file must still be inside the directory.
pub fn confine(data_dir: &Path, relative: &str) -> Result<PathBuf, AgentError> {
    let rel = Path::new(relative);
    if rel.components().any(|c| !matches!(c, Component::Normal(_) | Component::CurDir)) {
        return Err(AgentError::PathEscapes(relative.to_string()));
    }
    let dir = data_dir
        .canonicalize()
        .map_err(|e| AgentError::BadFile(format!("data directory {}: {e}", data_dir.display())))?;
    let full = dir.join(rel).canonicalize().map_err(|e| AgentError::BadFile(format!("{relative:?}: {e}")))?;
    if !full.starts_with(&dir) {
        return Err(AgentError::PathEscapes(relative.to_string()));
    }
    Ok(full)
}

/// Checks a file segment and makes it a piece.
pub(crate) fn file_piece(data_dir: &Path, relative: &str, offset: u64, length: u64) -> Result<Piece, AgentError> {
    let path = confine(data_dir, relative)?;
    let meta = std::fs::metadata(&path).map_err(|e| AgentError::BadFile(format!("{relative:?}: {e}")))?;
    if !meta.is_file() {
        return Err(AgentError::BadFile(format!("{relative:?} is not a regular file")));
    }
    if offset + length > meta.len() {
        return Err(AgentError::BadFile(format!(
            "segment {offset}+{length} runs past the end of {relative:?} ({} bytes)",
            meta.len()
        )));
    }
    Ok(Piece::File { path, offset, length })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_stay_inside_the_data_directory() {
        let base = std::env::temp_dir().join(format!("coflow-confine-{}", std::process::id()));
        let dir = base.join("data");
        std::fs::create_dir_all(dir.join("sub")).unwrap();
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
        assert!(matches!(file_piece(&dir, "sub/piece", 3, 5), Err(AgentError::BadFile(_))));
        assert_eq!(file_piece(&dir, "sub/piece", 1, 4).unwrap().len(), 4);
        std::fs::remove_dir_all(&base).unwrap();
    }
}
