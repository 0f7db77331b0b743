//! The sandbox's file system: a tmpfs root with only what the program
//! needs, entered with pivot_root.

use std::fs;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};

use nix::fcntl::{OFlag, open};
use nix::mount::{MntFlags, MsFlags, mount, umount2};
use nix::sys::stat::Mode;
use nix::sys::statvfs::{FsFlags, fstatvfs};

use crate::{SandboxError, Spec, Step};

/// Where the new root is assembled (a tmpfs mounted over it, in our own
/// mount namespace only, so the host's directory is untouched).
const STAGING: &str = "/tmp";
/// Where root stages bind sources before dropping privileges.
const STAGE: &str = "/mnt";
/// Devices bound from the host.
const DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom"];

/// Where a bind comes from (host path, or its staged copy) and goes to.
pub struct Planned {
    from: PathBuf,
    target: PathBuf,
    writable: bool,
}

/// A bind source, opened with O_PATH in the final mount namespace.
pub struct Source {
    fd: OwnedFd,
    target: PathBuf,
    is_dir: bool,
    writable: bool,
}

/// Every bind of `spec`: read-only binds, devices, the workspace.
fn plan(spec: &Spec) -> Vec<Planned> {
    let mut out: Vec<Planned> = spec
        .ro_binds
        .iter()
        .map(|b| Planned {
            from: b.source.clone(),
            target: b.target.clone(),
            writable: false,
        })
        .collect();
    for dev in DEVICES {
        let path = Path::new("/dev").join(dev);
        out.push(Planned {
            from: path.clone(),
            target: path,
            writable: true,
        });
    }
    if let Some(ws) = &spec.workspace {
        out.push(Planned {
            from: ws.clone(),
            target: spec.workspace_target.clone(),
            writable: true,
        });
    }
    out
}

/// The binds as they are, for a launcher that is not root.
pub fn unstaged_sources(spec: &Spec) -> Vec<Planned> {
    plan(spec)
}

/// As root, in a private mount namespace: binds every source under a
/// tmpfs at [`STAGE`] that any uid can traverse, and returns the staged
/// paths. The user namespace made next copies these mounts.
pub fn stage_sources(spec: &Spec) -> Result<Vec<Planned>, SandboxError> {
    let planned = plan(spec);
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS)
        .step("unshare staging mount namespace")?;
    make_private()?;
    // Open first: the staging tmpfs may cover a source (a workspace in /tmp).
    let sources = open_sources(&planned)?;
    let stage = if Path::new(STAGE).is_dir() {
        Path::new(STAGE)
    } else {
        Path::new(STAGING)
    };
    tmpfs(stage, "mode=0755,size=1m")?;
    let mut out = Vec::new();
    for (i, (p, source)) in planned.into_iter().zip(sources).enumerate() {
        let at = stage.join(i.to_string());
        let is_dir = source.is_dir;
        if is_dir {
            mkdir(&at, 0o755)?;
        } else {
            fs::write(&at, b"").step(format!("create {}", at.display()))?;
        }
        let flags = MsFlags::MS_BIND
            | if is_dir {
                MsFlags::MS_REC
            } else {
                MsFlags::empty()
            };
        mount(
            Some(&proc_fd_path(&source.fd)),
            &at,
            None::<&str>,
            flags,
            None::<&str>,
        )
        .step(format!("stage {}", p.from.display()))?;
        out.push(Planned { from: at, ..p });
    }
    Ok(out)
}

/// Opens every planned source with O_PATH.
pub fn open_sources(planned: &[Planned]) -> Result<Vec<Source>, SandboxError> {
    planned
        .iter()
        .map(|p| {
            let fd = open(&p.from, OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty()).step(
                format!("open {} (for {})", p.from.display(), p.target.display()),
            )?;
            // The type of what was opened, not of what the path names now.
            let st = nix::sys::stat::fstat(&fd).step(format!("stat {}", p.from.display()))?;
            let is_dir = st.st_mode & libc::S_IFMT == libc::S_IFDIR;
            Ok(Source {
                fd,
                target: p.target.clone(),
                is_dir,
                writable: p.writable,
            })
        })
        .collect()
}

/// Builds the root and pivots into it. Runs as pid 1 of the new namespaces.
pub fn build_root(
    spec: &Spec,
    sources: Vec<Source>,
    uid: u32,
    gid: u32,
) -> Result<(), SandboxError> {
    make_private()?;
    let root = Path::new(STAGING);
    tmpfs(root, "mode=0755,size=16m")?;

    for dir in ["proc", "dev", "tmp", "etc", "run"] {
        mkdir(&root.join(dir), 0o755)?;
    }
    for (link, target) in &spec.symlinks {
        let at = inside(root, link);
        if let Some(parent) = at.parent() {
            mkdir(parent, 0o755)?;
        }
        symlink(target, &at).step(format!("symlink {}", link.display()))?;
    }
    // The private /tmp first: an interpreter or virtualenv that lives under
    // the host's /tmp is bound on top of it, not hidden beneath it.
    tmpfs(
        &root.join("tmp"),
        &format!("mode=1777,size={}m", spec.limits.tmp_mb.max(1)),
    )?;
    for source in &sources {
        bind(root, source)?;
    }

    mount(
        Some("proc"),
        &root.join("proc"),
        Some("proc"),
        nosuid_nodev() | MsFlags::MS_NOEXEC,
        None::<&str>,
    )
    .step("mount /proc")?;
    // /proc/sys and friends stay read-only even if some other layer failed.
    for p in ["proc/sys", "proc/sysrq-trigger", "proc/irq", "proc/bus"] {
        let path = root.join(p);
        if path.exists() {
            mount(
                Some(&path),
                &path,
                None::<&str>,
                MsFlags::MS_BIND | MsFlags::MS_REC,
                None::<&str>,
            )
            .step(format!("bind /{p}"))?;
            remount_ro(&path, nosuid_nodev() | MsFlags::MS_NOEXEC)?;
        }
    }

    let tmp_opts = format!("mode=1777,size={}m", spec.limits.tmp_mb.max(1));
    mkdir(&root.join("dev/shm"), 0o755)?;
    tmpfs(&root.join("dev/shm"), &tmp_opts)?;
    for (name, target) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        symlink(target, root.join("dev").join(name)).step(format!("symlink /dev/{name}"))?;
    }
    write_etc(root, uid, gid)?;

    // Enter the new root and drop the old one entirely.
    let old = root.join(".oldroot");
    mkdir(&old, 0o700)?;
    nix::unistd::chdir(root).step("chdir new root")?;
    nix::unistd::pivot_root(".", ".oldroot").step("pivot_root")?;
    nix::unistd::chdir("/").step("chdir /")?;
    umount2("/.oldroot", MntFlags::MNT_DETACH).step("detach old root")?;
    fs::remove_dir("/.oldroot").step("remove old root mount point")?;
    remount_ro(Path::new("/"), nosuid_nodev())?;
    Ok(())
}

/// Nothing mounted in our namespace from here on propagates to the host.
fn make_private() -> Result<(), SandboxError> {
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .step("make mounts private")
}

fn nosuid_nodev() -> MsFlags {
    MsFlags::MS_NOSUID | MsFlags::MS_NODEV
}

fn tmpfs(at: &Path, options: &str) -> Result<(), SandboxError> {
    mount(
        Some("tmpfs"),
        at,
        Some("tmpfs"),
        nosuid_nodev(),
        Some(options),
    )
    .step(format!("mount tmpfs on {}", at.display()))
}

fn mkdir(path: &Path, mode: u32) -> Result<(), SandboxError> {
    fs::create_dir_all(path).step(format!("mkdir {}", path.display()))?;
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .step(format!("chmod {}", path.display()))
}

/// `target` (an absolute path inside the sandbox) under the staging root.
fn inside(root: &Path, target: &Path) -> PathBuf {
    root.join(target.strip_prefix("/").unwrap_or(target))
}

fn bind(root: &Path, source: &Source) -> Result<(), SandboxError> {
    let at = inside(root, &source.target);
    if source.is_dir {
        mkdir(&at, 0o755)?;
    } else {
        if let Some(parent) = at.parent() {
            mkdir(parent, 0o755)?;
        }
        fs::write(&at, b"").step(format!("create mount point {}", at.display()))?;
    }
    let from = proc_fd_path(&source.fd);
    mount(
        Some(&from),
        &at,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .step(format!("bind {}", source.target.display()))?;
    // Flags the host mount carries (nodev, nosuid, noexec) are locked in a
    // user namespace: a remount must repeat them or it fails.
    let locked = locked_flags(source)?;
    if source.writable {
        // No set-uid files or device nodes made here take effect anywhere.
        let flags = MsFlags::MS_REMOUNT | MsFlags::MS_BIND | MsFlags::MS_NOSUID | locked;
        let flags = if source.target.starts_with("/dev") {
            flags
        } else {
            flags | MsFlags::MS_NODEV
        };
        mount(None::<&str>, &at, None::<&str>, flags, None::<&str>)
            .step(format!("remount {}", source.target.display()))
    } else {
        remount_ro(&at, locked)
    }
}

fn locked_flags(source: &Source) -> Result<MsFlags, SandboxError> {
    let st = fstatvfs(source.fd.as_fd()).step(format!("statvfs {}", source.target.display()))?;
    let f = st.flags();
    let mut out = MsFlags::empty();
    for (fs_flag, ms_flag) in [
        (FsFlags::ST_NOSUID, MsFlags::MS_NOSUID),
        (FsFlags::ST_NODEV, MsFlags::MS_NODEV),
        (FsFlags::ST_NOEXEC, MsFlags::MS_NOEXEC),
        (FsFlags::ST_NOATIME, MsFlags::MS_NOATIME),
        (FsFlags::ST_NODIRATIME, MsFlags::MS_NODIRATIME),
        (FsFlags::ST_RELATIME, MsFlags::MS_RELATIME),
    ] {
        if f.contains(fs_flag) {
            out |= ms_flag;
        }
    }
    Ok(out)
}

fn remount_ro(at: &Path, extra: MsFlags) -> Result<(), SandboxError> {
    let flags =
        MsFlags::MS_REMOUNT | MsFlags::MS_BIND | MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | extra;
    mount(None::<&str>, at, None::<&str>, flags, None::<&str>)
        .step(format!("remount {} read-only", at.display()))
}

/// A minimal /etc: who we are, and nothing of the host's.
fn write_etc(root: &Path, uid: u32, gid: u32) -> Result<(), SandboxError> {
    let etc = root.join("etc");
    let files = [
        (
            "passwd",
            format!("sandbox:x:{uid}:{gid}:sandbox:/tmp:/bin/false\n"),
        ),
        ("group", format!("sandbox:x:{gid}:\n")),
        ("hostname", "sandbox\n".to_string()),
        (
            "hosts",
            "127.0.0.1 localhost sandbox\n::1 localhost\n".to_string(),
        ),
    ];
    for (name, content) in files {
        let path = etc.join(name);
        if !path.exists() {
            fs::write(&path, content).step(format!("write /etc/{name}"))?;
        }
    }
    Ok(())
}

/// Where a file descriptor of ours can be named by path (a bind mount's
/// source opened before the namespaces changed).
fn proc_fd_path(fd: &OwnedFd) -> PathBuf {
    Path::new("/proc/self/fd").join(fd.as_raw_fd().to_string())
}
