//! CPU priority for forked sandboxes: the work that prepares the *next*
//! sandbox runs below everything else.
//!
//! A forked sandbox costs CPU before and after its execution: the zygote's
//! fork, the child's namespaces, mounts and warm-up while it waits in the
//! pool, and the teardown of its memory when it is killed. Executions back
//! to back (or many clients at once) keep two or three of those in flight
//! beside the one execution someone waits for, and at equal priority they
//! take turns with it: on two cores that tripled the wait.
//!
//! So the zygote (and with it every child it forks) is started in a
//! low-weight cpu cgroup of its own, `code-execution-mcp/background` under
//! the server's own (cgroup v1 `cpu.shares` [`BACKGROUND_SHARES`] against
//! 1024 for every other process). A
//! child that is set up and warmed moves to the server's own cpu cgroup
//! before it waits in the pool (a child someone waits for moves as soon as
//! it exists), so an execution runs exactly as in a cold sandbox and no move
//! stands in its way: a move can block for milliseconds after a quiet spell,
//! while the kernel waits for an RCU grace period. A used child's interpreter
//! moves back before it is killed, so its teardown is background work again.
//! Background work still runs at full speed whenever a core is idle: the
//! weight only orders who waits.
//!
//! Only cgroup v1's `cpu` hierarchy is used. On cgroup v2 a process lives in
//! one cgroup, and a forked child's is its own memory and pids cgroup, so
//! priority there would mean a `cpu.weight` per child; not done yet, and
//! [`CpuPriority::get`] says so.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use crate::cgroup::own_v1_group;

/// The two cpu cgroups of forked sandboxes.
#[derive(Debug)]
pub struct CpuPriority {
    /// `cgroup.procs` of the low-weight group (zygotes, pooled and ending children).
    background: PathBuf,
    /// `cgroup.procs` of the server's own cpu cgroup (a child running an execution).
    foreground: PathBuf,
}

/// `cpu.shares` of the background group, against the 1024 of every other
/// process: small enough that a running execution rarely waits for the next
/// sandbox's preparation, large enough that a fork still gets through in
/// about half a second while eight executions keep both cores busy (at the
/// kernel's minimum of 2 it would take seconds, near the fork timeout).
/// Back to back, 2, 16 and 64 measured alike within the machine's drift.
pub const BACKGROUND_SHARES: u32 = 16;

/// `cpu.shares` of each tenant's group: the kernel's default, the same
/// for every tenant.
pub const TENANT_SHARES: u32 = 1024;

/// `cpu.shares` of a tenant's group while it uses all the CPU its limit
/// allows (see [`ShareWatch`]): a tenant that has used its whole allowance
/// yields to every tenant that has not. Measured (idle-session attack alone,
/// `bench_hostile.py`, 1 + 1.5 minutes): ordinary p99 about 64 ms with the
/// busy tenants at 1024, 55 ms at 128, 50 ms at 16; search_tools, done only on
/// the host, 17 to 38 ms at 1024 and 11 ms at 16.
pub const DEMOTED_SHARES: u32 = 16;

/// How often the tenants' groups are looked at for throttling.
const WATCH_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

/// Groups looked at per tick, at most (see [`ShareWatch::look_all`]).
const LOOKS_PER_TICK: usize = 64;

/// Looks without a new throttled period, in a row, before a demoted tenant
/// gets its weight back (a second): a tenant that spins in bursts must not
/// flip between the two weights every period.
const QUIET_LOOKS: u32 = 10;

/// The bandwidth period of a tenant's group (the kernel's default).
const PERIOD_US: u64 = 100_000;

/// The most of the host's CPU one tenant's group may use, in percent of all
/// cores (`sandbox.tenant_cpu_percent`); 100 sets no limit. Read when a
/// tenant's group is first used in this process.
static TENANT_CPU_PERCENT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(100);

/// The one tenant given no limit (the local one), set with the limit.
static UNLIMITED_TENANT: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Sets the limit [`CpuPriority::tenant`] gives the groups it makes from now
/// on (the server's config, before its first tenant), and the tenant that
/// gets none.
pub fn limit_tenants_to(percent: u32, except: &str) {
    TENANT_CPU_PERCENT.store(percent.clamp(1, 100), std::sync::atomic::Ordering::Relaxed);
    let _ = UNLIMITED_TENANT.set(except.to_string());
}

/// `cpu.cfs_quota_us` for a tenant limited to `percent` of `cores` cores;
/// -1 (no limit) at 100 percent. At least a millisecond per period.
fn tenant_quota(percent: u32, cores: usize) -> i64 {
    if percent >= 100 {
        return -1;
    }
    let quota = PERIOD_US * cores as u64 * u64::from(percent) / 100;
    quota.max(1_000) as i64
}

impl CpuPriority {
    /// The server's cpu priority groups, made once per process; Err says
    /// why there are none (and so why preparation runs at full priority).
    pub fn get() -> Result<&'static CpuPriority, &'static str> {
        static GROUPS: OnceLock<Result<CpuPriority, String>> = OnceLock::new();
        GROUPS
            .get_or_init(|| {
                let own = fs::read_to_string("/proc/self/cgroup")
                    .map_err(|e| format!("cannot read /proc/self/cgroup: {e}"))?;
                Self::make(Path::new("/sys/fs/cgroup"), &own)
            })
            .as_ref()
            .map_err(String::as_str)
    }

    /// Makes the background group under `root` (where cgroup hierarchies
    /// are mounted), for a process whose /proc/self/cgroup reads `own`.
    fn make(root: &Path, own: &str) -> Result<CpuPriority, String> {
        let rel = own_v1_group(own, "cpu").ok_or(
            "no cgroup v1 cpu controller (cgroup v2 is not used for priority yet): the next \
             sandbox is prepared at full priority",
        )?;
        let mount = root.join("cpu");
        if !mount.join("cpu.shares").exists() {
            return Err(format!(
                "the cgroup v1 cpu controller is not mounted at {}",
                mount.display()
            ));
        }
        let foreground = mount.join(rel.trim_start_matches('/'));
        // In a container without its own cgroup namespace the path names a
        // cgroup of the host's tree that is not mounted here: none is made.
        if !foreground.join("cgroup.procs").is_file() {
            return Err(format!(
                "our cpu cgroup {rel} is not under {}",
                mount.display()
            ));
        }
        let background = foreground.join(crate::cgroup::PARENT).join("background");
        fs::create_dir_all(&background)
            .map_err(|e| format!("cannot create {}: {e}", background.display()))?;
        fs::write(background.join("cpu.shares"), BACKGROUND_SHARES.to_string())
            .map_err(|e| format!("cannot set {}/cpu.shares: {e}", background.display()))?;
        Ok(CpuPriority {
            background: background.join("cgroup.procs"),
            foreground: foreground.join("cgroup.procs"),
        })
    }

    /// The background group's `cgroup.procs`: a process that writes `0`
    /// into it moves itself there (how a zygote's launcher joins it before
    /// it runs anything).
    pub fn background_procs(&self) -> &Path {
        &self.background
    }

    /// Moves the calling thread (only it) to the background group: the
    /// host's own thread that prepares sandboxes nobody waits for yet.
    pub fn join_background_thread(&self) -> Result<(), String> {
        let tasks = self.background.with_file_name("tasks");
        fs::write(&tasks, nix::unistd::gettid().to_string())
            .map_err(|e| format!("cannot move this thread into {}: {e}", tasks.display()))
    }

    /// Whether process `pid` is in the background group.
    pub fn holds(&self, pid: u32) -> bool {
        fs::read_to_string(&self.background)
            .is_ok_and(|procs| procs.lines().any(|l| l.trim() == pid.to_string()))
    }

    /// The priority groups of one tenant, made on first use (and kept for
    /// the life of the process): `tenants/<tenant>` beside the background
    /// group, weighted like every other tenant (`cpu.shares` 1024), where
    /// its sandboxes run their executions, and its own background group
    /// inside it, where its zygote and pool prepare sandboxes. So tenants
    /// share the CPU by equal weight however many processes each runs, and
    /// a tenant's preparation yields to its own executions, not to other
    /// tenants' (a hostile tenant's CPU bomb starved everyone's pool when
    /// all preparation shared one low-weight group). `tenant` is a safe
    /// directory name (a tenant id).
    pub fn tenant(&self, tenant: &str) -> Result<&'static CpuPriority, String> {
        static TENANTS: Mutex<Option<HashMap<String, &'static CpuPriority>>> = Mutex::new(None);
        if tenant.is_empty() || tenant.contains(['/', '\\']) || tenant.starts_with('.') {
            return Err(format!("unusable tenant id {tenant:?}"));
        }
        let mut made = TENANTS.lock().map_err(|_| "a poisoned lock")?;
        let made = made.get_or_insert_with(HashMap::new);
        if let Some(groups) = made.get(tenant) {
            return Ok(groups);
        }
        let ours = self
            .background
            .parent()
            .and_then(Path::parent)
            .ok_or("the background group has no parent")?;
        let dir = ours.join("tenants").join(tenant);
        let background = dir.join("background");
        for (group, shares) in [(&dir, TENANT_SHARES), (&background, BACKGROUND_SHARES)] {
            fs::create_dir_all(group)
                .map_err(|e| format!("cannot create {}: {e}", group.display()))?;
            fs::write(group.join("cpu.shares"), shares.to_string())
                .map_err(|e| format!("cannot set {}/cpu.shares: {e}", group.display()))?;
        }
        // Shares alone do not hold: ten Python threads of one sandbox
        // handing their interpreter lock to each other (a futex wake every
        // few microseconds) kept other tenants' groups, of the same weight,
        // waiting for a core for up to seconds (`perf sched latency`),
        // where sixteen busy processes did not. A bandwidth limit is not a
        // matter of who wakes when: past its quota a group waits for the
        // next period. The local tenant (one person's server) has none.
        let percent = if UNLIMITED_TENANT.get().is_some_and(|t| t == tenant) {
            100
        } else {
            TENANT_CPU_PERCENT.load(std::sync::atomic::Ordering::Relaxed)
        };
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let quota = tenant_quota(percent, cores);
        // A group left by an earlier server (groups outlive it) may carry
        // settings of its own: an idle flag would starve the tenant.
        if dir.join("cpu.idle").exists() {
            let _ = fs::write(dir.join("cpu.idle"), "0");
        }
        // A limit the kernel refuses (a parent group with a smaller quota
        // of its own) leaves the tenant its group and its weight, and says so.
        let mut limited = quota > 0;
        for (name, value) in [
            ("cpu.cfs_period_us", PERIOD_US as i64),
            ("cpu.cfs_quota_us", quota),
        ] {
            if let Err(e) = fs::write(dir.join(name), value.to_string()) {
                tracing::warn!(error = %e, group = %dir.display(), "cannot set {name}: this tenant's cpu use is not limited");
                limited = false;
                break;
            }
        }
        if limited {
            ShareWatch::add(&dir, &self.foreground.with_file_name("tasks"));
        }
        let groups: &'static CpuPriority = Box::leak(Box::new(CpuPriority {
            background: background.join("cgroup.procs"),
            foreground: dir.join("cgroup.procs"),
        }));
        made.insert(tenant.to_string(), groups);
        Ok(groups)
    }

    /// Makes every process `cmd` starts begin its life in this group's
    /// foreground (the tenant's weight), before it runs anything, so all it
    /// forks is counted there too: a tenant's upstream servers share its
    /// weight instead of weighing as much as a whole tenant each. The group
    /// is opened here, in the parent; the child only writes `0` into it
    /// (async-signal-safe). Err (and nothing changed) when it cannot be
    /// opened.
    #[allow(unsafe_code)]
    pub fn start_in_foreground(&self, cmd: &mut std::process::Command) -> Result<(), String> {
        use std::io::Write;
        use std::os::unix::process::CommandExt;
        let procs = fs::OpenOptions::new()
            .write(true)
            .open(&self.foreground)
            .map_err(|e| format!("cannot open {}: {e}", self.foreground.display()))?;
        // SAFETY: the hook runs between fork and exec and only writes two
        // bytes to a file opened before the fork; a failed write leaves the
        // process where it was, at the server's weight, which is no worse
        // than before this hook existed.
        unsafe {
            cmd.pre_exec(move || {
                let _ = (&procs).write(b"0");
                Ok(())
            });
        }
        Ok(())
    }

    /// Moves the calling thread (only it) to this group's foreground, for
    /// host work done on a tenant's behalf; [`CpuPriority::join_thread`] on
    /// the server's groups moves it back.
    pub fn join_thread(&self) -> Result<(), String> {
        let tasks = self.foreground.with_file_name("tasks");
        fs::write(&tasks, nix::unistd::gettid().to_string())
            .map_err(|e| format!("cannot move this thread into {}: {e}", tasks.display()))
    }

    /// Moves process `pid` to the server's own cpu cgroup (full priority).
    pub fn to_foreground(&self, pid: u32) -> Result<(), String> {
        write_pid(&self.foreground, pid)
    }

    /// Moves process `pid` to the background group.
    pub fn to_background(&self, pid: u32) -> Result<(), String> {
        write_pid(&self.background, pid)
    }
}

/// Lowers the weight of a tenant's group while it runs into its bandwidth
/// limit, and gives it back once it has not for [`QUIET_LOOKS`] looks.
///
/// The limit caps how much a busy tenant takes, not how long the others
/// wait for a core: at equal weight a tenant's group of sixty spinning
/// threads kept another tenant's woken thread runnable and waiting for
/// 19 ms at a time (`perf sched timehist`), until the busy group ran out of
/// quota. At [`DEMOTED_SHARES`] the busy group still gets every core nobody
/// else wants, up to its limit, but a quiet tenant's work runs first. Only
/// groups with a limit are watched: being throttled is what says a tenant
/// has used its share (the local tenant has no limit and is never demoted).
#[derive(Debug)]
struct ShareWatch {
    dir: PathBuf,
    /// `nr_throttled` from the group's `cpu.stat` at the last look.
    throttled: u64,
    /// Looks since the last new throttled period.
    quiet: u32,
    demoted: bool,
}

/// What one look at a group decides.
#[derive(Debug, PartialEq, Eq)]
enum Weight {
    Keep,
    Demote,
    Restore,
}

impl ShareWatch {
    /// Watches `dir` from now on; the first time, starts the thread that
    /// looks at every watched group, in the server's own cpu group (`home`,
    /// its `tasks` file): started from a thread that works for a tenant, it
    /// would otherwise sit in that tenant's group, and wait whenever that
    /// tenant runs into its limit.
    fn add(dir: &Path, home: &Path) {
        static STARTED: std::sync::Once = std::sync::Once::new();
        let throttled = nr_throttled(dir).unwrap_or(0);
        let Ok(mut watched) = WATCHED.lock() else {
            return;
        };
        watched.groups.push(ShareWatch {
            dir: dir.to_path_buf(),
            throttled,
            quiet: 0,
            demoted: false,
        });
        drop(watched);
        STARTED.call_once(|| {
            let home = home.to_path_buf();
            let started = std::thread::Builder::new()
                .name("cem-cpu-share".into())
                .spawn(move || {
                    if let Err(e) = fs::write(&home, nix::unistd::gettid().to_string()) {
                        tracing::warn!(error = %e, "the thread that weighs busy tenants stays in the group it was started in");
                    }
                    loop {
                        std::thread::sleep(WATCH_EVERY);
                        ShareWatch::look_all();
                    }
                });
            if let Err(e) = started {
                tracing::warn!(error = %e, "cannot start the thread that lowers busy tenants' cpu weight: tenants keep equal weight");
            }
        });
    }

    /// Looks at the next [`LOOKS_PER_TICK`] groups (all of them on a
    /// server with fewer tenants): a look reads a file, and a server with
    /// hundreds of tenants must not spend a tenth of a core reading them.
    /// There a group is looked at less often, and demoted and restored
    /// later, in proportion.
    fn look_all() {
        let Ok(mut watched) = WATCHED.lock() else {
            return;
        };
        let Watched { groups, next } = &mut *watched;
        let count = groups.len();
        let (first, take, after) = tick_window(*next, count);
        *next = after;
        for i in (first..first + take).map(|i| i % count) {
            let Some(watch) = groups.get_mut(i) else {
                continue;
            };
            let Some(now) = nr_throttled(&watch.dir) else {
                continue;
            };
            let shares = match watch.look(now) {
                Weight::Keep => continue,
                Weight::Demote => DEMOTED_SHARES,
                Weight::Restore => TENANT_SHARES,
            };
            if let Err(e) = fs::write(watch.dir.join("cpu.shares"), shares.to_string()) {
                tracing::warn!(error = %e, group = %watch.dir.display(), "cannot change a tenant's cpu weight");
            }
        }
    }

    /// One look, with the group's `nr_throttled` now.
    fn look(&mut self, throttled: u64) -> Weight {
        let more = throttled != self.throttled;
        self.throttled = throttled;
        if more {
            self.quiet = 0;
            if !self.demoted {
                self.demoted = true;
                return Weight::Demote;
            }
            return Weight::Keep;
        }
        self.quiet = self.quiet.saturating_add(1);
        if self.demoted && self.quiet >= QUIET_LOOKS {
            self.demoted = false;
            return Weight::Restore;
        }
        Weight::Keep
    }
}

/// Where a tick's looks start among `count` groups, how many it takes, and
/// where the tick after it starts, when the last tick left off at `next`.
/// That is kept below the count, so that groups added between ticks, which
/// are appended, do not move where the next tick starts.
fn tick_window(next: usize, count: usize) -> (usize, usize, usize) {
    let first = next % count.max(1);
    let take = count.min(LOOKS_PER_TICK);
    (first, take, (first + take) % count.max(1))
}

/// The tenants' groups that have a bandwidth limit, and where the next
/// tick's looks start.
struct Watched {
    groups: Vec<ShareWatch>,
    next: usize,
}

static WATCHED: Mutex<Watched> = Mutex::new(Watched {
    groups: Vec::new(),
    next: 0,
});

/// `nr_throttled` of the group at `dir`: the periods in which it ran out of quota.
fn nr_throttled(dir: &Path) -> Option<u64> {
    let stat = fs::read_to_string(dir.join("cpu.stat")).ok()?;
    stat.lines()
        .find_map(|l| l.strip_prefix("nr_throttled "))
        .and_then(|n| n.trim().parse().ok())
}

fn write_pid(procs: &Path, pid: u32) -> Result<(), String> {
    fs::write(procs, pid.to_string())
        .map_err(|e| format!("cannot move process {pid} into {}: {e}", procs.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenants_quota_is_its_share_of_every_core() {
        assert_eq!(tenant_quota(100, 2), -1);
        assert_eq!(tenant_quota(37, 2), 74_000);
        assert_eq!(tenant_quota(50, 8), 400_000);
        // Never below a millisecond a period.
        assert_eq!(tenant_quota(1, 0), 1_000);
    }

    #[test]
    fn a_tenant_that_runs_into_its_limit_weighs_less_until_it_has_not_for_a_second() {
        let mut watch = ShareWatch {
            dir: PathBuf::new(),
            throttled: 3,
            quiet: 0,
            demoted: false,
        };
        assert_eq!(watch.look(3), Weight::Keep);
        assert_eq!(watch.look(4), Weight::Demote);
        // Still throttled: no write.
        assert_eq!(watch.look(9), Weight::Keep);
        for _ in 1..QUIET_LOOKS {
            assert_eq!(watch.look(9), Weight::Keep);
        }
        // A new throttled period starts the quiet count again.
        assert_eq!(watch.look(10), Weight::Keep);
        for _ in 1..QUIET_LOOKS {
            assert_eq!(watch.look(10), Weight::Keep);
        }
        assert_eq!(watch.look(10), Weight::Restore);
        assert_eq!(watch.look(10), Weight::Keep);
        assert_eq!(watch.look(11), Weight::Demote);
    }

    #[test]
    fn ticks_take_the_groups_in_turn_and_groups_added_between_them_wait_their_turn() {
        // 100 groups, 64 looks a tick: 25 ticks look at each exactly 16 times.
        let (mut next, mut looked) = (0, vec![0u32; 100]);
        for _ in 0..25 {
            let (first, take, after) = tick_window(next, 100);
            for i in first..first + take {
                looked[i % 100] += 1;
            }
            next = after;
        }
        assert!(looked.iter().all(|n| *n == 16), "{looked:?}");
        // Two ticks over 100 groups stop at group 28; a hundred groups
        // added then (at the end) do not move where the third starts.
        assert_eq!(tick_window(64, 100), (64, 64, 28));
        assert_eq!(tick_window(28, 200), (28, 64, 92));
        assert_eq!(tick_window(7, 0), (0, 0, 0));
    }

    #[test]
    fn reads_the_throttled_periods_of_a_group() {
        let Ok(dir) = tempfile::tempdir() else {
            panic!("a temporary directory");
        };
        assert_eq!(nr_throttled(dir.path()), None);
        let _ = fs::write(
            dir.path().join("cpu.stat"),
            "nr_periods 40\nnr_throttled 7\nthrottled_time 123\n",
        );
        assert_eq!(nr_throttled(dir.path()), Some(7));
    }

    #[test]
    fn finds_the_cpu_hierarchy_among_v1_lines() {
        let own = "9:name=systemd:/\n4:memory:/a/b\n3:cpuset:/\n2:cpu,cpuacct:/user.slice\n0::/\n";
        assert_eq!(own_v1_group(own, "cpu"), Some("/user.slice"));
        assert_eq!(own_v1_group("1:cpu:/\n0::/x\n", "cpu"), Some("/"));
        // cpuset and cpuacct are not cpu; a v2-only host has no such line.
        assert_eq!(
            own_v1_group("3:cpuset:/\n2:cpuacct:/\n0::/x\n", "cpu"),
            None
        );
        assert_eq!(
            own_v1_group("0::/user.slice/session-1.scope\n", "cpu"),
            None
        );
    }

    #[test]
    fn makes_a_low_weight_group_under_the_servers_own() {
        let Ok(root) = tempfile::tempdir() else {
            panic!("a temporary directory");
        };
        let server = root.path().join("cpu/user.slice");
        let Ok(()) = fs::create_dir_all(&server) else {
            panic!("the fake hierarchy");
        };
        let _ = fs::write(root.path().join("cpu/cpu.shares"), "1024");
        // A path that is not there (another tree's): no group is made for it.
        let Err(why) = CpuPriority::make(root.path(), "2:cpu,cpuacct:/user.slice\n") else {
            panic!("a missing cgroup must not be made up");
        };
        assert!(why.contains("not under"), "{why}");
        assert!(!server.join("code-execution-mcp").exists());
        let _ = fs::write(server.join("cgroup.procs"), "");
        let made = CpuPriority::make(root.path(), "2:cpu,cpuacct:/user.slice\n");
        let Ok(groups) = made else {
            panic!("{made:?}");
        };
        let background = server.join("code-execution-mcp/background");
        assert_eq!(groups.background_procs(), background.join("cgroup.procs"));
        assert_eq!(
            fs::read_to_string(background.join("cpu.shares"))
                .ok()
                .as_deref(),
            Some(BACKGROUND_SHARES.to_string().as_str())
        );
        // A tenant's groups: its own of equal weight, and its background inside.
        let Ok(alice) = groups.tenant("token-alice") else {
            panic!("a tenant's groups");
        };
        let tenant = server.join("code-execution-mcp/tenants/token-alice");
        assert_eq!(
            alice.background_procs(),
            tenant.join("background/cgroup.procs")
        );
        let shares = |dir: &Path| fs::read_to_string(dir.join("cpu.shares")).ok();
        assert_eq!(shares(&tenant).as_deref(), Some("1024"));
        assert_eq!(
            shares(&tenant.join("background")).as_deref(),
            Some(BACKGROUND_SHARES.to_string().as_str())
        );
        assert!(groups.tenant("../escape").is_err());
        let Ok(()) = groups.to_foreground(42) else {
            panic!("the move is a write");
        };
        assert_eq!(
            fs::read_to_string(server.join("cgroup.procs"))
                .ok()
                .as_deref(),
            Some("42")
        );
        // A v2-only host: no priority, and the reason says so.
        let Err(why) = CpuPriority::make(root.path(), "0::/user.slice\n") else {
            panic!("no v1 cpu line means no priority groups");
        };
        assert!(why.contains("cgroup v2"), "{why}");
    }
}
