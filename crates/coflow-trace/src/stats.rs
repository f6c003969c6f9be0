//! Summary statistics of a workload: counts, bytes, machines, arrivals and the Varys bin mix.

use std::fmt;

use coflow_core::{Bin, Bytes, Nanos, Workload};
use serde::{Serialize, Serializer};

/// A summary of a workload, printable as a table ([`fmt::Display`]) or as JSON ([`Serialize`]).
///
/// In JSON, byte counts are plain integers and times are integer nanoseconds, under names that end
/// in their unit (`total_bytes`, `arrival_span_ns`); shares are fractions between 0 and 1.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TraceStats {
    /// The number of coflows.
    pub coflows: usize,
    /// The number of flows.
    pub flows: usize,
    /// The flows whose source and destination are the same machine (they cross no port).
    pub local_flows: usize,
    /// The bytes of all flows, local ones included.
    #[serde(rename = "total_bytes", serialize_with = "bytes")]
    pub total: Bytes,
    /// The bytes of local flows.
    #[serde(rename = "local_bytes", serialize_with = "bytes")]
    pub local: Bytes,
    /// The fabric size the workload declares.
    pub machines: u32,
    /// The machines that send or receive at least one flow.
    pub machines_used: usize,
    /// The first arrival, or zero for an empty workload.
    #[serde(rename = "first_arrival_ns", serialize_with = "nanos")]
    pub first_arrival: Nanos,
    /// The last arrival, or zero for an empty workload.
    #[serde(rename = "last_arrival_ns", serialize_with = "nanos")]
    pub last_arrival: Nanos,
    /// The last arrival minus the first.
    #[serde(rename = "arrival_span_ns", serialize_with = "nanos")]
    pub arrival_span: Nanos,
    /// One entry per Varys bin, in [`Bin::ALL`] order (SN, LN, SW, LW).
    pub bins: [BinStats; 4],
}

/// The coflows of one Varys bin.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BinStats {
    /// The bin.
    #[serde(serialize_with = "bin")]
    pub bin: Bin,
    /// Its number of coflows.
    pub coflows: usize,
    /// Its share of all coflows, between 0 and 1 (0 for an empty workload).
    pub coflow_share: f64,
    /// Its bytes.
    #[serde(serialize_with = "bytes")]
    pub bytes: Bytes,
    /// Its share of all bytes, between 0 and 1 (0 when the workload has no bytes).
    pub byte_share: f64,
}

/// Computes the summary of a workload.
pub fn stats(w: &Workload) -> TraceStats {
    let mut bins =
        Bin::ALL.map(|bin| BinStats { bin, coflows: 0, coflow_share: 0.0, bytes: Bytes::ZERO, byte_share: 0.0 });
    // Indexed by machine; grown on demand so that even an invalid workload cannot make it panic.
    let mut used: Vec<bool> = vec![false; w.machines as usize];
    let (mut flows, mut local_flows, mut local) = (0, 0, Bytes::ZERO);
    for c in &w.coflows {
        let b = &mut bins[bin_index(c.bin())];
        b.coflows += 1;
        b.bytes += c.total_bytes();
        flows += c.flows.len();
        for f in &c.flows {
            for m in [f.src.index(), f.dst.index()] {
                if m >= used.len() {
                    used.resize(m + 1, false);
                }
                used[m] = true;
            }
            if f.is_local() {
                local_flows += 1;
                local += f.size;
            }
        }
    }
    let total: Bytes = bins.iter().map(|b| b.bytes).sum();
    for b in &mut bins {
        b.coflow_share = share(b.coflows as f64, w.coflows.len() as f64);
        b.byte_share = share(b.bytes.as_f64(), total.as_f64());
    }
    let first_arrival = w.coflows.iter().map(|c| c.arrival).min().unwrap_or(Nanos::ZERO);
    let last_arrival = w.coflows.iter().map(|c| c.arrival).max().unwrap_or(Nanos::ZERO);
    TraceStats {
        coflows: w.coflows.len(),
        flows,
        local_flows,
        total,
        local,
        machines: w.machines,
        machines_used: used.iter().filter(|&&u| u).count(),
        first_arrival,
        last_arrival,
        arrival_span: last_arrival.saturating_sub(first_arrival),
        bins,
    }
}

/// The position of a bin in [`Bin::ALL`].
fn bin_index(b: Bin) -> usize {
    match b {
        Bin::SN => 0,
        Bin::LN => 1,
        Bin::SW => 2,
        Bin::LW => 3,
    }
}

/// `part / whole`, or 0 when the whole is 0.
fn share(part: f64, whole: f64) -> f64 {
    if whole > 0.0 { part / whole } else { 0.0 }
}

impl fmt::Display for TraceStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "coflows   {}", self.coflows)?;
        writeln!(f, "flows     {} ({} local, crossing no port)", self.flows, self.local_flows)?;
        writeln!(f, "bytes     {} ({} bytes; {} local)", self.total, self.total.get(), self.local)?;
        writeln!(f, "machines  {} ({} used)", self.machines, self.machines_used)?;
        writeln!(f, "arrivals  {} to {} (span {})", self.first_arrival, self.last_arrival, self.arrival_span)?;
        writeln!(f)?;
        writeln!(f, "bin  {:>9}  {:>8}  {:>12}  {:>8}", "coflows", "share", "bytes", "share")?;
        for b in &self.bins {
            writeln!(
                f,
                "{:<3}  {:>9}  {:>7.2}%  {:>12}  {:>7.2}%",
                b.bin.name(),
                b.coflows,
                100.0 * b.coflow_share,
                b.bytes.to_string(),
                100.0 * b.byte_share
            )?;
        }
        Ok(())
    }
}

/// Serializes [`Bytes`] as its integer count.
fn bytes<S: Serializer>(b: &Bytes, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(b.get())
}

/// Serializes [`Nanos`] as its integer count.
fn nanos<S: Serializer>(t: &Nanos, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(t.get())
}

/// Serializes a [`Bin`] as its short name.
fn bin<S: Serializer>(b: &Bin, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(b.name())
}
