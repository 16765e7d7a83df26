//! Issue 30: references between collections on real SQLite files — delete
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
