//! Update and delete by primary key: with no
//! one recording changes an update is one `UPDATE … WHERE key = ?` and its rowid
//! comes from SQLite's update hook. These pin what the shortcut must keep: the
//! rowid returned is the object's, a missing key is `NotFound`, an unchanged object
//! writes nothing and reports no change, and a trigger changing other rows in the
//! same statement does not leak its rowid into the answer. Each runs with and
//! without a change hook (the recording path reads the old bytes first).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use keel_example_blog::blog::Post;
use keel_query::{Change, ChangeOp, Database, Error, StoreOptions};

fn quiet() -> StoreOptions {
    StoreOptions::default().idle_checkpoint_after(Duration::from_secs(3600))
}

fn post(id: &str, priority: i32) -> Post {
    Post::builder()
        .id(id)
        .title(format!("{id} at {priority}"))
        .priority(priority)
        .build()
}

/// A database, with a change hook collecting every change when `recording`.
fn open(
    dir: &tempfile::TempDir,
    recording: bool,
) -> (
    Database,
    Arc<Mutex<Vec<Change>>>,
    Option<keel_query::ChangeHook>,
) {
    let db = Database::open_for::<Post>(dir.path().join("u.db"), quiet()).unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let hook = recording.then(|| {
        let s = Arc::clone(&seen);
        db.on_commit_changes(move |c| s.lock().unwrap().extend_from_slice(c))
    });
    (db, seen, hook)
}

#[test]
fn an_update_returns_the_rowid_of_the_object_it_changed() {
    for recording in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let (db, _seen, _hook) = open(&dir, recording);
        let ids: Vec<String> = (0..20).map(|i| format!("p{i:02}")).collect();
        let ids2 = ids.clone();
        let inserted: Vec<i64> = db
            .write_blocking(move |t| ids2.iter().map(|id| t.insert(&post(id, 1))).collect())
            .unwrap();
        // Every other one, backwards, in one transaction: each answer is that
        // object's rowid, not the previous statement's.
        let ids2 = ids.clone();
        let updated: Vec<(usize, i64)> = db
            .write_blocking(move |t| {
                (0..ids2.len())
                    .rev()
                    .step_by(2)
                    .map(|i| Ok((i, t.update(&post(&ids2[i], 2))?)))
                    .collect()
            })
            .unwrap();
        assert_eq!(updated.len(), 10);
        for (i, rowid) in updated {
            assert_eq!(rowid, inserted[i], "recording {recording}: {}", ids[i]);
        }
        // Upsert of a stored key updates in place; of a new key, inserts.
        let (kept, new) = db
            .write_blocking(|t| Ok((t.upsert(&post("p07", 3))?, t.upsert(&post("q", 3))?)))
            .unwrap();
        assert_eq!(kept, inserted[7]);
        assert!(!inserted.contains(&new));
        let p = db.get::<Post>(&"p07".into()).unwrap().unwrap();
        assert_eq!((p.priority, p.title.as_deref()), (3, Some("p07 at 3")));
        // The indexed column moved with the bytes.
        let at3 = db
            .fetch::<Post>()
            .filter(Post::priority().eq(3))
            .count()
            .unwrap();
        assert_eq!(at3, 2);
    }
}

#[test]
fn an_update_of_a_missing_key_is_not_found_and_the_transaction_goes_on() {
    for recording in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let (db, seen, _hook) = open(&dir, recording);
        let rowid = db.write_blocking(|t| t.insert(&post("a", 1))).unwrap();
        let r = db
            .write_blocking(|t| {
                let missing = t.update(&post("nope", 1));
                assert!(
                    matches!(missing, Err(Error::NotFound { .. })),
                    "{missing:?}"
                );
                t.update(&post("a", 2))
            })
            .unwrap();
        assert_eq!(r, rowid);
        assert!(db.get::<Post>(&"nope".into()).unwrap().is_none());
        assert_eq!(db.fetch::<Post>().count().unwrap(), 1);
        if recording {
            let ops: Vec<ChangeOp> = seen.lock().unwrap().iter().map(|c| c.op).collect();
            assert_eq!(ops, vec![ChangeOp::Insert, ChangeOp::Update]);
        }
    }
}

#[test]
fn an_update_with_the_stored_bytes_writes_nothing_and_reports_no_change() {
    for recording in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let (db, seen, _hook) = open(&dir, recording);
        let rowid = db.write_blocking(|t| t.insert(&post("a", 1))).unwrap();
        let before = db.store().io_stats().wal.bytes_written;
        let again = db.write_blocking(|t| t.update(&post("a", 1))).unwrap();
        assert_eq!(again, rowid, "recording {recording}");
        assert_eq!(
            db.store().io_stats().wal.bytes_written,
            before,
            "recording {recording}: an unchanged update wrote to the WAL"
        );
        if recording {
            assert_eq!(seen.lock().unwrap().len(), 1, "only the insert");
        }
    }
}

#[test]
fn a_trigger_changing_other_rows_does_not_change_the_rowid_returned() {
    for recording in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let (db, _seen, _hook) = open(&dir, recording);
        let rowids = db
            .write_blocking(|t| Ok((t.insert(&post("a", 1))?, t.insert(&post("b", 1))?)))
            .unwrap();
        // Someone else's trigger on keel's table: each update also inserts a row
        // elsewhere (the update hook then sees two rows change).
        db.store()
            .write_blocking(|t| {
                t.execute_batch(
                    "CREATE TABLE audit(n INTEGER PRIMARY KEY AUTOINCREMENT, at TEXT);
                     INSERT INTO audit(n) VALUES (1000);
                     CREATE TRIGGER audit_post AFTER UPDATE ON \"blog.Post\"
                     BEGIN INSERT INTO audit(at) VALUES ('x'); END;",
                )?;
                Ok::<_, keel_storage::Error>(())
            })
            .unwrap();
        let got = db
            .write_blocking(|t| Ok((t.update(&post("b", 2))?, t.update(&post("a", 2))?)))
            .unwrap();
        assert_eq!(got, (rowids.1, rowids.0), "recording {recording}");
    }
}

#[test]
fn deletes_by_key_in_one_transaction_report_what_existed() {
    for recording in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let (db, seen, _hook) = open(&dir, recording);
        db.write_blocking(|t| {
            for i in 0..10 {
                t.insert(&post(&format!("p{i}"), i))?;
            }
            Ok(())
        })
        .unwrap();
        let found = db
            .write_blocking(|t| {
                let mut v = Vec::new();
                for i in (0..12).chain(0..2) {
                    v.push(t.delete::<Post>(&format!("p{i}"))?);
                }
                Ok(v)
            })
            .unwrap();
        let mut expected = vec![true; 10];
        expected.extend([false; 4]);
        assert_eq!(found, expected, "recording {recording}");
        assert_eq!(db.fetch::<Post>().count().unwrap(), 0);
        if recording {
            let deletes = seen
                .lock()
                .unwrap()
                .iter()
                .filter(|c| c.op == ChangeOp::Delete)
                .count();
            assert_eq!(deletes, 10);
        }
    }
}
