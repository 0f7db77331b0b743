//! What to run and with which limits: the launcher's whole input.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// A read-only bind of a host path at the same path inside.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bind {
    pub source: PathBuf,
    pub target: PathBuf,
}

/// Resource limits of one sandboxed process tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Address space (RLIMIT_AS) and, with a cgroup, memory.
    pub memory_mb: u64,
    /// CPU seconds (RLIMIT_CPU); the host also enforces wall-clock time.
    pub cpu_seconds: u64,
    /// Largest file the program may write (RLIMIT_FSIZE).
    pub file_size_mb: u64,
    /// Open files (RLIMIT_NOFILE).
    pub open_files: u64,
    /// Processes and threads (pids cgroup, else RLIMIT_NPROC).
    pub processes: u64,
    /// Size of the private /tmp (and /dev/shm) tmpfs.
    pub tmp_mb: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            memory_mb: 500,
            cpu_seconds: 60,
            file_size_mb: 256,
            open_files: 256,
            processes: 64,
            tmp_mb: 64,
        }
    }
}

/// Everything the launcher needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Spec {
    /// Program path inside the sandbox, and its argv (argv[0] included).
    pub program: PathBuf,
    pub argv: Vec<String>,
    /// The complete environment of the program.
    pub env: Vec<(String, String)>,
    /// Read-only binds (interpreter, libraries, runtime files).
    pub ro_binds: Vec<Bind>,
    /// Symlinks to recreate inside (merged-/usr layouts): (link, target).
    pub symlinks: Vec<(PathBuf, PathBuf)>,
    /// Host directory bound read-write at [`Spec::workspace_target`].
    pub workspace: Option<PathBuf>,
    pub workspace_target: PathBuf,
    /// Working directory inside.
    pub cwd: PathBuf,
    pub limits: Limits,
    /// Keep the host network (no net namespace, inet sockets allowed).
    pub network: bool,
    /// cgroup directories (one per v1 controller, or one v2 dir) the
    /// launcher joins before anything else; made by the host.
    pub cgroups: Vec<PathBuf>,
    /// Start the program as a zygote (see [`crate::zygote`]): it keeps
    /// CAP_SYS_ADMIN in the sandbox's own user namespace to give each child
    /// its namespaces and mounts, runs under [`crate::seccomp::build_zygote`]
    /// and no Landlock; every child applies the full layers itself.
    #[serde(default)]
    pub zygote: bool,
}
