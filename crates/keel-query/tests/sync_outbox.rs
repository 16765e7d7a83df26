//! The sync outbox: every local commit to a synced collection appends its
//! operations in the same SQLite transaction (insert with every field, patch with
//! only the changed fields and counters as deltas, delete — cascades included);
//! a rolled-back write appends nothing, and a collection without `(sync)` leaves
//! no trace. Read back from the real file with a second SQLite connection.

use keel_query::{Database, Schema, StoreOptions, Value};
use serde_json::{json, Value as Json};

const SCHEMA: &str = r#"
attribute "sync";
namespace blog;
table Post (entity, sync: "posts") {
  id: string (primary);
  owner: string;
  title: string;
  likes: long (sync: counter);
  pinned: bool (sync: server_wins);
}
table Comment (entity, sync) {
  id: long (primary);
  post: string (references: "blog.Post", on_delete: "cascade");
  text: string;
}
table Note (entity) { id: string (primary); text: string; }
root_type Post;
"#;

fn open(dir: &tempfile::TempDir) -> Database {
    let schema = Schema::parse(SCHEMA, "blog.fbs").unwrap();
    Database::open(dir.path().join("o.db"), schema, StoreOptions::default()).unwrap()
}

fn bytes(db: &Database, collection: &str, v: Json) -> Vec<u8> {
    db.schema()
        .reader(collection)
        .unwrap()
        .encode_json(&v)
        .unwrap()
}

/// `(seq, collection, key, op, fields, deltas, base)` of every outbox row.
fn outbox(dir: &tempfile::TempDir) -> Vec<(i64, String, Json, String, Json, Json, i64)> {
    let conn = rusqlite::Connection::open(dir.path().join("o.db")).unwrap();
    let mut st = conn
        .prepare("SELECT seq, collection, key, op, fields, deltas, base FROM keel_sync_outbox ORDER BY seq")
        .unwrap();
    let parse = |s: Option<String>| s.map_or(Json::Null, |s| serde_json::from_str(&s).unwrap());
    st.query_map([], |r| {
        Ok((
            r.get(0)?,
            r.get(1)?,
            parse(r.get(2)?),
            r.get(3)?,
            parse(r.get(4)?),
            parse(r.get(5)?),
            r.get(6)?,
        ))
    })
    .unwrap()
    .collect::<Result<_, _>>()
    .unwrap()
}

#[test]
fn writes_become_operations_in_the_same_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir);
    let post = bytes(
        &db,
        "blog.Post",
        json!({"id": "p1", "owner": "ann", "title": "Hi", "likes": 2}),
    );
    db.write_blocking(move |t| t.insert_bytes("blog.Post", post).map(|_| ()))
        .unwrap();
    // A change request that names two fields, one of them unchanged: only the
    // changed one is sent; the counter goes as a delta.
    db.write_blocking(|t| {
        t.change_values(
            "blog.Post",
            &["p1".into()],
            &[
                ("title".into(), "Hello".into()),
                ("owner".into(), "ann".into()),
                ("likes".into(), Value::Int(7)),
            ],
        )
        .map(|_| ())
    })
    .unwrap();
    db.write_blocking(|t| t.delete_key("blog.Post", &["p1".into()]).map(|_| ()))
        .unwrap();
    let ops = outbox(&dir);
    assert_eq!(ops.len(), 3, "{ops:?}");
    let (s1, c1, k1, o1, f1, d1, b1) = &ops[0];
    assert_eq!((c1.as_str(), o1.as_str(), *b1), ("blog.Post", "insert", 0));
    assert_eq!(k1, &json!({"id": "p1"}));
    assert_eq!(
        f1,
        &json!({"owner": "ann", "title": "Hi", "likes": 2, "pinned": false})
    );
    assert_eq!(d1, &Json::Null);
    let (s2, _, _, o2, f2, d2, _) = &ops[1];
    assert_eq!(o2, "patch");
    assert_eq!(f2, &json!({"title": "Hello"}), "only the changed field");
    assert_eq!(d2, &json!({"likes": 5}), "the counter as a delta");
    let (s3, _, k3, o3, _, _, _) = &ops[2];
    assert_eq!((o3.as_str(), k3), ("delete", &json!({"id": "p1"})));
    assert!(s1 < s2 && s2 < s3, "sequence numbers grow");
}

#[test]
fn a_rolled_back_write_appends_nothing_and_unsynced_collections_leave_no_trace() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir);
    let note = bytes(&db, "blog.Note", json!({"id": "n1", "text": "local"}));
    db.write_blocking(move |t| t.insert_bytes("blog.Note", note).map(|_| ()))
        .unwrap();
    let tables = schema_objects(&dir, "name LIKE 'keel_sync%'");
    assert_eq!(
        tables, 0,
        "a write to an unsynced collection makes no sync table"
    );
    let post = bytes(&db, "blog.Post", json!({"id": "p1"}));
    let r = db.write_blocking(move |t| {
        t.insert_bytes("blog.Post", post)?;
        t.abort();
        Ok(())
    });
    assert!(r.is_err());
    let post = bytes(&db, "blog.Post", json!({"id": "p2"}));
    db.write_blocking(move |t| {
        t.insert_bytes("blog.Post", post)?;
        // A failing closure in a group rolls back its own operations.
        Ok(())
    })
    .unwrap();
    let ops = outbox(&dir);
    assert_eq!(ops.len(), 1, "{ops:?}");
    assert_eq!(ops[0].2, json!({"id": "p2"}));
}

#[test]
fn cascading_deletes_produce_delete_operations() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir);
    let post = bytes(&db, "blog.Post", json!({"id": "p1"}));
    let c1 = bytes(
        &db,
        "blog.Comment",
        json!({"id": 1, "post": "p1", "text": "a"}),
    );
    let c2 = bytes(
        &db,
        "blog.Comment",
        json!({"id": 2, "post": "p1", "text": "b"}),
    );
    db.write_blocking(move |t| {
        t.insert_bytes("blog.Post", post)?;
        t.insert_bytes("blog.Comment", c1)?;
        t.insert_bytes("blog.Comment", c2)?;
        Ok(())
    })
    .unwrap();
    db.write_blocking(|t| t.delete_key("blog.Post", &["p1".into()]).map(|_| ()))
        .unwrap();
    let deletes: Vec<(String, Json)> = outbox(&dir)
        .into_iter()
        .filter(|o| o.3 == "delete")
        .map(|o| (o.1, o.2))
        .collect();
    assert_eq!(deletes.len(), 3, "{deletes:?}");
    assert!(deletes.contains(&("blog.Comment".into(), json!({"id": 1}))));
    assert!(deletes.contains(&("blog.Comment".into(), json!({"id": 2}))));
    assert!(deletes.contains(&("blog.Post".into(), json!({"id": "p1"}))));
}

/// Inserts the post `id` (one outbox operation) and gives back its sequence number.
fn write_post(db: &Database, dir: &tempfile::TempDir, id: &str) -> i64 {
    let post = bytes(db, "blog.Post", json!({"id": id}));
    db.write_blocking(move |t| t.insert_bytes("blog.Post", post).map(|_| ()))
        .unwrap();
    let ops = outbox(dir);
    let op = ops
        .iter()
        .rfind(|o| o.2 == json!({"id": id}))
        .expect("the insert is in the outbox");
    op.0
}

/// How many entries of the file's `sqlite_schema` match `filter`.
fn schema_objects(dir: &tempfile::TempDir, filter: &str) -> i64 {
    let conn = rusqlite::Connection::open(dir.path().join("o.db")).unwrap();
    conn.query_row(
        &format!("SELECT count(*) FROM sqlite_schema WHERE {filter}"),
        [],
        |r| r.get(0),
    )
    .unwrap()
}

/// Removes outbox operations as any statement would (the client removes them
/// once acked and caught up with; here a second connection does it).
fn remove_ops(dir: &tempfile::TempDir, filter: &str) {
    let conn = rusqlite::Connection::open(dir.path().join("o.db")).unwrap();
    conn.execute(&format!("DELETE FROM keel_sync_outbox WHERE {filter}"), [])
        .unwrap();
}

#[test]
fn a_sequence_number_is_never_handed_out_again_once_its_operation_is_gone() {
    // The relay's ledger answers a (client, seq) it has seen without applying it
    // again: a number that came back would be a write silently dropped.
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir);
    let mut seen: Vec<i64> = (1..=3)
        .map(|i| write_post(&db, &dir, &format!("a{i}")))
        .collect();
    // Only the last operations go: the highest number is no longer in the table.
    remove_ops(&dir, &format!("seq >= {}", seen[1]));
    seen.push(write_post(&db, &dir, "b1"));
    remove_ops(&dir, "1");
    assert!(outbox(&dir).is_empty());
    seen.push(write_post(&db, &dir, "b2"));
    remove_ops(&dir, "1");
    drop(db);
    let db = open(&dir);
    seen.push(write_post(&db, &dir, "c1"));
    assert!(
        seen.windows(2).all(|w| w[0] < w[1]),
        "every number larger than every one before: {seen:?}"
    );
}

#[test]
fn the_operations_of_one_write_are_numbered_in_order_above_every_number_handed_out() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir);
    for i in 1..=3 {
        write_post(&db, &dir, &format!("a{i}"));
    }
    // The highest numbers are gone: the next ones still come above them.
    remove_ops(&dir, "seq >= 2");
    let posts: Vec<Vec<u8>> = (1..=3)
        .map(|i| bytes(&db, "blog.Post", json!({"id": format!("b{i}")})))
        .collect();
    db.write_blocking(move |t| {
        for post in posts {
            t.insert_bytes("blog.Post", post)?;
        }
        Ok(())
    })
    .unwrap();
    let ops = outbox(&dir);
    let numbered: Vec<(i64, Json)> = ops.iter().map(|o| (o.0, o.2.clone())).collect();
    assert_eq!(
        numbered,
        vec![
            (1, json!({"id": "a1"})),
            (4, json!({"id": "b1"})),
            (5, json!({"id": "b2"})),
            (6, json!({"id": "b3"})),
        ]
    );
}

/// The outbox as files written before this version made it: its `seq`
/// `AUTOINCREMENT`, the highest number handed out kept in `sqlite_sequence`.
const OLD_OUTBOX: &str = "
CREATE TABLE keel_sync_outbox (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    collection TEXT NOT NULL,
    key TEXT NOT NULL,
    op TEXT NOT NULL,
    fields TEXT,
    deltas TEXT,
    base INTEGER NOT NULL,
    acked_version INTEGER,
    acked_lsn INTEGER
);
CREATE INDEX keel_sync_outbox_key ON keel_sync_outbox(collection, key);
CREATE TABLE keel_sync_rows (
    collection TEXT NOT NULL,
    key TEXT NOT NULL,
    version INTEGER NOT NULL,
    acked INTEGER NOT NULL DEFAULT 0,
    row TEXT,
    PRIMARY KEY (collection, key)
) WITHOUT ROWID;
CREATE TABLE keel_sync_state (name TEXT PRIMARY KEY, value) WITHOUT ROWID;
";

#[test]
fn a_file_with_the_autoincrement_outbox_goes_on_above_its_sqlite_sequence() {
    let dir = tempfile::tempdir().unwrap();
    drop(open(&dir));
    {
        let conn = rusqlite::Connection::open(dir.path().join("o.db")).unwrap();
        conn.execute_batch(OLD_OUTBOX).unwrap();
        let mut ins = conn
            .prepare(
                "INSERT INTO keel_sync_outbox (collection, key, op, fields, deltas, base) \
                 VALUES ('blog.Post', ?1, 'insert', '{}', NULL, 0)",
            )
            .unwrap();
        for i in 1..=5 {
            ins.execute([json!({"id": format!("old{i}")}).to_string()])
                .unwrap();
        }
        // Numbers 4 and 5 were handed out and their operations are gone.
        conn.execute("DELETE FROM keel_sync_outbox WHERE seq > 3", [])
            .unwrap();
        let (max, sequence): (i64, i64) = conn
            .query_row(
                "SELECT (SELECT max(seq) FROM keel_sync_outbox), \
                 (SELECT seq FROM sqlite_sequence WHERE name = 'keel_sync_outbox')",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!((max, sequence), (3, 5));
    }
    let db = open(&dir);
    let indexes = schema_objects(&dir, "type = 'index' AND tbl_name = 'keel_sync_outbox'");
    assert_eq!(indexes, 0, "the open drops the outbox's index by row");
    assert_eq!(write_post(&db, &dir, "new1"), 6);
    remove_ops(&dir, "1");
    assert_eq!(write_post(&db, &dir, "new2"), 7);
    remove_ops(&dir, "1");
    drop(db);
    let db = open(&dir);
    assert_eq!(write_post(&db, &dir, "new3"), 8);
}

/// The pages the last commit in `dir`'s WAL wrote, in frame order.
fn last_commit_pages(dir: &tempfile::TempDir) -> Vec<u32> {
    let wal = std::fs::read(dir.path().join("o.db-wal")).unwrap();
    let be = |b: &[u8]| u32::from_be_bytes(b.try_into().unwrap());
    let page_size = be(&wal[8..12]) as usize;
    let salts = &wal[16..24];
    let (mut commits, mut pages) = (vec![0usize], Vec::new());
    let mut at = 32;
    while at + 24 + page_size <= wal.len() && &wal[at + 8..at + 16] == salts {
        pages.push(be(&wal[at..at + 4]));
        if be(&wal[at + 4..at + 8]) != 0 {
            commits.push(pages.len());
        }
        at += 24 + page_size;
    }
    let n = commits.len();
    assert!(n >= 2, "a commit in the WAL");
    pages[commits[n - 2]..commits[n - 1]].to_vec()
}

#[test]
fn a_synced_commit_writes_one_page_more_than_an_unsynced_one() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir);
    write_post(&db, &dir, "p0");
    let mut synced = Vec::new();
    for i in 1..=5 {
        write_post(&db, &dir, &format!("p{i}"));
        synced.push(last_commit_pages(&dir));
    }
    let conn = rusqlite::Connection::open(dir.path().join("o.db")).unwrap();
    let sequence: Option<u32> = conn
        .query_row(
            "SELECT rootpage FROM sqlite_schema WHERE name = 'sqlite_sequence'",
            [],
            |r| r.get(0),
        )
        .ok();
    if let Some(page) = sequence {
        let rows: i64 = conn
            .query_row(
                "SELECT count(*) FROM sqlite_sequence WHERE name = 'keel_sync_outbox'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(rows, 0, "the outbox keeps no sqlite_sequence row");
        for pages in &synced {
            assert!(
                !pages.contains(&page),
                "a synced commit wrote sqlite_sequence's page {page}: {pages:?}"
            );
        }
    }
    // The same commit on an unsynced collection, for the page count beside it.
    let mut plain = Vec::new();
    for i in 1..=5 {
        let note = bytes(
            &db,
            "blog.Note",
            json!({"id": format!("n{i}"), "text": "x"}),
        );
        db.write_blocking(move |t| t.insert_bytes("blog.Note", note).map(|_| ()))
            .unwrap();
        plain.push(last_commit_pages(&dir));
    }
    // The outbox adds the page its row is appended to; nothing else (no index
    // page, no sqlite_sequence page).
    let most = |v: &[Vec<u32>]| v.iter().map(Vec::len).max().unwrap();
    assert!(
        most(&synced) <= most(&plain) + 1,
        "synced commits wrote {synced:?}, unsynced {plain:?}"
    );
}

#[test]
fn an_operation_numbered_by_rowid_alone_is_moved_above_every_removed_number() {
    // What a build from before the floor does on a file of the new shape: its
    // INSERT names no seq, and SQLite takes max(seq) + 1.
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir);
    let seen: Vec<i64> = (1..=3)
        .map(|i| write_post(&db, &dir, &format!("a{i}")))
        .collect();
    drop(db);
    remove_ops(&dir, "seq > 1");
    let conn = rusqlite::Connection::open(dir.path().join("o.db")).unwrap();
    for i in 1..=2 {
        conn.execute(
            "INSERT INTO keel_sync_outbox (collection, key, op, fields, deltas, base) \
             VALUES ('blog.Post', ?1, 'insert', '{}', NULL, 0)",
            [json!({"id": format!("old{i}")}).to_string()],
        )
        .unwrap();
    }
    drop(conn);
    let seqs: Vec<i64> = outbox(&dir).iter().map(|o| o.0).collect();
    assert_eq!(seen, vec![1, 2, 3]);
    assert_eq!(seqs, vec![1, 4, 5]);
}
