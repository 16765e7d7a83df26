//! The relay's one error type: what can stop the relay or one of its commands.
//!
//! Problems a *client* causes (a bad token, a malformed frame, an operation outside
//! its scopes) are not errors of the relay: they are answered with typed frames
//! ([`crate::protocol`]) and the relay carries on. [`Error`] is for the operator:
//! a bad config or schema file, a database the relay cannot use.

use std::path::PathBuf;

/// What went wrong in the relay or one of its commands.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file (config, schema, JWKS) could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The config file is not valid TOML or misses a required setting.
    #[error("config {path}: {message}")]
    Config {
        /// The config file.
        path: PathBuf,
        /// What is wrong, with the setting's name.
        message: String,
    },
    /// The `.fbs` file does not parse or resolve (bad sync markings included: a synced
    /// table that is not a collection, an unknown conflict rule, a counter on a string).
    #[error("schema: {0}")]
    Schema(#[from] keel_schema::ParseError),
    /// A scope filter in the config does not parse or names an unknown field.
    #[error("scope on {collection}: {message}")]
    Scope {
        /// The collection the scope is for.
        collection: String,
        /// What is wrong.
        message: String,
    },
    /// A key in the JWKS file or an HS256 secret cannot be used.
    #[error("auth keys: {0}")]
    Keys(String),
    /// PostgreSQL refused a statement or the connection failed.
    #[error("database: {0}")]
    Database(#[from] tokio_postgres::Error),
    /// The replication stream could not start or ended (the connection, or
    /// PostgreSQL refusing the slot: in use by another relay, or invalidated).
    #[error("replication stream: {0}")]
    Replication(#[from] pgwire_replication::PgWireError),
    /// PostgreSQL returned a snapshot row that is not JSON text (not expected: the
    /// relay asks it for `jsonb` rendered as text).
    #[error("snapshot row: {0}")]
    SnapshotRow(String),
    /// The database's tables do not match the schema (the report names each difference).
    #[error("the database does not match the schema:\n{0}")]
    SchemaMismatch(String),
    /// The listening socket could not be opened or the server failed.
    #[error("server: {0}")]
    Serve(std::io::Error),
}
