//! `serve`: MCP over stdio or HTTP until the client leaves or a signal comes.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use cem_host::{AppState, ToolSet};
use cem_server::HttpOptions;
use tokio_util::sync::CancellationToken;

use crate::args::{Cli, ServeArgs, ToolsArg};
use crate::setup;

pub fn run(cli: &Cli, args: &ServeArgs) -> anyhow::Result<ExitCode> {
    let loaded = match setup::config_or_exit(cli) {
        Ok(loaded) => loaded,
        Err(code) => return Ok(code),
    };
    let data_dir = setup::data_dir(cli)?;
    let tool_set = match args.tools {
        ToolsArg::Full => ToolSet::Full,
        ToolsArg::Minimal => ToolSet::Minimal,
    };
    let exe =
        std::env::current_exe().context("cannot find our own executable (the sandbox launcher)")?;
    let mut state = AppState::open_with(
        loaded.config,
        loaded.located.map(|l| l.path),
        &data_dir,
        tool_set,
        exe,
        cem_host::RunMode {
            no_sandbox: false,
            runs_code: true,
        },
    )?;

    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    crate::memory::trim_periodically();
    let store_url = args
        .store_url
        .clone()
        .filter(|u| !u.is_empty())
        .or_else(|| {
            state
                .config
                .store
                .url
                .as_ref()
                .map(|u| u.expose().to_string())
        });
    let cluster = match store_url {
        None => None,
        Some(url) => Some(runtime.block_on(join_cluster(&url, args))?),
    };
    let _guard = runtime.enter();
    if let Some(cluster) = &cluster {
        state.join(cluster.clone());
    }
    let state = Arc::new(state);
    runtime.block_on(async {
        let shutdown = CancellationToken::new();
        // Install the handlers before serving, so a signal that arrives
        // right after the first reply is not missed.
        let signals = install_signal_handlers();
        tokio::spawn(cancel_on_signal(signals, shutdown.clone()));
        if let Some(cluster) = &cluster {
            // Before the upstreams start: their tool lists and pins may be
            // known to the deployment already.
            cem_host::cluster::mirror_upstream_state(cluster.clone(), &state.data_dir).await;
        }
        // Probe the sandbox and fill the warm pool in the background; the
        // first tools/list does not wait for it.
        state.engine.warm_up();
        state.catalog.watch_changes();
        // People whose static token left the config are signed out of
        // their upstreams (revoked where offered), in the background.
        let (upstreams, config) = (state.upstreams.clone(), state.config.clone());
        tokio::spawn(async move { cem_host::signin::sign_out_removed(&upstreams, &config).await });
        let wrappers = state.catalog.clone();
        tokio::spawn(async move { wrappers.write_cached_wrappers().await });
        if state.config.catalog.discover_at_start {
            // Shapes learned ahead of use, as `tools discover` does; each
            // one learned rewrites the wrappers as it comes.
            let probing = state.clone();
            tokio::spawn(async move {
                match cem_host::probe::discover(&probing, &[], &Default::default()).await {
                    Ok(probes) => {
                        let called = probes
                            .iter()
                            .filter(|p| matches!(p, cem_host::probe::Probe::Called { .. }))
                            .count();
                        tracing::info!(called, tools = probes.len(), "catalog.discover_at_start probed the read-only tools");
                    }
                    Err(e) => tracing::warn!(error = %e, "catalog.discover_at_start did not run"),
                }
            });
        }
        let catalog = state.catalog.clone();
        let tenants = cem_server::Tenants::new(state.clone());
        if let Some(addr) = args.metrics.or(state.config.metrics.listen) {
            let listener = cem_server::MetricsListener::bind(addr).await?;
            // A line scripts (and our tests) can wait for.
            eprintln!("metrics on http://{}/metrics", listener.local_addr()?);
            let (tenants, shutdown) = (tenants.clone(), shutdown.clone());
            tokio::spawn(async move {
                if let Err(e) = listener.serve(tenants, shutdown).await {
                    tracing::error!(error = %e, "the metrics listener stopped");
                }
            });
        }
        match args.http {
            None => cem_server::serve_stdio(state, shutdown).await?,
            Some(addr) => {
                let legacy = match args.auth_token.as_deref() {
                    Some("") => anyhow::bail!(
                        "--auth-token (or CODE_EXECUTION_MCP_AUTH_TOKEN) is empty; \
                         give a token or leave it unset"
                    ),
                    other => other.map(str::to_string),
                };
                let auth = Arc::new(cem_auth::Authenticator::new(&state.config.auth, legacy));
                if let Some(oauth) = auth.oauth() {
                    // Reachability is checked now so a wrong issuer shows in
                    // the log at once; serving starts either way (the keys
                    // are fetched again when the first token arrives).
                    match oauth.check().await {
                        Ok(report) => tracing::info!(
                            issuer = oauth.issuer(),
                            jwks_uri = %report.jwks_uri,
                            keys = report.kids.len(),
                            "accepting access tokens of the identity provider"
                        ),
                        Err(e) => tracing::warn!(
                            issuer = oauth.issuer(),
                            error = %e,
                            "cannot reach the identity provider yet; access tokens are refused until it answers"
                        ),
                    }
                }
                drop(state);
                let options = HttpOptions {
                    addr,
                    auth,
                    cluster,
                    allowed_hosts: args.allowed_hosts.clone(),
                    allowed_origins: args.allowed_origins.clone(),
                };
                cem_server::serve_http(tenants.clone(), options, shutdown, |bound| {
                    // One line on stderr that scripts (and our tests) can wait for.
                    eprintln!("listening on http://{bound}/mcp");
                })
                .await?
            }
        }
        for tenant in tenants.all() {
            tenant.engine.shutdown().await;
            tenant.learning.save();
            tenant.learning.flush_vectors();
        }
        tenants.shutdown_upstreams().await;
        catalog.manager().shutdown().await;
        tracing::info!("shut down cleanly");
        anyhow::Ok(())
    })?;
    // Do not wait for blocked stdin reads or idle tasks on the way out.
    runtime.shutdown_timeout(std::time::Duration::from_secs(2));
    Ok(ExitCode::SUCCESS)
}

/// Connects to the deployment's store as the node `--node-url` names.
async fn join_cluster(url: &str, args: &ServeArgs) -> anyhow::Result<Arc<cem_cluster::Cluster>> {
    let Some(addr) = args.http else {
        anyhow::bail!(
            "a shared store (store.url or CODE_EXECUTION_MCP_STORE_URL) is for nodes serving HTTP; \
             add --http ADDR, or unset the store to serve stdio from the data directory"
        );
    };
    let node_url = match &args.node_url {
        Some(u) => u.trim_end_matches('/').to_string(),
        None if addr.ip().is_unspecified() || addr.port() == 0 => anyhow::bail!(
            "with a shared store, other nodes must reach this one: give --node-url \
             (e.g. --node-url http://10.0.0.5:{}), since --http {addr} does not say how",
            addr.port()
        ),
        None => format!("http://{addr}"),
    };
    url::Url::parse(&node_url)
        .ok()
        .filter(|u| u.scheme() == "http" || u.scheme() == "https")
        .with_context(|| format!("--node-url {node_url:?} is not an http(s) URL"))?;
    let cluster = cem_cluster::Cluster::connect(url, &node_url)
        .await
        .context("cannot join the shared store")?;
    tracing::info!(node = %node_url, id = %cluster.node_id(), "a node of a deployment sharing one store");
    Ok(cluster)
}

type Signals = Option<(tokio::signal::unix::Signal, tokio::signal::unix::Signal)>;

fn install_signal_handlers() -> Signals {
    use tokio::signal::unix::{SignalKind, signal};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(term), Ok(int)) => Some((term, int)),
        _ => {
            tracing::warn!("cannot install signal handlers; SIGTERM will end the process abruptly");
            None
        }
    }
}

async fn cancel_on_signal(signals: Signals, shutdown: CancellationToken) {
    let Some((mut term, mut int)) = signals else {
        return;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM received, shutting down"),
        _ = int.recv() => tracing::info!("SIGINT received, shutting down"),
    }
    shutdown.cancel();
}
