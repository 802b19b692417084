//! The write path: one batch of sync events inside one redb write transaction.
//!
//! Events are first turned into [`Prepared`] operations on the caller's thread (JSON and
//! row encoding, envelope checks), then applied in order inside the transaction. A
//! preparation error is kept at its event's position, so the batch fails with the same
//! error as the reference store: the first failing event's.
//!
//! Before a batch is applied, [`check_fences`] checks every event's epoch against its
//! session's fence record, read in the same transaction (reads only: fencing adds no
//! write to a batch). A claim is written through the same path as one [`Op::PutFence`]
//! ([`fence_record`]), so the journal replays claims and batches in commit order.
//!
//! With the search index kept, a part upsert indexes the part in the same transaction
//! ([`crate::search::Index`]): its terms are computed in [`prepare`] from the part the
//! event carries (the journal does not record them; a replayed upsert computes them from
//! its row), and every removal takes the removed parts out of the index.

use std::collections::HashMap;

use forge_core::{codec, fence, Claim, Envelope, Error, Result, SessionId, SyncEvent};
use redb::{Key, ReadableTable, Table, Value, WriteTransaction};

use crate::error::map;
use crate::schema::{
    decode, successor, FenceRow, JsonRow, MessageKey, PartKey, SessionKey, SessionRow, FENCES,
    MESSAGES, OPEN_MESSAGES, OPEN_PARTS, PARTS, PART_MESSAGES, SESSIONS,
};
use crate::search::{Index, Terms};

/// One event, ready to be written.
pub(crate) struct Prepared {
    tenant: String,
    session: String,
    seq: u64,
    /// The writer's epoch, checked by [`check_fences`]; not journaled (a journaled batch
    /// passed its check when it committed).
    epoch: Option<u64>,
    op: Result<Op>,
    /// A part upsert's terms for the search index.
    terms: Computed,
}

/// A part upsert's terms for the search index, as [`prepare`] left them.
enum Computed {
    /// Not computed (search off, another event, or an operation read back from the
    /// journal): the upsert computes them from its row when it indexes.
    Later,
    /// Computed from the event's part: its terms, `None` when it has no document.
    Now(Option<Terms>),
}

/// What one event writes. Also the journal's record format (bincode), so a variant's
/// fields are only ever appended to, never reordered.
#[derive(bincode::Encode, bincode::Decode)]
enum Op {
    PutSession {
        json: String,
    },
    DeleteSession,
    PutMessage {
        id: String,
        row: Vec<u8>,
        open: bool,
    },
    RemoveMessage {
        id: String,
    },
    PutPart {
        message: String,
        id: String,
        row: Vec<u8>,
        open: bool,
    },
    RemovePart {
        message: String,
        id: String,
    },
    /// A session's fence record (a claim, renewal or release), the codec-encoded
    /// [`FenceRow`]. Never part of a batch of events.
    PutFence {
        row: Vec<u8>,
    },
}

/// The first byte of a journal record this release writes: the rest is the batch's
/// operations as bare bincode ([`codec::encode_bare`]). Their rows are values the codec
/// already encoded (and compressed), and the journal's crc32c covers the record, so the
/// record is not passed through the codec a second time. Records of earlier releases
/// start with the codec's version byte (1 or 2) and are read as they were written.
const BARE_RECORD: u8 = 0x80;

/// The journal record of a batch whose every event prepared cleanly (`None` when one
/// did not: the batch fails in `apply` and is never journaled).
pub(crate) fn journal_record(ops: &[Prepared]) -> Result<Option<Vec<u8>>> {
    let mut items = Vec::with_capacity(ops.len());
    for p in ops {
        match &p.op {
            Ok(op) => items.push((p.tenant.as_str(), p.session.as_str(), p.seq, op)),
            Err(_) => return Ok(None),
        }
    }
    let body = codec::encode_bare(&items)?;
    let mut record = Vec::with_capacity(body.len() + 1);
    record.push(BARE_RECORD);
    record.extend_from_slice(&body);
    Ok(Some(record))
}

/// The operations of a journal record, to apply again on recovery.
pub(crate) fn from_journal_record(bytes: &[u8]) -> Result<Vec<Prepared>> {
    let items: Vec<(String, String, u64, Op)> = match bytes.split_first() {
        Some((&BARE_RECORD, body)) => codec::decode_bare(body)?,
        _ => codec::decode(bytes)?,
    };
    Ok(items
        .into_iter()
        .map(|(tenant, session, seq, op)| Prepared {
            tenant,
            session,
            seq,
            epoch: None,
            op: Ok(op),
            terms: Computed::Later,
        })
        .collect())
}

fn json_row<T: serde::Serialize>(value: &T) -> Result<Vec<u8>> {
    codec::encode(&JsonRow {
        json: serde_json::to_string(value)?,
    })
}

/// Turns a batch into owned operations that can move to a blocking thread; with
/// `search`, a part upsert carries its terms too.
pub(crate) fn prepare(batch: &[Envelope<SyncEvent>], search: bool) -> Vec<Prepared> {
    batch
        .iter()
        .map(|env| Prepared {
            tenant: env.tenant.as_str().to_owned(),
            session: env.session_id.as_str().to_owned(),
            seq: env.seq,
            epoch: env.epoch,
            op: prepare_op(env),
            terms: match &env.event {
                SyncEvent::PartUpdated { part } if search => Computed::Now(Terms::of_part(part)),
                _ => Computed::Later,
            },
        })
        .collect()
}

fn prepare_op(env: &Envelope<SyncEvent>) -> Result<Op> {
    env.check()?;
    Ok(match &env.event {
        SyncEvent::SessionUpdated { info } => Op::PutSession {
            json: serde_json::to_string(info)?,
        },
        SyncEvent::SessionDeleted { .. } => Op::DeleteSession,
        SyncEvent::MessageUpdated { info } => Op::PutMessage {
            id: info.id.as_str().to_owned(),
            row: json_row(info)?,
            open: info.is_open(),
        },
        SyncEvent::MessageRemoved { message_id, .. } => Op::RemoveMessage {
            id: message_id.as_str().to_owned(),
        },
        SyncEvent::PartUpdated { part } => Op::PutPart {
            message: part.message_id.as_str().to_owned(),
            id: part.id.as_str().to_owned(),
            row: json_row(part)?,
            open: part.is_open(),
        },
        SyncEvent::PartRemoved {
            message_id,
            part_id,
            ..
        } => Op::RemovePart {
            message: message_id.as_str().to_owned(),
            id: part_id.as_str().to_owned(),
        },
    })
}

/// Checks every event of a batch against its session's fence record
/// ([`fence::check`]), read in `txn`: the transaction that then applies the batch, so
/// the check is atomic with the commit (claims are written in write transactions too,
/// which redb runs one at a time). Each distinct session's record is read once.
///
/// # Errors
/// [`Error::Fenced`] for the first event whose epoch is not its session's current one;
/// [`Error::Codec`] for a fence record that does not decode.
pub(crate) fn check_fences(txn: &WriteTransaction, ops: &[Prepared]) -> Result<()> {
    // Opened and only read: an unchanged table costs the commit no write.
    let fences = txn.open_table(FENCES).map_err(map)?;
    let mut records: HashMap<(&str, &str), (SessionId, Option<Claim>)> = HashMap::new();
    for p in ops {
        let key = (p.tenant.as_str(), p.session.as_str());
        let (session, record) = match records.entry(key) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                let record = read_fence(&fences, key.0, key.1)?;
                e.insert((SessionId::from(key.1), record))
            }
        };
        fence::check(session, record.as_ref(), p.epoch)?;
    }
    Ok(())
}

/// The fence record of `(tn, sn)` in `fences`.
///
/// # Errors
/// [`Error::Codec`] (or [`Error::Corrupted`]) naming the record when it does not decode.
pub(crate) fn read_fence(
    fences: &impl ReadableTable<SessionKey, &'static [u8]>,
    tn: &str,
    sn: &str,
) -> Result<Option<Claim>> {
    match fences.get((tn, sn)).map_err(map)? {
        Some(v) => {
            let row: FenceRow = decode(v.value(), || format!("fence record {tn}/{sn}"))?;
            Ok(Some(row.into()))
        }
        None => Ok(None),
    }
}

/// Writes `claim` as the fence record of `(tn, sn)` in `txn` and returns the journal
/// record that writes it again on recovery.
///
/// # Errors
/// [`Error::Codec`] when the record does not encode; [`Error::Backend`] from redb.
pub(crate) fn put_fence(
    txn: &WriteTransaction,
    tn: &str,
    sn: &str,
    claim: &Claim,
) -> Result<Vec<u8>> {
    let row = codec::encode(&FenceRow::from(claim))?;
    txn.open_table(FENCES)
        .map_err(map)?
        .insert((tn, sn), row.as_slice())
        .map_err(map)?;
    fence_record(tn, sn, row)
}

/// The journal record of one fence record write.
fn fence_record(tn: &str, sn: &str, row: Vec<u8>) -> Result<Vec<u8>> {
    let op = Prepared {
        tenant: tn.to_owned(),
        session: sn.to_owned(),
        seq: 0,
        epoch: None,
        op: Ok(Op::PutFence { row }),
        terms: Computed::Later,
    };
    journal_record(std::slice::from_ref(&op))?
        .ok_or_else(|| Error::invalid("a fence record without its operation"))
}

/// The tables a batch writes, opened once per transaction.
struct Tables<'txn> {
    sessions: Table<'txn, SessionKey, &'static [u8]>,
    messages: Table<'txn, MessageKey, &'static [u8]>,
    parts: Table<'txn, PartKey, &'static [u8]>,
    open_messages: Table<'txn, MessageKey, ()>,
    open_parts: Table<'txn, PartKey, ()>,
    part_messages: Table<'txn, PartKey, ()>,
    fences: Table<'txn, SessionKey, &'static [u8]>,
    /// The search index, when the file keeps it.
    search: Option<Index<'txn>>,
}

/// Applies `ops` in order inside `txn`, maintaining the search index when `search` (the
/// file keeps it). On error the caller aborts the transaction, so nothing of the batch
/// becomes visible.
pub(crate) fn apply(txn: &WriteTransaction, ops: Vec<Prepared>, search: bool) -> Result<()> {
    let mut t = Tables {
        sessions: txn.open_table(SESSIONS).map_err(map)?,
        messages: txn.open_table(MESSAGES).map_err(map)?,
        parts: txn.open_table(PARTS).map_err(map)?,
        open_messages: txn.open_table(OPEN_MESSAGES).map_err(map)?,
        open_parts: txn.open_table(OPEN_PARTS).map_err(map)?,
        part_messages: txn.open_table(PART_MESSAGES).map_err(map)?,
        fences: txn.open_table(FENCES).map_err(map)?,
        search: if search {
            Some(Index::open(txn)?)
        } else {
            None
        },
    };
    for p in ops {
        apply_one(&mut t, p)?;
    }
    Ok(())
}

fn apply_one(t: &mut Tables<'_>, p: Prepared) -> Result<()> {
    let op = p.op?;
    let terms = p.terms;
    let (tn, sn) = (p.tenant.as_str(), p.session.as_str());
    let what = || format!("session row {tn}/{sn}");
    match op {
        Op::PutSession { json } => {
            let old_seq = match t.sessions.get((tn, sn)).map_err(map)? {
                Some(v) => decode::<SessionRow>(v.value(), what)?.seq,
                None => 0,
            };
            let row = SessionRow {
                seq: old_seq.max(p.seq),
                json,
            };
            t.sessions
                .insert((tn, sn), codec::encode(&row)?.as_slice())
                .map_err(map)?;
            // The seq is already recorded.
            return Ok(());
        }
        Op::DeleteSession => {
            t.sessions.remove((tn, sn)).map_err(map)?;
            let hi = successor(sn);
            remove_range(&mut t.messages, (tn, sn, ""), (tn, hi.as_str(), ""))?;
            remove_range(&mut t.open_messages, (tn, sn, ""), (tn, hi.as_str(), ""))?;
            remove_range(&mut t.parts, (tn, sn, "", ""), (tn, hi.as_str(), "", ""))?;
            remove_range(
                &mut t.open_parts,
                (tn, sn, "", ""),
                (tn, hi.as_str(), "", ""),
            )?;
            remove_range(
                &mut t.part_messages,
                (tn, sn, "", ""),
                (tn, hi.as_str(), "", ""),
            )?;
            if let Some(index) = &mut t.search {
                index.remove_session(tn, sn)?;
            }
            // A deleted session records no seq.
            return Ok(());
        }
        Op::PutMessage { id, row, open } => {
            if t.sessions.get((tn, sn)).map_err(map)?.is_none() {
                return Err(Error::not_found("session", sn));
            }
            let key = (tn, sn, id.as_str());
            t.messages.insert(key, row.as_slice()).map_err(map)?;
            if open {
                t.open_messages.insert(key, ()).map_err(map)?;
            } else {
                t.open_messages.remove(key).map_err(map)?;
            }
        }
        Op::RemoveMessage { id } => {
            let m = id.as_str();
            t.messages.remove((tn, sn, m)).map_err(map)?;
            t.open_messages.remove((tn, sn, m)).map_err(map)?;
            for p in part_ids(&t.parts, tn, sn, m)? {
                t.part_messages
                    .remove((tn, sn, p.as_str(), m))
                    .map_err(map)?;
                if let Some(index) = &mut t.search {
                    index.remove(tn, sn, &p)?;
                }
            }
            let hi = successor(m);
            remove_range(&mut t.parts, (tn, sn, m, ""), (tn, sn, hi.as_str(), ""))?;
            remove_range(
                &mut t.open_parts,
                (tn, sn, m, ""),
                (tn, sn, hi.as_str(), ""),
            )?;
        }
        Op::PutPart {
            message,
            id,
            row,
            open,
        } => {
            let m = message.as_str();
            if t.messages.get((tn, sn, m)).map_err(map)?.is_none() {
                return Err(Error::not_found("message", m));
            }
            let p = id.as_str();
            // A part id is unique within its session: under another message, it moves.
            for other in holders(&t.part_messages, tn, sn, p)? {
                if other != m {
                    let old = (tn, sn, other.as_str(), p);
                    t.parts.remove(old).map_err(map)?;
                    t.open_parts.remove(old).map_err(map)?;
                    t.part_messages
                        .remove((tn, sn, p, other.as_str()))
                        .map_err(map)?;
                }
            }
            let key = (tn, sn, m, p);
            t.parts.insert(key, row.as_slice()).map_err(map)?;
            t.part_messages.insert((tn, sn, p, m), ()).map_err(map)?;
            if let Some(index) = &mut t.search {
                let terms = match terms {
                    Computed::Now(terms) => terms,
                    Computed::Later => {
                        Terms::of_row(&row, || format!("part row {tn}/{sn}/{m}/{p}"))?
                    }
                };
                index.put(tn, sn, p, terms)?;
            }
            if open {
                t.open_parts.insert(key, ()).map_err(map)?;
            } else {
                t.open_parts.remove(key).map_err(map)?;
            }
        }
        Op::RemovePart { message, id } => {
            let key = (tn, sn, message.as_str(), id.as_str());
            if t.parts.remove(key).map_err(map)?.is_some() {
                t.part_messages
                    .remove((tn, sn, id.as_str(), message.as_str()))
                    .map_err(map)?;
                if let Some(index) = &mut t.search {
                    index.remove(tn, sn, &id)?;
                }
            }
            t.open_parts.remove(key).map_err(map)?;
        }
        Op::PutFence { row } => {
            t.fences.insert((tn, sn), row.as_slice()).map_err(map)?;
            // A fence record is no event of the session: it records no seq.
            return Ok(());
        }
    }
    bump_seq(&mut t.sessions, tn, sn, p.seq, what)
}

/// Records `seq` on the session if it exists and `seq` is higher than what it holds.
fn bump_seq(
    sessions: &mut Table<'_, SessionKey, &'static [u8]>,
    tn: &str,
    sn: &str,
    seq: u64,
    what: impl Fn() -> String,
) -> Result<()> {
    let mut row = match sessions.get((tn, sn)).map_err(map)? {
        Some(v) => decode::<SessionRow>(v.value(), what)?,
        None => return Ok(()),
    };
    if seq > row.seq {
        row.seq = seq;
        sessions
            .insert((tn, sn), codec::encode(&row)?.as_slice())
            .map_err(map)?;
    }
    Ok(())
}

/// The ids of the parts of message `m`.
fn part_ids(
    parts: &Table<'_, PartKey, &'static [u8]>,
    tn: &str,
    sn: &str,
    m: &str,
) -> Result<Vec<String>> {
    last_key_parts(parts, tn, sn, m)
}

/// The messages of session `sn` that hold a part with id `p` (one, unless a release
/// before schema version 2 wrote it under several).
pub(crate) fn holders(
    index: &impl ReadableTable<PartKey, ()>,
    tn: &str,
    sn: &str,
    p: &str,
) -> Result<Vec<String>> {
    last_key_parts(index, tn, sn, p)
}

/// The last parts of the keys `(tn, sn, third, _)` of `table`, in key order.
fn last_key_parts<V: Value + 'static>(
    table: &impl ReadableTable<PartKey, V>,
    tn: &str,
    sn: &str,
    third: &str,
) -> Result<Vec<String>> {
    let hi = successor(third);
    let mut out = Vec::new();
    for entry in table
        .range((tn, sn, third, "")..(tn, sn, hi.as_str(), ""))
        .map_err(map)?
    {
        out.push(entry.map_err(map)?.0.value().3.to_owned());
    }
    Ok(out)
}

/// Removes every row with `lo <= key < hi`.
fn remove_range<'a, K: Key + 'static, V: Value + 'static>(
    table: &mut Table<'_, K, V>,
    lo: K::SelfType<'a>,
    hi: K::SelfType<'a>,
) -> Result<()> {
    table.retain_in(lo..hi, |_, _| false).map_err(map)
}

#[cfg(test)]
mod tests {
    use forge_core::{Session, TenantId};

    use super::*;

    fn batch() -> Vec<Envelope<SyncEvent>> {
        let info = Session::new("a journaled session", 1);
        vec![Envelope {
            tenant: TenantId::default(),
            session_id: info.id.clone(),
            seq: 7,
            epoch: None,
            event: SyncEvent::SessionUpdated { info },
        }]
    }

    fn summary(ops: &[Prepared]) -> Vec<(String, String, u64, bool)> {
        ops.iter()
            .map(|p| {
                let put = matches!(p.op, Ok(Op::PutSession { .. }));
                (p.tenant.clone(), p.session.clone(), p.seq, put)
            })
            .collect()
    }

    #[test]
    fn a_record_is_the_bare_operations_and_reads_back() {
        let ops = prepare(&batch(), true);
        let record = journal_record(&ops).unwrap().unwrap();
        assert_eq!(record[0], BARE_RECORD);
        assert_eq!(
            summary(&from_journal_record(&record).unwrap()),
            summary(&ops)
        );
    }

    #[test]
    fn a_record_of_an_earlier_release_still_reads() {
        // Earlier releases passed the operations through the codec (version byte 2).
        let ops = prepare(&batch(), true);
        let items: Vec<_> = ops
            .iter()
            .map(|p| {
                (
                    p.tenant.as_str(),
                    p.session.as_str(),
                    p.seq,
                    p.op.as_ref().unwrap(),
                )
            })
            .collect();
        let old = codec::encode(&items).unwrap();
        assert_eq!(old[0], codec::FORMAT_VERSION);
        assert_eq!(summary(&from_journal_record(&old).unwrap()), summary(&ops));
    }

    #[test]
    fn a_fence_record_reads_back_as_one_fence_write() {
        let row = codec::encode(&FenceRow {
            epoch: 10,
            holder: "w".into(),
            expires_ms: 5,
        })
        .unwrap();
        let record = fence_record("t", "ses_1", row.clone()).unwrap();
        let ops = from_journal_record(&record).unwrap();
        assert_eq!(ops.len(), 1);
        let p = &ops[0];
        assert_eq!(
            (p.tenant.as_str(), p.session.as_str(), p.epoch),
            ("t", "ses_1", None)
        );
        match &p.op {
            Ok(Op::PutFence { row: got }) => assert_eq!(got, &row),
            _ => panic!("not a fence write"),
        }
    }

    #[test]
    fn a_damaged_bare_record_is_an_error_not_operations() {
        let mut record = journal_record(&prepare(&batch(), true)).unwrap().unwrap();
        record.truncate(record.len() - 3);
        assert!(from_journal_record(&record).is_err());
    }
}
