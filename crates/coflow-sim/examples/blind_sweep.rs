//! The open parameters of `philae` and `saath`, swept: each variant changes one field of
//! `PhilaeConfig` or `SaathConfig` from the defaults and replays a workload through
//! `coflow_sim::simulate`, printing its average CCT. No command-line flag of `coflow` sets these
//! fields; this is the command behind the sweep in the book's evaluation:
//!
//! `cargo run --release -p coflow-sim --example blind_sweep -- TRACE|synthetic [PORT_BYTES_PER_S]`
//!
//! The trace is replayed as `coflow sim --trace TRACE` reads it, the synthetic workload as
//! `coflow sim` generates it (seed 1); ports default to 128 MiB/s for a trace and 1 Gbit/s for
//! the synthetic workload. Variants run two at a time.

use std::sync::Mutex;

use coflow_core::{MIB, Rate, Workload};
use coflow_sched::{Blinded, Impact, Philae, PhilaeConfig, Pilots, Saath, SaathConfig, Scheduler};
use coflow_sim::{SimConfig, simulate};

/// One variant's parameters.
#[derive(Clone, Copy, Debug)]
enum Params {
    Philae(PhilaeConfig),
    Saath(SaathConfig),
}

impl Params {
    fn build(self) -> Box<dyn Scheduler> {
        match self {
            Params::Philae(c) => Box::new(Blinded::new(Philae::new(c))),
            Params::Saath(c) => Box::new(Blinded::new(Saath::new(c))),
        }
    }
}

/// One variant: its label and its parameters.
type Variant = (&'static str, Params);

fn philae(cfg: PhilaeConfig) -> Params {
    Params::Philae(cfg)
}

fn saath(cfg: SaathConfig) -> Params {
    Params::Saath(cfg)
}

fn variants() -> Vec<Variant> {
    let p = PhilaeConfig::default;
    let s = SaathConfig::default;
    vec![
        ("philae defaults", philae(PhilaeConfig::default())),
        ("philae pilots: Constant(1)", philae(PhilaeConfig { pilots: Pilots::Constant(1), ..p() })),
        ("philae pilots: Constant(10)", philae(PhilaeConfig { pilots: Pilots::Constant(10), ..p() })),
        ("philae pilots: Constant(20)", philae(PhilaeConfig { pilots: Pilots::Constant(20), ..p() })),
        ("philae pilots: Fraction(0.05)", philae(PhilaeConfig { pilots: Pilots::Fraction(0.05), ..p() })),
        ("philae pilots: MinSendersReceivers", philae(PhilaeConfig { pilots: Pilots::MinSendersReceivers, ..p() })),
        ("philae thin_limit: 0", philae(PhilaeConfig { thin_limit: 0, ..p() })),
        ("philae impact: ContentionTimesSize", philae(PhilaeConfig { impact: Impact::ContentionTimesSize, ..p() })),
        ("saath defaults", saath(SaathConfig::default())),
        ("saath first_threshold: 1 MiB", saath(SaathConfig { first_threshold: MIB as f64, ..s() })),
        ("saath first_threshold: 100 MiB", saath(SaathConfig { first_threshold: 100.0 * MIB as f64, ..s() })),
        ("saath aging: None", saath(SaathConfig { aging: None, ..s() })),
        ("saath aging: Some(1.0)", saath(SaathConfig { aging: Some(1.0), ..s() })),
    ]
}

fn average_cct(w: &Workload, policy: Box<dyn Scheduler>, port_rate: Rate) -> f64 {
    let cfg = SimConfig::big_switch(port_rate);
    let r = simulate(w, policy, &cfg).expect("the big switch serves every policy");
    let total: f64 = r.outcomes.iter().map(|o| o.cct().expect("every coflow finishes").as_secs_f64()).sum();
    total / r.outcomes.len() as f64
}

fn main() {
    let source = std::env::args().nth(1).unwrap_or_else(|| "synthetic".to_string());
    let (w, default_rate) = if source == "synthetic" {
        let cfg = coflow_trace::synth::SynthConfig { seed: 1, ..Default::default() };
        (coflow_trace::synth::generate(&cfg), 125_000_000.0)
    } else {
        let w = coflow_trace::read_trace(std::path::Path::new(&source)).unwrap_or_else(|e| panic!("{source}: {e}"));
        (w, 128.0 * MIB as f64)
    };
    let rate = std::env::args().nth(2).map_or(default_rate, |r| r.parse().expect("port rate in bytes per second"));
    let port_rate = Rate::from_bytes_per_sec(rate);
    let todo = Mutex::new(variants().into_iter().enumerate().collect::<Vec<_>>());
    let done = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                loop {
                    let Some((i, (label, params))) = todo.lock().unwrap().pop() else { break };
                    let avg = average_cct(&w, params.build(), port_rate);
                    done.lock().unwrap().push((i, label, avg));
                }
            });
        }
    });
    let mut done = done.into_inner().unwrap();
    done.sort_by_key(|x| x.0);
    println!("{source} at {rate} B/s: average CCT (s)");
    for (_, label, avg) in done {
        println!("{label:<40} {avg:>10.3}");
    }
}
