//! Limits before the bytes, on a real agent process: puts beyond `max_stored_bytes` are refused
//! on their stated size, before their bytes cost the agent memory.

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use coflow_client::{Client, ClientConfig, ClientError, ClusterToken, CoflowOptions};

use crate::{coflow, tmp};

/// Kills its process when dropped, so a failing test leaves nothing running.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The peak resident memory of a process, bytes (`VmHWM`).
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).expect("VmHWM");
    line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
}

/// Four concurrent 250 MB in-memory puts to an agent with `max_stored_bytes` = 100 MB are
/// refused `limit-exceeded` and a 90 MB one is stored, with the agent's peak memory under
/// 150 MB (the limit plus the agent's own footprint and a chunk per put in flight).
#[test]
fn puts_beyond_the_memory_limit_are_refused_before_their_bytes() {
    if !std::path::Path::new("/proc/self/status").exists() {
        eprintln!("skipping: no /proc");
        return;
    }
    let token = "a-token-for-the-memory-limit-test";
    let (cport, aport, dport) = (free_port(), free_port(), free_port());
    let config = tmp("limits-agent.toml");
    std::fs::write(&config, "max_stored_bytes = 100000000\n").unwrap();
    let curl = format!("http://127.0.0.1:{cport}");
    let _coord = Killed(
        coflow()
            .args(["coordinator", "--listen", &format!("127.0.0.1:{cport}")])
            .env("COFLOW_TOKEN", token)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let agent = Killed(
        coflow()
            .args(["agent", "--machine", "0", "--coordinator", &curl])
            .args(["--listen", &format!("127.0.0.1:{aport}"), "--data-listen", &format!("127.0.0.1:{dport}")])
            .arg("--config")
            .arg(&config)
            .arg("--data-dir")
            .arg(tmp("limits-data"))
            .env("COFLOW_TOKEN", token)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let cfg =
            ClientConfig::new(curl.clone(), format!("http://127.0.0.1:{aport}"), ClusterToken::new(token).unwrap());
        let c = Client::connect(cfg).await.unwrap();
        let started = Instant::now();
        let coflow = loop {
            if let Ok(id) = c.register(5, CoflowOptions::default()).await
                && c.status().await.is_ok_and(|s| s.agents.iter().any(|a| a.alive))
            {
                break id;
            }
            assert!(started.elapsed() < Duration::from_secs(30), "the agent did not register");
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        // Registered with the coordinator is not yet serving puts: retry the first while the
        // agent says it is not registered.
        let started = Instant::now();
        while let Err(ClientError::AgentUnreachable(_)) = c.put(coflow, "probe", vec![1]).await {
            assert!(started.elapsed() < Duration::from_secs(30), "the agent never took a put");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let puts = (0..4).map(|i| {
            let c = c.clone();
            tokio::spawn(async move { c.put(coflow, &format!("big-{i}"), vec![i as u8; 250_000_000]).await })
        });
        for p in puts.collect::<Vec<_>>() {
            let r = p.await.unwrap();
            assert!(matches!(r, Err(ClientError::LimitExceeded(_))), "{r:?}");
        }
        assert_eq!(c.put(coflow, "fits", vec![7; 90_000_000]).await.unwrap(), 90_000_000);
    });
    let peak = peak_rss(agent.0.id());
    eprintln!("agent peak RSS: {:.1} MB", peak as f64 / 1e6);
    assert!(peak < 150_000_000, "the agent's memory peaked at {peak} bytes");
}
