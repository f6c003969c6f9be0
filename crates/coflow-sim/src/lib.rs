//! An event-driven fluid simulator that replays a coflow workload under a scheduling policy.
//!
//! Rates stay constant between events (an arrival, a completion, a policy timer) and the next
//! event's time is computed exactly, in integer nanoseconds: there is no time step.
//! The simulator keeps the flows' state in the aggregates the policy's
//! [`ServiceModel`](coflow_sched::ServiceModel) defines (legs of coflows, or routes), so an event
//! costs time in the number of coflows, legs sped up by backfill, or routes alive, not in the
//! number of flows.
//! Everything runs on one thread and the same inputs give the same bytes out.
//!
//! # Layout
//! - [`mod@bench`]: decision times, incremental and from scratch side by side ([`bench::bench_policy`]).
//! - [`coflowsim`]: the reference simulator's model, rule by rule (`--model coflowsim`).
//! - `bounds`: lower bounds on the average CCT (isolation, per-port, LP relaxation), [`lower_bounds`].
//! - `deadlines`: experiment deadlines as Varys §7.1 draws them, [`assign_deadlines`].
//! - `dynamics`: the fabric as a value: a [`FabricSpec`] builds each run's fabric and its
//!   dynamics ([`Capacities`], [`Routing`], [`ConnectionCaps`]); [`BigSwitchSpec`] is the big switch.
//! - `engine`: the event loop, [`simulate`] on the fabric [`SimConfig`] names.
//! - [`experiment`]: several policies on one workload in parallel, and their report.
//! - `legs`: the proportional model's state (coflows, legs, per-coflow scales).
//! - [`ordering`]: where `siphon-mc`'s order departs from `mrtf`'s ([`ordering::compare`]) on
//!   worlds of chosen skew and load ([`ordering::reshape`]).
//! - `routes`: the route model's state (routes, their flows and clocks, per route or per
//!   resource).
//! - `report`: per-coflow outcomes and the summary figures users compare ([`Summary`], with
//!   Siphon's [`WideArea`] figures for wide-area runs).
//! - [`spread`]: a rack-level trace's tasks spread over each rack's machines (the Varys paper's
//!   task-level replay on 3,000 machines).
//! - [`topology`]: the wide-area topology file and its validation, giving a [`WanConfig`].
//! - `wan`: wide-area runs ([`WanConfig`], a [`FabricSpec`]): capacity redraws, multi-path,
//!   per-connection caps.
//! - [`weather`]: link capacities as a recorded sequence ([`weather::WeatherLog`]), replayed.

#![warn(missing_docs)]

pub mod bench;
mod bounds;
pub mod coflowsim;
mod deadlines;
mod dynamics;
mod engine;
pub mod experiment;
mod legs;
pub mod ordering;
mod planned;
mod report;
mod routes;
pub mod spread;
pub mod topology;
mod wan;
pub mod weather;

pub use bounds::{BoundConfig, DEPENDENCIES_SKIP, LowerBounds, lower_bounds};
pub use deadlines::{MIN_DEADLINE, assign_deadlines, assign_deadlines_to_fraction};
pub use dynamics::{
    BigSwitchSpec, Capacities, ConnectionCaps, Direct, FabricRun, FabricSpec, Routing, Split, Steady, Uncapped,
};
pub use engine::{
    END_OF_TIME_YEARS, Halted, SimConfig, SimResult, Stopped, replay_end, simulate, simulate_with_progress,
};
pub use report::{
    BinSummary, CoflowOutcome, JobFigures, SIZE_BINS, SLOWER_TOLERANCE, SizeBin, Summary, WideArea,
    lower_bound_avg_cct, percentile, slower_fraction,
};
pub use wan::{WanConfig, connection_draw, detour_fraction};
pub use weather::draw;
