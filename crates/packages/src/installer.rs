//! Running `uv pip install --target` on the host.
//!
//! uv rather than pip: it resolves and installs pandas with numpy from a
//! warm cache in tens of milliseconds (pip takes seconds), its cache is
//! content-addressed and shared by every environment (files are
//! hard-linked out of it), and it installs into a plain directory for any
//! interpreter without running that interpreter's pip. BENCHMARKS.md has
//! the figures.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cem_config::Requirement;

use crate::PackagesError;

/// Host variables the installer keeps (index settings, proxies, CA roots);
/// everything else of the server's environment, upstream secrets included,
/// stays out of it (a source build would run with it).
const KEPT_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "LANG",
    "TMPDIR",
    "XDG_CONFIG_HOME",
    "XDG_CACHE_HOME",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "all_proxy",
];

/// Gives `cmd` only the kept host variables and those starting with
/// `prefix` (the tool's own settings: `UV_`, `PIP_`), none of the rest of
/// the server's environment.
pub(crate) fn host_env(cmd: &mut Command, prefix: &str) {
    cmd.env_clear();
    for (key, value) in std::env::vars_os() {
        let keep = key
            .to_str()
            .is_some_and(|k| KEPT_ENV.contains(&k) || k.starts_with(prefix));
        if keep {
            cmd.env(key, value);
        }
    }
}

/// A uv binary.
#[derive(Debug, Clone)]
pub struct Installer {
    pub path: PathBuf,
}

/// The configured installer, else `uv` on PATH.
pub fn find_installer(configured: Option<&Path>) -> Result<Installer, PackagesError> {
    if let Some(path) = configured {
        return if path.is_file() {
            Ok(Installer {
                path: path.to_path_buf(),
            })
        } else {
            Err(PackagesError::NoInstaller {
                tried: format!(
                    "sandbox.installer is {}, which does not exist",
                    path.display()
                ),
            })
        };
    }
    let path_var = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path_var)
        .map(|dir| dir.join("uv"))
        .find(|p| p.is_file())
        .map(|path| Installer { path })
        .ok_or_else(|| PackagesError::NoInstaller {
            tried: "uv is not on PATH and sandbox.installer is not set".into(),
        })
}

/// One install into an empty directory.
pub struct Job<'a> {
    pub python: &'a Path,
    pub target: &'a Path,
    pub cache: &'a Path,
    pub requirements: &'a [Requirement],
    /// A constraints file (the pins of the environment a layer goes over).
    pub constraints: Option<&'a Path>,
    pub allow_source_builds: bool,
    /// Use only what the cache holds (no index requests).
    pub offline: bool,
    pub timeout: Duration,
}

impl Installer {
    /// `uv --version`, for doctor.
    pub fn version(&self) -> Option<String> {
        let out = Command::new(&self.path)
            .arg("--version")
            .stdin(Stdio::null())
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// Runs the job; `progress` gets each line uv prints about its work.
    ///
    /// TLS trusts the host's certificate store first: a server is often
    /// started with a trimmed environment (no SSL_CERT_FILE), and a host
    /// behind an inspecting proxy has its CA there, as pip's does. A host
    /// whose store is empty or broken gets a second try with uv's own roots.
    pub fn install(&self, job: &Job<'_>, progress: &dyn Fn(&str)) -> Result<(), PackagesError> {
        match self.install_once(job, progress, true) {
            Err(PackagesError::Install { detail, .. }) if detail.contains("certificate") => {
                tracing::info!("the host's certificate store failed; trying uv's bundled roots");
                self.install_once(job, progress, false)
            }
            other => other,
        }
    }

    fn install_once(
        &self,
        job: &Job<'_>,
        progress: &dyn Fn(&str),
        system_certs: bool,
    ) -> Result<(), PackagesError> {
        let names = job
            .requirements
            .iter()
            .map(Requirement::as_str)
            .collect::<Vec<_>>()
            .join(", ");
        let mut cmd = Command::new(&self.path);
        cmd.args(["pip", "install", "--no-progress", "--compile-bytecode"])
            .arg("--python")
            .arg(job.python)
            .arg("--target")
            .arg(job.target)
            .arg("--cache-dir")
            .arg(job.cache);
        if !job.allow_source_builds {
            cmd.args(["--only-binary", ":all:"]);
        }
        if job.offline {
            cmd.arg("--offline");
        }
        if system_certs {
            cmd.arg("--system-certs");
        }
        if let Some(c) = job.constraints {
            cmd.arg("--constraint").arg(c);
        }
        // After "--" nothing is an option, whatever a requirement says.
        cmd.arg("--")
            .args(job.requirements.iter().map(Requirement::as_str));
        host_env(&mut cmd, "UV_");
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| PackagesError::Install {
                packages: names.clone(),
                detail: format!("cannot run {}: {e}", self.path.display()),
            })?;
        let stderr = child.stderr.take();
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        let reader = std::thread::spawn(move || {
            if let Some(stderr) = stderr {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    if tx.send(line).is_err() {
                        return;
                    }
                }
            }
        });
        let started = Instant::now();
        let mut lines: Vec<String> = Vec::new();
        let status = loop {
            while let Ok(line) = rx.try_recv() {
                progress(line.trim());
                lines.push(line);
            }
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if started.elapsed() > job.timeout => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(PackagesError::Timeout {
                        packages: names,
                        seconds: job.timeout.as_secs(),
                    });
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                Err(e) => {
                    return Err(PackagesError::Install {
                        packages: names,
                        detail: e.to_string(),
                    });
                }
            }
        };
        let _ = reader.join();
        lines.extend(rx.try_iter());
        if status.success() {
            return Ok(());
        }
        Err(explain(&lines, job, names))
    }
}

/// uv's failure in our words: a source-only package names the config key
/// that would allow it; anything else keeps uv's own cause and hints.
fn explain(lines: &[String], job: &Job<'_>, names: String) -> PackagesError {
    if !job.allow_source_builds
        && let Some(line) = lines.iter().find(|l| l.contains("no usable wheels"))
    {
        let package = job
            .requirements
            .iter()
            .map(Requirement::name)
            .find(|n| line.contains(&format!(" {n} ")) || line.contains(&format!(" {n}=")))
            .map(str::to_string)
            .or_else(|| {
                // "Because docopt==0.6.2 has no usable wheels": a dependency.
                line.split_whitespace()
                    .skip_while(|w| *w != "of" && *w != "Because")
                    .nth(1)
                    .map(|w| w.split("==").next().unwrap_or(w).to_string())
            })
            .unwrap_or_else(|| names.clone());
        return PackagesError::SourceOnly { package };
    }
    let detail: Vec<&str> = lines
        .iter()
        .map(|l| l.trim())
        .filter(|l| {
            l.starts_with("error:")
                || l.starts_with("cause:")
                || l.starts_with("hint:")
                || l.starts_with("Caused by:")
        })
        .collect();
    let detail = if detail.is_empty() {
        lines
            .iter()
            .rev()
            .take(5)
            .rev()
            .map(|l| l.trim())
            .collect::<Vec<_>>()
            .join(" ")
    } else {
        detail.join(" ")
    };
    PackagesError::Install {
        packages: names,
        detail,
    }
}
