//! Our side of each upstream session: it listens for tool-list changes.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use rmcp::ClientHandler;
use rmcp::RoleClient;
use rmcp::model::{ClientConfig, Implementation};
use rmcp::service::NotificationContext;
use tokio::sync::Notify;

/// Marks the server's tool list stale and wakes whoever rebuilds catalogs.
#[derive(Clone)]
pub struct Handler {
    pub stale: Arc<AtomicBool>,
    pub changed: Arc<Notify>,
    /// Bumped so the policy lists the tools again before the next call.
    pub generation: Arc<AtomicU64>,
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        let mut info = ClientConfig::default();
        info.client_info = Implementation::new("code-execution-mcp", env!("CARGO_PKG_VERSION"));
        info
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.stale.store(true, Ordering::SeqCst);
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.changed.notify_waiters();
    }
}
