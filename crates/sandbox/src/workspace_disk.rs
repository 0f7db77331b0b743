//! A workspace on its own file system, so the kernel holds the disk quota.
//!
//! Polling free space lets code write past its quota between two polls
//! (`fallocate` puts gigabytes on disk in milliseconds) and cannot see
//! files that were unlinked while still mapped. A file system of its own
//! can: each tenant's workspace is an ext4 image (a sparse file, costing
//! the host only what is written) mounted through a loop device, and every
//! write past its free space fails in the writer with `ENOSPC`, at once.
//!
//! It is mounted with `discard`, so what code deletes is given back to the
//! host (the loop device punches the blocks out of the image file): the
//! image costs the host what the workspace holds now, not the most it
//! ever held.
//!
//! The image holds two things, side by side at its root: `files/`, bound
//! onto the workspace path (the only part a sandbox or the tools see), and
//! `reserve`, a root-owned file allocated (never written) to take up the
//! space an execution may not use. Before an execution runs, the reserve
//! is sized so that the free space is exactly that execution's quota
//! (`sandbox.disk_quota_mb`, or what is left of `quotas.workspace_bytes`,
//! or what the host disk can spare); executions of one tenant that run at
//! the same time share it, so none of them can add more than its quota.
//! Resizing is by the difference, so it costs little when little changed.
//!
//! This needs root (mounting) and `mkfs.ext4`; where either is missing the
//! caller falls back to the disk watchdog and says so. Mounts are made in
//! the host's mount namespace and outlive the server, so the files code
//! wrote stay where the host's tools (and a person) look for them after it
//! ends; the next server on the same data directory uses them as they are.
//! A reboot undoes them, and the next start mounts the image again.

use std::fs::File;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

/// The image's own overhead (journal, bitmaps) on top of the space asked
/// for, so a quota of N bytes leaves N bytes for files.
const IMAGE_MARGIN: u64 = 64 << 20;
/// Images are never smaller than this: ext4 needs room for its metadata.
const MIN_IMAGE: u64 = 128 << 20;

/// Why the workspace could not be put on its own file system.
#[derive(Debug, thiserror::Error)]
pub enum DiskError {
    #[error("the workspace's own file system needs root (to mount it); the server runs as uid {0}")]
    NotRoot(u32),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Command(String),
}

impl DiskError {
    fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        DiskError::Io {
            what: what.into(),
            source,
        }
    }
}

/// A tenant's workspace on its own mounted image; see the module docs.
#[derive(Debug)]
pub struct WorkspaceDisk {
    /// Where the image is mounted (outside anything a sandbox sees).
    fs_dir: PathBuf,
    /// Free bytes kept between executions, for the host's own writes (the
    /// tools', a node's copy of the shared store).
    rest_floor: u64,
    /// Executions running on the image now, and the reserve's file.
    state: Mutex<Reserve>,
}

#[derive(Debug)]
struct Reserve {
    running: usize,
    file: File,
}

/// The space one execution holds; dropping it ends the execution's claim
/// (and, for the last one, sizes the reserve for the tools' writes).
#[derive(Debug)]
pub struct DiskHold {
    disk: Arc<WorkspaceDisk>,
    cap: u64,
}

impl Drop for DiskHold {
    fn drop(&mut self) {
        self.disk.leave(self.cap);
    }
}

impl WorkspaceDisk {
    /// Puts `workspace` on an image at `image` of at least `size` bytes of
    /// room for files, mounted at `fs_dir`, its files owned by `owner`.
    /// What is already in `workspace` is moved onto the image first.
    /// `rest_floor` is the free space kept between executions;
    /// `write_rate` the most bytes a second written to the image (0: no
    /// limit).
    pub fn attach(
        image: &Path,
        fs_dir: &Path,
        workspace: &Path,
        size: u64,
        owner: Option<(u32, u32)>,
        rest_floor: u64,
        write_rate: u64,
    ) -> Result<Self, DiskError> {
        let uid = nix::unistd::geteuid();
        if !uid.is_root() {
            return Err(DiskError::NotRoot(uid.as_raw()));
        }
        if !in_initial_user_namespace() {
            return Err(DiskError::Command(
                "the server is root only inside a user namespace, where ext4 cannot be mounted"
                    .into(),
            ));
        }
        for dir in [fs_dir, workspace] {
            std::fs::create_dir_all(dir)
                .map_err(|e| DiskError::io(format!("cannot create {}", dir.display()), e))?;
        }
        // The image and its mount point are the server's alone.
        std::fs::set_permissions(fs_dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| DiskError::io(format!("cannot restrict {}", fs_dir.display()), e))?;
        let size = size.saturating_add(IMAGE_MARGIN).max(MIN_IMAGE);
        let mounted_fs = if is_mount_point(fs_dir)? {
            // Mounted by an earlier server (mounts outlive it): used as is.
            tracing::debug!(path = %fs_dir.display(), "the workspace image is mounted already");
            false
        } else {
            let existed = image.exists();
            let grown = if existed {
                grow_image(image, size)?
            } else {
                make_image(image, size)?;
                false
            };
            let mounted = run(Command::new("mount")
                .args([
                    "-t",
                    "ext4",
                    "-o",
                    "loop,nosuid,nodev,noinit_itable,discard",
                ])
                .arg(image)
                .arg(fs_dir));
            if let Err(e) = mounted {
                // An image made just now holds nothing: leave no trace of it.
                if !existed {
                    let _ = std::fs::remove_file(image);
                }
                return Err(e);
            }
            if grown {
                // A larger quota than when the image was made.
                let device = loop_device(fs_dir)?;
                if let Err(e) = run(Command::new("resize2fs").arg(device)) {
                    tracing::warn!(error = %e, "the workspace image could not grow; it keeps its size");
                }
            }
            true
        };
        let device = device_of(fs_dir);
        if let Err(e) = device
            .as_ref()
            .map_err(ToString::to_string)
            .and_then(|(device, numbers)| pace_writes(device, *numbers).map_err(|e| e.to_string()))
        {
            tracing::warn!(error = %e, path = %fs_dir.display(), "this workspace's writes are not paced: a tenant filling its disk can slow every tenant's writes");
        }
        let files = fs_dir.join("files");
        let reserve_path = fs_dir.join("reserve");
        let setup = (|| {
            std::fs::create_dir_all(&files)
                .map_err(|e| DiskError::io(format!("cannot create {}", files.display()), e))?;
            for (dir, mode) in [(fs_dir, 0o700), (files.as_path(), 0o700)] {
                std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))
                    .map_err(|e| DiskError::io(format!("cannot restrict {}", dir.display()), e))?;
            }
            if let Some((uid, gid)) = owner {
                std::os::unix::fs::lchown(&files, Some(uid), Some(gid))
                    .map_err(|e| DiskError::io("cannot hand the workspace to the sandbox", e))?;
            }
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&reserve_path)
                .map_err(|e| DiskError::io("cannot open the disk reserve", e))?;
            if !is_mount_point(workspace)? {
                move_into(workspace, &files)?;
                nix::mount::mount(
                    Some(&files),
                    workspace,
                    None::<&str>,
                    nix::mount::MsFlags::MS_BIND,
                    None::<&str>,
                )
                .map_err(|e| {
                    DiskError::io(
                        format!(
                            "cannot bind the workspace image onto {}",
                            workspace.display()
                        ),
                        e.into(),
                    )
                })?;
            }
            Ok(file)
        })();
        let file = match setup {
            Ok(done) => done,
            Err(e) => {
                if mounted_fs {
                    let _ = nix::mount::umount2(fs_dir, nix::mount::MntFlags::MNT_DETACH);
                }
                return Err(e);
            }
        };
        // Once the image is here to stay: a rule for a device given back
        // would hold whoever gets its number next.
        if let Ok((_, numbers)) = device {
            limit_rate(fs_dir, numbers, write_rate);
        }
        let disk = Self {
            fs_dir: fs_dir.to_path_buf(),
            rest_floor,
            state: Mutex::new(Reserve { running: 0, file }),
        };
        // Nothing runs yet: keep only the rest floor free.
        if let Ok(mut state) = disk.state.lock() {
            disk.resize(&mut state, rest_floor);
        }
        Ok(disk)
    }

    /// Claims free space for one execution: when no other execution of
    /// this workspace is running, the reserve is resized so that exactly
    /// `cap` bytes are free; otherwise the running ones' space is shared.
    /// Blocks for as long as the resize takes (proportional to the change).
    pub fn hold(self: &Arc<Self>, cap: u64) -> DiskHold {
        if let Ok(mut state) = self.state.lock() {
            if state.running == 0 {
                self.resize(&mut state, cap);
            }
            state.running += 1;
        }
        DiskHold {
            disk: self.clone(),
            cap,
        }
    }

    /// Like [`WorkspaceDisk::hold`], with the free space kept between
    /// executions: for the host's own writes.
    pub fn hold_rest(self: &Arc<Self>) -> DiskHold {
        self.hold(self.rest_floor)
    }

    fn leave(&self, cap: u64) {
        if let Ok(mut state) = self.state.lock() {
            state.running = state.running.saturating_sub(1);
            if state.running == 0 {
                self.resize(&mut state, cap.max(self.rest_floor));
            }
        }
    }

    /// The file system the image's writes land on (for the host's own
    /// free-space floor).
    pub fn host_dir(&self) -> &Path {
        self.fs_dir.parent().unwrap_or(&self.fs_dir)
    }

    /// Sizes the reserve so that `cap` bytes are free (or as close as the
    /// space allows). Failure leaves the reserve as it was: the image
    /// still bounds the tenant, and the error is logged.
    fn resize(&self, state: &mut Reserve, cap: u64) {
        let Some((free, _)) = crate::free_disk(&self.fs_dir) else {
            return;
        };
        let Ok(meta) = state.file.metadata() else {
            return;
        };
        // Allocated bytes: the reserve is allocated, never written.
        let held = meta.blocks() * 512;
        let want = (free + held).saturating_sub(cap);
        let result = if want < held {
            state.file.set_len(want)
        } else if want > held {
            let len = i64::try_from(want).unwrap_or(i64::MAX);
            nix::fcntl::fallocate(&state.file, nix::fcntl::FallocateFlags::empty(), 0, len)
                .map_err(std::io::Error::from)
        } else {
            Ok(())
        };
        if let Err(e) = result {
            tracing::warn!(error = %e, want, cap, "could not size the workspace's disk reserve");
        }
    }
}

/// Whether we run in the host's own user namespace (where root may mount
/// block devices), by its identity map.
fn in_initial_user_namespace() -> bool {
    std::fs::read_to_string("/proc/self/uid_map")
        .is_ok_and(|map| map.split_whitespace().collect::<Vec<_>>() == ["0", "0", "4294967295"])
}

/// Whether `path` is the root of a mount (its device differs from its
/// parent's).
pub fn is_mount_point(path: &Path) -> Result<bool, DiskError> {
    let own = std::fs::symlink_metadata(path)
        .map_err(|e| DiskError::io(format!("cannot read {}", path.display()), e))?;
    let parent = path.parent().unwrap_or(Path::new("/"));
    let up = std::fs::metadata(parent)
        .map_err(|e| DiskError::io(format!("cannot read {}", parent.display()), e))?;
    Ok(own.dev() != up.dev())
}

/// A sparse image of `size` bytes with an empty ext4 on it.
fn make_image(image: &Path, size: u64) -> Result<(), DiskError> {
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(image)
        .map_err(|e| DiskError::io(format!("cannot create {}", image.display()), e))?;
    file.set_len(size)
        .map_err(|e| DiskError::io(format!("cannot size {}", image.display()), e))?;
    drop(file);
    let made = run(Command::new("mkfs.ext4")
        // No blocks kept for root (the server is root, the space is the
        // tenant's), lazy initialisation (the image stays sparse), and a
        // small journal.
        .args([
            "-q",
            "-F",
            "-m",
            "0",
            "-L",
            "cem-workspace",
            "-J",
            "size=16",
        ])
        .args(["-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard"])
        // One inode per 64 KiB, from 64 Ki (small images hold many small
        // files: a checkout, a package tree) to 4 Mi (each inode costs the
        // host its table's share once written; more made a 250 GB image
        // cost 23 MB instead of 7).
        .args(["-N", &(size / 65536).clamp(1 << 16, 1 << 22).to_string()])
        .arg(image));
    if made.is_err() {
        let _ = std::fs::remove_file(image);
    }
    made
}

/// Makes the image file at least `size` bytes (its file system is grown
/// to match once mounted); whether it grew.
fn grow_image(image: &Path, size: u64) -> Result<bool, DiskError> {
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(image)
        .map_err(|e| DiskError::io(format!("cannot open {}", image.display()), e))?;
    let len = file
        .metadata()
        .map_err(|e| DiskError::io(format!("cannot read {}", image.display()), e))?
        .len();
    if len >= size {
        return Ok(false);
    }
    file.set_len(size)
        .map_err(|e| DiskError::io(format!("cannot grow {}", image.display()), e))?;
    Ok(true)
}

/// Dirty pages one workspace may hold before its writers wait for them to
/// reach the disk.
pub const DIRTY_LIMIT: u64 = 4 << 20;

/// Keeps one workspace's writes from holding up every other's. Without
/// this, code filling its quota as fast as it can left hundreds of
/// megabytes of dirty pages twice over (in the image's file system, then
/// in the host's, for the image file), and every other tenant's write,
/// whose `fsync` the tools wait for, queued behind them: in a soak with
/// two tenants doing nothing else, the others' workspace writes took 748
/// ms at p99 (16 ms alone). Two kernel settings of the workspace's loop
/// device bound that: its writeback limit ([`DIRTY_LIMIT`], strict, so a
/// writer past it waits for its own pages, not everyone's), and direct I/O
/// to the image file (no second copy in the host's page cache).
fn pace_writes(device: &Path, (major, minor): (u64, u64)) -> Result<(), DiskError> {
    let bdi = PathBuf::from(format!("/sys/class/bdi/{major}:{minor}"));
    let set = |name: &str, value: String| {
        std::fs::write(bdi.join(name), value)
            .map_err(|e| DiskError::io(format!("cannot set {}/{name}", bdi.display()), e))
    };
    // Linux 6.2 and later take bytes; before, a share of the host's limit.
    if bdi.join("max_bytes").exists() {
        set("max_bytes", DIRTY_LIMIT.to_string())?;
    } else {
        set("max_ratio", "1".into())?;
    }
    set("strict_limit", "1".into())?;
    run(Command::new("losetup").arg("--direct-io=on").arg(device))
}

/// The loop device mounted at `fs_dir` and its device numbers.
fn device_of(fs_dir: &Path) -> Result<(PathBuf, (u64, u64)), DiskError> {
    use std::os::unix::fs::FileTypeExt;
    let device = loop_device(fs_dir)?;
    let meta = std::fs::metadata(&device)
        .map_err(|e| DiskError::io(format!("cannot stat {}", device.display()), e))?;
    if !meta.file_type().is_block_device() {
        return Err(DiskError::Command(format!(
            "{} is not a block device",
            device.display()
        )));
    }
    let rdev = meta.rdev();
    let numbers = (nix::sys::stat::major(rdev), nix::sys::stat::minor(rdev));
    Ok((device, numbers))
}

/// Sets the device's write-rate rule (see `disk_throttle`). A host that
/// cannot have one is said once per server (every tenant misses it for
/// the same reason); a rule that cannot be written, for each workspace.
fn limit_rate(fs_dir: &Path, numbers: (u64, u64), write_rate: u64) {
    use crate::disk_throttle::{ThrottleError, limit_writes};
    static UNSUPPORTED: std::sync::Once = std::sync::Once::new();
    match limit_writes(numbers, write_rate) {
        Ok(()) => {}
        Err(ThrottleError::Unsupported(why)) => UNSUPPORTED.call_once(|| {
            tracing::warn!(error = %why, "tenants' workspace writes are not rate-limited (sandbox.tenant_disk_mb_per_second): a tenant filling its disk can slow every tenant's writes");
        }),
        Err(e) if write_rate == 0 => {
            tracing::warn!(error = %e, path = %fs_dir.display(), "could not clear a write-rate rule left on this workspace's loop device: its writes may still be held to an old rate");
        }
        Err(e) => {
            tracing::warn!(error = %e, path = %fs_dir.display(), "this workspace's writes are not rate-limited (sandbox.tenant_disk_mb_per_second): it can slow every tenant's writes");
        }
    }
}

/// The loop device mounted at `dir`, from our mount table.
fn loop_device(dir: &Path) -> Result<PathBuf, DiskError> {
    let table = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| DiskError::io("cannot read the mount table", e))?;
    let want = dir.to_string_lossy();
    table
        .lines()
        .rev()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let point = left.split(' ').nth(4)?;
            let source = right.split(' ').nth(1)?;
            (point == want).then(|| PathBuf::from(source))
        })
        .next()
        .ok_or_else(|| DiskError::Command(format!("no device is mounted at {want}")))
}

/// Moves what `from` holds into `to` (another file system): copied with
/// owners, modes and times, then removed from `from`.
fn move_into(from: &Path, to: &Path) -> Result<(), DiskError> {
    let entries: Vec<_> = std::fs::read_dir(from)
        .map_err(|e| DiskError::io(format!("cannot read {}", from.display()), e))?
        .filter_map(Result::ok)
        .collect();
    if entries.is_empty() {
        return Ok(());
    }
    tracing::info!(
        from = %from.display(),
        "moving the workspace's files onto its own file system"
    );
    let mut source = from.as_os_str().to_owned();
    source.push("/.");
    run(Command::new("cp")
        .args(["-a", "--reflink=never"])
        .arg(source)
        .arg(to))?;
    for entry in entries {
        let path = entry.path();
        let gone = if entry.file_type().is_ok_and(|t| t.is_dir()) {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        gone.map_err(|e| DiskError::io(format!("cannot remove {}", path.display()), e))?;
    }
    Ok(())
}

/// Runs a helper program, its failure an error with what it said.
fn run(command: &mut Command) -> Result<(), DiskError> {
    let name = command.get_program().to_string_lossy().into_owned();
    let out = command
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| DiskError::io(format!("cannot run {name}"), e))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(DiskError::Command(format!(
            "{name} failed ({}): {}",
            out.status,
            crate::last_line(&String::from_utf8_lossy(&out.stderr))
        )))
    }
}
