//! Trace readers and writers, and a synthetic workload generator, all producing coflow-core types.
//!
//! Two file formats are supported, both described precisely in `docs/src/guide/traces.md`:
//! - **coflow-benchmark**, the text format of the public Facebook trace
//!   (`FB2010-1Hr-150-0.txt`): [`parse_benchmark`], [`read_benchmark`], [`write_benchmark`].
//! - **coflow-jsonl**, a JSON Lines format of our own that carries everything the model has
//!   (deadlines, weights, parents, unknown sizes, names, per-flow sizes): [`parse_jsonl`],
//!   [`read_jsonl`], [`write_jsonl`].
//!
//! [`read_trace`] picks the format from the file name or its first character, [`stats`]
//! summarizes a workload by Varys bin, and [`synth::generate`] makes a seeded workload shaped like
//! the Facebook trace, so that no command needs a file.
//!
//! # Decisions on the coflow-benchmark format
//! - An "MB" is a mebibyte, 2^20 bytes ([`coflow_core::MIB`]), as in the simulator of the trace's
//!   authors.
//! - A reducer's megabytes are split evenly over the coflow's `m` mappers: each (mapper, reducer)
//!   pair is one flow of `round(MB × 2^20 / m)` bytes, computed in `f64` and rounded half away
//!   from zero, so the flows of a reducer may add up to a few bytes more or less than its total.
//! - Flows are listed reducer by reducer, and for each reducer mapper by mapper, in line order.
//! - A flow whose mapper and reducer are the same machine is kept: it is a local flow, which the
//!   simulator treats as crossing no port (see [`coflow_core::Flow::is_local`]).
//!   The Facebook trace has 4,911 of them among its 706,397 flows.
//! - Arrivals are whole milliseconds and become [`coflow_core::Nanos`]; coflow ids come from the
//!   lines; the coflows of the workload are sorted by arrival, then id.
//! - A coflow needs at least one mapper and one reducer; a reducer of 0 MB gives zero-byte flows.
//!
//! Errors ([`TraceError`]) name the 1-based line and, for the benchmark format, the [`Field`];
//! malformed input never panics.
//!
//! # Layout
//! - `error`: [`TraceError`] and [`Field`].
//! - `benchmark`: the coflow-benchmark reader and writer.
//! - `jsonl`: the coflow-jsonl reader and writer, with serde mirrors of the core types.
//! - [`object`]: serde helpers that read structs from JSON objects only, never arrays.
//! - `stats`: [`TraceStats`], the summary of a workload.
//! - [`synth`]: the synthetic generator, [`synth::SynthConfig`] and [`synth::generate`].
//! - This file: [`TraceFormat`], format detection, [`read_trace`], [`write_trace`],
//!   [`replace_file`] and [`check_replaceable`].

#![warn(missing_docs)]

mod benchmark;
mod error;
mod jsonl;
pub mod object;
mod stats;
pub mod synth;

use std::fmt;
use std::path::Path;
use std::str::FromStr;

use coflow_core::Workload;

pub use benchmark::{MAX_TRACE_FLOWS, parse_benchmark, read_benchmark, write_benchmark};
pub use error::{Field, MAX_STREAM_BYTES, TraceError, read_regular_text, read_text};
pub use jsonl::{JSONL_FORMAT, JSONL_VERSION, parse_jsonl, read_jsonl, write_jsonl};
pub use stats::{BinStats, TraceStats, stats};

/// A trace file format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TraceFormat {
    /// The coflow-benchmark text format of the Facebook trace.
    Benchmark,
    /// Our JSON Lines format, `coflow-jsonl`.
    Jsonl,
}

impl TraceFormat {
    /// Every format.
    pub const ALL: [TraceFormat; 2] = [TraceFormat::Benchmark, TraceFormat::Jsonl];

    /// The short name, as accepted by [`FromStr`]: `benchmark` or `jsonl`.
    pub fn name(self) -> &'static str {
        match self {
            TraceFormat::Benchmark => "benchmark",
            TraceFormat::Jsonl => "jsonl",
        }
    }

    /// The format a file name implies: `.jsonl` and `.json` are JSON Lines, `.txt` is
    /// coflow-benchmark (case does not matter); any other name implies nothing.
    pub fn from_extension(path: &Path) -> Option<TraceFormat> {
        let ext = path.extension()?.to_str()?;
        if ext.eq_ignore_ascii_case("jsonl") || ext.eq_ignore_ascii_case("json") {
            Some(TraceFormat::Jsonl)
        } else if ext.eq_ignore_ascii_case("txt") {
            Some(TraceFormat::Benchmark)
        } else {
            None
        }
    }

    /// The format of a trace: by its file name's extension, or else JSON Lines if its first
    /// non-blank character is `{`, and coflow-benchmark otherwise. A file whose name says
    /// coflow-benchmark but that opens with `{` is JSON Lines: no coflow-benchmark file does; one
    /// whose name says JSON Lines but that opens with a digit is coflow-benchmark: no JSON Lines
    /// file does (its header is an object).
    pub fn detect(path: &Path, text: &str) -> TraceFormat {
        match TraceFormat::from_extension(path) {
            Some(TraceFormat::Benchmark) | None => TraceFormat::sniff(text),
            Some(TraceFormat::Jsonl) if TraceFormat::opens_with_digit(text) => TraceFormat::Benchmark,
            Some(TraceFormat::Jsonl) => TraceFormat::Jsonl,
        }
    }

    /// Whether the first non-blank character (after any byte order mark) is a digit.
    fn opens_with_digit(text: &str) -> bool {
        text.trim_start_matches(|c: char| c.is_whitespace() || c == '\u{feff}')
            .starts_with(|c: char| c.is_ascii_digit())
    }

    /// The format of a trace by its first non-blank character (after any byte order mark): `{` is
    /// JSON Lines.
    pub fn sniff(text: &str) -> TraceFormat {
        match text.trim_start_matches(|c: char| c.is_whitespace() || c == '\u{feff}').chars().next() {
            Some('{') => TraceFormat::Jsonl,
            _ => TraceFormat::Benchmark,
        }
    }

    /// Parses a trace in this format.
    pub fn parse(self, text: &str) -> Result<Workload, TraceError> {
        match self {
            TraceFormat::Benchmark => parse_benchmark(text),
            TraceFormat::Jsonl => parse_jsonl(text),
        }
    }

    /// Writes a workload in this format.
    pub fn write(self, w: &Workload, out: &mut impl std::io::Write) -> Result<(), TraceError> {
        match self {
            TraceFormat::Benchmark => write_benchmark(w, out),
            TraceFormat::Jsonl => write_jsonl(w, out),
        }
    }
}

impl fmt::Display for TraceFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A name that is not a [`TraceFormat`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown trace format {0:?} (expected benchmark or jsonl)")]
pub struct ParseFormatError(pub String);

impl FromStr for TraceFormat {
    type Err = ParseFormatError;

    /// Accepts `benchmark` (or `coflow-benchmark`, `txt`) and `jsonl` (or `coflow-jsonl`, `json`).
    fn from_str(s: &str) -> Result<TraceFormat, ParseFormatError> {
        match s.to_ascii_lowercase().as_str() {
            "benchmark" | "coflow-benchmark" | "txt" => Ok(TraceFormat::Benchmark),
            "jsonl" | "coflow-jsonl" | "json" => Ok(TraceFormat::Jsonl),
            _ => Err(ParseFormatError(s.to_string())),
        }
    }
}

/// Reads a trace in either format, detected by [`TraceFormat::detect`].
pub fn read_trace(path: &Path) -> Result<Workload, TraceError> {
    let text = crate::error::read_text(path)?;
    TraceFormat::detect(path, &text).parse(&text)
}

/// Writes a trace to a file in `format`, replacing the file.
///
/// The whole trace is rendered before the file is touched, so a workload the format cannot
/// represent ([`TraceError::NotRepresentable`]) leaves no file behind.
pub fn write_trace(w: &Workload, path: &Path, format: TraceFormat) -> Result<(), TraceError> {
    let mut buf = Vec::new();
    format.write(w, &mut buf)?;
    replace_file(path, &buf).map_err(|source| TraceError::Io { path: path.to_owned(), source })
}

/// Writes `bytes` to the regular file `path` whole or not at all: into a new file beside it,
/// then renamed over it, so that a write that fails (a full disk, a killed process) leaves the
/// file as it was, and a trace converted onto itself is never lost. An existing file keeps its
/// permissions. Anything else at `path` (a device such as `/dev/null`, a pipe, a link) is
/// written through, as `std::fs::write` does.
pub fn replace_file(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let existing = match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_file() => Some(m.permissions()),
        Ok(_) => return std::fs::write(path, bytes),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    let temporary = temporary_beside(path)?;
    let written = (|| {
        use std::io::Write as _;
        let mut f = std::fs::File::create(&temporary)?;
        f.write_all(bytes)?;
        if let Some(permissions) = existing {
            f.set_permissions(permissions)?;
        }
        f.sync_all()?;
        std::fs::rename(&temporary, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    written
}

/// Checks now that [`replace_file`] could replace the regular file `path` later: that its
/// directory takes the new file written beside it (created and removed again). Anything else at
/// `path` is written through, which opening it checks.
pub fn check_replaceable(path: &Path) -> std::io::Result<()> {
    if !std::fs::symlink_metadata(path).is_ok_and(|m| m.is_file()) {
        return Ok(());
    }
    let temporary = temporary_beside(path)?;
    std::fs::File::create(&temporary)?;
    std::fs::remove_file(&temporary)
}

/// The new file [`replace_file`] writes beside `path` before renaming it over `path`.
fn temporary_beside(path: &Path) -> std::io::Result<std::path::PathBuf> {
    let name = path.file_name().ok_or_else(|| std::io::Error::other("the path names no file"))?;
    let mut temporary = std::ffi::OsString::from(".");
    temporary.push(name);
    temporary.push(format!(".{}.tmp", std::process::id()));
    Ok(path.with_file_name(temporary))
}
