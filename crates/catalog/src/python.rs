//! Python views of a tool: safe identifiers, a typed signature, an example
//! call, and the generated wrapper module and stub.

use serde_json::Value;

use crate::Entry;

const KEYWORDS: &[&str] = &[
    "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue",
    "def", "del", "elif", "else", "except", "finally", "for", "from", "global", "if", "import",
    "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try", "while",
    "with", "yield", "match", "case", "type",
];

/// A Python identifier for `name`: `get-sum` → `get_sum`, `2fa` → `_2fa`,
/// `class` → `class_`.
pub fn alias(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.is_empty() || out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    if KEYWORDS.contains(&out.as_str()) {
        out.push('_');
    }
    out
}

/// One parameter of a tool, from its input schema.
pub struct Param {
    pub name: String,
    pub alias: String,
    pub ty: String,
    pub required: bool,
    pub description: Option<String>,
}

/// The parameters, required ones first, in schema order.
pub fn params(entry: &Entry) -> Vec<Param> {
    let schema = entry.input_schema.as_ref();
    let required: Vec<&str> = schema
        .and_then(|s| s.get("required"))
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut out: Vec<Param> = schema
        .and_then(|s| s.get("properties"))
        .and_then(Value::as_object)
        .map(|props| {
            props
                .iter()
                .map(|(name, prop)| Param {
                    name: name.clone(),
                    alias: alias(name),
                    ty: py_type(prop),
                    required: required.contains(&name.as_str()),
                    description: prop
                        .get("description")
                        .and_then(Value::as_str)
                        .map(str::to_string),
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort_by_key(|p| !p.required);
    out
}

/// The Python type of a JSON schema.
pub fn py_type(schema: &Value) -> String {
    if let Some(options) = schema
        .get("anyOf")
        .or_else(|| schema.get("oneOf"))
        .and_then(Value::as_array)
    {
        let mut types: Vec<String> = options.iter().map(py_type).collect();
        types.dedup();
        return types.join(" | ");
    }
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        let literals: Vec<String> = values.iter().map(|v| v.to_string()).collect();
        return format!("Literal[{}]", literals.join(", "));
    }
    match schema.get("type") {
        Some(Value::String(t)) => simple_type(t, schema),
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .map(|t| simple_type(t, schema))
            .collect::<Vec<_>>()
            .join(" | "),
        _ => "Any".to_string(),
    }
}

fn simple_type(t: &str, schema: &Value) -> String {
    match t {
        "string" => "str".into(),
        "integer" => "int".into(),
        "number" => "float".into(),
        "boolean" => "bool".into(),
        "null" => "None".into(),
        "array" => match schema.get("items") {
            Some(items) => format!("list[{}]", py_type(items)),
            None => "list".into(),
        },
        "object" => "dict".into(),
        _ => "Any".into(),
    }
}

/// `def git_log(repo_path: str, max_count: int | None = None) -> Any`
pub fn signature(entry: &Entry) -> String {
    let args: Vec<String> = params(entry)
        .iter()
        .map(|p| {
            if p.required {
                format!("{}: {}", p.alias, p.ty)
            } else {
                format!("{}: {} | None = None", p.alias, p.ty)
            }
        })
        .collect();
    let star = if args.iter().any(|a| !a.is_empty()) {
        "*, "
    } else {
        ""
    };
    format!(
        "def {}({star}{}) -> Any",
        alias(&entry.name),
        args.join(", ")
    )
}

/// An example call with placeholder values for the required parameters.
pub fn example(entry: &Entry) -> String {
    let args: Vec<String> = params(entry)
        .iter()
        .filter(|p| p.required)
        .map(|p| format!("{}={}", p.alias, placeholder(&p.ty)))
        .collect();
    format!("{}({})", alias(&entry.name), args.join(", "))
}

fn placeholder(ty: &str) -> &'static str {
    match ty.split(" | ").next().unwrap_or("") {
        "str" => "\"...\"",
        "int" => "1",
        "float" => "1.0",
        "bool" => "True",
        t if t.starts_with("list") => "[]",
        "dict" => "{}",
        _ => "None",
    }
}

fn docstring(entry: &Entry) -> String {
    let mut doc = entry
        .description
        .trim()
        .replace("\"\"\"", "'''")
        .replace('\\', "\\\\");
    let params = params(entry);
    if !params.is_empty() {
        doc.push_str("\n\nArgs:");
        for p in &params {
            let desc = p
                .description
                .as_deref()
                .unwrap_or("")
                .replace("\"\"\"", "'''")
                .replace('\\', "\\\\");
            let opt = if p.required { "" } else { ", optional" };
            doc.push_str(&format!(
                "\n    {} ({}{opt}): {}",
                p.alias,
                p.ty,
                desc.trim()
            ));
        }
    }
    doc
}

/// The generated module `servers/<server>/<tool>.py`.
pub fn wrapper_module(entry: &Entry) -> String {
    let params = params(entry);
    let fn_name = alias(&entry.name);
    let mut body = String::new();
    body.push_str("    arguments = {}\n");
    for p in &params {
        if p.required {
            body.push_str(&format!("    arguments[{:?}] = {}\n", p.name, p.alias));
        } else {
            body.push_str(&format!(
                "    if {} is not None:\n        arguments[{:?}] = {}\n",
                p.alias, p.name, p.alias
            ));
        }
    }
    format!(
        "# Generated by code-execution-mcp from the tool's schema; regenerate rather than edit.\n\
         from typing import Any, Literal\n\n\
         from cem_tools import call_tool\n\n\n\
         {sig}:\n    \"\"\"{doc}\n    \"\"\"\n{body}    return call_tool({qualified:?}, arguments)\n\n\n\
         __all__ = [{fn_name:?}]\n",
        sig = signature(entry),
        doc = docstring(entry),
        qualified = format!("{}.{}", entry.category, entry.name),
    )
}

/// The stub `servers/<server>/<tool>.pyi`.
pub fn stub(entry: &Entry) -> String {
    format!(
        "from typing import Any, Literal\n\n{}:\n    \"\"\"{}\n    \"\"\"\n    ...\n",
        signature(entry),
        docstring(entry)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::EntryKind;
    use serde_json::json;

    fn entry() -> Entry {
        Entry {
            kind: EntryKind::Upstream,
            category: "everything".into(),
            name: "get-sum".into(),
            description: "Returns the sum of two numbers".into(),
            input_schema: Some(json!({
                "type": "object",
                "properties": {
                    "b": {"type": "number", "description": "Second"},
                    "a": {"type": "number", "description": "First"},
                    "mode": {"type": "string", "enum": ["fast", "exact"]},
                    "class": {"type": "array", "items": {"type": "string"}}
                },
                "required": ["a", "b"]
            })),
            output_schema: None,
            keywords: vec![],
            mcp_server: None,
        }
    }

    #[test]
    fn aliases_are_identifiers() {
        assert_eq!(alias("get-sum"), "get_sum");
        assert_eq!(alias("2fa.check"), "_2fa_check");
        assert_eq!(alias("class"), "class_");
    }

    #[test]
    fn signature_and_example() {
        let e = entry();
        assert_eq!(
            signature(&e),
            "def get_sum(*, b: float, a: float, mode: Literal[\"fast\", \"exact\"] | None = None, class_: list[str] | None = None) -> Any"
        );
        assert_eq!(example(&e), "get_sum(b=1.0, a=1.0)");
    }

    #[test]
    fn wrapper_compiles_as_python() -> Result<(), Box<dyn std::error::Error>> {
        let module = wrapper_module(&entry());
        let out = std::process::Command::new("/usr/bin/python3")
            .args(["-c", "import ast, sys; ast.parse(sys.stdin.read())"])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut child| {
                use std::io::Write;
                if let Some(mut stdin) = child.stdin.take() {
                    stdin.write_all(module.as_bytes())?;
                }
                child.wait()
            })?;
        assert!(out.success(), "{module}");
        assert!(module.contains("call_tool(\"everything.get-sum\", arguments)"));
        assert!(module.contains("arguments[\"class\"] = class_"));
        Ok(())
    }

    /// Two processes (the CLI and `serve`) may write the same wrappers at
    /// once: no writer fails and every file is one writer's whole version.
    #[test]
    fn concurrent_writers_neither_fail_nor_tear() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let versions: Vec<Entry> = ["first version", "second version"]
            .iter()
            .map(|d| Entry {
                description: d.repeat(500),
                ..entry()
            })
            .collect();
        std::thread::scope(|scope| {
            let writers: Vec<_> = (0..4)
                .map(|w| {
                    let (versions, out) = (&versions, dir.path());
                    scope.spawn(move || -> std::io::Result<()> {
                        for i in 0..40 {
                            write_wrappers(&[&versions[(w + i) % 2]], out, &mut |_, _| {})?;
                        }
                        Ok(())
                    })
                })
                .collect();
            for w in writers {
                match w.join() {
                    Ok(written) => written?,
                    Err(_) => return Err("a writer panicked".into()),
                }
            }
            Ok::<(), Box<dyn std::error::Error>>(())
        })?;
        let server = dir.path().join("servers").join("everything");
        let module = std::fs::read_to_string(server.join("get_sum.py"))?;
        assert!(
            versions.iter().any(|v| wrapper_module(v) == module),
            "a torn wrapper: {module}"
        );
        let stub_file = std::fs::read_to_string(server.join("get_sum.pyi"))?;
        assert!(versions.iter().any(|v| stub(v) == stub_file));
        let leftovers: Vec<_> = std::fs::read_dir(&server)?
            .flatten()
            .map(|f| f.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(".gen-"))
            .collect();
        assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
        Ok(())
    }
}

/// What [`write_wrappers`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Generated {
    pub servers: usize,
    pub tools: usize,
    /// Files written because they were new or changed.
    pub written: usize,
    /// Generated files removed because their tool is gone.
    pub removed: usize,
}

/// Marker of a directory we generated (and may prune).
const MARKER: &str = ".generated-by-code-execution-mcp";

/// Writes `servers/<server>/{__init__.py, <tool>.py, <tool>.pyi}` under
/// `out` for the upstream entries, leaving unchanged files untouched (so a
/// second run writes nothing). `progress` is told (done, total).
pub fn write_wrappers(
    entries: &[&Entry],
    out: &std::path::Path,
    progress: &mut dyn FnMut(usize, usize),
) -> std::io::Result<Generated> {
    use std::collections::BTreeMap;
    let root = out.join("servers");
    std::fs::create_dir_all(&root)?;
    let mut by_server: BTreeMap<String, Vec<&Entry>> = BTreeMap::new();
    for e in entries {
        by_server.entry(alias(&e.category)).or_default().push(e);
    }
    let mut stats = Generated {
        servers: by_server.len(),
        ..Default::default()
    };
    let total = entries.len();
    let mut done = 0;
    let mut root_init = String::from(
        "\"\"\"Generated wrappers of the upstream MCP servers' tools.\"\"\"\n\n__all__ = [\n",
    );
    for (server, tools) in &by_server {
        root_init.push_str(&format!("    {server:?},\n"));
        let dir = root.join(server);
        std::fs::create_dir_all(&dir)?;
        write_if_changed(&dir.join(MARKER), "", &mut stats)?;
        let mut keep: Vec<String> = vec![MARKER.into(), "__init__.py".into()];
        let mut init = format!(
            "\"\"\"Tools of the '{}' MCP server.\"\"\"\n\n",
            tools[0].category
        );
        let mut names = Vec::new();
        for entry in tools {
            let module = alias(&entry.name);
            write_if_changed(
                &dir.join(format!("{module}.py")),
                &wrapper_module(entry),
                &mut stats,
            )?;
            write_if_changed(&dir.join(format!("{module}.pyi")), &stub(entry), &mut stats)?;
            keep.push(format!("{module}.py"));
            keep.push(format!("{module}.pyi"));
            init.push_str(&format!("from .{module} import {module}\n"));
            names.push(format!("{module:?}"));
            stats.tools += 1;
            done += 1;
            progress(done, total);
        }
        init.push_str(&format!("\n__all__ = [{}]\n", names.join(", ")));
        write_if_changed(&dir.join("__init__.py"), &init, &mut stats)?;
        for old in std::fs::read_dir(&dir)?.flatten() {
            let name = old.file_name().to_string_lossy().into_owned();
            if !keep.contains(&name)
                && (name.ends_with(".py") || name.ends_with(".pyi"))
                && remove_generated(&old.path(), false)?
            {
                stats.removed += 1;
            }
        }
    }
    root_init.push_str("]\n");
    write_if_changed(&root.join("__init__.py"), &root_init, &mut stats)?;
    // Servers no longer configured: remove the directories we generated.
    for old in std::fs::read_dir(&root)?.flatten() {
        let name = old.file_name().to_string_lossy().into_owned();
        if old.path().join(MARKER).is_file()
            && !by_server.contains_key(&name)
            && remove_generated(&old.path(), true)?
        {
            stats.removed += 1;
        }
    }
    Ok(stats)
}

fn write_if_changed(
    path: &std::path::Path,
    content: &str,
    stats: &mut Generated,
) -> std::io::Result<()> {
    if std::fs::read_to_string(path).ok().as_deref() == Some(content) {
        return Ok(());
    }
    // A temporary name of its own in the same directory, then a rename:
    // readers (a sandbox importing the module) see the old file or the new
    // one, and another process writing the same wrappers (the CLI while
    // `serve` runs) cannot interleave with this one.
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;
    let dir = path.parent().unwrap_or_else(|| std::path::Path::new("."));
    let mut tmp = tempfile::Builder::new()
        .prefix(".gen-")
        // World-readable like the runtime: the sandbox may run as another uid.
        .permissions(std::fs::Permissions::from_mode(0o644))
        .tempfile_in(dir)?;
    tmp.write_all(content.as_bytes())?;
    tmp.persist(path).map_err(|e| e.error)?;
    stats.written += 1;
    Ok(())
}

/// Removes a generated file or directory; one already gone (removed by
/// another process pruning the same wrappers) is not an error.
fn remove_generated(path: &std::path::Path, dir: bool) -> std::io::Result<bool> {
    let removed = if dir {
        std::fs::remove_dir_all(path)
    } else {
        std::fs::remove_file(path)
    };
    match removed {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}
