//! Checks on workspace-relative paths before they touch the file system.

use std::path::{Component, Path, PathBuf};

use crate::WorkspaceError;

/// Longest path accepted, in bytes (Linux's PATH_MAX).
pub const MAX_PATH_BYTES: usize = 4096;
/// Longest single name accepted, in bytes (Linux's NAME_MAX).
const MAX_NAME_BYTES: usize = 255;

/// Turns an agent-given path into a clean relative path, or says why not.
/// `.` components are dropped; `..`, absolute paths, NUL bytes and empty
/// paths are refused. This is the first line of defence; cap-std's
/// confinement is the second.
pub fn validate_relative(path: &str) -> Result<PathBuf, WorkspaceError> {
    let bad = |reason: &str| WorkspaceError::BadPath {
        path: path.to_string(),
        reason: reason.to_string(),
    };
    if path.contains('\0') {
        return Err(bad("contains a NUL byte"));
    }
    if path.len() > MAX_PATH_BYTES {
        return Err(bad("longer than 4096 bytes"));
    }
    let mut clean = PathBuf::new();
    for component in Path::new(path).components() {
        match component {
            Component::Normal(name) => {
                if name.len() > MAX_NAME_BYTES {
                    return Err(bad("a name in it is longer than 255 bytes"));
                }
                clean.push(name);
            }
            Component::CurDir => {}
            Component::ParentDir => {
                return Err(bad("'..' is not allowed; use a path inside the workspace"));
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err(bad(
                    "absolute paths are not allowed; use a path relative to the workspace",
                ));
            }
        }
    }
    Ok(clean)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_and_cleans_relative_paths() {
        let ok = |p: &str| validate_relative(p).ok().map(|p| p.display().to_string());
        assert_eq!(ok("a.txt").as_deref(), Some("a.txt"));
        assert_eq!(ok("./dir/./b.json").as_deref(), Some("dir/b.json"));
        assert_eq!(ok("dir/").as_deref(), Some("dir"));
        assert_eq!(ok("").as_deref(), Some(""));
    }

    #[test]
    fn refuses_escapes_and_junk() {
        for p in ["../x", "a/../../x", "a/..", "/etc/passwd", "a\0b"] {
            assert!(
                matches!(validate_relative(p), Err(WorkspaceError::BadPath { .. })),
                "{p:?} should be refused"
            );
        }
        assert!(validate_relative(&"a".repeat(300)).is_err());
        assert!(validate_relative(&"a/".repeat(3000)).is_err());
    }
}
