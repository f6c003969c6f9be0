//! The shared cluster token: attached to every RPC as `authorization: Bearer <token>` and checked
//! by an interceptor on every server. Its `Debug` never shows the secret, so it is never logged.
//!
//! Token mode is for trusted networks: the token crosses the network in clear text (gRPC
//! metadata and the data plane's request header), and anyone who holds it may act as any member
//! of the cluster. Mutual TLS (`tls`) is the mode for anything else.

use std::fmt;
use std::path::Path;

use tonic::metadata::MetadataValue;
use tonic::service::Interceptor;
use tonic::{Request, Status};

/// The metadata key that carries the token.
pub const AUTHORIZATION: &str = "authorization";

/// The shared secret of one cluster.
#[derive(Clone, PartialEq, Eq)]
pub struct ClusterToken(String);

impl fmt::Debug for ClusterToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ClusterToken(<redacted>)")
    }
}

/// Why a token could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The token is empty, too long, or not printable ASCII.
    #[error("cluster token must be 1 to 512 printable ASCII characters without spaces")]
    Invalid,
    /// The token file holds no valid token.
    #[error("cluster token file {path}: it must hold 1 to 512 printable ASCII characters without spaces")]
    InvalidFile {
        /// The file.
        path: String,
    },
    /// The token file could not be read.
    #[error("cannot read cluster token file {path}: {error}")]
    File {
        /// The file.
        path: String,
        /// Why (part of the message, not a source, so that an error chain says it once).
        error: std::io::Error,
    },
}

impl ClusterToken {
    /// A token from its text; surrounding whitespace is trimmed.
    pub fn new(text: &str) -> Result<ClusterToken, TokenError> {
        let t = text.trim();
        if t.is_empty() || t.len() > 512 || !t.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(TokenError::Invalid);
        }
        Ok(ClusterToken(t.to_string()))
    }

    /// Reads a token from a file (its whole content, trimmed).
    pub fn from_file(path: &Path) -> Result<ClusterToken, TokenError> {
        // A token is at most 512 characters; the bound leaves room for surrounding whitespace.
        let text = crate::files::read_small_text(path, 4096)
            .map_err(|error| TokenError::File { path: path.display().to_string(), error })?;
        ClusterToken::new(&text).map_err(|_| TokenError::InvalidFile { path: path.display().to_string() })
    }

    /// The token's bytes, for the data plane's header.
    pub fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }

    /// Compares in time independent of where the first difference is.
    pub fn matches(&self, other: &[u8]) -> bool {
        let mine = self.0.as_bytes();
        if mine.len() != other.len() {
            return false;
        }
        mine.iter().zip(other).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
    }

    /// Adds the token to an outgoing request.
    pub fn attach<T>(&self, req: &mut Request<T>) {
        let value = MetadataValue::try_from(format!("Bearer {}", self.0)).expect("validated as printable ASCII");
        req.metadata_mut().insert(AUTHORIZATION, value);
    }
}

/// The server interceptor that refuses a call without the cluster's token; [`TokenAttach`]
/// is the client side, which attaches it.
#[derive(Clone, Debug)]
pub struct TokenCheck(pub ClusterToken);

impl Interceptor for TokenCheck {
    fn call(&mut self, req: Request<()>) -> Result<Request<()>, Status> {
        match req.metadata().get(AUTHORIZATION) {
            Some(v) if v.as_bytes().strip_prefix(b"Bearer ").is_some_and(|t| self.0.matches(t)) => Ok(req),
            Some(_) => Err(Status::unauthenticated("wrong cluster token")),
            None => Err(Status::unauthenticated("missing cluster token")),
        }
    }
}

/// The client interceptor that attaches the cluster's token to every call (none with TLS,
/// where the certificate authenticates).
#[derive(Clone, Debug)]
pub struct TokenAttach(Option<ClusterToken>);

impl TokenAttach {
    /// Attaches `token`, if any.
    pub fn new(token: Option<ClusterToken>) -> TokenAttach {
        TokenAttach(token)
    }
}

impl Interceptor for TokenAttach {
    fn call(&mut self, mut req: Request<()>) -> Result<Request<()>, Status> {
        if let Some(t) = &self.0 {
            t.attach(&mut req);
        }
        Ok(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reason is in the message and not also a source, which `{:#}` would print again.
    #[test]
    fn an_unreadable_token_file_says_why_once() {
        let guard = tempfile::Builder::new().prefix("coflow-token-dir-").tempdir().unwrap();
        let dir = guard.path();
        let e = ClusterToken::from_file(dir).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("cannot read cluster token file {}: a directory, not a regular file", dir.display())
        );
        assert!(std::error::Error::source(&e).is_none());
    }
}
