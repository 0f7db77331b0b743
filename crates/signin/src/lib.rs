//! Each person signs in to the upstream servers that ask for it.
//!
//! An `http` or `sse` upstream that answers `401` with a Bearer challenge
//! is an OAuth 2.1 protected resource (the MCP authorization spec). The
//! client side of that flow is rmcp's (`rmcp::transport::auth`: protected
//! resource and authorization server metadata, client registration by
//! metadata document, configured id or dynamic registration, PKCE, the
//! `resource` parameter, the `iss` check, refresh): it is maintained with
//! the protocol, and writing it again would be the riskier choice. What
//! this crate adds is what a team's server needs around it:
//! - credentials per person and upstream, sealed at rest with the
//!   operator's key ([`TokenKey`]), in the data directory or the
//!   deployment's store, with a lock so one refresh token is spent once;
//! - sign-ins waiting for the person's browser to come back, bound to the
//!   person, the upstream and an expiry (the `state`);
//! - nothing that leaves here (errors, logs, summaries) holds a token, a
//!   code or a `state`.

mod directory;
mod error;
mod file;
mod flow;
mod key;
mod loopback;
mod page;
mod pending;
mod revoke;
mod store;

pub use directory::{Directory, callback_key};
pub use error::SignInError;
pub use file::FileBackend;
pub use flow::{Begun, Credential, Logout, Redirect, SignIn, challenge_scope};
pub use key::{KEY_ENV, KeyError, KeySource, TokenKey};
pub use page::{callback_page, key_form_page, key_result_page};
pub use pending::Waiting;
pub use revoke::Revoked;
pub use store::{
    Backend, CredentialId, CredentialRefreshGuard, PersonStore, Record, Secret, StoreError,
    Summary, now,
};

/// The tenant whose credentials a `"shared"` server's calls carry: the
/// operator's (the local user's).
pub const OPERATOR: &str = "local";
