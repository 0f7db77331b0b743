//! A tool call's span continues the caller's trace: the W3C
//! `traceparent` (and `tracestate`) of the HTTP request that carried it.
//!
//! Read through OpenTelemetry's global propagator, which the binary sets
//! only when traces are exported; without it (stdio, or no collector) this
//! does nothing.

use axum::http::HeaderMap;
use opentelemetry::propagation::Extractor;
use rmcp::RoleServer;
use rmcp::service::RequestContext;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// Makes the trace the request's headers name the parent of `span`.
pub(crate) fn continue_trace(span: &tracing::Span, context: &RequestContext<RoleServer>) {
    let Some(parts) = context.extensions.get::<axum::http::request::Parts>() else {
        return;
    };
    let parent = opentelemetry::global::get_text_map_propagator(|propagator| {
        propagator.extract(&Headers(&parts.headers))
    });
    // A span that is not recorded (no exporter) has nothing to set.
    let _ = span.set_parent(parent);
}

/// A span for work that outlives the request that started it (an
/// execution run as a task, or one that may pause for an approval): a root
/// for tracing, so it does not hold the request's span open until the work
/// ends, whose parent in traces is the current (request's) span, so the
/// execution stays in the caller's trace. Spans made inside it (the
/// execution's, on the tenant's workers) hang from it.
pub(crate) fn detached(work: &'static str) -> tracing::Span {
    let span = tracing::info_span!(
        parent: None,
        "detached",
        work,
        otel.name = tracing::field::Empty,
    );
    cem_metrics::traces::name(&span, || work.to_string());
    let _ = span.set_parent(tracing::Span::current().context());
    span
}

struct Headers<'a>(&'a HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}
