//! The coordinator's errors, and their one mapping to gRPC status.

use coflow_core::{CoflowId, FlowId, MachineId};
use coflow_proto::{DataId, ErrorKind, ProtoError};

/// What can go wrong with a request to the coordinator.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum CoordError {
    /// No live coflow has this id.
    #[error("unknown coflow {0}")]
    UnknownCoflow(CoflowId),
    /// A piece of this name was already put for the coflow.
    #[error("coflow {coflow} already has data id {data_id}")]
    DuplicateDataId {
        /// The coflow.
        coflow: CoflowId,
        /// The name.
        data_id: DataId,
    },
    /// No piece of this name was put for the coflow (or its agent is gone).
    #[error("coflow {coflow} has no data id {data_id}")]
    NoSuchData {
        /// The coflow.
        coflow: CoflowId,
        /// The name.
        data_id: DataId,
    },
    /// The coflow was sealed: no more pieces may be put for it.
    #[error("coflow {0} is sealed: no more puts")]
    Sealed(CoflowId),
    /// No live agent runs on this machine.
    #[error("no live agent on machine {0}")]
    AgentUnavailable(MachineId),
    /// No live flow has this id.
    #[error("unknown flow {0}")]
    UnknownFlow(FlowId),
    /// A request field is wrong.
    #[error(transparent)]
    Invalid(#[from] ProtoError),
    /// The coordinator is shutting down.
    #[error("the coordinator is shutting down")]
    ShuttingDown,
    /// A configured limit was reached; the message names it.
    #[error("limit reached: {0}")]
    LimitExceeded(String),
    /// A caller that neither owns a coflow nor is the admin asked to change it or to put or get in it.
    #[error("coflow {coflow} belongs to another identity than {caller:?}")]
    NotTheOwner {
        /// The coflow.
        coflow: CoflowId,
        /// The caller's identity.
        caller: String,
    },
    /// A re-announcement (a recovered piece or flow) was refused: outside the restart window,
    /// inconsistent, or without what it must carry; the message says which.
    #[error("re-announcement refused: {0}")]
    NotRecoverable(String),
    /// A machine reported the end of a flow it does not receive.
    #[error("machine {machine} does not receive flow {flow}")]
    NotTheReceiver {
        /// The flow.
        flow: FlowId,
        /// The machine that reported it.
        machine: MachineId,
    },
}

impl CoordError {
    /// The kind clients read (the `coflow-error` metadata, a session's `Failure`).
    pub fn kind(&self) -> ErrorKind {
        match self {
            CoordError::UnknownCoflow(_) => ErrorKind::UnknownCoflow,
            CoordError::DuplicateDataId { .. } => ErrorKind::DuplicateDataId,
            CoordError::NoSuchData { .. } => ErrorKind::NoSuchData,
            CoordError::Sealed(_) => ErrorKind::Sealed,
            CoordError::AgentUnavailable(_) => ErrorKind::AgentUnreachable,
            CoordError::UnknownFlow(_) => ErrorKind::UnknownFlow,
            CoordError::Invalid(e) => e.kind(),
            CoordError::ShuttingDown => ErrorKind::ShuttingDown,
            CoordError::LimitExceeded(_) => ErrorKind::LimitExceeded,
            CoordError::NotTheReceiver { .. } | CoordError::NotTheOwner { .. } | CoordError::NotRecoverable(_) => {
                ErrorKind::PermissionDenied
            }
        }
    }
}

impl From<CoordError> for tonic::Status {
    fn from(e: CoordError) -> tonic::Status {
        let mut status = match &e {
            CoordError::UnknownCoflow(_) | CoordError::NoSuchData { .. } | CoordError::UnknownFlow(_) => {
                tonic::Status::not_found(e.to_string())
            }
            CoordError::DuplicateDataId { .. } => tonic::Status::already_exists(e.to_string()),
            CoordError::Sealed(_) => tonic::Status::failed_precondition(e.to_string()),
            CoordError::AgentUnavailable(_) | CoordError::ShuttingDown => tonic::Status::unavailable(e.to_string()),
            CoordError::Invalid(ProtoError::TooMany { .. }) | CoordError::LimitExceeded(_) => {
                tonic::Status::resource_exhausted(e.to_string())
            }
            CoordError::Invalid(_) => tonic::Status::invalid_argument(e.to_string()),
            CoordError::NotTheReceiver { .. } | CoordError::NotTheOwner { .. } | CoordError::NotRecoverable(_) => {
                tonic::Status::permission_denied(e.to_string())
            }
        };
        e.kind().attach(&mut status);
        status
    }
}
