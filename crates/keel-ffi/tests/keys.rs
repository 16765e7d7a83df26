//! Encrypted databases through the FFI: the app's `KeyProvider` (here implemented
//! in Rust, the way a foreign one is called) or a key file gives the data key; each
//! of the five key errors is its own `KeelError` case, and none changes any file.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use futures::executor::block_on;
use keel_ffi::{
    encode_json, new_data_key, open_async, open_blocking, open_migrating_blocking, Encryption,
    KeelError, KeyError, KeyProvider, KeyPurpose, KeySource, Migrator, OpenOptions, SyncPolicy,
    WriteOp, DATA_KEY_BYTES,
};

const FBS: &str = "namespace demo;
table Post { id: string (primary); title: string; }
root_type Post;";

fn insert(id: &str, title: &str) -> Vec<WriteOp> {
    let bytes = encode_json(
        FBS.into(),
        "demo.Post".into(),
        format!(r#"{{"id": "{id}", "title": "{title}"}}"#),
    )
    .unwrap();
    vec![WriteOp::Insert {
        collection: "demo.Post".into(),
        bytes,
    }]
}

/// A key store like the platform's: it makes and keeps a key when asked to
/// `Create`, returns it on `Open`, and can be locked or lose its item.
#[derive(Default)]
struct Store {
    key: Mutex<Option<Vec<u8>>>,
    locked: Mutex<bool>,
    calls: Mutex<Vec<(KeyPurpose, Option<String>)>>,
}

impl KeyProvider for Store {
    fn data_key(&self, _database: String, purpose: KeyPurpose) -> Result<Vec<u8>, KeyError> {
        let thread = std::thread::current().name().map(str::to_owned);
        self.calls.lock().unwrap().push((purpose, thread));
        if *self.locked.lock().unwrap() {
            return Err(KeyError::Unavailable {
                reason: "device locked".into(),
            });
        }
        let mut key = self.key.lock().unwrap();
        match (key.as_ref(), purpose) {
            (Some(k), _) => Ok(k.clone()),
            (None, KeyPurpose::Create) => {
                let k = new_data_key().unwrap();
                *key = Some(k.clone());
                Ok(k)
            }
            (None, KeyPurpose::Open) => Err(KeyError::Lost {
                reason: "no key item for an existing database".into(),
            }),
        }
    }
}

fn with_key(key: KeySource) -> OpenOptions {
    OpenOptions {
        commit_sync: Some(SyncPolicy::Off),
        encryption: Some(Encryption {
            key,
            plaintext_header: false,
        }),
        ..OpenOptions::default()
    }
}

fn provider(p: &Arc<Store>) -> KeySource {
    KeySource::Provider {
        provider: Arc::clone(p) as Arc<dyn KeyProvider>,
    }
}

fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
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

fn any_file_contains(dir: &Path, needle: &[u8]) -> bool {
    snapshot(dir)
        .values()
        .any(|b| b.windows(needle.len()).any(|w| w == needle))
}

fn path_in(dir: &tempfile::TempDir, name: &str) -> String {
    dir.path().join(name).display().to_string()
}

/// An encrypted database holding one post, closed; its key is in `store`.
fn encrypted(dir: &tempfile::TempDir, store: &Arc<Store>) -> String {
    let path = path_in(dir, "e.db");
    let db = open_blocking(path.clone(), FBS.into(), with_key(provider(store)), None).unwrap();
    block_on(db.write(insert("p1", "keel-ffi-secret"))).unwrap();
    block_on(db.close()).unwrap();
    path
}

fn open_err(path: &str, options: OpenOptions) -> KeelError {
    match open_blocking(path.into(), FBS.into(), options, None) {
        Ok(_) => panic!("the open succeeded"),
        Err(e) => {
            assert!(!e.to_string().contains("file is not a database"), "{e}");
            e
        }
    }
}

#[test]
fn the_apps_provider_creates_then_opens_and_nothing_is_plaintext() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::default());
    let path = encrypted(&dir, &store);
    assert!(!any_file_contains(dir.path(), b"keel-ffi-secret"));
    assert_eq!(
        store.key.lock().unwrap().as_ref().map(Vec::len),
        Some(DATA_KEY_BYTES as usize)
    );

    // The async open asks on keel's open thread, never the caller's.
    let db = block_on(open_async(
        path,
        FBS.into(),
        with_key(provider(&store)),
        None,
    ))
    .unwrap();
    let got = db.query("Post".into()).all().unwrap();
    assert_eq!(got.len(), 1);
    block_on(db.close()).unwrap();
    let calls = store.calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 2, "once per open: {calls:?}");
    assert_eq!(calls[0].0, KeyPurpose::Create);
    assert_eq!(calls[1].0, KeyPurpose::Open);
    let caller = std::thread::current().name().map(str::to_owned);
    assert_ne!(
        calls[1].1, caller,
        "the async open asked on the caller's thread"
    );
}

#[test]
fn a_locked_device_is_key_unavailable_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::default());
    let path = encrypted(&dir, &store);
    let before = snapshot(dir.path());
    *store.locked.lock().unwrap() = true;
    let e = open_err(&path, with_key(provider(&store)));
    assert!(matches!(e, KeelError::KeyUnavailable { .. }), "{e:?}");
    assert_eq!(snapshot(dir.path()), before);
    // After the unlock the same key opens it.
    *store.locked.lock().unwrap() = false;
    let db = open_blocking(path, FBS.into(), with_key(provider(&store)), None).unwrap();
    assert_eq!(db.query("Post".into()).count().unwrap(), 1);
    block_on(db.close()).unwrap();

    // A locked device and no database yet: no file is made.
    let fresh = tempfile::tempdir().unwrap();
    let locked = Arc::new(Store::default());
    *locked.locked.lock().unwrap() = true;
    let e = open_err(&path_in(&fresh, "new.db"), with_key(provider(&locked)));
    assert!(matches!(e, KeelError::KeyUnavailable { .. }), "{e:?}");
    assert!(snapshot(fresh.path()).is_empty());
}

#[test]
fn a_restore_without_the_key_is_key_lost_and_no_new_database_replaces_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::default());
    let path = encrypted(&dir, &store);
    let before = snapshot(dir.path());
    // The database came back from a backup; the key store item did not.
    let restored = Arc::new(Store::default());
    let e = open_err(&path, with_key(provider(&restored)));
    assert!(matches!(e, KeelError::KeyLost { .. }), "{e:?}");
    assert_eq!(snapshot(dir.path()), before);
    assert!(restored.key.lock().unwrap().is_none(), "a new key was made");

    // A key file that is gone, or holds something else, is lost too.
    let keys = tempfile::tempdir().unwrap();
    let missing = KeySource::File {
        path: keys.path().join("gone.key").display().to_string(),
    };
    let e = open_err(&path, with_key(missing));
    assert!(matches!(e, KeelError::KeyLost { .. }), "{e:?}");
    assert!(snapshot(keys.path()).is_empty(), "no key file was made");
    assert_eq!(snapshot(dir.path()), before);

    // So is a provider that hands back bytes that are not a data key.
    let short = Arc::new(Store::default());
    *short.key.lock().unwrap() = Some(vec![1; 32]);
    let e = open_err(&path, with_key(provider(&short)));
    assert!(matches!(e, KeelError::KeyLost { .. }), "{e:?}");
    assert_eq!(snapshot(dir.path()), before);
}

#[test]
fn another_key_or_header_setting_is_wrong_key_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::default());
    let path = encrypted(&dir, &store);
    let before = snapshot(dir.path());
    let other = Arc::new(Store::default());
    *other.key.lock().unwrap() = Some(new_data_key().unwrap());
    let e = open_err(&path, with_key(provider(&other)));
    assert!(matches!(e, KeelError::WrongKey { .. }), "{e:?}");
    assert_eq!(snapshot(dir.path()), before);

    let mut options = with_key(provider(&store));
    if let Some(e) = options.encryption.as_mut() {
        e.plaintext_header = true;
    }
    let e = open_err(&path, options);
    assert!(matches!(e, KeelError::WrongKey { .. }), "{e:?}");
    assert_eq!(snapshot(dir.path()), before);
}

#[test]
fn a_key_for_a_plaintext_database_is_not_encrypted_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = path_in(&dir, "plain.db");
    let plain = OpenOptions {
        commit_sync: Some(SyncPolicy::Off),
        ..OpenOptions::default()
    };
    let db = open_blocking(path.clone(), FBS.into(), plain.clone(), None).unwrap();
    block_on(db.write(insert("p", "plain"))).unwrap();
    block_on(db.close()).unwrap();
    let before = snapshot(dir.path());
    let store = Arc::new(Store::default());
    *store.key.lock().unwrap() = Some(new_data_key().unwrap());
    let e = open_err(&path, with_key(provider(&store)));
    assert!(matches!(e, KeelError::NotEncrypted { .. }), "{e:?}");
    assert_eq!(snapshot(dir.path()), before);
    let db = open_blocking(path, FBS.into(), plain, None).unwrap();
    assert_eq!(db.query("Post".into()).count().unwrap(), 1);
    block_on(db.close()).unwrap();
}

#[test]
fn an_encrypted_database_opened_without_a_key_is_key_required_and_changes_nothing() {
    // The shared-container layout (the plaintext header) says it is encrypted;
    // a file that is ciphertext from its first byte cannot be told from noise.
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::default());
    let path = path_in(&dir, "h.db");
    let mut options = with_key(provider(&store));
    if let Some(e) = options.encryption.as_mut() {
        e.plaintext_header = true;
    }
    let db = open_blocking(path.clone(), FBS.into(), options, None).unwrap();
    block_on(db.write(insert("p1", "keel-ffi-secret"))).unwrap();
    block_on(db.close()).unwrap();
    let before = snapshot(dir.path());
    let no_key = OpenOptions {
        recover_corrupt: true,
        ..OpenOptions::default()
    };
    let e = open_err(&path, no_key);
    assert!(matches!(e, KeelError::KeyRequired { .. }), "{e:?}");
    assert_eq!(
        snapshot(dir.path()),
        before,
        "not moved aside, nothing written"
    );
}

/// A provider that panics (an FFI contract broken on the way back) is contained:
/// the open fails with `KeyUnavailable`, makes nothing, and the process goes on.
struct Panics;
impl KeyProvider for Panics {
    fn data_key(&self, _: String, _: KeyPurpose) -> Result<Vec<u8>, KeyError> {
        panic!("provider bug")
    }
}

#[test]
fn a_panicking_provider_is_contained_as_key_unavailable() {
    let dir = tempfile::tempdir().unwrap();
    let e = open_err(
        &path_in(&dir, "p.db"),
        with_key(KeySource::Provider {
            provider: Arc::new(Panics),
        }),
    );
    assert!(matches!(e, KeelError::KeyUnavailable { .. }), "{e:?}");
    assert!(snapshot(dir.path()).is_empty());
}

#[test]
fn a_key_file_and_the_plaintext_header_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let keys = tempfile::tempdir().unwrap();
    let path = path_in(&dir, "h.db");
    let options = || OpenOptions {
        commit_sync: Some(SyncPolicy::Off),
        encryption: Some(Encryption {
            key: KeySource::File {
                path: keys.path().join("h.key").display().to_string(),
            },
            plaintext_header: true,
        }),
        ..OpenOptions::default()
    };
    let db = open_blocking(path.clone(), FBS.into(), options(), None).unwrap();
    block_on(db.write(insert("p", "keel-header-secret"))).unwrap();
    block_on(db.close()).unwrap();
    let file = std::fs::read(&path).unwrap();
    assert_eq!(
        &file[..16],
        b"SQLite format 3\0",
        "the header stays plaintext"
    );
    assert!(!any_file_contains(dir.path(), b"keel-header-secret"));
    let db = open_blocking(path, FBS.into(), options(), None).unwrap();
    assert_eq!(db.query("Post".into()).count().unwrap(), 1);
    block_on(db.close()).unwrap();
}

#[test]
fn a_migrating_open_takes_the_same_key_and_key_errors() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::default());
    let path = encrypted(&dir, &store);
    let before = snapshot(dir.path());
    let e = match open_migrating_blocking(
        path.clone(),
        FBS.into(),
        Migrator::new(),
        with_key(provider(&Arc::new(Store::default()))),
        None,
    ) {
        Ok(_) => panic!("opened without its key"),
        Err(e) => e,
    };
    assert!(matches!(e, KeelError::KeyLost { .. }), "{e:?}");
    assert_eq!(snapshot(dir.path()), before);
    let db = open_migrating_blocking(
        path,
        FBS.into(),
        Migrator::new(),
        with_key(provider(&store)),
        None,
    )
    .unwrap();
    assert_eq!(db.query("Post".into()).count().unwrap(), 1);
    block_on(db.close()).unwrap();
}
