//! `coflow wan-bench`: the wall time of a `siphon-mc` Monte Carlo decision with N coflows present
//! on a wide-area fabric.

use anyhow::Result;
use clap::Args;
use coflow_sched::SiphonConfig;
use coflow_sched::policy::MonteCarlo;
use coflow_sim::bench::{SearchBench, siphon_search};
use coflow_sim::experiment::Spelling;

/// Options of `coflow wan-bench`.
#[derive(Debug, Args)]
pub(crate) struct BenchArgs {
    /// Coflows present at the timed decision.
    #[arg(long, default_value_t = 20)]
    coflows: usize,
    /// Decisions to time, each on a different workload seed (at most 10,000).
    #[arg(long, default_value_t = 20)]
    repeat: u64,
    /// The topology (as `coflow sim --wan`).
    #[arg(
        long,
        default_value = "default",
        value_name = "FILE|default",
        value_parser = clap::builder::NonEmptyStringValueParser::new()
    )]
    wan: String,
    /// Monte Carlo rounds per search (as `coflow sim --mc-rounds`).
    #[arg(long = "mc-rounds", alias = "rounds", default_value_t = SiphonConfig::default().rounds)]
    rounds: u32,
    /// Search depth (as `coflow sim --mc-depth`).
    #[arg(long = "mc-depth", alias = "depth", default_value_t = SiphonConfig::default().depth)]
    depth: usize,
    /// Coflows that may take the searched positions (as `coflow sim --mc-breadth`).
    #[arg(long = "mc-breadth", alias = "breadth", default_value_t = SiphonConfig::default().breadth)]
    breadth: usize,
}

/// Times the first decision of `siphon-mc` (a full search) with every coflow present, as
/// `coflow_sim::bench::siphon_search` does, and prints the figures.
pub(crate) fn bench(a: BenchArgs) -> Result<()> {
    let mc = MonteCarlo { rounds: a.rounds, depth: a.depth, breadth: a.breadth, ..MonteCarlo::default() };
    let spec = SearchBench { coflows: a.coflows, repeat: a.repeat, topology: a.wan.clone(), mc };
    let found = siphon_search(&spec, Spelling::Flag)?;
    let times = &found.times_s;
    let mean = times.iter().sum::<f64>() / times.len() as f64;
    let count = crate::output::count;
    crate::output::say!(
        &[],
        "siphon-mc search with {} present (rounds ≤ {}, depth {}, breadth {}, {}): \
         mean {:.2} ms, p50 {:.2} ms, max {:.2} ms over {}; {:.0} rounds per search on average",
        count(a.coflows, "coflow", "coflows"),
        a.rounds,
        a.depth,
        a.breadth,
        count(rayon::current_num_threads(), "thread", "threads"),
        mean * 1e3,
        coflow_sim::percentile(times, 50.0) * 1e3,
        times.last().copied().unwrap_or(0.0) * 1e3,
        count(times.len(), "decision", "decisions"),
        found.rounds_per_search,
    );
    Ok(())
}
