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
