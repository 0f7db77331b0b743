//! Interpreter sessions (`session_id`): which interpreter each one holds,
//! shared by the engines of every tenant of one server so the server-wide
//! cap counts them all, and which ones were ended (evicted for room, or
//! idle too long) so their next call says so instead of silently starting
//! over.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::Mutex;

use crate::process::Interp;

/// Ended sessions remembered (per server) so their next call can be told.
const REMEMBERED: usize = 4096;

/// One interpreter session.
pub(crate) struct Session {
    pub interp: Option<Interp>,
    pub last_used: Instant,
    /// Set while an execution runs and cleared when it ends: still set
    /// at the next one means that run was abandoned (cancelled) and its
    /// interpreter killed, so the session starts afresh, and says so.
    pub interrupted: bool,
}

/// (tenant, session key).
type Key = (String, String);

/// Why a session that a caller names no longer exists.
#[derive(Debug, Clone)]
pub(crate) enum Ended {
    /// Ended to make room for another; with the cap that was full.
    Evicted { cap: usize, config_key: String },
    /// Unused for longer than `sandbox.session_idle_seconds`.
    Idle { seconds: u64 },
}

/// A live session and how many calls hold it (one in use is never evicted,
/// even before its call has locked it).
struct Live {
    session: Arc<Mutex<Session>>,
    users: Arc<AtomicUsize>,
}

#[derive(Default)]
struct Inner {
    live: HashMap<Key, Live>,
    /// Why a session ended, with the number of that record.
    ended: HashMap<Key, (u64, Ended)>,
    /// Records in the order they were made, to forget the oldest; a record
    /// replaced or reported since is skipped by its number.
    ended_order: VecDeque<(Key, u64)>,
    records: u64,
}

/// A call's hold on a session: while it lives, the session is not evicted.
pub(crate) struct Lease(Arc<AtomicUsize>);

impl Drop for Lease {
    fn drop(&mut self) {
        self.0.fetch_sub(1, AtomicOrdering::SeqCst);
    }
}

/// Every interpreter session of a server.
pub struct SessionTable {
    inner: Mutex<Inner>,
    /// Sessions the whole server keeps at once (`sandbox.max_sessions`).
    cap: usize,
}

impl std::fmt::Debug for SessionTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionTable")
            .field("cap", &self.cap)
            .finish_non_exhaustive()
    }
}

/// What [`SessionTable::open`] found or made.
pub(crate) struct Opened {
    pub session: Arc<Mutex<Session>>,
    /// Keep for the whole call.
    pub lease: Lease,
    /// The session's previous life ended (it is new again): why.
    pub ended: Option<Ended>,
    /// Interpreters of sessions evicted to make room: the caller kills them
    /// (outside the table's lock).
    pub evicted: Vec<Arc<Mutex<Session>>>,
}

impl SessionTable {
    /// A table for a server that keeps at most `cap` sessions.
    pub fn new(cap: usize) -> Arc<SessionTable> {
        Arc::new(SessionTable {
            inner: Mutex::new(Inner::default()),
            cap: cap.max(1),
        })
    }

    /// The session `key` of `tenant`, made if it does not exist. Making one
    /// when the tenant holds `tenant_cap` sessions, or the server its cap,
    /// evicts the least recently used idle session of the tenant (or of the
    /// server); when every one is busy, the call is refused.
    pub(crate) async fn open(
        &self,
        tenant: &str,
        key: &str,
        tenant_cap: (usize, &str),
    ) -> Result<Opened, String> {
        let mut inner = self.inner.lock().await;
        let k = (tenant.to_string(), key.to_string());
        if let Some(live) = inner.live.get(&k) {
            return Ok(Opened {
                session: live.session.clone(),
                lease: lease(&live.users),
                ended: None,
                evicted: Vec::new(),
            });
        }
        let mut evicted = Vec::new();
        let (cap, config_key) = tenant_cap;
        let of_tenant = inner.live.keys().filter(|(t, _)| t == tenant).count();
        if of_tenant >= cap {
            let victim = least_recent(&inner, Some(tenant)).ok_or_else(|| {
                format!(
                    "{of_tenant} interpreter sessions are open and all are running code, the most allowed \
                     ({config_key} = {cap}); wait for one to finish, or run without session_id"
                )
            })?;
            evicted.extend(evict(&mut inner, victim, cap, config_key));
        }
        if inner.live.len() >= self.cap {
            let victim = least_recent(&inner, None).ok_or_else(|| {
                format!(
                    "{} interpreter sessions are open on this server and all are running code, the most \
                     allowed (sandbox.max_sessions = {}); wait for one to finish, or run without session_id",
                    inner.live.len(),
                    self.cap
                )
            })?;
            evicted.extend(evict(&mut inner, victim, self.cap, "sandbox.max_sessions"));
        }
        let ended = inner.ended.remove(&k).map(|(_, why)| why);
        let session = Arc::new(Mutex::new(Session {
            interp: None,
            last_used: Instant::now(),
            interrupted: false,
        }));
        let users = Arc::new(AtomicUsize::new(0));
        let lease = lease(&users);
        inner.live.insert(
            k,
            Live {
                session: session.clone(),
                users,
            },
        );
        Ok(Opened {
            session,
            lease,
            ended,
            evicted,
        })
    }

    /// Why `tenant`'s session `key` ended, if it did and was not reopened.
    pub(crate) async fn ended(&self, tenant: &str, key: &str) -> Option<Ended> {
        let inner = self.inner.lock().await;
        inner
            .ended
            .get(&(tenant.to_string(), key.to_string()))
            .map(|(_, why)| why.clone())
    }

    /// Forgets why `tenant`'s session `key` ended (it was reported).
    pub(crate) async fn forget_ended(&self, tenant: &str, key: &str) {
        let mut inner = self.inner.lock().await;
        inner.ended.remove(&(tenant.to_string(), key.to_string()));
    }

    /// Ends `tenant`'s sessions idle for longer than `idle`; returns them
    /// for the caller to kill.
    pub(crate) async fn expire(&self, tenant: &str, idle: Duration) -> Vec<Arc<Mutex<Session>>> {
        let mut inner = self.inner.lock().await;
        let expired: Vec<Key> = inner
            .live
            .iter()
            .filter(|((t, _), l)| t == tenant && idle_since(l).is_some_and(|u| u.elapsed() > idle))
            .map(|(k, _)| k.clone())
            .collect();
        let mut out = Vec::new();
        for k in expired {
            if let Some(Live { session: s, .. }) = inner.live.remove(&k) {
                tracing::info!(session = %k.1, "session idle too long; ended");
                remember(
                    &mut inner,
                    k,
                    Ended::Idle {
                        seconds: idle.as_secs(),
                    },
                );
                out.push(s);
            }
        }
        out
    }

    /// Removes every session of `tenant`; returns them to be killed.
    pub(crate) async fn drain(&self, tenant: &str) -> Vec<Arc<Mutex<Session>>> {
        let mut inner = self.inner.lock().await;
        let keys: Vec<Key> = inner
            .live
            .keys()
            .filter(|(t, _)| t == tenant)
            .cloned()
            .collect();
        keys.iter()
            .filter_map(|k| inner.live.remove(k))
            .map(|l| l.session)
            .collect()
    }

    /// How many sessions `tenant` holds.
    pub(crate) async fn count(&self, tenant: &str) -> usize {
        let inner = self.inner.lock().await;
        inner.live.keys().filter(|(t, _)| t == tenant).count()
    }

    /// `tenant`'s sessions, for status answers: the session id, how long
    /// it has been idle (or that it is running) and the memory its
    /// interpreter holds.
    pub(crate) async fn describe(&self, tenant: &str) -> Vec<Value> {
        let sessions: Vec<(String, Arc<Mutex<Session>>)> = {
            let inner = self.inner.lock().await;
            inner
                .live
                .iter()
                .filter(|((t, _), _)| t == tenant)
                .map(|((_, k), l)| (k.clone(), l.session.clone()))
                .collect()
        };
        let mut out: Vec<Value> = sessions
            .into_iter()
            .map(|(key, session)| {
                let id = shown_id(&key).to_string();
                match session.try_lock() {
                    Ok(s) => {
                        let memory = s
                            .interp
                            .as_ref()
                            .and_then(Interp::memory_bytes)
                            .map(|b| (b as f64 / 1_048_576.0 * 10.0).round() / 10.0);
                        json!({
                            "session_id": id,
                            "idle_seconds": s.last_used.elapsed().as_secs(),
                            "memory_mb": memory,
                        })
                    }
                    Err(_) => json!({"session_id": id, "running": true}),
                }
            })
            .collect();
        out.sort_by(|a, b| a["session_id"].as_str().cmp(&b["session_id"].as_str()));
        out
    }
}

fn lease(users: &Arc<AtomicUsize>) -> Lease {
    users.fetch_add(1, AtomicOrdering::SeqCst);
    Lease(users.clone())
}

/// When a session was last used, if no call holds it now.
fn idle_since(live: &Live) -> Option<Instant> {
    if live.users.load(AtomicOrdering::SeqCst) > 0 {
        return None;
    }
    live.session.try_lock().ok().map(|s| s.last_used)
}

/// The id the caller gave, from a session key (which may carry the MCP
/// session that owns it first, before a NUL).
pub(crate) fn shown_id(key: &str) -> &str {
    key.rsplit('\u{0}').next().unwrap_or(key)
}

/// Ends a session's interpreter (the session has left the table).
pub(crate) async fn end(session: &Mutex<Session>) {
    if let Some(mut interp) = session.lock().await.interp.take() {
        interp.kill().await;
    }
}

/// The least recently used idle session (of `tenant`, or of anyone).
fn least_recent(inner: &Inner, tenant: Option<&str>) -> Option<Key> {
    inner
        .live
        .iter()
        .filter(|((t, _), _)| tenant.is_none_or(|tenant| t == tenant))
        .filter_map(|(k, l)| idle_since(l).map(|used| (used, k)))
        .min_by_key(|(used, _)| *used)
        .map(|(_, k)| k.clone())
}

fn evict(
    inner: &mut Inner,
    victim: Key,
    cap: usize,
    config_key: &str,
) -> Option<Arc<Mutex<Session>>> {
    tracing::info!(session = %victim.1, cap, config_key, "session evicted to make room");
    let live = inner.live.remove(&victim)?;
    remember(
        inner,
        victim,
        Ended::Evicted {
            cap,
            config_key: config_key.to_string(),
        },
    );
    Some(live.session)
}

fn remember(inner: &mut Inner, key: Key, why: Ended) {
    inner.records += 1;
    let number = inner.records;
    inner.ended.insert(key.clone(), (number, why));
    inner.ended_order.push_back((key, number));
    while inner.ended_order.len() > REMEMBERED {
        if let Some((old, n)) = inner.ended_order.pop_front()
            && inner.ended.get(&old).is_some_and(|(m, _)| *m == n)
        {
            inner.ended.remove(&old);
        }
    }
}

impl Ended {
    /// What the next call of the session is told.
    pub(crate) fn explain(&self, id: &str) -> String {
        match self {
            Ended::Evicted { cap, config_key } => format!(
                "interpreter session '{id}' was ended to make room for a newer one ({config_key} = {cap} \
                 sessions at once; it was the least recently used): its variables and imports are gone. \
                 Call again with the same session_id to start it afresh, and recreate the state the code needs"
            ),
            Ended::Idle { seconds } => format!(
                "interpreter session '{id}' had been idle for over {seconds} s \
                 (sandbox.session_idle_seconds) and was ended; it started afresh, without its variables"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn open(
        table: &SessionTable,
        tenant: &str,
        key: &str,
        cap: usize,
    ) -> Result<Opened, String> {
        table.open(tenant, key, (cap, "quotas.sessions")).await
    }

    /// Opens a session as a call would, and ends the call (its lease goes).
    async fn used(table: &SessionTable, tenant: &str, key: &str, cap: usize) -> Opened {
        let mut opened = open(table, tenant, key, cap)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        opened.session.lock().await.last_used = Instant::now();
        let users = Arc::new(AtomicUsize::new(1));
        // Swap in a lease of nothing: the session's own is released.
        opened.lease = Lease(users);
        opened
    }

    #[tokio::test]
    async fn the_server_cap_evicts_the_least_recently_used_idle_session() {
        let table = SessionTable::new(2);
        let a = used(&table, "t", "a", usize::MAX).await;
        tokio::time::sleep(Duration::from_millis(5)).await;
        let b = used(&table, "t", "b", usize::MAX).await;
        tokio::time::sleep(Duration::from_millis(5)).await;
        a.session.lock().await.last_used = Instant::now(); // a is now more recent than b
        let c = used(&table, "u", "c", usize::MAX).await;
        assert_eq!(c.evicted.len(), 1);
        assert!(Arc::ptr_eq(&c.evicted[0], &b.session));
        assert_eq!(table.count("t").await, 1);
        let ended = table.ended("t", "b").await.map(|e| e.explain("b"));
        assert!(ended.is_some_and(|m| m.contains("sandbox.max_sessions = 2")));
        // Reopening b evicts a (the least recent now) and reports nothing for b itself.
        let b2 = used(&table, "t", "b", usize::MAX).await;
        assert!(matches!(b2.ended, Some(Ended::Evicted { .. })));
        assert!(table.ended("t", "b").await.is_none());
        assert!(table.ended("t", "a").await.is_some());
    }

    #[tokio::test]
    async fn a_tenant_cap_evicts_only_that_tenants_sessions() {
        let table = SessionTable::new(100);
        let other = used(&table, "u", "x", 1).await;
        let a = used(&table, "t", "a", 1).await;
        let b = used(&table, "t", "b", 1).await;
        assert_eq!(b.evicted.len(), 1);
        assert!(Arc::ptr_eq(&b.evicted[0], &a.session));
        assert!(!Arc::ptr_eq(&b.evicted[0], &other.session));
        let why = table.ended("t", "a").await.map(|e| e.explain("a"));
        assert!(why.is_some_and(|m| m.contains("quotas.sessions = 1")));
        assert_eq!(table.count("u").await, 1);
    }

    #[tokio::test]
    async fn a_session_held_by_a_call_is_not_evicted_before_it_locks_it() {
        let table = SessionTable::new(1);
        let held = open(&table, "t", "held", usize::MAX).await;
        assert!(held.is_ok());
        let refused = open(&table, "t", "new", usize::MAX).await;
        assert!(refused.is_err_and(|e| e.contains("all are running code")));
        drop(held);
        assert!(open(&table, "t", "new", usize::MAX).await.is_ok());
    }

    #[tokio::test]
    async fn a_busy_session_is_never_evicted() {
        let table = SessionTable::new(1);
        let busy = used(&table, "t", "busy", usize::MAX).await;
        let _running = busy.session.lock().await;
        let refused = open(&table, "t", "new", usize::MAX).await;
        assert!(refused.is_err_and(
            |e| e.contains("all are running code") && e.contains("sandbox.max_sessions = 1")
        ));
        assert_eq!(table.count("t").await, 1);
    }

    #[tokio::test]
    async fn a_reported_and_ended_again_session_keeps_its_newest_record() {
        let table = SessionTable::new(1);
        used(&table, "t", "a", usize::MAX).await;
        used(&table, "t", "b", usize::MAX).await; // evicts a
        used(&table, "t", "a", usize::MAX).await; // a reopened (its record reported), evicts b
        used(&table, "t", "b", usize::MAX).await; // evicts a again
        for i in 0..REMEMBERED - 2 {
            used(&table, "u", &format!("s{i}"), usize::MAX).await;
        }
        // a's first record has left the list; its newer one must not have gone with it.
        assert!(table.ended("t", "a").await.is_some());
    }

    #[tokio::test]
    async fn idle_sessions_expire_and_say_so() {
        let table = SessionTable::new(10);
        used(&table, "t", "a", usize::MAX).await;
        used(&table, "u", "b", usize::MAX).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        let gone = table.expire("t", Duration::from_millis(10)).await;
        assert_eq!(gone.len(), 1);
        assert_eq!((table.count("t").await, table.count("u").await), (0, 1));
        let again = used(&table, "t", "a", usize::MAX).await;
        assert!(matches!(again.ended, Some(Ended::Idle { .. })));
    }

    #[tokio::test]
    async fn the_list_of_ended_sessions_is_bounded() {
        let table = SessionTable::new(1);
        for i in 0..REMEMBERED + 10 {
            used(&table, "t", &format!("s{i}"), usize::MAX).await;
        }
        let inner = table.inner.lock().await;
        assert!(inner.ended.len() <= REMEMBERED);
        assert!(inner.ended_order.len() <= REMEMBERED);
    }
}
