//! Bytes accepted on any write path decode through the generated type: a string
//! without its NUL terminator (accepted by the runtime reader before) is refused by
//! `insert_bytes`, so typed fetches of the collection keep working.

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
