//! Where large values are stored once ([`forge_core::blob`]), chosen by the URL.
//!
//! The keys below are taken out of the URL before the backend sees it:
//!
//! | key | value | default |
//! |---|---|---|
//! | `blobs` | `backend` (in the backend's own tables or keys), `off` (new values stay in their rows; references already stored are still followed), `file:///ABSOLUTE/DIR` (a directory), `s3://BUCKET[/PREFIX]` (an S3 bucket) | `backend` when the backend keeps blobs, else `off` |
//! | `blob_threshold` | bytes from which a value is stored once | 32768 |
//! | `blob_grace_s` | seconds an unreferenced blob is kept before a sweep removes it | 3600 |
//! | `blob_endpoint` | the S3 endpoint (`http://127.0.0.1:5000` for a local server) | AWS's |
//! | `blob_region` | the S3 region | `us-east-1` |
//!
//! The directory and the bucket are reached through Apache OpenDAL (the `opendal`
//! feature). S3 credentials come from the environment (`AWS_ACCESS_KEY_ID`,
//! `AWS_SECRET_ACCESS_KEY`, or AWS's other sources), never from the URL.

use std::sync::Arc;
use std::time::Duration;

use forge_core::blob::{BlobOptions, Blobbed};
use forge_core::{Error as CoreError, Result as CoreResult, Store};

/// Where a store's blobs are.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum BlobPlace {
    /// In the backend, when it can keep them (else nowhere: values stay in rows).
    Backend,
    /// Nowhere: every new value stays in its row (what rows already reference is still
    /// read from the backend).
    Off,
    /// Files under a directory.
    Dir(std::path::PathBuf),
    /// Objects in an S3 bucket, under a prefix.
    S3 {
        /// The bucket.
        bucket: String,
        /// The key prefix (may be empty).
        prefix: String,
        /// The endpoint, when not AWS's.
        endpoint: Option<String>,
        /// The region.
        region: String,
    },
}

/// The blob keys of a URL ([`split`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlobConfig {
    /// Where.
    pub place: BlobPlace,
    /// Threshold and grace.
    pub options: BlobOptions,
}

impl Default for BlobConfig {
    fn default() -> Self {
        Self {
            place: BlobPlace::Backend,
            options: BlobOptions::default(),
        }
    }
}

/// Splits the blob keys off `url`: the URL the backend is opened with, and the blob
/// configuration.
///
/// # Errors
/// [`CoreError::InvalidInput`] naming a blob key whose value is wrong.
pub fn split(url: &str) -> CoreResult<(String, BlobConfig)> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_owned(), BlobConfig::default()));
    };
    let mut kept: Vec<&str> = Vec::new();
    let mut config = BlobConfig::default();
    let mut endpoint = None;
    let mut region = None;
    let mut place = None;
    for pair in query.split('&') {
        let Some((key, value)) = pair.split_once('=') else {
            kept.push(pair);
            continue;
        };
        match key {
            "blobs" => place = Some(value.to_owned()),
            "blob_threshold" => {
                config.options.threshold = value
                    .parse::<usize>()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| {
                        CoreError::InvalidInput(format!(
                            "blob_threshold={value:?} is not a positive number of bytes"
                        ))
                    })?;
            }
            "blob_grace_s" => {
                config.options.grace =
                    value.parse::<u64>().map(Duration::from_secs).map_err(|_| {
                        CoreError::InvalidInput(format!(
                            "blob_grace_s={value:?} is not a whole number of seconds"
                        ))
                    })?;
            }
            "blob_endpoint" => endpoint = Some(value.to_owned()),
            "blob_region" => region = Some(value.to_owned()),
            _ => kept.push(pair),
        }
    }
    config.place = match place.as_deref() {
        None | Some("backend") => BlobPlace::Backend,
        Some("off") => BlobPlace::Off,
        Some(v) if v.starts_with("file://") => {
            let path = std::path::PathBuf::from(&v["file://".len()..]);
            if !path.is_absolute() {
                return Err(CoreError::InvalidInput(format!(
                    "blobs={v:?}: the directory must be absolute (file:///var/lib/forge/blobs)"
                )));
            }
            BlobPlace::Dir(path)
        }
        Some(v) if v.starts_with("s3://") => {
            let rest = &v["s3://".len()..];
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(CoreError::InvalidInput(format!(
                    "blobs={v:?} names no bucket (s3://BUCKET/PREFIX)"
                )));
            }
            BlobPlace::S3 {
                bucket: bucket.to_owned(),
                prefix: prefix.trim_matches('/').to_owned(),
                endpoint: endpoint.take(),
                region: region.take().unwrap_or_else(|| "us-east-1".into()),
            }
        }
        Some(v) => {
            return Err(CoreError::InvalidInput(format!(
                "blobs={v:?} is not known; use backend, off, file:///DIR or s3://BUCKET/PREFIX"
            )))
        }
    };
    if endpoint.is_some() || region.is_some() {
        return Err(CoreError::InvalidInput(
            "blob_endpoint and blob_region apply to blobs=s3://… only".into(),
        ));
    }
    let url = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok((url, config))
}

/// `store` with its large values stored once where `config` says.
///
/// # Errors
/// An object store that cannot be set up, or one named in a build without the
/// `opendal` feature ([`CoreError::Unsupported`]).
pub fn wrap(store: Arc<dyn Store>, config: &BlobConfig) -> CoreResult<Arc<dyn Store>> {
    match &config.place {
        // Off: nothing new is moved, but rows written while it was on still hold
        // references, which reads must follow (and a value that looks like a reference
        // is still stored once, so it is never taken for one).
        BlobPlace::Off => Ok(Blobbed::in_backend(
            store,
            BlobOptions {
                threshold: usize::MAX,
                ..config.options
            },
        )),
        BlobPlace::Backend => Ok(Blobbed::in_backend(store, config.options)),
        #[cfg(feature = "opendal")]
        place => {
            let blobs = Arc::new(object::ObjectBlobs::open(place)?);
            Ok(Arc::new(Blobbed::new(store, blobs, config.options)))
        }
        #[cfg(not(feature = "opendal"))]
        _ => Err(CoreError::Unsupported(
            "blobs in a directory or a bucket need the opendal feature".into(),
        )),
    }
}

#[cfg(feature = "opendal")]
pub mod object {
    //! Blobs in a directory or an S3 bucket, through Apache OpenDAL.
    //!
    //! Layout: `t-TENANT/HH/HEX`, where `HEX` is the blob id and `HH` its first two
    //! digits. `touched` is the object's last-modified time: a refresh writes the
    //! object again. A directory's files are written to a temporary directory, synced
    //! and renamed into place, and the directory holding them is synced.
    //!
    //! What an object store cannot do: decide "untouched, so delete" in one step. The
    //! sweep reads the time and deletes right after; a writer that refreshes the blob
    //! in between loses it. The window is one round trip, once per unreferenced blob.

    use std::path::PathBuf;
    use std::sync::Arc;
    use std::time::{SystemTime, UNIX_EPOCH};

    use async_trait::async_trait;
    use forge_core::blob::{BlobEntry, BlobId, BlobStore, BlobValue};
    use forge_core::store::{Footprint, Occupied};
    use forge_core::{Error, Result, TenantId};
    use opendal::{services, ErrorKind, Operator};

    use super::BlobPlace;

    /// Blobs in a directory or an S3 bucket.
    #[derive(Debug)]
    pub struct ObjectBlobs {
        op: Operator,
        location: String,
        dir: Option<PathBuf>,
    }

    fn failed(what: &str, e: &opendal::Error) -> Error {
        Error::backend(
            "blobs",
            e.is_temporary(),
            std::io::Error::other(format!("{what}: {e}")),
        )
    }

    fn ms(meta: &opendal::Metadata) -> i64 {
        meta.last_modified()
            .and_then(|t| SystemTime::from(t).duration_since(UNIX_EPOCH).ok())
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
    }

    fn path(tenant: &TenantId, id: &BlobId) -> String {
        let hex = id.as_str();
        format!("t-{tenant}/{}/{hex}", &hex[..2])
    }

    impl ObjectBlobs {
        /// Opens the directory or the bucket `place` names.
        ///
        /// # Errors
        /// [`Error::InvalidInput`] for a place that is not a directory or a bucket; the
        /// object store's error when it cannot be set up.
        pub fn open(place: &BlobPlace) -> Result<Self> {
            match place {
                BlobPlace::Dir(dir) => {
                    std::fs::create_dir_all(dir).map_err(|e| {
                        Error::backend(
                            "blobs",
                            false,
                            std::io::Error::other(format!(
                                "cannot create the blob directory {}: {e}",
                                dir.display()
                            )),
                        )
                    })?;
                    let root = dir.to_string_lossy().into_owned();
                    let tmp = dir.join(".tmp");
                    let builder = services::Fs::default()
                        .root(&root)
                        .atomic_write_dir(&tmp.to_string_lossy());
                    let op = Operator::new(builder)
                        .map_err(|e| failed("opening the blob directory", &e))?
                        .finish();
                    Ok(Self {
                        op,
                        location: format!("file://{root}"),
                        dir: Some(dir.clone()),
                    })
                }
                BlobPlace::S3 {
                    bucket,
                    prefix,
                    endpoint,
                    region,
                } => {
                    let mut builder = services::S3::default()
                        .bucket(bucket)
                        .root(&format!("/{prefix}"))
                        .region(region);
                    if let Some(e) = endpoint {
                        builder = builder.endpoint(e);
                    }
                    let op = Operator::new(builder)
                        .map_err(|e| failed("opening the blob bucket", &e))?
                        .finish();
                    Ok(Self {
                        op,
                        location: format!("s3://{bucket}/{prefix}"),
                        dir: None,
                    })
                }
                other => Err(Error::InvalidInput(format!(
                    "{other:?} is not an object store"
                ))),
            }
        }

        fn sync_dir(&self, tenant: &TenantId, id: &BlobId) -> Result<()> {
            let Some(dir) = &self.dir else { return Ok(()) };
            let shard = dir.join(format!("t-{tenant}")).join(&id.as_str()[..2]);
            for d in [
                &shard,
                &shard.parent().map(PathBuf::from).unwrap_or_default(),
            ] {
                std::fs::File::open(d)
                    .and_then(|f| f.sync_all())
                    .map_err(|e| {
                        Error::backend(
                            "blobs",
                            false,
                            std::io::Error::other(format!("syncing {}: {e}", d.display())),
                        )
                    })?;
            }
            Ok(())
        }
    }

    #[async_trait]
    impl BlobStore for ObjectBlobs {
        fn location(&self) -> String {
            self.location.clone()
        }

        async fn put(
            &self,
            tenant: &TenantId,
            blobs: &[BlobValue],
            _now_ms: i64,
            refresh_before_ms: i64,
        ) -> Result<u64> {
            let mut written = 0;
            for b in blobs {
                let at = path(tenant, &b.id);
                let fresh = match self.op.stat(&at).await {
                    Ok(meta) => ms(&meta) >= refresh_before_ms,
                    Err(e) if e.kind() == ErrorKind::NotFound => false,
                    Err(e) => return Err(failed(&format!("reading {at}"), &e)),
                };
                if fresh {
                    continue;
                }
                self.op
                    .write(&at, b.value.as_bytes().to_vec())
                    .await
                    .map_err(|e| failed(&format!("writing {at}"), &e))?;
                self.sync_dir(tenant, &b.id)?;
                written += 1;
            }
            Ok(written)
        }

        async fn get(&self, tenant: &TenantId, ids: &[BlobId]) -> Result<Vec<Option<Arc<str>>>> {
            let mut out = Vec::with_capacity(ids.len());
            for id in ids {
                let at = path(tenant, id);
                match self.op.read(&at).await {
                    Ok(buf) => {
                        let text = String::from_utf8(buf.to_vec()).map_err(|e| {
                            Error::corrupted(&at, format!("the blob is not UTF-8: {e}"))
                        })?;
                        if BlobId::of(&text) != *id {
                            return Err(Error::corrupted(
                                &at,
                                "the blob's content does not match its address",
                            ));
                        }
                        out.push(Some(Arc::from(text)));
                    }
                    Err(e) if e.kind() == ErrorKind::NotFound => out.push(None),
                    Err(e) => return Err(failed(&format!("reading {at}"), &e)),
                }
            }
            Ok(out)
        }

        async fn list(&self, tenant: &TenantId) -> Result<Vec<BlobEntry>> {
            let dir = format!("t-{tenant}/");
            let entries = match self.op.list_with(&dir).recursive(true).await {
                Ok(e) => e,
                Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
                Err(e) => return Err(failed(&format!("listing {dir}"), &e)),
            };
            let mut out = Vec::new();
            for entry in entries {
                if !entry.metadata().is_file() {
                    continue;
                }
                let Some(name) = entry.path().rsplit('/').next() else {
                    continue;
                };
                let Ok(id) = BlobId::parse(name) else {
                    continue;
                };
                let meta = self
                    .op
                    .stat(entry.path())
                    .await
                    .map_err(|e| failed(&format!("reading {}", entry.path()), &e))?;
                out.push(BlobEntry {
                    id,
                    bytes: meta.content_length(),
                    touched_ms: ms(&meta),
                });
            }
            Ok(out)
        }

        async fn delete(
            &self,
            tenant: &TenantId,
            ids: &[BlobId],
            touched_before_ms: i64,
        ) -> Result<u64> {
            let mut deleted = 0;
            for id in ids {
                let at = path(tenant, id);
                match self.op.stat(&at).await {
                    Ok(meta) if ms(&meta) < touched_before_ms => {
                        self.op
                            .delete(&at)
                            .await
                            .map_err(|e| failed(&format!("deleting {at}"), &e))?;
                        deleted += 1;
                    }
                    Ok(_) => {}
                    Err(e) if e.kind() == ErrorKind::NotFound => {}
                    Err(e) => return Err(failed(&format!("reading {at}"), &e)),
                }
            }
            Ok(deleted)
        }

        async fn footprint(&self) -> Result<Footprint> {
            let entries = self
                .op
                .list_with("")
                .recursive(true)
                .await
                .map_err(|e| failed("listing the blobs", &e))?;
            let mut files = Vec::new();
            let mut bytes = 0u64;
            for entry in entries {
                if !entry.metadata().is_file() {
                    continue;
                }
                match &self.dir {
                    Some(dir) => files.push(dir.join(entry.path())),
                    None => {
                        let meta = self
                            .op
                            .stat(entry.path())
                            .await
                            .map_err(|e| failed(&format!("reading {}", entry.path()), &e))?;
                        bytes += meta.content_length();
                    }
                }
            }
            if self.dir.is_some() {
                let mut size = Footprint::of_files(&files)?;
                let total = size.total("file");
                size.items = vec![Occupied {
                    name: format!("{} ({} files)", self.location, files.len()),
                    kind: "file".into(),
                    bytes: total,
                }];
                return Ok(size);
            }
            Ok(Footprint {
                items: vec![Occupied {
                    name: self.location.clone(),
                    kind: "object".into(),
                    bytes,
                }],
            })
        }
    }
}
