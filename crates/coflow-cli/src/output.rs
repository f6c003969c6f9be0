//! Where commands write what they report: `--json FILE` and `--csv FILE`, with `-` for standard
//! output (the human table then goes to standard error, so that the output parses), each
//! checked before a run starts so that a path that cannot be written fails at once rather than
//! after a long run.
//!
//! A path to the file standard output already writes (`/dev/stdout`, `/dev/fd/1`, or the very
//! file a shell redirected it to) is `-` under another name; a path to standard error's file is
//! written through standard error, in order with the remarks there. Neither is reopened, which
//! would truncate the file and write over what went before.

use std::io::Write;
use std::os::fd::AsFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Serialize;

/// Whether `path` means standard output: `-`, or a path to the file standard output writes.
pub(crate) fn is_stdout(path: &Path) -> bool {
    path == Path::new("-") || same_file(path, std::io::stdout().as_fd())
}

/// Whether `path` names the file standard error writes (and not standard output's as well).
fn is_stderr(path: &Path) -> bool {
    !is_stdout(path) && same_file(path, std::io::stderr().as_fd())
}

/// Whether `path` is the file open as `fd`, by device and inode; false if either is unknown (a
/// path that does not exist, a closed descriptor).
fn same_file(path: &Path, fd: std::os::fd::BorrowedFd<'_>) -> bool {
    let Ok(at) = std::fs::metadata(path) else { return false };
    match fd.try_clone_to_owned().and_then(|fd| std::fs::File::from(fd).metadata()) {
        Ok(open) => (at.dev(), at.ino()) == (open.dev(), open.ino()),
        Err(_) => false,
    }
}

/// Checks a command's outputs (each a flag and the path it names) before it runs: no two write
/// to one place, none writes over one of its `inputs` (a flag and the file it reads: a report
/// written over its trace would lose the trace), and each can be written.
pub(crate) fn prepare(outputs: &[(&str, Option<&Path>)], inputs: &[(&str, Option<&Path>)]) -> Result<()> {
    distinct(outputs)?;
    not_over(outputs, inputs)?;
    outputs.iter().try_for_each(|&(_, path)| check(path))
}

/// Fails if one of `outputs` would write over one of `inputs` (a flag, or what names the file,
/// and the file it reads).
pub(crate) fn not_over(outputs: &[(&str, Option<&Path>)], inputs: &[(&str, Option<&Path>)]) -> Result<()> {
    for &(flag, path) in outputs {
        let Some(path) = path else { continue };
        let at = place(path);
        if at == Place::Stdout {
            continue;
        }
        let files = inputs.iter().filter_map(|&(f, p)| Some((f, p.filter(|p| p.is_file())?)));
        if let Some((input, _)) = files.into_iter().find(|&(_, p)| place(p) == at) {
            anyhow::bail!("{flag} names the file {input} names ({}): it would be written over", path.display());
        }
    }
    Ok(())
}

/// A topology's samples files as inputs of [`not_over`], each named as the topology names it.
pub(crate) fn samples_files(files: &[PathBuf]) -> Vec<(&'static str, Option<&Path>)> {
    files.iter().map(|p| ("the topology's samples_file", Some(p.as_path()))).collect()
}

/// Fails now if `path` could not be written later (creating it to find out, and removing it
/// again if it did not exist; for a file that exists, also the new file that replaces it, written
/// beside it). Standard output and error are open already, and a FIFO is not opened: its reader
/// would take the close for the end of what it reads.
fn check(path: Option<&Path>) -> Result<()> {
    let Some(path) = path else { return Ok(()) };
    if !matches!(place(path), Place::File(_)) || std::fs::metadata(path).is_ok_and(|m| m.file_type().is_fifo()) {
        return Ok(());
    }
    let existed = path.exists();
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .with_context(|| format!("cannot write {}", path.display()))?;
    if !existed {
        let _ = std::fs::remove_file(path);
    }
    coflow_trace::check_replaceable(path).with_context(|| format!("cannot write {}", path.display()))
}

/// Where a path writes.
#[derive(Debug, PartialEq)]
enum Place {
    /// Standard output, however spelled.
    Stdout,
    /// Standard error's file, however spelled.
    Stderr,
    /// A file by its absolute path with links resolved (of the file if it exists, else of its
    /// directory), so that two spellings of one file agree.
    File(PathBuf),
}

/// Where `path` writes.
fn place(path: &Path) -> Place {
    if is_stdout(path) {
        return Place::Stdout;
    }
    if is_stderr(path) {
        return Place::Stderr;
    }
    if let Ok(p) = std::fs::canonicalize(path) {
        return Place::File(p);
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    Place::File(match (std::fs::canonicalize(dir), path.file_name()) {
        (Ok(d), Some(name)) => d.join(name),
        _ => std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf()),
    })
}

/// Fails if two of `outputs` (a flag and the path it names) would write to one place, however
/// the paths are spelled.
fn distinct(outputs: &[(&str, Option<&Path>)]) -> Result<()> {
    let given: Vec<(&str, &Path, Place)> =
        outputs.iter().filter_map(|&(flag, p)| Some((flag, p?, place(p?)))).collect();
    for (i, (flag, path, at)) in given.iter().enumerate() {
        if let Some((other, ..)) = given[..i].iter().find(|(.., a)| a == at) {
            anyhow::bail!("{other} and {flag} both write to {}", path.display());
        }
    }
    Ok(())
}

/// Writes `text` to `path` whole or not at all ([`coflow_trace::replace_file`]), to standard
/// output for `-` (or another name of it), or through standard error to its file.
pub(crate) fn write(path: &Path, text: impl AsRef<[u8]>) -> Result<()> {
    let text = text.as_ref();
    match place(path) {
        Place::Stdout => to_stdout(text).context("writing standard output"),
        Place::Stderr => to_stderr(text).with_context(|| format!("writing {} (standard error)", path.display())),
        Place::File(_) => coflow_trace::replace_file(path, text).with_context(|| format!("writing {}", path.display())),
    }
}

/// Writes `text` to standard error as an output of its own, in order with the remarks written
/// there; a reader that stopped reading ends the writing, as it does on standard output.
fn to_stderr(text: &[u8]) -> std::io::Result<()> {
    let mut err = std::io::stderr().lock();
    match err.write_all(text).and_then(|()| err.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e),
        _ => Ok(()),
    }
}

/// Writes `text` to standard output; a reader that stopped reading (`| head`) ends nothing but
/// the writing, as it would a command killed by the closed pipe, rather than a panic.
fn to_stdout(text: &[u8]) -> std::io::Result<()> {
    shown(text).map(|_| ())
}

/// Writes `text` to standard output; false if the reader has gone away (a closed pipe), for a
/// command that would otherwise go on writing (`status --watch`).
pub(crate) fn shown(text: &[u8]) -> std::io::Result<bool> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text).and_then(|()| out.flush()) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(false),
        Err(e) => Err(e),
    }
}

/// Writes `value` as pretty JSON with a final newline.
pub(crate) fn json(path: &Path, value: &impl Serialize) -> Result<()> {
    write(path, &(serde_json::to_string_pretty(value).context("rendering the report")? + "\n"))
}

/// A count with its noun: `count(1, "thread", "threads")` is `1 thread`, with 2 `2 threads`
/// ([`coflow_core::counted`], which the library's reports use too).
pub(crate) use coflow_core::counted as count;

/// The first error writing a human-readable report to standard output: the command goes on (its
/// files are still written) and fails at its end ([`unwritten`]).
static UNWRITTEN: std::sync::Mutex<Option<std::io::Error>> = std::sync::Mutex::new(None);

/// Prints a command's human-readable report: to standard output, or to standard error when
/// standard output carries one of `outputs`. A report that cannot be written (a full disk) fails
/// the command once it has done the rest of its work.
pub(crate) fn human(text: &str, outputs: &[Option<&Path>]) {
    if outputs.iter().flatten().any(|p| is_stdout(p)) {
        note(text);
    } else if let Err(e) = to_stdout(text.as_bytes()) {
        UNWRITTEN.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get_or_insert(e);
    }
}

/// Fails if some human-readable report could not be written to standard output.
pub(crate) fn unwritten() -> Result<()> {
    match UNWRITTEN.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take() {
        Some(e) => Err(anyhow::Error::new(e).context("writing standard output")),
        None => Ok(()),
    }
}

/// Writes `text` to standard error, or drops it if standard error cannot be written (a closed
/// pipe, a full disk): a remark on a run never fails the run, nor keeps its files unwritten.
pub(crate) fn note(text: &str) {
    let _ = Lossy(std::io::stderr().lock()).write_all(text.as_bytes());
}

/// A writer that drops what it cannot write, for remarks and logs: they never fail, nor panic.
pub(crate) struct Lossy<W>(pub(crate) W);

impl<W: Write> Write for Lossy<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let _ = self.0.write_all(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = self.0.flush();
        Ok(())
    }
}

/// `eprintln!` for a remark on a run, which never panics ([`note`]).
macro_rules! remark {
    ($($arg:tt)*) => {
        $crate::output::note(&format!("{}\n", format_args!($($arg)*)))
    };
}
pub(crate) use remark;

/// `println!` for a command's human report: to standard error when standard output carries one
/// of `outputs` (the first argument).
macro_rules! say {
    ($outputs:expr) => {
        $crate::output::human("\n", $outputs)
    };
    ($outputs:expr, $($arg:tt)*) => {
        $crate::output::human(&format!("{}\n", format_args!($($arg)*)), $outputs)
    };
}
pub(crate) use say;
