//! Approval questions on the terminal, for `run`, `exec` and `tools call`:
//! the person at the keyboard answers on /dev/tty (never stdin, which a
//! script or a pipe may own). Without a terminal nobody can be asked, and
//! `ask` calls are refused.

use std::io::{BufRead, Write};
use std::sync::Arc;

use cem_engine::BoxFuture;
use cem_host::approval::{Answer, Answered, Approver, Question, SharedApprover};
use cem_host::gate::{Caller, Execution, Gate};

struct TerminalApprover;

/// The terminal's approver, or why there is none.
pub fn approver() -> Result<SharedApprover, String> {
    match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/tty")
    {
        Ok(_) => Ok(Arc::new(TerminalApprover)),
        Err(_) => Err("this command has no terminal to ask on".into()),
    }
}

/// A CLI command's execution: the gate's budgets and grants, asking on
/// the terminal (or refusing `ask` calls when there is none).
pub fn execution(gate: &Gate, caller: Caller) -> Execution {
    let (approver, no_approver) = match approver() {
        Ok(a) => (Some(a), String::new()),
        Err(why) => (None, why),
    };
    Execution::new(gate, caller, "cli", None, approver, &no_approver)
}

impl Approver for TerminalApprover {
    fn ask(&self, question: Question) -> BoxFuture<Result<Answered, String>> {
        Box::pin(async move {
            let timeout = question.timeout;
            let asked = tokio::task::spawn_blocking(move || ask_tty(&question));
            match tokio::time::timeout(timeout, asked).await {
                Ok(Ok(answer)) => answer.map(|answer| Answered {
                    answer,
                    by: "user at the terminal".into(),
                }),
                Ok(Err(e)) => Err(format!("the terminal question failed: {e}")),
                Err(_) => Ok(Answered {
                    answer: Answer::Deny,
                    by: "timeout (nobody answered)".into(),
                }),
            }
        })
    }
}

fn ask_tty(question: &Question) -> Result<Answer, String> {
    let tty = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/tty")
        .map_err(|e| format!("cannot open the terminal: {e}"))?;
    let mut out = &tty;
    let _ = writeln!(out, "\n{}", question.message());
    let _ = write!(
        out,
        "Allow? [o]nce, for this [e]xecution, for this [s]ession, [d]eny (default): "
    );
    let _ = out.flush();
    let mut line = String::new();
    std::io::BufReader::new(&tty)
        .read_line(&mut line)
        .map_err(|e| format!("cannot read the terminal: {e}"))?;
    Ok(match line.trim().to_ascii_lowercase().as_str() {
        "o" | "once" => Answer::Once,
        "e" | "execution" => Answer::Execution,
        "s" | "session" => Answer::Session,
        _ => Answer::Deny,
    })
}
