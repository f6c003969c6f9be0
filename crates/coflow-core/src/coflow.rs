//! Coflows, their flows, the Varys size/width bins, and a whole workload.

use std::collections::BTreeSet;
use std::fmt;

use crate::{Bytes, CoflowId, MIB, MachineId, Nanos};

/// A coflow is short if its longest flow is under this size (Varys §7.1: 5 MB, taken as 5 MiB).
pub const SHORT_LONGEST_FLOW: Bytes = Bytes(5 * MIB);
/// A coflow is narrow if it has at most this many flows (Varys §7.1).
pub const NARROW_MAX_FLOWS: usize = 50;

/// One flow: `size` bytes from machine `src` to machine `dst`.
///
/// A flow whose `src` equals its `dst` is local: it crosses no port of the fabric.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Flow {
    /// The sending machine (its ingress port).
    pub src: MachineId,
    /// The receiving machine (its egress port).
    pub dst: MachineId,
    /// The bytes to move.
    pub size: Bytes,
}

impl Flow {
    /// Whether the flow stays inside one machine.
    pub fn is_local(&self) -> bool {
        self.src == self.dst
    }

    /// Whether the flow has bytes to move across the fabric: it is not local and not empty.
    /// Flows that do not are done as soon as their coflow arrives.
    pub fn crosses_fabric(&self) -> bool {
        !self.is_local() && self.size.get() > 0
    }
}

/// A coflow: the flows of one communication stage, with its options.
#[derive(Clone, Debug, PartialEq)]
pub struct Coflow {
    /// Its identifier, unique within a workload.
    pub id: CoflowId,
    /// When it arrives (becomes ready to schedule).
    pub arrival: Nanos,
    /// Its flows.
    pub flows: Vec<Flow>,
    /// A deadline, if it has one: relative to its release, which is its arrival unless it waits
    /// for parents (as its completion time is).
    pub deadline: Option<Nanos>,
    /// Its weight (or priority) for weighted objectives; 1 by default.
    pub weight: f64,
    /// Coflows that must finish before this one may start.
    pub parents: Vec<CoflowId>,
    /// Whether the scheduler may know flow sizes up front.
    pub sizes_known: bool,
    /// A human name, if the trace gives one.
    pub name: Option<String>,
}

impl Coflow {
    /// A coflow with default options: no deadline, weight 1, no parents, sizes known.
    pub fn new(id: CoflowId, arrival: Nanos, flows: Vec<Flow>) -> Coflow {
        Coflow { id, arrival, flows, deadline: None, weight: 1.0, parents: Vec::new(), sizes_known: true, name: None }
    }

    /// Total bytes over all flows.
    pub fn total_bytes(&self) -> Bytes {
        self.flows.iter().map(|f| f.size).sum()
    }

    /// The size of its largest flow, the coflow's "length".
    pub fn longest_flow(&self) -> Bytes {
        self.flows.iter().map(|f| f.size).max().unwrap_or(Bytes::ZERO)
    }

    /// Its number of flows, the coflow's "width".
    pub fn width(&self) -> usize {
        self.flows.len()
    }

    /// Its Varys bin.
    pub fn bin(&self) -> Bin {
        Bin::of(self.longest_flow(), self.width())
    }

    /// Its minimum completion time alone on an empty big-switch fabric whose every port has
    /// `port_bytes_per_sec` of capacity: the most loaded port's bytes over the port rate
    /// (Varys Eq. 1 with every port free). Local flows cross no port.
    pub fn isolated_cct(&self, machines: usize, port_bytes_per_sec: f64) -> Nanos {
        let mut load = vec![0u64; 2 * machines];
        for f in self.flows.iter().filter(|f| !f.is_local()) {
            load[f.src.index()] += f.size.get();
            load[machines + f.dst.index()] += f.size.get();
        }
        let max = load.into_iter().max().unwrap_or(0);
        Nanos::from_secs_f64(max as f64 / port_bytes_per_sec)
    }
}

/// The four coflow bins of Varys §7.1, by length (short: longest flow under 5 MiB) and width
/// (narrow: at most 50 flows).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Bin {
    /// Short and narrow.
    SN,
    /// Long and narrow.
    LN,
    /// Short and wide.
    SW,
    /// Long and wide.
    LW,
}

impl Bin {
    /// Every bin, in report order.
    pub const ALL: [Bin; 4] = [Bin::SN, Bin::LN, Bin::SW, Bin::LW];

    /// The bin of a coflow of this length and width.
    pub fn of(longest: Bytes, width: usize) -> Bin {
        let short = longest < SHORT_LONGEST_FLOW;
        let narrow = width <= NARROW_MAX_FLOWS;
        match (short, narrow) {
            (true, true) => Bin::SN,
            (false, true) => Bin::LN,
            (true, false) => Bin::SW,
            (false, false) => Bin::LW,
        }
    }

    /// The short name, e.g. `"SN"`.
    pub fn name(self) -> &'static str {
        match self {
            Bin::SN => "SN",
            Bin::LN => "LN",
            Bin::SW => "SW",
            Bin::LW => "LW",
        }
    }
}

impl fmt::Display for Bin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A whole workload: the machines of the fabric and the coflows to replay on it.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Workload {
    /// The number of machines; every flow endpoint is below it.
    pub machines: u32,
    /// The coflows, sorted by arrival then id (coflows that a transform releases together, as
    /// [`Workload::release_at_zero`], keep their order).
    pub coflows: Vec<Coflow>,
}

/// Why a [`Workload`] is not valid.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum WorkloadError {
    /// Two coflows share an id.
    #[error("coflow id {0} appears more than once")]
    DuplicateId(CoflowId),
    /// A flow names a machine past the fabric.
    #[error("coflow {coflow}: flow {flow} uses machine {machine}, but the fabric has {machines} machines")]
    MachineOutOfRange {
        /// The coflow.
        coflow: CoflowId,
        /// The flow's index in the coflow.
        flow: usize,
        /// The machine named.
        machine: MachineId,
        /// The fabric size.
        machines: u32,
    },
    /// A coflow names a parent that is not in the workload.
    #[error("coflow {coflow} depends on unknown coflow {parent}")]
    UnknownParent {
        /// The coflow.
        coflow: CoflowId,
        /// The parent named.
        parent: CoflowId,
    },
    /// A weight is not a positive finite number.
    #[error("coflow {0}: weight must be positive and finite")]
    BadWeight(CoflowId),
    /// The workload's bytes together do not fit in 64 bits.
    #[error("the flows' bytes together pass 2^64 (at coflow {0})")]
    TooManyBytes(CoflowId),
    /// A coflow arrives at the end of time, which stands for never.
    #[error("coflow {0}: arrival must be before the end of time ({max} ns)", max = u64::MAX)]
    NeverArrives(CoflowId),
    /// Following parents from a coflow leads back to it: its job is not a DAG.
    #[error("coflow {0} depends on itself through its parents (a cycle)")]
    Cycle(CoflowId),
}

impl WorkloadError {
    /// The coflow the error is about (for a duplicate id, the id).
    pub fn coflow(&self) -> CoflowId {
        match *self {
            WorkloadError::DuplicateId(c)
            | WorkloadError::BadWeight(c)
            | WorkloadError::TooManyBytes(c)
            | WorkloadError::NeverArrives(c)
            | WorkloadError::Cycle(c)
            | WorkloadError::MachineOutOfRange { coflow: c, .. }
            | WorkloadError::UnknownParent { coflow: c, .. } => c,
        }
    }
}

impl Workload {
    /// Builds a workload, sorting coflows by arrival (then id) and validating it.
    pub fn new(machines: u32, mut coflows: Vec<Coflow>) -> Result<Workload, WorkloadError> {
        coflows.sort_by_key(|c| (c.arrival, c.id));
        let w = Workload { machines, coflows };
        w.validate()?;
        Ok(w)
    }

    /// Checks ids are unique, endpoints are inside the fabric, parents exist, weights are sane,
    /// every coflow arrives before the end of time and the bytes together fit in 64 bits.
    pub fn validate(&self) -> Result<(), WorkloadError> {
        let mut ids = BTreeSet::new();
        let mut bytes = 0u64;
        for c in &self.coflows {
            for f in &c.flows {
                bytes = bytes.checked_add(f.size.get()).ok_or(WorkloadError::TooManyBytes(c.id))?;
            }
            if !ids.insert(c.id) {
                return Err(WorkloadError::DuplicateId(c.id));
            }
            if !(c.weight.is_finite() && c.weight > 0.0) {
                return Err(WorkloadError::BadWeight(c.id));
            }
            if c.arrival == Nanos::MAX {
                return Err(WorkloadError::NeverArrives(c.id));
            }
            for (i, f) in c.flows.iter().enumerate() {
                for m in [f.src, f.dst] {
                    if m.0 >= self.machines {
                        return Err(WorkloadError::MachineOutOfRange {
                            coflow: c.id,
                            flow: i,
                            machine: m,
                            machines: self.machines,
                        });
                    }
                }
            }
        }
        for c in &self.coflows {
            if let Some(p) = c.parents.iter().find(|p| !ids.contains(p)) {
                return Err(WorkloadError::UnknownParent { coflow: c.id, parent: *p });
            }
        }
        self.check_acyclic()
    }

    /// Whether any coflow names a parent.
    pub fn has_dependencies(&self) -> bool {
        self.coflows.iter().any(|c| !c.parents.is_empty())
    }

    /// Per coflow (by index), the indices of its parents; parents must exist (see [`Workload::validate`]).
    pub fn parent_indices(&self) -> Vec<Vec<usize>> {
        let index: std::collections::BTreeMap<CoflowId, usize> =
            self.coflows.iter().enumerate().map(|(i, c)| (c.id, i)).collect();
        self.coflows.iter().map(|c| c.parents.iter().filter_map(|p| index.get(p).copied()).collect()).collect()
    }

    /// Per coflow (by index), its job: the index of the first coflow, in workload order, of its
    /// connected component of the dependency graph (parents and children alike). A coflow without
    /// parents or children is a job of its own.
    pub fn jobs(&self) -> Vec<usize> {
        // Union-find over the parent edges; each root ends as the smallest index of its set.
        let mut root: Vec<usize> = (0..self.coflows.len()).collect();
        fn find(root: &mut [usize], mut i: usize) -> usize {
            while root[i] != i {
                root[i] = root[root[i]];
                i = root[i];
            }
            i
        }
        for (i, parents) in self.parent_indices().into_iter().enumerate() {
            for p in parents {
                let (a, b) = (find(&mut root, i), find(&mut root, p));
                root[a.max(b)] = a.min(b);
            }
        }
        (0..self.coflows.len()).map(|i| find(&mut root, i)).collect()
    }

    /// Errors with the first coflow, in workload order, that lies on a cycle of parents.
    fn check_acyclic(&self) -> Result<(), WorkloadError> {
        if !self.has_dependencies() {
            return Ok(());
        }
        let parents = self.parent_indices();
        // Kahn's algorithm: coflows whose parents all drain are on no cycle.
        let mut waiting: Vec<usize> = parents.iter().map(Vec::len).collect();
        let mut children = vec![Vec::new(); parents.len()];
        for (i, ps) in parents.iter().enumerate() {
            for &p in ps {
                children[p].push(i);
            }
        }
        let mut ready: Vec<usize> = (0..waiting.len()).filter(|&i| waiting[i] == 0).collect();
        while let Some(i) = ready.pop() {
            for &ch in &children[i] {
                waiting[ch] -= 1;
                if waiting[ch] == 0 {
                    ready.push(ch);
                }
            }
        }
        // A coflow left waiting is on a cycle or below one; name one on the cycle: walk up
        // waiting parents until a coflow repeats.
        let Some(start) = waiting.iter().position(|&w| w > 0) else { return Ok(()) };
        let mut seen = vec![false; waiting.len()];
        let mut i = start;
        while !seen[i] {
            seen[i] = true;
            i = *parents[i].iter().find(|&&p| waiting[p] > 0).expect("a waiting coflow has a waiting parent");
        }
        Err(WorkloadError::Cycle(self.coflows[i].id))
    }

    /// Total number of flows.
    pub fn flow_count(&self) -> usize {
        self.coflows.iter().map(|c| c.flows.len()).sum()
    }

    /// Total bytes.
    pub fn total_bytes(&self) -> Bytes {
        self.coflows.iter().map(|c| c.total_bytes()).sum()
    }

    /// Releases every coflow at time 0 (the offline setting of the ordering literature),
    /// keeping their order, so that coflows that arrived earlier still come first among equals.
    /// Dependencies are kept: a child still waits for its parents.
    pub fn release_at_zero(&mut self) {
        for c in &mut self.coflows {
            c.arrival = Nanos::ZERO;
        }
    }

    /// The workload with every flow size and arrival time multiplied by `k`, which keeps the
    /// load: sizes are rounded to the byte and stay at least 1, arrivals to the nanosecond.
    pub fn scaled(&self, k: f64) -> Result<Workload, WorkloadError> {
        let coflows = self
            .coflows
            .iter()
            .map(|c| {
                let flows = c
                    .flows
                    .iter()
                    .map(|f| Flow { size: Bytes(((f.size.get() as f64 * k).round() as u64).max(1)), ..*f });
                Coflow {
                    arrival: Nanos::from_secs_f64(c.arrival.as_secs_f64() * k),
                    flows: flows.collect(),
                    ..c.clone()
                }
            })
            .collect();
        Workload::new(self.machines, coflows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow(src: u32, dst: u32, mib: u64) -> Flow {
        Flow { src: MachineId(src), dst: MachineId(dst), size: Bytes::mib(mib) }
    }

    #[test]
    fn bins_follow_varys_thresholds() {
        assert_eq!(Bin::of(Bytes(5 * MIB - 1), 50), Bin::SN);
        assert_eq!(Bin::of(Bytes(5 * MIB), 50), Bin::LN);
        assert_eq!(Bin::of(Bytes(1), 51), Bin::SW);
        assert_eq!(Bin::of(Bytes(5 * MIB), 51), Bin::LW);
    }

    #[test]
    fn isolated_cct_is_the_most_loaded_port() {
        // Two flows into machine 2's egress: 3 MiB + 1 MiB at 1 MiB/s is 4 s.
        let c = Coflow::new(CoflowId(1), Nanos::ZERO, vec![flow(0, 2, 3), flow(1, 2, 1), flow(3, 3, 100)]);
        assert_eq!(c.isolated_cct(4, MIB as f64), Nanos::from_secs(4));
    }

    #[test]
    fn workload_rejects_out_of_range_machines_and_duplicates() {
        let c = Coflow::new(CoflowId(1), Nanos::ZERO, vec![flow(0, 5, 1)]);
        assert!(matches!(Workload::new(4, vec![c.clone()]), Err(WorkloadError::MachineOutOfRange { .. })));
        let ok = Coflow::new(CoflowId(1), Nanos::ZERO, vec![flow(0, 1, 1)]);
        assert_eq!(Workload::new(4, vec![ok.clone(), ok]), Err(WorkloadError::DuplicateId(CoflowId(1))));
    }

    fn with_parents(id: u64, parents: &[u64]) -> Coflow {
        let mut c = Coflow::new(CoflowId(id), Nanos::ZERO, vec![flow(0, 1, 1)]);
        c.parents = parents.iter().map(|&p| CoflowId(p)).collect();
        c
    }

    #[test]
    fn cycles_and_unknown_parents_name_the_coflow() {
        let cycle = vec![with_parents(1, &[]), with_parents(2, &[1, 4]), with_parents(3, &[2]), with_parents(4, &[3])];
        let err = Workload::new(2, cycle).unwrap_err();
        assert!(matches!(err, WorkloadError::Cycle(CoflowId(2..=4))), "{err:?}");
        assert!(err.to_string().contains("cycle"), "{err}");
        assert_eq!(Workload::new(2, vec![with_parents(5, &[5])]), Err(WorkloadError::Cycle(CoflowId(5))));
        let unknown = Workload::new(2, vec![with_parents(1, &[]), with_parents(2, &[9])]).unwrap_err();
        assert_eq!(unknown, WorkloadError::UnknownParent { coflow: CoflowId(2), parent: CoflowId(9) });
        assert_eq!(unknown.to_string(), "coflow 2 depends on unknown coflow 9");
    }

    #[test]
    fn arrivals_at_the_end_of_time_and_bytes_past_64_bits_are_refused() {
        // `Nanos::MAX` stands for never in the simulator: such a coflow could never be served.
        let at = |ns: u64| Workload::new(2, vec![Coflow::new(CoflowId(7), Nanos(ns), vec![flow(0, 1, 1)])]);
        assert_eq!(at(u64::MAX), Err(WorkloadError::NeverArrives(CoflowId(7))));
        assert!(at(u64::MAX).unwrap_err().to_string().starts_with("coflow 7: arrival"));
        assert!(at(u64::MAX - 1).is_ok());
        // Bytes that would wrap around when summed.
        let quarter = |src, dst| Flow { src: MachineId(src), dst: MachineId(dst), size: Bytes(1 << 62) };
        let big = |id| Coflow::new(CoflowId(id), Nanos::ZERO, vec![quarter(0, 1), quarter(1, 0)]);
        assert_eq!(Workload::new(2, vec![big(1), big(2)]), Err(WorkloadError::TooManyBytes(CoflowId(2))));
        assert!(Workload::new(2, vec![big(1)]).is_ok());
    }

    #[test]
    fn release_at_zero_keeps_the_order_and_the_dependencies() {
        let at = |id: u64, ms: u64| Coflow::new(CoflowId(id), Nanos::from_millis(ms), vec![flow(0, 1, 1)]);
        let mut child = at(1, 30);
        child.parents = vec![CoflowId(7)];
        let mut w = Workload::new(2, vec![at(7, 10), at(3, 20), child]).unwrap();
        w.release_at_zero();
        assert!(w.coflows.iter().all(|c| c.arrival == Nanos::ZERO));
        let ids: Vec<u64> = w.coflows.iter().map(|c| c.id.get()).collect();
        assert_eq!(ids, [7, 3, 1], "the arrival order, not the id order");
        assert_eq!(w.coflows[2].parents, [CoflowId(7)]);
        assert_eq!(w.validate(), Ok(()));
    }

    #[test]
    fn scaling_multiplies_sizes_and_arrivals_alike() {
        let c = |id: u64, ms: u64, sizes: &[u64]| {
            let flows = sizes.iter().map(|&b| Flow { src: MachineId(0), dst: MachineId(1), size: Bytes(b) }).collect();
            Coflow::new(CoflowId(id), Nanos::from_millis(ms), flows)
        };
        let w = Workload::new(2, vec![c(1, 0, &[1_000, 3]), c(2, 400, &[10])]).unwrap();
        let half = w.scaled(0.25).unwrap();
        let sizes: Vec<Vec<u64>> =
            half.coflows.iter().map(|c| c.flows.iter().map(|f| f.size.get()).collect()).collect();
        // 3 × 0.25 rounds to 1 byte; no flow shrinks to nothing.
        assert_eq!(sizes, [vec![250, 1], vec![3]]);
        assert_eq!(half.coflows[1].arrival, Nanos::from_millis(100));
        assert_eq!(w.scaled(1.0).unwrap(), w);
    }

    #[test]
    fn jobs_are_connected_components() {
        // A diamond 1 -> {2, 3} -> 4, a chain 5 -> 6, and 7 alone.
        let w = Workload::new(
            2,
            vec![
                with_parents(1, &[]),
                with_parents(2, &[1]),
                with_parents(3, &[1]),
                with_parents(4, &[2, 3]),
                with_parents(5, &[]),
                with_parents(6, &[5]),
                with_parents(7, &[]),
            ],
        )
        .unwrap();
        assert_eq!(w.jobs(), vec![0, 0, 0, 0, 4, 4, 6]);
        assert!(w.has_dependencies());
    }
}
