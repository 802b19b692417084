//! Real opencode output (`examples/opencode/<version>/`, recorded by
//! `scripts/opencode/record.sh`): every session export imports and exports back to the
//! same JSON, a compaction with `tail_start_id` gives opencode's view, and every event of
//! the recorded `/event` log reads: those forge-store speaks as themselves, the others as
//! `Event::Other`.

use std::path::PathBuf;

use forge_store::{Event, TenantId};
use serde_json::Value;

fn fixtures() -> Vec<PathBuf> {
    let root: PathBuf = [env!("CARGO_MANIFEST_DIR"), "..", "examples", "opencode"]
        .iter()
        .collect();
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
        .expect("examples/opencode")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    assert!(!dirs.is_empty(), "no recorded opencode versions");
    dirs
}

#[tokio::test]
async fn every_recorded_export_round_trips_unchanged() {
    let mut checked = 0;
    for dir in fixtures() {
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .expect("fixture dir")
            .map(|e| e.expect("entry").path())
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        files.sort();
        for file in files {
            let text = std::fs::read_to_string(&file).expect("fixture");
            let original: Value = serde_json::from_str(&text).expect("fixture JSON");
            let forge = forge_store::open("memory://").await.unwrap();
            let tenant = TenantId::default();
            let report = forge.import_str(&tenant, &text, &|_, _| {}).await.unwrap();
            let sid = &report.sessions[0].id;
            let exported = serde_json::to_value(forge.export(&tenant, sid).await.unwrap()).unwrap();
            assert_eq!(
                exported,
                original,
                "{} changed on import → export",
                file.display()
            );
            checked += 1;
        }
    }
    assert!(checked >= 6, "only {checked} exports");
}

#[tokio::test]
async fn a_recorded_compaction_keeps_its_tail_in_the_view() {
    let dir = fixtures().pop().expect("a version");
    let text = std::fs::read_to_string(dir.join("compaction-manual.json")).expect("fixture");
    let doc: Value = serde_json::from_str(&text).unwrap();
    let messages = doc["messages"].as_array().unwrap();
    let (at, compaction) = messages
        .iter()
        .enumerate()
        .find_map(|(i, m)| {
            m["parts"]
                .as_array()?
                .iter()
                .find(|p| p["type"] == "compaction")
                .map(|p| (i, p.clone()))
        })
        .expect("a compaction part");
    let tail = compaction["tail_start_id"].as_str().expect("tail_start_id");
    let tail_at = messages
        .iter()
        .position(|m| m["info"]["id"] == tail)
        .expect("the tail's message");

    let forge = forge_store::open("memory://").await.unwrap();
    let tenant = TenantId::default();
    let report = forge.import_str(&tenant, &text, &|_, _| {}).await.unwrap();
    let view = forge.view(&tenant, &report.sessions[0].id).await.unwrap();
    let ids: Vec<&str> = view.messages.iter().map(|m| m.info.id.as_str()).collect();
    let id = |i: usize| messages[i]["info"]["id"].as_str().unwrap();
    // [compaction request, its summary] + [tail .. before the request] + [after the summary]
    let mut want = vec![id(at), id(at + 1)];
    want.extend((tail_at..at).map(id));
    want.extend((at + 2..messages.len()).map(id));
    assert_eq!(ids, want);
    assert!(view.tail > 0, "the tail is kept");
}

#[test]
fn every_recorded_event_reads_and_those_forge_store_speaks_read_as_themselves() {
    let known = [
        "session.updated",
        "session.deleted",
        "message.updated",
        "message.removed",
        "message.part.updated",
        "message.part.removed",
        "message.part.delta",
        "session.status",
        "session.idle",
        "session.error",
    ];
    let dir = fixtures().pop().expect("a version");
    let log = std::fs::read_to_string(dir.join("events.jsonl")).expect("events.jsonl");
    let mut read = 0;
    for (i, line) in log.lines().enumerate() {
        let v: Value = serde_json::from_str(line).expect("event JSON");
        let kind = v["type"].as_str().expect("type").to_owned();
        let event: Event =
            serde_json::from_value(v).unwrap_or_else(|e| panic!("line {}: {kind}: {e}", i + 1));
        assert_eq!(event.name(), kind, "line {}", i + 1);
        assert_eq!(
            matches!(event, Event::Other { .. }),
            !known.contains(&kind.as_str()),
            "line {}: {kind}",
            i + 1
        );
        read += usize::from(known.contains(&kind.as_str()));
    }
    assert!(read > 500, "only {read} events read");
}
