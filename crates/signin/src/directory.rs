//! Which node waits for a sign-in's callback, in a deployment of many.
//!
//! A sign-in in flight is state in the memory of the node that began it
//! (rmcp's session with the PKCE verifier, and the call waiting on it).
//! Behind a balancer the person's browser may come back to any node; the
//! node that began it writes down where it waits, and a node that gets a
//! callback it does not know looks it up and hands it over. The key is a
//! digest of the `state`, never the `state` itself.

use async_trait::async_trait;
use sha2::{Digest, Sha256};

/// Where the nodes of a deployment say which of them waits for which
/// sign-in (the store, with many nodes). Failures are the directory's to
/// log: a sign-in goes on without it, on the node that began it.
#[async_trait]
pub trait Directory: Send + Sync + std::fmt::Debug {
    /// This node now waits for the callback of `key`.
    async fn started(&self, key: &str);
    /// The sign-in of `key` has ended (signed in, refused or expired).
    async fn ended(&self, key: &str);
    /// The node (its URL) that waits for `key`, when it is another one.
    async fn node_of(&self, key: &str) -> Option<String>;
}

/// The directory's name for the sign-in `state` belongs to.
pub fn callback_key(state: &str) -> String {
    crate::key::hex(&Sha256::digest(
        format!("cem-signin-callback\0{state}").as_bytes(),
    ))
}

/// The `state` a callback's query (or a key page's form) carries; none
/// when it carries two, which every reader would then have to agree on.
pub(crate) fn state_of(query: &str) -> Option<String> {
    let mut states = url::form_urlencoded::parse(query.as_bytes())
        .filter(|(k, _)| k == "state")
        .map(|(_, v)| v.into_owned());
    let state = states.next()?;
    states.next().is_none().then_some(state)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_names_no_state_and_is_the_same_on_every_node() {
        let state = "Jq9vY2xh_c3RhdGUtdmFsdWU";
        let key = callback_key(state);
        assert_eq!(key, callback_key(state));
        assert_ne!(key, callback_key("another"));
        assert!(!key.contains(state) && key.len() == 64);
        assert_eq!(
            state_of(&format!("code=abc&state={state}&iss=x")).as_deref(),
            Some(state)
        );
        assert_eq!(state_of("code=abc"), None);
        assert_eq!(state_of("state=a&code=x&state=b"), None);
    }
}
