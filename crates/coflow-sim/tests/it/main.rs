//! Integration tests of the simulator: worked examples, analytic cases and properties.

mod analytic;
mod bench;
mod blind;
mod coflowsim;
mod examples;
mod incremental;
mod jobs;
mod ordering;
mod properties;
mod support;
mod wan;
