//! One verdict on hostile bytes, on the write path and on the read path: each case
//! of `tests/bytes/post_read_path.txt` (a `blog.Post` buffer and its verdict) gets
//! that verdict from `insert_bytes` (the verifier), from `wire::decode_stored` and
//! from a typed `db.get` of a row whose body another tool (stock SQLite, as the
//! `sqlite3` shell would) replaced with the bytes. The Kotlin and Swift corpus
//! tests read the same file. The rule is `docs/schema.md`, "Valid bytes": the
//! alignment, NUL, union and table-visit rules hold on reads as on writes, and the
//! decode budget (`wire::MAX_EXPANSION`) is the one size limit of every runtime.

use keel::prelude::*;
use keel_example_blog::blog::Post;
use keel_schema::wire;

/// `(name, accept, bytes)` per line of the shared read-path corpus.
fn cases() -> Vec<(String, bool, Vec<u8>)> {
    let text = include_str!("bytes/post_read_path.txt");
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let mut cols = l.split('\t');
            let name = cols.next().unwrap().to_string();
            let accept = match cols.next().unwrap() {
                "accept" => true,
                "reject" => false,
                v => panic!("{name}: verdict {v}"),
            };
            let hex = cols.next().unwrap();
            let bytes = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                .collect();
            (name, accept, bytes)
        })
        .collect()
}

/// Root `blog.Post` plus `visits - 1` attachment offsets to one empty `Image`:
/// `visits` table visits in one decode.
fn table_visits(visits: usize) -> Vec<u8> {
    let schema =
        keel_schema::Schema::parse(<Post as keel_schema::Record>::SCHEMA_FBS, "blog.fbs").unwrap();
    let t = &schema.tables[schema.table_index("blog.Post").unwrap()];
    let slot = |name: &str| t.fields.iter().find(|f| f.name == name).unwrap().id;
    let mut b = wire::Builder::new();
    b.start_table();
    let image = b.end_table();
    let attachments = b.create_offset_vector(&vec![image; visits - 1]);
    let id = b.create_string("visits");
    b.start_table();
    b.add_offset(slot("id"), id);
    b.add_offset(slot("attachments"), attachments);
    let root = b.end_table();
    b.finish(root, None)
}

/// The verdict of `insert_bytes` (`Ok` = stored) on a fresh database.
fn write_verdict(bytes: &[u8]) -> bool {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open_for::<Post>(dir.path().join("w.db"), StoreOptions::default()).unwrap();
    let b = bytes.to_vec();
    let stored = db
        .write(move |t| t.insert_bytes("blog.Post", b))
        .wait()
        .is_ok();
    let count = db.fetch::<Post>().count().unwrap();
    assert_eq!(count, stored as u64, "stored exactly when accepted");
    stored
}

/// The verdict of a typed `db.get` of a row whose body stock SQLite replaced with
/// `bytes` (`Ok(Some)` = accept, `Err` = reject; anything else is a failure).
fn read_verdict(bytes: &[u8]) -> bool {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.db");
    {
        let db = Database::open_for::<Post>(&path, StoreOptions::default()).unwrap();
        let victim = Post::builder().id("victim").title("seed").build();
        db.write(move |t| t.insert(&victim)).wait().unwrap();
        db.close().wait().unwrap();
    }
    // Stock SQLite in its own process, as the `sqlite3` shell rewrites a row.
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let sql =
        format!("UPDATE \"blog.Post\" SET body = X'{hex}' WHERE k0 = 'victim'; SELECT changes();");
    let out = std::process::Command::new("sqlite3")
        .arg(&path)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(sql.as_bytes())?;
            child.wait_with_output()
        })
        .expect("the sqlite3 shell runs");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "1",
        "the seeded row is rewritten"
    );
    let db = Database::open_for::<Post>(&path, StoreOptions::default()).unwrap();
    match db.get::<Post>(&"victim".to_string()) {
        Ok(Some(_)) => true,
        Err(Error::Decode { .. }) => false,
        other => panic!("typed get: neither an object nor a typed decode error: {other:?}"),
    }
}

fn check(name: &str, accept: bool, bytes: &[u8]) -> Vec<String> {
    let mut wrong = Vec::new();
    let decode = wire::decode_stored::<Post>(bytes).is_ok();
    let verified = Post::decode(bytes).is_ok();
    let written = write_verdict(bytes);
    let read = read_verdict(bytes);
    for (path, got) in [
        ("Post::decode", verified),
        ("insert_bytes", written),
        ("wire::decode_stored", decode),
        ("typed db.get of a rewritten row", read),
    ] {
        if got != accept {
            wrong.push(format!("{name}: {path} says {got}, the corpus {accept}"));
        }
    }
    wrong
}

/// Misaligned tables, vtables, strings, vectors and doubles, a string without its
/// NUL, a union value without its type and a string offset that names a table:
/// refused by the typed read of a stored row as by the verifier and by Swift and
/// Kotlin.
#[test]
fn one_verdict_on_bytes_on_the_read_path_too() {
    let wrong: Vec<String> = cases()
        .iter()
        .filter(|(name, ..)| !name.starts_with("h_bomb_"))
        .flat_map(|(name, accept, bytes)| check(name, *accept, bytes))
        .collect();
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Bombs of 134–150 offsets to one shared `Image`: the verifier on write and the
/// decode budget on read draw the line at the same place, `MAX_EXPANSION` × the
/// buffer's length, as Swift and Kotlin do.
#[test]
fn one_verdict_on_bytes_one_decode_budget() {
    let wrong: Vec<String> = cases()
        .iter()
        .filter(|(name, ..)| name.starts_with("h_bomb_"))
        .flat_map(|(name, accept, bytes)| check(name, *accept, bytes))
        .collect();
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// `MAX_TABLES` visits decode; one more is refused on read as on write.
#[test]
fn one_verdict_on_bytes_table_visits_on_the_read_path() {
    let mut wrong = check(
        "1,000,000 table visits",
        true,
        &table_visits(wire::MAX_TABLES),
    );
    wrong.extend(check(
        "1,000,001 table visits",
        false,
        &table_visits(wire::MAX_TABLES + 1),
    ));
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
