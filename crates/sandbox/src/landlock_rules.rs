//! Landlock: read and execute everywhere in the (already minimal) root,
//! write only in the workspace, /tmp and /dev/shm; signals and abstract
//! unix sockets stay inside the sandbox; no TCP when the network is off.

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, RulesetAttr, RulesetCreatedAttr,
    RulesetStatus, Scope, path_beneath_rules,
};

use crate::{SandboxError, Spec};

/// Applies the ruleset to the current thread (and what it execs). Returns
/// "full", "partial" (the kernel lacks some rights) or "off" (no Landlock).
pub fn restrict(spec: &Spec) -> Result<&'static str, SandboxError> {
    let abi = ABI::V6;
    let err = |e: landlock::RulesetError| SandboxError::Landlock(e.to_string());
    let mut ruleset = landlock::Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(abi))
        .map_err(err)?
        .scope(Scope::from_all(abi))
        .map_err(err)?;
    if !spec.network {
        ruleset = ruleset
            .handle_access(AccessNet::from_all(abi))
            .map_err(err)?;
    }
    let mut writable = vec![
        spec.workspace_target.clone(),
        "/tmp".into(),
        "/dev/shm".into(),
    ];
    writable.retain(|p| p.exists());
    let devices = [
        "/dev/null",
        "/dev/zero",
        "/dev/full",
        "/dev/random",
        "/dev/urandom",
    ];
    let status = ruleset
        .create()
        .map_err(err)?
        .add_rules(path_beneath_rules(["/"], AccessFs::from_read(abi)))
        .map_err(err)?
        .add_rules(path_beneath_rules(&writable, AccessFs::from_all(abi)))
        .map_err(err)?
        .add_rules(path_beneath_rules(
            devices,
            AccessFs::from_read(abi) | AccessFs::WriteFile | AccessFs::IoctlDev,
        ))
        .map_err(err)?
        .restrict_self()
        .map_err(err)?;
    Ok(match status.ruleset {
        RulesetStatus::FullyEnforced => "full",
        RulesetStatus::PartiallyEnforced => "partial",
        RulesetStatus::NotEnforced => "off",
    })
}
