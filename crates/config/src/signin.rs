//! How people sign in to upstream servers (issue 58): per server, whose
//! credential a call carries (`auth`) and the OAuth client it signs in as
//! (`oauth`); and the `signin` section, where credentials are sealed and
//! where a person's browser comes back to.

use std::path::PathBuf;

use serde::Serialize;

use crate::Secret;

/// Whose credential an `http` or `sse` server's calls carry (`auth`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum UpstreamAuth {
    /// Each person's own, once the server asks for sign-in (a `401` with
    /// a Bearer challenge) or a person gave a key: the default.
    #[default]
    PerPerson,
    /// The operator's, signed in once (`auth login` as the local user),
    /// for everyone: one identity at the upstream, as with `headers`.
    Shared,
    /// No sign-in: the configured `headers` alone (a 401 is an error).
    None,
}

impl UpstreamAuth {
    pub fn as_str(self) -> &'static str {
        match self {
            UpstreamAuth::PerPerson => "per-person",
            UpstreamAuth::Shared => "shared",
            UpstreamAuth::None => "none",
        }
    }
}

/// A server's `oauth` object: a client registered with its authorization
/// server out of band (else a client metadata document or dynamic
/// registration), and scopes to ask for beyond what the server names.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UpstreamOAuth {
    pub client_id: Option<String>,
    pub client_secret: Option<Secret>,
    pub scopes: Vec<String>,
    /// The header a person's own API key is sent in (`auth login SERVER
    /// --api-key`), for a server that takes keys; None: keys are refused.
    pub api_key_header: Option<String>,
}

/// The `signin` section.
#[derive(Debug, Clone, PartialEq)]
pub struct SignInConfig {
    /// The key credentials are sealed with, as 64 hex digits (usually
    /// `"${VAR}"`); `CODE_EXECUTION_MCP_TOKEN_KEY` wins over it.
    pub token_key: Option<Secret>,
    /// A file holding that key (mode 600).
    pub token_key_file: Option<PathBuf>,
    /// Where people's browsers reach this server (`https://mcp.example.com`):
    /// the redirect is `<public_url>/oauth/callback` and the client
    /// metadata document `<public_url>/oauth/client.json`. None: the
    /// listener's own address (loopback for stdio and the CLI).
    pub public_url: Option<url::Url>,
    /// How long a call waits for its person to sign in.
    pub timeout_seconds: u64,
    /// The name a dynamically registered client gives.
    pub client_name: String,
}

impl Default for SignInConfig {
    fn default() -> Self {
        Self {
            token_key: None,
            token_key_file: None,
            public_url: None,
            timeout_seconds: 300,
            client_name: "code-execution-mcp".into(),
        }
    }
}
