//! What an execution itself wrote to disk, for the disk watchdog.
//!
//! The watchdog notices disk use by the drop in the workspace file system's
//! free space, which is cheap but counts every process on the host: an
//! upstream tool that downloads a file, a browser, a build. Before it stops
//! an execution for its quota, it asks this module what the sandbox wrote:
//! the only place the sandbox can write to disk is the workspace (its `/tmp`
//! is a size-bounded tmpfs), and every file it wrote or made since the call
//! began has a change time (`ctime`, which no program can set back) since
//! then. A file it deleted but holds open is counted through its
//! processes' open descriptors (unlinking it changed its ctime too). What
//! cannot be read (a folder made unreadable, descriptors of a process we
//! may not inspect) makes the answer unknown, and the drop in free space
//! stands.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

/// The most entries a check visits; past it, the check gives up and the
/// free-space figure stands.
const MAX_ENTRIES: usize = 200_000;

/// How far file times may lag the clock (a few scheduler ticks).
const CLOCK_MARGIN: std::time::Duration = std::time::Duration::from_millis(50);

/// Bytes (allocated) and entries the execution whose processes descend
/// from `pid` wrote since `since`: under `root`, and in files it deleted
/// but holds open. `None` when that cannot be known.
pub fn by_execution(root: &Path, pid: u32, since: SystemTime) -> Option<(u64, u64)> {
    let since = stamp(since)?;
    let dev = root.metadata().ok()?.dev();
    let (bytes, entries) = in_tree(root, since)?;
    let hidden = deleted_open(&descendants(pid)?, dev, since)?;
    Some((bytes + hidden, entries))
}

/// `since` as file times compare, a margin early: file times come from the
/// kernel's coarse clock, a tick behind the one `since` was read from.
fn stamp(since: SystemTime) -> Option<(i64, i64)> {
    let since = since.checked_sub(CLOCK_MARGIN).unwrap_or(since);
    let since = since.duration_since(UNIX_EPOCH).ok()?;
    Some((since.as_secs() as i64, i64::from(since.subsec_nanos())))
}

fn changed_since(meta: &std::fs::Metadata, since: (i64, i64)) -> bool {
    (meta.ctime(), meta.ctime_nsec()) >= since
}

/// Bytes (allocated, of every kind of entry) and entries changed under
/// `root` since `since`; `None` when a folder cannot be read or the tree
/// is too large to check.
fn in_tree(root: &Path, since: (i64, i64)) -> Option<(u64, u64)> {
    let gone = |e: &std::io::Error| e.kind() == std::io::ErrorKind::NotFound;
    let (mut bytes, mut entries, mut visited) = (0u64, 0u64, 0usize);
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let read = match std::fs::read_dir(&dir) {
            Ok(read) => read,
            Err(e) if gone(&e) => continue,
            Err(_) => return None,
        };
        for entry in read {
            let entry = match entry {
                Ok(entry) => entry,
                Err(e) if gone(&e) => continue,
                Err(_) => return None,
            };
            visited += 1;
            if visited > MAX_ENTRIES {
                return None;
            }
            let meta = match entry.path().symlink_metadata() {
                Ok(meta) => meta,
                Err(e) if gone(&e) => continue,
                Err(_) => return None,
            };
            if meta.is_dir() {
                dirs.push(entry.path());
            }
            if changed_since(&meta, since) {
                entries += 1;
                bytes += meta.blocks() * 512;
            }
        }
    }
    Some((bytes, entries))
}

/// `pid` and every process descending from it, from `/proc`.
fn descendants(pid: u32) -> Option<Vec<u32>> {
    let mut parent_of = Vec::new();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(p) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // After the command (which may hold spaces and parentheses): state, ppid.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if let Some(ppid) = ppid {
            parent_of.push((p, ppid));
        }
    }
    let mut tree = vec![pid];
    let mut i = 0;
    while i < tree.len() {
        let parent = tree[i];
        tree.extend(
            parent_of
                .iter()
                .filter(|(_, pp)| *pp == parent)
                .map(|(p, _)| *p),
        );
        i += 1;
    }
    Some(tree)
}

/// Allocated bytes of the files on `dev` that `pids` hold open, deleted
/// since `since`; `None` when a process's descriptors cannot be read.
fn deleted_open(pids: &[u32], dev: u64, since: (i64, i64)) -> Option<u64> {
    let mut seen = std::collections::HashSet::new();
    let mut bytes = 0;
    for pid in pids {
        let fds = match std::fs::read_dir(format!("/proc/{pid}/fd")) {
            Ok(fds) => fds,
            // Ended since it was listed.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(_) => return None,
        };
        for fd in fds.flatten() {
            let deleted = std::fs::read_link(fd.path())
                .is_ok_and(|target| target.to_string_lossy().ends_with(" (deleted)"));
            if !deleted {
                continue;
            }
            // The descriptor's own file, followed through the link.
            let Ok(meta) = std::fs::metadata(fd.path()) else {
                continue;
            };
            if meta.is_file()
                && meta.dev() == dev
                && changed_since(&meta, since)
                && seen.insert(meta.ino())
            {
                bytes += meta.blocks() * 512;
            }
        }
    }
    Some(bytes)
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

    fn now_after_a_tick() -> SystemTime {
        std::thread::sleep(std::time::Duration::from_millis(120));
        SystemTime::now()
    }

    #[test]
    fn only_what_changed_since_the_start_counts() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let root = dir.path();
        std::fs::write(root.join("old.bin"), vec![1u8; 1 << 20]).unwrap_or_else(|e| panic!("{e}"));
        let start = now_after_a_tick();
        std::fs::create_dir(root.join("new")).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(root.join("new/a.bin"), vec![1u8; 256 << 10])
            .unwrap_or_else(|e| panic!("{e}"));
        let (bytes, entries) = by_execution(root, std::process::id(), start).unwrap_or_default();
        assert_eq!(entries, 2, "the new folder and its file");
        assert!((256 << 10..(256 << 10) + 65536).contains(&bytes), "{bytes}");
    }

    #[test]
    fn a_deleted_file_held_open_still_counts() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let root = dir.path();
        let start = now_after_a_tick();
        let path = root.join("hidden.bin");
        let mut file = std::fs::File::create(&path).unwrap_or_else(|e| panic!("{e}"));
        std::fs::remove_file(&path).unwrap_or_else(|e| panic!("{e}"));
        file.write_all(&vec![1u8; 2 << 20])
            .unwrap_or_else(|e| panic!("{e}"));
        file.sync_all().unwrap_or_else(|e| panic!("{e}"));
        let (bytes, _) = by_execution(root, std::process::id(), start).unwrap_or_default();
        assert!(bytes >= 2 << 20, "{bytes}");
        drop(file);
    }

    #[test]
    fn a_tree_that_cannot_be_read_makes_it_unknown() {
        // (A folder made unreadable cannot be tested as root, who reads
        // any: a root that is not a folder fails the same way.)
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let file = dir.path().join("not-a-folder");
        std::fs::write(&file, "x").unwrap_or_else(|e| panic!("{e}"));
        let start = now_after_a_tick();
        assert_eq!(by_execution(&file, std::process::id(), start), None);
        assert!(by_execution(dir.path(), std::process::id(), start).is_some());
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
