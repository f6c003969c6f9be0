//! Which policies the coordinator accepts: every name of the registry on its big switch, and no
//! policy on a fabric it cannot serve.

use coflow_coordinator::{CoordinatorConfig, check_policy};
use coflow_sched::policy::{Needs, REGISTRY};
use coflow_sched::{Bandwidth, Fabric, Link, Wan};

/// Two datacenters with one machine each, joined both ways.
fn wide_area() -> Fabric {
    let links = vec![
        Link { from: 0, to: 1, bandwidth: Bandwidth::Constant(100.0) },
        Link { from: 1, to: 0, bandwidth: Bandwidth::Constant(100.0) },
    ];
    Fabric::new(Wan::new(vec!["a".into(), "b".into()], links, vec![0, 1]).expect("a valid topology"))
}

#[test]
fn every_registered_policy_is_accepted_on_the_big_switch() {
    for e in REGISTRY {
        let cfg = CoordinatorConfig { policy: e.name.into(), ..Default::default() };
        cfg.validate().unwrap_or_else(|err| panic!("{}: {err}", e.name));
    }
    let err = CoordinatorConfig { policy: "sebf".into(), ..Default::default() }.validate().unwrap_err();
    assert_eq!(err.field, "policy");
    for e in REGISTRY {
        assert!(err.reason.contains(e.name), "the error lists {}: {}", e.name, err.reason);
    }
}

#[test]
fn a_policy_is_refused_on_a_fabric_it_cannot_serve_naming_both() {
    let wan = wide_area();
    let mut refused = 0;
    for e in REGISTRY {
        match (e.needs, check_policy(e.name, &wan)) {
            (Needs::AnyFabric, r) => assert_eq!(r, Ok(()), "{} serves any fabric", e.name),
            (Needs::BigSwitch, Err(err)) => {
                assert_eq!(err.field, "policy");
                assert!(err.reason.contains(&format!("{:?}", e.name)), "{}", err.reason);
                assert!(err.reason.contains("wide area"), "{}", err.reason);
                refused += 1;
            }
            (Needs::BigSwitch, Ok(())) => panic!("{} needs the big switch but was accepted", e.name),
        }
        assert_eq!(check_policy(e.name, &Fabric::big_switch(2, coflow_core::Rate::GBPS)), Ok(()), "{}", e.name);
    }
    assert!(refused > 0, "no policy needs the big switch, so nothing was refused");
}
