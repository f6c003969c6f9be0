//! Reading the small files an operator hands a service (configuration, cluster token, TLS
//! certificates and keys): only regular files, and only up to a bound, so that a path to a FIFO
//! with no writer, a device such as `/dev/zero` or a directory fails at once with an error that
//! says so, rather than hanging or filling memory; and writing the files a service or
//! `coflow certs` keeps, and the directories that hold them, with permissions of their own (not
//! the umask's), never through a link planted at their paths.

use std::io::{self, Read, Write};
use std::path::Path;

/// Creates the file `path`, which must not exist (a link there is not followed:
/// `O_CREAT | O_EXCL | O_NOFOLLOW`), with permissions exactly `mode` whatever the umask, and
/// writes `bytes` to it, synced to disk; a file it created but could not fill is removed.
pub fn write_new(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    use rustix::fs::{Mode, OFlags};
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let file = std::fs::File::from(rustix::fs::open(path, flags, Mode::from_raw_mode(mode)).map_err(io::Error::from)?);
    // The mode given to open is filtered by the umask; set on the open file, it is not.
    let written = rustix::fs::fchmod(&file, Mode::from_raw_mode(mode))
        .map_err(io::Error::from)
        .and_then(|()| (&file).write_all(bytes))
        .and_then(|()| file.sync_all());
    if written.is_err() {
        drop(file);
        let _ = std::fs::remove_file(path);
    }
    written
}

/// Creates the directory `dir` and those of its parents that do not exist, each with permissions
/// exactly `mode` whatever the umask; directories that exist already are left as they are.
pub fn create_dirs(dir: &Path, mode: u32) -> io::Result<()> {
    use rustix::fs::{Mode, OFlags};
    use std::os::unix::fs::DirBuilderExt;
    // The directories missing, deepest first.
    let mut missing = Vec::new();
    for d in dir.ancestors().take_while(|d| !d.as_os_str().is_empty()) {
        match std::fs::metadata(d) {
            Ok(_) => break,
            Err(e) if e.kind() == io::ErrorKind::NotFound => missing.push(d),
            Err(e) => return Err(e),
        }
    }
    for d in missing.into_iter().rev() {
        match std::fs::DirBuilder::new().mode(mode).create(d) {
            Ok(()) => {
                // Set on the directory just made, never through a link put in its place meanwhile.
                let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
                let fd = rustix::fs::open(d, flags, Mode::empty())?;
                rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode))?;
            }
            // Made meanwhile by another: it is not ours to change.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && d.is_dir() => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Makes the renames in directory `dir` durable, as far as it can: the files renamed were
/// synced, and they are in place whatever this says.
pub fn sync_dir(dir: &Path) {
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
}

/// The most bytes [`read_small`] reads of a configuration file or a PEM file: far above any
/// real one (a certificate chain of ten certificates is under 20 KiB).
pub const SMALL_FILE_MAX: u64 = 1 << 20;

/// The whole content of the regular file at `path` (links followed), if it holds at most
/// `max` bytes; an [`io::ErrorKind::InvalidInput`] error naming what is wrong otherwise.
pub fn read_small(path: &Path, max: u64) -> io::Result<Vec<u8>> {
    read_small_with(path, max, rustix::fs::OFlags::empty())
}

/// [`read_small`] of a file that must not be a symbolic link (`O_NOFOLLOW`): one a program
/// writes for itself, where a link can only have been planted. A link is an error of kind
/// [`io::ErrorKind::InvalidInput`] that says so.
pub fn read_small_unlinked(path: &Path, max: u64) -> io::Result<Vec<u8>> {
    read_small_with(path, max, rustix::fs::OFlags::NOFOLLOW).map_err(|e| {
        if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) {
            io::Error::new(io::ErrorKind::InvalidInput, "a symbolic link, which is not followed here")
        } else {
            e
        }
    })
}

fn read_small_with(path: &Path, max: u64, extra: rustix::fs::OFlags) -> io::Result<Vec<u8>> {
    use rustix::fs::{Mode, OFlags};
    // Non-blocking, since opening a FIFO for reading would wait for a writer; then checked on
    // what was opened, so a path changed in between cannot slip through.
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY | extra;
    let file = std::fs::File::from(rustix::fs::open(path, flags, Mode::empty()).map_err(io::Error::from)?);
    coflow_core::files::regular(&file.metadata()?)?;
    let mut out = Vec::new();
    file.take(max + 1).read_to_end(&mut out)?;
    if out.len() as u64 > max {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("larger than {max} bytes")));
    }
    Ok(out)
}

/// [`read_small`] of a UTF-8 text.
pub fn read_small_text(path: &Path, max: u64) -> io::Result<String> {
    String::from_utf8(read_small(path, max)?)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("not UTF-8 text: {}", e.utf8_error())))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh directory for one test, and the guard that removes it when dropped.
    fn dir(name: &str) -> (tempfile::TempDir, std::path::PathBuf) {
        let guard = tempfile::Builder::new().prefix(&format!("coflow-files-{name}-")).tempdir().unwrap();
        let d = guard.path().to_path_buf();
        (guard, d)
    }

    #[test]
    fn made_directories_get_the_mode_given_and_existing_ones_keep_theirs() {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        let (_guard, d) = dir("dirs");
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o711)).unwrap();
        let deep = d.join("a/b");
        // Modes with bits for others to write, which the usual umask (022) would take away.
        create_dirs(&deep, 0o772).unwrap();
        assert_eq!((mode(&d.join("a")), mode(&deep)), (0o772, 0o772));
        assert_eq!(mode(&d), 0o711, "an existing parent is left alone");
        create_dirs(&deep, 0o700).unwrap();
        assert_eq!(mode(&deep), 0o772, "an existing directory is left alone");
        let f = d.join("f");
        write_new(&f, b"x", 0o666).unwrap();
        assert_eq!(mode(&f), 0o666);
    }

    #[test]
    fn a_small_regular_file_is_read_whole() {
        let (_guard, d) = dir("whole");
        let f = d.join("f");
        std::fs::write(&f, b"abc").unwrap();
        assert_eq!(read_small(&f, 3).unwrap(), b"abc");
        assert_eq!(read_small_text(&f, 10).unwrap(), "abc");
        let link = d.join("link");
        std::os::unix::fs::symlink(&f, &link).unwrap();
        assert_eq!(read_small(&link, 3).unwrap(), b"abc", "links are followed");
    }

    #[test]
    fn a_file_past_the_bound_is_refused() {
        let (_guard, d) = dir("large");
        let f = d.join("f");
        std::fs::write(&f, b"abcd").unwrap();
        let e = read_small(&f, 3).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert_eq!(e.to_string(), "larger than 3 bytes");
        // Nor is a device with no end read at all.
        let e = read_small(Path::new("/dev/zero"), 3).unwrap_err();
        assert_eq!(e.to_string(), "a device, not a regular file");
    }

    #[test]
    fn a_directory_or_fifo_is_refused_without_waiting() {
        let (_guard, d) = dir("kinds");
        assert_eq!(read_small(&d, 10).unwrap_err().to_string(), "a directory, not a regular file");
        let fifo = d.join("fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        if made.is_ok_and(|s| s.success()) {
            // With no writer, opening it would wait forever.
            assert_eq!(read_small(&fifo, 10).unwrap_err().to_string(), "a FIFO, not a regular file");
        } else {
            eprintln!("skipped the FIFO case: mkfifo is not available");
        }
        let bad = d.join("bad");
        std::fs::write(&bad, [0xff, 0xfe]).unwrap();
        assert!(read_small_text(&bad, 10).unwrap_err().to_string().starts_with("not UTF-8 text"));
    }
}
