//! The agents' session with the coordinator, spoken by phantom agents: announcements answered
//! by request id, rates pushed, flow ends from the receiver only, and the benchmark that drives
//! the coordinator through sessions.

use std::time::Duration;

use coflow_agent::Phantom;
use coflow_client::CoflowOptions;
use coflow_testkit::bench::{LiveBench, run};
use coflow_testkit::{Cluster, ClusterConfig, scrape};

use crate::{metric, phantom, subscribe};

/// Two phantoms carry a flow through the coordinator: the put and the get are answered, the
/// source is pushed its rate, a bystander cannot end the flow, the receiver can; over TLS too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flow_crosses_the_coordinator_through_sessions() -> anyhow::Result<()> {
    subscribe();
    for tls in [false, true] {
        let cfg = ClusterConfig::new(1, 1e6, "varys");
        let cluster = Cluster::start(if tls { cfg.with_tls() } else { cfg }).await?;
        let (a, b, c) = (phantom(&cluster, 10).await?, phantom(&cluster, 11).await?, phantom(&cluster, 12).await?);
        let coflow = cluster.client(0).await?.register(1, CoflowOptions::default()).await?;
        a.put(coflow, "p", 5_000).await?;
        let e = a.put(coflow, "p", 5_000).await.unwrap_err();
        assert_eq!(e.metadata().get("coflow-error").unwrap().to_str()?, "duplicate-data-id", "{e:?}");
        let g = b.get(coflow, "p").await?;
        assert_eq!((g.src.0, g.size), (10, 5_000));
        let mut rate = None;
        for _ in 0..100 {
            rate = a.rate(g.flow);
            if rate.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(rate, Some(1e6), "alone, the flow gets the whole port (tls: {tls})");
        let flows = |page: &str| metric(page, "coflow_coordinator_live_flows");
        c.finished(g.flow, true);
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(flows(&scrape(cluster.coordinator_metrics).await), 1.0, "a bystander cannot end a flow");
        b.finished(g.flow, true);
        let mut live = 1.0;
        for _ in 0..100 {
            live = flows(&scrape(cluster.coordinator_metrics).await);
            if live == 0.0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(live, 0.0, "the receiver ends it");
        for p in [a, b, c] {
            assert!(p.is_open());
            p.close().await;
        }
        cluster.shutdown().await;
    }
    Ok(())
}

/// The benchmark's report holds what it says: every level measured, the steps of the path, a
/// load whose messages the coordinator counted, decisions, gets into a wide coflow and rates.
#[test]
fn the_live_benchmark_measures_every_part() {
    let cfg = LiveBench { load: Duration::from_millis(400), present: vec![1, 20], gets: 30, ..LiveBench::default() };
    let r = run(&cfg).expect("the benchmark runs");
    assert_eq!(r.control_path.iter().map(|p| (p.coflows, p.gets)).collect::<Vec<_>>(), [(1, 30), (20, 30)]);
    for p in &r.control_path {
        assert!(0.0 < p.first_byte_p50_ms && p.first_byte_p50_ms <= p.first_byte_p99_ms, "{p:?}");
        assert!(p.first_byte_p99_ms <= p.first_byte_p999_ms && p.last_byte_p50_ms <= p.last_byte_p99_ms, "{p:?}");
    }
    assert_eq!(r.steps.len(), 8, "{:?}", r.steps);
    assert!(r.steps.iter().all(|s| s.p50_ms >= 0.0 && s.p50_ms <= s.p99_ms), "{:?}", r.steps);
    assert!(r.control_msgs > 1000 && r.control_msgs_per_s > 0.0, "{r:?}");
    assert!(r.loaded_gets > 0 && r.loaded_msgs_per_s > 0.0, "{r:?}");
    assert_eq!(r.decisions.len(), 2);
    assert!(r.decisions.iter().all(|d| d.decisions_per_s > 0.0));
    assert_eq!(
        r.wide_coflow.iter().map(|w| (w.pieces, w.others)).collect::<Vec<_>>(),
        [(1_000, 0), (30_000, 0), (1_000, 20_000)]
    );
    assert!(r.wide_coflow.iter().all(|w| w.gets_per_s > 0.0), "{:?}", r.wide_coflow);
    for rate in &r.rate_accuracy {
        assert!((rate.achieved_bps / rate.assigned_bps - 1.0).abs() < 0.1, "{rate:?}");
    }
}

/// A machine that falls silent is declared dead at the agent timeout (1 s here), and its
/// session ends then, so that the agent registers again as soon as it answers (a frozen agent
/// that kept a dead session would stay dead after it resumed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_machine_s_session_ends_when_it_is_declared_dead() -> anyhow::Result<()> {
    subscribe();
    let cluster = Cluster::start(ClusterConfig::new(1, 1e6, "varys")).await?;
    let silent = Phantom::connect(
        &cluster.coordinator_url(),
        &cluster.agent_security(20)?,
        20,
        "127.0.0.1:9020",
        1e6,
        Duration::from_secs(3600),
        Duration::from_secs(5),
    )
    .await?;
    let mut waited = Duration::ZERO;
    while silent.is_open() && waited < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(50)).await;
        waited += Duration::from_millis(50);
    }
    assert!(!silent.is_open(), "the session of a machine declared dead is still open after {waited:?}");
    silent.close().await;
    cluster.shutdown().await;
    Ok(())
}
