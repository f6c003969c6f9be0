//! The blind policies beyond `aalo`, `philae` and `saath`, on cases computed by hand: what each
//! decision gives every flow, what the policy learned, and the completion times.

use std::sync::{Arc, Mutex};

use coflow_core::{Bytes, Coflow, CoflowId, Flow, MIB, MachineId, Nanos, Rate, Workload};
use coflow_sched::{
    BlindAllocation, BlindCoflow, BlindInput, BlindScheduler, Blinded, Philae, PhilaeConfig, Pilots, Route, Saath,
    SaathConfig,
};
use coflow_sim::{SimConfig, SimResult, simulate};

/// What one decision gave: its time, and each active leg of each coflow as (coflow, route's
/// sender and receiver machines, per-flow rate).
#[derive(Clone, Debug)]
struct Decision {
    now: Nanos,
    rates: Vec<(u64, u32, u32, f64)>,
    /// What the policy says of each coflow after the decision (queue, estimate or bytes sent).
    notes: Vec<(u64, Option<usize>, Option<f64>)>,
}

/// What a test reads of a policy about one coflow: a queue, and an estimate or bytes sent.
type Note<P> = fn(&P, CoflowId) -> (Option<usize>, Option<f64>);

/// Each coflow's pilots, as first seen.
type PilotLog = Arc<Mutex<Vec<(u64, Vec<Route>)>>>;

/// A blind policy that records its decisions.
#[derive(Debug)]
struct Spy<P> {
    inner: P,
    machines: u32,
    log: Arc<Mutex<Vec<Decision>>>,
    note: Note<P>,
}

impl<P: BlindScheduler> BlindScheduler for Spy<P> {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn report_interval(&self) -> Nanos {
        self.inner.report_interval()
    }

    fn flow_finish_gap(&self) -> Option<Nanos> {
        self.inner.flow_finish_gap()
    }

    fn standing_rates(&self) -> bool {
        self.inner.standing_rates()
    }

    fn handle_finished(&mut self, now: Nanos, coflow: CoflowId) {
        self.inner.handle_finished(now, coflow);
    }

    fn poll_allocation(&mut self, input: &BlindInput<'_>, out: &mut BlindAllocation) -> Option<Nanos> {
        let wake = self.inner.poll_allocation(input, out);
        let m = self.machines;
        let mut rates = Vec::new();
        for (k, c) in input.coflows.iter().enumerate() {
            for l in c.legs.clone() {
                let leg = &input.legs[l];
                if leg.active_flows > 0 && !leg.route.hops().is_empty() {
                    let h = leg.route.hops();
                    rates.push((c.id.0, h[0], h[1] - m, out.coflow_rate[k] + out.leg_rate[l]));
                }
            }
        }
        let notes = input
            .coflows
            .iter()
            .map(|c| {
                let (q, x) = (self.note)(&self.inner, c.id);
                (c.id.0, q, x)
            })
            .collect();
        self.log.lock().unwrap().push(Decision { now: input.now, rates, notes });
        wake
    }
}

fn flow(src: u32, dst: u32, bytes: u64) -> Flow {
    Flow { src: MachineId(src), dst: MachineId(dst), size: Bytes(bytes) }
}

/// Coflow `id` as a blind policy's input shows it: arrived at 0, a job of its own, with one
/// active flow on each of `legs` and `pending` flows still to come.
fn blind_coflow(id: u64, legs: std::ops::Range<usize>, pending: u32) -> BlindCoflow {
    BlindCoflow {
        id: CoflowId(id),
        arrival: Nanos::ZERO,
        weight: 1.0,
        sent: 0.0,
        job: CoflowId(id),
        job_sent: 0.0,
        width: legs.len() as u32 + pending,
        pending,
        active_flows: legs.len() as u32,
        legs,
    }
}

fn run<P: BlindScheduler + 'static>(
    inner: P,
    note: Note<P>,
    machines: u32,
    rate: f64,
    coflows: Vec<Coflow>,
) -> (SimResult, Vec<Decision>) {
    let log = Arc::new(Mutex::new(Vec::new()));
    let spy = Spy { inner, machines, log: log.clone(), note };
    let w = Workload::new(machines, coflows).unwrap();
    let cfg = SimConfig { check_invariants: true, ..SimConfig::big_switch(Rate::from_bytes_per_sec(rate)) };
    let r = simulate(&w, Box::new(Blinded::new(spy)), &cfg).unwrap();
    let log = log.lock().unwrap().clone();
    (r, log)
}

fn secs(r: &SimResult) -> Vec<f64> {
    r.outcomes.iter().map(|o| o.cct().expect("finished").as_secs_f64()).collect()
}

#[track_caller]
fn assert_secs(actual: &[f64], expected: &[f64]) {
    assert_eq!(actual.len(), expected.len());
    for (a, e) in actual.iter().zip(expected) {
        assert!((a - e).abs() < 1e-6, "got {actual:?}, expected {expected:?}");
    }
}

/// The rate of coflow `id`'s flow from `s` to `d` at the last decision at or before `t` seconds.
fn rate_at(log: &[Decision], t: f64, id: u64, s: u32, d: u32) -> f64 {
    let at = Nanos::from_secs_f64(t);
    let dec = log.iter().rev().find(|x| x.now <= at).expect("a decision by then");
    dec.rates.iter().find(|x| (x.0, x.1, x.2) == (id, s, d)).map_or(0.0, |x| x.3)
}

fn philae_note(p: &Philae, c: CoflowId) -> (Option<usize>, Option<f64>) {
    (p.main_queue(c), p.estimate(c))
}

fn philae(cfg: PhilaeConfig) -> Philae {
    Philae::new(PhilaeConfig { flow_finish_gap: Some(Nanos::ZERO), ..cfg })
}

/// Six machines, every port 100 B/s. W (width 6 > thin limit 2, so wide, two pilots) sends
/// 100 B into machine 3 and 300 B into machine 4 from each of machines 0, 1, 2; T is thin, 50 B
/// from 0 to 3.
///
/// Pilots: every port carries no pilot, so the first pair of the grid, 0→3; then senders sort
/// [1, 2, 0] and receivers [4, 3] by pilots on them, so 1→4. T's flow is a pilot too (thin).
/// t=0: T's 0→3 gets 100 first; W's pilot 0→3 nothing (sender 0 full), pilot 1→4 100, the other
/// four flows nothing. t=0.5: T done; W's pilot 0→3 100. t=1.5 and t=3: the pilots finish: the
/// estimate is (100 + 300) / 2 = 200, contention 0, impact 0: main queue 0. There W is served
/// sender by sender: 0→4 and 1→3 100, 2→3 and 2→4 nothing (receivers full). t=4: 1→3 done, 2→3
/// 100. t=5: 2→3 done; 2→4 waits for 0→4, done at 6. 2→4 then ends at 9.
#[test]
fn philae_sends_pilots_first_and_learns_the_mean_of_their_sizes() {
    let cfg = PhilaeConfig { thin_limit: 2, pilots: Pilots::Constant(2), ..PhilaeConfig::default() };
    let w = Coflow::new(
        CoflowId(1),
        Nanos::ZERO,
        vec![flow(0, 3, 100), flow(0, 4, 300), flow(1, 3, 100), flow(1, 4, 300), flow(2, 3, 100), flow(2, 4, 300)],
    );
    let t = Coflow::new(CoflowId(2), Nanos::ZERO, vec![flow(0, 3, 50)]);
    let (r, log) = run(philae(cfg), philae_note, 6, 100.0, vec![w, t]);
    assert_secs(&secs(&r), &[9.0, 0.5]);
    // Pilots first, the rest of W held while they send.
    assert_eq!(rate_at(&log, 0.0, 2, 0, 3), 100.0);
    assert_eq!(rate_at(&log, 0.0, 1, 0, 3), 0.0);
    assert_eq!(rate_at(&log, 0.0, 1, 1, 4), 100.0);
    assert_eq!(rate_at(&log, 0.5, 1, 0, 3), 100.0);
    for t in [0.0, 0.5, 1.5, 2.9] {
        for (s, d) in [(0, 4), (1, 3), (2, 3), (2, 4)] {
            assert_eq!(rate_at(&log, t, 1, s, d), 0.0, "W's {s}->{d} at {t} s is not a pilot");
        }
    }
    // No estimate while probing; 200 and queue 0 once both pilots finished.
    let note = |t: f64| {
        let at = Nanos::from_secs_f64(t);
        let d = log.iter().rev().find(|x| x.now <= at).unwrap();
        d.notes.iter().find(|n| n.0 == 1).map(|n| (n.1, n.2)).unwrap()
    };
    assert_eq!(note(1.5), (None, None));
    assert_eq!(note(3.0), (Some(0), Some(200.0)));
    assert_eq!(rate_at(&log, 3.0, 1, 0, 4), 100.0);
    assert_eq!(rate_at(&log, 3.0, 1, 1, 3), 100.0);
    assert_eq!(rate_at(&log, 3.0, 1, 2, 3), 0.0);
    assert_eq!(rate_at(&log, 4.0, 1, 2, 3), 100.0);
    assert_eq!(rate_at(&log, 5.0, 1, 2, 4), 0.0);
    assert_eq!(rate_at(&log, 6.0, 1, 2, 4), 100.0);
}

/// The pilots are chosen on the ports with the fewest pilots of other coflows: A (wide, one
/// pilot) takes 0→3, the first pair; B arriving with it has the same senders and receivers, but
/// sender 0 and receiver 3 carry A's pilot, so its pilot is 1→4.
#[test]
fn philae_places_pilots_away_from_other_pilots() {
    let cfg = PhilaeConfig { thin_limit: 2, pilots: Pilots::Constant(1), ..PhilaeConfig::default() };
    let mesh = |id: u64, bytes: u64| {
        Coflow::new(
            CoflowId(id),
            Nanos::ZERO,
            vec![flow(0, 3, bytes), flow(0, 4, bytes), flow(1, 3, bytes), flow(1, 4, bytes)],
        )
    };
    let pilots = Arc::new(Mutex::new(Vec::<(u64, Vec<Route>)>::new()));
    #[derive(Debug)]
    struct Seen(Philae, PilotLog);
    impl BlindScheduler for Seen {
        fn name(&self) -> &'static str {
            "philae"
        }
        fn report_interval(&self) -> Nanos {
            self.0.report_interval()
        }
        fn flow_finish_gap(&self) -> Option<Nanos> {
            self.0.flow_finish_gap()
        }
        fn handle_finished(&mut self, now: Nanos, c: CoflowId) {
            let mut seen = self.1.lock().unwrap();
            if !seen.iter().any(|x| x.0 == c.0) {
                seen.push((c.0, self.0.pilots(c).to_vec()));
            }
            self.0.handle_finished(now, c);
        }
        fn poll_allocation(&mut self, input: &BlindInput<'_>, out: &mut BlindAllocation) -> Option<Nanos> {
            let wake = self.0.poll_allocation(input, out);
            let mut seen = self.1.lock().unwrap();
            for c in input.coflows {
                if !seen.iter().any(|x| x.0 == c.id.0) {
                    seen.push((c.id.0, self.0.pilots(c.id).to_vec()));
                }
            }
            wake
        }
    }
    let w = Workload::new(6, vec![mesh(1, 100), mesh(2, 100)]).unwrap();
    let cfg_sim = SimConfig { check_invariants: true, ..SimConfig::big_switch(Rate::from_bytes_per_sec(100.0)) };
    let r = simulate(&w, Box::new(Blinded::new(Seen(philae(cfg), pilots.clone()))), &cfg_sim).unwrap();
    assert!(r.outcomes.iter().all(|o| o.finish.is_some()));
    let fabric = coflow_sched::Fabric::big_switch(6, Rate::from_bytes_per_sec(100.0));
    let route = |s, d| fabric.route(MachineId(s), MachineId(d));
    let seen = pilots.lock().unwrap();
    assert_eq!(seen[0], (1, vec![route(0, 3)]));
    assert_eq!(seen[1], (2, vec![route(1, 4)]));
}

/// Thin coflows by least contention: P (0→3), Q (1→3) and R (0→4), 100 B each at 100 B/s. P
/// shares a port with Q and with R (contention 2), Q and R each with P only (1): Q and R go
/// first, together, and P after them. First come first served would send P alone, then Q and R.
#[test]
fn philae_orders_thin_coflows_by_least_contention() {
    let c = |id, s, d| Coflow::new(CoflowId(id), Nanos::ZERO, vec![flow(s, d, 100)]);
    let (r, _) = run(philae(PhilaeConfig::default()), philae_note, 6, 100.0, vec![c(1, 0, 3), c(2, 1, 3), c(3, 0, 4)]);
    assert_secs(&secs(&r), &[2.0, 1.0, 1.0]);
}

/// Shortest Coflow First on learned sizes: S sends 2 MiB from each of machines 0 and 1 to each of
/// 10, 11, 12 and 13 (8 flows, 16 MiB); B 1.5 MiB from each of 0..8 to each of 10..20 (80 flows,
/// 120 MiB); both wide (thin limit 7), five pilots each, sharing senders 0 and 1. Each learns
/// its flow size from its pilots (all its flows are alike): S's 2 MiB times 8 is 16 MiB, main
/// queue 2 (limits 1, 10, 100 MiB); B's 1.5 MiB times 80 is 120 MiB, queue 3; so S goes first
/// and finishes first. Contention times flow size would rank them the other way round: each
/// contends with the other (1), and B's flows are the smaller, 1.5 MiB against 2 MiB.
#[test]
fn philae_ranks_wide_coflows_by_their_learned_size() {
    let mib = MIB;
    let mesh = |id: u64, senders: std::ops::Range<u32>, receivers: std::ops::Range<u32>, bytes: u64| {
        let flows = senders.flat_map(|s| receivers.clone().map(move |d| flow(s, d, bytes))).collect();
        Coflow::new(CoflowId(id), Nanos::ZERO, flows)
    };
    let s = mesh(1, 0..2, 10..14, 2 * mib);
    let b = mesh(2, 0..8, 10..20, 3 * mib / 2);
    let (r, log) = run(philae(PhilaeConfig::default()), philae_note, 20, 100.0 * mib as f64, vec![s, b]);
    let placed =
        |id: u64| log.iter().find_map(|d| d.notes.iter().find(|n| n.0 == id && n.1.is_some()).map(|n| (n.1, n.2)));
    assert_eq!(placed(1), Some((Some(2), Some(2.0 * mib as f64))));
    assert_eq!(placed(2), Some((Some(3), Some(1.5 * mib as f64))));
    let cct = secs(&r);
    assert!(cct[0] < cct[1], "S (16 MiB) before B (120 MiB): {cct:?}");
}

/// Time slots: with main queues 0 and 2 non-empty, queue 0 works for 256 slots of 8 ms, then
/// queue 2 for ⌊256 / 10²⌋ = 2, and in that run queue 2's coflow takes the port they share.
#[test]
fn philae_shares_time_between_main_queues_by_slots() {
    // Both wide (three flows, thin limit 2), one pilot each: A probes 0→3 (100 B) and is placed
    // by its size (impact = width × estimate: 300 B, queue 0); B probes 1→4 (10 KB) and goes to
    // queue 2 (30 KB against limits 1 KB, 10 KB, 100 KB). Then both want sender 2.
    let cfg = PhilaeConfig {
        thin_limit: 2,
        pilots: Pilots::Constant(1),
        impact: coflow_sched::Impact::Size,
        first_limit: 1000.0,
        ..PhilaeConfig::default()
    };
    let a = Coflow::new(CoflowId(1), Nanos::ZERO, vec![flow(0, 3, 100), flow(2, 3, 1_000_000), flow(2, 4, 100)]);
    let b = Coflow::new(CoflowId(2), Nanos::ZERO, vec![flow(1, 4, 10_000), flow(2, 5, 10_000), flow(1, 5, 10_000)]);
    let (_, log) = run(philae(cfg), philae_note, 6, 100_000.0, vec![a, b]);
    // A's pilot (100 B at 100 KB/s) ends at 1 ms, B's (10 KB) at 0.1 s. The first round starts
    // at A's placement (1 ms) with queue 0 alone and ends at 2.049 s; the second has queues 0
    // and 2: queue 0 until 4.097 s, then queue 2 until 4.113 s.
    let at_2s = log.iter().rev().find(|d| d.now.as_secs_f64() <= 2.0).unwrap();
    let note = |id: u64| at_2s.notes.iter().find(|n| n.0 == id).and_then(|n| n.1);
    assert_eq!((note(1), note(2)), (Some(0), Some(2)));
    for t in [2.049, 4.097, 4.113] {
        assert!(log.iter().any(|d| (d.now.as_secs_f64() - t).abs() < 1e-6), "a decision at {t} s");
    }
    // Sender 2: A's flow in queue 0 holds it, except during queue 2's run.
    assert_eq!(rate_at(&log, 1.5, 2, 2, 5), 0.0);
    assert_eq!(rate_at(&log, 4.0, 2, 2, 5), 0.0);
    assert_eq!(rate_at(&log, 4.1, 2, 2, 5), 100_000.0);
    assert_eq!(rate_at(&log, 4.12, 2, 2, 5), 0.0);
}

/// A live coflow gains its flows as its gets come in. W declared 4 flows (0→4, 1→5, 2→6, 3→7 on
/// eight machines, thin limit 2, two pilots): at 0 only 0→4 is in and 3 are pending, so W is
/// served as thin (0→4 at the full 100 B/s, no pilots) and asks to be looked at again by the end
/// of its gathering, 50 ms after its arrival; at 1 ms all four are in and W chooses its two pilots
/// among them, holding the others. V declared 4 but only 0→4 ever came: once gathering ended at
/// 50 ms it probes with what it has.
#[test]
fn philae_chooses_pilots_once_a_live_coflows_flows_are_in() {
    use coflow_sched::{BlindLeg, Fabric};
    let cfg = PhilaeConfig { thin_limit: 2, pilots: Pilots::Constant(2), ..PhilaeConfig::default() };
    assert_eq!(cfg.gather, Nanos::from_millis(50));
    let fabric = Fabric::big_switch(8, Rate::from_bytes_per_sec(100.0));
    let leg = |s: u32, d: u32| BlindLeg { route: fabric.route(MachineId(s), MachineId(d)), active_flows: 1 };
    let decide = |p: &mut Philae, now: Nanos, coflows: &[BlindCoflow], legs: &[BlindLeg]| {
        let input = BlindInput {
            now,
            fabric: &fabric,
            coflows,
            legs,
            next_report: Nanos::MAX,
            everything: true,
            legs_finished: &[],
            flows_finished: &[],
        };
        let mut out = BlindAllocation::default();
        out.reset(&input);
        let wake = p.poll_allocation(&input, &mut out);
        let rates: Vec<f64> = (0..legs.len()).map(|l| out.leg_rate.get(l).copied().unwrap_or(0.0)).collect();
        (wake, rates)
    };

    let mut p = philae(cfg);
    let (wake, rates) = decide(&mut p, Nanos::ZERO, &[blind_coflow(1, 0..1, 3)], &[leg(0, 4)]);
    assert!(p.pilots(CoflowId(1)).is_empty(), "no pilots while W's gets come in");
    assert_eq!(rates, vec![100.0]);
    assert!(wake.is_some_and(|w| w <= Nanos::from_millis(50)), "{wake:?}");

    let all = [leg(0, 4), leg(1, 5), leg(2, 6), leg(3, 7)];
    let (_, rates) = decide(&mut p, Nanos::from_millis(1), &[blind_coflow(1, 0..4, 0)], &all);
    assert_eq!(p.pilots(CoflowId(1)).len(), 2, "two pilots among all four flows");
    let pilots: Vec<usize> = (0..4).filter(|&l| p.pilots(CoflowId(1)).contains(&all[l].route)).collect();
    for (l, &r) in rates.iter().enumerate() {
        assert_eq!(r, if pilots.contains(&l) { 100.0 } else { 0.0 }, "leg {l}");
    }

    let mut p = philae(cfg);
    decide(&mut p, Nanos::ZERO, &[blind_coflow(2, 0..1, 3)], &[leg(0, 4)]);
    assert!(p.pilots(CoflowId(2)).is_empty());
    decide(&mut p, Nanos::from_millis(50), &[blind_coflow(2, 0..1, 3)], &[leg(0, 4)]);
    assert_eq!(p.pilots(CoflowId(2)), &[fabric.route(MachineId(0), MachineId(4))]);
}

fn saath_note(p: &Saath, c: CoflowId) -> (Option<usize>, Option<f64>) {
    (p.queue(c), p.most_sent(c))
}

fn saath(cfg: SaathConfig) -> Saath {
    Saath::new(SaathConfig { flow_finish_gap: Some(Nanos::ZERO), ..cfg })
}

/// Least contention first: X (0→3), Y (1→3) and Z (0→4), 100 B each, all in queue 0. X shares
/// a port with both others: Y and Z go first and X after, where first come first served sends X
/// alone first.
#[test]
fn saath_orders_a_queue_by_least_contention() {
    let c = |id, s, d| Coflow::new(CoflowId(id), Nanos::ZERO, vec![flow(s, d, 100)]);
    let (r, log) = run(saath(SaathConfig::default()), saath_note, 6, 100.0, vec![c(1, 0, 3), c(2, 1, 3), c(3, 0, 4)]);
    assert_secs(&secs(&r), &[2.0, 1.0, 1.0]);
    assert_eq!(rate_at(&log, 0.0, 1, 0, 3), 0.0);
}

/// All or none at one rate: E sends 0→3, 0→4 and 1→3 (50 B each), F 1→4 (100 B). E first (both
/// contend with one coflow; E arrived first): two of its flows leave machine 0 and two enter
/// machine 3, so each gets 50, and all three end together at 1 s. F gets what is left at
/// sender 1 and receiver 4, 50, then 100 alone: 50 B at 1 s, done at 1.5 s.
#[test]
fn saath_serves_a_coflow_all_or_none_at_one_rate() {
    let e = Coflow::new(CoflowId(1), Nanos::ZERO, vec![flow(0, 3, 50), flow(0, 4, 50), flow(1, 3, 50)]);
    let f = Coflow::new(CoflowId(2), Nanos::ZERO, vec![flow(1, 4, 100)]);
    let (r, log) = run(saath(SaathConfig::default()), saath_note, 6, 100.0, vec![e, f]);
    assert_secs(&secs(&r), &[1.0, 1.5]);
    for (s, d) in [(0, 3), (0, 4), (1, 3)] {
        assert_eq!(rate_at(&log, 0.0, 1, s, d), 50.0);
    }
    assert_eq!(rate_at(&log, 0.0, 2, 1, 4), 50.0);
}

/// None, then work conservation: H (0→4) is ahead of G (0→3 and 2→5) in the order; G cannot have
/// sender 0, so all or none gives it nothing; what is left goes to its 2→5 flow. Without work
/// conservation G gets nothing until H is done.
#[test]
fn saath_gives_none_then_what_is_left() {
    let h = Coflow::new(CoflowId(1), Nanos::ZERO, vec![flow(0, 4, 100)]);
    let g = Coflow::new(CoflowId(2), Nanos::ZERO, vec![flow(0, 3, 100), flow(2, 5, 100)]);
    let (_, log) = run(saath(SaathConfig::default()), saath_note, 6, 100.0, vec![h.clone(), g.clone()]);
    assert_eq!(rate_at(&log, 0.0, 1, 0, 4), 100.0);
    assert_eq!(rate_at(&log, 0.0, 2, 0, 3), 0.0);
    assert_eq!(rate_at(&log, 0.0, 2, 2, 5), 100.0);
    let strict = SaathConfig { work_conserving: false, ..SaathConfig::default() };
    let (r, log) = run(saath(strict), saath_note, 6, 100.0, vec![h, g]);
    assert_eq!(rate_at(&log, 0.0, 2, 2, 5), 0.0);
    assert_secs(&secs(&r), &[1.0, 2.0]);
}

/// Per-flow limits: four flows of 1, 1, 1 and 8 MiB from distinct machines at 10 MiB/s. The
/// coflow's share of queue 0's 10 MiB per flow is 2.5 MiB. All four run at 10 MiB/s; three end
/// at 0.1 s; the 8 MiB flow reaches 2.5 MiB at 0.25 s, when the coflow moves to queue 1 (its
/// total bytes reach 10 MiB only at 0.7 s).
#[test]
fn saath_moves_a_coflow_down_when_one_flow_sent_its_share() {
    let mib = MIB;
    let w4 = Coflow::new(
        CoflowId(1),
        Nanos::ZERO,
        vec![flow(0, 4, mib), flow(1, 5, mib), flow(2, 6, mib), flow(3, 7, 8 * mib)],
    );
    let cfg = SaathConfig { flow_finish_gap: Some(Nanos::from_millis(40)), ..SaathConfig::default() };
    let (_, log) = run(Saath::new(cfg), saath_note, 8, 10.0 * mib as f64, vec![w4]);
    let queue_at = |t: f64| {
        let d = log.iter().rev().find(|x| x.now.as_secs_f64() <= t).unwrap();
        d.notes[0].1
    };
    assert_eq!(queue_at(0.2499), Some(0));
    let moved = log.iter().find(|d| d.notes[0].1 == Some(1)).expect("it moved");
    assert!((moved.now.as_secs_f64() - 0.25).abs() < 1e-6, "moved at {:?}", moved.now);
}

/// Starvation freedom: A (0→3) and C (1→4) each contend with B (0→4) only, B with both, so least
/// contention first serves A and C and B none, on ports A and C fill (1 MiB/s each). With aging
/// 0.1, B has waited too long once 0.1 × 10 MiB / 1 MiB/s = 1 s passes: it goes first, takes
/// sender 0 and receiver 4, and its 1 MiB ends at 2 s; A and C (8 MiB each) wait meanwhile and end
/// at 9 s. Without aging B waits for both: A and C end at 8 s, B at 9 s.
#[test]
fn saath_serves_a_coflow_that_waited_too_long_first() {
    let mib = MIB;
    let a = Coflow::new(CoflowId(1), Nanos::ZERO, vec![flow(0, 3, 8 * mib)]);
    let b = Coflow::new(CoflowId(2), Nanos::ZERO, vec![flow(0, 4, mib)]);
    let c = Coflow::new(CoflowId(3), Nanos::ZERO, vec![flow(1, 4, 8 * mib)]);
    let rate = mib as f64;
    let aged = SaathConfig { aging: Some(0.1), ..SaathConfig::default() };
    let (r, _) = run(saath(aged), saath_note, 6, rate, vec![a.clone(), b.clone(), c.clone()]);
    assert_secs(&secs(&r), &[9.0, 2.0, 9.0]);
    let never = SaathConfig { aging: None, ..SaathConfig::default() };
    let (r, _) = run(saath(never), saath_note, 6, rate, vec![a, b, c]);
    assert_secs(&secs(&r), &[8.0, 9.0, 8.0]);
}

/// Bytes sent under all or none and on top of it: K sends 0→3 and 0→4 (50 B each) and 1→5
/// (300 B) at 100 B/s. Sender 0 holds K's rate to 50 per flow; what that leaves at sender 1 and
/// receiver 5 goes to 1→5, which sends 100. At 1 s the two 50 B flows are done, and the flow that
/// sent most is 1→5, with 100 B (50 of them all or none, 50 its own); alone, it then sends 100
/// and ends at 3 s.
#[test]
fn saath_counts_what_a_flow_sent_all_or_none_and_on_its_own() {
    let k = Coflow::new(CoflowId(1), Nanos::ZERO, vec![flow(0, 3, 50), flow(0, 4, 50), flow(1, 5, 300)]);
    let (r, log) = run(saath(SaathConfig::default()), saath_note, 6, 100.0, vec![k]);
    assert_secs(&secs(&r), &[3.0]);
    for (s, d, rate) in [(0, 3, 50.0), (0, 4, 50.0), (1, 5, 100.0)] {
        assert_eq!(rate_at(&log, 0.0, 1, s, d), rate);
    }
    let at_1s = log.iter().find(|d| d.now == Nanos::from_secs(1)).expect("a decision at 1 s");
    assert_eq!(at_1s.notes[0].2, Some(100.0));
    assert_eq!(rate_at(&log, 1.0, 1, 1, 5), 100.0);
}

/// A flow's own bytes count after its extra stops: K as above; at 1 s its two 50 B flows are done
/// and 1→5, which sent 100 B (50 of them its own), runs alone all or none at 100 with no extra.
/// When L (2→3) arrives at 1.5 s, the flow that sent most is 1→5 with 150 B.
#[test]
fn saath_keeps_counting_a_flows_own_bytes_once_its_extra_stops() {
    let k = Coflow::new(CoflowId(1), Nanos::ZERO, vec![flow(0, 3, 50), flow(0, 4, 50), flow(1, 5, 300)]);
    let l = Coflow::new(CoflowId(2), Nanos::from_millis(1500), vec![flow(2, 3, 50)]);
    let (r, log) = run(saath(SaathConfig::default()), saath_note, 6, 100.0, vec![k, l]);
    assert_secs(&secs(&r), &[3.0, 0.5]);
    assert_eq!(rate_at(&log, 1.0, 1, 1, 5), 100.0);
    let at = log.iter().find(|d| d.now == Nanos::from_millis(1500)).expect("a decision at 1.5 s");
    let most = at.notes.iter().find(|n| n.0 == 1).expect("K's note").2;
    assert_eq!(most, Some(150.0));
}

/// Aging follows the capacities: A (0→3) and B (0→4), one flow each, queue 0's limit 100 B,
/// aging 1, no work conservation. At 0 every port sends 100 B/s: A goes first at 100 and B waits,
/// to go first once it has waited 1 · 100 / 100 = 1 s. At 0.1 s every port sends 200 B/s: B's wait
/// is 0.5 s from 0, and A, which sent 10 B, crosses its limit at 200 B/s at 0.55 s, so the policy
/// asks to decide again at 0.5 s.
#[test]
fn saath_ages_a_waiting_coflow_by_the_capacities_in_force() {
    use coflow_sched::{BlindLeg, Fabric};
    let cfg =
        SaathConfig { first_threshold: 100.0, aging: Some(1.0), work_conserving: false, ..SaathConfig::default() };
    let slow = Fabric::big_switch(6, Rate::from_bytes_per_sec(100.0));
    let fast = Fabric::big_switch(6, Rate::from_bytes_per_sec(200.0));
    let legs = [0, 1].map(|j| BlindLeg { route: slow.route(MachineId(0), MachineId(3 + j)), active_flows: 1 });
    let coflows = [blind_coflow(1, 0..1, 0), blind_coflow(2, 1..2, 0)];
    let mut p = Saath::new(cfg);
    let mut decide = |fabric: &Fabric, now: Nanos, everything: bool| {
        let input = BlindInput {
            now,
            fabric,
            coflows: &coflows,
            legs: &legs,
            next_report: Nanos::MAX,
            everything,
            legs_finished: &[],
            flows_finished: &[],
        };
        let mut out = BlindAllocation::default();
        out.reset(&input);
        let wake = p.poll_allocation(&input, &mut out);
        (wake, out.coflow_rate.clone())
    };
    assert_eq!(decide(&slow, Nanos::ZERO, true), (Some(Nanos::from_secs(1)), vec![100.0, 0.0]));
    assert_eq!(decide(&fast, Nanos::from_millis(100), false), (Some(Nanos::from_millis(500)), vec![200.0, 0.0]));
}
