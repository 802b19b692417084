//! Files beside an embedded store (redb, SQLite): where a new store is made before it
//! is linked into place whole, and the cleanup of what killed creations left there.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// How old a creation file must be before it counts as abandoned: creating a store
/// takes milliseconds, so a minute leaves a wide margin for a process this one cannot
/// see (another PID namespace sharing the directory).
pub const ABANDONED_AFTER: Duration = Duration::from_mins(1);

/// Where this process makes a new store at `path` before linking it there:
/// `.NAME.creating-PID` beside it. `None` when `path` has no file name.
pub fn creation_path(path: &Path) -> Option<PathBuf> {
    let name = path.file_name()?;
    Some(path.with_file_name(format!(
        ".{}.creating-{}",
        name.to_string_lossy(),
        std::process::id()
    )))
}

/// Removes what killed creations of a store at `path` left beside it: the
/// `.NAME.creating-PID` files (and their `-wal`, `-shm`, `-journal`) of processes that
/// no longer run, untouched for [`ABANDONED_AFTER`]. Where it cannot tell whether the
/// process runs (outside Linux) it waits an hour instead. Best effort: returns how many
/// files it removed, and logs each.
pub fn remove_abandoned_creations(path: &Path) -> usize {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return 0;
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let prefix = format!(".{}.creating-", name.to_string_lossy());
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let file = entry.file_name();
        let Some(rest) = file.to_str().and_then(|f| f.strip_prefix(&prefix)) else {
            continue;
        };
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        let Ok(pid) = rest[..digits].parse::<u32>() else {
            continue;
        };
        let age = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok());
        if !abandoned(pid, age) {
            continue;
        }
        if std::fs::remove_file(entry.path()).is_ok() {
            removed += 1;
            tracing::info!(
                file = %entry.path().display(),
                "removed what a killed creation of the store left beside it"
            );
        }
    }
    removed
}

/// Makes durable the directory entry of `path` (a file just created, linked, or renamed
/// there) by syncing the directory that holds it. A new file's own `fsync` persists its
/// data, not its name: until its directory is synced, a power cut may leave the file
/// out of the directory, whatever was synced into it.
///
/// # Errors
/// The directory cannot be opened or synced; the error names the directory.
pub fn sync_dir(path: &Path) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!(
                    "syncing directory {} (to make {} durable): {e}",
                    dir.display(),
                    path.file_name()
                        .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
                ),
            )
        })
}

fn abandoned(pid: u32, age: Option<Duration>) -> bool {
    if pid == std::process::id() {
        return false;
    }
    let Some(age) = age else {
        return false;
    };
    if cfg!(target_os = "linux") {
        age >= ABANDONED_AFTER && !Path::new(&format!("/proc/{pid}")).exists()
    } else {
        age >= Duration::from_hours(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn aged(path: &Path, by: Duration) {
        let f = std::fs::File::options().write(true).open(path).unwrap();
        f.set_modified(std::time::SystemTime::now() - by).unwrap();
    }

    #[test]
    fn only_old_files_of_processes_that_are_gone_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("forge.db");
        // Above Linux's largest pid_max (2^22): no process has it.
        let gone = 4_194_399u32;
        let file = |pid: u32, suffix: &str| {
            let p = dir.path().join(format!(".forge.db.creating-{pid}{suffix}"));
            std::fs::write(&p, b"x").unwrap();
            p
        };
        let old_gone = file(gone, "");
        let old_gone_wal = file(gone, "-wal");
        let fresh_gone = file(gone + 1, "");
        let old_mine = file(std::process::id(), "");
        let other_store = dir.path().join(format!(".forge.dbx.creating-{gone}"));
        std::fs::write(&other_store, b"x").unwrap();
        for p in [&old_gone, &old_gone_wal, &old_mine, &other_store] {
            aged(p, Duration::from_mins(2));
        }
        assert_eq!(remove_abandoned_creations(&store), 2);
        assert!(!old_gone.exists() && !old_gone_wal.exists());
        assert!(
            fresh_gone.exists(),
            "a creation under way must be left alone"
        );
        assert!(
            old_mine.exists(),
            "this process's own creation must be left alone"
        );
        assert!(
            other_store.exists(),
            "another store's files must be left alone"
        );
    }

    #[test]
    fn syncing_a_directory_names_it_when_it_fails() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, b"x").unwrap();
        sync_dir(&file).unwrap();
        let missing = dir.path().join("gone").join("f");
        let e = sync_dir(&missing).unwrap_err();
        assert!(e.to_string().contains("gone"), "{e}");
    }

    #[test]
    fn the_creation_path_is_beside_the_store() {
        let p = creation_path(Path::new("/a/b/forge.redb")).unwrap();
        assert_eq!(p.parent(), Some(Path::new("/a/b")));
        assert_eq!(
            p.file_name().unwrap().to_string_lossy(),
            format!(".forge.redb.creating-{}", std::process::id())
        );
        assert!(creation_path(Path::new("/")).is_none());
    }
}
