//! The processes of a testbed: the coordinator (in the switch's namespace), one `coflow agent`
//! per host and one `coflow testbed client` per host, each started with `ip netns exec` from the
//! `coflow` binary itself, each command line naming the run directory (and so the run's prefix).

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::TestbedError;
use crate::client::{Op, Reply, Request};
use crate::net::Names;
use crate::state::{CHANGES, StateFile, signal};
use crate::topology::{Topology, payload_rate};

/// The most requests of one host that [`Hub::ask_all`] keeps in flight: well within the 4,096
/// requests a service keeps open for one peer (`coflow_proto`'s reception bounds).
pub const WINDOW: usize = 256;

/// A reply and when it arrived.
#[derive(Clone, Debug)]
pub struct Arrived {
    /// The host whose client answered.
    pub host: usize,
    /// The reply.
    pub reply: Reply,
    /// When the orchestrator read it.
    pub at: Instant,
}

/// The requests awaiting a reply: the host asked, and where its reply goes.
type Pending = Arc<Mutex<HashMap<u64, (usize, Sender<Arrived>)>>>;

/// The clients of every host: requests out on their stdin, replies routed by id to whoever asked.
#[derive(Debug)]
pub struct Hub {
    stdins: Vec<Mutex<Option<ChildStdin>>>,
    pending: Pending,
    next: AtomicU64,
    readers: Mutex<Vec<JoinHandle<()>>>,
}

impl Hub {
    /// Sends `op` to host `host`'s client; the reply goes to `to`.
    pub fn send(&self, host: usize, op: Op, to: &Sender<Arrived>) -> Result<u64, TestbedError> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.pending.lock().expect("pending lock").insert(id, (host, to.clone()));
        let mut line = serde_json::to_string(&Request { id, op }).expect("serializable");
        line.push('\n');
        let mut stdin = self.stdins[host].lock().expect("stdin lock");
        let ok = stdin.as_mut().is_some_and(|s| s.write_all(line.as_bytes()).and_then(|()| s.flush()).is_ok());
        if !ok {
            self.pending.lock().expect("pending lock").remove(&id);
            return Err(TestbedError::Setup(format!("the client of host {host} is gone")));
        }
        Ok(id)
    }

    /// Sends `op` and waits for its reply at most `timeout`.
    pub fn ask(&self, host: usize, op: Op, timeout: Duration) -> Result<Reply, TestbedError> {
        let (tx, rx) = channel();
        self.send(host, op, &tx)?;
        rx.recv_timeout(timeout)
            .map(|a| a.reply)
            .map_err(|_| TestbedError::Setup(format!("the client of host {host} did not answer within {timeout:?}")))
    }

    /// Sends every request and waits for all replies, failing on the first that did not succeed,
    /// or when no reply came for `stall`. At most [`WINDOW`] requests of one host are in flight at
    /// once, so a map stage of any size stays within what a service keeps open for one peer.
    pub fn ask_all(&self, ops: Vec<(usize, Op)>, stall: Duration) -> Result<Vec<Reply>, TestbedError> {
        let (tx, rx) = channel();
        let total = ops.len();
        let mut waiting: Vec<std::collections::VecDeque<(usize, Op)>> = vec![Default::default(); self.stdins.len()];
        for (k, (host, op)) in ops.into_iter().enumerate() {
            let queue = waiting
                .get_mut(host)
                .ok_or_else(|| TestbedError::Setup(format!("a request to host {host}, which the testbed has not")))?;
            queue.push_back((k, op));
        }
        let mut in_flight = vec![0usize; waiting.len()];
        let mut slot: HashMap<u64, usize> = HashMap::new();
        let mut got: Vec<Option<Reply>> = vec![None; total];
        let mut answered = 0;
        while answered < total {
            for (host, queue) in waiting.iter_mut().enumerate() {
                while in_flight[host] < WINDOW {
                    let Some((k, op)) = queue.pop_front() else { break };
                    slot.insert(self.send(host, op, &tx)?, k);
                    in_flight[host] += 1;
                }
            }
            let a = rx.recv_timeout(stall).map_err(|_| {
                TestbedError::Setup(format!("{} requests unanswered, none answered for {stall:?}", total - answered))
            })?;
            if a.reply.outcome != crate::client::Outcome::Ok {
                return Err(TestbedError::Setup(format!(
                    "a request to host {} failed: {:?} {}",
                    a.host, a.reply.outcome, a.reply.message
                )));
            }
            in_flight[a.host] -= 1;
            let k = slot.remove(&a.reply.id).expect("a reply to a request of this call");
            got[k] = Some(a.reply);
            answered += 1;
        }
        Ok(got.into_iter().map(|r| r.expect("every request answered")).collect())
    }

    fn close(&self) {
        for s in &self.stdins {
            s.lock().expect("stdin lock").take();
        }
        for r in std::mem::take(&mut *self.readers.lock().expect("readers lock")) {
            let _ = r.join();
        }
    }
}

/// How the services of a testbed run.
#[derive(Clone, Debug)]
pub struct ServiceConfig {
    /// The coordinator's policy (or `tcp`).
    pub policy: String,
    /// Its agent timeout.
    pub agent_timeout_ms: u64,
    /// Multi-path routing over relays, on a wide area.
    pub multipath: bool,
}

/// The processes of one testbed.
#[derive(Debug)]
pub struct Cluster {
    exe: PathBuf,
    names: Names,
    run_dir: PathBuf,
    coordinator: Mutex<Child>,
    agents: Vec<Mutex<Child>>,
    clients: Mutex<Vec<Child>>,
    /// The clients.
    pub hub: Hub,
}

fn spawn(
    state: &StateFile,
    ns: &str,
    exe: &Path,
    args: &[String],
    log: &Path,
    piped: bool,
) -> Result<Child, TestbedError> {
    let out = File::options().create(true).append(true).open(log).map_err(|e| TestbedError::io(log, e))?;
    let err = out.try_clone().map_err(|e| TestbedError::io(log, e))?;
    let torn = CHANGES.lock().unwrap_or_else(|e| e.into_inner());
    if *torn {
        return Err(TestbedError::Interrupted);
    }
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns]).arg(exe).args(args).env("NO_COLOR", "1").stderr(err);
    if piped {
        c.stdin(Stdio::piped()).stdout(Stdio::piped());
    } else {
        c.stdin(Stdio::null()).stdout(out);
    }
    let child = c.spawn().map_err(|e| TestbedError::Command {
        cmd: format!("ip netns exec {ns} {}", exe.display()),
        reason: e.to_string(),
    })?;
    state.add_pid(child.id())?;
    drop(torn);
    Ok(child)
}

fn wait_gone(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

impl Cluster {
    /// Starts the coordinator, the agents and the clients, and waits until every agent has
    /// registered.
    pub fn start(
        exe: &Path,
        names: &Names,
        topology: &Topology,
        state: &StateFile,
        run_dir: &Path,
        svc: &ServiceConfig,
    ) -> Result<Cluster, TestbedError> {
        let token = run_dir.join("token");
        std::fs::write(&token, format!("testbed-{}", names.prefix)).map_err(|e| TestbedError::io(&token, e))?;
        let coord_url = format!("http://{}:{}", names.coordinator_ip(), crate::net::COORDINATOR_PORT);
        let mut toml = format!(
            "listen = \"{}:{}\"\npolicy = \"{}\"\nbypass_threshold_bytes = 0\nagent_timeout_ms = {}\n",
            names.coordinator_ip(),
            crate::net::COORDINATOR_PORT,
            svc.policy,
            svc.agent_timeout_ms
        );
        if let Some(dcs) = &topology.wan {
            // The coordinator schedules the wide area at the payload rates the agents carry.
            let wan = run_dir.join("wan.json");
            let json = coflow_sim::topology::Topology::wide_area_json(&dcs.payload_wide_area());
            std::fs::write(&wan, json).map_err(|e| TestbedError::io(&wan, e))?;
            toml.push_str(&format!("topology = \"{}\"\n", wan.display()));
            if svc.multipath {
                toml.push_str("multipath = true\n");
            }
        }
        let cfg = run_dir.join("coordinator.toml");
        std::fs::write(&cfg, toml).map_err(|e| TestbedError::io(&cfg, e))?;
        let coordinator = spawn(
            state,
            &names.switch_ns(),
            exe,
            &Self::coordinator_args(run_dir),
            &run_dir.join("coordinator.log"),
            false,
        )?;
        let mut cluster = Cluster {
            exe: exe.to_path_buf(),
            names: names.clone(),
            run_dir: run_dir.to_path_buf(),
            coordinator: Mutex::new(coordinator),
            agents: Vec::new(),
            clients: Mutex::new(Vec::new()),
            hub: Hub {
                stdins: Vec::new(),
                pending: Arc::default(),
                next: AtomicU64::new(1),
                readers: Mutex::new(Vec::new()),
            },
        };
        for (i, h) in topology.hosts.iter().enumerate() {
            let dir = run_dir.join(format!("agent{i}"));
            std::fs::create_dir_all(&dir).map_err(|e| TestbedError::io(&dir, e))?;
            let mut toml = format!(
                "machine = {i}\ncoordinator = \"{coord_url}\"\nlisten = \"127.0.0.1:7071\"\ndata_listen = \"{}:7072\"\n\
                 data_dir = \"{}\"\nport_rate_bps = {}\ncap_port = false\nmax_stored_bytes = {}\n",
                names.host_ip(i),
                dir.display(),
                payload_rate(coflow_core::Rate::from_bytes_per_sec(
                    h.uplink.bytes_per_sec().min(h.downlink.bytes_per_sec())
                ))
                .bytes_per_sec(),
                crate::workload::MAX_STORED
            );
            if let Some(dcs) = &topology.wan {
                toml.push_str(&format!("datacenter = \"{}\"\n", dcs.wan.name(dcs.wan.dc_of(i as u32))));
            }
            let cfg = run_dir.join(format!("agent{i}.toml"));
            std::fs::write(&cfg, toml).map_err(|e| TestbedError::io(&cfg, e))?;
            let child = spawn(
                state,
                &names.host_ns(i),
                exe,
                &cluster.agent_args(i),
                &run_dir.join(format!("agent{i}.log")),
                false,
            )?;
            cluster.agents.push(Mutex::new(child));
        }
        for i in 0..topology.hosts.len() {
            let args: Vec<String> = [
                "testbed",
                "client",
                "--coordinator",
                &coord_url,
                "--agent",
                "http://127.0.0.1:7071",
                "--token-file",
                &token.display().to_string(),
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            let mut child = spawn(state, &names.host_ns(i), exe, &args, &run_dir.join(format!("client{i}.log")), true)?;
            let stdin = child.stdin.take().expect("piped");
            let stdout = child.stdout.take().expect("piped");
            let pending = cluster.hub.pending.clone();
            let log = run_dir.join(format!("client{i}.log"));
            let reader = std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    let Ok(reply) = serde_json::from_str::<Reply>(&line) else { continue };
                    let to = pending.lock().expect("pending lock").remove(&reply.id);
                    if let Some((_, to)) = to {
                        let _ = to.send(Arrived { host: i, reply, at: Instant::now() });
                    }
                }
                // The client exited: what it was asked fails now, rather than at its timeout.
                let mut pending = pending.lock().expect("pending lock");
                let orphans: Vec<u64> = pending.iter().filter(|(_, (h, _))| *h == i).map(|(&id, _)| id).collect();
                for id in orphans {
                    let (_, to) = pending.remove(&id).expect("listed");
                    let reply = Reply::failed(
                        id,
                        "client-exited",
                        format!("the client of host {i} exited (its log: {})", log.display()),
                    );
                    let _ = to.send(Arrived { host: i, reply, at: Instant::now() });
                }
            });
            cluster.hub.stdins.push(Mutex::new(Some(stdin)));
            cluster.hub.readers.lock().expect("readers lock").push(reader);
            cluster.clients.lock().expect("clients lock").push(child);
        }
        cluster.wait_agents(topology.hosts.len(), Duration::from_secs(30))?;
        Ok(cluster)
    }

    fn coordinator_args(run_dir: &Path) -> Vec<String> {
        let d = run_dir.display();
        vec![
            "coordinator".into(),
            "--config".into(),
            format!("{d}/coordinator.toml"),
            "--token-file".into(),
            format!("{d}/token"),
        ]
    }

    fn agent_args(&self, i: usize) -> Vec<String> {
        let d = self.run_dir.display();
        vec![
            "agent".into(),
            "--config".into(),
            format!("{d}/agent{i}.toml"),
            "--token-file".into(),
            format!("{d}/token"),
        ]
    }

    /// Waits until the coordinator knows `n` live agents.
    pub fn wait_agents(&self, n: usize, timeout: Duration) -> Result<(), TestbedError> {
        let until = Instant::now() + timeout;
        let mut last = String::new();
        while Instant::now() < until {
            match self.hub.ask(0, Op::Agents, Duration::from_secs(5)) {
                Ok(r) if r.outcome == crate::client::Outcome::Ok && r.value as usize >= n => return Ok(()),
                Ok(r) => last = format!("{} of {n} agents alive {}", r.value, r.message),
                Err(e) => last = e.to_string(),
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Err(TestbedError::Setup(format!(
            "agents did not all register within {timeout:?} ({last}); logs in {}",
            self.run_dir.display()
        )))
    }

    /// SIGKILLs host `i`'s agent.
    pub fn kill_agent(&self, i: usize) {
        wait_gone(&mut self.agents[i].lock().expect("agent lock"));
    }

    /// Starts host `i`'s agent again (it holds nothing: its pieces were in memory).
    pub fn restart_agent(&self, i: usize, state: &StateFile) -> Result<(), TestbedError> {
        let mut a = self.agents[i].lock().expect("agent lock");
        wait_gone(&mut a);
        *a = spawn(
            state,
            &self.names.host_ns(i),
            &self.exe,
            &self.agent_args(i),
            &self.run_dir.join(format!("agent{i}.log")),
            false,
        )?;
        Ok(())
    }

    /// SIGSTOPs (`freeze`) or SIGCONTs host `i`'s agent.
    pub fn freeze_agent(&self, i: usize, freeze: bool) {
        let pid = self.agents[i].lock().expect("agent lock").id();
        signal(pid, if freeze { "STOP" } else { "CONT" });
    }

    /// SIGKILLs the coordinator.
    pub fn kill_coordinator(&self) {
        wait_gone(&mut self.coordinator.lock().expect("coordinator lock"));
    }

    /// Starts the coordinator again, with the same configuration and address.
    pub fn restart_coordinator(&self, state: &StateFile) -> Result<(), TestbedError> {
        let mut c = self.coordinator.lock().expect("coordinator lock");
        wait_gone(&mut c);
        *c = spawn(
            state,
            &self.names.switch_ns(),
            &self.exe,
            &Self::coordinator_args(&self.run_dir),
            &self.run_dir.join("coordinator.log"),
            false,
        )?;
        Ok(())
    }

    /// Stops every process: clients first (their stdin closes), then agents and coordinator.
    pub fn stop(&self) {
        for s in &self.hub.stdins {
            s.lock().expect("stdin lock").take();
        }
        let until = Instant::now() + Duration::from_secs(2);
        for c in self.clients.lock().expect("clients lock").iter_mut() {
            while Instant::now() < until && matches!(c.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(20));
            }
            wait_gone(c);
        }
        self.hub.close();
        for a in &self.agents {
            let mut a = a.lock().expect("agent lock");
            signal(a.id(), "CONT");
            wait_gone(&mut a);
        }
        wait_gone(&mut self.coordinator.lock().expect("coordinator lock"));
    }
}
