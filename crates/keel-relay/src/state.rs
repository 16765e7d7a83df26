//! The relay's own state, kept in PostgreSQL (schema `keel_relay`) so that several
//! relays can serve one database behind a load balancer:
//!
//! * `keel_relay.clients` — one row per client id: the user it belongs to and the
//!   highest sequence number applied. An upload locks its client's row, so two
//!   relays never apply one client's batches at once;
//! * `keel_relay.op_ledger` — one row per applied operation, keyed by
//!   (client id, sequence), holding its result: a replayed upload answers from here
//!   and applies nothing twice;
//! * `keel_relay.relays` — one row per relay: its replication slot and the LSN it
//!   has streamed to (its checkpoint), with when it last recorded that. The record
//!   follows the stream by up to a second and an idle relay leaves it alone (see
//!   [`crate::replication`]); a restart resumes from the slot, never from this row.
//!
//! [`install`] creates them (and the row-version machinery of [`crate::ddl`]) under
//! an advisory lock, so relays starting together do not race.

use tokio_postgres::Client;

use crate::ddl::VERSION_MACHINERY;
use crate::error::Error;

/// The advisory lock key relays take while installing their state.
const INSTALL_LOCK: i64 = 0x6b65_656c_7265_6c61; // "keelrela"

const STATE_TABLES: &str = r#"
CREATE TABLE IF NOT EXISTS keel_relay.clients (
  client_id text PRIMARY KEY,
  subject text NOT NULL,
  last_seq bigint NOT NULL DEFAULT 0,
  updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS keel_relay.op_ledger (
  client_id text NOT NULL REFERENCES keel_relay.clients (client_id) ON DELETE CASCADE,
  seq bigint NOT NULL,
  result jsonb NOT NULL,
  applied_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (client_id, seq)
);
CREATE TABLE IF NOT EXISTS keel_relay.relays (
  relay_id text PRIMARY KEY,
  slot_name text NOT NULL,
  streamed_lsn pg_lsn,
  heartbeat timestamptz NOT NULL DEFAULT now()
);
"#;

/// Creates the relay's schema and tables if missing (idempotent, safe to race).
pub async fn install(client: &mut Client) -> Result<(), Error> {
    let tx = client.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&INSTALL_LOCK])
        .await?;
    tx.batch_execute(VERSION_MACHINERY).await?;
    tx.batch_execute(STATE_TABLES).await?;
    tx.commit().await?;
    Ok(())
}

/// Records this relay and the slot it reads.
pub async fn register_relay(client: &Client, relay_id: &str, slot: &str) -> Result<(), Error> {
    client
        .execute(
            "INSERT INTO keel_relay.relays (relay_id, slot_name) VALUES ($1, $2) \
             ON CONFLICT (relay_id) DO UPDATE SET slot_name = EXCLUDED.slot_name, heartbeat = now()",
            &[&relay_id, &slot],
        )
        .await?;
    Ok(())
}

/// Records how far this relay has streamed (its checkpoint).
pub async fn record_streamed(client: &Client, relay_id: &str, lsn: &str) -> Result<(), Error> {
    client
        .execute(
            "UPDATE keel_relay.relays SET streamed_lsn = $2::text::pg_lsn, heartbeat = now() \
             WHERE relay_id = $1",
            &[&relay_id, &lsn],
        )
        .await?;
    Ok(())
}
