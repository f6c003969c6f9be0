//! The data plane's tests: the wire between a receiver and a source or relay, over in-memory
//! pipes and local sockets.

use super::*;
use crate::config::AgentConfig;
use crate::store::Piece;
use coflow_proto::ticket::{FlowKey, Scope};
use coflow_proto::{ClusterToken, ErrorKind, Security, TokenAttach};

/// The address the tests' requests come from.
const PEER: std::net::SocketAddr = std::net::SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 9);

/// A sink straight into `tx`.
fn sink(tx: &mpsc::Sender<Vec<u8>>) -> Sink {
    Sink::stream(tx.clone(), Arc::default())
}

fn shared(chunk: usize) -> Arc<Shared> {
    shared_with(AgentConfig { chunk_bytes: chunk, ..AgentConfig::default() })
}

/// Machine 4 (a source, or a relay, for machine 2) with `config` and an idle timeout of 500 ms.
fn shared_with(config: AgentConfig) -> Arc<Shared> {
    let token = ClusterToken::new("data-test").unwrap();
    let channel = tonic::transport::Endpoint::from_static("http://127.0.0.1:9").connect_lazy();
    let coordinator = coflow_proto::pb::coordinator_client::CoordinatorClient::with_interceptor(
        channel,
        TokenAttach::new(Some(token.clone())),
    );
    let config = AgentConfig { machine: Some(4), data_idle_timeout_ms: 500, ..config };
    let s = Shared::new(config, Security::Token(token), coordinator);
    s.flow_keys.learn(key());
    Arc::new(s)
}

/// `s` serving pieces as a source to `from` on one end of an in-memory pipe of `capacity`
/// bytes, until `stop` says so: the other end, as a receiver's connection, and the source's task.
fn serve_over(
    s: &Arc<Shared>,
    capacity: usize,
    from: std::net::SocketAddr,
    stop: watch::Receiver<bool>,
) -> (Reader<tokio::io::DuplexStream>, tokio::task::JoinHandle<Result<(), AgentError>>) {
    let (near, far) = tokio::io::duplex(capacity);
    let s = s.clone();
    (Reader::new(near), tokio::spawn(async move { send_pieces(far, &s, None, from, stop).await }))
}

/// The flow key the coordinator would have told the source.
fn key() -> FlowKey {
    FlowKey::new(&[7; coflow_proto::ticket::FLOW_KEY_LEN]).unwrap()
}

fn bytes(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 31 % 251) as u8).collect()
}

fn frame(block: &[u8], crc: u32) -> Vec<u8> {
    let mut f = Vec::new();
    wire::encode_data(block, crc, &mut f);
    f
}

/// A request for flow `flow` of piece `id` of coflow 1 to machine 2, with its ticket.
fn request(s: &Shared, flow: u64, id: &str) -> Request {
    signed(Request {
        token: s.security.token().unwrap().as_bytes().to_vec(),
        coflow: CoflowId(1),
        flow: FlowId(flow),
        dst: MachineId(2),
        ticket: [0; 16],
        data_id: DataId::new(id).unwrap(),
        // All of the piece, if the source holds it.
        offset: 0,
        length: s.store.get(CoflowId(1), &DataId::new(id).unwrap()).map_or(0, |p| p.len()),
        via: None,
    })
}

/// `req` with the ticket the coordinator would have granted for its range and hop.
fn signed(req: Request) -> Request {
    let hop = req.via.as_ref().map(|h| (h.src, h.addr.as_str()));
    let scope = Scope { offset: req.offset, length: req.length, hop };
    let ticket = key().ticket(req.flow, req.coflow, req.data_id.as_str(), req.dst, scope);
    Request { ticket, ..req }
}

/// Runs `fetch_over` against a peer that answers `response`; returns what reached the
/// client and how the fetch ended.
async fn fetch_against(response: Vec<u8>, size: u64) -> (Vec<Vec<u8>>, Result<u64, AgentError>) {
    let s = shared(1024);
    let (near, mut far) = tokio::io::duplex(1 << 20);
    let peer = tokio::spawn(async move {
        let mut req = [0u8; 64];
        let _ = far.read(&mut req).await;
        far.write_all(&response).await.unwrap();
        // Then silence, with the connection open.
        tokio::time::sleep(Duration::from_secs(5)).await;
    });
    let (tx, mut rx) = mpsc::channel(64);
    let mut conn = Reader::new(near);
    let r = fetch_over(&mut conn, &s, "peer", &request(&s, 1, "p"), size, &sink(&tx), &AtomicU64::new(0)).await;
    let r = r.map_err(|e| match e {
        Fetch::Stale => AgentError::Refused("stale"),
        Fetch::Busy(e) | Fetch::Failed(e) => e,
    });
    drop(tx);
    let mut got = Vec::new();
    while let Some(c) = rx.recv().await {
        got.push(c);
    }
    peer.abort();
    (got, r)
}

fn ok_head(size: u64) -> Vec<u8> {
    wire::encode_head(Status::Ok, size).to_vec()
}

/// A block that fails its checksum never reaches the client: it holds the verified prefix
/// and the fetch fails `Corrupted`.
#[tokio::test]
async fn a_corrupted_block_is_caught_before_the_client_sees_it() {
    let b = bytes(2048);
    let mut resp = ok_head(2048);
    resp.extend(frame(&b[..1024], crc32fast::hash(&b[..1024])));
    resp.extend(wire::KEEPALIVE);
    let mut bad = b[1024..].to_vec();
    bad[7] ^= 1;
    resp.extend(frame(&bad, crc32fast::hash(&b[1024..])));
    let (got, r) = fetch_against(resp, 2048).await;
    assert!(matches!(r, Err(AgentError::Corrupted(_))), "{r:?}");
    assert_eq!(got, vec![b[..1024].to_vec()]);
}

#[tokio::test]
async fn an_error_frame_is_data_lost_and_silence_is_a_timeout() {
    let mut resp = ok_head(2048);
    wire::encode_error(Status::DataLost, "gone", &mut resp);
    let (_, r) = fetch_against(resp, 2048).await;
    assert!(matches!(&r, Err(AgentError::DataLost(m)) if m == "gone"), "{r:?}");
    let t = Instant::now();
    let (_, r) = fetch_against(ok_head(2048), 2048).await;
    assert!(matches!(r, Err(AgentError::SourceSilent { .. })), "{r:?}");
    assert!(t.elapsed() >= Duration::from_millis(450) && t.elapsed() < Duration::from_secs(3));
}

/// A source that no longer holds the piece (it restarted and lost its memory, which with
/// sessions it reaches while the coordinator still names it) is data lost, to recompute, not
/// a refusal the SDK would report as a credentials problem.
#[tokio::test]
async fn a_source_without_the_piece_is_data_lost() {
    let (got, r) = fetch_against(wire::encode_head(Status::NoPiece, 0).to_vec(), 2048).await;
    assert!(got.is_empty());
    let e = r.unwrap_err();
    assert!(matches!(&e, AgentError::DataLost(m) if m.contains("no longer holds")), "{e}");
    assert_eq!(e.kind(), ErrorKind::DataLost);
}

/// A source that refuses the ticket of a flow the coordinator granted (it restarted with a
/// new key, or has not yet heard a restarted coordinator's) is a source to try again, not a
/// refusal of the client's rights.
#[tokio::test]
async fn a_source_that_refuses_a_granted_ticket_is_unreachable_not_a_denial() {
    let (got, r) = fetch_against(wire::encode_head(Status::Denied, 0).to_vec(), 2048).await;
    assert!(got.is_empty());
    let e = r.unwrap_err();
    assert!(matches!(&e, AgentError::SourceUnreachable { reason, .. } if reason.contains("ticket")), "{e}");
    assert_eq!(e.kind(), ErrorKind::AgentUnreachable);
}

/// A frame that claims more bytes than the piece has left is corruption, not a wait.
#[tokio::test]
async fn a_frame_past_the_piece_is_corruption() {
    let mut resp = ok_head(10);
    resp.extend(frame(&bytes(20), crc32fast::hash(&bytes(20))));
    let (got, r) = fetch_against(resp, 10).await;
    assert!(got.is_empty());
    assert!(matches!(r, Err(AgentError::Corrupted(_))), "{r:?}");
}

/// A paced flow sends a millisecond of its rate per frame, never less than 4 KiB nor more than
/// its block has left; an unknown or unbounded rate sends what is left of the block.
#[test]
fn a_frame_holds_a_millisecond_of_the_flows_rate() {
    assert_eq!(frame_len(12_500_000.0, 32_768), 12_500);
    assert_eq!(frame_len(125_000_000.0, 32_768), 32_768);
    assert_eq!(frame_len(100_000.0, 32_768), MIN_FRAME);
    assert_eq!(frame_len(100_000.0, 100), 100);
    assert_eq!(frame_len(12_500_000.0, 5_000), 5_000);
    assert_eq!(frame_len(0.0, 32_768), 32_768);
    assert_eq!(frame_len(f64::INFINITY, 32_768), 32_768);
    assert_eq!(frame_len(f64::NAN, 32_768), 32_768);
}

/// An agent without a session tells its clients to retry, as `coordinator-unreachable`: no
/// source is to blame.
#[test]
fn not_registered_is_retryable() {
    let s = tonic::Status::from(AgentError::NotRegistered);
    assert_eq!(s.code(), tonic::Code::Unavailable);
    assert_eq!(ErrorKind::of(&s), Some(ErrorKind::CoordinatorUnreachable));
}

/// Several pieces cross one connection one after another, exactly, block by block; a piece
/// the source does not hold ends the connection.
#[tokio::test]
async fn pieces_cross_one_connection_one_after_another() {
    let s = shared(1024);
    let (a, b) = (bytes(5000), bytes(3000).into_iter().rev().collect::<Vec<u8>>());
    s.store.keep(CoflowId(1), DataId::new("a").unwrap(), Piece::memory(a.clone(), 1024), "").unwrap();
    s.store.keep(CoflowId(1), DataId::new("b").unwrap(), Piece::memory(b.clone(), 1024), "").unwrap();
    s.rates.set(FlowId(1), 1e9);
    s.rates.set(FlowId(2), 1e9);
    let (stop_tx, stop) = watch::channel(false);
    let (mut conn, sender) = serve_over(&s, 4096, PEER, stop);
    for (flow, id, want) in [(1, "a", &a), (2, "b", &b)] {
        let (tx, mut rx) = mpsc::channel(64);
        let got = fetch_over(
            &mut conn,
            &s,
            "peer",
            &request(&s, flow, id),
            want.len() as u64,
            &sink(&tx),
            &AtomicU64::new(0),
        )
        .await;
        assert_eq!(got.ok(), Some(want.len() as u64));
        drop(tx);
        let mut bytes = Vec::new();
        while let Some(c) = rx.recv().await {
            assert!(c.len() <= 1024);
            bytes.extend(c);
        }
        assert_eq!(&bytes, want);
    }
    let (tx, _rx) = mpsc::channel(64);
    let missing = fetch_over(&mut conn, &s, "peer", &request(&s, 3, "c"), 10, &sink(&tx), &AtomicU64::new(0)).await;
    assert!(matches!(missing, Err(Fetch::Failed(AgentError::DataLost(_)))));
    assert!(matches!(sender.await.unwrap(), Err(AgentError::Refused("no such piece"))));
    drop(stop_tx);
}

/// A receiver that hangs up mid-piece stops the source at once, and a request with the wrong
/// token is refused.
#[tokio::test]
async fn the_source_stops_when_the_receiver_hangs_up_and_refuses_a_wrong_token() {
    let s = shared(1024);
    s.store.keep(CoflowId(1), DataId::new("a").unwrap(), Piece::memory(bytes(1 << 20), 1024), "").unwrap();
    // Paused: the piece would never end by itself.
    s.rates.set(FlowId(1), 0.0);
    let (_stop_tx, stop) = watch::channel(false);
    let (mut conn, sender) = serve_over(&s, 4096, PEER, stop);
    let mut req = Vec::new();
    request(&s, 1, "a").encode(&mut req);
    conn.io.write_all(&req).await.unwrap();
    assert_eq!(conn.head().await.unwrap(), (Status::Ok, 1 << 20));
    drop(conn);
    let ended = tokio::time::timeout(Duration::from_secs(2), sender).await.expect("stops at once").unwrap();
    assert!(matches!(ended, Err(AgentError::ReceiverGone(_))), "{ended:?}");

    let (_stop_tx, stop) = watch::channel(false);
    let (mut conn, sender) = serve_over(&s, 4096, PEER, stop);
    let mut req = Vec::new();
    Request { token: b"wrong".to_vec(), ..request(&s, 1, "a") }.encode(&mut req);
    conn.io.write_all(&req).await.unwrap();
    assert_eq!(conn.head().await.unwrap().0, Status::BadToken);
    assert!(matches!(sender.await.unwrap(), Err(AgentError::Refused("wrong cluster token"))));
}

/// Sends `req` on a fresh connection to a source serving `s` and returns the response head
/// and how the source ended the connection.
async fn ask(s: &Arc<Shared>, req: &Request) -> ((Status, u64), Result<(), AgentError>) {
    ask_from(s, req, PEER).await
}

/// As [`ask`], from address `from`.
async fn ask_from(
    s: &Arc<Shared>,
    req: &Request,
    from: std::net::SocketAddr,
) -> ((Status, u64), Result<(), AgentError>) {
    let (_stop_tx, stop) = watch::channel(false);
    let (mut conn, sender) = serve_over(s, 1 << 16, from, stop);
    let mut bytes = Vec::new();
    req.encode(&mut bytes);
    conn.io.write_all(&bytes).await.unwrap();
    let head = conn.head().await.unwrap();
    drop(conn);
    (head, tokio::time::timeout(Duration::from_secs(2), sender).await.expect("ends").unwrap())
}

/// A flow is served only with its ticket: a forged one, one for another flow, piece or
/// receiver, is denied with a size of 0 (whether or not the piece exists); a flow attaches
/// once, and a hijacker's second attach is denied without touching the real one.
#[tokio::test]
async fn a_flow_is_served_once_and_only_with_its_ticket() {
    let s = shared(1024);
    s.store.keep(CoflowId(1), DataId::new("a").unwrap(), Piece::memory(bytes(5000), 1024), "").unwrap();
    s.rates.set(FlowId(1), 1e9);
    let denied = |r: &Result<(), AgentError>| matches!(r, Err(AgentError::PermissionDenied(_)));
    for forged in [
        Request { ticket: [0; 16], ..request(&s, 1, "a") },
        Request { flow: FlowId(2), ..request(&s, 1, "a") },
        Request { dst: MachineId(3), ..request(&s, 1, "a") },
        Request { data_id: DataId::new("missing").unwrap(), ..request(&s, 1, "a") },
        // Another range of the piece, or the piece relayed from a hop the grant does not name
        // (denied before it connects anywhere).
        Request { offset: 1, length: 4999, ..request(&s, 1, "a") },
        Request { length: 2500, ..request(&s, 1, "a") },
        Request { length: u64::MAX, ..request(&s, 1, "a") },
        Request {
            via: Some(wire::Hop { src: MachineId(5), addr: "127.0.0.1:9".into(), ticket: [3; 16] }),
            ..request(&s, 1, "a")
        },
    ] {
        let (head, end) = ask(&s, &forged).await;
        assert_eq!(head, (Status::Denied, 0), "{forged:?}");
        assert!(denied(&end), "{end:?}");
    }
    // The real receiver attaches and gets the piece, over a connection that stays open.
    let (_stop_tx, stop) = watch::channel(false);
    let (mut conn, sender) = serve_over(&s, 1 << 16, PEER, stop);
    let (tx, mut rx) = mpsc::channel(64);
    let got = fetch_over(&mut conn, &s, "peer", &request(&s, 1, "a"), 5000, &sink(&tx), &AtomicU64::new(0)).await;
    assert_eq!(got.ok(), Some(5000));
    drop(tx);
    let mut n = 0;
    while let Some(c) = rx.recv().await {
        n += c.len();
    }
    assert_eq!(n, 5000);
    // The same flow again, on another connection: denied, and the real one's connection is
    // still served.
    let (head, end) = ask(&s, &request(&s, 1, "a")).await;
    assert_eq!(head, (Status::Denied, 0));
    assert!(denied(&end), "{end:?}");
    s.rates.set(FlowId(4), 1e9);
    let (tx, _rx) = mpsc::channel(64);
    let again = fetch_over(&mut conn, &s, "peer", &request(&s, 4, "a"), 5000, &sink(&tx), &AtomicU64::new(0)).await;
    assert_eq!(again.ok(), Some(5000));
    drop(conn);
    assert!(sender.await.unwrap().is_ok());
}

/// A flow whose connection is lost before a byte of it left may be asked for again (on a
/// fresh connection, by the receiver with its ticket); once bytes left, it may not.
#[tokio::test]
async fn a_flow_lost_before_its_first_byte_attaches_again() {
    let s = shared(1024);
    s.store.keep(CoflowId(1), DataId::new("a").unwrap(), Piece::memory(bytes(5000), 1024), "").unwrap();
    // At rate 0 nothing leaves; the receiver hangs up after the head.
    s.rates.set(FlowId(1), 0.0);
    let (head, end) = ask(&s, &request(&s, 1, "a")).await;
    assert_eq!(head, (Status::Ok, 5000));
    assert!(end.is_err());
    let (head, _) = ask(&s, &request(&s, 1, "a")).await;
    assert_eq!(head, (Status::Ok, 5000), "asked again: served");
}

/// With no flow key (not registered yet), nothing is served.
#[tokio::test]
async fn a_source_without_a_key_serves_nothing() {
    let s = shared(1024);
    *s.flow_keys.keys_for_test() = Default::default();
    s.store.keep(CoflowId(1), DataId::new("a").unwrap(), Piece::memory(bytes(10), 1024), "").unwrap();
    let (head, _) = ask(&s, &request(&s, 1, "a")).await;
    assert_eq!(head, (Status::Denied, 0));
}

/// Counts the warnings logged while it is the thread's subscriber.
#[derive(Default)]
struct Warnings(AtomicU64);

impl tracing::Subscriber for Warnings {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        if *event.metadata().level() == tracing::Level::WARN {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// A peer that sends forged tickets in a loop is denied every time, but logged at warn once
/// per address, so it cannot flood the log.
#[tokio::test]
async fn denied_requests_are_logged_at_warn_once_per_address() {
    let s = shared(1024);
    s.store.keep(CoflowId(1), DataId::new("a").unwrap(), Piece::memory(bytes(10), 1024), "").unwrap();
    let warnings = Arc::new(Warnings::default());
    let _log = tracing::subscriber::set_default(warnings.clone());
    let forged = Request { ticket: [0; 16], ..request(&s, 1, "a") };
    let other: std::net::SocketAddr = "10.0.0.9:4000".parse().unwrap();
    for from in std::iter::repeat_n(PEER, 50).chain(std::iter::repeat_n(other, 50)) {
        let (head, end) = ask_from(&s, &forged, from).await;
        assert_eq!(head, (Status::Denied, 0));
        assert!(matches!(end, Err(AgentError::PermissionDenied("not the flow's ticket"))), "{end:?}");
    }
    assert_eq!(warnings.0.load(Ordering::Relaxed), 2, "one warning per address");
}

/// A source that says busy with a size says the receiver holds its share of the source's
/// connections: the get fails `limit-exceeded` naming that bound, not the source's whole.
#[tokio::test]
async fn busy_with_a_size_names_the_per_peer_bound() {
    for (size, names) in [(3, "max_data_connections_per_peer (3)"), (0, "its max_data_connections")] {
        let (got, r) = fetch_against(wire::encode_head(Status::Busy, size).to_vec(), 2048).await;
        assert!(got.is_empty());
        let e = r.unwrap_err();
        assert!(matches!(&e, AgentError::LimitExceeded(m) if m.contains(names)), "{e}");
        assert_eq!(e.kind(), ErrorKind::LimitExceeded);
    }
}

/// A source that says busy is asked again after short pauses, on fresh connections: a place
/// given back a moment later serves the get exactly; a source busy for longer than the idle
/// timeout fails the get `limit-exceeded` soon after it.
#[tokio::test]
async fn a_busy_source_is_asked_again_within_the_idle_timeout() {
    let s = {
        let mut s = Arc::into_inner(shared(1024)).expect("one holder");
        s.config.machine = Some(2);
        Arc::new(s)
    };
    let piece = bytes(5000);
    s.store.keep(CoflowId(1), DataId::new("a").unwrap(), Piece::memory(piece.clone(), 1024), "").unwrap();
    s.rates.set(FlowId(1), 1e9);
    for (busy, served) in [(3, true), (usize::MAX, false)] {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let source = {
            let s = s.clone();
            tokio::spawn(async move {
                let (_stop_tx, stop) = watch::channel(false);
                for asked in 0.. {
                    let (sock, peer) = listener.accept().await.unwrap();
                    if asked < busy {
                        say_busy(sock, 2).await;
                    } else {
                        let _ = send_pieces(sock, &s, None, peer, stop.clone()).await;
                    }
                }
            })
        };
        let part = Part {
            flow: FlowId(1),
            offset: 0,
            length: 5000,
            src: MachineId(1),
            src_addr: addr,
            ticket: key().ticket(FlowId(1), CoflowId(1), "a", MachineId(2), Scope::range(0, 5000)),
            via: None,
            reroutable: false,
        };
        let (tx, mut rx) = mpsc::channel(64);
        let started = std::time::Instant::now();
        let got = fetch(&s, CoflowId(1), &DataId::new("a").unwrap(), &part, &sink(&tx), &AtomicU64::new(0)).await;
        let took = started.elapsed();
        drop(tx);
        let mut bytes_got = Vec::new();
        while let Some(c) = rx.recv().await {
            bytes_got.extend(c);
        }
        if served {
            assert_eq!(got.ok(), Some(5000), "served once a place is free");
            assert!(bytes_got == piece, "exact bytes");
        } else {
            let e = got.unwrap_err();
            assert!(
                matches!(&e, AgentError::LimitExceeded(m) if m.contains("max_data_connections_per_peer (2)")),
                "{e}"
            );
            assert!(bytes_got.is_empty());
            assert!(took >= s.idle() / 2 && took < s.idle() * 4, "fails within about the idle timeout: {took:?}");
        }
        source.abort();
    }
}

/// A source serves one peer at most its share of the data connections, saying busy with the
/// share as the size past it, while another peer is served all along.
#[tokio::test]
async fn a_source_serves_a_peer_at_most_its_share() {
    let s = {
        let s = shared(1024);
        let mut config = s.config.clone();
        config.max_data_connections_per_peer = Some(2);
        let mut s = Arc::into_inner(s).expect("one holder");
        s.config = config;
        Arc::new(s)
    };
    let slots = Arc::new(Semaphore::new(s.config.max_data_connections));
    let (_stop_tx, stop) = watch::channel(false);
    let connect = |machine: u32| {
        let (near, far) = tokio::io::duplex(1 << 16);
        let (s, slots, stop) = (s.clone(), slots.clone(), stop.clone());
        let task = tokio::spawn(async move { serve_one(far, Some(MachineId(machine)), PEER, &s, &slots, stop).await });
        (Reader::new(near), task)
    };
    let held: Vec<_> = (0..2).map(|_| connect(1)).collect();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let (mut third, _) = connect(1);
    assert_eq!(tokio::time::timeout(Duration::from_secs(1), third.head()).await.unwrap().unwrap(), (Status::Busy, 2));
    s.store.keep(CoflowId(1), DataId::new("a").unwrap(), Piece::memory(bytes(5000), 1024), "").unwrap();
    s.rates.set(FlowId(1), 1e9);
    let (mut other, _) = connect(2);
    let (tx, _rx) = mpsc::channel(64);
    let got = fetch_over(&mut other, &s, "peer", &request(&s, 1, "a"), 5000, &sink(&tx), &AtomicU64::new(0)).await;
    assert_eq!(got.ok(), Some(5000), "another peer is served");
    drop(held);
}

/// Without a bound from the coordinator a fetch takes no turn (one held at rate 0 would keep
/// the flows that may run waiting behind it); with one, a receiver carries at most that
/// many fetches to one peer at once, and never more than `max_data_connections_per_peer`.
#[tokio::test]
async fn a_receiver_holds_at_most_its_share_of_connections_to_one_source() {
    let s = shared(1024);
    assert!(s.fetch_turn(MachineId(3)).await.is_none(), "no turn without the coordinator's bound");
    s.fetches_per_peer.store(u32::MAX, std::sync::atomic::Ordering::Relaxed);
    let share = s.config.data_connections_per_peer();
    let mut turns = Vec::new();
    for _ in 0..share {
        turns.push(s.fetch_turn(MachineId(3)).await.expect("a turn"));
    }
    let next = tokio::time::timeout(Duration::from_millis(50), s.fetch_turn(MachineId(3))).await;
    assert!(next.is_err(), "waits past the share");
    assert!(s.fetch_turn(MachineId(4)).await.is_some(), "another source has turns of its own");
    turns.pop();
    assert!(s.fetch_turn(MachineId(3)).await.is_some(), "a turn given back");
}

/// Relays `req` (a relayed request: the relay `s` checks its ticket, then fetches from its
/// hop) to a receiver that runs `fetch_over` as its own fetch of `size` bytes would; returns
/// the bytes the receiver handed on and how its fetch ended.
async fn fetch_through_relay(s: &Arc<Shared>, req: &Request, size: u64) -> (Vec<u8>, Result<u64, AgentError>) {
    let (_stop_tx, stop) = watch::channel(false);
    let (mut conn, relay) = serve_over(s, 1 << 20, PEER, stop);
    let (tx, mut rx) = mpsc::channel(64);
    // The receiver is another machine, with a port of its own.
    let receiver = shared(1024);
    let r = fetch_over(&mut conn, &receiver, "relay:7", req, size, &sink(&tx), &AtomicU64::new(0)).await;
    let r = r.map_err(|e| match e {
        Fetch::Stale => AgentError::SourceUnreachable { addr: "relay:7".into(), reason: "closed".into() },
        Fetch::Busy(e) | Fetch::Failed(e) => e,
    });
    drop((tx, conn));
    let mut got = Vec::new();
    while let Some(c) = rx.recv().await {
        got.extend(c);
    }
    let _ = tokio::time::timeout(Duration::from_secs(2), relay).await.expect("the relay ends");
    (got, r)
}

/// A source at a local address that answers one request (which its task returns) with a head of
/// `size` bytes and `copies` frames of `block`, then keeps the connection until the other end
/// closes it (`hold`) or drops it at once, as a source that dies.
async fn scripted_source(
    size: u64,
    block: &[u8],
    copies: usize,
    hold: bool,
) -> (String, tokio::task::JoinHandle<Request>) {
    let source = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = source.local_addr().unwrap().to_string();
    let block = block.to_vec();
    let task = tokio::spawn(async move {
        let (sock, _) = source.accept().await.unwrap();
        let mut conn = Reader::new(sock);
        let req = conn.request().await.unwrap().expect("a request");
        conn.io.write_all(&wire::encode_head(Status::Ok, size)).await.unwrap();
        for _ in 0..copies {
            conn.io.write_all(&frame(&block, crc32fast::hash(&block))).await.unwrap();
        }
        conn.io.flush().await.unwrap();
        if hold {
            let _ = conn.io.read_u8().await;
        }
        req
    });
    (addr, task)
}

/// A relay that cannot reach its hop's source (its address refuses connections), or that
/// loses it after some blocks, says so to the receiver, which blames the source (the error
/// names the source's address, with why and the relay that says so) rather than the relay;
/// every block that came before is handed on, once.
#[tokio::test]
async fn a_relay_that_loses_its_source_says_so_and_the_receiver_blames_the_source() {
    let s = shared(1024);
    let refusing = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let gone = refusing.local_addr().unwrap().to_string();
    drop(refusing);
    let hop = |addr: &str| wire::Hop { src: MachineId(5), addr: addr.to_string(), ticket: [3; 16] };
    let relayed =
        |flow: u64, addr: &str| signed(Request { length: 3000, via: Some(hop(addr)), ..request(&s, flow, "p") });
    let (got, r) = fetch_through_relay(&s, &relayed(1, &gone), 3000).await;
    assert!(got.is_empty());
    match r {
        Err(AgentError::SourceUnreachable { addr, reason }) => {
            assert_eq!(addr, gone, "the source is blamed, not the relay: {reason}");
            assert!(reason.contains("relay at relay:7"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    // A source that sends a block, then dies.
    let block = bytes(1000);
    let (src, served) = scripted_source(3000, &block, 1, false).await;
    let (got, r) = fetch_through_relay(&s, &relayed(2, &src), 3000).await;
    let req = served.await.unwrap();
    assert_eq!((req.offset, req.length, req.via), (0, 3000, None), "the relay asks for the range");
    assert_eq!(got, block, "the block that came is handed on once");
    match r {
        Err(AgentError::SourceUnreachable { addr, reason }) => {
            assert_eq!(addr, src, "the source is blamed, not the relay: {reason}");
        }
        other => panic!("{other:?}"),
    }
}

/// A source that refuses the hop's ticket (it registered again since the grant, and its new key
/// refuses the old ticket) is blamed by the receiver through the relay, as it is by a receiver
/// that fetches from it directly, and not the relay.
#[tokio::test]
async fn a_source_that_refuses_the_relays_ticket_is_blamed_not_the_relay() {
    let s = shared(1024);
    let source = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = source.local_addr().unwrap().to_string();
    let denying = tokio::spawn(async move {
        let (sock, _) = source.accept().await.unwrap();
        let mut conn = Reader::new(sock);
        conn.request().await.unwrap().expect("a request");
        conn.io.write_all(&wire::encode_head(Status::Denied, 0)).await.unwrap();
        conn.io.flush().await.unwrap();
    });
    let hop = wire::Hop { src: MachineId(5), addr: addr.clone(), ticket: [3; 16] };
    let req = signed(Request { length: 3000, via: Some(hop), ..request(&s, 1, "p") });
    let (got, r) = fetch_through_relay(&s, &req, 3000).await;
    denying.await.unwrap();
    assert!(got.is_empty());
    match r {
        Err(AgentError::SourceUnreachable { addr: blamed, reason }) => {
            assert_eq!(blamed, addr, "the source is blamed, not the relay: {reason}");
            assert!(reason.contains("restarted"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
}

/// A relay that cannot open a socket to its hop's source, every file descriptor of its process
/// being in use, fails the fetch without saying the source is lost: the receiver finds the relay
/// gone and blames it, not a source it never tried, so that the coordinator leaves the relay out
/// of that receiver's new paths. Run in a child process of this test binary, whose file limit it
/// lowers to the descriptors already open (the relay's receiver talks to it over an in-memory
/// pipe).
#[test]
fn a_relay_out_of_file_descriptors_blames_itself() {
    const CHILD: &str = "COFLOW_TEST_OUT_OF_FILE_DESCRIPTORS";
    const NAME: &str = "data::tests::a_relay_out_of_file_descriptors_blames_itself";
    if std::env::var_os(CHILD).is_none() {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", NAME, "--test-threads=1"])
            .env(CHILD, "1")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "the child failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
        assert!(stdout.contains("1 passed"), "the child ran no test:\n{stdout}");
        return;
    }
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let s = shared(1024);
        let source = "127.0.0.1:9";
        let hop = wire::Hop { src: MachineId(5), addr: source.into(), ticket: [3; 16] };
        let req = signed(Request { length: 3000, via: Some(hop), ..request(&s, 1, "p") });
        // A file opened takes the lowest free descriptor: from it on, none can be opened.
        use rustix::process::{Resource, getrlimit, setrlimit};
        let was = getrlimit(Resource::Nofile);
        let lowest = std::os::fd::AsRawFd::as_raw_fd(&std::fs::File::open("/dev/null").unwrap()) as u64;
        setrlimit(Resource::Nofile, rustix::process::Rlimit { current: Some(lowest), ..was }).unwrap();
        assert!(tokio::net::TcpSocket::new_v4().is_err(), "no socket can be opened");
        let (got, r) = fetch_through_relay(&s, &req, 3000).await;
        setrlimit(Resource::Nofile, was).unwrap();
        assert!(got.is_empty());
        match r {
            Err(AgentError::SourceUnreachable { addr, reason }) => {
                assert_eq!(addr, "relay:7", "the relay is blamed, not the source: {reason}");
            }
            other => panic!("{other:?}"),
        }
    });
}

/// A relay's port carries what it relays in and out, within the capacity its operator set:
/// eight blocks of 1,000 bytes that its source sends at once reach the receiver, every byte, no
/// sooner than the port lets through what is past its burst (20,000 B/s, a burst of 1,024 bytes
/// each way: 0.349 s at least, asserted as 0.3 s).
#[tokio::test]
async fn a_relay_forwards_within_its_port_capacity() {
    let s = shared_with(AgentConfig { chunk_bytes: 1024, port_rate_bps: 20_000.0, ..AgentConfig::default() });
    let block = bytes(1000);
    let (src, served) = scripted_source(8000, &block, 8, true).await;
    let hop = wire::Hop { src: MachineId(5), addr: src, ticket: [3; 16] };
    let req = signed(Request { length: 8000, via: Some(hop), ..request(&s, 1, "p") });
    let started = Instant::now();
    let (got, r) = fetch_through_relay(&s, &req, 8000).await;
    let took = started.elapsed();
    assert_eq!(r.unwrap(), 8000);
    assert_eq!(got, block.repeat(8));
    assert!(took >= Duration::from_millis(300), "8,000 bytes through a port of 20,000 B/s in {took:?}");
    served.abort();
}

/// A receiver that predates [`Status::Unreachable`] reads it as a status it does not know
/// and fails the fetch cleanly (corrupted), taking no byte: modelled by decoding a head one
/// status past the ones it knew and an error frame of an unknown code.
#[tokio::test]
async fn an_unknown_status_or_error_code_fails_cleanly() {
    let mut head = wire::encode_head(Status::Unreachable, 0).to_vec();
    head[0] = 42;
    let (got, r) = fetch_against(head, 2048).await;
    assert!(got.is_empty());
    assert_eq!(r.map_err(|e| e.kind()), Err(ErrorKind::Corrupted));
    let mut resp = ok_head(2048);
    wire::encode_error(Status::Unreachable, "gone", &mut resp);
    resp[wire::HEAD_LEN + 1] = 42;
    let (got, r) = fetch_against(resp, 2048).await;
    assert!(got.is_empty());
    assert_eq!(r.map_err(|e| e.kind()), Err(ErrorKind::Corrupted));
}
