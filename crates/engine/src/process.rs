//! One interpreter process (sandboxed or not) running the runtime, and the
//! JSON-lines exchange with it.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use cem_sandbox::{Bind, Cgroup, InterpreterLayout, Limits, Spec};
use cem_sandbox::{Forked, Priority, Zygote};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::process::Child;

use crate::bridge::{BoxFuture, Bridge};
use crate::install::{ENV_TARGET, InstallStats, Installs, LAYERS_TARGET, parse_requirements};
use cem_runtime::RUNTIME_TARGET;
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use serde_json::json;

/// Longest line accepted from the runtime (answers are capped well below).
const MAX_LINE: usize = 32 << 20;
/// Longest request from code to the host that is not a tool call (search,
/// PII, skills, wrappers): the largest legitimate one (1 MiB of text for
/// tokenize_pii, escaped) fits.
pub const MAX_HOST_REQUEST: usize = 2 << 20;
/// Host requests (not tool calls) of one execution in flight at once;
/// past it the exchange stops reading from the code, which waits.
const HOST_IN_FLIGHT: usize = 4;
/// Tool calls and host requests of one execution in flight at once.
const IN_FLIGHT: usize = 32;
/// Tool results larger than this (as JSON) are refused with advice: they
/// would cost the sandbox's memory and the host's pipe time for data code
/// can rarely use whole.
pub const MAX_RESULT_BYTES: usize = 16 << 20;
/// Diagnostics (the interpreter's stderr) kept for error reports.
const STDERR_TAIL: usize = 4096;
/// How long an interpreter may take to say it is ready.
const READY_TIMEOUT: Duration = Duration::from_secs(20);

/// Everything needed to start interpreters.
#[derive(Debug, Clone)]
pub struct Launch {
    /// Our own binary, re-executed as the sandbox launcher.
    pub exe: PathBuf,
    pub layout: InterpreterLayout,
    pub runtime_dir: PathBuf,
    pub workspace: PathBuf,
    pub network: bool,
    /// Run the interpreter directly, without any sandbox (explicitly allowed).
    pub unsandboxed: bool,
    pub use_cgroups: bool,
    /// Disk space one exchange may use up (refused past it, or stopped).
    pub disk_quota_bytes: u64,
    /// The workspace's own file system, when the kernel holds the quota.
    pub disk: Option<Arc<cem_sandbox::WorkspaceDisk>>,
    /// The tenant's background queue: preparing pooled interpreters and
    /// clearing up used ones.
    pub prepare: Arc<crate::background::Queue>,
    /// More read-only binds (host path, path inside).
    pub extra_ro: Vec<(PathBuf, PathBuf)>,
}

/// The disk watchdog also stops an execution when free space falls this low.
const DISK_FLOOR: u64 = 64 << 20;
/// Files (inodes) one execution may create.
const INODE_QUOTA: u64 = 100_000;
/// ...and the free inodes it must leave.
const INODE_FLOOR: u64 = 10_000;

/// Watches disk use for the whole life of one interpreter (threads of a
/// session keep running after a call returns). The baseline is reset at
/// every call, so the quota applies per execution and its aftermath.
struct DiskWatch {
    /// Free bytes and inodes when the call began, the bytes it may use, and
    /// when it began (what the execution wrote since is its own).
    baseline: Mutex<Option<(u64, u64, u64, SystemTime)>>,
    /// Megabytes used when the watchdog stopped the interpreter.
    tripped: Mutex<Option<u64>>,
    /// The host directory whose file system holds the workspace's own
    /// file system, when the kernel holds the byte quota: the watchdog then
    /// counts files made, and keeps that host disk's floor.
    host: Option<PathBuf>,
}

/// How an exchange with the interpreter went wrong.
#[derive(Debug)]
pub enum Failure {
    Timeout,
    /// The process ended: its exit status (128+signal for signals), whether
    /// the cgroup saw the memory limit hit, and the end of its stderr.
    Died {
        status: Option<i32>,
        out_of_memory: bool,
        stderr: String,
    },
    Protocol(String),
    /// The execution used up more disk than allowed.
    Disk {
        used_mb: u64,
    },
}

/// Tool calls made by one execution.
pub struct CallStats {
    pub calls: u64,
    pub max_calls: u64,
    /// Requests to the host that are not tool calls, and their limit.
    pub host_requests: u64,
    pub max_host_requests: u64,
    /// Tokens of the successful results, counted as they arrive.
    pub tokens: crate::tokens::Meter,
    /// Time spent waiting on package installs, and what they brought.
    pub installs: Arc<Mutex<InstallStats>>,
    /// Disk bytes this execution may add, if less than the launch's quota.
    pub disk_limit: Option<u64>,
}

impl Drop for CallStats {
    /// However the execution ended (an error too), nothing more of it is
    /// counted after.
    fn drop(&mut self) {
        self.tokens.close();
    }
}

impl CallStats {
    pub fn new(max_calls: u64, max_host_requests: u64) -> Self {
        Self {
            calls: 0,
            max_calls,
            host_requests: 0,
            max_host_requests,
            tokens: crate::tokens::Meter::default(),
            installs: Arc::new(Mutex::new(InstallStats::default())),
            disk_limit: None,
        }
    }

    fn install_wait(&self) -> Duration {
        self.installs.lock().map(|s| s.waited).unwrap_or_default()
    }
}

/// The package directories an interpreter mounts (host paths): the
/// declared environment and the directory of on-demand layers.
#[derive(Debug, Clone, Default)]
pub struct PackageMounts {
    pub env: Option<PathBuf>,
    pub layers: Option<PathBuf>,
}

type Reader = Box<dyn AsyncRead + Unpin + Send>;
type Writer = Box<dyn AsyncWrite + Unpin + Send>;

/// The runtime's stdout as JSON lines. Cancel-safe: a partial line stays
/// in `line` (or the reader's buffer) when a `select!` drops `next`, so the
/// exchange can read it in the same task that runs the calls (no extra hop
/// per tool call).
struct Lines {
    reader: BufReader<Reader>,
    line: Vec<u8>,
    /// Bytes of the last message read.
    last_len: usize,
}

impl Lines {
    fn new(stdout: Reader) -> Self {
        Self {
            reader: BufReader::with_capacity(64 << 10, stdout),
            line: Vec::new(),
            last_len: 0,
        }
    }

    /// The next message; `None` at end of output.
    async fn next(&mut self) -> Option<Result<Value, String>> {
        loop {
            let available = self.reader.fill_buf().await.ok()?;
            if available.is_empty() {
                return None;
            }
            let newline = available.iter().position(|&b| b == b'\n');
            let take = newline.map_or(available.len(), |i| i + 1);
            self.line.extend_from_slice(&available[..take]);
            self.reader.consume(take);
            if self.line.len() > MAX_LINE {
                self.line = Vec::new();
                return Some(Err(format!(
                    "the runtime sent a line over {MAX_LINE} bytes"
                )));
            }
            if newline.is_some() {
                self.last_len = self.line.len();
                let item = serde_json::from_slice(&self.line)
                    .map_err(|e| format!("the runtime sent invalid JSON: {e}"));
                self.line.clear();
                return Some(item);
            }
        }
    }
}

/// For the fuzz targets: the messages an exchange reads from `output` (the
/// runtime's stdout), each with its size as the host-request limit counts
/// it, decoded by `Lines` exactly as from a real interpreter. Reading
/// stops at the end of `output`, or where a read would wait.
#[doc(hidden)]
pub fn decode_output(output: Reader) -> Vec<(Result<Value, String>, usize)> {
    use futures_util::FutureExt;
    let mut lines = Lines::new(output);
    let mut decoded = Vec::new();
    while let Some(Some(item)) = lines.next().now_or_never() {
        decoded.push((item, lines.last_len));
    }
    decoded
}

/// The process behind an interpreter: a launcher we spawned (cold start),
/// or a child the zygote forked. Dropping it kills the sandbox either way.
enum Proc {
    Spawned(Child),
    Forked {
        child: Forked,
        exit: Option<tokio::sync::oneshot::Receiver<i32>>,
        status: Option<Option<i32>>,
        /// Its zygote: a child whose zygote died is about to die too.
        zygote: Arc<Zygote>,
    },
}

impl Proc {
    /// How a watchdog stops this process: the launcher by pid (our own
    /// child, so its pid is not reused before we reap it), a forked child
    /// through its pidfd (the zygote reaps it, so its pid may be).
    fn stopper(&self) -> Option<Stopper> {
        match self {
            Proc::Spawned(c) => c.id().map(Stopper::Pid),
            Proc::Forked { child, .. } => Some(Stopper::Forked(child.killer())),
        }
    }

    /// What moves a forked child between the cpu priority groups (none for
    /// a cold one, or without the groups).
    fn priority(&self) -> Option<Priority> {
        match self {
            Proc::Forked { child, .. } => child.priority.clone(),
            Proc::Spawned(_) => None,
        }
    }

    fn ended(&mut self) -> bool {
        match self {
            Proc::Spawned(c) => !matches!(c.try_wait(), Ok(None)),
            Proc::Forked { child, zygote, .. } => !zygote.alive() || child.ended(),
        }
    }

    fn start_kill(&mut self) {
        match self {
            Proc::Spawned(c) => {
                let _ = c.start_kill();
            }
            Proc::Forked { child, .. } => child.kill(),
        }
    }

    /// Waits for the end; the exit code (128+signal), if known.
    async fn wait(&mut self) -> Option<i32> {
        match self {
            Proc::Spawned(c) => c.wait().await.ok().and_then(exit_code),
            Proc::Forked { exit, status, .. } => {
                if let Some(known) = status {
                    return *known;
                }
                // The zygote reports the status once it has reaped the
                // child; a zygote that died first reports nothing.
                let code = match exit.take() {
                    Some(rx) => rx.await.ok(),
                    None => None,
                };
                *status = Some(code);
                code
            }
        }
    }
}

/// Removing an interpreter's cgroup can block (it retries while the
/// sandbox's last processes exit): never on the async runtime's threads.
impl Drop for Interp {
    fn drop(&mut self) {
        let Some(cgroup) = self.cgroup.take() else {
            return;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(remove_cgroup(cgroup, self.prepare.clone()));
            }
            Err(_) => drop(cgroup),
        }
    }
}

/// Removes a used interpreter's cgroup on the background thread, one quick
/// attempt at a time with pauses between (its processes take a while to
/// exit), so the thread that prepares the tenant's sandboxes is never
/// held waiting; after about two seconds the last attempt waits.
async fn remove_cgroup(cgroup: Cgroup, queue: Arc<crate::background::Queue>) {
    let mut cgroup = Some(cgroup);
    for _ in 0..100 {
        let Some(mut c) = cgroup.take() else {
            return;
        };
        match queue
            .run(move || if c.try_remove() { None } else { Some(c) })
            .await
        {
            Ok(None) | Err(_) => return,
            Ok(left) => cgroup = left,
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if let Some(c) = cgroup {
        let _ = queue.run(move || drop(c)).await;
    }
}

/// A started interpreter that has said it is ready.
pub struct Interp {
    child: Proc,
    watch: Arc<DiskWatch>,
    watchdog: Option<tokio::task::JoinHandle<()>>,
    stdin: Writer,
    messages: Lines,
    stderr: Arc<Mutex<String>>,
    cgroup: Option<Cgroup>,
    pub memory_mb: u64,
    /// The tenant's background queue (the cgroup is removed on it).
    prepare: Arc<crate::background::Queue>,
}

/// The interpreter's environment (the same for a cold start and a zygote).
fn interpreter_env(launch: &Launch, packages: &PackageMounts) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = [
        ("PATH", "/usr/local/bin:/usr/bin:/bin"),
        ("HOME", "/tmp"),
        ("TMPDIR", "/tmp"),
        ("LANG", "C.UTF-8"),
        ("PYTHONIOENCODING", "utf-8"),
        ("PYTHONDONTWRITEBYTECODE", "1"),
        // Figures are drawn to files for show(): the sandbox has no display.
        ("MPLBACKEND", "Agg"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    // Inside the sandbox the package directories are bound at fixed
    // places; without it they are where they are.
    let inside = |host: &PathBuf, target: &str| {
        if launch.unsandboxed {
            host.display().to_string()
        } else {
            target.to_string()
        }
    };
    if let Some(dir) = &packages.env {
        env.push(("CEM_PACKAGES_ENV".into(), inside(dir, ENV_TARGET)));
    }
    if let Some(dir) = &packages.layers {
        env.push(("CEM_PACKAGES_LAYERS".into(), inside(dir, LAYERS_TARGET)));
    }
    env
}

/// The sandbox that runs `script` (a file of the runtime directory).
fn sandbox_spec(
    launch: &Launch,
    packages: &PackageMounts,
    script: &str,
    limits: Limits,
    cgroups: Vec<PathBuf>,
) -> Spec {
    let mut binds = launch.layout.binds.clone();
    binds.push(Bind {
        source: launch.runtime_dir.clone(),
        target: RUNTIME_TARGET.into(),
    });
    for (source, target) in &launch.extra_ro {
        if source.is_dir() {
            binds.push(Bind {
                source: source.clone(),
                target: target.clone(),
            });
        }
    }
    for (dir, target) in [
        (&packages.env, ENV_TARGET),
        (&packages.layers, LAYERS_TARGET),
    ] {
        if let Some(dir) = dir {
            binds.push(Bind {
                source: dir.clone(),
                target: target.into(),
            });
        }
    }
    Spec {
        program: launch.layout.executable.clone(),
        // argv[0] must be the path itself: Python finds its prefix
        // (and a virtualenv's pyvenv.cfg) from it.
        argv: vec![
            launch.layout.executable.display().to_string(),
            "-I".into(),
            "-B".into(),
            format!("{RUNTIME_TARGET}/{script}"),
        ],
        env: interpreter_env(launch, packages),
        ro_binds: binds,
        symlinks: launch.layout.symlinks.clone(),
        workspace: Some(launch.workspace.clone()),
        workspace_target: "/workspace".into(),
        cwd: "/workspace".into(),
        limits,
        network: launch.network,
        cgroups,
        zygote: false,
    }
}

/// Limits of one interpreter: `memory_mb` and `processes`; CPU time is a
/// backstop only (wall-clock time is enforced by the host).
fn limits(memory_mb: u64, processes: u64) -> Limits {
    Limits {
        memory_mb,
        cpu_seconds: 3600,
        processes,
        ..Limits::default()
    }
}

/// The sandbox a zygote runs in: the same as an interpreter's, with the
/// largest memory any execution may ask for and `open_files` for its
/// children's descriptors, within the host's ceiling (each child sets its
/// own limits).
pub fn zygote_spec(
    launch: &Launch,
    packages: &PackageMounts,
    max_memory_mb: u64,
    open_files: u64,
) -> Spec {
    let ceiling = cem_sandbox::open_files_ceiling();
    let mut limits = limits(max_memory_mb, Limits::default().processes);
    limits.open_files = open_files.max(limits.open_files).min(ceiling);
    let mut spec = sandbox_spec(
        launch,
        packages,
        "cem_zygote.py",
        // The launcher gives a zygote no RLIMIT_NPROC and no RLIMIT_CPU
        // (each child sets its own, and is counted by its pids cgroup):
        // only the memory ceiling applies to it.
        limits,
        Vec::new(),
    );
    spec.zygote = true;
    spec
}

impl Interp {
    /// Starts an interpreter with `memory_mb` and waits for its ready line.
    pub async fn start(
        launch: &Launch,
        memory_mb: u64,
        processes: u64,
        packages: PackageMounts,
    ) -> Result<Interp, String> {
        let (mut cmd, cgroup) = if launch.unsandboxed {
            let mut cmd = std::process::Command::new(&launch.layout.executable);
            cmd.args(["-I", "-B"])
                .arg(launch.runtime_dir.join("cem_runtime.py"))
                .env_clear()
                .envs(interpreter_env(launch, &packages))
                .current_dir(&launch.workspace);
            // Without the sandbox's mounts, the runtime finds the skills and
            // the generated wrappers where they really are.
            for (source, target) in &launch.extra_ro {
                match target.to_str() {
                    Some("/skills") => cmd.env("CEM_SKILLS_DIR", source),
                    Some("/servers") => cmd.env("CEM_SERVERS_DIR", source),
                    _ => &mut cmd,
                };
            }
            (cmd, None)
        } else {
            let cgroup = if launch.use_cgroups {
                new_cgroup(memory_mb, processes).ok()
            } else {
                None
            };
            let dirs = cgroup
                .as_ref()
                .map(|c| c.dirs().to_vec())
                .unwrap_or_default();
            let spec = sandbox_spec(
                launch,
                &packages,
                "cem_runtime.py",
                limits(memory_mb, processes),
                dirs,
            );
            let cmd = cem_sandbox::command(&launch.exe, &spec).map_err(|e| e.to_string())?;
            (cmd, cgroup)
        };
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = tokio::process::Command::from(cmd)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", launch.exe.display()))?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err("the interpreter's pipes are missing".into());
        };
        Interp::handshake(
            Proc::Spawned(child),
            Box::new(stdin),
            Box::new(stdout),
            Box::new(stderr),
            launch,
            cgroup,
            memory_mb,
        )
        .await
    }

    /// Forks an interpreter from `zygote` with `memory_mb` and `processes`
    /// in a cgroup of its own, and waits for its ready line. `waited_for`:
    /// a caller waits for it (see [`Zygote::fork`]).
    pub async fn fork(
        zygote: &Arc<Zygote>,
        launch: &Launch,
        memory_mb: u64,
        processes: u64,
        waited_for: bool,
    ) -> Result<Interp, String> {
        let z = zygote.clone();
        let prepare = move || {
            let cgroup = new_cgroup(memory_mb, processes)
                .map_err(|e| format!("a forked sandbox needs its own cgroup: {e}"))?;
            let forked = z.fork(&limits(memory_mb, processes), cgroup.dirs(), waited_for)?;
            Ok::<_, String>((cgroup, forked))
        };
        // The pool's next interpreter is prepared in the background; one a
        // caller waits for, at once.
        let (cgroup, mut forked) = if waited_for {
            tokio::task::spawn_blocking(prepare)
                .await
                .map_err(|e| format!("the fork task failed: {e}"))??
        } else {
            launch.prepare.run(prepare).await??
        };
        let pipes = (
            forked.stdin.take(),
            forked.stdout.take(),
            forked.stderr.take(),
        );
        let (Some(stdin), Some(stdout), Some(stderr)) = pipes else {
            return Err("the forked interpreter's pipes are missing".into());
        };
        let io = |e: std::io::Error| format!("the forked interpreter's pipes: {e}");
        let stdin = tokio::net::unix::pipe::Sender::from_owned_fd(stdin).map_err(io)?;
        let stdout = tokio::net::unix::pipe::Receiver::from_owned_fd(stdout).map_err(io)?;
        let stderr = tokio::net::unix::pipe::Receiver::from_owned_fd(stderr).map_err(io)?;
        let exit = forked.exit.take();
        Interp::handshake(
            Proc::Forked {
                child: forked,
                exit,
                status: None,
                zygote: zygote.clone(),
            },
            Box::new(stdin),
            Box::new(stdout),
            Box::new(stderr),
            launch,
            Some(cgroup),
            memory_mb,
        )
        .await
    }

    /// Watches a started interpreter and waits for its ready line.
    async fn handshake(
        child: Proc,
        stdin: Writer,
        stdout: Reader,
        stderr: Reader,
        launch: &Launch,
        cgroup: Option<Cgroup>,
        memory_mb: u64,
    ) -> Result<Interp, String> {
        let tail = Arc::new(Mutex::new(String::new()));
        tokio::spawn(drain_stderr(stderr, tail.clone()));
        let watch = Arc::new(DiskWatch {
            baseline: Mutex::new(None),
            tripped: Mutex::new(None),
            host: launch.disk.as_ref().map(|d| d.host_dir().to_path_buf()),
        });
        let watchdog = child
            .stopper()
            .map(|stop| tokio::spawn(disk_watchdog(watch.clone(), launch.workspace.clone(), stop)));
        let mut interp = Interp {
            child,
            watch,
            watchdog,
            stdin,
            messages: Lines::new(stdout),
            stderr: tail,
            cgroup,
            memory_mb,
            prepare: launch.prepare.clone(),
        };
        match tokio::time::timeout(READY_TIMEOUT, interp.read_message()).await {
            Ok(Ok(msg)) if msg["type"] == "ready" => Ok(interp),
            Ok(Ok(msg)) => Err(format!("unexpected first message from the runtime: {msg}")),
            Ok(Err(failure)) => Err(interp.describe(failure).await),
            Err(_) => {
                interp.kill().await;
                Err(format!(
                    "the interpreter did not start within {} s",
                    READY_TIMEOUT.as_secs()
                ))
            }
        }
    }

    /// Stops every thread of the interpreter until [`Interp::resume`] (a
    /// session between calls). Without a cgroup nothing can be stopped as
    /// one, and the threads go on.
    pub fn pause(&self) {
        if let Some(cgroup) = &self.cgroup
            && !cgroup.freeze(self.launcher())
        {
            tracing::warn!("a session's interpreter could not be frozen between calls");
        }
    }

    /// A cold sandbox's launcher (inside its cgroup, and what kills the
    /// sandbox when the server ends): never frozen.
    fn launcher(&self) -> Option<u32> {
        match &self.child {
            Proc::Spawned(child) => child.id(),
            Proc::Forked { .. } => None,
        }
    }

    /// Lets a paused interpreter run again.
    pub fn resume(&self) {
        if let Some(cgroup) = &self.cgroup {
            cgroup.thaw();
        }
    }

    /// Memory the interpreter uses now (its cgroup's charge), if known.
    pub fn memory_bytes(&self) -> Option<u64> {
        self.cgroup.as_ref().and_then(Cgroup::memory_used)
    }

    /// Whether the process has ended or is about to (so a pooled one is
    /// unusable).
    pub fn exited(&mut self) -> bool {
        self.child.ended()
    }

    /// Sends one request and waits for its answer, up to `timeout`, while
    /// the watchdog stops it if it eats the disk.
    pub async fn exchange(
        &mut self,
        request: &Value,
        timeout: Duration,
        launch: &Launch,
        bridge: Option<&Arc<dyn Bridge>>,
        installs: Option<&Installs>,
        stats: &mut CallStats,
    ) -> Result<Value, Failure> {
        let limit = stats
            .disk_limit
            .map_or(launch.disk_quota_bytes, |l| l.min(launch.disk_quota_bytes));
        // With the workspace on its own file system, the kernel refuses
        // writes past the quota: the reserve leaves exactly `limit` free
        // (and no more than the host disk can spare). The watchdog then
        // counts only files made, and the host disk's floor.
        let _hold = match &launch.disk {
            Some(disk) => {
                let spare = cem_sandbox::free_disk(disk.host_dir())
                    .map_or(0, |(bytes, _)| bytes.saturating_sub(DISK_FLOOR));
                let (disk, cap) = (disk.clone(), limit.min(spare));
                tokio::task::spawn_blocking(move || disk.hold(cap))
                    .await
                    .ok()
            }
            None => None,
        };
        if let Ok(mut b) = self.watch.baseline.lock() {
            *b = cem_sandbox::free_disk(&launch.workspace)
                .map(|(bytes, inodes)| (bytes, inodes, limit, SystemTime::now()));
        }
        let outcome = self
            .exchange_inner(request, timeout, bridge, installs, stats)
            .await;
        match self.watch.tripped.lock().ok().and_then(|t| *t) {
            Some(used_mb) => Err(Failure::Disk { used_mb }),
            None => outcome,
        }
    }

    async fn exchange_inner(
        &mut self,
        request: &Value,
        timeout: Duration,
        bridge: Option<&Arc<dyn Bridge>>,
        installs: Option<&Installs>,
        stats: &mut CallStats,
    ) -> Result<Value, Failure> {
        let started = tokio::time::Instant::now();
        let mut deadline = started + timeout;
        self.send(request, deadline).await?;
        // Tool calls and host requests in flight, polled by this task: an
        // answer goes back without a hop through another task. Whatever is
        // still running when the code's result arrives (or the deadline) is
        // dropped, which cancels it upstream; nothing of it outlives the
        // exchange but blocking work already started, which holds its
        // tenant's share of the host until it ends (see the server's
        // host_work). Each answer says whether it was a host request.
        let mut calls: FuturesUnordered<BoxFuture<(Vec<u8>, bool)>> = FuturesUnordered::new();
        let mut host_in_flight = 0usize;
        // While a person is asked to approve a call, the sandbox is frozen
        // (no thread of it runs) and its clock stops: the deadline moves by
        // the time it was frozen, and by nothing where it could not be.
        let mut asking = bridge.and_then(|b| b.asking());
        let mut pause = Pause::default();
        enum Step {
            Message(Option<Result<Value, String>>),
            Answer(Vec<u8>, bool),
            Asking(bool),
            TimedOut,
        }
        loop {
            // Back-pressure: with enough in flight, the code's next request
            // waits in the pipe (and the code with it) rather than in a
            // queue on the host.
            let room = calls.len() < IN_FLIGHT && host_in_flight < HOST_IN_FLIGHT;
            let step = tokio::select! {
                m = self.messages.next(), if room => Step::Message(m),
                Some((a, host)) = calls.next(), if !calls.is_empty() => Step::Answer(a, host),
                changed = watch_changed(&mut asking), if asking.is_some() => Step::Asking(changed),
                () = tokio::time::sleep_until(deadline), if pause.at.is_none() => Step::TimedOut,
            };
            match step {
                Step::Asking(true) if pause.at.is_none() => {
                    let launcher = self.launcher();
                    pause.frozen = self.cgroup.as_ref().is_some_and(|c| c.freeze(launcher));
                    if !pause.frozen {
                        // The code goes on running meanwhile (no cgroup to
                        // stop it as one): the wait still does not count
                        // against its time, as before freezing existed.
                        tracing::warn!(
                            "a sandbox could not be frozen while a person is asked; its threads go on"
                        );
                    }
                    pause.at = Some(tokio::time::Instant::now());
                }
                Step::Asking(true) => {}
                Step::Asking(false) => {
                    if let Some(held) = pause.end(self.cgroup.as_ref()) {
                        deadline = started + timeout + pause.total + stats.install_wait();
                        for line in held {
                            self.send_line(line, deadline).await?;
                        }
                    }
                }
                Step::TimedOut => {
                    // Time frozen for a person's approval, or spent waiting
                    // for the host to install packages, does not count.
                    let extended = started + timeout + pause.total + stats.install_wait();
                    if extended > tokio::time::Instant::now() {
                        deadline = extended;
                        continue;
                    }
                    self.kill().await;
                    return Err(Failure::Timeout);
                }
                Step::Answer(line, host) => {
                    host_in_flight -= usize::from(host);
                    // The answer to an approved call comes after the question
                    // closed: thaw first (a frozen reader would hold the
                    // write), even if the change was not seen yet.
                    let still_asking = asking.as_ref().is_some_and(|rx| *rx.borrow());
                    if !still_asking && let Some(held) = pause.end(self.cgroup.as_ref()) {
                        deadline = started + timeout + pause.total + stats.install_wait();
                        for line in held {
                            self.send_line(line, deadline).await?;
                        }
                    }
                    if pause.frozen {
                        pause.held.push(line);
                    } else {
                        self.send_line(line, deadline).await?;
                    }
                }
                Step::Message(None) => return Err(self.died().await),
                Step::Message(Some(Err(problem))) => {
                    self.kill().await;
                    return Err(Failure::Protocol(problem));
                }
                Step::Message(Some(Ok(msg))) => match msg.get("type").and_then(Value::as_str) {
                    Some("result") => return Ok(msg),
                    Some("install") => {
                        calls.push(tagged(install(msg, installs, stats), false));
                    }
                    Some("progress") => {
                        if let Some(bridge) = bridge {
                            bridge.progress(msg);
                        }
                    }
                    Some("call") => {
                        calls.push(tagged(relay("call", msg, bridge, stats), false));
                    }
                    Some(kind @ ("search" | "pii" | "skill" | "wrappers")) => {
                        let kind = kind.to_string();
                        let size = self.messages.last_len;
                        calls.push(tagged(host_request(&kind, msg, size, bridge, stats), true));
                        host_in_flight += 1;
                    }
                    _ => {
                        self.kill().await;
                        return Err(Failure::Protocol(
                            "the runtime sent an unknown message".into(),
                        ));
                    }
                },
            }
        }
    }

    /// Writes one JSON line to the runtime. A runtime that stops reading
    /// cannot stall the exchange past its deadline.
    async fn send(
        &mut self,
        message: &Value,
        deadline: tokio::time::Instant,
    ) -> Result<(), Failure> {
        let line = serde_json::to_vec(message).map_err(|e| Failure::Protocol(e.to_string()))?;
        self.send_line(line, deadline).await
    }

    async fn send_line(
        &mut self,
        mut line: Vec<u8>,
        deadline: tokio::time::Instant,
    ) -> Result<(), Failure> {
        line.push(b'\n');
        let write = async {
            self.stdin.write_all(&line).await?;
            self.stdin.flush().await
        };
        match tokio::time::timeout_at(deadline, write).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err(self.died().await),
            Err(_) => {
                self.kill().await;
                Err(Failure::Timeout)
            }
        }
    }

    /// Reads one JSON line from the runtime.
    async fn read_message(&mut self) -> Result<Value, Failure> {
        match self.messages.next().await {
            Some(Ok(msg)) => Ok(msg),
            Some(Err(problem)) => {
                self.kill().await;
                Err(Failure::Protocol(problem))
            }
            None => Err(self.died().await),
        }
    }

    async fn died(&mut self) -> Failure {
        let status = match tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await {
            Ok(code) => code,
            Err(_) => {
                self.kill().await;
                None
            }
        };
        // Let the stderr drain catch the last words.
        tokio::time::sleep(Duration::from_millis(20)).await;
        Failure::Died {
            status,
            out_of_memory: self.cgroup.as_ref().is_some_and(|c| c.memory_exhausted()),
            stderr: self.stderr_tail(),
        }
    }

    pub fn stderr_tail(&self) -> String {
        self.stderr.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Gives a forked interpreter full CPU priority (it was set up in the
    /// background cpu group; a cold one already has it).
    pub fn to_foreground(&self) -> impl Future<Output = ()> + Send + 'static {
        let priority = self.child.priority();
        let queue = self.prepare.clone();
        async move {
            let Some(priority) = priority else {
                return;
            };
            let moved = queue.run(move || priority.to_foreground()).await;
            if let Ok(Err(e)) = moved {
                tracing::warn!(error = %e, "a forked sandbox keeps background CPU priority");
            }
        }
    }

    /// Ends an interpreter whose end nobody waits for (a session-less
    /// execution's, once answered): a forked one's interpreter first moves to
    /// the background cpu group, so tearing its memory down takes only CPU
    /// that nothing else wants.
    pub async fn retire(mut self) {
        if let Some(priority) = self.child.priority() {
            let _ = self.prepare.run(move || priority.to_background()).await;
        }
        self.kill().await;
        // Dropped here: its cgroup goes on the background thread (see Drop).
    }

    /// Kills the launcher (and with it the whole sandboxed tree) and reaps it.
    pub async fn kill(&mut self) {
        if let Some(w) = self.watchdog.take() {
            w.abort();
        }
        // A frozen process takes its SIGKILL only once thawed.
        if let Some(cgroup) = &self.cgroup {
            cgroup.thaw();
        }
        self.child.start_kill();
        let _ = self.child.wait().await;
    }

    async fn describe(&mut self, failure: Failure) -> String {
        match failure {
            Failure::Died { status, stderr, .. } => {
                let last = cem_sandbox::last_line(&stderr);
                format!("the interpreter exited during start-up (status {status:?}): {last}")
            }
            Failure::Timeout => "the interpreter timed out during start-up".into(),
            Failure::Protocol(p) => p,
            Failure::Disk { used_mb } => format!("used {used_mb} MB of disk during start-up"),
        }
    }
}

fn exit_code(status: std::process::ExitStatus) -> Option<i32> {
    use std::os::unix::process::ExitStatusExt;
    status.code().or_else(|| status.signal().map(|s| 128 + s))
}

async fn drain_stderr(mut stderr: Reader, tail: Arc<Mutex<String>>) {
    let mut buf = [0u8; 8192];
    loop {
        match stderr.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if let Ok(mut t) = tail.lock() {
                    cem_sandbox::append_tail(
                        &mut t,
                        &String::from_utf8_lossy(&buf[..n]),
                        STDERR_TAIL,
                    );
                }
            }
        }
    }
}

/// A cgroup of its own for one interpreter, named uniquely in this host.
fn new_cgroup(memory_mb: u64, processes: u64) -> Result<Cgroup, String> {
    let name = format!("x{}-{}", std::process::id(), next_id());
    Cgroup::create(&name, memory_mb, processes)
}

fn next_id() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

/// The answer line to one "call", "search", "pii", "skill" or "wrappers" message from the runtime, as
/// a future the exchange polls.
fn relay(
    kind: &str,
    msg: Value,
    bridge: Option<&Arc<dyn Bridge>>,
    stats: &mut CallStats,
) -> BoxFuture<Vec<u8>> {
    let id = msg.get("id").cloned().unwrap_or(Value::Null);
    let is_call = kind == "call";
    let over_limit = is_call && stats.calls >= stats.max_calls;
    if is_call {
        stats.calls += 1;
    }
    if over_limit {
        let why = format!(
            "more than {} tool calls in one execution; batch the work or split it over calls",
            stats.max_calls
        );
        return Box::pin(async move { failed(&id, "", "", why) });
    }
    let Some(bridge) = bridge.cloned() else {
        return Box::pin(async move {
            failed(
                &id,
                "",
                "",
                "no tools are available to this execution".into(),
            )
        });
    };
    let arguments = msg.get("arguments").cloned().unwrap_or(Value::Null);
    if !is_call {
        let asked = match kind {
            "search" => bridge.search(arguments),
            "pii" => bridge.pii(arguments),
            "wrappers" => bridge.wrappers(arguments),
            _ => bridge.skill(arguments),
        };
        return Box::pin(async move {
            match asked.await {
                Ok(value) => answered(&id, &value.to_string()),
                Err(e) => failed(&id, "", "", e),
            }
        });
    }
    let tool = msg
        .get("tool")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let meter = stats.tokens.clone();
    Box::pin(async move {
        match bridge.call(tool.clone(), arguments).await {
            Ok(crate::Called { value, warning }) => {
                // Serialised once: for the answer line and the token count.
                let text = value.to_string();
                if text.len() > MAX_RESULT_BYTES {
                    let (server, name) = split_tool(&tool);
                    let why = format!(
                        "the result is {} bytes, over the {MAX_RESULT_BYTES}-byte limit; ask the tool for less (filters, pages)",
                        text.len()
                    );
                    return failed(&id, server, name, why);
                }
                meter.record(&text);
                match warning {
                    Some(warning) => format!(
                        r#"{{"type":"answer","id":{id},"ok":true,"value":{text},"warning":{}}}"#,
                        Value::String(warning)
                    )
                    .into_bytes(),
                    None => answered(&id, &text),
                }
            }
            Err(e) => failed(&id, &e.server, &e.tool, e.message),
        }
    })
}

/// An execution frozen while a person is asked: since when, the time it
/// was frozen in all, and the answers that came meanwhile (written once
/// thawed: a frozen reader would hold the write, and the exchange with it).
#[derive(Default)]
struct Pause {
    at: Option<tokio::time::Instant>,
    /// Whether the sandbox is really stopped (else only its clock is).
    frozen: bool,
    total: Duration,
    held: Vec<Vec<u8>>,
}

impl Pause {
    /// Ends a wait: thaws the sandbox if it was frozen, counts the time
    /// and gives back the answers held meanwhile; `None` when none ran.
    fn end(&mut self, cgroup: Option<&Cgroup>) -> Option<Vec<Vec<u8>>> {
        let at = self.at.take()?;
        self.total += at.elapsed();
        if std::mem::take(&mut self.frozen)
            && let Some(cgroup) = cgroup
        {
            cgroup.thaw();
        }
        Some(std::mem::take(&mut self.held))
    }
}

/// The next value of a watched flag; a closed channel reads as false and
/// is forgotten (its sender, the execution's pause clock, is gone).
async fn watch_changed(watch: &mut Option<tokio::sync::watch::Receiver<bool>>) -> bool {
    let Some(rx) = watch.as_mut() else {
        return std::future::pending().await;
    };
    match rx.changed().await {
        Ok(()) => *rx.borrow_and_update(),
        Err(_) => {
            *watch = None;
            false
        }
    }
}

/// Tags an answer with whether it answers a host request.
fn tagged(answer: BoxFuture<Vec<u8>>, host: bool) -> BoxFuture<(Vec<u8>, bool)> {
    Box::pin(async move { (answer.await, host) })
}

/// The answer line to one host request (search, pii, skill, wrappers):
/// refused past the execution's count or size limit, else relayed.
fn host_request(
    kind: &str,
    msg: Value,
    size: usize,
    bridge: Option<&Arc<dyn Bridge>>,
    stats: &mut CallStats,
) -> BoxFuture<Vec<u8>> {
    let id = msg.get("id").cloned().unwrap_or(Value::Null);
    stats.host_requests += 1;
    let refusal = if stats.host_requests > stats.max_host_requests {
        Some(format!(
            "more than {} requests to the host (search_tools, tokenize_pii, detokenize_pii, skills) \
             in one execution (sandbox.max_host_requests); batch the work or split it over calls",
            stats.max_host_requests
        ))
    } else if size > MAX_HOST_REQUEST {
        Some(format!(
            "the request is {size} bytes; requests to the host other than tool calls take at most \
             {MAX_HOST_REQUEST}: split the text"
        ))
    } else {
        None
    };
    match refusal {
        Some(why) => Box::pin(async move { failed(&id, "", kind_name(&msg), why) }),
        None => relay(kind, msg, bridge, stats),
    }
}

/// What a host request is, in the words code used.
fn kind_name(msg: &Value) -> &'static str {
    match (
        msg["type"].as_str(),
        msg.pointer("/arguments/op").and_then(Value::as_str),
    ) {
        (Some("pii"), Some("tokenize")) => "tokenize_pii",
        (Some("pii"), _) => "detokenize_pii",
        (Some("search"), _) => "search_tools",
        (Some("skill"), _) => "skills",
        _ => "wrappers",
    }
}

/// The answer line to one "install" message: the layer built (or found)
/// for the runtime to put on sys.path.
fn install(msg: Value, installs: Option<&Installs>, stats: &CallStats) -> BoxFuture<Vec<u8>> {
    let id = msg.get("id").cloned().unwrap_or(Value::Null);
    let texts: Vec<String> = msg
        .pointer("/arguments/requirements")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    let Some(installs) = installs.cloned() else {
        return Box::pin(async move {
            failed(
                &id,
                "",
                "install",
                "packages cannot be installed here".into(),
            )
        });
    };
    let record = stats.installs.clone();
    Box::pin(async move {
        let requested = match parse_requirements(&texts) {
            Ok(r) => r,
            Err(e) => return failed(&id, "", "install", e),
        };
        match installs.install(requested, &record).await {
            Ok((dirs, installed)) => answered(
                &id,
                &json!({"dirs": dirs, "installed": installed}).to_string(),
            ),
            Err(e) => failed(&id, "", "install", e),
        }
    })
}

/// A successful answer line around `value_json`, already serialised.
fn answered(id: &Value, value_json: &str) -> Vec<u8> {
    format!(r#"{{"type":"answer","id":{id},"ok":true,"value":{value_json}}}"#).into_bytes()
}

fn failed(id: &Value, server: &str, tool: &str, message: String) -> Vec<u8> {
    json!({"type": "answer", "id": id, "ok": false,
           "error": {"server": server, "tool": tool, "message": message}})
    .to_string()
    .into_bytes()
}

/// "server.tool" or "server__tool" as (server, tool); ("", name) otherwise.
/// A server's name has no dot, and a tool's may have `__`: the dot first.
fn split_tool(name: &str) -> (&str, &str) {
    name.split_once('.')
        .or_else(|| name.split_once("__"))
        .unwrap_or(("", name))
}

/// Kills the interpreter (by its launcher's pid) when, since the last call
/// began, it used more disk or inodes than allowed, or nearly filled either.
/// What the disk watchdog kills.
enum Stopper {
    Pid(u32),
    Forked(cem_sandbox::zygote::Killer),
}

impl Stopper {
    /// The pid at the root of the execution's processes.
    fn pid(&self) -> Option<u32> {
        match self {
            Stopper::Pid(pid) => Some(*pid),
            Stopper::Forked(killer) => killer.pid(),
        }
    }
}

async fn disk_watchdog(watch: Arc<DiskWatch>, workspace: PathBuf, stop: Stopper) {
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        // No baseline yet: an idle (pooled) interpreter runs no code to watch.
        let Some((base_bytes, base_inodes, quota, started)) =
            watch.baseline.lock().ok().and_then(|b| *b)
        else {
            continue;
        };
        let Some((bytes, inodes)) = cem_sandbox::free_disk(&workspace) else {
            continue;
        };
        let used = base_bytes.saturating_sub(bytes);
        let files = base_inodes.saturating_sub(inodes);
        if let Some(host) = &watch.host {
            // The kernel refuses bytes past the quota (the code sees
            // ENOSPC); files made are still counted here, and the host
            // disk (which the sparse image grows on) must keep its floor.
            let host_low = cem_sandbox::free_disk(host)
                .is_some_and(|(b, i)| b < DISK_FLOOR || i < INODE_FLOOR);
            if files > INODE_QUOTA || host_low {
                trip(&watch, &stop, used >> 20, files);
                return;
            }
            continue;
        }
        let over_quota = used > quota || files > INODE_QUOTA;
        if over_quota && bytes >= DISK_FLOOR && inodes >= INODE_FLOOR {
            // Free space is the whole file system's: check what the
            // execution itself wrote before blaming it.
            let root = workspace.clone();
            let pid = stop.pid();
            let own = tokio::task::spawn_blocking(move || {
                crate::written::by_execution(&root, pid?, started)
            })
            .await
            .ok()
            .flatten();
            if let crate::written::Judgement::Others { base } =
                crate::written::judge((bytes, inodes), own, quota, INODE_QUOTA)
            {
                tracing::debug!(
                    used_mb = used >> 20,
                    own_mb = own.map_or(0, |o| o.0 >> 20),
                    "free disk fell, mostly by other processes' writes; the execution goes on"
                );
                if let Ok(mut b) = watch.baseline.lock()
                    && b.is_some_and(|b| b.3 == started)
                {
                    *b = Some((base.0, base.1, quota, started));
                }
                continue;
            }
        }
        if over_quota || bytes < DISK_FLOOR || inodes < INODE_FLOOR {
            trip(&watch, &stop, used >> 20, files);
            return;
        }
    }
}

/// Stops the interpreter for its disk use, noting how much it had used.
fn trip(watch: &DiskWatch, stop: &Stopper, used_mb: u64, files: u64) {
    if let Ok(mut t) = watch.tripped.lock() {
        *t = Some(used_mb);
    }
    tracing::warn!(
        used_mb,
        files,
        "an execution exceeded its disk quota; stopping it"
    );
    match stop {
        Stopper::Pid(pid) => cem_sandbox::kill(*pid),
        Stopper::Forked(killer) => killer.kill(),
    }
}
