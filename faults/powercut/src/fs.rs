//! The FUSE side: kernel requests answered from the shared [`State`].

use std::ffi::OsStr;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, OpenFlags,
    RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry,
    ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow,
};

use crate::lock;
use crate::tree::{self, Body, Data, Node, State};

/// The file system a mount serves.
pub(crate) struct Fs {
    pub(crate) state: Arc<Mutex<State>>,
}

const TTL: Duration = Duration::ZERO;
const BLOCK: u32 = 4096;
const EOPNOTSUPP: i32 = 95;
const O_EXCL: i32 = 0o200;
const O_TRUNC: i32 = 0o1000;

fn err(e: i32) -> Errno {
    Errno::from_i32(e)
}

/// A reply that can carry an error.
trait Fail {
    fn fail(self, e: i32);
}

macro_rules! fail {
    ($($reply:ty),*) => {
        $(impl Fail for $reply {
            fn fail(self, e: i32) {
                self.error(err(e));
            }
        })*
    };
}

fail!(
    ReplyEmpty,
    ReplyEntry,
    ReplyAttr,
    ReplyData,
    ReplyWrite,
    ReplyOpen,
    ReplyCreate
);

/// Answers `reply` with `ok` and the value of `result`, or with its error.
fn answer<R: Fail, T>(reply: R, result: Result<T, i32>, ok: impl FnOnce(R, T)) {
    match result {
        Ok(v) => ok(reply, v),
        Err(e) => reply.fail(e),
    }
}

fn done(reply: ReplyEmpty, result: Result<(), i32>) {
    answer(reply, result, |r, ()| r.ok());
}

/// Answers a request that names a node (lookup, mknod, link, ...) with node `ino`.
fn entry(reply: ReplyEntry, result: Result<(u64, &Node), i32>) {
    answer(reply, result, |r, (ino, n)| {
        r.entry(&TTL, &attr(ino, n), Generation(0));
    });
}

/// Live node `ino` with its number.
fn numbered(s: &State, ino: u64) -> Result<(u64, &Node), i32> {
    s.node(ino).map(|n| (ino, n))
}

/// The contents of file `ino` (`EISDIR` for a directory or a link).
fn file(s: &State, ino: u64) -> Result<&Data, i32> {
    match &s.node(ino)?.body {
        Body::File(d) => Ok(d),
        _ => Err(tree::EISDIR),
    }
}

fn attr(ino: u64, n: &Node) -> FileAttr {
    let (kind, size) = match &n.body {
        Body::File(d) => (FileType::RegularFile, d.size),
        Body::Dir(e) => (FileType::Directory, e.len() as u64),
        Body::Link(t) => (FileType::Symlink, t.as_os_str().len() as u64),
    };
    let allocated = match &n.body {
        Body::File(d) => d.allocated(),
        _ => u64::from(BLOCK),
    };
    FileAttr {
        ino: INodeNo(ino),
        size,
        blocks: allocated.div_ceil(512),
        atime: n.atime,
        mtime: n.mtime,
        ctime: n.ctime,
        crtime: n.ctime,
        kind,
        perm: n.perm,
        nlink: n.nlink,
        uid: n.uid,
        gid: n.gid,
        rdev: 0,
        blksize: BLOCK,
        flags: 0,
    }
}

fn time(t: TimeOrNow) -> SystemTime {
    match t {
        TimeOrNow::SpecificTime(t) => t,
        TimeOrNow::Now => SystemTime::now(),
    }
}

impl Fs {
    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    fn make(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        body: Body,
        mode: u32,
        reply: ReplyEntry,
    ) {
        let mut s = self.state();
        let node = Node::new(body, (mode & 0o7777) as u16, req.uid(), req.gid(), parent.0);
        let made = s.make(parent.0, name, node);
        entry(reply, made.and_then(|ino| numbered(&s, ino)));
    }
}

impl Filesystem for Fs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let s = self.state();
        entry(
            reply,
            s.lookup(parent.0, name).and_then(|i| numbered(&s, i)),
        );
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let s = self.state();
        answer(reply, s.node(ino.0), |r, n| r.attr(&TTL, &attr(ino.0, n)));
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let mut s = self.state();
        if let Some(size) = size {
            if let Err(e) = s.truncate(ino.0, size) {
                return reply.error(err(e));
            }
        }
        let n = match s.node_mut(ino.0) {
            Ok(n) => n,
            Err(e) => return reply.error(err(e)),
        };
        if let Some(m) = mode {
            n.perm = (m & 0o7777) as u16;
        }
        if let Some(u) = uid {
            n.uid = u;
        }
        if let Some(g) = gid {
            n.gid = g;
        }
        if let Some(t) = atime {
            n.atime = time(t);
        }
        if let Some(t) = mtime {
            n.mtime = time(t);
        }
        n.ctime = SystemTime::now();
        reply.attr(&TTL, &attr(ino.0, n));
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let s = self.state();
        let target = s.node(ino.0).and_then(|n| match &n.body {
            Body::Link(t) => Ok(t),
            _ => Err(tree::EINVAL),
        });
        answer(reply, target, |r, t| {
            r.data(t.as_os_str().as_encoded_bytes());
        });
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        if mode & 0o170_000 != 0o100_000 {
            return reply.error(err(EOPNOTSUPP));
        }
        self.make(req, parent, name, Body::File(Data::default()), mode, reply);
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        self.make(
            req,
            parent,
            name,
            Body::Dir(std::collections::BTreeMap::default()),
            mode,
            reply,
        );
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        done(reply, self.state().remove(parent.0, name, false));
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        done(reply, self.state().remove(parent.0, name, true));
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        self.make(
            req,
            parent,
            link_name,
            Body::Link(target.to_owned()),
            0o777,
            reply,
        );
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let no_replace = flags.contains(RenameFlags::RENAME_NOREPLACE);
        let exchange = flags.contains(RenameFlags::RENAME_EXCHANGE);
        let result =
            self.state()
                .rename(parent.0, name, newparent.0, newname, no_replace, exchange);
        done(reply, result);
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let mut s = self.state();
        let linked = s.link(ino.0, newparent.0, newname);
        entry(reply, linked.and_then(|()| numbered(&s, ino.0)));
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let mut s = self.state();
        if let Err(e) = s.node(ino.0) {
            return reply.error(err(e));
        }
        s.opened(ino.0);
        reply.opened(FileHandle(0), FopenFlags::empty());
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: ReplyData,
    ) {
        let s = self.state();
        answer(reply, file(&s, ino.0), |r, d| {
            r.data(&d.read(offset, size as usize));
        });
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: fuser::WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: ReplyWrite,
    ) {
        answer(reply, self.state().write(ino.0, offset, data), |r, ()| {
            r.written(data.len() as u32);
        });
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: fuser::LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.state().released(ino.0);
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        done(reply, self.state().fsync(ino.0));
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let dir = self.state().node(ino.0).and_then(|n| match n.entries() {
            Some(_) => Ok(()),
            None => Err(tree::ENOTDIR),
        });
        answer(reply, dir, |r, ()| {
            r.opened(FileHandle(0), FopenFlags::empty());
        });
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let s = self.state();
        let n = match s.node(ino.0) {
            Ok(n) => n,
            Err(e) => return reply.error(err(e)),
        };
        let Some(entries) = n.entries() else {
            return reply.error(err(tree::ENOTDIR));
        };
        let dots = [
            (ino.0, FileType::Directory, OsStr::new(".")),
            (n.parent, FileType::Directory, OsStr::new("..")),
        ];
        let rest = entries.iter().map(|(name, &i)| {
            let kind = match s.node(i).map(|c| &c.body) {
                Ok(Body::Dir(_)) => FileType::Directory,
                Ok(Body::Link(_)) => FileType::Symlink,
                _ => FileType::RegularFile,
            };
            (i, kind, name.as_os_str())
        });
        for (index, (i, kind, name)) in dots
            .into_iter()
            .chain(rest)
            .enumerate()
            .skip(offset as usize)
        {
            if reply.add(INodeNo(i), index as u64 + 1, kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        done(reply, self.state().sync_dir(ino.0));
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let total: u64 = 1 << 24; // 64 GiB in 4 KiB blocks
        reply.statfs(
            total,
            total / 2,
            total / 2,
            1 << 20,
            1 << 19,
            BLOCK,
            255,
            BLOCK,
        );
    }

    fn setxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _value: &[u8],
        _flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::ENOSYS);
    }

    fn getxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _size: u32,
        reply: ReplyXattr,
    ) {
        reply.error(Errno::ENOSYS);
    }

    fn listxattr(&self, _req: &Request, _ino: INodeNo, _size: u32, reply: ReplyXattr) {
        reply.error(Errno::ENOSYS);
    }

    fn removexattr(&self, _req: &Request, _ino: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS);
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: fuser::AccessFlags, reply: ReplyEmpty) {
        reply.ok();
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let mut s = self.state();
        let ino = match s.lookup(parent.0, name) {
            Ok(_) if flags & O_EXCL != 0 => return reply.error(err(tree::EEXIST)),
            Ok(ino) => {
                if flags & O_TRUNC != 0 {
                    if let Err(e) = s.truncate(ino, 0) {
                        return reply.error(err(e));
                    }
                }
                ino
            }
            Err(_) => {
                let node = Node::new(
                    Body::File(Data::default()),
                    (mode & 0o7777) as u16,
                    req.uid(),
                    req.gid(),
                    parent.0,
                );
                match s.make(parent.0, name, node) {
                    Ok(ino) => ino,
                    Err(e) => return reply.error(err(e)),
                }
            }
        };
        s.opened(ino);
        answer(reply, s.node(ino), |r, n| {
            r.created(
                &TTL,
                &attr(ino, n),
                Generation(0),
                FileHandle(0),
                FopenFlags::empty(),
            );
        });
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let mut s = self.state();
        match mode {
            0 => {
                let size = match file(&s, ino.0) {
                    Ok(d) => d.size,
                    Err(e) => return reply.error(err(e)),
                };
                let end = offset + length;
                if end > size {
                    if let Err(e) = s.truncate(ino.0, end) {
                        return reply.error(err(e));
                    }
                }
                reply.ok();
            }
            1 => reply.ok(),
            _ => reply.error(err(EOPNOTSUPP)),
        }
    }
}
