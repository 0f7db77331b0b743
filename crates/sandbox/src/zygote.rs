//! The zygote: one sandboxed interpreter that did the expensive work once
//! (namespaces, the minimal root, Python's start and the runtime's imports)
//! and forks a fresh child for every execution.
//!
//! The zygote is started by the launcher like any sandbox ([`Spec::zygote`]
//! set): same namespaces, same read-only root, no network, a cleared
//! environment with no secret in it. It never runs agent code. For each
//! child it:
//! 1. makes a new pid namespace for it (the child is its pid 1: it cannot
//!    see, trace or signal its siblings or the zygote);
//! 2. in the child: new mount and IPC namespaces, a network namespace no
//!    live sibling has (with the network off; one an ended child had is
//!    reused, see `cem_zygote.py`), a fresh /proc, and private tmpfs /tmp
//!    and /dev/shm;
//! 3. tells the host it exists over a socket that carries its pid
//!    (`SO_PASSCRED`), so the host opens a pidfd and moves it into its own
//!    memory and pids cgroup before it runs anything;
//! 4. sets its rlimits, keeps only its three stdio descriptors, empties its
//!    capabilities, applies the same Landlock ruleset as a cold sandbox and
//!    stacks on the zygote's seccomp filters the one that makes them the
//!    cold sandbox's policy (from the [`ChildPlan`] computed here, so there
//!    is one definition of each), and only then reads the code.
//!
//! Each child is forked from the zygote, never from a child that ran code,
//! so nothing of an earlier execution is in its memory.

// Descriptor passing and pidfds are raw system calls.
#![allow(unsafe_code)]

use std::collections::HashMap;
use std::io::{IoSlice, IoSliceMut, Read};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use landlock::{ABI, Access, AccessFs, AccessNet, Scope};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::socket::{
    AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags, SockFlag, SockType, recvmsg,
    sendmsg, setsockopt, socketpair, sockopt,
};
use serde::Serialize;
use serde_json::{Value, json};

use crate::{CpuPriority, Limits, SandboxError, Spec, seccomp};

/// How long a fork may take before it is given up.
const FORK_TIMEOUT: Duration = Duration::from_secs(10);
/// Diagnostics of the zygote kept for error reports.
const STDERR_TAIL: usize = 4096;

/// What each child applies to itself, computed by the host from the same
/// code as the cold sandbox's layers.
#[derive(Debug, Clone, Serialize)]
pub struct ChildPlan {
    /// Landlock, when the kernel has it.
    pub landlock: Option<LandlockPlan>,
    /// The seccomp programs each child stacks on the zygote's (which it
    /// inherits), each as hex of its `sock_filter` array: together, the
    /// cold sandbox's policy.
    pub seccomp: Vec<String>,
    /// Give each child its own network namespace (when siblings could
    /// otherwise reach each other's abstract unix sockets).
    pub new_net: bool,
    /// Read-only binds that live under /tmp (an interpreter or virtualenv
    /// there): each child binds them again on top of its private /tmp, as
    /// the cold sandbox does.
    pub tmp_binds: Vec<PathBuf>,
    /// The capabilities left in the zygote's bounding set, which each child
    /// removes (with every capability it holds).
    pub bounding: Vec<u32>,
}

/// One Landlock ruleset as raw masks for the kernel's ABI.
#[derive(Debug, Clone, Serialize)]
pub struct LandlockPlan {
    pub abi: i32,
    pub handled_fs: u64,
    pub handled_net: u64,
    pub scoped: u64,
    /// (path, rights beneath it).
    pub rules: Vec<(PathBuf, u64)>,
}

/// The Landlock ABI this kernel offers (0: none).
fn kernel_landlock_abi() -> i32 {
    const VERSION: libc::c_uint = 1; // LANDLOCK_CREATE_RULESET_VERSION
    // SAFETY: with a null attribute and the version flag, the call only
    // returns a number.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            VERSION,
        )
    };
    i32::try_from(v).unwrap_or(0).max(0)
}

/// The plan for the children of a zygote started with `spec`: the rules of
/// [`crate::landlock_rules`] and [`seccomp::build_zygote_child`].
pub fn child_plan(spec: &Spec) -> Result<ChildPlan, SandboxError> {
    let kernel = kernel_landlock_abi();
    // The cold path asks for ABI 6 at most (best effort): the same here.
    let abi_number = kernel.min(6);
    let landlock = (abi_number > 0).then(|| {
        let abi = ABI::from(abi_number);
        let handled_fs = AccessFs::from_all(abi);
        let file_rights = AccessFs::from_file(abi);
        let devices = (AccessFs::from_read(abi) | AccessFs::WriteFile | AccessFs::IoctlDev)
            & file_rights
            & handled_fs;
        let mut rules = vec![(PathBuf::from("/"), AccessFs::from_read(abi).bits())];
        for dir in [
            spec.workspace_target.as_path(),
            "/tmp".as_ref(),
            "/dev/shm".as_ref(),
        ] {
            rules.push((dir.to_path_buf(), handled_fs.bits()));
        }
        for dev in ["null", "zero", "full", "random", "urandom"] {
            rules.push((Path::new("/dev").join(dev), devices.bits()));
        }
        LandlockPlan {
            abi: abi_number,
            handled_fs: handled_fs.bits(),
            handled_net: if spec.network {
                0
            } else {
                AccessNet::from_all(abi).bits()
            },
            scoped: Scope::from_all(abi).bits(),
            rules,
        }
    });
    // The zygote's own filters stay on every child; the child adds what
    // makes them the cold sandbox's policy.
    let seccomp = seccomp::build_zygote_child()?
        .iter()
        .map(|program| {
            program
                .iter()
                .flat_map(|f| {
                    let mut bytes = Vec::with_capacity(8);
                    bytes.extend_from_slice(&f.code.to_ne_bytes());
                    bytes.push(f.jt);
                    bytes.push(f.jf);
                    bytes.extend_from_slice(&f.k.to_ne_bytes());
                    bytes
                })
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        })
        .collect();
    Ok(ChildPlan {
        // Unix sockets (abstract names, and what /proc/net/unix lists) live
        // in the network namespace: a child shares one with its siblings
        // only when the sandbox shares the host's anyway (network on). An
        // ended child's is reused by a later one (the zygote says why
        // that is as good as new).
        new_net: !spec.network,
        landlock,
        seccomp,
        bounding: crate::launcher::ZYGOTE_CAPS.to_vec(),
        tmp_binds: spec
            .ro_binds
            .iter()
            .map(|b| b.target.clone())
            .filter(|t| t.starts_with("/tmp"))
            .collect(),
    })
}

/// Whether this kernel has what a zygote needs beyond a cold sandbox:
/// pidfds (so the host never signals a reused pid).
pub fn kernel_support() -> Result<(), String> {
    // SAFETY: pidfd_open on our own pid; the descriptor is owned at once.
    let raw = unsafe {
        libc::syscall(
            libc::SYS_pidfd_open,
            std::process::id() as libc::pid_t,
            0u32,
        )
    };
    if raw < 0 {
        return Err(format!(
            "this kernel has no pidfd_open ({})",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: a descriptor the call just returned, owned by nobody else.
    drop(unsafe { OwnedFd::from_raw_fd(raw as RawFd) });
    Ok(())
}

/// An answer of the zygote to one request.
type Reply = Result<Value, String>;

struct Shared {
    /// Requests waiting for their answer, by id.
    pending: Mutex<HashMap<u64, mpsc::Sender<Reply>>>,
    /// Children whose exit status is still to come, by id.
    exits: Mutex<HashMap<u64, tokio::sync::oneshot::Sender<i32>>>,
    alive: AtomicBool,
    stderr: Mutex<String>,
}

/// A running zygote. Dropping it ends it and every child it made.
pub struct Zygote {
    ctl: OwnedFd,
    send: Mutex<()>,
    launcher: Mutex<Child>,
    shared: Arc<Shared>,
    next: AtomicU64,
    /// The cpu priority groups its children move between, when the host has them.
    cpu: Option<&'static CpuPriority>,
}

/// A child forked by the zygote: its host pid, a pidfd, and the host ends
/// of its stdin, stdout and stderr. Dropping it kills the child (and its
/// whole pid namespace).
pub struct Forked {
    pub pid: u32,
    pidfd: Arc<OwnedFd>,
    pub stdin: Option<OwnedFd>,
    pub stdout: Option<OwnedFd>,
    pub stderr: Option<OwnedFd>,
    /// The exit status (128+signal for signals), sent when the zygote has
    /// reaped the child; closed without a value if the zygote died first.
    pub exit: Option<tokio::sync::oneshot::Receiver<i32>>,
    /// Moves it between the cpu priority groups, when the host has them.
    pub priority: Option<Priority>,
}

/// Moves one forked child between the cpu priority groups. A move is a
/// write to cgroupfs that can block for a few milliseconds (the kernel
/// waits for an RCU grace period when no move happened lately): call it off
/// the async runtime, and off the path of a request.
#[derive(Clone)]
pub struct Priority {
    pid: u32,
    pidfd: Arc<OwnedFd>,
    cpu: &'static CpuPriority,
    /// Set once the child is being ended: no move after that.
    ending: Arc<Mutex<bool>>,
}

impl Priority {
    /// Full priority (the server's own cpu cgroup), for the execution the
    /// child was taken for. Nothing once it is ending or ended.
    pub fn to_foreground(&self) -> Result<(), String> {
        let ending = self.ending.lock().map_err(|_| "a poisoned lock")?;
        if *ending || pidfd_readable(&self.pidfd) {
            return Ok(());
        }
        // The pidfd says the pid is still this child's (not a reused one).
        self.cpu.to_foreground(self.pid)
    }

    /// Background priority for its teardown; after this, no move lifts it
    /// again. Call it before killing the child.
    pub fn to_background(&self) -> Result<(), String> {
        let mut ending = self.ending.lock().map_err(|_| "a poisoned lock")?;
        *ending = true;
        if pidfd_readable(&self.pidfd) {
            return Ok(());
        }
        self.cpu.to_background(self.pid)
    }
}

/// Whether the process behind a pidfd has ended, without waiting.
fn pidfd_readable(pidfd: &OwnedFd) -> bool {
    let mut fds = [PollFd::new(pidfd.as_fd(), PollFlags::POLLIN)];
    matches!(poll(&mut fds, PollTimeout::ZERO), Ok(n) if n > 0)
}

/// Kills one forked child through its pidfd (so never a reused pid); may
/// outlive the [`Forked`] it came from.
#[derive(Clone)]
pub struct Killer(Arc<OwnedFd>);

impl Killer {
    /// The child's pid as this process sees it (from the pidfd's fdinfo),
    /// while it runs.
    pub fn pid(&self) -> Option<u32> {
        let info =
            std::fs::read_to_string(format!("/proc/self/fdinfo/{}", self.0.as_raw_fd())).ok()?;
        info.lines()
            .find_map(|l| l.strip_prefix("Pid:"))
            .and_then(|p| p.trim().parse::<i64>().ok())
            .and_then(|p| u32::try_from(p).ok())
            .filter(|p| *p > 0)
    }

    /// Sends SIGKILL to the child (and so its whole pid namespace).
    pub fn kill(&self) {
        // SAFETY: pidfd_send_signal with a valid pidfd and no siginfo.
        unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                self.0.as_raw_fd(),
                libc::SIGKILL,
                std::ptr::null::<u8>(),
                0u32,
            )
        };
    }
}

impl Forked {
    /// Sends SIGKILL (through the pidfd: never to a reused pid).
    pub fn kill(&self) {
        self.killer().kill();
    }

    /// A handle that kills this child, for watchdogs.
    pub fn killer(&self) -> Killer {
        Killer(self.pidfd.clone())
    }

    /// Whether the child has ended (its pidfd is readable).
    pub fn ended(&self) -> bool {
        pidfd_readable(&self.pidfd)
    }
}

impl Drop for Forked {
    fn drop(&mut self) {
        self.kill();
    }
}

impl Drop for Zygote {
    fn drop(&mut self) {
        self.shared.alive.store(false, Ordering::SeqCst);
        if let Ok(mut launcher) = self.launcher.lock() {
            let _ = launcher.kill();
            let _ = launcher.wait();
        }
    }
}

fn sys<T>(what: &str, r: nix::Result<T>) -> Result<T, String> {
    r.map_err(|e| format!("{what}: {e}"))
}

/// pipe2(O_CLOEXEC): (read end, write end).
fn pipe() -> Result<(OwnedFd, OwnedFd), String> {
    sys("pipe", nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC))
}

fn seqpacket_pair() -> Result<(OwnedFd, OwnedFd), String> {
    sys(
        "socketpair",
        socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        ),
    )
}

/// Waits until `fd` is readable, up to `timeout`; false on timeout.
fn readable(fd: &OwnedFd, timeout: Duration) -> bool {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let ms = u16::try_from(left.as_millis()).unwrap_or(u16::MAX);
        let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::from(ms)) {
            Ok(n) => return n > 0,
            // A signal for this thread is not the end of the wait.
            Err(nix::errno::Errno::EINTR) if !left.is_zero() => continue,
            Err(_) => return false,
        }
    }
}

/// Whether the peer of a socket is gone (hang-up), without waiting.
fn hung_up(fd: &OwnedFd) -> bool {
    let mut fds = [PollFd::new(fd.as_fd(), PollFlags::empty())];
    matches!(poll(&mut fds, PollTimeout::ZERO), Ok(n) if n > 0)
        && fds[0]
            .revents()
            .is_some_and(|r| r.intersects(PollFlags::POLLHUP | PollFlags::POLLERR))
}

/// What a failed child said on stderr, without waiting for more.
fn said(stderr: OwnedFd) -> String {
    let _ = nix::fcntl::fcntl(
        &stderr,
        nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
    );
    let mut text = String::new();
    let _ = std::fs::File::from(stderr).read_to_string(&mut text);
    crate::last_line(&text).to_string()
}

/// A fork request's entries in the shared maps, removed on every early
/// return (kept once the child is released: the zygote's exit report and
/// reply remove them).
struct Registration<'a> {
    shared: &'a Shared,
    id: u64,
    armed: bool,
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        if self.armed {
            if let Ok(mut p) = self.shared.pending.lock() {
                p.remove(&self.id);
            }
            if let Ok(mut e) = self.shared.exits.lock() {
                e.remove(&self.id);
            }
        }
    }
}

/// One message of a seqpacket socket (empty at end of stream).
fn recv_message(fd: RawFd) -> Result<Vec<u8>, String> {
    let mut buf = vec![0u8; 64 << 10];
    let n = {
        let mut iov = [IoSliceMut::new(&mut buf)];
        let msg = sys(
            "recvmsg",
            recvmsg::<()>(fd, &mut iov, None, MsgFlags::MSG_CMSG_CLOEXEC),
        )?;
        msg.bytes
    };
    buf.truncate(n);
    Ok(buf)
}

impl Zygote {
    /// Starts a zygote for `spec` (which must say `zygote: true`), with
    /// `exe` re-executed as the launcher, and waits until it is ready.
    /// With `cpu`, the zygote and every child it forks start in the
    /// background cpu group ([`Forked::priority`] lifts a child).
    pub fn start(
        exe: &Path,
        spec: &Spec,
        cpu: Option<&'static CpuPriority>,
    ) -> Result<Zygote, String> {
        if !spec.zygote {
            return Err("a zygote's spec must say zygote: true".into());
        }
        let plan = child_plan(spec).map_err(|e| e.to_string())?;
        let plan = serde_json::to_vec(&plan).map_err(|e| e.to_string())?;
        let (host, inside) = seqpacket_pair()?;
        // The plan is the first message (not the environment, which every
        // child could read back from /proc/self/environ).
        sys(
            "send the zygote its plan",
            sendmsg::<()>(
                host.as_raw_fd(),
                &[IoSlice::new(&plan)],
                &[],
                MsgFlags::empty(),
                None,
            ),
        )?;
        let mut cmd = crate::command(exe, spec).map_err(|e| e.to_string())?;
        cmd.stdin(Stdio::from(inside))
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        // Opened here, written by the launcher itself between fork and exec:
        // it is in the background group before it makes anything.
        let background = cpu.and_then(|c| {
            std::fs::OpenOptions::new()
                .write(true)
                .open(c.background_procs())
                .ok()
        });
        if let Some(procs) = &background {
            let fd = procs.as_raw_fd();
            // SAFETY: the hook only calls write(2), which is async-signal-safe.
            unsafe {
                std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
                    // Best effort: a zygote left at full priority is slower when busy, not weaker.
                    let _ = libc::write(fd, b"0".as_ptr().cast(), 1);
                    Ok(())
                });
            }
        }
        let mut launcher = cmd
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", exe.display()))?;
        drop(background);
        // The hook's write is best effort: what status reports is what happened.
        let cpu = cpu.filter(|c| c.holds(launcher.id()));
        let shared = Arc::new(Shared {
            pending: Mutex::new(HashMap::new()),
            exits: Mutex::new(HashMap::new()),
            alive: AtomicBool::new(true),
            stderr: Mutex::new(String::new()),
        });
        if let Some(stderr) = launcher.stderr.take() {
            let shared = shared.clone();
            std::thread::spawn(move || drain(stderr, &shared));
        }
        let zygote = Zygote {
            ctl: host,
            send: Mutex::new(()),
            launcher: Mutex::new(launcher),
            shared,
            next: AtomicU64::new(1),
            cpu,
        };
        if !readable(&zygote.ctl, Duration::from_secs(20)) {
            return Err(zygote.failed("did not say it was ready within 20 s"));
        }
        let ready = recv_message(zygote.ctl.as_raw_fd())?;
        match serde_json::from_slice::<Value>(&ready) {
            Ok(v) if v["type"] == "ready" => {}
            _ => return Err(zygote.failed("ended during start-up")),
        }
        let ctl = zygote
            .ctl
            .try_clone()
            .map_err(|e| format!("dup control socket: {e}"))?;
        let shared = zygote.shared.clone();
        std::thread::Builder::new()
            .name("cem-zygote-io".into())
            .spawn(move || read_replies(ctl, &shared))
            .map_err(|e| format!("cannot start the zygote's reader: {e}"))?;
        Ok(zygote)
    }

    /// The reason a zygote stopped, with the last thing it said.
    fn failed(&self, what: &str) -> String {
        std::thread::sleep(Duration::from_millis(50));
        format!(
            "the zygote {what}: {}",
            crate::last_line(&self.stderr_tail())
        )
    }

    /// The end of the zygote's stderr.
    pub fn stderr_tail(&self) -> String {
        self.shared
            .stderr
            .lock()
            .map(|s| s.clone())
            .unwrap_or_default()
    }

    /// Whether the zygote and the children it forks are prepared in the
    /// background cpu group.
    pub fn prioritized(&self) -> bool {
        self.cpu.is_some()
    }

    /// Whether the zygote still serves forks.
    pub fn alive(&self) -> bool {
        self.shared.alive.load(Ordering::SeqCst)
    }

    /// Forks a child with `limits`, moved into the cgroup directories
    /// `cgroups` (made by the caller) before it runs anything. Blocking:
    /// call it off the async runtime.
    ///
    /// With `waited_for` (someone waits for this child now, the pool had
    /// none), the child leaves the background cpu group with its cgroups,
    /// before its set-up and warm-up: only a pool's children are prepared
    /// in the background.
    pub fn fork(
        &self,
        limits: &Limits,
        cgroups: &[PathBuf],
        waited_for: bool,
    ) -> Result<Forked, String> {
        if !self.alive() {
            return Err(self.failed("has stopped"));
        }
        let (stdin_r, stdin_w) = pipe()?;
        let (stdout_r, stdout_w) = pipe()?;
        let (stderr_r, stderr_w) = pipe()?;
        let (hello, hello_child) = seqpacket_pair()?;
        sys("SO_PASSCRED", setsockopt(&hello, sockopt::PassCred, &true))?;
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (reply_tx, reply_rx) = mpsc::channel();
        let (exit_tx, exit_rx) = tokio::sync::oneshot::channel();
        if let Ok(mut p) = self.shared.pending.lock() {
            p.insert(id, reply_tx);
        }
        if let Ok(mut e) = self.shared.exits.lock() {
            e.insert(id, exit_tx);
        }
        let mut registration = Registration {
            shared: &self.shared,
            id,
            armed: true,
        };
        let request = json!({"type": "fork", "id": id, "limits": limits}).to_string();
        let fds = [
            stdin_r.as_raw_fd(),
            stdout_w.as_raw_fd(),
            stderr_w.as_raw_fd(),
            hello_child.as_raw_fd(),
        ];
        {
            let _guard = self.send.lock();
            let iov = [IoSlice::new(request.as_bytes())];
            let cmsg = [ControlMessage::ScmRights(&fds)];
            sys(
                "send to the zygote",
                sendmsg::<()>(self.ctl.as_raw_fd(), &iov, &cmsg, MsgFlags::empty(), None),
            )?;
        }
        // The child's ends live in the zygote and the child now.
        drop((stdin_r, stdout_w, stderr_w, hello_child));
        let reply = match reply_rx.recv_timeout(FORK_TIMEOUT) {
            Ok(Ok(v)) => v,
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(self.failed("did not answer a fork")),
        };
        if let Some(e) = reply.get("error").and_then(Value::as_str) {
            return Err(format!("the zygote could not fork: {e}"));
        }
        // The child says hello once its namespaces and mounts are made;
        // the kernel puts its pid, as we see it, on the message.
        let pid = match self.hello_pid(&hello) {
            Ok(pid) => pid,
            Err(e) => {
                // Closing our end first: a child waiting for its go-ahead
                // then ends, and its stderr with it.
                drop(hello);
                return Err(format!(
                    "a forked sandbox did not start: {e} {}",
                    said(stderr_r)
                ));
            }
        };
        // SAFETY: pidfd_open returns a new descriptor or -1.
        let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0u32) };
        if raw < 0 {
            return Err(format!("pidfd_open: {}", std::io::Error::last_os_error()));
        }
        // SAFETY: a descriptor the call just returned, owned by nobody else.
        let pidfd = Arc::new(unsafe { OwnedFd::from_raw_fd(raw as RawFd) });
        // The zygote closed its copy of the hello socket before it answered,
        // so the child holds the only one: while it is open, the child (which
        // waits for our go-ahead) is alive and the pid behind the pidfd is
        // its own, not a reused one.
        if hung_up(&hello) {
            return Err("a forked sandbox ended before it was released".into());
        }
        let priority = self.cpu.map(|cpu| Priority {
            pid,
            pidfd: Arc::clone(&pidfd),
            cpu,
            ending: Arc::new(Mutex::new(false)),
        });
        let forked = Forked {
            pid,
            pidfd,
            stdin: Some(stdin_w),
            stdout: Some(stdout_r),
            stderr: Some(stderr_r),
            exit: Some(exit_rx),
            priority,
        };
        for dir in cgroups {
            std::fs::write(dir.join("cgroup.procs"), pid.to_string())
                .map_err(|e| format!("move a forked sandbox into {}: {e}", dir.display()))?;
        }
        if let (true, Some(priority)) = (waited_for, &forked.priority)
            && let Err(e) = priority.to_foreground()
        {
            // It still runs, slower only while the machine is busy.
            tracing::warn!(error = %e, "a forked sandbox keeps background CPU priority");
        }
        let iov = [IoSlice::new(b"g")];
        sys(
            "release the forked sandbox",
            sendmsg::<()>(hello.as_raw_fd(), &iov, &[], MsgFlags::empty(), None),
        )?;
        registration.armed = false;
        Ok(forked)
    }

    fn hello_pid(&self, hello: &OwnedFd) -> Result<u32, String> {
        if !readable(hello, FORK_TIMEOUT) {
            return Err("no word within 10 s".into());
        }
        let mut buf = [0u8; 16];
        let mut iov = [IoSliceMut::new(&mut buf)];
        let mut space = nix::cmsg_space!(libc::ucred);
        let msg = sys(
            "recvmsg",
            recvmsg::<()>(
                hello.as_raw_fd(),
                &mut iov,
                Some(&mut space),
                MsgFlags::MSG_CMSG_CLOEXEC,
            ),
        )?;
        if msg.bytes == 0 {
            return Err("it ended during set-up.".into());
        }
        for c in msg.cmsgs().map_err(|e| e.to_string())? {
            if let ControlMessageOwned::ScmCredentials(creds) = c {
                return u32::try_from(creds.pid()).map_err(|_| "a bad pid".to_string());
            }
        }
        Err("its message carried no credentials".into())
    }
}

/// Reads the zygote's answers and exit reports until it ends.
fn read_replies(ctl: OwnedFd, shared: &Shared) {
    loop {
        let message = match recv_message(ctl.as_raw_fd()) {
            Ok(m) if !m.is_empty() => m,
            _ => break,
        };
        let Ok(value) = serde_json::from_slice::<Value>(&message) else {
            continue;
        };
        let Some(id) = value.get("id").and_then(Value::as_u64) else {
            continue;
        };
        if value["type"] == "exited" {
            let status = value
                .get("status")
                .and_then(Value::as_i64)
                .and_then(|s| i32::try_from(s).ok())
                .unwrap_or(-1);
            let tx = shared.exits.lock().ok().and_then(|mut e| e.remove(&id));
            if let Some(tx) = tx {
                let _ = tx.send(status);
            }
        } else {
            let tx = shared.pending.lock().ok().and_then(|mut p| p.remove(&id));
            if let Some(tx) = tx {
                let _ = tx.send(Ok(value));
            }
        }
    }
    shared.alive.store(false, Ordering::SeqCst);
    // Waiters learn the zygote is gone: their senders are dropped.
    if let Ok(mut p) = shared.pending.lock() {
        for (_, tx) in p.drain() {
            let _ = tx.send(Err("the zygote stopped".into()));
        }
    }
    if let Ok(mut e) = shared.exits.lock() {
        e.clear();
    }
}

fn drain(mut stderr: std::process::ChildStderr, shared: &Shared) {
    let mut buf = [0u8; 4096];
    while let Ok(n) = stderr.read(&mut buf) {
        if n == 0 {
            break;
        }
        if let Ok(mut t) = shared.stderr.lock() {
            crate::append_tail(&mut t, &String::from_utf8_lossy(&buf[..n]), STDERR_TAIL);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Bind;

    fn spec(network: bool) -> Spec {
        Spec {
            program: "/usr/bin/python3".into(),
            argv: vec!["/usr/bin/python3".into()],
            env: Vec::new(),
            ro_binds: vec![
                Bind {
                    source: "/usr".into(),
                    target: "/usr".into(),
                },
                Bind {
                    source: "/tmp/venv".into(),
                    target: "/tmp/venv".into(),
                },
            ],
            symlinks: Vec::new(),
            workspace: Some("/srv/ws".into()),
            workspace_target: "/workspace".into(),
            cwd: "/workspace".into(),
            limits: Limits::default(),
            network,
            cgroups: Vec::new(),
            zygote: true,
        }
    }

    #[test]
    fn children_get_the_cold_sandboxs_rules_and_the_filters_that_complete_the_zygotes() {
        let Ok(plan) = child_plan(&spec(false)) else {
            panic!("the plan must build");
        };
        let Ok(delta) = seccomp::build_zygote_child() else {
            panic!("the filters must build");
        };
        assert_eq!(plan.seccomp.len(), delta.len());
        for (hex, program) in plan.seccomp.iter().zip(&delta) {
            assert_eq!(
                hex.len(),
                program.len() * 16,
                "8 bytes per instruction, as hex"
            );
        }
        assert_eq!(plan.tmp_binds, vec![PathBuf::from("/tmp/venv")]);
        assert_eq!(plan.bounding, crate::launcher::ZYGOTE_CAPS.to_vec());
        if let Some(ll) = &plan.landlock {
            // Every rule grants only rights the ruleset handles, or the kernel refuses it.
            for (path, rights) in &ll.rules {
                assert_eq!(rights & !ll.handled_fs, 0, "{}", path.display());
            }
            let writable: Vec<_> = ll
                .rules
                .iter()
                .filter(|(_, r)| *r == ll.handled_fs)
                .map(|(p, _)| p.clone())
                .collect();
            let expected: Vec<PathBuf> = ["/workspace", "/tmp", "/dev/shm"]
                .iter()
                .map(PathBuf::from)
                .collect();
            assert_eq!(writable, expected);
            assert_ne!(
                ll.handled_net, 0,
                "no network: TCP bind and connect are handled"
            );
        }
    }

    #[test]
    fn with_the_network_on_tcp_is_not_handled() {
        let Ok(plan) = child_plan(&spec(true)) else {
            panic!("the plan must build");
        };
        assert!(!plan.new_net);
        if let Some(ll) = plan.landlock {
            assert_eq!(ll.handled_net, 0);
        }
    }
}
