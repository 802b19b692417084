//! The binary row codec of the embedded and Redis backends.
//!
//! A value is one format-version byte followed by its bincode 2 encoding (standard
//! configuration). bincode cannot carry self-describing values such as
//! `serde_json::Value`, so rows carry JSON-valued content as JSON text inside the
//! binary value. Changing the encoding later means a new version byte; decoders refuse
//! versions they do not know with a clear error instead of misreading bytes.

use crate::error::{Error, Result};

/// The format version written by this release.
pub const FORMAT_VERSION: u8 = 1;

/// Encodes `value` behind the format-version byte.
pub fn encode<T: bincode::Encode>(value: &T) -> Result<Vec<u8>> {
    let mut out = vec![FORMAT_VERSION];
    bincode::encode_into_std_write(value, &mut out, bincode::config::standard())
        .map_err(|e| Error::codec("bincode encode", e))?;
    Ok(out)
}

/// Decodes a value written by [`encode`].
///
/// # Errors
/// [`Error::Codec`] for an empty value, an unknown format version, trailing bytes or
/// bytes that do not decode.
pub fn decode<T: bincode::Decode<()>>(bytes: &[u8]) -> Result<T> {
    let Some((&version, body)) = bytes.split_first() else {
        return Err(Error::Codec {
            message: "empty value".into(),
            source: None,
        });
    };
    if version != FORMAT_VERSION {
        return Err(Error::Codec {
            message: format!(
                "value has format version {version}; this release reads version {FORMAT_VERSION} \
                 (written by a newer forge-store?)"
            ),
            source: None,
        });
    }
    let (value, used) = bincode::decode_from_slice(body, bincode::config::standard())
        .map_err(|e| Error::codec("bincode decode", e))?;
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

    #[test]
    fn round_trips_and_refuses_foreign_versions() {
        let row = Row {
            seq: 7,
            json: r#"{"a":1}"#.into(),
        };
        let bytes = encode(&row).unwrap();
        assert_eq!(bytes[0], FORMAT_VERSION);
        assert_eq!(decode::<Row>(&bytes).unwrap(), row);

        let mut newer = bytes.clone();
        newer[0] = 2;
        let err = decode::<Row>(&newer).unwrap_err().to_string();
        assert!(err.contains("format version 2"), "{err}");

        assert!(decode::<Row>(&[]).is_err());
        let mut long = bytes;
        long.push(0);
        assert!(decode::<Row>(&long)
            .unwrap_err()
            .to_string()
            .contains("trailing"));
    }
}
