//! Async fetches run on keel's bounded fetch pool (`keel-fetch-N`), not on a new
//! thread per call; the pool's threads are joined by `close`. (Its own test binary,
//! with one test in it: it counts the process's threads, so any other test running
//! beside it would count too.)

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use keel::prelude::*;
use keel::storage::SyncPolicies;
use keel_example_blog::blog::Post;

fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").map_or(0, |d| d.count())
}

fn fetch_threads() -> Vec<String> {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    dir.filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("comm")).ok())
        .map(|n| n.trim().to_owned())
        .filter(|n| n.starts_with("keel-fetch-"))
        .collect()
}

#[test]
fn two_hundred_concurrent_async_fetches_run_on_a_bounded_pool() {
    if threads() == 0 {
        eprintln!("no /proc/self/task: skipped");
        return;
    }
    const READERS: usize = 3;
    let dir = tempfile::tempdir().unwrap();
    let opts = StoreOptions::default()
        .sync(SyncPolicies::all(SyncPolicy::Off))
        .readers(READERS);
    let db = Database::open_for::<Post>(dir.path().join("p.db"), opts).unwrap();
    db.write(|t| {
        for i in 0..2000 {
            t.insert(
                &Post::builder()
                    .id(format!("p{i:04}"))
                    .priority(i % 100)
                    .build(),
            )?;
        }
        Ok(())
    })
    .wait()
    .unwrap();

    let before = threads();
    let peak = Arc::new(AtomicUsize::new(before));
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (peak, done) = (peak.clone(), done.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::Acquire) {
                peak.fetch_max(threads(), Ordering::AcqRel);
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
        })
    };
    // 200 fetches in flight at once, of every async kind (each scans the table).
    let mut all = Vec::new();
    let mut counts = Vec::new();
    let mut gets = Vec::new();
    let mut raw = Vec::new();
    for i in 0..200 {
        let q = db.fetch::<Post>().filter(Post::priority().ge(i % 100));
        match i % 4 {
            0 => all.push(q.all_async()),
            1 => counts.push(q.count_async()),
            2 => gets.push(db.get_async::<Post>(format!("p{i:04}"))),
            _ => raw.push(q.into_query().count_async()),
        }
    }
    peak.fetch_max(threads(), Ordering::AcqRel);
    let (all, counts, gets, raw) = (
        futures::executor::block_on(futures::future::join_all(all)),
        futures::executor::block_on(futures::future::join_all(counts)),
        futures::executor::block_on(futures::future::join_all(gets)),
        futures::executor::block_on(futures::future::join_all(raw)),
    );
    done.store(true, Ordering::Release);
    sampler.join().unwrap();

    for (k, r) in all.into_iter().enumerate() {
        let i = (k * 4) as i32 % 100;
        assert_eq!(r.unwrap().len(), 20 * (100 - i) as usize);
    }
    for r in counts.into_iter().chain(raw) {
        assert!(r.unwrap() > 0);
    }
    for r in gets {
        assert!(r.unwrap().is_some());
    }
    // The sampler is one extra thread; the pool adds at most READERS.
    let peak = peak.load(Ordering::Acquire);
    assert!(
        peak <= before + 1 + READERS,
        "{peak} threads at the peak, {before} before: async fetches must not spawn a thread each"
    );
    let names = fetch_threads();
    assert!(
        !names.is_empty() && names.len() <= READERS,
        "fetch pool threads: {names:?}"
    );

    // Close joins the pool; an async fetch after it fails as closed.
    db.close().wait().unwrap();
    assert_eq!(fetch_threads(), Vec::<String>::new());
    assert!(matches!(
        db.fetch::<Post>().count_async().wait(),
        Err(Error::Closed { .. })
    ));
}
