//! Jobs: a coflow registered with parents joins their job, which job-aware policies rank
//! together, and may name as parents only coflows its owner may use.

use coflow_coordinator::{CoordError, CoordinatorConfig};
use coflow_core::CoflowId;
use coflow_proto::{CoflowOptions, Registration};

use super::{Harness, last_rate};

/// A coflow registered with a parent joins the parent's job: `aalo-job` ranks it by the 50 MB
/// its parent sent, so an independent coflow that arrived after it on the same ports goes first
/// (the first queue outweighs the second); `aalo`, which ranks each coflow by its own bytes,
/// serves the two in the first queue in arrival order. A parent never registered is passed over.
#[test]
fn a_coflow_joins_its_parents_job() {
    for (policy, parent_known, child_first) in
        [("aalo", true, true), ("aalo-job", true, false), ("aalo-job", false, true)]
    {
        let mut h = Harness::new(policy, 4, CoordinatorConfig { bypass_threshold_bytes: 0, ..Default::default() });
        let parent = h.register(1, CoflowOptions::default());
        h.put(parent, "p", 0, 100_000_000).unwrap();
        let p = h.get(parent, "p", 1).unwrap();
        h.advance(10);
        assert!(h.heartbeat(0, vec![(p.flow, 50_000_000)]));
        h.advance(100);
        let named = if parent_known { parent } else { CoflowId(parent.0 + 1000) };
        let child = h.register(1, CoflowOptions { parents: vec![named], ..Default::default() });
        h.put(child, "c", 2, 1000).unwrap();
        let other = h.register(1, CoflowOptions::default());
        h.put(other, "o", 2, 1000).unwrap();
        let fc = h.get(child, "c", 3).unwrap();
        let fo = h.get(other, "o", 3).unwrap();
        h.advance(10);
        let pushed = h.drain();
        let (rc, ro) = (last_rate(&pushed, fc.flow).unwrap_or(0.0), last_rate(&pushed, fo.flow).unwrap_or(0.0));
        let what = format!("{policy}, parent known {parent_known}: child at {rc}, other at {ro}");
        assert!(rc.max(ro) > 0.0, "{what}");
        assert_eq!(rc > ro, child_first, "{what}");
    }
}

/// A coflow may name as parents only coflows its owner may use: naming another identity's would
/// join that coflow's job (under `aalo-job`, ranking it by this coflow's bytes), so it is refused
/// `permission-denied`, naming the parent, and nothing is registered. The admin names any.
#[test]
fn a_coflow_names_as_parents_only_coflows_its_owner_may_use() {
    let mut h = Harness::new("aalo-job", 2, CoordinatorConfig::default());
    let (a, b) = ("coflow://client/a", "coflow://client/b");
    let theirs = h.register_by(a).unwrap();
    let mine = h.register_by(b).unwrap();
    let with_parents = |owner: &str, parents: Vec<CoflowId>| Registration {
        num_flows: 1,
        owner: owner.into(),
        options: CoflowOptions { parents, ..Default::default() },
        ..Default::default()
    };
    let e = h.core.handle_register(h.now, with_parents(b, vec![mine, theirs])).unwrap_err();
    assert_eq!(e, CoordError::NotTheOwner { coflow: theirs, caller: b.into() });
    assert_eq!(e.kind().as_str(), "permission-denied");
    assert_eq!(h.core.live_coflows(), 2, "nothing registered");
    h.core.handle_register(h.now, with_parents(b, vec![mine])).unwrap();
    h.core.handle_register(h.now, with_parents(coflow_coordinator::ADMIN, vec![mine, theirs])).unwrap();
    assert_eq!(h.core.live_coflows(), 4);
}
