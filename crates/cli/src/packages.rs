//! `packages list|sync|why`: the sandbox's Python packages at a shell.

use std::process::ExitCode;

use anyhow::Context;
use cem_packages::{Env, EnvState, Packages, Settings};
use serde_json::json;

use crate::args::{Cli, PackagesCommand};
use crate::setup;

pub fn run(cli: &Cli, cmd: &PackagesCommand) -> anyhow::Result<ExitCode> {
    let loaded = match setup::config_or_exit(cli) {
        Ok(loaded) => loaded,
        Err(code) => return Ok(code),
    };
    let data_dir = setup::data_dir(cli)?;
    let sandbox = &loaded.config.sandbox;
    // The version is part of every environment's digest: ask the
    // interpreter, as the server does.
    let layout = cem_sandbox::resolve_interpreter(&sandbox.python, false)
        .with_context(|| format!("cannot use sandbox.python ({})", sandbox.python.display()))?;
    let store = Packages::new(Settings::from_config(sandbox, &data_dir, &layout.version));
    match cmd {
        PackagesCommand::List { json } => list(&store, *json),
        PackagesCommand::Sync => sync(&store),
        PackagesCommand::Why { name } => why(&store, name),
    }
}

fn list(store: &Packages, as_json: bool) -> anyhow::Result<ExitCode> {
    let settings = store.settings();
    let state = store.status();
    let layers = store.layers();
    if as_json {
        let env = state.env().map(|e| env_json(e));
        let out = json!({
            "python": settings.python,
            "python_version": settings.python_version,
            "declared": settings.declared,
            "state": state.label(),
            "warning": state.warning(),
            "environment": env,
            "on_demand": settings.on_demand.as_str(),
            "allowed_packages": settings.allowed,
            "allow_source_builds": settings.allow_source_builds,
            "layers": layers.iter().map(env_json).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "python      {} ({})",
        settings.python.display(),
        settings.python_version
    );
    if settings.declared.is_empty() {
        println!("declared    none (sandbox.packages is empty)");
    } else {
        let names: Vec<&str> = settings.declared.iter().map(|r| r.as_str()).collect();
        println!("declared    {}", names.join(", "));
    }
    println!("state       {}", state.label());
    if let Some(w) = state.warning() {
        println!("warning     {w}");
    }
    if matches!(state, EnvState::Missing) {
        println!("            run `code-execution-mcp packages sync` to build it now");
    }
    match settings.on_demand {
        cem_config::OnDemand::Allowlist if settings.allowed.is_empty() => {
            println!("on demand   off until sandbox.allowed_packages names packages")
        }
        cem_config::OnDemand::Allowlist => {
            println!("on demand   only {}", settings.allowed.join(", "))
        }
        cem_config::OnDemand::Any => println!("on demand   any package of the index"),
        cem_config::OnDemand::Off => println!("on demand   off"),
    }
    println!(
        "sources     {}",
        if settings.allow_source_builds {
            "built when no wheel exists (sandbox.allow_source_builds)"
        } else {
            "refused: wheels only"
        }
    );
    if let Some(env) = state.env() {
        println!(
            "\nenvironment {} ({} packages, {})",
            env.site.display(),
            env.manifest.dists.len(),
            megabytes(env.manifest.size_bytes)
        );
        for d in &env.manifest.dists {
            println!("  {:<28} {}", d.name, d.version);
        }
    }
    if !layers.is_empty() {
        let total: u64 = layers.iter().map(|l| l.manifest.size_bytes).sum();
        println!(
            "\non-demand layers: {} ({} before sharing with the cache)",
            layers.len(),
            megabytes(total)
        );
        for l in &layers {
            println!("  {}  {}", l.digest, l.manifest.requirements.join(", "));
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn env_json(env: &Env) -> serde_json::Value {
    json!({
        "digest": env.digest,
        "path": env.site,
        "requirements": env.manifest.requirements,
        "packages": env.manifest.dists.iter().map(|d| json!({"name": d.name, "version": d.version})).collect::<Vec<_>>(),
        "size_bytes": env.manifest.size_bytes,
        "build_ms": env.manifest.build_ms,
    })
}

fn sync(store: &Packages) -> anyhow::Result<ExitCode> {
    if store.settings().declared.is_empty() {
        println!("sandbox.packages is empty: nothing to build");
        return Ok(ExitCode::SUCCESS);
    }
    if let Err(e) = store.installer() {
        eprintln!("error: {e}");
        return Ok(ExitCode::FAILURE);
    }
    let bar = indicatif::ProgressBar::new_spinner();
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} {elapsed:>4} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
    );
    bar.enable_steady_tick(std::time::Duration::from_millis(120));
    bar.set_message("installing");
    let started = std::time::Instant::now();
    let (state, installed) = store.sync(&|line| {
        if !line.is_empty() {
            bar.set_message(line.to_string());
        }
    });
    bar.finish_and_clear();
    match &state {
        EnvState::Ready(env) => {
            let how = if installed {
                format!("built in {:.1} s", started.elapsed().as_secs_f64())
            } else {
                "already built".to_string()
            };
            println!(
                "{} packages ({}) in {}: {how}",
                env.manifest.dists.len(),
                megabytes(env.manifest.size_bytes),
                env.site.display()
            );
            Ok(ExitCode::SUCCESS)
        }
        other => {
            eprintln!(
                "error: {}",
                other
                    .warning()
                    .unwrap_or_else(|| format!("the environment is {}", other.label()))
            );
            Ok(ExitCode::FAILURE)
        }
    }
}

fn why(store: &Packages, name: &str) -> anyhow::Result<ExitCode> {
    let mut found = false;
    let state = store.status();
    let sources = state
        .env()
        .map(|e| ("declared", e.as_ref().clone()))
        .into_iter()
        .chain(store.layers().into_iter().map(|l| ("on-demand layer", l)));
    for (kind, env) in sources {
        let Some(dist) = env.manifest.dist(name) else {
            continue;
        };
        found = true;
        println!(
            "{} {} ({kind} {}):",
            dist.name,
            dist.version,
            env.manifest.requirements.join(", ")
        );
        for chain in env.manifest.why(name) {
            println!("  {}", chain.join(" -> "));
        }
    }
    if !found {
        eprintln!(
            "{} is not installed: not in the declared environment nor in any on-demand layer",
            cem_config::normalize_package(name)
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

fn megabytes(bytes: u64) -> String {
    format!("{:.1} MB", bytes as f64 / 1_048_576.0)
}
