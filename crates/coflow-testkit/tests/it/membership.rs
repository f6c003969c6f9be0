//! An agent's membership with the coordinator: what a registration tells it (the coordinator's
//! heartbeat interval and agent timeout), and refusals for good (an unknown datacenter, a later
//! process holding the machine), which end the agent with a typed error after a clean stop,
//! as a data listener that fails for good does, while a coordinator out of reach is waited for
//! as ever.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use coflow_agent::{AgentConfig, AgentListeners, Refusal, RunError};
use coflow_client::{Client, ClientConfig, ClientError, CoflowOptions};
use coflow_proto::pb::coordinator_client::CoordinatorClient;
use coflow_proto::{Security, TokenAttach, pb};
use coflow_sched::{Bandwidth, Link, WideArea};
use coflow_testkit::{Cluster, ClusterConfig, files};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::{content, subscribe};

/// An agent run beside a cluster's, as `coflow agent` runs one.
struct Agent {
    url: String,
    /// Its data listener's socket, shared with the agent's.
    data: std::os::fd::OwnedFd,
    stop: Option<oneshot::Sender<()>>,
    run: JoinHandle<Result<(), RunError>>,
}

/// A scratch data directory, emptied first.
fn scratch(name: &str) -> PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("coflow-membership-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Starts agent `machine` on `data_dir` against `coordinator` (a URL), in `datacenter`.
async fn start(
    coordinator: String,
    security: Security,
    machine: u32,
    data_dir: PathBuf,
    datacenter: Option<&str>,
    port_rate_bps: f64,
) -> anyhow::Result<Agent> {
    let (grpc, data) = (TcpListener::bind("127.0.0.1:0").await?, TcpListener::bind("127.0.0.1:0").await?);
    let scheme = if security.tls().is_some() { "https" } else { "http" };
    let url = format!("{scheme}://{}", grpc.local_addr()?);
    let shared = std::os::fd::AsFd::as_fd(&data).try_clone_to_owned()?;
    let cfg = AgentConfig {
        machine: Some(machine),
        coordinator,
        data_dir,
        port_rate_bps,
        heartbeat_interval_ms: 50,
        datacenter: datacenter.map(str::to_string),
        data_idle_timeout_ms: 2000,
        ..AgentConfig::default()
    };
    let (stop, rx) = oneshot::channel::<()>();
    let shutdown = async move {
        let _ = rx.await;
    };
    let run = tokio::spawn(coflow_agent::run(cfg, security, AgentListeners { grpc, data, metrics: None }, shutdown));
    Ok(Agent { url, data: shared, stop: Some(stop), run })
}

/// What `agent`'s run returned, waited for at most `within`; `None` if it still runs.
async fn ended(agent: &mut Agent, within: Duration) -> Option<Result<(), RunError>> {
    tokio::time::timeout(within, &mut agent.run).await.ok().map(|r| r.expect("the agent's task"))
}

/// A registration is told the coordinator's heartbeat interval and agent timeout (the agent's
/// heartbeats follow the first; the second is what a silent peer is judged by).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registration_is_told_the_coordinators_heartbeat_interval_and_agent_timeout() -> anyhow::Result<()> {
    subscribe();
    let mut cfg = ClusterConfig::new(1, 20e6, "varys");
    (cfg.coordinator.heartbeat_interval_ms, cfg.coordinator.agent_timeout_ms) = (40, 1200);
    let cluster = Cluster::start(cfg).await?;
    let channel = cluster.agent_security(9)?.endpoint(&cluster.coordinator_url()).map_err(anyhow::Error::msg)?;
    let mut c =
        CoordinatorClient::with_interceptor(channel.connect().await?, TokenAttach::new(Some(cluster.token().clone())));
    let reg = pb::RegisterAgentRequest {
        machine_id: 9,
        data_addr: "127.0.0.1:9009".into(),
        port_rate_bps: 1e6,
        incarnation: 1,
        ..Default::default()
    };
    let answer = c.register_agent(reg).await?.into_inner();
    assert_eq!((answer.heartbeat_interval_ms, answer.agent_timeout_ms), (40, 1200));
    cluster.shutdown().await;
    Ok(())
}

/// Agents heartbeat at the interval their coordinator asks, not at their own: with the
/// coordinator's agent timeout (300 ms) far below the agents' configured interval (1 s), a
/// scheduled transfer of about 2 s between two of them ends exact, neither declared dead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_heartbeat_at_the_interval_their_coordinator_asks() -> anyhow::Result<()> {
    subscribe();
    let mut cfg = ClusterConfig::new(2, 1e6, "varys");
    (cfg.coordinator.heartbeat_interval_ms, cfg.coordinator.agent_timeout_ms) = (30, 300);
    cfg.coordinator.bypass_threshold_bytes = 0;
    cfg.heartbeat_interval_ms = 1000;
    let cluster = Cluster::start(cfg).await?;
    let (sender, receiver) = (cluster.client(0).await?, cluster.client(1).await?);
    let c = sender.register(1, CoflowOptions::default()).await?;
    let piece = content(5, 2_000_000);
    sender.put(c, "p", piece.clone()).await?;
    let started = Instant::now();
    let got = tokio::time::timeout(Duration::from_secs(30), receiver.get(c, "p")).await??;
    assert!(got == piece, "the piece came back different");
    assert!(started.elapsed() >= Duration::from_secs(1), "scheduled at the port rate: {:?}", started.elapsed());
    // Idle, an agent sends only heartbeats: looked at every 20 ms for 2 s, both stay alive.
    let mut dead = 0;
    for _ in 0..100 {
        let agents = receiver.status().await?.agents;
        assert_eq!(agents.len(), 2);
        dead += agents.iter().filter(|a| !a.alive).count();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(dead, 0, "agents were seen dead");
    cluster.shutdown().await;
    Ok(())
}

/// An agent naming a datacenter the coordinator's wide area does not have is refused for good:
/// its run returns at once with the refusal, naming the datacenter and those there are (it kept
/// registering, unready, for ever). An agent whose coordinator is out of reach keeps trying.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_in_a_datacenter_the_wide_area_lacks_stops_with_the_reason() -> anyhow::Result<()> {
    subscribe();
    let links = vec![
        Link { from: 0, to: 1, bandwidth: Bandwidth::Constant(20e6) },
        Link { from: 1, to: 0, bandwidth: Bandwidth::Constant(20e6) },
    ];
    let mut cfg = ClusterConfig::new(2, 1e9, "mrtf");
    cfg.coordinator.topology = Some("test".into());
    cfg.coordinator.wide_area = Some(WideArea { datacenters: vec!["a".into(), "b".into()], links });
    cfg.datacenters = vec!["a".into(), "b".into()];
    let cluster = Cluster::start(cfg).await?;
    let started = Instant::now();
    let dir = scratch("dc");
    let mut lost = start(cluster.coordinator_url(), cluster.agent_security(7)?, 7, dir.clone(), Some("z"), 1e9).await?;
    let r = ended(&mut lost, Duration::from_secs(10)).await.expect("a refused agent's run returns");
    let took = started.elapsed();
    eprintln!("refused for an unknown datacenter: run returned after {took:.2?}: {r:?}");
    match r {
        Err(RunError::Refused(Refusal::Invalid(why))) => {
            assert!(why.contains("\"z\"") && why.contains("a, b"), "{why}")
        }
        other => panic!("an agent in datacenter z: {other:?}"),
    }
    let shown = RunError::Refused(Refusal::Invalid("datacenter".into())).to_string();
    assert!(shown.starts_with("refused by the coordinator: "), "{shown}");
    // Transient: a coordinator that is not there is waited for.
    let nowhere = TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", nowhere.local_addr()?);
    drop(nowhere);
    let mut waiting = start(url, cluster.agent_security(8)?, 8, scratch("away"), None, 1e9).await?;
    assert!(ended(&mut waiting, Duration::from_secs(2)).await.is_none(), "an agent waits for its coordinator");
    let _ = waiting.stop.take().expect("once").send(());
    assert!(matches!(ended(&mut waiting, Duration::from_secs(10)).await, Some(Ok(()))), "a clean stop");
    let _ = std::fs::remove_dir_all(dir);
    let _ = std::fs::remove_dir_all(scratch("away"));
    cluster.shutdown().await;
    Ok(())
}

/// An agent whose data listener fails for good (its socket shut down: accepting fails with
/// `EINVAL`, which no retry mends) stops with the error, as on a shutdown, rather than run on
/// unable to serve a fetch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_whose_data_listener_fails_for_good_stops_with_the_error() -> anyhow::Result<()> {
    subscribe();
    let cluster = Cluster::start(ClusterConfig::new(1, 1e9, "varys")).await?;
    let dir = scratch("listener");
    let mut agent = start(cluster.coordinator_url(), cluster.agent_security(5)?, 5, dir.clone(), None, 1e9).await?;
    assert!(ended(&mut agent, Duration::from_millis(300)).await.is_none(), "the agent runs");
    rustix::net::shutdown(&agent.data, rustix::net::Shutdown::Both)?;
    let r = ended(&mut agent, Duration::from_secs(10)).await.expect("the agent stops");
    assert!(
        matches!(&r, Err(RunError::DataPlane(e)) if e.raw_os_error() == Some(rustix::io::Errno::INVAL.raw_os_error())),
        "{r:?}"
    );
    assert!(r.unwrap_err().to_string().starts_with("data plane: "));
    let _ = std::fs::remove_dir_all(dir);
    cluster.shutdown().await;
    Ok(())
}

/// An agent process replaced by a later one for its machine (over TLS, where the later one's
/// certificate takes the machine at once) stops: the get it was receiving ends with a typed
/// error, its run returns the refusal, and the machine serves from the later process (the old
/// one kept running, unready, its clients told the coordinator is unreachable for ever).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_superseded_agent_stops_and_its_get_in_flight_ends_typed() -> anyhow::Result<()> {
    subscribe();
    let cluster = Cluster::start(ClusterConfig::new(1, 2e6, "varys").with_tls()).await?;
    let tls = cluster.tls_dir().expect("a TLS cluster").to_path_buf();
    let (old_dir, new_dir) = (scratch("old"), scratch("new"));
    let mut old = start(cluster.coordinator_url(), cluster.agent_security(20)?, 20, old_dir.clone(), None, 2e6).await?;
    let c0 = cluster.client(0).await?;
    let coflow = c0.register(1, CoflowOptions::default()).await?;
    let piece = content(3, 8_000_000);
    c0.put(coflow, "p", piece.clone()).await?;
    let client = |agent: &str| {
        Client::connect(ClientConfig::tls(cluster.coordinator_url(), agent.to_string(), files(&tls, "client-testkit")))
    };
    let at_old = client(&old.url).await?;
    // The old process serves once registered; then its get of 8 MB at 2 MB/s is in flight.
    let t = Instant::now();
    let get = loop {
        let c = at_old.clone();
        let get = tokio::spawn(async move { c.get(coflow, "p").await });
        tokio::time::sleep(Duration::from_millis(300)).await;
        if !get.is_finished() {
            break get;
        }
        let e = get.await?.expect_err("8 MB at 2 MB/s takes 4 s");
        assert!(t.elapsed() < Duration::from_secs(10), "the old process never served: {e}");
    };
    let mut new = start(cluster.coordinator_url(), cluster.agent_security(20)?, 20, new_dir.clone(), None, 2e6).await?;
    let superseded = Instant::now();
    let r = ended(&mut old, Duration::from_secs(10)).await.expect("a superseded agent's run returns");
    let stopped = superseded.elapsed();
    let got = tokio::time::timeout(Duration::from_secs(1), get).await.expect("the get ended with the agent")?;
    eprintln!("superseded: run returned after {stopped:.2?}: {r:?}; the get in flight: {:?}", got.as_ref().err());
    assert!(matches!(r, Err(RunError::Refused(Refusal::Superseded(_)))), "{r:?}");
    assert!(
        matches!(got, Err(ClientError::AgentUnreachable(_) | ClientError::CoordinatorUnreachable(_))),
        "the get through the superseded process: {:?}",
        got.map(|b| b.len())
    );
    // The machine is the later process's: a get through it has the piece whole.
    let at_new = client(&new.url).await?;
    let t = Instant::now();
    loop {
        match at_new.get(coflow, "p").await {
            Ok(bytes) => break assert!(bytes == piece, "the piece through the later process"),
            Err(e) => assert!(t.elapsed() < Duration::from_secs(20), "the later process never served: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(ended(&mut new, Duration::from_millis(10)).await.is_none(), "the later process runs on");
    let _ = new.stop.take().expect("once").send(());
    assert!(matches!(ended(&mut new, Duration::from_secs(10)).await, Some(Ok(()))));
    let _ = std::fs::remove_dir_all(old_dir);
    let _ = std::fs::remove_dir_all(new_dir);
    cluster.shutdown().await;
    Ok(())
}

/// A get waiting for a coordinator that went away (it waits up to `coordinator_grace_ms`, 30 s)
/// ends with a typed error as soon as its agent stops, shut down or refused for good, rather
/// than when the server's drain bound (5 s) drops its connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_agent_ends_a_get_waiting_for_the_coordinator_at_once() -> anyhow::Result<()> {
    subscribe();
    let mut cluster = Cluster::start(ClusterConfig::new(1, 20e6, "varys")).await?;
    let c0 = cluster.client(0).await?;
    let coflow = c0.register(1, CoflowOptions::default()).await?;
    cluster.stop_coordinator().await;
    let get = tokio::spawn(async move { c0.get(coflow, "p").await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!get.is_finished(), "the get waits for the coordinator");
    let stopping = Instant::now();
    cluster.kill_agent(0).await;
    let got = tokio::time::timeout(Duration::from_secs(10), get).await.expect("the get ends")?;
    let took = stopping.elapsed();
    eprintln!("a get waiting for the coordinator ended {took:.2?} after its agent was told to stop: {got:?}");
    assert!(matches!(&got, Err(ClientError::AgentUnreachable(m)) if m.contains("shutting down")), "{got:?}");
    assert!(took < Duration::from_secs(2), "the get ended {took:?} after the stop");
    cluster.shutdown().await;
    Ok(())
}
