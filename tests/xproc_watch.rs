//! Two real processes on one file, with or without `share_changes`: process B
//! (this test) holds a live query and **does not read**; process A (this test
//! binary run again, as `watch_writer`) commits. B's live query must show A's
//! commit by itself — found by a watch on the database's files that runs while a
//! subscription is live — and the watch must end with the last subscription and
//! at close, leaving no thread or descriptor behind. How fast is the `xproc`
//! bench's business; the tests bound only that the delivery needs no read.

use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use keel::prelude::*;
use keel::Update;
use keel_example_blog::blog::Post;

mod xproc;
use xproc::Writer;

/// How long B waits for a delivery it must get without reading. The bug this
/// guards against left B stale indefinitely (still 1 object 3 s after A's
/// commit); the watch delivers in milliseconds, so 2 s only has to outlast a
/// loaded machine, not the mechanism.
const BY_ITSELF: Duration = Duration::from_secs(2);

/// What other waits allow (a first delivery, a thread ending on a busy machine).
const WAIT: Duration = Duration::from_secs(30);

fn opts(share: bool) -> StoreOptions {
    StoreOptions::default().share_changes(share)
}

/// Process A: opens the database named by the writer variables and runs one
/// command per stdin line. Without them (a normal test run) it does nothing.
#[test]
fn watch_writer() {
    let Some((path, share)) = xproc::writer_role() else {
        return;
    };
    let db = Database::open_for::<Post>(&path, opts(share)).unwrap();
    xproc::serve(|w| match *w {
        // `n` posts in one transaction.
        ["bulk", prefix, n] => {
            let (prefix, n) = (prefix.to_string(), n.parse::<i32>().unwrap());
            db.write(move |t| {
                for i in 0..n {
                    let p = Post::builder()
                        .id(format!("{prefix}{i}"))
                        .priority(i + 1)
                        .build();
                    t.insert(&p)?;
                }
                Ok(())
            })
            .wait()
        }
        _ => panic!("unknown command {w:?}"),
    });
    db.close().wait().unwrap();
}

/// A live query over every post; the ids of each delivery, by priority.
fn watch_all(db: &Database) -> (keel::Subscription, mpsc::Receiver<Vec<String>>) {
    let (tx, rx) = mpsc::channel();
    let sub = db
        .fetch::<Post>()
        .order_by(Post::priority().asc())
        .subscribe(move |u: Update<Post>| {
            let _ = tx.send(u.objects.iter().map(|p| p.id.clone()).collect());
        })
        .unwrap();
    (sub, rx)
}

/// B has a live query showing one post; A commits five more; B, reading
/// nothing, must receive all six within [`BY_ITSELF`].
fn another_process_commit_arrives_without_a_read(share: bool) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    let b = Database::open_for::<Post>(&path, opts(share)).unwrap();
    let p = Post::builder().id("b0").priority(0).build();
    b.write(move |t| t.insert(&p).map(|_| ())).wait().unwrap();
    let (_sub, rx) = watch_all(&b);
    let mut last = rx.recv_timeout(WAIT).unwrap();
    assert_eq!(last, ["b0"]);
    let mut a = Writer::spawn("watch_writer", &path, share);

    a.run("bulk a 5");
    let committed = Instant::now();
    let want = ["b0", "a0", "a1", "a2", "a3", "a4"];
    while last != want {
        let left = BY_ITSELF.saturating_sub(committed.elapsed());
        match rx.recv_timeout(left) {
            Ok(ids) => last = ids,
            Err(_) => panic!(
                "B's live query still shows {last:?} {:?} after A committed 5 posts \
                 (share_changes: {share}); B did not read",
                committed.elapsed()
            ),
        }
    }
    a.quit();
    b.close().wait().unwrap();
}

#[test]
fn without_sharing_another_process_commit_reaches_a_live_query_with_no_read() {
    another_process_commit_arrives_without_a_read(false);
}

#[test]
fn with_sharing_another_process_commit_reaches_a_live_query_with_no_read() {
    another_process_commit_arrives_without_a_read(true);
}

/// This process's inotify descriptors that watch `dir` itself or a file in it
/// (read from `/proc/self/fdinfo`: one `inotify wd:… ino:<hex> …` line per watch).
fn inotify_fds_on(dir: &Path) -> Vec<String> {
    use std::os::unix::fs::MetadataExt;
    let mut inodes: Vec<u64> = vec![std::fs::metadata(dir).unwrap().ino()];
    for e in std::fs::read_dir(dir).unwrap() {
        inodes.push(e.unwrap().metadata().unwrap().ino());
    }
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc/self/fd").unwrap() {
        let e = e.unwrap();
        let Ok(target) = std::fs::read_link(e.path()) else {
            continue; // closed since the listing
        };
        if target.to_string_lossy() != "anon_inode:inotify" {
            continue;
        }
        let fd = e.file_name().to_string_lossy().into_owned();
        let Ok(info) = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")) else {
            continue;
        };
        let watches_here = info.lines().any(|l| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix("ino:"))
                .and_then(|h| u64::from_str_radix(h, 16).ok())
                .is_some_and(|ino| inodes.contains(&ino))
        });
        if watches_here {
            found.push(fd);
        }
    }
    found
}

/// Wait (up to [`WAIT`]) until `dir` is watched or not.
fn wait_watched(dir: &Path, watched: bool) {
    let start = Instant::now();
    while inotify_fds_on(dir).is_empty() == watched {
        assert!(
            start.elapsed() < WAIT,
            "{} still {}watched after {:?}",
            dir.display(),
            if watched { "not " } else { "" },
            start.elapsed()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
#[test]
fn the_watch_runs_only_while_a_subscription_is_live_and_ends_at_close() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    let db = Database::open_for::<Post>(&path, opts(false)).unwrap();
    // Nothing live: nothing watched (a database nobody observes pays nothing).
    assert!(inotify_fds_on(dir.path()).is_empty());

    let (first, _rx1) = watch_all(&db);
    wait_watched(dir.path(), true);
    let (second, _rx2) = watch_all(&db);
    drop(first);
    // One subscription still live: still watched.
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(
        inotify_fds_on(dir.path()).len(),
        1,
        "one watch per database"
    );
    drop(second);
    wait_watched(dir.path(), false);

    // Live again, then closed with the subscription still held: the close ends
    // the watch before it returns.
    let (third, _rx3) = watch_all(&db);
    wait_watched(dir.path(), true);
    db.close().wait().unwrap();
    assert!(
        inotify_fds_on(dir.path()).is_empty(),
        "the close returned with the watch still open"
    );
    drop(third);

    // Without sharing no sidecar file is made for it.
    assert!(!dir.path().join("app.db-keelsig").exists());
}
