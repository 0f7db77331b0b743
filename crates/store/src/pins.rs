//! The pinned tool digests of each upstream server, one file per server
//! (`<data dir>/policy/pins/<server>.json`), written atomically.

use std::path::{Path, PathBuf};

use cem_policy::Pins;

#[derive(Debug, thiserror::Error)]
pub enum PinError {
    #[error("cannot read the pins of '{server}' ({path}): {cause}")]
    Read {
        server: String,
        path: PathBuf,
        cause: String,
    },
    #[error("cannot write the pins of '{server}' ({path}): {source}")]
    Write {
        server: String,
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Where pins live.
#[derive(Debug, Clone)]
pub struct PinStore {
    dir: PathBuf,
}

impl PinStore {
    pub fn new(dir: &Path) -> Self {
        PinStore {
            dir: dir.to_path_buf(),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, server: &str) -> PathBuf {
        // Server names are letters, digits, `_` and `-` (the config checks).
        self.dir.join(format!("{server}.json"))
    }

    /// The server's pins; `None` when it was never pinned. A file that
    /// cannot be read or parsed is an error, never "not pinned": that would
    /// trust whatever the server says now.
    pub fn load(&self, server: &str) -> Result<Option<Pins>, PinError> {
        let path = self.path(server);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                return Err(PinError::Read {
                    server: server.into(),
                    path,
                    cause: e.to_string(),
                });
            }
        };
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| PinError::Read {
                server: server.into(),
                path,
                cause: format!(
                    "{e}; fix or delete the file (`policy accept {server}` pins the tools anew)"
                ),
            })
    }

    pub fn save(&self, server: &str, pins: &Pins) -> Result<(), PinError> {
        let path = self.path(server);
        let fail = |source| PinError::Write {
            server: server.into(),
            path: path.clone(),
            source,
        };
        std::fs::create_dir_all(&self.dir).map_err(fail)?;
        let text = serde_json::to_vec_pretty(pins).map_err(|e| fail(std::io::Error::other(e)))?;
        crate::atomic::write(&path, &text).map_err(fail)
    }

    /// The servers that have pins.
    pub fn servers(&self) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut out: Vec<String> = entries
            .filter_map(|e| {
                let name = e.ok()?.file_name().into_string().ok()?;
                Some(name.strip_suffix(".json")?.to_string())
            })
            .filter(|n| !n.starts_with('.'))
            .collect();
        out.sort();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pins_round_trip_and_a_damaged_file_is_an_error() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let store = PinStore::new(&dir.path().join("pins"));
        assert!(matches!(store.load("memory"), Ok(None)));
        let pins =
            Pins::of(&[json!({"name": "create_entities", "description": "d", "inputSchema": {}})]);
        assert!(store.save("memory", &pins).is_ok());
        assert_eq!(store.load("memory").ok().flatten(), Some(pins));
        assert_eq!(store.servers(), ["memory"]);
        let _ = std::fs::write(dir.path().join("pins").join("bad.json"), "{not json");
        let err = store
            .load("bad")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("policy accept bad"), "{err}");
    }
}
