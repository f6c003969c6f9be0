//! The distribution of a resource's capacity: a wide-area link's available bandwidth, which
//! fluctuates; what a policy draws from (`siphon-mc`) or takes the mean of (`mrtf`).

use rand::Rng;

/// The distribution of a link's available bandwidth, in bytes per second.
#[derive(Clone, Debug, PartialEq)]
pub enum Bandwidth {
    /// Always the same.
    Constant(f64),
    /// Uniform between the two bounds.
    Uniform(f64, f64),
    /// Normal with this mean and standard deviation, redrawn below `min` (truncated).
    Normal {
        /// Mean.
        mean: f64,
        /// Standard deviation.
        sd: f64,
        /// Smallest value drawn; draws below are redrawn (at most 64 times, then `min`).
        min: f64,
    },
    /// Empirical: one of these measured samples, each equally likely (kept sorted).
    Empirical(Vec<f64>),
}

/// The largest value a distribution may take as a parameter, in bytes per second (8 Pbit/s):
/// far past any link, and small enough that a mean plus a few deviations, or a sum over every
/// link, stays a finite number of bytes per second.
pub const MAX_BANDWIDTH: f64 = 1e15;

impl Bandwidth {
    /// Checks that every value is finite and positive (a deviation: not negative) and at most
    /// [`MAX_BANDWIDTH`]; sorts empirical samples. The error says what is wrong.
    pub fn validate(self) -> Result<Bandwidth, String> {
        self.validate_within(0.0, MAX_BANDWIDTH)
    }

    /// [`Bandwidth::validate`] with the values at most `max`, and every value a draw can take
    /// (a constant, the low bound, the normal's `min`, each sample) at least `min` (the bounds
    /// in the unit of the values).
    pub fn validate_within(mut self, min: f64, max: f64) -> Result<Bandwidth, String> {
        let ok = |v: f64| v.is_finite() && v > 0.0;
        let shown = coflow_core::shown;
        let positive =
            |field: &str, v: f64| if ok(v) { Ok(()) } else { Err(format!("{field} {} is not positive", shown(v))) };
        match &mut self {
            Bandwidth::Constant(v) => positive("bandwidth", *v)?,
            Bandwidth::Uniform(lo, hi) if !(ok(*lo) && ok(*hi) && *lo <= *hi) => {
                return Err(format!("uniform bounds {}..{} are not positive and ordered", shown(*lo), shown(*hi)));
            }
            Bandwidth::Uniform(..) => {}
            Bandwidth::Normal { mean, sd, min } => {
                positive("normal mean", *mean)?;
                positive("normal min", *min)?;
                if !(sd.is_finite() && *sd >= 0.0) {
                    return Err(format!("normal sd {} is not a finite number at least 0", shown(*sd)));
                }
                // Draws below `min` are drawn again: with `min` above the mean, nearly all would be.
                if *min > *mean {
                    let (min, mean) = (shown(*min), shown(*mean));
                    return Err(format!("normal min {min} above the mean {mean}: nearly every draw would be redrawn"));
                }
            }
            Bandwidth::Empirical(s) => {
                if s.is_empty() {
                    return Err("no samples".to_string());
                }
                if let Some(v) = s.iter().find(|&&v| !ok(v)) {
                    return Err(format!("sample {} is not positive", shown(*v)));
                }
                s.sort_by(f64::total_cmp);
            }
        }
        let (smallest, largest) = (
            self.least(),
            match &self {
                Bandwidth::Constant(v) => *v,
                Bandwidth::Uniform(_, hi) => *hi,
                Bandwidth::Normal { mean, sd, min } => mean.max(*sd).max(*min),
                Bandwidth::Empirical(s) => s[s.len() - 1],
            },
        );
        if largest > max {
            return Err(format!("{} is above {}", shown(largest), shown(max)));
        }
        if smallest < min {
            return Err(format!("{} is below {}, the least a link may carry", shown(smallest), shown(min)));
        }
        Ok(self)
    }

    /// The least value a draw can take: the constant, the low bound, the normal's `min`, the
    /// least sample (infinite with none).
    pub fn least(&self) -> f64 {
        match self {
            Bandwidth::Constant(v) | Bandwidth::Uniform(v, _) | Bandwidth::Normal { min: v, .. } => *v,
            Bandwidth::Empirical(s) => s.iter().copied().fold(f64::INFINITY, f64::min),
        }
    }

    /// Its expected value (for the normal, the untruncated mean: the truncation is meant to cut
    /// only a negligible tail).
    pub fn mean(&self) -> f64 {
        match self {
            Bandwidth::Constant(v) => *v,
            Bandwidth::Uniform(lo, hi) => (lo + hi) / 2.0,
            Bandwidth::Normal { mean, .. } => *mean,
            Bandwidth::Empirical(s) => s.iter().sum::<f64>() / s.len() as f64,
        }
    }

    /// The distribution with every value multiplied by `k`.
    pub fn scaled(&self, k: f64) -> Bandwidth {
        match self {
            Bandwidth::Constant(v) => Bandwidth::Constant(v * k),
            Bandwidth::Uniform(lo, hi) => Bandwidth::Uniform(lo * k, hi * k),
            Bandwidth::Normal { mean, sd, min } => Bandwidth::Normal { mean: mean * k, sd: sd * k, min: min * k },
            Bandwidth::Empirical(s) => Bandwidth::Empirical(s.iter().map(|v| v * k).collect()),
        }
    }

    /// Its median (for an even number of samples, the lower middle one).
    pub fn median(&self) -> f64 {
        match self {
            Bandwidth::Empirical(s) => s[(s.len() - 1) / 2],
            other => other.mean(),
        }
    }

    /// One draw.
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> f64 {
        match self {
            Bandwidth::Constant(v) => *v,
            Bandwidth::Uniform(lo, hi) => lo + (hi - lo) * rng.r#gen::<f64>(),
            Bandwidth::Normal { mean, sd, min } => {
                for _ in 0..64 {
                    // Box-Muller; `1 - u` keeps the logarithm's argument in (0, 1].
                    let (u1, u2) = (1.0 - rng.r#gen::<f64>(), rng.r#gen::<f64>());
                    let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
                    let v = mean + sd * z;
                    if v >= *min {
                        return v;
                    }
                }
                *min
            }
            Bandwidth::Empirical(s) => s[rng.gen_range(0..s.len())],
        }
    }
}
