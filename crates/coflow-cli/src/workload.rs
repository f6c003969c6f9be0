//! Workload options the commands share: the embedded default workload (a seeded synthetic one
//! shaped like the Facebook trace) of `sim`, `bench` and `trace`, and the replayed workload of
//! `demo` and `testbed`.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use coflow_core::Workload;
use coflow_sim::experiment::{Spelling, WorkloadSource};

/// Options of the synthetic workload.
#[derive(Debug, Args)]
pub(crate) struct SynthArgs {
    /// Seed of the synthetic workload (and of anything random in a run) (default: 1).
    #[arg(long)]
    seed: Option<u64>,
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
    /// The seed: `--seed`, else 1.
    pub(crate) fn seed(&self) -> u64 {
        self.seed.unwrap_or(1)
    }

    /// The trace at `trace`, or else the synthetic workload, for a command in which the seed
    /// draws nothing but the synthetic workload and its jobs (`trace stats`): a `--seed` beside a
    /// trace of independent coflows is refused, as the workload's shape is, rather than ignored.
    pub(crate) fn load_unseeded(&self, trace: Option<&std::path::Path>) -> Result<(Workload, String)> {
        if let (Some(p), Some(_), 1) = (trace, self.seed, self.stages) {
            anyhow::bail!(
                "--seed seeds the synthetic workload (and the jobs of --stages); the trace {} is read as it is",
                p.display()
            );
        }
        self.load(trace)
    }

    /// The trace at `trace`, or else the synthetic workload these options describe; the
    /// synthetic workload's shape beside a trace is refused rather than ignored.
    pub(crate) fn source(&self, trace: Option<&std::path::Path>) -> Result<WorkloadSource> {
        match trace {
            Some(p) => {
                if self.coflows.is_some() || self.machines.is_some() {
                    anyhow::bail!(
                        "--coflows and --machines shape the synthetic workload; the trace {} has its own",
                        p.display()
                    );
                }
                Ok(WorkloadSource::Trace(p.to_path_buf()))
            }
            None => Ok(WorkloadSource::Synthetic { coflows: self.coflows, machines: self.machines }),
        }
    }

    /// The workload (the trace at `trace`, or else the synthetic one), grouped into jobs of
    /// `--stages`, and a line saying what it is.
    pub(crate) fn load(&self, trace: Option<&std::path::Path>) -> Result<(Workload, String)> {
        Ok(self.source(trace)?.load(self.seed(), self.stages, Spelling::Flag)?)
    }
}

/// The replayed workload's options, shared by `coflow demo` and `coflow testbed`.
#[derive(Debug, Args)]
pub(crate) struct WorkloadArgs {
    /// Replay this trace instead of the synthetic workload (coflow-benchmark or JSON Lines).
    #[arg(long, alias = "workload", value_name = "FILE")]
    trace: Option<PathBuf>,
    /// Scale flow sizes and arrival times together so that this many bytes cross the fabric,
    /// e.g. `600MB` (synthetic workload default: 600 MB in `coflow demo`, 1.2 GB in `coflow
    /// testbed run`, 150 MB in `coflow testbed faults`; a trace file is replayed as is unless
    /// given).
    #[arg(long, value_name = "SIZE")]
    total_bytes: Option<coflow_core::Bytes>,
    /// Coflows of the synthetic workload (default: 40).
    #[arg(long)]
    coflows: Option<usize>,
    /// Seed of the synthetic workload, and of a wide area's weather in `coflow testbed run`
    /// (default: 1).
    #[arg(long)]
    seed: Option<u64>,
    /// Target average port load of the synthetic workload (default: 0.9).
    #[arg(long)]
    load: Option<f64>,
}

impl WorkloadArgs {
    /// The trace `--trace` names, if any.
    pub(crate) fn trace(&self) -> Option<&std::path::Path> {
        self.trace.as_deref()
    }

    /// The seed of the synthetic workload (and of a testbed's weather).
    pub(crate) fn seed(&self) -> u64 {
        self.seed.unwrap_or(1)
    }

    /// Builds the workload on `machines` machines with ports of `port` (see
    /// [`coflow_testbed::workload::build`]); an error names the options that shape it, with
    /// `machines_flags`, those that give the machines. `weather`: whether the run also seeds a
    /// wide area's weather with `--seed`, which a trace then leaves it to do.
    pub(crate) fn build(
        &self,
        machines: u32,
        port: coflow_core::Rate,
        default_total: u64,
        machines_flags: &str,
        weather: bool,
    ) -> Result<(Workload, String)> {
        coflow_testbed::workload::build(&self.spec(weather)?, machines, port, default_total)
            .map_err(|e| anyhow::anyhow!("{e} (--trace, --total-bytes, --coflows, --load, {machines_flags})"))
    }

    /// What the options describe; the synthetic workload's shape beside a trace is refused
    /// rather than ignored, and so is its seed unless the run has `weather` to seed.
    fn spec(&self, weather: bool) -> Result<coflow_testbed::WorkloadSpec> {
        if let Some(p) = &self.trace {
            if self.coflows.is_some() || self.load.is_some() {
                anyhow::bail!(
                    "--coflows and --load shape the synthetic workload; the trace {} has its own",
                    p.display()
                );
            }
            if self.seed.is_some() && !weather {
                anyhow::bail!(
                    "--seed seeds the synthetic workload (and a wide area's weather, which this run has not); \
                     the trace {} is replayed as it is",
                    p.display()
                );
            }
        }
        Ok(coflow_testbed::WorkloadSpec {
            trace: self.trace.clone(),
            total_bytes: self.total_bytes.map(coflow_core::Bytes::get),
            coflows: self.coflows.unwrap_or(40),
            seed: self.seed(),
            load: self.load.unwrap_or(0.9),
        })
    }
}
