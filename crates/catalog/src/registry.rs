//! The seed's static tool registry: a `tools_registry/` directory holding
//! `full_catalog.json` (categories → tools with description, functions,
//! use_cases, mcp_server) and/or one `<category>/<tool>.json` per tool
//! (name, category, description, functions, usage).

use std::path::Path;

use serde_json::Value;

use crate::{Entry, EntryKind};

#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path} is not valid JSON: {source}")]
    Json {
        path: String,
        source: serde_json::Error,
    },
    #[error("{path}: {message}")]
    Shape { path: String, message: String },
}

/// Loads every registry entry under `dir`. Per-tool files override the
/// same tool from `full_catalog.json`.
pub fn load(dir: &Path) -> Result<Vec<Entry>, RegistryError> {
    let mut entries: Vec<Entry> = Vec::new();
    let full = dir.join("full_catalog.json");
    if full.is_file() {
        let value = read_json(&full)?;
        let Some(categories) = value.get("categories").and_then(Value::as_object) else {
            return Err(RegistryError::Shape {
                path: full.display().to_string(),
                message: "expected {\"categories\": {<name>: {\"tools\": {...}}}}".into(),
            });
        };
        for (category, data) in categories {
            let tools = data.get("tools").and_then(Value::as_object);
            for (name, tool) in tools.into_iter().flatten() {
                entries.push(entry(category, name, tool));
            }
        }
    }
    let Ok(read) = std::fs::read_dir(dir) else {
        return Ok(entries);
    };
    let mut dirs: Vec<_> = read
        .filter_map(Result::ok)
        .filter(|e| e.path().is_dir())
        .collect();
    dirs.sort_by_key(|e| e.file_name());
    for category_dir in dirs {
        let category = category_dir.file_name().to_string_lossy().into_owned();
        let Ok(files) = std::fs::read_dir(category_dir.path()) else {
            continue;
        };
        let mut files: Vec<_> = files
            .filter_map(Result::ok)
            .filter(|f| f.path().extension().is_some_and(|x| x == "json"))
            .collect();
        files.sort_by_key(|f| f.file_name());
        for file in files {
            let value = read_json(&file.path())?;
            let name = value
                .get("name")
                .and_then(Value::as_str)
                .map(str::to_string)
                .unwrap_or_else(|| {
                    file.path()
                        .file_stem()
                        .map(|s| s.to_string_lossy().into_owned())
                        .unwrap_or_default()
                });
            let category = value
                .get("category")
                .and_then(Value::as_str)
                .unwrap_or(&category)
                .to_string();
            entries.retain(|e| !(e.name == name && e.category == category));
            entries.push(entry(&category, &name, &value));
        }
    }
    Ok(entries)
}

fn read_json(path: &Path) -> Result<Value, RegistryError> {
    let text = std::fs::read_to_string(path).map_err(|source| RegistryError::Read {
        path: path.display().to_string(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|source| RegistryError::Json {
        path: path.display().to_string(),
        source,
    })
}

fn strings(value: &Value, key: &str) -> Vec<String> {
    value
        .get(key)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

fn entry(category: &str, name: &str, tool: &Value) -> Entry {
    let mut keywords = strings(tool, "functions");
    keywords.extend(strings(tool, "use_cases"));
    if let Some(usage) = tool.get("usage").and_then(Value::as_str) {
        keywords.push(usage.to_string());
    }
    Entry {
        kind: EntryKind::Registry,
        category: category.to_string(),
        name: name.to_string(),
        description: tool
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        input_schema: None,
        output_schema: None,
        keywords,
        mcp_server: tool
            .get("mcp_server")
            .and_then(Value::as_str)
            .map(str::to_string),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_full_catalog_and_per_tool_files() -> Result<(), Box<dyn std::error::Error>> {
        let dir = std::env::temp_dir().join(format!("cem-registry-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("security"))?;
        std::fs::write(
            dir.join("full_catalog.json"),
            r#"{"categories": {"security": {"description": "Security", "tools": {
                "crypto_tools": {"name": "crypto_tools", "mcp_server": "crypto-tools", "description": "Classical ciphers",
                                 "functions": ["caesar_crack"], "use_cases": ["CTF challenges"]}}},
                "media": {"tools": {"image_gen": {"description": "AI image generation", "functions": ["generate_image"]}}}}}"#,
        )?;
        std::fs::write(
            dir.join("security/crypto_tools.json"),
            r#"{"name": "crypto_tools", "category": "security", "description": "Classical cryptography tools", "functions": ["xor_cipher"]}"#,
        )?;
        let entries = load(&dir)?;
        std::fs::remove_dir_all(&dir)?;
        assert_eq!(
            entries.len(),
            2,
            "the per-tool file replaces the catalog's entry"
        );
        let crypto = entries
            .iter()
            .find(|e| e.name == "crypto_tools")
            .ok_or("missing")?;
        assert_eq!(crypto.description, "Classical cryptography tools");
        let catalog = crate::Catalog::new(entries);
        let hit = catalog.search("xor cipher", None, 1);
        assert_eq!(catalog.entries()[hit[0].index].name, "crypto_tools");
        let hit = catalog.search("generate an image", None, 1);
        assert_eq!(catalog.entries()[hit[0].index].name, "image_gen");
        Ok(())
    }
}
