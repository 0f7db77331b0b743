//! Who may use the server over HTTP (`auth`) and how much each of them may
//! use (`quotas`).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::Secret;

/// What a caller may do. An OAuth access token grants abilities through
/// its scopes (see [`OAuthConfig::scope_of`]); a static token grants all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Ability {
    /// Find tools and skills: search_tools, get_tool_definition,
    /// list_tool_categories, list_skills, load_skill, get_execution_stats.
    ToolsRead,
    /// Run code (and through it call upstream tools): execute_code,
    /// sanitize_pii, restore_pii.
    Execute,
    /// read_workspace_file, list_workspace_files.
    WorkspaceRead,
    /// write_workspace_file.
    WorkspaceWrite,
    /// save_skill, delete_skill.
    SkillsWrite,
    /// Everything above.
    Admin,
}

impl Ability {
    pub const ALL: [Ability; 6] = [
        Ability::ToolsRead,
        Ability::Execute,
        Ability::WorkspaceRead,
        Ability::WorkspaceWrite,
        Ability::SkillsWrite,
        Ability::Admin,
    ];

    /// The config spelling, which is also the default scope name.
    pub fn as_str(self) -> &'static str {
        match self {
            Ability::ToolsRead => "tools:read",
            Ability::Execute => "execute",
            Ability::WorkspaceRead => "workspace:read",
            Ability::WorkspaceWrite => "workspace:write",
            Ability::SkillsWrite => "skills:write",
            Ability::Admin => "admin",
        }
    }

    pub fn parse(text: &str) -> Option<Ability> {
        Ability::ALL.into_iter().find(|a| a.as_str() == text)
    }

    /// The ability a call of our tool `name` needs (`None`: no such tool;
    /// the handler answers that itself).
    pub fn for_tool(name: &str) -> Option<Ability> {
        Some(match name {
            "search_tools"
            | "get_tool_definition"
            | "list_tool_categories"
            | "list_skills"
            | "load_skill"
            | "get_execution_stats" => Ability::ToolsRead,
            "execute_code" | "sanitize_pii" | "restore_pii" => Ability::Execute,
            "read_workspace_file" | "list_workspace_files" => Ability::WorkspaceRead,
            "write_workspace_file" => Ability::WorkspaceWrite,
            "save_skill" | "delete_skill" => Ability::SkillsWrite,
            _ => return None,
        })
    }
}

/// The `auth` section. With none of it set, HTTP serves one local user
/// (loopback only) exactly as before.
#[derive(Debug, Clone, Default)]
pub struct AuthConfig {
    /// This server's MCP endpoint as clients reach it, e.g.
    /// `https://mcp.example.com/mcp`: the OAuth resource (RFC 8707) that
    /// access tokens must name as their audience, and the `resource` of the
    /// protected resource metadata.
    pub resource: Option<url::Url>,
    /// Static bearer tokens by principal name; each name is its own tenant.
    pub tokens: BTreeMap<String, Secret>,
    /// Access tokens issued by an identity provider.
    pub oauth: Option<OAuthConfig>,
}

impl AuthConfig {
    /// Whether any credential is configured.
    pub fn enabled(&self) -> bool {
        !self.tokens.is_empty() || self.oauth.is_some()
    }
}

/// The `auth.oauth` section: the identity provider this server trusts.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OAuthConfig {
    /// The issuer (`iss`), whose metadata gives the JWKS.
    pub issuer: String,
    /// The key set, when the issuer publishes no metadata.
    pub jwks_uri: Option<String>,
    /// The audience tokens must carry; `auth.resource` when unset.
    pub audience: Option<String>,
    /// Signature algorithms accepted.
    pub algorithms: Vec<String>,
    /// Clock skew allowed on `exp` and `nbf`.
    pub leeway_seconds: u64,
    /// Scope names of abilities whose scope is not the ability's own name
    /// (`{"execute": "mcp.execute"}`).
    pub scopes: BTreeMap<String, String>,
}

impl OAuthConfig {
    /// The scope that grants `ability`.
    pub fn scope_of(&self, ability: Ability) -> &str {
        self.scopes
            .get(ability.as_str())
            .map(String::as_str)
            .unwrap_or(ability.as_str())
    }
}

/// Algorithms accepted when `auth.oauth.algorithms` is unset.
pub const DEFAULT_ALGORITHMS: &[&str] = &["RS256", "ES256"];
/// Algorithms `auth.oauth.algorithms` may name (asymmetric only: a shared
/// secret would let anyone holding it mint tokens).
pub const KNOWN_ALGORITHMS: &[&str] = &[
    "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA",
];

/// The `quotas` section: limits per tenant (`None`: no limit).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct QuotaConfig {
    /// execute_code calls of one tenant running at once.
    pub concurrent_executions: Option<u64>,
    /// execute_code calls one tenant may start in any 60 seconds.
    pub executions_per_minute: Option<u64>,
    /// Bytes one tenant's workspace may hold.
    pub workspace_bytes: Option<u64>,
    /// Interpreter sessions (`session_id`) one tenant may keep at once.
    pub sessions: Option<u64>,
    /// HTTP requests one principal may make in any 60 seconds (429 with
    /// `Retry-After` beyond it).
    pub requests_per_minute: Option<u64>,
}

/// The `store` section: where the state nodes share lives.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StoreConfig {
    /// `postgres://…`: skills, workspace files, vaults, audit records, pins,
    /// tool lists and quota counters live in PostgreSQL, so several nodes
    /// behind a load balancer serve one consistent set of tenants. Unset:
    /// the data directory alone (one machine).
    pub url: Option<crate::Secret>,
}
