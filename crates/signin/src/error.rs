//! What goes wrong signing a person in.

/// What goes wrong signing in, in words a person (never the model: these
/// hold no URL, code or token) can act on.
#[derive(Debug, thiserror::Error)]
pub enum SignInError {
    #[error(
        "credentials cannot be stored: {0}. Set CODE_EXECUTION_MCP_TOKEN_KEY to 64 hex digits \
         (openssl rand -hex 32) or signin.token_key_file, and restart"
    )]
    NoStore(String),
    #[error("server '{0}' is not an http or sse server: there is nothing to sign in to")]
    NotRemote(String),
    #[error("server '{0}' has \"auth\": \"none\": it takes no sign-in")]
    NoAuth(String),
    #[error(
        "the authorization server of '{server}' could not be reached or understood: {cause}. \
         Check that it is up and that mcpServers.{server}.url is right, then sign in again"
    )]
    Discovery { server: String, cause: String },
    #[error(
        "'{0}' publishes neither protected resource metadata nor authorization server metadata, \
         so there is no OAuth sign-in to it; if it takes API keys, set \
         mcpServers.{0}.oauth.api_key_header to the header they go in"
    )]
    NoMetadata(String),
    #[error("'{server}' could not register this server as a client: {cause}. {hint}")]
    Registration {
        server: String,
        cause: String,
        hint: &'static str,
    },
    #[error("the sign-in to '{server}' was declined ({reason}); nothing was stored")]
    Declined { server: String, reason: String },
    #[error(
        "this sign-in link is unknown, was used already or belongs to another sign-in; \
         start the sign-in again"
    )]
    UnknownState,
    #[error("the sign-in to '{server}' took longer than {seconds} s; start it again")]
    Expired { server: String, seconds: u64 },
    #[error(
        "the authorization server of '{server}' did not accept the sign-in: {cause}. Sign in again"
    )]
    Exchange { server: String, cause: String },
    #[error("the credential store failed: {0}")]
    Store(String),
    #[error("{0}")]
    Other(String),
}
