//! A write-rate limit on one workspace's loop device, so a tenant filling
//! its disk as fast as it can leaves the host's disk to the others.
//!
//! The dirty-page limit of the device (see `pace_writes`) keeps a writer
//! waiting for its own pages, but the pages still reach the host's disk
//! as fast as the disk takes them: every write of the image file allocates
//! blocks in the host's file system, and every other tenant's `fsync`
//! waits for the host's journal to commit behind them. In the soak (one
//! tenant writing 8 MB blocks until its quota, eight others writing small
//! files), the others' p99 went from 20 to 112 ms; with the device held to
//! 32 MB/s, 30 ms.
//!
//! The limit is a cgroup v1 `blkio` throttle rule for the device, set in
//! two groups, because on v1 a group's rule holds only the writes issued
//! by that group's own tasks: in the hierarchy's root group, for the
//! kernel's writeback threads (which run in no tenant's group), and in the
//! server's own group, for the writes its sandboxes (which never leave it
//! in this hierarchy) and its tools issue themselves (`fsync`, direct
//! I/O). Where the server runs in the root group the two are one. Each
//! loop device is one tenant's, so a rule per device is a limit per
//! tenant; where the groups differ, a tenant may reach the rate in each,
//! twice it at most. A cgroup v2 host has no such rule at its root
//! (`io.max` is for child groups, and holds writeback only with the memory
//! controller beside it): there the limit is not set, and the caller says
//! so.

use std::path::PathBuf;
use std::sync::OnceLock;

use crate::cgroup::own_v1_group;

/// Why the rate cannot be limited on this host at all (the same for
/// every tenant), or a rule could not be written for one device.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ThrottleError {
    #[error("{0}")]
    Unsupported(String),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

/// The groups whose rules hold a device's writes: the hierarchy's root,
/// and the server's own group when it is another.
fn rule_files() -> Result<&'static [PathBuf], &'static str> {
    static FILES: OnceLock<Result<Vec<PathBuf>, String>> = OnceLock::new();
    FILES
        .get_or_init(|| {
            let table = std::fs::read_to_string("/proc/self/mountinfo")
                .map_err(|e| format!("cannot read the mount table: {e}"))?;
            let root = find_blkio_root(&table)?;
            let own = std::fs::read_to_string("/proc/self/cgroup")
                .map_err(|e| format!("cannot read /proc/self/cgroup: {e}"))?;
            let mut groups = vec![root.clone()];
            if let Some(path) = own_v1_group(&own, "blkio")
                && path != "/"
            {
                groups.push(root.join(path.trim_start_matches('/')));
            }
            Ok(groups
                .into_iter()
                .map(|g| g.join("blkio.throttle.write_bps_device"))
                .collect())
        })
        .as_deref()
        .map_err(String::as_str)
}

/// The mount point of the `blkio` hierarchy's root in `mountinfo`.
fn find_blkio_root(mountinfo: &str) -> Result<PathBuf, String> {
    let mut partial = None;
    for line in mountinfo.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let mut fields = right.split(' ');
        let (Some("cgroup"), Some(_), Some(options)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        if !options.split(',').any(|o| o == "blkio") {
            continue;
        }
        let mut fields = left.split(' ');
        let (Some(root), Some(point)) = (fields.nth(3), fields.next()) else {
            continue;
        };
        if root == "/" {
            return Ok(PathBuf::from(point));
        }
        partial = Some(root.to_string());
    }
    Err(match partial {
        Some(root) => format!(
            "only a part of the host's cgroup v1 blkio hierarchy ({root}) is visible here, and a rule there would not hold the kernel's writeback"
        ),
        None => "this host has no cgroup v1 blkio hierarchy (on cgroup v2 the rate is not limited)"
            .to_string(),
    })
}

/// Whether this host lets a workspace's writes be held to a rate: the
/// files where the rules go, or why there are none (for `doctor`).
pub fn write_rate_rules() -> Result<&'static [PathBuf], &'static str> {
    rule_files()
}

/// Limits writes to the block device `(major, minor)` to
/// `bytes_per_second` (0: removes the limit). Rules outlive the server,
/// like the mounts they belong to; a reboot undoes both.
pub(crate) fn limit_writes(
    (major, minor): (u64, u64),
    bytes_per_second: u64,
) -> Result<(), ThrottleError> {
    let files = match rule_files() {
        Ok(files) => files,
        // Nothing asked, nothing missing.
        Err(_) if bytes_per_second == 0 => return Ok(()),
        Err(why) => return Err(ThrottleError::Unsupported(why.to_string())),
    };
    let device = format!("{major}:{minor}");
    for rules in files {
        let io = |what: &str, source| ThrottleError::Io {
            what: format!("cannot {what} {}", rules.display()),
            source,
        };
        if bytes_per_second == 0 {
            let current = std::fs::read_to_string(rules).map_err(|e| io("read", e))?;
            if !current
                .lines()
                .any(|l| l.split(' ').next() == Some(&device))
            {
                continue;
            }
        }
        std::fs::write(rules, format!("{device} {bytes_per_second}"))
            .map_err(|e| io("write", e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_blkio_hierarchy_is_found_by_its_option_at_its_root() {
        let table = "\
35 24 0:30 / /sys/fs/cgroup/cpu rw,relatime shared:11 - cgroup cgroup rw,cpu
41 24 0:36 / /sys/fs/cgroup/blkio rw,relatime shared:17 - cgroup cgroup rw,blkio
";
        assert_eq!(
            find_blkio_root(table),
            Ok(PathBuf::from("/sys/fs/cgroup/blkio"))
        );
    }

    #[test]
    fn a_part_of_the_hierarchy_or_none_is_refused_with_why() {
        let nested = "41 24 0:36 /docker/abc /sys/fs/cgroup/blkio rw - cgroup cgroup rw,blkio\n";
        let Err(why) = find_blkio_root(nested) else {
            panic!("a nested blkio group taken for the root");
        };
        assert!(why.contains("/docker/abc"), "{why}");
        let v2 = "30 24 0:27 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n";
        let Err(why) = find_blkio_root(v2) else {
            panic!("a blkio root found on cgroup v2");
        };
        assert!(why.contains("cgroup v2"), "{why}");
    }

    #[test]
    fn the_servers_own_blkio_group_is_read_from_its_cgroup_file() {
        let own =
            "12:pids:/system.slice/x.service\n7:blkio:/system.slice/x.service\n1:name=systemd:/\n";
        assert_eq!(own_v1_group(own, "blkio"), Some("/system.slice/x.service"));
        assert_eq!(own_v1_group("0::/\n", "blkio"), None);
    }
}
