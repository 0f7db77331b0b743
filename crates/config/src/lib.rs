//! Configuration for code-execution-mcp.
//!
//! The file is `mcp_config.json` in the `mcpServers` format that Claude
//! Desktop, Claude Code, Cursor and VS Code already use, plus our own
//! `sandbox`, `pii` and `workspace` sections. This crate finds the file
//! ([`locate`]), expands `${VAR}` references ([`expand`]) and turns the JSON
//! into typed settings ([`parse`]) with errors that name the offending key,
//! for example `mcpServers.git: a stdio server needs "command"`.
//!
//! It does no I/O beyond reading the one file and never connects to anything.

mod access;
mod error;
pub mod expand;
pub mod locate;
mod model;
mod parse;
mod redact;
mod requirement;
mod secret;
mod signin;
mod unique;

pub use access::{Ability, AuthConfig, OAuthConfig, QuotaConfig, StoreConfig};
/// The compiled `policy` section (rules, budgets, pins), from `cem-policy`.
pub use cem_policy as policy;
pub use error::{ConfigError, Problem};
pub use expand::TENANT_DIR_VAR;
pub use locate::{ConfigSource, Located};
pub use model::{
    AnswersConfig, AuditConfig, CatalogConfig, Config, DiskQuotaMode, HttpConfig,
    MAX_LIST_CHANGED_BACKOFF_SECONDS, MetricsConfig, OnDemand, POOL_COLD, POOL_FORKED, PiiConfig,
    PiiMode, PiiType, SandboxConfig, SearchConfig, ServerConfig, Transport, UpstreamConfig,
    WorkspaceConfig,
};
pub use parse::{Parsed, parse_str};
pub use redact::{REDACTED, Redactor, SecretValues, names_a_credential, tenant_digest};
pub use requirement::{Requirement, normalize as normalize_package};
pub use secret::Secret;
pub use signin::{SignInConfig, UpstreamAuth, UpstreamOAuth};

use std::path::Path;

/// Reads and parses the config file at `path`, expanding `${VAR}` from the
/// process environment.
pub fn load_file(path: &Path) -> Result<Parsed, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse_str(&text, path, &|name| std::env::var(name).ok())
}
