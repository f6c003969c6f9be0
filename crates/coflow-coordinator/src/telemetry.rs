//! The coordinator's HTTP face: `/metrics` (histograms the service observes, counters and gauges
//! read from the core at each scrape), `/healthz` and `/readyz`, and the live web page (`/`, which
//! reads `/api/status` and `/metrics`), served only under the host names of [`StatusHosts`].
//!
//! Histograms: decision time (wall time of a `handle_timeout` that decided, by policy), the
//! rate-push delay (from the decision that changed a rate to the push of its batch), and CCT (by
//! policy and Varys bin, from a scheduled coflow's first get to the end of its last flow).

use std::future::Future;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use coflow_telemetry::prometheus_client::metrics::family::Family;
use coflow_telemetry::prometheus_client::metrics::histogram::Histogram;
use coflow_telemetry::{Bodies, Health, Metrics, Peer, Scrape, exponential_buckets};

use crate::core::Observation;
use crate::views::{Sample, StatusView};

type Labels = Vec<(&'static str, String)>;
type Histograms = Family<Labels, Histogram, fn() -> Histogram>;

/// The web page: plain HTML and a little JavaScript, no build step.
const PAGE: &str = include_str!("web/index.html");

/// The most `/api/status` bodies alive at once (waiting to be built, being built, or not yet
/// taken whole by their connection), at most one per peer group ([`coflow_telemetry::Peer`]):
/// with many coflows one is tens of megabytes, so peers that ask and never read must not each
/// keep one, and one peer must not hold them all. Past it a request is answered at once with
/// 503 and `Retry-After`.
pub(crate) const STATUS_BODIES: usize = 4;

/// The answer to a request for `/api/status` turned away.
pub(crate) const STATUS_BUSY: &str =
    r#"{"error":"the coordinator serves the most status pages it may at once, one per peer; try again"}"#;

/// The seconds `Retry-After` asks a peer turned away from `/api/status` to wait.
pub(crate) const STATUS_RETRY_AFTER: &str = "2";

/// The service's histograms; cheap to clone (they share their counts).
#[derive(Clone, Debug)]
pub(crate) struct Observer {
    policy: String,
    decision: Histograms,
    push_delay: Histogram,
    cct: Histograms,
}

fn seconds(d: coflow_core::Nanos) -> f64 {
    d.0 as f64 / 1e9
}

impl Observer {
    /// One decision took `d`.
    pub(crate) fn decision(&self, d: Duration) {
        self.decision.get_or_create(&vec![("policy", self.policy.clone())]).observe(d.as_secs_f64());
    }

    /// What the core measured.
    pub(crate) fn observe(&self, o: Observation) {
        match o {
            Observation::PushDelay(d) => self.push_delay.observe(seconds(d)),
            Observation::Completed { bin, cct } => self
                .cct
                .get_or_create(&vec![("policy", self.policy.clone()), ("bin", bin.name().to_string())])
                .observe(seconds(cct)),
        }
    }
}

/// The coordinator's metrics and its observer, for `policy`.
pub(crate) fn metrics(policy: &str) -> (Metrics, Observer) {
    let mut m = Metrics::new("coordinator", env!("CARGO_PKG_VERSION"));
    // 10 µs to about 10 s; 1 ms to about 17 min.
    let fast: fn() -> Histogram = || Histogram::new(exponential_buckets(1e-5, 2.0, 21));
    let slow: fn() -> Histogram = || Histogram::new(exponential_buckets(1e-3, 2.0, 21));
    let o = Observer {
        policy: policy.to_string(),
        decision: Family::new_with_constructor(fast),
        push_delay: fast(),
        cct: Family::new_with_constructor(slow),
    };
    let r = m.registry("coordinator");
    r.register("decision_seconds", "Wall time of one policy decision, by policy", o.decision.clone());
    r.register(
        "rate_push_delay_seconds",
        "Time from a decision that changed rates to the push of their batch to agents",
        o.push_delay.clone(),
    );
    r.register(
        "cct_seconds",
        "Coflow completion time, from a scheduled coflow's first get to the end of its last flow, by policy and Varys bin",
        o.cct.clone(),
    );
    (m, o)
}

/// Asks the core task for something (its counters and gauges, its live view); `None` once it
/// has stopped.
pub(crate) type Ask<T> = Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Option<T>> + Send>> + Send + Sync>;

/// `/metrics`, `/healthz`, `/readyz`, and with `status` (which gives the live view's JSON,
/// [`status_json`]) the web page and `/api/status`, at most [`STATUS_BODIES`] of whose bodies
/// are alive at once, one per peer group, and only to requests whose host `hosts` allows.
pub(crate) fn router(
    samples: Ask<Vec<Sample>>,
    status: Option<Ask<String>>,
    hosts: StatusHosts,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
) -> Router {
    let router = coflow_telemetry::router(scrape(samples, metrics), health);
    let Some(status) = status else { return router };
    let bodies = Bodies::new(STATUS_BODIES);
    let page = Router::new()
        .route("/", get(|| async { ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], PAGE) }))
        .route(
            "/api/status",
            // `coflow_telemetry::serve` gives every request its peer.
            get(move |axum::Extension(peer): axum::Extension<Peer>| {
                let (status, bodies) = (status.clone(), bodies.clone());
                async move {
                    let json = [(header::CONTENT_TYPE, "application/json")];
                    let Some(place) = bodies.try_take(peer.group()) else {
                        let retry = [(header::RETRY_AFTER, STATUS_RETRY_AFTER)];
                        return (StatusCode::SERVICE_UNAVAILABLE, retry, json, STATUS_BUSY).into_response();
                    };
                    let body = match status().await {
                        Some(json) => json,
                        None => serde_json::json!({ "error": "the coordinator is stopping" }).to_string(),
                    };
                    (json, place.body(body.into())).into_response()
                }
            }),
        )
        // On these two routes only: probes and scrapers name the listener as they please.
        .route_layer(axum::middleware::from_fn(move |request: Request, next: Next| {
            let hosts = hosts.clone();
            async move {
                match hosts.refused(&request) {
                    Some(host) => misdirected(request.uri().path(), &host),
                    None => next.run(request).await,
                }
            }
        }));
    router.merge(page)
}

/// The host names under which the live web page (`/`, `/api/status`) is served, against DNS
/// rebinding: a page of another site whose name the attacker points at the coordinator's address
/// is, to the browser, of the same origin as the coordinator's page under that name, and could
/// read it; but the browser names that site in `Host`. So the page is served only when `Host`
/// names an IP literal (IPv4, or IPv6 in brackets), `localhost`, or one of the configured names
/// (`status_hosts`), whatever its port, in any case, with or without a trailing dot; and to a
/// request without `Host` (HTTP/1.0), which no browser sends.
#[derive(Clone, Debug, Default)]
pub(crate) struct StatusHosts {
    /// The configured names, without a trailing dot.
    names: Arc<[String]>,
}

impl StatusHosts {
    /// The page served under IP literals, `localhost` and `names` (validated: no port).
    pub(crate) fn new(names: &[String]) -> StatusHosts {
        StatusHosts { names: names.iter().map(|n| n.strip_suffix('.').unwrap_or(n).to_string()).collect() }
    }

    /// Whether the page is served to a request whose `Host` header is `host` (a host and an
    /// optional port).
    pub(crate) fn allows(&self, host: &str) -> bool {
        if let Some(rest) = host.strip_prefix('[') {
            return rest.split_once(']').is_some_and(|(ip, port)| ip.parse::<Ipv6Addr>().is_ok() && is_port(port));
        }
        let (name, port) = host.find(':').map_or((host, ""), |i| host.split_at(i));
        let name = name.strip_suffix('.').unwrap_or(name);
        is_port(port)
            && (name.parse::<Ipv4Addr>().is_ok()
                || name.eq_ignore_ascii_case("localhost")
                || self.names.iter().any(|n| n.eq_ignore_ascii_case(name)))
    }

    /// The host named by `request` that the page is not served under, if any, of its `Host`
    /// headers and the authority of its target in absolute form (`GET http://host/ HTTP/1.1`,
    /// which HTTP reads in place of `Host`): every one must be allowed.
    fn refused(&self, request: &Request) -> Option<String> {
        let authority = request.uri().authority().map(|a| a.as_str().rsplit('@').next().unwrap_or_default());
        let hosts = request.headers().get_all(header::HOST).into_iter().map(|h| h.to_str().map_err(|_| h));
        authority.map(Ok).into_iter().chain(hosts).find_map(|h| match h {
            Ok(h) if self.allows(h) => None,
            Ok(h) => Some(h.to_string()),
            Err(h) => Some(String::from_utf8_lossy(h.as_bytes()).into_owned()),
        })
    }
}

/// Whether `port` is what may follow a host in `Host`: nothing, or `:` and digits.
fn is_port(port: &str) -> bool {
    port.is_empty() || port.strip_prefix(':').is_some_and(|p| p.bytes().all(|b| b.is_ascii_digit()))
}

/// The answer to a request for the page at `path` under `host`, which it is not served under:
/// 421 Misdirected Request, which says that this server does not answer for that name (RFC 9110,
/// 15.5.20), rather than 403 Forbidden, which would say the requester may not have it and that
/// other credentials might help; the body names the host, as JSON for `/api/status`.
fn misdirected(path: &str, host: &str) -> Response {
    let why = format!(
        "the coordinator's live page is not served under the host name {host:?}: reach it by its IP address, \
         by localhost, or by a name listed in status_hosts"
    );
    if path == "/api/status" {
        let body = serde_json::json!({ "error": why, "host": host }).to_string();
        (StatusCode::MISDIRECTED_REQUEST, [(header::CONTENT_TYPE, "application/json")], body).into_response()
    } else {
        (StatusCode::MISDIRECTED_REQUEST, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], why + "\n")
            .into_response()
    }
}

/// The metrics page, its counters and gauges asked of the core at each scrape, one ask at a time:
/// scrapes that arrive while one asks wait for it to end, and the first of them then asks once
/// for them all, so that however many scrape at once (the listener has no authentication), the
/// core has at most one ask of them waiting among its events, and each scrape shows the core's
/// counts from after its arrival.
fn scrape(samples: Ask<Vec<Sample>>, metrics: Arc<Metrics>) -> Scrape {
    // When the last answered ask was made.
    let asked: Arc<tokio::sync::Mutex<Option<Instant>>> = Arc::default();
    Arc::new(move || {
        let (samples, metrics, asked) = (samples.clone(), metrics.clone(), asked.clone());
        Box::pin(async move {
            let arrived = Instant::now();
            let mut last = asked.lock().await;
            if last.is_none_or(|at| at < arrived) {
                let at = Instant::now();
                if let Some(s) = samples().await {
                    metrics.snapshot().set(s);
                    *last = Some(at);
                }
            }
            drop(last);
            metrics.encode()
        })
    })
}

/// The live view as the web page reads it: numbers raw (bytes, bytes per second, seconds).
pub fn status_json(v: &StatusView) -> serde_json::Value {
    let coflows: Vec<_> = v
        .coflows
        .iter()
        .map(|c| {
            let size: u64 = c.flows.iter().map(|f| f.size).sum();
            let sent: u64 = c.flows.iter().map(|f| f.sent).sum();
            // Summed from +0.0: a float sum of nothing is -0.0, which JSON would carry.
            let rate = c.flows.iter().fold(0.0, |sum, f| sum + f.rate);
            serde_json::json!({
                "id": c.id.0,
                "name": c.name,
                "width": c.num_flows.max(c.puts),
                "bytes": c.bytes,
                "flows": c.flows.len(),
                "in_flight_bytes": size,
                "in_flight_sent_bytes": sent,
                "rate": rate,
                "age_seconds": c.age.map(seconds),
                "deadline_seconds": c.deadline.map(seconds),
                "admission": c.admission.map(|a| a.name()),
                "lease_seconds": c.lease_left.map(seconds),
                "job": c.job.0,
                "bypass": c.bypass,
            })
        })
        .collect();
    let agents: Vec<_> = v
        .agents
        .iter()
        .map(|a| {
            serde_json::json!({
                "machine": a.machine.0,
                "data_addr": a.data_addr.to_string(),
                "alive": a.alive,
                "departed": a.departed,
                "tx": a.tx_bps,
                "rx": a.rx_bps,
                "port_rate": a.port_rate,
                "uplink": a.uplink_bps,
                "downlink": a.downlink_bps,
                "silent_seconds": seconds(a.silent),
                "datacenter": a.datacenter,
            })
        })
        .collect();
    serde_json::json!({ "policy": v.policy, "coflows": coflows, "agents": agents })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The page is served under IP literals (IPv6 in brackets), `localhost` and the configured
    /// names, with any port, in any case, with or without a trailing dot; under no other name,
    /// however much of an allowed one it holds.
    #[test]
    fn the_page_is_served_under_ip_literals_localhost_and_configured_names_only() {
        let hosts = StatusHosts::new(&["coflow.example".into(), "Ops.Example.".into()]);
        for allowed in [
            "127.0.0.1",
            "127.0.0.1:9070",
            "10.1.2.3:80",
            "127.0.0.1.",
            "[::1]",
            "[::1]:9070",
            "[2001:db8::7]:9070",
            "[::ffff:127.0.0.1]:9070",
            "localhost",
            "localhost:9070",
            "LOCALHOST",
            "localhost.",
            "LocalHost.:9070",
            "coflow.example",
            "COFLOW.Example:9070",
            "coflow.example.",
            "ops.example",
            "OPS.EXAMPLE.:1",
        ] {
            assert!(hosts.allows(allowed), "{allowed}");
        }
        for refused in [
            "evil.example",
            "evil.example:9070",
            "EVIL.EXAMPLE",
            "localhost.evil.example",
            "evil.localhost",
            "coflow.example.evil.example",
            "127.0.0.1.evil.example",
            "127.0.0.1.nip.io:9070",
            "evil-coflow.example",
            "coflow.example..",
            "",
            ":9070",
            "::1",
            "[::1",
            "[::1]x",
            "[::1]:90x",
            "[evil.example]",
            "[127.0.0.1]",
            "127.0.0.1:80x",
            "localhost:9070:1",
            "coflow.example:http",
            "user@localhost",
        ] {
            assert!(!hosts.allows(refused), "{refused:?}");
        }
        assert!(!StatusHosts::default().allows("coflow.example"), "a name only once configured");
    }

    /// Scrapes that come while one waits for the core share the next ask: sixteen at once cost
    /// the core two asks (the first's, then one for the fifteen that came during it), not sixteen,
    /// and each shows counts asked after it arrived.
    #[tokio::test]
    async fn scrapes_at_once_ask_the_core_once_for_all_that_wait() {
        let (open, gate) = tokio::sync::watch::channel(false);
        let asks = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let a = asks.clone();
        let samples: Ask<Vec<Sample>> = Arc::new(move || {
            let (asks, mut gate) = (a.clone(), gate.clone());
            Box::pin(async move {
                let n = asks.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                let _ = gate.wait_for(|&open| open).await;
                Some(vec![Sample::counter("asks", "Asks of the core.", n)])
            })
        });
        let (registry, _) = metrics("sebf");
        let scrape = scrape(samples, Arc::new(registry));
        let mut scrapes = tokio::task::JoinSet::new();
        for _ in 0..16 {
            scrapes.spawn(scrape());
        }
        // On this one thread, every scrape runs until it waits: the first for the core, the
        // others for the first.
        for _ in 0..64 {
            tokio::task::yield_now().await;
        }
        assert_eq!(asks.load(std::sync::atomic::Ordering::SeqCst), 1);
        open.send(true).unwrap();
        let pages = scrapes.join_all().await;
        assert_eq!(asks.load(std::sync::atomic::Ordering::SeqCst), 2, "one ask for the fifteen that waited");
        let shown =
            |n: u64| pages.iter().filter(|p| p.contains(&format!("coflow_coordinator_asks_total {n}\n"))).count();
        assert_eq!((shown(1), shown(2)), (1, 15));
        // A scrape that comes later asks again.
        assert!(scrape().await.contains("coflow_coordinator_asks_total 3\n"));
    }
}
