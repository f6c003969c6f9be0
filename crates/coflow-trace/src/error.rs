//! The one error type of this crate, [`TraceError`], and the [`Field`] of a benchmark line it names.

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use coflow_core::{CoflowId, WorkloadError};

/// Why a trace could not be read or written.
///
/// Every error about the content of a file names its 1-based line, so a user can open the file
/// at the right place.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// A field of a coflow-benchmark line is missing, is not a number, or is out of range.
    #[error("line {line}, field {field}: {message}")]
    Syntax {
        /// The 1-based line number.
        line: usize,
        /// The field of the line that is wrong.
        field: Field,
        /// What is wrong with it, quoting what was found.
        message: String,
    },
    /// The header's coflow count differs from the number of coflow lines.
    ///
    /// When the file has fewer coflow lines than declared, `line` is the header's (1); when it has
    /// more, `line` is the first extra coflow line.
    #[error("line {line}: {}", coflow_count_message(*declared, *found))]
    CoflowCount {
        /// The line the error is reported at.
        line: usize,
        /// The count the header declares.
        declared: usize,
        /// The number of coflow lines the file has.
        found: usize,
    },
    /// A coflow id appears on two lines.
    #[error("line {line}, field id: coflow id {id} already appeared on line {first_line}")]
    DuplicateId {
        /// The line of the second occurrence.
        line: usize,
        /// The id.
        id: CoflowId,
        /// The line of the first occurrence.
        first_line: usize,
    },
    /// A line of a JSON Lines trace is not valid JSON, does not have the expected fields, or
    /// describes something the model does not allow.
    #[error("line {line}{}: {message}", column.map(|c| format!(", column {c}")).unwrap_or_default())]
    Json {
        /// The 1-based line number.
        line: usize,
        /// The 1-based column, when the JSON parser gives one.
        column: Option<usize>,
        /// What is wrong.
        message: String,
    },
    /// A file could not be opened, read or written. The operating system's reason is the
    /// error's source (so a chain printer shows it once).
    #[error("cannot access {}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// A file is not UTF-8 text: `line` holds the first byte that is not. Like the other errors
    /// about a file's content, the message names the line and leaves the file to the caller's
    /// context, which names it once.
    #[error("line {line}, column {column}: not UTF-8 text")]
    NotText {
        /// The file.
        path: PathBuf,
        /// The 1-based line of the first byte that is not UTF-8.
        line: usize,
        /// Its 1-based column, in bytes.
        column: usize,
    },
    /// A file that is not a regular one (a pipe, standard input, a device) ran past
    /// [`MAX_STREAM_BYTES`] before its end.
    #[error(
        "{} is not a regular file and runs past {}: save it to a file to read it whole",
        path.display(),
        size(*limit)
    )]
    StreamTooLong {
        /// The file.
        path: PathBuf,
        /// The most read from such a file.
        limit: u64,
    },
    /// Writing to a stream failed.
    #[error("cannot write the trace")]
    Write(#[source] io::Error),
    /// The workload breaks a rule of the model (checked by [`coflow_core::Workload::validate`]).
    #[error(transparent)]
    Invalid(#[from] WorkloadError),
    /// The coflow on line `line` of a file breaks a rule of the model.
    #[error("line {line}: {error}")]
    InvalidAt {
        /// The 1-based line of the coflow.
        line: usize,
        /// The rule it breaks.
        error: WorkloadError,
    },
    /// A coflow cannot be written in the requested format without losing or changing something.
    #[error("coflow {coflow} cannot be written in the coflow-benchmark format: {reason}")]
    NotRepresentable {
        /// The coflow.
        coflow: CoflowId,
        /// What the format cannot carry.
        reason: String,
    },
}

impl TraceError {
    /// The 1-based line of the file the error is about, if it is about a line of its content.
    pub fn line(&self) -> Option<usize> {
        match self {
            TraceError::Syntax { line, .. }
            | TraceError::CoflowCount { line, .. }
            | TraceError::DuplicateId { line, .. }
            | TraceError::Json { line, .. }
            | TraceError::NotText { line, .. }
            | TraceError::InvalidAt { line, .. } => Some(*line),
            TraceError::Io { .. }
            | TraceError::StreamTooLong { .. }
            | TraceError::Write(_)
            | TraceError::Invalid(_)
            | TraceError::NotRepresentable { .. } => None,
        }
    }
}

/// `error`, about the workload read from a file, as an error about the line of its coflow
/// (`line_of` gives each coflow's line).
pub(crate) fn invalid_at(error: WorkloadError, line_of: &BTreeMap<CoflowId, usize>) -> TraceError {
    match line_of.get(&error.coflow()) {
        Some(&line) => TraceError::InvalidAt { line, error },
        None => TraceError::Invalid(error),
    }
}

/// The most bytes read from a file that is not a regular one (a pipe, standard input, a device):
/// its size is not known beforehand, and an endless one (`/dev/zero`, `yes`) would otherwise be
/// read until memory runs out.
pub const MAX_STREAM_BYTES: u64 = 1 << 30;

/// Reads a file (`-`: standard input) as text; bytes that are not UTF-8 give [`TraceError::NotText`] naming the line,
/// as soon as they are read. A regular file is read whole; any other (a pipe, standard input, a
/// device) up to [`MAX_STREAM_BYTES`], past which it is refused ([`TraceError::StreamTooLong`]).
pub fn read_text(path: &Path) -> Result<String, TraceError> {
    read_text_within(path, MAX_STREAM_BYTES)
}

/// [`read_text`], reading at most `stream_limit` bytes of a file that is not a regular one.
fn read_text_within(path: &Path, stream_limit: u64) -> Result<String, TraceError> {
    use std::io::Read;
    // `-` is standard input, as an output of `-` is standard output.
    if path == Path::new("-") {
        return read_stream(std::io::stdin().lock(), path, stream_limit);
    }
    let io_error = |source| TraceError::Io { path: path.to_owned(), source };
    let mut file = std::fs::File::open(path).map_err(io_error)?;
    let meta = file.metadata().map_err(io_error)?;
    if !meta.is_file() {
        return read_stream(std::io::BufReader::with_capacity(1 << 16, file), path, stream_limit);
    }
    // Its size bounds a regular file: read whole, then checked once.
    let mut bytes = Vec::with_capacity(meta.len().min(MAX_STREAM_BYTES) as usize);
    file.read_to_end(&mut bytes).map_err(io_error)?;
    String::from_utf8(bytes).map_err(|e| not_text(path, e.as_bytes(), e.utf8_error().valid_up_to()))
}

/// Reads the regular file `path` (links followed) as text, if it holds at most `max` bytes: the
/// rule for a file that another file names, such as a topology's samples file, which a service
/// reads at start. A FIFO, a device, a socket or a directory is refused ([`TraceError::Io`] of
/// kind [`io::ErrorKind::InvalidInput`], [`coflow_core::files::regular`]) once opened, without
/// waiting (opening a FIFO for reading would wait for a writer); a file past
/// `max` bytes is refused (kind [`io::ErrorKind::FileTooLarge`]) without reading more than
/// `max + 1` of them, whatever size it claims.
pub fn read_regular_text(path: &Path, max: u64) -> Result<String, TraceError> {
    use rustix::fs::{Mode, OFlags};
    use std::io::Read;
    let io_error = |source| TraceError::Io { path: path.to_owned(), source };
    let too_large = || io_error(io::Error::new(io::ErrorKind::FileTooLarge, format!("larger than {}", size(max))));
    // Non-blocking, since opening a FIFO for reading waits for a writer; then checked on what
    // was opened, so a path changed in between cannot slip through.
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
    let file = rustix::fs::open(path, flags, Mode::empty()).map_err(|e| io_error(e.into()))?;
    let file = std::fs::File::from(file);
    let meta = file.metadata().map_err(io_error)?;
    coflow_core::files::regular(&meta).map_err(io_error)?;
    if meta.len() > max {
        return Err(too_large());
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(max.saturating_add(1)).read_to_end(&mut bytes).map_err(io_error)?;
    if bytes.len() as u64 > max {
        return Err(too_large());
    }
    String::from_utf8(bytes).map_err(|e| not_text(path, e.as_bytes(), e.utf8_error().valid_up_to()))
}

/// Reads `reader` (the file `path`, not a regular one) as text within `limit` bytes, checking
/// UTF-8 as it comes: a character cut by the end of one read waits for the next.
fn read_stream(mut reader: impl std::io::BufRead, path: &Path, limit: u64) -> Result<String, TraceError> {
    let mut bytes = Vec::new();
    let mut checked = 0;
    loop {
        let chunk = match reader.fill_buf() {
            Ok(c) => c,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(source) => return Err(TraceError::Io { path: path.to_owned(), source }),
        };
        if chunk.is_empty() {
            break;
        }
        let n = chunk.len();
        bytes.extend_from_slice(chunk);
        reader.consume(n);
        if bytes.len() as u64 > limit {
            return Err(TraceError::StreamTooLong { path: path.to_owned(), limit });
        }
        checked = match std::str::from_utf8(&bytes[checked..]) {
            Ok(_) => bytes.len(),
            Err(e) if e.error_len().is_none() => checked + e.valid_up_to(),
            Err(e) => return Err(not_text(path, &bytes, checked + e.valid_up_to())),
        };
    }
    // A character cut off by the end of the stream fails here.
    String::from_utf8(bytes).map_err(|e| not_text(path, e.as_bytes(), e.utf8_error().valid_up_to()))
}

/// [`TraceError::NotText`] for the byte at `at` of the file `path`, whose first bytes are `bytes`.
fn not_text(path: &Path, bytes: &[u8], at: usize) -> TraceError {
    let good = &bytes[..at];
    let line_start = good.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let line = 1 + good.iter().filter(|&&b| b == b'\n').count();
    TraceError::NotText { path: path.to_owned(), line, column: at - line_start + 1 }
}

/// `bytes` for a message: in MiB or GiB when it is a whole number of them.
fn size(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{} GiB", b >> 30),
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b => format!("{b} bytes"),
    }
}

/// `token` quoted for a message: whole if short, else its start and its length, so that a
/// line of megabytes does not make a message of megabytes.
pub(crate) fn quoted(token: &str) -> String {
    const SHOWN: usize = 64;
    if token.len() <= SHOWN {
        return format!("{token:?}");
    }
    let end = (0..=SHOWN).rev().find(|&i| token.is_char_boundary(i)).unwrap_or(0);
    format!("{:?}… ({} bytes)", &token[..end], token.len())
}

/// The message of [`TraceError::CoflowCount`].
fn coflow_count_message(declared: usize, found: usize) -> String {
    let coflows = |n: usize| coflow_core::counted(n, "coflow", "coflows");
    let lines = |n: usize| coflow_core::counted(n, "coflow line", "coflow lines");
    if found < declared {
        format!("the header declares {} but the file has only {} (is it truncated?)", coflows(declared), lines(found))
    } else {
        format!(
            "the header declares {} but the file has {}; this is the first extra one",
            coflows(declared),
            lines(found)
        )
    }
}

/// The field of a coflow-benchmark line that an error is about.
///
/// Mapper and reducer positions are 1-based, as in the format's `<mapper_1> … <mapper_m>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Field {
    /// The header line as a whole.
    Header,
    /// The header's port (machine) count.
    Ports,
    /// The header's coflow count.
    CoflowCount,
    /// A coflow's id.
    Id,
    /// A coflow's arrival time in milliseconds.
    Arrival,
    /// A coflow's mapper count `m`.
    MapperCount,
    /// The i-th mapper (1-based).
    Mapper(usize),
    /// A coflow's reducer count `r`.
    ReducerCount,
    /// The i-th reducer token `<port>:<MB>` as a whole (1-based).
    Reducer(usize),
    /// The port of the i-th reducer (1-based).
    ReducerPort(usize),
    /// The megabytes of the i-th reducer (1-based).
    ReducerMb(usize),
    /// Tokens after the last one the line's counts call for.
    Trailing,
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Field::Header => f.write_str("header"),
            Field::Ports => f.write_str("port count"),
            Field::CoflowCount => f.write_str("coflow count"),
            Field::Id => f.write_str("id"),
            Field::Arrival => f.write_str("arrival"),
            Field::MapperCount => f.write_str("mapper count"),
            Field::Mapper(i) => write!(f, "mapper {i}"),
            Field::ReducerCount => f.write_str("reducer count"),
            Field::Reducer(i) => write!(f, "reducer {i}"),
            Field::ReducerPort(i) => write!(f, "reducer {i} port"),
            Field::ReducerMb(i) => write!(f, "reducer {i} MB"),
            Field::Trailing => f.write_str("end of line"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_read_well() {
        let e = TraceError::Syntax {
            line: 7,
            field: Field::Reducer(3),
            message: "expected <port>:<MB>, got \"12\"".to_string(),
        };
        assert_eq!(e.to_string(), "line 7, field reducer 3: expected <port>:<MB>, got \"12\"");
        let e = TraceError::CoflowCount { line: 1, declared: 5, found: 3 };
        assert_eq!(
            e.to_string(),
            "line 1: the header declares 5 coflows but the file has only 3 coflow lines (is it truncated?)"
        );
        let e = TraceError::CoflowCount { line: 1, declared: 2, found: 1 };
        assert_eq!(
            e.to_string(),
            "line 1: the header declares 2 coflows but the file has only 1 coflow line (is it truncated?)"
        );
        let e = TraceError::DuplicateId { line: 4, id: CoflowId(9), first_line: 2 };
        assert_eq!(e.to_string(), "line 4, field id: coflow id 9 already appeared on line 2");
    }

    /// A fresh directory for one test's files, removed when the guard is dropped.
    fn scratch() -> tempfile::TempDir {
        tempfile::Builder::new().prefix("coflow-trace-read-").tempdir().unwrap()
    }

    /// `bytes` written to a file `name` in `dir`.
    fn file(dir: &tempfile::TempDir, name: &str, bytes: &[u8]) -> PathBuf {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    }

    /// The reason of an [`TraceError::Io`]: kind and message.
    fn io_reason(e: TraceError) -> (io::ErrorKind, String) {
        match e {
            TraceError::Io { source, .. } => (source.kind(), source.to_string()),
            other => panic!("{other:?}"),
        }
    }

    /// A regular file within the bound is read whole; one past it, by its size or by what it
    /// holds, is refused.
    #[test]
    fn a_regular_file_is_read_within_its_bound() {
        let dir = scratch();
        let path = file(&dir, "regular.txt", b"1\n2\n");
        assert_eq!(read_regular_text(&path, 4).unwrap(), "1\n2\n");
        assert_eq!(
            io_reason(read_regular_text(&path, 3).unwrap_err()),
            (io::ErrorKind::FileTooLarge, "larger than 3 bytes".into())
        );
        let e = read_regular_text(&file(&dir, "regular-bad.txt", b"1\n\xff"), 10).unwrap_err();
        assert!(matches!(e, TraceError::NotText { line: 2, column: 1, .. }), "{e:?}");
    }

    /// A FIFO with no writer, a device with no end and a directory are refused at once: nothing
    /// is waited on, nothing read.
    #[test]
    fn only_regular_files_are_read_within_a_bound() {
        let guard = scratch();
        let dir = guard.path().join("kinds");
        std::fs::create_dir_all(&dir).unwrap();
        let refused = |p: &Path| io_reason(read_regular_text(p, u64::MAX).unwrap_err());
        assert_eq!(refused(&dir), (io::ErrorKind::InvalidInput, "a directory, not a regular file".into()));
        let zero = Path::new("/dev/zero");
        if zero.exists() {
            assert_eq!(refused(zero), (io::ErrorKind::InvalidInput, "a device, not a regular file".into()));
        }
        let fifo = dir.join("fifo");
        if std::process::Command::new("mkfifo").arg(&fifo).status().is_ok_and(|s| s.success()) {
            // With no writer, opening it would wait forever; a link to it is followed and refused too.
            assert_eq!(refused(&fifo), (io::ErrorKind::InvalidInput, "a FIFO, not a regular file".into()));
            std::os::unix::fs::symlink(&fifo, dir.join("link")).unwrap();
            assert_eq!(refused(&dir.join("link")), (io::ErrorKind::InvalidInput, "a FIFO, not a regular file".into()));
        } else {
            eprintln!("skipped the FIFO case: mkfifo is not available");
        }
        assert_eq!(refused(&dir.join("none")).0, io::ErrorKind::NotFound);
    }

    /// A long token is quoted by its start and its length; a short one whole.
    #[test]
    fn long_tokens_are_quoted_short() {
        assert_eq!(quoted("3:abc"), "\"3:abc\"");
        let long = "é".repeat(1000);
        let q = quoted(&long);
        assert!(q.ends_with("… (2000 bytes)") && q.len() < 100, "{q}");
    }

    /// A character cut in two by the end of one read is whole text once the next comes.
    #[test]
    fn a_character_cut_by_a_read_is_read_whole() {
        let mut bytes = vec![b'a'; (1 << 16) - 1];
        bytes.extend_from_slice("é\nb".as_bytes());
        let dir = scratch();
        let path = file(&dir, "cut.txt", &bytes);
        assert_eq!(read_text(&path).unwrap().as_bytes(), &bytes[..]);
        // A stream whose first read ends inside the `é`.
        let (first, rest) = bytes.split_at(1 << 16);
        let stream = std::io::BufReader::new(std::io::Read::chain(first, rest));
        assert_eq!(read_stream(stream, &path, MAX_STREAM_BYTES).unwrap().as_bytes(), &bytes[..]);
        let cut = std::io::BufReader::new(std::io::Read::chain(first, &b""[..]));
        match read_stream(cut, &path, MAX_STREAM_BYTES) {
            Err(TraceError::NotText { line: 1, column, .. }) => assert_eq!(column, 1 << 16),
            other => panic!("{other:?}"),
        }
    }

    /// The first byte that is not UTF-8 is named by line and column, also at the end of a file
    /// (a character cut off).
    #[test]
    fn the_first_byte_that_is_not_text_is_named() {
        let dir = scratch();
        for (name, bytes, at) in [("bad.txt", &b"ab\ncd\xffef\n\xfe"[..], (2, 3)), ("end.txt", b"ab\ncd\n\xc3", (3, 1))]
        {
            match read_text(&file(&dir, name, bytes)) {
                Err(TraceError::NotText { line, column, .. }) => assert_eq!((line, column), at, "{name}"),
                other => panic!("{name}: {other:?}"),
            }
        }
    }

    /// A stream that does not end (`/dev/zero`) is refused once past the limit, not read until
    /// memory runs out.
    #[test]
    fn an_endless_stream_is_refused_at_the_limit() {
        let zero = Path::new("/dev/zero");
        if !zero.exists() {
            eprintln!("skipped: this system has no /dev/zero");
            return;
        }
        match read_text_within(zero, 1 << 20) {
            Err(e @ TraceError::StreamTooLong { .. }) => {
                assert_eq!(
                    e.to_string(),
                    "/dev/zero is not a regular file and runs past 1 MiB: save it to a file to read it whole"
                );
            }
            other => panic!("{other:?}"),
        }
    }
}
