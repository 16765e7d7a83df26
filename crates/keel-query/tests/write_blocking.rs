//! `Database::write_blocking`: with nothing else writing, the
//! transaction commits on the calling thread — and subscriptions are delivered
//! before it returns, an aborting closure rolls back alone, a nested blocking write
//! is an error rather than a deadlock.

use std::sync::{Arc, Mutex};
use std::thread::{self, ThreadId};
use std::time::Duration;

use keel_example_blog::blog::Post;
use keel_query::{Database, Error, StoreOptions};

fn quiet() -> StoreOptions {
    StoreOptions::default().idle_checkpoint_after(Duration::from_secs(3600))
}

fn here() -> ThreadId {
    thread::current().id()
}

#[test]
fn subscriptions_are_delivered_on_the_committing_thread_before_it_returns() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open_for::<Post>(dir.path().join("b.db"), quiet()).unwrap();
    let seen: Arc<Mutex<Vec<(usize, ThreadId)>>> = Arc::new(Mutex::new(Vec::new()));
    let s2 = Arc::clone(&seen);
    let _sub = db
        .fetch::<Post>()
        .subscribe(move |u| s2.lock().unwrap().push((u.objects.len(), here())))
        .unwrap();
    let hooked = Arc::new(Mutex::new(Vec::new()));
    let h2 = Arc::clone(&hooked);
    let _hook = db.on_commit_changes(move |c| h2.lock().unwrap().push((c.len(), here())));

    let ran_on = db
        .write_blocking(|t| {
            t.insert(&Post::builder().id("a").build())?;
            Ok(here())
        })
        .unwrap();
    assert_eq!(ran_on, here(), "an uncontended blocking write handed off");
    // Delivered already, on this thread (the first delivery is the empty result).
    assert_eq!(*seen.lock().unwrap(), vec![(0, here()), (1, here())]);
    assert_eq!(*hooked.lock().unwrap(), vec![(1, here())]);

    // An aborted transaction rolls back alone and delivers nothing.
    let r = db.write_blocking(|t| {
        t.insert(&Post::builder().id("b").build())?;
        t.abort();
        Ok(())
    });
    assert!(matches!(r, Err(Error::Aborted { .. })), "{r:?}");
    assert_eq!(seen.lock().unwrap().len(), 2);
    assert_eq!(db.fetch::<Post>().count().unwrap(), 1);

    // A blocking write inside a write closure of the same database is an error.
    let db2 = db.clone();
    let nested = db
        .write_blocking(move |t| {
            t.insert(&Post::builder().id("c").build())?;
            Ok(db2.write_blocking(|_| Ok(())))
        })
        .unwrap();
    assert!(nested.is_err(), "{nested:?}");
    assert_eq!(db.fetch::<Post>().count().unwrap(), 2);

    // An async write from another thread still runs on keel's writer thread.
    let on = futures::executor::block_on(db.write(|_| Ok(here()))).unwrap();
    assert_ne!(on, here());
    db.close().wait().unwrap();
}
