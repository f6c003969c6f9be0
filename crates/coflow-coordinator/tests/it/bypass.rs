//! The small-coflow bypass: a coflow whose bottleneck is under the threshold goes unscheduled,
//! and one member's only while its coflows bypassing stay under the threshold together.

use coflow_coordinator::CoordinatorConfig;
use coflow_core::CoflowId;

use super::Harness;

/// A member's coflows bypass the policy only while, with its other coflows bypassing with flows
/// in flight, their bottlenecks stay under the threshold: splitting a transfer into small
/// coflows gets the rest scheduled, not served at full speed. Another member's small coflow
/// bypasses all the same, a coflow whose flows all ended or that was dropped stops counting, and
/// coflows of no owner (token mode) are judged alone.
#[test]
fn one_member_cannot_bypass_the_policy_with_many_small_coflows() {
    let cfg = CoordinatorConfig { bypass_threshold_bytes: 25_000, ..Default::default() };
    let mut h = Harness::new("varys", 3, cfg);
    let (a, b) = ("coflow://client/a", "coflow://client/b");
    // A coflow of `owner` with one piece of 10,000 bytes on machine 0, got by machine 1.
    let small = |h: &mut Harness, owner: &str| {
        let c = h.register_by(owner).unwrap();
        h.put_sized_by(owner, c, "p", 0, 10_000).unwrap();
        (c, h.get_by(owner, c, "p", 1).unwrap().flow)
    };
    let bypassed = |h: &Harness, c: CoflowId| h.core.coflows().find(|v| v.id == c).unwrap().bypass;
    let (x, fx) = small(&mut h, a);
    let (y, _) = small(&mut h, a);
    let (z, _) = small(&mut h, a);
    assert_eq!([x, y, z].map(|c| bypassed(&h, c)), [true, true, false], "20,000 bytes bypass, 30,000 would not");
    let (w, _) = small(&mut h, b);
    assert!(bypassed(&h, w), "another member's small coflow bypasses");
    h.finish(fx);
    let (v, _) = small(&mut h, a);
    assert!(bypassed(&h, v), "a coflow whose flows ended stops counting");
    h.core.handle_unregister(h.now, a, y).unwrap();
    let (u, _) = small(&mut h, a);
    assert!(bypassed(&h, u), "a coflow dropped with its flow in flight stops counting");
    h.core.recount().unwrap();
    // A coflow judged large after it bypassed counts until its flows end: its bypassed flow
    // still runs at full speed.
    let c = "coflow://client/c";
    let (s1, s2) = (small(&mut h, c).0, small(&mut h, c).0);
    h.put_sized_by(c, s2, "big", 0, 100_000).unwrap();
    h.get_by(c, s2, "big", 2).unwrap();
    assert_eq!([s1, s2].map(|k| bypassed(&h, k)), [true, false], "the second coflow is large now");
    let (s3, _) = small(&mut h, c);
    assert!(!bypassed(&h, s3), "the large coflow's bypassed flow still counts");
    h.core.recount().unwrap();
    let token: Vec<CoflowId> = (0..4).map(|_| small(&mut h, "").0).collect();
    assert!(token.iter().all(|&c| bypassed(&h, c)), "coflows of no owner are judged alone");
}
