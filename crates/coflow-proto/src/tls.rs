//! Identity: mutual TLS 1.3 with certificates from one cluster CA, and the roles those
//! certificates carry.
//!
//! Every certificate the cluster issues carries exactly one subject alternative name URI that
//! says who holds it:
//! - `coflow://coordinator`: the coordinator;
//! - `coflow://agent/N`: the agent of machine `N`, the only holder that may register machine
//!   `N`, heartbeat for it, announce its puts and gets, watch its rates, and open or accept its
//!   data connections;
//! - `coflow://client/NAME`: a framework's client, which may use the coflow API only (register,
//!   put, get, unregister, seal, status); a coflow belongs to the client that registered it, and
//!   only that client may unregister or seal it;
//! - `coflow://admin`: an operator, who may use the coflow API and unregister or seal any
//!   coflow.
//!
//! Both sides of every connection verify the other against the cluster CA (a plaintext peer, or
//! one signed by another CA, fails the handshake); a server then reads the caller's [`Role`]
//! from its certificate and the services decide with [`Peer`] what it may do. In TLS mode the
//! cluster token is not needed: the certificate and its key are the secret, and one secret per
//! member (revocable by reissuing the CA) is what a TLS deployment wants anyway.
//!
//! Refused handshakes are logged at warn once per peer address and kind of refusal
//! ([`RefusalLog`]), so a peer that retries in a loop cannot flood the log.

use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use tokio::io::{AsyncRead, AsyncWrite};
use tonic::service::Interceptor;
use tonic::{Request, Status};

use crate::auth::{AUTHORIZATION, ClusterToken};

/// How long a peer may take to finish its TLS handshake; in token mode, to send the first bytes of
/// a gRPC connection.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The three PEM files a member of a TLS cluster needs: the cluster CA's certificate, its own
/// certificate and its own private key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// The cluster CA's certificate (`ca.crt`).
    pub ca: PathBuf,
    /// This member's certificate, signed by the CA.
    pub cert: PathBuf,
    /// This member's private key (PKCS#8 PEM).
    pub key: PathBuf,
}

impl TlsFiles {
    /// The three files, or an error naming the flag or field that is missing when only some are
    /// given (`prefix` is e.g. `--tls-` or `tls_`); `None` when none is given.
    pub fn from_parts(
        prefix: &str,
        ca: Option<PathBuf>,
        cert: Option<PathBuf>,
        key: Option<PathBuf>,
    ) -> Result<Option<TlsFiles>, TlsError> {
        match (ca, cert, key) {
            (None, None, None) => Ok(None),
            (Some(ca), Some(cert), Some(key)) => Ok(Some(TlsFiles { ca, cert, key })),
            (ca, cert, _) => {
                let missing = if ca.is_none() {
                    "ca"
                } else if cert.is_none() {
                    "cert"
                } else {
                    "key"
                };
                Err(TlsError::Incomplete(format!("{prefix}{missing}")))
            }
        }
    }

    /// [`TlsFiles::from_parts`] of a configuration file's `tls_ca`, `tls_cert` and `tls_key`, or
    /// the field at fault and why: an empty path names no file, and is refused rather than read
    /// as the working directory or the file's own.
    pub fn from_fields(
        ca: &Option<PathBuf>,
        cert: &Option<PathBuf>,
        key: &Option<PathBuf>,
    ) -> Result<Option<TlsFiles>, (&'static str, String)> {
        for (field, path) in [("tls_ca", ca), ("tls_cert", cert), ("tls_key", key)] {
            if path.as_ref().is_some_and(|p| p.as_os_str().is_empty()) {
                return Err((field, "is empty: name a file, or leave the field out".into()));
            }
        }
        TlsFiles::from_parts("tls_", ca.clone(), cert.clone(), key.clone())
            .map_err(|e| ("tls_ca, tls_cert, tls_key", e.to_string()))
    }
}

/// Who a certificate says its holder is.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// The coordinator.
    Coordinator,
    /// The agent of this machine.
    Agent(u32),
    /// A framework's client of this name.
    Client(String),
    /// An operator: a client that may unregister or seal any coflow.
    Admin,
}

/// The URI scheme of role names.
const SCHEME: &str = "coflow://";

impl Role {
    /// The role's URI, e.g. `coflow://agent/7`.
    pub fn uri(&self) -> String {
        match self {
            Role::Coordinator => format!("{SCHEME}coordinator"),
            Role::Agent(m) => format!("{SCHEME}agent/{m}"),
            Role::Client(name) => format!("{SCHEME}client/{name}"),
            Role::Admin => format!("{SCHEME}admin"),
        }
    }

    /// Parses a role URI; `None` if it is not one.
    pub fn from_uri(uri: &str) -> Option<Role> {
        let rest = uri.strip_prefix(SCHEME)?;
        if rest == "coordinator" {
            return Some(Role::Coordinator);
        }
        if rest == "admin" {
            return Some(Role::Admin);
        }
        if let Some(m) = rest.strip_prefix("agent/") {
            if m.is_empty() || m.len() > 10 || !m.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            return m.parse().ok().map(Role::Agent);
        }
        let name = rest.strip_prefix("client/")?;
        valid_client_name(name).then(|| Role::Client(name.to_string()))
    }

    /// The role named in a certificate: its one `coflow://` subject alternative name URI.
    pub fn from_cert(der: &[u8]) -> Result<Role, TlsError> {
        let bad = |why: &str| TlsError::NoRole(why.to_string());
        let (_, cert) = x509_parser::parse_x509_certificate(der).map_err(|e| bad(&format!("not X.509: {e}")))?;
        let san = cert
            .subject_alternative_name()
            .map_err(|e| bad(&format!("subject alternative names: {e}")))?
            .ok_or_else(|| bad("no subject alternative names"))?;
        let mut roles = san.value.general_names.iter().filter_map(|n| match n {
            x509_parser::extensions::GeneralName::URI(u) if u.starts_with(SCHEME) => Some(*u),
            _ => None,
        });
        let uri = roles.next().ok_or_else(|| bad("no coflow:// URI"))?;
        if roles.next().is_some() {
            return Err(bad("more than one coflow:// URI"));
        }
        Role::from_uri(uri).ok_or_else(|| bad(&format!("malformed role {uri:?}")))
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.uri())
    }
}

/// Whether `name` may name a client: 1 to 64 of `A-Z a-z 0-9 . _ -`, so that it is also a
/// safe file name.
pub fn valid_client_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name != "."
        && name != ".."
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
}

/// What can go wrong setting TLS up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// Only some of the three files were given.
    #[error("TLS needs a CA, a certificate and a key: `{0}` is missing")]
    Incomplete(String),
    /// A file could not be read.
    #[error("cannot read {path}: {reason}")]
    File {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// A file is not what it should be.
    #[error("{path}: {reason}")]
    Bad {
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// A certificate names no role.
    #[error("certificate has no coflow role: {0}")]
    NoRole(String),
    /// rustls refused the configuration (its message is part of this one, not a source, so
    /// that it is said once).
    #[error("TLS configuration: {0}")]
    Rustls(rustls::Error),
}

impl From<rustls::Error> for TlsError {
    fn from(e: rustls::Error) -> TlsError {
        TlsError::Rustls(e)
    }
}

fn bad(path: &Path, reason: impl fmt::Display) -> TlsError {
    TlsError::Bad { path: path.display().to_string(), reason: reason.to_string() }
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    crate::files::read_small(path, crate::files::SMALL_FILE_MAX)
        .map_err(|e| TlsError::File { path: path.display().to_string(), reason: e.to_string() })
}

/// The permission bits of the file at `path` if every user may read it.
fn world_readable(path: &Path) -> Option<u32> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path).ok()?.permissions().mode() & 0o7777;
    (mode & 0o004 != 0).then_some(mode)
}

/// The rustls provider everything here uses: ring (no C toolchain beyond `cc`, unlike aws-lc).
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A member's loaded TLS identity: the CA it trusts, its certificate chain and key, the role its
/// certificate names, and the log of refused peers it shares with its servers.
#[derive(Clone)]
pub struct TlsContext {
    pem: Arc<(Vec<u8>, Vec<u8>, Vec<u8>)>,
    role: Role,
    refusals: Arc<RefusalLog>,
    grpc_server: Arc<rustls::ServerConfig>,
    data_server: Arc<rustls::ServerConfig>,
    data_client: Arc<rustls::ClientConfig>,
}

impl fmt::Debug for TlsContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsContext").field("role", &self.role).finish_non_exhaustive()
    }
}

impl TlsContext {
    /// Loads and checks the three files: the CA parses, the certificate names a role, is within
    /// its validity dates and is signed by the CA (chaining to it for the uses of its role), and
    /// the key parses and goes with the certificate. So a member whose own certificate every
    /// peer would refuse does not start; the error names the file and what is wrong.
    pub fn load(files: &TlsFiles) -> Result<TlsContext, TlsError> {
        TlsContext::load_with(files, true)
    }

    /// As [`TlsContext::load`], without checking the certificate against the CA or its dates:
    /// for tests that play a member of another cluster, or one whose certificate has expired,
    /// which its peers must refuse.
    pub fn load_unverified(files: &TlsFiles) -> Result<TlsContext, TlsError> {
        TlsContext::load_with(files, false)
    }

    fn load_with(files: &TlsFiles, verify: bool) -> Result<TlsContext, TlsError> {
        let (ca, cert, key) = (read(&files.ca)?, read(&files.cert)?, read(&files.key)?);
        let context = TlsContext::from_pem(&ca, &cert, &key, verify.then_some(files.ca.as_path())).map_err(
            |(which, reason)| {
                let path = match which {
                    0 => &files.ca,
                    1 => &files.cert,
                    _ => &files.key,
                };
                bad(path, reason)
            },
        )?;
        if let Some(mode) = world_readable(&files.key) {
            tracing::warn!(
                file = %files.key.display(),
                "the private key is readable by every user of this machine (mode {mode:04o}): whoever reads it \
                 can act as this member; make it readable by its owner (and group) only, e.g. `chmod 600`"
            );
        }
        // Peers do not check a trust anchor's dates, so an expired CA still works: said, not refused.
        if let Some(end) = ca_expiry(&ca).filter(|&end| end < now_secs()) {
            tracing::warn!(
                file = %files.ca.display(),
                "the CA certificate expired since {}: members still trust it, but `coflow certs issue` \
                 refuses it; make a new CA and issue every member's certificate again",
                utc(end)
            );
        }
        Ok(context)
    }

    /// The same from PEM text, verifying the certificate ([`verify_own`]) against the CA of
    /// the file `verify` names, if given; the error says which of the three (0, 1, 2) is wrong.
    fn from_pem(ca: &[u8], cert: &[u8], key: &[u8], verify: Option<&Path>) -> Result<TlsContext, (u8, String)> {
        let mut roots = RootCertStore::empty();
        let mut n = 0;
        for c in CertificateDer::pem_slice_iter(ca) {
            let c = c.map_err(|e| (0, format!("not a PEM certificate: {}", pem_error(&e))))?;
            roots.add(c).map_err(|e| (0, format!("not a CA certificate: {e}")))?;
            n += 1;
        }
        if n == 0 {
            return Err((0, "no certificate in the file".into()));
        }
        let chain = CertificateDer::pem_slice_iter(cert)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| (1, format!("not a PEM certificate: {}", pem_error(&e))))?;
        let leaf = chain.first().ok_or((1, "no certificate in the file".to_string()))?;
        let role = Role::from_cert(leaf).map_err(|e| (1, e.to_string()))?;
        let private =
            PrivateKeyDer::from_pem_slice(key).map_err(|e| (2, format!("not a PEM private key: {}", pem_error(&e))))?;
        let roots = Arc::new(roots);
        if let Some(ca_file) = verify {
            verify_own(&chain, &roots, &role, ca_file).map_err(|reason| match not_a_ca(ca) {
                // The CA file holds a member's certificate, say: it is the one at fault.
                Some(why) if reason.starts_with("not signed by") => {
                    (0, format!("is not a CA certificate ({why}); make a CA with `coflow certs init`"))
                }
                _ => (1, reason),
            })?;
        }
        let configs = (|| {
            Ok::<_, TlsError>((
                server_config(&roots, &chain, &private, &[b"h2"])?,
                server_config(&roots, &chain, &private, &[])?,
                data_client_config(&roots, &chain, &private)?,
            ))
        })();
        let (grpc_server, data_server, data_client) =
            configs.map_err(|e| (2, format!("does not go with the certificate: {e}")))?;
        Ok(TlsContext {
            pem: Arc::new((ca.to_vec(), cert.to_vec(), key.to_vec())),
            role,
            refusals: Arc::new(RefusalLog::default()),
            grpc_server,
            data_server,
            data_client,
        })
    }

    /// The role this member's own certificate names.
    pub fn role(&self) -> &Role {
        &self.role
    }

    /// The log of refused peers.
    pub fn refusals(&self) -> &Arc<RefusalLog> {
        &self.refusals
    }

    /// The gRPC server configuration: TLS 1.3 only, the peer must present a certificate signed
    /// by the cluster CA, ALPN `h2`.
    pub fn grpc_server_config(&self) -> Arc<rustls::ServerConfig> {
        self.grpc_server.clone()
    }

    /// The data plane's server configuration: as gRPC's, without ALPN.
    pub fn data_server_config(&self) -> Arc<rustls::ServerConfig> {
        self.data_server.clone()
    }

    /// The data plane's client configuration: TLS 1.3, presenting this member's certificate,
    /// and accepting a server whose certificate chains to the cluster CA and names an agent (the
    /// host name is not checked: which agent it must be is checked after the handshake with
    /// [`peer_role`]).
    pub fn data_client_config(&self) -> Arc<rustls::ClientConfig> {
        self.data_client.clone()
    }

    /// tonic's client TLS settings: trust the cluster CA, present this member's certificate,
    /// check the server's host name against the URL's.
    pub fn channel_config(&self) -> tonic::transport::ClientTlsConfig {
        let (ca, cert, key) = &*self.pem;
        tonic::transport::ClientTlsConfig::new()
            .ca_certificate(tonic::transport::Certificate::from_pem(ca))
            .identity(tonic::transport::Identity::from_pem(cert, key))
    }
}

/// What is wrong with a PEM file, with section names as text.
fn pem_error(e: &rustls_pki_types::pem::Error) -> String {
    use rustls_pki_types::pem::Error as E;
    match e {
        E::MissingSectionEnd { end_marker } => {
            format!("truncated: its {} section has no END line", String::from_utf8_lossy(end_marker))
        }
        E::IllegalSectionStart { line } => format!("malformed BEGIN line {:?}", String::from_utf8_lossy(line)),
        E::NoItemsFound => "none in the file".to_string(),
        e => e.to_string(),
    }
}

/// Checks a member's own certificate (`chain[0]`, the rest being intermediates) as its peers
/// will, now: within its validity dates, and signed by the CA in `ca_file` (`roots`) for the uses
/// of its role (serving for the coordinator, connecting for clients and the admin, both for
/// agents). Else the reason, naming the CA file where it matters.
fn verify_own(
    chain: &[CertificateDer<'static>],
    roots: &Arc<RootCertStore>,
    role: &Role,
    ca_file: &Path,
) -> Result<(), String> {
    use rustls::CertificateError as C;
    let (leaf, intermediates) = chain.split_first().ok_or("no certificate in the file")?;
    let now = UnixTime::now();
    let (_, cert) = x509_parser::parse_x509_certificate(leaf).map_err(|e| format!("not X.509: {e}"))?;
    let secs = now_secs();
    let validity = cert.validity();
    if secs > validity.not_after.timestamp() {
        return Err(format!(
            "expired since {} (issue a new one with `coflow certs issue --force`)",
            utc(validity.not_after.timestamp())
        ));
    }
    if secs < validity.not_before.timestamp() {
        return Err(format!(
            "not yet valid: valid from {} (is this machine's clock right?)",
            utc(validity.not_before.timestamp())
        ));
    }
    let serves = !matches!(role, Role::Client(_) | Role::Admin);
    let connects = !matches!(role, Role::Coordinator);
    let mut verified = Ok(());
    if serves {
        let parsed = rustls::server::ParsedCertificate::try_from(leaf).map_err(|e| e.to_string())?;
        let algs = provider().signature_verification_algorithms.all;
        verified = rustls::client::verify_server_cert_signed_by_trust_anchor(&parsed, roots, intermediates, now, algs);
    }
    if connects && verified.is_ok() {
        let verifier = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider())
            .build()
            .map_err(|e| format!("the CA in {}: {e}", ca_file.display()))?;
        verified = verifier.verify_client_cert(leaf, intermediates, now).map(|_| ());
    }
    verified.map_err(|e| match e {
        rustls::Error::InvalidCertificate(C::UnknownIssuer | C::BadSignature) => {
            format!("not signed by the CA in {}", ca_file.display())
        }
        rustls::Error::InvalidCertificate(C::InvalidPurpose | C::InvalidPurposeContext { .. }) => {
            let uses = match (serves, connects) {
                (true, true) => "serving and connecting",
                (true, false) => "serving",
                _ => "connecting",
            };
            format!("not made for {uses}, as {role} needs (issue it again with `coflow certs issue`)")
        }
        e => format!("does not verify against the CA in {}: {e}", ca_file.display()),
    })
}

/// Why the first certificate in `pem`, given as the CA's, may not sign certificates, if it may
/// not ([`not_ca`]).
fn not_a_ca(pem: &[u8]) -> Option<&'static str> {
    std::str::from_utf8(pem).ok().and_then(not_ca)
}

/// Why the certificate in `pem` may not sign certificates, if it may not: verifiers accept as an
/// issuer only a certificate whose basic constraints say CA:TRUE and whose key usage, if it has
/// one, includes keyCertSign. A certificate that does not parse is left to the parse that reports
/// it.
pub(crate) fn not_ca(pem: &str) -> Option<&'static str> {
    first_cert(pem.as_bytes(), |cert| {
        if !cert.is_ca() {
            return Some("no basicConstraints CA:TRUE");
        }
        match cert.key_usage() {
            Ok(Some(usage)) if !usage.value.key_cert_sign() => Some("its keyUsage lacks keyCertSign"),
            Ok(_) => None,
            Err(_) => Some("its keyUsage extension does not parse"),
        }
    })
    .flatten()
}

/// When the first certificate in `pem` (a CA's) stops being valid, in seconds since the Unix
/// epoch, if it parses.
pub(crate) fn ca_expiry(pem: &[u8]) -> Option<i64> {
    first_cert(pem, |cert| cert.validity().not_after.timestamp())
}

/// `f` of the first certificate in `pem`, if it parses.
pub(crate) fn first_cert<T>(
    pem: &[u8],
    f: impl FnOnce(&x509_parser::certificate::X509Certificate<'_>) -> T,
) -> Option<T> {
    let der = CertificateDer::from_pem_slice(pem).ok()?;
    let (_, cert) = x509_parser::parse_x509_certificate(&der).ok()?;
    Some(f(&cert))
}

/// Seconds since the Unix epoch, now.
pub(crate) fn now_secs() -> i64 {
    i64::try_from(UnixTime::now().as_secs()).unwrap_or(i64::MAX)
}

/// `secs` since the Unix epoch as a UTC date and time, `2031-01-01 00:00:00 UTC`.
pub(crate) fn utc(secs: i64) -> String {
    // Days to a civil date: Howard Hinnant's `civil_from_days`.
    let (days, day_secs) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let (era, doe) = (z.div_euclid(146_097), z.rem_euclid(146_097));
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let (h, m, s) = (day_secs / 3600, day_secs / 60 % 60, day_secs % 60);
    format!("{year:04}-{month:02}-{day:02} {h:02}:{m:02}:{s:02} UTC")
}

fn server_config(
    roots: &Arc<RootCertStore>,
    chain: &[CertificateDer<'static>],
    key: &PrivateKeyDer<'static>,
    alpn: &[&[u8]],
) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let verifier = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider())
        .build()
        .map_err(|e| rustls::Error::General(e.to_string()))?;
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain.to_vec(), key.clone_key())?;
    cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(Arc::new(cfg))
}

fn data_client_config(
    roots: &Arc<RootCertStore>,
    chain: &[CertificateDer<'static>],
    key: &PrivateKeyDer<'static>,
) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    let verifier = AgentServerVerifier { roots: roots.clone(), algs: provider().signature_verification_algorithms };
    let cfg = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_client_auth_cert(chain.to_vec(), key.clone_key())?;
    Ok(Arc::new(cfg))
}

/// Checks a data-plane server: chained to the cluster CA, naming an agent.
#[derive(Debug)]
struct AgentServerVerifier {
    roots: Arc<RootCertStore>,
    algs: rustls::crypto::WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for AgentServerVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let cert = rustls::server::ParsedCertificate::try_from(end_entity)?;
        rustls::client::verify_server_cert_signed_by_trust_anchor(
            &cert,
            &self.roots,
            intermediates,
            now,
            self.algs.all,
        )?;
        match Role::from_cert(end_entity) {
            Ok(Role::Agent(_)) => Ok(ServerCertVerified::assertion()),
            _ => Err(rustls::Error::InvalidCertificate(rustls::CertificateError::ApplicationVerificationFailure)),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algs)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algs)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algs.supported_schemes()
    }
}

/// The role of the peer of an established connection, from its verified certificate.
pub fn peer_role(certs: Option<&[CertificateDer<'_>]>) -> Option<Role> {
    certs.and_then(|c| c.first()).and_then(|c| Role::from_cert(c).ok())
}

/// Why a peer was refused, for the log: each kind is warned of once an hour per peer address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// It did not speak TLS (a plaintext client), or sent garbage.
    NotTls,
    /// Its certificate is not signed by the cluster CA, or it presented none.
    BadCertificate,
    /// It refused our certificate (it trusts another CA).
    RejectedUs,
    /// Its certificate's role may not do what it asked.
    WrongRole,
    /// The handshake timed out or failed otherwise.
    Handshake,
    /// Its member holds the most gRPC connections one member may (1,024); in token mode, its
    /// address group the most one address may (2,048).
    TooManyConnections,
    /// It did not finish its TLS handshake (in token mode: sent nothing) within
    /// [`HANDSHAKE_TIMEOUT`] of its connection's accept, its wait for a turn included.
    Silent,
    /// It asked for what it may not have, whatever its certificate (a data request whose ticket
    /// is not its flow's, a machine live under another session); the detail says what.
    NotAllowed,
    /// In token mode, its call carried another cluster's token, or none.
    BadToken,
}

impl Refusal {
    fn describe(self) -> &'static str {
        match self {
            Refusal::NotTls => "not TLS (a plaintext peer?)",
            Refusal::BadCertificate => "certificate missing or not signed by the cluster CA",
            Refusal::RejectedUs => {
                "the peer refused this member's certificate (its alert says why: UnknownCA, it trusts another CA; \
                 BadCertificate, often a host name the certificate does not name; CertificateExpired)"
            }
            Refusal::WrongRole => "the certificate's role may not do this",
            Refusal::Handshake => "TLS handshake failed",
            Refusal::TooManyConnections => "its member (in token mode, its address) holds the most connections one may",
            Refusal::Silent => "no TLS handshake, or no first bytes in token mode, in time (a silent peer?)",
            Refusal::NotAllowed => "it asked for what it may not have",
            Refusal::BadToken => "not this cluster's token (another cluster's, or none)",
        }
    }

    /// Classifies a failed server-side handshake.
    pub fn of_handshake(e: &std::io::Error) -> Refusal {
        match e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
            Some(rustls::Error::InvalidMessage(_) | rustls::Error::InappropriateHandshakeMessage { .. })
            | Some(rustls::Error::InappropriateMessage { .. }) => Refusal::NotTls,
            Some(rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented) => {
                Refusal::BadCertificate
            }
            Some(rustls::Error::AlertReceived(_)) => Refusal::RejectedUs,
            _ => Refusal::Handshake,
        }
    }
}

/// The rustls errors in `e` and the errors it comes from, bare or wrapped in an I/O error (as a
/// TLS stream gives them).
fn rustls_errors<'e>(e: &'e (dyn std::error::Error + 'static)) -> impl Iterator<Item = &'e rustls::Error> {
    std::iter::successors(Some(e), |e| e.source()).filter_map(|e| {
        let wrapped = e.downcast_ref::<std::io::Error>().and_then(|io| io.get_ref());
        wrapped.map_or(e, |i| i as &dyn std::error::Error).downcast_ref::<rustls::Error>()
    })
}

/// The TLS alert by which a service refused this member's certificate, if that is what `e` (or
/// an error it comes from) says: a certificate of another CA, expired or not yet valid, or of no
/// use to the service.
pub fn certificate_refused(e: &(dyn std::error::Error + 'static)) -> Option<rustls::AlertDescription> {
    use rustls::AlertDescription as A;
    const REFUSALS: [A; 8] = [
        A::BadCertificate,
        A::UnsupportedCertificate,
        A::CertificateRevoked,
        A::CertificateExpired,
        A::CertificateUnknown,
        A::UnknownCA,
        A::AccessDenied,
        A::CertificateRequired,
    ];
    let received = rustls_errors(e).find_map(|r| match r {
        rustls::Error::AlertReceived(alert) => Some(*alert),
        _ => None,
    });
    // An alert heard after the handshake (TLS 1.3) reaches the caller as an I/O error carrying
    // only rustls's words for it.
    let said = || {
        std::iter::successors(Some(e), |e| e.source()).find_map(|e| {
            let name = e.to_string().strip_prefix("received fatal alert: ")?.to_string();
            REFUSALS.into_iter().find(|a| format!("{a:?}") == name)
        })
    };
    received.or_else(said).filter(|a| REFUSALS.contains(a))
}

/// What to ask of a client's certificate that a service refused with `alert`.
pub fn client_certificate_question(alert: rustls::AlertDescription) -> &'static str {
    match alert {
        // Of the cluster, but not for this use: a coordinator's or an agent's.
        rustls::AlertDescription::UnsupportedCertificate => {
            "is it a client's or an admin's (`coflow certs issue DIR --client NAME` or `--admin`), not a service's?"
        }
        _ => "is it signed by the cluster CA, and valid now?",
    }
}

/// What is wrong with a service's certificate that this member refused, if that is what `e` (or
/// an error it comes from) says, and what to do about it: a host name the certificate does not
/// name, another CA's signature, or dates it is not valid at.
pub fn service_certificate_refused(e: &(dyn std::error::Error + 'static)) -> Option<&'static str> {
    use rustls::CertificateError as C;
    let c = rustls_errors(e).find_map(|r| match r {
        rustls::Error::InvalidCertificate(c) => Some(c),
        _ => None,
    })?;
    match c {
        C::NotValidForName | C::NotValidForNameContext { .. } => Some(
            "the service's certificate does not name the host in this URL: use a host it names, or issue it for \
             this one (`coflow certs issue --coordinator HOST`, or `--agent N --host HOST`)",
        ),
        C::UnknownIssuer | C::BadSignature => {
            Some("the service's certificate is not signed by this member's CA: is it another cluster's service?")
        }
        C::Expired | C::ExpiredContext { .. } | C::NotValidYet | C::NotValidYetContext { .. } => {
            Some("the service's certificate is not valid now: issue it again (or check the clocks)")
        }
        _ => None,
    }
}

/// How long after a warning the refusals of the same address and kind are logged at debug.
const REFUSAL_WARN_EVERY: Duration = Duration::from_secs(3600);

/// The peers refused so far, by address and kind: a refusal is logged at warn if none of its
/// address and kind was warned of within the hour, saying how many were refused since that
/// warning; the rest at debug. Bounded: past 4,096 entries it starts afresh.
#[derive(Debug, Default)]
pub struct RefusalLog {
    /// When each was last warned of, and how many were refused since.
    seen: Mutex<HashMap<(IpAddr, Refusal), (Instant, u64)>>,
}

impl RefusalLog {
    /// Records that `peer` was refused on `what` (e.g. "gRPC", "data plane"), logging it at warn
    /// if no refusal of this kind for this address was warned of within the hour. Returns
    /// whether it was logged at warn.
    pub fn refuse(&self, peer: SocketAddr, what: &str, kind: Refusal, detail: &dyn fmt::Display) -> bool {
        let warn = self.note(peer.ip(), kind, Instant::now());
        let why = kind.describe();
        match warn {
            Some(0) => {
                tracing::warn!(%peer, %detail, "refused a {what} connection: {why} (further refusals of this peer within the hour are logged at debug)")
            }
            Some(n) => {
                tracing::warn!(%peer, %detail, "refused a {what} connection: {why} ({n} more since the last warning, logged at debug)")
            }
            None => tracing::debug!(%peer, %detail, "refused a {what} connection: {why}"),
        }
        warn.is_some()
    }

    /// Notes a refusal of `ip` for `kind` at `now`: `Some(n)` if it is to be warned of, `n` the
    /// refusals since the last warning, else `None`.
    fn note(&self, ip: IpAddr, kind: Refusal, now: Instant) -> Option<u64> {
        let mut seen = self.seen.lock().expect("refusal log lock");
        if seen.len() >= 4096 && !seen.contains_key(&(ip, kind)) {
            seen.clear();
        }
        match seen.get_mut(&(ip, kind)) {
            Some((warned, since)) if now.saturating_duration_since(*warned) < REFUSAL_WARN_EVERY => {
                *since += 1;
                None
            }
            Some((warned, since)) => {
                *warned = now;
                Some(std::mem::take(since))
            }
            None => {
                seen.insert((ip, kind), (now, 0));
                Some(0)
            }
        }
    }
}

/// Accepts TLS on `sock` within [`HANDSHAKE_TIMEOUT`], logging a refusal once per peer.
pub async fn accept<S: AsyncRead + AsyncWrite + Unpin>(
    acceptor: &tokio_rustls::TlsAcceptor,
    sock: S,
    peer: SocketAddr,
    what: &str,
    refusals: &RefusalLog,
) -> Option<tokio_rustls::server::TlsStream<S>> {
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(sock)).await {
        Ok(Ok(s)) => Some(s),
        Ok(Err(e)) => {
            refusals.refuse(peer, what, Refusal::of_handshake(&e), &e);
            None
        }
        Err(_) => {
            refusals.refuse(peer, what, Refusal::Handshake, &"timed out");
            None
        }
    }
}

/// The data plane's server side: accepts TLS on `sock` and checks that the peer is an agent;
/// refusals are logged once per peer. Returns the stream and the peer's machine.
pub async fn accept_agent<S: AsyncRead + AsyncWrite + Unpin>(
    tls: &TlsContext,
    sock: S,
    peer: SocketAddr,
) -> Option<(tokio_rustls::server::TlsStream<S>, u32)> {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls.data_server_config());
    let stream = accept(&acceptor, sock, peer, "data plane", &tls.refusals).await?;
    match peer_role(stream.get_ref().1.peer_certificates()) {
        Some(Role::Agent(m)) => Some((stream, m)),
        other => {
            let who = other.map_or_else(|| "no role".to_string(), |r| r.uri());
            tls.refusals.refuse(peer, "data plane", Refusal::WrongRole, &format!("{who} is not an agent"));
            None
        }
    }
}

/// The data plane's client side: TLS to the agent of `machine` over `sock`, refusing a server
/// whose certificate is not that agent's.
pub async fn connect_agent<S: AsyncRead + AsyncWrite + Unpin>(
    tls: &TlsContext,
    sock: S,
    machine: u32,
) -> Result<tokio_rustls::client::TlsStream<S>, String> {
    let connector = tokio_rustls::TlsConnector::from(tls.data_client_config());
    // The name is only sent (SNI); the verifier checks the role instead.
    let name = ServerName::try_from(format!("agent-{machine}.coflow")).map_err(|e| e.to_string())?;
    let stream = tokio::time::timeout(HANDSHAKE_TIMEOUT, connector.connect(name, sock))
        .await
        .map_err(|_| "TLS handshake timed out".to_string())?
        .map_err(|e| format!("TLS handshake: {e}"))?;
    match peer_role(stream.get_ref().1.peer_certificates()) {
        Some(Role::Agent(m)) if m == machine => Ok(stream),
        other => Err(format!(
            "the source's certificate names {}, not agent {machine}",
            other.map_or_else(|| "no role".to_string(), |r| r.uri())
        )),
    }
}

/// How a cluster authenticates its members: a shared token (for trusted networks: the token
/// crosses the network in clear text and anyone holding it may act as any member), or mutual
/// TLS with roles in certificates.
#[derive(Clone, Debug)]
pub enum Security {
    /// The shared token.
    Token(ClusterToken),
    /// Mutual TLS.
    Tls(TlsContext),
}

impl From<ClusterToken> for Security {
    fn from(t: ClusterToken) -> Security {
        Security::Token(t)
    }
}

impl From<TlsContext> for Security {
    fn from(t: TlsContext) -> Security {
        Security::Tls(t)
    }
}

impl Security {
    /// The token, in token mode.
    pub fn token(&self) -> Option<&ClusterToken> {
        match self {
            Security::Token(t) => Some(t),
            Security::Tls(_) => None,
        }
    }

    /// The TLS identity, in TLS mode.
    pub fn tls(&self) -> Option<&TlsContext> {
        match self {
            Security::Tls(t) => Some(t),
            Security::Token(_) => None,
        }
    }

    /// The server interceptor that authenticates every call and records who made it.
    pub fn authenticate(&self) -> Authenticate {
        match self {
            Security::Token(t) => Authenticate { token: Some(t.clone()), refusals: Arc::default() },
            Security::Tls(t) => Authenticate { token: None, refusals: t.refusals.clone() },
        }
    }

    /// The client interceptor that attaches the token (in token mode; nothing with TLS).
    pub fn attach(&self) -> crate::TokenAttach {
        crate::TokenAttach::new(self.token().cloned())
    }

    /// A gRPC endpoint for `url` (http:// in token mode, https:// with TLS; a bare `host:port`
    /// takes the scheme of the mode), with TLS configured.
    pub fn endpoint(&self, url: &str) -> Result<tonic::transport::Endpoint, String> {
        let (url, ep) = endpoint_url(url, self.tls().is_some())?;
        match self {
            Security::Token(_) => Ok(ep),
            Security::Tls(t) => ep.tls_config(t.channel_config()).map_err(|e| format!("url {url:?}: {e}")),
        }
    }
}

/// `url` as [`Security::endpoint`] takes it, in the mode with TLS or without, before TLS is
/// configured: the URL with its scheme, and its endpoint; or why it cannot be taken (another
/// scheme than the mode's, no URL at all, or more or less than a host and an optional port: a
/// port that is no TCP port would be dialled as the scheme's default, and a path, a query or user
/// information would be dropped). Reads no file.
pub fn endpoint_url(url: &str, tls: bool) -> Result<(String, tonic::transport::Endpoint), String> {
    let want = if tls { "https" } else { "http" };
    // A scheme is case-insensitive (RFC 3986 §3.1): taken in lower case.
    let url = match url.split_once("://") {
        Some((scheme, rest)) => format!("{}://{rest}", scheme.to_ascii_lowercase()),
        None => format!("{want}://{url}"),
    };
    if !url.starts_with(&format!("{want}://")) {
        return Err(format!(
            "url {url:?} must start with {want}:// ({})",
            if tls {
                "TLS is on: this member has TLS files"
            } else {
                "TLS is off: this member has a cluster token and no TLS files"
            }
        ));
    }
    let ep = tonic::transport::Endpoint::from_shared(url.clone()).map_err(|e| format!("url {url:?}: {e}"))?;
    let uri = ep.uri();
    let authority = uri.authority().map_or("", |a| a.as_str());
    let wrong = if authority.contains('@') {
        Some("user information has no place in it (the cluster token or certificate authenticates)".to_string())
    } else if uri.host().is_none_or(str::is_empty) {
        Some("it names no host".to_string())
    } else if uri.path() != "/" || uri.query().is_some() {
        Some("a path or a query has no place in it: the services answer at the root of their host and port".into())
    } else {
        port_of(authority).err()
    };
    match wrong {
        Some(why) => Err(format!("url {url:?}: {why}, as in {want}://10.0.0.1:7070")),
        None => Ok((url, ep)),
    }
}

/// The port an authority (`host[:port]`, an IPv6 host in brackets) names, if it names one; an
/// error if what follows the host's `:` is no TCP port (1 to 65535).
fn port_of(authority: &str) -> Result<Option<u16>, String> {
    let after_host = match authority.strip_prefix('[') {
        Some(rest) => rest.split_once(']').map_or("", |(_, after)| after),
        None => authority.find(':').map_or("", |i| &authority[i..]),
    };
    match after_host.strip_prefix(':') {
        None => Ok(None),
        Some(port) => match port.parse::<u16>() {
            Ok(n) if n > 0 && port.bytes().all(|b| b.is_ascii_digit()) => Ok(Some(n)),
            _ => Err(format!("its port {port:?} is no TCP port (1 to 65535)")),
        },
    }
}

/// Who made a call, as authenticated: put in each request's extensions by [`Authenticate`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Peer {
    /// A holder of the cluster token: anyone.
    Token,
    /// A TLS peer with this role.
    Tls(Role),
}

impl Peer {
    /// The caller of `req`, if it was authenticated.
    pub fn of<T>(req: &Request<T>) -> Option<&Peer> {
        req.extensions().get::<Peer>()
    }

    /// Whether the caller may use the coflow API (a client or the admin, or anyone in token
    /// mode).
    pub fn may_use_api(&self) -> bool {
        matches!(self, Peer::Token | Peer::Tls(Role::Client(_) | Role::Admin))
    }

    /// The identity that owns what this caller registers: its certificate's role URI, or empty
    /// for a token holder (in token mode every token holder is one identity).
    pub fn identity(&self) -> String {
        match self {
            Peer::Token => String::new(),
            Peer::Tls(r) => r.uri(),
        }
    }

    /// Whether the caller may act for the agent of `machine`.
    pub fn may_act_as_agent(&self, machine: u32) -> bool {
        match self {
            Peer::Token => true,
            Peer::Tls(Role::Agent(m)) => *m == machine,
            Peer::Tls(_) => false,
        }
    }

    /// Whether the caller is some agent.
    pub fn is_agent(&self) -> bool {
        matches!(self, Peer::Token | Peer::Tls(Role::Agent(_)))
    }

    /// Whether the caller's identity is proven by a certificate (not just a shared token).
    pub fn is_certified(&self) -> bool {
        matches!(self, Peer::Tls(_))
    }
}

impl fmt::Display for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Peer::Token => f.write_str("a token holder"),
            Peer::Tls(r) => write!(f, "{r}"),
        }
    }
}

/// A PERMISSION_DENIED status of error kind `permission-denied`.
pub fn permission_denied(message: impl Into<String>) -> Status {
    crate::ErrorKind::PermissionDenied.status(tonic::Code::PermissionDenied, message)
}

/// Checks that the caller of `req` passes `allowed`; else logs it (once per peer address) and
/// returns a `permission-denied` status naming `action`.
pub fn authorize<T>(req: &Request<T>, action: &str, allowed: impl FnOnce(&Peer) -> bool) -> Result<(), Status> {
    let Some(peer) = Peer::of(req) else {
        return Err(Status::unauthenticated("the call was not authenticated"));
    };
    if allowed(peer) {
        return Ok(());
    }
    if let (Some(addr), Some(log)) = (req.remote_addr(), req.extensions().get::<Arc<RefusalLog>>()) {
        log.refuse(addr, "gRPC", Refusal::WrongRole, &format!("{peer} may not {action}"));
    }
    Err(permission_denied(format!("{peer} may not {action}")))
}

/// The server interceptor: in token mode it checks the token; with TLS the handshake already
/// verified the certificate, and it reads the caller's role from it. Either way it records the
/// caller as a [`Peer`] in the request's extensions (and, with TLS, the refusal log, for
/// [`authorize`]).
#[derive(Clone, Debug)]
pub struct Authenticate {
    token: Option<ClusterToken>,
    /// The refusals, warned of once an hour per address: with TLS the context's, shared with its
    /// servers and [`authorize`]; in token mode this interceptor's own, of calls refused for
    /// their token.
    refusals: Arc<RefusalLog>,
}

impl Interceptor for Authenticate {
    fn call(&mut self, mut req: Request<()>) -> Result<Request<()>, Status> {
        let peer = match &self.token {
            Some(token) => match req.metadata().get(AUTHORIZATION) {
                Some(v) if v.as_bytes().strip_prefix(b"Bearer ").is_some_and(|t| token.matches(t)) => Peer::Token,
                v => {
                    let why = if v.is_some() { "wrong cluster token" } else { "missing cluster token" };
                    if let Some(addr) = req.remote_addr() {
                        self.refusals.refuse(addr, "gRPC", Refusal::BadToken, &why);
                    }
                    return Err(Status::unauthenticated(why));
                }
            },
            None => {
                let certs = req.peer_certs();
                let role = peer_role(certs.as_deref().map(|c| c.as_slice()))
                    .ok_or_else(|| Status::unauthenticated("no certificate with a coflow role"))?;
                Peer::Tls(role)
            }
        };
        req.extensions_mut().insert(peer);
        if self.token.is_none() {
            req.extensions_mut().insert(self.refusals.clone());
        }
        Ok(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A URL is a scheme, a host and an optional port, nothing else: a port that is no TCP port
    /// (which the connector would dial as the scheme's default, 80 or 443), a path or a query
    /// (which the channel drops) or user information is refused, naming the URL.
    #[test]
    fn a_url_is_a_host_and_a_port_that_is_a_port() {
        for good in
            ["http://10.0.0.1:7070", "10.0.0.1:7070", "http://h.example", "http://[fd00::1]:7070", "http://h:7070/"]
        {
            assert!(endpoint_url(good, false).is_ok(), "{good}");
        }
        assert!(endpoint_url("[fd00::1]:65535", true).is_ok());
        for (bad, says) in [
            ("http://10.0.0.1:65536", "port \"65536\" is no TCP port"),
            ("10.0.0.1:99999", "port \"99999\" is no TCP port"),
            ("http://10.0.0.1:0", "port \"0\" is no TCP port"),
            ("coordinator:abc", "port \"abc\" is no TCP port"),
            ("http://10.0.0.1:", "port \"\" is no TCP port"),
            ("http://10.0.0.1:+80", "port \"+80\" is no TCP port"),
            ("http://[fd00::1]:70000", "port \"70000\" is no TCP port"),
            ("http://:7070", "names no host"),
            ("http://10.0.0.1:7070/coflow", "a path or a query"),
            ("http://10.0.0.1:7070?x=1", "a path or a query"),
            ("http://user:pw@10.0.0.1:7070", "user information"),
        ] {
            let e = endpoint_url(bad, false).expect_err(bad);
            assert!(e.contains(says) && e.contains(bad), "{bad}: {e}");
        }
    }

    /// An I/O error as a transport wraps it, beneath an error of its own.
    #[derive(Debug)]
    struct Wrapped(std::io::Error);

    impl fmt::Display for Wrapped {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("transport error")
        }
    }

    impl std::error::Error for Wrapped {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    /// An alert heard after the handshake comes as an I/O error carrying rustls's words only:
    /// a refusal of the certificate is read from them, any other alert is not a refusal.
    #[test]
    fn a_refusal_heard_as_words_is_a_refusal() {
        let said = |words: &str| Wrapped(std::io::Error::new(std::io::ErrorKind::InvalidData, words.to_string()));
        let alert = |words: &str| certificate_refused(&said(words));
        use rustls::AlertDescription as A;
        assert_eq!(alert("received fatal alert: BadCertificate"), Some(A::BadCertificate));
        assert_eq!(alert("received fatal alert: UnsupportedCertificate"), Some(A::UnsupportedCertificate));
        assert_eq!(alert("received fatal alert: HandshakeFailure"), None, "not about the certificate");
        assert_eq!(alert("connection reset"), None);
        // The same alert as rustls's own error.
        let typed = std::io::Error::new(std::io::ErrorKind::InvalidData, rustls::Error::AlertReceived(A::UnknownCA));
        assert_eq!(certificate_refused(&Wrapped(typed)), Some(A::UnknownCA));
        assert!(client_certificate_question(A::UnsupportedCertificate).contains("not a service's"));
        assert!(client_certificate_question(A::UnknownCA).contains("signed by the cluster CA"));
    }

    /// A service certificate refused is told by why, through the errors it comes wrapped in.
    #[test]
    fn a_refused_service_certificate_says_why() {
        use rustls::CertificateError as C;
        let wrapped = |c: C| std::io::Error::new(std::io::ErrorKind::InvalidData, rustls::Error::InvalidCertificate(c));
        for (c, word) in [(C::NotValidForName, "host"), (C::UnknownIssuer, "CA"), (C::Expired, "not valid now")] {
            let why = service_certificate_refused(&wrapped(c)).expect("a reason");
            assert!(why.contains(word), "{why}");
        }
        assert_eq!(service_certificate_refused(&wrapped(C::BadEncoding)), None);
        assert_eq!(service_certificate_refused(&std::io::Error::other("reset")), None);
    }

    /// A key file others may read is told apart from one only its owner and group may.
    #[test]
    fn a_world_readable_key_is_found() {
        use std::os::unix::fs::PermissionsExt;
        let guard = tempfile::Builder::new().prefix("coflow-key-mode-").tempdir().unwrap();
        let path = guard.path().join("key");
        std::fs::write(&path, b"k").unwrap();
        for (mode, seen) in [(0o644, Some(0o644)), (0o604, Some(0o604)), (0o640, None), (0o600, None)] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            assert_eq!(world_readable(&path), seen, "{mode:o}");
        }
        std::fs::remove_file(&path).unwrap();
        assert_eq!(world_readable(&path), None, "no file");
    }

    /// A URL takes the mode's scheme: given, it must be that one (in any case); left out, it is
    /// added.
    #[test]
    fn an_endpoint_takes_the_scheme_of_the_security_mode() {
        let token = Security::Token(crate::ClusterToken::new("t").unwrap());
        assert_eq!(token.endpoint("127.0.0.1:7401").unwrap().uri().to_string(), "http://127.0.0.1:7401/");
        assert_eq!(token.endpoint("http://h:1").unwrap().uri().to_string(), "http://h:1/");
        assert_eq!(token.endpoint("HTTP://h:1").unwrap().uri().to_string(), "http://h:1/");
        assert!(token.endpoint("HTTPS://h:1").unwrap_err().contains("must start with http://"));
        let e = token.endpoint("https://h:1").unwrap_err();
        assert!(e.contains("must start with http://") && e.contains("no TLS files"), "{e}");
        assert!(token.endpoint("ftp://h:1").is_err());
    }

    /// A refusal is warned of once an hour per address and kind, with the count since the last
    /// warning; another address or kind is warned of at once.
    #[test]
    fn refusals_are_warned_of_once_an_hour_per_peer_and_kind() {
        let log = RefusalLog::default();
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let t = Instant::now();
        assert_eq!(log.note(a, Refusal::WrongRole, t), Some(0));
        assert_eq!(log.note(a, Refusal::WrongRole, t + Duration::from_secs(1)), None);
        assert_eq!(log.note(a, Refusal::WrongRole, t + Duration::from_secs(3599)), None);
        assert_eq!(log.note(b, Refusal::WrongRole, t), Some(0), "another address");
        assert_eq!(log.note(a, Refusal::NotAllowed, t), Some(0), "another kind");
        assert_eq!(log.note(a, Refusal::WrongRole, t + REFUSAL_WARN_EVERY), Some(2), "two since the warning");
        assert_eq!(log.note(a, Refusal::WrongRole, t + REFUSAL_WARN_EVERY), None);
        assert_eq!(log.note(a, Refusal::WrongRole, t + 2 * REFUSAL_WARN_EVERY), Some(1));
        assert!(log.refuse("10.0.0.3:1".parse().unwrap(), "gRPC", Refusal::WrongRole, &"x"));
        assert!(
            !log.refuse("10.0.0.3:2".parse().unwrap(), "gRPC", Refusal::WrongRole, &"x"),
            "the port is not the peer"
        );
    }

    /// A certificate alert is found however deep the transport wrapped it; other alerts and
    /// other errors are not a refused certificate.
    #[test]
    fn a_refused_certificate_is_told_by_its_alert() {
        let alert = |a| Wrapped(std::io::Error::new(std::io::ErrorKind::InvalidData, rustls::Error::AlertReceived(a)));
        use rustls::AlertDescription as A;
        for a in [A::UnknownCA, A::CertificateExpired, A::BadCertificate, A::CertificateRequired] {
            assert_eq!(certificate_refused(&alert(a)), Some(a));
        }
        assert_eq!(certificate_refused(&alert(A::HandshakeFailure)), None);
        let closed = Wrapped(std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset"));
        assert_eq!(certificate_refused(&closed), None);
    }

    #[test]
    fn role_uris_round_trip_and_malformed_ones_are_refused() {
        for r in
            [Role::Coordinator, Role::Agent(0), Role::Agent(u32::MAX), Role::Client("spark-1.a_b".into()), Role::Admin]
        {
            assert_eq!(Role::from_uri(&r.uri()), Some(r));
        }
        for bad in [
            "coflow://agent/",
            "coflow://agent/-1",
            "coflow://agent/+1",
            "coflow://agent/4294967296",
            "coflow://agent/1/2",
            "coflow://client/",
            "coflow://client/..",
            "coflow://client/a b",
            "coflow://client/a/b",
            "coflow://coordinator/x",
            "coflow://admin/x",
            "https://coordinator",
        ] {
            assert_eq!(Role::from_uri(bad), None, "{bad}");
        }
    }

    #[test]
    fn dates_are_told_in_utc() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc(1_924_992_000 + 3661), "2031-01-01 01:01:01 UTC");
        assert_eq!(utc(-1), "1969-12-31 23:59:59 UTC");
    }

    #[test]
    fn partial_tls_flags_name_the_missing_one() {
        let p = |s: &str| Some(PathBuf::from(s));
        assert!(TlsFiles::from_parts("--tls-", None, None, None).unwrap().is_none());
        let e = TlsFiles::from_parts("--tls-", p("a"), None, p("c")).unwrap_err();
        assert!(e.to_string().contains("--tls-cert"), "{e}");
        let e = TlsFiles::from_parts("tls_", p("a"), p("b"), None).unwrap_err();
        assert!(e.to_string().contains("tls_key"), "{e}");
    }
}
