//! The sync outbox: every local write to a synced collection, as the operations
//! the relay applies (`docs/sync.md`), appended in the same SQLite transaction as
//! the write itself.
//!
//! Three tables, made by the first synced write (a database that never writes a
//! `(sync)` collection has none of them):
//!
//! * `keel_sync_outbox` — one row per operation, its `seq` the protocol's sequence
//!   number, never handed out twice: a crash between upload and ack resends the
//!   same numbers and the relay's ledger answers them once, so a number that came
//!   back would be answered too and its write lost. An operation is *pending*
//!   until acked; an acked one keeps its row version and ack LSN until the
//!   download has caught up with it (the client re-applies it over older
//!   downloads, so its own write never flickers away), then it goes.
//! * `keel_sync_rows` — per downloaded row: the version last seen from the server
//!   (`version`), the version the last ack of this client's own write gave it
//!   (`acked`), and the server's row as JSON (`row`: what a refused operation
//!   rolls back to, unknown fields included).
//! * `keel_sync_state` — name → value: the install's client id, the last LSN,
//!   `seq_floor`.
//!
//! Sequence numbers: each operation gets one more than the highest number
//! handed out (read once per write, then counted on for its other operations):
//! the larger of the outbox's `max(seq)` and `seq_floor`, the highest number
//! ever removed from the outbox, which the trigger
//! `keel_sync_outbox_floor` raises on every delete, whatever statement deletes.
//! Both are reads, so numbering adds no page to the commit: `AUTOINCREMENT`, which
//! the outbox had before, rewrote its row of `sqlite_sequence` in every synced
//! commit. A file an earlier version made keeps that `AUTOINCREMENT` table (and
//! its page per commit; numbers it is given explicitly still move its sequence):
//! every open gives it the trigger and raises `seq_floor` to its
//! `sqlite_sequence` before any write ([`upgrade`]), since the operations it
//! removed before then left no other mark. A build from before this change that
//! opens a file of the new shape leaves the number to SQLite (`max(seq) + 1`);
//! the trigger `keel_sync_outbox_above_floor` moves such an operation above
//! `seq_floor`.
//!
//! What a write becomes, decided from the change the transaction recorded (old
//! and new bytes), so every write path — insert, update, upsert, change requests,
//! key moves (a delete and an insert), cascades and nullifications of the delete
//! rules — is covered by one rule: an insert carries every field; an update
//! carries only the fields whose value changed (a change request that sets a
//! field to the value it has sends nothing), `(sync: counter)` fields as the
//! difference; a delete carries the key. Union fields do not sync (their JSON
//! needs a type beside the value; the relay keeps them as `jsonb`).
//!
//! Cost: a collection without `(sync)` pays nothing (the transaction records its
//! changes only when something else asks for them). A synced write costs its
//! recording (the old bytes), its JSON renderings, field by field (an insert:
//! every synced field; an update: each synced field of the old and the new
//! object, to find the changed ones, never either object whole) and one
//! statement, the outbox INSERT; the base version is read at upload, not here.
//! The outbox has no index but its sequence numbers, which only grow, so an
//! operation lands on the table's last page: a synced commit writes one page
//! more than the same commit unsynced.

use keel_schema::{FieldType, Object, Schema, SyncRule, Table};
use rusqlite::Connection;
use serde_json::{Map, Value as Json};

use crate::base::change::{Change, ChangeOp};
use crate::layout::side_table::table_exists;

/// The outbox table.
pub(crate) const OUTBOX: &str = "keel_sync_outbox";

/// Every table of the sync state, created together, and two triggers: one keeps
/// `seq_floor`, the other moves an operation numbered at or below it above it.
/// This build's INSERT never needs the second; a build from before this outbox
/// opening the file does: it leaves the number to SQLite, which takes
/// `max(seq) + 1` and would reuse removed numbers. `IF NOT EXISTS` throughout: it
/// also runs on files whose tables an earlier version made (see [`create`]),
/// and drops the index by `(collection, key)` those had: it put a second page,
/// at a random place in the index, into every synced commit, where the outbox's
/// own rows are appended to its last page. The download finds a row's operations
/// without it (`sync::apply`).
pub(crate) const CREATE: &str = "
CREATE TABLE IF NOT EXISTS keel_sync_outbox (
    seq INTEGER PRIMARY KEY,
    collection TEXT NOT NULL,
    key TEXT NOT NULL,
    op TEXT NOT NULL,
    fields TEXT,
    deltas TEXT,
    base INTEGER NOT NULL,
    acked_version INTEGER,
    acked_lsn INTEGER
);
DROP INDEX IF EXISTS keel_sync_outbox_key;
CREATE TABLE IF NOT EXISTS keel_sync_rows (
    collection TEXT NOT NULL,
    key TEXT NOT NULL,
    version INTEGER NOT NULL,
    acked INTEGER NOT NULL DEFAULT 0,
    row TEXT,
    PRIMARY KEY (collection, key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS keel_sync_state (name TEXT PRIMARY KEY, value) WITHOUT ROWID;
CREATE TRIGGER IF NOT EXISTS keel_sync_outbox_floor AFTER DELETE ON keel_sync_outbox BEGIN
    INSERT INTO keel_sync_state (name, value) VALUES ('seq_floor', old.seq)
    ON CONFLICT (name) DO UPDATE SET value = excluded.value WHERE excluded.value > value;
END;
CREATE TRIGGER IF NOT EXISTS keel_sync_outbox_above_floor AFTER INSERT ON keel_sync_outbox
WHEN new.seq <= (SELECT value FROM keel_sync_state WHERE name = 'seq_floor') BEGIN
    UPDATE keel_sync_outbox
    SET seq = (SELECT value FROM keel_sync_state WHERE name = 'seq_floor') + 1
    WHERE seq = new.seq;
END;
";

/// Raises `seq_floor` to the `AUTOINCREMENT` sequence of an outbox an earlier
/// version made: the operations it removed before the trigger existed left no
/// other mark. Writes nothing when the floor is already as high.
const SEED: &str = "INSERT INTO keel_sync_state (name, value) \
                    SELECT 'seq_floor', seq FROM sqlite_sequence WHERE name = 'keel_sync_outbox' \
                    ON CONFLICT (name) DO UPDATE SET value = excluded.value WHERE excluded.value > value";

/// The highest sequence number handed out (0: none): the last one still in the
/// outbox or the highest one removed from it, whichever is higher. It reads the
/// outbox's last page and one state row and writes nothing, so numbering an
/// operation adds no page to the commit.
pub(crate) const LAST_SEQ: &str =
    "SELECT max(coalesce((SELECT max(seq) FROM keel_sync_outbox), 0), \
     coalesce((SELECT value FROM keel_sync_state WHERE name = 'seq_floor'), 0))";

// The base version is not looked up here: the upload takes it from
// `keel_sync_rows` (the version last downloaded or acked), which only grows while
// the row has operations in the outbox, so at upload it is at least what it was
// at this write; `base` stays 0. The sequence number is given rather than left
// to SQLite: a plain rowid comes back once the highest operations are removed,
// and `AUTOINCREMENT` writes `sqlite_sequence` at every commit.
const INSERT: &str =
    "INSERT INTO keel_sync_outbox (seq, collection, key, op, fields, deltas, base) \
                      VALUES (?1, ?2, ?3, ?4, ?5, ?6, 0)";

/// Makes the sync tables and the trigger where missing, and seeds `seq_floor`
/// from `sqlite_sequence` (a file whose outbox is `AUTOINCREMENT`). Idempotent.
pub(crate) fn create(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(CREATE)?;
    if table_exists(conn, "sqlite_sequence")? {
        conn.execute(SEED, [])?;
    }
    Ok(())
}

/// Runs [`create`] on a file that has an outbox, at every open (in the schema
/// transaction), before any write: the INSERT trusts `seq_floor`, and on a file
/// an earlier version made the tables exist, so the first write would not make
/// them (nor seed the floor) on its own.
pub(crate) fn upgrade(conn: &Connection) -> rusqlite::Result<()> {
    if table_exists(conn, OUTBOX)? {
        create(conn)?;
    }
    Ok(())
}

/// Whether `table` is a field's type that syncs (not a union, not a vector of them).
pub(crate) fn syncs(ty: &FieldType) -> bool {
    match ty {
        FieldType::Union(_) => false,
        FieldType::Vector(e) => !matches!(**e, FieldType::Union(_)),
        _ => true,
    }
}

/// The canonical text of a row's key: the primary key fields of `row` as a JSON
/// object (serde_json orders its members, so the text is the same whoever built it).
pub(crate) fn key_text(table: &Table, row: &Map<String, Json>) -> String {
    let key: Map<String, Json> = table
        .fields
        .iter()
        .filter(|f| f.primary)
        .map(|f| {
            (
                f.name.clone(),
                row.get(&f.name).cloned().unwrap_or(Json::Null),
            )
        })
        .collect();
    Json::Object(key).to_string()
}

/// One operation before it has a sequence number.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct NewOp {
    /// `insert`, `patch` or `delete`.
    pub(crate) op: &'static str,
    /// Written fields (insert: all of them).
    pub(crate) fields: Map<String, Json>,
    /// Counter fields → what they grew by.
    pub(crate) deltas: Map<String, Json>,
}

/// The operation a recorded change becomes; `None` when no synced field changed.
/// Each field is rendered alone ([`Object::field_json`]), as the object's whole
/// JSON renders it: an update renders the fields it compares, never an object
/// whole into a map.
pub(crate) fn op_of(
    table: &Table,
    op: ChangeOp,
    old: Option<&Object<'_, '_>>,
    new: Option<&Object<'_, '_>>,
) -> Option<NewOp> {
    let synced = || {
        table
            .fields
            .iter()
            .enumerate()
            .filter(|(_, f)| !f.deprecated && !f.primary && syncs(&f.ty))
    };
    // A field that does not decode makes no operation, as an object that does
    // not render whole made none.
    let json = |o: &Object<'_, '_>, i: usize| o.field_json(i).ok();
    match (op, old, new) {
        (ChangeOp::Delete, _, _) => Some(NewOp {
            op: "delete",
            fields: Map::new(),
            deltas: Map::new(),
        }),
        (ChangeOp::Insert, _, Some(new)) => {
            let mut fields = Map::new();
            for (i, f) in synced() {
                if let Some(v) = json(new, i)? {
                    fields.insert(f.name.clone(), v);
                }
            }
            Some(NewOp {
                op: "insert",
                fields,
                deltas: Map::new(),
            })
        }
        (ChangeOp::Update, Some(old), Some(new)) => {
            let mut fields = Map::new();
            let mut deltas = Map::new();
            for (i, f) in synced() {
                let (o, n) = (json(old, i)?, json(new, i)?);
                if o == n {
                    continue;
                }
                if f.sync == SyncRule::Counter {
                    deltas.insert(f.name.clone(), difference(o.as_ref(), n.as_ref()));
                } else {
                    fields.insert(f.name.clone(), n.unwrap_or(Json::Null));
                }
            }
            (!fields.is_empty() || !deltas.is_empty()).then_some(NewOp {
                op: "patch",
                fields,
                deltas,
            })
        }
        _ => None,
    }
}

/// [`key_text`] of an object, rendering its key fields alone.
fn object_key_text(table: &Table, row: &Object<'_, '_>) -> String {
    let key: Map<String, Json> = table
        .fields
        .iter()
        .enumerate()
        .filter(|(_, f)| f.primary)
        .map(|(i, f)| {
            (
                f.name.clone(),
                row.field_json(i).ok().flatten().unwrap_or(Json::Null),
            )
        })
        .collect();
    key_text(table, &key)
}

/// `new - old` of a counter (integers stay integers).
fn difference(old: Option<&Json>, new: Option<&Json>) -> Json {
    let zero = Json::from(0);
    let (o, n) = (old.unwrap_or(&zero), new.unwrap_or(&zero));
    match (o.as_i64(), n.as_i64()) {
        (Some(o), Some(n)) => Json::from(n.wrapping_sub(o)),
        _ => serde_json::Number::from_f64(n.as_f64().unwrap_or(0.0) - o.as_f64().unwrap_or(0.0))
            .map_or(Json::from(0), Json::Number),
    }
}

/// Appends the operations of `changes` that touch synced collections, on `conn`
/// inside the write's transaction (and savepoint: a rolled-back closure takes its
/// operations with it). `synced(collection)` says which collections sync.
pub(crate) fn append(
    conn: &Connection,
    schema: &Schema,
    changes: &[Change],
    mut table_of: impl FnMut(&str) -> Option<usize>,
) -> rusqlite::Result<()> {
    // The number of this write's last operation: read at its first, then counted
    // on (nothing else appends to the outbox inside this transaction).
    let mut last: Option<i64> = None;
    for ch in changes {
        let Some(ti) = table_of(&ch.collection) else {
            continue;
        };
        let table = schema.table(ti);
        let Some(reader) = schema.table_reader(ti) else {
            continue;
        };
        let old = ch.old.as_deref().and_then(|b| reader.open(b).ok());
        let new = ch.new.as_deref().and_then(|b| reader.open(b).ok());
        let Some(op) = op_of(table, ch.op, old.as_ref(), new.as_ref()) else {
            continue;
        };
        let Some(row) = new.as_ref().or(old.as_ref()) else {
            continue;
        };
        let key = object_key_text(table, row);
        let text = |m: &Map<String, Json>| {
            (!m.is_empty()).then(|| serde_json::to_string(m).unwrap_or_default())
        };
        let (fields, deltas) = (text(&op.fields), text(&op.deltas));
        let write = |conn: &Connection, last: Option<i64>| -> rusqlite::Result<i64> {
            let seq = match last {
                Some(seq) => seq + 1,
                None => {
                    conn.prepare_cached(LAST_SEQ)?
                        .query_row([], |r| r.get::<_, i64>(0))?
                        + 1
                }
            };
            conn.prepare_cached(INSERT)?.execute(rusqlite::params![
                seq,
                ch.collection,
                key,
                op.op,
                fields,
                deltas,
            ])?;
            Ok(seq)
        };
        let seq = match write(conn, last) {
            Err(rusqlite::Error::SqliteFailure(_, Some(m))) if m.contains("no such table") => {
                // The first synced write of this file makes the tables.
                create(conn)?;
                write(conn, last)?
            }
            other => other?,
        };
        last = Some(seq);
    }
    Ok(())
}

/// Who to tell after a commit appended operations: the sync client's loop, while
/// one runs (it uploads them without waiting for its timer).
#[derive(Default)]
pub(crate) struct Waker(std::sync::Mutex<Option<std::sync::Arc<dyn Fn() + Send + Sync>>>);

impl Waker {
    // Used by the sync client (feature `sync`).
    #[cfg_attr(not(feature = "sync"), allow(dead_code))]
    /// Sets (or, with `None`, clears) the function a commit calls.
    pub(crate) fn set(&self, f: Option<std::sync::Arc<dyn Fn() + Send + Sync>>) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = f;
    }

    /// Calls it, if set.
    pub(crate) fn wake(&self) {
        let f = self.0.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if let Some(f) = f {
            f();
        }
    }
}
