//! Policies by short name, as every command line and config file selects them: the registry's
//! table ([`REGISTRY`]) and its readers.

pub use crate::registry::{
    Entry, JOB_NAMES, List, MonteCarlo, NAIVE, NAMES, Needs, Param, Params, REGISTRY, TCP, UNSCHEDULED, UnknownPolicy,
    Unscheduled, Unservable, WAN_NAMES, build, by_name, check_live, check_serves, entry_of, parse_list,
    parse_list_within, seeded, simulated, unscheduled,
};
