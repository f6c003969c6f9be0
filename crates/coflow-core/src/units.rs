//! Units that carry their dimension in the type: [`Bytes`], [`Nanos`] and [`Rate`].
//!
//! Simulated and scheduled time is integer nanoseconds, so that equal times compare equal and
//! runs are reproducible to the byte.
//! Rates are `f64` bytes per second, because the fluid model divides them freely.

use std::fmt;
use std::ops::{Add, AddAssign, Sub};
use std::str::FromStr;

/// One mebibyte, 2^20 bytes: the "MB" of the coflow-benchmark trace format.
pub const MIB: u64 = 1 << 20;

/// A number of bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Bytes(pub u64);

impl Bytes {
    /// Zero bytes.
    pub const ZERO: Bytes = Bytes(0);

    /// The raw count.
    pub const fn get(self) -> u64 {
        self.0
    }

    /// The count as `f64`, for fluid arithmetic.
    pub fn as_f64(self) -> f64 {
        self.0 as f64
    }

    /// A count of mebibytes (2^20 bytes).
    pub const fn mib(n: u64) -> Bytes {
        Bytes(n * MIB)
    }
}

/// Why a size could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseBytesError {
    /// The number part did not parse, or the size is negative or not finite.
    #[error("bad size {0:?} (expected e.g. 600MB, 1.5GiB, 64KiB or 600000000)")]
    Number(String),
    /// The unit is not one we know.
    #[error("unknown size unit {0:?} (expected B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)")]
    Unit(String),
}

impl FromStr for Bytes {
    type Err = ParseBytesError;

    /// A size: a number of bytes, or a number and a unit (`KB`, `MB`, `GB`, `TB` decimal; `KiB`,
    /// `MiB`, `GiB`, `TiB` binary; in either case), with or without a space;
    /// rounded to the nearest byte.
    fn from_str(s: &str) -> Result<Bytes, ParseBytesError> {
        let s = s.trim();
        let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_')).unwrap_or(s.len());
        let (num, unit) = s.split_at(split);
        let unit = unit.trim();
        // A whole number of bytes is read exactly: as an `f64`, one past 2^53 would be rounded.
        if matches!(unit, "" | "b" | "B") && !num.contains('.') {
            return num.replace('_', "").parse().map(Bytes).map_err(|_| ParseBytesError::Number(s.to_string()));
        }
        let n: f64 = num.replace('_', "").parse().map_err(|_| ParseBytesError::Number(s.to_string()))?;
        let (power, rest) = match unit.chars().next().map(|c| c.to_ascii_lowercase()) {
            Some('k') => (1, &unit[1..]),
            Some('m') => (2, &unit[1..]),
            Some('g') => (3, &unit[1..]),
            Some('t') => (4, &unit[1..]),
            _ => (0, unit),
        };
        // A size is in bytes whatever the case of its `B` (a rate's `bps` is refused).
        let scale = match rest.to_ascii_lowercase().as_str() {
            "" | "b" if power == 0 => 1.0,
            "b" => 1000f64.powi(power),
            "ib" if power > 0 => 1024f64.powi(power),
            _ => return Err(ParseBytesError::Unit(unit.to_string())),
        };
        let v = (n * scale).round();
        // `u64::MAX as f64` is 2^64, one past the largest size.
        if !(v.is_finite() && v >= 0.0 && v < u64::MAX as f64) {
            return Err(ParseBytesError::Number(s.to_string()));
        }
        Ok(Bytes(v as u64))
    }
}

impl Add for Bytes {
    type Output = Bytes;
    fn add(self, rhs: Bytes) -> Bytes {
        Bytes(self.0 + rhs.0)
    }
}

impl AddAssign for Bytes {
    fn add_assign(&mut self, rhs: Bytes) {
        self.0 += rhs.0;
    }
}

impl std::iter::Sum for Bytes {
    fn sum<I: Iterator<Item = Bytes>>(iter: I) -> Bytes {
        Bytes(iter.map(|b| b.0).sum())
    }
}

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0 as f64;
        const UNITS: [(&str, f64); 4] =
            [("TiB", (1u64 << 40) as f64), ("GiB", (1u64 << 30) as f64), ("MiB", (1u64 << 20) as f64), ("KiB", 1024.0)];
        for (name, scale) in UNITS {
            if b >= scale {
                return write!(f, "{:.2} {name}", b / scale);
            }
        }
        write!(f, "{} B", self.0)
    }
}

/// A point in time or a duration, in integer nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Nanos(pub u64);

impl Nanos {
    /// Time zero.
    pub const ZERO: Nanos = Nanos(0);
    /// The largest representable time, used as "never".
    pub const MAX: Nanos = Nanos(u64::MAX);

    /// The raw count of nanoseconds.
    pub const fn get(self) -> u64 {
        self.0
    }

    /// The most whole milliseconds a time holds (about 584 years).
    pub const MAX_MILLIS: u64 = u64::MAX / 1_000_000;

    /// Whole milliseconds, at most [`Nanos::MAX_MILLIS`] (past it the count overflows: take
    /// [`Nanos::checked_from_millis`] for a count read from input).
    pub const fn from_millis(ms: u64) -> Nanos {
        Nanos(ms * 1_000_000)
    }

    /// Whole milliseconds, or `None` past [`Nanos::MAX_MILLIS`].
    pub const fn checked_from_millis(ms: u64) -> Option<Nanos> {
        match ms.checked_mul(1_000_000) {
            Some(ns) => Some(Nanos(ns)),
            None => None,
        }
    }

    /// Whole seconds.
    pub const fn from_secs(s: u64) -> Nanos {
        Nanos(s * 1_000_000_000)
    }

    /// Seconds as `f64`, rounded to the nearest nanosecond; negative or NaN input gives zero
    /// and values past the range saturate.
    pub fn from_secs_f64(s: f64) -> Nanos {
        let ns = (s * 1e9).round();
        if ns.is_nan() || ns <= 0.0 {
            Nanos::ZERO
        } else if ns >= u64::MAX as f64 {
            Nanos::MAX
        } else {
            Nanos(ns as u64)
        }
    }

    /// This time in seconds.
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e9
    }

    /// `self - earlier`, or zero if `earlier` is later.
    pub fn saturating_sub(self, earlier: Nanos) -> Nanos {
        Nanos(self.0.saturating_sub(earlier.0))
    }

    /// `self + d`, saturating at [`Nanos::MAX`].
    pub fn saturating_add(self, d: Nanos) -> Nanos {
        Nanos(self.0.saturating_add(d.0))
    }
}

impl Add for Nanos {
    type Output = Nanos;
    fn add(self, rhs: Nanos) -> Nanos {
        Nanos(self.0 + rhs.0)
    }
}

impl Sub for Nanos {
    type Output = Nanos;
    fn sub(self, rhs: Nanos) -> Nanos {
        debug_assert!(self.0 >= rhs.0, "time went backwards: {self:?} - {rhs:?}");
        Nanos(self.0 - rhs.0)
    }
}

/// Why a duration did not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParseDurationError {
    /// The number part did not parse, or the duration is negative or not finite.
    #[error("bad duration {0:?} (expected e.g. 3s, 100ms, 250us, 2m or 1.5h)")]
    Number(String),
    /// The duration is past what a nanosecond count holds (about 584 years).
    #[error("duration {0:?} is too long (at most about 584 years)")]
    TooLong(String),
    /// The unit is missing or not one we know.
    #[error("unknown duration unit in {0:?} (expected ns, us, ms, s, m or h)")]
    Unit(String),
}

impl FromStr for Nanos {
    type Err = ParseDurationError;

    /// A duration: a number and a unit (`ns`, `us` or `µs`, `ms`, `s`, `m`, `h`), with or without
    /// a space; rounded to the nearest nanosecond. A bare number is refused: its unit would be a
    /// guess.
    fn from_str(s: &str) -> Result<Nanos, ParseDurationError> {
        let s = s.trim();
        let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_')).unwrap_or(s.len());
        let (num, unit) = s.split_at(split);
        let n: f64 = num.replace('_', "").parse().map_err(|_| ParseDurationError::Number(s.to_string()))?;
        let scale = match unit.trim() {
            "ns" => 1.0,
            "us" | "µs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" | "min" => 60e9,
            "h" => 3600e9,
            _ => return Err(ParseDurationError::Unit(s.to_string())),
        };
        let v = (n * scale).round();
        if !(v.is_finite() && v >= 0.0) {
            return Err(ParseDurationError::Number(s.to_string()));
        }
        if v >= u64::MAX as f64 {
            return Err(ParseDurationError::TooLong(s.to_string()));
        }
        Ok(Nanos(v as u64))
    }
}

impl fmt::Display for Nanos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.3}s", self.as_secs_f64())
    }
}

/// A transfer rate, in bytes per second.
///
/// Parsed from text with [`FromStr`]: a bare number is bytes per second, and a unit may follow:
/// bits (`bps`, `Kbps`, `Mbps`, `Gbps`, `Tbps`, `Pbps`, or `bit/s`, `Gbit/s`, `Gb/s`…, decimal
/// prefixes) or bytes (`B/s`, `KB/s`, `MB/s`, `GB/s`, `TB/s`, `PB/s` decimal; `KiB/s`, `MiB/s`,
/// `GiB/s`… binary). It is shown in the largest bit unit it reaches, up to `Pbit/s`.
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd, Default)]
pub struct Rate(f64);

impl Rate {
    /// No rate at all.
    pub const ZERO: Rate = Rate(0.0);
    /// 1 Gbit/s, the default port capacity: 125,000,000 bytes per second.
    pub const GBPS: Rate = Rate(125_000_000.0);

    /// A rate of `b` bytes per second. Panics on a negative or non-finite value, which is a bug.
    pub fn from_bytes_per_sec(b: f64) -> Rate {
        assert!(b.is_finite() && b >= 0.0, "invalid rate {b}");
        Rate(b)
    }

    /// Bytes per second.
    pub fn bytes_per_sec(self) -> f64 {
        self.0
    }

    /// Bits per second.
    pub fn bits_per_sec(self) -> f64 {
        self.0 * 8.0
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bits = self.bits_per_sec();
        const UNITS: [(&str, f64); 5] =
            [("Pbit/s", 1e15), ("Tbit/s", 1e12), ("Gbit/s", 1e9), ("Mbit/s", 1e6), ("Kbit/s", 1e3)];
        for (name, scale) in UNITS {
            if bits >= scale {
                let v = bits / scale;
                return if (v - v.round()).abs() < 1e-9 {
                    write!(f, "{} {name}", v.round())
                } else {
                    write!(f, "{v:.3} {name}")
                };
            }
        }
        write!(f, "{bits} bit/s")
    }
}

/// Why a rate could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseRateError {
    /// The text was empty.
    #[error("empty rate")]
    Empty,
    /// The number part did not parse.
    #[error("bad number {0:?} in rate (expected e.g. 1Gbps, 128MiB/s or 125000000)")]
    Number(String),
    /// The unit is not one we know.
    #[error(
        "unknown rate unit {0:?} (expected bps, Kbps, Mbps, Gbps, Tbps, Pbps, B/s, KB/s, MB/s, GB/s, TB/s, PB/s, KiB/s, \
         MiB/s, GiB/s)"
    )]
    Unit(String),
    /// The rate is zero, negative or not finite.
    #[error("rate must be positive and finite, got {0:?}")]
    NotPositive(String),
}

impl FromStr for Rate {
    type Err = ParseRateError;

    fn from_str(s: &str) -> Result<Rate, ParseRateError> {
        let s = s.trim();
        if s.is_empty() {
            return Err(ParseRateError::Empty);
        }
        let split = s
            .find(|c: char| {
                !(c.is_ascii_digit() || c == '.' || c == 'e' || c == 'E' || c == '_' || c == '+' || c == '-')
            })
            .unwrap_or(s.len());
        // A unit may start with `E` only as "EB", which we do not support, so the scan above is safe
        // except for exponent letters directly followed by a unit, e.g. "1e9bps"; that parses as 1e9 bps.
        let (num, unit) = s.split_at(split);
        // With no digits before the first letter (`NaN`, `inf`, `fast`), the whole input is the number.
        let bad = || ParseRateError::Number(if num.is_empty() { s } else { num }.to_string());
        let num: f64 = num.replace('_', "").parse().map_err(|_| bad())?;
        let scale = unit_scale(unit.trim()).ok_or_else(|| ParseRateError::Unit(unit.trim().to_string()))?;
        let v = num * scale;
        if !(v.is_finite() && v > 0.0) {
            return Err(ParseRateError::NotPositive(s.to_string()));
        }
        Ok(Rate(v))
    }
}

/// Bytes per second for one unit of `unit`.
fn unit_scale(unit: &str) -> Option<f64> {
    if unit.is_empty() {
        return Some(1.0);
    }
    // The power of 1000 (or of 1024 with an `i`) that the prefix letter stands for.
    let (power, rest) = match unit.chars().next()?.to_ascii_lowercase() {
        'k' => (1, &unit[1..]),
        'm' => (2, &unit[1..]),
        'g' => (3, &unit[1..]),
        't' => (4, &unit[1..]),
        'p' => (5, &unit[1..]),
        _ => (0, unit),
    };
    if let Some(after_i) = rest.strip_prefix('i') {
        return (power > 0 && matches!(after_i, "B/s" | "Bps")).then(|| 1024f64.powi(power));
    }
    let prefix = 1000f64.powi(power);
    match rest {
        "bps" | "bit/s" | "b/s" | "bits/s" => Some(prefix / 8.0),
        "B/s" | "Bps" => Some(prefix),
        _ => None,
    }
}

/// A number as an error message quotes it: as written (`2000`, `0.5`) in the usual range, and in
/// exponent form (`1e308`, `1e-300`) outside it, never hundreds of digits.
pub fn shown(x: f64) -> String {
    if x == 0.0 || (x.is_finite() && (1e-5..1e16).contains(&x.abs())) { format!("{x}") } else { format!("{x:?}") }
}

/// A count with its noun, for what is printed: `counted(1, "coflow", "coflows")` is `1 coflow`,
/// with 2 `2 coflows`.
pub fn counted(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_count_of_one_is_singular() {
        assert_eq!(super::counted(1, "coflow", "coflows"), "1 coflow");
        assert_eq!(
            (super::counted(0, "flow", "flows"), super::counted(2, "flow", "flows")),
            ("0 flows".into(), "2 flows".into())
        );
    }

    #[test]
    fn a_number_is_shown_short() {
        let cases = [(2000.0, "2000"), (0.5, "0.5"), (-1.0, "-1"), (1e308, "1e308"), (1e-300, "1e-300")];
        for (x, s) in cases {
            assert_eq!(super::shown(x), s);
        }
        assert_eq!((super::shown(f64::INFINITY), super::shown(f64::NAN)), ("inf".into(), "NaN".into()));
    }

    #[test]
    fn durations_parse_with_their_units_and_bare_numbers_are_refused() {
        use super::{Nanos, ParseDurationError};
        assert_eq!("3s".parse::<Nanos>(), Ok(Nanos::from_millis(3000)));
        assert_eq!("100 ms".parse::<Nanos>(), Ok(Nanos::from_millis(100)));
        assert_eq!("1.5h".parse::<Nanos>(), Ok(Nanos(5_400_000_000_000)));
        assert_eq!("250us".parse::<Nanos>(), Ok(Nanos(250_000)));
        assert_eq!("2m".parse::<Nanos>(), Ok(Nanos(120_000_000_000)));
        assert_eq!("3000".parse::<Nanos>(), Err(ParseDurationError::Unit("3000".into())));
        assert_eq!("3x".parse::<Nanos>(), Err(ParseDurationError::Unit("3x".into())));
        assert_eq!("-1s".parse::<Nanos>(), Err(ParseDurationError::Number("-1s".into())));
        let long = "99999999999s".parse::<Nanos>().unwrap_err();
        assert_eq!(long, ParseDurationError::TooLong("99999999999s".into()));
        assert!(long.to_string().contains("too long (at most about 584 years)"), "{long}");
    }
    use super::*;

    fn rate(s: &str) -> f64 {
        s.parse::<Rate>().unwrap().bytes_per_sec()
    }

    #[test]
    fn sizes_parse_with_and_without_units() {
        let b = |s: &str| s.parse::<Bytes>().map(Bytes::get);
        assert_eq!(b("600000000"), Ok(600_000_000));
        assert_eq!(b("600MB"), Ok(600_000_000));
        assert_eq!(b("600 MB"), Ok(600_000_000));
        assert_eq!(b("1.2GB"), Ok(1_200_000_000));
        assert_eq!(b("64KiB"), Ok(65_536));
        assert_eq!(b("1mib"), Ok(1 << 20));
        assert_eq!(b("7B"), Ok(7));
        assert!(matches!(b("600 furlongs"), Err(ParseBytesError::Unit(_))));
        assert!(matches!(b("MB"), Err(ParseBytesError::Number(_))));
        assert!(matches!(b("-5MB"), Err(ParseBytesError::Number(_))));
        assert!(matches!(b("1Mbps"), Err(ParseBytesError::Unit(_))), "a rate is not a size");
    }

    /// A size past 64 bits is refused rather than cut to the largest, and a whole number of
    /// bytes past 2^53 is read to the byte.
    #[test]
    fn sizes_are_exact_or_refused() {
        let b = |s: &str| s.parse::<Bytes>().map(Bytes::get);
        assert_eq!(b("9007199254740993"), Ok(9_007_199_254_740_993));
        assert_eq!(b("18446744073709551615B"), Ok(u64::MAX));
        assert!(matches!(b("18446744073709551616"), Err(ParseBytesError::Number(_))));
        assert!(matches!(b("18446744.073709551616TB"), Err(ParseBytesError::Number(_))));
        assert!(matches!(b("16777216TiB"), Err(ParseBytesError::Number(_))));
        assert_eq!(b("1_000"), Ok(1000));
        assert!(matches!(b("_"), Err(ParseBytesError::Number(_))));
    }

    #[test]
    fn parses_the_documented_forms() {
        assert_eq!(rate("1Gbps"), 125_000_000.0);
        assert_eq!(rate("1 Gbit/s"), 125_000_000.0);
        assert_eq!(rate("10Gb/s"), 1_250_000_000.0);
        assert_eq!(rate("128MiB/s"), 128.0 * 1048576.0);
        assert_eq!(rate("125000000"), 125_000_000.0);
        assert_eq!(rate("100MB/s"), 100e6);
        assert_eq!(rate("800Mbps"), 100e6);
        assert_eq!(rate("1.5GiB/s"), 1.5 * 1073741824.0);
        assert_eq!(rate("8bps"), 1.0);
        // The peta units, up to the fastest port a simulation takes (1 Pbit/s).
        for s in ["1Pbps", "1 Pbit/s", "1Pb/s", "0.125PB/s", "125TB/s", "1000Tbps"] {
            assert_eq!(rate(s), 125e12, "{s}");
        }
        assert_eq!(rate("1PiB/s"), 1024f64.powi(5));
    }

    #[test]
    fn rejects_bad_rates() {
        assert_eq!("".parse::<Rate>(), Err(ParseRateError::Empty));
        assert!(matches!("fast".parse::<Rate>(), Err(ParseRateError::Number(_))));
        assert!(matches!("1Gbpx".parse::<Rate>(), Err(ParseRateError::Unit(_))));
        assert!(matches!("0".parse::<Rate>(), Err(ParseRateError::NotPositive(_))));
        assert!(matches!("-5MB/s".parse::<Rate>(), Err(ParseRateError::NotPositive(_))));
    }

    #[test]
    fn nanos_round_trip_seconds() {
        assert_eq!(Nanos::from_secs_f64(1.5), Nanos(1_500_000_000));
        assert_eq!(Nanos::from_secs_f64(-1.0), Nanos::ZERO);
        assert_eq!(Nanos::from_millis(200).as_secs_f64(), 0.2);
    }

    #[test]
    fn displays_rates_and_bytes() {
        assert_eq!(Rate::GBPS.to_string(), "1 Gbit/s");
        let shown = |b: f64| Rate::from_bytes_per_sec(b).to_string();
        assert_eq!(shown(125e12), "1 Pbit/s");
        assert_eq!(shown(1e15), "8 Pbit/s");
        assert_eq!(shown(124e12), "992 Tbit/s");
        assert_eq!(shown(2.5e14 / 3.0), "666.667 Tbit/s");
        assert_eq!(Bytes::mib(5).to_string(), "5.00 MiB");
    }
}
