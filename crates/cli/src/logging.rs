//! Logging to stderr: stdout belongs to the MCP protocol in stdio mode.

use tracing_subscriber::EnvFilter;

pub fn init(level: &str) {
    // rmcp logs every handshake at info; keep it quiet unless asked for.
    let spec = if level == "info" {
        "info,rmcp=warn"
    } else {
        level
    };
    let filter = EnvFilter::try_new(spec).unwrap_or_else(|_| {
        eprintln!("warning: invalid --log-level {level:?}; using info");
        EnvFilter::new("info")
    });
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
}
