//! Serving a gRPC router until shutdown, the same way in every service.

use std::future::Future;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tonic::transport::server::{Router, TcpIncoming};

/// Serves `router` on `listener` (Nagle off: a rate push must not wait 40 ms) until `shutdown`
/// resolves or `stop` is raised, then lets in-flight calls finish. `stop` is raised on the way
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
    let served = tokio::select! {
        r = &mut serve => r,
        _ = &mut shutdown => {
            let _ = stop.send(true);
            serve.await
        }
    };
    let _ = stop.send(true);
    if let Some(task) = acceptor {
        let _ = task.await;
    }
    served
}
