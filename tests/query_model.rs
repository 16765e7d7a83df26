//! Model-based test: random transactions of insert / update / upsert / delete /
//! abort against an in-memory model; after every transaction (and after a reopen)
//! every query agrees with the model.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use keel::eval::Filter;
use keel::prelude::*;
use keel::storage::SyncPolicies;
use keel_example_blog::blog::Post;
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Insert(Post),
    Update(Post),
    Upsert(Post),
    Delete(String),
}

#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    Ok,
    Exists,
    NotFound,
    Deleted(bool),
}

fn arb_post() -> impl Strategy<Value = Post> {
    (
        0..5u8,
        0i32..5,
        prop::option::of(0..3u8),
        prop::option::of("[ab]"),
    )
        .prop_map(|(id, prio, slug, title)| {
            let mut b = Post::builder().id(format!("k{id}")).priority(prio);
            if let Some(s) = slug {
                b = b.slug(format!("s{s}"));
            }
            if let Some(t) = title {
                b = b.title(t);
            }
            b.build()
        })
}

fn arb_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => arb_post().prop_map(Op::Insert),
        2 => arb_post().prop_map(Op::Update),
        2 => arb_post().prop_map(Op::Upsert),
        1 => (0..5u8).prop_map(|i| Op::Delete(format!("k{i}"))),
    ]
}

type Model = BTreeMap<String, Post>;

fn slug_taken(m: &Model, p: &Post) -> bool {
    p.slug.is_some() && m.values().any(|o| o.id != p.id && o.slug == p.slug)
}

fn apply(m: &mut Model, op: &Op) -> Outcome {
    match op {
        Op::Insert(p) => {
            if m.contains_key(&p.id) || slug_taken(m, p) {
                Outcome::Exists
            } else {
                m.insert(p.id.clone(), p.clone());
                Outcome::Ok
            }
        }
        Op::Update(p) => {
            if !m.contains_key(&p.id) {
                Outcome::NotFound
            } else if slug_taken(m, p) {
                Outcome::Exists
            } else {
                m.insert(p.id.clone(), p.clone());
                Outcome::Ok
            }
        }
        Op::Upsert(p) => {
            if slug_taken(m, p) {
                Outcome::Exists
            } else {
                m.insert(p.id.clone(), p.clone());
                Outcome::Ok
            }
        }
        Op::Delete(k) => Outcome::Deleted(m.remove(k).is_some()),
    }
}

fn run(t: &mut Txn<'_>, op: &Op) -> Outcome {
    let r = match op {
        Op::Insert(p) => t.insert(p).map(|_| Outcome::Ok),
        Op::Update(p) => t.update(p).map(|_| Outcome::Ok),
        Op::Upsert(p) => t.upsert(p).map(|_| Outcome::Ok),
        Op::Delete(k) => t.delete::<Post>(k).map(Outcome::Deleted),
    };
    match r {
        Ok(o) => o,
        Err(Error::AlreadyExists { .. }) => Outcome::Exists,
        Err(Error::NotFound { .. }) => Outcome::NotFound,
        Err(e) => panic!("unexpected error {e}"),
    }
}

fn queries() -> Vec<Expr> {
    vec![
        Expr::True,
        Post::priority().gt(2),
        Post::priority().eq(1) | Post::title().eq("a"),
        Post::slug().is_null(),
        !Post::title().eq("b"),
        Post::slug().in_(["s0", "s2"]),
    ]
}

fn check(db: &Database, m: &Model) -> Result<(), TestCaseError> {
    let schema = db.schema().clone();
    for e in queries() {
        let f = Filter::with_schema(schema.clone(), "blog.Post", &e).unwrap();
        let want: Vec<&Post> = m.values().filter(|p| f.matches(&p.encode())).collect();
        let got = db
            .fetch::<Post>()
            .filter(e.clone())
            .order_by(Post::id().asc())
            .all()
            .unwrap();
        prop_assert_eq!(got.iter().collect::<Vec<_>>(), want, "query {}", e);
    }
    for i in 0..5 {
        let k = format!("k{i}");
        let got = db.get::<Post>(&k).unwrap();
        prop_assert_eq!(got.as_ref(), m.get(&k));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn transactions_agree_with_model(txns in prop::collection::vec(
        (prop::collection::vec(arb_op(), 1..6), prop::bool::weighted(0.2), prop::bool::weighted(0.1)),
        1..8,
    ), hook in any::<bool>()) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.db");
        let opts = || StoreOptions::default().sync(SyncPolicies::all(SyncPolicy::Off));
        let db = Database::open_for::<Post>(&path, opts()).unwrap();
        let mut model = Model::new();
        // With a change hook the write path also records changes (a second code path):
        // replaying them must rebuild the model.
        let shadow: Arc<Mutex<BTreeMap<String, Vec<u8>>>> = Arc::default();
        if hook {
            let s2 = shadow.clone();
            db.on_commit_changes(move |changes| {
                let mut s = s2.lock().unwrap();
                for c in changes {
                    let Value::Text(k) = &c.key[0] else { panic!("text key") };
                    match c.op {
                        ChangeOp::Insert | ChangeOp::Update => {
                            s.insert(k.clone(), c.new.clone().unwrap());
                        }
                        ChangeOp::Delete => {
                            s.remove(k);
                        }
                    }
                }
            });
        }
        for (ops, abort, fail) in txns {
            let mut next = model.clone();
            let want: Vec<Outcome> = ops.iter().map(|o| apply(&mut next, o)).collect();
            let ops2 = ops.clone();
            let r = db.write(move |t| {
                let got: Vec<Outcome> = ops2.iter().map(|o| run(t, o)).collect();
                if abort {
                    t.abort();
                } else if fail {
                    return Err(Error::TypeMismatch { op: "test", collection: "x".into(), message: "fail".into() });
                }
                Ok(got)
            }).wait();
            match r {
                Ok(got) => {
                    prop_assert!(!abort && !fail);
                    prop_assert_eq!(got, want);
                    model = next;
                }
                Err(Error::Aborted { .. }) => prop_assert!(abort),
                Err(Error::TypeMismatch { .. }) => prop_assert!(fail),
                Err(e) => panic!("write failed: {e}"),
            }
            check(&db, &model)?;
            if hook {
                let s = shadow.lock().unwrap();
                let replayed: Model = s.iter().map(|(k, b)| (k.clone(), Post::decode(b).unwrap())).collect();
                prop_assert_eq!(&replayed, &model);
            }
        }
        db.close().wait().unwrap();
        let db = Database::open_for::<Post>(&path, opts()).unwrap();
        check(&db, &model)?;
        db.close().wait().unwrap();
    }
}
