//! The tables keel keeps beside a collection's table, row for row: the full-text
//! index of `(searchable)` fields (`fts.rs`) and the packed vector table of
//! `(vector: N)` fields (`vector_table.rs`).
//!
//! Every side table lives the same life, so it is written once, here and in
//! `open::side_tables`:
//!
//! * **Row by row** the transaction writes it in the same savepoint as the row
//!   ([`SideTable::write`] on insert and update, [`Sql::delete`] on delete):
//!   never a trigger, so a rollback takes both back.
//! * **At open**, in the schema transaction, a table whose recorded signature
//!   (`keel_meta`, [`Kind::meta_key`]) differs from what the schema declares is
//!   rebuilt from the rows, a missing one is built, and the table of a collection
//!   that no longer declares one is dropped. A crash leaves the old table or the
//!   new one, never half of one.
//! * **`keel check`** compares it with the rows ([`SideTable::compare`]) and
//!   `--repair` rebuilds it.
//!
//! What differs between kinds is only what a row becomes (token streams, packed
//! floats) and how a stored entry is compared with it.

use rusqlite::{Connection, Statement};

use crate::layout::body::BodyColumns;

/// The kinds of side table. Each kind has one table per collection at most,
/// named `<collection><suffix>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// The FTS5 index of `(searchable)` fields.
    Search,
    /// The packed vectors of `(vector: N)` fields.
    Vector,
}

impl Kind {
    /// Every kind, in the order the schema phase brings them up to date.
    pub(crate) const ALL: [Kind; 2] = [Kind::Search, Kind::Vector];

    /// What logs and errors call it.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Kind::Search => "full-text index",
            Kind::Vector => "vector table",
        }
    }

    /// The table name's suffix after the collection's name.
    pub(crate) fn suffix(self) -> &'static str {
        match self {
            Kind::Search => "$fts",
            Kind::Vector => "$vec",
        }
    }

    /// The `keel_meta` key recording what `collection`'s table was built with.
    pub(crate) fn meta_key(self, collection: &str) -> String {
        match self {
            Kind::Search => format!("search:{collection}"),
            Kind::Vector => format!("vector:{collection}"),
        }
    }

    /// Other `keel_meta` keys that belong to `collection`'s table and go with it
    /// when it is dropped (the vector table's generation, `vector/cache.rs`).
    pub(crate) fn owned_meta_keys(self, collection: &str) -> Vec<String> {
        match self {
            Kind::Search => Vec::new(),
            Kind::Vector => vec![format!("vector-gen:{collection}")],
        }
    }
}

/// The collection a side table belongs to, as its rows are read.
#[derive(Clone, Copy)]
pub(crate) struct Owner<'a> {
    /// The collection's name.
    pub(crate) name: &'a str,
    /// Its table as an SQL identifier.
    pub(crate) ident: &'a str,
    /// How its `body` column holds each object's bytes.
    pub(crate) body: &'a BodyColumns,
}

/// One disagreement between a collection's rows and one of its side tables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Drift {
    /// The collection.
    pub(crate) collection: String,
    /// The object's rowid (0 for a problem of the whole table).
    pub(crate) rowid: i64,
    /// `missing` (the table lacks the row), `extra` (an entry without a row),
    /// `stale …` (the entry differs from the row), or what is wrong with the
    /// whole table.
    pub(crate) problem: String,
}

/// A side table's SQL, borrowed from the kind's own description of it.
#[derive(Clone, Copy)]
pub(crate) struct Sql<'a> {
    /// The table's name (`blog.Note$fts`).
    pub(crate) name: &'a str,
    /// What the table must have been built with: a change rebuilds it at open.
    pub(crate) signature: &'a str,
    /// The upsert by rowid that [`SideTable::write`] binds and runs.
    pub(crate) upsert: &'a str,
    /// `DELETE … WHERE rowid = ?1`.
    pub(crate) delete: &'a str,
}

/// One side table of one collection: its SQL, and what each row becomes in it.
pub(crate) trait SideTable {
    /// Which kind it is.
    fn kind(&self) -> Kind;
    /// Its SQL: name, signature and the statements a row's life runs.
    fn sql(&self) -> Sql<'_>;
    /// The statements that create the empty table and what goes with it.
    fn create(&self) -> String;
    /// Binds [`Sql::upsert`] (prepared) for the object `bytes` at `rowid`
    /// and runs it.
    fn write(&self, st: &mut Statement<'_>, rowid: i64, bytes: &[u8]) -> rusqlite::Result<()>;
    /// Moves the entry of the row `from` to the rowid `to` (the row itself moved).
    fn move_row(&self, conn: &Connection, from: i64, to: i64) -> rusqlite::Result<()> {
        conn.execute(
            &format!(
                "UPDATE {} SET rowid = ?1 WHERE rowid = ?2",
                quote(self.sql().name)
            ),
            [to, from],
        )
        .map(|_| ())
    }
    /// Upkeep when the stored table is current (idempotent statements a table
    /// built by an older keel may lack).
    fn keep_current(&self, conn: &Connection) -> rusqlite::Result<()> {
        let _ = conn;
        Ok(())
    }
    /// Every disagreement (at most `limit`) between `owner`'s rows and this
    /// table.
    fn compare(
        &self,
        conn: &Connection,
        owner: Owner<'_>,
        limit: usize,
    ) -> rusqlite::Result<Vec<Drift>>;
}

/// Writes every row of `owner` into its (empty) side table `t`, calling
/// `progress(rows written)` now and then; returns the row count.
pub(crate) fn fill(
    conn: &Connection,
    owner: Owner<'_>,
    t: &dyn SideTable,
    progress: &mut dyn FnMut(u64),
) -> rusqlite::Result<u64> {
    let mut st = conn.prepare(&format!(
        "SELECT rowid, {} FROM {} ORDER BY rowid",
        owner.body.select(),
        owner.ident
    ))?;
    let mut ins = conn.prepare(t.sql().upsert)?;
    let mut rows = st.query([])?;
    let mut scratch = Vec::new();
    let mut n = 0u64;
    while let Some(r) = rows.next()? {
        let rowid: i64 = r.get(0)?;
        let bytes = owner.body.read(r, 1, &mut scratch)?;
        t.write(&mut ins, rowid, bytes)?;
        n += 1;
        if n.is_multiple_of(1024) {
            progress(n);
        }
    }
    progress(n);
    Ok(n)
}

/// `name` as a double-quoted SQL identifier (as `table::ident`, which sits above).
pub(crate) fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Whether `conn`'s main database has a table `name`.
pub(crate) fn table_exists(conn: &Connection, name: &str) -> rusqlite::Result<bool> {
    conn.query_row(
        "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = ?1",
        [name],
        |r| r.get::<_, i64>(0),
    )
    .map(|n| n > 0)
}
