//! The store's tests: confinement of file paths, pending and accepted pieces, memory bounds.

use super::*;

/// Never set: reads in these tests are not stopped.
static GO: AtomicBool = AtomicBool::new(false);

/// [`super::file_piece`], never stopped.
fn file_piece(
    dir: &Path,
    home: Option<&str>,
    path: &str,
    offset: u64,
    len: u64,
    block: usize,
) -> Result<Piece, AgentError> {
    super::file_piece(dir, home, path, offset, len, block, &GO)
}

impl Store {
    /// A streamed piece held and accepted at once.
    fn keep_reserved(&self, r: Reservation<'_>, piece: Piece) -> Result<(), AgentError> {
        let (coflow, data_id, client) = r.key.clone().expect("a reservation holds its name");
        self.insert_reserved(r, piece)?;
        self.confirm(coflow, &data_id, &client)
    }
}

/// A fresh directory for one test, with `data/sub` in it, and the guard that removes it when
/// dropped.
fn scratch(name: &str) -> (tempfile::TempDir, PathBuf) {
    let guard = tempfile::Builder::new().prefix(&format!("coflow-{name}-")).tempdir().unwrap();
    let base = guard.path().to_path_buf();
    std::fs::create_dir_all(base.join("data/sub")).unwrap();
    (guard, base)
}

#[test]
fn paths_stay_inside_the_data_directory() {
    let (_guard, base) = scratch("confine");
    let dir = base.join("data");
    std::fs::write(dir.join("sub/piece"), b"hello").unwrap();
    std::fs::write(base.join("secret"), b"no").unwrap();
    assert!(confine(&dir, "sub/piece").is_ok());
    for bad in ["../secret", "/etc/passwd", "sub/../../secret", ""] {
        assert!(matches!(file_piece(&dir, None, bad, 0, 1, 4), Err(AgentError::PathEscapes(_))), "{bad}");
    }
    for bad in ["../secret", "/etc/passwd", "sub/../../secret"] {
        assert!(matches!(confine(&dir, bad), Err(AgentError::PathEscapes(_))), "{bad}");
    }
    // A symlink anywhere on the way is refused, even one that stays inside the directory.
    std::os::unix::fs::symlink(base.join("secret"), dir.join("link")).unwrap();
    std::os::unix::fs::symlink(dir.join("sub"), dir.join("inner")).unwrap();
    assert!(matches!(confine(&dir, "link"), Err(AgentError::PathEscapes(_))));
    for bad in ["link", "inner/piece"] {
        let e = file_piece(&dir, None, bad, 0, 1, 4).unwrap_err();
        assert!(matches!(e, AgentError::PathEscapes(_)), "{bad}: {e}");
    }
    assert!(matches!(file_piece(&dir, None, "sub", 0, 1, 4), Err(AgentError::BadFile(m)) if m.contains("regular")));
    assert!(matches!(file_piece(&dir, None, "sub/piece", 3, 5, 4), Err(AgentError::BadFile(_))));
    assert_eq!(file_piece(&dir, None, "sub/piece", 1, 4, 4).unwrap().len(), 4);
}

/// With TLS a client's file segments lie beneath its own directory, in a `clients/` that no
/// client may rename entries of.
#[test]
fn a_client_puts_only_files_beneath_its_own_directory() {
    use coflow_proto::{Peer, Role};
    let alice = home_of(Some(&Peer::Tls(Role::Client("alice".into())))).unwrap();
    assert_eq!(alice.as_deref(), Some("clients/alice"));
    assert_eq!(home_of(Some(&Peer::Tls(Role::Admin))).unwrap().as_deref(), Some("admin"));
    assert_eq!(home_of(Some(&Peer::Token)).unwrap(), None, "token holders may read any piece anyway");
    assert!(home_of(Some(&Peer::Tls(Role::Agent(0)))).is_err());
    let (_guard, base) = scratch("homes");
    let dir = base.join("data");
    for who in ["alice", "bob"] {
        std::fs::create_dir_all(dir.join(format!("clients/{who}/app"))).unwrap();
        std::fs::write(dir.join(format!("clients/{who}/app/out")), b"secret of someone").unwrap();
    }
    let home = alice.as_deref();
    assert_eq!(file_piece(&dir, home, "clients/alice/app/out", 0, 6, 4).unwrap().len(), 6);
    assert_eq!(file_piece(&dir, home, "./clients/alice/./app/out", 0, 6, 4).unwrap().len(), 6);
    for theirs in ["clients/bob/app/out", "sub/piece", "clients/alice", "clients/alicex/out", "clients"] {
        let e = file_piece(&dir, home, theirs, 0, 1, 4).unwrap_err();
        assert!(matches!(&e, AgentError::NotYours(m) if m.contains("not beneath clients/alice/")), "{theirs}: {e}");
        assert_eq!(e.kind(), coflow_proto::ErrorKind::PermissionDenied);
    }
    // Out through `..` is refused as any escape is, before its directory is looked at.
    let e = file_piece(&dir, home, "clients/alice/../bob/app/out", 0, 1, 4).unwrap_err();
    assert!(matches!(e, AgentError::PathEscapes(_)), "{e}");
    // A home that does not exist, or is a link, is named.
    let carol = Some("clients/carol");
    std::fs::create_dir_all(dir.join("elsewhere")).unwrap();
    std::fs::write(dir.join("elsewhere/out"), b"x").unwrap();
    std::os::unix::fs::symlink(dir.join("elsewhere"), dir.join("clients/carol")).unwrap();
    let e = file_piece(&dir, carol, "clients/carol/out", 0, 1, 4).unwrap_err();
    // Opened as a directory without following it, a link is "not a directory" (or a loop).
    assert!(
        matches!(&e, AgentError::PathEscapes(_))
            || matches!(&e, AgentError::BadFile(m) if m.contains("clients/carol") && m.contains("Not a directory")),
        "{e}"
    );
    let e = file_piece(&dir, Some("clients/dave"), "clients/dave/out", 0, 1, 4).unwrap_err();
    assert!(
        matches!(&e, AgentError::BadFile(m) if m.contains("this client's directory") && m.contains("No such file") && m.contains("an operator makes it")),
        "{e}"
    );
    // A `clients/` in which others may rename entries would let one pass another's home off
    // as its own: refused unless sticky.
    use std::os::unix::fs::PermissionsExt;
    for (mode, ok) in [(0o777, false), (0o775, false), (0o1777, true), (0o755, true)] {
        std::fs::set_permissions(dir.join("clients"), std::fs::Permissions::from_mode(mode)).unwrap();
        let r = file_piece(&dir, home, "clients/alice/app/out", 0, 6, 4);
        assert_eq!(r.is_ok(), ok, "clients/ at mode {mode:o}: {r:?}");
        if let Err(e) = r {
            assert!(e.to_string().contains("lets others rename its entries"), "{e}");
        }
    }
}

/// A file in a client's directory that another user owns (a hard link to someone else's
/// file, made where `fs.protected_hardlinks` is off) is not the client's. Needs root, to
/// give the file away.
#[test]
fn a_file_of_another_user_in_a_clients_directory_is_refused() {
    let (_guard, base) = scratch("owner");
    let dir = base.join("data");
    std::fs::create_dir_all(dir.join("clients/alice")).unwrap();
    std::fs::write(dir.join("clients/alice/mine"), b"mine").unwrap();
    std::fs::write(dir.join("clients/alice/theirs"), b"theirs").unwrap();
    // A file just made is the user's own: root's, or it cannot give files away.
    if file_owner(&std::fs::metadata(dir.join("clients/alice/mine")).unwrap()) != 0 {
        eprintln!("skipped: giving a file to another user needs root");
        return;
    }
    let other = rustix::fs::Uid::from_raw(54_321);
    rustix::fs::chown(dir.join("clients/alice/theirs"), Some(other), None).unwrap();
    let home = Some("clients/alice");
    assert_eq!(file_piece(&dir, home, "clients/alice/mine", 0, 4, 4).unwrap().len(), 4);
    let e = file_piece(&dir, home, "clients/alice/theirs", 0, 4, 4).unwrap_err();
    assert!(matches!(&e, AgentError::NotYours(m) if m.contains("not owned by the owner of clients/alice/")), "{e}");
    // A token holder's put is not asked whose the file is.
    assert_eq!(file_piece(&dir, None, "clients/alice/theirs", 0, 4, 4).unwrap().len(), 4);
    // Nor may `clients/` itself be another user's, who could rename the homes in it.
    rustix::fs::chown(dir.join("clients"), Some(other), None).unwrap();
    let e = file_piece(&dir, home, "clients/alice/mine", 0, 4, 4).unwrap_err();
    assert!(e.to_string().contains("lets others rename its entries (owner 54321"), "{e}");
}

/// A FIFO in the data directory is refused at once, at put, with a typed error: no thread
/// waits for a writer.
#[test]
fn a_fifo_is_refused_at_once() {
    let (_guard, base) = scratch("fifo");
    let dir = base.join("data");
    let d = std::fs::File::open(&dir).unwrap();
    rustix::fs::mknodat(&d, "fifo", rustix::fs::FileType::Fifo, rustix::fs::Mode::RUSR | rustix::fs::Mode::WUSR, 0)
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let d2 = dir.clone();
    std::thread::spawn(move || tx.send(file_piece(&d2, None, "fifo", 0, 1, 4).map(|p| p.len())));
    let r = rx.recv_timeout(std::time::Duration::from_secs(2)).expect("a FIFO put returns at once");
    assert!(matches!(&r, Err(AgentError::BadFile(m)) if m.contains("not a regular file")), "{r:?}");
}

/// A directory swapped with a symlink to an outside directory (renameat2 exchange) while
/// puts and reads run: no put captures, and no read serves, a byte of the outside file, in
/// at least 1,000 tries.
#[tokio::test]
async fn a_symlink_swapped_in_never_serves_an_outside_byte() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let (_guard, base) = scratch("swap");
    let dir = base.join("data");
    std::fs::create_dir_all(dir.join("d")).unwrap();
    std::fs::create_dir_all(base.join("outside")).unwrap();
    let (inside, outside) = (vec![b'A'; 4096], vec![b'B'; 4096]);
    std::fs::write(dir.join("d/f"), &inside).unwrap();
    std::fs::write(base.join("outside/f"), &outside).unwrap();
    std::os::unix::fs::symlink(base.join("outside"), dir.join("l")).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let (stop, dir) = (stop.clone(), dir.clone());
        std::thread::spawn(move || {
            let d = std::fs::File::open(&dir).unwrap();
            let mut swaps = 0u64;
            while !stop.load(Ordering::Relaxed) {
                rustix::fs::renameat_with(&d, "d", &d, "l", rustix::fs::RenameFlags::EXCHANGE).unwrap();
                swaps += 1;
            }
            swaps
        })
    };
    let (mut tries, mut served) = (0, 0);
    let inside_crc = crc32fast::hash(&inside[..1024]);
    while tries < 1000 || served == 0 {
        tries += 1;
        let Ok(piece) = file_piece(&dir, None, "d/f", 0, 4096, 1024) else { continue };
        assert!(piece.crcs.iter().all(|&c| c == inside_crc), "a put captured the outside file");
        if let Ok(bytes) = read_all(&piece, &dir).await {
            assert_eq!(bytes, inside, "a read served other bytes");
            served += 1;
        }
        assert!(tries < 100_000, "no put ever succeeded");
    }
    stop.store(true, Ordering::Relaxed);
    assert!(swapper.join().unwrap() > 0);
}

async fn read_all(p: &Piece, dir: &Path) -> Result<Vec<u8>, AgentError> {
    let mut r = p.reader(dir).await?;
    let (mut out, mut buf) = (Vec::new(), Vec::new());
    while r.remaining() > 0 {
        r.next_block(&mut buf).await?;
        out.extend_from_slice(&buf);
    }
    Ok(out)
}

/// Every range of a piece, in memory or a file segment, reads exactly its bytes, each share
/// with the CRC of its own bytes; a changed byte inside a block the range touches is caught
/// even when the range itself leaves that byte out.
#[tokio::test]
async fn a_range_reads_exactly_its_bytes_checked_by_whole_blocks() {
    let (_guard, base) = scratch("range");
    let dir = base.join("data");
    let bytes: Vec<u8> = (0..10_000u32).map(|i| (i * 13 % 251) as u8).collect();
    std::fs::write(dir.join("sub/out"), &bytes).unwrap();
    let file = file_piece(&dir, None, "sub/out", 100, 9000, 1024).unwrap();
    let memory = Piece::memory(bytes[100..9100].to_vec(), 1024);
    for piece in [&memory, &file] {
        for (start, len) in [(0, 9000), (0, 1), (1023, 2), (1024, 1024), (5000, 4000), (8999, 1), (700, 0)] {
            let mut r = piece.reader_range(&dir, start, len).await.unwrap();
            let (mut out, mut buf) = (Vec::new(), Vec::new());
            while r.remaining() > 0 {
                let expect = r.next_len() as usize;
                let crc = r.next_block(&mut buf).await.unwrap();
                assert_eq!((buf.len(), crc), (expect, crc32fast::hash(&buf)));
                out.extend_from_slice(&buf);
            }
            let (s, e) = (100 + start as usize, 100 + (start + len) as usize);
            assert_eq!(out, &bytes[s..e], "{start}+{len}");
        }
    }
    let mut flipped = bytes.clone();
    flipped[100 + 1030] ^= 0xff;
    std::fs::write(dir.join("sub/out"), &flipped).unwrap();
    let mut r = file.reader_range(&dir, 1040, 100).await.unwrap();
    let e = r.next_block(&mut Vec::new()).await.unwrap_err();
    assert!(matches!(e, AgentError::DataLost(_)), "{e}");
}

/// Every way a file segment can change after its put is `DataLost`, never other bytes, and
/// the message names the path relative to the data directory only.
#[tokio::test]
async fn a_segment_changed_after_its_put_is_data_lost() {
    let (_guard, base) = scratch("segment");
    let dir = base.join("data");
    let bytes: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
    let write = |b: &[u8]| std::fs::write(dir.join("sub/out"), b).unwrap();
    write(&bytes);
    let piece = file_piece(&dir, None, "sub/out", 100, 9000, 1024).unwrap();
    assert_eq!(read_all(&piece, &dir).await.unwrap(), &bytes[100..9100]);

    let mut flipped = bytes.clone();
    flipped[5000] ^= 0xff;
    write(&flipped);
    let outside = base.join("outside");
    std::fs::write(&outside, &bytes).unwrap();
    type Change<'a> = Box<dyn Fn() + 'a>;
    let cases: Vec<(&str, Change)> = vec![
        ("flipped", Box::new(|| {})),
        (
            "replaced by a same-content file",
            Box::new(|| {
                std::fs::write(dir.join("sub/new"), &bytes).unwrap();
                std::fs::rename(dir.join("sub/new"), dir.join("sub/out")).unwrap();
            }),
        ),
        ("truncated", Box::new(|| write(&bytes[..5000]))),
        ("removed", Box::new(|| std::fs::remove_file(dir.join("sub/out")).unwrap())),
        #[cfg(unix)]
        (
            "replaced by a symlink out of the data directory",
            Box::new(|| {
                let _ = std::fs::remove_file(dir.join("sub/out"));
                std::os::unix::fs::symlink(&outside, dir.join("sub/out")).unwrap();
            }),
        ),
    ];
    for (what, change) in cases {
        change();
        // A rename over the file while it exists gives the new one another inode.
        let Err(e) = read_all(&piece, &dir).await else { panic!("{what}: read succeeded") };
        assert!(matches!(&e, AgentError::DataLost(_)), "{what}: {e}");
        let msg = e.to_string();
        assert!(msg.contains("\"sub/out\"") && !msg.contains(base.to_str().unwrap()), "{what}: {msg}");
    }
}

#[test]
fn unregistering_frees_the_memory_and_refuses_the_coflow() {
    let s = Store::new(1000, 0);
    let id = |s: &str| DataId::new(s).unwrap();
    s.keep(CoflowId(1), id("a"), Piece::memory(vec![1; 600], 256), "").unwrap();
    let e = s.keep(CoflowId(2), id("b"), Piece::memory(vec![1; 600], 256), "").unwrap_err();
    assert!(matches!(e, AgentError::LimitExceeded(_)), "{e}");
    assert_eq!(s.drop_coflow(CoflowId(1)), 1);
    assert_eq!(s.usage(), Usage::default());
    s.keep(CoflowId(2), id("b"), Piece::memory(vec![1; 600], 256), "").unwrap();
    assert!(matches!(s.keep(CoflowId(1), id("c"), Piece::memory(vec![1], 256), ""), Err(AgentError::UnknownCoflow(_))));
}

/// What a piece of `bytes` in memory, checksummed in blocks of `block` bytes, is charged as
/// `id` for `client`: its bytes, its CRC table, its name, the client's name and the overhead.
fn cost(bytes: u64, block: u64, id: &str, client: &str) -> u64 {
    bytes + 4 * bytes.div_ceil(block) + id.len() as u64 + client.len() as u64 + PIECE_OVERHEAD_BYTES
}

/// A name being streamed in is held from the same client only: another client's stream or
/// put of the name goes ahead, the first piece stored wins, and a stream that lost gives its
/// memory back.
#[test]
fn a_name_being_streamed_in_is_held_from_its_own_client_only() {
    let s = Store::new(10_000, 0);
    let x = DataId::new("x").unwrap();
    let stranger = s.reserve(CoflowId(1), &x, 300, "stranger", 1024).unwrap();
    assert!(matches!(s.reserve(CoflowId(1), &x, 300, "stranger", 1024), Err(AgentError::DuplicateDataId { .. })));
    let owner = s.reserve(CoflowId(1), &x, 300, "owner", 1024).unwrap();
    // A stream is charged the CRC table of 1 KiB blocks, the agent's least.
    let (reserved_s, reserved_o) = (cost(300, 1024, "x", "stranger"), cost(300, 1024, "x", "owner"));
    assert_eq!(s.usage(), Usage { pieces: 0, bytes: 0, memory: reserved_s + reserved_o, largest_client: reserved_s });
    s.keep_reserved(owner, Piece::memory(vec![1; 300], 256)).unwrap();
    let lost = s.keep_reserved(stranger, Piece::memory(vec![2; 300], 256));
    assert!(matches!(lost, Err(AgentError::DuplicateDataId { .. })), "{lost:?}");
    let stored = cost(300, 256, "x", "owner");
    assert_eq!(
        s.usage(),
        Usage { pieces: 1, bytes: 300, memory: stored, largest_client: stored },
        "the stream that lost gave its memory back"
    );
    assert!(matches!(s.reserve(CoflowId(1), &x, 10, "stranger", 1024), Err(AgentError::DuplicateDataId { .. })));
    // A plain put is not held back by another client's stream either.
    let y = DataId::new("y").unwrap();
    let stream = s.reserve(CoflowId(1), &y, 100, "stranger", 1024).unwrap();
    s.keep(CoflowId(1), y.clone(), Piece::memory(vec![3; 100], 256), "").unwrap();
    drop(stream);
    let plain = cost(100, 256, "y", "");
    assert_eq!(s.usage(), Usage { pieces: 2, bytes: 400, memory: stored + plain, largest_client: stored });
}

/// A piece pending (its announcement not answered) holds its name from its own client only:
/// a stranger's put of the owner's name does not make the owner's a duplicate, the piece the
/// coordinator accepts is the one served, and a fetch waits while puts of its name pend.
#[tokio::test]
async fn a_pending_piece_holds_its_name_from_its_own_client_only() {
    let s = std::sync::Arc::new(Store::new(1 << 20, 0));
    let (c, x) = (CoflowId(1), DataId::new("x").unwrap());
    let mem = |b: u8| Piece::memory(vec![b; 10], 1024);
    s.insert(c, x.clone(), mem(6), "mallory").unwrap();
    assert!(matches!(s.insert(c, x.clone(), mem(6), "mallory"), Err(AgentError::DuplicateDataId { .. })));
    assert!(matches!(s.reserve(c, &x, 10, "mallory", 1024), Err(AgentError::DuplicateDataId { .. })));
    s.insert(c, x.clone(), mem(1), "alice").unwrap();
    assert_eq!(s.usage().pieces, 2, "both pending pieces are counted");
    assert!(s.get(c, &x).is_none(), "a pending piece is served to no one");
    assert!(s.list().is_empty(), "nor announced again after a restart");
    assert!(s.settled(c, &DataId::new("y").unwrap(), std::time::Duration::from_secs(60)).await.is_none());

    // A fetch of the name waits for the puts to settle, and gets the piece accepted.
    let fetch = tokio::spawn({
        let (s, x) = (s.clone(), x.clone());
        async move { s.settled(c, &x, std::time::Duration::from_secs(60)).await }
    });
    tokio::task::yield_now().await;
    s.withdraw(c, &x, "mallory");
    tokio::task::yield_now().await;
    assert!(!fetch.is_finished(), "alice's put still pends");
    s.confirm(c, &x, "alice").unwrap();
    let piece = fetch.await.unwrap().expect("the accepted piece");
    let dir = Path::new("/nonexistent");
    assert_eq!(read_all(&piece, dir).await.unwrap(), vec![1; 10], "alice's bytes, not mallory's");
    assert_eq!(s.usage().pieces, 1, "mallory's piece gave its memory back");
    assert!(matches!(s.insert(c, x.clone(), mem(6), "mallory"), Err(AgentError::DuplicateDataId { .. })));

    // With only a stranger's put pending, a fetch finds no piece once it is let go, and
    // finds none at all after its wait.
    let z = DataId::new("z").unwrap();
    s.insert(c, z.clone(), mem(6), "mallory").unwrap();
    assert!(s.settled(c, &z, std::time::Duration::from_millis(20)).await.is_none());
    s.withdraw(c, &z, "mallory");
    assert!(s.settled(c, &z, std::time::Duration::from_secs(60)).await.is_none());

    // One client has one piece of a name in flight: no plain put beside its own stream of the
    // name, nor a stream beside its own pending put.
    let (w, u) = (DataId::new("w").unwrap(), DataId::new("u").unwrap());
    let stream = s.reserve(c, &w, 10, "alice", 1024).unwrap();
    assert!(matches!(s.insert(c, w.clone(), mem(2), "alice"), Err(AgentError::DuplicateDataId { .. })));
    s.insert(c, u.clone(), mem(4), "alice").unwrap();
    assert!(matches!(s.reserve(c, &u, 10, "alice", 1024), Err(AgentError::DuplicateDataId { .. })));
    s.withdraw(c, &u, "alice");
    drop(stream);
    assert_eq!(s.usage().pieces, 1, "only x is held");

    // A piece accepted after its coflow was dropped is let go.
    s.insert(c, z.clone(), mem(1), "alice").unwrap();
    s.drop_coflow(c);
    assert!(matches!(s.confirm(c, &z, "alice"), Err(AgentError::UnknownCoflow(_))));
    assert_eq!(s.usage(), Usage::default());
}

/// One client identity holds at most its bound of memory, whatever the agent has left; what
/// it gives back (a piece removed, a coflow dropped, a stream that ends) is its own to use
/// again, and another client is not held back by it. Every piece here costs `k` beyond its
/// bytes (a 2-byte name, a 1-byte client, one CRC), so the bounds leave room for it.
#[test]
fn one_client_holds_at_most_its_bound_of_memory() {
    let k = cost(0, 1024, "a1", "a") + 4;
    let s = Store::new(1000 + 4 * k, 400 + 2 * k);
    let id = |s: &str| DataId::new(s).unwrap();
    let mem = |n: usize| Piece::memory(vec![1; n], 1024);
    s.keep(CoflowId(1), id("a1"), mem(300), "a").unwrap();
    let e = s.reserve(CoflowId(1), &id("a2"), 200, "a", 1024).unwrap_err();
    assert!(matches!(&e, AgentError::LimitExceeded(m) if m.contains("max_stored_bytes_per_client")), "{e}");
    assert!(matches!(s.keep(CoflowId(1), id("a2"), mem(101), "a"), Err(AgentError::LimitExceeded(_))));
    s.keep(CoflowId(2), id("b1"), mem(400), "b").unwrap();
    let stream = s.reserve(CoflowId(1), &id("a2"), 100, "a", 1024).unwrap();
    assert_eq!((s.usage().memory, s.usage().largest_client), (800 + 3 * k, 400 + 2 * k));
    drop(stream);
    assert_eq!((s.usage().memory, s.usage().largest_client), (700 + 2 * k, 400 + k));
    s.remove(CoflowId(1), &id("a1"));
    s.keep(CoflowId(3), id("a3"), mem(400), "a").unwrap();
    assert!(matches!(s.keep(CoflowId(2), id("b2"), mem(1), "b"), Err(AgentError::LimitExceeded(_))));
    assert_eq!(s.drop_coflow(CoflowId(2)), 1);
    s.keep(CoflowId(4), id("b2"), mem(200), "b").unwrap();
    assert_eq!((s.usage().memory, s.usage().largest_client), (600 + 2 * k, 400 + k));
    // A bound of 0: none but the agent's.
    let unbounded = Store::new(1000 + k, 0);
    unbounded.keep(CoflowId(1), id("x1"), mem(1000), "a").unwrap();
}

/// Dropping a coflow with no piece here leaves every piece as it was; dropping one removes
/// exactly its pieces, from every client, and gives back exactly the memory they held.
#[test]
fn dropping_a_coflow_removes_exactly_its_pieces_and_their_memory() {
    let s = Store::new(1 << 20, 0);
    let id = |s: &str| DataId::new(s).unwrap();
    let mem = |n: usize| Piece::memory(vec![1; n], 1024);
    for (coflow, name, n, client) in
        [(1, "a", 10, "ann"), (1, "b", 0, "bob"), (1, "c", 2000, "ann"), (2, "a", 30, "bob"), (2, "d", 0, "cy")]
    {
        s.keep(CoflowId(coflow), id(name), mem(n), client).unwrap();
    }
    let (kept_bob, kept_cy) = (cost(30, 1024, "a", "bob"), cost(0, 1024, "d", "cy"));
    let before = s.usage();
    assert_eq!(s.drop_coflow(CoflowId(7)), 0);
    assert_eq!(s.usage(), before, "a coflow with no piece here frees nothing");
    assert!(s.is_dropped(CoflowId(7)), "a coflow with no piece here is still refused from now on");
    assert_eq!(s.drop_coflow(CoflowId(1)), 3);
    assert_eq!(
        s.usage(),
        Usage { pieces: 2, bytes: 30, memory: kept_bob + kept_cy, largest_client: kept_bob },
        "exactly coflow 1's pieces and memory are gone"
    );
    for name in ["a", "b", "c"] {
        assert!(s.get(CoflowId(1), &id(name)).is_none(), "{name}");
    }
    assert_eq!(s.get(CoflowId(2), &id("a")).map(|p| p.len()), Some(30));
    let mut listed: Vec<_> = s.list().into_iter().map(|(c, d, n, ..)| (c.0, d.as_str().to_string(), n)).collect();
    listed.sort();
    assert_eq!(listed, [(2, "a".to_string(), 30), (2, "d".to_string(), 0)]);
    // Its names are not held: the same names in another coflow are stored afresh.
    s.keep(CoflowId(3), id("a"), mem(10), "ann").unwrap();
    assert_eq!(s.drop_coflow(CoflowId(2)), 2);
    assert_eq!(s.drop_coflow(CoflowId(3)), 1);
    assert_eq!(s.usage(), Usage::default());
}

/// A seal is kept for the coflow's pieces, also when it comes before the piece its put
/// announced, and goes with the coflow; a dropped coflow is not sealed again.
#[test]
fn a_seal_is_listed_with_its_coflow_s_pieces_until_the_coflow_is_dropped() {
    let s = Store::new(1 << 20, 0);
    let id = |s: &str| DataId::new(s).unwrap();
    let sealed = |s: &Store| {
        let mut l: Vec<_> =
            s.list().into_iter().map(|(c, d, .., sealed)| (c.0, d.as_str().to_string(), sealed)).collect();
        l.sort();
        l
    };
    s.keep(CoflowId(1), id("a"), Piece::memory(vec![1; 10], 1024), "").unwrap();
    s.seal(CoflowId(2));
    s.keep(CoflowId(2), id("b"), Piece::memory(vec![2; 10], 1024), "").unwrap();
    assert_eq!(sealed(&s), [(1, "a".to_string(), false), (2, "b".to_string(), true)]);
    s.seal(CoflowId(1));
    assert_eq!(sealed(&s), [(1, "a".to_string(), true), (2, "b".to_string(), true)]);
    assert_eq!(s.drop_coflow(CoflowId(1)), 1);
    s.seal(CoflowId(1));
    assert!(!s.inner.lock().unwrap().sealed.contains(&CoflowId(1)), "a dropped coflow is not kept sealed");
    assert_eq!(sealed(&s), [(2, "b".to_string(), true)]);
}

/// Dropping a coflow looks at its own pieces only: every agent is told of every coflow
/// unregistered in the cluster, so the work must not grow with what else the agent holds.
#[test]
fn dropping_a_coflow_looks_at_its_own_pieces_only() {
    let s = Store::new(u64::MAX, 0);
    for i in 0..10_000 {
        s.keep(CoflowId(1), DataId::new(format!("p{i}")).unwrap(), Piece::memory(Vec::new(), 1024), "").unwrap();
    }
    for i in 0..3 {
        s.keep(CoflowId(3), DataId::new(format!("p{i}")).unwrap(), Piece::memory(vec![1], 1024), "").unwrap();
    }
    let visited = || s.inner.lock().unwrap().visited;
    for absent in 100..1100 {
        assert_eq!(s.drop_coflow(CoflowId(absent)), 0);
    }
    assert_eq!(visited(), 0, "1,000 coflows with no piece here looked at no piece");
    assert_eq!(s.drop_coflow(CoflowId(3)), 3);
    assert_eq!(visited(), 3, "a coflow's drop looked at its own pieces only");
    assert_eq!(s.usage().pieces, 10_000);
}

/// Pieces of no bytes are charged their bookkeeping: a flood of them, with the longest names,
/// is refused `limit-exceeded` once their cost fills `max_stored_bytes`, at the piece the
/// arithmetic says, and a client's flood once it fills that client's bound.
#[test]
fn a_flood_of_empty_pieces_is_refused_at_the_memory_limit() {
    let name = |i: usize| DataId::new(format!("{i:0>256}")).unwrap();
    let each = cost(0, 1024, &"0".repeat(256), "tenant");
    assert_eq!(each, 256 + 6 + PIECE_OVERHEAD_BYTES);
    let limit = 1 << 20;
    let s = Store::new(limit, 0);
    let mut stored = 0;
    let e = loop {
        match s.keep(CoflowId(1), name(stored), Piece::memory(Vec::new(), 1024), "tenant") {
            Ok(()) => stored += 1,
            Err(e) => break e,
        }
        assert!(stored <= 1 << 20, "a million empty pieces were all taken");
    };
    assert!(matches!(&e, AgentError::LimitExceeded(m) if m.contains("max_stored_bytes")), "{e}");
    assert_eq!(stored as u64, limit / each);
    assert_eq!(
        s.usage(),
        Usage { pieces: stored, bytes: 0, memory: stored as u64 * each, largest_client: stored as u64 * each }
    );
    // A stream of no bytes is charged as well.
    assert!(matches!(s.reserve(CoflowId(1), &name(stored), 0, "tenant", 1024), Err(AgentError::LimitExceeded(_))));
    // Dropped, they give it all back.
    assert_eq!(s.drop_coflow(CoflowId(1)), stored);
    assert_eq!(s.usage(), Usage::default());

    let per_client = Store::new(u64::MAX, 10 * each);
    for i in 0..10 {
        per_client.keep(CoflowId(1), name(i), Piece::memory(Vec::new(), 1024), "tenant").unwrap();
    }
    let e = per_client.keep(CoflowId(1), name(10), Piece::memory(Vec::new(), 1024), "tenant").unwrap_err();
    assert!(matches!(&e, AgentError::LimitExceeded(m) if m.contains("max_stored_bytes_per_client")), "{e}");
    per_client.keep(CoflowId(1), name(10), Piece::memory(Vec::new(), 1024), "other").unwrap();
}

/// A file segment holds no bytes in memory, but its name, path and CRC table are charged.
#[test]
fn a_file_segment_is_charged_its_bookkeeping() {
    let (_guard, base) = scratch("charge");
    let dir = base.join("data");
    std::fs::write(dir.join("sub/out"), vec![5; 4096]).unwrap();
    let s = Store::new(1 << 20, 0);
    let piece = file_piece(&dir, None, "sub/out", 0, 4096, 1024).unwrap();
    s.keep(CoflowId(1), DataId::new("f").unwrap(), piece, "c").unwrap();
    let expect = cost(0, 1024, "f", "c") + 4 * 4 + "sub/out".len() as u64;
    assert_eq!(s.usage(), Usage { pieces: 1, bytes: 4096, memory: expect, largest_client: expect });
}
