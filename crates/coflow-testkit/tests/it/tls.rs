//! Identity: a TLS cluster moves exact bytes; plaintext peers, peers signed by another CA and
//! callers whose certificate's role does not fit are refused (and logged once per peer); in
//! token mode a machine's session guards it against other registrations and heartbeats.

use std::path::{Path, PathBuf};
use std::time::Duration;

use coflow_client::{Client, ClientConfig, ClientError, CoflowOptions};
use coflow_proto::certs::{CertAuthority, Subject};
use coflow_proto::pb::coordinator_client::CoordinatorClient;
use coflow_proto::{Security, TlsContext, TokenAttach, pb};
use coflow_testkit::{Cluster, ClusterConfig, files};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::{content, shuffle, subscribe};

const RATE: f64 = 50_000_000.0;

/// A directory with a second CA and, signed by it, a client `testkit` and agents 0..3, under
/// the same names as the cluster's own.
fn other_ca(name: &str) -> anyhow::Result<PathBuf> {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("coflow-other-ca-{name}-{}", std::process::id()));
    let ca = CertAuthority::generate()?;
    ca.write(&dir, true)?;
    let host = vec!["127.0.0.1".to_string()];
    let mut subjects = vec![Subject::Client { name: "testkit".into() }];
    subjects.extend((0..3).map(|machine| Subject::Agent { machine, hosts: host.clone() }));
    for s in subjects {
        ca.issue(&s)?.write(&dir, &s.file_stem(), true)?;
    }
    Ok(dir)
}

/// A raw coordinator client: the token attached in token mode, nothing with TLS.
type Raw = CoordinatorClient<tonic::service::interceptor::InterceptedService<tonic::transport::Channel, TokenAttach>>;

/// A raw coordinator client under the identity `stem` of the certificates in `dir`, trusting
/// the cluster's CA.
async fn raw(cluster: &Cluster, dir: &Path, stem: &str) -> anyhow::Result<Raw> {
    let mut f = files(dir, stem);
    f.ca = cluster.tls_dir().expect("a TLS cluster").join("ca.crt");
    let sec = Security::Tls(TlsContext::load(&f)?);
    let channel = sec.endpoint(&cluster.coordinator_url()).map_err(anyhow::Error::msg)?.connect_lazy();
    Ok(CoordinatorClient::with_interceptor(channel, TokenAttach::new(None)))
}

fn kind(s: &tonic::Status) -> &str {
    s.metadata().get("coflow-error").and_then(|v| v.to_str().ok()).unwrap_or("")
}

fn assert_denied<T: std::fmt::Debug>(r: Result<T, tonic::Status>, what: &str) {
    let s = r.expect_err(what);
    assert_eq!(s.code(), tonic::Code::PermissionDenied, "{what}: {s:?}");
    assert_eq!(kind(&s), "permission-denied", "{what}: {s:?}");
}

fn register_agent(machine_id: u32, session: u64) -> pb::RegisterAgentRequest {
    pb::RegisterAgentRequest {
        machine_id,
        data_addr: "127.0.0.1:9".into(),
        port_rate_bps: 1e6,
        session,
        ..Default::default()
    }
}

/// An open agent session: what to send on it (the sender), and what the coordinator sends.
type Session = (tokio::sync::mpsc::Sender<pb::AgentBatch>, tonic::Streaming<pb::CoordinatorBatch>);

/// Opens an agent session for `machine_id` under `session`, its first batch carrying `messages`.
async fn open(
    c: &mut Raw,
    machine_id: u32,
    session: u64,
    messages: Vec<pb::AgentMessage>,
) -> Result<Session, tonic::Status> {
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    tx.send(pb::AgentBatch { machine_id, session, messages }).await.expect("open");
    let inbound = c.agent_session(tokio_stream::wrappers::ReceiverStream::new(rx)).await?.into_inner();
    Ok((tx, inbound))
}

fn heartbeat(machine_id: u32) -> pb::AgentMessage {
    let hb = pb::HeartbeatRequest { machine_id, ..Default::default() };
    pb::AgentMessage { request_id: 0, body: Some(pb::agent_message::Body::Heartbeat(hb)) }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_shuffle_delivers_exactly_the_bytes_put() -> anyhow::Result<()> {
    subscribe();
    let cluster = Cluster::start(ClusterConfig::new(4, RATE, "varys").with_tls()).await?;
    assert!(cluster.coordinator_url().starts_with("https://"));
    shuffle(&cluster, "tls-shuffle", (2, 2), (150_000, 33_333)).await?;
    cluster.shutdown().await;
    Ok(())
}

/// Over TLS the data plane's bounds hold against the right peers: three hundred connections that
/// never start their handshake take none of `max_data_connections`, so a get still goes
/// through, and are closed at the idle timeout (2 s in the testkit), not later; agents' own
/// connections do fill the source, which then says busy inside the handshake (the get fails
/// `limit-exceeded`, not a handshake error).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tls_only_agents_fill_a_source_and_a_silent_peer_is_closed_at_the_idle_timeout() -> anyhow::Result<()> {
    subscribe();
    let mut cfg = ClusterConfig::new(2, RATE, "varys").with_tls();
    cfg.agent.max_data_connections = 2;
    let idle_ms = cfg.agent.data_idle_timeout_ms;
    let cluster = Cluster::start(cfg).await?;
    let c = cluster.client(0).await?;
    let coflow = c.register(1, CoflowOptions::default()).await?;
    c.put(coflow, "a", content(1, 300_000)).await?;
    let addr = c.status().await?.agents.iter().find(|a| a.machine_id == 0).unwrap().data_addr.clone();
    let r = cluster.client(1).await?;
    let Security::Tls(agent) = cluster.agent_security(1)? else { unreachable!("a TLS cluster") };
    let mut held = Vec::new();
    for _ in 0..2 {
        let sock = tokio::net::TcpStream::connect(&addr).await?;
        held.push(coflow_proto::connect_agent(&agent, sock, 0).await.map_err(anyhow::Error::msg)?);
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let e = r.get(coflow, "a").await.map(|b| b.len()).unwrap_err();
    assert!(matches!(&e, ClientError::LimitExceeded(m) if m.contains("max_data_connections")), "{e}");
    drop(held);
    // The silent peers come from another address than the agents (the other loopback one).
    let mut silent = Vec::new();
    for _ in 0..300 {
        let sock = tokio::net::TcpSocket::new_v4()?;
        sock.bind("127.0.0.2:0".parse()?)?;
        silent.push(sock.connect(addr.parse()?).await?);
    }
    let t = std::time::Instant::now();
    loop {
        match r.get(coflow, "a").await {
            Ok(got) => break assert!(got == content(1, 300_000), "a get past three hundred silent peers"),
            // The source may not have seen the agents' connections close yet.
            Err(ClientError::LimitExceeded(_)) if t.elapsed() < Duration::from_secs(1) => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("a get past three hundred silent peers: {e}"),
        }
    }
    let served = t.elapsed();
    assert!(
        served < Duration::from_millis(idle_ms / 2),
        "served {served:?} after the silent peers came, not once they left"
    );
    for mut s in silent {
        let mut b = [0u8; 16];
        let n = tokio::time::timeout(Duration::from_secs(8), s.read(&mut b)).await?.unwrap_or(0);
        assert_eq!(n, 0, "a peer without a handshake gets nothing but the close");
    }
    let waited = t.elapsed();
    assert!(waited < Duration::from_millis(idle_ms + 1500), "closed after {waited:?}, idle timeout {idle_ms} ms");
    c.unregister(coflow).await?;
    cluster.shutdown().await;
    Ok(())
}

/// The soft limit on this process's open files (`/proc/self/limits`), if it can be read.
fn open_files_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

/// A peer without a certificate holds at most `UNPROVEN_PER_ADDRESS` connections waiting for
/// their TLS handshake at the coordinator's gRPC listener: past that its connections are closed
/// at once, while a member from another address registers and reads its status all along.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_without_a_certificate_holds_a_bounded_number_of_grpc_handshakes() -> anyhow::Result<()> {
    subscribe();
    let bound = coflow_proto::UNPROVEN_PER_ADDRESS;
    // Both ends of every connection live in this process.
    if open_files_limit().is_some_and(|n| n < 2 * bound as u64 + 512) {
        eprintln!("skipped: this process may open fewer than {} files", 2 * bound + 512);
        return Ok(());
    }
    let cluster = Cluster::start(ClusterConfig::new(1, RATE, "varys").with_tls()).await?;
    let mut silent = Vec::new();
    for _ in 0..bound + 8 {
        let sock = tokio::net::TcpSocket::new_v4()?;
        sock.bind("127.0.0.2:0".parse()?)?;
        silent.push(sock.connect(cluster.coordinator_addr).await?);
    }
    let c = cluster.client(0).await?;
    let t = std::time::Instant::now();
    let coflow = c.register(1, CoflowOptions::default()).await?;
    assert!(c.status().await?.coflows.iter().any(|x| x.coflow_id == coflow.0));
    assert!(t.elapsed() < Duration::from_secs(5), "served {:?} after the silent peers came", t.elapsed());
    // Well inside the handshake timeout (10 s): only those past the bound are closed yet.
    assert!(t.elapsed() < Duration::from_secs(5));
    let mut b = [0u8; 16];
    let closed = silent.iter_mut().filter(|s| matches!(s.try_read(&mut b), Ok(0))).count();
    assert_eq!(closed, 8, "the connections past the bound are closed at once, the others wait");
    c.unregister(coflow).await?;
    cluster.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn a_plaintext_client_is_refused_and_the_refusal_logged_once() -> anyhow::Result<()> {
    let (logs, _guard) = crate::Captured::warnings();
    let cluster = Cluster::start(ClusterConfig::new(1, RATE, "varys").with_tls()).await?;
    // The same cluster, asked in clear text: every try is refused.
    let plain = ClientConfig::new(
        format!("http://{}", cluster.coordinator_addr),
        format!("http://{}", cluster.agent_addrs[0]),
        cluster.token().clone(),
    );
    let plain = Client::connect(plain).await?;
    // Each is an unreachable coordinator, named by its URL, with what a TLS service needs.
    for _ in 0..4 {
        let e = plain.register(1, CoflowOptions::default()).await.unwrap_err();
        let ClientError::CoordinatorUnreachable(m) = &e else { panic!("{e:?}") };
        assert!(m.starts_with(&format!("http://{}", cluster.coordinator_addr)), "{m}");
        assert!(m.contains("if the service uses TLS") && m.contains("https://"), "{m}");
    }
    // The TLS client still works.
    cluster.client(0).await?.register(1, CoflowOptions::default()).await?;
    let text = logs.text();
    let refusals: Vec<&str> = text.lines().filter(|l| l.contains("refused a gRPC connection")).collect();
    assert_eq!(refusals.len(), 1, "one warning for four refused connections from one address:\n{text}");
    assert!(refusals[0].contains("WARN") && refusals[0].contains("not TLS"), "{}", refusals[0]);
    cluster.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn a_tls_client_of_a_token_cluster_hears_that_the_service_may_not_use_tls() -> anyhow::Result<()> {
    let tls = Cluster::start(ClusterConfig::new(1, RATE, "varys").with_tls()).await?;
    let plain = Cluster::start(ClusterConfig::new(1, RATE, "varys")).await?;
    let (coordinator, agent) =
        (format!("https://{}", plain.coordinator_addr), format!("https://{}", plain.agent_addrs[0]));
    let files = files(tls.tls_dir().expect("a TLS cluster"), "client-testkit");
    let client = Client::connect(ClientConfig::tls(coordinator.clone(), agent, files)).await?;
    for _ in 0..3 {
        let e = client.register(1, CoflowOptions::default()).await.unwrap_err();
        let ClientError::CoordinatorUnreachable(m) = &e else { panic!("{e:?}") };
        assert!(m.starts_with(&coordinator) && m.contains("without TLS") && m.contains("http://"), "{m}");
    }
    // A service that is not there at all is not taken for one of the other mode.
    let gone = plain.coordinator_addr;
    plain.shutdown().await;
    let cfg = ClientConfig::new(format!("http://{gone}"), format!("http://{gone}"), tls.token().clone());
    let e = Client::connect(cfg).await?.register(1, CoflowOptions::default()).await.unwrap_err();
    let ClientError::CoordinatorUnreachable(m) = &e else { panic!("{e:?}") };
    assert!(!m.contains("TLS"), "{m}");
    tls.shutdown().await;
    Ok(())
}

/// A client that dials a host name the service's certificate does not name hears that, and
/// how to mend it, as a refusal (no retry mends it); the service's log names the alert.
#[tokio::test]
async fn a_host_name_the_certificate_does_not_name_is_said_on_both_sides() -> anyhow::Result<()> {
    let (logs, _guard) = crate::Captured::warnings();
    let cluster = Cluster::start(ClusterConfig::new(1, RATE, "varys").with_tls()).await?;
    let port = cluster.coordinator_addr.port();
    let mut cfg = cluster.client_config(0);
    cfg.coordinator = format!("https://localhost:{port}");
    let e = Client::connect(cfg).await?.register(1, CoflowOptions::default()).await.unwrap_err();
    let ClientError::Unauthenticated(m) = &e else { panic!("{e:?}") };
    assert!(m.starts_with(&format!("https://localhost:{port}: ")), "{m}");
    assert!(m.contains("does not name the host") && m.contains("coflow certs issue --coordinator"), "{m}");
    cluster.shutdown().await;
    let text = logs.text();
    assert!(
        text.contains("refused this member's certificate") && text.contains("fatal alert: BadCertificate"),
        "{text}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_and_agents_signed_by_another_ca_are_refused() -> anyhow::Result<()> {
    subscribe();
    let cluster = Cluster::start(ClusterConfig::new(2, RATE, "varys").with_tls()).await?;
    let other = other_ca("refused")?;
    let real_ca = cluster.tls_dir().unwrap().join("ca.crt");

    // A client with a certificate of the other CA, trusting either CA: every call fails with a
    // typed error. With TLS 1.3 the service refuses the certificate after the client's side of
    // the handshake, so a call hears its alert (`Unauthenticated`) or only the connection
    // closing under it (`CoordinatorUnreachable` or `AgentUnreachable`, as the call went, which
    // says the certificate may be why).
    // Trusting the real CA, its own certificate does not verify, and the client does not start.
    let f = coflow_client::TlsFiles { ca: real_ca.clone(), ..files(&other, "client-testkit") };
    let e = Client::connect(ClientConfig::tls(cluster.coordinator_url(), cluster.agent_url(0), f)).await.unwrap_err();
    assert!(e.to_string().contains("not signed by the CA in"), "{e}");
    {
        let f = coflow_client::TlsFiles { ca: other.join("ca.crt"), ..files(&other, "client-testkit") };
        let c = Client::connect(ClientConfig::tls(cluster.coordinator_url(), cluster.agent_url(0), f)).await?;
        for _ in 0..4 {
            let e = c.register(1, CoflowOptions::default()).await.unwrap_err();
            assert!(matches!(e, ClientError::Unauthenticated(_) | ClientError::CoordinatorUnreachable(_)), "{e:?}");
            let e = c.put(coflow_client::CoflowId(1), "x", vec![1]).await.unwrap_err();
            assert!(matches!(e, ClientError::Unauthenticated(_) | ClientError::AgentUnreachable(_)), "{e:?}");
        }
    }

    // An agent of the other CA (machine 2, trusting the real CA) never joins.
    let dir =
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("coflow-foreign-agent-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut f = files(&other, "agent-2");
    f.ca = real_ca.clone();
    let acfg = coflow_agent::AgentConfig {
        machine: Some(2),
        coordinator: cluster.coordinator_url(),
        data_dir: dir.clone(),
        heartbeat_interval_ms: 50,
        ..Default::default()
    };
    let listeners = coflow_agent::AgentListeners {
        grpc: tokio::net::TcpListener::bind("127.0.0.1:0").await?,
        data: tokio::net::TcpListener::bind("127.0.0.1:0").await?,
        metrics: None,
    };
    let (stop, rx) = tokio::sync::oneshot::channel::<()>();
    // (Loaded unverified: `load` refuses a certificate its CA file did not sign.)
    let foreign = tokio::spawn(coflow_agent::run(acfg, TlsContext::load_unverified(&f)?, listeners, async move {
        let _ = rx.await;
    }));
    tokio::time::sleep(Duration::from_millis(800)).await;
    let st = cluster.client(0).await?.status().await?;
    assert!(st.agents.iter().all(|a| a.machine_id != 2), "a foreign agent registered: {:?}", st.agents);
    let _ = stop.send(());
    foreign.await??;

    // The data plane: a foreign agent, and a client of the cluster's own CA, fetching from agent
    // 0 get nothing.
    let c = cluster.client(0).await?;
    let coflow = c.register(1, CoflowOptions::default()).await?;
    c.put(coflow, "secret", vec![42; 1000]).await?;
    let data_addr = c.status().await?.agents.iter().find(|a| a.machine_id == 0).unwrap().data_addr.clone();
    let own = cluster.tls_dir().unwrap().to_path_buf();
    for (dir, stem) in [(&other, "agent-1"), (&own, "client-testkit")] {
        let mut f = files(dir, stem);
        f.ca = real_ca.clone();
        let ctx = TlsContext::load_unverified(&f)?;
        let sock = tokio::net::TcpStream::connect(&data_addr).await?;
        let got = match coflow_proto::connect_agent(&ctx, sock, 0).await {
            Err(_) => Vec::new(),
            Ok(mut s) => {
                let mut req = b"CFD5".to_vec();
                req.extend_from_slice(&0u16.to_be_bytes());
                req.extend_from_slice(&coflow.0.to_be_bytes());
                req.extend_from_slice(&1u64.to_be_bytes());
                req.extend_from_slice(&0u32.to_be_bytes());
                req.extend_from_slice(&[0; 16]);
                req.extend_from_slice(&6u16.to_be_bytes());
                req.extend_from_slice(b"secret");
                req.extend_from_slice(&0u64.to_be_bytes());
                req.extend_from_slice(&1000u64.to_be_bytes());
                req.push(0);
                let _ = s.write_all(&req).await;
                let _ = s.flush().await;
                let mut resp = Vec::new();
                let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut resp)).await;
                resp
            }
        };
        assert!(got.is_empty(), "{stem} of {} got {} bytes from the data plane", dir.display(), got.len());
    }
    // The cluster's own agents still move bytes.
    assert!(cluster.client(1).await?.get(coflow, "secret").await? == vec![42; 1000]);
    cluster.shutdown().await;
    let _ = std::fs::remove_dir_all(&other);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roles_bound_what_a_certificate_may_do() -> anyhow::Result<()> {
    subscribe();
    let cluster = Cluster::start(ClusterConfig::new(3, RATE, "varys").with_tls()).await?;
    let own = cluster.tls_dir().unwrap().to_path_buf();

    // A client certificate may not make agent calls.
    let mut client = raw(&cluster, &own, "client-testkit").await?;
    assert_denied(client.register_agent(register_agent(0, 0)).await, "client RegisterAgent");
    assert_denied(open(&mut client, 0, 0, vec![heartbeat(0)]).await, "client AgentSession");
    // The refusal names the call that was refused.
    let assign = client.assign_machine(pb::AssignMachineRequest { host: "h".into() }).await;
    let message = assign.as_ref().map(|_| ()).map_err(|s| s.message().to_string());
    assert_denied(assign, "client AssignMachine");
    assert!(message.is_err_and(|m| m.contains("may not be assigned a machine id")));

    // Agent 1's certificate may not register or open a session for machine 2 (or 0), nor open
    // machine 1's session without its live session id.
    let mut agent1 = raw(&cluster, &own, "agent-1").await?;
    assert_denied(agent1.register_agent(register_agent(2, 0)).await, "agent 1 registering machine 2");
    assert_denied(open(&mut agent1, 0, 0, vec![heartbeat(0)]).await, "agent 1 opening machine 0's session");
    assert_denied(open(&mut agent1, 1, 0, vec![heartbeat(1)]).await, "agent 1 without machine 1's session");
    // Inside its own session an agent may not announce for another machine: that message alone is
    // refused, by its request id.
    cluster.agent_security(5)?;
    let mut agent5 = raw(&cluster, &own, "agent-5").await?;
    let session = agent5.register_agent(register_agent(5, 0)).await?.into_inner().session;
    let put =
        pb::AnnouncePutRequest { coflow_id: 1, data_id: "x".into(), machine_id: 2, size: 1, ..Default::default() };
    let msg = pb::AgentMessage { request_id: 42, body: Some(pb::agent_message::Body::Put(put)) };
    let (_keep, mut inbound) = open(&mut agent5, 5, session, vec![msg]).await?;
    let refused = loop {
        let batch = inbound.message().await?.expect("the session stays open");
        if let Some(r) = batch.replies.into_iter().find(|r| r.request_id == 42) {
            break r;
        }
    };
    match refused.result {
        Some(pb::agent_reply::Result::Failure(f)) => {
            assert_eq!(f.kind, pb::ErrorKind::PermissionDenied as i32, "{f:?}");
            assert_eq!(f.code, tonic::Code::PermissionDenied as i32);
        }
        other => panic!("a put for machine 2 in machine 5's session was answered {other:?}"),
    }
    // ... nor use the coflow API, which the SDK reports as PermissionDenied.
    let f = files(&own, "agent-1");
    let as_agent = Client::connect(ClientConfig::tls(cluster.coordinator_url(), cluster.agent_url(1), f)).await?;
    let e = as_agent.register(1, CoflowOptions::default()).await.unwrap_err();
    assert!(matches!(e, ClientError::PermissionDenied(_)), "{e}");
    let e = as_agent.put(coflow_client::CoflowId(1), "x", vec![1]).await.unwrap_err();
    assert!(matches!(e, ClientError::PermissionDenied(_)), "{e}");
    // The SDK will not start with the coordinator's certificate, a server's only.
    let f = files(&own, "coordinator");
    let e = Client::connect(ClientConfig::tls(cluster.coordinator_url(), cluster.agent_url(1), f)).await.unwrap_err();
    assert!(matches!(&e, ClientError::Invalid(m) if m.contains("coflow://coordinator, a server's only")), "{e}");

    // The admin may not act for an agent; the coordinator's certificate, a server's only, is
    // refused at the handshake as a client.
    coflow_proto::certs::issue(&own, &Subject::Admin, true)?;
    let mut admin = raw(&cluster, &own, "admin").await?;
    assert_denied(admin.register_agent(register_agent(0, 0)).await, "admin RegisterAgent");
    assert_denied(open(&mut admin, 0, 0, vec![heartbeat(0)]).await, "admin AgentSession");
    let mut coordinator = raw(&cluster, &own, "coordinator").await?;
    let s = coordinator.status(pb::StatusRequest::default()).await.expect_err("a server's certificate as a client");
    assert_eq!(kind(&s), "", "refused at the handshake, before any call: {s:?}");

    // Every machine of the cluster is still registered and alive.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let st = cluster.client(0).await?.status().await?;
    assert_eq!(st.agents.iter().filter(|a| a.alive && a.machine_id < 3).count(), 3, "{:?}", st.agents);
    cluster.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_token_mode_another_session_cannot_take_over_or_keep_alive_a_machine() -> anyhow::Result<()> {
    subscribe();
    let mut cluster = Cluster::start(ClusterConfig::new(3, RATE, "varys")).await?;
    let c = cluster.client(0).await?;
    let coflow = c.register(1, CoflowOptions::default()).await?;
    let piece = content(11, 500_000);
    cluster.client(1).await?.put(coflow, "p", piece.clone()).await?;

    let channel = tonic::transport::Endpoint::from_shared(cluster.coordinator_url())?.connect().await?;
    let mut rogue: Raw = CoordinatorClient::with_interceptor(channel, TokenAttach::new(Some(cluster.token().clone())));
    // A second registration of live machine 1 is refused, and so is its session under no session
    // id (which would take over its rates and keep it alive).
    assert_denied(rogue.register_agent(register_agent(1, 0)).await, "re-registering live machine 1");
    assert_denied(open(&mut rogue, 1, 0, vec![heartbeat(1)]).await, "taking over the session");
    // The machine kept its piece.
    assert!(cluster.client(2).await?.get(coflow, "p").await? == piece, "machine 1's piece is gone");

    // A stopped agent is not kept alive by someone else's heartbeats.
    cluster.kill_agent(1).await;
    for _ in 0..30 {
        let _ = open(&mut rogue, 1, 0, vec![heartbeat(1)]).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let st = c.status().await?;
    let m1 = st.agents.iter().find(|a| a.machine_id == 1).expect("machine 1 known");
    assert!(!m1.alive, "machine 1 kept alive by another session's heartbeats");
    // Once it is dead, a new registration is accepted (a restarted agent).
    let reg = rogue.register_agent(register_agent(1, 0)).await?.into_inner();
    assert_ne!(reg.session, 0);
    cluster.shutdown().await;
    Ok(())
}

/// A client with a valid certificate cannot hold the name of another client's piece: while
/// `mallory` keeps putting `x` into each of `testkit`'s fresh coflows at the owner's agent
/// (refused by the coordinator, but each put pending at the agent for a round trip), the
/// owner's first put of `x` there goes through every time, and its get reads the owner's bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stranger_s_puts_of_a_name_do_not_refuse_the_owner_s() -> anyhow::Result<()> {
    subscribe();
    let cluster = Cluster::start(ClusterConfig::new(2, RATE, "varys").with_tls()).await?;
    let own = cluster.tls_dir().unwrap().to_path_buf();
    coflow_proto::certs::issue(&own, &Subject::Client { name: "mallory".into() }, true)?;
    let mallory = std::sync::Arc::new(
        Client::connect(ClientConfig::tls(
            cluster.coordinator_url(),
            cluster.agent_url(0),
            files(&own, "client-mallory"),
        ))
        .await?,
    );
    let owner = cluster.client(0).await?;
    let reader = cluster.client(1).await?;
    for round in 0..20u8 {
        let coflow = owner.register(1, CoflowOptions::default()).await?;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let squatters: Vec<_> = (0..4)
            .map(|_| {
                let (mallory, stop) = (mallory.clone(), stop.clone());
                tokio::spawn(async move {
                    let mut refused = 0;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        let e = mallory.put(coflow, "x", vec![0xBA; 64]).await.expect_err("not mallory's coflow");
                        assert!(
                            matches!(e, ClientError::PermissionDenied(_) | ClientError::DuplicateDataId { .. }),
                            "{e}"
                        );
                        refused += 1;
                    }
                    refused
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(20)).await;
        let bytes = vec![round; 1000];
        owner.put(coflow, "x", bytes.clone()).await.map_err(|e| anyhow::anyhow!("round {round}: {e}"))?;
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let mut refused = 0;
        for s in squatters {
            refused += s.await?;
        }
        assert!(refused > 0, "round {round}: mallory's puts ran beside the owner's");
        assert_eq!(reader.get(coflow, "x").await?, bytes, "round {round}");
        owner.unregister(coflow).await?;
    }
    cluster.shutdown().await;
    Ok(())
}

/// A member that completes the TLS handshake at a gRPC port and then says nothing (no HTTP/2
/// preface) is closed within the handshake timeout, as one that never starts its handshake is,
/// rather than held for good; calls on other connections go on meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_silent_after_its_tls_handshake_is_closed_at_the_handshake_timeout() -> anyhow::Result<()> {
    subscribe();
    let cluster = Cluster::start(ClusterConfig::new(2, RATE, "varys").with_tls()).await?;
    let Security::Tls(agent1) = cluster.agent_security(1)? else { unreachable!("a TLS cluster") };
    let grpc = cluster.agent_url(0).trim_start_matches("https://").to_string();
    let t = std::time::Instant::now();
    let mut silent = Vec::new();
    for _ in 0..3 {
        let sock = tokio::net::TcpStream::connect(&grpc).await?;
        silent.push(coflow_proto::connect_agent(&agent1, sock, 0).await.map_err(anyhow::Error::msg)?);
    }
    let c = cluster.client(0).await?;
    let coflow = c.register(1, CoflowOptions::default()).await?;
    c.put(coflow, "a", content(1, 1000)).await?;
    assert_eq!(cluster.client(1).await?.get(coflow, "a").await?, content(1, 1000));
    let limit = coflow_proto::HANDSHAKE_TIMEOUT + Duration::from_secs(3);
    for mut s in silent {
        let mut b = [0u8; 16];
        let n = tokio::time::timeout(limit, s.read(&mut b)).await?.unwrap_or(0);
        assert_eq!(n, 0, "a member silent after its handshake gets nothing but the close");
    }
    assert!(t.elapsed() < limit, "closed after {:?}", t.elapsed());
    cluster.shutdown().await;
    Ok(())
}
