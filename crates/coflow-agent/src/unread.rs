//! Gets whose local client stopped reading: a chunk left untaken for [`UNREAD_AFTER`] lists the
//! get's flows in the agent's heartbeats, so that the coordinator judges no port by them (their
//! senders fall short because the client stopped, not because a port is slow).

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use coflow_core::FlowId;

/// How long a get's client may leave a chunk ready for it untaken before the get's flows are
/// reported unread (in a heartbeat sent at once): well under the coordinator's measurement
/// period (400 ms), so that it learns before it judges the flows' ports by them.
pub(crate) const UNREAD_AFTER: Duration = Duration::from_millis(150);

/// The gets whose client has not taken the chunk ready for it, and since when. Each heartbeat
/// lists the open flows of those that waited [`UNREAD_AFTER`] or more: their senders fall short
/// because the client stopped reading, not because a port is slow.
#[derive(Debug, Default)]
pub(crate) struct Unread {
    next: AtomicU64,
    waiting: Mutex<HashMap<u64, (Instant, OpenParts)>>,
    /// Told when a get becomes unread: the session then sends a heartbeat at once.
    pub(crate) changed: tokio::sync::Notify,
}

/// The flows of a get whose end is not reported yet.
pub(crate) type OpenParts = Arc<Mutex<BTreeSet<FlowId>>>;

/// A get listed as waiting for its client to take a chunk; dropped, the wait is over.
#[must_use = "the wait ends when this is dropped"]
pub(crate) struct Waiting<'a> {
    unread: &'a Unread,
    id: u64,
}

impl Unread {
    /// Lists a get whose flows are `open` as waiting since `since`, until the wait is dropped.
    pub(crate) fn wait(&self, open: &OpenParts, since: Instant) -> Waiting<'_> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.waiting.lock().expect("unread lock").insert(id, (since, open.clone()));
        Waiting { unread: self, id }
    }

    /// Waits for `send` (a chunk to the client of a get whose flows are `open`) for at most
    /// `limit`: after `UNREAD_AFTER` the get is unread, which the session is told of at once.
    /// Whether the chunk was taken. A chunk taken within `UNREAD_AFTER` leaves no trace here.
    pub(crate) async fn deliver<E>(
        &self,
        open: &OpenParts,
        send: impl Future<Output = Result<(), E>>,
        limit: Duration,
    ) -> bool {
        let since = Instant::now();
        let mut send = std::pin::pin!(send);
        tokio::select! {
            r = &mut send => return r.is_ok(),
            _ = tokio::time::sleep(UNREAD_AFTER.min(limit)) => {}
        }
        let _waiting = self.wait(open, since);
        self.changed.notify_one();
        matches!(tokio::time::timeout(limit.saturating_sub(UNREAD_AFTER), send).await, Ok(Ok(())))
    }

    /// The flows, in order, of the gets that have waited since `UNREAD_AFTER` before `now`.
    pub(crate) fn flows(&self, now: Instant) -> Vec<u64> {
        let waiting = self.waiting.lock().expect("unread lock");
        let mut flows: Vec<u64> = waiting
            .values()
            .filter(|(since, _)| now.saturating_duration_since(*since) >= UNREAD_AFTER)
            .flat_map(|(_, open)| open.lock().expect("open parts lock").iter().map(|f| f.0).collect::<Vec<_>>())
            .collect();
        flows.sort_unstable();
        flows
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.unread.waiting.lock().expect("unread lock").remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A get's flows are listed once its client has left a chunk untaken for `UNREAD_AFTER`,
    /// as they are then (a part that ended is not), and no longer once the chunk is taken.
    #[test]
    fn a_get_is_reported_unread_while_its_client_leaves_a_chunk_untaken() {
        let unread = Unread::default();
        let t0 = Instant::now();
        let (a, b): (OpenParts, OpenParts) = (Arc::default(), Arc::default());
        a.lock().unwrap().extend([FlowId(7), FlowId(3)]);
        b.lock().unwrap().insert(FlowId(5));
        let waiting_a = unread.wait(&a, t0);
        let waiting_b = unread.wait(&b, t0 + Duration::from_millis(100));
        assert_eq!(unread.flows(t0 + UNREAD_AFTER - Duration::from_millis(1)), Vec::<u64>::new());
        assert_eq!(unread.flows(t0 + UNREAD_AFTER), vec![3, 7]);
        a.lock().unwrap().remove(&FlowId(7));
        assert_eq!(unread.flows(t0 + UNREAD_AFTER + Duration::from_millis(100)), vec![3, 5]);
        drop(waiting_a);
        assert_eq!(unread.flows(t0 + Duration::from_secs(1)), vec![5]);
        drop(waiting_b);
        assert_eq!(unread.flows(t0 + Duration::from_secs(1)), Vec::<u64>::new());
    }

    /// A chunk the client takes at once lists nothing; one it leaves lists the get once
    /// `UNREAD_AFTER` has passed, tells the session so then (not before), and is given up at the
    /// limit, after which nothing is listed.
    #[tokio::test]
    async fn a_chunk_left_untaken_lists_its_get_and_tells_the_session() {
        let unread = Unread::default();
        let open: OpenParts = Arc::default();
        open.lock().unwrap().insert(FlowId(9));
        assert!(unread.deliver(&open, async { Ok::<(), ()>(()) }, Duration::from_secs(1)).await);
        let started = Instant::now();
        let never = std::future::pending::<Result<(), ()>>();
        let given_up = unread.deliver(&open, never, UNREAD_AFTER * 3);
        let watch = async {
            unread.changed.notified().await;
            (started.elapsed(), unread.flows(Instant::now()))
        };
        let (taken, (told, listed)) = tokio::join!(given_up, watch);
        assert!(!taken, "given up at the limit");
        assert!(told >= UNREAD_AFTER, "told after {told:?}");
        assert_eq!(listed, vec![9], "listed when the session is told");
        assert_eq!(unread.flows(Instant::now()), Vec::<u64>::new(), "no longer waiting");
    }
}
