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
    query: String,
    /// Limit to one server or category
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
    tool_name: String,
    /// The tool's server or category
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
/// The longest query `search_tools` takes. A need fits in a sentence; the
/// answer repeats the query, and a longer one only costs time to embed.
const MAX_QUERY: usize = 1000;

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
    if query.chars().count() > MAX_QUERY {
        return Err(ToolFailure(format!(
            "the query is {} characters; search with at most {MAX_QUERY}: say what the tool should do in a sentence",
            query.chars().count()
        )));
    }
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
                DetailLevel::Full => full(e),
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

fn full(e: &Entry) -> Value {
    with_schemas(e, true)
}

/// A tool's name, server and description, and its JSON schemas when
/// `schemas` (an upstream tool's definition shows them as Python types).
fn with_schemas(e: &Entry, schemas: bool) -> Value {
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
        if let Some(s) = e.output_schema.as_ref().filter(|_| schemas) {
            obj.insert("output_schema".into(), shown_schema(s));
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
    let built = state.catalog.get().await;
    let found = built.catalog.find(&name, category.as_deref());
    let entry = match found.as_slice() {
        [one] => *one,
        [] => {
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
            return Err(ToolFailure(format!("no tool named '{name}'{hint}")));
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
    // Reading a tool's definition after a search is a use of it.
    cem_host::cluster::used_tool(state, session, &entry.qualified_name());
    // Only an upstream tool has a Python rendering to stand for its schemas.
    let is_upstream = entry.kind == EntryKind::Upstream;
    let mut answer = with_schemas(entry, schemas || !is_upstream);
    if is_upstream && let Some(obj) = answer.as_object_mut() {
        let module = python::alias(&entry.category);
        let function = python::alias(&entry.name);
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
                json!(format!("call_tool({:?}, {{...}})", entry.qualified_name())),
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
        let status = upstream.status();
        if let Some(obj) = v.as_object_mut() {
            let (state_name, error) = match status {
                ServerStatus::Disabled => ("disabled", None),
                ServerStatus::NotStarted => ("not_started", None),
                ServerStatus::Connected => ("connected", None),
                ServerStatus::Failed(e) => ("failed", Some(e)),
            };
            // A failure while listing tools is reported even if no call was made.
            let error = error.or_else(|| {
                unavailable
                    .iter()
                    .find(|(s, _)| s == name)
                    .map(|(_, e)| e.clone())
            });
            let state_name = if error.is_some() {
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
