//! `coflow trace`: statistics, format conversion and synthetic generation.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use coflow_trace::TraceFormat;

use crate::workload::SynthArgs;

/// What to do with traces.
#[derive(Debug, Subcommand)]
pub(crate) enum TraceCommand {
    /// Print a trace's coflows, flows, bytes, machines and SN/LN/SW/LW bins.
    Stats(StatsArgs),
    /// Convert between the coflow-benchmark format and coflow JSON Lines.
    Convert(ConvertArgs),
    /// Write a seeded synthetic workload shaped like the Facebook trace.
    Gen(GenArgs),
    /// Make each machine (rack) of a trace several machines, each task on one of its rack's.
    Spread(SpreadArgs),
}

#[derive(Debug, Args)]
pub(crate) struct SpreadArgs {
    /// The input trace, at rack level (as the Facebook trace: 150 racks).
    input: PathBuf,
    /// The output file.
    output: PathBuf,
    /// Machines per rack (20 makes the Facebook trace's 150 racks its 3,000 machines).
    #[arg(long, default_value_t = 20)]
    per_rack: u32,
    /// Seed of the placement of tasks on their rack's machines.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The output format; by default from the output's extension (.jsonl, else benchmark).
    #[arg(long, value_enum)]
    to: Option<Format>,
}

#[derive(Debug, Args)]
pub(crate) struct StatsArgs {
    /// The trace; without one, the embedded synthetic workload.
    path: Option<PathBuf>,
    /// Write the statistics as JSON to this file instead of a table (`-`: standard output).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// The synthetic workload, when no trace is given.
    #[command(flatten)]
    synth: SynthArgs,
}

#[derive(Debug, Args)]
pub(crate) struct ConvertArgs {
    /// The input trace (format detected from its extension or content).
    input: PathBuf,
    /// The output file.
    output: PathBuf,
    /// The output format; by default from the output's extension (.jsonl, else benchmark).
    #[arg(long, value_enum)]
    to: Option<Format>,
}

#[derive(Debug, Args)]
pub(crate) struct GenArgs {
    /// Where to write it.
    #[arg(short, long)]
    output: PathBuf,
    #[command(flatten)]
    synth: SynthArgs,
    /// The output format; by default from the extension (.jsonl, else benchmark).
    #[arg(long, value_enum)]
    to: Option<Format>,
}

/// A trace format on the command line.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub(crate) enum Format {
    /// The coflow-benchmark text format of the Facebook trace.
    Benchmark,
    /// coflow JSON Lines, which carries every option of the model.
    Jsonl,
}

fn format_for(path: &std::path::Path, explicit: Option<Format>) -> TraceFormat {
    match explicit {
        Some(Format::Benchmark) => TraceFormat::Benchmark,
        Some(Format::Jsonl) => TraceFormat::Jsonl,
        None if path.extension().is_some_and(|e| e == "jsonl" || e == "json") => TraceFormat::Jsonl,
        None => TraceFormat::Benchmark,
    }
}

pub(crate) fn run(cmd: TraceCommand) -> Result<()> {
    match cmd {
        TraceCommand::Stats(a) => {
            let (w, _) = a.synth.load(a.path.as_deref())?;
            let stats = coflow_trace::stats(&w);
            match &a.json {
                Some(p) => crate::output::json(p, &stats)?,
                None => print!("{stats}"),
            }
        }
        TraceCommand::Convert(a) => {
            let w = coflow_trace::read_trace(&a.input).with_context(|| format!("reading {}", a.input.display()))?;
            let format = format_for(&a.output, a.to);
            coflow_trace::write_trace(&w, &a.output, format)
                .with_context(|| format!("writing {}", a.output.display()))?;
            eprintln!("wrote {} coflows to {}", w.coflows.len(), a.output.display());
        }
        TraceCommand::Spread(a) => {
            let w = coflow_trace::read_trace(&a.input).with_context(|| format!("reading {}", a.input.display()))?;
            let w = coflow_sim::spread::spread_tasks(&w, a.per_rack, a.seed)?;
            let format = format_for(&a.output, a.to);
            coflow_trace::write_trace(&w, &a.output, format)
                .with_context(|| format!("writing {}", a.output.display()))?;
            eprintln!("wrote {} coflows on {} machines to {}", w.coflows.len(), w.machines, a.output.display());
        }
        TraceCommand::Gen(a) => {
            let (w, _) = a.synth.load(None)?;
            let format = format_for(&a.output, a.to);
            coflow_trace::write_trace(&w, &a.output, format)
                .with_context(|| format!("writing {}", a.output.display()))?;
            eprintln!("wrote {} coflows ({} flows) to {}", w.coflows.len(), w.flow_count(), a.output.display());
        }
    }
    Ok(())
}
