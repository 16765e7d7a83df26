//! `keel info DB`: collections, row counts, page and freelist figures, WAL, journal mode.

use std::path::Path;

use keel_query::inspect;
use keel_schema::Schema;
use keel_storage::rusqlite::Connection;
use serde_json::{json, Value as Json};

use crate::exit::{Failure, Result};
use crate::files::{self, human_bytes};
use crate::keys::FileKey;
use crate::progress::Progress;

struct Coll {
    name: String,
    exists: bool,
    rows: u64,
    primary_key: Vec<String>,
    indexes: Vec<Json>,
}

pub fn run(db: &Path, key: Option<&FileKey>, json: bool) -> Result<u8> {
    let facts = files::existing_database_keyed(db, key)?;
    let conn = files::open_read_only(db, key)?;
    let page_size = files::pragma_i64(&conn, db, "page_size")?.max(0) as u64;
    let page_count = files::pragma_i64(&conn, db, "page_count")?.max(0) as u64;
    let freelist = files::pragma_i64(&conn, db, "freelist_count")?.max(0) as u64;
    let auto_vacuum = files::pragma_i64(&conn, db, "auto_vacuum")?;
    // An immutable connection (no -wal present, see open_read_only) reports
    // `delete` whatever the file says: the header is the truth then.
    let journal_mode = if facts.header_journal == "wal" {
        "wal".to_string()
    } else {
        files::pragma_text(&conn, db, "journal_mode")?.to_lowercase()
    };
    let wal_path = files::sibling(db, "-wal");
    let wal_frames = files::wal_frames(&wal_path, facts.wal_bytes, page_size);

    let stored = inspect::stored_schema(&conn)
        .map_err(|e| Failure::sqlite("read the stored schema", db, e))?;
    let fingerprint = meta_value(&conn, "fingerprint");
    let format = meta_value(&conn, "format");
    let schema = stored
        .as_deref()
        .and_then(|t| Schema::parse(t, "stored schema").ok());

    let progress = Progress::new(json);
    let mut colls = Vec::new();
    let mut other_tables = Vec::new();
    let mut dictionary_keys = None;
    let index_states = index_states(&conn);
    if let Some(schema) = &schema {
        let pb = progress.bar(schema.collections.len() as u64, "counting", "collections");
        for c in &schema.collections {
            pb.set_message(c.name.clone());
            let table = schema.table(c.table);
            let primary_key = c
                .primary_key
                .iter()
                .filter_map(|id| table.field_by_id(*id).map(|f| f.name.clone()))
                .collect();
            let exists = files::table_exists(&conn, db, inspect::table_name(&c.name))?;
            let rows = if exists {
                count_rows(&conn, db, &c.name)?
            } else {
                0
            };
            let indexes = c
                .indexes
                .iter()
                .map(|ix| {
                    let name = inspect::index_name(&c.name, ix.field);
                    let state = index_states
                        .iter()
                        .find(|(n, _)| *n == name)
                        .map(|(_, s)| s.clone())
                        .unwrap_or_else(|| "missing".into());
                    json!({ "field": ix.name, "unique": ix.unique, "name": name, "state": state })
                })
                .collect();
            colls.push(Coll {
                name: c.name.clone(),
                exists,
                rows,
                primary_key,
                indexes,
            });
            pb.inc(1);
        }
        pb.finish_and_clear();
    }
    let known: Vec<&str> = colls.iter().map(|c| c.name.as_str()).collect();
    {
        let mut st = conn
            .prepare("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")
            .map_err(|e| Failure::sqlite("list tables", db, e))?;
        let names = st
            .query_map([], |r| r.get::<_, String>(0))
            .and_then(|rows| rows.collect::<std::result::Result<Vec<_>, _>>())
            .map_err(|e| Failure::sqlite("list tables", db, e))?;
        for n in names {
            if n.starts_with("sqlite_")
                || n == inspect::META_TABLE
                || n == inspect::INDEX_TABLE
                || known.contains(&n.as_str())
            {
                continue;
            }
            if n == inspect::DICTIONARY_TABLE {
                dictionary_keys = Some(count_rows(&conn, db, &n)?);
                continue;
            }
            let rows = count_rows(&conn, db, &n)?;
            other_tables.push((n, rows));
        }
    }

    if json {
        let out = json!({
            "path": db.display().to_string(),
            "file_bytes": facts.db_bytes,
            "page_size": page_size,
            "page_count": page_count,
            "freelist_pages": freelist,
            "free_bytes": freelist * page_size,
            "auto_vacuum": files::auto_vacuum_name(auto_vacuum),
            "journal_mode": journal_mode,
            "wal_bytes": facts.wal_bytes,
            "wal_frames": wal_frames,
            "shm_exists": facts.shm_exists,
            "encryption": key.map(FileKey::describe),
            "keel": stored.as_ref().map(|_| json!({
                "schema_fingerprint": fingerprint,
                "format": format,
            })),
            "collections": colls.iter().map(|c| json!({
                "name": c.name,
                "table": inspect::table_name(&c.name),
                "exists": c.exists,
                "rows": c.rows,
                "primary_key": c.primary_key,
                "indexes": c.indexes,
            })).collect::<Vec<_>>(),
            "dictionary_keys": dictionary_keys,
            "other_tables": other_tables.iter().map(|(n, r)| json!({ "name": n, "rows": r })).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
        return Ok(crate::exit::OK);
    }

    println!("{}", db.display());
    println!(
        "  file        {} on disk; {page_count} pages of {page_size} B{}",
        human_bytes(facts.db_bytes),
        if facts.wal_bytes > 0 {
            " counting the WAL"
        } else {
            ""
        }
    );
    let pct = if page_count > 0 {
        100.0 * freelist as f64 / page_count as f64
    } else {
        0.0
    };
    println!(
        "  free        {freelist} pages ({}, {pct:.1}%), auto_vacuum {}",
        human_bytes(freelist * page_size),
        files::auto_vacuum_name(auto_vacuum)
    );
    println!("  journal     {journal_mode}");
    if let Some(k) = key {
        println!("  encryption  {}", k.describe_text());
    }
    println!(
        "  wal         {} ({wal_frames} frames){}",
        human_bytes(facts.wal_bytes),
        if facts.shm_exists {
            ", -shm present"
        } else {
            ""
        }
    );
    match (&stored, &fingerprint) {
        (Some(_), Some(fp)) => println!(
            "  schema      fingerprint {}, format {}",
            fp.as_str().unwrap_or("?"),
            format.as_ref().map_or("?".to_string(), |f| f.to_string())
        ),
        (Some(_), None) => println!("  schema      stored"),
        (None, _) => println!("  schema      none stored (not opened by keel's object store)"),
    }
    if !colls.is_empty() {
        println!("collections");
        let w = colls.iter().map(|c| c.name.len()).max().unwrap_or(0);
        for c in &colls {
            let mut line = format!("  {:<w$}  {:>10} rows", c.name, c.rows);
            if !c.exists {
                line.push_str("  (no table yet)");
            }
            if !c.primary_key.is_empty() {
                line.push_str(&format!("  key ({})", c.primary_key.join(", ")));
            }
            for ix in &c.indexes {
                line.push_str(&format!(
                    "  {}index {} [{}]",
                    if ix["unique"] == true { "unique " } else { "" },
                    ix["field"].as_str().unwrap_or("?"),
                    ix["state"].as_str().unwrap_or("?")
                ));
            }
            println!("{line}");
        }
    }
    if let Some(keys) = dictionary_keys {
        println!("dictionary    {keys} keys");
    }
    if !other_tables.is_empty() {
        println!("other tables");
        let w = other_tables.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
        for (n, rows) in &other_tables {
            println!("  {n:<w$}  {rows:>10} rows");
        }
    }
    Ok(crate::exit::OK)
}

fn count_rows(conn: &Connection, db: &Path, table: &str) -> Result<u64> {
    conn.query_row(
        &format!("SELECT count(*) FROM {}", inspect::table_ident(table)),
        [],
        |r| r.get::<_, i64>(0),
    )
    .map(|n| n.max(0) as u64)
    .map_err(|e| Failure::sqlite(&format!("count rows of {table}"), db, e))
}

fn meta_value(conn: &Connection, key: &str) -> Option<Json> {
    conn.query_row(
        &format!("SELECT value FROM {} WHERE key = ?1", inspect::META_TABLE),
        [key],
        |r| r.get::<_, keel_storage::rusqlite::types::Value>(0),
    )
    .ok()
    .map(|v| match v {
        keel_storage::rusqlite::types::Value::Integer(i) => json!(i),
        keel_storage::rusqlite::types::Value::Text(t) => json!(t),
        keel_storage::rusqlite::types::Value::Real(f) => json!(f),
        _ => Json::Null,
    })
}

fn index_states(conn: &Connection) -> Vec<(String, String)> {
    let Ok(mut st) = conn.prepare(&format!("SELECT name, state FROM {}", inspect::INDEX_TABLE))
    else {
        return Vec::new();
    };
    st.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
        .and_then(|rows| rows.collect::<std::result::Result<Vec<_>, _>>())
        .unwrap_or_default()
}
