//! The embedded default workload: a seeded synthetic one shaped like the Facebook trace, with
//! the options every command that can use it shares.

use anyhow::{Context, Result};
use clap::Args;
use coflow_core::Workload;
use coflow_trace::synth;

/// Options of the synthetic workload.
#[derive(Debug, Args)]
pub(crate) struct SynthArgs {
    /// Seed of the synthetic workload (and of anything random in a run).
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    /// Number of coflows of the synthetic workload.
    #[arg(long)]
    pub(crate) coflows: Option<usize>,
    /// Number of machines of the synthetic workload.
    #[arg(long)]
    pub(crate) machines: Option<u32>,
    /// Group the coflows into multi-stage jobs of N coflows in arrival order: each later stage
    /// depends on the one before (and sometimes the one before that), reads from its parents'
    /// reducers and is released when they finish (seeded by --seed). 1: independent coflows.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub(crate) stages: usize,
}

impl SynthArgs {
    /// The generator's configuration these options describe, validated.
    pub(crate) fn config(&self) -> Result<synth::SynthConfig> {
        let mut cfg = synth::SynthConfig { seed: self.seed, ..Default::default() };
        if let Some(n) = self.coflows {
            cfg.coflows = n;
        }
        if let Some(m) = self.machines {
            cfg.machines = m;
        }
        cfg.validate().context("synthetic workload (--coflows, --machines)")?;
        Ok(cfg)
    }

    /// The workload, and a line saying what it is.
    pub(crate) fn generate(&self) -> Result<(Workload, String)> {
        let cfg = self.config()?;
        Ok(self.staged(synth::generate(&cfg), cfg.describe()))
    }

    /// `w` grouped into jobs of `--stages` coflows (unchanged for 1), with its description.
    pub(crate) fn staged(&self, w: Workload, mut source: String) -> (Workload, String) {
        if self.stages <= 1 {
            return (w, source);
        }
        source.push_str(&format!(" (jobs of {} stages)", self.stages));
        (synth::multi_stage(&w, self.stages, self.seed), source)
    }
}
