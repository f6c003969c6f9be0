//! A seeded synthetic workload shaped like the Facebook trace that Varys evaluates on.
//!
//! Each coflow is a mapper × reducer shuffle, like a line of the coflow-benchmark format.
//! Its Varys bin is drawn first, with the count shares of Varys Table 4 (52% SN, 16% LN, 15% SW,
//! 17% LW), and its width and length are then drawn inside that bin's ranges, so the bin mix holds
//! by construction:
//! - **Width.** A narrow coflow (at most 50 flows) draws its mapper count `m` and reducer count `r`
//!   each from a discrete log-uniform law on `1..=min(machines, 50)`, and redraws both until
//!   `m × r ≤ 50`, so most narrow coflows are a handful of flows.
//!   A wide coflow draws `m` and `r` uniformly from `1..=machines` until `m × r > 50`, so widths
//!   reach `machines²` (2,500 flows on the default 50 machines, 22,500 on 150).
//! - **Length** (the largest flow). A short coflow's is drawn from `[length_min, 5 MiB)` and a long
//!   one's from `[5 MiB, length_max]`, both by a bounded Pareto law of shape `length_tail`: heavy
//!   tailed, most values near the bottom of the range and a few near the top.
//! - **Skew.** One reducer, at random, receives `length` bytes from each mapper; every other
//!   reducer receives `length × s` with `s` log-uniform on `[reducer_skew, 1]`.
//!   As in the benchmark format, a reducer's bytes are split evenly over the mappers.
//! - **Machines.** Mappers are `m` distinct machines and reducers `r` distinct machines, both drawn
//!   uniformly; a machine may be both, which gives local flows, as in the Facebook trace.
//! - **Arrivals.** The first coflow arrives at time 0 and the gaps between arrivals are exponential
//!   with mean `mean_interarrival` (Poisson arrivals), rounded to whole milliseconds so that every
//!   generated workload can be written in the coflow-benchmark format.
//!
//! By bytes, wide coflows dominate because they are wider by a factor that grows with the fabric:
//! on 150 machines the expected byte shares ([`SynthConfig::expected_byte_shares`]) are
//! 0.005/0.50/0.24/99.25% (SN/LN/SW/LW), close to Table 4's 0.01/0.67/0.22/99.10%; on the default
//! 50 machines they are 0.03/3.8/0.23/96.0%.
//!
//! Fabrics of 7 machines or fewer cannot host a wide coflow (7 × 7 = 49 flows), so there the wide
//! bins' shares go to the narrow bin of the same length.

use coflow_core::{
    Bin, Bytes, Coflow, CoflowId, Flow, MachineId, NARROW_MAX_FLOWS, Nanos, Rate, SHORT_LONGEST_FLOW, Workload,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The parameters of the synthetic generator.
///
/// The defaults ([`SynthConfig::default`]) are documented on each field.
#[derive(Clone, Debug, PartialEq)]
pub struct SynthConfig {
    /// The seed of the ChaCha8 generator; the same config gives the same workload. Default 1.
    pub seed: u64,
    /// How many coflows to generate. Default 200.
    pub coflows: usize,
    /// The fabric size; mapper and reducer counts are at most this. Default 50.
    pub machines: u32,
    /// The mean gap between arrivals. Default 1.2 s.
    ///
    /// With the other defaults a coflow carries on average 4.24 GiB, of which 4.16 GiB (all but
    /// the 1/50 that is local) crosses the fabric, so on 50 ports of 1 Gbit/s (125,000,000 B/s
    /// each) the expected average port load is 4.16 GiB / (50 × 125 MB/s × 1.2 s) ≈ 0.60;
    /// [`SynthConfig::expected_load`] computes it.
    /// The load of one 200-coflow workload varies widely from seed to seed, because a few large
    /// coflows carry most of the bytes: over seeds 1 to 100, its 10th, 50th and 90th percentiles
    /// are about 0.25, 0.47 and 1.0 (seed 1 gives 0.30).
    /// Use [`SynthConfig::interarrival_for_load`] to aim at another load or port rate.
    pub mean_interarrival: Nanos,
    /// The probability of each bin by count, in [`Bin::ALL`] order (SN, LN, SW, LW).
    /// They need not sum to 1. Default 0.52, 0.16, 0.15, 0.17 (Varys Table 4).
    pub bin_mix: [f64; 4],
    /// The smallest length (largest flow) of a short coflow. Default 16 KiB.
    pub length_min: Bytes,
    /// The largest length of a long coflow. Default 2 GiB.
    pub length_max: Bytes,
    /// The shape α of the bounded Pareto law of lengths; 0 is log-uniform, larger values put more
    /// coflows near the bottom of each range. Default 0.5.
    pub length_tail: f64,
    /// The smallest share of the coflow's length that a reducer receives from each mapper.
    /// Default 0.05.
    pub reducer_skew: f64,
}

impl Default for SynthConfig {
    fn default() -> SynthConfig {
        SynthConfig {
            seed: 1,
            coflows: 200,
            machines: 50,
            mean_interarrival: Nanos::from_millis(1200),
            bin_mix: [0.52, 0.16, 0.15, 0.17],
            length_min: Bytes(16 << 10),
            length_max: Bytes(2 << 30),
            length_tail: 0.5,
            reducer_skew: 0.05,
        }
    }
}

/// The most coflows a synthetic workload may have: a workload is held in memory, each coflow
/// with hundreds of flows on average.
pub const MAX_COFLOWS: usize = 1_000_000;

/// The most machines a workload may have, synthetic or read from a trace, each with its
/// per-machine tables.
pub const MAX_MACHINES: u32 = 1_000_000;

/// The most flows a synthetic workload may be expected to have ([`SynthConfig::expected_flows`]):
/// a wide coflow has about a quarter of the machines squared, so a large fabric makes the
/// workload grow with its square (1,000 machines and 300 coflows are about this many).
pub const MAX_EXPECTED_FLOWS: f64 = 25e6;

/// Why a [`SynthConfig`] is not valid.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SynthError {
    /// Coflows need machines.
    #[error("the fabric needs at least one machine")]
    NoMachines,
    /// More coflows than a workload held in memory can take.
    #[error("at most {max} coflows, got {0}", max = MAX_COFLOWS)]
    TooManyCoflows(usize),
    /// More machines than a workload held in memory can take.
    #[error("at most {max} machines, got {0}", max = MAX_MACHINES)]
    TooManyMachines(u32),
    /// More flows expected than a workload held in memory can take.
    #[error(
        "{coflows} coflows on {machines} machines would have about {expected:.0} flows, more than the \
         {max:.0} a workload may have: use fewer machines or coflows",
        max = MAX_EXPECTED_FLOWS
    )]
    TooManyFlows {
        /// The configured coflows.
        coflows: usize,
        /// The configured machines.
        machines: u32,
        /// The flows expected ([`SynthConfig::expected_flows`]).
        expected: f64,
    },
    /// A bin probability is negative or not finite, or they are all zero.
    #[error("bin mix {0:?} must be finite, non-negative and not all zero")]
    BadMix([f64; 4]),
    /// The length range does not straddle the 5 MiB short/long threshold.
    #[error("lengths must satisfy 1 B <= length_min < 5 MiB <= length_max, got {min} and {max}")]
    BadLengths {
        /// The configured smallest length.
        min: Bytes,
        /// The configured largest length.
        max: Bytes,
    },
    /// The Pareto shape is negative or not finite.
    #[error("length_tail must be finite and non-negative, got {0}")]
    BadTail(f64),
    /// The reducer skew is outside `(0, 1]`.
    #[error("reducer_skew must be in (0, 1], got {0}")]
    BadSkew(f64),
}

impl SynthConfig {
    /// What the workload this config generates is, as reports name it.
    pub fn describe(&self) -> String {
        let coflows = coflow_core::counted(self.coflows, "coflow", "coflows");
        let machines = coflow_core::counted(self.machines as usize, "machine", "machines");
        format!("synthetic (seed {}, {coflows}, {machines})", self.seed)
    }

    /// Checks the parameters; [`generate`] requires a valid config.
    pub fn validate(&self) -> Result<(), SynthError> {
        if self.machines == 0 {
            return Err(SynthError::NoMachines);
        }
        if self.coflows > MAX_COFLOWS {
            return Err(SynthError::TooManyCoflows(self.coflows));
        }
        if self.machines > MAX_MACHINES {
            return Err(SynthError::TooManyMachines(self.machines));
        }
        if !(self.bin_mix.iter().all(|p| p.is_finite() && *p >= 0.0) && self.bin_mix.iter().sum::<f64>() > 0.0) {
            return Err(SynthError::BadMix(self.bin_mix));
        }
        if !(self.length_min.get() >= 1
            && self.length_min < SHORT_LONGEST_FLOW
            && SHORT_LONGEST_FLOW <= self.length_max)
        {
            return Err(SynthError::BadLengths { min: self.length_min, max: self.length_max });
        }
        if !(self.length_tail.is_finite() && self.length_tail >= 0.0) {
            return Err(SynthError::BadTail(self.length_tail));
        }
        if !(self.reducer_skew > 0.0 && self.reducer_skew <= 1.0) {
            return Err(SynthError::BadSkew(self.reducer_skew));
        }
        let expected = self.expected_flows();
        if expected > MAX_EXPECTED_FLOWS {
            return Err(SynthError::TooManyFlows { coflows: self.coflows, machines: self.machines, expected });
        }
        Ok(())
    }

    /// About how many flows the workload has, from above: a narrow coflow has at most 50 (and no
    /// more than the machines squared, one flow per mapper and reducer), a wide one `m × r` with
    /// both uniform on `1..=machines` (about a quarter of the machines squared). Needs a valid bin
    /// mix.
    pub fn expected_flows(&self) -> f64 {
        let [sn, ln, sw, lw] = self.effective_mix();
        let wide = (sw + lw) / (sn + ln + sw + lw);
        let side = (self.machines as f64 + 1.0) / 2.0;
        let narrow = (NARROW_MAX_FLOWS as f64).min((self.machines as f64).powi(2));
        let per_coflow = (1.0 - wide) * narrow + wide * side * side;
        self.coflows as f64 * per_coflow
    }

    /// The expected bytes of one coflow, local flows included, from the laws above (ignoring the
    /// rounding of sizes to whole bytes).
    pub fn expected_bytes_per_coflow(&self) -> f64 {
        self.expected_bin_bytes().iter().sum()
    }

    /// The expected share of all bytes that each bin holds, in [`Bin::ALL`] order (SN, LN, SW, LW).
    pub fn expected_byte_shares(&self) -> [f64; 4] {
        let bins = self.expected_bin_bytes();
        let total: f64 = bins.iter().sum();
        bins.map(|b| if total > 0.0 { b / total } else { 0.0 })
    }

    /// The expected bytes one coflow contributes through each bin: the bin's probability times the
    /// expected bytes of a coflow in it.
    fn expected_bin_bytes(&self) -> [f64; 4] {
        let machines = self.machines.max(1);
        let mean_skew = log_uniform_mean(self.reducer_skew);
        // A coflow carries m × (L + (r - 1) × L × s) bytes, with m, r, L and s independent.
        let fan = |wide: bool| mean_over_shapes(machines, wide, |m, r| m as f64 * (1.0 + (r as f64 - 1.0) * mean_skew));
        let short = bounded_pareto_mean(self.length_min.as_f64(), SHORT_LONGEST_FLOW.as_f64(), self.length_tail);
        let long = bounded_pareto_mean(SHORT_LONGEST_FLOW.as_f64(), self.length_max.as_f64(), self.length_tail);
        let mix = self.effective_mix();
        let total: f64 = mix.iter().sum();
        let per_bin = [fan(false) * short, fan(false) * long, fan(true) * short, fan(true) * long];
        let mut out = [0.0; 4];
        for ((o, p), bytes) in out.iter_mut().zip(mix).zip(per_bin) {
            if p > 0.0 {
                *o = p / total * bytes;
            }
        }
        out
    }

    /// The expected average load of a port of rate `port`: the bytes that cross the fabric per
    /// unit of time over the capacity of one side (ingress or egress) of the whole fabric.
    pub fn expected_load(&self, port: Rate) -> f64 {
        self.fabric_bytes_per_coflow()
            / (self.machines.max(1) as f64 * port.bytes_per_sec())
            / self.mean_interarrival.as_secs_f64()
    }

    /// The mean inter-arrival time that gives an expected average port load of `load` on ports of
    /// rate `port`.
    pub fn interarrival_for_load(&self, load: f64, port: Rate) -> Nanos {
        Nanos::from_secs_f64(
            self.fabric_bytes_per_coflow() / (self.machines.max(1) as f64 * port.bytes_per_sec() * load),
        )
    }

    /// The expected bytes of one coflow that cross a port: a mapper and a reducer are the same
    /// machine with probability `1 / machines`.
    fn fabric_bytes_per_coflow(&self) -> f64 {
        self.expected_bytes_per_coflow() * (1.0 - 1.0 / self.machines.max(1) as f64)
    }

    /// The bin probabilities, with the wide bins folded into the narrow ones when the fabric is
    /// too small for a wide coflow.
    fn effective_mix(&self) -> [f64; 4] {
        let [sn, ln, sw, lw] = self.bin_mix;
        if wide_possible(self.machines) { [sn, ln, sw, lw] } else { [sn + sw, ln + lw, 0.0, 0.0] }
    }
}

/// Whether a fabric of `machines` machines can host a coflow of more than 50 flows.
fn wide_possible(machines: u32) -> bool {
    (machines as usize).saturating_mul(machines as usize) > NARROW_MAX_FLOWS
}

/// Generates a workload.
///
/// The same config always gives the same workload, on every platform.
///
/// # Panics
///
/// If the config is invalid; check it first with [`SynthConfig::validate`].
pub fn generate(cfg: &SynthConfig) -> Workload {
    if let Err(e) = cfg.validate() {
        panic!("invalid synthetic workload config: {e}");
    }
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    let mix = cfg.effective_mix();
    let mean_gap_ns = cfg.mean_interarrival.get() as f64;
    let mut clock_ns = 0.0;
    let mut coflows = Vec::with_capacity(cfg.coflows);
    for k in 0..cfg.coflows {
        if k > 0 {
            // Inverse-CDF exponential; `1 - u` is in (0, 1], so the logarithm is finite.
            clock_ns += -mean_gap_ns * (1.0 - rng.r#gen::<f64>()).ln();
        }
        let arrival = Nanos::from_millis((clock_ns / 1e6).round() as u64);
        let bin = pick_bin(&mut rng, &mix);
        let flows = shuffle(&mut rng, cfg, bin);
        coflows.push(Coflow::new(CoflowId(k as u64 + 1), arrival, flows));
    }
    match Workload::new(cfg.machines, coflows) {
        Ok(w) => w,
        Err(e) => unreachable!("the generator made an invalid workload: {e}"),
    }
}

/// Groups a workload's coflows into multi-stage jobs of `stages` coflows each, in arrival order
/// (the last job may be shorter), seeded by `seed`:
/// - stage 0 keeps its flows; stage `s ≥ 1` depends on stage `s − 1` and, with probability 1/2
///   when `s ≥ 2`, also on stage `s − 2`, so jobs are chains and small DAGs (a stage reading two
///   earlier stages' outputs);
/// - a later stage reads what its parents' reducers wrote: the sending machines of its flows are
///   replaced by its parents' receiving machines (the `i`-th distinct sender by the `i mod n`-th
///   of the `n` parent receivers), sizes and receivers unchanged;
/// - every stage of a job arrives with its first stage (the job is submitted at once), so each
///   later stage is released exactly when its parents have finished.
///
/// `stages` of 0 or 1 returns the workload unchanged.
pub fn multi_stage(w: &Workload, stages: usize, seed: u64) -> Workload {
    if stages <= 1 {
        return w.clone();
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x6a6f_6273_7461_6765);
    let mut coflows: Vec<Coflow> = w.coflows.clone();
    for job in coflows.chunks_mut(stages) {
        let arrival = job[0].arrival;
        for s in 1..job.len() {
            let mut parents = vec![s - 1];
            if s >= 2 && rng.gen_bool(0.5) {
                parents.push(s - 2);
            }
            let mut inputs: Vec<MachineId> = parents.iter().flat_map(|&p| job[p].flows.iter().map(|f| f.dst)).collect();
            inputs.sort_unstable();
            inputs.dedup();
            let mut senders: Vec<MachineId> = job[s].flows.iter().map(|f| f.src).collect();
            senders.sort_unstable();
            senders.dedup();
            let ids: Vec<CoflowId> = parents.iter().map(|&p| job[p].id).collect();
            let c = &mut job[s];
            c.arrival = arrival;
            c.parents = ids;
            if !inputs.is_empty() {
                for f in &mut c.flows {
                    let i = senders.binary_search(&f.src).expect("a sender of the coflow");
                    f.src = inputs[i % inputs.len()];
                }
            }
        }
    }
    match Workload::new(w.machines, coflows) {
        Ok(w) => w,
        Err(e) => unreachable!("grouping into jobs made an invalid workload: {e}"),
    }
}

/// Draws a bin from the (unnormalized) probabilities `mix`.
fn pick_bin(rng: &mut ChaCha8Rng, mix: &[f64; 4]) -> Bin {
    let mut x = rng.gen_range(0.0..mix.iter().sum::<f64>());
    for (bin, p) in Bin::ALL.into_iter().zip(mix) {
        if x < *p {
            return bin;
        }
        x -= p;
    }
    // Rounding can leave `x` a hair above the last share: take the last bin with a share.
    Bin::ALL.into_iter().zip(mix).rev().find(|(_, p)| **p > 0.0).map_or(Bin::SN, |(b, _)| b)
}

/// Draws the flows of one mapper × reducer shuffle in bin `bin`, reducer by reducer.
fn shuffle(rng: &mut ChaCha8Rng, cfg: &SynthConfig, bin: Bin) -> Vec<Flow> {
    let wide = matches!(bin, Bin::SW | Bin::LW);
    let (m, r) = if wide { wide_shape(rng, cfg.machines) } else { narrow_shape(rng, cfg.machines) };
    let length = match bin {
        Bin::SN | Bin::SW => {
            let x = bounded_pareto(rng, cfg.length_min.as_f64(), SHORT_LONGEST_FLOW.as_f64(), cfg.length_tail);
            (x as u64).clamp(cfg.length_min.get(), SHORT_LONGEST_FLOW.get() - 1)
        }
        Bin::LN | Bin::LW => {
            let x = bounded_pareto(rng, SHORT_LONGEST_FLOW.as_f64(), cfg.length_max.as_f64(), cfg.length_tail);
            (x.round() as u64).clamp(SHORT_LONGEST_FLOW.get(), cfg.length_max.get())
        }
    };
    let mut mappers = distinct_machines(rng, cfg.machines, m);
    mappers.sort_unstable();
    let mut reducers = distinct_machines(rng, cfg.machines, r);
    reducers.sort_unstable();
    let top = rng.gen_range(0..r);
    let mut flows = Vec::with_capacity(m * r);
    for (j, &dst) in reducers.iter().enumerate() {
        let size = if j == top {
            length
        } else {
            // Log-uniform on [skew, 1]: skew^u for u in [0, 1).
            let s = cfg.reducer_skew.powf(rng.r#gen::<f64>());
            ((length as f64 * s).round() as u64).clamp(1, length)
        };
        flows.extend(mappers.iter().map(|&src| Flow { src, dst, size: Bytes(size) }));
    }
    flows
}

/// Draws `(m, r)` with `m × r ≤ 50`, each log-uniform on `1..=min(machines, 50)`.
fn narrow_shape(rng: &mut ChaCha8Rng, machines: u32) -> (usize, usize) {
    let hi = (machines as usize).min(NARROW_MAX_FLOWS);
    loop {
        let (m, r) = (log_uniform_int(rng, hi), log_uniform_int(rng, hi));
        if m * r <= NARROW_MAX_FLOWS {
            return (m, r);
        }
    }
}

/// Draws `(m, r)` with `m × r > 50`, each uniform on `1..=machines`.
fn wide_shape(rng: &mut ChaCha8Rng, machines: u32) -> (usize, usize) {
    debug_assert!(wide_possible(machines));
    let hi = machines as usize;
    loop {
        let (m, r) = (rng.gen_range(1..=hi), rng.gen_range(1..=hi));
        if m * r > NARROW_MAX_FLOWS {
            return (m, r);
        }
    }
}

/// An integer in `1..=hi` with `P(k) = ln((k + 1) / k) / ln(hi + 1)`: the floor of a log-uniform
/// real on `[1, hi + 1)`.
fn log_uniform_int(rng: &mut ChaCha8Rng, hi: usize) -> usize {
    let x = ((hi + 1) as f64).ln() * rng.r#gen::<f64>();
    (x.exp() as usize).clamp(1, hi)
}

/// The probability [`log_uniform_int`] gives `k`.
fn log_uniform_int_pmf(k: usize, hi: usize) -> f64 {
    ((k + 1) as f64 / k as f64).ln() / ((hi + 1) as f64).ln()
}

/// `count` distinct machines out of `machines`, in random order.
fn distinct_machines(rng: &mut ChaCha8Rng, machines: u32, count: usize) -> Vec<MachineId> {
    rand::seq::index::sample(rng, machines as usize, count).into_iter().map(|i| MachineId(i as u32)).collect()
}

/// A draw from the Pareto law of shape `alpha` truncated to `[lo, hi]`, by inverting its CDF;
/// shape 0 is the log-uniform law.
fn bounded_pareto(rng: &mut ChaCha8Rng, lo: f64, hi: f64, alpha: f64) -> f64 {
    let u = rng.r#gen::<f64>();
    if alpha == 0.0 {
        lo * (hi / lo).powf(u)
    } else {
        lo * (1.0 - u * (1.0 - (lo / hi).powf(alpha))).powf(-1.0 / alpha)
    }
}

/// The mean of [`bounded_pareto`].
fn bounded_pareto_mean(lo: f64, hi: f64, alpha: f64) -> f64 {
    if hi <= lo {
        lo
    } else if alpha == 0.0 {
        (hi - lo) / (hi / lo).ln()
    } else if (alpha - 1.0).abs() < 1e-9 {
        lo * (hi / lo).ln() / (1.0 - lo / hi)
    } else {
        alpha * lo.powf(alpha) * (hi.powf(1.0 - alpha) - lo.powf(1.0 - alpha))
            / ((1.0 - alpha) * (1.0 - (lo / hi).powf(alpha)))
    }
}

/// The mean of the log-uniform law on `[low, 1]`.
fn log_uniform_mean(low: f64) -> f64 {
    if low >= 1.0 { 1.0 } else { (1.0 - low) / (1.0 / low).ln() }
}

/// The mean of `f(m, r)` over the shapes [`narrow_shape`] or [`wide_shape`] draws.
fn mean_over_shapes(machines: u32, wide: bool, f: impl Fn(usize, usize) -> f64) -> f64 {
    let (mut weight, mut sum) = (0.0, 0.0);
    if wide {
        if !wide_possible(machines) {
            return 0.0;
        }
        let hi = machines as usize;
        for m in 1..=hi {
            for r in (NARROW_MAX_FLOWS / m + 1)..=hi {
                weight += 1.0;
                sum += f(m, r);
            }
        }
    } else {
        let hi = (machines as usize).min(NARROW_MAX_FLOWS);
        for m in 1..=hi {
            for r in 1..=hi.min(NARROW_MAX_FLOWS / m) {
                let p = log_uniform_int_pmf(m, hi) * log_uniform_int_pmf(r, hi);
                weight += p;
                sum += p * f(m, r);
            }
        }
    }
    sum / weight
}

#[cfg(test)]
mod tests {
    use super::*;
    use coflow_core::MIB;

    #[test]
    fn bounded_pareto_mean_matches_samples() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        for alpha in [0.0, 0.5, 1.0, 1.5] {
            let (lo, hi) = (5.0 * MIB as f64, 2048.0 * MIB as f64);
            let n = 200_000;
            let mean = (0..n).map(|_| bounded_pareto(&mut rng, lo, hi, alpha)).sum::<f64>() / n as f64;
            let expected = bounded_pareto_mean(lo, hi, alpha);
            assert!((mean / expected - 1.0).abs() < 0.05, "alpha {alpha}: sampled {mean}, expected {expected}");
        }
    }

    #[test]
    fn log_uniform_int_pmf_sums_to_one() {
        let total: f64 = (1..=50).map(|k| log_uniform_int_pmf(k, 50)).sum();
        assert!((total - 1.0).abs() < 1e-12);
    }

    #[test]
    fn multi_stage_jobs_read_their_parents_outputs() {
        let w = generate(&SynthConfig { coflows: 40, machines: 20, ..SynthConfig::default() });
        let jobs = multi_stage(&w, 3, 7);
        assert_eq!(jobs, multi_stage(&w, 3, 7), "seeded");
        assert_eq!(multi_stage(&w, 1, 7), w);
        assert_eq!(jobs.coflows.len(), 40);
        assert_eq!(jobs.total_bytes(), w.total_bytes());
        let by_id: std::collections::BTreeMap<CoflowId, &Coflow> = jobs.coflows.iter().map(|c| (c.id, c)).collect();
        let (mut with_parents, mut two_parents) = (0, 0);
        for c in &jobs.coflows {
            with_parents += !c.parents.is_empty() as usize;
            two_parents += (c.parents.len() == 2) as usize;
            for p in &c.parents {
                assert_eq!(by_id[p].arrival, c.arrival, "a job arrives at once");
            }
            if !c.parents.is_empty() {
                let inputs: Vec<MachineId> =
                    c.parents.iter().flat_map(|p| by_id[p].flows.iter().map(|f| f.dst)).collect();
                assert!(c.flows.iter().all(|f| inputs.contains(&f.src)), "coflow {} reads its parents' reducers", c.id);
            }
        }
        // 14 jobs of 3 stages (the last of 1): 26 later stages, some reading two earlier ones.
        assert_eq!(with_parents, 26);
        assert!(two_parents > 0 && two_parents < 13, "{two_parents}");
        let job_count = jobs.jobs().iter().collect::<std::collections::BTreeSet<_>>().len();
        assert_eq!(job_count, 14);
    }
}
