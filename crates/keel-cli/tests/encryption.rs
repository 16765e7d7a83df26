//! The `keel` binary on encrypted files: `encrypt` a real keel database, read it
//! with `info`, `check` and `dump --key-file`, `rekey` it, `decrypt` it back; a
//! wrong key is exit 6 and a file open elsewhere is exit 5, with nothing changed.

use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use keel_query::{Database, StoreOptions};
use keel_schema::Schema;
use keel_storage::encryption::{DataKey, KeyFile};
use keel_storage::rotate::KeyId;
use serde_json::{json, Value as Json};

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Out {
    fn json(&self) -> Json {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {self:?}"))
    }
}

impl std::fmt::Debug for Out {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {}\n--- stdout\n{}\n--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

fn keel<S: AsRef<OsStr>>(args: &[S]) -> Out {
    let out = Command::new(env!("CARGO_BIN_EXE_keel"))
        .args(args)
        .output()
        .unwrap();
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn schema_file() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/blog/schema/evolution/post_v2.fbs")
}

/// A keel database of 200 notes whose ids (`note-secret-…`) are easy to look for.
fn notes(path: &Path, opts: StoreOptions) -> Database {
    let db = Database::open(path, Schema::from_file(schema_file()).unwrap(), opts).unwrap();
    insert_notes(&db, 0, 200);
    db.wait_for_indexes().unwrap();
    db
}

/// Notes `from .. from + n`, in one transaction.
fn insert_notes(db: &Database, from: usize, n: usize) {
    let schema = Schema::from_file(schema_file()).unwrap();
    let reader = schema.reader("evo.Note").unwrap();
    let batch: Vec<Vec<u8>> = (from..from + n)
        .map(|i| {
            reader
                .encode_json(&json!({
                    "id": format!("note-secret-{i:05}"),
                    "body": "x".repeat(20),
                    "stars": i % 5,
                    "mood": "Calm",
                    "legacy": i,
                }))
                .unwrap()
        })
        .collect();
    db.write(move |txn| {
        for b in batch {
            txn.insert_bytes("evo.Note", b)?;
        }
        Ok(())
    })
    .wait()
    .unwrap();
}

/// Does any file in `dir` hold `needle`?
fn plaintext_anywhere(dir: &Path, needle: &[u8]) -> bool {
    std::fs::read_dir(dir).unwrap().any(|e| {
        let p = e.unwrap().path();
        p.is_file()
            && std::fs::read(&p)
                .unwrap()
                .windows(needle.len())
                .any(|w| w == needle)
    })
}

fn arg(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn encrypt_read_rekey_and_decrypt_a_keel_database() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("app.db");
    notes(&db, StoreOptions::default()).close().wait().unwrap();
    assert!(plaintext_anywhere(dir.path(), b"note-secret-00042"));
    let k1 = dir.path().join("keys").join("one.key");
    std::fs::create_dir(dir.path().join("keys")).unwrap();

    // encrypt: the key file is made (0600), progress goes to stderr.
    let out = keel(&["encrypt", arg(&db), "--key-file", arg(&k1)]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("a new key was made"), "{out:?}");
    assert!(
        out.stderr.contains("Copy") && out.stderr.contains("Done 100%"),
        "{out:?}"
    );
    assert_eq!(
        std::fs::metadata(&k1).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let key1 = KeyFile::new(&k1).read().unwrap().unwrap();
    assert!(!plaintext_anywhere(dir.path(), b"note-secret-00042"));

    // Without the key the file is not a database; with it, every command reads it.
    assert_eq!(keel(&["info", arg(&db)]).code, 3);
    let out = keel(&["info", arg(&db), "--key-file", arg(&k1), "--json"]);
    assert_eq!(out.code, 0, "{out:?}");
    let v = out.json();
    assert_eq!(v["collections"][0]["rows"], 200);
    assert_eq!(v["encryption"]["key_id"], KeyId::of(&key1).to_string());
    let out = keel(&["check", arg(&db), "--key-file", arg(&k1)]);
    assert_eq!(out.code, 0, "{out:?}");
    let out = keel(&["dump", arg(&db), "--key-file", arg(&k1)]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.stdout.lines().count(), 200);
    assert!(out.stdout.contains("note-secret-00042"));

    // Another key: exit 6, as JSON too.
    let other = dir.path().join("keys").join("other.key");
    KeyFile::new(&other)
        .write_new(&DataKey::generate().unwrap())
        .unwrap();
    let out = keel(&["info", arg(&db), "--key-file", arg(&other), "--json"]);
    assert_eq!(out.code, 6, "{out:?}");
    assert_eq!(out.json()["kind"], "wrong_key");

    // rekey: the old key no longer opens it, the new one does, in keel too.
    let k2 = dir.path().join("keys").join("two.key");
    let out = keel(&[
        "rekey",
        arg(&db),
        "--key-file",
        arg(&k1),
        "--new-key-file",
        arg(&k2),
        "--json",
    ]);
    assert_eq!(out.code, 0, "{out:?}");
    let key2 = KeyFile::new(&k2).read().unwrap().unwrap();
    let v = out.json();
    assert_eq!(v["from"], KeyId::of(&key1).to_string());
    assert_eq!(v["to"], KeyId::of(&key2).to_string());
    assert_eq!(v["key_created"], true);
    assert!(v["bytes"].as_u64().unwrap() > 0);
    assert_eq!(keel(&["info", arg(&db), "--key-file", arg(&k1)]).code, 6);
    assert_eq!(keel(&["check", arg(&db), "--key-file", arg(&k2)]).code, 0);
    let schema = Schema::from_file(schema_file()).unwrap();
    let database = Database::open(
        &db,
        schema,
        StoreOptions::default().encryption(KeyFile::new(&k2)),
    )
    .unwrap();
    database.close().wait().unwrap();

    // decrypt: a plaintext SQLite file again, every row in it.
    let out = keel(&["decrypt", arg(&db), "--key-file", arg(&k2)]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("plaintext SQLite file now"), "{out:?}");
    let out = keel(&["info", arg(&db), "--json"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.json()["collections"][0]["rows"], 200);
    assert!(plaintext_anywhere(dir.path(), b"note-secret-00042"));
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names
            .iter()
            .all(|n| !n.contains("keelnew") && !n.contains("keelrotate")),
        "{names:?}"
    );
}

#[test]
fn a_migration_of_a_database_open_elsewhere_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("app.db");
    let open = notes(&db, StoreOptions::default());
    // (Not read with std::fs here: closing any descriptor of the file drops this
    // process's POSIX locks on it, SQLite's included.)
    let key = dir.path().join("app.key");
    let out = keel(&["encrypt", arg(&db), "--key-file", arg(&key), "--json"]);
    assert_eq!(out.code, 5, "{out:?}");
    assert_eq!(out.json()["kind"], "locked");
    open.close().wait().unwrap();
    // Still the plaintext file, every row in it, no rotation file beside it.
    let out = keel(&["info", arg(&db), "--json"]);
    assert_eq!(out.json()["collections"][0]["rows"], 200, "{out:?}");
    assert!(!keel_storage::rotate::journal_path(&db).exists());
    assert!(!keel_storage::rotate::new_path(&db).exists());
    // The key made for the refused attempt is the one the retry uses.
    let made = KeyFile::new(&key).read().unwrap().unwrap();
    let out = keel(&["encrypt", arg(&db), "--key-file", arg(&key), "--json"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.json()["to"], KeyId::of(&made).to_string());
}

#[test]
fn a_rekey_with_the_wrong_key_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("app.db");
    let right = dir.path().join("right.key");
    notes(
        &db,
        StoreOptions::default().encryption(KeyFile::new(&right)),
    )
    .close()
    .wait()
    .unwrap();
    let wrong = dir.path().join("wrong.key");
    KeyFile::new(&wrong)
        .write_new(&DataKey::generate().unwrap())
        .unwrap();
    let before = std::fs::read(&db).unwrap();
    let new = dir.path().join("new.key");
    let out = keel(&[
        "rekey",
        arg(&db),
        "--key-file",
        arg(&wrong),
        "--new-key-file",
        arg(&new),
    ]);
    assert_eq!(out.code, 6, "{out:?}");
    assert_eq!(std::fs::read(&db).unwrap(), before);
    assert_eq!(
        keel(&["check", arg(&db), "--key-file", arg(&right)]).code,
        0
    );
    // A plaintext file given to decrypt: exit 6 too (a key for a plaintext file).
    let plain = dir.path().join("plain.db");
    notes(&plain, StoreOptions::default())
        .close()
        .wait()
        .unwrap();
    let out = keel(&["decrypt", arg(&plain), "--key-file", arg(&right)]);
    assert_eq!(out.code, 6, "{out:?}");
}

/// `keel check --key-file` runs keel's WAL identity check on an encrypted file too
/// (through decrypted page-1 images): a copy pulled with its WAL passes, the same
/// WAL beside a backup of the file two epochs older is refused (exit 3).
#[test]
fn check_refuses_an_encrypted_backup_under_a_newer_wal() {
    let dir = tempfile::tempdir().unwrap();
    let device = dir.path().join("device");
    std::fs::create_dir(&device).unwrap();
    let src = device.join("app.db");
    let key = dir.path().join("app.key");
    let opts = || StoreOptions::default().encryption(KeyFile::new(&key));
    // Each session starts a new WAL, so each moves the epoch on by one.
    notes(&src, opts()).close().wait().unwrap();
    let backup = dir.path().join("backup.db");
    std::fs::copy(&src, &backup).unwrap();
    let schema = || Schema::from_file(schema_file()).unwrap();
    let db = Database::open(&src, schema(), opts()).unwrap();
    insert_notes(&db, 200, 10);
    db.close().wait().unwrap();
    let held = opts()
        .checkpoint_threshold(1 << 40)
        .idle_checkpoint_after(std::time::Duration::from_secs(3600));
    let db = Database::open(&src, schema(), held).unwrap();
    insert_notes(&db, 210, 10);
    // Pulled while the app runs: the file and its WAL, no -shm.
    let wal = |p: &Path| PathBuf::from(format!("{}-wal", p.display()));
    let pulled = dir.path().join("pulled.db");
    std::fs::copy(&src, &pulled).unwrap();
    std::fs::copy(wal(&src), wal(&pulled)).unwrap();
    let restored = dir.path().join("restored.db");
    std::fs::copy(&backup, &restored).unwrap();
    std::fs::copy(wal(&src), wal(&restored)).unwrap();
    db.close().wait().unwrap();

    let out = keel(&["check", arg(&pulled), "--key-file", arg(&key)]);
    assert_eq!(out.code, 0, "{out:?}");
    let out = keel(&["check", arg(&restored), "--key-file", arg(&key), "--json"]);
    assert_eq!(out.code, 3, "{out:?}");
    assert!(
        out.json()["error"]
            .as_str()
            .unwrap()
            .contains("does not belong"),
        "{out:?}"
    );
}
