//! What can go wrong talking to the store.

/// A store failure, worded for the agent or operator who sees it.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("store.url is not a usable PostgreSQL URL: {reason}")]
    Url { reason: String },
    #[error(
        "the shared store (PostgreSQL) cannot be reached: {0}; check that it runs and that store.url is right, then retry"
    )]
    Pool(#[from] deadpool_postgres::PoolError),
    #[error(
        "the shared store (PostgreSQL) cannot be reached: {0}; check that it runs and that store.url is right, then retry"
    )]
    Unreachable(String),
    #[error(
        "the shared store (PostgreSQL) failed: {0}; retry, and tell the operator if it persists"
    )]
    Database(String),
    #[error("the local copy of shared state could not be written: {0}")]
    Local(String),
    #[error("{0}")]
    Conflict(String),
}

impl From<tokio_postgres::Error> for ClusterError {
    fn from(e: tokio_postgres::Error) -> Self {
        use std::error::Error as _;
        // The driver's own words ("error connecting to server") hide why;
        // its source says it (connection refused, password rejected).
        let text = match (e.as_db_error(), e.source()) {
            (Some(db), _) => db.to_string(),
            (None, Some(source)) => format!("{e}: {source}"),
            (None, None) => e.to_string(),
        };
        if e.as_db_error().is_none() && (e.is_closed() || text.starts_with("error connecting")) {
            ClusterError::Unreachable(text)
        } else {
            ClusterError::Database(text)
        }
    }
}

impl From<tokio::task::JoinError> for ClusterError {
    fn from(e: tokio::task::JoinError) -> Self {
        ClusterError::Local(format!("a background task failed: {e}"))
    }
}
