//! A workload replayed with real bytes on an in-process [`Cluster`] under one policy, measured
//! against what the simulator predicts for the same workload, rates and policy code: what
//! `coflow demo` shows.
//!
//! The replay is the testbed's (`coflow_testbed`), on loopback instead of network namespaces:
//! the same pieces (`coflow_testbed::workload::piece_seed`, `data_id`), the same map stage
//! (every piece put before the clock starts), the same CCT (a coflow's scheduled arrival to its
//! last verified byte) and the same prediction (`coflow_testbed::workload::simulated`).

use std::time::{Duration, Instant};

use coflow_client::{ClientError, ClusterToken, CoflowOptions};
use coflow_core::{Rate, Workload};
use coflow_sim::percentile;
use coflow_testbed::workload::{data_id, piece, piece_seed, simulated};
use serde::Serialize;

use crate::{Cluster, ClusterConfig, ClusterError};

/// Why a replay could not run.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The cluster did not start.
    #[error("starting the cluster")]
    Start(#[from] ClusterError),
    /// A call of the map stage failed.
    #[error("the map stage")]
    Client(#[from] ClientError),
    /// The simulated side could not run (an unknown policy).
    #[error("simulating the workload")]
    Simulate(#[from] coflow_testbed::TestbedError),
    /// A replay task panicked.
    #[error("a replay task failed: {0}")]
    Task(String),
}

/// One policy's replay, measured against simulated.
#[derive(Clone, Debug, Serialize)]
pub struct PolicyResult {
    /// The policy.
    pub policy: String,
    /// Coflows replayed.
    pub coflows: usize,
    /// Of them, those whose every get returned exact bytes.
    pub completed: usize,
    /// Gets that failed or returned other bytes.
    pub failed_gets: usize,
    /// Measured average CCT over the completed coflows, in seconds.
    pub measured_avg_cct_s: f64,
    /// Their 95th percentile.
    pub measured_p95_cct_s: f64,
    /// Simulated average CCT, in seconds.
    pub simulated_avg_cct_s: f64,
    /// Its 95th percentile.
    pub simulated_p95_cct_s: f64,
    /// Measured average over simulated, less 1.
    pub avg_error: f64,
    /// Wall time of the replay, in seconds.
    pub wall_s: f64,
    /// Each coflow's measured CCT in seconds (`None` if a get failed), in workload order.
    pub measured: Vec<Option<f64>>,
    /// Each coflow's simulated CCT in seconds (NaN if it did not finish), in workload order.
    pub simulated: Vec<f64>,
}

/// Replays `w` on a fresh cluster of `agents` agents with ports at `port` under `policy` (mutual
/// TLS if `tls`, else the token in clear), beside the simulator's prediction.
pub async fn replay_policy(
    w: &Workload,
    policy: &str,
    agents: u32,
    port: Rate,
    tls: bool,
) -> Result<PolicyResult, ReplayError> {
    let sim = simulated(w, policy, port)?;
    let started = Instant::now();
    let (measured, failed) = replay(w, policy, agents, port, tls).await?;
    let mut sorted: Vec<f64> = measured.iter().flatten().copied().collect();
    sorted.sort_by(f64::total_cmp);
    let avg = sorted.iter().sum::<f64>() / sorted.len().max(1) as f64;
    Ok(PolicyResult {
        policy: policy.to_string(),
        coflows: w.coflows.len(),
        completed: sorted.len(),
        failed_gets: failed,
        measured_avg_cct_s: avg,
        measured_p95_cct_s: percentile(&sorted, 95.0),
        simulated_avg_cct_s: sim.avg_cct_s,
        simulated_p95_cct_s: sim.p95_cct_s,
        avg_error: (avg - sim.avg_cct_s) / sim.avg_cct_s,
        wall_s: started.elapsed().as_secs_f64(),
        measured,
        simulated: sim.ccts,
    })
}

/// Replays the workload on a fresh cluster under `policy`; returns each coflow's measured CCT
/// (seconds; `None` if a get failed) and the number of failed gets.
async fn replay(
    w: &Workload,
    policy: &str,
    agents: u32,
    port: Rate,
    tls: bool,
) -> Result<(Vec<Option<f64>>, usize), ReplayError> {
    let mut cfg = ClusterConfig::new(agents, port.bytes_per_sec(), policy);
    cfg.token = ClusterToken::new("coflow-demo").expect("a valid token");
    cfg.tls = tls;
    let cluster = Cluster::start(cfg).await?;
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
        let mut puts = tokio::task::JoinSet::new();
        for (i, f) in c.flows.iter().enumerate() {
            let bytes = piece(piece_seed(k, i), f.size.get() as usize);
            sums.push(crc32fast::hash(&bytes));
            let client = clients[f.src.index()].clone();
            puts.spawn(async move { client.put(id, &data_id(i), bytes).await });
        }
        while let Some(r) = puts.join_next().await {
            r.map_err(|e| ReplayError::Task(e.to_string()))??;
        }
        expected.push((id, sums));
    }
    let first = w.coflows.first().map_or(coflow_core::Nanos::ZERO, |c| c.arrival);
    let t0 = tokio::time::Instant::now() + Duration::from_millis(100);
    let mut tasks = tokio::task::JoinSet::new();
    for (k, c) in w.coflows.iter().enumerate() {
        let start = t0 + Duration::from_nanos((c.arrival - first).get());
        let (id, sums) = expected[k].clone();
        let gets: Vec<_> =
            c.flows.iter().enumerate().map(|(i, f)| (clients[f.dst.index()].clone(), data_id(i), sums[i])).collect();
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
        let (k, cct, f) = r.map_err(|e| ReplayError::Task(e.to_string()))?;
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
