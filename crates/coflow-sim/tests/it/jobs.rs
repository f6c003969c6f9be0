//! Multi-stage jobs: coflows released when their parents finish, and job completion times,
//! computed by hand on a chain and a diamond.

use coflow_core::{Coflow, CoflowId, Nanos, Workload};
use coflow_sched::policy;
use coflow_sim::{JobFigures, SimConfig, SimResult, Summary, simulate};

use crate::support::{assert_ms, ccts_ms, coflow, flow, run, unit_rate};

/// `coflow` with these parents.
fn child(id: u64, at_ms: u64, parents: &[u64], flows: Vec<coflow_core::Flow>) -> Coflow {
    let mut c = coflow(id, at_ms, flows);
    c.parents = parents.iter().map(|&p| CoflowId(p)).collect();
    c
}

fn ms(t: Nanos) -> f64 {
    t.as_secs_f64() * 1e3
}

fn releases_ms(r: &SimResult) -> Vec<f64> {
    r.outcomes.iter().map(|o| ms(o.release)).collect()
}

/// A chain 1 → 2 → 4 beside an independent coflow 3, and 5, a child of 1 arriving after 1 has
/// finished (a port moves one unit per ms):
/// - 1 (0→1, 4 units) runs from 0 to 4;
/// - 2 arrives at 1 but waits for 1: released at 4, 3 units on ports 1→2, done at 7;
/// - 4 arrives at 0 but waits for 2: released at 7, 1 unit 2→0, done at 8;
/// - 3 (2→3, 2 units, no parents) runs from 0 to 2 on ports no one else uses then;
/// - 5 arrives at 20, after its parent: released at 20, 1 unit 3→0, done at 21.
///
/// Jobs: {1, 2, 4, 5} from 0 to 21 and {3} from 0 to 2.
fn chain() -> Vec<Coflow> {
    vec![
        coflow(1, 0, vec![flow(0, 1, 4)]),
        child(2, 1, &[1], vec![flow(1, 2, 3)]),
        coflow(3, 0, vec![flow(2, 3, 2)]),
        child(4, 0, &[2], vec![flow(2, 0, 1)]),
        child(5, 20, &[1], vec![flow(3, 0, 1)]),
    ]
}

#[test]
fn a_chain_releases_each_stage_when_its_parent_finishes() {
    for policy in ["varys", "fair", "fifo", "aalo", "aalo-job", "sincronia"] {
        let r = run(policy, 4, unit_rate(), chain());
        // Workload order is by arrival, then id: 1, 3, 4, 2, 5.
        let ids: Vec<u64> = r.outcomes.iter().map(|o| o.id.get()).collect();
        assert_eq!(ids, [1, 3, 4, 2, 5], "{policy}");
        assert_ms(&releases_ms(&r), &[0.0, 0.0, 7.0, 4.0, 20.0]);
        assert_ms(&ccts_ms(&r), &[4.0, 2.0, 1.0, 3.0, 1.0]);
        let s = Summary::of(&r, None);
        assert_eq!((s.jobs, s.jobs_completed), (2, 2), "{policy}");
        assert!((s.job_avg_jct_s * 1e3 - (21.0 + 2.0) / 2.0).abs() < 1e-3, "{policy}: {}", s.job_avg_jct_s);
        assert!((s.job_p95_jct_s * 1e3 - 21.0).abs() < 1e-3, "{policy}: {}", s.job_p95_jct_s);
    }
}

/// A child released at the instant its parent's last flow ends, on that very route: the route
/// empties and fills again between two decisions, and the child is served like any arrival
/// (1 moves 4 units 0→1 from 0 to 4 ms; 2, arriving at 0, is released at 4 and moves 3 units on
/// the same ports, done at 7), under every policy.
#[test]
fn a_child_on_the_route_its_parent_just_emptied_is_served() {
    let w = || vec![coflow(1, 0, vec![flow(0, 1, 4)]), child(2, 0, &[1], vec![flow(0, 1, 3)])];
    for &policy in policy::NAMES {
        let r = run(policy, 2, unit_rate(), w());
        assert_ms(&releases_ms(&r), &[0.0, 4.0]);
        assert_ms(&ccts_ms(&r), &[4.0, 3.0]);
    }
}

/// A diamond: 1 (0→1, 2 units) feeds 2 (1→2, 3 units) and 3 (1→3, 1 unit), which both feed 4
/// (3→0, 1 unit); all arrive at 0. 2 and 3 are released at 2 and share machine 1's sending port:
/// - `varys` serves 3 first (smaller bottleneck): 3 ends at 3, then 2 at 6;
/// - `fair` halves the port: 3 ends at 4, then 2 alone at 6.
///
/// 4 is released at 6 and ends at 7: the job takes 7 ms either way.
#[test]
fn a_diamond_waits_for_both_parents() {
    let diamond = || {
        vec![
            coflow(1, 0, vec![flow(0, 1, 2)]),
            child(2, 0, &[1], vec![flow(1, 2, 3)]),
            child(3, 0, &[1], vec![flow(1, 3, 1)]),
            child(4, 0, &[2, 3], vec![flow(3, 0, 1)]),
        ]
    };
    for (policy, ccts) in [("varys", [2.0, 4.0, 1.0, 1.0]), ("fair", [2.0, 4.0, 2.0, 1.0])] {
        let r = run(policy, 4, unit_rate(), diamond());
        assert_ms(&releases_ms(&r), &[0.0, 2.0, 2.0, 6.0]);
        assert_ms(&ccts_ms(&r), &ccts);
        let jobs = JobFigures::of(&r);
        assert_eq!((jobs.jobs, jobs.completed), (1, 1));
        assert!((jobs.avg_jct_s * 1e3 - 7.0).abs() < 1e-3, "{policy}: {jobs:?}");
    }
}

/// Children of a coflow that admission control rejects are never released: their input never
/// arrives. They are reported unfinished (not rejected), and their job incomplete.
#[test]
fn children_of_a_rejected_coflow_never_run() {
    let mut parent = coflow(1, 0, vec![flow(0, 1, 4)]);
    // 4 units need 4 ms; a deadline of 1 ms cannot be met.
    parent.deadline = Some(Nanos::from_millis(1));
    let coflows = vec![
        parent,
        child(2, 0, &[1], vec![flow(1, 2, 1)]),
        child(3, 5, &[2], vec![flow(2, 3, 1)]),
        coflow(4, 0, vec![flow(2, 3, 1)]),
    ];
    let r = run("varys-deadline", 4, unit_rate(), coflows);
    let state: Vec<(u64, bool, bool)> =
        r.outcomes.iter().map(|o| (o.id.get(), o.rejected, o.finish.is_some())).collect();
    assert_eq!(state, [(1, true, false), (2, false, false), (4, false, true), (3, false, false)]);
    let s = Summary::of(&r, None);
    assert_eq!((s.completed, s.rejected, s.jobs, s.jobs_completed), (1, 1, 2, 1));
    assert!((s.job_avg_jct_s * 1e3 - 1.0).abs() < 1e-3, "{}", s.job_avg_jct_s);
}

#[test]
fn dependencies_replay_identically() {
    let w = Workload::new(4, chain()).unwrap();
    let cfg = SimConfig { check_invariants: true, ..SimConfig::big_switch(unit_rate()) };
    for name in ["varys", "fair", "aalo-job"] {
        let a = simulate(&w, policy::by_name(name).unwrap(), &cfg).unwrap();
        let b = simulate(&w, policy::by_name(name).unwrap(), &cfg).unwrap();
        assert_eq!(a, b, "{name}");
    }
}

#[test]
fn without_dependencies_a_job_is_a_coflow() {
    let r = run("varys", 4, unit_rate(), vec![coflow(1, 0, vec![flow(0, 1, 4)]), coflow(2, 0, vec![flow(0, 2, 2)])]);
    let s = Summary::of(&r, None);
    assert_eq!((s.jobs, s.jobs_completed), (2, 2));
    assert!((s.job_avg_jct_s - s.avg_cct_s).abs() < 1e-12 && (s.job_p95_jct_s - s.p95_cct_s).abs() < 1e-12);
}
