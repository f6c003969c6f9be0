//! What kind of file a path names, in the words every reader of operators' files uses: services
//! and the simulator read regular files only, since a FIFO blocks its reader and a device such as
//! `/dev/zero` never ends. Reading the metadata is the caller's; this only names what it says.

/// What a file of type `t` is, if it is not a regular file (`"a FIFO"`, `"a directory"`, ...).
pub fn not_regular(t: std::fs::FileType) -> Option<&'static str> {
    if t.is_file() {
        return None;
    }
    if t.is_dir() {
        return Some("a directory");
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return Some("a FIFO");
        }
        if t.is_socket() {
            return Some("a socket");
        }
        if t.is_char_device() || t.is_block_device() {
            return Some("a device");
        }
    }
    Some("a special file")
}

/// An [`std::io::ErrorKind::InvalidInput`] error if `meta` is not a regular file's, saying what it
/// is (`"a FIFO, not a regular file"`).
pub fn regular(meta: &std::fs::Metadata) -> std::io::Result<()> {
    match not_regular(meta.file_type()) {
        None => Ok(()),
        Some(what) => Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{what}, not a regular file"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_named_by_kind() {
        let guard = tempfile::Builder::new().prefix("coflow-core-files-").tempdir().unwrap();
        let dir = guard.path();
        assert_eq!(
            regular(&std::fs::metadata(dir).unwrap()).unwrap_err().to_string(),
            "a directory, not a regular file"
        );
        let f = dir.join("f");
        std::fs::write(&f, b"x").unwrap();
        assert!(regular(&std::fs::metadata(&f).unwrap()).is_ok());
        std::fs::remove_file(&f).unwrap();
        #[cfg(unix)]
        {
            let e = regular(&std::fs::metadata("/dev/null").unwrap()).unwrap_err();
            assert_eq!(
                (e.kind(), e.to_string().as_str()),
                (std::io::ErrorKind::InvalidInput, "a device, not a regular file")
            );
        }
    }
}
