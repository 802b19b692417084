//! A FUSE file system for tests that keeps every write in memory, remembers what has
//! been synced, and on a simulated power cut ([`Mounted::cut`]) forgets the rest: file
//! bytes written since the file's last `fsync`, and (under [`Rules::Strict`]) directory
//! entries created, renamed or removed since their directory's last `fsync`.
//!
//! A cut unmounts and mounts again, so the kernel's page cache for the mount goes too:
//! a process that reads after the cut sees only what a disk would have held.
//!
//! Mounting needs `/dev/fuse` and `fusermount3` (Debian's `fuse3`).

mod data;
mod fs;
mod tree;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use fuser::{BackgroundSession, Config, MountOption, SessionACL};

use fs::Fs;
use tree::State;
pub use tree::{Cut, Rules, Stats};

/// The power-cut file system, mounted at a directory.
pub struct Mounted {
    /// The state the current mount serves. A cut gives the next mount a state of its
    /// own, so a process that outlived the cut (a lazy unmount) writes only into the
    /// state it had.
    state: Mutex<Arc<Mutex<State>>>,
    path: PathBuf,
    session: Mutex<Option<BackgroundSession>>,
}

impl std::fmt::Debug for Mounted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mounted")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

pub(crate) fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn spawn(state: Arc<Mutex<State>>, path: &Path) -> io::Result<BackgroundSession> {
    let mut cfg = Config::default();
    cfg.mount_options = vec![
        MountOption::FSName("powercut".into()),
        MountOption::DefaultPermissions,
    ];
    cfg.acl = SessionACL::All;
    fuser::spawn_mount(Fs { state }, path, &cfg)
}

impl Mounted {
    /// Mounts an empty file system at `path` (an existing, empty directory).
    pub fn mount(path: &Path, rules: Rules) -> io::Result<Self> {
        let state = Arc::new(Mutex::new(State::new(rules)));
        let session = spawn(Arc::clone(&state), path)?;
        Ok(Self {
            state: Mutex::new(state),
            path: path.to_owned(),
            session: Mutex::new(Some(session)),
        })
    }

    /// The mount point.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The power goes: unmounts, drops what was not durable, and mounts the durable
    /// state again. Every process using the mount should be gone; one that is not
    /// (the unmount is then lazy, and [`Cut::lazy_unmount`] says so) keeps the old
    /// mount and can no longer change what the new one holds.
    pub fn cut(&self) -> io::Result<Cut> {
        let mut session = self
            .session
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut lazy_unmount = false;
        if let Some(s) = session.take() {
            lazy_unmount = unmount(s, &self.path)?;
        }
        let mut current = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (cut, after) = {
            let mut old = lock(&current);
            let rules = old.rules;
            let cut = old.cut();
            (cut, std::mem::replace(&mut *old, State::new(rules)))
        };
        *current = Arc::new(Mutex::new(after));
        *session = Some(spawn(Arc::clone(&current), &self.path)?);
        Ok(Cut {
            lazy_unmount,
            ..cut
        })
    }

    fn current(&self) -> Arc<Mutex<State>> {
        Arc::clone(
            &self
                .state
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    /// `sync(1)` for this file system only: everything written becomes durable.
    pub fn sync(&self) {
        lock(&self.current()).sync_all();
    }

    /// Counters since the mount.
    pub fn stats(&self) -> Stats {
        lock(&self.current()).stats
    }
}

/// Unmounts; `Ok(true)` when the mount was busy (a process still had a file open) and
/// was detached lazily instead.
fn unmount(session: BackgroundSession, path: &Path) -> io::Result<bool> {
    match session.umount_and_join() {
        Ok(()) => Ok(false),
        Err(first) => {
            let status = std::process::Command::new("fusermount3")
                .arg("-u")
                .arg("-z")
                .arg(path)
                .status();
            match status {
                Ok(s) if s.success() => Ok(true),
                _ => Err(io::Error::other(format!(
                    "unmounting {}: {first}",
                    path.display()
                ))),
            }
        }
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let session = self
            .session
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(s) = session.take() {
            let _ = unmount(s, &self.path);
        }
    }
}
