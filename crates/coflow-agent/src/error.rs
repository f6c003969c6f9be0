//! The agent's errors, and their one mapping to gRPC status.

use coflow_core::CoflowId;
use coflow_proto::{DataId, ErrorKind, ProtoError};

/// What can go wrong at an agent.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// A request field is wrong.
    #[error(transparent)]
    Invalid(#[from] ProtoError),
    /// A file-segment put names a path outside the data directory.
    #[error("path {0:?} is outside the agent's data directory")]
    PathEscapes(String),
    /// A file-segment put names a file that cannot be read, or a segment past its end.
    #[error("file segment: {0}")]
    BadFile(String),
    /// A file-segment put names a file that is not the caller's: outside its directory of the
    /// data directory, or owned by another user.
    #[error("file segment: {0}")]
    NotYours(String),
    /// A piece of this name is already stored for the coflow.
    #[error("coflow {coflow} already has data id {data_id}")]
    DuplicateDataId {
        /// The coflow.
        coflow: CoflowId,
        /// The name.
        data_id: DataId,
    },
    /// The source agent could not be reached or stopped answering.
    #[error("agent at {addr} unreachable: {reason}")]
    SourceUnreachable {
        /// Its data address.
        addr: String,
        /// What happened.
        reason: String,
    },
    /// The source refused the fetch.
    #[error("source agent refused the fetch: {0}")]
    Refused(&'static str),
    /// A flow was asked for without its capability: a ticket that is not the flow's, a flow
    /// attached already, or (with TLS) a requester that is not the receiver the grant names.
    #[error("permission denied: {0}")]
    PermissionDenied(&'static str),
    /// The source sent nothing, not even a keepalive, for the data plane's idle timeout: it is
    /// frozen, or the network between the agents is.
    #[error("agent at {addr} sent nothing for {secs} s")]
    SourceSilent {
        /// Its data address.
        addr: String,
        /// The idle timeout, seconds.
        secs: f64,
    },
    /// This agent did not run for a while (its process was paused, or starved of CPU), over
    /// which a peer's silence, or its giving up on the connection, is no fault of the peer's;
    /// an agent silent past the coordinator's agent timeout is declared dead, and its flows
    /// with it.
    #[error("this agent did not run for {secs:.1} s (paused, or starved of CPU), not its source: ask again")]
    Paused {
        /// How long it did not run, seconds.
        secs: f64,
    },
    /// The bytes received do not match the checksum or the announced size.
    #[error("piece corrupted in transit: {0}")]
    Corrupted(String),
    /// The source's stored copy changed, was truncated, removed or cannot be read since its put:
    /// it can never come from this source (recompute it). The message names paths relative to
    /// the data directory only.
    #[error("data lost at the source: {0}")]
    DataLost(String),
    /// A configured limit was reached; the message names it.
    #[error("limit reached: {0}")]
    LimitExceeded(String),
    /// The coflow was unregistered.
    #[error("unknown coflow {0}")]
    UnknownCoflow(CoflowId),
    /// The local client hung up before its get ended.
    #[error("the client departed")]
    ClientDeparted,
    /// The local client took nothing from its get's stream for the data idle timeout: the get
    /// fails (its flow's rate is freed), and the client, should it read again, learns so.
    #[error("the client read nothing for {secs} s")]
    ClientStalled {
        /// The idle timeout, seconds.
        secs: f64,
    },
    /// The receiving agent hung up, or its connection broke, while this agent sent it a flow.
    #[error("connection to the receiving agent lost: {0}")]
    ReceiverGone(String),
    /// The receiving agent took nothing of a flow's bytes for the data idle timeout: the source
    /// gives the flow up and says so to the coordinator, which frees its rate whether or not
    /// the receiver ever reports.
    #[error("the receiving agent read nothing for {secs} s")]
    ReceiverStalled {
        /// The idle timeout, seconds.
        secs: f64,
    },
    /// The coordinator refused or could not be reached.
    #[error("coordinator: {}", .0.message())]
    Coordinator(tonic::Status),
    /// The agent is shutting down.
    #[error("the agent is shutting down")]
    ShuttingDown,
    /// The agent has no session with the coordinator yet (it just started; in token mode a
    /// restarted agent waits until its previous registration has timed out): retry shortly.
    #[error("the agent is not registered with the coordinator yet")]
    NotRegistered,
}

impl AgentError {
    /// Why a source was lost, without its address (which whoever hears it knows): for a source
    /// out of reach or silent, none for any other error.
    pub(crate) fn why_source_lost(&self) -> Option<String> {
        match self {
            AgentError::SourceUnreachable { reason, .. } => Some(reason.clone()),
            AgentError::SourceSilent { secs, .. } => Some(format!("it sent nothing for {secs} s")),
            _ => None,
        }
    }

    /// Why a flow failed, as clients and the coordinator count it: the error kind, with
    /// `timed-out` for a silent source and `client-departed` for a client that hung up.
    pub fn kind(&self) -> ErrorKind {
        match self {
            AgentError::SourceSilent { .. } | AgentError::ReceiverStalled { .. } => ErrorKind::TimedOut,
            AgentError::ClientDeparted | AgentError::ClientStalled { .. } => ErrorKind::ClientDeparted,
            AgentError::Corrupted(_) => ErrorKind::Corrupted,
            AgentError::DataLost(_) => ErrorKind::DataLost,
            AgentError::LimitExceeded(_) => ErrorKind::LimitExceeded,
            AgentError::Refused(_) => ErrorKind::Refused,
            AgentError::PermissionDenied(_) | AgentError::NotYours(_) => ErrorKind::PermissionDenied,
            AgentError::ShuttingDown => ErrorKind::ShuttingDown,
            AgentError::UnknownCoflow(_) => ErrorKind::UnknownCoflow,
            AgentError::Invalid(_) | AgentError::PathEscapes(_) | AgentError::BadFile(_) => ErrorKind::Invalid,
            AgentError::DuplicateDataId { .. } => ErrorKind::DuplicateDataId,
            AgentError::SourceUnreachable { .. } | AgentError::ReceiverGone(_) => ErrorKind::AgentUnreachable,
            AgentError::Paused { .. } => ErrorKind::UnknownFlow,
            AgentError::Coordinator(_) | AgentError::NotRegistered => ErrorKind::CoordinatorUnreachable,
        }
    }
}

impl From<AgentError> for tonic::Status {
    fn from(e: AgentError) -> tonic::Status {
        let code = match &e {
            // The coordinator's answer keeps its kind, but for its stopping; an error of the call
            // itself (no session, a transport error, no answer within the deadline) has none.
            // Both are the coordinator out of reach, which a client may retry and for which no
            // source is to blame.
            AgentError::Coordinator(s) => {
                return match ErrorKind::of(s) {
                    Some(ErrorKind::ShuttingDown) => ErrorKind::CoordinatorUnreachable
                        .status(tonic::Code::Unavailable, format!("the coordinator is stopping: {}", s.message())),
                    Some(_) => s.clone(),
                    None if s.code() == tonic::Code::DeadlineExceeded => ErrorKind::CoordinatorUnreachable.status(
                        tonic::Code::Unavailable,
                        format!("the coordinator did not answer in time: {}", s.message()),
                    ),
                    None => ErrorKind::CoordinatorUnreachable.status(s.code(), s.message().to_string()),
                };
            }
            AgentError::Invalid(_) | AgentError::PathEscapes(_) | AgentError::BadFile(_) => {
                tonic::Code::InvalidArgument
            }
            AgentError::DuplicateDataId { .. } => tonic::Code::AlreadyExists,
            AgentError::SourceUnreachable { .. }
            | AgentError::ReceiverGone(_)
            | AgentError::ShuttingDown
            | AgentError::NotRegistered
            | AgentError::SourceSilent { .. }
            | AgentError::Paused { .. }
            | AgentError::ReceiverStalled { .. }
            | AgentError::ClientDeparted
            | AgentError::ClientStalled { .. } => tonic::Code::Unavailable,
            AgentError::Refused(_) | AgentError::PermissionDenied(_) | AgentError::NotYours(_) => {
                tonic::Code::PermissionDenied
            }
            AgentError::Corrupted(_) | AgentError::DataLost(_) => tonic::Code::DataLoss,
            AgentError::LimitExceeded(_) => tonic::Code::ResourceExhausted,
            AgentError::UnknownCoflow(_) => tonic::Code::NotFound,
        };
        // What a client sees of a silent source or a stopping agent is that the source or the
        // agent cannot be reached; the coordinator counts them by their own kind. A client that
        // stopped reading is told so (`client-departed`): no source is to blame.
        let kind = match e.kind() {
            ErrorKind::TimedOut | ErrorKind::ShuttingDown => ErrorKind::AgentUnreachable,
            k => k,
        };
        // The kind says "unreachable" already: the message names the agent (the source, or the
        // relay a part went through) and what happened.
        let message = match &e {
            AgentError::SourceUnreachable { addr, reason } => format!("agent at {addr}: {reason}"),
            e => e.to_string(),
        };
        kind.status(code, message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A coordinator's refusal reaches the client as it came; a call that failed in itself (no
    /// session, no answer in time) or that a stopping coordinator turned down is
    /// `coordinator-unreachable`, which a client retries, and one that ran out of time says so
    /// with the code a retry keys on.
    #[test]
    fn coordinator_errors_reach_the_client_with_a_kind() {
        let refused = ErrorKind::PermissionDenied.status(tonic::Code::PermissionDenied, "not yours");
        let s = tonic::Status::from(AgentError::Coordinator(refused));
        assert_eq!(
            (s.code(), ErrorKind::of(&s), s.message()),
            (tonic::Code::PermissionDenied, Some(ErrorKind::PermissionDenied), "not yours")
        );
        let away = tonic::Status::from(AgentError::Coordinator(tonic::Status::unavailable("no session")));
        assert_eq!(
            (away.code(), ErrorKind::of(&away), away.message()),
            (tonic::Code::Unavailable, Some(ErrorKind::CoordinatorUnreachable), "no session")
        );
        let late = tonic::Status::from(AgentError::Coordinator(tonic::Status::deadline_exceeded("after 5000 ms")));
        assert_eq!(
            (late.code(), ErrorKind::of(&late), late.message()),
            (
                tonic::Code::Unavailable,
                Some(ErrorKind::CoordinatorUnreachable),
                "the coordinator did not answer in time: after 5000 ms"
            )
        );
        let stopping = ErrorKind::ShuttingDown.status(tonic::Code::Unavailable, "the coordinator is shutting down");
        let stopping = tonic::Status::from(AgentError::Coordinator(stopping));
        assert_eq!(
            (stopping.code(), ErrorKind::of(&stopping), stopping.message()),
            (
                tonic::Code::Unavailable,
                Some(ErrorKind::CoordinatorUnreachable),
                "the coordinator is stopping: the coordinator is shutting down"
            )
        );
    }

    /// A source out of reach is said once: the kind carries "unreachable", the message the
    /// agent and why (a client shows `agent unreachable: agent at …: …`); the sending side's lost
    /// receiver is not worded as a source.
    #[test]
    fn an_unreachable_source_is_named_without_saying_unreachable_twice() {
        let e = AgentError::SourceUnreachable { addr: "10.0.0.2:7402".into(), reason: "connection refused".into() };
        let s = tonic::Status::from(e);
        assert_eq!(
            (s.code(), ErrorKind::of(&s), s.message()),
            (tonic::Code::Unavailable, Some(ErrorKind::AgentUnreachable), "agent at 10.0.0.2:7402: connection refused")
        );
        let gone = AgentError::ReceiverGone("closed".into());
        assert_eq!(gone.kind(), ErrorKind::AgentUnreachable);
        assert_eq!(gone.to_string(), "connection to the receiving agent lost: closed");
    }
}
