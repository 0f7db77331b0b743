//! What an interpreter needs inside the sandbox, asked of the interpreter
//! itself rather than assumed from one distribution's layout.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::Bind;

/// System directories bound read-only when they exist (or recreated as the
/// symlinks they are on merged-/usr systems).
const SYSTEM_DIRS: &[&str] = &[
    "/usr", "/lib", "/lib64", "/lib32", "/libx32", "/bin", "/sbin",
];
/// Single host files worth having (dynamic loader cache, time zone).
const SYSTEM_FILES: &[&str] = &["/etc/ld.so.cache", "/etc/localtime"];
/// Extra host paths when the network is on (name resolution, CA roots).
pub const NETWORK_FILES: &[&str] = &[
    "/etc/resolv.conf",
    "/etc/nsswitch.conf",
    "/etc/ssl",
    "/etc/ca-certificates",
];

/// Asks the interpreter where it lives; prints JSON.
const PROBE: &str = r#"
import json, sys
mods = ["ssl", "sqlite3", "ctypes", "zlib", "hashlib", "decimal", "_json", "lzma", "bz2", "readline", "uuid"]
for m in mods:
    try:
        __import__(m)
    except Exception:
        pass
libs = set()
with open("/proc/self/maps") as f:
    for line in f:
        parts = line.split()
        if len(parts) >= 6 and parts[5].startswith("/"):
            libs.add(parts[5])
print(json.dumps({
    "executable": sys.executable,
    "version": sys.version.split()[0],
    "prefixes": sorted({sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}),
    "path": [p for p in sys.path if p],
    "libs": sorted(libs),
}))
"#;

/// The binds and facts for one interpreter.
#[derive(Debug, Clone)]
pub struct InterpreterLayout {
    pub executable: PathBuf,
    pub version: String,
    pub binds: Vec<Bind>,
    pub symlinks: Vec<(PathBuf, PathBuf)>,
}

#[derive(Debug, thiserror::Error)]
pub enum InterpreterError {
    #[error(
        "cannot run {path}: {source}; install Python 3 or set sandbox.python to an interpreter"
    )]
    Spawn {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} failed to describe itself: {detail}")]
    Probe { path: PathBuf, detail: String },
}

/// Runs `python` once on the host to learn its prefixes and the shared
/// libraries it maps, and turns them into read-only binds.
pub fn resolve_interpreter(
    python: &Path,
    network: bool,
) -> Result<InterpreterLayout, InterpreterError> {
    let out = Command::new(python)
        // Not -S: in Python 3.11 it is `site` that applies a virtualenv's
        // pyvenv.cfg to sys.prefix, and site-packages must be bound too.
        .args(["-I", "-c", PROBE])
        .env_clear()
        .stdin(Stdio::null())
        .output()
        .map_err(|source| InterpreterError::Spawn {
            path: python.to_path_buf(),
            source,
        })?;
    let probe_err = |detail: String| InterpreterError::Probe {
        path: python.to_path_buf(),
        detail,
    };
    if !out.status.success() {
        return Err(probe_err(
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        ));
    }
    let info: serde_json::Value =
        serde_json::from_slice(&out.stdout).map_err(|e| probe_err(e.to_string()))?;
    let strings = |key: &str| -> Vec<PathBuf> {
        info[key]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str())
                    .map(PathBuf::from)
                    .collect()
            })
            .unwrap_or_default()
    };

    let mut binds: Vec<Bind> = Vec::new();
    let mut symlinks = Vec::new();
    let mut covered: Vec<PathBuf> = Vec::new();
    for dir in SYSTEM_DIRS {
        let path = Path::new(dir);
        match std::fs::symlink_metadata(path) {
            Ok(meta) if meta.file_type().is_symlink() => {
                if let Ok(target) = std::fs::read_link(path) {
                    symlinks.push((path.to_path_buf(), target));
                }
            }
            Ok(meta) if meta.is_dir() => {
                binds.push(Bind {
                    source: path.to_path_buf(),
                    target: path.to_path_buf(),
                });
                covered.push(path.to_path_buf());
            }
            _ => {}
        }
    }
    let mut extra: BTreeSet<PathBuf> = BTreeSet::new();
    for prefix in strings("prefixes") {
        extra.insert(prefix);
    }
    for p in strings("path") {
        if p.is_dir() {
            extra.insert(p);
        }
    }
    for lib in strings("libs") {
        if let Some(parent) = lib.parent() {
            extra.insert(parent.to_path_buf());
        }
    }
    let executable = info["executable"]
        .as_str()
        .map(PathBuf::from)
        .unwrap_or_else(|| python.to_path_buf());
    // The executable as configured (a venv's bin/python is a symlink) and
    // what it points to must both resolve inside.
    // A virtualenv: <root>/bin/python with <root>/pyvenv.cfg.
    if let Some(root) = python.parent().and_then(Path::parent)
        && root.join("pyvenv.cfg").is_file()
    {
        extra.insert(root.to_path_buf());
    }
    for exe in [python.to_path_buf(), executable.clone()] {
        if let Some(parent) = exe.parent() {
            extra.insert(parent.to_path_buf());
        }
        if let Ok(real) = std::fs::canonicalize(&exe)
            && let Some(parent) = real.parent()
        {
            extra.insert(parent.to_path_buf());
        }
    }
    for dir in extra {
        let resolved = std::fs::canonicalize(&dir).unwrap_or(dir.clone());
        for candidate in [dir, resolved] {
            if !candidate.is_dir() || is_covered(&candidate, &covered, &symlinks) {
                continue;
            }
            covered.push(candidate.clone());
            binds.push(Bind {
                source: candidate.clone(),
                target: candidate,
            });
        }
    }
    let mut files: Vec<&str> = SYSTEM_FILES.to_vec();
    if network {
        files.extend_from_slice(NETWORK_FILES);
    }
    for file in files {
        let path = Path::new(file);
        if path.exists() {
            binds.push(Bind {
                source: path.to_path_buf(),
                target: path.to_path_buf(),
            });
        }
    }
    Ok(InterpreterLayout {
        executable: python.to_path_buf(),
        version: info["version"].as_str().unwrap_or("?").to_string(),
        binds,
        symlinks,
    })
}

/// Under a bound directory, or under a symlinked system dir whose target is bound.
fn is_covered(path: &Path, covered: &[PathBuf], symlinks: &[(PathBuf, PathBuf)]) -> bool {
    if covered.iter().any(|c| path.starts_with(c)) {
        return true;
    }
    symlinks.iter().any(|(link, _)| path.starts_with(link))
        && std::fs::canonicalize(path).is_ok_and(|real| covered.iter().any(|c| real.starts_with(c)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_the_system_python() -> Result<(), InterpreterError> {
        let layout = resolve_interpreter(Path::new("/usr/bin/python3"), false)?;
        assert!(layout.version.starts_with('3'));
        assert!(layout.binds.iter().any(|b| b.target == Path::new("/usr")));
        // Nothing secret: /etc is never bound whole, /root never at all.
        assert!(!layout.binds.iter().any(|b| b.target == Path::new("/etc")));
        assert!(
            !layout
                .binds
                .iter()
                .any(|b| b.target.starts_with("/root") && b.target == Path::new("/root"))
        );
        Ok(())
    }
}
