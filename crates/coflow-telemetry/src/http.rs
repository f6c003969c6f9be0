//! The HTTP listener of a service: `/metrics`, `/healthz` (the process serves HTTP: liveness),
//! `/readyz` (the service is ready: 200, else 503), and whatever routes the service merges in.

use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;

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

/// The most connections the listener serves at once; one more is closed at once. Scrapes and
/// probes need a few.
pub const MAX_CONNECTIONS: usize = 256;

/// The most connections from one address served at once, so that one peer cannot hold every
/// place a scraper or a probe needs.
pub const MAX_CONNECTIONS_PER_ADDRESS: usize = 32;

/// How long a request's headers may take to come (also the longest a kept-alive connection
/// waits for its next request).
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(5);

/// The longest one connection is served, whatever it does.
pub const CONNECTION_LIFETIME: Duration = Duration::from_secs(60);

/// Serves `router` on `listener` until `stop` turns true; responses in progress then finish,
/// for at most [`HEADER_TIMEOUT`], and idle connections close. At most [`MAX_CONNECTIONS`] at
/// once, each closed after its response in progress past [`CONNECTION_LIFETIME`], or when a
/// request's headers do not come within [`HEADER_TIMEOUT`]: the listener has no authentication, so idle or slow peers must not hold
/// the process's file descriptors.
pub async fn serve(listener: TcpListener, router: Router, stop: watch::Receiver<bool>) {
    let places = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let by_address: Arc<Mutex<HashMap<IpAddr, usize>>> = Arc::default();
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
                {
                    let mut held = by_address.lock().expect("address lock");
                    let n = held.entry(address).or_default();
                    if *n >= MAX_CONNECTIONS_PER_ADDRESS {
                        tracing::debug!(%address, "HTTP connection closed: MAX_CONNECTIONS_PER_ADDRESS from it");
                        continue;
                    }
                    *n += 1;
                }
                let by_address = by_address.clone();
                let leave = move || {
                    let mut held = by_address.lock().expect("address lock");
                    if let Some(n) = held.get_mut(&address) {
                        *n -= 1;
                        if *n == 0 {
                            held.remove(&address);
                        }
                    }
                };
                let Ok(place) = places.clone().try_acquire_owned() else {
                    tracing::debug!("HTTP connection closed: MAX_CONNECTIONS served already");
                    leave();
                    continue;
                };
                let service = hyper_util::service::TowerToHyperService::new(router.clone());
                let mut stop = stop.clone();
                conns.spawn(async move {
                    let conn = hyper::server::conn::http1::Builder::new()
                        .timer(hyper_util::rt::TokioTimer::new())
                        .header_read_timeout(HEADER_TIMEOUT)
                        .serve_connection(hyper_util::rt::TokioIo::new(sock), service);
                    tokio::pin!(conn);
                    // At its lifetime's end or the listener's stop, the connection finishes the
                    // response in progress, if any, and closes (within the header deadline).
                    let ended = tokio::select! {
                        _ = conn.as_mut() => true,
                        () = tokio::time::sleep(CONNECTION_LIFETIME) => false,
                        _ = stop.wait_for(|&s| s) => false,
                    };
                    if !ended {
                        conn.as_mut().graceful_shutdown();
                        let _ = tokio::time::timeout(HEADER_TIMEOUT, conn).await;
                    }
                    drop(place);
                    leave();
                });
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            () = &mut stopped => break,
        }
    }
    drop(listener);
    let _ = tokio::time::timeout(HEADER_TIMEOUT, async { while conns.join_next().await.is_some() {} }).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn get(addr: std::net::SocketAddr, path: &str) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes()).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn probes_follow_readiness_and_the_server_stops() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let health = Health::new("not registered yet");
        let scrape: Scrape = Arc::new(|| Box::pin(async { "x 1\n".to_string() }));
        let (stop, rx) = watch::channel(false);
        let task = tokio::spawn(serve(listener, router(scrape, health.clone()), rx));
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

    /// Peers that connect and say nothing hold no place for long: past the per-address bound
    /// they are closed at once, the others at the header deadline, and a request from another
    /// address is served all along.
    #[tokio::test]
    async fn silent_peers_are_bounded_and_closed_at_the_header_deadline() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let scrape: Scrape = Arc::new(|| Box::pin(async { "x 1\n".to_string() }));
        let (stop, rx) = watch::channel(false);
        let task = tokio::spawn(serve(listener, router(scrape, Health::new("starting")), rx));
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
        let other = tokio::net::TcpSocket::new_v4().unwrap();
        other.bind("127.0.0.2:0".parse().unwrap()).unwrap();
        let mut other = other.connect(addr).await.unwrap();
        other.write_all(b"GET /healthz HTTP/1.0\r\n\r\n").await.unwrap();
        let mut out = String::new();
        other.read_to_string(&mut out).await.unwrap();
        assert!(out.starts_with("HTTP/1.0 200"), "{out}");
        for s in &mut silent[..MAX_CONNECTIONS_PER_ADDRESS] {
            let n = tokio::time::timeout(HEADER_TIMEOUT + Duration::from_secs(1), s.read(&mut b)).await;
            assert_eq!(n.expect("closed at the header deadline").unwrap_or(0), 0);
        }
        assert!(get(addr, "/healthz").await.starts_with("HTTP/1.0 200"), "places given back");
        stop.send(true).unwrap();
        task.await.unwrap();
    }
}
