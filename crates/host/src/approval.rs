//! Asking a person whether a tool call may go ahead.
//!
//! An [`Approver`] puts a [`Question`] to the human behind the client and
//! returns their [`Answer`]. Two ways reach them through MCP:
//! - [`ElicitApprover`]: an `elicitation/create` request on the session
//!   (protocol 2025-06-18 and 2025-11-25, a client that declared the
//!   `elicitation` capability);
//! - [`InputRequiredApprover`]: the stateless 2026-07-28 revision's
//!   input-required result: execute_code answers with the question, the
//!   client retries with the answer, and the paused execution resumes
//!   (see `handler.rs`).
//!
//! The CLI has its own, on the terminal. Where none can ask, an `ask` call is
//! refused: never a question the model could answer itself.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use cem_engine::BoxFuture;
use rmcp::RoleServer;
use rmcp::model::{ElicitRequest, ElicitResult, ElicitationAction};
use rmcp::service::Peer;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

/// The longest description and arguments a question shows.
const SHOW_DESCRIPTION: usize = 400;
const SHOW_ARGUMENTS: usize = 2000;

/// What the human is asked.
#[derive(Debug, Clone)]
pub struct Question {
    /// `server.tool`.
    pub tool: String,
    pub description: String,
    /// The arguments as the model sees them (personal data as tokens).
    pub arguments: Value,
    /// Calls of this tool this execution made before this one.
    pub earlier_calls: u64,
    /// Why the policy asks (the rule, the annotation, a pin change).
    pub reason: String,
    pub timeout: Duration,
    /// Whether "allow for this session" is offered: not to stateless
    /// requests, which have no session (see `privacy::is_a_session`).
    pub session_choice: bool,
}

impl Question {
    /// The question as one message a client shows.
    pub fn message(&self) -> String {
        let arguments = clip(&self.arguments.to_string(), SHOW_ARGUMENTS);
        let description = clip(self.description.trim(), SHOW_DESCRIPTION);
        let earlier = match self.earlier_calls {
            0 => "its first call in this execution".to_string(),
            n => format!("{n} earlier call(s) of it in this execution"),
        };
        format!(
            "Code the AI agent wrote wants to call the tool {tool} ({earlier}).\n\
             What the tool does: {description}\n\
             Arguments: {arguments}\n\
             Asked because of the policy: {reason}.\n\
             Answer within {secs} s, or the call is refused.",
            tool = self.tool,
            reason = self.reason,
            secs = self.timeout.as_secs(),
        )
    }

    /// The form: one choice.
    pub fn schema(&self) -> Value {
        let mut choices = vec![
            json!({"const": "allow_once", "title": "Allow this call once"}),
            json!({"const": "allow_execution", "title": "Allow this tool for the rest of this execution"}),
        ];
        if self.session_choice {
            choices.push(
                json!({"const": "allow_session", "title": "Allow this tool for this session"}),
            );
        }
        choices.push(json!({"const": "deny", "title": "Deny"}));
        json!({
            "type": "object",
            "properties": {
                "decision": {"type": "string", "title": "Allow this tool call?", "oneOf": choices}
            },
            "required": ["decision"]
        })
    }

    /// The question as an `elicitation/create` request.
    pub fn elicit_request(&self) -> Result<ElicitRequest, String> {
        serde_json::from_value(json!({
            "method": "elicitation/create",
            "params": {"mode": "form", "message": self.message(), "requestedSchema": self.schema()}
        }))
        .map_err(|e| format!("cannot build the approval question: {e}"))
    }
}

fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let cut: String = text.chars().take(max).collect();
    format!("{cut}… (cut)")
}

/// The human's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    Once,
    Execution,
    Session,
    Deny,
}

impl Answer {
    pub fn as_str(self) -> &'static str {
        match self {
            Answer::Once => "allow_once",
            Answer::Execution => "allow_execution",
            Answer::Session => "allow_session",
            Answer::Deny => "deny",
        }
    }

    /// An elicitation result as an answer: only an accepted form with a
    /// known choice allows; decline, cancel and anything else deny.
    pub fn from_elicit(result: &ElicitResult) -> Answer {
        if result.action != ElicitationAction::Accept {
            return Answer::Deny;
        }
        let choice = result
            .content
            .as_ref()
            .and_then(|c| c.get("decision"))
            .and_then(Value::as_str);
        match choice {
            Some("allow_once") => Answer::Once,
            Some("allow_execution") => Answer::Execution,
            Some("allow_session") => Answer::Session,
            _ => Answer::Deny,
        }
    }
}

/// An answer and who gave it (for the audit log).
#[derive(Debug, Clone)]
pub struct Answered {
    pub answer: Answer,
    /// `user via elicitation (client name)`, `terminal`, `timeout`, ...
    pub by: String,
}

pub trait Approver: Send + Sync {
    /// Asks; `Err` when the question could not be put (the call is refused).
    fn ask(&self, question: Question) -> BoxFuture<Result<Answered, String>>;

    /// Hands the person a sign-in link (URL-mode elicitation): `Ok(true)`
    /// when they went to sign in, `Ok(false)` when they declined; `Err`
    /// when this client cannot be handed a link.
    fn sign_in(&self, _link: SignInLink) -> BoxFuture<Result<bool, String>> {
        Box::pin(async { Err("this client cannot be handed a sign-in link".to_string()) })
    }
}

/// A sign-in for the person to open in their browser: the URL goes to
/// their client alone (URL-mode elicitation), never to the model.
pub struct SignInLink {
    pub server: String,
    pub url: String,
    /// The elicitation's id (not the OAuth state).
    pub id: String,
    pub timeout: Duration,
}

impl SignInLink {
    fn message(&self) -> String {
        format!(
            "Code the AI agent wrote needs you to sign in to the upstream server '{}'. \
             Open the link to sign in with your own account; the code goes on when you are done.",
            self.server
        )
    }

    /// The link as an `elicitation/create` request in URL mode.
    pub fn elicit_request(&self) -> Result<ElicitRequest, String> {
        serde_json::from_value(json!({
            "method": "elicitation/create",
            "params": {"mode": "url", "message": self.message(), "url": self.url, "elicitationId": self.id}
        }))
        .map_err(|e| format!("cannot build the sign-in request: {e}"))
    }
}

/// What a client said of a sign-in link.
fn went_to_sign_in(result: &ElicitResult) -> bool {
    result.action == ElicitationAction::Accept
}

/// What a client that cannot be handed links is told.
fn no_links(client: &str) -> String {
    format!(
        "the client ({client}) did not declare URL-mode elicitation, so it cannot be handed a sign-in link"
    )
}

/// `elicitation/create` on the client's session.
pub struct ElicitApprover {
    pub peer: Peer<RoleServer>,
    pub client: String,
    /// Whether the client takes form questions (approvals) and links
    /// (sign-ins): what it declared.
    pub forms: bool,
    pub links: bool,
}

impl Approver for ElicitApprover {
    fn sign_in(&self, link: SignInLink) -> BoxFuture<Result<bool, String>> {
        self.hand_link(link)
    }

    fn ask(&self, question: Question) -> BoxFuture<Result<Answered, String>> {
        let peer = self.peer.clone();
        let by = format!("user via elicitation ({})", self.client);
        let forms = self.forms;
        let client = self.client.clone();
        Box::pin(async move {
            if !forms {
                return Err(format!(
                    "the client ({client}) did not declare form elicitation, so nobody can be asked"
                ));
            }
            let request = question.elicit_request()?;
            let asked =
                peer.create_elicitation_with_timeout(request.params, Some(question.timeout));
            match tokio::time::timeout(question.timeout, asked).await {
                Ok(Ok(result)) => Ok(Answered {
                    answer: Answer::from_elicit(&result),
                    by,
                }),
                Ok(Err(e)) if e.to_string().to_ascii_lowercase().contains("timeout") => {
                    Ok(timed_out())
                }
                Ok(Err(e)) => Err(format!(
                    "the client did not answer the approval question: {e}"
                )),
                Err(_) => Ok(timed_out()),
            }
        })
    }
}

impl ElicitApprover {
    fn hand_link(&self, link: SignInLink) -> BoxFuture<Result<bool, String>> {
        let peer = self.peer.clone();
        let links = self.links;
        let client = self.client.clone();
        Box::pin(async move {
            if !links {
                return Err(no_links(&client));
            }
            let request = link.elicit_request()?;
            let asked = peer.create_elicitation_with_timeout(request.params, Some(link.timeout));
            match tokio::time::timeout(link.timeout, asked).await {
                Ok(Ok(result)) => Ok(went_to_sign_in(&result)),
                Ok(Err(e)) => Err(format!(
                    "the client did not answer the sign-in request: {e}"
                )),
                Err(_) => Ok(false),
            }
        })
    }
}

fn timed_out() -> Answered {
    Answered {
        answer: Answer::Deny,
        by: "timeout (nobody answered)".into(),
    }
}

/// A question waiting to travel in an input-required result.
pub struct Asked {
    pub request: ElicitRequest,
    pub reply: oneshot::Sender<ElicitResult>,
}

/// Hands questions to the tools/call handler, which returns them to the
/// client as an input-required result and passes the retried request's
/// answer back.
pub struct InputRequiredApprover {
    pub questions: mpsc::UnboundedSender<Asked>,
    pub client: String,
    pub forms: bool,
    pub links: bool,
}

impl Approver for InputRequiredApprover {
    fn sign_in(&self, link: SignInLink) -> BoxFuture<Result<bool, String>> {
        let questions = self.questions.clone();
        let links = self.links;
        let client = self.client.clone();
        Box::pin(async move {
            if !links {
                return Err(no_links(&client));
            }
            let request = link.elicit_request()?;
            let (reply, answer) = oneshot::channel();
            questions
                .send(Asked { request, reply })
                .map_err(|_| "the request that ran this code is gone".to_string())?;
            match tokio::time::timeout(link.timeout, answer).await {
                Ok(Ok(result)) => Ok(went_to_sign_in(&result)),
                Ok(Err(_)) | Err(_) => Ok(false),
            }
        })
    }

    fn ask(&self, question: Question) -> BoxFuture<Result<Answered, String>> {
        let questions = self.questions.clone();
        let by = format!("user via input-required elicitation ({})", self.client);
        let forms = self.forms;
        let client = self.client.clone();
        Box::pin(async move {
            if !forms {
                return Err(format!(
                    "the client ({client}) did not declare form elicitation, so nobody can be asked"
                ));
            }
            let request = question.elicit_request()?;
            let (reply, answer) = oneshot::channel();
            questions
                .send(Asked { request, reply })
                .map_err(|_| "the request that ran this code is gone".to_string())?;
            match tokio::time::timeout(question.timeout, answer).await {
                Ok(Ok(result)) => Ok(Answered {
                    answer: Answer::from_elicit(&result),
                    by,
                }),
                // The client never retried: the question was dropped.
                Ok(Err(_)) | Err(_) => Ok(timed_out()),
            }
        })
    }
}

/// Whether a question of an execution is open (watched by the engine,
/// which freezes the sandbox meanwhile and counts the time itself).
#[derive(Debug)]
pub struct PauseClock {
    /// Questions open now.
    open: Mutex<usize>,
    asking: tokio::sync::watch::Sender<bool>,
}

impl Default for PauseClock {
    fn default() -> Self {
        Self {
            open: Mutex::new(0),
            asking: tokio::sync::watch::Sender::new(false),
        }
    }
}

impl PauseClock {
    pub fn start(&self) {
        if let Ok(mut open) = self.open.lock() {
            if *open == 0 {
                self.asking.send_replace(true);
            }
            *open += 1;
        }
    }

    pub fn stop(&self) {
        if let Ok(mut open) = self.open.lock() {
            *open = open.saturating_sub(1);
            if *open == 0 {
                self.asking.send_replace(false);
            }
        }
    }

    /// Starts a wait that stops when the returned guard is dropped.
    pub fn asking(&self) -> Asking<'_> {
        self.start();
        Asking(self)
    }

    /// True while a question is open.
    pub fn watch(&self) -> tokio::sync::watch::Receiver<bool> {
        self.asking.subscribe()
    }
}

/// An open question's wait on a [`PauseClock`]; ends when dropped.
pub struct Asking<'a>(&'a PauseClock);

impl Drop for Asking<'_> {
    fn drop(&mut self) {
        self.0.stop();
    }
}

/// A shared approver.
pub type SharedApprover = Arc<dyn Approver>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_question_is_a_valid_elicitation_and_answers_map_strictly() {
        let q = Question {
            tool: "memory.create_entities".into(),
            description: "Create entities".into(),
            arguments: json!({"entities": [{"name": "[EMAIL_1]"}]}),
            earlier_calls: 2,
            reason: "rule \"memory.create_entities\"".into(),
            timeout: Duration::from_secs(120),
            session_choice: true,
        };
        let request = q.elicit_request();
        assert!(request.is_ok(), "{request:?}");
        let text = q.message();
        assert!(
            text.contains("memory.create_entities")
                && text.contains("[EMAIL_1]")
                && text.contains("2 earlier call(s)"),
            "{text}"
        );
        let accept = |v: Value| {
            let mut r = ElicitResult::new(ElicitationAction::Accept);
            r.content = Some(v);
            r
        };
        assert_eq!(
            Answer::from_elicit(&accept(json!({"decision": "allow_execution"}))),
            Answer::Execution
        );
        assert_eq!(
            Answer::from_elicit(&accept(json!({"decision": "yes please"}))),
            Answer::Deny
        );
        assert_eq!(Answer::from_elicit(&accept(json!({}))), Answer::Deny);
        assert_eq!(
            Answer::from_elicit(&ElicitResult::new(ElicitationAction::Decline)),
            Answer::Deny
        );
        assert_eq!(
            Answer::from_elicit(&ElicitResult::new(ElicitationAction::Cancel)),
            Answer::Deny
        );
    }
}
