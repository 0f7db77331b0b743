//! What OpenTelemetry needs of a span beyond its fields: its name there
//! (where it differs), its kind (where it is not internal) and whether it
//! failed, recorded only while the binary exports
//! traces (`serve --otlp-endpoint`).
//!
//! They are `otel.*` fields (tracing-opentelemetry reads them), declared
//! empty when the span is made; recorded, the log writer would print them
//! on every line as well, so without an exporter they stay empty.

use std::sync::atomic::{AtomicBool, Ordering};

static EXPORTING: AtomicBool = AtomicBool::new(false);

/// Spans are exported from now on (the binary, once its exporter is up).
pub fn exporting() {
    EXPORTING.store(true, Ordering::Relaxed);
}

/// How a span relates to the world, where it is not work inside the
/// process (OpenTelemetry's default kind, which needs no field).
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    /// The server's side of a request (a tool call).
    Server,
    /// A request this process makes (an upstream call).
    Client,
}

/// Names `span` for traces (`otel.name`), where its tracing name says
/// less: `name` is only made when spans are exported.
pub fn name(span: &tracing::Span, name: impl FnOnce() -> String) {
    if EXPORTING.load(Ordering::Relaxed) {
        span.record("otel.name", name().as_str());
    }
}

/// Gives `span` its kind for traces (`otel.kind`).
pub fn kind(span: &tracing::Span, kind: Kind) {
    if EXPORTING.load(Ordering::Relaxed) {
        let kind = match kind {
            Kind::Server => "server",
            Kind::Client => "client",
        };
        span.record("otel.kind", kind);
    }
}

/// Marks `span` as failed for traces (`otel.status_code`).
pub fn failed(span: &tracing::Span) {
    if EXPORTING.load(Ordering::Relaxed) {
        span.record("otel.status_code", "ERROR");
    }
}
