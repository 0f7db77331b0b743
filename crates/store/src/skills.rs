//! The skill store: one directory per skill under `<data>/skills`, in the
//! Agent Skills layout (`<name>/SKILL.md` and the code, `<name>/skill.py`),
//! earlier versions under `<name>/versions/<n>/`.
//!
//! Saves of one name are serialised by an advisory lock on
//! `<data>/skills/.locks/<name>` (other processes, such as a second server
//! or the CLI, respect it too); every file is written to a temporary file
//! and renamed into place. The code is written before SKILL.md, so a reader
//! never sees metadata for code that is not there yet, and readers on the
//! host take the lock shared.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::skill_file::{self, Parsed};
use crate::{SkillError, SkillMeta, SkillName};

/// The code file of every skill.
pub const CODE_FILE: &str = "skill.py";
/// The most code one skill holds.
pub const MAX_CODE_BYTES: usize = 256 << 10;
/// The longest description (the Agent Skills format's limit).
pub const MAX_DESCRIPTION: usize = 1024;
/// Earlier versions kept per skill; older ones are pruned.
pub const KEEP_VERSIONS: u64 = 20;
/// The most skills one store holds.
pub const MAX_SKILLS: usize = 1000;
/// The most bytes the store holds, versions included (sandboxed code can
/// save skills, and must not fill the host's disk with them).
pub const MAX_STORE_BYTES: u64 = 64 << 20;
/// The file whose content changes on every save and delete.
const GENERATION: &str = ".generation";

/// What the host learnt about the code before saving it (its Python parse,
/// done in the sandbox).
#[derive(Debug, Clone, Default)]
pub struct Analysis {
    pub tools: Vec<String>,
    pub functions: Vec<String>,
}

/// A skill read back: metadata and code.
#[derive(Debug, Clone, Serialize)]
pub struct Skill {
    #[serde(flatten)]
    pub meta: SkillMeta,
    pub code: String,
    /// The code on disk no longer matches the recorded hash (edited by
    /// hand, or a save was cut short).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub modified: bool,
}

/// The outcome of a save.
#[derive(Debug, Clone, Serialize)]
pub struct Saved {
    #[serde(flatten)]
    pub meta: SkillMeta,
    /// Same code and description as the current version: nothing written.
    pub unchanged: bool,
}

/// Skills under one directory.
#[derive(Debug, Clone)]
pub struct SkillStore {
    root: PathBuf,
}

impl SkillStore {
    /// Opens (creating) the store at `root`.
    pub fn open(root: &Path) -> Result<Self, SkillError> {
        std::fs::create_dir_all(root.join(".locks")).map_err(|e| io(root, e))?;
        Ok(SkillStore {
            root: root.to_path_buf(),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn dir(&self, name: &SkillName) -> PathBuf {
        self.root.join(name.module())
    }

    /// Takes the skill's advisory lock. Readers do not create the lock file:
    /// a name that was never saved leaves nothing behind (None: no lock
    /// file, so no save has ever run or is running through this store).
    fn lock(&self, name: &SkillName, exclusive: bool) -> Result<Option<File>, SkillError> {
        let path = self.root.join(".locks").join(name.module());
        let opened = File::options()
            .create(exclusive)
            .truncate(false)
            .write(true)
            .open(&path);
        let file = match opened {
            Ok(file) => file,
            Err(e) if !exclusive && e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io(&path, e)),
        };
        let locked = if exclusive {
            file.lock()
        } else {
            file.lock_shared()
        };
        locked.map_err(|e| io(&path, e))?;
        Ok(Some(file))
    }

    /// Saves `code` as the skill `name`. A name saved before keeps its
    /// previous version under `versions/`; saving the same code and
    /// description again changes nothing.
    pub fn save(
        &self,
        name: &str,
        description: &str,
        code: &str,
        analysis: &Analysis,
    ) -> Result<Saved, SkillError> {
        let name = SkillName::parse(name)?;
        let description = check_description(&name, description)?;
        check_code(&name, code)?;
        let _lock = self.lock(&name, true)?;
        let dir = self.dir(&name);
        let current = self.read_current(&name)?;
        if current.is_none() && self.count() >= MAX_SKILLS {
            return Err(SkillError::Full {
                reason: format!("it holds {MAX_SKILLS} skills already; delete some first"),
            });
        }
        let used = self.used_bytes();
        if used + 2 * code.len() as u64 > MAX_STORE_BYTES {
            return Err(SkillError::Full {
                reason: format!(
                    "it holds {used} bytes, and this save would pass its limit of {MAX_STORE_BYTES}; delete skills you no longer need"
                ),
            });
        }
        let hash = code_hash(code);
        let now = now();
        let meta = match &current {
            Some(old) if old.meta.code_hash == hash && old.meta.description == description => {
                return Ok(Saved {
                    meta: old.meta.clone(),
                    unchanged: true,
                });
            }
            Some(old) => {
                self.archive(&name, old)?;
                SkillMeta {
                    version: old.meta.version + 1,
                    created: old.meta.created.clone(),
                    ..new_meta(&name, &description, &hash, &now, analysis)
                }
            }
            None => new_meta(&name, &description, &hash, &now, analysis),
        };
        std::fs::create_dir_all(&dir).map_err(|e| io(&dir, e))?;
        write_atomic(&dir.join(CODE_FILE), code.as_bytes())?;
        let md = skill_file::render(&meta, CODE_FILE)?;
        write_atomic(&dir.join("SKILL.md"), md.as_bytes())?;
        self.bump_generation();
        Ok(Saved {
            meta,
            unchanged: false,
        })
    }

    /// Copies the current version to `versions/<n>/` and prunes the oldest.
    fn archive(&self, name: &SkillName, old: &Skill) -> Result<(), SkillError> {
        let versions = self.dir(name).join("versions");
        let dir = versions.join(old.meta.version.to_string());
        // A save cut short after archiving left this version here already,
        // correct; what is current now may be that save's half.
        if !dir.join("SKILL.md").is_file() {
            std::fs::create_dir_all(&dir).map_err(|e| io(&dir, e))?;
            write_atomic(&dir.join(CODE_FILE), old.code.as_bytes())?;
            let md = skill_file::render(&old.meta, CODE_FILE)?;
            write_atomic(&dir.join("SKILL.md"), md.as_bytes())?;
        }
        let keep_from = old.meta.version.saturating_sub(KEEP_VERSIONS - 1);
        for v in self.versions_in(&versions)? {
            if v < keep_from {
                let path = versions.join(v.to_string());
                std::fs::remove_dir_all(&path).map_err(|e| io(&path, e))?;
            }
        }
        Ok(())
    }

    fn versions_in(&self, versions: &Path) -> Result<Vec<u64>, SkillError> {
        let mut out = Vec::new();
        match std::fs::read_dir(versions) {
            Ok(entries) => {
                for entry in entries.flatten() {
                    if let Some(v) = entry.file_name().to_str().and_then(|s| s.parse().ok()) {
                        out.push(v);
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(versions, e)),
        }
        out.sort_unstable();
        Ok(out)
    }

    /// The skill `name`: its current version, or `version` when given.
    pub fn load(&self, name: &str, version: Option<u64>) -> Result<Skill, SkillError> {
        Ok(self.load_with_versions(name, version)?.0)
    }

    /// The versions kept of `name`, oldest first (the current one last).
    pub fn versions(&self, name: &str) -> Result<Vec<u64>, SkillError> {
        Ok(self.load_with_versions(name, None)?.1)
    }

    /// [`SkillStore::load`] and [`SkillStore::versions`] at once, under one
    /// lock, so a concurrent save or delete cannot fall between them.
    pub fn load_with_versions(
        &self,
        name: &str,
        version: Option<u64>,
    ) -> Result<(Skill, Vec<u64>), SkillError> {
        let name = SkillName::parse(name)?;
        let _lock = self.lock(&name, false)?;
        let current = self
            .read_current(&name)?
            .ok_or_else(|| SkillError::NotFound {
                name: name.to_string(),
            })?;
        let mut versions = self.versions_in(&self.dir(&name).join("versions"))?;
        versions.retain(|v| *v != current.meta.version);
        versions.push(current.meta.version);
        let skill = match version {
            None => current,
            Some(v) if v == current.meta.version => current,
            Some(v) => {
                let dir = self.dir(&name).join("versions").join(v.to_string());
                read_skill(&name, &dir)?.ok_or_else(|| SkillError::NoVersion {
                    name: name.to_string(),
                    version: v,
                    kept: versions
                        .iter()
                        .map(|v| v.to_string())
                        .collect::<Vec<_>>()
                        .join(", "),
                })?
            }
        };
        Ok((skill, versions))
    }

    fn count(&self) -> usize {
        std::fs::read_dir(&self.root)
            .map(|entries| {
                entries
                    .flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
                    .count()
            })
            .unwrap_or(0)
    }

    fn read_current(&self, name: &SkillName) -> Result<Option<Skill>, SkillError> {
        read_skill(name, &self.dir(name))
    }

    /// Every skill's current version, by name. A directory that is not a
    /// readable skill is reported in the second list, not fatal.
    pub fn list(&self) -> Result<(Vec<SkillMeta>, Vec<String>), SkillError> {
        let mut skills = Vec::new();
        let mut problems = Vec::new();
        let entries = std::fs::read_dir(&self.root).map_err(|e| io(&self.root, e))?;
        let mut names: Vec<String> = entries
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .filter_map(|e| e.file_name().to_str().map(str::to_string))
            .filter(|n| !n.starts_with('.'))
            .collect();
        names.sort();
        for raw in names {
            let loaded = SkillName::parse(&raw).and_then(|name| {
                let _lock = self.lock(&name, false)?;
                self.read_current(&name)
            });
            match loaded {
                Ok(Some(skill)) => skills.push(skill.meta),
                Ok(None) => {}
                Err(e) => problems.push(format!("{raw}: {e}")),
            }
        }
        Ok((skills, problems))
    }

    /// Deletes `name` with every version kept, readable or not. Returns how
    /// many versions went.
    pub fn delete(&self, name: &str) -> Result<usize, SkillError> {
        let name = SkillName::parse(name)?;
        let _lock = self.lock(&name, true)?;
        let dir = self.dir(&name);
        if !dir.is_dir() {
            return Err(SkillError::NotFound {
                name: name.to_string(),
            });
        }
        let versions = self
            .versions_in(&dir.join("versions"))
            .unwrap_or_default()
            .len()
            + usize::from(dir.join("SKILL.md").is_file());
        // Renamed away first, so a concurrent reader never sees half a skill.
        let doomed = self.root.join(format!(
            ".deleted-{name}-{}-{}",
            std::process::id(),
            unique()
        ));
        std::fs::rename(&dir, &doomed).map_err(|e| io(&dir, e))?;
        std::fs::remove_dir_all(&doomed).map_err(|e| io(&doomed, e))?;
        self.bump_generation();
        Ok(versions.max(1))
    }

    /// Changes whenever a skill is saved or deleted, by this process or
    /// another (a server and the CLI share the directory), so a catalog
    /// can tell that its skills are stale with one small read.
    pub fn generation(&self) -> String {
        std::fs::read_to_string(self.root.join(GENERATION)).unwrap_or_default()
    }

    /// Marks the store changed for every catalog watching it (a replica
    /// that rewrote skill files calls it).
    pub fn bump_generation(&self) {
        let stamp = format!("{}-{}", std::process::id(), unique());
        if let Err(e) = write_atomic(&self.root.join(GENERATION), stamp.as_bytes()) {
            // Only other processes' catalogs depend on it; they refresh on restart.
            let _ = e;
        }
    }

    /// Bytes held by the whole store, to bound what saves may add.
    fn used_bytes(&self) -> u64 {
        fn walk(dir: &Path, depth: usize) -> u64 {
            if depth > 4 {
                return 0;
            }
            let Ok(entries) = std::fs::read_dir(dir) else {
                return 0;
            };
            entries
                .flatten()
                .map(|e| match e.file_type() {
                    Ok(t) if t.is_dir() => walk(&e.path(), depth + 1),
                    Ok(t) if t.is_file() => e.metadata().map(|m| m.len()).unwrap_or(0),
                    _ => 0,
                })
                .sum()
        }
        walk(&self.root, 0)
    }
}

/// Reads the skill in `dir` (None when there is none).
fn read_skill(name: &SkillName, dir: &Path) -> Result<Option<Skill>, SkillError> {
    let md_path = dir.join("SKILL.md");
    let md = match std::fs::read_to_string(&md_path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(&md_path, e)),
    };
    let code_path = dir.join(CODE_FILE);
    let code = std::fs::read_to_string(&code_path).map_err(|e| io(&code_path, e))?;
    let parsed = skill_file::parse(&md, name.module())?;
    if parsed.name != *name {
        return Err(SkillError::Format {
            name: name.to_string(),
            reason: format!(
                "SKILL.md names '{}' but sits in the directory of '{name}'",
                parsed.name
            ),
        });
    }
    let hash = code_hash(&code);
    let modified = parsed.code_hash.as_deref().is_some_and(|h| h != hash);
    Ok(Some(Skill {
        meta: meta_of(parsed, hash),
        code,
        modified,
    }))
}

fn meta_of(p: Parsed, hash: String) -> SkillMeta {
    let when = p.updated.clone().or(p.created.clone()).unwrap_or_default();
    SkillMeta {
        name: p.name.module().to_string(),
        description: p.description,
        version: p.version.unwrap_or(1),
        created: p.created.unwrap_or_else(|| when.clone()),
        updated: when,
        code_hash: p.code_hash.unwrap_or(hash),
        tools: p.tools,
        functions: p.functions,
    }
}

fn new_meta(
    name: &SkillName,
    description: &str,
    hash: &str,
    now: &str,
    analysis: &Analysis,
) -> SkillMeta {
    SkillMeta {
        name: name.module().to_string(),
        description: description.to_string(),
        version: 1,
        created: now.to_string(),
        updated: now.to_string(),
        code_hash: hash.to_string(),
        tools: analysis.tools.clone(),
        functions: analysis.functions.clone(),
    }
}

/// The description trimmed, checked for length and emptiness.
pub fn check_description(name: &SkillName, description: &str) -> Result<String, SkillError> {
    let description = description.trim();
    if description.is_empty() {
        return Err(SkillError::BadDescription {
            name: name.to_string(),
            reason: "it is empty; say what the skill does and when to use it (search finds skills by it)".into(),
        });
    }
    if description
        .chars()
        .any(|c| c.is_control() && c != '\n' && c != '\t')
    {
        return Err(SkillError::BadDescription {
            name: name.to_string(),
            reason: "it contains control characters; use plain text".into(),
        });
    }
    if description.chars().count() > MAX_DESCRIPTION {
        return Err(SkillError::BadDescription {
            name: name.to_string(),
            reason: format!("it is longer than {MAX_DESCRIPTION} characters"),
        });
    }
    Ok(description.to_string())
}

/// Size and emptiness of the code (whether it compiles is the caller's
/// check, in the sandbox).
pub fn check_code(name: &SkillName, code: &str) -> Result<(), SkillError> {
    if code.trim().is_empty() {
        return Err(SkillError::BadCode {
            name: name.to_string(),
            reason: "the code is empty".into(),
        });
    }
    if code.len() > MAX_CODE_BYTES {
        return Err(SkillError::BadCode {
            name: name.to_string(),
            reason: format!(
                "the code is {} bytes, over the {MAX_CODE_BYTES}-byte limit; keep data out of skills (the workspace holds files)",
                code.len()
            ),
        });
    }
    if code.contains('\0') {
        return Err(SkillError::BadCode {
            name: name.to_string(),
            reason: "the code contains a NUL byte".into(),
        });
    }
    Ok(())
}

pub fn code_hash(code: &str) -> String {
    let digest = Sha256::digest(code.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

fn now() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}

/// Writes `content` to a temporary file beside `path`, then renames it over.
pub(crate) fn write_atomic(path: &Path, content: &[u8]) -> Result<(), SkillError> {
    crate::atomic::write(path, content).map_err(|e| io(path, e))
}

/// A number no other call in this process gets, with the time, so names
/// made from it do not repeat across restarts either.
fn unique() -> String {
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{nanos}-{}", next_id())
}

fn next_id() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

pub(crate) fn io(path: &Path, source: std::io::Error) -> SkillError {
    SkillError::Io {
        path: path.display().to_string(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type R = Result<(), Box<dyn std::error::Error>>;

    #[test]
    fn saves_versions_loads_and_deletes() -> R {
        let tmp = tempfile::tempdir()?;
        let store = SkillStore::open(tmp.path())?;
        let a = Analysis {
            tools: vec!["git.git_log".into()],
            functions: vec!["f(x)".into()],
        };
        let first = store.save("my-skill", "Does things.", "def f(x):\n    return x\n", &a)?;
        assert_eq!((first.meta.version, first.unchanged), (1, false));
        let again = store.save("my_skill", "Does things.", "def f(x):\n    return x\n", &a)?;
        assert!(again.unchanged);
        let second = store.save(
            "my_skill",
            "Does more.",
            "def f(x):\n    return 2 * x\n",
            &a,
        )?;
        assert_eq!(second.meta.version, 2);
        assert_eq!(second.meta.created, first.meta.created);
        assert_eq!(store.versions("my_skill")?, vec![1, 2]);
        assert!(store.load("my_skill", None)?.code.contains("2 * x"));
        let old = store.load("my_skill", Some(1))?;
        assert!(old.code.contains("return x") && old.meta.description == "Does things.");
        assert!(matches!(
            store.load("my_skill", Some(7)),
            Err(SkillError::NoVersion { .. })
        ));
        let (listed, problems) = store.list()?;
        assert_eq!(listed.len(), 1);
        assert!(problems.is_empty());
        assert_eq!(listed[0].tools, a.tools);
        // The directory is the Agent Skills layout.
        let md = std::fs::read_to_string(tmp.path().join("my_skill/SKILL.md"))?;
        assert!(md.starts_with("---\nname: \"my-skill\"\n"), "{md}");
        assert_eq!(store.delete("my-skill")?, 2);
        assert!(matches!(
            store.load("my_skill", None),
            Err(SkillError::NotFound { .. })
        ));
        assert!(store.list()?.0.is_empty());
        // Asking for a name never saved leaves nothing behind.
        assert!(store.load("never_saved", None).is_err());
        assert!(!tmp.path().join(".locks/never_saved").exists());
        Ok(())
    }

    #[test]
    fn keeps_a_bounded_history() -> R {
        let tmp = tempfile::tempdir()?;
        let store = SkillStore::open(tmp.path())?;
        for n in 0..KEEP_VERSIONS + 5 {
            store.save("s", "d", &format!("x = {n}\n"), &Analysis::default())?;
        }
        let versions = store.versions("s")?;
        assert_eq!(versions.len() as u64, KEEP_VERSIONS + 1, "{versions:?}");
        assert_eq!(versions.last(), Some(&(KEEP_VERSIONS + 5)));
        Ok(())
    }

    #[test]
    fn concurrent_saves_never_corrupt() -> R {
        let tmp = tempfile::tempdir()?;
        let store = SkillStore::open(tmp.path())?;
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let store = store.clone();
                std::thread::spawn(move || {
                    for n in 0..10 {
                        let code = format!("VALUE = {}\n", t * 100 + n);
                        store.save(
                            "shared",
                            &format!("from thread {t}"),
                            &code,
                            &Analysis::default(),
                        )?;
                    }
                    Ok::<_, SkillError>(())
                })
            })
            .collect();
        for t in threads {
            t.join().map_err(|_| "a saving thread panicked")??;
        }
        let skill = store.load("shared", None)?;
        assert!(!skill.modified, "code and SKILL.md disagree");
        assert_eq!(skill.meta.code_hash, code_hash(&skill.code));
        assert_eq!(skill.meta.version, 80);
        for v in store.versions("shared")? {
            let s = store.load("shared", Some(v))?;
            assert_eq!(s.meta.code_hash, code_hash(&s.code), "version {v}");
        }
        Ok(())
    }

    #[test]
    fn refuses_bad_input_and_keeps_the_old_version() -> R {
        let tmp = tempfile::tempdir()?;
        let store = SkillStore::open(tmp.path())?;
        store.save("s", "d", "x = 1\n", &Analysis::default())?;
        assert!(matches!(
            store.save("s", " ", "x = 2\n", &Analysis::default()),
            Err(SkillError::BadDescription { .. })
        ));
        assert!(matches!(
            store.save("s", "d", "  \n", &Analysis::default()),
            Err(SkillError::BadCode { .. })
        ));
        let big = "x".repeat(MAX_CODE_BYTES + 1);
        assert!(matches!(
            store.save("s", "d", &big, &Analysis::default()),
            Err(SkillError::BadCode { .. })
        ));
        assert!(matches!(
            store.save("../s", "d", "x = 1", &Analysis::default()),
            Err(SkillError::BadName { .. })
        ));
        assert_eq!(store.load("s", None)?.code, "x = 1\n");
        assert!(
            !tmp.path()
                .parent()
                .map(|p| p.join("s").exists())
                .unwrap_or(false)
        );
        Ok(())
    }

    #[test]
    fn a_save_cut_short_loses_no_version() -> R {
        let tmp = tempfile::tempdir()?;
        let store = SkillStore::open(tmp.path())?;
        store.save("s", "d", "V = 1\n", &Analysis::default())?;
        store.save("s", "d", "V = 2\n", &Analysis::default())?;
        // A third save archived version 2, wrote its code, and died before SKILL.md.
        let name = SkillName::parse("s")?;
        store.archive(&name, &store.load("s", None)?)?;
        std::fs::write(tmp.path().join("s").join(CODE_FILE), "V = 3\n")?;
        assert!(store.load("s", None)?.modified);
        store.save("s", "d", "V = 4\n", &Analysis::default())?;
        assert_eq!(store.load("s", Some(2))?.code, "V = 2\n");
        assert_eq!(store.load("s", None)?.code, "V = 4\n");
        Ok(())
    }

    #[test]
    fn an_unreadable_skill_can_still_be_deleted() -> R {
        let tmp = tempfile::tempdir()?;
        let store = SkillStore::open(tmp.path())?;
        store.save("s", "d", "x = 1\n", &Analysis::default())?;
        std::fs::write(tmp.path().join("s/SKILL.md"), "garbage")?;
        assert!(store.load("s", None).is_err());
        let before = store.generation();
        assert_eq!(store.delete("s")?, 1);
        assert_ne!(store.generation(), before);
        assert!(matches!(
            store.delete("s"),
            Err(SkillError::NotFound { .. })
        ));
        Ok(())
    }

    #[test]
    fn the_store_is_bounded() -> R {
        let tmp = tempfile::tempdir()?;
        let store = SkillStore::open(tmp.path())?;
        let code = format!("X = '{}'\n", "x".repeat(MAX_CODE_BYTES - 16));
        let mut refused = None;
        for n in 0..400 {
            if let Err(e) = store.save(&format!("s{n}"), "d", &code, &Analysis::default()) {
                refused = Some(e);
                break;
            }
        }
        assert!(
            matches!(refused, Some(SkillError::Full { .. })),
            "{refused:?}"
        );
        assert!(store.used_bytes() <= MAX_STORE_BYTES);
        Ok(())
    }

    #[test]
    fn control_characters_in_descriptions_are_refused() -> R {
        let tmp = tempfile::tempdir()?;
        let store = SkillStore::open(tmp.path())?;
        let e = store.save("s", "a\u{7f}b", "x = 1\n", &Analysis::default());
        assert!(matches!(e, Err(SkillError::BadDescription { .. })), "{e:?}");
        // Line separators that YAML would fold survive the round trip.
        store.save("s", "a\u{2028}b\u{2029}c", "x = 1\n", &Analysis::default())?;
        assert_eq!(
            store.load("s", None)?.meta.description,
            "a\u{2028}b\u{2029}c"
        );
        Ok(())
    }

    #[test]
    fn notices_code_edited_by_hand() -> R {
        let tmp = tempfile::tempdir()?;
        let store = SkillStore::open(tmp.path())?;
        store.save("s", "d", "x = 1\n", &Analysis::default())?;
        std::fs::write(tmp.path().join("s").join(CODE_FILE), "x = 2\n")?;
        assert!(store.load("s", None)?.modified);
        Ok(())
    }
}
