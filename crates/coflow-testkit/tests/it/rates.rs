//! Rate enforcement, measured from bytes received over time.

use std::time::{Duration, Instant};

use coflow_client::{Client, CoflowId, CoflowOptions};
use coflow_testkit::{Cluster, ClusterConfig};

use crate::{content, subscribe};

const CAP: f64 = 8_000_000.0;
const SIZE: usize = 8_000_000;

/// Fetches a piece and returns the rate over the middle of the transfer (from 20% to 80% of the
/// bytes), so that start-up and the last chunks do not count.
async fn measured_rate(c: Client, coflow: CoflowId, id: String) -> f64 {
    let t0 = Instant::now();
    let mut marks: Vec<(f64, u64)> = Vec::new();
    let mut n = 0u64;
    c.get_with(coflow, &id, |chunk| {
        n += chunk.len() as u64;
        marks.push((t0.elapsed().as_secs_f64(), n));
    })
    .await
    .expect("get");
    let at = |share: f64| marks.iter().find(|&&(_, b)| b as f64 >= share * n as f64).copied().unwrap();
    let ((t1, b1), (t2, b2)) = (at(0.2), at(0.8));
    (b2 - b1) as f64 / (t2 - t1)
}

async fn assigned(c: &Client, data_id: &str) -> f64 {
    let st = c.status().await.unwrap();
    st.coflows.iter().flat_map(|c| &c.flows).find(|f| f.data_id == data_id).map_or(0.0, |f| f.rate_bps)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flow_assigned_a_rate_achieves_it_within_10_percent() -> anyhow::Result<()> {
    subscribe();
    let cluster = Cluster::start(ClusterConfig::new(3, CAP, "fair")).await?;
    let c = cluster.client(0).await?;
    let coflow = c.register(2, CoflowOptions::default()).await?;
    // Two flows into machine 2 from different senders: fair gives each half of port 2, so each
    // sender's flow runs at CAP/2 by its own token bucket, below its sender port's CAP.
    cluster.client(0).await?.put(coflow, "a", content(1, SIZE)).await?;
    cluster.client(1).await?.put(coflow, "b", content(2, SIZE)).await?;
    let r = cluster.client(2).await?;
    let (a, _, (assigned_a, assigned_b)) = tokio::join!(
        measured_rate(r.clone(), coflow, "a".into()),
        measured_rate(r.clone(), coflow, "b".into()),
        async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            (assigned(&c, "a").await, assigned(&c, "b").await)
        }
    );
    assert!((assigned_a - CAP / 2.0).abs() < 0.01 * CAP, "assigned {assigned_a}");
    assert!((assigned_b - CAP / 2.0).abs() < 0.01 * CAP, "assigned {assigned_b}");
    let err = (a - assigned_a).abs() / assigned_a;
    println!("assigned {assigned_a:.0} B/s, achieved {a:.0} B/s, error {:.1}%", err * 100.0);
    assert!(err < 0.10, "achieved {a:.0} B/s against {assigned_a:.0} B/s assigned");
    cluster.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_flows_on_one_capped_port_share_it_as_the_policy_says() -> anyhow::Result<()> {
    subscribe();
    let cluster = Cluster::start(ClusterConfig::new(3, CAP, "fair")).await?;
    let c = cluster.client(0).await?;
    let coflow = c.register(2, CoflowOptions::default()).await?;
    // Both flows leave machine 0: fair splits its sending port in two.
    c.put(coflow, "to1", content(1, SIZE)).await?;
    c.put(coflow, "to2", content(2, SIZE)).await?;
    let (r1, r2) = (cluster.client(1).await?, cluster.client(2).await?);
    let (a, b) = tokio::join!(measured_rate(r1, coflow, "to1".into()), measured_rate(r2, coflow, "to2".into()));
    println!("port {CAP:.0} B/s shared as {a:.0} + {b:.0} B/s");
    for x in [a, b] {
        assert!((x - CAP / 2.0).abs() < 0.10 * CAP / 2.0, "{x:.0} B/s, expected {:.0}", CAP / 2.0);
    }
    assert!(a + b <= CAP * 1.05, "port cap exceeded: {}", a + b);
    cluster.shutdown().await;
    Ok(())
}

/// Deadlines live, under `varys-deadline` on 20 MB/s ports: A (10 MB within 10 s) fits and is
/// admitted; B (40 MB within 1 s) cannot be and is rejected, then served as best effort on what
/// A's guarantee leaves. Both deliver every byte; A meets its deadline and B misses it, which
/// status and the metrics say.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_that_fits_is_admitted_and_met_and_one_that_cannot_is_rejected() -> anyhow::Result<()> {
    subscribe();
    let cluster = Cluster::start(ClusterConfig::new(2, 20e6, "varys-deadline")).await?;
    let c = cluster.client(0).await?;
    let within =
        |ms: u64| CoflowOptions { deadline: Some(coflow_client::Nanos::from_millis(ms)), ..Default::default() };
    let (pa, pb) = (content(1, 10_000_000), content(2, 40_000_000));
    let b = c.register(1, within(1_000)).await?;
    c.put(b, "b", pb.clone()).await?;
    let a = c.register(1, within(10_000)).await?;
    c.put(a, "a", pa.clone()).await?;
    let reader = cluster.client(1).await?;
    let (ga, gb) = tokio::join!(reader.get(a, "a"), reader.get(b, "b"));
    assert!(ga? == pa && gb? == pb, "every byte arrives");
    let st = c.status().await?;
    let shown = |id: CoflowId| {
        let s = st.coflows.iter().find(|s| s.coflow_id == id.0).expect("still registered");
        (s.deadline_ms, s.admission_name())
    };
    assert_eq!((shown(a), shown(b)), ((10_000, Some("admitted")), (1_000, Some("rejected"))));
    let page = coflow_testkit::scrape(cluster.coordinator_metrics).await;
    let count = |line: &str| crate::metric(&page, line);
    assert_eq!(count("coflow_coordinator_admissions_total{outcome=\"admitted\"}"), 1.0, "{page}");
    assert_eq!(count("coflow_coordinator_admissions_total{outcome=\"rejected\"}"), 1.0, "{page}");
    assert_eq!(count("coflow_coordinator_deadlines_total{outcome=\"met\"}"), 1.0, "{page}");
    assert_eq!(count("coflow_coordinator_deadlines_total{outcome=\"missed\"}"), 1.0, "{page}");
    cluster.shutdown().await;
    Ok(())
}
