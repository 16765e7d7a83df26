//! Download apply: what the relay sends becomes local rows, inside one write
//! closure per `changes` frame (one upstream transaction), so a live query sees
//! a server transaction whole or not at all, and one per snapshot page, so a
//! live query sees a snapshot grow page by page (`page`); the snapshot's end
//! (`finish`) removes, in one more write, the rows it did not name.
//!
//! The rules, per row:
//!
//! * **Versions.** An upsert applies only if its version is newer than the one
//!   held; a delete if its version is at least the one held (`docs/sync.md`).
//!   What was applied is held in `keel_sync_rows`, so an overlap between the
//!   snapshot and the stream, or a re-delivery, changes nothing.
//! * **Own writes on top.** The row written locally is the server's row with this
//!   client's own operations re-applied on it, in sequence order: every pending
//!   one, and every acked one the download has not reached (its ack's row version
//!   is newer than the downloaded row's). So a write never flickers away while it
//!   travels, and a counter shows the server's value plus the local increments.
//! * **Only differences are written.** The local object is compared (as JSON of
//!   its synced fields) with what it would become; an equal one is not written,
//!   so a reconnect's fresh snapshot delivers diffs only for rows that changed.
//! * **Fields this build does not know** (a newer app version's, or a column the
//!   relay maps that the local schema lacks) cannot be stored in the local object;
//!   they stay in the held server row, and since uploads carry only changed
//!   fields, this client never overwrites them on the server.
//! * **Local-only fields** (unions, which do not sync) keep their local value.
//!
//! The writes go through the transaction's ordinary write path, so subscribers
//! get them as row diffs; the closure is marked as from the server, so they add
//! nothing to the outbox.

use std::collections::HashSet;

use keel_schema::{Schema, SyncRule, Table, Value};
use serde_json::{Map, Value as Json};

use crate::base::error::{Error, Result};
use crate::layout::outbox::{key_text, syncs};
use crate::sync::ledger::{self, Op, OpsByRow};
use crate::txn::transaction::Txn;

/// One row change as downloaded.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Incoming {
    /// The row now reads like this.
    Upsert {
        /// The collection.
        collection: String,
        /// The row's fields.
        row: Map<String, Json>,
        /// Its version.
        version: i64,
    },
    /// The row is gone.
    Delete {
        /// The collection.
        collection: String,
        /// Its key fields.
        key: Map<String, Json>,
        /// The version of the row that is gone.
        version: i64,
    },
    /// Every row of the collection is gone.
    Truncate {
        /// The collection.
        collection: String,
    },
}

/// The JSON of the object in `bytes` (flatc's conventions), its members a map.
fn row_json(schema: &Schema, table: usize, bytes: &[u8]) -> Option<Map<String, Json>> {
    let reader = schema.table_reader(table)?;
    match reader.open(bytes).ok()?.to_json().ok()? {
        Json::Object(m) => Some(m),
        _ => None,
    }
}

fn sql(op: &'static str) -> impl Fn(rusqlite::Error) -> Error {
    move |e| Error::sqlite(op, "keel_sync_rows", e)
}

/// The collection's table index and its table.
fn table<'s>(schema: &'s Schema, collection: &str) -> Option<(usize, &'s Table)> {
    let c = schema.collection(collection)?;
    let t = schema.table(c.table);
    t.sync.is_some().then_some((c.table, t))
}

/// Applies one `changes` frame.
pub(crate) fn changes(
    txn: &mut Txn<'_>,
    own: &OpsByRow,
    schema: &Schema,
    changes: &[Incoming],
) -> Result<()> {
    txn.set_from_server();
    ledger::ensure(txn.connection()).map_err(sql("prepare the sync tables"))?;
    // One transaction may change a row many times (a batch of counter patches):
    // only its last change of each row is written, the row as the transaction
    // left it.
    let last = last_per_row(schema, changes);
    for (i, change) in changes.iter().enumerate() {
        if !last.contains(&i) {
            continue;
        }
        match change {
            Incoming::Upsert {
                collection,
                row,
                version,
            } => upsert(txn, own, schema, collection, row, *version, None)?,
            Incoming::Delete {
                collection,
                key,
                version,
            } => {
                let Some((_, t)) = table(schema, collection) else {
                    continue;
                };
                let key_text = key_text(t, key);
                let held = ledger::held(txn.connection(), collection, &key_text)
                    .map_err(sql("read a held row"))?;
                if *version < held.version {
                    continue;
                }
                ledger::set_held(txn.connection(), collection, &key_text, *version, None)
                    .map_err(sql("hold a deleted row"))?;
                settle(txn, own, schema, collection, key, None, Some(*version))?;
            }
            Incoming::Truncate { collection } => {
                clear_except(txn, own, schema, collection, &HashSet::new())?;
            }
        }
    }
    Ok(())
}

/// The positions in `changes` of each row's last change (every position when
/// the transaction truncated a collection: rare, and then order matters).
fn last_per_row(schema: &Schema, changes: &[Incoming]) -> HashSet<usize> {
    if changes
        .iter()
        .any(|c| matches!(c, Incoming::Truncate { .. }))
    {
        return (0..changes.len()).collect();
    }
    let mut seen = HashSet::new();
    let mut keep = HashSet::new();
    for (i, change) in changes.iter().enumerate().rev() {
        let row = match change {
            Incoming::Upsert {
                collection, row, ..
            } => table(schema, collection).map(|(_, t)| (collection, key_text(t, row))),
            Incoming::Delete {
                collection, key, ..
            } => table(schema, collection).map(|(_, t)| (collection, key_text(t, key))),
            Incoming::Truncate { .. } => None,
        };
        if let Some((collection, key)) = row {
            if seen.insert((collection.clone(), key)) {
                keep.insert(i);
            }
        }
    }
    keep
}

/// Applies one page of a snapshot: `rows` of `collection` (fields, version),
/// each held with the snapshot's generation `mark`, so that `finish` can tell
/// the rows the snapshot named from those it did not.
///
/// `fresh`: the collection had no local and no held rows when this snapshot
/// started, and the snapshot is not a resumed one. PostgreSQL sends each key of
/// such a snapshot once, so while the outbox holds nothing of the collection (an
/// app write during the snapshot puts an operation there) no row of the page can
/// be there already: each is inserted without looking for it first.
pub(crate) fn page(
    txn: &mut Txn<'_>,
    own: &OpsByRow,
    schema: &Schema,
    collection: &str,
    rows: Vec<(Map<String, Json>, i64)>,
    mark: i64,
    fresh: bool,
) -> Result<()> {
    txn.set_from_server();
    let Some((ti, t)) = table(schema, collection) else {
        return Ok(());
    };
    // Without operations of this client in the collection (always so on a first
    // sync) no row has anything to re-apply: skip that look-up per row.
    if ledger::has_ops(txn.connection(), collection).map_err(sql("read the outbox"))? {
        for (row, version) in &rows {
            upsert(txn, own, schema, collection, row, *version, Some(mark))?;
        }
        return Ok(());
    }
    for (row, version) in rows {
        let key_text = key_text(t, &row);
        if !fresh {
            let held = ledger::held(txn.connection(), collection, &key_text)
                .map_err(sql("read a held row"))?;
            if version <= held.version && held.row.is_some() {
                ledger::mark(txn.connection(), collection, &key_text, mark)
                    .map_err(sql("mark a held row"))?;
                continue;
            }
        }
        ledger::set_held_marked(txn.connection(), collection, &key_text, version, &row, mark)
            .map_err(sql("hold a downloaded row"))?;
        if fresh {
            insert_local(txn, schema, ti, collection, row)?;
        } else {
            let key = key_of(t, &row);
            write_local(txn, schema, ti, collection, &key, Some(row))?;
        }
    }
    Ok(())
}

/// Whether `collection` has neither local rows nor held server rows: a
/// snapshot into it may insert without looking (see [`page`]).
pub(crate) fn is_empty(txn: &mut Txn<'_>, collection: &str) -> Result<bool> {
    let held = ledger::has_held(txn.connection(), collection).map_err(sql("read held rows"))?;
    Ok(!held && txn.query(collection).first()?.is_none())
}

/// Records the keys of a resumed snapshot's `snapshot_keys` frame: rows that
/// still exist before its cursor, named by snapshot `mark`.
pub(crate) fn keys(
    txn: &mut Txn<'_>,
    schema: &Schema,
    collection: &str,
    keys: &[Map<String, Json>],
    mark: i64,
) -> Result<()> {
    let Some((_, t)) = table(schema, collection) else {
        return Ok(());
    };
    for key in keys {
        ledger::mark(txn.connection(), collection, &key_text(t, key), mark)
            .map_err(sql("mark a held row"))?;
    }
    Ok(())
}

/// Finishes snapshot `mark` of `collections`, consistent as of `lsn`: local
/// rows the snapshot did not name go, unless this client's own operations keep
/// them.
pub(crate) fn finish(
    txn: &mut Txn<'_>,
    own: &OpsByRow,
    schema: &Schema,
    collections: &[String],
    mark: i64,
    lsn: u64,
) -> Result<()> {
    txn.set_from_server();
    // Acked writes the snapshot holds need not be re-applied.
    ledger::covered(txn.connection(), lsn).map_err(sql("drop covered operations"))?;
    for collection in collections {
        if table(schema, collection).is_none() {
            continue;
        }
        let gone =
            ledger::unmarked(txn.connection(), collection, mark).map_err(sql("read held rows"))?;
        for key_text in gone {
            let key = match serde_json::from_str(&key_text) {
                Ok(Json::Object(m)) => m,
                _ => continue,
            };
            settle(txn, own, schema, collection, &key, None, None)?;
        }
        ledger::forget_unmarked(txn.connection(), collection, mark)
            .map_err(sql("forget held rows"))?;
        // A local row with no held row at all (written before this file synced,
        // say) is found only by a scan; skip it when the counts say there is none.
        let named = ledger::marked_count(txn.connection(), collection, mark)
            .map_err(sql("count held rows"))?;
        let local = txn.query(collection).count()?;
        if local > named {
            let keep = ledger::marked_keys(txn.connection(), collection, mark)
                .map_err(sql("read held rows"))?;
            clear_except(txn, own, schema, collection, &keep)?;
        }
    }
    Ok(())
}

/// Removes every local row of `collection` whose key is not in `keep` (and its
/// held server row), unless this client's operations keep it.
fn clear_except(
    txn: &mut Txn<'_>,
    own: &OpsByRow,
    schema: &Schema,
    collection: &str,
    keep: &HashSet<String>,
) -> Result<()> {
    let Some((ti, t)) = table(schema, collection) else {
        return Ok(());
    };
    let local = txn.query(collection).all()?;
    for obj in local {
        let Some(row) = row_json(schema, ti, &obj.bytes) else {
            continue;
        };
        let key_text = key_text(t, &row);
        if keep.contains(&key_text) {
            continue;
        }
        let key = key_of(t, &row);
        settle(txn, own, schema, collection, &key, None, None)?;
    }
    let mut kept = keep.clone();
    kept.extend(
        ledger::keys_with_ops(txn.connection(), collection).map_err(sql("read the outbox"))?,
    );
    ledger::forget_except(txn.connection(), collection, &kept).map_err(sql("forget held rows"))
}

fn upsert(
    txn: &mut Txn<'_>,
    own: &OpsByRow,
    schema: &Schema,
    collection: &str,
    row: &Map<String, Json>,
    version: i64,
    mark: Option<i64>,
) -> Result<()> {
    let Some((_, t)) = table(schema, collection) else {
        return Ok(());
    };
    let key_text = key_text(t, row);
    let held =
        ledger::held(txn.connection(), collection, &key_text).map_err(sql("read a held row"))?;
    if version <= held.version && !(mark.is_some() && held.row.is_none()) {
        if let Some(mark) = mark {
            ledger::mark(txn.connection(), collection, &key_text, mark)
                .map_err(sql("mark a held row"))?;
        }
        return Ok(());
    }
    match mark {
        Some(mark) => {
            ledger::set_held_marked(txn.connection(), collection, &key_text, version, row, mark)
        }
        None => ledger::set_held(txn.connection(), collection, &key_text, version, Some(row)),
    }
    .map_err(sql("hold a downloaded row"))?;
    let key = key_of(t, row);
    settle(
        txn,
        own,
        schema,
        collection,
        &key,
        Some(row.clone()),
        Some(version),
    )
}

/// Writes the local row `key` as the server's `base` (`None`: none) with this
/// client's operations on top; `version`: the downloaded version (acked
/// operations at or below it are in `base` already; `None`: every acked one is
/// re-applied).
fn settle(
    txn: &mut Txn<'_>,
    own: &OpsByRow,
    schema: &Schema,
    collection: &str,
    key: &Map<String, Json>,
    base: Option<Map<String, Json>>,
    version: Option<i64>,
) -> Result<()> {
    let Some((ti, t)) = table(schema, collection) else {
        return Ok(());
    };
    let ops = own
        .ops_for(txn.connection(), collection, &key_text(t, key), version)
        .map_err(sql("read the outbox"))?;
    let live: Vec<&Op> = ops.iter().collect();
    let row = reapply(t, key, base, &live);
    write_local(txn, schema, ti, collection, key, row)
}

/// Rolls back the refused operations `seqs`: each leaves the outbox, and its row
/// becomes again the server's with the remaining operations on top. Returns the
/// operations removed.
pub(crate) fn roll_back(
    txn: &mut Txn<'_>,
    own: &OpsByRow,
    schema: &Schema,
    seqs: &[i64],
) -> Result<Vec<Op>> {
    txn.set_from_server();
    let mut removed = Vec::new();
    for seq in seqs {
        if let Some(op) = ledger::op(txn.connection(), *seq).map_err(sql("read the outbox"))? {
            ledger::remove(txn.connection(), *seq).map_err(sql("remove a refused operation"))?;
            removed.push(op);
        }
    }
    let mut rows: Vec<(&str, &str)> = removed
        .iter()
        .map(|o| (o.collection.as_str(), o.key.as_str()))
        .collect();
    rows.dedup();
    for (collection, key_text) in rows {
        if table(schema, collection).is_none() {
            continue;
        }
        let held =
            ledger::held(txn.connection(), collection, key_text).map_err(sql("read a held row"))?;
        let key = match serde_json::from_str(key_text) {
            Ok(Json::Object(m)) => m,
            _ => continue,
        };
        settle(txn, own, schema, collection, &key, held.row, None)?;
    }
    Ok(removed)
}

/// Writes the rows `rows` (collection, key text) again from what is held: after
/// an ack, for rows whose download already holds the acked write (it arrived in a
/// snapshot before the ack of a resent batch), so it is not applied twice.
pub(crate) fn refresh(
    txn: &mut Txn<'_>,
    own: &OpsByRow,
    schema: &Schema,
    rows: &[(String, String)],
) -> Result<()> {
    txn.set_from_server();
    for (collection, key_text) in rows {
        if table(schema, collection).is_none() {
            continue;
        }
        let held =
            ledger::held(txn.connection(), collection, key_text).map_err(sql("read a held row"))?;
        let key = match serde_json::from_str(key_text) {
            Ok(Json::Object(m)) => m,
            _ => continue,
        };
        settle(
            txn,
            own,
            schema,
            collection,
            &key,
            held.row,
            Some(held.version),
        )?;
    }
    Ok(())
}

/// `base` with `ops` applied in order, as the relay would apply them: an insert
/// writes its fields (counters add onto a row that exists); a patch writes its
/// fields and adds its deltas, and is skipped on a row that is gone; a delete
/// removes the row.
pub(crate) fn reapply(
    table: &Table,
    key: &Map<String, Json>,
    base: Option<Map<String, Json>>,
    ops: &[&Op],
) -> Option<Map<String, Json>> {
    let counter = |name: &str| {
        table
            .field(name)
            .is_some_and(|f| f.sync == SyncRule::Counter)
    };
    let mut row = base;
    for op in ops {
        match op.op.as_str() {
            "insert" => {
                let existed = row.is_some();
                let mut r = row.take().unwrap_or_else(|| key.clone());
                for (name, value) in &op.fields {
                    if existed && counter(name) {
                        let sum = add(r.get(name), value);
                        r.insert(name.clone(), sum);
                    } else {
                        r.insert(name.clone(), value.clone());
                    }
                }
                row = Some(r);
            }
            "patch" => {
                if let Some(r) = row.as_mut() {
                    for (name, value) in &op.fields {
                        r.insert(name.clone(), value.clone());
                    }
                    for (name, delta) in &op.deltas {
                        let sum = add(r.get(name), delta);
                        r.insert(name.clone(), sum);
                    }
                }
            }
            _ => row = None,
        }
    }
    row
}

fn add(a: Option<&Json>, b: &Json) -> Json {
    let a = a.cloned().unwrap_or(Json::from(0));
    match (a.as_i64(), b.as_i64()) {
        (Some(x), Some(y)) => Json::from(x.wrapping_add(y)),
        _ => serde_json::Number::from_f64(a.as_f64().unwrap_or(0.0) + b.as_f64().unwrap_or(0.0))
            .map_or(Json::from(0), Json::Number),
    }
}

/// The key fields of a row.
fn key_of(table: &Table, row: &Map<String, Json>) -> Map<String, Json> {
    table
        .fields
        .iter()
        .filter(|f| f.primary)
        .map(|f| {
            (
                f.name.clone(),
                row.get(&f.name).cloned().unwrap_or(Json::Null),
            )
        })
        .collect()
}

/// The key as the values a delete or lookup takes.
fn key_values(table: &Table, key: &Map<String, Json>) -> Vec<Value> {
    table
        .fields
        .iter()
        .filter(|f| f.primary)
        .map(|f| match key.get(&f.name) {
            Some(Json::String(s)) => Value::Text(s.clone()),
            Some(Json::Bool(b)) => Value::Bool(*b),
            Some(Json::Number(n)) => match (n.as_i64(), n.as_u64()) {
                (Some(i), _) => Value::Int(i),
                (None, Some(u)) => Value::Int(u as i64),
                _ => Value::Float(n.as_f64().unwrap_or(0.0)),
            },
            _ => Value::Null,
        })
        .collect()
}

/// Whether `name: value` of a row's JSON is a field this build stores and syncs.
fn is_synced(table: &Table, name: &str, value: &Json) -> bool {
    !value.is_null()
        && table
            .field(name)
            .is_some_and(|f| !f.deprecated && syncs(&f.ty))
}

/// The synced fields of a row's JSON, as this build stores them, taken from it.
fn into_synced_fields(table: &Table, row: Map<String, Json>) -> Map<String, Json> {
    row.into_iter()
        .filter(|(name, v)| is_synced(table, name, v))
        .collect()
}

/// `row` as the bytes of a local object of table `ti`; `None` when it does
/// not fit: a value this build cannot hold (a wider enum, say). Such a row stays
/// as it is locally; its server state is held.
fn encode(schema: &Schema, ti: usize, collection: &str, row: Map<String, Json>) -> Option<Vec<u8>> {
    let reader = schema.table_reader(ti)?;
    match reader.encode_json(&Json::Object(into_synced_fields(schema.table(ti), row))) {
        Ok(bytes) => Some(bytes),
        Err(e) => {
            tracing::warn!(collection, error = %e, "a downloaded row does not fit the local schema");
            None
        }
    }
}

/// Inserts `row` as a new local object of `collection` (see [`encode`] for a
/// row that does not fit).
fn insert_local(
    txn: &mut Txn<'_>,
    schema: &Schema,
    ti: usize,
    collection: &str,
    row: Map<String, Json>,
) -> Result<()> {
    match encode(schema, ti, collection, row) {
        Some(bytes) => local_write(collection, txn.insert_bytes(collection, bytes).map(|_| ())),
        None => Ok(()),
    }
}

/// The synced fields of a row's JSON, as this build stores them.
fn synced_fields(table: &Table, row: &Map<String, Json>) -> Map<String, Json> {
    row.iter()
        .filter(|(name, v)| is_synced(table, name, v))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Makes the local object `key` read as `row` (`None`: absent), writing only if
/// its synced fields differ.
fn write_local(
    txn: &mut Txn<'_>,
    schema: &Schema,
    ti: usize,
    collection: &str,
    key: &Map<String, Json>,
    row: Option<Map<String, Json>>,
) -> Result<()> {
    let t = schema.table(ti);
    let key_values = key_values(t, key);
    let stored = txn.get_bytes(collection, &key_values)?;
    let Some(row) = row else {
        if stored.is_some() {
            local_write(
                collection,
                txn.delete_key(collection, &key_values).map(|_| ()),
            )?;
        }
        return Ok(());
    };
    let Some(stored) = stored else {
        return insert_local(txn, schema, ti, collection, row);
    };
    let (Some(reader), Some(bytes)) =
        (schema.table_reader(ti), encode(schema, ti, collection, row))
    else {
        return Ok(());
    };
    let now = row_json(schema, ti, &stored.bytes).map(|r| synced_fields(t, &r));
    let next = row_json(schema, ti, &bytes).map(|r| synced_fields(t, &r));
    if now == next {
        return Ok(());
    }
    let ids: Vec<u16> = t
        .fields
        .iter()
        .filter(|f| !f.deprecated && syncs(&f.ty))
        .map(|f| f.id)
        .collect();
    let merged = reader
        .patch(&stored.bytes, &bytes, &ids)
        .map_err(|source| Error::InvalidObject {
            op: "apply a downloaded row",
            collection: collection.to_owned(),
            source,
        })?;
    local_write(collection, txn.upsert_bytes(collection, merged).map(|_| ()))
}

/// The outcome of one local write of a downloaded row: a refusal by a local rule
/// (a unique index another local row holds, a `restrict` reference) skips that row
/// — the write changed nothing and the transaction goes on; the server's state is
/// held and the next download of the row tries again. Other errors end the apply.
fn local_write(collection: &str, r: Result<()>) -> Result<()> {
    match r {
        Err(
            e @ (Error::AlreadyExists { .. }
            | Error::Restricted { .. }
            | Error::UniqueIndexViolated { .. }
            | Error::InvalidVector { .. }
            | Error::DanglingReference { .. }
            | Error::TypeMismatch { .. }
            | Error::InvalidObject { .. }),
        ) => {
            tracing::warn!(collection, error = %e, "a downloaded row could not be written locally");
            Ok(())
        }
        other => other,
    }
}
