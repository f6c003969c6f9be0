//! Planned finishes in time order: a priority queue of `(time, tag)` entries, least first, in
//! levels.
//!
//! A replay plans far more finishes than it reaches: a leg whose rate changes is planned again
//! and its old entry goes stale, and a policy that changes the rate of a coflow with thousands
//! of legs plans each of them again at once. Most new entries lie far past the next event. So
//! the queue keeps only the entries before a horizon in a heap, and those past it in plain
//! lists, each for a range of times past the one before, where a push costs an append and a
//! stale entry is dropped, unsorted, when its list is next split: when the heap runs out, the
//! first list loses its stale entries and its least sixteenth becomes the heap, below a new
//! horizon at the least entry left behind (and a list with nothing left takes its share of the
//! next in the same way). A small heap keeps its pops within the cache, and a far list is
//! sorted through only when the ones before it run out.
//!
//! Entries come out least first whatever the split, so a replay's events come in the order a
//! single heap gives them.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use coflow_core::Nanos;

/// An entry: a planned time and what it is the finish of.
pub(crate) type Entry = (Nanos, u32);

/// The fewest entries a level takes from the list past it at a split (few in tests, so that
/// short runs of operations split often).
#[cfg(not(test))]
const LEAST_SPLIT: usize = 64;
#[cfg(test)]
const LEAST_SPLIT: usize = 2;

/// A split moves this fraction of a list's live entries into the level before it.
const SHARE: usize = 16;

/// The number of lists past the heap.
const LISTS: usize = 3;

/// Past every entry.
const END: Entry = (Nanos::MAX, u32::MAX);

#[derive(Debug)]
pub(crate) struct Planned {
    /// The entries before `horizon[0]`, least on top; empty only if no list has a live entry.
    near: BinaryHeap<Reverse<Entry>>,
    /// List `i` holds the entries from `horizon[i]` and before `horizon[i + 1]` (the last list,
    /// all from its horizon on), in no order.
    lists: [Vec<Entry>; LISTS],
    /// Ascending.
    horizon: [Entry; LISTS],
}

impl Default for Planned {
    fn default() -> Planned {
        Planned { near: BinaryHeap::new(), lists: Default::default(), horizon: [END; LISTS] }
    }
}

impl Planned {
    /// The number of entries, stale ones included.
    pub(crate) fn len(&self) -> usize {
        self.near.len() + self.lists.iter().map(Vec::len).sum::<usize>()
    }

    /// The least entry, if any.
    pub(crate) fn peek(&self) -> Option<Entry> {
        self.near.peek().map(|&Reverse(e)| e)
    }

    /// Adds an entry.
    pub(crate) fn push(&mut self, t: Nanos, tag: u32) {
        let e = (t, tag);
        // Most entries go far, so the lists are tried from the last.
        for i in (0..LISTS).rev() {
            if e >= self.horizon[i] {
                self.lists[i].push(e);
                return;
            }
        }
        self.near.push(Reverse(e));
    }

    /// Removes the least entry; when that empties the heap, it takes the least of the lists'
    /// entries, and the lists it splits for them drop the entries for which `live` says false.
    pub(crate) fn pop(&mut self, mut live: impl FnMut(&Entry) -> bool) -> Option<Entry> {
        let Reverse(e) = self.near.pop()?;
        if self.near.is_empty() {
            self.fill_near(&mut live);
        }
        Some(e)
    }

    /// Replaces every entry with `entries`.
    pub(crate) fn assign(&mut self, entries: impl IntoIterator<Item = Entry>) {
        self.near.clear();
        for list in &mut self.lists {
            list.clear();
        }
        self.lists[LISTS - 1].extend(entries);
        self.horizon = [(Nanos::ZERO, 0); LISTS];
        self.fill_near(&mut |_| true);
    }

    /// Fills the empty heap with the least of the lists' live entries, in its own buffer.
    fn fill_near(&mut self, live: &mut dyn FnMut(&Entry) -> bool) {
        let least = self.take_least(0, live);
        let mut near = std::mem::take(&mut self.near).into_vec();
        near.extend(least.into_iter().map(Reverse));
        self.near = BinaryHeap::from(near);
    }

    /// Takes out of list `i` the least [`SHARE`]th of its live entries (at least
    /// [`LEAST_SPLIT`], all of them if no more), for the level before it, which must be empty,
    /// moving the list's horizon past them; a list left with no live entry first takes its
    /// share of the next.
    fn take_least(&mut self, i: usize, live: &mut dyn FnMut(&Entry) -> bool) -> Vec<Entry> {
        self.lists[i].retain(|e| live(e));
        if self.lists[i].is_empty() && i + 1 < LISTS {
            // They are at or past this list's horizon, being past the next one's.
            self.lists[i] = self.take_least(i + 1, live);
        }
        let list = &mut self.lists[i];
        let take = (list.len() / SHARE).max(LEAST_SPLIT);
        if list.len() <= take {
            // This list's range joins the level before.
            self.horizon[i] = if i + 1 < LISTS { self.horizon[i + 1] } else { END };
            return std::mem::take(list);
        }
        let (_, &mut at, _) = list.select_nth_unstable(take);
        self.horizon[i] = at;
        list.drain(..take).collect()
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
