//! Loopback integration tests: a coordinator, several agents and clients in one process on
//! `127.0.0.1:0`.

mod abuse;
mod capability;
mod faults;
mod live;
mod membership;
mod ops;
mod rates;
mod session;
mod tls;
mod wide_area;

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use coflow_agent::Phantom;
use coflow_client::{Client, CoflowId, CoflowOptions};
use coflow_testkit::Cluster;

pub(crate) use coflow_testkit::content;

pub(crate) fn tag(coflow: CoflowId, m: u64, r: u64) -> u64 {
    coflow.0.wrapping_mul(1_000_000).wrapping_add(m * 1000 + r)
}

/// Registers a `mappers` × `reducers` shuffle named `name` on `cluster` (mappers on machines
/// `0..mappers`, reducers after them), puts piece `m`→`r` of `base + (m·reducers + r)·step`
/// bytes, gets every piece at once, checks each is exactly the bytes put, and unregisters.
pub(crate) async fn shuffle(
    cluster: &Cluster,
    name: &str,
    (mappers, reducers): (u64, u64),
    (base, step): (usize, usize),
) -> anyhow::Result<()> {
    let len = move |m: u64, r: u64| base + (m * reducers + r) as usize * step;
    let c = cluster.client(0).await?;
    let options = CoflowOptions { name: name.into(), ..Default::default() };
    let coflow = c.register((mappers * reducers) as u32, options).await?;
    for m in 0..mappers {
        let mapper = cluster.client(m as usize).await?;
        for r in 0..reducers {
            mapper.put(coflow, &format!("m{m}-r{r}"), content(tag(coflow, m, r), len(m, r))).await?;
        }
    }
    let mut gets = Vec::new();
    for r in 0..reducers {
        let reducer = cluster.client((mappers + r) as usize).await?;
        for m in 0..mappers {
            let reducer = reducer.clone();
            gets.push(tokio::spawn(async move { (m, r, reducer.get(coflow, &format!("m{m}-r{r}")).await) }));
        }
    }
    for g in gets {
        let (m, r, got) = g.await?;
        assert!(got? == content(tag(coflow, m, r), len(m, r)), "piece m{m}-r{r} differs");
    }
    c.unregister(coflow).await?;
    Ok(())
}

/// The rates of a coflow's flows, as the coordinator's status shows them.
pub(crate) async fn flow_rates(c: &Client, coflow: CoflowId) -> Vec<f64> {
    let st = c.status().await.unwrap();
    st.coflows.iter().filter(|k| k.coflow_id == coflow.0).flat_map(|k| &k.flows).map(|f| f.rate_bps).collect()
}

/// A phantom agent for `machine` (its certificate, or the token) that says it serves data at
/// `addr` and sends at `rate` bytes per second, heartbeating every `heartbeat`, and speaks for
/// the cluster's client (in TLS mode, the owner of its coflows).
pub(crate) async fn phantom_at(
    cluster: &Cluster,
    machine: u32,
    addr: &str,
    rate: f64,
    heartbeat: Duration,
) -> anyhow::Result<Phantom> {
    let p = Phantom::connect(
        &cluster.coordinator_url(),
        &cluster.agent_security(machine)?,
        machine,
        addr,
        rate,
        heartbeat,
        Duration::from_secs(5),
    )
    .await?;
    Ok(p.for_client(cluster.client_identity()))
}

/// [`phantom_at`] at a port of its own, sending at 1 MB/s and heartbeating every 50 ms.
pub(crate) async fn phantom(cluster: &Cluster, machine: u32) -> anyhow::Result<Phantom> {
    phantom_at(cluster, machine, &format!("127.0.0.1:{}", 9000 + machine), 1e6, Duration::from_millis(50)).await
}

/// The value of the first sample of `name` (with any labels) on a metrics page; panics with the
/// page if it has none.
pub(crate) fn metric(page: &str, name: &str) -> f64 {
    page.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{page}"))
}

/// Logs to the test output, so that a failing test shows its trace.
pub(crate) fn subscribe() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
        .with_test_writer()
        .try_init();
}

/// Log lines, captured by a subscriber scoped to this thread (the test's current-thread
/// runtime runs every task of the cluster on it).
#[derive(Clone, Default)]
pub(crate) struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    /// Captures the warnings and errors logged on this thread while the guard lives.
    pub(crate) fn warnings() -> (Captured, tracing::subscriber::DefaultGuard) {
        let logs = Captured::default();
        let w = logs.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::WARN)
            .with_ansi(false)
            .with_writer(move || w.clone())
            .finish();
        (logs, tracing::subscriber::set_default(subscriber))
    }

    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}
