//! `suspend` / `resume` / `on_background(and_suspend)` through the exported API:
//! async calls wait for resume, synchronous reads fail with `Suspended` instead of
//! blocking the calling thread, subscriptions deliver again after resume.

use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use futures::executor::block_on;
use keel_ffi::{
    encode_json, open_blocking, CallbackError, KeelError, OpenOptions, QueryListener, QueryUpdate,
    SyncPolicy, Value, WriteOp,
};

const FBS: &str = "namespace demo;
table Post { id: string (primary); title: string; priority: int = 1 (indexed); }
root_type Post;";

fn insert(id: &str) -> Vec<WriteOp> {
    let bytes = encode_json(
        FBS.into(),
        "demo.Post".into(),
        format!(r#"{{"id": "{id}", "priority": 3}}"#),
    )
    .unwrap();
    vec![WriteOp::Insert {
        collection: "demo.Post".into(),
        bytes,
    }]
}

struct Updates(Arc<Mutex<Vec<QueryUpdate>>>);
impl QueryListener for Updates {
    fn on_update(&self, u: QueryUpdate) -> Result<(), CallbackError> {
        self.0.lock().unwrap().push(u);
        Ok(())
    }
}

fn open(dir: &tempfile::TempDir) -> Arc<keel_ffi::Database> {
    let opts = OpenOptions {
        commit_sync: Some(SyncPolicy::Off),
        ..OpenOptions::default()
    };
    let path = dir.path().join("s.db").display().to_string();
    open_blocking(path, FBS.into(), opts, None).unwrap()
}

#[test]
fn async_calls_wait_for_resume_and_sync_reads_fail_fast() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir);
    block_on(db.write(insert("a"))).unwrap();
    let updates = Arc::new(Mutex::new(Vec::new()));
    let _sub = db
        .query("Post".into())
        .subscribe(Box::new(Updates(Arc::clone(&updates))))
        .unwrap();

    let r = block_on(db.suspend(false)).unwrap();
    assert!(r.newly_suspended);
    assert!(db.is_suspended());
    // Synchronous reads never block the calling thread while suspended.
    assert!(matches!(
        db.count("Post".into()),
        Err(KeelError::Suspended { .. })
    ));
    assert!(matches!(
        db.get("Post".into(), vec![Value::Text { v: "a".into() }]),
        Err(KeelError::Suspended { .. })
    ));
    // Async ones wait for resume.
    let (tx, rx) = mpsc::channel();
    let db2 = Arc::clone(&db);
    let t = std::thread::spawn(move || {
        tx.send(block_on(db2.write(insert("b"))).map(|_| ()))
            .unwrap();
        tx.send(block_on(db2.count_async("Post".into())).map(|_| ()))
            .unwrap();
    });
    assert!(rx.recv_timeout(Duration::from_millis(150)).is_err());
    let rr = block_on(db.resume()).unwrap();
    assert!(rr.was_suspended && !rr.external_changes);
    rx.recv().unwrap().unwrap();
    rx.recv().unwrap().unwrap();
    t.join().unwrap();
    assert_eq!(db.count("Post".into()).unwrap(), 2);
    // The subscription kept delivering: the first result, then "b".
    let u = updates.lock().unwrap();
    assert_eq!(u.last().unwrap().objects.len(), 2);
    drop(u);
    block_on(db.close()).unwrap();
}

#[test]
fn fail_fast_and_on_background_with_suspend() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir);
    block_on(db.write(insert("a"))).unwrap();
    block_on(db.suspend(true)).unwrap();
    assert!(matches!(
        block_on(db.write(insert("b"))),
        Err(KeelError::Suspended { .. })
    ));
    assert!(matches!(
        block_on(db.count_async("Post".into())),
        Err(KeelError::Suspended { .. })
    ));
    block_on(db.resume()).unwrap();

    // One call when going to the background: empty the WAL, then let go.
    let ck = block_on(db.on_background(true)).unwrap();
    assert!(!ck.busy);
    assert_eq!(ck.wal_bytes_after, 0);
    assert!(db.is_suspended());
    block_on(db.resume()).unwrap();
    block_on(db.write(insert("c"))).unwrap();
    assert_eq!(db.count("Post".into()).unwrap(), 2);
    // Without it, on_background only checkpoints.
    block_on(db.on_background(false)).unwrap();
    assert!(!db.is_suspended());
    block_on(db.close()).unwrap();
}
