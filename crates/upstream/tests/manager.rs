//! The manager against a real (fault-injection) MCP server: per-call
//! timeouts, restart after a crash, tool-list changes.
//!
//! Needs the Python SDK 1.x: scripts/test sets CEM_SDK1_PYTHON. Run alone,
//! without it, the test says so and fails rather than passing vacuously.

use std::path::PathBuf;
use std::time::Duration;

use cem_config::{Config, ServerConfig, Transport};
use cem_upstream::{Manager, UpstreamError};

fn fault_server() -> Result<(Config, tempfile::TempDir), String> {
    fault_server_with(Default::default())
}

fn fault_server_with(
    env: std::collections::BTreeMap<String, cem_config::Secret>,
) -> Result<(Config, tempfile::TempDir), String> {
    let python = std::env::var("CEM_SDK1_PYTHON").map_err(|_| {
        "set CEM_SDK1_PYTHON to a python with the MCP SDK 1.x (scripts/test does)".to_string()
    })?;
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/integration/servers/fault_server.py");
    let mut config = Config::default();
    config.upstream.timeout_seconds = 10;
    config.servers.insert(
        "fault".into(),
        ServerConfig {
            name: "fault".into(),
            transport: Transport::Stdio {
                command: python,
                args: vec![script.display().to_string()],
                env,
                cwd: None,
            },
            disabled: false,
            timeout_seconds: None,
            shared: false,
            auth: Default::default(),
            oauth: Default::default(),
        },
    );
    let cache = tempfile::tempdir().map_err(|e| e.to_string())?;
    Ok((config, cache))
}

fn text(result: &cem_upstream::CallToolResult) -> String {
    serde_json::to_string(&result.content).unwrap_or_default()
}

#[tokio::test]
async fn timeouts_crashes_and_list_changes() -> Result<(), Box<dyn std::error::Error>> {
    let (config, cache) = fault_server()?;
    let manager = Manager::new(&config, cache.path().to_path_buf());

    let first = manager.call("fault", "ok", None, None).await?;
    assert!(text(&first).contains("ok from"), "{}", text(&first));

    // A per-call timeout stops waiting; the server keeps serving.
    let mut args = serde_json::Map::new();
    args.insert("seconds".into(), serde_json::json!(5));
    let late = manager
        .call(
            "fault",
            "sleep",
            Some(args),
            Some(Duration::from_millis(300)),
        )
        .await;
    assert!(
        matches!(late, Err(UpstreamError::Timeout { .. })),
        "{late:?}"
    );
    assert!(manager.call("fault", "ok", None, None).await.is_ok());

    // A crash mid-call is an error naming the server; the next use restarts it.
    let crashed = manager.call("fault", "crash", None, None).await;
    let message = crashed.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(
        message.contains("'fault'") && message.contains("restarted on next use"),
        "{message}"
    );
    let again = manager.call("fault", "ok", None, None).await?;
    assert_ne!(text(&again), text(&first), "a new process answers");

    // notifications/tools/list_changed wakes the catalog and refreshes the list.
    let before = manager.tools("fault", false).await?;
    assert!(!before.iter().any(|t| t.name == "brand_new"));
    let changed = manager.changed();
    let notified = changed.notified();
    let mut args = serde_json::Map::new();
    args.insert("name".into(), serde_json::json!("brand_new"));
    manager.call("fault", "add_tool", Some(args), None).await?;
    tokio::time::timeout(Duration::from_secs(5), notified).await?;
    let after = manager.tools("fault", false).await?;
    assert!(
        after.iter().any(|t| t.name == "brand_new"),
        "the cached list was replaced"
    );

    let unknown = manager.call("nope", "x", None, None).await;
    assert!(matches!(unknown, Err(UpstreamError::UnknownServer(_))));
    manager.shutdown().await;
    Ok(())
}

fn alive(pid: i32) -> bool {
    // A zombie has exited: only the running count.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

/// Starts the fault server with `variable` naming a file where it writes
/// its pid and its child's, calls it, and checks that both stop at shutdown.
async fn shutdown_stops_the_group(variable: &str) -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let pidfile = dir.path().join("pids");
    let mut env = std::collections::BTreeMap::new();
    env.insert(
        variable.to_string(),
        cem_config::Secret::new(pidfile.display().to_string()),
    );
    let (config, cache) = fault_server_with(env)?;
    let manager = Manager::new(&config, cache.path().to_path_buf());
    manager.call("fault", "ok", None, None).await?;
    let pids: Vec<i32> = std::fs::read_to_string(&pidfile)?
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    assert_eq!(pids.len(), 2);
    assert!(pids.iter().all(|&p| alive(p)), "server and its child run");
    manager.shutdown().await;
    for _ in 0..50 {
        if !pids.iter().any(|&p| alive(p)) {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!("still running after shutdown: {pids:?}").into())
}

/// The server ignores the end of its input and SIGTERM: it is killed; its
/// child is stopped with it.
#[tokio::test]
async fn shutdown_stops_a_stubborn_server_and_what_it_started()
-> Result<(), Box<dyn std::error::Error>> {
    shutdown_stops_the_group("FAULT_STUBBORN_PIDFILE").await
}

/// The server exits at the end of its input, but its child ignores
/// SIGTERM: the child is killed all the same.
#[tokio::test]
async fn shutdown_kills_what_a_server_leaves_behind() -> Result<(), Box<dyn std::error::Error>> {
    shutdown_stops_the_group("FAULT_ORPHAN_PIDFILE").await
}

/// A server that stopped reading its input while a request is being
/// written to it (the write holds the transport's writer) still stops at
/// shutdown, within the graces, instead of holding the shutdown forever.
#[tokio::test]
async fn shutdown_does_not_wait_for_a_server_that_stopped_reading()
-> Result<(), Box<dyn std::error::Error>> {
    let (config, cache) = fault_server()?;
    let manager = std::sync::Arc::new(Manager::new(&config, cache.path().to_path_buf()));
    manager.call("fault", "ok", None, None).await?;
    let mut args = serde_json::Map::new();
    args.insert("seconds".into(), serde_json::json!(600));
    let frozen = manager.clone();
    tokio::spawn(async move { frozen.call("fault", "freeze", Some(args), None).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Requests far larger than a pipe's buffer: one of them blocks in write.
    for _ in 0..3 {
        let mut pad = serde_json::Map::new();
        pad.insert("pad".into(), serde_json::json!("x".repeat(4 << 20)));
        let blocked = manager.clone();
        tokio::spawn(async move { blocked.call("fault", "ok", Some(pad), None).await });
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    tokio::time::timeout(Duration::from_secs(15), manager.shutdown())
        .await
        .map_err(|_| "shutdown still waits for the frozen server after 15 s")?;
    Ok(())
}
