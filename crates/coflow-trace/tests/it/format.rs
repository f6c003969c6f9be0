//! Format names, detection by file name and content, and reading and writing files.

use std::path::{Path, PathBuf};

use coflow_trace::{TraceError, TraceFormat, read_benchmark, read_jsonl, read_trace, replace_file, write_trace};

/// A fresh path in Cargo's scratch directory for integration tests.
fn scratch(name: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("coflow-trace-format-{name}"));
    let _ = std::fs::remove_file(&path);
    path
}

#[test]
fn detects_by_extension() {
    assert_eq!(TraceFormat::from_extension(Path::new("a/b.jsonl")), Some(TraceFormat::Jsonl));
    assert_eq!(TraceFormat::from_extension(Path::new("b.JSON")), Some(TraceFormat::Jsonl));
    assert_eq!(TraceFormat::from_extension(Path::new("FB2010-1Hr-150-0.txt")), Some(TraceFormat::Benchmark));
    assert_eq!(TraceFormat::from_extension(Path::new("trace")), None);
    assert_eq!(TraceFormat::from_extension(Path::new("trace.csv")), None);
}

#[test]
fn sniffs_the_first_character() {
    assert_eq!(TraceFormat::sniff("\n  {\"format\":\"coflow-jsonl\"}"), TraceFormat::Jsonl);
    assert_eq!(TraceFormat::sniff("150 526\n"), TraceFormat::Benchmark);
    assert_eq!(TraceFormat::sniff(""), TraceFormat::Benchmark);
    assert_eq!(TraceFormat::sniff("\u{feff}{}"), TraceFormat::Jsonl);
    // The extension decides, except that no coflow-benchmark file opens with `{`, and no
    // coflow-jsonl file with a digit.
    assert_eq!(TraceFormat::detect(Path::new("x.txt"), "150 526\n"), TraceFormat::Benchmark);
    assert_eq!(TraceFormat::detect(Path::new("x.txt"), " {"), TraceFormat::Jsonl);
    assert_eq!(TraceFormat::detect(Path::new("x.jsonl"), "150 526\n"), TraceFormat::Benchmark);
    assert_eq!(TraceFormat::detect(Path::new("x.json"), "\u{feff} 6 1\n"), TraceFormat::Benchmark);
    assert_eq!(TraceFormat::detect(Path::new("x.jsonl"), "[not json"), TraceFormat::Jsonl);
    assert_eq!(TraceFormat::detect(Path::new("x.trace"), "{"), TraceFormat::Jsonl);
}

#[test]
fn names_parse_and_display() {
    for f in TraceFormat::ALL {
        assert_eq!(f.to_string().parse::<TraceFormat>(), Ok(f));
    }
    assert_eq!("coflow-benchmark".parse::<TraceFormat>(), Ok(TraceFormat::Benchmark));
    assert_eq!("JSONL".parse::<TraceFormat>(), Ok(TraceFormat::Jsonl));
    let err = "csv".parse::<TraceFormat>().unwrap_err();
    assert_eq!(err.to_string(), "unknown trace format \"csv\" (expected benchmark or jsonl)");
}

#[test]
fn writes_and_reads_files_in_both_formats() {
    let w = crate::small_workload();
    for (name, format) in
        [("a.txt", TraceFormat::Benchmark), ("a.jsonl", TraceFormat::Jsonl), ("noext", TraceFormat::Jsonl)]
    {
        let path = scratch(name);
        write_trace(&w, &path, format).unwrap();
        assert_eq!(read_trace(&path).unwrap(), w, "{name}");
    }
    assert_eq!(read_benchmark(&scratch_written("b.txt", &w, TraceFormat::Benchmark)).unwrap(), w);
    assert_eq!(read_jsonl(&scratch_written("b.jsonl", &w, TraceFormat::Jsonl)).unwrap(), w);
}

/// A trace file that opens with blank lines reads as the same file without them, in either
/// format, named for it or not: `read_trace` is also what the Python package's `read_trace` calls.
#[test]
fn a_file_that_opens_with_blank_lines_reads_as_without_them() {
    let w = crate::small_workload();
    for (name, format) in [("lead.txt", TraceFormat::Benchmark), ("lead.jsonl", TraceFormat::Jsonl)] {
        let mut text = b"\n \r\n\n".to_vec();
        format.write(&w, &mut text).unwrap();
        for name in [name, "lead-noext"] {
            let path = scratch(name);
            std::fs::write(&path, &text).unwrap();
            assert_eq!(read_trace(&path).unwrap(), w, "{name} in {format}");
        }
    }
}

/// Writes `w` to a fresh scratch file and returns its path.
fn scratch_written(name: &str, w: &coflow_core::Workload, format: TraceFormat) -> PathBuf {
    let path = scratch(name);
    write_trace(w, &path, format).unwrap();
    path
}

#[test]
fn missing_file_names_the_path() {
    let path = scratch("does-not-exist.txt");
    let err = read_trace(&path).unwrap_err();
    assert!(matches!(&err, TraceError::Io { path: p, .. } if *p == path));
    assert!(err.to_string().contains("does-not-exist.txt"), "{err}");
}

/// A written file is replaced whole: a new file beside it renamed over it, with the old file's
/// permissions and nothing left beside it; a device or a link is written through, never replaced.
#[test]
fn a_file_is_replaced_whole_and_a_device_or_link_written_through() {
    use std::os::unix::fs::PermissionsExt;
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("coflow-trace-replace");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("r.json");
    replace_file(&file, b"first").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o640)).unwrap();
    replace_file(&file, b"second").unwrap();
    assert_eq!(std::fs::read(&file).unwrap(), b"second");
    assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o640);
    let link = dir.join("link.json");
    std::os::unix::fs::symlink(&file, &link).unwrap();
    replace_file(&link, b"third").unwrap();
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink(), "the link stays a link");
    assert_eq!(std::fs::read(&file).unwrap(), b"third");
    let names: Vec<String> =
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    assert_eq!(names.len(), 2, "no temporary file is left: {names:?}");
    replace_file(Path::new("/dev/null"), b"gone").unwrap();
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::metadata("/dev/null").unwrap().file_type().is_char_device(), "/dev/null stays a device");
    // A directory that does not exist: an error, and nothing written.
    assert!(replace_file(&dir.join("no/such.json"), b"x").is_err());
    std::fs::remove_dir_all(&dir).unwrap();
}
