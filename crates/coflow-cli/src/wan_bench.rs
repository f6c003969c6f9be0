//! `coflow wan-bench`: the wall time of a `siphon-mc` Monte Carlo decision with N coflows present
//! on a wide-area fabric.

use std::sync::Mutex;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::Args;
use coflow_core::Nanos;
use coflow_sched::policy::{MonteCarlo, Params};
use coflow_sched::{Allocation, Input, Intra, Scheduler, ServiceModel, SiphonConfig, SiphonMc};
use coflow_sim::topology::Overrides;
use coflow_sim::{SimConfig, simulate};

/// Options of `coflow wan-bench`.
#[derive(Debug, Args)]
pub(crate) struct BenchArgs {
    /// Coflows present at the timed decision.
    #[arg(long, default_value_t = 20)]
    coflows: usize,
    /// Decisions to time, each on a different workload seed.
    #[arg(long, default_value_t = 20)]
    repeat: u64,
    /// The topology (as `coflow sim --wan`).
    #[arg(long, default_value = "default")]
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

/// Times the first decision of `siphon-mc` (a full search) with every coflow present, on
/// FB-shaped synthetic workloads of 150 machines whose coflows all arrive at time 0. The clock is
/// read here, around the policy.
pub(crate) fn bench(a: BenchArgs) -> Result<()> {
    if a.coflows < 2 || a.repeat == 0 {
        bail!("--coflows must be at least 2 and --repeat at least 1");
    }
    let base = crate::wan::load(&a.wan, 150, 0, &Overrides::default())?;
    let (fabric, redraw) = (&base.fabric, base.redraw);
    let mut times = Vec::new();
    let mut rounds = 0;
    for seed in 1..=a.repeat {
        // More than needed, keeping the first that cross the wide area (some are all local).
        let synth =
            coflow_trace::synth::SynthConfig { seed, coflows: 2 * a.coflows, machines: 150, ..Default::default() };
        let mut w = coflow_trace::synth::generate(&synth);
        w.coflows.retain(|c| c.flows.iter().any(|f| f.crosses_fabric() && !fabric.route(f.src, f.dst).is_local()));
        w.coflows.truncate(a.coflows);
        w.release_at_zero();
        // As `coflow sim --wan` builds it: a draw holds for the redraw interval.
        let mc = MonteCarlo { rounds: a.rounds, depth: a.depth, breadth: a.breadth, ..MonteCarlo::default() };
        let params = Params { seed, redraw: (redraw != Nanos::MAX).then_some(redraw), mc };
        let timed = FirstSearch { inner: SiphonMc::new(params.siphon_config(Intra::Madd)), time_s: None, present: 0 };
        let probe = std::sync::Arc::new(Mutex::new(None));
        let wrapped = Probe { inner: timed, out: probe.clone() };
        // The weather is seeded as the search is; per-connection bandwidth stays off.
        let wan = coflow_sim::WanConfig { seed, per_connection: None, ..base.clone() };
        simulate(&w, Box::new(wrapped), &SimConfig::wide_area(wan))?;
        let (t, present, r) = probe.lock().expect("no panic while held").take().context("no decision was made")?;
        if present != a.coflows {
            bail!("{present} coflows present at the first decision, expected {}", a.coflows);
        }
        times.push(t);
        rounds += r;
    }
    times.sort_by(f64::total_cmp);
    let mean = times.iter().sum::<f64>() / times.len() as f64;
    println!(
        "siphon-mc search with {} coflows present (rounds ≤ {}, depth {}, breadth {}, {} threads): \
         mean {:.2} ms, p50 {:.2} ms, max {:.2} ms over {} decisions; {:.0} rounds per search on average",
        a.coflows,
        a.rounds,
        a.depth,
        a.breadth,
        rayon::current_num_threads(),
        mean * 1e3,
        coflow_sim::percentile(&times, 50.0) * 1e3,
        times.last().copied().unwrap_or(0.0) * 1e3,
        times.len(),
        rounds as f64 / a.repeat as f64,
    );
    Ok(())
}

/// Times the first decision of the policy it wraps, then serves nothing (ending the run).
#[derive(Debug)]
struct FirstSearch {
    inner: SiphonMc,
    time_s: Option<f64>,
    present: usize,
}

/// Hands [`FirstSearch`]'s measurement out: (seconds, coflows present, rounds run).
#[derive(Debug)]
struct Probe {
    inner: FirstSearch,
    out: std::sync::Arc<Mutex<Option<(f64, usize, u64)>>>,
}

impl Scheduler for Probe {
    fn name(&self) -> &'static str {
        "siphon-mc"
    }

    fn model(&self) -> ServiceModel {
        ServiceModel::Proportional
    }

    fn handle_arrival(&mut self, now: Nanos, coflow: coflow_core::CoflowId) {
        self.inner.inner.handle_arrival(now, coflow);
    }

    fn poll_allocation(&mut self, input: &Input<'_>, out: &mut Allocation) -> Option<Nanos> {
        if self.inner.time_s.is_some() {
            return None;
        }
        let started = Instant::now();
        self.inner.inner.poll_allocation(input, out);
        let t = started.elapsed().as_secs_f64();
        self.inner.time_s = Some(t);
        self.inner.present = input.coflows.len();
        out.coflow_rate.iter_mut().for_each(|r| *r = 0.0);
        out.clear_leg_extras();
        *self.out.lock().expect("no panic while held") = Some((t, self.inner.present, self.inner.inner.searches().1));
        None
    }
}
