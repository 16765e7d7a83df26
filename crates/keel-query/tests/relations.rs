//! References between collections on real SQLite files — delete
//! rules (cascade, nullify, restrict; chains and cycles), the `dangling: false`
//! check, prefetch with one read per relation, filters through a reference.

use keel_example_blog::rel::{Author, Comment, Node, Pin, Post, Shelf, Tag};
use keel_query::{Database, Error, StoreOptions, Value};

fn open(dir: &tempfile::TempDir) -> Database {
    Database::open_for::<Post>(dir.path().join("rel.db"), StoreOptions::default()).unwrap()
}

fn author(id: &str, name: &str) -> Author {
    Author::builder().id(id).name(name).build()
}

fn post(id: &str, author: &str) -> Post {
    Post::builder().id(id).title(id).author(author).build()
}

fn key(s: &str) -> Vec<Value> {
    vec![Value::from(s)]
}

#[test]
fn cascade_deletes_referring_objects_in_the_same_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir);
    db.write(|t| {
        t.insert(&author("ada", "Ada"))?;
        t.insert(&author("bob", "Bob"))?;
        t.insert(&post("p1", "ada"))?;
        t.insert(&post("p2", "ada"))?;
        t.insert(&post("p3", "bob"))?;
        // A comment on p1 goes with it: cascade through two levels.
        t.insert(&Comment::builder().id("c1").post("p1").text("hi").build())?;
        Ok(())
    })
    .wait()
    .unwrap();
    assert!(db
        .write(|t| t.delete::<Author>(&"ada".into()))
        .wait()
        .unwrap());
    let left: Vec<String> = db
        .fetch::<Post>()
        .all()
        .unwrap()
        .iter()
        .map(|p| p.id.clone())
        .collect();
    assert_eq!(left, ["p3"]);
    assert_eq!(db.fetch::<Comment>().count().unwrap(), 0);
    assert_eq!(db.fetch::<Author>().count().unwrap(), 1);
    // Deleting what is not there is `false`, as before.
    assert!(!db
        .write(|t| t.delete::<Author>(&"ada".into()))
        .wait()
        .unwrap());
}

#[test]
fn nullify_clears_to_one_and_to_many_references() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir);
    db.write(|t| {
        t.insert(&author("ada", "Ada"))?;
        t.insert(&author("ed", "Ed"))?;
        t.insert(&Tag::builder().id("rust").label("Rust").build())?;
        t.insert(&Tag::builder().id("db").label("DB").build())?;
        t.insert(
            &Post::builder()
                .id("p1")
                .author("ada")
                .editor("ed")
                .tags(["rust", "db", "rust"])
                .rank(7)
                .build(),
        )?;
        Ok(())
    })
    .wait()
    .unwrap();
    db.write(|t| {
        t.delete::<Author>(&"ed".into())?;
        t.delete::<Tag>(&"rust".into())
    })
    .wait()
    .unwrap();
    let p = db.get::<Post>(&"p1".into()).unwrap().unwrap();
    assert_eq!(p.editor, None);
    assert_eq!(p.tags, vec!["db".to_string()]);
    // Everything else is kept.
    assert_eq!((p.author.as_deref(), p.rank), (Some("ada"), 7));
}

#[test]
fn restrict_refuses_with_the_referring_objects_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir);
    db.write(|t| {
        t.insert(&author("ada", "Ada"))?;
        t.insert(&post("p1", "ada"))?;
        t.insert(&Pin::builder().id("pin1").author("ada").build())?;
        t.insert(&Pin::builder().id("pin2").author("ada").build())?;
        t.insert(&Tag::builder().id("rust").build())?;
        t.insert(&Shelf::builder().id("s1").tags(["rust"]).build())?;
        Ok(())
    })
    .wait()
    .unwrap();
    let err = db
        .write(|t| {
            let e = t.delete::<Author>(&"ada".into()).unwrap_err();
            // The transaction goes on: the refused delete left nothing behind
            // (the cascade to p1 was rolled back with it).
            assert_eq!(t.fetch::<Post>().count()?, 1);
            t.insert(&author("bob", "Bob"))?;
            Ok(e)
        })
        .wait()
        .unwrap();
    match &err {
        Error::Restricted {
            collection,
            key: k,
            referrers,
        } => {
            assert_eq!((collection.as_str(), k), ("rel.Author", &key("ada")));
            let mut r = referrers.clone();
            r.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
            assert_eq!(
                r,
                vec![
                    ("rel.Pin".to_string(), "author".to_string(), key("pin1")),
                    ("rel.Pin".to_string(), "author".to_string(), key("pin2")),
                ]
            );
        }
        other => panic!("expected Restricted, got {other:?}"),
    }
    assert!(err.to_string().contains("pin1"), "{err}");
    assert_eq!(db.fetch::<Author>().count().unwrap(), 2);
    assert_eq!(db.fetch::<Post>().count().unwrap(), 1);
    // To-many restrict.
    let e = db
        .write(|t| t.delete::<Tag>(&"rust".into()))
        .wait()
        .unwrap_err();
    assert!(matches!(e, Error::Restricted { .. }), "{e}");
    // Once the pins are gone the delete cascades.
    db.write(|t| {
        t.delete::<Pin>(&"pin1".into())?;
        t.delete::<Pin>(&"pin2".into())?;
        t.delete::<Author>(&"ada".into())
    })
    .wait()
    .unwrap();
    assert_eq!(db.fetch::<Post>().count().unwrap(), 0);
}

#[test]
fn cascade_follows_chains_and_stops_on_cycles() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir);
    // A cycle a -> b -> c -> a, plus a chain d -> c hanging off it, plus an
    // unrelated node.
    db.write(|t| {
        for (id, parent) in [("a", "c"), ("b", "a"), ("c", "b"), ("d", "c"), ("x", "")] {
            let mut n = Node::builder().id(id);
            if !parent.is_empty() {
                n = n.parent(parent);
            }
            t.insert(&n.build())?;
        }
        Ok(())
    })
    .wait()
    .unwrap();
    assert!(db.write(|t| t.delete::<Node>(&"b".into())).wait().unwrap());
    let left: Vec<String> = db
        .fetch::<Node>()
        .all()
        .unwrap()
        .iter()
        .map(|n| n.id.clone())
        .collect();
    assert_eq!(left, ["x"]);
    // A node referring to itself.
    db.write(|t| t.insert(&Node::builder().id("self").parent("self").build()))
        .wait()
        .unwrap();
    assert!(db
        .write(|t| t.delete::<Node>(&"self".into()))
        .wait()
        .unwrap());
    assert_eq!(db.fetch::<Node>().count().unwrap(), 1);
}

#[test]
fn cascade_of_ten_thousand_objects_is_one_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir);
    const N: usize = 10_000;
    db.write(|t| {
        t.insert(&Node::builder().id("n0").build())?;
        for i in 1..N {
            // Half a chain, half a fan: depth and breadth both.
            let parent = if i % 2 == 0 {
                format!("n{}", i - 1)
            } else {
                "n0".to_string()
            };
            t.insert(&Node::builder().id(format!("n{i}")).parent(parent).build())?;
        }
        Ok(())
    })
    .wait()
    .unwrap();
    assert_eq!(db.fetch::<Node>().count().unwrap(), N as u64);
    let deletes = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let commits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (d, c) = (deletes.clone(), commits.clone());
    let _hook = db.on_commit_changes(move |changes| {
        c.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        d.fetch_add(changes.len(), std::sync::atomic::Ordering::SeqCst);
    });
    db.write(|t| t.delete::<Node>(&"n0".into())).wait().unwrap();
    assert_eq!(db.fetch::<Node>().count().unwrap(), 0);
    assert_eq!(commits.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert_eq!(deletes.load(std::sync::atomic::Ordering::SeqCst), N);
}

#[test]
fn dangling_false_refuses_a_missing_target() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir);
    let e = db
        .write(|t| t.insert(&Comment::builder().id("c1").post("nope").build()))
        .wait()
        .unwrap_err();
    match &e {
        Error::DanglingReference {
            collection,
            field,
            target,
            key: missing,
            ..
        } => assert_eq!(
            (
                collection.as_str(),
                field.as_str(),
                target.as_str(),
                missing
            ),
            ("rel.Comment", "post", "rel.Post", &key("nope"))
        ),
        other => panic!("expected DanglingReference, got {other:?}"),
    }
    // Written in the same transaction, the target counts; an absent reference is
    // no reference.
    db.write(|t| {
        t.insert(&author("ada", "Ada"))?;
        t.insert(&post("p1", "ada"))?;
        t.insert(&Comment::builder().id("c1").post("p1").build())?;
        t.insert(&Comment::builder().id("c2").build())?;
        Ok(())
    })
    .wait()
    .unwrap();
    // An update to a missing target is refused too, and so is a change by fields.
    let e = db
        .write(|t| t.update(&Comment::builder().id("c1").post("gone").build()))
        .wait()
        .unwrap_err();
    assert!(matches!(e, Error::DanglingReference { .. }), "{e}");
    let e = db
        .write(|t| t.change_values("rel.Comment", &key("c1"), &[("post".into(), "gone".into())]))
        .wait()
        .unwrap_err();
    assert!(matches!(e, Error::DanglingReference { .. }), "{e}");
    // Dangling is allowed by default (Post.author declares nothing).
    db.write(|t| t.insert(&post("p2", "nobody")))
        .wait()
        .unwrap();
}

/// A database whose writer connection reports every statement it starts.
fn traced(dir: &tempfile::TempDir) -> (Database, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = log.clone();
    let opts = StoreOptions {
        statement_trace: Some(std::sync::Arc::new(move |sql: &str| {
            sink.lock().unwrap().push(sql.to_owned());
        })),
        ..StoreOptions::default()
    };
    let db = Database::open_for::<Post>(dir.path().join("trace.db"), opts).unwrap();
    (db, log)
}

/// The reads of `log` (statements that select from a collection table).
fn reads(log: &[String]) -> Vec<String> {
    log.iter()
        .filter(|s| s.trim_start().to_uppercase().starts_with("SELECT") && s.contains("\"rel."))
        .cloned()
        .collect()
}

#[test]
fn including_prefetches_in_one_read_per_relation() {
    let dir = tempfile::tempdir().unwrap();
    let (db, log) = traced(&dir);
    const POSTS: usize = 200;
    db.write(|t| {
        for a in 0..7 {
            t.insert(&author(&format!("a{a}"), &format!("Author {a}")))?;
        }
        for i in 0..POSTS {
            // Every 10th post names an author that does not exist.
            let a = if i % 10 == 9 {
                "ghost".to_string()
            } else {
                format!("a{}", i % 7)
            };
            t.insert(
                &Post::builder()
                    .id(format!("p{i:03}"))
                    .author(a)
                    .rank(i as i32)
                    .build(),
            )?;
        }
        t.insert(&Post::builder().id("zz-no-author").build())?;
        Ok(())
    })
    .wait()
    .unwrap();
    let (rows, statements) = db
        .write(move |t| {
            log.lock().unwrap().clear();
            let rows = t
                .fetch::<Post>()
                .order_by(Post::id().asc())
                .including(Post::author_ref())
                .all()?;
            let statements = reads(&log.lock().unwrap());
            Ok((rows, statements))
        })
        .wait()
        .unwrap();
    assert_eq!(
        statements.len(),
        2,
        "one read of posts, one of authors: {statements:#?}"
    );
    assert!(statements[1].contains("\"rel.Author\""), "{statements:#?}");
    assert_eq!(rows.len(), POSTS + 1);
    for (p, a) in &rows {
        match p.author.as_deref() {
            Some("ghost") | None => assert!(a.is_none(), "{p:?}"),
            Some(k) => {
                let a = a.as_ref().unwrap();
                assert_eq!(a.id, k);
                assert_eq!(
                    a.name.as_deref(),
                    Some(format!("Author {}", &k[1..]).as_str())
                );
            }
        }
    }
    // The same through the database (one read transaction, pooled connection).
    let again = db
        .fetch::<Post>()
        .order_by(Post::id().asc())
        .including(Post::author_ref())
        .all()
        .unwrap();
    assert_eq!(again, rows);
    // The generated handle reads each key from the decoded post
    // (`Relation::with_key`); one without that reader reads the bytes. Both
    // give the same pairs: absent, dangling and found keys alike.
    assert!(Post::author_ref().key_reader().is_some());
    let from_bytes: keel_schema::Relation<Post, Author> = keel_schema::Relation::new(
        Post::author_ref().path().clone(),
        Post::author_ref().target(),
        false,
    );
    assert!(from_bytes.key_reader().is_none());
    let by_bytes = db
        .fetch::<Post>()
        .order_by(Post::id().asc())
        .including(from_bytes)
        .all()
        .unwrap();
    assert_eq!(by_bytes, rows);
}

#[test]
fn including_a_to_many_relation_counts_and_orders_by_the_vector() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir);
    db.write(|t| {
        for id in ["rust", "db", "swift"] {
            t.insert(&Tag::builder().id(id).label(id.to_uppercase()).build())?;
        }
        t.insert(
            &Post::builder()
                .id("p1")
                .tags(["swift", "rust", "missing"])
                .build(),
        )?;
        t.insert(&Post::builder().id("p2").build())?;
        Ok(())
    })
    .wait()
    .unwrap();
    let rows = db
        .fetch::<Post>()
        .order_by(Post::id().asc())
        .including(Post::tags_ref())
        .all_many()
        .unwrap();
    let got: Vec<(String, Vec<String>)> = rows
        .iter()
        .map(|(p, ts)| (p.id.clone(), ts.iter().map(|t| t.id.clone()).collect()))
        .collect();
    assert_eq!(
        got,
        vec![
            (
                "p1".to_string(),
                vec!["swift".to_string(), "rust".to_string()]
            ),
            ("p2".to_string(), vec![]),
        ]
    );
    // A to-many relation has no single object.
    let e = db
        .fetch::<Post>()
        .including(Post::tags_ref())
        .all()
        .unwrap_err();
    assert!(matches!(e, Error::TypeMismatch { .. }), "{e}");
}

#[test]
fn filter_through_a_reference() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir);
    db.write(|t| {
        t.insert(&author("ada", "Ada"))?;
        t.insert(&author("alan", "Alan"))?;
        t.insert(&author("bob", "Bob"))?;
        for (id, a) in [
            ("p1", "ada"),
            ("p2", "bob"),
            ("p3", "alan"),
            ("p4", "ada"),
            ("p5", "nobody"),
        ] {
            t.insert(&post(id, a))?;
        }
        Ok(())
    })
    .wait()
    .unwrap();
    let ids = |ps: Vec<Post>| ps.into_iter().map(|p| p.id.clone()).collect::<Vec<_>>();
    let by_ada = db
        .fetch::<Post>()
        .filter_through(Post::author_ref().then(Author::name()).eq("Ada"))
        .unwrap()
        .order_by(Post::id().asc())
        .all()
        .unwrap();
    assert_eq!(ids(by_ada), ["p1", "p4"]);
    // Combined with other filters and through a range on the referenced side.
    let a_names = db
        .fetch::<Post>()
        .filter(Post::id().ne("p1"))
        .filter_through(Post::author_ref().then(Author::name()).lt("B"))
        .unwrap()
        .order_by(Post::id().asc())
        .all()
        .unwrap();
    assert_eq!(ids(a_names), ["p3", "p4"]);
    // In a write transaction the filter sees the transaction's own writes.
    let n = db
        .write(|t| {
            t.insert(&author("nobody", "Ada"))?;
            t.fetch::<Post>()
                .filter_through(Post::author_ref().then(Author::name()).eq("Ada"))?
                .count()
        })
        .wait()
        .unwrap();
    assert_eq!(n, 3);
    // No match on the referenced side: nothing.
    let none = db
        .fetch::<Post>()
        .filter_through(Post::author_ref().then(Author::name()).eq("Zed"))
        .unwrap()
        .count()
        .unwrap();
    assert_eq!(none, 0);
}

/// Exists over a to-many reference: the posts with at least one tag matching,
/// combined with other filters; count over it is the length of `all_many`.
#[test]
fn filter_through_a_to_many_reference_keeps_objects_with_any_match() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir);
    db.write(|t| {
        for (id, label) in [("r", "RUST"), ("s", "SWIFT"), ("k", "KOTLIN")] {
            t.insert(&Tag::builder().id(id).label(label).build())?;
        }
        t.insert(&Post::builder().id("p1").tags(["s", "r"]).rank(1).build())?;
        t.insert(&Post::builder().id("p2").tags(["k"]).rank(2).build())?;
        t.insert(&Post::builder().id("p3").tags(["gone", "r"]).rank(3).build())?;
        t.insert(&Post::builder().id("p4").rank(4).build())?;
        Ok(())
    })
    .wait()
    .unwrap();
    let ids = |f: keel_query::Fetch<'_, Post>| {
        f.order_by(Post::id().asc())
            .all()
            .unwrap()
            .iter()
            .map(|p| p.id.clone())
            .collect::<Vec<_>>()
    };
    let rust = db
        .fetch::<Post>()
        .filter_through(Post::tags_ref().then(Tag::label()).eq("RUST"))
        .unwrap();
    assert_eq!(ids(rust), ["p1", "p3"]);
    let rust_early = db
        .fetch::<Post>()
        .filter(Post::rank().lt(3))
        .filter_through(Post::tags_ref().then(Tag::label()).eq("RUST"))
        .unwrap();
    assert_eq!(ids(rust_early), ["p1"]);
    let none = db
        .fetch::<Post>()
        .filter_through(Post::tags_ref().then(Tag::label()).eq("COBOL"))
        .unwrap();
    assert!(ids(none).is_empty());
    let counts: Vec<usize> = db
        .fetch::<Post>()
        .order_by(Post::id().asc())
        .including(Post::tags_ref())
        .all_many()
        .unwrap()
        .iter()
        .map(|(_, ts)| ts.len())
        .collect();
    assert_eq!(counts, [2, 1, 1, 0]);
}

type Pairs = Vec<(Post, Option<Author>)>;

/// A live list of posts with their authors, and every delivery it got.
type Deliveries = std::sync::Arc<std::sync::Mutex<Vec<keel_query::IncludingUpdate<Post, Author>>>>;

fn live_list(db: &Database) -> (keel_query::IncludingSubscription, Deliveries) {
    let got = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let g = got.clone();
    let sub = db
        .fetch::<Post>()
        .filter(Post::rank().ge(0))
        .order_by(Post::rank().asc())
        .including(Post::author_ref())
        .subscribe(move |u| g.lock().unwrap().push(u))
        .unwrap();
    (sub, got)
}

#[test]
fn live_list_including_authors_updates_on_an_author_rename() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir);
    db.write(|t| {
        t.insert(&author("ada", "Ada"))?;
        t.insert(&author("bob", "Bob"))?;
        for (i, a) in ["ada", "bob", "ada", "carl"].iter().enumerate() {
            t.insert(
                &Post::builder()
                    .id(format!("p{i}"))
                    .author(*a)
                    .rank(10 * i as i32)
                    .build(),
            )?;
        }
        Ok(())
    })
    .wait()
    .unwrap();
    let (sub, got) = live_list(&db);
    assert_eq!(got.lock().unwrap().len(), 1);
    assert_eq!(got.lock().unwrap()[0].diff.inserted, vec![0, 1, 2, 3]);

    // Ada's rename updates the two posts that show her, nothing else.
    db.write(|t| t.update(&author("ada", "Ada Lovelace")))
        .wait()
        .unwrap();
    {
        let g = got.lock().unwrap();
        assert_eq!(g.len(), 2);
        let u = &g[1];
        assert_eq!(u.diff.updated, vec![0, 2]);
        assert!(u.diff.inserted.is_empty() && u.diff.removed.is_empty() && u.diff.moved.is_empty());
        assert_eq!(
            u.objects[0].1.as_ref().unwrap().name.as_deref(),
            Some("Ada Lovelace")
        );
        assert_eq!(
            u.objects[1].1.as_ref().unwrap().name.as_deref(),
            Some("Bob")
        );
    }
    // An author no shown post names changes: no delivery.
    db.write(|t| t.insert(&author("zed", "Zed")))
        .wait()
        .unwrap();
    assert_eq!(got.lock().unwrap().len(), 2);
    // The author a post named but who did not exist appears: that row updates.
    db.write(|t| t.insert(&author("carl", "Carl")))
        .wait()
        .unwrap();
    {
        let g = got.lock().unwrap();
        assert_eq!(g.len(), 3);
        assert_eq!(g[2].diff.updated, vec![3]);
        assert_eq!(
            g[2].objects[3].1.as_ref().unwrap().name.as_deref(),
            Some("Carl")
        );
    }
    // A new post moves into place.
    db.write(|t| t.insert(&Post::builder().id("p9").author("bob").rank(5).build()))
        .wait()
        .unwrap();
    assert_eq!(got.lock().unwrap()[3].diff.inserted, vec![1]);
    // Deleting Bob cascades to his posts: they leave the list.
    db.write(|t| t.delete::<Author>(&"bob".into()))
        .wait()
        .unwrap();
    {
        let g = got.lock().unwrap();
        let last = g.last().unwrap();
        let ids: Vec<&str> = last.objects.iter().map(|(p, _)| p.id.as_str()).collect();
        assert_eq!(ids, ["p0", "p2", "p3"]);
        assert_eq!(last.diff.removed, vec![1, 2]);
    }
    let n = got.lock().unwrap().len();
    drop(sub);
    db.write(|t| t.update(&author("ada", "Ada again")))
        .wait()
        .unwrap();
    assert_eq!(
        got.lock().unwrap().len(),
        n,
        "no delivery after the subscription ended"
    );
}

/// Replays `delivered` (each diff must rebuild its delivery from the one
/// before, kept in `applied`), then checks that the list shown last equals
/// `fresh`: posts of equal rank may come in either order, so the pairs are
/// compared as sets and the ranks in order.
fn check_live<X: Clone + PartialEq + std::fmt::Debug>(
    delivered: &[(&Vec<(Post, X)>, &keel_query::Diff)],
    applied: &mut Vec<(Post, X)>,
    fresh: &[(Post, X)],
) -> Result<(), proptest::test_runner::TestCaseError> {
    for (objects, diff) in delivered {
        *applied = diff.apply(applied, |i| objects[i].clone());
        proptest::prop_assert_eq!(&*applied, *objects);
    }
    let set = |v: &[(Post, X)]| {
        let mut v: Vec<String> = v.iter().map(|x| format!("{x:?}")).collect();
        v.sort();
        v
    };
    let ranks = |v: &[(Post, X)]| v.iter().map(|(p, _)| p.rank).collect::<Vec<_>>();
    proptest::prop_assert_eq!(set(applied), set(fresh));
    proptest::prop_assert_eq!(ranks(applied), ranks(fresh));
    Ok(())
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 24, ..Default::default() })]

    /// After every random write to either collection, the live list equals a
    /// fresh `including` fetch, and applying the diffs in order rebuilds it.
    #[test]
    fn live_list_across_a_relation_equals_a_fresh_fetch(
        ops in proptest::collection::vec((0u8..5, 0u8..6, 0u8..4, 0i32..5), 1..25)
    ) {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        let (_sub, got) = live_list(&db);
        let mut applied: Pairs = Vec::new();
        let mut seen = 0;
        for (op, p, a, rank) in ops {
            let (pid, aid) = (format!("p{p}"), format!("a{a}"));
            db.write(move |t| {
                match op {
                    0 | 1 => {
                        t.upsert(&Post::builder().id(pid).author(aid).rank(rank).build())?;
                    }
                    2 => {
                        t.upsert(&author(&aid, &format!("name {rank}")))?;
                    }
                    3 => {
                        t.delete::<Post>(&pid)?;
                    }
                    _ => {
                        // Cascades to the author's posts.
                        t.delete::<Author>(&aid)?;
                    }
                }
                Ok(())
            })
            .wait()
            .unwrap();
            let fresh: Pairs = db
                .fetch::<Post>()
                .filter(Post::rank().ge(0))
                .order_by(Post::rank().asc())
                .including(Post::author_ref())
                .all()
                .unwrap();
            let g = got.lock().unwrap();
            let delivered: Vec<_> = g[seen..].iter().map(|u| (&u.objects, &u.diff)).collect();
            seen = g.len();
            check_live(&delivered, &mut applied, &fresh)?;
        }
    }
}

/// The schema the evolution tests move between: `P.a` (to-one) and `P.tags`
/// (to-many) plain (`attrs` empty) or declared with `attrs`.
fn evolving(attrs: &str) -> keel_schema::Schema {
    keel_schema::Schema::parse(
        &format!(
            r#"namespace ev;
               table A (entity) {{ id: string (primary); }}
               table P {{ id: string (primary); a: string {attrs}; tags: [string] {attrs}; }}
               root_type P;"#
        ),
        "ev.fbs",
    )
    .unwrap()
}

/// A file at `path` holding `objs` (collection, JSON) under the plain schema, closed.
fn stored_plain(path: &std::path::Path, objs: &[(&str, serde_json::Value)]) {
    let v1 = evolving("");
    let db = Database::open(path, v1.clone(), StoreOptions::default()).unwrap();
    let objs: Vec<(String, Vec<u8>)> = objs
        .iter()
        .map(|(c, j)| (c.to_string(), v1.reader(c).unwrap().encode_json(j).unwrap()))
        .collect();
    db.write(move |t| {
        for (c, o) in objs {
            t.insert_bytes(&c, o)?;
        }
        Ok(())
    })
    .wait()
    .unwrap();
    db.close().wait().unwrap();
}

/// A reference added to a collection that already holds objects: the file
/// reopens with the new schema, the reference column is filled from the
/// stored objects, and the delete rule applies to them at once.
#[test]
fn a_reference_added_to_existing_data_applies_its_rules() {
    use serde_json::json;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("evolve.db");
    stored_plain(
        &path,
        &[
            ("ev.A", json!({"id": "a1"})),
            ("ev.A", json!({"id": "a2"})),
            ("ev.P", json!({"id": "p1", "a": "a1"})),
            ("ev.P", json!({"id": "p2", "a": "a2"})),
            ("ev.P", json!({"id": "p3", "a": "a1"})),
        ],
    );
    let v2 = evolving(r#"(references: "A", on_delete: "cascade")"#);
    let db = Database::open(&path, v2, StoreOptions::default()).unwrap();
    db.wait_for_indexes().unwrap();
    assert!(db
        .write(|t| t.delete_key("ev.A", &key("a1")))
        .wait()
        .unwrap());
    let left: Vec<i64> = db
        .query("ev.P")
        .all()
        .unwrap()
        .iter()
        .map(|o| o.rowid)
        .collect();
    assert_eq!(left, [2], "p1 and p3 went with a1");
}

/// The untyped `Query::including` (what the FFI uses) gives the typed answer's
/// bytes, and names a field that is no reference as an unknown field.
#[test]
fn query_including_returns_the_same_objects_as_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir);
    db.write(|t| {
        t.insert(&author("ada", "Ada"))?;
        t.insert(&Tag::builder().id("x").build())?;
        t.insert(
            &Post::builder()
                .id("p1")
                .author("ada")
                .tags(["x", "nope", "x"])
                .build(),
        )?;
        t.insert(&post("p2", "ghost"))?;
        Ok(())
    })
    .wait()
    .unwrap();
    let typed = db
        .fetch::<Post>()
        .including(Post::author_ref())
        .all()
        .unwrap();
    let rows = db.query("rel.Post").including("author").unwrap();
    assert_eq!(rows.len(), typed.len());
    for (r, (p, a)) in rows.iter().zip(&typed) {
        assert_eq!(Post::decode(&r.object.bytes).unwrap(), *p);
        let related: Vec<Author> = r
            .related
            .iter()
            .map(|o| Author::decode(&o.bytes).unwrap())
            .collect();
        assert_eq!(related.first(), a.as_ref());
    }
    let tags = db.query("rel.Post").including("tags").unwrap();
    assert_eq!(tags[0].related.len(), 2, "both x keys, not the missing one");
    let e = db.query("rel.Post").including("title").unwrap_err();
    assert!(matches!(e, Error::UnknownField { .. }), "{e}");
}

/// Ordering by a referenced field: absent authors first ascending, ties in
/// the fetch's order, limit and offset after the order; a live list ordered
/// so moves its rows when an author is renamed.
#[test]
fn order_by_a_referenced_field() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir);
    db.write(|t| {
        t.insert(&author("a", "Mia"))?;
        t.insert(&author("b", "Ada"))?;
        t.insert(&author("c", "Zoe"))?;
        for (id, a, rank) in [
            ("p1", "a", 1),
            ("p2", "b", 2),
            ("p3", "c", 3),
            ("p4", "ghost", 4),
            ("p5", "b", 5),
        ] {
            t.insert(&Post::builder().id(id).author(a).rank(rank).build())?;
        }
        Ok(())
    })
    .wait()
    .unwrap();
    let ids = |rows: Pairs| {
        rows.into_iter()
            .map(|(p, _)| p.id.clone())
            .collect::<Vec<_>>()
    };
    let asc = db
        .fetch::<Post>()
        .order_by(Post::rank().asc())
        .including(Post::author_ref())
        .order_by_related(Author::name(), false)
        .all()
        .unwrap();
    assert_eq!(ids(asc), ["p4", "p2", "p5", "p1", "p3"]);
    let desc_window = db
        .fetch::<Post>()
        .order_by(Post::rank().desc())
        .limit(2)
        .offset(1)
        .including(Post::author_ref())
        .order_by_related(Author::name(), true)
        .all()
        .unwrap();
    // Zoe p3, Mia p1, Ada p5 then p2 (rank desc), absent p4: window [1, 3).
    assert_eq!(ids(desc_window), ["p1", "p5"]);

    let got = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let g = got.clone();
    let _sub = db
        .fetch::<Post>()
        .order_by(Post::rank().asc())
        .including(Post::author_ref())
        .order_by_related(Author::name(), false)
        .subscribe(move |u| g.lock().unwrap().push(u))
        .unwrap();
    // Zoe becomes Abe: p3 moves to just after the post without an author.
    db.write(|t| t.update(&author("c", "Abe"))).wait().unwrap();
    let g = got.lock().unwrap();
    let last = g.last().unwrap();
    assert_eq!(ids(last.objects.clone()), ["p4", "p3", "p2", "p5", "p1"]);
    assert!(
        !last.diff.moved.is_empty() && last.diff.updated.contains(&1),
        "{:?}",
        last.diff
    );
}

/// A commit that lands while a live list is being set up is never lost: the
/// list's last delivery equals a fresh fetch once the writes are done. Each
/// round renames an author from another thread while the list subscribes.
#[test]
fn a_commit_during_subscribe_reaches_the_live_list() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir);
    db.write(|t| {
        t.insert(&author("ada", "Ada"))?;
        for i in 0..20 {
            t.insert(
                &Post::builder()
                    .id(format!("p{i}"))
                    .author("ada")
                    .rank(i)
                    .build(),
            )?;
        }
        Ok(())
    })
    .wait()
    .unwrap();
    for round in 0..300 {
        let renamer = {
            let db = db.clone();
            std::thread::spawn(move || {
                db.write(move |t| t.update(&author("ada", &format!("Ada {round}"))))
                    .wait()
                    .unwrap();
            })
        };
        let (sub, got) = live_list(&db);
        renamer.join().unwrap();
        // A write after the rename, not touching the list: when it resolves, every
        // earlier commit's hooks have run.
        db.write(|t| t.upsert(&author("zed", "Zed")))
            .wait()
            .unwrap();
        let last = got.lock().unwrap().last().unwrap().objects[0]
            .1
            .as_ref()
            .and_then(|a| a.name.clone());
        assert_eq!(
            last.as_deref(),
            Some(format!("Ada {round}").as_str()),
            "round {round}: the rename was lost"
        );
        drop(sub);
    }
}

/// A schema change that declares an existing field a `dangling: false`
/// reference is checked against the data: a stored object naming a missing
/// target refuses the open with the typed error and changes nothing (the old
/// schema still opens, every object intact); data that holds opens.
#[test]
fn a_reference_declared_over_dangling_data_refuses_the_schema_change() {
    use serde_json::json;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("strict.db");
    stored_plain(
        &path,
        &[
            ("ev.A", json!({"id": "a1"})),
            ("ev.P", json!({"id": "p1", "a": "a1"})),
            ("ev.P", json!({"id": "p2", "a": "gone"})),
        ],
    );
    let strict = evolving(r#"(references: "A", dangling: false)"#);
    match Database::open(&path, strict.clone(), StoreOptions::default()) {
        Err(Error::DanglingReference {
            collection,
            field,
            target,
            key,
            ..
        }) => {
            assert_eq!(
                (collection.as_str(), field.as_str(), target.as_str()),
                ("ev.P", "a", "ev.A")
            );
            assert_eq!(key, vec![Value::from("gone")]);
        }
        other => panic!("expected DanglingReference, got {:?}", other.map(|_| ())),
    }
    // Nothing changed: the old schema opens and both posts are there.
    let db = Database::open(&path, evolving(""), StoreOptions::default()).unwrap();
    assert_eq!(db.query("ev.P").count().unwrap(), 2);
    // Repaired data takes the new schema.
    db.write(|t| t.delete_key("ev.P", &key("p2")).map(|_| ()))
        .wait()
        .unwrap();
    db.close().wait().unwrap();
    drop(db);
    let db = Database::open(&path, strict, StoreOptions::default()).unwrap();
    assert_eq!(db.query("ev.P").count().unwrap(), 1);
    db.close().wait().unwrap();
}

type ManyPairs = Vec<(Post, Vec<Tag>)>;

/// A live list of posts with their tags (to-many), and every delivery it got.
type ManyDeliveries =
    std::sync::Arc<std::sync::Mutex<Vec<keel_query::IncludingManyUpdate<Post, Tag>>>>;

fn live_tags(db: &Database) -> (keel_query::IncludingSubscription, ManyDeliveries) {
    let got = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let g = got.clone();
    let sub = db
        .fetch::<Post>()
        .filter(Post::rank().ge(0))
        .order_by(Post::rank().asc())
        .including(Post::tags_ref())
        .subscribe_many(move |u| g.lock().unwrap().push(u))
        .unwrap();
    (sub, got)
}

fn tag(id: &str, label: &str) -> Tag {
    Tag::builder().id(id).label(label).build()
}

fn labels(u: &keel_query::IncludingManyUpdate<Post, Tag>, row: usize) -> Vec<String> {
    u.objects[row]
        .1
        .iter()
        .map(|t| t.label.clone().unwrap_or_default())
        .collect()
}

#[test]
fn a_live_list_across_a_to_many_reference_follows_the_tags() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir);
    db.write(|t| {
        t.insert(&tag("rust", "Rust"))?;
        t.insert(&tag("db", "DB"))?;
        for (i, tags) in [
            vec!["rust", "db"],
            vec!["db"],
            vec![],
            vec!["swift", "rust"],
        ]
        .into_iter()
        .enumerate()
        {
            t.insert(
                &Post::builder()
                    .id(format!("p{i}"))
                    .tags(tags)
                    .rank(10 * i as i32)
                    .build(),
            )?;
        }
        Ok(())
    })
    .wait()
    .unwrap();
    let (sub, got) = live_tags(&db);
    {
        let g = got.lock().unwrap();
        assert_eq!(g.len(), 1);
        assert_eq!(g[0].diff.inserted, vec![0, 1, 2, 3]);
        assert_eq!(labels(&g[0], 0), ["Rust", "DB"]);
        assert_eq!(labels(&g[0], 3), ["Rust"], "a missing tag is left out");
    }
    // Relabelling "db" updates the two posts that hold it, in place.
    db.write(|t| t.update(&tag("db", "Databases")))
        .wait()
        .unwrap();
    {
        let g = got.lock().unwrap();
        assert_eq!(g.len(), 2);
        assert_eq!(g[1].diff.updated, vec![0, 1]);
        assert!(g[1].diff.inserted.is_empty() && g[1].diff.removed.is_empty());
        assert_eq!(labels(&g[1], 0), ["Rust", "Databases"]);
        assert_eq!(labels(&g[1], 1), ["Databases"]);
    }
    // A tag no shown post holds: no delivery.
    db.write(|t| t.insert(&tag("go", "Go"))).wait().unwrap();
    assert_eq!(got.lock().unwrap().len(), 2);
    // The missing tag a post holds appears, in the vector's order.
    db.write(|t| t.insert(&tag("swift", "Swift")))
        .wait()
        .unwrap();
    {
        let g = got.lock().unwrap();
        assert_eq!(g.len(), 3);
        assert_eq!(g[2].diff.updated, vec![3]);
        assert_eq!(labels(&g[2], 3), ["Swift", "Rust"]);
    }
    // Deleting "rust" nullifies it in the posts (they change): both rows update.
    db.write(|t| t.delete::<Tag>(&"rust".into()))
        .wait()
        .unwrap();
    {
        let g = got.lock().unwrap();
        let last = g.last().unwrap();
        assert_eq!(last.diff.updated, vec![0, 3]);
        assert_eq!(labels(last, 0), ["Databases"]);
        assert_eq!(labels(last, 3), ["Swift"]);
        assert_eq!(last.objects[0].0.tags, ["db"]);
    }
    let n = got.lock().unwrap().len();
    drop(sub);
    db.write(|t| t.update(&tag("db", "DB again")))
        .wait()
        .unwrap();
    assert_eq!(got.lock().unwrap().len(), n, "no delivery after the end");
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 24, ..Default::default() })]

    /// The to-many twin of `live_list_across_a_relation_equals_a_fresh_fetch`:
    /// random writes to posts (random tag vectors, repeats and missing tags
    /// included) and tags; the live list equals a fresh `all_many`, and the
    /// diffs rebuild it.
    #[test]
    fn a_live_to_many_list_equals_a_fresh_fetch(
        ops in proptest::collection::vec(
            (0u8..5, 0u8..6, proptest::collection::vec(0u8..4, 0..4), 0i32..5),
            1..25,
        )
    ) {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        let (_sub, got) = live_tags(&db);
        let mut applied: ManyPairs = Vec::new();
        let mut seen = 0;
        for (op, p, tags, rank) in ops {
            let pid = format!("p{p}");
            let tags: Vec<String> = tags.iter().map(|t| format!("t{t}")).collect();
            let tid = tags.first().cloned().unwrap_or_else(|| "t0".to_string());
            db.write(move |t| {
                match op {
                    0 | 1 => {
                        t.upsert(&Post::builder().id(pid).tags(tags).rank(rank).build())?;
                    }
                    2 => {
                        t.upsert(&tag(&tid, &format!("label {rank}")))?;
                    }
                    3 => {
                        t.delete::<Post>(&pid)?;
                    }
                    _ => {
                        // Nullifies the tag in the posts holding it.
                        t.delete::<Tag>(&tid)?;
                    }
                }
                Ok(())
            })
            .wait()
            .unwrap();
            let fresh: ManyPairs = db
                .fetch::<Post>()
                .filter(Post::rank().ge(0))
                .order_by(Post::rank().asc())
                .including(Post::tags_ref())
                .all_many()
                .unwrap();
            let g = got.lock().unwrap();
            let delivered: Vec<_> = g[seen..].iter().map(|u| (&u.objects, &u.diff)).collect();
            seen = g.len();
            check_live(&delivered, &mut applied, &fresh)?;
        }
    }
}

/// A reference declared `dangling: false` over data naming missing objects,
/// backfilled by a rule in a migration of the same schema change: `Nullify`
/// clears the missing keys (to-one and to-many), `Delete` drops the objects
/// naming one, `Key` names a replacement instead. Valid keys stay.
#[test]
fn a_migration_backfills_dangling_references_by_a_rule() {
    use keel_query::{Backfill, Migrator};
    use serde_json::json;
    let cases = [
        (
            Backfill::Nullify,
            2,
            vec![
                json!({"id": "p1", "a": "a1", "tags": ["a1"]}),
                json!({"id": "p2", "tags": []}),
                json!({"id": "p3"}),
            ],
        ),
        (Backfill::Delete, 2, vec![json!({"id": "p3"})]),
        (
            Backfill::Key(Value::from("a1")),
            2,
            vec![
                json!({"id": "p1", "a": "a1", "tags": ["a1", "a1"]}),
                json!({"id": "p2", "a": "a1", "tags": []}),
                json!({"id": "p3"}),
            ],
        ),
    ];
    for (i, (rule, changed, want)) in cases.into_iter().enumerate() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(format!("backfill{i}.db"));
        stored_plain(
            &path,
            &[
                ("ev.A", json!({"id": "a1"})),
                (
                    "ev.P",
                    json!({"id": "p1", "a": "a1", "tags": ["a1", "gone"]}),
                ),
                ("ev.P", json!({"id": "p2", "a": "gone", "tags": []})),
                ("ev.P", json!({"id": "p3"})),
            ],
        );
        let strict = evolving(r#"(references: "A", dangling: false)"#);
        let counts = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let c2 = counts.clone();
        let migrator = Migrator::new().register("backfill P's references", move |m| {
            let a = m.backfill_references("ev.P", "a", rule.clone())?;
            let tags = m.backfill_references("ev.P", "tags", rule.clone())?;
            c2.lock().unwrap().push(a + tags);
            Ok(())
        });
        let db = Database::open_migrating(&path, strict.clone(), migrator, StoreOptions::default())
            .unwrap_or_else(|e| panic!("case {i}: {e}"));
        assert_eq!(*counts.lock().unwrap(), vec![changed], "case {i}");
        let reader = strict.reader("ev.P").unwrap();
        let got: Vec<serde_json::Value> = db
            .query("ev.P")
            .all()
            .unwrap()
            .iter()
            .map(|o| reader.read(&o.bytes).unwrap().to_json().unwrap())
            .collect();
        let norm = |v: &serde_json::Value| {
            let mut v = v.clone();
            if v.get("tags") == Some(&json!([])) {
                v.as_object_mut().unwrap().remove("tags");
            }
            v
        };
        assert_eq!(
            got.iter().map(norm).collect::<Vec<_>>(),
            want.iter().map(norm).collect::<Vec<_>>(),
            "case {i}"
        );
        // The rule holds from now on: a write naming a missing object is refused.
        let bad = reader
            .encode_json(&json!({"id": "p9", "a": "nobody"}))
            .unwrap();
        let e = db
            .write(move |t| t.insert_bytes("ev.P", bad).map(|_| ()))
            .wait()
            .unwrap_err();
        assert!(matches!(e, Error::DanglingReference { .. }), "{e}");
        db.close().wait().unwrap();
    }
}

/// The count over a relation as a query: for each post, how many of its keys
/// name a tag that exists (repeats counted, missing ones not), as `all_many`
/// lengths say, in two reads of which the second reads the tags' key column
/// only; to-one gives 0 or 1.
#[test]
fn counts_over_a_relation_read_keys_not_objects() {
    let dir = tempfile::tempdir().unwrap();
    let (db, log) = traced(&dir);
    db.write(|t| {
        for id in ["rust", "db", "swift"] {
            t.insert(&tag(id, id))?;
        }
        t.insert(&author("ada", "Ada"))?;
        for (i, tags) in [
            vec!["swift", "rust", "missing"],
            vec![],
            vec!["db", "db"],
            vec!["gone"],
        ]
        .into_iter()
        .enumerate()
        {
            let author = if i % 2 == 0 { "ada" } else { "nobody" };
            t.insert(
                &Post::builder()
                    .id(format!("p{i}"))
                    .tags(tags)
                    .author(author)
                    .rank(i as i32)
                    .build(),
            )?;
        }
        Ok(())
    })
    .wait()
    .unwrap();
    let fetch = || db.fetch::<Post>().order_by(Post::rank().asc());
    // Traced on the writer's connection: counted inside a write transaction.
    let (counts, traced) = db
        .write(move |t| {
            log.lock().unwrap().clear();
            let counts: Vec<(String, u64)> = t
                .fetch::<Post>()
                .order_by(Post::rank().asc())
                .including(Post::tags_ref())
                .counts()?
                .into_iter()
                .map(|(p, n)| (p.id.clone(), n))
                .collect();
            let traced = reads(&log.lock().unwrap());
            Ok((counts, traced))
        })
        .wait()
        .unwrap();
    assert_eq!(
        counts,
        [("p0", 2), ("p1", 0), ("p2", 2), ("p3", 0)].map(|(p, n)| (p.to_string(), n))
    );
    let lengths: Vec<u64> = fetch()
        .including(Post::tags_ref())
        .all_many()
        .unwrap()
        .iter()
        .map(|(_, ts)| ts.len() as u64)
        .collect();
    assert_eq!(counts.iter().map(|(_, n)| *n).collect::<Vec<_>>(), lengths);
    assert_eq!(traced.len(), 2, "{traced:?}");
    assert!(
        traced[1].contains("SELECT k0 FROM \"rel.Tag\""),
        "the tags' key column only: {traced:?}"
    );
    let authors: Vec<u64> = fetch()
        .filter(Post::rank().lt(4))
        .including(Post::author_ref())
        .counts()
        .unwrap()
        .iter()
        .map(|(_, n)| *n)
        .collect();
    assert_eq!(authors, [1, 0, 1, 0]);
}

/// A live window ordered by a referenced field: renaming the author of a post
/// outside the window so that it sorts first brings that post in. (Before:
/// only the shown rows' authors counted as relevant, and the rename was lost.)
#[test]
fn a_live_window_ordered_by_a_referenced_field_sees_renames_outside_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir);
    db.write(|t| {
        t.insert(&author("a", "Ada"))?;
        t.insert(&author("z", "Zoe"))?;
        t.insert(&Post::builder().id("pa").author("a").rank(1).build())?;
        t.insert(&Post::builder().id("pz").author("z").rank(2).build())
    })
    .wait()
    .unwrap();
    let got = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let g = got.clone();
    let _sub = db
        .fetch::<Post>()
        .limit(1)
        .including(Post::author_ref())
        .order_by_related(Author::name(), false)
        .subscribe(move |u: keel_query::IncludingUpdate<Post, Author>| {
            g.lock().unwrap().push(
                u.objects
                    .iter()
                    .map(|(p, _)| p.id.clone())
                    .collect::<Vec<_>>(),
            )
        })
        .unwrap();
    db.write(|t| t.update(&author("z", "Abe"))).wait().unwrap();
    assert_eq!(*got.lock().unwrap(), [vec!["pa"], vec!["pz"]]);
}

/// A live filter through a reference: the posts whose author is named "Ada",
/// kept current when an author is renamed into or out of the filter, with
/// row-level diffs; to-many: the posts holding at least one tag labelled "hot".
#[test]
fn a_live_filter_through_a_reference_follows_renames() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir);
    db.write(|t| {
        t.insert(&author("a1", "Ada"))?;
        t.insert(&author("a2", "Bob"))?;
        t.insert(&tag("t1", "hot"))?;
        t.insert(&tag("t2", "cold"))?;
        for (i, (a, tags)) in [("a1", vec!["t2"]), ("a2", vec!["t1", "t2"]), ("a1", vec![])]
            .into_iter()
            .enumerate()
        {
            t.insert(
                &Post::builder()
                    .id(format!("p{i}"))
                    .author(a)
                    .tags(tags)
                    .rank(i as i32)
                    .build(),
            )?;
        }
        Ok(())
    })
    .wait()
    .unwrap();
    let by_ada = || {
        db.fetch::<Post>()
            .order_by(Post::rank().asc())
            .including(Post::author_ref())
            .where_related(Author::name().eq("Ada"))
    };
    let ids = |rows: &Pairs| rows.iter().map(|(p, _)| p.id.clone()).collect::<Vec<_>>();
    assert_eq!(ids(&by_ada().all().unwrap()), ["p0", "p2"]);
    let got: Deliveries = Default::default();
    let g = got.clone();
    let _sub = by_ada()
        .subscribe(move |u| g.lock().unwrap().push(u))
        .unwrap();
    // Bob becomes Ada: his post enters the list.
    db.write(|t| t.update(&author("a2", "Ada"))).wait().unwrap();
    {
        let g = got.lock().unwrap();
        assert_eq!(ids(&g[1].objects), ["p0", "p1", "p2"]);
        assert_eq!(g[1].diff.inserted, vec![1]);
    }
    // The first Ada is renamed away: her posts leave.
    db.write(|t| t.update(&author("a1", "Ann"))).wait().unwrap();
    {
        let g = got.lock().unwrap();
        assert_eq!(ids(&g[2].objects), ["p1"]);
        assert_eq!(g[2].diff.removed, vec![0, 2]);
    }
    // To-many: the posts with at least one hot tag; every tag is shown.
    let hot = || {
        db.fetch::<Post>()
            .order_by(Post::rank().asc())
            .including(Post::tags_ref())
            .where_related(Tag::label().eq("hot"))
    };
    let many = hot().all_many().unwrap();
    assert_eq!(
        many.iter()
            .map(|(p, ts)| (p.id.as_str(), ts.len()))
            .collect::<Vec<_>>(),
        [("p1", 2)]
    );
    let got: ManyDeliveries = Default::default();
    let g = got.clone();
    let _sub = hot()
        .subscribe_many(move |u| g.lock().unwrap().push(u))
        .unwrap();
    db.write(|t| t.update(&tag("t2", "hot"))).wait().unwrap();
    let g = got.lock().unwrap();
    let last = g.last().unwrap();
    assert_eq!(
        last.objects
            .iter()
            .map(|(p, _)| p.id.as_str())
            .collect::<Vec<_>>(),
        ["p0", "p1"]
    );
    assert_eq!(last.diff.inserted, vec![0]);
    assert_eq!(last.diff.updated, vec![1], "p1's second tag changed");
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 24, ..Default::default() })]

    /// A live window (limit 3) filtered and ordered through a reference stays
    /// equal to a fresh fetch after random writes to posts and authors.
    #[test]
    fn a_live_filtered_window_through_a_reference_equals_a_fresh_fetch(
        ops in proptest::collection::vec((0u8..5, 0u8..6, 0u8..4, 0i32..5), 1..25)
    ) {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        let list = || {
            db.fetch::<Post>()
                .order_by(Post::rank().asc())
                .limit(3)
                .including(Post::author_ref())
                .where_related(Author::name().ge("name 2"))
                .order_by_related(Author::name(), true)
        };
        let got: Deliveries = Default::default();
        let g = got.clone();
        let _sub = list().subscribe(move |u| g.lock().unwrap().push(u)).unwrap();
        let mut applied: Pairs = Vec::new();
        let mut seen = 0;
        for (op, p, a, rank) in ops {
            let (pid, aid) = (format!("p{p}"), format!("a{a}"));
            db.write(move |t| {
                match op {
                    0 | 1 => {
                        t.upsert(&Post::builder().id(pid).author(aid).rank(rank).build())?;
                    }
                    2 | 3 => {
                        t.upsert(&author(&aid, &format!("name {rank}")))?;
                    }
                    _ => {
                        t.delete::<Post>(&pid)?;
                    }
                }
                Ok(())
            })
            .wait()
            .unwrap();
            let fresh = list().all().unwrap();
            let g = got.lock().unwrap();
            for u in &g[seen..] {
                applied = u.diff.apply(&applied, |i| u.objects[i].clone());
                proptest::prop_assert_eq!(&applied, &u.objects);
            }
            seen = g.len();
            let live = g.last().map(|u| u.objects.clone()).unwrap_or_default();
            proptest::prop_assert_eq!(live, fresh);
        }
    }
}

/// The way back along a reference declared `inverse: "posts"`: each author
/// with the posts naming them (in rowid order), in two reads of which the
/// second goes through the reference's index column; an author nobody names
/// has none. Untyped too, and counted.
#[test]
fn an_inverse_navigates_back_to_the_referring_objects() {
    let dir = tempfile::tempdir().unwrap();
    let (db, log) = traced(&dir);
    db.write(|t| {
        t.insert(&author("ada", "Ada"))?;
        t.insert(&author("bob", "Bob"))?;
        t.insert(&author("cy", "Cy"))?;
        for (id, a) in [("p1", "ada"), ("p2", "bob"), ("p3", "ada"), ("p4", "ghost")] {
            t.insert(&Post::builder().id(id).author(a).build())?;
        }
        Ok(())
    })
    .wait()
    .unwrap();
    let (rows, traced) = db
        .write(move |t| {
            log.lock().unwrap().clear();
            let rows = t
                .fetch::<Author>()
                .order_by(Author::id().asc())
                .including_inverse(Author::posts_ref())?;
            Ok((rows, reads(&log.lock().unwrap())))
        })
        .wait()
        .unwrap();
    let got: Vec<(String, Vec<String>)> = rows
        .iter()
        .map(|(a, ps)| (a.id.clone(), ps.iter().map(|p| p.id.clone()).collect()))
        .collect();
    let want = |v: &[(&str, &[&str])]| -> Vec<(String, Vec<String>)> {
        v.iter()
            .map(|(a, ps)| (a.to_string(), ps.iter().map(|p| p.to_string()).collect()))
            .collect()
    };
    assert_eq!(
        got,
        want(&[("ada", &["p1", "p3"]), ("bob", &["p2"]), ("cy", &[])])
    );
    assert_eq!(traced.len(), 2, "{traced:?}");
    assert!(traced[1].contains("\"rel.Post\""), "{traced:?}");
    // Untyped, and the count over it.
    let untyped = db.query("rel.Author").including("posts").unwrap();
    assert_eq!(
        untyped.iter().map(|i| i.related.len()).collect::<Vec<_>>(),
        [2, 1, 0]
    );
    let counts: Vec<u64> = db
        .query("rel.Author")
        .count_including("posts")
        .unwrap()
        .into_iter()
        .map(|(_, n)| n)
        .collect();
    assert_eq!(counts, [2, 1, 0]);
    // To-many: the posts whose tags hold each tag (a repeat counted once).
    db.write(|t| {
        t.insert(&tag("db", "DB"))?;
        t.insert(&tag("go", "Go"))?;
        t.insert(&Post::builder().id("t1").tags(["db", "db", "rust"]).build())?;
        t.insert(&Post::builder().id("t2").tags(["db"]).build())
    })
    .wait()
    .unwrap();
    let tagged: Vec<(String, Vec<String>)> = db
        .fetch::<Tag>()
        .order_by(Tag::id().asc())
        .including_inverse(Tag::posts_ref())
        .unwrap()
        .iter()
        .map(|(t, ps)| (t.id.clone(), ps.iter().map(|p| p.id.clone()).collect()))
        .collect();
    assert_eq!(tagged, want(&[("db", &["t1", "t2"]), ("go", &[])]));
    // A name that is neither a reference nor an inverse: a typed error.
    let e = db.query("rel.Author").including("nope").unwrap_err();
    assert!(matches!(e, Error::UnknownField { .. }), "{e}");
}

/// A commit that changes two collections reaches the live queries of both, each
/// with its own rows (the hub groups a commit's changes by collection; a commit
/// of one collection skips comparing names).
#[test]
fn a_commit_across_two_collections_reaches_both_live_queries() {
    use std::sync::{Arc, Mutex};
    type Sizes = Arc<Mutex<Vec<usize>>>;
    // Each delivery's result size, for a live query over all of `collection`.
    let live = |db: &Database, collection: &str| -> (keel_query::Subscription, Sizes) {
        let sizes = Sizes::default();
        let s2 = sizes.clone();
        let sub = db
            .query(collection)
            .subscribe(move |u| s2.lock().unwrap().push(u.objects.len()))
            .unwrap();
        (sub, sizes)
    };
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir);
    let (_sa, authors) = live(&db, "rel.Author");
    let (_sp, posts) = live(&db, "rel.Post");
    db.write(|t| {
        t.insert(&author("ada", "Ada"))?;
        t.insert(&post("p1", "ada"))?;
        t.insert(&author("bob", "Bob"))?;
        Ok(())
    })
    .wait()
    .unwrap();
    // One collection only: the other query hears nothing.
    db.write(|t| t.insert(&post("p2", "bob"))).wait().unwrap();
    assert_eq!(*authors.lock().unwrap(), [0, 2]);
    assert_eq!(*posts.lock().unwrap(), [0, 1, 2]);
}

#[test]
fn hooks_around_file_changes_enclose_the_live_lists_deliveries() {
    use std::sync::{Arc, Mutex};
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir);
    db.write(|t| {
        t.insert(&author("ada", "Ada"))?;
        // `live_list` shows posts with rank >= 0.
        t.insert(&Post::builder().id("p0").author("ada").rank(1).build())
    })
    .wait()
    .unwrap();
    // Registered before any list exists, so before the lists' own hook: the
    // `after` side still runs behind it, the `before` side ahead of it.
    let seen: Arc<Mutex<Vec<usize>>> = Default::default();
    let list = Arc::new(Mutex::new(None::<Deliveries>));
    let count = |l: &Mutex<Option<Deliveries>>| {
        l.lock()
            .unwrap()
            .as_ref()
            .map_or(0, |g| g.lock().unwrap().len())
    };
    let (s1, l1, s2, l2) = (seen.clone(), list.clone(), seen.clone(), list.clone());
    let around = db.around_file_changes(
        move |_| s1.lock().unwrap().push(count(&l1)),
        move |_| s2.lock().unwrap().push(count(&l2)),
    );
    for round in 0..2 {
        let (sub, deliveries) = live_list(&db);
        *list.lock().unwrap() = Some(deliveries.clone());
        seen.lock().unwrap().clear();
        db.write(move |t| t.update(&author("ada", &format!("Ada {round}"))))
            .wait()
            .unwrap();
        assert_eq!(
            deliveries.lock().unwrap().len(),
            2,
            "the rename reached the list"
        );
        assert_eq!(
            *seen.lock().unwrap(),
            vec![1, 2],
            "before saw the first delivery only, after the rename's too (round {round})"
        );
        // The last list out removes the lists' hook; the next adds it anew.
        drop(sub);
    }
    around.remove();
    seen.lock().unwrap().clear();
    db.write(|t| t.update(&author("ada", "Ada again")))
        .wait()
        .unwrap();
    assert!(
        seen.lock().unwrap().is_empty(),
        "removed: neither side runs"
    );
}
