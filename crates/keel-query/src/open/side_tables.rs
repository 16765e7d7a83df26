//! Bringing every collection's side tables to what the schema declares, in the
//! open's schema transaction, and rebuilding one for `keel check --repair`. The
//! interface every side table implements, and why they live this way, is in
//! `layout/side_table.rs`.

use rusqlite::{Connection, OptionalExtension};

use crate::layout::side_table::{fill, table_exists, Kind, SideTable};
use crate::layout::table::{ident, Coll};

/// What `keel_meta` records for `collection`'s table of `kind`.
fn stored_signature(
    conn: &Connection,
    kind: Kind,
    collection: &str,
) -> rusqlite::Result<Option<String>> {
    conn.query_row(
        "SELECT value FROM keel_meta WHERE key = ?1",
        [kind.meta_key(collection)],
        |r| r.get(0),
    )
    .optional()
}

/// Drop `collection`'s table of `kind` and what `keel_meta` records of it.
fn drop_table(conn: &Connection, kind: Kind, collection: &str) -> rusqlite::Result<()> {
    let name = format!("{collection}{}", kind.suffix());
    conn.execute_batch(&format!("DROP TABLE IF EXISTS {}", ident(&name)))?;
    for key in std::iter::once(kind.meta_key(collection)).chain(kind.owned_meta_keys(collection)) {
        conn.execute("DELETE FROM keel_meta WHERE key = ?1", [key])?;
    }
    Ok(())
}

/// Recreate `t`, `c`'s side table, from `c`'s rows and record its signature;
/// returns the rows written.
fn build(
    conn: &Connection,
    c: &Coll,
    t: &dyn SideTable,
    progress: &mut dyn FnMut(u64),
) -> rusqlite::Result<u64> {
    tracing::info!(collection = %c.name, table = t.kind().label(), "building");
    conn.execute_batch(&format!(
        "DROP TABLE IF EXISTS {}; {};",
        ident(t.sql().name),
        t.create()
    ))?;
    let n = fill(conn, c.owner(), t, progress)?;
    conn.execute(
        "INSERT INTO keel_meta(key, value) VALUES (?1, ?2)
         ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        rusqlite::params![t.kind().meta_key(&c.name), t.sql().signature],
    )?;
    Ok(n)
}

/// Brings every side table of `colls` to what they declare, in the caller's
/// transaction: builds missing ones, rebuilds those built with another signature
/// (or every one, with `force`: a migration rewrote rows behind their back),
/// drops those a collection no longer declares and those of collections the
/// schema no longer has. Calls `progress(done, total)` (rows) while building.
/// Returns `(kind, collection)` for each table built.
pub(crate) fn sync_all(
    conn: &Connection,
    colls: &[Coll],
    force: bool,
    progress: &mut dyn FnMut(u64, u64),
) -> rusqlite::Result<Vec<(Kind, String)>> {
    let mut todo: Vec<(&Coll, &dyn SideTable)> = Vec::new();
    for kind in Kind::ALL {
        for c in colls {
            let stored = stored_signature(conn, kind, &c.name)?;
            match c.side_table(kind) {
                Some(t) => {
                    let current = stored.as_deref() == Some(t.sql().signature)
                        && table_exists(conn, t.sql().name)?;
                    if force || !current {
                        todo.push((c, t));
                    } else {
                        t.keep_current(conn)?;
                    }
                }
                None => {
                    let name = format!("{}{}", c.name, kind.suffix());
                    if stored.is_some() || table_exists(conn, &name)? {
                        tracing::info!(collection = %c.name, table = kind.label(), "no longer declared: dropping");
                        drop_table(conn, kind, &c.name)?;
                    }
                }
            }
        }
        // Tables of collections the schema no longer has (a migration dropped them).
        let pattern = format!("%{}", kind.suffix());
        let orphans: Vec<String> = {
            let mut st = conn
                .prepare("SELECT name FROM sqlite_schema WHERE type = 'table' AND name LIKE ?1")?;
            let names = st
                .query_map([&pattern], |r| r.get::<_, String>(0))?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            names
        };
        for name in orphans {
            let Some(coll) = name.strip_suffix(kind.suffix()) else {
                continue;
            };
            if !colls.iter().any(|c| c.name == coll) {
                drop_table(conn, kind, coll)?;
            }
        }
    }
    if todo.is_empty() {
        return Ok(Vec::new());
    }
    let mut total = 0u64;
    for (c, _) in &todo {
        total += conn.query_row(&format!("SELECT count(*) FROM {}", c.ident), [], |r| {
            r.get::<_, i64>(0)
        })? as u64;
    }
    let mut base = 0u64;
    let mut out = Vec::new();
    for (c, t) in todo {
        base += build(conn, c, t, &mut |n| progress(base + n, total))?;
        out.push((t.kind(), c.name.clone()));
    }
    Ok(out)
}

/// Rebuild `c`'s side table of `kind` from its rows, in the caller's
/// transaction. Returns the rows written (0 when `c` keeps no such table).
pub(crate) fn rebuild(conn: &Connection, c: &Coll, kind: Kind) -> rusqlite::Result<u64> {
    match c.side_table(kind) {
        Some(t) => build(conn, c, t, &mut |_| {}),
        None => Ok(0),
    }
}
