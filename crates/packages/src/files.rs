//! File-tree chores: hard-linked copies, permissions the sandbox's uid can
//! read, sizes.

use std::fs;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
use std::path::Path;

/// Copies the tree `from` to `to` (which must not exist) with hard links:
/// fast, and no extra space. Falls back to copying a file when it cannot be
/// linked (another file system, a host that forbids it).
pub fn link_tree(from: &Path, to: &Path) -> io::Result<()> {
    fs::create_dir(to)?;
    fs::set_permissions(to, fs::Permissions::from_mode(0o755))?;
    for entry in fs::read_dir(from)? {
        let entry = entry?;
        let source = entry.path();
        let target = to.join(entry.file_name());
        let kind = entry.file_type()?;
        if kind.is_dir() {
            link_tree(&source, &target)?;
        } else if kind.is_symlink() {
            symlink(fs::read_link(&source)?, &target)?;
        } else if fs::hard_link(&source, &target).is_err() {
            fs::copy(&source, &target)?;
        }
    }
    Ok(())
}

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
    fn a_linked_tree_shares_files_and_keeps_symlinks() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let from = dir.path().join("from");
        fs::create_dir_all(from.join("pkg/sub")).unwrap_or_else(|e| panic!("{e}"));
        fs::write(from.join("pkg/sub/a.py"), "x = 1\n").unwrap_or_else(|e| panic!("{e}"));
        symlink("sub/a.py", from.join("pkg/link.py")).unwrap_or_else(|e| panic!("{e}"));
        let to = dir.path().join("to");
        link_tree(&from, &to).unwrap_or_else(|e| panic!("{e}"));
        let a = fs::metadata(from.join("pkg/sub/a.py")).unwrap_or_else(|e| panic!("{e}"));
        let b = fs::metadata(to.join("pkg/sub/a.py")).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(a.ino(), b.ino(), "hard-linked, not copied");
        assert_eq!(
            fs::read_to_string(to.join("pkg/link.py")).unwrap_or_default(),
            "x = 1\n"
        );
        assert_eq!(tree_size(&from), 6);
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
