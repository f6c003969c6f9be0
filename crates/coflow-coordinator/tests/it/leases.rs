//! Leases: a coflow its framework stops renewing is unregistered a lease after the last renewal,
//! never for the coordinator's own pauses or a quiet spell before renewals come in.

use coflow_coordinator::{CoordinatorConfig, Notice};
use coflow_core::{CoflowId, Nanos};
use coflow_proto::{CoflowOptions, Registration};

use super::{Harness, recovered};

/// Runs the core for `ms` in steps of 100 ms, every machine of `machines` heartbeating, so that
/// no agent is lost meanwhile.
fn beat_for(h: &mut Harness, machines: u32, ms: u64) {
    for _ in 0..ms / 100 {
        h.now = h.now + Nanos::from_millis(100);
        for m in 0..machines {
            h.heartbeat(m, vec![]);
        }
        h.core.handle_timeout(h.now);
    }
}

/// A coflow registered with a lease lives while its owner renews it and is unregistered a lease
/// after the last renewal (its agents told to drop it, counted, the core asking to run then);
/// another identity's renewal is refused, and a renewal names what it did not renew; a coflow
/// without a lease never expires; an adopted coflow's lease counts from its adoption; the
/// coordinator's own pause is not held against a lease.
#[test]
fn a_coflow_whose_lease_runs_out_unrenewed_is_unregistered() {
    let mut h = Harness::new("varys", 2, CoordinatorConfig { bypass_threshold_bytes: 0, ..Default::default() });
    h.core.set_id_base(1000);
    let (a, b) = ("coflow://client/a", "coflow://client/b");
    let leased = CoflowOptions { lease: Some(Nanos::from_secs(2)), ..Default::default() };
    let register = |h: &mut Harness, options: CoflowOptions| {
        h.core.handle_register(h.now, Registration { num_flows: 1, options, owner: a.into(), nonce: 0 }).unwrap()
    };
    let l = register(&mut h, leased.clone());
    let kept = register(&mut h, CoflowOptions::default());
    h.put_by(a, l, "p", 0).unwrap();
    h.get_by(a, l, "p", 1).unwrap();
    // Adopted after a restart: its lease counts from now.
    let old = CoflowId(5);
    let reg = Registration { num_flows: 1, options: leased.clone(), owner: a.into(), nonce: 77 };
    h.core.handle_put(h.now, recovered(old, "q", 0, 10, Some(reg))).unwrap();
    let live = |h: &Harness| h.core.coflows().map(|c| c.id).collect::<Vec<_>>();

    beat_for(&mut h, 2, 1500);
    let unknown = CoflowId(999_999);
    assert_eq!(h.core.handle_renew(h.now, b, &[l, kept, unknown]), [l, kept, unknown], "another's");
    assert_eq!(h.core.handle_renew(h.now, a, &[l, kept, unknown]), [unknown]);
    let lease_left = |h: &Harness, id| h.core.coflows().find(|c| c.id == id).and_then(|c| c.lease_left);
    assert_eq!((lease_left(&h, l), lease_left(&h, kept)), (Some(Nanos::from_secs(2)), None), "as status shows");
    let until = h.now + Nanos::from_secs(2);
    assert!(h.core.poll_timeout().is_some_and(|t| t <= until), "the core runs by the lease's end");
    assert_eq!(live(&h), [old, l, kept]);
    beat_for(&mut h, 2, 600);
    assert_eq!(live(&h), [l, kept], "the adopted coflow, not renewed, ran out at 2 s");
    h.notices(0);
    h.notices(1);
    beat_for(&mut h, 2, 1300);
    assert_eq!(live(&h), [l, kept], "renewed at 1.5 s: lives to 3.5 s");
    beat_for(&mut h, 2, 200);
    assert_eq!(live(&h), [kept], "expired; the other has no lease");
    for m in 0..2 {
        assert_eq!(h.notices(m), [Notice::CoflowDropped(l)], "machine {m} drops its pieces");
    }
    assert_eq!(h.core.handle_renew(h.now, a, &[l]), [l], "gone");
    assert!(h.core.handle_unregister(h.now, a, l).is_err());
    assert!(h.core.metrics().contains("coflow_coordinator_coflows_expired_total 2\n"));

    // The coordinator stops for 10 s: its leases are lengthened by what it did not run.
    let paused = register(&mut h, leased);
    beat_for(&mut h, 2, 1000);
    h.now = h.now + Nanos::from_secs(10);
    // What queued over the pause comes in a burst: one pause, however many inputs.
    for m in [0, 1, 0] {
        h.now = h.now + Nanos::from_millis(1);
        h.heartbeat(m, vec![]);
    }
    h.core.handle_timeout(h.now);
    assert_eq!(h.core.counters().pauses, 1);
    beat_for(&mut h, 2, 900);
    assert_eq!(live(&h), [kept, paused], "1.9 s of its lease ran, counting out the pause");
    beat_for(&mut h, 2, 200);
    assert_eq!(live(&h), [kept], "then it runs out");
    assert_eq!(h.core.counters().coflows_expired, 3);
}

/// A stop of the core too short to count as a pause, ending just past a lease's end: the first
/// run after it does not find the lease run out, so the renewal that queued meanwhile keeps the
/// coflow; a coflow nobody renews goes once the core has run a quarter second since.
#[test]
fn a_renewal_queued_over_a_short_stop_comes_in_before_the_lease_is_judged() {
    let mut h = Harness::new("varys", 2, CoordinatorConfig::default());
    let leased = CoflowOptions { lease: Some(Nanos::from_secs(2)), ..Default::default() };
    let kept = h.register(1, leased.clone());
    beat_for(&mut h, 2, 1500);
    assert!(h.core.handle_renew(h.now, "", &[kept]).is_empty());
    // Both leases end 2 s from here.
    let lapsed = h.register(1, leased);
    beat_for(&mut h, 2, 100);
    // Nothing runs from here to 100 ms past the leases' ends (under the 750 ms of a pause).
    let (stopped, due) = (h.now, h.core.poll_timeout().unwrap());
    assert_eq!(due, stopped + Nanos::from_millis(1900), "the core asks to run at the leases' end");
    h.now = stopped + Nanos::from_millis(2000);
    h.core.handle_timeout(h.now);
    assert_eq!(h.core.live_coflows(), 2, "the first run after the stop judges no lease");
    assert!(h.core.handle_renew(h.now, "", &[kept]).is_empty(), "the queued renewal is in time");
    let settled = h.core.poll_timeout().unwrap();
    assert!(settled > h.now && settled <= h.now + Nanos::from_millis(250), "{settled:?}");
    beat_for(&mut h, 2, 200);
    assert_eq!(h.core.live_coflows(), 2, "judged a quarter second after the stop");
    beat_for(&mut h, 2, 100);
    assert_eq!(h.core.coflows().map(|c| c.id).collect::<Vec<_>>(), [kept]);
    assert!(!h.core.coflows().any(|c| c.id == lapsed));
    assert_eq!((h.core.counters().pauses, h.core.counters().coflows_expired), (0, 1));
}

/// A core with no agent runs only when it asks to, each time a little late as timers wake: a
/// lease that ran out is still judged, within a quarter second of its end plus the lateness.
#[test]
fn an_idle_core_woken_late_by_its_timer_still_ends_a_lease() {
    let mut h = Harness::new("varys", 0, CoordinatorConfig::default());
    let c = h.register(1, CoflowOptions { lease: Some(Nanos::from_secs(1)), ..Default::default() });
    let end = h.now + Nanos::from_secs(1);
    for _ in 0..10 {
        let Some(due) = h.core.poll_timeout() else { break };
        h.now = due + Nanos::from_millis(2);
        h.core.handle_timeout(h.now);
    }
    assert!(!h.core.coflows().any(|k| k.id == c), "the lease never ran out");
    assert!(h.now <= end + Nanos::from_millis(260), "judged at {:?}, its end {end:?}", h.now);
    assert_eq!(h.core.poll_timeout(), None, "nothing left to run for");
}
