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

/// Deepest directory level a listing or usage count descends to.
pub const MAX_DEPTH: usize = 64;
/// Entries a usage count visits at most (it reports a lower bound past it).
const USAGE_BUDGET: usize = 200_000;
/// Temporary files older than this are leftovers of a crash.
const STALE_TMP: std::time::Duration = std::time::Duration::from_secs(3600);

/// A directory whose files agents may read and write, and nothing beyond it.
#[derive(Debug)]
pub struct Workspace {
    root: PathBuf,
    dir: Dir,
    max_file_bytes: u64,
    /// (device, inode) of the root when opened, to notice a replacement.
    identity: (u64, u64),
    /// Owner given to what the tools create (the sandbox's uid when the
    /// server runs as root), else the server's own.
    owner: Option<(u32, u32)>,
    /// Entries the last walk of [`Workspace::files`] saw (`usize::MAX`
    /// before the first): whether the next one is likely small.
    last_walk: std::sync::atomic::AtomicUsize,
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

/// A regular file as a replica sees it: enough to tell it changed
/// without reading it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileStamp {
    pub path: String,
    pub size: u64,
    /// Modification time, nanoseconds since the epoch.
    pub modified_ns: i128,
}

/// Totals for `get_execution_stats`.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Usage {
    pub files: u64,
    pub bytes: u64,
}

impl Workspace {
    /// Opens (creating if needed, mode 0700) the workspace at `root`.
    pub fn open(root: &Path, max_file_bytes: u64) -> Result<Self, WorkspaceError> {
        Self::open_owned(root, max_file_bytes, None)
    }

    /// Like [`Workspace::open`], handing the root and everything the tools
    /// create to `owner` (uid, gid).
    pub fn open_owned(
        root: &Path,
        max_file_bytes: u64,
        owner: Option<(u32, u32)>,
    ) -> Result<Self, WorkspaceError> {
        use std::os::unix::fs::{DirBuilderExt, MetadataExt};
        let shown = root.display().to_string();
        if let Some(parent) = root.parent() {
            std::fs::create_dir_all(parent).map_err(|e| WorkspaceError::io(&shown, e))?;
        }
        match std::fs::DirBuilder::new().mode(0o700).create(root) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(WorkspaceError::io(&shown, e)),
        }
        // The root itself must not be a symlink: following one would put
        // the "workspace" anywhere (a home directory, say).
        let meta = std::fs::symlink_metadata(root).map_err(|e| WorkspaceError::io(&shown, e))?;
        if !meta.is_dir() {
            return Err(WorkspaceError::UnsafeRoot { root: shown });
        }
        if let Some((uid, gid)) = owner {
            // By path is safe for the root alone: its path lies outside
            // anything sandboxed code can reach or rename.
            std::os::unix::fs::lchown(root, Some(uid), Some(gid))
                .map_err(|e| WorkspaceError::io(&shown, e))?;
        }
        let dir = Dir::open_ambient_dir(root, ambient_authority())
            .map_err(|e| WorkspaceError::io(&shown, e))?;
        let ws = Self {
            root: root.to_path_buf(),
            dir,
            max_file_bytes,
            identity: (meta.dev(), meta.ino()),
            last_walk: std::sync::atomic::AtomicUsize::new(usize::MAX),
            owner,
        };
        ws.remove_stale_temp_files();
        Ok(ws)
    }

    /// Fails when the root path no longer names the directory we opened.
    fn check_root(&self) -> Result<(), WorkspaceError> {
        use std::os::unix::fs::MetadataExt;
        match std::fs::symlink_metadata(&self.root) {
            Ok(m) if m.is_dir() && (m.dev(), m.ino()) == self.identity => Ok(()),
            _ => Err(WorkspaceError::Replaced {
                root: self.root.display().to_string(),
            }),
        }
    }

    /// Gives an open file or directory to the configured owner, if any.
    /// Only ever through a handle: sandboxed code can swap any path
    /// component for a symlink between our lookup and a chown by name.
    fn chown_handle(&self, handle: &impl std::os::fd::AsFd) -> std::io::Result<()> {
        match self.owner {
            Some((uid, gid)) => std::os::unix::fs::fchown(handle, Some(uid), Some(gid)),
            None => Ok(()),
        }
    }

    /// Removes temporary files a crashed write left behind (old ones only:
    /// another server sharing this data dir may be writing right now).
    fn remove_stale_temp_files(&self) {
        let Ok(start) = self.dir.try_clone() else {
            return;
        };
        let mut stale = Vec::new();
        let _ = walk(
            &start,
            Path::new(""),
            &mut |entry, meta| {
                let name = entry.path.rsplit('/').next().unwrap_or("");
                let old = meta
                    .modified()
                    .ok()
                    .and_then(|t| t.into_std().elapsed().ok())
                    .is_some_and(|age| age > STALE_TMP);
                if name.starts_with(TMP_PREFIX) && entry.kind == "file" && old {
                    stale.push(PathBuf::from(&entry.path));
                }
                stale.len() < 10_000
            },
            true,
        );
        for path in stale {
            let _ = self.dir.remove_file(path);
        }
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
        self.check_root()?;
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
        if let Some(parent) = parent {
            self.create_parents(parent, &shown)?;
        }
        let existing_mode = match self.dir.symlink_metadata(&rel) {
            Ok(meta) if meta.is_dir() => return Err(WorkspaceError::IsDirectory { path: shown }),
            Ok(meta) if meta.is_file() => {
                Some(cap_std::fs::PermissionsExt::mode(&meta.permissions()) & 0o7777)
            }
            Ok(_) => None,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(WorkspaceError::io(&shown, e)),
        };
        let created = existing_mode.is_none();
        let tmp = tmp_name(&rel);
        // A replaced file keeps its mode; a new one is private to its owner.
        let mode = existing_mode.unwrap_or(0o600);
        let result = self.write_tmp(&tmp, content, mode).and_then(|()| {
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

    /// Creates the missing parent directories of a file, one level at a
    /// time, so each new one can be given to the owner.
    fn create_parents(&self, parent: &Path, shown: &str) -> Result<(), WorkspaceError> {
        let mut so_far = PathBuf::new();
        for component in parent.components() {
            so_far.push(component);
            match self.dir.symlink_metadata(&so_far) {
                Ok(meta) if meta.is_dir() => continue,
                Ok(meta) if meta.is_symlink() => {
                    // A link inside may lead to a directory inside; cap-std
                    // refuses it when it leads out.
                    match self.dir.metadata(&so_far) {
                        Ok(m) if m.is_dir() => continue,
                        Ok(_) => {
                            return Err(WorkspaceError::NotDirectory {
                                path: so_far.display().to_string(),
                            });
                        }
                        Err(e) => return Err(WorkspaceError::io(shown, e)),
                    }
                }
                Ok(_) => {
                    return Err(WorkspaceError::NotDirectory {
                        path: so_far.display().to_string(),
                    });
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(WorkspaceError::io(shown, e)),
            }
            match self.dir.create_dir(&so_far) {
                Ok(()) => {
                    // Open what we just made without following a link, and
                    // hand over that handle, never the path.
                    let mut nofollow = OpenOptions::new();
                    nofollow
                        .read(true)
                        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW);
                    let made = self
                        .dir
                        .open_with(&so_far, &nofollow)
                        .map_err(|e| WorkspaceError::io(shown, e))?;
                    self.chown_handle(&made)
                        .map_err(|e| WorkspaceError::io(shown, e))?;
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(WorkspaceError::io(shown, e)),
            }
        }
        Ok(())
    }

    fn write_tmp(&self, tmp: &Path, content: &[u8], mode: u32) -> std::io::Result<()> {
        let mut options = OpenOptions::new();
        options.write(true).create_new(true).mode(mode);
        let mut file = self.dir.open_with(tmp, &options)?;
        self.chown_handle(&file)?;
        file.write_all(content)?;
        file.sync_all()
    }

    /// Reads a whole file, refusing anything but regular files within the
    /// size limit.
    pub fn read(&self, path: &str) -> Result<Vec<u8>, WorkspaceError> {
        self.check_root()?;
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
        let links = cap_std::fs::MetadataExt::nlink(&meta);
        if links > 1 {
            return Err(WorkspaceError::HardLinked { path: shown, links });
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
        self.check_root()?;
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
        walk(
            &start,
            &rel,
            &mut |entry, _| {
                if listing.entries.len() >= LIST_LIMIT {
                    listing.truncated = true;
                    return false;
                }
                listing.entries.push(entry);
                true
            },
            false,
        )
        .map_err(|e| WorkspaceError::io(&shown, e))?;
        Ok(listing)
    }

    /// Every regular file of the workspace (symlinks and special files are
    /// not followed or listed), at most a few hundred thousand.
    pub fn files(&self) -> Result<Vec<FileStamp>, WorkspaceError> {
        Ok(self.stamps(USAGE_BUDGET)?.0)
    }

    /// [`Workspace::files`] of a small workspace: None when the last walk
    /// saw more than `max` entries, or this one passes `max` (it stops
    /// there). Cheap enough for an async thread, where handing the walk to
    /// a blocking thread and back would cost more than the walk.
    pub fn files_if_small(&self, max: usize) -> Result<Option<Vec<FileStamp>>, WorkspaceError> {
        if self.last_walk.load(std::sync::atomic::Ordering::Relaxed) > max {
            return Ok(None);
        }
        // No more names read than that either, whatever the directories
        // hold (a directory's names are read before any is visited).
        match self.stamps_reading(max.saturating_add(1), max.saturating_add(1)) {
            Ok((files, seen)) => Ok((seen <= max).then_some(files)),
            Err(WorkspaceError::Io { source, .. }) if too_many(&source) => {
                self.last_walk
                    .store(usize::MAX, std::sync::atomic::Ordering::Relaxed);
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// The files of a walk that stops after `budget` entries, and the
    /// number of entries it saw.
    fn stamps(&self, budget: usize) -> Result<(Vec<FileStamp>, usize), WorkspaceError> {
        self.stamps_reading(budget, usize::MAX)
    }

    /// [`Workspace::stamps`], reading at most `names` directory entries.
    fn stamps_reading(
        &self,
        budget: usize,
        mut names: usize,
    ) -> Result<(Vec<FileStamp>, usize), WorkspaceError> {
        self.check_root()?;
        let mut files = Vec::new();
        let mut seen = 0usize;
        let start = self
            .dir
            .try_clone()
            .map_err(|e| WorkspaceError::io(".", e))?;
        let mut collect = |entry: Entry, meta: &cap_std::fs::Metadata| {
            seen += 1;
            if entry.kind == "file" {
                use cap_std::fs::MetadataExt;
                files.push(FileStamp {
                    path: entry.path,
                    size: entry.size,
                    modified_ns: i128::from(meta.mtime()) * 1_000_000_000
                        + i128::from(meta.mtime_nsec()),
                });
            }
            seen < budget
        };
        walk_reading(&start, Path::new(""), &mut collect, false, &mut names)
            .map_err(|e| WorkspaceError::io(".", e))?;
        self.last_walk
            .store(seen, std::sync::atomic::Ordering::Relaxed);
        Ok((files, seen))
    }

    /// Removes one file (never a directory, never through a symlink).
    /// False when it was not there.
    pub fn remove(&self, path: &str) -> Result<bool, WorkspaceError> {
        self.check_root()?;
        let rel = file_path(path)?;
        match self.dir.remove_file(&rel) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(WorkspaceError::io(&rel.display().to_string(), e)),
        }
    }

    /// Counts files and bytes in the whole workspace (a lower bound when
    /// it holds more than a few hundred thousand entries).
    pub fn usage(&self) -> Result<Usage, WorkspaceError> {
        self.check_root()?;
        let mut usage = Usage::default();
        let mut seen = 0usize;
        let start = self
            .dir
            .try_clone()
            .map_err(|e| WorkspaceError::io(".", e))?;
        let mut count = |entry: Entry, _: &cap_std::fs::Metadata| {
            seen += 1;
            if entry.kind == "file" {
                usage.files += 1;
                usage.bytes += entry.size;
            }
            seen < USAGE_BUDGET
        };
        walk(&start, Path::new(""), &mut count, true).map_err(|e| WorkspaceError::io(".", e))?;
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
    if rel
        .file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with(TMP_PREFIX))
    {
        return Err(WorkspaceError::BadPath {
            path: path.to_string(),
            reason: format!("names starting with {TMP_PREFIX:?} are reserved for atomic writes"),
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

/// Depth-first walk in name order, iterative and at most [`MAX_DEPTH`]
/// levels deep; `visit` returns false to stop. Unreadable directories are
/// skipped. With `include_tmp`, in-flight temporary files are visited too.
fn walk(
    dir: &Dir,
    prefix: &Path,
    visit: &mut dyn FnMut(Entry, &cap_std::fs::Metadata) -> bool,
    include_tmp: bool,
) -> std::io::Result<()> {
    let mut unlimited = usize::MAX;
    walk_reading(dir, prefix, visit, include_tmp, &mut unlimited)
}

/// [`walk`], reading at most `names` directory entries in all (every name a
/// directory holds counts, skipped ones too): past that it stops with an
/// error that [`too_many`] recognises. The visitor's own stop cannot bound
/// the work alone, since a directory's names are all read (and sorted)
/// before its first is visited.
fn walk_reading(
    dir: &Dir,
    prefix: &Path,
    visit: &mut dyn FnMut(Entry, &cap_std::fs::Metadata) -> bool,
    include_tmp: bool,
    names: &mut usize,
) -> std::io::Result<()> {
    // A stack of (open directory, its path, its remaining sorted children).
    let mut stack = vec![(
        prefix.to_path_buf(),
        sorted_children(dir, names)?,
        dir.try_clone()?,
    )];
    loop {
        let depth = stack.len();
        let Some((path, children, handle)) = stack.last_mut() else {
            break;
        };
        let Some(name) = children.pop() else {
            stack.pop();
            continue;
        };
        if !include_tmp && name.to_string_lossy().starts_with(TMP_PREFIX) {
            continue;
        }
        let child_path = path.join(&name);
        // symlink_metadata: links are listed as links, never followed.
        let Ok(meta) = handle.symlink_metadata(&name) else {
            continue;
        };
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
            path: child_path.display().to_string(),
            kind,
            size: if kind == "file" { meta.len() } else { 0 },
            modified: meta.modified().ok().map(|t| t.into_std()).map(format_time),
        };
        if !visit(entry, &meta) {
            return Ok(());
        }
        if kind == "directory" && depth < MAX_DEPTH {
            // Unreadable subdirectories are skipped, not fatal.
            if let Ok(sub) = handle.open_dir(&name) {
                match sorted_children(&sub, names) {
                    Ok(grandchildren) => stack.push((child_path, grandchildren, sub)),
                    Err(e) if too_many(&e) => return Err(e),
                    Err(_) => {}
                }
            }
        }
    }
    Ok(())
}

/// A directory's entry names, sorted so that `pop()` yields them in order;
/// each one read spends one of `budget` (see [`walk_reading`]).
fn sorted_children(dir: &Dir, budget: &mut usize) -> std::io::Result<Vec<std::ffi::OsString>> {
    let mut names = Vec::new();
    for entry in dir.entries()? {
        *budget = budget
            .checked_sub(1)
            .ok_or_else(|| std::io::Error::other(TooMany))?;
        if let Ok(entry) = entry {
            names.push(entry.file_name());
        }
    }
    names.sort_by(|a, b| b.cmp(a));
    Ok(names)
}

/// The error of a walk that read more names than it was allowed.
#[derive(Debug)]
struct TooMany;

impl std::fmt::Display for TooMany {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("more directory entries than this walk may read")
    }
}

impl std::error::Error for TooMany {}

fn too_many(e: &std::io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<TooMany>())
}

fn format_time(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}
