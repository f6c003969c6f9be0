//! Fields of configuration files that take a unit: a duration field (`agent_timeout_ms = 3000`)
//! also takes a string with its unit (`"3s"`), a size field a size (`"100MB"`), a rate field a
//! rate (`"1Gbps"`); used with serde's `deserialize_with`, beside an alias without the unit
//! suffix (`agent_timeout = "3s"`), so that both spellings name one field.
//!
//! A bare number keeps the unit of the field's name (milliseconds, bytes, bytes per second), so
//! files written before units were accepted read the same.

use std::fmt;
use std::marker::PhantomData;

use serde::Deserializer;
use serde::de::{Error, Visitor};

use crate::{Bytes, Nanos, Rate};

/// A number in the field's own unit, or a string parsed with its unit by `parse`.
struct Field<T> {
    expecting: &'static str,
    parse: fn(&str) -> Result<T, String>,
    number: fn(f64) -> Option<T>,
    /// A whole number as it came, so that one past 2^53 is not rounded through an `f64`.
    integer: fn(u64) -> Option<T>,
    out: PhantomData<T>,
}

impl<T> Visitor<'_> for Field<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.expecting)
    }

    fn visit_u64<E: Error>(self, v: u64) -> Result<T, E> {
        (self.integer)(v).ok_or_else(|| E::custom(format!("{v} is not {}", self.expecting)))
    }

    fn visit_i64<E: Error>(self, v: i64) -> Result<T, E> {
        match u64::try_from(v) {
            Ok(v) => self.visit_u64(v),
            Err(_) => Err(E::custom(format!("{v} is not {}", self.expecting))),
        }
    }

    fn visit_f64<E: Error>(self, v: f64) -> Result<T, E> {
        (self.number)(v).ok_or_else(|| E::custom(format!("{} is not {}", crate::shown(v), self.expecting)))
    }

    fn visit_str<E: Error>(self, v: &str) -> Result<T, E> {
        (self.parse)(v).map_err(E::custom)
    }
}

/// A whole number of the field's unit written as a float (`3000.0`, `1e6`): exact, since every
/// float from 2^53 on is whole; 2^64 and past are refused rather than saturated.
fn whole(v: f64) -> Option<u64> {
    (v >= 0.0 && v.fract() == 0.0 && v < 18_446_744_073_709_551_616.0).then_some(v as u64)
}

/// A duration in milliseconds: a number of milliseconds, or a string with its unit (`"3s"`).
pub fn millis<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    d.deserialize_any(Field {
        expecting: "a duration: a number of milliseconds or a string with its unit, e.g. \"3s\" or \"100ms\"",
        parse: whole_millis,
        number: whole,
        integer: Some,
        out: PhantomData,
    })
}

/// A duration string in whole milliseconds: one with a part of a millisecond is refused, as the
/// command line refuses it, rather than rounded to a duration the file does not say.
fn whole_millis(s: &str) -> Result<u64, String> {
    let ns = s.parse::<Nanos>().map_err(|e| e.to_string())?.0;
    if !ns.is_multiple_of(1_000_000) {
        return Err(format!("{s:?} is not a whole number of milliseconds"));
    }
    Ok(ns / 1_000_000)
}

/// A size in bytes: a number of bytes, or a string with its unit (`"100MB"`, `"4GiB"`).
pub fn bytes<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    d.deserialize_any(Field {
        expecting: "a size: a number of bytes or a string with its unit, e.g. \"100MB\" or \"64KiB\"",
        parse: |s| s.parse::<Bytes>().map(Bytes::get).map_err(|e| e.to_string()),
        number: whole,
        integer: Some,
        out: PhantomData,
    })
}

/// [`bytes`] for a `usize` field.
pub fn bytes_usize<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    let b = bytes(d)?;
    usize::try_from(b).map_err(|_| D::Error::custom(format!("{b} bytes is too large")))
}

/// A rate in bytes per second: a number of bytes per second, or a string with its unit
/// (`"1Gbps"`, `"125MB/s"`).
pub fn bytes_per_sec<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    d.deserialize_any(Field {
        expecting: "a rate: a number of bytes per second or a string with its unit, e.g. \"1Gbps\"",
        parse: |s| s.parse::<Rate>().map(Rate::bytes_per_sec).map_err(|e| e.to_string()),
        number: |v| (v.is_finite() && v >= 0.0).then_some(v),
        integer: |v| Some(v as f64),
        out: PhantomData,
    })
}

#[cfg(test)]
mod tests {
    use serde::de::value::{Error, StrDeserializer, U64Deserializer};

    use super::millis;

    /// A duration with a part of a millisecond is refused, naming what the file says, rather than
    /// rounded up to the next millisecond.
    #[test]
    fn a_duration_is_a_whole_number_of_milliseconds() {
        let text = |s: &str| millis(StrDeserializer::<Error>::new(s));
        assert_eq!(text("3s"), Ok(3_000));
        assert_eq!(text("1500us"), Err(serde::de::Error::custom("\"1500us\" is not a whole number of milliseconds")));
        assert!(text("1ns").is_err());
        assert_eq!(text("2000us"), Ok(2));
        assert_eq!(millis(U64Deserializer::<Error>::new(250)), Ok(250));
    }
}
