//! The `coflow` command.
//!
//! Each command has a module (`sim`, `sweep`, `trace`, `demo`, `live`, `certs`, `bench`,
//! `wan_bench`, `wan_order`, `testbed`) that parses its options and prints; only this file dispatches to them.
//! The options and printing several commands share live in modules that are no command
//! (`plan`, `table`, `wan`, `workload`, `model`, `policies`, `plot`, `output`), and a command's
//! module imports no other command's (a test in `tests/it/tidy.rs` checks it).

mod bench;
mod certs;
mod demo;
#[cfg(test)]
mod doc_commands;
mod live;
mod model;
mod output;
mod plan;
mod plot;
mod policies;
mod sim;
mod sweep;
mod table;
mod testbed;
mod trace;
mod units;
mod wan;
mod wan_bench;
mod wan_order;
mod workload;

use std::io::Write as _;

use clap::{Args, Parser, Subcommand};

/// Coflow scheduling: simulate policies on traces, run the live system (coordinator, agents,
/// status), measure it on loopback or on an emulated cluster, and inspect or make traces.
#[derive(Debug, Parser)]
#[command(name = "coflow", version, about)]
struct Cli {
    /// How logs are written to stderr: `text`, or `json` (one object per line, for log collectors;
    /// a command's own report and remarks, such as `sim`'s tables, stay text).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "COFLOW_LOG_FORMAT")]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

/// The format of the log lines on stderr.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    /// Human-readable lines, coloured on a terminal.
    Text,
    /// One JSON object per line.
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Replay a workload under scheduling policies and compare coflow completion times.
    Sim(SimCli),
    /// Inspect, convert and generate traces.
    #[command(subcommand)]
    Trace(trace::TraceCommand),
    /// Run a coordinator and agents in this process and replay a workload with real bytes,
    /// comparing measured CCTs with the simulator's.
    Demo(demo::DemoArgs),
    /// Run the coordinator (one per cluster).
    Coordinator(live::CoordinatorArgs),
    /// Run an agent (one per machine).
    Agent(live::AgentArgs),
    /// Show live coflows, their flows and current rates, and agents.
    Status(live::status::StatusArgs),
    /// Make the cluster CA and certificates for mutual TLS.
    #[command(subcommand)]
    Certs(certs::CertsCommand),
    /// Measure the coordinator's control-message throughput and achieved vs assigned rates.
    BenchLive(live::BenchLiveArgs),
    /// Measure simulator speed and policy decision time (against Varys's 17 ms).
    Bench(bench::BenchArgs),
    /// Time a siphon-mc Monte Carlo decision with N coflows present on a wide-area fabric.
    WanBench(wan_bench::BenchArgs),
    /// Compare siphon-mc with mrtf over worlds of chosen link skew and load, counting the
    /// decisions where the Monte Carlo order changed the allocation.
    WanOrder(wan_order::OrderArgs),
    /// An emulated cluster: hosts in network namespaces, links shaped by tc, the real processes.
    #[command(subcommand)]
    Testbed(testbed::TestbedCommand),
    /// Print a completion script for a shell (e.g. `coflow completions bash > /etc/bash_completion.d/coflow`).
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// `coflow sim`: one replay, or a sweep.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
struct SimCli {
    #[command(subcommand)]
    command: Option<SimCommand>,
    #[command(flatten)]
    args: sim::SimArgs,
}

/// What `coflow sim` does instead of one replay.
#[derive(Debug, Subcommand)]
enum SimCommand {
    /// Replay the workload's coflow mix with N coflows all present at once, for several N
    /// (Varys §7.7).
    // A sweep releases a window's coflows together without dependencies: it refuses `--stages`,
    // which its help does not list.
    #[command(long_about = sweep::LONG_ABOUT, mut_arg("stages", |a| a.hide(true)))]
    Sweep(Box<sweep::SweepArgs>),
}

/// Parses `args` (the program's name first). A value that starts as a negative number does
/// (`--port-rate -5MB/s`, `--timeout -1.5s`) is the value of the long option before it, as if
/// given with `=`: it reaches the option's own check, which names the option, rather than reading
/// as an unknown flag. (Clap takes a bare negative number as a value only where told to, and
/// `-5MB/s` never.)
fn parse_from<I, T>(args: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString>,
{
    let mut joined: Vec<std::ffi::OsString> = Vec::new();
    let mut options = true;
    for arg in args.into_iter().map(Into::into) {
        let text = arg.to_str().unwrap_or_default();
        let negative = text.strip_prefix('-').is_some_and(|v| v.starts_with(|c: char| c.is_ascii_digit() || c == '.'));
        let after_option = joined
            .last()
            .and_then(|o| o.to_str())
            .is_some_and(|o| o.starts_with("--") && o.len() > 2 && !o.contains('='));
        if options && negative && after_option {
            let option = joined.last_mut().expect("an option before");
            option.push("=");
            option.push(&arg);
            continue;
        }
        options &= text != "--";
        joined.push(arg);
    }
    <Cli as clap::Parser>::try_parse_from(&joined).map_err(|mut e| {
        say_env_source(&mut e, &joined);
        e
    })
}

/// A bad value of an option that `args` do not give came from its environment variable: the
/// error, which names the option, says so too.
fn say_env_source(e: &mut clap::Error, args: &[std::ffi::OsString]) {
    use clap::builder::StyledStr;
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if !matches!(e.kind(), ErrorKind::InvalidValue | ErrorKind::ValueValidation) {
        return;
    }
    let Some(ContextValue::String(arg)) = e.get(ContextKind::InvalidArg) else { return };
    let Some(long) = arg.split_whitespace().next().and_then(|a| a.strip_prefix("--")) else { return };
    let given = args.iter().filter_map(|a| a.to_str()).any(|a| {
        a.strip_prefix("--").is_some_and(|a| a == long || a.strip_prefix(long).is_some_and(|v| v.starts_with('=')))
    });
    if given {
        return;
    }
    // The subcommand run, then the program's own options, which every subcommand takes.
    let root = <Cli as clap::CommandFactory>::command();
    let path = subcommand_path(&root, args);
    let Some(var) = path.iter().rev().find_map(|cmd| {
        let env = cmd.get_arguments().filter(|a| a.get_long() == Some(long)).find_map(|a| a.get_env())?;
        std::env::var_os(env).is_some().then(|| env.to_string_lossy().into_owned())
    }) else {
        return;
    };
    let mut tips = match e.get(ContextKind::Suggested) {
        Some(ContextValue::StyledStrs(t)) => t.clone(),
        _ => Vec::new(),
    };
    tips.push(StyledStr::from(format!("the value comes from the environment variable {var}")));
    e.insert(ContextKind::Suggested, ContextValue::StyledStrs(tips));
}

/// The commands `args` run, from `root` to the subcommand: its names are the words that are not
/// options or an option's value (`coflow --log-format json coordinator` runs `coordinator`); the
/// first other word, a positional value, ends it.
fn subcommand_path<'a>(root: &'a clap::Command, args: &[std::ffi::OsString]) -> Vec<&'a clap::Command> {
    let mut path = vec![root];
    let mut words = args.iter().skip(1).map_while(|a| a.to_str());
    while let Some(word) = words.next() {
        if let Some(option) = word.strip_prefix('-') {
            // An option of this command or of one above it (the program's own) takes the next
            // word as its value, unless written `--name=value` or `-xVALUE`.
            let named = |a: &&clap::Arg| match option.strip_prefix('-') {
                Some(long) => a.get_long() == Some(long) || a.get_all_aliases().is_some_and(|all| all.contains(&long)),
                None => option.len() == 1 && a.get_short().is_some_and(|c| option.starts_with(c)),
            };
            let takes_value =
                path.iter().rev().find_map(|c| c.get_arguments().find(named)).is_some_and(|a| {
                    a.get_action().takes_values() && a.get_num_args().is_none_or(|n| n.min_values() > 0)
                });
            if takes_value {
                words.next();
            }
            continue;
        }
        match path.last().and_then(|c| c.find_subcommand(word)) {
            Some(sub) => path.push(sub),
            None => break,
        }
    }
    path
}

fn main() {
    let cli = parse_from(std::env::args_os()).unwrap_or_else(|e| exit_parsing(e));
    // Logs go to stderr, filtered by RUST_LOG; services log at info, everything else at warn.
    let default = match cli.command {
        Command::Coordinator(_) | Command::Agent(_) => "info",
        _ => "warn",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| default.into());
    // Colour only on a terminal: logs redirected to a file carry no escape codes (NO_COLOR also turns it off).
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr()) && std::env::var_os("NO_COLOR").is_none();
    // A log line that cannot be written (a full disk, a closed pipe) is dropped: it never panics,
    // and so never changes an answer.
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| output::Lossy(std::io::stderr()))
        .log_internal_errors(false);
    match cli.log_format {
        LogFormat::Text => logs.with_ansi(ansi).init(),
        LogFormat::Json => logs.json().init(),
    }
    let log_format = cli.log_format;
    let result = match cli.command {
        Command::Sim(SimCli { command: Some(SimCommand::Sweep(a)), .. }) => sweep::run(*a),
        Command::Sim(SimCli { command: None, args }) => sim::run(args),
        Command::Trace(cmd) => trace::run(cmd),
        Command::Bench(args) => bench::run(args),
        Command::WanBench(args) => wan_bench::bench(args),
        Command::WanOrder(args) => wan_order::run(args),
        Command::Demo(args) => demo::run(args),
        Command::Coordinator(args) => live::coordinator(args),
        Command::Agent(args) => live::agent(args),
        Command::Status(args) => live::status::run(args),
        Command::Certs(cmd) => certs::run(cmd),
        Command::BenchLive(args) => live::bench_live(args),
        Command::Testbed(cmd) => testbed::run(cmd),
        Command::Completions { shell } => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut cmd, "coflow", &mut script);
            // A closed pipe (`| head`) ends the writing quietly; a full disk fails the command.
            output::write(std::path::Path::new("-"), &script)
        }
    };
    if let Err(e) = result.and_then(|()| output::unwritten()) {
        // With JSON logs the error is one more JSON line, which a log collector reads as the
        // others (unless `RUST_LOG` turns errors off: then it stands in plain text).
        if log_format == LogFormat::Json && tracing::enabled!(tracing::Level::ERROR) {
            tracing::error!("{e:#}");
        } else {
            let _ = writeln!(std::io::stderr(), "error: {e:#}");
        }
        std::process::exit(1);
    }
}

/// Ends a run whose arguments asked for help or a version, or did not parse. Help and the version
/// are the command's output: written as any output is, so that one that cannot be written (a full
/// disk) fails with status 1 while a reader that stopped reading (`| head`) ends it quietly. A
/// parse error goes to standard error with clap's status 2.
fn exit_parsing(e: clap::Error) -> ! {
    use clap::error::ErrorKind;
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        // Styled as clap styles it on a terminal, plain into a file or a pipe.
        let styled = std::io::IsTerminal::is_terminal(&std::io::stdout()) && std::env::var_os("NO_COLOR").is_none();
        let text = if styled { e.render().ansi().to_string() } else { e.render().to_string() };
        if let Err(e) = output::write(std::path::Path::new("-"), text).and_then(|()| output::unwritten()) {
            let _ = writeln!(std::io::stderr(), "error: {e:#}");
            std::process::exit(1);
        }
        std::process::exit(0);
    }
    e.exit()
}

#[cfg(test)]
mod tests {
    /// The subcommand is found past the program's options and their values, and an option's
    /// value that spells a subcommand's name is not taken for one.
    #[test]
    fn the_subcommand_is_found_past_options_and_their_values() {
        let root = <super::Cli as clap::CommandFactory>::command();
        let names = |args: &[&str]| {
            let args: Vec<std::ffi::OsString> = args.iter().map(Into::into).collect();
            super::subcommand_path(&root, &args).iter().map(|c| c.get_name().to_string()).collect::<Vec<_>>()
        };
        assert_eq!(names(&["coflow", "--log-format", "json", "sim", "sweep"]), ["coflow", "sim", "sweep"]);
        assert_eq!(names(&["coflow", "--log-format=json", "coordinator", "--listen", "x"]), ["coflow", "coordinator"]);
        assert_eq!(names(&["coflow", "sim", "--trace", "sweep"]), ["coflow", "sim"]);
        assert_eq!(names(&["coflow", "sim", "--trace=t", "sweep"]), ["coflow", "sim", "sweep"]);
        assert_eq!(names(&["coflow", "trace", "stats", "file", "convert"]), ["coflow", "trace", "stats"]);
    }

    /// `coflow sim sweep --help` does not list `--stages`, which a sweep refuses, while `coflow
    /// sim --help` does.
    #[test]
    fn the_sweep_s_help_leaves_out_stages() {
        let mut root = <super::Cli as clap::CommandFactory>::command();
        let sim = root.find_subcommand_mut("sim").expect("sim");
        let lists = |cmd: &mut clap::Command| cmd.render_long_help().to_string().contains("--stages");
        assert!(lists(sim));
        assert!(!lists(sim.find_subcommand_mut("sweep").expect("sweep")));
    }

    /// Every option with a value reads `--opt -5MB/s` as `--opt=-5MB/s`: the same value, or the
    /// same kind of error (the option's own check), never an unknown flag.
    #[test]
    fn an_option_s_value_may_start_with_a_hyphen() {
        fn walk(cmd: &clap::Command, path: &mut Vec<String>, checked: &mut usize) {
            for arg in cmd.get_arguments() {
                let Some(long) = arg.get_long() else { continue };
                if !arg.get_action().takes_values() {
                    continue;
                }
                for value in ["-5", "-5MB/s", "-1.5s"] {
                    let spaced = path.iter().cloned().chain([format!("--{long}"), value.to_string()]);
                    let joined = path.iter().cloned().chain([format!("--{long}={value}")]);
                    let (spaced, joined) = (super::parse_from(spaced), super::parse_from(joined));
                    let what = format!("{} --{long} {value}", path.join(" "));
                    match (spaced, joined) {
                        (Ok(a), Ok(b)) => assert_eq!(format!("{a:?}"), format!("{b:?}"), "{what}"),
                        (Err(a), Err(b)) => assert_eq!(a.kind(), b.kind(), "{what}: {a}"),
                        (a, b) => panic!("{what}: {:?} against {:?}", a.map(|_| ()), b.map(|_| ())),
                    }
                    *checked += 1;
                }
            }
            for sub in cmd.get_subcommands() {
                path.push(sub.get_name().to_string());
                walk(sub, path, checked);
                path.pop();
            }
        }
        let mut checked = 0;
        walk(&<super::Cli as clap::CommandFactory>::command(), &mut vec!["coflow".to_string()], &mut checked);
        assert!(checked > 100, "{checked} options checked");
        // The option's own check names it.
        let e = super::parse_from(["coflow", "sim", "--machines", "-5"]).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::ValueValidation, "{e}");
        assert!(e.to_string().contains("--machines"), "{e}");
        // A flag where a value should be is still a missing value, and after `--` nothing joins.
        let e = super::parse_from(["coflow", "sim", "--policies", "--baseline", "varys"]).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::InvalidValue, "{e}");
        let spread = super::parse_from(["coflow", "trace", "spread", "--", "--in.txt", "-5.txt"]).unwrap();
        assert!(format!("{spread:?}").contains(r#"input: "--in.txt", output: "-5.txt""#), "{spread:?}");
    }

    /// What the deployment guide says: every flag of the services and of `coflow status` can be
    /// given as `COFLOW_` and its name in capitals.
    #[test]
    fn every_flag_of_the_services_and_status_has_its_environment_variable() {
        let cli = <super::Cli as clap::CommandFactory>::command();
        for name in ["coordinator", "agent", "status"] {
            let cmd = cli.find_subcommand(name).expect("the subcommand");
            for arg in cmd.get_arguments().filter(|a| a.get_long().is_some_and(|l| l != "help")) {
                let long = arg.get_long().expect("long");
                let want = format!("COFLOW_{}", long.to_uppercase().replace('-', "_"));
                let env = arg.get_env().map(|e| e.to_string_lossy().into_owned());
                assert_eq!(env.as_deref(), Some(want.as_str()), "coflow {name} --{long}");
            }
        }
    }
}
