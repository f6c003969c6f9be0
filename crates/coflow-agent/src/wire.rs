//! The data plane's wire format as a pure codec: messages are encoded into and decoded from byte
//! buffers, so that every case (a split at any byte, garbage, a frame too long) is tested without
//! a socket; the async shell in `data` only moves bytes between a socket and these functions.
//!
//! One connection carries one fetch at a time, and fetches one after another (the receiver keeps
//! a warm connection per source and reuses it):
//! - **Request** (receiver to source): magic `CFD5`, token length (u16) and token (empty with
//!   TLS, where it is not checked), coflow id (u64), flow id (u64), the receiving machine (u32),
//!   the flow's ticket (16 bytes, the capability the coordinator granted the receiver), data id
//!   length (u16) and data id (UTF-8), the range of the piece wanted: offset (u64) and length
//!   (u64), and a hop flag (u8): 0, or 1 followed by the source the agent asked is to relay
//!   from: its machine (u32), its data address (u16 length, UTF-8) and its ticket (16 bytes,
//!   naming the relay); integers big-endian.
//! - A ticket names its flow's range and, at a relay, the hop's source machine and address, so
//!   that a request for another range, or naming a hop the grant does not, is denied before the
//!   agent asked connects anywhere. A relay (an agent asked with a hop) checks the request's
//!   ticket as a source does (it names the receiver, under the relay's own key), fetches the
//!   range from the source with the hop's ticket, and forwards the source's response head and
//!   frames as they arrive.
//! - A refusal (any status but [`Status::Ok`]) carries a size of 0: it never tells whether the
//!   piece exists, nor how large it is.
//! - **Response head** (source to receiver): a status byte ([`Status`]) and the piece's size
//!   (u64). After [`Status::Ok`], frames follow until the piece's bytes are all sent; then the
//!   connection waits for the next request. After [`Status::Unreachable`] (from a relay) one
//!   error frame follows, saying why; after any other status the source closes it.
//! - **Frames**: `D`, length (u32), that many bytes, their CRC-32 (u32): one block of the piece;
//!   `K`: a keepalive, sent while a flow waits (rate zero, or tokens), so that silence means a
//!   frozen source; `E`, a code (u8) and a message (u16 length, UTF-8), after which the
//!   connection ends: [`Status::DataLost`], the source's stored copy changed or cannot be read;
//!   [`Status::Unreachable`], a relay could not reach the source or lost it (the message says
//!   why), so that the receiver blames the source, not the relay. A receiver that does not know
//!   a code (an older one) fails the fetch as corrupted: an unknown status or error frame is
//!   never taken for bytes.

use coflow_core::{CoflowId, FlowId, MachineId};
use coflow_proto::ticket::{TICKET_LEN, Ticket};
use coflow_proto::{DataId, MAX_DATA_ID_LEN};

/// The request's magic, which names the protocol's version.
pub(crate) const MAGIC: &[u8; 4] = b"CFD5";

/// The longest data address a hop names.
pub(crate) const MAX_ADDR_LEN: usize = 256;

/// The longest token a request may carry.
pub(crate) const MAX_TOKEN_LEN: usize = 512;

/// The largest data frame accepted (the largest `chunk_bytes`).
pub(crate) const MAX_FRAME: u32 = 4 << 20;

/// The longest message an error frame carries.
pub(crate) const MAX_ERROR_LEN: usize = 1024;

/// The size of a response head.
pub(crate) const HEAD_LEN: usize = 9;

const FRAME_DATA: u8 = b'D';
const FRAME_KEEPALIVE: u8 = b'K';
const FRAME_ERROR: u8 = b'E';

/// A response's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Status {
    /// The piece follows.
    Ok = 0,
    /// The request's cluster token is wrong.
    BadToken = 1,
    /// The source holds no such piece.
    NoPiece = 2,
    /// The request is malformed.
    BadRequest = 3,
    /// The source serves its `max_data_connections` already (size 0), or this peer's share of
    /// them, `max_data_connections_per_peer` (the share in the size).
    Busy = 4,
    /// The source's stored copy cannot be read (in an error frame).
    DataLost = 5,
    /// The request's ticket is not the flow's, the flow is attached already, or (with TLS) the
    /// requester is not the receiving agent the ticket names.
    Denied = 6,
    /// A relay could not reach the source it was asked to relay from, or lost it mid-transfer:
    /// in a head (size 0) followed by an error frame of this code, or in an error frame in place
    /// of the next frame; the message says why.
    Unreachable = 7,
}

impl Status {
    fn from_byte(b: u8) -> Option<Status> {
        Some(match b {
            0 => Status::Ok,
            1 => Status::BadToken,
            2 => Status::NoPiece,
            3 => Status::BadRequest,
            4 => Status::Busy,
            5 => Status::DataLost,
            6 => Status::Denied,
            7 => Status::Unreachable,
            _ => return None,
        })
    }
}

/// What is wrong with bytes received.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum WireError {
    /// A request without the magic of this protocol.
    #[error("not a coflow data request (bad magic)")]
    BadMagic,
    /// A length field beyond its bound.
    #[error("{field} of {len} bytes is over the limit of {max}")]
    TooLong {
        /// The field.
        field: &'static str,
        /// Its length.
        len: u64,
        /// Its bound.
        max: u64,
    },
    /// A data id that is not valid UTF-8 or not a valid id.
    #[error("bad data id: {0}")]
    BadDataId(String),
    /// A status byte that names no status.
    #[error("unknown status {0}")]
    UnknownStatus(u8),
    /// A frame type that names no frame.
    #[error("unknown frame type {0}")]
    UnknownFrame(u8),
    /// A hop flag that is neither 0 nor 1, or a hop address that is not UTF-8.
    #[error("bad hop: {0}")]
    BadHop(String),
    /// A data frame of no bytes, or of more bytes than the piece has left.
    #[error("a frame of {len} bytes with {left} to go")]
    BadFrameLength {
        /// The frame's length.
        len: u32,
        /// What the piece has left.
        left: u64,
    },
}

/// A fetch request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Request {
    /// The cluster token (empty with TLS).
    pub(crate) token: Vec<u8>,
    /// The piece's coflow.
    pub(crate) coflow: CoflowId,
    /// The flow the coordinator granted.
    pub(crate) flow: FlowId,
    /// The receiving machine, as the grant names it.
    pub(crate) dst: MachineId,
    /// The flow's ticket, from the grant.
    pub(crate) ticket: Ticket,
    /// The piece.
    pub(crate) data_id: DataId,
    /// The first byte of the piece wanted.
    pub(crate) offset: u64,
    /// How many bytes from there.
    pub(crate) length: u64,
    /// The source to relay from, when the agent asked is a relay.
    pub(crate) via: Option<Hop>,
}

/// The next hop of a relayed request: the source the relay fetches from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Hop {
    /// The source's machine.
    pub(crate) src: MachineId,
    /// Its data address.
    pub(crate) addr: String,
    /// The source's ticket for the flow, naming the relay.
    pub(crate) ticket: Ticket,
}

/// Reads a big-endian integer of `N` bytes at `at`, if the buffer has it.
fn be<const N: usize>(buf: &[u8], at: usize) -> Option<[u8; N]> {
    buf.get(at..at + N).map(|b| b.try_into().expect("N bytes"))
}

impl Request {
    /// Appends the request to `out`.
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        assert!(self.token.len() <= MAX_TOKEN_LEN, "tokens are validated at load");
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&(self.token.len() as u16).to_be_bytes());
        out.extend_from_slice(&self.token);
        out.extend_from_slice(&self.coflow.0.to_be_bytes());
        out.extend_from_slice(&self.flow.0.to_be_bytes());
        out.extend_from_slice(&self.dst.0.to_be_bytes());
        out.extend_from_slice(&self.ticket);
        let id = self.data_id.as_str().as_bytes();
        out.extend_from_slice(&(id.len() as u16).to_be_bytes());
        out.extend_from_slice(id);
        out.extend_from_slice(&self.offset.to_be_bytes());
        out.extend_from_slice(&self.length.to_be_bytes());
        match &self.via {
            None => out.push(0),
            Some(hop) => {
                assert!(hop.addr.len() <= MAX_ADDR_LEN, "addresses come from the coordinator's grant, checked");
                out.push(1);
                out.extend_from_slice(&hop.src.0.to_be_bytes());
                out.extend_from_slice(&(hop.addr.len() as u16).to_be_bytes());
                out.extend_from_slice(hop.addr.as_bytes());
                out.extend_from_slice(&hop.ticket);
            }
        }
    }

    /// A request from the start of `buf` and its length, `None` if `buf` holds only part of one.
    /// A malformed request is an error as soon as its bytes show it, whatever follows.
    pub(crate) fn decode(buf: &[u8]) -> Result<Option<(Request, usize)>, WireError> {
        let magic = &buf[..buf.len().min(4)];
        if magic != &MAGIC[..magic.len()] {
            return Err(WireError::BadMagic);
        }
        let Some(tlen) = be::<2>(buf, 4).map(u16::from_be_bytes) else { return Ok(None) };
        let tlen = usize::from(tlen);
        if tlen > MAX_TOKEN_LEN {
            return Err(WireError::TooLong { field: "token", len: tlen as u64, max: MAX_TOKEN_LEN as u64 });
        }
        let mut at = 6 + tlen;
        let Some(coflow) = be::<8>(buf, at).map(u64::from_be_bytes) else { return Ok(None) };
        let Some(flow) = be::<8>(buf, at + 8).map(u64::from_be_bytes) else { return Ok(None) };
        let Some(dst) = be::<4>(buf, at + 16).map(u32::from_be_bytes) else { return Ok(None) };
        let Some(ticket) = be::<TICKET_LEN>(buf, at + 20) else { return Ok(None) };
        at += 20 + TICKET_LEN;
        let Some(dlen) = be::<2>(buf, at).map(u16::from_be_bytes) else { return Ok(None) };
        let dlen = usize::from(dlen);
        if dlen > MAX_DATA_ID_LEN {
            return Err(WireError::TooLong { field: "data id", len: dlen as u64, max: MAX_DATA_ID_LEN as u64 });
        }
        at += 2;
        let Some(id) = buf.get(at..at + dlen) else { return Ok(None) };
        let id = std::str::from_utf8(id).map_err(|e| WireError::BadDataId(e.to_string()))?;
        let data_id = DataId::new(id.to_string()).map_err(|e| WireError::BadDataId(e.to_string()))?;
        at += dlen;
        let Some(offset) = be::<8>(buf, at).map(u64::from_be_bytes) else { return Ok(None) };
        let Some(length) = be::<8>(buf, at + 8).map(u64::from_be_bytes) else { return Ok(None) };
        at += 16;
        let Some(&flag) = buf.get(at) else { return Ok(None) };
        at += 1;
        let via = match flag {
            0 => None,
            1 => {
                let Some(src) = be::<4>(buf, at).map(u32::from_be_bytes) else { return Ok(None) };
                let Some(alen) = be::<2>(buf, at + 4).map(u16::from_be_bytes) else { return Ok(None) };
                let alen = usize::from(alen);
                if alen > MAX_ADDR_LEN {
                    return Err(WireError::TooLong {
                        field: "hop address",
                        len: alen as u64,
                        max: MAX_ADDR_LEN as u64,
                    });
                }
                at += 6;
                let Some(addr) = buf.get(at..at + alen) else { return Ok(None) };
                let addr = std::str::from_utf8(addr).map_err(|e| WireError::BadHop(e.to_string()))?.to_string();
                at += alen;
                let Some(ticket) = be::<TICKET_LEN>(buf, at) else { return Ok(None) };
                at += TICKET_LEN;
                Some(Hop { src: MachineId(src), addr, ticket })
            }
            other => return Err(WireError::BadHop(format!("flag {other}"))),
        };
        let token = buf[6..6 + tlen].to_vec();
        let request = Request {
            token,
            coflow: CoflowId(coflow),
            flow: FlowId(flow),
            dst: MachineId(dst),
            ticket,
            data_id,
            offset,
            length,
            via,
        };
        Ok(Some((request, at)))
    }
}

/// A response head: the status and, after [`Status::Ok`], the piece's size.
pub(crate) fn encode_head(status: Status, size: u64) -> [u8; HEAD_LEN] {
    let mut head = [0u8; HEAD_LEN];
    head[0] = status as u8;
    head[1..].copy_from_slice(&size.to_be_bytes());
    head
}

/// The status and size of a response head.
pub(crate) fn decode_head(head: &[u8; HEAD_LEN]) -> Result<(Status, u64), WireError> {
    let status = Status::from_byte(head[0]).ok_or(WireError::UnknownStatus(head[0]))?;
    Ok((status, u64::from_be_bytes(head[1..].try_into().expect("8 bytes"))))
}

/// A frame, with a data frame's bytes borrowed from the buffer it was decoded from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Frame<'a> {
    /// A block of the piece and the CRC-32 the source sent with it (not checked here).
    Data {
        /// The block.
        bytes: &'a [u8],
        /// Its checksum as sent.
        crc: u32,
    },
    /// The flow waits.
    Keepalive,
    /// The source cannot send the piece.
    Error {
        /// Why, as a status.
        code: u8,
        /// What the source said.
        message: String,
    },
}

/// Appends a data frame of `block` to `out`.
pub(crate) fn encode_data(block: &[u8], crc: u32, out: &mut Vec<u8>) {
    assert!(!block.is_empty() && block.len() <= MAX_FRAME as usize, "blocks are sized at put");
    out.push(FRAME_DATA);
    out.extend_from_slice(&(block.len() as u32).to_be_bytes());
    out.extend_from_slice(block);
    out.extend_from_slice(&crc.to_be_bytes());
}

/// The keepalive frame.
pub(crate) const KEEPALIVE: [u8; 1] = [FRAME_KEEPALIVE];

/// Appends an error frame to `out`, its message cut at [`MAX_ERROR_LEN`] bytes (on a character
/// boundary).
pub(crate) fn encode_error(code: Status, message: &str, out: &mut Vec<u8>) {
    let mut end = message.len().min(MAX_ERROR_LEN);
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    out.push(FRAME_ERROR);
    out.push(code as u8);
    out.extend_from_slice(&(end as u16).to_be_bytes());
    out.extend_from_slice(&message.as_bytes()[..end]);
}

/// How many bytes a frame at the start of `buf` needs in all, once its header is there: the
/// shell reads until it has them. `None` if even the header is incomplete. `left` is what the
/// piece has left; a data frame longer, or empty, is an error.
pub(crate) fn frame_len(buf: &[u8], left: u64) -> Result<Option<usize>, WireError> {
    let Some(&kind) = buf.first() else { return Ok(None) };
    match kind {
        FRAME_KEEPALIVE => Ok(Some(1)),
        FRAME_ERROR => {
            let Some(len) = be::<2>(buf, 2).map(u16::from_be_bytes) else { return Ok(None) };
            let len = usize::from(len);
            if len > MAX_ERROR_LEN {
                return Err(WireError::TooLong { field: "error message", len: len as u64, max: MAX_ERROR_LEN as u64 });
            }
            Ok(Some(4 + len))
        }
        FRAME_DATA => {
            let Some(len) = be::<4>(buf, 1).map(u32::from_be_bytes) else { return Ok(None) };
            if len == 0 || len > MAX_FRAME || u64::from(len) > left {
                return Err(WireError::BadFrameLength { len, left });
            }
            Ok(Some(1 + 4 + len as usize + 4))
        }
        other => Err(WireError::UnknownFrame(other)),
    }
}

/// The frame at the start of `buf` and its length, `None` if `buf` holds only part of it.
pub(crate) fn decode_frame(buf: &[u8], left: u64) -> Result<Option<(Frame<'_>, usize)>, WireError> {
    let Some(len) = frame_len(buf, left)? else { return Ok(None) };
    if buf.len() < len {
        return Ok(None);
    }
    let frame = match buf[0] {
        FRAME_KEEPALIVE => Frame::Keepalive,
        FRAME_ERROR => Frame::Error { code: buf[1], message: String::from_utf8_lossy(&buf[4..len]).into_owned() },
        _ => {
            let crc = u32::from_be_bytes(buf[len - 4..len].try_into().expect("4 bytes"));
            Frame::Data { bytes: &buf[5..len - 4], crc }
        }
    };
    Ok(Some((frame, len)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> Request {
        Request {
            token: b"s3cret".to_vec(),
            coflow: CoflowId(7),
            flow: FlowId(u64::MAX - 1),
            dst: MachineId(3),
            ticket: [0xa5; TICKET_LEN],
            data_id: DataId::new("map-3/reduce-1").unwrap(),
            offset: 1 << 20,
            length: 3 << 20,
            via: None,
        }
    }

    fn relayed() -> Request {
        let hop = Hop { src: MachineId(9), addr: "10.0.0.9:7072".into(), ticket: [0x5a; TICKET_LEN] };
        Request { via: Some(hop), ..request() }
    }

    /// A relayed request round-trips too, and every prefix of it is incomplete; a bad hop flag
    /// or an address over its bound is an error at once.
    #[test]
    fn a_relayed_request_round_trips() {
        let mut bytes = Vec::new();
        relayed().encode(&mut bytes);
        let n = bytes.len();
        for cut in 0..n {
            assert_eq!(Request::decode(&bytes[..cut]), Ok(None), "prefix of {cut} bytes");
        }
        assert_eq!(Request::decode(&bytes), Ok(Some((relayed(), n))));
        let mut plain = Vec::new();
        request().encode(&mut plain);
        let flag = plain.len() - 1;
        plain[flag] = 7;
        assert!(matches!(Request::decode(&plain), Err(WireError::BadHop(_))));
        plain[flag] = 1;
        plain.extend_from_slice(&9u32.to_be_bytes());
        plain.extend_from_slice(&(MAX_ADDR_LEN as u16 + 1).to_be_bytes());
        assert!(matches!(Request::decode(&plain), Err(WireError::TooLong { field: "hop address", .. })));
    }

    /// A request decodes to itself from its encoding, and from every prefix of it to "not yet",
    /// whatever follows it.
    #[test]
    fn a_request_round_trips_and_every_prefix_is_incomplete() {
        let mut bytes = Vec::new();
        request().encode(&mut bytes);
        let n = bytes.len();
        for cut in 0..n {
            assert_eq!(Request::decode(&bytes[..cut]), Ok(None), "prefix of {cut} bytes");
        }
        bytes.extend_from_slice(b"next");
        assert_eq!(Request::decode(&bytes), Ok(Some((request(), n))));
    }

    #[test]
    fn malformed_requests_are_typed_errors_as_soon_as_they_show() {
        assert_eq!(Request::decode(b"GET / HTTP/1.1"), Err(WireError::BadMagic));
        assert_eq!(Request::decode(b"CFD4"), Err(WireError::BadMagic), "an older version");
        assert_eq!(Request::decode(b"X"), Err(WireError::BadMagic), "the first wrong byte suffices");
        let mut long_token = MAGIC.to_vec();
        long_token.extend_from_slice(&513u16.to_be_bytes());
        assert!(matches!(Request::decode(&long_token), Err(WireError::TooLong { field: "token", .. })));
        let mut bytes = Vec::new();
        Request { token: vec![], ..request() }.encode(&mut bytes);
        let at = 4 + 2 + 16 + 4 + TICKET_LEN;
        bytes[at..at + 2].copy_from_slice(&(MAX_DATA_ID_LEN as u16 + 1).to_be_bytes());
        assert!(matches!(Request::decode(&bytes[..at + 2]), Err(WireError::TooLong { field: "data id", .. })));
        // What follows the data id: offset, length, and the hop flag of a request without a hop.
        let tail = 8 + 8 + 1;
        let mut bad_id = Vec::new();
        Request { token: vec![], ..request() }.encode(&mut bad_id);
        let id_at = bad_id.len() - tail - "map-3/reduce-1".len();
        bad_id[id_at] = 0xff;
        assert!(matches!(Request::decode(&bad_id), Err(WireError::BadDataId(_))));
        let mut control = Vec::new();
        Request { token: vec![], data_id: DataId::new("ab").unwrap(), ..request() }.encode(&mut control);
        let n = control.len() - tail;
        control[n - 1] = 0x01;
        assert!(matches!(Request::decode(&control), Err(WireError::BadDataId(_))), "ids are validated");
        control.truncate(n - 4);
        control.extend_from_slice(&0u16.to_be_bytes());
        assert!(matches!(Request::decode(&control), Err(WireError::BadDataId(_))), "an empty id");
    }

    #[test]
    fn heads_round_trip_and_unknown_statuses_are_errors() {
        let all = [Status::Ok, Status::BadToken, Status::NoPiece, Status::BadRequest, Status::Busy];
        for s in all.into_iter().chain([Status::DataLost, Status::Denied, Status::Unreachable]) {
            assert_eq!(decode_head(&encode_head(s, 1 << 40)), Ok((s, 1 << 40)));
        }
        let mut head = encode_head(Status::Ok, 3);
        head[0] = 9;
        assert_eq!(decode_head(&head), Err(WireError::UnknownStatus(9)));
    }

    /// Frames decode from a stream of them cut anywhere: a decoder that reads as much as it can
    /// at each step sees exactly the frames that were sent.
    #[test]
    fn frames_round_trip_through_any_split() {
        let block = (0..300u32).map(|i| (i * 7) as u8).collect::<Vec<u8>>();
        let mut stream = Vec::new();
        encode_data(&block, crc32fast::hash(&block), &mut stream);
        stream.extend_from_slice(&KEEPALIVE);
        encode_data(&block[..5], 42, &mut stream);
        encode_error(Status::DataLost, "gone", &mut stream);
        let expected = vec![
            Frame::Data { bytes: &block[..], crc: crc32fast::hash(&block) },
            Frame::Keepalive,
            Frame::Data { bytes: &block[..5], crc: 42 },
            Frame::Error { code: Status::DataLost as u8, message: "gone".into() },
        ];
        for cut in 0..stream.len() {
            // The first `cut` bytes arrive, then the rest.
            let mut got = Vec::new();
            let mut at = 0;
            let mut seen = cut;
            loop {
                match decode_frame(&stream[at..seen], 1 << 20).unwrap() {
                    Some((f, n)) => {
                        got.push(f);
                        at += n;
                    }
                    None if seen < stream.len() => seen = stream.len(),
                    None => break,
                }
            }
            assert_eq!(got, expected, "cut at {cut}");
        }
    }

    #[test]
    fn bad_frames_are_typed_errors() {
        let mut one = Vec::new();
        encode_data(&[1, 2, 3], 0, &mut one);
        assert_eq!(decode_frame(&one, 2), Err(WireError::BadFrameLength { len: 3, left: 2 }), "longer than left");
        let mut empty = vec![FRAME_DATA];
        empty.extend_from_slice(&0u32.to_be_bytes());
        assert_eq!(decode_frame(&empty, 10), Err(WireError::BadFrameLength { len: 0, left: 10 }));
        let mut huge = vec![FRAME_DATA];
        huge.extend_from_slice(&(MAX_FRAME + 1).to_be_bytes());
        assert!(matches!(decode_frame(&huge, u64::MAX), Err(WireError::BadFrameLength { .. })));
        assert_eq!(decode_frame(b"Zxx", 10), Err(WireError::UnknownFrame(b'Z')));
        let mut long_error = vec![FRAME_ERROR, 5];
        long_error.extend_from_slice(&(MAX_ERROR_LEN as u16 + 1).to_be_bytes());
        assert!(matches!(decode_frame(&long_error, 10), Err(WireError::TooLong { .. })));
    }

    #[test]
    fn error_messages_are_cut_on_a_character_boundary() {
        let mut out = Vec::new();
        let message = "é".repeat(MAX_ERROR_LEN);
        encode_error(Status::DataLost, &message, &mut out);
        let (frame, n) = decode_frame(&out, 1).unwrap().unwrap();
        assert_eq!(n, out.len());
        let Frame::Error { message: got, .. } = frame else { panic!("{frame:?}") };
        assert_eq!(got.len(), MAX_ERROR_LEN);
        assert!(message.starts_with(&got));
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        fn any_request() -> impl Strategy<Value = Request> {
            (
                proptest::collection::vec(any::<u8>(), 0..=MAX_TOKEN_LEN),
                any::<u64>(),
                any::<u64>(),
                any::<u32>(),
                any::<[u8; TICKET_LEN]>(),
                "[a-zA-Z0-9_./-]{1,64}",
                (any::<u64>(), any::<u64>()),
                proptest::option::of((any::<u32>(), "[0-9a-z.:\\[\\]]{0,64}", any::<[u8; TICKET_LEN]>())),
            )
                .prop_map(|(token, coflow, flow, dst, ticket, id, (offset, length), via)| Request {
                    token,
                    coflow: CoflowId(coflow),
                    flow: FlowId(flow),
                    dst: MachineId(dst),
                    ticket,
                    data_id: DataId::new(id).unwrap(),
                    offset,
                    length,
                    via: via.map(|(src, addr, ticket)| Hop { src: MachineId(src), addr, ticket }),
                })
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(2000))]

            /// Every request decodes to itself, whatever follows it.
            #[test]
            fn any_request_round_trips(req in any_request(), tail in proptest::collection::vec(any::<u8>(), 0..16)) {
                let mut bytes = Vec::new();
                req.encode(&mut bytes);
                let n = bytes.len();
                bytes.extend_from_slice(&tail);
                prop_assert_eq!(Request::decode(&bytes), Ok(Some((req, n))));
            }

            /// Arbitrary bytes after the magic never panic the decoder; whatever it accepts
            /// encodes back to exactly the bytes it consumed.
            #[test]
            fn arbitrary_requests_decode_or_fail_cleanly(body in proptest::collection::vec(any::<u8>(), 0..700)) {
                let mut bytes = MAGIC.to_vec();
                bytes.extend_from_slice(&body);
                if let Ok(Some((req, n))) = Request::decode(&bytes) {
                    let mut again = Vec::new();
                    req.encode(&mut again);
                    prop_assert_eq!(&again[..], &bytes[..n]);
                }
            }

            /// Arbitrary bytes never panic the frame decoder; a frame it accepts lies within the
            /// bytes and, for data, within what the piece has left.
            #[test]
            fn arbitrary_frames_decode_or_fail_cleanly(bytes in proptest::collection::vec(any::<u8>(), 0..600), left in 0u64..1024) {
                if let Ok(Some((frame, n))) = decode_frame(&bytes, left) {
                    prop_assert!(n <= bytes.len());
                    if let Frame::Data { bytes: block, .. } = frame {
                        prop_assert!(!block.is_empty() && block.len() as u64 <= left);
                    }
                }
                if bytes.len() >= HEAD_LEN {
                    let head: [u8; HEAD_LEN] = bytes[..HEAD_LEN].try_into().unwrap();
                    if let Ok((status, size)) = decode_head(&head) {
                        prop_assert_eq!(encode_head(status, size), head);
                    }
                }
            }
        }
    }
}
