//! Python views of a tool: safe identifiers, a typed signature, an example
//! call, and the generated wrapper module and stub.

use serde_json::Value;

use crate::Entry;
pub use crate::source::{clean_text, string_literal};
use crate::typed::Types;

/// A Python identifier for a name (`get-sum` → `get_sum`, `2fa` → `_2fa`,
/// `class` → `class_`): one definition, shared with the policy, whose rules
/// match the names code uses.
pub use cem_policy::{is_keyword, python_name as alias};

/// The longest module, function or parameter name written as is: any name
/// the MCP spec allows (128 characters) fits, and `<name>.pyi` stays far
/// below the 255 bytes a file name may have (a 300-character tool name
/// failed with ENAMETOOLONG and stopped every server's wrappers after it).
const MAX_NAME: usize = 128;
/// Hex digits of the name's hash a bounded name ends with.
const HASH_DIGITS: usize = 8;

/// The Python name of a tool's module and function, or of a server's
/// package: [`alias`] when that is an ordinary spelling of the name (`get-sum`
/// → `get_sum`, `2fa` → `_2fa`, as always); otherwise a cut of it plus a
/// hash of the whole name (`_` and 8 hex digits), stable across runs and
/// distinct for distinct names. Otherwise means: longer than [`MAX_NAME`],
/// with characters beyond ASCII letters, digits and `_-./: ` (any of which
/// could make two names one), with no letter or digit at all, or a name the
/// package itself needs (`__init__`, the wrapper's `_cem_call_tool`).
pub fn module_name(name: &str) -> String {
    bounded(name, "tool", reserved)
}

/// A parameter's Python name, by the same rule as [`module_name`] (`arg_`
/// plus the hash for a name of symbols only). A parameter may be called
/// anything else: one named like the wrapper's own names gets `_2` (see
/// [`typed_params`]), as always.
fn param_name(name: &str) -> String {
    bounded(name, "arg", |_| false)
}

fn bounded(name: &str, fallback: &str, reserved: fn(&str) -> bool) -> String {
    let base = alias(name);
    let ordinary = name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/' | ':' | ' '))
        && name.chars().any(|c| c.is_ascii_alphanumeric());
    if ordinary && base.len() <= MAX_NAME && !reserved(&base) {
        return base;
    }
    // `alias` is ASCII, so any byte is a char boundary.
    let room = MAX_NAME - 1 - HASH_DIGITS;
    let cut = base[..base.len().min(room)].trim_end_matches('_');
    let stem = if cut.chars().any(|c| c.is_ascii_alphanumeric()) {
        cut
    } else {
        fallback
    };
    format!("{stem}_{}", short_hash(name))
}

/// Names a generated package must keep for itself: a tool called
/// `__init__` would replace the package's own module, one called
/// `_cem_call_tool` would shadow the function every wrapper calls.
fn reserved(name: &str) -> bool {
    (name.len() > 4 && name.starts_with("__") && name.ends_with("__"))
        || WRAPPER_NAMES.contains(&name)
        || ["Any", "Literal", "NotRequired", "TypedDict"].contains(&name)
}

fn short_hash(name: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(name.as_bytes());
    digest
        .iter()
        .take(HASH_DIGITS / 2)
        .map(|b| format!("{b:02x}"))
        .collect()
}

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
            module_name(&entry.name),
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
                    alias: param_name(name),
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
                format!(" (key {})", string_literal(&p.name))
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
    format!("{}({})", module_name(&entry.name), args.join(", "))
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

/// Text safe inside a `"""` docstring: cleaned (see [`clean_text`]), every
/// backslash doubled (so none escapes the closing quotes or makes a bad
/// escape), and every `"` after a `"` escaped, so no run of three closes it.
fn in_docstring(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in clean_text(text, true).chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' if out.ends_with('"') => out.push_str("\\\""),
            c => out.push(c),
        }
    }
    out
}

/// The description, the arguments and, when the types name classes, their
/// definitions (a wrapper's reader learns a nested argument's shape there).
fn docstring(entry: &Entry, params: &[Param], classes: &str) -> String {
    let mut doc = in_docstring(entry.description.trim());
    if !params.is_empty() {
        doc.push_str("\n\nArgs:");
        for p in params {
            let desc = clean_text(p.description.as_deref().unwrap_or(""), true);
            let opt = if p.required { "" } else { ", optional" };
            // The type may hold literals (`Literal["a\\x00"]`): escaped too.
            let line = format!("{} ({}{opt}): {}", p.alias, p.ty, desc.trim());
            doc.push_str("\n    ");
            doc.push_str(&in_docstring(&line));
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
    let fn_name = module_name(&entry.name);
    let mut body = String::new();
    // Its own names cannot be a parameter's (see `WRAPPER_NAMES`): a tool
    // may well have an `arguments` parameter.
    body.push_str("    _cem_arguments = {}\n");
    for p in params {
        if p.required {
            body.push_str(&format!(
                "    _cem_arguments[{}] = {}\n",
                string_literal(&p.name),
                p.alias
            ));
        } else {
            body.push_str(&format!(
                "    if {} is not None:\n        _cem_arguments[{}] = {}\n",
                p.alias,
                string_literal(&p.name),
                p.alias
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
         {sig}:\n    \"\"\"{doc}\n    \"\"\"\n{body}    return _cem_call_tool({qualified}, _cem_arguments)\n\n\n\
         __all__ = [{all}]\n",
        sig = rendering.signature(entry),
        doc = docstring(entry, params, &rendering.classes),
        qualified = string_literal(&entry.qualified_name()),
        all = string_literal(&fn_name),
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

    pub(super) fn entry() -> Entry {
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
    pub(super) fn python_accepts(
        runner: &str,
        code: &str,
    ) -> Result<bool, Box<dyn std::error::Error>> {
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
                            write_wrappers(
                                &[&versions[(w + i) % 2]],
                                out,
                                std::path::Path::new("/usr/bin/python3"),
                                &mut |_, _| {},
                            )?;
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

/// A tool or a server the wrappers leave out, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// The server's own name.
    pub server: String,
    /// The tool's own name; `None` when the whole server is left out.
    pub tool: Option<String>,
    pub reason: String,
}

/// What [`write_wrappers`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Generated {
    /// Servers whose package was written (or was already up to date).
    pub servers: usize,
    /// Tools whose module was written (or was already up to date).
    pub tools: usize,
    /// Files written because they were new or changed.
    pub written: usize,
    /// Generated files removed because their tool is gone.
    pub removed: usize,
    /// Tools and servers left out: each is for the caller to log.
    pub skipped: Vec<Skipped>,
    /// Set when the interpreter could not be run to check the modules, and
    /// they were installed unchecked: why.
    pub unchecked: Option<String>,
}

/// Marker of a directory we generated (and may prune).
const MARKER: &str = ".generated-by-code-execution-mcp";

/// A file written under a temporary name beside its destination, not yet
/// in place.
struct Staged {
    tmp: tempfile::NamedTempFile,
    dest: std::path::PathBuf,
    checked: bool,
}

/// One tool's module and stub as they are being written.
struct ToolFiles<'a> {
    entry: &'a Entry,
    module: String,
    /// The files that changed (none when both are up to date).
    staged: Vec<Staged>,
    failed: bool,
}

/// One server's package as it is being written.
struct Package<'a> {
    /// The server's own name (the first one, when two spell one package).
    server: String,
    dir: std::path::PathBuf,
    tools: Vec<ToolFiles<'a>>,
    init: Option<Staged>,
    /// The tools changed since `init` was staged.
    init_stale: bool,
    failed: bool,
}

/// Writes `servers/<server>/{__init__.py, <tool>.py, <tool>.pyi}` under
/// `out` for the upstream entries, leaving unchanged files untouched (so a
/// second run writes nothing). `progress` is told (done, total).
///
/// Every file that changed is written under a temporary name, compiled by
/// `python` (the interpreter the sandbox runs; one process for all of them)
/// and only then put in place. What cannot be written or does not compile
/// leaves out that tool (or, for its `__init__.py` or its directory, that
/// server) and is listed in [`Generated::skipped`]: every other server's
/// package is still written. Only the `servers` directory itself failing
/// is an error.
pub fn write_wrappers(
    entries: &[&Entry],
    out: &std::path::Path,
    python: &std::path::Path,
    progress: &mut dyn FnMut(usize, usize),
) -> std::io::Result<Generated> {
    use std::collections::BTreeMap;
    let root = out.join("servers");
    std::fs::create_dir_all(&root)?;
    let mut stats = Generated::default();
    let mut by_server: BTreeMap<String, Vec<&Entry>> = BTreeMap::new();
    for e in entries {
        by_server
            .entry(module_name(&e.category))
            .or_default()
            .push(e);
    }
    let total = entries.len();
    let mut done = 0;
    let mut packages: Vec<Package> = Vec::new();
    for (name, tools) in &by_server {
        let server = tools[0].category.clone();
        let dir = root.join(name);
        let made = std::fs::create_dir_all(&dir)
            .and_then(|()| write_if_changed(&dir.join(MARKER), "", &mut stats));
        if let Err(e) = made {
            stats.skipped.push(Skipped {
                server,
                tool: None,
                reason: format!("cannot write its directory {}: {e}", dir.display()),
            });
            done += tools.len();
            progress(done, total);
            continue;
        }
        let mut package = Package {
            server,
            dir,
            tools: Vec::new(),
            init: None,
            init_stale: true,
            failed: false,
        };
        for (entry, module) in modules(tools, &mut stats.skipped) {
            let staged = stage_tool(&package.dir, entry, module);
            done += 1;
            progress(done, total);
            match staged {
                Ok(tool) => package.tools.push(tool),
                Err(e) => stats.skipped.push(Skipped {
                    server: entry.category.clone(),
                    tool: Some(entry.name.clone()),
                    reason: format!("cannot write its module: {e}"),
                }),
            }
        }
        packages.push(package);
    }
    let mut root_init: Option<Staged> = None;
    let mut root_stale = true;
    // Check what changed; a tool that fails changes its server's
    // `__init__.py`, which is checked again (in a second, small batch:
    // only when something failed).
    loop {
        for package in packages.iter_mut().filter(|p| p.init_stale && !p.failed) {
            package.init_stale = false;
            match stage(&package.dir.join("__init__.py"), &package_init(package)) {
                Ok(staged) => package.init = staged,
                Err(e) => {
                    package.failed = true;
                    stats.skipped.push(Skipped {
                        server: package.server.clone(),
                        tool: None,
                        reason: format!("cannot write its __init__.py: {e}"),
                    });
                    root_stale = true;
                }
            }
        }
        if root_stale {
            root_stale = false;
            root_init = stage(&root.join("__init__.py"), &servers_init(&packages))?;
        }
        let mut unchecked: Vec<&mut Staged> = Vec::new();
        for package in packages.iter_mut().filter(|p| !p.failed) {
            for tool in package.tools.iter_mut().filter(|t| !t.failed) {
                unchecked.extend(tool.staged.iter_mut().filter(|s| !s.checked));
            }
            unchecked.extend(package.init.iter_mut().filter(|s| !s.checked));
        }
        unchecked.extend(root_init.iter_mut().filter(|s| !s.checked));
        if unchecked.is_empty() {
            break;
        }
        let paths: Vec<&std::path::Path> = unchecked.iter().map(|s| s.tmp.path()).collect();
        let verdicts = match compile_all(python, &paths) {
            Ok(verdicts) => verdicts,
            Err(why) => {
                stats.unchecked = Some(why);
                vec![None; paths.len()]
            }
        };
        let mut failures: std::collections::HashMap<std::path::PathBuf, String> =
            std::collections::HashMap::new();
        for (staged, verdict) in unchecked.into_iter().zip(verdicts) {
            staged.checked = true;
            if let Some(reason) = verdict {
                failures.insert(staged.tmp.path().to_path_buf(), reason);
            }
        }
        if failures.is_empty() {
            break;
        }
        let failed = |s: &Staged| failures.get(s.tmp.path()).cloned();
        for package in packages.iter_mut().filter(|p| !p.failed) {
            for tool in package.tools.iter_mut().filter(|t| !t.failed) {
                if let Some((file, reason)) = tool
                    .staged
                    .iter()
                    .find_map(|s| failed(s).map(|r| (file_name(&s.dest), r)))
                {
                    stats.skipped.push(Skipped {
                        server: tool.entry.category.clone(),
                        tool: Some(tool.entry.name.clone()),
                        reason: format!("its generated {file} does not compile: {reason}"),
                    });
                    tool.failed = true;
                    tool.staged.clear();
                    package.init_stale = true;
                }
            }
            if let Some(reason) = package.init.as_ref().and_then(failed) {
                stats.skipped.push(Skipped {
                    server: package.server.clone(),
                    tool: None,
                    reason: format!("its generated __init__.py does not compile: {reason}"),
                });
                package.failed = true;
                root_stale = true;
            }
        }
        if let Some(reason) = root_init.as_ref().and_then(failed) {
            // Written from package names alone, which are identifiers: a
            // bug if ever seen. The old one stays.
            stats.skipped.push(Skipped {
                server: "servers".into(),
                tool: None,
                reason: format!("the generated servers/__init__.py does not compile: {reason}"),
            });
            root_init = None;
        }
    }
    for package in packages.iter_mut().filter(|p| !p.failed) {
        install_package(package, &mut stats);
    }
    if let Some(staged) = root_init {
        persist(staged, &mut stats)?;
    }
    // Servers no longer configured: remove the directories we generated
    // (not those of a server left out this time: its last good package
    // stays).
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

/// The tools of one package with their module names, exact Python names
/// first (a tool called `get_sum` keeps `get_sum` when `get-sum` is listed
/// too); a tool whose module name another already has is left out.
fn modules<'a>(tools: &[&'a Entry], skipped: &mut Vec<Skipped>) -> Vec<(&'a Entry, String)> {
    let mut named: Vec<(&Entry, String)> =
        tools.iter().map(|e| (*e, module_name(&e.name))).collect();
    named.sort_by(|(a, am), (b, bm)| {
        (a.name != *am, &a.name, &a.category).cmp(&(b.name != *bm, &b.name, &b.category))
    });
    let mut taken: std::collections::HashMap<String, &Entry> = std::collections::HashMap::new();
    let mut out = Vec::with_capacity(named.len());
    for (entry, module) in named {
        if let Some(first) = taken.get(&module) {
            let reason = if first.name == entry.name && first.category == entry.category {
                "the server lists it twice; the first is kept".to_string()
            } else {
                format!(
                    "its Python name '{module}' is {}'s; call it with call_tool({}, {{...}})",
                    first.qualified_name(),
                    string_literal(&entry.qualified_name())
                )
            };
            skipped.push(Skipped {
                server: entry.category.clone(),
                tool: Some(entry.name.clone()),
                reason,
            });
            continue;
        }
        taken.insert(module.clone(), entry);
        out.push((entry, module));
    }
    out
}

fn stage_tool<'a>(
    dir: &std::path::Path,
    entry: &'a Entry,
    module: String,
) -> std::io::Result<ToolFiles<'a>> {
    let mut staged = Vec::new();
    staged.extend(stage(
        &dir.join(format!("{module}.py")),
        &wrapper_module(entry),
    )?);
    staged.extend(stage(&dir.join(format!("{module}.pyi")), &stub(entry))?);
    Ok(ToolFiles {
        entry,
        module,
        staged,
        failed: false,
    })
}

/// A server's `__init__.py`, importing the tools not left out.
fn package_init(package: &Package) -> String {
    let mut init = format!(
        "\"\"\"Tools of the '{}' MCP server.\"\"\"\n\n",
        in_docstring(&package.server)
    );
    let mut names = Vec::new();
    for tool in package.tools.iter().filter(|t| !t.failed) {
        init.push_str(&format!("from .{m} import {m}\n", m = tool.module));
        names.push(string_literal(&tool.module));
    }
    init.push_str(&format!("\n__all__ = [{}]\n", names.join(", ")));
    init
}

/// `servers/__init__.py`, naming the packages not left out.
fn servers_init(packages: &[Package]) -> String {
    let mut init = String::from(
        "\"\"\"Generated wrappers of the upstream MCP servers' tools.\"\"\"\n\n__all__ = [\n",
    );
    for package in packages.iter().filter(|p| !p.failed) {
        let name = file_name(&package.dir);
        init.push_str(&format!("    {},\n", string_literal(&name)));
    }
    init.push_str("]\n");
    init
}

fn file_name(path: &std::path::Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Puts a checked package in place: its tools' files, then its
/// `__init__.py`, then removes the modules of tools gone or left out.
fn install_package(package: &mut Package, stats: &mut Generated) {
    let mut keep: Vec<String> = vec![MARKER.into(), "__init__.py".into()];
    for tool in package.tools.iter_mut().filter(|t| !t.failed) {
        let mut installed = true;
        for staged in tool.staged.drain(..) {
            let dest = staged.dest.clone();
            if let Err(e) = persist(staged, stats) {
                // A rename in one directory: the old file, if any, stays.
                installed = false;
                stats.skipped.push(Skipped {
                    server: tool.entry.category.clone(),
                    tool: Some(tool.entry.name.clone()),
                    reason: format!("cannot put {} in place: {e}", dest.display()),
                });
            }
        }
        keep.push(format!("{}.py", tool.module));
        keep.push(format!("{}.pyi", tool.module));
        if installed {
            stats.tools += 1;
        }
    }
    if let Some(staged) = package.init.take()
        && let Err(e) = persist(staged, stats)
    {
        stats.skipped.push(Skipped {
            server: package.server.clone(),
            tool: None,
            reason: format!("cannot put its __init__.py in place: {e}"),
        });
        return;
    }
    stats.servers += 1;
    let Ok(listing) = std::fs::read_dir(&package.dir) else {
        return;
    };
    for old in listing.flatten() {
        let name = old.file_name().to_string_lossy().into_owned();
        if !keep.contains(&name)
            && (name.ends_with(".py") || name.ends_with(".pyi"))
            && remove_generated(&old.path(), false).unwrap_or(false)
        {
            stats.removed += 1;
        }
    }
}

/// What each file compiles to with `python`: `None` when it compiles, else
/// why not. All in one process; if that process dies before it answers (a
/// file that crashes the compiler), halves are checked apart until the file
/// is found. `Err` when the interpreter cannot be run at all.
fn compile_all(
    python: &std::path::Path,
    paths: &[&std::path::Path],
) -> Result<Vec<Option<String>>, String> {
    if paths.is_empty() {
        return Ok(Vec::new());
    }
    match run_compiler(python, paths)? {
        Some(verdicts) => Ok(verdicts),
        None if paths.len() == 1 => Ok(vec![Some(
            "the interpreter stopped while compiling it".into(),
        )]),
        None => {
            // An interpreter that never answers (not a Python) would be
            // bisected down to every file: asked once with nothing first.
            if run_compiler(python, &[])?.is_none() {
                return Err(format!(
                    "{} ran but did not check anything (is it a Python 3?)",
                    python.display()
                ));
            }
            let (left, right) = paths.split_at(paths.len() / 2);
            let mut verdicts = compile_all(python, left)?;
            verdicts.extend(compile_all(python, right)?);
            Ok(verdicts)
        }
    }
}

/// Compiles each file (NUL-separated paths on stdin) with warnings as
/// errors (an invalid escape is a warning today and an error later), and
/// prints `index<TAB>reason` for each that fails, then `done`.
const COMPILE_ALL: &str = r#"import sys, warnings
warnings.simplefilter("error")
for i, p in enumerate(sys.stdin.buffer.read().split(b"\0")):
    if not p:
        continue
    try:
        with open(p, "rb") as f:
            compile(f.read(), "wrapper", "exec", dont_inherit=True)
    except Exception as e:
        line = getattr(e, "lineno", None)
        where = f" at line {line}" if line else ""
        msg = getattr(e, "msg", None) or str(e)
        print(f"{i}\t{type(e).__name__}{where}: {msg}".replace("\n", " ")[:400])
print("done")
"#;

/// One run of [`COMPILE_ALL`]: `None` when it ended without saying `done`.
fn run_compiler(
    python: &std::path::Path,
    paths: &[&std::path::Path],
) -> Result<Option<Vec<Option<String>>>, String> {
    use std::io::Write;
    use std::os::unix::ffi::OsStrExt;
    let mut child = std::process::Command::new(python)
        // Isolated and without site: no PYTHON* variable or user site can
        // change what compiles, and start-up is quicker.
        .args(["-I", "-S", "-c", COMPILE_ALL])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", python.display()))?;
    let mut input = Vec::new();
    for path in paths {
        input.extend_from_slice(path.as_os_str().as_bytes());
        input.push(0);
    }
    // The script reads all its input before it writes: no deadlock. A
    // write error means it died, which its missing `done` says.
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(&input);
    }
    let output = child
        .wait_with_output()
        .map_err(|e| format!("cannot run {}: {e}", python.display()))?;
    let text = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() || text.lines().last() != Some("done") {
        return Ok(None);
    }
    let mut verdicts = vec![None; paths.len()];
    for line in text.lines() {
        if let Some((index, reason)) = line.split_once('\t')
            && let Ok(index) = index.parse::<usize>()
            && let Some(slot) = verdicts.get_mut(index)
        {
            *slot = Some(reason.to_string());
        }
    }
    Ok(Some(verdicts))
}

/// `content` under a temporary name of its own beside `path`, or `None`
/// when `path` already holds it.
fn stage(path: &std::path::Path, content: &str) -> std::io::Result<Option<Staged>> {
    if std::fs::read_to_string(path).ok().as_deref() == Some(content) {
        return Ok(None);
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
    Ok(Some(Staged {
        tmp,
        dest: path.to_path_buf(),
        checked: false,
    }))
}

fn persist(staged: Staged, stats: &mut Generated) -> std::io::Result<()> {
    staged.tmp.persist(&staged.dest).map_err(|e| e.error)?;
    stats.written += 1;
    Ok(())
}

/// Writes a file that needs no check (the empty marker) when it changed.
fn write_if_changed(
    path: &std::path::Path,
    content: &str,
    stats: &mut Generated,
) -> std::io::Result<()> {
    match stage(path, content)? {
        Some(staged) => persist(staged, stats),
        None => Ok(()),
    }
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

/// Wrappers from hostile metadata (issue 57): each class of name and text
/// an upstream may send, checked by a real Python.
#[cfg(test)]
mod hostile;
