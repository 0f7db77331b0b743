//! The shapes of tool results, as the server keeps them for one tenant.
//!
//! When code gets a result from a tool that declares no `outputSchema`,
//! its shape (types and field names, never a value: see `cem_shapes`) is
//! recorded here, in `<tenant>/shapes/learned.json`. The tenant's catalog
//! then gives the tool that shape as its output schema: its definition,
//! a search at `full` and `tools show` say what it returns and where that
//! came from, and its result's field names are words a search matches.
//!
//! The Python wrappers are one directory every tenant mounts, so they are
//! typed from the local tenant's shapes only (the operator's own use and
//! `tools discover`): one person's results never shape what another reads.
//! A tenant's own definitions use its shapes first and the local ones after.
//!
//! A shape that changed (a tool's first, or one widened by a result that
//! did not fit) wakes the catalogs that show it (see
//! [`Shapes::changed`]), which rebuild and rewrite the wrappers.
//!
//! `catalog.learn_shapes: false` records nothing and shows nothing.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime};

use cem_catalog::{Entry, EntryKind};
use cem_shapes::{Learned, Recorded, ShapeBook, Source};
use serde_json::Value;

/// The key a learned schema carries (`cem_shapes`' mark): a schema with it
/// was learned or probed, one without it was declared.
pub const MARK: &str = "x-cem-shape";

/// How often at most the book is written when only its counts changed (a
/// loop of calls); a changed shape is written at once.
const SAVE_COUNTS_EVERY: Duration = Duration::from_secs(5);

/// One tenant's learned shapes.
#[derive(Debug)]
pub struct Shapes {
    enabled: bool,
    /// Where the book is kept (None: in memory only).
    path: Option<PathBuf>,
    book: RwLock<ShapeBook>,
    /// The local tenant's shapes, shown after this tenant's own.
    fallback: Option<Arc<Shapes>>,
    /// Bumped at each change of a shape (not of a count).
    generation: AtomicU64,
    changed: tokio::sync::Notify,
    /// The file's modification time as last written or read here; another
    /// means someone else (the CLI) changed it.
    on_disk: Mutex<Option<SystemTime>>,
    /// When counts were last written, and whether some are not.
    saved: Mutex<(Option<Instant>, bool)>,
    /// What other nodes learned, by tool, from the shared store (each
    /// node's own observations, merged): shown with this node's own.
    others: RwLock<BTreeMap<String, Learned>>,
    /// When the other nodes' shapes were last read.
    pulled: crate::last_use::LastUse,
    /// The tenant's id, as the shared store keys it.
    id: String,
    /// The tenant as log lines name it (a digest).
    tenant: String,
}

/// How often the other nodes' shapes are read from the shared store.
pub const PULL_EVERY: Duration = Duration::from_secs(30);

impl Shapes {
    /// The shapes at `path` (none yet, or an unreadable file: said, set
    /// aside, never fatal).
    pub fn open(enabled: bool, path: Option<PathBuf>, tenant: &str) -> Self {
        let tenant_id = tenant;
        let tenant = cem_config::tenant_digest(tenant);
        let book = match (&path, enabled) {
            (Some(path), true) => read(path, &tenant),
            _ => ShapeBook::new(),
        };
        Shapes {
            enabled,
            on_disk: Mutex::new(path.as_deref().and_then(modified)),
            path,
            book: RwLock::new(book),
            fallback: None,
            generation: AtomicU64::new(0),
            changed: tokio::sync::Notify::new(),
            saved: Mutex::new((None, false)),
            others: RwLock::new(BTreeMap::new()),
            pulled: Default::default(),
            id: tenant_id.to_string(),
            tenant,
        }
    }

    /// Shows `local`'s shapes for the tools this tenant has none of.
    pub fn falling_back_to(mut self, local: Arc<Shapes>) -> Self {
        self.fallback = Some(local);
        self
    }

    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// The local tenant's shapes this one falls back to.
    pub fn fallback(&self) -> Option<&Arc<Shapes>> {
        self.fallback.as_ref()
    }

    /// Woken at each change of a shape, here or in the fallback.
    pub fn changed(&self) -> &tokio::sync::Notify {
        &self.changed
    }

    /// The generation of this tenant's shapes and its fallback's: another
    /// value means a catalog built before shows old shapes.
    pub fn generation(&self) -> u64 {
        self.reload_if_changed();
        let own = self.generation.load(Ordering::SeqCst);
        own + self.fallback.as_ref().map_or(0, |f| f.generation())
    }

    /// `value` came back from `tool` (`server.tool`).
    pub fn record(&self, tool: &str, value: &Value, source: Source) -> Recorded {
        if !self.enabled {
            return Recorded::Same;
        }
        self.reload_if_changed();
        let recorded = match self.book.write() {
            Ok(mut book) => book.record(tool, value, source),
            Err(_) => return Recorded::Same,
        };
        if recorded.changed() {
            tracing::info!(tool, tenant = %self.tenant, change = ?recorded, "a tool's result shape was learned; its wrapper and definition follow");
            self.generation.fetch_add(1, Ordering::SeqCst);
            self.save(true);
            self.changed.notify_waiters();
        } else if recorded == Recorded::Full {
            tracing::warn!(tool, tenant = %self.tenant, max = cem_shapes::MAX_TOOLS, "the learned shapes are full; this tool's is not learned (tools shapes --clear forgets them)");
        } else {
            self.save(false);
        }
        recorded
    }

    /// What is known of `tool`'s results: this tenant's (seen by this node
    /// and the others), else the local tenant's.
    pub fn learned(&self, tool: &str) -> Option<Learned> {
        if !self.enabled {
            return None;
        }
        self.reload_if_changed();
        let own = self.book.read().ok()?.get(tool).cloned();
        let other = self.others.read().ok()?.get(tool).cloned();
        let here = match (own, other) {
            (Some(own), Some(other)) => Some(own.merged(&other)),
            (own, other) => own.or(other),
        };
        here.or_else(|| self.fallback.as_ref()?.learned(tool))
    }

    /// What this node itself learned of `tool` (what it shares with the
    /// other nodes).
    pub fn own(&self, tool: &str) -> Option<Learned> {
        self.book.read().ok()?.get(tool).cloned()
    }

    /// `tool`'s learned shape as JSON Schema (marked with [`MARK`]).
    pub fn schema(&self, tool: &str) -> Option<Value> {
        self.learned(tool).map(|learned| learned.schema())
    }

    /// The tenant's id, as the shared store keys it.
    pub fn tenant_id(&self) -> &str {
        &self.id
    }

    /// Whether the other nodes' shapes are due to be read again (and, if
    /// so, marks them read now).
    pub fn pull_due(&self) -> bool {
        if !self.enabled {
            return false;
        }
        self.pulled.due_every(PULL_EVERY)
    }

    /// Takes in what the other nodes learned (their rows, each sanitized):
    /// a changed shape rebuilds the catalogs that show it.
    pub fn take_others(&self, rows: impl IntoIterator<Item = (String, Learned)>) {
        let mut merged: BTreeMap<String, Learned> = BTreeMap::new();
        for (tool, learned) in rows {
            let learned = learned.sanitized();
            match merged.get_mut(&tool) {
                Some(held) => *held = held.merged(&learned),
                None => {
                    if merged.len() < cem_shapes::MAX_TOOLS {
                        merged.insert(tool, learned);
                    }
                }
            }
        }
        let Ok(mut others) = self.others.write() else {
            return;
        };
        let shapes_differ = others.len() != merged.len()
            || others
                .iter()
                .zip(merged.iter())
                .any(|((a, x), (b, y))| a != b || x.shape != y.shape);
        *others = merged;
        drop(others);
        if shapes_differ {
            self.generation.fetch_add(1, Ordering::SeqCst);
            self.changed.notify_waiters();
        }
    }

    /// Gives each upstream entry that declares no output schema its learned
    /// one, and its result's field names as keywords (words search
    /// matches). Learned schemas already there are replaced.
    pub fn overlay(&self, entries: &mut [Entry]) {
        for entry in entries.iter_mut().filter(|e| e.kind == EntryKind::Upstream) {
            if entry.output_schema.as_ref().is_some_and(is_learned) {
                entry.output_schema = None;
            }
            if entry.output_schema.is_some() {
                continue;
            }
            let tool = format!("{}.{}", entry.category, entry.name);
            let Some(learned) = self.learned(&tool) else {
                continue;
            };
            entry.output_schema = self.schema(&tool);
            for field in learned.shape.field_names() {
                if !entry.keywords.contains(&field) {
                    entry.keywords.push(field);
                }
            }
        }
    }

    /// Every shape this tenant learned (not the fallback's), by tool; of
    /// `server`'s tools when given.
    pub fn list(&self, server: Option<&str>) -> Vec<(String, Learned)> {
        self.reload_if_changed();
        let Ok(book) = self.book.read() else {
            return Vec::new();
        };
        book.tools()
            .filter(|(tool, _)| server.is_none_or(|s| tool.split_once('.').map(|t| t.0) == Some(s)))
            .map(|(tool, learned)| (tool.to_string(), learned.clone()))
            .collect()
    }

    /// Forgets this tenant's shapes (of `server`'s tools when given); how
    /// many went.
    pub fn forget(&self, server: Option<&str>) -> usize {
        self.reload_if_changed();
        let gone = match self.book.write() {
            Ok(mut book) => book.forget(server),
            Err(_) => 0,
        };
        if gone > 0 {
            self.generation.fetch_add(1, Ordering::SeqCst);
            self.save(true);
            self.changed.notify_waiters();
        }
        gone
    }

    /// Whether counts changed that the file does not hold yet.
    pub fn unsaved(&self) -> bool {
        self.saved.lock().is_ok_and(|s| s.1)
    }

    /// Writes the book now if it holds counts the file does not.
    pub fn flush(&self) {
        if self.unsaved() {
            self.save(true);
        }
    }

    /// Writes the book: at once when `now`, else at most every
    /// [`SAVE_COUNTS_EVERY`].
    fn save(&self, now: bool) {
        let Some(path) = &self.path else {
            return;
        };
        let Ok(mut saved) = self.saved.lock() else {
            return;
        };
        let due = now || saved.0.is_none_or(|at| at.elapsed() >= SAVE_COUNTS_EVERY);
        if !due {
            saved.1 = true;
            return;
        }
        let written = match self.book.read() {
            Ok(book) => book.save(path),
            Err(_) => return,
        };
        match written {
            Ok(()) => {
                *saved = (Some(Instant::now()), false);
                if let Ok(mut on_disk) = self.on_disk.lock() {
                    *on_disk = modified(path);
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, tenant = %self.tenant, "the learned shapes were not saved; they hold until the server stops")
            }
        }
    }

    /// Reads the file again when someone else wrote it (`tools shapes
    /// --clear`, `tools discover` while the server runs).
    fn reload_if_changed(&self) {
        let (Some(path), true) = (&self.path, self.enabled) else {
            return;
        };
        let now = modified(path);
        let Ok(mut on_disk) = self.on_disk.lock() else {
            return;
        };
        if *on_disk == now {
            return;
        }
        *on_disk = now;
        let fresh = read(path, &self.tenant);
        if let Ok(mut book) = self.book.write()
            && *book != fresh
        {
            *book = fresh;
            self.generation.fetch_add(1, Ordering::SeqCst);
            self.changed.notify_waiters();
        }
    }
}

/// Whether `schema` was learned or probed (not declared).
pub fn is_learned(schema: &Value) -> bool {
    schema.get(MARK).is_some()
}

fn read(path: &std::path::Path, tenant: &str) -> ShapeBook {
    match ShapeBook::load(path) {
        Ok(book) => book,
        Err(e) => {
            tracing::warn!(error = %e, tenant, "the learned shapes are set aside; tools show no learned return types until they are learned again");
            let aside = path.with_extension("json.unreadable");
            let _ = std::fs::rename(path, aside);
            ShapeBook::new()
        }
    }
}

fn modified(path: &std::path::Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

    fn entry(server: &str, name: &str) -> Entry {
        Entry {
            kind: EntryKind::Upstream,
            category: server.into(),
            name: name.into(),
            ..Entry::default()
        }
    }

    #[test]
    fn a_learned_shape_types_the_entry_and_outlives_the_server() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("shapes").join("learned.json");
        let shapes = Shapes::open(true, Some(path.clone()), "local");
        let value = json!({"commits": [{"sha": "abc", "author": "Ann Lee <ann@example.com>"}]});
        assert_eq!(
            shapes.record("git.log", &value, Source::Learned),
            Recorded::First
        );
        let again = Shapes::open(true, Some(path), "local");
        let mut entries = vec![entry("git", "log"), entry("git", "status")];
        again.overlay(&mut entries);
        let schema = entries[0].output_schema.clone().ok_or("no schema")?;
        assert_eq!(schema[MARK]["source"], "learned");
        assert!(entries[0].keywords.contains(&"commits".to_string()));
        assert!(entries[0].keywords.contains(&"author".to_string()));
        assert!(entries[1].output_schema.is_none());
        let text = std::fs::read_to_string(dir.path().join("shapes").join("learned.json"))?;
        assert!(!text.contains("ann@example.com") && !text.contains("abc"));
        Ok(())
    }

    #[test]
    fn a_declared_schema_is_never_replaced() {
        let shapes = Shapes::open(true, None, "local");
        shapes.record("git.log", &json!({"a": 1}), Source::Learned);
        let mut entries = vec![entry("git", "log")];
        entries[0].output_schema = Some(json!({"type": "object"}));
        shapes.overlay(&mut entries);
        assert_eq!(entries[0].output_schema, Some(json!({"type": "object"})));
    }

    #[test]
    fn a_tenant_shows_its_own_shape_before_the_local_one() {
        let local = Arc::new(Shapes::open(true, None, "local"));
        local.record("git.log", &json!({"local_field": 1}), Source::Probed);
        local.record("git.status", &json!({"clean": true}), Source::Probed);
        let tenant = Shapes::open(true, None, "ann").falling_back_to(local.clone());
        tenant.record("git.log", &json!({"own_field": 1}), Source::Learned);
        let mut entries = vec![entry("git", "log"), entry("git", "status")];
        tenant.overlay(&mut entries);
        assert!(entries[0].keywords.contains(&"own_field".to_string()));
        assert!(!entries[0].keywords.contains(&"local_field".to_string()));
        assert!(entries[1].keywords.contains(&"clean".to_string()));
        // The local tenant never sees what the other learned.
        let mut local_entries = vec![entry("git", "log")];
        local.overlay(&mut local_entries);
        assert!(!local_entries[0].keywords.contains(&"own_field".to_string()));
    }

    #[test]
    fn another_nodes_shapes_are_counted_once_however_often_they_are_read() {
        let here = Shapes::open(true, None, "ann");
        here.record("git.log", &json!({"sha": "a"}), Source::Learned);
        let there = Shapes::open(true, None, "ann");
        there.record(
            "git.log",
            &json!({"sha": "b", "author": "x"}),
            Source::Learned,
        );
        there.record("git.show", &json!({"diff": "d"}), Source::Learned);
        let rows: Vec<(String, Learned)> = there.list(None);
        let before = here.generation();
        for _ in 0..3 {
            here.take_others(rows.clone());
        }
        let learned = here
            .learned("git.log")
            .map(|l| (l.calls, l.shape.field_names()));
        assert_eq!(
            learned,
            Some((2, vec!["author".to_string(), "sha".to_string()]))
        );
        assert!(here.learned("git.show").is_some());
        // Only the first read changed anything.
        assert_eq!(here.generation(), before + 1);
        // What this node shares is what it saw itself.
        assert_eq!(here.own("git.log").map(|l| l.calls), Some(1));
    }

    #[test]
    fn off_records_and_shows_nothing() {
        let shapes = Shapes::open(false, None, "local");
        shapes.record("git.log", &json!({"a": 1}), Source::Learned);
        let mut entries = vec![entry("git", "log")];
        shapes.overlay(&mut entries);
        assert!(entries[0].output_schema.is_none());
        assert!(shapes.list(None).is_empty());
    }

    #[test]
    fn a_clear_by_another_process_is_read_back() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("learned.json");
        let server = Shapes::open(true, Some(path.clone()), "local");
        server.record("git.log", &json!({"a": 1}), Source::Learned);
        let before = server.generation();
        // The CLI's `tools shapes --clear`, a second later (file times are
        // coarse on some file systems).
        std::thread::sleep(Duration::from_millis(1100));
        let cli = Shapes::open(true, Some(path), "local");
        assert_eq!(cli.forget(None), 1);
        assert!(server.learned("git.log").is_none());
        assert!(server.generation() > before);
        Ok(())
    }
}
