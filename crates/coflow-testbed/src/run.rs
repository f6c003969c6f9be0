//! `coflow testbed run`: each policy on a fresh testbed, the workload replayed with real bytes,
//! measured next to the simulator running the same workload, payload capacity and policy code
//! (`fair` standing for `tcp`, which a simulator does not have).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use coflow_core::{Nanos, Rate, Workload};
use coflow_sim::ordering::{Skew, reshape};
use coflow_sim::weather::WeatherLog;
use coflow_sim::{SimConfig, Summary, WanConfig, percentile, simulate};
use serde::Serialize;

use crate::client::Outcome;
use crate::fidelity::{CoflowFidelity, GroupFidelity, coflow_row, groups, main_source};
use crate::procs::ServiceConfig;
use crate::testbed::{Replayed, Testbed};
use crate::topology::{PAYLOAD_SHARE, Topology, payload_rate};
use crate::weather::WeatherRun;
use crate::{TCP, TestbedError};

/// What to run.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// The hosts and links.
    pub topology: Topology,
    /// Policies (`coflow_sched` names or `tcp`), each on a fresh testbed.
    pub policies: Vec<String>,
    /// The workload, on the topology's machines.
    pub workload: Workload,
    /// What it is, for the report.
    pub source: String,
    /// The `coflow` binary.
    pub exe: PathBuf,
    /// The bound on each get.
    pub get_bound: Duration,
    /// Leave the last testbed up.
    pub keep: bool,
    /// Seeds the weather of a wide-area testbed (every policy sees the same draws).
    pub weather_seed: u64,
    /// On a wide area: route over relays (multi-path), not, or each policy both ways.
    pub multipath: Multipath,
    /// On a wide area: a link down for a while during each replay.
    pub outage: Option<crate::weather::Outage>,
}

/// Whether a wide-area testbed's coordinator splits flows over relays (Siphon's multi-path
/// routing, for policies of the proportional model, as the simulator does).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Multipath {
    /// Direct paths only.
    #[default]
    Off,
    /// Every policy that can, with multi-path routing.
    On,
    /// Every policy that can both ways, one row each.
    Both,
}

/// One policy's figures.
#[derive(Clone, Debug, Serialize)]
pub struct PolicyResult {
    /// The policy.
    pub policy: String,
    /// The policy simulated for comparison (`fair` for `tcp`).
    pub simulated_policy: String,
    /// Coflows replayed.
    pub coflows: usize,
    /// Coflows whose every get ended with exact bytes.
    pub completed: usize,
    /// Measured average CCT of completed coflows.
    pub measured_avg_cct_s: f64,
    /// Simulated average CCT (`None` when links differ in rate: the simulator's big switch has one).
    pub simulated_avg_cct_s: Option<f64>,
    /// Measured p95 CCT.
    pub measured_p95_cct_s: f64,
    /// Simulated p95 CCT.
    pub simulated_p95_cct_s: Option<f64>,
    /// Measured average over simulated, minus one.
    pub avg_difference: Option<f64>,
    /// Bytes delivered exactly as put.
    pub bytes_verified: u64,
    /// Bytes delivered wrong by gets that ended with success (must be 0).
    pub corrupted: u64,
    /// Gets that failed or hung.
    pub failed_gets: usize,
    /// Mean utilization of the hosts' links (both directions, wire bytes over link rate) while
    /// some coflow was pending.
    pub link_utilization: f64,
    /// Wall time of this policy's testbed, setup to teardown.
    pub wall_s: f64,
    /// Measured against simulated CCT per group of coflows (bins, and those under 1 MB), with
    /// the control path their gets saw (none when links differ: no simulation to compare with).
    pub groups: Vec<GroupFidelity>,
    /// The bin that adds most to the difference between the averages.
    pub difference_from: Option<String>,
    /// Each coflow, measured and simulated.
    pub per_coflow: Vec<CoflowFidelity>,
    /// The slowest completed coflow, measured.
    pub measured_max_cct_s: f64,
    /// The slowest coflow, simulated.
    pub simulated_max_cct_s: Option<f64>,
    /// Whether the coordinator split flows over relays (multi-path routing).
    pub multipath: bool,
    /// Bytes relayed through a third datacenter (the coordinator's count of the parts it sent
    /// through relays).
    pub relayed_bytes: u64,
    /// Flows whose rest was resumed over another path (a link down, a relay lost).
    pub flows_rerouted: u64,
    /// Bytes relayed in the simulation (each detoured byte crosses one more link).
    pub simulated_relayed_bytes: Option<f64>,
    /// The coordinator's policy decisions over the replay (`None` if it could not be asked).
    pub decisions: Option<u64>,
    /// The simulator's decisions for the same workload and policy.
    pub simulated_decisions: Option<u64>,
    /// On a wide-area testbed: every link's rate (wire bytes per second) as applied over the
    /// replay, which the simulation replayed at the payload share.
    pub weather: Option<WeatherLog>,
}

/// A factor measured and simulated.
#[derive(Clone, Debug, Serialize)]
pub struct Factor {
    /// Baseline's average CCT over varys's, measured.
    pub measured: f64,
    /// The same, simulated.
    pub simulated: Option<f64>,
}

/// The report.
#[derive(Clone, Debug, Serialize)]
pub struct RunReport {
    /// Hosts.
    pub hosts: usize,
    /// The links' rate, bits per second (of the first host's uplink when they differ).
    pub link_bps: f64,
    /// Payload bytes per second a link carries: what agents register and the simulator assumes.
    pub port_capacity_bytes_per_sec: f64,
    /// The workload.
    pub workload: String,
    /// Its coflows.
    pub coflows: usize,
    /// Its bytes across the fabric.
    pub fabric_bytes: u64,
    /// Per policy.
    pub results: Vec<PolicyResult>,
    /// `varys` over `tcp`, when both ran.
    pub varys_over_tcp: Option<Factor>,
    /// `varys` over `fair`, when both ran.
    pub varys_over_fair: Option<Factor>,
    /// Kernel TCP's measured average CCT over max-min's simulated one.
    pub tcp_over_max_min: Option<f64>,
    /// Total wall time.
    pub wall_s: f64,
}

/// Mean utilization of all links over the sample intervals in which some coflow was pending.
pub(crate) fn utilization(r: &Replayed, topology: &Topology) -> f64 {
    let mut ends = r.starts.clone();
    for g in &r.gets {
        if let Some(end) = g.end {
            ends[g.coflow] = ends[g.coflow].max(end);
        }
    }
    // The times some coflow was pending, as disjoint intervals in order.
    let mut spans: Vec<(Instant, Instant)> = r.starts.iter().copied().zip(ends).collect();
    spans.sort_unstable();
    let mut busy: Vec<(Instant, Instant)> = Vec::with_capacity(spans.len());
    for (s, e) in spans {
        match busy.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => busy.push((s, e)),
        }
    }
    let pending = |t: Instant| {
        let i = busy.partition_point(|&(s, _)| s <= t);
        i > 0 && t <= busy[i - 1].1
    };
    let capacity: f64 = topology.hosts.iter().map(|h| h.uplink.bytes_per_sec() + h.downlink.bytes_per_sec()).sum();
    let (mut bytes, mut secs) = (0.0, 0.0);
    for w in r.samples.windows(2) {
        let ((a, x), (b, y)) = (&w[0], &w[1]);
        let dt = b.duration_since(*a);
        if !pending(*a + dt / 2) {
            continue;
        }
        secs += dt.as_secs_f64();
        bytes += x.iter().zip(y).map(|(p, q)| (q.0 - p.0 + q.1 - p.1) as f64).sum::<f64>();
    }
    if secs == 0.0 { 0.0 } else { bytes / (secs * capacity) }
}

/// The simulated policy standing for `policy` (the registry's stand-in for `tcp`).
pub fn simulated_policy(policy: &str) -> &str {
    coflow_sched::policy::simulated(policy)
}

/// What the simulator gives for a replay's policy.
#[derive(Clone, Copy, Debug)]
struct SimFigures {
    avg_cct_s: f64,
    p95_cct_s: f64,
    max_cct_s: f64,
    relayed_bytes: f64,
    decisions: u64,
}

/// Simulates `policy` on `workload` as `cfg` says, and writes every coflow's CCT into `ccts`.
fn simulated(
    workload: &Workload,
    policy: &str,
    cfg: &SimConfig,
    ccts: &mut Vec<f64>,
) -> Result<SimFigures, TestbedError> {
    let sched = coflow_sched::policy::by_name(policy).map_err(|e| TestbedError::Setup(e.to_string()))?;
    let out = simulate(workload, sched, cfg).map_err(|e| TestbedError::Setup(e.to_string()))?;
    *ccts = out.outcomes.iter().map(|o| o.cct().map_or(f64::NAN, coflow_core::Nanos::as_secs_f64)).collect();
    let s = Summary::of(&out, None);
    Ok(SimFigures {
        avg_cct_s: s.avg_cct_s,
        p95_cct_s: s.p95_cct_s,
        max_cct_s: ccts.iter().copied().fold(0.0, f64::max),
        relayed_bytes: out.relayed_bytes,
        decisions: out.decisions,
    })
}

/// Runs every policy; `progress` hears one line per step.
pub fn run(opts: &RunOptions, progress: &mut dyn FnMut(&str)) -> Result<RunReport, TestbedError> {
    let started = Instant::now();
    let link = opts.topology.uniform_rate();
    let port: Option<Rate> = link.map(payload_rate);
    let mut results = Vec::new();
    if let Some(dcs) = &opts.topology.wan {
        // The coordinator schedules the wide area: a policy that assumes the big switch cannot.
        let fabric = coflow_sched::Fabric::new(dcs.wan.clone());
        for p in opts.policies.iter().filter(|p| coflow_sched::policy::unscheduled(p).is_none()) {
            coflow_sched::policy::check_serves(p, &fabric).map_err(|e| TestbedError::Setup(e.to_string()))?;
        }
    }
    // Each policy once, or with and without multi-path routing: only a policy of the proportional
    // model on a wide area is split over relays (per-flow policies keep direct paths, as in the
    // simulator).
    let splits = |p: &str| {
        opts.topology.wan.is_some()
            && coflow_sched::policy::unscheduled(p).is_none()
            && coflow_sched::policy::by_name(p).is_ok_and(|s| s.model() == coflow_sched::ServiceModel::Proportional)
    };
    let runs: Vec<(&String, bool)> = opts
        .policies
        .iter()
        .flat_map(|p| match (opts.multipath, splits(p)) {
            (Multipath::Both, true) => vec![(p, false), (p, true)],
            (Multipath::On, true) => vec![(p, true)],
            _ => vec![(p, false)],
        })
        .collect();
    for (n, &(policy, multipath)) in runs.iter().enumerate() {
        let sim_name = simulated_policy(policy);
        let t = Instant::now();
        let svc = ServiceConfig { policy: policy.clone(), agent_timeout_ms: 3000, multipath };
        let label = if multipath { format!("{policy} (multi-path)") } else { policy.clone() };
        let mut tb = Testbed::up(&opts.topology, &opts.exe, &svc)?;
        progress(&format!("{label}: testbed {} up ({} hosts), map stage", tb.names.prefix, opts.topology.hosts.len()));
        let ids = tb.prepare(&opts.workload)?;
        progress(&format!("{label}: replaying {} coflows", opts.workload.coflows.len()));
        let weather = match &opts.topology.wan {
            Some(dcs) => Some(WeatherRun::start(&tb.names, dcs, opts.weather_seed, opts.outage)?),
            None => None,
        };
        let (r, ()) = tb.replay(&opts.workload, &ids, opts.get_bound, |_| ())?;
        let weather = weather.map(|w| w.finish(r.t0)).transpose()?;
        // The coordinator's count of bytes it sent through relays, and of flows rerouted.
        let (relayed_bytes, flows_rerouted) = match &opts.topology.wan {
            Some(_) => tb.relayed().unwrap_or_else(|e| {
                progress(&format!("{label}: {e}"));
                (0, 0)
            }),
            None => (0, 0),
        };
        let decisions = tb.decisions().inspect_err(|e| progress(&format!("{label}: {e}"))).ok();
        let mut sim_ccts = Vec::new();
        let sim = match (port, &opts.topology.wan, &weather) {
            (_, Some(dcs), Some(log)) => {
                // The simulator's wide area at payload rates, on the weather the run applied.
                let wan = reshape(&dcs.wan, Skew::AsIs, 1.0 / PAYLOAD_SHARE)
                    .map_err(|e| TestbedError::Setup(format!("the wide area at payload rates: {e}")))?;
                let cfg = WanConfig {
                    wan,
                    redraw: Nanos::MAX,
                    seed: opts.weather_seed,
                    multipath,
                    per_connection: None,
                    weather: Some(std::sync::Arc::new(log.scaled(PAYLOAD_SHARE))),
                };
                Some(simulated(&opts.workload, sim_name, &SimConfig::wide_area(cfg), &mut sim_ccts)?)
            }
            (Some(p), None, _) => Some(simulated(&opts.workload, sim_name, &SimConfig::big_switch(p), &mut sim_ccts)?),
            _ => None,
        };
        if opts.keep && n + 1 == runs.len() {
            tb.keep();
            progress(&format!("{label}: testbed {} kept; `coflow testbed down` removes it", tb.names.prefix));
        }
        drop(tb);
        if std::env::var_os("COFLOW_TESTBED_DEBUG").is_some() {
            let mut firsts = vec![0.0f64; opts.workload.coflows.len()];
            for g in &r.gets {
                if let Some(f) = g.first_byte_s {
                    firsts[g.coflow] = firsts[g.coflow].max(f);
                }
            }
            for (k, (c, m)) in opts.workload.coflows.iter().zip(r.ccts()).enumerate() {
                let first = firsts[k];
                progress(&format!(
                    "coflow {k:>3} at {:>7.3}s flows {:>3} bytes {:>11} simulated {:>7.3}s measured {:>7.3}s (slowest first byte {:.3}s)",
                    c.arrival.as_secs_f64(),
                    c.flows.len(),
                    c.total_bytes().get(),
                    sim_ccts.get(k).copied().unwrap_or(f64::NAN),
                    m.unwrap_or(f64::NAN),
                    first
                ));
            }
        }
        let measured = r.ccts();
        let mut first_bytes: Vec<Vec<f64>> = vec![Vec::new(); opts.workload.coflows.len()];
        for g in &r.gets {
            if let Some(f) = g.first_byte_s {
                first_bytes[g.coflow].push(f);
            }
        }
        let per_coflow: Vec<CoflowFidelity> = if sim.is_some() {
            opts.workload
                .coflows
                .iter()
                .enumerate()
                .map(|(k, c)| {
                    let slowest = first_bytes[k].iter().copied().reduce(f64::max);
                    coflow_row(k, c, measured[k], sim_ccts[k], slowest)
                })
                .collect()
        } else {
            Vec::new()
        };
        let groups = groups(&per_coflow, &first_bytes);
        let difference_from = main_source(&groups).map(|g| g.group.clone());
        let mut ccts: Vec<f64> = measured.iter().flatten().copied().collect();
        ccts.sort_by(f64::total_cmp);
        let avg = ccts.iter().sum::<f64>() / ccts.len().max(1) as f64;
        let exact = |o: &Outcome| *o == Outcome::Ok;
        results.push(PolicyResult {
            policy: policy.clone(),
            simulated_policy: sim_name.to_string(),
            coflows: opts.workload.coflows.len(),
            completed: ccts.len(),
            measured_avg_cct_s: avg,
            simulated_avg_cct_s: sim.map(|s| s.avg_cct_s),
            measured_p95_cct_s: percentile(&ccts, 95.0),
            simulated_p95_cct_s: sim.map(|s| s.p95_cct_s),
            measured_max_cct_s: ccts.last().copied().unwrap_or(0.0),
            simulated_max_cct_s: sim.map(|s| s.max_cct_s),
            multipath,
            relayed_bytes,
            flows_rerouted,
            simulated_relayed_bytes: sim.map(|s| s.relayed_bytes),
            weather,
            // Only over the same coflows: an average of those that finished is not the simulation's.
            avg_difference: sim.filter(|_| ccts.len() == opts.workload.coflows.len()).map(|s| avg / s.avg_cct_s - 1.0),
            decisions,
            simulated_decisions: sim.map(|s| s.decisions),
            bytes_verified: r.gets.iter().filter(|g| exact(&g.outcome)).map(|g| g.bytes).sum(),
            corrupted: r.gets.iter().map(|g| g.corrupted).sum(),
            failed_gets: r.gets.iter().filter(|g| !exact(&g.outcome) && g.outcome != Outcome::Corrupted).count(),
            link_utilization: utilization(&r, &opts.topology),
            wall_s: t.elapsed().as_secs_f64(),
            groups,
            difference_from,
            per_coflow,
        });
    }
    // A policy whose coflows did not all finish has no average to compare.
    let find = |p: &str| results.iter().find(|r| r.policy == p).filter(|r| r.completed == r.coflows);
    let factor = |base: &str| {
        let (v, b) = (find("varys")?, find(base)?);
        let simulated = match (v.simulated_avg_cct_s, b.simulated_avg_cct_s) {
            (Some(v), Some(b)) => Some(b / v),
            _ => None,
        };
        Some(Factor { measured: b.measured_avg_cct_s / v.measured_avg_cct_s, simulated })
    };
    let tcp_over_max_min = find(TCP).and_then(|t| Some(t.measured_avg_cct_s / t.simulated_avg_cct_s?));
    Ok(RunReport {
        hosts: opts.topology.hosts.len(),
        link_bps: link.unwrap_or(opts.topology.hosts[0].uplink).bits_per_sec(),
        port_capacity_bytes_per_sec: port.map_or(0.0, Rate::bytes_per_sec),
        workload: opts.source.clone(),
        coflows: opts.workload.coflows.len(),
        fabric_bytes: crate::workload::fabric_bytes(&opts.workload),
        varys_over_tcp: factor(TCP),
        varys_over_fair: factor("fair"),
        tcp_over_max_min,
        results,
        wall_s: started.elapsed().as_secs_f64(),
    })
}

fn secs(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.3}s"))
}

impl RunReport {
    /// One line per policy whose coflows did not all finish with every byte exact: empty for a
    /// run whose measurement is whole.
    pub fn shortfalls(&self) -> Vec<String> {
        self.results
            .iter()
            .filter(|r| r.completed < r.coflows || r.corrupted > 0 || r.failed_gets > 0)
            .map(|r| {
                format!(
                    "{}: {} of {} coflows completed, {} gets failed, {} bytes corrupted",
                    r.policy, r.completed, r.coflows, r.failed_gets, r.corrupted
                )
            })
            .collect()
    }

    /// The report as a table.
    pub fn table(&self) -> String {
        let name = |r: &PolicyResult| if r.multipath { format!("{}+mp", r.policy) } else { r.policy.clone() };
        let mut s = format!(
            "{:<14} {:>9} {:>12} {:>13} {:>12} {:>13} {:>7} {:>13} {:>9} {:>6} {:>7}\n",
            "policy",
            "completed",
            "measured avg",
            "simulated avg",
            "measured p95",
            "simulated p95",
            "diff",
            "bytes checked",
            "corrupted",
            "util",
            "wall"
        );
        // A figure over no finished coflow is none.
        let measured = |v: f64| if v > 0.0 { format!("{v:.3}s") } else { "-".into() };
        for r in &self.results {
            s.push_str(&format!(
                "{:<14} {:>9} {:>12} {:>13} {:>12} {:>13} {:>7} {:>13} {:>9} {:>6} {:>6.1}s\n",
                name(r),
                format!("{}/{}", r.completed, r.coflows),
                measured(r.measured_avg_cct_s),
                format!("{} {}", if r.policy == TCP { "(fair)" } else { "" }, secs(r.simulated_avg_cct_s)).trim(),
                measured(r.measured_p95_cct_s),
                secs(r.simulated_p95_cct_s),
                r.avg_difference.map_or("-".into(), |d| format!("{:+.1}%", d * 100.0)),
                r.bytes_verified,
                r.corrupted,
                // Of the hosts' links, which on a wide area are not what bounds the flows.
                if r.weather.is_some() { "-".to_string() } else { format!("{:.0}%", r.link_utilization * 100.0) },
                r.wall_s
            ));
        }
        if self.results.iter().any(|r| r.weather.is_some()) {
            s.push_str(&format!(
                "\n{:<14} {:>16} {:>17} {:>15} {:>16} {:>9}\n",
                "wide area", "slowest measured", "slowest simulated", "relayed MB", "relayed MB (sim)", "rerouted"
            ));
            for r in self.results.iter().filter(|r| r.weather.is_some()) {
                s.push_str(&format!(
                    "{:<14} {:>15.3}s {:>17} {:>15.1} {:>16} {:>9}\n",
                    name(r),
                    r.measured_max_cct_s,
                    secs(r.simulated_max_cct_s),
                    r.relayed_bytes as f64 / 1e6,
                    r.simulated_relayed_bytes.map_or("-".into(), |b| format!("{:.1}", b / 1e6)),
                    r.flows_rerouted
                ));
            }
        }
        for r in self.results.iter().filter(|r| !r.groups.is_empty()) {
            s.push_str(&format!(
                "\n{}: measured minus simulated CCT by group{}; policy decisions {} live, {} simulated\n",
                name(r),
                r.difference_from.as_ref().map_or(String::new(), |b| format!(" (most of the difference: {b})")),
                r.decisions.map_or("-".into(), |d| d.to_string()),
                r.simulated_decisions.map_or("-".into(), |d| d.to_string())
            ));
            s.push_str(&format!(
                "  {:<11} {:>7} {:>12} {:>12} {:>10} {:>14} {:>15} {:>15}\n",
                "group",
                "coflows",
                "median err",
                "p95 err",
                "median rel",
                "share of avg",
                "first byte p50",
                "first byte p99"
            ));
            for g in &r.groups {
                // No coflow of the group has a ratio (the simulator finished them at once).
                let relative = match g.median_relative_error {
                    e if e.is_nan() => "-".to_string(),
                    e => format!("{:+.1}%", e * 100.0),
                };
                s.push_str(&format!(
                    "  {:<11} {:>7} {:>10.1}ms {:>10.1}ms {:>10} {:>12.1}ms {:>13.1}ms {:>13.1}ms\n",
                    g.group,
                    g.coflows,
                    g.median_error_ms,
                    g.p95_error_ms,
                    relative,
                    g.share_of_avg_difference_ms,
                    g.first_byte_p50_ms,
                    g.first_byte_p99_ms
                ));
            }
        }
        s.push('\n');
        let f = |x: &Option<Factor>, name: &str| {
            x.as_ref().map(|x| {
                format!(
                    "varys over {name}, average CCT: {:.2}x measured{}\n",
                    x.measured,
                    x.simulated.map_or(String::new(), |s| format!(", {s:.2}x simulated"))
                )
            })
        };
        s.push('\n');
        s.push_str(&f(&self.varys_over_tcp, "tcp").unwrap_or_default());
        s.push_str(&f(&self.varys_over_fair, "fair").unwrap_or_default());
        if let Some(t) = self.tcp_over_max_min {
            s.push_str(&format!("kernel TCP over max-min (tcp measured / fair simulated): {t:.2}x\n"));
        }
        s.push_str(&format!("wall time {:.1}s\n", self.wall_s));
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testbed::GetRecord;

    fn get(coflow: usize, issued: Instant, end: Option<Instant>) -> GetRecord {
        GetRecord {
            coflow,
            src: 0,
            dst: 1,
            size: 1,
            issued,
            outcome: Outcome::Ok,
            end,
            bytes: 1,
            corrupted: 0,
            first_byte_s: None,
            last_byte_s: None,
        }
    }

    #[test]
    fn utilization_counts_the_intervals_in_which_some_coflow_was_pending() {
        // Two hosts at 1 MB/s each way: 4 MB/s in all. Samples each second; coflow 0 is
        // pending over [0, 1.2] s and coflow 1 over [0.9, 1.6] s, so the windows centred at 0.5 s
        // and 1.5 s count; coflow 2 over [2.6, 2.9] s misses the third window's centre (2.5 s),
        // and a coflow whose gets never ended is pending only at its start (3.2 s).
        let topology = Topology::uniform(2, Rate::from_bytes_per_sec(1e6)).unwrap();
        let t0 = Instant::now();
        let at = |s: f64| t0 + Duration::from_secs_f64(s);
        let starts = vec![at(0.0), at(0.9), at(2.6), at(3.2)];
        let gets = vec![
            get(0, at(0.0), Some(at(1.0))),
            get(0, at(0.0), Some(at(1.2))),
            get(1, at(0.9), Some(at(1.6))),
            get(2, at(2.6), Some(at(2.9))),
            get(3, at(3.2), None),
        ];
        // Per host: bytes sent by it and sent to it, cumulative.
        let counters = [(0, 0), (1000, 600), (1500, 1100), (4000, 4000), (4000, 4000)];
        let samples = counters.iter().enumerate().map(|(i, &(a, b))| (at(i as f64), vec![(a, b), (b, a)])).collect();
        let r = Replayed { t0, starts, gets, samples };
        // Windows one and two moved (1000 + 600) * 2 and (500 + 500) * 2 bytes in two seconds.
        let expected = (3200.0 + 2000.0) / (2.0 * 4e6);
        assert!((utilization(&r, &topology) - expected).abs() < 1e-12, "{}", utilization(&r, &topology));
    }
}
