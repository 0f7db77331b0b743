//! Tool lists on disk, keyed by a hash of each server's configuration, so
//! a changed command, URL or credential means a fresh list.

use std::path::{Path, PathBuf};

use cem_config::{ServerConfig, Transport};
use rmcp::model::Tool;
use sha2::{Digest, Sha256};

/// The cache file of `server` under `dir`.
pub fn path(dir: &Path, server: &ServerConfig) -> PathBuf {
    let mut h = Sha256::new();
    match &server.transport {
        Transport::Stdio {
            command,
            args,
            env,
            cwd,
        } => {
            h.update(b"stdio\0");
            h.update(command.as_bytes());
            for a in args {
                h.update(b"\0");
                h.update(a.as_bytes());
            }
            for (k, v) in env {
                h.update(format!("\0{k}={}", v.expose()).as_bytes());
            }
            if let Some(cwd) = cwd {
                h.update(cwd.as_os_str().as_encoded_bytes());
            }
        }
        Transport::Http { url, headers } | Transport::Sse { url, headers } => {
            h.update(server.transport.kind().as_bytes());
            h.update(url.as_str().as_bytes());
            for (k, v) in headers {
                h.update(format!("\0{k}={}", v.expose()).as_bytes());
            }
        }
    }
    let digest = h.finalize();
    let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    dir.join(format!("{}-{hex}.json", server.name))
}

pub fn load(dir: &Path, server: &ServerConfig) -> Option<Vec<Tool>> {
    let text = std::fs::read_to_string(path(dir, server)).ok()?;
    let value: serde_json::Value = serde_json::from_str(&text).ok()?;
    serde_json::from_value(value.get("tools")?.clone()).ok()
}

pub fn store(dir: &Path, server: &ServerConfig, tools: &[Tool]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let target = path(dir, server);
    let body = serde_json::json!({"server": server.name, "tools": tools});
    // A temporary name of its own, then a rename: two tasks (or processes)
    // storing the same server's list cannot interleave.
    let mut tmp = tempfile::Builder::new()
        .prefix(".tools-")
        .tempfile_in(dir)?;
    std::io::Write::write_all(&mut tmp, &serde_json::to_vec(&body)?)?;
    tmp.persist(target).map(drop).map_err(|e| e.error)
}

/// Removes every cached list (for `tools refresh`).
pub fn clear(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let _ = std::fs::remove_file(e.path());
        }
    }
}
