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
    pub(crate) fn io(path: &str, source: std::io::Error) -> Self {
        use std::io::ErrorKind;
        let path = path.to_string();
        match source.kind() {
            ErrorKind::NotFound => WorkspaceError::NotFound { path },
            ErrorKind::IsADirectory => WorkspaceError::IsDirectory { path },
            ErrorKind::NotADirectory => WorkspaceError::NotDirectory { path },
            // cap-std reports a path that resolves outside the base
            // directory as PermissionDenied ("a path led outside of the
            // filesystem"); a symlink loop shows up as ELOOP.
            ErrorKind::PermissionDenied => WorkspaceError::Escapes { path },
            _ if source.raw_os_error() == Some(libc::ELOOP) => WorkspaceError::Escapes { path },
            _ => WorkspaceError::Io { path, source },
        }
    }
}
