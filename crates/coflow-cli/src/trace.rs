//! `coflow trace`: statistics, format conversion and synthetic generation.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use coflow_trace::TraceFormat;

use crate::output::count;
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
    /// The output file (`-`: standard output).
    output: PathBuf,
    /// Machines per rack (20 makes the Facebook trace's 150 racks its 3,000 machines).
    #[arg(long, default_value_t = 20)]
    per_rack: u32,
    /// Seed of the placement of tasks on their rack's machines.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The output format; by default from the output's extension (.jsonl or .json: JSON Lines, else benchmark).
    #[arg(long, value_enum)]
    to: Option<Format>,
}

#[derive(Debug, Args)]
pub(crate) struct StatsArgs {
    /// The trace; without one, the embedded synthetic workload.
    path: Option<PathBuf>,
    /// The trace, named as in every other command (the same as the positional path).
    #[arg(long, alias = "workload", value_name = "FILE", conflicts_with = "path")]
    trace: Option<PathBuf>,
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
    /// The output file (`-`: standard output).
    output: PathBuf,
    /// The output format; by default from the output's extension (.jsonl or .json: JSON Lines, else benchmark).
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
    /// The output format; by default from the extension (.jsonl or .json: JSON Lines, else benchmark).
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

/// The format to write `path` in: `explicit` if given, else the one its extension implies
/// (coflow-benchmark for none). A format its extension contradicts is refused, since other
/// readers go by the extension (standard output, `-`, has none).
fn format_for(path: &std::path::Path, explicit: Option<Format>) -> Result<TraceFormat> {
    let implied = TraceFormat::from_extension(path);
    let format = match explicit {
        Some(Format::Benchmark) => TraceFormat::Benchmark,
        Some(Format::Jsonl) => TraceFormat::Jsonl,
        None => implied.unwrap_or(TraceFormat::Benchmark),
    };
    if let Some(implied) = implied
        && implied != format
    {
        anyhow::bail!(
            "--to {}: the extension of {} says {}; give the file the extension of its format",
            format.name(),
            path.display(),
            implied.name()
        );
    }
    Ok(format)
}

/// Writes `w` in `format` to `path`, or to standard output for `-`, and says so on standard error
/// (for standard output, once all of it went out).
fn write_out(w: &coflow_core::Workload, path: &std::path::Path, format: TraceFormat, what: &str) -> Result<()> {
    if crate::output::is_stdout(path) {
        let mut buf = Vec::new();
        format.write(w, &mut buf)?;
        // A reader that went away (`| head`) took part of it: nothing to say it all went out.
        if crate::output::shown(&buf).context("writing standard output")? {
            crate::output::remark!("wrote {what} to standard output");
        }
    } else {
        // Rendered whole before the file is touched, so that a workload the format cannot hold
        // leaves no file behind.
        let mut buf = Vec::new();
        format.write(w, &mut buf).with_context(|| format!("writing {}", path.display()))?;
        crate::output::write(path, &buf)?;
        crate::output::remark!("wrote {what} to {}", path.display());
    }
    Ok(())
}

pub(crate) fn run(cmd: TraceCommand) -> Result<()> {
    match cmd {
        TraceCommand::Stats(a) => {
            let input = a.path.as_deref().or(a.trace.as_deref());
            crate::output::prepare(&[("--json", a.json.as_deref())], &[("--trace", input)])?;
            let (w, _) = a.synth.load_unseeded(input)?;
            let stats = coflow_trace::stats(&w);
            match &a.json {
                Some(p) => crate::output::json(p, &stats)?,
                None => crate::output::human(&stats.to_string(), &[]),
            }
        }
        TraceCommand::Convert(a) => {
            let format = format_for(&a.output, a.to)?;
            crate::output::prepare(&[("the output", Some(&a.output))], &[("the input", Some(&a.input))])?;
            let w = coflow_trace::read_trace(&a.input).with_context(|| format!("reading {}", a.input.display()))?;
            write_out(&w, &a.output, format, &count(w.coflows.len(), "coflow", "coflows"))?;
        }
        TraceCommand::Spread(a) => {
            let format = format_for(&a.output, a.to)?;
            crate::output::prepare(&[("the output", Some(&a.output))], &[("the input", Some(&a.input))])?;
            let w = coflow_trace::read_trace(&a.input).with_context(|| format!("reading {}", a.input.display()))?;
            let w = coflow_sim::spread::spread_tasks(&w, a.per_rack, a.seed)?;
            write_out(
                &w,
                &a.output,
                format,
                &format!(
                    "{} on {}",
                    count(w.coflows.len(), "coflow", "coflows"),
                    count(w.machines as usize, "machine", "machines")
                ),
            )?;
        }
        TraceCommand::Gen(a) => {
            let format = format_for(&a.output, a.to)?;
            crate::output::prepare(&[("the output", Some(&a.output))], &[])?;
            let (w, _) = a.synth.load(None)?;
            write_out(
                &w,
                &a.output,
                format,
                &format!(
                    "{} ({})",
                    count(w.coflows.len(), "coflow", "coflows"),
                    count(w.flow_count(), "flow", "flows")
                ),
            )?;
        }
    }
    Ok(())
}
