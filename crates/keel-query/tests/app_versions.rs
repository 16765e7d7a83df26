//! Two versions of an app on one file: an older build holds the
//! file open while a newer one, in another process, adds an index on a field the
//! older one also writes. The older build's next write must not leave the new
//! column wrong: it notices the stored schema changed (SQLite's schema cookie)
//! and fails with a typed error, and after a reopen it writes the column the
//! newer build declared.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use keel_query::{Database, Error, Expr, FieldPath, Schema, StoreOptions};

const V1: &str = "table Note { id: string (primary); body: string; } root_type Note;";
const V2: &str = "table Note { id: string (primary); body: string (indexed); } root_type Note;";
const ROLE: &str = "KEEL_APP_VERSIONS_V2_DB";

fn quiet() -> StoreOptions {
    StoreOptions::default().idle_checkpoint_after(Duration::from_secs(3600))
}

fn note(schema: &Schema, id: &str, body: &str) -> Vec<u8> {
    schema
        .reader("Note")
        .unwrap()
        .encode_json(&serde_json::json!({"id": id, "body": body}))
        .unwrap()
}

/// The newer build, in a process of its own: opens the file named by
/// `KEEL_APP_VERSIONS_V2_DB` with V2, waits for its index, and prints how many
/// notes say "hello" by that index. Without the variable it does nothing.
#[test]
fn v2_process() {
    let Ok(path) = std::env::var(ROLE) else {
        return;
    };
    let v2 = Schema::parse(V2, "v2.fbs").unwrap();
    let db = Database::open(&path, v2, quiet()).unwrap();
    db.wait_for_indexes().unwrap();
    let n = db
        .query("Note")
        .filter(Expr::eq(FieldPath::field(1, "body"), "hello"))
        .count()
        .unwrap();
    println!("hello={n}");
    db.close().wait().unwrap();
}

/// Runs V2 in another process on `path`; the number of "hello" notes it finds.
fn v2_counts_hello(path: &Path) -> u64 {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "v2_process", "--nocapture", "--test-threads=1"])
        .env(ROLE, path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "v2 process: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .find_map(|l| l.split_once("hello=").map(|(_, n)| n))
        .and_then(|n| n.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no count in {stdout}"))
}

#[test]
fn two_app_versions_on_one_file_never_write_a_wrong_column() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notes.db");
    let v1 = Schema::parse(V1, "v1.fbs").unwrap();
    let db = Database::open(&path, v1.clone(), quiet()).unwrap();
    let first = note(&v1, "a", "hello");
    db.write_blocking(move |t| t.insert_bytes("Note", first).map(drop))
        .unwrap();

    // The newer build opens the file while V1 holds it, and indexes `body`.
    assert_eq!(v2_counts_hello(&path), 1);

    // V1 writes again: the column V2 added must get the right value, or the write
    // must fail typed, never leave it NULL.
    let second = note(&v1, "b", "hello");
    let r = db.write_blocking(move |t| t.insert_bytes("Note", second).map(drop));
    let expected = match r {
        Ok(()) => 2,
        Err(Error::SchemaChanged { .. }) => {
            // After a reopen the older build writes the newer build's columns.
            db.close().wait().unwrap();
            let db = Database::open(&path, v1.clone(), quiet()).unwrap();
            let second = note(&v1, "b", "hello");
            db.write_blocking(move |t| t.insert_bytes("Note", second).map(drop))
                .unwrap();
            db.close().wait().unwrap();
            2
        }
        Err(e) => panic!("expected success or SchemaChanged, got {e}"),
    };
    assert_eq!(v2_counts_hello(&path), expected);
}
