//! `karuna`: Karuna's mix of deadline and non-deadline traffic (Chen et al., SIGCOMM 2016, the
//! slides in `shared/seeds/002_…`), for coflows.
//!
//! Deadline coflows should minimally impact the others: each gets, at the top priority and in
//! deadline order, the minimal rates that finish it just before its deadline (MADD with `τ = D`:
//! every flow sends `remaining / (D − now)`), its MCP. Non-deadline coflows take all the rest,
//! work-conserving, over a few strict priority levels that mimic smallest-job-first: by size when
//! sizes are known (Karuna's splitting thresholds), by bytes already sent when they are not (its
//! PIAS demotion thresholds). Inside a level, the smallest remaining coflow goes first; each gets
//! MADD on what the levels above left, then leftover bandwidth is backfilled flow by flow in the
//! same order, and last to the deadline coflows, so they finish early only on bandwidth no one
//! else wants.
//!
//! Karuna does not reject. A deadline coflow keeps its minimal rates once it has been given them
//! (so a later one cannot break it); one whose minimal rates do not fit next to those gets, after
//! them but above every non-deadline coflow, what is left on its ports (MADD on the leftover), in
//! case it still makes it, and is given its minimal rates as soon as they fit. Once its deadline
//! has passed it has missed and is served as a non-deadline coflow, so a hopeless coflow stops
//! taking bandwidth from the others.

use std::collections::BTreeSet;

use coflow_core::{CoflowId, MIB, Nanos};

use crate::fabric::ResourceId;
use crate::kernel::{backfill, madd};
use crate::scheduler::Scheduler;
use crate::state::{Allocation, CoflowState, Input, ServiceModel};

/// What the non-deadline levels are keyed on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Levels {
    /// Sizes are known: a coflow's level is set by its total bytes (splitting thresholds).
    BySize,
    /// Sizes are unknown: a coflow starts at the top level and is demoted as its bytes sent
    /// cross the thresholds (PIAS), and coflows inside a level go in arrival order.
    BySent,
}

/// Parameters of [`Karuna`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KarunaConfig {
    /// What sets a non-deadline coflow's level.
    pub levels: Levels,
    /// The number of strict priority levels for non-deadline coflows (Karuna's testbed switch
    /// has 8 queues, one of which serves deadline traffic: 7 are left).
    pub level_count: usize,
    /// The first threshold (bytes); each next one is `factor` times larger.
    pub first_threshold: f64,
    /// The growth factor between thresholds.
    pub factor: f64,
    /// After flows finish, reschedule at most once per this interval (as Varys does).
    pub flow_finish_gap: Option<Nanos>,
}

impl Default for KarunaConfig {
    fn default() -> Self {
        KarunaConfig {
            levels: Levels::BySize,
            level_count: 7,
            first_threshold: (10 * MIB) as f64,
            factor: 10.0,
            flow_finish_gap: Some(Nanos::from_millis(100)),
        }
    }
}

impl KarunaConfig {
    /// The level (0 first) of a coflow whose key (total or sent bytes) is `bytes`.
    pub fn level(&self, bytes: f64) -> usize {
        let mut level = 0;
        let mut threshold = self.first_threshold;
        while level + 1 < self.level_count && bytes >= threshold {
            level += 1;
            threshold *= self.factor;
        }
        level
    }
}

/// Karuna for coflows.
#[derive(Debug, Default)]
pub struct Karuna {
    cfg: KarunaConfig,
    /// Deadline coflows given their minimal rates by the last decision.
    committed: BTreeSet<CoflowId>,
}

impl Karuna {
    /// Karuna with these parameters.
    pub fn new(cfg: KarunaConfig) -> Karuna {
        assert!(cfg.level_count >= 1 && cfg.first_threshold > 0.0 && cfg.factor > 1.0, "invalid Karuna parameters");
        Karuna { cfg, committed: BTreeSet::new() }
    }
}

/// A coflow's absolute deadline, if it has one.
fn deadline_of(c: &CoflowState) -> Option<Nanos> {
    c.deadline.map(|d| c.arrival.saturating_add(d))
}

impl Scheduler for Karuna {
    fn name(&self) -> &'static str {
        "karuna"
    }

    fn model(&self) -> ServiceModel {
        ServiceModel::Proportional
    }

    fn flow_finish_gap(&self) -> Option<Nanos> {
        self.cfg.flow_finish_gap
    }

    fn handle_finished(&mut self, _now: Nanos, coflow: CoflowId) {
        self.committed.remove(&coflow);
    }

    fn poll_allocation(&mut self, input: &Input<'_>, out: &mut Allocation) -> Option<Nanos> {
        let now = input.now;
        let cap = input.fabric.capacities();
        let mut left = cap.to_vec();
        let loads: Vec<Vec<(ResourceId, f64)>> =
            input.coflows.iter().map(|c| input.remaining_loads(c).collect()).collect();

        // Deadline coflows still before their deadline, earliest first; the others are ranked by
        // level, then (sizes known) smallest remaining, then arrival.
        let mut urgent: Vec<(Nanos, usize)> = Vec::new();
        let mut rest: Vec<(usize, f64, usize)> = Vec::new();
        for (k, c) in input.coflows.iter().enumerate() {
            match deadline_of(c) {
                // A coflow given its minimal rates finishes at its deadline, rounded up to the
                // nanosecond: it stays first until then.
                Some(d) if d > now || self.committed.contains(&c.id) => urgent.push((d, k)),
                _ => {
                    let bytes: f64 = input.legs_of(c).iter().map(|l| l.bytes).sum();
                    let remaining: f64 = input.legs_of(c).iter().map(|l| l.remaining(c)).sum();
                    let (level, within) = match self.cfg.levels {
                        Levels::BySize => (self.cfg.level(bytes), remaining),
                        Levels::BySent => (self.cfg.level(bytes - remaining), 0.0),
                    };
                    rest.push((level, within, k));
                }
            }
        }
        urgent.sort_unstable();
        rest.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)).then(a.2.cmp(&b.2)));

        // 1. MCP: in deadline order, each deadline coflow gets the minimal rates that finish it at
        //    its deadline if they fit in what earlier deadlines left.
        let mut late: Vec<usize> = Vec::new();
        for &(d, k) in &urgent {
            let id = input.coflows[k].id;
            if d <= now {
                // Given its minimal rates before, it finishes at its deadline rounded up to the
                // nanosecond: as fast as it can.
                out.coflow_rate[k] = madd(&loads[k], &mut left, cap);
                continue;
            }
            let sigma = 1.0 / (d - now).as_secs_f64();
            let fits = loads[k].iter().all(|&(r, b)| b * sigma <= left[r as usize] * (1.0 + 1e-12));
            if fits {
                for &(r, b) in &loads[k] {
                    left[r as usize] = (left[r as usize] - b * sigma).max(0.0);
                }
                out.coflow_rate[k] = sigma;
                self.committed.insert(id);
            } else {
                self.committed.remove(&id);
                late.push(k);
            }
        }
        //    Deadline coflows whose minimal rates do not fit get what is left on their ports,
        //    earliest deadline first, above every non-deadline coflow.
        late.sort_by_key(|&k| (deadline_of(&input.coflows[k]), k));
        for &k in &late {
            out.coflow_rate[k] = madd(&loads[k], &mut left, cap);
        }
        // 2. Non-deadline coflows by level, each by MADD on what is left.
        for &(_, _, k) in &rest {
            out.coflow_rate[k] = madd(&loads[k], &mut left, cap);
        }
        // 3. Work conservation: leftover bandwidth flow by flow, non-deadline coflows first.
        for &(_, _, k) in &rest {
            backfill(input, &input.coflows[k], &mut left, cap, out);
        }
        for &(_, k) in &urgent {
            backfill(input, &input.coflows[k], &mut left, cap, out);
        }
        // Decide again when the first of the others' deadlines passes: it then joins the levels.
        late.iter().filter_map(|&k| deadline_of(&input.coflows[k])).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_split_at_exponentially_spaced_thresholds() {
        let cfg = KarunaConfig::default();
        let mib = MIB as f64;
        assert_eq!(cfg.level(0.0), 0);
        assert_eq!(cfg.level(10.0 * mib), 1);
        assert_eq!(cfg.level(999.0 * mib), 2);
        assert_eq!(cfg.level(1e30), 6);
    }
}
