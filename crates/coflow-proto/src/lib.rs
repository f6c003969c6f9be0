//! The control plane's wire types: protobuf messages and gRPC stubs generated from
//! `proto/coflow/v1/coflow.proto`, and the hand-written conversions to validated domain types.
//!
//! This is the only crate that sees protobuf. Everything else takes the domain types of
//! `msg`, which [`TryFrom`] builds from a message, naming the field that is missing or wrong.
//!
//! # Layout
//! - [`pb`]: the generated messages, clients and servers (package `coflow.v1`).
//! - `msg`: validated domain types ([`DataId`], [`CoflowOptions`], [`PutSource`], ...) and their
//!   conversions.
//! - `kind`: [`ErrorKind`], the one table of error kinds the services name their errors by.
//! - `auth`: the cluster token ([`ClusterToken`]) and the interceptors that attach
//!   ([`TokenAttach`]) and check ([`TokenCheck`]) it.
//! - `tls`: mutual TLS and roles in certificates: [`Security`] (token or TLS), [`TlsContext`],
//!   [`Role`], the [`Authenticate`] interceptor and [`authorize`], the [`RefusalLog`].
//! - [`files`]: reading the operator's small files (configuration, token, TLS) with a bound.
//! - [`codec`]: the codec of every call, which bounds a message on its bytes before decoding it.
//! - `reception`: [`Reception`], which bounds what a service holds of requests not yet whole
//!   (their bytes, their number), per peer and in all.
//! - [`ticket`]: flow tickets, the capabilities that let a receiving agent fetch a flow.
//! - [`certs`]: making the cluster CA and members' certificates (`coflow certs`).

#![warn(missing_docs)]

mod auth;
pub mod certs;
pub mod codec;
mod conns;
pub mod files;
pub use conns::{
    ACCEPT_BACKOFF, AcceptFailures, HANDSHAKES_PER_ADDRESS, Pending, Share, Shares, UNPROVEN, UNPROVEN_PER_ADDRESS,
    Unproven, peer_group,
};
mod kind;
mod msg;
mod reception;
mod serve;
pub mod ticket;
mod tls;

/// The generated protobuf messages and tonic stubs of package `coflow.v1`.
#[allow(missing_docs, clippy::all, unreachable_pub)]
pub mod pb {
    tonic::include_proto!("coflow.v1");
}

impl pb::CoflowStatus {
    /// What a policy's admission control made of the coflow's deadline, by name (`pending`,
    /// `admitted`, `rejected`); none without a deadline, under a policy without admission control,
    /// or from a coordinator that does not say.
    pub fn admission_name(&self) -> Option<&'static str> {
        match pb::Admission::try_from(self.admission).ok()? {
            pb::Admission::Unspecified => None,
            pb::Admission::Pending => Some("pending"),
            pb::Admission::Admitted => Some("admitted"),
            pb::Admission::Rejected => Some("rejected"),
        }
    }
}

/// The bytes a message takes on the wire: its protobuf encoding, without gRPC's framing (for
/// services that keep what they send under a peer's decoding limit).
pub fn encoded_len(m: &impl prost::Message) -> usize {
    m.encoded_len()
}

pub use auth::{AUTHORIZATION, ClusterToken, TokenAttach, TokenCheck, TokenError};
pub use kind::{ERROR_KIND, ErrorKind, UnknownKind};
pub use msg::{
    ADMIN, AgentRegistration, CoflowOptions, DataId, FlowRecovery, GetAnnouncement, Heartbeat, MACHINE_ID_LIMIT,
    MAX_DATA_ID_LEN, MAX_DEADLINE_MS, MAX_HEARTBEAT_FLOWS, MAX_KIND_LEN, MAX_LEASE_MS, MAX_NAME_LEN, MAX_NUM_FLOWS,
    MAX_OWNER_LEN, MAX_PARENTS, MAX_PIECE_SIZE, MAX_PORT_RATE_BPS, MAX_READY_TIMEOUT_MS, MAX_RENEW_IDS, MIN_LEASE_MS,
    MIN_PORT_RATE_BPS, ProtoError, PutAnnouncement, PutSource, Readiness, Registration, Renewal,
};
pub use reception::{
    MAX_OPEN_REQUESTS, MAX_OPEN_REQUESTS_PER_HOLDER, MAX_RECEIVING, MAX_RECEIVING_PER_HOLDER, Reception,
};
pub use serve::{
    CONNECTION_WINDOW, MAX_CALLS_PER_CONNECTION, SERVER_KEEPALIVE, SHUTDOWN_DRAIN, ServeError, TypedErrors,
    serve_until_stopped, server,
};
pub use tls::{
    Authenticate, HANDSHAKE_TIMEOUT, Peer, Refusal, RefusalLog, Role, Security, TlsContext, TlsError, TlsFiles, accept,
    accept_agent, authorize, certificate_refused, client_certificate_question, connect_agent, endpoint_url, peer_role,
    permission_denied, service_certificate_refused, valid_client_name,
};
