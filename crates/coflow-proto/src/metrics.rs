//! A tiny HTTP/1.1 endpoint that answers every request with Prometheus text: what both services
//! expose at `/metrics`. Hand-rolled, since a full HTTP stack for one read-only page is not
//! worth its dependencies.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

/// Renders the page on each request.
pub type Render = Arc<dyn Fn() -> Pin<Box<dyn Future<Output = String> + Send>> + Send + Sync>;

/// Serves `render`'s text on `listener` until `shutdown` turns true.
pub async fn serve_metrics(listener: TcpListener, render: Render, mut shutdown: watch::Receiver<bool>) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((mut sock, _)) = accepted else { continue };
                let render = render.clone();
                conns.spawn(async move {
                    let mut buf = [0u8; 2048];
                    let read = tokio::time::timeout(std::time::Duration::from_secs(5), sock.read(&mut buf)).await;
                    let Ok(Ok(n)) = read else { return };
                    let head = String::from_utf8_lossy(&buf[..n]);
                    let ok = head.starts_with("GET /metrics") || head.starts_with("GET / ");
                    let (status, body) = if ok { ("200 OK", render().await) } else { ("404 Not Found", String::new()) };
                    let resp = format!(
                        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = sock.write_all(resp.as_bytes()).await;
                    let _ = sock.shutdown().await;
                });
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            _ = shutdown.changed() => break,
        }
    }
    conns.shutdown().await;
}
