//! The full-text index's life beside its collection: created, rebuilt when what
//! it holds changes (at open, in the schema transaction), dropped when no field
//! is searchable any more, and compared with the rows (`keel check`).
//!
//! Row by row, the index is written by `txn/transaction.rs` in the same transaction — and
//! the same savepoint — as the row, never by triggers: the FTS5 table is a
//! regular one that holds each row's token stream (`search/language.rs`), so stock SQLite
//! reads it, `integrity-check` verifies it, and a rollback takes both back.
//! `keel_meta` keeps, per collection, `search:<collection>` = what the table was
//! built with ([`SearchSql::sig`](crate::search::language::SearchSql)); a different
//! signature (a field added to or removed from the index, another tokenizer)
//! rebuilds it.

use crate::layout::table::Coll;
use crate::search::language::SearchSql;

/// The `keel_meta` key recording what a collection's index was built with.
fn meta_key(collection: &str) -> String {
    format!("search:{collection}")
}

fn table_exists(conn: &rusqlite::Connection, name: &str) -> rusqlite::Result<bool> {
    conn.query_row(
        "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = ?1",
        [name],
        |r| r.get::<_, i64>(0),
    )
    .map(|n| n > 0)
}

/// Drop the FTS5 table `name` and its record.
fn drop_index(conn: &rusqlite::Connection, collection: &str, name: &str) -> rusqlite::Result<()> {
    conn.execute_batch(&format!(
        "DROP TABLE IF EXISTS \"{}\"",
        name.replace('"', "\"\"")
    ))?;
    conn.execute(
        "DELETE FROM keel_meta WHERE key = ?1",
        [meta_key(collection)],
    )?;
    Ok(())
}

/// Brings every collection's full-text index to what `colls` declare, in the
/// caller's transaction: creates missing ones, rebuilds those built with another
/// signature (or every one, with `force`: a migration rewrote rows behind the
/// index's back), drops those of collections without searchable fields. Calls
/// `progress(done, total)` while rebuilding. Returns the collections rebuilt.
pub(crate) fn sync_all(
    conn: &rusqlite::Connection,
    colls: &[Coll],
    force: bool,
    progress: &mut dyn FnMut(u64, u64),
) -> rusqlite::Result<Vec<String>> {
    let mut todo: Vec<&Coll> = Vec::new();
    for c in colls {
        let stored: Option<String> = conn
            .query_row(
                "SELECT value FROM keel_meta WHERE key = ?1",
                [meta_key(&c.name)],
                |r| r.get(0),
            )
            .map(Some)
            .or_else(|e| match e {
                rusqlite::Error::QueryReturnedNoRows => Ok(None),
                e => Err(e),
            })?;
        match &c.search {
            Some(s) => {
                let current =
                    stored.as_deref() == Some(s.sig.as_str()) && table_exists(conn, &s.name)?;
                if force || !current {
                    todo.push(c);
                }
            }
            None => {
                let name = format!("{}$fts", c.name);
                if stored.is_some() || table_exists(conn, &name)? {
                    tracing::info!(collection = %c.name, "no field is searchable any more: dropping the full-text index");
                    drop_index(conn, &c.name, &name)?;
                }
            }
        }
    }
    // Indexes of collections the schema no longer has (a migration dropped them).
    let orphans: Vec<String> = {
        let mut st = conn.prepare(
            "SELECT name FROM sqlite_schema WHERE type = 'table' AND sql LIKE 'CREATE VIRTUAL TABLE%' AND name LIKE '%$fts'",
        )?;
        let names = st
            .query_map([], |r| r.get::<_, String>(0))?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        names
    };
    for name in orphans {
        let coll = name.trim_end_matches("$fts");
        if !colls.iter().any(|c| c.name == coll) {
            drop_index(conn, coll, &name)?;
        }
    }
    if todo.is_empty() {
        return Ok(Vec::new());
    }
    let mut total = 0u64;
    for c in &todo {
        total += conn.query_row(&format!("SELECT count(*) FROM {}", c.ident), [], |r| {
            r.get::<_, i64>(0)
        })? as u64;
    }
    let mut base = 0u64;
    let mut out = Vec::new();
    for c in todo {
        let Some(s) = &c.search else { continue };
        tracing::info!(collection = %c.name, "building the full-text index");
        conn.execute_batch(&format!("DROP TABLE IF EXISTS {}; {};", s.ident, s.create))?;
        base += fill(conn, c, s, &mut |n| progress(base + n, total))?;
        conn.execute(
            "INSERT INTO keel_meta(key, value) VALUES (?1, ?2)
             ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            rusqlite::params![meta_key(&c.name), s.sig],
        )?;
        out.push(c.name.clone());
    }
    Ok(out)
}

/// Writes every row of `c` into its (empty) index `s`; returns the row count.
fn fill(
    conn: &rusqlite::Connection,
    c: &Coll,
    s: &SearchSql,
    progress: &mut dyn FnMut(u64),
) -> rusqlite::Result<u64> {
    let mut st = conn.prepare(&format!(
        "SELECT rowid, {} FROM {} ORDER BY rowid",
        c.body.select(),
        c.ident
    ))?;
    let mut ins = conn.prepare(&s.upsert)?;
    let mut rows = st.query([])?;
    let mut scratch = Vec::new();
    let mut n = 0u64;
    while let Some(r) = rows.next()? {
        let rowid: i64 = r.get(0)?;
        let bytes = c.body.read(r, 1, &mut scratch)?;
        write(&mut ins, s, rowid, bytes)?;
        n += 1;
        if n.is_multiple_of(1024) {
            progress(n);
        }
    }
    progress(n);
    Ok(n)
}

/// Binds and runs `s.upsert` for the object `bytes` at `rowid`.
pub(crate) fn write(
    st: &mut rusqlite::Statement<'_>,
    s: &SearchSql,
    rowid: i64,
    bytes: &[u8],
) -> rusqlite::Result<()> {
    let streams = s.streams(bytes);
    st.raw_bind_parameter(1, rowid)?;
    for (i, t) in streams.iter().enumerate() {
        st.raw_bind_parameter(i + 2, t.as_str())?;
    }
    st.raw_execute()?;
    Ok(())
}

/// One disagreement between a collection's rows and its full-text index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Drift {
    pub(crate) collection: String,
    pub(crate) rowid: i64,
    /// `missing` (a row the index lacks), `extra` (an index entry without a
    /// row), `stale` (the entry holds other text than the row), or FTS5's own
    /// `integrity-check` failure (rowid 0).
    pub(crate) problem: String,
}

/// Compares `c`'s rows with its full-text index: each row's token streams with
/// the entry of its rowid, then FTS5's `integrity-check` of the index structure
/// against those entries. At most `limit` disagreements.
pub(crate) fn compare(
    conn: &rusqlite::Connection,
    c: &Coll,
    limit: usize,
) -> rusqlite::Result<Vec<Drift>> {
    let Some(s) = &c.search else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    let drift = |rowid: i64, problem: &str| Drift {
        collection: c.name.clone(),
        rowid,
        problem: problem.to_owned(),
    };
    if !table_exists(conn, &s.name)? {
        out.push(drift(0, "the full-text index table is missing"));
        return Ok(out);
    }
    let cols: Vec<&str> = s.fields.iter().map(|f| f.column.as_str()).collect();
    let mut rows_st = conn.prepare(&format!(
        "SELECT rowid, {} FROM {} ORDER BY rowid",
        c.body.select(),
        c.ident
    ))?;
    let mut idx_st = conn.prepare(&format!(
        "SELECT rowid, {} FROM {} ORDER BY rowid",
        cols.join(", "),
        s.ident
    ))?;
    let mut rows = rows_st.query([])?;
    let mut idx = idx_st.query([])?;
    let mut scratch = Vec::new();
    let next_idx = |idx: &mut rusqlite::Rows<'_>| -> rusqlite::Result<Option<(i64, Vec<String>)>> {
        match idx.next()? {
            Some(r) => {
                let id: i64 = r.get(0)?;
                let v = (0..cols.len())
                    .map(|i| {
                        r.get::<_, Option<String>>(i + 1)
                            .map(Option::unwrap_or_default)
                    })
                    .collect::<rusqlite::Result<Vec<_>>>()?;
                Ok(Some((id, v)))
            }
            None => Ok(None),
        }
    };
    let mut cur = next_idx(&mut idx)?;
    while let Some(r) = rows.next()? {
        let rowid: i64 = r.get(0)?;
        let want = s.streams(c.body.read(r, 1, &mut scratch)?);
        while let Some((id, _)) = &cur {
            if *id >= rowid {
                break;
            }
            if out.len() < limit {
                out.push(drift(*id, "extra"));
            }
            cur = next_idx(&mut idx)?;
        }
        match &cur {
            Some((id, got)) if *id == rowid => {
                if *got != want && out.len() < limit {
                    out.push(drift(rowid, "stale"));
                }
                cur = next_idx(&mut idx)?;
            }
            _ => {
                if out.len() < limit {
                    out.push(drift(rowid, "missing"));
                }
            }
        }
    }
    while let Some((id, _)) = cur {
        if out.len() < limit {
            out.push(drift(id, "extra"));
        }
        cur = next_idx(&mut idx)?;
    }
    drop(rows);
    drop(idx);
    // The index's own structure against its entries (FTS5 answers with an
    // error). It is an INSERT of a command row, refused on a read-only
    // connection; there SQLite's `PRAGMA integrity_check` covers FTS5 tables.
    if conn.is_readonly(c"main")? {
        return Ok(out);
    }
    if let Err(e) = conn.execute(
        &format!(
            "INSERT INTO {}({}) VALUES ('integrity-check')",
            s.ident, s.ident
        ),
        [],
    ) {
        if out.len() < limit {
            out.push(drift(0, &format!("FTS5 integrity-check: {e}")));
        }
    }
    Ok(out)
}

/// Rebuilds `c`'s full-text index from its rows, in the caller's transaction.
/// Returns the rows indexed.
pub(crate) fn rebuild(conn: &rusqlite::Connection, c: &Coll) -> rusqlite::Result<u64> {
    let Some(s) = &c.search else {
        return Ok(0);
    };
    conn.execute_batch(&format!("DROP TABLE IF EXISTS {}; {};", s.ident, s.create))?;
    let n = fill(conn, c, s, &mut |_| {})?;
    conn.execute(
        "INSERT INTO keel_meta(key, value) VALUES (?1, ?2)
         ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        rusqlite::params![meta_key(&c.name), s.sig],
    )?;
    Ok(n)
}
