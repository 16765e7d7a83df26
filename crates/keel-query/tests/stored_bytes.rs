//! Bytes are verified once, on the way in: reads do not run the verifier
//! over every row again. A row changed afterwards by a stock SQLite tool is still a
//! typed `Error::Decode` naming its rowid — or, for the bytes API, bytes that every
//! keel reader refuses — never a panic and never a silently different object.

use std::time::Duration;

use keel_example_blog::blog::Post;
use keel_query::{Database, Error, StoreOptions, StoredObject};
use keel_schema::wire::Builder;
use keel_schema::Record;

fn quiet() -> StoreOptions {
    StoreOptions::default().idle_checkpoint_after(Duration::from_secs(3600))
}

/// What a stock tool does: a plain SQL UPDATE of the row's bytes, on a connection
/// of its own. A file whose indexes are expressions over `keel_field` (storage
/// format 1) cannot be written by stock SQLite at all; then the same statement
/// runs on keel's writer connection, which knows the function.
fn set_body(db: &Database, path: &std::path::Path, rowid: i64, body: &[u8]) {
    const SQL: &str = "UPDATE \"blog.Post\" SET body = ?1 WHERE rowid = ?2";
    let c = rusqlite::Connection::open(path).unwrap();
    c.busy_timeout(Duration::from_secs(10)).unwrap();
    let n = match c.execute(SQL, rusqlite::params![body, rowid]) {
        Ok(n) => n,
        Err(e) if e.to_string().contains("keel_field") => {
            let body = body.to_vec();
            db.store()
                .write_blocking(move |t| {
                    t.execute(SQL, rusqlite::params![body, rowid])
                        .map_err(keel_storage::Error::from)
                })
                .unwrap()
        }
        Err(e) => panic!("{e}"),
    };
    assert_eq!(n, 1);
}

fn assert_decode_error<T: std::fmt::Debug>(r: Result<T, Error>, rowid: i64, what: &str) {
    match r {
        Err(Error::Decode {
            rowid: r,
            collection,
            ..
        }) => {
            assert_eq!(r, rowid, "{what}");
            assert_eq!(collection, "blog.Post", "{what}");
        }
        other => panic!("{what}: expected a decode error for row {rowid}, got {other:?}"),
    }
}

/// `posts` inserted into `db`: their rowids and their encoded bytes, in order.
fn seed(db: &Database, posts: &[Post]) -> (Vec<i64>, Vec<Vec<u8>>) {
    let bytes: Vec<Vec<u8>> = posts.iter().map(Post::encode).collect();
    let posts = posts.to_vec();
    let rowids: Vec<i64> = db
        .write_blocking(move |t| posts.iter().map(|p| t.insert(p)).collect())
        .unwrap();
    (rowids, bytes)
}

#[test]
fn rows_changed_by_a_stock_tool_are_decode_errors_not_panics() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let db = Database::open_for::<Post>(&path, quiet()).unwrap();
    let posts: Vec<Post> = ["good", "garbage", "cut", "utf8", "union"]
        .iter()
        .map(|id| {
            Post::builder()
                .id(*id)
                .title(format!("title of {id}"))
                .tags(["a", "b"])
                .build()
        })
        .collect();
    let (rowids, bytes) = seed(&db, &posts);

    // Not a FlatBuffer at all.
    set_body(&db, &path, rowids[1], &[0xde, 0xad, 0xbe, 0xef, 0x01, 0x00]);
    // Cut short: the root still opens, the strings at the end are gone.
    let cut = &bytes[2][..bytes[2].len() - 12];
    set_body(&db, &path, rowids[2], cut);
    // A title that is no longer UTF-8.
    let mut utf8 = bytes[3].clone();
    let at = utf8
        .windows(8)
        .position(|w| w == b"title of")
        .expect("title in the bytes");
    utf8[at] = 0xff;
    set_body(&db, &path, rowids[3], &utf8);
    // A union type without its value (the verifier refuses it; so must the read).
    let mut b = Builder::new();
    let id = b.create_string("union");
    b.start_table();
    b.add_offset(0, id);
    b.add_scalar::<u8>(5, 1, 0); // content_type = Image, no content
    let root = b.end_table();
    let union = b.finish(root, None);
    assert!(Post::decode(&union).is_err(), "the verifier accepts it");
    set_body(&db, &path, rowids[4], &union);

    for (i, key) in ["garbage", "cut", "utf8", "union"].iter().enumerate() {
        let rowid = rowids[i + 1];
        let key = key.to_string();
        assert_decode_error(db.get::<Post>(&key), rowid, "get");
        assert_decode_error(
            db.fetch::<Post>().filter(Post::id().eq(key.as_str())).all(),
            rowid,
            "fetch",
        );
        // The bytes API hands out what the row holds once it opens; each keel
        // reader of those bytes refuses them.
        match db.get_bytes("blog.Post", &[key.clone().into()]) {
            Err(e) => assert_decode_error::<Option<StoredObject>>(Err(e), rowid, "get_bytes"),
            Ok(Some(o)) => {
                assert_eq!(o.rowid, rowid);
                assert!(Post::decode_stored(&o.bytes).is_err(), "{key}");
                assert!(Post::decode(&o.bytes).is_err(), "{key}");
            }
            Ok(None) => panic!("{key} vanished"),
        }
    }
    // Garbage does not even open: the bytes API refuses it too.
    assert_decode_error(
        db.get_bytes("blog.Post", &["garbage".into()]),
        rowids[1],
        "get_bytes garbage",
    );
    assert_decode_error(db.query("blog.Post").all(), rowids[1], "query all");
    // A typed fetch of everything names the first damaged row.
    assert_decode_error(db.fetch::<Post>().all(), rowids[1], "fetch all");

    // The untouched row reads as written; counting needs no decoding.
    assert_eq!(
        db.get::<Post>(&"good".to_string()).unwrap().unwrap(),
        posts[0]
    );
    assert_eq!(db.fetch::<Post>().count().unwrap(), 5);
    db.close().wait().unwrap();
}

#[test]
fn what_keel_wrote_reads_back_unchanged_through_every_read_path() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open_for::<Post>(dir.path().join("ok.db"), quiet()).unwrap();
    let p = Post::builder()
        .id("p")
        .title("t")
        .priority(7)
        .tags(["x"])
        .build();
    let p2 = p.clone();
    db.write_blocking(move |t| t.insert(&p2)).unwrap();
    assert_eq!(db.get::<Post>(&"p".to_string()).unwrap().unwrap(), p);
    assert_eq!(db.fetch::<Post>().all().unwrap(), vec![p.clone()]);
    let o = db.get_bytes("blog.Post", &["p".into()]).unwrap().unwrap();
    assert_eq!(o.bytes, p.encode());
    assert_eq!(Post::decode_stored(&o.bytes).unwrap(), p);
    let all = db.query("blog.Post").all().unwrap();
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].bytes, p.encode());
    db.close().wait().unwrap();
}

/// A filter on a field without an index runs in Rust over the bytes SQLite hands
/// over, decoding only the rows it keeps, straight from SQLite's buffer. Damage is
/// handled as by the all-SQL form (`keel_field` reads a row that does not open as
/// all-`NULL`, so it does not match) and as by every other read: a kept row that
/// does not decode is an `Error::Decode` naming it, never a panic.
#[test]
fn a_filter_on_a_field_without_an_index_over_damaged_rows() {
    use keel_example_blog::blog::Color;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.db");
    let db = Database::open_for::<Post>(&path, quiet()).unwrap();
    let ids = ["good", "utf8", "cut", "garbage", "red"];
    let posts: Vec<Post> = ids
        .iter()
        .map(|id| {
            Post::builder()
                .id(*id)
                .title(format!("title of {id}"))
                .color(if *id == "red" {
                    Color::Red
                } else {
                    Color::Blue
                })
                .tags(["a", "b"])
                .build()
        })
        .collect();
    let (rowids, bytes) = seed(&db, &posts);
    let mut utf8 = bytes[1].clone();
    let at = utf8
        .windows(8)
        .position(|w| w == b"title of")
        .expect("title in the bytes");
    utf8[at] = 0xff;
    set_body(&db, &path, rowids[1], &utf8);
    let cut = &bytes[2][..bytes[2].len() - 12];
    set_body(&db, &path, rowids[2], cut);
    set_body(&db, &path, rowids[3], &[0xde, 0xad, 0xbe, 0xef, 0x01, 0x00]);

    let blue = || Post::color().eq(Color::Blue);
    // The plan: SQLite narrows by key, keel evaluates `color` on the bytes.
    let plan = db
        .fetch::<Post>()
        .filter(Post::id().eq("utf8"))
        .filter(blue())
        .into_query()
        .explain()
        .unwrap();
    assert!(plan.last().unwrap().starts_with("keel: filter"), "{plan:?}");

    // A kept row that does not decode is an error naming it.
    for (i, key) in [(1, "utf8"), (2, "cut")] {
        let q = || db.fetch::<Post>().filter(Post::id().eq(key)).filter(blue());
        assert_decode_error(q().all(), rowids[i], key);
        assert_decode_error(q().first(), rowids[i], key);
        assert_eq!(q().count().unwrap(), 1, "{key}");
    }
    // A row that does not open reads as all-NULL: `NULL = Blue` is not true.
    let garbage = || {
        db.fetch::<Post>()
            .filter(Post::id().eq("garbage"))
            .filter(blue())
    };
    assert_eq!(garbage().all().unwrap(), Vec::<Post>::new());
    assert_eq!(garbage().count().unwrap(), 0);
    assert!(db
        .query("blog.Post")
        .filter(Post::id().eq("garbage"))
        .filter(blue())
        .all()
        .unwrap()
        .is_empty());
    // The all-SQL form of the same query agrees row for row.
    let (sql, params) = db
        .query("blog.Post")
        .filter(blue())
        .order_by(Post::id().asc())
        .sql()
        .unwrap();
    assert!(sql.contains("keel_field"), "{sql}");
    let via_sql: Vec<i64> = db
        .store()
        .read(|c| {
            let mut st = c.prepare(&sql)?;
            let p: Vec<i64> = params
                .iter()
                .map(|v| match v {
                    keel_schema::Value::Int(i) => *i,
                    other => panic!("{other:?}"),
                })
                .collect();
            let rows = st.query_map(rusqlite::params_from_iter(p), |r| r.get(0))?;
            rows.collect::<Result<Vec<i64>, _>>()
                .map_err(keel_storage::Error::from)
        })
        .unwrap();
    let scanned: Vec<i64> = db
        .query("blog.Post")
        .filter(blue())
        .order_by(Post::id().asc())
        .all()
        .unwrap()
        .iter()
        .map(|o| o.rowid)
        .collect();
    // `cut`, `good`, `utf8` by id; `garbage` and `red` are not blue.
    assert_eq!(scanned, [rowids[2], rowids[0], rowids[1]]);
    assert_eq!(via_sql, scanned);
    // A typed fetch of them all names the first damaged row in the order asked.
    assert_decode_error(
        db.fetch::<Post>()
            .filter(blue())
            .order_by(Post::id().asc())
            .all(),
        rowids[2],
        "fetch all blue",
    );
    // The intact row reads back as written through the scan.
    assert_eq!(
        db.fetch::<Post>()
            .filter(Post::id().eq("good"))
            .filter(blue())
            .all()
            .unwrap(),
        vec![posts[0].clone()]
    );
    db.close().wait().unwrap();
}

/// A row rewritten by a stock tool into an amplification bomb (2,500 offsets to
/// one 8 KB string: 18 KB stored, 20 MB decoded) is an `Error::Decode` with the
/// decode budget's error in every typed read, as in Swift and Kotlin — reads skip
/// the verifier, but not the budget.
#[test]
fn a_bomb_written_by_a_stock_tool_is_over_the_decode_budget() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b.db");
    let db = Database::open_for::<Post>(&path, quiet()).unwrap();
    let (rowids, _) = seed(&db, &[Post::builder().id("bomb").build()]);
    let mut b = Builder::new();
    let s = b.create_string(&"x".repeat(8192));
    let tags = b.create_offset_vector(&vec![s; 2500]);
    let id = b.create_string("bomb");
    b.start_table();
    b.add_offset(0, id);
    b.add_offset(9, tags); // blog.Post's `tags`
    let root = b.end_table();
    let bomb = b.finish(root, None);
    assert_eq!(
        Post::decode_stored(&bomb).unwrap().tags.len(),
        2500,
        "unbudgeted"
    );
    set_body(&db, &path, rowids[0], &bomb);
    let over = |r: Result<Vec<Post>, Error>, what: &str| match r {
        Err(Error::Decode {
            source: keel_schema::DecodeError::OverBudget { .. },
            rowid,
            ..
        }) => assert_eq!(rowid, rowids[0], "{what}"),
        other => panic!("{what}: {other:?}"),
    };
    over(
        db.get::<Post>(&"bomb".to_string())
            .map(|p| p.into_iter().collect()),
        "get",
    );
    over(db.fetch::<Post>().all(), "fetch");
}
