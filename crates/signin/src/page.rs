//! The page the person's browser shows when it comes back.

use crate::SignInError;
use crate::store::CredentialId;

/// A plain page: signed in, or what went wrong and what to do. It holds
/// no code, token or state (the URL bar still does; the page sets
/// `no-referrer` so it goes nowhere else).
pub fn callback_page(result: &Result<CredentialId, SignInError>) -> String {
    let (title, body) = match result {
        Ok(id) => (
            "Signed in".to_string(),
            format!(
                "You are signed in to <b>{}</b>. You can close this tab; the call that asked \
                 for it goes on.",
                escape(&id.server)
            ),
        ),
        Err(e) => ("Not signed in".to_string(), escape(&e.to_string())),
    };
    result_page(&title, &body)
}

/// The page where a person gives their API key for `server`: one field,
/// posted back here with the sign-in's `state`. Nothing else on it.
/// It names whose sign-in it is: a link someone else forwarded would give
/// them the key.
pub fn key_form_page(id: &CredentialId, state: &str) -> String {
    let server = escape(&id.server);
    let whose = if id.tenant == crate::OPERATOR {
        "this server's own user (its operator)".to_string()
    } else {
        escape(&id.tenant)
    };
    let state = escape(state);
    format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>API key for {server}</title></head>\
         <body><h1>API key for {server}</h1>\
         <p>Code the AI agent of <b id=\"whose\">{whose}</b> wrote needs their own key for the \
         upstream server <b>{server}</b>. Give yours only if that is you, from your own agent: \
         whoever started this sign-in calls {server} with the key given here.</p>\
         <p>It is kept sealed on this server, sent only to {server}, and never shown to the agent.</p>\
         <form method=\"post\" action=\"key\" autocomplete=\"off\">\
         <input type=\"hidden\" name=\"state\" value=\"{state}\">\
         <label>API key <input type=\"password\" name=\"key\" id=\"key\" required maxlength=\"4096\"></label> \
         <button type=\"submit\" id=\"keep\">Keep my key</button></form></body></html>"
    )
}

/// The page after a key was given: kept, or what went wrong (a store's
/// failure in general words: its detail is for the log, not a browser).
pub fn key_result_page(result: &Result<CredentialId, SignInError>) -> String {
    let (title, body) = match result {
        Err(SignInError::Store(_)) => (
            "Key not kept".to_string(),
            "This server could not keep the key (its operator's log says why). Start the \
             sign-in again from your agent."
                .to_string(),
        ),
        Ok(id) => (
            "Key kept".to_string(),
            format!(
                "Your key for <b>{}</b> is kept. You can close this tab; the call that asked \
                 for it goes on.",
                escape(&id.server)
            ),
        ),
        Err(e) => ("Key not kept".to_string(), escape(&e.to_string())),
    };
    result_page(&title, &body)
}

/// A page of a title and one paragraph (`body`, already escaped).
fn result_page(title: &str, body: &str) -> String {
    format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>{title}</title></head>\
         <body><h1>{title}</h1><p id=\"result\">{body}</p></body></html>"
    )
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}
