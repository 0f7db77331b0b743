//! Landlock for a tenant's stdio server: it reads everywhere, as before,
//! and writes only where [`crate::tenancy`] says (its state root, the fixed
//! paths its tenant holds, the package caches, a few devices). The rules
//! are made before the fork; only the restriction itself runs between fork
//! and exec, where nothing may allocate.

use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, CompatLevel, Compatible, RulesetAttr, RulesetCreated,
    RulesetCreatedAttr, Scope, path_beneath_rules,
};

/// Devices every process writes to.
const DEVICES: &[&str] = &["/dev/null", "/dev/zero", "/dev/full", "/dev/tty"];

/// Said once a run: tenants' processes run without Landlock.
fn warn_once_unconfined(why: &str) {
    static SAID: std::sync::Once = std::sync::Once::new();
    SAID.call_once(|| {
        tracing::warn!(reason = %why, "tenants' upstream processes are NOT confined to their state directories (no Landlock here): each still gets its own HOME, TMPDIR and working directory, but a server that writes elsewhere shares that file between tenants");
    });
}

/// Makes `cmd` restrict itself, once forked, to writing under `writable`
/// and reading everywhere but in `unreadable` (what `writable` grants in it
/// excepted); its signals and abstract unix sockets reach only processes
/// of its own confinement. Without Landlock the command runs unconfined,
/// and the log says so once.
#[allow(unsafe_code)]
pub fn confine(
    cmd: &mut std::process::Command,
    writable: &[PathBuf],
    unreadable: &[PathBuf],
) -> Result<(), String> {
    use std::os::unix::process::CommandExt;
    let ruleset = match ruleset(writable, unreadable) {
        Ok(Some(ruleset)) => ruleset,
        Ok(None) => {
            warn_once_unconfined("the kernel does not support Landlock");
            return Ok(());
        }
        Err(e) => return Err(format!("cannot make the Landlock rules: {e}")),
    };
    let mut ruleset = Some(ruleset);
    // SAFETY: between fork and exec this only makes the prctl and
    // landlock_restrict_self system calls on a ruleset made before the fork.
    unsafe {
        cmd.pre_exec(move || {
            let Some(ruleset) = ruleset.take() else {
                return Ok(());
            };
            ruleset
                .restrict_self()
                .map(|_| ())
                .map_err(|_| std::io::Error::from_raw_os_error(nix::errno::Errno::EPERM as i32))
        });
    }
    Ok(())
}

fn ruleset(
    writable: &[PathBuf],
    unreadable: &[PathBuf],
) -> Result<Option<RulesetCreated>, landlock::RulesetError> {
    let abi = ABI::V6;
    if !kernel_has_landlock() {
        return Ok(None);
    }
    let readable = readable_around(unreadable);
    let writable: Vec<&PathBuf> = writable.iter().filter(|p| p.exists()).collect();
    let devices: Vec<&str> = DEVICES
        .iter()
        .copied()
        .filter(|d| std::path::Path::new(d).exists())
        .collect();
    let ruleset = landlock::Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(abi))?
        // Another tenant's processes, and the server itself, run as the
        // same user: signals and abstract sockets stay inside.
        .scope(Scope::from_all(abi))?
        .create()?
        .add_rules(path_beneath_rules(readable, AccessFs::from_read(abi)))?
        .add_rules(path_beneath_rules(writable, AccessFs::from_all(abi)))?
        .add_rules(path_beneath_rules(
            devices,
            AccessFs::from_read(abi) | AccessFs::WriteFile | AccessFs::IoctlDev,
        ))?;
    Ok(Some(ruleset))
}

/// What to grant reading so that everything is readable but `hidden`:
/// Landlock only grants, so each directory on the way from `/` to a
/// hidden path has its other entries granted one by one (as they are now:
/// an entry made later on that way is not readable). A link on the way
/// (pytest's `pytest-current`, a `latest` link) to a hidden path or above
/// it is left out: it would grant the path through the link.
fn readable_around(hidden: &[PathBuf]) -> Vec<PathBuf> {
    use std::collections::BTreeSet;
    // The real paths: the walk must go where the kernel goes.
    let hidden: BTreeSet<PathBuf> = hidden
        .iter()
        .map(|h| std::fs::canonicalize(h).unwrap_or_else(|_| h.clone()))
        .collect();
    if hidden.is_empty() {
        return vec![PathBuf::from("/")];
    }
    let ways: BTreeSet<PathBuf> = hidden
        .iter()
        .flat_map(|h| h.ancestors().skip(1).map(Path::to_path_buf))
        .collect();
    let reaches_hidden = |entry: &Path| {
        std::fs::symlink_metadata(entry).is_ok_and(|m| m.file_type().is_symlink())
            && std::fs::canonicalize(entry).is_ok_and(|target| {
                hidden
                    .iter()
                    .any(|h| h.starts_with(&target) || target.starts_with(h))
            })
    };
    let mut granted = Vec::new();
    for dir in &ways {
        // Unlistable: nothing on this level can be granted apart.
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        granted.extend(
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| !ways.contains(p) && !hidden.contains(p) && !reaches_hidden(p)),
        );
    }
    granted
}

/// Whether tenants' processes can be confined here (for `doctor`).
pub fn available() -> bool {
    kernel_has_landlock()
}

/// Whether this kernel has Landlock enabled (its ABI version answers).
fn kernel_has_landlock() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    // A ruleset that must handle one right can be made only where the
    // kernel runs Landlock.
    *HAS.get_or_init(|| {
        landlock::Ruleset::default()
            .set_compatibility(CompatLevel::HardRequirement)
            .handle_access(AccessFs::Execute)
            .and_then(|r| r.create())
            .is_ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cat(path: &Path, writable: &[PathBuf], hidden: &Path) -> Result<bool, String> {
        let mut cmd = std::process::Command::new("cat");
        cmd.arg(path)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        confine(&mut cmd, writable, &[hidden.to_path_buf()])?;
        cmd.status().map(|s| s.success()).map_err(|e| e.to_string())
    }

    #[test]
    fn a_confined_process_reads_nothing_of_the_hidden_directory_but_its_own()
    -> Result<(), Box<dyn std::error::Error>> {
        if !kernel_has_landlock() {
            return Ok(());
        }
        let dir = tempfile::tempdir()?;
        let data = dir.path().join("data");
        let own = data.join("tenants").join("bob");
        let theirs = data.join("tenants").join("alice");
        std::fs::create_dir_all(&own)?;
        std::fs::create_dir_all(&theirs)?;
        for (path, text) in [
            (own.join("mine"), "b"),
            (theirs.join("secret"), "a"),
            (dir.path().join("outside"), "o"),
        ] {
            std::fs::write(path, text)?;
        }
        // A link beside the way, to above the hidden directory, grants nothing of it.
        std::os::unix::fs::symlink(dir.path(), dir.path().join("current"))?;
        let writable = [own.clone()];
        assert!(cat(&own.join("mine"), &writable, &data)?);
        assert!(cat(&dir.path().join("outside"), &writable, &data)?);
        assert!(!cat(&theirs.join("secret"), &writable, &data)?);
        let linked = dir.path().join("current").join("data").join("tenants");
        assert!(!cat(
            &linked.join("alice").join("secret"),
            &writable,
            &data
        )?);
        Ok(())
    }
}
