//! Rotating the key of an open `Database` (`Database::rotate_key`): the handle
//! stays open across the rotation, writes submitted meanwhile land in the new
//! file, live queries go on, the old key is refused afterwards, and a failed
//! rotation leaves the old file and a usable database. Then two real processes:
//! an app rotates while its extension is suspended; while the extension's key
//! provider still gives the old key its writes fail with `Rotated` and reach no
//! file; once it gives the new one, the extension's next write (or its resume)
//! asks again and goes on with the new key, without being closed.

use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use keel::prelude::*;
use keel::rotate::{Encryption, KeyId, RotateOptions, Step};
use keel::storage::encryption::{DataKey, KeyFile};
use keel::Update;
use keel_example_blog::blog::Post;

mod xproc;
use xproc::Writer;

/// What waits for a delivery or a thread allow on a loaded machine.
const WAIT: Duration = Duration::from_secs(30);

fn post(id: &str, priority: i32) -> Post {
    Post::builder().id(id).priority(priority).build()
}

fn write_posts(db: &Database, prefix: &str, n: i32) -> keel::Result<()> {
    let prefix = prefix.to_string();
    db.write(move |t| {
        for i in 0..n {
            t.insert(&post(&format!("{prefix}{i}"), i))?;
        }
        Ok(())
    })
    .wait()
}

fn keyed(key: &Path) -> StoreOptions {
    StoreOptions::default().encryption(KeyFile::new(key))
}

fn ids(db: &Database) -> Vec<String> {
    let mut v: Vec<String> = db
        .fetch::<Post>()
        .all()
        .unwrap()
        .into_iter()
        .map(|p| p.id.clone())
        .collect();
    v.sort();
    v
}

fn new_key_file(path: &Path) -> DataKey {
    let key = DataKey::generate().unwrap();
    KeyFile::new(path).write_new(&key).unwrap();
    key
}

#[test]
fn an_open_database_rotates_to_a_new_key_and_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    let (old_key, new_key) = (dir.path().join("old.key"), dir.path().join("new.key"));
    let old = new_key_file(&old_key);
    let db = Database::open_for::<Post>(&path, keyed(&old_key)).unwrap();
    write_posts(&db, "a", 200).unwrap();

    let (tx, rx) = mpsc::channel();
    let _sub = db
        .fetch::<Post>()
        .subscribe(move |u: Update<Post>| {
            let _ = tx.send(u.objects.len());
        })
        .unwrap();
    assert_eq!(rx.recv_timeout(WAIT).unwrap(), 200);

    let steps = Arc::new(Mutex::new(Vec::new()));
    let s2 = Arc::clone(&steps);
    let opts = RotateOptions::default().progress(move |p| s2.lock().unwrap().push(p.step));
    let rotation = db.rotate_key(Some(Encryption::new(KeyFile::new(&new_key))), opts);
    // Submitted while the rotation runs: they wait and land in the new file.
    let during: Vec<_> = (0..5)
        .map(|i| {
            let p = post(&format!("during{i}"), 1000 + i);
            db.write(move |t| t.insert(&p).map(|_| ()))
        })
        .collect();
    let report = rotation.wait().unwrap();
    for w in during {
        w.wait().unwrap();
    }
    let new = DataKey::from_hex(&std::fs::read_to_string(&new_key).unwrap()).unwrap();
    assert_eq!(report.from, KeyId::of(&old));
    assert_eq!(report.to, KeyId::of(&new));
    let steps = steps.lock().unwrap().clone();
    assert_eq!(steps.first(), Some(&Step::Lock));
    assert_eq!(steps.last(), Some(&Step::Done));

    // The handle goes on: reads, writes, the live query.
    write_posts(&db, "b", 10).unwrap();
    assert_eq!(db.fetch::<Post>().count().unwrap(), 215);
    let mut seen = 0;
    while seen != 215 {
        seen = rx
            .recv_timeout(WAIT)
            .expect("the live query stopped after the rotation");
    }
    db.close().wait().unwrap();

    let e = Database::open_for::<Post>(&path, keyed(&old_key)).unwrap_err();
    assert!(matches!(e, keel::Error::WrongKey { .. }), "{e:?}");
    let db = Database::open_for::<Post>(&path, keyed(&new_key)).unwrap();
    assert_eq!(db.fetch::<Post>().count().unwrap(), 215);
    assert!(ids(&db).contains(&"during4".to_string()));
    db.close().wait().unwrap();
}

#[test]
fn an_open_plaintext_database_is_encrypted_and_exported_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("plain.db");
    let key = dir.path().join("made.key");
    let db = Database::open_for::<Post>(&path, StoreOptions::default()).unwrap();
    write_posts(&db, "p", 50).unwrap();
    // The key file does not exist: the provider makes it (Create).
    let report = db
        .rotate_key(
            Some(Encryption::new(KeyFile::new(&key))),
            RotateOptions::default(),
        )
        .wait()
        .unwrap();
    assert_eq!(report.from, KeyId::Plaintext);
    write_posts(&db, "q", 5).unwrap();
    let raw = std::fs::read(&path).unwrap();
    assert_ne!(
        &raw[..16],
        b"SQLite format 3\0",
        "the file is still plaintext"
    );
    db.close().wait().unwrap();
    let e = Database::open_for::<Post>(&path, StoreOptions::default()).unwrap_err();
    assert!(
        matches!(e, keel::Error::KeyRequired { .. } | keel::Error::Storage(_)),
        "{e:?}"
    );

    let db = Database::open_for::<Post>(&path, keyed(&key)).unwrap();
    assert_eq!(db.fetch::<Post>().count().unwrap(), 55);
    let report = db
        .rotate_key(None, RotateOptions::default())
        .wait()
        .unwrap();
    assert_eq!(report.to, KeyId::Plaintext);
    write_posts(&db, "r", 1).unwrap();
    db.close().wait().unwrap();
    assert_eq!(&std::fs::read(&path).unwrap()[..16], b"SQLite format 3\0");
    let db = Database::open_for::<Post>(&path, StoreOptions::default()).unwrap();
    assert_eq!(db.fetch::<Post>().count().unwrap(), 56);
    db.close().wait().unwrap();
}

#[test]
fn a_refused_rotation_leaves_the_old_file_and_a_usable_database() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("held.db");
    let (old_key, new_key) = (dir.path().join("old.key"), dir.path().join("new.key"));
    new_key_file(&old_key);
    let db = Database::open_for::<Post>(&path, keyed(&old_key)).unwrap();
    write_posts(&db, "a", 20).unwrap();
    // Another handle on the file, as another process's would be.
    let other = Database::open_for::<Post>(&path, keyed(&old_key)).unwrap();
    let opts = RotateOptions::default().busy_timeout(Duration::from_millis(200));
    let e = db
        .rotate_key(Some(Encryption::new(KeyFile::new(&new_key))), opts)
        .wait()
        .unwrap_err();
    assert!(
        matches!(e, keel::Error::Storage(keel::storage::Error::Locked { .. })),
        "{e:?}"
    );
    write_posts(&db, "b", 3).unwrap();
    assert_eq!(other.fetch::<Post>().count().unwrap(), 23);
    for suffix in ["-keelnew", "-keelrotate"] {
        let mut p = path.clone().into_os_string();
        p.push(suffix);
        assert!(!PathBuf::from(p).exists(), "{suffix} left behind");
    }
    other.close().wait().unwrap();
    db.close().wait().unwrap();
    let db = Database::open_for::<Post>(&path, keyed(&old_key)).unwrap();
    assert_eq!(db.fetch::<Post>().count().unwrap(), 23);
    db.close().wait().unwrap();
}

/// The variable naming the extension's key file (its provider reads it at
/// every ask, as a key store shared with the app would answer).
const KEY_VAR: &str = "KEEL_ROTATE_OPEN_KEY";

/// Process A, the app extension: opens the database with the key in the file
/// named by [`KEY_VAR`], and runs `write <id>`, `suspend`, `resume`, `count <n>`.
#[test]
fn extension_process() {
    let Some((path, _)) = xproc::writer_role() else {
        return;
    };
    let key = PathBuf::from(std::env::var(KEY_VAR).unwrap());
    let db = Database::open_for::<Post>(&path, keyed(&key)).unwrap();
    xproc::serve(|w| match *w {
        ["write", id] => {
            let p = post(id, 7);
            db.write(move |t| t.insert(&p).map(|_| ())).wait()
        }
        ["suspend"] => db.suspend().map(|_| ()),
        ["resume"] => db.resume().map(|_| ()),
        ["count", n] => {
            let got = db.fetch::<Post>().count()?;
            assert_eq!(got, n.parse::<u64>().unwrap());
            Ok(())
        }
        _ => panic!("unknown command {w:?}"),
    });
    db.close().wait().unwrap();
}

#[test]
fn another_process_reopens_with_the_new_key_and_never_writes_the_old_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.db");
    let (old_key, new_key) = (dir.path().join("old.key"), dir.path().join("new.key"));
    let ext_key = dir.path().join("extension.key");
    new_key_file(&old_key);
    std::fs::copy(&old_key, &ext_key).unwrap();
    let app = Database::open_for::<Post>(&path, keyed(&old_key)).unwrap();
    write_posts(&app, "app", 10).unwrap();

    let mut ext = Writer::spawn_with("extension_process", &path, false, &[(KEY_VAR, &ext_key)]);
    ext.run("write ext1");
    ext.run("suspend");
    app.rotate_key(
        Some(Encryption::new(KeyFile::new(&new_key))),
        RotateOptions::default(),
    )
    .wait()
    .unwrap();

    // The extension's key store still gives the old key: refused, typed, and
    // written nowhere.
    ext.run("resume");
    let answer = ext.answer("write lost");
    assert!(answer.contains("rotation"), "{answer}");
    assert_eq!(app.fetch::<Post>().count().unwrap(), 11);

    // The app hands the new key to the shared key store: the extension's next
    // write meets the rotated file, asks its provider again and lands in the
    // new file, with no suspend or resume of its own.
    std::fs::copy(&new_key, &ext_key).unwrap();
    ext.run("write ext2");
    ext.run("count 12");

    // Rotated again while the extension is suspended, with the key store up to
    // date this time: its resume reopens with the newest key.
    let newest_key = dir.path().join("newest.key");
    ext.run("suspend");
    app.rotate_key(
        Some(Encryption::new(KeyFile::new(&newest_key))),
        RotateOptions::default(),
    )
    .wait()
    .unwrap();
    std::fs::copy(&newest_key, &ext_key).unwrap();
    ext.run("resume");
    ext.run("write ext3");
    ext.run("count 13");
    ext.quit();
    let got = ids(&app);
    assert!(
        got.contains(&"ext3".to_string()) && !got.contains(&"lost".to_string()),
        "{got:?}"
    );
    app.close().wait().unwrap();
    let e = Database::open_for::<Post>(&path, keyed(&new_key)).unwrap_err();
    assert!(matches!(e, keel::Error::WrongKey { .. }), "{e:?}");
    let db = Database::open_for::<Post>(&path, keyed(&newest_key)).unwrap();
    assert_eq!(db.fetch::<Post>().count().unwrap(), 13);
    db.close().wait().unwrap();
}
