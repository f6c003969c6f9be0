//! The HTTP listener of a service: `/metrics`, `/healthz` (the process serves HTTP: liveness),
//! `/readyz` (the service is ready: 200, else 503), and whatever routes the service merges in.

use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, watch};
use tokio::task::JoinSet;

use crate::places::{Place, Places, Refusal};

/// Renders the metrics page on each scrape (a service may ask its tasks first).
pub type Scrape = Arc<dyn Fn() -> Pin<Box<dyn Future<Output = String> + Send>> + Send + Sync>;

/// Whether the service is ready: what `/readyz` answers (and the gRPC health service's status).
#[derive(Debug, Default)]
pub struct Health {
    ready: AtomicBool,
    why: std::sync::Mutex<String>,
}

impl Health {
    /// Not ready, for `why`.
    pub fn new(why: &str) -> Arc<Health> {
        Arc::new(Health { ready: AtomicBool::new(false), why: std::sync::Mutex::new(why.into()) })
    }

    /// Sets readiness; `why` says what is missing when not ready.
    pub fn set(&self, ready: bool, why: &str) {
        *self.why.lock().expect("health lock") = why.into();
        self.ready.store(ready, Ordering::Relaxed);
    }

    /// Whether the service is ready.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }
}

/// `/metrics`, `/healthz` and `/readyz`.
pub fn router(scrape: Scrape, health: Arc<Health>) -> Router {
    Router::new()
        .route(
            "/metrics",
            get(move || {
                let scrape = scrape.clone();
                async move { ([(header::CONTENT_TYPE, crate::CONTENT_TYPE)], scrape().await) }
            }),
        )
        .route("/healthz", get(|| async { "ok\n" }))
        .route(
            "/readyz",
            get(move || {
                let health = health.clone();
                async move {
                    if health.is_ready() {
                        (StatusCode::OK, "ready\n".to_string()).into_response()
                    } else {
                        let why = health.why.lock().expect("health lock").clone();
                        (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {why}\n")).into_response()
                    }
                }
            }),
        )
}

/// How long a request's headers may take to come (also the longest a kept-alive connection
/// waits for its next request).
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(5);

/// The longest one connection is served, whatever it does.
pub const CONNECTION_LIFETIME: Duration = Duration::from_secs(60);

/// The most bytes a connection's socket buffers to send (`SO_SNDBUF`; Linux doubles it for its
/// bookkeeping and then no longer autotunes it, up to `tcp_wmem`'s most, 4 MiB or more).
pub const SEND_BUFFER: usize = 128 * 1024;

/// The most bytes hyper buffers for one connection to write (it takes one more piece of a body
/// while below it), and the most it reads a request's head into.
pub const WRITE_BUFFER: usize = 64 * 1024;

/// The peer a request came from, which [`serve`] puts in each request's extensions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Peer {
    /// The peer's address.
    pub address: IpAddr,
}

impl Peer {
    /// The peer's group ([`coflow_core::peer_group`]: its IPv4 address, or its IPv6 /64).
    pub fn group(&self) -> IpAddr {
        coflow_core::peer_group(self.address)
    }
}

/// Serves `router` on `listener` until `stop` turns true; responses in progress then finish,
/// for at most [`HEADER_TIMEOUT`], and idle connections close. Each request carries its
/// [`Peer`] in its extensions. The listener has no authentication, so idle, slow or numerous
/// peers must not hold the process's file descriptors or memory nor keep a probe out: at most
/// [`crate::MAX_CONNECTIONS`] are served at once, at most [`crate::MAX_CONNECTIONS_PER_ADDRESS`]
/// of one address and [`crate::MAX_CONNECTIONS_PER_GROUP`] of one IPv6 /64, each closed after its
/// response in progress past [`CONNECTION_LIFETIME`], or when a request's headers do not come
/// within [`HEADER_TIMEOUT`]; a full listener makes room for a newcomer from a group holding
/// fewer than the most (see [`crate::MAX_CONNECTIONS`] and [`crate::MAX_CLOSING`]). A
/// connection holds at most [`WRITE_BUFFER`] to read a request's head, [`WRITE_BUFFER`] and one
/// piece of a body to write, and twice [`SEND_BUFFER`] in the kernel: with 64 KiB pieces (as
/// [`crate::BodyPlace`] hands out), under 450 KiB a connection whose peer does not read, and
/// under 120 MiB for the [`crate::MAX_CONNECTIONS`] served and [`crate::MAX_CLOSING`] closing,
/// besides the bodies not yet handed to the connections (bounded by the routes, as
/// `/api/status` is by [`crate::Bodies`]).
pub async fn serve(listener: TcpListener, router: Router, stop: watch::Receiver<bool>) {
    let places = Places::default();
    let mut conns = JoinSet::new();
    let mut on_stop = stop.clone();
    let stopped = async move {
        let _ = on_stop.wait_for(|&s| s).await;
    };
    tokio::pin!(stopped);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (sock, address) = match accepted {
                    Ok((sock, peer)) => (sock, peer.ip()),
                    Err(e) => {
                        // Out of file descriptors, say: wait rather than spin.
                        tracing::debug!(error = %e, "accepting an HTTP connection failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                if let Err(e) = socket2::SockRef::from(&sock).set_send_buffer_size(SEND_BUFFER) {
                    tracing::debug!(error = %e, "setting an HTTP connection's send buffer failed");
                }
                let peer = Peer { address };
                let mut sock = Some(sock);
                let refused = loop {
                    let admitted = places.admit(address, |place, close| {
                        let sock = sock.take().expect("spawned once");
                        conns.spawn(connection(sock, peer, router.clone(), place, close, stop.clone()))
                    });
                    match admitted {
                        Ok(()) => break None,
                        Err(Refusal::Closing(oldest)) => {
                            // Ended at its next turn, which gives its place back at once.
                            if let Some(oldest) = oldest {
                                oldest.abort();
                            }
                            places.closing_below_max().await;
                        }
                        Err(why) => break Some(why),
                    }
                };
                if let Some(why) = refused {
                    tracing::debug!(%address, ?why, "HTTP connection closed at once");
                }
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            () = &mut stopped => break,
        }
    }
    drop(listener);
    let _ = tokio::time::timeout(HEADER_TIMEOUT, async { while conns.join_next().await.is_some() {} }).await;
}

/// Serves one connection until it ends, its lifetime ends, the listener stops, or `close` asks
/// it to make room: then it finishes the response in progress, if any, and closes (within the
/// header deadline). `place` is given back when it has. Each request carries `peer`.
async fn connection(
    sock: TcpStream,
    peer: Peer,
    router: Router,
    place: Place,
    close: Arc<Notify>,
    mut stop: watch::Receiver<bool>,
) {
    let router = hyper_util::service::TowerToHyperService::new(router);
    let service = hyper::service::service_fn(move |mut request: hyper::Request<hyper::body::Incoming>| {
        request.extensions_mut().insert(peer);
        hyper::service::Service::call(&router, request)
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .max_buf_size(WRITE_BUFFER)
        .serve_connection(hyper_util::rt::TokioIo::new(sock), service);
    tokio::pin!(conn);
    let ended = tokio::select! {
        _ = conn.as_mut() => true,
        () = tokio::time::sleep(CONNECTION_LIFETIME) => false,
        _ = stop.wait_for(|&s| s) => false,
        () = close.notified() => false,
    };
    if !ended {
        conn.as_mut().graceful_shutdown();
        let _ = tokio::time::timeout(HEADER_TIMEOUT, conn).await;
    }
    drop(place);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MAX_CONNECTIONS, MAX_CONNECTIONS_PER_ADDRESS};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn get(addr: std::net::SocketAddr, path: &str) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes()).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    /// A listener on loopback serving the metrics page `x 1` and `health`: its address, its stop
    /// and its task.
    async fn started(health: Arc<Health>) -> (std::net::SocketAddr, watch::Sender<bool>, tokio::task::JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let scrape: Scrape = Arc::new(|| Box::pin(async { "x 1\n".to_string() }));
        let (stop, rx) = watch::channel(false);
        (addr, stop, tokio::spawn(serve(listener, router(scrape, health), rx)))
    }

    #[tokio::test]
    async fn probes_follow_readiness_and_the_server_stops() {
        let health = Health::new("not registered yet");
        let (addr, stop, task) = started(health.clone()).await;
        assert!(get(addr, "/healthz").await.starts_with("HTTP/1.0 200"));
        let r = get(addr, "/readyz").await;
        assert!(r.starts_with("HTTP/1.0 503") && r.ends_with("not ready: not registered yet\n"), "{r}");
        health.set(true, "");
        assert!(get(addr, "/readyz").await.starts_with("HTTP/1.0 200"));
        let m = get(addr, "/metrics").await;
        assert!(m.contains("openmetrics-text") && m.ends_with("x 1\n"), "{m}");
        assert!(get(addr, "/nothing").await.starts_with("HTTP/1.0 404"));
        stop.send(true).unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(5), task).await.unwrap().unwrap();
    }

    /// Peers that connect and say nothing hold no place for long: past their address's bound
    /// they are closed at once, the others at the header deadline, and a request from another
    /// address is served all along.
    #[tokio::test]
    async fn silent_peers_are_bounded_and_closed_at_the_header_deadline() {
        let (addr, stop, task) = started(Health::new("starting")).await;
        let mut silent = Vec::new();
        for _ in 0..MAX_CONNECTIONS_PER_ADDRESS + 8 {
            silent.push(tokio::net::TcpStream::connect(addr).await.unwrap());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut b = [0u8; 64];
        for s in &mut silent[MAX_CONNECTIONS_PER_ADDRESS..] {
            let n = tokio::time::timeout(Duration::from_secs(1), s.read(&mut b)).await.expect("closed at once");
            assert_eq!(n.unwrap_or(0), 0, "past the bound: closed, not served");
        }
        // Another address (the other loopback one) is served meanwhile.
        let out = probe(addr, [127, 0, 0, 2]).await;
        assert!(out.starts_with("HTTP/1.0 200"), "{out}");
        for s in &mut silent[..MAX_CONNECTIONS_PER_ADDRESS] {
            let n = tokio::time::timeout(HEADER_TIMEOUT + Duration::from_secs(1), s.read(&mut b)).await;
            assert_eq!(n.expect("closed at the header deadline").unwrap_or(0), 0);
        }
        assert!(get(addr, "/healthz").await.starts_with("HTTP/1.0 200"), "places given back");
        stop.send(true).unwrap();
        task.await.unwrap();
    }

    /// A connection from `from` that asks for `/healthz` once and stays open, kept alive; `None`
    /// if the listener closes it instead of answering.
    async fn kept_alive(addr: std::net::SocketAddr, from: [u8; 4]) -> Option<tokio::net::TcpStream> {
        let sock = tokio::net::TcpSocket::new_v4().unwrap();
        sock.bind((std::net::Ipv4Addr::from(from), 0).into()).unwrap();
        let mut s = sock.connect(addr).await.unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n").await.ok()?;
        let mut got = Vec::new();
        let mut b = [0u8; 512];
        while !got.ends_with(b"\r\n\r\nok\n") {
            let n = s.read(&mut b).await.ok().filter(|&n| n > 0)?;
            got.extend_from_slice(&b[..n]);
        }
        Some(s)
    }

    /// What a connection from `from` gets for `/healthz`: the whole answer, or nothing when the
    /// listener closes it at once.
    async fn probe(addr: std::net::SocketAddr, from: [u8; 4]) -> String {
        let sock = tokio::net::TcpSocket::new_v4().unwrap();
        sock.bind((std::net::Ipv4Addr::from(from), 0).into()).unwrap();
        let mut s = sock.connect(addr).await.unwrap();
        let mut out = String::new();
        // A refused connection may be closed before the request is written.
        if s.write_all(b"GET /healthz HTTP/1.0\r\n\r\n").await.is_ok() {
            let _ = s.read_to_string(&mut out).await;
        }
        out
    }

    /// A few addresses holding every place keep no probe out: a newcomer from another address
    /// is served in place of an idle connection of an address holding the most, and one
    /// address still gets at most its share.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_probe_gets_in_while_a_few_addresses_hold_every_place() {
        let (addr, stop, task) = started(Health::new("starting")).await;
        let mut fill = JoinSet::new();
        for i in 0..MAX_CONNECTIONS {
            let from = [127, 0, 0, 2 + (i / MAX_CONNECTIONS_PER_ADDRESS) as u8];
            fill.spawn(kept_alive(addr, from));
        }
        let held = fill.join_all().await;
        assert!(held.iter().all(Option::is_some), "the listener takes {MAX_CONNECTIONS}");
        let within = Duration::from_secs(3);
        let out = tokio::time::timeout(within, probe(addr, [127, 0, 0, 1])).await.expect("answered");
        assert!(out.starts_with("HTTP/1.0 200") && out.ends_with("ok\n"), "{out:?}");
        // The prober's address takes places while it holds fewer than every other (its share of
        // nine: 28 at least), then is closed at once, by the time it holds its group's most.
        let mut own = Vec::new();
        for _ in 0..=MAX_CONNECTIONS_PER_ADDRESS {
            match tokio::time::timeout(within, kept_alive(addr, [127, 0, 0, 1])).await.expect("answered or closed") {
                Some(s) => own.push(s),
                None => break,
            }
        }
        assert!((MAX_CONNECTIONS / 9..=MAX_CONNECTIONS_PER_ADDRESS).contains(&own.len()), "{}", own.len());
        stop.send(true).unwrap();
        task.await.unwrap();
    }

    /// A body of `len` bytes in 64 KiB pieces that counts the bytes the connection has taken.
    struct Counted {
        left: usize,
        taken: Arc<std::sync::atomic::AtomicUsize>,
    }

    impl hyper::body::Body for Counted {
        type Data = hyper::body::Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
            let n = self.left.min(64 * 1024);
            if n == 0 {
                return std::task::Poll::Ready(None);
            }
            self.left -= n;
            self.taken.fetch_add(n, Ordering::Relaxed);
            std::task::Poll::Ready(Some(Ok(hyper::body::Frame::data(vec![b'x'; n].into()))))
        }
    }

    /// A peer that asks for a large body and does not read makes its connection hold no more
    /// than hyper's write buffer, one piece and the kernel's send buffer, whatever the kernel
    /// would autotune it to; and each request carries its peer.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_peer_that_does_not_read_makes_its_connection_hold_little() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let taken = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let t = taken.clone();
        let router = Router::new()
            .route(
                "/big",
                axum::routing::get(move || {
                    let taken = t.clone();
                    async move { axum::body::Body::new(Counted { left: 64 << 20, taken }) }
                }),
            )
            .route(
                "/peer",
                axum::routing::get(
                    |axum::Extension(peer): axum::Extension<Peer>| async move { peer.address.to_string() },
                ),
            );
        let (stop, rx) = watch::channel(false);
        let task = tokio::spawn(serve(listener, router, rx));
        let out = get(addr, "/peer").await;
        assert!(out.ends_with("\r\n\r\n127.0.0.1"), "{out}");
        let sock = tokio::net::TcpSocket::new_v4().unwrap();
        sock.set_recv_buffer_size(4096).unwrap();
        let mut s = sock.connect(addr).await.unwrap();
        s.write_all(b"GET /big HTTP/1.0\r\n\r\n").await.unwrap();
        let mut b = [0u8; 1024];
        assert!(s.read(&mut b).await.unwrap() > 0, "the head");
        // Until the server can hand no more to the socket.
        let mut last = 0;
        loop {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let now = taken.load(Ordering::Relaxed);
            if now == last {
                break;
            }
            last = now;
        }
        // What the peer's own receive buffer holds comes on top (4 KiB asked, doubled).
        let bound = WRITE_BUFFER + 64 * 1024 + 2 * SEND_BUFFER + 64 * 1024;
        assert!(last <= bound, "{last} bytes taken, more than {bound}");
        drop(s);
        stop.send(true).unwrap();
        task.await.unwrap();
    }
}
