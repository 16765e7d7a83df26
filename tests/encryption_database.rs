//! Encryption through the object layer: `Database::open*` passes the storage
//! options through unchanged, so an encrypted database holds objects, their
//! indexed fields and the dictionary with no plaintext in any file, reopens with
//! its key, and refuses a wrong key with the storage kernel's typed error.

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
        Err(keel::Error::Storage(keel::storage::Error::WrongKey { .. })) => {}
        Err(e) => panic!("expected WrongKey, got {e:?}"),
        Ok(_) => panic!("a wrong key opened the database"),
    }
}
