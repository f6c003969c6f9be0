//! What each owner (a certificate's identity; none in token mode) holds: coflows registered and
//! pieces announced, each kept as it comes and goes and bounded per owner, so that one member
//! cannot take every place, nor the coordinator's memory, from the others; the bytes its coflows
//! bypassing the policy have in flight, bounded by the bypass threshold, so that one member cannot
//! split a transfer into small coflows to go unscheduled; and the coflows one member may see
//! found among its own, so that its status page costs what it shows, not every coflow of the
//! coordinator; and the flows of its coflows each machine serves over data connections, bounded
//! per owner and machine, so that one member's gets held at rate 0 cannot take every data
//! connection of a source from the others.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Bound;

use coflow_core::{CoflowId, FlowId, MachineId};

use super::Core;

/// The coflows and pieces each owner holds; an owner that holds nothing has no entry. Coflows
/// without an owner are held under the empty name, which no bound applies to.
#[derive(Debug, Default)]
pub(super) struct Owners {
    held: HashMap<String, Held>,
    /// Per owner, its coflows that bypassed the policy with flows in flight (counted until
    /// those flows end, even once judged large), each with its bottleneck in bytes, and their
    /// sum; no entry for none.
    bypassing: HashMap<String, Bypassing>,
    /// Per owner, per serving machine how many of its flows that machine serves over a data
    /// connection; no entry for none, and none for flows without an owner.
    serving: HashMap<String, HashMap<MachineId, usize>>,
    /// Each counted flow's owner and the machines serving it.
    served: HashMap<FlowId, (String, Vec<MachineId>)>,
}

#[derive(Debug, Default)]
struct Bypassing {
    coflows: BTreeMap<CoflowId, u64>,
    bytes: u64,
}

#[derive(Clone, Debug, Default, PartialEq)]
struct Held {
    coflows: BTreeSet<CoflowId>,
    pieces: usize,
}

impl Core {
    /// Whether one more coflow of `owner` fits within `max_coflows` and, for an owner (TLS),
    /// `max_coflows_per_owner`; if not, why.
    pub(super) fn room_for(&self, owner: &str) -> Result<(), String> {
        if self.coflows.len() >= self.cfg.max_coflows {
            let coflows = coflow_core::counted(self.coflows.len(), "coflow", "coflows");
            return Err(format!("{coflows} registered (max_coflows)"));
        }
        self.owners.room_for_coflow(owner, self.cfg.max_coflows_per_owner)
    }
}

impl Core {
    /// Whether the parts `plan` (each `(offset, length, relay)`) of a flow of `owner`'s coflow
    /// from `src` to `dst` fit its bound on the flows each machine serves it
    /// (`max_gets_per_owner_per_source`), in place of the flow `replacing` (its source, receiver
    /// and relay), if any; if not, why.
    pub(super) fn plan_fits(
        &self,
        owner: &str,
        (src, dst): (MachineId, MachineId),
        plan: &[(u64, u64, Option<MachineId>)],
        replacing: Option<(MachineId, MachineId, Option<MachineId>)>,
    ) -> Result<(), String> {
        if owner.is_empty() {
            return Ok(());
        }
        let by: Vec<_> = plan.iter().flat_map(|&(_, _, via)| served_by(src, dst, via)).collect();
        let freed = replacing.map_or_else(Vec::new, |(s, d, via)| served_by(s, d, via));
        self.owners.room_for_flows(owner, &by, &freed, self.cfg.max_gets_per_owner_per_source)
    }
}

impl Owners {
    /// Whether `owner` may register one more coflow within `max`; if not, why. No owner (token
    /// mode) is bounded only by the coordinator's whole.
    pub(super) fn room_for_coflow(&self, owner: &str, max: usize) -> Result<(), String> {
        let held = self.held.get(owner).map_or(0, |h| h.coflows.len());
        room(owner, held, max, ("coflow", "coflows"), "registered (max_coflows_per_owner)")
    }

    /// Whether `owner`'s coflows may have one more piece within `max`; if not, why.
    pub(super) fn room_for_piece(&self, owner: &str, max: usize) -> Result<(), String> {
        let held = self.held.get(owner).map_or(0, |h| h.pieces);
        room(owner, held, max, ("piece", "pieces"), "announced (max_pieces_per_owner)")
    }

    /// `owner` holds coflow `id`, with no pieces yet.
    pub(super) fn hold(&mut self, owner: &str, id: CoflowId) {
        if !self.held.contains_key(owner) {
            self.held.insert(owner.to_string(), Held::default());
        }
        let fresh = self.held.get_mut(owner).expect("inserted").coflows.insert(id);
        debug_assert!(fresh, "coflow {id} held twice by {owner:?}");
    }

    /// Whether coflow `id` of `owner`, of bottleneck `bytes`, may bypass the policy under
    /// `threshold`: it is small, and so are the owner's coflows bypassing with flows in flight
    /// together with it (those of no owner, in token mode, are judged alone).
    pub(super) fn may_bypass(&self, owner: &str, id: CoflowId, bytes: u64, threshold: u64) -> bool {
        let others = match self.bypassing.get(owner) {
            Some(b) if !owner.is_empty() => b.bytes - b.coflows.get(&id).copied().unwrap_or(0),
            _ => 0,
        };
        others.saturating_add(bytes) < threshold
    }

    /// Coflow `id` of `owner` bypasses the policy with flows in flight and bottleneck `bytes`
    /// (`Some`), or not (`None`: it is scheduled, its flows all ended, or it is gone).
    pub(super) fn bypass(&mut self, owner: &str, id: CoflowId, bytes: Option<u64>) {
        let b = match self.bypassing.get_mut(owner) {
            Some(b) => b,
            None if bytes.is_none() => return,
            None => self.bypassing.entry(owner.to_string()).or_default(),
        };
        b.bytes -= b.coflows.remove(&id).unwrap_or(0);
        if let Some(bytes) = bytes {
            b.coflows.insert(id, bytes);
            b.bytes += bytes;
        }
        if b.coflows.is_empty() {
            self.bypassing.remove(owner);
        }
    }

    /// `owner` no longer holds coflow `id`, nor its `pieces` pieces.
    pub(super) fn release(&mut self, owner: &str, id: CoflowId, pieces: usize) {
        self.bypass(owner, id, None);
        let Some(held) = self.held.get_mut(owner) else { return };
        held.coflows.remove(&id);
        self.forget(owner, pieces);
    }

    /// `owner`'s coflows were given a piece more.
    pub(super) fn add_piece(&mut self, owner: &str) {
        if let Some(held) = self.held.get_mut(owner) {
            held.pieces += 1;
        }
    }

    /// `owner`'s coflows lost `pieces` pieces.
    pub(super) fn forget(&mut self, owner: &str, pieces: usize) {
        let Some(held) = self.held.get_mut(owner) else { return };
        debug_assert!(held.pieces >= pieces, "{owner}'s pieces counted below zero");
        held.pieces = held.pieces.saturating_sub(pieces);
        if *held == Held::default() {
            self.held.remove(owner);
        }
    }

    /// Whether `owner`'s coflows may have one more flow served by each of `by` (a machine named
    /// twice serves two), in place of one served by each of `freed` (a flow that ends as they
    /// begin), within `max` a machine; if not, why, naming the first machine full. No owner
    /// (token mode) is not bounded.
    pub(super) fn room_for_flows(
        &self,
        owner: &str,
        by: &[MachineId],
        freed: &[MachineId],
        max: usize,
    ) -> Result<(), String> {
        if owner.is_empty() {
            return Ok(());
        }
        let count = |of: &[MachineId], m: MachineId| of.iter().filter(|&&o| o == m).count();
        let serving = self.serving.get(owner);
        for &m in by {
            let serving = serving.and_then(|s| s.get(&m)).copied().unwrap_or(0);
            let more = count(by, m);
            if (serving + more).saturating_sub(count(freed, m)) > max {
                let flows = coflow_core::counted(serving, "flow", "flows");
                return Err(format!("{owner} has {flows} served by machine {m} (max_gets_per_owner_per_source)"));
            }
        }
        Ok(())
    }

    /// Flow `id` of `owner`'s coflow is served by the machines `by` (its source, its relay), each
    /// over a data connection.
    pub(super) fn serve(&mut self, owner: &str, id: FlowId, by: Vec<MachineId>) {
        if owner.is_empty() || by.is_empty() {
            return;
        }
        if !self.serving.contains_key(owner) {
            self.serving.insert(owner.to_string(), HashMap::new());
        }
        let serving = self.serving.get_mut(owner).expect("inserted");
        for &m in &by {
            *serving.entry(m).or_default() += 1;
        }
        let fresh = self.served.insert(id, (owner.to_string(), by)).is_none();
        debug_assert!(fresh, "flow {id} served twice");
    }

    /// Flow `id` ended: its machines serve it no longer.
    pub(super) fn served(&mut self, id: FlowId) {
        let Some((owner, by)) = self.served.remove(&id) else { return };
        let serving = self.serving.get_mut(&owner).expect("counted when served");
        for m in by {
            let count = serving.get_mut(&m).expect("counted when served");
            *count -= 1;
            if *count == 0 {
                serving.remove(&m);
            }
        }
        if serving.is_empty() {
            self.serving.remove(&owner);
        }
    }

    /// The coflows `owner` holds with an id above `after`, by id.
    pub(super) fn coflows_after(&self, owner: &str, after: CoflowId) -> impl Iterator<Item = CoflowId> + '_ {
        let held = self.held.get(owner).map(|h| h.coflows.range((Bound::Excluded(after), Bound::Unbounded)));
        held.into_iter().flatten().copied()
    }

    /// The coflows `viewer` may see with an id above `after`, by id: its own and those without
    /// an owner.
    pub(super) fn visible_after(&self, viewer: &str, after: CoflowId) -> impl Iterator<Item = CoflowId> + '_ {
        let mut own = self.coflows_after(viewer, after).peekable();
        let unowned = (!viewer.is_empty()).then(|| self.coflows_after("", after));
        let mut unowned = unowned.into_iter().flatten().peekable();
        std::iter::from_fn(move || match (own.peek(), unowned.peek()) {
            (Some(a), Some(b)) if b < a => unowned.next(),
            (Some(_), _) => own.next(),
            (None, _) => unowned.next(),
        })
    }

    /// Compares what is kept with `coflows` (each coflow's id, owner and pieces); the first
    /// difference, if any. For tests.
    pub(super) fn check<'a>(&self, coflows: impl Iterator<Item = (CoflowId, &'a str, usize)>) -> Result<(), String> {
        let mut counted: HashMap<String, Held> = HashMap::new();
        for (id, owner, pieces) in coflows {
            let held = counted.entry(owner.to_string()).or_default();
            held.coflows.insert(id);
            held.pieces += pieces;
        }
        counted.retain(|_, h| *h != Held::default());
        if counted != self.held {
            return Err(format!("owners hold {:?}, kept as {:?}", counted, self.held));
        }
        Ok(())
    }

    /// Compares the flows kept as served with `flows` (each unfinished flow's id, its coflow's
    /// owner and the machines serving it), and the counts per owner and machine with theirs; the
    /// first difference, if any. For tests.
    pub(super) fn check_serving<'a>(
        &self,
        flows: impl Iterator<Item = (FlowId, &'a str, Vec<MachineId>)>,
    ) -> Result<(), String> {
        let mut served = HashMap::new();
        let mut serving: HashMap<String, HashMap<MachineId, usize>> = HashMap::new();
        for (id, owner, by) in flows.filter(|(_, owner, by)| !owner.is_empty() && !by.is_empty()) {
            let at = serving.entry(owner.to_string()).or_default();
            for &m in &by {
                *at.entry(m).or_default() += 1;
            }
            served.insert(id, (owner.to_string(), by));
        }
        if served != self.served || serving != self.serving {
            return Err(format!(
                "flows served {served:?}, {serving:?} counted; kept as {:?}, {:?}",
                self.served, self.serving
            ));
        }
        Ok(())
    }

    /// Compares the coflows kept as bypassing with `coflows` (each live coflow's id, owner,
    /// whether it bypasses, whether it has flows and whether it has one released): each one
    /// bypassing with a flow released is kept, under its owner, and each kept is a live coflow
    /// of that owner with flows (bypassing, or judged large since); each owner's sum is its
    /// coflows'. For tests.
    pub(super) fn check_bypassing<'a>(
        &self,
        coflows: impl Iterator<Item = (CoflowId, &'a str, bool, bool, bool)>,
    ) -> Result<(), String> {
        let mut kept: BTreeSet<(&str, CoflowId)> = BTreeSet::new();
        for (owner, b) in &self.bypassing {
            if b.coflows.is_empty() || b.bytes != b.coflows.values().sum::<u64>() {
                return Err(format!("{owner:?} bypasses {:?}, kept as {} bytes", b.coflows, b.bytes));
            }
            kept.extend(b.coflows.keys().map(|&id| (owner.as_str(), id)));
        }
        for (id, owner, bypassed, flows, released) in coflows {
            let is_kept = kept.remove(&(owner, id));
            if bypassed && released && !is_kept {
                return Err(format!("coflow {id} of {owner:?} bypasses with flows in flight, not kept"));
            }
            if is_kept && !flows {
                return Err(format!("coflow {id} of {owner:?} kept as bypassing, bypassed {bypassed}, flows {flows}"));
            }
        }
        match kept.first() {
            Some((owner, id)) => Err(format!("coflow {id} of {owner:?} kept as bypassing, not live")),
            None => Ok(()),
        }
    }
}

/// The machines that serve a flow from `src` to `dst` (through relay `via`) over data
/// connections: its source, unless it is its own fetcher, and its relay. None for a local flow.
pub(super) fn served_by(src: MachineId, dst: MachineId, via: Option<MachineId>) -> Vec<MachineId> {
    let fetcher = via.unwrap_or(dst);
    let relay = via.filter(|&r| r != dst);
    (src != fetcher).then_some(src).into_iter().chain(relay).collect()
}

/// Whether `owner`, holding `held` things (`names`: one, and more than one) `how`, may hold one
/// more within `max`; if not, why.
fn room(owner: &str, held: usize, max: usize, (one, many): (&str, &str), how: &str) -> Result<(), String> {
    if !owner.is_empty() && held >= max {
        return Err(format!("{owner} holds {} {how}", coflow_core::counted(held, one, many)));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Coflows and pieces go up and down, an owner holding nothing leaves no entry, no owner is
    /// bounded, and an owner's coflows are listed by id from where a page starts.
    #[test]
    fn owners_are_counted_and_bounded() {
        let mut o = Owners::default();
        o.hold("a", CoflowId(7));
        o.add_piece("a");
        o.add_piece("a");
        assert_eq!(o.room_for_piece("a", 3), Ok(()));
        o.add_piece("a");
        assert_eq!(o.room_for_piece("a", 3), Err("a holds 3 pieces announced (max_pieces_per_owner)".into()));
        assert_eq!(o.room_for_coflow("a", 1), Err("a holds 1 coflow registered (max_coflows_per_owner)".into()));
        assert_eq!(o.room_for_piece("b", 1), Ok(()), "another owner");
        o.hold("a", CoflowId(3));
        o.hold("b", CoflowId(5));
        assert_eq!(o.coflows_after("a", CoflowId(0)).collect::<Vec<_>>(), [CoflowId(3), CoflowId(7)]);
        assert_eq!(o.coflows_after("a", CoflowId(3)).collect::<Vec<_>>(), [CoflowId(7)]);
        assert_eq!(o.coflows_after("c", CoflowId(0)).count(), 0);
        o.release("a", CoflowId(7), 3);
        o.release("a", CoflowId(3), 0);
        o.release("b", CoflowId(5), 0);
        assert!(o.held.is_empty(), "{:?}", o.held);
        for k in 0..5 {
            o.hold("", CoflowId(k));
            o.add_piece("");
        }
        assert_eq!(o.room_for_coflow("", 0), Ok(()), "no owner, no bound");
        assert_eq!(o.room_for_piece("", 0), Ok(()));
        assert_eq!(o.coflows_after("", CoflowId(2)).count(), 2);
        o.hold("a", CoflowId(8));
        o.hold("", CoflowId(10));
        o.hold("a", CoflowId(12));
        o.hold("b", CoflowId(6));
        let seen = |viewer, after| o.visible_after(viewer, CoflowId(after)).map(|c| c.0).collect::<Vec<_>>();
        assert_eq!(seen("a", 0), [1, 2, 3, 4, 8, 10, 12], "its own and those without an owner, by id");
        assert_eq!(seen("a", 8), [10, 12]);
        assert_eq!(seen("", 0), [1, 2, 3, 4, 10], "without an identity, those without an owner, once");
        assert_eq!(seen("c", 3), [4, 10]);
    }

    /// A flow is served by its source over a data connection unless the source fetches it
    /// itself, and by its relay; a get split over parts asks room for each, so a machine serving
    /// two of them needs two places; ending a flow gives its places back.
    #[test]
    fn flows_are_counted_per_owner_and_serving_machine() {
        let m = MachineId;
        assert_eq!(served_by(m(0), m(1), None), [m(0)]);
        assert_eq!(served_by(m(0), m(0), None), [], "a local flow");
        assert_eq!(served_by(m(0), m(2), Some(m(1))), [m(0), m(1)], "relayed: the source serves the relay");
        let mut o = Owners::default();
        o.serve("a", FlowId(1), served_by(m(0), m(2), Some(m(1))));
        o.serve("", FlowId(2), vec![m(0)]);
        o.serve("a", FlowId(3), Vec::new());
        assert_eq!(o.room_for_flows("a", &[m(0)], &[], 2), Ok(()));
        let want = "a has 1 flow served by machine 0 (max_gets_per_owner_per_source)";
        assert_eq!(o.room_for_flows("a", &[m(1), m(0), m(0)], &[], 2), Err(want.into()), "two parts from one source");
        assert_eq!(o.room_for_flows("a", &[m(1), m(0), m(0)], &[m(0)], 2), Ok(()), "in place of a flow from it");
        let relay = "a has 1 flow served by machine 1 (max_gets_per_owner_per_source)";
        assert_eq!(o.room_for_flows("a", &[m(1), m(1)], &[m(0)], 2), Err(relay.into()), "freed at another machine");
        assert_eq!(o.room_for_flows("b", &[m(0), m(0)], &[], 2), Ok(()), "another owner");
        assert_eq!(o.room_for_flows("", &[m(0); 9], &[], 2), Ok(()), "no owner, no bound");
        o.served(FlowId(1));
        o.served(FlowId(2));
        o.served(FlowId(3));
        assert!(o.serving.is_empty() && o.served.is_empty(), "{:?} {:?}", o.serving, o.served);
    }
}
