//! The worked examples of the Varys paper, computed by hand.

use crate::support::*;

/// Varys Figures 1 and 2: C1 sends 1, 2 and 4 units from ingress ports 1, 2, 3; C2 sends 2 and 2
/// units from ingress ports 1 and 2. Egress ports are all distinct, so only ingress ports
/// contend, as in the figure. Machines 0, 1, 2 play ingress ports 1, 2, 3.
fn figure_1() -> Vec<coflow_core::Coflow> {
    vec![
        coflow(1, 0, vec![flow(0, 1, 1), flow(1, 3, 2), flow(2, 0, 4)]),
        coflow(2, 0, vec![flow(0, 2, 2), flow(1, 4, 2)]),
    ]
}

#[test]
fn figure_2a_per_flow_fairness_gives_average_cct_4() {
    // Ingress 1: C1's 1 unit and C2's 2 units share at 1/2 until t=2, then C2's flow runs alone
    // and ends at 3. Ingress 2: both 2-unit flows share and end at 4. Ingress 3: 4 units end at 4.
    let r = run("fair", 5, unit_rate(), figure_1());
    assert_ms(&ccts_ms(&r), &[4.0, 4.0]);
    // Flows end at 2, 4, 4 (C1) and 3, 4 (C2): average FCT 3.4, as the figure says.
    let fct_ms = 1e3 * r.outcomes.iter().map(|o| o.flow_time_s).sum::<f64>() / 5.0;
    assert!((fct_ms - 3.4).abs() < 1e-3, "{fct_ms}");
}

#[test]
fn figure_2d_varys_finds_the_optimal_average_cct_3() {
    // SEBF: Γ(C2) = 2 < Γ(C1) = 4, so C2 goes first at full rate on ingress 1 and 2 and ends at 2.
    // Backfill gives ingress 3 to C1's 4-unit flow from t=0. At t=2 C1 has 1, 2 and 2 units left:
    // MADD at Γ = 2, and backfill speeds the 1-unit flow up, so C1 ends at 4.
    let r = run("varys", 5, unit_rate(), figure_1());
    assert_ms(&ccts_ms(&r), &[4.0, 2.0]);
    // Flows end at 3, 4, 4 (C1) and 2, 2 (C2): average FCT 3, as the figure's optimum.
    let fct_ms = 1e3 * r.outcomes.iter().map(|o| o.flow_time_s).sum::<f64>() / 5.0;
    assert!((fct_ms - 3.0).abs() < 1e-3, "{fct_ms}");
}

/// Varys Figure 5's situation: C2 is longer, wider and bigger than C1, yet its effective
/// bottleneck is smaller, so SEBF schedules it first. The figure's exact flows are not in the
/// text, so this is a reconstruction with the same averages for strict sequential schedules:
/// C1 then C2 gives CCTs 4 and 7 (average 5.5), C2 then C1 gives 3 and 7 (average 5).
/// Egress X = machine 5, Y = 6, Z = 7; senders are distinct machines 0..4.
fn figure_5() -> Vec<coflow_core::Coflow> {
    vec![
        // C1: length 2, width 2, size 4, Γ = 4 (egress X carries 4 units).
        coflow(1, 0, vec![flow(0, 5, 2), flow(1, 5, 2)]),
        // C2: length 3, width 3, size 7, Γ = 3 (egress Y and Z carry 3 units each).
        coflow(2, 0, vec![flow(2, 5, 1), flow(3, 6, 3), flow(4, 7, 3)]),
    ]
}

#[test]
fn figure_5_sebf_puts_the_smaller_bottleneck_first() {
    // C2 first by MADD at Γ = 3: its X flow takes 1/3 of X, and C1 gets the other 2/3 by MADD on
    // the leftover, 1/3 per flow. At t=3 C2 is done and C1 has 1 unit per flow left: Γ = 2.
    let r = run("varys", 8, unit_rate(), figure_5());
    assert_ms(&ccts_ms(&r), &[5.0, 3.0]);
    // C2 ends exactly at its isolated bottleneck: SEBF gave it the fabric first.
    assert_eq!(r.outcomes[1].cct(), Some(r.outcomes[1].isolated));
}

#[test]
fn figure_5_under_fairness() {
    // Egress X splits three ways: C2's 1-unit flow ends at 3, like its Y and Z flows; then C1's
    // two flows have 1 unit each left at 1/2: they end at 5.
    let r = run("fair", 8, unit_rate(), figure_5());
    assert_ms(&ccts_ms(&r), &[5.0, 3.0]);
}

/// The talk's ordering example (`001`, "Ordering Heuristic"): three coflows with lengths 3, 5, 6,
/// widths 3, 2, 1, sizes 9, 10, 6 and bottlenecks 3, 10, 6. Those figures pin the layout down:
/// C1 sends 3 units from each of ports P1, P2, P3; C2 sends two 5-unit flows from P1; C3 one
/// 6-unit flow from P1 (egress ports all distinct). Machines 0, 1, 2 are P1, P2, P3.
fn talk_ordering() -> Vec<coflow_core::Coflow> {
    vec![
        coflow(1, 0, vec![flow(0, 3, 3), flow(1, 4, 3), flow(2, 5, 3)]),
        coflow(2, 0, vec![flow(0, 6, 5), flow(0, 7, 5)]),
        coflow(3, 0, vec![flow(0, 8, 6)]),
    ]
}

fn total_cct_ms(policy: &str) -> (Vec<f64>, f64) {
    let ccts = ccts_ms(&run(policy, 9, unit_rate(), talk_ordering()));
    let total = ccts.iter().sum();
    (ccts, total)
}

#[test]
fn talk_shortest_first_total_cct_35() {
    // C1 (length 3) ends at 3, C2 (5) at 13, C3 (6) at 19.
    let (ccts, total) = total_cct_ms("scf");
    assert_ms(&ccts, &[3.0, 13.0, 19.0]);
    assert!((total - 35.0).abs() < 1e-3);
}

#[test]
fn talk_narrowest_first_total_cct_41() {
    // C3 (width 1) first ends at 6; C2 (width 2) next on P1 ends at 16; C1's flows from P2 and P3
    // are backfilled at once, but its flow from P1 waits for C2: C1 ends at 19.
    let (ccts, total) = total_cct_ms("ncf");
    assert_ms(&ccts, &[19.0, 16.0, 6.0]);
    assert!((total - 41.0).abs() < 1e-3);
}

#[test]
fn talk_smallest_first_total_cct_34() {
    // C3 (size 6) ends at 6, C1 (9) at 9, C2 (10) at 19.
    let (ccts, total) = total_cct_ms("tcf");
    assert_ms(&ccts, &[9.0, 19.0, 6.0]);
    assert!((total - 34.0).abs() < 1e-3);
}

#[test]
fn talk_smallest_bottleneck_first_total_cct_31() {
    // SEBF: C1 (Γ 3) ends at 3, C3 (6) at 9, C2 (10) at 19.
    let (ccts, total) = total_cct_ms("varys");
    assert_ms(&ccts, &[3.0, 19.0, 9.0]);
    assert!((total - 31.0).abs() < 1e-3);
}

#[test]
fn fifo_serves_in_arrival_order() {
    // The talk's coflows arriving C2, C3, C1 one microsecond apart: C2 ends at 10, C3 at 16, C1's
    // flows from P2 and P3 are backfilled at once, but its flow from P1 waits: it ends at 19.
    let mut cs = talk_ordering();
    cs[0].arrival = coflow_core::Nanos(2_000);
    cs[2].arrival = coflow_core::Nanos(1_000);
    let r = run("fifo", 9, unit_rate(), cs);
    // Outcomes come in arrival order: C2, C3, C1. CCTs count from each one's arrival.
    assert_eq!(r.outcomes.iter().map(|o| o.id.get()).collect::<Vec<_>>(), [2, 3, 1]);
    assert_ms(&ccts_ms(&r), &[10.0, 16.0 - 0.001, 19.0 - 0.002]);
}

#[test]
fn fifo_gives_a_later_coflow_what_backfill_would_have_sped_up_for_nothing() {
    // C1 sends 4 units from P1 (its bottleneck, Γ = 4) and 1 unit from P2; C2, behind it, sends 2
    // units from P2. Both passes in order (`fifo`): C1's MADD is 1 on P1 and 1/4 on P2, C2's MADD
    // takes the 3/4 of P2 left and ends at 8/3; C1 still ends at 4. Strict priority
    // (`fifo-strict`): C1's backfill takes all of P2 and its small flow ends at 1, which gains C1
    // nothing (still 4); C2 starts at the next decision, C1's completion (flow-finish decisions
    // are at most every 100 ms, far longer than this example), and ends at 6.
    let cs = || vec![coflow(1, 0, vec![flow(0, 3, 4), flow(1, 4, 1)]), coflow(2, 0, vec![flow(1, 5, 2)])];
    assert_ms(&ccts_ms(&run("fifo", 6, unit_rate(), cs())), &[4.0, 8.0 / 3.0]);
    assert_ms(&ccts_ms(&run("fifo-strict", 6, unit_rate(), cs())), &[4.0, 6.0]);
}

#[test]
fn figure_2b_per_flow_prioritization_gives_average_fct_2_8() {
    // Smallest flow first on each ingress port: port 1 serves C1's 1 unit (ends at 1), then C2's
    // 2 units (3); port 2 has two 2-unit flows, one ends at 2 and the other at 4; port 3's 4 units
    // end at 4. Average FCT (1 + 3 + 2 + 4 + 4) / 5 = 2.8, as in the figure. Which of port 2's
    // equal flows goes first is a tie: we break it by coflow arrival then id, so C1's goes first
    // and both coflows end at 4; the figure broke it the other way (C2 at 3, average CCT 3.5).
    let r = run("pfp", 5, unit_rate(), figure_1());
    assert_ms(&ccts_ms(&r), &[4.0, 4.0]);
    let flows: usize = r.outcomes.iter().map(|o| o.flows).sum();
    let fct_ms = 1e3 * r.outcomes.iter().map(|o| o.flow_time_s).sum::<f64>() / flows as f64;
    assert!((fct_ms - 2.8).abs() < 1e-3, "{fct_ms}");
}

/// Orchestra's Weighted Shuffle Scheduling, as Varys Figure 2c applies it to both coflows at
/// once: every port shares its capacity among the flows crossing it in proportion to their
/// remaining bytes, so the flows of one port finish together. Not a policy we ship (Varys
/// subsumes it with MADD); here only to check the figure.
#[derive(Debug)]
struct Wss;

impl coflow_sched::Scheduler for Wss {
    fn name(&self) -> &'static str {
        "wss"
    }

    fn model(&self) -> coflow_sched::ServiceModel {
        coflow_sched::ServiceModel::Proportional
    }

    fn flow_finish_gap(&self) -> Option<coflow_core::Nanos> {
        Some(coflow_core::Nanos::ZERO)
    }

    fn poll_allocation(
        &mut self,
        input: &coflow_sched::Input<'_>,
        out: &mut coflow_sched::Allocation,
    ) -> Option<coflow_core::Nanos> {
        let mut load = vec![0.0; input.fabric.resources()];
        for c in input.coflows {
            for (r, b) in input.remaining_loads(c) {
                load[r as usize] += b;
            }
        }
        for c in input.coflows {
            for l in c.legs.clone() {
                let leg = &input.legs[l];
                if leg.is_active() {
                    let share = leg
                        .route
                        .hops()
                        .iter()
                        .map(|&r| input.fabric.capacity(r) / load[r as usize])
                        .fold(f64::INFINITY, f64::min);
                    out.give_leg_fraction(l, share);
                }
            }
        }
        None
    }
}

#[test]
fn figure_2c_weighted_shuffle_scheduling_gives_average_fct_3_6() {
    // Port 1 shares between 1 and 2 units in proportion: both end at 3. Port 2's two 2-unit
    // flows end at 4, port 3's 4 units at 4. FCT (3 + 4 + 4 + 3 + 4) / 5 = 3.6, CCT 4 and 4.
    let w = coflow_core::Workload::new(5, figure_1()).unwrap();
    let cfg = coflow_sim::SimConfig { check_invariants: true, ..coflow_sim::SimConfig::big_switch(unit_rate()) };
    let r = coflow_sim::simulate(&w, Box::new(Wss), &cfg).unwrap();
    assert_ms(&ccts_ms(&r), &[4.0, 4.0]);
    let fct_ms = 1e3 * r.outcomes.iter().map(|o| o.flow_time_s).sum::<f64>() / 5.0;
    assert!((fct_ms - 3.6).abs() < 1e-3, "{fct_ms}");
}

/// The talk's D-CLAS example: two coflows of the same size (3 units) on the same ports, arriving
/// together. Continuous least-attained-service keeps their attained service equal, so they share
/// the ports and both finish at 6, which is what per-flow fairness does here. D-CLAS keeps both in
/// its first queue (3 units are under the first threshold, 10 MiB) and serves them first come
/// first served: 3 and 6.
#[test]
fn the_talk_dclas_example_discretized_gives_3_and_6_where_continuous_las_gives_6_and_6() {
    let coflows = || vec![coflow(1, 0, vec![flow(0, 1, 3)]), coflow(2, 0, vec![flow(0, 1, 3)])];
    assert_ms(&ccts_ms(&run("fair", 2, unit_rate(), coflows())), &[6.0, 6.0]);
    assert_ms(&ccts_ms(&run("aalo", 2, unit_rate(), coflows())), &[3.0, 6.0]);
}
