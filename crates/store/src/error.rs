//! What can go wrong in the workspace, phrased for an agent to act on.

#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    #[error("invalid path {path:?}: {reason}")]
    BadPath { path: String, reason: String },
    #[error("{path:?} does not exist in the workspace; list_workspace_files shows what is there")]
    NotFound { path: String },
    #[error("{path:?} is a directory, not a file")]
    IsDirectory { path: String },
    #[error("{path:?} is not a directory")]
    NotDirectory { path: String },
    #[error("{path:?} is not a regular file (a device, socket or pipe); refused")]
    NotRegular { path: String },
    #[error("{path:?} leads outside the workspace (through a symlink or '..'); refused")]
    Escapes { path: String },
    #[error("permission denied on {path:?}")]
    PermissionDenied { path: String },
    #[error(
        "{path:?} has {links} hard links; refused, because a hard link can point at a file \
         outside the workspace"
    )]
    HardLinked { path: String, links: u64 },
    #[error(
        "the workspace directory {root} is a symlink or not a directory; refusing to follow it. \
         Make it a real directory or pass another --data-dir"
    )]
    UnsafeRoot { root: String },
    #[error(
        "the workspace directory {root} was replaced or removed while the server ran; \
         restart the server to use the new one"
    )]
    Replaced { root: String },
    #[error(
        "content is {size} bytes, over the limit of {limit} bytes per file; \
         write smaller files or raise workspace.max_file_bytes in the config"
    )]
    TooLarge { size: u64, limit: u64 },
    #[error(
        "{path:?} is {size} bytes, over the read limit of {limit} bytes; \
         process it with execute_code instead of reading it whole"
    )]
    TooLargeToRead { path: String, size: u64, limit: u64 },
    #[error("{path:?} is not UTF-8 text ({size} bytes); read it with execute_code")]
    NotText { path: String, size: u64 },
    #[error("workspace I/O error on {path:?}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

impl WorkspaceError {
    /// Maps an I/O error from a confined operation on `path`.
    pub fn from_io(path: &str, source: std::io::Error) -> Self {
        Self::io(path, source)
    }

    pub(crate) fn io(path: &str, source: std::io::Error) -> Self {
        use std::io::ErrorKind;
        let path = path.to_string();
        match source.kind() {
            ErrorKind::NotFound => WorkspaceError::NotFound { path },
            ErrorKind::IsADirectory => WorkspaceError::IsDirectory { path },
            ErrorKind::NotADirectory => WorkspaceError::NotDirectory { path },
            // cap-std reports a path that resolves outside the base
            // directory as PermissionDenied with its own message, and the
            // kernel's RESOLVE_BENEATH as EXDEV; other EACCES are real
            // permission problems. A symlink loop shows up as ELOOP.
            ErrorKind::PermissionDenied if source.raw_os_error().is_none() => {
                WorkspaceError::Escapes { path }
            }
            ErrorKind::PermissionDenied => WorkspaceError::PermissionDenied { path },
            _ if matches!(source.raw_os_error(), Some(libc::ELOOP) | Some(libc::EXDEV)) => {
                WorkspaceError::Escapes { path }
            }
            _ => WorkspaceError::Io { path, source },
        }
    }
}

/// What can go wrong with skills, phrased for an agent to act on.
#[derive(Debug, thiserror::Error)]
pub enum SkillError {
    #[error(
        "invalid skill name {name:?}: {reason}. Use lowercase letters and digits, words joined \
         by _ or -, starting with a letter, at most 64 characters (for example top_authors)"
    )]
    BadName { name: String, reason: String },
    #[error("skill '{name}': the description is invalid: {reason}")]
    BadDescription { name: String, reason: String },
    #[error("skill '{name}': {reason}")]
    BadCode { name: String, reason: String },
    #[error("no skill named '{name}'; list_skills shows the saved ones")]
    NotFound { name: String },
    #[error("skill '{name}' has no version {version}; kept: {kept}")]
    NoVersion {
        name: String,
        version: u64,
        kept: String,
    },
    #[error("the skill store is full: {reason}")]
    Full { reason: String },
    #[error("skill '{name}': SKILL.md is unreadable: {reason}")]
    Format { name: String, reason: String },
    #[error("skill store I/O error on {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}
