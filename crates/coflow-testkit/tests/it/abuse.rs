//! Members with valid credentials acting as they must not, against a live coordinator: a phantom
//! agent announcing recoveries that are none, a client changing another's coflow, malformed,
//! oversize and over-long requests, unary puts that stall before their last byte, a get that
//! stops reading, an older agent process claiming its machine back, and a status at a scale past
//! gRPC's message limit.

use std::time::{Duration, Instant};

use coflow_client::{Client, ClientConfig, ClientError, CoflowId, CoflowOptions};
use coflow_core::{FlowId, MachineId};
use coflow_proto::certs::Subject;
use coflow_proto::pb::coordinator_client::CoordinatorClient;
use coflow_proto::{Security, TokenAttach, pb};
use coflow_testkit::{Cluster, ClusterConfig, files, scrape};
use prost::Message;

use crate::{content, metric, phantom, subscribe};

fn kind(s: &tonic::Status) -> &str {
    s.metadata().get("coflow-error").and_then(|v| v.to_str().ok()).unwrap_or("")
}

/// Waits until the coordinator's restart window (three agent timeouts from its start) closed.
async fn past_the_restart_window(started: Instant, cfg: &ClusterConfig) {
    let window = Duration::from_millis(3 * cfg.coordinator.agent_timeout_ms + 300);
    tokio::time::sleep(window.saturating_sub(started.elapsed())).await;
}

/// Over TLS, an agent's certificate cannot make a phantom recovery: a 64 GiB flow claimed into
/// another client's coflow is never scheduled (inside the restart window it is "not yet", since
/// no source holds such a piece; past it `permission-denied`), a coflow id of 2^64 - 2 does not
/// wrap the ids, nothing is adopted past the window, and the victim's get is served exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_phantom_recovery_is_refused_and_the_victim_is_served() -> anyhow::Result<()> {
    subscribe();
    let started = Instant::now();
    let cfg = ClusterConfig::new(2, 20e6, "varys").with_tls();
    let cluster = Cluster::start(cfg.clone()).await?;
    let client = cluster.client(0).await?;
    let victim = client.register(1, CoflowOptions { name: "victim".into(), ..Default::default() }).await?;
    let bytes = content(victim.0, 300_000);
    client.put(victim, "p", bytes.clone()).await?;
    let evil = phantom(&cluster, 10).await?;
    let live = |page: &str| metric(page, "coflow_coordinator_live_flows");
    let claim = || evil.recover_flow(FlowId(5), victim, "p", MachineId(0), 64 << 30);
    let e = claim().await.expect_err("inside the window: not yet");
    assert_eq!((e.code(), kind(&e)), (tonic::Code::Unavailable, ""), "{e:?}");
    assert_eq!(live(&scrape(cluster.coordinator_metrics).await), 0.0, "the phantom flow is not scheduled");

    past_the_restart_window(started, &cfg).await;
    let e = claim().await.expect_err("past the window");
    assert_eq!(kind(&e), "permission-denied", "{e:?}");
    let e = evil.put_recovered(CoflowId(5), "x", 1 << 30, Some(pb::RegisterRequest::default())).await.unwrap_err();
    assert_eq!(kind(&e), "permission-denied", "{e:?}");
    let e = evil.put_recovered(CoflowId(u64::MAX - 1), "x", 10, None).await.unwrap_err();
    assert_eq!(kind(&e), "unknown-coflow", "{e:?}");
    let e = evil.put_recovered(victim, "x", 10, None).await.unwrap_err();
    assert_eq!(kind(&e), "permission-denied", "into a live coflow without its registration: {e:?}");
    let next = client.register(1, CoflowOptions::default()).await?;
    assert!(next.0 > victim.0 && next.0 < u64::MAX / 2, "ids go on from the clock, unwrapped: {next:?}");
    let page = scrape(cluster.coordinator_metrics).await;
    assert_eq!(metric(&page, "coflow_coordinator_live_coflows"), 2.0, "nothing adopted");
    assert!(metric(&page, "coflow_coordinator_recoveries_refused_total") >= 4.0);

    let t = Instant::now();
    let got = tokio::time::timeout(Duration::from_secs(10), cluster.client(1).await?.get(victim, "p")).await??;
    assert!(got == bytes, "the victim's get is served exactly");
    // 300 KB at 20 MB/s: 15 ms alone; nothing phantom holds the ports.
    assert!(t.elapsed() < Duration::from_secs(1), "the victim's get took {:?}", t.elapsed());
    evil.close().await;
    cluster.shutdown().await;
    Ok(())
}

/// A client configuration under another identity of the cluster's CA: a client `NAME`, or the
/// admin.
fn identity(cluster: &Cluster, subject: &Subject) -> anyhow::Result<ClientConfig> {
    let dir = cluster.tls_dir().expect("a TLS cluster");
    coflow_proto::certs::issue(dir, subject, true)?;
    Ok(ClientConfig::tls(cluster.coordinator_url(), cluster.agent_url(0), files(dir, &subject.file_stem())))
}

/// Over TLS a coflow belongs to the client that registered it: another client's unregister and
/// seal are refused (`permission-denied`) and change nothing; the admin may seal it, its owner
/// unregister it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_client_may_not_unregister_or_seal_a_coflow() -> anyhow::Result<()> {
    subscribe();
    let cluster = Cluster::start(ClusterConfig::new(1, 20e6, "varys").with_tls()).await?;
    let owner = cluster.client(0).await?;
    let other = Client::connect(identity(&cluster, &Subject::Client { name: "other".into() })?).await?;
    let admin = Client::connect(identity(&cluster, &Subject::Admin)?).await?;
    let c = owner.register(2, CoflowOptions::default()).await?;
    for refused in [other.unregister(c).await, other.seal(c).await] {
        assert!(matches!(refused, Err(ClientError::PermissionDenied(_))), "{refused:?}");
    }
    owner.put(c, "a", vec![1; 10]).await?;
    admin.seal(c).await?;
    assert!(matches!(owner.put(c, "b", vec![1; 10]).await, Err(ClientError::Sealed(_))));
    let mine = other.register(1, CoflowOptions::default()).await?;
    other.unregister(mine).await?;
    owner.unregister(c).await?;
    assert_eq!(owner.status().await?.coflows.len(), 0);
    cluster.shutdown().await;
    Ok(())
}

/// Over TLS a member's status shows the coflows it may use: its own (with their flows), not
/// another client's, and all of them to the admin; every member sees the agents.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_status_shows_only_its_own_coflows() -> anyhow::Result<()> {
    subscribe();
    let cluster = Cluster::start(ClusterConfig::new(1, 20e6, "varys").with_tls()).await?;
    let owner = cluster.client(0).await?;
    let other = Client::connect(identity(&cluster, &Subject::Client { name: "other".into() })?).await?;
    let admin = Client::connect(identity(&cluster, &Subject::Admin)?).await?;
    let c = owner.register(1, CoflowOptions { name: "tenant-a-private".into(), ..CoflowOptions::default() }).await?;
    owner.put(c, "secret-export", vec![1; 10]).await?;
    let mine = other.register(1, CoflowOptions::default()).await?;
    let ids = |s: &pb::StatusResponse| s.coflows.iter().map(|k| k.coflow_id).collect::<Vec<_>>();
    let (seen_by_owner, seen_by_other, seen_by_admin) =
        (owner.status().await?, other.status().await?, admin.status().await?);
    assert_eq!(ids(&seen_by_owner), vec![c.0]);
    assert_eq!(ids(&seen_by_other), vec![mine.0], "another client's coflow is not shown");
    let mut all = ids(&seen_by_admin);
    all.sort();
    assert_eq!(all, vec![c.0, mine.0]);
    for s in [&seen_by_owner, &seen_by_other, &seen_by_admin] {
        assert_eq!(s.agents.len(), 1, "every member sees the agents");
    }
    cluster.shutdown().await;
    Ok(())
}

/// Over TLS only a coflow's owner and the admin put pieces into it and get pieces from it:
/// another client's put and get are refused (`permission-denied`), through an agent like any
/// other and at once, its refused piece is not kept, and the owner's own get is exact afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_client_may_not_put_into_or_get_from_a_coflow() -> anyhow::Result<()> {
    subscribe();
    let cluster = Cluster::start(ClusterConfig::new(2, 20e6, "varys").with_tls()).await?;
    let on = |cfg: ClientConfig, m: usize| ClientConfig { agent: cluster.agent_url(m), ..cfg };
    let owner = cluster.client(0).await?;
    let other = Client::connect(on(identity(&cluster, &Subject::Client { name: "other".into() })?, 1)).await?;
    let admin = Client::connect(on(identity(&cluster, &Subject::Admin)?, 1)).await?;
    let c = owner.register(3, CoflowOptions::default()).await?;
    let piece = content(9, 300_000);
    owner.put(c, "p", piece.clone()).await?;
    let put = other.put(c, "q", vec![7; 1000]).await;
    assert!(matches!(put, Err(ClientError::PermissionDenied(_))), "another client's put: {put:?}");
    // On the agent that holds the owner's piece, a put under its name is refused as any other:
    // the refusal tells nothing of which names exist, and takes none from the owner.
    let beside = Client::connect(on(identity(&cluster, &Subject::Client { name: "other".into() })?, 0)).await?;
    for id in ["p", "r"] {
        let put = beside.put(c, id, vec![7; 1000]).await;
        assert!(matches!(put, Err(ClientError::PermissionDenied(_))), "another client's put of {id} beside: {put:?}");
    }
    for id in ["p", "q", "missing"] {
        // The coordinator's refusal is its answer: returned at once, not retried (a loose bound,
        // far above a refusal's few milliseconds and below a retry's seconds).
        let asked = Instant::now();
        let got = other.get(c, id).await;
        assert!(matches!(got, Err(ClientError::PermissionDenied(_))), "another client's get of {id}: {got:?}");
        assert!(asked.elapsed() < Duration::from_secs(2), "another client's get of {id} took {:?}", asked.elapsed());
    }
    assert!(admin.get(c, "p").await? == piece, "the admin's get");
    assert!(cluster.client(1).await?.get(c, "p").await? == piece, "the owner's get on another machine");
    admin.put(c, "q", vec![7; 1000]).await?;
    assert_eq!(owner.get(c, "q").await?, vec![7; 1000], "the admin's piece, which the refused one did not take");
    cluster.shutdown().await;
    Ok(())
}

/// The agent reads file segments with its own rights, so with TLS it takes a client's only
/// beneath the client's own directory (`clients/NAME`): another client naming the owner's file,
/// or any file elsewhere in the data directory, is refused `permission-denied`, and the
/// owner's segment is served exact.
#[tokio::test]
async fn a_client_may_not_put_another_clients_file() -> anyhow::Result<()> {
    subscribe();
    let cluster = Cluster::start(ClusterConfig::new(2, 20e6, "varys").with_tls()).await?;
    let owner = cluster.client(0).await?;
    let other = Client::connect(ClientConfig {
        agent: cluster.agent_url(0),
        ..identity(&cluster, &Subject::Client { name: "other".into() })?
    })
    .await?;
    let data = &cluster.data_dirs[0];
    let secret = content(11, 200_000);
    std::fs::create_dir_all(data.join("clients/testkit/app"))?;
    std::fs::create_dir_all(data.join("clients/other"))?;
    std::fs::write(data.join("clients/testkit/app/out"), &secret)?;
    std::fs::write(data.join("loose"), &secret)?;
    std::fs::write(data.join("clients/other/own"), &secret[..1000])?;
    let theirs = other.register(1, CoflowOptions::default()).await?;
    for path in ["clients/testkit/app/out", "loose", "./clients/testkit/app/out", "/clients/testkit/app/out"] {
        let put = other.put_file(theirs, path, path, 0, 1000).await;
        assert!(matches!(&put, Err(ClientError::PermissionDenied(_))), "another client's put of {path}: {put:?}");
    }
    // Out of its own directory through `..` is an escape, refused as any is.
    let put = other.put_file(theirs, "up", "clients/other/../testkit/app/out", 0, 1000).await;
    assert!(matches!(&put, Err(ClientError::Invalid(_))), "a way out through ..: {put:?}");
    other.put_file(theirs, "own", "clients/other/own", 0, 1000).await?;
    let mine = owner.register(1, CoflowOptions::default()).await?;
    // Even in its own coflow, a client's file outside its directory is not taken.
    let put = owner.put_file(mine, "x", "loose", 0, 1000).await;
    assert!(matches!(&put, Err(ClientError::PermissionDenied(_))), "a file outside the owner's directory: {put:?}");
    owner.put_file(mine, "out", "clients/testkit/app/out", 0, secret.len() as u64).await?;
    assert!(cluster.client(1).await?.get(mine, "out").await? == secret, "the owner's segment");
    cluster.shutdown().await;
    Ok(())
}

/// With `max_stored_bytes_per_client`, one client identity that fills its share of an agent's
/// memory is refused `limit-exceeded` while another's puts are stored, and what it frees is
/// its own again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_client_cannot_take_the_memory_an_agent_holds_for_others() -> anyhow::Result<()> {
    subscribe();
    let mut cfg = ClusterConfig::new(2, 20e6, "varys").with_tls();
    cfg.agent.max_stored_bytes = 3_000_000;
    cfg.agent.max_stored_bytes_per_client = 1_000_000;
    let cluster = Cluster::start(cfg).await?;
    let greedy = cluster.client(0).await?;
    let other = Client::connect(ClientConfig {
        agent: cluster.agent_url(0),
        ..identity(&cluster, &Subject::Client { name: "other".into() })?
    })
    .await?;
    let hoard = greedy.register(3, CoflowOptions::default()).await?;
    greedy.put(hoard, "a", content(1, 600_000)).await?;
    let over = greedy.put(hoard, "b", content(2, 600_000)).await;
    assert!(matches!(&over, Err(ClientError::LimitExceeded(m)) if m.contains("per_client")), "{over:?}");
    let theirs = other.register(1, CoflowOptions::default()).await?;
    other.put(theirs, "c", content(3, 900_000)).await?;
    // Each piece is charged its bytes and a bookkeeping of well under a KiB.
    let page = scrape(cluster.agent_metrics[0]).await;
    assert_eq!(metric(&page, "coflow_agent_piece_bytes"), 1_500_000.0, "the refused put holds nothing");
    let charged = metric(&page, "coflow_agent_stored_bytes");
    assert!((1_500_000.0..1_502_048.0).contains(&charged), "{charged}");
    let largest = metric(&page, "coflow_agent_stored_bytes_largest_client");
    assert!((900_000.0..901_024.0).contains(&largest), "{largest}");
    greedy.unregister(hoard).await?;
    let again = greedy.register(1, CoflowOptions::default()).await?;
    let t = std::time::Instant::now();
    // The agent hears of the unregister on its session: the memory comes back within moments.
    loop {
        match greedy.put(again, "d", content(4, 999_000)).await {
            Ok(_) => break,
            Err(ClientError::LimitExceeded(_)) if t.elapsed() < std::time::Duration::from_secs(5) => {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
    let reader = Client::connect(ClientConfig {
        agent: cluster.agent_url(1),
        ..identity(&cluster, &Subject::Client { name: "other".into() })?
    })
    .await?;
    assert!(reader.get(theirs, "c").await? == content(3, 900_000), "the other client's piece");
    cluster.shutdown().await;
    Ok(())
}

/// Bytes sent as they are, and received as they come: a codec for requests no client would make.
#[derive(Clone, Copy, Debug, Default)]
struct Raw;

impl tonic::codec::Codec for Raw {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = Raw;
    type Decoder = Raw;

    fn encoder(&mut self) -> Raw {
        Raw
    }

    fn decoder(&mut self) -> Raw {
        Raw
    }
}

impl tonic::codec::Encoder for Raw {
    type Item = Vec<u8>;
    type Error = tonic::Status;

    fn encode(&mut self, item: Vec<u8>, dst: &mut tonic::codec::EncodeBuf<'_>) -> Result<(), tonic::Status> {
        use prost::bytes::BufMut;
        dst.put_slice(&item);
        Ok(())
    }
}

impl tonic::codec::Decoder for Raw {
    type Item = Vec<u8>;
    type Error = tonic::Status;

    fn decode(&mut self, src: &mut tonic::codec::DecodeBuf<'_>) -> Result<Option<Vec<u8>>, tonic::Status> {
        use prost::bytes::Buf;
        let mut out = vec![0; src.remaining()];
        src.copy_to_slice(&mut out);
        Ok(Some(out))
    }
}

/// Sends `body` as a `Register` call, with the cluster's token.
async fn register_raw(cluster: &Cluster, body: Vec<u8>) -> tonic::Status {
    call_raw(cluster, &cluster.coordinator_url(), "/coflow.v1.Coordinator/Register", body).await
}

/// Sends `body` as the one message of a call of `path` at `url`, with the cluster's token, and
/// returns the refusal: the call's status, or the first message's for a call that streams.
async fn call_raw(cluster: &Cluster, url: &str, path: &'static str, body: Vec<u8>) -> tonic::Status {
    let channel = tonic::transport::Endpoint::from_shared(url.to_string()).unwrap().connect().await.unwrap();
    let mut grpc = tonic::client::Grpc::new(channel).max_encoding_message_size(64 << 20);
    grpc.ready().await.unwrap();
    let mut req = tonic::Request::new(tokio_stream::iter([body]));
    cluster.token().attach(&mut req);
    let path = tonic::codegen::http::uri::PathAndQuery::from_static(path);
    match grpc.streaming(req, path, Raw).await {
        Err(s) => s,
        Ok(mut answer) => answer.get_mut().message().await.expect_err("refused"),
    }
}

/// Malformed and oversize requests and lists past their limit get a typed error: `invalid` for
/// bytes that are no protobuf and for a `num_flows` past 2^32 (never truncated), `limit-exceeded`
/// for a message past 4 MB (4,000,000 parents) and for 2,000 parents; the coordinator goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_and_oversize_requests_get_typed_errors() -> anyhow::Result<()> {
    subscribe();
    let cluster = Cluster::start(ClusterConfig::new(1, 20e6, "varys")).await?;
    let reg = |num_flows: u64, parents: usize| {
        let options = pb::CoflowOptions { parents: vec![1; parents], ..Default::default() };
        pb::RegisterRequest { num_flows, options: Some(options), ..Default::default() }.encode_to_vec()
    };
    for (body, code, want) in [
        (vec![0xff, 0xff, 0xff, 0xff], tonic::Code::InvalidArgument, "invalid"),
        (reg((1 << 32) + 3, 0), tonic::Code::InvalidArgument, "invalid"),
        (reg(1, 2_000), tonic::Code::ResourceExhausted, "limit-exceeded"),
        (reg(1, 4_000_000), tonic::Code::ResourceExhausted, "limit-exceeded"),
        (vec![0; 5 << 20], tonic::Code::ResourceExhausted, "limit-exceeded"),
    ] {
        let len = body.len();
        let s = register_raw(&cluster, body).await;
        assert_eq!((s.code(), kind(&s)), (code, want), "{len} bytes: {s:?}");
    }
    let c = cluster.client(0).await?;
    c.register(1, CoflowOptions::default()).await?;
    assert_eq!(c.status().await?.coflows.len(), 1, "only the valid registration took");
    cluster.shutdown().await;
    Ok(())
}

/// Every call of both services, sent malformed bytes, and sent a message past its bound (a
/// control request past 64 KiB, an agent's put past its 8 MiB message limit): `invalid` and
/// `limit-exceeded` every time, and both services go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_refuses_malformed_and_oversize_messages_with_a_typed_error() -> anyhow::Result<()> {
    subscribe();
    let cluster = Cluster::start(ClusterConfig::new(1, 20e6, "varys")).await?;
    let (coordinator, agent) = (cluster.coordinator_url(), cluster.agent_url(0));
    let calls: [(&str, &'static str, usize); 12] = [
        (&coordinator, "/coflow.v1.Coordinator/Register", 100 << 10),
        (&coordinator, "/coflow.v1.Coordinator/Unregister", 100 << 10),
        (&coordinator, "/coflow.v1.Coordinator/Seal", 100 << 10),
        (&coordinator, "/coflow.v1.Coordinator/Status", 100 << 10),
        (&coordinator, "/coflow.v1.Coordinator/RegisterAgent", 100 << 10),
        (&coordinator, "/coflow.v1.Coordinator/AgentSession", 5 << 20),
        (&coordinator, "/coflow.v1.Coordinator/AssignMachine", 100 << 10),
        (&coordinator, "/coflow.v1.Coordinator/DeregisterAgent", 100 << 10),
        (&agent, "/coflow.v1.Agent/Put", 9 << 20),
        (&agent, "/coflow.v1.Agent/Get", 100 << 10),
        (&agent, "/coflow.v1.Agent/PutStream", 9 << 20),
        (&coordinator, "/coflow.v1.Coordinator/Register", 5 << 20),
    ];
    for (url, path, oversize) in calls {
        let s = call_raw(&cluster, url, path, vec![0xff, 0xff, 0xff, 0xff]).await;
        assert_eq!((s.code(), kind(&s)), (tonic::Code::InvalidArgument, "invalid"), "{path}, malformed: {s:?}");
        // Valid protobuf (field 15, bytes) of the size asked.
        let mut big = vec![0x7a];
        prost::encoding::encode_varint(oversize as u64, &mut big);
        big.resize(big.len() + oversize, 7);
        let s = call_raw(&cluster, url, path, big).await;
        assert_eq!(
            (s.code(), kind(&s)),
            (tonic::Code::ResourceExhausted, "limit-exceeded"),
            "{path}, {oversize} bytes: {s:?}"
        );
    }
    let c = cluster.client(0).await?;
    let coflow = c.register(1, CoflowOptions::default()).await?;
    c.put(coflow, "p", vec![3; 1000]).await?;
    assert_eq!(c.get(coflow, "p").await?, vec![3; 1000], "both services go on");
    cluster.shutdown().await;
    Ok(())
}

/// The size of [`one_big_piece`]'s piece.
const BIG: usize = 48 << 20;

/// Reads `chunks` at `pace` bytes per second (resting after each chunk for as long as its bytes
/// take at that pace), in a task that returns the bytes.
fn read_at(mut chunks: coflow_client::Chunks, pace: f64) -> tokio::task::JoinHandle<anyhow::Result<Vec<u8>>> {
    tokio::spawn(async move {
        let mut got = Vec::new();
        while let Some(chunk) = chunks.next().await? {
            got.extend_from_slice(&chunk);
            tokio::time::sleep(Duration::from_secs_f64(chunk.len() as f64 / pace)).await;
        }
        anyhow::Ok(got)
    })
}

/// Two machines with ports at `rate` under `varys`, and a coflow holding one piece `big` of
/// [`BIG`] bytes on machine 0: the cluster, the client that put it, the coflow, and a client on
/// machine 1 to get it.
async fn one_big_piece(rate: f64) -> anyhow::Result<(Cluster, Client, CoflowId, Client)> {
    let cluster = Cluster::start(ClusterConfig::new(2, rate, "varys")).await?;
    let c = cluster.client(0).await?;
    let coflow = c.register(1, CoflowOptions::default()).await?;
    c.put(coflow, "big", content(9, BIG)).await?;
    let reader = cluster.client(1).await?;
    Ok((cluster, c, coflow, reader))
}

/// A client that opens a get and never reads: within the data idle timeout (2 s here) the get
/// ends and the coordinator frees its flow, while the client still holds the stream. Meanwhile
/// its agent reports the flow unread, so the sender's uplink, which nothing else crosses, is not
/// taken for slow (which would hold back the sender's next flows).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_that_stops_reading_frees_its_flow_within_the_idle_timeout() -> anyhow::Result<()> {
    subscribe();
    let rate = 20e6;
    let (cluster, c, coflow, reader) = one_big_piece(rate).await?;
    let stalled = reader.get_chunks(coflow, "big").await?;
    let live = || async { metric(&scrape(cluster.coordinator_metrics).await, "coflow_coordinator_live_flows") };
    let opened = Instant::now();
    while live().await == 0.0 && opened.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(live().await, 1.0, "the flow is live");
    let mut uplink = Vec::new();
    while live().await > 0.0 && opened.elapsed() < Duration::from_secs(8) {
        let st = c.status().await?;
        let sender = st.agents.iter().find(|a| a.machine_id == 0).expect("machine 0 is registered");
        uplink.push((opened.elapsed().as_millis(), sender.uplink_bps));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(live().await, 0.0, "the stalled get's flow is still live after {:?}", opened.elapsed());
    assert!(
        uplink.iter().all(|&(_, bps)| bps >= rate / 2.0),
        "the sender's uplink was taken for slow (ms, B/s): {uplink:?}"
    );
    drop(stalled);
    cluster.shutdown().await;
    Ok(())
}

/// A client that reads steadily but slowly (2 MB/s, a tenth of its ports' rate, never leaving a
/// chunk untaken long) holds its flow back, not a port: its agent reports it reader-limited for
/// as long as it reads so (status shows it so), so neither the sender's uplink nor the receiver's
/// downlink is taken for slow, for the 4 s watched (more than eight measurement periods).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_steady_reader_is_not_taken_for_a_slow_port() -> anyhow::Result<()> {
    subscribe();
    let rate = 20e6;
    let (cluster, c, coflow, reader) = one_big_piece(rate).await?;
    let read = read_at(reader.get_chunks(coflow, "big").await?, 2e6);
    let opened = Instant::now();
    let (mut ports, mut held) = (Vec::new(), 0);
    while opened.elapsed() < Duration::from_secs(4) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let st = c.status().await?;
        let port = |m: u32| st.agents.iter().find(|a| a.machine_id == m).expect("both agents are registered");
        ports.push((opened.elapsed().as_millis(), port(0).uplink_bps, port(1).downlink_bps));
        held += st.coflows.iter().flat_map(|c| &c.flows).filter(|f| f.reader_limited).count();
    }
    assert!(held >= ports.len() / 2, "status shows the flow held back by its reader: {held} of {} looks", ports.len());
    assert!(
        ports.iter().all(|&(_, up, down)| up >= rate / 2.0 && down >= rate / 2.0),
        "a port was taken for slow (ms, uplink B/s, downlink B/s): {ports:?}"
    );
    let st = c.status().await?;
    let sent = st.coflows.iter().flat_map(|c| &c.flows).map(|f| f.bytes_sent).next().unwrap_or(BIG as u64);
    assert!(sent < BIG as u64 / 2, "the reader held its flow back: {sent} bytes sent in 4 s");
    c.unregister(coflow).await?;
    let _ = read.await?;
    cluster.shutdown().await;
    Ok(())
}

/// A client that starts gets and hangs up on them ends them itself: the agent and the
/// coordinator count each (`get_failures`, `flows_failed_by_reason{reason="client-departed"}`)
/// but write no warning, which a client could otherwise write once per get it cancels.
#[tokio::test]
async fn gets_a_client_cancels_are_counted_but_not_warned_of() -> anyhow::Result<()> {
    let (logs, _guard) = crate::Captured::warnings();
    let cluster = Cluster::start(ClusterConfig::new(2, 20e6, "varys")).await?;
    let c = cluster.client(0).await?;
    let coflow = c.register(1, CoflowOptions::default()).await?;
    c.put(coflow, "big", content(3, 48 << 20)).await?;
    let reader = cluster.client(1).await?;
    let live = || async { metric(&scrape(cluster.coordinator_metrics).await, "coflow_coordinator_live_flows") };
    const CANCELLED: usize = 3;
    for _ in 0..CANCELLED {
        let get = reader.get_chunks(coflow, "big").await?;
        let opened = Instant::now();
        while live().await == 0.0 && opened.elapsed() < Duration::from_secs(5) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(live().await, 1.0, "the get's flow is live");
        drop(get);
        while live().await > 0.0 && opened.elapsed() < Duration::from_secs(10) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(live().await, 0.0, "the cancelled get's flow ended");
    }
    // The check is real: both services saw each cancelled get fail.
    let agent = scrape(cluster.agent_metrics[1]).await;
    assert_eq!(metric(&agent, "coflow_agent_get_failures_total"), CANCELLED as f64, "{agent}");
    let page = scrape(cluster.coordinator_metrics).await;
    let departed = page
        .lines()
        .find(|l| l.starts_with("coflow_coordinator_flows_failed_by_reason") && l.contains("client-departed"))
        .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok());
    assert_eq!(departed, Some(CANCELLED as f64), "{page}");
    let text = logs.text();
    assert!(!text.contains("get failed") && !text.contains("flow failed"), "warnings of cancelled gets:\n{text}");
    cluster.shutdown().await;
    Ok(())
}

/// A put stream that states 4 MiB and sends a byte a second (each within the 2 s idle timeout)
/// falls behind 1 MiB/s as soon as the 2 s grace is over: it fails `invalid`, naming the rate,
/// and the name and the memory it held are free again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_stream_that_trickles_gives_its_reservation_back() -> anyhow::Result<()> {
    subscribe();
    let cluster = Cluster::start(ClusterConfig::new(1, 20e6, "varys")).await?;
    let c = cluster.client(0).await?;
    let coflow = c.register(1, CoflowOptions::default()).await?;
    let size = 4u64 << 20;
    let started = Instant::now();
    let s = tokio::time::timeout(Duration::from_secs(20), put_stream(&cluster, trickle(coflow, size)))
        .await
        .expect("refused within 20 s")?
        .expect_err("a trickle is refused");
    let took = started.elapsed();
    assert_eq!((s.code(), kind(&s)), (tonic::Code::InvalidArgument, "invalid"), "{s:?}");
    assert!(s.message().contains("1 MiB/s"), "{}", s.message());
    assert!((Duration::from_secs(2)..Duration::from_secs(5)).contains(&took), "refused after {took:?}");
    assert_eq!(c.put(coflow, "slow", vec![5; 1000]).await?, 1000, "the name is free again");
    assert_eq!(c.get(coflow, "slow").await?, vec![5; 1000]);
    cluster.shutdown().await;
    Ok(())
}

/// Sends `chunks` to agent 0 as a put stream with the cluster's token, as a client that speaks
/// the protocol itself would; the agent's answer.
async fn put_stream(
    cluster: &Cluster,
    chunks: impl tokio_stream::Stream<Item = pb::PutChunk> + Send + 'static,
) -> anyhow::Result<Result<tonic::Response<pb::PutResponse>, tonic::Status>> {
    let channel = tonic::transport::Endpoint::from_shared(cluster.agent_url(0))?.connect().await?;
    let mut req = tonic::Request::new(chunks);
    cluster.token().attach(&mut req);
    Ok(pb::agent_client::AgentClient::new(channel).put_stream(req).await)
}

/// A put stream of `size` bytes stated, in coflow `coflow` as piece `slow`, that sends one byte a
/// second.
fn trickle(coflow: CoflowId, size: u64) -> impl tokio_stream::Stream<Item = pb::PutChunk> {
    let first = pb::PutChunk { coflow_id: coflow.0, data_id: "slow".into(), size, data: vec![1] };
    let rest = tokio_stream::StreamExt::throttle(
        tokio_stream::iter((1..size).map(|_| pb::PutChunk { data: vec![1], ..Default::default() })),
        Duration::from_secs(1),
    );
    tokio_stream::StreamExt::chain(tokio_stream::iter([first]), rest)
}

/// A put stream (8 MiB stated, 256 KiB every 100 ms: 3.2 s in all) whose coflow is unregistered
/// 300 ms in ends `unknown-coflow` at its next chunk, not after its last, and what it reserved is
/// free again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_stream_whose_coflow_is_unregistered_ends_at_once() -> anyhow::Result<()> {
    subscribe();
    let cluster = Cluster::start(ClusterConfig::new(1, 20e6, "varys")).await?;
    let c = cluster.client(0).await?;
    let coflow = c.register(1, CoflowOptions::default()).await?;
    let (size, chunk) = (8u64 << 20, 256 << 10);
    let first = pb::PutChunk { coflow_id: coflow.0, data_id: "p".into(), size, data: vec![1; chunk] };
    let rest = (1..size / chunk as u64).map(move |_| pb::PutChunk { data: vec![1; chunk], ..Default::default() });
    let chunks = tokio_stream::StreamExt::throttle(
        tokio_stream::StreamExt::chain(tokio_stream::iter([first]), tokio_stream::iter(rest)),
        Duration::from_millis(100),
    );
    let started = Instant::now();
    let stored = || async { metric(&scrape(cluster.agent_metrics[0]).await, "coflow_agent_stored_bytes") };
    let unregister = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let reserved = stored().await;
        c.unregister(coflow).await.map(|()| reserved)
    };
    let (put, reserved) =
        tokio::join!(tokio::time::timeout(Duration::from_secs(20), put_stream(&cluster, chunks)), unregister);
    assert!(reserved? >= size as f64, "the stream reserved its stated size");
    let s = put.expect("answered within 20 s")?.expect_err("the coflow is gone");
    let took = started.elapsed();
    assert_eq!(kind(&s), "unknown-coflow", "{s:?}");
    assert!(took < Duration::from_millis(1_500), "ended after {took:?} of the stream's 3.2 s");
    assert_eq!(stored().await, 0.0, "and gave it back");
    cluster.shutdown().await;
    Ok(())
}

/// Of two processes claiming one machine, the one that started later wins: the older one's
/// registration is refused with ABORTED, which tells it to stop, instead of replacing the newer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_agent_process_is_told_to_stop() -> anyhow::Result<()> {
    subscribe();
    let cluster = Cluster::start(ClusterConfig::new(1, 20e6, "varys").with_tls()).await?;
    let Security::Tls(tls) = cluster.agent_security(20)? else { unreachable!("a TLS cluster") };
    let channel =
        Security::Tls(tls).endpoint(&cluster.coordinator_url()).map_err(anyhow::Error::msg)?.connect().await?;
    let mut c = CoordinatorClient::with_interceptor(channel, TokenAttach::new(None));
    let reg = |incarnation: u64| pb::RegisterAgentRequest {
        machine_id: 20,
        data_addr: "127.0.0.1:9020".into(),
        port_rate_bps: 1e6,
        session: 0,
        incarnation,
        ..Default::default()
    };
    c.register_agent(reg(2_000)).await?;
    let s = c.register_agent(reg(1_000)).await.expect_err("an older process");
    assert_eq!((s.code(), kind(&s)), (tonic::Code::Aborted, "permission-denied"), "{s:?}");
    c.register_agent(reg(3_000)).await?;
    cluster.shutdown().await;
    Ok(())
}

/// `coflow status` works with more live coflows than fit one 4 MB message (17,000 with 250-byte
/// names, about 4.5 MB): the coordinator pages, the client merges the pages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_works_past_the_message_limit() -> anyhow::Result<()> {
    subscribe();
    let cluster = Cluster::start(ClusterConfig::new(1, 20e6, "varys")).await?;
    let c = cluster.client(0).await?;
    const N: usize = 17_000;
    let mut tasks = tokio::task::JoinSet::new();
    for t in 0..32 {
        let c = c.clone();
        tasks.spawn(async move {
            for i in (t..N).step_by(32) {
                let name = format!("{i:0>250}");
                c.register(1, CoflowOptions { name, ..Default::default() }).await?;
            }
            Ok::<_, ClientError>(())
        });
    }
    while let Some(r) = tasks.join_next().await {
        r??;
    }
    let first = c.status_page(0, 0).await?;
    assert!(first.coflows.len() < N && first.next_after_coflow_id != 0, "{} coflows on page one", first.coflows.len());
    assert!(first.encoded_len() < 4 << 20);
    let st = c.status().await?;
    assert_eq!(st.coflows.len(), N);
    let mut ids: Vec<u64> = st.coflows.iter().map(|c| c.coflow_id).collect();
    ids.dedup();
    assert_eq!(ids.len(), N, "each coflow once, in order");
    assert_eq!(st.agents.len(), 1);
    cluster.shutdown().await;
    Ok(())
}

/// A connection that never says a word (no HTTP/2 preface, so hyper cannot close it gracefully)
/// does not hold a service past its stop: the agent and the coordinator each return within
/// `SHUTDOWN_DRAIN` of being told to stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_connection_does_not_hold_a_service_past_its_stop() -> anyhow::Result<()> {
    subscribe();
    let cluster = Cluster::start(ClusterConfig::new(1, 1e9, "varys")).await?;
    let _silent = (
        tokio::net::TcpStream::connect(cluster.coordinator_addr).await?,
        tokio::net::TcpStream::connect(cluster.agent_addrs[0]).await?,
    );
    let bound = coflow_proto::SHUTDOWN_DRAIN * 2 + Duration::from_secs(5);
    tokio::time::timeout(bound, cluster.shutdown()).await.map_err(|_| {
        anyhow::anyhow!("the services still ran {bound:?} after their stop, held by a silent connection")
    })?;
    Ok(())
}

/// In token mode a gRPC connection that sends nothing (no HTTP/2 preface) holds its place only
/// until `HANDSHAKE_TIMEOUT` from its accept, then it is closed, at the coordinator and at an
/// agent alike; while such connections are held, from another address and from the client's own,
/// a client registers, puts and gets at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_token_mode_a_silent_grpc_connection_is_closed_at_the_handshake_timeout() -> anyhow::Result<()> {
    use tokio::io::AsyncReadExt;
    subscribe();
    let cluster = Cluster::start(ClusterConfig::new(1, 1e9, "varys")).await?;
    let opened = Instant::now();
    let mut silent = Vec::new();
    // More from the other loopback address than it may handshake at once; a few from the client's.
    for (from, n) in [("127.0.0.2:0", coflow_proto::HANDSHAKES_PER_ADDRESS + 16), ("127.0.0.1:0", 8)] {
        for to in [cluster.coordinator_addr, cluster.agent_addrs[0]] {
            for _ in 0..n {
                let sock = tokio::net::TcpSocket::new_v4()?;
                sock.bind(from.parse()?)?;
                silent.push(sock.connect(to).await?);
            }
        }
    }
    let c = cluster.client(0).await?;
    let t = Instant::now();
    let coflow = c.register(1, CoflowOptions::default()).await?;
    c.put(coflow, "a", content(1, 1000)).await?;
    assert!(c.get(coflow, "a").await? == content(1, 1000));
    assert!(t.elapsed() < Duration::from_secs(3), "served {:?} after the silent peers came", t.elapsed());
    let mut b = [0u8; 16];
    let gone =
        |r: std::io::Result<usize>| matches!(r, Ok(0)) || r.is_err_and(|e| e.kind() != std::io::ErrorKind::WouldBlock);
    let closed = silent.iter_mut().filter(|s| gone(s.try_read(&mut b))).count();
    assert_eq!(closed, 0, "inside the handshake timeout every silent connection is still open");
    let deadline = opened + coflow_proto::HANDSHAKE_TIMEOUT + Duration::from_secs(5);
    for s in &mut silent {
        let read = tokio::time::timeout_at(deadline.into(), s.read_to_end(&mut Vec::new())).await;
        assert!(
            matches!(read, Ok(Ok(0))),
            "a silent connection is closed, told nothing, at the handshake timeout: {read:?}"
        );
        let closed = opened.elapsed();
        assert!(closed >= coflow_proto::HANDSHAKE_TIMEOUT, "closed after {closed:?}, before the handshake timeout");
    }
    c.unregister(coflow).await?;
    cluster.shutdown().await;
    Ok(())
}

/// A gRPC request body: one message's prefix stating `len` bytes, then all of them but the last,
/// then nothing more, ever.
struct Stalled {
    prefix: Option<hyper::body::Bytes>,
    left: usize,
    block: hyper::body::Bytes,
}

impl Stalled {
    fn new(len: u32, block: &hyper::body::Bytes) -> Stalled {
        let mut prefix = vec![0];
        prefix.extend_from_slice(&len.to_be_bytes());
        Stalled { prefix: Some(prefix.into()), left: len as usize - 1, block: block.clone() }
    }
}

impl tonic::codegen::Body for Stalled {
    type Data = hyper::body::Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        if let Some(p) = self.prefix.take() {
            return std::task::Poll::Ready(Some(Ok(hyper::body::Frame::data(p))));
        }
        if self.left == 0 {
            return std::task::Poll::Pending;
        }
        let n = self.left.min(self.block.len());
        self.left -= n;
        std::task::Poll::Ready(Some(Ok(hyper::body::Frame::data(self.block.slice(..n)))))
    }
}

/// The process's resident memory, in bytes.
fn resident() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kib = status.lines().find_map(|l| l.strip_prefix("VmRSS:")).expect("VmRSS");
    kib.trim().trim_end_matches("kB").trim().parse::<u64>().expect("a number of kB") << 10
}

/// A channel to agent 0 under the identity `subject` of the cluster's CA (issued already).
async fn agent_channel(cluster: &Cluster, subject: &Subject) -> anyhow::Result<tonic::transport::Channel> {
    let tls = coflow_proto::TlsContext::load(&files(cluster.tls_dir().expect("a TLS cluster"), &subject.file_stem()))?;
    Ok(Security::Tls(tls).endpoint(&cluster.agent_url(0)).map_err(anyhow::Error::msg)?.connect().await?)
}

/// Calls `path` (such as `coflow.v1.Agent/Put`) at `url` on `channel` with the raw gRPC request
/// body `body`; returns the answer's gRPC status and error kind once there is one.
async fn raw_call(
    mut channel: tonic::transport::Channel,
    url: String,
    path: &str,
    body: tonic::body::Body,
) -> anyhow::Result<(String, String)> {
    use tonic::codegen::Service;
    let req = tonic::codegen::http::Request::post(format!("{url}/{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(body)?;
    std::future::poll_fn(|cx| channel.poll_ready(cx)).await?;
    let answer = channel.call(req).await?;
    let header = |name: &str| answer.headers().get(name).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    Ok((header("grpc-status"), header(coflow_proto::ERROR_KIND)))
}

/// Puts `bytes` bytes into `coflow` as `mine`, once the calls it hung up on are gone: refused
/// `limit-exceeded` until then, for at most 5 s.
async fn put_after_hanging_up(mine: &Client, coflow: CoflowId, bytes: usize) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match mine.put(coflow, "q", vec![4; bytes]).await {
            Ok(n) => break assert_eq!(n, bytes as u64),
            Err(ClientError::LimitExceeded(e)) if Instant::now() < deadline => {
                tracing::debug!(error = %e, "hung-up calls not yet gone");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("the member's put after it hung up: {e}"),
        }
    }
}

/// A member that opens unary puts, each stating a message of almost the agent's 8 MiB limit and
/// holding back its last byte, holds at most `MAX_RECEIVING_PER_HOLDER` (256 MiB) of the agent's
/// memory: the calls past it fail `limit-exceeded` at once, while another member's put, larger
/// than what is left of the first one's share, is served at once; the first member's share comes
/// back as it hangs up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn puts_that_stall_before_their_last_byte_hold_a_bounded_share_of_an_agents_memory() -> anyhow::Result<()> {
    subscribe();
    let cluster = Cluster::start(ClusterConfig::new(1, 20e6, "varys").with_tls()).await?;
    let greedy = Subject::Client { name: "greedy".into() };
    let cfg = identity(&cluster, &greedy)?;
    let channel = agent_channel(&cluster, &greedy).await?;
    const CALLS: usize = 64;
    let len = coflow_agent::MAX_MESSAGE_BYTES as u32 - 64;
    let block = hyper::body::Bytes::from(vec![0x7a; 1 << 20]);
    let before = resident();
    let started = Instant::now();
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..CALLS {
        let body = tonic::body::Body::new(Stalled::new(len, &block));
        calls.spawn(raw_call(channel.clone(), cluster.agent_url(0), "coflow.v1.Agent/Put", body));
    }
    let fit = coflow_proto::MAX_RECEIVING_PER_HOLDER / len as usize;
    let mut refused = 0;
    while refused < CALLS - fit {
        let Ok(Some(answer)) = tokio::time::timeout(Duration::from_secs(10), calls.join_next()).await else {
            panic!("{refused} of {CALLS} stalled puts refused after {:?}", started.elapsed());
        };
        let (status, kind) = answer??;
        assert_eq!((status.as_str(), kind.as_str()), ("8", "limit-exceeded"), "a stalled put's answer");
        refused += 1;
    }
    let took = started.elapsed();
    // What the process grew by, for the output only: tests running beside this one grow it too.
    let held = resident().saturating_sub(before);

    // Another member's unary put, larger than what the first member's share has left.
    let other = Subject::Client { name: "other".into() };
    let owner = Client::connect(identity(&cluster, &other)?).await?;
    let c = owner.register(1, CoflowOptions::default()).await?;
    let mut agent = pb::agent_client::AgentClient::new(agent_channel(&cluster, &other).await?)
        .max_encoding_message_size(coflow_agent::MAX_MESSAGE_BYTES);
    let piece = content(5, 6 << 20);
    let t = Instant::now();
    let source = Some(pb::put_request::Source::Content(piece.clone()));
    agent.put(pb::PutRequest { coflow_id: c.0, data_id: "p".into(), source }).await?;
    assert!(t.elapsed() < Duration::from_secs(1), "another member's put took {:?}", t.elapsed());
    assert!(owner.get(c, "p").await? == piece, "another member's piece");
    calls.abort_all();
    while calls.join_next().await.is_some() {}
    let mine = Client::connect(cfg).await?;
    let own = mine.register(1, CoflowOptions::default()).await?;
    put_after_hanging_up(&mine, own, 4 << 20).await;
    println!("{refused} of {CALLS} stalled puts refused within {took:?}; the process grew by {} MiB", held >> 20);
    cluster.shutdown().await;
    Ok(())
}

/// A gRPC request body that never sends a byte.
struct Silent;

impl tonic::codegen::Body for Silent {
    type Data = hyper::body::Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        std::task::Poll::Pending
    }
}

/// A member that opens unary puts and health checks and never sends their message (each would
/// hold its stream's state for as long as the member keeps it open) keeps at most
/// `MAX_OPEN_REQUESTS_PER_HOLDER` (4,096) of them open, over connections of
/// `MAX_CALLS_PER_CONNECTION` calls each: the calls past it fail `limit-exceeded` at once,
/// another member's put is served at once, and the member's own calls are served again once it
/// hangs up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_whose_request_never_comes_are_bounded_per_member() -> anyhow::Result<()> {
    subscribe();
    let cluster = Cluster::start(ClusterConfig::new(1, 20e6, "varys").with_tls()).await?;
    let silent = Subject::Client { name: "silent".into() };
    let cfg = identity(&cluster, &silent)?;
    let calls = coflow_proto::MAX_OPEN_REQUESTS_PER_HOLDER + 500;
    let per_connection = coflow_proto::MAX_CALLS_PER_CONNECTION as usize;
    let mut channels = Vec::new();
    for _ in 0..calls.div_ceil(per_connection) {
        channels.push(agent_channel(&cluster, &silent).await?);
    }
    let started = Instant::now();
    let mut open = tokio::task::JoinSet::new();
    for i in 0..calls {
        // Puts, and health checks, which the agent's listener counts alike.
        let path = if i % 2 == 0 { "coflow.v1.Agent/Put" } else { "grpc.health.v1.Health/Check" };
        let channel = channels[i / per_connection].clone();
        open.spawn(raw_call(channel, cluster.agent_url(0), path, tonic::body::Body::new(Silent)));
    }
    let mut refused = 0;
    while refused < calls - coflow_proto::MAX_OPEN_REQUESTS_PER_HOLDER {
        let Ok(Some(answer)) = tokio::time::timeout(Duration::from_secs(10), open.join_next()).await else {
            panic!("{refused} of {calls} silent calls refused after {:?}", started.elapsed());
        };
        assert_eq!(answer??.1, "limit-exceeded", "a silent call's answer");
        refused += 1;
    }
    let took = started.elapsed();
    let other = Subject::Client { name: "other".into() };
    let owner = Client::connect(identity(&cluster, &other)?).await?;
    let c = owner.register(1, CoflowOptions::default()).await?;
    let t = Instant::now();
    owner.put(c, "p", vec![3; 1000]).await?;
    assert!(t.elapsed() < Duration::from_secs(1), "another member's put took {:?}", t.elapsed());
    open.abort_all();
    while open.join_next().await.is_some() {}
    let mine = Client::connect(cfg).await?;
    let own = mine.register(1, CoflowOptions::default()).await?;
    put_after_hanging_up(&mine, own, 1000).await;
    println!("{refused} of {calls} silent calls refused within {took:?}");
    cluster.shutdown().await;
    Ok(())
}

/// A client that reads a small coflow's piece slowly (2 MB/s, a tenth of its ports' rate) holds
/// back its own flow, not those it shares ports with. Under `varys` its coflow comes first (the
/// smaller bottleneck), and a policy that gave its flow the whole of its ports would leave a
/// larger coflow between the same two machines waiting for the slow reader, its sender idle
/// meanwhile (its 24 MiB then took 4.9 s, against 1.3 s alone). The coordinator instead gives a
/// flow whose receiver lists it held back what its client reads, with headroom, and the policy
/// shares the rest: the larger coflow's get, read promptly, ends within 3 s, and both arrive
/// exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_reader_holds_back_only_its_own_flow() -> anyhow::Result<()> {
    subscribe();
    let cluster = Cluster::start(ClusterConfig::new(2, 20e6, "varys")).await?;
    let c = cluster.client(0).await?;
    let (small, large) =
        (c.register(1, CoflowOptions::default()).await?, c.register(1, CoflowOptions::default()).await?);
    let (small_bytes, large_bytes) = (content(4, 12 << 20), content(5, 24 << 20));
    c.put(small, "s", small_bytes.clone()).await?;
    c.put(large, "l", large_bytes.clone()).await?;
    let (slow, prompt) = (cluster.client(1).await?, cluster.client(1).await?);
    let read = read_at(slow.get_chunks(small, "s").await?, 2e6);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let asked = Instant::now();
    let got = prompt.get(large, "l").await?;
    let took = asked.elapsed();
    assert!(got == large_bytes, "the prompt reader got its bytes exactly");
    let st = c.status().await?;
    let held = st.coflows.iter().flat_map(|c| &c.flows).filter(|f| f.reader_limited).count();
    let got = read.await??;
    assert!(got == small_bytes, "the slow reader got its bytes exactly");
    assert!(took < Duration::from_secs(3), "the larger coflow, read promptly, waited for the slow reader: {took:?}");
    assert_eq!(held, 1, "status shows the slow reader's flow held back by its reader");
    cluster.shutdown().await;
    Ok(())
}

/// A client that takes its get's messages slower than they come (one each 20 ms, while its flow
/// sends a millisecond's worth, 20 KB, at a time) gets the blocks that waited for it in one
/// message, up to 256 KiB: its messages grow instead of its reading falling to a block per message, and its bytes
/// arrive exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_takes_messages_slowly_gets_bigger_ones() -> anyhow::Result<()> {
    subscribe();
    let cluster = Cluster::start(ClusterConfig::new(2, 20e6, "varys")).await?;
    let c = cluster.client(0).await?;
    let coflow = c.register(1, CoflowOptions::default()).await?;
    let piece = content(6, 8 << 20);
    c.put(coflow, "p", piece.clone()).await?;
    let mut chunks = cluster.client(1).await?.get_chunks(coflow, "p").await?;
    let (mut got, mut largest) = (Vec::new(), 0);
    while let Some(chunk) = chunks.next().await? {
        largest = largest.max(chunk.len());
        got.extend_from_slice(&chunk);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(got == piece, "the bytes arrive exactly");
    // Up to 256 KiB, and one 32 KiB block more.
    assert!((64 << 10..=288 << 10).contains(&largest), "the largest message held {largest} bytes");
    cluster.shutdown().await;
    Ok(())
}
