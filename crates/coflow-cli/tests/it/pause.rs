//! A coordinator process stopped (`SIGSTOP`) for 10 s and for 15 s while three agents hold open
//! sessions, gets are in flight (moving, and held at rate 0 behind another coflow) and gets and
//! puts are issued during the pause, then continued (`SIGCONT`), with the real binaries over
//! mutual TLS: no agent is declared dead, no piece is lost, every get ends with its exact bytes
//! or, if it waited on the coordinator past `coordinator_grace_ms`, with the retryable
//! `agent-unreachable` within that grace; nothing hangs, and no flow is left behind. A coordinator
//! stopped for good is found by the agents' pings, and the gets it held end after the grace.

use std::time::{Duration, Instant};

use coflow_client::{ClientError, CoflowId, CoflowOptions};
use tokio::task::JoinHandle;

use coflow_testkit::content;

use crate::procs::{Procs, Spec};

/// The agents' grace for an unresponsive coordinator.
const GRACE: Duration = Duration::from_secs(5);

type Get = JoinHandle<(Result<Vec<u8>, ClientError>, Duration)>;

/// A get from agent `m`'s client, timed from its start.
async fn get(procs: &Procs, m: usize, coflow: CoflowId, id: &str) -> Get {
    let c = procs.client(m).await;
    let id = id.to_string();
    tokio::spawn(async move {
        let t = Instant::now();
        let r = c.get(coflow, &id).await;
        (r, t.elapsed())
    })
}

/// Waits at most `within` for a get and checks it got exactly `want`.
async fn exact(what: &str, g: Get, want: &[u8], within: Duration) {
    let (r, took) = tokio::time::timeout(within, g).await.unwrap_or_else(|_| panic!("{what} hung")).unwrap();
    match r {
        Ok(got) => assert!(got == want, "{what}: {} bytes, not the piece's {}", got.len(), want.len()),
        Err(e) => panic!("{what} failed after {took:?}: {e}"),
    }
}

fn paused_coordinator(name: &str, pause: Duration) {
    let spec = Spec {
        // Every coflow is scheduled (none bypasses), so that one waits behind another at rate 0.
        coordinator_toml: "bypass_threshold = 0\n".into(),
        agent_toml: "port_rate = \"4MB/s\"\ncoordinator_grace = \"5s\"\n".into(),
        ..Spec::new(3)
    };
    let procs = Procs::start(name, spec);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        procs.ready().await;
        let mut c = Vec::new();
        for m in 0..3 {
            c.push(procs.client(m).await);
        }
        // Pieces on every agent, read only after the pause: none may be lost.
        let kept = c[0].register(3, CoflowOptions { name: "kept".into(), ..Default::default() }).await.unwrap();
        for (m, client) in c.iter().enumerate() {
            client.put(kept, &format!("k{m}"), content(10 + m as u64, 500_000)).await.unwrap();
        }
        // A get moving through the pause (24 MB at 4 MB/s), and on another port a small coflow's
        // get with a bigger one's held at rate 0 behind it.
        let moving = c[0].register(1, CoflowOptions { name: "moving".into(), ..Default::default() }).await.unwrap();
        c[0].put(moving, "m", content(20, 24_000_000)).await.unwrap();
        let small = c[1].register(1, CoflowOptions { name: "small".into(), ..Default::default() }).await.unwrap();
        let big = c[1].register(1, CoflowOptions { name: "big".into(), ..Default::default() }).await.unwrap();
        c[1].put(small, "s", content(21, 8_000_000)).await.unwrap();
        c[1].put(big, "b", content(22, 12_000_000)).await.unwrap();
        let g_moving = get(&procs, 2, moving, "m").await;
        let g_small = get(&procs, 0, small, "s").await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        let g_big = get(&procs, 2, big, "b").await;
        tokio::time::sleep(Duration::from_millis(500)).await;

        procs.coordinator.signal("STOP");
        let stopped = Instant::now();
        tokio::time::sleep(Duration::from_millis(500)).await;
        // Issued while the coordinator does not run: a get and a put wait for it, at most the grace.
        let g_during = get(&procs, 2, kept, "k0").await;
        let c2 = c[2].clone();
        let p_during = tokio::spawn(async move {
            let t = Instant::now();
            (c2.put(kept, "during", content(30, 300_000)).await, t.elapsed())
        });
        tokio::time::sleep(pause.saturating_sub(stopped.elapsed())).await;
        procs.coordinator.signal("CONT");
        let resumed = Instant::now();

        // The get and put of the pause: exact, or the retryable error within the grace.
        let slack = Duration::from_millis(1500);
        let (r, took) =
            tokio::time::timeout(GRACE + slack, g_during).await.expect("the get of the pause hung").unwrap();
        match r {
            Ok(got) => assert!(got == content(10, 500_000), "the get of the pause: wrong bytes"),
            Err(ClientError::CoordinatorUnreachable(_)) => assert!(took <= GRACE + slack, "failed after {took:?}"),
            Err(e) => panic!("the get of the pause failed with {e} after {took:?}, not coordinator-unreachable"),
        }
        let (r, took) =
            tokio::time::timeout(GRACE + slack, p_during).await.expect("the put of the pause hung").unwrap();
        match r {
            Ok(n) => assert_eq!(n, 300_000),
            Err(ClientError::CoordinatorUnreachable(_)) => {
                assert!(took <= GRACE + slack, "failed after {took:?}");
                // Retried once the coordinator answers, the put is taken.
                let retried = c[2].put(kept, "during", content(30, 300_000)).await;
                assert!(matches!(retried, Ok(300_000)), "the put retried after the pause: {retried:?}");
            }
            Err(e) => panic!("the put of the pause failed with {e} after {took:?}, not coordinator-unreachable"),
        }

        // Gets in flight before the pause end with their exact bytes.
        let within = Duration::from_secs(30);
        exact("the moving get", g_moving, &content(20, 24_000_000), within).await;
        exact("the small coflow's get", g_small, &content(21, 8_000_000), within).await;
        exact("the get held behind it", g_big, &content(22, 12_000_000), within).await;

        // No agent was declared dead, and none is: every piece put before the pause (and the one
        // of the pause) reads back exactly, on every machine.
        let st = c[0].status().await.unwrap();
        assert_eq!(st.agents.iter().filter(|a| a.alive).count(), 3, "agents after the pause: {:?}", st.agents);
        assert_eq!(procs.metric("coflow_coordinator_flows_timed_out_total").await, 0.0, "a flow timed out");
        assert!(procs.metric("coflow_coordinator_pauses_total").await >= 1.0, "the pause was not seen");
        for m in 0..3 {
            for k in 0..3 {
                let g = get(&procs, m, kept, &format!("k{k}")).await;
                exact(&format!("piece k{k} at machine {m}"), g, &content(10 + k as u64, 500_000), within).await;
            }
        }
        let g = get(&procs, 0, kept, "during").await;
        exact("the put of the pause", g, &content(30, 300_000), within).await;
        // Nothing is left behind: no flow stays live at the coordinator once its get ended.
        let t = Instant::now();
        while procs.metric("coflow_coordinator_live_flows").await > 0.0 && t.elapsed() < Duration::from_secs(5) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(procs.metric("coflow_coordinator_live_flows").await, 0.0, "flows left live after every get ended");
        eprintln!("paused {pause:?}; everything checked {:?} after the resume", resumed.elapsed());
    });
}

#[test]
fn a_coordinator_paused_10s_loses_no_agent_piece_or_get() {
    paused_coordinator("pause-10s", Duration::from_secs(10));
}

#[test]
fn a_coordinator_paused_15s_loses_no_agent_piece_or_get() {
    paused_coordinator("pause-15s", Duration::from_secs(15));
}

/// A coordinator stopped for good while a get is held at rate 0 behind another coflow: its
/// kernel keeps the agents' connections open, but its process answers no ping, so the agents
/// drop their sessions within `COORDINATOR_PING_EVERY + COORDINATOR_PING_TIMEOUT` and the held
/// get fails `coordinator-unreachable` after the grace, rather than waiting for ever; the get
/// that was moving keeps its rate and completes.
#[test]
fn a_get_held_by_a_coordinator_frozen_for_good_ends_after_the_pings_and_the_grace() {
    let spec = Spec {
        coordinator_toml: "bypass_threshold = 0\n".into(),
        agent_toml: "port_rate = \"4MB/s\"\ncoordinator_grace = \"5s\"\n".into(),
        ..Spec::new(2)
    };
    let procs = Procs::start("frozen-for-good", spec);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        procs.ready().await;
        let c0 = procs.client(0).await;
        let small = c0.register(1, CoflowOptions { name: "small".into(), ..Default::default() }).await.unwrap();
        let big = c0.register(1, CoflowOptions { name: "big".into(), ..Default::default() }).await.unwrap();
        c0.put(small, "s", content(41, 8_000_000)).await.unwrap();
        c0.put(big, "b", content(42, 12_000_000)).await.unwrap();
        let g_small = get(&procs, 1, small, "s").await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        let g_big = get(&procs, 1, big, "b").await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        procs.coordinator.signal("STOP");
        let frozen = Instant::now();
        exact("the moving get", g_small, &content(41, 8_000_000), Duration::from_secs(30)).await;
        let bound = coflow_agent::COORDINATOR_PING_EVERY
            + coflow_agent::COORDINATOR_PING_TIMEOUT
            + GRACE
            + Duration::from_secs(10);
        let answer = tokio::time::timeout(bound.saturating_sub(frozen.elapsed()), g_big).await;
        let took = frozen.elapsed();
        procs.coordinator.signal("CONT");
        let (r, _) =
            answer.unwrap_or_else(|_| panic!("the held get hung {took:?} after its coordinator froze")).unwrap();
        match r {
            Err(ClientError::CoordinatorUnreachable(m)) => {
                eprintln!("the held get failed {took:.1?} after its coordinator froze: {m}")
            }
            other => panic!("a get held by a frozen coordinator: {:?}", other.map(|b| b.len())),
        }
    });
}

/// A get whose own agent (the one its client reads from) is stopped mid-transfer fails
/// `AgentUnreachable` once the client's pings go unanswered, within `PING_EVERY + PING_TIMEOUT`
/// and a margin, rather than hanging on a connection the stopped process's kernel keeps open.
#[test]
fn a_get_whose_own_agent_is_paused_fails_unreachable_within_the_pings() {
    let spec = Spec { agent_toml: "port_rate = \"1MB/s\"\n".into(), ..Spec::new(2) };
    let procs = Procs::start("pause-own-agent", spec);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        procs.ready().await;
        let c0 = procs.client(0).await;
        let coflow = c0.register(1, CoflowOptions { name: "frozen".into(), ..Default::default() }).await.unwrap();
        // 30 s of transfer at the agents' rate: the pause comes well before its end.
        c0.put(coflow, "p", content(7, 30_000_000)).await.unwrap();
        let g = get(&procs, 1, coflow, "p").await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(!g.is_finished(), "the get ended before the pause");
        procs.agents[1].signal("STOP");
        let paused = Instant::now();
        let bound = coflow_client::PING_EVERY + coflow_client::PING_TIMEOUT + Duration::from_secs(10);
        let answer = tokio::time::timeout(bound, g).await;
        let took = paused.elapsed();
        procs.agents[1].signal("CONT");
        let (r, _) = answer.unwrap_or_else(|_| panic!("the get hung {took:?} after its agent was paused")).unwrap();
        match r {
            Err(ClientError::AgentUnreachable(_)) => eprintln!("the get failed {took:.1?} after its agent was paused"),
            other => panic!("a get whose agent was paused: {:?}", other.map(|b| b.len())),
        }
    });
}

/// A get whose own agent is paused for 8 s (past the coordinator's agent timeout and the data
/// idle timeout, inside the client's pings) and continued: the agent finds that it did not run
/// itself, and the get ends `unknown-flow` naming the pause (the coordinator ended the flow when
/// it declared the agent dead; a client asks again), never `agent-unreachable`, which would
/// blame the source and have a framework recompute a piece that is whole.
#[test]
fn a_get_whose_own_agent_was_paused_and_continued_blames_no_source() {
    let spec = Spec { agent_toml: "port_rate = \"1MB/s\"\n".into(), ..Spec::new(2) };
    let procs = Procs::start("pause-own-agent-continued", spec);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        procs.ready().await;
        let c0 = procs.client(0).await;
        let coflow = c0.register(1, CoflowOptions { name: "continued".into(), ..Default::default() }).await.unwrap();
        c0.put(coflow, "p", content(8, 30_000_000)).await.unwrap();
        let g = get(&procs, 1, coflow, "p").await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(!g.is_finished(), "the get ended before the pause");
        procs.agents[1].signal("STOP");
        tokio::time::sleep(Duration::from_secs(8)).await;
        procs.agents[1].signal("CONT");
        let continued = Instant::now();
        let (r, _) = tokio::time::timeout(Duration::from_secs(15), g)
            .await
            .unwrap_or_else(|_| panic!("the get hung after its agent continued"))
            .unwrap();
        match r {
            Err(ClientError::UnknownFlow(m)) => {
                assert!(m.contains("did not run"), "{m}");
                eprintln!("the get ended {:.1?} after its agent continued: {m}", continued.elapsed());
            }
            other => panic!("a get whose agent was paused and continued: {:?}", other.map(|b| b.len())),
        }
    });
}
