//! `suspend` / `resume` / `on_background(and_suspend)` through the exported API:
//! async calls wait for resume, synchronous reads fail with `Suspended` instead of
//! blocking the calling thread, subscriptions deliver again after resume.

use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use futures::executor::block_on;
use keel_ffi::{
    encode_json, open_blocking, CallbackError, DictValue, DictionaryListener, KeelError,
    OpenOptions, QueryListener, QueryUpdate, SyncPolicy, Value, WriteOp,
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
    // The packed read behind the Swift and Kotlin typed `fetch(...).all()` too.
    assert!(matches!(
        db.query("Post".into()).all_packed(),
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

/// Records each dictionary delivery with the name of the thread it ran on.
struct DictEvents(mpsc::Sender<(Option<DictValue>, String)>);
impl DictionaryListener for DictEvents {
    fn on_change(&self, _key: String, value: Option<DictValue>) -> Result<(), CallbackError> {
        let thread = std::thread::current().name().unwrap_or("").to_owned();
        let _ = self.0.send((value, thread));
        Ok(())
    }
}

/// Resumes `db` if not disarmed within a minute, so that a call that blocks until
/// resume fails its test (`fired`) instead of hanging it.
struct Watchdog {
    disarm: mpsc::Sender<()>,
    fired: std::thread::JoinHandle<bool>,
}

impl Watchdog {
    fn arm(db: &Arc<keel_ffi::Database>) -> Watchdog {
        let (disarm, rx) = mpsc::channel::<()>();
        let db = Arc::clone(db);
        let fired = std::thread::spawn(move || {
            if rx.recv_timeout(Duration::from_secs(60)).is_ok() {
                return false;
            }
            // The engine's resume, on this thread: the one under test may be stuck.
            db.inner().resume().unwrap();
            true
        });
        Watchdog { disarm, fired }
    }

    /// True if the watchdog had to resume the database.
    fn fired(self) -> bool {
        let _ = self.disarm.send(());
        self.fired.join().unwrap()
    }
}

/// A database holding `theme = "dark"` on disk, reopened so that its dictionary
/// cache is cold (the first read of the key goes to the file).
fn reopened_with_theme(dir: &tempfile::TempDir) -> Arc<keel_ffi::Database> {
    let db = open(dir);
    db.dictionary()
        .set_string("theme".into(), "dark".into())
        .unwrap();
    block_on(db.close()).unwrap();
    open(dir)
}

#[test]
fn dictionary_subscribe_while_suspended_returns_at_once_and_delivers_after_resume() {
    for fail_fast in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let db = reopened_with_theme(&dir);
        block_on(db.suspend(fail_fast)).unwrap();
        let (tx, rx) = mpsc::channel();
        let dog = Watchdog::arm(&db);
        // On the thread that would call resume: must not wait for it.
        let sub = db
            .dictionary()
            .subscribe("theme".into(), Box::new(DictEvents(tx)));
        assert!(
            !dog.fired(),
            "subscribe waited for resume (fail_fast {fail_fast})"
        );
        assert!(db.is_suspended());
        block_on(db.resume()).unwrap();
        // The first delivery is the stored value, not a false "absent".
        let (v, thread) = rx.recv().unwrap();
        assert_eq!(v, Some(DictValue::Text { v: "dark".into() }));
        assert_eq!(thread, "keel-dict-notify");
        db.dictionary()
            .set_string("theme".into(), "light".into())
            .unwrap();
        let (v, _) = rx.recv().unwrap();
        assert_eq!(v, Some(DictValue::Text { v: "light".into() }));
        sub.cancel();
        block_on(db.close()).unwrap();
    }
}

#[test]
fn dictionary_subscribe_delivers_the_stored_value_first_on_a_keel_thread() {
    let dir = tempfile::tempdir().unwrap();
    let db = reopened_with_theme(&dir);
    let d = db.dictionary();
    let (tx, rx) = mpsc::channel();
    let sub = d.subscribe("theme".into(), Box::new(DictEvents(tx.clone())));
    let (v, thread) = rx.recv().unwrap();
    assert_eq!(v, Some(DictValue::Text { v: "dark".into() }));
    assert_eq!(thread, "keel-dict-notify");
    // A key that exists nowhere: "absent" first.
    let none = d.subscribe("missing".into(), Box::new(DictEvents(tx)));
    assert_eq!(rx.recv().unwrap().0, None);
    d.remove("theme".into()).unwrap();
    assert_eq!(rx.recv().unwrap().0, None);
    sub.cancel();
    none.cancel();
    block_on(db.close()).unwrap();
}

#[test]
fn resume_is_not_queued_behind_async_reads_waiting_for_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir);
    block_on(db.write(insert("a"))).unwrap();
    block_on(db.suspend(false)).unwrap();
    // More waiting async reads than the FFI has threads for its async calls.
    let (tx, rx) = mpsc::channel();
    let readers: Vec<_> = (0..8)
        .map(|_| {
            let (db, tx) = (Arc::clone(&db), tx.clone());
            std::thread::spawn(move || {
                let key = vec![Value::Text { v: "a".into() }];
                tx.send(block_on(db.get_async("Post".into(), key)).map(|o| o.is_some()))
                    .unwrap();
            })
        })
        .collect();
    // Let them reach the threads (none can finish before resume).
    assert!(rx.recv_timeout(Duration::from_millis(200)).is_err());
    let dog = Watchdog::arm(&db);
    let r = block_on(db.resume()).unwrap();
    assert!(
        !dog.fired(),
        "resume waited behind the reads waiting for it"
    );
    assert!(r.was_suspended);
    for t in readers {
        t.join().unwrap();
    }
    for _ in 0..8 {
        assert!(
            rx.recv().unwrap().unwrap(),
            "the object is there after resume"
        );
    }
    block_on(db.close()).unwrap();
}
