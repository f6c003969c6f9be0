//! The reference simulator's model (CoflowSim, the simulator the coflow papers' trace results
//! come from) as rules that can be switched on one at a time (`coflow sim --model coflowsim`,
//! `--coflowsim-rules`), so that a difference from our exact model can be attributed.
//!
//! Rules of the workload, applied by [`workload()`] before any policy runs (the trace becomes the
//! reference's flows and times):
//! - `rounding`: each reducer's bytes rounded up to whole MiB and to a multiple of `nM` MiB (the
//!   number of distinct mapper machines), and one flow of `bytes / nM` (at least 1 MiB) from every
//!   mapper: `nM × nR` flows, all flows into one reducer equal.
//! - `ports`: a flow whose mapper and reducer share a machine uses that machine's uplink and
//!   downlink (receivers become machines `N + r`, so every flow crosses a sender's uplink and a
//!   receiver's downlink, and none is local).
//! - `clock`: one second is 1,024 units and the trace's milliseconds are units, so arrivals come
//!   1,000/1,024 as late.
//! - `epochs`: coflows are admitted at the start of 10,240-unit epochs, each one at the start of
//!   the epoch in which its arrival falls within the next epoch (up to 10,240 units early), and
//!   its CCT counts from there.
//!
//! Rules of the policies, applied by [`policy()`]:
//! - `timing`: coflow-level policies decide only at arrivals and coflow departures (no decision
//!   after single flows, no starvation-freedom timers); flow-level ones after finished flows at
//!   most once per 8-unit quantum.
//! - `keys`: static order keys (SEBF on the initial Γ, SCF on the largest flow, NCF on
//!   `min(nM, nR)`, TCF, its LCF, on total bytes) and backfill in order of arrival plus initial Γ.
//! - `blocking`: a coflow's MADD is skipped only for a full port where it still has bytes (not
//!   for one where its flows have all finished).
//! - `share`: before backfill, the coflows MADD skipped because a resource of theirs was full
//!   share what MADD left, per-port equal shares over all their flows together.
//! - `lcf`: `tcf` places a coflow once, when it arrives, before the first coflow whose
//!   *remaining* bytes exceed its total, and never moves it.
//! - `jitter`: the pseudo-deadline of `keys` multiplies Γ by `1 + U[0, 1)`, drawn from
//!   `java.util.Random(17)` for each coflow in arrival order.
//! - `fair`, `pfp`, `dark`: its FAIR ([`PortFair`]), PFP ([`ReceiverScan`]) and DARK ([`Dark`])
//!   in place of `fair`, `pfp` and `aalo`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use coflow_core::{Bytes, Coflow, Flow, MIB, MachineId, Nanos, Workload};
use coflow_sched::{Dark, FlowFinishGap, Order, PortFair, ReceiverScan, Scheduler, Varys, VarysConfig, policy};

/// The policies the reference simulator has, by our names (`tcf` is its LCF, `varys` its SEBF,
/// `aalo` its DARK).
pub const POLICIES: &[&str] = &["varys", "fair", "pfp", "fifo", "scf", "ncf", "tcf", "aalo"];

/// Units per second under the `clock` rule.
pub const UNITS_PER_SEC: u64 = 1024;
/// An epoch, in units.
pub const EPOCH_UNITS: u64 = 10_240;
/// A quantum, in units: the time to move 1 MiB at 128 MiB per second.
pub const QUANTUM_UNITS: u64 = 8;
/// The seed of the reference's deadline multipliers (`new Random(17)`).
pub const DEADLINE_SEED: u64 = 17;

/// Which of the reference simulator's rules are on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rules {
    /// Admission at epoch starts, CCT from admission.
    pub epochs: bool,
    /// 1,024 units per second, trace milliseconds as units.
    pub clock: bool,
    /// Reducer bytes rounded up to MiB and to multiples of `nM`, equal flows into a reducer.
    pub rounding: bool,
    /// Flows inside one machine use its ports.
    pub ports: bool,
    /// Decisions only at coflow arrivals and departures (coflow-level), per quantum (flow-level).
    pub timing: bool,
    /// Static order keys and backfill by pseudo-deadline.
    pub keys: bool,
    /// Only a full port where a coflow still has bytes skips its MADD.
    pub blocking: bool,
    /// Per-port equal shares of what MADD left for the coflows it skipped, before backfill.
    pub share: bool,
    /// LCF places a coflow once, against the remaining bytes of those placed before.
    pub lcf: bool,
    /// Pseudo-deadlines with Γ times `1 + U[0, 1)` from `java.util.Random(17)`.
    pub jitter: bool,
    /// Its FAIR for `fair`.
    pub fair: bool,
    /// Its PFP for `pfp`.
    pub pfp: bool,
    /// Its DARK for `aalo`.
    pub dark: bool,
}

/// A rule's name is not known.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownRule(pub String);

impl fmt::Display for UnknownRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown coflowsim rule {:?}; known rules: all, {}", self.0, Rules::NAMES.join(", "))
    }
}

impl std::error::Error for UnknownRule {}

/// A policy the reference simulator does not have was asked for under its model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NoCounterpart(pub String);

impl fmt::Display for NoCounterpart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "policy {:?} has no counterpart in the reference simulator (CoflowSim); under --model coflowsim only {} run",
            self.0,
            POLICIES.join(", ")
        )
    }
}

impl std::error::Error for NoCounterpart {}

impl Rules {
    /// Every rule's name, in the order the book's page on the reference model lists them.
    pub const NAMES: &[&str] = &[
        "epochs", "clock", "rounding", "ports", "timing", "keys", "blocking", "share", "lcf", "jitter", "fair", "pfp",
        "dark",
    ];

    /// Every rule on: the reference simulator's model.
    pub fn all() -> Rules {
        Rules {
            epochs: true,
            clock: true,
            rounding: true,
            ports: true,
            timing: true,
            keys: true,
            blocking: true,
            share: true,
            lcf: true,
            jitter: true,
            fair: true,
            pfp: true,
            dark: true,
        }
    }

    /// Parses a comma-separated list of rule names; `all` stands for every rule.
    pub fn parse(list: &str) -> Result<Rules, UnknownRule> {
        let mut r = Rules::default();
        for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            match name {
                "all" => r = Rules::all(),
                "epochs" => r.epochs = true,
                "clock" => r.clock = true,
                "rounding" => r.rounding = true,
                "ports" => r.ports = true,
                "timing" => r.timing = true,
                "keys" => r.keys = true,
                "blocking" => r.blocking = true,
                "share" => r.share = true,
                "lcf" => r.lcf = true,
                "jitter" => r.jitter = true,
                "fair" => r.fair = true,
                "pfp" => r.pfp = true,
                "dark" => r.dark = true,
                _ => return Err(UnknownRule(name.to_string())),
            }
        }
        Ok(r)
    }

    /// The names of the rules that are on.
    pub fn names(&self) -> Vec<&'static str> {
        let on = [
            self.epochs,
            self.clock,
            self.rounding,
            self.ports,
            self.timing,
            self.keys,
            self.blocking,
            self.share,
            self.lcf,
            self.jitter,
            self.fair,
            self.pfp,
            self.dark,
        ];
        Rules::NAMES.iter().zip(on).filter(|(_, on)| *on).map(|(n, _)| *n).collect()
    }

    /// `units` of the reference's time in nanoseconds: 1/1,024 s each under `clock`, else 1 ms
    /// (the trace's unit), rounded up.
    pub fn units(&self, units: u64) -> Nanos {
        if self.clock { Nanos((units * 1_000_000_000).div_ceil(UNITS_PER_SEC)) } else { Nanos::from_millis(units) }
    }

    /// The quantum: 8 units.
    pub fn quantum(&self) -> Nanos {
        self.units(QUANTUM_UNITS)
    }

    /// The admission epoch: 10,240 units.
    pub fn epoch(&self) -> Nanos {
        self.units(EPOCH_UNITS)
    }
}

/// The workload as the reference simulator sees it under `rules`: flows rounded, intra-machine
/// flows on ports, arrivals on its clock and admitted at epoch starts. Ids, deadlines, weights and
/// names are kept; rules that are off change nothing.
pub fn workload(w: &Workload, rules: &Rules) -> Workload {
    let n = w.machines;
    let coflows = w
        .coflows
        .iter()
        .map(|c| {
            let mut c = c.clone();
            if rules.rounding {
                c.flows = rounded(&c);
            }
            if rules.ports {
                for f in &mut c.flows {
                    f.dst = MachineId(n + f.dst.0);
                }
            }
            if rules.clock {
                // Trace milliseconds are units of 1/1,024 s: nanoseconds × 1,000/1,024.
                c.arrival = Nanos((c.arrival.0 as u128 * 125).div_ceil(128) as u64);
            }
            if rules.epochs {
                let e = rules.epoch().0;
                c.arrival = Nanos(c.arrival.0.div_ceil(e).saturating_sub(1) * e);
            }
            c
        })
        .collect();
    let machines = if rules.ports { 2 * n } else { n };
    Workload::new(machines, coflows).expect("a transformed valid workload stays valid")
}

/// A coflow's flows as the reference makes them: every reducer's bytes rounded up to MiB and to
/// a multiple of the number of distinct mappers `nM`, split into `nM` equal flows of at least
/// 1 MiB, one from each mapper.
fn rounded(c: &Coflow) -> Vec<Flow> {
    let mappers: BTreeSet<MachineId> = c.flows.iter().map(|f| f.src).collect();
    let mut reducers: BTreeMap<MachineId, u64> = BTreeMap::new();
    for f in &c.flows {
        *reducers.entry(f.dst).or_default() += f.size.get();
    }
    let nm = mappers.len() as u64;
    let mut flows = Vec::with_capacity(mappers.len() * reducers.len());
    for (&dst, &bytes) in &reducers {
        let mib = bytes.div_ceil(MIB).div_ceil(nm) * nm;
        let per_flow = Bytes((mib / nm).max(1) * MIB);
        flows.extend(mappers.iter().map(|&src| Flow { src, dst, size: per_flow }));
    }
    flows
}

/// The policy called `name` under `rules`: the reference's variant where a rule says so, else
/// ours. Policies the reference does not have are refused.
pub fn policy(name: &str, rules: &Rules) -> Result<Box<dyn Scheduler>, NoCounterpart> {
    let quantum = rules.quantum();
    let coflow_level = |order: Order| -> Box<dyn Scheduler> {
        let mut cfg = if order == Order::Sebf { VarysConfig::default() } else { VarysConfig::baseline(order) };
        if rules.timing {
            cfg.starvation_freedom = false;
            cfg.flow_finish_gap = None;
        }
        cfg.static_keys = rules.keys;
        cfg.blocked_share = rules.share;
        cfg.lcf_insertion = rules.lcf;
        cfg.deadline_jitter = rules.jitter.then_some(DEADLINE_SEED);
        cfg.loaded_ports_block = rules.blocking;
        Box::new(Varys::new(cfg))
    };
    let flow_level = |p: Box<dyn Scheduler>| -> Box<dyn Scheduler> {
        if rules.timing { Box::new(FlowFinishGap::new(p, quantum)) } else { p }
    };
    let gap = if rules.timing { quantum } else { Nanos::ZERO };
    let ours = |name: &str| policy::by_name(name).expect("a known policy");
    Ok(match name {
        "varys" => coflow_level(Order::Sebf),
        "fifo" => coflow_level(Order::Fifo),
        "scf" => coflow_level(Order::Scf),
        "ncf" => coflow_level(Order::Ncf),
        "tcf" => coflow_level(Order::Tcf),
        "fair" if rules.fair => Box::new(PortFair::new(gap)),
        "fair" => flow_level(ours("fair")),
        "pfp" if rules.pfp => Box::new(ReceiverScan::new(gap)),
        "pfp" => flow_level(ours("pfp")),
        "aalo" if rules.dark => Box::new(Dark::default()),
        "aalo" => ours("aalo"),
        _ => return Err(NoCounterpart(name.to_string())),
    })
}
