//! Deadlines live: a coflow's deadline counts from its registration (less the control path's
//! margin, `deadline_margin_ms`), however late its first get comes or however often it enters
//! the policy, and a coflow that asks for more after its admission is judged again, so that a
//! member cannot be admitted small and then grow into the guarantees of others.

use coflow_coordinator::{Admission, CoordinatorConfig};
use coflow_core::{CoflowId, Nanos};
use coflow_proto::CoflowOptions;

use super::{CAP, Harness, last_rate};

/// `varys-deadline` on three machines, without the bypass, whose agents stay alive through the
/// seconds the tests let pass without their heartbeats.
fn deadline_harness() -> Harness {
    let cfg = CoordinatorConfig { bypass_threshold_bytes: 0, agent_timeout_ms: 60_000, ..Default::default() };
    Harness::new("varys-deadline", 3, cfg)
}

fn within(s: u64) -> CoflowOptions {
    CoflowOptions { deadline: Some(Nanos::from_secs(s)), ..Default::default() }
}

/// A coflow registered with 10 s whose first get comes 4 s later has 5.9 s left (10 s less the
/// 4 s gone and the 100 ms margin), not 10 s from its get; one registered with 2 s whose first
/// get comes at 4 s has none left: rejected, and served as best effort.
#[test]
fn a_deadline_counts_from_registration_less_the_margin() {
    let mut h = deadline_harness();
    let a = h.register(1, within(10));
    h.advance(4_000);
    h.put(a, "a", 0, 100).unwrap();
    // B, best effort, takes what the guarantee leaves into machine 2.
    let b = h.register(1, CoflowOptions::default());
    h.put(b, "b", 1, 10_000).unwrap();
    let fa = h.get(a, "a", 2).unwrap();
    let fb = h.get(b, "b", 2).unwrap();
    h.advance(0);
    let pushed = h.drain();
    let (ra, rb) = (last_rate(&pushed, fa.flow).unwrap(), last_rate(&pushed, fb.flow).unwrap());
    assert!((ra - 100.0 / 5.9).abs() < 1e-6, "A paced to end 100 ms before 10 s from registration: {ra}");
    assert!((ra + rb - CAP).abs() < 1e-6, "B takes the rest: {rb}");
    // Paced to a deadline, A is decided for again a heartbeat later, so that a flow that fell
    // behind its rate (its first bytes late) catches up from what it reports.
    let heartbeat = Nanos::from_millis(CoordinatorConfig::default().heartbeat_interval_ms);
    assert_eq!(h.core.poll_timeout(), Some(h.now + heartbeat));
    // A policy that reads no deadline (`varys`) is not woken for one.
    let cfg = CoordinatorConfig { bypass_threshold_bytes: 0, agent_timeout_ms: 60_000, ..Default::default() };
    let mut h = Harness::new("varys", 3, cfg);
    let a = h.register(1, within(10));
    h.put(a, "a", 0, 100).unwrap();
    h.get(a, "a", 2).unwrap();
    h.advance(0);
    assert!(h.core.poll_timeout().is_none_or(|t| t > h.now + heartbeat), "{:?}", h.core.poll_timeout());

    let mut h = deadline_harness();
    let c = h.register(1, within(2));
    h.advance(4_000);
    h.put(c, "c", 0, 100).unwrap();
    let b = h.register(1, CoflowOptions::default());
    h.put(b, "b", 1, 10_000).unwrap();
    let fc = h.get(c, "c", 2).unwrap();
    let fb = h.get(b, "b", 2).unwrap();
    h.advance(0);
    h.advance(0);
    let pushed = h.drain();
    let (rc, rb) = (last_rate(&pushed, fc.flow).unwrap(), last_rate(&pushed, fb.flow).unwrap());
    // Best effort, SEBF: C, the smaller, first, at its port's whole rate; admitted with 2 s from
    // its get it would have had 50 B/s, and B the other 50.
    assert_eq!((rc, rb), (CAP, 0.0), "C's deadline passed before its get");
    assert_eq!(admission(&h, c), Some(Admission::Rejected), "status says so");
    assert_eq!(admission(&h, b), None, "no deadline, nothing to admit");
    let n = h.core.counters();
    assert_eq!((n.coflows_admitted, n.coflows_rejected), (0, 1));
}

/// What the policy's admission control made of a coflow's deadline, as status shows it.
fn admission(h: &Harness, id: CoflowId) -> Option<Admission> {
    h.core.coflows().find(|c| c.id == id).expect("a live coflow").admission
}

/// A coflow with a deadline counts as having met it if its last flow ended by its registration
/// plus its deadline, whatever the policy and whether it was admitted: under `varys` (no
/// admission control, none shown), E (100 B by 3 s) ends at 1 s and meets it, F (100 B by 1.5 s,
/// served after E) ends at 2 s and misses it; G without a deadline counts in neither.
#[test]
fn deadlines_met_and_missed_are_counted_as_coflows_complete() {
    let cfg = CoordinatorConfig { bypass_threshold_bytes: 0, agent_timeout_ms: 60_000, ..Default::default() };
    let mut h = Harness::new("varys", 3, cfg);
    let e = h.register(1, within(3));
    let f = h.register(1, CoflowOptions { deadline: Some(Nanos::from_millis(1_500)), ..Default::default() });
    let g = h.register(1, CoflowOptions::default());
    for (c, piece) in [(e, "e"), (f, "f"), (g, "g")] {
        h.put(c, piece, 0, 100).unwrap();
    }
    let flows: Vec<_> = [(e, "e"), (f, "f"), (g, "g")].map(|(c, piece)| h.get(c, piece, 2).unwrap().flow).into();
    h.advance(0);
    assert_eq!(admission(&h, e), None, "varys has no admission control");
    for flow in flows {
        h.advance(1_000);
        h.finish(flow);
    }
    let n = h.core.counters();
    assert_eq!((n.deadlines_met, n.deadlines_missed), (1, 1));
    assert_eq!((n.coflows_admitted, n.coflows_rejected), (0, 0));
}

/// D (500 B in 10 s) and A (10 B in 5 s) are admitted into machine 2. A then asks for 400 B
/// more, which would need 83.7 B/s where D's guarantee leaves 49.5: A is rejected and best
/// effort, and D keeps its guarantee. Judged on what it was admitted with, A would come first
/// (the earlier deadline) and leave D 16 B/s.
#[test]
fn a_coflow_that_grows_after_its_admission_is_judged_again() {
    let mut h = deadline_harness();
    let d = h.register(0, within(10));
    let a = h.register(0, within(5));
    h.put(d, "d", 1, 500).unwrap();
    h.put(a, "a1", 0, 10).unwrap();
    h.put(a, "a2", 0, 400).unwrap();
    assert_eq!((admission(&h, d), admission(&h, a)), (Some(Admission::Pending), Some(Admission::Pending)));
    let fd = h.get(d, "d", 2).unwrap();
    h.get(a, "a1", 2).unwrap();
    h.advance(0);
    h.drain();
    assert_eq!((admission(&h, d), admission(&h, a)), (Some(Admission::Admitted), Some(Admission::Admitted)));
    let fa2 = h.get(a, "a2", 2).unwrap();
    h.advance(0);
    h.advance(0);
    let pushed = h.drain();
    let (rd, ra2) = (last_rate(&pushed, fd.flow).unwrap(), last_rate(&pushed, fa2.flow).unwrap());
    let guarantee = 500.0 / 9.9;
    assert!(rd >= guarantee * (1.0 - 1e-9), "D keeps its guarantee of {guarantee}: {rd}");
    assert!(ra2 > 0.0 && ra2 <= CAP - guarantee + 1e-6, "A, best effort, takes what D leaves: {ra2}");
    assert_eq!((admission(&h, d), admission(&h, a)), (Some(Admission::Admitted), Some(Admission::Rejected)));
    let n = h.core.counters();
    assert_eq!((n.coflows_admitted, n.coflows_rejected), (2, 1), "A counts in both");
}

/// The policy judges a coflow afresh each time it enters: X (500 B within 20 s) is rejected while
/// Y's guarantee (900 B within 10 s) leaves it 9 B/s; once X's and Y's flows have ended, X's next
/// get (10 B) enters it again and is admitted, which status shows and the counters count.
#[test]
fn a_coflow_rejected_in_one_wave_is_judged_again_in_the_next() {
    let mut h = deadline_harness();
    let y = h.register(1, within(10));
    let x = h.register(2, within(20));
    h.put(y, "y", 0, 900).unwrap();
    h.put(x, "x1", 1, 500).unwrap();
    h.put(x, "x2", 1, 10).unwrap();
    let fy = h.get(y, "y", 2).unwrap().flow;
    h.advance(0);
    let fx = h.get(x, "x1", 2).unwrap().flow;
    h.advance(0);
    h.advance(0);
    assert_eq!((admission(&h, y), admission(&h, x)), (Some(Admission::Admitted), Some(Admission::Rejected)));
    h.advance(1_000);
    h.finish(fy);
    h.finish(fx);
    h.advance(200);
    h.get(x, "x2", 2).unwrap();
    h.advance(0);
    h.advance(0);
    assert_eq!(admission(&h, x), Some(Admission::Admitted), "judged again as it entered again");
    let n = h.core.counters();
    assert_eq!((n.coflows_admitted, n.coflows_rejected), (2, 1));
}

/// A coflow served outside the policy (bypassed for being small) is never judged, so status
/// shows no admission for it, and its deadline is counted met all the same; one unregistered with
/// its flow still running past its deadline missed it, and one unregistered before its deadline
/// counts in neither.
#[test]
fn deadlines_are_counted_however_a_coflow_was_served_or_ended() {
    let cfg = CoordinatorConfig { bypass_threshold_bytes: 1_000, agent_timeout_ms: 60_000, ..Default::default() };
    let mut h = Harness::new("varys-deadline", 3, cfg);
    let small = h.register(1, within(5));
    h.put(small, "s", 0, 10).unwrap();
    let fs = h.get(small, "s", 2).unwrap().flow;
    h.advance(0);
    assert_eq!(admission(&h, small), None, "bypassed: never judged");
    h.advance(100);
    h.finish(fs);
    let (late, early) = (h.register(1, within(1)), h.register(1, within(60)));
    h.put(late, "l", 0, 5_000).unwrap();
    h.put(early, "e", 1, 5_000).unwrap();
    h.get(late, "l", 2).unwrap();
    h.get(early, "e", 2).unwrap();
    h.advance(2_000);
    for c in [late, early] {
        h.core.handle_unregister(h.now, coflow_proto::ADMIN, c).unwrap();
    }
    let n = h.core.counters();
    assert_eq!((n.deadlines_met, n.deadlines_missed), (1, 1));
}
