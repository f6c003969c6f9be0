//! Coflow scheduling policies as pure, sans-I/O state machines.
//!
//! A policy is told what happened and answers with rates; it never reads a clock, sleeps, spawns
//! or touches a socket. The trace simulator and the live coordinator drive the very same code.
//!
//! # Layout
//! - `fabric`: [`Fabric`], the capacitated resources flows cross, [`Route`], and the
//!   [`Topology`] interface that says which resources a flow crosses, with the [`BigSwitch`].
//! - `kernel`: MADD, backfill and the effective bottleneck ([`bottleneck`]), the allocation steps
//!   of the MADD family.
//! - `state`: what a policy reads ([`Input`], with the [`Changes`] since its last decision) and
//!   writes ([`Allocation`]), per [`ServiceModel`].
//! - `scheduler`: the [`Scheduler`] trait, for policies that know flow sizes, and [`Hooked`], a
//!   policy with [`Hooks`] beside it that hear what it is told and wrap its decisions.
//! - `blind`: [`BlindScheduler`] and [`BlindInput`], for policies that must not: no size is
//!   reachable from what they read. [`Blinded`] runs one behind the [`Scheduler`] interface.
//! - `snapshot`: [`Snapshot`], an [`Input`] rebuilt from live flows' remaining bytes, and per-flow
//!   rates read back from an [`Allocation`] (the live coordinator's side of the interface).
//! - `maxmin`: weighted max-min fair sharing by progressive filling.
//! - `fair`, `varys`, `deadline`, `priority`: the policies.
//! - `registry`, read through [`policy`]: every policy by its short name, with its summary,
//!   parameters, the fabrics it serves and its constructor.
//! - `wan`: Siphon's wide-area topology ([`Wan`]) and link bandwidth distributions; `mrtf` and
//!   `siphon`: its policies ([`Mrtf`], [`SiphonMc`]) with the intra-coflow option [`Intra`].
//! - `aalo`: [`Aalo`], D-CLAS for unknown sizes, a [`BlindScheduler`]; `philae` ([`Philae`],
//!   sampling pilot flows) and `saath` ([`Saath`], all-or-none, least contention first), blind too.
//!   What the three share: `shape`, a coflow's legs by sender and receiver kept as they finish and
//!   the passes that serve them in leg order, and `contention`, how many coflows of a group share a port.
//! - `karuna`: [`Karuna`], minimal rates for deadline coflows, priority levels for the rest.
//! - `sincronia`: [`Sincronia`], the BSSI order ([`bssi`]) with greedy or MADD rates.
//! - `coflowsim`: the reference simulator's FAIR ([`PortFair`]), PFP ([`ReceiverScan`]) and DARK
//!   ([`Dark`]), and [`FlowFinishGap`], its quantum.

#![warn(missing_docs)]

mod aalo;
mod bandwidth;
mod blind;
mod coflowsim;
mod contention;
mod deadline;
mod fabric;
mod fair;
mod karuna;
mod kernel;
mod maxmin;
mod mrtf;
mod philae;
mod priority;
mod registry;
mod saath;
mod scheduler;
mod shape;
mod sincronia;
mod siphon;
mod snapshot;
mod state;
mod varys;
mod wan;

pub mod policy;

pub use aalo::{Aalo, AaloConfig};
pub use bandwidth::MAX_BANDWIDTH;
pub use blind::{
    BlindAllocation, BlindCoflow, BlindFair, BlindInput, BlindLeg, BlindScheduler, Blinded, FlowsFinished,
};
pub use coflowsim::{Dark, FlowFinishGap, PortFair, ReceiverScan};
pub use deadline::{DeadlineMode, DeadlineScheduler};
pub use fabric::{BigSwitch, Fabric, ResourceId, Route, Topology};
pub use fair::Fair;
pub use karuna::{Karuna, KarunaConfig, Levels};
pub use kernel::bottleneck;
pub use maxmin::MaxMin;
pub use mrtf::{Intra, Mrtf};
pub use philae::{Impact, Philae, PhilaeConfig, Pilots};
pub use priority::{FlowOrder, FlowPriority};
pub use saath::{Saath, SaathConfig};
pub use scheduler::{Hooked, Hooks, Scheduler};
pub use sincronia::{Sincronia, best_order_cost, bssi, order_cost};
pub use siphon::{Select, SiphonConfig, SiphonMc};
pub use snapshot::{Snapshot, SnapshotCoflow, SnapshotFlow};
pub use state::{
    Allocation, Changes, CoflowState, Input, LegState, MAX_LEG_EXTRA, RouteState, Sender, ServiceModel, Shares,
    Standing,
};
pub use varys::{Order, Varys, VarysConfig};
pub use wan::{Bandwidth, Detours, Link, Wan, WanError, WideArea, detour_fraction, water_fill};
