//! The connections a server accepts: a member may keep at most [`MAX_CONNECTIONS_PER_MEMBER`]
//! gRPC connections open at once, so that one certificate's holder cannot take the server's file
//! descriptors from every other member, and an acceptor that fails (out of file descriptors)
//! waits before it tries again ([`AcceptFailures`]) rather than spinning.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::server::TlsStream;
use tonic::transport::server::Connected;

/// The most gRPC connections one member (one certificate's role) may hold open on one server.
/// A client opens one per endpoint it talks to (many executors may share one certificate),
/// an agent a few; a member past the cap is
/// refused a new connection until one of its others closes.
pub(crate) const MAX_CONNECTIONS_PER_MEMBER: usize = 1024;

/// How long an acceptor waits after a failed accept before trying again.
pub const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// An acceptor's failed accepts: each is followed by [`ACCEPT_BACKOFF`] of waiting, and logged
/// as a warning at most once a second (the rest at debug).
#[derive(Debug, Default)]
pub struct AcceptFailures {
    warned: Option<Instant>,
}

impl AcceptFailures {
    /// The next connection `listener` accepts for `what` (e.g. "gRPC", "data plane"), waiting
    /// [`ACCEPT_BACKOFF`] after each failed accept (out of file descriptors, most likely: trying
    /// again at once would spin). Cancel-safe, as `TcpListener::accept` is.
    pub async fn accept(&mut self, listener: &TcpListener, what: &str) -> (TcpStream, SocketAddr) {
        loop {
            match listener.accept().await {
                Ok(accepted) => return accepted,
                Err(e) => {
                    self.failed(what, &e);
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
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

/// The open connections of each member, by its role's URI.
#[derive(Clone, Debug, Default)]
pub(crate) struct Members(Arc<Mutex<HashMap<String, usize>>>);

impl Members {
    /// Takes a place for one more connection of `member`, or `None` if it holds the most already.
    pub(crate) fn admit(&self, member: String) -> Option<Place> {
        let mut open = self.0.lock().expect("connection count lock");
        let n = open.entry(member.clone()).or_insert(0);
        if *n >= MAX_CONNECTIONS_PER_MEMBER {
            return None;
        }
        *n += 1;
        Some(Place { member, members: self.clone() })
    }

    /// The connections `member` holds open.
    #[cfg(test)]
    fn open(&self, member: &str) -> usize {
        self.0.lock().expect("connection count lock").get(member).copied().unwrap_or(0)
    }
}

/// One connection's place among its member's, given back when it is dropped.
#[derive(Debug)]
pub(crate) struct Place {
    member: String,
    members: Members,
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut open = self.members.0.lock().expect("connection count lock");
        if let Some(n) = open.get_mut(&self.member) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.member);
            }
        }
    }
}

/// A TLS connection holding its place until it closes.
#[derive(Debug)]
pub(crate) struct Counted {
    pub(crate) stream: TlsStream<TcpStream>,
    pub(crate) _place: Place,
}

impl Connected for Counted {
    type ConnectInfo = <TlsStream<TcpStream> as Connected>::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.stream.connect_info()
    }
}

impl AsyncRead for Counted {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Counted {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_member_holds_at_most_the_cap_and_gets_its_places_back() {
        let members = Members::default();
        let held: Vec<Place> =
            (0..MAX_CONNECTIONS_PER_MEMBER).map(|_| members.admit("client-a".into()).unwrap()).collect();
        assert!(members.admit("client-a".into()).is_none(), "past the cap");
        // Another member is not held back by the first.
        let other = members.admit("client-b".into()).unwrap();
        assert_eq!(members.open("client-b"), 1);
        drop(held);
        assert_eq!(members.open("client-a"), 0);
        assert!(members.admit("client-a".into()).is_some(), "places come back as connections close");
        drop(other);
        assert_eq!(members.open("client-b"), 0);
    }
}
