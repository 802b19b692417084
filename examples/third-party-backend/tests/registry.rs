//! The backend registers itself with forge-store through the same public API as the
//! built-in ones: once installed, `forge_store::open` opens its URLs, its scheme is
//! listed, and a bad URL of it is refused with the backend's own error.

use std::path::Path;

use forge_example_json_files::DRIVER;
use forge_store::{Error, ReplayOptions, TenantId};

#[tokio::test]
async fn installed_it_opens_by_url_and_keeps_what_was_written() {
    forge_store::install(&DRIVER);
    assert!(forge_store::schemes()
        .iter()
        .any(|s| s.name == "json-files"));

    let dir = tempfile::tempdir().unwrap();
    let url = format!("jsonfiles://{}", dir.path().display());
    let tenant = TenantId::default();
    let forge = forge_store::open(&url).await.unwrap();
    assert_eq!(forge.engine().store.capabilities().name, "json-files");
    let stream = Path::new(env!("CARGO_MANIFEST_DIR")).join("../streams/multi-turn-tools.jsonl");
    let report = forge
        .replay_file(&tenant, &stream, ReplayOptions::default())
        .await
        .unwrap();
    let session = report.session.clone().expect("a session was written");
    let written = forge.history_all(&tenant, &session).await.unwrap();
    assert!(written.len() >= 2, "{report:?}");
    forge.close().await.unwrap();

    // A new process finds it again through the same URL, in the backend's files.
    let again = forge_store::open(&url).await.unwrap();
    assert_eq!(again.history_all(&tenant, &session).await.unwrap(), written);
}

#[tokio::test]
async fn a_bad_url_of_it_is_the_backends_own_error() {
    forge_store::install(&DRIVER);
    let err = forge_store::open("jsonfiles:///tmp/x?fsync=yes")
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Open { .. }), "{err}");
    assert!(err.to_string().contains("takes no options"), "{err}");
}
