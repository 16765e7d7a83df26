//! The storage layout as facts, for tools that read a keel file without opening a
//! [`Database`](crate::Database) — the `keel` command-line tool (`keel info`,
//! `keel dump`, `keel check`) opens the file read-only with plain SQLite and uses
//! these so it never guesses keel's private layout.
//!
//! ```
//! use keel_query::inspect;
//! assert_eq!(inspect::table_ident("blog.Post"), "\"blog.Post\"");
//! assert_eq!(inspect::key_columns(2), vec!["k0", "k1"]);
//! assert_eq!(inspect::index_name("blog.Post", 1), "blog.Post#1");
//! assert_eq!(inspect::META_TABLE, "keel_meta");
//! ```

use std::sync::Arc;

use keel_schema::Schema;

/// keel's metadata table: `key TEXT PRIMARY KEY, value` (`schema`, `fingerprint`, `format`).
pub const META_TABLE: &str = "keel_meta";
/// The index table: `name, collection, field, is_unique, state` (`ready`, `building`, `failed: …`).
pub const INDEX_TABLE: &str = "keel_index";
/// The key-value dictionary's table (`key TEXT PRIMARY KEY, kind, type, value`).
pub const DICTIONARY_TABLE: &str = "keel_dict";
/// The column holding an object's FlatBuffers bytes in every collection table.
pub const BODY_COLUMN: &str = "body";

/// The SQLite table of a collection, as a quoted SQL identifier (the table is named
/// after the collection's fully qualified name).
pub fn table_ident(collection: &str) -> String {
    crate::sql::ident(collection)
}

/// The SQLite table name of a collection (unquoted, as stored in `sqlite_schema`).
pub fn table_name(collection: &str) -> &str {
    collection
}

/// The SQLite name of the secondary index on field `field_id` of a collection
/// (its state is in [`INDEX_TABLE`] under the same name).
pub fn index_name(collection: &str, field_id: u16) -> String {
    format!("{collection}#{field_id}")
}

/// The primary-key columns of a collection whose key has `parts` fields
/// (`k0, k1, …`; none for a collection keyed by rowid).
pub fn key_columns(parts: usize) -> Vec<String> {
    (0..parts).map(|i| format!("k{i}")).collect()
}

/// The schema text a [`Database`](crate::Database) recorded in the file at its last
/// open (`None` for a file keel's object store never opened).
pub fn stored_schema(conn: &rusqlite::Connection) -> rusqlite::Result<Option<String>> {
    let has_meta: i64 = conn.query_row(
        "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = ?1",
        [META_TABLE],
        |r| r.get(0),
    )?;
    if has_meta == 0 {
        return Ok(None);
    }
    match conn.query_row(
        &format!("SELECT value FROM {META_TABLE} WHERE key = 'schema'"),
        [],
        |r| r.get::<_, String>(0),
    ) {
        Ok(s) => Ok(Some(s)),
        Err(rusqlite::Error::QueryReturnedNoRows) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Register keel's SQL functions (`keel_field`) on a connection, reading objects with
/// `schema`. Needed for anything that evaluates the expression indexes, such as
/// `PRAGMA integrity_check`.
pub fn register_functions(
    conn: &rusqlite::Connection,
    schema: Arc<Schema>,
) -> rusqlite::Result<()> {
    crate::sql::register(conn, Arc::new(std::sync::RwLock::new(schema)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::Coll;

    /// The facts above must match what the engine really creates.
    #[test]
    fn facts_match_the_layout() {
        let schema = Schema::parse(
            "namespace t; table A { k: string (primary); j: int (primary); n: int (indexed); } root_type A;",
            "t.fbs",
        )
        .unwrap();
        let c = Coll::new(&schema, 0).unwrap();
        assert_eq!(c.ident, table_ident("t.A"));
        assert_eq!(c.indexes[0].name, index_name("t.A", 2));
        let ddl = c.create_table_sql();
        for k in key_columns(2) {
            assert!(ddl.contains(&format!("{k} NOT NULL")), "{ddl}");
        }
        assert!(ddl.contains(&format!("{BODY_COLUMN} BLOB")), "{ddl}");
        assert!(ddl.contains(&format!("TABLE IF NOT EXISTS \"{}\"", table_name("t.A"))));
        assert!(crate::layout::DICT_TABLE_SQL
            .contains(&format!("CREATE TABLE IF NOT EXISTS {DICTIONARY_TABLE}(")));
    }
}
