//! `fair`: per-flow max-min fair sharing of every port, as TCP approximates. The main baseline.

use crate::fabric::Route;
use crate::maxmin::MaxMin;
use crate::scheduler::Scheduler;
use crate::state::{Allocation, Input, ServiceModel};
use coflow_core::Nanos;

/// Per-flow max-min fairness by progressive filling over every resource.
#[derive(Debug, Default)]
pub struct Fair {
    solver: MaxMin,
    routes: Vec<Route>,
    weights: Vec<f64>,
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

    fn poll_allocation(&mut self, input: &Input<'_>, out: &mut Allocation) -> Option<Nanos> {
        self.routes.clear();
        self.weights.clear();
        for rt in input.routes {
            self.routes.push(rt.route);
            self.weights.push(rt.flows as f64);
        }
        self.solver.solve(input.fabric.capacities(), &self.routes, &self.weights, &mut out.route_rate);
        None
    }
}
