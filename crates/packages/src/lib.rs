//! Python packages for the sandbox, installed by the host.
//!
//! The sandbox never gets the network, so it cannot install anything; the
//! host does it with `uv` and the sandbox only reads the result:
//! - the **declared environment** (`sandbox.packages`) is built once per
//!   (interpreter, requirement set) under `<data>/packages/envs/<digest>`
//!   and bound read-only into every sandbox; a failed rebuild keeps the
//!   last good one in use and says why ([`Packages::sync`]);
//! - **layers** are what agents ask for while they work: each is built
//!   once per (declared environment, requested set) under
//!   `<data>/packages/layers/<digest>` with the declared versions pinned,
//!   so a second session asking for the same set reuses it without any
//!   install, and uv's shared cache makes other sets fast too;
//! - every sandbox mounts the layer directory read-only
//!   ([`Packages::layers_dir`]) and puts on `sys.path` only the layers the
//!   host names to it; attaching a layer to a running interpreter costs
//!   nothing, however big the layer.
//!
//! Wheels only unless `sandbox.allow_source_builds`: building a source
//! distribution runs its code on the host.

mod files;
mod installer;
mod manifest;
mod store;

pub mod fetch_uv;
pub use installer::{Installer, find_installer};
pub use manifest::{Dist, Manifest};
pub use store::{Env, EnvState, Layer, Packages, Settings, module_hint};

use std::path::PathBuf;

/// What can go wrong installing packages; every message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum PackagesError {
    #[error(
        "no package installer: {tried}. Install uv on the host (`pip install uv` or `pipx install uv`) \
         or set sandbox.installer to the uv binary"
    )]
    NoInstaller { tried: String },
    #[error("{0}")]
    Refused(String),
    #[error(
        "{package} is only published as source code, and building it would run its code on this host; \
         the user can allow that with \"allow_source_builds\": true in the sandbox section of the config"
    )]
    SourceOnly { package: String },
    #[error("installing {packages} failed: {detail}")]
    Install { packages: String, detail: String },
    #[error(
        "installing {packages} took over {seconds} s (sandbox.install_timeout_seconds) and was stopped"
    )]
    Timeout { packages: String, seconds: u64 },
    #[error("{what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
}

impl PackagesError {
    fn io(what: &'static str, path: &std::path::Path) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.to_path_buf();
        move |source| PackagesError::Io { what, path, source }
    }
}
