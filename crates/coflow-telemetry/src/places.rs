//! Who the HTTP listener serves when peers want more connections than it has places: the
//! connections counted by peer group ([`coflow_core::peer_group`]), oldest first, so that when
//! it is full a newcomer takes the place of the oldest connection of the group holding the most,
//! unless its own group holds the most. A peer with few connections (a probe, a scraper) thus
//! always gets in, however many connections one or a few addresses hold.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;
use tokio::task::AbortHandle;

/// The most connections the listener serves at once. When it is full, a newcomer takes the place
/// of the oldest connection of the peer group holding the most, which is asked to close
/// gracefully, unless the newcomer's own group holds the most: then it is closed at once. So a
/// peer with few connections (a probe, a scraper) is served however many connections one or a
/// few addresses hold.
pub const MAX_CONNECTIONS: usize = 256;

/// The most connections one peer group ([`coflow_core::peer_group`]: an IPv4 address, an IPv6
/// /64) is served at once; one more is closed at once.
pub const MAX_CONNECTIONS_PER_GROUP: usize = 32;

/// The most connections asked to close that may still be open (each finishing its response in
/// progress, for at most `HEADER_TIMEOUT`). When that many are, the oldest of them is closed
/// outright before a newcomer takes another's place, so the listener holds at most
/// `MAX_CONNECTIONS + MAX_CLOSING + 1` connections (the one being decided on) at any time.
pub const MAX_CLOSING: usize = 16;

/// A connection served: its place in the order of arrival, the signal that asks it to close
/// gracefully, and its task.
#[derive(Debug)]
struct Held {
    id: u64,
    close: Arc<Notify>,
    task: AbortHandle,
}

/// The listener's connections: those served, by peer group and oldest first, and those asked to
/// close, which keep their file descriptor until they have.
#[derive(Debug, Default)]
struct Table {
    next: u64,
    served: usize,
    by_group: HashMap<IpAddr, VecDeque<Held>>,
    closing: VecDeque<(u64, AbortHandle)>,
}

/// Why a newcomer is not served.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// Its group holds [`MAX_CONNECTIONS_PER_GROUP`].
    GroupFull,
    /// The listener is full and the newcomer's group holds the most connections.
    MostHeld,
    /// [`MAX_CLOSING`] connections are closing: the oldest of them (its task) is to be ended at
    /// once, and the newcomer asked for again once it has gone.
    Closing(AbortHandle),
}

/// The listener's table, shared with each connection's [`Place`].
#[derive(Clone, Debug, Default)]
pub(crate) struct Places {
    table: Arc<Mutex<Table>>,
    left: Arc<Notify>,
}

/// A connection's place: given back when dropped (when its task ends or is aborted).
#[derive(Debug)]
pub(crate) struct Place {
    id: u64,
    group: IpAddr,
    places: Places,
}

impl Places {
    /// Serves a newcomer of `group` if it may be, asking the oldest connection of the group
    /// holding the most to close when the listener is full; `spawn` starts the newcomer's task,
    /// with its place and the signal that asks it to close.
    pub(crate) fn admit(
        &self,
        group: IpAddr,
        spawn: impl FnOnce(Place, Arc<Notify>) -> AbortHandle,
    ) -> Result<(), Refusal> {
        let mut t = self.table.lock().expect("places lock");
        let own = t.by_group.get(&group).map_or(0, VecDeque::len);
        if own >= MAX_CONNECTIONS_PER_GROUP {
            return Err(Refusal::GroupFull);
        }
        if t.served >= MAX_CONNECTIONS {
            // The group holding the most, and among equals the one whose oldest is oldest.
            let (&victim, most) = t
                .by_group
                .iter()
                .max_by_key(|(_, held)| (held.len(), std::cmp::Reverse(held.front().map_or(u64::MAX, |h| h.id))))
                .expect("a full listener holds connections");
            if most.len() <= own {
                return Err(Refusal::MostHeld);
            }
            if t.closing.len() >= MAX_CLOSING {
                return Err(Refusal::Closing(t.closing[0].1.clone()));
            }
            let held = t.by_group.get_mut(&victim).expect("the victim's group");
            let oldest = held.pop_front().expect("a connection");
            if held.is_empty() {
                t.by_group.remove(&victim);
            }
            oldest.close.notify_one();
            t.closing.push_back((oldest.id, oldest.task));
            t.served -= 1;
        }
        t.next += 1;
        let id = t.next;
        let close = Arc::new(Notify::new());
        let task = spawn(Place { id, group, places: self.clone() }, close.clone());
        t.by_group.entry(group).or_default().push_back(Held { id, close, task });
        t.served += 1;
        Ok(())
    }

    /// Waits until fewer than [`MAX_CLOSING`] connections are closing.
    pub(crate) async fn closing_below_max(&self) {
        loop {
            let left = self.left.notified();
            if self.table.lock().expect("places lock").closing.len() < MAX_CLOSING {
                return;
            }
            left.await;
        }
    }

    /// How many connections are served and how many are closing.
    #[cfg(test)]
    fn counts(&self) -> (usize, usize) {
        let t = self.table.lock().unwrap();
        (t.served, t.closing.len())
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut t = self.places.table.lock().expect("places lock");
        let mut found = false;
        if let Some(held) = t.by_group.get_mut(&self.group)
            && let Some(i) = held.iter().position(|h| h.id == self.id)
        {
            held.remove(i);
            if held.is_empty() {
                t.by_group.remove(&self.group);
            }
            found = true;
        }
        if found {
            t.served -= 1;
        } else {
            t.closing.retain(|(id, _)| *id != self.id);
        }
        drop(t);
        self.places.left.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::task::JoinSet;

    /// Admits a connection of `group` whose task holds its place until it is asked to close.
    fn connect(places: &Places, tasks: &mut JoinSet<()>, group: [u8; 4]) -> Result<(), Refusal> {
        places.admit(group.into(), |place, close| {
            tasks.spawn(async move {
                close.notified().await;
                drop(place);
            })
        })
    }

    #[tokio::test]
    async fn a_full_listener_takes_a_place_from_the_group_holding_the_most() {
        let places = Places::default();
        let mut tasks = JoinSet::new();
        // Sixteen groups of sixteen fill the listener.
        let per = MAX_CONNECTIONS / 16;
        for g in 0..16u8 {
            for _ in 0..per {
                connect(&places, &mut tasks, [10, 0, 0, g]).unwrap();
            }
        }
        assert_eq!(places.counts(), (MAX_CONNECTIONS, 0));
        // A group that holds the most is refused; a newcomer is served in place of the oldest
        // of group 0 (the oldest among the groups holding the most).
        assert!(matches!(connect(&places, &mut tasks, [10, 0, 0, 3]), Err(Refusal::MostHeld)));
        connect(&places, &mut tasks, [127, 0, 0, 1]).unwrap();
        assert_eq!(places.counts(), (MAX_CONNECTIONS, 1));
        tasks.join_next().await.unwrap().unwrap();
        assert_eq!(places.counts(), (MAX_CONNECTIONS, 0), "the asked connection closed and left");
        assert_eq!(places.table.lock().unwrap().by_group[&IpAddr::from([10, 0, 0, 0])].len(), per - 1);
        // Group 0 now holds fewer than the others: it gets back in, from another group.
        connect(&places, &mut tasks, [10, 0, 0, 0]).unwrap();
        assert_eq!(places.table.lock().unwrap().by_group[&IpAddr::from([10, 0, 0, 1])].len(), per - 1);
        // One group is capped whatever room there is.
        let places = Places::default();
        for _ in 0..MAX_CONNECTIONS_PER_GROUP {
            connect(&places, &mut tasks, [10, 0, 0, 1]).unwrap();
        }
        assert!(matches!(connect(&places, &mut tasks, [10, 0, 0, 1]), Err(Refusal::GroupFull)));
    }

    #[tokio::test]
    async fn past_the_closing_bound_the_oldest_closing_is_ended_first() {
        let places = Places::default();
        let mut tasks = JoinSet::new();
        let spawn_deaf = |tasks: &mut JoinSet<()>, group: [u8; 4]| {
            // A connection that does not close when asked (a response to a peer that does not
            // read, say).
            places.admit(group.into(), |place, _close| {
                tasks.spawn(async move {
                    std::future::pending::<()>().await;
                    drop(place)
                })
            })
        };
        for i in 0..MAX_CONNECTIONS {
            spawn_deaf(&mut tasks, [10, 0, (i / MAX_CONNECTIONS_PER_GROUP) as u8, 0]).unwrap();
        }
        for i in 0..MAX_CLOSING {
            spawn_deaf(&mut tasks, [10, 1, 0, i as u8]).unwrap();
        }
        assert_eq!(places.counts(), (MAX_CONNECTIONS, MAX_CLOSING));
        let Err(Refusal::Closing(oldest)) = spawn_deaf(&mut tasks, [10, 2, 0, 0]) else { panic!("closing is full") };
        oldest.abort();
        tokio::time::timeout(std::time::Duration::from_secs(5), places.closing_below_max()).await.expect("it leaves");
        assert_eq!(places.counts(), (MAX_CONNECTIONS, MAX_CLOSING - 1));
        spawn_deaf(&mut tasks, [10, 2, 0, 0]).unwrap();
        assert_eq!(places.counts(), (MAX_CONNECTIONS, MAX_CLOSING));
    }
}
