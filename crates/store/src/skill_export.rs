//! Skills to and from Claude Code's layout: `<project>/.claude/skills/<name>/`
//! with SKILL.md and the script, which Claude Code discovers by itself.

use std::path::{Path, PathBuf};

use crate::skill_file::{self, Parsed};
use crate::skills::CODE_FILE;
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
        let dir = project.join(".claude").join("skills").join(slug);
        std::fs::create_dir_all(&dir).map_err(|e| io(&dir, e))?;
        let md = skill_file::render(&skill.meta, CODE_FILE)?;
        for (file, content) in [(CODE_FILE, skill.code.as_str()), ("SKILL.md", md.as_str())] {
            let path = dir.join(file);
            std::fs::write(&path, content).map_err(|e| io(&path, e))?;
        }
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
    let md = std::fs::read_to_string(&md_path).map_err(|e| io(&md_path, e))?;
    let parsed = skill_file::parse(&md, &origin)?;
    let code_path = code_file(dir).ok_or_else(|| SkillError::BadCode {
        name: parsed.name.to_string(),
        reason: format!(
            "{origin} has no {CODE_FILE} (nor exactly one .py file in it or in scripts/); a skill here is Python code"
        ),
    })?;
    let code = std::fs::read_to_string(&code_path).map_err(|e| io(&code_path, e))?;
    Ok(SkillDir {
        dir: dir.to_path_buf(),
        parsed,
        code,
    })
}

fn code_file(dir: &Path) -> Option<PathBuf> {
    let main = dir.join(CODE_FILE);
    if main.is_file() {
        return Some(main);
    }
    for place in [dir.to_path_buf(), dir.join("scripts")] {
        let py: Vec<PathBuf> = std::fs::read_dir(&place)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "py") && p.is_file())
            .collect();
        if let [one] = py.as_slice() {
            return Some(one.clone());
        }
    }
    None
}

fn io(path: &Path, source: std::io::Error) -> SkillError {
    SkillError::Io {
        path: path.display().to_string(),
        source,
    }
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
