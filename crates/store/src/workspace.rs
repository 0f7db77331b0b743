//! The workspace directory and its confined file operations.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use cap_std::ambient_authority;
use cap_std::fs::{Dir, OpenOptions, OpenOptionsExt};
use serde::Serialize;

use crate::{WorkspaceError, validate_relative};

/// Entries listed at most by one [`Workspace::list`] call.
pub const LIST_LIMIT: usize = 1000;
/// Prefix of in-flight temporary files; hidden from listings.
const TMP_PREFIX: &str = ".cem-tmp.";

static TMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A directory whose files agents may read and write, and nothing beyond it.
#[derive(Debug)]
pub struct Workspace {
    root: PathBuf,
    dir: Dir,
    max_file_bytes: u64,
}

/// What a write did.
#[derive(Debug, Clone, Serialize)]
pub struct Written {
    pub path: String,
    pub size: u64,
    pub created: bool,
}

/// One entry of a listing, its path relative to the workspace.
#[derive(Debug, Clone, Serialize)]
pub struct Entry {
    pub path: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub size: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub modified: Option<String>,
}

/// Entries under a directory, depth first, capped at [`LIST_LIMIT`].
#[derive(Debug, Clone, Serialize)]
pub struct Listing {
    pub entries: Vec<Entry>,
    pub truncated: bool,
}

/// Totals for `get_execution_stats`.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Usage {
    pub files: u64,
    pub bytes: u64,
}

impl Workspace {
    /// Opens (creating if needed) the workspace at `root`.
    pub fn open(root: &Path, max_file_bytes: u64) -> Result<Self, WorkspaceError> {
        let shown = root.display().to_string();
        std::fs::create_dir_all(root).map_err(|e| WorkspaceError::io(&shown, e))?;
        let dir = Dir::open_ambient_dir(root, ambient_authority())
            .map_err(|e| WorkspaceError::io(&shown, e))?;
        Ok(Self {
            root: root.to_path_buf(),
            dir,
            max_file_bytes,
        })
    }

    /// The workspace directory on the host.
    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn max_file_bytes(&self) -> u64 {
        self.max_file_bytes
    }

    /// Writes `content` to `path` atomically, creating parent directories.
    pub fn write(&self, path: &str, content: &[u8]) -> Result<Written, WorkspaceError> {
        let rel = file_path(path)?;
        let size = content.len() as u64;
        if size > self.max_file_bytes {
            return Err(WorkspaceError::TooLarge {
                size,
                limit: self.max_file_bytes,
            });
        }
        let shown = rel.display().to_string();
        let parent = rel.parent().filter(|p| !p.as_os_str().is_empty());
        if let Some(parent) = parent
            && let Err(e) = self.dir.create_dir_all(parent)
        {
            // EEXIST here means a component is not a directory we may
            // enter, typically a symlink leading out; find out which.
            return Err(match self.dir.metadata(parent) {
                Err(inner) => WorkspaceError::io(&shown, inner),
                Ok(meta) if !meta.is_dir() => WorkspaceError::NotDirectory {
                    path: parent.display().to_string(),
                },
                Ok(_) => WorkspaceError::io(&shown, e),
            });
        }
        let created = match self.dir.symlink_metadata(&rel) {
            Ok(meta) if meta.is_dir() => return Err(WorkspaceError::IsDirectory { path: shown }),
            Ok(_) => false,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => true,
            Err(e) => return Err(WorkspaceError::io(&shown, e)),
        };
        let tmp = tmp_name(&rel);
        let result = self.write_tmp(&tmp, content).and_then(|()| {
            // rename replaces a symlink at the target rather than writing
            // through it, so a planted link cannot redirect the write.
            self.dir.rename(&tmp, &self.dir, &rel)
        });
        if let Err(e) = result {
            let _ = self.dir.remove_file(&tmp);
            return Err(WorkspaceError::io(&shown, e));
        }
        Ok(Written {
            path: shown,
            size,
            created,
        })
    }

    fn write_tmp(&self, tmp: &Path, content: &[u8]) -> std::io::Result<()> {
        let mut options = OpenOptions::new();
        options.write(true).create_new(true).mode(0o644);
        let mut file = self.dir.open_with(tmp, &options)?;
        file.write_all(content)?;
        file.sync_all()
    }

    /// Reads a whole file, refusing anything but regular files within the
    /// size limit.
    pub fn read(&self, path: &str) -> Result<Vec<u8>, WorkspaceError> {
        let rel = file_path(path)?;
        let shown = rel.display().to_string();
        let mut options = OpenOptions::new();
        // O_NONBLOCK: opening a FIFO that sandboxed code left here must not
        // hang the server; the type is checked on the opened handle below.
        options.read(true).custom_flags(libc::O_NONBLOCK);
        let file = self
            .dir
            .open_with(&rel, &options)
            .map_err(|e| WorkspaceError::io(&shown, e))?;
        let meta = file.metadata().map_err(|e| WorkspaceError::io(&shown, e))?;
        if meta.is_dir() {
            return Err(WorkspaceError::IsDirectory { path: shown });
        }
        if !meta.is_file() {
            return Err(WorkspaceError::NotRegular { path: shown });
        }
        if meta.len() > self.max_file_bytes {
            return Err(WorkspaceError::TooLargeToRead {
                path: shown,
                size: meta.len(),
                limit: self.max_file_bytes,
            });
        }
        let mut content = Vec::with_capacity(meta.len() as usize);
        // take(): the file may grow after the size check.
        file.take(self.max_file_bytes + 1)
            .read_to_end(&mut content)
            .map_err(|e| WorkspaceError::io(&shown, e))?;
        if content.len() as u64 > self.max_file_bytes {
            return Err(WorkspaceError::TooLargeToRead {
                path: shown,
                size: content.len() as u64,
                limit: self.max_file_bytes,
            });
        }
        Ok(content)
    }

    /// Reads a file as UTF-8 text.
    pub fn read_text(&self, path: &str) -> Result<String, WorkspaceError> {
        let bytes = self.read(path)?;
        let size = bytes.len() as u64;
        String::from_utf8(bytes).map_err(|_| WorkspaceError::NotText {
            path: path.to_string(),
            size,
        })
    }

    /// Lists files and directories under `subpath` (the whole workspace when
    /// empty), recursively, without following symlinks.
    pub fn list(&self, subpath: &str) -> Result<Listing, WorkspaceError> {
        let rel = validate_relative(subpath)?;
        let shown = rel.display().to_string();
        let mut listing = Listing {
            entries: Vec::new(),
            truncated: false,
        };
        let start = if rel.as_os_str().is_empty() {
            self.dir
                .try_clone()
                .map_err(|e| WorkspaceError::io(".", e))?
        } else {
            let meta = self
                .dir
                .metadata(&rel)
                .map_err(|e| WorkspaceError::io(&shown, e))?;
            if !meta.is_dir() {
                return Err(WorkspaceError::NotDirectory { path: shown });
            }
            self.dir
                .open_dir(&rel)
                .map_err(|e| WorkspaceError::io(&shown, e))?
        };
        walk(&start, &rel, &mut |entry| {
            if listing.entries.len() >= LIST_LIMIT {
                listing.truncated = true;
                return false;
            }
            listing.entries.push(entry);
            true
        })
        .map_err(|e| WorkspaceError::io(&shown, e))?;
        Ok(listing)
    }

    /// Counts files and bytes in the whole workspace.
    pub fn usage(&self) -> Result<Usage, WorkspaceError> {
        let mut usage = Usage::default();
        let start = self
            .dir
            .try_clone()
            .map_err(|e| WorkspaceError::io(".", e))?;
        walk(&start, Path::new(""), &mut |entry| {
            if entry.kind == "file" {
                usage.files += 1;
                usage.bytes += entry.size;
            }
            true
        })
        .map_err(|e| WorkspaceError::io(".", e))?;
        Ok(usage)
    }
}

/// A path that must name a file (not the workspace itself).
fn file_path(path: &str) -> Result<PathBuf, WorkspaceError> {
    let rel = validate_relative(path)?;
    if rel.as_os_str().is_empty() {
        return Err(WorkspaceError::BadPath {
            path: path.to_string(),
            reason: "a file name is required".to_string(),
        });
    }
    if path.ends_with('/') {
        return Err(WorkspaceError::BadPath {
            path: path.to_string(),
            reason: "ends with '/', so it names a directory; give a file name".to_string(),
        });
    }
    Ok(rel)
}

fn tmp_name(target: &Path) -> PathBuf {
    let n = TMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    let name = format!("{TMP_PREFIX}{}.{n}", std::process::id());
    match target.parent() {
        Some(parent) => parent.join(name),
        None => PathBuf::from(name),
    }
}

/// Depth-first walk in name order; `visit` returns false to stop.
fn walk(dir: &Dir, prefix: &Path, visit: &mut dyn FnMut(Entry) -> bool) -> std::io::Result<bool> {
    let mut children: Vec<_> = dir.entries()?.collect::<Result<_, _>>()?;
    children.sort_by_key(|e| e.file_name());
    for child in children {
        let name = child.file_name();
        if name.to_string_lossy().starts_with(TMP_PREFIX) {
            continue;
        }
        let path = prefix.join(&name);
        // DirEntry::metadata does not follow symlinks.
        let meta = child.metadata()?;
        let kind = if meta.is_symlink() {
            "symlink"
        } else if meta.is_dir() {
            "directory"
        } else if meta.is_file() {
            "file"
        } else {
            "other"
        };
        let entry = Entry {
            path: path.display().to_string(),
            kind,
            size: if kind == "file" { meta.len() } else { 0 },
            modified: meta.modified().ok().map(|t| t.into_std()).map(format_time),
        };
        if !visit(entry) {
            return Ok(false);
        }
        if kind == "directory" {
            let sub = dir.open_dir(&name)?;
            if !walk(&sub, &path, visit)? {
                return Ok(false);
            }
        }
    }
    Ok(true)
}

fn format_time(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}
