//! Persistent storage of code-execution-mcp.
//!
//! The [`Workspace`]: the directory under the data dir where
//! agents keep files between executions. Every access is confined to it with
//! `cap-std`, which resolves each path beneath the workspace's directory
//! handle and refuses `..`, absolute paths and symlinks that lead out, so a
//! symlink planted by sandboxed code cannot make the host read or write
//! outside. Writes go to a temporary file that is renamed into place.
//!
//! And the [`SkillStore`]: code agents saved to reuse, one directory per
//! skill in the Agent Skills layout (SKILL.md with YAML front matter, and
//! the code), with earlier versions kept.
//!
//! And the [`PinStore`]: each upstream server's tool digests as first
//! trusted, for the policy's trust-on-first-use check.

mod atomic;
mod error;
mod path;
mod pins;
mod skill_export;
mod skill_file;
mod skill_name;
mod skills;
mod workspace;

pub use error::{SkillError, WorkspaceError};
pub use path::{MAX_PATH_BYTES, validate_relative};
pub use pins::{PinError, PinStore};
pub use skill_export::{SkillDir, find_skill_dirs, read_skill_dir};
pub use skill_file::{Parsed as ParsedSkillFile, SkillMeta, parse as parse_skill_file};
pub use skill_name::{MAX_NAME, SkillName};
pub use skills::{
    Analysis, CODE_FILE, KEEP_VERSIONS, MAX_CODE_BYTES, MAX_DESCRIPTION, Saved, Skill, SkillStore,
    check_code, check_description, code_hash,
};
pub use workspace::{Entry, FileStamp, LIST_LIMIT, Listing, MAX_DEPTH, Usage, Workspace, Written};
