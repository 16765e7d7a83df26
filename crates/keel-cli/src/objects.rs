//! `keel dump` and `keel check`: walk every object of a collection and decode it
//! through the schema's dynamic reader (which verifies the whole buffer first).

use std::io::Write;
use std::path::Path;

use keel_query::inspect;
use keel_schema::Schema;
use keel_storage::rusqlite::{self, Connection};
use serde_json::{json, Value as Json};

use crate::exit::{self, Failure, Result};
use crate::files::{self, DecodeSchema};
use crate::keys::FileKey;
use crate::progress::Progress;

/// An object that did not verify.
struct BadObject {
    collection: String,
    rowid: i64,
    error: String,
}

/// Per-collection tally.
struct Tally {
    collection: String,
    exists: bool,
    rows: u64,
    bad: u64,
}

/// Calls `each(rowid, Ok(json) | Err(decode error))` for every row of `collection`.
/// An SQLite error (a corrupt page) stops the walk and is returned.
fn walk(
    conn: &Connection,
    schema: &Schema,
    collection: &str,
    mut each: impl FnMut(i64, std::result::Result<Json, String>) -> std::io::Result<()>,
) -> std::result::Result<(), WalkError> {
    let reader = schema
        .reader(collection)
        .map_err(|e| WalkError::Schema(e.to_string()))?;
    // The body and, where bodies leave the key string out, the key column that
    // puts it back: what is decoded is the buffer that was written.
    let body = inspect::BodyColumns::of(schema, collection);
    let sql = format!(
        "SELECT rowid, {} FROM {} ORDER BY rowid",
        body.select(),
        inspect::table_ident(collection)
    );
    let mut st = conn.prepare(&sql).map_err(WalkError::Sqlite)?;
    let mut rows = st.query([]).map_err(WalkError::Sqlite)?;
    let mut scratch = Vec::new();
    while let Some(row) = rows.next().map_err(WalkError::Sqlite)? {
        let rowid: i64 = row.get(0).map_err(WalkError::Sqlite)?;
        let decoded = match row.get_ref(1).map_err(WalkError::Sqlite)? {
            rusqlite::types::ValueRef::Blob(_) => reader
                .read(body.read(row, 1, &mut scratch).map_err(WalkError::Sqlite)?)
                .and_then(|o| o.to_json())
                .map_err(|e| e.to_string()),
            other => Err(format!(
                "the body is {:?}, not FlatBuffers bytes",
                other.data_type()
            )),
        };
        each(rowid, decoded).map_err(WalkError::Output)?;
    }
    Ok(())
}

enum WalkError {
    Sqlite(rusqlite::Error),
    Schema(String),
    Output(std::io::Error),
}

fn count(conn: &Connection, collection: &str) -> u64 {
    conn.query_row(
        &format!("SELECT count(*) FROM {}", inspect::table_ident(collection)),
        [],
        |r| r.get::<_, i64>(0),
    )
    .map(|n| n.max(0) as u64)
    .unwrap_or(0)
}

/// `keel dump DB [--schema S] [--collection C]`: one JSON object per line on stdout:
/// `{"collection": …, "rowid": …, "object": {…}}`. Objects that do not decode are
/// reported on stderr (collection and rowid) and make the exit status 1.
pub fn dump(
    db: &Path,
    key: Option<&FileKey>,
    schema_file: Option<&Path>,
    collection: Option<&str>,
) -> Result<u8> {
    files::existing_database_keyed(db, key)?;
    let conn = files::open_read_only(db, key)?;
    let ds = files::decode_schema(&conn, db, schema_file)?;
    note_relation(&ds);
    let colls = files::select_collections(&ds.schema, collection)?;
    let progress = Progress::new(false);
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut bad = 0u64;
    for name in &colls {
        if !files::table_exists(&conn, db, inspect::table_name(name))? {
            eprintln!("note: {name} has no table in {} (no objects)", db.display());
            continue;
        }
        let pb = progress.bar(count(&conn, name), name.clone(), "objects");
        let r = walk(&conn, &ds.schema, name, |rowid, decoded| {
            pb.inc(1);
            match decoded {
                Ok(object) => {
                    let line = json!({ "collection": name, "rowid": rowid, "object": object });
                    serde_json::to_writer(&mut out, &line).map_err(std::io::Error::other)?;
                    out.write_all(b"\n")
                }
                Err(e) => {
                    bad += 1;
                    pb.suspend(|| {
                        eprintln!("error: {name} rowid {rowid}: not a valid object: {e}")
                    });
                    Ok(())
                }
            }
        });
        pb.finish_and_clear();
        match r {
            Ok(()) => {}
            Err(WalkError::Output(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                return Ok(exit::OK)
            }
            Err(WalkError::Output(e)) => {
                return Err(Failure::new(
                    exit::USAGE_OR_IO,
                    format!("writing stdout: {e}"),
                ))
            }
            Err(WalkError::Sqlite(e)) => {
                let _ = out.flush();
                return Err(Failure::sqlite(&format!("read {name}"), db, e));
            }
            Err(WalkError::Schema(e)) => return Err(Failure::new(exit::WRONG_SCHEMA, e)),
        }
    }
    match out.flush() {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(exit::OK),
        Err(e) => {
            return Err(Failure::new(
                exit::USAGE_OR_IO,
                format!("writing stdout: {e}"),
            ))
        }
        Ok(()) => {}
    }
    if bad > 0 {
        eprintln!(
            "{bad} object(s) did not verify against {}",
            ds.source.describe()
        );
        return Ok(exit::PROBLEMS);
    }
    Ok(exit::OK)
}

/// The WAL identity check for an encrypted file, whose header and WAL frames the
/// raw check cannot read: page 1 of the main file alone (an `immutable`
/// connection never opens the WAL) against page 1 as read through the WAL. keel
/// bumps the epoch once per new WAL, at its first write, so every page-1 image in
/// one WAL carries the same epoch `w`, and the file is at `w - 1` (before any
/// checkpoint copied page 1) or `w`. Anything else is a WAL of another copy: a
/// backup restored under a newer WAL, or an older WAL beside a newer file (exit 3).
/// A WAL of another database fails SQLCipher's page MACs earlier.
fn check_encrypted_wal(db: &Path, key: &FileKey, through_wal: &Connection) -> Result<()> {
    let wal = files::sibling(db, "-wal");
    if std::fs::metadata(&wal).map_or(true, |m| m.len() == 0) {
        return Ok(());
    }
    let Some((app_id, file_epoch)) = files::main_file_stamp(db, key)? else {
        return Ok(());
    };
    if app_id != i64::from(keel_storage::KEEL_APPLICATION_ID) {
        return Ok(());
    }
    let wal_epoch = files::pragma_i64(through_wal, db, "user_version")? as u32;
    let file_epoch = file_epoch as u32;
    if file_epoch == wal_epoch || file_epoch == wal_epoch.wrapping_sub(1) {
        return Ok(());
    }
    Err(Failure::new(
        exit::CORRUPT,
        format!(
            "{}: its -wal does not belong to the database file: the file is at epoch {file_epoch}, page 1 in the WAL at {wal_epoch} (a backup restored under a newer WAL, or a WAL of another copy)",
            db.display()
        ),
    ))
}

fn note_relation(ds: &DecodeSchema) {
    match ds.relation {
        "newer" => eprintln!(
            "note: {} is a newer version of the stored schema: fields it adds read as their defaults",
            ds.source.describe()
        ),
        "older" => eprintln!(
            "note: {} is an older version of the stored schema: fields added since are not shown",
            ds.source.describe()
        ),
        "unknown" => eprintln!(
            "note: the database stores no schema; decoding with {}",
            ds.source.describe()
        ),
        _ => {}
    }
}

/// `keel check DB [--schema S] [--repair]`: SQLite's integrity check, every object
/// verified, then every key and index column compared with its object's bytes
/// (`--repair` rewrites the ones that disagree, the only write `check` makes).
///
/// Exit status: 0 healthy; 1 objects that do not verify or columns that disagree
/// with their bytes (the file itself is sound); 3 SQLite found the file corrupt;
/// 4 wrong schema.
pub fn check(
    db: &Path,
    key: Option<&FileKey>,
    schema_file: Option<&Path>,
    json: bool,
    repair: bool,
) -> Result<u8> {
    let facts = files::existing_database_keyed(db, key)?;
    let mut sqlite_problems = Vec::new();
    // A -wal of another database would be read as this one's pages: damage, found
    // before SQLite reads it (the check keel's open makes).
    match keel_storage::verify_wal_identity(db) {
        Ok(()) => {}
        Err(e @ keel_storage::Error::ForeignWal { .. }) => {
            return Err(Failure::new(exit::CORRUPT, e.to_string()));
        }
        Err(e) => return Err(Failure::storage(e)),
    }
    let conn = files::open_read_only(db, key)?;
    if let Some(k) = key {
        check_encrypted_wal(db, k, &conn)?;
    }
    // The schema is needed for the integrity check of a storage-format-1 file too:
    // its expression indexes call keel_field, which must be registered to be
    // evaluated (format 2 has plain indexes only).
    let ds = match files::decode_schema(&conn, db, schema_file) {
        Ok(ds) => Some(ds),
        // A plain SQLite file without keel's schema: integrity check only.
        Err(f) if schema_file.is_none() && f.code == exit::WRONG_SCHEMA => None,
        // Too damaged to read keel's metadata: the integrity check says more.
        Err(f) if f.code == exit::CORRUPT => {
            sqlite_problems.push(f.message);
            None
        }
        Err(f) => return Err(f),
    };
    if let Some(ds) = &ds {
        inspect::register_functions(&conn, std::sync::Arc::clone(&ds.schema))
            .map_err(|e| Failure::sqlite("register keel_field", db, e))?;
        if !json {
            note_relation(ds);
        }
    }
    let progress = Progress::new(json);

    // 1. SQLite's integrity check (pages, b-trees, indexes, freelist).
    let spinner = progress.spinner(format!("integrity check of {}", db.display()));
    let integrity: std::result::Result<Vec<String>, rusqlite::Error> = (|| {
        let mut st = conn.prepare("PRAGMA integrity_check(1000)")?;
        let rows = st.query_map([], |r| r.get::<_, String>(0))?;
        rows.collect()
    })();
    spinner.finish_and_clear();
    match integrity {
        Ok(lines) if lines.len() == 1 && lines[0] == "ok" => {}
        Ok(lines) => sqlite_problems.extend(lines),
        Err(e) => {
            let code = exit::sqlite_code(&e);
            if code != exit::CORRUPT && sqlite_problems.is_empty() {
                return Err(Failure::sqlite("integrity check", db, e));
            }
            sqlite_problems.push(format!("integrity check could not run: {e}"));
        }
    }

    // 2. Every object, verified and decoded.
    let mut tallies = Vec::new();
    let mut bad = Vec::new();
    if let Some(ds) = &ds {
        for c in &ds.schema.collections {
            let name = c.name.clone();
            let exists = files::table_exists(&conn, db, inspect::table_name(&name))?;
            let mut t = Tally {
                collection: name.clone(),
                exists,
                rows: 0,
                bad: 0,
            };
            if exists {
                let pb = progress.bar(count(&conn, &name), name.clone(), "objects");
                let r = walk(&conn, &ds.schema, &name, |rowid, decoded| {
                    pb.inc(1);
                    t.rows += 1;
                    if let Err(error) = decoded {
                        t.bad += 1;
                        bad.push(BadObject {
                            collection: name.clone(),
                            rowid,
                            error,
                        });
                    }
                    Ok(())
                });
                pb.finish_and_clear();
                match r {
                    Ok(()) | Err(WalkError::Output(_)) => {}
                    Err(WalkError::Sqlite(e)) => {
                        if exit::sqlite_code(&e) != exit::CORRUPT {
                            return Err(Failure::sqlite(&format!("read {name}"), db, e));
                        }
                        sqlite_problems.push(format!("reading {name} failed: {e}"));
                    }
                    Err(WalkError::Schema(e)) => return Err(Failure::new(exit::WRONG_SCHEMA, e)),
                }
            }
            tallies.push(t);
        }
    }

    // 3. Key and index columns against the bytes they are derived from, with the
    // schema stored in the file (what keel wrote them with).
    let stored = match inspect::stored_schema(&conn) {
        Ok(Some(text)) if sqlite_problems.is_empty() => Schema::parse(&text, "stored schema")
            .ok()
            .map(std::sync::Arc::new),
        _ => None,
    };
    let format = if sqlite_problems.is_empty() {
        inspect::storage_format(&conn).ok().flatten()
    } else {
        None
    };
    const SHOWN: usize = 1000;
    let mut mismatches = Vec::new();
    let mut repaired = None;
    // Full-text indexes against the objects (`docs/search.md`).
    let mut drift = Vec::new();
    let mut search_rebuilt = None;
    // Packed vector tables against the objects (`docs/vector.md`).
    let mut vdrift = Vec::new();
    let mut vector_rebuilt = None;
    if let Some(stored) = &stored {
        if repair {
            let rw = rusqlite::Connection::open(db)
                .map_err(|e| Failure::sqlite("open for --repair", db, e))?;
            let _ = rw.busy_timeout(std::time::Duration::from_secs(10));
            let n = (|| {
                rw.execute_batch("BEGIN IMMEDIATE")?;
                let n = inspect::repair_columns(&rw, stored)?;
                if !inspect::search_drift(&rw, stored, 1)?.is_empty() {
                    search_rebuilt = Some(inspect::rebuild_search(&rw, stored)?);
                }
                if !inspect::vector_drift(&rw, stored, 1)?.is_empty() {
                    vector_rebuilt = Some(inspect::rebuild_vectors(&rw, stored)?);
                }
                rw.execute_batch("COMMIT")?;
                Ok::<u64, rusqlite::Error>(n)
            })()
            .map_err(|e| {
                let _ = rw.execute_batch("ROLLBACK");
                Failure::sqlite("repair columns", db, e)
            })?;
            repaired = Some(n);
            mismatches = inspect::column_mismatches(&rw, stored, SHOWN)
                .map_err(|e| Failure::sqlite("compare columns", db, e))?;
            drift = inspect::search_drift(&rw, stored, SHOWN)
                .map_err(|e| Failure::sqlite("compare the full-text index", db, e))?;
            vdrift = inspect::vector_drift(&rw, stored, SHOWN)
                .map_err(|e| Failure::sqlite("compare the vector table", db, e))?;
        } else {
            mismatches = inspect::column_mismatches(&conn, stored, SHOWN)
                .map_err(|e| Failure::sqlite("compare columns", db, e))?;
            drift = inspect::search_drift(&conn, stored, SHOWN)
                .map_err(|e| Failure::sqlite("compare the full-text index", db, e))?;
            vdrift = inspect::vector_drift(&conn, stored, SHOWN)
                .map_err(|e| Failure::sqlite("compare the vector table", db, e))?;
        }
    }

    // References naming no object (`docs/relations.md`); only those declared
    // `dangling: false` are problems: keel itself refuses to write them.
    let dangling = match &stored {
        Some(stored) => inspect::dangling_references(&conn, stored, SHOWN)
            .map_err(|e| Failure::sqlite("check references", db, e))?,
        None => Vec::new(),
    };
    let refused_dangling = dangling.iter().filter(|d| !d.allowed).count();

    let code = if !sqlite_problems.is_empty() {
        exit::CORRUPT
    } else if !bad.is_empty()
        || !mismatches.is_empty()
        || !drift.is_empty()
        || !vdrift.is_empty()
        || refused_dangling > 0
    {
        exit::PROBLEMS
    } else {
        exit::OK
    };
    let show = |v: &rusqlite::types::Value| -> serde_json::Value {
        match v {
            rusqlite::types::Value::Null => serde_json::Value::Null,
            rusqlite::types::Value::Integer(i) => json!(i),
            rusqlite::types::Value::Real(f) => json!(f),
            rusqlite::types::Value::Text(t) => json!(t),
            rusqlite::types::Value::Blob(b) => json!(format!("<{} bytes>", b.len())),
        }
    };
    if json {
        let out = json!({
            "path": db.display().to_string(),
            "ok": code == exit::OK,
            "exit_code": code,
            "file_bytes": facts.db_bytes,
            "wal_bytes": facts.wal_bytes,
            "integrity": if sqlite_problems.is_empty() { vec!["ok".to_string()] } else { sqlite_problems.clone() },
            "schema": ds.as_ref().map(|ds| json!({
                "source": match &ds.source {
                    files::SchemaSource::File(p) => p.display().to_string(),
                    files::SchemaSource::Stored => "stored".to_string(),
                },
                "fingerprint": format!("{:016x}", ds.schema.fingerprint()),
                "relation_to_stored": ds.relation,
                "stored_fingerprint": ds.stored_fingerprint.map(|f| format!("{f:016x}")),
            })),
            "collections": tallies.iter().map(|t| json!({
                "name": t.collection, "exists": t.exists, "objects": t.rows, "bad": t.bad,
            })).collect::<Vec<_>>(),
            "bad_objects": bad.iter().map(|b| json!({
                "collection": b.collection, "rowid": b.rowid, "error": b.error,
            })).collect::<Vec<_>>(),
            "column_mismatches": mismatches.iter().map(|m| json!({
                "collection": m.collection, "rowid": m.rowid, "column": m.column,
                "stored": show(&m.stored), "expected": show(&m.expected),
            })).collect::<Vec<_>>(),
            "repaired_objects": repaired,
            "search_drift": drift.iter().map(|d| json!({
                "collection": d.collection, "rowid": d.rowid, "problem": d.problem,
            })).collect::<Vec<_>>(),
            "search_rebuilt_objects": search_rebuilt,
            "dangling_references": dangling.iter().map(|d| json!({
                "collection": d.collection, "rowid": d.rowid, "field": d.field,
                "target": d.target, "key": d.key.to_string(), "allowed": d.allowed,
            })).collect::<Vec<_>>(),
            "vector_drift": vdrift.iter().map(|d| json!({
                "collection": d.collection, "rowid": d.rowid, "problem": d.problem,
            })).collect::<Vec<_>>(),
            "vector_rebuilt_objects": vector_rebuilt,
            "storage_format": format,
            "repair": (!mismatches.is_empty() || !drift.is_empty() || !vdrift.is_empty()).then(|| format!("keel check --repair {}", db.display())),
        });
        println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
        return Ok(code);
    }
    if sqlite_problems.is_empty() {
        println!("integrity: ok");
    } else {
        println!(
            "integrity: {} problem{} (the file is corrupt)",
            sqlite_problems.len(),
            if sqlite_problems.len() == 1 { "" } else { "s" }
        );
        for p in &sqlite_problems {
            println!("  {p}");
        }
    }
    match &ds {
        None if code == exit::CORRUPT => println!("objects: not checked (the file is too damaged)"),
        None => println!("objects: not checked (no keel schema stored; pass --schema FILE)"),
        Some(ds) => {
            let total: u64 = tallies.iter().map(|t| t.rows).sum();
            println!(
                "objects: {total} checked against {}, {} bad",
                ds.source.describe(),
                bad.len()
            );
            for t in &tallies {
                if !t.exists {
                    println!("  {}: no table", t.collection);
                } else {
                    println!("  {}: {} objects, {} bad", t.collection, t.rows, t.bad);
                }
            }
            for b in bad.iter().take(100) {
                println!("  bad: {} rowid {}: {}", b.collection, b.rowid, b.error);
            }
            if bad.len() > 100 {
                println!("  … and {} more (use --json for all)", bad.len() - 100);
            }
        }
    }
    if let Some(f) = format.filter(|f| *f < 2) {
        println!(
            "storage format: {f} (indexes call keel_field, so stock SQLite tools cannot check it; the next open by keel upgrades it in place)"
        );
    }
    if stored.is_some() && !dangling.is_empty() {
        println!(
            "references: {}{} name no object ({refused_dangling} in fields declared dangling: false)",
            dangling.len(),
            if dangling.len() == SHOWN { "+" } else { "" }
        );
        for d in dangling.iter().take(20) {
            println!(
                "  {} rowid {}: {} -> {} {}{}",
                d.collection,
                d.rowid,
                d.field,
                d.target,
                d.key,
                if d.allowed {
                    ""
                } else {
                    " (declared dangling: false)"
                }
            );
        }
    }
    if stored.is_some() {
        if let Some(n) = repaired {
            println!("columns: repaired {n} object(s) whose columns disagreed with their bytes");
        }
        if mismatches.is_empty() {
            println!("columns: every key and index column matches its object");
        } else {
            println!(
                "columns: {}{} disagree with their object's bytes (written by another tool?)",
                mismatches.len(),
                if mismatches.len() == SHOWN { "+" } else { "" }
            );
            for m in mismatches.iter().take(20) {
                println!(
                    "  {} rowid {}: column {} holds {}, the object says {}",
                    m.collection,
                    m.rowid,
                    m.column,
                    show(&m.stored),
                    show(&m.expected)
                );
            }
            println!(
                "  repair: keel check --repair {} (rebuilds the columns from the bytes)",
                db.display()
            );
        }
    }
    if stored.is_some() {
        if let Some(n) = vector_rebuilt {
            println!("vector: rebuilt the packed vector table from {n} object(s)");
        }
        for d in vdrift.iter().take(20) {
            println!(
                "vector: {} rowid {}: packed vector row {}",
                d.collection, d.rowid, d.problem
            );
        }
        if !vdrift.is_empty() {
            println!(
                "  repair: keel check --repair {} (rebuilds the vector table from the objects)",
                db.display()
            );
        }
        if let Some(n) = search_rebuilt {
            println!("search: rebuilt the full-text index from {n} object(s)");
        }
        for d in drift.iter().take(20) {
            println!(
                "search: {} rowid {}: full-text index entry {}",
                d.collection, d.rowid, d.problem
            );
        }
        if !drift.is_empty() {
            println!(
                "  repair: keel check --repair {} (rebuilds the full-text index from the objects)",
                db.display()
            );
        }
    }
    println!(
        "{}",
        match code {
            exit::OK => "healthy",
            exit::PROBLEMS if !drift.is_empty() && mismatches.is_empty() && bad.is_empty() => {
                "problems found: the full-text index disagrees with the objects"
            }
            exit::PROBLEMS if mismatches.is_empty() => "problems found: objects that do not verify",
            exit::PROBLEMS => "problems found: columns that disagree with their objects",
            _ => "corrupt",
        }
    );
    Ok(code)
}
