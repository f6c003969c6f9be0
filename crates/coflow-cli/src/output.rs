//! Where commands write what they report: `--json FILE` and `--csv FILE`, with `-` for standard
//! output (the human table then goes to standard error, so that the output parses), each
//! checked before a run starts so that a path that cannot be written fails at once rather than
//! after a long run.

use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};
use serde::Serialize;

/// Whether `path` means standard output.
pub(crate) fn is_stdout(path: &Path) -> bool {
    path == Path::new("-")
}

/// Fails now if `path` could not be written later (creating it to find out, and removing it
/// again if it did not exist).
pub(crate) fn check(path: Option<&Path>) -> Result<()> {
    let Some(path) = path.filter(|p| !is_stdout(p)) else { return Ok(()) };
    let existed = path.exists();
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .with_context(|| format!("cannot write {}", path.display()))?;
    if !existed {
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}

/// Writes `text` to `path`, or to standard output for `-`.
pub(crate) fn write(path: &Path, text: &str) -> Result<()> {
    if is_stdout(path) {
        let mut out = std::io::stdout().lock();
        out.write_all(text.as_bytes())?;
        return Ok(out.flush()?);
    }
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// Writes `value` as pretty JSON with a final newline.
pub(crate) fn json(path: &Path, value: &impl Serialize) -> Result<()> {
    write(path, &(serde_json::to_string_pretty(value).context("rendering the report")? + "\n"))
}

/// Prints a command's human-readable report: to standard output, or to standard error when
/// standard output carries one of `outputs`.
pub(crate) fn human(text: &str, outputs: &[Option<&Path>]) {
    if outputs.iter().flatten().any(|p| is_stdout(p)) {
        eprint!("{text}");
    } else {
        print!("{text}");
    }
}

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
