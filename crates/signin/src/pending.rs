//! Sign-ins waiting for the person's browser to come back.
//!
//! Each is found by its `state` (rmcp's CSRF token: 128 random bits), which
//! is bound here to the person, the upstream and an expiry: a callback
//! with an unknown, used or expired `state` signs nobody in. The table is
//! bounded (a person cannot pile sign-ins up) and one sign-in per person
//! and upstream is open at a time: a second call that needs it waits for
//! the first.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use rmcp::transport::auth::AuthorizationSession;
use tokio::sync::watch;

use crate::error::SignInError;
use crate::store::CredentialId;

/// The most sign-ins open at once, and per person.
const MAX_OPEN: usize = 1024;
const MAX_OPEN_PER_PERSON: usize = 8;

/// How a sign-in ended: `Err` holds the words to show.
pub type Outcome = Result<(), String>;

struct Entry {
    id: CredentialId,
    /// What logs and elicitations call it (not the state).
    sign_in: String,
    flow: Flow,
    expires: Instant,
    timeout: Duration,
    done: watch::Sender<Option<Outcome>>,
}

/// What the person's browser comes back with.
#[derive(Clone)]
pub enum Flow {
    /// An authorization code, for rmcp's session to exchange.
    OAuth(Arc<AuthorizationSession>),
    /// An API key the person types into this server's page, sent in
    /// `header` (`oauth.api_key_header`).
    Key { header: String },
}

/// A key sign-in taken out of the table by its form's answer: the caller
/// keeps the key, then says how that went with [`KeySignIn::finish`].
pub struct KeySignIn {
    pub id: CredentialId,
    pub header: String,
    sign_in: String,
    done: watch::Sender<Option<Outcome>>,
}

impl KeySignIn {
    /// Ends the sign-in: the waiting call goes on, or learns why not.
    pub fn finish(self, outcome: &Result<(), SignInError>) {
        match outcome {
            Ok(()) => {
                tracing::info!(server = %self.id.server, tenant = %cem_config::tenant_digest(&self.id.tenant), sign_in = %self.sign_in, "an API key was given");
                self.done.send_replace(Some(Ok(())));
            }
            Err(e) => {
                tracing::warn!(server = %self.id.server, sign_in = %self.sign_in, error = %e, "an API key could not be kept");
                self.done.send_replace(Some(Err(e.to_string())));
            }
        }
    }
}

/// The open sign-ins of this process.
#[derive(Clone, Default)]
pub struct Pending(Arc<Mutex<HashMap<String, Entry>>>);

/// The end of one sign-in, to wait for.
pub struct Waiting {
    done: watch::Receiver<Option<Outcome>>,
    server: String,
    timeout: Duration,
    expires: Instant,
    /// The sign-in's id (the elicitation's).
    pub sign_in: String,
}

impl Waiting {
    /// Waits until the person signed in, declined, or the sign-in expired.
    pub async fn wait(mut self) -> Result<(), SignInError> {
        let left = self.expires.saturating_duration_since(Instant::now());
        let ended = tokio::time::timeout(left, self.done.wait_for(Option::is_some))
            .await
            .ok()
            .and_then(|r| r.ok().and_then(|outcome| outcome.clone()));
        match ended {
            Some(Ok(())) => Ok(()),
            Some(Err(why)) => Err(SignInError::Other(why)),
            None => Err(self.expired()),
        }
    }

    fn expired(&self) -> SignInError {
        SignInError::Expired {
            server: self.server.clone(),
            seconds: self.timeout.as_secs(),
        }
    }
}

impl Pending {
    /// Whether this node waits for the sign-in of `state`.
    pub fn holds(&self, state: &str) -> bool {
        self.lock().contains_key(state)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps `session` until its callback or `timeout`; returns its id and
    /// its end. The oldest of a person's sign-ins gives way past the cap.
    pub fn insert(
        &self,
        state: String,
        id: CredentialId,
        flow: Flow,
        timeout: Duration,
    ) -> (String, Waiting) {
        let mut open = self.lock();
        let now = Instant::now();
        open.retain(|_, e| e.expires > now);
        let mut mine: Vec<(Instant, String)> = open
            .iter()
            .filter(|(_, e)| e.id.tenant == id.tenant)
            .map(|(k, e)| (e.expires, k.clone()))
            .collect();
        mine.sort();
        while mine.len() >= MAX_OPEN_PER_PERSON {
            let (_, oldest) = mine.remove(0);
            open.remove(&oldest);
        }
        if open.len() >= MAX_OPEN
            && let Some(oldest) = open
                .iter()
                .min_by_key(|(_, e)| e.expires)
                .map(|(k, _)| k.clone())
        {
            open.remove(&oldest);
        }
        let sign_in = format!("signin-{}", short_id(&state));
        let (done, rx) = watch::channel(None);
        let expires = now + timeout;
        let waiting = Waiting {
            done: rx,
            server: id.server.clone(),
            timeout,
            expires,
            sign_in: sign_in.clone(),
        };
        open.insert(
            state,
            Entry {
                id,
                sign_in: sign_in.clone(),
                flow,
                expires,
                timeout,
                done,
            },
        );
        (sign_in, waiting)
    }

    /// Ends the open sign-in called `sign_in` (its link never reached the
    /// person, or they declined): its callback signs nobody in, and a call
    /// that waits for it learns `why` at once. Gives its state's key.
    pub fn abandon(&self, sign_in: &str, why: &str) -> Option<String> {
        let mut open = self.lock();
        let state = open
            .iter()
            .find(|(_, e)| e.sign_in == sign_in)
            .map(|(k, _)| k.clone())?;
        let entry = open.remove(&state)?;
        entry.done.send_replace(Some(Err(why.to_string())));
        Some(state)
    }

    /// Whose key, for which server, the open key sign-in of `state` asks.
    pub fn key_form(&self, state: &str) -> Option<CredentialId> {
        let open = self.lock();
        open.get(state)
            .filter(|e| matches!(e.flow, Flow::Key { .. }) && e.expires > Instant::now())
            .map(|e| e.id.clone())
    }

    /// Takes the key sign-in of `state` out (used once), for its key.
    pub fn take_key(&self, state: &str) -> Result<KeySignIn, SignInError> {
        let entry = {
            let mut open = self.lock();
            if !matches!(open.get(state).map(|e| &e.flow), Some(Flow::Key { .. })) {
                return Err(SignInError::UnknownState);
            }
            open.remove(state).ok_or(SignInError::UnknownState)?
        };
        if entry.expires <= Instant::now() {
            let e = SignInError::Expired {
                server: entry.id.server.clone(),
                seconds: entry.timeout.as_secs(),
            };
            entry.done.send_replace(Some(Err(e.to_string())));
            return Err(e);
        }
        let Flow::Key { header } = entry.flow else {
            return Err(SignInError::UnknownState);
        };
        Ok(KeySignIn {
            id: entry.id,
            header,
            sign_in: entry.sign_in,
            done: entry.done,
        })
    }

    /// The open sign-in of `id`, if one is under way: its id and end.
    pub fn waiting_for(&self, id: &CredentialId) -> Option<Waiting> {
        let open = self.lock();
        let now = Instant::now();
        open.values()
            .find(|e| &e.id == id && e.expires > now && e.done.borrow().is_none())
            .map(|e| Waiting {
                done: e.done.subscribe(),
                server: e.id.server.clone(),
                timeout: e.timeout,
                expires: e.expires,
                sign_in: e.sign_in.clone(),
            })
    }

    /// The browser came back with `query`: the sign-in its `state` names
    /// ends (used once), signed in or with the reason it did not.
    pub async fn complete(&self, query: &str) -> Result<CredentialId, SignInError> {
        let params: HashMap<String, String> = url::form_urlencoded::parse(query.as_bytes())
            .into_owned()
            .collect();
        // One state, the one every other reader of this query takes too.
        let state = crate::directory::state_of(query).ok_or(SignInError::UnknownState)?;
        let state = &state;
        let entry = {
            let mut open = self.lock();
            // A key's page answers with a key, not with a code.
            if !matches!(open.get(state).map(|e| &e.flow), Some(Flow::OAuth(_))) {
                return Err(SignInError::UnknownState);
            }
            open.remove(state).ok_or(SignInError::UnknownState)?
        };
        let Flow::OAuth(session) = &entry.flow else {
            return Err(SignInError::UnknownState);
        };
        let server = entry.id.server.clone();
        if entry.expires <= Instant::now() {
            let e = SignInError::Expired {
                server,
                seconds: entry.timeout.as_secs(),
            };
            entry.done.send_replace(Some(Err(e.to_string())));
            return Err(e);
        }
        let result = match (params.get("error"), params.get("code")) {
            (Some(error), _) => Err(SignInError::Declined {
                server: server.clone(),
                // Only the registered error code: the description is the
                // authorization server's free text.
                reason: error_code(error),
            }),
            (None, Some(code)) => session
                .handle_callback_with_issuer(code, state, params.get("iss").map(String::as_str))
                .await
                .map(|_| ())
                .map_err(|e| SignInError::Exchange {
                    server: server.clone(),
                    cause: e.to_string(),
                }),
            (None, None) => Err(SignInError::Exchange {
                server: server.clone(),
                cause: "the callback carried neither a code nor an error".into(),
            }),
        };
        match &result {
            Ok(()) => {
                tracing::info!(server = %server, tenant = %cem_config::tenant_digest(&entry.id.tenant), sign_in = %entry.sign_in, "signed in");
                entry.done.send_replace(Some(Ok(())));
            }
            Err(e) => {
                tracing::warn!(server = %server, sign_in = %entry.sign_in, error = %e, "a sign-in failed");
                entry.done.send_replace(Some(Err(e.to_string())));
            }
        }
        result.map(|()| entry.id)
    }
}

/// An OAuth error code as shown: RFC 6749's characters only, bounded.
fn error_code(code: &str) -> String {
    let clean: String = code
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
        .take(64)
        .collect();
    if clean.is_empty() {
        "no reason given".into()
    } else {
        clean
    }
}

/// A short, non-reversible name for a state (logs and elicitation ids).
fn short_id(state: &str) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(format!("cem-signin-id\0{state}").as_bytes())
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_codes_keep_only_their_characters() {
        assert_eq!(error_code("access_denied"), "access_denied");
        assert_eq!(error_code("<script>x"), "scriptx");
        assert_eq!(error_code("\u{202e}"), "no reason given");
    }

    #[test]
    fn an_id_names_no_state() {
        let id = short_id("abc");
        assert_eq!(id.len(), 16);
        assert!(!id.contains("abc"));
        assert_ne!(id, short_id("abd"));
    }

    #[tokio::test]
    async fn a_key_sign_in_answers_only_its_form_and_only_once() -> Result<(), SignInError> {
        let pending = Pending::default();
        let id = CredentialId::new("alice", "search");
        let (_, waiting) = pending.insert(
            "s1".into(),
            id.clone(),
            Flow::Key {
                header: "X-Api-Key".into(),
            },
            Duration::from_secs(60),
        );
        assert_eq!(pending.key_form("s1").as_ref(), Some(&id));
        // An authorization callback with its state is not its answer.
        assert!(matches!(
            pending.complete("state=s1&code=x").await,
            Err(SignInError::UnknownState)
        ));
        let taken = pending.take_key("s1")?;
        assert_eq!((taken.id.clone(), taken.header.as_str()), (id, "X-Api-Key"));
        taken.finish(&Ok(()));
        assert!(waiting.wait().await.is_ok());
        assert!(matches!(
            pending.take_key("s1"),
            Err(SignInError::UnknownState)
        ));
        assert_eq!(pending.key_form("s1"), None);
        Ok(())
    }

    #[tokio::test]
    async fn an_abandoned_sign_in_ends_its_waiters_and_takes_no_callback() {
        let pending = Pending::default();
        let id = CredentialId::new("alice", "orders");
        let (sign_in, waiting) = pending.insert(
            "s2".into(),
            id.clone(),
            Flow::Key {
                header: "X-Api-Key".into(),
            },
            Duration::from_secs(60),
        );
        assert!(pending.waiting_for(&id).is_some());
        assert_eq!(
            pending
                .abandon(&sign_in, "the client takes no links")
                .as_deref(),
            Some("s2")
        );
        assert!(
            matches!(waiting.wait().await, Err(SignInError::Other(why)) if why == "the client takes no links")
        );
        assert!(
            pending.waiting_for(&id).is_none(),
            "a later call asks afresh"
        );
        assert!(matches!(
            pending.take_key("s2"),
            Err(SignInError::UnknownState)
        ));
    }

    #[tokio::test]
    async fn an_unknown_state_signs_nobody_in() {
        let pending = Pending::default();
        assert!(matches!(
            pending.complete("state=nope&code=x").await,
            Err(SignInError::UnknownState)
        ));
        assert!(matches!(
            pending.complete("code=x").await,
            Err(SignInError::UnknownState)
        ));
    }
}
