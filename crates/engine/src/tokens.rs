//! Token accounting: what the tool results would have cost in the model's
//! context, against what the answer costs. o200k, embedded in the binary
//! (tiktoken-rs ships the vocabulary; nothing is downloaded).

use std::sync::OnceLock;

use serde_json::{Value, json};
use tiktoken_rs::CoreBPE;

use crate::ExecAnswer;

fn bpe() -> Option<&'static CoreBPE> {
    static BPE: OnceLock<Option<CoreBPE>> = OnceLock::new();
    BPE.get_or_init(|| tiktoken_rs::o200k_base().ok()).as_ref()
}

/// o200k tokens of `text` (0 if the tokenizer could not load).
pub fn count(text: &str) -> u64 {
    bpe()
        .map(|b| b.encode_with_special_tokens(text).len() as u64)
        .unwrap_or(0)
}

/// `{"tool_results": N, "returned": M, "kept_out_of_context": N - M}`.
pub fn account(results: &[String], answer: &ExecAnswer) -> Value {
    let inside: u64 = results.iter().map(|r| count(r)).sum();
    let returned = serde_json::to_string(answer)
        .map(|s| count(&s))
        .unwrap_or(0);
    json!({"tool_results": inside, "returned": returned, "kept_out_of_context": inside.saturating_sub(returned)})
}
