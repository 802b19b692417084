//! The fuzz corpus: the example streams (whole and by line), export documents (JSON
//! and JSONL) and the JSON rows inside them, each built once.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use forge_store::{ReplayOptions, TenantId};
use serde_json::Value;

pub(crate) fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

pub(crate) fn files(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().flatten().collect();
    entries.sort_by_key(std::fs::DirEntry::path);
    for e in entries {
        let p = e.path();
        if p.is_dir() {
            files(&p, ext, out);
        } else if p.extension().is_some_and(|x| x == ext) {
            out.push(p);
        }
    }
}

/// The example streams (`examples/streams/**/*.jsonl`), whole.
pub(crate) fn stream_files() -> &'static [Vec<u8>] {
    static FILES: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    FILES.get_or_init(|| {
        let mut paths = Vec::new();
        files(&root().join("examples/streams"), "jsonl", &mut paths);
        assert!(paths.len() >= 10, "example streams missing: {paths:?}");
        paths.iter().map(|p| std::fs::read(p).unwrap()).collect()
    })
}

/// Every line of the example streams.
pub(crate) fn stream_lines() -> &'static [Vec<u8>] {
    static LINES: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    LINES.get_or_init(|| {
        stream_files()
            .iter()
            .flat_map(|f| f.split(|b| *b == b'\n').map(<[u8]>::to_vec))
            .filter(|l| !l.is_empty())
            .collect()
    })
}

/// Export documents: the stored-format fixtures' expected sessions and an export of
/// every example stream replayed into a fresh store.
pub(crate) fn exports() -> &'static [Vec<u8>] {
    static DOCS: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    DOCS.get_or_init(|| {
        let mut paths = Vec::new();
        files(
            &root().join("fixtures/storage-v1/expected/redb"),
            "json",
            &mut paths,
        );
        let mut docs: Vec<Vec<u8>> = paths
            .iter()
            .map(|p| std::fs::read(p).unwrap())
            .filter(|d| {
                serde_json::from_slice::<Value>(d).is_ok_and(|v| v.get("messages").is_some())
            })
            .collect();
        forge_testkit::current_thread_runtime().block_on(async {
            let forge = forge_store::open("memory://").await.unwrap();
            let t = TenantId::default();
            for f in stream_files() {
                let text = String::from_utf8(f.clone()).unwrap();
                let sid = match forge.replay_str(&t, &text, ReplayOptions::default()).await {
                    Ok(r) => r.session,
                    Err(e) => e.report.session,
                };
                if let Some(sid) = sid {
                    let doc = forge.export(&t, &sid).await.unwrap();
                    docs.push(serde_json::to_vec(&doc).unwrap());
                }
            }
        });
        assert!(docs.len() >= 10, "{} export documents", docs.len());
        docs
    })
}

/// Export documents as JSONL (one `{info, parts}` message per line), the other import
/// shape.
pub(crate) fn jsonl_exports() -> &'static [Vec<u8>] {
    static DOCS: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    DOCS.get_or_init(|| {
        exports()
            .iter()
            .map(|d| {
                let v: Value = serde_json::from_slice(d).unwrap();
                let mut out = Vec::new();
                for m in v["messages"].as_array().unwrap() {
                    out.extend(serde_json::to_vec(m).unwrap());
                    out.push(b'\n');
                }
                out
            })
            .collect()
    })
}

/// Sessions, messages and parts as JSON values, from the export documents.
pub(crate) fn rows() -> &'static [Vec<u8>] {
    static ROWS: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    ROWS.get_or_init(|| {
        let mut out = Vec::new();
        for d in exports() {
            let v: Value = serde_json::from_slice(d).unwrap();
            out.push(serde_json::to_vec(&v["info"]).unwrap());
            for m in v["messages"].as_array().unwrap() {
                out.push(serde_json::to_vec(&m["info"]).unwrap());
                for p in m["parts"].as_array().unwrap() {
                    out.push(serde_json::to_vec(p).unwrap());
                }
            }
        }
        out
    })
}

pub(crate) fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Valid inputs given as text, as a corpus to mutate.
pub(crate) fn texts(items: &[&str]) -> Vec<Vec<u8>> {
    items.iter().map(|s| s.as_bytes().to_vec()).collect()
}
