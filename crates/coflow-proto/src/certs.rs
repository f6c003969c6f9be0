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

use crate::tls::{Role, ca_expiry, first_cert, not_ca, now_secs, utc, valid_client_name};

/// What can go wrong making or writing certificates.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// A file exists and `force` was not given.
    #[error("{0} exists (pass --force to overwrite)")]
    Exists(String),
    /// A symbolic link is where a file is to be written; it is not written through.
    #[error(
        "{0} is a symbolic link: refusing to write through it (remove it, or write to the directory it points into)"
    )]
    Link(String),
    /// A file could not be read or written.
    #[error("{path}: {reason}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// The CA's certificate is past its dates: certificates it signs now would outlive it.
    #[error(
        "{cert} expired since {since}: make a new CA (`coflow certs init --force`) and issue every member's \
         certificate again"
    )]
    CaExpired {
        /// The CA's certificate file.
        cert: String,
        /// When it expired, UTC.
        since: String,
    },
    /// The CA's certificate is not one that may sign certificates (a member's certificate put in
    /// its place): what it signed would verify nowhere.
    #[error("{cert} is not a CA certificate ({reason}); make a CA with `coflow certs init`")]
    NotCa {
        /// The CA's certificate file.
        cert: String,
        /// What it lacks.
        reason: &'static str,
    },
    /// The CA's key is not the key of the CA's certificate (one of them was replaced).
    #[error("{key} does not go with {cert}: the key is not the one the certificate was made for")]
    Mismatch {
        /// The key file.
        key: String,
        /// The certificate file.
        cert: String,
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
    /// rcgen could not make or parse a certificate or key (its message is part of this one, not
    /// a source, so that it is said once).
    #[error("certificate: {0}")]
    Rcgen(rcgen::Error),
}

impl From<rcgen::Error> for CertError {
    fn from(e: rcgen::Error) -> CertError {
        CertError::Rcgen(e)
    }
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
    /// to overwrite either unless `force`, and refuses a symbolic link at either path. Either
    /// both files are replaced or neither is: each is written to a temporary file beside it,
    /// and both are renamed into place once both are written. Returns the paths written.
    pub fn write(&self, dir: &Path, stem: &str, force: bool) -> Result<Vec<PathBuf>, CertError> {
        let (crt, key) = (dir.join(format!("{stem}.crt")), dir.join(format!("{stem}.key")));
        for p in [&crt, &key] {
            match std::fs::symlink_metadata(p) {
                Ok(m) if m.file_type().is_symlink() => return Err(CertError::Link(p.display().to_string())),
                Ok(_) if !force => return Err(CertError::Exists(p.display().to_string())),
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io(p, e)),
            }
        }
        crate::files::create_dirs(dir, DIR_MODE).map_err(|e| io(dir, e))?;
        replace_all(dir, &[(&crt, self.cert_pem.as_bytes(), false), (&key, self.key_pem.as_bytes(), true)])?;
        Ok(vec![crt, key])
    }
}

/// The permissions of a certificates' directory `coflow certs` creates: anyone may read the
/// certificates in it, its owner alone may add or replace files.
const DIR_MODE: u32 = 0o755;

/// The permissions of a certificate, whatever the umask: public, replaced by its owner alone.
const CERT_MODE: u32 = 0o644;

/// The permissions of a private key, whatever the umask: its owner's alone.
const KEY_MODE: u32 = 0o600;

/// Puts each `(path, content, secret)` of `files` (all in `dir`) in place so that either all are
/// replaced or none is: each content goes to a new temporary file beside its path (created
/// exclusively, never through a link, mode 0600 if secret, else 0644) and is synced; only then are the
/// temporaries renamed over the paths, in order. If a step fails, the temporaries are removed
/// and the paths already renamed over get their old files back (kept meanwhile as hard links),
/// or are removed if they had none. A rename replaces a link at the path rather than writing
/// through it.
fn replace_all(dir: &Path, files: &[(&PathBuf, &[u8], bool)]) -> Result<(), CertError> {
    let mut temps = Vec::with_capacity(files.len());
    for (path, bytes, secret) in files {
        match write_temp(path, bytes, *secret) {
            Ok(t) => temps.push(t),
            Err(e) => {
                for t in &temps {
                    let _ = std::fs::remove_file(t);
                }
                return Err(e);
            }
        }
    }
    // The paths renamed over so far, each with the hard link that keeps its old file, if any.
    let mut done: Vec<(&Path, Option<PathBuf>)> = Vec::with_capacity(files.len());
    for (i, (path, ..)) in files.iter().enumerate() {
        let step = keep_old(path).and_then(|old| match std::fs::rename(&temps[i], path) {
            Ok(()) => Ok(old),
            Err(e) => {
                if let Some(o) = &old {
                    let _ = std::fs::remove_file(o);
                }
                Err(io(path, e))
            }
        });
        match step {
            Ok(old) => done.push((path, old)),
            Err(e) => {
                for t in &temps[i..] {
                    let _ = std::fs::remove_file(t);
                }
                return Err(put_back(&done, e));
            }
        }
    }
    for (_, old) in &done {
        if let Some(o) = old {
            let _ = std::fs::remove_file(o);
        }
    }
    crate::files::sync_dir(dir);
    Ok(())
}

/// Undoes the renames of [`replace_all`], last first, after `failure`: `failure` if all went
/// back, else an error naming a path that could not be restored (and where its old file is).
fn put_back(done: &[(&Path, Option<PathBuf>)], failure: CertError) -> CertError {
    let mut lost = None;
    for (path, old) in done.iter().rev() {
        let undone = match old {
            Some(o) => std::fs::rename(o, path).map_err(|e| (e, Some(o))),
            None => std::fs::remove_file(path).map_err(|e| (e, None)),
        };
        if let Err((e, o)) = undone {
            let reason = match o {
                Some(o) => format!("could not put the old file back ({e}); it is at {}", o.display()),
                None => format!("could not remove the new file ({e})"),
            };
            lost.get_or_insert(CertError::Io {
                path: path.display().to_string(),
                reason: format!("{reason}, after this failure: {failure}"),
            });
        }
    }
    lost.unwrap_or(failure)
}

/// A name for a new file beside `path` that no file has yet: `.NAME.PID.N.tag`.
fn sibling(path: &Path, tag: &str, n: u64) -> PathBuf {
    let name = path.file_name().map_or_else(Default::default, |n| n.to_string_lossy().into_owned());
    path.with_file_name(format!(".{name}.{}.{n}.{tag}", std::process::id()))
}

/// How many names [`sibling`] tries before giving up (names left behind by a crash are taken).
const SIBLING_TRIES: u64 = 64;

/// Writes `bytes` to a new temporary file beside `path` and syncs it; returns its path.
fn write_temp(path: &Path, bytes: &[u8], secret: bool) -> Result<PathBuf, CertError> {
    let mode = if secret { KEY_MODE } else { CERT_MODE };
    let mut n = 0;
    loop {
        let temp = sibling(path, "tmp", n);
        match crate::files::write_new(&temp, bytes, mode) {
            Ok(()) => return Ok(temp),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n + 1 < SIBLING_TRIES => n += 1,
            Err(e) => return Err(io(path, e)),
        }
    }
}

/// A hard link beside `path` to the file at `path`, which keeps it when a rename replaces it;
/// `None` if there is no file at `path`.
fn keep_old(path: &Path) -> Result<Option<PathBuf>, CertError> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(path, e)),
        Ok(m) if m.is_dir() => {
            return Err(CertError::Io { path: path.display().to_string(), reason: "a directory, not a file".into() });
        }
        Ok(_) => {}
    }
    let mut n = 0;
    loop {
        let old = sibling(path, "old", n);
        match std::fs::hard_link(path, &old) {
            Ok(()) => return Ok(Some(old)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n + 1 < SIBLING_TRIES => n += 1,
            Err(e) => {
                return Err(CertError::Io {
                    path: path.display().to_string(),
                    reason: format!("cannot keep the old file while replacing it: {e}"),
                });
            }
        }
    }
}

/// A cluster CA: its certificate and the key that signs members' certificates.
pub struct CertAuthority {
    cert_pem: String,
    issuer: Issuer<'static, KeyPair>,
    /// Its certificate's file, if it was loaded from one (for errors).
    cert_file: Option<PathBuf>,
}

impl std::fmt::Debug for CertAuthority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertAuthority").finish_non_exhaustive()
    }
}

/// The current year, for validity periods (rcgen takes calendar dates).
pub(crate) fn this_year() -> i32 {
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
        CertAuthority::generate_with(|params| validity(params, 10))
    }

    /// As [`CertAuthority::generate`], valid from the start of year `from` to the start of year
    /// `to` (for tests of a CA out of its dates).
    #[cfg(test)]
    pub(crate) fn generate_for_years(from: i32, to: i32) -> Result<CertAuthority, CertError> {
        CertAuthority::generate_with(|params| {
            params.not_before = rcgen::date_time_ymd(from, 1, 1);
            params.not_after = rcgen::date_time_ymd(to, 1, 1);
        })
    }

    fn generate_with(dates: impl FnOnce(&mut CertificateParams)) -> Result<CertAuthority, CertError> {
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
        dates(&mut params);
        let cert = params.self_signed(&key)?;
        Ok(CertAuthority { cert_pem: cert.pem(), issuer: Issuer::new(params, key), cert_file: None })
    }

    /// Loads `DIR/ca.crt` and `DIR/ca.key`, refusing a certificate that is no CA's (a member's
    /// copied in its place) and a key that is not the certificate's (one copied from another
    /// `certs init`): certificates signed with either would verify nowhere.
    pub fn load(dir: &Path) -> Result<CertAuthority, CertError> {
        let (crt, key) = (dir.join("ca.crt"), dir.join("ca.key"));
        let read = |p: &Path| crate::files::read_small_text(p, crate::files::SMALL_FILE_MAX).map_err(|e| io(p, e));
        let (cert_pem, key_pem) = (read(&crt)?, read(&key)?);
        let key_pair = KeyPair::from_pem(&key_pem)
            .map_err(|e| CertError::Io { path: key.display().to_string(), reason: e.to_string() })?;
        let issuer = Issuer::from_ca_cert_pem(&cert_pem, key_pair)
            .map_err(|e| CertError::Io { path: crt.display().to_string(), reason: e.to_string() })?;
        if let Some(reason) = not_ca(&cert_pem) {
            return Err(CertError::NotCa { cert: crt.display().to_string(), reason });
        }
        // Certificates signed with another key than the CA certificate's would verify nowhere.
        if ca_public_key(&cert_pem).as_deref() != Some(issuer.key().public_key_raw()) {
            return Err(CertError::Mismatch { key: key.display().to_string(), cert: crt.display().to_string() });
        }
        Ok(CertAuthority { cert_pem, issuer, cert_file: Some(crt) })
    }

    /// The CA's certificate, PEM.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// Writes `DIR/ca.crt` and `DIR/ca.key` (refusing to overwrite unless `force`).
    pub fn write(&self, dir: &Path, force: bool) -> Result<Vec<PathBuf>, CertError> {
        Issued { cert_pem: self.cert_pem.clone(), key_pem: self.issuer.key().serialize_pem() }.write(dir, "ca", force)
    }

    /// A certificate for `subject`, with a fresh key, signed by this CA, ending no later than it;
    /// a CA past its dates issues nothing ([`CertError::CaExpired`]).
    pub fn issue(&self, subject: &Subject) -> Result<Issued, CertError> {
        self.issue_with(subject, |params| validity(params, 5))
    }

    /// As [`CertAuthority::issue`], valid from the start of year `from` to the start of year
    /// `to` (for tests of certificates out of their dates).
    #[cfg(test)]
    pub(crate) fn issue_for_years(&self, subject: &Subject, from: i32, to: i32) -> Result<Issued, CertError> {
        self.issue_with(subject, |params| {
            params.not_before = rcgen::date_time_ymd(from, 1, 1);
            params.not_after = rcgen::date_time_ymd(to, 1, 1);
        })
    }

    fn issue_with(&self, subject: &Subject, dates: impl FnOnce(&mut CertificateParams)) -> Result<Issued, CertError> {
        subject.validate()?;
        // A CA past its dates issues nothing: what it signed would be born expired.
        let ca_end = ca_expiry(self.cert_pem.as_bytes());
        if let Some(end) = ca_end.filter(|&end| end < now_secs()) {
            let cert = self.cert_file.as_ref().map_or("the CA certificate".into(), |f| f.display().to_string());
            return Err(CertError::CaExpired { cert, since: utc(end) });
        }
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
        dates(&mut params);
        // A certificate ends no later than its CA, whose end no verifier would let it outlive.
        if let Some(end) = ca_end {
            let over = params.not_after.unix_timestamp().saturating_sub(end);
            if over > 0 {
                params.not_after -= std::time::Duration::from_secs(over.unsigned_abs());
            }
        }
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(Issued { cert_pem: cert.pem(), key_pem: key.serialize_pem() })
    }
}

/// The public key (the subject public key bit string) of the certificate in `pem`, if it parses.
fn ca_public_key(pem: &str) -> Option<Vec<u8>> {
    first_cert(pem.as_bytes(), |cert| cert.public_key().subject_public_key.data.to_vec())
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

    /// A path `name` not made yet, in a fresh directory, and the guard that removes that
    /// directory when dropped.
    fn temp(name: &str) -> (tempfile::TempDir, PathBuf) {
        let guard = tempfile::Builder::new().prefix(&format!("coflow-certs-{name}-")).tempdir().unwrap();
        let d = guard.path().join(name);
        (guard, d)
    }

    #[test]
    fn issued_certificates_name_their_role_and_load_with_the_ca() {
        let (_guard, dir) = temp("roles");
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
            let mode = |f: &str| std::fs::metadata(dir.join(f)).unwrap().permissions().mode() & 0o777;
            for s in ["ca", "agent-7", "client-spark"] {
                assert_eq!(mode(&format!("{s}.key")), 0o600, "{s}.key");
                assert_eq!(mode(&format!("{s}.crt")), 0o644, "{s}.crt");
            }
            assert_eq!(mode(""), 0o755);
        }
    }

    #[test]
    fn existing_files_are_kept_unless_forced() {
        let (_guard, dir) = temp("force");
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

    /// The names in `dir`, sorted.
    fn listing(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> =
            std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        names.sort();
        names
    }

    #[test]
    fn a_ca_key_of_another_ca_is_refused_naming_both_files() {
        let ((_guard, dir), (_other_guard, other)) = (temp("mismatch"), temp("mismatch-other"));
        init(&dir, false).unwrap();
        init(&other, false).unwrap();
        std::fs::copy(other.join("ca.key"), dir.join("ca.key")).unwrap();
        let e = issue(&dir, &Subject::Client { name: "a".into() }, false).unwrap_err();
        assert!(matches!(e, CertError::Mismatch { .. }), "{e:?}");
        let text = e.to_string();
        assert!(text.contains("ca.key does not go with") && text.contains("ca.crt"), "{text}");
        assert!(!dir.join("client-a.crt").exists(), "nothing issued");
    }

    /// A member's certificate and key copied to `ca.crt` and `ca.key` match each other but sign
    /// nothing a verifier accepts: refused, naming the file, before anything is written.
    #[test]
    fn a_member_certificate_in_place_of_the_ca_is_refused_naming_it() {
        let (_guard, dir) = temp("not-ca");
        init(&dir, false).unwrap();
        issue(&dir, &Subject::Admin, false).unwrap();
        for ext in ["crt", "key"] {
            std::fs::copy(dir.join(format!("admin.{ext}")), dir.join(format!("ca.{ext}"))).unwrap();
        }
        let before = listing(&dir);
        let e = issue(&dir, &Subject::Client { name: "z".into() }, false).unwrap_err();
        assert!(matches!(e, CertError::NotCa { .. }), "{e:?}");
        let ca = dir.join("ca.crt").display().to_string();
        assert!(
            e.to_string().starts_with(&format!("{ca} is not a CA certificate (no basicConstraints CA:TRUE)")),
            "{e}"
        );
        assert_eq!(listing(&dir), before, "nothing written");
    }

    #[test]
    fn a_ca_made_here_is_a_ca() {
        assert_eq!(not_ca(CertAuthority::generate().unwrap().cert_pem()), None);
        let member = CertAuthority::generate().unwrap().issue(&agent()).unwrap();
        assert_eq!(not_ca(&member.cert_pem), Some("no basicConstraints CA:TRUE"));
    }

    /// The certificate is renamed into place first; when the key's rename then fails (here, a
    /// directory is at its path), the old certificate is put back and no temporary is left.
    #[test]
    fn a_failure_writing_the_second_file_leaves_the_old_pair() {
        let (_guard, dir) = temp("half");
        init(&dir, false).unwrap();
        let s = Subject::Client { name: "a".into() };
        issue(&dir, &s, false).unwrap();
        let crt = std::fs::read(dir.join("client-a.crt")).unwrap();
        std::fs::remove_file(dir.join("client-a.key")).unwrap();
        std::fs::create_dir(dir.join("client-a.key")).unwrap();
        let before = listing(&dir);
        let e = issue(&dir, &s, true).unwrap_err();
        assert!(e.to_string().contains("client-a.key"), "{e}");
        assert_eq!(std::fs::read(dir.join("client-a.crt")).unwrap(), crt, "the old certificate is back");
        assert_eq!(listing(&dir), before, "no temporary or kept file is left");

        // The same for the CA, with no old key: the new certificate is removed again.
        let ca = std::fs::read(dir.join("ca.crt")).unwrap();
        std::fs::remove_file(dir.join("ca.key")).unwrap();
        std::fs::create_dir(dir.join("ca.key")).unwrap();
        let before = listing(&dir);
        assert!(init(&dir, true).is_err());
        assert_eq!(std::fs::read(dir.join("ca.crt")).unwrap(), ca, "the old CA certificate is back");
        assert_eq!(listing(&dir), before);

        // A first file that cannot be replaced changes nothing either.
        std::fs::remove_dir(dir.join("ca.key")).unwrap();
        std::fs::remove_file(dir.join("ca.crt")).unwrap();
        std::fs::create_dir(dir.join("ca.crt")).unwrap();
        let before = listing(&dir);
        assert!(init(&dir, true).is_err());
        assert_eq!(listing(&dir), before);
    }

    #[test]
    fn a_replaced_pair_leaves_no_temporaries_and_goes_together() {
        let (_guard, dir) = temp("replace");
        init(&dir, false).unwrap();
        let s = Subject::Client { name: "a".into() };
        issue(&dir, &s, false).unwrap();
        let before = listing(&dir);
        issue(&dir, &s, true).unwrap();
        init(&dir, true).unwrap();
        assert_eq!(listing(&dir), before);
        // The new CA's key goes with its certificate.
        issue(&dir, &s, true).unwrap();
    }

    #[test]
    fn a_link_at_a_key_path_is_refused_and_its_target_is_untouched() {
        let ((_guard, dir), (_outside_guard, outside)) = (temp("link"), temp("link-outside"));
        init(&dir, false).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        let target = outside.join("target");
        let link = dir.join("client-a.key");
        // Dangling, and to an existing file; with and without --force.
        std::os::unix::fs::symlink(&target, &link).unwrap();
        for force in [false, true] {
            let e = issue(&dir, &Subject::Client { name: "a".into() }, force).unwrap_err();
            assert!(matches!(&e, CertError::Link(p) if p.ends_with("client-a.key")), "{e:?}");
            assert!(!target.exists(), "nothing written through the link");
        }
        std::fs::write(&target, b"keep").unwrap();
        for force in [false, true] {
            assert!(matches!(issue(&dir, &Subject::Client { name: "a".into() }, force), Err(CertError::Link(_))));
            assert_eq!(std::fs::read(&target).unwrap(), b"keep");
        }
        assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
        assert!(!dir.join("client-a.crt").exists(), "no half pair");
    }

    /// Wrapped library errors are part of the message, not sources an error chain prints again.
    #[test]
    fn wrapped_errors_are_said_once() {
        let e = CertError::from(rcgen::Error::CouldNotParseCertificate);
        assert!(std::error::Error::source(&e).is_none(), "{e}");
        let e = crate::tls::TlsError::from(rustls::Error::General("x".into()));
        assert!(std::error::Error::source(&e).is_none(), "{e}");
    }

    #[test]
    fn a_missing_ca_names_its_file() {
        let (_guard, dir) = temp("noca");
        let e = issue(&dir, &Subject::Client { name: "a".into() }, false).unwrap_err();
        assert!(e.to_string().contains("ca.crt"), "{e}");
    }

    // A member's own certificate, checked as it loads (`TlsContext::load`).

    /// `ca`'s certificate, and `issued` written to a fresh directory named for `name`, as files,
    /// with the guard that removes the directory when dropped.
    fn written(name: &str, ca: &CertAuthority, issued: &Issued) -> (tempfile::TempDir, TlsFiles) {
        let guard = tempfile::Builder::new().prefix(&format!("coflow-tls-{name}-")).tempdir().unwrap();
        let dir = guard.path();
        std::fs::write(dir.join("ca.crt"), ca.cert_pem()).unwrap();
        issued.write(dir, "member", false).unwrap();
        let files = TlsFiles { ca: dir.join("ca.crt"), cert: dir.join("member.crt"), key: dir.join("member.key") };
        (guard, files)
    }

    fn agent() -> Subject {
        Subject::Agent { machine: 1, hosts: vec!["127.0.0.1".into()] }
    }

    #[test]
    fn a_certificate_of_another_ca_is_refused_naming_both_files() {
        let (ours, theirs) = (CertAuthority::generate().unwrap(), CertAuthority::generate().unwrap());
        for s in [agent(), Subject::Coordinator { hosts: vec!["h".into()] }, Subject::Client { name: "c".into() }] {
            let (_guard, f) = written("foreign", &ours, &theirs.issue(&s).unwrap());
            let e = TlsContext::load(&f).unwrap_err().to_string();
            let (cert, ca) = (f.cert.display().to_string(), f.ca.display().to_string());
            assert!(e.starts_with(&format!("{cert}: not signed by the CA in {ca}")), "{s:?}: {e}");
            // A test playing a foreign member may still load it.
            assert_eq!(TlsContext::load_unverified(&f).unwrap().role(), &s.role());
        }
    }

    /// A CA past its dates issues nothing, naming its file and when it expired; a certificate
    /// issued ends no later than its CA.
    #[test]
    fn a_ca_bounds_what_it_issues() {
        let (_guard, dir) = temp("expired-ca");
        CertAuthority::generate_for_years(2000, 2001).unwrap().write(&dir, false).unwrap();
        let e = issue(&dir, &agent(), false).unwrap_err();
        let ca = dir.join("ca.crt").display().to_string();
        assert!(matches!(e, CertError::CaExpired { .. }), "{e:?}");
        assert!(e.to_string().starts_with(&format!("{ca} expired since 2001-01-01 00:00:00 UTC")), "{e}");
        assert!(!dir.join("agent-1.crt").exists());
        let e = CertAuthority::generate_for_years(2000, 2001).unwrap().issue(&agent()).unwrap_err();
        assert!(e.to_string().starts_with("the CA certificate expired since 2001-01-01 00:00:00 UTC"), "{e}");
        let y = this_year();
        let ca = CertAuthority::generate_for_years(y - 1, y + 2).unwrap();
        let end = ca_expiry(ca.cert_pem().as_bytes()).unwrap();
        let leaf = ca.issue(&agent()).unwrap();
        assert_eq!(ca_expiry(leaf.cert_pem.as_bytes()), Some(end), "five years cut to the CA's two");
        let (_guard, f) = written("bounded", &ca, &leaf);
        assert_eq!(TlsContext::load(&f).unwrap().role(), &Role::Agent(1));
    }

    #[test]
    fn a_certificate_out_of_its_dates_is_refused_saying_so() {
        let ca = CertAuthority::generate().unwrap();
        let y = this_year();
        let (_guard, f) = written("expired", &ca, &ca.issue_for_years(&agent(), 2000, 2001).unwrap());
        let e = TlsContext::load(&f).unwrap_err().to_string();
        let cert = f.cert.display().to_string();
        assert!(e.starts_with(&format!("{cert}: expired since 2001-01-01 00:00:00 UTC")), "{e}");
        let (_guard, f) = written("early", &ca, &ca.issue_for_years(&agent(), y + 2, y + 3).unwrap());
        let e = TlsContext::load(&f).unwrap_err().to_string();
        assert!(e.contains(&format!("not yet valid: valid from {:04}-01-01 00:00:00 UTC", y + 2)), "{e}");
        let (_guard, f) = written("valid", &ca, &ca.issue(&agent()).unwrap());
        assert_eq!(TlsContext::load(&f).unwrap().role(), &Role::Agent(1));
    }

    #[test]
    fn a_corrupted_certificate_is_refused_naming_its_file() {
        let ca = CertAuthority::generate().unwrap();
        let (_guard, f) = written("corrupt", &ca, &ca.issue(&agent()).unwrap());
        // The last line of base64 before the END line encodes the end of the signature.
        let text = std::fs::read_to_string(&f.cert).unwrap();
        let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
        let last = lines.len() - 2;
        let flipped = if lines[last].starts_with('A') { "B" } else { "A" };
        lines[last].replace_range(..1, flipped);
        std::fs::write(&f.cert, lines.join("\n")).unwrap();
        let e = TlsContext::load(&f).unwrap_err().to_string();
        assert!(e.starts_with(&format!("{}: not signed by the CA in", f.cert.display())), "{e}");
    }

    /// A member's certificate given as the CA is named as no CA, not the member's as unsigned.
    #[test]
    fn a_member_s_certificate_given_as_the_ca_is_named_as_no_ca() {
        let ca = CertAuthority::generate().unwrap();
        let (_guard, f) = written("not-ca", &ca, &ca.issue(&agent()).unwrap());
        std::fs::copy(&f.cert, &f.ca).unwrap();
        let e = TlsContext::load(&f).unwrap_err().to_string();
        let says = format!("{}: is not a CA certificate (no basicConstraints CA:TRUE)", f.ca.display());
        assert!(e.starts_with(&says), "{e}");
    }

    #[test]
    fn a_truncated_pem_names_its_section_as_text() {
        let ca = CertAuthority::generate().unwrap();
        let (_guard, f) = written("truncated", &ca, &ca.issue(&agent()).unwrap());
        let text = std::fs::read_to_string(&f.cert).unwrap();
        std::fs::write(&f.cert, &text[..text.len() / 2]).unwrap();
        let e = TlsContext::load(&f).unwrap_err().to_string();
        assert!(e.contains("truncated: its CERTIFICATE section has no END line"), "{e}");
    }
}
