//! The run plan `coflow sim` and `coflow sim sweep` share: their common options, validated into
//! the library's [`Plan`], and the JSON file they write.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args;
use coflow_sim::experiment::{Options, Plan, Spelling};
use serde::Serialize;

use crate::workload::SynthArgs;

/// The options `coflow sim` and `coflow sim sweep` share.
#[derive(Debug, Args)]
pub(crate) struct CommonArgs {
    /// A trace to replay (coflow-benchmark or JSON Lines); without one, a synthetic workload
    /// shaped like the Facebook trace.
    #[arg(long)]
    trace: Option<PathBuf>,
    #[arg(long, default_value = "all", help = crate::policies::help("Comma-separated policies to run, or `all`"))]
    policies: String,
    /// The policy others are compared against.
    #[arg(long, default_value = "fair")]
    baseline: String,
    /// Capacity of every port, e.g. 1Gbps, 128MiB/s or 125000000 (bytes per second).
    #[arg(long, default_value = "1Gbps")]
    port_rate: String,
    #[command(flatten)]
    synth: SynthArgs,
    /// Write the figures as JSON to this file (`-`: standard output).
    #[arg(long, value_name = "FILE")]
    pub(crate) json: Option<PathBuf>,
    /// How many simulations to run at once (default: the machine's cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Give every coflow a deadline: the trace's, or else one drawn as Varys §7.1 does,
    /// Γ_empty·(1 + U(0, x)) and at least 200 ms, seeded by --seed.
    #[arg(long)]
    pub(crate) deadlines: bool,
    /// The slack x of generated deadlines.
    #[arg(long, default_value_t = 1.0, requires = "deadlines")]
    pub(crate) deadline_x: f64,
    #[command(flatten)]
    model: crate::model::ModelArgs,
}

/// The validated form of [`CommonArgs`]: the workload (without generated deadlines) and the
/// policies to run.
pub(crate) fn plan(a: &CommonArgs) -> Result<Plan> {
    crate::policies::refuse_tcp(&a.policies, "sim")?;
    let options = Options {
        policies: &a.policies,
        baseline: &a.baseline,
        port_rate: &a.port_rate,
        seed: a.synth.seed,
        threads: a.threads,
        deadline_x: a.deadlines.then_some(a.deadline_x),
        model: a.model.model()?,
    };
    options.plan(Spelling::Flag, || match &a.trace {
        Some(p) => {
            let w = coflow_trace::read_trace(p).with_context(|| format!("reading trace {}", p.display()))?;
            Ok(a.synth.staged(w, p.display().to_string()))
        }
        None => a.synth.generate(),
    })
}

/// Writes `report` as pretty JSON with a final newline (`-`: standard output).
pub(crate) fn write_json(path: &Path, report: &impl Serialize) -> Result<()> {
    crate::output::write(path, &coflow_sim::experiment::pretty_json(report))
}
