//! Large response bodies, bounded in number: a body holds its place until it has been handed
//! to the connection whole or the connection drops, so that peers that ask and never read
//! cannot make the service hold more than a few copies of a large page.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper::body::{Bytes, Frame, SizeHint};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The most bytes of a large body handed to the connection at once, each a copy: the
/// connection buffers a few such pieces (hyper's write buffer, about 400 KiB), never the whole
/// body, so the body's memory goes when its place does.
const PIECE: usize = 64 * 1024;

/// At most a fixed number of large bodies alive at once.
#[derive(Clone, Debug)]
pub struct Bodies {
    places: Arc<Semaphore>,
}

/// A place for one large body, taken from [`Bodies`]; given back when the body it becomes is
/// done (or when dropped unused).
#[derive(Debug)]
pub struct BodyPlace {
    _permit: OwnedSemaphorePermit,
}

impl Bodies {
    /// At most `most` bodies alive at once.
    pub fn new(most: usize) -> Bodies {
        Bodies { places: Arc::new(Semaphore::new(most)) }
    }

    /// A place for one more body, or `None` while the most are alive.
    pub fn try_take(&self) -> Option<BodyPlace> {
        self.places.clone().try_acquire_owned().ok().map(|p| BodyPlace { _permit: p })
    }

    /// How many places are free.
    pub fn free(&self) -> usize {
        self.places.available_permits()
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
        let place = bodies.try_take().expect("a place");
        assert!(bodies.try_take().is_none(), "the one place is taken");
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
        drop(bodies.try_take().expect("back"));
        assert_eq!(bodies.free(), 1, "a place dropped unused comes back");
    }
}
