//! Which mechanism holds a tenant's disk quota (`sandbox.disk_quota_mode`).
//!
//! The kernel, where the host allows: the tenant's workspace is put on a
//! file system of its own (see [`cem_sandbox::WorkspaceDisk`]), sized by
//! `quotas.workspace_bytes` or, without one, as large as the host disk, so
//! that writes past a quota fail in the writer. Where the host does not
//! allow it (not root, no `mkfs.ext4`, no loop devices), `auto` falls back
//! to the watchdog and says so once, loudly; `kernel` refuses to start.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use cem_config::{Config, DiskQuotaMode};
use cem_sandbox::WorkspaceDisk;

/// Said once per server: every tenant falls back for the same reason.
static WARNED: AtomicBool = AtomicBool::new(false);

/// How a tenant's disk quota is held: its own file system, or the
/// watchdog with the reason.
pub type Held = (Option<Arc<WorkspaceDisk>>, Option<String>);

/// Puts the workspace at `workspace` (of the tenant whose data is under
/// `root`) on its own file system when the config and host allow and the
/// state `runs_code`. Its writes are held to
/// `sandbox.tenant_disk_mb_per_second` unless the tenant is `local` (the
/// one person of a stdio server, whose host it is).
pub fn open(
    config: &Config,
    root: &Path,
    workspace: &Path,
    runs_code: bool,
    local: bool,
) -> Result<Held, String> {
    let mode = config.sandbox.disk_quota_mode;
    let image = root.join("workspace.img");
    if !runs_code {
        return Ok((None, Some("this command runs no code".into())));
    }
    // A workspace already on its image must not be shown empty instead.
    let stranded = |why: &str| {
        let mounted = cem_sandbox::is_mount_point(workspace).unwrap_or(false);
        (image.exists() && !mounted).then(|| {
            format!(
                "the workspace's files are in {} but {why}. Run the server as root with mkfs.ext4 and \
                 loop devices, or mount it yourself (mount -o loop {} /mnt) and move /mnt/files/* into {}, \
                 then remove the image",
                image.display(),
                image.display(),
                workspace.display()
            )
        })
    };
    if mode == DiskQuotaMode::Watchdog {
        if let Some(error) = stranded("sandbox.disk_quota_mode is \"watchdog\"") {
            return Err(error);
        }
        return Ok((None, Some("sandbox.disk_quota_mode is \"watchdog\"".into())));
    }
    let size = config
        .quotas
        .workspace_bytes
        .unwrap_or_else(|| host_size(root));
    let attached = WorkspaceDisk::attach(
        &image,
        &root.join(".workspace-fs"),
        workspace,
        size,
        cem_sandbox::sandbox_owner(),
        // Between executions: room for an execution's worth, and for any
        // one file the tools may write.
        (config.sandbox.disk_quota_mb << 20).max(config.workspace.max_file_bytes),
        if local {
            0
        } else {
            config
                .sandbox
                .tenant_disk_mb_per_second
                .saturating_mul(1 << 20)
        },
    );
    match attached {
        Ok(disk) => Ok((Some(Arc::new(disk)), None)),
        Err(e) if mode == DiskQuotaMode::Kernel => Err(format!(
            "sandbox.disk_quota_mode is \"kernel\" but the workspace cannot have its own file system: {e}. \
             Run the server as root with mkfs.ext4 installed, or set sandbox.disk_quota_mode to \"auto\" or \"watchdog\""
        )),
        Err(e) => {
            if let Some(error) = stranded(&format!("it cannot be mounted ({e})")) {
                return Err(error);
            }
            let reason = format!("the workspace cannot have its own file system: {e}");
            if !WARNED.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    reason = %reason,
                    "disk quotas are held by a watchdog, not the kernel: code can write past its quota for up to 100 ms before it is stopped"
                );
            }
            Ok((None, Some(reason)))
        }
    }
}

/// The size of the host file system holding `root` (an image that large
/// never fills before the host does; it is sparse, so it costs nothing).
fn host_size(root: &Path) -> u64 {
    nix::sys::statvfs::statvfs(root)
        .map_or(1 << 40, |st| st.blocks().saturating_mul(st.fragment_size()))
}
