//! File segments put by clients: each is read once at put, on the blocking pool, to fix its
//! blocks' CRC-32s. At most [`HASHING_PER_CLIENT`] of one client's segments and [`HASHING`] in
//! all are read at once, the others waiting their turn off the pool, so that one member's
//! segments (a put may name 64 GiB) cannot take the threads that serve every client's file
//! pieces; a read stops at its next block once its put is dropped (its client hung up, or the
//! agent stops).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Semaphore;

use crate::error::AgentError;
use crate::store::{Piece, file_piece};

/// Segments read at once in all.
pub(crate) const HASHING: usize = 16;

/// Segments of one client read at once.
pub(crate) const HASHING_PER_CLIENT: usize = 4;

/// The turns to read segments: one semaphore in all, one per client with a read in flight or
/// waiting.
#[derive(Debug)]
pub(crate) struct Hashing {
    all: Arc<Semaphore>,
    clients: Mutex<HashMap<String, Arc<Semaphore>>>,
}

impl Default for Hashing {
    fn default() -> Self {
        Hashing { all: Arc::new(Semaphore::new(HASHING)), clients: Mutex::default() }
    }
}

/// Sets its flag when dropped: the read it stops is no longer waited for.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

impl Hashing {
    /// [`file_piece`] on the blocking pool, in `client`'s turn and the agent's, which the read
    /// holds until it ends; dropped, the read stops at its next block.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn piece(
        &self,
        client: &str,
        data_dir: PathBuf,
        home: Option<String>,
        relative: String,
        offset: u64,
        length: u64,
        block: usize,
    ) -> Result<Piece, AgentError> {
        let mine = {
            let mut clients = self.clients.lock().expect("hashing lock");
            // Clients with nothing in flight or waiting leave no entry behind.
            clients.retain(|_, s| Arc::strong_count(s) > 1);
            clients.entry(client.to_string()).or_insert_with(|| Arc::new(Semaphore::new(HASHING_PER_CLIENT))).clone()
        };
        let own = mine.acquire_owned().await.expect("never closed");
        let turn = self.all.clone().acquire_owned().await.expect("never closed");
        let stop = Arc::new(AtomicBool::new(false));
        let _stop = StopOnDrop(stop.clone());
        // The turns go with the read: one stopped by a drop gives them back once it has ended,
        // so that reads starting as others stop never run more than the turns at once.
        let read = move || {
            let _turns = (own, turn);
            file_piece(&data_dir, home.as_deref(), &relative, offset, length, block, &stop)
        };
        tokio::task::spawn_blocking(read).await.map_err(|e| AgentError::BadFile(e.to_string()))?
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// A read whose put is dropped stops at its next block, so the blocking pool is free again;
    /// a client past its turns waits while another client's segment is read at once; and a
    /// client with nothing in flight leaves no entry. On a runtime of one blocking thread more than
    /// a client's turns: its reads of 1 TiB left running would keep that many tasks from meeting.
    #[test]
    fn reads_are_bounded_per_client_and_stop_when_dropped() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .max_blocking_threads(HASHING_PER_CLIENT + 1)
            .enable_time()
            .build()
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let file = std::fs::File::create(dir.path().join("big")).unwrap();
        file.set_len(1 << 40).unwrap();
        std::fs::write(dir.path().join("small"), b"hello").unwrap();
        assert!(matches!(
            file_piece(dir.path(), None, "small", 0, 5, 4, &AtomicBool::new(true)),
            Err(AgentError::ClientDeparted)
        ));
        // Left running, the reads would hold the runtime's drop: it is shut down in the
        // background, and the outcome checked after.
        let outcome = rt.block_on(async {
            let hashing = Arc::new(Hashing::default());
            let path = dir.path().to_path_buf();
            let big = |h: Arc<Hashing>, p: PathBuf| async move {
                h.piece("m", p, None, "big".into(), 0, 1 << 40, 1 << 20).await
            };
            let hogs: Vec<_> =
                (0..HASHING_PER_CLIENT + 1).map(|_| tokio::spawn(big(hashing.clone(), path.clone()))).collect();
            tokio::time::sleep(Duration::from_millis(100)).await;
            assert_eq!(
                hashing.all.available_permits(),
                HASHING - HASHING_PER_CLIENT,
                "one client holds its turns only"
            );
            let other = tokio::time::timeout(
                Duration::from_secs(5),
                hashing.piece("a", path.clone(), None, "small".into(), 0, 5, 4),
            );
            assert_eq!(other.await.expect("not held behind another client").unwrap().len(), 5);
            for h in &hogs {
                h.abort();
            }
            for h in hogs {
                assert!(h.await.unwrap_err().is_cancelled());
            }
            let meet = Arc::new(std::sync::Barrier::new(HASHING_PER_CLIENT + 1));
            let waiting: Vec<_> = (0..=HASHING_PER_CLIENT)
                .map(|_| {
                    tokio::task::spawn_blocking({
                        let meet = meet.clone();
                        move || {
                            meet.wait();
                        }
                    })
                })
                .collect();
            for w in waiting {
                tokio::time::timeout(Duration::from_secs(5), w).await.map_err(|_| "the dropped reads go on")?.unwrap();
            }
            hashing.piece("b", path, None, "small".into(), 0, 5, 4).await.unwrap();
            assert_eq!(hashing.clients.lock().unwrap().len(), 1, "only the last client's entry: {:?}", hashing.clients);
            Ok::<(), &str>(())
        });
        rt.shutdown_background();
        outcome.unwrap();
    }
}
