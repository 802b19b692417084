//! Many writers and readers at once on one store (or several stores on one database).

use std::sync::Arc;

use forge_core::{SessionId, Store};

use super::*;

/// Many tasks write their own sessions and one shared session at once, while readers
/// page through it: no update is lost, no "database is locked" surfaces, and every page
/// read meanwhile is consistent. With `two_tenants`, every batch also writes a session
/// of tenant `b`.
pub async fn hammer(stores: &[Arc<dyn Store>], writers: u64, per_writer: u64, two_tenants: bool) {
    let seq_of = move |w: u64, i: u64| 2 + i * writers + w;
    let first = &stores[0];
    first.apply(&[put_session("a", "shared", 1)]).await.unwrap();
    let mut tasks = Vec::new();
    for w in 0..writers {
        let db = Arc::clone(&stores[w as usize % stores.len()]);
        tasks.push(tokio::spawn(async move {
            let own = format!("ses_w{w:02}");
            db.apply(&[put_session("a", &own, 1)]).await.unwrap();
            for i in 0..per_writer {
                // Seqs interleave across writers, so a batch that read a stale seq and
                // wrote it back would lower the shared session's seq.
                let seq = seq_of(w, i);
                let m = format!("msg_{w:02}_{i:03}");
                // A part id is unique within its session: one per message.
                let p = format!("prt_{w:02}_{i:03}");
                let mut batch = vec![
                    put_message("a", &own, &m, 0, seq),
                    put_message("a", "shared", &m, 1, seq),
                    put_part("a", "shared", &m, &p, 1, seq),
                ];
                if two_tenants {
                    batch.push(put_session("b", &own, seq));
                }
                db.apply(&batch)
                    .await
                    .unwrap_or_else(|e| panic!("writer {w} batch {i}: {e}"));
            }
        }));
    }
    // Readers page through the shared session for as long as the writers run: each
    // page's parts must belong to exactly its messages, from one snapshot.
    let writing = Arc::new(std::sync::atomic::AtomicUsize::new(tasks.len()));
    let tasks: Vec<_> = tasks
        .into_iter()
        .map(|t| {
            let writing = Arc::clone(&writing);
            tokio::spawn(async move {
                let r = t.await;
                writing.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                if let Err(e) = r {
                    std::panic::resume_unwind(e.into_panic());
                }
            })
        })
        .collect();
    let mut readers = Vec::new();
    for r in 0..2 {
        let db = Arc::clone(&stores[r % stores.len()]);
        let writing = Arc::clone(&writing);
        readers.push(tokio::spawn(async move {
            let mut reads = 0;
            while writing.load(std::sync::atomic::Ordering::SeqCst) > 0 || reads == 0 {
                for limit in [7, 1000] {
                    let pages = all_pages(db.as_ref(), &tenant("a"), &"shared".into(), limit)
                        .await
                        .unwrap_or_else(|e| panic!("reader {r}: {e}"));
                    for m in pages.iter().flat_map(|p| &p.messages) {
                        assert!(m.parts.iter().all(|p| p.message_id == m.info.id));
                    }
                }
                reads += 1;
            }
        }));
    }
    // And the shared session's seq never goes down.
    {
        let db = Arc::clone(first);
        let writing = Arc::clone(&writing);
        readers.push(tokio::spawn(async move {
            let mut last = 0;
            while writing.load(std::sync::atomic::Ordering::SeqCst) > 0 {
                let seq = db
                    .session(&tenant("a"), &"shared".into())
                    .await
                    .unwrap()
                    .unwrap()
                    .seq;
                assert!(seq >= last, "the shared seq went down from {last} to {seq}");
                last = seq;
            }
        }));
    }
    let tasks: Vec<_> = tasks.into_iter().chain(readers).collect();
    for t in tasks {
        t.await.unwrap();
    }
    let a = tenant("a");
    let shared = all_pages(first.as_ref(), &a, &"shared".into(), 1000)
        .await
        .unwrap();
    assert_eq!(shared[0].messages.len(), (writers * per_writer) as usize);
    let open_items = first.open_items(&a, Some(&"shared".into())).await.unwrap();
    assert_eq!(open_items.messages.len(), (writers * per_writer) as usize);
    assert_eq!(open_items.parts.len(), (writers * per_writer) as usize);
    let shared_state = first.session(&a, &"shared".into()).await.unwrap().unwrap();
    assert_eq!(shared_state.seq, seq_of(writers - 1, per_writer - 1));
    for w in 0..writers {
        let own = SessionId::from(format!("ses_w{w:02}"));
        let state = first.session(&a, &own).await.unwrap().unwrap();
        assert_eq!(state.seq, seq_of(w, per_writer - 1));
        let page = first.messages(&a, &own, None, 1000).await.unwrap();
        assert_eq!(page.messages.len(), per_writer as usize);
        if two_tenants {
            let b = first.session(&tenant("b"), &own).await.unwrap().unwrap();
            assert_eq!(b.seq, seq_of(w, per_writer - 1));
        }
    }
}
