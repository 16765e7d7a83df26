//! Snapshot isolation, concurrent writers and fetchers, async variants, close.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use keel::prelude::*;
use keel::storage::SyncPolicies;
use keel_example_blog::blog::Post;

fn opts() -> StoreOptions {
    StoreOptions::default().sync(SyncPolicies::all(SyncPolicy::Normal))
}

#[test]
fn snapshot_keeps_seeing_a_row_deleted_by_a_concurrent_commit() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open_for::<Post>(dir.path().join("s.db"), opts()).unwrap();
    db.write(|t| {
        t.insert(&Post::builder().id("a").priority(1).build())?;
        t.insert(&Post::builder().id("b").priority(2).build())
    })
    .wait()
    .unwrap();
    let a = "a".to_string();
    db.snapshot(|s| {
        assert_eq!(s.fetch::<Post>().count()?, 2);
        // Another thread deletes "a" and commits while the snapshot is open.
        let db2 = db.clone();
        std::thread::spawn(move || db2.write(|t| t.delete::<Post>(&"a".to_string())).wait())
            .join()
            .unwrap()?;
        assert!(
            db.get::<Post>(&a)?.is_none(),
            "outside the snapshot the row is gone"
        );
        assert!(s.get::<Post>(&a)?.is_some(), "the snapshot still sees it");
        assert_eq!(s.fetch::<Post>().count()?, 2);
        assert_eq!(
            s.fetch::<Post>()
                .filter(Post::priority().eq(1))
                .all()?
                .len(),
            1
        );
        Ok(())
    })
    .unwrap();
    assert_eq!(db.fetch::<Post>().count().unwrap(), 1);
}

#[test]
fn eight_writers_eight_fetchers_no_deadlock_no_lost_write() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open_for::<Post>(dir.path().join("c.db"), opts()).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let run_for = Duration::from_secs(3);
    let mut fetchers = Vec::new();
    for f in 0..8 {
        let (db, stop) = (db.clone(), stop.clone());
        fetchers.push(std::thread::spawn(move || {
            let mut last = 0u64;
            let mut reads = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let n = if f % 2 == 0 {
                    db.fetch::<Post>().count().unwrap()
                } else {
                    db.fetch::<Post>()
                        .filter(Post::priority().ge(0))
                        .order_by(Post::priority().desc())
                        .limit(20)
                        .all()
                        .unwrap();
                    db.fetch::<Post>().count().unwrap()
                };
                assert!(n >= last, "committed rows never disappear: {n} < {last}");
                last = n;
                reads += 1;
            }
            reads
        }));
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let written: u64 = rt.block_on(async {
        let start = Instant::now();
        let mut tasks = Vec::new();
        for w in 0..8 {
            let db = db.clone();
            tasks.push(tokio::spawn(async move {
                let mut n = 0u64;
                while start.elapsed() < run_for {
                    let id = format!("w{w}-{n}");
                    db.write(move |t| {
                        t.insert(
                            &Post::builder()
                                .id(id.clone())
                                .priority((n % 50) as i32)
                                .build(),
                        )?;
                        let back = t.get::<Post>(&id)?.expect("own write visible");
                        t.update(&back.to_builder().title("done").build())?;
                        Ok(())
                    })
                    .await
                    .unwrap();
                    n += 1;
                }
                n
            }));
        }
        let mut total = 0;
        for t in tasks {
            total += t.await.unwrap();
        }
        total
    });
    stop.store(true, Ordering::Relaxed);
    let reads: u64 = fetchers.into_iter().map(|h| h.join().unwrap()).sum();
    assert!(written > 100, "writers made progress: {written}");
    assert!(reads > 100, "fetchers made progress: {reads}");
    assert_eq!(
        db.fetch::<Post>().count().unwrap(),
        written,
        "no lost write"
    );
    assert_eq!(
        db.fetch::<Post>()
            .filter(Post::title().eq("done"))
            .count()
            .unwrap(),
        written
    );
    db.close().wait().unwrap();
}

#[test]
fn async_variants_and_close() {
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let db = Database::open_async_for::<Post>(dir.path().join("a.db"), opts())
            .await
            .unwrap();
        db.write(|t| t.insert(&Post::builder().id("x").priority(4).build()))
            .await
            .unwrap();
        let all = db.fetch::<Post>().all_async().await.unwrap();
        assert_eq!(all.len(), 1);
        assert_eq!(db.fetch::<Post>().count_async().await.unwrap(), 1);
        assert!(db.get_async::<Post>("x".into()).await.unwrap().is_some());
        assert_eq!(db.query("blog.Post").all_async().await.unwrap().len(), 1);
        // Queued writes finish before close completes.
        let pending = db.write(|t| t.insert(&Post::builder().id("y").build()));
        db.close().await.unwrap();
        pending.await.unwrap();
        assert!(matches!(
            db.fetch::<Post>().count(),
            Err(Error::Closed { .. })
        ));
        assert!(matches!(
            db.get::<Post>(&"x".to_string()),
            Err(Error::Closed { .. })
        ));
        let r = db
            .write(|t| t.insert(&Post::builder().id("z").build()))
            .await;
        assert!(matches!(r, Err(Error::Closed { .. })), "{r:?}");
    });
    // The queued write was committed.
    let db = Database::open_for::<Post>(dir.path().join("a.db"), opts()).unwrap();
    assert_eq!(db.fetch::<Post>().count().unwrap(), 2);
}
