//! What one node last pulled of one tenant (or vault scope), so an
//! unchanged tenant costs a generation check and nothing more.

use std::collections::{HashMap, HashSet};

use tokio::sync::Mutex;

/// A node's view of one tenant's shared state. Each part has its own lock,
/// held across a pull or a push so two calls of one node never interleave
/// their copies.
#[derive(Debug, Default)]
pub struct Replica {
    pub skills: Mutex<Option<i64>>,
    pub workspace: Mutex<WorkspaceCopy>,
    pub vault: Mutex<VaultCopy>,
}

/// The workspace as last pulled or pushed.
#[derive(Debug, Default)]
pub struct WorkspaceCopy {
    /// The tenant's `workspace_gen` the copy matches (None: never pulled).
    pub generation: Option<i64>,
    /// Each file: its digest and the stamp it had when written or read.
    pub files: HashMap<String, Known>,
}

#[derive(Debug, Clone)]
pub struct Known {
    pub sha256: String,
    pub size: u64,
    pub modified_ns: i128,
}

/// A vault as last synchronised.
#[derive(Debug, Default)]
pub struct VaultCopy {
    /// The highest `cem_vault.id` taken in.
    pub last_id: i64,
    /// Tokens the store holds (pulled or pushed).
    pub shared: HashSet<String>,
    /// The vault object these describe: a vault evicted and made anew
    /// starts over.
    pub vault: usize,
}
