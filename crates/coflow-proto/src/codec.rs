//! The codec of every gRPC call of both services ([`BoundedCodec`]): prost's, with each message's
//! bounds checked on its encoded bytes before it is decoded.
//!
//! Decoding amplifies: a packed parent id of one byte becomes an eight-byte `u64`, an empty
//! session message of two bytes a struct of hundreds, so a 4 MiB request within gRPC's message
//! limit could cost the coordinator hundreds of megabytes before any check on the decoded value
//! ran (two million empty messages in one session batch took it from 14 MB to 2.4 GB). Here a
//! control request is refused past 64 KiB, and a session batch past 4,096 messages, or with one
//! message other than a heartbeat past 64 KiB, or a heartbeat past 1,000,000 flows (reported or
//! unread): each with `limit-exceeded`, having cost only the bytes gRPC buffered; bytes that are
//! no such message are `invalid`. Messages a service does not
//! receive from others (answers, and what clients send agents, whose bytes decode one for one)
//! have no bounds of their own.

use std::marker::PhantomData;

use prost::Message;
use prost::bytes::Buf;
use tonic::Status;
use tonic::codec::{Codec, DecodeBuf, Decoder};
use tonic_prost::{ProstDecoder, ProstEncoder};

use crate::{ErrorKind, MAX_HEARTBEAT_FLOWS, pb};

/// The most bytes a control request (a registration, an agent's announcement) may take.
pub const MAX_REQUEST_BYTES: usize = 64 << 10;

/// The most messages one batch of an agent's session may carry (an agent sends at most 1,024).
pub const MAX_BATCH_MESSAGES: usize = 4096;

/// A message's bounds, checked on its encoding before it is decoded.
pub trait Bounded {
    /// Checks `bytes`, the message's encoding: a refusal is the caller's answer.
    fn check(bytes: &[u8]) -> Result<(), Status> {
        let _ = bytes;
        Ok(())
    }
}

/// Prost's codec, with [`Bounded::check`] before each message is decoded.
#[derive(Debug)]
pub struct BoundedCodec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for BoundedCodec<T, U> {
    fn default() -> Self {
        BoundedCodec(PhantomData)
    }
}

impl<T, U> Codec for BoundedCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Bounded + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = BoundedDecoder<U>;

    fn encoder(&mut self) -> ProstEncoder<T> {
        ProstEncoder::default()
    }

    fn decoder(&mut self) -> BoundedDecoder<U> {
        BoundedDecoder(ProstDecoder::default())
    }
}

/// Prost's decoder after [`Bounded::check`].
#[derive(Debug)]
pub struct BoundedDecoder<U>(ProstDecoder<U>);

impl<U: Message + Default + Bounded> Decoder for BoundedDecoder<U> {
    type Item = U;
    type Error = Status;

    /// Bytes that are no such message are `invalid` (prost's error alone is `INTERNAL`).
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        let malformed = |e: String| ErrorKind::Invalid.status(tonic::Code::InvalidArgument, e);
        if src.chunk().len() != src.remaining() {
            // Not contiguous (never, with tonic's buffers): checked on a copy.
            let bytes = src.copy_to_bytes(src.remaining());
            U::check(&bytes)?;
            return U::decode(bytes)
                .map(Some)
                .map_err(|e| malformed(format!("failed to decode Protobuf message: {e}")));
        }
        U::check(src.chunk())?;
        self.0
            .decode(src)
            .map_err(|s| if s.code() == tonic::Code::Internal { malformed(s.message().to_string()) } else { s })
    }
}

fn too_big(what: &str, len: usize, max: usize) -> Status {
    ErrorKind::LimitExceeded
        .status(tonic::Code::ResourceExhausted, format!("{what} of {len} bytes is more than the limit of {max}"))
}

/// Refuses a request past [`MAX_REQUEST_BYTES`].
fn small(what: &str, bytes: &[u8]) -> Result<(), Status> {
    if bytes.len() > MAX_REQUEST_BYTES { Err(too_big(what, bytes.len(), MAX_REQUEST_BYTES)) } else { Ok(()) }
}

/// The fields of an encoded message, each as its number and, for a length-delimited one, its
/// payload; `None` at the first malformed byte (prost's decoding then says what is wrong).
fn fields(mut b: &[u8]) -> impl Iterator<Item = Option<(u64, &[u8])>> {
    std::iter::from_fn(move || {
        if b.is_empty() {
            return None;
        }
        let step = (|| {
            let key = prost::encoding::decode_varint(&mut b).ok()?;
            let payload: &[u8] = match key & 7 {
                0 => {
                    prost::encoding::decode_varint(&mut b).ok()?;
                    &[]
                }
                1 => b.get(..8).map(|_| &[][..])?,
                2 => {
                    let len = usize::try_from(prost::encoding::decode_varint(&mut b).ok()?).ok()?;
                    b.get(..len)?
                }
                5 => b.get(..4).map(|_| &[][..])?,
                _ => return None,
            };
            let skip = match key & 7 {
                1 => 8,
                2 => payload.len(),
                5 => 4,
                _ => 0,
            };
            b = &b[skip..];
            Some((key >> 3, payload))
        })();
        if step.is_none() {
            b = &[];
        }
        Some(step)
    })
}

impl Bounded for pb::AgentBatch {
    fn check(bytes: &[u8]) -> Result<(), Status> {
        const MESSAGES: u64 = 3;
        const HEARTBEAT: u64 = 5;
        const FLOWS: u64 = 2;
        const UNREAD: u64 = 5;
        let mut count = 0;
        for field in fields(bytes) {
            let Some((number, message)) = field else { break };
            if number != MESSAGES {
                continue;
            }
            count += 1;
            if count > MAX_BATCH_MESSAGES {
                let msg = format!("a session batch of more than {MAX_BATCH_MESSAGES} messages");
                return Err(ErrorKind::LimitExceeded.status(tonic::Code::ResourceExhausted, msg));
            }
            let heartbeat = fields(message).map_while(|f| f).find(|&(n, _)| n == HEARTBEAT);
            match heartbeat {
                Some((_, body)) => {
                    let (mut flows, mut unread) = (0, 0);
                    for (n, payload) in fields(body).map_while(|f| f) {
                        match n {
                            FLOWS => flows += 1,
                            // Packed ids: one varint ends at each byte below 0x80; one unpacked
                            // id has no payload.
                            UNREAD => unread += payload.iter().filter(|&&b| b < 0x80).count().max(1),
                            _ => {}
                        }
                    }
                    for (count, what) in [(flows, "flows"), (unread, "unread flows")] {
                        if count > MAX_HEARTBEAT_FLOWS {
                            let msg = format!("a heartbeat of {count} {what}, more than {MAX_HEARTBEAT_FLOWS}");
                            return Err(ErrorKind::LimitExceeded.status(tonic::Code::ResourceExhausted, msg));
                        }
                    }
                }
                None if message.len() > MAX_REQUEST_BYTES => {
                    return Err(too_big("a session message", message.len(), MAX_REQUEST_BYTES));
                }
                None => {}
            }
        }
        Ok(())
    }
}

/// Control requests: each at most [`MAX_REQUEST_BYTES`].
macro_rules! small_requests {
    ($($t:ident),*) => {$(
        impl Bounded for pb::$t {
            fn check(bytes: &[u8]) -> Result<(), Status> {
                small(stringify!($t), bytes)
            }
        }
    )*};
}

small_requests!(
    RegisterRequest,
    UnregisterRequest,
    SealRequest,
    RenewRequest,
    StatusRequest,
    RegisterAgentRequest,
    AssignMachineRequest,
    DeregisterAgentRequest,
    GetRequest
);

/// Answers, and what a client sends its agent: bytes that decode one for one (a piece's content),
/// bounded by the gRPC message limit alone.
macro_rules! unbounded {
    ($($t:ident),*) => {$( impl Bounded for pb::$t {} )*};
}

unbounded!(
    RegisterResponse,
    UnregisterResponse,
    SealResponse,
    RenewResponse,
    StatusResponse,
    RegisterAgentResponse,
    CoordinatorBatch,
    AssignMachineResponse,
    DeregisterAgentResponse,
    PutRequest,
    PutResponse,
    PutChunk,
    GetChunk
);

#[cfg(test)]
mod tests {
    use super::*;

    fn message(body: pb::agent_message::Body) -> pb::AgentMessage {
        pb::AgentMessage { request_id: 1, body: Some(body) }
    }

    /// What an agent sends passes; more messages, an oversize announcement or too many flows
    /// (or unread flows) in a heartbeat are refused before decoding; malformed bytes are left to
    /// prost.
    #[test]
    fn session_batches_are_bounded_before_decoding() {
        let put = pb::agent_message::Body::Put(pb::AnnouncePutRequest { data_id: "p".into(), ..Default::default() });
        let ok = pb::AgentBatch { messages: vec![message(put.clone()); 1024], ..Default::default() };
        assert!(pb::AgentBatch::check(&ok.encode_to_vec()).is_ok());
        let many = pb::AgentBatch {
            messages: vec![pb::AgentMessage::default(); MAX_BATCH_MESSAGES + 1],
            ..Default::default()
        };
        let e = pb::AgentBatch::check(&many.encode_to_vec()).unwrap_err();
        assert_eq!(ErrorKind::of(&e), Some(ErrorKind::LimitExceeded));
        let parents = pb::CoflowOptions { parents: vec![1; 100_000], ..Default::default() };
        let reg = pb::RegisterRequest { options: Some(parents), ..Default::default() };
        let big =
            pb::agent_message::Body::Put(pb::AnnouncePutRequest { registration: Some(reg), ..Default::default() });
        let one = pb::AgentBatch { messages: vec![message(big)], ..Default::default() };
        assert!(pb::AgentBatch::check(&one.encode_to_vec()).is_err(), "a put of 100,000 parents");
        let flows = vec![pb::FlowProgress::default(); MAX_HEARTBEAT_FLOWS + 1];
        let hb = pb::agent_message::Body::Heartbeat(pb::HeartbeatRequest { flows, ..Default::default() });
        let e = pb::AgentBatch::check(
            &pb::AgentBatch { messages: vec![message(hb)], ..Default::default() }.encode_to_vec(),
        );
        assert!(e.is_err(), "a heartbeat past its flows");
        let flows = vec![pb::FlowProgress { flow_id: 1, bytes_sent: 1 << 40 }; 10_000];
        let hb = pb::agent_message::Body::Heartbeat(pb::HeartbeatRequest { flows, ..Default::default() });
        let ok = pb::AgentBatch { messages: vec![message(hb)], ..Default::default() };
        assert!(pb::AgentBatch::check(&ok.encode_to_vec()).is_ok(), "a heartbeat of 10,000 flows, over 64 KiB");
        // Unread flow ids, packed: counted by their varints, large ids (several bytes) as one.
        for (count, id, ok) in [(MAX_HEARTBEAT_FLOWS, u64::MAX, true), (MAX_HEARTBEAT_FLOWS + 1, 3, false)] {
            let hb = pb::HeartbeatRequest { unread_flow_ids: vec![id; count], ..Default::default() };
            let batch = pb::AgentBatch {
                messages: vec![message(pb::agent_message::Body::Heartbeat(hb))],
                ..Default::default()
            };
            let e = pb::AgentBatch::check(&batch.encode_to_vec());
            assert_eq!(e.is_ok(), ok, "{count} unread ids of {id}: {e:?}");
        }
        assert!(pb::AgentBatch::check(&[0xff, 0xff, 0xff]).is_ok(), "malformed: left to prost");
    }

    #[test]
    fn control_requests_are_bounded_before_decoding() {
        let options = pb::CoflowOptions { parents: vec![u64::MAX; crate::MAX_PARENTS], ..Default::default() };
        let most = pb::RegisterRequest { options: Some(options), ..Default::default() };
        assert!(pb::RegisterRequest::check(&most.encode_to_vec()).is_ok(), "the most parents, at 10 bytes each");
        let options = pb::CoflowOptions { parents: vec![1; 100_000], ..Default::default() };
        let e = pb::RegisterRequest::check(
            &pb::RegisterRequest { options: Some(options), ..Default::default() }.encode_to_vec(),
        )
        .unwrap_err();
        assert_eq!((e.code(), ErrorKind::of(&e)), (tonic::Code::ResourceExhausted, Some(ErrorKind::LimitExceeded)));
    }
}
