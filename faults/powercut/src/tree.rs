//! The file system's contents, twice: what processes see (`live`) and what a disk would
//! hold after a power cut (`durable`). Pure logic, no FUSE.
//! File data is in [`Data`] (`data.rs`).

use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::path::PathBuf;
use std::time::SystemTime;

pub use crate::data::Data;

/// The root directory's inode number.
pub const ROOT: u64 = 1;

/// What a node is.
#[derive(Clone, Debug)]
pub enum Body {
    /// A regular file.
    File(Data),
    /// A directory: its entries by name.
    Dir(BTreeMap<OsString, u64>),
    /// A symbolic link.
    Link(PathBuf),
}

/// An inode.
#[derive(Clone, Debug)]
pub struct Node {
    /// Contents.
    pub body: Body,
    /// Permission bits (and set-id bits).
    pub perm: u16,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Times.
    pub atime: SystemTime,
    /// Last modification.
    pub mtime: SystemTime,
    /// Last change.
    pub ctime: SystemTime,
    /// Links to it (directory entries; a directory counts `.` and its children's `..`).
    pub nlink: u32,
    /// A directory's parent (for `..`).
    pub parent: u64,
}

impl Node {
    /// A new node owned by `uid`:`gid`.
    pub fn new(body: Body, perm: u16, uid: u32, gid: u32, parent: u64) -> Self {
        let now = SystemTime::now();
        let nlink = if matches!(body, Body::Dir(_)) { 2 } else { 1 };
        Self {
            body,
            perm,
            uid,
            gid,
            atime: now,
            mtime: now,
            ctime: now,
            nlink,
            parent,
        }
    }

    /// The entries of a directory.
    pub fn entries(&self) -> Option<&BTreeMap<OsString, u64>> {
        match &self.body {
            Body::Dir(e) => Some(e),
            _ => None,
        }
    }

    /// A node as a disk would hold it when its name became durable before its
    /// contents: no data, no entries.
    fn bare(&self) -> Self {
        let mut n = self.clone();
        n.body = match &self.body {
            Body::File(_) => Body::File(Data::default()),
            Body::Dir(_) => Body::Dir(BTreeMap::new()),
            Body::Link(t) => Body::Link(t.clone()),
        };
        n
    }
}

/// Inodes by number.
#[derive(Clone, Debug)]
pub struct Tree {
    /// Every inode.
    pub nodes: HashMap<u64, Node>,
}

impl Tree {
    fn new() -> Self {
        let mut nodes = HashMap::new();
        nodes.insert(
            ROOT,
            Node::new(Body::Dir(BTreeMap::new()), 0o755, 0, 0, ROOT),
        );
        Self { nodes }
    }

    /// Drops what the root no longer reaches and sets every link count from the
    /// entries that remain.
    fn collect(&mut self) {
        let mut links: HashMap<u64, u32> = HashMap::new();
        let mut stack = vec![ROOT];
        links.insert(ROOT, 2);
        while let Some(ino) = stack.pop() {
            let Some(entries) = self.nodes.get(&ino).and_then(Node::entries) else {
                continue;
            };
            for &child in entries.values() {
                let is_dir = self
                    .nodes
                    .get(&child)
                    .is_some_and(|n| matches!(n.body, Body::Dir(_)));
                let first = !links.contains_key(&child);
                *links.entry(child).or_insert(0) += 1;
                if is_dir {
                    *links.entry(child).or_insert(0) += 1; // its `.`
                    *links.entry(ino).or_insert(0) += 1; // its `..`
                }
                if first {
                    stack.push(child);
                }
            }
        }
        self.nodes.retain(|ino, _| links.contains_key(ino));
        let parents: Vec<(u64, u64)> = self
            .nodes
            .iter()
            .filter_map(|(&ino, n)| n.entries().map(|e| (ino, e)))
            .flat_map(|(ino, e)| e.values().map(move |&c| (c, ino)))
            .collect();
        for (child, parent) in parents {
            if let Some(n) = self.nodes.get_mut(&child) {
                if matches!(n.body, Body::Dir(_)) {
                    n.parent = parent;
                }
            }
        }
        for (ino, n) in &mut self.nodes {
            n.nlink = links.get(ino).copied().unwrap_or(0);
        }
    }
}

/// Counters since the mount.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// `write` calls and the bytes they carried.
    pub writes: u64,
    /// Bytes written by processes.
    pub written_bytes: u64,
    /// File syncs (`fsync`, `fdatasync`).
    pub fsyncs: u64,
    /// Directory syncs.
    pub fsyncdirs: u64,
    /// Power cuts.
    pub cuts: u64,
}

/// What a power cut threw away.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cut {
    /// Bytes written since their file's last sync.
    pub dropped_bytes: u64,
    /// Inodes that differed from their durable state (contents, entries or absence).
    pub dropped_nodes: u64,
    /// The unmount found a process still using the file system and detached it lazily
    /// (that process keeps the old mount; the new one holds only what was durable).
    pub lazy_unmount: bool,
}

/// When a name becomes durable.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Rules {
    /// Strict POSIX: only a sync of its directory makes a directory entry durable
    /// (create, link, rename, unlink, mkdir, rmdir).
    #[default]
    Strict,
    /// As ext4 in its default mode: a file's sync also makes durable the entries that
    /// name it (in directories that are durable themselves).
    Ext4,
}

/// Both trees and the bookkeeping between them.
#[derive(Debug)]
pub struct State {
    /// What processes see.
    pub live: Tree,
    /// What survives a power cut.
    pub durable: Tree,
    next: u64,
    /// Bytes written per inode since its last sync.
    unsynced: HashMap<u64, u64>,
    /// Inodes changed since their last sync (contents, attributes or entries).
    changed: std::collections::HashSet<u64>,
    /// Open handles per inode (an unlinked file stays while open).
    open: HashMap<u64, u32>,
    /// The rules for names.
    pub rules: Rules,
    /// Counters.
    pub stats: Stats,
}

/// An error as an errno value.
pub type Errno = i32;

/// `ENOENT`
pub const ENOENT: Errno = 2;
/// `EEXIST`
pub const EEXIST: Errno = 17;
/// `ENOTDIR`
pub const ENOTDIR: Errno = 20;
/// `EISDIR`
pub const EISDIR: Errno = 21;
/// `EINVAL`
pub const EINVAL: Errno = 22;
/// `ENOTEMPTY`
pub const ENOTEMPTY: Errno = 39;

impl State {
    /// An empty file system.
    pub fn new(rules: Rules) -> Self {
        Self {
            live: Tree::new(),
            durable: Tree::new(),
            next: ROOT + 1,
            unsynced: HashMap::new(),
            changed: std::collections::HashSet::new(),
            open: HashMap::new(),
            rules,
            stats: Stats::default(),
        }
    }

    /// A live node.
    pub fn node(&self, ino: u64) -> Result<&Node, Errno> {
        self.live.nodes.get(&ino).ok_or(ENOENT)
    }

    /// A live node, to change (marked changed).
    pub fn node_mut(&mut self, ino: u64) -> Result<&mut Node, Errno> {
        self.changed.insert(ino);
        self.live.nodes.get_mut(&ino).ok_or(ENOENT)
    }

    /// The entry `name` of directory `parent`.
    pub fn lookup(&self, parent: u64, name: &OsStr) -> Result<u64, Errno> {
        let dir = self.node(parent)?.entries().ok_or(ENOTDIR)?;
        dir.get(name).copied().ok_or(ENOENT)
    }

    /// Makes `node` and names it `name` in `parent`.
    pub fn make(&mut self, parent: u64, name: &OsStr, mut node: Node) -> Result<u64, Errno> {
        let is_dir = matches!(node.body, Body::Dir(_));
        {
            let dir = self.node(parent)?.entries().ok_or(ENOTDIR)?;
            if dir.contains_key(name) {
                return Err(EEXIST);
            }
        }
        let ino = self.next;
        self.next += 1;
        node.parent = parent;
        self.live.nodes.insert(ino, node);
        self.changed.insert(ino);
        let p = self.node_mut(parent)?;
        if let Body::Dir(e) = &mut p.body {
            e.insert(name.to_owned(), ino);
        }
        p.mtime = SystemTime::now();
        p.ctime = p.mtime;
        if is_dir {
            p.nlink += 1;
        }
        Ok(ino)
    }

    /// A new hard link `name` in `parent` to file `ino`.
    pub fn link(&mut self, ino: u64, parent: u64, name: &OsStr) -> Result<(), Errno> {
        if matches!(self.node(ino)?.body, Body::Dir(_)) {
            return Err(EISDIR);
        }
        if self.lookup(parent, name).is_ok() {
            return Err(EEXIST);
        }
        if let Body::Dir(e) = &mut self.node_mut(parent)?.body {
            e.insert(name.to_owned(), ino);
        }
        let n = self.node_mut(ino)?;
        n.nlink += 1;
        n.ctime = SystemTime::now();
        Ok(())
    }

    /// Removes entry `name` of `parent`; `dir` says which kind it must be (rmdir or
    /// unlink).
    pub fn remove(&mut self, parent: u64, name: &OsStr, dir: bool) -> Result<(), Errno> {
        let ino = self.lookup(parent, name)?;
        let is_dir = self.removable(ino, dir)?;
        let p = self.node_mut(parent)?;
        if let Body::Dir(e) = &mut p.body {
            e.remove(name);
        }
        if is_dir {
            p.nlink = p.nlink.saturating_sub(1);
        }
        self.unlinked(ino, is_dir);
        Ok(())
    }

    /// Whether `ino` may lose a name where a node of its kind is expected (`dir`: a
    /// directory): `ENOTDIR` / `EISDIR` when the kinds differ, `ENOTEMPTY` for a directory
    /// with entries. `Ok` says whether it is a directory.
    fn removable(&self, ino: u64, dir: bool) -> Result<bool, Errno> {
        let node = self.node(ino)?;
        let is_dir = matches!(node.body, Body::Dir(_));
        match (dir, is_dir) {
            (true, false) => return Err(ENOTDIR),
            (false, true) => return Err(EISDIR),
            _ => {}
        }
        if is_dir && node.entries().is_some_and(|e| !e.is_empty()) {
            return Err(ENOTEMPTY);
        }
        Ok(is_dir)
    }

    fn unlinked(&mut self, ino: u64, is_dir: bool) {
        let Ok(n) = self.node_mut(ino) else { return };
        n.nlink = if is_dir { 0 } else { n.nlink.saturating_sub(1) };
        n.ctime = SystemTime::now();
        if n.nlink == 0 && !self.open.contains_key(&ino) {
            self.live.nodes.remove(&ino);
        }
    }

    /// `rename(2)`: moves `name` of `parent` to `new_name` of `new_parent`, replacing a
    /// target of the same kind (an empty directory), or refusing one (`no_replace`), or
    /// swapping the two (`exchange`).
    pub fn rename(
        &mut self,
        parent: u64,
        name: &OsStr,
        new_parent: u64,
        new_name: &OsStr,
        no_replace: bool,
        exchange: bool,
    ) -> Result<(), Errno> {
        let ino = self.lookup(parent, name)?;
        let target = self.lookup(new_parent, new_name).ok();
        let is_dir = matches!(self.node(ino)?.body, Body::Dir(_));
        self.node(new_parent)?.entries().ok_or(ENOTDIR)?;
        if exchange {
            let other = target.ok_or(ENOENT)?;
            self.set_entry(parent, name, Some(other))?;
            self.set_entry(new_parent, new_name, Some(ino))?;
            self.reparent(other, parent);
            self.reparent(ino, new_parent);
            return Ok(());
        }
        if target == Some(ino) {
            return Ok(());
        }
        if let Some(t) = target {
            if no_replace {
                return Err(EEXIST);
            }
            let t_dir = self.removable(t, is_dir)?;
            if is_dir && self.is_under(new_parent, ino) {
                return Err(EINVAL);
            }
            self.set_entry(new_parent, new_name, None)?;
            if t_dir {
                let p = self.node_mut(new_parent)?;
                p.nlink = p.nlink.saturating_sub(1);
            }
            self.unlinked(t, t_dir);
        } else if is_dir && self.is_under(new_parent, ino) {
            return Err(EINVAL);
        }
        self.set_entry(parent, name, None)?;
        self.set_entry(new_parent, new_name, Some(ino))?;
        if is_dir && parent != new_parent {
            self.node_mut(parent)?.nlink -= 1;
            self.node_mut(new_parent)?.nlink += 1;
        }
        self.reparent(ino, new_parent);
        Ok(())
    }

    fn is_under(&self, mut dir: u64, ancestor: u64) -> bool {
        loop {
            if dir == ancestor {
                return true;
            }
            match self.live.nodes.get(&dir) {
                Some(n) if dir != ROOT => dir = n.parent,
                _ => return false,
            }
        }
    }

    fn set_entry(&mut self, dir: u64, name: &OsStr, ino: Option<u64>) -> Result<(), Errno> {
        let d = self.node_mut(dir)?;
        d.mtime = SystemTime::now();
        d.ctime = d.mtime;
        if let Body::Dir(e) = &mut d.body {
            match ino {
                Some(i) => e.insert(name.to_owned(), i),
                None => e.remove(name),
            };
        }
        Ok(())
    }

    fn reparent(&mut self, ino: u64, parent: u64) {
        if let Some(n) = self.live.nodes.get_mut(&ino) {
            n.ctime = SystemTime::now();
            if matches!(n.body, Body::Dir(_)) {
                n.parent = parent;
            }
        }
    }

    /// Writes to file `ino`.
    pub fn write(&mut self, ino: u64, offset: u64, bytes: &[u8]) -> Result<(), Errno> {
        let n = self.node_mut(ino)?;
        let Body::File(data) = &mut n.body else {
            return Err(EISDIR);
        };
        data.write(offset, bytes);
        n.mtime = SystemTime::now();
        n.ctime = n.mtime;
        *self.unsynced.entry(ino).or_insert(0) += bytes.len() as u64;
        self.stats.writes += 1;
        self.stats.written_bytes += bytes.len() as u64;
        Ok(())
    }

    /// Sets a file's length.
    pub fn truncate(&mut self, ino: u64, size: u64) -> Result<(), Errno> {
        let n = self.node_mut(ino)?;
        let Body::File(data) = &mut n.body else {
            return Err(EISDIR);
        };
        data.truncate(size);
        n.mtime = SystemTime::now();
        n.ctime = n.mtime;
        Ok(())
    }

    /// A handle opened on `ino`.
    pub fn opened(&mut self, ino: u64) {
        *self.open.entry(ino).or_insert(0) += 1;
    }

    /// A handle on `ino` closed: an unlinked file goes with its last handle.
    pub fn released(&mut self, ino: u64) {
        if let Some(c) = self.open.get_mut(&ino) {
            *c -= 1;
            if *c == 0 {
                self.open.remove(&ino);
                if self.live.nodes.get(&ino).is_some_and(|n| n.nlink == 0) {
                    self.live.nodes.remove(&ino);
                }
            }
        }
    }

    /// `fsync` of `ino`: its contents and attributes become durable; for a directory,
    /// its entries (as [`State::sync_dir`]).
    pub fn fsync(&mut self, ino: u64) -> Result<(), Errno> {
        let node = self.node(ino)?.clone();
        if matches!(node.body, Body::Dir(_)) {
            return self.sync_dir(ino);
        }
        self.stats.fsyncs += 1;
        self.durable.nodes.insert(ino, node);
        self.unsynced.remove(&ino);
        self.changed.remove(&ino);
        if self.rules == Rules::Ext4 {
            let names: Vec<(u64, OsString)> = self
                .live
                .nodes
                .iter()
                .filter_map(|(&d, n)| n.entries().map(|e| (d, e)))
                .flat_map(|(d, e)| {
                    e.iter()
                        .filter(|(_, &i)| i == ino)
                        .map(move |(name, _)| (d, name.clone()))
                })
                .collect();
            for (dir, name) in names {
                if let Some(Body::Dir(e)) = self.durable.nodes.get_mut(&dir).map(|n| &mut n.body) {
                    e.insert(name, ino);
                }
            }
        }
        Ok(())
    }

    /// A directory's sync: its entries become durable as they are now. A node a durable
    /// entry names for the first time is durable without contents (a file never synced
    /// is empty after a cut; a directory never synced has no entries).
    pub fn sync_dir(&mut self, ino: u64) -> Result<(), Errno> {
        self.stats.fsyncdirs += 1;
        let node = self.node(ino)?.clone();
        let entries = node.entries().ok_or(ENOTDIR)?.clone();
        for &child in entries.values() {
            if !self.durable.nodes.contains_key(&child) {
                if let Some(c) = self.live.nodes.get(&child) {
                    self.durable.nodes.insert(child, c.bare());
                }
            }
        }
        match self.durable.nodes.get_mut(&ino) {
            Some(d) => {
                d.body = Body::Dir(entries);
                d.perm = node.perm;
                d.uid = node.uid;
                d.gid = node.gid;
            }
            None => {
                self.durable.nodes.insert(ino, node);
            }
        }
        self.changed.remove(&ino);
        Ok(())
    }

    /// `sync(1)`: everything becomes durable.
    pub fn sync_all(&mut self) {
        self.durable = self.live.clone();
        self.unsynced.clear();
        self.changed.clear();
    }

    /// The power goes: what processes see becomes what was durable. Open handles are
    /// gone with the processes that held them.
    pub fn cut(&mut self) -> Cut {
        let dropped_bytes = self.unsynced.values().sum();
        let dropped_nodes = self.changed.len() as u64;
        self.durable.collect();
        self.live = self.durable.clone();
        self.unsynced.clear();
        self.changed.clear();
        self.open.clear();
        self.stats.cuts += 1;
        Cut {
            dropped_bytes,
            dropped_nodes,
            lazy_unmount: false,
        }
    }
}

#[cfg(test)]
mod tests;
