//! The keel sync relay: a server between keel clients and the app's own PostgreSQL.
//!
//! Clients connect over WebSocket and authenticate with a JWT. They upload batches of
//! operations (insert, patch with only the changed fields, delete), which the relay
//! applies to PostgreSQL in one transaction per batch, exactly once per
//! (client id, sequence). Changes made in PostgreSQL by anyone (the relay, the app's
//! backend, `psql`) come back through logical replication and reach every connected
//! client whose scopes hold the row. `docs/sync.md` is the protocol and its guarantees.
//!
//! The modules:
//!
//! * [`sync_schema`] — which collections of the `.fbs` sync, and the column of each field;
//! * [`ddl`] — the PostgreSQL DDL for them, and a check of a live database against it;
//! * [`error`] — the relay's one error type;
//! * [`test_postgres`] — a throwaway PostgreSQL for tests (initdb + pg_ctl).
#![deny(missing_docs)]

pub mod ddl;
pub mod error;
pub mod sync_schema;
pub mod test_postgres;
