//! `coflow demo`: a coordinator and N agents in this process on loopback, each port capped, a
//! scaled synthetic workload replayed with real bytes under each policy, and the measured CCTs
//! printed next to what the simulator predicts for the same workload, rates and policy code.
//!
//! Decisions that keep measured and simulated comparable:
//! - The small-coflow bypass is off (`bypass_threshold_bytes = 0`): the simulator does not model
//!   it, and with every coflow scheduled both run exactly the same policy.
//! - Pieces are put before the clock starts (the map stage, time-decoupled); a coflow "arrives"
//!   when its reducers issue their gets, and its CCT runs from its scheduled arrival to its last
//!   byte, so control latency (get announcement, rate push) counts against the live system.
//! - Total bytes are kept modest (default 600 MB per policy) because every byte crosses loopback
//!   twice (agent to agent over TCP, agent to client over gRPC) on a machine that may have two
//!   cores; sizes and arrival times are scaled together, which keeps the load.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Args;
use coflow_client::{ClusterToken, CoflowOptions};
use coflow_core::{Nanos, Rate, Workload};
use coflow_sim::{SimConfig, Summary, percentile, simulate};
use coflow_testkit::{Cluster, ClusterConfig};
use serde::Serialize;

use crate::output::say;
use crate::workload::WorkloadArgs;

/// Options of `coflow demo`.
#[derive(Debug, Args)]
pub(crate) struct DemoArgs {
    #[arg(
        long,
        default_value = "varys,fair",
        help = crate::policies::help("Policies to run, comma-separated (each the same code as in `coflow sim`)")
    )]
    policies: String,
    /// Number of agents (machines).
    #[arg(long, default_value_t = 8)]
    agents: u32,
    /// Each agent's port capacity, e.g. `100Mbps` (12.5 MB/s: the default run takes well under a
    /// minute, and CCTs of seconds dwarf the few milliseconds of control latency).
    #[arg(long, default_value = "100Mbps")]
    port_rate: String,
    #[command(flatten)]
    workload: WorkloadArgs,
    /// Write the results as JSON to this file (`-`: standard output).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Run the cluster with the shared token in clear instead of mutual TLS. TLS (certificates
    /// made in a temporary directory) is the default: on a quiet machine it cost about 3% of the
    /// measured CCT (README).
    #[arg(long)]
    plaintext: bool,
}

#[derive(Debug, Serialize)]
struct PolicyResult {
    policy: String,
    coflows: usize,
    completed: usize,
    failed_gets: usize,
    measured_avg_cct_s: f64,
    measured_p95_cct_s: f64,
    simulated_avg_cct_s: f64,
    simulated_p95_cct_s: f64,
    avg_error: f64,
    wall_s: f64,
}

#[derive(Debug, Serialize)]
struct Report {
    agents: u32,
    port_rate_bytes_per_sec: f64,
    workload: String,
    coflows: usize,
    fabric_bytes: u64,
    results: Vec<PolicyResult>,
    wall_s: f64,
}

pub(crate) fn run(args: DemoArgs) -> Result<()> {
    crate::output::check(args.json.as_deref())?;
    let outs = &[args.json.as_deref()];
    let port: Rate = args.port_rate.parse().with_context(|| format!("--port-rate {:?}", args.port_rate))?;
    crate::policies::refuse_tcp(&args.policies, "demo")?;
    let policies = coflow_sched::policy::parse_list(&args.policies).context("--policies")?;
    if policies.is_empty() {
        bail!("--policies names no policy");
    }
    if args.agents == 0 {
        bail!("--agents must be at least 1");
    }
    let (w, source) = coflow_testbed::workload::build(&args.workload.spec(), args.agents, port, 600_000_000)
        .context("the workload (--trace, --total-bytes, --coflows, --seed, --load, --agents)")?;
    say!(
        outs,
        "coflow demo: {} agents on loopback{}, ports capped at {port}, {source}",
        args.agents,
        if args.plaintext { " with the token in clear" } else { " over mutual TLS" }
    );
    say!(
        outs,
        "  {} coflows, {} flows, {:.0} MB across the fabric; bypass off (the simulator does not model it)",
        w.coflows.len(),
        w.coflows.iter().map(|c| c.flows.len()).sum::<usize>(),
        coflow_testbed::workload::fabric_bytes(&w) as f64 / 1e6
    );
    let started = Instant::now();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("tokio runtime")?;
    let mut results = Vec::new();
    say!(outs);
    say!(
        outs,
        "{:<14} {:>9} {:>13} {:>13} {:>13} {:>13} {:>8} {:>7}",
        "policy",
        "completed",
        "measured avg",
        "simulated avg",
        "measured p95",
        "simulated p95",
        "avg err",
        "wall"
    );
    for &p in &policies {
        let sim = simulate(&w, coflow_sched::policy::by_name(p)?, &SimConfig::big_switch(port))?;
        let s = Summary::of(&sim, None);
        let t = Instant::now();
        let (ccts, failed) = rt.block_on(replay(&w, p, args.agents, port, !args.plaintext))?;
        if std::env::var_os("COFLOW_DEMO_DEBUG").is_some() {
            for (o, m) in sim.outcomes.iter().zip(&ccts) {
                let c = w.coflows.iter().find(|c| c.id == o.id).expect("same workload");
                let sim_cct = o.cct().map_or(f64::NAN, Nanos::as_secs_f64);
                say!(
                    outs,
                    "  coflow {:>3} at {:>7.3}s flows {:>3} bytes {:>11} simulated {:>7.3}s measured {:>7.3}s",
                    o.id,
                    c.arrival.as_secs_f64(),
                    c.flows.len(),
                    c.total_bytes().get(),
                    sim_cct,
                    m.unwrap_or(f64::NAN)
                );
            }
        }
        let mut sorted: Vec<f64> = ccts.iter().flatten().copied().collect();
        sorted.sort_by(f64::total_cmp);
        let avg = sorted.iter().sum::<f64>() / sorted.len().max(1) as f64;
        let r = PolicyResult {
            policy: p.to_string(),
            coflows: w.coflows.len(),
            completed: sorted.len(),
            failed_gets: failed,
            measured_avg_cct_s: avg,
            measured_p95_cct_s: percentile(&sorted, 95.0),
            simulated_avg_cct_s: s.avg_cct_s,
            simulated_p95_cct_s: s.p95_cct_s,
            avg_error: (avg - s.avg_cct_s) / s.avg_cct_s,
            wall_s: t.elapsed().as_secs_f64(),
        };
        say!(
            outs,
            "{:<14} {:>9} {:>12.3}s {:>12.3}s {:>12.3}s {:>12.3}s {:>7.1}% {:>6.1}s",
            r.policy,
            format!("{}/{}", r.completed, r.coflows),
            r.measured_avg_cct_s,
            r.simulated_avg_cct_s,
            r.measured_p95_cct_s,
            r.simulated_p95_cct_s,
            r.avg_error * 100.0,
            r.wall_s
        );
        results.push(r);
    }
    let wall = started.elapsed().as_secs_f64();
    say!(outs);
    if let (Some(v), Some(f)) =
        (results.iter().find(|r| r.policy == "varys"), results.iter().find(|r| r.policy == "fair"))
    {
        say!(
            outs,
            "varys vs fair, average CCT: {:.2}x measured, {:.2}x simulated",
            f.measured_avg_cct_s / v.measured_avg_cct_s,
            f.simulated_avg_cct_s / v.simulated_avg_cct_s
        );
    }
    say!(outs, "wall time {wall:.1}s");
    if let Some(path) = &args.json {
        let report = Report {
            agents: args.agents,
            port_rate_bytes_per_sec: port.bytes_per_sec(),
            workload: source,
            coflows: w.coflows.len(),
            fabric_bytes: coflow_testbed::workload::fabric_bytes(&w),
            results,
            wall_s: wall,
        };
        crate::output::json(path, &report)?;
    }
    Ok(())
}

/// Replays the workload on a fresh cluster under `policy`; returns each coflow's measured CCT
/// (seconds; `None` if a get failed) and the number of failed gets.
async fn replay(w: &Workload, policy: &str, agents: u32, port: Rate, tls: bool) -> Result<(Vec<Option<f64>>, usize)> {
    let mut cfg = ClusterConfig::new(agents, port.bytes_per_sec(), policy);
    cfg.token = ClusterToken::new("coflow-demo")?;
    cfg.tls = tls;
    let cluster = Cluster::start(cfg).await.context("starting the demo cluster")?;
    let mut clients = Vec::new();
    for m in 0..agents as usize {
        clients.push(cluster.client(m).await?);
    }
    // The map stage: every piece is put before the clock starts.
    let mut expected = Vec::new();
    for (k, c) in w.coflows.iter().enumerate() {
        let opts = CoflowOptions { name: format!("coflow-{}", c.id), ..Default::default() };
        let id = clients[0].register(c.flows.len() as u32, opts).await?;
        let mut sums = Vec::new();
        let mut puts = Vec::new();
        for (i, f) in c.flows.iter().enumerate() {
            let bytes = coflow_testbed::workload::piece((k as u64) << 32 | i as u64, f.size.get() as usize);
            sums.push(crc32fast::hash(&bytes));
            let client = clients[f.src.index()].clone();
            puts.push(async move { client.put(id, &format!("f{i}"), bytes).await });
        }
        for r in futures_join(puts).await {
            r?;
        }
        expected.push((id, sums));
    }
    let t0 = tokio::time::Instant::now() + Duration::from_millis(100);
    let mut tasks = tokio::task::JoinSet::new();
    for (k, c) in w.coflows.iter().enumerate() {
        let start = t0 + Duration::from_nanos((c.arrival - w.coflows[0].arrival).get());
        let (id, sums) = expected[k].clone();
        let gets: Vec<_> = c
            .flows
            .iter()
            .enumerate()
            .map(|(i, f)| (clients[f.dst.index()].clone(), format!("f{i}"), sums[i]))
            .collect();
        tasks.spawn(async move {
            tokio::time::sleep_until(start).await;
            let mut each = tokio::task::JoinSet::new();
            for (client, data_id, sum) in gets {
                each.spawn(async move {
                    let mut h = crc32fast::Hasher::new();
                    let r = client.get_with(id, &data_id, |b| h.update(b)).await;
                    r.is_ok() && h.finalize() == sum
                });
            }
            let mut failed = 0;
            while let Some(ok) = each.join_next().await {
                failed += usize::from(!ok.unwrap_or(false));
            }
            (k, start.elapsed().as_secs_f64(), failed)
        });
    }
    let mut ccts = vec![None; w.coflows.len()];
    let mut failed = 0;
    while let Some(r) = tasks.join_next().await {
        let (k, cct, f) = r?;
        failed += f;
        if f == 0 {
            ccts[k] = Some(cct);
        }
    }
    for (id, _) in &expected {
        let _ = clients[0].unregister(*id).await;
    }
    cluster.shutdown().await;
    Ok((ccts, failed))
}

async fn futures_join<T: Send + 'static>(futs: Vec<impl std::future::Future<Output = T> + Send + 'static>) -> Vec<T> {
    let mut set = tokio::task::JoinSet::new();
    for (i, f) in futs.into_iter().enumerate() {
        set.spawn(async move { (i, f.await) });
    }
    let mut out: Vec<Option<T>> = (0..set.len()).map(|_| None).collect();
    while let Some(r) = set.join_next().await {
        let (i, v) = r.expect("put task");
        out[i] = Some(v);
    }
    out.into_iter().map(|v| v.expect("joined")).collect()
}
