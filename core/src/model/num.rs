//! Number formatting that matches JavaScript's JSON output.
//!
//! JavaScript has one number type and writes `3` for 3.0. Costs are `f64` here; writing
//! them back as `3.0` would make an exported document differ from the one imported, so
//! whole numbers are written as integers.

use serde::Serializer;

/// Serializes a whole `f64` as an integer, anything else as a float.
#[allow(clippy::trivially_copy_pass_by_ref)]
pub fn f64_js<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
    if v.fract() == 0.0 && v.abs() < 9.007_199_254_740_992e15 {
        s.serialize_i64(*v as i64)
    } else {
        s.serialize_f64(*v)
    }
}

/// A whole number read from any JSON number form: `3`, `-0`, `3.0`, `3e2`. A fraction,
/// a value out of range or a non-number is an error naming what was found (JavaScript
/// writes `-0` and `1e21`; they must not make a document unreadable).
fn whole<'de, D, T>(d: D, what: &'static str) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: TryFrom<i128>,
{
    struct Whole(&'static str);
    impl serde::de::Visitor<'_> for Whole {
        type Value = i128;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "a whole number ({})", self.0)
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<i128, E> {
            Ok(i128::from(v))
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<i128, E> {
            Ok(i128::from(v))
        }
        fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<i128, E> {
            // 2^100 bounds every target type; beyond it the cast would saturate.
            if v.fract() == 0.0 && v.abs() < 1.267_650_600_228_229_4e30 {
                #[allow(clippy::cast_possible_truncation)]
                Ok(v as i128)
            } else {
                Err(E::custom(format_args!(
                    "expected a whole number ({}), got {v}",
                    self.0
                )))
            }
        }
    }
    let v = d.deserialize_any(Whole(what))?;
    T::try_from(v)
        .map_err(|_| serde::de::Error::custom(format_args!("{v} is out of range for {what}")))
}

/// A whole number as [`whole`] reads it, or `None` for `null` (absent fields are the
/// caller's `default`).
fn whole_opt<'de, D, T>(d: D, what: &'static str) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: TryFrom<i128>,
{
    struct Opt<T>(&'static str, std::marker::PhantomData<T>);
    impl<'de, T: TryFrom<i128>> serde::de::Visitor<'de> for Opt<T> {
        type Value = Option<T>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "null or a whole number ({})", self.0)
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<Option<T>, E> {
            Ok(None)
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Option<T>, E> {
            Ok(None)
        }
        fn visit_some<D2: serde::Deserializer<'de>>(self, d: D2) -> Result<Option<T>, D2::Error> {
            whole(d, self.0).map(Some)
        }
    }
    d.deserialize_option(Opt(what, std::marker::PhantomData))
}

const U64: &str = "0 to 2^64-1";
const I64: &str = "-2^63 to 2^63-1";

/// Deserializes a `u64` from any whole JSON number.
pub fn whole_u64<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    whole(d, U64)
}

/// Deserializes an optional `u64` (`null` or absent is `None`).
pub fn whole_u64_opt<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    whole_opt(d, U64)
}

/// Deserializes an `i64` from any whole JSON number.
pub fn whole_i64<'de, D: serde::Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    whole(d, I64)
}

/// Deserializes an optional `i64` (`null` or absent is `None`).
pub fn whole_i64_opt<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    whole_opt(d, I64)
}

/// Deserializes a `u32` from any whole JSON number.
pub fn whole_u32<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    whole(d, "0 to 2^32-1")
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    #[derive(Deserialize)]
    struct T {
        #[serde(deserialize_with = "super::whole_u64")]
        n: u64,
        #[serde(default, deserialize_with = "super::whole_i64_opt")]
        t: Option<i64>,
    }

    fn n(json: &str) -> Result<u64, String> {
        serde_json::from_str::<T>(json)
            .map(|t| t.n)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn every_json_form_of_a_whole_number_is_read() {
        assert_eq!(n(r#"{"n":-0}"#), Ok(0));
        assert_eq!(n(r#"{"n":-0.0}"#), Ok(0));
        assert_eq!(n(r#"{"n":12.0}"#), Ok(12));
        assert_eq!(n(r#"{"n":1e3}"#), Ok(1000));
        assert_eq!(n(r#"{"n":18446744073709551615}"#), Ok(u64::MAX));
        let t: T = serde_json::from_str(r#"{"n":1,"t":-1.7e12}"#).unwrap();
        assert_eq!(t.t, Some(-1_700_000_000_000));
        let t: T = serde_json::from_str(r#"{"n":1,"t":null}"#).unwrap();
        assert_eq!(t.t, None);
    }

    #[test]
    fn fractions_negatives_and_strings_are_errors_that_say_so() {
        assert!(n(r#"{"n":1.5}"#).unwrap_err().contains("whole number"));
        assert!(n(r#"{"n":-1}"#).unwrap_err().contains("out of range"));
        assert!(n(r#"{"n":1e30}"#).unwrap_err().contains("out of range"));
        assert!(n(r#"{"n":"3"}"#).unwrap_err().contains("whole number"));
    }
}
