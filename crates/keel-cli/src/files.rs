//! Looking at a database file without keel's storage kernel: existence, header,
//! side files, a read-only SQLite connection, and the schema to decode with.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use keel_query::inspect;
use keel_schema::{compat, Schema};
use keel_storage::rotate;
use keel_storage::rusqlite::{self, Connection, OpenFlags};

use crate::exit::{self, Failure, Result, CORRUPT, USAGE_OR_IO, WRONG_KEY, WRONG_SCHEMA};
use crate::keys::FileKey;

const SQLITE_MAGIC: &[u8; 16] = b"SQLite format 3\0";

/// `<db><suffix>` (`-wal`, `-shm`).
pub fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// What the 100-byte header and the side files say, read with plain file I/O.
#[derive(Debug, Clone, Default)]
pub struct FileFacts {
    pub db_bytes: u64,
    pub wal_bytes: u64,
    pub shm_exists: bool,
    /// Journal mode from the header (bytes 18/19): `wal`, `rollback`, or `new`
    /// for an empty file.
    pub header_journal: &'static str,
}

/// Checks that `path` names an existing SQLite database file (or an empty file,
/// which SQLite treats as a new database). Missing or unreadable → exit 2,
/// anything else than an SQLite header → exit 3.
pub fn existing_database(path: &Path) -> Result<FileFacts> {
    existing_database_keyed(path, None)
}

/// [`existing_database`] for a file that may be encrypted with `key`: without the
/// plaintext header an encrypted file starts with its salt, not the SQLite magic,
/// so only SQLCipher can judge it (a wrong key is exit 6 at the first read).
pub fn existing_database_keyed(path: &Path, key: Option<&FileKey>) -> Result<FileFacts> {
    let meta = std::fs::metadata(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            Failure::new(USAGE_OR_IO, format!("{}: no such file", path.display()))
        } else {
            Failure::new(USAGE_OR_IO, format!("{}: cannot read: {e}", path.display()))
        }
    })?;
    if meta.is_dir() {
        return Err(Failure::new(
            USAGE_OR_IO,
            format!("{}: is a directory, not a database file", path.display()),
        ));
    }
    let wal_bytes = std::fs::metadata(sibling(path, "-wal"))
        .map(|m| m.len())
        .unwrap_or(0);
    let shm_exists = sibling(path, "-shm").exists();
    let mut facts = FileFacts {
        db_bytes: meta.len(),
        wal_bytes,
        shm_exists,
        header_journal: "new",
    };
    if meta.len() == 0 {
        return Ok(facts);
    }
    let mut header = [0u8; 100];
    let mut f = std::fs::File::open(path)
        .map_err(|e| Failure::new(USAGE_OR_IO, format!("{}: cannot read: {e}", path.display())))?;
    let mut n = 0;
    while n < header.len() {
        match f.read(&mut header[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                return Err(Failure::new(
                    USAGE_OR_IO,
                    format!("{}: cannot read: {e}", path.display()),
                ))
            }
        }
    }
    if key.is_some() {
        // Bytes 18/19 are plaintext only with the plaintext header.
        let wal_header = &header[..16] == SQLITE_MAGIC && header[18] == 2;
        facts.header_journal = if wal_header || sibling(path, "-wal").exists() {
            "wal"
        } else {
            "rollback"
        };
        return Ok(facts);
    }
    if n < 16 || &header[..16] != SQLITE_MAGIC {
        return Err(Failure::new(
            CORRUPT,
            format!(
                "{}: not a database (the file does not start with the SQLite header)",
                path.display()
            ),
        ));
    }
    if n < 100 {
        return Err(Failure::new(
            CORRUPT,
            format!(
                "{}: corrupt: the file is {} bytes, shorter than the 100-byte header",
                path.display(),
                meta.len()
            ),
        ));
    }
    facts.header_journal = if header[18] == 2 && header[19] == 2 {
        "wal"
    } else {
        "rollback"
    };
    Ok(facts)
}

/// A read-only connection. It never checkpoints on close and never writes the
/// database file.
///
/// When no `-wal` file exists the main file is the whole database, and it is opened
/// `immutable`: SQLite then creates no `-wal` or `-shm` beside it (a plain read-only
/// open of a WAL-mode file leaves two empty ones behind). With a `-wal` present the
/// WAL must be read, so SQLite may create the `-shm` index beside it. (A process that
/// starts writing the database while an immutable read runs is not seen by that read.)
pub fn open_read_only(path: &Path, key: Option<&FileKey>) -> Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = if sibling(path, "-wal").exists() {
        Connection::open_with_flags(path, flags)
    } else {
        Connection::open_with_flags(immutable_uri(path), flags | OpenFlags::SQLITE_OPEN_URI)
    }
    .map_err(|e| Failure::sqlite("open read-only", path, e))?;
    if let Some(k) = key {
        keel_storage::encryption::key_connection(&conn, &k.key, k.plaintext_header)
            .map_err(|e| Failure::sqlite("key the connection", path, e))?;
    }
    if rotate::journal_path(path).exists() {
        eprintln!(
            "note: a key rotation of {} was interrupted; the file read is the one before it. Any keel open (`keel checkpoint`) settles it.",
            path.display()
        );
    }
    // Read-only connections cannot checkpoint anyway; say so explicitly.
    let _ = conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
        true,
    );
    conn.query_row("SELECT count(*) FROM sqlite_schema", [], |r| {
        r.get::<_, i64>(0)
    })
    .map_err(|e| match (key, exit::sqlite_code(&e)) {
        (Some(k), CORRUPT) => Failure::new(
            WRONG_KEY,
            format!(
                "{}: does not decrypt with the key in {} (a wrong key, or the other --plaintext-header setting)",
                path.display(),
                k.file.display()
            ),
        ),
        _ => Failure::sqlite("read the schema table", path, e),
    })?;
    Ok(conn)
}

/// `application_id` and `user_version` (keel's epoch) of the main file alone,
/// decrypted with `key` through an `immutable` connection (which never opens the
/// WAL); `None` when the file is shorter than a page (its pages still in the WAL).
pub fn main_file_stamp(path: &Path, key: &FileKey) -> Result<Option<(i64, i64)>> {
    if std::fs::metadata(path).map_or(0, |m| m.len()) < 512 {
        return Ok(None);
    }
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_URI;
    let conn = Connection::open_with_flags(immutable_uri(path), flags)
        .map_err(|e| Failure::sqlite("open the main file alone", path, e))?;
    keel_storage::encryption::key_connection(&conn, &key.key, key.plaintext_header)
        .map_err(|e| Failure::sqlite("key the connection", path, e))?;
    let r = conn.query_row(
        "SELECT (SELECT application_id FROM pragma_application_id), \
                (SELECT user_version FROM pragma_user_version)",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    );
    match r {
        Ok(stamp) => Ok(Some(stamp)),
        // Page 1 torn in the file while the WAL holds it whole: the file alone has
        // no stamp to compare (the integrity check reads it through the WAL).
        Err(e) if exit::sqlite_code(&e) == CORRUPT => Ok(None),
        Err(e) => Err(Failure::sqlite("read the main file's header", path, e)),
    }
}

/// `file:<path>?immutable=1`, with the characters URIs give meaning to escaped.
fn immutable_uri(path: &Path) -> String {
    let mut s = String::from("file:");
    for c in path.to_string_lossy().chars() {
        match c {
            '%' => s.push_str("%25"),
            '?' => s.push_str("%3f"),
            '#' => s.push_str("%23"),
            c => s.push(c),
        }
    }
    s.push_str("?immutable=1");
    s
}

/// Integer pragma. SQLCipher answers `page_size` on a keyed connection as text
/// (its `cipher_page_size`), plain SQLite as an integer: both are read.
pub fn pragma_i64(conn: &Connection, path: &Path, name: &str) -> Result<i64> {
    let v: rusqlite::types::Value = conn
        .query_row(&format!("PRAGMA {name}"), [], |r| r.get(0))
        .map_err(|e| Failure::sqlite(&format!("PRAGMA {name}"), path, e))?;
    match v {
        rusqlite::types::Value::Integer(i) => Ok(i),
        rusqlite::types::Value::Text(t) => t
            .trim()
            .parse()
            .map_err(|_| Failure::new(USAGE_OR_IO, format!("PRAGMA {name}: not a number: {t:?}"))),
        other => Err(Failure::new(
            USAGE_OR_IO,
            format!("PRAGMA {name}: not a number: {other:?}"),
        )),
    }
}

/// Text pragma.
pub fn pragma_text(conn: &Connection, path: &Path, name: &str) -> Result<String> {
    conn.query_row(&format!("PRAGMA {name}"), [], |r| r.get(0))
        .map_err(|e| Failure::sqlite(&format!("PRAGMA {name}"), path, e))
}

/// `auto_vacuum` as a word.
pub fn auto_vacuum_name(v: i64) -> &'static str {
    match v {
        0 => "none",
        1 => "full",
        2 => "incremental",
        _ => "unknown",
    }
}

/// Frames in a WAL of `wal_bytes` (its header gives the page size).
pub fn wal_frames(wal: &Path, wal_bytes: u64, page_size: u64) -> u64 {
    if wal_bytes < 32 {
        return 0;
    }
    let mut ps = page_size;
    if let Ok(mut f) = std::fs::File::open(wal) {
        let mut h = [0u8; 32];
        if f.read_exact(&mut h).is_ok() {
            let p = u64::from(u32::from_be_bytes([h[8], h[9], h[10], h[11]]));
            if (512..=65_536).contains(&p) {
                ps = p;
            }
        }
    }
    (wal_bytes - 32) / (ps.max(512) + 24)
}

/// True if a table of that name exists.
pub fn table_exists(conn: &Connection, path: &Path, name: &str) -> Result<bool> {
    conn.query_row(
        "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = ?1",
        [name],
        |r| r.get::<_, i64>(0),
    )
    .map(|n| n > 0)
    .map_err(|e| Failure::sqlite("inspect tables", path, e))
}

/// Where the schema used to decode objects came from.
#[derive(Debug, Clone)]
pub enum SchemaSource {
    /// `--schema FILE`.
    File(PathBuf),
    /// The schema keel recorded in the file (`keel_meta`).
    Stored,
}

impl SchemaSource {
    pub fn describe(&self) -> String {
        match self {
            SchemaSource::File(p) => p.display().to_string(),
            SchemaSource::Stored => "the schema stored in the database".into(),
        }
    }
}

/// The schema to decode with, and how it relates to the one stored in the file.
pub struct DecodeSchema {
    pub schema: Arc<Schema>,
    pub source: SchemaSource,
    /// Fingerprint of the stored schema, if any.
    pub stored_fingerprint: Option<u64>,
    /// `same`, `newer` (an evolution of the stored one), `older` (the stored one is an
    /// evolution of it) or `unknown` (nothing stored to compare with).
    pub relation: &'static str,
}

/// Loads a schema file for a database command: missing → 2, does not parse → 4.
pub fn load_schema_file(path: &Path) -> Result<Schema> {
    if !path.exists() {
        return Err(Failure::new(
            USAGE_OR_IO,
            format!("{}: no such schema file", path.display()),
        ));
    }
    Schema::from_file(path).map_err(|e| Failure::new(WRONG_SCHEMA, format!("wrong schema: {e}")))
}

/// The schema to decode `db`'s objects with: `--schema` if given (it must be the
/// stored schema, an evolution of it, or an older version of it), else the stored one.
pub fn decode_schema(conn: &Connection, db: &Path, given: Option<&Path>) -> Result<DecodeSchema> {
    // keel writes the stored schema itself (text that parsed), so one that is not
    // readable text or does not parse is damage: exit 3, as the library's
    // `recover_corrupt` treats it.
    let stored_text = inspect::stored_schema(conn).map_err(|e| {
        if e.sqlite_error_code().is_none() {
            Failure::new(
                CORRUPT,
                format!(
                    "{}: corrupt: the schema stored in the database is not readable text ({e})",
                    db.display()
                ),
            )
        } else {
            Failure::sqlite("read the stored schema", db, e)
        }
    })?;
    let stored = match &stored_text {
        Some(text) => match Schema::parse(text, "stored schema") {
            Ok(s) => Some(s),
            Err(e) => {
                if given.is_none() {
                    return Err(Failure::new(
                        CORRUPT,
                        format!(
                            "{}: corrupt: the schema stored in the database does not parse ({e}); pass --schema FILE to read the objects anyway",
                            db.display()
                        ),
                    ));
                }
                None
            }
        },
        None => None,
    };
    let stored_fingerprint = stored.as_ref().map(Schema::fingerprint);
    let Some(file) = given else {
        let Some(stored) = stored else {
            return Err(Failure::new(
                WRONG_SCHEMA,
                format!(
                    "{}: no schema stored in the database (keel's object store never opened it); pass --schema FILE",
                    db.display()
                ),
            ));
        };
        return Ok(DecodeSchema {
            schema: Arc::new(stored),
            source: SchemaSource::Stored,
            stored_fingerprint,
            relation: "same",
        });
    };
    let schema = load_schema_file(file)?;
    let relation = match &stored {
        None => "unknown",
        Some(old) if old.fingerprint() == schema.fingerprint() => "same",
        Some(old) => match compat::check(old, &schema) {
            Ok(_) => "newer",
            Err(problems) => {
                if compat::check(&schema, old).is_ok() {
                    "older"
                } else {
                    let list: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
                    return Err(Failure::new(
                        WRONG_SCHEMA,
                        format!(
                            "wrong schema: {} does not fit the schema stored in {} (neither is an evolution of the other): {}",
                            file.display(),
                            db.display(),
                            list.join("; ")
                        ),
                    ));
                }
            }
        },
    };
    // At least one collection of the schema must be in the file.
    let mut any = false;
    for c in &schema.collections {
        if table_exists(conn, db, inspect::table_name(&c.name))? {
            any = true;
            break;
        }
    }
    if !any {
        let names: Vec<&str> = schema.collections.iter().map(|c| c.name.as_str()).collect();
        return Err(Failure::new(
            WRONG_SCHEMA,
            format!(
                "wrong schema: none of the collections of {} ({}) is in {}",
                file.display(),
                if names.is_empty() {
                    "it declares none".to_string()
                } else {
                    names.join(", ")
                },
                db.display()
            ),
        ));
    }
    Ok(DecodeSchema {
        schema: Arc::new(schema),
        source: SchemaSource::File(file.to_path_buf()),
        stored_fingerprint,
        relation,
    })
}

/// The collections to work on: all of the schema's, or the one `--collection` names
/// (full or bare table name; unknown → exit 4).
pub fn select_collections(schema: &Schema, wanted: Option<&str>) -> Result<Vec<String>> {
    match wanted {
        None => Ok(schema.collections.iter().map(|c| c.name.clone()).collect()),
        Some(name) => match schema.collection(name) {
            Some(c) => Ok(vec![c.name.clone()]),
            None => {
                let names: Vec<&str> = schema.collections.iter().map(|c| c.name.as_str()).collect();
                Err(Failure::new(
                    WRONG_SCHEMA,
                    format!(
                        "no collection named {name:?} in the schema (it has: {})",
                        names.join(", ")
                    ),
                ))
            }
        },
    }
}

/// `12.3 MiB`.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_sizes() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(16 << 20), "16.0 MiB");
        assert_eq!(human_bytes(1536), "1.5 KiB");
    }

    #[test]
    fn missing_and_foreign_files() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope.db");
        assert_eq!(existing_database(&missing).unwrap_err().code, USAGE_OR_IO);
        let junk = dir.path().join("junk.db");
        std::fs::write(&junk, b"hello, this is not sqlite at all").unwrap();
        assert_eq!(existing_database(&junk).unwrap_err().code, CORRUPT);
        let empty = dir.path().join("empty.db");
        std::fs::write(&empty, b"").unwrap();
        assert_eq!(existing_database(&empty).unwrap().header_journal, "new");
    }
}
