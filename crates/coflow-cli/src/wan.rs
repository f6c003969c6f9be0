//! The wide-area options of `coflow sim` (`--wan` and the flags that go with it), turned into
//! the library's [`WideAreaSpec`].
//!
//! The topology file (JSON, documented in `docs/src/guide/wan-topology.md`) is the library's
//! (`coflow_sim::topology`); `default` is the embedded three-datacenter topology.

use clap::Args;
use coflow_sched::Select;
use coflow_sched::policy::MonteCarlo;
use coflow_sim::experiment::WideAreaSpec;
use coflow_sim::topology::Overrides;

/// Options of wide-area runs.
#[derive(Debug, Args)]
pub(crate) struct WanArgs {
    /// Replay on a wide-area fabric: a topology file (JSON, see docs/src/guide/wan-topology.md) or
    /// `default` (three datacenters with unequal, fluctuating links). Reports Siphon's figures
    /// against `mrtf`.
    #[arg(long, value_name = "FILE|default", value_parser = clap::builder::NonEmptyStringValueParser::new())]
    wan: Option<String>,
    /// Place machines in blocks of N per datacenter (machine m in datacenter m / N), overriding
    /// the topology's placement; by default machines are spread evenly (Siphon §5.3).
    #[arg(long, value_name = "N", requires = "wan")]
    machines_per_dc: Option<u32>,
    /// Route part of each arriving coflow's bytes over two-hop detours by water-filling (§3.3).
    #[arg(long, requires = "wan")]
    multipath: bool,
    /// Redraw link capacities every this many milliseconds, overriding the topology's
    /// `redraw_ms`; 0 never redraws (one seeded draw at the start holds for the whole run).
    #[arg(long, value_name = "MS", requires = "wan", value_parser = crate::units::millis)]
    redraw_ms: Option<u64>,
    /// Per-connection bandwidth: every flow crossing a link gets its own throughput, drawn from
    /// the link's distribution when it starts and held, which caps its rate; the link's capacity
    /// still bounds their sum (proportional policies only).
    #[arg(long, requires = "wan")]
    per_connection: bool,
    /// With per-connection bandwidth, redraw every connection's throughput every this many
    /// milliseconds, overriding the topology's `connection_redraw_ms`; 0 holds it for the flow's
    /// life (the default).
    #[arg(long, value_name = "MS", requires = "wan", value_parser = crate::units::millis)]
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
    /// The topology file `--wan` names, if it names one (not a preset).
    pub(crate) fn file(&self) -> Option<&std::path::Path> {
        self.wan.as_deref().map(std::path::Path::new)
    }

    /// The wide area asked for, if any.
    pub(crate) fn spec(&self) -> Option<WideAreaSpec> {
        let topology = self.wan.clone()?;
        let overrides = Overrides {
            machines_per_dc: self.machines_per_dc,
            redraw_ms: self.redraw_ms,
            per_connection: self.per_connection,
            connection_redraw_ms: self.connection_redraw_ms,
        };
        Some(WideAreaSpec { topology, overrides, multipath: self.multipath, mc: self.mc.monte_carlo() })
    }
}

impl McArgs {
    /// `siphon-mc`'s search as the flags set it.
    pub(crate) fn monte_carlo(&self) -> MonteCarlo {
        MonteCarlo {
            rounds: self.mc_rounds,
            depth: self.mc_depth,
            breadth: self.mc_breadth,
            select: if self.mc_mean_cost { Select::MeanCost } else { Select::Wins },
            one_draw: self.mc_one_draw,
        }
    }
}
