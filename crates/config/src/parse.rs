//! Turns the JSON text of a config file into [`Config`], collecting every
//! problem with the key path it belongs to.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::access::{
    Ability, AuthConfig, DEFAULT_ALGORITHMS, KNOWN_ALGORITHMS, OAuthConfig, QuotaConfig,
    StoreConfig,
};
use crate::expand::expand_noting;
use crate::model::{
    AnswersConfig, AuditConfig, CatalogConfig, Config, DiskQuotaMode, OnDemand, PiiConfig, PiiMode,
    PiiType, SandboxConfig, SearchConfig, ServerConfig, Transport, UpstreamConfig, WorkspaceConfig,
};
use crate::redact::{SecretValues, names_a_credential};
use crate::{ConfigError, Problem, Requirement, Secret};
use cem_policy::{Budget, Decision, Pattern, Policy, Rule};

/// A parsed config plus the warnings worth logging (unknown keys that other
/// clients use, for instance).
#[derive(Debug, Clone)]
pub struct Parsed {
    pub config: Config,
    pub warnings: Vec<Problem>,
}

/// Keys other MCP clients put in server entries; accepted silently.
const FOREIGN_SERVER_KEYS: &[&str] = &[
    // Other clients' per-server timeouts (some in milliseconds); ours is
    // timeout_seconds, so these are ignored rather than misread.
    "timeout",
    "autoApprove",
    "alwaysAllow",
    "description",
    "envFile",
    "transportType",
    "oauth",
];

/// Parses `text` (the contents of `path`) with `lookup` answering `${VAR}`.
pub fn parse_str(
    text: &str,
    path: &Path,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<Parsed, ConfigError> {
    let syntax = |e: serde_json::Error| ConfigError::Syntax {
        path: path.to_path_buf(),
        line: e.line(),
        column: e.column(),
        message: without_position(&e.to_string()),
    };
    serde_json::from_str::<crate::unique::Unique>(text).map_err(syntax)?;
    let root: Value = serde_json::from_str(text).map_err(syntax)?;
    let mut cx = Cx {
        lookup,
        lenient: false,
        problems: Vec::new(),
        warnings: Vec::new(),
        expansions: Vec::new(),
    };
    let config = cx.root(&root);
    if cx.problems.is_empty() {
        Ok(Parsed {
            config,
            warnings: cx.warnings,
        })
    } else {
        Err(ConfigError::Invalid {
            path: path.to_path_buf(),
            problems: cx.problems,
        })
    }
}

struct Cx<'a> {
    lookup: &'a dyn Fn(&str) -> Option<String>,
    /// Set while reading a disabled server: unresolved `${VAR}` stays as written.
    lenient: bool,
    problems: Vec<Problem>,
    warnings: Vec<Problem>,
    /// Each `${VAR}` expanded so far: its name and the value it gave.
    expansions: Vec<(String, String)>,
}

impl Cx<'_> {
    fn problem(&mut self, key: impl Into<String>, message: impl Into<String>) {
        self.problems.push(Problem {
            key: key.into(),
            message: message.into(),
        });
    }

    fn warn(&mut self, key: impl Into<String>, message: impl Into<String>) {
        self.warnings.push(Problem {
            key: key.into(),
            message: message.into(),
        });
    }

    fn root(&mut self, root: &Value) -> Config {
        let mut config = Config::default();
        let Some(obj) = root.as_object() else {
            self.problem(
                "",
                format!(
                    "expected a JSON object at the top level, got {}",
                    kind(root)
                ),
            );
            return config;
        };
        for (key, value) in obj {
            match key.as_str() {
                // VS Code writes "servers" (and "inputs" for prompts).
                "mcpServers" | "servers" => config.servers.extend(self.servers(value)),
                "inputs" => {}
                "sandbox" => config.sandbox = self.sandbox(value),
                "pii" => config.pii = self.pii(value),
                "workspace" => config.workspace = self.workspace(value),
                "upstream" => config.upstream = self.upstream(value),
                "policy" => (config.policy, config.audit) = self.policy(value),
                "search" => config.search = self.search(value),
                "catalog" => config.catalog = self.catalog(value),
                "answers" => config.answers = self.answers(value),
                "metrics" => config.metrics = self.metrics(value),
                "http" => config.http = self.http(value),
                "auth" => config.auth = self.auth(value),
                "quotas" => config.quotas = self.quotas(value),
                "store" => config.store = self.store(value),
                "signin" => config.signin = self.signin(value),
                "tools_registry" => {
                    config.tools_registry =
                        self.expanded("tools_registry", value).map(PathBuf::from)
                }
                other => self.warn(other, "unknown top-level key, ignored"),
            }
        }
        self.rules_name_configured_servers(&config);
        config.secrets = self.secrets(&config);
        config
    }

    /// Everything in `config` that must not leave the host (see
    /// [`crate::Redactor`]).
    fn secrets(&self, config: &Config) -> crate::Redactor {
        let mut v = SecretValues::default();
        for (name, value) in &self.expansions {
            v.add(value, names_a_credential(name));
        }
        for server in config.servers.values() {
            match &server.transport {
                Transport::Stdio {
                    command, args, env, ..
                } => {
                    v.add_keys_in(command);
                    args.iter().for_each(|a| v.add_keys_in(a));
                    for (key, value) in env {
                        v.add(value.expose(), names_a_credential(key));
                    }
                }
                Transport::Http { url, headers } | Transport::Sse { url, headers } => {
                    v.add_url(url);
                    for (name, value) in headers {
                        v.add_header(name, value.expose());
                    }
                }
            }
        }
        for token in config.auth.tokens.values() {
            v.add(token.expose(), true);
        }
        for server in config.servers.values() {
            if let Some(secret) = &server.oauth.client_secret {
                v.add(secret.expose(), true);
            }
        }
        if let Some(key) = &config.signin.token_key {
            v.add(key.expose(), true);
        }
        if let Some(store) = &config.store.url
            && let Ok(url) = url::Url::parse(store.expose())
        {
            v.add_url(&url);
        }
        v.compile()
    }

    /// A rule or budget for a server that is not configured applies to
    /// nothing; a typo in a `deny` rule must not pass unnoticed.
    fn rules_name_configured_servers(&mut self, config: &Config) {
        let servers: Vec<&str> = config.servers.keys().map(String::as_str).collect();
        let configured = if servers.is_empty() {
            "no server is configured".to_string()
        } else {
            format!("the servers are {}", servers.join(", "))
        };
        let policy = &config.policy;
        let patterns = policy
            .rules
            .iter()
            .map(|r| ("policy.rules", &r.pattern))
            .chain(
                policy
                    .budgets
                    .iter()
                    .map(|b| ("policy.budgets", &b.pattern)),
            );
        for (section, pattern) in patterns {
            if pattern.names_none_of(servers.iter().copied()) {
                self.warn(
                    format!("{section}.{pattern}"),
                    format!("names no configured server, so it applies to nothing ({configured})"),
                );
            }
        }
    }

    fn servers(&mut self, value: &Value) -> BTreeMap<String, ServerConfig> {
        let mut servers = BTreeMap::new();
        let Some(obj) = self.object("mcpServers", value) else {
            return servers;
        };
        for (name, entry) in obj {
            let key = format!("mcpServers.{name}");
            if !valid_server_name(name) {
                let disabled = entry
                    .get("disabled")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                if disabled {
                    self.warn(
                        &key,
                        "not a valid server name; ignored because the server is disabled",
                    );
                    continue;
                }
                self.problem(
                    &key,
                    "server names may use letters, digits, '_' and '-' (1 to 64 characters), \
                     because they name Python modules and prefix tool names",
                );
                continue;
            }
            if name.eq_ignore_ascii_case("skills") {
                // `skills` is the catalog's category of saved skills and the
                // sandbox's `skills` package.
                self.problem(
                    &key,
                    "the name 'skills' is reserved for saved skills; give this server another name",
                );
                continue;
            }
            if let Some(server) = self.server(&key, name, entry) {
                servers.insert(name.clone(), server);
            }
        }
        servers
    }

    fn server(&mut self, key: &str, name: &str, value: &Value) -> Option<ServerConfig> {
        let obj = self.object(key, value)?;
        let disabled = match obj.get("disabled") {
            Some(v) => self.boolean(&format!("{key}.disabled"), v).unwrap_or(false),
            None => false,
        };
        // A disabled server is kept as written: a missing ${VAR} in it is
        // no reason to refuse the whole file.
        let before = self.problems.len();
        self.lenient = disabled;
        let parsed = self.server_fields(key, name, obj, disabled);
        self.lenient = false;
        if disabled {
            // A disabled server is never started, so its mistakes are worth
            // a warning, not a refusal of the whole file.
            for mut p in self.problems.split_off(before) {
                p.message
                    .push_str(" (server is disabled, so this is only a warning)");
                self.warnings.push(p);
            }
        }
        parsed
    }

    fn server_fields(
        &mut self,
        key: &str,
        name: &str,
        obj: &Map<String, Value>,
        disabled: bool,
    ) -> Option<ServerConfig> {
        let declared = match obj.get("type") {
            Some(v) => {
                let ty = self.string(&format!("{key}.type"), v)?;
                match ty.as_str() {
                    "stdio" => Some("stdio"),
                    "http" | "streamable-http" | "streamable_http" | "streamableHttp" => {
                        Some("http")
                    }
                    "sse" => Some("sse"),
                    other => {
                        self.problem(
                            format!("{key}.type"),
                            format!("unknown transport \"{other}\"; expected \"stdio\", \"http\" or \"sse\""),
                        );
                        return None;
                    }
                }
            }
            None => None,
        };
        let ty = match declared {
            Some(ty) => ty,
            None if obj.contains_key("command") => "stdio",
            None if obj.contains_key("url") => {
                // The legacy SSE transport's endpoint is conventionally /sse.
                let sse = obj
                    .get("url")
                    .and_then(Value::as_str)
                    .is_some_and(|u| u.trim_end_matches('/').ends_with("/sse"));
                if sse { "sse" } else { "http" }
            }
            None => {
                self.problem(
                    key,
                    "a server needs \"command\" (stdio) or \"url\" (http or sse)",
                );
                return None;
            }
        };
        for field in obj.keys() {
            let known = match field.as_str() {
                "type" | "disabled" | "timeout_seconds" => true,
                "command" | "args" | "env" | "cwd" | "shared" => ty == "stdio",
                "url" | "headers" | "auth" | "oauth" => ty != "stdio",
                _ => false,
            };
            if known {
                continue;
            }
            let is_transport_field = [
                "command", "args", "env", "cwd", "shared", "url", "headers", "auth", "oauth",
            ]
            .contains(&field.as_str());
            if is_transport_field {
                self.problem(
                    format!("{key}.{field}"),
                    format!("\"{field}\" does not apply to {} {ty} server", article(ty)),
                );
            } else if !FOREIGN_SERVER_KEYS.contains(&field.as_str()) {
                self.warn(format!("{key}.{field}"), "unknown key, ignored");
            }
        }
        let timeout_seconds = match obj.get("timeout_seconds") {
            Some(v) => self.positive(&format!("{key}.timeout_seconds"), v, 1, 86_400, "seconds"),
            None => None,
        };
        let shared = match obj.get("shared") {
            Some(v) => self.boolean(&format!("{key}.shared"), v).unwrap_or(false),
            None => false,
        };
        let auth = match obj.get("auth") {
            Some(v) => self.upstream_auth(&format!("{key}.auth"), v),
            None => crate::UpstreamAuth::default(),
        };
        let oauth = match obj.get("oauth") {
            Some(v) => self.upstream_oauth(&format!("{key}.oauth"), v),
            None => crate::UpstreamOAuth::default(),
        };
        let transport = match ty {
            "stdio" => self.stdio(key, obj)?,
            _ => self.remote(key, ty, obj)?,
        };
        Some(ServerConfig {
            name: name.to_string(),
            transport,
            disabled,
            timeout_seconds,
            shared,
            auth,
            oauth,
        })
    }

    fn stdio(&mut self, key: &str, obj: &Map<String, Value>) -> Option<Transport> {
        let Some(command) = obj.get("command") else {
            self.problem(key, "a stdio server needs \"command\"");
            return None;
        };
        let command = self.expanded(&format!("{key}.command"), command)?;
        if command.trim().is_empty() {
            self.problem(format!("{key}.command"), "must not be empty");
            return None;
        }
        let args = match obj.get("args") {
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .filter_map(|(i, v)| self.expanded(&format!("{key}.args[{i}]"), v))
                .collect(),
            Some(other) => {
                self.problem(
                    format!("{key}.args"),
                    format!("expected an array of strings, got {}", kind(other)),
                );
                Vec::new()
            }
            None => Vec::new(),
        };
        let env = match obj.get("env") {
            Some(v) => self.string_map(&format!("{key}.env"), v),
            None => BTreeMap::new(),
        };
        let cwd = match obj.get("cwd") {
            Some(v) => self.expanded(&format!("{key}.cwd"), v).map(PathBuf::from),
            None => None,
        };
        Some(Transport::Stdio {
            command,
            args,
            env,
            cwd,
        })
    }

    fn remote(&mut self, key: &str, ty: &str, obj: &Map<String, Value>) -> Option<Transport> {
        let Some(url) = obj.get("url") else {
            self.problem(key, format!("an {ty} server needs \"url\""));
            return None;
        };
        let raw = url.as_str().unwrap_or_default().to_string();
        let text = self.expanded(&format!("{key}.url"), url)?;
        let url = match url::Url::parse(&text) {
            Ok(url) if matches!(url.scheme(), "http" | "https") => url,
            Ok(url) => {
                self.problem(
                    format!("{key}.url"),
                    format!(
                        "expected an http:// or https:// URL, got scheme \"{}\"",
                        url.scheme()
                    ),
                );
                return None;
            }
            Err(e) => {
                // Quote the URL as written: the expanded one may hold a secret.
                self.problem(
                    format!("{key}.url"),
                    format!("not a valid URL ({e}): \"{raw}\""),
                );
                return None;
            }
        };
        let headers = match obj.get("headers") {
            Some(v) => self.string_map(&format!("{key}.headers"), v),
            None => BTreeMap::new(),
        };
        Some(if ty == "sse" {
            Transport::Sse { url, headers }
        } else {
            Transport::Http { url, headers }
        })
    }

    fn sandbox(&mut self, value: &Value) -> SandboxConfig {
        let mut s = SandboxConfig::default();
        let Some(obj) = self.object("sandbox", value) else {
            return s;
        };
        for (field, v) in obj {
            let key = format!("sandbox.{field}");
            match field.as_str() {
                "timeout_seconds" => {
                    s.timeout_seconds = self
                        .positive(&key, v, 1, 3600, "seconds")
                        .unwrap_or(s.timeout_seconds)
                }
                "memory_mb" => {
                    s.memory_mb = self
                        .positive(&key, v, 16, 1 << 20, "megabytes")
                        .unwrap_or(s.memory_mb)
                }
                "max_timeout_seconds" => {
                    s.max_timeout_seconds = self
                        .positive(&key, v, 1, 86_400, "seconds")
                        .unwrap_or(s.max_timeout_seconds)
                }
                "max_tool_calls" => {
                    s.max_tool_calls = self
                        .positive(&key, v, 1, 1_000_000, "calls")
                        .unwrap_or(s.max_tool_calls)
                }
                "tenant_idle_seconds" => {
                    s.tenant_idle_seconds = self
                        .positive(&key, v, 1, 7 * 86_400, "seconds")
                        .unwrap_or(s.tenant_idle_seconds)
                }
                "tenant_cpu_percent" => {
                    s.tenant_cpu_percent = self
                        .positive(&key, v, 1, 100, "percent")
                        .and_then(|n| u32::try_from(n).ok())
                        .unwrap_or(s.tenant_cpu_percent)
                }
                "tenant_disk_mb_per_second" => {
                    s.tenant_disk_mb_per_second = self
                        .positive(&key, v, 0, 1_000_000, "MB a second")
                        .unwrap_or(s.tenant_disk_mb_per_second)
                }
                "max_host_requests" => {
                    s.max_host_requests = self
                        .positive(&key, v, 1, 1_000_000, "requests")
                        .unwrap_or(s.max_host_requests)
                }
                "max_concurrent" => {
                    s.max_concurrent = self
                        .positive(&key, v, 1, 1024, "executions")
                        .and_then(|n| u32::try_from(n).ok())
                        .unwrap_or(s.max_concurrent)
                }
                "disk_quota_mb" => {
                    s.disk_quota_mb = self
                        .positive(&key, v, 1, 1 << 30, "megabytes")
                        .unwrap_or(s.disk_quota_mb)
                }
                "max_memory_mb" => {
                    s.max_memory_mb = self
                        .positive(&key, v, 32, 1 << 20, "megabytes")
                        .unwrap_or(s.max_memory_mb)
                }
                "max_sessions" => {
                    s.max_sessions = self
                        .positive(&key, v, 1, 100_000, "sessions")
                        .and_then(|n| u32::try_from(n).ok())
                        .unwrap_or(s.max_sessions)
                }
                "pool_size" => {
                    s.pool_size = self
                        .positive(&key, v, 0, 64, "interpreters")
                        .and_then(|n| u32::try_from(n).ok())
                        .or(s.pool_size)
                }
                "max_output_chars" => {
                    s.max_output_chars = self
                        .positive(&key, v, 100, 10_000_000, "characters")
                        .unwrap_or(s.max_output_chars)
                }
                "session_idle_seconds" => {
                    s.session_idle_seconds = self
                        .positive(&key, v, 1, 7 * 86_400, "seconds")
                        .unwrap_or(s.session_idle_seconds)
                }
                "python" => {
                    if let Some(p) = self.expanded(&key, v) {
                        if Path::new(&p).is_absolute() {
                            s.python = PathBuf::from(p);
                        } else {
                            self.problem(
                                &key,
                                format!(
                                    "expected an absolute path to a Python interpreter, got \"{p}\""
                                ),
                            );
                        }
                    }
                }
                "network" => s.network = self.boolean(&key, v).unwrap_or(s.network),
                "zygote" => s.zygote = self.boolean(&key, v).unwrap_or(s.zygote),
                "packages" => s.packages = self.requirements(&key, v),
                "allow_source_builds" => {
                    s.allow_source_builds = self.boolean(&key, v).unwrap_or(s.allow_source_builds)
                }
                "disk_quota_mode" => match self.string(&key, v).as_deref() {
                    Some("auto") => s.disk_quota_mode = DiskQuotaMode::Auto,
                    Some("kernel") => s.disk_quota_mode = DiskQuotaMode::Kernel,
                    Some("watchdog") => s.disk_quota_mode = DiskQuotaMode::Watchdog,
                    Some(other) => self.problem(
                        &key,
                        format!("expected \"auto\", \"kernel\" or \"watchdog\", got \"{other}\""),
                    ),
                    None => {}
                },
                "on_demand" => match self.string(&key, v).as_deref() {
                    Some("off") => s.on_demand = OnDemand::Off,
                    Some("allowlist") => s.on_demand = OnDemand::Allowlist,
                    Some("any") => s.on_demand = OnDemand::Any,
                    Some(other) => self.problem(
                        &key,
                        format!("expected \"off\", \"allowlist\" or \"any\", got \"{other}\""),
                    ),
                    None => {}
                },
                "allowed_packages" => {
                    // Names only: the allowlist says which packages, the
                    // agent's request says which version.
                    s.allowed_packages = self
                        .requirements(&key, v)
                        .into_iter()
                        .map(|r| r.name().to_string())
                        .collect()
                }
                "installer" => {
                    if let Some(p) = self.expanded(&key, v) {
                        if Path::new(&p).is_absolute() {
                            s.installer = Some(PathBuf::from(p));
                        } else {
                            self.problem(
                                &key,
                                format!("expected an absolute path to the uv binary, got \"{p}\""),
                            );
                        }
                    }
                }
                "install_timeout_seconds" => {
                    s.install_timeout_seconds = self
                        .positive(&key, v, 10, 86_400, "seconds")
                        .unwrap_or(s.install_timeout_seconds)
                }
                "allow_unsandboxed" => {
                    s.allow_unsandboxed = self.boolean(&key, v).unwrap_or(s.allow_unsandboxed)
                }
                _ => self.unknown(&key, SANDBOX_KEYS),
            }
        }
        s
    }

    fn pii(&mut self, value: &Value) -> PiiConfig {
        let mut p = PiiConfig::default();
        let Some(obj) = self.object("pii", value) else {
            return p;
        };
        for (field, v) in obj {
            let key = format!("pii.{field}");
            match field.as_str() {
                "mode" => match self.string(&key, v).as_deref() {
                    Some("auto") => p.mode = PiiMode::Auto,
                    Some("manual") => p.mode = PiiMode::Manual,
                    Some("off") => p.mode = PiiMode::Off,
                    Some(other) => self.problem(
                        &key,
                        format!(
                            "unknown mode \"{other}\"; expected \"auto\", \"manual\" or \"off\""
                        ),
                    ),
                    None => {}
                },
                "types" => {
                    if let Some(list) = self.string_list(&key, v) {
                        let mut types = Vec::new();
                        for (i, name) in list.iter().enumerate() {
                            match PiiType::from_name(name) {
                                Some(t) if !types.contains(&t) => types.push(t),
                                Some(_) => {}
                                None => self.problem(
                                    format!("{key}[{i}]"),
                                    format!(
                                        "unknown type \"{name}\"; expected one of {}",
                                        PiiType::ALL.map(|t| t.name()).join(", ")
                                    ),
                                ),
                            }
                        }
                        p.types = types;
                    }
                }
                "restore_to" => {
                    if let Some(list) = self.string_list(&key, v) {
                        p.restore_to = list;
                    }
                }
                _ => self.unknown(&key, PII_KEYS),
            }
        }
        p
    }

    fn policy(&mut self, value: &Value) -> (Policy, AuditConfig) {
        let mut p = Policy::default();
        let mut audit = AuditConfig::default();
        let Some(obj) = self.object("policy", value) else {
            return (p, audit);
        };
        for (field, v) in obj {
            let key = format!("policy.{field}");
            match field.as_str() {
                "default" => {
                    if let Some(d) = self.decision(&key, v) {
                        p.default = d;
                    }
                }
                "on_change" => match self.decision(&key, v) {
                    Some(Decision::Allow) => self.problem(
                        &key,
                        "\"allow\" would let a changed tool through unseen; expected \"ask\" or \"deny\"",
                    ),
                    Some(d) => p.on_change = d,
                    None => {}
                },
                "rules" => {
                    let Some(rules) = self.object(&key, v) else {
                        continue;
                    };
                    for (pattern, decision) in rules {
                        let rule_key = format!("{key}.{pattern}");
                        let pattern = match Pattern::parse(pattern) {
                            Ok(pattern) => pattern,
                            Err(e) => {
                                self.problem(&rule_key, e.to_string());
                                continue;
                            }
                        };
                        if let Some(decision) = self.decision(&rule_key, decision) {
                            p.rules.push(Rule { pattern, decision });
                        }
                    }
                }
                "budgets" => {
                    let Some(budgets) = self.object(&key, v) else {
                        continue;
                    };
                    for (pattern, limit) in budgets {
                        let budget_key = format!("{key}.{pattern}");
                        let pattern = match Pattern::parse(pattern) {
                            Ok(pattern) => pattern,
                            Err(e) => {
                                self.problem(&budget_key, e.to_string());
                                continue;
                            }
                        };
                        if let Some(limit) = self.positive(&budget_key, limit, 0, 1_000_000, "calls") {
                            p.budgets.push(Budget { pattern, limit });
                        }
                    }
                }
                "approval_timeout_seconds" => {
                    p.approval_timeout_seconds = self
                        .positive(&key, v, 1, 3600, "seconds")
                        .unwrap_or(p.approval_timeout_seconds)
                }
                "audit" => {
                    let Some(a) = self.object(&key, v) else {
                        continue;
                    };
                    for (field, v) in a {
                        let key = format!("policy.audit.{field}");
                        match field.as_str() {
                            "path" => {
                                if let Some(path) = self.expanded(&key, v) {
                                    if path.is_empty() {
                                        self.problem(&key, "expected a file path, got an empty string");
                                    } else {
                                        audit.path = Some(PathBuf::from(path));
                                    }
                                }
                            }
                            "max_bytes" => {
                                audit.max_bytes = self
                                    .positive(&key, v, 4096, 1 << 40, "bytes")
                                    .unwrap_or(audit.max_bytes)
                            }
                            "keep" => {
                                audit.keep = self
                                    .positive(&key, v, 1, 1000, "files")
                                    .map(|n| n as u32)
                                    .unwrap_or(audit.keep)
                            }
                            _ => self.unknown(&key, &["path", "max_bytes", "keep"]),
                        }
                    }
                }
                _ => self.unknown(&key, POLICY_KEYS),
            }
        }
        (p, audit)
    }

    fn decision(&mut self, key: &str, value: &Value) -> Option<Decision> {
        let text = self.string(key, value)?;
        let decision = Decision::parse(&text);
        if decision.is_none() {
            self.problem(
                key,
                format!("unknown decision \"{text}\"; expected \"allow\", \"ask\" or \"deny\""),
            );
        }
        decision
    }

    fn metrics(&mut self, value: &Value) -> crate::MetricsConfig {
        let mut m = crate::MetricsConfig::default();
        let Some(obj) = self.object("metrics", value) else {
            return m;
        };
        for (field, v) in obj {
            let key = format!("metrics.{field}");
            match field.as_str() {
                "listen" => {
                    m.listen = self.string(&key, v).and_then(|s| match s.parse() {
                        Ok(addr) => Some(addr),
                        Err(_) => {
                            self.problem(
                            &key,
                            format!(
                                "expected an address and port such as \"127.0.0.1:9464\", got {s:?}"
                            ),
                        );
                            None
                        }
                    })
                }
                _ => self.unknown(&key, &["listen"]),
            }
        }
        m
    }

    fn http(&mut self, value: &Value) -> crate::HttpConfig {
        let mut h = crate::HttpConfig::default();
        let Some(obj) = self.object("http", value) else {
            return h;
        };
        for (field, v) in obj {
            let key = format!("http.{field}");
            match field.as_str() {
                "header_timeout_seconds" => {
                    h.header_timeout_seconds = self
                        .positive(&key, v, 1, 3600, "seconds")
                        .unwrap_or(h.header_timeout_seconds)
                }
                "request_timeout_seconds" => {
                    h.request_timeout_seconds = self
                        .positive(&key, v, 1, 86_400, "seconds")
                        .unwrap_or(h.request_timeout_seconds)
                }
                "idle_timeout_seconds" => {
                    h.idle_timeout_seconds = self
                        .positive(&key, v, 1, 86_400, "seconds")
                        .unwrap_or(h.idle_timeout_seconds)
                }
                "max_connections" => {
                    h.max_connections = self
                        .positive(&key, v, 1, 10_000_000, "connections")
                        .or(h.max_connections)
                }
                "max_connections_per_peer" => {
                    h.max_connections_per_peer = self
                        .positive(&key, v, 0, 10_000_000, "connections")
                        .unwrap_or(h.max_connections_per_peer)
                }
                _ => self.unknown(&key, HTTP_KEYS),
            }
        }
        if h.header_timeout_seconds > h.request_timeout_seconds {
            self.problem(
                "http.header_timeout_seconds",
                format!(
                    "the headers' {} s is longer than the whole request's {} s \
                     (http.request_timeout_seconds, which counts the headers too); \
                     make it shorter or raise http.request_timeout_seconds",
                    h.header_timeout_seconds, h.request_timeout_seconds
                ),
            );
        }
        h
    }

    fn catalog(&mut self, value: &Value) -> CatalogConfig {
        let mut c = CatalogConfig::default();
        let Some(obj) = self.object("catalog", value) else {
            return c;
        };
        for (field, v) in obj {
            let key = format!("catalog.{field}");
            match field.as_str() {
                "learn_shapes" => c.learn_shapes = self.boolean(&key, v).unwrap_or(c.learn_shapes),
                "discover_at_start" => {
                    c.discover_at_start = self.boolean(&key, v).unwrap_or(c.discover_at_start)
                }
                _ => self.unknown(&key, &["learn_shapes", "discover_at_start"]),
            }
        }
        c
    }

    fn answers(&mut self, value: &Value) -> AnswersConfig {
        let mut a = AnswersConfig::default();
        let Some(obj) = self.object("answers", value) else {
            return a;
        };
        for (field, v) in obj {
            let key = format!("answers.{field}");
            match field.as_str() {
                "max_images" => {
                    a.max_images = self
                        .positive(&key, v, 0, 100, "images")
                        .unwrap_or(a.max_images)
                }
                "max_image_bytes" => {
                    a.max_image_bytes = self
                        .positive(&key, v, 1024, 64 << 20, "bytes")
                        .unwrap_or(a.max_image_bytes)
                }
                "max_image_edge" => {
                    a.max_image_edge = self
                        .positive(&key, v, 16, 8192, "pixels")
                        .and_then(|n| u32::try_from(n).ok())
                        .unwrap_or(a.max_image_edge)
                }
                "max_image_block_bytes" => {
                    a.max_image_block_bytes = self
                        .positive(&key, v, 16 << 10, 16 << 20, "bytes")
                        .unwrap_or(a.max_image_block_bytes)
                }
                "table_rows" => {
                    a.table_rows = self
                        .positive(&key, v, 1, 1000, "rows")
                        .unwrap_or(a.table_rows)
                }
                _ => self.unknown(&key, ANSWERS_KEYS),
            }
        }
        a
    }

    fn search(&mut self, value: &Value) -> SearchConfig {
        let mut s = SearchConfig::default();
        let Some(obj) = self.object("search", value) else {
            return s;
        };
        for (field, v) in obj {
            let key = format!("search.{field}");
            match field.as_str() {
                "semantic" => s.semantic = self.boolean(&key, v).unwrap_or(s.semantic),
                "learn" => s.learn = self.boolean(&key, v).unwrap_or(s.learn),
                "model" => s.model = self.expanded(&key, v).map(PathBuf::from),
                "onnx_runtime" => s.onnx_runtime = self.expanded(&key, v).map(PathBuf::from),
                "onnx_threads" => {
                    s.onnx_threads = self
                        .positive(&key, v, 1, 16, "threads")
                        .map_or(s.onnx_threads, |n| n as usize)
                }
                _ => self.unknown(
                    &key,
                    &["semantic", "learn", "model", "onnx_runtime", "onnx_threads"],
                ),
            }
        }
        s
    }

    fn upstream(&mut self, value: &Value) -> UpstreamConfig {
        let mut u = UpstreamConfig::default();
        let Some(obj) = self.object("upstream", value) else {
            return u;
        };
        for (field, v) in obj {
            let key = format!("upstream.{field}");
            match field.as_str() {
                "timeout_seconds" => {
                    u.timeout_seconds = self
                        .positive(&key, v, 1, 86_400, "seconds")
                        .unwrap_or(u.timeout_seconds)
                }
                "connect_timeout_seconds" => {
                    u.connect_timeout_seconds = self
                        .positive(&key, v, 1, 3600, "seconds")
                        .unwrap_or(u.connect_timeout_seconds)
                }
                "max_tools" => {
                    u.max_tools = self
                        .positive(&key, v, 1, 1_000_000, "tools")
                        .unwrap_or(u.max_tools)
                }
                "max_list_pages" => {
                    u.max_list_pages = self
                        .positive(&key, v, 1, 100_000, "pages")
                        .unwrap_or(u.max_list_pages)
                }
                "max_list_bytes" => {
                    u.max_list_bytes = self
                        .positive(&key, v, 1024, 1 << 30, "bytes")
                        .unwrap_or(u.max_list_bytes)
                }
                "list_changed_interval_seconds" => {
                    u.list_changed_interval_seconds = self
                        .positive(&key, v, 0, 3600, "seconds")
                        .unwrap_or(u.list_changed_interval_seconds)
                }
                "stderr_lines_per_second" => {
                    u.stderr_lines_per_second = self
                        .positive(&key, v, 0, 1_000_000, "lines")
                        .unwrap_or(u.stderr_lines_per_second)
                }
                "stderr_max_bytes" => {
                    u.stderr_max_bytes = self
                        .positive(&key, v, 0, 1 << 40, "bytes")
                        .unwrap_or(u.stderr_max_bytes)
                }
                _ => self.unknown(&key, UPSTREAM_KEYS),
            }
        }
        u
    }

    fn workspace(&mut self, value: &Value) -> WorkspaceConfig {
        let mut w = WorkspaceConfig::default();
        let Some(obj) = self.object("workspace", value) else {
            return w;
        };
        for (field, v) in obj {
            let key = format!("workspace.{field}");
            match field.as_str() {
                "max_file_bytes" => {
                    w.max_file_bytes = self
                        .positive(&key, v, 1, 1 << 40, "bytes")
                        .unwrap_or(w.max_file_bytes)
                }
                _ => self.unknown(&key, WORKSPACE_KEYS),
            }
        }
        w
    }

    fn auth(&mut self, value: &Value) -> AuthConfig {
        let mut a = AuthConfig::default();
        let Some(obj) = self.object("auth", value) else {
            return a;
        };
        for (field, v) in obj {
            let key = format!("auth.{field}");
            match field.as_str() {
                "resource" => {
                    a.resource = self.expanded(&key, v).and_then(|s| self.http_url(&key, &s))
                }
                "tokens" => a.tokens = self.tokens(&key, v),
                "oauth" => a.oauth = self.oauth(&key, v),
                _ => self.unknown(&key, &["resource", "tokens", "oauth"]),
            }
        }
        if a.oauth.is_some() && a.resource.is_none() {
            self.problem(
                "auth.resource",
                "auth.oauth needs auth.resource: this server's MCP URL as clients reach it \
                 (e.g. \"https://mcp.example.com/mcp\"); access tokens must name it as their audience",
            );
        }
        a
    }

    fn http_url(&mut self, key: &str, text: &str) -> Option<url::Url> {
        match url::Url::parse(text) {
            Ok(u) if matches!(u.scheme(), "http" | "https") && u.fragment().is_none() => Some(u),
            Ok(_) => {
                self.problem(
                    key,
                    "expected an http:// or https:// URL without a #fragment",
                );
                None
            }
            Err(e) => {
                self.problem(key, format!("not a URL ({e}): {text:?}"));
                None
            }
        }
    }

    fn tokens(&mut self, key: &str, value: &Value) -> BTreeMap<String, Secret> {
        let tokens = self.string_map(key, value);
        let mut seen: Vec<&str> = Vec::new();
        for (name, token) in &tokens {
            let k = format!("{key}.{name}");
            if !valid_principal(name) {
                self.problem(
                    &k,
                    "a principal's name is 1 to 64 letters, digits, '-', '_' or '.' (it names the tenant's directory)",
                );
            }
            let t = token.expose();
            if t.len() < 16 || t.chars().any(|c| c.is_whitespace() || c.is_control()) {
                self.problem(
                    &k,
                    "a token needs at least 16 characters and no spaces; make one with `openssl rand -hex 32`",
                );
            } else if seen.contains(&t) {
                self.problem(
                    &k,
                    "the same token is given to two principals; give each its own",
                );
            }
            seen.push(t);
        }
        tokens
    }

    fn oauth(&mut self, key: &str, value: &Value) -> Option<OAuthConfig> {
        let obj = self.object(key, value)?;
        let mut issuer = None;
        let mut o = OAuthConfig {
            issuer: String::new(),
            jwks_uri: None,
            audience: None,
            algorithms: DEFAULT_ALGORITHMS.iter().map(|s| s.to_string()).collect(),
            leeway_seconds: 30,
            scopes: BTreeMap::new(),
        };
        for (field, v) in obj {
            let k = format!("{key}.{field}");
            match field.as_str() {
                "issuer" => {
                    issuer = self
                        .expanded(&k, v)
                        .filter(|s| self.http_url(&k, s).is_some())
                }
                "jwks_uri" => {
                    o.jwks_uri = self
                        .expanded(&k, v)
                        .filter(|s| self.http_url(&k, s).is_some())
                }
                "audience" => o.audience = self.expanded(&k, v),
                "algorithms" => {
                    let list = self.string_list(&k, v).unwrap_or_default();
                    for (i, alg) in list.iter().enumerate() {
                        if !KNOWN_ALGORITHMS.contains(&alg.as_str()) {
                            self.problem(
                                format!("{k}[{i}]"),
                                format!(
                                    "unknown or symmetric algorithm {alg:?}; expected one of {}",
                                    KNOWN_ALGORITHMS.join(", ")
                                ),
                            );
                        }
                    }
                    if list.is_empty() {
                        self.problem(&k, "name at least one algorithm, e.g. [\"RS256\"]");
                    }
                    o.algorithms = list;
                }
                "leeway_seconds" => {
                    o.leeway_seconds = self
                        .positive(&k, v, 0, 600, "seconds")
                        .unwrap_or(o.leeway_seconds)
                }
                "scopes" => {
                    let Some(map) = self.object(&k, v) else {
                        continue;
                    };
                    for (ability, scope) in map {
                        let sk = format!("{k}.{ability}");
                        if Ability::parse(ability).is_none() {
                            let names: Vec<&str> =
                                Ability::ALL.iter().map(|a| a.as_str()).collect();
                            self.unknown(&sk, &names);
                            continue;
                        }
                        match self.string(&sk, scope) {
                            Some(s) if !s.is_empty() && !s.contains(' ') => {
                                o.scopes.insert(ability.clone(), s);
                            }
                            Some(_) => self.problem(&sk, "a scope is one non-empty word"),
                            None => {}
                        }
                    }
                }
                _ => self.unknown(
                    &k,
                    &[
                        "issuer",
                        "jwks_uri",
                        "audience",
                        "algorithms",
                        "leeway_seconds",
                        "scopes",
                    ],
                ),
            }
        }
        match issuer {
            Some(i) => o.issuer = i,
            None => {
                if !obj.contains_key("issuer") {
                    self.problem(
                        format!("{key}.issuer"),
                        "missing: the identity provider's issuer URL (the `iss` of its tokens)",
                    );
                }
                return None;
            }
        }
        Some(o)
    }

    fn quotas(&mut self, value: &Value) -> QuotaConfig {
        let mut q = QuotaConfig::default();
        let Some(obj) = self.object("quotas", value) else {
            return q;
        };
        for (field, v) in obj {
            let key = format!("quotas.{field}");
            let slot = match field.as_str() {
                "concurrent_executions" => &mut q.concurrent_executions,
                "executions_per_minute" => &mut q.executions_per_minute,
                "workspace_bytes" => &mut q.workspace_bytes,
                "sessions" => &mut q.sessions,
                "requests_per_minute" => &mut q.requests_per_minute,
                _ => {
                    self.unknown(&key, QUOTA_KEYS);
                    continue;
                }
            };
            if v.is_null() {
                *slot = None;
                continue;
            }
            let (unit, max) = match field.as_str() {
                "workspace_bytes" => ("bytes", 1 << 50),
                "sessions" => ("sessions", 1_000_000),
                "requests_per_minute" => ("requests", 1_000_000),
                _ => ("executions", 1_000_000),
            };
            *slot = self.positive(&key, v, 1, max, unit).or(*slot);
        }
        q
    }

    fn store(&mut self, value: &Value) -> StoreConfig {
        let mut store = StoreConfig::default();
        let Some(obj) = self.object("store", value) else {
            return store;
        };
        for (field, v) in obj {
            match field.as_str() {
                "url" => {
                    let Some(url) = self.expanded("store.url", v) else {
                        continue;
                    };
                    if url.is_empty() {
                        // `"${STORE_URL}"` with the variable set empty: no store.
                        continue;
                    }
                    if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
                        self.problem(
                            "store.url",
                            "expected a PostgreSQL URL (postgres://user:password@host:port/database)",
                        );
                        continue;
                    }
                    store.url = Some(Secret::new(url));
                }
                _ => self.unknown(&format!("store.{field}"), &["url"]),
            }
        }
        store
    }

    fn upstream_auth(&mut self, key: &str, value: &Value) -> crate::UpstreamAuth {
        use crate::UpstreamAuth;
        match value.as_str() {
            Some("per-person") => UpstreamAuth::PerPerson,
            Some("shared") => UpstreamAuth::Shared,
            Some("none") => UpstreamAuth::None,
            _ => {
                self.problem(
                    key,
                    format!(
                        "expected \"per-person\" (each person signs in), \"shared\" (the operator \
                         signs in once for everyone) or \"none\", got {value}"
                    ),
                );
                UpstreamAuth::default()
            }
        }
    }

    fn upstream_oauth(&mut self, key: &str, value: &Value) -> crate::UpstreamOAuth {
        let mut oauth = crate::UpstreamOAuth::default();
        let Some(obj) = self.object(key, value) else {
            return oauth;
        };
        for (field, v) in obj {
            let at = format!("{key}.{field}");
            match field.as_str() {
                "client_id" => oauth.client_id = self.expanded(&at, v).filter(|s| !s.is_empty()),
                "client_secret" => {
                    oauth.client_secret = self
                        .expanded(&at, v)
                        .filter(|s| !s.is_empty())
                        .map(Secret::new)
                }
                "scopes" => oauth.scopes = self.string_list(&at, v).unwrap_or_default(),
                "api_key_header" => match self.string(&at, v) {
                    Some(h) if header_name(&h) => oauth.api_key_header = Some(h),
                    Some(h) => self.problem(&at, format!("{h:?} is not an HTTP header name")),
                    None => {}
                },
                _ => self.unknown(
                    &at,
                    &["client_id", "client_secret", "scopes", "api_key_header"],
                ),
            }
        }
        if oauth.client_secret.is_some() && oauth.client_id.is_none() {
            self.problem(
                format!("{key}.client_secret"),
                "a client_secret needs the client_id it was issued with",
            );
        }
        oauth
    }

    fn signin(&mut self, value: &Value) -> crate::SignInConfig {
        let mut s = crate::SignInConfig::default();
        let Some(obj) = self.object("signin", value) else {
            return s;
        };
        for (field, v) in obj {
            let key = format!("signin.{field}");
            match field.as_str() {
                "token_key" => {
                    s.token_key = self
                        .expanded(&key, v)
                        .filter(|k| !k.is_empty())
                        .map(Secret::new)
                }
                "token_key_file" => s.token_key_file = self.expanded(&key, v).map(PathBuf::from),
                "public_url" => {
                    if let Some(text) = self.expanded(&key, v) {
                        s.public_url = self.http_url(&key, &text);
                    }
                }
                "timeout_seconds" => {
                    s.timeout_seconds = self
                        .positive(&key, v, 10, 3600, "seconds")
                        .unwrap_or(s.timeout_seconds)
                }
                "client_name" => s.client_name = self.string(&key, v).unwrap_or(s.client_name),
                _ => self.unknown(&key, SIGNIN_KEYS),
            }
        }
        s
    }

    // --- typed leaves -------------------------------------------------------

    fn unknown(&mut self, key: &str, expected: &[&str]) {
        self.problem(
            key,
            format!("unknown key; expected one of {}", expected.join(", ")),
        );
    }

    fn object<'v>(&mut self, key: &str, value: &'v Value) -> Option<&'v Map<String, Value>> {
        match value {
            Value::Object(obj) => Some(obj),
            other => {
                self.problem(key, format!("expected an object, got {}", kind(other)));
                None
            }
        }
    }

    fn string(&mut self, key: &str, value: &Value) -> Option<String> {
        match value {
            Value::String(s) => Some(s.clone()),
            other => {
                self.problem(key, format!("expected a string, got {}", kind(other)));
                None
            }
        }
    }

    /// A string with `${VAR}` expanded.
    fn expanded(&mut self, key: &str, value: &Value) -> Option<String> {
        let raw = self.string(key, value)?;
        let mut noted = Vec::new();
        let expanded = expand_noting(&raw, self.lookup, &mut |name, value| {
            noted.push((name.to_string(), value.to_string()))
        });
        self.expansions.extend(noted);
        match expanded {
            Ok(s) => Some(s),
            Err(e) if self.lenient => {
                self.warn(
                    key,
                    format!("{e} (server is disabled, so this is only a warning)"),
                );
                Some(raw)
            }
            Err(e) => {
                self.problem(key, e.to_string());
                None
            }
        }
    }

    fn boolean(&mut self, key: &str, value: &Value) -> Option<bool> {
        match value {
            Value::Bool(b) => Some(*b),
            other => {
                self.problem(key, format!("expected true or false, got {}", kind(other)));
                None
            }
        }
    }

    fn positive(
        &mut self,
        key: &str,
        value: &Value,
        min: u64,
        max: u64,
        unit: &str,
    ) -> Option<u64> {
        match value.as_u64() {
            Some(n) if (min..=max).contains(&n) => Some(n),
            _ => {
                self.problem(
                    key,
                    format!(
                        "expected a whole number of {unit} from {min} to {max}, got {}",
                        short(value)
                    ),
                );
                None
            }
        }
    }

    fn string_list(&mut self, key: &str, value: &Value) -> Option<Vec<String>> {
        let Value::Array(items) = value else {
            self.problem(
                key,
                format!("expected an array of strings, got {}", kind(value)),
            );
            return None;
        };
        Some(
            items
                .iter()
                .enumerate()
                .filter_map(|(i, v)| self.string(&format!("{key}[{i}]"), v))
                .collect(),
        )
    }

    fn requirements(&mut self, key: &str, value: &Value) -> Vec<Requirement> {
        let mut out: Vec<Requirement> = Vec::new();
        let Value::Array(items) = value else {
            self.problem(
                key,
                format!(
                    "expected an array of requirements such as [\"pandas>=2\", \"openpyxl\"], got {}",
                    kind(value)
                ),
            );
            return out;
        };
        for (i, item) in items.iter().enumerate() {
            let key = format!("{key}[{i}]");
            let Some(text) = self.string(&key, item) else {
                continue;
            };
            match Requirement::parse(&text) {
                Ok(r) if out.iter().any(|o| o.name() == r.name()) => self.problem(
                    &key,
                    format!("{} is listed twice; keep one entry per package", r.name()),
                ),
                Ok(r) => out.push(r),
                Err(e) => self.problem(&key, e),
            }
        }
        out
    }

    fn string_map(&mut self, key: &str, value: &Value) -> BTreeMap<String, Secret> {
        let Some(obj) = self.object(key, value) else {
            return BTreeMap::new();
        };
        obj.iter()
            .filter_map(|(k, v)| {
                let key = format!("{key}.{k}");
                let value = match v {
                    // "PORT": 3000 is common; the environment only has strings.
                    Value::Number(n) => Some(n.to_string()),
                    Value::Bool(b) => Some(b.to_string()),
                    _ => self.expanded(&key, v),
                };
                value.map(|s| (k.clone(), Secret::new(s)))
            })
            .collect()
    }
}

const SANDBOX_KEYS: &[&str] = &[
    "timeout_seconds",
    "memory_mb",
    "max_timeout_seconds",
    "max_memory_mb",
    "disk_quota_mb",
    "disk_quota_mode",
    "max_concurrent",
    "max_tool_calls",
    "max_host_requests",
    "tenant_idle_seconds",
    "tenant_cpu_percent",
    "tenant_disk_mb_per_second",
    "python",
    "pool_size",
    "zygote",
    "network",
    "allow_unsandboxed",
    "packages",
    "allow_source_builds",
    "on_demand",
    "allowed_packages",
    "installer",
    "install_timeout_seconds",
    "max_output_chars",
    "session_idle_seconds",
    "max_sessions",
];
const PII_KEYS: &[&str] = &["mode", "types", "restore_to"];
const UPSTREAM_KEYS: &[&str] = &[
    "timeout_seconds",
    "connect_timeout_seconds",
    "max_tools",
    "max_list_pages",
    "max_list_bytes",
    "list_changed_interval_seconds",
    "stderr_lines_per_second",
    "stderr_max_bytes",
];
const POLICY_KEYS: &[&str] = &[
    "default",
    "rules",
    "budgets",
    "on_change",
    "approval_timeout_seconds",
    "audit",
];
const WORKSPACE_KEYS: &[&str] = &["max_file_bytes"];
const ANSWERS_KEYS: &[&str] = &[
    "max_images",
    "max_image_bytes",
    "max_image_edge",
    "max_image_block_bytes",
    "table_rows",
];

const HTTP_KEYS: &[&str] = &[
    "header_timeout_seconds",
    "request_timeout_seconds",
    "idle_timeout_seconds",
    "max_connections",
    "max_connections_per_peer",
];
const SIGNIN_KEYS: &[&str] = &[
    "token_key",
    "token_key_file",
    "public_url",
    "timeout_seconds",
    "client_name",
];
/// Whether `name` is a header name (RFC 9110 token characters).
fn header_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}
const QUOTA_KEYS: &[&str] = &[
    "concurrent_executions",
    "executions_per_minute",
    "workspace_bytes",
    "sessions",
    "requests_per_minute",
];

/// A static token's principal name: it becomes a directory name.
fn valid_principal(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        && !name.starts_with('.')
}

fn article(ty: &str) -> &'static str {
    if ty == "stdio" { "a" } else { "an" }
}

/// serde_json appends " at line L column C", which the error already says.
fn without_position(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(i) => message[..i].to_string(),
        None => message.to_string(),
    }
}

fn valid_server_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A value quoted for an error message, cut short when long.
fn short(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() > 40 {
        format!("{}…", text.chars().take(40).collect::<String>())
    } else {
        text
    }
}
