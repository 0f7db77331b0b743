//! `auth login`, `auth logout` and `auth status`: a person's sign-ins to
//! upstream servers from the shell. The link and the browser's way back
//! stay on this machine (a loopback listener, RFC 8252); nothing printed
//! holds a token.

use std::io::{BufRead, IsTerminal};
use std::process::ExitCode;

use anyhow::Context;
use cem_host::{AppState, RunMode};
use cem_signin::{CredentialId, Logout, Redirect, Revoked, SignIn};
use cem_upstream::UpstreamError;

use crate::args::{AuthCommand, Cli};
use crate::setup;

pub fn run(cli: &Cli, cmd: &AuthCommand) -> anyhow::Result<ExitCode> {
    let loaded = match setup::config_or_exit(cli) {
        Ok(loaded) => loaded,
        Err(code) => return Ok(code),
    };
    let state = setup::one_off_state(
        cli,
        loaded.config,
        loaded.located.map(|l| l.path),
        RunMode::default(),
    )?;
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    // A static token's name stands for its tenant (`bob` is `token-bob`).
    let tenant_of = |t: &Option<String>| -> Option<String> {
        t.as_ref().map(|t| {
            if state.config.auth.tokens.contains_key(t) {
                format!("{}{t}", cem_auth::STATIC_TENANT_PREFIX)
            } else {
                t.clone()
            }
        })
    };
    let outcome = runtime.block_on(async {
        let outcome = match cmd {
            AuthCommand::Login {
                server,
                tenant,
                api_key,
                no_browser,
            } => {
                let tenant = tenant_of(tenant);
                login(&state, server, tenant.as_deref(), *api_key, *no_browser).await
            }
            AuthCommand::Logout {
                server: Some(server),
                tenant,
                ..
            } => logout(&state, server, tenant_of(tenant).as_deref()).await,
            AuthCommand::Logout {
                server: None,
                tenant,
                ..
            } => logout_all(&state, tenant_of(tenant).as_deref()).await,
            AuthCommand::Status { tenant, all, json } => {
                status(&state, tenant_of(tenant).as_deref(), *all, *json).await
            }
        };
        state.upstreams.shutdown().await;
        outcome
    });
    match outcome {
        Ok(code) => Ok(code),
        Err(e) => {
            eprintln!("error: {e}");
            Ok(ExitCode::from(2))
        }
    }
}

fn signin(state: &AppState) -> Result<&std::sync::Arc<SignIn>, String> {
    state
        .upstreams
        .signin()
        .ok_or_else(|| "sign-in is not set up".to_string())
}

/// Whose sign-in: the local user's, or `--tenant`'s (an operator's view).
fn id_of(state: &AppState, server: &str, tenant: Option<&str>) -> Result<CredentialId, String> {
    let upstream = state.upstreams.get(server).map_err(|e| e.to_string())?;
    let tenant = tenant.unwrap_or(cem_signin::OPERATOR);
    Ok(SignIn::id_for(&upstream.config, tenant))
}

async fn login(
    state: &AppState,
    server: &str,
    tenant: Option<&str>,
    api_key: bool,
    no_browser: bool,
) -> Result<ExitCode, String> {
    let signin = signin(state)?;
    let upstream = state.upstreams.get(server).map_err(|e| e.to_string())?;
    let id = id_of(state, server, tenant)?;
    let who = describe(&id);
    if api_key {
        if std::io::stdin().is_terminal() {
            eprintln!("Paste the API key for '{server}' and press Enter:");
        }
        let mut key = String::new();
        std::io::stdin()
            .lock()
            .read_line(&mut key)
            .map_err(|e| format!("cannot read the key from stdin: {e}"))?;
        signin
            .set_api_key(&id, &upstream.config, &key)
            .await
            .map_err(|e| e.to_string())?;
        println!(
            "Kept the API key {who} gave for '{server}' (sealed; it is sent only to {server})."
        );
        return Ok(ExitCode::SUCCESS);
    }
    // The server's own challenge names its metadata and scope; a server
    // that lets us in without one is still signed in to, from its
    // well-known metadata.
    let challenge = match state.upstreams.live_tools(server).await {
        Err(UpstreamError::SignInRequired { challenge, .. }) => challenge,
        _ => None,
    };
    let begun = signin
        .begin(
            &id,
            &upstream.config,
            challenge.as_deref(),
            Redirect::Loopback,
        )
        .await
        .map_err(|e| e.to_string())?;
    eprintln!(
        "To sign {who} in to '{server}', open this link in a browser:\n\n  {}\n",
        begun.url
    );
    if !no_browser {
        open_browser(&begun.url);
    }
    eprintln!(
        "Waiting up to {} s for the browser to come back…",
        signin.timeout.as_secs()
    );
    begun.waiting.wait().await.map_err(|e| e.to_string())?;
    let summary = signin
        .backend()
        .map_err(|e| e.to_string())?
        .list(Some(&id.tenant))
        .await
        .map_err(|e| e.to_string())?
        .into_iter()
        .find(|s| s.server == id.server);
    match summary {
        Some(s) => println!(
            "Signed {who} in to '{server}'{}{}.",
            if s.scopes.is_empty() {
                String::new()
            } else {
                format!(" with {}", s.scopes.join(" "))
            },
            s.expires_at
                .map(|at| format!("; the access token expires in {}", left(at)))
                .unwrap_or_default()
        ),
        None => println!("Signed {who} in to '{server}'."),
    }
    Ok(ExitCode::SUCCESS)
}

fn open_browser(url: &str) {
    // Only where a desktop is: on a server the link is opened elsewhere.
    let desktop =
        std::env::var_os("DISPLAY").is_some() || std::env::var_os("WAYLAND_DISPLAY").is_some();
    if !desktop {
        return;
    }
    let _ = std::process::Command::new("xdg-open")
        .arg(url)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
}

async fn logout(state: &AppState, server: &str, tenant: Option<&str>) -> Result<ExitCode, String> {
    let signin = signin(state)?;
    let upstream = state.upstreams.get(server).map_err(|e| e.to_string())?;
    let id = id_of(state, server, tenant)?;
    let who = describe(&id);
    match signin
        .logout(&id, &upstream.config)
        .await
        .map_err(|e| e.to_string())?
    {
        Logout::NotSignedIn => {
            println!("No sign-in to '{server}' is kept for {who}; nothing to do.");
        }
        Logout::Done(revoked) => {
            println!(
                "Signed {who} out of '{server}' and deleted what was kept ({}).",
                revoked_how(&revoked)
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn revoked_how(revoked: &Revoked) -> String {
    match revoked {
        Revoked::Tokens(n) => format!("{n} token(s) revoked at its authorization server"),
        Revoked::NotOffered => {
            "its authorization server offers no revocation: the tokens end when they expire".into()
        }
        Revoked::Failed(why) => format!("revoking failed ({why}): the tokens end when they expire"),
        Revoked::NotApplicable => "the key is forgotten".into(),
    }
}

/// Signs a person out of every server they hold a sign-in to: what an
/// operator runs for someone who leaves the team. A server no longer in
/// the config cannot be asked to revoke; its record is deleted all the same.
async fn logout_all(state: &AppState, tenant: Option<&str>) -> Result<ExitCode, String> {
    let signin = signin(state)?;
    let tenant = tenant.unwrap_or(cem_signin::OPERATOR);
    let backend = signin.backend().map_err(|e| e.to_string())?;
    let held = backend
        .list(Some(tenant))
        .await
        .map_err(|e| e.to_string())?;
    let who = describe(&CredentialId::new(tenant, ""));
    if held.is_empty() {
        println!("No sign-in is kept for {who}; nothing to do.");
        return Ok(ExitCode::SUCCESS);
    }
    let mut failed = false;
    for summary in held {
        let server = summary.server.as_str();
        if server.is_empty() {
            // Unreadable, and its name is inside the sealed part.
            failed = true;
            println!(
                "A sign-in kept for {who} does not open ({}); delete it by hand.",
                summary.error.as_deref().unwrap_or("unreadable")
            );
            continue;
        }
        let id = CredentialId::new(tenant, server);
        match state.upstreams.get(server) {
            Ok(upstream) => match signin.logout(&id, &upstream.config).await {
                Ok(Logout::Done(revoked)) => println!(
                    "Signed {who} out of '{server}' and deleted what was kept ({}).",
                    revoked_how(&revoked)
                ),
                Ok(Logout::NotSignedIn) => {}
                // A record that does not open (another key, damaged) cannot
                // be revoked, but it goes all the same.
                Err(e) => match backend.delete(&id).await {
                    Ok(_) => println!(
                        "Deleted the sign-in of {who} to '{server}' without revoking it ({e})."
                    ),
                    Err(d) => {
                        failed = true;
                        println!("Could not sign {who} out of '{server}': {e}; nor delete it: {d}");
                    }
                },
            },
            Err(_) => match backend.delete(&id).await {
                Ok(_) => println!(
                    "Deleted the sign-in of {who} to '{server}', which the config no longer has \
                     (not revoked: its authorization server is not known any more)."
                ),
                Err(e) => {
                    failed = true;
                    println!("Could not delete the sign-in of {who} to '{server}': {e}");
                }
            },
        }
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

async fn status(
    state: &AppState,
    tenant: Option<&str>,
    all: bool,
    as_json: bool,
) -> Result<ExitCode, String> {
    let signin = signin(state)?;
    let backend = signin.backend().map_err(|e| e.to_string())?;
    let tenant = if all {
        None
    } else {
        Some(tenant.unwrap_or(cem_signin::OPERATOR))
    };
    let list = backend.list(tenant).await.map_err(|e| e.to_string())?;
    if as_json {
        let text = serde_json::to_string_pretty(&list).map_err(|e| e.to_string())?;
        println!("{text}");
        return Ok(ExitCode::SUCCESS);
    }
    if list.is_empty() {
        println!(
            "No sign-ins{} (credentials: {}).",
            tenant.map(|t| format!(" for {t}")).unwrap_or_default(),
            backend.describe()
        );
        return Ok(ExitCode::SUCCESS);
    }
    for s in &list {
        if let Some(e) = &s.error {
            println!("{} {}: unreadable: {e}", s.tenant, s.server);
            continue;
        }
        let expiry = match s.expires_at {
            Some(at) if at <= cem_signin::now() && s.refreshable => {
                "expired, refreshed on next use".into()
            }
            Some(at) if at <= cem_signin::now() => "expired: sign in again".into(),
            Some(at) => format!("expires in {}", left(at)),
            None => "no expiry given".into(),
        };
        println!(
            "{} {}: {}{}{}; {expiry}{}",
            s.tenant,
            s.server,
            s.kind,
            s.issuer
                .as_ref()
                .map(|i| format!(" from {i}"))
                .unwrap_or_default(),
            if s.scopes.is_empty() {
                String::new()
            } else {
                format!(", scopes {}", s.scopes.join(" "))
            },
            if s.refreshable { ", refreshable" } else { "" }
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn describe(id: &CredentialId) -> String {
    if id.tenant == cem_signin::OPERATOR {
        "you".into()
    } else {
        format!("tenant {}", id.tenant)
    }
}

fn left(at: u64) -> String {
    let secs = at.saturating_sub(cem_signin::now());
    match secs {
        0..=119 => format!("{secs} s"),
        120..=7199 => format!("{} min", secs / 60),
        _ => format!("{} h", secs / 3600),
    }
}
