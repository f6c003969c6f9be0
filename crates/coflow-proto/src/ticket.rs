//! Flows as capabilities: the coordinator's grant of a flow carries a ticket, an HMAC-SHA256 of
//! the flow (its id, coflow, piece, receiving machine, the range of the piece it carries and, at
//! a relay, the source to relay from: its [`Scope`]) under the source agent's flow key, cut to
//! [`TICKET_LEN`] bytes, so that a ticket asks for nothing its grant does not name. Only the
//! receiving agent is told the ticket (in its grant); the source learns its key when it registers
//! and checks a request's ticket itself, so that no message has to reach the source before the
//! receiver's request does.
//!
//! The coordinator derives each machine's key from a secret it draws from the system's CSPRNG
//! at start ([`Tickets`]); a source keeps the key of its current registration and of the one
//! before ([`FlowKey`]), so that a grant made just before it registered again still serves.

use coflow_core::{CoflowId, FlowId, MachineId};
use ring::hmac;
use ring::rand::SecureRandom;

/// The length of a flow ticket: 128 bits.
pub const TICKET_LEN: usize = 16;

/// The length of a flow key.
pub const FLOW_KEY_LEN: usize = 32;

/// A flow's ticket.
pub type Ticket = [u8; TICKET_LEN];

/// What a ticket grants of its flow's piece: the range `[offset, offset + length)` and, at a
/// relay, the source it is to fetch that range from (its machine and data address, as the
/// grant names them); `hop` is `None` at the source itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scope<'a> {
    /// The first byte of the piece.
    pub offset: u64,
    /// How many bytes from there.
    pub length: u64,
    /// At a relay, the source to relay from: its machine and data address.
    pub hop: Option<(MachineId, &'a str)>,
}

impl Scope<'_> {
    /// The bytes `[offset, offset + length)` from the source itself.
    pub fn range(offset: u64, length: u64) -> Scope<'static> {
        Scope { offset, length, hop: None }
    }
}

/// What a ticket is computed over: a domain tag, then the flow's fields and its scope,
/// fixed-width and length-prefixed so that no two flows encode alike.
fn message(flow: FlowId, coflow: CoflowId, data_id: &str, dst: MachineId, scope: Scope<'_>) -> Vec<u8> {
    let mut m = Vec::with_capacity(128 + data_id.len());
    m.extend_from_slice(b"coflow flow ticket v2\0");
    m.extend_from_slice(&flow.0.to_be_bytes());
    m.extend_from_slice(&coflow.0.to_be_bytes());
    m.extend_from_slice(&dst.0.to_be_bytes());
    m.extend_from_slice(&(data_id.len() as u64).to_be_bytes());
    m.extend_from_slice(data_id.as_bytes());
    m.extend_from_slice(&scope.offset.to_be_bytes());
    m.extend_from_slice(&scope.length.to_be_bytes());
    match scope.hop {
        None => m.push(0),
        Some((src, addr)) => {
            m.push(1);
            m.extend_from_slice(&src.0.to_be_bytes());
            m.extend_from_slice(&(addr.len() as u64).to_be_bytes());
            m.extend_from_slice(addr.as_bytes());
        }
    }
    m
}

/// The coordinator's side: draws a secret at start, derives each machine's flow key from it and
/// issues tickets.
#[derive(Clone)]
pub struct Tickets {
    secret: hmac::Key,
}

impl std::fmt::Debug for Tickets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tickets(..)")
    }
}

impl Tickets {
    /// A fresh secret from the system's CSPRNG.
    ///
    /// # Panics
    /// If the system has no random source (the process could not run securely at all).
    pub fn generate() -> Tickets {
        let mut secret = [0u8; 32];
        ring::rand::SystemRandom::new().fill(&mut secret).expect("the system's random source");
        Tickets { secret: hmac::Key::new(hmac::HMAC_SHA256, &secret) }
    }

    /// The flow key of `machine`, told to that machine's agent when it registers.
    pub fn key_of(&self, machine: MachineId) -> [u8; FLOW_KEY_LEN] {
        let mut m = b"coflow flow key v1\0".to_vec();
        m.extend_from_slice(&machine.0.to_be_bytes());
        let tag = hmac::sign(&self.secret, &m);
        tag.as_ref().try_into().expect("SHA-256 tags are 32 bytes")
    }

    /// The ticket of a flow's `scope` from `src` (a source, or a relay) to `dst`.
    pub fn issue(
        &self,
        src: MachineId,
        flow: FlowId,
        coflow: CoflowId,
        data_id: &str,
        dst: MachineId,
        scope: Scope<'_>,
    ) -> Ticket {
        FlowKey::new(&self.key_of(src)).expect("keys are 32 bytes").ticket(flow, coflow, data_id, dst, scope)
    }
}

/// A source's flow key, with which it checks the tickets of the flows it is asked to serve.
#[derive(Clone)]
pub struct FlowKey {
    key: hmac::Key,
}

impl std::fmt::Debug for FlowKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FlowKey(..)")
    }
}

impl FlowKey {
    /// The key the coordinator sent; `None` unless it is [`FLOW_KEY_LEN`] bytes.
    pub fn new(bytes: &[u8]) -> Option<FlowKey> {
        (bytes.len() == FLOW_KEY_LEN).then(|| FlowKey { key: hmac::Key::new(hmac::HMAC_SHA256, bytes) })
    }

    /// The ticket of a flow's `scope` to `dst` under this key.
    pub fn ticket(&self, flow: FlowId, coflow: CoflowId, data_id: &str, dst: MachineId, scope: Scope<'_>) -> Ticket {
        let tag = hmac::sign(&self.key, &message(flow, coflow, data_id, dst, scope));
        tag.as_ref()[..TICKET_LEN].try_into().expect("16 of 32 bytes")
    }

    /// Whether `ticket` is the flow's for `scope`, compared in constant time.
    pub fn verify(
        &self,
        flow: FlowId,
        coflow: CoflowId,
        data_id: &str,
        dst: MachineId,
        scope: Scope<'_>,
        ticket: &[u8],
    ) -> bool {
        let want = self.ticket(flow, coflow, data_id, dst, scope);
        ticket.len() == TICKET_LEN && want.iter().zip(ticket).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ticket verifies under its source's key for exactly its flow and scope: any other flow
    /// id, coflow, piece, receiver, range, hop, source, or coordinator (secret) makes it fail, as
    /// does any flipped bit.
    #[test]
    fn a_ticket_verifies_for_its_flow_only() {
        let t = Tickets::generate();
        let (src, dst, flow, coflow) = (MachineId(1), MachineId(2), FlowId(7), CoflowId(9));
        let at = Scope::range(0, 100);
        let ticket = t.issue(src, flow, coflow, "p", dst, at);
        let key = FlowKey::new(&t.key_of(src)).unwrap();
        assert!(key.verify(flow, coflow, "p", dst, at, &ticket));
        assert!(!key.verify(FlowId(8), coflow, "p", dst, at, &ticket));
        assert!(!key.verify(flow, CoflowId(10), "p", dst, at, &ticket));
        assert!(!key.verify(flow, coflow, "q", dst, at, &ticket));
        assert!(!key.verify(flow, coflow, "p", MachineId(3), at, &ticket));
        assert!(!key.verify(flow, coflow, "p", dst, at, &ticket[..15]));
        assert!(!key.verify(flow, coflow, "p", dst, at, &[]));
        for other in [Scope::range(0, 99), Scope::range(1, 99), Scope::range(0, 101), Scope::range(0, u64::MAX)] {
            assert!(!key.verify(flow, coflow, "p", dst, other, &ticket), "{other:?}");
        }
        let hop = Scope { hop: Some((MachineId(4), "10.0.0.4:7000")), ..at };
        let relayed = t.issue(src, flow, coflow, "p", dst, hop);
        assert!(key.verify(flow, coflow, "p", dst, hop, &relayed));
        assert!(!key.verify(flow, coflow, "p", dst, at, &relayed), "a relay's ticket asks the source for nothing");
        assert!(!key.verify(flow, coflow, "p", dst, hop, &ticket), "a source's ticket names no hop");
        for other in [Some((MachineId(5), "10.0.0.4:7000")), Some((MachineId(4), "10.0.0.4:7001"))] {
            assert!(!key.verify(flow, coflow, "p", dst, Scope { hop: other, ..at }, &relayed), "{other:?}");
        }
        let other_src = FlowKey::new(&t.key_of(MachineId(3))).unwrap();
        assert!(!other_src.verify(flow, coflow, "p", dst, at, &ticket));
        let restarted = FlowKey::new(&Tickets::generate().key_of(src)).unwrap();
        assert!(!restarted.verify(flow, coflow, "p", dst, at, &ticket));
        for bit in 0..TICKET_LEN * 8 {
            let mut bad = ticket;
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(!key.verify(flow, coflow, "p", dst, at, &bad), "bit {bit}");
        }
        assert!(FlowKey::new(&[0; 31]).is_none());
    }
}
