//! Bytes accepted on any write path decode through the generated type: a string
//! without its NUL terminator (accepted by the runtime reader before) is refused by
//! `insert_bytes`, so typed fetches of the collection keep working; so is an
//! amplification bomb, which would poison every read of its row.

use keel::prelude::*;
use keel_example_blog::blog::Post;

#[test]
fn insert_bytes_refuses_what_the_generated_decoder_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open_for::<Post>(dir.path().join("v.db"), StoreOptions::default()).unwrap();
    let good = Post::builder().id("ok").title("hello").build();
    db.write(move |t| t.insert(&good)).wait().unwrap();

    let mut bad = Post::builder().id("bad").title("hello").build().encode();
    let nul = bad.windows(6).position(|w| w == b"hello\0").unwrap() + 5;
    bad[nul] = b'!';
    assert!(
        Post::decode(&bad).is_err(),
        "the generated decoder refuses it"
    );

    for op in ["insert", "upsert"] {
        let b = bad.clone();
        let err = db
            .write(move |t| match op {
                "insert" => t.insert_bytes("blog.Post", b),
                _ => t.upsert_bytes("blog.Post", b),
            })
            .wait()
            .unwrap_err();
        assert!(matches!(err, Error::InvalidObject { .. }), "{op}: {err:?}");
    }
    let ids: Vec<String> = db
        .fetch::<Post>()
        .all()
        .unwrap()
        .iter()
        .map(|p| p.id.clone())
        .collect();
    assert_eq!(ids, vec!["ok".to_string()]);
}

/// The amplification bomb for `blog.Post`: a ~1 MB buffer whose `tags`
/// vector holds 250,000 offsets to one 8 KB string (~2 GB decoded).
fn amplification_bomb() -> Vec<u8> {
    let schema =
        keel_schema::Schema::parse(<Post as keel_schema::Record>::SCHEMA_FBS, "blog.fbs").unwrap();
    let t = &schema.tables[schema.table_index("blog.Post").unwrap()];
    let slot = |name: &str| t.fields.iter().find(|f| f.name == name).unwrap().id;
    let mut b = keel_schema::wire::Builder::new();
    let s = b.create_string(&"x".repeat(8192));
    let tags = b.create_offset_vector(&vec![s; 250_000]);
    let id = b.create_string("bomb");
    b.start_table();
    b.add_offset(slot("id"), id);
    b.add_offset(slot("tags"), tags);
    let root = b.end_table();
    b.finish(root, None)
}

#[test]
fn insert_bytes_refuses_an_amplification_bomb() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open_for::<Post>(dir.path().join("a.db"), StoreOptions::default()).unwrap();
    let bomb = amplification_bomb();
    assert!(bomb.len() < 1_100_000, "{} bytes", bomb.len());
    assert!(matches!(
        Post::decode(&bomb),
        Err(keel_schema::DecodeError::OverBudget { .. })
    ));
    for op in ["insert", "upsert"] {
        let b = bomb.clone();
        let err = db
            .write(move |t| match op {
                "insert" => t.insert_bytes("blog.Post", b),
                _ => t.upsert_bytes("blog.Post", b),
            })
            .wait()
            .unwrap_err();
        assert!(
            matches!(
                err,
                Error::InvalidObject {
                    source: keel_schema::DecodeError::OverBudget { .. },
                    ..
                }
            ),
            "{op}: {err:?}"
        );
    }
    assert!(db.fetch::<Post>().all().unwrap().is_empty());
}
