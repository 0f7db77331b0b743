//! Upstream errors, always naming the server.

#[derive(Debug, Clone, thiserror::Error)]
pub enum UpstreamError {
    #[error("no upstream server named '{0}'; list_tool_categories shows the configured ones")]
    UnknownServer(String),
    #[error("upstream server '{0}' is disabled in the config")]
    Disabled(String),
    #[error("upstream server '{server}' could not be started or reached: {cause}")]
    Connect { server: String, cause: String },
    #[error("upstream server '{server}' did not answer {what} within {seconds} s")]
    Timeout {
        server: String,
        what: String,
        seconds: u64,
    },
    #[error("upstream server '{server}' failed: {cause}")]
    Call { server: String, cause: String },
    /// The server wants this person signed in (a `401`), or signed in with
    /// more scope (a `403 insufficient_scope`): the host asks the person.
    #[error("{}", sign_in_words(server, *step_up, why))]
    SignInRequired {
        server: String,
        /// The `WWW-Authenticate` it answered with, when it did.
        challenge: Option<String>,
        step_up: bool,
        why: String,
    },
}

fn sign_in_words(server: &str, step_up: bool, why: &str) -> String {
    let what = if step_up {
        "more access than this person's sign-in gives"
    } else {
        "this person to sign in"
    };
    let why = if why.is_empty() {
        String::new()
    } else {
        format!(" ({why})")
    };
    format!(
        "upstream server '{server}' needs {what}{why}. The person signs in in their browser: \
         from a client that supports URL elicitation the call asks them; otherwise they run \
         `code-execution-mcp auth login {server}` and the code runs again"
    )
}

impl UpstreamError {
    pub fn server(&self) -> &str {
        match self {
            UpstreamError::UnknownServer(s) | UpstreamError::Disabled(s) => s,
            UpstreamError::Connect { server, .. }
            | UpstreamError::Timeout { server, .. }
            | UpstreamError::Call { server, .. }
            | UpstreamError::SignInRequired { server, .. } => server,
        }
    }
}
