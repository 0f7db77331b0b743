//! Skills to and from Claude Code's layout: `<project>/.claude/skills/<name>/`
//! with SKILL.md and the script, which Claude Code discovers by itself.

use std::path::{Path, PathBuf};

use crate::skill_file::{self, Parsed};
use crate::skills::{CODE_FILE, MAX_CODE_BYTES, io};
use crate::{SkillError, SkillStore};

/// A skill read from a directory in the Agent Skills layout.
#[derive(Debug, Clone)]
pub struct SkillDir {
    pub dir: PathBuf,
    pub parsed: Parsed,
    pub code: String,
}

impl SkillStore {
    /// Writes the current version of `name` to
    /// `<project>/.claude/skills/<name-with-hyphens>/`; returns that directory.
    pub fn export(&self, name: &str, project: &Path) -> Result<PathBuf, SkillError> {
        let skill = self.load(name, None)?;
        let slug = crate::SkillName::parse(&skill.meta.name)?.slug();
        // The project directory is the user's choice; below it, nothing is followed.
        std::fs::create_dir_all(project).map_err(|e| io(project, e))?;
        let mut dir = project.to_path_buf();
        // Each level is made or checked without following a link, so a
        // planted symlink cannot send the export elsewhere.
        for part in [".claude", "skills", slug.as_str()] {
            dir.push(part);
            match std::fs::symlink_metadata(&dir) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => {
                    return Err(SkillError::Io {
                        path: dir.display().to_string(),
                        source: std::io::Error::other(
                            "exists and is not a directory (or is a symlink); refusing to write through it",
                        ),
                    });
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    std::fs::create_dir(&dir).map_err(|e| io(&dir, e))?;
                }
                Err(e) => return Err(io(&dir, e)),
            }
        }
        let md = skill_file::render(&skill.meta, CODE_FILE)?;
        // Renamed into place: a symlink at the file's name is replaced, not followed.
        crate::skills::write_atomic(&dir.join(CODE_FILE), skill.code.as_bytes())?;
        crate::skills::write_atomic(&dir.join("SKILL.md"), md.as_bytes())?;
        Ok(dir)
    }
}

/// The skill directories under `root`: `root/.claude/skills/*/` when that
/// exists, else `root/*/`, else `root` itself when it holds a SKILL.md.
pub fn find_skill_dirs(root: &Path) -> Result<Vec<PathBuf>, SkillError> {
    if root.join("SKILL.md").is_file() {
        return Ok(vec![root.to_path_buf()]);
    }
    let claude = root.join(".claude").join("skills");
    let base = if claude.is_dir() {
        claude
    } else {
        root.to_path_buf()
    };
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&base)
        .map_err(|e| io(&base, e))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("SKILL.md").is_file())
        .collect();
    dirs.sort();
    Ok(dirs)
}

/// Reads one skill directory: SKILL.md, and its code from skill.py, or the
/// only Python file in the directory or its `scripts/`.
pub fn read_skill_dir(dir: &Path) -> Result<SkillDir, SkillError> {
    let origin = dir.display().to_string();
    let md_path = dir.join("SKILL.md");
    let md = read_regular(&md_path, MAX_SKILL_MD)?;
    let parsed = skill_file::parse(&md, &origin)?;
    let code_path = code_file(dir).ok_or_else(|| SkillError::BadCode {
        name: parsed.name.to_string(),
        reason: format!(
            "{origin} has no {CODE_FILE} (nor exactly one .py file in it or in scripts/); a skill here is Python code"
        ),
    })?;
    let code = read_regular(&code_path, MAX_CODE_BYTES as u64)?;
    Ok(SkillDir {
        dir: dir.to_path_buf(),
        parsed,
        code,
    })
}

/// The largest SKILL.md read.
const MAX_SKILL_MD: u64 = 256 << 10;

/// Reads a regular file that is not a symlink, up to `limit` bytes, as UTF-8.
fn read_regular(path: &Path, limit: u64) -> Result<String, SkillError> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let refuse = |why: &str| SkillError::Io {
        path: path.display().to_string(),
        source: std::io::Error::other(why.to_string()),
    };
    let file = std::fs::File::options()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => refuse("is a symlink; skills are read from regular files only"),
            _ => io(path, e),
        })?;
    let meta = file.metadata().map_err(|e| io(path, e))?;
    if !meta.is_file() {
        return Err(refuse("is not a regular file"));
    }
    if meta.len() > limit {
        return Err(refuse(&format!(
            "is {} bytes, over the limit of {limit}",
            meta.len()
        )));
    }
    let mut text = String::new();
    file.take(limit + 1)
        .read_to_string(&mut text)
        .map_err(|e| io(path, e))?;
    Ok(text)
}

fn code_file(dir: &Path) -> Option<PathBuf> {
    let main = dir.join(CODE_FILE);
    if std::fs::symlink_metadata(&main).is_ok() {
        // Even a symlink: read_regular then says why it is refused.
        return Some(main);
    }
    for place in [dir.to_path_buf(), dir.join("scripts")] {
        let py: Vec<PathBuf> = std::fs::read_dir(&place)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.extension().is_some_and(|x| x == "py")
                    && std::fs::symlink_metadata(p).is_ok_and(|m| m.is_file())
            })
            .collect();
        if let [one] = py.as_slice() {
            return Some(one.clone());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Analysis;

    #[test]
    fn export_then_import_gives_the_same_skill() -> Result<(), Box<dyn std::error::Error>> {
        let tmp = tempfile::tempdir()?;
        let store = SkillStore::open(&tmp.path().join("skills"))?;
        let analysis = Analysis {
            tools: vec!["git.git_log".into()],
            functions: vec!["main(path)".into()],
        };
        store.save(
            "top_authors",
            "Top authors of a repo.",
            "def main(path):\n    return path\n",
            &analysis,
        )?;
        let project = tmp.path().join("project");
        let dir = store.export("top_authors", &project)?;
        assert_eq!(dir, project.join(".claude/skills/top-authors"));
        let found = find_skill_dirs(&project)?;
        assert_eq!(found, vec![dir.clone()]);
        let read = read_skill_dir(&dir)?;
        assert_eq!(read.parsed.name.module(), "top_authors");
        assert_eq!(read.parsed.description, "Top authors of a repo.");
        assert_eq!(read.parsed.tools, analysis.tools);
        assert!(read.code.contains("def main"));
        Ok(())
    }

    #[test]
    fn symlinks_are_neither_read_nor_written_through() -> Result<(), Box<dyn std::error::Error>> {
        let tmp = tempfile::tempdir()?;
        let secret = tmp.path().join("secret.env");
        std::fs::write(&secret, "AWS_SECRET_ACCESS_KEY = 'x'\n")?;
        let dir = tmp.path().join("in/evil");
        std::fs::create_dir_all(&dir)?;
        std::fs::write(
            dir.join("SKILL.md"),
            "---\nname: evil\ndescription: d\n---\n",
        )?;
        std::os::unix::fs::symlink(&secret, dir.join(CODE_FILE))?;
        let err = read_skill_dir(&dir)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("symlink"), "{err}");

        let store = SkillStore::open(&tmp.path().join("skills"))?;
        store.save("a", "d", "x = 1\n", &crate::Analysis::default())?;
        let project = tmp.path().join("project");
        std::fs::create_dir_all(project.join(".claude/skills/a"))?;
        let victim = tmp.path().join("victim.txt");
        std::fs::write(&victim, "keep me")?;
        std::os::unix::fs::symlink(&victim, project.join(".claude/skills/a").join(CODE_FILE))?;
        store.export("a", &project)?;
        assert_eq!(std::fs::read_to_string(&victim)?, "keep me");
        assert_eq!(
            std::fs::read_to_string(project.join(".claude/skills/a").join(CODE_FILE))?,
            "x = 1\n"
        );
        let linked = tmp.path().join("linked");
        std::fs::create_dir_all(tmp.path().join("elsewhere"))?;
        std::os::unix::fs::symlink(tmp.path().join("elsewhere"), &linked)?;
        std::fs::create_dir_all(tmp.path().join("p2"))?;
        std::os::unix::fs::symlink(&linked, tmp.path().join("p2/.claude"))?;
        assert!(store.export("a", &tmp.path().join("p2")).is_err());
        Ok(())
    }

    #[test]
    fn finds_the_code_of_a_hand_written_skill() -> Result<(), Box<dyn std::error::Error>> {
        let tmp = tempfile::tempdir()?;
        let dir = tmp.path().join("csv-tools");
        std::fs::create_dir_all(dir.join("scripts"))?;
        std::fs::write(
            dir.join("SKILL.md"),
            "---\nname: csv-tools\ndescription: CSV helpers\n---\n",
        )?;
        std::fs::write(
            dir.join("scripts/convert.py"),
            "def convert(x):\n    return x\n",
        )?;
        assert_eq!(find_skill_dirs(tmp.path())?, vec![dir.clone()]);
        assert!(read_skill_dir(&dir)?.code.contains("def convert"));
        std::fs::write(dir.join("scripts/other.py"), "x = 1\n")?;
        let err = read_skill_dir(&dir)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("exactly one .py"), "{err}");
        Ok(())
    }
}
