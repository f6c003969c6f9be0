//! The one way the CLI runs independent jobs (policies, sweep windows) on several threads: the
//! library's, which `coflow sim` and the Python package share.

pub(crate) use coflow_sim::experiment::parallel_map;
