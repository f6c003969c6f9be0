//! Flows as capabilities: the coordinator's grant of a flow carries a ticket, an HMAC-SHA256 of
//! the flow (its id, coflow, piece and receiving machine) under the source agent's flow key, cut
//! to [`TICKET_LEN`] bytes. Only the receiving agent is told the ticket (in its grant); the source
//! learns its key when it registers and checks a request's ticket itself, so that no message has
//! to reach the source before the receiver's request does.
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

/// What a ticket is computed over: a domain tag, then the flow's fields, fixed-width and
/// length-prefixed so that no two flows encode alike.
fn message(flow: FlowId, coflow: CoflowId, data_id: &str, dst: MachineId) -> Vec<u8> {
    let mut m = Vec::with_capacity(64 + data_id.len());
    m.extend_from_slice(b"coflow flow ticket v1\0");
    m.extend_from_slice(&flow.0.to_be_bytes());
    m.extend_from_slice(&coflow.0.to_be_bytes());
    m.extend_from_slice(&dst.0.to_be_bytes());
    m.extend_from_slice(&(data_id.len() as u64).to_be_bytes());
    m.extend_from_slice(data_id.as_bytes());
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

    /// The ticket of a flow from `src` to `dst`.
    pub fn issue(&self, src: MachineId, flow: FlowId, coflow: CoflowId, data_id: &str, dst: MachineId) -> Ticket {
        FlowKey::new(&self.key_of(src)).expect("keys are 32 bytes").ticket(flow, coflow, data_id, dst)
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

    /// The ticket of a flow to `dst` under this key.
    pub fn ticket(&self, flow: FlowId, coflow: CoflowId, data_id: &str, dst: MachineId) -> Ticket {
        let tag = hmac::sign(&self.key, &message(flow, coflow, data_id, dst));
        tag.as_ref()[..TICKET_LEN].try_into().expect("16 of 32 bytes")
    }

    /// Whether `ticket` is the flow's, compared in constant time.
    pub fn verify(&self, flow: FlowId, coflow: CoflowId, data_id: &str, dst: MachineId, ticket: &[u8]) -> bool {
        let want = self.ticket(flow, coflow, data_id, dst);
        ticket.len() == TICKET_LEN && want.iter().zip(ticket).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ticket verifies under its source's key for exactly its flow: any other flow id, coflow,
    /// piece, receiver, source, or coordinator (secret) makes it fail, as does any flipped bit.
    #[test]
    fn a_ticket_verifies_for_its_flow_only() {
        let t = Tickets::generate();
        let (src, dst, flow, coflow) = (MachineId(1), MachineId(2), FlowId(7), CoflowId(9));
        let ticket = t.issue(src, flow, coflow, "p", dst);
        let key = FlowKey::new(&t.key_of(src)).unwrap();
        assert!(key.verify(flow, coflow, "p", dst, &ticket));
        assert!(!key.verify(FlowId(8), coflow, "p", dst, &ticket));
        assert!(!key.verify(flow, CoflowId(10), "p", dst, &ticket));
        assert!(!key.verify(flow, coflow, "q", dst, &ticket));
        assert!(!key.verify(flow, coflow, "p", MachineId(3), &ticket));
        assert!(!key.verify(flow, coflow, "p", dst, &ticket[..15]));
        assert!(!key.verify(flow, coflow, "p", dst, &[]));
        let other_src = FlowKey::new(&t.key_of(MachineId(3))).unwrap();
        assert!(!other_src.verify(flow, coflow, "p", dst, &ticket));
        let restarted = FlowKey::new(&Tickets::generate().key_of(src)).unwrap();
        assert!(!restarted.verify(flow, coflow, "p", dst, &ticket));
        for bit in 0..TICKET_LEN * 8 {
            let mut bad = ticket;
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(!key.verify(flow, coflow, "p", dst, &bad), "bit {bit}");
        }
        assert!(FlowKey::new(&[0; 31]).is_none());
    }
}
