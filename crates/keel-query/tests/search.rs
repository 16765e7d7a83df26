//! Full-text search: a checked-in multilingual corpus with the hits
//! each query must find (SQL through FTS5 and the in-memory evaluator agree),
//! relevance order with field weights, combination with other filters, typed
//! errors for malformed queries, highlight/snippet ranges, the index kept equal
//! to the rows through every kind of write (a property test), schema changes
//! rebuilding or dropping the index, and `keel check`'s comparison and repair.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use keel_query::eval::Filter;
use keel_query::{inspect, search, Database, Error, StoreOptions, Value};
use keel_schema::{Expr, Schema, SortKey};
use proptest::prelude::*;

const COLL: &str = "s.Doc";

fn schema_text(title: &str, body: &str, tags: &str) -> String {
    format!(
        "attribute \"searchable\"; namespace s;
         table Doc {{ id: string (primary); title: string {title}; body: string {body}; tags: [string] {tags}; lang: string (indexed); n: int; }}
         root_type Doc;"
    )
}

fn schema() -> Schema {
    Schema::parse(
        &schema_text("(searchable: 3.0)", "(searchable)", "(searchable: 0.5)"),
        "s.fbs",
    )
    .unwrap()
}

struct Corpus {
    docs: Vec<serde_json::Value>,
    queries: Vec<(String, BTreeSet<String>)>,
}

fn corpus() -> Corpus {
    let text = include_str!("fixtures/search_corpus.json");
    let v: serde_json::Value = serde_json::from_str(text).unwrap();
    let docs = v["docs"].as_array().unwrap().clone();
    let queries = v["queries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| {
            (
                q["q"].as_str().unwrap().to_owned(),
                q["hits"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|h| h.as_str().unwrap().to_owned())
                    .collect(),
            )
        })
        .collect();
    Corpus { docs, queries }
}

fn encode(s: &Schema, doc: &serde_json::Value) -> Vec<u8> {
    let mut d = doc.clone();
    let id = d["id"].as_str().unwrap().to_owned();
    d["lang"] = id[..2].into();
    d["n"] = id[2..].parse::<i64>().unwrap_or(0).into();
    s.reader(COLL).unwrap().encode_json(&d).unwrap()
}

fn open(path: &Path, s: &Schema) -> Database {
    Database::open(path, s.clone(), StoreOptions::default()).unwrap()
}

fn load(db: &Database, s: &Schema, docs: &[serde_json::Value]) {
    let objs: Vec<Vec<u8>> = docs.iter().map(|d| encode(s, d)).collect();
    db.write(move |t| {
        for o in objs {
            t.insert_bytes(COLL, o)?;
        }
        Ok(())
    })
    .wait()
    .unwrap();
}

fn id_of(s: &Schema, bytes: &[u8]) -> String {
    let r = s.reader(COLL).unwrap();
    match r.read(bytes).unwrap().get(&r.path("id").unwrap()) {
        Value::Text(t) => t,
        v => panic!("{v:?}"),
    }
}

fn ids(db: &Database, s: &Schema, filter: Expr) -> BTreeSet<String> {
    db.query(COLL)
        .filter(filter)
        .all()
        .unwrap()
        .iter()
        .map(|o| id_of(s, &o.bytes))
        .collect()
}

#[test]
fn multilingual_corpus_finds_the_expected_hits() {
    let dir = tempfile::tempdir().unwrap();
    let s = schema();
    let db = open(&dir.path().join("c.db"), &s);
    let c = corpus();
    load(&db, &s, &c.docs);
    let all = db.query(COLL).all().unwrap();
    for (q, want) in &c.queries {
        let got = ids(&db, &s, Expr::search(q.clone()));
        assert_eq!(&got, want, "query {q:?} through FTS5");
        // The in-memory evaluator (subscriptions, filters keel evaluates on the
        // bytes) answers the same.
        let f = Filter::new(&s, COLL, &Expr::search(q.clone())).unwrap();
        let mem: BTreeSet<String> = all
            .iter()
            .filter(|o| f.matches(&o.bytes))
            .map(|o| id_of(&s, &o.bytes))
            .collect();
        assert_eq!(&mem, want, "query {q:?} in memory");
    }
    db.close().wait().unwrap();
}

#[test]
fn field_filters_combine_with_other_filters() {
    let dir = tempfile::tempdir().unwrap();
    let s = schema();
    let db = open(&dir.path().join("f.db"), &s);
    load(&db, &s, &corpus().docs);
    let r = s.reader(COLL).unwrap();
    let title = r.path("title").unwrap();
    let body = r.path("body").unwrap();
    let tags = r.path("tags").unwrap();
    let lang = r.path("lang").unwrap();
    let n = r.path("n").unwrap();
    let set = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
    // One field only.
    assert_eq!(
        ids(&db, &s, Expr::matches(title.clone(), "rust")),
        set(&["en1", "en3"])
    );
    assert_eq!(
        ids(&db, &s, Expr::matches(body.clone(), "rust")),
        set(&["en1", "em2"])
    );
    assert_eq!(
        ids(&db, &s, Expr::matches(tags.clone(), "rust")),
        set(&["en1", "en3", "em2"])
    );
    // With an indexed field (SQL) and a field without an index (evaluated on the
    // bytes), under AND, OR and NOT.
    assert_eq!(
        ids(&db, &s, Expr::search("rust") & Expr::eq(lang.clone(), "en")),
        set(&["en1", "en3"])
    );
    assert_eq!(
        ids(&db, &s, Expr::search("rust") | Expr::eq(n.clone(), 2)),
        set(&["en1", "en3", "em2", "en2", "de2", "fr2", "zh2", "ja2", "ko2"])
    );
    assert_eq!(
        ids(
            &db,
            &s,
            !Expr::search("rust") & Expr::eq(lang.clone(), "em")
        ),
        set(&["em1"])
    );
    assert_eq!(
        ids(
            &db,
            &s,
            (Expr::search("京") | Expr::search("天")) & Expr::ne(lang.clone(), "ja")
        ),
        set(&["zh1", "zh2"])
    );
    // A field that is not searchable, or a collection without any, is a typed error.
    assert!(matches!(
        db.query(COLL).filter(Expr::matches(lang, "en")).all(),
        Err(Error::TypeMismatch { .. })
    ));
    db.close().wait().unwrap();
}

#[test]
fn malformed_query_text_is_a_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    let s = schema();
    let db = open(&dir.path().join("e.db"), &s);
    load(&db, &s, &corpus().docs);
    for q in [
        "\"open",
        "(rust",
        "rust)",
        "AND",
        "rust OR",
        "NOT rust",
        "NEAR(a, x)",
        "",
        "***",
        "!!!",
    ] {
        match db.query(COLL).filter(Expr::search(q)).all() {
            Err(Error::InvalidSearch { query, .. }) => assert_eq!(query, q),
            other => panic!("{q:?}: {other:?}"),
        }
        assert!(matches!(
            db.query(COLL).filter(Expr::search(q)).count(),
            Err(Error::InvalidSearch { .. })
        ));
    }
    // FTS5's own syntax that keel's language does not have is text, not an error.
    assert!(db
        .query(COLL)
        .filter(Expr::search("title:rust ^go -x + y"))
        .all()
        .is_ok());
    db.close().wait().unwrap();
}

#[test]
fn relevance_order_uses_bm25_with_field_weights() {
    let dir = tempfile::tempdir().unwrap();
    let s = schema();
    let db = open(&dir.path().join("r.db"), &s);
    let docs = serde_json::json!([
        {"id": "body", "title": "Other", "body": "A text that mentions kiwi once among many many other words here"},
        {"id": "title", "title": "Kiwi", "body": "Nothing else"},
        {"id": "tag", "title": "Other", "body": "Nothing", "tags": ["kiwi"]},
        {"id": "none", "title": "Apple", "body": "Pear"}
    ]);
    load(&db, &s, docs.as_array().unwrap());
    let order = |q: Expr, key: SortKey| -> Vec<String> {
        db.query(COLL)
            .filter(q)
            .order_by(key)
            .all()
            .unwrap()
            .iter()
            .map(|o| id_of(&s, &o.bytes))
            .collect()
    };
    // Title weighs 3, body 1, tags 0.5.
    assert_eq!(
        order(Expr::search("kiwi"), keel_schema::relevance()),
        ["title", "tag", "body"]
    );
    assert_eq!(
        order(Expr::search("kiwi"), keel_schema::relevance().reversed()),
        ["body", "tag", "title"]
    );
    // Other filters still apply, and paging works on the ranked order.
    let lang = s.reader(COLL).unwrap().path("lang").unwrap();
    assert_eq!(
        order(
            Expr::search("kiwi") & Expr::ne(lang.clone(), "ta"),
            keel_schema::relevance()
        ),
        ["title", "body"]
    );
    let page: Vec<String> = db
        .query(COLL)
        .filter(Expr::search("kiwi"))
        .order_by(keel_schema::relevance())
        .limit(1)
        .offset(1)
        .all()
        .unwrap()
        .iter()
        .map(|o| id_of(&s, &o.bytes))
        .collect();
    assert_eq!(page, ["tag"]);
    // Relevance without a full-text filter to rank by is a typed error.
    assert!(matches!(
        db.query(COLL)
            .filter(Expr::eq(lang, "ti"))
            .order_by(keel_schema::relevance())
            .all(),
        Err(Error::InvalidSearch { .. })
    ));
    db.close().wait().unwrap();
}

#[test]
fn highlight_and_snippet_give_ranges_into_the_original_text() {
    let text = "Müller grüßt Herrn Öztürk auf der Straße in 東京都.";
    let r = search::highlight(text, "muller strasse 京都").unwrap();
    let got: Vec<&str> = r.iter().map(|r| &text[r.clone()]).collect();
    assert_eq!(got, ["Müller", "Straße", "京都"]);
    let s = search::snippet(text, "ozturk", 20).unwrap();
    let passage = &text[s.range.clone()];
    assert!(passage.contains("Öztürk"), "{passage}");
    assert!(passage.chars().count() <= 20);
    assert_eq!(&text[s.highlights[0].clone()], "Öztürk");
    assert!(matches!(
        search::highlight(text, "(open"),
        Err(Error::InvalidSearch { .. })
    ));
}

#[test]
fn stock_sqlite_checks_and_reads_the_index() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stock.db");
    let s = schema();
    let db = open(&path, &s);
    load(&db, &s, &corpus().docs);
    db.close().wait().unwrap();
    // A plain connection: no keel function registered.
    let conn = rusqlite::Connection::open(&path).unwrap();
    let ok: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(ok, "ok");
    let n: i64 = conn
        .query_row(
            "SELECT count(*) FROM \"s.Doc$fts\" WHERE \"s.Doc$fts\" MATCH 'rust'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(n, 3);
    let schema = Arc::new(s);
    assert!(inspect::search_drift(&conn, &schema, 10)
        .unwrap()
        .is_empty());
}

#[test]
fn check_finds_drift_and_repair_rebuilds() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("drift.db");
    let s = schema();
    let db = open(&path, &s);
    load(&db, &s, &corpus().docs);
    db.close().wait().unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    // What tools other than keel can do: change a row, drop an entry, add one.
    let en1: i64 = conn
        .query_row("SELECT rowid FROM \"s.Doc\" WHERE k0 = 'en1'", [], |r| {
            r.get(0)
        })
        .unwrap();
    conn.execute("DELETE FROM \"s.Doc$fts\" WHERE rowid = ?1", [en1])
        .unwrap();
    conn.execute(
        "INSERT INTO \"s.Doc$fts\"(rowid, f1, f2, f3) VALUES (9999, 'x', 'y', 'z')",
        [],
    )
    .unwrap();
    conn.execute(
        "UPDATE \"s.Doc$fts\" SET f1 = 'nothing' WHERE rowid = (SELECT rowid FROM \"s.Doc\" WHERE k0 = 'de1')",
        [],
    )
    .unwrap();
    let schema = Arc::new(s.clone());
    let drift = inspect::search_drift(&conn, &schema, 10).unwrap();
    let mut problems: Vec<&str> = drift.iter().map(|d| d.problem.as_str()).collect();
    problems.sort();
    assert_eq!(problems, ["extra", "missing", "stale"]);
    assert_eq!(
        inspect::rebuild_search(&conn, &schema).unwrap(),
        corpus().docs.len() as u64
    );
    assert!(inspect::search_drift(&conn, &schema, 10)
        .unwrap()
        .is_empty());
    drop(conn);
    let db = open(&path, &s);
    assert_eq!(ids(&db, &s, Expr::search("strasse")).len(), 1);
    db.close().wait().unwrap();
}

#[test]
fn schema_changes_rebuild_or_drop_the_index_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("evolve.db");
    // v1: nothing searchable.
    let v1 = Schema::parse(&schema_text("", "", ""), "v1.fbs").unwrap();
    let db = open(&path, &v1);
    load(&db, &v1, &corpus().docs);
    assert!(matches!(
        db.query(COLL).filter(Expr::search("rust")).all(),
        Err(Error::TypeMismatch { .. })
    ));
    db.close().wait().unwrap();
    // v2: title searchable — built at open, with progress events.
    let v2 = Schema::parse(&schema_text("(searchable)", "", ""), "v2.fbs").unwrap();
    let db = open(&path, &v2);
    let set = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
    assert_eq!(ids(&db, &v2, Expr::search("rust")), set(&["en1", "en3"]));
    db.close().wait().unwrap();
    // v3: body too — rebuilt.
    let v3 = Schema::parse(
        &schema_text("(searchable)", "(searchable: 2.0)", ""),
        "v3.fbs",
    )
    .unwrap();
    let db = open(&path, &v3);
    assert_eq!(
        ids(&db, &v3, Expr::search("rust")),
        set(&["en1", "en3", "em2"])
    );
    db.close().wait().unwrap();
    // v4: reweighting only: same index, no rebuild needed.
    let v4 = Schema::parse(
        &schema_text("(searchable: 5.0)", "(searchable)", ""),
        "v4.fbs",
    )
    .unwrap();
    let db = open(&path, &v4);
    assert_eq!(
        ids(&db, &v4, Expr::search("rust")),
        set(&["en1", "en3", "em2"])
    );
    db.close().wait().unwrap();
    // v5: nothing searchable again — the index is dropped.
    let db = open(&path, &v1);
    db.close().wait().unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    let n: i64 = conn
        .query_row(
            "SELECT count(*) FROM sqlite_schema WHERE name LIKE 's.Doc$fts%'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(n, 0);
}

#[test]
fn adding_a_searchable_field_rebuilds_at_open_with_progress() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("progress.db");
    let v1 = Schema::parse(&schema_text("", "", ""), "v1.fbs").unwrap();
    let db = open(&path, &v1);
    let r = v1.reader(COLL).unwrap();
    let objs: Vec<Vec<u8>> = (0..3000)
        .map(|i| {
            r.encode_json(
                &serde_json::json!({"id": format!("d{i}"), "body": format!("doc {i} über")}),
            )
            .unwrap()
        })
        .collect();
    db.write(move |t| {
        for o in objs {
            t.insert_bytes(COLL, o)?;
        }
        Ok(())
    })
    .wait()
    .unwrap();
    db.close().wait().unwrap();
    let events = Arc::new(std::sync::Mutex::new(Vec::new()));
    let ev = Arc::clone(&events);
    let v2 = Schema::parse(&schema_text("", "(searchable)", ""), "v2.fbs").unwrap();
    let db = Database::open(
        &path,
        v2.clone(),
        StoreOptions::default().on_progress(move |p| ev.lock().unwrap().push(p)),
    )
    .unwrap();
    let during: Vec<f32> = events
        .lock()
        .unwrap()
        .iter()
        .filter(|p| {
            p.phase == keel_storage::OpenPhase::Schema && p.fraction > 0.0 && p.fraction < 1.0
        })
        .map(|p| p.fraction)
        .collect();
    assert!(!during.is_empty(), "no progress while the index was built");
    assert_eq!(
        db.query(COLL).filter(Expr::search("uber")).count().unwrap(),
        3000
    );
    db.close().wait().unwrap();
}

#[test]
fn migrations_rebuild_the_index_and_drop_those_of_dropped_collections() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("migrate.db");
    let two = |doc_body: &str| {
        Schema::parse(
            &format!(
                "attribute \"searchable\"; namespace s;
                 table Doc {{ id: string (primary); title: string (searchable); body: string {doc_body}; }}
                 table Other (entity) {{ id: string (primary); text: string (searchable); }}
                 root_type Doc;"
            ),
            "m.fbs",
        )
        .unwrap()
    };
    let v1 = two("");
    let db = open(&path, &v1);
    let d = v1
        .reader(COLL)
        .unwrap()
        .encode_json(&serde_json::json!({"id": "a", "title": "old title", "body": "kiwi"}))
        .unwrap();
    let o = v1
        .reader("s.Other")
        .unwrap()
        .encode_json(&serde_json::json!({"id": "o", "text": "kiwi"}))
        .unwrap();
    db.write(move |t| {
        t.insert_bytes(COLL, d)?;
        t.insert_bytes("s.Other", o).map(|_| ())
    })
    .wait()
    .unwrap();
    db.close().wait().unwrap();
    // v2: `Other` is gone, and a migration rewrites the docs.
    let v2 = Schema::parse(
        "attribute \"searchable\"; namespace s;
         table Doc { id: string (primary); title: string (searchable); body: string; }
         root_type Doc;",
        "m2.fbs",
    )
    .unwrap();
    let m = keel_query::Migrator::new().register("drop Other, retitle", |m| {
        m.drop_collection("s.Other")?;
        m.rewrite_collection(COLL, |obj, new| {
            let mut j = obj.to_json().unwrap();
            j["title"] = "new title".into();
            Ok(Some(new.encode_json(&j).unwrap()))
        })?;
        Ok(())
    });
    let db = Database::open_migrating(&path, v2.clone(), m, StoreOptions::default()).unwrap();
    assert_eq!(
        db.query(COLL).filter(Expr::search("new")).count().unwrap(),
        1
    );
    assert_eq!(
        db.query(COLL).filter(Expr::search("old")).count().unwrap(),
        0
    );
    db.close().wait().unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    let n: i64 = conn
        .query_row(
            "SELECT count(*) FROM sqlite_schema WHERE name LIKE 's.Other%'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(n, 0);
    assert!(inspect::search_drift(&conn, &Arc::new(v2), 10)
        .unwrap()
        .is_empty());
}

#[test]
fn searchable_attribute_is_checked_by_the_schema() {
    for (fbs, want) in [
        (
            "table T { n: int (searchable); } root_type T;",
            "expects a string or [string] field",
        ),
        (
            "table T { s: string (searchable: 0); } root_type T;",
            "greater than 0",
        ),
        (
            "table T { s: string (searchable: \"x\"); } root_type T;",
            "positive number",
        ),
        (
            "table U { s: string (searchable); } table T { u: U; } root_type T;",
            "only applies to collections",
        ),
    ] {
        let e = Schema::parse(fbs, "t.fbs").unwrap_err().to_string();
        assert!(e.contains(want), "{fbs}: {e}");
    }
    // The canonical text keeps the weights (and parses back equal).
    let s = schema();
    let again = Schema::parse(&s.to_fbs(), "again.fbs").unwrap();
    assert_eq!(s.fingerprint(), again.fingerprint());
    assert!(s.to_fbs().contains("searchable: 3.0"));
}

#[test]
fn live_search_equals_a_fresh_search_after_every_write() {
    let dir = tempfile::tempdir().unwrap();
    let s = schema();
    let db = open(&dir.path().join("live.db"), &s);
    let latest = Arc::new(std::sync::Mutex::new(Vec::<i64>::new()));
    let l2 = Arc::clone(&latest);
    let q = Expr::search("rust OR 京");
    let _sub = db
        .query(COLL)
        .filter(q.clone())
        .subscribe(move |u| {
            *l2.lock().unwrap() = u.objects.iter().map(|o| o.rowid).collect();
        })
        .unwrap();
    let texts = ["rust async", "東京都", "nothing", "Crème", "京都 rust", ""];
    for (i, t) in texts.iter().enumerate() {
        for k in 0..3 {
            let o = obj(&s, (i + k) as u8 % 5, t, &[]);
            let kill = (i + k) % 4 == 3;
            db.write(move |tx| {
                if kill {
                    tx.delete_key(COLL, &[format!("k{}", (i + k) % 5).into()])?;
                } else {
                    tx.upsert_bytes(COLL, o)?;
                }
                Ok(())
            })
            .wait()
            .unwrap();
            let fresh: Vec<i64> = db
                .query(COLL)
                .filter(q.clone())
                .all()
                .unwrap()
                .iter()
                .map(|o| o.rowid)
                .collect();
            assert_eq!(*latest.lock().unwrap(), fresh, "after writing {t:?}");
        }
    }
    db.close().wait().unwrap();
}

// ---- the index equals the rows after every write ----

#[derive(Debug, Clone)]
enum Op {
    Insert(u8, String, Vec<String>),
    Upsert(u8, String),
    Update(u8, String),
    Change(u8, String),
    ChangeKey(u8, u8),
    Delete(u8),
    DeleteWhere(String),
}

const WORDS: &[&str] = &[
    "rust",
    "Crème",
    "东京",
    "京都",
    "🦀",
    "straße",
    "go",
    "über",
    "한국어",
    "a",
];

fn text() -> impl Strategy<Value = String> {
    proptest::collection::vec(proptest::sample::select(WORDS), 0..5).prop_map(|w| w.join(" "))
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u8..6, text(), proptest::collection::vec(text(), 0..3))
            .prop_map(|(k, t, g)| Op::Insert(k, t, g)),
        (0u8..6, text()).prop_map(|(k, t)| Op::Upsert(k, t)),
        (0u8..6, text()).prop_map(|(k, t)| Op::Update(k, t)),
        (0u8..6, text()).prop_map(|(k, t)| Op::Change(k, t)),
        (0u8..6, 0u8..6).prop_map(|(a, b)| Op::ChangeKey(a, b)),
        (0u8..6).prop_map(Op::Delete),
        proptest::sample::select(WORDS).prop_map(|w| Op::DeleteWhere(w.to_owned())),
    ]
}

fn obj(s: &Schema, k: u8, body: &str, tags: &[String]) -> Vec<u8> {
    s.reader(COLL)
        .unwrap()
        .encode_json(&serde_json::json!({"id": format!("k{k}"), "title": body.to_uppercase(), "body": body, "tags": tags, "lang": "xx"}))
        .unwrap()
}

/// Run `op` in write transaction `t` (it may fail: no such key, key taken).
fn apply(t: &mut keel_query::Txn<'_>, s: &Schema, op: Op) -> keel_query::Result<()> {
    match op {
        Op::Insert(k, b, g) => t.insert_bytes(COLL, obj(s, k, &b, &g)).map(|_| ()),
        Op::Upsert(k, b) => t.upsert_bytes(COLL, obj(s, k, &b, &[])).map(|_| ()),
        Op::Update(k, b) => t
            .update_bytes(COLL, obj(s, k, &b, &["x".into()]))
            .map(|_| ()),
        Op::Change(k, b) => t
            .change_bytes(
                COLL,
                &[format!("k{k}").into()],
                &obj(s, k, &b, &[]),
                &["body"],
            )
            .map(|_| ()),
        Op::ChangeKey(a, b) => t
            .change_bytes(
                COLL,
                &[format!("k{a}").into()],
                &obj(s, b, "", &[]),
                &["id"],
            )
            .map(|_| ()),
        Op::Delete(k) => t.delete_key(COLL, &[format!("k{k}").into()]).map(|_| ()),
        Op::DeleteWhere(w) => t.delete_matching(COLL, Expr::search(w)).map(|_| ()),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
    #[test]
    fn index_equals_rows_after_every_write(ops in proptest::collection::vec(op(), 1..12), record in any::<bool>()) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.db");
        let s = schema();
        let db = open(&path, &s);
        // A subscription makes every write take the recording path (old bytes).
        let _sub = record.then(|| db.query(COLL).filter(Expr::search("rust")).subscribe(|_| {}).unwrap());
        let schema = Arc::new(s.clone());
        for op in ops {
            let s2 = s.clone();
            let o = op.clone();
            // Each op may fail (no such key, key taken): the transaction then
            // rolls back that closure only; the index must still match.
            let _ = db.write(move |t| apply(t, &s2, o)).wait();
            let conn = rusqlite::Connection::open(&path).unwrap();
            let drift = inspect::search_drift(&conn, &schema, 10).unwrap();
            prop_assert!(drift.is_empty(), "after {:?}: {:?}", op, drift);
            // FTS5 and the in-memory evaluator agree on every word.
            let all = db.query(COLL).all().unwrap();
            for w in WORDS {
                let sql = ids(&db, &s, Expr::search(*w));
                let f = Filter::new(&s, COLL, &Expr::search(*w)).unwrap();
                let mem: BTreeSet<String> = all.iter().filter(|o| f.matches(&o.bytes)).map(|o| id_of(&s, &o.bytes)).collect();
                prop_assert_eq!(sql, mem, "word {}", w);
            }
        }
        db.close().wait().unwrap();
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
    /// A live search in relevance order (bm25 over the whole index) delivers, after
    /// every write of a random sequence, exactly what a fresh ranked search returns:
    /// the same objects, bytes and order, with and without a limit.
    #[test]
    fn live_ranked_search_equals_a_fresh_ranked_search_after_every_write(
        ops in proptest::collection::vec(op(), 1..12),
        limit in proptest::option::of(1u64..4),
        worst_first in any::<bool>(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let s = schema();
        let db = open(&dir.path().join("ranked.db"), &s);
        let rank = if worst_first { keel_schema::relevance().reversed() } else { keel_schema::relevance() };
        let query = || {
            let q = db.query(COLL).filter(Expr::search("rust OR 京都 OR a")).order_by(rank.clone());
            match limit {
                Some(n) => q.limit(n),
                None => q,
            }
        };
        let latest = Arc::new(std::sync::Mutex::new(Vec::<(i64, Vec<u8>)>::new()));
        let l2 = Arc::clone(&latest);
        let _sub = query()
            .subscribe(move |u| {
                *l2.lock().unwrap() = u.objects.iter().map(|o| (o.rowid, o.bytes.clone())).collect();
            })
            .unwrap();
        for op in ops {
            let s2 = s.clone();
            let o = op.clone();
            let _ = db.write(move |t| apply(t, &s2, o)).wait();
            let fresh: Vec<(i64, Vec<u8>)> = query().all().unwrap().into_iter().map(|o| (o.rowid, o.bytes)).collect();
            prop_assert_eq!(&*latest.lock().unwrap(), &fresh, "after {:?}", op);
        }
        db.close().wait().unwrap();
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
    /// A page of a ranked search (where the index ranks and cuts before the
    /// join: relevance alone, a limit, no other filter) is exactly that slice of
    /// the whole ranked result, best first and worst first, ties by rowid; with
    /// another filter beside the search, too.
    #[test]
    fn a_ranked_page_is_the_slice_of_the_whole_ranked_result(
        docs in proptest::collection::vec(text(), 4..30),
        limit in 1u64..6,
        offset in 0u64..6,
        worst_first in any::<bool>(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let s = schema();
        let db = open(&dir.path().join("page.db"), &s);
        let objs: Vec<Vec<u8>> = docs.iter().enumerate().map(|(k, t)| obj(&s, k as u8, t, &[])).collect();
        db.write(move |t| {
            for o in objs {
                t.insert_bytes(COLL, o)?;
            }
            Ok(())
        })
        .wait()
        .unwrap();
        let rank = if worst_first { keel_schema::relevance().reversed() } else { keel_schema::relevance() };
        let lang = s.reader(COLL).unwrap().path("lang").unwrap();
        for filter in [Expr::search("rust OR 京都 OR a"), Expr::search("rust OR 京都 OR a") & Expr::ne(lang, "ta")] {
            let ids = |v: Vec<keel_query::StoredObject>| v.into_iter().map(|o| o.rowid).collect::<Vec<_>>();
            let whole = ids(db.query(COLL).filter(filter.clone()).order_by(rank.clone()).all().unwrap());
            let page = ids(db.query(COLL).filter(filter.clone()).order_by(rank.clone()).limit(limit).offset(offset).all().unwrap());
            let want: Vec<i64> = whole.iter().copied().skip(offset as usize).take(limit as usize).collect();
            prop_assert_eq!(page, want);
        }
        db.close().wait().unwrap();
    }
}

#[test]
fn typed_string_field_handles_have_matches() {
    use keel_example_blog::blog::Post;
    let e = Post::title().matches("rust async");
    assert_eq!(e.to_string(), "title MATCHES \"rust async\"");
    // The blog's title is not searchable: a typed error, not an SQL one.
    let dir = tempfile::tempdir().unwrap();
    let db =
        Database::open_for::<Post>(dir.path().join("blog.db"), StoreOptions::default()).unwrap();
    assert!(matches!(
        db.fetch::<Post>().filter(e).all(),
        Err(Error::TypeMismatch { .. })
    ));
    db.close().wait().unwrap();
}

/// A field's weight changed in the `.fbs` takes effect at the next open, on the
/// index built with the old weights: relevance follows the new weights at once
/// (bm25's weights are arguments of each ranked query, never stored in the
/// index), through a fetch and a ranked live query alike, and the index is
/// neither stale nor rebuilt (`keel check` finds no drift).
#[test]
fn item7_a_reweighted_field_ranks_by_its_new_weight_after_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("reweight.db");
    let weighted =
        |title: &str, body: &str| Schema::parse(&schema_text(title, body, ""), "w.fbs").unwrap();
    let docs = serde_json::json!([
        {"id": "in-title", "title": "Kiwi and lime", "body": "Nothing of the sort"},
        {"id": "in-body", "title": "Other fruit", "body": "Kiwi kiwi, a kiwi"},
    ]);
    let ranked = |db: &Database, s: &Schema| -> Vec<String> {
        db.query(COLL)
            .filter(Expr::search("kiwi"))
            .order_by(keel_schema::relevance())
            .all()
            .unwrap()
            .iter()
            .map(|o| id_of(s, &o.bytes))
            .collect()
    };
    let title_heavy = weighted("(searchable: 50.0)", "(searchable: 0.1)");
    let db = open(&path, &title_heavy);
    load(&db, &title_heavy, docs.as_array().unwrap());
    assert_eq!(ranked(&db, &title_heavy), ["in-title", "in-body"]);
    db.close().wait().unwrap();

    // Reweighted: the body now counts, the title hardly.
    let body_heavy = weighted("(searchable: 0.1)", "(searchable: 50.0)");
    let db = open(&path, &body_heavy);
    assert_eq!(ranked(&db, &body_heavy), ["in-body", "in-title"]);
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = body_heavy.clone();
    let _sub = db
        .query(COLL)
        .filter(Expr::search("kiwi"))
        .order_by(keel_schema::relevance())
        .subscribe(move |u| {
            let got: Vec<String> = u.objects.iter().map(|o| id_of(&reader, &o.bytes)).collect();
            let _ = tx.send(got);
        })
        .unwrap();
    assert_eq!(rx.recv().unwrap(), ["in-body", "in-title"]);
    db.close().wait().unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    assert!(inspect::search_drift(&conn, &Arc::new(body_heavy), 10)
        .unwrap()
        .is_empty());
}
