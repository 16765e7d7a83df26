//! The delete rules of a set delete (`delete_where` / `delete_matching`) on
//! real SQLite files: the set is every matching object with everything its
//! cascade reaches, a refused set delete deletes none of it (even when the
//! transaction goes on and commits), and `restrict` is checked over the whole
//! set — a referrer that goes with the set, by cascade through other objects
//! too, does not restrict, as SQL's `NO ACTION` is checked at the end of the
//! statement. A single delete's set is its one object and its cascade.
//!
//! The schema: authors; posts deleted with their author (cascade); comments
//! deleted with their post (cascade) and keeping the author who wrote them
//! (restrict); pins keeping their author (restrict).

use keel_query::{ChangeOp, Database, Error, Expr, Schema, StoreOptions, Value};
use serde_json::json;

fn schema() -> Schema {
    Schema::parse(
        r#"namespace ws;
           table Author (entity) { id: string (primary); n: int; }
           table Post {
             id: string (primary);
             author: string (references: "Author", on_delete: "cascade");
           }
           table Comment (entity) {
             id: string (primary);
             post: string (references: "Post", on_delete: "cascade");
             by: string (references: "Author", on_delete: "restrict");
           }
           table Pin (entity) {
             id: string (primary);
             author: string (references: "Author", on_delete: "restrict");
           }
           root_type Post;"#,
        "ws.fbs",
    )
    .unwrap()
}

fn open(path: &std::path::Path) -> Database {
    Database::open(path, schema(), StoreOptions::default()).unwrap()
}

/// Six authors `a0`…`a5` (field `n` = 0…5), each with two posts, each post with
/// one comment written by `writer(i)`; `pinned` authors get a pin each.
fn six_authors(path: &std::path::Path, writer: fn(usize) -> usize, pinned: &[usize]) {
    let s = schema();
    let mut objs: Vec<(&str, serde_json::Value)> = Vec::new();
    for i in 0..6 {
        objs.push(("ws.Author", json!({"id": format!("a{i}"), "n": i})));
    }
    for i in 0..6 {
        for j in 0..2 {
            let p = format!("p{i}.{j}");
            objs.push(("ws.Post", json!({"id": p, "author": format!("a{i}")})));
            objs.push((
                "ws.Comment",
                json!({"id": format!("c{i}.{j}"), "post": p, "by": format!("a{}", writer(i))}),
            ));
        }
    }
    for &i in pinned {
        objs.push((
            "ws.Pin",
            json!({"id": format!("pin{i}"), "author": format!("a{i}")}),
        ));
    }
    let objs: Vec<(String, Vec<u8>)> = objs
        .into_iter()
        .map(|(c, j)| (c.to_string(), s.reader(c).unwrap().encode_json(&j).unwrap()))
        .collect();
    let db = open(path);
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

/// How many objects each collection holds, as (authors, posts, comments, pins).
fn counts(db: &Database) -> (usize, usize, usize, usize) {
    let n = |c: &str| db.query(c).all().unwrap().len();
    (n("ws.Author"), n("ws.Post"), n("ws.Comment"), n("ws.Pin"))
}

fn key(s: &str) -> Vec<Value> {
    vec![Value::from(s)]
}

/// Of six authors only `a3` has a restricting referrer (a pin): the
/// `delete_where` over all six is refused naming that pin, and deletes none of
/// them — not the authors matched before `a3`, nor their posts and comments —
/// though the transaction goes on after the error and commits.
#[test]
fn item2_refused_delete_where_deletes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("refused.db");
    // Each author comments on their own posts: those comments go with them.
    six_authors(&path, |i| i, &[3]);
    let db = open(&path);
    let deleted = std::sync::Arc::new(std::sync::Mutex::new(0usize));
    let seen = deleted.clone();
    let _hook = db.on_commit_changes(move |changes| {
        *seen.lock().unwrap() += changes.iter().filter(|c| c.op == ChangeOp::Delete).count();
    });
    let err = db
        .write(|t| {
            let e = t.delete_matching("ws.Author", Expr::True).unwrap_err();
            // Inside the transaction, after the error: nothing is gone.
            assert_eq!(t.query("ws.Author").all()?.len(), 6);
            assert_eq!(t.query("ws.Post").all()?.len(), 12);
            assert_eq!(t.query("ws.Comment").all()?.len(), 12);
            // The transaction goes on and commits.
            t.insert_bytes(
                "ws.Pin",
                schema()
                    .reader("ws.Pin")
                    .unwrap()
                    .encode_json(&json!({"id": "later", "author": "a0"}))
                    .unwrap(),
            )?;
            Ok(e)
        })
        .wait()
        .unwrap();
    match err {
        Error::Restricted {
            collection,
            key: k,
            referrers,
        } => {
            assert_eq!((collection.as_str(), k), ("ws.Author", key("a3")));
            assert_eq!(
                referrers,
                vec![("ws.Pin".to_string(), "author".to_string(), key("pin3"))]
            );
        }
        other => panic!("expected Restricted, got {other:?}"),
    }
    assert_eq!(counts(&db), (6, 12, 12, 2));
    assert_eq!(*deleted.lock().unwrap(), 0, "no delete reached the commit");
    db.close().wait().unwrap();
    // On the file, after reopening: every author, post and comment is there.
    let db = open(&path);
    assert_eq!(counts(&db), (6, 12, 12, 2));
}

/// Author `i`'s posts carry comments written by author `i+1` (mod 6), each
/// keeping its writer (restrict). Every such comment goes with the set by
/// cascade through its post, so a `delete_where` over all six deletes them
/// all; a single delete's set is its one author and its cascade, so each one
/// alone is refused (a ring: the comments `a(i)` wrote sit on `a(i-1)`'s
/// posts), and a `delete_where` over part of the ring is refused by the
/// comments on the posts that stay.
#[test]
fn item2_restrict_is_checked_over_the_whole_set() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ring.db");
    six_authors(&path, |i| (i + 1) % 6, &[]);
    let db = open(&path);

    // Single deletes, in any order: each refused, nothing deleted.
    for i in 0..6 {
        let a = format!("a{i}");
        let e = db
            .write(move |t| Ok(t.delete_key("ws.Author", &key(&a)).unwrap_err()))
            .wait()
            .unwrap();
        let Error::Restricted { referrers, .. } = e else {
            panic!("expected Restricted, got {e:?}");
        };
        let on = (i + 5) % 6;
        assert_eq!(
            referrers,
            vec![
                ("ws.Comment".into(), "by".into(), key(&format!("c{on}.0"))),
                ("ws.Comment".into(), "by".into(), key(&format!("c{on}.1"))),
            ]
        );
    }
    assert_eq!(counts(&db), (6, 12, 12, 0));

    // Part of the ring (a0, a1, a2): the comments a0 wrote on a5's posts stay.
    let n_field = schema().reader("ws.Author").unwrap().path("n").unwrap();
    let part = Expr::lt(n_field.clone(), 3);
    let e = db
        .write(move |t| Ok(t.delete_matching("ws.Author", part).unwrap_err()))
        .wait()
        .unwrap();
    let Error::Restricted {
        collection,
        key: k,
        referrers,
    } = e
    else {
        panic!("expected Restricted, got {e:?}");
    };
    assert_eq!((collection.as_str(), k), ("ws.Author", key("a0")));
    assert_eq!(
        referrers,
        vec![
            ("ws.Comment".into(), "by".into(), key("c5.0")),
            ("ws.Comment".into(), "by".into(), key("c5.1")),
        ]
    );
    assert_eq!(counts(&db), (6, 12, 12, 0));

    // The whole ring: every restricting comment goes with the set.
    let n = db
        .write(|t| t.delete_matching("ws.Author", Expr::True))
        .wait()
        .unwrap();
    assert_eq!(n, 6);
    assert_eq!(counts(&db), (0, 0, 0, 0));
    db.close().wait().unwrap();
    assert_eq!(counts(&open(&path)), (0, 0, 0, 0));
}

/// A set delete cascades and nullifies as one delete would: an object reached
/// twice (matched and by cascade) is deleted and counted once, and the count is
/// of the matched objects.
#[test]
fn item2_a_set_delete_counts_each_matched_object_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("count.db");
    six_authors(&path, |i| i, &[]);
    let db = open(&path);
    let n_field = schema().reader("ws.Author").unwrap().path("n").unwrap();
    let n = db
        .write(move |t| t.delete_matching("ws.Author", Expr::ge(n_field, 4)))
        .wait()
        .unwrap();
    assert_eq!(n, 2);
    assert_eq!(counts(&db), (4, 8, 8, 0));
    // Posts matched directly: their comments go with them.
    let n = db
        .write(|t| t.delete_matching("ws.Post", Expr::True))
        .wait()
        .unwrap();
    assert_eq!(n, 8);
    assert_eq!(counts(&db), (4, 0, 0, 0));
}
