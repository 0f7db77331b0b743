//! What an execution itself wrote to disk, for the disk watchdog.
//!
//! The watchdog notices disk use by the drop in the workspace file system's
//! free space, which is cheap but counts every process on the host: an
//! upstream tool that downloads a file, a browser, a build. Before it stops
//! an execution for its quota, it asks this module what the sandbox wrote:
//! the only place the sandbox can write to disk is the workspace (its `/tmp`
//! is a size-bounded tmpfs), and every file it wrote or made since the call
//! began has a change time (`ctime`, which no program can set back) since
//! then.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

/// The most entries a check visits; past it, the check gives up and the
/// free-space figure stands.
const MAX_ENTRIES: usize = 200_000;

/// How far file times may lag the clock (a few scheduler ticks).
const CLOCK_MARGIN: std::time::Duration = std::time::Duration::from_millis(50);

/// Bytes (allocated) and entries written or made under `root` since
/// `since`; `None` when the tree is too large to check.
pub fn since(root: &Path, since: SystemTime) -> Option<(u64, u64)> {
    // File times come from the kernel's coarse clock, a tick behind the
    // one `since` was read from: a margin keeps the first writes counted.
    let since = since.checked_sub(CLOCK_MARGIN).unwrap_or(since);
    let since = since.duration_since(UNIX_EPOCH).ok()?;
    let since = (since.as_secs() as i64, since.subsec_nanos() as i64);
    let changed = |m: &std::fs::Metadata| (m.ctime(), m.ctime_nsec()) >= since;
    let (mut bytes, mut entries, mut visited) = (0u64, 0u64, 0usize);
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(read) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in read.flatten() {
            visited += 1;
            if visited > MAX_ENTRIES {
                return None;
            }
            let Ok(meta) = entry.path().symlink_metadata() else {
                continue;
            };
            if meta.is_dir() {
                dirs.push(entry.path());
            }
            if changed(&meta) {
                entries += 1;
                if meta.is_file() {
                    bytes += meta.blocks() * 512;
                }
            }
        }
    }
    Some((bytes, entries))
}

/// What the watchdog makes of a drop in free space past the quota.
#[derive(Debug, PartialEq, Eq)]
pub enum Judgement {
    /// The execution wrote it: stop it.
    Ours,
    /// Others wrote most of it: count from `(free bytes, free inodes)` as
    /// if the execution's own writes were all that had happened.
    Others { base: (u64, u64) },
}

/// `free` is the file system's free bytes and inodes now, `own` what the
/// execution wrote since the call began (`None`: unknown, trust the drop).
pub fn judge(free: (u64, u64), own: Option<(u64, u64)>, quota: u64, inode_quota: u64) -> Judgement {
    match own {
        Some((bytes, entries)) if bytes <= quota && entries <= inode_quota => Judgement::Others {
            base: (free.0 + bytes, free.1 + entries),
        },
        _ => Judgement::Ours,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_changed_since_the_start_counts() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let root = dir.path();
        std::fs::write(root.join("old.bin"), vec![1u8; 1 << 20]).unwrap_or_else(|e| panic!("{e}"));
        std::thread::sleep(std::time::Duration::from_millis(120));
        let start = SystemTime::now();
        std::fs::create_dir(root.join("new")).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(root.join("new/a.bin"), vec![1u8; 256 << 10])
            .unwrap_or_else(|e| panic!("{e}"));
        let (bytes, entries) = since(root, start).unwrap_or_default();
        assert_eq!(entries, 2, "the new folder and its file");
        assert!((256 << 10..(256 << 10) + 65536).contains(&bytes), "{bytes}");
    }

    #[test]
    fn a_drop_the_execution_did_not_make_moves_the_baseline() {
        let mb = 1 << 20;
        // 1 GB less free, of which the execution wrote 10 MB: others did it.
        assert_eq!(
            judge((5000 * mb, 900), Some((10 * mb, 3)), 64 * mb, 100),
            Judgement::Others {
                base: (5010 * mb, 903)
            }
        );
        assert_eq!(
            judge((5000 * mb, 900), Some((65 * mb, 3)), 64 * mb, 100),
            Judgement::Ours
        );
        assert_eq!(
            judge((5000 * mb, 900), Some((mb, 101)), 64 * mb, 100),
            Judgement::Ours
        );
        assert_eq!(judge((5000 * mb, 900), None, 64 * mb, 100), Judgement::Ours);
    }
}
