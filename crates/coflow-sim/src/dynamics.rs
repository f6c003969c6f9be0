//! The fabric a run replays on, as a value: a [`FabricSpec`] builds, for each run, the [`Fabric`]
//! and its dynamics, in the shape of quinn's congestion controller factory (a configuration
//! holds the factory; each connection, here each run, builds its own state from it).
//!
//! The dynamics are three values the engine calls without knowing what fabric it runs on:
//! - [`Capacities`]: when and how the resources' capacities change ([`Steady`] on the big
//!   switch; the wide area's weather redraws them);
//! - [`Routing`]: how an arriving coflow's bytes are spread over routes ([`Direct`], or the wide
//!   area's multi-path water-filling);
//! - [`ConnectionCaps`]: per-connection throughput caps on top of the policy's rates
//!   ([`Uncapped`], or the wide area's per-connection bandwidth).
//!
//! [`BigSwitchSpec`] is the non-blocking switch of Varys §2.2; [`WanConfig`](crate::WanConfig)
//! is Siphon's wide area.

use std::collections::BTreeMap;
use std::fmt;

use coflow_core::{Coflow, CoflowId, Nanos, Rate};
use coflow_sched::{Fabric, Route};

/// Per direct route, the detours that take part of an arriving coflow's bytes off it, with the
/// fraction each takes.
pub type Split = BTreeMap<Route, Vec<(Route, f64)>>;

/// Builds the fabric of a run and its dynamics.
pub trait FabricSpec: fmt::Debug + Send + Sync {
    /// The fabric for a workload of `machines` machines whose first coflow arrives at `start`,
    /// with its capacities in force then, and its dynamics.
    ///
    /// # Panics
    /// If the fabric places fewer machines than `machines` (validation at the edge refuses that
    /// first).
    fn build(&self, machines: u32, start: Nanos) -> FabricRun;

    /// Coflow `c`'s completion time alone on the empty fabric `fabric` (as [`FabricSpec::build`]
    /// built it and the run left it): Γ_empty, against which a run reports slowdowns.
    fn isolated_cct(&self, fabric: &Fabric, c: &Coflow) -> Nanos;

    /// Whether runs on it report a wide area's figures (Siphon's, with flow groups).
    fn wide_area(&self) -> bool {
        false
    }
}

/// A run's fabric and its dynamics, as a [`FabricSpec`] built them.
pub struct FabricRun {
    /// The resources, their routes and their capacities in force.
    pub fabric: Fabric,
    /// How the capacities change.
    pub capacities: Box<dyn Capacities>,
    /// How arriving coflows are routed.
    pub routing: Box<dyn Routing>,
    /// Per-connection throughput caps.
    pub connections: Box<dyn ConnectionCaps>,
}

impl fmt::Debug for FabricRun {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FabricRun").field("fabric", &self.fabric).finish_non_exhaustive()
    }
}

/// How a fabric's capacities change during a run.
pub trait Capacities: Send {
    /// Sets on `fabric` the capacities in force at `now`; returns whether they changed.
    fn update(&mut self, fabric: &mut Fabric, now: Nanos) -> bool;

    /// When they change next (`Nanos::MAX`: never).
    fn next_change(&self) -> Nanos;
}

/// Capacities that never change.
#[derive(Clone, Copy, Debug, Default)]
pub struct Steady;

impl Capacities for Steady {
    fn update(&mut self, _: &mut Fabric, _: Nanos) -> bool {
        false
    }

    fn next_change(&self) -> Nanos {
        Nanos::MAX
    }
}

/// How an arriving coflow's bytes are spread over routes.
pub trait Routing: Send {
    /// Whether it ever moves bytes off their direct routes; if not, [`Routing::split`] is never
    /// called and the loads it reads are not gathered.
    fn splits(&self) -> bool;

    /// The detours of coflow `c` arriving on `fabric`, where `loads` holds every resource's
    /// remaining bytes from the coflows already active; and the bytes detoured (each crosses one
    /// more resource than on its direct route).
    fn split(&self, fabric: &Fabric, loads: &[f64], c: &Coflow) -> (Split, f64);
}

/// Every byte on its direct route.
#[derive(Clone, Copy, Debug, Default)]
pub struct Direct;

impl Routing for Direct {
    fn splits(&self) -> bool {
        false
    }

    fn split(&self, _: &Fabric, _: &[f64], _: &Coflow) -> (Split, f64) {
        (Split::new(), 0.0)
    }
}

/// Throughput caps on single connections, below the policy's rates (proportional policies only:
/// route-model policies pool flows by route).
pub trait ConnectionCaps: Send {
    /// Whether every flow is a connection with a cap of its own; if not, nothing else is called.
    fn per_flow(&self) -> bool;

    /// Moves to the caps in force at `now`; returns whether they changed.
    fn update(&mut self, now: Nanos) -> bool;

    /// When the caps change next (`Nanos::MAX`: never).
    fn next_change(&self) -> Nanos;

    /// The cap, in bytes per second, of connection `conn` of coflow `coflow` on `route` (the
    /// least of its hops').
    fn cap(&self, coflow: CoflowId, conn: u32, route: Route) -> f64;
}

/// No caps: every flow at the rate the policy gives it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Uncapped;

impl ConnectionCaps for Uncapped {
    fn per_flow(&self) -> bool {
        false
    }

    fn update(&mut self, _: Nanos) -> bool {
        false
    }

    fn next_change(&self) -> Nanos {
        Nanos::MAX
    }

    fn cap(&self, _: CoflowId, _: u32, _: Route) -> f64 {
        f64::INFINITY
    }
}

/// The non-blocking big switch of Varys §2.2: every machine's ingress and egress port at
/// `port_rate`, capacities steady, direct routes, no connection caps.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BigSwitchSpec {
    /// Capacity of every port.
    pub port_rate: Rate,
}

impl FabricSpec for BigSwitchSpec {
    fn build(&self, machines: u32, _: Nanos) -> FabricRun {
        FabricRun {
            fabric: Fabric::big_switch(machines, self.port_rate),
            capacities: Box::new(Steady),
            routing: Box::new(Direct),
            connections: Box::new(Uncapped),
        }
    }

    fn isolated_cct(&self, fabric: &Fabric, c: &Coflow) -> Nanos {
        c.isolated_cct(fabric.machines() as usize, self.port_rate.bytes_per_sec())
    }
}
