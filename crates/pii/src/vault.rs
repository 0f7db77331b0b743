//! The vault: stable tokens for found values within one session, and their
//! restoration. One vault never restores another's tokens: each session has
//! its own, kept by [`Vaults`].

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use regex::Regex;

use crate::scan::pattern;
use crate::{Kind, detect, detect_field};

static TOKEN: LazyLock<Regex> = LazyLock::new(|| {
    pattern(r"\[(EMAIL|PHONE|SSN|CREDIT_CARD|IP|IBAN|SECRET)_([1-9][0-9]{0,8})\]")
});

/// A text with its findings replaced by tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tokenized {
    pub text: String,
    /// Values replaced, by kind (every occurrence counts).
    pub counts: BTreeMap<Kind, usize>,
}

impl Tokenized {
    pub fn total(&self) -> usize {
        self.counts.values().sum()
    }
}

/// A text with the vault's tokens replaced by their values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restored {
    pub text: String,
    pub restored: usize,
    /// Token-shaped strings this vault did not make (or has forgotten):
    /// left as they are.
    pub unknown: Vec<String>,
}

/// What the detectors found in one text, found with no vault at hand:
/// detection is the slow part (milliseconds a megabyte), and a session's
/// vault is shared by all its requests and its code's bridge calls, so it
/// must not be locked while detecting.
#[derive(Debug, Clone, Default)]
pub struct Found {
    entities: Vec<crate::Entity>,
    text_len: usize,
}

impl Found {
    /// Personal data and secrets in free text.
    pub fn in_text(text: &str) -> Self {
        Self {
            entities: detect(text),
            text_len: text.len(),
        }
    }

    /// Like [`Found::in_text`] for the value of a structured field: the
    /// key tells what the value is (`"password": "…"`, `"phone": "…"`).
    pub fn in_field(key: &str, value: &str) -> Self {
        Self {
            entities: detect_field(key, value),
            text_len: value.len(),
        }
    }

    /// The findings, in order.
    pub fn entities(&self) -> &[crate::Entity] {
        &self.entities
    }

    /// Whether nothing of `kinds` was found (no token would be made).
    pub fn none_of(&self, kinds: &[Kind]) -> bool {
        !self.entities.iter().any(|e| kinds.contains(&e.kind))
    }
}

/// Tokenizes `text` with a shared vault: detects first, then locks the
/// vault only to give out tokens (and not at all when nothing was found).
pub fn tokenize_shared(vault: &Mutex<Vault>, text: &str, kinds: &[Kind]) -> Tokenized {
    let found = Found::in_text(text);
    if found.none_of(kinds) {
        return Tokenized {
            text: text.to_string(),
            counts: BTreeMap::new(),
        };
    }
    lock(vault).tokenize(text, found, kinds)
}

/// Tokens for one session.
#[derive(Debug)]
pub struct Vault {
    by_value: HashMap<(Kind, String), String>,
    by_token: HashMap<String, String>,
    /// Tokens in the order they were made, so the oldest go first when the
    /// vault is full.
    order: VecDeque<(Kind, String, String)>,
    next: BTreeMap<Kind, u64>,
    /// Numbers reserved for this copy of a vault that several nodes share
    /// (last given out, last reserved), per kind: used before `next`, so
    /// two nodes never give one number to two values.
    blocks: BTreeMap<Kind, (u64, u64)>,
    bytes: usize,
    max_bytes: usize,
}

impl Vault {
    /// A vault that numbers on from `next` (a retired vault's counters), so
    /// no token of the old vault ever means another value in the new one.
    fn continuing(max_bytes: usize, next: BTreeMap<Kind, u64>) -> Self {
        Self {
            next,
            ..Self::new(max_bytes)
        }
    }

    /// A vault holding at most about `max_bytes` of values; past that the
    /// oldest tokens are forgotten (they no longer restore).
    pub fn new(max_bytes: usize) -> Self {
        Self {
            by_value: HashMap::new(),
            by_token: HashMap::new(),
            order: VecDeque::new(),
            next: BTreeMap::new(),
            blocks: BTreeMap::new(),
            bytes: 0,
            max_bytes,
        }
    }

    /// The token for `value`: the same one every time within this vault.
    pub fn token_for(&mut self, kind: Kind, value: &str) -> String {
        if let Some(token) = self.by_value.get(&(kind, value.to_string())) {
            return token.clone();
        }
        let n = match self.blocks.get_mut(&kind) {
            Some((used, last)) if *used < *last => {
                *used += 1;
                *used
            }
            _ => self.next.get(&kind).copied().unwrap_or(0) + 1,
        };
        let next = self.next.entry(kind).or_insert(0);
        *next = (*next).max(n);
        let token = format!("[{}_{}]", kind.label(), n);
        self.bytes += entry_bytes(value, &token);
        self.by_value
            .insert((kind, value.to_string()), token.clone());
        self.by_token.insert(token.clone(), value.to_string());
        self.order
            .push_back((kind, value.to_string(), token.clone()));
        while self.bytes > self.max_bytes && self.order.len() > 1 {
            let Some((k, v, t)) = self.order.pop_front() else {
                break;
            };
            self.by_value.remove(&(k, v.clone()));
            self.by_token.remove(&t);
            self.bytes = self.bytes.saturating_sub(entry_bytes(&v, &t));
        }
        token
    }

    /// Replaces what was `found` in `text` (of `kinds`) with tokens. The
    /// finding is done before, by [`Found`], so a vault shared by a
    /// session's requests is locked only to give out tokens (see
    /// [`tokenize_shared`]). Findings made for another text are made again.
    pub fn tokenize(&mut self, text: &str, found: Found, kinds: &[Kind]) -> Tokenized {
        let entities = if found.text_len == text.len() {
            found.entities
        } else {
            detect(text)
        };
        let mut out = String::with_capacity(text.len());
        let mut counts = BTreeMap::new();
        let mut last = 0;
        for e in entities.into_iter().filter(|e| kinds.contains(&e.kind)) {
            // Offsets of findings made for another text of the same length
            // may not fall on its boundaries: such a finding is skipped.
            if e.start < last || text.get(e.start..e.end).is_none() {
                continue;
            }
            out.push_str(&text[last..e.start]);
            out.push_str(&self.token_for(e.kind, &text[e.start..e.end]));
            *counts.entry(e.kind).or_insert(0) += 1;
            last = e.end;
        }
        out.push_str(&text[last..]);
        Tokenized { text: out, counts }
    }

    /// The value behind one of this vault's tokens.
    pub fn value_of(&self, token: &str) -> Option<&str> {
        self.by_token.get(token).map(String::as_str)
    }

    /// Replaces this vault's tokens in `text` with their values; other
    /// token-shaped strings stay as they are and are listed.
    pub fn restore(&self, text: &str) -> Restored {
        self.restore_where(text, |_| true)
    }

    /// [`Vault::restore`] for the tokens whose value `allowed` accepts;
    /// the others stay tokens (and are not listed as unknown).
    pub fn restore_where(&self, text: &str, allowed: impl Fn(&str) -> bool) -> Restored {
        let mut restored = 0;
        let mut unknown = Vec::new();
        let out = TOKEN.replace_all(text, |c: &regex::Captures| {
            let token = &c[0];
            match self.by_token.get(token) {
                Some(value) if !allowed(value) => token.to_string(),
                Some(value) => {
                    restored += 1;
                    value.clone()
                }
                None => {
                    if !unknown.iter().any(|u| u == token) {
                        unknown.push(token.to_string());
                    }
                    token.to_string()
                }
            }
        });
        Restored {
            text: out.into_owned(),
            restored,
            unknown,
        }
    }

    /// Whether `text` holds any token-shaped string (cheap pre-check).
    pub fn has_tokens(text: &str) -> bool {
        TOKEN.is_match(text)
    }

    pub fn len(&self) -> usize {
        self.by_token.len()
    }

    /// Every (kind, value, token) held, oldest first.
    pub fn entries(&self) -> impl Iterator<Item = (Kind, &str, &str)> {
        self.order
            .iter()
            .map(|(k, v, t)| (*k, v.as_str(), t.as_str()))
    }

    /// Gives this vault the numbers `first..=last` of `kind` to use before
    /// any other (reserved for it in a store several nodes share).
    pub fn reserve(&mut self, kind: Kind, first: u64, last: u64) {
        if first >= 1 && last >= first {
            self.blocks.insert(kind, (first - 1, last));
        }
    }

    /// How many reserved numbers of `kind` are left.
    pub fn reserved_left(&self, kind: Kind) -> u64 {
        self.blocks
            .get(&kind)
            .map_or(0, |(used, last)| last.saturating_sub(*used))
    }

    /// Takes in a token made elsewhere (another node's copy of this vault):
    /// `value` restores from `token` from now on (beside any token this
    /// vault has for it already). False, changing nothing, when this vault
    /// holds `token` for another value.
    pub fn adopt(&mut self, kind: Kind, value: &str, token: &str) -> bool {
        match self.by_token.get(token) {
            Some(v) if v == value => return true,
            Some(_) => return false,
            None => {}
        }
        let Some(n) = token_number(kind, token) else {
            return false;
        };
        let next = self.next.entry(kind).or_insert(0);
        *next = (*next).max(n);
        self.bytes += entry_bytes(value, token);
        self.by_value
            .entry((kind, value.to_string()))
            .or_insert_with(|| token.to_string());
        self.by_token.insert(token.to_string(), value.to_string());
        self.order
            .push_back((kind, value.to_string(), token.to_string()));
        true
    }

    /// The token this vault holds for `value`.
    pub fn token_of(&self, kind: Kind, value: &str) -> Option<&str> {
        self.by_value
            .get(&(kind, value.to_string()))
            .map(String::as_str)
    }

    /// Drops `token` (its value no longer restores from it).
    pub fn forget(&mut self, token: &str) {
        if let Some(value) = self.by_token.remove(token) {
            self.order.retain(|(_, _, t)| t != token);
            self.by_value.retain(|_, t| t != token);
            self.bytes = self.bytes.saturating_sub(entry_bytes(&value, token));
        }
    }

    pub fn is_empty(&self) -> bool {
        self.by_token.is_empty()
    }
}

/// The number of `token` when it is a token of `kind` (`[EMAIL_3]`: 3).
fn token_number(kind: Kind, token: &str) -> Option<u64> {
    let caps = TOKEN.captures(token)?;
    (caps.get(0)?.as_str() == token && &caps[1] == kind.label())
        .then(|| caps[2].parse().ok())
        .flatten()
}

/// `text` with every token that `renamed` maps replaced by its new name,
/// in one pass (so a chain of renames never applies twice).
pub fn rename_tokens(text: &str, renamed: &HashMap<String, String>) -> String {
    TOKEN
        .replace_all(text, |c: &regex::Captures| {
            renamed
                .get(&c[0])
                .cloned()
                .unwrap_or_else(|| c[0].to_string())
        })
        .into_owned()
}

/// What one token costs: the value and the token are each kept three
/// times (two maps and the eviction queue), plus the maps' overhead.
fn entry_bytes(value: &str, token: &str) -> usize {
    3 * (value.len() + token.len()) + 96
}

struct Slot {
    vault: Arc<Mutex<Vault>>,
    used: Instant,
}

/// One vault per session key, created on first use, dropped after `idle`
/// without use; at most `max_sessions` (the least recently used goes).
/// A key whose vault was dropped that way and comes back gets a vault that
/// numbers on where the old one stopped: its old tokens no longer restore,
/// and none of them is ever reused for another value.
pub struct Vaults {
    slots: Mutex<HashMap<String, Slot>>,
    retired: Mutex<HashMap<String, BTreeMap<Kind, u64>>>,
    idle: Duration,
    max_sessions: usize,
    max_bytes: usize,
}

/// Retired keys remembered (each a few dozen bytes).
const MAX_RETIRED: usize = 100_000;

impl std::fmt::Debug for Vaults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the values: only how many sessions hold a vault.
        f.debug_struct("Vaults")
            .field("sessions", &self.sessions())
            .finish()
    }
}

impl Vaults {
    pub fn new(idle: Duration, max_sessions: usize, max_bytes: usize) -> Self {
        Self {
            slots: Mutex::new(HashMap::new()),
            retired: Mutex::new(HashMap::new()),
            idle,
            max_sessions: max_sessions.max(1),
            max_bytes,
        }
    }

    /// The vault of `session`.
    pub fn get(&self, session: &str) -> Arc<Mutex<Vault>> {
        let mut slots = lock(&self.slots);
        let now = Instant::now();
        let mut gone: Vec<(String, Slot)> = Vec::new();
        let expired: Vec<String> = slots
            .iter()
            .filter(|(_, s)| now.duration_since(s.used) >= self.idle)
            .map(|(k, _)| k.clone())
            .collect();
        for k in expired {
            if let Some(slot) = slots.remove(&k) {
                gone.push((k, slot));
            }
        }
        if let Some(slot) = slots.get_mut(session) {
            slot.used = now;
            let vault = slot.vault.clone();
            drop(slots);
            self.retire(gone);
            return vault;
        }
        if slots.len() >= self.max_sessions
            && let Some(oldest) = slots
                .iter()
                .min_by_key(|(_, s)| s.used)
                .map(|(k, _)| k.clone())
            && let Some(slot) = slots.remove(&oldest)
        {
            gone.push((oldest, slot));
        }
        let next = lock(&self.retired).remove(session).unwrap_or_default();
        let vault = Arc::new(Mutex::new(Vault::continuing(self.max_bytes, next)));
        slots.insert(
            session.to_string(),
            Slot {
                vault: vault.clone(),
                used: now,
            },
        );
        drop(slots);
        self.retire(gone);
        vault
    }

    /// Forgets `session`'s vault for good (its session has ended; the key
    /// is never used again).
    pub fn remove(&self, session: &str) {
        lock(&self.slots).remove(session);
    }

    fn retire(&self, gone: Vec<(String, Slot)>) {
        if gone.is_empty() {
            return;
        }
        let mut retired = lock(&self.retired);
        for (key, slot) in gone {
            if retired.len() >= MAX_RETIRED {
                retired.clear();
            }
            let next = lock(&slot.vault).next.clone();
            retired.insert(key, next);
        }
    }

    pub fn sessions(&self) -> usize {
        lock(&self.slots).len()
    }
}

/// Locks a mutex; a panic elsewhere while holding it leaves data that is
/// still consistent here (every update is a single insert or remove).
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tok(v: &mut Vault, text: &str, kinds: &[Kind]) -> Tokenized {
        v.tokenize(text, Found::in_text(text), kinds)
    }

    #[test]
    fn findings_for_another_text_are_made_again() {
        let mut v = Vault::new(1 << 20);
        let stale = Found::in_text("ana@example.com");
        let t = v.tokenize("call 10.1.2.3 now", stale, &Kind::ALL);
        assert_eq!(t.text, "call [IP_1] now");
    }

    #[test]
    fn adopted_tokens_restore_and_number_on() {
        let mut v = Vault::new(1 << 20);
        assert!(v.adopt(Kind::Email, "a@x.io", "[EMAIL_4]"));
        assert!(v.adopt(Kind::Email, "a@x.io", "[EMAIL_4]"), "idempotent");
        assert!(!v.adopt(Kind::Email, "b@x.io", "[EMAIL_4]"), "token taken");
        assert!(!v.adopt(Kind::Phone, "1", "[EMAIL_9]"), "wrong kind");
        // Another node tokenized the same value: both tokens restore it.
        assert!(v.adopt(Kind::Email, "a@x.io", "[EMAIL_7]"));
        assert_eq!(v.restore("[EMAIL_4] [EMAIL_7]").text, "a@x.io a@x.io");
        assert_eq!(v.token_for(Kind::Email, "a@x.io"), "[EMAIL_4]");
        assert_eq!(v.token_for(Kind::Email, "c@x.io"), "[EMAIL_8]");
        v.forget("[EMAIL_4]");
        v.forget("[EMAIL_7]");
        assert_eq!(v.restore("[EMAIL_4]").restored, 0);
        assert_eq!(v.entries().count(), 1);
        // Reserved numbers go first, then numbering continues past all.
        v.reserve(Kind::Email, 101, 102);
        assert_eq!(v.reserved_left(Kind::Email), 2);
        assert_eq!(v.token_for(Kind::Email, "d@x.io"), "[EMAIL_101]");
        assert_eq!(v.token_for(Kind::Email, "e@x.io"), "[EMAIL_102]");
        assert_eq!(v.token_for(Kind::Email, "f@x.io"), "[EMAIL_103]");
        let renamed = HashMap::from([
            ("[EMAIL_5]".to_string(), "[EMAIL_6]".to_string()),
            ("[EMAIL_6]".to_string(), "[EMAIL_7]".to_string()),
        ]);
        assert_eq!(
            rename_tokens("[EMAIL_5] [EMAIL_6]", &renamed),
            "[EMAIL_6] [EMAIL_7]"
        );
    }

    #[test]
    fn tokens_are_stable_and_restore() {
        let mut v = Vault::new(1 << 20);
        let a = tok(
            &mut v,
            "mail ana@example.com and ana@example.com",
            &Kind::ALL,
        );
        assert_eq!(a.text, "mail [EMAIL_1] and [EMAIL_1]");
        assert_eq!(a.counts[&Kind::Email], 2);
        let b = tok(&mut v, "bob@example.org, ana@example.com", &Kind::ALL);
        assert_eq!(b.text, "[EMAIL_2], [EMAIL_1]");
        let r = v.restore("to [EMAIL_2] cc [EMAIL_9]");
        assert_eq!(r.text, "to bob@example.org cc [EMAIL_9]");
        assert_eq!((r.restored, r.unknown), (1, vec!["[EMAIL_9]".to_string()]));
    }

    #[test]
    fn a_session_cannot_restore_another_sessions_tokens() {
        let vaults = Vaults::new(Duration::from_secs(60), 8, 1 << 20);
        let t = tokenize_shared(&vaults.get("a"), "ana@example.com", &Kind::ALL).text;
        assert_eq!(lock(&vaults.get("b")).restore(&t).text, t);
        assert_eq!(lock(&vaults.get("a")).restore(&t).text, "ana@example.com");
    }

    #[test]
    fn full_vaults_forget_the_oldest_and_sessions_are_capped() {
        let mut v = Vault::new(400);
        for i in 0..20 {
            v.token_for(Kind::Email, &format!("user{i}@example.com"));
        }
        assert!(
            v.len() < 20 && v.value_of("[EMAIL_20]").is_some() && v.value_of("[EMAIL_1]").is_none()
        );
        let vaults = Vaults::new(Duration::from_secs(60), 2, 1 << 20);
        for s in ["a", "b", "c"] {
            vaults.get(s);
        }
        assert_eq!(vaults.sessions(), 2);
    }

    #[test]
    fn a_returning_session_never_gets_an_old_token_for_a_new_value() {
        let vaults = Vaults::new(Duration::from_secs(60), 1, 1 << 20);
        let first = tokenize_shared(&vaults.get("a"), "ana@example.com", &Kind::ALL).text;
        vaults.get("b"); // "a" is evicted
        let again = vaults.get("a");
        let second = tokenize_shared(&again, "bob@example.com", &Kind::ALL).text;
        assert_eq!(
            (first.as_str(), second.as_str()),
            ("[EMAIL_1]", "[EMAIL_2]")
        );
        assert_eq!(lock(&again).restore("[EMAIL_1]").text, "[EMAIL_1]");
    }

    #[test]
    fn only_the_asked_kinds_are_tokenized() {
        let mut v = Vault::new(1 << 20);
        let t = tok(&mut v, "ana@example.com from 10.1.2.3", &[Kind::Email]);
        assert_eq!(t.text, "[EMAIL_1] from 10.1.2.3");
    }
}
