//! What a service holds of requests it has not received whole ([`Reception`]): gRPC buffers a
//! message until its last byte comes, before any check of the service runs, so a peer that
//! states a large message (up to the service's decoding limit: 8 MiB at an agent) and holds
//! back its last byte would hold that memory for as long as it keeps the call open, once per
//! call; a call whose request never comes holds its stream's state (a few KiB) as long; and a
//! holder may open calls on many connections. Here every request body is read through a
//! count, against its holder (a certificate's role with TLS, an address group in token mode):
//! - of the bytes of its message in progress: a holder holds at most
//!   [`MAX_RECEIVING_PER_HOLDER`] of them at once and all holders together [`MAX_RECEIVING`],
//!   each message's bytes counted only until it is whole;
//! - of the request bodies open (a unary call's until its message came, a stream's until it
//!   ends): at most [`MAX_OPEN_REQUESTS_PER_HOLDER`] a holder, [`MAX_OPEN_REQUESTS`] in all.
//!
//! A call that would pass a bound fails at once with `limit-exceeded`.

use std::collections::HashMap;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use http_body::Frame;
use tonic::codegen::Bytes;
use tonic::codegen::http::Request;
use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};

use crate::ErrorKind;

/// The most bytes of messages not yet whole that one holder's calls hold at a service at once:
/// 32 messages of an agent's largest (8 MiB).
pub const MAX_RECEIVING_PER_HOLDER: usize = 256 << 20;

/// The most bytes of messages not yet whole that a service holds at once, over every holder.
pub const MAX_RECEIVING: usize = 1 << 30;

/// The most request bodies one holder's calls keep open at a service at once.
pub const MAX_OPEN_REQUESTS_PER_HOLDER: usize = 4096;

/// The most request bodies a service keeps open at once, over every holder.
pub const MAX_OPEN_REQUESTS: usize = 65_536;

/// Who a call's bytes are counted against.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Holder {
    /// With TLS, a certificate's role URI (a member, whatever its address).
    Member(String),
    /// In token mode, or a certificate without a role, the peer's address group.
    Address(IpAddr),
    /// A connection without a peer address (never over TCP).
    Unknown,
}

impl Holder {
    fn of<B>(req: &Request<B>) -> Holder {
        let ext = req.extensions();
        if let Some(tls) = ext.get::<TlsConnectInfo<TcpConnectInfo>>() {
            let certs = tls.peer_certs();
            if let Some(role) = crate::peer_role(certs.as_deref().map(|c| c.as_slice())) {
                return Holder::Member(role.to_string());
            }
            return tls.get_ref().remote_addr().map_or(Holder::Unknown, |a| Holder::Address(crate::peer_group(a.ip())));
        }
        match ext.get::<TcpConnectInfo>().and_then(|i| i.remote_addr()) {
            Some(a) => Holder::Address(crate::peer_group(a.ip())),
            None => Holder::Unknown,
        }
    }
}

/// The bytes of messages in progress a service holds, and the request bodies it keeps open, in
/// all and by holder.
#[derive(Debug, Default)]
struct Counts {
    all: usize,
    by: HashMap<Holder, usize>,
    open: usize,
    open_by: HashMap<Holder, usize>,
}

/// One service's count of the bytes of messages it is receiving and has not received whole,
/// bounded per holder and in all.
#[derive(Debug)]
struct Budget {
    counts: Mutex<Counts>,
    per_holder: usize,
    all: usize,
}

impl Budget {
    /// Opens a request body of `holder`'s, or says why it may not.
    fn open(&self, holder: &Holder) -> Result<(), tonic::Status> {
        let mut c = self.counts.lock().expect("reception lock");
        let held = c.open_by.get(holder).copied().unwrap_or(0);
        let why = if held >= MAX_OPEN_REQUESTS_PER_HOLDER {
            format!("this peer keeps {held} requests open, at most {MAX_OPEN_REQUESTS_PER_HOLDER} may")
        } else if c.open >= MAX_OPEN_REQUESTS {
            format!("calls keep {} requests open, at most {MAX_OPEN_REQUESTS} may", c.open)
        } else {
            c.open += 1;
            *c.open_by.entry(holder.clone()).or_default() += 1;
            return Ok(());
        };
        Err(ErrorKind::LimitExceeded.status(tonic::Code::ResourceExhausted, why))
    }

    /// Closes a request body of `holder`'s.
    fn close(&self, holder: &Holder) {
        let mut c = self.counts.lock().expect("reception lock");
        c.open -= 1;
        let held = c.open_by.get_mut(holder).expect("a holder with a request open is counted");
        *held -= 1;
        if *held == 0 {
            c.open_by.remove(holder);
        }
    }

    /// Counts `more` bytes against `holder`, or says why it may not.
    fn take(&self, holder: &Holder, more: usize) -> Result<(), tonic::Status> {
        let mut c = self.counts.lock().expect("reception lock");
        let held = c.by.get(holder).copied().unwrap_or(0);
        let why = if held + more > self.per_holder {
            format!("this peer's calls hold {held} bytes of messages not yet whole, at most {} may", self.per_holder)
        } else if c.all + more > self.all {
            format!("calls hold {} bytes of messages not yet whole, at most {} may", c.all, self.all)
        } else {
            c.all += more;
            *c.by.entry(holder.clone()).or_default() += more;
            return Ok(());
        };
        Err(ErrorKind::LimitExceeded.status(tonic::Code::ResourceExhausted, why))
    }

    /// Gives back `less` bytes `holder` held.
    fn give(&self, holder: &Holder, less: usize) {
        if less == 0 {
            return;
        }
        let mut c = self.counts.lock().expect("reception lock");
        c.all -= less;
        let held = c.by.get_mut(holder).expect("a holder that holds bytes is counted");
        *held -= less;
        if *held == 0 {
            c.by.remove(holder);
        }
    }
}

/// A service whose request bodies are read through a count of the bytes of their message in
/// progress (see the module's doc); wraps a service as [`crate::TypedErrors`] does.
#[derive(Clone, Debug)]
pub struct Reception<S> {
    inner: S,
    budget: Arc<Budget>,
}

impl<S> Reception<S> {
    /// `inner`, bounded by [`MAX_RECEIVING_PER_HOLDER`] and [`MAX_RECEIVING`].
    pub fn new(inner: S) -> Reception<S> {
        Reception::with_bounds(inner, MAX_RECEIVING_PER_HOLDER, MAX_RECEIVING)
    }

    /// `inner`, counted within the same bounds as this service (another service on its
    /// listener, such as gRPC health).
    pub fn beside<T>(&self, inner: T) -> Reception<T> {
        Reception { inner, budget: self.budget.clone() }
    }

    /// `inner`, bounded by `per_holder` bytes a holder and `all` bytes in all.
    pub fn with_bounds(inner: S, per_holder: usize, all: usize) -> Reception<S> {
        let counts = Mutex::new(Counts::default());
        Reception { inner, budget: Arc::new(Budget { counts, per_holder, all }) }
    }
}

impl<S> tonic::codegen::Service<Request<tonic::body::Body>> for Reception<S>
where
    S: tonic::codegen::Service<Request<tonic::body::Body>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<tonic::body::Body>) -> Self::Future {
        let holder = Holder::of(&req);
        let budget = self.budget.clone();
        let refused = budget.open(&holder).err();
        let req = req.map(|body| {
            let frame = Framing::default();
            tonic::body::Body::new(Counted { body, budget, holder, frame, held: 0, refused, done: false })
        });
        self.inner.call(req)
    }
}

impl<S: tonic::server::NamedService> tonic::server::NamedService for Reception<S> {
    const NAME: &'static str = S::NAME;
}

/// Where a body stands in gRPC's framing: each message is a flag byte, a length (u32,
/// big-endian) and that many bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Framing {
    /// The bytes of the message's 5-byte prefix read so far (0 between messages).
    prefix: usize,
    /// The length the prefix states, as far as read.
    len: u32,
    /// The bytes of the message's body still to come, once its prefix is whole.
    left: u32,
}

impl Framing {
    /// Moves over `bytes`; returns the bytes of the message left in progress at their end
    /// (0 if they end where a message does).
    fn advance(&mut self, mut bytes: &[u8]) -> usize {
        while !bytes.is_empty() {
            if self.prefix < 5 {
                if self.prefix > 0 {
                    self.len = (self.len << 8) | u32::from(bytes[0]);
                }
                self.prefix += 1;
                bytes = &bytes[1..];
                if self.prefix == 5 {
                    self.left = self.len;
                    if self.left == 0 {
                        *self = Framing::default();
                    }
                }
                continue;
            }
            let n = bytes.len().min(self.left as usize);
            self.left -= n as u32;
            bytes = &bytes[n..];
            if self.left == 0 {
                *self = Framing::default();
            }
        }
        self.in_progress()
    }

    /// The bytes of the message in progress received so far.
    fn in_progress(&self) -> usize {
        if self.prefix < 5 { self.prefix } else { 5 + (self.len - self.left) as usize }
    }
}

/// A request body whose message in progress is counted against its holder.
struct Counted {
    body: tonic::body::Body,
    budget: Arc<Budget>,
    holder: Holder,
    frame: Framing,
    /// The bytes counted for it.
    held: usize,
    /// Why it could not be opened, if it could not: its first read fails with that (it holds no
    /// place among its holder's open requests).
    refused: Option<tonic::Status>,
    /// Whether it was refused and said so: it reads as ended from then on.
    done: bool,
}

impl http_body::Body for Counted {
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, tonic::Status>>> {
        let this = &mut *self;
        if this.done {
            return Poll::Ready(None);
        }
        if let Some(why) = this.refused.take() {
            this.done = true;
            return Poll::Ready(Some(Err(why)));
        }
        let frame = match Pin::new(&mut this.body).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => frame,
            other => return other,
        };
        if let Some(data) = frame.data_ref() {
            let now = this.frame.advance(data);
            if now > this.held {
                this.budget.take(&this.holder, now - this.held)?;
            } else {
                this.budget.give(&this.holder, this.held - now);
            }
            this.held = now;
        }
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.budget.give(&self.holder, self.held);
        if self.refused.is_none() && !self.done {
            self.budget.close(&self.holder);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(len: u32) -> Vec<u8> {
        let mut m = vec![0];
        m.extend_from_slice(&len.to_be_bytes());
        m.resize(5 + len as usize, 7);
        m
    }

    /// Split anywhere, the framing finds where each message ends: bytes in progress are those of
    /// the unfinished message only.
    #[test]
    fn the_bytes_in_progress_are_those_of_the_unfinished_message() {
        let mut all = message(3);
        all.extend(message(0));
        all.extend(message(10));
        for cut in 0..=all.len() {
            let mut f = Framing::default();
            let first = f.advance(&all[..cut]);
            let want = match cut {
                0..=7 => cut,
                8..=12 => cut - 8,
                13..=27 => cut - 13,
                _ => 0,
            };
            assert_eq!(first, want, "cut at {cut}");
            assert_eq!(f.advance(&all[cut..]), 0, "whole after the rest, cut at {cut}");
        }
    }

    /// A holder holds at most its share, all holders at most the whole; what is given back may be
    /// taken again.
    #[test]
    fn a_holder_holds_its_share_and_all_the_whole() {
        let b = Budget { counts: Mutex::new(Counts::default()), per_holder: 10, all: 15 };
        let (a, c) = (Holder::Member("coflow://client/a".into()), Holder::Member("coflow://client/c".into()));
        b.take(&a, 10).unwrap();
        let e = b.take(&a, 1).unwrap_err();
        assert_eq!(e.code(), tonic::Code::ResourceExhausted);
        assert_eq!(e.metadata().get(crate::ERROR_KIND).unwrap(), "limit-exceeded");
        b.take(&c, 5).unwrap();
        assert!(b.take(&c, 1).is_err(), "the whole is held");
        b.give(&a, 10);
        b.take(&c, 5).unwrap();
        b.give(&c, 10);
        let counts = b.counts.lock().unwrap();
        assert_eq!((counts.all, counts.by.len()), (0, 0));
    }

    /// A holder keeps at most its number of requests open; one closed makes room for another.
    #[test]
    fn a_holder_keeps_at_most_its_number_of_requests_open() {
        let b = Budget { counts: Mutex::new(Counts::default()), per_holder: 10, all: 15 };
        let (a, c) = (Holder::Address([10, 0, 0, 1].into()), Holder::Address([10, 0, 0, 2].into()));
        for _ in 0..MAX_OPEN_REQUESTS_PER_HOLDER {
            b.open(&a).unwrap();
        }
        let e = b.open(&a).unwrap_err();
        assert_eq!(e.metadata().get(crate::ERROR_KIND).unwrap(), "limit-exceeded");
        b.open(&c).unwrap();
        b.close(&a);
        b.open(&a).unwrap();
        for _ in 0..MAX_OPEN_REQUESTS_PER_HOLDER {
            b.close(&a);
        }
        b.close(&c);
        let counts = b.counts.lock().unwrap();
        assert_eq!((counts.open, counts.open_by.len()), (0, 0));
    }
}
