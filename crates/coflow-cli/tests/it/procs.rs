//! Clusters of real `coflow` processes on loopback, for the tests that need the built binary: a
//! coordinator and agents over mutual TLS (the certificates a loopback cluster needs) or in
//! token mode, each process killed when dropped, so that a failing test leaves nothing running.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use coflow_client::{Client, ClientConfig, ClientError, ClusterToken, CoflowOptions};

use crate::{coflow, tmp};

/// The cluster token of token-mode clusters.
pub(crate) const TOKEN: &str = "a-token-for-real-process-tests";

/// A process, killed when dropped (a stopped one too).
pub(crate) struct Proc(pub(crate) Child);

impl Proc {
    /// Sends `signal` (`STOP`, `CONT`, `KILL`) to the process.
    pub(crate) fn signal(&self, signal: &str) {
        let ok = Command::new("kill").args(["-s", signal, &self.0.id().to_string()]).status().unwrap().success();
        assert!(ok, "kill -s {signal} {}", self.0.id());
    }

    /// The process's peak resident memory, bytes (`VmHWM`).
    pub(crate) fn peak_rss(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.0.id())).unwrap();
        let line = status.lines().find(|l| l.starts_with("VmHWM:")).expect("VmHWM");
        line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A port free on loopback now (the process that binds it comes a moment later).
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Waits (at most 30 s) until `p` listens on `port`: false if it exited first, as a process
/// does when another took one of its ports between [`free_port`] and its bind.
fn listens(p: &mut Proc, port: u16) -> bool {
    let started = Instant::now();
    loop {
        if p.0.try_wait().unwrap().is_some() {
            return false;
        }
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return true;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "nothing listens on port {port} after 30 s");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `start` (which picks free ports, starts a process on them and gives it once it listens)
/// until it gives something, at most five times: a process that exits at start lost a port.
fn on_free_ports<T>(what: &str, mut start: impl FnMut() -> Option<T>) -> T {
    for _ in 0..5 {
        if let Some(started) = start() {
            return started;
        }
    }
    panic!("{what} exited at start five times, each on ports free a moment before");
}

/// What to start.
pub(crate) struct Spec {
    /// How many agents (machines 0 to N - 1).
    pub(crate) agents: u32,
    /// Mutual TLS (else token mode).
    pub(crate) tls: bool,
    /// The coordinator's TOML file.
    pub(crate) coordinator_toml: String,
    /// Each agent's TOML file.
    pub(crate) agent_toml: String,
    /// Where every process's log goes (`/dev/full`, a file, nowhere).
    pub(crate) log: fn() -> Stdio,
    /// `RUST_LOG` of every process, if set.
    pub(crate) rust_log: Option<&'static str>,
    /// More environment of the coordinator's process (a faked clock).
    pub(crate) coordinator_env: Vec<(&'static str, String)>,
}

impl Spec {
    /// `agents` agents over TLS with default configs, logs discarded.
    pub(crate) fn new(agents: u32) -> Spec {
        Spec {
            agents,
            tls: true,
            coordinator_toml: String::new(),
            agent_toml: String::new(),
            log: Stdio::null,
            rust_log: None,
            coordinator_env: Vec::new(),
        }
    }
}

/// How the cluster's processes are started: where, with what security and what logs.
struct Launch {
    dir: PathBuf,
    tls: bool,
    log: fn() -> Stdio,
    rust_log: Option<&'static str>,
}

impl Launch {
    /// The TLS flags of the member whose certificate is `stem`, none in token mode.
    fn tls_args(&self, stem: &str) -> Vec<String> {
        if !self.tls {
            return Vec::new();
        }
        let certs = self.dir.join("certs");
        let f = |name: String| certs.join(name).display().to_string();
        ["--tls-ca".into(), f("ca.crt".into()), "--tls-cert".into(), f(format!("{stem}.crt"))]
            .into_iter()
            .chain(["--tls-key".into(), f(format!("{stem}.key"))])
            .collect()
    }

    /// Starts `coflow ARGS` with the cluster's log, token (in token mode) and `RUST_LOG`.
    fn command(&self, args: Vec<String>) -> Proc {
        self.command_with(args, &[])
    }

    /// [`Launch::command`] with more environment.
    fn command_with(&self, args: Vec<String>, env: &[(&str, String)]) -> Proc {
        let mut c = coflow();
        c.envs(env.iter().map(|(k, v)| (k, v)));
        c.args(args).stdout(Stdio::null()).stderr((self.log)());
        if self.tls {
            c.env_remove("COFLOW_TOKEN");
        } else {
            c.env("COFLOW_TOKEN", TOKEN);
        }
        match self.rust_log {
            Some(l) => c.env("RUST_LOG", l),
            None => c.env_remove("RUST_LOG"),
        };
        Proc(c.spawn().unwrap())
    }
}

/// A running cluster of processes.
pub(crate) struct Procs {
    /// Its directory: certificates, configs, data directories.
    pub(crate) dir: PathBuf,
    pub(crate) coordinator: Proc,
    pub(crate) agents: Vec<Proc>,
    /// The coordinator's gRPC URL.
    pub(crate) coordinator_url: String,
    /// The coordinator's `/metrics` address.
    pub(crate) metrics: SocketAddr,
    agent_urls: Vec<String>,
    launch: Launch,
    /// The coordinator's command line and environment, to start it again.
    coordinator_args: Vec<String>,
    coordinator_env: Vec<(&'static str, String)>,
}

impl Procs {
    /// Starts the coordinator and the agents (named `name` in the test's temporary directory);
    /// [`Procs::ready`] waits until they serve.
    pub(crate) fn start(name: &str, spec: Spec) -> Procs {
        let dir = tmp(name);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        if spec.tls {
            coflow_testkit::make_certs(&dir.join("certs"), spec.agents).unwrap();
        }
        let scheme = if spec.tls { "https" } else { "http" };
        std::fs::write(dir.join("coordinator.toml"), &spec.coordinator_toml).unwrap();
        std::fs::write(dir.join("agent.toml"), &spec.agent_toml).unwrap();
        let launch = Launch { dir: dir.clone(), tls: spec.tls, log: spec.log, rust_log: spec.rust_log };
        let (coordinator, args, cport, mport) = on_free_ports("the coordinator", || {
            let (cport, mport) = (free_port(), free_port());
            let mut args: Vec<String> = vec!["coordinator".into(), "--listen".into(), format!("127.0.0.1:{cport}")];
            args.extend(["--metrics-listen".into(), format!("127.0.0.1:{mport}"), "--config".into()]);
            args.push(dir.join("coordinator.toml").display().to_string());
            args.extend(launch.tls_args("coordinator"));
            let mut p = launch.command_with(args.clone(), &spec.coordinator_env);
            listens(&mut p, cport).then_some((p, args, cport, mport))
        });
        let mut procs = Procs {
            coordinator_args: args,
            coordinator_env: spec.coordinator_env,
            coordinator_url: format!("{scheme}://127.0.0.1:{cport}"),
            metrics: format!("127.0.0.1:{mport}").parse().unwrap(),
            dir,
            coordinator,
            agents: Vec::new(),
            agent_urls: Vec::new(),
            launch,
        };
        for m in 0..spec.agents {
            let (agent, url) = procs.start_agent(m, &format!("data-{m}"));
            procs.agents.push(agent);
            procs.agent_urls.push(url);
        }
        procs
    }

    /// Kills the coordinator (`SIGKILL`) and starts it again on the same addresses.
    pub(crate) fn restart_coordinator(&mut self) {
        self.coordinator.signal("KILL");
        let _ = self.coordinator.0.wait();
        self.start_coordinator();
    }

    /// Starts the coordinator again on the same addresses (the one before has exited).
    pub(crate) fn start_coordinator(&mut self) {
        self.coordinator = self.launch.command_with(self.coordinator_args.clone(), &self.coordinator_env);
    }

    /// Starts an agent process for machine `m` on data directory `data` (in the cluster's
    /// directory), and gives its URL for clients: one more besides [`Procs::agents`], such as a
    /// replacement.
    pub(crate) fn start_agent(&self, m: u32, data: &str) -> (Proc, String) {
        on_free_ports("an agent", || {
            let (aport, dport) = (free_port(), free_port());
            let mut args: Vec<String> = ["agent", "--machine", &m.to_string(), "--coordinator", &self.coordinator_url]
                .map(String::from)
                .to_vec();
            args.extend([
                "--listen".into(),
                format!("127.0.0.1:{aport}"),
                "--data-listen".into(),
                format!("127.0.0.1:{dport}"),
            ]);
            args.extend(["--config".into(), self.dir.join("agent.toml").display().to_string()]);
            args.extend(["--data-dir".into(), self.dir.join(data).display().to_string()]);
            args.extend(self.launch.tls_args(&format!("agent-{m}")));
            let scheme = if self.launch.tls { "https" } else { "http" };
            let mut p = self.launch.command(args);
            listens(&mut p, aport).then(|| (p, format!("{scheme}://127.0.0.1:{aport}")))
        })
    }

    /// A client of agent `m`: the cluster's client certificate, or the token.
    pub(crate) fn client_config(&self, m: usize) -> ClientConfig {
        self.client_config_at(&self.agent_urls[m])
    }

    /// A client of the agent at `url`.
    fn client_config_at(&self, url: &str) -> ClientConfig {
        let (coord, agent) = (self.coordinator_url.clone(), url.to_string());
        if self.launch.tls {
            ClientConfig::tls(coord, agent, coflow_testkit::files(&self.dir.join("certs"), "client-testkit"))
        } else {
            ClientConfig::new(coord, agent, ClusterToken::new(TOKEN).unwrap())
        }
    }

    /// Where the client of [`Procs::client`] writes the files it puts as segments on machine `m`,
    /// and that directory relative to the agent's data directory: with TLS, its own directory
    /// `clients/testkit` (the agent serves a client only files beneath it); else the data
    /// directory itself. Made if missing.
    pub(crate) fn client_files(&self, m: usize) -> (PathBuf, &'static str) {
        let (dir, rel) = if self.launch.tls {
            (self.dir.join(format!("data-{m}/clients/testkit")), "clients/testkit/")
        } else {
            (self.dir.join(format!("data-{m}")), "")
        };
        std::fs::create_dir_all(&dir).unwrap();
        (dir, rel)
    }

    pub(crate) async fn client(&self, m: usize) -> Client {
        Client::connect(self.client_config(m)).await.unwrap()
    }

    /// A client of the agent at `url` (one [`Procs::start_agent`] started).
    pub(crate) async fn client_at(&self, url: &str) -> Client {
        Client::connect(self.client_config_at(url)).await.unwrap()
    }

    /// Waits (at most 30 s) until every agent is alive at the coordinator and takes a put.
    pub(crate) async fn ready(&self) {
        let started = Instant::now();
        let within = |what: &str| assert!(started.elapsed() < Duration::from_secs(30), "{what} within 30 s");
        let c = self.client(0).await;
        loop {
            if let Ok(st) = c.status().await
                && st.agents.iter().filter(|a| a.alive).count() == self.agents.len()
            {
                break;
            }
            within("every agent alive");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let probe = loop {
            match c
                .register(self.agents.len() as u32, CoflowOptions { name: "probe".into(), ..Default::default() })
                .await
            {
                Ok(id) => break id,
                Err(_) => within("a registration"),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        for m in 0..self.agents.len() {
            let a = self.client(m).await;
            // Registered with the coordinator is not yet serving puts: retried while the agent
            // says it is not registered.
            while let Err(ClientError::AgentUnreachable(_) | ClientError::CoordinatorUnreachable(_)) =
                a.put(probe, &format!("probe-{m}"), vec![1]).await
            {
                within("a put at every agent");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        c.unregister(probe).await.unwrap();
    }

    /// The sum of every series of `name` on the coordinator's `/metrics` (0 if it has none).
    pub(crate) async fn metric(&self, name: &str) -> f64 {
        let page = coflow_testkit::scrape(self.metrics).await;
        page.lines()
            .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }
}
