//! Logging to stderr: stdout belongs to the MCP protocol in stdio mode.
//!
//! Every line passes through the config's [`cem_config::Redactor`] once
//! the config is read ([`hide_secrets`]): an upstream's error that quotes
//! its command line or URL must not put a `${VAR}` value into a log file.

use std::io::Write;
use std::sync::OnceLock;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::Layer as _;
use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

static SECRETS: OnceLock<cem_config::Redactor> = OnceLock::new();

/// Removes `secrets` from every log line written from now on.
pub fn hide_secrets(secrets: &cem_config::Redactor) {
    if !secrets.is_empty() {
        let _ = SECRETS.set(secrets.clone());
    }
}

/// rmcp's targets whose debug lines carry secrets or whole messages.
const CAPPED_AT_INFO: [&str; 2] = ["rmcp::service", "rmcp::transport::auth"];

/// Logs to stderr at `level` in `format`; with a `tracer`, the server's
/// spans also go to OpenTelemetry, whatever the log level.
pub fn init(
    level: &str,
    format: crate::args::LogFormat,
    tracer: Option<opentelemetry_sdk::trace::SdkTracer>,
) {
    // rmcp logs every handshake at info; keep it quiet unless asked for.
    let spec = if level == "info" {
        "info,rmcp=warn".to_string()
    } else {
        // At debug rmcp prints whole messages (tool results, arguments,
        // the sign-in links of URL elicitations) and the authorization
        // codes it exchanges: never, unless the target is named outright.
        let mut spec = level.to_string();
        for target in CAPPED_AT_INFO {
            if !level.contains(target) {
                spec.push_str(&format!(",{target}=info"));
            }
        }
        spec
    };
    let filter = EnvFilter::try_new(&spec).unwrap_or_else(|_| {
        eprintln!("warning: invalid --log-level {level:?}; using info");
        EnvFilter::new("info")
    });
    let lines = tracing_subscriber::fmt::layer()
        .with_writer(Scrubbed)
        .with_ansi(false);
    let lines = match format {
        crate::args::LogFormat::Text => lines.boxed(),
        // The event's fields at the top level; the spans it happened in
        // (request: id, tenant, node; execution: id) as a list.
        crate::args::LogFormat::Json => lines
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(true)
            .boxed(),
    };
    // Only the server's own spans: no events (their messages may quote
    // what the log writer scrubs), nothing of the HTTP client that sends
    // the spans (which would trace its own exports). The upstream
    // connection's root span is one of them at any log level: rmcp hangs
    // its connection's task from whatever span is current, and without it
    // that is the call that opened the connection, held open (and its
    // trace unsent) for as long as the connection lives.
    let spans = tracer.map(|tracer| {
        tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_filter(
                filter_fn(|meta| {
                    meta.is_span()
                        && (meta.target().starts_with("cem_") || meta.target() == "connection")
                })
                // The server's spans are at info: nothing below it is
                // asked for on their account.
                .with_max_level_hint(tracing_subscriber::filter::LevelFilter::INFO),
            )
    });
    tracing_subscriber::registry()
        .with(lines.with_filter(filter))
        .with(spans)
        .init();
}

/// Hands each event a buffer, written to stderr without secrets when the
/// event is done (one event, one write).
struct Scrubbed;

impl<'a> MakeWriter<'a> for Scrubbed {
    type Writer = Line;

    fn make_writer(&'a self) -> Self::Writer {
        Line(Vec::new())
    }
}

struct Line(Vec<u8>);

impl Write for Line {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for Line {
    fn drop(&mut self) {
        let text = String::from_utf8_lossy(&self.0);
        let text = match SECRETS.get() {
            Some(secrets) => secrets.redact(&text).into_owned(),
            None => text.into_owned(),
        };
        let _ = std::io::stderr().lock().write_all(text.as_bytes());
    }
}
