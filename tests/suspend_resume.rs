//! `Database::suspend` / `resume` on the object layer: the handle, its
//! subscriptions and its dictionary stay valid; subscriptions deliver after resume,
//! including what another handle committed while this one was suspended; the
//! dictionary's pending values reach the file before the locks go.

use std::sync::mpsc;
use std::time::Duration;

use keel::prelude::*;
use keel::{DictValue, SuspendOptions, Update};
use keel_example_blog::blog::Post;

fn post(id: &str, priority: i32) -> Post {
    Post::builder().id(id).priority(priority).build()
}

fn insert(db: &Database, p: Post) {
    db.write(move |t| t.insert(&p).map(|_| ())).wait().unwrap();
}

fn ids(u: &Update<Post>) -> Vec<String> {
    u.objects.iter().map(|p| p.id.clone()).collect()
}

/// Store `a` (priority 1) and the dictionary's `theme` = `dark`, and follow every
/// post by priority; returns the live query's deliveries (the first, `[a]`, taken).
fn seed_and_watch(db: &Database) -> (impl Drop, mpsc::Receiver<Update<Post>>) {
    insert(db, post("a", 1));
    let (tx, rx) = mpsc::channel();
    let sub = db
        .fetch::<Post>()
        .order_by(Post::priority().asc())
        .subscribe(move |u| tx.send(u).unwrap())
        .unwrap();
    assert_eq!(ids(&rx.recv().unwrap()), ["a"]);
    db.dictionary().set("theme", "dark").unwrap();
    futures::executor::block_on(db.dictionary().sync()).unwrap();
    (sub, rx)
}

/// What an app extension's process would do while `path`'s other handle is
/// suspended: open another handle, insert `z` (priority 5), set `theme` = `light`.
fn other_handle_writes(path: &std::path::Path, options: StoreOptions) {
    let other = Database::open_for::<Post>(path, options).unwrap();
    insert(&other, post("z", 5));
    other.dictionary().set("theme", "light").unwrap();
    futures::executor::block_on(other.dictionary().sync()).unwrap();
    futures::executor::block_on(other.close()).unwrap();
}

/// Long enough for a delivery that should not come to have come.
const WINDOW: Duration = Duration::from_millis(150);

#[test]
fn subscriptions_deliver_after_resume() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open_for::<Post>(dir.path().join("s.db"), StoreOptions::default()).unwrap();
    insert(&db, post("a", 1));
    let (tx, rx) = mpsc::channel();
    let _sub = db
        .fetch::<Post>()
        .order_by(Post::priority().asc())
        .subscribe(move |u| tx.send(u).unwrap())
        .unwrap();
    assert_eq!(ids(&rx.recv().unwrap()), ["a"]);

    db.suspend().unwrap();
    // A write issued while suspended waits; nothing is delivered meanwhile.
    let queued = db.write(|t| t.insert(&post("b", 2)).map(|_| ()));
    assert!(rx.recv_timeout(WINDOW).is_err());
    let r = db.resume().unwrap();
    assert!(!r.external_changes);
    queued.wait().unwrap();
    let u = rx.recv().unwrap();
    assert_eq!(ids(&u), ["a", "b"]);
    assert_eq!(u.diff.inserted, [1]);
    // And later commits too.
    insert(&db, post("c", 0));
    let u = rx.recv().unwrap();
    assert_eq!(ids(&u), ["c", "a", "b"]);
    assert_eq!(u.diff.inserted, [0]);
    futures::executor::block_on(db.close()).unwrap();
}

#[test]
fn after_resume_subscriptions_catch_up_with_what_another_handle_committed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.db");
    let db = Database::open_for::<Post>(&path, StoreOptions::default()).unwrap();
    let (_sub, rx) = seed_and_watch(&db);
    assert_eq!(
        db.dictionary().get::<String>("theme").unwrap().as_deref(),
        Some("dark")
    );
    db.suspend().unwrap();
    other_handle_writes(&path, StoreOptions::default());

    let r = db.resume().unwrap();
    assert!(r.external_changes);
    assert_eq!(
        db.dictionary().get::<String>("theme").unwrap().as_deref(),
        Some("light"),
        "the dictionary's cache does not answer with the value the other handle replaced"
    );
    let u = rx.recv().unwrap();
    assert_eq!(
        ids(&u),
        ["a", "z"],
        "the other handle's insert is delivered"
    );
    assert_eq!(u.diff.inserted, [1]);
    futures::executor::block_on(db.close()).unwrap();
}

/// With the cross-process change feed on, the catch-up after resume reads the
/// change log: the live query gets the other handle's insert as a diff and the
/// dictionary subscription hears of the other handle's value.
#[test]
fn with_shared_changes_resume_catches_up_through_the_change_log() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.db");
    let shared = || StoreOptions {
        share_changes: true,
        ..StoreOptions::default()
    };
    let db = Database::open_for::<Post>(&path, shared()).unwrap();
    let (_sub, rx) = seed_and_watch(&db);
    let (dtx, drx) = mpsc::channel();
    let _dsub = db
        .dictionary()
        .subscribe_with("theme", move |v| dtx.send(v).unwrap());
    assert_eq!(drx.recv().unwrap(), Some(DictValue::String("dark".into())));
    db.suspend().unwrap();
    other_handle_writes(&path, shared());

    assert!(db.resume().unwrap().external_changes);
    let u = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(
        ids(&u),
        ["a", "z"],
        "the other handle's insert is delivered"
    );
    assert_eq!(u.diff.inserted, [1]);
    assert_eq!(
        drx.recv_timeout(Duration::from_secs(10)).unwrap(),
        Some(DictValue::String("light".into())),
        "the dictionary subscription hears of the other handle's value"
    );
    futures::executor::block_on(db.close()).unwrap();
}

#[test]
fn fail_fast_errors_are_retryable_and_the_dictionary_survives_a_suspend() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d.db");
    let db = Database::open_for::<Post>(&path, StoreOptions::default()).unwrap();
    let dict = db.dictionary();
    dict.set("theme", "dark").unwrap();
    db.suspend_with(SuspendOptions::default().fail_fast(true))
        .unwrap();
    // The pending value was flushed before the locks went: another handle reads it.
    let other = Database::open_for::<Post>(&path, StoreOptions::default()).unwrap();
    assert_eq!(
        other
            .dictionary()
            .get::<String>("theme")
            .unwrap()
            .as_deref(),
        Some("dark")
    );
    futures::executor::block_on(other.close()).unwrap();

    let e = db.fetch::<Post>().count().unwrap_err();
    assert!(e.is_retryable(), "{e:?}");
    let e = db
        .write(|t| t.insert(&post("a", 1)).map(|_| ()))
        .wait()
        .unwrap_err();
    assert!(e.is_retryable(), "{e:?}");
    // The dictionary's cache answers while suspended; a set is kept and flushed
    // after resume (its background flush waits instead of failing).
    assert_eq!(
        dict.get::<String>("theme").unwrap().as_deref(),
        Some("dark")
    );
    dict.set("lang", "fr").unwrap();
    db.resume().unwrap();
    futures::executor::block_on(dict.sync()).unwrap();
    futures::executor::block_on(db.close()).unwrap();
    let again = Database::open_for::<Post>(&path, StoreOptions::default()).unwrap();
    assert_eq!(
        again.dictionary().get::<String>("lang").unwrap().as_deref(),
        Some("fr")
    );
    futures::executor::block_on(again.close()).unwrap();
}

#[test]
fn suspend_inside_a_write_closure_is_a_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open_for::<Post>(dir.path().join("w.db"), StoreOptions::default()).unwrap();
    let db2 = db.clone();
    let r = db
        .write(move |_| Ok(db2.suspend().map(|_| ())))
        .wait()
        .unwrap();
    assert!(matches!(r, Err(keel::Error::Unsupported { .. })), "{r:?}");
    assert!(!db.is_suspended());
    futures::executor::block_on(db.close()).unwrap();
}

#[test]
fn dictionary_subscriptions_made_while_suspended_start_from_the_stored_value() {
    use futures::StreamExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d.db");
    let db = Database::open_for::<Post>(&path, StoreOptions::default()).unwrap();
    db.dictionary().set("theme", "dark").unwrap();
    db.dictionary().set("lang", "fr").unwrap();
    futures::executor::block_on(db.close()).unwrap();
    let text = |s: &str| Some(DictValue::String(s.into()));
    for fail_fast in [false, true] {
        // Reopened: both values are on disk only.
        let db = Database::open_for::<Post>(&path, StoreOptions::default()).unwrap();
        let dict = db.dictionary();
        db.suspend_with(SuspendOptions::default().fail_fast(fail_fast))
            .unwrap();
        // Both return without waiting for resume (this thread makes it below).
        let (tx, rx) = mpsc::channel();
        let _theme = dict.subscribe_with("theme", move |v| tx.send(v).unwrap());
        let mut lang = dict.subscribe("lang");
        // A change made meanwhile is newer than the stored value the late read finds.
        dict.set("lang", "de").unwrap();
        assert_eq!(lang.try_next(), Some(text("de")));
        db.resume().unwrap();
        assert_eq!(rx.recv().unwrap(), text("dark"), "fail_fast {fail_fast}");
        dict.set("lang", "it").unwrap();
        // Nothing older than "de" (the stored value) came in between.
        assert_eq!(futures::executor::block_on(lang.next()), Some(text("it")));
        drop(lang);
        futures::executor::block_on(db.close()).unwrap();
    }
}
