//! A short scheduler slice for the server's own threads, so a request that
//! wakes one does not wait for a busy tenant's slice to run out.
//!
//! On Linux's EEVDF scheduler (6.6 and later) a task that wakes preempts the
//! running one only when its virtual deadline is earlier, and the deadline
//! is its slice away. Every task asks for the same default slice (a few
//! milliseconds on a small host), so a server thread woken by a request
//! while a tenant's spinning code holds the core waits for that code's slice
//! to end, and behind a cpu group's entity for longer (`perf sched latency`
//! under a CPU bomb: up to 13 ms). Since 6.12 a thread may ask for a
//! shorter slice (`sched_attr.sched_runtime`, 0.1 to 100 ms, no privilege
//! needed); its deadline is then near, and it runs soon after it wakes. A
//! cpu group's entity takes the shortest slice of what it holds, so a
//! tenant's lane workers get through their group's entity too. The server's
//! threads do little at a time and sleep again, so they give up nothing.
//!
//! The slice is asked with `SCHED_FLAG_RESET_ON_FORK`: threads and
//! processes these threads start (sandboxes, upstream servers, package
//! installs) begin with the kernel's default slice, so tenants' code never
//! runs with the short one. Older kernels ignore `sched_runtime` for
//! ordinary threads; the call then changes nothing, which is fine: this is
//! latency, not isolation.

// The two scheduler calls have no safe wrapper in libc or nix.
#![allow(unsafe_code)]

/// The slice asked for: the kernel's minimum.
const SLICE_NS: u64 = 100_000;

/// `SCHED_FLAG_RESET_ON_FORK` (uapi/linux/sched.h).
const RESET_ON_FORK: u64 = 0x01;

/// `struct sched_attr` as of `SCHED_ATTR_SIZE_VER1` (uapi/linux/sched/types.h).
#[repr(C)]
#[derive(Default)]
struct SchedAttr {
    size: u32,
    sched_policy: u32,
    sched_flags: u64,
    sched_nice: i32,
    sched_priority: u32,
    sched_runtime: u64,
    sched_deadline: u64,
    sched_period: u64,
    sched_util_min: u32,
    sched_util_max: u32,
}

/// Asks the kernel for a short slice for the calling thread (not for what it
/// starts). Its policy and nice value stay as they are; a thread that is not
/// `SCHED_OTHER` is left alone. Ok(true): the thread has the short slice;
/// Ok(false): the kernel took the call but keeps no slice for an ordinary
/// thread (before 6.12), or the thread is not `SCHED_OTHER`; Err: the
/// kernel refused (the thread runs with the default slice).
pub fn short_slice_for_this_thread() -> std::io::Result<bool> {
    let attr = this_threads_attr()?;
    if attr.sched_policy != libc::SCHED_OTHER as u32 {
        return Ok(false);
    }
    let attr = SchedAttr {
        size: std::mem::size_of::<SchedAttr>() as u32,
        sched_policy: attr.sched_policy,
        sched_flags: RESET_ON_FORK,
        sched_nice: attr.sched_nice,
        sched_runtime: SLICE_NS,
        ..SchedAttr::default()
    };
    // SAFETY: `attr` is a valid `sched_attr` whose `size` field says its
    // size; pid 0 names the calling thread.
    let set = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const SchedAttr, 0) };
    if set != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(this_threads_attr()?.sched_runtime == SLICE_NS)
}

/// The calling thread's `sched_attr`.
fn this_threads_attr() -> std::io::Result<SchedAttr> {
    let size = std::mem::size_of::<SchedAttr>() as u32;
    let mut attr = SchedAttr {
        size,
        ..SchedAttr::default()
    };
    // SAFETY: `attr` is a writable `sched_attr` of `size` bytes, and pid 0
    // names the calling thread.
    let got = unsafe {
        libc::syscall(
            libc::SYS_sched_getattr,
            0,
            &mut attr as *mut SchedAttr,
            size,
            0,
        )
    };
    if got != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(attr)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runtime_of_this_thread() -> Option<(u64, u64)> {
        this_threads_attr()
            .ok()
            .map(|a| (a.sched_runtime, a.sched_flags))
    }

    /// `se.slice` (ns) of a process started from the calling thread.
    fn slice_of_a_started_process() -> Option<u64> {
        let out = std::process::Command::new("cat")
            .arg("/proc/self/sched")
            .output()
            .ok()?;
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .find_map(|l| l.strip_prefix("se.slice"))
            .and_then(|rest| rest.trim_start_matches([' ', ':']).trim().parse().ok())
    }

    #[test]
    fn the_slice_is_the_threads_own_and_not_what_it_starts() {
        let handle = std::thread::spawn(|| {
            let kept = short_slice_for_this_thread().ok()?;
            let mine = runtime_of_this_thread()?;
            // A thread started from here begins with the default again.
            let thread = std::thread::spawn(runtime_of_this_thread).join().ok()??;
            Some((kept, mine, thread, slice_of_a_started_process()))
        });
        let Ok(Some((kept, (mine, flags), (thread, _), process))) = handle.join() else {
            panic!("sched_getattr/sched_setattr failed on this kernel");
        };
        // Kernels before 6.12 keep no slice for an ordinary thread (0):
        // nothing more to check there.
        assert_eq!(kept, mine != 0, "what the call says it got");
        if mine == 0 {
            return;
        }
        assert_eq!(mine, SLICE_NS);
        assert_eq!(flags & RESET_ON_FORK, RESET_ON_FORK);
        assert_ne!(
            thread, SLICE_NS,
            "a started thread must not inherit the short slice"
        );
        if let Some(process) = process {
            assert_ne!(
                process, SLICE_NS,
                "a started process must not inherit the short slice"
            );
        }
    }
}
