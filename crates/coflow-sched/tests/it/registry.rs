//! The policy registry: every name builds the policy of that name, with the capabilities its entry
//! claims, every list and message reads the table, and the README lists exactly its names.

use std::collections::BTreeSet;

use coflow_core::{Nanos, Rate};
use coflow_sched::policy::{self, List, MonteCarlo, Needs, Param, Params, REGISTRY};
use coflow_sched::{Bandwidth, Fabric, Link, Select, Wan};

#[test]
fn every_name_builds_the_policy_of_that_name() {
    let mut seen = BTreeSet::new();
    for e in REGISTRY {
        assert!(seen.insert(e.name), "{} is in the registry twice", e.name);
        assert_eq!(e.build(&Params::default()).name(), e.name);
        assert_eq!(policy::by_name(e.name).unwrap().name(), e.name);
        assert_eq!(policy::seeded(e.name, 7).unwrap().name(), e.name);
        assert_eq!(policy::entry_of(e.name).unwrap().name, e.name);
        assert_eq!(policy::parse_list(e.name).unwrap(), vec![e.name]);
    }
}

#[test]
fn capabilities_agree_with_the_built_policy() {
    for e in REGISTRY {
        let p = e.build(&Params::default());
        assert_eq!(p.admission_control(), e.admission_control, "{}: admission control", e.name);
        // Blind policies run behind the adapter that hands them no sizes.
        assert_eq!(format!("{p:?}").starts_with("Blinded"), e.blind, "{}: blind", e.name);
        assert!(!e.summary.is_empty() && !e.summary.contains('\n'), "{}: a one-line summary", e.name);
        assert!(e.summary.len() <= 110, "{}: a summary of one line, not a paragraph", e.name);
    }
    assert!(REGISTRY.iter().any(|e| e.blind) && REGISTRY.iter().any(|e| e.admission_control));
}

/// Parameters an entry does not list are not read: building with them changed gives the same
/// policy; the ones it lists change it.
#[test]
fn an_entry_reads_exactly_the_parameters_it_lists() {
    let base = Params::default();
    let mc = MonteCarlo { rounds: 64, depth: 3, breadth: 5, select: Select::MeanCost, one_draw: false };
    let changes = [
        (Param::Seed, Params { seed: 99, ..base }),
        (Param::Redraw, Params { redraw: Some(Nanos::from_millis(250)), ..base }),
        (Param::MonteCarlo, Params { mc, ..base }),
    ];
    for e in REGISTRY {
        let plain = format!("{:?}", e.build(&base));
        for (param, changed) in &changes {
            let other = format!("{:?}", e.build(changed));
            assert_eq!(plain != other, e.params.contains(param), "{}: {param:?} listed iff read", e.name);
        }
    }
    // One draw per node ignores the redraw interval.
    let e = policy::entry_of("siphon-mc").unwrap();
    let one = MonteCarlo { one_draw: true, ..MonteCarlo::default() };
    let redraw = Some(Nanos::from_millis(250));
    assert_eq!(
        format!("{:?}", e.build(&Params { redraw, mc: one, ..base })),
        format!("{:?}", e.build(&Params { mc: one, ..base }))
    );
}

#[test]
fn the_lists_are_the_tables_in_its_order() {
    let of = |list: List| -> Vec<&str> { REGISTRY.iter().filter(|e| e.list == list).map(|e| e.name).collect() };
    assert_eq!(policy::NAMES, of(List::All).as_slice());
    assert_eq!(policy::WAN_NAMES, of(List::WideArea).as_slice());
    assert_eq!(policy::JOB_NAMES, of(List::Jobs).as_slice());
    assert_eq!(policy::NAMES.len() + policy::WAN_NAMES.len() + policy::JOB_NAMES.len(), REGISTRY.len());
    assert_eq!(policy::parse_list("all").unwrap(), policy::NAMES);
    assert_eq!(policy::parse_list(" varys, all ,fair").unwrap()[0], "varys");
    // Each policy once, where first named, however often the list names it.
    let mixed = policy::parse_list("fair,all,varys,fair").unwrap();
    assert_eq!(mixed.len(), policy::NAMES.len());
    assert_eq!((mixed[0], mixed.iter().filter(|&&p| p == "varys").count()), ("fair", 1));
    assert_eq!(policy::parse_list("siphon-mc,aalo-job").unwrap(), vec!["siphon-mc", "aalo-job"]);
}

#[test]
fn an_unknown_name_is_an_error_listing_every_policy() {
    let err = policy::parse_list("varys,sebf").unwrap_err();
    assert_eq!(err.name, "sebf");
    let msg = err.to_string();
    assert!(msg.starts_with("unknown policy \"sebf\""), "{msg}");
    for e in REGISTRY {
        assert!(msg.contains(e.name), "{msg} lists {}", e.name);
    }
    assert!(policy::by_name("").is_err() && policy::build("all", &Params::default()).is_err());
}

#[test]
fn a_policy_serves_the_fabrics_its_entry_says_and_the_refusal_names_both() {
    let big = Fabric::big_switch(2, Rate::GBPS);
    let links = vec![
        Link { from: 0, to: 1, bandwidth: Bandwidth::Constant(1e6) },
        Link { from: 1, to: 0, bandwidth: Bandwidth::Constant(1e6) },
    ];
    let wan = Fabric::new(Wan::new(vec!["x".into(), "y".into()], links, vec![0, 1]).unwrap());
    for e in REGISTRY {
        assert!(e.serves(&big), "{} serves the big switch", e.name);
        assert_eq!(policy::check_serves(e.name, &big), Ok(()));
        assert_eq!(e.serves(&wan), e.needs == Needs::AnyFabric, "{}", e.name);
    }
    let err = policy::check_serves("pfp", &wan).unwrap_err();
    assert_eq!((err.policy.as_str(), err.fabric, err.needs), ("pfp", "wide area", Needs::BigSwitch));
    assert_eq!(
        err.to_string().split(';').next().unwrap(),
        "policy \"pfp\" cannot serve a wide area fabric: it assumes the big switch (a flow holds an ingress and an \
         egress port)"
    );
    assert!(err.to_string().contains("varys"), "{err}");
    // Names the registry does not know (a test's wrapper) are not refused.
    assert_eq!(policy::check_serves("probe", &wan), Ok(()));
}

/// The policy names of the README's policy tables (`| name | …` and `| policy | …`): the
/// backticked names of each row's first cell.
fn readme_policies(readme: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut in_table = false;
    for line in readme.lines() {
        if line.starts_with("| name | what it does |") || line.starts_with("| policy | what it does |") {
            in_table = true;
            continue;
        }
        if !line.starts_with('|') {
            in_table = false;
            continue;
        }
        if in_table && !line.starts_with("| ---") {
            let first = line.split('|').nth(1).unwrap_or_default();
            names.extend(first.split('`').skip(1).step_by(2).map(str::to_string));
        }
    }
    names
}

#[test]
fn the_readme_lists_exactly_the_registrys_policies() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md");
    let readme = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let listed = readme_policies(&readme);
    let registry: BTreeSet<String> = REGISTRY.iter().map(|e| e.name.to_string()).collect();
    let missing: Vec<_> = registry.difference(&listed).collect();
    let unknown: Vec<_> = listed.difference(&registry).collect();
    assert!(missing.is_empty() && unknown.is_empty(), "README lacks {missing:?} and lists unknown {unknown:?}");
}

#[test]
fn the_readme_check_reads_both_tables_and_only_their_first_cells() {
    let md = "| name | what it does |\n| --- | --- |\n| `a`, `b` | like `c` |\n\ntext `d`\n\n\
              | policy | what it does |\n| --- | --- |\n| `e` | x |\n| seed | `f` |\n";
    let got: Vec<String> = readme_policies(md).into_iter().collect();
    assert_eq!(got, ["a", "b", "e"]);
}

#[test]
fn siphon_mc_is_configured_from_the_params() {
    let mc = MonteCarlo { rounds: 64, depth: 3, breadth: 5, select: Select::MeanCost, one_draw: false };
    let redraw = Some(Nanos::from_millis(250));
    let cfg = Params { seed: 3, redraw, mc }.siphon_config(coflow_sched::Intra::Lfgf);
    assert_eq!((cfg.seed, cfg.coherence, cfg.rounds, cfg.depth, cfg.breadth), (3, redraw, 64, 3, 5));
    assert_eq!((cfg.select, cfg.intra), (Select::MeanCost, coflow_sched::Intra::Lfgf));
    let one =
        Params { seed: 3, redraw, mc: MonteCarlo { one_draw: true, ..mc } }.siphon_config(coflow_sched::Intra::Madd);
    assert_eq!(one.coherence, None, "one draw per node, whatever the redraw interval");
    // The defaults are SiphonConfig's.
    assert_eq!(Params::default().siphon_config(coflow_sched::Intra::Madd), coflow_sched::SiphonConfig::default());
}

/// An unscheduled mode (`tcp`) is no policy of the registry, so no list, `all` or simulator run
/// takes it; what stands for it in a simulator is one, for the big switch the live system runs;
/// every other name is simulated as itself, and the live system takes both kinds of names.
#[test]
fn an_unscheduled_mode_is_simulated_by_a_registry_policy() {
    let switch = Fabric::big_switch(2, Rate::GBPS);
    for u in policy::UNSCHEDULED {
        assert!(policy::entry_of(u.name).is_err(), "{} is both a policy and unscheduled", u.name);
        assert!(policy::parse_list(u.name).is_err(), "{}: not a policy a simulator runs", u.name);
        let by = policy::entry_of(u.simulated_by).unwrap_or_else(|e| panic!("{}: {e}", u.name));
        assert!(by.serves(&switch), "{} stands for {} on the big switch", by.name, u.name);
        assert_eq!(policy::simulated(u.name), u.simulated_by);
        assert_eq!(policy::unscheduled(u.name), Some(u));
        assert!(policy::check_live(u.name).is_ok());
        assert!(!u.summary.is_empty() && !u.summary.contains('\n') && u.summary.len() <= 110, "{}", u.name);
    }
    assert_eq!(policy::simulated(policy::TCP.name), "fair");
    for e in REGISTRY {
        assert_eq!(policy::simulated(e.name), e.name);
        assert!(policy::unscheduled(e.name).is_none() && policy::check_live(e.name).is_ok());
    }
    let e = policy::check_live("no-such-policy").unwrap_err().to_string();
    assert!(e.contains(", tcp, naive") && !e.contains("all"), "the live system's names: {e}");
    let e = policy::parse_list("no-such-policy").unwrap_err().to_string();
    assert!(e.contains("known policies: all, varys"), "a list's names: {e}");
}

/// An entry says it reads deadlines exactly when its rates depend on them: on a big switch of two
/// machines, a small coflow and a larger one behind it on the same port, the larger given a
/// deadline or not.
#[test]
fn an_entry_reads_deadlines_iff_its_rates_depend_on_them() {
    use coflow_core::{CoflowId, MachineId};
    use coflow_sched::{Allocation, Snapshot, SnapshotCoflow, SnapshotFlow};
    let fabric = Fabric::big_switch(2, Rate::from_bytes_per_sec(1000.0));
    let rates = |e: &policy::Entry, deadline: Option<Nanos>| -> Vec<f64> {
        let mut policy = e.build(&Params::default());
        let mut snap = Snapshot::default();
        snap.clear(policy.model());
        for (i, (size, deadline)) in [(1000.0, None), (4000.0, deadline)].into_iter().enumerate() {
            let id = CoflowId(i as u64 + 1);
            let arrival = Nanos::from_millis(i as u64);
            let c = SnapshotCoflow { id, job: id, arrival, deadline, weight: 1.0, width: 1, pending: 0 };
            let f = SnapshotFlow { src: MachineId(0), dst: MachineId(1), size, remaining: size };
            policy.handle_arrival(arrival, id);
            snap.push_coflow(&fabric, &c, &[f]);
        }
        let input = snap.input(Nanos::from_millis(5), &fabric);
        let mut out = Allocation::default();
        out.reset(&input);
        policy.poll_allocation(&input, &mut out);
        let mut rates = Vec::new();
        snap.flow_rates(&out, &mut rates);
        rates
    };
    let mut readers = 0;
    for e in REGISTRY.iter().filter(|e| e.serves(&fabric)) {
        let (without, with) = (rates(e, None), rates(e, Some(Nanos::from_secs(5))));
        assert_eq!(without != with, e.reads_deadlines, "{}: {without:?} without a deadline, {with:?} with", e.name);
        readers += usize::from(e.reads_deadlines);
    }
    assert_eq!(readers, 4, "varys-deadline, vc, edf and karuna");
}
