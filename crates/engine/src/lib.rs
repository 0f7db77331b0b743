//! The execution engine: one execution = one sandboxed CPython running the
//! embedded runtime (`cem-runtime`'s `cem_runtime.py`), fed a request over its
//! stdin and answering on its stdout.
//!
//! [`Engine`] keeps a warm pool of pre-started interpreters (each serves one
//! execution and is then discarded) and one interpreter per `session_id`
//! (variables persist between that session's executions and nowhere else).
//! Where the host allows, every fresh interpreter is forked from a zygote
//! (`cem_zygote.py`, see `cem_sandbox::zygote`) instead of being
//! built cold.
//! When the host cannot isolate, it refuses to run code unless the config
//! allows running unsandboxed, and then says so in every answer.

mod answer;
mod background;
mod bridge;
mod engine;
pub mod envelope;
mod install;
mod process;
mod sessions;
mod tokens;
mod written;

pub use answer::{ExecAnswer, Shown};
pub use bridge::{BoxFuture, Bridge, CallError, Called};
pub use engine::{
    AnswerLimits, Engine, EngineOptions, ExecRequest, MAX_SESSION_ID, SandboxMode, tenant_cpu,
};
/// For the fuzz targets: how the runtime's output is decoded.
#[doc(hidden)]
pub use process::decode_output;
pub use sessions::SessionTable;
pub use tokens::count as count_tokens;

/// Why an execution could not even start.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("{0}")]
    Refused(String),
    #[error("invalid argument: {0}")]
    BadRequest(String),
    #[error("could not start the interpreter: {0}")]
    Start(String),
}
