//! Flows as capabilities, over mutual TLS: a source serves a flow only to the receiving agent
//! the grant names and only with the flow's ticket, once; an ungranted flow id, a stolen ticket
//! presented under another agent's certificate and a second attach are denied without a size,
//! and the real gets complete exactly. A client that stops reading its get has the flow failed
//! within the data idle timeout, and the coordinator frees its rate.

use std::time::Duration;

use coflow_agent::Phantom;
use coflow_client::{Client, ClientConfig, ClientError, CoflowOptions};
use coflow_proto::TlsContext;
use coflow_proto::certs::Subject;
use coflow_testkit::{Cluster, ClusterConfig, files};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::{content, subscribe};

const RATE: f64 = 50_000_000.0;

/// The size of the pieces these tests ask for.
const PIECE: u64 = 100_000;

/// A data request, as the wire format has it: the token (empty with TLS), the flow and its
/// ticket, the piece; its first `len` bytes from its source, without a relay hop.
#[allow(clippy::too_many_arguments)]
fn request(token: &[u8], coflow: u64, flow: u64, dst: u32, ticket: &[u8; 16], id: &str, len: u64) -> Vec<u8> {
    request_range(token, coflow, flow, dst, ticket, id, (0, len), None)
}

/// A data request as [`request`], for the bytes `[offset, offset + len)` of the piece and, with
/// `via`, naming the hop on (the source's machine, its data address and its ticket).
#[allow(clippy::too_many_arguments)]
fn request_range(
    token: &[u8],
    coflow: u64,
    flow: u64,
    dst: u32,
    ticket: &[u8; 16],
    id: &str,
    (offset, len): (u64, u64),
    via: Option<(u32, &str, [u8; 16])>,
) -> Vec<u8> {
    let mut req = b"CFD5".to_vec();
    req.extend_from_slice(&(token.len() as u16).to_be_bytes());
    req.extend_from_slice(token);
    req.extend_from_slice(&coflow.to_be_bytes());
    req.extend_from_slice(&flow.to_be_bytes());
    req.extend_from_slice(&dst.to_be_bytes());
    req.extend_from_slice(ticket);
    req.extend_from_slice(&(id.len() as u16).to_be_bytes());
    req.extend_from_slice(id.as_bytes());
    req.extend_from_slice(&offset.to_be_bytes());
    req.extend_from_slice(&len.to_be_bytes());
    match via {
        None => req.push(0),
        Some((src, addr, ticket)) => {
            req.push(1);
            req.extend_from_slice(&src.to_be_bytes());
            req.extend_from_slice(&(addr.len() as u16).to_be_bytes());
            req.extend_from_slice(addr.as_bytes());
            req.extend_from_slice(&ticket);
        }
    }
    req
}

/// A phantom agent for `machine` (its certificate, or the token), speaking for the cluster's
/// client.
async fn phantom(cluster: &Cluster, machine: u32) -> anyhow::Result<Phantom> {
    crate::phantom_at(cluster, machine, "127.0.0.1:9", RATE, Duration::from_millis(100)).await
}

/// Sends one data request to the agent of machine 0 at `addr` under `ctx` and returns the
/// response head's status and size, and how many bytes came after it (within a second).
async fn ask(
    ctx: &TlsContext,
    addr: &str,
    coflow: u64,
    flow: u64,
    dst: u32,
    ticket: &[u8; 16],
    id: &str,
) -> anyhow::Result<(u8, u64, usize)> {
    let (mut s, status, size) = attach(ctx, addr, coflow, flow, dst, ticket, id, PIECE).await?;
    let mut rest = vec![0u8; 1 << 20];
    let mut after = 0;
    while let Ok(Ok(n)) = tokio::time::timeout(Duration::from_secs(1), s.read(&mut rest)).await {
        if n == 0 {
            break;
        }
        after += n;
    }
    Ok((status, size, after))
}

/// Sends one data request for the first `len` bytes of the piece, as [`ask`], and returns the
/// connection after the response head.
#[allow(clippy::too_many_arguments)]
async fn attach(
    ctx: &TlsContext,
    addr: &str,
    coflow: u64,
    flow: u64,
    dst: u32,
    ticket: &[u8; 16],
    id: &str,
    len: u64,
) -> anyhow::Result<(impl tokio::io::AsyncRead + Unpin, u8, u64)> {
    let sock = tokio::net::TcpStream::connect(addr).await?;
    let mut s = coflow_proto::connect_agent(ctx, sock, 0).await.map_err(anyhow::Error::msg)?;
    s.write_all(&request(b"", coflow, flow, dst, ticket, id, len)).await?;
    s.flush().await?;
    let mut head = [0u8; 9];
    s.read_exact(&mut head).await?;
    Ok((s, head[0], u64::from_be_bytes(head[1..].try_into()?)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flow_is_served_only_to_its_receiver_with_its_ticket_once() -> anyhow::Result<()> {
    subscribe();
    let cluster = Cluster::start(ClusterConfig::new(3, RATE, "varys").with_tls()).await?;
    let own = cluster.tls_dir().unwrap().to_path_buf();
    let c = cluster.client(0).await?;
    let coflow = c.register(3, CoflowOptions::default()).await?;
    let piece = content(77, PIECE as usize);
    c.put(coflow, "secret", piece.clone()).await?;
    let addr = c.status().await?.agents.iter().find(|a| a.machine_id == 0).unwrap().data_addr.clone();
    let agent1 = TlsContext::load(&files(&own, "agent-1"))?;
    const DENIED: u8 = 6;

    // An agent's certificate with a flow id it was never granted: denied, no size.
    let got = ask(&agent1, &addr, coflow.0, 1 << 40, 1, &[0; 16], "secret").await?;
    assert_eq!(got, (DENIED, 0, 0), "an ungranted flow");

    // A flow granted to machine 5: its ticket under agent 1's certificate is denied ...
    let security5 = cluster.agent_security(5)?;
    let mut p5 = phantom(&cluster, 5).await?;
    // Asked for by another client of machine 5, the piece is refused before any flow exists.
    p5.set_client("coflow://client/intruder");
    let e = p5.get(coflow, "secret").await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "another client's get: {e:?}");
    p5.set_client(coflow_testkit::CLIENT_IDENTITY);
    let grant = p5.get(coflow, "secret").await?;
    assert_eq!(grant.size, 100_000);
    assert_ne!(grant.ticket, [0; 16], "the grant carries a ticket");
    let stolen = ask(&agent1, &addr, coflow.0, grant.flow.0, 5, &grant.ticket, "secret").await?;
    assert_eq!(stolen, (DENIED, 0, 0), "a stolen ticket under another certificate");
    let forged = ask(&agent1, &addr, coflow.0, grant.flow.0, 1, &grant.ticket, "secret").await?;
    assert_eq!(forged, (DENIED, 0, 0), "the ticket for another receiver");
    // ... under machine 5's own it is served, once: a second attach is denied.
    let agent5 = security5.tls().expect("TLS").clone();
    let (status, size, after) = ask(&agent5, &addr, coflow.0, grant.flow.0, 5, &grant.ticket, "secret").await?;
    assert_eq!((status, size), (0, 100_000), "the receiver named in the grant");
    assert!(after > 0, "bytes follow");
    let again = ask(&agent5, &addr, coflow.0, grant.flow.0, 5, &grant.ticket, "secret").await?;
    assert_eq!(again, (DENIED, 0, 0), "a second attach");
    p5.finished(grant.flow, true);

    // The cluster's own gets are exact.
    for m in 1..3 {
        assert!(cluster.client(m).await?.get(coflow, "secret").await? == piece, "agent {m}'s get");
    }
    p5.close().await;
    cluster.shutdown().await;
    Ok(())
}

/// Sends the request `req` to the agent at `addr` under `ctx` and returns the response head's
/// status and size, and how many bytes came after it (each read within a second, for at most
/// two seconds in all).
async fn ask_raw(ctx: &TlsContext, addr: &str, req: &[u8]) -> anyhow::Result<(u8, u64, usize)> {
    let sock = tokio::net::TcpStream::connect(addr).await?;
    let mut s = coflow_proto::connect_agent(ctx, sock, 0).await.map_err(anyhow::Error::msg)?;
    s.write_all(req).await?;
    s.flush().await?;
    let mut head = [0u8; 9];
    s.read_exact(&mut head).await?;
    let mut rest = vec![0u8; 1 << 20];
    let (mut after, started) = (0, std::time::Instant::now());
    while started.elapsed() < Duration::from_secs(2)
        && let Ok(Ok(n)) = tokio::time::timeout(Duration::from_secs(1), s.read(&mut rest)).await
        && n > 0
    {
        after += n;
    }
    Ok((head[0], u64::from_be_bytes(head[1..].try_into()?), after))
}

/// A ticket grants its flow's range of the piece over the path the grant names, and nothing
/// else. The receiver of a direct grant, asking the source with the flow's ticket for the
/// piece relayed from a hop of its own choosing (an address where it listens with its own
/// agent certificate, which would have the source connect anywhere and forward, unpaced and
/// unseen by the coordinator, whatever comes for as long as it comes), or for another range
/// of the piece, is denied with no size, and the source connects nowhere; the grant's own
/// request is served after that, and the cluster's gets are exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ticket_serves_only_its_grants_range_and_path() -> anyhow::Result<()> {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    subscribe();
    let cluster = Cluster::start(ClusterConfig::new(2, RATE, "varys").with_tls()).await?;
    let c = cluster.client(0).await?;
    let coflow = c.register(2, CoflowOptions::default()).await?;
    let piece = content(78, PIECE as usize);
    c.put(coflow, "secret", piece.clone()).await?;
    let addr = c.status().await?.agents.iter().find(|a| a.machine_id == 0).unwrap().data_addr.clone();
    let security5 = cluster.agent_security(5)?;
    let agent5 = security5.tls().expect("TLS").clone();
    let p5 = phantom(&cluster, 5).await?;
    let grant = p5.get(coflow, "secret").await?;
    assert_eq!(grant.size, PIECE);
    const DENIED: u8 = 6;

    // A "source" of machine 5's own, which serves whoever connects as many bytes as it asks for.
    let fake = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let fake_addr = fake.local_addr()?.to_string();
    let (accepted, served) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let server = {
        let (accepted, served, ctx) = (accepted.clone(), served.clone(), agent5.clone());
        tokio::spawn(async move {
            while let Ok((sock, peer)) = fake.accept().await {
                accepted.fetch_add(1, Ordering::Relaxed);
                let Some((mut s, _)) = coflow_proto::accept_agent(&ctx, sock, peer).await else { continue };
                let mut req = [0u8; 4096];
                if s.read(&mut req).await.unwrap_or(0) == 0 {
                    continue;
                }
                let mut out = vec![0u8];
                out.extend_from_slice(&(1u64 << 40).to_be_bytes());
                let block = vec![0x5a; 64 << 10];
                let mut frame = vec![b'D'];
                frame.extend_from_slice(&(block.len() as u32).to_be_bytes());
                frame.extend_from_slice(&block);
                frame.extend_from_slice(&crc32fast::hash(&block).to_be_bytes());
                if s.write_all(&out).await.is_err() {
                    continue;
                }
                while s.write_all(&frame).await.is_ok() {
                    served.fetch_add(block.len() as u64, Ordering::Relaxed);
                }
            }
        })
    };
    let hop = Some((5, fake_addr.as_str(), grant.ticket));
    let relayed = request_range(b"", coflow.0, grant.flow.0, 5, &grant.ticket, "secret", (0, 1 << 40), hop);
    let got = ask_raw(&agent5, &addr, &relayed).await?;
    let served_bytes = served.load(Ordering::Relaxed);
    assert_eq!(
        (got, accepted.load(Ordering::Relaxed)),
        ((DENIED, 0, 0), 0),
        "a hop the grant does not name (the source relayed {} bytes of {served_bytes} from it)",
        got.2
    );
    for range in [(0, PIECE / 2), (PIECE / 2, PIECE / 2), (1, PIECE - 1)] {
        let other = request_range(b"", coflow.0, grant.flow.0, 5, &grant.ticket, "secret", range, None);
        assert_eq!(ask_raw(&agent5, &addr, &other).await?, (DENIED, 0, 0), "the range {range:?}");
    }
    let own = request_range(b"", coflow.0, grant.flow.0, 5, &grant.ticket, "secret", (0, PIECE), None);
    let (status, size, after) = ask_raw(&agent5, &addr, &own).await?;
    assert_eq!((status, size), (0, PIECE), "the grant's own request");
    assert!(after > 0, "bytes follow");
    p5.finished(grant.flow, true);
    assert!(cluster.client(1).await?.get(coflow, "secret").await? == piece, "agent 1's get");
    assert_eq!(accepted.load(Ordering::Relaxed), 0, "the source connected to no hop");
    server.abort();
    p5.close().await;
    cluster.shutdown().await;
    Ok(())
}

/// A get whose client never reads: the receiving agent fails it within the data idle timeout
/// (2 s in the testkit) and reports the flow's end, so the coordinator no longer holds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_whose_client_stops_reading_is_failed_and_its_flow_freed() -> anyhow::Result<()> {
    subscribe();
    let cluster = Cluster::start(ClusterConfig::new(2, 20_000_000.0, "varys")).await?;
    let c = cluster.client(0).await?;
    let coflow = c.register(1, CoflowOptions::default()).await?;
    c.put(coflow, "big", content(5, 40_000_000)).await?;
    let reader = cluster.client(1).await?;
    // Opened, and never read.
    let stalled = reader.get_chunks(coflow, "big").await?;
    let flows = || async {
        let st = c.status().await?;
        anyhow::Ok(st.coflows.iter().filter(|x| x.coflow_id == coflow.0).map(|x| x.flows.len()).sum::<usize>())
    };
    assert_eq!(flows().await?, 1, "the flow is live");
    let started = std::time::Instant::now();
    while flows().await? > 0 {
        assert!(started.elapsed() < Duration::from_secs(8), "the stalled flow still holds its rate");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Read again, the stream ends in the agent's error, never as if the piece were whole: the
    // reader's own stall, which blames no source.
    let mut stalled = stalled;
    let end = loop {
        match stalled.next().await {
            Ok(Some(_)) => continue,
            other => break other,
        }
    };
    match end {
        Err(ClientError::ClientDeparted(msg)) => {
            assert!(msg.contains("read nothing"), "the agent did not say why the get ended: {msg}")
        }
        other => panic!("a stalled get ended {other:?}"),
    }
    cluster.shutdown().await;
    Ok(())
}

/// A receiving agent (a member, not a client) that attaches to its flow and then never reads,
/// and never reports: the source gives the flow up at the data idle timeout (2 s in the
/// testkit) and says so, so the coordinator frees its rate all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiving_agent_that_stops_reading_loses_its_flow_at_the_idle_timeout() -> anyhow::Result<()> {
    subscribe();
    let cluster = Cluster::start(ClusterConfig::new(1, RATE, "varys").with_tls()).await?;
    let c = cluster.client(0).await?;
    let coflow = c.register(1, CoflowOptions::default()).await?;
    c.put(coflow, "big", content(78, 48 << 20)).await?;
    let addr = c.status().await?.agents.iter().find(|a| a.machine_id == 0).unwrap().data_addr.clone();
    let security5 = cluster.agent_security(5)?;
    let p5 = phantom(&cluster, 5).await?;
    let grant = p5.get(coflow, "big").await?;
    let agent5 = security5.tls().expect("TLS").clone();
    let (held, status, size) =
        attach(&agent5, &addr, coflow.0, grant.flow.0, 5, &grant.ticket, "big", grant.size).await?;
    assert_eq!((status, size), (0, 48 << 20), "served");
    let attached = std::time::Instant::now();
    let flows = || async {
        let st = c.status().await?;
        anyhow::Ok(st.coflows.iter().filter(|x| x.coflow_id == coflow.0).map(|x| x.flows.len()).sum::<usize>())
    };
    assert_eq!(flows().await?, 1, "the flow is live");
    while flows().await? > 0 {
        assert!(attached.elapsed() < Duration::from_secs(5), "the stalled receiver's flow still holds its rate");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!("freed {:?} after the receiver attached", attached.elapsed());
    drop(held);
    p5.close().await;
    cluster.shutdown().await;
    Ok(())
}

/// What token mode cannot promise, as the security model says: the token is the only secret, so
/// whoever holds it may act as any member. Here a token holder registers a machine id of its
/// own, announces a get for a piece another client put, is granted the flow with its ticket and
/// is served the whole piece. (An outsider without the token is refused on every call and data
/// connection: `live::a_wrong_token_is_refused_on_rpc_and_data_connections`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_token_mode_a_token_holder_may_read_any_piece() -> anyhow::Result<()> {
    subscribe();
    let cluster = Cluster::start(ClusterConfig::new(1, RATE, "varys")).await?;
    let c = cluster.client(0).await?;
    let coflow = c.register(1, CoflowOptions::default()).await?;
    c.put(coflow, "secret", content(79, 100_000)).await?;
    let addr = c.status().await?.agents.iter().find(|a| a.machine_id == 0).unwrap().data_addr.clone();
    let holder = phantom(&cluster, 9).await?;
    let grant = holder.get(coflow, "secret").await?;
    let mut s = tokio::net::TcpStream::connect(&addr).await?;
    s.write_all(&request(cluster.token().as_bytes(), coflow.0, grant.flow.0, 9, &grant.ticket, "secret", grant.size))
        .await?;
    let mut head = [0u8; 9];
    s.read_exact(&mut head).await?;
    assert_eq!((head[0], u64::from_be_bytes(head[1..].try_into()?)), (0, 100_000), "served");
    // The piece's 100,000 bytes come, in blocks framed with their checksums.
    let (mut framed, mut buf) = (0, vec![0u8; 1 << 16]);
    while let Ok(Ok(n @ 1..)) = tokio::time::timeout(Duration::from_secs(1), s.read(&mut buf)).await {
        framed += n;
    }
    assert!(framed > 100_000, "{framed} bytes came");
    holder.finished(grant.flow, true);
    holder.close().await;
    cluster.shutdown().await;
    Ok(())
}

/// One agent's certificate cannot take a source's data connections from the other agents: its
/// holder opens more connections than `max_data_connections`, but holds only its share
/// (`max_data_connections_per_peer`); past it each is told busy with the share, a get through
/// that agent waits while the share is held and is served exactly once a place is given back,
/// and another agent's get is served exactly all along.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_agents_certificate_holds_only_its_share_of_a_sources_data_connections() -> anyhow::Result<()> {
    subscribe();
    let mut cfg = ClusterConfig::new(3, RATE, "varys").with_tls();
    cfg.agent.max_data_connections = 8;
    cfg.agent.max_data_connections_per_peer = Some(2);
    let cluster = Cluster::start(cfg).await?;
    let own = cluster.tls_dir().unwrap().to_path_buf();
    let c = cluster.client(0).await?;
    let coflow = c.register(2, CoflowOptions::default()).await?;
    let piece = content(80, PIECE as usize);
    c.put(coflow, "p", piece.clone()).await?;
    let addr = c.status().await?.agents.iter().find(|a| a.machine_id == 0).unwrap().data_addr.clone();
    let agent2 = TlsContext::load(&files(&own, "agent-2"))?;
    let mut held = Vec::new();
    let mut busy = 0;
    for _ in 0..12 {
        let sock = tokio::net::TcpStream::connect(&addr).await?;
        let mut s = coflow_proto::connect_agent(&agent2, sock, 0).await.map_err(anyhow::Error::msg)?;
        let mut head = [0u8; 9];
        // A connection within the share is served: it waits for a request and says nothing.
        if let Ok(read) = tokio::time::timeout(Duration::from_millis(200), s.read_exact(&mut head)).await {
            read?;
            assert_eq!((head[0], u64::from_be_bytes(head[1..].try_into()?)), (4, 2), "busy, with the share");
            busy += 1;
        }
        held.push(s);
    }
    assert_eq!(busy, 10, "all but the share told busy");
    let got = cluster.client(1).await?.get(coflow, "p").await?;
    assert!(got == piece, "another agent's get is exact");
    let through_holder = {
        let c = cluster.client(2).await?;
        tokio::spawn(async move { c.get(coflow, "p").await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!through_holder.is_finished(), "a get past agent 2's share waits while the share is held");
    drop(held);
    let got = tokio::time::timeout(Duration::from_secs(10), through_holder).await???;
    assert!(got == piece, "served exactly once a place is given back");
    cluster.shutdown().await;
    Ok(())
}

/// A client cannot cut other agents off from a source by holding gets: gets held at rate zero
/// (a coflow waiting for all its gets, for a day) through one agent hold at most that agent's
/// share of connections to the source, the rest are refused `limit-exceeded` (once the source has
/// said busy for a data idle timeout), and a get from the same source through another agent is
/// served exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gets_held_through_one_agent_do_not_cut_others_off_from_a_source() -> anyhow::Result<()> {
    subscribe();
    let mut cfg = ClusterConfig::new(3, RATE, "varys").with_tls();
    cfg.agent.max_data_connections = 8;
    cfg.agent.data_idle_timeout_ms = 1_000;
    let cluster = Cluster::start(cfg).await?;
    let c = cluster.client(0).await?;
    let day = CoflowOptions {
        readiness: coflow_client::Readiness::AllGets { timeout: coflow_client::Nanos::from_secs(86_400) },
        ..CoflowOptions::default()
    };
    let held_coflow = c.register(1_000, day).await?;
    c.put(held_coflow, "h", content(81, 100)).await?;
    let coflow = c.register(1, CoflowOptions::default()).await?;
    let piece = content(82, PIECE as usize);
    c.put(coflow, "p", piece.clone()).await?;
    let evil = cluster.client(1).await?;
    let mut held = tokio::task::JoinSet::new();
    for _ in 0..12 {
        let evil = evil.clone();
        held.spawn(async move { evil.get(held_coflow, "h").await });
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let got = tokio::time::timeout(Duration::from_secs(10), cluster.client(2).await?.get(coflow, "p")).await??;
    assert!(got == piece, "another agent's get is exact");
    // Through the agent holding them, a get past its share fails once the source has said busy
    // for the idle timeout, typed; it never waits behind flows held at rate 0 for longer.
    let same = tokio::time::timeout(Duration::from_secs(10), evil.get(coflow, "p")).await?;
    assert!(
        matches!(&same, Err(ClientError::LimitExceeded(m)) if m.contains("max_data_connections_per_peer")),
        "{same:?}"
    );
    let mut refused = 0;
    while refused < 12 - 4 {
        let Ok(Some(r)) = tokio::time::timeout(Duration::from_secs(10), held.join_next()).await else {
            panic!("{refused} of the 8 held gets past agent 1's share of 4 were refused within 10 s");
        };
        let e = r?.unwrap_err();
        assert!(matches!(&e, ClientError::LimitExceeded(_)), "a held get ended {e:?}");
        refused += 1;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(held.try_join_next().is_none(), "the 4 gets within agent 1's share are still held");
    held.shutdown().await;
    cluster.shutdown().await;
    Ok(())
}

/// One identity cannot cut the others off from a source by holding gets through several agents:
/// its gets held at rate zero (a coflow waiting for all its gets, for a day) through two agents,
/// whose shares together are all of the source's connections, hold at most
/// `max_gets_per_owner_per_source` of them; past it each is asked again for a data idle timeout
/// and refused `limit-exceeded` naming the bound. Another identity's get from that source through
/// a third agent is served exactly; a get of the first identity past its bound waits, and is
/// served exactly once the held coflow is unregistered and its places come back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_identity_s_held_gets_through_several_agents_do_not_fill_a_source() -> anyhow::Result<()> {
    subscribe();
    let mut cfg = ClusterConfig::new(4, RATE, "varys").with_tls();
    cfg.agent.max_data_connections = 8;
    cfg.agent.data_idle_timeout_ms = 3_000;
    cfg.coordinator.max_gets_per_owner_per_source = 4;
    let cluster = Cluster::start(cfg).await?;
    let own = cluster.tls_dir().unwrap().to_path_buf();
    coflow_proto::certs::issue(&own, &Subject::Client { name: "mallory".into() }, true)?;
    let mallory = async |m: usize| {
        let cfg = ClientConfig::tls(cluster.coordinator_url(), cluster.agent_url(m), files(&own, "client-mallory"));
        Client::connect(cfg).await
    };
    let day = CoflowOptions {
        readiness: coflow_client::Readiness::AllGets { timeout: coflow_client::Nanos::from_secs(86_400) },
        ..CoflowOptions::default()
    };
    let at_source = mallory(0).await?;
    let held_coflow = at_source.register(1_000, day).await?;
    at_source.put(held_coflow, "h", content(83, 100)).await?;
    let mut held = tokio::task::JoinSet::new();
    for m in [1, 2] {
        let c = mallory(m).await?;
        for _ in 0..6 {
            let c = c.clone();
            held.spawn(async move { c.get(held_coflow, "h").await });
        }
    }
    let mut refused = 0;
    while refused < 12 - 4 {
        let Ok(Some(r)) = tokio::time::timeout(Duration::from_secs(10), held.join_next()).await else {
            panic!("{refused} of the 8 held gets past mallory's 4 were refused within 10 s");
        };
        let e = r?.unwrap_err();
        assert!(
            matches!(&e, ClientError::LimitExceeded(m) if m.contains("max_gets_per_owner_per_source")),
            "a held get ended {e:?}"
        );
        refused += 1;
    }
    let owner = cluster.client(0).await?;
    let coflow = owner.register(1, CoflowOptions::default()).await?;
    let piece = content(84, PIECE as usize);
    owner.put(coflow, "p", piece.clone()).await?;
    let got = tokio::time::timeout(Duration::from_secs(10), cluster.client(3).await?.get(coflow, "p")).await??;
    assert!(got == piece, "another identity's get through a third agent is exact");
    assert!(held.try_join_next().is_none(), "mallory's 4 gets within the bound are still held");
    let again = at_source.register(1, CoflowOptions::default()).await?;
    at_source.put(again, "q", piece.clone()).await?;
    let waiting = {
        let c = mallory(1).await?;
        tokio::spawn(async move { c.get(again, "q").await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiting.is_finished(), "a get past the bound waits for a place");
    at_source.unregister(held_coflow).await?;
    while let Some(r) = tokio::time::timeout(Duration::from_secs(10), held.join_next()).await? {
        assert!(matches!(r?, Err(ClientError::UnknownCoflow(_))), "held gets end with their coflow");
    }
    let got = tokio::time::timeout(Duration::from_secs(10), waiting).await???;
    assert!(got == piece, "served exactly once the places are given back");
    cluster.shutdown().await;
    Ok(())
}

/// A burst of gets through one agent, more than a source lets wait for their TLS handshake from
/// one address (`UNPROVEN_PER_ADDRESS`): the receiving agent opens at most
/// `HANDSHAKES_PER_ADDRESS` connections to the source at once, so the gets past its share of the
/// source's connections end `limit-exceeded` after the source's busy, never `agent-unreachable`
/// (which would take a healthy source for dead), and those within the share are held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_gets_through_one_agent_is_told_busy_not_that_the_source_is_unreachable() -> anyhow::Result<()> {
    subscribe();
    let mut cfg = ClusterConfig::new(2, RATE, "varys").with_tls();
    cfg.agent.data_idle_timeout_ms = 1_000;
    let share = cfg.agent.data_connections_per_peer();
    let cluster = Cluster::start(cfg).await?;
    let day = CoflowOptions {
        readiness: coflow_client::Readiness::AllGets { timeout: coflow_client::Nanos::from_secs(86_400) },
        ..CoflowOptions::default()
    };
    let coflow = cluster.client(1).await?.register(1_000_000, day).await?;
    cluster.client(1).await?.put(coflow, "h", content(83, 100)).await?;
    let burst = coflow_proto::UNPROVEN_PER_ADDRESS + 800;
    let c = cluster.client(0).await?;
    let mut gets = tokio::task::JoinSet::new();
    for _ in 0..burst {
        let c = c.clone();
        gets.spawn(async move { c.get(coflow, "h").await });
    }
    let mut refused = 0;
    while refused < burst - share {
        let Ok(Some(r)) = tokio::time::timeout(Duration::from_secs(20), gets.join_next()).await else {
            panic!("{refused} of the {} gets past the share of {share} ended within 20 s", burst - share);
        };
        match r? {
            Err(ClientError::LimitExceeded(_)) => refused += 1,
            other => panic!("after {refused} refused, a get ended {:?}", other.map(|b| b.len())),
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(gets.try_join_next().is_none(), "the {share} gets within the share are still held");
    gets.shutdown().await;
    cluster.shutdown().await;
    Ok(())
}
