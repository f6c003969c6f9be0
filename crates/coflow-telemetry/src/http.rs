//! The HTTP listener of a service: `/metrics`, `/healthz` (the process serves HTTP: liveness),
//! `/readyz` (the service is ready: 200, else 503), and whatever routes the service merges in.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::net::TcpListener;
use tokio::sync::watch;

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

/// Serves `router` on `listener` until `stop` turns true; connections in progress then finish.
pub async fn serve(listener: TcpListener, router: Router, mut stop: watch::Receiver<bool>) {
    let stopped = async move {
        let _ = stop.wait_for(|&s| s).await;
    };
    if let Err(e) = axum::serve(listener, router).with_graceful_shutdown(stopped).await {
        tracing::warn!(error = %e, "the HTTP listener failed");
    }
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
}
