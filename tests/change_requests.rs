//! Change requests say what they change: a request built from a stale object writes
//! only the fields it set, on top of the version stored at commit; setting a key
//! field moves the object (delete + insert, with the matching subscription events).

use std::sync::{Arc, Mutex};

use keel::prelude::*;
use keel::{ObjectUpdate, Update};
use keel_example_blog::blog::Post;

fn open() -> (tempfile::TempDir, Database) {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open_for::<Post>(dir.path().join("c.db"), StoreOptions::default()).unwrap();
    (dir, db)
}

fn get(db: &Database, id: &str) -> Option<Post> {
    db.get::<Post>(&id.to_string()).unwrap()
}

/// Dflat's lost update: `stale.change().priority(5)` must not revert a `title`
/// committed after `stale` was read.
#[test]
fn stale_change_of_one_field_keeps_a_field_committed_in_between() {
    let (_d, db) = open();
    let p = Post::builder().id("m").priority(100).title("old").build();
    db.write(move |t| t.insert(&p)).wait().unwrap();
    let stale = get(&db, "m").unwrap();

    // Another writer commits a new title.
    let fresh = stale.change().title("new").build();
    db.write(move |t| t.submit(fresh)).wait().unwrap();

    // The stale copy still says "old"; its change request sets only `priority`.
    assert_eq!(stale.title.as_deref(), Some("old"));
    let req = stale.change().priority(5).build();
    db.write(move |t| t.submit(req)).wait().unwrap();

    let now = get(&db, "m").unwrap();
    assert_eq!(now.priority, 5);
    assert_eq!(
        now.title.as_deref(),
        Some("new"),
        "the stale request reverted `title`"
    );
}

/// A second change request built from the object read before the first one
/// committed sees the first one's value (Dflat's test: expected 110, got 100).
#[test]
fn second_request_from_the_same_stale_object_sees_the_first() {
    let (_d, db) = open();
    let p = Post::builder().id("m").priority(100).views(1).build();
    db.write(move |t| t.insert(&p)).wait().unwrap();
    let read = get(&db, "m").unwrap();

    let first = read.change().priority(read.priority + 10).build();
    let second = read.change().views(2).build();
    // Both in one closure, and then again across two transactions.
    db.write(move |t| {
        t.submit(first)?;
        t.submit(second)
    })
    .wait()
    .unwrap();
    let now = get(&db, "m").unwrap();
    assert_eq!((now.priority, now.views), (110, 2));

    let third = read.change().views(3).build();
    db.write(move |t| t.submit(third)).wait().unwrap();
    let now = get(&db, "m").unwrap();
    assert_eq!((now.priority, now.views), (110, 3));
}

/// Requests queued from different threads on the same stale object, each setting
/// a different field: every field ends up set (no request reverts another).
#[test]
fn concurrent_requests_on_one_stale_object_lose_nothing() {
    let (_d, db) = open();
    let p = Post::builder().id("m").build();
    db.write(move |t| t.insert(&p)).wait().unwrap();
    let stale = get(&db, "m").unwrap();
    let handles: Vec<_> = (0..4)
        .map(|i| {
            let db = db.clone();
            let stale = stale.clone();
            std::thread::spawn(move || {
                let req = match i {
                    0 => stale.change().priority(7).build(),
                    1 => stale.change().title("t").build(),
                    2 => stale.change().views(9).build(),
                    _ => stale.change().slug("s").build(),
                };
                db.write(move |t| t.submit(req)).wait().unwrap();
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let now = get(&db, "m").unwrap();
    assert_eq!(now.priority, 7);
    assert_eq!(now.title.as_deref(), Some("t"));
    assert_eq!(now.views, 9);
    assert_eq!(now.slug.as_deref(), Some("s"));
}

/// Clearing is a change too: `clear_title()` removes the stored title even when the
/// stale object had none.
#[test]
fn clearing_a_field_is_applied_to_the_stored_version() {
    let (_d, db) = open();
    let p = Post::builder().id("m").build();
    db.write(move |t| t.insert(&p)).wait().unwrap();
    let stale = get(&db, "m").unwrap();
    let set = stale.change().title("x").build();
    db.write(move |t| t.submit(set)).wait().unwrap();
    let clear = stale.change().clear_title().build();
    db.write(move |t| t.submit(clear)).wait().unwrap();
    assert_eq!(get(&db, "m").unwrap().title, None);
}

/// A change of a missing object is `NotFound`; an unknown field name is a typed
/// error; a value of the wrong type is `TypeMismatch`; nothing is written.
#[test]
fn bad_changes_are_typed_errors() {
    let (_d, db) = open();
    let ghost = Post::builder()
        .id("ghost")
        .build()
        .change()
        .priority(1)
        .build();
    let err = db.write(move |t| t.submit(ghost)).wait().unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }), "{err:?}");
    let p = Post::builder().id("m").build();
    db.write(move |t| t.insert(&p)).wait().unwrap();
    let err = db
        .write(|t| t.change_values("blog.Post", &["m".into()], &[("nope".into(), 1.into())]))
        .wait()
        .unwrap_err();
    assert!(matches!(err, Error::UnknownField { .. }), "{err:?}");
    let err = db
        .write(|t| {
            t.change_values(
                "blog.Post",
                &["m".into()],
                &[("priority".into(), "x".into())],
            )
        })
        .wait()
        .unwrap_err();
    assert!(matches!(err, Error::TypeMismatch { .. }), "{err:?}");
    assert_eq!(get(&db, "m").unwrap(), Post::builder().id("m").build());
}

/// Changing the primary key through a change request is a delete of the old key and
/// an insert of the new one: the old key's object subscription gets `Deleted`, a
/// live query sees the object under its new key, the other fields are kept.
#[test]
fn key_change_is_delete_plus_insert_with_the_right_events() {
    let (_d, db) = open();
    let p = Post::builder().id("old").priority(3).title("kept").build();
    db.write(move |t| t.insert(&p)).wait().unwrap();
    let stored = get(&db, "old").unwrap();

    let object_events: Arc<Mutex<Vec<ObjectUpdate<Post>>>> = Arc::default();
    let oe = object_events.clone();
    let _obj = db
        .subscribe(&stored, move |u| oe.lock().unwrap().push(u))
        .unwrap();
    let query_events: Arc<Mutex<Vec<Update<Post>>>> = Arc::default();
    let qe = query_events.clone();
    let _q = db
        .fetch::<Post>()
        .filter(Post::priority().eq(3))
        .subscribe(move |u| qe.lock().unwrap().push(u))
        .unwrap();

    let req = stored.change().id("new").build();
    db.write(move |t| t.submit(req)).wait().unwrap();

    assert!(get(&db, "old").is_none());
    let moved = get(&db, "new").unwrap();
    assert_eq!((moved.priority, moved.title.as_deref()), (3, Some("kept")));
    assert_eq!(
        object_events.lock().unwrap().last(),
        Some(&ObjectUpdate::Deleted),
        "the old key's subscription must end with Deleted"
    );
    let q = query_events.lock().unwrap();
    let last = q.last().unwrap();
    let ids: Vec<&str> = last.objects.iter().map(|p| p.id.as_str()).collect();
    assert_eq!(ids, vec!["new"]);
    assert_eq!(last.diff.inserted, vec![0]);
    assert_eq!(last.diff.removed, vec![0]);

    // Moving onto a taken key fails and changes nothing.
    let other = Post::builder().id("taken").build();
    db.write(move |t| t.insert(&other)).wait().unwrap();
    let clash = moved.change().id("taken").build();
    let err = db.write(move |t| t.submit(clash)).wait().unwrap_err();
    assert!(err.is_already_exists(), "{err:?}");
    assert_eq!(get(&db, "new").unwrap(), moved);
}

/// The dynamic API takes the same change as bytes plus field names, or as values.
#[test]
fn change_by_bytes_and_by_values() {
    let (_d, db) = open();
    let p = Post::builder().id("m").title("t").priority(1).build();
    db.write(move |t| t.insert(&p)).wait().unwrap();
    let stale = Post::builder().id("m").priority(2).build().encode();
    db.write(move |t| t.change_bytes("blog.Post", &["m".into()], &stale, &["priority"]))
        .wait()
        .unwrap();
    db.write(|t| {
        t.change_values(
            "blog.Post",
            &["m".into()],
            &[("views".into(), 4.into()), ("slug".into(), "s".into())],
        )
    })
    .wait()
    .unwrap();
    let now = get(&db, "m").unwrap();
    assert_eq!(
        (
            now.priority,
            now.title.as_deref(),
            now.views,
            now.slug.as_deref()
        ),
        (2, Some("t"), 4, Some("s"))
    );
}
