//! search_tools, get_tool_definition, list_tool_categories.

use std::collections::BTreeMap;
use std::sync::Arc;

use cem_catalog::{Entry, EntryKind, Learning, python};
use cem_upstream::ServerStatus;
use serde_json::{Value, json};

use schemars::JsonSchema;
use serde::Deserialize;

use crate::def::ToolDef;
use crate::input::{NoArgs, input_schema, parse};
use cem_host::AppState;
use cem_host::privacy::Session;
use cem_host::{Args, ToolFailure, ToolResult, success};

pub const SEARCH: ToolDef = ToolDef {
    name: "search_tools",
    description: "Find tools of the connected MCP servers by what they do. detail_level: name, summary (default) or full (with schemas).",
    schema: input_schema::<SearchInput>,
    minimal: true,
};

#[derive(Deserialize, JsonSchema)]
struct SearchInput {
    #[schemars(extend("maxLength" = MAX_QUERY))]
    query: String,
    /// Limit to one server or category
    #[schemars(extend("maxLength" = MAX_CATEGORY))]
    category: Option<String>,
    detail_level: Option<DetailLevel>,
    #[schemars(extend("default" = 10))]
    limit: Option<u64>,
}

// How much of each tool search_tools shows (a plain comment: a doc comment
// would land in the schema every agent reads).
#[derive(Debug, Clone, Copy, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
enum DetailLevel {
    Name,
    #[default]
    Summary,
    Full,
}

pub const DEFINITION: ToolDef = ToolDef {
    name: "get_tool_definition",
    description: "One tool as Python: typed signature (TypedDicts for nested arguments and the result), import, example.",
    schema: input_schema::<DefinitionInput>,
    minimal: true,
};

#[derive(Deserialize, JsonSchema)]
struct DefinitionInput {
    /// server.tool, or a tool name
    #[schemars(extend("maxLength" = MAX_TOOL_NAME))]
    tool_name: String,
    /// The tool's server or category
    #[schemars(extend("maxLength" = MAX_CATEGORY))]
    category: Option<String>,
    /// Add the raw JSON schemas
    schemas: Option<bool>,
}

pub const CATEGORIES: ToolDef = ToolDef {
    name: "list_tool_categories",
    description: "List the upstream servers (tool count, state, errors), registry categories and skills.",
    schema: input_schema::<NoArgs>,
    minimal: false,
};

const MAX_LIMIT: u64 = 100;
/// The longest query `search_tools` takes (its schema's bound, checked
/// before it runs). A need fits in a sentence; the answer repeats the
/// query, and a longer one only costs time to embed.
const MAX_QUERY: usize = 1000;
/// The longest `server.tool` get_tool_definition looks up. MCP asks for
/// tool names of at most 128 characters; a server's name and a hostile
/// upstream's longer names fit too.
const MAX_TOOL_NAME: usize = 512;
/// The longest server or category name taken.
const MAX_CATEGORY: usize = 256;
/// How much longer than the catalog's longest `server.tool` a name may be
/// and still get suggestions: a few letters typed twice. Past it, no name
/// can be meant, and the search for close names (time in proportion to the
/// name's length) is not made.
const SUGGEST_SLACK: usize = 16;

/// `session` is the caller's: its search is remembered, and the tool it
/// uses next learns the query's words.
pub async fn search(state: &Arc<AppState>, args: Args, session: &Session) -> ToolResult {
    let SearchInput {
        query,
        category,
        detail_level,
        limit,
    } = parse(&args)?;
    let detail = detail_level.unwrap_or_default();
    let limit = limit.unwrap_or(10);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(ToolFailure(format!(
            "limit must be from 1 to {MAX_LIMIT}, got {limit}"
        )));
    }
    let built = state.catalog.get().await;
    let catalog = &built.catalog;
    if let Some(c) = &category
        && !catalog
            .entries()
            .iter()
            .any(|e| e.category.eq_ignore_ascii_case(c))
    {
        return Err(ToolFailure(format!(
            "no category '{c}'; list_tool_categories shows them ({})",
            categories(catalog.entries()).join(", ")
        )));
    }
    cem_host::cluster::pull_learned(state).await;
    cem_host::cluster::pull_shapes(state).await;
    cem_host::cluster::searched(state, session, &query).await;
    let hits = state.learning.with(|learned| match learned {
        Some(learned) => catalog.search_learned(
            &query,
            category.as_deref(),
            limit as usize,
            Learning {
                learned,
                now: cem_host::learning::now(),
            },
        ),
        None => catalog.search(&query, category.as_deref(), limit as usize),
    });
    let tools: Vec<Value> = hits
        .iter()
        .map(|h| {
            let e = &catalog.entries()[h.index];
            match detail {
                DetailLevel::Name => json!(e.qualified_name()),
                DetailLevel::Summary => {
                    json!({"name": e.name, "server": e.category, "description": e.summary()})
                }
                DetailLevel::Full => full(state, e),
            }
        })
        .collect();
    let mut answer = success(json!({"query": query, "count": tools.len(), "tools": tools}));
    let unavailable = state.catalog.unavailable(&built);
    if !unavailable.is_empty()
        && let Some(obj) = answer.as_object_mut()
    {
        obj.insert(
            "unavailable".into(),
            json!(
                unavailable
                    .iter()
                    .map(|(s, e)| json!({"server": s, "error": e}))
                    .collect::<Vec<_>>()
            ),
        );
    }
    Ok(answer)
}

fn categories(entries: &[Entry]) -> Vec<String> {
    let mut names: Vec<String> = entries.iter().map(|e| e.category.clone()).collect();
    names.sort();
    names.dedup();
    names
}

/// An upstream's schema as an agent reads it: without `$schema`, the
/// dialect's URL, which tells the agent nothing and costs about 15 tokens a
/// schema on every definition.
fn shown_schema(schema: &Value) -> Value {
    let mut shown = schema.clone();
    if let Some(obj) = shown.as_object_mut() {
        obj.remove("$schema");
    }
    shown
}

/// Where a tool's return type comes from: `{"source": "declared"}` for
/// its own `outputSchema`, else learned (from how many results code got
/// back) or probed (by `tools discover`), with the counts as they are now
/// (the catalog's copy is from when the shape last changed).
fn returns(state: &AppState, e: &Entry, schema: &Value) -> Value {
    let Some(mark) = schema.get(cem_host::shapes::MARK) else {
        return json!({"source": "declared"});
    };
    match state.shapes.learned(&e.qualified_name()) {
        Some(learned) => json!({
            "source": if learned.calls > 0 { "learned" } else { "probed" },
            "calls": learned.calls,
            "probes": learned.probes,
        }),
        None => mark.clone(),
    }
}

fn full(state: &AppState, e: &Entry) -> Value {
    let mut live = e.clone();
    state.shapes.overlay(std::slice::from_mut(&mut live));
    with_schemas(state, &live, true)
}

/// A tool's name, server and description, and its JSON schemas when
/// `schemas` (an upstream tool's definition shows them as Python types).
fn with_schemas(state: &AppState, e: &Entry, schemas: bool) -> Value {
    let mut v = json!({
        "name": e.name,
        "server": e.category,
        "kind": e.kind,
        "description": e.description,
    });
    if let Some(obj) = v.as_object_mut() {
        if let Some(s) = e.input_schema.as_ref().filter(|_| schemas) {
            obj.insert("input_schema".into(), shown_schema(s));
        }
        if let Some(s) = &e.output_schema {
            let returns = returns(state, e, s);
            if schemas {
                let mut shown = shown_schema(s);
                if let Some(mark) = shown.get_mut(cem_host::shapes::MARK) {
                    *mark = returns.clone();
                }
                obj.insert("output_schema".into(), shown);
            }
            obj.insert("returns".into(), returns);
        }
        if e.kind == EntryKind::Registry {
            obj.insert("keywords".into(), json!(e.keywords));
            if let Some(m) = &e.mcp_server {
                obj.insert("mcp_server".into(), json!(m));
            }
        }
    }
    v
}

pub async fn definition(state: &Arc<AppState>, args: Args, session: &Session) -> ToolResult {
    let DefinitionInput {
        tool_name: name,
        category,
        schemas,
    } = parse(&args)?;
    let schemas = schemas.unwrap_or(false);
    cem_host::cluster::pull_shapes(state).await;
    let built = state.catalog.get().await;
    let found = built.catalog.find(&name, category.as_deref());
    let entry = match found.as_slice() {
        [one] => *one,
        [] => {
            // No name can be longer than the longest the catalog holds (a
            // typo or two aside): past that the search for close names,
            // which costs time in proportion to the name, is not made.
            let longest = built
                .catalog
                .entries()
                .iter()
                .map(|e| e.category.len() + 1 + e.name.len())
                .max()
                .unwrap_or(0);
            if name.len() > longest + SUGGEST_SLACK {
                return Err(ToolFailure(format!(
                    "no tool named '{}': no tool has a name that long; search_tools finds tools by what they do",
                    cem_host::gate::capped(&name)
                )));
            }
            let close: Vec<String> = built
                .catalog
                .search_words(&name, None, 3)
                .iter()
                .map(|h| built.catalog.entries()[h.index].qualified_name())
                .collect();
            let hint = if close.is_empty() {
                String::new()
            } else {
                format!("; closest: {}", close.join(", "))
            };
            return Err(ToolFailure(format!(
                "no tool named '{}'{hint}",
                cem_host::gate::capped(&name)
            )));
        }
        many => {
            let names: Vec<String> = many.iter().map(|e| e.qualified_name()).collect();
            return Err(ToolFailure(format!(
                "'{name}' names {} tools ({}); pass server.tool or category",
                many.len(),
                names.join(", ")
            )));
        }
    };
    // The shapes as they are now (the catalog takes a changed one in a
    // moment later, in the background).
    let mut live = entry.clone();
    state.shapes.overlay(std::slice::from_mut(&mut live));
    let entry = &live;
    // Reading a tool's definition after a search is a use of it.
    cem_host::cluster::used_tool(state, session, &entry.qualified_name());
    // Only an upstream tool has a Python rendering to stand for its schemas.
    let is_upstream = entry.kind == EntryKind::Upstream;
    let mut answer = with_schemas(state, entry, schemas || !is_upstream);
    if is_upstream && let Some(obj) = answer.as_object_mut() {
        // The names the generated wrappers have (a cut name and a hash for
        // a name too long or odd to be one as it is).
        let module = python::module_name(&entry.category);
        let function = python::module_name(&entry.name);
        let typed = python::typed(entry);
        let mut python = json!({"signature": typed.signature});
        if let Some(p) = python.as_object_mut() {
            if !typed.args.is_empty() {
                p.insert("args".into(), json!(typed.args));
            }
            if !typed.classes.is_empty() {
                p.insert("types".into(), json!(typed.classes));
            }
            p.insert(
                "import".into(),
                json!(format!("from servers.{module} import {function}")),
            );
            p.insert("example".into(), json!(typed.example));
            p.insert(
                "call_tool".into(),
                json!(format!(
                    "call_tool({}, {{...}})",
                    python::string_literal(&entry.qualified_name())
                )),
            );
        }
        obj.insert("python".into(), python);
    }
    if entry.kind == EntryKind::Skill
        && let Some(obj) = answer.as_object_mut()
    {
        let store = state.skills.clone();
        let name = entry.name.clone();
        let skill = cem_host::blocking(state, move || Ok(store.load(&name, None)?)).await?;
        let mut python = crate::skill_ops::usage(&skill.meta);
        if let Some(p) = python.as_object_mut() {
            p.insert("functions".into(), json!(skill.meta.functions));
        }
        obj.insert("python".into(), python);
        obj.insert("tools".into(), json!(skill.meta.tools));
        obj.insert("version".into(), json!(skill.meta.version));
    }
    let mut out = success(json!({}));
    if let (Some(o), Value::Object(fields)) = (out.as_object_mut(), answer) {
        o.extend(fields);
    }
    Ok(out)
}

/// Whether this person has signed in to `server`, for a server that
/// takes sign-ins (never a token: only whether one is held).
async fn sign_in_state(state: &AppState, server: &str) -> Option<Value> {
    if !cem_host::signin::takes_sign_in(&state.upstreams, server) {
        return None;
    }
    let upstream = state.upstreams.get(server).ok()?;
    let signin = state.upstreams.signin()?;
    let id = upstream.credential_id();
    let held = match signin.backend() {
        Ok(backend) => backend.load(&id).await.ok().flatten().is_some(),
        Err(_) => false,
    };
    let mut v = json!({"auth": upstream.config.auth.as_str(), "signed_in": held});
    if !held && let Some(obj) = v.as_object_mut() {
        obj.insert(
            "how".into(),
            json!(format!(
                "if the server asks for sign-in, the first call of one of its tools asks the person \
                 to sign in (their client shows a link); or they run `code-execution-mcp auth login {server}`"
            )),
        );
    }
    Some(v)
}

pub async fn categories_tool(state: &Arc<AppState>, args: Args) -> ToolResult {
    let NoArgs {} = parse(&args)?;
    let built = state.catalog.get().await;
    let unavailable = state.catalog.unavailable(&built);
    let mut counts: BTreeMap<(String, bool), usize> = BTreeMap::new();
    let mut skills = 0;
    for e in built.catalog.entries() {
        if e.kind == EntryKind::Skill {
            skills += 1;
            continue;
        }
        *counts
            .entry((e.category.clone(), e.kind == EntryKind::Registry))
            .or_default() += 1;
    }
    let mut out = Vec::new();
    for upstream in state.catalog.manager().servers() {
        let name = &upstream.config.name;
        let mut v = json!({
            "name": name,
            "kind": "upstream",
            "transport": upstream.config.transport.kind(),
            "tools": counts.get(&(name.clone(), false)).copied().unwrap_or(0),
        });
        // The tenant's own process of the server may have failed where the
        // catalog's did not (another tenant holds its fixed path).
        let own = state
            .upstreams
            .get(name)
            .ok()
            .map(|u| u.status())
            .filter(|s| matches!(s, ServerStatus::Failed(_)));
        let status = own.unwrap_or_else(|| upstream.status());
        if let Some(obj) = v.as_object_mut() {
            if upstream.config.transport.kind() == "stdio" {
                // One process for every tenant, or one each.
                obj.insert("shared".into(), json!(upstream.config.shared));
            }
            let (state_name, error) = match status {
                ServerStatus::Disabled => ("disabled", None),
                ServerStatus::NotStarted => ("not_started", None),
                ServerStatus::Connected => ("connected", None),
                ServerStatus::SignIn => ("sign_in_required", None),
                ServerStatus::Failed(e) => ("failed", Some(e)),
            };
            if let Some(sign_in) = sign_in_state(state, name).await {
                obj.insert("sign_in".into(), sign_in);
            }
            // A failure while listing tools is reported even if no call was made.
            let error = error.or_else(|| {
                unavailable
                    .iter()
                    .find(|(s, _)| s == name)
                    .map(|(_, e)| e.clone())
            });
            let state_name = if error.is_some() && state_name != "sign_in_required" {
                "failed"
            } else {
                state_name
            };
            obj.insert("state".into(), json!(state_name));
            if let Some(e) = error {
                obj.insert("error".into(), json!(e));
            }
        }
        out.push(v);
    }
    for ((name, registry), count) in &counts {
        if *registry {
            out.push(json!({"name": name, "kind": "registry", "tools": count}));
        }
    }
    // Saved skills, always listed so an agent learns the category exists.
    out.push(json!({"name": "skills", "kind": "skills", "tools": skills}));
    Ok(success(json!({"count": out.len(), "categories": out})))
}
