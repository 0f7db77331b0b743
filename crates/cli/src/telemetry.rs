//! OpenTelemetry traces over OTLP/HTTP, off unless an endpoint is given.
//!
//! The spans are the ones the server opens anyway (a tool call, its
//! execution, each bridge request from code, each upstream call); this
//! module only gives them an exporter. What a span carries is names and
//! ids (tool, server, execution id, tenant digest, node), never arguments,
//! results or messages: those can hold secrets and personal data, which
//! the log writer scrubs and a collector would not.

use anyhow::Context as _;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};

/// The standard variable for the full traces URL, used as it is.
const TRACES_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";

/// The exporter of a running server; [`Traces::shutdown`] sends what is
/// still queued.
pub struct Traces {
    provider: SdkTracerProvider,
}

impl Traces {
    /// Starts exporting to `base`'s `/v1/traces` (or to
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, which wins, as the OTLP
    /// exporter specification says), or returns `None` when neither is set.
    ///
    /// Must run before any async runtime: the blocking HTTP client it
    /// builds starts a runtime of its own.
    pub fn start(base: Option<&url::Url>) -> anyhow::Result<Option<(Traces, SdkTracer)>> {
        let full = std::env::var(TRACES_ENDPOINT)
            .ok()
            .filter(|v| !v.trim().is_empty());
        let Some(endpoint) = traces_url(full, base)? else {
            return Ok(None);
        };
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_endpoint(endpoint.as_str())
            .build()
            .with_context(|| format!("cannot set up the OTLP trace exporter for {endpoint}"))?;
        let mut resource = Resource::builder();
        // OTEL_SERVICE_NAME (read by the builder) names the service when set.
        if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
            resource = resource.with_service_name("code-execution-mcp");
        }
        let resource = resource
            .with_attribute(opentelemetry::KeyValue::new(
                "service.version",
                env!("CARGO_PKG_VERSION"),
            ))
            .build();
        // The sampler is the SDK's default, OTEL_TRACES_SAMPLER if set:
        // parent-based, so a client's `traceparent` that says "not
        // sampled" is obeyed.
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource)
            .build();
        // The W3C `traceparent` of an HTTP request is read through the
        // global propagator (cem-server does, per tool call).
        opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
        let tracer = provider.tracer("code-execution-mcp");
        Ok(Some((Traces { provider }, tracer)))
    }

    /// Sends the spans still queued (the batch processor's own thread does
    /// the HTTP), waiting at most its export timeout.
    pub fn shutdown(self) {
        if let Err(e) = self.provider.shutdown() {
            eprintln!("warning: traces not all sent at shutdown: {e}");
        }
    }
}

/// Where spans go: the traces URL as given, else the base URL's
/// `/v1/traces` (what OTEL_EXPORTER_OTLP_ENDPOINT means), else nowhere.
fn traces_url(full: Option<String>, base: Option<&url::Url>) -> anyhow::Result<Option<url::Url>> {
    if let Some(full) = full {
        let url = url::Url::parse(full.trim())
            .with_context(|| format!("{TRACES_ENDPOINT} is not a URL: {full:?}"))?;
        return Ok(Some(http_only(url)?));
    }
    let Some(base) = base else {
        return Ok(None);
    };
    let path = format!("{}/v1/traces", base.path().trim_end_matches('/'));
    let mut url = base.clone();
    url.set_path(&path);
    Ok(Some(http_only(url)?))
}

fn http_only(url: url::Url) -> anyhow::Result<url::Url> {
    match url.scheme() {
        "http" | "https" => Ok(url),
        other => anyhow::bail!(
            "the OTLP endpoint {url} is {other}:, but traces are sent over HTTP (OTLP/HTTP, protobuf): give the collector's http:// or https:// address, usually port 4318"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> url::Url {
        match url::Url::parse(s) {
            Ok(u) => u,
            Err(e) => panic!("{s}: {e}"),
        }
    }

    fn resolved(full: Option<&str>, base: Option<&str>) -> Option<String> {
        let base = base.map(url);
        match traces_url(full.map(str::to_string), base.as_ref()) {
            Ok(u) => u.map(|u| u.to_string()),
            Err(e) => panic!("{e:#}"),
        }
    }

    #[test]
    fn the_base_gets_the_traces_path_and_the_full_url_is_kept() {
        assert_eq!(resolved(None, None), None);
        assert_eq!(
            resolved(None, Some("http://collector:4318")).as_deref(),
            Some("http://collector:4318/v1/traces")
        );
        assert_eq!(
            resolved(None, Some("http://collector:4318/otlp/")).as_deref(),
            Some("http://collector:4318/otlp/v1/traces")
        );
        assert_eq!(
            resolved(Some("http://a:6006/v1/traces"), Some("http://b:4318")).as_deref(),
            Some("http://a:6006/v1/traces")
        );
    }

    #[test]
    fn a_grpc_or_garbage_endpoint_is_refused_with_what_to_give() {
        let Err(e) = traces_url(None, Some(&url("grpc://collector:4317"))) else {
            panic!("grpc accepted");
        };
        assert!(e.to_string().contains("4318"), "{e}");
        let Err(e) = traces_url(Some("not a url".into()), None) else {
            panic!("garbage accepted");
        };
        assert!(e.to_string().contains(TRACES_ENDPOINT), "{e}");
    }
}
