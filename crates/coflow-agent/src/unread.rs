//! Gets held back by their local client rather than by the network: a get whose chunks waited
//! for the client ([`READER_LIMITED`] of the interval since the previous heartbeat or more, or
//! one chunk for [`UNREAD_AFTER`]) lists the flows whose bytes go straight to that client (not
//! the parts kept until their turn, which the client holds back in nothing) in the agent's next
//! heartbeat, so that the coordinator judges no port or link by them (their senders fall short
//! because the client reads slowly or not at all, not because a port is slow) and gives them what
//! their client reads, no more.

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use coflow_core::FlowId;

/// How long a get's client may leave a chunk ready for it untaken before the get's flows are
/// reported unread in a heartbeat sent early (within 50 ms): well under the coordinator's
/// measurement period (400 ms), so that it learns before it judges the flows' ports by them.
pub(crate) const UNREAD_AFTER: Duration = Duration::from_millis(150);

/// The share of a heartbeat's interval a get's chunks may wait for its client before the get is
/// reported reader-limited. A client that keeps up takes each chunk as it comes and leaves none
/// waiting; one slower than the network keeps the get's queue to it full, and its chunks wait
/// nearly all the time, a few milliseconds at a time.
pub(crate) const READER_LIMITED: f64 = 0.1;

/// The gets being delivered to their clients, with how long their chunks waited for the client.
/// Each heartbeat lists the open flows of those held back by their client since the previous
/// one ([`Unread::flows`]).
#[derive(Debug)]
pub(crate) struct Unread {
    inner: Mutex<Inner>,
    /// Told when a get becomes held back by its client: the session then sends a heartbeat at
    /// once.
    pub(crate) changed: tokio::sync::Notify,
}

#[derive(Debug)]
struct Inner {
    next: u64,
    gets: HashMap<u64, Get>,
    /// When the gets were last listed (the previous heartbeat).
    listed_at: Instant,
}

#[derive(Debug)]
struct Get {
    open: OpenParts,
    /// Since when a chunk has waited for the client, if one is waiting.
    waiting_since: Option<Instant>,
    /// How long its chunks waited since `listed_at`, the wait in progress left out.
    waited: Duration,
    /// Whether the last listing (or, since, a wait) found it held back by its client, and
    /// whether a wait found it so since the last listing (the next lists it).
    limited: bool,
    flagged: bool,
}

impl Default for Unread {
    fn default() -> Unread {
        let inner = Inner { next: 0, gets: HashMap::new(), listed_at: Instant::now() };
        Unread { inner: Mutex::new(inner), changed: tokio::sync::Notify::new() }
    }
}

/// The flows of a get whose end is not reported yet.
pub(crate) type OpenParts = Arc<Mutex<BTreeSet<FlowId>>>;

/// A get being delivered to its client; dropped, it is no longer watched.
#[must_use = "the get is watched until this is dropped"]
pub(crate) struct Watched<'a> {
    unread: &'a Unread,
    id: u64,
}

impl Unread {
    /// Watches a get whose flows going straight to its client are `open` while it is delivered.
    pub(crate) fn watch(&self, open: &OpenParts) -> Watched<'_> {
        let mut inner = self.inner.lock().expect("unread lock");
        let id = inner.next;
        inner.next += 1;
        let get =
            Get { open: open.clone(), waiting_since: None, waited: Duration::ZERO, limited: false, flagged: false };
        inner.gets.insert(id, get);
        Watched { unread: self, id }
    }

    /// The flows, in order, of the gets held back by their client since the previous listing
    /// (`now` being this one's time): a chunk waiting since `UNREAD_AFTER` or more, chunks that
    /// waited `READER_LIMITED` of the interval or more, or a wait that found so since.
    pub(crate) fn flows(&self, now: Instant) -> Vec<u64> {
        let mut inner = self.inner.lock().expect("unread lock");
        let since = inner.listed_at;
        let interval = now.saturating_duration_since(since);
        let mut flows = Vec::new();
        for get in inner.gets.values_mut() {
            let waiting = get.waiting_since.map_or(Duration::ZERO, |s| now.saturating_duration_since(s.max(since)));
            let stalled = get.waiting_since.is_some_and(|s| now.saturating_duration_since(s) >= UNREAD_AFTER);
            if !interval.is_zero() {
                let share = (get.waited + waiting).as_secs_f64() >= READER_LIMITED * interval.as_secs_f64();
                get.limited = get.flagged || stalled || share;
            }
            get.waited = Duration::ZERO;
            get.flagged = false;
            if get.limited {
                flows.extend(get.open.lock().expect("open parts lock").iter().map(|f| f.0));
            }
        }
        inner.listed_at = now.max(since);
        flows.sort_unstable();
        flows
    }

    /// A chunk of get `id` waits for its client from `at`.
    fn begin(&self, id: u64, at: Instant) {
        if let Some(get) = self.inner.lock().expect("unread lock").gets.get_mut(&id) {
            get.waiting_since = Some(at);
        }
    }

    /// The wait of get `id` for its client ended at `at`. Whether the get has just become held
    /// back by its client: its chunks waited `READER_LIMITED` of the time since the last listing,
    /// which was not long ago (a heartbeat interval or less), and it was not listed.
    fn end(&self, id: u64, at: Instant) -> bool {
        let mut inner = self.inner.lock().expect("unread lock");
        let since = inner.listed_at;
        let Some(get) = inner.gets.get_mut(&id) else { return false };
        let Some(start) = get.waiting_since.take() else { return false };
        get.waited += at.saturating_duration_since(start.max(since));
        let interval = at.saturating_duration_since(since);
        !get.limited
            && interval >= MIN_INTERVAL
            && get.waited.as_secs_f64() >= READER_LIMITED * interval.as_secs_f64()
            && get.hold_back()
    }

    /// A chunk of get `id` has waited `UNREAD_AFTER`: whether the get has just become held back
    /// by its client (it was not already).
    fn stall(&self, id: u64) -> bool {
        let mut inner = self.inner.lock().expect("unread lock");
        inner.gets.get_mut(&id).is_some_and(Get::hold_back)
    }
}

impl Get {
    /// Found held back by its client between listings: the next lists it. Whether it was not
    /// already.
    fn hold_back(&mut self) -> bool {
        let became = !self.limited;
        (self.limited, self.flagged) = (true, true);
        became
    }
}

/// The least time since the last listing over which waits tell that a client holds its get
/// back between heartbeats: a wait right after a listing tells little (a client busy for a few
/// milliseconds is not slow).
const MIN_INTERVAL: Duration = Duration::from_millis(50);

impl Watched<'_> {
    /// Waits for `send` (room in the client's queue, which was full) for at most `limit`,
    /// counting the wait as the client's: when the get becomes held back by its client (this wait
    /// reaches `UNREAD_AFTER`, or its waits since the last heartbeat add up to `READER_LIMITED` of
    /// the time since), the session is told at once. What `send` gave, if it gave it in time.
    pub(crate) async fn deliver<T, E>(&self, send: impl Future<Output = Result<T, E>>, limit: Duration) -> Option<T> {
        self.unread.begin(self.id, Instant::now());
        let mut send = std::pin::pin!(send);
        let taken = tokio::select! {
            r = &mut send => Some(r.ok()),
            _ = tokio::time::sleep(UNREAD_AFTER.min(limit)) => None,
        };
        let taken = match taken {
            Some(taken) => taken,
            None => {
                if self.unread.stall(self.id) {
                    self.unread.changed.notify_one();
                }
                tokio::time::timeout(limit.saturating_sub(UNREAD_AFTER), send).await.ok().and_then(Result::ok)
            }
        };
        if self.unread.end(self.id, Instant::now()) {
            self.unread.changed.notify_one();
        }
        taken
    }
}

impl Drop for Watched<'_> {
    fn drop(&mut self) {
        self.unread.inner.lock().expect("unread lock").gets.remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn open(flows: &[u64]) -> OpenParts {
        Arc::new(Mutex::new(flows.iter().map(|&f| FlowId(f)).collect()))
    }

    /// An `Unread` whose last listing was at `t0`.
    fn listed_at(t0: Instant) -> Unread {
        let unread = Unread::default();
        unread.inner.lock().unwrap().listed_at = t0;
        unread
    }

    /// A get is listed, with the flows open at the listing, when its chunks waited for its client
    /// a tenth of the interval since the previous listing or more (a wait in progress counted to
    /// the listing, one that spans a listing only from it); each interval is judged on its own,
    /// so a client that catches up is listed no longer; a get no longer watched is not listed.
    #[test]
    fn a_get_is_listed_while_its_chunks_wait_for_its_client() {
        let t0 = Instant::now();
        let unread = listed_at(t0);
        let (a, b) = (open(&[7, 3]), open(&[5]));
        let (wa, wb) = (unread.watch(&a), unread.watch(&b));
        // Interval 1 (100 ms): a's chunks waited 6 + 5 ms, b's 9 ms.
        unread.begin(wa.id, t0 + ms(10));
        unread.end(wa.id, t0 + ms(16));
        unread.begin(wa.id, t0 + ms(50));
        unread.end(wa.id, t0 + ms(55));
        unread.begin(wb.id, t0 + ms(20));
        unread.end(wb.id, t0 + ms(29));
        assert_eq!(unread.flows(t0 + ms(100)), vec![3, 7], "11 ms of 100 is held back, 9 is not");
        // Interval 2 (100 ms): a's client keeps up; b's chunk waits from 180 ms to the listing
        // and on, 20 of the interval's 100 ms.
        unread.begin(wb.id, t0 + ms(180));
        a.lock().unwrap().remove(&FlowId(7));
        assert_eq!(unread.flows(t0 + ms(200)), vec![5], "a caught up; b's wait in progress counts");
        // Interval 3: b's wait ends at 205 ms: 5 ms of this interval (its first 20 were the last
        // one's), under a tenth of 100.
        unread.end(wb.id, t0 + ms(205));
        assert_eq!(unread.flows(t0 + ms(300)), Vec::<u64>::new());
        // Interval 4: both wait half of it; a is no longer watched.
        unread.begin(wa.id, t0 + ms(300));
        unread.end(wa.id, t0 + ms(350));
        unread.begin(wb.id, t0 + ms(350));
        unread.end(wb.id, t0 + ms(400));
        drop(wa);
        assert_eq!(unread.flows(t0 + ms(400)), vec![5]);
        drop(wb);
        assert_eq!(unread.flows(t0 + ms(500)), Vec::<u64>::new());
        assert!(unread.inner.lock().unwrap().gets.is_empty(), "no trace of a get no longer watched");
    }

    /// A chunk left untaken for `UNREAD_AFTER` lists its get however long the interval (here
    /// 10 s, of which 150 ms is under a tenth), until it is taken.
    #[test]
    fn a_chunk_left_untaken_lists_its_get_however_long_the_interval() {
        let t0 = Instant::now();
        let listing = t0 + Duration::from_secs(10);
        let a = open(&[4]);
        for (waited, listed) in [(UNREAD_AFTER - ms(1), Vec::<u64>::new()), (UNREAD_AFTER, vec![4])] {
            let unread = listed_at(t0);
            let w = unread.watch(&a);
            unread.begin(w.id, listing - waited);
            assert_eq!(unread.flows(listing), listed, "a chunk waiting {waited:?} of 10 s");
            unread.end(w.id, listing + ms(1));
            assert_eq!(unread.flows(t0 + Duration::from_secs(20)), Vec::<u64>::new(), "taken");
        }
    }

    /// The end of a wait says the get has just become held back once: when its waits add up to a
    /// tenth of the time since the listing, at least `MIN_INTERVAL` after it, and not again while
    /// it stays so; the next listing lists it, however long its interval grew; a listing that
    /// finds it keeping up lets it say so again. A stall says so once too.
    #[test]
    fn a_get_held_back_between_listings_tells_the_session_once() {
        let t0 = Instant::now();
        let unread = listed_at(t0);
        let a = open(&[1]);
        let w = unread.watch(&a);
        unread.begin(w.id, t0);
        assert!(!unread.end(w.id, t0 + ms(40)), "40 ms after a listing tells nothing yet");
        unread.begin(w.id, t0 + ms(45));
        assert!(unread.end(w.id, t0 + ms(50)), "45 ms of 50");
        unread.begin(w.id, t0 + ms(60));
        assert!(!unread.end(w.id, t0 + ms(65)), "told already");
        assert_eq!(unread.flows(t0 + ms(100)), vec![1]);
        unread.begin(w.id, t0 + ms(150));
        assert!(!unread.end(w.id, t0 + ms(160)), "still listed");
        assert_eq!(unread.flows(t0 + ms(300)), Vec::<u64>::new(), "10 ms of 200");
        unread.begin(w.id, t0 + ms(310));
        assert!(unread.end(w.id, t0 + ms(350)), "40 ms of 50 after it kept up");
        assert_eq!(unread.flows(t0 + ms(1_000)), vec![1], "40 ms of 700, but told");
        assert_eq!(unread.flows(t0 + ms(1_100)), Vec::<u64>::new());
        assert!(unread.stall(w.id) && !unread.stall(w.id));
        assert_eq!(unread.flows(t0 + ms(1_200)), vec![1]);
    }

    /// Delivered at once, a chunk leaves no trace; one the client leaves untaken tells the
    /// session after `UNREAD_AFTER` (not before) and lists the get then, and is given up at the
    /// limit.
    #[tokio::test]
    async fn a_chunk_left_untaken_lists_its_get_and_tells_the_session() {
        let unread = Unread::default();
        let open = open(&[9]);
        let w = unread.watch(&open);
        assert_eq!(w.deliver(async { Ok::<u8, ()>(7) }, Duration::from_secs(1)).await, Some(7));
        let started = Instant::now();
        let never = std::future::pending::<Result<(), ()>>();
        let given_up = w.deliver(never, UNREAD_AFTER * 3);
        let watch = async {
            unread.changed.notified().await;
            (started.elapsed(), unread.flows(Instant::now()))
        };
        let (taken, (told, listed)) = tokio::join!(given_up, watch);
        assert_eq!(taken, None, "given up at the limit");
        assert!(told >= UNREAD_AFTER, "told after {told:?}");
        assert_eq!(listed, vec![9], "listed when the session is told");
    }
}
