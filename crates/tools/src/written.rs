//! The workspace files an execution wrote: a snapshot of every file's size
//! and time before it runs, compared after, each change announced to the
//! tenant's listeners (resource subscribers).

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Value, json};

use cem_host::{AppState, Change};

/// Workspaces larger than this are not compared around an execution (the
/// scan would cost more than the links are worth).
const MAX_SCANNED: usize = 20_000;

/// A workspace of at most this many entries is walked on the async thread
/// that asks: every execution walks it twice (before and after), and two
/// hand-offs to a blocking thread and back cost more than walking a few
/// dozen entries (0.26 ms of a 1.5 ms back-to-back execution).
const WALKED_IN_PLACE: usize = 64;

/// Each workspace file's (size, modification time), to compare with after
/// an execution; None when the workspace is too large to be worth it.
pub async fn snapshot(state: &Arc<AppState>) -> Option<HashMap<String, (u64, i128)>> {
    let files = match state.workspace.files_if_small(WALKED_IN_PLACE) {
        Ok(Some(files)) => files,
        Ok(None) | Err(_) => {
            let st = state.clone();
            cem_host::blocking(state, move || Ok(st.workspace.files()?))
                .await
                .ok()?
        }
    };
    (files.len() <= MAX_SCANNED).then(|| {
        files
            .into_iter()
            .map(|f| (f.path, (f.size, f.modified_ns)))
            .collect()
    })
}

/// The files created or changed since `before` (path and size, by path),
/// announced to subscribers as they are found.
pub async fn written_since(
    state: &Arc<AppState>,
    before: Option<HashMap<String, (u64, i128)>>,
) -> Vec<Value> {
    let Some(before) = before else {
        return Vec::new();
    };
    let Some(after) = snapshot(state).await else {
        return Vec::new();
    };
    let mut written: Vec<(&String, u64)> = after
        .iter()
        .filter(|(path, stamp)| before.get(*path) != Some(stamp))
        .map(|(path, (size, _))| (path, *size))
        .collect();
    written.sort();
    for path in before.keys().filter(|p| !after.contains_key(*p)) {
        state.changes.announce(Change::WorkspaceFile(path.clone()));
    }
    written
        .into_iter()
        .map(|(path, size)| {
            state.changes.announce(Change::WorkspaceFile(path.clone()));
            json!({"path": path, "size": size})
        })
        .collect()
}
