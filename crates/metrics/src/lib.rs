//! The server's Prometheus metrics: one process-wide registry that every
//! layer records into ([`metrics`]), rendered for `GET /metrics` on the
//! metrics listener ([`Metrics::render`], the Prometheus text format, by
//! the `metrics` facade and its Prometheus exporter).
//!
//! Labels are bounded by design: outcomes, decisions, answers and quota
//! names are fixed sets (anything else is counted as `other`), and server
//! names are the configured upstreams'. No tenant id, session id, tool
//! argument or code ever becomes a label.
//!
//! This crate knows nothing of the server: the layers call it, and the
//! metrics listener fills the gauges that are read rather than counted
//! (tenants, the warm pool, upstream state) just before it renders.

pub mod traces;

use std::sync::LazyLock;

use metrics::{
    Unit, counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram,
};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Every metric of the process, recorded through the `metrics` facade
/// into the Prometheus recorder this installs.
pub struct Metrics {
    /// None when another recorder was installed first (a test harness):
    /// recording goes there, and there is nothing to render.
    handle: Option<PrometheusHandle>,
}

/// The process's metrics (the recorder is installed on first use).
pub fn metrics() -> &'static Metrics {
    static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::install);
    &METRICS
}

/// Execution times: 10 ms to about 5 minutes.
const EXECUTION_BUCKETS: [f64; 15] = [
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92, 163.84,
];
/// Store round trips: 0.5 ms to about 2 s.
const STORE_BUCKETS: [f64; 13] = [
    0.0005, 0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.024, 2.048,
];

/// `value` if it is one of `known`, else `other`: a label never takes a
/// value from outside a fixed set.
fn bounded(value: &str, known: &[&'static str]) -> String {
    known
        .iter()
        .find(|k| **k == value)
        .map_or("other", |k| k)
        .to_string()
}

/// The outcomes of an execution.
pub const EXECUTION_OUTCOMES: &[&str] = &["success", "error", "timeout", "refused", "cancelled"];
/// The outcomes of a tool call from code.
pub const CALL_OUTCOMES: &[&str] = &["ok", "error", "refused"];
/// The policy's decisions.
pub const DECISIONS: &[&str] = &["allow", "ask", "deny"];
/// A person's answers to an approval question.
pub const ANSWERS: &[&str] = &["allow_once", "allow_execution", "allow_session", "deny"];
/// The HTTP listener's connection caps.
pub const HTTP_CAPS: &[&str] = &["total", "per_peer"];
/// The quotas a refusal can name.
pub const QUOTAS: &[&str] = &[
    "concurrent_executions",
    "executions_per_minute",
    "requests_per_minute",
    "workspace_bytes",
    "sessions",
];

impl Metrics {
    fn install() -> Self {
        let built = PrometheusBuilder::new()
            .set_buckets_for_metric(
                Matcher::Full("cem_execution_duration_seconds".into()),
                &EXECUTION_BUCKETS,
            )
            .and_then(|b| {
                b.set_buckets_for_metric(
                    Matcher::Full("cem_store_round_trip_seconds".into()),
                    &STORE_BUCKETS,
                )
            })
            .map(PrometheusBuilder::build_recorder);
        let handle = match built {
            Ok(recorder) => {
                let handle = recorder.handle();
                metrics::set_global_recorder(recorder)
                    .is_ok()
                    .then_some(handle)
            }
            Err(_) => None,
        };
        describe_counter!("cem_executions_total", "execute_code calls by outcome");
        describe_histogram!(
            "cem_execution_duration_seconds",
            Unit::Seconds,
            "How long execute_code calls took, start to answer"
        );
        describe_counter!(
            "cem_tool_calls_total",
            "Calls of upstream tools from code, by server and outcome"
        );
        describe_counter!(
            "cem_output_schema_breaks_total",
            "Tool results that broke the outputSchema their tool declares, by server"
        );
        describe_counter!(
            "cem_policy_decisions_total",
            "The policy's decisions on tool calls"
        );
        describe_counter!("cem_approvals_total", "Answers to approval questions");
        describe_counter!(
            "cem_quota_refusals_total",
            "Requests refused by a tenant's quota, by quota"
        );
        describe_gauge!("cem_sessions", "Open MCP sessions");
        describe_counter!(
            "cem_http_connections_refused_total",
            "HTTP connections closed at accept for being over a cap (total or per_peer)"
        );
        describe_gauge!("cem_http_connections", "HTTP connections held open");
        describe_gauge!("cem_tenants", "Tenants with state on this node");
        describe_gauge!(
            "cem_search_catalogs",
            "Tenants holding a built search catalog (an idle one's is released)"
        );
        describe_gauge!(
            "cem_sandbox_pool_ready",
            "Sandboxes started and waiting for an execution, all tenants"
        );
        describe_gauge!(
            "cem_upstream_up",
            "1 when an upstream server is connected, 0 otherwise"
        );
        describe_gauge!(
            "cem_bridge_requests_in_flight",
            "Requests from sandboxed code the host is working on"
        );
        describe_histogram!(
            "cem_store_round_trip_seconds",
            Unit::Seconds,
            "Round trips to the store nodes share (with store.url)"
        );
        // Every series that has a fixed label set starts at zero, so a
        // rate over it is defined before the first event.
        for outcome in EXECUTION_OUTCOMES {
            counter!("cem_executions_total", "outcome" => *outcome).absolute(0);
        }
        for decision in DECISIONS {
            counter!("cem_policy_decisions_total", "decision" => *decision).absolute(0);
        }
        gauge!("cem_sessions").set(0.0);
        for cap in HTTP_CAPS {
            counter!("cem_http_connections_refused_total", "cap" => *cap).absolute(0);
        }
        gauge!("cem_http_connections").set(0.0);
        gauge!("cem_bridge_requests_in_flight").set(0.0);
        Metrics { handle }
    }

    /// One execution ended with `outcome` after `seconds`.
    pub fn execution(&self, outcome: &str, seconds: f64) {
        counter!("cem_executions_total", "outcome" => bounded(outcome, EXECUTION_OUTCOMES))
            .increment(1);
        histogram!("cem_execution_duration_seconds").record(seconds);
    }

    /// One tool call from code to `server` ended with `outcome`.
    pub fn tool_call(&self, server: &str, outcome: &str) {
        counter!("cem_tool_calls_total", "server" => server.to_string(),
                 "outcome" => bounded(outcome, CALL_OUTCOMES))
        .increment(1);
    }

    /// A result of `server`'s tool broke the `outputSchema` it declares.
    pub fn output_schema_broken(&self, server: &str) {
        counter!("cem_output_schema_breaks_total", "server" => server.to_string()).increment(1);
    }

    pub fn policy_decision(&self, decision: &str) {
        counter!("cem_policy_decisions_total", "decision" => bounded(decision, DECISIONS))
            .increment(1);
    }

    pub fn approval(&self, answer: &str) {
        counter!("cem_approvals_total", "answer" => bounded(answer, ANSWERS)).increment(1);
    }

    /// An HTTP connection was closed at accept, over `cap` (`total` or
    /// `per_peer`).
    pub fn http_connection_refused(&self, cap: &str) {
        counter!("cem_http_connections_refused_total", "cap" => bounded(cap, HTTP_CAPS))
            .increment(1);
    }

    /// HTTP connections held open now.
    pub fn http_connections(&self, held: usize) {
        gauge!("cem_http_connections").set(held as f64);
    }

    pub fn quota_refused(&self, quota: &str) {
        counter!("cem_quota_refusals_total", "quota" => bounded(quota, QUOTAS)).increment(1);
    }

    /// An MCP session opened; the guard counts it closed when dropped.
    pub fn session_opened(&self) -> SessionCount {
        gauge!("cem_sessions").increment(1.0);
        SessionCount
    }

    /// A request from code is being worked on until the guard drops.
    pub fn bridge_request(&self) -> InFlight {
        gauge!("cem_bridge_requests_in_flight").increment(1.0);
        InFlight
    }

    pub fn store_round_trip(&self, seconds: f64) {
        histogram!("cem_store_round_trip_seconds").record(seconds);
    }

    /// The gauges read at scrape time: tenants, those holding a search
    /// catalog, ready sandboxes, and each configured upstream's state.
    pub fn set_state(
        &self,
        tenants: usize,
        search_catalogs: usize,
        pool_ready: usize,
        upstreams: &[(String, bool)],
    ) {
        gauge!("cem_tenants").set(tenants as f64);
        gauge!("cem_search_catalogs").set(search_catalogs as f64);
        gauge!("cem_sandbox_pool_ready").set(pool_ready as f64);
        for (server, up) in upstreams {
            gauge!("cem_upstream_up", "server" => server.clone()).set(f64::from(u8::from(*up)));
        }
    }

    /// Every metric in the Prometheus text format (empty when another
    /// recorder was installed first).
    pub fn render(&self) -> String {
        self.handle
            .as_ref()
            .map(PrometheusHandle::render)
            .unwrap_or_default()
    }
}

/// The content type of [`Metrics::render`].
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Counts an open MCP session until dropped.
#[derive(Debug)]
pub struct SessionCount;

impl Drop for SessionCount {
    fn drop(&mut self) {
        gauge!("cem_sessions").decrement(1.0);
    }
}

/// Counts a bridge request in flight until dropped.
#[derive(Debug)]
pub struct InFlight;

impl Drop for InFlight {
    fn drop(&mut self) {
        gauge!("cem_bridge_requests_in_flight").decrement(1.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_render_with_bounded_labels() {
        let m = metrics();
        m.execution("success", 0.2);
        m.execution("made-up", 0.2);
        m.tool_call("git", "ok");
        m.quota_refused("requests_per_minute");
        {
            let _s = m.session_opened();
            let _b = m.bridge_request();
            assert!(m.render().contains("cem_sessions 1"));
        }
        m.set_state(3, 1, 2, &[("git".into(), true), ("time".into(), false)]);
        let text = m.render();
        for line in [
            "cem_executions_total{outcome=\"success\"} 1",
            "cem_executions_total{outcome=\"other\"} 1",
            "cem_tool_calls_total{server=\"git\",outcome=\"ok\"} 1",
            "cem_policy_decisions_total{decision=\"deny\"} 0",
            "cem_quota_refusals_total{quota=\"requests_per_minute\"} 1",
            "cem_sessions 0",
            "cem_bridge_requests_in_flight 0",
            "cem_tenants 3",
            "cem_search_catalogs 1",
            "cem_sandbox_pool_ready 2",
            "cem_upstream_up{server=\"time\"} 0",
            "cem_execution_duration_seconds_count 2",
            "cem_execution_duration_seconds_bucket{le=\"0.32\"} 2",
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
    }
}
