//! Where a part of a get that arrives ahead of its turn waits: a get split over several paths
//! fetches its parts at once, and hands a later part on to its client only after every part
//! before it. A client that reads slowly holds the earlier parts back while the later ones keep
//! coming, so a waiting part is kept in memory up to [`MEMORY_BYTES`] and past that in a file of
//! the agent's data directory that no name leads to (`O_TMPFILE`, or a fresh name removed at
//! once: no client can open or swap it, and it is gone when closed, even after a crash). A reader
//! who takes its time costs the agent disk, at most the piece's size and freed at the get's end,
//! rather than memory. Each block is checked against its CRC-32 as it comes back from disk, as
//! every block was when it arrived.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};

use crate::error::AgentError;

/// How many bytes of one waiting part are kept in memory before the rest goes to disk.
pub(crate) const MEMORY_BYTES: usize = 4 << 20;

/// The bytes of one part that waits for its turn, in order.
#[derive(Debug)]
pub(crate) struct Spill {
    /// The directory an overflow file is made in.
    dir: PathBuf,
    /// The bytes kept in memory before any went to disk.
    limit: usize,
    memory: VecDeque<Vec<u8>>,
    in_memory: usize,
    /// What came once memory was full, in order after it, and each block's length and CRC-32.
    file: Option<tokio::fs::File>,
    on_disk: VecDeque<(usize, u32)>,
    /// The agent's count of bytes written to disk this way.
    spilled: Arc<AtomicU64>,
}

impl Spill {
    /// An empty part that keeps `limit` bytes in memory and the rest in a file made in `dir`,
    /// counting what goes to disk in `spilled`.
    pub(crate) fn new(dir: PathBuf, limit: usize, spilled: Arc<AtomicU64>) -> Spill {
        Spill { dir, limit, memory: VecDeque::new(), in_memory: 0, file: None, on_disk: VecDeque::new(), spilled }
    }

    /// Keeps `block` after what came before it. A file that cannot be made or written (the disk
    /// is full) is `LimitExceeded`, naming why.
    pub(crate) async fn push(&mut self, block: Vec<u8>) -> Result<(), AgentError> {
        if self.file.is_none() && self.in_memory + block.len() <= self.limit {
            self.in_memory += block.len();
            self.memory.push_back(block);
            return Ok(());
        }
        let file = match &mut self.file {
            Some(f) => f,
            None => {
                let dir = self.dir.clone();
                let made = tokio::task::spawn_blocking(move || anonymous_file(&dir))
                    .await
                    .map_err(|e| std::io::Error::other(e.to_string()))
                    .and_then(|r| r)
                    .map_err(|e| too_much(&self.dir, &e))?;
                self.file.insert(tokio::fs::File::from_std(made))
            }
        };
        file.write_all(&block).await.map_err(|e| too_much(&self.dir, &e))?;
        self.on_disk.push_back((block.len(), crc32fast::hash(&block)));
        self.spilled.fetch_add(block.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Hands every byte kept on to `out`, in order, in the blocks they came in; what was handed
    /// on is let go. `ClientDeparted` when `out` takes no more; `Corrupted` for a block that
    /// comes back from disk other than it went.
    pub(crate) async fn drain(&mut self, out: &crate::data::Sink) -> Result<(), AgentError> {
        while let Some(block) = self.memory.pop_front() {
            self.in_memory -= block.len();
            out.send(block).await?;
        }
        let Some(mut file) = self.file.take() else { return Ok(()) };
        let lost = |e: std::io::Error| AgentError::DataLost(format!("reading back a part kept on disk: {e}"));
        file.flush().await.map_err(lost)?;
        file.seek(std::io::SeekFrom::Start(0)).await.map_err(lost)?;
        while let Some((n, crc)) = self.on_disk.pop_front() {
            let mut block = vec![0; n];
            file.read_exact(&mut block).await.map_err(lost)?;
            if crc32fast::hash(&block) != crc {
                return Err(AgentError::Corrupted(format!("a block of {n} bytes kept on disk came back altered")));
            }
            out.send(block).await?;
        }
        Ok(())
    }
}

/// A file in `dir` that no name leads to: `O_TMPFILE`, or on a file system without it a fresh
/// name made exclusively (never an existing file or link) and removed at once.
fn anonymous_file(dir: &Path) -> std::io::Result<std::fs::File> {
    use rustix::fs::{Mode, OFlags};
    use rustix::io::Errno;
    let private = Mode::RUSR | Mode::WUSR;
    match rustix::fs::open(dir, OFlags::TMPFILE | OFlags::RDWR | OFlags::CLOEXEC, private) {
        Ok(fd) => return Ok(std::fs::File::from(fd)),
        Err(e) if ![Errno::OPNOTSUPP, Errno::ISDIR, Errno::INVAL].contains(&e) => return Err(e.into()),
        Err(_) => {}
    }
    unlinked_file(dir)
}

/// The number in the next fresh name [`unlinked_file`] tries.
static NEXT_NAME: AtomicU64 = AtomicU64::new(0);

fn spill_name(n: u64) -> String {
    format!(".coflow-spill-{}-{n}", std::process::id())
}

/// A file made in `dir` under a fresh name, exclusively, and at once removed.
fn unlinked_file(dir: &Path) -> std::io::Result<std::fs::File> {
    use rustix::fs::{Mode, OFlags};
    use rustix::io::Errno;
    for _ in 0..100 {
        let name = dir.join(spill_name(NEXT_NAME.fetch_add(1, Ordering::Relaxed)));
        let flags = OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::RDWR | OFlags::CLOEXEC;
        match rustix::fs::open(&name, flags, Mode::RUSR | Mode::WUSR) {
            Ok(fd) => {
                std::fs::remove_file(&name)?;
                return Ok(std::fs::File::from(fd));
            }
            Err(Errno::EXIST) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(std::io::Error::other("no fresh name for a file after 100 tries"))
}

fn too_much(dir: &Path, e: &std::io::Error) -> AgentError {
    AgentError::LimitExceeded(format!(
        "a part that arrived ahead of the client's reading could not be kept on disk in {}: {e}",
        dir.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::Sink;
    use tokio::sync::mpsc;

    fn blocks(sizes: &[usize]) -> Vec<Vec<u8>> {
        let mut at = 0u8;
        sizes
            .iter()
            .map(|&n| {
                (0..n)
                    .map(|_| {
                        at = at.wrapping_add(7);
                        at
                    })
                    .collect()
            })
            .collect()
    }

    async fn drained(spill: &mut Spill) -> Result<Vec<Vec<u8>>, AgentError> {
        let (tx, mut rx) = mpsc::channel(1024);
        spill.drain(&Sink::stream(tx, Arc::default())).await?;
        let mut out = Vec::new();
        while let Ok(b) = rx.try_recv() {
            out.push(b);
        }
        Ok(out)
    }

    #[tokio::test]
    async fn what_passes_the_memory_bound_goes_to_disk_and_comes_back_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let spilled = Arc::new(AtomicU64::new(0));
        let mut spill = Spill::new(dir.path().to_path_buf(), 10, spilled.clone());
        let input = blocks(&[4, 6, 3, 9, 1]);
        for b in &input {
            spill.push(b.clone()).await.unwrap();
        }
        // 4 + 6 fit in memory; the 3 bytes after them do not, and from then on all goes to disk.
        let on_disk: Vec<usize> = spill.on_disk.iter().map(|b| b.0).collect();
        assert_eq!((spill.in_memory, on_disk), (10, vec![3, 9, 1]));
        assert_eq!(spilled.load(Ordering::Relaxed), 13);
        // The file has no name in the directory.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        let out = drained(&mut spill).await.unwrap();
        assert_eq!(out, input, "every byte, in order, in the blocks they came in");
        assert_eq!((spill.in_memory, spill.on_disk.len()), (0, 0));
        assert!(drained(&mut spill).await.unwrap().is_empty(), "drained once");
    }

    #[test]
    fn without_o_tmpfile_the_file_is_made_under_a_fresh_name_and_removed() {
        use std::io::{Read, Seek, Write};
        let dir = tempfile::tempdir().unwrap();
        // A name taken (a link a client planted, to a file it wants written) is passed over.
        let target = dir.path().join("target");
        std::fs::write(&target, b"theirs").unwrap();
        let planted = dir.path().join(spill_name(NEXT_NAME.load(Ordering::Relaxed)));
        std::os::unix::fs::symlink(&target, &planted).unwrap();
        let mut f = unlinked_file(dir.path()).unwrap();
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names.len(), 2, "no name of its own stays: {names:?}");
        assert_eq!(std::fs::read(&target).unwrap(), b"theirs");
        f.write_all(b"spilled").unwrap();
        f.rewind().unwrap();
        let mut back = String::new();
        f.read_to_string(&mut back).unwrap();
        assert_eq!(back, "spilled");
    }

    #[tokio::test]
    async fn a_part_within_the_bound_never_touches_the_disk() {
        let mut spill = Spill::new(PathBuf::from("/nonexistent/dir"), 100, Arc::default());
        for b in blocks(&[40, 60]) {
            spill.push(b).await.unwrap();
        }
        assert_eq!(drained(&mut spill).await.unwrap(), blocks(&[40, 60]));
    }

    #[tokio::test]
    async fn a_disk_that_cannot_take_the_rest_is_limit_exceeded() {
        let mut spill = Spill::new(PathBuf::from("/nonexistent/dir"), 10, Arc::default());
        spill.push(vec![1; 10]).await.unwrap();
        let e = spill.push(vec![2; 1]).await.unwrap_err();
        assert!(matches!(&e, AgentError::LimitExceeded(m) if m.contains("/nonexistent/dir")), "{e}");
    }

    #[tokio::test]
    async fn a_client_gone_while_a_part_is_handed_on_is_client_departed() {
        let dir = tempfile::tempdir().unwrap();
        let mut spill = Spill::new(dir.path().to_path_buf(), 1, Arc::default());
        spill.push(vec![1; 8]).await.unwrap();
        let (tx, rx) = mpsc::channel(1);
        drop(rx);
        let e = spill.drain(&Sink::stream(tx, Arc::default())).await.unwrap_err();
        assert!(matches!(e, AgentError::ClientDeparted), "{e}");
    }

    #[tokio::test]
    async fn a_block_altered_on_disk_is_corrupted_never_handed_on() {
        let dir = tempfile::tempdir().unwrap();
        let mut spill = Spill::new(dir.path().to_path_buf(), 4, Arc::default());
        for b in blocks(&[4, 6, 5]) {
            spill.push(b).await.unwrap();
        }
        let file = spill.file.as_mut().unwrap();
        file.flush().await.unwrap();
        file.seek(std::io::SeekFrom::Start(7)).await.unwrap();
        file.write_all(b"x").await.unwrap();
        let (tx, mut rx) = mpsc::channel(16);
        let e = spill.drain(&Sink::stream(tx, Arc::default())).await.unwrap_err();
        assert!(matches!(&e, AgentError::Corrupted(m) if m.contains("5 bytes")), "{e}");
        let mut handed = Vec::new();
        while let Ok(b) = rx.try_recv() {
            handed.push(b);
        }
        assert_eq!(handed, blocks(&[4, 6]), "the blocks before it, and not it");
    }
}
