//! The leg model's tests: its time arithmetic against the plain formulas, standing rates and
//! dust by hand, legs grouped as the plain grouping gives them, and extras' exact finishes.

use std::collections::BTreeMap;

use coflow_core::Flow;
use proptest::prelude::*;

use super::*;

#[test]
fn ceil_is_the_standard_ceil_at_the_edges() {
    let edges = [
        0.0,
        -0.0,
        f64::MIN_POSITIVE,
        0.5,
        1.0,
        1.0 + f64::EPSILON,
        2.5,
        4503599627370495.5,
        4503599627370496.0,
        4503599627370497.0,
        1e300,
        -1.5,
        f64::INFINITY,
        f64::NEG_INFINITY,
    ];
    for x in edges {
        assert_eq!(ceil(x).to_bits(), x.ceil().to_bits(), "ceil({x})");
        if !x.is_nan() {
            assert_eq!(whole(x.ceil()), x.ceil() as u64, "whole({x})");
        }
    }
    for x in [9223372036854775807.0, 9223372036854775808.0, 18446744073709551615.0, 1e20] {
        assert_eq!(whole(x), x as u64, "whole({x})");
    }
    assert!(ceil(f64::NAN).is_nan());
}

/// What `arrive` must build for a coflow on the big switch, grouped the plain way: one leg per
/// (sender, receiver, size) with its flow count, in that order, and each resource's bytes
/// summed in the legs' order, resources ascending.
#[allow(clippy::type_complexity)]
fn grouped(fabric: &Fabric, flows: &[Flow]) -> (Vec<(u32, u32, f64, u32)>, Vec<(ResourceId, f64)>) {
    let mut pairs: BTreeMap<(u32, u32, u64), u32> = BTreeMap::new();
    for f in flows.iter().filter(|f| f.crosses_fabric()) {
        *pairs.entry((f.src.0, f.dst.0, f.size.get())).or_default() += 1;
    }
    let mut loads: BTreeMap<ResourceId, f64> = BTreeMap::new();
    let mut legs = Vec::new();
    for (&(s, d, size), &n) in &pairs {
        let bytes = size as f64 * n as f64;
        for &r in fabric.route(MachineId(s), MachineId(d)).hops() {
            *loads.entry(r).or_default() += bytes;
        }
        legs.push((s, d, bytes, n));
    }
    (legs, loads.into_iter().collect())
}

/// Standing rates, computed by hand: a leg keeps its plan while its rate holds (and its
/// remaining bytes, not read by the policy, are left as they were); a change plans it again
/// from what its plan leaves it; a reset stops the legs it does not list and keeps the plan of one
/// listed at its rate; a rate of zero stops a leg; and a leg that finishes does so with
/// nothing left.
#[test]
fn legs_at_standing_rates_keep_their_plans_until_their_rates_change() {
    let fabric = Fabric::big_switch(2, coflow_core::Rate::GBPS);
    let mut model = LegModel { lazy: true, ..LegModel::default() };
    let flow = |s, d, size| Flow { src: MachineId(s), dst: MachineId(d), size: coflow_core::Bytes(size) };
    let c = Coflow::new(CoflowId(0), Nanos::ZERO, vec![flow(0, 1, 1000), flow(1, 0, 2000)]);
    model.arrive(&fabric, &c, 0, &Split::new());
    let (a, b) = (0, 1);
    assert_eq!((model.legs[a].bytes, model.legs[b].bytes), (1000.0, 2000.0));
    let secs = |s: u64| Nanos::from_secs(s);
    let decide = |model: &mut LegModel, at: u64, reset: bool, changed: &[(usize, f64)]| {
        model.sync_all(secs(at));
        let mut alloc = Allocation::keeping_standing();
        alloc.coflow_rate = vec![0.0];
        alloc.standing.on = true;
        alloc.standing.reset = reset;
        alloc.standing.changed.extend_from_slice(changed);
        model.apply(&alloc);
    };
    // 100 B/s each: 10 s and 20 s.
    decide(&mut model, 0, false, &[(a, 100.0), (b, 100.0)]);
    assert_eq!((model.leg_finish[a], model.leg_finish[b]), (secs(10), secs(20)));
    // At 2 s, b doubles: its plan leaves it 1800 bytes, at 200 B/s 9 s more; a keeps its plan.
    // Neither leg is brought forward.
    decide(&mut model, 2, false, &[(b, 200.0)]);
    assert_eq!((model.leg_finish[a], model.leg_finish[b]), (secs(10), secs(11)));
    assert_eq!((model.legs[a].scaled, model.legs[b].scaled), (1.0, 1.0));
    assert_eq!(model.steady_of(b).map(|at| model.steady[at].left), Some(1800.0));
    assert_eq!(model.extra_ids, vec![CoflowId(0)], "b moved apart from its coflow's scale");
    // At 4 s, a reset lists b alone at its rate: a stops with 600 bytes left, b keeps 11 s.
    decide(&mut model, 4, true, &[(b, 200.0)]);
    assert_eq!((model.leg_finish[a], model.leg_finish[b]), (Nanos::MAX, secs(11)));
    assert!((model.legs[a].scaled * 1000.0 - 600.0).abs() < 1e-9);
    assert_eq!(model.steady.len(), 1);
    // At 5 s, b stops with 1200 bytes left; at 6 s, a takes 600 B/s and ends at 7 s.
    decide(&mut model, 5, false, &[(b, 0.0)]);
    assert_eq!((model.leg_finish[b], model.next_time()), (Nanos::MAX, Nanos::MAX));
    assert!((model.legs[b].scaled * 2000.0 - 1200.0).abs() < 1e-9);
    decide(&mut model, 6, false, &[(a, 600.0)]);
    assert_eq!(model.next_time(), secs(7));
    model.sync(secs(7));
    let (mut done, mut flow_time) = (Vec::new(), vec![0.0]);
    assert!(model.complete(true, &mut done, &mut flow_time));
    assert_eq!((model.legs[a].is_active(), model.steady.len()), (false, 0));
    assert_eq!(model.legs_finished, vec![(CoflowId(0), 0)]);
}

/// Dust is swept once a leg comes within `DUST` of its end at a rate, however many sweeps
/// found nothing before; a sweep after time passed with nothing at a rate has nothing to
/// find, and is skipped.
#[test]
fn dust_is_swept_after_legs_move_and_not_looked_for_when_nothing_moved() {
    let fabric = Fabric::big_switch(2, coflow_core::Rate::GBPS);
    let mut model = LegModel::default();
    let flow = Flow { src: MachineId(0), dst: MachineId(1), size: coflow_core::Bytes(1000) };
    model.arrive(&fabric, &Coflow::new(CoflowId(0), Nanos::ZERO, vec![flow]), 0, &Split::new());
    let (mut done, mut flow_time) = (Vec::new(), vec![0.0]);
    let rate = |model: &mut LegModel, at: Nanos, sigma: f64| {
        model.sync_all(at);
        let mut alloc = Allocation::default();
        alloc.coflow_rate = vec![sigma];
        model.apply(&alloc);
    };
    // A fraction 1e-4 a second: done at 10,000 s, planned a nanosecond later by rounding.
    rate(&mut model, Nanos::ZERO, 1e-4);
    model.sync(Nanos::from_secs(6_000));
    assert!(!model.retire_dust(&mut done, &mut flow_time), "0.4 of its bytes are left");
    // Served nothing from 6,000 s: time passes, nothing moves, nothing is looked for.
    rate(&mut model, Nanos::from_secs(6_000), 0.0);
    model.sync(Nanos::from_secs(8_000));
    assert!(!model.dusty, "nothing moved since the last sweep");
    assert!(!model.retire_dust(&mut done, &mut flow_time));
    // Served again at a fraction 1/4,000 a second of what is left: a nanosecond before its
    // end, what is left is dust, which the sweep finds.
    rate(&mut model, Nanos::from_secs(8_000), 1.0 / 4_000.0);
    model.sync(Nanos(Nanos::from_secs(12_000).0 - 1));
    assert!(model.retire_dust(&mut done, &mut flow_time), "{} of its bytes left", model.coflows[0].scale);
    assert_eq!(done, vec![(0, CoflowId(0))]);
}

proptest! {
    /// Coflow after coflow (so that the scratch kept between arrivals must be clean), the legs
    /// and loads `arrive` builds are those of the plain grouping, to the bit, and each leg's
    /// load slots point at its own resources.
    #[test]
    fn arrive_groups_alike_flows_into_legs(
        coflows in proptest::collection::vec(
            proptest::collection::vec((0u32..6, 0u32..6, prop_oneof![Just(0u64), 1u64..4, 1u64..1_000_000]), 0..40),
            1..6,
        ),
    ) {
        let fabric = Fabric::big_switch(6, coflow_core::Rate::GBPS);
        let mut model = LegModel::default();
        for (k, flows) in coflows.iter().enumerate() {
            let flows: Vec<Flow> = flows
                .iter()
                .map(|&(s, d, size)| Flow { src: MachineId(s), dst: MachineId(d), size: coflow_core::Bytes(size) })
                .collect();
            let c = Coflow::new(CoflowId(k as u64), Nanos::ZERO, flows.clone());
            model.arrive(&fabric, &c, k, &Split::new());
            let state = &model.coflows[k];
            let (legs, loads) = grouped(&fabric, &flows);
            let got: Vec<_> = model.legs[state.legs.clone()]
                .iter()
                .map(|l| {
                    let [s, d] = *l.route.hops() else { panic!("a big-switch route has two hops") };
                    (s, d - 6, l.bytes, l.flows)
                })
                .collect();
            prop_assert_eq!(got, legs);
            let got_loads = &model.loads[state.loads.clone()];
            prop_assert_eq!(got_loads.len(), loads.len());
            for (a, b) in got_loads.iter().zip(&loads) {
                prop_assert_eq!((a.0, a.1.to_bits()), (b.0, b.1.to_bits()));
            }
            for i in state.legs.clone() {
                for (h, &r) in model.legs[i].route.hops().iter().enumerate() {
                    prop_assert_eq!(model.loads[model.slots[i][h] as usize].0, r);
                }
            }
        }
    }

    /// Decision after decision, with extras given in leg order or in any other, kept, dropped
    /// and new: every extra in force plans its finish at `after(decision, 1/(σ + κ))`, a leg
    /// without one plans none, the list is the extras given in their order, each entry holds
    /// its leg's values of now (as a fresh one would), its index points every extra at its
    /// own entry, the coflows listed as reshaped are the extras' coflows, and the queue shows
    /// the earliest planned finish.
    #[test]
    fn extras_in_any_order_plan_exact_finishes(
        decisions in proptest::collection::vec(
            (
                proptest::collection::vec((0usize..64, 1e-3f64..10.0), 0..24),
                any::<bool>(),
                0u64..2_000_000,
                prop_oneof![Just(0.0), 1e-3f64..1.0],
            ),
            1..16,
        ),
    ) {
        let fabric = Fabric::big_switch(6, coflow_core::Rate::GBPS);
        let mut model = LegModel::default();
        for (k, size) in [(0u64, 1_000_000_000u64), (1, 2_000_000_000)] {
            let flows: Vec<Flow> = (0..6)
                .flat_map(|s| (0..6).filter(move |&d| d != s).map(move |d| (s, d)))
                .map(|(s, d)| Flow { src: MachineId(s), dst: MachineId(d), size: coflow_core::Bytes(size) })
                .collect();
            model.arrive(&fabric, &Coflow::new(CoflowId(k), Nanos::ZERO, flows), k as usize, &Split::new());
        }
        let n = model.legs.len();
        let mut now = Nanos::ZERO;
        for (extras, sorted, dt, sigma) in decisions {
            now = Nanos(now.0 + dt + 1);
            model.sync(now);
            let mut given: Vec<(usize, f64)> = Vec::new();
            for (l, kappa) in extras {
                if given.iter().all(|&(g, _)| g != l % n) {
                    given.push((l % n, kappa));
                }
            }
            if sorted {
                given.sort_by_key(|&(l, _)| l);
            }
            let mut alloc = Allocation::default();
            alloc.coflow_rate = vec![sigma, 0.0];
            for &(l, kappa) in &given {
                alloc.give_leg_fraction(l, kappa);
            }
            model.apply(&alloc);
            let legs: Vec<usize> = model.extra.iter().map(|e| e.leg as usize).collect();
            prop_assert_eq!(legs, given.iter().map(|&(l, _)| l).collect::<Vec<_>>());
            let mut next = if sigma > 0.0 { after(now, 1.0 / sigma) } else { Nanos::MAX };
            for (i, (e, &(l, kappa))) in model.extra.iter().zip(&given).enumerate() {
                let speed = model.rate[model.owner[l] as usize] + kappa;
                prop_assert_eq!(e.finish, after(now, 1.0 / speed));
                prop_assert_eq!(model.leg_finish[l], e.finish);
                if model.extra_indexed {
                    prop_assert_eq!(model.extra_at[l] as usize, i);
                }
                next = next.min(e.finish);
            }
            for l in (0..n).filter(|l| given.iter().all(|&(g, _)| g != *l)) {
                prop_assert_eq!(model.leg_finish[l], Nanos::MAX);
            }
            // What each extra carries, kept or new, is its own leg's and coflow's now, and
            // the coflows listed as reshaped are those of the extras, each once.
            let mut ids = Vec::new();
            for (e, &(l, kappa)) in model.extra.iter().zip(&given) {
                let c = model.owner[l] as usize;
                let scale = model.coflows[c].scale;
                prop_assert_eq!(e.coflow as usize, c);
                prop_assert_eq!(e.bytes.to_bits(), model.legs[l].bytes.to_bits());
                prop_assert_eq!(e.hops as usize, model.legs[l].route.hops().len());
                prop_assert_eq!(e.slots, model.slots[l]);
                prop_assert_eq!(e.sigma.to_bits(), model.rate[c].to_bits());
                prop_assert_eq!(e.scale_dec.to_bits(), scale.to_bits());
                prop_assert_eq!(e.speed.to_bits(), (model.rate[c] + kappa).to_bits());
                prop_assert_eq!(e.phi_dec.to_bits(), (model.legs[l].scaled * scale).to_bits());
                ids.push(model.coflows[c].id);
            }
            ids.sort_unstable();
            ids.dedup();
            prop_assert_eq!(&model.extra_ids, &ids);
            prop_assert_eq!(model.next_time(), next);
        }
    }

    /// The same number as the plain conversion, on any number `after` can give it.
    #[test]
    fn whole_is_the_plain_conversion(bits in any::<u64>(), n in any::<u64>()) {
        let x = f64::from_bits(bits).ceil();
        prop_assert_eq!(whole(x), x as u64);
        let y = n as f64;
        prop_assert_eq!(whole(y), y as u64);
    }

    /// The same instant as the plain formula (`now` plus the seconds in nanoseconds rounded up,
    /// at least one, saturating), on any number of seconds and any time.
    #[test]
    fn after_is_the_plain_formula(bits in any::<u64>(), secs in 0.0f64..1e7, now in any::<u64>(), t in 0u64..1u64 << 45) {
        let plain = |now: Nanos, secs: f64| {
            let ns = (secs * 1e9).ceil();
            if !ns.is_finite() || ns >= (u64::MAX - now.0) as f64 { Nanos::MAX } else { Nanos(now.0 + (ns as u64).max(1)) }
        };
        for s in [f64::from_bits(bits), secs, 1.0 / secs] {
            for n in [Nanos(now), Nanos(t), Nanos(u64::MAX - t)] {
                prop_assert_eq!(after(n, s), plain(n, s), "after({:?}, {})", n, s);
            }
        }
    }

    /// To the bit, on any number (finish times are computed with it).
    #[test]
    fn ceil_is_the_standard_ceil(bits in any::<u64>(), secs in 0.0f64..1e7) {
        let x = f64::from_bits(bits);
        prop_assert!(ceil(x).to_bits() == x.ceil().to_bits() || x.is_nan());
        prop_assert_eq!(ceil(secs * 1e9).to_bits(), (secs * 1e9).ceil().to_bits());
    }
}
