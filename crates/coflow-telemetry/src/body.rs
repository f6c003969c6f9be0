//! Large response bodies, bounded in number and one per peer group: a body holds its place
//! until the connection has taken its last piece or dropped it, so that peers that ask and never
//! read cannot make the service hold more than a few copies of a large page, and one peer cannot
//! take every place.

use std::collections::HashSet;
use std::convert::Infallible;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};

use hyper::body::{Bytes, Frame, SizeHint};

/// The most bytes of a large body handed to the connection at once, each a copy: the
/// connection buffers at most one such piece past [`crate::WRITE_BUFFER`], never the whole
/// body, so the body's memory goes when its place does.
const PIECE: usize = 64 * 1024;

/// At most a fixed number of large bodies alive at once, at most one per peer group
/// ([`crate::Peer::group`]).
#[derive(Clone, Debug)]
pub struct Bodies {
    most: usize,
    held: Arc<Mutex<HashSet<IpAddr>>>,
}

/// A place for one large body, taken from [`Bodies`]; given back when the body it becomes is
/// done (or when dropped unused).
#[derive(Debug)]
pub struct BodyPlace {
    group: IpAddr,
    bodies: Bodies,
}

impl Bodies {
    /// At most `most` bodies alive at once, one per peer group.
    pub fn new(most: usize) -> Bodies {
        Bodies { most, held: Arc::default() }
    }

    /// The groups holding a place, also after a panic elsewhere while they were locked.
    fn lock(&self) -> MutexGuard<'_, HashSet<IpAddr>> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A place for one more body for a peer of `group`, or `None` while the most are alive or
    /// `group` holds one.
    pub fn try_take(&self, group: IpAddr) -> Option<BodyPlace> {
        let mut held = self.lock();
        (held.len() < self.most && held.insert(group)).then(|| BodyPlace { group, bodies: self.clone() })
    }

    /// How many places are free.
    pub fn free(&self) -> usize {
        self.most - self.lock().len()
    }
}

impl Drop for BodyPlace {
    fn drop(&mut self) {
        self.bodies.lock().remove(&self.group);
    }
}

impl BodyPlace {
    /// `bytes` as a response body that holds this place until the connection has taken its
    /// last piece or dropped it.
    pub fn body(self, bytes: Bytes) -> axum::body::Body {
        axum::body::Body::new(Placed { rest: bytes, _place: self })
    }
}

/// A body handed out in copied pieces, holding its place.
struct Placed {
    rest: Bytes,
    _place: BodyPlace,
}

impl hyper::body::Body for Placed {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if self.rest.is_empty() {
            return Poll::Ready(None);
        }
        let n = PIECE.min(self.rest.len());
        let piece = Bytes::copy_from_slice(&self.rest[..n]);
        self.rest = self.rest.slice(n..);
        Poll::Ready(Some(Ok(Frame::data(piece))))
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.rest.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::body::Body as _;

    #[test]
    fn a_body_holds_its_place_until_its_last_piece_is_taken() {
        let bodies = Bodies::new(1);
        let place = bodies.try_take(ONE).expect("a place");
        assert!(bodies.try_take(TWO).is_none(), "the one place is taken");
        let mut body = Placed { rest: Bytes::from(vec![7u8; PIECE + 1]), _place: place };
        assert_eq!(body.size_hint().exact(), Some(PIECE as u64 + 1));
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        let mut got = Vec::new();
        while let Poll::Ready(Some(Ok(frame))) = Pin::new(&mut body).poll_frame(&mut cx) {
            got.push(frame.into_data().expect("data").len());
        }
        assert_eq!(got, [PIECE, 1]);
        assert!(body.is_end_stream());
        assert_eq!(bodies.free(), 0, "held until the connection drops the body");
        drop(body);
        assert_eq!(bodies.free(), 1);
        drop(bodies.try_take(TWO).expect("back"));
        assert_eq!(bodies.free(), 1, "a place dropped unused comes back");
    }

    const ONE: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 1));
    const TWO: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 2));

    #[test]
    fn a_group_holds_one_place_and_the_others_stay_free() {
        let bodies = Bodies::new(4);
        let first = bodies.try_take(ONE).expect("a place");
        assert!(bodies.try_take(ONE).is_none(), "one place a group");
        let other = bodies.try_take(TWO).expect("another group gets one");
        assert_eq!(bodies.free(), 2);
        drop(first);
        drop(bodies.try_take(ONE).expect("back once given back"));
        drop(other);
        assert_eq!(bodies.free(), 4);
        // Usable after a panic while locked.
        let b = bodies.clone();
        let poisoned = std::thread::spawn(move || {
            let _held = b.lock();
            panic!("a bug while locked");
        });
        assert!(poisoned.join().is_err());
        drop(bodies.try_take(ONE).expect("a place after a panic"));
        assert_eq!(bodies.free(), 4);
    }
}
