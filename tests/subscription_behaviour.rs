//! Subscriptions: Dflat's ordering scenario, object subscriptions ending on delete,
//! cancellation (no callback after drop, even from another thread or inside the
//! callback), streams with a slow consumer, stale inputs, and windows.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use keel::prelude::*;
use keel::{ObjectEvent, ObjectUpdate, Subscription, Update};
use keel_example_blog::blog::Post;

type Step = Box<dyn FnOnce(&mut Txn<'_>) -> keel::Result<()> + Send>;

fn open() -> (tempfile::TempDir, Database) {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open_for::<Post>(dir.path().join("s.db"), StoreOptions::default()).unwrap();
    (dir, db)
}

fn post(id: &str, mana: i32) -> Post {
    Post::builder().id(id).priority(mana).build()
}

/// Insert `p` in a transaction of its own.
fn insert(db: &Database, p: Post) {
    db.write(move |t| t.insert(&p).map(|_| ())).wait().unwrap();
}

/// Replace the stored post with `p`'s id by `p`, in a transaction of its own.
fn update(db: &Database, p: Post) {
    db.write(move |t| t.update(&p).map(|_| ())).wait().unwrap();
}

/// Insert or replace `p`, in a transaction of its own.
fn upsert(db: &Database, p: Post) {
    db.write(move |t| t.upsert(&p).map(|_| ())).wait().unwrap();
}

/// Delete the post with id `id`, in a transaction of its own.
fn delete(db: &Database, id: &str) {
    let id = id.to_string();
    db.write(move |t| t.delete::<Post>(&id).map(|_| ()))
        .wait()
        .unwrap();
}

/// A subscription to every post and the number of deliveries it has had (the
/// first result counts).
fn subscribe_counting(db: &Database) -> (Subscription, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let c2 = calls.clone();
    let sub = db
        .fetch::<Post>()
        .subscribe(move |_| {
            c2.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();
    (sub, calls)
}

fn ids(objs: &[Arc<Post>]) -> Vec<(String, i32)> {
    objs.iter().map(|p| (p.id.clone(), p.priority)).collect()
}

/// Dflat's `mana <= 50` ordering scenario: inserts, a move later, a move earlier and
/// deletes. The subscription must deliver exactly what fresh fetches return.
#[test]
fn dflat_ordering_scenario_matches_fresh_fetches() {
    let (_d, db) = open();
    let fetch = || {
        db.fetch::<Post>()
            .filter(Post::priority().le(50))
            .order_by(Post::priority().asc())
    };
    let got: Arc<Mutex<Vec<Update<Post>>>> = Arc::default();
    let g2 = got.clone();
    let _sub = fetch()
        .subscribe(move |u| g2.lock().unwrap().push(u))
        .unwrap();
    let mut want: Vec<Vec<(String, i32)>> = vec![vec![]];
    let mut step = |f: Step| {
        db.write(f).wait().unwrap();
        let fresh: Vec<Arc<Post>> = fetch().all().unwrap().into_iter().map(Arc::new).collect();
        want.push(ids(&fresh));
    };
    // Inserts: three inside the filter, one outside.
    step(Box::new(|t| {
        for (id, mana) in [("m1", 10), ("m2", 20), ("m3", 30), ("big", 80)] {
            t.insert(&post(id, mana))?;
        }
        Ok(())
    }));
    step(Box::new(|t| t.insert(&post("m4", 40)).map(|_| ())));
    // A move later: m1 from first to after m3.
    step(Box::new(|t| t.update(&post("m1", 35)).map(|_| ())));
    // A move earlier: m4 to the front.
    step(Box::new(|t| t.update(&post("m4", 5)).map(|_| ())));
    // Out of the filter and back in.
    step(Box::new(|t| t.update(&post("m2", 60)).map(|_| ())));
    step(Box::new(|t| t.update(&post("big", 25)).map(|_| ())));
    // Deletes.
    step(Box::new(|t| {
        t.delete::<Post>(&"m3".to_string()).map(|_| ())
    }));
    step(Box::new(|t| {
        t.delete::<Post>(&"m4".to_string())?;
        t.delete::<Post>(&"m1".to_string())?;
        Ok(())
    }));
    let got = got.lock().unwrap();
    let seq: Vec<_> = got.iter().map(|u| ids(&u.objects)).collect();
    assert_eq!(seq, want);
    // The diffs, checked by hand for the moves.
    assert_eq!(got[3].diff.moved, vec![(0, 2)], "m1 moved later");
    assert_eq!(got[3].diff.updated, vec![2]);
    assert_eq!(got[4].diff.moved, vec![(3, 0)], "m4 moved earlier");
    assert_eq!(got[5].diff.removed, vec![1], "m2 left the filter");
    assert_eq!(got[6].diff.inserted, vec![1], "big entered it");
    // Applying every diff reproduces every result.
    let mut cur: Vec<Arc<Post>> = Vec::new();
    for u in got.iter() {
        cur = u.diff.apply(&cur, |i| u.objects[i].clone());
        assert_eq!(ids(&cur), ids(&u.objects));
    }
}

#[test]
fn object_subscription_updates_then_deleted_then_ends() {
    let (_d, db) = open();
    let p = post("p", 1);
    insert(&db, p.clone());
    let got: Arc<Mutex<Vec<ObjectUpdate<Post>>>> = Arc::default();
    let g2 = got.clone();
    let sub = db
        .subscribe(&p, move |u| g2.lock().unwrap().push(u))
        .unwrap();
    assert!(got.lock().unwrap().is_empty(), "not stale: nothing at once");
    update(&db, post("p", 2));
    insert(&db, post("other", 9));
    update(&db, post("p", 3));
    delete(&db, "p");
    assert!(!sub.is_active());
    // Re-inserting the key does not revive an ended subscription.
    insert(&db, post("p", 4));
    let got = got.lock().unwrap();
    let prios: Vec<Option<i32>> = got
        .iter()
        .map(|u| match u {
            ObjectUpdate::Updated(p) => Some(p.priority),
            ObjectUpdate::Deleted => None,
        })
        .collect();
    assert_eq!(prios, vec![Some(2), Some(3), None]);
    assert_eq!(db.subscription_counts(), (0, 0));
}

#[test]
fn object_stream_ends_after_delete() {
    let (_d, db) = open();
    let p = post("p", 1);
    insert(&db, p.clone());
    let s = db.subscribe_stream(&p).unwrap();
    update(&db, post("p", 2));
    update(&db, post("p", 3));
    delete(&db, "p");
    // A slow consumer: only the latest event is kept, and the stream ends.
    let all: Vec<_> = futures::executor::block_on(s.collect());
    assert_eq!(all, vec![ObjectUpdate::Deleted]);
}

#[test]
fn object_stream_delivers_each_update_to_a_prompt_consumer() {
    let (_d, db) = open();
    insert(&db, post("p", 1));
    let mut s = db
        .subscribe_object_stream("blog.Post", &["p".into()], None)
        .unwrap();
    let first = futures::executor::block_on(s.next()).unwrap();
    assert!(
        matches!(first, ObjectEvent::Updated(_)),
        "seen = None: current object first"
    );
    for i in 2..5 {
        update(&db, post("p", i));
        match futures::executor::block_on(s.next()).unwrap() {
            ObjectEvent::Updated(o) => assert_eq!(Post::decode(&o.bytes).unwrap().priority, i),
            ObjectEvent::Deleted => panic!("not deleted"),
        }
    }
    delete(&db, "p");
    assert_eq!(
        futures::executor::block_on(s.next()),
        Some(ObjectEvent::Deleted)
    );
    assert_eq!(futures::executor::block_on(s.next()), None);
}

#[test]
fn stale_object_and_result_are_refreshed_at_once() {
    let (_d, db) = open();
    let old = post("p", 1);
    insert(&db, old.clone());
    let seen_result = db.fetch::<Post>().all().unwrap();
    update(&db, post("p", 7));

    let got: Arc<Mutex<Vec<ObjectUpdate<Post>>>> = Arc::default();
    let g2 = got.clone();
    let _s = db
        .subscribe(&old, move |u| g2.lock().unwrap().push(u))
        .unwrap();
    assert_eq!(
        *got.lock().unwrap(),
        vec![ObjectUpdate::Updated(post("p", 7))]
    );

    let res: Arc<Mutex<Vec<Update<Post>>>> = Arc::default();
    let r2 = res.clone();
    let _q = db
        .fetch::<Post>()
        .subscribe_from(&seen_result, move |u| r2.lock().unwrap().push(u))
        .unwrap();
    {
        let res = res.lock().unwrap();
        assert_eq!(res.len(), 1);
        assert_eq!(ids(&res[0].objects), vec![("p".to_string(), 7)]);
        assert_eq!(res[0].diff.updated, vec![0]);
    }

    // A vanished object: Deleted at once, and the subscription has ended.
    delete(&db, "p");
    let gone: Arc<Mutex<Vec<ObjectUpdate<Post>>>> = Arc::default();
    let g3 = gone.clone();
    let s = db
        .subscribe(&old, move |u| g3.lock().unwrap().push(u))
        .unwrap();
    assert_eq!(*gone.lock().unwrap(), vec![ObjectUpdate::Deleted]);
    assert!(!s.is_active());
}

#[test]
fn no_callback_after_drop() {
    let (_d, db) = open();
    let (sub, calls) = subscribe_counting(&db);
    insert(&db, post("a", 1));
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    drop(sub);
    insert(&db, post("b", 1));
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert_eq!(db.subscription_counts(), (0, 0));
}

#[test]
fn no_callback_after_drop_returns_while_writes_run() {
    // Drop on this thread while the writer thread delivers: once drop returns, the
    // callback never runs again.
    let (_d, db) = open();
    let db2 = db.clone();
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = stop.clone();
    let writer = std::thread::spawn(move || {
        let mut i = 0;
        while !s2.load(Ordering::SeqCst) {
            i += 1;
            db2.write(move |t| t.upsert(&post("w", i)).map(|_| ()))
                .wait()
                .unwrap();
        }
    });
    for _ in 0..30 {
        let dropped = Arc::new(AtomicBool::new(false));
        let late = Arc::new(AtomicBool::new(false));
        let (d2, l2) = (dropped.clone(), late.clone());
        let sub = db
            .fetch::<Post>()
            .subscribe(move |_| {
                if d2.load(Ordering::SeqCst) {
                    l2.store(true, Ordering::SeqCst);
                }
                std::thread::yield_now();
            })
            .unwrap();
        std::thread::yield_now();
        drop(sub);
        dropped.store(true, Ordering::SeqCst);
        // Let a few more commits through.
        upsert(&db, post("x", 0));
        assert!(
            !late.load(Ordering::SeqCst),
            "a callback ran after drop returned"
        );
    }
    stop.store(true, Ordering::SeqCst);
    writer.join().unwrap();
    assert_eq!(db.subscription_counts(), (0, 0));
}

#[test]
fn callbacks_may_drop_subscribe_and_write() {
    let (_d, db) = open();
    // A subscription that cancels itself from inside its own callback.
    let slot: Arc<Mutex<Option<Subscription>>> = Arc::default();
    let calls = Arc::new(AtomicUsize::new(0));
    let (s2, c2) = (slot.clone(), calls.clone());
    let sub = db
        .fetch::<Post>()
        .subscribe(move |_| {
            if c2.fetch_add(1, Ordering::SeqCst) == 1 {
                drop(s2.lock().unwrap().take());
            }
        })
        .unwrap();
    *slot.lock().unwrap() = Some(sub);
    // A callback that subscribes (a read on the writer thread) and queues a write.
    let inner: Arc<Mutex<Vec<Subscription>>> = Arc::default();
    let (i2, db2) = (inner.clone(), db.clone());
    let _outer = db
        .fetch::<Post>()
        .filter(Post::id().eq("a"))
        .subscribe(move |u| {
            if !u.objects.is_empty() && i2.lock().unwrap().is_empty() {
                let s = db2.fetch::<Post>().subscribe(|_| {}).unwrap();
                i2.lock().unwrap().push(s);
                let _queued = db2.write(|t| t.upsert(&post("from-callback", 1)).map(|_| ()));
            }
        })
        .unwrap();
    insert(&db, post("a", 1));
    insert(&db, post("b", 1));
    insert(&db, post("c", 1));
    assert_eq!(
        calls.load(Ordering::SeqCst),
        2,
        "dropped inside its callback"
    );
    assert_eq!(inner.lock().unwrap().len(), 1);
    // The write queued by the callback commits.
    db.write(|_| Ok(())).wait().unwrap();
    assert!(db
        .get::<Post>(&"from-callback".to_string())
        .unwrap()
        .is_some());
}

#[test]
fn query_stream_slow_consumer_gets_latest_with_diff_against_what_it_saw() {
    let (_d, db) = open();
    let mut s = db
        .fetch::<Post>()
        .order_by(Post::priority().asc())
        .subscribe_stream()
        .unwrap();
    let first = futures::executor::block_on(s.next()).unwrap();
    assert!(first.objects.is_empty());
    for i in 0..20 {
        insert(&db, post(&format!("p{i:02}"), 20 - i));
    }
    let u = futures::executor::block_on(s.next()).unwrap();
    assert_eq!(u.objects.len(), 20);
    assert_eq!(u.diff.inserted, (0..20).collect::<Vec<_>>());
    assert_eq!(u.objects[0].priority, 1);
    // Nothing pending now.
    let waker = futures::task::noop_waker();
    let mut cx = std::task::Context::from_waker(&waker);
    assert!(s.poll_next_unpin(&mut cx).is_pending());
}

#[test]
fn windowed_subscription_refills_and_tracks_fetches() {
    let (_d, db) = open();
    db.write(|t| {
        for i in 0..40 {
            t.insert(&post(&format!("p{i:02}"), i))?;
        }
        Ok(())
    })
    .wait()
    .unwrap();
    let fetch = || {
        db.fetch::<Post>()
            .filter(Post::priority().ge(5))
            .order_by(Post::priority().desc())
            .offset(3)
            .limit(5)
    };
    let last: Arc<Mutex<Vec<Arc<Post>>>> = Arc::default();
    let l2 = last.clone();
    let _s = fetch()
        .subscribe(move |u| *l2.lock().unwrap() = u.objects)
        .unwrap();
    let check = || {
        let want: Vec<_> = fetch().all().unwrap().into_iter().map(Arc::new).collect();
        assert_eq!(ids(&last.lock().unwrap()), ids(&want));
    };
    check();
    // Delete the whole top of the order, one commit at a time (each refills).
    for i in (20..40).rev() {
        delete(&db, &format!("p{i:02}"));
        check();
    }
    // Raise low rows above the window, then below the filter.
    for i in 0..10 {
        update(&db, post(&format!("p{i:02}"), 100 + i));
        check();
    }
    db.write(|t| {
        for i in 0..10 {
            t.update(&post(&format!("p{i:02}"), 0))?;
        }
        Ok(())
    })
    .wait()
    .unwrap();
    check();
}

#[test]
fn handles_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Subscription>();
    send_sync::<keel::QueryUpdate>();
    send::<keel::subscribe::QueryStream>();
    send::<keel::subscribe::ObjectStream>();
    send::<keel::subscribe::UpdateStream<Post>>();
    send::<keel::subscribe::ObjectUpdateStream<Post>>();
}

/// `Database::close` ends every live subscription: streams yield what they hold,
/// then `None`; callbacks stop; handles report inactive.
#[test]
fn close_ends_streams_and_callbacks() {
    use futures::FutureExt;
    let (_d, db) = open();
    db.write(|t| {
        t.insert(&post("a", 1))?;
        t.insert(&post("b", 2))
    })
    .wait()
    .unwrap();
    let mut query = db.query("blog.Post").subscribe_stream().unwrap();
    let mut typed = db.fetch::<Post>().subscribe_stream().unwrap();
    let mut object = db
        .subscribe_object_stream("blog.Post", &["a".into()], None)
        .unwrap();
    let mut typed_object = db.subscribe_stream(&post("b", 0)).unwrap();
    // Each holds its first value.
    assert_eq!(block_on(query.next()).unwrap().objects.len(), 2);
    assert_eq!(block_on(typed.next()).unwrap().objects.len(), 2);
    assert!(matches!(
        block_on(object.next()),
        Some(ObjectEvent::Updated(_))
    ));
    assert!(matches!(
        block_on(typed_object.next()),
        Some(ObjectUpdate::Updated(_))
    ));
    let (sub, calls) = subscribe_counting(&db);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    // A write queued before the close is still delivered, then everything ends.
    let queued = db.write(|t| t.insert(&post("c", 3)));
    db.close().wait().unwrap();
    queued.wait().unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert!(!sub.is_active());
    assert_eq!(db.subscription_counts(), (0, 0));
    let last = query.next().now_or_never().expect("ready after close");
    assert_eq!(last.unwrap().objects.len(), 3);
    assert!(query.next().now_or_never().expect("ended").is_none());
    assert_eq!(
        typed
            .next()
            .now_or_never()
            .expect("ready")
            .unwrap()
            .objects
            .len(),
        3
    );
    assert!(typed.next().now_or_never().expect("ended").is_none());
    assert!(object.next().now_or_never().expect("ended").is_none());
    assert!(typed_object.next().now_or_never().expect("ended").is_none());
    // No new subscriptions on a closed database.
    assert!(matches!(
        db.fetch::<Post>().subscribe_stream(),
        Err(Error::Closed { .. })
    ));
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    futures::executor::block_on(f)
}

/// Queries that filter on the primary key only (Dflat's case 1: one query per
/// object) are matched from the key each change carries, without opening the
/// changed bodies: every update, insert and delete of their object still reaches
/// them, and nothing else does.
#[test]
fn primary_key_queries_alone_get_every_change_of_their_object() {
    let (_d, db) = open();
    insert(&db, post("a", 1));
    insert(&db, post("b", 1));
    // Each delivery as (id, priority) pairs.
    type Seen = Vec<Vec<(String, i32)>>;
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let mut subs = Vec::new();
    for id in ["a", "b", "c"] {
        let s2 = Arc::clone(&seen);
        subs.push(
            db.fetch::<Post>()
                .filter(Post::id().eq(id))
                .subscribe(move |u: Update<Post>| s2.lock().unwrap().push(ids(&u.objects)))
                .unwrap(),
        );
    }
    seen.lock().unwrap().clear();
    update(&db, post("a", 2));
    insert(&db, post("c", 7));
    delete(&db, "b");
    db.write(|t| {
        t.update(&post("a", 3))?;
        t.update(&post("c", 8))
    })
    .wait()
    .unwrap();
    let got = seen.lock().unwrap().clone();
    let want: Seen = vec![
        vec![("a".into(), 2)],
        vec![("c".into(), 7)],
        vec![],
        vec![("a".into(), 3)],
        vec![("c".into(), 8)],
    ];
    assert_eq!(got, want);
    drop(subs);
}

/// Overlapping live windows share the stored object of a row they both show,
/// from their first result on and after a commit changes it: memory follows
/// the rows shown, not the windows (1,000 windows of 1,000 rows would
/// otherwise hold a million copies).
#[test]
fn overlapping_windows_share_the_objects_they_both_show() {
    let (_dir, db) = open();
    db.write(|t| {
        for i in 0..10 {
            t.insert(&post(&format!("p{i}"), i))?;
        }
        Ok(())
    })
    .wait()
    .unwrap();
    type Last = Arc<Mutex<keel::Objects>>;
    let window = |lo: i32, last: Last| {
        db.query("blog.Post")
            .filter(Post::priority().ge(lo) & Post::priority().lt(lo + 6))
            .order_by(Post::priority().asc())
            .subscribe(move |u| *last.lock().unwrap() = u.objects)
            .unwrap()
    };
    let (a, b): (Last, Last) = Default::default();
    let _wa = window(0, a.clone()); // p0..p5
    let _wb = window(3, b.clone()); // p3..p8
    let shared = |a: &Last, b: &Last| {
        let (a, b) = (a.lock().unwrap(), b.lock().unwrap());
        // p3, p4, p5: the last three of `a`, the first three of `b`.
        (0..3).all(|i| Arc::ptr_eq(&a[3 + i], &b[i]))
    };
    assert!(shared(&a, &b), "first results share their common rows");
    update(
        &db,
        Post::builder()
            .id("p4")
            .priority(4)
            .title("changed")
            .build(),
    );
    assert!(
        shared(&a, &b),
        "a commit's new version is one object for both"
    );
}
