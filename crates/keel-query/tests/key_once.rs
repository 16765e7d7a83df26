//! The key is stored once: a body whose buffer ends with its string key
//! is stored without that string, beside the key column that holds the same text,
//! and every read gives back the buffer that was written, byte for byte. Buffers
//! whose key string is not last, and bodies written whole by an older build, are
//! stored and read as they are.

use std::time::Duration;

use keel_example_blog::blog::Post;
use keel_query::inspect;
use keel_query::{Database, StoreOptions};
use keel_schema::wire::Builder;

fn quiet() -> StoreOptions {
    StoreOptions::default().idle_checkpoint_after(Duration::from_secs(3600))
}

/// Bytes of the canonical FlatBuffers string `[u32 len][bytes][0][pad to 4]`.
fn string_len(s: &str) -> usize {
    (s.len() + 5).next_multiple_of(4)
}

/// `(k0, length(body))` of every row, read by stock SQLite on its own connection.
fn stored_lengths(path: &std::path::Path) -> Vec<(String, usize)> {
    let c = rusqlite::Connection::open(path).unwrap();
    let mut st = c
        .prepare("SELECT k0, length(body) FROM \"blog.Post\" ORDER BY rowid")
        .unwrap();
    st.query_map([], |r| Ok((r.get(0)?, r.get::<_, i64>(1)? as usize)))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap()
}

fn post(id: &str, title: &str, priority: i32) -> Post {
    Post::builder()
        .id(id)
        .title(title)
        .priority(priority)
        .tags(["a", "b"])
        .build()
}

#[test]
fn a_string_key_is_stored_once_and_every_read_gives_back_the_written_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("k.db");
    let db = Database::open_for::<Post>(&path, quiet()).unwrap();
    let posts: Vec<Post> = (0..20)
        .map(|i| post(&format!("post-{i:03}"), &format!("title {i}"), i))
        .collect();
    let written = posts.clone();
    db.write_blocking(move |t| written.iter().try_for_each(|p| t.insert(p).map(drop)))
        .unwrap();

    // On disk: each body is the buffer less its key string.
    for ((k0, len), p) in stored_lengths(&path).iter().zip(&posts) {
        assert_eq!(k0, &p.id);
        assert_eq!(*len, p.encode().len() - string_len(&p.id), "{k0}");
    }

    // Every read path hands out the buffer that was written.
    let first = &posts[7];
    assert_eq!(db.get::<Post>(&first.id).unwrap().as_ref(), Some(first));
    let o = db
        .get_bytes("blog.Post", &[first.id.clone().into()])
        .unwrap()
        .unwrap();
    assert_eq!(o.bytes, first.encode());
    assert_eq!(db.fetch::<Post>().all().unwrap(), posts);
    let all = db.query("blog.Post").all().unwrap();
    assert_eq!(
        all.iter().map(|o| o.bytes.clone()).collect::<Vec<_>>(),
        posts.iter().map(Post::encode).collect::<Vec<_>>()
    );
    // A filter on a field without an index (evaluated on the stored bytes) and one
    // on the key (SQL, then the row restored).
    let some = db
        .fetch::<Post>()
        .filter(Post::title().eq("title 3"))
        .all()
        .unwrap();
    assert_eq!(some, vec![posts[3].clone()]);
    let by_key = db
        .fetch::<Post>()
        .filter(Post::id().ge("post-018"))
        .all()
        .unwrap();
    assert_eq!(by_key, posts[18..].to_vec());
    // An indexed filter and sort.
    let top = db
        .fetch::<Post>()
        .filter(Post::priority().ge(17))
        .order_by(Post::priority().desc())
        .all()
        .unwrap();
    assert_eq!(
        top,
        vec![posts[19].clone(), posts[18].clone(), posts[17].clone()]
    );
    db.snapshot(|s| {
        assert_eq!(s.get::<Post>(&posts[0].id)?.as_ref(), Some(&posts[0]));
        Ok(())
    })
    .unwrap();

    // Updates, upserts and change requests keep the invariant.
    let changed = post("post-005", "a new title, longer than before", 99);
    let c2 = changed.clone();
    db.write_blocking(move |t| t.update(&c2).map(drop)).unwrap();
    let upserted = post("post-100", "upserted", 1);
    let u2 = upserted.clone();
    db.write_blocking(move |t| t.upsert(&u2).map(drop)).unwrap();
    assert_eq!(
        db.get::<Post>(&"post-005".to_string()).unwrap(),
        Some(changed.clone())
    );
    assert_eq!(
        db.get::<Post>(&"post-100".to_string()).unwrap(),
        Some(upserted)
    );
    let lengths = stored_lengths(&path);
    let (_, len) = lengths.iter().find(|(k, _)| k == "post-005").unwrap();
    assert_eq!(*len, changed.encode().len() - string_len("post-005"));

    // `keel check` finds every column in agreement with the objects.
    let conn = rusqlite::Connection::open(&path).unwrap();
    inspect::register_functions(&conn, db.schema().clone()).unwrap();
    assert!(inspect::column_mismatches(&conn, db.schema(), 10)
        .unwrap()
        .is_empty());
    db.close().wait().unwrap();
}

/// A buffer whose key string was not created first (as `flatc` code may write it):
/// another string ends it, so it is stored whole and read back as it is.
#[test]
fn a_buffer_whose_key_is_not_last_is_stored_whole() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.db");
    let db = Database::open_for::<Post>(&path, quiet()).unwrap();
    let mut b = Builder::new();
    let title = b.create_string("title first");
    let id = b.create_string("late-key");
    b.start_table();
    b.add_offset(0, id);
    b.add_offset(1, title);
    let root = b.end_table();
    let bytes = b.finish(root, None);
    let decoded = Post::decode(&bytes).unwrap();
    assert_eq!(decoded.id, "late-key");
    let b2 = bytes.clone();
    db.write_blocking(move |t| t.insert_bytes("blog.Post", b2).map(drop))
        .unwrap();
    assert_eq!(
        stored_lengths(&path),
        vec![("late-key".to_string(), bytes.len())]
    );
    let o = db
        .get_bytes("blog.Post", &["late-key".into()])
        .unwrap()
        .unwrap();
    assert_eq!(o.bytes, bytes);
    assert_eq!(
        db.get::<Post>(&"late-key".to_string()).unwrap(),
        Some(decoded)
    );
    db.close().wait().unwrap();
}

/// A body stored whole — by a build from before the key was stored once, or put
/// there by a stock tool — reads as it is next to bodies stored without their key.
#[test]
fn whole_and_stripped_bodies_live_side_by_side() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    let db = Database::open_for::<Post>(&path, quiet()).unwrap();
    let (a, b) = (post("a", "one", 1), post("b", "two", 2));
    let (a2, b2) = (a.clone(), b.clone());
    db.write_blocking(move |t| {
        t.insert(&a2)?;
        t.insert(&b2).map(drop)
    })
    .unwrap();
    // What an older build wrote: the whole buffer.
    let c = rusqlite::Connection::open(&path).unwrap();
    c.busy_timeout(Duration::from_secs(10)).unwrap();
    c.execute(
        "UPDATE \"blog.Post\" SET body = ?1 WHERE k0 = 'a'",
        [a.encode()],
    )
    .unwrap();
    drop(c);
    let lengths = stored_lengths(&path);
    assert_eq!(lengths[0].1, a.encode().len());
    assert_eq!(lengths[1].1, b.encode().len() - string_len("b"));
    assert_eq!(
        db.fetch::<Post>().all().unwrap(),
        vec![a.clone(), b.clone()]
    );
    let all = db.query("blog.Post").all().unwrap();
    assert_eq!(all[0].bytes, a.encode());
    assert_eq!(all[1].bytes, b.encode());
    // Writing it again stores it without its key.
    let a3 = post("a", "one again", 1);
    let a4 = a3.clone();
    db.write_blocking(move |t| t.update(&a4).map(drop)).unwrap();
    assert_eq!(
        stored_lengths(&path)[0].1,
        a3.encode().len() - string_len("a")
    );
    assert_eq!(db.get::<Post>(&"a".to_string()).unwrap(), Some(a3));
    db.close().wait().unwrap();
}

/// A buffer built with a
/// shared string, where another string field points at the key's bytes, must
/// keep its tail — stripping it leaves that field pointing past the stored
/// bytes, so a filter on it (evaluated on the body as stored) reads NULL while a
/// live query, which sees the whole buffer, reads the string.
#[test]
fn a_shared_key_string_does_not_break_filters() {
    use keel_query::{Expr, FieldPath, Schema};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.db");
    let schema = Schema::parse(
        "namespace n; table Note { id: string (primary); alias: string; } root_type Note;",
        "n.fbs",
    )
    .unwrap();
    let db = Database::open(&path, schema, quiet()).unwrap();
    let alias = || FieldPath::field(1, "alias");

    // One string "k", both fields pointing at it: the key string is last.
    let bytes = keel_schema::wire::encode(None, |b: &mut Builder| {
        let k = b.create_string("k");
        b.start_table();
        b.add_offset(0, k);
        b.add_offset(1, k);
        b.end_table()
    });
    assert_eq!(bytes.len(), 32);

    let (tx, rx) = std::sync::mpsc::channel();
    let _live = db
        .query("n.Note")
        .filter(Expr::eq(alias(), "k"))
        .subscribe(move |u| {
            let _ = tx.send(u.objects.len());
        })
        .unwrap();
    assert_eq!(rx.recv_timeout(Duration::from_secs(10)).unwrap(), 0);
    let b2 = bytes.clone();
    db.write_blocking(move |t| t.insert_bytes("n.Note", b2).map(drop))
        .unwrap();
    let live = rx.recv_timeout(Duration::from_secs(10)).unwrap();

    let eq_k = db.query("n.Note").filter(Expr::eq(alias(), "k")).count();
    let null = db.query("n.Note").filter(Expr::IsNull(alias())).count();
    assert_eq!(eq_k.unwrap(), 1, "alias == \"k\"");
    assert_eq!(null.unwrap(), 0, "alias IS NULL");
    assert_eq!(live, 1, "the live query agrees with fetch");
    let all = db.query("n.Note").all().unwrap();
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].bytes, bytes, "read back byte for byte");
}
