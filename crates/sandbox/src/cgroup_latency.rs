//! Keeps moving a process between cgroups fast whatever runs on the host.
//!
//! Every move (a sandbox joining its cgroup, a pooled one taking full CPU
//! priority, a used one going back) takes the kernel's global
//! `cgroup_threadgroup_rwsem` for writing under `cgroup_mutex`, and by
//! default waits for an RCU grace period first. A fork bomb inside a
//! sandbox stretched those grace periods to seconds, and every cgroup
//! operation on the host (making one, removing one, every other tenant's
//! next sandbox) queued behind the mutex: ordinary executions waited up to
//! 6 s for a sandbox. The kernel's `favordynmods` mode keeps that lock's
//! readers on their slow path for good, so a move waits for no grace
//! period (0.2 ms instead of 8 ms on an idle host, and still 0.2 ms beside
//! the bomb), at a cost to fork and exit too small to measure here (a
//! fork, exit and wait: 370 µs either way).
//!
//! On cgroup v1 the mode is a mount option of any hierarchy, and global:
//! mounting a hierarchy of our own, with no controller, turns it on without
//! touching the host's mounts. On cgroup v2 it is an option of the one
//! cgroup2 mount, which we do not remount: [`favor_dynamic_changes`] says
//! how.

use std::path::Path;

/// Where the server mounts its controller-less hierarchy.
const MOUNT_POINT: &str = "/run/code-execution-mcp/cgroup-favordynmods";

/// What [`favor_dynamic_changes`] found or did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Favor {
    /// A cgroup mount already has `favordynmods`.
    AlreadyOn,
    /// We mounted a hierarchy with it, at this path.
    TurnedOn(String),
    /// Not turned on, and why (with what an operator can do).
    Off(String),
}

/// Turns the kernel's `favordynmods` mode on where we can (root, cgroup
/// v1); see the module docs. The mount is left in place: the mode is
/// global, and other servers on the host find it on.
pub fn favor_dynamic_changes() -> Favor {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let cgroup_mounts = mounts.lines().filter(|l| {
        let mut f = l.split_whitespace();
        matches!(f.nth(2), Some("cgroup" | "cgroup2"))
    });
    if cgroup_mounts.clone().any(|l| {
        l.split_whitespace()
            .nth(3)
            .is_some_and(|o| o.split(',').any(|o| o == "favordynmods"))
    }) {
        return Favor::AlreadyOn;
    }
    if Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
        return Favor::Off(
            "cgroup v2 takes it as an option of its one mount, which the server leaves alone; \
             `mount -o remount,favordynmods /sys/fs/cgroup` makes moving a process between cgroups \
             wait for no RCU grace period (a fork bomb in one sandbox can stretch those to seconds)"
                .into(),
        );
    }
    if !nix::unistd::geteuid().is_root() {
        return Favor::Off("only root can mount a cgroup hierarchy".into());
    }
    if let Err(e) = std::fs::create_dir_all(MOUNT_POINT) {
        return Favor::Off(format!("cannot create {MOUNT_POINT}: {e}"));
    }
    use nix::mount::MsFlags;
    match nix::mount::mount(
        Some("cgroup"),
        MOUNT_POINT,
        Some("cgroup"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        Some("none,name=code-execution-mcp,favordynmods"),
    ) {
        Ok(()) => Favor::TurnedOn(MOUNT_POINT.into()),
        Err(e) => Favor::Off(format!(
            "mounting a cgroup hierarchy with favordynmods failed ({e}; kernels before 6.0 lack it)"
        )),
    }
}
