//! The decision-time bench stops every policy after the decisions it times, whichever way the
//! policy answers (coflow rates, extras, shares or standing rates).

use coflow_core::Rate;
use coflow_sched::{Fabric, policy};
use coflow_sim::SimConfig;
use coflow_sim::bench::{bench_policy, concurrent_workload};

#[test]
fn every_policy_is_benched_and_stopped_after_its_timed_decisions() {
    let replay = concurrent_workload(6, 2).unwrap();
    let concurrent = [concurrent_workload(12, 1).unwrap()];
    let cfg = SimConfig::big_switch(Rate::GBPS);
    let fabric = Fabric::big_switch(150, Rate::GBPS);
    for entry in policy::REGISTRY.iter().filter(|e| e.serves(&fabric)) {
        let build = || policy::by_name(entry.name).unwrap();
        let b = bench_policy(entry.name, &build, &replay, &concurrent, 2, &cfg).unwrap();
        assert!(b.decisions > 0, "{}: no decision in the replay", entry.name);
        let c = &b.concurrency[0];
        assert_eq!(c.coflows, 12);
        assert!(c.decisions <= 2, "{}: {} decisions timed, 2 asked for", entry.name, c.decisions);
    }
}
