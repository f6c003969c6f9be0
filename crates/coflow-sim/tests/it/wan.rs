//! The wide-area model (Siphon): its worked examples, determinism across thread counts, and
//! properties of its policies on random small topologies. Every run checks capacity and exact
//! delivery at every decision.

use std::sync::{Arc, Mutex};

use coflow_core::{Bytes, Coflow, CoflowId, Flow, MachineId, Nanos, Workload};
use coflow_sched::{Allocation, Bandwidth, Fabric, Hooked, Hooks, Input, Link, Scheduler, Wan, policy};
use coflow_sim::weather::{WeatherLog, WeatherStep};
use coflow_sim::{SimConfig, SimResult, WanConfig, connection_draw, detour_fraction, draw, simulate};
use proptest::prelude::*;

const MIB: f64 = (1u64 << 20) as f64;

fn mib(n: f64) -> Bytes {
    Bytes((n * MIB) as u64)
}

fn flow(src: u32, dst: u32, size_mib: f64) -> Flow {
    Flow { src: MachineId(src), dst: MachineId(dst), size: mib(size_mib) }
}

/// A full mesh of `dcs` datacenters; `bw(a, b)` is the link from `a` to `b`, in MiB/s.
fn mesh(dcs: u32, placement: Vec<u32>, bw: impl Fn(u32, u32) -> Bandwidth) -> Wan {
    let mut links = Vec::new();
    for a in 0..dcs {
        for b in 0..dcs {
            if a != b {
                let bandwidth = match bw(a, b) {
                    Bandwidth::Constant(v) => Bandwidth::Constant(v * MIB),
                    Bandwidth::Uniform(lo, hi) => Bandwidth::Uniform(lo * MIB, hi * MIB),
                    Bandwidth::Normal { mean, sd, min } => {
                        Bandwidth::Normal { mean: mean * MIB, sd: sd * MIB, min: min * MIB }
                    }
                    Bandwidth::Empirical(s) => Bandwidth::Empirical(s.iter().map(|v| v * MIB).collect()),
                };
                links.push(Link { from: a, to: b, bandwidth });
            }
        }
    }
    let names = (0..dcs).map(|d| format!("dc{d}")).collect();
    Wan::new(names, links, placement).expect("a valid topology")
}

fn run(name: &str, fabric: &Wan, coflows: Vec<Coflow>, multipath: bool, seed: u64) -> SimResult {
    run_with(name, fabric, coflows, multipath, seed, None)
}

/// As `run`, with per-connection bandwidth if `per_connection` (its redraw interval) is set.
fn run_with(
    name: &str,
    fabric: &Wan,
    coflows: Vec<Coflow>,
    multipath: bool,
    seed: u64,
    per_connection: Option<Nanos>,
) -> SimResult {
    let w = Workload::new(fabric.machines(), coflows).expect("valid workload");
    let cfg = WanConfig {
        wan: fabric.clone(),
        redraw: Nanos::from_millis(200),
        seed,
        multipath,
        per_connection,
        weather: None,
    };
    let sim = SimConfig { check_invariants: true, ..SimConfig::wide_area(cfg) };
    simulate(&w, policy::seeded(name, seed).expect("known policy"), &sim).unwrap()
}

/// Records the coflow rates of the first decision of the policy it is hooked to.
#[derive(Debug)]
struct FirstDecision {
    seen: Arc<Mutex<Vec<(CoflowId, f64)>>>,
}

impl Hooks for FirstDecision {
    fn decide(&mut self, policy: &mut dyn Scheduler, input: &Input<'_>, out: &mut Allocation) -> Option<Nanos> {
        let wake = policy.poll_allocation(input, out);
        let mut seen = self.seen.lock().unwrap();
        if seen.is_empty() {
            seen.extend(input.coflows.iter().zip(&out.coflow_rate).map(|(c, &r)| (c.id, r)));
        }
        wake
    }
}

/// The coflow the policy serves first (MADD, `σ > 0`) when both are present.
fn served_first(name: &str, fabric: &Wan, coflows: Vec<Coflow>, seed: u64) -> CoflowId {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let policy = Hooked::new(policy::seeded(name, seed).unwrap(), FirstDecision { seen: seen.clone() });
    let w = Workload::new(fabric.machines(), coflows).unwrap();
    let cfg = WanConfig {
        wan: fabric.clone(),
        redraw: Nanos::MAX,
        seed,
        multipath: false,
        per_connection: None,
        weather: None,
    };
    let sim = SimConfig { check_invariants: true, ..SimConfig::wide_area(cfg) };
    simulate(&w, Box::new(policy), &sim).expect("serves the wide area");
    let seen = seen.lock().unwrap();
    let served: Vec<CoflowId> = seen.iter().filter(|(_, r)| *r > 0.0).map(|(id, _)| *id).collect();
    assert_eq!(served.len(), 1, "{name}: one coflow first, the other only backfilled: {seen:?}");
    served[0]
}

/// Siphon Figure 1: coflows A and B across two links into datacenter 2. A's large flow A1 crosses
/// link 1, whose bandwidth is usually a little above its mean and rarely very low; B's large flow
/// B2 crosses link 2, spread evenly around the same mean. Both links have mean 10 MiB/s and both
/// large flows are 100 MiB, so expected durations agree and `mrtf` cannot tell A from B (it serves
/// whichever came first); A1 is more likely the shorter, so `siphon-mc` serves A first, whatever
/// the labels.
#[test]
fn figure_1_monte_carlo_prefers_the_coflow_likely_to_be_short() {
    // Machine 0 in datacenter 0, machine 1 in 1, machine 2 in 2; link 1 is 0 -> 2, link 2 is 1 -> 2.
    let fabric = mesh(3, vec![0, 1, 2], |a, b| match (a, b) {
        (0, 2) => Bandwidth::Empirical([vec![10.5; 19], vec![0.5]].concat()),
        (1, 2) => Bandwidth::Uniform(9.0, 11.0),
        _ => Bandwidth::Constant(10.0),
    });
    let means: Vec<f64> = fabric.links().iter().map(|l| l.bandwidth.mean() / MIB).collect();
    assert!(means.iter().all(|&m| (m - 10.0).abs() < 1e-9), "equal means: {means:?}");
    let a = |id| Coflow::new(CoflowId(id), Nanos::ZERO, vec![flow(0, 2, 100.0), flow(1, 2, 1.0)]);
    let b = |id| Coflow::new(CoflowId(id), Nanos::ZERO, vec![flow(0, 2, 1.0), flow(1, 2, 100.0)]);
    for seed in [1, 2, 3] {
        // A labelled first, then B labelled first.
        assert_eq!(served_first("siphon-mc", &fabric, vec![a(1), b(2)], seed), CoflowId(1));
        assert_eq!(served_first("siphon-mc", &fabric, vec![b(1), a(2)], seed), CoflowId(2));
    }
    // MRTF sees equal remaining times: its choice follows the labels, not the links.
    assert_eq!(served_first("mrtf", &fabric, vec![a(1), b(2)], 1), CoflowId(1));
    assert_eq!(served_first("mrtf", &fabric, vec![b(1), a(2)], 1), CoflowId(1));
}

/// Siphon Figures 3–5: two reducers R1 and R2 in datacenter 1 fetch from mappers M1, M2 in
/// datacenter 0 and M3 in datacenter 2. Flow group 1 (R1) is 200 MiB (75 + 75 over link 0 -> 1,
/// 50 over 2 -> 1), flow group 2 (R2) 150 MiB (50 + 50, and 50). Links move 50 MiB per time
/// unit, and a reducer computes 50 MiB per unit. Largest group first: group 1 is in at 3 and R1
/// done at 7, group 2 in at 5 and R2 done at 8. The other way round, the job ends at 9.
#[test]
fn lfgf_finishes_the_two_reducer_job_earlier() {
    // M1 = 0, M2 = 1 in dc0; R1 = 2, R2 = 3 in dc1; M3 = 4 in dc2.
    let fabric = mesh(3, vec![0, 0, 1, 1, 2], |_, _| Bandwidth::Constant(50.0));
    let job = vec![
        flow(0, 2, 75.0),
        flow(1, 2, 75.0),
        flow(4, 2, 50.0),
        flow(0, 3, 50.0),
        flow(1, 3, 50.0),
        flow(4, 3, 50.0),
    ];
    let group_bytes = |receiver: u32| job.iter().filter(|f| f.dst.0 == receiver).map(|f| f.size.as_f64()).sum::<f64>();
    let r = run("mrtf+lfgf", &fabric, vec![Coflow::new(CoflowId(1), Nanos::ZERO, job.clone())], false, 1);

    let groups = &r.outcomes[0].groups;
    let at = |m: u32| groups.iter().find(|(r, _)| r.0 == m).unwrap().1.as_secs_f64();
    assert!((at(2) - 3.0).abs() < 1e-6 && (at(3) - 5.0).abs() < 1e-6, "groups finish at 3 and 5: {groups:?}");
    // Computing takes as long as moving the group's bytes over one link.
    let job_end = |groups: &[(MachineId, Nanos)]| {
        groups.iter().map(|(m, t)| t.as_secs_f64() + group_bytes(m.0) / (50.0 * MIB)).fold(0.0, f64::max)
    };
    assert!((job_end(groups) - 8.0).abs() < 1e-6, "{}", job_end(groups));
    // Smallest group first, by hand (Figure 5): group 2 in at 2, group 1 at 5.
    let reversed = [(MachineId(2), Nanos::from_secs(5)), (MachineId(3), Nanos::from_secs(2))];
    assert!((job_end(&reversed) - 9.0).abs() < 1e-6);
    assert!(job_end(groups) < job_end(&reversed));
    // MADD inside the coflow finishes both groups together, at 5: the job ends at 9 as well.
    let madd = run("mrtf", &fabric, vec![Coflow::new(CoflowId(1), Nanos::ZERO, job.clone())], false, 1);
    assert!(job_end(&madd.outcomes[0].groups) > job_end(groups) + 0.5);
}

/// Multi-path on a triangle with one narrow link: 300 MiB from dc0 to dc1 over a 1 MiB/s link,
/// and the same coflow sends 60 MiB from dc0 to dc2; the other links run at 3 MiB/s. The detour
/// dc0 -> dc2 -> dc1 is balanced against its busier hop, dc0 -> dc2:
/// `300(1 − α)/1 = (300α + 60)/3`, so α = 0.7, 210 MiB are relayed, and the slowest flow ends at
/// 90 s instead of 300 s.
#[test]
fn multipath_detour_shortens_the_slowest_flow_by_the_computed_fraction() {
    let fabric = mesh(3, vec![0, 1, 2], |a, b| Bandwidth::Constant(if (a, b) == (0, 1) { 1.0 } else { 3.0 }));
    let c = || vec![Coflow::new(CoflowId(1), Nanos::ZERO, vec![flow(0, 1, 300.0), flow(0, 2, 60.0)])];
    let alpha = detour_fraction(300.0, 1.0, 60.0, 3.0);
    assert!((alpha - 0.7).abs() < 1e-12, "{alpha}");
    for name in ["mrtf", "siphon-mc", "mrtf+lfgf"] {
        let direct = run(name, &fabric, c(), false, 1);
        let detour = run(name, &fabric, c(), true, 1);
        let cct = |r: &SimResult| r.outcomes[0].cct().unwrap().as_secs_f64();
        assert!((cct(&direct) - 300.0).abs() < 1e-6, "{name}: {}", cct(&direct));
        assert!((cct(&detour) - 90.0).abs() < 1e-6, "{name}: {}", cct(&detour));
        assert_eq!(direct.relayed_bytes, 0.0);
        assert!((detour.relayed_bytes - alpha * 300.0 * MIB).abs() < 1.0, "{}", detour.relayed_bytes / MIB);
    }
}

/// Per-connection bandwidth, one flow alone: 60 MiB from dc0 to dc1 over a link whose bandwidth
/// is 2 or 6 MiB/s. The link's capacity is one draw for the whole run; the flow's connection
/// draws its own throughput from the same distribution, held for its life or redrawn every 4 s.
/// It goes at the smaller of the two, interval by interval: computed here from the two draws.
#[test]
fn a_connection_goes_at_the_smaller_of_its_draw_and_the_link() {
    let fabric = mesh(2, vec![0, 1], |_, _| Bandwidth::Empirical(vec![2.0, 6.0]));
    let wan = &fabric;
    let link = wan.link(0, 1).unwrap();
    let (mut capped, mut redrawn_differs) = (0, 0);
    for seed in 0..16 {
        let capacity = draw(wan, seed, 0)[link as usize];
        let conn = |g: u64| connection_draw(wan, seed, CoflowId(1), 0, link, g);
        for (redraw, interval) in [(Nanos::MAX, f64::INFINITY), (Nanos::from_secs(4), 4.0)] {
            let coflows = vec![Coflow::new(CoflowId(1), Nanos::ZERO, vec![flow(0, 1, 60.0)])];
            let w = Workload::new(2, coflows).unwrap();
            let cfg = WanConfig {
                wan: fabric.clone(),
                redraw: Nanos::MAX,
                seed,
                multipath: false,
                per_connection: Some(redraw),
                weather: None,
            };
            let sim = SimConfig { check_invariants: true, ..SimConfig::wide_area(cfg) };
            let r = simulate(&w, policy::seeded("mrtf", seed).unwrap(), &sim).expect("serves the wide area");
            // By hand: interval by interval at min(capacity, connection).
            let (mut left, mut t, mut g) = (60.0 * MIB, 0.0, 0);
            loop {
                let rate = capacity.min(if interval.is_finite() { conn(g) } else { conn(0) });
                if left <= rate * interval {
                    t += left / rate;
                    break;
                }
                left -= rate * interval;
                t += interval;
                g += 1;
            }
            let cct = r.outcomes[0].cct().unwrap().as_secs_f64();
            assert!((cct - t).abs() < 1e-6, "seed {seed}, redraw {redraw}: {cct} vs {t}");
            capped += (cct > 60.0 * MIB / capacity + 1e-6) as usize;
            redrawn_differs += (interval.is_finite() && (t - 60.0 * MIB / capacity.min(conn(0))).abs() > 1e-6) as usize;
        }
    }
    // The cases are not vacuous: caps bind, and redrawing changes the outcome, for some seeds.
    assert!(capped > 0 && redrawn_differs > 0, "{capped} {redrawn_differs}");
}

/// Flows alike in size between the same two machines are one leg without per-connection
/// bandwidth, and separate connections with it: a coflow of two 30 MiB flows from machine 0 to
/// machine 1 ends when the slower connection does.
#[test]
fn alike_flows_are_separate_connections() {
    let fabric = mesh(2, vec![0, 1], |_, _| Bandwidth::Empirical(vec![1.0, 100.0]));
    let wan = &fabric;
    let link = wan.link(0, 1).unwrap();
    let mut checked = 0;
    for seed in 0..32 {
        let capacity = draw(wan, seed, 0)[link as usize];
        let caps = [0, 4].map(|conn| connection_draw(wan, seed, CoflowId(1), conn, link, 0));
        // Wanted: a fast link and connections of unequal speed.
        if capacity < 100.0 * MIB || caps[0] == caps[1] {
            continue;
        }
        checked += 1;
        let coflows = vec![Coflow::new(CoflowId(1), Nanos::ZERO, vec![flow(0, 1, 30.0), flow(0, 1, 30.0)])];
        let w = Workload::new(2, coflows).unwrap();
        let cfg = WanConfig {
            wan: fabric.clone(),
            redraw: Nanos::MAX,
            seed,
            multipath: false,
            per_connection: Some(Nanos::MAX),
            weather: None,
        };
        let sim = SimConfig { check_invariants: true, ..SimConfig::wide_area(cfg) };
        let r = simulate(&w, policy::seeded("mrtf", seed).unwrap(), &sim).expect("serves the wide area");
        // The slow connection (1 MiB/s) takes 30 s; the fast one is done long before.
        let cct = r.outcomes[0].cct().unwrap().as_secs_f64();
        assert!((cct - 30.0).abs() < 1e-6, "seed {seed}: {cct}");
        let fct = r.outcomes[0].flow_time_s;
        assert!(fct < 30.0 + 1.0, "the fast connection finished early: {fct}");
    }
    assert!(checked > 0);
}

fn random_workload(seed: u64, coflows: usize, machines: u32) -> Vec<Coflow> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    (0..coflows)
        .map(|i| {
            let flows = (0..rng.gen_range(1..6))
                .map(|_| flow(rng.gen_range(0..machines), rng.gen_range(0..machines), rng.gen_range(1.0..64.0)))
                .collect();
            Coflow::new(CoflowId(i as u64), Nanos::from_millis(rng.gen_range(0..4000)), flows)
        })
        .collect()
}

/// Same seed, same orders and CCTs, whether the Monte Carlo rounds run on one thread or two.
#[test]
fn siphon_mc_is_the_same_on_any_number_of_threads() {
    let fabric =
        mesh(3, Wan::spread(3, 9, None), |a, b| Bandwidth::Uniform(2.0 + (a + b) as f64, 12.0 + 4.0 * a as f64));
    let coflows = random_workload(11, 30, 9);
    let on = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
        pool.install(|| run("siphon-mc", &fabric, coflows.clone(), true, 5))
    };
    let (one, two) = (on(1), on(2));
    assert_eq!(one, two);
    assert_eq!(one, on(2), "and again");
    // A different seed is a different run (the draws matter).
    let other = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
    let diff = other.install(|| run("siphon-mc", &fabric, coflows.clone(), true, 6));
    assert_eq!(diff.outcomes.len(), one.outcomes.len());
}

fn bandwidth() -> impl Strategy<Value = Bandwidth> {
    prop_oneof![
        (1.0..20.0f64).prop_map(Bandwidth::Constant),
        (1.0..10.0f64, 0.0..10.0f64).prop_map(|(lo, w)| Bandwidth::Uniform(lo, lo + w)),
        (2.0..20.0f64, 0.0..5.0f64).prop_map(|(mean, sd)| Bandwidth::Normal { mean, sd, min: 0.5 }),
        prop::collection::vec(0.5..20.0f64, 1..8).prop_map(Bandwidth::Empirical),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// The wide-area policies (and Varys and fairness on the wide-area fabric) keep every link
    /// within its current capacity across capacity changes, deliver exactly every flow's bytes,
    /// and finish every coflow, with and without multi-path routing.
    #[test]
    fn wide_area_runs_stay_within_capacity_and_finish(
        dcs in 2u32..=4,
        per_dc in 1u32..=2,
        links in prop::collection::vec(bandwidth(), 12),
        seed in 0u64..1000,
        coflows in 1usize..=6,
        multipath: bool,
    ) {
        let machines = dcs * per_dc;
        let fabric = mesh(dcs, Wan::spread(dcs, machines, Some(per_dc)), |a, b| links[(a * 3 + b) as usize % 12].clone());
        let cs = random_workload(seed, coflows, machines);
        for name in ["mrtf", "siphon-mc", "mrtf+lfgf", "siphon-mc+lfgf", "varys", "fair"] {
            let r = run(name, &fabric, cs.clone(), multipath, seed);
            prop_assert!(r.outcomes.iter().all(|o| o.finish.is_some()), "{name}: a coflow never finished");
            for o in &r.outcomes {
                prop_assert!(o.groups.iter().all(|&(_, t)| Some(t) <= o.finish), "{name}: a group after its coflow");
            }
            if !multipath || ["fair"].contains(&name) {
                prop_assert_eq!(r.relayed_bytes, 0.0);
            }
        }
    }

    /// With per-connection bandwidth, every leg stays within its connection's cap and every link
    /// within its capacity (both asserted at every decision), and every coflow finishes.
    #[test]
    fn per_connection_runs_stay_within_every_cap_and_finish(
        dcs in 2u32..=3,
        links in prop::collection::vec(bandwidth(), 12),
        seed in 0u64..1000,
        coflows in 1usize..=6,
        multipath: bool,
        redraw_ms in prop_oneof![Just(u64::MAX), 100u64..2000],
    ) {
        let machines = dcs * 2;
        let fabric = mesh(dcs, Wan::spread(dcs, machines, Some(2)), |a, b| links[(a * 3 + b) as usize % 12].clone());
        let cs = random_workload(seed, coflows, machines);
        let redraw = if redraw_ms == u64::MAX { Nanos::MAX } else { Nanos::from_millis(redraw_ms) };
        for name in ["mrtf", "siphon-mc", "mrtf+lfgf", "varys"] {
            let r = run_with(name, &fabric, cs.clone(), multipath, seed, Some(redraw));
            prop_assert!(r.outcomes.iter().all(|o| o.finish.is_some()), "{name}: a coflow never finished");
        }
    }
}

/// Every policy of the registry either serves the wide area (every coflow finishes or, with
/// admission control, is rejected) or is refused before it runs, by a typed error naming it and
/// the fabric: `pfp` used to serve nothing until the engine's idle limit stopped it.
#[test]
fn a_policy_that_cannot_serve_the_wide_area_is_refused_by_name() {
    let fabric = mesh(3, Wan::spread(3, 6, None), |_, _| Bandwidth::Constant(8.0));
    let coflows = random_workload(3, 8, 6);
    let w = Workload::new(fabric.machines(), coflows).unwrap();
    let cfg = WanConfig {
        wan: fabric.clone(),
        redraw: Nanos::MAX,
        seed: 1,
        multipath: false,
        per_connection: None,
        weather: None,
    };
    let sim = SimConfig { check_invariants: true, ..SimConfig::wide_area(cfg) };
    let mut refused = Vec::new();
    for e in policy::REGISTRY {
        match simulate(&w, e.build(&policy::Params::seeded(1)), &sim) {
            Ok(r) => {
                assert!(e.serves(&Fabric::new(fabric.clone())), "{} was run", e.name);
                assert!(
                    r.outcomes.iter().all(|o| o.finish.is_some() || o.rejected),
                    "{} left coflows unserved",
                    e.name
                );
            }
            Err(err) => {
                assert!(!e.serves(&Fabric::new(fabric.clone())), "{} was refused: {err}", e.name);
                assert_eq!((err.policy.as_str(), err.fabric), (e.name, "wide area"));
                let msg = err.to_string();
                assert!(msg.contains(&format!("{:?}", e.name)) && msg.contains("wide area"), "{msg}");
                refused.push(e.name);
            }
        }
    }
    assert!(refused.contains(&"pfp") && refused.contains(&"edf"), "{refused:?}");
}

/// Recorded weather is followed step by step: 60 MiB from dc0 to dc1 over a link held at 2 MiB/s
/// for 10 s, then at 10 MiB/s: 20 MiB in the first step, the other 40 in 4 s, done at 14 s.
#[test]
fn a_replayed_weather_log_sets_the_capacities_it_records() {
    let fabric = mesh(2, vec![0, 1], |_, _| Bandwidth::Uniform(1.0, 100.0));
    let log = WeatherLog::new(vec![
        WeatherStep { at_ns: 0, capacities: vec![2.0 * MIB, 2.0 * MIB] },
        WeatherStep { at_ns: 10_000_000_000, capacities: vec![10.0 * MIB, 10.0 * MIB] },
    ])
    .unwrap();
    for name in ["mrtf", "siphon-mc", "fair"] {
        let coflows = vec![Coflow::new(CoflowId(1), Nanos::ZERO, vec![flow(0, 1, 60.0)])];
        let w = Workload::new(2, coflows).unwrap();
        let cfg = WanConfig {
            wan: fabric.clone(),
            redraw: Nanos::from_millis(200),
            seed: 1,
            multipath: false,
            per_connection: None,
            weather: Some(Arc::new(log.clone())),
        };
        let sim = SimConfig { check_invariants: true, ..SimConfig::wide_area(cfg) };
        let r = simulate(&w, policy::seeded(name, 1).unwrap(), &sim).unwrap();
        let cct = r.outcomes[0].cct().unwrap().as_secs_f64();
        assert!((cct - 14.0).abs() < 1e-6, "{name}: {cct}");
    }
}

/// The seeded redraws written down as a log and replayed give the very same run.
#[test]
fn replaying_the_drawn_weather_is_the_seeded_run() {
    let fabric = mesh(3, vec![0, 1, 2, 0, 1, 2], |a, b| {
        if a < b { Bandwidth::Uniform(1.0, 9.0) } else { Bandwidth::Empirical(vec![1.0, 8.0, 8.0]) }
    });
    let coflows: Vec<Coflow> = (0..6)
        .map(|k| {
            let flows = vec![flow(k % 6, (k + 1) % 6, 20.0 + k as f64), flow((k + 2) % 6, (k + 4) % 6, 15.0)];
            Coflow::new(CoflowId(k as u64 + 1), Nanos::from_millis(700 * k as u64), flows)
        })
        .collect();
    for name in ["mrtf", "siphon-mc"] {
        let seeded = run(name, &fabric, coflows.clone(), false, 4);
        let wan = &fabric;
        let log = WeatherLog::drawn(wan, 4, Nanos::from_millis(200), seeded.makespan);
        let w = Workload::new(fabric.machines(), coflows.clone()).unwrap();
        let cfg = WanConfig {
            wan: fabric.clone(),
            redraw: Nanos::from_millis(200),
            seed: 4,
            multipath: false,
            per_connection: None,
            weather: Some(Arc::new(log)),
        };
        let sim = SimConfig { check_invariants: true, ..SimConfig::wide_area(cfg) };
        let replayed = simulate(&w, policy::seeded(name, 4).unwrap(), &sim).unwrap();
        assert_eq!(replayed.outcomes, seeded.outcomes, "{name}");
        assert!(seeded.decisions > 6, "{name}: the weather changed during the run");
    }
}
