//! Which isolation layers work on this host, found by starting a real
//! sandboxed interpreter and asking it what it can see.

use std::path::Path;
use std::process::Stdio;

use serde::Serialize;

use crate::launcher::{REPORT_PREFIX, SETUP_FAILED};
use crate::{Cgroup, InterpreterLayout, Limits, Spec, command};

/// One layer, on or off, and why.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Layer {
    pub name: &'static str,
    pub on: bool,
    pub detail: String,
}

/// The result of [`probe`].
#[derive(Debug, Clone, Serialize)]
pub struct Layers {
    /// The sandbox could be built at all (namespaces, new root).
    pub isolated: bool,
    pub layers: Vec<Layer>,
    /// Why the sandbox could not start, when it could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

const CHECK: &str = r#"
import json, os
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return line.split(":", 1)[1].strip()
ifaces = [l.split(":")[0].strip() for l in open("/proc/net/dev").readlines()[2:]]
procs = [p for p in os.listdir("/proc") if p.isdigit()]
print(json.dumps({
    "uid": os.getuid(), "euid": os.geteuid(), "gid": os.getgid(),
    "seccomp": status("Seccomp"), "no_new_privs": status("NoNewPrivs"),
    "cap_eff": status("CapEff"), "cap_bnd": status("CapBnd"),
    "ifaces": ifaces, "procs": len(procs),
    "etc_shadow": os.path.exists("/etc/shadow"), "root_entries": sorted(os.listdir("/")),
}))
"#;

/// Starts `python` (laid out by `layout`) in the sandbox with `exe` as the
/// launcher, and reports every layer.
pub fn probe(exe: &Path, layout: &InterpreterLayout, workspace: &Path) -> Layers {
    let mut layers = Vec::new();
    // One process probes once per engine (one engine per tenant): each
    // probe gets a cgroup of its own.
    static PROBES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = PROBES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let cgroup = Cgroup::create(&format!("probe-{}-{n}", std::process::id()), 256, 64);
    layers.push(Layer {
        name: "cgroup",
        on: cgroup.is_ok(),
        detail: match &cgroup {
            Ok(cg) => format!("memory and pids limits via {}", cg.dirs()[0].display()),
            Err(e) => format!(
                "no cgroup ({e}); memory falls back to RLIMIT_AS, processes to RLIMIT_NPROC"
            ),
        },
    });
    let spec = Spec {
        program: layout.executable.clone(),
        argv: vec![
            "python3".into(),
            "-I".into(),
            "-S".into(),
            "-c".into(),
            CHECK.into(),
        ],
        env: vec![("CEM_SANDBOX_REPORT".into(), "1".into())],
        ro_binds: layout.binds.clone(),
        symlinks: layout.symlinks.clone(),
        workspace: Some(workspace.to_path_buf()),
        workspace_target: "/workspace".into(),
        cwd: "/workspace".into(),
        limits: Limits::default(),
        network: false,
        cgroups: cgroup
            .as_ref()
            .map(|c| c.dirs().to_vec())
            .unwrap_or_default(),
        zygote: false,
    };
    let output = command(exe, &spec)
        .map_err(|e| e.to_string())
        .and_then(|mut c| c.stdin(Stdio::null()).output().map_err(|e| e.to_string()));
    let output = match output {
        Ok(o) => o,
        Err(e) => return failed(layers, format!("cannot start the launcher: {e}")),
    };
    let stderr = String::from_utf8_lossy(&output.stderr);
    if output.status.code() == Some(SETUP_FAILED) || !output.status.success() {
        let reason = stderr
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("no output")
            .to_string();
        return failed(layers, reason);
    }
    let report: serde_json::Value = stderr
        .lines()
        .find_map(|l| l.strip_prefix(REPORT_PREFIX))
        .and_then(|j| serde_json::from_str(j).ok())
        .unwrap_or_default();
    let seen: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap_or_default();

    let uid = seen["uid"].as_u64().unwrap_or(0);
    let mut add = |name, on: bool, detail: String| layers.push(Layer { name, on, detail });
    add(
        "namespaces",
        true,
        "user, mount, pid, net, ipc and uts namespaces".into(),
    );
    add(
        "unprivileged uid",
        uid != 0 && seen["euid"].as_u64() != Some(0),
        format!("runs as uid {uid} inside and outside its user namespace"),
    );
    let root = seen["root_entries"]
        .as_array()
        .map(|a| a.len())
        .unwrap_or(0);
    add(
        "minimal root",
        seen["etc_shadow"] == false,
        format!(
            "pivot_root into a read-only tmpfs root with {root} entries; no host /etc, /root or /home"
        ),
    );
    let lo_only = seen["ifaces"]
        .as_array()
        .is_some_and(|a| a.iter().all(|i| i == "lo"));
    add(
        "network off",
        lo_only,
        "own network namespace with only loopback; inet sockets refused".into(),
    );
    let landlock = report["landlock"].as_str().unwrap_or("off");
    add(
        "landlock",
        landlock == "full" || landlock == "partial",
        format!("{landlock}: writes only to /workspace, /tmp and /dev/shm"),
    );
    add(
        "seccomp",
        seen["seccomp"] == "2",
        format!(
            "syscalls reviewed through {} (number {}; newer ones answer ENOSYS), {} of them denied, \
             plus non-unix sockets and namespace clones",
            crate::seccomp::REVIEWED_KERNEL,
            crate::seccomp::REVIEWED_THROUGH,
            crate::seccomp::DENIED.len()
        ),
    );
    add(
        "no_new_privs",
        seen["no_new_privs"] == "1" && seen["cap_eff"] == "0000000000000000",
        "no capabilities, empty bounding set, no_new_privs".into(),
    );
    add(
        "rlimits",
        true,
        "address space, CPU time, file size, open files, no core dumps".into(),
    );
    Layers {
        isolated: true,
        layers,
        error: None,
    }
}

fn failed(mut layers: Vec<Layer>, reason: String) -> Layers {
    layers.push(Layer {
        name: "namespaces",
        on: false,
        detail: reason.clone(),
    });
    Layers {
        isolated: false,
        layers,
        error: Some(reason),
    }
}
