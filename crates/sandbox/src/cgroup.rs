//! A cgroup per sandbox for memory and pids, made by the host (v2, else
//! v1) when it lets us; removed when dropped.

use std::fs;
use std::path::{Path, PathBuf};

/// The cgroup directories of one sandbox (one for v2, one per v1 controller).
#[derive(Debug)]
pub struct Cgroup {
    dirs: Vec<PathBuf>,
    /// How the sandbox is paused (an approval wait, a session between
    /// calls): cgroup v2's freezer, else stop signals.
    freezer: Freezer,
}

/// How a sandbox's processes are stopped and resumed as one.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Freezer {
    /// cgroup v2: `cgroup.freeze` in the sandbox's own directory.
    V2(PathBuf),
    /// cgroup v1: SIGSTOP and SIGCONT to every process of the sandbox's
    /// pids cgroup, swept until no new one appears.
    Signals(PathBuf),
}

pub(crate) const PARENT: &str = "code-execution-mcp";

/// The path of our group in the v1 hierarchy that has `controller`, from
/// `own` (what /proc/self/cgroup reads): `3:cpu,cpuacct:/user.slice` gives
/// `/user.slice` for `cpu`.
pub(crate) fn own_v1_group<'a>(own: &'a str, controller: &str) -> Option<&'a str> {
    own.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        controllers
            .split(',')
            .any(|c| c == controller)
            .then_some(path)
    })
}

impl Cgroup {
    /// Makes a cgroup named `name` limited to `memory_mb` and `pids`.
    /// Err says why none could be made (not root, no delegation, ...).
    pub fn create(name: &str, memory_mb: u64, pids: u64) -> Result<Cgroup, String> {
        let root = Path::new("/sys/fs/cgroup");
        let bytes = (memory_mb * 1024 * 1024).to_string();
        if root.join("cgroup.controllers").exists() {
            let base = v2_base(root)?;
            let parent = base.join(PARENT);
            make_dir(&parent)?;
            // Controllers must be enabled in the parent for children to use them.
            let _ = fs::write(base.join("cgroup.subtree_control"), "+memory +pids");
            let _ = fs::write(parent.join("cgroup.subtree_control"), "+memory +pids");
            let dir = parent.join(name);
            make_dir(&dir)?;
            let cg = Cgroup {
                dirs: vec![dir.clone()],
                freezer: Freezer::V2(dir.join("cgroup.freeze")),
            };
            write(&dir.join("memory.max"), &bytes)?;
            let _ = fs::write(dir.join("memory.swap.max"), "0");
            write(&dir.join("pids.max"), &pids.to_string())?;
            return Ok(cg);
        }
        let (memory, pids_root) = (root.join("memory"), root.join("pids"));
        if !memory.is_dir() || !pids_root.is_dir() {
            return Err("no cgroup v2 and no v1 memory and pids controllers mounted".into());
        }
        let mem_dir = memory.join(PARENT).join(name);
        let pid_dir = pids_root.join(PARENT).join(name);
        make_dir(&mem_dir)?;
        let mut cg = Cgroup {
            dirs: vec![mem_dir.clone()],
            freezer: Freezer::Signals(pid_dir.join("cgroup.procs")),
        };
        make_dir(&pid_dir)?;
        cg.dirs.push(pid_dir.clone());
        // Not the v1 freezer: a task it froze takes no SIGKILL until thawed,
        // so a server killed while a session waits between calls would
        // leave that session's processes frozen for good. A stopped
        // process dies of SIGKILL (and so of its pid namespace's end).
        write(&mem_dir.join("memory.limit_in_bytes"), &bytes)?;
        let _ = fs::write(mem_dir.join("memory.memsw.limit_in_bytes"), &bytes);
        write(&pid_dir.join("pids.max"), &pids.to_string())?;
        Ok(cg)
    }

    /// Removes empty sandbox cgroups left by a server that was killed.
    /// (rmdir refuses a cgroup that still holds processes.) Only those of
    /// servers that are gone: a live server's cgroup is empty for a moment
    /// between its making and its first process, and removing it then
    /// failed that sandbox's start (one tenant's first execution broke
    /// another's fork).
    pub fn sweep_stale() {
        for controller in ["memory", "pids", ""] {
            let parent = Path::new("/sys/fs/cgroup").join(controller).join(PARENT);
            if let Ok(entries) = fs::read_dir(&parent) {
                for e in entries.flatten() {
                    let name = e.file_name();
                    if e.path().is_dir() && stale(&name.to_string_lossy()) {
                        let _ = fs::remove_dir(e.path());
                    }
                }
            }
        }
    }

    pub fn dirs(&self) -> &[PathBuf] {
        &self.dirs
    }

    /// Stops every process of the sandbox until [`Cgroup::thaw`]: they get
    /// no CPU and make no system calls (a thread cannot go on working while
    /// another waits for a person's approval, nor between a session's
    /// calls). `exempt`: a process of the cgroup that must keep running (a
    /// cold sandbox's launcher, which watches for the server's end and
    /// kills the sandbox then: frozen, it would leave a killed server's
    /// sandbox stopped for good); with one, stop signals are used on v2
    /// too. True when the sandbox is stopped; on false nothing is left
    /// stopped.
    pub fn freeze(&self, exempt: Option<u32>) -> bool {
        match (&self.freezer, exempt) {
            (Freezer::V2(file), None) => fs::write(file, "1").is_ok(),
            (Freezer::V2(file), Some(_)) => {
                let stopped = stop_all(&file.with_file_name("cgroup.procs"), exempt);
                if !stopped {
                    self.thaw();
                }
                stopped
            }
            (Freezer::Signals(procs), _) => {
                let stopped = stop_all(procs, exempt);
                if !stopped {
                    self.thaw();
                }
                stopped
            }
        }
    }

    /// Resumes what [`Cgroup::freeze`] stopped (harmless when nothing was).
    pub fn thaw(&self) {
        match &self.freezer {
            Freezer::V2(file) => {
                let _ = fs::write(file, "0");
                cont_all(&file.with_file_name("cgroup.procs"));
            }
            Freezer::Signals(procs) => cont_all(procs),
        }
    }

    /// What pauses this sandbox, in words (for doctor and the README).
    pub fn freezer_kind(&self) -> &'static str {
        match self.freezer {
            Freezer::V2(_) => "cgroup v2 freezer",
            Freezer::Signals(_) => "SIGSTOP to every process of its pids cgroup",
        }
    }

    /// Memory charged to the cgroup now (v1 usage_in_bytes / v2 current).
    pub fn memory_used(&self) -> Option<u64> {
        self.dirs.iter().find_map(|d| {
            ["memory.usage_in_bytes", "memory.current"]
                .iter()
                .find_map(|f| fs::read_to_string(d.join(f)).ok()?.trim().parse().ok())
        })
    }

    /// Whether the memory limit was hit (v1 failcnt / v2 events).
    pub fn memory_exhausted(&self) -> bool {
        self.dirs.iter().any(|d| {
            let v1 = fs::read_to_string(d.join("memory.failcnt"))
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok());
            let v2 = fs::read_to_string(d.join("memory.events")).ok().map(|s| {
                s.lines()
                    .any(|l| l.starts_with("oom_kill ") && !l.ends_with(" 0"))
            });
            v1.is_some_and(|n| n > 0) || v2.unwrap_or(false)
        })
    }
}

impl Cgroup {
    /// Kills what is left inside and removes the directories that are
    /// empty by now, without waiting: true when all are gone. A killed
    /// tree takes a while to exit (a fork bomb's hundred processes, a big
    /// interpreter's memory), and waiting here held the one thread that
    /// prepares every tenant's sandboxes: call it again a little later.
    pub fn try_remove(&mut self) -> bool {
        self.thaw();
        self.dirs.retain(|dir| {
            if let Ok(procs) = fs::read_to_string(dir.join("cgroup.procs")) {
                for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
                    signal(pid, nix::sys::signal::Signal::SIGKILL);
                }
            }
            fs::remove_dir(dir).is_err() && dir.exists()
        });
        self.dirs.is_empty()
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // A frozen process takes its SIGKILL only once thawed.
        self.thaw();
        for dir in &self.dirs {
            // Anything still inside (a leftover of a killed tree) goes first.
            if let Ok(procs) = fs::read_to_string(dir.join("cgroup.procs")) {
                for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(pid),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
            }
            for _ in 0..50 {
                if fs::remove_dir(dir).is_ok() || !dir.exists() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        }
    }
}

fn v2_base(root: &Path) -> Result<PathBuf, String> {
    let own = fs::read_to_string("/proc/self/cgroup")
        .map_err(|e| format!("read /proc/self/cgroup: {e}"))?;
    let rel = own
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .ok_or("no cgroup v2 entry in /proc/self/cgroup")?;
    Ok(root.join(rel.trim_start_matches('/')))
}

/// Whether a sandbox cgroup named `x<server pid>-<n>` (or a probe's,
/// `probe-<server pid>-<n>`) belongs to a server that is gone (not this
/// one, and no such process).
fn stale(name: &str) -> bool {
    let Some(pid) = name
        .strip_prefix("probe-")
        .or_else(|| name.strip_prefix('x'))
        .and_then(|rest| rest.split_once('-'))
        .and_then(|(pid, _)| pid.parse::<u32>().ok())
    else {
        return false;
    };
    pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists()
}

/// Sends SIGSTOP to every process in `procs` but `exempt`, until two
/// sweeps in a row see them all stopped: one forked between two sweeps is
/// caught by the next, and one continued by another before that other
/// stopped is caught by the second clean sweep (a stopped process signals
/// no one). False if that does not happen within about 25 ms.
fn stop_all(procs: &Path, exempt: Option<u32>) -> bool {
    let mut clean = 0;
    for _ in 0..50 {
        let running: Vec<i32> = pids_in(procs)
            .into_iter()
            .filter(|p| Some(*p as u32) != exempt)
            .filter(|p| !matches!(state(*p), Some('T' | 't' | 'Z' | 'X') | None))
            .collect();
        if running.is_empty() {
            clean += 1;
            if clean == 2 {
                return true;
            }
            continue;
        }
        clean = 0;
        for pid in running {
            signal(pid, nix::sys::signal::Signal::SIGSTOP);
        }
        std::thread::sleep(std::time::Duration::from_micros(500));
    }
    false
}

/// Sends SIGCONT to every process in `procs`.
fn cont_all(procs: &Path) {
    for pid in pids_in(procs) {
        signal(pid, nix::sys::signal::Signal::SIGCONT);
    }
}

/// A process's state letter (`R`, `S`, `T` stopped, `Z`, ...), if it exists.
fn state(pid: i32) -> Option<char> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.chars().next()
}

/// The processes listed in a `cgroup.procs`.
fn pids_in(procs: &Path) -> Vec<i32> {
    fs::read_to_string(procs)
        .map(|s| s.lines().filter_map(|l| l.trim().parse().ok()).collect())
        .unwrap_or_default()
}

fn signal(pid: i32, sig: nix::sys::signal::Signal) {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig);
}

fn make_dir(dir: &Path) -> Result<(), String> {
    fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))
}

fn write(path: &Path, value: &str) -> Result<(), String> {
    fs::write(path, value).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_cgroups_of_servers_that_are_gone_are_stale() {
        assert!(!stale(&format!("x{}-3", std::process::id())));
        assert!(!stale("x1-0"), "pid 1 is alive");
        assert!(stale("x4194305-7"), "past the largest pid");
        assert!(stale("probe-4194305-0"));
        assert!(!stale("background") && !stale("tenants") && !stale("x-1"));
    }

    #[test]
    fn without_a_freezer_every_process_is_stopped_and_resumed_by_signals() {
        let Ok(mut child) = std::process::Command::new("sleep").arg("30").spawn() else {
            return;
        };
        let dir = std::env::temp_dir().join(format!("cem-freeze-{}", std::process::id()));
        let _ = fs::create_dir_all(&dir);
        let procs = dir.join("cgroup.procs");
        let _ = fs::write(&procs, format!("{}\n", child.id()));
        let cg = Cgroup {
            dirs: Vec::new(),
            freezer: Freezer::Signals(procs),
        };
        assert!(cg.freeze(None));
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(state(child.id() as i32), Some('T'));
        cg.thaw();
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_ne!(state(child.id() as i32), Some('T'));
        let _ = child.kill();
        let _ = child.wait();
        let _ = fs::remove_dir_all(&dir);
    }
}
