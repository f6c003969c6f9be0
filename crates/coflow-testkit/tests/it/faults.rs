//! Faults: a coordinator restart mid-transfer, a frozen or dead source, a client that departs,
//! storage changed under an agent, unregister (with gets in flight too), and the limits. Every
//! get ends, with exactly the bytes put or a typed error, within the bounds the README states.

use std::time::{Duration, Instant};

use coflow_agent::AgentConfig;
use coflow_client::{Client, ClientError, CoflowId, CoflowOptions, Nanos, Readiness};
use coflow_proto::pb::agent_client::AgentClient;
use coflow_proto::{ErrorKind, TokenAttach, pb};
use coflow_testkit::{Cluster, ClusterConfig, scrape};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::{content, flow_rates, metric, subscribe};

/// Two coflows put on machine 0, the big one got from machine 1 and then the small one from
/// machine 2: SEBF serves the small one and holds the big one's flow at rate 0 behind it.
struct HeldBehind {
    /// The client on machine 0, the source.
    c: Client,
    big: CoflowId,
    /// The gets in flight, of the small and of the big coflow.
    gs: tokio::task::JoinHandle<Result<Vec<u8>, ClientError>>,
    gb: tokio::task::JoinHandle<Result<Vec<u8>, ClientError>>,
}

/// Sets up [`HeldBehind`] with pieces of `small_bytes` (`content(1, ..)`) and `big_bytes`
/// (`content(2, ..)`), and fails unless the big flow is held at rate 0 while the small one moves
/// within a second.
async fn big_held_behind_small(cluster: &Cluster, small_bytes: usize, big_bytes: usize) -> anyhow::Result<HeldBehind> {
    let c = cluster.client(0).await?;
    let small = c.register(1, CoflowOptions { name: "small".into(), ..Default::default() }).await?;
    let big = c.register(1, CoflowOptions { name: "big".into(), ..Default::default() }).await?;
    c.put(small, "s", content(1, small_bytes)).await?;
    c.put(big, "b", content(2, big_bytes)).await?;
    let (r1, r2) = (cluster.client(1).await?, cluster.client(2).await?);
    let gb = tokio::spawn(async move { r1.get(big, "b").await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let gs = tokio::spawn(async move { r2.get(small, "s").await });
    let mut held = false;
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_millis(25)).await;
        if flow_rates(&c, big).await == [0.0] && flow_rates(&c, small).await.iter().any(|&r| r > 0.0) {
            held = true;
            break;
        }
    }
    assert!(held, "the big coflow's flow should wait at rate 0 behind the small one's");
    Ok(HeldBehind { c, big, gs, gb })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_issued_while_the_coordinator_is_away_starts_once_it_is_back() -> anyhow::Result<()> {
    subscribe();
    let mut cluster = Cluster::start(ClusterConfig::new(2, 20_000_000.0, "varys")).await?;
    let c = cluster.client(0).await?;
    let coflow = c.register(1, CoflowOptions { name: "across".into(), ..Default::default() }).await?;
    c.put(coflow, "p", content(3, 2_000_000)).await?;
    cluster.stop_coordinator().await;
    // The get reaches its agent while no coordinator answers: it waits (within the agent's
    // coordinator_grace_ms) instead of failing coordinator-unreachable, and after the restart the new
    // coordinator answers "not yet" until the source agent has re-announced the piece.
    let r = cluster.client(1).await?;
    let get = tokio::spawn(async move { r.get(coflow, "p").await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!get.is_finished(), "the get should wait for the coordinator, not fail");
    // A put meanwhile is not taken, and says so with a kind the client may retry on, on the wire
    // too (as every error the services return names its kind).
    let put = c.put(coflow, "q", vec![1; 10]).await;
    assert!(
        matches!(&put, Err(ClientError::CoordinatorUnreachable(_))),
        "a put while the coordinator is away: {put:?}"
    );
    let channel = tonic::transport::Endpoint::from_shared(cluster.agent_url(0))?.connect().await?;
    let mut agent = AgentClient::with_interceptor(channel, TokenAttach::new(Some(cluster.token().clone())));
    let body = pb::put_request::Source::Content(vec![1; 10]);
    let put = pb::PutRequest { coflow_id: coflow.0, data_id: "q".into(), source: Some(body) };
    let refused = agent.put(put).await.expect_err("a put while the coordinator is away");
    assert_eq!(ErrorKind::of(&refused), Some(ErrorKind::CoordinatorUnreachable), "{refused:?}");
    cluster.restart_coordinator().await?;
    let got = tokio::time::timeout(Duration::from_secs(20), get).await???;
    assert!(got == content(3, 2_000_000), "the piece differs");
    cluster.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_coordinator_restart_every_in_flight_get_finishes_with_exact_bytes() -> anyhow::Result<()> {
    subscribe();
    let mut cluster = Cluster::start(ClusterConfig::new(3, 4_000_000.0, "varys")).await?;
    // Two coflows share machine 0's port: SEBF serves the smaller and holds the bigger at rate 0.
    let HeldBehind { gs, gb, .. } = big_held_behind_small(&cluster, 3_000_000, 5_000_000).await?;
    cluster.restart_coordinator().await?;
    let (b, s) = tokio::time::timeout(Duration::from_secs(30), async { (gb.await, gs.await) }).await?;
    assert!(s?? == content(1, 3_000_000), "the small coflow's piece differs");
    assert!(b?? == content(2, 5_000_000), "the big coflow's piece differs");
    let page = scrape(cluster.coordinator_metrics).await;
    assert!(metric(&page, "coflow_coordinator_flows_recovered_total") >= 1.0, "{page}");
    cluster.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flow_waiting_for_a_coordinator_that_does_not_come_back_ends_after_the_grace() -> anyhow::Result<()> {
    subscribe();
    let mut cfg = ClusterConfig::new(3, 4_000_000.0, "varys");
    cfg.agent = AgentConfig { coordinator_grace_ms: 1000, data_idle_timeout_ms: 60_000, ..cfg.agent };
    let mut cluster = Cluster::start(cfg).await?;
    let HeldBehind { gs, gb, .. } = big_held_behind_small(&cluster, 6_000_000, 8_000_000).await?;
    cluster.stop_coordinator().await;
    let t = Instant::now();
    // The paused get ends after the grace; the one moving keeps its rate and completes.
    let e = tokio::time::timeout(Duration::from_secs(10), gb).await??.unwrap_err();
    assert!(matches!(&e, ClientError::CoordinatorUnreachable(m) if m.contains("coordinator is unreachable")), "{e}");
    assert!(t.elapsed() < Duration::from_secs(4), "{:?}", t.elapsed());
    assert!(tokio::time::timeout(Duration::from_secs(10), gs).await??? == content(1, 6_000_000));
    cluster.shutdown().await;
    Ok(())
}

/// A source agent played by the test: a phantom agent (registered, heartbeating until silenced)
/// announces one piece, and a listener answers fetches with the header and then nothing (or
/// keepalives only).
struct FakeSource {
    phantom: Option<coflow_agent::Phantom>,
    serving: tokio::task::JoinHandle<()>,
}

impl FakeSource {
    async fn start(cluster: &Cluster, coflow: CoflowId, size: u64, keepalive: bool) -> anyhow::Result<FakeSource> {
        let machine = 7;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let data_addr = listener.local_addr()?.to_string();
        let phantom = coflow_agent::Phantom::connect(
            &cluster.coordinator_url(),
            &cluster.agent_security(machine)?,
            machine,
            &data_addr,
            1e9,
            Duration::from_millis(50),
            Duration::from_secs(5),
        )
        .await?;
        phantom.put(coflow, "p", size).await?;
        let serving = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((mut sock, _)) = listener.accept().await {
                let mut req = [0u8; 512];
                let _ = sock.read(&mut req).await;
                let mut head = vec![0u8];
                head.extend_from_slice(&size.to_be_bytes());
                let _ = sock.write_all(&head).await;
                if keepalive {
                    held.push(tokio::spawn(async move {
                        while sock.write_all(b"K").await.is_ok() {
                            tokio::time::sleep(Duration::from_millis(200)).await;
                        }
                    }));
                } else {
                    held.push(tokio::spawn(async move {
                        // Frozen: holds the connection open and says nothing.
                        let _keep = sock;
                        std::future::pending::<()>().await;
                    }));
                }
            }
        });
        Ok(FakeSource { phantom: Some(phantom), serving })
    }

    /// The source stops heartbeating (its session ends); its data connections stay.
    async fn silence(&mut self) {
        if let Some(p) = self.phantom.take() {
            p.close().await;
        }
    }

    async fn stop(mut self) {
        self.silence().await;
        self.serving.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_source_fails_the_get_within_the_idle_timeout() -> anyhow::Result<()> {
    subscribe();
    // The source keeps heartbeating, so only the data plane's read timeout can end the get.
    let cluster = Cluster::start(ClusterConfig::new(2, 50_000_000.0, "varys")).await?;
    let c = cluster.client(0).await?;
    let coflow = c.register(1, CoflowOptions::default()).await?;
    let fake = FakeSource::start(&cluster, coflow, 1_000_000, false).await?;
    let t = Instant::now();
    let got = tokio::time::timeout(Duration::from_secs(15), cluster.client(1).await?.get(coflow, "p")).await?;
    let e = got.unwrap_err();
    assert!(matches!(&e, ClientError::AgentUnreachable(m) if m.contains("sent nothing")), "{e}");
    // The testkit's data_idle_timeout_ms is 2000.
    let took = t.elapsed();
    assert!(took >= Duration::from_millis(1900) && took < Duration::from_secs(5), "{took:?}");
    fake.stop().await;
    cluster.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flow_the_coordinator_fails_ends_the_waiting_get_at_once() -> anyhow::Result<()> {
    subscribe();
    // Keepalives keep the data connection alive and the idle timeout is long: only the
    // coordinator's verdict (the source stopped heartbeating) can end the get.
    let mut cfg = ClusterConfig::new(2, 50_000_000.0, "varys");
    cfg.agent = AgentConfig { data_idle_timeout_ms: 60_000, ..cfg.agent };
    let cluster = Cluster::start(cfg).await?;
    let c = cluster.client(0).await?;
    let coflow = c.register(1, CoflowOptions::default()).await?;
    let mut fake = FakeSource::start(&cluster, coflow, 1_000_000, true).await?;
    let r = cluster.client(1).await?;
    let get = tokio::spawn(async move { r.get(coflow, "p").await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    fake.silence().await;
    let t = Instant::now();
    let e = tokio::time::timeout(Duration::from_secs(15), get).await??.unwrap_err();
    assert!(matches!(&e, ClientError::AgentUnreachable(m) if m.contains("declared")), "{e}");
    // The testkit's agent_timeout_ms is 1000.
    assert!(t.elapsed() < Duration::from_secs(4), "{:?}", t.elapsed());
    fake.stop().await;
    cluster.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_departs_from_a_paused_get_frees_the_task_and_connection_at_once() -> anyhow::Result<()> {
    subscribe();
    let cluster = Cluster::start(ClusterConfig::new(3, 2_000_000.0, "varys")).await?;
    let HeldBehind { c, big, gs, gb, .. } = big_held_behind_small(&cluster, 4_000_000, 8_000_000).await?;
    assert_eq!(metric(&scrape(cluster.agent_metrics[0]).await, "coflow_agent_flows_sending"), 2.0);
    gb.abort();
    let t = Instant::now();
    let mut freed = false;
    while t.elapsed() < Duration::from_millis(1000) {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let (src, dst) = (scrape(cluster.agent_metrics[0]).await, scrape(cluster.agent_metrics[1]).await);
        if metric(&src, "coflow_agent_flows_sending") == 1.0
            && metric(&dst, "coflow_agent_flows_receiving") == 0.0
            && flow_rates(&c, big).await.is_empty()
        {
            freed = true;
            break;
        }
    }
    assert!(freed, "the departed client's task, connection and flow are still there after 1 s");
    assert!(gs.await?? == content(1, 4_000_000));
    cluster.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storage_changed_after_a_put_is_data_lost_never_other_bytes() -> anyhow::Result<()> {
    subscribe();
    let cluster = Cluster::start(ClusterConfig::new(2, 50_000_000.0, "varys")).await?;
    let dir = &cluster.data_dirs[0];
    let file = content(3, 300_000);
    std::fs::write(dir.join("out.data"), &file)?;
    std::fs::write(dir.join("other.data"), &file)?;
    let outside = dir.parent().unwrap().join("outside.data");
    std::fs::write(&outside, content(4, 300_000))?;
    let local = cluster.client(0).await?;
    let remote = cluster.client(1).await?;
    let coflow = local.register(3, CoflowOptions::default()).await?;
    local.put_file(coflow, "flip", "out.data", 0, 300_000).await?;
    local.put_file(coflow, "link", "other.data", 1000, 200_000).await?;
    assert!(remote.get(coflow, "flip").await? == file);

    let mut changed = file.clone();
    for i in [10, 150_000, 299_999] {
        changed[i] ^= 0x5a;
    }
    std::fs::write(dir.join("out.data"), &changed)?;
    std::fs::remove_file(dir.join("other.data"))?;
    std::os::unix::fs::symlink(&outside, dir.join("other.data"))?;
    let root = dir.to_str().unwrap().to_string();
    for (who, c) in [("remote", &remote), ("local", &local)] {
        for id in ["flip", "link"] {
            let e = c.get(coflow, id).await.unwrap_err();
            assert!(matches!(&e, ClientError::DataLost(_)), "{who} {id}: {e}");
            assert!(!e.to_string().contains(&root), "{who} {id}: the message names the data directory: {e}");
        }
    }
    std::fs::write(dir.join("out.data"), &file[..1000])?;
    let e = remote.get(coflow, "flip").await.unwrap_err();
    assert!(matches!(&e, ClientError::DataLost(m) if m.contains("truncated")), "{e}");
    std::fs::remove_file(dir.join("out.data"))?;
    let e = remote.get(coflow, "flip").await.unwrap_err();
    assert!(matches!(&e, ClientError::DataLost(m) if m.contains("removed")), "{e}");
    let page = scrape(cluster.coordinator_metrics).await;
    assert!(page.contains("flows_failed_by_reason_total{reason=\"data-lost\"}"), "{page}");
    cluster.shutdown().await;
    Ok(())
}

/// What a restarted coordinator brings back is what the agents hold: a coflow registered with
/// no piece put yet is gone (a put into it fails `unknown-coflow`), while a coflow with pieces
/// comes back with its seal (the agents holding its pieces were told of it): it takes no more
/// puts, and waiting for all gets with `num_flows` 0, the get of its one piece releases it long
/// before its readiness timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_brings_back_the_seal_of_a_coflow_with_pieces_but_no_coflow_without() -> anyhow::Result<()> {
    subscribe();
    let mut cluster = Cluster::start(ClusterConfig::new(2, 50_000_000.0, "varys")).await?;
    let c = cluster.client(0).await?;
    let empty = c.register(1, CoflowOptions { name: "empty".into(), ..Default::default() }).await?;
    let readiness = Readiness::AllGets { timeout: Nanos::from_secs(60) };
    let sealed = c.register(0, CoflowOptions { name: "sealed".into(), readiness, ..Default::default() }).await?;
    let marker = c.register(1, CoflowOptions { name: "marker".into(), ..Default::default() }).await?;
    c.put(sealed, "a", content(1, 1000)).await?;
    c.seal(sealed).await?;
    assert!(matches!(c.put(sealed, "b", content(2, 1000)).await, Err(ClientError::Sealed(_))));
    // The answer to this put comes on agent 0's session after the seal's notice.
    c.put(marker, "m", content(3, 10)).await?;

    cluster.restart_coordinator().await?;
    let t = Instant::now();
    loop {
        let st = c.status().await;
        if let Ok(st) = &st
            && st.agents.iter().filter(|a| a.alive).count() == 2
            && st.coflows.iter().any(|k| k.coflow_id == sealed.0)
        {
            assert!(st.coflows.iter().all(|k| k.coflow_id != empty.0), "the empty coflow came back");
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "the coflow with a piece was not recovered: {st:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let put = c.put(empty, "x", content(3, 1000)).await;
    assert!(matches!(put, Err(ClientError::UnknownCoflow(_))), "{put:?}");
    let put = c.put(sealed, "b", content(2, 1000)).await;
    assert!(matches!(put, Err(ClientError::Sealed(_))), "the seal came back: {put:?}");
    let t = Instant::now();
    let got = tokio::time::timeout(Duration::from_secs(20), cluster.client(1).await?.get(sealed, "a")).await;
    assert!(got.is_ok_and(|g| g.is_ok_and(|b| b == content(1, 1000))), "released by its get, not its timeout");
    tracing::info!(after = ?t.elapsed(), "the sealed coflow's get");
    cluster.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unregister_frees_every_agent_and_a_restart_brings_back_only_live_coflows() -> anyhow::Result<()> {
    subscribe();
    let mut cluster = Cluster::start(ClusterConfig::new(3, 50_000_000.0, "varys")).await?;
    let c = cluster.client(0).await?;
    let gone = c.register(3, CoflowOptions { name: "gone".into(), ..Default::default() }).await?;
    let options = CoflowOptions {
        name: "kept".into(),
        readiness: Readiness::AllGets { timeout: Nanos::from_millis(500) },
        weight: 2.0,
        ..Default::default()
    };
    let kept = c.register(2, options).await?;
    std::fs::write(cluster.data_dirs[2].join("seg"), content(9, 1000))?;
    for m in 0..3 {
        let a = cluster.client(m).await?;
        a.put(gone, &format!("g{m}"), content(m as u64, 2_000_000)).await?;
    }
    cluster.client(2).await?.put_file(gone, "file", "seg", 0, 1000).await?;
    c.put(kept, "k", content(7, 1000)).await?;
    let stored = |p: &str| metric(p, "coflow_agent_piece_bytes");
    assert_eq!(stored(&scrape(cluster.agent_metrics[1]).await), 2_000_000.0);
    c.unregister(gone).await?;
    let t = Instant::now();
    let mut freed = false;
    while t.elapsed() < Duration::from_secs(2) && !freed {
        tokio::time::sleep(Duration::from_millis(20)).await;
        freed = true;
        for m in 0..3 {
            let page = scrape(cluster.agent_metrics[m]).await;
            let want = if m == 0 { 1000.0 } else { 0.0 };
            freed &= stored(&page) == want
                && metric(&page, "coflow_agent_pieces") == want / 1000.0
                && (metric(&page, "coflow_agent_stored_bytes") == 0.0) == (want == 0.0);
        }
    }
    assert!(freed, "the unregistered coflow's pieces are still held");
    assert!(cluster.data_dirs[2].join("seg").exists(), "the user's file stays");

    cluster.restart_coordinator().await?;
    let mut back = false;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        if let Ok(st) = c.status().await
            && st.agents.iter().filter(|a| a.alive).count() == 3
            && st.coflows.iter().any(|k| k.coflow_id == kept.0)
        {
            back = true;
            assert!(st.coflows.iter().all(|k| k.coflow_id != gone.0), "the unregistered coflow came back");
            let k = st.coflows.iter().find(|k| k.coflow_id == kept.0).unwrap();
            assert_eq!((k.name.as_str(), k.num_flows), ("kept", 2), "the recovered coflow lost its options");
            break;
        }
    }
    assert!(back, "the live coflow was not recovered");
    // It still waits for all gets: one of its two arrives, and the 500 ms timeout releases it.
    let t = Instant::now();
    assert!(cluster.client(1).await?.get(kept, "k").await? == content(7, 1000));
    assert!(t.elapsed() >= Duration::from_millis(400), "released before the readiness timeout: {:?}", t.elapsed());
    c.unregister(kept).await?;
    cluster.shutdown().await;
    Ok(())
}

/// A coflow its owner unregisters with gets in flight takes them with it: the get held behind
/// another coflow fails `unknown-coflow` at once, rather than going on outside the policy at the
/// full port rate and slowing the coflow the order put first, whose get arrives exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unregistering_a_coflow_ends_its_gets_in_flight_with_unknown_coflow() -> anyhow::Result<()> {
    subscribe();
    let cluster = Cluster::start(ClusterConfig::new(3, 4_000_000.0, "varys")).await?;
    let HeldBehind { c, big, gs, gb } = big_held_behind_small(&cluster, 3_000_000, 5_000_000).await?;
    let t = Instant::now();
    c.unregister(big).await?;
    let e = gb.await?.expect_err("the unregistered coflow's get should fail");
    let ended = t.elapsed();
    assert_eq!(e.kind(), Some(ErrorKind::UnknownCoflow), "{e}");
    assert!(ended < Duration::from_secs(2), "the get ended {ended:?} after the unregister");
    assert!(gs.await?? == content(1, 3_000_000), "the other coflow's bytes");
    cluster.shutdown().await;
    Ok(())
}

/// A framework that stops renewing its coflow (it died without unregistering) loses it a lease
/// later: the agents drop its pieces and its gets fail `unknown-coflow`; a coflow whose lease
/// is renewed lives on, across a coordinator restart too (the agents carry its lease back).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coflow_whose_framework_stops_renewing_is_dropped_a_lease_later() -> anyhow::Result<()> {
    subscribe();
    let mut cluster = Cluster::start(ClusterConfig::new(2, 50_000_000.0, "varys")).await?;
    let c = cluster.client(0).await?;
    let leased = || CoflowOptions { lease: Some(Nanos::from_secs(1)), ..Default::default() };
    for bad in [Nanos(0), Nanos::from_millis(999), Nanos::from_secs(86_401)] {
        let e = c.register(1, CoflowOptions { lease: Some(bad), ..Default::default() }).await.unwrap_err();
        assert!(matches!(e, ClientError::Invalid(ref m) if m.starts_with("lease")), "{bad:?}: {e}");
    }
    let (lapsed, kept) = (c.register(1, leased()).await?, c.register(1, leased()).await?);
    c.put(lapsed, "p", content(1, 1_000_000)).await?;
    c.put(kept, "k", content(2, 1000)).await?;
    let renewer = {
        let c = c.clone();
        tokio::spawn(async move {
            loop {
                let _ = c.renew(&[kept]).await;
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        })
    };
    let stored = || async { metric(&scrape(cluster.agent_metrics[0]).await, "coflow_agent_piece_bytes") };
    let t = Instant::now();
    while stored().await != 1000.0 && t.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let lapsed_after = t.elapsed();
    assert_eq!(stored().await, 1000.0, "the lapsed coflow's piece is still held");
    assert!(lapsed_after < Duration::from_secs(3), "dropped {lapsed_after:?} after the puts: lease 1 s");
    let e = cluster.client(1).await?.get(lapsed, "p").await.unwrap_err();
    assert_eq!(e.kind(), Some(ErrorKind::UnknownCoflow), "{e}");
    assert_eq!(c.renew(&[kept, lapsed]).await?, [lapsed]);
    let page = scrape(cluster.coordinator_metrics).await;
    assert_eq!(metric(&page, "coflow_coordinator_coflows_expired_total"), 1.0);

    cluster.restart_coordinator().await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let st = c.status().await?;
    assert_eq!(st.coflows.iter().map(|k| k.coflow_id).collect::<Vec<_>>(), [kept.0], "adopted and renewed");
    assert!((1..=1000).contains(&st.coflows[0].lease_left_ms), "status shows its lease: {:?}", st.coflows[0]);
    assert_eq!(cluster.client(1).await?.get(kept, "k").await?, content(2, 1000));
    renewer.abort();
    c.unregister(kept).await?;
    cluster.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_limits_are_typed_errors_and_idle_connections_are_closed() -> anyhow::Result<()> {
    subscribe();
    let mut cfg = ClusterConfig::new(2, 50_000_000.0, "varys");
    cfg.agent = AgentConfig { max_stored_bytes: 1_000_000, max_data_connections: 2, ..cfg.agent };
    let cluster = Cluster::start(cfg).await?;
    let c = cluster.client(0).await?;
    let coflow = c.register(2, CoflowOptions::default()).await?;
    c.put(coflow, "a", content(1, 600_000)).await?;
    let e = c.put(coflow, "b", content(2, 600_000)).await.unwrap_err();
    assert!(matches!(&e, ClientError::LimitExceeded(m) if m.contains("max_stored_bytes")), "{e}");

    let addr = c.status().await?.agents.iter().find(|a| a.machine_id == 0).unwrap().data_addr.clone();
    let mut idle = Vec::new();
    for _ in 0..2 {
        idle.push(tokio::net::TcpStream::connect(&addr).await?);
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let r = cluster.client(1).await?;
    let e = r.get(coflow, "a").await.unwrap_err();
    assert!(matches!(&e, ClientError::LimitExceeded(m) if m.contains("max_data_connections")), "{e}");
    // The idle connections are closed at the idle timeout (2 s in the testkit).
    let t = Instant::now();
    for mut s in idle {
        let mut b = [0u8; 16];
        let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut b)).await?.unwrap_or(0);
        assert!(n == 0 || b[0] == 3, "closed, or told bad request");
    }
    assert!(t.elapsed() < Duration::from_secs(4), "{:?}", t.elapsed());
    assert!(r.get(coflow, "a").await? == content(1, 600_000));
    // Memory returns: unregister and the agent holds nothing.
    c.unregister(coflow).await?;
    let mut zero = false;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        if metric(&scrape(cluster.agent_metrics[0]).await, "coflow_agent_stored_bytes") == 0.0 {
            zero = true;
            break;
        }
    }
    assert!(zero, "stored bytes did not return to zero");
    cluster.shutdown().await;
    Ok(())
}
