//! The host side of tool calls from sandboxed code: routes "server.tool"
//! through the upstream manager and turns MCP results into Python values.
//! Credentials never cross: the sandbox sends names and arguments, and
//! gets back results; the upstream's env and headers stay here.

use std::sync::Arc;

use base64::Engine as _;
use cem_catalog::python::alias;
use cem_engine::{BoxFuture, Bridge, CallError, Called};
use cem_metrics::traces;
use serde_json::{Value, json};
use tracing::Instrument as _;

use cem_host::AppState;
use cem_host::gate::Execution;
use cem_host::privacy::{self, Session};
use cem_pii::Kind;

/// Why code cannot turn tokens back into values in automatic mode.
const DETOKENIZE_IN_AUTO: &str = "detokenize_pii is not available with pii.mode \"auto\": code works on \
     tokens and never holds the real values. Pass the tokens to a tool (call_tool or a wrapper): the host \
     puts the real values back for the tools pii.restore_to allows. detokenize_pii(text, tokens) with the \
     mapping tokenize_pii gave still works, and pii.mode \"manual\" gives code the vault.";

/// The most text one tokenize_pii / detokenize_pii call takes from code.
const MAX_PII_TEXT: usize = 1 << 20;
/// Binary content above this many bytes is written to the workspace.
const INLINE_BINARY: usize = 64 << 10;

pub struct ToolBridge {
    state: Arc<AppState>,
    /// The execution's policy state: budgets, grants, how to ask.
    exec: Arc<Execution>,
    /// The session the execution belongs to: its vault restores tokens in
    /// tool arguments and serves tokenize_pii / detokenize_pii.
    session: Session,
}

impl ToolBridge {
    pub fn shared(state: Arc<AppState>, session: Session, exec: Arc<Execution>) -> Arc<dyn Bridge> {
        Arc::new(ToolBridge {
            state,
            session,
            exec,
        })
    }
}

impl Bridge for ToolBridge {
    fn call(&self, tool: String, arguments: Value) -> BoxFuture<Result<Called, CallError>> {
        let state = self.state.clone();
        let session = self.session.clone();
        let exec = self.exec.clone();
        traced("call", async move {
            // Nothing of the config's credentials reaches the code: the
            // manager removed them from the tool's answer and its errors;
            // an error may also quote the gate's words, so those are looked
            // at again here.
            let secrets = &state.config.secrets;
            let _in_flight = cem_metrics::metrics().bridge_request();
            let answer = match call(&state, &session, &exec, &tool, arguments).await {
                Ok(value) => Ok(value),
                Err(mut e) => {
                    e.message = secrets.redact_credentials(&e.message).into_owned();
                    Err(e)
                }
            };
            let (answer, warning) = match answer {
                Ok(called) => (Ok(called.value), called.warning),
                Err(e) => (Err(e), None),
            };
            let answer = if privacy::automatic(&state.config.pii) {
                for_code(&state, &session, &exec, answer).await
            } else {
                answer
            };
            answer.map(|value| Called { value, warning })
        })
    }

    fn asking(&self) -> Option<tokio::sync::watch::Receiver<bool>> {
        Some(self.exec.paused.watch())
    }

    fn search(&self, arguments: Value) -> BoxFuture<Result<Value, String>> {
        let state = self.state.clone();
        let session = self.session.clone();
        traced("search", async move {
            let _in_flight = cem_metrics::metrics().bridge_request();
            // search_tools itself, as the agent would call it (what it shows of
            // skills is tokenized in automatic mode), but not through the
            // dispatcher: the execution this runs in pulled the store already.
            let mut args = cem_host::Args::new(match arguments {
                Value::Object(map) => Some(map),
                _ => None,
            });
            // The same bounds as the agent's own search_tools.
            crate::SEARCH
                .check_sizes(&state, &mut args)
                .map_err(|e| e.0)?;
            let mut body = crate::discovery::search(&state, args, &session)
                .await
                .map_err(|e| e.0)?;
            if privacy::automatic(&state.config.pii) {
                privacy::tokenize_answer(&state, &session, &mut body);
            }
            Ok(body)
        })
    }

    fn skill(&self, arguments: Value) -> BoxFuture<Result<Value, String>> {
        let state = self.state.clone();
        traced("skill", async move {
            let _in_flight = cem_metrics::metrics().bridge_request();
            skill(&state, &arguments).await
        })
    }

    fn wrappers(&self, arguments: Value) -> BoxFuture<Result<Value, String>> {
        let state = self.state.clone();
        let exec = self.exec.clone();
        traced("wrappers", async move {
            let server = arguments["server"].as_str().unwrap_or_default();
            // A server each person signs in to is listed as this person,
            // who signs in first if they must.
            let personal = cem_host::signin::takes_sign_in(&state.upstreams, server);
            if personal {
                cem_host::signin::ready(&state.upstreams, &exec, server).await?;
            }
            let written = state
                .catalog
                .ensure_wrappers_listed_by(server, personal.then_some(state.upstreams.as_ref()))
                .await?;
            // The package the wrappers are in: `GitHub` finds the server
            // `github`, whose module is `servers.github`.
            let module = cem_catalog::python::module_name(&written);
            Ok(json!({"server": written, "module": module}))
        })
    }

    fn progress(&self, update: Value) {
        if let Some(sink) = &self.session.progress
            && let Some(done) = update["done"].as_f64()
        {
            // The client shows it to people and models: tokens, not personal data.
            let message = update["message"]
                .as_str()
                .map(|m| cem_host::privacy::shown(&self.state, &self.session, m.to_string()));
            sink.report(done, update["total"].as_f64(), message);
        }
    }

    fn pii(&self, arguments: Value) -> BoxFuture<Result<Value, String>> {
        let session = self.session.clone();
        let host = self.state.host.clone();
        // Detection is CPU work: off the async workers, within the
        // tenant's share of the host's threads.
        let automatic = privacy::automatic(&self.state.config.pii);
        traced("pii", async move {
            let _in_flight = cem_metrics::metrics().bridge_request();
            host.run(move || pii(&session, &arguments, automatic))
                .await?
        })
    }
}

/// `work`, a request of `kind` from code, as a bridge future in its span,
/// which is marked failed (for traces) when the work fails.
fn traced<T: Send + 'static, E: Send + 'static>(
    kind: &'static str,
    work: impl std::future::Future<Output = Result<T, E>> + Send + 'static,
) -> BoxFuture<Result<T, E>> {
    Box::pin(
        async move {
            let answer = work.await;
            if answer.is_err() {
                traces::failed(&tracing::Span::current());
            }
            answer
        }
        .instrument(bridge_span(kind)),
    )
}

/// The span of one request from code, inside its execution's: `kind` is
/// call, search, skill, wrappers or pii. A call's `tool` is recorded once
/// it names a tool the server listed ([`call`]): until then it is the
/// code's own string, which may hold anything the code holds.
fn bridge_span(kind: &'static str) -> tracing::Span {
    let span = tracing::info_span!(
        "bridge",
        kind,
        tool = tracing::field::Empty,
        otel.name = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    );
    traces::name(&span, || format!("bridge {kind}"));
    span
}

/// save_skill / load_skill / list_skills from code. The code was parsed
/// in the caller's sandbox (its analysis comes along); the host checks the
/// name, description and size itself.
async fn skill(state: &Arc<AppState>, arguments: &Value) -> Result<Value, String> {
    let text = |key: &str| arguments[key].as_str().unwrap_or_default().to_string();
    let store = state.skills.clone();
    match arguments["op"].as_str() {
        Some("save") => {
            let name = cem_store::SkillName::parse(&text("name")).map_err(|e| e.to_string())?;
            let analysis =
                crate::skill_ops::analysis_of(&name, &arguments["analysis"]).map_err(|e| e.0)?;
            let saved = crate::skill_ops::save(
                state,
                name.module(),
                &text("description"),
                &text("code"),
                Some(analysis),
            )
            .await
            .map_err(|e| e.0)?;
            Ok(json!({
                "name": saved.meta.name,
                "version": saved.meta.version,
                "unchanged": saved.unchanged,
                "functions": saved.meta.functions,
                "tools": saved.meta.tools,
            }))
        }
        Some("load") => {
            let version = match &arguments["version"] {
                Value::Null => None,
                v => Some(
                    v.as_u64()
                        .filter(|v| *v > 0)
                        .ok_or("version must be a positive integer")?,
                ),
            };
            let name = text("name");
            let skill = cem_host::blocking(state, move || Ok(store.load(&name, version)?))
                .await
                .map_err(|e| e.0)?;
            Ok(json!({"code": skill.code, "meta": skill.meta}))
        }
        Some("list") => {
            let (skills, _) = cem_host::blocking(state, move || Ok(store.list()?))
                .await
                .map_err(|e| e.0)?;
            Ok(json!(skills))
        }
        _ => Err("op must be save, load or list".into()),
    }
}

/// A tool's answer as code may hold it in automatic mode: personal data as
/// the session's tokens, the result and an error's words alike. Code never
/// holds a real value there, so none can reach the model through what it
/// returns however it transforms it; the host restores the tokens in the
/// arguments of the next tool call, for the tools `pii.restore_to` allows.
/// Detection is CPU work: it runs within the tenant's share of the host.
async fn for_code(
    state: &Arc<AppState>,
    session: &Session,
    exec: &Execution,
    answer: Result<Value, CallError>,
) -> Result<Value, CallError> {
    let vault = session.vault.clone();
    let kinds = state.config.pii.types.clone();
    let (server, tool) = match &answer {
        Err(e) => (e.server.clone(), e.tool.clone()),
        Ok(_) => Default::default(),
    };
    let tokenized = state
        .host
        .run(move || {
            let mut counts = std::collections::BTreeMap::new();
            let answer = match answer {
                Ok(mut value) => {
                    privacy::tokenize_value(&vault, &mut value, &kinds, &mut counts);
                    Ok(value)
                }
                Err(mut e) => {
                    let shown = cem_pii::tokenize_shared(&vault, &e.message, &kinds);
                    counts = shown.counts;
                    e.message = shown.text;
                    Err(e)
                }
            };
            (answer, counts)
        })
        .await;
    match tokenized {
        Ok((answer, counts)) => {
            if let Ok(mut all) = exec.tokenized.lock() {
                for (kind, n) in counts {
                    *all.entry(kind).or_insert(0) += n;
                }
            }
            answer
        }
        // The answer cannot be shown without its personal data checked.
        Err(why) => Err(CallError {
            server,
            tool,
            message: format!("the tool's answer could not be checked for personal data ({why})"),
        }),
    }
}

/// tokenize_pii / detokenize_pii from code, with the session's vault.
fn pii(session: &Session, arguments: &Value, automatic: bool) -> Result<Value, String> {
    let text = arguments["text"].as_str().ok_or("text must be a string")?;
    if text.len() > MAX_PII_TEXT {
        return Err(format!(
            "the text is {} bytes; tokenize_pii and detokenize_pii take at most {MAX_PII_TEXT} at a time: split it",
            text.len()
        ));
    }
    match arguments["op"].as_str() {
        Some("tokenize") => {
            // Found once, with no lock held: the vault is shared by the
            // session's requests and only gives out tokens under its lock.
            let found = cem_pii::Found::in_text(text);
            let entities = found.entities().to_vec();
            let mut vault = session.vault();
            let out = vault.tokenize(text, found, &Kind::ALL);
            let mut tokens = serde_json::Map::new();
            for e in entities {
                let value = &text[e.start..e.end];
                tokens.insert(vault.token_for(e.kind, value), json!(value));
            }
            Ok(json!({"text": out.text, "tokens": tokens}))
        }
        Some("detokenize") if automatic => Err(DETOKENIZE_IN_AUTO.into()),
        Some("detokenize") => Ok(json!({"text": session.vault().restore(text).text})),
        _ => Err("op must be tokenize or detokenize".into()),
    }
}

async fn call(
    state: &Arc<AppState>,
    session: &Session,
    exec: &Execution,
    tool: &str,
    mut arguments: Value,
) -> Result<Called, CallError> {
    let fail = |server: &str, name: &str, message: String| CallError {
        server: server.into(),
        tool: name.into(),
        message,
    };
    // A server's name has no dot, and a tool's may have `__`: the dot
    // first, then `__` (`srv__read.me`) when the dot does not name a server.
    let manager = &state.upstreams;
    let splits = [tool.split_once('.'), tool.split_once("__")];
    let Some((server, name)) = splits
        .iter()
        .flatten()
        .find(|(server, _)| manager.get(server).is_ok())
        .or(splits.iter().flatten().next())
        .copied()
    else {
        return Err(fail(
            "",
            tool,
            format!("'{tool}' is not a tool name; use \"server.tool\" (search_tools finds them)"),
        ));
    };
    let upstream = manager
        .get(server)
        .map_err(|e| fail(server, name, e.to_string()))?;
    let server = upstream.config.name.clone();
    // `get_sum` from Python means the upstream's `get-sum`. Only this
    // server's list is consulted (in memory first): other upstreams stay
    // unstarted.
    let wanted = alias(name);
    let pick = |t: &str| t == name || alias(t) == wanted;
    let named = |found: String| {
        tracing::Span::current().record("tool", format!("{server}.{found}"));
        found
    };
    let name = match manager.find_known_tool(&server, |t| t == name) {
        Some(found) => named(found),
        None => match manager.find_known_tool(&server, pick) {
            Some(found) => named(found),
            // The server's list when it can be had; without it the gate
            // refuses, as it cannot check the call.
            None => match manager.tools(&server, false).await {
                Ok(tools) => {
                    let found = tools
                        .iter()
                        .find(|t| t.name == name)
                        .or_else(|| tools.iter().find(|t| pick(&t.name)));
                    match found {
                        Some(tool) => named(tool.name.to_string()),
                        None => {
                            let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
                            let shown = cem_host::gate::capped(name);
                            return Err(fail(&server, &shown, unknown_tool(&server, name, &names)));
                        }
                    }
                }
                Err(_) => name.to_string(),
            },
        },
    };
    // The arguments as the model would see them, for an approval question:
    // personal data the code read stays a token there.
    let pii = &state.config.pii;
    // Made only when a question is asked: detection costs time.
    let raw = arguments.clone();
    let shown = move || {
        let mut shown = raw.clone();
        if privacy::automatic(pii) {
            let mut counts = std::collections::BTreeMap::new();
            privacy::tokenize_value(&session.vault, &mut shown, &pii.types, &mut counts);
        }
        shown
    };
    // Tokens the model passed into the code become real values again, for
    // the upstreams allowed to receive them; others get the tokens.
    if privacy::automatic(pii) && privacy::may_restore(&pii.restore_to, &server, &name) {
        privacy::restore_value(&session.vault(), &mut arguments);
    }
    let arguments = match arguments {
        Value::Null => None,
        Value::Object(map) => Some(map),
        other => {
            return Err(fail(
                &server,
                &name,
                format!("arguments must be a dict, got {other}"),
            ));
        }
    };
    let result = state
        .gate
        .call(manager, exec, &server, &name, arguments, &shown)
        .await
        .map_err(|e| fail(&server, &name, e))?;
    let content = serde_json::to_value(&result.content).unwrap_or(Value::Null);
    if result.is_error == Some(true) {
        return Err(fail(
            &server,
            &name,
            text_of(&content).unwrap_or_else(|| content.to_string()),
        ));
    }
    // The tool answered, after a search of this session: the search learns.
    cem_host::cluster::used_tool(state, session, &format!("{server}.{name}"));
    let value = match result.structured_content {
        Some(structured) => structured,
        None => convert(state, &content),
    };
    let warning = shape_of(state, &server, &name, &value);
    Ok(Called { value, warning })
}

/// Learns the shape of `value`, `server.name`'s result, when the tool
/// declares no `outputSchema` (before the personal-data step: a shape keeps
/// no value, and a token's shape is a string's); checks it against the
/// declared one otherwise: a break is counted and said to the code.
fn shape_of(state: &AppState, server: &str, name: &str, value: &Value) -> Option<String> {
    match state.upstreams.known_output_schema(server, name) {
        Some(Some(declared)) => {
            let schema = Value::Object(declared.as_ref().clone());
            let broken = cem_shapes::declared::violation(&schema, value)?;
            cem_metrics::metrics().output_schema_broken(server);
            tracing::warn!(server, tool = name, at = %broken, "a tool's result broke its declared outputSchema; passed on as it came");
            Some(format!(
                "the result does not match the outputSchema the tool declares ({broken}); \
                 it is passed on as it came: check the fields you use"
            ))
        }
        // Only a tool the server lists: a name code made up learns nothing.
        Some(None) => {
            let tool = format!("{server}.{name}");
            if state
                .shapes
                .record(&tool, value, cem_shapes::Source::Learned)
                .changed()
            {
                cem_host::cluster::push_shape(state, &tool);
            }
            None
        }
        None => None,
    }
}

/// The refusal of a name the server does not list, with its closest names
/// (a misspelling is the usual cause).
fn unknown_tool(server: &str, name: &str, names: &[&str]) -> String {
    let wanted = alias(name).to_lowercase();
    // Comparing costs the product of the lengths: no suggestion for a name
    // longer than any real one (code may pass megabytes).
    let candidates = if name.len() > cem_host::gate::MAX_NAME {
        &[][..]
    } else {
        names
    };
    let mut close: Vec<(f64, &str)> = candidates
        .iter()
        .map(|n| (strsim::jaro_winkler(&wanted, &alias(n).to_lowercase()), *n))
        .filter(|(score, _)| *score > 0.7)
        .collect();
    close.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(b.1)));
    let hint = match close.as_slice() {
        [] => String::new(),
        close => {
            let names: Vec<String> = close
                .iter()
                .take(3)
                .map(|(_, n)| format!("{server}.{n}"))
                .collect();
            format!("; closest: {}", names.join(", "))
        }
    };
    format!(
        "{server} has no tool named '{}'{hint}. search_tools finds tools by what they do; \
         call one by the name it gives.",
        cem_host::gate::capped(name)
    )
}

/// All text blocks joined, when every block is text.
fn text_of(content: &Value) -> Option<String> {
    let blocks = content.as_array()?;
    let texts: Option<Vec<&str>> = blocks
        .iter()
        .map(|b| (b["type"] == "text").then(|| b["text"].as_str()).flatten())
        .collect();
    texts.map(|t| t.join("\n"))
}

/// Text content (decoded when it is JSON), else the blocks, with large
/// binary data written to the workspace and replaced by its path.
fn convert(state: &Arc<AppState>, content: &Value) -> Value {
    if let Some(text) = text_of(content) {
        return serde_json::from_str::<Value>(&text).unwrap_or(Value::String(text));
    }
    let blocks = content.as_array().cloned().unwrap_or_default();
    Value::Array(blocks.into_iter().map(|b| binary_block(state, b)).collect())
}

fn binary_block(state: &Arc<AppState>, mut block: Value) -> Value {
    let Some(data) = block
        .get("data")
        .and_then(Value::as_str)
        .map(str::to_string)
    else {
        return block;
    };
    if data.len() <= INLINE_BINARY {
        return block;
    }
    let mime = block
        .get("mimeType")
        .and_then(Value::as_str)
        .unwrap_or("application/octet-stream")
        .to_string();
    let ext = mime
        .rsplit('/')
        .next()
        .unwrap_or("bin")
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .collect::<String>();
    let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(data.as_bytes()) else {
        return block;
    };
    let name = format!("tool-output/{}-{}.{ext}", std::process::id(), next_id());
    match state.workspace.write(&name, &bytes) {
        Ok(written) => {
            if let Some(obj) = block.as_object_mut() {
                obj.remove("data");
                obj.insert("path".into(), json!(written.path));
                obj.insert("size".into(), json!(written.size));
            }
            block
        }
        Err(_) => block,
    }
}

fn next_id() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}
