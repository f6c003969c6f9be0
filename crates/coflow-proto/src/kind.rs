//! The one table of error kinds: what every service names its errors by, in the `coflow-error`
//! metadata entry of a gRPC status and in an agent session's `Failure`. [`ErrorKind`] mirrors
//! the protocol's `ErrorKind` enum one for one (a test checks both ways); the SDKs map the
//! names to their error types.

use std::fmt;
use std::str::FromStr;

use tonic::metadata::MetadataValue;

use crate::pb;

/// The metadata key in which services name an error's kind.
pub const ERROR_KIND: &str = "coflow-error";

/// What went wrong, for a caller to act on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ErrorKind {
    /// The coordinator knows no such coflow.
    UnknownCoflow,
    /// A piece of this name was already put for the coflow.
    DuplicateDataId,
    /// No piece of this name was put for the coflow, or its agent is gone.
    NoSuchData,
    /// The coflow was sealed.
    Sealed,
    /// An agent (the local one or a piece's source) cannot be reached, or is stopping.
    AgentUnreachable,
    /// No live flow has this id.
    UnknownFlow,
    /// A request field is wrong.
    Invalid,
    /// The service is stopping.
    ShuttingDown,
    /// A configured limit was reached.
    LimitExceeded,
    /// The caller's role or session may not make this call.
    PermissionDenied,
    /// The caller's credentials were refused.
    Unauthenticated,
    /// A source agent refused a fetch.
    Refused,
    /// The bytes did not arrive intact.
    Corrupted,
    /// The source's stored copy of a piece is gone.
    DataLost,
    /// Nothing moved for an idle timeout, or a call passed its deadline.
    TimedOut,
    /// The client hung up before its get ended.
    ClientDeparted,
    /// The coordinator cannot be reached (from the client or from its local agent), or is
    /// stopping: no piece's source is to blame.
    CoordinatorUnreachable,
}

impl ErrorKind {
    /// Every kind, in the protocol's order.
    pub const ALL: [ErrorKind; 17] = [
        ErrorKind::UnknownCoflow,
        ErrorKind::DuplicateDataId,
        ErrorKind::NoSuchData,
        ErrorKind::Sealed,
        ErrorKind::AgentUnreachable,
        ErrorKind::UnknownFlow,
        ErrorKind::Invalid,
        ErrorKind::ShuttingDown,
        ErrorKind::LimitExceeded,
        ErrorKind::PermissionDenied,
        ErrorKind::Unauthenticated,
        ErrorKind::Refused,
        ErrorKind::Corrupted,
        ErrorKind::DataLost,
        ErrorKind::TimedOut,
        ErrorKind::ClientDeparted,
        ErrorKind::CoordinatorUnreachable,
    ];

    /// Its name on the wire, e.g. `no-such-data`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::UnknownCoflow => "unknown-coflow",
            ErrorKind::DuplicateDataId => "duplicate-data-id",
            ErrorKind::NoSuchData => "no-such-data",
            ErrorKind::Sealed => "sealed",
            ErrorKind::AgentUnreachable => "agent-unreachable",
            ErrorKind::UnknownFlow => "unknown-flow",
            ErrorKind::Invalid => "invalid",
            ErrorKind::ShuttingDown => "shutting-down",
            ErrorKind::LimitExceeded => "limit-exceeded",
            ErrorKind::PermissionDenied => "permission-denied",
            ErrorKind::Unauthenticated => "unauthenticated",
            ErrorKind::Refused => "refused",
            ErrorKind::Corrupted => "corrupted",
            ErrorKind::DataLost => "data-lost",
            ErrorKind::TimedOut => "timed-out",
            ErrorKind::ClientDeparted => "client-departed",
            ErrorKind::CoordinatorUnreachable => "coordinator-unreachable",
        }
    }

    /// The kind a status names, if any.
    pub fn of(status: &tonic::Status) -> Option<ErrorKind> {
        status.metadata().get(ERROR_KIND).and_then(|v| v.to_str().ok()).and_then(|k| k.parse().ok())
    }

    /// Names this kind in `status`.
    pub fn attach(self, status: &mut tonic::Status) {
        status.metadata_mut().insert(ERROR_KIND, MetadataValue::from_static(self.as_str()));
    }

    /// A status of `code` with `message`, naming this kind.
    pub fn status(self, code: tonic::Code, message: impl Into<String>) -> tonic::Status {
        let mut s = tonic::Status::new(code, message);
        self.attach(&mut s);
        s
    }

    /// The protocol's value.
    pub fn to_pb(self) -> pb::ErrorKind {
        // The protocol numbers the kinds from 1 in this order.
        let n = ErrorKind::ALL.iter().position(|&k| k == self).expect("every kind is listed") as i32 + 1;
        pb::ErrorKind::try_from(n).expect("the protocol lists every kind")
    }

    /// The kind of a protocol value; none for `ERROR_KIND_UNSPECIFIED` or a value this build
    /// does not know.
    pub fn from_pb(v: i32) -> Option<ErrorKind> {
        usize::try_from(v).ok().and_then(|n| n.checked_sub(1)).and_then(|i| ErrorKind::ALL.get(i)).copied()
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is no error kind.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown error kind {0:?}")]
pub struct UnknownKind(pub String);

impl FromStr for ErrorKind {
    type Err = UnknownKind;

    fn from_str(s: &str) -> Result<ErrorKind, UnknownKind> {
        ErrorKind::ALL.iter().copied().find(|k| k.as_str() == s).ok_or_else(|| UnknownKind(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kind is the protocol's value of the same name, and every protocol value but
    /// `UNSPECIFIED` is a kind: the two tables cannot drift apart.
    #[test]
    fn the_kinds_are_the_protocols() {
        for k in ErrorKind::ALL {
            let name = format!("ERROR_KIND_{}", k.as_str().replace('-', "_").to_uppercase());
            assert_eq!(k.to_pb().as_str_name(), name);
            assert_eq!(ErrorKind::from_pb(k.to_pb() as i32), Some(k));
            assert_eq!(k.as_str().parse::<ErrorKind>(), Ok(k));
        }
        let mut n = 1;
        while let Ok(v) = pb::ErrorKind::try_from(n) {
            assert!(ErrorKind::from_pb(v as i32).is_some(), "{v:?} has no kind");
            n += 1;
        }
        assert_eq!(n as usize - 1, ErrorKind::ALL.len());
        assert_eq!(ErrorKind::from_pb(0), None);
        assert!("other".parse::<ErrorKind>().is_err());
    }

    #[test]
    fn a_status_carries_its_kind() {
        let s = ErrorKind::NoSuchData.status(tonic::Code::NotFound, "gone");
        assert_eq!(ErrorKind::of(&s), Some(ErrorKind::NoSuchData));
        assert_eq!(ErrorKind::of(&tonic::Status::not_found("x")), None);
    }
}
