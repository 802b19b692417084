//! The binary row codec of the embedded and Redis backends.
//!
//! A value is one format-version byte followed by its body. bincode cannot carry
//! self-describing values such as `serde_json::Value`, so rows carry JSON-valued content
//! as JSON text inside the binary value. Decoders refuse versions they do not know with
//! a clear error instead of misreading bytes.
//!
//! | version | layout |
//! |---|---|
//! | 1 | `1` · bincode 2 (standard configuration) |
//! | 2 | `2` · crc32c (u32 LE) of the rest · flags (u8) · body |
//!
//! In version 2 the body is the bincode encoding, compressed with zstd (level 1) when
//! flags is 1 and that is smaller, as it is when the value carries text or JSON of a few
//! hundred bytes or more. The checksum covers the flags and the body: a value that
//! fails it is [`Error::Corrupted`], never returned changed. This release writes
//! version 2 and reads both.

use crate::error::{Error, Result};

/// The format version written by this release.
pub const FORMAT_VERSION: u8 = 2;

/// The version without checksum or compression, still read.
const V1: u8 = 1;
/// Flags: the body is bincode as is.
const PLAIN: u8 = 0;
/// Flags: the body is zstd-compressed bincode.
const ZSTD: u8 = 1;
/// Bodies shorter than this are not worth a compression attempt.
const COMPRESS_FROM: usize = 128;
/// zstd level: the fastest, which already takes what text and JSON offer.
const LEVEL: i32 = 1;
/// The largest body a value decompresses to (a row is bounded far below).
const MAX_BODY: usize = 1 << 31;

/// Encodes `value` in the current format (version 2).
///
/// # Errors
/// [`Error::Codec`] when bincode or zstd fails.
pub fn encode<T: bincode::Encode>(value: &T) -> Result<Vec<u8>> {
    let body = bincode::encode_to_vec(value, bincode::config::standard())
        .map_err(|e| Error::codec("bincode encode", e))?;
    let compressed = if body.len() >= COMPRESS_FROM {
        Some(zstd::bulk::compress(&body, LEVEL).map_err(|e| Error::codec("zstd compress", e))?)
    } else {
        None
    };
    let (flags, body) = match compressed {
        Some(c) if c.len() < body.len() => (ZSTD, c),
        _ => (PLAIN, body),
    };
    let mut out = Vec::with_capacity(body.len() + 6);
    out.push(FORMAT_VERSION);
    let crc = crc32c::crc32c_append(crc32c::crc32c(&[flags]), &body);
    out.extend_from_slice(&crc.to_le_bytes());
    out.push(flags);
    out.extend_from_slice(&body);
    Ok(out)
}

/// Encodes `value` as bare bincode (standard configuration): no version byte, checksum
/// or compression, for a container that frames and checks what it holds itself (the
/// redb journal: each record carries its own crc32c, and the rows inside it are values
/// [`encode`] already produced, so a second pass would only compress them again).
///
/// # Errors
/// [`Error::Codec`] when bincode fails.
pub fn encode_bare<T: bincode::Encode>(value: &T) -> Result<Vec<u8>> {
    bincode::encode_to_vec(value, bincode::config::standard())
        .map_err(|e| Error::codec("bincode encode", e))
}

/// Decodes what [`encode_bare`] wrote, with the same bounds on the lengths inside as
/// [`decode`].
///
/// # Errors
/// [`Error::Codec`] for trailing bytes or bytes that do not decode.
pub fn decode_bare<T: bincode::Decode<()>>(body: &[u8]) -> Result<T> {
    from_bincode(body)
}

/// Decodes a value written by [`encode`] (version 2) or by an earlier release
/// (version 1).
///
/// # Errors
/// [`Error::Corrupted`] (at `"value"`; callers name the row) when a version 2 value
/// fails its checksum or does not decompress; [`Error::Codec`] for an empty value, an
/// unknown format version, trailing bytes or bytes that do not decode.
pub fn decode<T: bincode::Decode<()>>(bytes: &[u8]) -> Result<T> {
    let Some((&version, rest)) = bytes.split_first() else {
        return Err(Error::Codec {
            message: "empty value".into(),
            source: None,
        });
    };
    match version {
        V1 => from_bincode(rest),
        FORMAT_VERSION => {
            let (Some(crc), Some((&flags, body))) =
                (rest.get(..4), rest.get(4..).and_then(<[u8]>::split_first))
            else {
                return Err(Error::corrupted(
                    "value",
                    format!("{} bytes: truncated", bytes.len()),
                ));
            };
            let stored = u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]);
            let computed = crc32c::crc32c_append(crc32c::crc32c(&[flags]), body);
            if stored != computed {
                return Err(Error::corrupted(
                    "value",
                    format!("checksum mismatch (stored {stored:08x}, computed {computed:08x})"),
                ));
            }
            match flags {
                PLAIN => from_bincode(body),
                ZSTD => from_bincode(&decompress(body, MAX_BODY)?),
                other => Err(Error::Codec {
                    message: format!("value has flags {other}; this release knows 0 and 1"),
                    source: None,
                }),
            }
        }
        _ => Err(Error::Codec {
            message: format!(
                "value has format version {version}; this release reads versions {V1} and \
                 {FORMAT_VERSION} (written by a newer forge-store?)"
            ),
            source: None,
        }),
    }
}

/// Decompresses a zstd body, stopping past `max` bytes: the check happens while
/// decompressing, so a body that expands without end is refused before it fills memory.
fn decompress(body: &[u8], max: usize) -> Result<Vec<u8>> {
    use std::io::Read as _;
    let corrupt = |e| Error::corrupted_with("value", "zstd body does not decompress", e);
    let mut plain = Vec::new();
    zstd::stream::read::Decoder::new(body)
        .map_err(corrupt)?
        .take(max as u64 + 1)
        .read_to_end(&mut plain)
        .map_err(corrupt)?;
    if plain.len() > max {
        return Err(Error::corrupted(
            "value",
            format!("decompresses past {max} bytes"),
        ));
    }
    Ok(plain)
}

/// How much more than its encoded size a value's containers may claim while decoding.
/// bincode reserves `len × size_of::<T>()` for a container before reading its items; a
/// valid row's items each take at least a few bytes, so its claims stay far below this.
const CLAIM_FACTOR: usize = 64;

/// Decodes a bincode body with a limit proportional to its size: a damaged length (a
/// version 1 value has no checksum) would otherwise make bincode reserve up to 2^64
/// bytes, a panic ("capacity overflow") or an abort of the process when the allocation
/// fails.
fn from_bincode<T: bincode::Decode<()>>(body: &[u8]) -> Result<T> {
    let need = body.len().saturating_mul(CLAIM_FACTOR);
    // bincode's limit is a const generic: pick the smallest tier that fits.
    macro_rules! tiers {
        ($($bits:literal)*) => {$(
            if need <= 1usize << $bits {
                return limited::<T, { 1usize << $bits }>(body);
            }
        )*};
    }
    tiers!(16 20 24 28);
    limited::<T, { u32::MAX as usize }>(body)
}

fn limited<T: bincode::Decode<()>, const LIMIT: usize>(body: &[u8]) -> Result<T> {
    let config = bincode::config::standard().with_limit::<LIMIT>();
    let (value, used) = bincode::decode_from_slice(body, config).map_err(|e| match e {
        bincode::error::DecodeError::LimitExceeded => Error::Codec {
            message: format!(
                "a length inside the value is larger than its {} bytes can hold",
                body.len()
            ),
            source: None,
        },
        e => Error::codec("bincode decode", e),
    })?;
    if used != body.len() {
        return Err(Error::Codec {
            message: format!("{} trailing bytes after the value", body.len() - used),
            source: None,
        });
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(bincode::Encode, bincode::Decode, Debug, PartialEq)]
    struct Row {
        seq: u64,
        json: String,
    }

    fn row(len: usize) -> Row {
        Row {
            seq: 7,
            json: format!(r#"{{"text":"{}"}}"#, "abcdefgh".repeat(len / 8)),
        }
    }

    #[test]
    fn round_trips_and_refuses_foreign_versions() {
        for len in [0, 100, 10_000] {
            let row = row(len);
            let bytes = encode(&row).unwrap();
            assert_eq!(bytes[0], FORMAT_VERSION);
            assert_eq!(decode::<Row>(&bytes).unwrap(), row);
        }
        // Bare: bincode alone, for a container that frames and checks it itself.
        let hundred = row(100);
        let bare = encode_bare(&hundred).unwrap();
        assert_eq!(
            bare,
            bincode::encode_to_vec(&hundred, bincode::config::standard()).unwrap()
        );
        assert_eq!(decode_bare::<Row>(&bare).unwrap(), hundred);
        let bytes = encode(&row(10)).unwrap();
        let mut newer = bytes.clone();
        newer[0] = 3;
        let err = decode::<Row>(&newer).unwrap_err().to_string();
        assert!(err.contains("format version 3"), "{err}");

        assert!(decode::<Row>(&[]).is_err());
        assert!(matches!(
            decode::<Row>(&[FORMAT_VERSION, 1, 2]),
            Err(Error::Corrupted { .. })
        ));
    }

    #[test]
    fn long_values_are_compressed_and_short_ones_are_not() {
        let long = row(10_000);
        let bytes = encode(&long).unwrap();
        assert_eq!(bytes[5], ZSTD);
        assert!(bytes.len() < 1_000, "{} bytes", bytes.len());
        let short = row(16);
        assert_eq!(encode(&short).unwrap()[5], PLAIN);
        // Long but incompressible (xorshift bytes): zstd would make it longer, so it is
        // kept as it is, 6 bytes of framing on top.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let noise: Vec<u8> = (0..4_096)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x.to_le_bytes()[0]
            })
            .collect();
        let bytes = encode(&noise).unwrap();
        assert_eq!(bytes[5], PLAIN);
        let plain = bincode::encode_to_vec(&noise, bincode::config::standard()).unwrap();
        assert_eq!(bytes.len(), plain.len() + 6);
        assert_eq!(decode::<Vec<u8>>(&bytes).unwrap(), noise);
    }

    #[test]
    fn version_1_values_still_decode() {
        let row = row(100);
        let mut v1 = vec![V1];
        v1.extend(bincode::encode_to_vec(&row, bincode::config::standard()).unwrap());
        assert_eq!(decode::<Row>(&v1).unwrap(), row);
        v1.push(0);
        assert!(decode::<Row>(&v1)
            .unwrap_err()
            .to_string()
            .contains("trailing"));
    }

    #[test]
    fn a_damaged_length_is_an_error_not_a_huge_allocation() {
        // Found by fuzzing: a version 1 value (no checksum) whose string length says
        // 2^62 bytes made bincode panic with "capacity overflow"; 2^40 aborted the
        // process when the allocation failed.
        for len in [1u64 << 62, 1 << 40, 1 << 20] {
            let mut v1 = vec![V1, 7, 0xfd];
            v1.extend_from_slice(&len.to_le_bytes());
            v1.extend_from_slice(b"{}");
            let err = decode::<Row>(&v1).unwrap_err().to_string();
            assert!(err.contains("length inside the value"), "{len}: {err}");
        }
        // A long row of many small items still decodes.
        let many: Vec<(String, u64)> = (0..10_000).map(|i| (String::new(), i)).collect();
        assert_eq!(
            decode::<Vec<(String, u64)>>(&encode(&many).unwrap()).unwrap(),
            many
        );
    }

    #[test]
    fn decompression_stops_at_its_bound() {
        let zeros = zstd::bulk::compress(&vec![0u8; 1 << 20], LEVEL).unwrap();
        assert!(zeros.len() < 1_000);
        assert_eq!(decompress(&zeros, 1 << 20).unwrap().len(), 1 << 20);
        let err = decompress(&zeros, 4_096).unwrap_err();
        assert!(matches!(err, Error::Corrupted { .. }), "{err}");
        assert!(err.to_string().contains("past 4096 bytes"), "{err}");
    }

    #[test]
    fn any_flipped_bit_is_corrupted_not_a_changed_value() {
        for len in [10, 10_000] {
            let bytes = encode(&row(len)).unwrap();
            // Every bit after the version byte: checksum, flags or body.
            for i in 1..bytes.len() {
                for bit in 0..8 {
                    let mut bad = bytes.clone();
                    bad[i] ^= 1 << bit;
                    match decode::<Row>(&bad) {
                        Err(Error::Corrupted { .. }) => {}
                        other => panic!("byte {i} bit {bit} of {len}: {other:?}"),
                    }
                }
            }
        }
    }
}
