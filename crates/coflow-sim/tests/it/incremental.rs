//! Incremental decisions equal decisions from scratch.
//!
//! A policy is told what changed since its last decision (`Changes`) and may keep its own state
//! to decide at the cost of what changed. That must never change what it decides: for every
//! policy, on random instances, a simulation whose decisions are incremental gives exactly the
//! same result as one told at every decision to take everything as new (`SimConfig::from_scratch`).
//! The incremental run also checks, at every decision, that the engine's `Changes` are exactly
//! the difference between the input and the previous one, so a policy can trust them.

use std::collections::{BTreeMap, BTreeSet};

use coflow_core::{Bytes, Coflow, CoflowId, Flow, MachineId, Nanos, Rate, Workload};
use coflow_sched::{
    Allocation, Bandwidth, Fabric, Hooked, Hooks, Input, Link, Route, Scheduler, ServiceModel, Wan, policy,
};
use coflow_sim::{SimConfig, SimResult, WanConfig, simulate};
use rand::{Rng, SeedableRng};

/// What the instance holds besides flows.
#[derive(Clone, Copy, Debug)]
struct Shape {
    machines: u32,
    coflows: usize,
    max_flows: usize,
    deadlines: bool,
    dependencies: bool,
}

const SMALL: Shape = Shape { machines: 5, coflows: 8, max_flows: 5, deadlines: false, dependencies: false };
const MEDIUM: Shape = Shape { machines: 16, coflows: 60, max_flows: 24, deadlines: false, dependencies: false };

fn workload(seed: u64, s: Shape) -> Workload {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let coflows = (0..s.coflows)
        .map(|i| {
            let flows = (0..rng.gen_range(1..=s.max_flows))
                .map(|_| Flow {
                    src: MachineId(rng.gen_range(0..s.machines)),
                    dst: MachineId(rng.gen_range(0..s.machines)),
                    // Some sizes repeat, so that alike flows share legs and ties happen.
                    size: Bytes(rng.gen_range(1u64..=32) << 19),
                })
                .collect();
            let mut c = Coflow::new(CoflowId(i as u64), Nanos::from_millis(rng.gen_range(0..3000)), flows);
            if s.deadlines && rng.gen_bool(0.6) {
                c.deadline = Some(Nanos::from_millis(rng.gen_range(50..4000)));
            }
            if s.dependencies && i > 0 && rng.gen_bool(0.3) {
                c.parents.push(CoflowId(rng.gen_range(0..i as u64)));
            }
            c
        })
        .collect();
    Workload::new(s.machines, coflows).expect("a valid workload")
}

fn cfg(from_scratch: bool) -> SimConfig {
    SimConfig { check_invariants: true, from_scratch, ..SimConfig::big_switch(Rate::GBPS) }
}

/// Every policy of the registry that serves `fabric`.
fn names_serving(fabric: &Fabric) -> Vec<&'static str> {
    policy::REGISTRY.iter().filter(|e| e.serves(fabric)).map(|e| e.name).collect()
}

/// Every policy of the registry that serves the big switch.
fn big_switch_names() -> Vec<&'static str> {
    names_serving(&Fabric::big_switch(2, Rate::GBPS))
}

fn big_switch_pair(name: &str, w: &Workload) -> (SimResult, SimResult) {
    let incremental = simulate(w, Box::new(ChangesCheck::new(policy::by_name(name).unwrap())), &cfg(false)).unwrap();
    let scratch = simulate(w, policy::by_name(name).unwrap(), &cfg(true)).unwrap();
    (incremental, scratch)
}

fn assert_same(name: &str, what: &str, incremental: &SimResult, scratch: &SimResult) {
    assert!(incremental.decisions > 0, "{name} on {what}: no decision was made");
    // Whole results: every coflow's finish, rejection and flow times, and the counts of events
    // and decisions, to the bit.
    assert_eq!(incremental, scratch, "{name} on {what}: incremental and from-scratch decisions differ");
}

#[test]
fn incremental_equals_scratch_on_the_big_switch() {
    for seed in 0..6 {
        for (label, shape) in [("small", SMALL), ("medium", MEDIUM)] {
            let w = workload(seed, shape);
            for name in big_switch_names() {
                let (a, b) = big_switch_pair(name, &w);
                assert_same(name, &format!("{label} instance {seed}"), &a, &b);
            }
        }
    }
}

#[test]
fn incremental_equals_scratch_with_deadlines_and_dependencies() {
    for seed in 0..6 {
        for (label, shape) in [
            ("deadlines", Shape { deadlines: true, ..MEDIUM }),
            ("dependencies", Shape { dependencies: true, ..MEDIUM }),
            ("both, small", Shape { deadlines: true, dependencies: true, ..SMALL }),
        ] {
            let w = workload(100 + seed, shape);
            for name in big_switch_names() {
                let (a, b) = big_switch_pair(name, &w);
                assert_same(name, &format!("{label} instance {seed}"), &a, &b);
            }
        }
    }
    // The deadline instances are not vacuous: some coflows are rejected by admission control.
    let w = workload(100, Shape { deadlines: true, ..MEDIUM });
    let r = simulate(&w, policy::by_name("varys-deadline").unwrap(), &cfg(false)).unwrap();
    assert!(r.outcomes.iter().any(|o| o.rejected), "no coflow was rejected");
}

/// The one forwarding wrapper (`Hooked`) with no hooks changes nothing: every policy, admission
/// control and flow-finish gaps included, gives through it the result it gives alone.
#[test]
fn a_policy_hooked_to_nothing_gives_its_own_result() {
    let w = workload(100, Shape { deadlines: true, ..MEDIUM });
    for name in big_switch_names() {
        let alone = simulate(&w, policy::by_name(name).unwrap(), &cfg(false)).unwrap();
        let hooked = simulate(&w, Box::new(Hooked::new(policy::by_name(name).unwrap(), ())), &cfg(false)).unwrap();
        assert_eq!(hooked, alone, "{name} through Hooked");
        if policy::by_name(name).unwrap().admission_control() {
            assert!(hooked.outcomes.iter().any(|o| o.rejected), "{name}: no coflow was rejected");
        }
    }
}

/// Turns down the driver's offer of standing rates, so that the policy answers in full
/// allocations.
#[derive(Debug)]
struct NoStanding;

impl Hooks for NoStanding {
    fn decide(&mut self, policy: &mut dyn Scheduler, input: &Input<'_>, out: &mut Allocation) -> Option<Nanos> {
        out.standing.kept = false;
        policy.poll_allocation(input, out)
    }
}

/// A policy answering in standing rates keeps a leg's planned finish while its rate holds,
/// where a full allocation plans it again from what is left at every decision: the two differ
/// only by the rounding of those plans. Every policy that answers so gives, on random instances
/// (with deadlines and dependencies, and on the wide area without per-connection caps), every
/// coflow's finish within a microsecond of what it gives in full allocations, and at least one
/// policy does answer so.
#[test]
fn standing_rates_decide_as_full_allocations_up_to_rounding() {
    let mut answering = Vec::new();
    let mut compare = |name: &str, what: &str, w: &Workload, cfg: &SimConfig, seed: u64| {
        let standing = simulate(w, policy::seeded(name, seed).unwrap(), cfg).unwrap();
        let full = simulate(w, Box::new(Hooked::new(policy::seeded(name, seed).unwrap(), NoStanding)), cfg).unwrap();
        if standing == full {
            return;
        }
        answering.push(name.to_string());
        for (k, (a, b)) in standing.outcomes.iter().zip(&full.outcomes).enumerate() {
            assert_eq!(a.rejected, b.rejected, "{name} on {what}: coflow {k} rejected in one only");
            let (a, b) = (a.finish.map(|t| t.0 as i64), b.finish.map(|t| t.0 as i64));
            let close = match (a, b) {
                (Some(a), Some(b)) => (a - b).abs() <= 1_000,
                (a, b) => a == b,
            };
            assert!(close, "{name} on {what}: coflow {k} finished at {a:?} ns against {b:?} ns in full allocations");
        }
    };
    for seed in 0..4 {
        for (label, shape) in [("medium", MEDIUM), ("both", Shape { deadlines: true, dependencies: true, ..MEDIUM })] {
            let w = workload(600 + seed, shape);
            for name in big_switch_names() {
                compare(name, &format!("{label} instance {seed}"), &w, &cfg(false), seed);
            }
        }
        let shape = Shape { machines: 8, coflows: 20, max_flows: 8, deadlines: false, dependencies: false };
        let w = workload(700 + seed, shape);
        let wan = WanConfig {
            wan: mesh(3, shape.machines, seed),
            redraw: Nanos::from_millis(200),
            seed,
            multipath: seed % 2 == 1,
            per_connection: None,
            weather: None,
        };
        let on_wan = SimConfig { fabric: std::sync::Arc::new(wan.clone()), ..cfg(false) };
        for name in names_serving(&wan.fabric()) {
            compare(name, &format!("wide-area instance {seed}"), &w, &on_wan, seed);
        }
    }
    assert!(answering.iter().any(|n| n == "saath"), "saath answers in standing rates: {answering:?}");
}

/// A policy as it is, but saying it reads the loads, so that the engine brings every leg and load
/// forward at every event.
#[derive(Debug)]
struct ReadsLoads(Box<dyn Scheduler>);

impl Scheduler for ReadsLoads {
    fn name(&self) -> &'static str {
        self.0.name()
    }

    fn model(&self) -> ServiceModel {
        self.0.model()
    }

    fn flow_finish_gap(&self) -> Option<Nanos> {
        self.0.flow_finish_gap()
    }

    fn admission_control(&self) -> bool {
        self.0.admission_control()
    }

    fn reads_min_remaining(&self) -> bool {
        self.0.reads_min_remaining()
    }

    fn poll_rejected(&mut self, out: &mut Vec<CoflowId>) {
        self.0.poll_rejected(out);
    }

    fn handle_arrival(&mut self, now: Nanos, coflow: CoflowId) {
        self.0.handle_arrival(now, coflow);
    }

    fn handle_finished(&mut self, now: Nanos, coflow: CoflowId) {
        self.0.handle_finished(now, coflow);
    }

    fn handle_job_ended(&mut self, job: CoflowId) {
        self.0.handle_job_ended(job);
    }

    fn poll_allocation(&mut self, input: &Input<'_>, out: &mut Allocation) -> Option<Nanos> {
        self.0.poll_allocation(input, out)
    }
}

/// A policy that reads no loads has its legs brought forward only when read (at decisions and
/// as they finish) instead of at every event: every policy gives the result it gives with every
/// leg brought forward at every event, to the bit, with the invariants checked (each leg finishes
/// with nothing left), on the big switch and the wide area.
#[test]
fn legs_brought_forward_when_read_give_the_same_results() {
    let lazy: Vec<&str> =
        big_switch_names().into_iter().filter(|n| !policy::by_name(n).unwrap().reads_loads()).collect();
    assert!(lazy.contains(&"saath") && lazy.contains(&"philae"), "{lazy:?}");
    for seed in 0..4 {
        for (label, shape) in [("medium", MEDIUM), ("dependencies", Shape { dependencies: true, ..MEDIUM })] {
            let w = workload(400 + seed, shape);
            for name in big_switch_names() {
                let eager = simulate(&w, Box::new(ReadsLoads(policy::by_name(name).unwrap())), &cfg(false)).unwrap();
                let lazy = simulate(&w, policy::by_name(name).unwrap(), &cfg(false)).unwrap();
                assert_eq!(lazy, eager, "{name} on {label} instance {seed}");
            }
        }
    }
    let shape = Shape { machines: 8, coflows: 20, max_flows: 8, deadlines: false, dependencies: false };
    for seed in 0..2 {
        let w = workload(500 + seed, shape);
        let wan = WanConfig {
            wan: mesh(3, shape.machines, seed),
            redraw: Nanos::from_millis(200),
            seed,
            multipath: seed == 1,
            per_connection: None,
            weather: None,
        };
        let on_wan = SimConfig { fabric: std::sync::Arc::new(wan.clone()), ..cfg(false) };
        for name in names_serving(&wan.fabric()) {
            let eager = simulate(&w, Box::new(ReadsLoads(policy::seeded(name, seed).unwrap())), &on_wan).unwrap();
            let lazy = simulate(&w, policy::seeded(name, seed).unwrap(), &on_wan).unwrap();
            assert_eq!(lazy, eager, "{name} on wide-area instance {seed}");
        }
    }
}

/// A full mesh of `dcs` datacenters with machines spread over them, links of fluctuating
/// bandwidth.
fn mesh(dcs: u32, machines: u32, seed: u64) -> Wan {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mib = (1u64 << 20) as f64;
    let mut links = Vec::new();
    for from in 0..dcs {
        for to in 0..dcs {
            if from != to {
                let lo = rng.gen_range(5.0..60.0) * mib;
                links.push(Link { from, to, bandwidth: Bandwidth::Uniform(lo, lo * 3.0) });
            }
        }
    }
    let names = (0..dcs).map(|d| format!("dc{d}")).collect();
    Wan::new(names, links, Wan::spread(dcs, machines, None)).expect("a valid topology")
}

#[test]
fn incremental_equals_scratch_on_the_wide_area() {
    for seed in 0..4 {
        let shape = Shape { machines: 8, coflows: 20, max_flows: 8, deadlines: seed % 2 == 1, dependencies: seed >= 2 };
        let w = workload(200 + seed, shape);
        for multipath in [false, true] {
            for per_connection in [None, Some(Nanos::from_millis(300))] {
                let wan = WanConfig {
                    wan: mesh(3, shape.machines, seed),
                    redraw: Nanos::from_millis(200),
                    seed,
                    multipath,
                    per_connection,
                    weather: None,
                };
                for name in names_serving(&wan.fabric()) {
                    let inc = ChangesCheck::new(policy::seeded(name, seed).unwrap());
                    let a = simulate(
                        &w,
                        Box::new(inc),
                        &SimConfig { fabric: std::sync::Arc::new(wan.clone()), ..cfg(false) },
                    )
                    .unwrap();
                    let b = simulate(
                        &w,
                        policy::seeded(name, seed).unwrap(),
                        &SimConfig { fabric: std::sync::Arc::new(wan.clone()), ..cfg(true) },
                    )
                    .unwrap();
                    let what = format!("wide-area instance {seed}, multipath {multipath}, {per_connection:?}");
                    assert_same(name, &what, &a, &b);
                }
            }
        }
    }
}

/// At every decision of `pfp`, `edf` and `fair`, whose decisions depend on the input alone (no
/// order or queue kept from earlier inputs), the policy deciding after the changes decides as a
/// fresh instance of it does on the same input.
#[test]
fn a_decision_after_changes_equals_a_fresh_policys() {
    for seed in 0..4 {
        let w = workload(300 + seed, Shape { deadlines: true, ..MEDIUM });
        for name in ["pfp", "edf", "fair"] {
            let check = Hooked::new(policy::by_name(name).unwrap(), FreshCheck { name, checked: 0 });
            let r = simulate(&w, Box::new(check), &cfg(false)).unwrap();
            assert!(r.outcomes.iter().all(|o| o.finish.is_some()), "{name}: a coflow never finished");
        }
    }
}

/// Compares each decision of the policy it is hooked to with a fresh instance's on the same input.
#[derive(Debug)]
struct FreshCheck {
    name: &'static str,
    checked: u64,
}

impl Hooks for FreshCheck {
    fn decide(&mut self, policy: &mut dyn Scheduler, input: &Input<'_>, out: &mut Allocation) -> Option<Nanos> {
        let wake = policy.poll_allocation(input, out);
        let fresh_input = Input { changes: coflow_sched::Changes::everything(), ..*input };
        let mut fresh = Allocation::default();
        fresh.reset(&fresh_input);
        let fresh_wake = policy::by_name(self.name).unwrap().poll_allocation(&fresh_input, &mut fresh);
        // The order of extras is the policy's business; the set of them is the decision.
        let extras = |a: &Allocation| {
            let mut x = a.leg_extras().to_vec();
            x.sort_by_key(|e| e.0);
            x
        };
        assert_eq!(extras(out), extras(&fresh), "{}: extras differ at {}", self.name, input.now);
        // Per route, whether written as a rate or as a share of a resource.
        let routes = |a: &Allocation| (0..input.routes.len()).map(|i| a.rate_of_route(i)).collect::<Vec<_>>();
        assert_eq!(
            (&out.coflow_rate, routes(out)),
            (&fresh.coflow_rate, routes(&fresh)),
            "{}: decision {} at {} differs from a fresh policy's",
            self.name,
            self.checked,
            input.now
        );
        assert_eq!(wake, fresh_wake);
        self.checked += 1;
        wake
    }
}

/// Checks, at every decision of the policy it is hooked to, that the input's `Changes` say
/// exactly how it differs from the previous input.
#[derive(Debug)]
struct ChangesCheck {
    prev: Option<Seen>,
    /// Since the last decision: the coflows the driver announced by `handle_arrival`, and those
    /// it announced by `handle_finished` or the policy rejected.
    arrived: Vec<CoflowId>,
    finished: Vec<CoflowId>,
}

/// What an input held, by stable names.
#[derive(Debug, PartialEq)]
struct Seen {
    coflows: BTreeSet<CoflowId>,
    /// Every leg of every active coflow, and whether it is active.
    legs: BTreeMap<(CoflowId, u32), bool>,
    /// Every leg's scaled value and resources, and every coflow's scaled load on each resource,
    /// as bits.
    scaled: BTreeMap<(CoflowId, u32), (u64, Vec<u32>)>,
    loads: BTreeMap<(CoflowId, u32), u64>,
    /// Every route's flows and index.
    routes: BTreeMap<Route, (u32, usize)>,
    capacities: Vec<f64>,
}

impl Seen {
    fn of(input: &Input<'_>) -> Seen {
        let (mut legs, mut scaled, mut loads) = (BTreeMap::new(), BTreeMap::new(), BTreeMap::new());
        for c in input.coflows {
            for (offset, leg) in input.legs_of(c).iter().enumerate() {
                legs.insert((c.id, offset as u32), leg.is_active());
                scaled.insert((c.id, offset as u32), (leg.scaled.to_bits(), leg.route.hops().to_vec()));
            }
            for &(r, b) in &input.loads[c.loads.clone()] {
                loads.insert((c.id, r), b.to_bits());
            }
        }
        Seen {
            coflows: input.coflows.iter().map(|c| c.id).collect(),
            legs,
            scaled,
            loads,
            routes: input.routes.iter().enumerate().map(|(i, r)| (r.route, (r.flows, i))).collect(),
            capacities: input.fabric.capacities().to_vec(),
        }
    }
}

impl ChangesCheck {
    fn new(policy: Box<dyn Scheduler>) -> Hooked<ChangesCheck> {
        Hooked::new(policy, ChangesCheck { prev: None, arrived: Vec::new(), finished: Vec::new() })
    }

    fn check(&self, model: ServiceModel, names_legs: bool, input: &Input<'_>, now: &Seen) {
        let ch = input.changes;
        let Some(prev) = &self.prev else {
            assert!(ch.everything, "the first decision must take everything as new");
            return;
        };
        if ch.everything {
            assert!(ch.arrived.is_empty() && ch.finished.is_empty() && ch.legs_finished.is_empty());
            assert!(ch.reshaped.is_empty() && ch.reshaped_legs.is_empty());
            assert!(ch.routes.is_empty() && !ch.capacities);
            return;
        }
        let at = input.now;
        let arrived: BTreeSet<CoflowId> = ch.arrived.iter().copied().collect();
        let finished: BTreeSet<CoflowId> = ch.finished.iter().copied().collect();
        assert_eq!(arrived.len(), ch.arrived.len(), "a coflow arrived twice at {at}");
        assert_eq!(finished.len(), ch.finished.len(), "a coflow finished twice at {at}");
        // The lists say what the `handle_*` calls and the rejections said, in the same order.
        assert_eq!(ch.arrived, self.arrived, "arrivals at {at}");
        assert_eq!(ch.finished, self.finished, "departures at {at}");
        if model == ServiceModel::Proportional {
            // The route model lists no coflows in its input; the lists are the driver's.
            let expected: BTreeSet<CoflowId> =
                prev.coflows.union(&arrived).filter(|c| !finished.contains(c)).copied().collect();
            assert_eq!(expected, now.coflows, "coflows at {at}: {ch:?}");
        }
        // Legs: one listed iff it was active (or new) and is no longer.
        let listed: BTreeSet<(CoflowId, u32)> = ch.legs_finished.iter().copied().collect();
        assert_eq!(listed.len(), ch.legs_finished.len(), "a leg finished twice at {at}");
        for (&id, &active) in &now.legs {
            let before = prev.legs.get(&id).copied().unwrap_or(true);
            assert_eq!(before && !active, listed.contains(&id), "leg {id:?} at {at}: {ch:?}");
        }
        for id in &listed {
            assert!(!now.legs.get(id).copied().unwrap_or(false), "leg {id:?} listed but active at {at}");
            assert!(prev.legs.get(id).copied().unwrap_or(true), "leg {id:?} listed twice over decisions at {at}");
            assert!(prev.coflows.contains(&id.0) || arrived.contains(&id.0), "leg of an unknown coflow at {at}");
        }
        // A coflow not listed as reshaped kept every scaled value but those of its finished legs,
        // and its loads but where they cross, which only fell (under its rate alone only its
        // scale fell): what a policy's kept largest relies on.
        let reshaped: BTreeSet<CoflowId> = ch.reshaped.iter().copied().collect();
        assert_eq!(reshaped.len(), ch.reshaped.len(), "a coflow reshaped twice at {at}");
        let crossed: BTreeSet<(CoflowId, u32)> = listed
            .iter()
            .flat_map(|&(c, o)| now.scaled.get(&(c, o)).into_iter().flat_map(move |l| l.1.iter().map(move |&r| (c, r))))
            .collect();
        // For a policy that reads them, within a reshaped coflow only the legs listed as reshaped
        // moved (or finished): what its largest kept leg by leg relies on. Others get no list.
        let moved: BTreeSet<(CoflowId, u32)> = ch.reshaped_legs.iter().copied().collect();
        assert!(names_legs || moved.is_empty(), "legs listed as reshaped for a policy that reads none at {at}");
        assert_eq!(moved.len(), ch.reshaped_legs.len(), "a leg reshaped twice at {at}");
        for &(c, o) in &moved {
            assert!(reshaped.contains(&c), "leg {:?} reshaped in a coflow not reshaped at {at}", (c, o));
        }
        for (&(c, o), (bits, _)) in &now.scaled {
            let may_move = moved.contains(&(c, o)) || listed.contains(&(c, o)) || !names_legs && reshaped.contains(&c);
            if !may_move && let Some((before, _)) = prev.scaled.get(&(c, o)) {
                let whose =
                    if reshaped.contains(&c) { "a leg not listed as reshaped" } else { "a coflow not reshaped" };
                assert_eq!(before, bits, "leg {:?} of {whose} moved at {at}", (c, o));
            }
        }
        for (&(c, r), bits) in &now.loads {
            if !reshaped.contains(&c)
                && let Some(before) = prev.loads.get(&(c, r))
            {
                if crossed.contains(&(c, r)) {
                    let (now, before) = (f64::from_bits(*bits), f64::from_bits(*before));
                    assert!(now <= before, "load of {c:?} on {r} rose from {before} to {now}, not reshaped, at {at}");
                } else {
                    assert_eq!(before, bits, "load of {c:?} on {r} moved, not reshaped, at {at}");
                }
            }
        }
        // Routes: sorted, each once, and every route whose flows or index changed is listed.
        assert!(ch.routes.windows(2).all(|w| w[0] < w[1]), "routes not sorted or repeated at {at}");
        let keys: BTreeSet<Route> = prev.routes.keys().chain(now.routes.keys()).copied().collect();
        for r in keys {
            if prev.routes.get(&r) != now.routes.get(&r) {
                assert!(ch.routes.binary_search(&r).is_ok(), "route {r:?} changed unlisted at {at}");
            }
        }
        if prev.capacities != now.capacities {
            assert!(ch.capacities, "capacities changed unlisted at {at}");
        }
    }
}

impl Hooks for ChangesCheck {
    fn rejected(&mut self, coflows: &[CoflowId]) {
        self.finished.extend_from_slice(coflows);
    }

    fn arrival(&mut self, _now: Nanos, coflow: CoflowId) {
        self.arrived.push(coflow);
    }

    fn finished(&mut self, _now: Nanos, coflow: CoflowId) {
        self.finished.push(coflow);
    }

    fn decide(&mut self, policy: &mut dyn Scheduler, input: &Input<'_>, out: &mut Allocation) -> Option<Nanos> {
        let seen = Seen::of(input);
        self.check(policy.model(), policy.reads_reshaped_legs(), input, &seen);
        self.arrived.clear();
        self.finished.clear();
        self.prev = Some(seen);
        policy.poll_allocation(input, out)
    }
}
