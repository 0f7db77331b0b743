//! Whose a stdio server's process is: the tenant's own state root, the
//! fixed paths one tenant holds, and the confinement of its writes.
//!
//! Each tenant gets its own process of every stdio server, but processes
//! that share the server's files share its state: with server-memory's
//! usual `MEMORY_FILE_PATH` bob's `read_graph` showed alice's entities.
//! So a tenant's process runs with a state root of its own,
//! `<tenant>/upstream/<server>/` (its `HOME`, `TMPDIR`, `XDG_*` and working
//! directory), which config strings name as `${CEM_TENANT_DIR}`; a path
//! written into a server's `command`, `args`, `env` or `cwd` that is not
//! under it is a *fixed path*, held by the first tenant whose code calls
//! the server, and any other tenant is refused (unless the server is
//! `"shared": true`: one process for everyone). And where the kernel has
//! Landlock, a tenant's process can write only under its state root, the
//! fixed paths its tenant holds, and the package managers' caches, so a
//! server that keeps state where no config says (server-memory's default
//! file beside its code) fails for the tenant instead of sharing.
//! The local tenant (stdio, the CLI, HTTP without per-person tokens) is
//! the operator: its processes keep the operator's environment.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use cem_config::{ServerConfig, TENANT_DIR_VAR, Transport};

/// What config strings write for the tenant's state directory.
const PLACEHOLDER: &str = concat!("${", "CEM_TENANT_DIR", "}");

/// The fixed paths held so far, each by one tenant: shared by every
/// tenant's manager of one server, and kept in a file, so that after a
/// restart the path (with the first tenant's data in it) stays theirs.
#[derive(Debug, Clone, Default)]
pub struct Claims(Arc<Mutex<HashMap<PathBuf, String>>>, Option<Arc<PathBuf>>);

impl Claims {
    /// The claims kept in `file` (none yet when it is missing; a file that
    /// cannot be read is said, and starts empty).
    pub fn open(file: PathBuf) -> Self {
        let held = match std::fs::read(&file) {
            Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                tracing::warn!(file = %file.display(), error = %e, "the table of fixed upstream paths cannot be read; starting it again");
                HashMap::new()
            }),
            Err(_) => HashMap::new(),
        };
        Self(Arc::new(Mutex::new(held)), Some(Arc::new(file)))
    }

    /// Writes the table (to a new file, renamed over the old).
    fn save(&self, held: &HashMap<PathBuf, String>) -> Result<(), String> {
        let Some(file) = &self.1 else {
            return Ok(());
        };
        let text = serde_json::to_vec(held).map_err(|e| e.to_string())?;
        let dir = file.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(|e| e.to_string())?;
        std::io::Write::write_all(&mut tmp, &text).map_err(|e| e.to_string())?;
        tmp.persist(file.as_path()).map_err(|e| e.to_string())?;
        Ok(())
    }
}

/// Whose processes a manager starts.
#[derive(Debug, Clone)]
pub struct Tenancy {
    /// The tenant id (a safe directory name).
    pub tenant: String,
    /// `<tenant root>/upstream`: each server's state directory is in it.
    pub root: PathBuf,
    /// The server's data directory: a confined process reads none of it
    /// but its own state directory (other tenants' roots are in it).
    pub data_dir: PathBuf,
    /// More a confined process may not read (the config file, which may
    /// hold tokens).
    pub hidden: Vec<PathBuf>,
    /// The operator's own tenant: its processes keep the host's `HOME` and
    /// the rest, and are not confined.
    pub local: bool,
    pub claims: Claims,
}

/// A path in a server's config that every tenant's process would share.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FixedPath {
    pub path: PathBuf,
    /// Where the config writes it (`env.MEMORY_FILE_PATH`, `args[2]`).
    pub field: String,
}

/// How one process of a server is started for a tenant.
#[derive(Debug)]
pub struct Start {
    pub command: String,
    pub args: Vec<String>,
    /// Set over the inherited environment (the config's `env` last).
    pub env: Vec<(String, String)>,
    /// Variables of the host's environment not passed on.
    pub unset: Vec<&'static str>,
    pub cwd: Option<PathBuf>,
    /// Where a confined process may write; None: not confined.
    pub writable: Option<Vec<PathBuf>>,
    /// Where a confined process may not read: the data directory (but for
    /// what `writable` grants in it), the config file.
    pub unreadable: Vec<PathBuf>,
}

/// Variables that point package managers at the operator's caches: not
/// passed to a tenant's process, whose caches are its own.
const CACHE_VARS: &[&str] = &["npm_config_cache", "UV_CACHE_DIR", "PIP_CACHE_DIR"];

/// Variables that name where code is found, not where state is kept.
const CODE_PATHS: &[&str] = &[
    "PATH",
    "NODE_PATH",
    "PYTHONPATH",
    "PYTHONHOME",
    "LD_LIBRARY_PATH",
    "VIRTUAL_ENV",
    "JAVA_HOME",
    "GOROOT",
];

/// Directories whose files are the system's, not any tenant's state.
const SYSTEM_PREFIXES: &[&str] = &[
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/etc",
    "/nix/store",
    "/proc",
    "/sys",
    "/dev",
];

/// Endings of files that are code a server runs, not state it keeps.
const CODE_ENDINGS: &[&str] = &[
    ".js", ".mjs", ".cjs", ".ts", ".py", ".pyz", ".jar", ".rb", ".sh", ".php", ".pl", ".lua",
    ".wasm",
];

impl Start {
    /// A server's process as its config says, for a manager that serves no
    /// tenant (the CLI's tools): `${CEM_TENANT_DIR}` has no value there.
    pub fn as_configured(server: &ServerConfig) -> Result<Self, String> {
        let Transport::Stdio {
            command,
            args,
            env,
            cwd,
        } = &server.transport
        else {
            return Err("only stdio servers have processes".into());
        };
        let cwd_text = cwd.as_ref().map(|c| c.display().to_string());
        let named = std::iter::once(command.as_str())
            .chain(args.iter().map(String::as_str))
            .chain(env.values().map(|v| v.expose()))
            .chain(cwd_text.as_deref())
            .any(|s| s.contains(PLACEHOLDER));
        if named {
            return Err(format!(
                "its config names ${{{TENANT_DIR_VAR}}}, which only a server with a data directory fills in (serve, run, exec)"
            ));
        }
        Ok(Self {
            command: command.clone(),
            args: args.clone(),
            env: env
                .iter()
                .map(|(k, v)| (k.clone(), v.expose().to_string()))
                .collect(),
            unset: Vec::new(),
            cwd: cwd.clone(),
            writable: None,
            unreadable: Vec::new(),
        })
    }
}

impl Tenancy {
    /// The state directory of `server` for this tenant.
    pub fn dir(&self, server: &str) -> PathBuf {
        self.root.join(server)
    }

    /// How to start `server` for this tenant; its directories are made.
    pub fn start(&self, server: &ServerConfig) -> Result<Start, String> {
        let Transport::Stdio {
            command,
            args,
            env,
            cwd,
        } = &server.transport
        else {
            return Err("only stdio servers have processes".into());
        };
        let dir = self.dir(&server.name);
        let dir_text = dir.display().to_string();
        let fill = |s: &str| s.replace(PLACEHOLDER, &dir_text);
        make_private_dir(&dir)?;
        let mut start = Start {
            command: fill(command),
            args: args.iter().map(|a| fill(a)).collect(),
            env: Vec::new(),
            unset: Vec::new(),
            cwd: cwd
                .as_ref()
                .map(|c| PathBuf::from(fill(&c.display().to_string()))),
            writable: None,
            unreadable: Vec::new(),
        };
        if !self.local && !server.shared {
            let mut own = Vec::new();
            for (var, sub) in [
                ("HOME", "home"),
                ("TMPDIR", "tmp"),
                ("XDG_CONFIG_HOME", "config"),
                ("XDG_CACHE_HOME", "cache"),
                ("XDG_DATA_HOME", "data"),
                ("XDG_STATE_HOME", "state"),
            ] {
                let path = dir.join(sub);
                make_private_dir(&path)?;
                own.push((var.to_string(), path.display().to_string()));
            }
            // Package managers' caches are the tenant's own too (under its
            // HOME and XDG_CACHE_HOME): a cache holds code that later runs
            // (npx runs what it finds in its cache), so a shared writable
            // one would let one tenant plant code in another's processes.
            // npx and uvx fetch a package once per tenant.
            start.env.extend(own);
            start.unset.extend(CACHE_VARS);
            start.unset.push("XDG_RUNTIME_DIR");
            start.cwd = Some(start.cwd.take().unwrap_or_else(|| dir.clone()));
            let mut writable = vec![dir.clone()];
            writable.extend(
                self.held(server)
                    .into_iter()
                    .filter_map(|p| self.grantable(&server.name, p)),
            );
            start.writable = Some(writable);
            let mut hidden = vec![self.data_dir.clone()];
            hidden.extend(self.hidden.iter().cloned());
            start.unreadable = hidden;
        }
        start
            .env
            .extend(env.iter().map(|(k, v)| (k.clone(), fill(v.expose()))));
        Ok(start)
    }

    /// Holds `server`'s fixed paths for this tenant, or says which one
    /// another tenant holds. A shared server holds none.
    pub fn claim(&self, server: &ServerConfig) -> Result<(), String> {
        if server.shared {
            return Ok(());
        }
        let fixed = fixed_paths(server);
        if fixed.is_empty() {
            return Ok(());
        }
        let mut claims = self
            .claims
            .0
            .lock()
            .map_err(|_| "the table of fixed upstream paths is poisoned".to_string())?;
        for f in &fixed {
            if let Some(holder) = claims.get(&f.path)
                && *holder != self.tenant
            {
                return Err(format!(
                    "'{name}' is not available to you: mcpServers.{name}.{field} names the fixed path {path}, which another tenant's process of '{name}' already uses, \
                     and per-tenant processes would share its state. Use the other servers, or ask the operator to put ${{{var}}} in the path (each tenant's own directory) \
                     or to mark the server \"shared\": true (one process and one state for everyone)",
                    name = server.name,
                    field = f.field,
                    path = f.path.display(),
                    var = TENANT_DIR_VAR,
                ));
            }
        }
        let mut added = false;
        for f in fixed {
            added |= claims.insert(f.path, self.tenant.clone()).is_none();
        }
        if added {
            self.claims
                .save(&claims)
                .map_err(|e| format!("cannot keep the table of fixed upstream paths: {e}"))?;
        }
        Ok(())
    }

    /// What of a held path a tenant's process may write. A file's
    /// directory when that directory is the file's own (servers write
    /// atomically: a temporary file beside it, renamed over it), else the
    /// file alone, made empty (0600) when it is not there yet; a
    /// directory itself. Never a link (the process could point it
    /// anywhere before its next start), nor a path holding the data
    /// directory or inside it, nor a directory others keep things in
    /// (`/tmp`, `/var/lib`, `$HOME`: granting the directory of
    /// `~/memory.jsonl` would grant all of `$HOME`).
    fn grantable(&self, server: &str, path: PathBuf) -> Option<PathBuf> {
        use std::os::unix::fs::OpenOptionsExt;
        let refuse = |why: &str| {
            tracing::warn!(server, path = %path.display(), "a fixed path this tenant holds is not writable by its process: {why}");
            None
        };
        let data = std::fs::canonicalize(&self.data_dir).unwrap_or_else(|_| self.data_dir.clone());
        let touches_data = |p: &Path| data.starts_with(p) || p.starts_with(&data);
        let meta = std::fs::symlink_metadata(&path);
        if meta.as_ref().is_ok_and(|m| m.file_type().is_symlink()) {
            return refuse("it is a symbolic link");
        }
        if meta.as_ref().is_ok_and(|m| m.is_dir()) {
            let real = std::fs::canonicalize(&path).ok()?;
            if touches_data(&real) || is_common_dir(&real) {
                return refuse(
                    "it holds the data directory, is inside it, or is a directory others use",
                );
            }
            return Some(real);
        }
        let parent = path
            .parent()
            .and_then(|p| std::fs::canonicalize(p).ok())
            .filter(|p| !touches_data(p) && !is_common_dir(p));
        if let Some(parent) = parent {
            return Some(parent);
        }
        if meta.is_err() {
            let made = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
                .open(&path);
            if let Err(e) = made {
                return refuse(&format!("it could not be made ({e})"));
            }
            tracing::info!(server, path = %path.display(), "a fixed path in a directory others use: only the file is writable by the tenant's process (a server that replaces it by renaming a temporary file over it cannot)");
        }
        let real = std::fs::canonicalize(&path).ok()?;
        if touches_data(&real) {
            return refuse("it is inside the data directory");
        }
        Some(real)
    }

    /// The fixed paths of `server` this tenant holds.
    fn held(&self, server: &ServerConfig) -> Vec<PathBuf> {
        let Ok(claims) = self.claims.0.lock() else {
            return Vec::new();
        };
        fixed_paths(server)
            .into_iter()
            .filter(|f| claims.get(&f.path) == Some(&self.tenant))
            .map(|f| f.path)
            .collect()
    }
}

/// The paths in a stdio server's config that are not the tenant's own:
/// absolute (or `~`) paths in `env`, `args` (also after `--flag=`) and
/// `cwd`, leaving out code (the command, scripts, the system's files) and
/// variables that list where code is found.
pub fn fixed_paths(server: &ServerConfig) -> Vec<FixedPath> {
    let Transport::Stdio {
        command,
        args,
        env,
        cwd,
    } = &server.transport
    else {
        return Vec::new();
    };
    let mut found = Vec::new();
    let mut look = |field: String, text: &str| {
        if text == command {
            return;
        }
        // Every rooted path the text holds, wherever it starts: after `=`
        // (`--db=/x`, `a=b=/x`), `:` (`sqlite:////x`, `a:/x`), a glued
        // short flag (`-d/x`) or the tenant's own directory (its part is
        // the tenant's; a `..` climbing out of it is not).
        let mut seen = std::collections::BTreeSet::new();
        for (at, _) in text.match_indices(['/', '~']) {
            let before = text[..at].chars().last();
            let starts_a_path = match before {
                None => true,
                Some(c) => {
                    matches!(c, '=' | ':' | ',' | ';' | ' ' | '\'' | '"')
                        || (at == 2 && text.starts_with('-'))
                }
            };
            if !starts_a_path {
                continue;
            }
            let rest = &text[at..];
            let end = rest
                .find([':', ',', ';', ' ', '\'', '"', '='])
                .unwrap_or(rest.len());
            if let Some(path) = state_path(&rest[..end])
                && seen.insert(path.clone())
            {
                found.push(FixedPath {
                    path,
                    field: field.clone(),
                });
            }
        }
        if let Some(after) = text.split(PLACEHOLDER).nth(1)
            && lexical(Path::new(&format!("/t{after}"))).is_none_or(|p| !p.starts_with("/t"))
        {
            found.push(FixedPath {
                path: PathBuf::from(text),
                field,
            });
        }
    };
    for (i, arg) in args.iter().enumerate() {
        look(format!("args[{i}]"), arg);
    }
    for (var, value) in env {
        if CODE_PATHS.contains(&var.as_str()) {
            continue;
        }
        look(format!("env.{var}"), value.expose());
    }
    if let Some(cwd) = cwd {
        look("cwd".into(), &cwd.display().to_string());
    }
    found
}

/// `path` with `.` and `..` resolved by its words alone (None: `..`
/// above the root), so `/usr/../var/x` is `/var/x`.
fn lexical(path: &Path) -> Option<PathBuf> {
    use std::path::Component;
    let mut out = PathBuf::from("/");
    for part in path.components() {
        match part {
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::Normal(word) => out.push(word),
        }
    }
    Some(out)
}

/// `text` as a path where state could be kept, if it is one.
fn state_path(text: &str) -> Option<PathBuf> {
    let path = if let Some(rest) = text.strip_prefix("~/") {
        PathBuf::from(std::env::var_os("HOME")?).join(rest)
    } else if text.starts_with('/') {
        PathBuf::from(text)
    } else {
        return None;
    };
    let path = lexical(&path)?;
    if path == Path::new("/") {
        return Some(path);
    }
    // /dev/shm is anyone's memory, not the system's.
    if SYSTEM_PREFIXES.iter().any(|p| path.starts_with(p)) && !path.starts_with("/dev/shm") {
        return None;
    }
    let name = path.file_name()?.to_string_lossy().to_ascii_lowercase();
    if CODE_ENDINGS.iter().any(|e| name.ends_with(e)) {
        return None;
    }
    if is_executable_file(&path) {
        return None;
    }
    Some(path)
}

fn is_executable_file(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Directories many keep things in: never granted whole for one fixed
/// path in them.
fn is_common_dir(dir: &Path) -> bool {
    const COMMON: &[&str] = &[
        "/",
        "/tmp",
        "/var",
        "/var/tmp",
        "/var/lib",
        "/var/cache",
        "/var/log",
        "/home",
        "/root",
        "/srv",
        "/opt",
        "/mnt",
        "/media",
        "/run",
        "/dev/shm",
    ];
    let home = std::env::var_os("HOME").and_then(|h| std::fs::canonicalize(h).ok());
    COMMON.iter().any(|c| dir == Path::new(c))
        || home.as_deref() == Some(dir)
        || SYSTEM_PREFIXES
            .iter()
            .any(|p| dir.starts_with(p) && !dir.starts_with("/dev/shm"))
}

/// Makes `dir` (and its parents), readable by its owner only.
fn make_private_dir(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| format!("cannot make the state directory {}: {e}", dir.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use cem_config::Secret;

    fn server(args: &[&str], env: &[(&str, &str)]) -> ServerConfig {
        ServerConfig {
            name: "memory".into(),
            transport: Transport::Stdio {
                command: "/usr/bin/node".into(),
                args: args.iter().map(|a| a.to_string()).collect(),
                env: env
                    .iter()
                    .map(|(k, v)| (k.to_string(), Secret::new(v.to_string())))
                    .collect(),
                cwd: None,
            },
            disabled: false,
            timeout_seconds: None,
            shared: false,
            auth: Default::default(),
            oauth: Default::default(),
        }
    }

    fn tenancy(tenant: &str, root: &Path, claims: &Claims) -> Tenancy {
        Tenancy {
            tenant: tenant.into(),
            root: root.join(tenant),
            data_dir: root.to_path_buf(),
            hidden: Vec::new(),
            local: false,
            claims: claims.clone(),
        }
    }

    #[test]
    fn state_paths_are_fixed_and_code_is_not() {
        let s = server(
            &[
                "/opt/app/node_modules/server-memory/dist/index.js",
                "--db=/srv/data/db.sqlite",
                "/srv/docs",
                "relative/dir",
                "${CEM_TENANT_DIR}/graph",
            ],
            &[
                ("MEMORY_FILE_PATH", "/var/lib/memory.jsonl"),
                ("PATH", "/opt/bin:/usr/bin"),
                ("TOKEN", "abc"),
            ],
        );
        let fixed: Vec<String> = fixed_paths(&s)
            .into_iter()
            .map(|f| format!("{}={}", f.field, f.path.display()))
            .collect();
        assert_eq!(
            fixed,
            [
                "args[1]=/srv/data/db.sqlite",
                "args[2]=/srv/docs",
                "env.MEMORY_FILE_PATH=/var/lib/memory.jsonl"
            ]
        );
    }

    #[test]
    fn fixed_paths_are_found_however_they_are_spelled() {
        let s = server(
            &[
                "/usr/../var/lib/x",
                "-d/srv/db",
                "sqlite:////srv/sqlite.db",
                "--a=b=/srv/deep",
                "${CEM_TENANT_DIR}/../../other",
                "${CEM_TENANT_DIR}/fine/../mine",
                "/dev/shm/x",
                "/usr/share/doc",
            ],
            &[],
        );
        let fixed: Vec<String> = fixed_paths(&s)
            .into_iter()
            .map(|f| format!("{}={}", f.field, f.path.display()))
            .collect();
        assert_eq!(
            fixed,
            [
                "args[0]=/var/lib/x",
                "args[1]=/srv/db",
                "args[2]=/srv/sqlite.db",
                "args[3]=/srv/deep",
                "args[4]=${CEM_TENANT_DIR}/../../other",
                "args[6]=/dev/shm/x",
            ]
        );
    }

    #[test]
    fn a_fixed_path_is_one_tenants_and_a_shared_server_is_everyones()
    -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let elsewhere = tempfile::tempdir()?;
        let file = elsewhere.path().join("memory.jsonl");
        let claims = Claims::open(dir.path().join("claims.json"));
        let s = server(
            &[],
            &[("MEMORY_FILE_PATH", file.to_str().unwrap_or_default())],
        );
        let alice = tenancy("alice", dir.path(), &claims);
        let bob = tenancy("bob", dir.path(), &claims);
        alice.claim(&s)?;
        alice.claim(&s)?;
        let refused = bob.claim(&s).err().unwrap_or_default();
        assert!(
            refused.contains("env.MEMORY_FILE_PATH") && refused.contains("\"shared\": true"),
            "{refused}"
        );
        // After a restart the path is still alice's.
        let reopened = Claims::open(dir.path().join("claims.json"));
        assert!(tenancy("bob", dir.path(), &reopened).claim(&s).is_err());
        let mut shared = s.clone();
        shared.shared = true;
        bob.claim(&shared)?;
        // What alice holds, her process may write: the file's own
        // directory (where a server writes it atomically); bob's may not.
        let real = std::fs::canonicalize(elsewhere.path())?;
        let alice_start = alice.start(&s)?;
        let granted = alice_start.writable.unwrap_or_default();
        assert!(granted.contains(&real), "{granted:?}");
        let bob_start = bob.start(&s)?;
        assert!(!bob_start.writable.unwrap_or_default().contains(&real));
        // In a directory others use (here: beside the data directory),
        // the file alone, made empty.
        let data = dir.path().join("data");
        std::fs::create_dir(&data)?;
        let beside_data = tenancy("alice", &data, &claims);
        let beside = dir.path().join("beside.jsonl");
        let s = server(&[], &[("STATE", beside.to_str().unwrap_or_default())]);
        beside_data.claim(&s)?;
        let granted = beside_data.start(&s)?.writable.unwrap_or_default();
        let real = std::fs::canonicalize(&beside)?;
        assert!(granted.contains(&real), "{granted:?}");
        assert!(
            !granted.iter().any(|p| real.starts_with(p) && *p != real),
            "{granted:?}"
        );
        assert_eq!(std::fs::read(&beside)?, b"");
        Ok(())
    }

    #[test]
    fn a_held_link_or_a_path_holding_the_data_directory_is_not_granted()
    -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let claims = Claims::default();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink("/", &link)?;
        for fixed in [link.clone(), dir.path().to_path_buf()] {
            let s = server(&[fixed.to_str().unwrap_or_default()], &[]);
            let alice = tenancy("alice", dir.path(), &claims);
            alice.claim(&s)?;
            let granted = alice.start(&s)?.writable.unwrap_or_default();
            assert_eq!(granted.len(), 1, "only its own root: {granted:?}");
        }
        Ok(())
    }

    #[test]
    fn a_tenants_process_gets_its_own_state_root() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let claims = Claims::default();
        let s = server(
            &["--data", "${CEM_TENANT_DIR}/graph.json"],
            &[("MEMORY_FILE_PATH", "${CEM_TENANT_DIR}/memory.jsonl")],
        );
        let alice = tenancy("alice", dir.path(), &claims).start(&s)?;
        let root = dir.path().join("alice").join("memory");
        let env: HashMap<_, _> = alice.env.iter().cloned().collect();
        assert_eq!(
            env.get("MEMORY_FILE_PATH").map(String::as_str),
            Some(root.join("memory.jsonl").to_str().unwrap_or_default())
        );
        assert_eq!(env.get("HOME").map(PathBuf::from), Some(root.join("home")));
        assert_eq!(alice.args[1], root.join("graph.json").display().to_string());
        assert_eq!(alice.cwd, Some(root.clone()));
        assert!(root.join("tmp").is_dir());
        // The local tenant keeps the operator's environment.
        let mut local = tenancy("local", dir.path(), &claims);
        local.local = true;
        let start = local.start(&s)?;
        assert!(start.env.iter().all(|(k, _)| k != "HOME"));
        assert!(start.writable.is_none());
        Ok(())
    }
}
