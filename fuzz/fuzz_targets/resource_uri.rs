//! Resource URIs (`workspace://{path}`, `skill://{name}`) as a client sends
//! them to resources/read: `cem_tools::resources::target` finds what one
//! names, then the workspace and the skill store check the path or the name
//! and read, as the read_workspace_file and load_skill tools do, in a
//! workspace with a file inside and, beside it, a file outside that
//! symlinks inside point at. Never panics; never reads outside the
//! workspace; `workspace_uri` and `target` agree.

#![no_main]

use std::path::{Component, Path, PathBuf};
use std::sync::LazyLock;

use cem_tools::resources::{Target, target, workspace_uri};
use cem_store::{Analysis, SkillName, SkillStore, Workspace, validate_relative};
use libfuzzer_sys::fuzz_target;

/// What the file outside the workspace holds: no read may return it.
const OUTSIDE: &[u8] = b"OUTSIDE-THE-WORKSPACE";

struct Fixture {
    workspace: Workspace,
    skills: SkillStore,
}

/// The fixture's directory: one per fuzzing process, under the temporary
/// directory (a static is never dropped, so the directories of processes
/// that have ended are removed here).
fn fixture_dir() -> PathBuf {
    const PREFIX: &str = "cem-fuzz-resource-uri-";
    let tmp = std::env::temp_dir();
    for entry in std::fs::read_dir(&tmp).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(pid) = name.strip_prefix(PREFIX)
            && !Path::new("/proc").join(pid).exists()
        {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
    let dir = tmp.join(format!("{PREFIX}{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir(&dir).expect("the fixture directory");
    dir
}

static FIXTURE: LazyLock<Fixture> = LazyLock::new(|| {
    let dir = fixture_dir();
    let root = dir.join("workspace");
    let workspace = Workspace::open(&root, 1 << 20).expect("the workspace");
    workspace
        .write("notes/a.txt", b"inside")
        .expect("a workspace file");
    std::fs::write(dir.join("outside.txt"), OUTSIDE).expect("the outside file");
    for (link, to) in [
        ("escape.txt", Path::new("../outside.txt").to_path_buf()),
        ("absolute.txt", dir.join("outside.txt")),
        ("up", Path::new("..").to_path_buf()),
        ("notes/up", Path::new("../..").to_path_buf()),
    ] {
        std::os::unix::fs::symlink(to, root.join(link)).expect("a symlink");
    }
    let skills = SkillStore::open(&dir.join("skills")).expect("the skill store");
    skills
        .save(
            "top_authors",
            "Lists the authors with the most commits",
            "def run():\n    return []\n",
            &Analysis::default(),
        )
        .expect("a skill");
    Fixture { workspace, skills }
});

fuzz_target!(|data: &[u8]| {
    let Ok(uri) = std::str::from_utf8(data) else {
        return;
    };
    let fixture = &*FIXTURE;
    assert_eq!(target(&workspace_uri(uri)), Some(Target::File(uri)));
    match target(uri) {
        Some(Target::File(path)) => {
            if let Ok(clean) = validate_relative(path) {
                assert!(
                    clean
                        .components()
                        .all(|c| matches!(c, Component::Normal(_))),
                    "{path:?} validated as {clean:?}"
                );
            }
            if let Ok(content) = fixture.workspace.read(path) {
                assert_ne!(
                    content, OUTSIDE,
                    "{uri:?} read the file outside the workspace"
                );
            }
        }
        Some(Target::Skill(name)) => {
            if let Ok(checked) = SkillName::parse(name) {
                let module = checked.module();
                assert!(
                    !module.is_empty() && !module.contains(['/', '\\', '.', '\0']),
                    "{name:?} checked as {module:?}"
                );
            }
            if let Ok(skill) = fixture.skills.load(name, None) {
                assert_eq!(skill.meta.name, "top_authors", "{uri:?}");
            }
        }
        None => {}
    }
});
