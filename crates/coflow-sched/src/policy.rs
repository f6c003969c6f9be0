//! Policies by short name, as every command line and config file selects them.

use crate::scheduler::Scheduler;
use crate::{DeadlineMode, DeadlineScheduler, Fair, FlowOrder, FlowPriority, Order, Varys, VarysConfig};
use crate::{Intra, Mrtf, SiphonConfig, SiphonMc};

/// The short names of every policy, in report order.
pub const NAMES: &[&str] = &[
    "varys",
    "varys-deadline",
    "vc",
    "scf",
    "ncf",
    "tcf",
    "fifo",
    "fifo-strict",
    "pfp",
    "edf",
    "fair",
    "sincronia",
    "sincronia-madd",
    "aalo",
    "karuna",
];

/// The policies of the wide-area model (Siphon), not part of `all`: the Monte Carlo order and
/// its baseline, each also with Largest Flow Group First inside coflows (`+lfgf`).
pub const WAN_NAMES: &[&str] = &["siphon-mc", "mrtf", "siphon-mc+lfgf", "mrtf+lfgf"];

/// Variants that need a workload with dependencies to differ from their base policy, not part of
/// `all`: `aalo-job` ranks coflows by their job's bytes sent (job-aware D-CLAS).
pub const JOB_NAMES: &[&str] = &["aalo-job"];

/// No policy has this name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown policy {name:?}; known policies: {}", NAMES.join(", "))]
pub struct UnknownPolicy {
    /// The name asked for.
    pub name: String,
}

/// A fresh instance of the policy called `name`, with the source's default parameters.
pub fn by_name(name: &str) -> Result<Box<dyn Scheduler>, UnknownPolicy> {
    match name {
        "varys" => Ok(Box::new(Varys::default())),
        "varys-deadline" => Ok(Box::new(DeadlineScheduler::new(DeadlineMode::Varys))),
        "vc" => Ok(Box::new(DeadlineScheduler::new(DeadlineMode::VirtualCluster))),
        "scf" => Ok(Box::new(Varys::new(VarysConfig::baseline(Order::Scf)))),
        "ncf" => Ok(Box::new(Varys::new(VarysConfig::baseline(Order::Ncf)))),
        "tcf" => Ok(Box::new(Varys::new(VarysConfig::baseline(Order::Tcf)))),
        "fifo" => Ok(Box::new(Varys::new(VarysConfig::baseline(Order::Fifo)))),
        "fifo-strict" => Ok(Box::new(Varys::new(VarysConfig::baseline(Order::FifoStrict)))),
        "pfp" => Ok(Box::new(FlowPriority::new(FlowOrder::SmallestRemaining))),
        "edf" => Ok(Box::new(FlowPriority::new(FlowOrder::EarliestDeadline))),
        "fair" => Ok(Box::new(Fair::default())),
        "siphon-mc" | "mrtf" | "siphon-mc+lfgf" | "mrtf+lfgf" => Ok(seeded(name, 0).expect("a wide-area name")),
        "sincronia" => Ok(Box::new(crate::Sincronia::greedy())),
        "sincronia-madd" => Ok(Box::new(crate::Sincronia::with_madd())),
        "aalo" => Ok(Box::new(crate::Blinded::new(crate::Aalo::default()))),
        "aalo-job" => Ok(Box::new(crate::Blinded::new(crate::Aalo::new(crate::AaloConfig {
            job_aware: true,
            ..Default::default()
        })))),
        "karuna" => Ok(Box::new(crate::Karuna::default())),
        _ => Err(UnknownPolicy { name: name.to_string() }),
    }
}

/// A fresh instance of the policy called `name`, whose randomness (if it has any) is seeded
/// with `seed`: `siphon-mc` draws its Monte Carlo bandwidths from it. Other policies ignore it.
pub fn seeded(name: &str, seed: u64) -> Result<Box<dyn Scheduler>, UnknownPolicy> {
    let intra = if name.ends_with("+lfgf") { Intra::Lfgf } else { Intra::Madd };
    match name {
        "siphon-mc" | "siphon-mc+lfgf" => {
            Ok(Box::new(SiphonMc::new(SiphonConfig { seed, intra, ..Default::default() })))
        }
        "mrtf" | "mrtf+lfgf" => Ok(Box::new(Mrtf::new(intra))),
        _ => by_name(name),
    }
}

/// Parses a comma-separated list of policy names; `all` stands for every policy.
pub fn parse_list(list: &str) -> Result<Vec<&'static str>, UnknownPolicy> {
    let mut out = Vec::new();
    for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        if name == "all" {
            out.extend_from_slice(NAMES);
            continue;
        }
        let known = NAMES
            .iter()
            .chain(WAN_NAMES)
            .chain(JOB_NAMES)
            .find(|&&n| n == name)
            .ok_or_else(|| UnknownPolicy { name: name.to_string() })?;
        out.push(*known);
    }
    out.dedup();
    Ok(out)
}
