//! `skills list|show|rm|export|import`: the skill store at a shell.

use std::process::ExitCode;

use cem_host::AppState;
use serde_json::json;

use crate::args::{Cli, SkillsCommand};
use crate::tools::open_state;

pub fn run(cli: &Cli, cmd: &SkillsCommand) -> anyhow::Result<ExitCode> {
    let state = match open_state(cli)? {
        Ok(state) => state,
        Err(code) => return Ok(code),
    };
    let store = &state.skills;
    match cmd {
        SkillsCommand::List { json } => {
            let (skills, problems) = store.list()?;
            if *json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(
                        &json!({"skills": skills, "unreadable": problems})
                    )?
                );
            } else {
                if skills.is_empty() {
                    eprintln!("no skills saved in {}", store.root().display());
                }
                for s in &skills {
                    let summary = s.description.lines().next().unwrap_or_default();
                    println!("{:<24} v{:<3} {}  {summary}", s.name, s.version, s.updated);
                }
            }
            for p in &problems {
                eprintln!("warning: unreadable skill {p}");
            }
            Ok(ExitCode::SUCCESS)
        }
        SkillsCommand::Show {
            name,
            version,
            json,
        } => {
            let (skill, versions) = store.load_with_versions(name, *version)?;
            if *json {
                let mut value = serde_json::to_value(&skill)?;
                if let Some(obj) = value.as_object_mut() {
                    obj.insert("versions".into(), json!(versions));
                }
                println!("{}", serde_json::to_string_pretty(&value)?);
            } else {
                let m = &skill.meta;
                println!("# {} (version {} of {:?})", m.name, m.version, versions);
                println!("# {}", m.description.replace('\n', "\n# "));
                println!("# updated {}, created {}", m.updated, m.created);
                if !m.functions.is_empty() {
                    println!("# functions: {}", m.functions.join("; "));
                }
                if !m.tools.is_empty() {
                    println!("# tools: {}", m.tools.join(", "));
                }
                if skill.modified {
                    println!("# note: the code was changed after it was saved (its hash differs)");
                }
                println!();
                print!("{}", skill.code);
            }
            Ok(ExitCode::SUCCESS)
        }
        SkillsCommand::Rm { name } => {
            let versions = store.delete(name)?;
            println!("deleted skill '{name}' ({versions} version(s))");
            Ok(ExitCode::SUCCESS)
        }
        SkillsCommand::Export { dir, names } => {
            let names = if names.is_empty() {
                store.list()?.0.into_iter().map(|m| m.name).collect()
            } else {
                names.clone()
            };
            if names.is_empty() {
                eprintln!("no skills to export");
            }
            for name in names {
                let written = store.export(&name, dir)?;
                println!("{name} -> {}", written.display());
            }
            Ok(ExitCode::SUCCESS)
        }
        SkillsCommand::Import { dir } => {
            let runtime = tokio::runtime::Runtime::new()?;
            let failed = runtime.block_on(import(&state, dir));
            runtime.block_on(state.engine.shutdown());
            Ok(if failed? {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            })
        }
    }
}

/// Imports every skill under `dir`; true when one or more failed.
async fn import(state: &std::sync::Arc<AppState>, dir: &std::path::Path) -> anyhow::Result<bool> {
    let dirs = cem_store::find_skill_dirs(dir)?;
    if dirs.is_empty() {
        anyhow::bail!(
            "no skills under {}: expected .claude/skills/<name>/SKILL.md, <name>/SKILL.md or SKILL.md",
            dir.display()
        );
    }
    let mut failed = false;
    for skill_dir in dirs {
        let outcome = match cem_store::read_skill_dir(&skill_dir) {
            Ok(read) => cem_tools::skill_ops::save(
                state,
                read.parsed.name.module(),
                &read.parsed.description,
                &read.code,
                None,
            )
            .await
            .map_err(|e| e.0),
            Err(e) => Err(e.to_string()),
        };
        match outcome {
            Ok(saved) if saved.unchanged => {
                println!(
                    "{}: unchanged (version {})",
                    saved.meta.name, saved.meta.version
                )
            }
            Ok(saved) => println!(
                "{}: imported as version {}",
                saved.meta.name, saved.meta.version
            ),
            Err(e) => {
                failed = true;
                eprintln!("error: {}: {e}", skill_dir.display());
            }
        }
    }
    Ok(failed)
}
