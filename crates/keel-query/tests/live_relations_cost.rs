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
