//! Members with valid certificates doing what they must not, and faults they must survive,
//! against the built binaries over mutual TLS: requests built to cost the coordinator memory,
//! logs on a full disk, special files put by path, and an old agent process resumed beside its
//! replacement.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use coflow_client::{ClientError, CoflowId, CoflowOptions};
use coflow_proto::pb::coordinator_client::CoordinatorClient;
use coflow_proto::{Security, TlsContext, TokenAttach, pb};
use coflow_testkit::content;

use crate::procs::{Procs, Spec};

/// A coordinator client under the certificate `stem` of the cluster.
async fn raw(
    procs: &Procs,
    stem: &str,
) -> CoordinatorClient<tonic::service::interceptor::InterceptedService<tonic::transport::Channel, TokenAttach>> {
    let ctx = TlsContext::load(&coflow_testkit::files(&procs.dir.join("certs"), stem)).unwrap();
    let channel = Security::Tls(ctx).endpoint(&procs.coordinator_url).unwrap().connect().await.unwrap();
    CoordinatorClient::with_interceptor(channel, TokenAttach::new(None)).max_encoding_message_size(64 << 20)
}

fn kind(s: &tonic::Status) -> &str {
    s.metadata().get("coflow-error").and_then(|v| v.to_str().ok()).unwrap_or("")
}

/// Registrations of millions of parent ids, and an agent's session batch of millions of empty
/// messages, each just under the 4 MiB message limit, ten of each: refused with
/// `limit-exceeded`, and the coordinator's peak memory grows by less than 40 MB.
#[test]
fn requests_of_millions_of_entries_are_refused_before_they_cost_memory() {
    let procs = Procs::start("abuse-memory", Spec::new(1));
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        procs.ready().await;
        let before = procs.coordinator.peak_rss();
        let mut client = raw(&procs, "client-testkit").await;
        for _ in 0..10 {
            let options = pb::CoflowOptions { parents: vec![1; 4_000_000], ..Default::default() };
            let req = pb::RegisterRequest { num_flows: 1, options: Some(options), ..Default::default() };
            let s = client.register(req).await.expect_err("refused");
            assert_eq!(kind(&s), "limit-exceeded", "{:?}: {}", s.code(), s.message());
        }
        let mut agent = raw(&procs, "agent-0").await;
        let reg = pb::RegisterAgentRequest {
            machine_id: 0,
            data_addr: "127.0.0.1:9".into(),
            port_rate_bps: 1e6,
            // Later than the running agent's start: it takes the machine over.
            incarnation: u64::MAX,
            session: 0,
            ..Default::default()
        };
        let session = agent.register_agent(reg).await.unwrap().into_inner().session;
        for _ in 0..10 {
            let batch =
                pb::AgentBatch { machine_id: 0, session, messages: vec![pb::AgentMessage::default(); 2_000_000] };
            let s = match agent.agent_session(tokio_stream::iter([batch])).await {
                Err(s) => s,
                Ok(mut stream) => match stream.get_mut().message().await {
                    Err(s) => s,
                    Ok(m) => panic!(
                        "a batch of 2,000,000 messages was answered ({} replies)",
                        m.map_or(0, |b| b.replies.len())
                    ),
                },
            };
            assert_eq!(kind(&s), "limit-exceeded", "{:?}: {}", s.code(), s.message());
        }
        let after = procs.coordinator.peak_rss();
        eprintln!("coordinator peak RSS {:.1} MB before, {:.1} MB after", before as f64 / 1e6, after as f64 / 1e6);
        assert!(after - before < 40_000_000, "the refused requests cost {} bytes", after - before);
    });
}

/// Every process's log on a full disk (`/dev/full`, at debug level, so every step logs): the
/// cluster runs, and every get ends as it would with a log that can be written: the exact bytes,
/// or its own error (`data-lost` for a changed file, `no-such-data`, `unknown-coflow`), never OK
/// with fewer bytes, never another error.
#[test]
fn a_full_log_disk_never_changes_an_answer() {
    if std::fs::OpenOptions::new().write(true).open("/dev/full").is_err() {
        eprintln!("skipping: no /dev/full");
        return;
    }
    let full = || Stdio::from(std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap());
    let spec = Spec { log: full, rust_log: Some("debug"), ..Spec::new(2) };
    let procs = Procs::start("abuse-full-disk", spec);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        procs.ready().await;
        let (c0, c1) = (procs.client(0).await, procs.client(1).await);
        let coflow = c0.register(2, CoflowOptions::default()).await.unwrap();
        let piece = content(41, 500_000);
        c0.put(coflow, "ok", piece.clone()).await.unwrap();
        let (data, rel) = procs.client_files(0);
        std::fs::write(data.join("seg"), content(42, 300_000)).unwrap();
        c0.put_file(coflow, "seg", &format!("{rel}seg"), 0, 300_000).await.unwrap();
        // The file changes after its put: every get of it is data-lost.
        std::fs::write(data.join("seg"), content(43, 300_000)).unwrap();
        for round in 0..10 {
            for (who, c) in [("local", &c0), ("remote", &c1)] {
                assert!(c.get(coflow, "ok").await.unwrap() == piece, "{who} get of round {round}");
                let e = c.get(coflow, "seg").await.unwrap_err();
                assert!(matches!(e, ClientError::DataLost(_)), "{who} get of a changed file, round {round}: {e}");
                let e = c.get(coflow, "missing").await.unwrap_err();
                assert!(matches!(e, ClientError::NoSuchData { .. }), "{who} get of no piece, round {round}: {e}");
                let e = c.get(CoflowId(7), "ok").await.unwrap_err();
                assert!(matches!(e, ClientError::UnknownCoflow(_)), "{who} get of no coflow, round {round}: {e}");
            }
        }
    });
}

/// Puts of 600 FIFOs, a socket and (with root) a character device in the data directory, all
/// at once: each is refused `invalid` at once (no thread waits on a special file), and a put
/// and a get of a piece made meanwhile are served in their normal time.
#[test]
fn special_files_are_refused_at_once_and_other_puts_and_gets_go_on() {
    let procs = Procs::start("abuse-special", Spec::new(2));
    let (data, rel) = procs.client_files(0);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        procs.ready().await;
        let fifos: Vec<String> = (0..600).map(|i| format!("fifo-{i}")).collect();
        assert!(Command::new("mkfifo").args(&fifos).current_dir(&data).status().unwrap().success());
        let _socket = std::os::unix::net::UnixListener::bind(data.join("socket")).unwrap();
        let mut special = fifos.clone();
        special.push("socket".into());
        match Command::new("mknod").args(["device", "c", "1", "3"]).current_dir(&data).output() {
            Ok(out) if out.status.success() => special.push("device".into()),
            _ => eprintln!("skipping the device: mknod needs root"),
        }
        let (c0, c1) = (procs.client(0).await, procs.client(1).await);
        let coflow = c0.register(0, CoflowOptions::default()).await.unwrap();
        let started = Instant::now();
        let mut puts = tokio::task::JoinSet::new();
        for name in special.clone() {
            let c = c0.clone();
            let path = format!("{rel}{name}");
            puts.spawn(async move { (c.put_file(coflow, &name, &path, 0, 1).await, name) });
        }
        // Meanwhile, a piece is put and got as usual.
        let piece = content(44, 1_000_000);
        tokio::time::timeout(Duration::from_secs(3), async {
            c0.put(coflow, "normal", piece.clone()).await.unwrap();
            assert!(c1.get(coflow, "normal").await.unwrap() == piece);
        })
        .await
        .expect("a put and a get beside the special files took over 3 s");
        while let Some(r) = puts.join_next().await {
            let (r, name) = r.unwrap();
            // A socket cannot even be opened (ENXIO); a FIFO and a device open, and are not regular.
            assert!(
                matches!(&r, Err(ClientError::Invalid(m)) if name == "socket" || m.contains("regular")),
                "{name}: {r:?}"
            );
        }
        let took = started.elapsed();
        eprintln!("{} special files refused in {took:.2?}", special.len());
        assert!(took < Duration::from_secs(5), "refusing {} special files took {took:?}", special.len());
    });
}

/// Where every process of [`an_old_agent_resumed_beside_its_replacement_settles_at_once`] logs.
fn replaced_log() -> Stdio {
    let file = std::fs::OpenOptions::new().create(true).append(true).open(crate::tmp("abuse-replaced.log"));
    Stdio::from(file.unwrap())
}

/// An agent process stopped (`SIGSTOP`) and replaced by a new process for its machine, then
/// continued: the old one is told to stop as soon as it asks to register again, and does (it
/// exits non-zero, saying why), the machine stays with its replacement (never back to the old
/// process's address), whose pieces are served exactly.
#[test]
fn an_old_agent_resumed_beside_its_replacement_settles_at_once() {
    let _ = std::fs::remove_file(crate::tmp("abuse-replaced.log"));
    let mut procs = Procs::start("abuse-replaced", Spec { log: replaced_log, ..Spec::new(2) });
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        procs.ready().await;
        let c0 = procs.client(0).await;
        let coflow = c0.register(0, CoflowOptions::default()).await.unwrap();
        let old = &procs.agents[1];
        let old_addr = machine_addr(&c0, 1).await;
        old.signal("STOP");
        let new = procs.start_agent(1, "data-1-new");
        let mut new_addr = old_addr.clone();
        let t = Instant::now();
        while new_addr == old_addr {
            assert!(t.elapsed() < Duration::from_secs(20), "the replacement did not take machine 1");
            tokio::time::sleep(Duration::from_millis(50)).await;
            new_addr = machine_addr(&c0, 1).await;
        }
        let c_new = procs.client_at(&new.1).await;
        let piece = content(45, 2_000_000);
        let put = loop {
            match c_new.put(coflow, "new", piece.clone()).await {
                Err(ClientError::AgentUnreachable(_) | ClientError::CoordinatorUnreachable(_))
                    if t.elapsed() < Duration::from_secs(20) =>
                {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                other => break other,
            }
        };
        assert_eq!(put.unwrap(), 2_000_000);
        old.signal("CONT");
        let resumed = Instant::now();
        // For 3 s after the old process resumes (30 heartbeats), machine 1 stays with the new one.
        while resumed.elapsed() < Duration::from_secs(3) {
            let st = c0.status().await.unwrap();
            let a = st.agents.iter().find(|a| a.machine_id == 1).expect("machine 1");
            assert!(a.alive && a.data_addr == new_addr, "machine 1 after the old process resumed: {a:?}");
            assert!(c0.get(coflow, "new").await.unwrap() == piece, "the new process's piece");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // The old process stopped, refused for good, within the servers' drain bound (5 s).
        let status = loop {
            if let Some(s) = procs.agents[1].0.try_wait().unwrap() {
                break s;
            }
            assert!(resumed.elapsed() < Duration::from_secs(6), "the old process still runs");
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        eprintln!("the old process exited {:.2?} after it resumed: {status}", resumed.elapsed());
        assert!(!status.success(), "the old process's exit: {status}");
        let log = std::fs::read_to_string(crate::tmp("abuse-replaced.log")).unwrap();
        let said = "error: refused by the coordinator: an agent process that started later holds this machine";
        assert!(log.contains(said), "the old process's last words are not in the log:\n{log}");
        drop(new);
    });
}

async fn machine_addr(c: &coflow_client::Client, m: u32) -> String {
    let st = c.status().await.unwrap();
    st.agents.iter().find(|a| a.machine_id == m && a.alive).map(|a| a.data_addr.clone()).unwrap_or_default()
}

/// `SIGHUP` (a closed terminal, an operator expecting a reload) leaves the coordinator and the
/// agents serving, where its default would end them without a word or a deregistration; `SIGTERM`
/// still stops them cleanly.
#[test]
fn sighup_leaves_the_services_serving() {
    let mut procs = Procs::start("abuse-hup", Spec::new(2));
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        procs.ready().await;
        procs.coordinator.signal("HUP");
        for a in &procs.agents {
            a.signal("HUP");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (c0, c1) = (procs.client(0).await, procs.client(1).await);
        let coflow = c0.register(1, CoflowOptions::default()).await.unwrap();
        c0.put(coflow, "p", content(61, 100_000)).await.unwrap();
        assert!(c1.get(coflow, "p").await.unwrap() == content(61, 100_000), "the piece after SIGHUP");
    });
    for p in std::iter::once(&mut procs.coordinator).chain(procs.agents.iter_mut()) {
        assert!(p.0.try_wait().unwrap().is_none(), "a service ended on SIGHUP");
    }
    procs.coordinator.signal("TERM");
    let started = Instant::now();
    let status = loop {
        if let Some(s) = procs.coordinator.0.try_wait().unwrap() {
            break s;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "the coordinator still runs 10 s after SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "the coordinator's exit on SIGTERM: {status}");
}
