//! Where the cross-process feed meets other features,
//! with real processes: process B (this test) holds subscriptions, process A (this
//! test binary run again, as `promise_writer`) commits.
//!
//! * Item 2: SQLite reuses the rowid of a deleted row; B must still see the delete
//!   of the old object, and attribute a later delete of that rowid to the new one.
//! * Item 4: a catch-up that failed is retried, and a resume always catches up.
//! * Item 7: without `share_changes` another process's commits still reach B's
//!   live queries (found by a cheap check at B's next read or commit, and at resume).

use std::sync::mpsc;
use std::time::{Duration, Instant};

use keel::prelude::*;
use keel::storage::rusqlite;
use keel::{ObjectEvent, SuspendOptions, Update};
use keel_example_blog::blog::Post;

mod xproc;
use xproc::Writer;

const WAIT: Duration = Duration::from_secs(30);

fn shared() -> StoreOptions {
    StoreOptions::default().share_changes(true)
}

fn post(id: &str, priority: i32) -> Post {
    Post::builder().id(id).priority(priority).build()
}

/// Process A: opens the database named by `KEEL_XPROC_PROMISE_DB` and runs one
/// command per stdin line. Without the variable (a normal test run) it does nothing.
#[test]
fn promise_writer() {
    let Some((path, share)) = xproc::writer_role() else {
        return;
    };
    let db =
        Database::open_for::<Post>(&path, StoreOptions::default().share_changes(share)).unwrap();
    xproc::serve(|w| match *w {
        ["insert", id, prio] => {
            let p = post(id, prio.parse().unwrap());
            db.write(move |t| t.insert(&p).map(|_| ())).wait()
        }
        ["delete", id] => {
            let id = id.to_string();
            db.write(move |t| t.delete::<Post>(&id).map(|_| ())).wait()
        }
        // One write: delete `old`, insert `new` (SQLite gives `new` the rowid
        // `old` had when it was the last row).
        ["delins", old, new] => {
            let (old, new) = (old.to_string(), post(new, 1));
            db.write(move |t| {
                t.delete::<Post>(&old)?;
                t.insert(&new).map(|_| ())
            })
            .wait()
        }
        // "Replace everything from the server": delete_where, then inserts.
        ["replace", prefix, n] => {
            let (prefix, n) = (prefix.to_string(), n.parse::<i32>().unwrap());
            db.write(move |t| {
                t.delete_where::<Post>(Post::priority().ge(i32::MIN))?;
                for i in 0..n {
                    t.insert(&post(&format!("{prefix}{i}"), i))?;
                }
                Ok(())
            })
            .wait()
        }
        _ => panic!("unknown command {w:?}"),
    });
    db.close().wait().unwrap();
}

/// Block until B's feed has applied `n` commits of other processes (each
/// delivered before the count moves).
fn wait_remote(db: &Database, n: u64) {
    let start = Instant::now();
    while db.feed_stats().unwrap().remote_commits < n {
        assert!(
            start.elapsed() < WAIT,
            "B never caught up: {:?}",
            db.feed_stats()
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Subscribe to post `id` in B; the first event (the stored object) is taken.
fn follow(db: &Database, id: &str) -> (impl Drop, mpsc::Receiver<ObjectEvent>) {
    let (tx, rx) = mpsc::channel();
    let sub = db
        .subscribe_object("blog.Post", &[id.into()], None, move |e| {
            let _ = tx.send(e);
        })
        .unwrap();
    assert!(
        matches!(rx.recv_timeout(WAIT).unwrap(), ObjectEvent::Updated(_)),
        "{id} exists"
    );
    (sub, rx)
}

fn ids(u: &Update<Post>) -> Vec<String> {
    u.objects.iter().map(|p| p.id.clone()).collect()
}

/// A live query over every post, by priority then id; the first delivery taken.
fn watch_all(db: &Database) -> (impl Drop, mpsc::Receiver<Vec<String>>) {
    let (tx, rx) = mpsc::channel();
    let sub = db
        .fetch::<Post>()
        .order_by(Post::priority().asc())
        .order_by(Post::id().asc())
        .subscribe(move |u: Update<Post>| {
            let _ = tx.send(ids(&u));
        })
        .unwrap();
    rx.recv_timeout(WAIT).unwrap();
    (sub, rx)
}

/// The last result a live query delivered so far (waits for at least one).
fn latest(rx: &mpsc::Receiver<Vec<String>>) -> Vec<String> {
    let mut last = rx.recv_timeout(WAIT).unwrap();
    while let Ok(v) = rx.try_recv() {
        last = v;
    }
    last
}

#[test]
fn item2_a_delete_whose_rowid_sqlite_reuses_still_reaches_b() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("reuse.db");
    let b = Database::open_for::<Post>(&path, shared()).unwrap();
    b.write(|t| t.insert(&post("x", 1)).map(|_| ()))
        .wait()
        .unwrap();
    let (_sx, ox) = follow(&b, "x");
    let (_q, q) = watch_all(&b);
    let mut a = Writer::spawn("promise_writer", &path, true);

    // One write of A deletes x and inserts y, which takes x's rowid.
    a.run("delins x y");
    wait_remote(&b, 1);
    assert!(
        matches!(ox.try_recv(), Ok(ObjectEvent::Deleted)),
        "B's subscription on x never heard x was deleted"
    );
    assert_eq!(latest(&q), ["y"]);

    // A later delete of that rowid is y's, not x's.
    let (_sy, oy) = follow(&b, "y");
    a.run("delete y");
    wait_remote(&b, 2);
    assert!(
        matches!(oy.try_recv(), Ok(ObjectEvent::Deleted)),
        "the delete of y's rowid was not attributed to y"
    );
    assert_eq!(latest(&q), Vec::<String>::new());

    // Two commits that B catches up together (B was suspended meanwhile): the
    // delete of z, then w taking z's rowid.
    b.write(|t| t.insert(&post("z", 1)).map(|_| ()))
        .wait()
        .unwrap();
    let (_sz, oz) = follow(&b, "z");
    assert_eq!(latest(&q), ["z"]);
    b.suspend().unwrap();
    a.run("delete z");
    a.run("insert w 1");
    b.resume().unwrap();
    wait_remote(&b, 4);
    assert!(
        matches!(oz.try_recv(), Ok(ObjectEvent::Deleted)),
        "z's delete, caught up with w's insert, never reached B"
    );
    assert_eq!(latest(&q), ["w"]);

    // "Replace everything from the server": delete_where, then inserts that take
    // the freed rowids.
    b.write(|t| {
        t.insert(&post("k1", 5))?;
        t.insert(&post("k2", 6)).map(|_| ())
    })
    .wait()
    .unwrap();
    let subs: Vec<_> = ["w", "k1", "k2"].iter().map(|id| follow(&b, id)).collect();
    latest(&q);
    a.run("replace n 3");
    wait_remote(&b, 5);
    for (i, (_, rx)) in subs.iter().enumerate() {
        assert!(
            matches!(rx.try_recv(), Ok(ObjectEvent::Deleted)),
            "replaced object {i} never got Deleted"
        );
    }
    assert_eq!(latest(&q), ["n0", "n1", "n2"]);
    // The new objects are followed as themselves.
    let (_sn, on) = follow(&b, "n1");
    a.run("delete n1");
    wait_remote(&b, 6);
    assert!(matches!(on.try_recv(), Ok(ObjectEvent::Deleted)));
    assert_eq!(latest(&q), ["n0", "n2"]);

    a.quit();
    b.close().wait().unwrap();
}

/// Hold one of `db`'s pooled read connections on another thread until the
/// returned sender is used (or dropped).
fn hold_a_reader(db: &Database) -> (mpsc::Sender<()>, std::thread::JoinHandle<()>) {
    let (held_tx, held_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let db = db.clone();
    let h = std::thread::spawn(move || {
        db.store()
            .read(|_| {
                held_tx.send(()).unwrap();
                let _ = release_rx.recv();
                Ok::<_, keel::storage::Error>(())
            })
            .unwrap();
    });
    held_rx.recv_timeout(WAIT).unwrap();
    (release_tx, h)
}

/// A query's deliveries until one equals `want` (fails after `within`).
fn wait_for(rx: &mpsc::Receiver<Vec<String>>, want: &[&str], within: Duration) {
    let start = Instant::now();
    let mut last = None;
    while start.elapsed() < within {
        match rx.recv_timeout(Duration::from_millis(50)) {
            Ok(v) if v == want => return,
            Ok(v) => last = Some(v),
            Err(_) => {}
        }
    }
    panic!("the live query never showed {want:?}; last delivery {last:?}");
}

#[test]
fn item4_a_failed_catch_up_is_retried_and_a_commit_racing_a_suspend_is_delivered() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("retry.db");
    // One reader that waits briefly: the feed's catch-up fails while it is held.
    let b = Database::open_for::<Post>(
        &path,
        shared().readers(1).reader_wait(Duration::from_millis(100)),
    )
    .unwrap();
    let (_q, q) = watch_all(&b);
    let mut a = Writer::spawn("promise_writer", &path, true);

    // The catch-up of a1 fails (no reader); nothing else commits afterwards.
    let (release, h) = hold_a_reader(&b);
    a.run("insert a1 1");
    std::thread::sleep(Duration::from_millis(600));
    drop(release);
    h.join().unwrap();
    wait_for(&q, &["a1"], Duration::from_secs(10));

    // Again, and B suspends before the retry: the file is unchanged between the
    // suspend and the resume, and the resume still catches up.
    let (release, h) = hold_a_reader(&b);
    a.run("insert a2 2");
    std::thread::sleep(Duration::from_millis(600));
    drop(release);
    h.join().unwrap();
    b.suspend_with(SuspendOptions::default().fail_fast(true))
        .unwrap();
    b.resume().unwrap();
    wait_for(&q, &["a1", "a2"], Duration::from_secs(10));

    a.quit();
    b.close().wait().unwrap();
}

#[test]
fn item4_the_feed_holds_no_lock_while_it_waits_for_a_reader() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gate.db");
    let b = Database::open_for::<Post>(&path, shared().readers(1)).unwrap();
    let (_q, q) = watch_all(&b);
    // A subscription whose callback holds B's first local commit in the gate
    // (between its COMMIT and the end of its delivery) until told.
    let (hold_tx, hold_rx) = mpsc::channel::<()>();
    let (entered_tx, entered_rx) = mpsc::channel::<()>();
    let mut hold = Some((hold_rx, entered_tx));
    let _blocker = b
        .fetch::<Post>()
        .subscribe(move |u: Update<Post>| {
            if ids(&u).iter().any(|i| i == "w1") {
                if let Some((rx, tx)) = hold.take() {
                    tx.send(()).unwrap();
                    let _ = rx.recv();
                }
            }
        })
        .unwrap();
    let mut a = Writer::spawn("promise_writer", &path, true);

    let w1 = b.write(|t| t.insert(&post("w1", 1)).map(|_| ()));
    entered_rx.recv_timeout(WAIT).unwrap();
    // A commits: B's feed waits for w1's delivery to leave the gate.
    a.run("insert a1 2");
    std::thread::sleep(Duration::from_millis(300));
    // Every reader of B is taken; then w1's delivery ends.
    let (release, h) = hold_a_reader(&b);
    drop(hold_tx);
    w1.wait().unwrap();
    std::thread::sleep(Duration::from_millis(100));
    // A write of B: its closure must not wait for the feed while it holds the
    // write lock.
    let w2 = b.write(|t| t.insert(&post("w2", 3)).map(|_| ()));
    std::thread::sleep(Duration::from_millis(100));
    let b2 = b.clone();
    let suspending = std::thread::spawn(move || {
        b2.suspend_with(SuspendOptions::default().timeout(Duration::from_secs(3)))
    });
    std::thread::sleep(Duration::from_millis(100));
    drop(release);
    h.join().unwrap();
    suspending
        .join()
        .unwrap()
        .expect("suspend gave up: a keel thread still held a connection");
    w2.wait().unwrap();
    // B is suspended and holds no lock: A writes at once.
    a.run("insert a2 4");
    b.resume().unwrap();
    wait_for(&q, &["w1", "a1", "w2", "a2"], Duration::from_secs(10));
    a.quit();
    b.close().wait().unwrap();
}

#[test]
fn item7_without_sharing_another_process_commits_still_reach_live_queries() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("solo.db");
    let b = Database::open_for::<Post>(&path, StoreOptions::default()).unwrap();
    b.write(|t| t.insert(&post("b0", 0)).map(|_| ()))
        .wait()
        .unwrap();
    let (_q, q) = watch_all(&b);
    let mut a = Writer::spawn("promise_writer", &path, false);

    // A commits 5 objects; B's next read notices.
    for i in 1..=5 {
        a.run(&format!("insert a{i} {i}"));
    }
    assert_eq!(b.fetch::<Post>().count().unwrap(), 6);
    wait_for(
        &q,
        &["b0", "a1", "a2", "a3", "a4", "a5"],
        Duration::from_secs(10),
    );

    // A commits; B's next commit notices.
    a.run("insert a6 6");
    b.write(|t| t.insert(&post("b7", 7)).map(|_| ()))
        .wait()
        .unwrap();
    wait_for(
        &q,
        &["b0", "a1", "a2", "a3", "a4", "a5", "a6", "b7"],
        Duration::from_secs(10),
    );

    // A commits right before B suspends; the resume notices.
    a.run("delete a1");
    b.suspend().unwrap();
    b.resume().unwrap();
    wait_for(
        &q,
        &["b0", "a2", "a3", "a4", "a5", "a6", "b7"],
        Duration::from_secs(10),
    );
    a.quit();
    b.close().wait().unwrap();
}

#[test]
fn item2_a_change_log_an_older_keel_created_gains_the_key_column() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old-log.db");
    let db = Database::open_for::<Post>(&path, shared()).unwrap();
    db.close().wait().unwrap();
    let has_ids = |c: &rusqlite::Connection| -> bool {
        c.query_row(
            "SELECT count(*) > 0 FROM pragma_table_info('keel_changes') WHERE name = 'ids'",
            [],
            |r| r.get(0),
        )
        .unwrap()
    };
    {
        // The log as older keel versions created it: no key column.
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch("ALTER TABLE keel_changes DROP COLUMN ids")
            .unwrap();
        assert!(!has_ids(&c));
    }
    let b = Database::open_for::<Post>(&path, shared()).unwrap();
    let a = Database::open_for::<Post>(&path, shared()).unwrap();
    assert!(has_ids(&rusqlite::Connection::open(&path).unwrap()));
    a.write(|t| t.insert(&post("x", 1)).map(|_| ()))
        .wait()
        .unwrap();
    b.catch_up().unwrap();
    let (_sx, ox) = follow(&b, "x");
    a.write(|t| {
        t.delete::<Post>(&"x".to_string())?;
        t.insert(&post("y", 1)).map(|_| ())
    })
    .wait()
    .unwrap();
    b.catch_up().unwrap();
    assert!(matches!(ox.try_recv(), Ok(ObjectEvent::Deleted)));
    a.close().wait().unwrap();
    b.close().wait().unwrap();
}
