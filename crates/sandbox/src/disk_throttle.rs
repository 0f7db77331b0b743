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
//! The limit is a cgroup v1 `blkio` throttle rule set in the hierarchy's
//! root group for the device. A rule there holds every write to the
//! device, including the kernel's own writeback threads (which run in no
//! tenant's group), and each loop device is one tenant's, so a rule per
//! device is a limit per tenant. A cgroup v2 host has no such rule at its
//! root (`io.max` is for child groups, and holds writeback only with the
//! memory controller beside it): there the limit is not set, and the
//! caller says so.

use std::path::PathBuf;
use std::sync::OnceLock;

use crate::workspace_disk::DiskError;

/// The root of the host's cgroup v1 `blkio` hierarchy, or why there is
/// none usable here.
fn blkio_root() -> Result<&'static PathBuf, &'static str> {
    static ROOT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    ROOT.get_or_init(|| {
        let table = std::fs::read_to_string("/proc/self/mountinfo")
            .map_err(|e| format!("cannot read the mount table: {e}"))?;
        find_blkio_root(&table)
    })
    .as_ref()
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

/// Limits writes to the block device `(major, minor)` to
/// `bytes_per_second` (0: removes the limit). Rules outlive the server,
/// like the mounts they belong to; a reboot undoes both.
pub(crate) fn limit_writes(
    (major, minor): (u64, u64),
    bytes_per_second: u64,
) -> Result<(), DiskError> {
    let root = match blkio_root() {
        Ok(root) => root,
        // Nothing asked, nothing missing.
        Err(_) if bytes_per_second == 0 => return Ok(()),
        Err(why) => return Err(DiskError::Command(why.to_string())),
    };
    let rules = root.join("blkio.throttle.write_bps_device");
    let device = format!("{major}:{minor}");
    if bytes_per_second == 0 {
        let current = std::fs::read_to_string(&rules)
            .map_err(|e| DiskError::io(format!("cannot read {}", rules.display()), e))?;
        if !current
            .lines()
            .any(|l| l.split(' ').next() == Some(&device))
        {
            return Ok(());
        }
    }
    std::fs::write(&rules, format!("{device} {bytes_per_second}"))
        .map_err(|e| DiskError::io(format!("cannot write {}", rules.display()), e))
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
}
