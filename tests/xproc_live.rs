//! Two real processes on one file (`StoreOptions::share_changes`): process B (this
//! test) holds a live query, an object subscription and a dictionary
//! subscription; process A (this test binary run again, as `writer_process`)
//! commits. B's subscriptions must update with the right row-level diffs, see
//! nothing when nothing they show changed, and get B's own writes exactly once.

use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use keel::prelude::*;
use keel::{DictValue, ObjectUpdate, Update};
use keel_example_blog::blog::Post;

mod xproc;
use xproc::Writer;

const WAIT: Duration = Duration::from_secs(30);

fn shared() -> StoreOptions {
    StoreOptions::default().share_changes(true)
}

/// Process A: opens the database named by `KEEL_XPROC_WRITER_DB` and runs one
/// command per stdin line. Without the variable (a normal test run) it does nothing.
#[test]
fn writer_process() {
    let Some((path, _)) = xproc::writer_role() else {
        return;
    };
    let db = Database::open_for::<Post>(&path, shared()).unwrap();
    xproc::serve(|w| match *w {
        ["insert", id, prio] => {
            let p = Post::builder()
                .id(id)
                .priority(prio.parse().unwrap())
                .build();
            db.write(move |t| t.insert(&p).map(|_| ())).wait()
        }
        ["upsert", id, prio, title] => {
            let p = Post::builder()
                .id(id)
                .priority(prio.parse().unwrap())
                .title(title)
                .build();
            db.write(move |t| t.upsert(&p).map(|_| ())).wait()
        }
        ["delete", id] => {
            let id = id.to_string();
            db.write(move |t| t.delete::<Post>(&id).map(|_| ())).wait()
        }
        ["dict", key, value] => {
            let (k, v) = (key.to_string(), value.to_string());
            db.write(move |t| t.dictionary().set(&k, v.as_str())).wait()
        }
        ["bulk", prefix, n, prio] => {
            let (prefix, n, prio) = (
                prefix.to_string(),
                n.parse::<usize>().unwrap(),
                prio.parse::<i32>().unwrap(),
            );
            db.write(move |t| {
                for i in 0..n {
                    t.insert(
                        &Post::builder()
                            .id(format!("{prefix}{i:05}"))
                            .priority(prio)
                            .build(),
                    )?;
                }
                Ok(())
            })
            .wait()
        }
        ["spam", id, n] => {
            let mut r = Ok(());
            for _ in 0..n.parse::<i32>().unwrap() {
                r = r.and(bump(&db, id, "a"));
            }
            r
        }
        ["dictclear"] => db.write(|t| t.dictionary().remove_all()).wait(),
        ["noop"] => db.write(|_| Ok(())).wait(),
        _ => panic!("unknown command {w:?}"),
    });
    db.close().wait().unwrap();
}

/// Upsert post `id` with `views` one more than stored, in one transaction: the
/// writes of both processes serialize on the file, so `views` numbers the
/// versions in commit order.
fn bump(db: &Database, id: &str, who: &str) -> keel::Result<()> {
    let (id, who) = (id.to_string(), who.to_string());
    db.write(move |t| {
        let views = t.get::<Post>(&id)?.map_or(0, |p| p.views) + 1;
        let p = Post::builder().id(&id).views(views).title(who).build();
        t.upsert(&p).map(|_| ())
    })
    .wait()
}

fn ids(objs: &[std::sync::Arc<Post>]) -> Vec<String> {
    objs.iter().map(|p| p.id.clone()).collect()
}

/// Block until B's feed has applied `n` commits of other processes (each
/// delivered before the count moves).
fn wait_remote(db: &Database, n: u64) {
    wait_feed(db, |s| s.remote_commits >= n);
}

fn wait_feed(db: &Database, done: impl Fn(&keel::FeedStats) -> bool) {
    let start = Instant::now();
    while !done(&db.feed_stats().unwrap()) {
        assert!(
            start.elapsed() < WAIT,
            "B never caught up: {:?}",
            db.feed_stats()
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn a_live_query_in_b_receives_inserts_updates_and_dictionary_sets_from_a() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.db");
    let b = Database::open_for::<Post>(&path, shared()).unwrap();
    b.write(|t| {
        t.insert(&Post::builder().id("p1").priority(10).build())
            .map(|_| ())
    })
    .wait()
    .unwrap();

    let (qtx, qrx) = mpsc::channel();
    let _q = b
        .fetch::<Post>()
        .filter(Post::priority().le(50))
        .order_by(Post::priority().asc())
        .subscribe(move |u: Update<Post>| qtx.send((ids(&u.objects), u.diff)).unwrap())
        .unwrap();
    let (first, _) = qrx.recv().unwrap();
    assert_eq!(first, ["p1"]);

    let p1 = b.get::<Post>(&"p1".to_string()).unwrap().unwrap();
    let (otx, orx) = mpsc::channel();
    let _o = b
        .subscribe(&p1, move |e: ObjectUpdate<Post>| otx.send(e).unwrap())
        .unwrap();

    let dict = b.dictionary();
    let (dtx, drx) = mpsc::channel();
    let _d = dict.subscribe_with("theme", move |v| dtx.send(v).unwrap());
    assert_eq!(drx.recv_timeout(WAIT).unwrap(), None);

    let mut a = Writer::spawn("writer_process", &path, true);

    // A inserts: B's live query gets it at the right position.
    a.run("insert a1 20");
    let (now, diff) = qrx.recv_timeout(WAIT).unwrap();
    assert_eq!(now, ["p1", "a1"]);
    assert_eq!(diff.inserted, vec![1]);
    assert!(diff.removed.is_empty() && diff.updated.is_empty() && diff.moved.is_empty());

    // A updates p1: the object subscription and the query see the new version.
    a.run("upsert p1 5 Hello");
    match orx.recv_timeout(WAIT).unwrap() {
        ObjectUpdate::Updated(p) => {
            assert_eq!((p.priority, p.title.as_deref()), (5, Some("Hello")));
        }
        ObjectUpdate::Deleted => panic!("p1 was updated, not deleted"),
    }
    let (now, diff) = qrx.recv_timeout(WAIT).unwrap();
    assert_eq!(now, ["p1", "a1"]);
    assert_eq!(diff.updated, vec![0]);
    assert!(diff.inserted.is_empty() && diff.removed.is_empty());

    // A sets a dictionary key: B's subscription and cache follow.
    a.run("dict theme dark");
    assert_eq!(
        drx.recv_timeout(WAIT).unwrap(),
        Some(DictValue::String("dark".into()))
    );
    assert_eq!(
        dict.get::<String>("theme").unwrap().as_deref(),
        Some("dark")
    );
    // A cached value that A then changes is not served stale.
    a.run("dict theme light");
    assert_eq!(
        drx.recv_timeout(WAIT).unwrap(),
        Some(DictValue::String("light".into()))
    );
    assert_eq!(
        dict.get::<String>("theme").unwrap().as_deref(),
        Some("light")
    );

    // B follows a1 itself now.
    let a1 = b.get::<Post>(&"a1".to_string()).unwrap().unwrap();
    let (a1tx, a1rx) = mpsc::channel();
    let _a1 = b
        .subscribe(&a1, move |e: ObjectUpdate<Post>| a1tx.send(e).unwrap())
        .unwrap();

    // B's own write: delivered once, by B's own commit.
    b.write(|t| {
        t.insert(&Post::builder().id("b1").priority(30).build())
            .map(|_| ())
    })
    .wait()
    .unwrap();
    let (now, diff) = qrx.try_recv().expect("delivered before the write resolved");
    assert_eq!(now, ["p1", "a1", "b1"]);
    assert_eq!(diff.inserted, vec![2]);

    // Nothing B shows changes: an object outside the filter, an empty write.
    a.run("insert z9 99");
    a.run("noop");
    // A deletes a1: removed from B's result (a row B held, its old bytes unknown).
    a.run("delete a1");
    wait_remote(&b, 6);
    let (now, diff) = qrx.try_recv().expect("the delete was delivered");
    assert_eq!(now, ["p1", "b1"]);
    assert_eq!(diff.removed, vec![1]);
    assert!(diff.inserted.is_empty() && diff.updated.is_empty());
    // The object subscription of the deleted row ends (found by rowid: the bytes
    // that held its key are gone).
    assert!(matches!(a1rx.try_recv(), Ok(ObjectUpdate::Deleted)));
    // Nothing else arrived: not b1 a second time, not z9, not the empty write.
    assert!(qrx.try_recv().is_err());
    assert!(orx.try_recv().is_err());
    let stats = b.feed_stats().unwrap();
    assert_eq!(stats.full_refetches, 0, "{stats:?}");
    assert_eq!(stats.remote_commits, 6, "{stats:?}");

    assert!(drx.try_recv().is_err());

    // A clears the dictionary: B's subscription hears the key is gone.
    a.run("dictclear");
    assert_eq!(drx.recv_timeout(WAIT).unwrap(), None);
    assert_eq!(dict.get::<String>("theme").unwrap(), None);
    a.quit();
    b.close().wait().unwrap();
}

#[test]
fn a_commit_too_large_to_log_row_by_row_reads_every_subscription_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bulk.db");
    let b = Database::open_for::<Post>(&path, shared()).unwrap();
    let (qtx, qrx) = mpsc::channel();
    let _q = b
        .fetch::<Post>()
        .filter(Post::priority().eq(7))
        .order_by(Post::id().asc())
        .limit(3)
        .subscribe(move |u: Update<Post>| qtx.send((ids(&u.objects), u.diff)).unwrap())
        .unwrap();
    assert!(qrx.recv().unwrap().0.is_empty());
    let mut a = Writer::spawn("writer_process", &path, true);
    a.run("bulk x 5000 7"); // more rows than the log takes from one closure
    wait_feed(&b, |s| s.full_refetches >= 1);
    let (now, diff) = qrx.try_recv().expect("delivered");
    assert_eq!(now, ["x00000", "x00001", "x00002"]);
    assert_eq!(diff.inserted, vec![0, 1, 2]);
    assert_eq!(b.feed_stats().unwrap().full_refetches, 1);
    a.quit();
    b.close().wait().unwrap();
}

/// Both processes update the same object as fast as they can, each version
/// numbered in commit order (`views`). B's object subscription must see the
/// numbers only grow — a catch-up never delivers an older version after a newer
/// one, and a local commit's late delivery never undoes a newer remote one (the
/// gate) — and end on what the file holds. B's local deliveries are slowed (a
/// commit hook that sleeps) to widen the window where that could go wrong.
#[test]
fn racing_writers_leave_b_subscriptions_on_the_stored_version() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("race.db");
    let b = Database::open_for::<Post>(&path, shared()).unwrap();
    bump(&b, "p", "b").unwrap();
    let _slow = b.on_commit_changes(|_| std::thread::sleep(Duration::from_millis(1)));
    let seen = Arc::new(Mutex::new(Vec::<u64>::new()));
    let s2 = seen.clone();
    let p = b.get::<Post>(&"p".to_string()).unwrap().unwrap();
    let _o = b
        .subscribe(&p, move |e: ObjectUpdate<Post>| {
            if let ObjectUpdate::Updated(p) = e {
                s2.lock().unwrap().push(p.views);
            }
        })
        .unwrap();
    let last_q = Arc::new(Mutex::new(0u64));
    let l2 = last_q.clone();
    let _q = b
        .fetch::<Post>()
        .subscribe(move |u: Update<Post>| *l2.lock().unwrap() = u.objects[0].views)
        .unwrap();
    let mut a = Writer::spawn("writer_process", &path, true);
    std::thread::scope(|s| {
        s.spawn(|| a.run("spam p 300"));
        for _ in 0..300 {
            bump(&b, "p", "b").unwrap();
        }
    });
    a.quit();
    b.catch_up().unwrap(); // everything A committed is delivered now
    let stored = b.get::<Post>(&"p".to_string()).unwrap().unwrap();
    assert_eq!(stored.views, 601);
    let seen = seen.lock().unwrap();
    assert!(
        seen.windows(2).all(|w| w[0] < w[1]),
        "a version older than one already delivered came back: {seen:?}"
    );
    assert_eq!(seen.last(), Some(&601));
    assert_eq!(*last_q.lock().unwrap(), 601);
    b.close().wait().unwrap();
}

/// Two handles of one file in one process have distinct origins, like two
/// processes. `catch_up` called where it would wait for itself (a subscription
/// callback of a local commit, of a catch-up, a write closure) returns at once.
#[test]
fn catch_up_inside_callbacks_and_closures_does_not_wait_for_itself() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("reentry.db");
    let a = Database::open_for::<Post>(&path, shared()).unwrap();
    let b = Database::open_for::<Post>(&path, shared()).unwrap();
    let (tx, rx) = mpsc::channel();
    let b2 = b.clone();
    let _q = b
        .fetch::<Post>()
        .subscribe(move |u: Update<Post>| {
            b2.catch_up().unwrap();
            tx.send(ids(&u.objects)).unwrap();
        })
        .unwrap();
    assert!(rx.recv().unwrap().is_empty());
    // A local commit of B: its callback calls catch_up on the writer thread.
    b.write(|t| {
        t.insert(&Post::builder().id("b").priority(2).build())
            .map(|_| ())
    })
    .wait()
    .unwrap();
    assert_eq!(rx.recv_timeout(WAIT).unwrap(), ["b"]);
    // A commit of A: B's feed delivers it; the callback calls catch_up again.
    a.write(|t| {
        t.insert(&Post::builder().id("a").priority(1).build())
            .map(|_| ())
    })
    .wait()
    .unwrap();
    let got = rx.recv_timeout(WAIT).unwrap();
    assert_eq!(got.len(), 2, "{got:?}");
    // Inside a write closure.
    let b3 = b.clone();
    b.write(move |_| b3.catch_up()).wait().unwrap();
    a.close().wait().unwrap();
    b.close().wait().unwrap();
}

#[test]
fn without_sharing_nothing_is_logged_or_watched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("solo.db");
    let db = Database::open_for::<Post>(&path, StoreOptions::default()).unwrap();
    db.write(|t| t.insert(&Post::builder().id("x").build()).map(|_| ()))
        .wait()
        .unwrap();
    assert!(db.feed_stats().is_none());
    db.catch_up().unwrap(); // a no-op
    let n: i64 = db
        .store()
        .read(|c| {
            c.query_row(
                "SELECT count(*) FROM sqlite_schema WHERE name = 'keel_changes'",
                [],
                |r| r.get(0),
            )
            .map_err(keel::storage::Error::from)
        })
        .unwrap();
    assert_eq!(n, 0);
    assert!(!dir.path().join("solo.db-keelsig").exists());
    db.close().wait().unwrap();
}
