//! The coordinator: one per cluster. It keeps the global view of coflows, flows and agents, runs
//! the scheduling policy (the very code the simulator runs) on arrivals, completions and its
//! timers, and pushes the changed rates to agents, batched.
//!
//! # Layout
//! - `config`: [`CoordinatorConfig`], TOML with documented defaults, validated.
//! - `core`: [`Core`], the sans-I/O state machine: typed `handle_*` inputs that take `now` and
//!   return the answer, `poll_transmit` (rate batches and notices per agent) and `poll_timeout`;
//!   no clock, channel or task, so tests drive it in simulated time by calling it.
//! - `status`: the live view's types ([`StatusView`] and the coflows, flows and agents in it).
//! - `views`: what the coordinator shows of itself, read from the core: the live view and the
//!   counters and gauges.
//! - `telemetry`: its HTTP face (metrics with histograms, health, readiness, the live web page).
//! - `service`: the tonic service and the one task that owns the core, with every channel and
//!   timer.
//! - `identity`: who may make which call (roles from certificates, agent sessions).
//! - `membership`: machine ids for agents that ask for one, and agents leaving.
//! - `error`: [`CoordError`] and its single mapping to gRPC status.

#![warn(missing_docs)]

mod config;
mod core;
mod error;
mod events;
mod identity;
mod measure;
mod membership;
mod service;
mod status;
mod telemetry;
mod views;

use std::future::Future;
use std::sync::Arc;

use coflow_proto::Security;
use coflow_proto::pb::coordinator_server::CoordinatorServer;
use tokio::net::TcpListener;
use tokio::sync::watch;

pub use crate::config::{ConfigError, CoordinatorConfig, TCP, check_policy};
pub use crate::core::ADMIN;
pub use crate::core::{
    Core, Counters, FlowGrant, FlowOutcome, GrantPart, MIN_PART_BYTES, Notice, Observation, RateBatch, Relay, Transmit,
};
pub use crate::error::CoordError;
pub use crate::status::{
    Admission, AgentView, CoflowView, FlowView, LinkView, STATUS_PAGE_BYTES, StatusPage, StatusView,
};
pub use crate::telemetry::status_json;
pub use coflow_proto::{ERROR_KIND, ErrorKind};

/// The coordinator's gRPC service name, as `grpc.health.v1` reports it.
pub const SERVICE_NAME: &str = "coflow.v1.Coordinator";

/// How long the live page's JSON (`/api/status`) is served as rendered before the view is built
/// again: peers polling it cost the core one view per this, however many they are.
pub const STATUS_PAGE_FRESH: std::time::Duration = std::time::Duration::from_millis(500);

/// Why the coordinator could not run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The configuration is wrong.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The gRPC server failed, or stopped because its acceptor did.
    #[error("gRPC server: {0}")]
    Transport(#[from] coflow_proto::ServeError),
    /// The TLS certificate given is not a coordinator's.
    #[error(
        "tls_cert: the certificate is for {0}, not the coordinator (issue one with `coflow certs issue DIR --coordinator HOST`)"
    )]
    NotCoordinator(String),
    /// The core task ended while the service ran (it panicked, say): every call would fail, so
    /// the service stops, not ready from that moment, and the process should be restarted.
    #[error("the coordinator's core task ended unexpectedly: {0}")]
    CoreEnded(String),
}

/// Serves the coordinator on `listener` (and, on `metrics`, `/metrics`, `/healthz`, `/readyz` and
/// the live web page) until `shutdown` completes; then stops accepting, ends the core task and
/// returns. gRPC also serves `grpc.health.v1` (`coflow.v1.Coordinator` and the server as a whole).
/// `security` is the cluster token, or the coordinator's TLS identity ([`Security`]). Should the
/// core task end on its own (a panic), the service is not ready from that moment, stops, and
/// returns [`RunError::CoreEnded`].
pub async fn run(
    config: CoordinatorConfig,
    security: impl Into<Security>,
    listener: TcpListener,
    metrics: Option<TcpListener>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), RunError> {
    serve(config, security.into(), listener, metrics, shutdown, service::core_loop).await
}

/// [`run`], with the loop of the core task given (`service::core_loop`): the seam through which
/// the tests make the core task end.
async fn serve<L, F>(
    config: CoordinatorConfig,
    security: Security,
    listener: TcpListener,
    metrics: Option<TcpListener>,
    shutdown: impl Future<Output = ()> + Send + 'static,
    core_loop: L,
) -> Result<(), RunError>
where
    L: FnOnce(Core, tokio::sync::mpsc::Receiver<events::Event>, watch::Receiver<bool>, telemetry::Observer) -> F,
    F: Future<Output = ()> + Send + 'static,
{
    config.validate()?;
    // Another member's certificate would be refused by every peer at the handshake ("not for
    // server authentication"), long after the start: refused here instead.
    if let Some(role) = security.tls().map(|t| t.role())
        && *role != coflow_proto::Role::Coordinator
    {
        return Err(RunError::NotCoordinator(role.uri()));
    }
    // Under `tcp` no policy decides; its simulator's stand-in stands by so that `Core` keeps one
    // shape.
    let name = coflow_sched::policy::simulated(&config.policy);
    let policy = coflow_sched::policy::by_name(name).expect("validated");
    let policy_label = config.policy.clone();
    let addr = listener.local_addr().map_or_else(|e| format!("unknown ({e})"), |a| a.to_string());
    tracing::info!(policy = %config.policy, %addr, tls = security.tls().is_some(), "coordinator starting");
    // Agents hear of a restart when their rate stream breaks, then register again (every 500 ms)
    // and re-announce what they hold, one piece per call; three agent timeouts leave a loaded
    // agent with many pieces time to finish.
    let recovering_until = std::time::Instant::now() + std::time::Duration::from_millis(3 * config.agent_timeout_ms);
    let config_agent_timeout_ms = config.agent_timeout_ms;
    let heartbeat_interval_ms = config.heartbeat_interval_ms;
    let status_page = config.status_page;
    let status_hosts = telemetry::StatusHosts::new(&config.status_hosts);
    let mut core = Core::new(config, policy);
    // Coflow and flow ids from a previous run, which agents re-announce, must not collide with
    // new ones: ids start at the clock in microseconds, so a previous run's ids are below unless
    // it allocated more than one id per microsecond of its life.
    let micros = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros());
    core.set_id_base(micros as u64);
    let (handle, rx) = events::channel();
    let (stop_tx, stop_rx) = watch::channel(false);
    let (registry, observer) = telemetry::metrics(&policy_label);
    let tickets = core.tickets().clone();
    let mut core_task = tokio::spawn(core_loop(core, rx, stop_rx.clone(), observer));
    let health = coflow_telemetry::Health::new("starting");
    let metrics_task = metrics.map(|l| {
        let (h1, h2) = (handle.clone(), handle.clone());
        let samples: telemetry::Ask<_> = Arc::new(move || {
            let h = h1.clone();
            Box::pin(async move { h.ask(events::Event::Metrics).await.ok() })
        });
        // The live view's JSON, rendered one request at a time (with many coflows it is large,
        // and peers asking at once would each hold a copy) off the async workers, and kept for
        // `STATUS_PAGE_FRESH`: however many ask, the core builds the view at most that often.
        let rendered: Arc<tokio::sync::Mutex<Option<(std::time::Instant, String)>>> = Arc::default();
        let status: telemetry::Ask<String> = Arc::new(move || {
            let (h, rendered) = (h2.clone(), rendered.clone());
            Box::pin(async move {
                let mut rendered = rendered.lock().await;
                if let Some((at, body)) = rendered.as_ref()
                    && at.elapsed() < STATUS_PAGE_FRESH
                {
                    return Some(body.clone());
                }
                let view = h.ask(events::Event::Status).await.ok()?;
                let body = tokio::task::spawn_blocking(move || telemetry::status_json(&view).to_string()).await.ok()?;
                *rendered = Some((std::time::Instant::now(), body.clone()));
                Some(body)
            })
        });
        let status = status_page.then_some(status);
        let router = telemetry::router(samples, status, status_hosts, Arc::new(registry), health.clone());
        tokio::spawn(coflow_telemetry::serve(l, router, stop_rx.clone()))
    });
    let (reporter, health_service) = tonic_health::server::health_reporter();
    let svc = service::CoordinatorService {
        core: handle,
        sessions: Default::default(),
        recovering_until,
        restarted: Default::default(),
        assignments: Arc::new(membership::Assignments::new(std::time::Duration::from_millis(config_agent_timeout_ms))),
        stop: stop_rx.clone(),
        tickets,
        fetches_per_peer: coflow_sched::policy::unscheduled(&policy_label).map_or(0, |u| u.fetches_per_peer),
        heartbeat_interval_ms,
        agent_timeout_ms: config_agent_timeout_ms,
    };
    let svc = CoordinatorServer::with_interceptor(svc, security.authenticate());
    let svc = coflow_proto::Reception::new(svc);
    let health_service = svc.beside(health_service);
    let router = coflow_proto::server().add_service(coflow_proto::TypedErrors(svc)).add_service(health_service);
    // Ready once the listener serves (it is bound, so calls queue until then); not ready from the
    // moment a stop is asked.
    for name in ["", SERVICE_NAME] {
        reporter.set_service_status(name, tonic_health::ServingStatus::Serving).await;
    }
    health.set(true, "");
    // The core task ends before a stop only if something is wrong with it: the service stops then.
    let mut core_ended = None;
    let (ended, task) = (&mut core_ended, &mut core_task);
    let stopping = async move {
        tokio::select! {
            () = shutdown => health.set(false, "stopping"),
            r = task => {
                let why = r.err().map_or_else(|| "it returned".to_string(), |e| e.to_string());
                tracing::error!(%why, "the core task ended; the coordinator stops");
                health.set(false, "the core task ended");
                *ended = Some(why);
            }
        }
        for name in ["", SERVICE_NAME] {
            reporter.set_service_status(name, tonic_health::ServingStatus::NotServing).await;
        }
    };
    // Returns with `stop` raised, also when the server failed on its own: the core and metrics
    // tasks end too.
    let served = coflow_proto::serve_until_stopped(router, listener, security.tls(), &stop_tx, stopping).await;
    if core_ended.is_none()
        && let Err(e) = core_task.await
    {
        core_ended = Some(e.to_string());
    }
    if let Some(t) = metrics_task {
        let _ = t.await;
    }
    tracing::info!("coordinator stopped");
    served?;
    core_ended.map_or(Ok(()), |why| Err(RunError::CoreEnded(why)))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    use super::*;

    /// The answer to `GET path` on the HTTP listener at `addr` (empty once it has stopped).
    async fn get(addr: std::net::SocketAddr, path: &str) -> String {
        answer(addr, format!("GET {path} HTTP/1.0\r\n\r\n")).await
    }

    /// The answer to `request`, whole, on the HTTP listener at `addr` (empty once it has
    /// stopped).
    async fn answer(addr: std::net::SocketAddr, request: String) -> String {
        let Ok(mut s) = tokio::net::TcpStream::connect(addr).await else { return String::new() };
        let mut out = String::new();
        if s.write_all(request.as_bytes()).await.is_ok() {
            let _ = s.read_to_string(&mut out).await;
        }
        out
    }

    /// A core task that ends on its own, panicking or returning, ends the service with
    /// `RunError::CoreEnded`, though no shutdown was asked.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_service_ends_with_an_error_when_its_core_task_ends() {
        for panics in [true, false] {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let http_addr = http.local_addr().unwrap();
            let (end, ended) = tokio::sync::oneshot::channel::<()>();
            let core_loop = move |core, rx, stop, observer| async move {
                let _ = ended.await;
                drop((core, rx, stop, observer));
                assert!(!panics, "a bug in the core");
            };
            let token = coflow_proto::ClusterToken::new("secret").unwrap();
            let config = CoordinatorConfig::default();
            let service =
                tokio::spawn(serve(config, token.into(), listener, Some(http), std::future::pending(), core_loop));
            let within = Duration::from_secs(10);
            let ready = async {
                while !get(http_addr, "/readyz").await.starts_with("HTTP/1.0 200") {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            };
            tokio::time::timeout(within, ready).await.expect("ready while the core runs");
            end.send(()).unwrap();
            let r = tokio::time::timeout(within, service).await.expect("the service ends").unwrap();
            let Err(RunError::CoreEnded(why)) = r else { panic!("{r:?}") };
            let expected = if panics { "a bug in the core" } else { "it returned" };
            assert!(why.contains(expected), "{why}");
        }
    }

    /// A browser's request for the live page under another site's name (DNS rebinding points
    /// the name at the coordinator) is answered 421 naming that host, also in absolute form,
    /// while `/metrics`, `/healthz` and `/readyz` answer under any name; the page is served under
    /// an IP literal, `localhost`, a name of `status_hosts`, and without `Host`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_live_page_is_refused_under_another_sites_host_name_and_probes_are_not() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = http.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let config = CoordinatorConfig { status_hosts: vec!["Coflow.Example.".into()], ..Default::default() };
        let token = coflow_proto::ClusterToken::new("secret").unwrap();
        let service = tokio::spawn(run(config, token, listener, Some(http), async move {
            let _ = stopped.await;
        }));
        let within = Duration::from_secs(10);
        let ready = async {
            while !get(addr, "/readyz").await.starts_with("HTTP/1.0 200") {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        tokio::time::timeout(within, ready).await.expect("ready");
        let as_host = |path: &str, host: &str| answer(addr, format!("GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n"));
        let evil = "rebound.evil.example:9070";
        let page = as_host("/", evil).await;
        assert!(page.starts_with("HTTP/1.0 421"), "{page}");
        assert!(page.contains("text/plain") && page.contains(evil) && !page.contains("<html"), "{page}");
        let status = as_host("/api/status", evil).await;
        assert!(status.starts_with("HTTP/1.0 421") && status.contains("application/json"), "{status}");
        let body: serde_json::Value = serde_json::from_str(status.split("\r\n\r\n").nth(1).unwrap()).unwrap();
        assert_eq!(body["host"], evil, "{status}");
        assert!(body.get("policy").is_none(), "{status}");
        // The URI's authority stands for `Host` when given.
        let absolute = answer(
            addr,
            format!("GET http://{evil}/api/status HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"),
        )
        .await;
        assert!(absolute.starts_with("HTTP/1.1 421") && absolute.contains(evil), "{absolute}");
        for path in ["/metrics", "/healthz", "/readyz"] {
            let out = as_host(path, evil).await;
            assert!(out.starts_with("HTTP/1.0 200"), "{path}: {out}");
        }
        assert!(as_host("/metrics", evil).await.contains("coflow_coordinator_"), "the metrics themselves");
        let ip = addr.to_string();
        let v6 = format!("[::1]:{}", addr.port());
        for host in [ip.as_str(), &v6, "LOCALHOST.", "localhost:9070", "coflow.example:9070", "COFLOW.EXAMPLE"] {
            let out = as_host("/api/status", host).await;
            assert!(out.starts_with("HTTP/1.0 200") && out.contains(r#""policy":"varys""#), "{host}: {out}");
            assert!(as_host("/", host).await.starts_with("HTTP/1.0 200"), "{host}");
        }
        let bare = get(addr, "/api/status").await;
        assert!(bare.starts_with("HTTP/1.0 200") && bare.contains(r#""policy":"varys""#), "no Host: {bare}");
        stop.send(()).unwrap();
        tokio::time::timeout(within, service).await.expect("stops").unwrap().unwrap();
    }

    /// The size of a live view far larger than what a connection of the HTTP listener buffers to
    /// send (its kernel send buffer is set to `coflow_telemetry::SEND_BUFFER`, hyper's to
    /// `coflow_telemetry::WRITE_BUFFER`), so that a peer that does not read keeps its body.
    const LARGE: usize = 16 << 20;

    /// A connection from `from` that asks for `/api/status` and reads the answer's head only,
    /// its receive buffer small, so the body stays with the server; the head read.
    async fn ask_and_never_read(addr: std::net::SocketAddr, from: [u8; 4]) -> (TcpStream, String) {
        let sock = tokio::net::TcpSocket::new_v4().unwrap();
        sock.bind((std::net::Ipv4Addr::from(from), 0).into()).unwrap();
        sock.set_recv_buffer_size(4096).unwrap();
        let mut s = sock.connect(addr).await.unwrap();
        s.write_all(b"GET /api/status HTTP/1.0\r\n\r\n").await.unwrap();
        let mut head = Vec::new();
        let mut b = [0u8; 256];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = s.read(&mut b).await.unwrap();
            assert!(n > 0, "closed early: {}", String::from_utf8_lossy(&head));
            head.extend_from_slice(&b[..n]);
        }
        (s, String::from_utf8_lossy(&head).into_owned())
    }

    /// The whole answer to `/api/status` for a peer at `from`.
    async fn ask(addr: std::net::SocketAddr, from: [u8; 4]) -> String {
        let sock = tokio::net::TcpSocket::new_v4().unwrap();
        sock.bind((std::net::Ipv4Addr::from(from), 0).into()).unwrap();
        let mut s = sock.connect(addr).await.unwrap();
        s.write_all(b"GET /api/status HTTP/1.0\r\n\r\n").await.unwrap();
        let mut out = Vec::new();
        s.read_to_end(&mut out).await.unwrap();
        String::from_utf8(out).unwrap()
    }

    /// An HTTP listener serving the coordinator's router with a live view of [`LARGE`] bytes;
    /// its address, and what stops it.
    fn status_server() -> (std::net::SocketAddr, watch::Sender<bool>, tokio::task::JoinHandle<()>) {
        let samples: telemetry::Ask<Vec<views::Sample>> = Arc::new(|| Box::pin(async { None }));
        let status: telemetry::Ask<String> = Arc::new(|| Box::pin(async { Some("x".repeat(LARGE)) }));
        let (registry, _) = telemetry::metrics("sebf");
        let health = coflow_telemetry::Health::new("starting");
        let router = telemetry::router(samples, Some(status), Default::default(), Arc::new(registry), health);
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let listener = TcpListener::from_std(listener).unwrap();
        let (stop, rx) = watch::channel(false);
        (addr, stop, tokio::spawn(coflow_telemetry::serve(listener, router, rx)))
    }

    /// What a request turned away from `/api/status` gets: 503, `Retry-After` and a JSON reason.
    fn assert_busy(busy: &str) {
        assert!(busy.starts_with("HTTP/1.0 503"), "{}", &busy[..busy.len().min(200)]);
        assert!(busy.contains(&format!("retry-after: {}\r\n", telemetry::STATUS_RETRY_AFTER)), "{busy}");
        assert!(
            busy.ends_with(
                r#"{"error":"the coordinator serves the most status pages it may at once, one per peer; try again"}"#
            ),
            "{busy}"
        );
    }

    /// Peers that ask for the live view and never read hold at most
    /// [`telemetry::STATUS_BODIES`] bodies: the next is answered at once with 503 and
    /// `Retry-After`, and a body's place comes back when its connection drops or has taken it
    /// whole.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn status_bodies_alive_at_once_are_bounded_whatever_peers_read() {
        let (addr, stop, server) = status_server();
        let within = Duration::from_secs(10);
        let mut slow = Vec::new();
        for i in 0..telemetry::STATUS_BODIES {
            let (s, head) =
                tokio::time::timeout(within, ask_and_never_read(addr, [127, 0, 0, 2 + i as u8])).await.expect("a head");
            assert!(head.starts_with("HTTP/1.0 200"), "{head}");
            slow.push(s);
        }
        assert_busy(&tokio::time::timeout(within, ask(addr, [127, 0, 0, 1])).await.expect("answered at once"));
        // A dropped connection gives its body's place back (once the server sees it closed).
        drop(slow.pop());
        let served = tokio::time::timeout(within, async {
            loop {
                let out = ask(addr, [127, 0, 0, 1]).await;
                if out.starts_with("HTTP/1.0 200") {
                    return out;
                }
                assert_busy(&out);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .expect("a place comes back");
        assert!(served.ends_with(&"x".repeat(1000)) && served.len() > LARGE, "the whole body");
        // A body taken whole gives its place back by the time its connection closes.
        let again = tokio::time::timeout(within, ask(addr, [127, 0, 0, 1])).await.expect("answered");
        assert!(again.starts_with("HTTP/1.0 200"), "{}", &again[..again.len().min(200)]);
        drop(slow);
        stop.send(true).unwrap();
        server.await.unwrap();
    }

    /// One peer that asks for the live view again and again without reading holds one body's
    /// place, not all: it is turned away, and other peers are answered meanwhile.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_peer_holds_one_status_body() {
        let (addr, stop, server) = status_server();
        let within = Duration::from_secs(10);
        let (held, head) =
            tokio::time::timeout(within, ask_and_never_read(addr, [127, 0, 0, 2])).await.expect("a head");
        assert!(head.starts_with("HTTP/1.0 200"), "{head}");
        for _ in 0..telemetry::STATUS_BODIES {
            assert_busy(&tokio::time::timeout(within, ask(addr, [127, 0, 0, 2])).await.expect("answered at once"));
        }
        let other = tokio::time::timeout(within, ask(addr, [127, 0, 0, 3])).await.expect("answered");
        assert!(other.starts_with("HTTP/1.0 200") && other.len() > LARGE, "{}", &other[..other.len().min(200)]);
        drop(held);
        stop.send(true).unwrap();
        server.await.unwrap();
    }
}
