//! [`Shared`]: what every session of one relay shares — its config, the synced
//! collections and scopes, the token checks, the connection pool and the
//! replication stream's output. `server` builds it; each `session` reads it.

use tokio::sync::broadcast;

use crate::auth::Verifier;
use crate::config::Config;
use crate::pool::Pool;
use crate::replication::Feed;
use crate::scope::Scope;
use crate::sync_schema::SyncSchema;

/// What every session shares.
#[derive(Debug)]
pub struct Shared {
    /// The config.
    pub config: Config,
    /// The synced collections.
    pub schema: SyncSchema,
    /// The configured scopes, checked against the schema.
    pub scopes: Vec<Scope>,
    /// Token checks.
    pub verifier: Verifier,
    /// Connections for uploads and snapshots.
    pub pool: Pool,
    /// The replication stream's output.
    pub feed: broadcast::Sender<Feed>,
}
