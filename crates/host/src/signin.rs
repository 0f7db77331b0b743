//! A call that reaches an upstream its person has not signed in to (or
//! must sign in to again, or with more scope) waits while the person
//! signs in, like an approval: the sign-in link goes to their client by
//! URL-mode elicitation (or an input-required result), their browser
//! comes back to this server, and the call goes on. The link never enters
//! the code's view, a result, a log line or the audit.

use cem_config::{Transport, UpstreamAuth};
use cem_upstream::{Manager, UpstreamError};

use crate::approval::SignInLink;
use crate::gate::Execution;

/// Whether `server`'s calls may ask for sign-in here.
pub fn takes_sign_in(manager: &Manager, server: &str) -> bool {
    manager.signin().is_some()
        && manager.get(server).is_ok_and(|u| {
            u.config.auth != UpstreamAuth::None
                && !matches!(u.config.transport, Transport::Stdio { .. })
        })
}

/// Before a call: signs the person in first when `server` says it wants
/// that (its tool list is what the call is checked against anyway).
pub async fn ready(manager: &Manager, exec: &Execution, server: &str) -> Result<(), String> {
    if !takes_sign_in(manager, server) {
        return Ok(());
    }
    match manager.live_tools(server).await {
        Err(UpstreamError::SignInRequired { challenge, why, .. }) => {
            sign_in(manager, exec, server, challenge, &why).await
        }
        _ => Ok(()),
    }
}

/// Signs the execution's person in to `server`, asking them through the
/// client; `Err` holds what the code's `ToolError` says. `why` is what
/// the server's answer said (a 401, a renewal refused).
pub async fn sign_in(
    manager: &Manager,
    exec: &Execution,
    server: &str,
    challenge: Option<String>,
    why: &str,
) -> Result<(), String> {
    let because = if why.is_empty() {
        String::new()
    } else {
        format!(" ({why})")
    };
    let Some(signin) = manager.signin() else {
        return Err(format!(
            "upstream server '{server}' asks for sign-in, and sign-in is not set up here"
        ));
    };
    let upstream = manager.get(server).map_err(|e| e.to_string())?;
    let id = upstream.credential_id();
    let operator = manager.tenancy().is_none_or(|t| t.local);
    if upstream.config.auth == UpstreamAuth::Shared && !operator {
        return Err(format!(
            "upstream server '{server}' is signed in to once for everyone (\"auth\": \"shared\"), \
             and the operator has not signed in (or must again): ask them to run \
             `code-execution-mcp auth login {server}`"
        ));
    }
    // Only one question at a time per execution, as with approvals.
    let _one_at_a_time = exec.asking.lock().await;
    let waiting = match signin.waiting_for(&id) {
        Some(waiting) => waiting,
        None => {
            // Asked first: a sign-in begun for a client that cannot be
            // handed its link would leave the next calls waiting on it.
            let Some(approver) = &exec.approver else {
                return Err(format!(
                    "upstream server '{server}' needs this person to sign in{because}, and {}. \
                     They can sign in from a shell: `code-execution-mcp auth login {server}`{}, \
                     then run the code again",
                    exec.no_approver,
                    tenant_flag(manager)
                ));
            };
            let begun = signin
                .begin(
                    &id,
                    &upstream.config,
                    challenge.as_deref(),
                    signin.redirect(),
                )
                .await
                .map_err(|e| e.to_string())?;
            let link = SignInLink {
                server: server.to_string(),
                url: begun.url,
                id: begun.id.clone(),
                timeout: signin.timeout,
            };
            let _asking = exec.paused.asking();
            let refused = match approver.sign_in(link).await {
                Ok(true) => None,
                Ok(false) => Some(format!(
                    "the person declined to sign in to '{server}'; its tools cannot be called for them"
                )),
                Err(why) => Some(format!(
                    "upstream server '{server}' needs this person to sign in{because}, and {why}. \
                     They can sign in from a shell: `code-execution-mcp auth login {server}`{}, \
                     then run the code again",
                    tenant_flag(manager)
                )),
            };
            if let Some(refused) = refused {
                // Nobody will come back from it: a later call asks afresh.
                signin.abandon(&begun.id, &refused).await;
                return Err(refused);
            }
            begun.waiting
        }
    };
    let waited = {
        let _asking = exec.paused.asking();
        waiting.wait().await
    };
    waited.map_err(|e| e.to_string())?;
    manager.reconnect(server).await;
    Ok(())
}

fn tenant_flag(manager: &Manager) -> String {
    match manager.tenancy() {
        Some(t) if !t.local => format!(
            " (an operator can do it for them with --tenant {})",
            t.tenant
        ),
        _ => String::new(),
    }
}

/// How [`open_store`] names a key the server made itself.
const OWN_KEY: &str = "a key of its own";

/// The operator's key and the store it seals into.
pub type Sealed = (
    std::sync::Arc<cem_signin::TokenKey>,
    std::sync::Arc<dyn cem_signin::Backend>,
);

/// The sign-ins of this server: credentials in the data directory (the
/// deployment's store once it joins one), and why none can be kept.
pub fn open(
    config: &cem_config::Config,
    data_dir: &std::path::Path,
) -> std::sync::Arc<cem_signin::SignIn> {
    let (sealed, source) = open_store(config, data_dir);
    tracing::debug!(key = %source, "upstream credentials are sealed with");
    let (key, backend) = match sealed {
        // A key of the server's own is one node's: a deployment's store
        // is sealed only with the operator's, which every node has.
        Ok((key, backend)) => ((!source.starts_with(OWN_KEY)).then_some(key), Ok(backend)),
        Err(why) => (None, Err(why)),
    };
    std::sync::Arc::new(cem_signin::SignIn::new(backend, &config.signin).sealing_with(key))
}

/// Where this server keeps people's upstream credentials, sealed with
/// the operator's key (`CODE_EXECUTION_MCP_TOKEN_KEY`, `signin.token_key`
/// or `signin.token_key_file`). Without one, a one-person server (no
/// `auth` on its listener) makes a key of its own beside the credentials
/// (`<data>/signin/token.key`, mode 600); a team server stores nothing
/// and says so, rather than seal everyone's tokens with a key that sits
/// next to them.
pub fn open_store(
    config: &cem_config::Config,
    data_dir: &std::path::Path,
) -> (Result<Sealed, String>, String) {
    let dir = data_dir.join("signin");
    let team = serves_team(config);
    let key = match given_key(config) {
        Err(e) => return (Err(e.to_string()), "the key given is unusable".into()),
        Ok(Some((key, source))) => (key, source.to_string()),
        Ok(None) if team => {
            return (
                Err(format!(
                    "this server serves a team (auth is configured), and no key to seal people's \
                     credentials with was given ({})",
                    cem_signin::KEY_ENV
                )),
                "none".into(),
            );
        }
        Ok(None) => match own_key(&dir) {
            Ok(key) => (
                key,
                format!("{OWN_KEY} in {}", dir.join("token.key").display()),
            ),
            Err(e) => return (Err(e), "none".into()),
        },
    };
    let (key, source) = key;
    let key = std::sync::Arc::new(key);
    let backend: std::sync::Arc<dyn cem_signin::Backend> =
        std::sync::Arc::new(cem_signin::FileBackend::new(dir, key.clone()));
    (Ok((key, backend)), source)
}

/// The operator's key, if one is given: `CODE_EXECUTION_MCP_TOKEN_KEY`,
/// else `signin.token_key`, else `signin.token_key_file`.
pub fn given_key(
    config: &cem_config::Config,
) -> Result<Option<(cem_signin::TokenKey, cem_signin::KeySource)>, cem_signin::KeyError> {
    let env = std::env::var(cem_signin::KEY_ENV).ok();
    cem_signin::TokenKey::load(
        env.as_deref(),
        config.signin.token_key.as_ref().map(|k| k.expose()),
        config.signin.token_key_file.as_deref(),
    )
}

/// Whether this server serves a team (its listener has `auth`): then it
/// keeps nobody's credentials without the operator's key.
pub fn serves_team(config: &cem_config::Config) -> bool {
    !config.auth.tokens.is_empty() || config.auth.oauth.is_some()
}

/// A one-person server's own key: made once (256 random bits), mode 600.
fn own_key(dir: &std::path::Path) -> Result<cem_signin::TokenKey, String> {
    use std::io::{Read, Write};
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let path = dir.join("token.key");
    let fail = |e: std::io::Error| format!("cannot make the key in {}: {e}", path.display());
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(fail)?;
    if !path.exists() {
        let mut bytes = [0u8; 32];
        std::fs::File::open("/dev/urandom")
            .and_then(|mut r| r.read_exact(&mut bytes))
            .map_err(fail)?;
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
        {
            Ok(mut file) => file.write_all(hex.as_bytes()).map_err(fail)?,
            // Another process made it first: use theirs.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(fail(e)),
        }
    }
    cem_signin::TokenKey::load(None, None, Some(&path))
        .map_err(|e| e.to_string())?
        .map(|(key, _)| key)
        .ok_or_else(|| format!("{} is empty", path.display()))
}

/// Signs out, at start, every person whose static token the config no
/// longer has (`auth.tokens`): their sign-ins are revoked where offered
/// and deleted, as `auth logout --tenant ID --all` would. Tenants of an
/// access token (`auth.oauth`) are not judged: who may still sign in is
/// the identity provider's to say.
pub async fn sign_out_removed(manager: &Manager, config: &cem_config::Config) {
    if config.auth.tokens.is_empty() {
        return;
    }
    let Some(signin) = manager.signin() else {
        return;
    };
    let Ok(backend) = signin.backend() else {
        return;
    };
    let held = match backend.list(None).await {
        Ok(held) => held,
        Err(e) => {
            tracing::warn!(error = %e, "cannot list the sign-ins kept, to sign out removed tenants");
            return;
        }
    };
    for summary in held {
        let Some(name) = summary.tenant.strip_prefix(cem_auth::STATIC_TENANT_PREFIX) else {
            continue;
        };
        if config.auth.tokens.contains_key(name) || summary.server.is_empty() {
            continue;
        }
        let id = cem_signin::CredentialId::new(summary.tenant.clone(), summary.server.clone());
        let tenant = cem_config::tenant_digest(&summary.tenant);
        let outcome = match manager.get(&summary.server) {
            Ok(upstream) => match signin.logout(&id, &upstream.config).await {
                Ok(done) => Ok(format!("{done:?}")),
                // One that does not open cannot be revoked; it goes anyway.
                Err(e) => backend
                    .delete(&id)
                    .await
                    .map(|_| format!("deleted without revoking ({e})"))
                    .map_err(|d| format!("{e}; nor deleted: {d}")),
            },
            Err(_) => backend
                .delete(&id)
                .await
                .map(|_| "deleted (its server left the config: not revoked)".to_string())
                .map_err(|e| e.to_string()),
        };
        match outcome {
            Ok(how) => {
                tracing::info!(%tenant, server = %summary.server, outcome = %how, "signed out a tenant whose token left auth.tokens")
            }
            Err(e) => {
                tracing::warn!(%tenant, server = %summary.server, error = %e, "cannot sign out a tenant whose token left auth.tokens")
            }
        }
    }
}
