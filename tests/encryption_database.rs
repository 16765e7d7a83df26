//! Encryption through the object layer: `Database::open*` passes the storage
//! options through unchanged, so an encrypted database holds objects, their
//! indexed fields and the dictionary with no plaintext in any file, reopens with
//! its key, and reports each of the four key errors as its own `keel::Error`
//! variant, leaving every file as it was.

use std::path::Path;

use keel::prelude::*;
use keel::storage::encryption::{DataKey, KeyError, KeyFile, KeyPurpose};
use keel_example_blog::blog::Post;

fn files_contain(dir: &Path, needle: &[u8]) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .filter(|p| {
            let b = std::fs::read(p).unwrap();
            b.windows(needle.len()).any(|w| w == needle)
        })
        .map(|p| p.display().to_string())
        .collect()
}

#[test]
fn an_encrypted_database_keeps_objects_unreadable_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let keys = tempfile::tempdir().unwrap();
    let path = dir.path().join("enc.db");
    let key = keys.path().join("enc.key");
    let opts = || StoreOptions::default().encryption(KeyFile::new(&key));
    let db = Database::open_for::<Post>(&path, opts()).unwrap();
    db.write(|t| {
        for i in 0..50 {
            let p = Post::builder()
                .id(format!("post-{i}"))
                .title(format!("keel-secret-title-{i}"))
                .build();
            t.insert(&p)?;
        }
        Ok(())
    })
    .wait()
    .unwrap();
    let live = files_contain(dir.path(), b"keel-secret-title");
    db.close().wait().unwrap();
    let closed = files_contain(dir.path(), b"keel-secret-title");
    assert!(live.is_empty() && closed.is_empty(), "{live:?} {closed:?}");

    let db = Database::open_for::<Post>(&path, opts()).unwrap();
    let got = db.fetch::<Post>().all().unwrap();
    assert_eq!(got.len(), 50);
    assert!(got
        .iter()
        .any(|p| p.title.as_deref() == Some("keel-secret-title-7")));
    db.close().wait().unwrap();

    let wrong = |_: &Path, _: KeyPurpose| -> Result<DataKey, KeyError> {
        Ok(DataKey::from_parts(&[7; 32], &[7; 16]))
    };
    match Database::open_for::<Post>(&path, StoreOptions::default().encryption(wrong)) {
        Err(keel::Error::WrongKey { .. }) => {}
        Err(e) => panic!("expected WrongKey, got {e:?}"),
        Ok(_) => panic!("a wrong key opened the database"),
    }
}

/// Every file in `dir` with its bytes: what a key error must leave as it was.
fn snapshot(dir: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&p).unwrap())
        })
        .collect()
}

/// An encrypted database of a few posts under the key file `key`, closed.
fn encrypted_db(path: &Path, key: &Path) {
    let db =
        Database::open_for::<Post>(path, StoreOptions::default().encryption(KeyFile::new(key)))
            .unwrap();
    db.write(|t| {
        for i in 0..5 {
            t.insert(&Post::builder().id(format!("p{i}")).title("kept").build())?;
        }
        Ok(())
    })
    .wait()
    .unwrap();
    db.close().wait().unwrap();
}

fn open_err(path: &Path, opts: StoreOptions) -> keel::Error {
    match Database::open_for::<Post>(path, opts) {
        Ok(_) => panic!("the open succeeded"),
        Err(e) => {
            // Each key error is its own message, never SQLite's.
            assert!(!e.to_string().contains("file is not a database"), "{e}");
            e
        }
    }
}

#[test]
fn a_locked_key_store_is_key_unavailable_and_retryable_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let keys = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.db");
    let key = keys.path().join("a.key");
    encrypted_db(&path, &key);
    let before = snapshot(dir.path());
    let locked = |_: &Path, purpose: KeyPurpose| -> Result<DataKey, KeyError> {
        assert_eq!(purpose, KeyPurpose::Open, "the database exists");
        Err(KeyError::Unavailable("device locked".into()))
    };
    let e = open_err(&path, StoreOptions::default().encryption(locked));
    assert!(matches!(e, keel::Error::KeyUnavailable { .. }), "{e:?}");
    assert!(e.is_retryable(), "open again after the unlock");
    assert_eq!(snapshot(dir.path()), before);

    // Unlocked, the same key opens everything that was there.
    let db = Database::open_for::<Post>(
        &path,
        StoreOptions::default().encryption(KeyFile::new(&key)),
    )
    .unwrap();
    assert_eq!(db.fetch::<Post>().all().unwrap().len(), 5);
    db.close().wait().unwrap();
}

#[test]
fn an_unavailable_key_for_a_new_database_creates_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("new.db");
    let locked = |_: &Path, purpose: KeyPurpose| -> Result<DataKey, KeyError> {
        assert_eq!(purpose, KeyPurpose::Create);
        Err(KeyError::Unavailable("key store not ready".into()))
    };
    let e = open_err(&path, StoreOptions::default().encryption(locked));
    assert!(matches!(e, keel::Error::KeyUnavailable { .. }), "{e:?}");
    assert!(
        snapshot(dir.path()).is_empty(),
        "{:?}",
        snapshot(dir.path()).keys()
    );
}

#[test]
fn a_database_restored_without_its_key_is_key_lost_and_never_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let keys = tempfile::tempdir().unwrap();
    let path = dir.path().join("b.db");
    let key = keys.path().join("b.key");
    encrypted_db(&path, &key);
    // The backup brought the database back, but not its key.
    std::fs::remove_file(&key).unwrap();
    let before = snapshot(dir.path());
    let e = open_err(
        &path,
        StoreOptions::default().encryption(KeyFile::new(&key)),
    );
    assert!(matches!(e, keel::Error::KeyLost { .. }), "{e:?}");
    assert!(!e.is_retryable());
    assert_eq!(snapshot(dir.path()), before);
    assert!(
        !key.exists(),
        "no new key was made for an existing database"
    );
    // Asking again changes nothing either: no fresh, empty database over it.
    let e = open_err(
        &path,
        StoreOptions::default().encryption(KeyFile::new(&key)),
    );
    assert!(matches!(e, keel::Error::KeyLost { .. }), "{e:?}");
    assert_eq!(snapshot(dir.path()), before);
}

#[test]
fn another_key_is_wrong_key_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let keys = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.db");
    encrypted_db(&path, &keys.path().join("c.key"));
    let before = snapshot(dir.path());
    let other = |_: &Path, _: KeyPurpose| -> Result<DataKey, KeyError> {
        Ok(DataKey::from_parts(&[9; 32], &[9; 16]))
    };
    let e = open_err(&path, StoreOptions::default().encryption(other));
    assert!(matches!(e, keel::Error::WrongKey { .. }), "{e:?}");
    assert_eq!(snapshot(dir.path()), before);
}

#[test]
fn a_key_for_a_plaintext_database_is_not_encrypted_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let keys = tempfile::tempdir().unwrap();
    let path = dir.path().join("d.db");
    let db = Database::open_for::<Post>(&path, StoreOptions::default()).unwrap();
    db.write(|t| t.insert(&Post::builder().id("p").title("plain").build()))
        .wait()
        .unwrap();
    db.close().wait().unwrap();
    let before = snapshot(dir.path());
    let key = KeyFile::new(keys.path().join("d.key"));
    key.write_new(&DataKey::generate().unwrap()).unwrap();
    let e = open_err(&path, StoreOptions::default().encryption(key));
    assert!(matches!(e, keel::Error::NotEncrypted { .. }), "{e:?}");
    assert_eq!(snapshot(dir.path()), before);
    // Still the plaintext database it was.
    let db = Database::open_for::<Post>(&path, StoreOptions::default()).unwrap();
    assert_eq!(db.fetch::<Post>().all().unwrap().len(), 1);
    db.close().wait().unwrap();
}

const SIDE_SCHEMA: &str = "attribute \"searchable\"; namespace s;
    table Note {
      id: string (primary);
      title: string (searchable);
      tag: string (indexed);
      e: [float] (vector: 4, metric: \"l2\");
    }
    root_type Note;";

/// A vector whose little-endian bytes are a pattern no page holds by chance.
const VECTOR: [f32; 4] = [1234.5678, -8_765.432, 3.141_592_7e7, 2.718_281_7e-3];

/// What must not be readable on disk, with where it is written in a plaintext
/// database: the row's text field, the full-text index's token (the title is
/// stored upper case, the index folds it to lower case, so the lower-case word is
/// in the index alone), an indexed field's index entry, a dictionary key and
/// value, and a vector's float bytes.
fn side_needles() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("searchable token", b"zqxjtokenword".to_vec()),
        ("indexed field", b"keel-indexed-secret".to_vec()),
        ("dictionary key", b"keel-dict-secret-key".to_vec()),
        ("dictionary value", b"keel-dict-secret-value".to_vec()),
        (
            "vector bytes",
            VECTOR.iter().flat_map(|f| f.to_le_bytes()).collect(),
        ),
    ]
}

/// Writes objects with every needle into a database at `path`, checks every file
/// of the directory while the store is open (its WAL full) and after it closed,
/// and returns the needles found in each of the two looks.
fn write_side_tables(path: &Path, opts: impl Fn() -> StoreOptions) -> Vec<Vec<String>> {
    let schema = Schema::parse(SIDE_SCHEMA, "side.fbs").unwrap();
    let db = Database::open(path, schema.clone(), opts()).unwrap();
    let s2 = schema.clone();
    db.write(move |t| {
        let enc = s2.reader("s.Note").unwrap();
        for i in 0..20 {
            let bytes = enc
                .encode_json(&serde_json::json!({
                    "id": format!("n{i}"),
                    "title": format!("ZQXJTOKENWORD number {i}"),
                    "tag": "keel-indexed-secret",
                    "e": VECTOR,
                }))
                .unwrap();
            t.insert_bytes("s.Note", bytes)?;
        }
        Ok(())
    })
    .wait()
    .unwrap();
    db.dictionary()
        .set("keel-dict-secret-key", "keel-dict-secret-value")
        .unwrap();
    db.dictionary().sync().wait().unwrap();
    // The side tables answer (so their pages were written).
    let found = db
        .query("s.Note")
        .filter(Expr::search("zqxjtokenword"))
        .all()
        .unwrap();
    assert_eq!(found.len(), 20);
    let e = schema.reader("s.Note").unwrap().path("e").unwrap();
    assert_eq!(
        db.query("s.Note")
            .nearest(e, &VECTOR, 3)
            .all()
            .unwrap()
            .len(),
        3
    );
    let dir = path.parent().unwrap();
    let look = |dir: &Path| -> Vec<String> {
        side_needles()
            .into_iter()
            .filter(|(_, n)| !files_contain(dir, n).is_empty())
            .map(|(what, _)| what.to_owned())
            .collect()
    };
    let open = look(dir);
    assert!(
        std::fs::metadata(format!("{}-wal", path.display())).is_ok_and(|m| m.len() > 0),
        "the open look must include a WAL with the writes"
    );
    db.close().wait().unwrap();
    vec![open, look(dir)]
}

#[test]
fn fields_search_tokens_dictionary_values_and_vectors_leave_no_plaintext() {
    // The check sees plaintext: without a key every needle is on disk.
    let plain = tempfile::tempdir().unwrap();
    let every: Vec<String> = side_needles().iter().map(|(w, _)| w.to_string()).collect();
    let looks = write_side_tables(&plain.path().join("p.db"), StoreOptions::default);
    assert_eq!(looks, vec![every.clone(), every], "the plaintext control");

    let dir = tempfile::tempdir().unwrap();
    let keys = tempfile::tempdir().unwrap();
    let key = keys.path().join("s.key");
    let looks = write_side_tables(&dir.path().join("s.db"), || {
        StoreOptions::default().encryption(KeyFile::new(&key))
    });
    assert_eq!(
        looks,
        vec![Vec::<String>::new(), Vec::new()],
        "plaintext in an encrypted database's files"
    );
}
