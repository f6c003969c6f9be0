//! What a coflow holds: the pieces put into it and its unfinished flows, each with its bytes per
//! port kept as they come and go, so that judging the coflow small at a get costs its ports, not
//! its pieces and every flow of the coordinator, and a status page's bytes cost its ports too.

use std::collections::{BTreeMap, BTreeSet};

use coflow_core::{FlowId, MachineId};
use coflow_proto::DataId;

use super::Core;

impl Core {
    /// Counts every coflow's pieces and unfinished flows per machine afresh and compares them
    /// with the counts kept as they came and went, checks every coflow's readiness deadline
    /// against where it is filed, and what each owner holds, has bypassing the policy and has
    /// served by each machine; the first that differs, if any.
    /// For tests.
    #[doc(hidden)]
    pub fn recount(&self) -> Result<(), String> {
        self.check_ready()?;
        self.owners.check(self.coflows.iter().map(|(&id, c)| (id, c.reg.owner.as_str(), c.puts.len())))?;
        self.owners.check_bypassing(self.coflows.iter().map(|(&id, c)| {
            (id, c.reg.owner.as_str(), c.bypassed(), !c.flows.ids.is_empty(), c.flows.ids.len() > c.held.len())
        }))?;
        self.owners.check_serving(self.flows.iter().map(|(&id, f)| {
            let owner = self.coflows.get(&f.coflow).map_or("", |c| c.reg.owner.as_str());
            (id, owner, super::owners::served_by(f.src, f.dst, f.via))
        }))?;
        for (&id, c) in &self.coflows {
            let mut at = BTreeMap::new();
            for &(m, size) in c.puts.by_id.values() {
                add(&mut at, m, size);
            }
            let (mut ids, mut to) = (BTreeSet::new(), BTreeMap::new());
            for (&fid, f) in self.flows.iter().filter(|(_, f)| f.coflow == id) {
                ids.insert(fid);
                add(&mut to, f.dst, f.size);
            }
            if at != c.puts.at || ids != c.flows.ids || to != c.flows.to {
                return Err(format!(
                    "coflow {id}: pieces per machine {:?} counted, {at:?} held; flows {:?} to {:?} counted, {ids:?} to {to:?} held",
                    c.puts.at, c.flows.ids, c.flows.to
                ));
            }
        }
        Ok(())
    }
}

/// The pieces put into a coflow: each one's source machine and size, and per machine how many
/// pieces and bytes it holds (no entry for none).
#[derive(Debug, Default)]
pub(super) struct Pieces {
    by_id: BTreeMap<DataId, (MachineId, u64)>,
    at: BTreeMap<MachineId, Count>,
}

impl Pieces {
    pub(super) fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Piece `id`'s source machine and size.
    pub(super) fn get(&self, id: &DataId) -> Option<(MachineId, u64)> {
        self.by_id.get(id).copied()
    }

    pub(super) fn contains(&self, id: &DataId) -> bool {
        self.by_id.contains_key(id)
    }

    /// Adds piece `id` (not yet held) of `size` bytes on machine `at`.
    pub(super) fn insert(&mut self, id: DataId, at: MachineId, size: u64) {
        let before = self.by_id.insert(id, (at, size));
        debug_assert!(before.is_none(), "a piece put twice");
        add(&mut self.at, at, size);
    }

    /// Forgets piece `id`, if held.
    pub(super) fn remove(&mut self, id: &DataId) {
        if let Some((at, size)) = self.by_id.remove(id) {
            take(&mut self.at, at, size);
        }
    }

    /// Forgets every piece on machine `m`; returns how many there were.
    pub(super) fn remove_at(&mut self, m: MachineId) -> usize {
        let Some(held) = self.at.remove(&m) else { return 0 };
        self.by_id.retain(|_, &mut (at, _)| at != m);
        held.n
    }

    /// The machines that hold a piece, in order.
    pub(super) fn machines(&self) -> impl Iterator<Item = MachineId> + '_ {
        self.at.keys().copied()
    }

    /// Whether machine `m` holds a piece.
    pub(super) fn holds(&self, m: MachineId) -> bool {
        self.at.contains_key(&m)
    }

    /// The bytes of every piece.
    pub(super) fn bytes(&self) -> u64 {
        self.at.values().fold(0, |a, c| a.saturating_add(c.bytes))
    }

    /// The most bytes put on one machine.
    pub(super) fn heaviest_machine(&self) -> u64 {
        heaviest(&self.at)
    }

    /// The size of the largest piece.
    pub(super) fn longest(&self) -> u64 {
        self.by_id.values().map(|&(_, size)| size).max().unwrap_or(0)
    }
}

/// A coflow's unfinished flows, and per receiving machine how many and their bytes (no entry
/// for none).
#[derive(Debug, Default)]
pub(super) struct Flows {
    ids: BTreeSet<FlowId>,
    to: BTreeMap<MachineId, Count>,
}

impl Flows {
    /// Adds flow `id` (not yet held) of `size` bytes to machine `dst`.
    pub(super) fn insert(&mut self, id: FlowId, dst: MachineId, size: u64) {
        let fresh = self.ids.insert(id);
        debug_assert!(fresh, "a flow added twice");
        add(&mut self.to, dst, size);
    }

    /// Forgets flow `id` of `size` bytes to `dst`, if held.
    pub(super) fn remove(&mut self, id: FlowId, dst: MachineId, size: u64) {
        if self.ids.remove(&id) {
            take(&mut self.to, dst, size);
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// The flows, by id.
    pub(super) fn ids(&self) -> impl Iterator<Item = FlowId> + '_ {
        self.ids.iter().copied()
    }

    /// The most bytes asked for on one receiving machine.
    pub(super) fn heaviest_machine(&self) -> u64 {
        heaviest(&self.to)
    }
}

/// How many pieces or flows one machine holds, and their bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Count {
    n: usize,
    bytes: u64,
}

fn add(counts: &mut BTreeMap<MachineId, Count>, m: MachineId, size: u64) {
    let c = counts.entry(m).or_default();
    c.n += 1;
    c.bytes = c.bytes.saturating_add(size);
}

/// Takes one of `size` bytes off machine `m`'s count, dropping the entry at none.
fn take(counts: &mut BTreeMap<MachineId, Count>, m: MachineId, size: u64) {
    if let Some(c) = counts.get_mut(&m) {
        debug_assert!(c.n > 0 && c.bytes >= size, "machine {m:?} counted below zero");
        c.n = c.n.saturating_sub(1);
        c.bytes = c.bytes.saturating_sub(size);
        if c.n == 0 {
            counts.remove(&m);
        }
    }
}

fn heaviest(counts: &BTreeMap<MachineId, Count>) -> u64 {
    counts.values().map(|c| c.bytes).max().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes per machine follow pieces and flows as they come and go, and equal the sums over
    /// what is held.
    #[test]
    fn bytes_per_machine_follow_what_is_held() {
        let id = |s: &str| DataId::new(s).unwrap();
        let (a, b) = (MachineId(0), MachineId(1));
        let mut p = Pieces::default();
        p.insert(id("1"), a, 10);
        p.insert(id("2"), a, 5);
        p.insert(id("3"), b, 12);
        p.insert(id("4"), b, 0);
        assert_eq!((p.len(), p.bytes(), p.heaviest_machine(), p.longest()), (4, 27, 15, 12));
        p.remove(&id("2"));
        p.remove(&id("missing"));
        assert_eq!((p.bytes(), p.heaviest_machine()), (22, 12));
        p.insert(id("5"), b, 0);
        p.remove(&id("5"));
        assert_eq!(p.remove_at(b), 2, "zero-byte pieces are counted too");
        assert_eq!((p.len(), p.bytes(), p.heaviest_machine(), p.get(&id("1"))), (1, 10, 10, Some((a, 10))));
        assert_eq!(p.remove_at(b), 0);
        p.remove(&id("1"));
        assert!(p.at.is_empty() && p.by_id.is_empty());

        let mut f = Flows::default();
        f.insert(FlowId(1), a, 7);
        f.insert(FlowId(2), b, 3);
        f.insert(FlowId(3), b, 6);
        assert_eq!(f.heaviest_machine(), 9);
        f.remove(FlowId(3), b, 6);
        f.remove(FlowId(3), b, 6);
        assert_eq!(f.heaviest_machine(), 7, "a flow forgotten twice counts once");
        assert_eq!(f.ids().collect::<Vec<_>>(), [FlowId(1), FlowId(2)]);
        f.remove(FlowId(1), a, 7);
        f.remove(FlowId(2), b, 3);
        assert!(f.to.is_empty() && f.ids.is_empty());
    }
}
