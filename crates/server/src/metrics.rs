//! The metrics listener: `GET /metrics` in the Prometheus text format, on
//! an address of its own (`serve --metrics ADDR`, `metrics.listen`), so it
//! can stay private while `/mcp` is public. Anything else is 404.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::http::header::CONTENT_TYPE;
use axum::routing::get;
use tokio_util::sync::CancellationToken;

use crate::{ServeError, Tenants};

/// The metrics listener, bound (so a taken address stops the server at
/// start, not later in a log line).
pub struct MetricsListener(tokio::net::TcpListener);

impl MetricsListener {
    pub async fn bind(addr: SocketAddr) -> Result<Self, ServeError> {
        tokio::net::TcpListener::bind(addr)
            .await
            .map(MetricsListener)
            .map_err(|e| {
                ServeError::Io(std::io::Error::new(
                    e.kind(),
                    format!(
                        "cannot listen for metrics on {addr}: {e}. Pick another address with --metrics or metrics.listen"
                    ),
                ))
            })
    }

    /// The address bound (port 0 picks one).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.0.local_addr()
    }

    /// Serves `GET /metrics` until `shutdown`.
    pub async fn serve(
        self,
        tenants: Arc<Tenants>,
        shutdown: CancellationToken,
    ) -> Result<(), ServeError> {
        serve_metrics(self.0, tenants, shutdown).await
    }
}

async fn serve_metrics(
    listener: tokio::net::TcpListener,
    tenants: Arc<Tenants>,
    shutdown: CancellationToken,
) -> Result<(), ServeError> {
    let app = Router::new().route(
        "/metrics",
        get(move || {
            let tenants = tenants.clone();
            async move {
                (
                    [(CONTENT_TYPE, cem_metrics::CONTENT_TYPE)],
                    render(&tenants).await,
                )
            }
        }),
    );
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await?;
    Ok(())
}

/// The metrics, with the gauges read now: tenants, those holding a search
/// catalog, ready sandboxes and each configured upstream's state (the
/// local tenant's connections).
async fn render(tenants: &Tenants) -> String {
    let all = tenants.all();
    let (mut ready, mut catalogs) = (0, 0);
    for tenant in &all {
        ready += tenant.engine.pool_ready().await;
        catalogs += usize::from(tenant.catalog.is_built());
    }
    let upstreams: Vec<(String, bool)> = tenants
        .local()
        .upstreams
        .servers()
        .map(|u| {
            (
                u.config.name.clone(),
                matches!(u.status(), cem_upstream::ServerStatus::Connected),
            )
        })
        .collect();
    let metrics = cem_metrics::metrics();
    metrics.set_state(all.len(), catalogs, ready, &upstreams);
    metrics.render()
}
