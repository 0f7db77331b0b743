//! The Python side of the sandbox: the runtime every execution runs in
//! (`python/cem_runtime.py`: the bridge client, `call_tool`, wrappers,
//! skills, the answer) and the zygote that forks a fresh interpreter per
//! execution (`python/cem_zygote.py`), embedded in the binary and written
//! out once per content hash so sandboxes can bind them read-only.
//!
//! Only the files and where they go: how they are started is `cem-engine`'s.

use std::path::{Path, PathBuf};

/// The runtime's source.
pub const RUNTIME_PY: &str = include_str!("../python/cem_runtime.py");
/// The zygote's source (forks a fresh interpreter per execution).
pub const ZYGOTE_PY: &str = include_str!("../python/cem_zygote.py");
/// The files of the runtime directory.
const FILES: [(&str, &str); 2] = [("cem_runtime.py", RUNTIME_PY), ("cem_zygote.py", ZYGOTE_PY)];
/// Where the runtime directory appears inside the sandbox.
pub const RUNTIME_TARGET: &str = "/opt/cem";

/// Writes the runtime under `data_dir/runtime/<hash>/` (if not there yet)
/// and returns that directory.
pub fn install(data_dir: &Path) -> std::io::Result<PathBuf> {
    let hash = FILES.iter().fold(0xcbf2_9ce4_8422_2325, |h, (_, text)| {
        fnv1a(h, text.as_bytes())
    });
    let dir = data_dir.join("runtime").join(format!("{hash:016x}"));
    // World-readable: the sandbox may run as another uid (nobody).
    use std::os::unix::fs::PermissionsExt;
    for (name, text) in FILES {
        let file = dir.join(name);
        if std::fs::read_to_string(&file).ok().as_deref() != Some(text) {
            std::fs::create_dir_all(&dir)?;
            let tmp = dir.join(format!(".{name}.{}", std::process::id()));
            std::fs::write(&tmp, text)?;
            std::fs::rename(&tmp, &file)?;
        }
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644))?;
    }
    for p in [data_dir.join("runtime"), dir.clone()] {
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755))?;
    }
    Ok(dir)
}

/// FNV-1a: a stable content hash for the directory name (not security).
fn fnv1a(seed: u64, bytes: &[u8]) -> u64 {
    bytes.iter().fold(seed, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}
