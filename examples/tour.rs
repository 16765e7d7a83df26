//! A tour of keel on a simulated slow phone.
//!
//! 1. A previous "app session" (a child process) writes 300 posts and is killed
//!    before any checkpoint, leaving its commits in the WAL.
//! 2. This session opens the database on a phone whose every sync takes 2 s (a
//!    `Custom` sync policy, like an `F_FULLFSYNC` on a busy iPhone). `open_async`
//!    returns at once and resolves within milliseconds, when the data is readable:
//!    the app lists its posts while the 2 s barrier sync still runs. A write made
//!    then is queued and is the first thing to commit once the database is durable
//!    (one 2 s commit sync later: no checkpoint runs ahead of it).
//! 3. A live query follows the five most urgent posts while 20 concurrent
//!    transactions group-commit into one or two commit syncs (not twenty), and the
//!    dictionary keeps a launch counter.
//! 4. It prints the `OpenReport` tree and the session's physical I/O (the open
//!    barrier's sync counted in both), then goes to the
//!    background (WAL truncated, so the next launch has nothing to sync).
//!
//! The types (`Post`, `Author`, …) are generated from `examples/blog/schema/blog.fbs`
//! by `keel_schema::compile` in that crate's build.rs.
//!
//! Run with: `cargo run --release --example tour`

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::FutureExt;
use keel::prelude::*;
use keel::storage::{OpenProgress, SyncPolicies};
use keel_example_blog::blog::{Author, Post};

type Res<T> = std::result::Result<T, Box<dyn std::error::Error>>;

const PREVIOUS_SESSION: &str = "--previous-session";

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().collect();
    if let [_, flag, path] = args.as_slice() {
        if flag == PREVIOUS_SESSION {
            return previous_session(Path::new(path));
        }
    }

    let dir = tempfile::tempdir()?;
    let path = dir.path().join("tour.db");

    // 1. A previous session, in its own process, is killed with data in the WAL.
    let status = std::process::Command::new(std::env::current_exe()?)
        .arg(PREVIOUS_SESSION)
        .arg(&path)
        .status()?;
    if !status.success() {
        return Err(format!("the previous session failed: {status}").into());
    }
    let wal_bytes = std::fs::metadata(dir.path().join("tour.db-wal"))
        .map(|m| m.len())
        .unwrap_or(0);
    println!("previous session was killed leaving a {wal_bytes} byte WAL\n");

    // 2. Open on a "slow phone": every sync takes 2 s.
    let slow = SyncPolicy::custom(|ctx| {
        println!("    [sync] {:?} {:?} … 2 s", ctx.reason(), ctx.kind());
        std::thread::sleep(Duration::from_secs(2));
        ctx.full_sync()
    });
    let options = StoreOptions::default()
        .sync(SyncPolicies::all(slow))
        .on_progress(|p: OpenProgress| {
            println!(
                "    [progress] {:>10} {:>5.1}%{}",
                p.phase.name(),
                p.fraction * 100.0,
                match p.milestone {
                    Some(m) => format!("  {}", m.name()),
                    None => String::new(),
                }
            )
        });
    let t0 = Instant::now();
    let mut open = Database::open_async_for::<Post>(&path, options);
    println!("open_async returned after {:?}", t0.elapsed());

    // The UI thread keeps running while keel opens on its own threads. The open
    // resolves as soon as the data is *readable*: the 2 s barrier sync of the WAL
    // the previous session left goes on beside it.
    let db = loop {
        if let Some(result) = (&mut open).now_or_never() {
            break result?;
        }
        println!(
            "  tick {:>5.2} s — UI still responsive",
            t0.elapsed().as_secs_f64()
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    let posts = db
        .fetch::<Post>()
        .order_by(Post::priority().desc())
        .limit(3)
        .all()?;
    println!(
        "\nreadable after {:.1} ms: the feed lists {} posts (top: {}) while the sync still runs (durable: {})",
        t0.elapsed().as_secs_f64() * 1e3,
        db.fetch::<Post>().count()?,
        posts
            .iter()
            .map(|p| p.id.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        db.is_durable()
    );
    // A write now is accepted at once and queued: it commits after the barrier.
    let early = db.write(|txn| {
        txn.insert(
            &Post::builder()
                .id("draft")
                .title("Typed during launch")
                .priority(50)
                .build(),
        )
    });
    let mut durable = db.durable();
    loop {
        if let Some(result) = (&mut durable).now_or_never() {
            result?;
            break;
        }
        println!(
            "  tick {:>5.2} s — scrolling the feed while the barrier syncs",
            t0.elapsed().as_secs_f64()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    early.wait()?;
    let durable_at = db.store().open_report().durable_after.unwrap_or_default();
    // The queued write is the first thing after the barrier: its own commit sync,
    // no checkpoint ahead of it.
    println!(
        "durable after {:.2} s; the queued write committed at {:.2} s (its own 2 s commit sync)\n",
        durable_at.as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );
    println!("{}", db.store().open_report());

    // 3a. A live query: the five most urgent posts, kept up to date with diffs.
    let deliveries = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&deliveries);
    let _live = db
        .fetch::<Post>()
        .filter(Post::priority().ge(90))
        .order_by(Post::priority().desc())
        .limit(5)
        .subscribe(move |update| {
            let titles: Vec<String> = update
                .objects
                .iter()
                .map(|p| format!("{}({})", p.id, p.priority))
                .collect();
            if let Ok(mut log) = seen.lock() {
                log.push(format!(
                    "[{}] inserted at {:?}, removed from {:?}",
                    titles.join(", "),
                    update.diff.inserted,
                    update.diff.removed
                ));
            }
        })?;

    // 3b. 20 concurrent transactions: group commit runs them in a group or two
    //     (the first write starts alone; the rest arrive while it syncs), one
    //     commit sync (2 s here) per group, not twenty. Counted by reason: an idle
    //     checkpoint's WAL sync in between is not a commit's.
    // Counted as a difference: the I/O table at the end covers the whole session
    // (the open barrier's sync included, as in the open report).
    let commit_syncs_before = db.store().io_stats().commit_syncs;
    let t = Instant::now();
    let writes: Vec<_> = (0..20)
        .map(|i| {
            db.write(move |txn| {
                let post = Post::builder()
                    .id(format!("new-{i}"))
                    .title(format!("Breaking news #{i}"))
                    .priority(80 + i)
                    .author(Author::builder().name("Grace").build())
                    .build();
                txn.insert(&post)
            })
        })
        .collect();
    for result in futures::executor::block_on(futures::future::join_all(writes)) {
        result?;
    }
    println!(
        "20 concurrent transactions committed in {:.2} s with {} commit sync(s)",
        t.elapsed().as_secs_f64(),
        db.store().io_stats().commit_syncs - commit_syncs_before
    );
    println!("live query deliveries (the first is the initial result):");
    for line in deliveries.lock().map(|l| l.clone()).unwrap_or_default() {
        println!("    {line}");
    }

    // 3c. Reads: synchronous, from any thread, never waiting for the writer.
    let reader = db.clone();
    let (count, top) = std::thread::spawn(move || -> keel::Result<(u64, Option<Post>)> {
        reader.snapshot(|s| {
            let count = s.fetch::<Post>().count()?;
            let top = s
                .fetch::<Post>()
                .filter(Post::author().join(Author::name()).eq("Grace"))
                .order_by(Post::priority().desc())
                .first()?;
            Ok((count, top))
        })
    })
    .join()
    .map_err(|_| "reader thread panicked")??;
    println!(
        "snapshot: {count} posts; Grace's most urgent: {:?}",
        top.and_then(|p| p.title.clone())
    );

    // 3d. The dictionary: settings without rewriting a plist.
    let settings = db.dictionary();
    let launches = settings.get_or::<u64>("launches", 0) + 1;
    settings.set("launches", launches)?;
    settings.set("last_screen", "feed")?;
    futures::executor::block_on(settings.sync())?;
    println!(
        "dictionary: launches = {launches}, last_screen = {:?}\n",
        settings.get::<String>("last_screen")?
    );

    // 4. Physical I/O of this whole session (the open barrier's sync included),
    //    then going to the background: the WAL is truncated so the next launch has
    //    nothing to sync.
    println!("{}\n", db.store().io_stats());
    let out = db.store().on_background()?;
    println!("on_background: {out:?}");
    db.close().wait()?;
    println!("closed after {:.2} s total", t0.elapsed().as_secs_f64());
    Ok(())
}

/// The previous app session: writes 300 posts with fast syncs, then dies without
/// closing, so its commits are still in the WAL at the next launch.
fn previous_session(path: &Path) -> Res<()> {
    let db = Database::open_for::<Post>(path, StoreOptions::default())?;
    futures::executor::block_on(db.write(|txn| {
        for i in 0..300 {
            let post = Post::builder()
                .id(format!("old-{i}"))
                .title(format!("Archived post {i}"))
                .priority(i % 100)
                .author(Author::builder().name("Ada").build())
                .build();
            txn.insert(&post)?;
        }
        Ok(())
    }))?;
    // Killed by the OS: no close(), no checkpoint.
    std::process::exit(0);
}
