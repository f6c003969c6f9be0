//! Limits before the bytes, on a real agent process over mutual TLS: puts beyond
//! `max_stored_bytes` are refused on their stated size, before their bytes cost the agent memory.

use coflow_client::{ClientError, CoflowOptions};

use crate::procs::{Procs, Spec};

/// Four concurrent 250 MB in-memory puts to an agent with `max_stored_bytes` = 100 MB are
/// refused `limit-exceeded` and a 90 MB one is stored, with the agent's peak memory under
/// 150 MB (the limit plus the agent's own footprint and a chunk per put in flight).
#[test]
fn puts_beyond_the_memory_limit_are_refused_before_their_bytes() {
    if !std::path::Path::new("/proc/self/status").exists() {
        eprintln!("skipping: no /proc");
        return;
    }
    let spec = Spec { agent_toml: "max_stored_bytes = 100000000\n".into(), ..Spec::new(1) };
    let procs = Procs::start("limits", spec);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        procs.ready().await;
        let c = procs.client(0).await;
        let coflow = c.register(5, CoflowOptions::default()).await.unwrap();
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
    let peak = procs.agents[0].peak_rss();
    eprintln!("agent peak RSS: {:.1} MB", peak as f64 / 1e6);
    assert!(peak < 150_000_000, "the agent's memory peaked at {peak} bytes");
}
