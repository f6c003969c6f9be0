//! Who the HTTP listener serves when peers want more connections than it has places: the
//! connections counted by peer address and by peer group ([`coflow_core::peer_group`]: an IPv4
//! address, an IPv6 /64), oldest first. One address is capped at
//! [`MAX_CONNECTIONS_PER_ADDRESS`] and one group at [`MAX_CONNECTIONS_PER_GROUP`], so that hosts
//! sharing an IPv6 /64 (a SLAAC LAN, a pod subnet) do not share one address's cap. When the
//! listener is full a newcomer takes the place of the oldest connection of the group holding
//! the most, unless its own group holds the most.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;
use tokio::task::AbortHandle;

/// The most connections the listener serves at once. When it is full, a newcomer takes the place
/// of the oldest connection of the peer group holding the most, which is asked to close
/// gracefully, unless the newcomer's own group holds the most: then it is closed at once.
pub const MAX_CONNECTIONS: usize = 256;

/// The most connections one peer address is served at once; one more is closed at once.
pub const MAX_CONNECTIONS_PER_ADDRESS: usize = 32;

/// The most connections one peer group ([`coflow_core::peer_group`]) is served at once; one more
/// is closed at once. It binds IPv6 /64s only: an IPv4 group is one address, which
/// [`MAX_CONNECTIONS_PER_ADDRESS`] caps first.
pub const MAX_CONNECTIONS_PER_GROUP: usize = 128;

/// The most connections asked to close that may still be open (each finishing its response in
/// progress, for at most `HEADER_TIMEOUT`). When that many are, the oldest of them is closed
/// outright before a newcomer takes another's place, so the listener holds at most
/// `MAX_CONNECTIONS + MAX_CLOSING + 1` connections (the one being decided on) at any time.
pub const MAX_CLOSING: usize = 16;

/// A connection served: its place in the order of arrival, its peer's address, the signal that
/// asks it to close gracefully, and its task (recorded once spawned).
#[derive(Debug)]
struct Held {
    id: u64,
    address: IpAddr,
    close: Arc<Notify>,
    task: Option<AbortHandle>,
}

/// The listener's connections: those served, by peer group and oldest first, how many each
/// address holds of them, and those asked to close, which keep their file descriptor until they
/// have.
#[derive(Debug, Default)]
struct Table {
    next: u64,
    served: usize,
    by_group: HashMap<IpAddr, VecDeque<Held>>,
    by_address: HashMap<IpAddr, usize>,
    closing: VecDeque<(u64, Option<AbortHandle>)>,
}

/// Why a newcomer is not served.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// Its address holds [`MAX_CONNECTIONS_PER_ADDRESS`].
    AddressFull,
    /// Its group holds [`MAX_CONNECTIONS_PER_GROUP`].
    GroupFull,
    /// The listener is full and the newcomer's group holds the most connections.
    MostHeld,
    /// [`MAX_CLOSING`] connections are closing: the oldest of them (its task, once spawned) is to
    /// be ended at once, and the newcomer asked for again once it has gone.
    Closing(Option<AbortHandle>),
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
    address: IpAddr,
    places: Places,
}

impl Table {
    /// Takes the served connection `id` of `group` out of the counts, if it is served.
    fn unserve(&mut self, group: IpAddr, id: u64) -> Option<Held> {
        let held = self.by_group.get_mut(&group)?;
        let i = held.iter().position(|h| h.id == id)?;
        let gone = held.remove(i).expect("found");
        if held.is_empty() {
            self.by_group.remove(&group);
        }
        if let Some(n) = self.by_address.get_mut(&gone.address) {
            *n -= 1;
            if *n == 0 {
                self.by_address.remove(&gone.address);
            }
        }
        self.served -= 1;
        Some(gone)
    }
}

impl Places {
    /// The table, also after a panic elsewhere while it was locked (each change to it is whole
    /// before anything that may panic).
    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Serves a newcomer from `address` if it may be, asking the oldest connection of the group
    /// holding the most to close when the listener is full; `spawn` starts the newcomer's task,
    /// with its place and the signal that asks it to close, once the table is unlocked (the
    /// runtime may drop the task at once, and its place with it).
    pub(crate) fn admit(
        &self,
        address: IpAddr,
        spawn: impl FnOnce(Place, Arc<Notify>) -> AbortHandle,
    ) -> Result<(), Refusal> {
        let group = coflow_core::peer_group(address);
        let address = address.to_canonical();
        let mut t = self.lock();
        if t.by_address.get(&address).copied().unwrap_or(0) >= MAX_CONNECTIONS_PER_ADDRESS {
            return Err(Refusal::AddressFull);
        }
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
                let oldest = t.closing.iter().find_map(|(_, task)| task.clone());
                return Err(Refusal::Closing(oldest));
            }
            let id = most.front().expect("a connection").id;
            let oldest = t.unserve(victim, id).expect("served");
            oldest.close.notify_one();
            t.closing.push_back((oldest.id, oldest.task));
        }
        t.next += 1;
        let id = t.next;
        let close = Arc::new(Notify::new());
        t.by_group.entry(group).or_default().push_back(Held { id, address, close: close.clone(), task: None });
        *t.by_address.entry(address).or_default() += 1;
        t.served += 1;
        drop(t);
        let task = spawn(Place { id, address, places: self.clone() }, close);
        // Recorded where the connection is now: served, closing, or (dropped at once) gone.
        let mut t = self.lock();
        if let Some(held) = t.by_group.get_mut(&group).and_then(|held| held.iter_mut().find(|h| h.id == id)) {
            held.task = Some(task);
        } else if let Some((_, closing)) = t.closing.iter_mut().find(|(c, _)| *c == id) {
            *closing = Some(task);
        }
        Ok(())
    }

    /// Waits until fewer than [`MAX_CLOSING`] connections are closing.
    pub(crate) async fn closing_below_max(&self) {
        loop {
            let left = self.left.notified();
            if self.lock().closing.len() < MAX_CLOSING {
                return;
            }
            left.await;
        }
    }

    /// How many connections are served and how many are closing.
    #[cfg(test)]
    fn counts(&self) -> (usize, usize) {
        let t = self.lock();
        (t.served, t.closing.len())
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut t = self.places.lock();
        if t.unserve(coflow_core::peer_group(self.address), self.id).is_none() {
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
    fn connect(places: &Places, tasks: &mut JoinSet<()>, address: impl Into<IpAddr>) -> Result<(), Refusal> {
        places.admit(address.into(), |place, close| {
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
        // One address is capped whatever room there is.
        let places = Places::default();
        for _ in 0..MAX_CONNECTIONS_PER_ADDRESS {
            connect(&places, &mut tasks, [10, 0, 0, 1]).unwrap();
        }
        assert!(matches!(connect(&places, &mut tasks, [10, 0, 0, 1]), Err(Refusal::AddressFull)));
    }

    /// Hosts sharing an IPv6 /64 each get an address's share: one that holds its most keeps
    /// no neighbour out, and the /64 as a whole gets the looser group cap.
    #[tokio::test]
    async fn ipv6_peers_are_capped_by_address_and_more_loosely_by_their_64() {
        let places = Places::default();
        let mut tasks = JoinSet::new();
        let host = |h: u16| std::net::Ipv6Addr::new(0x2001, 0xdb8, 0, 1, 0, 0, 0, h);
        for _ in 0..MAX_CONNECTIONS_PER_ADDRESS {
            connect(&places, &mut tasks, host(1)).unwrap();
        }
        assert!(matches!(connect(&places, &mut tasks, host(1)), Err(Refusal::AddressFull)));
        // A neighbour in the same /64 (a prober) still gets in.
        connect(&places, &mut tasks, host(2)).unwrap();
        for i in MAX_CONNECTIONS_PER_ADDRESS + 1..MAX_CONNECTIONS_PER_GROUP {
            connect(&places, &mut tasks, host(3 + (i / MAX_CONNECTIONS_PER_ADDRESS) as u16)).unwrap();
        }
        assert!(matches!(connect(&places, &mut tasks, host(99)), Err(Refusal::GroupFull)));
        // Another /64 is counted apart.
        connect(&places, &mut tasks, std::net::Ipv6Addr::new(0x2001, 0xdb8, 0, 2, 0, 0, 0, 1)).unwrap();
        assert_eq!(places.counts(), (MAX_CONNECTIONS_PER_GROUP + 1, 0));
        // An IPv4-mapped address counts as its IPv4 address.
        for _ in 0..MAX_CONNECTIONS_PER_ADDRESS {
            connect(&places, &mut tasks, [10, 0, 0, 9]).unwrap();
        }
        let mapped = std::net::Ipv4Addr::new(10, 0, 0, 9).to_ipv6_mapped();
        assert!(matches!(connect(&places, &mut tasks, mapped), Err(Refusal::AddressFull)));
    }

    /// A runtime shutting down drops a task's future inside `spawn`, on the spawning thread: its
    /// place is given back then, without the table locked by `admit`.
    #[test]
    fn a_task_dropped_inside_spawn_gives_its_place_back() {
        let places = Places::default();
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let handle = runtime.handle().clone();
        drop(runtime);
        let (done, admitted) = std::sync::mpsc::channel();
        let p = places.clone();
        std::thread::spawn(move || {
            let r = p.admit([10, 0, 0, 1].into(), |place, _| handle.spawn(async move { drop(place) }).abort_handle());
            done.send(r.is_ok()).unwrap();
        });
        let admitted = admitted.recv_timeout(std::time::Duration::from_secs(5)).expect("admit returns");
        assert!(admitted);
        assert_eq!(places.counts(), (0, 0));
    }

    /// A panic while the table is locked leaves it usable: places are still given and given
    /// back (a panic in `Drop` while unwinding would abort the process).
    #[tokio::test]
    async fn the_table_outlives_a_panic_while_locked() {
        let places = Places::default();
        let mut tasks = JoinSet::new();
        connect(&places, &mut tasks, [10, 0, 0, 1]).unwrap();
        let p = places.clone();
        let poisoned = std::thread::spawn(move || {
            let _t = p.lock();
            panic!("a bug while locked");
        });
        assert!(poisoned.join().is_err());
        assert!(places.table.is_poisoned());
        connect(&places, &mut tasks, [10, 0, 0, 2]).unwrap();
        tasks.abort_all();
        while tasks.join_next().await.is_some() {}
        assert_eq!(places.counts(), (0, 0));
    }

    #[tokio::test]
    async fn past_the_closing_bound_the_oldest_closing_is_ended_first() {
        let places = Places::default();
        let mut tasks = JoinSet::new();
        let spawn_deaf = |tasks: &mut JoinSet<()>, address: [u8; 4]| {
            // A connection that does not close when asked (a response to a peer that does not
            // read, say).
            places.admit(address.into(), |place, _close| {
                tasks.spawn(async move {
                    std::future::pending::<()>().await;
                    drop(place)
                })
            })
        };
        for i in 0..MAX_CONNECTIONS {
            spawn_deaf(&mut tasks, [10, 0, (i / MAX_CONNECTIONS_PER_ADDRESS) as u8, 0]).unwrap();
        }
        for i in 0..MAX_CLOSING {
            spawn_deaf(&mut tasks, [10, 1, 0, i as u8]).unwrap();
        }
        assert_eq!(places.counts(), (MAX_CONNECTIONS, MAX_CLOSING));
        let Err(Refusal::Closing(Some(oldest))) = spawn_deaf(&mut tasks, [10, 2, 0, 0]) else {
            panic!("closing is full")
        };
        oldest.abort();
        tokio::time::timeout(std::time::Duration::from_secs(5), places.closing_below_max()).await.expect("it leaves");
        assert_eq!(places.counts(), (MAX_CONNECTIONS, MAX_CLOSING - 1));
        spawn_deaf(&mut tasks, [10, 2, 0, 0]).unwrap();
        assert_eq!(places.counts(), (MAX_CONNECTIONS, MAX_CLOSING));
    }
}
