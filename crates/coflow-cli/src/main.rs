//! The `coflow` command.

mod bench;
mod demo;
mod plot;
mod sim;
mod sweep;
mod trace;
mod workload;

use clap::{Parser, Subcommand};

/// Coflow scheduling: simulate policies on traces, and inspect or make traces.
#[derive(Debug, Parser)]
#[command(name = "coflow", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Replay a workload under scheduling policies and compare coflow completion times.
    Sim(sim::SimArgs),
    /// Inspect, convert and generate traces.
    #[command(subcommand)]
    Trace(trace::TraceCommand),
    /// Run a coordinator and agents in this process and replay a workload with real bytes,
    /// comparing measured CCTs with the simulator's.
    Demo(demo::DemoArgs),
    /// Measure simulator speed and policy decision time (against Varys's 17 ms).
    Bench(bench::BenchArgs),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Sim(args) => sim::run(args),
        Command::Trace(cmd) => trace::run(cmd),
        Command::Bench(args) => bench::run(args),
        Command::Demo(args) => demo::run(args),
    };
    if let Err(e) = result {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}
