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

struct Headers<'a>(&'a HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}
