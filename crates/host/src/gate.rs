//! The gate every upstream tool call passes: the policy's decision (rules,
//! annotations, pinned digests), the execution's budgets, a person's
//! approval where the policy asks, and the audit log, which records the
//! decision before the call and the call before its answer returns.
//!
//! Code (execute_code), `run` scripts and `tools call` all come through
//! [`Gate::call`], so one policy holds for all three.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use cem_audit::{AuditError, AuditLog};
use cem_policy::{Budgets, Decision, PinState, Pins, Policy, ToolFacts};
use cem_store::PinStore;
use cem_upstream::{Manager, UpstreamError};
use rmcp::model::{CallToolResult, JsonObject, Tool};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::approval::{Answer, Answered, PauseClock, Question, SharedApprover};
use crate::bounds::Bounds;

/// Who made a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    /// execute_code.
    Code,
    /// `run script.py`.
    Run,
    /// `tools call`.
    Cli,
}

impl Caller {
    pub fn as_str(self) -> &'static str {
        match self {
            Caller::Code => "code",
            Caller::Run => "run",
            Caller::Cli => "cli",
        }
    }
}

/// What the gate knows of each tool of a server, computed once per tool
/// list and pin file.
struct ServerFacts {
    list: Arc<Vec<Tool>>,
    pins_stamp: Option<(SystemTime, u64)>,
    tools: HashMap<String, Known>,
}

/// One tool as the gate knows it.
#[derive(Clone)]
struct Known {
    facts: ToolFacts,
    description: String,
    /// The size bounds its input schema declares, if any.
    bounds: Option<Arc<Bounds>>,
}

/// The process-wide half: policy, pins, audit log, session grants.
pub struct Gate {
    pub policy: Policy,
    pub pins: PinStore,
    pub audit: AuditLog,
    /// Tools a person allowed for the rest of an MCP session, by session key.
    session_grants: Mutex<HashMap<String, HashSet<String>>>,
    facts: Mutex<HashMap<String, Arc<ServerFacts>>>,
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gate")
            .field("policy", &self.policy)
            .field("audit", &self.audit.path())
            .finish_non_exhaustive()
    }
}

/// One execution's half (or one CLI command's): its budgets, the tools a
/// person allowed for it, its call counts, and how to ask.
pub struct Execution {
    /// A random id that ties its audit lines together.
    pub id: String,
    pub caller: Caller,
    /// The MCP session (its key) the execution belongs to.
    pub session: String,
    /// execute_code's `session_id`, when given.
    pub session_id: Option<String>,
    pub(crate) approver: Option<SharedApprover>,
    /// Why no approver is there (for the refusal's words).
    pub(crate) no_approver: String,
    budgets: Mutex<Budgets>,
    grants: Mutex<HashSet<String>>,
    counts: Mutex<HashMap<String, u64>>,
    /// One question at a time: a loop's next call waits for the first
    /// answer (and an "allow for this execution" then covers it).
    pub(crate) asking: tokio::sync::Mutex<()>,
    pub paused: PauseClock,
    /// Where the progress the upstream servers report for this execution's
    /// calls goes (the client asked for progress).
    pub progress: Option<cem_upstream::ProgressFn>,
    /// Personal data in tool answers turned into tokens before the code saw
    /// it, by kind (automatic mode): the answer's `pii` counts it.
    pub tokenized: Mutex<std::collections::BTreeMap<cem_pii::Kind, usize>>,
}

impl Execution {
    /// Tool calls this execution has made so far.
    pub fn calls(&self) -> u64 {
        self.counts.lock().map(|c| c.values().sum()).unwrap_or(0)
    }

    pub fn new(
        gate: &Gate,
        caller: Caller,
        session: &str,
        session_id: Option<String>,
        approver: Option<SharedApprover>,
        no_approver: &str,
    ) -> Self {
        Execution {
            id: new_id(),
            caller,
            session: session.to_string(),
            session_id,
            approver,
            no_approver: no_approver.to_string(),
            budgets: Mutex::new(Budgets::new(&gate.policy.budgets)),
            grants: Mutex::new(HashSet::new()),
            counts: Mutex::new(HashMap::new()),
            asking: tokio::sync::Mutex::new(()),
            paused: PauseClock::default(),
            progress: None,
            tokenized: Mutex::new(std::collections::BTreeMap::new()),
        }
    }

    fn granted(&self, tool: &str) -> bool {
        self.grants.lock().is_ok_and(|g| g.contains(tool))
    }
}

/// A random 128-bit id in hex.
pub fn new_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// `sha256:<hex>` of `bytes`.
pub fn sha256(bytes: &[u8]) -> String {
    let hash = Sha256::digest(bytes);
    let hex: String = hash.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

impl Gate {
    pub fn new(policy: Policy, pins: PinStore, audit: AuditLog) -> Self {
        Gate {
            policy,
            pins,
            audit,
            session_grants: Mutex::new(HashMap::new()),
            facts: Mutex::new(HashMap::new()),
        }
    }

    /// Forgets a session's grants (its MCP session ended).
    pub fn end_session(&self, session: &str) {
        if let Ok(mut g) = self.session_grants.lock() {
            g.remove(session);
        }
    }

    fn session_granted(&self, session: &str, tool: &str) -> bool {
        self.session_grants
            .lock()
            .is_ok_and(|g| g.get(session).is_some_and(|t| t.contains(tool)))
    }

    /// Calls `server.tool` with `arguments` if the policy lets it, asking a
    /// person when it says ask. `shown` is the arguments as the model sees
    /// them (tokens, not personal data), for the question. The error is
    /// the words the code's `ToolError` carries.
    pub async fn call(
        &self,
        manager: &Manager,
        exec: &Execution,
        server: &str,
        tool: &str,
        arguments: Option<JsonObject>,
        shown: &(dyn Fn() -> Value + Sync),
    ) -> Result<CallToolResult, String> {
        // The whole name keys grants and counts; the audit gets it capped.
        let name = format!("{server}.{tool}");
        let mut arguments = arguments;
        let metrics = cem_metrics::metrics();
        crate::signin::ready(manager, exec, server).await?;
        let admitted = self
            .admit(manager, exec, server, tool, &name, &mut arguments, shown)
            .await;
        if let Err(refusal) = admitted {
            metrics.tool_call(server, "refused");
            return Err(refusal);
        }
        // Only once admitted: a refused call's arguments are never copied.
        let args_text = arguments
            .as_ref()
            .map(|a| serde_json::to_string(a).unwrap_or_default())
            .unwrap_or_default();
        let record = CallRecord {
            gate: self,
            exec,
            name: &name,
            args_text,
            started: Instant::now(),
            written: false,
        };
        // Kept for a second try only where a call may ask for sign-in.
        let again = crate::signin::takes_sign_in(manager, server).then(|| arguments.clone());
        let first = manager
            .call_with_progress(server, tool, arguments, None, exec.progress.clone())
            .await;
        let outcome = match (first, again) {
            (Err(UpstreamError::SignInRequired { challenge, why, .. }), Some(arguments)) => {
                // Signed out mid-way (a token revoked, a refresh refused)
                // or a tool that needs more scope: sign in, then once more.
                match crate::signin::sign_in(manager, exec, server, challenge, &why).await {
                    Ok(()) => manager
                        .call_with_progress(server, tool, arguments, None, exec.progress.clone())
                        .await
                        .map_err(|e| e.to_string()),
                    Err(why) => Err(why),
                }
            }
            (first, _) => first.map_err(|e| e.to_string()),
        };
        let (result_bytes, error) = match &outcome {
            Ok(result) => {
                let size = serde_json::to_string(result).map(|s| s.len()).unwrap_or(0);
                let error = (result.is_error == Some(true))
                    .then(|| "the tool answered with isError".to_string());
                (size, error)
            }
            Err(e) => (0, Some(e.clone())),
        };
        metrics.tool_call(server, if error.is_some() { "error" } else { "ok" });
        if let Err(e) = record.write(result_bytes, error) {
            return Err(format!("{name} ran, but {e}"));
        }
        outcome
    }

    /// The policy's decision for one call, with the budget charged and the
    /// decision recorded; `Err` is the refusal. Arguments over a size
    /// bound the tool's schema declares are refused after a denial (which
    /// says more) and before the budget is charged or a person asked.
    #[allow(clippy::too_many_arguments)]
    async fn admit(
        &self,
        manager: &Manager,
        exec: &Execution,
        server: &str,
        tool: &str,
        name: &str,
        arguments: &mut Option<JsonObject>,
        shown: &(dyn Fn() -> Value + Sync),
    ) -> Result<(), String> {
        let Known {
            facts,
            description,
            bounds,
        } = match self.facts(manager, server, tool).await {
            Ok(Some(found)) => found,
            Ok(None) => {
                let why = format!("{server} lists no tool named {}", capped(tool));
                self.record(exec, name, Decision::Deny, None, &why, None, "refused")?;
                return Err(format!(
                    "refused: {why}. Find its tools with search_tools or list_tool_categories, \
                     and call one by the name they give."
                ));
            }
            Err(why) => {
                let message = format!(
                    "refused: the policy needs the server's tool list to check {name}, and {why}"
                );
                self.record(exec, name, Decision::Deny, None, &why, None, "refused")?;
                return Err(message);
            }
        };
        let verdict = self.policy.decide(server, tool, facts);
        let earlier = exec
            .counts
            .lock()
            .map(|c| c.get(name).copied().unwrap_or(0))
            .unwrap_or(0);
        let rule = verdict.rule.as_deref();
        if verdict.decision == Decision::Deny {
            self.record(
                exec,
                name,
                Decision::Deny,
                rule,
                &verdict.reason,
                None,
                "refused",
            )?;
            return Err(denied_message(
                name,
                &verdict.reason,
                facts.pin,
                server,
                tool,
            ));
        }
        if let (Some(bounds), Some(arguments)) = (&bounds, arguments.as_mut())
            && let Err(over) = bounds.check(arguments)
        {
            let why = over.to_string();
            self.record(exec, name, Decision::Deny, None, &why, None, "refused")?;
            // The caller's error names the tool already.
            return Err(format!("refused before it reached the server: {why}"));
        }
        let charged = exec
            .budgets
            .lock()
            .map_err(|_| "the budget lock is poisoned".to_string())
            .and_then(|mut b| b.charge(server, tool).map_err(|e| e.to_string()));
        if let Err(why) = charged {
            self.record(
                exec,
                name,
                verdict.decision,
                rule,
                &verdict.reason,
                None,
                "over budget",
            )?;
            return Err(format!("refused: {why}"));
        }
        let answered = if verdict.decision == Decision::Ask {
            match self
                .approve(
                    exec,
                    name,
                    &description,
                    shown,
                    earlier,
                    &verdict.reason,
                    facts.pin,
                    server,
                    tool,
                )
                .await
            {
                Ok(answered) => Some(answered),
                Err(refusal) => {
                    if let Ok(mut b) = exec.budgets.lock() {
                        b.refund(server, tool);
                    }
                    self.record(
                        exec,
                        name,
                        Decision::Ask,
                        rule,
                        &verdict.reason,
                        refusal.1.as_ref(),
                        "refused",
                    )?;
                    return Err(refusal.0);
                }
            }
        } else {
            None
        };
        let recorded = self.record(
            exec,
            name,
            verdict.decision,
            rule,
            &verdict.reason,
            answered.as_ref(),
            "allowed",
        );
        if let Err(e) = recorded {
            if let Ok(mut b) = exec.budgets.lock() {
                b.refund(server, tool);
            }
            return Err(e);
        }
        if let Ok(mut c) = exec.counts.lock() {
            *c.entry(name.to_string()).or_insert(0) += 1;
        }
        Ok(())
    }

    /// Gets a person's yes for an `ask` call, or the refusal's words (and
    /// the answer, when one came).
    #[allow(clippy::too_many_arguments)]
    async fn approve(
        &self,
        exec: &Execution,
        name: &str,
        description: &str,
        shown: &(dyn Fn() -> Value + Sync),
        earlier: u64,
        reason: &str,
        pin: PinState,
        server: &str,
        tool: &str,
    ) -> Result<Answered, (String, Option<Answered>)> {
        let _one_at_a_time = exec.asking.lock().await;
        if exec.granted(name) {
            return Ok(Answered {
                answer: Answer::Execution,
                by: "granted earlier in this execution".into(),
            });
        }
        if self.session_granted(&exec.session, name) {
            return Ok(Answered {
                answer: Answer::Session,
                by: "granted earlier in this session".into(),
            });
        }
        let Some(approver) = &exec.approver else {
            return Err((
                format!(
                    "refused (fail closed): calling {name} needs a person's approval ({reason}), and {}. \
                     Tell the user; they can allow it without a question with \"policy\": {{\"rules\": {{\"{name}\": \"allow\"}}}} \
                     in mcp_config.json, or connect with a client that supports MCP elicitation.{}",
                    exec.no_approver,
                    pin_hint(pin, server, tool)
                ),
                None,
            ));
        };
        let session_choice = crate::privacy::is_a_session(&exec.session);
        let question = Question {
            tool: name.to_string(),
            description: description.to_string(),
            arguments: shown(),
            earlier_calls: earlier,
            reason: reason.to_string(),
            timeout: std::time::Duration::from_secs(self.policy.approval_timeout_seconds),
            session_choice,
        };
        // Stopped however the wait ends (its future dropped too): the
        // engine keeps the sandbox frozen while the clock says asking.
        let answered = {
            let _asking = exec.paused.asking();
            approver.ask(question).await
        };
        let answered = match answered {
            Ok(answered) => answered,
            Err(why) => {
                return Err((
                    format!(
                        "refused: calling {name} needs a person's approval ({reason}), and asking failed: {why}."
                    ),
                    None,
                ));
            }
        };
        match answered.answer {
            Answer::Deny => {
                let message = if answered.by.starts_with("timeout") {
                    format!(
                        "refused: nobody answered the approval question for {name} within {} s \
                         (policy.approval_timeout_seconds). Ask the user whether to try again.",
                        self.policy.approval_timeout_seconds
                    )
                } else {
                    format!(
                        "the user denied the call of {name}. Do not retry it; ask the user what they want instead."
                    )
                };
                Err((message, Some(answered)))
            }
            Answer::Once => Ok(answered),
            // A stateless request has no session to remember a grant in
            // (the question did not offer it): the rest of this execution.
            Answer::Execution | Answer::Session if !session_choice => {
                if let Ok(mut g) = exec.grants.lock() {
                    g.insert(name.to_string());
                }
                Ok(Answered {
                    answer: Answer::Execution,
                    by: answered.by,
                })
            }
            Answer::Execution => {
                if let Ok(mut g) = exec.grants.lock() {
                    g.insert(name.to_string());
                }
                Ok(answered)
            }
            Answer::Session => {
                if let Ok(mut g) = self.session_grants.lock() {
                    g.entry(exec.session.clone())
                        .or_default()
                        .insert(name.to_string());
                }
                Ok(answered)
            }
        }
    }

    /// One decision line.
    #[allow(clippy::too_many_arguments)]
    fn record(
        &self,
        exec: &Execution,
        name: &str,
        decision: Decision,
        rule: Option<&str>,
        reason: &str,
        answered: Option<&Answered>,
        outcome: &str,
    ) -> Result<(), String> {
        let metrics = cem_metrics::metrics();
        metrics.policy_decision(decision.as_str());
        if let Some(answered) = answered.filter(|a| !a.by.contains("granted earlier")) {
            metrics.approval(answered.answer.as_str());
        }
        self.audit
            .append(
                "decision",
                json!({
                    "exec": exec.id, "caller": exec.caller.as_str(), "session": exec.session,
                    "session_id": exec.session_id, "tool": capped(name), "decision": decision.as_str(),
                    "rule": rule, "reason": reason, "asked": answered.is_some_and(|a| !a.by.contains("granted earlier")),
                    "answer": answered.map(|a| a.answer.as_str()), "answered_by": answered.map(|a| a.by.clone()),
                    "outcome": outcome,
                }),
            )
            .map_err(|e| e.to_string())
    }

    /// The tool's annotations and pin state, and its description, from
    /// the list the running server gives now. The first list of a server
    /// never pinned is pinned (trust on first use).
    async fn facts(
        &self,
        manager: &Manager,
        server: &str,
        tool: &str,
    ) -> Result<Option<Known>, String> {
        let list = manager
            .live_tools(server)
            .await
            .map_err(|e| e.to_string())?;
        let stamp = self.pins_stamp(server);
        let cached = self.facts.lock().ok().and_then(|f| f.get(server).cloned());
        let facts = match cached {
            Some(f) if Arc::ptr_eq(&f.list, &list) && f.pins_stamp == stamp && stamp.is_some() => f,
            _ => {
                let computed = Arc::new(self.compute_facts(server, list)?);
                if let Ok(mut f) = self.facts.lock() {
                    f.insert(server.to_string(), computed.clone());
                }
                computed
            }
        };
        Ok(facts.tools.get(tool).cloned())
    }

    fn pins_stamp(&self, server: &str) -> Option<(SystemTime, u64)> {
        let meta = std::fs::metadata(self.pins.dir().join(format!("{server}.json"))).ok()?;
        Some((meta.modified().ok()?, meta.len()))
    }

    fn compute_facts(&self, server: &str, list: Arc<Vec<Tool>>) -> Result<ServerFacts, String> {
        let tools: Vec<Value> = list
            .iter()
            .filter_map(|t| serde_json::to_value(t).ok())
            .collect();
        let pins = match self.pins.load(server).map_err(|e| e.to_string())? {
            Some(pins) => pins,
            None => {
                let pins = Pins::of(&tools);
                self.pins.save(server, &pins).map_err(|e| e.to_string())?;
                tracing::info!(
                    server,
                    tools = pins.tools.len(),
                    "pinned the server's tools (trust on first use)"
                );
                pins
            }
        };
        let facts = tools
            .iter()
            .filter_map(|t| {
                let name = t.get("name")?.as_str()?.to_string();
                let hint = |key: &str| {
                    t.get("annotations")
                        .and_then(|a| a.get(key))
                        .and_then(Value::as_bool)
                };
                let facts = ToolFacts {
                    read_only: hint("readOnlyHint"),
                    destructive: hint("destructiveHint"),
                    pin: pins.state(t),
                };
                let description = t
                    .get("description")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string();
                let bounds = t.get("inputSchema").and_then(Bounds::of).map(Arc::new);
                Some((
                    name,
                    Known {
                        facts,
                        description,
                        bounds,
                    },
                ))
            })
            .collect();
        Ok(ServerFacts {
            list,
            pins_stamp: self.pins_stamp(server),
            tools: facts,
        })
    }
}

/// The audit record of one call that went to the upstream. Written when
/// the answer comes, or, if the call is dropped first (the execution timed
/// out or was cancelled), as a call that did not answer: the upstream may
/// have done the work, and the log must say that it was asked to.
struct CallRecord<'a> {
    gate: &'a Gate,
    exec: &'a Execution,
    name: &'a str,
    args_text: String,
    started: Instant,
    written: bool,
}

impl CallRecord<'_> {
    fn write(mut self, result_bytes: usize, error: Option<String>) -> Result<(), AuditError> {
        self.written = true;
        self.append(result_bytes, error)
    }

    fn append(&self, result_bytes: usize, error: Option<String>) -> Result<(), AuditError> {
        let exec = self.exec;
        self.gate.audit.append(
            "call",
            json!({
                "exec": exec.id, "caller": exec.caller.as_str(), "session": exec.session,
                "session_id": exec.session_id, "tool": capped(self.name),
                "args_digest": sha256(self.args_text.as_bytes()), "args_bytes": self.args_text.len(),
                "result_bytes": result_bytes, "ms": self.started.elapsed().as_secs_f64() * 1000.0,
                "ok": error.is_none(), "error": error,
            }),
        )
    }
}

impl Drop for CallRecord<'_> {
    fn drop(&mut self) {
        if !self.written {
            let why = "no answer: the execution ended (timed out or was cancelled) while the tool ran; \
                       the upstream may have done the work";
            if let Err(e) = self.append(0, Some(why.to_string())) {
                tracing::error!(
                    tool = self.name,
                    "a cancelled call could not be audited: {e}"
                );
            }
        }
    }
}

/// The most of a tool name an audit line or a refusal carries. Code can
/// pass any string as a name; a megabyte name in every refusal would push
/// the log's older lines out of rotation.
pub const MAX_NAME: usize = 200;

/// `name`, cut to [`MAX_NAME`] bytes with its full length said.
pub fn capped(name: &str) -> String {
    if name.len() <= MAX_NAME {
        return name.to_string();
    }
    let mut end = MAX_NAME;
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &name[..end], name.len())
}

fn pin_hint(pin: PinState, server: &str, tool: &str) -> String {
    match pin {
        PinState::Trusted => String::new(),
        PinState::Changed | PinState::New => format!(
            " The tool changed or appeared since the server was first trusted: the user can see how with \
             `code-execution-mcp policy review` and accept it with `code-execution-mcp policy accept {server}.{tool}`."
        ),
    }
}

fn denied_message(name: &str, reason: &str, pin: PinState, server: &str, tool: &str) -> String {
    format!(
        "the policy denies {name} ({reason}). Do not retry it; tell the user what you wanted to do, \
         and they can change policy.rules in mcp_config.json if they agree.{}",
        pin_hint(pin, server, tool)
    )
}
