//! How closely a run follows its simulation, coflow by coflow: the error of each coflow's
//! measured CCT against its simulated one, summarized per group of coflows (the Varys paper's
//! bins, and the coflows under 1 MB), with the share of the average's difference each group
//! makes and the control path its gets saw, so that a report says where a difference comes from.

use coflow_core::{Bin, Coflow};
use serde::Serialize;

/// One coflow of a run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CoflowFidelity {
    /// Its index in the workload.
    pub index: usize,
    /// Its Varys bin (`SN`, `LN`, `SW`, `LW`).
    pub bin: &'static str,
    /// Its bytes across the fabric.
    pub bytes: u64,
    /// Its flows.
    pub flows: usize,
    /// Measured CCT, seconds (`None` if a get failed).
    pub measured_s: Option<f64>,
    /// Simulated CCT, seconds.
    pub simulated_s: f64,
    /// The slowest of its gets' first bytes at their clients, seconds from the arrival.
    pub first_byte_s: Option<f64>,
}

/// A group of coflows.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GroupFidelity {
    /// The group: a Varys bin, or `under 1 MB`.
    pub group: String,
    /// Coflows in it that completed.
    pub coflows: usize,
    /// Median of measured minus simulated CCT, milliseconds.
    pub median_error_ms: f64,
    /// 95th percentile of it.
    pub p95_error_ms: f64,
    /// Median of measured over simulated, minus one, over the coflows the simulator gives a
    /// positive CCT (one that crosses no link, all inside a datacenter, takes no time there and
    /// has no ratio); not a number if none does.
    pub median_relative_error: f64,
    /// What the group adds to the run's average measured minus simulated CCT, milliseconds
    /// (the groups of bins add up to the whole difference).
    pub share_of_avg_difference_ms: f64,
    /// Median of its gets' first bytes at their clients (from the get's issue), milliseconds.
    pub first_byte_p50_ms: f64,
    /// 99th percentile of it.
    pub first_byte_p99_ms: f64,
}

/// Coflows under this many bytes form a group of their own.
pub const SMALL_BYTES: u64 = 1_000_000;

fn quantile(v: &mut [f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[(((v.len() - 1) as f64) * q).round() as usize]
}

/// The coflow's row, from its measured and simulated CCT and its slowest first byte.
pub fn coflow_row(
    index: usize,
    c: &Coflow,
    measured_s: Option<f64>,
    simulated_s: f64,
    first_byte_s: Option<f64>,
) -> CoflowFidelity {
    let longest = c.flows.iter().map(|f| f.size).max().unwrap_or_default();
    CoflowFidelity {
        index,
        bin: Bin::of(longest, c.flows.len()).name(),
        bytes: c.total_bytes().get(),
        flows: c.flows.len(),
        measured_s,
        simulated_s,
        first_byte_s,
    }
}

/// The groups' rows: the four bins (those with coflows), then the coflows under 1 MB.
/// `first_bytes` gives, per coflow index, its gets' first bytes in seconds.
pub fn groups(rows: &[CoflowFidelity], first_bytes: &[Vec<f64>]) -> Vec<GroupFidelity> {
    let completed = rows.iter().filter(|r| r.measured_s.is_some()).count().max(1);
    let mut out = Vec::new();
    let names = Bin::ALL.iter().map(|b| b.name().to_string()).chain(["under 1 MB".to_string()]);
    for name in names {
        let member = |r: &CoflowFidelity| if name == "under 1 MB" { r.bytes < SMALL_BYTES } else { r.bin == name };
        let done: Vec<&CoflowFidelity> = rows.iter().filter(|r| member(r) && r.measured_s.is_some()).collect();
        if done.is_empty() {
            continue;
        }
        let mut errors: Vec<f64> = done.iter().map(|r| (r.measured_s.unwrap_or(0.0) - r.simulated_s) * 1e3).collect();
        let mut relative: Vec<f64> = done
            .iter()
            .filter(|r| r.simulated_s > 0.0)
            .map(|r| r.measured_s.unwrap_or(0.0) / r.simulated_s - 1.0)
            .collect();
        let share = errors.iter().sum::<f64>() / completed as f64;
        let mut first: Vec<f64> =
            done.iter().flat_map(|r| first_bytes.get(r.index).into_iter().flatten().map(|s| s * 1e3)).collect();
        out.push(GroupFidelity {
            group: name,
            coflows: done.len(),
            median_error_ms: quantile(&mut errors, 0.5),
            p95_error_ms: quantile(&mut errors, 0.95),
            median_relative_error: quantile(&mut relative, 0.5),
            share_of_avg_difference_ms: share,
            first_byte_p50_ms: quantile(&mut first, 0.5),
            first_byte_p99_ms: quantile(&mut first, 0.99),
        });
    }
    out
}

/// The bin (not the under-1-MB group) that adds most to the average's difference.
pub fn main_source(groups: &[GroupFidelity]) -> Option<&GroupFidelity> {
    groups
        .iter()
        .filter(|g| g.group != "under 1 MB")
        .max_by(|a, b| a.share_of_avg_difference_ms.abs().total_cmp(&b.share_of_avg_difference_ms.abs()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(index: usize, bin: &'static str, bytes: u64, measured: Option<f64>, simulated: f64) -> CoflowFidelity {
        CoflowFidelity { index, bin, bytes, flows: 1, measured_s: measured, simulated_s: simulated, first_byte_s: None }
    }

    /// Four coflows, computed by hand: two short and narrow ones 10 ms and 30 ms slow, a long one
    /// 200 ms slow, a failed one left out of every figure.
    #[test]
    fn groups_split_the_difference_by_bin() {
        let rows = [
            row(0, "SN", 10_000, Some(0.020), 0.010),
            row(1, "SN", 500_000, Some(0.130), 0.100),
            row(2, "LN", 50_000_000, Some(2.200), 2.000),
            row(3, "SN", 10_000, None, 0.010),
        ];
        let first = vec![vec![0.004, 0.006], vec![0.008], vec![0.002], vec![]];
        let g = groups(&rows, &first);
        assert_eq!(g.iter().map(|g| g.group.as_str()).collect::<Vec<_>>(), ["SN", "LN", "under 1 MB"]);
        let sn = &g[0];
        assert_eq!(sn.coflows, 2);
        assert!((sn.median_error_ms - 30.0).abs() < 1e-9, "{sn:?}");
        // (10 + 30) ms over the 3 coflows that completed.
        assert!((sn.share_of_avg_difference_ms - 40.0 / 3.0).abs() < 1e-9, "{sn:?}");
        assert!((g[1].share_of_avg_difference_ms - 200.0 / 3.0).abs() < 1e-9);
        assert!((sn.first_byte_p50_ms - 6.0).abs() < 1e-9, "{sn:?}");
        assert!((g[0].share_of_avg_difference_ms + g[1].share_of_avg_difference_ms - 80.0).abs() < 1e-9);
        assert_eq!(main_source(&g).unwrap().group, "LN");
        assert!((g[2].median_relative_error - 1.0).abs() < 1e-9, "20 ms for 10 ms, and 130 for 100: {:?}", g[2]);
        // A coflow the simulator finishes at once (all inside a datacenter) has no ratio.
        let local = [row(0, "SN", 10_000, Some(0.003), 0.0), row(1, "SN", 10_000, Some(0.020), 0.010)];
        let g = groups(&local, &[vec![], vec![]]);
        assert!((g[0].median_relative_error - 1.0).abs() < 1e-9, "{:?}", g[0]);
        let g = groups(&local[..1], &[vec![]]);
        assert!(g[0].median_relative_error.is_nan(), "{:?}", g[0]);
    }
}
