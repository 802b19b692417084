//! Posting blocks: a word's postings in runs of up to [`MAX_BLOCK`], one row each.
//!
//! A row `(tenant, word, key)` holds postings of documents numbered from `key` up to
//! (not including) the next row's key, in number order, as LEB128 varints: the number's
//! distance from the previous one (from `key` for the first), the term frequency and
//! the document's length. Blocks make a word's postings a few rows a query decodes in a
//! tight loop (a common word of 300,000 documents is about 2,400 rows), and about 4
//! bytes a posting instead of a row of its own.
//!
//! A posting goes into the block with the largest key at or below its number (a number
//! below every key goes into the word's first block, which takes it as its key). A block
//! that grows past [`MAX_BLOCK`] splits: a posting appended at its end (the common case:
//! a new document has the session's highest number) starts a block of its own, so
//! blocks filled by appending stay full; otherwise it splits in halves.

use forge_core::{Error, Result};
use redb::{ReadableTable, Table};

use crate::error::map;

/// The most postings a block holds.
pub(crate) const MAX_BLOCK: usize = 128;

/// One posting: document number, term frequency, document length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Posting {
    /// The document's number.
    pub(crate) doc: u64,
    /// How often the word occurs in it.
    pub(crate) tf: u32,
    /// Its length in words.
    pub(crate) len: u32,
}

type Key = (&'static str, &'static str, u64);

fn push_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn read_varint(bytes: &[u8], at: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *bytes.get(*at)?;
        *at += 1;
        v |= u64::from(b & 0x7f).checked_shl(shift)?;
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// Encodes `postings` (in number order, all at or above `key`) as a block keyed `key`.
pub(crate) fn encode(key: u64, postings: &[Posting]) -> Vec<u8> {
    let mut out = Vec::with_capacity(postings.len() * 5);
    let mut prev = key;
    for p in postings {
        push_varint(&mut out, p.doc - prev);
        push_varint(&mut out, u64::from(p.tf));
        push_varint(&mut out, u64::from(p.len));
        prev = p.doc;
    }
    out
}

/// Decodes the block keyed `key` into `out` (cleared first).
///
/// # Errors
/// [`Error::Corrupted`] naming the block when its bytes are not postings in increasing
/// number order.
pub(crate) fn decode_into(
    bytes: &[u8],
    key: u64,
    out: &mut Vec<Posting>,
    what: impl Fn() -> String,
) -> Result<()> {
    out.clear();
    let bad = || Error::corrupted(what(), "a posting block that does not decode");
    let mut at = 0;
    let mut prev = key;
    while at < bytes.len() {
        let delta = read_varint(bytes, &mut at).ok_or_else(bad)?;
        let tf = read_varint(bytes, &mut at).ok_or_else(bad)?;
        let len = read_varint(bytes, &mut at).ok_or_else(bad)?;
        if delta == 0 && !out.is_empty() {
            return Err(bad());
        }
        let doc = prev.checked_add(delta).ok_or_else(bad)?;
        out.push(Posting {
            doc,
            tf: u32::try_from(tf).map_err(|_| bad())?,
            len: u32::try_from(len).map_err(|_| bad())?,
        });
        prev = doc;
    }
    Ok(())
}

fn block_name(tn: &str, w: &str, key: u64) -> String {
    format!("search posting block {tn}/{w}/{key}")
}

/// The block of `w` with the largest key at or below `doc`: its key and postings.
fn block_at(
    table: &impl ReadableTable<Key, &'static [u8]>,
    tn: &str,
    w: &str,
    doc: u64,
) -> Result<Option<(u64, Vec<Posting>)>> {
    let Some(entry) = table
        .range((tn, w, 0)..=(tn, w, doc))
        .map_err(map)?
        .next_back()
    else {
        return Ok(None);
    };
    let (k, v) = entry.map_err(map)?;
    let key = k.value().2;
    let mut postings = Vec::with_capacity(MAX_BLOCK + 1);
    decode_into(v.value(), key, &mut postings, || block_name(tn, w, key))?;
    Ok(Some((key, postings)))
}

/// The key where a scan of `w`'s postings from `doc` on starts: the key of the block
/// that may hold `doc`, or `doc` when no block starts at or below it.
pub(crate) fn scan_start(
    table: &impl ReadableTable<Key, &'static [u8]>,
    tn: &str,
    w: &str,
    doc: u64,
) -> Result<u64> {
    Ok(
        match table
            .range((tn, w, 0)..=(tn, w, doc))
            .map_err(map)?
            .next_back()
        {
            Some(entry) => entry.map_err(map)?.0.value().2,
            None => doc,
        },
    )
}

/// Writes `postings` as the block keyed `key`, split in two when it holds more than
/// [`MAX_BLOCK`] (after the last `MAX_BLOCK` when `appended`, else in halves).
fn write_block(
    table: &mut Table<'_, Key, &'static [u8]>,
    tn: &str,
    w: &str,
    key: u64,
    mut postings: Vec<Posting>,
    appended: bool,
) -> Result<()> {
    if postings.len() > MAX_BLOCK {
        let at = if appended {
            MAX_BLOCK
        } else {
            postings.len() / 2
        };
        let right = postings.split_off(at);
        let right_key = right[0].doc;
        table
            .insert((tn, w, right_key), encode(right_key, &right).as_slice())
            .map_err(map)?;
    }
    table
        .insert((tn, w, key), encode(key, &postings).as_slice())
        .map_err(map)?;
    Ok(())
}

/// Writes the posting `p` of `w` (replacing the one of the same document).
///
/// # Errors
/// [`Error::Corrupted`] for a block that does not decode; [`Error::Backend`] from redb.
pub(crate) fn put(
    table: &mut Table<'_, Key, &'static [u8]>,
    tn: &str,
    w: &str,
    p: Posting,
) -> Result<()> {
    if let Some((key, mut postings)) = block_at(table, tn, w, p.doc)? {
        let appended = match postings.binary_search_by_key(&p.doc, |q| q.doc) {
            Ok(i) => {
                postings[i] = p;
                false
            }
            Err(i) => {
                postings.insert(i, p);
                i + 1 == postings.len()
            }
        };
        return write_block(table, tn, w, key, postings, appended);
    }
    // Below every block of the word: the first block takes it (keyed anew) if it has
    // room, else it starts a block.
    let mut postings = Vec::with_capacity(MAX_BLOCK + 1);
    let first = match table
        .range((tn, w, p.doc)..=(tn, w, u64::MAX))
        .map_err(map)?
        .next()
    {
        Some(entry) => {
            let (k, v) = entry.map_err(map)?;
            let key = k.value().2;
            decode_into(v.value(), key, &mut postings, || block_name(tn, w, key))?;
            Some(key)
        }
        None => None,
    };
    match first {
        Some(key) if postings.len() < MAX_BLOCK => {
            table.remove((tn, w, key)).map_err(map)?;
        }
        _ => postings.clear(),
    }
    postings.insert(0, p);
    write_block(table, tn, w, p.doc, postings, false)
}

/// Removes the posting of document `doc` from `w`'s blocks, if it is there.
///
/// # Errors
/// As [`put`].
pub(crate) fn remove(
    table: &mut Table<'_, Key, &'static [u8]>,
    tn: &str,
    w: &str,
    doc: u64,
) -> Result<()> {
    let Some((key, mut postings)) = block_at(table, tn, w, doc)? else {
        return Ok(());
    };
    let Ok(i) = postings.binary_search_by_key(&doc, |q| q.doc) else {
        return Ok(());
    };
    postings.remove(i);
    if postings.is_empty() {
        table.remove((tn, w, key)).map_err(map)?;
    } else {
        table
            .insert((tn, w, key), encode(key, &postings).as_slice())
            .map_err(map)?;
    }
    Ok(())
}

/// Removes every posting of `w` whose document number is within `lo..=hi`: the blocks
/// inside the range go whole, undecoded; at most the two at its ends are rewritten.
///
/// # Errors
/// As [`put`].
pub(crate) fn remove_range(
    table: &mut Table<'_, Key, &'static [u8]>,
    tn: &str,
    w: &str,
    lo: u64,
    hi: u64,
) -> Result<()> {
    // The block that starts below the range may reach into it.
    if let Some((key, mut postings)) = block_at(table, tn, w, lo)? {
        if key < lo {
            let before = postings.len();
            postings.retain(|p| !(lo..=hi).contains(&p.doc));
            if postings.len() != before {
                table
                    .insert((tn, w, key), encode(key, &postings).as_slice())
                    .map_err(map)?;
            }
        }
    }
    // The blocks that start in it: all but the last hold only numbers in it.
    let mut keys = Vec::new();
    for entry in table.range((tn, w, lo)..=(tn, w, hi)).map_err(map)? {
        keys.push(entry.map_err(map)?.0.value().2);
    }
    let Some(last) = keys.pop() else {
        return Ok(());
    };
    for key in keys {
        table.remove((tn, w, key)).map_err(map)?;
    }
    let mut postings = Vec::with_capacity(MAX_BLOCK);
    if let Some(v) = table.remove((tn, w, last)).map_err(map)? {
        decode_into(v.value(), last, &mut postings, || block_name(tn, w, last))?;
    }
    postings.retain(|p| p.doc > hi);
    if let Some(first) = postings.first().map(|p| p.doc) {
        table
            .insert((tn, w, first), encode(first, &postings).as_slice())
            .map_err(map)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(doc: u64, tf: u32, len: u32) -> Posting {
        Posting { doc, tf, len }
    }

    #[test]
    fn a_block_reads_back_and_refuses_damage() {
        let list = [p(5, 1, 3), p(6, 300, 70_000), p(u64::MAX, u32::MAX, 0)];
        let bytes = encode(5, &list);
        let mut out = Vec::new();
        decode_into(&bytes, 5, &mut out, String::new).unwrap();
        assert_eq!(out, list);
        // Cut short, or a repeated number: refused, not misread.
        assert!(decode_into(&bytes[..bytes.len() - 1], 5, &mut out, String::new).is_err());
        let twice = encode(5, &[p(5, 1, 1), p(5, 1, 1)]);
        assert!(decode_into(&twice, 5, &mut out, String::new).is_err());
        assert!(decode_into(&[0xff; 11], 0, &mut out, String::new).is_err());
    }

    #[test]
    fn blocks_split_and_stay_ordered() {
        let dir = tempfile::tempdir().unwrap();
        let db = redb::Database::create(dir.path().join("b.redb")).unwrap();
        let def: redb::TableDefinition<Key, &[u8]> = redb::TableDefinition::new("p");
        let txn = db.begin_write().unwrap();
        {
            let mut t = txn.open_table(def).unwrap();
            // Appended in order, then some in the middle and below the first.
            let mut want: Vec<u64> = (1000..1300).collect();
            for &d in &want {
                put(&mut t, "t", "w", p(d, 1, 2)).unwrap();
            }
            for d in (1000..1300).step_by(7).map(|d| d + 100_000) {
                put(&mut t, "t", "w", p(d, 1, 2)).unwrap();
                want.push(d);
            }
            for d in [3, 1, 2, 1150] {
                put(&mut t, "t", "w", p(d, 9, 9)).unwrap();
                if d != 1150 {
                    want.push(d);
                }
            }
            for d in [1001, 1002, 3] {
                remove(&mut t, "t", "w", d).unwrap();
                want.retain(|&x| x != d);
            }
            // A range across several blocks, from inside one to inside another.
            remove_range(&mut t, "t", "w", 1100, 101_050).unwrap();
            want.retain(|&x| !(1100..=101_050).contains(&x));
            remove_range(&mut t, "t", "w", 5, 6).unwrap();
            want.sort_unstable();
            let mut got = Vec::new();
            let mut keys = Vec::new();
            let mut block = Vec::new();
            for e in t.range(("t", "w", 0)..=("t", "w", u64::MAX)).unwrap() {
                let (k, v) = e.unwrap();
                let key = k.value().2;
                decode_into(v.value(), key, &mut block, String::new).unwrap();
                assert!(block.len() <= MAX_BLOCK && !block.is_empty());
                assert!(block[0].doc >= key);
                if let Some(&last) = got.last() {
                    assert!(key > last);
                }
                keys.push(key);
                got.extend(block.iter().map(|q| q.doc));
            }
            assert_eq!(got, want);
            // Filled by appending: the first blocks are full.
            assert!(keys.len() <= want.len() / (MAX_BLOCK / 2) + 1, "{keys:?}");
        }
        txn.commit().unwrap();
    }
}
