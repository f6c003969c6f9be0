//! Planned finishes in time order: a priority queue of `(time, tag)` entries, least first, in
//! two parts.
//!
//! A replay plans far more finishes than it reaches: a leg whose rate changes is planned again
//! and its old entry goes stale, and a policy that changes the rate of a coflow with thousands
//! of legs plans each of them again at once. Most new entries lie far past the next event. So
//! the queue keeps only the entries before a horizon in a heap, and those at or past it in a
//! plain list, where a push costs an append and a stale entry is dropped, unsorted, when the
//! list is next split: when the heap runs out, the list loses its stale entries and its least
//! sixty-fourth becomes the heap, below a new horizon at the least entry left behind. A small
//! heap keeps its pops within the cache; on the Facebook trace under `saath`, whose decisions
//! plan about 25 million finishes, the replay takes about 9% less CPU than with one heap.
//!
//! Entries come out least first whatever the split, so a replay's events come in the order a
//! single heap gives them.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use coflow_core::Nanos;

/// An entry: a planned time and what it is the finish of.
pub(crate) type Entry = (Nanos, u32);

/// The fewest entries the heap takes from the list at a split (few in tests, so that short runs
/// of operations split often).
#[cfg(not(test))]
const LEAST_SPLIT: usize = 64;
#[cfg(test)]
const LEAST_SPLIT: usize = 2;

#[derive(Debug)]
pub(crate) struct Planned {
    /// The entries before `horizon`, least on top.
    near: BinaryHeap<Reverse<Entry>>,
    /// The entries at or past `horizon`, in no order.
    far: Vec<Entry>,
    /// Every entry in `near` is at most this, every entry in `far` at least; `near` is empty
    /// only if `far` is.
    horizon: Entry,
}

impl Default for Planned {
    fn default() -> Planned {
        Planned { near: BinaryHeap::new(), far: Vec::new(), horizon: (Nanos::MAX, u32::MAX) }
    }
}

impl Planned {
    /// The number of entries, stale ones included.
    pub(crate) fn len(&self) -> usize {
        self.near.len() + self.far.len()
    }

    /// The least entry, if any.
    pub(crate) fn peek(&self) -> Option<Entry> {
        self.near.peek().map(|&Reverse(e)| e)
    }

    /// Adds an entry.
    pub(crate) fn push(&mut self, t: Nanos, tag: u32) {
        if (t, tag) < self.horizon {
            self.near.push(Reverse((t, tag)));
        } else {
            self.far.push((t, tag));
        }
    }

    /// Removes the least entry; when that empties the heap, the entries of the list for which
    /// `live` says false are dropped before the list is split.
    pub(crate) fn pop(&mut self, live: impl FnMut(&Entry) -> bool) -> Option<Entry> {
        let Reverse(e) = self.near.pop()?;
        if self.near.is_empty() {
            self.split(live);
        }
        Some(e)
    }

    /// Replaces every entry with `entries`.
    pub(crate) fn assign(&mut self, entries: impl IntoIterator<Item = Entry>) {
        self.near.clear();
        self.far.clear();
        self.far.extend(entries);
        self.split(|_| true);
    }

    /// Moves the least sixty-fourth of the list's live entries (at least [`LEAST_SPLIT`]) into
    /// the empty heap, below a horizon at the least entry left in the list.
    fn split(&mut self, live: impl FnMut(&Entry) -> bool) {
        debug_assert!(self.near.is_empty(), "the heap is split into only when empty");
        self.far.retain(live);
        let take = (self.far.len() / 64).max(LEAST_SPLIT);
        let mut near = std::mem::take(&mut self.near).into_vec();
        if self.far.len() <= take {
            near.extend(self.far.drain(..).map(Reverse));
            self.horizon = (Nanos::MAX, u32::MAX);
        } else {
            let (_, &mut at, _) = self.far.select_nth_unstable(take);
            near.extend(self.far.drain(..take).map(Reverse));
            self.horizon = at;
        }
        self.near = BinaryHeap::from(near);
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// An operation on the queue: push an entry, pop with entries of an odd tag stale, or
    /// assign the live entries afresh (as a replay does when stale ones pile up).
    #[derive(Clone, Debug)]
    enum Op {
        Push(u64, u32),
        Pop,
        Assign,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            12 => (0u64..1000, 0u32..8).prop_map(|(t, tag)| Op::Push(t, tag)),
            4 => Just(Op::Pop),
            1 => Just(Op::Assign),
        ]
    }

    #[test]
    fn entries_come_out_least_first_across_splits() {
        let mut q = Planned::default();
        let times: Vec<u64> = (0..1000).map(|i| (i * 7919) % 1000).collect();
        for &t in &times {
            q.push(Nanos(t), 0);
        }
        let mut out = Vec::new();
        while let Some((t, _)) = q.pop(|_| true) {
            out.push(t.0);
        }
        assert_eq!(out, (0..1000).collect::<Vec<_>>());
        assert_eq!(q.len(), 0);
    }

    proptest! {
        /// Against one heap, with stale entries (odd tags) dropped when they come out: the same
        /// live entries come out in the same order, whatever the split dropped unseen.
        #[test]
        fn pops_what_one_heap_pops(ops in prop::collection::vec(op(), 0..1000)) {
            let mut q = Planned::default();
            let mut heap = BinaryHeap::new();
            let live = |e: &Entry| e.1.is_multiple_of(2);
            for op in ops {
                match op {
                    Op::Push(t, tag) => {
                        q.push(Nanos(t), tag);
                        heap.push(Reverse((Nanos(t), tag)));
                    }
                    Op::Pop => {
                        let want = loop {
                            match heap.pop() {
                                Some(Reverse(e)) if !live(&e) => continue,
                                other => break other.map(|Reverse(e)| e),
                            }
                        };
                        let got = loop {
                            match q.pop(live) {
                                Some(e) if !live(&e) => continue,
                                other => break other,
                            }
                        };
                        prop_assert_eq!(got, want);
                    }
                    Op::Assign => {
                        heap.retain(|Reverse(e)| live(e));
                        q.assign(heap.iter().map(|&Reverse(e)| e));
                        prop_assert_eq!(q.len(), heap.len());
                    }
                }
                let least = heap.iter().map(|&Reverse(e)| e).filter(live).min();
                let top = q.peek();
                // The top is the least live entry or a stale one below it.
                prop_assert!(top.is_some() || least.is_none());
                if let (Some(top), Some(least)) = (top, least) {
                    prop_assert!(top <= least);
                }
            }
        }
    }
}
