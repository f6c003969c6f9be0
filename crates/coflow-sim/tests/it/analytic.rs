//! Cases whose answer follows from the model in one line.

use crate::support::*;
use coflow_core::Rate;

#[test]
fn one_flow_on_an_idle_fabric_takes_size_over_rate() {
    for policy in coflow_sched::policy::NAMES {
        // 125 MB at 1 Gbit/s is one second.
        let c = coflow(
            1,
            0,
            vec![coflow_core::Flow {
                src: coflow_core::MachineId(0),
                dst: coflow_core::MachineId(1),
                size: coflow_core::Bytes(125_000_000),
            }],
        );
        let r = run(policy, 2, Rate::GBPS, vec![c]);
        assert_eq!(r.outcomes[0].cct(), Some(coflow_core::Nanos::from_secs(1)), "{policy}");
    }
}

#[test]
fn a_flow_of_hours_and_one_arriving_while_it_runs_each_take_size_over_rate() {
    // 2.5 TB at 1 Gbit/s is 20,000 s; a 125 MB flow on other ports arriving at 18,000.5 s, five
    // hours into the replay, takes one second. Under every policy both end on time, to a
    // nanosecond for the short one and to the rounding of the thousands of decisions policies
    // with timers take over the long one.
    let big = coflow_core::Flow {
        src: coflow_core::MachineId(0),
        dst: coflow_core::MachineId(1),
        size: coflow_core::Bytes(2_500_000_000_000),
    };
    let small = coflow_core::Flow {
        src: coflow_core::MachineId(2),
        dst: coflow_core::MachineId(3),
        size: coflow_core::Bytes(125_000_000),
    };
    for policy in coflow_sched::policy::NAMES {
        let r = run(policy, 4, Rate::GBPS, vec![coflow(1, 0, vec![big]), coflow(2, 18_000_500, vec![small])]);
        let (long, short) = (r.outcomes[0].cct().unwrap().0, r.outcomes[1].cct().unwrap().0);
        assert!(long.abs_diff(20_000_000_000_000) <= 20, "{policy}: {long} ns");
        assert!(short.abs_diff(1_000_000_000) <= 1, "{policy}: {short} ns");
    }
}

/// A flow of `secs` seconds at 1 Gbit/s from machine `src` to `dst`.
fn seconds_of(src: u32, dst: u32, secs: u64) -> coflow_core::Flow {
    coflow_core::Flow {
        src: coflow_core::MachineId(src),
        dst: coflow_core::MachineId(dst),
        size: coflow_core::Bytes(secs * 125_000_000),
    }
}

#[test]
fn varys_gives_a_coflow_starved_for_a_period_its_turn() {
    // A (5 s out of port 0) comes first; B (10 s out of port 0) arrives at 0.5 s with the larger
    // bottleneck and gets nothing under SEBF. Its turn comes when each T = 2 s interval from the
    // first decision ends: it alone is served for δ = 200 ms at 2 s and again at 4.2 s. A gets
    // its other 1 s from 4.4 s and ends at 5.4 s; B, with 0.4 s done, ends 9.6 s later, at 15 s.
    let cs = vec![coflow(1, 0, vec![seconds_of(0, 1, 5)]), coflow(2, 500, vec![seconds_of(0, 2, 10)])];
    let r = run("varys", 3, Rate::GBPS, cs);
    assert_ms(&ccts_ms(&r), &[5_400.0, 14_500.0]);
}

#[test]
fn varys_does_not_count_a_coflow_arriving_as_a_period_ends_as_starved() {
    // B arrives at 2 s, as the first T interval ends, on ports A does not use: it was not there
    // to be starved, so A is not paused for a δ turn, and each takes its time alone.
    let cs = vec![coflow(1, 0, vec![seconds_of(0, 1, 5)]), coflow(2, 2_000, vec![seconds_of(2, 3, 1)])];
    let r = run("varys", 4, Rate::GBPS, cs);
    assert_ms(&ccts_ms(&r), &[5_000.0, 1_000.0]);
}

#[test]
fn local_flows_cross_no_port() {
    for policy in coflow_sched::policy::NAMES {
        let r = run(policy, 2, unit_rate(), vec![coflow(1, 5, vec![flow(1, 1, 100)])]);
        assert_eq!(r.outcomes[0].cct(), Some(coflow_core::Nanos::ZERO), "{policy}");
    }
}

#[test]
fn two_flows_out_of_one_port_share_it() {
    // Under fairness two 2-unit flows from machine 0 each get half: both end at 4.
    let r = run("fair", 3, unit_rate(), vec![coflow(1, 0, vec![flow(0, 1, 2)]), coflow(2, 0, vec![flow(0, 2, 2)])]);
    assert_ms(&ccts_ms(&r), &[4.0, 4.0]);
    // Varys serves one first (equal Γ: the smaller id) and the other after.
    let r = run("varys", 3, unit_rate(), vec![coflow(1, 0, vec![flow(0, 1, 2)]), coflow(2, 0, vec![flow(0, 2, 2)])]);
    assert_ms(&ccts_ms(&r), &[2.0, 4.0]);
}

#[test]
fn a_later_arrival_preempts_under_sebf() {
    // C1: 10 units from 0 at t=0. C2: 1 unit from 0 at t=2 has the smaller Γ and preempts:
    // it ends at 3, and C1 at 11.
    let r = run("varys", 3, unit_rate(), vec![coflow(1, 0, vec![flow(0, 1, 10)]), coflow(2, 2, vec![flow(0, 2, 1)])]);
    assert_ms(&ccts_ms(&r), &[11.0, 1.0]);
}

#[test]
fn an_admitted_coflow_alone_is_backfilled_to_full_speed() {
    // 1 MiB with a 200 ms deadline on an idle 1 Gbit/s fabric: admitted, guaranteed 1 MiB per
    // 200 ms, and backfilled to the whole port: it ends after 8.39 ms, long before its deadline.
    let mut c = coflow(1, 0, vec![flow(0, 1, 1)]);
    c.deadline = Some(coflow_core::Nanos::from_millis(200));
    for policy in ["varys-deadline", "varys"] {
        let r = run(policy, 2, Rate::GBPS, vec![c.clone()]);
        let cct = r.outcomes[0].cct().unwrap().as_secs_f64();
        assert!((cct - 1048576.0 / 125e6).abs() < 1e-6, "{policy}: {cct}");
    }
}

#[test]
fn a_deadline_past_the_end_of_the_clock_is_met_by_finishing() {
    // 1,000 bytes whose deadline falls at or past the end of the clock (584 years): every
    // schedule meets it, and every deadline policy finishes it as soon as it would one without a
    // deadline, rather than pacing it to a time the replay never reaches.
    for deadline in [coflow_core::Nanos::MAX, coflow_core::Nanos(u64::MAX - 2)] {
        for policy in ["varys-deadline", "vc", "edf", "karuna"] {
            let mut c = coflow(
                1,
                0,
                vec![coflow_core::Flow {
                    src: coflow_core::MachineId(0),
                    dst: coflow_core::MachineId(1),
                    size: coflow_core::Bytes(1000),
                }],
            );
            c.deadline = Some(deadline);
            let r = run(policy, 2, Rate::GBPS, vec![c]);
            assert!(!r.outcomes[0].rejected, "{policy}: rejected");
            let cct = r.outcomes[0].cct().map(|t| t.as_secs_f64());
            assert!(cct.is_some_and(|t| (t - 1000.0 / 125e6).abs() < 1e-6), "{policy}, {deadline:?}: {cct:?}");
        }
    }
}

#[test]
fn backfill_speeds_an_admitted_coflow_up_as_a_whole() {
    // Two 1-unit flows into one egress port, deadline 100 units: the guarantee is tiny, and
    // backfill shares the port between the two flows so that both end at 2 units, rather than
    // giving it all to one flow (ends at 1) while the other crawls at its guarantee.
    let mut c = coflow(1, 0, vec![flow(0, 2, 1), flow(1, 2, 1)]);
    c.deadline = Some(coflow_core::Nanos::from_millis(100));
    let r = run("varys-deadline", 3, unit_rate(), vec![c]);
    assert_ms(&ccts_ms(&r), &[2.0]);
}

#[test]
fn empty_flows_finish_on_arrival_under_every_policy() {
    // A 0-byte flow has nothing to move: its coflow is done on arrival, whatever the policy (a
    // coflow whose every Γ is 0 used to be served never, and Varys's timers then spun forever).
    for policy in coflow_sched::policy::NAMES {
        let empty = coflow_core::Flow {
            src: coflow_core::MachineId(0),
            dst: coflow_core::MachineId(1),
            size: coflow_core::Bytes(0),
        };
        let r = run(policy, 2, unit_rate(), vec![coflow(1, 3, vec![empty]), coflow(2, 3, vec![flow(0, 1, 2), empty])]);
        assert_ms(&ccts_ms(&r), &[0.0, 2.0]);
    }
}
