//! Schema mapping against a real PostgreSQL: the printed DDL creates tables that the
//! check accepts, whose triggers stamp versions on plain SQL writes; a changed table
//! is reported difference by difference; the `keel-relay schema` command does both.

mod common;

use std::process::Command;

use keel_relay::ddl::{self, Difference};
use keel_relay::sync_schema::{ConflictRule, PgType, SyncSchema};
use keel_relay::test_postgres::TestPostgres;

#[test]
fn fields_map_to_typed_columns_and_rules() {
    let schema = common::blog_schema();
    let names: Vec<&str> = schema.collections.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["blog.Post", "blog.Comment"], "Note is not synced");
    let posts = schema.collection("blog.Post").unwrap();
    assert_eq!(posts.table, "posts");
    let ty = |name: &str| posts.column(name).unwrap().pg_type.clone();
    assert_eq!(ty("likes"), PgType::BigInt);
    assert_eq!(ty("status"), PgType::SmallInt);
    assert_eq!(ty("tags"), PgType::Array(Box::new(PgType::Text)));
    assert_eq!(ty("cover"), PgType::Bytea);
    assert_eq!(ty("location"), PgType::Jsonb);
    assert_eq!(ty("meta"), PgType::Jsonb);
    assert_eq!(posts.column("likes").unwrap().rule, ConflictRule::Counter);
    assert_eq!(
        posts.column("pinned").unwrap().rule,
        ConflictRule::ServerWins
    );
    assert_eq!(posts.column("title").unwrap().rule, ConflictRule::Merge);
    assert!(
        !posts.column("rating").unwrap().not_null,
        "= null stays nullable"
    );
    assert_eq!(schema.collection("Comment").unwrap().table, "comment");
}

#[test]
fn bad_sync_markings_are_typed_errors() {
    let cases = [
        (
            "attribute \"sync\"; table T (sync) { a: int; } root_type T;",
            "needs a (primary) key",
        ),
        (
            "attribute \"sync\"; table T (entity) { a: int (primary); } table U (sync) { a: int; } root_type T;",
            "is not a collection",
        ),
        (
            "attribute \"sync\"; table T (sync) { a: int (primary); b: string (sync: counter); } root_type T;",
            "must be an integer or float",
        ),
        (
            "attribute \"sync\"; table T (sync) { a: int (primary); b: int (sync: sometimes); } root_type T;",
            "expected a sync rule",
        ),
    ];
    for (text, expected) in cases {
        let err = SyncSchema::parse(text, "t.fbs").unwrap_err().to_string();
        assert!(err.contains(expected), "{err:?} should say {expected:?}");
    }
}

#[tokio::test]
async fn the_ddl_creates_tables_the_check_accepts_and_versions_advance() {
    let Some(pg) = TestPostgres::start().expect("PostgreSQL starts") else {
        return;
    };
    let schema = common::blog_schema();
    let client = common::connect(pg.url()).await;
    client.batch_execute(&ddl::ddl(&schema)).await.unwrap();
    // Idempotent: the printed script runs twice.
    client.batch_execute(&ddl::ddl(&schema)).await.unwrap();
    assert_eq!(ddl::check(&client, &schema).await.unwrap(), vec![]);

    // Plain SQL writes get versions: an insert names its incarnation, an update
    // advances the version and keeps the incarnation.
    client
        .batch_execute("INSERT INTO posts (id, owner, title) VALUES ('p1', 'ann', 'Hi')")
        .await
        .unwrap();
    let row = client
        .query_one("SELECT keel_version, keel_created, likes FROM posts", &[])
        .await
        .unwrap();
    let (v1, c1, likes): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
    assert_eq!(v1, c1);
    assert_eq!(likes, 0, "the FlatBuffers default fills an absent scalar");
    client
        .batch_execute("UPDATE posts SET title = 'Hello'")
        .await
        .unwrap();
    let row = client
        .query_one("SELECT keel_version, keel_created FROM posts", &[])
        .await
        .unwrap();
    let (v2, c2): (i64, i64) = (row.get(0), row.get(1));
    assert!(v2 > v1, "an update advances the version");
    assert_eq!(c2, c1, "and keeps the incarnation");
}

#[tokio::test]
async fn the_check_names_each_difference() {
    let Some(pg) = TestPostgres::start().expect("PostgreSQL starts") else {
        return;
    };
    let schema = common::blog_schema();
    let client = common::connect(pg.url()).await;
    client.batch_execute(&ddl::ddl(&schema)).await.unwrap();
    client
        .batch_execute(
            "ALTER TABLE posts DROP COLUMN title;
             ALTER TABLE posts ALTER COLUMN owner TYPE varchar(20);
             ALTER TABLE posts ALTER COLUMN rating SET NOT NULL;
             ALTER TABLE posts ADD COLUMN secret text NOT NULL;
             ALTER TABLE posts ADD COLUMN note text;
             ALTER TABLE posts REPLICA IDENTITY DEFAULT;
             DROP TRIGGER keel_row_version ON posts;
             DROP TABLE comment;",
        )
        .await
        .unwrap();
    let differences = ddl::check(&client, &schema).await.unwrap();
    let posts = || "posts".to_owned();
    assert_eq!(
        differences,
        vec![
            Difference::WrongType {
                table: posts(),
                column: "owner".into(),
                expected: "text".into(),
                found: "character varying(20)".into()
            },
            Difference::MissingColumn {
                table: posts(),
                column: "title".into(),
                expected: "text".into()
            },
            Difference::WrongNullability {
                table: posts(),
                column: "rating".into(),
                expected_not_null: false
            },
            Difference::UnfillableColumn {
                table: posts(),
                column: "secret".into()
            },
            Difference::MissingTrigger { table: posts() },
            Difference::ReplicaIdentity {
                table: posts(),
                found: "default (primary key only)".into()
            },
            Difference::MissingTable {
                table: "comment".into()
            },
        ]
    );
    assert_eq!(
        differences[0].to_string(),
        "table posts: column owner is character varying(20), the schema maps it to text"
    );
}

#[tokio::test]
async fn the_schema_command_prints_and_checks() {
    let binary = env!("CARGO_BIN_EXE_keel-relay");
    let fbs = common::blog_fbs();
    let printed = Command::new(binary)
        .arg("schema")
        .arg(&fbs)
        .output()
        .unwrap();
    assert!(printed.status.success());
    let ddl_text = String::from_utf8(printed.stdout).unwrap();
    assert!(ddl_text.contains("CREATE TABLE IF NOT EXISTS \"posts\""));

    let Some(pg) = TestPostgres::start().expect("PostgreSQL starts") else {
        return;
    };
    let check = |url: &str| {
        Command::new(binary)
            .arg("schema")
            .arg(&fbs)
            .args(["--check", url])
            .output()
            .unwrap()
    };
    let before = check(pg.url());
    assert_eq!(before.status.code(), Some(1), "an empty database differs");
    let report = String::from_utf8_lossy(&before.stdout);
    assert!(report.contains("table posts: missing"), "{report}");
    assert!(report.contains("table comment: missing"), "{report}");

    let client = common::connect(pg.url()).await;
    client.batch_execute(&ddl_text).await.unwrap();
    let after = check(pg.url());
    assert_eq!(after.status.code(), Some(0), "{:?}", after);
    assert!(String::from_utf8_lossy(&after.stdout).starts_with("ok: 2 synced collection(s)"));
}
