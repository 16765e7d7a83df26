//! Live reads across relations follow another process's commits (where relations
//! it meets the cross-process feed): process B (this test) holds a live list of
//! posts with their authors and a live list filtered through the author;
//! process A (this test binary run again, as `relation_writer_process`, see
//! `xproc/mod.rs`) renames authors and adds a post. With
//! `share_changes`, B's lists update once A's commit is caught up; without it, at
//! B's next read through the database (as every live query does, see
//! `docs/subscriptions.md`).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use keel::prelude::*;
use keel_example_blog::rel::{Author, Post};

mod xproc;
use xproc::Writer;

const WAIT: Duration = Duration::from_secs(30);

fn options(share: bool) -> StoreOptions {
    StoreOptions::default().share_changes(share)
}

/// Process A: opens the database it is handed and runs one command per stdin
/// line. In a normal test run it does nothing.
#[test]
fn relation_writer_process() {
    let Some((path, share)) = xproc::writer_role() else {
        return;
    };
    let db = Database::open_for::<Post>(&path, options(share)).unwrap();
    xproc::serve(|w| match *w {
        ["author", id, name] => {
            let a = Author::builder().id(id).name(name).build();
            db.write(move |t| t.upsert(&a).map(|_| ())).wait()
        }
        ["post", id, author, rank] => {
            let p = Post::builder()
                .id(id)
                .author(author)
                .rank(rank.parse().unwrap())
                .build();
            db.write(move |t| t.upsert(&p).map(|_| ())).wait()
        }
        _ => panic!("unknown command {w:?}"),
    });
    db.close().wait().unwrap();
}

/// What a live list of `(post id, author name)` pairs last delivered.
type Shown = Arc<Mutex<Vec<(String, Option<String>)>>>;

fn pairs(rows: &[(Post, Option<Author>)]) -> Vec<(String, Option<String>)> {
    rows.iter()
        .map(|(p, a)| (p.id.clone(), a.as_ref().and_then(|a| a.name.clone())))
        .collect()
}

/// Wait until `shown` equals `want`; `poke` runs between looks (a read through
/// the database, for the handle without the feed).
fn wait_for(shown: &Shown, want: &[(&str, Option<&str>)], poke: &dyn Fn()) {
    let want: Vec<(String, Option<String>)> = want
        .iter()
        .map(|(p, a)| (p.to_string(), a.map(str::to_owned)))
        .collect();
    let start = Instant::now();
    loop {
        if *shown.lock().unwrap() == want {
            return;
        }
        assert!(
            start.elapsed() < WAIT,
            "the live list never showed {want:?}; it shows {:?}",
            shown.lock().unwrap()
        );
        poke();
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn live_lists_follow_the_other_process(share: bool) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rel.db");
    let b = Database::open_for::<Post>(&path, options(share)).unwrap();
    b.write(|t| {
        t.insert(&Author::builder().id("ada").name("Ada").build())?;
        t.insert(&Author::builder().id("bob").name("Bob").build())?;
        t.insert(&Post::builder().id("p1").author("ada").rank(1).build())?;
        t.insert(&Post::builder().id("p2").author("bob").rank(2).build())
            .map(|_| ())
    })
    .wait()
    .unwrap();
    // Every post with its author, and the posts whose author is named "Ada".
    let (all, ada): (Shown, Shown) = Default::default();
    let (a2, d2) = (all.clone(), ada.clone());
    let _all = b
        .fetch::<Post>()
        .order_by(Post::rank().asc())
        .including(Post::author_ref())
        .subscribe(move |u| *a2.lock().unwrap() = pairs(&u.objects))
        .unwrap();
    let _ada = b
        .fetch::<Post>()
        .order_by(Post::rank().asc())
        .including(Post::author_ref())
        .where_related(Author::name().eq("Ada"))
        .subscribe(move |u| *d2.lock().unwrap() = pairs(&u.objects))
        .unwrap();
    let poke = || {
        if !share {
            // Without the feed another process's commits are noticed at this
            // handle's next read through the database.
            b.fetch::<Post>().count().unwrap();
        }
    };
    wait_for(&all, &[("p1", Some("Ada")), ("p2", Some("Bob"))], &poke);
    wait_for(&ada, &[("p1", Some("Ada"))], &poke);

    let mut a = Writer::spawn("relation_writer_process", &path, share);
    // A referenced object only: the lists' rows stay, their author changes.
    a.run("author bob Ada");
    wait_for(&all, &[("p1", Some("Ada")), ("p2", Some("Ada"))], &poke);
    wait_for(&ada, &[("p1", Some("Ada")), ("p2", Some("Ada"))], &poke);
    // A referring object: a new row.
    a.run("post p3 ada 3");
    wait_for(
        &all,
        &[
            ("p1", Some("Ada")),
            ("p2", Some("Ada")),
            ("p3", Some("Ada")),
        ],
        &poke,
    );
    a.run("author ada Zoe");
    wait_for(&ada, &[("p2", Some("Ada"))], &poke);
    a.quit();
    b.close().wait().unwrap();
}

#[test]
fn live_lists_across_a_relation_follow_another_process_with_the_feed() {
    live_lists_follow_the_other_process(true);
}

#[test]
fn live_lists_across_a_relation_follow_another_process_without_the_feed() {
    live_lists_follow_the_other_process(false);
}
