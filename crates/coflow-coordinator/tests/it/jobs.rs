//! Jobs: a coflow registered with parents joins their job, which job-aware policies rank
//! together, and may name as parents only coflows its owner may use.

use std::sync::{Arc, Mutex};

use coflow_coordinator::{CoordError, CoordinatorConfig, Core};
use coflow_core::{CoflowId, Nanos};
use coflow_proto::{CoflowOptions, Registration};
use coflow_sched::{Hooked, Hooks};

use super::{CAP, Harness, last_rate};

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

/// What the driver tells the policy of finishes and ended jobs, in order.
#[derive(Debug)]
struct Told(Arc<Mutex<Vec<(&'static str, CoflowId)>>>);

impl Hooks for Told {
    fn finished(&mut self, _now: Nanos, coflow: CoflowId) {
        self.0.lock().unwrap().push(("finished", coflow));
    }

    fn job_ended(&mut self, job: CoflowId) {
        self.0.lock().unwrap().push(("job ended", job));
    }
}

/// Status shows each coflow's job. A job ends, and the policy may forget it, once its last coflow
/// is unregistered (or its lease runs out), not before: a coflow can join a job only through a
/// parent still registered. A parent's job outlives the parent while its child is registered. A
/// coflow unregistered with a flow in flight leaves the policy before its job ends, so that its
/// bytes are not counted to the job after the job is forgotten.
#[test]
fn a_job_ends_with_its_last_registered_coflow() {
    let told = Arc::new(Mutex::new(Vec::new()));
    let policy = Hooked::new(coflow_sched::policy::by_name("aalo-job").unwrap(), Told(told.clone()));
    let cfg = CoordinatorConfig { policy: "aalo-job".into(), bypass_threshold_bytes: 0, ..Default::default() };
    let mut h = Harness::with_core(Core::new(cfg, Box::new(policy)), &[CAP; 2]);
    let parent = h.register(1, CoflowOptions::default());
    let child = h.register(1, CoflowOptions { parents: vec![parent], ..Default::default() });
    let lone = h.register(1, CoflowOptions::default());
    let leased = h.register(1, CoflowOptions { lease: Some(Nanos::from_secs(1)), ..Default::default() });
    let heard = || -> Vec<_> {
        let told = std::mem::take(&mut *told.lock().unwrap());
        told.into_iter().filter(|(what, _)| *what == "job ended").map(|(_, job)| job).collect()
    };
    let jobs: Vec<_> = h.core.coflows().map(|c| (c.id, c.job)).collect();
    assert_eq!(jobs, [(parent, parent), (child, parent), (lone, lone), (leased, leased)], "status shows jobs");
    h.core.handle_unregister(h.now, "", parent).unwrap();
    assert_eq!(heard(), [], "the child keeps the parent's job");
    h.core.handle_unregister(h.now, "", lone).unwrap();
    assert_eq!(heard(), [lone]);
    h.core.handle_unregister(h.now, "", child).unwrap();
    assert_eq!(heard(), [parent], "the child was the job's last coflow");
    for _ in 0..20 {
        h.advance(100);
        for m in 0..2 {
            h.heartbeat(m, vec![]);
        }
    }
    assert_eq!(heard(), [leased], "an expired lease ends the job too");
    assert_eq!(h.core.live_coflows(), 0);
    let running = h.register(1, CoflowOptions::default());
    h.put(running, "p", 0, 1_000_000).unwrap();
    h.get(running, "p", 1).unwrap();
    h.advance(10);
    told.lock().unwrap().clear();
    h.core.handle_unregister(h.now, "", running).unwrap();
    assert_eq!(*told.lock().unwrap(), [("finished", running), ("job ended", running)]);
}
