//! File-tree chores: permissions the sandbox's uid can read, sizes,
//! atomic writes.

use std::fs;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

/// Makes every file readable and every directory traversable by anyone:
/// the sandbox may run as another uid. Nothing becomes writable.
pub fn make_readable(dir: &Path) -> io::Result<()> {
    let meta = fs::symlink_metadata(dir)?;
    if meta.file_type().is_symlink() {
        return Ok(());
    }
    let mode = meta.permissions().mode();
    let wanted = if meta.is_dir() {
        mode | 0o555
    } else {
        // Executable for all only when executable for its owner.
        mode | 0o444 | if mode & 0o100 != 0 { 0o011 } else { 0 }
    };
    if wanted != mode {
        fs::set_permissions(dir, fs::Permissions::from_mode(wanted))?;
    }
    if meta.is_dir() {
        for entry in fs::read_dir(dir)? {
            make_readable(&entry?.path())?;
        }
    }
    Ok(())
}

/// Bytes the files of a tree take (hard links counted once per tree).
pub fn tree_size(dir: &Path) -> u64 {
    let mut seen = std::collections::HashSet::new();
    let mut stack = vec![dir.to_path_buf()];
    let mut total = 0;
    while let Some(path) = stack.pop() {
        let Ok(entries) = fs::read_dir(&path) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(meta) = entry.metadata() else {
                continue;
            };
            if meta.is_dir() {
                stack.push(entry.path());
            } else if meta.is_file() && seen.insert((meta.dev(), meta.ino())) {
                total += meta.len();
            }
        }
    }
    total
}

/// Writes `bytes` to `path` through a temporary file and a rename, so a
/// reader never sees half a file.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    fs::write(&tmp, bytes)?;
    fs::set_permissions(&tmp, fs::Permissions::from_mode(0o644))?;
    fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tree_size_counts_hard_links_once_and_skips_symlinks() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        fs::create_dir_all(dir.path().join("pkg/sub")).unwrap_or_else(|e| panic!("{e}"));
        fs::write(dir.path().join("pkg/sub/a.py"), "x = 1\n").unwrap_or_else(|e| panic!("{e}"));
        fs::hard_link(dir.path().join("pkg/sub/a.py"), dir.path().join("pkg/b.py"))
            .unwrap_or_else(|e| panic!("{e}"));
        std::os::unix::fs::symlink("sub/a.py", dir.path().join("pkg/link.py"))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(tree_size(dir.path()), 6);
    }

    #[test]
    fn readable_adds_read_bits_and_never_write_bits() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let file = dir.path().join("f");
        fs::write(&file, "x").unwrap_or_else(|e| panic!("{e}"));
        fs::set_permissions(&file, fs::Permissions::from_mode(0o600))
            .unwrap_or_else(|e| panic!("{e}"));
        make_readable(dir.path()).unwrap_or_else(|e| panic!("{e}"));
        let mode = fs::metadata(&file)
            .map(|m| m.permissions().mode() & 0o777)
            .unwrap_or_default();
        assert_eq!(mode, 0o644);
    }
}
