//! When a tenant last used something it may be asked to give back for
//! idleness (`sandbox.tenant_idle_seconds`): its search catalog, what its
//! searches made of its records.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The time of the last use; none until the first.
#[derive(Debug, Default)]
pub(crate) struct LastUse(Mutex<Option<Instant>>);

impl LastUse {
    /// Notes a use now.
    pub(crate) fn touch(&self) {
        if let Ok(mut at) = self.0.lock() {
            *at = Some(Instant::now());
        }
    }

    /// Whether `every` has passed since the last use (or there was none);
    /// if so, notes a use now. For work done at most that often.
    pub(crate) fn due_every(&self, every: Duration) -> bool {
        let Ok(mut at) = self.0.lock() else {
            return false;
        };
        let due = at.is_none_or(|at| at.elapsed() >= every);
        if due {
            *at = Some(Instant::now());
        }
        due
    }

    /// Whether it was used, the last time `idle` ago or more.
    pub(crate) fn idle_for(&self, idle: Duration) -> bool {
        self.0
            .lock()
            .is_ok_and(|at| at.is_some_and(|at| at.elapsed() >= idle))
    }
}
