//! The options `coflow sim` and `coflow sim sweep` share, turned into the library's
//! [`Config`].

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use coflow_sim::experiment::Config;

use crate::workload::SynthArgs;

/// The options `coflow sim` and `coflow sim sweep` share.
#[derive(Debug, Args)]
pub(crate) struct CommonArgs {
    /// A trace to replay (coflow-benchmark or JSON Lines); without one, a synthetic workload
    /// shaped like the Facebook trace.
    #[arg(long)]
    trace: Option<PathBuf>,
    #[arg(
        long,
        default_value = "all",
        value_parser = crate::policies::list,
        help = crate::policies::help("Comma-separated policies to run, or `all`")
    )]
    policies: String,
    /// The policy others are compared against (one name; `none` or empty for none).
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
    /// The slack x of generated deadlines, 0 to 1000 (with --deadlines; default 1).
    #[arg(long, requires = "deadlines")]
    pub(crate) deadline_x: Option<f64>,
    #[command(flatten)]
    model: crate::model::ModelArgs,
}

impl CommonArgs {
    /// The trace `--trace` names, if any.
    pub(crate) fn trace(&self) -> Option<&std::path::Path> {
        self.trace.as_deref()
    }

    /// The experiment these options describe (one replay on the big switch; the caller adds the
    /// rest).
    pub(crate) fn config(&self) -> Result<Config> {
        crate::policies::refuse_tcp(&self.policies, "sim")?;
        Ok(Config {
            workload: self.synth.source(self.trace.as_deref())?,
            stages: self.synth.stages,
            policies: self.policies.clone(),
            baseline: self.baseline.clone(),
            port_rate: self.port_rate.clone(),
            seed: self.synth.seed(),
            threads: self.threads,
            deadline_x: self.deadlines.then_some(self.deadline_x.unwrap_or(1.0)),
            model: self.model.model()?,
            ..Config::default()
        })
    }
}
