//! The policy registry: one table of every policy by its short name, with what it is, what it
//! takes, what it serves and how to build it.
//!
//! Every reader of policy names goes through [`REGISTRY`]: the lists [`NAMES`], [`WAN_NAMES`] and
//! [`JOB_NAMES`] are computed from it at compile time, [`build`] and [`by_name`] construct from
//! it, [`parse_list`] and every message that lists policies read it, and [`check_serves`] is how
//! the simulator and the coordinator refuse a policy on a fabric it cannot serve.
//! A new policy is one new [`Entry`]; the round-trip test then checks that its name builds a
//! policy of that name with the capabilities the entry claims.

use std::fmt;

use coflow_core::Nanos;

use crate::fabric::Fabric;
use crate::scheduler::Scheduler;
use crate::{Aalo, AaloConfig, Blinded, DeadlineMode, DeadlineScheduler, Fair, FlowOrder, FlowPriority, Karuna};
use crate::{Intra, Mrtf, Order, Philae, Saath, Select, Sincronia, SiphonConfig, SiphonMc, Varys, VarysConfig};

/// Which list a policy belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum List {
    /// `all`: the big-switch policies every report compares ([`NAMES`]).
    All,
    /// Siphon's wide-area policies, not part of `all` ([`WAN_NAMES`]).
    WideArea,
    /// Variants that need a workload with dependencies to differ from their base policy, not
    /// part of `all` ([`JOB_NAMES`]).
    Jobs,
}

/// What a policy needs of the fabric it runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Needs {
    /// Nothing but capacitated resources and routes: it serves any fabric (the big switch, the
    /// wide area, and any other topology).
    AnyFabric,
    /// Every route an ingress and an egress port of equal standing: the big switch only
    /// (`pfp`'s matching holds a flow's two ports; on a route of another length it serves
    /// nothing).
    BigSwitch,
}

impl Needs {
    /// What a policy with this need assumes of the fabric, in words that follow "it assumes".
    pub fn assumption(self) -> &'static str {
        match self {
            Needs::AnyFabric => "nothing of the fabric",
            Needs::BigSwitch => "the big switch (a flow holds an ingress and an egress port)",
        }
    }

    /// Whether a fabric gives what this needs.
    pub fn met_by(self, fabric: &Fabric) -> bool {
        match self {
            Needs::AnyFabric => true,
            Needs::BigSwitch => fabric.is_big_switch(),
        }
    }
}

/// A parameter a policy's constructor reads from [`Params`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Param {
    /// [`Params::seed`]: it draws random numbers.
    Seed,
    /// [`Params::redraw`]: it knows how long a drawn capacity holds.
    Redraw,
    /// [`Params::mc`]: Monte Carlo search options.
    MonteCarlo,
}

/// `siphon-mc`'s search options (defaults: [`SiphonConfig::default`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MonteCarlo {
    /// Most rounds per search.
    pub rounds: u32,
    /// Positions of the order searched; the rest follows MRTF on median bandwidth.
    pub depth: usize,
    /// Coflows (first by MRTF on medians) that may take the searched positions.
    pub breadth: usize,
    /// How the enforced candidate is chosen.
    pub select: Select,
    /// One bandwidth draw per coflow and link, as the paper, even when [`Params::redraw`] says
    /// how long a draw holds.
    pub one_draw: bool,
}

impl Default for MonteCarlo {
    fn default() -> Self {
        let d = SiphonConfig::default();
        MonteCarlo { rounds: d.rounds, depth: d.depth, breadth: d.breadth, select: d.select, one_draw: false }
    }
}

/// Everything a policy's constructor may read; each [`Entry`] lists in [`Entry::params`] which
/// parts it reads, and ignores the rest.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Params {
    /// Seeds the policy's randomness, if it has any (the run's `--seed`).
    pub seed: u64,
    /// How long the fabric's capacities hold between redraws, if they are redrawn: `siphon-mc`
    /// then draws a node's bandwidth as the mean of one draw per interval it is expected to span.
    pub redraw: Option<Nanos>,
    /// `siphon-mc`'s search.
    pub mc: MonteCarlo,
}

impl Params {
    /// The default parameters with this seed.
    pub fn seeded(seed: u64) -> Params {
        Params { seed, ..Params::default() }
    }
}

/// One policy of the registry.
#[derive(Clone, Copy)]
pub struct Entry {
    /// Its short name, as command lines and config files select it and its `name()` says.
    pub name: &'static str,
    /// What it does, in one line.
    pub summary: &'static str,
    /// The parameters its constructor reads.
    pub params: &'static [Param],
    /// What it needs of the fabric.
    pub needs: Needs,
    /// Whether it is blind: it never reads a size or a remaining byte count (a
    /// [`crate::BlindScheduler`] behind [`Blinded`]).
    pub blind: bool,
    /// Whether it may reject coflows ([`Scheduler::admission_control`]).
    pub admission_control: bool,
    /// Whether its rates depend on coflows' deadlines: a live driver then decides again while a
    /// coflow with a deadline runs (a rate paced to a deadline falls behind with the progress).
    pub reads_deadlines: bool,
    /// The list it belongs to.
    pub list: List,
    build: fn(&Params) -> Box<dyn Scheduler>,
}

impl Entry {
    /// A fresh instance of the policy with these parameters.
    pub fn build(&self, params: &Params) -> Box<dyn Scheduler> {
        (self.build)(params)
    }

    /// Whether it can serve this fabric.
    pub fn serves(&self, fabric: &Fabric) -> bool {
        self.needs.met_by(fabric)
    }
}

impl fmt::Debug for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Entry")
            .field("name", &self.name)
            .field("params", &self.params)
            .field("needs", &self.needs)
            .field("blind", &self.blind)
            .field("admission_control", &self.admission_control)
            .field("reads_deadlines", &self.reads_deadlines)
            .field("list", &self.list)
            .finish_non_exhaustive()
    }
}

/// An entry with the common capabilities: any fabric, sees sizes, no admission control, no
/// deadlines read.
const fn entry(name: &'static str, summary: &'static str, build: fn(&Params) -> Box<dyn Scheduler>) -> Entry {
    Entry {
        name,
        summary,
        params: &[],
        needs: Needs::AnyFabric,
        blind: false,
        admission_control: false,
        reads_deadlines: false,
        list: List::All,
        build,
    }
}

impl Params {
    /// `siphon-mc`'s configuration with this intra-coflow policy: the seed, the redraw interval
    /// (a draw holds for it, unless [`MonteCarlo::one_draw`]) and the search options.
    pub fn siphon_config(&self, intra: Intra) -> SiphonConfig {
        SiphonConfig {
            seed: self.seed,
            intra,
            coherence: if self.mc.one_draw { None } else { self.redraw },
            select: self.mc.select,
            rounds: self.mc.rounds,
            depth: self.mc.depth,
            breadth: self.mc.breadth,
            ..SiphonConfig::default()
        }
    }
}

/// `siphon-mc` with this intra-coflow policy.
fn siphon_mc(p: &Params, intra: Intra) -> Box<dyn Scheduler> {
    Box::new(SiphonMc::new(p.siphon_config(intra)))
}

const MC: &[Param] = &[Param::Seed, Param::Redraw, Param::MonteCarlo];

/// Every policy, each list in report order.
pub const REGISTRY: &[Entry] = &[
    entry(
        "varys",
        "Smallest-Effective-Bottleneck-First order, MADD rates, backfill, starvation freedom (Varys §5.3)",
        |_| Box::new(Varys::default()),
    ),
    Entry {
        admission_control: true,
        reads_deadlines: true,
        ..entry(
            "varys-deadline",
            "admission control for deadlines, MADD at the deadline, never preempted, backfilled (Varys §5.4)",
            |_| Box::new(DeadlineScheduler::new(DeadlineMode::Varys)),
        )
    },
    Entry {
        admission_control: true,
        reads_deadlines: true,
        ..entry("vc", "virtual cluster: one reserved rate on every port of a coflow for its life (Varys §7.3)", |_| {
            Box::new(DeadlineScheduler::new(DeadlineMode::VirtualCluster))
        })
    },
    entry("scf", "shortest (smallest remaining largest flow) first, with MADD and backfill", |_| {
        Box::new(Varys::new(VarysConfig::baseline(Order::Scf)))
    }),
    entry("ncf", "narrowest (fewest flows) first, with MADD and backfill", |_| {
        Box::new(Varys::new(VarysConfig::baseline(Order::Ncf)))
    }),
    entry("tcf", "smallest total remaining bytes first, with MADD and backfill", |_| {
        Box::new(Varys::new(VarysConfig::baseline(Order::Tcf)))
    }),
    entry("fifo", "arrival order with Varys's two passes: MADD in arrival order, then backfill", |_| {
        Box::new(Varys::new(VarysConfig::baseline(Order::Fifo)))
    }),
    entry("fifo-strict", "arrival order as strict priority: each coflow's MADD and backfill before the next", |_| {
        Box::new(Varys::new(VarysConfig::baseline(Order::FifoStrict)))
    }),
    Entry {
        needs: Needs::BigSwitch,
        ..entry("pfp", "per-flow prioritization, smallest remaining flow first (pFabric/PDQ)", |_| {
            Box::new(FlowPriority::new(FlowOrder::SmallestRemaining))
        })
    },
    Entry {
        needs: Needs::BigSwitch,
        reads_deadlines: true,
        ..entry("edf", "per-flow earliest deadline first, then smallest remaining", |_| {
            Box::new(FlowPriority::new(FlowOrder::EarliestDeadline))
        })
    },
    entry("fair", "per-flow max-min fair sharing of every resource (TCP), the baseline", |_| Box::new(Fair::default())),
    entry("sincronia", "Sincronia's BSSI order with greedy per-flow rates", |_| Box::new(Sincronia::greedy())),
    entry("sincronia-madd", "Sincronia's BSSI order with MADD, then the greedy pass", |_| {
        Box::new(Sincronia::with_madd())
    }),
    Entry {
        blind: true,
        ..entry("aalo", "Aalo's D-CLAS, blind to sizes: priority queues on the bytes a coflow has sent", |_| {
            Box::new(Blinded::new(Aalo::default()))
        })
    },
    Entry {
        blind: true,
        ..entry(
            "philae",
            "Philae, blind: pilot flows sampled first, then queues by learned size, thin coflows by contention",
            |_| Box::new(Blinded::new(Philae::default())),
        )
    },
    Entry {
        blind: true,
        ..entry("saath", "Saath, blind: all-or-none per coflow, least contention first, per-flow queue limits", |_| {
            Box::new(Blinded::new(Saath::default()))
        })
    },
    Entry {
        reads_deadlines: true,
        ..entry("karuna", "Karuna: minimal rates for deadline coflows, strict size levels for the rest", |_| {
            Box::new(Karuna::default())
        })
    },
    Entry {
        params: MC,
        list: List::WideArea,
        ..entry("siphon-mc", "Siphon's Monte Carlo order over sampled link bandwidth, MADD and backfill", |p| {
            siphon_mc(p, Intra::Madd)
        })
    },
    Entry {
        list: List::WideArea,
        ..entry("mrtf", "minimum remaining time first on expected bandwidth, MADD and backfill", |_| {
            Box::new(Mrtf::new(Intra::Madd))
        })
    },
    Entry {
        params: MC,
        list: List::WideArea,
        ..entry("siphon-mc+lfgf", "siphon-mc's order with Largest Flow Group First inside a coflow", |p| {
            siphon_mc(p, Intra::Lfgf)
        })
    },
    Entry {
        list: List::WideArea,
        ..entry("mrtf+lfgf", "mrtf's order with Largest Flow Group First inside a coflow", |_| {
            Box::new(Mrtf::new(Intra::Lfgf))
        })
    },
    Entry {
        blind: true,
        list: List::Jobs,
        ..entry("aalo-job", "aalo ranking a coflow by the bytes its whole job has sent", |_| {
            Box::new(Blinded::new(Aalo::new(AaloConfig { job_aware: true, ..AaloConfig::default() })))
        })
    },
];

/// A way to run the live system with no policy of [`REGISTRY`] assigning rates, and the policy
/// that stands for it where there is no network to do the sharing (a simulator).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unscheduled {
    /// Its short name, as command lines and config files select it.
    pub name: &'static str,
    /// What it does live, in one line.
    pub summary: &'static str,
    /// The registry policy a simulator runs in its place.
    pub simulated_by: &'static str,
    /// How many fetches an agent carries at once to one peer, each on a persistent connection
    /// of its own, the others waiting their turn; 0: as many as there are.
    pub fetches_per_peer: u32,
}

/// `tcp`: no rates assigned, every flow sent at its sender's full port rate, and kernel TCP
/// shares the links (the baseline of Varys's deployment, §7). A simulator has no TCP: `fair`,
/// per-flow max-min sharing, is what it models there.
pub const TCP: Unscheduled = Unscheduled {
    name: "tcp",
    summary: "no rates assigned: every flow at its sender's full port rate, kernel TCP shares the links",
    simulated_by: "fair",
    fetches_per_peer: 0,
};

/// `naive`: Siphon's baseline data plane without decision makers (§5.2): no rates assigned, and
/// the agents carry the flows between two machines over a few persistent connections, taken by
/// the flows in turn, rather than one connection per flow. A simulator models it as `fair`.
pub const NAIVE: Unscheduled = Unscheduled {
    name: "naive",
    summary: "no rates assigned: flows between two agents take turns on 4 persistent connections (Siphon's naive scheme)",
    simulated_by: "fair",
    fetches_per_peer: 4,
};

/// Every name the live system takes besides the registry's policies.
pub const UNSCHEDULED: &[Unscheduled] = &[TCP, NAIVE];

/// The unscheduled mode called `name`, if it is one.
pub fn unscheduled(name: &str) -> Option<&'static Unscheduled> {
    UNSCHEDULED.iter().find(|u| u.name == name)
}

/// The policy a simulator runs for `name`: what stands for an unscheduled mode, or else `name`.
pub fn simulated(name: &str) -> &str {
    unscheduled(name).map_or(name, |u| u.simulated_by)
}

/// Checks a name the live system takes: a policy of the registry or an unscheduled mode.
pub fn check_live(name: &str) -> Result<(), UnknownPolicy> {
    match unscheduled(name) {
        Some(_) => Ok(()),
        None => entry_of(name).map(|_| ()).map_err(|e| UnknownPolicy { live: true, ..e }),
    }
}

/// How many entries of the registry are on `list`.
const fn count(list: List) -> usize {
    let (mut i, mut n) = (0, 0);
    while i < REGISTRY.len() {
        if REGISTRY[i].list as u8 == list as u8 {
            n += 1;
        }
        i += 1;
    }
    n
}

/// The names on `list`, in registry order.
const fn names_of<const N: usize>(list: List) -> [&'static str; N] {
    let mut out = [""; N];
    let (mut i, mut n) = (0, 0);
    while i < REGISTRY.len() {
        if REGISTRY[i].list as u8 == list as u8 {
            out[n] = REGISTRY[i].name;
            n += 1;
        }
        i += 1;
    }
    out
}

/// The short names of every policy of `all`, in report order.
pub const NAMES: &[&str] = &names_of::<{ count(List::All) }>(List::All);

/// The policies of the wide-area model (Siphon), not part of `all`: the Monte Carlo order and
/// its baseline, each also with Largest Flow Group First inside coflows (`+lfgf`).
pub const WAN_NAMES: &[&str] = &names_of::<{ count(List::WideArea) }>(List::WideArea);

/// Variants that need a workload with dependencies to differ from their base policy, not part of
/// `all`: `aalo-job` ranks coflows by their job's bytes sent (job-aware D-CLAS).
pub const JOB_NAMES: &[&str] = &names_of::<{ count(List::Jobs) }>(List::Jobs);

/// The names a setting takes, comma-separated, for messages: in a list, `all` and every policy; in the live system, every
/// policy and the unscheduled modes.
fn known(live: bool) -> String {
    let policies = REGISTRY.iter().map(|e| e.name);
    let names: Vec<&str> = if live {
        policies.chain(UNSCHEDULED.iter().map(|u| u.name)).collect()
    } else {
        std::iter::once("all").chain(policies).collect()
    };
    names.join(", ")
}

/// No policy has this name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown policy {name:?}; known policies: {}", known(*live))]
pub struct UnknownPolicy {
    /// The name asked for.
    pub name: String,
    /// Whether the live system asked ([`check_live`]), whose names are not a list's.
    pub live: bool,
}

/// A policy cannot serve a fabric: it would serve nothing, or serve it wrongly.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "policy {policy:?} cannot serve a {fabric} fabric: it assumes {}; policies for any fabric: {}",
    needs.assumption(),
    any_fabric()
)]
pub struct Unservable {
    /// The policy's name.
    pub policy: String,
    /// The fabric's kind ([`crate::Topology::kind`]).
    pub fabric: &'static str,
    /// What the policy needs.
    pub needs: Needs,
}

/// The names of the policies that serve any fabric, for messages.
fn any_fabric() -> String {
    REGISTRY.iter().filter(|e| e.needs == Needs::AnyFabric).map(|e| e.name).collect::<Vec<_>>().join(", ")
}

/// The registry's entry for `name`.
pub fn entry_of(name: &str) -> Result<&'static Entry, UnknownPolicy> {
    REGISTRY.iter().find(|e| e.name == name).ok_or_else(|| UnknownPolicy { name: name.to_string(), live: false })
}

/// A fresh instance of the policy called `name`, with these parameters.
pub fn build(name: &str, params: &Params) -> Result<Box<dyn Scheduler>, UnknownPolicy> {
    Ok(entry_of(name)?.build(params))
}

/// A fresh instance of the policy called `name`, with the source's default parameters.
pub fn by_name(name: &str) -> Result<Box<dyn Scheduler>, UnknownPolicy> {
    build(name, &Params::default())
}

/// A fresh instance of the policy called `name`, whose randomness (if it has any) is seeded
/// with `seed`: `siphon-mc` draws its Monte Carlo bandwidths from it. Other policies ignore it.
pub fn seeded(name: &str, seed: u64) -> Result<Box<dyn Scheduler>, UnknownPolicy> {
    build(name, &Params::seeded(seed))
}

/// Parses a comma-separated list of policy names, each once, in the order first named; `all`
/// stands for every policy of [`NAMES`].
pub fn parse_list(list: &str) -> Result<Vec<&'static str>, UnknownPolicy> {
    parse_list_within(list, NAMES)
}

/// Like [`parse_list`], with `all` standing for the policies of `all` (those a setting has, such
/// as a model's), in their order, rather than for every policy.
pub fn parse_list_within(list: &str, all: &[&'static str]) -> Result<Vec<&'static str>, UnknownPolicy> {
    let mut out: Vec<&'static str> = Vec::new();
    for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let names = if name == "all" { all } else { &[entry_of(name)?.name][..] };
        // Each once, where first named.
        for &n in names {
            if !out.contains(&n) {
                out.push(n);
            }
        }
    }
    Ok(out)
}

/// Whether the policy called `policy` can serve `fabric`; a name the registry does not know (a
/// test's wrapper, the reference simulator's variants) is taken to serve any fabric.
/// The simulator and the coordinator call it before they run a policy.
pub fn check_serves(policy: &str, fabric: &Fabric) -> Result<(), Unservable> {
    match REGISTRY.iter().find(|e| e.name == policy) {
        Some(e) if !e.serves(fabric) => {
            Err(Unservable { policy: policy.to_string(), fabric: fabric.kind(), needs: e.needs })
        }
        _ => Ok(()),
    }
}
