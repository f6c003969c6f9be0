//! Deadlines for experiments, as Varys §7.1 sets them: `D = Γ_empty · (1 + U(0, x))`, at least
//! 200 ms, where `Γ_empty` is the coflow's completion time alone on the empty fabric.

use coflow_core::{Nanos, Rate, Workload};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The smallest deadline handed out (Varys §7.1).
pub const MIN_DEADLINE: Nanos = Nanos::from_millis(200);

/// Gives every coflow that has no deadline one drawn as Varys §7.1 does, with slack factor `x`
/// (1 in the paper), ports at `port_rate`, and a seeded generator: the same seed gives the same
/// deadlines. Coflows that already have a deadline (from the trace) keep it.
pub fn assign_deadlines(w: &mut Workload, port_rate: Rate, x: f64, seed: u64) {
    assert!(x.is_finite() && x >= 0.0, "the deadline slack must be a non-negative number");
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xdead_11e5);
    let machines = w.machines as usize;
    for c in &mut w.coflows {
        // Draw for every coflow, so that a trace deadline does not shift the others' draws.
        let u: f64 = if x > 0.0 { rng.gen_range(0.0..=x) } else { 0.0 };
        if c.deadline.is_none() {
            let gamma = c.isolated_cct(machines, port_rate.bytes_per_sec()).as_secs_f64();
            c.deadline = Some(Nanos::from_secs_f64(gamma * (1.0 + u)).max(MIN_DEADLINE));
        }
    }
}

/// Gives a seeded fraction of the coflows a deadline drawn as [`assign_deadlines`] draws them, and
/// takes away any other coflow's: a mix of deadline and non-deadline coflows, as Karuna studies.
/// Each coflow is picked independently with probability `fraction`; the same seed picks the same
/// coflows and draws the same deadlines. A picked coflow with a deadline from the trace keeps it.
pub fn assign_deadlines_to_fraction(w: &mut Workload, port_rate: Rate, x: f64, fraction: f64, seed: u64) {
    assert!((0.0..=1.0).contains(&fraction), "the deadline fraction must be in [0, 1]");
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x6d_1c_ed);
    let picked: Vec<bool> = w.coflows.iter().map(|_| rng.gen_bool(fraction)).collect();
    assign_deadlines(w, port_rate, x, seed);
    for (c, &p) in w.coflows.iter_mut().zip(&picked) {
        if !p {
            c.deadline = None;
        }
    }
}
