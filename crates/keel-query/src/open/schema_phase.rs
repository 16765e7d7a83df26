//! The schema phase of an open: run pending migrations, upgrade an older storage
//! format (1 → 2, see `layout/table.rs`; 2 → 3 only records the number), create or verify each collection's table, index
//! columns and indexes, decide which index columns are complete and which must be
//! filled (now, or by a background write after open), drop what the schema no
//! longer declares, and record the schema and the format — all in the open's
//! schema transaction, so a crash leaves the file as it was or as it will be.

use std::path::Path;
use std::sync::Arc;

use keel_schema::Schema;

use crate::base::error::{Error, Result};
use crate::layout::outbox;
use crate::layout::stored;
use crate::layout::stored::FieldSchema;
use crate::layout::stored::Relation;
use crate::layout::table::{
    backfill, ident, table_columns, Coll, IndexSql, DICT_TABLE_SQL, FORMAT, INDEX_COLUMNS_FORMAT,
};
use crate::open::inspect;
use crate::open::migrate::Migrator;
use crate::open::side_tables;

/// What the schema phase found, for the database to act on after open.
#[derive(Debug, Default)]
pub(crate) struct SchemaOutcome {
    /// Index columns to fill and index in a background write after open:
    /// `(collection, index)` positions in [`SchemaOutcome::colls`].
    pub(crate) pending: Vec<(usize, usize)>,
    /// Indexes queries may use at once: complete in what readers see already.
    pub(crate) ready: Vec<String>,
    /// Indexes this transaction makes complete (built now, or on a table it
    /// creates). Before durable the transaction has not committed and readers see
    /// the file without them, so queries may use them only once it has (the first
    /// write after the barrier says so); until then they scan the bodies.
    pub(crate) staged: Vec<String>,
    /// The typed error of a failed schema phase (the kernel carries only its text).
    pub(crate) failure: Option<Error>,
    /// Collections whose table this open creates. While the open barrier runs the
    /// schema transaction is not committed yet, so readers do not see these tables.
    pub(crate) created: Vec<String>,
    /// The collections as laid out by this open (an older build's include the
    /// stored newer schema's index columns).
    pub(crate) colls: Option<Vec<Coll>>,
    /// A format upgrade this open made: `(from format, objects rewritten)`.
    pub(crate) upgraded: Option<(i64, u64)>,
}

const META_DDL: &str = "CREATE TABLE IF NOT EXISTS keel_meta(key TEXT PRIMARY KEY, value) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS keel_index(name TEXT PRIMARY KEY, collection TEXT NOT NULL, field INTEGER NOT NULL, is_unique INTEGER NOT NULL, state TEXT NOT NULL, sig TEXT);";

fn sq(
    path: &Path,
) -> impl Fn(&'static str) -> Box<dyn Fn(rusqlite::Error) -> keel_storage::Error> + '_ {
    move |op| {
        let p = path.to_path_buf();
        Box::new(move |e| stored::classify(op, &p, e))
    }
}

/// The storage format recorded in the file; a file with a stored schema but no
/// format entry predates the entry and is format 1. `None` for a new file.
fn stored_format(conn: &rusqlite::Connection, has_schema: bool) -> rusqlite::Result<Option<i64>> {
    match conn.query_row(
        "SELECT value FROM keel_meta WHERE key = 'format'",
        [],
        |r| r.get::<_, i64>(0),
    ) {
        Ok(v) => Ok(Some(v)),
        Err(rusqlite::Error::QueryReturnedNoRows) => Ok(has_schema.then_some(1)),
        Err(e) => Err(e),
    }
}

/// Record index `ix` of collection `coll` as `state`; `sig` only once its column
/// is complete (a build that never finished leaves none: the next open rebuilds).
fn record_index(
    conn: &rusqlite::Connection,
    coll: &str,
    ix: &IndexSql,
    state: &str,
) -> rusqlite::Result<()> {
    let sig = (state == "ready").then_some(ix.sig.as_str());
    conn.execute(
        "INSERT INTO keel_index(name, collection, field, is_unique, state, sig) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
         ON CONFLICT(name) DO UPDATE SET state = excluded.state, sig = excluded.sig
         WHERE state IS NOT excluded.state OR sig IS NOT excluded.sig",
        rusqlite::params![ix.name, coll, ix.field, ix.unique, state, sig],
    )?;
    Ok(())
}

/// Mark index `name` complete (the background build's last statement).
pub(crate) fn record_ready(
    conn: &rusqlite::Connection,
    coll: &str,
    ix: &IndexSql,
) -> rusqlite::Result<()> {
    record_index(conn, coll, ix, "ready")
}

/// Format 1 → 2, first half: drop every expression index over `keel_field` (the
/// schema phase then rebuilds each as a column and a plain index, in this same
/// transaction) and give `keel_index` its `sig` column.
fn upgrade_format(conn: &rusqlite::Connection, path: &Path) -> Result<()> {
    let err = sq(path);
    let names: Vec<String> = {
        let mut st = conn
            .prepare(
                "SELECT name FROM sqlite_schema WHERE type = 'index' AND sql LIKE '%keel_field(%'",
            )
            .map_err(err("format upgrade: list expression indexes"))?;
        let rows = st
            .query_map([], |r| r.get::<_, String>(0))
            .map_err(err("format upgrade: list expression indexes"))?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(err("format upgrade: list expression indexes"))?;
        rows
    };
    for n in names {
        conn.execute_batch(&format!("DROP INDEX IF EXISTS {}", ident(&n)))
            .map_err(err("format upgrade: drop expression index"))?;
        conn.execute("DELETE FROM keel_index WHERE name = ?1", [&n])
            .map_err(err("format upgrade: drop expression index"))?;
    }
    Ok(())
}

/// The schema phase: run pending migrations, upgrade an older storage format,
/// create/verify tables, index columns and indexes, record the schema (see
/// `layout/stored.rs` for what an older schema may change). `progress` gets the fraction
/// done of the work that scales with the data (a format upgrade, unique index
/// builds), `0.0 ..= 1.0`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn schema_phase(
    conn: &rusqlite::Connection,
    path: &Path,
    schema: &Schema,
    colls: &[Coll],
    field_schema: &FieldSchema,
    migrator: Option<&mut Migrator>,
    progress: &dyn Fn(f32),
) -> Result<SchemaOutcome> {
    let err = sq(path);
    conn.execute_batch(META_DDL)
        .map_err(err("create keel metadata tables"))?;
    if !table_columns(conn, "keel_index")
        .map_err(err("inspect keel_index"))?
        .iter()
        .any(|c| c == "sig")
    {
        conn.execute_batch("ALTER TABLE keel_index ADD COLUMN sig TEXT")
            .map_err(err("format upgrade: keel_index.sig"))?;
    }
    conn.execute_batch(DICT_TABLE_SQL)
        .map_err(err("create the dictionary table"))?;
    // Before any write can number an outbox operation (`layout/outbox.rs`).
    outbox::upgrade(conn).map_err(err("prepare the sync outbox"))?;
    let mut stored = stored::read_stored(conn, path)?;
    let format = stored_format(conn, stored.is_some()).map_err(err("read the storage format"))?;
    if let Some(f) = format.filter(|f| *f > FORMAT) {
        return Err(keel_storage::Error::Schema {
            path: path.to_path_buf(),
            message: format!(
                "the file has storage format {f}, written by a newer keel; this build reads formats up to {FORMAT}"
            ),
        }
        .into());
    }
    // Only a file without index columns (format 1) is rewritten; from format 2 on
    // the layout reads as it is, and the format recorded below moves up.
    let upgrading = format.is_some_and(|f| f < INDEX_COLUMNS_FORMAT);
    if upgrading {
        tracing::info!(from = ?format, to = FORMAT, "upgrading the storage format in the schema transaction");
        upgrade_format(conn, path)?;
    }
    // Migrations may rewrite rows behind the full-text index: rebuild it then.
    let migrations_done = |conn: &rusqlite::Connection| -> i64 {
        conn.query_row("SELECT count(*) FROM keel_migrations", [], |r| r.get(0))
            .unwrap_or(0)
    };
    let before_migrations = migrations_done(conn);
    if let Some(m) = migrator {
        stored = m.run(conn, path, stored, schema)?;
    }
    let migrated = migrations_done(conn) != before_migrations;
    // A schema that differs from the stored one may declare references
    // `dangling: false` over data that names missing objects: checked below.
    let changed = stored
        .as_ref()
        .is_some_and(|s| s.fingerprint() != schema.fingerprint());
    let relation = stored::relate(path, stored, schema, field_schema)?;
    let colls: Vec<Coll> = match &relation {
        Relation::Older(newer) => (0..colls.len())
            .map(|ci| Coll::build(schema, ci, newer))
            .collect::<Result<_>>()?,
        Relation::Upgrade => colls.to_vec(),
    };
    let keep: Vec<String> = match &relation {
        Relation::Older(newer) => stored::declared_indexes(newer)?,
        Relation::Upgrade => Vec::new(),
    };
    let exists = |kind: &str, name: &str| -> rusqlite::Result<bool> {
        conn.query_row(
            "SELECT count(*) FROM sqlite_schema WHERE type = ?1 AND name = ?2",
            [kind, name],
            |r| r.get::<_, i64>(0),
        )
        .map(|n| n > 0)
    };
    let mut out = SchemaOutcome::default();
    let mut wanted = Vec::new();
    // (collection, index) built now, in this transaction.
    let mut now: Vec<(usize, usize)> = Vec::new();
    for (ci, c) in colls.iter().enumerate() {
        let fresh = !exists("table", &c.name).map_err(err("inspect tables"))?;
        if fresh {
            out.created.push(c.name.clone());
        }
        conn.execute_batch(&c.create_table_sql())
            .map_err(err("create collection table"))?;
        // Verify an existing table has keel's layout for this collection.
        let cols = table_columns(conn, &c.ident).map_err(err("inspect collection table"))?;
        let want: Vec<String> = std::iter::once("rowid".to_string())
            .chain((0..c.key.len()).map(|i| format!("k{i}")))
            .chain(std::iter::once("body".to_string()))
            .collect();
        if cols.len() < want.len() || cols[..want.len()] != want[..] {
            return Err(keel_storage::Error::Schema {
                path: path.to_path_buf(),
                message: format!(
                    "table {} has columns {cols:?}, expected {want:?} first (was its primary key changed?)",
                    c.ident
                ),
            }
            .into());
        }
        for (k, ix) in c.indexes.iter().enumerate() {
            wanted.push(ix.name.clone());
            let mut added = false;
            if !cols.contains(&ix.column) {
                conn.execute_batch(&format!(
                    "ALTER TABLE {} ADD COLUMN {}",
                    c.ident, ix.col_ident
                ))
                .map_err(err("add index column"))?;
                added = true;
            }
            let built = exists("index", &ix.name).map_err(err("inspect indexes"))?;
            let recorded: Option<(String, Option<String>)> = conn
                .query_row(
                    "SELECT state, sig FROM keel_index WHERE name = ?1",
                    [&ix.name],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .map(Some)
                .or_else(|e| match e {
                    rusqlite::Error::QueryReturnedNoRows => Ok(None),
                    e => Err(e),
                })
                .map_err(err("read index state"))?;
            let complete = built
                && !added
                && recorded
                    .as_ref()
                    .is_some_and(|(st, sig)| st == "ready" && sig.as_deref() == Some(&ix.sig));
            let state = if fresh || complete {
                if !built {
                    conn.execute_batch(&ix.create)
                        .map_err(err("create index"))?;
                }
                "ready"
            } else if ix.unique || upgrading {
                // Not in the background: a duplicate must fail the open, never
                // leave uniqueness silently unenforced; a format upgrade leaves no
                // file half old, half new.
                if built {
                    // Its column is being recomputed (a schema change altered it):
                    // the old entries would only slow the backfill down.
                    conn.execute_batch(&format!("DROP INDEX IF EXISTS {}", ident(&ix.name)))
                        .map_err(err("drop index to rebuild"))?;
                }
                now.push((ci, k));
                "ready"
            } else {
                if recorded.is_some() && built {
                    tracing::info!(index = %ix.name, "the schema changed what this index holds: rebuilding its column in the background");
                }
                out.pending.push((ci, k));
                "building"
            };
            if state == "ready" {
                if complete {
                    out.ready.push(ix.name.clone());
                } else {
                    out.staged.push(ix.name.clone());
                }
            }
            record_index(conn, &c.name, ix, state).map_err(err("record index state"))?;
        }
    }
    // Columns filled and indexes built now: one pass per collection.
    let total: u64 = {
        let mut n = 0u64;
        let mut seen = Vec::new();
        for (ci, _) in &now {
            if !seen.contains(ci) {
                seen.push(*ci);
                n += conn
                    .query_row(
                        &format!("SELECT count(*) FROM {}", colls[*ci].ident),
                        [],
                        |r| r.get::<_, i64>(0),
                    )
                    .map_err(err("count objects"))? as u64;
            }
        }
        n
    };
    let mut base = 0u64;
    let mut objects = 0u64;
    for (ci, c) in colls.iter().enumerate() {
        let which: Vec<usize> = now
            .iter()
            .filter(|(x, _)| *x == ci)
            .map(|(_, k)| *k)
            .collect();
        if which.is_empty() {
            continue;
        }
        let n = backfill(conn, c, &which, &mut |done| {
            if total > 0 {
                progress((base + done) as f32 / total as f32);
            }
        })
        .map_err(err("fill index columns"))?;
        base += n;
        objects += n;
        for k in which {
            let ix = &c.indexes[k];
            if ix.unique {
                stored::build_unique(conn, path, c, ix)?;
            } else {
                conn.execute_batch(&ix.create)
                    .map_err(err("create index"))?;
            }
        }
    }
    if upgrading {
        out.upgraded = Some((format.unwrap_or(1), objects));
    }
    // Side tables (full-text indexes, packed vectors: `layout/side_table.rs`):
    // built or rebuilt here, in this transaction, so a crash leaves the old table
    // or the new one, never half of one.
    side_tables::sync_all(conn, &colls, migrated, &mut |done, total| {
        if total > 0 {
            progress(done as f32 / total as f32);
        }
    })
    .map_err(err("build the side tables"))?;
    // Indexes the schema no longer declares: drop them and their columns (they
    // only cost writes).
    let old: Vec<(String, String)> = {
        let mut st = conn
            .prepare("SELECT name, collection FROM keel_index")
            .map_err(err("list indexes"))?;
        let rows = st
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
            .map_err(err("list indexes"))?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(err("list indexes"))?;
        rows
    };
    for (name, coll) in old
        .iter()
        .filter(|(n, _)| !wanted.contains(n) && !keep.contains(n))
    {
        conn.execute_batch(&format!("DROP INDEX IF EXISTS {}", ident(name)))
            .map_err(err("drop removed index"))?;
        conn.execute("DELETE FROM keel_index WHERE name = ?1", [name])
            .map_err(err("drop removed index"))?;
        if let Some((_, steps)) = name.rsplit_once('#') {
            let column = format!("f{steps}");
            let t = ident(coll);
            let has = exists("table", coll).map_err(err("drop removed index"))?
                && table_columns(conn, &t)
                    .map_err(err("drop removed index"))?
                    .contains(&column);
            if has {
                conn.execute_batch(&format!("ALTER TABLE {t} DROP COLUMN {}", ident(&column)))
                    .map_err(err("drop removed index column"))?;
            }
        }
    }
    conn.execute(
        "INSERT INTO keel_meta(key, value) VALUES ('format', ?1)
         ON CONFLICT(key) DO UPDATE SET value = excluded.value WHERE value IS NOT excluded.value",
        [FORMAT],
    )
    .map_err(err("record the storage format"))?;
    if changed && matches!(relation, Relation::Upgrade) {
        // One pass over the collections with such references, at the schema
        // change only: a dangling one refuses the whole schema transaction, so
        // the file keeps its old schema and every object.
        let refused = inspect::refused_dangling(conn, &Arc::new(schema.clone()), 1).map_err(
            err("check the references the schema declares dangling: false"),
        )?;
        if let Some(d) = refused.into_iter().next() {
            return Err(Error::DanglingReference {
                op: "open with a schema that declares this reference dangling: false",
                collection: d.collection,
                field: d.field,
                target: d.target,
                key: vec![d.key],
            });
        }
    }
    out.colls = Some(colls);
    if matches!(relation, Relation::Older(_)) {
        // An older build: the newer stored schema stays (see layout/stored.rs).
        return Ok(out);
    }
    conn.execute(
        // Written only when it differs, so a plain reopen writes nothing.
        "INSERT INTO keel_meta(key, value) VALUES ('schema', ?1), ('fingerprint', ?2)
         ON CONFLICT(key) DO UPDATE SET value = excluded.value WHERE value IS NOT excluded.value",
        rusqlite::params![schema.to_fbs(), format!("{:016x}", schema.fingerprint())],
    )
    .map_err(err("record schema"))?;
    Ok(out)
}
