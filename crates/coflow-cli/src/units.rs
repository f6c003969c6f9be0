//! Values with units on the command line: a duration flag takes `100ms`, `2s` or `1.5m`, or a
//! bare number in the unit its name or help gives (`--redraw-ms 100`, `--get-timeout 30`); a
//! size flag takes `600MB`, `64KiB` or a bare number of bytes.

use coflow_core::{Bytes, Nanos};

/// Whether `s` is a bare number, with no unit.
fn bare(s: &str) -> bool {
    let s = s.trim();
    !s.is_empty() && s.chars().all(|c| c.is_ascii_digit() || c == '.' || c == '_')
}

/// A duration in whole milliseconds: a bare number of milliseconds, or a number and a unit; either
/// way at most what a nanosecond count holds (about 584 years), as [`Nanos`] is.
pub(crate) fn millis(s: &str) -> Result<u64, String> {
    if bare(s) {
        let ms: u64 = s.trim().replace('_', "").parse().map_err(|_| format!("bad number of milliseconds {s:?}"))?;
        if Nanos::checked_from_millis(ms).is_none() {
            return Err(format!("{s:?} ms is too long (at most {} ms, about 584 years)", Nanos::MAX_MILLIS));
        }
        return Ok(ms);
    }
    let ns = s.parse::<Nanos>().map_err(|e| e.to_string())?.get();
    if !ns.is_multiple_of(1_000_000) {
        return Err(format!("{s:?} is not a whole number of milliseconds"));
    }
    Ok(ns / 1_000_000)
}

/// A duration in seconds: a bare number of seconds, or a number and a unit.
pub(crate) fn seconds(s: &str) -> Result<f64, String> {
    if bare(s) {
        return s.trim().replace('_', "").parse().map_err(|_| format!("bad number of seconds {s:?}"));
    }
    Ok(s.parse::<Nanos>().map_err(|e| e.to_string())?.as_secs_f64())
}

/// A size in bytes: a bare number of bytes, or a number and a unit.
pub(crate) fn bytes(s: &str) -> Result<u64, String> {
    Ok(s.parse::<Bytes>().map_err(|e| e.to_string())?.get())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_a_unit_or_the_flag_s_own() {
        assert_eq!(millis("100"), Ok(100));
        assert_eq!(millis("100ms"), Ok(100));
        assert_eq!(millis("2s"), Ok(2000));
        assert_eq!(millis("1.5m"), Ok(90_000));
        assert!(millis("1500us").unwrap_err().contains("whole number of milliseconds"));
        assert!(millis("-5").is_err() && millis("5 parsecs").is_err() && millis("").is_err());
        assert_eq!(seconds("30"), Ok(30.0));
        assert_eq!(seconds("2m"), Ok(120.0));
        assert_eq!(seconds("250ms"), Ok(0.25));
        assert!(seconds("1e400").is_err() && seconds("soon").is_err());
        assert_eq!(bytes("600MB"), Ok(600_000_000));
        assert_eq!(bytes("64KiB"), Ok(65_536));
        assert_eq!(bytes("4096"), Ok(4096));
        assert!(bytes("-1").is_err());
    }

    /// A bare number of milliseconds is held to the nanosecond clock, as one with a unit is,
    /// rather than wrapped around to a short interval once in nanoseconds.
    #[test]
    fn a_bare_number_of_milliseconds_is_held_to_the_clock() {
        assert_eq!(millis("18446744073709"), Ok(18_446_744_073_709));
        assert_eq!(
            millis("18446744073710"),
            Err("\"18446744073710\" ms is too long (at most 18446744073709 ms, about 584 years)".into())
        );
        assert!(millis("18446744073710ms").unwrap_err().contains("too long"));
    }
}
