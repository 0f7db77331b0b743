use std::path::Path;

use serde_json::{Value, json};

use super::tests::{entry, python_accepts};
use super::*;
use crate::source::invisible;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

const PYTHON: &str = "/usr/bin/python3";

fn tool(server: &str, name: &str, description: &str, schema: Value) -> Entry {
    Entry {
        category: server.into(),
        name: name.into(),
        description: description.into(),
        input_schema: Some(schema),
        ..entry()
    }
}

fn no_args() -> Value {
    json!({"type": "object", "properties": {}})
}

fn write(entries: &[Entry], out: &Path, python: &str) -> Result<Generated> {
    let refs: Vec<&Entry> = entries.iter().collect();
    Ok(write_wrappers(
        &refs,
        out,
        Path::new(python),
        &mut |_, _| {},
    )?)
}

/// Runs `code` with the real Python, the generated `servers` package and a
/// `cem_tools` whose `call_tool` answers what it was called with; fails
/// with Python's own output.
fn run(out: &Path, code: &str) -> Result<()> {
    std::fs::write(
        out.join("cem_tools.py"),
        "def call_tool(name, arguments):\n    return name, arguments\n",
    )?;
    let program = format!(
        "import sys; sys.path.insert(0, {})\n{code}",
        string_literal(&out.to_string_lossy())
    );
    let done = std::process::Command::new(PYTHON)
        .args(["-c", &program])
        .output()?;
    if !done.status.success() {
        return Err(format!(
            "python failed:\n{}\n{}",
            String::from_utf8_lossy(&done.stderr),
            program
        )
        .into());
    }
    Ok(())
}

fn file_names(dir: &Path) -> Result<Vec<String>> {
    Ok(std::fs::read_dir(dir)?
        .flatten()
        .map(|f| f.file_name().to_string_lossy().into_owned())
        .collect())
}

#[test]
fn ordinary_names_keep_todays_spelling() {
    for (name, python) in [
        ("get-sum", "get_sum"),
        ("git_log", "git_log"),
        ("git.log", "git_log"),
        ("2fa.check", "_2fa_check"),
        ("class", "class_"),
        ("API-create-a-comment", "API_create_a_comment"),
        ("sequential-thinking", "sequential_thinking"),
        ("browser/navigate", "browser_navigate"),
    ] {
        assert_eq!(module_name(name), python, "{name}");
    }
}

/// A 300-character tool name stopped the whole run with ENAMETOOLONG, so
/// the servers sorted after its own had no package at all.
#[test]
fn a_long_name_is_cut_with_a_hash_and_later_servers_still_get_their_package() -> Result<()> {
    let long = format!("{}_tool", "x".repeat(300));
    let module = module_name(&long);
    assert!(module.len() <= MAX_NAME, "{}", module.len());
    assert_eq!(module, module_name(&long), "not stable");
    let (stem, hash) = module.rsplit_once('_').unwrap_or_default();
    assert!(stem.starts_with("xxxx") && hash.len() == HASH_DIGITS);
    assert!(hash.chars().all(|c| c.is_ascii_hexdigit()), "{hash}");
    let dir = tempfile::tempdir()?;
    let entries = [
        tool("aaa", &long, "A tool with a long name.", no_args()),
        tool("aaa", "echo", "Echoes.", no_args()),
        tool("zzz", "ping", "Pings.", no_args()),
    ];
    let stats = write(&entries, dir.path(), PYTHON)?;
    assert_eq!(stats.skipped, [], "{stats:?}");
    assert_eq!((stats.servers, stats.tools), (2, 3));
    for name in file_names(&dir.path().join("servers").join("aaa"))? {
        assert!(name.len() < 255, "{name}");
    }
    run(
        dir.path(),
        &format!(
            "import servers.zzz as z\n\
             assert z.ping() == ('zzz.ping', {{}})\n\
             import servers.aaa as a\n\
             assert a.{module}() == ('aaa.{long}', {{}})\n\
             assert a.echo() == ('aaa.echo', {{}})\n"
        ),
    )
}

/// A NUL or U+2028 in a description, an enum value or a default made the
/// server's whole package fail to import.
#[test]
fn control_and_invisible_characters_neither_break_nor_reach_the_module() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let schema = json!({
        "type": "object",
        "properties": {
            "mode": {"type": "string", "enum": ["a\u{0}b", "\u{2028}", "c\u{200b}"],
                     "description": "How\u{0} to\u{2029}read \u{202e}it\u{7f}"},
            "path": {"type": "string", "default": "x\u{0}y\u{2028}"},
            "opts": {"type": "object", "properties": {"k\u{2028}\u{0}": {
                "type": "string", "description": "nested\u{0}\u{2028}one"}}}
        },
        "required": ["mode"]
    });
    let entries = [tool(
        "files",
        "read",
        "Reads\u{0} a file\u{2028}then\u{200b} stops\u{feff}.\u{85}Really.",
        schema,
    )];
    let stats = write(&entries, dir.path(), PYTHON)?;
    assert_eq!(stats.skipped, [], "{stats:?}");
    for name in ["read.py", "read.pyi"] {
        let source = std::fs::read_to_string(dir.path().join("servers/files").join(name))?;
        let odd: Vec<char> = source
            .chars()
            .filter(|&c| (c.is_control() && c != '\n') || invisible(c))
            .collect();
        assert!(odd.is_empty(), "{name} holds {odd:?}");
    }
    // The enum's values reach Python as they were sent: the escaper loses
    // nothing where the value matters.
    run(
        dir.path(),
        "import typing, inspect\n\
         from servers.files import read\n\
         doc = read.__doc__\n\
         assert 'a file then stops. Really.' in doc, doc\n\
         assert 'How to read it' in doc, doc\n\
         assert not any(c in doc for c in '\\x00\\u2028\\u2029\\u200b\\ufeff\\u202e\\x7f'), doc\n\
         ann = inspect.signature(read).parameters['mode'].annotation\n\
         values = typing.get_args(eval(ann, {'Literal': typing.Literal}))\n\
         assert values == ('a\\x00b', '\\u2028', 'c\\u200b'), values\n\
         assert read(mode='a\\x00b') == ('files.read', {'mode': 'a\\x00b'})\n",
    )
}

/// Quotes and backslashes in a description stay text: none ends the
/// docstring early (which would run what follows) or is a bad escape.
#[test]
fn docstrings_cannot_be_closed_by_the_text() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let texts = [
        "Ends here\"\"\"\nimport os; os._exit(3)\n\"\"\"",
        "A trailing backslash \\",
        "\"\"\"\"\"\"",
        "Bad escapes \\N{nothing} \\x \\u12 and a quote at the end\"",
        "\"Starts with a quote",
    ];
    let entries: Vec<Entry> = texts
        .iter()
        .enumerate()
        .map(|(i, text)| {
            let schema = json!({"type": "object", "properties": {
                "p": {"type": "string", "description": text}}});
            tool("docs", &format!("t{i}"), text, schema)
        })
        .collect();
    let stats = write(&entries, dir.path(), PYTHON)?;
    assert_eq!(stats.skipped, [], "{stats:?}");
    let mut check = String::from("import servers.docs as d\n");
    for (i, text) in texts.iter().enumerate() {
        check.push_str(&format!(
            "assert d.t{i}.__doc__.startswith({}), d.t{i}.__doc__\n",
            string_literal(text.trim())
        ));
    }
    run(dir.path(), &check)
}

/// Parameter names with invisible characters, DEL, keywords, leading
/// digits, or that are one name once made identifiers: each a valid,
/// distinct Python name that reaches the tool under its real key.
#[test]
fn parameter_names_become_identifiers_carrying_the_real_key() -> Result<()> {
    let names = [
        "a\u{200b}b",
        "a\u{2028}b",
        "del\u{7f}",
        "\u{200b}",
        "\u{2028}",
        "",
        "class",
        "lambda",
        "2fa",
        "foo-bar",
        "foo_bar",
        "_cem_arguments",
        "_cem_call_tool",
        "\"); import os #",
    ];
    let long = "p".repeat(300);
    let mut properties = serde_json::Map::new();
    for name in names.iter().copied().chain([long.as_str()]) {
        properties.insert(name.into(), json!({"type": "integer"}));
    }
    let e = tool(
        "params",
        "odd",
        "Odd parameters.",
        json!({"type": "object", "properties": properties, "required": ["2fa"]}),
    );
    let (params, _) = typed_params(&e);
    assert_eq!(params.len(), names.len() + 1);
    let mut call = Vec::new();
    let mut expected = Vec::new();
    for (i, p) in params.iter().enumerate() {
        call.push(format!("{}: {i}", string_literal(&p.alias)));
        expected.push(format!("{}: {i}", string_literal(&p.name)));
    }
    let dir = tempfile::tempdir()?;
    let stats = write(&[e], dir.path(), PYTHON)?;
    assert_eq!(stats.skipped, [], "{stats:?}");
    run(
        dir.path(),
        &format!(
            "import inspect, keyword\n\
             from servers.params import odd\n\
             names = list(inspect.signature(odd).parameters)\n\
             assert all(n.isidentifier() and not keyword.iskeyword(n) for n in names), names\n\
             assert len(set(names)) == len(names) == {count}, names\n\
             assert max(len(n) for n in names) <= {MAX_NAME}, names\n\
             got = odd(**{{{call}}})\n\
             assert got == ('params.odd', {{{expected}}}), got\n",
            count = names.len() + 1,
            call = call.join(", "),
            expected = expected.join(", "),
        ),
    )
}

/// Names of symbols only, names one after cutting, names a package needs
/// itself: each tool its own module, called by its own name; of two that
/// are one Python name, the one spelled so keeps it and the other is left
/// out with a reason.
#[test]
fn symbol_names_cut_names_and_reserved_names_stay_apart() -> Result<()> {
    let prefix = "a".repeat(200);
    let names = [
        "!!!".to_string(),
        "???".to_string(),
        "\u{1f642}".to_string(),
        format!("{prefix}_first"),
        format!("{prefix}_second"),
        "__init__".to_string(),
        "_cem_call_tool".to_string(),
        "get_sum".to_string(),
        "get-sum".to_string(),
    ];
    let entries: Vec<Entry> = names
        .iter()
        .map(|n| tool("sym", n, "A tool.", no_args()))
        .collect();
    let dir = tempfile::tempdir()?;
    let stats = write(&entries, dir.path(), PYTHON)?;
    assert_eq!(stats.skipped.len(), 1, "{stats:?}");
    let skipped = &stats.skipped[0];
    assert_eq!(skipped.tool.as_deref(), Some("get-sum"));
    assert!(
        skipped.reason.contains("sym.get_sum")
            && skipped.reason.contains("call_tool(\"sym.get-sum\""),
        "{}",
        skipped.reason
    );
    let modules: Vec<String> = names[..8].iter().map(|n| module_name(n)).collect();
    let distinct: std::collections::HashSet<&String> = modules.iter().collect();
    assert_eq!(distinct.len(), modules.len(), "{modules:?}");
    assert!(
        !modules
            .iter()
            .any(|m| m == "__init__" || m == "_cem_call_tool")
    );
    let mut check = String::from("import servers.sym as s\n");
    for (name, module) in names.iter().zip(&modules) {
        check.push_str(&format!(
            "assert s.{module}() == ({}, {{}})\n",
            string_literal(&format!("sym.{name}"))
        ));
    }
    run(dir.path(), &check)
}

#[test]
fn string_literals_round_trip_through_python() -> Result<()> {
    let texts = [
        "",
        "plain",
        "quote\" back\\slash 'single' {braces} %s",
        "\u{0}\u{1f}\u{7f}\u{85}\u{a0}",
        "\u{200b}\u{2028}\u{2029}\u{202e}\u{feff}\u{fffe}",
        "é\u{1f642}\u{10ffff}",
        "tab\tnew\nline\rcr",
        "\\N{DASH} \\x \\u{200b}",
    ];
    let mut runner = String::from("import sys, json\nwant = json.loads(sys.stdin.read())\ngot = [");
    for text in texts {
        let literal = string_literal(text);
        assert!(
            literal.chars().all(|c| (' '..='~').contains(&c)),
            "{literal}"
        );
        runner.push_str(&literal);
        runner.push_str(", ");
    }
    runner.push_str("]\nassert got == want, (got, want)\n");
    assert!(
        python_accepts(&runner, &serde_json::to_string(&texts)?)?,
        "{runner}"
    );
    Ok(())
}

/// An interpreter for the check that refuses sources holding BREAKME and
/// dies on those holding CRASHME, the real Python otherwise: what a module
/// that does not compile, or that kills the compiler, does to the run.
fn picky_python(dir: &Path) -> Result<String> {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("picky-python");
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\n\
             # Called as: picky-python -I -S -c SCRIPT\n\
             exec {PYTHON} -I -S -c '\n\
             import builtins, os, sys\n\
             real = builtins.compile\n\
             def compile(source, *args, **kwargs):\n    \
                 if b\"CRASHME\" in source:\n        \
                     os._exit(70)\n    \
                 if b\"BREAKME\" in source:\n        \
                     raise SyntaxError(\"refused by the test\")\n    \
                 return real(source, *args, **kwargs)\n\
             exec(sys.argv[1])\n' \"$4\"\n"
        ),
    )?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
    Ok(path.to_string_lossy().into_owned())
}

#[test]
fn a_module_that_does_not_compile_is_skipped_and_the_rest_installed() -> Result<()> {
    let scratch = tempfile::tempdir()?;
    let python = picky_python(scratch.path())?;
    let dir = tempfile::tempdir()?;
    let entries = [
        tool("aaa", "broken", "BREAKME", no_args()),
        tool("aaa", "fine", "Fine.", no_args()),
        tool("bbb", "crasher", "CRASHME", no_args()),
        tool("bbb", "ok", "Ok.", no_args()),
        tool("ccc", "ping", "Pings.", no_args()),
    ];
    let stats = write(&entries, dir.path(), &python)?;
    let skipped: Vec<(&str, Option<&str>, &str)> = stats
        .skipped
        .iter()
        .map(|s| (s.server.as_str(), s.tool.as_deref(), s.reason.as_str()))
        .collect();
    assert_eq!(skipped.len(), 2, "{skipped:?}");
    assert_eq!(skipped[0].0, "aaa");
    assert_eq!(skipped[0].1, Some("broken"));
    assert!(
        skipped[0].2.contains("broken.py does not compile")
            && skipped[0].2.contains("refused by the test"),
        "{}",
        skipped[0].2
    );
    assert_eq!((skipped[1].0, skipped[1].1), ("bbb", Some("crasher")));
    assert!(skipped[1].2.contains("stopped"), "{}", skipped[1].2);
    assert_eq!((stats.servers, stats.tools), (3, 3));
    let aaa = file_names(&dir.path().join("servers/aaa"))?;
    assert!(
        !aaa.iter()
            .any(|n| n.starts_with("broken") || n.starts_with(".gen-")),
        "{aaa:?}"
    );
    run(
        dir.path(),
        "import servers\n\
         assert servers.__all__ == ['aaa', 'bbb', 'ccc'], servers.__all__\n\
         import servers.aaa as a, servers.bbb as b, servers.ccc as c\n\
         assert a.fine() == ('aaa.fine', {}) and b.ok() == ('bbb.ok', {}) and c.ping() == ('ccc.ping', {})\n\
         assert not hasattr(a, 'broken') and not hasattr(b, 'crasher')\n",
    )?;
    // Once it compiles, the next run installs it.
    let stats = write(&entries, dir.path(), PYTHON)?;
    assert_eq!((stats.skipped.len(), stats.tools), (0, 5), "{stats:?}");
    run(
        dir.path(),
        "from servers.aaa import broken\nfrom servers.bbb import crasher\n",
    )
}

#[test]
fn a_server_whose_directory_cannot_be_written_is_skipped_alone() -> Result<()> {
    let dir = tempfile::tempdir()?;
    std::fs::create_dir_all(dir.path().join("servers"))?;
    // A file where the package's directory goes.
    std::fs::write(dir.path().join("servers/bbb"), "in the way")?;
    let entries = [
        tool("aaa", "one", "One.", no_args()),
        tool("bbb", "two", "Two.", no_args()),
        tool("ccc", "three", "Three.", no_args()),
    ];
    let stats = write(&entries, dir.path(), PYTHON)?;
    assert_eq!(stats.skipped.len(), 1, "{stats:?}");
    assert_eq!(
        (
            stats.skipped[0].server.as_str(),
            stats.skipped[0].tool.as_deref()
        ),
        ("bbb", None)
    );
    assert_eq!((stats.servers, stats.tools), (2, 2));
    run(
        dir.path(),
        "import servers\n\
         assert servers.__all__ == ['aaa', 'ccc'], servers.__all__\n\
         from servers.aaa import one\nfrom servers.ccc import three\n",
    )
}

/// Without an interpreter to check with, the wrappers are still written
/// (the sandbox could not run them either), and the caller is told.
#[test]
fn without_an_interpreter_modules_are_installed_unchecked() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let entries = [tool("aaa", "one", "One.", no_args())];
    let stats = write(&entries, dir.path(), "/nonexistent/python3")?;
    assert!(
        stats
            .unchecked
            .as_deref()
            .is_some_and(|u| u.contains("cannot run /nonexistent/python3")),
        "{stats:?}"
    );
    assert_eq!(stats.tools, 1);
    run(
        dir.path(),
        "from servers.aaa import one\nassert one() == ('aaa.one', {})\n",
    )
}
