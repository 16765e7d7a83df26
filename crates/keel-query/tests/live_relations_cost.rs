//! The cost of a live list across a relation follows the changed objects, as it
//! does for plain live queries: a write to the referring collection that no open
//! list shows (neither before nor after) reads nothing again and delivers nothing.

use keel_example_blog::rel::{Author, Post};
use keel_query::{Database, StoreOptions};

fn open(dir: &tempfile::TempDir) -> Database {
    Database::open_for::<Post>(dir.path().join("live.db"), StoreOptions::default()).unwrap()
}

fn post(id: &str, author: &str, rank: i32) -> Post {
    Post::builder().id(id).author(author).rank(rank).build()
}

#[test]
fn item5_a_post_write_no_list_shows_rereads_no_list() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir);
    db.write(|t| {
        for a in 0..10 {
            t.insert(
                &Author::builder()
                    .id(format!("a{a}"))
                    .name(format!("A{a}"))
                    .build(),
            )?;
        }
        for p in 0..100 {
            t.insert(&post(&format!("p{p}"), &format!("a{}", p % 10), p))?;
        }
        Ok(())
    })
    .wait()
    .unwrap();
    // Ten lists, each of the posts ranked 0..10 apart: none shows rank 500.
    let subs: Vec<_> = (0..10)
        .map(|i| {
            db.fetch::<Post>()
                .filter(Post::rank().ge(i * 10) & Post::rank().lt(i * 10 + 10))
                .including(Post::author_ref())
                .subscribe(|_| {})
                .unwrap()
        })
        .collect();
    let before: Vec<_> = subs.iter().map(|s| s.stats()).collect();
    assert!(
        before.iter().all(|s| s.reads == 1 && s.deliveries == 1),
        "{before:?}"
    );
    // A post no list shows, inserted, updated to another rank no list shows, deleted.
    db.write(|t| t.insert(&post("x", "a1", 500)))
        .wait()
        .unwrap();
    db.write(|t| t.update(&post("x", "a2", 600)))
        .wait()
        .unwrap();
    db.write(|t| t.delete::<Post>(&"x".into())).wait().unwrap();
    let after: Vec<_> = subs.iter().map(|s| s.stats()).collect();
    assert_eq!(
        before, after,
        "a write no list shows re-read or delivered a list"
    );
    // A post one list shows: that list alone reads again and delivers.
    db.write(|t| t.update(&post("p15", "a3", 15)))
        .wait()
        .unwrap();
    let now: Vec<_> = subs.iter().map(|s| s.stats()).collect();
    for (i, s) in now.iter().enumerate() {
        let want = if i == 1 { (2, 2) } else { (1, 1) };
        assert_eq!((s.reads, s.deliveries), want, "list {i}: {s:?}");
    }
    // A post moving into a list from outside it reaches that list.
    db.write(|t| t.update(&post("p99", "a9", 25)))
        .wait()
        .unwrap();
    let moved: Vec<_> = subs.iter().map(|s| s.stats()).collect();
    assert_eq!((moved[2].reads, moved[2].deliveries), (2, 2), "{moved:?}");
    assert_eq!((moved[9].reads, moved[9].deliveries), (2, 2), "{moved:?}");
}

/// The lists of one database share one registry, indexed by their filters and
/// by the keys their rows name: a commit reaches only the lists it can change,
/// so a write no list shows costs the same with a thousand lists open as with
/// none.
#[test]
fn a_write_no_list_shows_visits_no_list() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir);
    db.write(|t| {
        for a in 0..20 {
            t.insert(
                &Author::builder()
                    .id(format!("a{a}"))
                    .name(format!("A{a}"))
                    .build(),
            )?;
        }
        for p in 0..200 {
            t.insert(&post(&format!("p{p}"), &format!("a{}", p / 10), p))?;
        }
        Ok(())
    })
    .wait()
    .unwrap();
    // Windows of ten ranks (each naming one author), one by equality, one with
    // a filter no index takes (a scan), one with none.
    let mut subs: Vec<_> = (0..20)
        .map(|i| {
            db.fetch::<Post>()
                .filter(Post::rank().ge(i * 10) & Post::rank().lt(i * 10 + 10))
                .including(Post::author_ref())
                .subscribe(|_| {})
                .unwrap()
        })
        .collect();
    subs.push(
        db.fetch::<Post>()
            .filter(Post::id().eq("p3"))
            .including(Post::author_ref())
            .subscribe(|_| {})
            .unwrap(),
    );
    subs.push(
        db.fetch::<Post>()
            .filter(Post::rank().ne(-7) & Post::id().ne("p0"))
            .limit(2)
            .including(Post::author_ref())
            .subscribe(|_| {})
            .unwrap(),
    );
    let visits = |subs: &[keel_query::IncludingSubscription]| -> Vec<u64> {
        subs.iter().map(|s| s.stats().visits).collect()
    };
    assert!(visits(&subs).iter().all(|v| *v == 0));
    let (ranged, by_id, scan) = (0..20, 20, 21);
    // A post outside every window (the scanning list's filter holds for it,
    // the equality's does not): only the scan is visited.
    db.write(|t| t.insert(&post("x", "a1", 5_000)))
        .wait()
        .unwrap();
    db.write(|t| t.update(&post("x", "a2", 6_000)))
        .wait()
        .unwrap();
    let v = visits(&subs);
    assert!(ranged.clone().all(|i| v[i] == 0), "{v:?}");
    assert_eq!((v[by_id], v[scan]), (0, 2), "{v:?}");
    // An author no list names: no list.
    db.write(|t| t.insert(&Author::builder().id("nobody").name("N").build()))
        .wait()
        .unwrap();
    assert_eq!(visits(&subs), v);
    // Renaming a3 (ranks 30..40) visits that window alone, and delivers it in
    // place (no read).
    let before = subs[3].stats();
    db.write(|t| t.update(&Author::builder().id("a3").name("Renamed").build()))
        .wait()
        .unwrap();
    let w = visits(&subs);
    for i in 0..subs.len() {
        let want = v[i] + u64::from(i == 3);
        assert_eq!(w[i], want, "list {i}: {w:?}");
    }
    let after = subs[3].stats();
    assert_eq!(
        (after.reads, after.deliveries),
        (before.reads, before.deliveries + 1)
    );
    // A post moving from one window to another visits both (and the scan).
    db.write(|t| t.update(&post("p55", "a5", 75)))
        .wait()
        .unwrap();
    let m = visits(&subs);
    for i in 0..subs.len() {
        let want = w[i] + u64::from(i == 5 || i == 7 || i == scan);
        assert_eq!(m[i], want, "list {i}: {m:?}");
    }
    // The moved post's author is found from its new window too: renaming a5
    // visits window 5 (its other posts) and window 7 (p55).
    db.write(|t| t.update(&Author::builder().id("a5").name("Five").build()))
        .wait()
        .unwrap();
    let r = visits(&subs);
    for i in 0..subs.len() {
        let want = m[i] + u64::from(i == 5 || i == 7);
        assert_eq!(r[i], want, "list {i}: {r:?}");
    }
    // Dropped lists are visited no more; the last one out leaves no hook.
    drop(subs);
    db.write(|t| t.update(&post("p1", "a0", 1))).wait().unwrap();
}
