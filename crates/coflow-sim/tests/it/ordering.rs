//! Where `siphon-mc`'s order departs from `mrtf`'s: the probe's counts on Siphon's Figure 1
//! pair, and on worlds with nothing for the search to find.

use coflow_core::{Bytes, Coflow, CoflowId, Flow, MachineId, Nanos, Workload};
use coflow_sched::policy::MonteCarlo;
use coflow_sched::{Bandwidth, Intra, Link, Wan};
use coflow_sim::WanConfig;
use coflow_sim::ordering::{Skew, compare, reshape};

const MIB: f64 = (1u64 << 20) as f64;

fn flow(src: u32, dst: u32, mib: f64) -> Flow {
    Flow { src: MachineId(src), dst: MachineId(dst), size: Bytes((mib * MIB) as u64) }
}

/// Three datacenters, one machine each; link 0 -> 2 takes one of seven measured values (median
/// and mean both 10 MiB/s), link 1 -> 2 is uniform in 9..11 (median and mean 10 MiB/s too), the
/// other links 10 MiB/s. Neither expected nor median bandwidth tells the two links apart, yet
/// link 0 -> 2 is the faster of the two with probability 2/7 · 3/4 + 1/7 + 3/7 · 1/2 = 4/7.
fn same_means_and_medians() -> Wan {
    let mut links = Vec::new();
    for a in 0..3 {
        for b in 0..3 {
            if a != b {
                let bandwidth = match (a, b) {
                    (0, 2) => Bandwidth::Empirical([6.0, 10.0, 10.0, 10.0, 10.5, 10.5, 13.0].map(|v| v * MIB).to_vec()),
                    (1, 2) => Bandwidth::Uniform(9.0 * MIB, 11.0 * MIB),
                    _ => Bandwidth::Constant(10.0 * MIB),
                };
                links.push(Link { from: a, to: b, bandwidth });
            }
        }
    }
    Wan::new(vec!["a".into(), "b".into(), "c".into()], links, vec![0, 1, 2]).unwrap()
}

fn config(wan: Wan, seed: u64) -> WanConfig {
    // One draw for the whole run: the order decided at the start is the one that counts.
    WanConfig { wan, redraw: Nanos::MAX, seed, multipath: false, per_connection: None, weather: None }
}

/// Coflow A's large flow crosses link 0 -> 2, B's link 1 -> 2; each sends 1 MiB over the other
/// link. Serving A first costs less exactly when link 0 -> 2 is the faster, so A first wins 4/7
/// of the rounds. B is labelled first, so `mrtf` and MRTF on medians (equal keys, ties by id)
/// serve B first; the search moves A ahead, and the probe sees the decision differ.
#[test]
fn the_search_moves_the_coflow_likely_to_be_short_when_means_and_medians_tie() {
    let wan = same_means_and_medians();
    let (m, d) = (
        wan.links()[wan.link(0, 2).unwrap() as usize].bandwidth.clone(),
        &wan.links()[wan.link(1, 2).unwrap() as usize].bandwidth,
    );
    assert_eq!((m.mean(), m.median()), (d.mean(), d.median()));
    let a = Coflow::new(CoflowId(2), Nanos::ZERO, vec![flow(0, 2, 100.0), flow(1, 2, 1.0)]);
    let b = Coflow::new(CoflowId(1), Nanos::ZERO, vec![flow(0, 2, 1.0), flow(1, 2, 100.0)]);
    let w = Workload::new(3, vec![b, a]).unwrap();
    for seed in [1, 2, 3] {
        let r = compare(&w, &config(same_means_and_medians(), seed), MonteCarlo::default(), Intra::Madd).unwrap();
        assert!(r.counts.searches >= 1, "{:?}", r.counts);
        assert!(r.counts.moved >= 1, "seed {seed}: {:?}", r.counts);
        assert!(r.counts.differing >= 1, "seed {seed}: {:?}", r.counts);
        assert!(r.counts.contested >= r.counts.differing, "{:?}", r.counts);
    }
}

/// Siphon's Figure 1 as `wan::figure_1_monte_carlo_prefers_the_coflow_likely_to_be_short` builds
/// it: link 0 -> 2 usually 10.5 MiB/s and one time in twenty 0.5. There its median (10.5) already
/// ranks A first, so `siphon-mc`'s decision differs from `mrtf`'s with no move by the search:
/// its first candidate, MRTF on medians, wins.
#[test]
fn on_figure_1_the_median_ranking_alone_puts_a_first() {
    let mut wan = same_means_and_medians();
    let l = wan.link(0, 2).unwrap() as usize;
    let mut links = wan.links().to_vec();
    links[l].bandwidth = Bandwidth::Empirical([vec![10.5 * MIB; 19], vec![0.5 * MIB]].concat());
    wan = Wan::new(vec!["a".into(), "b".into(), "c".into()], links, vec![0, 1, 2]).unwrap();
    let a = Coflow::new(CoflowId(2), Nanos::ZERO, vec![flow(0, 2, 100.0), flow(1, 2, 1.0)]);
    let b = Coflow::new(CoflowId(1), Nanos::ZERO, vec![flow(0, 2, 1.0), flow(1, 2, 100.0)]);
    let w = Workload::new(3, vec![b, a]).unwrap();
    let r = compare(&w, &config(wan, 1), MonteCarlo::default(), Intra::Madd).unwrap();
    assert_eq!((r.counts.searches, r.counts.moved), (1, 0), "{:?}", r.counts);
    assert!(r.counts.differing >= 1, "{:?}", r.counts);
}

/// On one constant link, every Monte Carlo round costs the candidates alike, and MRTF is the
/// shortest-first order, which minimises the total completion time of coflows served one after
/// another: the first candidate wins every search, no decision differs from `mrtf`'s and the runs
/// are the same.
#[test]
fn on_one_constant_link_siphon_mc_is_mrtf() {
    let coflows: Vec<Coflow> = (0..8u32)
        .map(|k| {
            let flows = vec![flow(0, 2, 10.0 + ((k * 7) % 5) as f64), flow(0, 2, 3.0)];
            Coflow::new(CoflowId(k as u64 + 1), Nanos::from_millis(300 * k as u64), flows)
        })
        .collect();
    let w = Workload::new(3, coflows).unwrap();
    let world = reshape(&same_means_and_medians(), Skew::Constant, 1.0).unwrap();
    let r = compare(&w, &config(world, 1), MonteCarlo::default(), Intra::Madd).unwrap();
    assert!(r.counts.contested > 0 && r.counts.searches > 0, "{:?}", r.counts);
    assert_eq!((r.counts.differing, r.counts.moved), (0, 0), "{:?}", r.counts);
    assert_eq!(r.siphon.outcomes, r.mrtf.outcomes);
    assert_eq!(r.ratio(), 1.0);
}
