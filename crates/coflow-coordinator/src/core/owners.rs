//! What each owner (a certificate's identity; none in token mode) holds: coflows registered and
//! pieces announced, each counted as it comes and goes and bounded per owner, so that one member
//! cannot take every place, nor the coordinator's memory, from the others.

use std::collections::HashMap;

/// The coflows and pieces each owner holds; an owner that holds nothing has no entry.
#[derive(Debug, Default)]
pub(super) struct Owners {
    held: HashMap<String, Held>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Held {
    coflows: usize,
    pieces: usize,
}

impl Owners {
    /// Whether `owner` may register one more coflow within `max`; if not, why. No owner (token
    /// mode) is bounded only by the coordinator's whole.
    pub(super) fn room_for_coflow(&self, owner: &str, max: usize) -> Result<(), String> {
        room(owner, self.get(owner).coflows, max, "coflows registered (max_coflows_per_owner)")
    }

    /// Whether `owner`'s coflows may have one more piece within `max`; if not, why.
    pub(super) fn room_for_piece(&self, owner: &str, max: usize) -> Result<(), String> {
        room(owner, self.get(owner).pieces, max, "pieces announced (max_pieces_per_owner)")
    }

    /// Counts `coflows` more coflows and `pieces` more pieces for `owner` (fewer when negative).
    pub(super) fn count(&mut self, owner: &str, coflows: isize, pieces: isize) {
        if owner.is_empty() || (coflows == 0 && pieces == 0) {
            return;
        }
        if !self.held.contains_key(owner) {
            self.held.insert(owner.to_string(), Held::default());
        }
        let held = self.held.get_mut(owner).expect("inserted");
        debug_assert!(held.coflows.checked_add_signed(coflows).is_some(), "{owner}'s coflows counted below zero");
        debug_assert!(held.pieces.checked_add_signed(pieces).is_some(), "{owner}'s pieces counted below zero");
        held.coflows = held.coflows.saturating_add_signed(coflows);
        held.pieces = held.pieces.saturating_add_signed(pieces);
        if *held == Held::default() {
            self.held.remove(owner);
        }
    }

    fn get(&self, owner: &str) -> Held {
        self.held.get(owner).copied().unwrap_or_default()
    }
}

/// Whether `owner`, holding `held` of what `what` names, may hold one more within `max`.
fn room(owner: &str, held: usize, max: usize, what: &str) -> Result<(), String> {
    if !owner.is_empty() && held >= max {
        return Err(format!("{owner} holds {held} {what}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts go up and down, an owner holding nothing leaves no entry, and no owner is counted
    /// or bounded.
    #[test]
    fn owners_are_counted_and_bounded() {
        let mut o = Owners::default();
        o.count("a", 1, 2);
        assert_eq!(o.room_for_piece("a", 3), Ok(()));
        o.count("a", 0, 1);
        assert_eq!(o.room_for_piece("a", 3), Err("a holds 3 pieces announced (max_pieces_per_owner)".into()));
        assert_eq!(o.room_for_coflow("a", 1), Err("a holds 1 coflows registered (max_coflows_per_owner)".into()));
        assert_eq!(o.room_for_piece("b", 1), Ok(()), "another owner");
        o.count("a", -1, -3);
        assert!(o.held.is_empty(), "{:?}", o.held);
        o.count("", 5, 5);
        assert!(o.held.is_empty());
        assert_eq!(o.room_for_piece("", 0), Ok(()), "no owner, no bound");
    }
}
