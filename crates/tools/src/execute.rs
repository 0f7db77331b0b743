//! execute_code: agent Python in the sandbox.

use std::sync::Arc;

use cem_engine::{EngineError, ExecRequest};
use serde_json::json;

use schemars::JsonSchema;
use serde::Deserialize;

use tracing::Instrument;

use crate::def::ToolDef;
use crate::input::{input_schema, parse};
use cem_host::AppState;
use cem_host::gate::{Caller, Execution};
use cem_host::privacy::{self, Session};
use cem_host::{Answer, Args, ToolFailure};

pub const EXECUTE: ToolDef = ToolDef {
    name: "execute_code",
    description: "Run Python 3 in a sandbox (no network; cwd: the persistent workspace). Set `result` to return; print() is output; show(fig) sends an image; top-level await works. In scope: json re math read_file write_file list_files delete_file filter_by_field summarize_list aggregate_stats call_tool tools search_tools report_progress save_skill load_skill list_skills install table (import skills.<name>).",
    schema: input_schema::<ExecuteInput>,
    minimal: true,
};

/// The most code one execute_code runs, in characters: far more than an
/// agent writes (a skill is at most 256 KiB); data belongs in context_vars
/// or workspace files.
const MAX_CODE: usize = 1 << 20;
/// The most variables context_vars defines.
const MAX_CONTEXT_VARS: usize = 1000;
/// The most packages one execution asks for, and the longest requirement
/// (`pandas>=2.2,<3` with extras and markers is well under it).
const MAX_REQUIREMENTS: usize = 100;
const MAX_REQUIREMENT: usize = 200;

#[derive(Deserialize, JsonSchema)]
struct ExecuteInput {
    #[schemars(extend("maxLength" = MAX_CODE))]
    code: String,
    /// Variables defined before the code runs
    #[schemars(extend("maxProperties" = MAX_CONTEXT_VARS))]
    context_vars: Option<serde_json::Map<String, serde_json::Value>>,
    #[schemars(extend("default" = 30))]
    timeout_seconds: Option<u64>,
    #[schemars(extend("default" = 500))]
    memory_mb: Option<u64>,
    /// Keep variables across calls with the same id
    #[schemars(extend("maxLength" = cem_engine::MAX_SESSION_ID))]
    session_id: Option<String>,
    /// Start the session afresh
    reset_session: Option<bool>,
    /// Packages the host installs before the code runs, e.g. ["pandas"] (as the server's config allows)
    #[schemars(extend("maxItems" = MAX_REQUIREMENTS), inner(length(max = MAX_REQUIREMENT)))]
    requirements: Option<Vec<String>>,
}

pub async fn execute(state: &Arc<AppState>, args: Args, session: &Session) -> Answer {
    match request(&args) {
        Err(failure) => Answer::Plain(Err(failure)),
        Ok(mut request) => {
            // An interpreter session belongs to the MCP session that named
            // it: another client using the same name gets its own.
            request.session_owner = Some(session.key.clone());
            request.answer = answer_limits(state);
            run(state, request, session).await
        }
    }
}

async fn run(state: &Arc<AppState>, mut request: ExecRequest, session: &Session) -> Answer {
    // Held until the execution ends: one of the tenant's concurrent slots.
    let _slot = match state.quota.start_execution() {
        Ok(slot) => slot,
        Err(e) => return Answer::Plain(Err(ToolFailure(e.message))),
    };
    let quotas = state.quota.config();
    // Across nodes: the tenant's counters in the shared store.
    let shared_slot = match shared_slot(state).await {
        Ok(slot) => slot,
        Err(e) => return Answer::Plain(Err(e)),
    };
    if let (Some(cluster), Some(id)) = (&state.cluster, &request.session_id)
        && !session.key.starts_with("connection:")
    {
        // Any node that receives the next call of this session sends it here.
        if let Err(e) = cluster
            .claim(cem_cluster::SessionKind::Interpreter, &state.tenant, id)
            .await
        {
            return Answer::Plain(Err(ToolFailure(e.to_string())));
        }
    }
    if quotas.workspace_bytes.is_some() {
        let st = state.clone();
        match cem_host::blocking(state, move || Ok(st.workspace.usage()?)).await {
            Ok(usage) => request.disk_limit_bytes = state.quota.disk_allowance(usage.bytes),
            Err(e) => return Answer::Plain(Err(e)),
        }
    }
    if let Some(n) = quotas.sessions {
        request.max_sessions = Some((usize::try_from(n).unwrap_or(usize::MAX), "quotas.sessions"));
    }
    let mut exec = Execution::new(
        &state.gate,
        Caller::Code,
        &session.key,
        request.session_id.clone(),
        session.approver.clone(),
        &session.no_approver,
    );
    // An upstream's progress on a call the code made is the execution's.
    exec.progress = session.progress.clone().map(|sink| {
        let (state, session) = (state.clone(), session.clone());
        Arc::new(
            move |done: f64, total: Option<f64>, message: Option<String>| {
                let message = message.map(|m| privacy::shown(&state, &session, m));
                sink.report(done, total, message)
            },
        ) as cem_upstream::ProgressFn
    });
    let exec = Arc::new(exec);
    let code_digest = cem_host::gate::sha256(request.code.as_bytes());
    let code_bytes = request.code.len();
    // The wrappers code imports are typed with what every node learned.
    cem_host::cluster::pull_shapes(state).await;
    let bridge = crate::bridge::ToolBridge::shared(state.clone(), session.clone(), exec.clone());
    let before = crate::written::snapshot(state).await;
    // Until the answer is in hand, dropping this future (the client
    // cancelled) leaves the bookkeeping to the guard.
    let mut unfinished = Unfinished(Some(Bookkeeping {
        state: state.clone(),
        session: session.clone(),
        exec: exec.clone(),
        code_digest: code_digest.clone(),
        code_bytes,
        shared_slot,
        before: before.clone(),
        started: std::time::Instant::now(),
    }));
    // Log lines of the execution carry its id, as its audit line does.
    let span = tracing::info_span!(
        "execution",
        execution = %exec.id,
        tool_calls = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    );
    let outcome = state
        .engine
        .execute(request, Some(bridge))
        .instrument(span.clone())
        .await;
    match &outcome {
        Ok(answer) => {
            span.record("tool_calls", answer.tool_calls);
            if !answer.success {
                cem_metrics::traces::failed(&span);
            }
        }
        Err(_) => cem_metrics::traces::failed(&span),
    }
    drop(span);
    // The counts of the shapes its calls fit, for `tools shapes` and other
    // readers of the file (a changed shape was written at once).
    if state.shapes.unsaved() {
        let shapes = state.shapes.clone();
        let _ = cem_host::blocking(state, move || {
            shapes.flush();
            Ok(())
        })
        .await;
    }
    let written = crate::written::written_since(state, before).await;
    // The outcome is known and recorded now; a drop past this point (while
    // the slot is given back) loses at most that, which frees itself.
    let shared_slot = unfinished.0.take().and_then(|b| b.shared_slot);
    audit_execution(state, &exec, &code_digest, code_bytes, &outcome);
    if let (Some(cluster), Some(slot)) = (&state.cluster, shared_slot)
        && let Err(e) = cluster.finish_execution(slot).await
    {
        tracing::warn!(error = %e, "an execution's end was not recorded; its slot frees itself later");
    }
    match outcome {
        Ok(mut answer) => {
            let is_error = !answer.success;
            let attached = crate::shown::attach(state, std::mem::take(&mut answer.shown)).await;
            let mut body = serde_json::to_value(&answer)
                .unwrap_or_else(|e| json!({"success": false, "error": e.to_string()}));
            crate::shown::record(&mut body, &attached);
            if !written.is_empty()
                && let Some(obj) = body.as_object_mut()
            {
                obj.insert("files_written".into(), json!(written));
            }
            if privacy::automatic(&state.config.pii) {
                let before = exec.tokenized.lock().map(|c| c.clone()).unwrap_or_default();
                tokenize_answer(state, session, before, &mut body);
            }
            Answer::Flagged {
                body,
                is_error,
                images: attached.blocks,
            }
        }
        Err(EngineError::BadRequest(msg)) => Answer::Plain(Err(ToolFailure(msg))),
        Err(e) => Answer::Plain(Err(ToolFailure(e.to_string()))),
    }
}

/// What an execution's end must record, whoever ends it.
struct Bookkeeping {
    state: Arc<AppState>,
    session: Session,
    exec: Arc<Execution>,
    code_digest: String,
    code_bytes: usize,
    shared_slot: Option<cem_cluster::ExecutionSlot>,
    before: Option<std::collections::HashMap<String, (u64, i128)>>,
    started: std::time::Instant,
}

/// Records an execution whose request was dropped before it answered (the
/// client cancelled it, or went away): its audit line (`cancelled`), its
/// slot on the shared store, the workspace files it wrote (change notices,
/// pushed to the store) and its session's new tokens. The interpreter was
/// stopped by the engine's own guard when its future was dropped.
struct Unfinished(Option<Bookkeeping>);

impl Drop for Unfinished {
    fn drop(&mut self) {
        let Some(b) = self.0.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            let ms = b.started.elapsed().as_millis() as u64;
            cem_metrics::metrics().execution("cancelled", ms as f64 / 1000.0);
            audit_line(
                &b.state,
                &b.exec,
                &b.code_digest,
                b.code_bytes,
                ("cancelled", ms, b.exec.calls(), Some("the client cancelled the request".into())),
            );
            crate::written::written_since(&b.state, b.before).await;
            if let (Some(cluster), Some(slot)) = (&b.state.cluster, b.shared_slot)
                && let Err(e) = cluster.finish_execution(slot).await
            {
                tracing::warn!(error = %e, "a cancelled execution's end was not recorded; its slot frees itself later");
            }
            cem_host::cluster::after_cancelled(&b.state, &b.session).await;
        });
    }
}

/// One of the tenant's execution slots across all nodes (None: no store,
/// or no limit that needs one).
async fn shared_slot(state: &AppState) -> Result<Option<cem_cluster::ExecutionSlot>, ToolFailure> {
    let Some(cluster) = &state.cluster else {
        return Ok(None);
    };
    let q = state.quota.config();
    if q.concurrent_executions.is_none() && q.executions_per_minute.is_none() {
        return Ok(None);
    }
    let stale = state.config.sandbox.max_timeout_seconds + 60;
    match cluster
        .start_execution(
            &state.tenant,
            q.concurrent_executions,
            q.executions_per_minute,
            stale,
        )
        .await?
    {
        Ok(slot) => Ok(Some(slot)),
        Err(cem_cluster::Refused::Concurrent { limit }) => {
            cem_metrics::metrics().quota_refused("concurrent_executions");
            Err(ToolFailure(format!(
                "quotas.concurrent_executions is {limit}, and that many of your executions are running on the server's nodes; wait for one to finish and retry"
            )))
        }
        Err(cem_cluster::Refused::PerMinute {
            limit,
            retry_after_secs,
        }) => {
            cem_metrics::metrics().quota_refused("executions_per_minute");
            Err(ToolFailure(format!(
                "quotas.executions_per_minute is {limit}, and you started that many in the last minute across the server's nodes; retry in {retry_after_secs} s"
            )))
        }
    }
}

/// The execution's line in the audit log. The calls it made were recorded
/// before their answers returned; a failure here can only be logged.
pub fn audit_execution(
    state: &AppState,
    exec: &Execution,
    code_digest: &str,
    code_bytes: usize,
    outcome: &Result<cem_engine::ExecAnswer, EngineError>,
) {
    let (outcome, ms, calls, error) = match outcome {
        Ok(a) => (
            if a.success { "success" } else { "error" },
            a.execution_time_ms,
            a.tool_calls,
            a.error.clone(),
        ),
        Err(e) => {
            let why = e.to_string();
            if why.contains("quotas.sessions") {
                cem_metrics::metrics().quota_refused("sessions");
            }
            ("refused", 0, 0, Some(why))
        }
    };
    let timed_out = error
        .as_deref()
        .is_some_and(|e| e.starts_with("TimeoutError"));
    cem_metrics::metrics().execution(
        if timed_out { "timeout" } else { outcome },
        ms as f64 / 1000.0,
    );
    audit_line(
        state,
        exec,
        code_digest,
        code_bytes,
        (outcome, ms, calls, error),
    );
}

/// Writes one execution line: (outcome, ms, tool calls, error).
fn audit_line(
    state: &AppState,
    exec: &Execution,
    code_digest: &str,
    code_bytes: usize,
    (outcome, ms, calls, error): (&str, u64, u64, Option<String>),
) {
    let error = error.map(|e| {
        e.lines()
            .next()
            .unwrap_or_default()
            .chars()
            .take(300)
            .collect::<String>()
    });
    let written = state.gate.audit.append(
        "execution",
        json!({
            "exec": exec.id, "caller": exec.caller.as_str(), "session": exec.session,
            "session_id": exec.session_id, "code_digest": code_digest, "code_bytes": code_bytes,
            "ms": ms, "outcome": outcome, "tool_calls": calls, "error": error,
        }),
    );
    if let Err(e) = written {
        tracing::error!(error = %e, exec = %exec.id, "the execution could not be recorded");
    }
}

/// Everything the model reads in the answer goes through the session's
/// vault: result, output, stderr, the error and its traceback. `counts`
/// holds what the tools' answers had before the code saw them.
fn tokenize_answer(
    state: &AppState,
    session: &Session,
    mut counts: std::collections::BTreeMap<cem_pii::Kind, usize>,
    body: &mut serde_json::Value,
) {
    let Some(obj) = body.as_object_mut() else {
        return;
    };
    for field in [
        "result",
        "table",
        "output",
        "stderr",
        "error",
        "traceback",
        "note",
        "files_written",
    ] {
        if let Some(value) = obj.get_mut(field) {
            privacy::tokenize_value(&session.vault, value, &state.config.pii.types, &mut counts);
        }
    }
    if !counts.is_empty() {
        obj.insert("pii".into(), privacy::summary(&counts));
    }
}

fn request(args: &Args) -> Result<ExecRequest, ToolFailure> {
    let input: ExecuteInput = parse(args)?;
    Ok(ExecRequest {
        code: input.code,
        context_vars: input.context_vars,
        timeout_seconds: input.timeout_seconds,
        memory_mb: input.memory_mb,
        session_id: input.session_id,
        reset_session: input.reset_session.unwrap_or(false),
        requirements: input.requirements.unwrap_or_default(),
        ..Default::default()
    })
}

/// What the config lets one answer carry.
fn answer_limits(state: &AppState) -> cem_engine::AnswerLimits {
    let a = &state.config.answers;
    cem_engine::AnswerLimits {
        max_images: a.max_images,
        max_image_bytes: a.max_image_bytes,
        table_rows: usize::try_from(a.table_rows).unwrap_or(usize::MAX),
    }
}
