//! Where `siphon-mc`'s Monte Carlo order departs from `mrtf`'s, and what it is worth.
//!
//! [`compare`] runs `siphon-mc` on a wide area behind a probe that, at every decision, also asks
//! a fresh `mrtf` (same intra-coflow policy) for its allocation on the very same state, and
//! counts the decisions where the two differ; beside it, `mrtf` runs on its own, so the two
//! average CCTs are those of two full runs on the same weather.
//! The probe also counts the decisions where at least two coflows still have bytes to send across
//! the wide area (only there can an order matter), and the searches whose winner was not the
//! first candidate, MRTF on median bandwidth ([`SiphonMc::moved`]).
//!
//! [`reshape`] gives the worlds of the comparison: a topology's links with their means divided by
//! a load factor and their distributions replaced by a family of one shape ([`Skew`]), so that
//! the same trace is replayed on links that are steady, spread evenly, or usually a little above
//! their mean and rarely far below it (Siphon's Figure 1).

use std::sync::{Arc, Mutex};

use coflow_core::{CoflowId, Nanos, Workload};
use coflow_sched::policy::{MonteCarlo, Params};
use coflow_sched::{Allocation, Bandwidth, Input, Intra, Link, Mrtf, Scheduler, ServiceModel, SiphonMc, Wan, WanError};

use coflow_sched::policy::Unservable;

use crate::{SimConfig, SimResult, WanConfig, simulate};

/// The shape every link's bandwidth distribution is given in a reshaped world.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Skew {
    /// The topology's own distributions (means divided by the load).
    AsIs,
    /// Always the mean: nothing for the search to find.
    Constant,
    /// Uniform within `±spread` of the mean (a fraction, below 1): symmetric.
    Uniform(f64),
    /// Usually a little above the mean and with probability `p` at a tenth of it, the mean kept:
    /// skewed, as link 1 of Siphon's Figure 1.
    Dips(f64),
    /// Every other link (by index) as [`Skew::Dips`] with this `p`, the others uniform within
    /// ±10%: links of equal means and different shapes, as Figure 1's pair.
    Mixed(f64),
}

impl Skew {
    /// Its name in tables, e.g. `dips-0.1`.
    pub fn label(&self) -> String {
        match self {
            Skew::AsIs => "as-is".to_string(),
            Skew::Constant => "constant".to_string(),
            // Short for a tiny value too (`1e-300`, not 300 digits), and parsed back the same.
            Skew::Uniform(s) => format!("uniform-{}", coflow_core::shown(*s)),
            Skew::Dips(p) => format!("dips-{}", coflow_core::shown(*p)),
            Skew::Mixed(p) => format!("mixed-{}", coflow_core::shown(*p)),
        }
    }

    /// Parses a label as [`Skew::label`] writes it; the error says what a label may be.
    pub fn parse(s: &str) -> Result<Skew, String> {
        const SHAPES: &str = "as-is, constant, uniform-S, dips-P or mixed-P";
        match s {
            "as-is" => return Ok(Skew::AsIs),
            "constant" => return Ok(Skew::Constant),
            _ => {}
        }
        let Some((kind, rest)) = s.split_once('-') else {
            return Err(format!("unknown shape {s:?}: expected {SHAPES}"));
        };
        let shape: fn(f64) -> Skew = match kind {
            "uniform" => Skew::Uniform,
            "dips" => Skew::Dips,
            "mixed" => Skew::Mixed,
            _ => return Err(format!("unknown shape {kind:?}: expected {SHAPES}")),
        };
        let what = if kind == "uniform" { "its spread around the mean" } else { "its dip probability" };
        match rest.parse::<f64>() {
            Ok(v) if v > 0.0 && v < 1.0 => Ok(shape(v)),
            _ => Err(format!("{kind}-{rest}: {what} must be a number strictly between 0 and 1, not {rest:?}")),
        }
    }

    /// The distribution of mean `mean` of this shape for link `link` (`original` for
    /// [`Skew::AsIs`], scaled to `mean`).
    fn distribution(&self, link: usize, mean: f64, original: &Bandwidth) -> Bandwidth {
        // Twenty samples: a dip probability is rounded to the twentieth.
        let dips = |p: f64| {
            let low = ((p * 20.0).round() as usize).clamp(1, 19);
            let q = low as f64 / 20.0;
            let lo = 0.1 * mean;
            let hi = (mean - q * lo) / (1.0 - q);
            Bandwidth::Empirical([vec![lo; low], vec![hi; 20 - low]].concat())
        };
        match *self {
            Skew::AsIs => original.scaled(mean / original.mean()),
            Skew::Constant => Bandwidth::Constant(mean),
            Skew::Uniform(s) => Bandwidth::Uniform(mean * (1.0 - s), mean * (1.0 + s)),
            Skew::Dips(p) => dips(p),
            Skew::Mixed(p) if link.is_multiple_of(2) => dips(p),
            Skew::Mixed(_) => Bandwidth::Uniform(0.9 * mean, 1.1 * mean),
        }
    }
}

/// `wan` with every link's mean divided by `load` and its distribution of shape `skew`; the
/// datacenters and placement stay. A link that a draw could take below a topology's least
/// ([`MIN_LINK`](crate::topology::MIN_LINK)) is refused, as in a topology file.
pub fn reshape(wan: &Wan, skew: Skew, load: f64) -> Result<Wan, WanError> {
    assert!(load > 0.0 && load.is_finite(), "load {load} must be positive");
    let links = wan
        .links()
        .iter()
        .enumerate()
        .map(|(i, l)| Link { bandwidth: skew.distribution(i, l.bandwidth.mean() / load, &l.bandwidth), ..l.clone() })
        .collect();
    let names = (0..wan.dcs()).map(|d| wan.name(d).to_string()).collect();
    let placement = (0..wan.machines()).map(|m| wan.dc_of(m)).collect();
    let reshaped = Wan::new(names, links, placement)?;
    let floor = crate::topology::MIN_LINK;
    if let Some((link, least)) =
        reshaped.links().iter().map(|l| l.bandwidth.least()).enumerate().find(|&(_, least)| least < floor)
    {
        let (least, floor) = (coflow_core::shown(least), coflow_core::shown(floor));
        let what = format!("{least} bytes per second is below {floor}, the least a link may carry");
        return Err(WanError::BadBandwidth { link, what });
    }
    Ok(reshaped)
}

/// What the probe counted over one `siphon-mc` run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct OrderCounts {
    /// Decisions made.
    pub decisions: u64,
    /// Decisions with at least two coflows holding wide-area bytes: where an order can matter.
    pub contested: u64,
    /// Decisions whose allocation differs from the one `mrtf` makes on the same state.
    pub differing: u64,
    /// Searches run (with at least two coflows present).
    pub searches: u64,
    /// Searches whose winner was not MRTF on median bandwidth.
    pub moved: u64,
}

impl std::ops::AddAssign for OrderCounts {
    fn add_assign(&mut self, o: OrderCounts) {
        self.decisions += o.decisions;
        self.contested += o.contested;
        self.differing += o.differing;
        self.searches += o.searches;
        self.moved += o.moved;
    }
}

/// `siphon-mc` against `mrtf` on one world.
#[derive(Clone, Debug, PartialEq)]
pub struct Comparison {
    /// The `siphon-mc` run.
    pub siphon: SimResult,
    /// The `mrtf` run on the same weather.
    pub mrtf: SimResult,
    /// What the probe counted in the `siphon-mc` run.
    pub counts: OrderCounts,
}

impl Comparison {
    /// `siphon-mc`'s average CCT over `mrtf`'s (below 1: `siphon-mc` is faster).
    pub fn ratio(&self) -> f64 {
        let avg = |r: &SimResult| crate::Summary::of(r, None).avg_cct_s;
        avg(&self.siphon) / avg(&self.mrtf)
    }
}

/// Runs `siphon-mc` (with the probe) and `mrtf` on `workload` over `wan`, both with intra-coflow
/// policy `intra`; `siphon-mc` is configured by `mc`, seeded by the weather's seed and told the
/// redraw interval, as `coflow sim --wan` builds it.
pub fn compare(workload: &Workload, wan: &WanConfig, mc: MonteCarlo, intra: Intra) -> Result<Comparison, Unservable> {
    let params = Params { seed: wan.seed, redraw: (wan.redraw != Nanos::MAX).then_some(wan.redraw), mc };
    let counts = Arc::new(Mutex::new(OrderCounts::default()));
    let probe = Probe {
        siphon: SiphonMc::new(params.siphon_config(intra)),
        mrtf: Mrtf::new(intra),
        shadow: Allocation::default(),
        counts: counts.clone(),
    };
    let cfg = SimConfig::wide_area(wan.clone());
    let siphon = simulate(workload, Box::new(probe), &cfg)?;
    let mrtf = simulate(workload, Box::new(Mrtf::new(intra)), &cfg)?;
    let counts = *counts.lock().expect("no panic while held");
    Ok(Comparison { siphon, mrtf, counts })
}

/// `siphon-mc` with a fresh `mrtf` beside it, asked the same questions.
#[derive(Debug)]
struct Probe {
    siphon: SiphonMc,
    mrtf: Mrtf,
    shadow: Allocation,
    counts: Arc<Mutex<OrderCounts>>,
}

impl Scheduler for Probe {
    fn name(&self) -> &'static str {
        self.siphon.name()
    }

    fn model(&self) -> ServiceModel {
        self.siphon.model()
    }

    fn flow_finish_gap(&self) -> Option<Nanos> {
        self.siphon.flow_finish_gap()
    }

    fn admission_control(&self) -> bool {
        self.siphon.admission_control()
    }

    fn reads_min_remaining(&self) -> bool {
        self.siphon.reads_min_remaining()
    }

    fn reads_reshaped_legs(&self) -> bool {
        self.siphon.reads_reshaped_legs() || self.mrtf.reads_reshaped_legs()
    }

    fn poll_rejected(&mut self, out: &mut Vec<CoflowId>) {
        self.siphon.poll_rejected(out);
    }

    fn handle_arrival(&mut self, now: Nanos, coflow: CoflowId) {
        self.siphon.handle_arrival(now, coflow);
        self.mrtf.handle_arrival(now, coflow);
    }

    fn handle_finished(&mut self, now: Nanos, coflow: CoflowId) {
        self.siphon.handle_finished(now, coflow);
        self.mrtf.handle_finished(now, coflow);
    }

    fn handle_job_ended(&mut self, job: CoflowId) {
        self.siphon.handle_job_ended(job);
        self.mrtf.handle_job_ended(job);
    }

    fn poll_allocation(&mut self, input: &Input<'_>, out: &mut Allocation) -> Option<Nanos> {
        let wake = self.siphon.poll_allocation(input, out);
        self.shadow.reset(input);
        self.mrtf.poll_allocation(input, &mut self.shadow);
        let mut c = self.counts.lock().expect("no panic while held");
        c.decisions += 1;
        let crossing = input.coflows.iter().filter(|k| input.remaining_loads(k).any(|(_, b)| b > 0.0)).count();
        c.contested += u64::from(crossing >= 2);
        c.differing += u64::from(!same_allocation(out, &self.shadow));
        (c.searches, c.moved) = (self.siphon.searches().0, self.siphon.moved());
        wake
    }
}

/// Whether two allocations give every coflow and leg the same rate, to a relative 1e-9.
fn same_allocation(a: &Allocation, b: &Allocation) -> bool {
    let close = |x: f64, y: f64| (x - y).abs() <= 1e-9 * x.abs().max(y.abs());
    let extras = |x: &Allocation| {
        let mut e = x.leg_extras().to_vec();
        e.sort_by_key(|&(l, _)| l);
        e
    };
    let (ea, eb) = (extras(a), extras(b));
    a.coflow_rate.len() == b.coflow_rate.len()
        && a.coflow_rate.iter().zip(&b.coflow_rate).all(|(&x, &y)| close(x, y))
        && ea.len() == eb.len()
        && ea.iter().zip(&eb).all(|(x, y)| x.0 == y.0 && close(x.1, y.1))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes per second per unit of the figures below: links of 10 and 20 KiB/s, above the floor.
    const K: f64 = 1024.0;

    fn wan2() -> Wan {
        let l = |from, to, v: f64| Link { from, to, bandwidth: Bandwidth::Normal { mean: v * K, sd: K, min: 0.5 * K } };
        Wan::new(vec!["a".into(), "b".into()], vec![l(0, 1, 10.0), l(1, 0, 20.0)], vec![0, 1]).unwrap()
    }

    #[test]
    fn reshaped_links_keep_their_means_over_the_load() {
        for skew in [Skew::AsIs, Skew::Constant, Skew::Uniform(0.5), Skew::Dips(0.1), Skew::Mixed(0.25)] {
            let w = reshape(&wan2(), skew, 2.0).unwrap();
            let means: Vec<f64> = w.links().iter().map(|l| l.bandwidth.mean() / K).collect();
            assert!((means[0] - 5.0).abs() < 1e-9 && (means[1] - 10.0).abs() < 1e-9, "{skew:?}: {means:?}");
            assert_eq!(Skew::parse(&skew.label()), Ok(skew));
        }
        // One dip in twenty at a tenth of the mean, the rest just above it.
        let dipped = reshape(&wan2(), Skew::Dips(0.05), 1.0).unwrap();
        let Bandwidth::Empirical(s) = &dipped.links()[0].bandwidth else { panic!("dips are samples") };
        assert_eq!(s.iter().filter(|&&v| v == K).count(), 1);
        assert!(s.iter().filter(|&&v| v != K).all(|&v| (v / K - (10.0 - 0.05) / 0.95).abs() < 1e-9), "{s:?}");
        // Mixed: link 1 is uniform within 10%.
        assert_eq!(
            reshape(&wan2(), Skew::Mixed(0.1), 1.0).unwrap().links()[1].bandwidth,
            Bandwidth::Uniform(18.0 * K, 22.0 * K)
        );
        // A load that takes a link below 1 kbit/s is refused, naming the link.
        let e = reshape(&wan2(), Skew::Constant, 1e12).unwrap_err();
        assert!(e.to_string().starts_with("link 0: ") && e.to_string().contains("is below 125"), "{e}");
        let refused = |label: &str| Skew::parse(label).unwrap_err();
        assert_eq!(
            refused("dips-1.5"),
            "dips-1.5: its dip probability must be a number strictly between 0 and 1, not \"1.5\""
        );
        assert!(refused("mixed-0").starts_with("mixed-0: its dip probability must be a number strictly between"));
        assert!(refused("uniform-1").starts_with("uniform-1: its spread around the mean must be a number strictly"));
        // A label is short however small the value, and parses back to it.
        for skew in [Skew::Uniform(1e-300), Skew::Dips(0.1), Skew::Mixed(0.25)] {
            assert!(skew.label().len() < 16, "{}", skew.label());
            assert_eq!(Skew::parse(&skew.label()), Ok(skew));
        }
        assert_eq!(
            refused("uniform-2"),
            "uniform-2: its spread around the mean must be a number strictly between 0 and 1, not \"2\""
        );
        assert!(refused("bumps-0.1").starts_with("unknown shape \"bumps\": expected as-is, constant, "));
        assert!(refused("flat").starts_with("unknown shape \"flat\""));
    }
}
