//! The connections a server accepts: a member may keep at most [`MAX_CONNECTIONS_PER_MEMBER`]
//! gRPC connections open at once (in token mode, where no certificate names members, a peer
//! address group at most [`MAX_CONNECTIONS_PER_ADDRESS`]), so that one peer cannot take the
//! server's file descriptors from every other; connections not yet through their TLS handshake
//! (in token mode, not yet past their first bytes) are bounded per peer address and in all
//! ([`Unproven`]), so that peers without a certificate or the token cannot take them either;
//! and an acceptor that fails (out of file descriptors) waits before it tries again
//! ([`AcceptFailures`]) rather than spinning, and stops on a failure that lasts.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tonic::transport::server::Connected;

/// The most gRPC connections one member (one certificate's role) may hold open on one server.
/// A client opens one per endpoint it talks to (many executors may share one certificate),
/// an agent a few; a member past the cap is
/// refused a new connection until one of its others closes.
pub(crate) const MAX_CONNECTIONS_PER_MEMBER: usize = 1024;

/// The most gRPC connections one peer address group ([`peer_group`]: an IPv4 address, an IPv6
/// /64) may hold open on one server in token mode, where no certificate tells members apart.
/// Behind one address are all the members of its host (a NAT's, a test cluster's on loopback):
/// its clients, as many as one certificate's holders may be over TLS (1,024 connections, e.g.
/// one framework's executors), and its agent and an operator besides. Twice the per-member cap
/// leaves them that room, while one peer still holds at most 2,048 established connections
/// (and [`UNPROVEN_PER_ADDRESS`] waiting for their first bytes) of the file descriptors the
/// others need.
pub(crate) const MAX_CONNECTIONS_PER_ADDRESS: usize = 2 * MAX_CONNECTIONS_PER_MEMBER;

/// How long an acceptor waits after a failed accept before trying again.
pub const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// An acceptor's failed accepts: each that passes (out of file descriptors, most likely) is
/// followed by [`ACCEPT_BACKOFF`] of waiting, since trying again at once would spin a core, and
/// logged as a warning at most once a second (the rest at debug); one that lasts (the listening
/// socket itself unusable: `EBADF`, `ENOTSOCK`, `EINVAL`, `EFAULT`) ends accepting.
#[derive(Debug, Default)]
pub struct AcceptFailures {
    warned: Option<Instant>,
}

impl AcceptFailures {
    /// What `accept` (a listener's accept, in production) next gives for `what` (e.g. "gRPC",
    /// "data plane"), trying again after each failure that passes; the failure that lasts is
    /// returned. Cancel-safe if `accept`'s future is, as `TcpListener::accept`'s is.
    pub async fn accept<T, A>(&mut self, what: &str, mut accept: impl FnMut() -> A) -> io::Result<T>
    where
        A: Future<Output = io::Result<T>>,
    {
        loop {
            match accept().await {
                Err(error) if !lasting(&error) => {
                    self.failed(what, &error);
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
                accepted => return accepted,
            }
        }
    }

    /// Logs a failed accept of `what`.
    fn failed(&mut self, what: &str, error: &io::Error) {
        let now = Instant::now();
        if self.warned.is_none_or(|t| now.duration_since(t) >= Duration::from_secs(1)) {
            self.warned = Some(now);
            tracing::warn!(%error, "accepting a {what} connection failed; retrying every {ACCEPT_BACKOFF:?}");
        } else {
            tracing::debug!(%error, "accepting a {what} connection failed");
        }
    }
}

/// Whether a failed accept lasts: the listening socket itself is unusable (its descriptor
/// closed or not a socket, `EBADF`, `ENOTSOCK`; no longer listening, `EINVAL`, as after
/// `shutdown(2)`; `EFAULT`), so that trying again would fail the same way forever. Every other
/// failure passes: out of descriptors or memory (`EMFILE`, `ENFILE`, `ENOBUFS`, `ENOMEM`), a
/// connection gone before it was taken (`ECONNABORTED`, `EPROTO` and the network errors
/// accept(2) passes on from a new connection), a firewall's refusal (`EPERM`), an interrupted
/// call, and an error with no OS code.
pub(crate) fn lasting(error: &io::Error) -> bool {
    use rustix::io::Errno;
    matches!(Errno::from_io_error(error), Some(Errno::BADF | Errno::NOTSOCK | Errno::INVAL | Errno::FAULT))
}

/// The open connections of each holder (a member, by its role's URI; an agent's data-plane
/// peer), so that one holds at most its bound.
#[derive(Debug)]
pub struct Shares<K>(Arc<Mutex<HashMap<K, usize>>>);

impl<K> Default for Shares<K> {
    fn default() -> Shares<K> {
        Shares(Arc::default())
    }
}

impl<K> Clone for Shares<K> {
    fn clone(&self) -> Shares<K> {
        Shares(self.0.clone())
    }
}

impl<K: Eq + std::hash::Hash + Clone> Shares<K> {
    /// Takes a place for one more connection of `holder`, or `None` if it holds `most` already.
    pub fn admit(&self, holder: K, most: usize) -> Option<Share<K>> {
        let mut open = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let n = open.entry(holder.clone()).or_insert(0);
        if *n >= most {
            return None;
        }
        *n += 1;
        Some(Share { holder, shares: self.clone() })
    }

    /// The connections `holder` holds open.
    pub fn held(&self, holder: &K) -> usize {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(holder).copied().unwrap_or(0)
    }

    /// How many holders hold a connection.
    pub fn holders(&self) -> usize {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).len()
    }
}

/// One connection's place among its holder's, given back when it is dropped.
#[derive(Debug)]
pub struct Share<K: Eq + std::hash::Hash> {
    holder: K,
    shares: Shares<K>,
}

impl<K: Eq + std::hash::Hash> Drop for Share<K> {
    fn drop(&mut self) {
        let mut open = self.shares.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(n) = open.get_mut(&self.holder) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.holder);
            }
        }
    }
}

/// An established connection (TLS, or plain in token mode) holding its place among its holder's
/// until it closes.
#[derive(Debug)]
pub(crate) struct Counted<S, K: Eq + std::hash::Hash> {
    pub(crate) stream: S,
    pub(crate) _place: Share<K>,
}

impl<S: Connected, K: Eq + std::hash::Hash> Connected for Counted<S, K> {
    type ConnectInfo = S::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.stream.connect_info()
    }
}

impl<S: AsyncRead + Unpin, K: Eq + std::hash::Hash + Unpin> AsyncRead for Counted<S, K> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin, K: Eq + std::hash::Hash + Unpin> AsyncWrite for Counted<S, K> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

pub use coflow_core::peer_group;

/// The most connections from one address waiting for or in their TLS handshake (in token mode,
/// for their first bytes); one more is closed at once. Members that share an address (a test's
/// loopback) open many at once when many flows start together, so the bound is wide; what it
/// stops is one peer without a certificate (or the token) holding every connection the server
/// will take.
pub const UNPROVEN_PER_ADDRESS: usize = 1024;

/// The most handshakes (in token mode, waits for first bytes) from one address run at once; its
/// other connections wait their turn.
pub const HANDSHAKES_PER_ADDRESS: usize = 64;

/// The most connections waiting for or in their TLS handshake (in token mode, for their first
/// bytes), from every address.
pub const UNPROVEN: usize = 4096;

/// Per peer address, how many of its connections hold a place and its turns to handshake.
type ByAddress = std::collections::HashMap<std::net::IpAddr, (usize, Arc<tokio::sync::Semaphore>)>;

/// The connections a server took that are not yet through their TLS handshake (in token mode,
/// that have sent nothing yet): how many in all, and per address (see [`peer_group`]).
#[derive(Debug, Default)]
pub struct Unproven {
    by_address: std::sync::Mutex<(usize, ByAddress)>,
}

/// A connection's place among the [`Unproven`], given back when dropped.
#[derive(Debug)]
pub struct Pending {
    of: Arc<Unproven>,
    address: std::net::IpAddr,
    turns: Arc<tokio::sync::Semaphore>,
}

impl Unproven {
    /// A place for a connection from `address`, or none past the bounds.
    pub fn enter(self: &Arc<Self>, address: std::net::IpAddr) -> Option<Pending> {
        let mut guard = self.by_address.lock().expect("unproven lock");
        let (total, by_address) = &mut *guard;
        if *total >= UNPROVEN {
            return None;
        }
        let entry = by_address
            .entry(address)
            .or_insert_with(|| (0, Arc::new(tokio::sync::Semaphore::new(HANDSHAKES_PER_ADDRESS))));
        if entry.0 >= UNPROVEN_PER_ADDRESS {
            return None;
        }
        entry.0 += 1;
        *total += 1;
        Some(Pending { of: self.clone(), address, turns: entry.1.clone() })
    }

    /// How many connections from `address` hold a place.
    #[cfg(test)]
    fn held(&self, address: std::net::IpAddr) -> usize {
        self.by_address.lock().expect("unproven lock").1.get(&address).map_or(0, |e| e.0)
    }
}

impl Pending {
    /// Waits for a turn to handshake among its address's connections.
    async fn turn(&self) -> Option<tokio::sync::SemaphorePermit<'_>> {
        self.turns.acquire().await.ok()
    }

    /// Runs `handshake` in its address's turn, all within `within` (the wait for the turn
    /// included), then gives the place back; none if the time ran out.
    pub async fn handshake<T>(self, within: Duration, handshake: impl Future<Output = T>) -> Option<T> {
        tokio::time::timeout(within, async {
            let _turn = self.turn().await;
            handshake.await
        })
        .await
        .ok()
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        let mut guard = self.of.by_address.lock().expect("unproven lock");
        let (total, by_address) = &mut *guard;
        *total -= 1;
        if let Some(entry) = by_address.get_mut(&self.address) {
            entry.0 -= 1;
            if entry.0 == 0 {
                by_address.remove(&self.address);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An errno as an `io::Error`, as an accept returns it.
    fn os(errno: rustix::io::Errno) -> std::io::Error {
        std::io::Error::from_raw_os_error(errno.raw_os_error())
    }

    #[test]
    fn only_failures_of_the_listening_socket_itself_last() {
        use rustix::io::Errno;
        for passes in [Errno::MFILE, Errno::NFILE, Errno::NOBUFS, Errno::NOMEM, Errno::CONNABORTED, Errno::PROTO] {
            assert!(!lasting(&os(passes)), "{passes:?} passes");
        }
        for passes in [Errno::PERM, Errno::INTR, Errno::NETDOWN, Errno::HOSTUNREACH, Errno::TIMEDOUT] {
            assert!(!lasting(&os(passes)), "{passes:?} passes");
        }
        assert!(!lasting(&std::io::Error::other("no OS code")), "an error with no OS code passes");
        for lasts in [Errno::BADF, Errno::NOTSOCK, Errno::INVAL, Errno::FAULT] {
            assert!(lasting(&os(lasts)), "{lasts:?} lasts");
        }
    }

    #[tokio::test]
    async fn failed_accepts_that_pass_are_retried_after_a_back_off_and_one_that_lasts_ends_accepting() {
        use rustix::io::Errno;
        let mut results = std::collections::VecDeque::from([
            Err(os(Errno::MFILE)),
            Err(os(Errno::CONNABORTED)),
            Ok(7),
            Err(os(Errno::INVAL)),
        ]);
        let mut next = move || std::future::ready(results.pop_front().expect("no accept after the last"));
        let mut failures = AcceptFailures::default();
        let started = Instant::now();
        assert_eq!(failures.accept("test", &mut next).await.unwrap(), 7, "out of descriptors, then accepted");
        assert!(started.elapsed() >= 2 * ACCEPT_BACKOFF, "backed off each time: {:?}", started.elapsed());
        let lasting = failures.accept("test", &mut next).await.expect_err("not retried");
        assert_eq!(lasting.raw_os_error(), Some(Errno::INVAL.raw_os_error()));
    }

    #[test]
    fn unproven_connections_are_bounded_per_address_and_in_all_and_given_back() {
        let unproven = Arc::new(Unproven::default());
        let (a, b) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let mut from_a: Vec<Pending> = (0..UNPROVEN_PER_ADDRESS).map(|_| unproven.enter(a).expect("a place")).collect();
        assert!(unproven.enter(a).is_none(), "one address holds at most its bound");
        assert!(unproven.enter(b).is_some(), "another address is not held up by it");
        from_a.pop();
        assert_eq!(unproven.held(a), UNPROVEN_PER_ADDRESS - 1);
        assert!(unproven.enter(a).is_some(), "a place given back is taken again");
        drop(from_a);
        assert_eq!(unproven.held(a), 0);
        let many: Vec<Pending> = (0..UNPROVEN)
            .map(|i| unproven.enter(std::net::IpAddr::from([10, 1, (i >> 8) as u8, i as u8])).expect("a place"))
            .collect();
        assert!(unproven.enter(a).is_none(), "at most UNPROVEN in all");
        assert_eq!(unproven.held(a), 0, "a refused address keeps no entry");
        drop(many);
        assert!(unproven.by_address.lock().unwrap().1.is_empty() && unproven.by_address.lock().unwrap().0 == 0);
    }

    #[tokio::test]
    async fn an_address_handshakes_a_bounded_number_at_once() {
        let unproven = Arc::new(Unproven::default());
        let a = "10.0.0.1".parse().unwrap();
        let places: Vec<Pending> = (0..=HANDSHAKES_PER_ADDRESS).map(|_| unproven.enter(a).unwrap()).collect();
        let mut turns = Vec::new();
        for p in &places[..HANDSHAKES_PER_ADDRESS] {
            turns.push(p.turn().await.expect("a turn"));
        }
        let last = &places[HANDSHAKES_PER_ADDRESS];
        assert!(tokio::time::timeout(Duration::from_millis(50), last.turn()).await.is_err(), "waits its turn");
        turns.pop();
        assert!(tokio::time::timeout(Duration::from_millis(50), last.turn()).await.is_ok(), "then takes it");
    }

    #[test]
    fn a_member_holds_at_most_the_cap_and_gets_its_places_back() {
        let members = Shares::<String>::default();
        let admit = |m: &str| members.admit(m.to_string(), MAX_CONNECTIONS_PER_MEMBER);
        let held: Vec<Share<String>> = (0..MAX_CONNECTIONS_PER_MEMBER).map(|_| admit("client-a").unwrap()).collect();
        assert!(admit("client-a").is_none(), "past the cap");
        // Another member is not held back by the first.
        let other = admit("client-b").unwrap();
        assert_eq!(members.held(&"client-b".to_string()), 1);
        drop(held);
        assert_eq!(members.held(&"client-a".to_string()), 0);
        assert!(admit("client-a").is_some(), "places come back as connections close");
        drop(other);
        assert_eq!(members.held(&"client-b".to_string()), 0);
    }
}
