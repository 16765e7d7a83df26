//! Usable before durable: an open whose WAL was left by a previous run is readable
//! (reads, live queries) while the open barrier sync is still blocked, writes are
//! queued and commit only after the barrier, and every way the barrier can end —
//! released, failing with EIO, outlasting a close — keeps the data intact.
//!
//! The barrier is held by a latch inside a `Custom` open-barrier policy, so "still
//! running" is a fact of the test, not a guess about timing.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use keel::prelude::*;
use keel::storage::{CheckpointMode, Milestone, OpenProgress, SyncReason};
use keel::{Schema, Update};
use keel_example_blog::blog::Post;

/// A latch the open barrier waits on, and what the barrier did.
#[derive(Default)]
struct Latch {
    open: Mutex<bool>,
    cv: Condvar,
    /// The barrier hook was entered (the sync is "running").
    entered: AtomicBool,
    /// The barrier's sync returned.
    synced: AtomicBool,
}

impl Latch {
    fn release(&self) {
        *self.open.lock().unwrap() = true;
        self.cv.notify_all();
    }

    fn wait_open(&self) {
        let mut g = self.open.lock().unwrap();
        while !*g {
            g = self.cv.wait(g).unwrap();
        }
    }

    /// An open-barrier policy held by this latch; `fail` makes the sync fail with EIO.
    fn policy(self: &Arc<Self>, fail: bool) -> SyncPolicy {
        let l = Arc::clone(self);
        SyncPolicy::custom(move |ctx| {
            assert_eq!(ctx.reason(), SyncReason::OpenBarrier);
            l.entered.store(true, Ordering::SeqCst);
            l.wait_open();
            let r = if fail {
                Err(std::io::Error::from_raw_os_error(libc::EIO))
            } else {
                ctx.full_sync()
            };
            l.synced.store(true, Ordering::SeqCst);
            r
        })
    }
}

fn quiet() -> StoreOptions {
    StoreOptions::default().idle_checkpoint_after(Duration::from_secs(3600))
}

fn post(id: &str, priority: i32) -> Post {
    Post::builder()
        .id(id)
        .title(format!("post {id}"))
        .priority(priority)
        .build()
}

/// A blog database as an app leaves it when it is killed: `n` posts committed, all
/// still in the WAL (the files are copied while the database is open, so no
/// checkpoint ever ran on the copy).
fn app_killed_with_posts(dir: &std::path::Path, n: usize) -> std::path::PathBuf {
    let src = dir.join("running.db");
    let db = Database::open_for::<Post>(&src, quiet()).unwrap();
    db.write(move |t| {
        for i in 0..n {
            t.insert(&post(&format!("p{i}"), i as i32))?;
        }
        Ok(())
    })
    .wait()
    .unwrap();
    let dst = dir.join("app.db");
    for suffix in ["", "-wal"] {
        std::fs::copy(
            format!("{}{suffix}", src.display()),
            format!("{}{suffix}", dst.display()),
        )
        .unwrap();
    }
    db.close().wait().unwrap();
    assert!(
        std::fs::metadata(format!("{}-wal", dst.display()))
            .unwrap()
            .len()
            > 0
    );
    dst
}

fn ids(posts: &[Arc<Post>]) -> Vec<String> {
    let mut v: Vec<String> = posts.iter().map(|p| p.id.clone()).collect();
    v.sort();
    v
}

#[test]
fn reads_and_live_queries_work_while_the_barrier_is_blocked_and_writes_wait_for_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = app_killed_with_posts(dir.path(), 3);
    let latch = Arc::new(Latch::default());
    let events: Arc<Mutex<Vec<OpenProgress>>> = Arc::default();
    let ev = Arc::clone(&events);
    let opts = quiet()
        .open_barrier_sync(latch.policy(false))
        .on_progress(move |p| ev.lock().unwrap().push(p));

    // open_async resolves while the barrier is still blocked on the latch.
    let db = futures::executor::block_on(Database::open_async_for::<Post>(&path, opts)).unwrap();
    // The barrier thread started with the open; it is blocked (or about to be).
    assert!(
        !latch.synced.load(Ordering::SeqCst),
        "the barrier is still blocked"
    );
    assert!(!db.is_durable());

    // Reads: a row by key, a query.
    let p1 = db.get::<Post>(&"p1".to_string()).unwrap().unwrap();
    assert_eq!(p1.title.as_deref(), Some("post p1"));
    assert_eq!(db.fetch::<Post>().count().unwrap(), 3);

    // A live query: its first result arrives now.
    let updates: Arc<Mutex<Vec<Update<Post>>>> = Arc::default();
    let u2 = Arc::clone(&updates);
    let _sub = db
        .fetch::<Post>()
        .filter(Post::priority().ge(1))
        .subscribe(move |u| u2.lock().unwrap().push(u))
        .unwrap();
    assert_eq!(
        ids(&updates.lock().unwrap()[0].objects),
        ["p1", "p2"],
        "live-query result during the barrier"
    );

    // The readable milestone was announced; durable not yet.
    {
        let ev = events.lock().unwrap();
        let ms: Vec<_> = ev.iter().filter_map(|p| p.milestone).collect();
        assert_eq!(ms, [Milestone::Readable]);
        assert!(!ev.iter().any(|p| p.done));
    }

    // A write submitted now is accepted and queued; its closure must not run (let
    // alone commit) before the barrier's sync returned.
    let l2 = Arc::clone(&latch);
    let ran_after_barrier = Arc::new(Mutex::new(None));
    let r2 = Arc::clone(&ran_after_barrier);
    let write = db.write(move |t| {
        *r2.lock().unwrap() = Some(l2.synced.load(Ordering::SeqCst));
        t.insert(&post("p9", 9)).map(|_| ())
    });
    let resolved = Arc::new(AtomicBool::new(false));
    let res2 = Arc::clone(&resolved);
    let waiter = std::thread::spawn(move || {
        let r = write.wait();
        res2.store(true, Ordering::SeqCst);
        r
    });
    // Still blocked: however long we look, the write has not resolved, nothing of
    // it is visible, and the live query has not moved.
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !resolved.load(Ordering::SeqCst),
        "a write resolved before the barrier"
    );
    assert!(ran_after_barrier.lock().unwrap().is_none());
    assert!(db.get::<Post>(&"p9".to_string()).unwrap().is_none());
    assert_eq!(updates.lock().unwrap().len(), 1);
    // Checkpoints wait for the barrier too (bounded): `busy`, nothing copied.
    let o = db.store().checkpoint(CheckpointMode::Passive).unwrap();
    assert!(o.busy, "{o:?}");

    // Release the barrier: the write commits after it and resolves.
    assert!(
        latch.entered.load(Ordering::SeqCst),
        "the barrier sync is running"
    );
    latch.release();
    waiter.join().unwrap().unwrap();
    assert_eq!(*ran_after_barrier.lock().unwrap(), Some(true));
    futures::executor::block_on(db.durable()).unwrap();
    assert!(db.is_durable());
    assert!(db.get::<Post>(&"p9".to_string()).unwrap().is_some());
    // The live query saw the commit (delivered before the write's future resolved).
    assert_eq!(
        ids(&updates.lock().unwrap().last().unwrap().objects),
        ["p1", "p2", "p9"]
    );

    // Both milestones, in order, with the durable event after the handover.
    let ev = events.lock().unwrap();
    let ms: Vec<_> = ev.iter().filter_map(|p| p.milestone).collect();
    assert_eq!(ms, [Milestone::Readable, Milestone::Durable]);
    let last = ev.last().unwrap();
    assert!(last.done && last.fraction == 1.0);
    let report = db.store().open_report();
    let durable = report.durable_after.unwrap();
    assert!(
        durable > report.readable_after + Duration::from_millis(300),
        "{report}"
    );
    assert!(report.to_string().contains("readable at"), "{report}");
    println!("{report}");
    db.close().wait().unwrap();
}

#[test]
fn a_failed_barrier_fails_the_queued_writes_typed_and_leaves_the_data_readable() {
    let dir = tempfile::tempdir().unwrap();
    let path = app_killed_with_posts(dir.path(), 4);
    let latch = Arc::new(Latch::default());
    let opts = quiet().open_barrier_sync(latch.policy(true));
    let db = futures::executor::block_on(Database::open_async_for::<Post>(&path, opts)).unwrap();
    let queued = db.write(|t| t.insert(&post("lost", 1)).map(|_| ()));
    let durable = db.durable();
    latch.release();

    let is_barrier = |e: &keel::Error| {
        matches!(
            e,
            keel::Error::Storage(keel::storage::Error::SyncFailed {
                reason: SyncReason::OpenBarrier,
                ..
            })
        )
    };
    let e = queued.wait().unwrap_err();
    assert!(is_barrier(&e), "{e:?}");
    let e = futures::executor::block_on(durable).unwrap_err();
    assert!(is_barrier(&e), "{e:?}");
    assert!(!db.is_durable());
    // Still readable, nothing lost, and later writes fail the same typed way.
    assert_eq!(db.fetch::<Post>().count().unwrap(), 4);
    let e = db
        .write(|t| t.insert(&post("later", 1)).map(|_| ()))
        .wait()
        .unwrap_err();
    assert!(is_barrier(&e), "{e:?}");
    let e = db.store().on_background().unwrap_err();
    assert!(
        matches!(e, keel::storage::Error::SyncFailed { .. }),
        "{e:?}"
    );
    db.close().wait().unwrap();
    // Nothing was checkpointed after the failed barrier: the WAL is as it was.
    assert!(
        std::fs::metadata(format!("{}-wal", path.display()))
            .unwrap()
            .len()
            > 0
    );

    // The blocking open reports the same failure and keeps nothing open…
    let latch = Arc::new(Latch::default());
    latch.release();
    let e = Database::open_for::<Post>(&path, quiet().open_barrier_sync(latch.policy(true)))
        .unwrap_err();
    assert!(is_barrier(&e), "{e:?}");
    // …and the next launch with a working disk finds every post, intact.
    let db = Database::open_for::<Post>(&path, quiet()).unwrap();
    let all = db.fetch::<Post>().all().unwrap();
    assert_eq!(all.len(), 4);
    assert!(db.get::<Post>(&"lost".to_string()).unwrap().is_none());
    let ok: String = db
        .store()
        .read(|c| {
            c.query_row("PRAGMA integrity_check", [], |r| r.get(0))
                .map_err(keel::storage::Error::from)
        })
        .unwrap();
    assert_eq!(ok, "ok");
    db.close().wait().unwrap();
}

#[test]
fn close_during_the_barrier_waits_bounded_then_fails_the_queue_typed() {
    let dir = tempfile::tempdir().unwrap();
    let path = app_killed_with_posts(dir.path(), 2);
    let latch = Arc::new(Latch::default());
    let mut opts = quiet().open_barrier_sync(latch.policy(false));
    opts.truncate_timeout = Duration::from_millis(100);
    let db = futures::executor::block_on(Database::open_async_for::<Post>(&path, opts)).unwrap();
    let queued = db.write(|t| t.insert(&post("queued", 1)).map(|_| ()));

    // on_background: bounded wait, then a `busy` outcome (the WAL is untouched).
    let o = db.store().on_background().unwrap();
    assert!(o.busy && o.wal_bytes_after > 0, "{o:?}");

    let e = db.close().wait().unwrap_err();
    assert!(
        matches!(
            e,
            keel::Error::Storage(keel::storage::Error::BarrierPending { .. })
        ),
        "{e:?}"
    );
    let e = queued.wait().unwrap_err();
    assert!(
        matches!(
            e,
            keel::Error::Storage(keel::storage::Error::BarrierPending { .. })
        ),
        "{e:?}"
    );
    latch.release();

    // Nothing was written on top of the unsynced WAL; the next open finds the posts.
    let db = Database::open_for::<Post>(&path, quiet()).unwrap();
    assert_eq!(db.fetch::<Post>().count().unwrap(), 2);
    assert!(db.get::<Post>(&"queued".to_string()).unwrap().is_none());
    db.close().wait().unwrap();
}

const V1: &str = "table Note { id: long (primary); body: string; } root_type Note;";
const V2: &str = "table Note { id: long (primary); body: string; tag: string (indexed); }
table Tag (entity) { name: string (primary); } root_type Note;";

/// The schema step before durable: a new collection and a new index. Reads of
/// existing data work at once; the new collection reads as empty; the DDL commits
/// after the barrier, and then the new collection takes writes.
#[test]
fn a_schema_change_commits_after_the_barrier_and_reads_work_before() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("v1.db");
    let v1 = Schema::parse(V1, "v1.fbs").unwrap();
    let db = Database::open(&src, v1.clone(), quiet()).unwrap();
    let reader = v1.reader("Note").unwrap();
    let bytes = reader
        .encode_json(&serde_json::json!({"id": 1, "body": "hello"}))
        .unwrap();
    db.write(move |t| t.insert_bytes("Note", bytes).map(|_| ()))
        .wait()
        .unwrap();
    let path = dir.path().join("v2.db");
    for suffix in ["", "-wal"] {
        std::fs::copy(
            format!("{}{suffix}", src.display()),
            format!("{}{suffix}", path.display()),
        )
        .unwrap();
    }
    db.close().wait().unwrap();

    let latch = Arc::new(Latch::default());
    let v2 = Schema::parse(V2, "v2.fbs").unwrap();
    let opts = quiet().open_barrier_sync(latch.policy(false));
    let db = futures::executor::block_on(Database::open_async(&path, v2.clone(), opts)).unwrap();
    assert!(!db.is_durable());
    // Existing data: at once.
    assert_eq!(db.query("Note").count().unwrap(), 1);
    // The new collection: empty, not an error; a live query on it works too.
    assert_eq!(db.query("Tag").count().unwrap(), 0);
    assert!(db.query("Tag").all().unwrap().is_empty());
    assert!(db.get_bytes("Tag", &["x".into()]).unwrap().is_none());
    let tags = Arc::new(Mutex::new(Vec::new()));
    let t2 = Arc::clone(&tags);
    let _sub = db
        .query("Tag")
        .subscribe(move |u| t2.lock().unwrap().push(u.objects.len()))
        .unwrap();
    // The DDL is staged, not committed: readers do not see the new table yet.
    let visible = |db: &Database| -> i64 {
        db.store()
            .read(|c| {
                c.query_row(
                    "SELECT count(*) FROM sqlite_schema WHERE name = 'Tag'",
                    [],
                    |r| r.get(0),
                )
                .map_err(keel::storage::Error::from)
            })
            .unwrap()
    };
    assert_eq!(visible(&db), 0);
    let tag = v2
        .reader("Tag")
        .unwrap()
        .encode_json(&serde_json::json!({"name": "rust"}))
        .unwrap();
    let w = db.write(move |t| t.insert_bytes("Tag", tag).map(|_| ()));

    latch.release();
    w.wait().unwrap();
    futures::executor::block_on(db.durable()).unwrap();
    assert_eq!(visible(&db), 1);
    assert_eq!(db.query("Tag").count().unwrap(), 1);
    assert_eq!(*tags.lock().unwrap(), [0, 1]);
    db.wait_for_indexes().unwrap();
    assert!(db.index_states().unwrap().iter().all(|(_, s)| s == "ready"));
    db.close().wait().unwrap();
}

#[test]
fn an_empty_wal_gives_both_milestones_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let events: Arc<Mutex<Vec<OpenProgress>>> = Arc::default();
    let ev = Arc::clone(&events);
    let opts = quiet().on_progress(move |p| ev.lock().unwrap().push(p));
    let db = futures::executor::block_on(Database::open_async_for::<Post>(
        dir.path().join("fresh.db"),
        opts,
    ))
    .unwrap();
    // Durable already when the future resolved: nothing to sync.
    assert!(db.is_durable());
    let r = db.store().open_report();
    assert_eq!(r.durable_after, Some(r.readable_after));
    let ms: Vec<_> = events
        .lock()
        .unwrap()
        .iter()
        .filter_map(|p| p.milestone)
        .collect();
    assert_eq!(ms, [Milestone::Readable, Milestone::Durable]);
    db.close().wait().unwrap();
}

/// Copies `src` and its WAL to `dst` while `src` is still open (as a kill leaves
/// them: no checkpoint ran on the copy).
fn copy_as_killed(src: &std::path::Path, dst: &std::path::Path) {
    for suffix in ["", "-wal"] {
        std::fs::copy(
            format!("{}{suffix}", src.display()),
            format!("{}{suffix}", dst.display()),
        )
        .unwrap();
    }
    assert!(
        std::fs::metadata(format!("{}-wal", dst.display()))
            .unwrap()
            .len()
            > 0
    );
}

/// An open that adds
/// `(unique)` to an existing field builds its column in the schema transaction,
/// which commits only at durable. Until then the column readers see is not
/// there (or not filled): a query must answer from what is committed, by
/// scanning the bodies, not 0 from an index that is not committed.
#[test]
fn a_new_unique_index_before_durable_answers_from_the_committed_bodies() {
    const PLAIN: &str = "table Note { id: long (primary); body: string; } root_type Note;";
    const UNIQUE: &str =
        "table Note { id: long (primary); body: string (unique); } root_type Note;";
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("plain.db");
    let plain = Schema::parse(PLAIN, "plain.fbs").unwrap();
    let db = Database::open(&src, plain.clone(), quiet()).unwrap();
    let bytes = plain
        .reader("Note")
        .unwrap()
        .encode_json(&serde_json::json!({"id": 1, "body": "hello"}))
        .unwrap();
    db.write(move |t| t.insert_bytes("Note", bytes).map(|_| ()))
        .wait()
        .unwrap();
    let path = dir.path().join("unique.db");
    copy_as_killed(&src, &path);
    db.close().wait().unwrap();

    let latch = Arc::new(Latch::default());
    let unique = Schema::parse(UNIQUE, "unique.fbs").unwrap();
    let opts = quiet().open_barrier_sync(latch.policy(false));
    let db = futures::executor::block_on(Database::open_async(&path, unique, opts)).unwrap();
    assert!(!db.is_durable());
    let hello = || {
        db.query("Note")
            .filter(Expr::eq(FieldPath::field(1, "body"), "hello"))
            .count()
            .unwrap()
    };
    assert_eq!(hello(), 1, "during the barrier");
    let in_snapshot = db
        .snapshot(|s| {
            s.query("Note")
                .filter(Expr::eq(FieldPath::field(1, "body"), "hello"))
                .count()
        })
        .unwrap();
    assert_eq!(in_snapshot, 1, "a snapshot during the barrier");
    latch.release();
    futures::executor::block_on(db.durable()).unwrap();
    assert_eq!(hello(), 1, "after durable");
    db.wait_for_indexes().unwrap();
    assert_eq!(hello(), 1, "with the index ready");
    assert!(db.index_states().unwrap().iter().all(|(_, s)| s == "ready"));
    db.close().wait().unwrap();
}

/// The same for the format 1 → 2 upgrade: the upgrade drops the
/// expression indexes and builds plain columns in the schema transaction, so
/// until durable readers see the format-1 file, and queries must scan it.
#[test]
fn a_format_upgrade_before_durable_answers_from_the_committed_bodies() {
    const FBS: &str = "namespace fx;
enum Color: byte { Red, Green, Blue }
table Orb { name: string (unique); }
table Axe { w: int; }
union Gear { Orb, Axe }
table Item { id: string (primary); n: int (indexed); tag: string (unique); color: Color = Green (indexed); gear: Gear; note: string; }
table Log (entity) { at: long (indexed); msg: string; }
root_type Item;";
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("format1.keel");
    std::fs::copy(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/format1.keel"),
        &src,
    )
    .unwrap();
    // A previous run's last commit, still in the WAL (a stock write to a table
    // without a `keel_field` index: stock SQLite cannot write format 1's others).
    let c = keel::storage::rusqlite::Connection::open(&src).unwrap();
    c.execute_batch(
        "PRAGMA journal_mode = WAL; PRAGMA wal_autocheckpoint = 0; INSERT INTO keel_meta(key, value) VALUES ('killed_run', 1);",
    )
    .unwrap();
    let path = dir.path().join("app.keel");
    copy_as_killed(&src, &path);
    drop(c);

    let latch = Arc::new(Latch::default());
    let schema = Schema::parse(FBS, "fx.fbs").unwrap();
    let opts = quiet().open_barrier_sync(latch.policy(false));
    let db = futures::executor::block_on(Database::open_async(&path, schema, opts)).unwrap();
    assert!(!db.is_durable());
    let count = |e: Expr| db.query("fx.Item").filter(e).count().unwrap();
    let (tag, n) = (FieldPath::field(2, "tag"), FieldPath::field(1, "n"));
    let before = (
        count(Expr::eq(tag.clone(), "t7")),
        count(Expr::eq(n.clone(), 3)),
    );
    assert_eq!(before.0, 1, "tag == \"t7\" during the barrier");
    assert!(before.1 > 0, "n == 3 during the barrier");
    latch.release();
    futures::executor::block_on(db.durable()).unwrap();
    db.wait_for_indexes().unwrap();
    assert_eq!((count(Expr::eq(tag, "t7")), count(Expr::eq(n, 3))), before);
    db.close().wait().unwrap();
}
