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
//! * [`test_postgres`] — a throwaway PostgreSQL for tests (initdb + pg_ctl).
#![deny(missing_docs)]

pub mod test_postgres;
