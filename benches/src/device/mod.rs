//! What the disk wrote: a dedicated filesystem on a loop device, made for a run.
//!
//! An engine's own counters say what it handed the operating system; the device also
//! writes the filesystem's journal and metadata, whole blocks for partial ones, and
//! whatever a server process writes besides its log. [`Device::create`] makes an image
//! file, formats it ([`Filesystem`]), attaches it to a loop device and mounts it; a run
//! puts its files there (servers their data directories: [`servers`]) and
//! [`Device::settle`] syncs the filesystem and reads the sectors the loop device has
//! written (`/sys/block/loopN/stat`, field 7, 512-byte sectors). The difference of two
//! readings is what the disk wrote between them.
//!
//! Making a device needs root, `losetup`, `mount` and the filesystem's `mkfs`;
//! [`Device::unavailable`] says which is missing, in one line.

pub mod servers;

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{anyhow, bail, Context, Result};

/// Size of the image file. It is sparse: only what the filesystem writes takes space
/// on the disk under it.
pub const IMAGE_BYTES: u64 = 8 << 30;

/// Bytes of a sector in `/sys/block/*/stat`.
const SECTOR: u64 = 512;

/// A filesystem a [`Device`] is formatted with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Filesystem {
    /// ext4 with its default features, the journal on (`data=ordered`). Inode tables and
    /// the journal are written when the filesystem is made (`lazy_itable_init=0`,
    /// `lazy_journal_init=0`), not by a kernel thread in the background of a run.
    Ext4,
    /// XFS with its defaults.
    Xfs,
}

impl Filesystem {
    /// Every filesystem, in report order.
    pub const ALL: [Self; 2] = [Self::Ext4, Self::Xfs];

    /// `ext4` / `xfs`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Ext4 => "ext4",
            Self::Xfs => "xfs",
        }
    }

    /// The filesystem named `name`.
    ///
    /// # Errors
    /// When `name` is not `ext4` or `xfs`.
    pub fn parse(name: &str) -> Result<Self> {
        Self::ALL
            .into_iter()
            .find(|f| f.name() == name)
            .ok_or_else(|| anyhow!("unknown filesystem {name:?}: use ext4 or xfs"))
    }

    fn mkfs(self) -> &'static str {
        match self {
            Self::Ext4 => "mkfs.ext4",
            Self::Xfs => "mkfs.xfs",
        }
    }

    fn mkfs_args(self) -> &'static [&'static str] {
        match self {
            Self::Ext4 => &["-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0"],
            Self::Xfs => &["-q", "-f"],
        }
    }
}

impl fmt::Display for Filesystem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A filesystem on a loop device, mounted for the run; unmounted, detached and its
/// image deleted when dropped.
pub struct Device {
    fs: Filesystem,
    /// `loop3`: its counters are in `/sys/block/loop3/stat`; empty until attached.
    loop_name: String,
    /// Where it is mounted (readable by every user, so that a server running as its own
    /// user reaches its data directory).
    mount: PathBuf,
    image: PathBuf,
    mounted: bool,
    /// Holds the mount point.
    _mount_parent: tempfile::TempDir,
}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.describe())
    }
}

impl Device {
    /// Why no device of `fs` can be made here, in one line; `None` when one can.
    pub fn unavailable(fs: Filesystem) -> Option<String> {
        if !is_root() {
            return Some("not running as root (a loop device needs it)".to_owned());
        }
        if !Path::new("/dev/loop-control").exists() {
            return Some("no /dev/loop-control (no loop devices here)".to_owned());
        }
        for tool in ["losetup", "mount", "umount", fs.mkfs()] {
            if find_tool(tool).is_none() {
                return Some(format!("{tool} not found"));
            }
        }
        None
    }

    /// Makes an image of [`IMAGE_BYTES`] in `dir`, formats it with `fs`, attaches it to
    /// a free loop device and mounts it under the system's temporary directory.
    ///
    /// # Errors
    /// When a step fails; the error names the command and what it printed. What was
    /// done before the failure is undone.
    pub fn create(fs: Filesystem, dir: &Path) -> Result<Self> {
        if let Some(why) = Self::unavailable(fs) {
            bail!("cannot make an {fs} device: {why}");
        }
        let image = tempfile::Builder::new()
            .prefix(&format!("forge-device-{fs}-"))
            .suffix(".img")
            .tempfile_in(dir)
            .with_context(|| format!("creating an image file in {}", dir.display()))?;
        image
            .as_file()
            .set_len(IMAGE_BYTES)
            .context("sizing the image file")?;
        let (_, image) = image.keep().context("keeping the image file")?;
        let mount_parent = tempfile::Builder::new()
            .prefix("forge-device-")
            .tempdir()
            .context("creating a mount point")?;
        let mount = mount_parent.path().join("fs");
        let mut device = Self {
            fs,
            loop_name: String::new(),
            mount,
            image,
            mounted: false,
            _mount_parent: mount_parent,
        };
        device.set_up()?;
        Ok(device)
    }

    fn set_up(&mut self) -> Result<()> {
        let mut mkfs = tool(self.fs.mkfs());
        mkfs.args(self.fs.mkfs_args()).arg(&self.image);
        run(&mut mkfs)?;
        let mut losetup = tool("losetup");
        losetup.args(["--find", "--show"]).arg(&self.image);
        let dev = run(&mut losetup)?;
        let dev = dev.trim();
        let name = dev
            .strip_prefix("/dev/")
            .filter(|n| n.starts_with("loop"))
            .ok_or_else(|| anyhow!("losetup printed {dev:?}, not a /dev/loopN"))?;
        name.clone_into(&mut self.loop_name);
        std::fs::create_dir(&self.mount)
            .with_context(|| format!("creating {}", self.mount.display()))?;
        set_mode(self.mount.parent().unwrap_or(&self.mount), 0o755)?;
        run(tool("mount").arg(dev).arg(&self.mount))?;
        self.mounted = true;
        set_mode(&self.mount, 0o755)?;
        Ok(())
    }

    /// The filesystem.
    pub fn filesystem(&self) -> Filesystem {
        self.fs
    }

    /// Where it is mounted.
    pub fn path(&self) -> &Path {
        &self.mount
    }

    /// `ext4 on /dev/loop3 (8 GiB sparse image …)`, for the report.
    pub fn describe(&self) -> String {
        format!(
            "{} on /dev/{} ({} GiB sparse image {}), mounted at {}",
            self.fs,
            self.loop_name,
            IMAGE_BYTES >> 30,
            self.image.display(),
            self.mount.display()
        )
    }

    /// Bytes the device has written since it was attached.
    ///
    /// # Errors
    /// When its counters cannot be read.
    pub fn written(&self) -> Result<u64> {
        let path = format!("/sys/block/{}/stat", self.loop_name);
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
        sectors_written(&text)
            .map(|s| s * SECTOR)
            .with_context(|| format!("{path}: {text:?}"))
    }

    /// Writes out everything the filesystem holds in memory (data, metadata and its
    /// journal: `sync -f` on the mount), then reads [`Device::written`].
    ///
    /// # Errors
    /// When the sync fails or the counters cannot be read.
    pub fn settle(&self) -> Result<u64> {
        run(tool("sync").arg("-f").arg(&self.mount))?;
        self.written()
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        if self.mounted {
            // A server killed a moment ago may still hold a file: retry briefly, then
            // detach lazily so the loop device goes once it is free.
            let unmounted = (0..20).any(|_| {
                let done = run(tool("umount").arg(&self.mount)).is_ok();
                if !done {
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
                done
            });
            if !unmounted {
                let _ = run(tool("umount").arg("-l").arg(&self.mount));
            }
        }
        if !self.loop_name.is_empty() {
            let _ = run(tool("losetup")
                .arg("-d")
                .arg(format!("/dev/{}", self.loop_name)));
        }
        let _ = std::fs::remove_file(&self.image);
    }
}

/// A device made for a benchmark, and the throwaway servers whose data is on it.
pub struct Placement {
    postgres: Option<servers::PgCluster>,
    redis: Option<servers::RedisServer>,
    /// Last: the servers stop before it is unmounted.
    device: Device,
}

impl fmt::Debug for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Placement")
            .field("device", &self.device)
            .field(
                "postgres",
                &self.postgres.as_ref().map(servers::PgCluster::url),
            )
            .field("redis", &self.redis.as_ref().map(servers::RedisServer::url))
            .finish()
    }
}

/// WAL a throwaway Postgres cluster writes and checkpoints before the first run, MiB
/// ([`servers::PgCluster::warm_up`]).
pub const PG_WARM_UP_MIB: u32 = 128;

impl Placement {
    /// Makes a device of `fs` with its image in `dir`, and on it a Postgres cluster
    /// (warmed up) when `postgres`, a Redis server when `redis`. A server that cannot
    /// run here is left out; each line of the notes returned says what was made, or
    /// what was left out and why.
    ///
    /// # Errors
    /// When the device cannot be made, or a server that can run here fails to start.
    pub async fn create(
        fs: Filesystem,
        dir: &Path,
        postgres: bool,
        redis: bool,
    ) -> Result<(Self, Vec<String>)> {
        let device = Device::create(fs, dir)?;
        let mut notes = vec![format!("device: {}", device.describe())];
        let mut placement = Self {
            postgres: None,
            redis: None,
            device,
        };
        if postgres {
            match servers::PgCluster::unavailable() {
                Some(why) => notes.push(format!(
                    "postgres: not on the device ({why}); measured at its URL, engine counters only"
                )),
                None => {
                    let pg = servers::PgCluster::start(&placement.device)?;
                    let segments = pg.warm_up(PG_WARM_UP_MIB).await?;
                    notes.push(format!(
                        "postgres: a throwaway cluster (initdb, server defaults) with its data \
                         directory on the device, at {}; warmed up with {PG_WARM_UP_MIB} MiB of \
                         WAL written and checkpointed, {segments} WAL segments on hand to recycle",
                        pg.url()
                    ));
                    placement.postgres = Some(pg);
                }
            }
        }
        if redis {
            match servers::RedisServer::unavailable() {
                Some(why) => notes.push(format!(
                    "redis: not on the device ({why}); measured at its URL, engine counters only"
                )),
                None => {
                    let server = servers::RedisServer::start(&placement.device).await?;
                    notes.push(format!(
                        "redis: a throwaway redis-server (appendonly yes, appendfsync always, \
                         save \"\") with its directory on the device, at {}",
                        server.url()
                    ));
                    placement.redis = Some(server);
                }
            }
        }
        Ok((placement, notes))
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The URL of the server on the device for `backend` (`postgres`, `redis`), if one
    /// runs there.
    pub fn server_url(&self, backend: &str) -> Option<String> {
        match backend {
            "postgres" => self.postgres.as_ref().map(servers::PgCluster::url),
            "redis" => self.redis.as_ref().map(servers::RedisServer::url),
            _ => None,
        }
    }

    /// A URL of `backend` (`redb`, `sqlite`, `postgres`, `redis`) on the device, its
    /// data named `name` (a file, a schema, a key prefix; `[a-z0-9_]`); `None` when no
    /// server of that backend runs here.
    pub fn url(&self, backend: &str, name: &str) -> Option<String> {
        let on = self.device.path().display();
        match backend {
            "redb" => Some(format!("redb://{on}/{name}.redb")),
            "sqlite" => Some(format!("sqlite://{on}/{name}.sqlite")),
            "postgres" => self
                .server_url("postgres")
                .map(|u| crate::steady::with_param(&u, "schema", name)),
            _ => self
                .server_url(backend)
                .map(|u| crate::steady::with_param(&u, "prefix", name)),
        }
    }

    /// Settles what `backend` holds in memory (Postgres: a `CHECKPOINT` writes the WAL's
    /// changes to the tables and indexes) and then the filesystem
    /// ([`Device::settle`]); the device's bytes written.
    ///
    /// # Errors
    /// When the checkpoint or the sync fails.
    pub async fn settle(&self, backend: &str) -> Result<u64> {
        if backend == "postgres" {
            if let Some(pg) = &self.postgres {
                pg.checkpoint().await?;
            }
        }
        self.device.settle()
    }
}

/// Sectors written, field 7 of a `/sys/block/*/stat` line.
fn sectors_written(stat: &str) -> Result<u64> {
    let field = stat
        .split_whitespace()
        .nth(6)
        .ok_or_else(|| anyhow!("fewer than 7 fields"))?;
    field
        .parse()
        .with_context(|| format!("sectors written {field:?} is not a number"))
}

/// Runs `cmd`; its stdout, or an error naming it with what it printed.
pub(crate) fn run(cmd: &mut Command) -> Result<String> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn set_mode(path: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("setting the mode of {}", path.display()))
}

/// A command for the tool `name`, found as [`find_tool`] finds it.
pub(crate) fn tool(name: &str) -> Command {
    Command::new(find_tool(name).unwrap_or_else(|| PathBuf::from(name)))
}

/// Whether the process runs as root.
pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// `name` in a directory of `PATH` or in `/sbin`, `/usr/sbin` (not on every user's
/// `PATH`).
pub fn find_tool(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin"].map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sectors_written_is_the_seventh_field() {
        let line = "  123  4  5678  9  1011  12  131415  16  0  17  18  0  0  0  0  0  0\n";
        assert_eq!(sectors_written(line).unwrap(), 131_415);
        assert!(sectors_written("1 2 3").is_err());
        assert!(sectors_written("1 2 3 4 5 6 x").is_err());
    }

    #[test]
    fn filesystems_parse_by_name() {
        for fs in Filesystem::ALL {
            assert_eq!(Filesystem::parse(fs.name()).unwrap(), fs);
        }
        let e = Filesystem::parse("btrfs").unwrap_err().to_string();
        assert!(e.contains("btrfs"), "{e}");
    }
}
