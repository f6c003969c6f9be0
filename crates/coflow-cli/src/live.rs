//! The live services as subcommands: `coflow coordinator`, `coflow agent`, `coflow status` (its
//! own submodule, `status`), and `coflow bench-live` (the control path, control throughput,
//! decisions and rate accuracy, in process over loopback).
//! Each service command reads its TOML config, applies flag overrides, validates and runs the
//! library's `run(config, listener, shutdown)` until SIGTERM or SIGINT.

pub(crate) mod status;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Args;
use coflow_agent::{AgentConfig, AgentListeners};
use coflow_client::{ClusterToken, TlsFiles};
use coflow_coordinator::CoordinatorConfig;
use tokio::net::TcpListener;

/// Where the cluster token comes from: `--token-file`, else `$COFLOW_TOKEN`. Never logged.
#[derive(Debug, Args)]
pub(crate) struct TokenArgs {
    /// A file holding the cluster token (else the COFLOW_TOKEN environment variable).
    #[arg(long, env = "COFLOW_TOKEN_FILE")]
    token_file: Option<PathBuf>,
}

impl TokenArgs {
    /// The token file, if one is named.
    pub(crate) fn file(&self) -> Option<&std::path::Path> {
        self.token_file.as_deref()
    }

    /// Warns that a token file named is not read: with TLS files too, the certificates
    /// authenticate.
    pub(crate) fn warn_unread(&self) {
        if let Some(p) = self.file() {
            tracing::warn!(
                token_file = %p.display(),
                "the token file is not read: with TLS, members authenticate by their certificates"
            );
        }
    }

    pub(crate) fn token(&self) -> Result<ClusterToken> {
        if let Some(p) = &self.token_file {
            return Ok(ClusterToken::from_file(p)?);
        }
        match std::env::var("COFLOW_TOKEN") {
            Ok(t) => ClusterToken::new(&t).context("COFLOW_TOKEN"),
            Err(_) => bail!(
                "no cluster token: pass --token-file or set COFLOW_TOKEN (a TLS cluster takes --tls-ca, --tls-cert \
                 and --tls-key instead)"
            ),
        }
    }
}

/// Mutual TLS files; with them no token is needed. Each overrides the TOML field of its name.
#[derive(Debug, Args)]
pub(crate) struct TlsArgs {
    /// The cluster CA's certificate (from `coflow certs init`).
    #[arg(long, env = "COFLOW_TLS_CA")]
    pub(crate) tls_ca: Option<PathBuf>,
    /// This member's certificate (from `coflow certs issue`).
    #[arg(long, env = "COFLOW_TLS_CERT")]
    pub(crate) tls_cert: Option<PathBuf>,
    /// This member's private key.
    #[arg(long, env = "COFLOW_TLS_KEY")]
    pub(crate) tls_key: Option<PathBuf>,
}

impl TlsArgs {
    /// Puts the flags given over the config's fields.
    fn apply(self, ca: &mut Option<PathBuf>, cert: &mut Option<PathBuf>, key: &mut Option<PathBuf>) {
        for (flag, field) in [(self.tls_ca, ca), (self.tls_cert, cert), (self.tls_key, key)] {
            if flag.is_some() {
                *field = flag;
            }
        }
    }
}

/// TLS if configured (the token is then not read, which a token file named too is warned of),
/// else the token.
fn security(files: Option<TlsFiles>, token: &TokenArgs) -> Result<coflow_proto::Security> {
    match files {
        Some(f) => {
            token.warn_unread();
            Ok(coflow_proto::TlsContext::load(&f)?.into())
        }
        None => Ok(token.token()?.into()),
    }
}

/// The settings of the TOML file at `path` (the defaults without one), and the fields the file
/// names, to tell a default from a setting of the same value.
fn read_toml<T: serde::de::DeserializeOwned + Default>(path: Option<&Path>) -> Result<(T, toml::Table)> {
    match path {
        None => Ok((T::default(), toml::Table::new())),
        Some(p) => {
            let text = coflow_proto::files::read_small_text(p, coflow_proto::files::SMALL_FILE_MAX)
                .with_context(|| format!("reading {}", p.display()))?;
            let parse = || format!("parsing {}", p.display());
            let table: toml::Table = toml::from_str(&text).with_context(parse)?;
            let settings = toml::from_str(&text).map_err(|e| match twice_set(&e, &text) {
                Some(said) => anyhow::anyhow!("parsing {}: {said}", p.display()),
                None => anyhow::Error::new(e).context(parse()),
            })?;
            Ok((settings, table))
        }
    }
}

/// For a field set twice under two spellings (`agent_timeout_ms` and its alias
/// `agent_timeout`), which the parser reports at the file's first line: the lines and keys that
/// set it.
fn twice_set(e: &toml::de::Error, text: &str) -> Option<String> {
    let field = e.message().strip_prefix("duplicate field `")?.strip_suffix('`')?;
    let short = ["_ms", "_bytes", "_bps"].iter().find_map(|u| field.strip_suffix(u)).unwrap_or(field);
    let sets: Vec<String> = text
        .lines()
        .enumerate()
        .filter_map(|(i, line)| {
            let key = line.split_once('=')?.0.trim().trim_matches('"');
            (key == field || key == short).then(|| format!("line {} ({key})", i + 1))
        })
        .collect();
    (sets.len() > 1).then(|| format!("{} set {field} twice: keep one", sets.join(" and ")))
}

pub(crate) fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread().enable_all().build().context("tokio runtime")
}

/// Resolves on SIGTERM (what systemd and Kubernetes send to stop a service) or SIGINT (Ctrl-C),
/// logging which; the service then stops cleanly.
async fn stop_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int), Ok(mut hup)) =
        (signal(SignalKind::terminate()), signal(SignalKind::interrupt()), signal(SignalKind::hangup()))
    else {
        // Without signal handlers the service runs until killed.
        return std::future::pending().await;
    };
    let name = loop {
        tokio::select! {
            _ = term.recv() => break "SIGTERM",
            _ = int.recv() => break "SIGINT",
            // A closed terminal or an operator's reload sends SIGHUP, whose default would end the
            // process at once, without a word and without deregistering: the service goes on.
            _ = hup.recv() => tracing::warn!(
                "SIGHUP ignored: the configuration and TLS files are read at start; restart the service to \
                 load new ones (SIGTERM stops it cleanly)"
            ),
        }
    };
    tracing::info!(signal = name, "stopping");
}

/// The most bytes a coordinator's topology file may hold.
const MAX_TOPOLOGY_BYTES: u64 = 64 << 20;

/// The topology `spec` names: `default`, or a regular file of at most [`MAX_TOPOLOGY_BYTES`]
/// (a FIFO or a device is refused at once rather than waited on, as for every file a service
/// reads at start).
fn service_topology(spec: &str) -> anyhow::Result<coflow_sim::topology::Topology> {
    use coflow_sim::topology::Topology;
    if spec.is_empty() {
        bail!("topology is empty: name a topology file, or `default`");
    }
    if spec == "default" {
        return Ok(Topology::named(spec)?);
    }
    let path = Path::new(spec);
    let text = coflow_proto::files::read_small_text(path, MAX_TOPOLOGY_BYTES)
        .with_context(|| format!("reading topology {}", path.display()))?;
    Topology::from_json(&text, path.parent()).with_context(|| format!("topology {}", path.display()))
}

/// The topology `spec` that the TOML file at `config` names: `default`, an absolute path as it
/// is, and a relative path relative to the file's directory (as the file's author sees it,
/// wherever the coordinator is started from). `--topology` is relative to the working directory.
fn topology_in(config: &Path, spec: &str) -> Result<String> {
    if spec == "default" {
        return Ok(spec.to_string());
    }
    beside(config, "topology", Path::new(spec))?
        .into_os_string()
        .into_string()
        .map_err(|p| anyhow::anyhow!("topology {spec:?} of {}: {} is not UTF-8", config.display(), p.display()))
}

/// A path the TOML file at `config` names in `field`: as it is if absolute, else relative to the
/// file's directory. An empty path names nothing, and is refused rather than taken as the file's
/// directory.
fn beside(config: &Path, field: &str, path: &Path) -> Result<PathBuf> {
    if path.as_os_str().is_empty() {
        bail!("{}: `{field}` is empty: name a path, or leave the field out", config.display());
    }
    Ok(if path.is_absolute() { path.to_path_buf() } else { config.parent().unwrap_or(Path::new("")).join(path) })
}

/// The TLS files the TOML file at `config` names, each relative to the file's directory (flags
/// are relative to the working directory).
fn tls_files_in(config: Option<&Path>, files: [(&str, &mut Option<PathBuf>); 3]) -> Result<()> {
    for (field, file) in files {
        if let (Some(config), Some(path)) = (config, file.as_mut()) {
            *path = beside(config, field, path)?;
        }
    }
    Ok(())
}

/// Options of `coflow coordinator`; flags override the TOML file.
#[derive(Debug, Args)]
pub(crate) struct CoordinatorArgs {
    /// TOML config file (fields of `CoordinatorConfig`).
    #[arg(long, env = "COFLOW_CONFIG")]
    config: Option<PathBuf>,
    /// gRPC listen address.
    #[arg(long, env = "COFLOW_LISTEN")]
    listen: Option<String>,
    /// Prometheus /metrics listen address (plain HTTP, also /healthz, /readyz and the live web
    /// page).
    #[arg(long, env = "COFLOW_METRICS_LISTEN")]
    metrics_listen: Option<String>,
    /// Serve no live web page (`/`, `/api/status`) on the metrics listener: it shows coflow
    /// names and agents' addresses to whoever reaches the listener (`status_page = false`).
    #[arg(long, env = "COFLOW_NO_STATUS_PAGE")]
    no_status_page: bool,
    /// Scheduling policy.
    #[arg(long, env = "COFLOW_POLICY")]
    policy: Option<String>,
    /// Bypass threshold, e.g. `64KiB` or a number of bytes (0: off).
    #[arg(long, value_name = "SIZE", env = "COFLOW_BYPASS_THRESHOLD_BYTES", value_parser = crate::units::bytes)]
    bypass_threshold_bytes: Option<u64>,
    /// Rate push batching window, e.g. `5ms` or a number of milliseconds.
    #[arg(long, value_name = "MS", env = "COFLOW_PUSH_WINDOW_MS", value_parser = crate::units::millis)]
    push_window_ms: Option<u64>,
    /// A wide-area topology to schedule (a file in `coflow sim --wan`'s format, or `default`):
    /// the links between datacenters instead of a big switch; agents name their datacenter.
    #[arg(long, env = "COFLOW_TOPOLOGY")]
    topology: Option<String>,
    /// On a wide-area topology, split gets over two-hop detours through relay agents when the
    /// direct link is the bottleneck, and reroute the flows of a link that goes down.
    #[arg(long, env = "COFLOW_MULTIPATH")]
    multipath: bool,
    #[command(flatten)]
    token: TokenArgs,
    #[command(flatten)]
    tls: TlsArgs,
}

pub(crate) fn coordinator(a: CoordinatorArgs) -> Result<()> {
    let (mut cfg, _): (CoordinatorConfig, _) = read_toml(a.config.as_deref())?;
    tls_files_in(
        a.config.as_deref(),
        [("tls_ca", &mut cfg.tls_ca), ("tls_cert", &mut cfg.tls_cert), ("tls_key", &mut cfg.tls_key)],
    )?;
    if let (Some(file), Some(spec)) = (&a.config, &cfg.topology) {
        cfg.topology = Some(topology_in(file, spec)?);
    }
    if let Some(v) = a.listen {
        cfg.listen = v;
    }
    if let Some(v) = a.metrics_listen {
        cfg.metrics_listen = Some(v);
    }
    if let Some(v) = a.policy {
        cfg.policy = v;
    }
    if let Some(v) = a.bypass_threshold_bytes {
        cfg.bypass_threshold_bytes = v;
    }
    if let Some(v) = a.push_window_ms {
        cfg.push_window_ms = v;
    }
    if let Some(v) = a.topology {
        cfg.topology = Some(v);
    }
    cfg.multipath |= a.multipath;
    cfg.status_page &= !a.no_status_page;
    if let Some(spec) = &cfg.topology {
        let topology = service_topology(spec)?;
        // The built-in topology's redraw interval is the simulator's default, not a choice.
        let ignored = if spec == "default" { Vec::new() } else { topology.simulation_only() };
        if !ignored.is_empty() {
            tracing::warn!(
                topology = %spec,
                "fields of the topology that apply to the simulator only, ignored by the coordinator: {} (it \
                 reads the datacenters and links, measures each link, and places each agent in the datacenter \
                 it names)",
                ignored.join(", ")
            );
        }
        cfg.wide_area = Some(topology.wide_area());
    }
    a.tls.apply(&mut cfg.tls_ca, &mut cfg.tls_cert, &mut cfg.tls_key);
    cfg.validate()?;
    let token = security(cfg.tls_files()?, &a.token)?;
    runtime()?.block_on(async move {
        let listener =
            TcpListener::bind(&cfg.listen).await.with_context(|| format!("binding listen {}", cfg.listen))?;
        let metrics = match &cfg.metrics_listen {
            Some(m) => Some(TcpListener::bind(m).await.with_context(|| format!("binding metrics_listen {m}"))?),
            None => None,
        };
        coflow_coordinator::run(cfg, token, listener, metrics, stop_signal()).await?;
        Ok(())
    })
}

/// Options of `coflow agent`; flags override the TOML file.
#[derive(Debug, Args)]
pub(crate) struct AgentArgs {
    /// TOML config file (fields of `AgentConfig`).
    #[arg(long, env = "COFLOW_CONFIG")]
    config: Option<PathBuf>,
    /// This machine's id (default: the certificate's, else kept in the data directory, else
    /// assigned by the coordinator).
    #[arg(long, env = "COFLOW_MACHINE")]
    machine: Option<u32>,
    /// The coordinator's URL.
    #[arg(long, env = "COFLOW_COORDINATOR")]
    coordinator: Option<String>,
    /// The datacenter this machine lives in, as the coordinator's wide-area topology names it.
    #[arg(long, env = "COFLOW_DATACENTER")]
    datacenter: Option<String>,
    /// gRPC listen address for local clients.
    #[arg(long, env = "COFLOW_LISTEN")]
    listen: Option<String>,
    /// Data-plane listen address.
    #[arg(long, env = "COFLOW_DATA_LISTEN")]
    data_listen: Option<String>,
    /// Data-plane address other agents use.
    #[arg(long, env = "COFLOW_DATA_ADVERTISE")]
    data_advertise: Option<String>,
    /// Prometheus /metrics listen address.
    #[arg(long, env = "COFLOW_METRICS_LISTEN")]
    metrics_listen: Option<String>,
    /// Directory file-segment puts are confined to (in the TOML file, relative to the file's
    /// directory).
    #[arg(long, env = "COFLOW_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Port capacity, e.g. `1Gbps`.
    #[arg(long, env = "COFLOW_PORT_RATE")]
    port_rate: Option<String>,
    /// Register the port capacity but do not enforce it (the network does).
    #[arg(long, env = "COFLOW_UNCAPPED")]
    uncapped: bool,
    #[command(flatten)]
    token: TokenArgs,
    #[command(flatten)]
    tls: TlsArgs,
}

pub(crate) fn agent(a: AgentArgs) -> Result<()> {
    let (mut cfg, named): (AgentConfig, _) = read_toml(a.config.as_deref())?;
    tls_files_in(
        a.config.as_deref(),
        [("tls_ca", &mut cfg.tls_ca), ("tls_cert", &mut cfg.tls_cert), ("tls_key", &mut cfg.tls_key)],
    )?;
    if let Some(file) = a.config.as_deref().filter(|_| named.contains_key("data_dir")) {
        cfg.data_dir = beside(file, "data_dir", &cfg.data_dir)?;
    }
    if let Some(v) = a.machine {
        cfg.machine = Some(v);
    }
    if let Some(v) = a.coordinator {
        cfg.coordinator = v;
    }
    if let Some(v) = a.datacenter {
        cfg.datacenter = Some(v);
    }
    if let Some(v) = a.listen {
        cfg.listen = v;
    }
    if let Some(v) = a.data_listen {
        cfg.data_listen = v;
    }
    if let Some(v) = a.data_advertise {
        cfg.data_advertise = Some(v);
    }
    if let Some(v) = a.metrics_listen {
        cfg.metrics_listen = Some(v);
    }
    if let Some(v) = a.data_dir {
        cfg.data_dir = v;
    }
    if let Some(v) = a.port_rate {
        let r: coflow_core::Rate = v.parse().with_context(|| format!("--port-rate {v:?}"))?;
        cfg.port_rate_bps = r.bytes_per_sec();
    }
    if a.uncapped {
        cfg.cap_port = false;
    }
    a.tls.apply(&mut cfg.tls_ca, &mut cfg.tls_cert, &mut cfg.tls_key);
    cfg.validate()?;
    if std::fs::metadata(&cfg.data_dir).is_ok_and(|m| !m.is_dir()) {
        bail!("data_dir {}: not a directory", cfg.data_dir.display());
    }
    std::fs::create_dir_all(&cfg.data_dir).with_context(|| format!("creating data_dir {}", cfg.data_dir.display()))?;
    let token = security(cfg.tls_files()?, &a.token)?;
    runtime()?.block_on(async move {
        let grpc = TcpListener::bind(&cfg.listen).await.with_context(|| format!("binding listen {}", cfg.listen))?;
        let data = TcpListener::bind(&cfg.data_listen)
            .await
            .with_context(|| format!("binding data_listen {}", cfg.data_listen))?;
        let metrics = match &cfg.metrics_listen {
            Some(m) => Some(TcpListener::bind(m).await.with_context(|| format!("binding metrics_listen {m}"))?),
            None => None,
        };
        coflow_agent::run(cfg, token, AgentListeners { grpc, data, metrics }, stop_signal()).await?;
        Ok(())
    })
}

/// Options of `coflow bench-live`.
#[derive(Debug, Args)]
pub(crate) struct BenchLiveArgs {
    /// How long the control-throughput load runs, e.g. `3s` or a number of seconds.
    #[arg(long, default_value_t = 3.0, value_parser = crate::units::seconds)]
    seconds: f64,
    /// Phantom agents driving the load (in pairs), 2 to 128.
    #[arg(long, default_value_t = 8)]
    phantoms: u32,
    /// Flows each phantom pair keeps in flight, 1 to 256.
    #[arg(long, default_value_t = 8)]
    window: usize,
    /// Control messages a second offered while the control path is measured under load, 1 to
    /// 10,000,000.
    #[arg(long, default_value_t = 100_000.0)]
    load_rate: f64,
    /// Gets measured at each level of coflows present (1, 100 and 1,000), 1 to 100,000.
    #[arg(long, default_value_t = 1000)]
    gets: usize,
    /// Over mutual TLS (certificates made for the run) rather than the cluster token.
    #[arg(long)]
    tls: bool,
    /// Write the report as JSON to this file (`-`: standard output).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

/// Measures the live system in this process over loopback (`coflow_testkit::bench`) and prints
/// what it measured.
pub(crate) fn bench_live(a: BenchLiveArgs) -> Result<()> {
    if !(a.seconds > 0.0 && a.seconds <= 600.0) {
        bail!("--seconds must be in (0, 600]");
    }
    use coflow_testkit::bench::{LOAD_RATE, MAX_GETS, MAX_PHANTOMS, MAX_WINDOW};
    if !(2..=MAX_PHANTOMS).contains(&a.phantoms) {
        bail!("--phantoms must be in [2, {MAX_PHANTOMS}]");
    }
    if !(1..=MAX_WINDOW).contains(&a.window) {
        bail!("--window must be in [1, {MAX_WINDOW}]");
    }
    if !(1..=MAX_GETS).contains(&a.gets) {
        bail!("--gets must be in [1, {MAX_GETS}]");
    }
    if !LOAD_RATE.contains(&a.load_rate) {
        bail!("--load-rate must be in [{}, {}] messages a second", LOAD_RATE.start(), LOAD_RATE.end());
    }
    let cfg = coflow_testkit::bench::LiveBench {
        load: Duration::from_secs_f64(a.seconds),
        phantoms: a.phantoms,
        window: a.window,
        load_rate: a.load_rate,
        gets: a.gets,
        tls: a.tls,
        ..Default::default()
    };
    crate::output::prepare(&[("--json", a.json.as_deref())], &[])?;
    let report = coflow_testkit::bench::run(&cfg)?;
    crate::output::human(&report.table(), &[a.json.as_deref()]);
    if let Some(p) = &a.json {
        crate::output::json(p, &report)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// A topology the TOML file names is relative to the file's directory; `default` and an
    /// absolute path are as they are.
    #[test]
    fn a_topology_in_the_config_file_is_relative_to_the_file() {
        let at = |config: &str, spec: &str| super::topology_in(Path::new(config), spec).unwrap();
        assert_eq!(at("/etc/coflow/coordinator.toml", "wan.json"), "/etc/coflow/wan.json");
        assert_eq!(at("/etc/coflow/coordinator.toml", "../wan/a.json"), "/etc/coflow/../wan/a.json");
        assert_eq!(at("conf/coordinator.toml", "wan.json"), "conf/wan.json");
        assert_eq!(at("coordinator.toml", "wan.json"), "wan.json");
        assert_eq!(at("/etc/coflow/coordinator.toml", "/srv/wan.json"), "/srv/wan.json");
        assert_eq!(at("/etc/coflow/coordinator.toml", "default"), "default");
    }

    /// The TLS files a TOML file names are relative to the file's directory, absolute ones as
    /// they are; without a file, paths are left to the working directory.
    #[test]
    fn tls_files_in_the_config_file_are_relative_to_the_file() {
        use std::path::PathBuf;
        let (mut ca, mut cert, mut key) =
            (Some(PathBuf::from("tls/ca.crt")), Some(PathBuf::from("/srv/agent.crt")), None);
        let config = Path::new("/etc/coflow/agent.toml");
        super::tls_files_in(Some(config), [("ca", &mut ca), ("cert", &mut cert), ("key", &mut key)]).unwrap();
        assert_eq!((ca, cert, key), (Some("/etc/coflow/tls/ca.crt".into()), Some("/srv/agent.crt".into()), None));
        let mut ca = Some(PathBuf::from("ca.crt"));
        super::tls_files_in(None, [("ca", &mut ca), ("cert", &mut None), ("key", &mut None)]).unwrap();
        assert_eq!(ca, Some("ca.crt".into()));
    }
}
