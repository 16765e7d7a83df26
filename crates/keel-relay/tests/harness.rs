//! The test harness itself: a throwaway cluster starts with logical decoding enabled,
//! gives each caller its own database, and is gone after drop.

use keel_relay::test_postgres::TestPostgres;

#[tokio::test]
async fn a_throwaway_cluster_runs_with_logical_decoding() {
    let Some(pg) = TestPostgres::start().expect("PostgreSQL starts") else {
        return;
    };
    let (client, connection) = tokio_postgres::connect(pg.url(), tokio_postgres::NoTls)
        .await
        .expect("connects");
    tokio::spawn(connection);
    let row = client.query_one("SHOW wal_level", &[]).await.unwrap();
    assert_eq!(row.get::<_, String>(0), "logical");
    let row = client
        .query_one("SELECT current_database()", &[])
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), pg.database());
    // A logical slot can be made and read through the SQL interface the relay uses.
    // One statement per call: a slot cannot be made in a transaction that wrote.
    for sql in [
        "CREATE TABLE t (id int primary key, v text)",
        "CREATE PUBLICATION p FOR TABLE t",
        "SELECT pg_create_logical_replication_slot('s', 'pgoutput')",
        "INSERT INTO t VALUES (1, 'one')",
    ] {
        client.batch_execute(sql).await.unwrap();
    }
    let rows = client
        .query(
            "SELECT data FROM pg_logical_slot_peek_binary_changes('s', NULL, NULL, \
             'proto_version', '1', 'publication_names', 'p')",
            &[],
        )
        .await
        .unwrap();
    let kinds: Vec<u8> = rows.iter().map(|r| r.get::<_, Vec<u8>>(0)[0]).collect();
    assert_eq!(kinds, b"BRIC", "begin, relation, insert, commit");
    client
        .batch_execute("SELECT pg_drop_replication_slot('s')")
        .await
        .unwrap();
}

#[test]
fn dropping_the_handle_stops_the_cluster() {
    let Some(pg) = TestPostgres::start().expect("PostgreSQL starts") else {
        return;
    };
    let url = pg.url().to_owned();
    drop(pg);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let refused = runtime.block_on(tokio_postgres::connect(&url, tokio_postgres::NoTls));
    if std::env::var(keel_relay::test_postgres::URL_VARIABLE).is_err() {
        assert!(refused.is_err(), "the server is gone after drop");
    } else {
        assert!(refused.is_err(), "the test database is gone after drop");
    }
}
