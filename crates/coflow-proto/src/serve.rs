//! Serving a gRPC router until shutdown, the same way in every service: one acceptor
//! ([`incoming`]) bounds the connections of both modes, each proving itself (the whole HTTP/2
//! client preface, after a TLS handshake with TLS) within [`crate::HANDSHAKE_TIMEOUT`] before it
//! takes a place among its holder's; an acceptor that ends on its own (a panic, a listener failed
//! for good) stops the server with a [`ServeError`]. And [`TypedErrors`], which names the error
//! kind of the refusals tonic makes before a service runs.

use std::future::Future;
use std::hash::Hash;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::{Connected, Router};

use crate::conns::{Counted, MAX_CONNECTIONS_PER_ADDRESS, MAX_CONNECTIONS_PER_MEMBER, Shares};
use crate::tls::{HANDSHAKE_TIMEOUT, Refusal, RefusalLog};

/// How often a server pings a connection's peer, and how long it waits for the answer before it
/// closes the connection: a peer whose host died (a half-open connection) gives its place
/// among its member's connections back within about a minute.
pub const SERVER_KEEPALIVE: (Duration, Duration) = (Duration::from_secs(30), Duration::from_secs(20));

/// The most calls one HTTP/2 connection carries at once (its `SETTINGS_MAX_CONCURRENT_STREAMS`),
/// as many as one holder may keep open at a service ([`crate::MAX_OPEN_REQUESTS_PER_HOLDER`]): a
/// client's calls past it wait at the client (tonic, grpc-java and h2 queue them) until one
/// ends. A get holds its call while its flow waits, so an executor of many tasks sharing one
/// connection needs room for all their gets. Without a bound, h2 ends the whole connection
/// (`GOAWAY ENHANCE_YOUR_CALM`, every call on it failing) once the small messages it holds for
/// calls not yet read pass its budget for them: half of the [`CONNECTION_WINDOW`], at 256 bytes
/// a message. A unary call or a get leaves at most one such message unread (tonic sends its
/// message, then ends the stream in an empty frame, which is not counted; a put stream's chunks
/// are read as they come), so the bound keeps within half of the budget.
pub const MAX_CALLS_PER_CONNECTION: u32 = crate::MAX_OPEN_REQUESTS_PER_HOLDER as u32;

/// The HTTP/2 flow-control window of a whole connection: 4 MiB, so that h2's budget for small
/// messages not yet read covers [`MAX_CALLS_PER_CONNECTION`] calls twice over.
pub const CONNECTION_WINDOW: u32 = 4 << 20;

const _: () = assert!(MAX_CALLS_PER_CONNECTION as usize * 256 * 2 <= CONNECTION_WINDOW as usize / 2);

/// The gRPC server every service builds its router on: Nagle off (a rate push must not wait
/// 40 ms), the peer of every connection pinged ([`SERVER_KEEPALIVE`]), and at most
/// [`MAX_CALLS_PER_CONNECTION`] calls on a connection at once. tonic applies the TCP settings
/// only to its own acceptor; [`serve_until_stopped`]'s sets the same ones itself.
pub fn server() -> tonic::transport::Server {
    let (every, answer_within) = SERVER_KEEPALIVE;
    tonic::transport::Server::builder()
        .tcp_nodelay(true)
        .tcp_keepalive(Some(every))
        .http2_keepalive_interval(Some(every))
        .http2_keepalive_timeout(Some(answer_within))
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_concurrent_streams(MAX_CALLS_PER_CONNECTION)
}

/// How long a server waits, once stopped, for its connections to close: a call in flight has
/// that long to finish, and a connection that never said anything (hyper waits for an HTTP/2
/// preface before it can close one gracefully) is dropped at its end.
pub const SHUTDOWN_DRAIN: Duration = Duration::from_secs(5);

/// Serves `router` on `listener` until `shutdown` resolves or `stop` is raised, then lets
/// in-flight calls finish within [`SHUTDOWN_DRAIN`]. `stop` is raised on the way out in every
/// case, also when the server fails on its own, so that the caller's other tasks (which watch
/// it) end too. Connections come through one acceptor (`incoming`): with `tls`, each must
/// complete a mutual TLS handshake (see [`crate::TlsContext::grpc_server_config`]) and send the
/// whole HTTP/2 client preface inside it, and its member (its certificate's role) holds at most
/// 1,024; in token mode, each must send the preface and its peer address group holds at most
/// 2,048 (see `conns::MAX_CONNECTIONS_PER_ADDRESS`); both within [`HANDSHAKE_TIMEOUT`].
///
/// Ok only when stopped (by `shutdown` or `stop`): if the acceptor ends on its own (it panicked,
/// or the listener failed for good), nothing would take a connection any more, so the server
/// stops the same way and says why ([`ServeError`]) rather than serve on without a listener or
/// end as if asked to.
pub async fn serve_until_stopped(
    router: Router,
    listener: TcpListener,
    tls: Option<&crate::TlsContext>,
    stop: &watch::Sender<bool>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    let (serve, acceptor) = match tls {
        None => serve_proven(router, listener, first_bytes, MAX_CONNECTIONS_PER_ADDRESS, Arc::default(), stop),
        Some(t) => {
            let acceptor = tokio_rustls::TlsAcceptor::from(t.grpc_server_config());
            let log = t.refusals().clone();
            let handshake = move |sock, peer| tls_handshake(acceptor.clone(), log.clone(), sock, peer);
            serve_proven(router, listener, handshake, MAX_CONNECTIONS_PER_MEMBER, t.refusals().clone(), stop)
        }
    };
    until_stopped(serve, acceptor, stop, shutdown).await
}

/// Why a server stopped other than by being asked to.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// tonic's server failed.
    #[error(transparent)]
    Transport(#[from] tonic::transport::Error),
    /// The acceptor's task panicked (or was cancelled): no connection would be taken any more.
    #[error("the acceptor ended unexpectedly: {0}")]
    AcceptorEnded(String),
    /// Accepting failed in a way that lasts (`EBADF`, `ENOTSOCK`, `EINVAL`, `EFAULT`): the
    /// listening socket is closed or no longer listening. Failures that pass (out of file
    /// descriptors, a connection aborted) are retried after [`crate::ACCEPT_BACKOFF`] instead.
    #[error("the listener failed: {0}")]
    ListenerFailed(#[source] std::io::Error),
}

/// A server serving its connections, one type for both modes.
type Serving = std::pin::Pin<Box<dyn Future<Output = Result<(), tonic::transport::Error>> + Send>>;

/// The acceptor's task ([`incoming`]): Ok when it was asked to end, or the error that ended
/// accepting for good.
type Acceptor = tokio::task::JoinHandle<std::io::Result<()>>;

/// `router` serving the connections [`incoming`] accepts on `listener` and proves with `prove`
/// (at most `most` held per holder, refusals logged in `refusals`) until `stop` is raised; and
/// the acceptor's task. Generic over the modes' streams, where a closure could not be.
fn serve_proven<S, K, P, F>(
    router: Router,
    listener: TcpListener,
    prove: P,
    most: usize,
    refusals: Arc<RefusalLog>,
    stop: &watch::Sender<bool>,
) -> (Serving, Acceptor)
where
    P: Fn(TcpStream, SocketAddr) -> F + Send + 'static,
    F: Future<Output = Option<(S, K)>> + Send + 'static,
    S: AsyncRead + AsyncWrite + Connected + Unpin + Send + 'static,
    K: Eq + Hash + Clone + std::fmt::Display + Unpin + Send + 'static,
{
    let (incoming, acceptor) = incoming(listener, prove, HANDSHAKE_TIMEOUT, most, refusals, stop.subscribe());
    let mut stopped = stop.subscribe();
    let until_stopped = async move {
        let _ = stopped.wait_for(|&s| s).await;
    };
    (Box::pin(router.serve_with_incoming_shutdown(incoming, until_stopped)), acceptor)
}

/// Runs `serve` until `shutdown` resolves, `stop` is raised or `acceptor` ends, then raises
/// `stop` and lets it drain within [`SHUTDOWN_DRAIN`]; an error if the acceptor ended on its
/// own. The acceptor is watched, not only the stream it feeds: tonic takes the stream's end for
/// a stop, and then serves the connections it holds for as long as they stay open.
async fn until_stopped(
    mut serve: Serving,
    mut acceptor: Acceptor,
    stop: &watch::Sender<bool>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    let mut shutdown = std::pin::pin!(shutdown);
    let mut stopped = stop.subscribe();
    let (served, ended) = tokio::select! {
        r = &mut serve => (r, None),
        // Stopped from outside (`stop`) or by `shutdown`, or the acceptor ended (as it does once
        // `stop` is raised, or on its own): the server drains within its bound.
        ended = async {
            tokio::select! {
                _ = &mut shutdown => None,
                _ = stopped.wait_for(|&s| s) => None,
                ended = &mut acceptor => Some(ended),
            }
        } => {
            let _ = stop.send(true);
            match tokio::time::timeout(SHUTDOWN_DRAIN, &mut serve).await {
                Ok(r) => (r, ended),
                Err(_) => {
                    tracing::info!("connections still open {SHUTDOWN_DRAIN:?} after the stop are dropped");
                    (Ok(()), ended)
                }
            }
        }
    };
    let _ = stop.send(true);
    let ended = match ended {
        Some(ended) => ended,
        None => acceptor.await,
    };
    match ended {
        Ok(Ok(())) => Ok(served?),
        Ok(Err(e)) => Err(ServeError::ListenerFailed(e)),
        Err(e) => Err(ServeError::AcceptorEnded(e.to_string())),
    }
}

/// The proven connections an acceptor hands to tonic.
pub(crate) type Proven<S, K> = ReceiverStream<Result<Counted<S, K>, std::io::Error>>;

/// A TLS connection's proof: its mutual TLS handshake (refusals logged once per peer), then the
/// whole HTTP/2 client preface inside it ([`preface`]), within the same deadline; and its
/// member, by the role its certificate names. Without the preface a peer that completed the
/// handshake and said nothing would be held by hyper, which waits for it with no deadline and
/// pings only once it came.
async fn tls_handshake(
    acceptor: tokio_rustls::TlsAcceptor,
    refusals: Arc<RefusalLog>,
    sock: TcpStream,
    peer: SocketAddr,
) -> Option<(Rewound<tokio_rustls::server::TlsStream<TcpStream>>, String)> {
    let stream = crate::tls::accept(&acceptor, sock, peer, "gRPC", &refusals).await?;
    let member = crate::tls::peer_role(stream.get_ref().1.peer_certificates())
        .map_or_else(|| "no role".to_string(), |r| r.uri());
    Some((preface(stream).await?, member))
}

/// `stream` once it has brought the whole HTTP/2 client preface, the preface left to be read
/// again; None if it closes first or sends anything else.
async fn preface<S: AsyncRead + Unpin>(mut stream: S) -> Option<Rewound<S>> {
    use tokio::io::AsyncReadExt;
    let mut head = vec![0u8; PREFACE.len()];
    let mut got = 0;
    while got < head.len() {
        let n = stream.read(&mut head[got..]).await.ok()?;
        if n == 0 || head[got..got + n] != PREFACE[got..got + n] {
            return None;
        }
        got += n;
    }
    Some(Rewound { head, at: 0, inner: stream })
}

/// A stream whose first bytes were read to check them, handed on with those bytes to be read
/// again first.
pub(crate) struct Rewound<S> {
    head: Vec<u8>,
    at: usize,
    inner: S,
}

impl<S: AsyncRead + Unpin> AsyncRead for Rewound<S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let this = &mut *self;
        if this.at < this.head.len() {
            let n = (this.head.len() - this.at).min(buf.remaining());
            buf.put_slice(&this.head[this.at..this.at + n]);
            this.at += n;
            return std::task::Poll::Ready(Ok(()));
        }
        std::pin::Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Rewound<S> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl<S: Connected> Connected for Rewound<S> {
    type ConnectInfo = S::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

/// The HTTP/2 client connection preface (RFC 9113, section 3.4), which a gRPC client sends first.
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// A plain (token-mode) connection's proof: the whole HTTP/2 client preface, peeked at and left
/// for the server to read (hyper waits for all of it with no deadline of its own, so one byte
/// would not do), and its peer's address group ([`crate::peer_group`]). None if the peer closes
/// first or sends anything else. A preface that comes in pieces is looked at again after pauses
/// from 1 ms doubling to 100 ms, since a socket with bytes waiting stays readable.
async fn first_bytes(sock: TcpStream, peer: SocketAddr) -> Option<(TcpStream, IpAddr)> {
    let mut seen = [0u8; PREFACE.len()];
    let mut pause = Duration::from_millis(1);
    loop {
        let n = sock.peek(&mut seen).await.ok()?;
        if n == 0 || seen[..n] != PREFACE[..n] {
            return None;
        }
        if n == PREFACE.len() {
            return Some((sock, crate::peer_group(peer.ip())));
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(100));
    }
}

/// Sets the TCP options of [`server`] on an accepted socket: Nagle off, and keepalive probes
/// after [`SERVER_KEEPALIVE`]'s interval of silence (as tonic sets them on the sockets its own
/// acceptor takes).
fn tune(sock: &TcpStream) {
    sock.set_nodelay(true).ok();
    rustix::net::sockopt::set_socket_keepalive(sock, true).ok();
    rustix::net::sockopt::set_tcp_keepidle(sock, SERVER_KEEPALIVE.0).ok();
}

/// The connections a gRPC server serves: accepts TCP connections (backing off when accepting
/// fails, [`crate::AcceptFailures`]; socket options as [`server`] sets them) and proves each
/// with `prove` concurrently, each holding a place among the [`crate::Unproven`] meanwhile, so
/// that a slow or silent peer does not hold up the others and those of one address group are
/// bounded, all within `within` (its wait for a turn included; a connection past it is closed and
/// the refusal logged). A proven stream goes to tonic holding its place among its holder's (the
/// key `prove` names: a member's role, an address group): at most `most` per holder, one more is
/// closed and the refusal logged. Ends, its connections still being proven closed, with Ok when
/// `stop` turns true or tonic drops the stream, and with the error when accepting fails for good
/// ([`crate::conns::lasting`]).
pub(crate) fn incoming<S, K, P, F>(
    listener: TcpListener,
    prove: P,
    within: Duration,
    most: usize,
    refusals: Arc<RefusalLog>,
    mut stop: watch::Receiver<bool>,
) -> (Proven<S, K>, Acceptor)
where
    P: Fn(TcpStream, SocketAddr) -> F + Send + 'static,
    F: Future<Output = Option<(S, K)>> + Send + 'static,
    S: Send + 'static,
    K: Eq + Hash + Clone + std::fmt::Display + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    let holders = Shares::<K>::default();
    let unproven = Arc::new(crate::Unproven::default());
    let task = tokio::spawn(async move {
        let mut proving = tokio::task::JoinSet::new();
        let mut failures = crate::AcceptFailures::default();
        let ended = loop {
            tokio::select! {
                accepted = failures.accept("gRPC", || listener.accept()) => {
                    let (sock, peer) = match accepted {
                        Ok(accepted) => accepted,
                        Err(e) => break Err(e),
                    };
                    tune(&sock);
                    let Some(place) = unproven.enter(crate::peer_group(peer.ip())) else {
                        tracing::debug!(%peer, "gRPC connection closed: too many handshakes from its address");
                        continue;
                    };
                    let proof = prove(sock, peer);
                    let (holders, refusals, tx) = (holders.clone(), refusals.clone(), tx.clone());
                    proving.spawn(async move {
                        let (stream, holder) = match place.handshake(within, proof).await {
                            Some(Some(proven)) => proven,
                            Some(None) => return,
                            None => {
                                let after = format!("closed after {within:?}");
                                refusals.refuse(peer, "gRPC", Refusal::Silent, &after);
                                return;
                            }
                        };
                        match holders.admit(holder.clone(), most) {
                            Some(place) => {
                                let _ = tx.send(Ok(Counted { stream, _place: place })).await;
                            }
                            None => {
                                refusals.refuse(peer, "gRPC", Refusal::TooManyConnections, &holder);
                            }
                        }
                    });
                }
                Some(_) = proving.join_next(), if !proving.is_empty() => {}
                _ = tx.closed() => break Ok(()),
                _ = stop.wait_for(|&s| s) => break Ok(()),
            }
        };
        proving.shutdown().await;
        ended
    });
    (ReceiverStream::new(rx), task)
}

/// A gRPC service whose transport-level refusals name their error kind: tonic answers a request
/// it cannot decode with `INTERNAL` and one over the message size limit with `OUT_OF_RANGE`,
/// without the `coflow-error` entry; this wrapper turns the first into `INVALID_ARGUMENT`
/// (`invalid`) and the second into `RESOURCE_EXHAUSTED` (`limit-exceeded`). Only answers that
/// carry their status in the headers (every refusal of a unary call) are rewritten; the
/// service's own answers already name their kind and are left alone.
#[derive(Clone, Debug)]
pub struct TypedErrors<S>(pub S);

/// The kind and code a refusal tonic made before the service ran stands for, if any.
fn retyped(headers: &tonic::codegen::http::HeaderMap) -> Option<(crate::ErrorKind, tonic::Code)> {
    if headers.contains_key(crate::ERROR_KIND) {
        return None;
    }
    let code = headers.get("grpc-status")?.to_str().ok()?.parse::<i32>().ok()?;
    let message = headers.get("grpc-message").and_then(|m| m.to_str().ok()).unwrap_or("");
    match tonic::Code::from_i32(code) {
        // prost's "failed to decode Protobuf message: ...", percent-encoded.
        tonic::Code::Internal if message.contains("decode") => {
            Some((crate::ErrorKind::Invalid, tonic::Code::InvalidArgument))
        }
        tonic::Code::OutOfRange => Some((crate::ErrorKind::LimitExceeded, tonic::Code::ResourceExhausted)),
        _ => None,
    }
}

impl<S, B, R> tonic::codegen::Service<tonic::codegen::http::Request<B>> for TypedErrors<S>
where
    S: tonic::codegen::Service<tonic::codegen::http::Request<B>, Response = tonic::codegen::http::Response<R>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = tonic::codegen::BoxFuture<S::Response, S::Error>;

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), S::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, req: tonic::codegen::http::Request<B>) -> Self::Future {
        let fut = self.0.call(req);
        Box::pin(async move {
            let mut resp = fut.await?;
            if let Some((kind, code)) = retyped(resp.headers()) {
                let h = resp.headers_mut();
                h.insert("grpc-status", (code as i32).into());
                h.insert(crate::ERROR_KIND, tonic::codegen::http::HeaderValue::from_static(kind.as_str()));
            }
            Ok(resp)
        })
    }
}

impl<S: tonic::server::NamedService> tonic::server::NamedService for TypedErrors<S> {
    const NAME: &'static str = S::NAME;
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_stream::StreamExt;

    use super::*;

    /// A plain acceptor on loopback whose connections must speak within `within`, at most
    /// `most` held per address; its address and the sender that stops it.
    async fn plain(
        within: Duration,
        most: usize,
    ) -> (Proven<TcpStream, IpAddr>, Acceptor, SocketAddr, watch::Sender<bool>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = watch::channel(false);
        let (conns, task) = incoming(listener, first_bytes, within, most, Arc::default(), stopped);
        (conns, task, addr, stop)
    }

    /// Whether the server closed `s` within `wait` (reset it, if it left bytes unread).
    async fn closed(s: &mut TcpStream, wait: Duration) -> bool {
        matches!(tokio::time::timeout(wait, s.read(&mut [0u8; 16])).await, Ok(Ok(0) | Err(_)))
    }

    #[tokio::test]
    async fn a_silent_plain_connection_is_closed_at_the_deadline_and_one_that_speaks_is_served() {
        let within = Duration::from_millis(300);
        let (mut conns, task, addr, stop) = plain(within, 8).await;
        let opened = Instant::now();
        let mut silent = Vec::new();
        for _ in 0..3 {
            silent.push(TcpStream::connect(addr).await.unwrap());
        }
        // One byte of the preface, or most of it, is not enough; another protocol is closed at once.
        let mut started = TcpStream::connect(addr).await.unwrap();
        started.write_all(&PREFACE[..1]).await.unwrap();
        let mut most = TcpStream::connect(addr).await.unwrap();
        most.write_all(&PREFACE[..23]).await.unwrap();
        silent.extend([started, most]);
        let mut other = TcpStream::connect(addr).await.unwrap();
        other.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        assert!(closed(&mut other, within / 2).await, "another protocol is closed before the deadline");
        let mut speaker = TcpStream::connect(addr).await.unwrap();
        speaker.write_all(&PREFACE[..10]).await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        speaker.write_all(&PREFACE[10..]).await.unwrap();
        let mut served = tokio::time::timeout(within, conns.next()).await.expect("served at once").unwrap().unwrap();
        let mut preface = [0u8; PREFACE.len()];
        tokio::time::timeout(within, served.read_exact(&mut preface)).await.expect("the speaker is served").unwrap();
        assert_eq!(&preface, PREFACE, "the preface, sent in two pieces, is left for the server to read");
        for s in &mut silent {
            assert!(closed(s, 10 * within).await, "a silent connection is closed at the deadline");
        }
        assert!(opened.elapsed() >= within, "closed at the deadline, not before: {:?}", opened.elapsed());
        assert!(!closed(&mut speaker, Duration::from_millis(50)).await, "the served connection stays open");
        stop.send(true).unwrap();
        task.await.unwrap().unwrap();
    }

    /// Inside TLS the preface is read, in whatever pieces it comes, and read again by the server
    /// with what follows it; a stream that says anything else, or closes first, is refused, and
    /// one that says nothing is left waiting (for the acceptor's deadline to close it).
    #[tokio::test]
    async fn the_preface_inside_tls_is_read_and_left_to_be_read_again() {
        let (mut client, server) = tokio::io::duplex(64);
        let proving = tokio::spawn(preface(server));
        client.write_all(&PREFACE[..5]).await.unwrap();
        tokio::time::sleep(Duration::from_millis(10)).await;
        client.write_all(&PREFACE[5..]).await.unwrap();
        client.write_all(b"frames").await.unwrap();
        let mut proven = proving.await.unwrap().expect("the whole preface");
        let mut read = vec![0u8; PREFACE.len() + 6];
        proven.read_exact(&mut read).await.unwrap();
        assert_eq!(&read[..PREFACE.len()], PREFACE);
        assert_eq!(&read[PREFACE.len()..], b"frames");
        proven.write_all(b"answer").await.unwrap();
        let mut answer = [0u8; 6];
        client.read_exact(&mut answer).await.unwrap();
        assert_eq!(&answer, b"answer");

        let (mut other, server) = tokio::io::duplex(64);
        other.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        assert!(preface(server).await.is_none(), "another protocol");
        let (mut short, server) = tokio::io::duplex(64);
        short.write_all(&PREFACE[..23]).await.unwrap();
        drop(short);
        assert!(preface(server).await.is_none(), "closed before the whole preface");
        let (_silent, server) = tokio::io::duplex(64);
        assert!(tokio::time::timeout(Duration::from_millis(100), preface(server)).await.is_err(), "waits");
    }

    #[tokio::test]
    async fn plain_connections_past_their_address_s_cap_are_closed_and_places_come_back() {
        let (mut conns, task, addr, stop) = plain(Duration::from_secs(5), 2).await;
        let mut socks = Vec::new();
        for _ in 0..3 {
            let mut s = TcpStream::connect(addr).await.unwrap();
            s.write_all(PREFACE).await.unwrap();
            socks.push(s);
        }
        let mut served = Vec::new();
        for _ in 0..2 {
            served.push(tokio::time::timeout(Duration::from_secs(5), conns.next()).await.unwrap().unwrap().unwrap());
        }
        let mut refused = 0;
        for s in &mut socks {
            refused += usize::from(closed(s, Duration::from_millis(300)).await);
        }
        assert_eq!(refused, 1, "one connection past the cap of two is closed, the others are served");
        assert!(tokio::time::timeout(Duration::from_millis(100), conns.next()).await.is_err(), "and not served");
        served.pop();
        let mut again = TcpStream::connect(addr).await.unwrap();
        again.write_all(PREFACE).await.unwrap();
        let next = tokio::time::timeout(Duration::from_secs(5), conns.next()).await;
        assert!(next.is_ok_and(|c| c.is_some_and(|c| c.is_ok())), "a place given back is taken again");
        stop.send(true).unwrap();
        task.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn a_peer_that_closes_before_speaking_is_not_served() {
        let (mut conns, task, addr, stop) = plain(Duration::from_secs(5), 8).await;
        drop(TcpStream::connect(addr).await.unwrap());
        let mut speaker = TcpStream::connect(addr).await.unwrap();
        speaker.write_all(PREFACE).await.unwrap();
        let served = tokio::time::timeout(Duration::from_secs(5), conns.next()).await.unwrap().unwrap().unwrap();
        assert_eq!(served.stream.peer_addr().unwrap(), speaker.local_addr().unwrap(), "only the speaker is served");
        stop.send(true).unwrap();
        task.await.unwrap().unwrap();
    }

    /// A router with no service: what these tests look at is the acceptor, not the calls.
    fn router() -> Router {
        server().add_routes(tonic::service::Routes::default())
    }

    #[tokio::test]
    async fn a_server_whose_acceptor_panics_stops_with_an_error_and_raises_stop() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = watch::channel(false);
        let panics = |_: TcpStream, _: SocketAddr| -> std::future::Ready<Option<(TcpStream, IpAddr)>> {
            panic!("a bug in the acceptor")
        };
        let (serve, acceptor) = serve_proven(router(), listener, panics, 8, Arc::default(), &stop);
        let _peer = TcpStream::connect(addr).await.unwrap();
        let served =
            tokio::time::timeout(SHUTDOWN_DRAIN, until_stopped(serve, acceptor, &stop, std::future::pending()))
                .await
                .expect("the server stops");
        assert!(matches!(&served, Err(ServeError::AcceptorEnded(why)) if why.contains("panicked")), "{served:?}");
        assert!(*stopped.borrow(), "the caller's other tasks are told to stop");
    }

    #[tokio::test]
    async fn a_server_whose_listener_fails_for_good_stops_with_the_error() {
        use std::os::fd::AsFd;
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let socket = listener.as_fd().try_clone_to_owned().unwrap();
        let (stop, stopped) = watch::channel(false);
        let serve = serve_until_stopped(router(), listener, None, &stop, std::future::pending());
        let shut = async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            // The listening socket stops listening: every accept fails with EINVAL from now on.
            rustix::net::shutdown(&socket, rustix::net::Shutdown::Both).unwrap();
            std::future::pending::<()>().await
        };
        let served = tokio::select! {
            served = tokio::time::timeout(SHUTDOWN_DRAIN, serve) => served.expect("the server stops"),
            () = shut => unreachable!(),
        };
        let Err(ServeError::ListenerFailed(e)) = &served else { panic!("{served:?}") };
        assert_eq!(e.raw_os_error(), Some(rustix::io::Errno::INVAL.raw_os_error()), "{e}");
        assert!(*stopped.borrow(), "the caller's other tasks are told to stop");
    }

    #[tokio::test]
    async fn a_server_stopped_by_its_shutdown_or_by_stop_ends_ok() {
        let (stop, _stopped) = watch::channel(false);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let served = serve_until_stopped(router(), listener, None, &stop, async {}).await;
        assert!(served.is_ok(), "stopped by its shutdown: {served:?}");
        let (stop, _stopped) = watch::channel(false);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let raise = async {
            // A connection that opened and closed before the stop.
            let mut peer = TcpStream::connect(addr).await.unwrap();
            peer.write_all(PREFACE).await.unwrap();
            drop(peer);
            tokio::time::sleep(Duration::from_millis(50)).await;
            stop.send(true).unwrap();
            std::future::pending::<()>().await
        };
        let served = tokio::select! {
            served = serve_until_stopped(router(), listener, None, &stop, std::future::pending()) => served,
            () = raise => unreachable!(),
        };
        assert!(served.is_ok(), "stopped by stop: {served:?}");
    }
}
