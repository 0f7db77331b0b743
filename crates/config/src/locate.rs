//! Where the config file is looked up.
//!
//! Order: `--config FILE`, then `$CODE_EXECUTION_MCP_CONFIG`, then
//! `./mcp_config.json`, then `<user config dir>/code-execution-mcp/mcp_config.json`.
//! A file named explicitly (flag or variable) must exist; the two implicit
//! places are simply skipped when absent, and no config at all is fine.

use std::path::{Path, PathBuf};

use crate::ConfigError;

/// The environment variable that may name the config file.
pub const CONFIG_ENV: &str = "CODE_EXECUTION_MCP_CONFIG";
/// The file name looked for in the current and user config directories.
pub const FILE_NAME: &str = "mcp_config.json";
/// The directory under the user's config dir.
pub const APP_DIR: &str = "code-execution-mcp";

/// How the config file was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigSource {
    Flag,
    Env,
    CurrentDir,
    UserDir,
}

impl ConfigSource {
    pub fn describe(&self) -> &'static str {
        match self {
            ConfigSource::Flag => "--config",
            ConfigSource::Env => CONFIG_ENV,
            ConfigSource::CurrentDir => "the current directory",
            ConfigSource::UserDir => "the user config directory",
        }
    }
}

/// A config file that exists, and how it was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    pub path: PathBuf,
    pub source: ConfigSource,
}

/// Finds the config file, or `None` when there is none anywhere.
pub fn locate(
    flag: Option<&Path>,
    env: Option<&Path>,
    cwd: &Path,
    user_config_dir: Option<&Path>,
) -> Result<Option<Located>, ConfigError> {
    let explicit = [(flag, ConfigSource::Flag), (env, ConfigSource::Env)];
    for (path, source) in explicit {
        if let Some(path) = path {
            // exists(), not is_file(): a FIFO or /dev/fd path is fine, and
            // an unreadable file should fail at read time with the real error.
            if path.exists() {
                return Ok(Some(Located {
                    path: path.to_path_buf(),
                    source,
                }));
            }
            return Err(ConfigError::Missing {
                path: path.to_path_buf(),
                origin: source.describe().to_string(),
            });
        }
    }
    let implicit = [
        (Some(cwd.join(FILE_NAME)), ConfigSource::CurrentDir),
        (
            user_config_dir.map(|d| d.join(APP_DIR).join(FILE_NAME)),
            ConfigSource::UserDir,
        ),
    ];
    for (path, source) in implicit {
        if let Some(path) = path.filter(|p| p.is_file()) {
            return Ok(Some(Located { path, source }));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_is_flag_env_cwd_user() -> Result<(), Box<dyn std::error::Error>> {
        let tmp = tempfile::tempdir()?;
        let cwd = tmp.path().join("cwd");
        let user = tmp.path().join("user");
        std::fs::create_dir_all(&cwd)?;
        std::fs::create_dir_all(user.join(APP_DIR))?;
        let flag = tmp.path().join("flag.json");
        let env = tmp.path().join("env.json");
        for p in [
            &flag,
            &env,
            &cwd.join(FILE_NAME),
            &user.join(APP_DIR).join(FILE_NAME),
        ] {
            std::fs::write(p, "{}")?;
        }

        let found = locate(Some(&flag), Some(&env), &cwd, Some(&user))?;
        assert_eq!(found.map(|l| l.source), Some(ConfigSource::Flag));
        let found = locate(None, Some(&env), &cwd, Some(&user))?;
        assert_eq!(found.map(|l| l.source), Some(ConfigSource::Env));
        let found = locate(None, None, &cwd, Some(&user))?;
        assert_eq!(found.map(|l| l.source), Some(ConfigSource::CurrentDir));
        std::fs::remove_file(cwd.join(FILE_NAME))?;
        let found = locate(None, None, &cwd, Some(&user))?;
        assert_eq!(found.map(|l| l.source), Some(ConfigSource::UserDir));
        std::fs::remove_file(user.join(APP_DIR).join(FILE_NAME))?;
        assert_eq!(locate(None, None, &cwd, Some(&user))?, None);
        Ok(())
    }

    #[test]
    fn a_named_file_that_is_missing_is_an_error() {
        let err = locate(
            Some(Path::new("/nonexistent/x.json")),
            None,
            Path::new("/"),
            None,
        );
        let msg = err.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(msg.contains("/nonexistent/x.json"), "{msg}");
        assert!(msg.contains("--config"), "{msg}");
    }
}
