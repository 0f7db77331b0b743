//! Signing a person in to one upstream, and the credential a connection
//! carries afterwards.
//!
//! [`SignIn::begin`] discovers the upstream's authorization server (from
//! the `401`'s challenge, else the well-known paths), picks a client
//! identity (the configured client, else this server's client metadata
//! document where the authorization server takes one, else dynamic
//! registration) and makes the authorization URL (PKCE S256, `resource`,
//! `state`): rmcp's `AuthorizationSession` does each step. The session
//! waits in [`crate::pending`] until the browser comes back to
//! [`SignIn::complete`], which checks the `state` (bound to the person,
//! the upstream and an expiry) and the `iss`, exchanges the code and
//! seals the tokens for that person alone.

use std::sync::Arc;
use std::time::Duration;

use cem_config::{ServerConfig, Transport};
use rmcp::transport::auth::{
    AuthError, AuthorizationManager, AuthorizationRequest, AuthorizationSession, OAuthClientConfig,
};

use crate::error::SignInError;
use crate::pending::{Pending, Waiting};
use crate::store::{Backend, CredentialId, PersonStore, Record, Secret};

/// How the person's browser comes back.
#[derive(Debug, Clone)]
pub enum Redirect {
    /// `<base>/oauth/callback` on the HTTP listener (or `signin.public_url`).
    Listener(url::Url),
    /// A listener of its own on 127.0.0.1 for this one sign-in (RFC 8252):
    /// stdio and the CLI.
    Loopback,
}

/// A sign-in started: what to show the person, and its end to wait for.
pub struct Begun {
    /// The authorization URL: for the person's browser only (an elicitation
    /// or the terminal), never a result, log, trace or the audit.
    pub url: String,
    /// An opaque id of this sign-in (the elicitation's id): not the state.
    pub id: String,
    pub waiting: Waiting,
}

impl std::fmt::Debug for Begun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Begun").field("id", &self.id).finish()
    }
}

/// A connection's credential.
pub enum Credential {
    /// Refreshed by rmcp's `AuthClient` as it runs out.
    OAuth(Box<AuthorizationManager>),
    /// Sent as `header: value` on every request.
    ApiKey { header: String, value: String },
}

/// What the sign-ins of one server process share.
pub struct SignIn {
    /// Replaced once when the server joins a deployment's store.
    backend: std::sync::RwLock<Result<Arc<dyn Backend>, String>>,
    pending: Pending,
    client_name: String,
    /// `<public_url>/oauth/client.json`, offered where the authorization
    /// server takes client metadata documents (https only).
    client_metadata_url: Option<String>,
    /// How long a sign-in may take.
    pub timeout: Duration,
    /// Where browsers come back: `signin.public_url` or the HTTP
    /// listener's address; unset, a loopback listener per sign-in.
    callback_base: std::sync::OnceLock<url::Url>,
    /// The operator's key, for a store that replaces the first.
    key: Option<Arc<crate::TokenKey>>,
    /// Where a deployment's nodes say which of them waits for a callback.
    directory: std::sync::RwLock<Option<Arc<dyn crate::Directory>>>,
}

impl SignIn {
    /// `backend` is where credentials are sealed, or why there is none.
    pub fn new(
        backend: Result<Arc<dyn Backend>, String>,
        config: &cem_config::SignInConfig,
    ) -> Self {
        let client_metadata_url = config
            .public_url
            .as_ref()
            .filter(|u| u.scheme() == "https")
            .and_then(|u| u.join("oauth/client.json").ok())
            .map(String::from);
        let callback_base = std::sync::OnceLock::new();
        if let Some(url) = &config.public_url {
            let _ = callback_base.set(url.clone());
        }
        Self {
            backend: std::sync::RwLock::new(backend),
            pending: Pending::default(),
            client_name: config.client_name.clone(),
            client_metadata_url,
            timeout: Duration::from_secs(config.timeout_seconds),
            callback_base,
            key: None,
            directory: std::sync::RwLock::new(None),
        }
    }

    /// Remembers the key credentials are sealed with.
    pub fn sealing_with(mut self, key: Option<Arc<crate::TokenKey>>) -> Self {
        self.key = key;
        self
    }

    /// The key credentials are sealed with, if there is one.
    pub fn key(&self) -> Option<&Arc<crate::TokenKey>> {
        self.key.as_ref()
    }

    /// Browsers come back to `base`'s `/oauth/callback` from now on
    /// (the HTTP listener's address; `signin.public_url` wins).
    pub fn listen_at(&self, base: url::Url) {
        let _ = self.callback_base.set(base);
    }

    /// How browsers come back for the sign-ins started now.
    pub fn redirect(&self) -> Redirect {
        match self.callback_base.get() {
            Some(base) => Redirect::Listener(base.clone()),
            None => Redirect::Loopback,
        }
    }

    /// The redirect URI browsers come back to over the listener, if any.
    pub fn callback_url(&self) -> Option<String> {
        self.callback_base.get().and_then(|b| callback_of(b).ok())
    }

    /// The sign-in of `id` under way, if one is.
    pub fn waiting_for(&self, id: &CredentialId) -> Option<Waiting> {
        self.pending.waiting_for(id)
    }

    /// The client metadata document (CIMD) this server publishes at
    /// `<public_url>/oauth/client.json`, when it has an https one.
    pub fn client_metadata(&self) -> Option<serde_json::Value> {
        let client_id = self.client_metadata_url.as_ref()?;
        Some(serde_json::json!({
            "client_id": client_id,
            "client_name": self.client_name,
            "redirect_uris": [self.callback_url()?],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
            "application_type": "web",
        }))
    }

    pub fn backend(&self) -> Result<Arc<dyn Backend>, SignInError> {
        self.backend
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
            .map_err(SignInError::NoStore)
    }

    /// Says where this node waits for callbacks in `directory` from now
    /// on, and looks there for the node of a callback it does not know.
    pub fn set_directory(&self, directory: Arc<dyn crate::Directory>) {
        *self
            .directory
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(directory);
    }

    fn directory(&self) -> Option<Arc<dyn crate::Directory>> {
        self.directory
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The node (its URL) that waits for the callback in `query`, when
    /// it is not this one: the browser came back through a balancer to
    /// another node than the one that began the sign-in.
    pub async fn elsewhere(&self, query: &str) -> Option<String> {
        let state = crate::directory::state_of(query)?;
        if self.pending.holds(&state) {
            return None;
        }
        let directory = self.directory()?;
        directory.node_of(&crate::callback_key(&state)).await
    }

    /// Keeps credentials in `backend` from now on (the deployment's store).
    pub fn set_backend(&self, backend: Result<Arc<dyn Backend>, String>) {
        *self
            .backend
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = backend;
    }

    /// Whose credential a call of `server` by `tenant` carries.
    pub fn id_for(server: &ServerConfig, tenant: &str) -> CredentialId {
        let tenant = match server.auth {
            cem_config::UpstreamAuth::Shared => crate::OPERATOR.to_string(),
            _ => tenant.to_string(),
        };
        CredentialId {
            tenant,
            server: server.name.clone(),
        }
    }

    /// The credential `id` holds for `server`, if it signed in (or gave a
    /// key). Tokens minted by another issuer than the server's own now are
    /// dropped (rmcp checks the stored issuer against the metadata).
    pub async fn credential(
        &self,
        id: &CredentialId,
        server: &ServerConfig,
    ) -> Result<Option<Credential>, SignInError> {
        let url = remote_url(server)?;
        let Ok(backend) = self.backend() else {
            return Ok(None);
        };
        let record = backend
            .load(id)
            .await
            .map_err(|e| SignInError::Store(e.to_string()))?;
        match record.map(|r| r.secret) {
            None => Ok(None),
            Some(Secret::ApiKey { header, value }) => {
                Ok(Some(Credential::ApiKey { header, value }))
            }
            Some(Secret::OAuth { .. }) => {
                let mut manager = self.manager(id, server, url).await?;
                let signed_in = manager
                    .initialize_from_store()
                    .await
                    .map_err(|e| discovery(server, e))?;
                if !signed_in {
                    return Ok(None);
                }
                if let (Some(client_id), Some(secret)) =
                    (&server.oauth.client_id, &server.oauth.client_secret)
                    && manager
                        .get_credentials()
                        .await
                        .is_ok_and(|(stored, _)| &stored == client_id)
                {
                    // A confidential client refreshes with its secret.
                    let config = OAuthClientConfig::new(client_id.clone(), "http://127.0.0.1/")
                        .with_client_secret(secret.expose());
                    manager
                        .configure_client(config)
                        .map_err(|e| SignInError::Other(e.to_string()))?;
                }
                Ok(Some(Credential::OAuth(Box::new(manager))))
            }
        }
    }

    async fn manager(
        &self,
        id: &CredentialId,
        server: &ServerConfig,
        url: &url::Url,
    ) -> Result<AuthorizationManager, SignInError> {
        let backend = self.backend()?;
        // The operator named this URL: its authorization server may sit on
        // a private network too (loopback still needs a loopback upstream).
        let mut manager = AuthorizationManager::new_allowing_private_addresses(url.as_str())
            .await
            .map_err(|e| discovery(server, e))?;
        manager.set_credential_store(PersonStore::new(backend, id.clone(), url.to_string()));
        Ok(manager)
    }

    /// Starts signing `id` in to `server`; `challenge` is the
    /// `WWW-Authenticate` of its `401` (or `403 insufficient_scope`, whose
    /// scope is asked for too: step-up), when one was seen.
    ///
    /// A server that publishes no authorization metadata but takes API
    /// keys (`oauth.api_key_header`) gets a page of this server instead,
    /// where the person gives their key.
    pub async fn begin(
        &self,
        id: &CredentialId,
        server: &ServerConfig,
        challenge: Option<&str>,
        redirect: Redirect,
    ) -> Result<Begun, SignInError> {
        if server.auth == cem_config::UpstreamAuth::None {
            return Err(SignInError::NoAuth(server.name.clone()));
        }
        match self
            .begin_oauth(id, server, challenge, redirect.clone())
            .await
        {
            // Only a server with no OAuth at all: an authorization server
            // that is down is no reason to ask for a key instead.
            Err(SignInError::NoMetadata(_)) if server.oauth.api_key_header.is_some() => {
                self.begin_key(id, server, redirect).await
            }
            begun => begun,
        }
    }

    /// Keeps a sign-in open until its `state` comes back (or it expires),
    /// and says in the directory that this node waits for it.
    async fn wait_for_callback(
        &self,
        state: String,
        id: &CredentialId,
        flow: crate::pending::Flow,
    ) -> (String, Waiting) {
        let key = crate::callback_key(&state);
        let opened = self.pending.insert(state, id.clone(), flow, self.timeout);
        if let Some(directory) = self.directory() {
            directory.started(&key).await;
        }
        opened
    }

    /// A sign-in by API key: a link to this server's key page.
    async fn begin_key(
        &self,
        id: &CredentialId,
        server: &ServerConfig,
        redirect: Redirect,
    ) -> Result<Begun, SignInError> {
        let Some(header) = server.oauth.api_key_header.clone() else {
            return Err(SignInError::Other(format!(
                "server '{}' takes no API key",
                server.name
            )));
        };
        let Redirect::Listener(base) = redirect else {
            return Err(SignInError::Other(format!(
                "server '{0}' takes an API key, which this server asks for on its HTTP \
                 listener only; give it from a shell: `code-execution-mcp auth login {0} --api-key`",
                server.name
            )));
        };
        let mut bytes = [0u8; 32];
        aws_lc_rs::rand::SecureRandom::fill(&aws_lc_rs::rand::SystemRandom::new(), &mut bytes)
            .map_err(|_| SignInError::Other("no randomness for the sign-in's state".into()))?;
        let state = crate::key::hex(&bytes);
        let mut url = base
            .join("oauth/key")
            .map_err(|e| SignInError::Other(format!("cannot make the key page's address: {e}")))?;
        url.query_pairs_mut().append_pair("state", &state);
        let (sign_in_id, waiting) = self
            .wait_for_callback(state, id, crate::pending::Flow::Key { header })
            .await;
        tracing::info!(server = %id.server, tenant = %cem_config::tenant_digest(&id.tenant), sign_in = %sign_in_id, "a sign-in by API key started");
        Ok(Begun {
            url: url.to_string(),
            id: sign_in_id,
            waiting,
        })
    }

    /// Ends the sign-in `begun` (its id) that will not be finished: its
    /// link could not be handed over, or the person declined.
    pub async fn abandon(&self, sign_in: &str, why: &str) {
        if let Some(state) = self.pending.abandon(sign_in, why)
            && let Some(directory) = self.directory()
        {
            directory.ended(&crate::callback_key(&state)).await;
        }
    }

    /// The key page for the sign-in `query` names: its form, or why there
    /// is none (an unknown, used or expired sign-in).
    pub fn key_page(&self, query: &str) -> Result<String, SignInError> {
        let state = crate::directory::state_of(query).ok_or(SignInError::UnknownState)?;
        let id = self
            .pending
            .key_form(&state)
            .ok_or(SignInError::UnknownState)?;
        Ok(crate::page::key_form_page(&id, &state))
    }

    /// The key page's answer (`state` and `key`, form-encoded): keeps the
    /// key, sealed, as the person's for that server.
    pub async fn complete_key(&self, form: &str) -> Result<CredentialId, SignInError> {
        let state = crate::directory::state_of(form).ok_or(SignInError::UnknownState)?;
        let value = url::form_urlencoded::parse(form.as_bytes())
            .find(|(k, _)| k == "key")
            .map(|(_, v)| v.into_owned());
        let value = value.unwrap_or_default();
        let value = value.trim();
        // Checked before the sign-in is used up: a slip of the paste can
        // be mended on the same page.
        if value.is_empty() || reqwest::header::HeaderValue::from_str(value).is_err() {
            return Err(SignInError::Other(
                "the key is empty or holds characters a header cannot carry; go back and paste it again"
                    .into(),
            ));
        }
        let taken = match self.pending.take_key(&state) {
            Ok(taken) => taken,
            Err(e) => {
                if !matches!(e, SignInError::UnknownState)
                    && let Some(directory) = self.directory()
                {
                    directory.ended(&crate::callback_key(&state)).await;
                }
                return Err(e);
            }
        };
        let id = taken.id.clone();
        let saved = self.keep_key(&id, taken.header.clone(), value).await;
        taken.finish(&saved);
        if let Some(directory) = self.directory() {
            directory.ended(&crate::callback_key(&state)).await;
        }
        saved.map(|()| id)
    }

    async fn begin_oauth(
        &self,
        id: &CredentialId,
        server: &ServerConfig,
        challenge: Option<&str>,
        redirect: Redirect,
    ) -> Result<Begun, SignInError> {
        let url = remote_url(server)?;
        let manager = self.manager(id, server, url).await?;
        let resolution = manager
            .resolve_metadata_from_challenge(challenge)
            .await
            .map_err(|e| discovery(server, e))?;
        if !resolution.source.is_discovered() {
            return Err(SignInError::NoMetadata(server.name.clone()));
        }
        let mut manager = manager;
        manager.set_metadata(resolution.metadata);
        let (redirect_uri, loopback) = match redirect {
            Redirect::Listener(base) => (callback_of(&base)?, None),
            Redirect::Loopback => {
                let listener = crate::loopback::Loopback::bind().await.map_err(|e| {
                    SignInError::Other(format!("cannot listen for the browser on 127.0.0.1: {e}"))
                })?;
                (listener.redirect_uri(), Some(listener))
            }
        };
        let mut request =
            AuthorizationRequest::new(redirect_uri).with_client_name(self.client_name.clone());
        if let Some(client_id) = &server.oauth.client_id {
            request = request.with_preregistered_client(client_id.clone());
            if let Some(secret) = &server.oauth.client_secret {
                request = request.with_client_secret(secret.expose());
            }
        } else if let Some(cimd) = &self.client_metadata_url {
            // Its redirect is this server's https callback: a web client.
            request = request
                .with_client_metadata_url(cimd.clone())
                .with_application_type("web");
        }
        let mut scopes = server.oauth.scopes.clone();
        if let Some(scope) = challenge.and_then(challenge_scope) {
            // Step-up: what the server said it needs, on top of the rest.
            let held = self.held_scopes(id).await;
            for s in held
                .into_iter()
                .chain(scope.split_whitespace().map(String::from))
            {
                if !scopes.contains(&s) {
                    scopes.push(s);
                }
            }
        }
        if !scopes.is_empty() {
            request = request.with_scopes(scopes);
        }
        let session = AuthorizationSession::new(manager, request)
            .await
            .map_err(|(_, e)| registration(server, e))?;
        let auth_url = session.get_authorization_url().to_string();
        let state = url::Url::parse(&auth_url)
            .ok()
            .and_then(|u| {
                u.query_pairs()
                    .find(|(k, _)| k == "state")
                    .map(|(_, v)| v.into_owned())
            })
            .ok_or_else(|| SignInError::Other("the authorization URL carries no state".into()))?;
        let (sign_in_id, waiting) = self
            .wait_for_callback(state, id, crate::pending::Flow::OAuth(Arc::new(session)))
            .await;
        if let Some(listener) = loopback {
            listener.serve(self.pending.clone(), self.timeout);
        }
        tracing::info!(server = %id.server, tenant = %cem_config::tenant_digest(&id.tenant), sign_in = %sign_in_id, "a sign-in started");
        Ok(Begun {
            url: auth_url,
            id: sign_in_id,
            waiting,
        })
    }

    /// The browser came back with `query` (the callback's query string).
    /// Returns the server signed in to.
    pub async fn complete(&self, query: &str) -> Result<CredentialId, SignInError> {
        let key = crate::directory::state_of(query).map(|s| crate::callback_key(&s));
        let result = self.pending.complete(query).await;
        if !matches!(result, Err(SignInError::UnknownState))
            && let (Some(directory), Some(key)) = (self.directory(), key)
        {
            directory.ended(&key).await;
        }
        result
    }

    async fn held_scopes(&self, id: &CredentialId) -> Vec<String> {
        let Ok(backend) = self.backend() else {
            return Vec::new();
        };
        match backend.load(id).await {
            Ok(Some(Record {
                secret: Secret::OAuth { credentials, .. },
                ..
            })) => credentials.granted_scopes,
            _ => Vec::new(),
        }
    }

    /// Keeps `value` as `id`'s key for `server` (sent in its
    /// `oauth.api_key_header`).
    pub async fn set_api_key(
        &self,
        id: &CredentialId,
        server: &ServerConfig,
        value: &str,
    ) -> Result<(), SignInError> {
        remote_url(server)?;
        let Some(header) = server.oauth.api_key_header.clone() else {
            return Err(SignInError::Other(format!(
                "server '{}' takes no API key: set mcpServers.{}.oauth.api_key_header to the \
                 header its keys go in",
                server.name, server.name
            )));
        };
        let value = value.trim();
        if value.is_empty() || reqwest::header::HeaderValue::from_str(value).is_err() {
            return Err(SignInError::Other(
                "the key is empty or holds characters a header cannot carry".into(),
            ));
        }
        self.keep_key(id, header, value).await
    }

    /// Seals `value` as `id`'s key, sent in `header`.
    async fn keep_key(
        &self,
        id: &CredentialId,
        header: String,
        value: &str,
    ) -> Result<(), SignInError> {
        let now = crate::store::now();
        let record = Record {
            secret: Secret::ApiKey {
                header,
                value: value.to_string(),
            },
            signed_in_at: now,
            updated_at: now,
        };
        self.backend()?
            .save(id, &record)
            .await
            .map_err(|e| SignInError::Store(e.to_string()))
    }

    /// Signs `id` out of `server`: revokes the tokens where the
    /// authorization server offers revocation (RFC 7009) and deletes them.
    pub async fn logout(
        &self,
        id: &CredentialId,
        server: &ServerConfig,
    ) -> Result<Logout, SignInError> {
        let backend = self.backend()?;
        let record = backend
            .load(id)
            .await
            .map_err(|e| SignInError::Store(e.to_string()))?;
        let Some(record) = record else {
            return Ok(Logout::NotSignedIn);
        };
        let revoked = match &record.secret {
            Secret::OAuth { credentials, .. } => crate::revoke::revoke(server, credentials).await,
            Secret::ApiKey { .. } => crate::revoke::Revoked::NotApplicable,
        };
        backend
            .delete(id)
            .await
            .map_err(|e| SignInError::Store(e.to_string()))?;
        Ok(Logout::Done(revoked))
    }
}

/// What a logout did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Logout {
    NotSignedIn,
    Done(crate::revoke::Revoked),
}

fn remote_url(server: &ServerConfig) -> Result<&url::Url, SignInError> {
    match &server.transport {
        Transport::Http { url, .. } | Transport::Sse { url, .. } => Ok(url),
        Transport::Stdio { .. } => Err(SignInError::NotRemote(server.name.clone())),
    }
}

fn callback_of(base: &url::Url) -> Result<String, SignInError> {
    let mut base = base.clone();
    if !base.path().ends_with('/') {
        base.set_path(&format!("{}/", base.path()));
    }
    base.join("oauth/callback")
        .map(String::from)
        .map_err(|e| SignInError::Other(format!("no callback URL under {base}: {e}")))
}

/// The `scope` of a `WWW-Authenticate` challenge.
pub fn challenge_scope(challenge: &str) -> Option<String> {
    let at = challenge.find("scope=")?;
    let rest = &challenge[at + "scope=".len()..];
    let value = match rest.strip_prefix('"') {
        Some(quoted) => quoted.split('"').next()?,
        None => rest.split([',', ' ']).next()?,
    };
    (!value.is_empty()).then(|| value.to_string())
}

fn discovery(server: &ServerConfig, e: AuthError) -> SignInError {
    SignInError::Discovery {
        server: server.name.clone(),
        cause: e.to_string(),
    }
}

fn registration(server: &ServerConfig, e: AuthError) -> SignInError {
    let hint = if server.oauth.client_id.is_some() {
        "Check mcpServers.<name>.oauth.client_id and client_secret against what the \
         authorization server issued"
    } else {
        "The authorization server offers no dynamic registration this server could use: \
         register a client there and set mcpServers.<name>.oauth.client_id (and client_secret)"
    };
    SignInError::Registration {
        server: server.name.clone(),
        cause: e.to_string(),
        hint,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_challenges_scope_is_read_quoted_or_not() {
        assert_eq!(
            challenge_scope(r#"Bearer error="insufficient_scope", scope="orders:write a""#),
            Some("orders:write a".into())
        );
        assert_eq!(
            challenge_scope("Bearer scope=orders:read, resource_metadata=\"x\""),
            Some("orders:read".into())
        );
        assert_eq!(challenge_scope(r#"Bearer resource_metadata="x""#), None);
    }

    #[test]
    fn the_callback_hangs_under_the_base_path() -> Result<(), Box<dyn std::error::Error>> {
        let base = url::Url::parse("https://mcp.example.com/team")?;
        assert_eq!(
            callback_of(&base)?,
            "https://mcp.example.com/team/oauth/callback"
        );
        let base = url::Url::parse("http://127.0.0.1:8080")?;
        assert_eq!(callback_of(&base)?, "http://127.0.0.1:8080/oauth/callback");
        Ok(())
    }
}
