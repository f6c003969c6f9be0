//! Making a cluster's certificates: a CA, and certificates it signs for the coordinator, agents
//! and clients, each naming its [`Role`] in a `coflow://` subject alternative name URI (and the
//! host names servers are reached by as DNS or IP names). What `coflow certs` runs.
//!
//! Keys are ECDSA P-256. The CA is valid for 10 years and may only sign end certificates
//! (path length 0); member certificates for 5 years. Agents' certificates serve and connect
//! (server and client authentication), the coordinator's serves, clients' connect.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
    SanType,
};

use crate::tls::{Role, valid_client_name};

/// What can go wrong making or writing certificates.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// A file exists and `force` was not given.
    #[error("{0} exists (pass --force to overwrite)")]
    Exists(String),
    /// A file could not be read or written.
    #[error("{path}: {reason}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// A host or client name is not acceptable.
    #[error("invalid {field} {value:?}: {reason}")]
    Invalid {
        /// Which input.
        field: &'static str,
        /// Its value.
        value: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// rcgen could not make or parse a certificate or key.
    #[error("certificate: {0}")]
    Rcgen(#[from] rcgen::Error),
}

fn io(path: &Path, e: std::io::Error) -> CertError {
    CertError::Io { path: path.display().to_string(), reason: e.to_string() }
}

/// Whom a certificate is for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Subject {
    /// The coordinator, reached at these host names or addresses.
    Coordinator {
        /// DNS names or IP addresses.
        hosts: Vec<String>,
    },
    /// The agent of machine `machine`, reached at these host names or addresses.
    Agent {
        /// Its machine id.
        machine: u32,
        /// DNS names or IP addresses.
        hosts: Vec<String>,
    },
    /// A client named `name`.
    Client {
        /// Its name (letters, digits, `.`, `_`, `-`).
        name: String,
    },
    /// The operator (`coflow://admin`): a client that may unregister or seal any coflow.
    Admin,
}

impl Subject {
    /// The role its certificate names.
    pub fn role(&self) -> Role {
        match self {
            Subject::Coordinator { .. } => Role::Coordinator,
            Subject::Agent { machine, .. } => Role::Agent(*machine),
            Subject::Client { name } => Role::Client(name.clone()),
            Subject::Admin => Role::Admin,
        }
    }

    /// The stem of its files: `coordinator`, `agent-N`, `client-NAME`.
    pub fn file_stem(&self) -> String {
        match self {
            Subject::Coordinator { .. } => "coordinator".into(),
            Subject::Agent { machine, .. } => format!("agent-{machine}"),
            Subject::Client { name } => format!("client-{name}"),
            Subject::Admin => "admin".into(),
        }
    }

    fn hosts(&self) -> &[String] {
        match self {
            Subject::Coordinator { hosts } | Subject::Agent { hosts, .. } => hosts,
            Subject::Client { .. } | Subject::Admin => &[],
        }
    }

    fn validate(&self) -> Result<(), CertError> {
        let invalid = |field, value: &str, reason| Err(CertError::Invalid { field, value: value.into(), reason });
        if let Subject::Client { name } = self
            && !valid_client_name(name)
        {
            return invalid("client name", name, "must be 1 to 64 of letters, digits, '.', '_', '-'");
        }
        if !matches!(self, Subject::Client { .. } | Subject::Admin) && self.hosts().is_empty() {
            return invalid("host", "", "a server certificate needs at least one host name or address");
        }
        for h in self.hosts() {
            if h.parse::<std::net::IpAddr>().is_ok() {
                continue;
            }
            let ok = !h.is_empty()
                && h.len() <= 253
                && h.split('.').all(|l| {
                    !l.is_empty()
                        && l.len() <= 63
                        && !l.starts_with('-')
                        && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                })
                // A last label of digits is no name (`999.1.1.1` is a mistyped address).
                && !h.rsplit('.').next().is_some_and(|l| l.bytes().all(|b| b.is_ascii_digit()));
            if !ok {
                return invalid("host", h, "not an IP address or DNS name");
            }
        }
        Ok(())
    }
}

/// A certificate and its private key, PEM.
#[derive(Clone)]
pub struct Issued {
    /// The certificate.
    pub cert_pem: String,
    /// The private key (PKCS#8).
    pub key_pem: String,
}

impl std::fmt::Debug for Issued {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Issued").field("key_pem", &"<redacted>").finish_non_exhaustive()
    }
}

impl Issued {
    /// Writes `DIR/STEM.crt` and `DIR/STEM.key` (the key readable by its owner only); refuses
    /// to overwrite either unless `force`. Returns the paths written.
    pub fn write(&self, dir: &Path, stem: &str, force: bool) -> Result<Vec<PathBuf>, CertError> {
        let (crt, key) = (dir.join(format!("{stem}.crt")), dir.join(format!("{stem}.key")));
        if !force {
            for p in [&crt, &key] {
                if p.exists() {
                    return Err(CertError::Exists(p.display().to_string()));
                }
            }
        }
        std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
        write_file(&key, self.key_pem.as_bytes(), true)?;
        write_file(&crt, self.cert_pem.as_bytes(), false)?;
        Ok(vec![crt, key])
    }
}

fn write_file(path: &Path, bytes: &[u8], secret: bool) -> Result<(), CertError> {
    use std::io::Write;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    if secret {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts.open(path).map_err(|e| io(path, e))?;
    #[cfg(unix)]
    if secret {
        // The file may have existed with a wider mode (overwritten with --force).
        use std::os::unix::fs::PermissionsExt;
        f.set_permissions(std::fs::Permissions::from_mode(0o600)).map_err(|e| io(path, e))?;
    }
    f.write_all(bytes).map_err(|e| io(path, e))
}

/// A cluster CA: its certificate and the key that signs members' certificates.
pub struct CertAuthority {
    cert_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl std::fmt::Debug for CertAuthority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertAuthority").finish_non_exhaustive()
    }
}

/// The current year, for validity periods (rcgen takes calendar dates).
fn this_year() -> i32 {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    1970 + (secs / 31_556_952) as i32
}

fn validity(params: &mut CertificateParams, years: i32) {
    let y = this_year();
    // From the start of last year: a machine whose clock is somewhat behind still accepts it.
    params.not_before = rcgen::date_time_ymd(y - 1, 1, 1);
    params.not_after = rcgen::date_time_ymd(y + years, 1, 1);
}

impl CertAuthority {
    /// A new CA with a fresh key.
    pub fn generate() -> Result<CertAuthority, CertError> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        // A name of its own, so that a certificate of another cluster's CA is reported as signed by
        // an unknown issuer rather than as a bad signature.
        let id: String = key.public_key_raw().iter().skip(1).take(6).map(|b| format!("{b:02x}")).collect();
        params.distinguished_name.push(DnType::CommonName, format!("coflow cluster CA {id}"));
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages =
            vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        validity(&mut params, 10);
        let cert = params.self_signed(&key)?;
        Ok(CertAuthority { cert_pem: cert.pem(), issuer: Issuer::new(params, key) })
    }

    /// Loads `DIR/ca.crt` and `DIR/ca.key`.
    pub fn load(dir: &Path) -> Result<CertAuthority, CertError> {
        let (crt, key) = (dir.join("ca.crt"), dir.join("ca.key"));
        let read = |p: &Path| crate::files::read_small_text(p, crate::files::SMALL_FILE_MAX).map_err(|e| io(p, e));
        let (cert_pem, key_pem) = (read(&crt)?, read(&key)?);
        let key_pair = KeyPair::from_pem(&key_pem)
            .map_err(|e| CertError::Io { path: key.display().to_string(), reason: e.to_string() })?;
        let issuer = Issuer::from_ca_cert_pem(&cert_pem, key_pair)
            .map_err(|e| CertError::Io { path: crt.display().to_string(), reason: e.to_string() })?;
        Ok(CertAuthority { cert_pem, issuer })
    }

    /// The CA's certificate, PEM.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// Writes `DIR/ca.crt` and `DIR/ca.key` (refusing to overwrite unless `force`).
    pub fn write(&self, dir: &Path, force: bool) -> Result<Vec<PathBuf>, CertError> {
        Issued { cert_pem: self.cert_pem.clone(), key_pem: self.issuer.key().serialize_pem() }.write(dir, "ca", force)
    }

    /// A certificate for `subject`, with a fresh key, signed by this CA.
    pub fn issue(&self, subject: &Subject) -> Result<Issued, CertError> {
        subject.validate()?;
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(subject.hosts().to_vec())?;
        let role = subject.role();
        params.subject_alt_names.push(SanType::URI(role.uri().try_into()?));
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, role.uri());
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = match subject {
            Subject::Coordinator { .. } => vec![ExtendedKeyUsagePurpose::ServerAuth],
            Subject::Agent { .. } => vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth],
            Subject::Client { .. } | Subject::Admin => vec![ExtendedKeyUsagePurpose::ClientAuth],
        };
        params.use_authority_key_identifier_extension = true;
        validity(&mut params, 5);
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(Issued { cert_pem: cert.pem(), key_pem: key.serialize_pem() })
    }
}

/// `coflow certs init DIR`: a new CA in `DIR/ca.crt` and `DIR/ca.key`.
pub fn init(dir: &Path, force: bool) -> Result<Vec<PathBuf>, CertError> {
    CertAuthority::generate()?.write(dir, force)
}

/// `coflow certs issue DIR ...`: a certificate for `subject` signed by the CA in `DIR`, written
/// to `DIR/STEM.crt` and `DIR/STEM.key`.
pub fn issue(dir: &Path, subject: &Subject, force: bool) -> Result<Vec<PathBuf>, CertError> {
    let ca = CertAuthority::load(dir)?;
    ca.issue(subject)?.write(dir, &subject.file_stem(), force)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::{TlsContext, TlsFiles};

    fn temp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("coflow-certs-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn issued_certificates_name_their_role_and_load_with_the_ca() {
        let dir = temp("roles");
        init(&dir, false).unwrap();
        let subjects = [
            Subject::Coordinator { hosts: vec!["127.0.0.1".into(), "coord.example".into()] },
            Subject::Agent { machine: 7, hosts: vec!["::1".into()] },
            Subject::Client { name: "spark".into() },
            Subject::Admin,
        ];
        for s in &subjects {
            let written = issue(&dir, s, false).unwrap();
            assert_eq!(
                written,
                vec![dir.join(format!("{}.crt", s.file_stem())), dir.join(format!("{}.key", s.file_stem()))]
            );
            let files = TlsFiles { ca: dir.join("ca.crt"), cert: written[0].clone(), key: written[1].clone() };
            let ctx = TlsContext::load(&files).unwrap();
            assert_eq!(ctx.role(), &s.role());
        }
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            for k in ["ca.key", "agent-7.key", "client-spark.key"] {
                let mode = std::fs::metadata(dir.join(k)).unwrap().permissions().mode() & 0o777;
                assert_eq!(mode, 0o600, "{k}");
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn existing_files_are_kept_unless_forced() {
        let dir = temp("force");
        init(&dir, false).unwrap();
        let ca = std::fs::read(dir.join("ca.crt")).unwrap();
        assert!(matches!(init(&dir, false), Err(CertError::Exists(_))));
        assert_eq!(std::fs::read(dir.join("ca.crt")).unwrap(), ca, "a refused init leaves the CA alone");
        let s = Subject::Client { name: "a".into() };
        issue(&dir, &s, false).unwrap();
        assert!(matches!(issue(&dir, &s, false), Err(CertError::Exists(_))));
        issue(&dir, &s, true).unwrap();
        init(&dir, true).unwrap();
        assert_ne!(std::fs::read(dir.join("ca.crt")).unwrap(), ca, "forced: a new CA");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bad_names_are_refused_by_field() {
        let ca = CertAuthority::generate().unwrap();
        for (s, field) in [
            (Subject::Client { name: "../x".into() }, "client name"),
            (Subject::Client { name: String::new() }, "client name"),
            (Subject::Coordinator { hosts: vec![] }, "host"),
            (Subject::Agent { machine: 1, hosts: vec!["bad host".into()] }, "host"),
            (Subject::Agent { machine: 1, hosts: vec!["999.1.1.1".into()] }, "host"),
        ] {
            match ca.issue(&s) {
                Err(CertError::Invalid { field: f, .. }) => assert_eq!(f, field),
                other => panic!("{s:?}: {other:?}"),
            }
        }
        // Names whose labels hold digits are names all the same.
        let named = Subject::Agent { machine: 1, hosts: vec!["node-7.rack12.example".into(), "1.2.3.4".into()] };
        assert!(ca.issue(&named).is_ok());
    }

    #[test]
    fn a_missing_ca_names_its_file() {
        let dir = temp("noca");
        let e = issue(&dir, &Subject::Client { name: "a".into() }, false).unwrap_err();
        assert!(e.to_string().contains("ca.crt"), "{e}");
    }
}
