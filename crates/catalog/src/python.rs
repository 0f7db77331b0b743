//! Python views of a tool: safe identifiers, a typed signature, an example
//! call, and the generated wrapper module and stub.

use serde_json::Value;

use crate::Entry;
use crate::typed::Types;

/// A Python identifier for a name (`get-sum` → `get_sum`, `2fa` → `_2fa`,
/// `class` → `class_`): one definition, shared with the policy, whose rules
/// match the names code uses.
pub use cem_policy::{is_keyword, python_name as alias};

/// One parameter of a tool, from its input schema.
pub struct Param {
    pub name: String,
    pub alias: String,
    pub ty: String,
    pub required: bool,
    pub description: Option<String>,
    /// Description, default and bounds on one line (empty when none).
    pub note: String,
}

/// A tool's schemas rendered once as Python: what the definition, the
/// wrapper module and the stub are written from.
struct Rendering {
    /// Required ones first, in schema order.
    params: Vec<Param>,
    returns: String,
    /// The `TypedDict` definitions the parameters and the result name.
    classes: String,
}

impl Rendering {
    fn of(entry: &Entry) -> Self {
        let (params, mut types) = typed_params(entry);
        // The output schema's own `$defs` are its references' root.
        let returns = match &entry.output_schema {
            Some(schema) => types.of_rooted(schema, schema, &format!("{}_result", entry.name)),
            None => "Any".into(),
        };
        Rendering {
            params,
            returns,
            classes: types.source(),
        }
    }

    /// `def git_log(*, repo_path: str, max_count: int | None = None) -> Any`
    fn signature(&self, entry: &Entry) -> String {
        let args: Vec<String> = self
            .params
            .iter()
            .map(|p| {
                let nullable = p.ty.split(" | ").any(|t| t == "None");
                if p.required {
                    format!("{}: {}", p.alias, p.ty)
                } else if nullable {
                    format!("{}: {} = None", p.alias, p.ty)
                } else {
                    format!("{}: {} | None = None", p.alias, p.ty)
                }
            })
            .collect();
        let star = if args.is_empty() { "" } else { "*, " };
        format!(
            "def {}({star}{}) -> {}",
            alias(&entry.name),
            args.join(", "),
            self.returns
        )
    }
}

/// The parameters with their types, and the renderer holding the classes
/// (TypedDicts) those types use.
fn typed_params(entry: &Entry) -> (Vec<Param>, Types) {
    let empty = Value::Null;
    let schema = entry.input_schema.as_ref();
    let mut types = Types::new(schema.unwrap_or(&empty));
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
                    ty: types.of(prop, name),
                    required: required.contains(&name.as_str()),
                    description: prop
                        .get("description")
                        .and_then(Value::as_str)
                        .map(str::to_string),
                    note: crate::typed::comment(prop),
                })
                .collect()
        })
        .unwrap_or_default();
    // `foo_bar` and `foo-bar` are both `foo_bar` in Python: a signature with
    // it twice would not compile, and the server's whole package would fail
    // to import. A name that is already Python keeps it; the others get
    // `_2`, `_3`; the wrapper's own names are taken.
    let mut taken: std::collections::HashSet<String> =
        WRAPPER_NAMES.iter().map(|n| n.to_string()).collect();
    let (as_is, renamed): (Vec<&mut Param>, Vec<&mut Param>) =
        out.iter_mut().partition(|p| p.alias == p.name);
    for p in as_is.into_iter().chain(renamed) {
        let mut candidate = p.alias.clone();
        let mut n = 2;
        while !taken.insert(candidate.clone()) {
            candidate = format!("{}_{n}", p.alias);
            n += 1;
        }
        p.alias = candidate;
    }
    out.sort_by_key(|p| !p.required);
    (out, types)
}

/// The names a generated wrapper uses itself, which no parameter may take.
const WRAPPER_NAMES: &[&str] = &["_cem_call_tool", "_cem_arguments"];

/// The tool's signature and the `TypedDict`s it names, as Python source.
pub struct Typed {
    pub signature: String,
    /// Class definitions (empty when every type is built in).
    pub classes: String,
    /// `name: description; default ...`, a line per argument that has one.
    pub args: String,
    /// A call with placeholder values for the required parameters.
    pub example: String,
}

/// The typed signature of a tool with the classes its types use.
pub fn typed(entry: &Entry) -> Typed {
    let rendering = Rendering::of(entry);
    let params = &rendering.params;
    // An argument whose name is not an identifier is shown by its alias;
    // call_tool needs the real key, so that line names it.
    let args: Vec<String> = params
        .iter()
        .filter(|p| !p.note.is_empty() || p.alias != p.name)
        .map(|p| {
            let key = if p.alias == p.name {
                String::new()
            } else {
                format!(" (key {:?})", p.name)
            };
            let note = if p.note.is_empty() {
                String::new()
            } else {
                format!(": {}", p.note)
            };
            format!("{}{key}{note}", p.alias)
        })
        .collect();
    Typed {
        signature: rendering.signature(entry),
        example: example(entry, params),
        args: args.join("\n"),
        classes: rendering.classes,
    }
}

/// An example call with placeholder values for the required parameters.
fn example(entry: &Entry, params: &[Param]) -> String {
    let args: Vec<String> = params
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
        t if t.starts_with("dict") => "{}",
        // A TypedDict's name: a dict too.
        t if t.starts_with(|c: char| c.is_ascii_uppercase())
            && !t.starts_with("Any")
            && !t.starts_with("Literal") =>
        {
            "{}"
        }
        _ => "None",
    }
}

/// Text safe inside a `"""` docstring.
fn in_docstring(text: &str) -> String {
    text.replace('\\', "\\\\").replace("\"\"\"", "'''")
}

/// The description, the arguments and, when the types name classes, their
/// definitions (a wrapper's reader learns a nested argument's shape there).
fn docstring(entry: &Entry, params: &[Param], classes: &str) -> String {
    let mut doc = in_docstring(entry.description.trim());
    if !params.is_empty() {
        doc.push_str("\n\nArgs:");
        for p in params {
            let desc = in_docstring(p.description.as_deref().unwrap_or(""));
            let opt = if p.required { "" } else { ", optional" };
            doc.push_str(&format!(
                "\n    {} ({}{opt}): {}",
                p.alias,
                p.ty,
                desc.trim()
            ));
        }
    }
    if !classes.is_empty() {
        doc.push_str("\n\nTypes:\n");
        for line in in_docstring(classes).lines() {
            doc.push_str("\n    ");
            doc.push_str(line);
        }
    }
    doc
}

/// The generated module `servers/<server>/<tool>.py`.
pub fn wrapper_module(entry: &Entry) -> String {
    let rendering = Rendering::of(entry);
    let params = &rendering.params;
    let fn_name = alias(&entry.name);
    let mut body = String::new();
    // Its own names cannot be a parameter's (see `WRAPPER_NAMES`): a tool
    // may well have an `arguments` parameter.
    body.push_str("    _cem_arguments = {}\n");
    for p in params {
        if p.required {
            body.push_str(&format!("    _cem_arguments[{:?}] = {}\n", p.name, p.alias));
        } else {
            body.push_str(&format!(
                "    if {} is not None:\n        _cem_arguments[{:?}] = {}\n",
                p.alias, p.name, p.alias
            ));
        }
    }
    format!(
        "# Generated by code-execution-mcp from the tool's schema; regenerate rather than edit.\n\
         # Annotations are not evaluated: the TypedDicts they name are in the\n\
         # docstring and in the .pyi stub.\n\
         from __future__ import annotations\n\n\
         from typing import Any, Literal\n\n\
         from cem_tools import call_tool as _cem_call_tool\n\n\n\
         {sig}:\n    \"\"\"{doc}\n    \"\"\"\n{body}    return _cem_call_tool({qualified:?}, _cem_arguments)\n\n\n\
         __all__ = [{fn_name:?}]\n",
        sig = rendering.signature(entry),
        doc = docstring(entry, params, &rendering.classes),
        qualified = format!("{}.{}", entry.category, entry.name),
    )
}

/// The stub `servers/<server>/<tool>.pyi`.
pub fn stub(entry: &Entry) -> String {
    let rendering = Rendering::of(entry);
    let classes = if rendering.classes.is_empty() {
        String::new()
    } else {
        format!("{}\n\n", rendering.classes)
    };
    format!(
        "from typing import Any, Literal, NotRequired, TypedDict\n\n{classes}{}:\n    \"\"\"{}\n    \"\"\"\n    ...\n",
        rendering.signature(entry),
        docstring(entry, &rendering.params, "")
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
            ..Default::default()
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
            typed(&e).signature,
            "def get_sum(*, b: float, a: float, mode: Literal[\"fast\", \"exact\"] | None = None, class_: list[str] | None = None) -> Any"
        );
        assert_eq!(typed(&e).example, "get_sum(b=1.0, a=1.0)");
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
        assert!(module.contains("_cem_call_tool(\"everything.get-sum\", _cem_arguments)"));
        assert!(module.contains("_cem_arguments[\"class\"] = class_"));
        Ok(())
    }

    /// Parameters that are one Python name (`foo_bar`, `foo-bar`) or that a
    /// naive wrapper would use itself (`arguments`, `call_tool`) each reach
    /// the tool under their own key.
    #[test]
    fn colliding_parameter_names_each_get_their_own() -> Result<(), Box<dyn std::error::Error>> {
        let e = Entry {
            name: "run_cmd".into(),
            input_schema: Some(json!({
                "type": "object",
                "properties": {
                    "foo-bar": {"type": "integer"}, "foo_bar": {"type": "integer"},
                    "arguments": {"type": "array"}, "call_tool": {"type": "string"},
                    "_cem_arguments": {"type": "string"}
                },
                "required": ["foo_bar"]
            })),
            ..entry()
        };
        let dir = tempfile::tempdir()?;
        std::fs::write(dir.path().join("run_cmd.py"), wrapper_module(&e))?;
        std::fs::write(
            dir.path().join("cem_tools.py"),
            "def call_tool(name, arguments):\n    return name, arguments\n",
        )?;
        let check = format!(
            "import sys; sys.path.insert(0, {dir:?})\n\
             from run_cmd import run_cmd\n\
             got = run_cmd(foo_bar=1, foo_bar_2=2, arguments=[3], call_tool='x', _cem_arguments_2='y')\n\
             assert got == ('everything.run_cmd', {{'foo_bar': 1, 'foo-bar': 2, 'arguments': [3], 'call_tool': 'x', '_cem_arguments': 'y'}}), got\n",
            dir = dir.path().to_string_lossy()
        );
        assert!(python_accepts(
            "import sys; exec(sys.stdin.read())",
            &check
        )?);
        Ok(())
    }

    /// Runs `code` with /usr/bin/python3 -c `runner` (the code on stdin).
    fn python_accepts(runner: &str, code: &str) -> Result<bool, Box<dyn std::error::Error>> {
        use std::io::Write;
        let mut child = std::process::Command::new("/usr/bin/python3")
            .args(["-c", runner])
            .stdin(std::process::Stdio::piped())
            .spawn()?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin.write_all(code.as_bytes())?;
        }
        Ok(child.wait()?.success())
    }

    /// Nested arguments and the result are typed with TypedDicts: the stub
    /// defines them (and runs), the wrapper names them in its signature and
    /// shows them in its docstring.
    #[test]
    fn nested_types_in_stub_and_wrapper() -> Result<(), Box<dyn std::error::Error>> {
        let e = Entry {
            name: "add_edges".into(),
            input_schema: Some(json!({
                "type": "object",
                "properties": {"edges": {"type": "array", "items": {"type": "object",
                    "properties": {"from": {"type": "string"}, "weight": {"type": "number", "default": 1}},
                    "required": ["from"]}}},
                "required": ["edges"]
            })),
            output_schema: Some(json!({
                "type": "object",
                "properties": {"added": {"type": "integer"}},
                "required": ["added"]
            })),
            ..entry()
        };
        assert_eq!(
            typed(&entry()).args,
            "b: Second\na: First\nclass_ (key \"class\")"
        );
        let typed = typed(&e);
        assert_eq!(
            typed.signature,
            "def add_edges(*, edges: list[Edge]) -> AddEdgesResult"
        );
        assert_eq!(typed.example, "add_edges(edges=[])");
        // A required object argument typed as a TypedDict still gets a dict.
        let options = Entry {
            input_schema: Some(json!({
                "type": "object",
                "properties": {"options": {"type": "object", "properties": {"x": {"type": "string"}}}},
                "required": ["options"]
            })),
            ..entry()
        };
        assert_eq!(super::typed(&options).example, "get_sum(options={})");
        // An optional argument that is already nullable says None once.
        let nullable = Entry {
            input_schema: Some(json!({
                "type": "object",
                "properties": {"since": {"anyOf": [{"type": "string"}, {"type": "null"}]}}
            })),
            ..entry()
        };
        assert_eq!(
            super::typed(&nullable).signature,
            "def get_sum(*, since: str | None = None) -> Any"
        );
        let stub = stub(&e);
        let check = "import sys; ns = {}; exec(sys.stdin.read(), ns); \
                     assert ns['Edge'].__required_keys__ == {'from'}; \
                     assert ns['Edge'].__optional_keys__ == {'weight'}";
        assert!(python_accepts(check, &stub)?, "{stub}");
        let module = wrapper_module(&e);
        assert!(python_accepts(
            "import ast, sys; ast.parse(sys.stdin.read())",
            &module
        )?);
        assert!(module.contains("from __future__ import annotations"));
        assert!(
            module.contains("    Edge = TypedDict(\"Edge\", {"),
            "{module}"
        );
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
