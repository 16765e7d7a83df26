//! Subscriptions keep their promises: subscribing never waits for the
//! writer (and still misses nothing), and a cancelled subscription or a removed
//! change hook leaves no per-update cost.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use keel::prelude::*;
use keel::storage::WriteFuture;
use keel::{ObjectEvent, Update};
use keel_example_blog::blog::Post;

fn post(id: &str, priority: i32) -> Post {
    Post::builder().id(id).priority(priority).build()
}

/// A write that holds the writer until `go` is sent, after inserting `held`.
fn hold_writer(db: &Database, held: Post) -> (mpsc::Sender<()>, WriteFuture<keel::Result<()>>) {
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (in_tx, in_rx) = mpsc::channel::<()>();
    let fut = db.write(move |t| {
        t.insert(&held)?;
        in_tx.send(()).unwrap();
        go_rx.recv().unwrap();
        Ok(())
    });
    in_rx.recv().unwrap();
    (go_tx, fut)
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_first_subscription_does_not_wait_for_a_long_write_and_misses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open_for::<Post>(dir.path().join("s.db"), StoreOptions::default()).unwrap();
    db.write(|t| t.insert(&post("a", 1)).map(|_| ()))
        .wait()
        .unwrap();
    // A long write holds the writer (its closure started before any subscription,
    // so it does not record its changes).
    let (go, held) = hold_writer(&db, post("b", 2));

    // The first subscriptions of the database (a query and an object) return at
    // once with the committed state, while the writer stays busy. They run on
    // another thread so that a subscribe waiting for the writer shows up as a
    // timeout here instead of a hang.
    let seen: Arc<Mutex<Vec<Vec<String>>>> = Arc::default();
    let events: Arc<Mutex<Vec<ObjectEvent>>> = Arc::default();
    let (s2, e2, db2) = (Arc::clone(&seen), Arc::clone(&events), db.clone());
    let (sub_tx, sub_rx) = mpsc::channel();
    std::thread::spawn(move || {
        let q = db2
            .fetch::<Post>()
            .order_by(Post::id().asc())
            .subscribe(move |u: Update<Post>| {
                s2.lock()
                    .unwrap()
                    .push(u.objects.iter().map(|p| p.id.clone()).collect())
            })
            .unwrap();
        let o = db2
            .subscribe_object("blog.Post", &["a".into()], None, move |e| {
                e2.lock().unwrap().push(e)
            })
            .unwrap();
        sub_tx.send((q, o)).unwrap();
    });
    let subs = sub_rx.recv_timeout(Duration::from_secs(5));
    let still_holding = go.send(()).is_ok();
    let (q, o) = subs.expect("subscribing waited for the writer");
    assert!(still_holding);
    assert_eq!(seen.lock().unwrap()[0], vec!["a".to_string()]);

    // The held write commits after the first result was read: the subscription
    // still gets it.
    held.wait().unwrap();
    wait_until("the held write's delivery", || {
        seen.lock().unwrap().last() == Some(&vec!["a".to_string(), "b".to_string()])
    });
    // And the next writes are delivered as usual.
    db.write(|t| t.update(&post("a", 9)).map(|_| ()))
        .wait()
        .unwrap();
    assert!(events
        .lock()
        .unwrap()
        .iter()
        .any(|e| matches!(e, ObjectEvent::Updated(_))));
    drop((q, o));
    db.close().wait().unwrap();
}

/// Statements the writer thread starts, counted through the storage kernel's
/// statement trace.
fn counting_db(path: &std::path::Path) -> (Database, Arc<AtomicUsize>) {
    let n = Arc::new(AtomicUsize::new(0));
    let n2 = Arc::clone(&n);
    let o = StoreOptions {
        statement_trace: Some(Arc::new(move |_sql: &str| {
            n2.fetch_add(1, Ordering::SeqCst);
        })),
        ..StoreOptions::default()
    };
    (Database::open_for::<Post>(path, o).unwrap(), n)
}

/// Statements executed by `k` writes that each insert a post and delete it again
/// (a recorded delete reads the old object first: one more statement).
fn cost_of_updates(db: &Database, n: &AtomicUsize, k: i32) -> usize {
    let before = n.load(Ordering::SeqCst);
    for i in 0..k {
        db.write(move |t| {
            let id = format!("x{i}");
            t.insert(&post(&id, i))?;
            t.delete::<Post>(&id)?;
            Ok(())
        })
        .wait()
        .unwrap();
    }
    n.load(Ordering::SeqCst) - before
}

#[test]
fn a_cancelled_subscription_leaves_no_per_update_cost() {
    let dir = tempfile::tempdir().unwrap();
    let (db, n) = counting_db(&dir.path().join("cost.db"));
    // A first batch pays one-time statements (the first commits after open): not
    // part of the per-update cost.
    cost_of_updates(&db, &n, 10);
    let baseline = cost_of_updates(&db, &n, 10);

    let sub = db.fetch::<Post>().subscribe(|_| {}).unwrap();
    let live = cost_of_updates(&db, &n, 10);
    assert!(
        live > baseline,
        "a live subscription records changes ({live} vs {baseline} statements)"
    );
    sub.cancel();
    let after = cost_of_updates(&db, &n, 10);
    assert_eq!(
        after, baseline,
        "statements per 10 updates after the cancel"
    );

    // The same for a change hook once removed.
    let hook = db.on_commit_changes(|_| {});
    assert!(cost_of_updates(&db, &n, 10) > baseline);
    hook.remove();
    assert_eq!(cost_of_updates(&db, &n, 10), baseline);
    db.close().wait().unwrap();
}

/// A change hook may remove itself from inside its own callback (a one-shot
/// hook): the hook list is copied before the callbacks run, so the removal
/// takes its lock freely, and later commits do not call the hook.
#[test]
fn a_change_hook_removes_itself_from_its_own_callback() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open_for::<Post>(dir.path().join("h.db"), StoreOptions::default()).unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let slot: Arc<Mutex<Option<keel::ChangeHook>>> = Arc::default();
    let (c, s) = (Arc::clone(&calls), Arc::clone(&slot));
    let hook = db.on_commit_changes(move |_| {
        c.fetch_add(1, Ordering::SeqCst);
        if let Some(me) = s.lock().unwrap().take() {
            me.remove();
        }
    });
    *slot.lock().unwrap() = Some(hook);
    // The writes run on another thread so a deadlock fails the test instead
    // of hanging it.
    let (done_tx, done_rx) = mpsc::channel();
    let db2 = db.clone();
    std::thread::spawn(move || {
        for i in 0..3 {
            let p = post(&format!("p{i}"), i);
            db2.write(move |t| t.insert(&p).map(|_| ())).wait().unwrap();
        }
        done_tx.send(()).unwrap();
    });
    done_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("three writes finish after the hook removed itself");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "called for the first commit only"
    );
    db.close().wait().unwrap();
}
