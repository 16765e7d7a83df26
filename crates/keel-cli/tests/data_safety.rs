//! `keel` on the damaged and foreign files: the CLI agrees with the
//! library on what is corrupt (exit 3), and its read-only commands leave nothing
//! behind.

use std::path::{Path, PathBuf};
use std::process::Command;

use keel_query::{Database, StoreOptions};
use keel_schema::Schema;

fn evo(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/blog/schema/evolution")
        .join(name)
}

fn sibling(p: &Path, suffix: &str) -> PathBuf {
    let mut s = p.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

fn keel(cmd: &str, file: &Path) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_keel"))
        .arg(cmd)
        .arg(file)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// A closed keel database with a few v1 notes.
fn made(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    let schema = Schema::from_file(evo("post_v1.fbs")).unwrap();
    let r = schema.reader("evo.Note").unwrap();
    let notes: Vec<Vec<u8>> = (0..10)
        .map(|i| {
            r.encode_json(&serde_json::json!({"id": format!("n{i}")}))
                .unwrap()
        })
        .collect();
    let db = Database::open(&path, schema, StoreOptions::default()).unwrap();
    db.write(move |t| {
        for n in notes {
            t.insert_bytes("evo.Note", n)?;
        }
        Ok(())
    })
    .wait()
    .unwrap();
    db.close().wait().unwrap();
    path
}

#[test]
fn read_only_commands_leave_no_wal_or_shm_behind() {
    let dir = tempfile::tempdir().unwrap();
    let path = made(dir.path(), "clean.db");
    assert!(!sibling(&path, "-wal").exists() && !sibling(&path, "-shm").exists());
    for cmd in ["info", "dump", "check"] {
        let (code, out) = keel(cmd, &path);
        assert_eq!(code, 0, "{cmd}: {out}");
        assert!(!sibling(&path, "-wal").exists(), "{cmd} left a -wal");
        assert!(!sibling(&path, "-shm").exists(), "{cmd} left a -shm");
    }
}

#[test]
fn a_damaged_stored_schema_is_corrupt_exit_three() {
    let dir = tempfile::tempdir().unwrap();
    let path = made(dir.path(), "dmg.db");
    let mut bytes = std::fs::read(&path).unwrap();
    let needle = b"table Note";
    let at = bytes
        .windows(needle.len())
        .position(|w| w == needle)
        .unwrap();
    bytes[at..at + needle.len()].fill(0xff);
    std::fs::write(&path, bytes).unwrap();
    let (code, out) = keel("check", &path);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("stored"), "{out}");
    // The library agrees: corrupt, and recover_corrupt moves it aside.
    let schema = Schema::from_file(evo("post_v1.fbs")).unwrap();
    let r = Database::open(&path, schema.clone(), StoreOptions::default());
    assert!(
        matches!(
            &r,
            Err(keel_query::Error::Storage(
                keel_storage::Error::Corrupt { .. }
            ))
        ),
        "{r:?}"
    );
}

#[test]
fn a_wal_of_another_database_is_corrupt_exit_three() {
    let dir = tempfile::tempdir().unwrap();
    let mine = made(dir.path(), "mine.db");
    // Another database's WAL, copied while its writer still runs.
    let other = dir.path().join("other.db");
    let schema = Schema::from_file(evo("post_v1.fbs")).unwrap();
    let r = schema.reader("evo.Note").unwrap();
    let b = r.encode_json(&serde_json::json!({"id": "theirs"})).unwrap();
    let db = Database::open(
        &other,
        schema,
        StoreOptions::default().idle_checkpoint_after(std::time::Duration::from_secs(3600)),
    )
    .unwrap();
    db.write(move |t| t.insert_bytes("evo.Note", b).map(|_| ()))
        .wait()
        .unwrap();
    std::fs::copy(sibling(&other, "-wal"), sibling(&mine, "-wal")).unwrap();
    db.close().wait().unwrap();
    let before = std::fs::read(&mine).unwrap();
    let (code, out) = keel("check", &mine);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("another database"), "{out}");
    assert_eq!(std::fs::read(&mine).unwrap(), before);
}
