//! A query run again with other values reuses SQLite's compiled statement.
//!
//! keel keeps each query's prepared statement in the connection's cache and binds
//! the values anew. SQLite re-compiles a cached statement at its next step when a
//! parameter it marked "may change the plan" was bound again, whatever the value;
//! the bundled SQLite (3.54) marks a bound `LIMIT` so. A paged query (every live
//! window reads its prefix that way, and refills it from the writer thread) was
//! then compiled afresh at every run. These tests run the SQL keel makes, with its
//! parameters, on the same bundled SQLite, and count re-compiles.

use keel_example_blog::blog::Post;
use keel_query::{Database, StoreOptions, Value};
use rusqlite::StatementStatus;

/// Run `sql` with each parameter list through one cached statement; how often
/// SQLite re-compiled it.
fn reprepares(conn: &rusqlite::Connection, runs: &[(String, Vec<Value>)]) -> i32 {
    let sql = &runs[0].0;
    for (s, params) in runs {
        assert_eq!(s, sql, "the same query shape gives the same SQL");
        let mut st = conn.prepare_cached(s).unwrap();
        let args: Vec<rusqlite::types::Value> = params
            .iter()
            .map(|v| match v {
                Value::Int(i) => rusqlite::types::Value::Integer(*i),
                Value::Text(t) => rusqlite::types::Value::Text(t.clone()),
                other => panic!("unexpected parameter {other:?}"),
            })
            .collect();
        let mut rows = st.query(rusqlite::params_from_iter(args)).unwrap();
        while rows.next().unwrap().is_some() {}
    }
    conn.prepare_cached(sql)
        .unwrap()
        .get_status(StatementStatus::RePrepare)
}

fn setup() -> (tempfile::TempDir, Database, rusqlite::Connection) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let db = Database::open_for::<Post>(&path, StoreOptions::default()).unwrap();
    db.write(|t| {
        for i in 0..200 {
            t.insert(&Post::builder().id(format!("p{i:03}")).priority(i).build())?;
        }
        Ok(())
    })
    .wait()
    .unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    (dir, db, conn)
}

#[test]
fn a_paged_window_runs_again_without_a_recompile() {
    let (_dir, db, conn) = setup();
    let runs: Vec<_> = [0, 10, 20, 30]
        .iter()
        .map(|&lo| {
            db.query("blog.Post")
                .filter(Post::priority().ge(lo) & Post::priority().lt(lo + 50))
                .order_by(Post::priority().asc())
                .limit(50)
                .sql()
                .unwrap()
        })
        .collect();
    assert_eq!(reprepares(&conn, &runs), 0);
}

#[test]
fn a_page_with_an_offset_runs_again_without_a_recompile() {
    let (_dir, db, conn) = setup();
    let runs: Vec<_> = [0, 10, 20]
        .iter()
        .map(|&lo| {
            db.query("blog.Post")
                .filter(Post::priority().ge(lo))
                .order_by(Post::priority().asc())
                .limit(20)
                .offset(5)
                .sql()
                .unwrap()
        })
        .collect();
    assert_eq!(reprepares(&conn, &runs), 0);
}
