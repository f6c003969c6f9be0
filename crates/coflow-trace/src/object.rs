//! JSON objects only: serde's derived structs also read a JSON array as their fields in order,
//! which the file formats do not allow (a `[src, dst, bytes]` flow with its ends swapped would
//! pass unnoticed), so the readers ask for their structs through these.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, Deserialize, Deserializer, MapAccess, Visitor};

/// A `T` read from a JSON object only; an array is refused as "expected a JSON object".
#[derive(Debug)]
pub struct Object<T>(pub T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Fields<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for Fields<T> {
            type Value = T;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
                T::deserialize(de::value::MapAccessDeserializer::new(map))
            }
        }
        d.deserialize_map(Fields(PhantomData)).map(Object)
    }
}

/// For `#[serde(deserialize_with = "objects")]`: a list of `T`, each from a JSON object.
pub fn objects<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Vec<T>, D::Error> {
    Ok(Vec::<Object<T>>::deserialize(d)?.into_iter().map(|o| o.0).collect())
}

/// For `#[serde(default, deserialize_with = "optional_object")]`: a `T` from a JSON object, or
/// nothing for `null`.
pub fn optional_object<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    Ok(Option::<Object<T>>::deserialize(d)?.map(|o| o.0))
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Pair {
        a: u32,
        b: u32,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    struct Holder {
        #[serde(deserialize_with = "objects")]
        pairs: Vec<Pair>,
        #[serde(default, deserialize_with = "optional_object")]
        one: Option<Pair>,
    }

    #[test]
    fn objects_are_read_and_arrays_refused_at_every_level() {
        let ok: Object<Holder> = serde_json::from_str(r#"{"pairs":[{"a":1,"b":2}],"one":{"b":4,"a":3}}"#).unwrap();
        assert_eq!(ok.0, Holder { pairs: vec![Pair { a: 1, b: 2 }], one: Some(Pair { a: 3, b: 4 }) });
        let none: Object<Holder> = serde_json::from_str(r#"{"pairs":[],"one":null}"#).unwrap();
        assert_eq!(none.0.one, None);
        let absent: Object<Holder> = serde_json::from_str(r#"{"pairs":[]}"#).unwrap();
        assert_eq!(absent.0.one, None);
        for text in [r#"[[{"a":1,"b":2}],null]"#, r#"{"pairs":[[1,2]]}"#, r#"{"pairs":[],"one":[3,4]}"#] {
            let e = serde_json::from_str::<Object<Holder>>(text).unwrap_err().to_string();
            assert!(e.contains("expected a JSON object"), "{text}: {e}");
        }
        // Field checks still apply inside an object.
        let e = serde_json::from_str::<Object<Holder>>(r#"{"pairs":[{"a":1,"b":2,"c":3}]}"#).unwrap_err();
        assert!(e.to_string().contains("unknown field `c`"), "{e}");
    }
}
