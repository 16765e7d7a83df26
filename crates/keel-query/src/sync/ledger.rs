//! The client's bookkeeping in its own tables (made by `layout/outbox.rs`): the
//! outbox's operations as the loop uploads them, what the server last said of each
//! row (and which snapshot last named it: `mark`, the column a snapshot's end
//! uses to find the rows gone), and the install's client id, last LSN and the
//! resume point of a snapshot being applied.
//!
//! Every function takes the connection of a transaction the caller holds: the
//! loop changes these tables in the same write as the rows they describe.

use std::collections::{HashMap, HashSet};

use rusqlite::{Connection, OptionalExtension};
use serde_json::{Map, Value as Json};

use crate::layout::outbox;
use crate::layout::side_table::table_exists;

/// One operation of the outbox.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Op {
    /// The protocol's sequence number.
    pub(crate) seq: i64,
    /// The collection.
    pub(crate) collection: String,
    /// The row's key, as canonical JSON text (`outbox::key_text`).
    pub(crate) key: String,
    /// `insert`, `patch` or `delete`.
    pub(crate) op: String,
    /// Written fields.
    pub(crate) fields: Map<String, Json>,
    /// Counter deltas.
    pub(crate) deltas: Map<String, Json>,
    /// The base version at the local commit.
    pub(crate) base: i64,
    /// Once acked: the row version the write gave.
    pub(crate) acked_version: Option<i64>,
}

/// What the server last said of one row.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Held {
    /// The downloaded version (0: never downloaded).
    pub(crate) version: i64,
    /// The version an ack of this client's own write gave the row.
    pub(crate) acked: i64,
    /// The row as downloaded; `None` when deleted or never downloaded.
    pub(crate) row: Option<Map<String, Json>>,
}

/// Makes the tables if this file has none yet.
pub(crate) fn ensure(conn: &Connection) -> rusqlite::Result<()> {
    outbox::create(conn)
}

fn object(text: Option<String>) -> Map<String, Json> {
    match text.and_then(|t| serde_json::from_str(&t).ok()) {
        Some(Json::Object(m)) => m,
        _ => Map::new(),
    }
}

const COLUMNS: &str = "seq, collection, key, op, fields, deltas, base, acked_version";

fn read_op(r: &rusqlite::Row<'_>) -> rusqlite::Result<Op> {
    Ok(Op {
        seq: r.get(0)?,
        collection: r.get(1)?,
        key: r.get(2)?,
        op: r.get(3)?,
        fields: object(r.get(4)?),
        deltas: object(r.get(5)?),
        base: r.get(6)?,
        acked_version: r.get(7)?,
    })
}

/// Up to `limit` operations not acked yet, in sequence order.
pub(crate) fn pending(conn: &Connection, limit: usize) -> rusqlite::Result<Vec<Op>> {
    let mut st = conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM keel_sync_outbox WHERE acked_version IS NULL ORDER BY seq LIMIT ?1"
    ))?;
    let rows = st.query_map([limit as i64], read_op)?;
    rows.collect()
}

/// How many operations are not acked yet (those at or below `through`, if given).
pub(crate) fn pending_count(conn: &Connection, through: Option<i64>) -> rusqlite::Result<u64> {
    conn.prepare_cached(
        "SELECT count(*) FROM keel_sync_outbox WHERE acked_version IS NULL AND seq <= ?1",
    )?
    .query_row([through.unwrap_or(i64::MAX)], |r| r.get::<_, i64>(0))
    .map(|n| n as u64)
}

/// The highest sequence number the outbox has handed out (0: none).
pub(crate) fn last_seq(conn: &Connection) -> rusqlite::Result<i64> {
    conn.prepare_cached(outbox::LAST_SEQ)?
        .query_row([], |r| r.get(0))
}

/// Where each row's operations are in the outbox: the outbox has no index by
/// row (every synced commit would write a page of it), so the download keeps
/// this one in memory, for one session of the sync loop.
///
/// It only grows between rebuilds. Operations are appended with numbers above
/// every number handed out before, so [`catch_up`](Self::catch_up) reads those
/// above the highest it holds; the numbers of operations that left the outbox
/// (acked and covered, refused) stay until the next rebuild, and
/// [`ops_for`](Self::ops_for) reads each operation by number, so a number no
/// longer there is skipped. Call `catch_up` first in a write closure, before the
/// closure changes the outbox: what it then reads is committed, so a closure that
/// rolls back leaves nothing in it that is not in the file. After a write that
/// failed, start again from [`Default`]: numbers that were not committed can be
/// handed out again.
#[derive(Debug, Default)]
pub(crate) struct OpsByRow {
    /// Collection → row key text → sequence numbers, in order (nested, so a
    /// look-up by borrowed names allocates nothing).
    seqs: HashMap<String, HashMap<String, Vec<i64>>>,
    /// The highest sequence number read.
    upto: i64,
    /// Sequence numbers held, gone ones included.
    held: usize,
}

/// Below this many held numbers, `catch_up` does not count the outbox to see
/// whether most of them are gone.
const REBUILD_FROM: usize = 1024;

impl OpsByRow {
    /// Reads the operations appended since the last call; rebuilds from the
    /// whole outbox when fewer than half of the numbers held are still in it.
    pub(crate) fn catch_up(&mut self, conn: &Connection) -> rusqlite::Result<()> {
        if !table_exists(conn, outbox::OUTBOX)? {
            *self = Self::default();
            return Ok(());
        }
        if self.held > REBUILD_FROM {
            let live: i64 =
                conn.query_row("SELECT count(*) FROM keel_sync_outbox", [], |r| r.get(0))?;
            if self.held as i64 > 2 * live {
                *self = Self::default();
            }
        }
        let mut st = conn.prepare_cached(
            "SELECT seq, collection, key FROM keel_sync_outbox WHERE seq > ?1 ORDER BY seq",
        )?;
        let mut rows = st.query([self.upto])?;
        while let Some(r) = rows.next()? {
            let seq: i64 = r.get(0)?;
            self.seqs
                .entry(r.get(1)?)
                .or_default()
                .entry(r.get(2)?)
                .or_default()
                .push(seq);
            self.upto = self.upto.max(seq);
            self.held += 1;
        }
        Ok(())
    }

    /// The operations on one row that a download at `version` does not hold, in
    /// sequence order: every pending one, and every acked one whose row version
    /// is newer (`None`: every acked one too).
    pub(crate) fn ops_for(
        &self,
        conn: &Connection,
        collection: &str,
        key: &str,
        version: Option<i64>,
    ) -> rusqlite::Result<Vec<Op>> {
        let Some(seqs) = self.seqs.get(collection).and_then(|keys| keys.get(key)) else {
            return Ok(Vec::new());
        };
        let mut ops = Vec::with_capacity(seqs.len());
        for seq in seqs {
            let Some(op) = op(conn, *seq)? else {
                continue;
            };
            // The same number on another row: a number handed out again after a
            // failed commit, if a caller kept this past it.
            if op.collection != collection || op.key != key {
                continue;
            }
            if op
                .acked_version
                .is_none_or(|v| version.is_none_or(|d| v > d))
            {
                ops.push(op);
            }
        }
        Ok(ops)
    }
}

/// The keys of `collection` that have operations in the outbox.
pub(crate) fn keys_with_ops(
    conn: &Connection,
    collection: &str,
) -> rusqlite::Result<HashSet<String>> {
    let mut st =
        conn.prepare_cached("SELECT DISTINCT key FROM keel_sync_outbox WHERE collection = ?1")?;
    let rows = st.query_map([collection], |r| r.get(0))?;
    rows.collect()
}

/// The operation `seq`, if still in the outbox.
pub(crate) fn op(conn: &Connection, seq: i64) -> rusqlite::Result<Option<Op>> {
    conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM keel_sync_outbox WHERE seq = ?1"
    ))?
    .query_row([seq], read_op)
    .optional()
}

/// Removes the operation `seq`.
pub(crate) fn remove(conn: &Connection, seq: i64) -> rusqlite::Result<()> {
    conn.prepare_cached("DELETE FROM keel_sync_outbox WHERE seq = ?1")?
        .execute([seq])
        .map(|_| ())
}

/// Records an ack of `seq`: with a row `version` the operation stays until the
/// download has it (`lsn`: the ack's); without one (a delete, a skip) it goes.
pub(crate) fn acked(
    conn: &Connection,
    seq: i64,
    version: Option<i64>,
    lsn: u64,
) -> rusqlite::Result<()> {
    let Some(op) = op(conn, seq)? else {
        return Ok(());
    };
    match version {
        Some(v) => {
            conn.prepare_cached(
                "UPDATE keel_sync_outbox SET acked_version = ?2, acked_lsn = ?3 WHERE seq = ?1",
            )?
            .execute(rusqlite::params![seq, v, lsn as i64])?;
            conn.prepare_cached(
                "INSERT INTO keel_sync_rows (collection, key, version, acked, row) \
                 VALUES (?1, ?2, 0, ?3, NULL) \
                 ON CONFLICT (collection, key) DO UPDATE SET acked = max(acked, excluded.acked)",
            )?
            .execute(rusqlite::params![op.collection, op.key, v])?;
            Ok(())
        }
        None => remove(conn, seq),
    }
}

/// Drops acked operations whose write the download has reached (`lsn`: a
/// checkpoint or a finished snapshot), and says whether acked operations remain
/// that a later checkpoint must still cover.
pub(crate) fn covered(conn: &Connection, lsn: u64) -> rusqlite::Result<bool> {
    conn.prepare_cached(
        "DELETE FROM keel_sync_outbox WHERE acked_version IS NOT NULL AND acked_lsn <= ?1",
    )?
    .execute([lsn as i64])?;
    conn.prepare_cached(
        "SELECT EXISTS (SELECT 1 FROM keel_sync_outbox WHERE acked_version IS NOT NULL)",
    )?
    .query_row([], |r| r.get(0))
}

/// What the server last said of a row.
pub(crate) fn held(conn: &Connection, collection: &str, key: &str) -> rusqlite::Result<Held> {
    conn.prepare_cached(
        "SELECT version, acked, row FROM keel_sync_rows WHERE collection = ?1 AND key = ?2",
    )?
    .query_row([collection, key], |r| {
        let row: Option<String> = r.get(2)?;
        Ok(Held {
            version: r.get(0)?,
            acked: r.get(1)?,
            row: row.map(|t| object(Some(t))),
        })
    })
    .optional()
    .map(Option::unwrap_or_default)
}

/// Records a downloaded row (`None`: deleted) at `version`.
pub(crate) fn set_held(
    conn: &Connection,
    collection: &str,
    key: &str,
    version: i64,
    row: Option<&Map<String, Json>>,
) -> rusqlite::Result<()> {
    let text = row.map(|r| Json::Object(r.clone()).to_string());
    conn.prepare_cached(
        "INSERT INTO keel_sync_rows (collection, key, version, acked, row) VALUES (?1, ?2, ?3, 0, ?4) \
         ON CONFLICT (collection, key) DO UPDATE SET version = excluded.version, row = excluded.row",
    )?
    .execute(rusqlite::params![collection, key, version, text])
    .map(|_| ())
}

/// Forgets every held row of `collection` whose key is not in `keep`.
pub(crate) fn forget_except(
    conn: &Connection,
    collection: &str,
    keep: &HashSet<String>,
) -> rusqlite::Result<()> {
    let keys: Vec<String> = {
        let mut st = conn.prepare_cached("SELECT key FROM keel_sync_rows WHERE collection = ?1")?;
        let rows = st.query_map([collection], |r| r.get(0))?;
        rows.collect::<rusqlite::Result<_>>()?
    };
    let mut del =
        conn.prepare_cached("DELETE FROM keel_sync_rows WHERE collection = ?1 AND key = ?2")?;
    for k in keys.iter().filter(|k| !keep.contains(*k)) {
        del.execute([collection, k.as_str()])?;
    }
    Ok(())
}

/// A value of `keel_sync_state`.
pub(crate) fn state(conn: &Connection, name: &str) -> rusqlite::Result<Option<String>> {
    conn.prepare_cached("SELECT value FROM keel_sync_state WHERE name = ?1")?
        .query_row([name], |r| r.get(0))
        .optional()
}

/// Sets a value of `keel_sync_state`.
pub(crate) fn set_state(conn: &Connection, name: &str, value: &str) -> rusqlite::Result<()> {
    conn.prepare_cached("INSERT OR REPLACE INTO keel_sync_state (name, value) VALUES (?1, ?2)")?
        .execute([name, value])
        .map(|_| ())
}

/// This install's client id: made once (128 random bits from SQLite) and kept in
/// the file, so it survives restarts and the relay's ledger recognises resends.
pub(crate) fn client_id(conn: &Connection) -> rusqlite::Result<String> {
    if let Some(id) = state(conn, "client_id")? {
        return Ok(id);
    }
    let id: String = conn.query_row("SELECT lower(hex(randomblob(16)))", [], |r| r.get(0))?;
    set_state(conn, "client_id", &id)?;
    Ok(id)
}

/// Gives `keel_sync_rows` its `mark` column if this file's table lacks it: the
/// snapshot generation that last named the row (files made before chunked
/// snapshots have no such column).
pub(crate) fn ensure_marks(conn: &Connection) -> rusqlite::Result<()> {
    let has: i64 = conn.query_row(
        "SELECT count(*) FROM pragma_table_info('keel_sync_rows') WHERE name = 'mark'",
        [],
        |r| r.get(0),
    )?;
    if has == 0 {
        conn.execute_batch("ALTER TABLE keel_sync_rows ADD COLUMN mark INTEGER")?;
    }
    Ok(())
}

/// Records that snapshot `mark` named the held row (a row it did not change).
pub(crate) fn mark(
    conn: &Connection,
    collection: &str,
    key: &str,
    mark: i64,
) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO keel_sync_rows (collection, key, version, acked, row, mark) \
         VALUES (?1, ?2, 0, 0, NULL, ?3) \
         ON CONFLICT (collection, key) DO UPDATE SET mark = excluded.mark",
    )?
    .execute(rusqlite::params![collection, key, mark])
    .map(|_| ())
}

/// Records a row snapshot `mark` downloaded at `version`.
pub(crate) fn set_held_marked(
    conn: &Connection,
    collection: &str,
    key: &str,
    version: i64,
    row: &Map<String, Json>,
    mark: i64,
) -> rusqlite::Result<()> {
    let text = serde_json::to_string(row).unwrap_or_default();
    conn.prepare_cached(
        "INSERT INTO keel_sync_rows (collection, key, version, acked, row, mark) \
         VALUES (?1, ?2, ?3, 0, ?4, ?5) \
         ON CONFLICT (collection, key) DO UPDATE SET version = excluded.version, \
         row = excluded.row, mark = excluded.mark",
    )?
    .execute(rusqlite::params![collection, key, version, text, mark])
    .map(|_| ())
}

/// The held rows of `collection` that snapshot `mark` did not name, with a
/// server row (those the server no longer has for this client).
pub(crate) fn unmarked(
    conn: &Connection,
    collection: &str,
    mark: i64,
) -> rusqlite::Result<Vec<String>> {
    let mut st = conn.prepare_cached(
        "SELECT key FROM keel_sync_rows WHERE collection = ?1 AND mark IS NOT ?2 AND row IS NOT NULL",
    )?;
    let rows = st.query_map(rusqlite::params![collection, mark], |r| r.get(0))?;
    rows.collect()
}

/// How many held rows of `collection` snapshot `mark` named.
pub(crate) fn marked_count(
    conn: &Connection,
    collection: &str,
    mark: i64,
) -> rusqlite::Result<u64> {
    conn.prepare_cached("SELECT count(*) FROM keel_sync_rows WHERE collection = ?1 AND mark = ?2")?
        .query_row(rusqlite::params![collection, mark], |r| r.get::<_, i64>(0))
        .map(|n| n as u64)
}

/// The keys of `collection` snapshot `mark` named.
pub(crate) fn marked_keys(
    conn: &Connection,
    collection: &str,
    mark: i64,
) -> rusqlite::Result<HashSet<String>> {
    let mut st =
        conn.prepare_cached("SELECT key FROM keel_sync_rows WHERE collection = ?1 AND mark = ?2")?;
    let rows = st.query_map(rusqlite::params![collection, mark], |r| r.get(0))?;
    rows.collect()
}

/// Forgets the held rows of `collection` snapshot `mark` did not name, except
/// those this client's operations still need.
pub(crate) fn forget_unmarked(
    conn: &Connection,
    collection: &str,
    mark: i64,
) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "DELETE FROM keel_sync_rows WHERE collection = ?1 AND mark IS NOT ?2 \
         AND key NOT IN (SELECT key FROM keel_sync_outbox WHERE collection = ?1)",
    )?
    .execute(rusqlite::params![collection, mark])
    .map(|_| ())
}

/// Whether `collection` has any held server row.
pub(crate) fn has_held(conn: &Connection, collection: &str) -> rusqlite::Result<bool> {
    conn.prepare_cached("SELECT EXISTS (SELECT 1 FROM keel_sync_rows WHERE collection = ?1)")?
        .query_row([collection], |r| r.get(0))
}

/// Whether `collection` has any operation in the outbox (when it has none, a
/// downloaded row needs no look-up of operations to re-apply).
pub(crate) fn has_ops(conn: &Connection, collection: &str) -> rusqlite::Result<bool> {
    conn.prepare_cached("SELECT EXISTS (SELECT 1 FROM keel_sync_outbox WHERE collection = ?1)")?
        .query_row([collection], |r| r.get(0))
}

/// Removes a value of `keel_sync_state`.
pub(crate) fn clear_state(conn: &Connection, name: &str) -> rusqlite::Result<()> {
    conn.prepare_cached("DELETE FROM keel_sync_state WHERE name = ?1")?
        .execute([name])
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outbox() -> Connection {
        let conn = Connection::open_in_memory().unwrap();
        outbox::create(&conn).unwrap();
        conn
    }

    fn append(conn: &Connection, seq: i64, key: &str) {
        conn.execute(
            "INSERT INTO keel_sync_outbox (seq, collection, key, op, fields, deltas, base) \
             VALUES (?1, 'blog.Post', ?2, 'patch', '{}', NULL, 0)",
            rusqlite::params![seq, key],
        )
        .unwrap();
    }

    fn seqs(by_row: &OpsByRow, conn: &Connection, key: &str, version: Option<i64>) -> Vec<i64> {
        by_row
            .ops_for(conn, "blog.Post", key, version)
            .unwrap()
            .iter()
            .map(|o| o.seq)
            .collect()
    }

    #[test]
    fn ops_by_row_follows_appends_removals_and_acks() {
        let conn = outbox();
        let mut by_row = OpsByRow::default();
        by_row.catch_up(&conn).unwrap();
        assert!(seqs(&by_row, &conn, "a", None).is_empty());
        append(&conn, 1, "a");
        append(&conn, 2, "a");
        append(&conn, 3, "b");
        by_row.catch_up(&conn).unwrap();
        assert_eq!(seqs(&by_row, &conn, "a", None), [1, 2]);
        assert_eq!(seqs(&by_row, &conn, "b", None), [3]);
        append(&conn, 4, "a");
        remove(&conn, 2).unwrap();
        by_row.catch_up(&conn).unwrap();
        assert_eq!(seqs(&by_row, &conn, "a", None), [1, 4]);
        // An acked operation counts only for downloads older than its version.
        conn.execute(
            "UPDATE keel_sync_outbox SET acked_version = 5 WHERE seq = 1",
            [],
        )
        .unwrap();
        assert_eq!(seqs(&by_row, &conn, "a", Some(4)), [1, 4]);
        assert_eq!(seqs(&by_row, &conn, "a", Some(5)), [4]);
        // A number handed out again for another row is not this row's.
        remove(&conn, 4).unwrap();
        append(&conn, 4, "b");
        assert_eq!(seqs(&by_row, &conn, "a", None), [1]);
    }

    #[test]
    fn ops_by_row_is_rebuilt_once_most_of_what_it_holds_is_gone() {
        let conn = outbox();
        let mut by_row = OpsByRow::default();
        for seq in 1..=2 * REBUILD_FROM as i64 {
            append(&conn, seq, &format!("k{seq}"));
        }
        by_row.catch_up(&conn).unwrap();
        assert_eq!(by_row.held, 2 * REBUILD_FROM);
        conn.execute("DELETE FROM keel_sync_outbox WHERE seq > 10", [])
            .unwrap();
        by_row.catch_up(&conn).unwrap();
        assert_eq!(by_row.held, 10);
        assert_eq!(seqs(&by_row, &conn, "k3", None), [3]);
        // Numbers handed out after the rebuild are read as before.
        append(&conn, 5000, "k3");
        by_row.catch_up(&conn).unwrap();
        assert_eq!(seqs(&by_row, &conn, "k3", None), [3, 5000]);
    }
}
