//! `coflow testbed faults`: each scenario on a fresh testbed under `varys` and load, counting
//! what happens to every get (exact, failed by kind, hung, corrupted bytes), when the first
//! get failed after the fault (detection) and when the faulty host served again after the
//! repair (recovery: a probe coflow with a piece each way between the faulty host and a
//! neighbour, retried every 250 ms until both arrive exact), and the coflows' average CCT, of
//! those touching the faulty host apart (what a fault that fails nothing, a halved rate, costs).
//!
//! Every get carries a bound (`FaultOptions::get_bound`): one not ended by then is counted as
//! hung and abandoned, so a run ends whatever the system does.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use coflow_core::Workload;
use serde::Serialize;

use crate::TestbedError;
use crate::client::{Op, Outcome};
use crate::net;
use crate::procs::ServiceConfig;
use crate::testbed::Testbed;
use crate::topology::Topology;

/// The coordinator's agent timeout in fault runs.
pub const AGENT_TIMEOUT_MS: u64 = 3000;

/// A fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scenario {
    /// The agent is SIGKILLed in the middle of its coflows and restarted 1 s later.
    AgentKill,
    /// The agent is SIGSTOPped for 5 s (over the 3 s agent timeout), then resumed.
    AgentFreeze,
    /// The coordinator is SIGKILLed and restarted 1 s later.
    CoordinatorRestart,
    /// The host's link is down for 3 s.
    LinkDown,
    /// The host's link rate is halved for the rest of the run.
    RateHalved,
}

impl Scenario {
    /// All five, in report order.
    pub const ALL: [Scenario; 5] = [
        Scenario::AgentKill,
        Scenario::AgentFreeze,
        Scenario::CoordinatorRestart,
        Scenario::LinkDown,
        Scenario::RateHalved,
    ];

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::AgentKill => "agent-kill",
            Scenario::AgentFreeze => "agent-freeze",
            Scenario::CoordinatorRestart => "coordinator-restart",
            Scenario::LinkDown => "link-down",
            Scenario::RateHalved => "rate-halved",
        }
    }

    /// The scenario called `name`.
    pub fn by_name(name: &str) -> Option<Scenario> {
        Scenario::ALL.into_iter().find(|s| s.name() == name)
    }
}

/// What to run.
#[derive(Clone, Debug)]
pub struct FaultOptions {
    /// The hosts and links.
    pub topology: Topology,
    /// The load, on the topology's machines.
    pub workload: Workload,
    /// What it is.
    pub source: String,
    /// The `coflow` binary.
    pub exe: PathBuf,
    /// The scenarios.
    pub scenarios: Vec<Scenario>,
    /// The bound on each get.
    pub get_bound: Duration,
    /// When the fault strikes, after the first arrival; default 40% of the way to the last.
    pub fault_at: Option<Duration>,
    /// Leave the last scenario's testbed up, with its logs.
    pub keep: bool,
}

/// One scenario's counts.
#[derive(Clone, Debug, Serialize)]
pub struct ScenarioResult {
    /// The scenario.
    pub name: String,
    /// The faulty host.
    pub host: usize,
    /// Gets issued.
    pub gets: usize,
    /// Gets that ended with exact bytes.
    pub exact: usize,
    /// Gets that failed, by error kind.
    pub failed: BTreeMap<String, usize>,
    /// Gets that did not end within the bound.
    pub hung: usize,
    /// Bytes delivered wrong by gets that ended with success.
    pub corrupted: u64,
    /// Gets that touch neither the faulty host nor, for the coordinator, anything in flight at
    /// the fault: those not involving the faulty host.
    pub bystander_gets: usize,
    /// Of those, the exact ones.
    pub bystander_exact: usize,
    /// Seconds from the fault to the first get that failed after it (`None`: none failed).
    pub detect_s: Option<f64>,
    /// Seconds from the repair to the faulty host serving a probe both ways (`None`: not within
    /// the bound).
    pub recover_s: Option<f64>,
    /// The average CCT, in seconds, of the coflows whose every get ended exact (`None`: none did).
    pub avg_cct_s: Option<f64>,
    /// The same of those with a flow to or from the faulty host.
    pub host_avg_cct_s: Option<f64>,
    /// The same of the others.
    pub bystander_avg_cct_s: Option<f64>,
    /// Wall time.
    pub wall_s: f64,
}

/// The report.
#[derive(Clone, Debug, Serialize)]
pub struct FaultReport {
    /// Hosts.
    pub hosts: usize,
    /// The links' rate, bits per second.
    pub link_bps: f64,
    /// The load.
    pub workload: String,
    /// The bound on each get, seconds.
    pub get_bound_s: f64,
    /// Per scenario.
    pub scenarios: Vec<ScenarioResult>,
}

/// The host with the most bytes to send or receive: the fault hits the middle of its coflows.
fn busiest(w: &Workload, hosts: usize) -> usize {
    let mut load = vec![0u64; hosts];
    for f in w.coflows.iter().flat_map(|c| &c.flows).filter(|f| !f.is_local()) {
        load[f.src.index()] += f.size.get();
        load[f.dst.index()] += f.size.get();
    }
    (0..hosts).max_by_key(|&i| (load[i], std::cmp::Reverse(i))).unwrap_or(0)
}

/// One probe: a fresh coflow with a 1 MB piece from `a` to `b` and one from `b` to `a`; true if
/// both arrive exact within `bound`.
fn probe(tb: &Testbed, a: usize, b: usize, n: u64, bound: Duration) -> bool {
    let hub = &tb.cluster().hub;
    let Ok(r) = hub.ask(b, Op::Register { num_flows: 2, name: format!("probe-{n}") }, bound) else { return false };
    if r.outcome != Outcome::Ok {
        return false;
    }
    let size = 1 << 20;
    let seed = |k: u64| (u64::MAX - n) ^ k;
    let puts = vec![
        (a, Op::Put { coflow: r.value, data_id: "pa".into(), size, seed: seed(1) }),
        (b, Op::Put { coflow: r.value, data_id: "pb".into(), size, seed: seed(2) }),
    ];
    if hub.ask_all(puts, bound).is_err() {
        return false;
    }
    let ms = bound.as_millis() as u64;
    let gets = vec![
        (b, Op::Get { coflow: r.value, data_id: "pa".into(), size, seed: seed(1), timeout_ms: ms }),
        (a, Op::Get { coflow: r.value, data_id: "pb".into(), size, seed: seed(2), timeout_ms: ms }),
    ];
    hub.ask_all(gets, bound + Duration::from_secs(2)).is_ok()
}

/// What the fault thread saw.
struct Timeline {
    injected: Option<Instant>,
    repaired: Option<Instant>,
    recovered: Option<Instant>,
    error: Option<String>,
}

fn inject(tb: &Testbed, s: Scenario, host: usize, t0: Instant, at: Duration, bound: Duration) -> Timeline {
    let mut tl = Timeline { injected: None, repaired: None, recovered: None, error: None };
    std::thread::sleep((t0 + at).saturating_duration_since(Instant::now()));
    let c = tb.cluster();
    let names = &tb.names;
    let now = Instant::now;
    let step = |r: Result<(), TestbedError>, tl: &mut Timeline| {
        if let Err(e) = r {
            tl.error.get_or_insert(e.to_string());
        }
    };
    match s {
        Scenario::AgentKill => {
            c.kill_agent(host);
            tl.injected = Some(now());
            std::thread::sleep(Duration::from_secs(1));
            step(c.restart_agent(host, &tb.state), &mut tl);
        }
        Scenario::AgentFreeze => {
            c.freeze_agent(host, true);
            tl.injected = Some(now());
            std::thread::sleep(Duration::from_millis(AGENT_TIMEOUT_MS + 2000));
            c.freeze_agent(host, false);
        }
        Scenario::CoordinatorRestart => {
            c.kill_coordinator();
            tl.injected = Some(now());
            std::thread::sleep(Duration::from_secs(1));
            step(c.restart_coordinator(&tb.state), &mut tl);
        }
        Scenario::LinkDown => {
            step(net::set_link(names, host, false), &mut tl);
            tl.injected = Some(now());
            std::thread::sleep(Duration::from_secs(3));
            step(net::set_link(names, host, true), &mut tl);
        }
        Scenario::RateHalved => {
            let r = tb.topology.hosts[host].uplink;
            step(net::set_rate(names, host, coflow_core::Rate::from_bytes_per_sec(r.bytes_per_sec() / 2.0)), &mut tl);
            tl.injected = Some(now());
        }
    }
    let repaired = now();
    tl.repaired = Some(repaired);
    let other = (host + 1) % tb.topology.hosts.len();
    let mut n = 0;
    while now() < repaired + bound {
        n += 1;
        if probe(tb, host, other, n, bound.saturating_sub(now() - repaired).max(Duration::from_secs(1))) {
            tl.recovered = Some(now());
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    tl
}

/// Runs one scenario on a fresh testbed.
pub fn scenario(opts: &FaultOptions, s: Scenario, keep: bool) -> Result<ScenarioResult, TestbedError> {
    let t = Instant::now();
    let hosts = opts.topology.hosts.len();
    let host = busiest(&opts.workload, hosts);
    let svc = ServiceConfig { policy: "varys".into(), agent_timeout_ms: AGENT_TIMEOUT_MS, multipath: false };
    let mut tb = Testbed::up(&opts.topology, &opts.exe, &svc)?;
    if keep {
        tb.keep();
    }
    let ids = tb.prepare(&opts.workload)?;
    let at = opts.fault_at.unwrap_or_else(|| {
        let span = match (opts.workload.coflows.first(), opts.workload.coflows.last()) {
            (Some(a), Some(b)) => (b.arrival - a.arrival).as_secs_f64(),
            _ => 0.0,
        };
        Duration::from_secs_f64((0.4 * span).max(0.2))
    });
    let (r, tl) = tb.replay(&opts.workload, &ids, opts.get_bound, |t0| inject(&tb, s, host, t0, at, opts.get_bound))?;
    drop(tb);
    if let Some(e) = tl.error {
        return Err(TestbedError::Setup(format!("{}: injecting the fault: {e}", s.name())));
    }
    let mut failed = BTreeMap::new();
    let (mut exact, mut hung, mut corrupted) = (0, 0, 0);
    let mut first_failure: Option<Instant> = None;
    for g in &r.gets {
        corrupted += g.corrupted;
        match &g.outcome {
            Outcome::Ok => exact += 1,
            Outcome::Hung => hung += 1,
            Outcome::Corrupted => *failed.entry("Corrupted".to_string()).or_insert(0) += 1,
            Outcome::Failed(kind) => *failed.entry(kind.clone()).or_insert(0) += 1,
        }
        if g.outcome != Outcome::Ok
            && let (Some(end), Some(inj)) = (g.end, tl.injected)
            && end >= inj
        {
            first_failure = Some(first_failure.map_or(end, |f| f.min(end)));
        }
    }
    let bystanders: Vec<_> = r.gets.iter().filter(|g| g.src != host && g.dst != host).collect();
    let ccts = r.ccts();
    let mut touches = vec![false; ccts.len()];
    for g in &r.gets {
        touches[g.coflow] |= g.src == host || g.dst == host;
    }
    let avg = |keep: &dyn Fn(usize) -> bool| {
        let v: Vec<f64> = ccts.iter().enumerate().filter(|&(k, _)| keep(k)).filter_map(|(_, c)| *c).collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    };
    Ok(ScenarioResult {
        name: s.name().to_string(),
        host,
        gets: r.gets.len(),
        exact,
        failed,
        hung,
        corrupted,
        bystander_gets: bystanders.len(),
        bystander_exact: bystanders.iter().filter(|g| g.outcome == Outcome::Ok).count(),
        detect_s: match (first_failure, tl.injected) {
            (Some(f), Some(i)) => Some(f.duration_since(i).as_secs_f64()),
            _ => None,
        },
        recover_s: match (tl.recovered, tl.repaired) {
            (Some(r), Some(p)) => Some(r.duration_since(p).as_secs_f64()),
            _ => None,
        },
        avg_cct_s: avg(&|_| true),
        host_avg_cct_s: avg(&|k| touches[k]),
        bystander_avg_cct_s: avg(&|k| !touches[k]),
        wall_s: t.elapsed().as_secs_f64(),
    })
}

/// Runs every scenario; `progress` hears one line per scenario.
pub fn run(opts: &FaultOptions, progress: &mut dyn FnMut(&str)) -> Result<FaultReport, TestbedError> {
    let mut scenarios = Vec::new();
    for (k, &s) in opts.scenarios.iter().enumerate() {
        progress(&format!("{}: on a fresh testbed", s.name()));
        scenarios.push(scenario(opts, s, opts.keep && k + 1 == opts.scenarios.len())?);
    }
    Ok(FaultReport {
        hosts: opts.topology.hosts.len(),
        link_bps: opts.topology.hosts[0].uplink.bits_per_sec(),
        workload: opts.source.clone(),
        get_bound_s: opts.get_bound.as_secs_f64(),
        scenarios,
    })
}

fn opt(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.2}s"))
}

impl FaultReport {
    /// The report as a table.
    pub fn table(&self) -> String {
        let mut s = format!(
            "{:<20} {:>4} {:>5} {:>5} {:<48} {:>4} {:>9} {:>10} {:>8} {:>8} {:>8} {:>8}\n",
            "scenario",
            "host",
            "gets",
            "exact",
            "failed (kind: n)",
            "hung",
            "corrupted",
            "bystanders",
            "detect",
            "recover",
            "cct",
            "cct host"
        );
        for r in &self.scenarios {
            let failed = if r.failed.is_empty() {
                "0".to_string()
            } else {
                r.failed.iter().map(|(k, n)| format!("{k}: {n}")).collect::<Vec<_>>().join(", ")
            };
            s.push_str(&format!(
                "{:<20} {:>4} {:>5} {:>5} {:<48} {:>4} {:>9} {:>10} {:>8} {:>8} {:>8} {:>8}\n",
                r.name,
                r.host,
                r.gets,
                r.exact,
                failed,
                r.hung,
                r.corrupted,
                format!("{}/{}", r.bystander_exact, r.bystander_gets),
                opt(r.detect_s),
                opt(r.recover_s),
                opt(r.avg_cct_s),
                opt(r.host_avg_cct_s)
            ));
        }
        s.push_str(&format!("each get bounded at {:.0}s; a get not ended by then counts as hung\n", self.get_bound_s));
        s.push_str(
            "cct: average CCT of the coflows whose every get was exact; cct host: of those touching the faulty host\n",
        );
        s
    }
}
