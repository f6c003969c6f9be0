//! Contention: for each coflow, how many other coflows of its group share a resource with it
//! (`philae` orders thin coflows by it, `saath` the coflows of a queue).

use std::collections::{BTreeMap, BTreeSet};

use coflow_core::CoflowId;

use crate::blind::BlindInput;
use crate::fabric::ResourceId;
use crate::shape::Shapes;

/// Contention: for each coflow, how many other coflows of its group have an active flow on a
/// resource where it has one. Kept as coflows come and go, leave resources and change groups:
/// each coflow knows the coflows it shares a resource with (in any group) and on how many, so a
/// change costs the coflows it touches, not a count over every pair.
#[derive(Debug, Default)]
pub(crate) struct Contention {
    /// Per resource, the coflows (keys) with an active flow there.
    at: Vec<Vec<u32>>,
    /// Each coflow's key.
    key: BTreeMap<CoflowId, u32>,
    /// Per key, its coflow (`None`: a free key).
    nodes: Vec<Option<Node>>,
    free: Vec<u32>,
}

#[derive(Debug, Default)]
struct Node {
    group: usize,
    /// The resources where it has an active flow.
    resources: Vec<ResourceId>,
    /// The coflows it shares a resource with, and on how many.
    shared: std::collections::HashMap<u32, u32>,
    /// How many of those are in its group.
    contention: u32,
}

impl Contention {
    /// Brings `shapes` up to `input` as [`Shapes::update`] does, and the contention with them: all
    /// forgotten when everything is new, and a coflow that no longer crosses a resource stops
    /// contending there. A coflow taken off some resources that has a state in `states` has
    /// `off` called on that state. The coflows no longer in the input are forgotten in all three.
    pub(crate) fn follow<S>(
        &mut self,
        shapes: &mut Shapes,
        states: &mut BTreeMap<CoflowId, S>,
        input: &BlindInput<'_>,
        mut off: impl FnMut(&mut S),
    ) {
        if input.everything {
            self.clear();
        }
        shapes.update(input, |id, gone| {
            if let Some(s) = states.get_mut(&id) {
                off(s);
            }
            for &r in gone {
                self.leave(id, r);
            }
        });
        if shapes.len() > input.coflows.len() || states.len() > input.coflows.len() {
            let present = input.ids();
            shapes.retain(&present);
            states.retain(|id, _| present.contains(id));
            self.retain(&present);
        }
    }

    /// Forgets every coflow.
    fn clear(&mut self) {
        for at in &mut self.at {
            at.clear();
        }
        self.key.clear();
        self.nodes.clear();
        self.free.clear();
    }

    /// The contention of a coflow counted here (0 for one that is not).
    pub(crate) fn of(&self, id: CoflowId) -> u32 {
        self.key.get(&id).and_then(|&k| self.nodes[k as usize].as_ref()).map_or(0, |n| n.contention)
    }

    /// Whether some coflow counted here has an active flow on resource `r`.
    pub(crate) fn crossed(&self, r: ResourceId) -> bool {
        self.at.get(r as usize).is_some_and(|at| !at.is_empty())
    }

    /// Whether a coflow is counted here.
    pub(crate) fn contains(&self, id: CoflowId) -> bool {
        self.key.contains_key(&id)
    }

    /// Counts a coflow in `group`, with an active flow on each of `resources`.
    pub(crate) fn add(&mut self, id: CoflowId, group: usize, resources: &[(ResourceId, u32)], total: usize) -> u32 {
        if self.at.len() < total {
            self.at.resize_with(total, Vec::new);
        }
        let k = match self.free.pop() {
            Some(k) => k,
            None => {
                self.nodes.push(None);
                (self.nodes.len() - 1) as u32
            }
        };
        self.key.insert(id, k);
        let mut node = Node { group, resources: resources.iter().map(|&(r, _)| r).collect(), ..Node::default() };
        for &r in &node.resources {
            for &j in &self.at[r as usize] {
                let n = node.shared.entry(j).or_insert(0);
                *n += 1;
                if *n == 1 {
                    let other = self.nodes[j as usize].as_mut().expect("a live key");
                    other.shared.insert(k, 0);
                    if other.group == group {
                        other.contention += 1;
                        node.contention += 1;
                    }
                }
                *self.nodes[j as usize].as_mut().expect("a live key").shared.get_mut(&k).expect("just set") += 1;
            }
            self.at[r as usize].push(k);
        }
        self.nodes[k as usize] = Some(node);
        k
    }

    /// The contention of the coflow [`Contention::add`] gave key `k`, while it is counted.
    pub(crate) fn of_key(&self, k: u32) -> u32 {
        self.nodes.get(k as usize).and_then(Option::as_ref).map_or(0, |n| n.contention)
    }

    /// A coflow no longer has an active flow on resource `r`.
    fn leave(&mut self, id: CoflowId, r: ResourceId) {
        let Some(&k) = self.key.get(&id) else { return };
        let at = &mut self.at[r as usize];
        let Some(pos) = at.iter().position(|&x| x == k) else { return };
        at.swap_remove(pos);
        let mut node = self.nodes[k as usize].take().expect("a live key");
        node.resources.retain(|&x| x != r);
        for &j in &self.at[r as usize] {
            let other = self.nodes[j as usize].as_mut().expect("a live key");
            let n = node.shared.get_mut(&j).expect("they share r");
            *n -= 1;
            if *n == 0 {
                node.shared.remove(&j);
                other.shared.remove(&k);
                if other.group == node.group {
                    other.contention -= 1;
                    node.contention -= 1;
                }
            } else {
                *other.shared.get_mut(&k).expect("they share r") -= 1;
            }
        }
        self.nodes[k as usize] = Some(node);
    }

    /// Stops counting the coflows not in `present`.
    fn retain(&mut self, present: &BTreeSet<CoflowId>) {
        let gone: Vec<CoflowId> = self.key.keys().filter(|id| !present.contains(id)).copied().collect();
        for id in gone {
            self.remove(id);
        }
    }

    /// Stops counting a coflow.
    pub(crate) fn remove(&mut self, id: CoflowId) {
        let Some(k) = self.key.remove(&id) else { return };
        let node = self.nodes[k as usize].take().expect("a live key");
        for &j in node.shared.keys() {
            let other = self.nodes[j as usize].as_mut().expect("a live key");
            other.shared.remove(&k);
            if other.group == node.group {
                other.contention -= 1;
            }
        }
        for &r in &node.resources {
            let at = &mut self.at[r as usize];
            if let Some(pos) = at.iter().position(|&x| x == k) {
                at.swap_remove(pos);
            }
        }
        self.free.push(k);
    }

    /// Moves a coflow to another group.
    pub(crate) fn set_group(&mut self, id: CoflowId, group: usize) {
        let Some(&k) = self.key.get(&id) else { return };
        let mut node = self.nodes[k as usize].take().expect("a live key");
        let from = node.group;
        if from != group {
            for &j in node.shared.keys() {
                let other = self.nodes[j as usize].as_mut().expect("a live key");
                if other.group == from {
                    other.contention -= 1;
                    node.contention -= 1;
                } else if other.group == group {
                    other.contention += 1;
                    node.contention += 1;
                }
            }
            node.group = group;
        }
        self.nodes[k as usize] = Some(node);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric::Fabric;
    use crate::shape::tests::{blind_coflow, input, switch_legs};

    /// What `philae` and `saath` keep: shapes, contention, and per coflow a state, here how many
    /// times a finished leg took it off some resources.
    #[derive(Default)]
    struct Kept {
        shapes: Shapes,
        contention: Contention,
        states: BTreeMap<CoflowId, u32>,
    }

    impl Kept {
        fn follow(&mut self, input: &BlindInput<'_>) {
            self.contention.follow(&mut self.shapes, &mut self.states, input, |n| *n += 1);
        }

        fn of(&self, a: u64, b: u64) -> (u32, u32) {
            (self.contention.of(CoflowId(a)), self.contention.of(CoflowId(b)))
        }
    }

    #[test]
    fn contention_follows_the_shapes_as_legs_finish_and_coflows_leave() {
        // Coflow 1 sends from machine 0 to 2 and from 1 to 3, coflow 2 from 0 to 3: they share
        // machine 0's ingress (resource 0) and machine 3's egress (resource 7).
        let fabric = Fabric::big_switch(4, coflow_core::Rate::from_bytes_per_sec(100.0));
        let mut legs = switch_legs(&fabric, &[(0, 2, 1), (1, 3, 1), (0, 3, 1)]);
        let coflows = [blind_coflow(1, 0..2, &legs), blind_coflow(2, 2..3, &legs)];
        let mut kept = Kept { states: BTreeMap::from([(CoflowId(1), 0), (CoflowId(2), 0)]), ..Kept::default() };
        kept.follow(&input(&fabric, &coflows, &legs, true, &[]));
        for c in &coflows {
            kept.contention.add(c.id, 0, &kept.shapes[&c.id].resources, 8);
        }
        assert_eq!(kept.of(1, 2), (1, 1));
        // Coflow 1's flow from machine 0 finishes: it leaves machine 0's ingress and machine 2's
        // egress, and still shares machine 3's egress.
        legs[0].active_flows = 0;
        kept.follow(&input(&fabric, &coflows, &legs, false, &[(CoflowId(1), 0, 0)]));
        assert_eq!((kept.states[&CoflowId(1)], kept.states[&CoflowId(2)]), (1, 0));
        assert_eq!(kept.of(1, 2), (1, 1));
        assert!(kept.contention.crossed(0) && !kept.contention.crossed(6));
        // Its other flow finishes: the two share nothing.
        legs[1].active_flows = 0;
        kept.follow(&input(&fabric, &coflows, &legs, false, &[(CoflowId(1), 1, 1)]));
        assert_eq!(kept.states[&CoflowId(1)], 2);
        assert_eq!(kept.of(1, 2), (0, 0));
        // Coflow 1 leaves the input: forgotten in all three.
        kept.follow(&input(&fabric, &coflows[1..], &legs, false, &[]));
        assert_eq!((kept.states.len(), kept.shapes.len()), (1, 1));
        assert!(!kept.contention.contains(CoflowId(1)) && kept.contention.contains(CoflowId(2)));
        // Everything new: no coflow is counted until the policy counts it again.
        kept.follow(&input(&fabric, &coflows[1..], &legs, true, &[]));
        assert!(!kept.contention.contains(CoflowId(2)));
        assert_eq!(kept.shapes[&CoflowId(2)].resources, [(0, 1), (7, 1)]);
    }
}
