//! Bytes arrive exactly as put, in shuffles, broadcasts, waves and from file segments; errors
//! are typed; the token is enforced.

use std::time::Duration;

use coflow_client::{ClientError, ClusterToken, CoflowOptions, Nanos, Readiness};
use coflow_testkit::{Cluster, ClusterConfig};

use crate::{content, shuffle, subscribe, tag};

const RATE: f64 = 50_000_000.0;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_3x2_shuffle_delivers_exactly_the_bytes_put() -> anyhow::Result<()> {
    subscribe();
    let cluster = Cluster::start(ClusterConfig::new(5, RATE, "varys")).await?;
    shuffle(&cluster, "shuffle", (3, 2), (200_000, 77_777)).await?;
    cluster.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_1_to_4_broadcast_delivers_the_same_bytes_to_all() -> anyhow::Result<()> {
    subscribe();
    let cluster = Cluster::start(ClusterConfig::new(5, RATE, "fair")).await?;
    let src = cluster.client(0).await?;
    let coflow = src.register(1, CoflowOptions { kind: "broadcast".into(), ..Default::default() }).await?;
    let piece = content(7, 1_234_567);
    src.put(coflow, "model", piece.clone()).await?;
    let mut gets = Vec::new();
    for r in 1..5 {
        let c = cluster.client(r).await?;
        gets.push(tokio::spawn(async move { c.get(coflow, "model").await }));
    }
    for g in gets {
        assert!(g.await?? == piece);
    }
    cluster.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reducers_in_two_waves_complete() -> anyhow::Result<()> {
    subscribe();
    let cluster = Cluster::start(ClusterConfig::new(6, RATE, "varys")).await?;
    let c = cluster.client(0).await?;
    // num_flows counts the 8 puts; only half the gets come before the first wave finishes.
    let coflow = c.register(8, CoflowOptions::default()).await?;
    for m in 0..2u64 {
        let mapper = cluster.client(m as usize).await?;
        for r in 0..4u64 {
            mapper.put(coflow, &format!("m{m}-r{r}"), content(tag(coflow, m, r), 300_000)).await?;
        }
    }
    for wave in [0..2u64, 2..4u64] {
        let mut gets = Vec::new();
        for r in wave {
            let reducer = cluster.client(2 + r as usize).await?;
            for m in 0..2u64 {
                let reducer = reducer.clone();
                gets.push(tokio::spawn(async move { (m, r, reducer.get(coflow, &format!("m{m}-r{r}")).await) }));
            }
        }
        for g in gets {
            let (m, r, got) = tokio::time::timeout(Duration::from_secs(20), g).await??;
            assert!(got? == content(tag(coflow, m, r), 300_000));
        }
    }
    cluster.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_for_all_gets_releases_at_the_timeout() -> anyhow::Result<()> {
    subscribe();
    let cluster = Cluster::start(ClusterConfig::new(3, RATE, "varys")).await?;
    let c = cluster.client(0).await?;
    let options =
        CoflowOptions { readiness: Readiness::AllGets { timeout: Nanos::from_millis(300) }, ..Default::default() };
    // Four gets announced, but only one ever comes: the timeout releases it.
    let coflow = c.register(4, options).await?;
    c.put(coflow, "p", content(1, 100_000)).await?;
    let reducer = cluster.client(1).await?;
    let t = std::time::Instant::now();
    let got = tokio::time::timeout(Duration::from_secs(10), reducer.get(coflow, "p")).await??;
    assert_eq!(got, content(1, 100_000));
    assert!(t.elapsed() >= Duration::from_millis(250), "released before the timeout: {:?}", t.elapsed());
    cluster.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_segment_piece_is_read_twice() -> anyhow::Result<()> {
    subscribe();
    let cluster = Cluster::start(ClusterConfig::new(3, RATE, "varys")).await?;
    // A map task writes one file holding every reducer's piece, puts segments and exits.
    let file = [content(1, 100_000), content(2, 250_000)].concat();
    std::fs::create_dir_all(cluster.data_dirs[0].join("map0"))?;
    std::fs::write(cluster.data_dirs[0].join("map0/out.data"), &file)?;
    let coflow = {
        let mapper = cluster.client(0).await?;
        let coflow = mapper.register(2, CoflowOptions::default()).await?;
        mapper.put_file(coflow, "r0", "map0/out.data", 0, 100_000).await?;
        mapper.put_file(coflow, "r1", "map0/out.data", 100_000, 250_000).await?;
        coflow
    };
    // Two stages read piece r1, from two machines.
    for m in [1, 2] {
        let c = cluster.client(m).await?;
        assert!(c.get(coflow, "r1").await? == content(2, 250_000));
    }
    assert!(cluster.client(1).await?.get(coflow, "r0").await? == content(1, 100_000));
    cluster.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_typed_errors() -> anyhow::Result<()> {
    subscribe();
    let cluster = Cluster::start(ClusterConfig::new(2, RATE, "varys")).await?;
    let c = cluster.client(0).await?;
    let coflow = c.register(1, CoflowOptions::default()).await?;
    c.put(coflow, "a", vec![1, 2, 3]).await?;
    let reducer = cluster.client(1).await?;
    let e = reducer.get(coflow, "no-such-piece").await.unwrap_err();
    assert_eq!(e, ClientError::NoSuchData { coflow, data_id: "no-such-piece".into() });
    let e = reducer.get(coflow_client::CoflowId(999), "a").await.unwrap_err();
    assert_eq!(e, ClientError::UnknownCoflow(coflow_client::CoflowId(999)));
    let e = c.put(coflow, "a", vec![4]).await.unwrap_err();
    assert!(matches!(e, ClientError::DuplicateDataId { .. }), "{e}");
    for path in ["../../etc/passwd", "/etc/passwd"] {
        let e = c.put_file(coflow, "f", path, 0, 1).await.unwrap_err();
        assert!(matches!(&e, ClientError::Invalid(m) if m.contains("outside")), "{e}");
    }
    let e = c.put(coflow, "", vec![1]).await.unwrap_err();
    assert!(matches!(&e, ClientError::Invalid(m) if m.contains("data_id")), "{e}");
    cluster.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_token_is_refused_on_rpc_and_data_connections() -> anyhow::Result<()> {
    subscribe();
    let cluster = Cluster::start(ClusterConfig::new(2, RATE, "varys")).await?;
    let bad = cluster.client_with_token(0, ClusterToken::new("wrong")?).await?;
    let e = bad.register(1, CoflowOptions::default()).await.unwrap_err();
    assert!(matches!(e, ClientError::Unauthenticated(_)), "{e}");
    let e = bad.put(coflow_client::CoflowId(1), "x", vec![1]).await.unwrap_err();
    assert!(matches!(e, ClientError::Unauthenticated(_)), "{e}");

    // The data plane: a fetch with the wrong token gets status 1 and nothing else.
    let good = cluster.client(0).await?;
    let coflow = good.register(1, CoflowOptions::default()).await?;
    good.put(coflow, "secret", vec![42; 1000]).await?;
    let status = good.status().await?;
    let addr = status.agents.iter().find(|a| a.machine_id == 0).unwrap().data_addr.clone();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut sock = tokio::net::TcpStream::connect(&addr).await?;
    let mut req = b"CFD5".to_vec();
    req.extend_from_slice(&5u16.to_be_bytes());
    req.extend_from_slice(b"wrong");
    req.extend_from_slice(&coflow.0.to_be_bytes());
    req.extend_from_slice(&1u64.to_be_bytes());
    req.extend_from_slice(&0u32.to_be_bytes());
    req.extend_from_slice(&[0; 16]);
    req.extend_from_slice(&6u16.to_be_bytes());
    req.extend_from_slice(b"secret");
    req.extend_from_slice(&0u64.to_be_bytes());
    req.extend_from_slice(&1000u64.to_be_bytes());
    req.push(0);
    sock.write_all(&req).await?;
    let mut resp = Vec::new();
    sock.read_to_end(&mut resp).await?;
    assert_eq!(resp[0], 1, "refused with the wrong-token status");
    assert!(resp.len() <= 9, "no piece bytes after a refusal");
    cluster.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_agent_fails_its_flows_and_the_coordinator_carries_on() -> anyhow::Result<()> {
    subscribe();
    let mut cluster = Cluster::start(ClusterConfig::new(3, 2_000_000.0, "varys")).await?;
    let c = cluster.client(0).await?;
    let coflow = c.register(1, CoflowOptions::default()).await?;
    cluster.client(1).await?.put(coflow, "p", content(3, 4_000_000)).await?;
    let reducer = cluster.client(2).await?;
    // At 2 MB/s the get takes 2 s; the source dies halfway.
    let get = tokio::spawn(async move { reducer.get(coflow, "p").await });
    tokio::time::sleep(Duration::from_millis(700)).await;
    cluster.kill_agent(1).await;
    let e = tokio::time::timeout(Duration::from_secs(10), get).await??.unwrap_err();
    assert!(matches!(e, ClientError::AgentUnreachable(_)), "{e}");
    assert_eq!(e.to_string().matches("unreachable").count(), 1, "said once: {e}");
    // A get for a piece the dead agent held fails cleanly once it is declared dead.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let e = cluster.client(2).await?.get(coflow, "p").await.unwrap_err();
    assert!(matches!(e, ClientError::NoSuchData { .. } | ClientError::AgentUnreachable(_)), "{e}");
    // The rest of the cluster keeps working.
    let d = c.register(1, CoflowOptions::default()).await?;
    c.put(d, "q", content(4, 10_000)).await?;
    assert!(cluster.client(2).await?.get(d, "q").await? == content(4, 10_000));
    cluster.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_hangs_up_mid_get_ends_its_flow_and_the_piece_stays_readable() -> anyhow::Result<()> {
    subscribe();
    let cluster = Cluster::start(ClusterConfig::new(2, 2_000_000.0, "varys")).await?;
    let c = cluster.client(0).await?;
    let coflow = c.register(1, CoflowOptions::default()).await?;
    c.put(coflow, "p", content(5, 2_000_000)).await?;
    let reducer = cluster.client(1).await?;
    // At 2 MB/s the get would take a second; the client goes away after 300 ms.
    let r = reducer.clone();
    let get = tokio::spawn(async move { r.get(coflow, "p").await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    get.abort();
    let mut gone = false;
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let st = c.status().await?;
        if st.coflows.iter().filter(|k| k.coflow_id == coflow.0).all(|k| k.flows.is_empty()) {
            gone = true;
            break;
        }
    }
    assert!(gone, "the abandoned flow is still live at the coordinator");
    assert!(reducer.get(coflow, "p").await? == content(5, 2_000_000), "the piece is still there for a retry");
    cluster.shutdown().await;
    Ok(())
}

/// A client's calls share one HTTP/2 connection per service, and a service takes at most
/// `coflow_proto::MAX_CALLS_PER_CONNECTION` (4,096) of them at once: 12,000 gets at once from one
/// client, and 12,000 registers, all end in their bytes and their coflows; the calls past the
/// bound wait at the client rather than reach a server that would end the connection under them
/// all (h2's budget of small messages not yet read, its guard against a flood of tiny frames).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twelve_thousand_calls_at_once_on_one_connection_all_end_in_their_answers() -> anyhow::Result<()> {
    const CALLS: usize = 12_000;
    subscribe();
    let cluster = Cluster::start(ClusterConfig::new(1, RATE, "varys").with_tls()).await?;
    let c = cluster.client(0).await?;
    let coflow = c.register(1, CoflowOptions::default()).await?;
    let piece = content(83, 100);
    c.put(coflow, "h", piece.clone()).await?;
    let mut gets = tokio::task::JoinSet::new();
    let mut registers = tokio::task::JoinSet::new();
    for _ in 0..CALLS {
        let g = c.clone();
        gets.spawn(async move { g.get(coflow, "h").await });
        let c = c.clone();
        registers.spawn(async move { c.register(1, CoflowOptions::default()).await });
    }
    let within = Duration::from_secs(60);
    let mut coflows = std::collections::HashSet::new();
    for _ in 0..CALLS {
        let Ok(Some(got)) = tokio::time::timeout(within, gets.join_next()).await else {
            panic!("a get did not end within {within:?}");
        };
        assert!(got?? == piece, "a get's bytes");
        let Ok(Some(registered)) = tokio::time::timeout(within, registers.join_next()).await else {
            panic!("a register did not end within {within:?}");
        };
        coflows.insert(registered??);
    }
    assert_eq!(coflows.len(), CALLS, "every register has its own coflow");
    cluster.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_coordinator_restart_agents_re_announce_their_pieces() -> anyhow::Result<()> {
    subscribe();
    let mut cluster = Cluster::start(ClusterConfig::new(2, RATE, "varys")).await?;
    let c = cluster.client(0).await?;
    let coflow = c.register(1, CoflowOptions::default()).await?;
    c.put(coflow, "p", content(9, 300_000)).await?;
    cluster.restart_coordinator().await?;
    // The new coordinator knows nothing until the agents register again and re-announce.
    let mut recovered = false;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        if let Ok(st) = c.status().await
            && st.agents.iter().filter(|a| a.alive).count() == 2
            && st.coflows.iter().any(|k| k.coflow_id == coflow.0 && k.puts == 1)
        {
            recovered = true;
            break;
        }
    }
    assert!(recovered, "the coflow's piece was not re-announced");
    assert!(cluster.client(1).await?.get(coflow, "p").await? == content(9, 300_000));
    // New coflows get ids that do not collide with the recovered one.
    assert_ne!(c.register(1, CoflowOptions::default()).await?, coflow);
    cluster.shutdown().await;
    Ok(())
}
