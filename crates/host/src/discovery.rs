//! The catalog as the server keeps it: built on first use from the
//! upstream servers' tool lists (disk cache first) and the static registry,
//! and rebuilt when an upstream says its tools changed.

use std::sync::Arc;

use cem_catalog::{Catalog, Entry, EntryKind};
use cem_store::{SkillMeta, SkillStore};
use cem_upstream::Manager;
use tokio::sync::RwLock;

/// How long a search waits for the upstreams' tool lists (the first start
/// of a server; later starts read the disk cache).
const LIST_WAIT: std::time::Duration = std::time::Duration::from_secs(8);

/// How the catalog ranks, and if only by words, why.
#[derive(Debug, Clone)]
pub enum Ranking {
    /// Words and meaning, with this model.
    Hybrid(&'static cem_catalog::Model),
    /// Words and meaning with the built-in model, because the transformer
    /// the configuration names (`search.model`) could not be loaded: why.
    Degraded(&'static cem_catalog::Model, String),
    /// Words only, for the reason given.
    Lexical(String),
}

impl Ranking {
    /// What the configuration asks and this build can do: hybrid unless
    /// `search.semantic` is off, the binary has no model, or it does not
    /// load (said, never silent). With `search.model`, that transformer;
    /// when it does not load, the built-in model, said as loudly.
    pub fn from_config(config: &cem_config::SearchConfig) -> Self {
        if !config.semantic {
            let ignored = if config.model.is_some() {
                "; search.model is ignored with it"
            } else {
                ""
            };
            return Ranking::Lexical(format!(
                "search.semantic is off (\"search\": {{\"semantic\": true}}, the default, turns meaning on){ignored}"
            ));
        }
        let transformer = config
            .model
            .as_deref()
            .map(|dir| transformer(dir, config.onnx_runtime.as_deref(), config.onnx_threads));
        if let Some(Ok(model)) = transformer {
            return Ranking::Hybrid(model);
        }
        let builtin = match cem_catalog::builtin_model() {
            Some(Ok(model)) => Ok(model),
            Some(Err(e)) => Err(format!("the built-in embedding model is damaged: {e}")),
            None => {
                Err("this binary was built without the embedding model (feature `semantic`)".into())
            }
        };
        match (transformer, builtin) {
            (Some(Err(why)), Ok(model)) => Ranking::Degraded(model, why),
            (Some(Err(why)), Err(also)) => Ranking::Lexical(format!("{why}; and {also}")),
            (_, Ok(model)) => Ranking::Hybrid(model),
            (_, Err(why)) => Ranking::Lexical(why),
        }
    }

    /// The model searches rank with, if any.
    pub fn model(&self) -> Option<&'static cem_catalog::Model> {
        match self {
            Ranking::Hybrid(model) | Ranking::Degraded(model, _) => Some(model),
            Ranking::Lexical(_) => None,
        }
    }

    /// One line for `doctor` and the logs.
    pub fn describe(&self) -> String {
        match self {
            Ranking::Hybrid(model) if model.failures() > 0 => format!(
                "by words and meaning (model {}), but it failed to embed {} text(s), which rank by \
                 their words alone: see the server's log",
                model.name(),
                model.failures()
            ),
            Ranking::Hybrid(model) => format!("by words and meaning (model {})", model.name()),
            Ranking::Degraded(model, why) => format!(
                "by words and meaning with the built-in model {}, NOT the transformer search.model names: {why}",
                model.name()
            ),
            Ranking::Lexical(why) => format!("by words only: {why}"),
        }
    }
}

/// The transformer in `dir`, run by the ONNX Runtime library `runtime`:
/// loaded once per process (each later configuration naming the same
/// directory gets the same model, whatever library and threads it names:
/// ONNX Runtime is loaded once a process), and kept for the process's life.
fn transformer(
    dir: &std::path::Path,
    runtime: Option<&std::path::Path>,
    threads: usize,
) -> Result<&'static cem_catalog::Model, String> {
    type Loaded = Vec<(std::path::PathBuf, usize, &'static cem_catalog::Model)>;
    static LOADED: std::sync::Mutex<Loaded> = std::sync::Mutex::new(Vec::new());
    let mut loaded = LOADED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((_, loaded_threads, model)) = loaded.iter().find(|(d, _, _)| d == dir) {
        // A second session would hold another copy of the weights for the
        // process's life: the first one stays.
        if *loaded_threads != threads {
            tracing::warn!(dir = %dir.display(), running = *loaded_threads, asked = threads,
                "search.onnx_threads changed: the model already runs on its first setting until the server restarts");
        }
        return Ok(model);
    }
    let model = cem_catalog::OnnxModel::load(dir, runtime, threads)
        .map(|m| &*Box::leak(Box::new(cem_catalog::Model::Onnx(m))))
        .map_err(|e| e.to_string());
    match &model {
        Ok(m) => {
            tracing::info!(model = m.name(), dir = %dir.display(), "search ranks with a sentence transformer")
        }
        Err(e) => {
            tracing::error!(dir = %dir.display(), "search.model does not load, ranking with the built-in model: {e}")
        }
    }
    // A model that loaded is kept; one that did not is tried again by the
    // next configuration that names it (a path fixed, a library installed).
    if let Ok(m) = model {
        loaded.push((dir.to_path_buf(), threads, m));
    }
    model
}

/// One built catalog and the servers whose tools could not be had.
pub struct Built {
    pub catalog: Catalog,
    pub unavailable: Vec<(String, String)>,
}

/// The last catalog any tenant of this server built without skills, for
/// the others to share: a person with no skill of their own searches the
/// same entries as every other such person (the servers' tools and the
/// registry), and one copy of them, their word index and their vectors
/// (16 MB over 3,000 tools) serves them all. Held weakly: it goes with
/// the last tenant holding it.
#[derive(Debug, Default)]
pub struct SharedBuilds {
    last: std::sync::Mutex<std::sync::Weak<Built>>,
    /// One build of a catalog without skills at a time: tenants coming
    /// back together after a change of the lists take the first one's
    /// build instead of each making a copy.
    building: tokio::sync::Mutex<()>,
    /// One write of the wrappers (which every tenant mounts) at a time.
    wrappers: tokio::sync::Mutex<()>,
}

impl SharedBuilds {
    /// The shared catalog, if one is held and made of exactly `entries`
    /// with the same servers missing.
    fn find(&self, entries: &[Entry], unavailable: &[(String, String)]) -> Option<Arc<Built>> {
        let built = self.last.lock().ok()?.upgrade()?;
        (built.catalog.entries() == entries && built.unavailable == unavailable).then_some(built)
    }

    fn offer(&self, built: &Arc<Built>) {
        if let Ok(mut shared) = self.last.lock() {
            *shared = Arc::downgrade(built);
        }
    }
}

/// Where a tenant's Python wrappers are written and what checks them.
#[derive(Debug, Clone)]
pub struct Wrappers {
    /// `<dir>/servers/...`.
    pub dir: std::path::PathBuf,
    /// The interpreter the sandbox runs (`sandbox.python`): each changed
    /// module is compiled by it before it is put in place.
    pub python: std::path::PathBuf,
}

/// How long after a shape changed the catalog waits for more changes
/// before it rebuilds.
const SHAPES_SETTLE: std::time::Duration = std::time::Duration::from_millis(200);

pub struct CatalogService {
    manager: Arc<Manager>,
    registry: Vec<Entry>,
    /// Where the Python wrappers go, refreshed after every build so
    /// sandboxed code can import what it can call.
    wrappers: Option<Wrappers>,
    /// Saved skills, searchable beside the tools (category `skills`).
    skills: Option<SkillStore>,
    /// The skill store's generation the current catalog was built from.
    skills_seen: std::sync::Mutex<String>,
    current: RwLock<Option<Arc<Built>>>,
    /// Set by [`CatalogService::watch_changes`] (the MCP server): only then
    /// is a search's wait for slow servers bounded, since only then does
    /// their late answer rebuild the catalog. The CLI waits for them all.
    watching: std::sync::atomic::AtomicBool,
    /// Why a server reported as still starting did not list its tools, once
    /// its listing ended in an error after the search stopped waiting.
    late_failures: Arc<std::sync::Mutex<std::collections::HashMap<String, String>>>,
    /// Where a tenant's catalog writes the wrappers of a server its
    /// person signs in to, listed as them (the local one writes the rest).
    import_wrappers: std::sync::OnceLock<Wrappers>,
    /// A tenant's own manager: the servers each person signs in to are
    /// listed with it, with the person's credential, not the operator's.
    personal: std::sync::OnceLock<Arc<Manager>>,
    /// Servers the current catalog lacks until this person signs in: a
    /// search checks whether they have since (on any node), and rebuilds.
    /// With the sign-in held then (its `updated_at`): one that did not
    /// work (revoked, refused) counts only once it has changed.
    awaiting_sign_in: std::sync::Mutex<Vec<(String, Option<u64>)>>,
    /// Servers whose listing as this person outlasted a search's wait:
    /// it goes on, and the next search takes its tools in.
    late_personal: std::sync::Mutex<Vec<String>>,
    ranking: Ranking,
    /// Where entries' vectors are cached (`<data>/cache/vectors`).
    vector_cache: Option<std::path::PathBuf>,
    /// Catalogs without skills, shared by every tenant of the server.
    shared: Arc<SharedBuilds>,
    /// When the catalog was last asked for (see
    /// [`CatalogService::release_if_idle`]).
    used_at: crate::last_use::LastUse,
    /// The tenant's learned result shapes, given to the entries it shows,
    /// and the local tenant's, which type the wrappers every tenant mounts.
    shapes: std::sync::OnceLock<(Arc<crate::shapes::Shapes>, Arc<crate::shapes::Shapes>)>,
    /// The shapes' generation the current catalog was built with.
    shapes_seen: std::sync::atomic::AtomicU64,
}

impl CatalogService {
    pub fn new(
        manager: Arc<Manager>,
        registry: Vec<Entry>,
        wrappers: Option<Wrappers>,
        skills: Option<SkillStore>,
        ranking: Ranking,
        vector_cache: Option<std::path::PathBuf>,
        shared: Arc<SharedBuilds>,
    ) -> Self {
        Self {
            manager,
            registry,
            wrappers,
            skills,
            skills_seen: std::sync::Mutex::new(String::new()),
            current: RwLock::new(None),
            watching: std::sync::atomic::AtomicBool::new(false),
            late_failures: Arc::default(),
            import_wrappers: std::sync::OnceLock::new(),
            personal: std::sync::OnceLock::new(),
            awaiting_sign_in: std::sync::Mutex::new(Vec::new()),
            late_personal: std::sync::Mutex::new(Vec::new()),
            ranking,
            vector_cache,
            shared,
            used_at: Default::default(),
            shapes: std::sync::OnceLock::new(),
            shapes_seen: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Shows `own` learned shapes in this catalog's entries, and types the
    /// wrappers it writes with `wrappers` (the local tenant's).
    pub fn learns_shapes_from(
        &self,
        own: Arc<crate::shapes::Shapes>,
        wrappers: Arc<crate::shapes::Shapes>,
    ) {
        let _ = self.shapes.set((own, wrappers));
    }

    /// Whether shapes changed since the current catalog was built.
    fn shapes_stale(&self) -> bool {
        self.shapes.get().is_some_and(|(own, _)| {
            own.generation() != self.shapes_seen.load(std::sync::atomic::Ordering::SeqCst)
        })
    }

    /// The static registry's entries.
    pub fn registry(&self) -> &[Entry] {
        &self.registry
    }

    /// How searches rank.
    pub fn ranking(&self) -> &Ranking {
        &self.ranking
    }

    /// The catalogs without skills this service shares with others.
    pub fn shared_builds(&self) -> &Arc<SharedBuilds> {
        &self.shared
    }

    /// A catalog of `entries`, with their vectors when ranking by meaning
    /// (read from the cache, else computed). On a blocking thread: with
    /// thousands of tools the index and the vectors take a good part of a
    /// second, and the cache is files.
    async fn catalog_of(&self, entries: Vec<Entry>) -> Catalog {
        let model = self.ranking.model();
        let cache = self.vector_cache.clone();
        let build = move || match model {
            Some(model) => {
                let semantic = cem_catalog::Semantic::new(model, &entries, cache.as_deref());
                Catalog::hybrid(entries, semantic)
            }
            None => Catalog::new(entries),
        };
        match tokio::task::spawn_blocking(build).await {
            Ok(catalog) => catalog,
            // Only a panic (a bug) gets here: an empty catalog, said loudly,
            // rather than a dead server.
            Err(e) => {
                tracing::error!(error = %e, "building the tool catalog failed; it is empty until the next build");
                Catalog::new(Vec::new())
            }
        }
    }

    /// Writes wrappers for the tools known from the disk cache, without
    /// starting any upstream (called at start-up).
    pub async fn write_cached_wrappers(&self) {
        let _writing = self.shared.wrappers.lock().await;
        self.write_wrappers_locked(self.listed_entries()).await;
    }

    /// Every enabled server's tools read so far (this run's lists, else the
    /// disk cache), asking no server.
    fn listed_entries(&self) -> Vec<Entry> {
        self.manager
            .servers()
            .filter(|u| !u.config.disabled)
            .filter_map(|u| {
                let name = &u.config.name;
                self.manager
                    .known_tools(name)
                    .or_else(|| self.manager.cached_tools(name))
                    .map(|tools| (name.clone(), tools))
            })
            .flat_map(|(server, tools)| {
                let instructions = self.manager.instructions(&server);
                tools
                    .into_iter()
                    .map(move |t| upstream_entry(&server, t, instructions.clone()))
            })
            .collect()
    }

    /// Code imported `servers.<server>` before any wrappers of it were
    /// written (a fresh data directory, a server just configured): lists its
    /// tools, starting it if needed, and writes the wrappers of every server
    /// known so far (writing one alone would drop the others). Returns the
    /// server's configured name.
    pub async fn ensure_wrappers(&self, server: &str) -> Result<String, String> {
        self.ensure_wrappers_listed_by(server, None).await
    }

    /// Like [`CatalogService::ensure_wrappers`], listing `server` with
    /// `personal` (the tenant's own manager) when given: a server each
    /// person signs in to lists with the person's credential.
    pub async fn ensure_wrappers_listed_by(
        &self,
        server: &str,
        personal: Option<&Manager>,
    ) -> Result<String, String> {
        let upstream = self.manager.get(server).map_err(|e| e.to_string())?;
        let name = upstream.config.name.clone();
        let lister = personal.unwrap_or(&self.manager);
        // Listing it keeps its tools in memory, where listed_entries finds them.
        let tools = lister
            .tools(&name, false)
            .await
            .map_err(|e| format!("cannot list the tools of '{name}': {e}"))?;
        let mut entries = self.listed_entries();
        if personal.is_some() {
            entries.retain(|e| e.category != name || e.kind != EntryKind::Upstream);
            let instructions = lister.instructions(&name);
            entries.extend(
                tools
                    .into_iter()
                    .map(|t| upstream_entry(&name, t, instructions.clone())),
            );
        }
        let _writing = self.shared.wrappers.lock().await;
        let target = self
            .wrappers
            .clone()
            .or_else(|| self.import_wrappers.get().cloned());
        self.write_wrappers_to(target, entries).await;
        Ok(name)
    }

    /// Lets this (a tenant's) catalog write the wrappers of a server its
    /// person signs in to, into `wrappers`.
    pub fn writes_imports_to(&self, wrappers: Wrappers) {
        let _ = self.import_wrappers.set(wrappers);
    }

    /// Makes this (a tenant's) catalog list the servers each person signs
    /// in to with `personal`, the tenant's own manager.
    pub fn lists_sign_ins_with(&self, personal: Arc<Manager>) {
        let _ = self.personal.set(personal);
    }

    /// The manager that lists `server` for this catalog's person, when it
    /// is not the shared one: a server each person signs in to.
    fn personal_for(&self, server: &str) -> Option<&Arc<Manager>> {
        let personal = self.personal.get()?;
        let per_person = crate::signin::takes_sign_in(personal, server)
            && personal
                .get(server)
                .is_ok_and(|u| u.config.auth == cem_config::UpstreamAuth::PerPerson);
        per_person.then_some(personal)
    }

    /// When this person's sign-in to `server` was last saved, if they hold
    /// one (read from the store, so one made through another node counts).
    async fn signed_in_at(personal: &Manager, server: &str) -> Option<u64> {
        let (Some(signin), Ok(upstream)) = (personal.signin(), personal.get(server)) else {
            return None;
        };
        match signin.backend().ok()?.load(&upstream.credential_id()).await {
            Ok(Some(record)) => Some(record.updated_at),
            _ => None,
        }
    }

    /// `server`'s tools as this catalog's person sees them, for a server
    /// each person signs in to (`personal`). Not signed in: an error
    /// saying how, and the server to watch for their sign-in (with when
    /// the sign-in that did not work was saved, if one did not).
    async fn list_personal(
        personal: &Manager,
        server: &str,
        refresh: bool,
    ) -> (
        Result<Vec<cem_upstream::Tool>, String>,
        Option<(String, Option<u64>)>,
    ) {
        let how = || {
            format!(
                "needs this person to sign in: the first call of one of its tools asks them (their \
                 client shows a link), or they run `code-execution-mcp auth login {server}`; its \
                 tools are searchable once they have"
            )
        };
        let held = Self::signed_in_at(personal, server).await;
        if held.is_none() {
            return (Err(how()), Some((server.to_string(), None)));
        }
        match personal.tools(server, refresh).await {
            Ok(tools) => (Ok(tools), None),
            Err(cem_upstream::UpstreamError::SignInRequired { .. }) => {
                (Err(how()), Some((server.to_string(), held)))
            }
            Err(e) => (Err(e.to_string()), None),
        }
    }

    /// The servers each person signs in to, listed as this catalog's
    /// person, all at once and (in the server) within a search's wait: one
    /// still listing then goes on, and the next search takes it in.
    async fn list_all_personal(
        &self,
        servers: &[String],
        refresh: bool,
    ) -> (
        std::collections::HashMap<String, Result<Vec<cem_upstream::Tool>, String>>,
        Vec<(String, Option<u64>)>,
    ) {
        let mut lists = std::collections::HashMap::new();
        let mut awaiting = Vec::new();
        let Some(personal) = self.personal.get() else {
            return (lists, awaiting);
        };
        let bounded = self.watching.load(std::sync::atomic::Ordering::SeqCst);
        let mut late = Vec::new();
        let listings = servers
            .iter()
            .filter(|s| self.personal_for(s).is_some())
            .map(|server| {
                let personal = personal.clone();
                let server = server.clone();
                async move {
                    let listing = tokio::spawn({
                        let (personal, server) = (personal.clone(), server.clone());
                        async move { Self::list_personal(&personal, &server, refresh).await }
                    });
                    let done = if bounded {
                        tokio::time::timeout(LIST_WAIT, listing).await.ok()
                    } else {
                        Some(listing.await)
                    };
                    (server, done)
                }
            });
        for (server, done) in futures_util::future::join_all(listings).await {
            match done {
                Some(Ok((result, waiting))) => {
                    awaiting.extend(waiting);
                    lists.insert(server, result);
                }
                Some(Err(e)) => {
                    lists.insert(server, Err(format!("listing its tools failed: {e}")));
                }
                // The spawned listing goes on; its tools are known once done.
                None => {
                    let wait = LIST_WAIT.as_secs();
                    lists.insert(
                        server.clone(),
                        Err(format!(
                            "still starting after {wait} s; its tools join the catalog when it answers: search again shortly"
                        )),
                    );
                    late.push(server);
                }
            }
        }
        if let Ok(mut l) = self.late_personal.lock() {
            *l = late;
        }
        (lists, awaiting)
    }

    /// Whether a server the current catalog lacks for want of a sign-in
    /// has been signed in to since (a sign-in saved after the one that
    /// did not work, if one did not).
    async fn signed_in_since(&self) -> bool {
        let awaiting = match self.awaiting_sign_in.lock() {
            Ok(a) => a.clone(),
            Err(_) => return false,
        };
        let Some(personal) = self.personal.get() else {
            return false;
        };
        for (server, seen) in awaiting {
            let now = Self::signed_in_at(personal, &server).await;
            if now.is_some() && now != seen {
                return true;
            }
        }
        let late = match self.late_personal.lock() {
            Ok(l) => l.clone(),
            Err(_) => return false,
        };
        late.iter()
            .any(|server| personal.known_tools(server).is_some())
    }

    async fn write_wrappers(&self, entries: Vec<Entry>) {
        let _writing = self.shared.wrappers.lock().await;
        self.write_wrappers_locked(entries).await;
    }

    async fn write_wrappers_locked(&self, entries: Vec<Entry>) {
        self.write_wrappers_to(self.wrappers.clone(), entries).await;
    }

    async fn write_wrappers_to(&self, target: Option<Wrappers>, entries: Vec<Entry>) {
        let Some(Wrappers { dir, python }) = target else {
            return;
        };
        let mut entries = entries;
        if let Some((_, shapes)) = self.shapes.get() {
            shapes.overlay(&mut entries);
        }
        let outcome = tokio::task::spawn_blocking(move || {
            let refs: Vec<&Entry> = entries
                .iter()
                .filter(|e| e.kind == EntryKind::Upstream)
                .collect();
            cem_catalog::python::write_wrappers(&refs, &dir, &python, &mut |_, _| {})
        })
        .await;
        match outcome {
            Ok(Ok(stats)) => {
                // One upstream's odd tool leaves out that tool (or server),
                // said here; every other package was written.
                for skipped in &stats.skipped {
                    tracing::warn!(
                        server = %skipped.server,
                        tool = skipped.tool.as_deref().unwrap_or("*"),
                        reason = %skipped.reason,
                        "a python wrapper was left out; the tool is still callable with call_tool"
                    );
                }
                if let Some(why) = &stats.unchecked {
                    tracing::warn!(reason = %why, "python wrappers written without the compile check");
                }
                if stats.written > 0 {
                    tracing::info!(
                        tools = stats.tools,
                        written = stats.written,
                        "python wrappers updated"
                    )
                }
            }
            Ok(Err(e)) => tracing::warn!(error = %e, "cannot write the python wrappers"),
            Err(e) => tracing::warn!(error = %e, "the wrapper task failed"),
        }
    }

    pub fn manager(&self) -> &Arc<Manager> {
        &self.manager
    }

    /// The current catalog, building it if needed.
    pub async fn get(&self) -> Arc<Built> {
        self.used_at.touch();
        // Another process (the CLI, a second server) may have saved or
        // deleted a skill: one small read tells.
        if let Some(store) = &self.skills {
            let generation = store.generation();
            let stale = self
                .skills_seen
                .lock()
                .is_ok_and(|seen| *seen != generation);
            if stale {
                self.skills_changed().await;
            }
        }
        if self.signed_in_since().await {
            // The person signed in to a server this catalog lacks.
            self.invalidate().await;
        } else if self.shapes_stale() && !self.watching.load(std::sync::atomic::Ordering::SeqCst) {
            // A tool's result shape changed (the server rebuilds on its own,
            // in the background: see `watch_changes`).
            self.invalidate().await;
        }
        if let Some(built) = self.current.read().await.as_ref() {
            return built.clone();
        }
        let mut slot = self.current.write().await;
        if let Some(built) = slot.as_ref() {
            return built.clone();
        }
        let built = self.build(false).await;
        *slot = Some(built.clone());
        self.write_wrappers(built.catalog.entries().to_vec()).await;
        built
    }

    /// Rebuilds now; `refresh` re-asks every server instead of the cache.
    pub async fn rebuild(&self, refresh: bool) -> Arc<Built> {
        let built = self.build(refresh).await;
        *self.current.write().await = Some(built.clone());
        self.write_wrappers(built.catalog.entries().to_vec()).await;
        built
    }

    /// Re-reads the skills into the current catalog (after a save or a
    /// delete), keeping the upstream tools as they are: no server is asked.
    pub async fn skills_changed(&self) {
        let mut slot = self.current.write().await;
        let Some(built) = slot.as_ref() else {
            // Nothing built yet: the next build reads the skills anyway.
            return;
        };
        let entries: Vec<Entry> = built
            .catalog
            .entries()
            .iter()
            .filter(|e| e.kind != EntryKind::Skill)
            .cloned()
            .collect();
        let unavailable = built.unavailable.clone();
        let built = self
            .catalog_with(entries, self.skill_entries().await, unavailable)
            .await;
        *slot = Some(built);
    }

    /// The skills as catalog entries, noting the store's generation they
    /// were read at (read first: a change while listing shows up as stale).
    async fn skill_entries(&self) -> Vec<Entry> {
        let Some(store) = self.skills.clone() else {
            return Vec::new();
        };
        if let Ok(mut seen) = self.skills_seen.lock() {
            *seen = store.generation();
        }
        match tokio::task::spawn_blocking(move || store.list()).await {
            Ok(Ok((skills, problems))) => {
                for p in problems {
                    tracing::warn!(problem = %p, "a skill could not be read");
                }
                skills.into_iter().map(skill_entry).collect()
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "the skills could not be listed");
                Vec::new()
            }
            Err(e) => {
                tracing::warn!(error = %e, "the skill task failed");
                Vec::new()
            }
        }
    }

    /// The servers a catalog lacks and why, with the error of a listing
    /// that failed after the catalog was built in place of "still starting".
    pub fn unavailable(&self, built: &Built) -> Vec<(String, String)> {
        let late = self.late_failures.lock().ok();
        built
            .unavailable
            .iter()
            .map(|(server, error)| {
                let error = late.as_ref().and_then(|l| l.get(server)).unwrap_or(error);
                (server.clone(), error.clone())
            })
            .collect()
    }

    /// Drops the current catalog when nothing asked for it for `idle`:
    /// an idle tenant's entries, word index and vectors (megabytes with
    /// thousands of tools) go back, and its next search builds them again
    /// from the servers' lists and the vector cache (no server is asked,
    /// no model runs). Whether it dropped one.
    pub async fn release_if_idle(&self, idle: std::time::Duration) -> bool {
        if !self.used_at.idle_for(idle) {
            return false;
        }
        let mut slot = self.current.write().await;
        // Asked for while this waited: not idle after all.
        if !self.used_at.idle_for(idle) {
            return false;
        }
        slot.take().is_some()
    }

    /// Whether a catalog is built and held (see
    /// [`CatalogService::release_if_idle`]); one being built or released
    /// right now counts as held (a metrics scrape must not wait for it).
    pub fn is_built(&self) -> bool {
        self.current
            .try_read()
            .map_or(true, |current| current.is_some())
    }

    /// Drops the current catalog; the next use builds a fresh one.
    pub async fn invalidate(&self) {
        *self.current.write().await = None;
    }

    /// Invalidates the catalog whenever an upstream announces new tools.
    pub fn watch_changes(self: &Arc<Self>) {
        self.watching
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let weak = Arc::downgrade(self);
        let changed = self.manager.changed();
        tokio::spawn(async move {
            // The wait for the next change is armed before each rebuild, so
            // a change announced while one runs is not missed, and changes
            // during a rebuild make one more, not one each.
            let mut next = std::pin::pin!(changed.notified());
            next.as_mut().enable();
            loop {
                next.as_mut().await;
                next.set(changed.notified());
                next.as_mut().enable();
                let Some(service) = weak.upgrade() else {
                    return;
                };
                service.rebuild_in_background().await;
            }
        });
        let Some((own, _)) = self.shapes.get() else {
            return;
        };
        let mut wakers = vec![own.clone()];
        wakers.extend(own.fallback().cloned());
        for shapes in wakers {
            let weak = Arc::downgrade(self);
            tokio::spawn(async move {
                let mut next = std::pin::pin!(shapes.changed().notified());
                next.as_mut().enable();
                loop {
                    next.as_mut().await;
                    // A burst of first calls (an execution's loop over
                    // tools) makes one rebuild, not one each.
                    tokio::time::sleep(SHAPES_SETTLE).await;
                    next.set(shapes.changed().notified());
                    next.as_mut().enable();
                    let Some(service) = weak.upgrade() else {
                        return;
                    };
                    if service.shapes_stale() {
                        service.rebuild_in_background().await;
                    }
                }
            });
        }
    }

    /// After a server's list changed (the manager already holds the new
    /// list: see `cem_upstream`'s re-listing): a new catalog from the lists
    /// known, no server asked, while searches keep the current one; then
    /// it takes the current one's place. Nothing built yet: the next use
    /// builds it anyway.
    async fn rebuild_in_background(&self) {
        let Some(before) = self.current.read().await.clone() else {
            return;
        };
        tracing::info!(
            "the tools changed (a server's list, or a learned result shape); the catalog is rebuilt beside the current one"
        );
        let built = self.build(false).await;
        {
            // Only in place of the catalog it was built beside: one released
            // meanwhile stays released, and one made meanwhile (a refresh, a
            // saved skill) is newer than this.
            let mut slot = self.current.write().await;
            match slot.as_ref() {
                Some(current) if Arc::ptr_eq(current, &before) => *slot = Some(built.clone()),
                _ => return,
            }
        }
        self.write_wrappers(built.catalog.entries().to_vec()).await;
    }

    /// Every server's tools, waiting at most [`LIST_WAIT`]: a server still
    /// starting then (npx fetching a package, a hung process until its
    /// connect timeout) is reported as such rather than holding up every
    /// search; when the last one answers, the catalog is rebuilt on next use.
    async fn list_all(
        &self,
        refresh: bool,
    ) -> Vec<(String, Result<Vec<cem_upstream::Tool>, String>)> {
        let manager = self.manager.clone();
        let mut listing = tokio::spawn(async move { manager.all_tools(refresh).await });
        let bounded = self.watching.load(std::sync::atomic::Ordering::SeqCst);
        let waited = if bounded {
            tokio::time::timeout(LIST_WAIT, &mut listing).await.ok()
        } else {
            Some((&mut listing).await)
        };
        if let Some(done) = waited {
            return match done {
                Ok(results) => {
                    if let Ok(mut late) = self.late_failures.lock() {
                        late.retain(|server, _| {
                            !results.iter().any(|(s, r)| s == server && r.is_ok())
                        });
                    }
                    results
                        .into_iter()
                        .map(|(server, r)| (server, r.map_err(|e| e.to_string())))
                        .collect()
                }
                Err(e) => {
                    tracing::warn!(error = %e, "the tool listing task failed");
                    Vec::new()
                }
            };
        }
        let partial: Vec<(String, Result<Vec<cem_upstream::Tool>, String>)> = self
            .manager
            .servers()
            .filter(|u| !u.config.disabled)
            .map(|u| {
                let name = u.config.name.clone();
                let late = self
                    .late_failures
                    .lock()
                    .ok()
                    .and_then(|l| l.get(&name).cloned());
                let tools = match (self.manager.known_tools(&name), u.status()) {
                    (Some(tools), _) => Ok(tools),
                    (None, cem_upstream::ServerStatus::Failed(e)) => Err(e),
                    (None, _) => Err(late.unwrap_or_else(|| {
                        format!(
                            "still starting after {} s; its tools join the catalog when it answers: search again shortly",
                            LIST_WAIT.as_secs()
                        )
                    })),
                };
                (name, tools)
            })
            .collect();
        let pending: Vec<String> = partial
            .iter()
            .filter(|(_, r)| r.is_err())
            .map(|(name, _)| name.clone())
            .collect();
        let changed = self.manager.changed();
        let late_failures = self.late_failures.clone();
        tokio::spawn(async move {
            // As a tools/list_changed would, when a pending server has
            // answered since. One that failed is not rebuilt for (the
            // rebuild would wait on it again) but reported with its error
            // from now on, not as still starting (see `unavailable`).
            let Ok(results) = listing.await else {
                return;
            };
            let mut answered = false;
            for (name, result) in &results {
                if !pending.contains(name) {
                    continue;
                }
                if let Ok(mut late) = late_failures.lock() {
                    match result {
                        Ok(_) => late.remove(name),
                        Err(e) => late.insert(name.clone(), e.to_string()),
                    };
                }
                answered |= result.is_ok();
            }
            if answered {
                changed.notify_one();
            }
        });
        partial
    }

    /// A catalog of the servers' tools, the registry and the skills; one
    /// without skills is the shared one when it holds the same entries.
    async fn build(&self, refresh: bool) -> Arc<Built> {
        let mut entries = Vec::new();
        let mut unavailable = Vec::new();
        let names: Vec<String> = self
            .manager
            .servers()
            .filter(|u| !u.config.disabled)
            .map(|u| u.config.name.clone())
            .collect();
        // Side by side: each within a search's wait.
        let (shared_lists, (mut personal_lists, awaiting)) = tokio::join!(
            self.list_all(refresh),
            self.list_all_personal(&names, refresh)
        );
        for (server, shared) in shared_lists {
            let result = personal_lists.remove(&server).unwrap_or(shared);
            match result {
                Ok(tools) => {
                    let instructions = match self.personal_for(&server) {
                        Some(personal) => personal.instructions(&server),
                        None => self.manager.instructions(&server),
                    };
                    entries.extend(
                        tools
                            .into_iter()
                            .map(|t| upstream_entry(&server, t, instructions.clone())),
                    )
                }
                Err(e) => {
                    tracing::warn!(server = %server, error = %e, "upstream tools unavailable");
                    unavailable.push((server, e.to_string()));
                }
            }
        }
        if let Ok(mut a) = self.awaiting_sign_in.lock() {
            *a = awaiting;
        }
        entries.extend(self.registry.iter().cloned());
        self.catalog_with(entries, self.skill_entries().await, unavailable)
            .await
    }

    /// The catalog of `entries` and `skills`: without skills, the shared
    /// one when it holds the same entries (else one made and shared).
    async fn catalog_with(
        &self,
        mut entries: Vec<Entry>,
        skills: Vec<Entry>,
        unavailable: Vec<(String, String)>,
    ) -> Arc<Built> {
        if let Some((shapes, _)) = self.shapes.get() {
            self.shapes_seen
                .store(shapes.generation(), std::sync::atomic::Ordering::SeqCst);
            shapes.overlay(&mut entries);
        }
        if skills.is_empty() {
            let _building = self.shared.building.lock().await;
            if let Some(built) = self.shared.find(&entries, &unavailable) {
                return built;
            }
            let built = Arc::new(Built {
                catalog: self.catalog_of(entries).await,
                unavailable,
            });
            self.shared.offer(&built);
            return built;
        }
        entries.extend(skills);
        Arc::new(Built {
            catalog: self.catalog_of(entries).await,
            unavailable,
        })
    }
}

impl std::fmt::Debug for CatalogService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CatalogService")
            .field("registry", &self.registry.len())
            .finish_non_exhaustive()
    }
}

fn upstream_entry(server: &str, t: cem_upstream::Tool, instructions: Option<Arc<str>>) -> Entry {
    // One conversion for the server and the search evaluation, which reads
    // tool lists as JSON: the entry is built from the tool as listed.
    let listed = serde_json::to_value(&t).unwrap_or_default();
    Entry::upstream(server, &listed, instructions).unwrap_or_else(|| Entry {
        kind: EntryKind::Upstream,
        category: server.to_string(),
        name: t.name.to_string(),
        description: t.description.as_deref().unwrap_or_default().to_string(),
        ..Entry::default()
    })
}

/// A skill as a catalog entry: found by its name, description, functions
/// and the tools it calls.
pub fn skill_entry(meta: SkillMeta) -> Entry {
    let mut keywords = meta.functions.clone();
    keywords.extend(meta.tools.iter().cloned());
    Entry {
        kind: EntryKind::Skill,
        category: "skills".to_string(),
        name: meta.name,
        description: meta.description,
        input_schema: None,
        output_schema: None,
        keywords,
        mcp_server: None,
        ..Entry::default()
    }
}

/// A skill saved or deleted is searchable (or gone) before the tool that
/// changed it answers.
impl crate::changes::Subscriber for CatalogService {
    fn changed<'a>(&'a self, change: &'a crate::Change) -> futures_util::future::BoxFuture<'a, ()> {
        Box::pin(async move {
            if matches!(change, crate::Change::Skill(_)) {
                self.skills_changed().await;
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use crate::{AppState, ToolSet};

    /// Tenants without skills search one catalog (one copy of the servers'
    /// tools, their index and vectors); a tenant with a skill has its own,
    /// and one released takes the shared one back if another holds it.
    #[tokio::test]
    async fn tenants_without_skills_share_one_catalog() -> Result<(), Box<dyn std::error::Error>> {
        let tmp = tempfile::tempdir()?;
        let config = cem_config::Config::default();
        let manager = Arc::new(cem_upstream::Manager::new(
            &config,
            tmp.path().join("cache"),
        ));
        let registry: Vec<cem_catalog::Entry> = ["weather_forecast", "currency_rates"]
            .iter()
            .filter_map(|name| {
                let tool =
                    serde_json::json!({"name": name, "description": format!("{name} for a city")});
                cem_catalog::Entry::upstream("registry", &tool, None)
            })
            .collect();
        let shared = Arc::new(super::SharedBuilds::default());
        let service = |skills: Option<cem_store::SkillStore>| {
            super::CatalogService::new(
                manager.clone(),
                registry.clone(),
                None,
                skills,
                super::Ranking::from_config(&config.search),
                None,
                shared.clone(),
            )
        };
        let store = |name: &str| cem_store::SkillStore::open(&tmp.path().join(name));
        let (alice, bob) = (service(Some(store("alice")?)), service(Some(store("bob")?)));
        let carol_skills = store("carol")?;
        carol_skills.save(
            "weekly_report",
            "Sums the week's sales by region",
            "def main():\n    return 1\n",
            &cem_store::Analysis::default(),
        )?;
        let carol = service(Some(carol_skills));
        let (a, b, c) = (alice.get().await, bob.get().await, carol.get().await);
        assert!(Arc::ptr_eq(&a, &b), "one catalog for both");
        assert_eq!(a.catalog.len(), 2);
        assert!(!Arc::ptr_eq(&a, &c), "a tenant with a skill has its own");
        assert_eq!(c.catalog.len(), 3);
        // Alice idles; Bob still searches: hers comes back as the shared one.
        assert!(alice.release_if_idle(Duration::ZERO).await);
        assert!(Arc::ptr_eq(&alice.get().await, &b));
        // Bob saves a skill: his catalog becomes his own, Alice's is untouched.
        bob.skills.as_ref().ok_or("bob has a skill store")?.save(
            "tally",
            "Counts rows",
            "def main():\n    return 2\n",
            &cem_store::Analysis::default(),
        )?;
        let b2 = bob.get().await;
        assert!(!Arc::ptr_eq(&b2, &a) && b2.catalog.len() == 3);
        assert!(Arc::ptr_eq(&alice.get().await, &a) && a.catalog.len() == 2);
        // And deletes it: the shared one again.
        bob.skills
            .as_ref()
            .ok_or("bob has a skill store")?
            .delete("tally")?;
        assert!(Arc::ptr_eq(&bob.get().await, &a));
        // Nobody holds it any more: the next one is built again, the same.
        drop((a, b, b2));
        assert!(alice.release_if_idle(Duration::ZERO).await);
        assert!(bob.release_if_idle(Duration::ZERO).await);
        let again = alice.get().await;
        assert_eq!(again.catalog.len(), 2);
        Ok(())
    }

    /// An idle tenant's catalog goes, and its next search has the same
    /// entries back; one asked for within the idle time stays.
    #[tokio::test]
    async fn an_idle_catalog_is_released_and_built_again_when_asked_for()
    -> Result<(), Box<dyn std::error::Error>> {
        let tmp = tempfile::tempdir()?;
        let state = AppState::open(
            Default::default(),
            None,
            tmp.path(),
            ToolSet::Full,
            "/nonexistent".into(),
        )?;
        state.skills.save(
            "weekly_report",
            "Sums the week's sales by region",
            "def main():\n    return 1\n",
            &cem_store::Analysis::default(),
        )?;
        let catalog = &state.catalog;
        let first = catalog.get().await;
        assert_eq!(first.catalog.len(), 1, "the skill is searchable");
        assert!(!catalog.release_if_idle(Duration::from_secs(3600)).await);
        assert!(Arc::ptr_eq(&first, &catalog.get().await), "kept while used");
        assert!(catalog.release_if_idle(Duration::ZERO).await);
        assert!(
            !catalog.release_if_idle(Duration::ZERO).await,
            "nothing left to release"
        );
        let again = catalog.get().await;
        assert!(!Arc::ptr_eq(&first, &again), "built again");
        let names = |b: &super::Built| {
            b.catalog
                .entries()
                .iter()
                .map(|e| e.qualified_name())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(&first), names(&again));
        Ok(())
    }
}
