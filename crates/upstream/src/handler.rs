//! Our side of each upstream session: it listens for tool-list changes.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rmcp::ClientHandler;
use rmcp::RoleClient;
use rmcp::model::{ClientConfig, Implementation, ProgressNotificationParam};
use rmcp::service::NotificationContext;

/// Where the progress of one call goes: (done, total, message).
pub type ProgressFn = Arc<dyn Fn(f64, Option<f64>, Option<String>) + Send + Sync>;

/// Calls in flight that asked for progress, by progress token.
pub type ProgressRoutes = Arc<std::sync::Mutex<std::collections::HashMap<String, ProgressFn>>>;

/// Passes the server's list_changed notices on (coalesced, see
/// [`crate::relist`]); hands a call's progress notifications to whoever
/// asked for them.
#[derive(Clone)]
pub struct Handler {
    pub notices: crate::relist::Notices,
    /// Bumped so the policy lists the tools again before the next call.
    pub generation: Arc<AtomicU64>,
    pub progress: ProgressRoutes,
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        let mut info = ClientConfig::default();
        info.client_info = Implementation::new("code-execution-mcp", env!("CARGO_PKG_VERSION"));
        info
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let token = progress_key(&params.progress_token);
        let route = self
            .progress
            .lock()
            .ok()
            .and_then(|r| r.get(&token).cloned());
        if let Some(route) = route {
            route(params.progress, params.total, params.message);
        }
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.notices.notice();
    }
}

/// A progress token as a map key (tokens are strings or numbers).
pub fn progress_key(token: &rmcp::model::ProgressToken) -> String {
    serde_json::to_string(&token.0).unwrap_or_default()
}
