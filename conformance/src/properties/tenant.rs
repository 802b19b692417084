//! Tenant isolation (contract property 7, docs/conformance.md):
//! - six tenants writing the same session, message and part ids never see or change
//!   each other's rows (each equals its own reference model), and a seventh sees
//!   nothing. Large cases first give each of the six thousands of sessions with the
//!   same ids, so every tenant's listing runs past any internal page of a scan (a
//!   continuation that forgets the tenant shows up as another tenant's sessions). Two of them are `a.b` and `_-`: valid tenant ids made of punctuation a
//!   backend naming files, patterns or keys after tenants must contain; two are
//!   near-duplicates of the first (the same in upper case, and the first extended to 64
//!   characters, so the first is its prefix);
//! - hostile tenant ids (separators, quotes, NUL, non-ASCII, too long, empty, only
//!   dots — `.` and `..` would be path components) are
//!   rejected by `TenantId::new` and by deserialization, valid ones accepted;
//! - hostile session / message / part ids (`../x`, `a\0b`, `%`, `_`, quotes, very long,
//!   Unicode, empty) and valid ids a loose comparison merges (real ids of one
//!   millisecond, prefixes, case and last-character variants, canonical equivalents,
//!   256-byte ids differing at the end) are either rejected with an error that leaves
//!   nothing behind, or stored exactly and kept apart from every other id.

use forge_core::{Envelope, MessageId, PartId, SessionId, Store, SyncEvent, TenantId};
use proptest::collection::vec;
use proptest::prelude::*;
use serde::{Deserialize, Serialize};

use super::upsert::{compare, Op};
use crate::harness::{apply_both, envs, same_read, CaseRun, Ctx};
use crate::reference::ReferenceStore;
use crate::strategies::model::{self, MessageKind, PartKind};
use crate::strategies::scaled::Sizes;
use crate::Property;

/// Ids a careless backend turns into paths, patterns or queries.
pub fn hostile_ids() -> Vec<String> {
    let mut ids: Vec<String> = [
        "x",
        "../x",
        "./x",
        "x/.",
        "..",
        "/",
        "a/b",
        "a\\b",
        "a\0b",
        "%",
        "_",
        "*",
        "?",
        "[a]",
        "' OR '1'='1",
        "\"; DROP TABLE parts; --",
        "a b",
        "\n",
        "é",
        "🦀",
        "ses_0",
        "CON",
        "",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    ids.push("x".repeat(4096));
    ids.push("é".repeat(300));
    // Valid ids a loose comparison merges: real ids of one millisecond, prefixes of one
    // another, ids differing only in the last character or in case, canonical
    // equivalents, 256-byte ids differing only at the end.
    for id in crate::strategies::scaled::id_family("ses", 9, 40) {
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    ids
}

/// A case: interleaved ops of six tenants over the same ids, and tenant-id strings to
/// validate.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Case {
    /// `(tenant, op)`, each applied as its own batch; tenant `n % 6` is A, B, `a.b`,
    /// `_-`, A in upper case, A extended to 64 characters.
    pub ops: Vec<(u8, Op)>,
    /// Strings `TenantId::new` must reject.
    pub hostile_tenants: Vec<String>,
    /// Strings `TenantId::new` must accept.
    pub valid_tenants: Vec<String>,
    /// Sessions `ses_00000`, `ses_00001`, … each of the six tenants writes in one batch
    /// before the ops (0 in regular cases).
    #[serde(default)]
    pub bulk: u16,
}

/// Any case.
pub fn case() -> impl Strategy<Value = Case> {
    let op = super::upsert::case(false).prop_map(|c| {
        c.batches
            .into_iter()
            .flat_map(|b| b.ops)
            .collect::<Vec<_>>()
    });
    let hostile = prop_oneof![
        "[A-Za-z0-9._-]{0,10}[^A-Za-z0-9._-][A-Za-z0-9._-]{0,10}",
        "[a-z]{65,80}",
        Just(String::new()),
    ];
    (
        (op, vec(0u8..6, 16)),
        vec(hostile, 1..6),
        vec("[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}", 1..4),
    )
        .prop_map(|((ops, who), hostile_tenants, valid_tenants)| Case {
            ops: ops
                .into_iter()
                .zip(who.into_iter().cycle())
                .map(|(op, b)| (b, op))
                .collect(),
            hostile_tenants,
            valid_tenants,
            bulk: 0,
        })
}

/// Large cases: a regular case after each tenant wrote a listing's worth of sessions.
pub fn large_case(sizes: Sizes) -> impl Strategy<Value = Case> {
    (case(), sizes.listing()).prop_map(|(mut c, bulk)| {
        c.bulk = bulk;
        c
    })
}

pub(crate) fn run(ctx: &Ctx<'_>) -> CaseRun {
    let sizes = Sizes::new(ctx.config.scale);
    crate::harness::run_scaled(
        ctx,
        Property::TenantIsolation,
        case(),
        large_case(sizes),
        |c| check(ctx, c),
    )
}

/// `a` extended to 64 characters: `a` is a prefix of it.
fn near(a: &str) -> String {
    let mut t = format!("{a}.x");
    while t.len() < forge_core::TenantId::MAX_LEN {
        t.push('-');
    }
    t
}

fn tenant_ids(case: &Case) -> Result<(), String> {
    let fixed = [
        "",
        "a/b",
        "a b",
        "t'; DROP TABLE parts;--",
        "ä",
        "a\0",
        "a:b",
        "../etc",
        ".",
        "..",
        "...",
    ];
    for bad in fixed
        .iter()
        .copied()
        .chain(case.hostile_tenants.iter().map(String::as_str))
    {
        if let Ok(t) = TenantId::new(bad) {
            return Err(format!(
                "TenantId::new accepted the hostile id {bad:?} as {t:?}"
            ));
        }
        let wire = serde_json::json!({"tenant": bad, "sessionID": "ses_1", "seq": 1,
            "event": {"type": "session.deleted", "properties": {"sessionID": "ses_1"}}});
        if serde_json::from_value::<Envelope<SyncEvent>>(wire).is_ok() {
            return Err(format!(
                "an envelope with the hostile tenant {bad:?} deserialized"
            ));
        }
    }
    for good in &case.valid_tenants {
        TenantId::new(good)
            .map_err(|e| format!("TenantId::new rejected the valid {good:?}: {e}"))?;
    }
    Ok(())
}

/// Writes a session, message and part all with id `h` in `tenant`; mirrors it in the
/// model only if the store accepted it.
async fn hostile(
    store: &dyn Store,
    model: &mut ReferenceStore,
    tenant: &TenantId,
    h: &str,
    seq: u64,
) -> Result<(), String> {
    let sid = SessionId::from(h);
    let mid = MessageId::from(h);
    let events = vec![
        SyncEvent::SessionUpdated {
            info: model::session(&sid, 1),
        },
        SyncEvent::MessageUpdated {
            info: model::message(&sid, &mid, MessageKind::User, 1),
        },
        SyncEvent::PartUpdated {
            part: model::part(&sid, &mid, &PartId::from(h), PartKind::Text, 1),
        },
    ];
    let batch = envs(tenant, seq, events);
    if store.apply(&batch).await.is_ok() {
        model
            .apply(&batch)
            .map_err(|r| format!("the model rejects the hostile batch: {r:?}"))?;
    }
    Ok(())
}

/// What the store shows for the hostile ids equals the model.
async fn compare_hostile(
    store: &dyn Store,
    tenant: &TenantId,
    model: &ReferenceStore,
) -> Result<(), String> {
    let want = model.sessions(tenant);
    same_read("sessions()", &want, "sessions()", store.sessions(tenant)).await?;
    for h in hostile_ids() {
        let (sid, mid) = (SessionId::from(h.as_str()), MessageId::from(h.as_str()));
        let short: String = h.chars().take(12).collect();
        let what = format!("session({short:?})");
        let want = model.session(tenant, &sid);
        same_read(&what, &want, "session()", store.session(tenant, &sid)).await?;
        let what = format!("message({short:?})");
        let want = model.message(tenant, &sid, &mid);
        same_read(&what, &want, "message()", store.message(tenant, &sid, &mid)).await?;
        let what = format!("messages({short:?})");
        let want = model.history(tenant, &sid);
        let read = async { Ok(store.messages(tenant, &sid, None, 1000).await?.messages) };
        same_read(&what, &want, "messages()", read).await?;
    }
    Ok(())
}

pub(crate) fn check(ctx: &Ctx<'_>, case: &Case) -> Result<(), String> {
    tenant_ids(case)?;
    ctx.block(async {
        let b = ctx.backend().await?;
        let a = b.tenant();
        let tenants = [
            ("A", a.clone()),
            ("B", b.tenant()),
            ("\"a.b\"", b.fixed_tenant("a.b").await?),
            ("\"_-\"", b.fixed_tenant("_-").await?),
            // Near-duplicates of A: the same in upper case, and A extended (A is its
            // prefix), 64 characters long.
            (
                "A in upper case",
                b.fixed_tenant(&a.as_str().to_uppercase()).await?,
            ),
            ("A extended", b.fixed_tenant(&near(a.as_str())).await?),
            ("C (never written)", b.tenant()),
        ];
        let ta = tenants[0].1.clone();
        let store = b.store.as_ref();
        let mut model = ReferenceStore::new();
        // Each tenant's sessions carry its own version, so a row shown to the wrong
        // tenant differs even where the ids are the same.
        for (v, (name, tenant)) in (0u8..).zip(&tenants[..6]) {
            if case.bulk == 0 {
                break;
            }
            let events = (0..case.bulk)
                .map(|k| SyncEvent::SessionUpdated {
                    info: model::session(&SessionId::from(format!("ses_{k:05}")), v),
                })
                .collect();
            let batch = envs(tenant, 1, events);
            ctx.stats.batch(batch.len());
            let rejected = format!("the model rejects tenant {name}'s sessions");
            let what = format!("apply (tenant {name}'s sessions)");
            apply_both(&mut model, store, &batch, &rejected, &what).await?;
        }
        for (seq, (who, op)) in (1..).zip(&case.ops) {
            let (name, tenant) = &tenants[usize::from(*who % 6)];
            let batch = envs(tenant, seq, vec![op.event()]);
            let expected = model.apply(&batch);
            let actual = store.apply(&batch).await;
            if expected.is_ok() != actual.is_ok() {
                return Err(format!(
                    "tenant {name} {op:?}: the model says {expected:?}, the store {actual:?}"
                ));
            }
        }
        for (i, h) in hostile_ids().iter().enumerate() {
            hostile(store, &mut model, &ta, h, 1_000 + i as u64).await?;
        }
        for (name, t) in &tenants {
            compare(store, t, super::upsert::Ids::Plain, &model, &ctx.stats)
                .await
                .map_err(|e| format!("tenant {name}: {e}"))?;
            compare_hostile(store, t, &model)
                .await
                .map_err(|e| format!("tenant {name}, hostile ids: {e}"))?;
        }
        b.cleanup().await;
        Ok(())
    })
}
