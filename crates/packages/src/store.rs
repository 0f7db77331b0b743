//! The declared environment, the on-demand layers and the attach
//! directories, under `<data>/packages`.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cem_config::{OnDemand, Requirement, SandboxConfig};
use sha2::{Digest, Sha256};

use crate::files::{make_readable, tree_size, write_atomic};
use crate::installer::{Job, find_installer};
use crate::manifest::{Manifest, scan};
use crate::{Installer, PackagesError};

/// Bumped when the layout of an environment changes: old ones are rebuilt.
const LAYOUT: &str = "cem-packages-1";
/// The record beside an environment's files.
const MANIFEST: &str = "cem-env.json";

/// What the package store needs to know.
#[derive(Debug, Clone)]
pub struct Settings {
    pub data_dir: PathBuf,
    /// The sandbox's interpreter, as configured, and its version.
    pub python: PathBuf,
    pub python_version: String,
    pub declared: Vec<Requirement>,
    pub allow_source_builds: bool,
    pub on_demand: OnDemand,
    /// Normalised names agents may ask for under `OnDemand::Allowlist`.
    pub allowed: Vec<String>,
    pub installer: Option<PathBuf>,
    pub timeout: Duration,
}

impl Settings {
    pub fn from_config(cfg: &SandboxConfig, data_dir: &Path, python_version: &str) -> Settings {
        Settings {
            data_dir: data_dir.to_path_buf(),
            python: cfg.python.clone(),
            python_version: python_version.to_string(),
            declared: cfg.packages.clone(),
            allow_source_builds: cfg.allow_source_builds,
            on_demand: cfg.on_demand,
            allowed: cfg.allowed_packages.clone(),
            installer: cfg.installer.clone(),
            timeout: Duration::from_secs(cfg.install_timeout_seconds),
        }
    }
}

/// A built environment: a directory of packages (`site`, what goes on
/// `sys.path`) and its manifest.
#[derive(Debug, Clone)]
pub struct Env {
    pub digest: String,
    pub site: PathBuf,
    pub manifest: Manifest,
}

/// The declared environment's state.
#[derive(Debug, Clone)]
pub enum EnvState {
    /// `sandbox.packages` is empty.
    Empty,
    Ready(Arc<Env>),
    /// Not built yet, and no earlier one to use.
    Missing,
    /// The declared set is not (or could not be) built; an earlier
    /// environment is in use.
    Stale {
        env: Arc<Env>,
        reason: String,
    },
    /// The declared set could not be built and there is no earlier one.
    Failed {
        reason: String,
    },
}

impl EnvState {
    /// The environment sandboxes mount, if any.
    pub fn env(&self) -> Option<&Arc<Env>> {
        match self {
            EnvState::Ready(env) | EnvState::Stale { env, .. } => Some(env),
            _ => None,
        }
    }

    /// One word for doctor and the stats.
    pub fn label(&self) -> &'static str {
        match self {
            EnvState::Empty => "none declared",
            EnvState::Ready(_) => "ready",
            EnvState::Missing => "not built",
            EnvState::Stale { .. } => "stale",
            EnvState::Failed { .. } => "failed",
        }
    }

    /// What an answer should warn about, if anything.
    pub fn warning(&self) -> Option<String> {
        match self {
            EnvState::Stale { env, reason } => Some(format!(
                "the declared packages could not be installed ({reason}); the previous environment ({}) is in use",
                env.manifest.requirements.join(", ")
            )),
            EnvState::Failed { reason } => Some(format!(
                "the declared packages could not be installed ({reason}); code runs with the interpreter's own packages only"
            )),
            _ => None,
        }
    }
}

/// A layer built (or found) for an on-demand request.
#[derive(Debug, Clone)]
pub struct Layer {
    pub env: Arc<Env>,
    /// Found already built: no installer ran.
    pub cached: bool,
    pub took: Duration,
}

/// The package store of one data directory.
pub struct Packages {
    settings: Settings,
    root: PathBuf,
    /// One build per digest at a time in this process (other processes are
    /// kept apart by building in private directories and renaming).
    building: Mutex<HashMap<String, Arc<Mutex<()>>>>,
}

impl Packages {
    pub fn new(settings: Settings) -> Packages {
        let root = settings.data_dir.join("packages");
        Packages {
            settings,
            root,
            building: Mutex::new(HashMap::new()),
        }
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The installer, fetching the pinned uv when the host has none and
    /// packages are wanted (see [`crate::fetch_uv`]); or why there is none.
    pub fn installer(&self) -> Result<Installer, PackagesError> {
        match self.installer_on_host() {
            Err(PackagesError::NoInstaller { .. })
                if self.settings.installer.is_none() && self.wants_packages() =>
            {
                crate::fetch_uv::fetch(&self.settings.data_dir, &self.settings.python)
            }
            other => other,
        }
    }

    /// The installer as the host has it now (configured, on PATH, or
    /// fetched before), fetching nothing: for `doctor`.
    pub fn installer_on_host(&self) -> Result<Installer, PackagesError> {
        match find_installer(self.settings.installer.as_deref()) {
            Err(e) if self.settings.installer.is_none() => {
                crate::fetch_uv::already_fetched(&self.settings.data_dir).ok_or(e)
            }
            other => other,
        }
    }

    /// Whether packages may be installed at all: declared ones, or any on
    /// demand.
    pub fn wants_packages(&self) -> bool {
        !self.settings.declared.is_empty()
            || self.settings.on_demand == cem_config::OnDemand::Any
            || (self.settings.on_demand == cem_config::OnDemand::Allowlist
                && !self.settings.allowed.is_empty())
    }

    /// The digest naming the declared environment; `None` when nothing is
    /// declared.
    pub fn base_digest(&self) -> Option<String> {
        if self.settings.declared.is_empty() {
            return None;
        }
        Some(self.digest("env", None, &self.settings.declared))
    }

    fn digest(&self, kind: &str, over: Option<&str>, reqs: &[Requirement]) -> String {
        let mut sorted: Vec<&str> = reqs.iter().map(Requirement::as_str).collect();
        sorted.sort_unstable();
        let python = fs::canonicalize(&self.settings.python)
            .unwrap_or_else(|_| self.settings.python.clone());
        let mut h = Sha256::new();
        for part in [
            LAYOUT,
            kind,
            &python.to_string_lossy(),
            &self.settings.python_version,
            if self.settings.allow_source_builds {
                "sdist"
            } else {
                "wheels"
            },
            over.unwrap_or("-"),
        ] {
            h.update(part.as_bytes());
            h.update([0]);
        }
        for r in sorted {
            h.update(r.as_bytes());
            h.update([0]);
        }
        h.finalize()[..12]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// The declared environment as it is on disk; builds nothing.
    pub fn status(&self) -> EnvState {
        let Some(digest) = self.base_digest() else {
            return EnvState::Empty;
        };
        if let Some(env) = load(&self.root.join("envs"), &digest) {
            return EnvState::Ready(Arc::new(env));
        }
        match self.previous() {
            Some(env) => EnvState::Stale {
                env,
                reason: "the declared set changed and is not installed yet".into(),
            },
            None => EnvState::Missing,
        }
    }

    /// The last environment built successfully, if still on disk.
    fn previous(&self) -> Option<Arc<Env>> {
        let digest = fs::read_to_string(self.root.join("current")).ok()?;
        load(&self.root.join("envs"), digest.trim()).map(Arc::new)
    }

    /// Builds the declared environment if it is not built yet. A failure
    /// leaves the previous environment in use and says why. The flag says
    /// whether the installer ran.
    pub fn sync(&self, progress: &dyn Fn(&str)) -> (EnvState, bool) {
        let Some(digest) = self.base_digest() else {
            return (EnvState::Empty, false);
        };
        let built = self.build(
            "envs",
            &digest,
            &self.settings.declared,
            None,
            false,
            progress,
        );
        match built {
            Ok((env, found)) => {
                if let Err(e) = write_atomic(&self.root.join("current"), digest.as_bytes()) {
                    tracing::warn!(error = %e, "could not record the current package environment");
                }
                (EnvState::Ready(env), !found)
            }
            Err(e) => {
                tracing::warn!(error = %e, "the declared packages could not be installed");
                let state = match self.previous() {
                    Some(env) => EnvState::Stale {
                        env,
                        reason: e.to_string(),
                    },
                    None => EnvState::Failed {
                        reason: e.to_string(),
                    },
                };
                (state, true)
            }
        }
    }

    /// Whether the config lets agents ask for `requested`.
    pub fn check_on_demand(&self, requested: &[Requirement]) -> Result<(), PackagesError> {
        match self.settings.on_demand {
            OnDemand::Any => Ok(()),
            OnDemand::Off => Err(PackagesError::Refused(format!(
                "installing {} on demand is off (sandbox.on_demand is \"off\"); the user can declare it in \
                 sandbox.packages, or turn on-demand installs on",
                list(requested)
            ))),
            OnDemand::Allowlist => {
                let refused: Vec<&str> = requested
                    .iter()
                    .map(Requirement::name)
                    .filter(|n| {
                        // Declared packages are the user's choice already.
                        !self.settings.allowed.iter().any(|a| a == n)
                            && !self.settings.declared.iter().any(|d| d.name() == *n)
                    })
                    .collect();
                if refused.is_empty() {
                    return Ok(());
                }
                let allowed = if self.settings.allowed.is_empty() {
                    "the list is empty".to_string()
                } else {
                    format!("it allows {}", self.settings.allowed.join(", "))
                };
                Err(PackagesError::Refused(format!(
                    "{} may not be installed on demand: only packages in sandbox.allowed_packages may ({allowed}); \
                     the user can add {} there or to sandbox.packages",
                    refused.join(", "),
                    if refused.len() == 1 { "it" } else { "them" },
                )))
            }
        }
    }

    /// The layer holding `requested` over `base` (its versions pinned),
    /// built unless an identical one exists. `None` when `base` already
    /// has every package asked for by plain name.
    pub fn layer(
        &self,
        base: Option<&Env>,
        requested: &[Requirement],
        progress: &dyn Fn(&str),
    ) -> Result<Option<Layer>, PackagesError> {
        self.check_on_demand(requested)?;
        let mut wanted: Vec<Requirement> = requested
            .iter()
            .filter(|r| {
                // A bare name: any version will do, so the base's counts.
                let plain = cem_config::normalize_package(r.as_str()) == r.name();
                !(plain && base.is_some_and(|b| b.manifest.dist(r.name()).is_some()))
            })
            .cloned()
            .collect();
        wanted.sort();
        wanted.dedup();
        if wanted.is_empty() {
            return Ok(None);
        }
        let started = Instant::now();
        let over = base.map(|b| b.digest.as_str());
        let digest = self.digest("layer", over, &wanted);
        let (env, cached) = self.build(
            "layers",
            &digest,
            &wanted,
            base.map(|b| b.manifest.pins()),
            true,
            progress,
        )?;
        Ok(Some(Layer {
            env,
            cached,
            took: started.elapsed(),
        }))
    }

    /// Builds `reqs` into `<root>/<kind>/<digest>` unless it is there;
    /// returns the environment and whether it was there already.
    fn build(
        &self,
        kind: &str,
        digest: &str,
        reqs: &[Requirement],
        pins: Option<String>,
        offline_first: bool,
        progress: &dyn Fn(&str),
    ) -> Result<(Arc<Env>, bool), PackagesError> {
        let dir = self.root.join(kind);
        if let Some(env) = load(&dir, digest) {
            return Ok((Arc::new(env), true));
        }
        let lock = {
            let mut building = self
                .building
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            building.entry(digest.to_string()).or_default().clone()
        };
        let _held = lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Someone else may have built it while we waited.
        if let Some(env) = load(&dir, digest) {
            return Ok((Arc::new(env), true));
        }
        let installer = self.installer()?;
        fs::create_dir_all(&dir).map_err(PackagesError::io("cannot create", &dir))?;
        let cache = self.root.join("cache");
        let tmp = dir.join(format!(".build-{digest}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&tmp);
        fs::create_dir_all(&tmp).map_err(PackagesError::io("cannot create", &tmp))?;
        let outcome = (|| {
            let constraints = match &pins {
                Some(pins) => {
                    let file = tmp.join("constraints.txt");
                    fs::write(&file, pins).map_err(PackagesError::io("cannot write", &file))?;
                    Some(file)
                }
                None => None,
            };
            let site = tmp.join("site");
            let started = Instant::now();
            let mut job = Job {
                python: &self.settings.python,
                target: &site,
                cache: &cache,
                requirements: reqs,
                constraints: constraints.as_deref(),
                allow_source_builds: self.settings.allow_source_builds,
                offline: offline_first,
                timeout: self.settings.timeout,
            };
            let first = installer.install(&job, &|_| {});
            if first.is_err() && offline_first {
                // Not all in the cache: ask the index.
                let _ = fs::remove_dir_all(&site);
                job.offline = false;
                installer.install(&job, progress)?;
            } else {
                first?;
            }
            let manifest = Manifest {
                requirements: reqs.iter().map(|r| r.as_str().to_string()).collect(),
                dists: scan(&site),
                size_bytes: tree_size(&site),
                python: self.settings.python.display().to_string(),
                python_version: self.settings.python_version.clone(),
                built_at: std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_secs())
                    .unwrap_or_default(),
                build_ms: started.elapsed().as_millis() as u64,
            };
            make_readable(&tmp).map_err(PackagesError::io("cannot set permissions in", &tmp))?;
            let json = serde_json::to_vec_pretty(&manifest).map_err(|e| PackagesError::Io {
                what: "cannot encode the manifest of",
                path: tmp.clone(),
                source: e.into(),
            })?;
            let file = tmp.join(MANIFEST);
            write_atomic(&file, &json).map_err(PackagesError::io("cannot write", &file))?;
            Ok(())
        })();
        if let Err(e) = outcome {
            let _ = fs::remove_dir_all(&tmp);
            return Err(e);
        }
        let target = dir.join(digest);
        if let Err(e) = fs::rename(&tmp, &target) {
            let _ = fs::remove_dir_all(&tmp);
            // Another process finished the same build first: use its.
            if load(&dir, digest).is_none() {
                return Err(PackagesError::Io {
                    what: "cannot move the new environment to",
                    path: target,
                    source: e,
                });
            }
        }
        let env = load(&dir, digest).ok_or_else(|| PackagesError::Install {
            packages: list(reqs),
            detail: "the new environment has no manifest".into(),
        })?;
        Ok((Arc::new(env), false))
    }

    /// The directory holding every layer (made if missing): sandboxes
    /// mount it read-only and put the layers they were given on sys.path.
    /// Searchable but not listable by other uids, so a sandbox running as
    /// its own uid cannot enumerate what others installed.
    pub fn layers_dir(&self) -> Result<PathBuf, PackagesError> {
        use std::os::unix::fs::PermissionsExt;
        let dir = self.root.join("layers");
        fs::create_dir_all(&dir).map_err(PackagesError::io("cannot create", &dir))?;
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o711))
            .map_err(PackagesError::io("cannot set permissions of", &dir))?;
        Ok(dir)
    }

    /// Every layer built so far.
    pub fn layers(&self) -> Vec<Env> {
        let dir = self.root.join("layers");
        let mut out: Vec<Env> = fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| load(&dir, &e.file_name().to_string_lossy()))
            .collect();
        out.sort_by_key(|e| std::cmp::Reverse(e.manifest.built_at));
        out
    }

    /// What the agent should be told when `module` cannot be imported.
    pub fn missing_module_note(&self, module: &str) -> String {
        let top = module.split('.').next().unwrap_or(module);
        let package = module_hint(top)
            .map(str::to_string)
            .unwrap_or_else(|| cem_config::normalize_package(top));
        let ask = format!(
            "call execute_code with requirements: [\"{package}\"], or run install(\"{package}\") in the code before the import"
        );
        let other_name = if module_hint(top).is_none() {
            " (if its package has another name on the index, ask for that name)"
        } else {
            ""
        };
        match self.settings.on_demand {
            OnDemand::Any => format!(
                "{top} is not installed, but it can be installed on demand{other_name}: {ask}."
            ),
            OnDemand::Allowlist if self.settings.allowed.contains(&package) => {
                format!("{top} is not installed, but {package} may be installed on demand: {ask}.")
            }
            OnDemand::Allowlist => format!(
                "{top} is not installed, and {package} is not in sandbox.allowed_packages, so it cannot be installed \
                 on demand{other_name}; the user can add it to sandbox.allowed_packages or sandbox.packages in the config. \
                 Meanwhile, use the standard library."
            ),
            OnDemand::Off => format!(
                "{top} is not installed and on-demand installs are off (sandbox.on_demand); the user can add \
                 {package} to sandbox.packages in the config. Meanwhile, use the standard library."
            ),
        }
    }
}

fn load(dir: &Path, digest: &str) -> Option<Env> {
    let at = dir.join(digest);
    let manifest: Manifest = serde_json::from_slice(&fs::read(at.join(MANIFEST)).ok()?).ok()?;
    let site = at.join("site");
    site.is_dir().then(|| Env {
        digest: digest.to_string(),
        site,
        manifest,
    })
}

fn list(reqs: &[Requirement]) -> String {
    reqs.iter()
        .map(Requirement::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The package behind a module whose name differs from it, for the common
/// cases agents hit.
pub fn module_hint(module: &str) -> Option<&'static str> {
    Some(match module {
        "sklearn" => "scikit-learn",
        "skimage" => "scikit-image",
        "yaml" => "pyyaml",
        "cv2" => "opencv-python-headless",
        "PIL" => "pillow",
        "bs4" => "beautifulsoup4",
        "dateutil" => "python-dateutil",
        "docx" => "python-docx",
        "pptx" => "python-pptx",
        "magic" => "python-magic",
        "dotenv" => "python-dotenv",
        "jwt" => "pyjwt",
        "Crypto" => "pycryptodome",
        "OpenSSL" => "pyopenssl",
        "fitz" => "pymupdf",
        "google.protobuf" | "google" => "protobuf",
        "attr" => "attrs",
        "serial" => "pyserial",
        "lxml" => "lxml",
        "pyarrow" => "pyarrow",
        "numpy" => "numpy",
        "pandas" => "pandas",
        "openpyxl" => "openpyxl",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packages(on_demand: OnDemand, allowed: &[&str]) -> Packages {
        Packages::new(Settings {
            data_dir: PathBuf::from("/nonexistent"),
            python: PathBuf::from("/usr/bin/python3"),
            python_version: "3.11.2".into(),
            declared: vec![],
            allow_source_builds: false,
            on_demand,
            allowed: allowed.iter().map(|s| s.to_string()).collect(),
            installer: None,
            timeout: Duration::from_secs(60),
        })
    }

    fn reqs(texts: &[&str]) -> Vec<Requirement> {
        texts
            .iter()
            .map(|t| Requirement::parse(t).unwrap_or_else(|e| panic!("{e}")))
            .collect()
    }

    #[test]
    fn the_allowlist_names_what_it_refuses_and_the_key() {
        let p = packages(OnDemand::Allowlist, &["pandas"]);
        assert!(p.check_on_demand(&reqs(&["pandas>=2", "Pandas"])).is_ok());
        let e = p
            .check_on_demand(&reqs(&["pandas", "requests"]))
            .map(|_| ())
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.starts_with("requests may not be installed"), "{e}");
        assert!(e.contains("sandbox.allowed_packages"), "{e}");
        let off = packages(OnDemand::Off, &["pandas"]);
        assert!(off.check_on_demand(&reqs(&["pandas"])).is_err());
        let empty = packages(OnDemand::Allowlist, &[]);
        let e = empty
            .check_on_demand(&reqs(&["numpy"]))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("the list is empty"), "{e}");
    }

    #[test]
    fn digests_ignore_order_and_see_every_input() {
        let p = packages(OnDemand::Any, &[]);
        let a = p.digest("layer", Some("base"), &reqs(&["pandas", "openpyxl"]));
        assert_eq!(
            a,
            p.digest("layer", Some("base"), &reqs(&["openpyxl", "pandas"]))
        );
        assert_ne!(
            a,
            p.digest("layer", Some("other"), &reqs(&["openpyxl", "pandas"]))
        );
        assert_ne!(
            a,
            p.digest("layer", Some("base"), &reqs(&["openpyxl", "pandas<3"]))
        );
        assert_ne!(
            a,
            p.digest("env", Some("base"), &reqs(&["openpyxl", "pandas"]))
        );
    }

    #[test]
    fn missing_module_notes_say_what_can_be_done() {
        let allow = packages(OnDemand::Allowlist, &["scikit-learn"]);
        let note = allow.missing_module_note("sklearn.linear_model");
        assert!(note.contains("install(\"scikit-learn\")"), "{note}");
        let note = allow.missing_module_note("requests");
        assert!(note.contains("sandbox.allowed_packages"), "{note}");
        let off = packages(OnDemand::Off, &[]);
        assert!(
            off.missing_module_note("yaml")
                .contains("add pyyaml to sandbox.packages")
        );
    }
}
