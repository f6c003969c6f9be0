//! What an agent's tasks share: its store, the rates the coordinator assigned, its port limiters
//! and counters.

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::IpAddr;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use coflow_core::{CoflowId, FlowId, MachineId, Nanos};
use coflow_proto::pb::coordinator_client::CoordinatorClient;
use coflow_proto::ticket::{FlowKey, Ticket};
use coflow_proto::{DataId, Security, TokenAttach};
use tokio::sync::watch;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

use crate::AgentError;
use crate::bucket::{Grant, TokenBucket, burst_for};
use crate::config::AgentConfig;
use crate::store::Store;

/// A client of the coordinator that attaches the cluster token (in token mode).
pub(crate) type CoordClient = CoordinatorClient<InterceptedService<Channel, TokenAttach>>;

/// The assigned rate of each flow this agent sends, in bytes per second; a flow not yet assigned
/// waits at rate zero.
#[derive(Debug, Default)]
pub(crate) struct RateTable {
    flows: Mutex<HashMap<FlowId, (watch::Sender<f64>, Instant)>>,
}

impl RateTable {
    pub(crate) fn subscribe(&self, flow: FlowId) -> watch::Receiver<f64> {
        let mut m = self.flows.lock().expect("rates lock");
        m.entry(flow).or_insert_with(|| (watch::channel(0.0).0, Instant::now())).0.subscribe()
    }

    pub(crate) fn set(&self, flow: FlowId, rate: f64) {
        let mut m = self.flows.lock().expect("rates lock");
        m.entry(flow).or_insert_with(|| (watch::channel(0.0).0, Instant::now())).0.send_replace(rate);
    }

    pub(crate) fn remove(&self, flow: FlowId) {
        self.flows.lock().expect("rates lock").remove(&flow);
    }

    /// Drops rates nobody has used for a minute (pushed after their flow ended).
    pub(crate) fn collect_garbage(&self) {
        let mut m = self.flows.lock().expect("rates lock");
        m.retain(|_, (tx, at)| tx.receiver_count() > 0 || at.elapsed() < Duration::from_secs(60));
    }
}

/// The flow keys this agent checks tickets with, as a source: its current registration's and
/// the one before (a grant made just before it registered again still serves).
#[derive(Debug, Default)]
pub(crate) struct FlowKeys {
    keys: Mutex<VecDeque<FlowKey>>,
}

impl FlowKeys {
    /// Keeps the key of a new registration.
    pub(crate) fn learn(&self, key: FlowKey) {
        let mut keys = self.keys.lock().expect("keys lock");
        keys.push_front(key);
        keys.truncate(2);
    }

    #[cfg(test)]
    pub(crate) fn keys_for_test(&self) -> std::sync::MutexGuard<'_, VecDeque<FlowKey>> {
        self.keys.lock().expect("keys lock")
    }

    /// Whether `req`'s ticket is its flow's, for the range it asks and the hop it names, under
    /// one of the keys.
    pub(crate) fn verify(&self, req: &crate::wire::Request) -> bool {
        let keys = self.keys.lock().expect("keys lock");
        let scope = coflow_proto::ticket::Scope {
            offset: req.offset,
            length: req.length,
            hop: req.via.as_ref().map(|h| (h.src, h.addr.as_str())),
        };
        keys.iter().any(|k| k.verify(req.flow, req.coflow, req.data_id.as_str(), req.dst, scope, &req.ticket))
    }
}

/// The flows served so far, by ticket: a flow attaches once (again only if its connection was
/// lost before a byte of it left). The most recent [`ATTACHED_MEMORY`]
/// are remembered (a ticket older than that belongs to a flow long finished).
#[derive(Debug, Default)]
pub(crate) struct Attached {
    inner: Mutex<(HashSet<Ticket>, VecDeque<Ticket>)>,
}

/// How many attached flows a source remembers.
const ATTACHED_MEMORY: usize = 1 << 18;

impl Attached {
    /// Attaches a flow; false if it was attached already.
    pub(crate) fn attach(&self, ticket: Ticket) -> bool {
        let mut s = self.inner.lock().expect("attached lock");
        if !s.0.insert(ticket) {
            return false;
        }
        s.1.push_back(ticket);
        if s.1.len() > ATTACHED_MEMORY
            && let Some(old) = s.1.pop_front()
        {
            s.0.remove(&old);
        }
        true
    }

    /// Lets a flow attach again: its connection was lost before a byte of it left.
    pub(crate) fn detach(&self, ticket: Ticket) {
        self.inner.lock().expect("attached lock").0.remove(&ticket);
    }
}

/// A peer of the data plane, as a source counts its connections: with TLS the agent its
/// certificate names, in token mode its IP address (agents of one host or one NAT share it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum DataPeer {
    Machine(MachineId),
    Address(IpAddr),
}

/// The turns this agent hands out for one peer: to fetch from it, while the coordinator's mode
/// bounds fetches (the bound they were made for, and its semaphore), and with TLS to open a data
/// connection to it.
#[derive(Debug)]
pub(crate) struct Turns {
    fetches: Option<(usize, Arc<tokio::sync::Semaphore>)>,
    handshakes: Arc<tokio::sync::Semaphore>,
}

impl Default for Turns {
    fn default() -> Turns {
        Turns { fetches: None, handshakes: Arc::new(tokio::sync::Semaphore::new(coflow_proto::HANDSHAKES_PER_ADDRESS)) }
    }
}

/// One direction of this machine's port, capped at its configured capacity.
#[derive(Debug)]
pub(crate) struct PortLimiter {
    bucket: Mutex<TokenBucket>,
}

impl PortLimiter {
    pub(crate) fn new(rate: f64, chunk: usize) -> PortLimiter {
        PortLimiter { bucket: Mutex::new(TokenBucket::new(rate, burst_for(rate, chunk), Nanos::ZERO)) }
    }

    /// Waits until `n` bytes fit in the port's capacity (at once when the agent does not cap its
    /// port).
    pub(crate) async fn wait(&self, shared: &Shared, n: u64) {
        if !shared.config.cap_port {
            return;
        }
        loop {
            let g = self.bucket.lock().expect("port lock").take(shared.now(), n);
            match g {
                Grant::Now | Grant::Paused => return,
                Grant::Wait(d) => tokio::time::sleep(Duration::from_nanos(d.0)).await,
            }
        }
    }
}

/// A remote get in progress at this (receiving) agent: what it needs to re-announce the flow to
/// a restarted coordinator, and how to end it when the coordinator fails the flow.
#[derive(Debug)]
pub(crate) struct Receiving {
    pub(crate) coflow: CoflowId,
    pub(crate) data_id: DataId,
    pub(crate) src: MachineId,
    pub(crate) size: u64,
    /// Bytes received and verified so far.
    pub(crate) received: Arc<AtomicU64>,
    /// The link epoch (registration) under which the coordinator last knew this flow.
    pub(crate) epoch: u64,
    /// Whether a restarted coordinator is told of it (a whole piece fetched directly; a part of a
    /// split or resumed get goes on at its last rate).
    pub(crate) recoverable: bool,
    /// Set to stop the flow: fail the get, or cut the flow and resume the rest.
    pub(crate) stop: watch::Sender<Option<Stop>>,
}

/// The most stops kept for flows not listed yet.
const MAX_EARLY_STOPS: usize = 4096;

/// Why a flow this agent receives stops before its end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Stop {
    /// The get fails, for this reason.
    Fail(String),
    /// Its coflow was unregistered (the coordinator failed its flows): the get fails
    /// `unknown-coflow`.
    Dropped,
    /// The coordinator moved the flow to other paths: cut it and resume the rest.
    Reroute,
}

/// Everything an agent's tasks share.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) config: AgentConfig,
    pub(crate) security: Security,
    /// The session the coordinator gave this agent's registration (0 before the first).
    pub(crate) session: AtomicU64,
    pub(crate) store: Store,
    pub(crate) rates: RateTable,
    /// Warm data connections to other agents, for the fetches of local gets.
    pub(crate) pool: crate::conn::Pool,
    /// The session with the coordinator.
    pub(crate) link: crate::session::Link,
    /// Bytes sent so far by each flow being sent, for heartbeats.
    pub(crate) sending: Mutex<HashMap<FlowId, Arc<AtomicU64>>>,
    /// Remote gets in progress, by flow.
    pub(crate) receiving: Mutex<HashMap<FlowId, Receiving>>,
    /// Gets whose client is not taking their bytes, for heartbeats.
    pub(crate) unread: crate::unread::Unread,
    /// Stops the coordinator sent for flows this agent had not listed yet (a notice can overtake
    /// the task that receives the flow), applied as each is listed; taken while `receiving` is
    /// held. Bounded: the oldest go first.
    pub(crate) early_stops: Mutex<VecDeque<(FlowId, Stop)>>,
    /// The keys this agent checks flow tickets with, as a source.
    pub(crate) flow_keys: FlowKeys,
    /// The flows this agent served, as a source: each attaches once.
    pub(crate) attached: Attached,
    /// How many times the agent registered with a coordinator (each restart of the coordinator
    /// is a new epoch: flows of an older one are re-announced).
    pub(crate) link_epoch: AtomicU64,
    /// Data connections being served.
    pub(crate) data_connections: AtomicU64,
    /// The data connections being served, by peer.
    pub(crate) peer_shares: coflow_proto::Shares<DataPeer>,
    /// The peers whose data requests were denied: the first denial of each address is logged
    /// at warn, the rest at debug, so a peer that retries in a loop cannot flood the log.
    pub(crate) denials: coflow_proto::RefusalLog,
    /// Since when the link to the coordinator is down, if it is.
    pub(crate) link_down_since: Mutex<Option<Instant>>,
    pub(crate) tx_port: PortLimiter,
    pub(crate) rx_port: PortLimiter,
    pub(crate) tx_bytes: AtomicU64,
    pub(crate) rx_bytes: AtomicU64,
    /// Bytes this agent forwarded as a relay (multi-path routing).
    pub(crate) relayed_bytes: AtomicU64,
    /// How many fetches this agent carries at once to one peer (the coordinator's mode says; 0:
    /// no bound).
    pub(crate) fetches_per_peer: std::sync::atomic::AtomicU32,
    /// The turns to fetch from each peer and to connect to it.
    pub(crate) turns: Mutex<HashMap<MachineId, Turns>>,
    pub(crate) gets: AtomicU64,
    pub(crate) get_failures: AtomicU64,
    /// Bytes of gets' parts kept on disk while they waited for their turn ([`crate::spill`]).
    pub(crate) spilled_bytes: Arc<AtomicU64>,
    pub(crate) puts: AtomicU64,
    /// The coordinator, for registering and leaving, with what it asks of this agent.
    pub(crate) coordinator: crate::membership::Coordinator,
    /// The agent's own pulse, beaten by a task of [`crate::run`].
    pub(crate) pulse: crate::pulse::Pulse,
    epoch: Instant,
}

impl Shared {
    pub(crate) fn new(config: AgentConfig, security: Security, coordinator: CoordClient) -> Shared {
        let (rate, chunk) = (config.port_rate_bps, config.chunk_bytes);
        let (max_stored, max_per_client) = (config.max_stored_bytes, config.max_stored_bytes_per_client);
        Shared {
            config,
            security,
            session: AtomicU64::new(0),
            store: Store::new(max_stored, max_per_client),
            rates: RateTable::default(),
            pool: crate::conn::Pool::default(),
            link: crate::session::Link::default(),
            sending: Mutex::new(HashMap::new()),
            receiving: Mutex::new(HashMap::new()),
            unread: crate::unread::Unread::default(),
            early_stops: Mutex::new(VecDeque::new()),
            flow_keys: FlowKeys::default(),
            attached: Attached::default(),
            link_epoch: AtomicU64::new(0),
            data_connections: AtomicU64::new(0),
            peer_shares: coflow_proto::Shares::default(),
            denials: coflow_proto::RefusalLog::default(),
            link_down_since: Mutex::new(None),
            tx_port: PortLimiter::new(rate, chunk),
            rx_port: PortLimiter::new(rate, chunk),
            tx_bytes: AtomicU64::new(0),
            rx_bytes: AtomicU64::new(0),
            relayed_bytes: AtomicU64::new(0),
            fetches_per_peer: std::sync::atomic::AtomicU32::new(0),
            turns: Mutex::new(HashMap::new()),
            gets: AtomicU64::new(0),
            get_failures: AtomicU64::new(0),
            spilled_bytes: Arc::default(),
            puts: AtomicU64::new(0),
            coordinator: crate::membership::Coordinator::new(coordinator),
            pulse: crate::pulse::Pulse::default(),
            epoch: Instant::now(),
        }
    }

    /// Notes that the link to the coordinator broke (the first time since it was last up).
    pub(crate) fn link_lost(&self) {
        self.link_down_since.lock().expect("link lock").get_or_insert_with(Instant::now);
    }

    /// Completes when the coordinator has been unreachable for `coordinator_grace_ms` and
    /// `received` has not grown for a second: a flow waiting for a coordinator that does not
    /// come back.
    pub(crate) async fn coordinator_gone(&self, received: &AtomicU64) {
        let grace = Duration::from_millis(self.config.coordinator_grace_ms);
        let mut last = received.load(std::sync::atomic::Ordering::Relaxed);
        loop {
            tokio::time::sleep(Duration::from_secs(1).min(grace)).await;
            let now = received.load(std::sync::atomic::Ordering::Relaxed);
            let down = self.link_down_since.lock().expect("link lock").is_some_and(|t| t.elapsed() >= grace);
            if down && now == last {
                return;
            }
            last = now;
        }
    }

    /// Stops flow `flow` for `why` if this agent receives it; if it does not list it yet, keeps
    /// the stop for when it does.
    pub(crate) fn stop_flow(&self, flow: FlowId, why: Stop) {
        let receiving = self.receiving.lock().expect("receiving lock");
        match receiving.get(&flow) {
            Some(r) => {
                r.stop.send_replace(Some(why));
            }
            None => {
                let mut early = self.early_stops.lock().expect("early stops lock");
                if early.len() >= MAX_EARLY_STOPS {
                    early.pop_front();
                }
                early.push_back((flow, why));
            }
        }
    }

    /// Lists a flow this agent receives, applying a stop that came for it before.
    pub(crate) fn list_receiving(&self, flow: FlowId, rec: Receiving) {
        let mut receiving = self.receiving.lock().expect("receiving lock");
        let mut early = self.early_stops.lock().expect("early stops lock");
        if let Some(k) = early.iter().position(|(f, _)| *f == flow) {
            let (_, why) = early.remove(k).expect("found");
            rec.stop.send_replace(Some(why));
        }
        // Its coflow's drop may have come before the flow was listed ([`Shared::drop_coflow`]).
        if self.store.is_dropped(rec.coflow) {
            rec.stop.send_replace(Some(Stop::Dropped));
        }
        receiving.insert(flow, rec);
    }

    /// Drops `coflow`, which the coordinator unregistered (and so failed its flows): forgets its
    /// pieces, then stops every flow of it this agent receives; returns how many of each. The
    /// store first, so that a flow listed meanwhile finds the coflow dropped
    /// ([`Shared::list_receiving`]).
    pub(crate) fn drop_coflow(&self, coflow: CoflowId) -> (usize, usize) {
        let pieces = self.store.drop_coflow(coflow);
        let receiving = self.receiving.lock().expect("receiving lock");
        let mut stopped = 0;
        for r in receiving.values().filter(|r| r.coflow == coflow) {
            r.stop.send_replace(Some(Stop::Dropped));
            stopped += 1;
        }
        (pieces, stopped)
    }

    /// A turn to fetch from `peer`, waited for in arrival order: at most
    /// `max_data_connections_per_peer` fetches (each on a connection of its own) go to one peer at
    /// once, fewer when the coordinator's mode bounds them further, so that gets held at rate zero
    /// cannot open one connection each to their source without end.
    pub(crate) async fn fetch_turn(&self, peer: MachineId) -> Option<tokio::sync::OwnedSemaphorePermit> {
        // Without the coordinator's bound a get takes no turn: a flow held at rate 0 keeps its
        // connection, and a turn it held would keep the flows the scheduler lets run waiting
        // behind it, which could then wait for ever. A source refuses a peer past its share.
        let n = match self.fetches_per_peer.load(std::sync::atomic::Ordering::Relaxed) {
            0 => return None,
            n => (n as usize).min(self.config.data_connections_per_peer()),
        };
        let turns = {
            let mut map = self.turns.lock().expect("turns lock");
            let fetches = &mut map.entry(peer).or_default().fetches;
            match fetches {
                Some((bound, turns)) if *bound == n => turns.clone(),
                _ => fetches.insert((n, Arc::new(tokio::sync::Semaphore::new(n)))).1.clone(),
            }
        };
        turns.acquire_owned().await.ok()
    }

    /// A turn to open a data connection to `peer` over TLS (its TCP connect and handshake),
    /// waited for in arrival order: at most [`coflow_proto::HANDSHAKES_PER_ADDRESS`] at once, the
    /// handshakes a source runs at once for one address. A source closes, before their handshake,
    /// the connections of an address past [`coflow_proto::UNPROVEN_PER_ADDRESS`] waiting for
    /// theirs, as a receiver would take a dead source; so a burst of gets through this agent
    /// queues here, and meets the source's share of established connections, which says busy.
    pub(crate) async fn handshake_turn(&self, peer: MachineId) -> tokio::sync::OwnedSemaphorePermit {
        let turns = self.turns.lock().expect("turns lock").entry(peer).or_default().handshakes.clone();
        turns.acquire_owned().await.expect("a semaphore that is never closed")
    }

    /// The data plane's idle timeout.
    pub(crate) fn idle(&self) -> Duration {
        Duration::from_millis(self.config.data_idle_timeout_ms)
    }

    /// The shortest pause of its own that an agent holds to explain a peer's silence over the
    /// idle timeout: half of it, and at least [`crate::pulse::LEAST`] (a short idle timeout must
    /// not take a beat a tick late for a pause).
    pub(crate) fn pause_least(&self) -> Duration {
        (self.idle() / 2).max(crate::pulse::LEAST)
    }

    /// `e`, a peer's failure, unless this agent itself did not run lately for
    /// [`Shared::pause_least`]: a peer that gave up on a frozen agent and closed the connection is
    /// not to blame either.
    pub(crate) fn unless_paused(&self, e: AgentError) -> AgentError {
        match self.pulse.paused(Instant::now(), self.idle(), self.pause_least()) {
            Some(pause) => AgentError::Paused { secs: pause.as_secs_f64() },
            None => e,
        }
    }

    /// Why the peer at `addr` sent nothing for the idle timeout: its own silence, unless this
    /// agent did not run for half of that time lately (its process was paused or starved), in
    /// which case the peer is not to blame.
    pub(crate) fn silent(&self, addr: &str) -> AgentError {
        self.unless_paused(AgentError::SourceSilent { addr: addr.to_string(), secs: self.idle().as_secs_f64() })
    }

    /// The session to carry in agent calls.
    pub(crate) fn session(&self) -> u64 {
        self.session.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Time since the agent started.
    pub(crate) fn now(&self) -> Nanos {
        Nanos(self.epoch.elapsed().as_nanos() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A peer holds at most its share; another peer is let in all the while, and a place given
    /// back lets the first in again.
    #[test]
    fn a_peer_holds_at_most_its_share() {
        let shares = coflow_proto::Shares::default();
        let (a, b) = (DataPeer::Machine(MachineId(1)), DataPeer::Address("10.0.0.2".parse().unwrap()));
        let mut held: Vec<_> = (0..3).map(|_| shares.admit(a, 3).expect("within the share")).collect();
        assert!(shares.admit(a, 3).is_none(), "past the share");
        let other = shares.admit(b, 3).expect("another peer");
        assert_eq!((shares.held(&a), shares.held(&b)), (3, 1));
        held.pop();
        assert!(shares.admit(a, 3).is_some(), "a place given back");
        drop((held, other));
        assert_eq!(shares.holders(), 0, "nothing kept for peers that left");
    }

    /// A coflow's drop stops the flows of it this agent receives, those listed before the drop
    /// and one listed after it alike, and no flow of another coflow.
    #[tokio::test]
    async fn a_dropped_coflow_stops_its_flows_listed_before_and_after() {
        let token = coflow_proto::ClusterToken::new("state-test").unwrap();
        let channel = tonic::transport::Endpoint::from_static("http://127.0.0.1:9").connect_lazy();
        let coordinator = CoordinatorClient::with_interceptor(channel, TokenAttach::new(Some(token.clone())));
        let s = Shared::new(AgentConfig::default(), Security::Token(token), coordinator);
        let mut stops = Vec::new();
        let mut list = |flow: u64, coflow: u64| {
            let (stop, stopped) = watch::channel(None);
            let rec = Receiving {
                coflow: CoflowId(coflow),
                data_id: DataId::new("p").unwrap(),
                src: MachineId(0),
                size: 10,
                received: Arc::default(),
                epoch: 0,
                recoverable: true,
                stop,
            };
            s.list_receiving(FlowId(flow), rec);
            stops.push(stopped);
        };
        list(1, 7);
        list(2, 8);
        assert_eq!(s.drop_coflow(CoflowId(7)).1, 1);
        list(3, 7);
        let dropped: Vec<bool> = stops.iter().map(|r| matches!(*r.borrow(), Some(Stop::Dropped))).collect();
        assert_eq!(dropped, [true, false, true], "flows 1 and 3 of the dropped coflow, not flow 2 of another");
    }
}
