//! The wide-area options of `coflow sim` (`--wan` and the flags that go with it), and the policy
//! instances a wide-area run uses.
//!
//! The topology file (JSON, documented in `docs/src/guide/wan-topology.md`) is the library's
//! (`coflow_sim::topology`); `default` is the embedded three-datacenter topology.

use anyhow::{Context, Result, bail};
use clap::Args;
use coflow_core::Nanos;
use coflow_sched::policy::{MonteCarlo, Needs, Params, Unservable};
use coflow_sched::{Select, ServiceModel};
use coflow_sim::WanConfig;
use coflow_sim::experiment::Plan;
use coflow_sim::topology::{Overrides, Topology, TopologyError};

/// Options of wide-area runs.
#[derive(Debug, Args)]
pub(crate) struct WanArgs {
    /// Replay on a wide-area fabric: a topology file (JSON, see docs/src/guide/wan-topology.md) or
    /// `default` (three datacenters with unequal, fluctuating links). Reports Siphon's figures
    /// against `mrtf`.
    #[arg(long, value_name = "FILE|default")]
    wan: Option<String>,
    /// Place machines in blocks of N per datacenter (machine m in datacenter m / N), overriding
    /// the topology's placement; by default machines are spread evenly (Siphon §5.3).
    #[arg(long, value_name = "N", requires = "wan")]
    machines_per_dc: Option<u32>,
    /// Route part of each arriving coflow's bytes over two-hop detours by water-filling (§3.3).
    #[arg(long, requires = "wan")]
    multipath: bool,
    /// Redraw link capacities every this many milliseconds, overriding the topology's
    /// `redraw_ms`; 0 never redraws (capacities stay at their means).
    #[arg(long, value_name = "MS", requires = "wan")]
    redraw_ms: Option<u64>,
    /// Per-connection bandwidth: every flow crossing a link gets its own throughput, drawn from
    /// the link's distribution when it starts and held, which caps its rate; the link's capacity
    /// still bounds their sum (proportional policies only).
    #[arg(long, requires = "wan")]
    per_connection: bool,
    /// With per-connection bandwidth, redraw every connection's throughput every this many
    /// milliseconds, overriding the topology's `connection_redraw_ms`; 0 holds it for the flow's
    /// life (the default).
    #[arg(long, value_name = "MS", requires = "wan")]
    connection_redraw_ms: Option<u64>,
    #[command(flatten)]
    pub(crate) mc: McArgs,
}

/// Parameters of `siphon-mc` in wide-area runs (defaults: `MonteCarlo::default()`).
#[derive(Debug, Args)]
pub(crate) struct McArgs {
    /// Most Monte Carlo rounds per search.
    #[arg(long, default_value_t = MonteCarlo::default().rounds, requires = "wan")]
    mc_rounds: u32,
    /// Positions of the order searched; the rest follows MRTF on median bandwidth.
    #[arg(long, default_value_t = MonteCarlo::default().depth, requires = "wan")]
    mc_depth: usize,
    /// Coflows (first by MRTF on medians) that may take the searched positions.
    #[arg(long, default_value_t = MonteCarlo::default().breadth, requires = "wan")]
    mc_breadth: usize,
    /// Enforce the candidate of least mean total CCT over all rounds instead of the one best in
    /// most rounds.
    #[arg(long, requires = "wan")]
    mc_mean_cost: bool,
    /// One bandwidth draw per coflow and link, as the paper, instead of averaging one draw per
    /// redraw interval the node is expected to last.
    #[arg(long, requires = "wan")]
    mc_one_draw: bool,
}

impl WanArgs {
    /// Whether a wide-area run was asked for.
    pub(crate) fn enabled(&self) -> bool {
        self.wan.is_some()
    }
}

/// The configuration of a run of `machines` machines on the topology `spec` (`default` or a
/// path); errors name the topology, as reading it does.
pub(crate) fn load(spec: &str, machines: u32, seed: u64, overrides: &Overrides) -> Result<WanConfig> {
    match Topology::named(spec) {
        Err(e @ TopologyError::Read { .. }) => Err(e.into()),
        t => t.and_then(|t| t.config(machines, seed, overrides)).with_context(|| format!("topology {spec}")),
    }
}

/// Turns `plan` into a wide-area one as `a` asks (the topology loaded, placed on the workload's
/// machines and overridden by the flags), leaving out with a note the policies that cannot run
/// there; the caller builds its policies with [`params`].
pub(crate) fn plan_wide_area(plan: &mut Plan, a: &WanArgs) -> Result<()> {
    let spec = a.wan.as_deref().expect("checked by the caller");
    if !plan.model.is_exact() {
        bail!("--wan: the reference simulator's model (--model coflowsim) is a big switch only");
    }
    let overrides = Overrides {
        machines_per_dc: a.machines_per_dc,
        redraw_ms: a.redraw_ms,
        per_connection: a.per_connection,
        connection_redraw_ms: a.connection_redraw_ms,
    };
    let mut cfg = load(spec, plan.workload.machines, plan.seed, &overrides)?;
    cfg.multipath = a.multipath;
    // The registry says which policies cannot serve the wide area; they are skipped, grouped by
    // what they assume.
    let refused: Vec<Unservable> =
        plan.policies.iter().filter_map(|p| coflow_sched::policy::check_serves(p, &cfg.fabric).err()).collect();
    let mut needs: Vec<Needs> = Vec::new();
    for u in &refused {
        if !needs.contains(&u.needs) {
            needs.push(u.needs);
        }
    }
    for need in needs {
        let names: Vec<&str> = refused.iter().filter(|u| u.needs == need).map(|u| u.policy.as_str()).collect();
        eprintln!("skipping {}: they assume {}", names.join(", "), need.assumption());
    }
    let policies: Vec<&'static str> =
        plan.policies.iter().copied().filter(|p| !refused.iter().any(|u| u.policy == *p)).collect();
    if policies.is_empty() {
        bail!("no policy left to run on the wide area");
    }
    // Per-connection caps are per leg; route-model policies pool flows by route.
    let pooled: Vec<&str> = if cfg.per_connection.is_some() {
        policies
            .iter()
            .copied()
            .filter(|p| coflow_sched::policy::by_name(p).is_ok_and(|s| s.model() == ServiceModel::Route))
            .collect()
    } else {
        Vec::new()
    };
    if !pooled.is_empty() {
        eprintln!(
            "skipping {}: per-connection bandwidth caps flows one by one, and they pool flows by route",
            pooled.join(", ")
        );
    }
    plan.policies = policies.into_iter().filter(|p| !pooled.contains(p)).collect();
    if plan.policies.is_empty() {
        bail!("no policy left to run with per-connection bandwidth");
    }
    plan.on_wide_area(spec.to_string(), cfg)?;
    Ok(())
}

/// The registry's parameters of a wide-area run: `siphon-mc` knows how long a bandwidth draw
/// holds (the redraw interval) and takes the Monte Carlo options.
pub(crate) fn params(seed: u64, redraw: Nanos, mc: &McArgs) -> Params {
    Params {
        seed,
        redraw: (redraw != Nanos::MAX).then_some(redraw),
        mc: MonteCarlo {
            rounds: mc.mc_rounds,
            depth: mc.mc_depth,
            breadth: mc.mc_breadth,
            select: if mc.mc_mean_cost { Select::MeanCost } else { Select::Wins },
            one_draw: mc.mc_one_draw,
        },
    }
}
