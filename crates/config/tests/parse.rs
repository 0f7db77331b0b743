//! Config parsing: what valid files turn into and what invalid ones say.

use std::path::Path;

use cem_config::{ConfigError, PiiMode, PiiType, Transport, parse_str};

fn env(name: &str) -> Option<String> {
    match name {
        "GITHUB_TOKEN" => Some("ghp_example".into()),
        "HOME" => Some("/home/me".into()),
        _ => None,
    }
}

fn parse(text: &str) -> Result<cem_config::Parsed, ConfigError> {
    parse_str(text, Path::new("mcp_config.json"), &env)
}

fn error(text: &str) -> String {
    match parse(text) {
        Ok(p) => panic!("expected an error, parsed {:?}", p.config),
        Err(e) => e.to_string(),
    }
}

#[test]
fn claude_desktop_style_config_parses() -> Result<(), ConfigError> {
    let parsed = parse(
        r#"{
          "mcpServers": {
            "git": {"command": "uvx", "args": ["mcp-server-git", "--repository", "${HOME}/repo"]},
            "github": {"type": "http", "url": "https://api.example.com/mcp",
                       "headers": {"Authorization": "Bearer ${GITHUB_TOKEN}"}},
            "legacy": {"type": "sse", "url": "http://127.0.0.1:3001/sse"},
            "fs": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"],
                   "env": {"TOKEN": "${GITHUB_TOKEN}"}, "cwd": "/tmp", "autoApprove": []},
            "off": {"command": "nope", "env": {"K": "${UNSET_VAR}"}, "disabled": true}
          },
          "sandbox": {"timeout_seconds": 10, "memory_mb": 256, "pool_size": 4},
          "pii": {"mode": "manual", "types": ["email", "ip"]}
        }"#,
    )?;
    let c = &parsed.config;
    assert_eq!(c.servers.len(), 5);
    match &c.servers["git"].transport {
        Transport::Stdio { command, args, .. } => {
            assert_eq!(command, "uvx");
            assert_eq!(args[2], "/home/me/repo");
        }
        other => panic!("git should be stdio, got {other:?}"),
    }
    match &c.servers["github"].transport {
        Transport::Http { url, headers } => {
            assert_eq!(url.as_str(), "https://api.example.com/mcp");
            assert_eq!(headers["Authorization"].expose(), "Bearer ghp_example");
        }
        other => panic!("github should be http, got {other:?}"),
    }
    assert_eq!(c.servers["legacy"].transport.kind(), "sse");
    assert!(c.servers["off"].disabled);
    assert_eq!(c.sandbox.timeout_seconds, 10);
    assert_eq!(c.sandbox.memory_mb, 256);
    assert_eq!(c.sandbox.pool_size, Some(4));
    assert_eq!(c.pii.mode, PiiMode::Manual);
    assert_eq!(c.pii.types, vec![PiiType::Email, PiiType::Ip]);
    // The disabled server's unset variable is a warning, not a refusal.
    assert!(
        parsed
            .warnings
            .iter()
            .any(|w| w.key == "mcpServers.off.env.K"),
        "{:?}",
        parsed.warnings
    );
    // Secrets never show in debug output (which is what logs print).
    let debug = format!("{c:?}");
    assert!(!debug.contains("ghp_example"), "{debug}");
    Ok(())
}

#[test]
fn type_is_inferred_from_command_or_url() -> Result<(), ConfigError> {
    let parsed = parse(
        r#"{"mcpServers": {"a": {"command": "x"}, "b": {"url": "http://127.0.0.1:1/mcp"}}}"#,
    )?;
    assert_eq!(parsed.config.servers["a"].transport.kind(), "stdio");
    assert_eq!(parsed.config.servers["b"].transport.kind(), "http");
    Ok(())
}

#[test]
fn empty_object_gives_defaults() -> Result<(), ConfigError> {
    let parsed = parse("{}")?;
    assert!(parsed.config.servers.is_empty());
    assert_eq!(parsed.config.sandbox.timeout_seconds, 30);
    assert_eq!(parsed.config.sandbox.memory_mb, 500);
    assert_eq!(parsed.config.pii.mode, PiiMode::Auto);
    assert!(
        !parsed.config.pii.types.contains(&PiiType::Ip),
        "IP addresses are opt-in"
    );
    Ok(())
}

#[test]
fn unknown_top_level_and_foreign_server_keys_only_warn() -> Result<(), ConfigError> {
    let parsed =
        parse(r#"{"globalShortcut": "x", "mcpServers": {"a": {"command": "x", "weird": 1}}}"#)?;
    let keys: Vec<_> = parsed.warnings.iter().map(|w| w.key.as_str()).collect();
    assert_eq!(keys, vec!["globalShortcut", "mcpServers.a.weird"]);
    Ok(())
}

#[test]
fn stdio_server_without_command() {
    insta::assert_snapshot!(error(
        r#"{"mcpServers": {"git": {"type": "stdio", "args": ["x"]}}}"#
    ));
}

#[test]
fn server_without_command_or_url() {
    insta::assert_snapshot!(error(r#"{"mcpServers": {"git": {}}}"#));
}

#[test]
fn remote_server_problems() {
    insta::assert_snapshot!(error(
        r#"{"mcpServers": {
            "a": {"type": "http"},
            "b": {"type": "sse", "url": "not a url"},
            "c": {"url": "ftp://example.com/x"},
            "d": {"type": "websocket", "url": "ws://x"},
            "e": {"type": "http", "url": "http://x/mcp", "command": "x"},
            "f": {"url": "http://x/mcp", "headers": {"Authorization": "Bearer ${MISSING_TOKEN}"}}
        }}"#
    ));
}

#[test]
fn wrong_types_everywhere() {
    insta::assert_snapshot!(error(
        r#"{"mcpServers": {"git": {"command": 3, "args": "x", "env": [], "disabled": "no"},
                           "bad name!": {"command": "x"}, "Skills": {"command": "x"}},
            "sandbox": {"timeout_seconds": 0, "memory_mb": "lots", "python": "python3", "memroy_mb": 1},
            "pii": {"mode": "sometimes", "types": ["email", "dna"]},
            "workspace": {"max_file_bytes": -1}}"#
    ));
}

#[test]
fn package_settings_are_checked() {
    insta::assert_snapshot!(error(
        r#"{"sandbox": {"packages": ["pandas>=2", "pkg @ https://x.invalid/p.whl", "--index-url=x",
                                     "Pandas", 3],
                        "on_demand": "sometimes", "allowed_packages": "numpy",
                        "installer": "uv", "install_timeout_seconds": 1}}"#
    ));
}

#[test]
fn auth_and_quota_settings_are_checked() {
    insta::assert_snapshot!(error(
        r#"{"auth": {"tokens": {"alice": "short", "bob/x": "0123456789abcdef0123",
                                "carol": "0123456789abcdef0123"},
                     "oauth": {"algorithms": ["HS256"], "scopes": {"run": "x", "execute": "two words"},
                               "leeway_seconds": 9999, "colour": 1}},
            "quotas": {"sessions": 0, "workspace_bytes": "1GB", "burst": 3}}"#
    ));
}

#[test]
fn auth_settings_are_read() -> Result<(), ConfigError> {
    let parsed = parse_str(
        r#"{"auth": {"resource": "https://mcp.example.com/mcp",
                     "tokens": {"alice": "${ALICE}"},
                     "oauth": {"issuer": "https://idp.example.com/realms/eng",
                               "scopes": {"execute": "mcp.execute"}}},
            "quotas": {"sessions": 4, "requests_per_minute": 600}}"#,
        Path::new("mcp_config.json"),
        &|name| (name == "ALICE").then(|| "alice-token-0123456789".to_string()),
    )?;
    let auth = &parsed.config.auth;
    assert_eq!(auth.tokens["alice"].expose(), "alice-token-0123456789");
    let oauth = auth
        .oauth
        .as_ref()
        .map(|o| (o.issuer.clone(), o.algorithms.clone(), o.leeway_seconds));
    assert_eq!(
        oauth,
        Some((
            "https://idp.example.com/realms/eng".into(),
            vec!["RS256".into(), "ES256".into()],
            30
        ))
    );
    let scope = auth
        .oauth
        .as_ref()
        .map(|o| o.scope_of(cem_config::Ability::Execute).to_string());
    assert_eq!(scope.as_deref(), Some("mcp.execute"));
    assert_eq!(parsed.config.quotas.sessions, Some(4));
    assert_eq!(parsed.config.quotas.concurrent_executions, None);
    Ok(())
}

#[test]
fn not_an_object() {
    insta::assert_snapshot!(error("[1, 2]"));
    insta::assert_snapshot!(error(r#"{"mcpServers": []}"#));
}

#[test]
fn syntax_error_points_at_line_and_column() {
    insta::assert_snapshot!(error(
        "{\n  \"mcpServers\": {\n    \"git\": {\"command\": \"x\",}\n  }\n}"
    ));
}

#[test]
fn bad_variable_references() {
    insta::assert_snapshot!(error(
        r#"{"mcpServers": {"a": {"command": "${UNCLOSED"}, "b": {"command": "${not ok}"}}}"#
    ));
}

#[test]
fn vs_code_and_cursor_spellings_are_understood() -> Result<(), ConfigError> {
    let parsed = parse(
        r#"{"servers": {"gh": {"type": "http", "url": "https://x.example/mcp",
                               "headers": {"Authorization": "Bearer ${env:GITHUB_TOKEN}"}},
                        "local": {"command": "srv", "env": {"PORT": 3000, "DEBUG": true}, "timeout": 60000},
                        "legacy": {"url": "http://127.0.0.1:9/sse"},
                        "my.server": {"command": "x", "disabled": true}},
            "inputs": [{"id": "key", "type": "promptString"}]}"#,
    )?;
    let servers = &parsed.config.servers;
    match &servers["gh"].transport {
        Transport::Http { headers, .. } => {
            assert_eq!(headers["Authorization"].expose(), "Bearer ghp_example")
        }
        other => panic!("{other:?}"),
    }
    match &servers["local"].transport {
        Transport::Stdio { env, .. } => {
            assert_eq!(env["PORT"].expose(), "3000");
            assert_eq!(env["DEBUG"].expose(), "true");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        servers["local"].timeout_seconds, None,
        "a foreign timeout is not misread"
    );
    assert_eq!(servers["legacy"].transport.kind(), "sse");
    assert!(!servers.contains_key("my.server"));
    Ok(())
}

#[test]
fn url_errors_do_not_print_expanded_secrets() {
    let msg = error(r#"{"mcpServers": {"a": {"url": "https://host:${GITHUB_TOKEN}/mcp"}}}"#);
    assert!(!msg.contains("ghp_example"), "{msg}");
    assert!(msg.contains("${GITHUB_TOKEN}"), "{msg}");
}

#[test]
fn the_policy_section_parses() -> Result<(), ConfigError> {
    use cem_config::policy::{Decision, PinState, ToolFacts};
    let parsed = parse(
        r#"{"policy": {"default": "ask",
                       "rules": {"memory.create_entities": "ask", "github.delete_*": "deny", "filesystem.*": "allow"},
                       "budgets": {"github.*": 50, "memory.create_entities": 0},
                       "on_change": "deny", "approval_timeout_seconds": 30,
                       "audit": {"path": "${HOME}/audit.jsonl", "max_bytes": 1048576, "keep": 3}}}"#,
    )?;
    let p = &parsed.config.policy;
    assert_eq!(p.default, Decision::Ask);
    assert_eq!(p.on_change, Decision::Deny);
    assert_eq!(p.approval_timeout_seconds, 30);
    assert_eq!(p.rules.len(), 3);
    assert_eq!(p.budgets.len(), 2);
    let facts = ToolFacts {
        read_only: None,
        destructive: None,
        pin: PinState::Trusted,
    };
    assert_eq!(
        p.decide("github", "delete_repo", facts).decision,
        Decision::Deny
    );
    assert_eq!(
        p.decide("filesystem", "write_file", facts).decision,
        Decision::Allow
    );
    assert_eq!(p.decide("slack", "post", facts).decision, Decision::Ask);
    let audit = &parsed.config.audit;
    assert_eq!(
        audit.path.as_deref(),
        Some(Path::new("/home/me/audit.jsonl"))
    );
    assert_eq!((audit.max_bytes, audit.keep), (1 << 20, 3));
    Ok(())
}

#[test]
fn policy_mistakes_name_the_key() {
    let e = error(r#"{"policy": {"rules": {"github.delete_*": "block"}}}"#);
    assert!(
        e.contains("policy.rules.github.delete_*") && e.contains("\"allow\", \"ask\" or \"deny\""),
        "{e}"
    );
    let e = error(r#"{"policy": {"rules": {"github.": "deny"}}}"#);
    assert!(
        e.contains("policy.rules.github.") && e.contains("empty server or tool part"),
        "{e}"
    );
    let e = error(r#"{"policy": {"budgets": {"github.*": -1}}}"#);
    assert!(
        e.contains("policy.budgets.github.*") && e.contains("whole number of calls"),
        "{e}"
    );
    let e = error(r#"{"policy": {"on_change": "allow"}}"#);
    assert!(e.contains("policy.on_change"), "{e}");
    let e = error(r#"{"policy": {"defualt": "deny"}}"#);
    assert!(
        e.contains("policy.defualt") && e.contains("unknown key"),
        "{e}"
    );
    let e = error(r#"{"policy": {"audit": {"max_bytes": 10}}}"#);
    assert!(e.contains("policy.audit.max_bytes"), "{e}");
}

#[test]
fn a_tenants_disk_write_rate_is_read_and_checked() -> Result<(), ConfigError> {
    assert_eq!(parse("{}")?.config.sandbox.tenant_disk_mb_per_second, 32);
    let off = parse(r#"{"sandbox": {"tenant_disk_mb_per_second": 0}}"#)?;
    assert_eq!(off.config.sandbox.tenant_disk_mb_per_second, 0);
    let e = error(r#"{"sandbox": {"tenant_disk_mb_per_second": "fast"}}"#);
    assert!(
        e.contains("sandbox.tenant_disk_mb_per_second") && e.contains("MB a second"),
        "{e}"
    );
    Ok(())
}

#[test]
fn the_metrics_section_names_its_listener() -> Result<(), ConfigError> {
    assert_eq!(parse("{}")?.config.metrics.listen, None);
    let on = parse(r#"{"metrics": {"listen": "127.0.0.1:9464"}}"#)?;
    assert_eq!(on.config.metrics.listen.map(|a| a.port()), Some(9464));
    let e = error(r#"{"metrics": {"listen": "localhost"}}"#);
    assert!(
        e.contains("metrics.listen") && e.contains("127.0.0.1:9464"),
        "{e}"
    );
    let e = error(r#"{"metrics": {"port": 1}}"#);
    assert!(
        e.contains("metrics.port") && e.contains("unknown key"),
        "{e}"
    );
    Ok(())
}

#[test]
fn the_http_section_sets_the_listeners_limits() -> Result<(), ConfigError> {
    let defaults = parse("{}")?.config.http;
    assert_eq!(defaults, cem_config::HttpConfig::default());
    assert_eq!(defaults.max_connections, None);
    assert!(defaults.header_timeout_seconds <= defaults.request_timeout_seconds);
    let set = parse(
        r#"{"http": {"header_timeout_seconds": 2, "request_timeout_seconds": 5,
             "idle_timeout_seconds": 3, "max_connections": 100, "max_connections_per_peer": 0}}"#,
    )?
    .config
    .http;
    assert_eq!(
        (
            set.header_timeout_seconds,
            set.request_timeout_seconds,
            set.idle_timeout_seconds,
            set.max_connections,
            set.max_connections_per_peer,
        ),
        (2, 5, 3, Some(100), 0)
    );
    let e = error(r#"{"http": {"header_timeout_seconds": 0}}"#);
    assert!(
        e.contains("http.header_timeout_seconds") && e.contains("from 1 to 3600"),
        "{e}"
    );
    let e = error(r#"{"http": {"header_timeout_seconds": 90}}"#);
    assert!(
        e.contains("http.header_timeout_seconds") && e.contains("http.request_timeout_seconds"),
        "{e}"
    );
    let e = error(r#"{"http": {"max_connections": 0}}"#);
    assert!(e.contains("http.max_connections"), "{e}");
    let e = error(r#"{"http": {"read_timeout": 5}}"#);
    assert!(
        e.contains("http.read_timeout")
            && e.contains("unknown key")
            && e.contains("header_timeout_seconds"),
        "{e}"
    );
    Ok(())
}

#[test]
fn the_answers_section_limits_images_and_tables() -> Result<(), ConfigError> {
    let defaults = parse("{}")?.config.answers;
    assert_eq!(defaults, cem_config::AnswersConfig::default());
    assert_eq!((defaults.max_images, defaults.max_image_edge), (8, 1568));
    let set = parse(
        r#"{"answers": {"max_images": 2, "max_image_bytes": 65536, "max_image_edge": 800,
             "max_image_block_bytes": 200000, "table_rows": 10}}"#,
    )?
    .config
    .answers;
    assert_eq!(
        (
            set.max_images,
            set.max_image_bytes,
            set.max_image_edge,
            set.max_image_block_bytes,
            set.table_rows
        ),
        (2, 65536, 800, 200_000, 10)
    );
    let e = error(r#"{"answers": {"max_image_edge": 5}}"#);
    assert!(
        e.contains("answers.max_image_edge") && e.contains("pixels from 16 to 8192"),
        "{e}"
    );
    let e = error(r#"{"answers": {"table_rows": "all"}}"#);
    assert!(e.contains("answers.table_rows"), "{e}");
    let e = error(r#"{"answers": {"max_pictures": 3}}"#);
    assert!(
        e.contains("answers.max_pictures") && e.contains("max_images"),
        "{e}"
    );
    Ok(())
}

#[test]
fn the_search_section_turns_meaning_on() -> Result<(), ConfigError> {
    assert!(parse("{}")?.config.search.semantic);
    assert!(parse("{}")?.config.search.learn);
    assert!(
        !parse(r#"{"search": {"learn": false}}"#)?
            .config
            .search
            .learn
    );
    let e = error(r#"{"search": {"learn": 1}}"#);
    assert!(e.contains("search.learn"), "{e}");
    let off = parse(r#"{"search": {"semantic": false}}"#)?;
    assert!(!off.config.search.semantic);
    let e = error(r#"{"search": {"semantic": "no"}}"#);
    assert!(e.contains("search.semantic"), "{e}");
    let e = error(r#"{"search": {"semnatic": false}}"#);
    assert!(
        e.contains("search.semnatic") && e.contains("unknown key"),
        "{e}"
    );
    // ONNX Runtime's threads for one query: 1 unless said, 1 to 16.
    assert_eq!(parse("{}")?.config.search.onnx_threads, 1);
    let two = parse(r#"{"search": {"onnx_threads": 2}}"#)?;
    assert_eq!(two.config.search.onnx_threads, 2);
    for bad in ["0", "17", "\"2\"", "1.5"] {
        let e = error(&format!(r#"{{"search": {{"onnx_threads": {bad}}}}}"#));
        assert!(
            e.contains("search.onnx_threads") && e.contains("from 1 to 16"),
            "{e}"
        );
    }
    Ok(())
}

#[test]
fn a_rule_for_a_server_not_configured_is_a_warning() -> Result<(), ConfigError> {
    let parsed = parse(
        r#"{"mcpServers": {"memory": {"command": "x"}},
            "policy": {"rules": {"memroy.delete_entities": "deny", "memory.create_*": "ask", "*.delete_*": "deny"},
                       "budgets": {"githbu": 3}}}"#,
    )?;
    let keys: Vec<&str> = parsed.warnings.iter().map(|w| w.key.as_str()).collect();
    assert_eq!(
        keys,
        [
            "policy.rules.memroy.delete_entities",
            "policy.budgets.githbu"
        ],
        "{:?}",
        parsed.warnings
    );
    assert!(
        parsed.warnings[0]
            .message
            .contains("the servers are memory")
    );
    Ok(())
}

#[test]
fn a_key_named_twice_is_refused_with_its_line() {
    let text = error("{\"policy\": {\"rules\": {\n\"a.b\": \"deny\",\n\"a.b\": \"allow\"}}}");
    assert!(
        text.contains("\"a.b\" appears twice") && text.contains("line 3"),
        "{text}"
    );
}

#[test]
fn disk_quota_mode_is_read_and_checked() -> Result<(), ConfigError> {
    let parsed = parse_str(
        r#"{"sandbox": {"disk_quota_mode": "kernel"}}"#,
        Path::new("mcp_config.json"),
        &|_| None,
    )?;
    assert_eq!(
        parsed.config.sandbox.disk_quota_mode,
        cem_config::DiskQuotaMode::Kernel
    );
    assert_eq!(
        cem_config::Config::default().sandbox.disk_quota_mode,
        cem_config::DiskQuotaMode::Auto
    );
    let bad = error(r#"{"sandbox": {"disk_quota_mode": "quota"}}"#);
    assert!(
        bad.contains(
            r#"sandbox.disk_quota_mode: expected "auto", "kernel" or "watchdog", got "quota""#
        ),
        "{bad}"
    );
    Ok(())
}
