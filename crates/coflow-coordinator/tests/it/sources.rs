//! The flows of one identity's coflows that one machine serves at once are bounded
//! (`max_gets_per_owner_per_source`): a flow held at rate 0 keeps its receiver's data connection
//! to its source, so without the bound one member's held gets could take every connection of a
//! source from the others.

use coflow_coordinator::{CoordError, CoordinatorConfig, FlowOutcome};
use coflow_core::MachineId;

use super::Harness;

/// An owner's gets from one source, across its coflows and through any receivers, stop at the
/// bound with `limit-exceeded` naming the source; another source, a local get, another owner and
/// coflows of no owner (token mode) are not held by it; a flow that completes or fails, a
/// receiver lost and an unregistered coflow each give their places back.
#[test]
fn one_owner_cannot_take_every_connection_of_a_source() {
    let cfg = CoordinatorConfig { max_gets_per_owner_per_source: 2, ..Default::default() };
    let mut h = Harness::new("varys", 4, cfg);
    let (a, b) = ("coflow://client/a", "coflow://client/b");
    let (x, y, z) = (h.register_by(a).unwrap(), h.register_by(a).unwrap(), h.register_by(b).unwrap());
    let token = h.register_by("").unwrap();
    h.put_by(a, x, "0", 0).unwrap();
    h.put_by(a, x, "1", 1).unwrap();
    h.put_by(a, y, "0", 0).unwrap();
    h.put_by(b, z, "0", 0).unwrap();
    h.put_by("", token, "0", 0).unwrap();
    let full = |h: &mut Harness, coflow, machine| {
        let e = h.get_by(a, coflow, "0", machine).unwrap_err();
        let want = "coflow://client/a has 2 flows served by machine 0 (max_gets_per_owner_per_source)";
        assert!(matches!(&e, CoordError::LimitExceeded(m) if m == want), "{e}");
    };
    let first = h.get_by(a, x, "0", 1).unwrap().flow;
    let second = h.get_by(a, x, "0", 2).unwrap().flow;
    full(&mut h, x, 3);
    full(&mut h, y, 3);
    h.get_by(a, x, "1", 3).unwrap();
    h.get_by(a, x, "0", 0).unwrap();
    h.get_by(b, z, "0", 3).unwrap();
    for m in 1..4 {
        h.get_by("", token, "0", m).unwrap();
    }
    h.core.recount().unwrap();

    h.end(first, FlowOutcome::Completed).unwrap();
    let third = h.get_by(a, y, "0", 3).unwrap().flow;
    full(&mut h, x, 1);
    h.end(third, FlowOutcome::Failed("data-lost".into())).unwrap();
    let fourth = h.get_by(a, y, "0", 3).unwrap().flow;
    full(&mut h, y, 1);
    // Agent 2 leaves: its flow from machine 0 ends and gives its place back.
    h.core.handle_deregister_agent(h.now, MachineId(2));
    assert_eq!(h.core.rate(second), None);
    h.get_by(a, y, "0", 1).unwrap();
    full(&mut h, y, 1);
    // Unregistered, coflow y's flows end with it; x's place stays free.
    assert!(h.core.rate(fourth).is_some());
    h.core.handle_unregister(h.now, a, y).unwrap();
    for m in [1, 3] {
        h.get_by(a, x, "0", m).unwrap();
    }
    full(&mut h, x, 1);
    h.core.recount().unwrap();
}
