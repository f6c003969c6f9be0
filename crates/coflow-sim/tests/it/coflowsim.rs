//! The reference simulator's rules (`coflow_sim::coflowsim`), each by a small case computed by
//! hand, and the properties every policy keeps under any set of them.

use coflow_core::{Bytes, Coflow, CoflowId, MIB, MachineId, Nanos, Rate, Workload};
use coflow_sim::coflowsim::{self, Rules};
use coflow_sim::{SimConfig, SimResult, simulate};
use proptest::prelude::*;

use crate::support::*;

/// Runs `policy` under `rules` on the coflows, every invariant checked.
fn run_with(policy: &str, rules: Rules, machines: u32, rate: Rate, coflows: Vec<Coflow>) -> SimResult {
    let w = coflowsim::workload(&Workload::new(machines, coflows).unwrap(), &rules);
    let cfg = SimConfig { check_invariants: true, ..SimConfig::big_switch(rate) };
    simulate(&w, coflowsim::policy(policy, &rules).unwrap(), &cfg).unwrap()
}

/// 1 MiB per second: sizes in MiB are times in seconds.
fn mib_per_sec() -> Rate {
    Rate::from_bytes_per_sec(MIB as f64)
}

fn secs(r: &SimResult) -> Vec<f64> {
    r.outcomes.iter().map(|o| o.cct().unwrap().as_secs_f64()).collect()
}

#[track_caller]
fn assert_secs(actual: &[f64], expected: &[f64]) {
    assert_eq!(actual.len(), expected.len());
    for (a, e) in actual.iter().zip(expected) {
        assert!((a - e).abs() < 1e-6, "got {actual:?}, expected {expected:?}");
    }
}

fn rules(names: &str) -> Rules {
    Rules::parse(names).unwrap()
}

#[test]
fn epochs_admit_at_the_epoch_start_and_cct_counts_from_there() {
    // Epochs of 10,240 ms (trace units without the clock rule): arrival 10,833 is within the
    // epoch after the one starting at 10,240, so it is admitted at 10,240; 0 and 10,240 at 0;
    // 20,481 at 20,480.
    let c = |id, ms| Coflow::new(CoflowId(id), Nanos::from_millis(ms), vec![flow(0, 1, 128)]);
    let w = Workload::new(2, vec![c(1, 0), c(2, 10_240), c(3, 10_833), c(4, 20_481)]).unwrap();
    let t = coflowsim::workload(&w, &rules("epochs"));
    let at: Vec<u64> = t.coflows.iter().map(|c| c.arrival.0 / 1_000_000).collect();
    assert_eq!(at, [0, 0, 10_240, 20_480]);
    // With the clock rule epochs are 10 s: 10,833 units is 10.579 s, admitted at 10 s.
    let t = coflowsim::workload(&w, &rules("epochs,clock"));
    assert_eq!(t.coflows[2].arrival, Nanos::from_secs(10));
    // One 128 MiB flow at 128 MiB/s, alone from its admission at 10.24 s: CCT 1 s, not 0.41 s.
    let one = vec![c(3, 10_833)];
    let r = run_with("varys", rules("epochs"), 2, Rate::from_bytes_per_sec(128.0 * MIB as f64), one);
    assert_eq!(r.outcomes[0].arrival, Nanos::from_millis(10_240));
    assert_secs(&secs(&r), &[1.0]);
}

#[test]
fn the_clock_has_1024_units_per_second() {
    // Trace milliseconds are units of 1/1,024 s: 1,024 ms arrive at 1 s, 1 ms at 976,562.5 ns
    // (rounded up).
    let c = |id, ms| Coflow::new(CoflowId(id), Nanos::from_millis(ms), vec![flow(0, 1, 1)]);
    let w = Workload::new(2, vec![c(1, 1), c(2, 1_024), c(3, 10_240)]).unwrap();
    let t = coflowsim::workload(&w, &rules("clock"));
    let at: Vec<u64> = t.coflows.iter().map(|c| c.arrival.0).collect();
    assert_eq!(at, [976_563, 1_000_000_000, 10_000_000_000]);
    assert_eq!(rules("clock").quantum(), Nanos(7_812_500));
    assert_eq!(rules("").quantum(), Nanos::from_millis(8));
}

#[test]
fn rounding_makes_equal_flows_of_whole_mib_per_reducer() {
    // Mappers on machines 0, 1, 2 and again 0 (merged: nM = 3). Reducer 3 receives 10.5 MiB:
    // 11 MiB, then 12 (a multiple of 3), so 4 MiB from each mapper. Reducer 4 receives 1 byte:
    // 1 MiB, then 3, so 1 MiB each. Reducer 5 receives nothing: at least 1 MiB each.
    let f = |s, d, b| coflow_core::Flow { src: MachineId(s), dst: MachineId(d), size: Bytes(b) };
    let flows =
        vec![f(0, 3, 5 * MIB), f(1, 3, 3 * MIB), f(2, 3, 2 * MIB + MIB / 2), f(0, 4, 1), f(0, 5, 0), f(0, 3, 0)];
    let w = Workload::new(6, vec![Coflow::new(CoflowId(1), Nanos::ZERO, flows)]).unwrap();
    let t = coflowsim::workload(&w, &rules("rounding"));
    let got: Vec<(u32, u32, u64)> = t.coflows[0].flows.iter().map(|f| (f.src.0, f.dst.0, f.size.get() / MIB)).collect();
    let want: Vec<(u32, u32, u64)> =
        [(3, 4), (4, 1), (5, 1)].iter().flat_map(|&(d, mib)| (0..3).map(move |s| (s, d, mib))).collect();
    assert_eq!(got, want);
    assert!(t.coflows[0].flows.iter().all(|f| f.size.get() % MIB == 0));
}

#[test]
fn intra_machine_flows_use_the_ports() {
    // A flow from machine 0 to itself finishes on arrival in our model; under the rule it uses
    // machine 0's uplink and downlink (receiver 0 becomes machine 2 of 4), so 2 MiB take 2 s, and
    // it shares the uplink with a flow 0 -> 1.
    let cs = || vec![coflow(1, 0, vec![flow(0, 0, 2)]), coflow(2, 0, vec![flow(0, 1, 2)])];
    let exact = run_with("fair", Rules::default(), 2, mib_per_sec(), cs());
    assert_secs(&secs(&exact), &[0.0, 2.0]);
    let ports = run_with("fair", rules("ports"), 2, mib_per_sec(), cs());
    assert_eq!(ports.outcomes[0].flows, 1);
    assert_secs(&secs(&ports), &[4.0, 4.0]);
}

#[test]
fn per_port_shares_keep_time_hours_and_decades_into_a_replay() {
    // The reference's per-port shares give each route its own rate, which the route model keeps
    // per route. 20,000 MiB take 20,000 s; 1 MiB on other ports arriving five hours in takes 1 s;
    // and so they do with both arrivals 31 years later.
    for later_ms in [0, 1_000_000_000_000] {
        let cs =
            vec![coflow(1, later_ms, vec![flow(0, 1, 20_000)]), coflow(2, later_ms + 18_000_500, vec![flow(2, 3, 1)])];
        let r = run_with("fair", rules("fair"), 4, mib_per_sec(), cs);
        let ccts: Vec<u64> = r.outcomes.iter().map(|o| o.cct().unwrap().0).collect();
        assert_eq!(ccts, [20_000_000_000_000, 1_000_000_000], "{later_ms} ms later");
    }
}

#[test]
fn per_port_equal_shares_leave_capacity_unused_where_max_min_would_not() {
    // Receiver 2 has three flows (from 0, 1 and 3), so each gets a third there; sender 1 has two
    // (to 2 and to 4), so its flow to 4 gets min(1/2, 1/1) = 1/2 under per-port equal shares and
    // sender 1 leaves 1/6 unused. Max-min gives that 1/6 to the flow to 4: 2/3. Its 1 MiB ends at
    // 2 s against 1.5 s.
    let cs = || {
        vec![coflow(1, 0, vec![flow(0, 2, 100), flow(1, 2, 100), flow(3, 2, 100)]), coflow(2, 0, vec![flow(1, 4, 1)])]
    };
    let theirs = run_with("fair", rules("fair"), 5, mib_per_sec(), cs());
    let ours = run_with("fair", Rules::default(), 5, mib_per_sec(), cs());
    assert_secs(&secs(&theirs)[1..], &[2.0]);
    assert_secs(&secs(&ours)[1..], &[1.5]);
}

#[test]
fn the_receiver_scan_in_port_order_differs_from_global_smallest_first() {
    // X: 0 -> 2 (3 MiB), Y: 0 -> 3 (1 MiB), Z: 1 -> 3 (2 MiB), each its own coflow.
    // Global smallest first (`pfp`): Y takes sender 0 and receiver 3; X and Z wait; Y ends at 1,
    // then X and Z run: Z ends at 3, X at 4.
    // Receiver scan: receiver 2 sends X (sender 0 free); receiver 3's smallest, Y, has its sender
    // busy, so it sends Z. Z ends at 2, X at 3, then Y at 4.
    let cs = || {
        vec![coflow(1, 0, vec![flow(0, 2, 3)]), coflow(2, 0, vec![flow(0, 3, 1)]), coflow(3, 0, vec![flow(1, 3, 2)])]
    };
    assert_secs(&secs(&run_with("pfp", Rules::default(), 4, mib_per_sec(), cs())), &[4.0, 1.0, 3.0]);
    assert_secs(&secs(&run_with("pfp", rules("pfp"), 4, mib_per_sec(), cs())), &[3.0, 4.0, 2.0]);
}

#[test]
fn static_sebf_keys_let_a_smaller_coflow_preempt_one_that_has_nearly_finished() {
    // C1 (10 MiB, 0 -> 1) from 0; C2 (5 MiB, 0 -> 2) from 6 s. On remaining bytes C1 (4 left) stays
    // first: C1 ends at 10, C2 at 15 (CCT 9). On initial Γ C2 (5) goes before C1 (10): C2 ends at
    // 11 (CCT 5), C1 at 15. (Both with the timing rule, so no starvation-freedom turn interferes.)
    let cs = || vec![coflow(1, 0, vec![flow(0, 1, 10)]), coflow(2, 6_000, vec![flow(0, 2, 5)])];
    assert_secs(&secs(&run_with("varys", rules("timing"), 3, mib_per_sec(), cs())), &[10.0, 9.0]);
    assert_secs(&secs(&run_with("varys", rules("timing,keys"), 3, mib_per_sec(), cs())), &[15.0, 5.0]);
}

/// The reference's rules of its coflow-level policies (every rule that is not of the workload
/// or of another policy).
const POLICY_RULES: &str = "timing,keys,blocking,share,lcf,jitter";

/// [`POLICY_RULES`] without `rule`.
fn policy_rules_but(rule: &str) -> Rules {
    let names: Vec<&str> = POLICY_RULES.split(',').filter(|&n| n != rule).collect();
    rules(&names.join(","))
}

#[test]
fn coflow_level_policies_reallocate_only_at_coflow_arrivals_and_departures() {
    // C1 (A: 0 -> 1, 1 MiB; B: 2 -> 3, 2 MiB; Γ 2) goes before C2 (D: 0 -> 4, 4 MiB; E: 2 -> 5,
    // 1 MiB; Γ 4). MADD gives A 1/2 and B all of sender 2, so C2's MADD is blocked there.
    // Our model gives the other 1/2 of sender 0 to A by backfill, so A ends at 1, decides then
    // (100 ms after the last decision has passed) and backfills D on sender 0; at 2 C1 is done,
    // C2 has 3 + 1 left at Γ 3: it ends at 5.
    // With `timing` alone sender 0 idles from A's end at 1 to C1's departure at 2, and C2's 4 + 1
    // take until 6.
    // The reference has that timing too, but gives the 1/2 to D before backfill (`share`, whose
    // worked case this is): sender 0 never idles, A ends at 2 with B, D has 3 left at 2 and C2
    // ends at 5.
    let cs =
        || vec![coflow(1, 0, vec![flow(0, 1, 1), flow(2, 3, 2)]), coflow(2, 0, vec![flow(0, 4, 4), flow(2, 5, 1)])];
    assert_secs(&secs(&run_with("varys", Rules::default(), 6, mib_per_sec(), cs())), &[2.0, 5.0]);
    assert_secs(&secs(&run_with("varys", rules("timing"), 6, mib_per_sec(), cs())), &[2.0, 6.0]);
    assert_secs(&secs(&run_with("varys", policy_rules_but("share"), 6, mib_per_sec(), cs())), &[2.0, 6.0]);
    assert_secs(&secs(&run_with("varys", rules(POLICY_RULES), 6, mib_per_sec(), cs())), &[2.0, 5.0]);
}

#[test]
fn coflows_madd_skipped_share_what_it_left_before_backfill() {
    // Senders 0, 1; receivers 2, 3, 4. C1: 0 -> 2 and 1 -> 2 of 2 MiB, 0 -> 3 and 1 -> 3 of 1
    // (Γ 4, receiver 2). C2: 0 -> 2 and 1 -> 2 of 1, 0 -> 4 and 1 -> 4 of 4 (Γ 8, receiver 4).
    // At 0 MADD gives C1's flows into 2 1/2 each and into 3 1/4 each: senders 0 and 1 have 1/4
    // left, receiver 2 none, so C2's MADD is skipped.
    // The reference then shares what is left among C2's flows whose ports have room: 0 -> 4 and
    // 1 -> 4, min(1/4 / 1, 1 / 2) = 1/4 each. C1 ends at 4; C2 has 1 + 1 left into 2 and 3 + 3
    // into 4, Γ 6: MADD gives the flows into 4 1/2 each (they end at 10) and backfill makes the
    // flows into 2 end at 6. [4, 10].
    // Without the share, backfill in pseudo-deadline order gives the 1/4s to C1's flows into 3,
    // which end at 2, and the senders idle until C1 departs at 4; C2's flows into 4 then have 4
    // each at 1/2 and end at 12. [4, 12].
    let cs = || {
        vec![
            coflow(1, 0, vec![flow(0, 2, 2), flow(1, 2, 2), flow(0, 3, 1), flow(1, 3, 1)]),
            coflow(2, 0, vec![flow(0, 2, 1), flow(1, 2, 1), flow(0, 4, 4), flow(1, 4, 4)]),
        ]
    };
    assert_secs(&secs(&run_with("varys", rules(POLICY_RULES), 5, mib_per_sec(), cs())), &[4.0, 10.0]);
    assert_secs(&secs(&run_with("varys", policy_rules_but("share"), 5, mib_per_sec(), cs())), &[4.0, 12.0]);
    assert_secs(&secs(&run_with("varys", rules("timing,keys,share"), 5, mib_per_sec(), cs())), &[4.0, 10.0]);
}

#[test]
fn the_share_among_skipped_coflows_is_blind_to_their_order() {
    // Senders 0, 1; receivers 2, 3, 4. C1: 0 -> 2 (2 MiB, Γ 2). C2: 0 -> 3, 1 -> 3 (2 each, Γ 4).
    // C3: 0 -> 4, 1 -> 4 (4 each, Γ 8). C1's MADD fills sender 0, so C2 and C3 are skipped.
    // The reference shares sender 1 between 1 -> 3 and 1 -> 4, 1/2 each, whatever their order.
    // At 2 C1 ends; C2 has 2 + 1 left (Γ 3: 2/3 and 1/3), then C3 (4 + 3 left) gets Γ 12 on the
    // 1/3 and 2/3 left: 1/3 and 1/4, and backfill raises 1 -> 4 to 2/3. At 5 C2 ends; C3 has 3 + 1
    // left at Γ 4 and ends at 9. [2, 5, 9].
    // Without the share backfill gives all of sender 1 to C2's 1 -> 3 (earlier pseudo-deadline):
    // C2 ends at 4 and C3 at 10. [2, 4, 10]: the same total, shared otherwise.
    let cs = || {
        vec![
            coflow(1, 0, vec![flow(0, 2, 2)]),
            coflow(2, 0, vec![flow(0, 3, 2), flow(1, 3, 2)]),
            coflow(3, 0, vec![flow(0, 4, 4), flow(1, 4, 4)]),
        ]
    };
    assert_secs(&secs(&run_with("varys", rules(POLICY_RULES), 5, mib_per_sec(), cs())), &[2.0, 5.0, 9.0]);
    assert_secs(&secs(&run_with("varys", policy_rules_but("share"), 5, mib_per_sec(), cs())), &[2.0, 4.0, 10.0]);
}

#[test]
fn lcf_places_a_coflow_against_what_those_placed_before_have_left() {
    // C1: 0 -> 1, 20 MiB, from 0. C2: 0 -> 2, 15 MiB, from 10 s, when C1 has 10 left.
    // The reference places C2 after C1 (15 is not less than 10) and keeps it there: C1 ends at
    // 20, C2 at 35. [20, 25].
    // On total bytes C2 (15) goes before C1 (20): C2 ends at 25 and C1 at 35. [35, 15].
    let cs = || vec![coflow(1, 0, vec![flow(0, 1, 20)]), coflow(2, 10_000, vec![flow(0, 2, 15)])];
    assert_secs(&secs(&run_with("tcf", rules(POLICY_RULES), 3, mib_per_sec(), cs())), &[20.0, 25.0]);
    assert_secs(&secs(&run_with("tcf", policy_rules_but("lcf"), 3, mib_per_sec(), cs())), &[35.0, 15.0]);
    // Our exact model orders on remaining bytes at every decision, and agrees here.
    assert_secs(&secs(&run_with("tcf", Rules::default(), 3, mib_per_sec(), cs())), &[20.0, 25.0]);
}

#[test]
fn only_a_full_port_where_a_coflow_still_has_bytes_skips_its_madd() {
    // X: 1 -> 4, 10 MiB, from 0 (Γ 10). Y: 0 -> 2 (1) and 1 -> 3 (8), from 4 s (Γ 8, before X).
    // Z: 5 -> 2 (2), from 6 s (Γ 2, first).
    // At 4 Y's MADD takes sender 1 (1 -> 3 at 1); backfill ends Y's 0 -> 2 at 5. At 6 Z's MADD
    // fills receiver 2, where Y has finished.
    // The reference gives Y its MADD all the same: 1 -> 3 (6 left) at 1 ends at 12. [18, 8, 2].
    // If receiver 2 blocks Y, X's MADD takes sender 1 from 6 to Z's end at 8, and Y's 6 left end
    // at 14. [18, 10, 2].
    let cs = || {
        vec![
            coflow(1, 0, vec![flow(1, 4, 10)]),
            coflow(2, 4_000, vec![flow(0, 2, 1), flow(1, 3, 8)]),
            coflow(3, 6_000, vec![flow(5, 2, 2)]),
        ]
    };
    assert_secs(&secs(&run_with("varys", rules(POLICY_RULES), 6, mib_per_sec(), cs())), &[18.0, 8.0, 2.0]);
    assert_secs(&secs(&run_with("varys", policy_rules_but("blocking"), 6, mib_per_sec(), cs())), &[18.0, 10.0, 2.0]);
}

#[test]
fn a_coflow_left_with_residues_only_finishes_at_once() {
    // C1: 0 -> 1, 2 -> 0, 2 -> 1, 3 -> 0, 3 -> 1; C2: 0 -> 3, 1 -> 3, 2 -> 3; 6 MiB each, from 0,
    // at 1 Gbit/s (C). Both have Γ = 18 MiB / C (receivers 1 and 3); C1 goes first on the tie.
    // MADD gives each flow of C1 C/3, then each flow of C2 C/3 on what is left (sender 2 and
    // receiver 3 fill); backfill ends C1's 3 -> 0 early. Every other flow ends at 18 MiB / C =
    // 0.150994944 s, C2's with C1's: both CCTs are that.
    // C/3 is not exact: at C1's departure C2's flows keep about 2e-9 bytes each, less than the
    // reference's `ZERO` (1e-3 bytes), so under `blocking` no port of C2 counts as loaded. The
    // reference has removed those flows; we must still finish them, at once, not one per port
    // per decision (never, under `timing`, which decides again only at C2's departure).
    let cs = || {
        let six = |s, d| flow(s, d, 6);
        vec![
            coflow(1, 0, vec![six(0, 1), six(2, 0), six(2, 1), six(3, 0), six(3, 1)]),
            coflow(2, 0, vec![six(0, 3), six(1, 3), six(2, 3)]),
        ]
    };
    for names in ["", "blocking", "timing,blocking", POLICY_RULES] {
        let r = run_with("varys", rules(names), 4, Rate::GBPS, cs());
        assert!(r.outcomes.iter().all(|o| o.finish.is_some()), "under {names:?} a coflow never finished");
        assert_secs(&secs(&r), &[0.150994944, 0.150994944]);
    }
}

#[test]
fn the_deadline_multiplier_can_reorder_backfill() {
    // C1: 0 -> 1 (1 MiB), 2 -> 3 (2); Γ 2. C2: 6 -> 7 (10), apart. C3: 0 -> 4 (3), 2 -> 5 (1);
    // Γ 3. MADD gives C1 1/2 and 1 (sender 2 full), so C3 is skipped, and 1/2 of sender 0 is
    // left for backfill.
    // Pseudo-deadlines arrival + Γ: C1 (2) before C3 (3): C1's 0 -> 1 takes the 1/2 and ends at 1,
    // then sender 0 idles until C1 departs at 2; C3 has 3 + 1 left, Γ 3: it ends at 5.
    // With the reference's multipliers, 1 + U from `Random(17)` in arrival order (1.732, 1.697,
    // 1.083), C3 (3.25) goes before C1 (3.46): C3's 0 -> 4 takes the 1/2 and has 2 left at 2,
    // with 1 on 2 -> 5: Γ 2, C3 ends at 4.
    let cs = || {
        vec![
            coflow(1, 0, vec![flow(0, 1, 1), flow(2, 3, 2)]),
            coflow(2, 0, vec![flow(6, 7, 10)]),
            coflow(3, 0, vec![flow(0, 4, 3), flow(2, 5, 1)]),
        ]
    };
    assert_secs(&secs(&run_with("varys", rules("timing,keys"), 8, mib_per_sec(), cs())), &[2.0, 10.0, 5.0]);
    assert_secs(&secs(&run_with("varys", rules("timing,keys,jitter"), 8, mib_per_sec(), cs())), &[2.0, 10.0, 4.0]);
    // Without `keys` backfill goes in the policy's order, and the multiplier changes nothing.
    assert_secs(&secs(&run_with("varys", rules("timing,jitter"), 8, mib_per_sec(), cs())), &[2.0, 10.0, 5.0]);
}

#[test]
fn dark_demotes_at_arrivals_and_serves_queues_in_strict_priority() {
    // C1 (20 MiB, 0 -> 1) from 0 has sent 15 MiB when C2 (5 MiB, 0 -> 2) arrives at 15 s: past the
    // first queue's 10 MiB, so C2 (queue 0) goes first and ends at 20 (CCT 5); C1 ends at 25.
    let cs = || vec![coflow(1, 0, vec![flow(0, 1, 20)]), coflow(2, 15_000, vec![flow(0, 2, 5)])];
    assert_secs(&secs(&run_with("aalo", rules("dark"), 3, mib_per_sec(), cs())), &[25.0, 5.0]);
    // FIFO keeps C1 first.
    assert_secs(&secs(&run_with("fifo", rules("timing,keys"), 3, mib_per_sec(), cs())), &[20.0, 10.0]);
}

#[test]
fn policies_the_reference_does_not_have_are_refused_by_name() {
    for name in ["sincronia", "karuna", "varys-deadline", "fifo-strict", "edf"] {
        let e = coflowsim::policy(name, &Rules::all()).unwrap_err();
        assert!(e.to_string().contains(&format!("{name:?}")), "{e}");
    }
    for name in coflowsim::POLICIES {
        assert!(coflowsim::policy(name, &Rules::all()).is_ok());
    }
    assert!(Rules::parse("epochs,quanta").unwrap_err().to_string().contains("\"quanta\""));
    assert_eq!(Rules::parse("all").unwrap(), Rules::all());
    assert_eq!(Rules::parse(&Rules::NAMES.join(",")).unwrap(), Rules::all());
}

fn workload(max_machines: u32, max_coflows: usize) -> impl Strategy<Value = Workload> {
    (2..=max_machines).prop_flat_map(move |m| {
        let flow = (0..m, 0..m, 1u64..=64).prop_map(|(s, d, mib)| coflow_core::Flow {
            src: MachineId(s),
            dst: MachineId(d),
            size: Bytes((mib << 20) / 3),
        });
        let coflow = (prop::collection::vec(flow, 1..6), 0u64..30_000);
        prop::collection::vec(coflow, 1..=max_coflows).prop_map(move |cs| {
            let coflows = cs
                .into_iter()
                .enumerate()
                .map(|(i, (flows, at))| Coflow::new(CoflowId(i as u64), Nanos::from_millis(at), flows))
                .collect();
            Workload::new(m, coflows).unwrap()
        })
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(100))]

    #[test]
    fn every_reference_policy_under_any_rules_stays_within_capacity_delivers_and_repeats(
        w in workload(6, 6),
        on in prop::collection::vec(any::<bool>(), Rules::NAMES.len()),
    ) {
        let names: Vec<&str> = Rules::NAMES.iter().zip(&on).filter(|(_, o)| **o).map(|(n, _)| *n).collect();
        let rules = Rules::parse(&names.join(",")).unwrap();
        let t = coflowsim::workload(&w, &rules);
        prop_assert_eq!(t.coflows.len(), w.coflows.len());
        // Capacity and exact delivery are checked at every decision (`check_invariants`).
        let cfg = SimConfig { check_invariants: true, ..SimConfig::big_switch(Rate::GBPS) };
        for name in coflowsim::POLICIES {
            let a = simulate(&t, coflowsim::policy(name, &rules).unwrap(), &cfg).unwrap();
            prop_assert!(a.outcomes.iter().all(|o| o.finish.is_some()), "{name} under {names:?}: a coflow never finished");
            for o in &a.outcomes {
                prop_assert!(o.cct().unwrap().0 + 10 >= o.isolated.0, "{name}: coflow {} beat its bound", o.id);
            }
            let b = simulate(&t, coflowsim::policy(name, &rules).unwrap(), &cfg).unwrap();
            prop_assert_eq!(&a, &b);
            // Incremental decisions equal decisions from scratch.
            let scratch = SimConfig { from_scratch: true, ..cfg.clone() };
            let c = simulate(&t, coflowsim::policy(name, &rules).unwrap(), &scratch).unwrap();
            prop_assert_eq!(&a, &c, "{} under {:?}: incremental and from-scratch decisions differ", name, names);
        }
    }
}

/// The reference simulator has neither Philae nor Saath: under its model they are refused by
/// name, with every policy it has, as any other it lacks.
#[test]
fn the_reference_model_refuses_philae_and_saath_by_name() {
    for name in ["philae", "saath"] {
        let err = coflowsim::policy(name, &rules("all")).map(|_| ()).unwrap_err();
        assert_eq!(err, coflowsim::NoCounterpart(name.to_string()));
        let msg = err.to_string();
        assert!(msg.starts_with(&format!("policy \"{name}\" has no counterpart")), "{msg}");
        assert!(coflowsim::POLICIES.iter().all(|p| msg.contains(p)), "{msg}");
    }
}
