//! Serving a gRPC router until shutdown, the same way in every service, and [`TypedErrors`], which
//! names the error kind of the refusals tonic makes before a service runs.

use std::future::Future;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tonic::transport::server::{Router, TcpIncoming};

/// How often a server pings a connection's peer, and how long it waits for the answer before it
/// closes the connection: a peer whose host died (a half-open connection) gives its place
/// among its member's connections back within about a minute.
pub const SERVER_KEEPALIVE: (Duration, Duration) = (Duration::from_secs(30), Duration::from_secs(20));

/// The gRPC server every service builds its router on: Nagle off (a rate push must not wait
/// 40 ms), and the peer of every connection pinged ([`SERVER_KEEPALIVE`]).
pub fn server() -> tonic::transport::Server {
    let (every, answer_within) = SERVER_KEEPALIVE;
    tonic::transport::Server::builder()
        .tcp_nodelay(true)
        .tcp_keepalive(Some(every))
        .http2_keepalive_interval(Some(every))
        .http2_keepalive_timeout(Some(answer_within))
}

/// How long a server waits, once stopped, for its connections to close: a call in flight has
/// that long to finish, and a connection that never said anything (hyper waits for an HTTP/2
/// preface before it can close one gracefully) is dropped at its end.
pub const SHUTDOWN_DRAIN: Duration = Duration::from_secs(5);

/// Serves `router` on `listener` (Nagle off: a rate push must not wait 40 ms) until `shutdown`
/// resolves or `stop` is raised, then lets in-flight calls finish within [`SHUTDOWN_DRAIN`]. `stop` is raised on the way
/// out in every case, also when the server fails on its own, so that the caller's other tasks
/// (which watch it) end too. With `tls`, every connection must complete a mutual TLS handshake
/// first (see [`crate::TlsContext::grpc_server_config`]).
pub async fn serve_until_stopped(
    router: Router,
    listener: TcpListener,
    tls: Option<&crate::TlsContext>,
    stop: &watch::Sender<bool>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), tonic::transport::Error> {
    let mut stopped = stop.subscribe();
    let until_stopped = async move {
        let _ = stopped.wait_for(|&s| s).await;
    };
    let mut acceptor = None;
    let serve: std::pin::Pin<Box<dyn Future<Output = Result<(), tonic::transport::Error>> + Send>> = match tls {
        None => Box::pin(
            router.serve_with_incoming_shutdown(TcpIncoming::from(listener).with_nodelay(Some(true)), until_stopped),
        ),
        Some(t) => {
            let (incoming, task) =
                crate::tls::incoming(listener, t.grpc_server_config(), t.refusals().clone(), stop.subscribe());
            acceptor = Some(task);
            Box::pin(router.serve_with_incoming_shutdown(incoming, until_stopped))
        }
    };
    let mut serve = serve;
    let mut shutdown = std::pin::pin!(shutdown);
    let mut stopped = stop.subscribe();
    let served = tokio::select! {
        r = &mut serve => r,
        // Stopped from outside (`stop`) or by `shutdown`: the server drains within its bound.
        _ = async {
            tokio::select! {
                _ = &mut shutdown => {}
                _ = stopped.wait_for(|&s| s) => {}
            }
        } => {
            let _ = stop.send(true);
            match tokio::time::timeout(SHUTDOWN_DRAIN, &mut serve).await {
                Ok(r) => r,
                Err(_) => {
                    tracing::info!("connections still open {SHUTDOWN_DRAIN:?} after the stop are dropped");
                    Ok(())
                }
            }
        }
    };
    let _ = stop.send(true);
    if let Some(task) = acceptor {
        let _ = task.await;
    }
    served
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
