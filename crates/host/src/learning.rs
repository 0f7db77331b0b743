//! Learning from use, as the server keeps it for one tenant.
//!
//! Each session's last search is remembered (its words, personal data and
//! secrets removed first) for [`RECENT`]; when the same session then uses a
//! tool (code calls it, or the agent reads its definition), the search's
//! words are recorded against that tool. The records are the tenant's:
//! kept in `<tenant>/search/learned.json` (written at each change; an edit
//! of the file, such as `tools learned --clear`, is read back before the
//! next search), and with a store shared by nodes also there, so every
//! node learns what any node saw. A session any node may serve (a
//! stateless client's) has its last search in the store instead, where a
//! use on any node claims it (`crate::cluster::searched` and `used_tool`).
//!
//! With a transformer ranking, the records' vectors are kept beside them
//! (`learned-vectors.bin`: at most once a [`KEEP_VECTORS_EVERY`], at
//! shutdown and when the tenant's state is dropped), so that the first
//! search after a restart does not run the model over every record again
//! (2.4 s for 2,000).
//!
//! `search.learn: false` records nothing and searches without the records.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use cem_catalog::Learned;

/// How long after a search a use still counts as its answer.
pub const RECENT: Duration = Duration::from_secs(10 * 60);
/// Sessions whose last search is remembered at once (the oldest goes).
const SESSIONS: usize = 1024;
/// The longest query remembered (characters): a search is a sentence.
const MAX_QUERY: usize = 500;

/// One tenant's learning.
#[derive(Debug)]
pub struct Learning {
    enabled: bool,
    /// Where the records are kept (None: in memory only).
    path: Option<PathBuf>,
    /// Read by searches (many at once), written by uses.
    learned: RwLock<Learned>,
    /// Each session's last search, when, and the tools recorded for it
    /// (each once: a loop of calls is one use).
    recent: Mutex<HashMap<String, Recent>>,
    /// The file's modification time as this process last wrote or read
    /// it: another time means someone else changed it.
    on_disk: Mutex<Option<SystemTime>>,
    /// The tenant as log lines name it (a digest).
    tenant: String,
    /// When the records were last read from the shared store.
    pulled: crate::last_use::LastUse,
    /// When the records' vectors were last written.
    vectors_kept: Mutex<Option<Instant>>,
    /// When a search last ran with the records (see
    /// [`Learning::release_if_idle`]).
    searched_at: crate::last_use::LastUse,
    /// The kept vectors are for the next search to take (after the
    /// tenant's opening, and after a release for idleness): set and taken
    /// under the records' write lock.
    take_back: AtomicBool,
}

/// How often at most the records' vectors are written while searches run
/// the model on new records (each use makes one).
pub const KEEP_VECTORS_EVERY: Duration = Duration::from_secs(60);

/// How often a search reads the tenant's records from the shared store.
pub const PULL_EVERY: Duration = Duration::from_secs(30);

#[derive(Debug)]
struct Recent {
    query: String,
    at: Instant,
    recorded: Vec<String>,
    /// Whether the shared store holds it too (a session any node may
    /// serve); until then, a use on this node is answered from here.
    stored: bool,
}

/// Now, in Unix seconds.
pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Learning {
    /// The records at `path` (a missing file: none; an unreadable one is
    /// said and set aside, never fatal).
    pub fn open(enabled: bool, path: Option<PathBuf>, tenant: &str) -> Self {
        let tenant = cem_config::tenant_digest(tenant);
        let learned = match (&path, enabled) {
            (Some(path), true) => read(path, &tenant),
            _ => Learned::default(),
        };
        let on_disk = path.as_deref().and_then(modified);
        let mut learning = Learning {
            enabled,
            path,
            learned: RwLock::new(learned),
            recent: Mutex::new(HashMap::new()),
            pulled: Default::default(),
            vectors_kept: Mutex::new(None),
            searched_at: Default::default(),
            take_back: AtomicBool::new(false),
            on_disk: Mutex::new(on_disk),
            tenant,
        };
        learning.take_kept_vectors();
        learning
    }

    /// Offers the records' kept vectors to the first search (read then:
    /// a tenant that only runs code holds none); with no records (none
    /// yet, or their file gone or set aside), removes any, as they would
    /// name their words.
    fn take_kept_vectors(&mut self) {
        let (Some(_), true) = (&self.path, self.enabled) else {
            return;
        };
        let empty = self
            .learned
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .is_empty();
        if empty {
            self.forget_vectors();
        } else {
            *self.take_back.get_mut() = true;
        }
    }

    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Remembers `query` as `session`'s last search, its personal data and
    /// secrets removed; returns what is remembered (None when learning is
    /// off).
    pub fn searched(&self, session: &str, query: &str) -> Option<String> {
        if !self.enabled {
            return None;
        }
        let clean = without_personal_data(query);
        let Ok(mut recent) = self.recent.lock() else {
            return None;
        };
        if recent.len() >= SESSIONS && !recent.contains_key(session) {
            let oldest = recent
                .iter()
                .min_by_key(|(_, r)| r.at)
                .map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                recent.remove(&oldest);
            }
        }
        recent.insert(
            session.to_string(),
            Recent {
                query: clean.clone(),
                at: Instant::now(),
                recorded: Vec::new(),
                stored: false,
            },
        );
        Some(clean)
    }

    /// Records a use of `tool` after `query` (this node's own search, or
    /// one the shared store's claim gives, see
    /// [`crate::cluster::used_tool`]); whether anything was recorded (a
    /// query with no words left is not).
    pub fn record(&self, query: &str, tool: &str) -> bool {
        if !self.enabled {
            return false;
        }
        self.follow_disk();
        let recorded = self
            .learned
            .write()
            .map(|mut learned| learned.record(query, tool, now()))
            .unwrap_or(false);
        if recorded {
            self.save();
        }
        recorded
    }

    /// The shared store now holds `session`'s last search.
    pub fn stored(&self, session: &str) {
        if let Ok(mut recent) = self.recent.lock()
            && let Some(last) = recent.get_mut(session)
        {
            last.stored = true;
        }
    }

    /// Whether `session`'s last search, still recent, is here and not in
    /// the shared store (the store did not take it): a use is answered
    /// from here, not from an older search the store still holds.
    pub fn only_here(&self, session: &str) -> bool {
        self.recent.lock().is_ok_and(|recent| {
            recent
                .get(session)
                .is_some_and(|last| !last.stored && last.at.elapsed() <= RECENT)
        })
    }

    /// `session` used `tool` (`server.tool`): its last search, if recent,
    /// is recorded against it, once per search and tool. Returns the words
    /// recorded.
    pub fn used(&self, session: &str, tool: &str) -> Option<String> {
        if !self.enabled {
            return None;
        }
        let query = {
            let mut recent = self.recent.lock().ok()?;
            let last = recent.get_mut(session)?;
            if last.at.elapsed() > RECENT || last.recorded.iter().any(|t| t == tool) {
                return None;
            }
            last.recorded.push(tool.to_string());
            last.query.clone()
        };
        self.record(&query, tool).then_some(query)
    }

    /// Runs `search` with the records (None when learning is off).
    pub fn with<T>(&self, search: impl FnOnce(Option<&Learned>) -> T) -> T {
        if !self.enabled {
            return search(None);
        }
        self.searched_at.touch();
        self.follow_disk();
        let found = {
            let mut learned = self.learned.read();
            // Looked at under the lock a release sets it under: a search
            // never finds the records released without taking the
            // vectors back (else it would run the model on every record).
            if self.take_back.load(Ordering::SeqCst) {
                drop(learned);
                self.take_back_vectors();
                learned = self.learned.read();
            }
            match learned {
                Ok(learned) => search(Some(&learned)),
                Err(_) => search(None),
            }
        };
        self.keep_vectors(false);
        found
    }

    /// Writes the records' vectors if the model ran on a record since they
    /// were last written, and (unless `now`) the last write was
    /// [`KEEP_VECTORS_EVERY`] ago or more.
    fn keep_vectors(&self, now: bool) {
        let (Some(path), true) = (&self.path, self.enabled) else {
            return;
        };
        // Another search writing them: that write is this one's. A flush
        // (shutdown) waits for it instead, and writes what came after.
        let kept = if now {
            self.vectors_kept.lock().ok()
        } else {
            self.vectors_kept.try_lock().ok()
        };
        let Some(mut kept) = kept else {
            return;
        };
        if !now && kept.is_some_and(|at| at.elapsed() < KEEP_VECTORS_EVERY) {
            return;
        }
        // Most searches change nothing: no more work on their way out.
        if !self
            .learned
            .read()
            .is_ok_and(|learned| learned.has_vectors_to_keep())
        {
            return;
        }
        // Records cleared from outside (`tools learned --clear`) since the
        // last search: their words must not be written back.
        self.follow_disk();
        // Made under the records' lock, written outside it: a write of a
        // few megabytes must not hold up uses and searches.
        let file = match self.learned.read() {
            Ok(learned) => learned.vectors_to_keep(),
            Err(_) => None,
        };
        let Some(file) = file else {
            return;
        };
        let vectors = vectors_path(path);
        *kept = Some(Instant::now());
        if let Err(e) = file.write(&vectors) {
            tracing::warn!(tenant = %self.tenant, error = %e, "the records' vectors were not kept");
            return;
        }
        // Changed from outside since this process last read or wrote the
        // records (a clear while they were written): they may name what
        // was cleared. The next search makes them again.
        let outside = self
            .on_disk
            .lock()
            .map_or(true, |on_disk| modified(path) != *on_disk);
        if outside {
            self.forget_vectors();
            return;
        }
        if let Ok(learned) = self.learned.read() {
            learned.vectors_kept(file.generation);
        }
    }

    /// Drops what searches use (the records' vectors and their
    /// comparisons, megabytes for a full set) when no search ran for
    /// `idle`, after writing the vectors the last search made with a
    /// transformer, if not kept yet: an idle tenant's memory back, and its
    /// next search reads them instead of running the model again (only on
    /// records used after that last search). The records stay. Whether
    /// anything was dropped.
    pub fn release_if_idle(&self, idle: Duration) -> bool {
        if !self.due_for_release(idle) {
            return false;
        }
        self.keep_vectors(true);
        let Ok(mut learned) = self.learned.write() else {
            return false;
        };
        // A search since: not idle after all (it waits for this lock, and
        // noted its time before).
        if !self.due_for_release(idle) {
            return false;
        }
        // Set even when nothing was made (a tenant without records): not due
        // again until it searches, so the idle loop does no more work for it.
        self.take_back.store(true, Ordering::SeqCst);
        learned.release()
    }

    /// Whether searches ran with the records since the last release, the
    /// last of them `idle` ago or more: a cheap look before
    /// [`Learning::release_if_idle`], which may write.
    pub fn due_for_release(&self, idle: Duration) -> bool {
        self.enabled && !self.take_back.load(Ordering::SeqCst) && self.searched_at.idle_for(idle)
    }

    /// Offers the kept vectors to the next search, once (see
    /// `take_back`).
    fn take_back_vectors(&self) {
        let Ok(mut learned) = self.learned.write() else {
            return;
        };
        if !self.take_back.swap(false, Ordering::SeqCst) {
            return;
        }
        let Some(path) = &self.path else {
            return;
        };
        if let Err(e) = learned.load_vectors(&vectors_path(path)) {
            tracing::warn!(tenant = %self.tenant, error = %e, "the records' kept vectors are not used");
        }
    }

    /// Writes the records' vectors now if they changed since last written
    /// (at shutdown).
    pub fn flush_vectors(&self) {
        self.keep_vectors(true);
    }

    /// Removes the kept vectors (they name the records' words).
    fn forget_vectors(&self) {
        let Some(path) = &self.path else {
            return;
        };
        if let Err(e) = cem_catalog::learned::forget_vectors(&vectors_path(path)) {
            tracing::warn!(tenant = %self.tenant, error = %e, "the records' kept vectors were not removed");
        }
    }

    /// Whether the records are due to be read from the shared store (and,
    /// if so, they count as read now).
    pub fn pull_due(&self) -> bool {
        if !self.enabled {
            return false;
        }
        self.pulled.due_every(PULL_EVERY)
    }

    /// Replaces the records with `learned` (what the shared store holds).
    pub fn replace(&self, mut learned: Learned) {
        let none = learned.is_empty();
        if let Ok(mut mine) = self.learned.write() {
            learned.take_prepared_from(&mut mine);
            *mine = learned;
        }
        self.save();
        if none {
            // Cleared in the store: the kept vectors name their words (when
            // only some went, the next search's vectors replace them).
            let _writing = self.vectors_kept.lock();
            self.forget_vectors();
        }
    }

    /// Forgets every record, or those of `tool`; how many went.
    pub fn clear(&self, tool: Option<&str>) -> usize {
        self.follow_disk();
        let gone = self
            .learned
            .write()
            .map(|mut learned| learned.clear(tool))
            .unwrap_or(0);
        if gone > 0 {
            self.save();
            // The kept vectors name the records' words: forgotten with them
            // (the next search embeds the rest again), after any write of
            // them under way.
            let _writing = self.vectors_kept.lock();
            self.forget_vectors();
        }
        gone
    }

    /// Reads the file again if someone else changed it since this process
    /// last wrote or read it (`tools learned --clear` while serving).
    fn follow_disk(&self) {
        let Some(path) = &self.path else {
            return;
        };
        let Ok(mut on_disk) = self.on_disk.lock() else {
            return;
        };
        let now = modified(path);
        if now == *on_disk {
            return;
        }
        *on_disk = now;
        let mut fresh = read(path, &self.tenant);
        let none = fresh.is_empty();
        if let Ok(mut mine) = self.learned.write() {
            fresh.take_prepared_from(&mut mine);
            *mine = fresh;
        }
        if none {
            self.forget_vectors();
        }
    }

    /// Writes the records, at each change (atomically: a crash leaves the
    /// old file or the new one). A record is made once per search and tool,
    /// never per call in a loop, so writes follow an agent's steps.
    pub fn save(&self) {
        let Some(path) = &self.path else {
            return;
        };
        if !self.enabled {
            return;
        }
        let Ok(mut on_disk) = self.on_disk.lock() else {
            return;
        };
        let text = match self.learned.read() {
            Ok(learned) => serde_json::to_vec(&*learned),
            Err(_) => return,
        };
        let written = text.map_err(std::io::Error::other).and_then(|text| {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            let tmp = path.with_extension(format!("tmp{}", std::process::id()));
            std::fs::write(&tmp, text)?;
            std::fs::rename(&tmp, path)
        });
        match written {
            Ok(()) => *on_disk = modified(path),
            Err(e) => {
                tracing::warn!(tenant = %self.tenant, error = %e, "what search learned was not saved")
            }
        }
    }
}

impl Drop for Learning {
    /// A tenant let go (idle, or the server stopping) keeps what its
    /// searches embedded since the last write.
    fn drop(&mut self) {
        self.keep_vectors(true);
    }
}

/// Where the vectors of the records at `path` are kept.
fn vectors_path(path: &std::path::Path) -> PathBuf {
    path.with_file_name("learned-vectors.bin")
}

/// The file's modification time, if it is there.
fn modified(path: &std::path::Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// The records at `path`; a file that cannot be read as records is moved
/// aside (`.bad`) and said, and learning starts afresh.
fn read(path: &std::path::Path, tenant: &str) -> Learned {
    let text = match std::fs::read(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Learned::default(),
        Err(e) => {
            tracing::warn!(tenant = %tenant, error = %e, "what search learned cannot be read; starting afresh");
            return Learned::default();
        }
    };
    match serde_json::from_slice::<Learned>(&text) {
        Ok(mut learned) => {
            learned.prune(now());
            learned
        }
        Err(e) => {
            let aside = path.with_extension("json.bad");
            let _ = std::fs::rename(path, &aside);
            tracing::warn!(tenant = %tenant, error = %e,
                "what search learned is not readable; set aside as learned.json.bad, starting afresh");
            Learned::default()
        }
    }
}

/// `query` with every piece of personal data and every secret cut out: the
/// records keep the words of a need, never a value.
pub fn without_personal_data(query: &str) -> String {
    let query: String = query.chars().take(MAX_QUERY).collect();
    let mut out = String::with_capacity(query.len());
    let mut from = 0;
    for found in cem_pii::detect(&query) {
        out.push_str(&query[from..found.start]);
        out.push(' ');
        from = found.end;
    }
    out.push_str(&query[from..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_use_after_a_search_is_recorded_and_kept() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("search").join("learned.json");
        let learning = Learning::open(true, Some(path.clone()), "t");
        // No search yet: nothing to learn.
        assert_eq!(learning.used("s1", "git.git_log"), None);
        learning.searched("s1", "commit history for alice@example.com");
        // Another session's use does not count.
        assert_eq!(learning.used("s2", "git.git_log"), None);
        let words = learning.used("s1", "git.git_log");
        assert_eq!(words.as_deref().map(str::trim), Some("commit history for"));
        // A loop of calls after one search is one use.
        assert_eq!(learning.used("s1", "git.git_log"), None);
        assert_eq!(
            learning.with(|l| l.map(|l| l.list(now())[0].weight)),
            Some(1.0)
        );
        // Written at once, with no personal data.
        let text = std::fs::read_to_string(&path)?;
        assert!(
            text.contains("git.git_log") && !text.contains("alice"),
            "{text}"
        );
        // Another process (the CLI) clears the file while this one serves:
        // the next search reads it back instead of writing the old records.
        let cli = Learning::open(true, Some(path), "t");
        assert_eq!(cli.with(|l| l.map(Learned::len)), Some(1));
        // File times have a coarse grain on some file systems.
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!(cli.clear(Some("git.git_log")), 1);
        assert_eq!(learning.with(|l| l.map(Learned::len)), Some(0));
        learning.searched("s1", "commit history");
        learning.used("s1", "git.git_log");
        assert_eq!(cli.with(|l| l.map(Learned::len)), Some(1));
        Ok(())
    }

    #[test]
    fn off_records_nothing_and_a_bad_file_is_set_aside() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("learned.json");
        let off = Learning::open(false, Some(path.clone()), "t");
        off.searched("s", "commit history");
        assert_eq!(off.used("s", "git.git_log"), None);
        assert!(off.with(|l| l.is_none()));
        std::fs::write(&path, "not json")?;
        let fresh = Learning::open(true, Some(path.clone()), "t");
        assert_eq!(fresh.with(|l| l.map(Learned::len)), Some(0));
        assert!(dir.path().join("learned.json.bad").exists());
        Ok(())
    }

    /// Two git tools, ranked with `model` (by words alone without).
    fn git_catalog(model: Option<&'static cem_catalog::Model>) -> cem_catalog::Catalog {
        let entries: Vec<cem_catalog::Entry> = [
            ("git_log", "Shows the commit logs"),
            ("git_status", "Shows the working tree status"),
        ]
        .iter()
        .filter_map(|(name, description)| {
            let tool = serde_json::json!({"name": name, "description": description, "inputSchema": {"type": "object"}});
            cem_catalog::Entry::upstream("git", &tool, None)
        })
        .collect();
        match model {
            Some(model) => {
                let semantic = cem_catalog::Semantic::new(model, &entries, None);
                cem_catalog::Catalog::hybrid(entries, semantic)
            }
            None => cem_catalog::Catalog::new(entries),
        }
    }

    /// A search as `search_tools` makes it; how many tools it found.
    fn search(catalog: &cem_catalog::Catalog, learning: &Learning) -> Result<usize, String> {
        ranked(catalog, learning, "recent changes").map(|hits| hits.len())
    }

    /// A search for `query` as `search_tools` makes it: each hit's entry
    /// and score, bit for bit.
    fn ranked(
        catalog: &cem_catalog::Catalog,
        learning: &Learning,
        query: &str,
    ) -> Result<Vec<(usize, u32)>, String> {
        learning.with(|learned| {
            let learned = learned.ok_or("learning is off")?;
            let learning = cem_catalog::Learning {
                learned,
                now: now(),
            };
            Ok(catalog
                .search_learned(query, None, 2, learning)
                .iter()
                .map(|h| (h.index, h.score.to_bits()))
                .collect())
        })
    }

    /// Whether what searches use of the records is made and held.
    fn prepared(learning: &Learning) -> bool {
        learning
            .learned
            .read()
            .is_ok_and(|learned| learned.is_prepared())
    }

    /// What an idle tenant's searches made of its records goes, and its
    /// next search makes it again and ranks as before; a tenant that
    /// searched within the idle time, or never, keeps what it has.
    #[test]
    fn an_idle_tenants_search_state_goes_and_comes_back_the_same()
    -> Result<(), Box<dyn std::error::Error>> {
        let catalog = git_catalog(cem_catalog::builtin_model().and_then(Result::ok));
        let dir = tempfile::tempdir()?;
        let learning = Learning::open(true, Some(dir.path().join("learned.json")), "t");
        assert!(!learning.release_if_idle(Duration::ZERO), "never searched");
        learning.searched("s", "what happened in this repo lately");
        assert!(learning.used("s", "git.git_log").is_some());
        let before = ranked(&catalog, &learning, "recent repo happenings")?;
        assert!(prepared(&learning));
        assert!(!learning.release_if_idle(Duration::from_secs(3600)));
        assert!(prepared(&learning), "kept: it searched just now");
        assert!(learning.release_if_idle(Duration::ZERO));
        assert!(!prepared(&learning));
        assert!(
            !learning.due_for_release(Duration::ZERO),
            "not due again before it searches"
        );
        assert_eq!(
            learning.with(|l| l.map(Learned::len)),
            Some(1),
            "the records stay"
        );
        assert_eq!(
            ranked(&catalog, &learning, "recent repo happenings")?,
            before
        );
        assert!(prepared(&learning));
        // A tenant with no records makes nothing to drop: once looked at,
        // the idle loop leaves it alone until it searches again.
        let other = tempfile::tempdir()?;
        let empty = Learning::open(true, Some(other.path().join("learned.json")), "u");
        ranked(&catalog, &empty, "recent repo happenings")?;
        assert!(empty.due_for_release(Duration::ZERO));
        assert!(!empty.release_if_idle(Duration::ZERO), "nothing was made");
        assert!(!empty.due_for_release(Duration::ZERO));
        let off = Learning::open(false, Some(dir.path().join("learned.json")), "t");
        assert!(
            !off.release_if_idle(Duration::ZERO),
            "learning off holds nothing"
        );
        Ok(())
    }

    /// With the transformer, a tenant let go for idleness writes the
    /// vectors its searches made since the last write, and its next search
    /// reads them back instead of running the model again.
    #[test]
    fn an_idle_tenants_record_vectors_are_kept_before_they_go()
    -> Result<(), Box<dyn std::error::Error>> {
        let Some(model) = transformer() else {
            return Ok(());
        };
        let catalog = git_catalog(Some(model));
        let tmp = tempfile::tempdir()?;
        let vectors = tmp.path().join("learned-vectors.bin");
        let learning = Learning::open(true, Some(tmp.path().join("learned.json")), "t");
        learning.searched("s", "what happened in this repo lately");
        learning.used("s", "git.git_log");
        ranked(&catalog, &learning, "recent repo happenings")?;
        let first = inode(&vectors)?;
        learning.searched("s", "which files did I touch");
        learning.used("s", "git.git_status");
        let before = ranked(&catalog, &learning, "recent repo happenings")?;
        assert_eq!(inode(&vectors)?, first, "written again within a minute");
        assert!(learning.release_if_idle(Duration::ZERO));
        let both = inode(&vectors)?;
        assert_ne!(
            both, first,
            "the second record's vector is kept before it goes"
        );
        assert_eq!(
            ranked(&catalog, &learning, "recent repo happenings")?,
            before
        );
        drop(learning);
        assert_eq!(
            inode(&vectors)?,
            both,
            "the next search read them back: nothing embedded, nothing to write"
        );
        Ok(())
    }

    /// The file's identity: a write makes a new file and renames it.
    fn inode(path: &std::path::Path) -> std::io::Result<u64> {
        use std::os::unix::fs::MetadataExt;
        Ok(std::fs::metadata(path)?.ino())
    }

    /// The kept vectors are a cache: a bad file costs nothing but the
    /// time to embed again, a ranking without a transformer writes none
    /// (and removes one: `a_transformers_file_goes_once_the_built_in_model_ranks`),
    /// and records cleared (here, or in the shared store) take them along
    /// (they name the records' words), with what a crash left of one.
    #[test]
    fn kept_vectors_never_stop_learning_and_go_with_cleared_records()
    -> Result<(), Box<dyn std::error::Error>> {
        let catalog = git_catalog(cem_catalog::builtin_model().and_then(Result::ok));
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("learned.json");
        let vectors = dir.path().join("learned-vectors.bin");
        let learning = Learning::open(true, Some(path.clone()), "t");
        learning.searched("s", "commit history");
        assert!(learning.used("s", "git.git_log").is_some());
        search(&catalog, &learning)?;
        drop(learning);
        assert!(!vectors.exists(), "no transformer, no file");
        std::fs::write(&vectors, "cem-record-vectors 1\n\u{0}garbage")?;
        let learning = Learning::open(true, Some(path.clone()), "t");
        search(&catalog, &learning)?;
        assert_eq!(learning.with(|l| l.map(Learned::len)), Some(1));
        // However the ranking left it, a clear takes it and what a crash
        // left of one.
        std::fs::write(&vectors, "cem-record-vectors 1\n\u{0}garbage")?;
        std::fs::write(dir.path().join("learned-vectors.tmp99"), "a crash's")?;
        assert_eq!(learning.clear(None), 1);
        assert!(!vectors.exists());
        assert!(!dir.path().join("learned-vectors.tmp99").exists());
        // Cleared in the shared store.
        learning.searched("s", "commit history");
        learning.used("s", "git.git_log");
        std::fs::write(&vectors, "as if kept")?;
        learning.replace(Learned::default());
        assert!(!vectors.exists());
        Ok(())
    }

    /// The transformer, from `CEM_ONNX_MODEL_DIR` and `CEM_ONNX_RUNTIME`
    /// (`scripts/test` exports both, and `CEM_REQUIRE_TRANSFORMER`: then
    /// their absence fails the test rather than skip it).
    fn transformer() -> Option<&'static cem_catalog::Model> {
        let (Some(dir), Some(runtime)) = (
            std::env::var_os("CEM_ONNX_MODEL_DIR"),
            std::env::var_os("CEM_ONNX_RUNTIME"),
        ) else {
            assert!(
                std::env::var_os("CEM_REQUIRE_TRANSFORMER").is_none(),
                "CEM_REQUIRE_TRANSFORMER is set but CEM_ONNX_MODEL_DIR / CEM_ONNX_RUNTIME are not"
            );
            eprintln!(
                "CEM_ONNX_MODEL_DIR / CEM_ONNX_RUNTIME unset: nothing checked (scripts/test sets them)"
            );
            return None;
        };
        match cem_catalog::OnnxModel::load(dir.as_ref(), Some(runtime.as_ref()), 1) {
            Ok(model) => Some(Box::leak(Box::new(cem_catalog::Model::Onnx(model)))),
            Err(e) => panic!("{e}"),
        }
    }

    /// With the transformer: the first search writes the records' vectors,
    /// later ones at most once a minute, letting the tenant go (or
    /// `flush_vectors` at shutdown) writes the rest, and a restarted
    /// tenant's search embeds nothing (and so writes nothing).
    #[test]
    fn a_transformers_record_vectors_outlive_the_process() -> Result<(), Box<dyn std::error::Error>>
    {
        let Some(model) = transformer() else {
            return Ok(());
        };
        let catalog = git_catalog(Some(model));
        let tmp = tempfile::tempdir()?;
        let path = tmp.path().join("learned.json");
        let vectors = tmp.path().join("learned-vectors.bin");
        let learning = Learning::open(true, Some(path.clone()), "t");
        learning.searched("s", "what happened in this repo lately");
        learning.used("s", "git.git_log");
        assert_eq!(search(&catalog, &learning)?, 2);
        let first = (inode(&vectors)?, std::fs::read(&vectors)?);
        learning.searched("s", "which files did I touch");
        learning.used("s", "git.git_status");
        search(&catalog, &learning)?;
        assert_eq!(
            (inode(&vectors)?, std::fs::read(&vectors)?),
            first,
            "written again within a minute"
        );
        learning.flush_vectors();
        let both = (inode(&vectors)?, std::fs::read(&vectors)?);
        assert!(
            both.0 != first.0 && both.1.len() > first.1.len(),
            "the flush keeps the second record's"
        );
        drop(learning);
        assert_eq!(inode(&vectors)?, both.0, "nothing new to keep when let go");
        let restarted = Learning::open(true, Some(path), "t");
        search(&catalog, &restarted)?;
        drop(restarted);
        assert_eq!(
            inode(&vectors)?,
            both.0,
            "the restarted tenant's search embedded nothing, so wrote nothing"
        );
        // Restarted without the transformer: the file names words and is
        // of no use, so it goes.
        let without = Learning::open(true, Some(tmp.path().join("learned.json")), "t");
        search(&git_catalog(None), &without)?;
        assert!(!vectors.exists());
        Ok(())
    }

    #[test]
    fn personal_data_and_secrets_are_cut_from_queries() {
        let clean = without_personal_data(
            "email bob@corp.example about card 4111 1111 1111 1111 with key sk-live-abcdefghijklmnopqrstuvwx",
        );
        assert!(
            !clean.contains("bob@") && !clean.contains("4111"),
            "{clean}"
        );
        assert!(!clean.contains("abcdefghijkl"), "{clean}");
        assert!(clean.contains("email") && clean.contains("card"), "{clean}");
    }
}
