//! A wide area on loopback: agents in three datacenters, the coordinator scheduling the links
//! between them with multi-path routing. A get whose direct link is the bottleneck is split over
//! a detour through the third datacenter's agent, which relays its part; the client receives the
//! piece's bytes exactly, in order; a relay that leaves or freezes mid-transfer costs a resume,
//! never a byte.

use std::collections::BTreeSet;
use std::time::Duration;

use coflow_client::CoflowOptions;
use coflow_sched::{Bandwidth, Link, WideArea};
use coflow_testkit::{Cluster, ClusterConfig, scrape};

use crate::{content, flow_rates, metric, subscribe};

/// Datacenters `a`, `b`, `c`; the link a -> b carries `slow` bytes per second, every other link
/// 20 MB/s. Agent 0 is in `a`, agent 1 in `b`, agents 2 and 3 in `c`.
fn config(slow: f64) -> ClusterConfig {
    let bw = |from: u32, to: u32| if (from, to) == (0, 1) { slow } else { 20e6 };
    let mut links = Vec::new();
    for from in 0..3 {
        for to in 0..3 {
            if from != to {
                links.push(Link { from, to, bandwidth: Bandwidth::Constant(bw(from, to)) });
            }
        }
    }
    let wa = WideArea { datacenters: vec!["a".into(), "b".into(), "c".into()], links };
    let mut cfg = ClusterConfig::new(4, 1e9, "mrtf");
    cfg.coordinator.topology = Some("test".into());
    cfg.coordinator.wide_area = Some(wa);
    cfg.coordinator.multipath = true;
    cfg.datacenters = ["a", "b", "c", "c"].iter().map(|s| s.to_string()).collect();
    cfg
}

/// [`config`] with the link a -> b at 1 MB/s and every other link at 4 MB/s, so that a transfer
/// lasts while a test acts on it; with `agents` 3, `c` has one agent only.
fn slow(agents: u32) -> ClusterConfig {
    let mut cfg = config(1e6);
    cfg.agents = agents;
    cfg.datacenters.truncate(agents as usize);
    if let Some(wa) = &mut cfg.coordinator.wide_area {
        for l in &mut wa.links {
            if let Bandwidth::Constant(v) = &mut l.bandwidth {
                *v = v.min(4e6);
            }
        }
    }
    cfg
}

/// 4 MB from `a` to `b`, whose link runs at 2 MB/s against 20 MB/s for the detour through `c`:
/// water-filling sends about ten elevenths of the bytes through an agent of `c`, which relays
/// them; the client receives every byte in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_split_over_a_detour_arrives_whole_and_in_order() -> anyhow::Result<()> {
    subscribe();
    let cluster = Cluster::start(config(2e6)).await?;
    let c = cluster.client(0).await?;
    let coflow = c.register(1, CoflowOptions { name: "across".into(), ..Default::default() }).await?;
    let piece = content(7, 4_000_000);
    c.put(coflow, "p", piece.clone()).await?;
    let r = cluster.client(1).await?;
    let got = tokio::time::timeout(Duration::from_secs(20), r.get(coflow, "p")).await??;
    assert!(got == piece, "the piece arrives exactly, in order");
    let mut relayed = 0.0;
    for m in [2, 3] {
        relayed += metric(&scrape(cluster.agent_metrics[m]).await, "coflow_agent_relayed_bytes_total");
    }
    assert!((3_000_000.0..=3_800_000.0).contains(&relayed), "relayed {relayed} of 4,000,000 bytes");
    let st = c.status().await?;
    assert_eq!(st.bytes_relayed as f64, relayed, "the coordinator counts the bytes it sent through relays");
    assert_eq!(st.links.len(), 6, "the links, as measured");
    let datacenters: Vec<&str> = st.agents.iter().map(|a| a.datacenter.as_str()).collect();
    assert_eq!(datacenters, ["a", "b", "c", "c"], "each agent's datacenter");
    cluster.shutdown().await;
    Ok(())
}

/// 16 MB split as above, read by a client that stops for a second after its first chunk: the
/// parts relayed through `c` arrive while the direct part still waits for the reader, and wait
/// for their turn on the receiving agent's disk past a few MiB each, not in its memory; the
/// client still receives every byte, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parts_that_arrive_ahead_of_a_slow_reader_wait_on_disk() -> anyhow::Result<()> {
    subscribe();
    let cluster = Cluster::start(config(2e6)).await?;
    let c = cluster.client(0).await?;
    let coflow = c.register(1, CoflowOptions { name: "across".into(), ..Default::default() }).await?;
    let piece = content(8, 16_000_000);
    c.put(coflow, "p", piece.clone()).await?;
    let r = cluster.client(1).await?;
    // Meanwhile status shows the parts' relays.
    let mut relays = BTreeSet::new();
    let read = async {
        let mut chunks = r.get_chunks(coflow, "p").await?;
        let mut got = chunks.next().await?.unwrap_or_default();
        let stopped = std::time::Instant::now();
        while stopped.elapsed() < Duration::from_secs(1) {
            tokio::time::sleep(Duration::from_millis(50)).await;
            relays.extend(c.status().await?.coflows.iter().flat_map(|c| &c.flows).filter_map(|f| f.via_machine_id));
        }
        while let Some(chunk) = chunks.next().await? {
            got.extend_from_slice(&chunk);
        }
        anyhow::Ok(got)
    };
    let got = tokio::time::timeout(Duration::from_secs(20), read).await??;
    assert!(got == piece, "the piece arrives exactly, in order");
    let mut relayed = 0.0;
    for m in [2, 3] {
        relayed += metric(&scrape(cluster.agent_metrics[m]).await, "coflow_agent_relayed_bytes_total");
    }
    let spilled = metric(&scrape(cluster.agent_metrics[1]).await, "coflow_agent_spilled_bytes_total");
    // At most two relayed parts, each keeping up to 4 MiB in memory.
    let kept = 2.0 * (4u64 << 20) as f64;
    assert!(
        relayed > 12e6 && spilled >= relayed - kept && spilled <= relayed,
        "spilled {spilled} of {relayed} relayed"
    );
    assert!(!relays.is_empty() && relays.is_subset(&BTreeSet::from([2, 3])), "relays shown: {relays:?}");
    cluster.shutdown().await;
    Ok(())
}

/// The relay leaves while its part is on the way (its link to `b` kept slow by the coordinator's
/// rates): the coordinator reroutes the part, the receiver resumes the rest over another path,
/// and the client still receives every byte, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_that_leaves_costs_a_resume_not_a_byte() -> anyhow::Result<()> {
    subscribe();
    let mut cluster = Cluster::start(slow(4)).await?;
    let c = cluster.client(0).await?;
    let coflow = c.register(1, CoflowOptions { name: "relayed".into(), ..Default::default() }).await?;
    let piece = content(8, 6_000_000);
    c.put(coflow, "p", piece.clone()).await?;
    let r = cluster.client(1).await?;
    let get = tokio::spawn(async move { r.get(coflow, "p").await });
    // Let the relayed part start, then stop whichever agent of `c` relays it.
    let relay = the_relay(&cluster, Duration::from_millis(50)).await;
    cluster.kill_agent(relay).await;
    let got = tokio::time::timeout(Duration::from_secs(30), get).await???;
    assert!(got == piece, "every byte arrives, in order, after the relay left");
    let st = c.status().await?;
    assert!(st.flows_rerouted >= 1, "the relayed part was resumed over another path: {st:?}");
    cluster.shutdown().await;
    Ok(())
}

/// The only agent of `c`, which relays a part, dies without a word (its process killed): its
/// connections close and its address refuses new ones, while the coordinator still counts it
/// alive until its agent timeout. The receiver resumes the part, and no part of the rest goes
/// through the dead relay (the only agent that could relay): the coordinator grants no relayed
/// part after the crash, counts as relayed only the bytes before the cut, and the get completes
/// with every byte, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_killed_mid_part_is_not_asked_again() -> anyhow::Result<()> {
    subscribe();
    let mut cfg = slow(3);
    // Longer than the resumes would last were they asked at once.
    cfg.coordinator.agent_timeout_ms = 3000;
    let mut cluster = Cluster::start(cfg).await?;
    let c = cluster.client(0).await?;
    let coflow = c.register(1, CoflowOptions { name: "relay-killed".into(), ..Default::default() }).await?;
    let piece = content(9, 4_000_000);
    c.put(coflow, "p", piece.clone()).await?;
    let r = cluster.client(1).await?;
    let get = tokio::spawn(async move { r.get(coflow, "p").await });
    let mut relaying = false;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        if metric(&scrape(cluster.agent_metrics[2]).await, "coflow_agent_relayed_bytes_total") > 0.0 {
            relaying = true;
            break;
        }
    }
    assert!(relaying, "a part is relayed through the agent of c");
    // The parts granted through relays so far: the relayed part.
    let at = cluster.coordinator_metrics;
    let parts = async || metric(&scrape(at).await, "coflow_coordinator_parts_relayed_total");
    let granted = parts().await;
    assert!(granted > 0.0);
    cluster.crash_agent(2).await;
    let got = tokio::time::timeout(Duration::from_secs(15), get).await???;
    assert!(got == piece, "every byte arrives, in order, after the relay died");
    let st = c.status().await?;
    assert!(st.flows_rerouted >= 1, "the relayed part was resumed: {st:?}");
    assert_eq!(parts().await, granted, "no part of the rest was sent through the dead relay");
    assert!(st.bytes_relayed > 0 && st.bytes_relayed < 4_000_000, "the bytes before the cut: {st:?}");
    cluster.shutdown().await;
    Ok(())
}

/// Pieces at the edges of splitting cross the wide area exactly and at once: an empty piece,
/// one byte, and pieces just under and over twice the smallest part (which may be split in
/// two), each asked from `b` of a piece put in `a` over the slow direct link, within 10 s each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pieces_at_the_edges_of_splitting_arrive_exactly() -> anyhow::Result<()> {
    subscribe();
    let cluster = Cluster::start(config(2e6)).await?;
    let c = cluster.client(0).await?;
    let r = cluster.client(1).await?;
    let min = coflow_coordinator::MIN_PART_BYTES as usize;
    let sizes = [0, 1, 2 * min - 1, 2 * min, 2 * min + 1];
    let coflow = c.register(sizes.len() as u32, CoflowOptions { name: "edges".into(), ..Default::default() }).await?;
    for (k, &n) in sizes.iter().enumerate() {
        let piece = content(20 + k as u64, n);
        c.put(coflow, &format!("p{k}"), piece.clone()).await?;
        let started = std::time::Instant::now();
        let got = tokio::time::timeout(Duration::from_secs(10), r.get(coflow, &format!("p{k}"))).await??;
        eprintln!("{n} bytes in {:?}", started.elapsed());
        assert!(got == piece, "the piece of {n} bytes arrives exactly");
    }
    cluster.shutdown().await;
    Ok(())
}

/// The source serves the relay (the only agent of `c`) its share of data connections already
/// (one, held by a connection under the relay's certificate) when a part is relayed: the relay
/// passes the source's "busy" on, and the receiver asks the relay again, as it would the source,
/// until the place is given back (0.5 s later), so that the part goes through the relay it was
/// planned over, with no resume and no relay blamed, and the get is exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_whose_source_is_busy_is_asked_again_not_blamed() -> anyhow::Result<()> {
    use tokio::io::AsyncWriteExt;
    subscribe();
    let mut cfg = slow(3).with_tls();
    cfg.agent.max_data_connections_per_peer = Some(1);
    let cluster = Cluster::start(cfg).await?;
    let c = cluster.client(0).await?;
    let coflow = c.register(1, CoflowOptions { name: "source-busy".into(), ..Default::default() }).await?;
    let piece = content(10, 4_000_000);
    c.put(coflow, "p", piece.clone()).await?;
    let st = c.status().await?;
    let src = st.agents.iter().find(|a| a.machine_id == 0).unwrap().data_addr.clone();
    let relay = cluster.agent_security(2)?.tls().expect("TLS").clone();
    let sock = tokio::net::TcpStream::connect(&src).await?;
    let mut held = coflow_proto::connect_agent(&relay, sock, 0).await.map_err(anyhow::Error::msg)?;
    // The source takes the connection into the relay's share once its handshake is through.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let r = cluster.client(1).await?;
    let get = tokio::spawn(async move { r.get(coflow, "p").await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    held.shutdown().await?;
    drop(held);
    let got = tokio::time::timeout(Duration::from_secs(20), get).await???;
    assert!(got == piece, "every byte arrives, in order");
    let st = c.status().await?;
    let relayed = metric(&scrape(cluster.agent_metrics[2]).await, "coflow_agent_relayed_bytes_total");
    assert!(relayed >= 1e6, "the planned part went through the relay: {relayed} bytes");
    assert_eq!(st.flows_rerouted, 0, "no part was resumed: {st:?}");
    cluster.shutdown().await;
    Ok(())
}

/// The source of a get split over the two relays of `c` dies mid-transfer (its process killed:
/// its address refuses connections at once, while the coordinator counts it alive until its
/// agent timeout). The relays say so to the receiver, which blames the source: the get ends
/// with a typed error naming the source, only once the coordinator has found the source dead
/// (the resumes outlast its agent timeout rather than being spent at once), and the relays,
/// which are healthy, are not left out of new paths: a get from another agent of `a` started
/// right after is split over them again, and arrives exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_that_dies_behind_relays_is_blamed_and_the_relays_are_not() -> anyhow::Result<()> {
    subscribe();
    let mut cfg = slow(4);
    cfg.agents = 5;
    cfg.datacenters.push("a".into());
    cfg.coordinator.agent_timeout_ms = 3000;
    let mut cluster = Cluster::start(cfg).await?;
    let c = cluster.client(0).await?;
    let coflow = c.register(2, CoflowOptions { name: "source-killed".into(), ..Default::default() }).await?;
    c.put(coflow, "p", content(12, 6_000_000)).await?;
    let st = c.status().await?;
    let addr_of =
        |m: u32| st.agents.iter().find(|a| a.machine_id == m).map(|a| a.data_addr.clone()).expect("a live agent");
    let (src, relays) = (addr_of(0), [addr_of(2), addr_of(3)]);
    let r = cluster.client(1).await?;
    let get = {
        let r = r.clone();
        tokio::spawn(async move { r.get(coflow, "p").await })
    };
    let mut relaying = false;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut relayed = 0.0;
        for m in [2, 3] {
            relayed += metric(&scrape(cluster.agent_metrics[m]).await, "coflow_agent_relayed_bytes_total");
        }
        if relayed > 0.0 {
            relaying = true;
            break;
        }
    }
    assert!(relaying, "a part is relayed through an agent of c");
    cluster.crash_agent(0).await;
    let killed = std::time::Instant::now();
    let e = tokio::time::timeout(Duration::from_secs(20), get).await??.expect_err("its source is dead");
    let took = killed.elapsed();
    let coflow_client::ClientError::AgentUnreachable(msg) = &e else { panic!("not typed agent-unreachable: {e:?}") };
    assert!(msg.contains(&src) || msg.contains("machine 0"), "the error names the source ({src}): {msg}");
    assert_eq!(e.to_string().matches("unreachable").count(), 1, "said once: {e}");
    assert!(!relays.iter().any(|a| msg.contains(&format!("agent at {a}"))), "no relay is blamed: {msg}");
    assert!(took >= Duration::from_millis(1500), "the resumes outlast the source's death: ended {took:?} after it");
    // Right away, a get from the other agent of `a`: the relays are in its paths.
    let c4 = cluster.client(4).await?;
    let piece = content(13, 4_000_000);
    c4.put(coflow, "q", piece.clone()).await?;
    let before = c4.status().await?.bytes_relayed;
    let got = tokio::time::timeout(Duration::from_secs(20), r.get(coflow, "q")).await??;
    assert!(got == piece, "the second piece arrives exactly, in order");
    let after = c4.status().await?.bytes_relayed;
    assert!(after > before, "the healthy relays carry the next get's parts: {before} -> {after} bytes relayed");
    cluster.shutdown().await;
    Ok(())
}

/// Two coflows from `a` to `b`: the bigger one's get is split over the detour through `c`, then
/// the smaller one's is served ahead of it, so that a part of the bigger one waits at rate 0 when
/// the coordinator restarts. The new coordinator never granted that part: its receiver cuts it
/// and resumes the rest with the new coordinator, and both gets complete with exact bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parts_split_by_a_coordinator_that_restarts_are_resumed_with_the_new_one() -> anyhow::Result<()> {
    subscribe();
    let mut cluster = Cluster::start(slow(3)).await?;
    let c = cluster.client(0).await?;
    let small = c.register(1, CoflowOptions { name: "small".into(), ..Default::default() }).await?;
    let big = c.register(1, CoflowOptions { name: "big".into(), ..Default::default() }).await?;
    c.put(small, "s", content(10, 1_000_000)).await?;
    c.put(big, "b", content(11, 6_000_000)).await?;
    let r = cluster.client(1).await?;
    let rb = r.clone();
    let gb = tokio::spawn(async move { rb.get(big, "b").await });
    let mut split = false;
    for _ in 0..200 {
        tokio::time::sleep(Duration::from_millis(5)).await;
        if flow_rates(&c, big).await.len() > 1 {
            split = true;
            break;
        }
    }
    assert!(split, "the big coflow's get is split over the detour");
    let gs = tokio::spawn(async move { r.get(small, "s").await });
    let mut held = false;
    for _ in 0..200 {
        tokio::time::sleep(Duration::from_millis(5)).await;
        let (b, s) = (flow_rates(&c, big).await, flow_rates(&c, small).await);
        if b.len() > 1 && b.contains(&0.0) && s.iter().any(|&r| r > 0.0) {
            held = true;
            break;
        }
    }
    assert!(held, "a part of the big coflow waits at rate 0 behind the small one");
    cluster.restart_coordinator().await?;
    let (b, s) = tokio::time::timeout(Duration::from_secs(15), async { (gb.await, gs.await) }).await?;
    assert!(s?? == content(10, 1_000_000), "the small coflow's piece differs");
    assert!(b?? == content(11, 6_000_000), "the big coflow's piece differs");
    cluster.shutdown().await;
    Ok(())
}

/// The agent of `c` (machine 2 or 3) that relays a part, once it has relayed some bytes, looked
/// for every `every` for up to 5 s.
async fn the_relay(cluster: &Cluster, every: Duration) -> usize {
    let t = std::time::Instant::now();
    while t.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(every).await;
        for m in [2, 3] {
            if metric(&scrape(cluster.agent_metrics[m]).await, "coflow_agent_relayed_bytes_total") > 0.0 {
                return m;
            }
        }
    }
    panic!("no part is relayed through an agent of c");
}

/// Starts `cfg` (whose agents 2 and 3, in `c`, run apart), gets 4 MB from `a` to `b` split over
/// the detour through `c`, freezes whichever agent of `c` relays its part once some of the part
/// has been relayed, and returns the get's outcome, how long after the freeze it ended, and the
/// coordinator's status then; the frozen relay is thawed at the cluster's shutdown.
async fn freeze_the_relay_mid_part(
    mut cfg: ClusterConfig,
    piece: &[u8],
) -> anyhow::Result<(Result<Vec<u8>, coflow_client::ClientError>, Duration, coflow_proto::pb::StatusResponse)> {
    cfg.apart = vec![2, 3];
    let mut cluster = Cluster::start(cfg).await?;
    let c = cluster.client(0).await?;
    let coflow = c.register(1, CoflowOptions { name: "relay-frozen".into(), ..Default::default() }).await?;
    c.put(coflow, "p", piece.to_vec()).await?;
    let r = cluster.client(1).await?;
    let get = tokio::spawn(async move { r.get(coflow, "p").await });
    let relay = the_relay(&cluster, Duration::from_millis(20)).await;
    cluster.freeze_agent(relay).await;
    let frozen = std::time::Instant::now();
    // Far past any bound the tests state: a get still running then hangs.
    let got = tokio::time::timeout(Duration::from_secs(60), get).await??;
    let took = frozen.elapsed();
    let st = c.status().await?;
    eprintln!("relay {relay} frozen; the get ended {took:?} later: {:?}", got.as_ref().map(Vec::len));
    cluster.shutdown().await;
    Ok((got, took, st))
}

/// The agent of `c` that relays a part freezes mid-part (its process stopped: its connections
/// stay open, nothing is read or written on them), while the coordinator still counts it alive
/// (its agent timeout is far off), so that only the receiver's idle timeout can cut the part.
/// The receiver cuts it at its last verified byte after the idle timeout (2 s), blames the relay
/// and resumes the rest over paths that avoid it; the client receives every byte, in order,
/// within the idle timeout and the rest's time over the slow links (at most 2 MB at 1 MB/s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_frozen_mid_part_is_cut_at_the_idle_timeout_and_the_rest_resumed() -> anyhow::Result<()> {
    subscribe();
    let mut cfg = slow(4);
    cfg.coordinator.agent_timeout_ms = 60_000;
    let piece = content(14, 4_000_000);
    let (got, took, st) = freeze_the_relay_mid_part(cfg, &piece).await?;
    assert!(got? == piece, "every byte arrives, in order, after the relay froze");
    assert!(st.flows_rerouted >= 1, "the relayed part was resumed: {st:?}");
    assert!(took >= Duration::from_millis(1900), "cut by the idle timeout, not before: {took:?}");
    assert!(took < Duration::from_secs(12), "the idle timeout and the rest, with room to spare: {took:?}");
    Ok(())
}

/// The agent of `c` that relays a part freezes mid-part and stops heartbeating with it: the
/// coordinator finds it dead at its agent timeout (1 s), before the receiver's idle timeout
/// (2 s), and reroutes the part; the receiver resumes the rest over another path and the client
/// receives every byte, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_frozen_mid_part_is_rerouted_once_found_dead() -> anyhow::Result<()> {
    subscribe();
    let piece = content(15, 4_000_000);
    let (got, took, st) = freeze_the_relay_mid_part(slow(4), &piece).await?;
    assert!(got? == piece, "every byte arrives, in order, after the relay froze");
    assert!(st.flows_rerouted >= 1, "the relayed part was resumed: {st:?}");
    assert!(took < Duration::from_secs(12), "the agent timeout and the rest, with room to spare: {took:?}");
    Ok(())
}

/// The agent of `c` that relays a part freezes mid-part while the coordinator counts it alive,
/// and the source (whose idle timeout, 1 s, is half the receiver's) gives up on the relay first:
/// the source's word that its peer stopped reading reaches the coordinator before the receiver
/// cuts the part, as it may whenever the source is nearer the coordinator. The part is rerouted,
/// not failed: the receiver resumes the rest at once over paths that avoid the relay, and the
/// client receives every byte, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_frozen_mid_part_that_its_source_gives_up_first_is_rerouted() -> anyhow::Result<()> {
    subscribe();
    let mut cfg = slow(4);
    cfg.coordinator.agent_timeout_ms = 60_000;
    cfg.agent_by_machine.insert(0, coflow_agent::AgentConfig { data_idle_timeout_ms: 1000, ..cfg.agent.clone() });
    let piece = content(16, 4_000_000);
    let (got, took, st) = freeze_the_relay_mid_part(cfg, &piece).await?;
    assert!(got? == piece, "every byte arrives, in order, after the relay froze");
    assert!(st.flows_rerouted >= 1, "the relayed part was resumed: {st:?}");
    assert!(took < Duration::from_secs(12), "the source's idle timeout and the rest, with room to spare: {took:?}");
    Ok(())
}
