//! The full-text index as a side table (`side_table.rs`, which holds the life
//! every side table shares): what a row becomes in it, and how `keel check`
//! compares the index with the rows.
//!
//! Row by row, the index is written by `txn/transaction.rs` in the same transaction — and
//! the same savepoint — as the row, never by triggers: the FTS5 table is a
//! regular one that holds each row's token stream (`search/language.rs`), so stock SQLite
//! reads it, `integrity-check` verifies it, and a rollback takes both back.
//! `keel_meta` keeps, per collection, `search:<collection>` = what the table was
//! built with ([`SearchSql::sig`](crate::search::language::SearchSql)); a different
//! signature (a field added to or removed from the index, another tokenizer)
//! rebuilds it at open.

use rusqlite::{Connection, Statement};

use crate::layout::side_table::{table_exists, Drift, Kind, Owner, SideTable, Sql};
use crate::search::language::SearchSql;

impl SideTable for SearchSql {
    fn kind(&self) -> Kind {
        Kind::Search
    }

    fn sql(&self) -> Sql<'_> {
        Sql {
            name: &self.name,
            signature: &self.sig,
            upsert: &self.upsert,
            delete: &self.delete,
        }
    }

    fn create(&self) -> String {
        self.create.clone()
    }

    /// FTS5 keeps its rowids in its own shadow tables: an entry moves by a copy
    /// and a delete.
    fn move_row(&self, conn: &Connection, from: i64, to: i64) -> rusqlite::Result<()> {
        let cols: Vec<&str> = self.fields.iter().map(|f| f.column.as_str()).collect();
        conn.execute_batch(&format!(
            "INSERT INTO {i}(rowid, {cs}) SELECT {to}, {cs} FROM {i} WHERE rowid = {from}; \
             DELETE FROM {i} WHERE rowid = {from};",
            i = self.ident,
            cs = cols.join(", "),
        ))
    }

    fn write(&self, st: &mut Statement<'_>, rowid: i64, bytes: &[u8]) -> rusqlite::Result<()> {
        let streams = self.streams(bytes);
        st.raw_bind_parameter(1, rowid)?;
        for (i, t) in streams.iter().enumerate() {
            st.raw_bind_parameter(i + 2, t.as_str())?;
        }
        st.raw_execute()?;
        Ok(())
    }

    /// Each row's token streams against the entry of its rowid, then FTS5's
    /// `integrity-check` of the index structure against those entries.
    fn compare(
        &self,
        conn: &Connection,
        c: Owner<'_>,
        limit: usize,
    ) -> rusqlite::Result<Vec<Drift>> {
        let s = self;
        let mut out = Vec::new();
        let drift = |rowid: i64, problem: &str| Drift {
            collection: c.name.to_owned(),
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
        let next_idx =
            |idx: &mut rusqlite::Rows<'_>| -> rusqlite::Result<Option<(i64, Vec<String>)>> {
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
}
