//! One isolated child process, with limits. Knows nothing of MCP.
//!
//! The host describes what to run in a [`Spec`] and calls [`command`] to get
//! a `std::process::Command` that re-executes the current binary as a small
//! single-threaded launcher ([`launcher_main`]); the launcher builds the
//! sandbox and `execve`s the program. Re-executing is needed because
//! `unshare(CLONE_NEWUSER)` refuses a multi-threaded process, and the server
//! is a multi-threaded tokio program.
//!
//! Building all of that for every execution costs tens of milliseconds of
//! CPU, so a host may instead start one [`Zygote`] (the same sandbox, running
//! a prepared interpreter) and fork each execution's child from it; see
//! [`zygote`] for what each child gets and why it is as isolated.
//!
//! Layers, outermost first (each reported by [`probe`]):
//! - a cgroup for memory and pids when the host lets us make one;
//! - when the host runs us as root, the launcher first becomes an
//!   unprivileged uid (65534), so the sandbox is never host root;
//! - user, mount, pid, net, ipc and uts namespaces; the uid inside is the
//!   same unprivileged uid, never 0;
//! - a minimal read-only root built on tmpfs and entered with pivot_root:
//!   read-only binds of what the interpreter needs, a fresh /proc, a minimal
//!   /dev, a size-capped /tmp, the workspace read-write;
//! - rlimits, no_new_privs, an empty capability bounding set, a cleared
//!   environment and no inherited fds but stdin, stdout and stderr;
//! - Landlock (writes only to the workspace, /tmp and /dev/shm; signals and
//!   abstract unix sockets scoped to the sandbox);
//! - a seccomp filter: syscalls newer than the reviewed table refused, a
//!   deny-list below it (see [`seccomp`]).

mod cgroup;
mod cgroup_latency;
mod cpu_priority;
mod disk_throttle;
mod interp;
mod landlock_rules;
mod launcher;
mod mounts;
mod probe;
pub mod seccomp;
mod spec;
mod workspace_disk;
pub mod zygote;

pub use cgroup::Cgroup;
pub use cgroup_latency::{Favor, favor_dynamic_changes};
pub use cpu_priority::{BACKGROUND_SHARES, CpuPriority, limit_tenants_to};
pub use disk_throttle::write_rate_rules;
pub use interp::{InterpreterError, InterpreterLayout, resolve_interpreter};
pub use launcher::{LAUNCHER_ARG, SPEC_ENV, launcher_main};
pub use probe::{Layer, Layers, probe};
pub use spec::{Bind, Limits, Spec};
pub use workspace_disk::{DiskError, DiskHold, WorkspaceDisk, is_mount_point};
pub use zygote::{Forked, Priority, Zygote};

use std::path::Path;
use std::process::Command;

/// The most open files a sandbox may be allowed: our own hard limit (a
/// launcher cannot raise it), or the default limit if it cannot be read.
pub fn open_files_ceiling() -> u64 {
    nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .map_or(Limits::default().open_files, |(_, hard)| hard)
}

/// The uid and gid the sandbox runs as when the host runs us as root: a
/// dedicated id no account uses (not 65534: host processes run as nobody,
/// and a process of the same uid could trace the sandbox from outside).
pub const SANDBOX_ID: u32 = 2_000_000_000;

/// The (uid, gid) sandboxed code runs as, when that differs from ours: the
/// workspace must belong to it. `None` when we are not root (the sandbox
/// then runs as our own unprivileged uid).
pub fn sandbox_owner() -> Option<(u32, u32)> {
    (nix::unistd::geteuid().is_root() && nobody_is_mapped()).then_some((SANDBOX_ID, SANDBOX_ID))
}

/// Whether the sandbox uid exists in our user namespace (it may not when we are
/// "root" inside someone else's namespace; the sandbox cannot start then).
fn nobody_is_mapped() -> bool {
    let Ok(map) = std::fs::read_to_string("/proc/self/uid_map") else {
        return true;
    };
    map.lines().any(|line| {
        let f: Vec<u64> = line
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        f.len() == 3 && (f[0]..f[0] + f[2]).contains(&u64::from(SANDBOX_ID))
    })
}

/// Free bytes and free inodes (for unprivileged users) on the file system
/// holding `path`.
pub fn free_disk(path: &Path) -> Option<(u64, u64)> {
    let st = nix::sys::statvfs::statvfs(path).ok()?;
    Some((
        st.blocks_available() as u64 * st.fragment_size() as u64,
        st.files_available() as u64,
    ))
}

/// The last line of a process's diagnostics that says something.
pub fn last_line(text: &str) -> &str {
    text.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
}

/// Appends `text` to `tail`, a process's diagnostics, keeping about the last
/// `keep` bytes (cut at a character boundary).
pub fn append_tail(tail: &mut String, text: &str, keep: usize) {
    tail.push_str(text);
    if tail.len() > keep * 2 {
        let cut = tail.len() - keep;
        let cut = (cut..tail.len())
            .find(|i| tail.is_char_boundary(*i))
            .unwrap_or(tail.len());
        tail.drain(..cut);
    }
}

/// Sends SIGKILL to `pid` (the launcher: its death takes the sandbox down).
pub fn kill(pid: u32) {
    if let Ok(pid) = i32::try_from(pid) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// A `Command` that runs `spec` in the sandbox: `exe` (normally
/// `std::env::current_exe()`) re-executed as the launcher, with an empty
/// environment. Stdin, stdout and stderr are the caller's to set.
pub fn command(exe: &Path, spec: &Spec) -> Result<Command, serde_json::Error> {
    let mut cmd = Command::new(exe);
    cmd.arg(LAUNCHER_ARG);
    // In the environment, not argv: /proc/1/cmdline is readable inside the
    // sandbox, /proc/1/environ is not.
    cmd.env_clear().env(SPEC_ENV, serde_json::to_string(spec)?);
    Ok(cmd)
}

/// Errors of the launcher, reported on its stderr before it exits with
/// status 125 (so the host can tell "the sandbox could not start" from
/// "the program failed").
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("{step}: {source}")]
    Sys { step: String, source: nix::Error },
    #[error("{step}: {source}")]
    Io {
        step: String,
        source: std::io::Error,
    },
    #[error("landlock: {0}")]
    Landlock(String),
    #[error("seccomp: {0}")]
    Seccomp(String),
    #[error("{0}")]
    Other(String),
}

pub(crate) trait Step<T> {
    fn step(self, what: impl Into<String>) -> Result<T, SandboxError>;
}

impl<T> Step<T> for nix::Result<T> {
    fn step(self, what: impl Into<String>) -> Result<T, SandboxError> {
        self.map_err(|source| SandboxError::Sys {
            step: what.into(),
            source,
        })
    }
}

impl<T> Step<T> for std::io::Result<T> {
    fn step(self, what: impl Into<String>) -> Result<T, SandboxError> {
        self.map_err(|source| SandboxError::Io {
            step: what.into(),
            source,
        })
    }
}
