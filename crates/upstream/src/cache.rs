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

/// The longest `instructions` kept: they are searched beside every tool of
/// their server, and a server is free to send a book.
const MAX_INSTRUCTIONS: usize = 8 * 1024;

/// `text` cut to [`MAX_INSTRUCTIONS`] bytes, at a character boundary.
pub fn bounded_instructions(text: &str) -> std::sync::Arc<str> {
    let mut end = text.len().min(MAX_INSTRUCTIONS);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    std::sync::Arc::from(&text[..end])
}

fn read(dir: &Path, server: &ServerConfig) -> Option<serde_json::Value> {
    let text = std::fs::read_to_string(path(dir, server)).ok()?;
    serde_json::from_str(&text).ok()
}

pub fn load(dir: &Path, server: &ServerConfig) -> Option<Vec<Tool>> {
    serde_json::from_value(read(dir, server)?.get("tools")?.clone()).ok()
}

/// The server's `instructions` stored with its tools, if it gave any.
pub fn load_instructions(dir: &Path, server: &ServerConfig) -> Option<String> {
    let value = read(dir, server)?;
    value
        .get("instructions")?
        .as_str()
        .map(|text| bounded_instructions(text).to_string())
}

pub fn store(
    dir: &Path,
    server: &ServerConfig,
    tools: &[Tool],
    instructions: Option<&str>,
) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let target = path(dir, server);
    let body =
        serde_json::json!({"server": server.name, "tools": tools, "instructions": instructions});
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instructions_are_kept_with_the_tools_and_bounded() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let server = ServerConfig {
            name: "s".into(),
            transport: Transport::Stdio {
                command: "true".into(),
                args: vec![],
                env: Default::default(),
                cwd: None,
            },
            disabled: false,
            timeout_seconds: None,
            shared: false,
            auth: Default::default(),
            oauth: Default::default(),
        };
        store(dir.path(), &server, &[], Some("Use search before read."))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            load_instructions(dir.path(), &server).as_deref(),
            Some("Use search before read.")
        );
        assert_eq!(load(dir.path(), &server).map(|t| t.len()), Some(0));
        store(dir.path(), &server, &[], None).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(load_instructions(dir.path(), &server), None);
        let long = "é".repeat(MAX_INSTRUCTIONS);
        let cut = bounded_instructions(&long);
        assert!(cut.len() <= MAX_INSTRUCTIONS && cut.chars().all(|c| c == 'é'));
    }
}
