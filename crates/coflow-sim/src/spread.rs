//! Spreading a rack-level trace's tasks over the machines of each rack.
//!
//! The public Facebook trace places every map and reduce task on one of 150 racks of a
//! 3,000-machine cluster; replayed as it is, each rack is one machine. The Varys paper replayed it
//! at task level on 3,000 machines. [`spread_tasks`] gives that shape: each rack becomes
//! `per_rack` machines (rack `r` is machines `r·per_rack .. (r+1)·per_rack`), and each task goes
//! to one of its rack's machines, drawn from a seed. A coflow's flows, their sizes, its arrival
//! and everything else stay as they were; only where its tasks run changes.
//!
//! Tasks are read from the flows: a coflow of the benchmark format is a full mapper × reducer
//! product listed reducer by reducer, the mappers in the same order each time, so flow `j` is
//! mapper `j mod m` to reducer `j div m` for the smallest mapper count `m` that fits. That is
//! the trace's own count when no two of a coflow's mappers share a rack, nor two of its reducers,
//! which holds for every coflow of the Facebook trace; tasks that share a rack and cannot be told
//! apart move together.

use coflow_core::{Coflow, CoflowId, Flow, MachineId, Workload, WorkloadError};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Why a workload cannot be spread.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SpreadError {
    /// A rack is at least one machine.
    #[error("--per-rack must be at least 1")]
    NoMachines,
    /// The machines would be more than a workload may have ([`coflow_trace::synth::MAX_MACHINES`],
    /// which the trace readers refuse beyond).
    #[error(
        "{racks} racks of {per_rack} machines are more than the {} machines a workload may have",
        coflow_trace::synth::MAX_MACHINES
    )]
    TooMany {
        /// Racks in the workload.
        racks: u32,
        /// Machines asked for per rack.
        per_rack: u32,
    },
    /// A coflow's flows are not a mapper × reducer product, so its tasks are unknown.
    #[error("coflow {0}: its flows are not a mapper × reducer product listed reducer by reducer")]
    NotTasks(CoflowId),
    /// The spread workload is not valid (it was not either).
    #[error(transparent)]
    Workload(#[from] WorkloadError),
}

/// `w` with every rack made `per_rack` machines and each task on one of its rack's machines,
/// drawn from `seed` (see the module documentation).
pub fn spread_tasks(w: &Workload, per_rack: u32, seed: u64) -> Result<Workload, SpreadError> {
    if per_rack == 0 {
        return Err(SpreadError::NoMachines);
    }
    let machines = w
        .machines
        .checked_mul(per_rack)
        .filter(|&m| m <= coflow_trace::synth::MAX_MACHINES)
        .ok_or(SpreadError::TooMany { racks: w.machines, per_rack })?;
    // The crate's seeded generator, as the deadlines and the sweep's windows draw.
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut place = |rack: MachineId| MachineId(rack.0 * per_rack + rng.gen_range(0..per_rack));
    let mut coflows = Vec::with_capacity(w.coflows.len());
    for c in &w.coflows {
        let m = mapper_count(c).ok_or(SpreadError::NotTasks(c.id))?;
        let mappers: Vec<MachineId> = c.flows[..m].iter().map(|f| place(f.src)).collect();
        let mut flows = Vec::with_capacity(c.flows.len());
        for reducer in c.flows.chunks(m) {
            let dst = place(reducer[0].dst);
            flows.extend(reducer.iter().zip(&mappers).map(|(f, &src)| Flow { src, dst, size: f.size }));
        }
        coflows.push(Coflow { flows, ..c.clone() });
    }
    Ok(Workload::new(machines, coflows)?)
}

/// The smallest `m` under which `c`'s flows are `m` mappers to each of some reducers in turn,
/// the mappers in the same order each time; `None` if there is none (or no flow).
fn mapper_count(c: &Coflow) -> Option<usize> {
    let n = c.flows.len();
    (1..=n).filter(|&m| n.is_multiple_of(m)).find(|&m| {
        c.flows
            .chunks(m)
            .all(|block| block.iter().zip(&c.flows[..m]).all(|(f, first)| f.src == first.src && f.dst == block[0].dst))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use coflow_core::{Bytes, Nanos};

    fn flow(src: u32, dst: u32, size: u64) -> Flow {
        Flow { src: MachineId(src), dst: MachineId(dst), size: Bytes(size) }
    }

    #[test]
    fn each_task_stays_on_one_machine_of_its_rack() {
        // Mappers on racks 0 and 1 (twice), reducers on racks 1 and 2: 3 × 2 flows.
        let flows = vec![flow(0, 1, 5), flow(1, 1, 5), flow(1, 1, 5), flow(0, 2, 7), flow(1, 2, 7), flow(1, 2, 7)];
        let w = Workload::new(3, vec![Coflow::new(CoflowId(1), Nanos(3), flows.clone())]).unwrap();
        let s = spread_tasks(&w, 20, 1).unwrap();
        assert_eq!(s.machines, 60);
        let c = &s.coflows[0];
        assert_eq!((c.id, c.arrival, c.flows.len()), (CoflowId(1), Nanos(3), 6));
        for (f, g) in c.flows.iter().zip(&flows) {
            assert_eq!(f.size, g.size);
            assert_eq!((f.src.0 / 20, f.dst.0 / 20), (g.src.0, g.dst.0), "a task left its rack");
        }
        // A mapper sends to every reducer from one machine; a reducer receives on one machine.
        for j in 0..3 {
            assert_eq!(c.flows[j].src, c.flows[j + 3].src);
            assert_eq!(c.flows[j].dst, c.flows[0].dst);
            assert_eq!(c.flows[j + 3].dst, c.flows[3].dst);
        }
        // The same seed places the same; one machine per rack changes nothing.
        assert_eq!(spread_tasks(&w, 20, 1).unwrap(), s);
        assert_eq!(spread_tasks(&w, 1, 9).unwrap(), w);
    }

    #[test]
    fn the_smallest_mapper_count_is_read_and_other_shapes_are_refused() {
        let c = |flows| Coflow::new(CoflowId(4), Nanos(0), flows);
        // Two mappers both on rack 0 cannot be told from one mapper sending twice.
        assert_eq!(mapper_count(&c(vec![flow(0, 1, 1), flow(0, 1, 1)])), Some(1));
        assert_eq!(mapper_count(&c(vec![flow(0, 1, 1), flow(2, 1, 1), flow(0, 3, 1), flow(2, 3, 1)])), Some(2));
        let odd = Workload::new(4, vec![c(vec![flow(0, 1, 1), flow(2, 3, 1), flow(2, 1, 1)])]).unwrap();
        assert_eq!(spread_tasks(&odd, 2, 1), Err(SpreadError::NotTasks(CoflowId(4))));
        assert_eq!(spread_tasks(&odd, 0, 1), Err(SpreadError::NoMachines));
        // No more machines than a trace may be read back with.
        let limit = coflow_trace::synth::MAX_MACHINES;
        let racks = Workload::new(2, vec![Coflow::new(CoflowId(1), Nanos::ZERO, vec![flow(0, 1, 10)])]).unwrap();
        assert_eq!(spread_tasks(&racks, limit / 2, 1).map(|w| w.machines), Ok(limit));
        assert_eq!(
            spread_tasks(&racks, limit / 2 + 1, 1),
            Err(SpreadError::TooMany { racks: 2, per_rack: limit / 2 + 1 })
        );
    }
}
