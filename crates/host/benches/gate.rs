//! What the policy gate and the audit log add to an upstream tool call.
//!
//! `cargo bench -p cem-host --bench gate` (needs `node` and the test
//! servers `scripts/test` installs under tests/js/node_modules). One process,
//! one running server-everything over stdio: rounds alternate a block of
//! plain `Manager::call`s (an rmcp client, no policy) with a block of
//! `Gate::call`s (pins checked against the live list, a policy with rules
//! and a budget decided, a decision and a call line appended to the audit
//! log on disk) of `echo`. Prints one JSON line: the median per-call time of
//! each, their ratio, and the audit append alone.

use std::path::PathBuf;
use std::time::Instant;

use cem_audit::AuditLog;
use cem_host::gate::{Caller, Execution, Gate};
use cem_policy::{Budget, Decision, Pattern, Policy, Rule};
use cem_store::PinStore;
use serde_json::{Value, json};

const ROUNDS: usize = 15;
const BLOCK: usize = 200;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let everything =
        root.join("tests/js/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    if !everything.exists() {
        return Err(format!("{} is missing; run scripts/test once", everything.display()).into());
    }
    let dir = tempfile::tempdir()?;
    let text =
        json!({"mcpServers": {"everything": {"command": "node", "args": [everything, "stdio"]}}})
            .to_string();
    let config = cem_config::parse_str(&text, &dir.path().join("c.json"), &|_| None)?.config;
    let manager = cem_upstream::Manager::new(&config, dir.path().join("cache"));
    let pattern = |p: &str| Pattern::parse(p).map_err(|e| e.to_string());
    let policy = Policy {
        rules: vec![
            Rule {
                pattern: pattern("everything.echo")?,
                decision: Decision::Allow,
            },
            Rule {
                pattern: pattern("github.delete_*")?,
                decision: Decision::Deny,
            },
            Rule {
                pattern: pattern("memory.*")?,
                decision: Decision::Ask,
            },
        ],
        budgets: vec![Budget {
            pattern: pattern("everything.*")?,
            limit: 10_000_000,
        }],
        ..Policy::default()
    };
    let gate = Gate::new(
        policy,
        PinStore::new(&dir.path().join("pins")),
        AuditLog::new(dir.path().join("audit").join("audit.jsonl"), 1 << 30, 2),
    );
    let exec = Execution::new(
        &gate,
        Caller::Code,
        "bench",
        None,
        None,
        "no approver in a benchmark",
    );
    let arguments = json!({"message": "hello"}).as_object().cloned();
    let shown_args = Value::Object(arguments.clone().unwrap_or_default());
    let shown = move || shown_args.clone();
    let runtime = tokio::runtime::Runtime::new()?;
    let report = runtime.block_on(async {
        let direct = || async {
            let t0 = Instant::now();
            for _ in 0..BLOCK {
                manager
                    .call("everything", "echo", arguments.clone(), None)
                    .await
                    .map_err(|e| e.to_string())?;
            }
            Ok::<f64, String>(t0.elapsed().as_secs_f64() * 1e6 / BLOCK as f64)
        };
        let gated = || async {
            let t0 = Instant::now();
            for _ in 0..BLOCK {
                gate.call(
                    &manager,
                    &exec,
                    "everything",
                    "echo",
                    arguments.clone(),
                    &shown,
                )
                .await?;
            }
            Ok::<f64, String>(t0.elapsed().as_secs_f64() * 1e6 / BLOCK as f64)
        };
        direct().await?;
        gated().await?;
        let (mut plain, mut policed, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
        for round in 0..ROUNDS {
            // Alternate which goes first, so neither always follows the other.
            let (a, b) = if round % 2 == 0 {
                let a = direct().await?;
                (a, gated().await?)
            } else {
                let b = gated().await?;
                (direct().await?, b)
            };
            plain.push(a);
            policed.push(b);
            ratios.push(b / a);
        }
        manager.shutdown().await;
        Ok::<_, String>((plain, policed, ratios))
    });
    let (plain, policed, ratios) = report?;
    let log = AuditLog::new(dir.path().join("alone.jsonl"), 1 << 30, 2);
    let n = 20_000;
    let t0 = Instant::now();
    for i in 0..n {
        log.append("call", json!({"exec": "0123456789abcdef0123456789abcdef", "caller": "code", "session": "connection:1",
            "tool": "everything.echo", "args_digest": "sha256:0000000000000000000000000000000000000000000000000000000000000000",
            "args_bytes": 19, "result_bytes": 80, "ms": 0.1, "ok": true, "error": null, "n": i}))?;
    }
    let append_us = t0.elapsed().as_secs_f64() * 1e6 / n as f64;
    let median = |mut v: Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    let (p, g) = (median(plain), median(policed));
    println!(
        "{}",
        json!({"rounds": ROUNDS, "calls_per_block": BLOCK, "call_us_no_policy": p, "call_us_policy_audit": g,
               "added_us": g - p, "ratio_median_of_rounds": median(ratios), "audit_append_us": append_us})
    );
    Ok(())
}
