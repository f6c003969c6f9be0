//! The coordinator's clock set back, with the real binaries over TLS: a coordinator whose wall
//! clock libfaketime holds at one instant is killed and started again at that same instant, so
//! its new ids start where the previous run's did. No id names two coflows, and no get returns
//! another coflow's bytes.

use std::path::Path;
use std::time::{Duration, Instant};

use coflow_client::{ClientError, CoflowOptions};
use coflow_testkit::content;

use crate::procs::{Procs, Spec};

/// Debian's libfaketime (package `faketime`).
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// The instant the coordinator's wall clock is held at, and it in microseconds since the epoch.
const FROZEN: &str = "2030-01-01 00:00:00";
const FROZEN_MICROS: u64 = 1_893_456_000_000_000;

#[test]
fn after_the_coordinators_clock_goes_back_no_id_names_two_coflows() {
    if !Path::new(LIBFAKETIME).exists() {
        eprintln!("skipping: no {LIBFAKETIME} (Debian's faketime)");
        return;
    }
    let env = vec![
        ("LD_PRELOAD", LIBFAKETIME.to_string()),
        ("FAKETIME", FROZEN.to_string()),
        ("TZ", "UTC".to_string()),
        // Timers run on the real monotonic clock; only the wall clock stands still.
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1".to_string()),
    ];
    let mut procs = Procs::start("clock", Spec { coordinator_env: env, ..Spec::new(2) });
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (c0, c1) = rt.block_on(async {
        procs.ready().await;
        (procs.client(0).await, procs.client(1).await)
    });
    let (old, old_bytes) = rt.block_on(async {
        let old = c0.register(1, CoflowOptions { name: "before".into(), ..Default::default() }).await.unwrap();
        let bytes = content(50, 400_000);
        c0.put(old, "p", bytes.clone()).await.unwrap();
        (old, bytes)
    });
    // Ids start at the wall clock in microseconds (ready's probe coflow took the first).
    assert!((FROZEN_MICROS..FROZEN_MICROS + 10).contains(&old.0), "libfaketime did not hold the clock: id {old:?}");
    procs.restart_coordinator();
    rt.block_on(async {
        // The agents register again and re-announce the old coflow, which this run did not
        // issue although its id lies above this run's start: it is refused, and lifts the ids.
        let t = Instant::now();
        while procs.metric("coflow_coordinator_recoveries_refused_total").await < 1.0 {
            assert!(t.elapsed() < Duration::from_secs(20), "the old coflow was not re-announced");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut ids = vec![old.0];
        let new = loop {
            match c0.register(1, CoflowOptions { name: "after".into(), ..Default::default() }).await {
                Ok(id) => break id,
                Err(e) => assert!(t.elapsed() < Duration::from_secs(20), "{e}"),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        ids.push(new.0);
        for _ in 0..10 {
            ids.push(c0.register(1, CoflowOptions::default()).await.unwrap().0);
        }
        let mut unique = ids.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), ids.len(), "an id names two coflows: {ids:?}");
        // The new coflow's piece, under the same data id on the same machine: its own bytes.
        let bytes = content(51, 300_000);
        let put = loop {
            match c0.put(new, "p", bytes.clone()).await {
                Err(ClientError::AgentUnreachable(_) | ClientError::CoordinatorUnreachable(_))
                    if t.elapsed() < Duration::from_secs(20) =>
                {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                other => break other,
            }
        };
        assert_eq!(put.unwrap(), 300_000);
        assert!(c1.get(new, "p").await.unwrap() == bytes, "the new coflow's get");
        match c1.get(old, "p").await {
            Err(ClientError::UnknownCoflow(_)) => {}
            Ok(got) => panic!("the old coflow's get returned {} bytes (its own: {})", got.len(), got == old_bytes),
            Err(e) => panic!("the old coflow's get: {e}"),
        }
    });
}
