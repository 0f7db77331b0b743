//! The launcher: a single-threaded re-execution of our binary that builds
//! the sandbox and `execve`s the program.
//!
//! Process tree: launcher (host namespaces, waits) → init (pid 1 of the new
//! pid namespace: builds the root, reaps) → program. The init dies with the
//! launcher (PDEATHSIG), and everything in the pid namespace dies with the
//! init, so killing the launcher kills the whole tree.

// fork(), execve() and raw syscalls are unavoidable here; each use is in a
// single-threaded process and commented.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::os::fd::AsFd;

use nix::sched::{CloneFlags, unshare};
use nix::sys::prctl;
use nix::sys::resource::{Resource, setrlimit};
use nix::sys::signal::Signal;
use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::{
    ForkResult, Gid, Pid, Uid, execve, fork, getegid, geteuid, setgroups, setresgid, setresuid,
};
use serde_json::json;

use crate::mounts::{self, Source};
use crate::{SANDBOX_ID, SandboxError, Spec, Step, landlock_rules, seccomp};

/// The first argument that turns our binary into the launcher.
pub const LAUNCHER_ARG: &str = "__sandbox-exec";
/// The environment variable carrying the spec (JSON).
pub const SPEC_ENV: &str = "CEM_SANDBOX_SPEC";
/// Exit status when the sandbox could not be built.
pub const SETUP_FAILED: i32 = 125;
/// Prefix of the one stderr line the launcher writes when asked to report.
pub const REPORT_PREFIX: &str = "CEM-SANDBOX-LAYERS ";

/// Entry point of the re-executed binary. Must be called before any thread
/// is started (first thing in `main`).
pub fn launcher_main() -> ! {
    // Nothing the host left open goes further than this process.
    // SAFETY: close_range only closes descriptors.
    unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) };
    let spec_json = std::env::var(SPEC_ENV).unwrap_or_default();
    // SAFETY: single-threaded; nothing else reads the environment.
    unsafe { std::env::remove_var(SPEC_ENV) };
    let code = match serde_json::from_str::<Spec>(&spec_json) {
        Ok(spec) => match run(&spec) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("sandbox setup failed: {e}");
                SETUP_FAILED
            }
        },
        Err(e) => {
            eprintln!("sandbox setup failed: bad spec: {e}");
            SETUP_FAILED
        }
    };
    std::process::exit(code)
}

fn run(spec: &Spec) -> Result<i32, SandboxError> {
    // Join the cgroups first, while we may still write them (host root).
    let mut cgroup_joined = !spec.cgroups.is_empty();
    for dir in &spec.cgroups {
        if std::fs::write(dir.join("cgroup.procs"), "0").is_err() {
            cgroup_joined = false;
        }
    }
    let staged = if geteuid().is_root() {
        // As root: stage every bind source in a private mount namespace
        // (paths under /root, say, are unreachable once we are nobody),
        // then never run the sandbox as host root: become nobody before
        // making the user namespace, so its owner and its only uid are
        // unprivileged.
        let staged = mounts::stage_sources(spec)?;
        let nobody_gid = Gid::from_raw(SANDBOX_ID);
        setgroups(&[]).step("drop supplementary groups")?;
        setresgid(nobody_gid, nobody_gid, nobody_gid).step("setresgid(nobody)")?;
        let nobody = Uid::from_raw(SANDBOX_ID);
        setresuid(nobody, nobody, nobody).step("setresuid(nobody)")?;
        // Changing credentials cleared "dumpable", which makes /proc/self
        // root-owned; we must still write our own uid_map below.
        prctl::set_dumpable(true).step("set dumpable")?;
        staged
    } else {
        mounts::unstaged_sources(spec)
    };
    let (uid, gid) = (geteuid(), getegid());

    let mut flags = CloneFlags::CLONE_NEWUSER
        | CloneFlags::CLONE_NEWNS
        | CloneFlags::CLONE_NEWPID
        | CloneFlags::CLONE_NEWIPC
        | CloneFlags::CLONE_NEWUTS;
    if !spec.network {
        flags |= CloneFlags::CLONE_NEWNET;
    }
    unshare(flags).step(
        "unshare(user, mount, pid, net, ipc, uts namespaces); \
         unprivileged user namespaces may be disabled on this host",
    )?;
    // Map our own (unprivileged) uid and gid to themselves: the only ids
    // that exist inside. setgroups must be denied before gid_map.
    std::fs::write("/proc/self/setgroups", "deny").step("deny setgroups")?;
    std::fs::write("/proc/self/uid_map", format!("{uid} {uid} 1")).step("write uid_map")?;
    std::fs::write("/proc/self/gid_map", format!("{gid} {gid} 1")).step("write gid_map")?;
    // The maps are written: nobody (not even another process of this uid)
    // needs to open our /proc files any more.
    prctl::set_dumpable(false).step("clear dumpable")?;
    // Bind sources must be opened in the mount namespace they are bound in.
    let sources = mounts::open_sources(&staged)?;

    // SAFETY: the launcher is single-threaded (called first in main), so
    // the child may run arbitrary code after fork.
    match unsafe { fork() }.step("fork init")? {
        ForkResult::Parent { child } => Ok(wait_with_lifeline(child)),
        ForkResult::Child => {
            let code = match init(spec, sources, uid, gid, cgroup_joined) {
                Ok(code) => code,
                Err(e) => {
                    eprintln!("sandbox setup failed: {e}");
                    SETUP_FAILED
                }
            };
            std::process::exit(code)
        }
    }
}

/// Pid 1 of the sandbox: builds the root, starts the program, reaps.
fn init(
    spec: &Spec,
    sources: Vec<Source>,
    uid: Uid,
    gid: Gid,
    cgroup_joined: bool,
) -> Result<i32, SandboxError> {
    prctl::set_pdeathsig(Signal::SIGKILL).step("set parent-death signal")?;
    nix::unistd::sethostname("sandbox").step("set hostname")?;
    mounts::build_root(spec, sources, uid.as_raw(), gid.as_raw())?;

    // SAFETY: still single-threaded.
    match unsafe { fork() }.step("fork program")? {
        ForkResult::Child => {
            let e = exec_program(spec, cgroup_joined);
            eprintln!("sandbox setup failed: {e}");
            std::process::exit(SETUP_FAILED)
        }
        ForkResult::Parent { child } => {
            // Reap every orphan; leave when the program itself is done.
            loop {
                match waitpid(None, None) {
                    Ok(WaitStatus::Exited(pid, code)) if pid == child => return Ok(code),
                    Ok(WaitStatus::Signaled(pid, sig, _)) if pid == child => {
                        return Ok(128 + sig as i32);
                    }
                    Ok(_) => continue,
                    Err(nix::errno::Errno::EINTR) => continue,
                    Err(e) => {
                        return Err(SandboxError::Sys {
                            step: "wait for program".into(),
                            source: e,
                        });
                    }
                }
            }
        }
    }
}

/// Applies the process-level layers and execs. Returns only on failure.
fn exec_program(spec: &Spec, cgroup_joined: bool) -> SandboxError {
    match prepare_and_exec(spec, cgroup_joined) {
        Ok(never) => match never {},
        Err(e) => e,
    }
}

enum Never {}

fn prepare_and_exec(spec: &Spec, cgroup_joined: bool) -> Result<Never, SandboxError> {
    nix::unistd::chdir(&spec.cwd).step(format!("chdir {}", spec.cwd.display()))?;
    let l = &spec.limits;
    let mb = 1024 * 1024;
    setrlimit(Resource::RLIMIT_AS, l.memory_mb * mb, l.memory_mb * mb).step("RLIMIT_AS")?;
    if !spec.zygote {
        // (A zygote's own CPU time grows with every fork for as long as the
        // server runs: each child sets its own limit instead.)
        setrlimit(Resource::RLIMIT_CPU, l.cpu_seconds, l.cpu_seconds + 1).step("RLIMIT_CPU")?;
    }
    setrlimit(
        Resource::RLIMIT_FSIZE,
        l.file_size_mb * mb,
        l.file_size_mb * mb,
    )
    .step("RLIMIT_FSIZE")?;
    setrlimit(Resource::RLIMIT_NOFILE, l.open_files, l.open_files).step("RLIMIT_NOFILE")?;
    setrlimit(Resource::RLIMIT_CORE, 0, 0).step("RLIMIT_CORE")?;
    if !cgroup_joined && !spec.zygote {
        // Without a pids cgroup this is the fork-bomb guard. The count is
        // per user namespace owner on current kernels, so it is ours alone.
        // (A zygote's children each get a pids cgroup from the host: a
        // limit here would be shared by all of them.)
        setrlimit(Resource::RLIMIT_NPROC, l.processes, l.processes).step("RLIMIT_NPROC")?;
    }

    close_inherited_fds()?;
    let landlock = if spec.zygote {
        keep_zygote_capabilities()?;
        prctl::set_no_new_privs().step("no_new_privs")?;
        // Landlock would forbid the mounts each child needs: children
        // apply it themselves before any agent code runs.
        seccomp::apply_zygote(spec.network)?;
        "in each child"
    } else {
        drop_capability_bounding_set();
        prctl::set_no_new_privs().step("no_new_privs")?;
        let landlock = landlock_rules::restrict(spec)?;
        seccomp::apply(spec.network)?;
        landlock
    };

    if spec.env.iter().any(|(k, _)| k == "CEM_SANDBOX_REPORT") {
        let report = json!({
            "landlock": landlock,
            "seccomp": "on",
            "no_new_privs": true,
            "cgroup": cgroup_joined,
            "network_namespace": !spec.network,
        });
        eprintln!("{REPORT_PREFIX}{report}");
    }

    let program = cstring(spec.program.as_os_str().as_encoded_bytes())?;
    let argv = spec
        .argv
        .iter()
        .map(|a| cstring(a.as_bytes()))
        .collect::<Result<Vec<_>, _>>()?;
    let env = spec
        .env
        .iter()
        .map(|(k, v)| cstring(format!("{k}={v}").as_bytes()))
        .collect::<Result<Vec<_>, _>>()?;
    match execve(&program, &argv, &env) {
        Ok(never) => match never {},
        Err(e) => Err(SandboxError::Sys {
            step: format!("execve {}", spec.program.display()),
            source: e,
        }),
    }
}

fn cstring(bytes: &[u8]) -> Result<CString, SandboxError> {
    CString::new(bytes).map_err(|_| SandboxError::Other("argument contains a NUL byte".into()))
}

/// Closes every fd above stderr: the program inherits nothing else.
fn close_inherited_fds() -> Result<(), SandboxError> {
    // SAFETY: close_range only closes descriptors; no memory is involved.
    let rc = unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) };
    if rc == 0 {
        return Ok(());
    }
    // Kernels before 5.9: close what /proc says is open.
    let fds: Vec<i32> = std::fs::read_dir("/proc/self/fd")
        .step("list open fds")?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|fd| *fd > 2)
        .collect();
    for fd in fds {
        let _ = nix::unistd::close(fd);
    }
    Ok(())
}

/// Empties the capability bounding set so nothing regains a capability.
fn drop_capability_bounding_set() {
    for cap in 0..=63 {
        // SAFETY: prctl with integer arguments only.
        unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) };
    }
}

/// Capabilities a zygote keeps, in the sandbox's user namespace only (they
/// mean nothing outside it): CAP_SYS_ADMIN to make each child's mount, IPC
/// and pid namespaces and mount its /proc, /tmp and /dev/shm; CAP_SETPCAP
/// so each child can empty its bounding set. Every other capability leaves
/// the bounding set; the two are made ambient so they survive the execve of
/// the interpreter (which runs as a non-zero uid).
pub(crate) const ZYGOTE_CAPS: [u32; 2] = [CAP_SYS_ADMIN, CAP_SETPCAP];
// From <linux/capability.h> (libc does not export them).
const CAP_SETPCAP: u32 = 8;
const CAP_SYS_ADMIN: u32 = 21;

fn keep_zygote_capabilities() -> Result<(), SandboxError> {
    for cap in 0..=63u32 {
        if !ZYGOTE_CAPS.contains(&cap) {
            // SAFETY: prctl with integer arguments only.
            unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) };
        }
    }
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    let mut header = Header {
        version: VERSION_3,
        pid: 0,
    };
    let mut data = [Data::default(); 2];
    // SAFETY: header and two data structs, as capget/capset v3 expect.
    let rc = unsafe { libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) };
    if rc != 0 {
        return Err(SandboxError::Sys {
            step: "capget".into(),
            source: nix::errno::Errno::last(),
        });
    }
    let mask: u32 = ZYGOTE_CAPS.iter().map(|c| 1u32 << c).sum();
    data[0].inheritable = mask;
    data[1].inheritable = 0;
    // SAFETY: as above.
    let rc = unsafe { libc::syscall(libc::SYS_capset, &header, data.as_ptr()) };
    if rc != 0 {
        return Err(SandboxError::Sys {
            step: "capset (inheritable)".into(),
            source: nix::errno::Errno::last(),
        });
    }
    for cap in ZYGOTE_CAPS {
        // SAFETY: prctl with integer arguments only.
        let rc = unsafe {
            libc::prctl(
                libc::PR_CAP_AMBIENT,
                libc::PR_CAP_AMBIENT_RAISE,
                cap as libc::c_ulong,
                0,
                0,
            )
        };
        if rc != 0 {
            return Err(SandboxError::Sys {
                step: format!("raise ambient capability {cap}"),
                source: nix::errno::Errno::last(),
            });
        }
    }
    Ok(())
}

/// Waits for `child` (the init) and turns its end into an exit code
/// (128+signal). Meanwhile it watches stdin, the host's end of the bridge:
/// when every writer is gone (the host exited, even by SIGKILL) it kills
/// the init, and with it the whole sandbox, instead of leaving it running.
fn wait_with_lifeline(child: Pid) -> i32 {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    use nix::sys::wait::WaitPidFlag;
    let stdin = std::io::stdin();
    loop {
        match waitpid(child, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(_, code)) => return code,
            Ok(WaitStatus::Signaled(_, sig, _)) => return 128 + sig as i32,
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(_) => return SETUP_FAILED,
        }
        let mut fds = [PollFd::new(stdin.as_fd(), PollFlags::empty())];
        let hung_up = match poll(&mut fds, PollTimeout::from(200u16)) {
            Ok(_) => fds[0].revents().is_some_and(|r| {
                r.intersects(PollFlags::POLLHUP | PollFlags::POLLERR | PollFlags::POLLNVAL)
            }),
            Err(_) => false,
        };
        if hung_up {
            let _ = nix::sys::signal::kill(child, Signal::SIGKILL);
        }
    }
}
