//! `tools list|search|show|refresh` and `generate`: the catalog at a shell.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use cem_catalog::EntryKind;
use cem_host::{AppState, ToolSet};
use serde_json::{Map, Value, json};

use crate::args::{Cli, GenerateArgs, ToolsCommand};
use crate::setup;

pub(crate) fn open_state(cli: &Cli) -> anyhow::Result<Result<Arc<AppState>, ExitCode>> {
    let loaded = match setup::config_or_exit(cli) {
        Ok(loaded) => loaded,
        Err(code) => return Ok(Err(code)),
    };
    let data_dir = setup::data_dir(cli)?;
    let exe = std::env::current_exe().context("cannot find our own executable")?;
    let state = AppState::open(
        loaded.config,
        loaded.located.map(|l| l.path),
        &data_dir,
        ToolSet::Full,
        exe,
    )?;
    Ok(Ok(Arc::new(state)))
}

/// Calls one of our MCP tools and returns its JSON (or its error text).
async fn call_tool(state: &Arc<AppState>, name: &str, args: Value) -> Result<Value, String> {
    let args = cem_host::Args::new(args.as_object().cloned().or_else(|| Some(Map::new())));
    let session = state.session("cli");
    match cem_tools::call(state, name, args, &session).await {
        Some(cem_host::Answer::Plain(Ok(v))) => Ok(v),
        Some(cem_host::Answer::Plain(Err(e))) => Err(e.0),
        Some(cem_host::Answer::Flagged { body, .. }) => Ok(body),
        None => Err(format!("no tool {name}")),
    }
}

pub fn run(cli: &Cli, cmd: &ToolsCommand) -> anyhow::Result<ExitCode> {
    // Needs no server state, no upstreams.
    if let ToolsCommand::Transformer { dir, python } = cmd {
        return crate::transformer::run(dir, python);
    }
    let state = match open_state(cli)? {
        Ok(state) => state,
        Err(code) => return Ok(code),
    };
    let runtime = tokio::runtime::Runtime::new()?;
    let code = runtime.block_on(async {
        let outcome = match cmd {
            ToolsCommand::List { server } => list(&state, server.as_deref()).await,
            ToolsCommand::Search {
                query,
                limit,
                category,
                explain: true,
            } => explain(&state, query, *limit, category.as_deref()).await,
            ToolsCommand::Learned {
                tenant,
                clear,
                tool,
                json,
            } => learned(&state, tenant.as_deref(), *clear, tool.as_deref(), *json),
            ToolsCommand::Search {
                query,
                limit,
                category,
                explain: false,
            } => {
                let args = json!({"query": query, "limit": limit, "category": category});
                call_tool(&state, "search_tools", args).await.map(|v| {
                    for t in v["tools"].as_array().into_iter().flatten() {
                        println!(
                            "{}.{}  {}",
                            t["server"].as_str().unwrap_or(""),
                            t["name"].as_str().unwrap_or(""),
                            t["description"].as_str().unwrap_or("")
                        );
                    }
                    report_unavailable(&v);
                })
            }
            ToolsCommand::Show { name } => {
                call_tool(&state, "get_tool_definition", json!({"tool_name": name}))
                    .await
                    .map(|v| println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default()))
            }
            ToolsCommand::Discover {
                servers,
                args,
                json,
            } => discover(&state, servers, args, *json).await,
            ToolsCommand::Shapes {
                server,
                tenant,
                clear,
                json,
            } => shapes(&state, server.as_deref(), tenant.as_deref(), *clear, *json),
            ToolsCommand::Call {
                name,
                args,
                repeat,
                concurrency,
                warmup,
            } => {
                // On a runtime worker, as a server's handlers run (and as
                // `exec` runs code): the same footing for both sides of the
                // bridge benchmark.
                let (state, name, args) = (state.clone(), name.clone(), args.clone());
                let timing = repeat.map(|repeat| Timing {
                    repeat,
                    concurrency: *concurrency,
                    warmup: *warmup,
                });
                tokio::spawn(async move { call_direct(&state, &name, &args, timing).await })
                    .await
                    .unwrap_or_else(|e| Err(format!("the call task failed: {e}")))
            }
            // Answered above, without the state.
            ToolsCommand::Transformer { .. } => Ok(()),
            ToolsCommand::Refresh => {
                state.catalog.manager().clear_cache();
                let built = state.catalog.rebuild(true).await;
                let mut counts: std::collections::BTreeMap<&str, usize> = Default::default();
                for e in built
                    .catalog
                    .entries()
                    .iter()
                    .filter(|e| e.kind == EntryKind::Upstream)
                {
                    *counts.entry(e.category.as_str()).or_default() += 1;
                }
                for (server, n) in &counts {
                    println!("{server}: {n} tools");
                }
                for (server, error) in &built.unavailable {
                    println!("{server}: FAILED: {error}");
                }
                if built.unavailable.is_empty() {
                    Ok(())
                } else {
                    Err(format!("{} server(s) failed", built.unavailable.len()))
                }
            }
        };
        state.catalog.manager().shutdown().await;
        match outcome {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(1)
            }
        }
    });
    Ok(code)
}

/// `tools search --explain`: the ranking with its reasons.
async fn explain(
    state: &Arc<AppState>,
    query: &str,
    limit: u64,
    category: Option<&str>,
) -> Result<(), String> {
    let built = state.catalog.get().await;
    let catalog = &built.catalog;
    let why = state.learning.with(|learned| {
        let learning = learned.map(|learned| cem_catalog::Learning {
            learned,
            now: cem_host::learning::now(),
        });
        catalog.explain(query, category, limit as usize, learning)
    });
    println!("ranking {}", state.catalog.ranking().describe());
    if !state.learning.enabled() {
        println!("learning is off (search.learn)");
    }
    for (rank, why) in why.iter().enumerate() {
        let entry = &catalog.entries()[why.hit.index];
        let mut reasons = vec![format!("words {:.2}", why.words)];
        if let Some((own, server)) = why.meaning {
            reasons.push(format!("meaning {own:.2} (server {server:.2})"));
        }
        if let Some(how) = why.named {
            reasons.push(format!("named by {how}"));
        }
        if let Some((boost, words)) = &why.learned {
            reasons.push(format!("learned {boost:+.2} from \"{words}\""));
        }
        if why.kept_by_words {
            reasons.push(format!(
                "kept in the first {}: words alone rank it first",
                cem_catalog::LEARNING_KEEPS_WORDS_FIRST
            ));
        }
        if why.kept_as_first {
            reasons.push(format!(
                "kept in the first {}: first before the records counted",
                cem_catalog::LEARNING_KEEPS_WORDS_FIRST
            ));
        }
        if why.deprecated {
            reasons.push("deprecated (halved)".into());
        }
        println!(
            "{:>2}. {}  score {:.3}: {}",
            rank + 1,
            entry.qualified_name(),
            why.hit.score,
            reasons.join(", ")
        );
    }
    report_unavailable(&json!({"unavailable": state.catalog.unavailable(&built)
        .iter().map(|(s, e)| json!({"server": s, "error": e})).collect::<Vec<_>>()}));
    Ok(())
}

/// `tools learned`: list or clear what search learned. Reads the tenant's
/// file directly (opening a tenant's whole state would mount its
/// workspace).
/// `tools discover`: probes the safe tools and reports each.
async fn discover(
    state: &Arc<AppState>,
    servers: &[String],
    args: &[String],
    json: bool,
) -> Result<(), String> {
    let mut given = Map::new();
    for arg in args {
        let Some((name, value)) = arg.split_once('=') else {
            return Err(format!("--arg {arg:?} is not NAME=VALUE"));
        };
        let value = serde_json::from_str(value).unwrap_or_else(|_| Value::String(value.into()));
        given.insert(name.to_string(), value);
    }
    let probes = cem_host::probe::discover(state, servers, &given).await?;
    let (mut called, mut skipped, mut failed) = (0, 0, 0);
    for probe in &probes {
        if json {
            println!("{}", serde_json::to_string(probe).unwrap_or_default());
        }
        match probe {
            cem_host::probe::Probe::Called { tool, arguments } => {
                called += 1;
                if !json {
                    println!("called   {tool} {arguments}");
                }
            }
            cem_host::probe::Probe::Skipped { tool, reason } => {
                skipped += 1;
                if !json {
                    println!("skipped  {tool}: {reason}");
                }
            }
            cem_host::probe::Probe::Failed { tool, error } => {
                failed += 1;
                if !json {
                    println!("failed   {tool}: {error}");
                }
            }
        }
    }
    if !json {
        println!("{called} called, {skipped} skipped, {failed} failed");
    }
    Ok(())
}

/// `tools shapes`: lists or forgets a tenant's learned shapes.
fn shapes(
    state: &Arc<AppState>,
    server: Option<&str>,
    tenant: Option<&str>,
    clear: bool,
    json: bool,
) -> Result<(), String> {
    if !state.config.catalog.learn_shapes {
        println!("shapes are not learned (catalog.learn_shapes is false)");
        return Ok(());
    }
    let (root, id) = tenant_root(state, tenant)?;
    let shapes =
        cem_host::shapes::Shapes::open(true, Some(root.join("shapes").join("learned.json")), &id);
    if clear {
        if state.config.store.url.is_some() {
            eprintln!(
                "note: this deployment shares learned shapes through its store; other nodes' shapes stay \
                 there until they are deleted too (DELETE FROM cem_shapes WHERE tenant = '{id}'{})",
                server
                    .map(|s| format!(" AND starts_with(tool, '{s}.')"))
                    .unwrap_or_default()
            );
        }
        let gone = shapes.forget(server);
        println!("forgot {gone} shape(s)");
        return Ok(());
    }
    for (tool, learned) in shapes.list(server) {
        if json {
            println!(
                "{}",
                json!({"tool": tool, "calls": learned.calls, "probes": learned.probes,
                       "widened": learned.widened, "schema": shapes.schema(&tool)})
            );
        } else {
            let fields = learned.shape.field_names();
            println!(
                "{tool}  {} call(s), {} probe(s), widened {}  [{}]",
                learned.calls,
                learned.probes,
                learned.widened,
                fields.join(", ")
            );
        }
    }
    Ok(())
}

/// A tenant's directory and id (the local tenant's without one).
fn tenant_root(
    state: &Arc<AppState>,
    tenant: Option<&str>,
) -> Result<(std::path::PathBuf, String), String> {
    match tenant {
        None => Ok((state.data_dir.clone(), state.tenant.clone())),
        Some(id) => {
            let root = state.data_dir.join("tenants").join(id);
            if id.is_empty() || id.contains(['/', '\\']) || id.starts_with('.') || !root.is_dir() {
                return Err(format!(
                    "no tenant {id:?} in {}; the ids are the directory names there",
                    state.data_dir.join("tenants").display()
                ));
            }
            Ok((root, id.to_string()))
        }
    }
}

fn learned(
    state: &Arc<AppState>,
    tenant: Option<&str>,
    clear: bool,
    tool: Option<&str>,
    json: bool,
) -> Result<(), String> {
    let (root, id) = tenant_root(state, tenant)?;
    if !state.config.search.learn {
        println!("learning is off (search.learn)");
        return Ok(());
    }
    let learning = cem_host::learning::Learning::open(
        true,
        Some(root.join("search").join("learned.json")),
        &id,
    );
    if clear {
        if state.config.store.url.is_some() {
            return Err(format!(
                "this deployment keeps what search learned in its store, and the nodes read it back every \
                 30 s: forget it there (DELETE FROM cem_learned WHERE tenant = '{id}'{})",
                tool.map(|t| format!(" AND tool = '{t}'"))
                    .unwrap_or_else(|| format!(
                        "; DELETE FROM cem_last_search WHERE tenant = '{id}'"
                    ))
            ));
        }
        let gone = learning.clear(tool);
        println!("forgot {gone} record(s)");
        return Ok(());
    }
    let now = cem_host::learning::now();
    learning.with(|learned| {
        for used in learned.map(|l| l.list(now)).unwrap_or_default() {
            if tool.is_some_and(|t| t != used.tool) {
                continue;
            }
            if json {
                println!(
                    "{}",
                    json!({"query": used.words.join(" "), "tool": used.tool,
                           "weight": used.weight_at(now), "last": used.last})
                );
            } else {
                println!(
                    "{:.2}  {}  <- \"{}\"",
                    used.weight_at(now),
                    used.tool,
                    used.words.join(" ")
                );
            }
        }
    });
    Ok(())
}

fn report_unavailable(v: &Value) {
    for u in v["unavailable"].as_array().into_iter().flatten() {
        eprintln!(
            "warning: {} unavailable: {}",
            u["server"].as_str().unwrap_or("?"),
            u["error"].as_str().unwrap_or("?")
        );
    }
}

async fn list(state: &Arc<AppState>, server: Option<&str>) -> Result<(), String> {
    let built = state.catalog.get().await;
    let mut shown = 0;
    for e in built.catalog.entries() {
        if server.is_some_and(|s| !e.category.eq_ignore_ascii_case(s)) {
            continue;
        }
        println!("{}  {}", e.qualified_name(), e.summary());
        shown += 1;
    }
    for (s, error) in &built.unavailable {
        eprintln!("warning: {s} unavailable: {error}");
    }
    if shown == 0
        && let Some(s) = server
    {
        return Err(format!("no tools for '{s}'"));
    }
    Ok(())
}

pub fn generate(cli: &Cli, args: &GenerateArgs) -> anyhow::Result<ExitCode> {
    let state = match open_state(cli)? {
        Ok(state) => state,
        Err(code) => return Ok(code),
    };
    let out = match &args.out {
        Some(dir) => dir.clone(),
        None => state.data_dir.clone(),
    };
    let runtime = tokio::runtime::Runtime::new()?;
    let built = runtime.block_on(state.catalog.get());
    let entries: Vec<_> = built
        .catalog
        .entries()
        .iter()
        .filter(|e| e.kind == EntryKind::Upstream)
        .collect();
    let bar = indicatif::ProgressBar::new(entries.len() as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} tools {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let python = state.config.sandbox.python.clone();
    let stats = cem_catalog::python::write_wrappers(&entries, &out, &python, &mut |done, _| {
        bar.set_position(done as u64)
    })
    .with_context(|| format!("cannot write wrappers under {}", out.display()))?;
    bar.finish_and_clear();
    runtime.block_on(state.catalog.manager().shutdown());
    println!(
        "{} tools of {} servers in {}: {} files written, {} removed",
        stats.tools,
        stats.servers,
        out.join("servers").display(),
        stats.written,
        stats.removed
    );
    for (server, error) in &built.unavailable {
        eprintln!("warning: {server} skipped: {error}");
    }
    for skipped in &stats.skipped {
        match &skipped.tool {
            Some(tool) => eprintln!(
                "warning: no wrapper for {}.{tool}: {}",
                skipped.server, skipped.reason
            ),
            None => eprintln!(
                "warning: no wrappers for {}: {}",
                skipped.server, skipped.reason
            ),
        }
    }
    if let Some(why) = &stats.unchecked {
        eprintln!("warning: the wrappers were not compiled before they were written: {why}");
    }
    Ok(ExitCode::SUCCESS)
}

/// `tools call --repeat`: how to time the calls.
struct Timing {
    repeat: usize,
    concurrency: usize,
    warmup: usize,
}

/// `tools call`: the upstream tool through the manager (an rmcp client),
/// with no sandbox in between; with `timing`, timings as JSON.
async fn call_direct(
    state: &Arc<AppState>,
    name: &str,
    args: &str,
    timing: Option<Timing>,
) -> Result<(), String> {
    let Some((server, tool)) = name.split_once('.') else {
        return Err(format!("'{name}' is not server.tool"));
    };
    let arguments = match serde_json::from_str::<Value>(args) {
        Ok(Value::Object(map)) => Some(map),
        Ok(_) => return Err("--args must be a JSON object".into()),
        Err(e) => return Err(format!("--args is not JSON: {e}")),
    };
    let manager = state.catalog.manager();
    // The same policy as calls from code: rules, pins, budgets, approval
    // (on the terminal), audit.
    let exec = crate::terminal::execution(&state.gate, cem_host::gate::Caller::Cli);
    let shown_args = Value::Object(arguments.clone().unwrap_or_default());
    let shown = move || shown_args.clone();
    let upstream = manager.get(server).map_err(|e| e.to_string())?;
    let server = upstream.config.name.as_str();
    let first = state
        .gate
        .call(manager, &exec, server, tool, arguments.clone(), &shown)
        .await?;
    let Some(Timing {
        repeat: n,
        concurrency,
        warmup,
    }) = timing
    else {
        println!(
            "{}",
            serde_json::to_string_pretty(&first).unwrap_or_default()
        );
        return Ok(());
    };
    for _ in 0..warmup {
        state
            .gate
            .call(manager, &exec, server, tool, arguments.clone(), &shown)
            .await?;
    }
    let concurrency = concurrency.max(1);
    let started = std::time::Instant::now();
    let mut times = Vec::with_capacity(n);
    let mut done = 0;
    while done < n {
        let batch = concurrency.min(n - done);
        let calls = (0..batch).map(|_| async {
            let t0 = std::time::Instant::now();
            state
                .gate
                .call(manager, &exec, server, tool, arguments.clone(), &shown)
                .await
                .map(|_| t0.elapsed().as_secs_f64() * 1000.0)
        });
        for r in futures::future::join_all(calls).await {
            times.push(r?);
        }
        done += batch;
    }
    let total = started.elapsed().as_secs_f64();
    times.sort_by(|a, b| a.total_cmp(b));
    let p = |q: f64| times[((times.len() - 1) as f64 * q) as usize];
    println!(
        "{}",
        json!({"calls": n, "concurrency": concurrency, "p50_ms": p(0.5), "p99_ms": p(0.99), "calls_per_second": n as f64 / total})
    );
    Ok(())
}
