//! The keel sync relay: a server between keel clients and the app's own PostgreSQL.
//!
//! Clients connect over WebSocket and authenticate with a JWT. They upload batches of
//! operations (insert, patch with only the changed fields, delete), which the relay
//! applies to PostgreSQL in one transaction per batch, exactly once per
//! (client id, sequence). Changes made in PostgreSQL by anyone (the relay, the app's
//! backend, `psql`) come back through logical replication and reach every connected
//! client whose scopes hold the row. All the relay's state lives in PostgreSQL, so
//! several relays can serve one database. `docs/sync.md` is the protocol and its
//! guarantees.
//!
//! The modules, from the outside in:
//!
//! * [`server`] — start a relay from a [`config::Config`]: checks, `/health`, `/sync`;
//! * [`session`] — one client connection's state machine;
//! * [`protocol`] — the frames on the wire;
//! * [`auth`] — JWT checks (HS256 secrets, RS256 / EdDSA keys from a JWKS file);
//! * [`scope`] — which rows a client may see and write;
//! * [`upload`] — the up path: one batch, one transaction, exactly once;
//!   `set_apply` applies it in a few statements per batch;
//! * `op` — an upload operation, parsed and checked, which both apply;
//! * [`replication`] — the down path's source: the relay's slot, as transactions;
//! * [`pgoutput`] — the decoder of logical replication messages;
//! * [`rows`] — rows as clients receive them (JSON);
//! * [`state`] — the relay's own tables (`keel_relay.*`): op ledger, checkpoints;
//! * [`sync_schema`] — which collections of the `.fbs` sync, and the column of each field;
//! * [`ddl`] — the PostgreSQL DDL for them, and a check of a live database against it;
//! * [`pool`] — PostgreSQL connections for uploads and snapshots;
//! * [`config`] — the TOML config file;
//! * [`error`] — the relay's one error type;
//! * [`test_postgres`] — a throwaway PostgreSQL for tests (initdb + pg_ctl).
#![deny(missing_docs)]

pub mod auth;
pub mod config;
pub mod ddl;
pub mod error;
mod op;
pub mod pgoutput;
pub mod pool;
pub mod protocol;
pub mod replication;
pub mod rows;
pub mod scope;
pub mod server;
pub mod session;
mod set_apply;
pub mod shared;
pub mod state;
pub mod sync_schema;
pub mod test_postgres;
pub mod upload;
