//! A caller and the tenant whose data it sees.

use std::collections::BTreeSet;

use sha2::{Digest, Sha256};

use crate::Ability;

/// The tenant of stdio, of the CLI and of HTTP without per-person
/// credentials: today's data directory layout.
pub const LOCAL_TENANT: &str = "local";

/// What a static token's tenant id is its name after.
pub const STATIC_TENANT_PREFIX: &str = "token-";

/// Who is calling: the tenant whose workspace, skills, vault, sessions and
/// audit trail it gets, and what it may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The tenant id; also the name of its directory under
    /// `<data>/tenants/` (safe as a file name by construction).
    pub tenant: String,
    /// A name for people: the token's name or the token's `sub`.
    pub name: String,
    abilities: BTreeSet<Ability>,
}

impl Principal {
    /// The single local user, who may do everything.
    pub fn local() -> Self {
        Self {
            tenant: LOCAL_TENANT.to_string(),
            name: LOCAL_TENANT.to_string(),
            abilities: BTreeSet::from([Ability::Admin]),
        }
    }

    /// The principal of static token `name` (config-checked: a safe name).
    pub fn named(name: &str) -> Self {
        Self {
            tenant: format!("{STATIC_TENANT_PREFIX}{name}"),
            name: name.to_string(),
            abilities: BTreeSet::from([Ability::Admin]),
        }
    }

    /// The principal of subject `sub` of `issuer`. The tenant id keeps a
    /// readable part of `sub` and a digest of both, so two subjects (or two
    /// issuers' same subject) never share a tenant and no `sub` can form a
    /// path.
    pub fn subject(issuer: &str, sub: &str, abilities: BTreeSet<Ability>) -> Self {
        let digest = Sha256::digest(format!("{issuer}\n{sub}").as_bytes());
        let hex: String = digest[..10].iter().map(|b| format!("{b:02x}")).collect();
        let readable: String = sub
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
            .take(32)
            .collect();
        let tenant = if readable.is_empty() {
            format!("oidc-{hex}")
        } else {
            format!("oidc-{readable}-{hex}")
        };
        Self {
            tenant,
            name: sub.to_string(),
            abilities,
        }
    }

    /// A principal another node of the deployment authenticated and
    /// vouches for (on the internal endpoint, which only nodes can reach).
    pub fn vouched(tenant: String, name: String, abilities: BTreeSet<Ability>) -> Self {
        Self {
            tenant,
            name,
            abilities,
        }
    }

    /// What this principal may do.
    pub fn abilities(&self) -> &BTreeSet<Ability> {
        &self.abilities
    }

    /// Whether this principal may do what `ability` covers.
    pub fn can(&self, ability: Ability) -> bool {
        self.abilities.contains(&Ability::Admin) || self.abilities.contains(&ability)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenant_ids_are_safe_and_distinct() {
        let a = Principal::subject("https://idp", "../../etc", BTreeSet::new());
        assert!(
            !a.tenant.contains('/') && !a.tenant.contains(".."),
            "{}",
            a.tenant
        );
        let b = Principal::subject("https://idp", "alice", BTreeSet::new());
        let c = Principal::subject("https://other", "alice", BTreeSet::new());
        let d = Principal::subject("https://idp", "alice!", BTreeSet::new());
        assert_ne!(b.tenant, c.tenant);
        assert_ne!(b.tenant, d.tenant, "same readable part, different subject");
        assert!(b.tenant.starts_with("oidc-alice-"));
        assert_ne!(Principal::named("local").tenant, LOCAL_TENANT);
    }

    #[test]
    fn admin_implies_every_ability() {
        let p = Principal::subject("i", "s", BTreeSet::from([Ability::Admin]));
        assert!(Ability::ALL.iter().all(|a| p.can(*a)));
        let q = Principal::subject("i", "s", BTreeSet::from([Ability::ToolsRead]));
        assert!(q.can(Ability::ToolsRead) && !q.can(Ability::Execute));
    }
}
