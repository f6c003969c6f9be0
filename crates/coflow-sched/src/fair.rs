//! `fair`: per-flow max-min fair sharing of every port, as TCP approximates. The main baseline.

use crate::maxmin::MaxMin;
use crate::scheduler::Scheduler;
use crate::state::{Allocation, Input, ServiceModel};
use coflow_core::Nanos;

/// Per-flow max-min fairness by progressive filling over every resource.
#[derive(Debug, Default)]
pub struct Fair {
    /// Keeps the routes between decisions: they change far less often than their flow counts.
    solver: MaxMin,
}

impl Scheduler for Fair {
    fn name(&self) -> &'static str {
        "fair"
    }

    fn model(&self) -> ServiceModel {
        ServiceModel::Route
    }

    fn flow_finish_gap(&self) -> Option<Nanos> {
        // TCP reacts to every flow that leaves.
        Some(Nanos::ZERO)
    }

    fn reads_min_remaining(&self) -> bool {
        false
    }

    fn poll_allocation(&mut self, input: &Input<'_>, out: &mut Allocation) -> Option<Nanos> {
        let routes = input.routes;
        let route = |i: usize| (&routes[i].route, routes[i].flows as f64);
        // Every route whose flows or position changed is listed, unless everything is new.
        let listed = (!input.changes.everything).then_some(&input.changes.routes[..]);
        self.solver.solve_shares(input.fabric.capacities(), routes.len(), route, listed, &mut out.shares);
        None
    }
}
