//! The tool list: its exact shape (snapshot) and what it costs in context.

use std::sync::Arc;

use cem_host::{AppState, ToolSet};
use cem_server::McpHandler;

fn handler(set: ToolSet) -> Result<(tempfile::TempDir, McpHandler), Box<dyn std::error::Error>> {
    let tmp = tempfile::tempdir()?;
    let state = AppState::open(
        Default::default(),
        None,
        tmp.path(),
        set,
        "/nonexistent".into(),
    )?;
    Ok((tmp, McpHandler::new(Arc::new(state))))
}

#[test]
fn tool_list_snapshot() -> Result<(), Box<dyn std::error::Error>> {
    let (_tmp, h) = handler(ToolSet::Full)?;
    insta::assert_json_snapshot!(h.tools());
    Ok(())
}

/// The whole tools/list of the thirteen tools design.md names must end up at or under 1,500
/// o200k tokens; each tool gets a proportional share of that budget so the
/// list cannot drift over it as tools land.
#[test]
fn tool_list_stays_within_its_token_budget() -> Result<(), Box<dyn std::error::Error>> {
    const BUDGET_ALL_THIRTEEN: usize = 1_500;
    let (_tmp, h) = handler(ToolSet::Full)?;
    let tools = h.tools();
    let bpe = tiktoken_rs::o200k_base()?;
    let text = serde_json::to_string(&serde_json::json!({"tools": tools}))?;
    let total = bpe.encode_with_special_tokens(&text).len();
    let share = BUDGET_ALL_THIRTEEN * tools.len() / 13;
    println!(
        "tools/list: {} tools, {total} o200k tokens (share of budget: {share})",
        tools.len()
    );
    assert!(
        total <= share,
        "tools/list costs {total} tokens, over its share {share}"
    );
    Ok(())
}

#[test]
fn minimal_set_is_the_full_set_cut_to_the_three_discovery_tools()
-> Result<(), Box<dyn std::error::Error>> {
    let allowed = ["execute_code", "search_tools", "get_tool_definition"];
    let (_tmp, full) = handler(ToolSet::Full)?;
    let (_tmp2, minimal) = handler(ToolSet::Minimal)?;
    let expected: Vec<String> = full
        .tools()
        .iter()
        .map(|t| t.name.to_string())
        .filter(|n| allowed.contains(&n.as_str()))
        .collect();
    let got: Vec<String> = minimal.tools().iter().map(|t| t.name.to_string()).collect();
    assert_eq!(got, expected);
    assert!(
        full.tools().len() > got.len(),
        "minimal must list fewer tools than full"
    );
    Ok(())
}
