//! A keel file is an ordinary SQLite file to the tools app developers use:
//! Python's stock `sqlite3` module — no keel function registered — checks it
//! (`PRAGMA integrity_check` is `ok`) and reads every index; a write it makes to an
//! indexed column is found by `keel check` and undone by `keel check --repair`.
//!
//! Without `python3` on the machine the test says it skipped, plainly.

use std::path::Path;
use std::process::Command;

use keel_query::{Database, StoreOptions};
use keel_schema::{Expr, Schema};
use serde_json::{json, Value as Json};

const FBS: &str = "namespace fx;
enum Color: byte { Red, Green, Blue }
table Orb { name: string (unique); }
table Axe { w: int; }
union Gear { Orb, Axe }
table Item { id: string (primary); n: int (indexed); tag: string (unique); color: Color = Green (indexed); gear: Gear; score: double (indexed); }
table Log (entity) { at: long (indexed); msg: string; }
root_type Item;";

fn python() -> Option<&'static str> {
    Command::new("python3")
        .arg("--version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|_| "python3")
}

/// Run `script` with Python's stock sqlite3 on `db`; its stdout is JSON.
fn py(python: &str, db: &Path, script: &str) -> Json {
    let out = Command::new(python)
        .arg("-c")
        .arg(script)
        .arg(db)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "python failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "python printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

const INSPECT: &str = r#"
import json, sqlite3, sys
c = sqlite3.connect(sys.argv[1])
out = {"integrity": [r[0] for r in c.execute("PRAGMA integrity_check")],
       "keel_functions": [r[0] for r in c.execute("SELECT name FROM sqlite_schema WHERE instr(sql, 'keel_field') > 0")],
       "indexes": {}, "rows": {}}
for (table,) in c.execute("SELECT name FROM sqlite_schema WHERE type = 'table'").fetchall():
    out["rows"][table] = len(c.execute('SELECT * FROM "%s"' % table.replace('"', '""')).fetchall())
for name, table in c.execute("SELECT name, tbl_name FROM sqlite_schema WHERE type = 'index'").fetchall():
    cols = [r[2] for r in c.execute('PRAGMA index_info("%s")' % name.replace('"', '""'))]
    q = lambda s: '"%s"' % s.replace('"', '""')
    rows = c.execute("SELECT %s FROM %s INDEXED BY %s ORDER BY %s" % (q(cols[0]), q(table), q(name), q(cols[0]))).fetchall()
    out["indexes"][name] = [r[0] for r in rows]
print(json.dumps(out))
"#;

fn keel(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_keel"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn stock_sqlite_checks_and_reads_every_index_and_keel_check_repairs_its_writes() {
    let Some(python) = python() else {
        println!("skipped: python3 is not installed, so stock sqlite3 cannot be run");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    let schema = Schema::parse(FBS, "fx.fbs").unwrap();
    let db = Database::open(&path, schema.clone(), StoreOptions::default()).unwrap();
    let item = schema.reader("fx.Item").unwrap();
    let log = schema.reader("fx.Log").unwrap();
    let items: Vec<Vec<u8>> = (0..30i64)
        .map(|i| {
            let mut j = json!({"id": format!("i{i:02}"), "n": i % 4, "tag": format!("t{i}"), "score": i as f64 / 2.0});
            if i % 3 == 0 {
                j["color"] = json!("Blue");
            }
            if i % 2 == 0 {
                j["gear_type"] = json!("Orb");
                j["gear"] = json!({"name": format!("orb{i}")});
            }
            item.encode_json(&j).unwrap()
        })
        .collect();
    let logs: Vec<Vec<u8>> = (0..5i64)
        .map(|i| log.encode_json(&json!({"at": 10 - i, "msg": "m"})).unwrap())
        .collect();
    db.write(move |t| {
        for b in items {
            t.insert_bytes("fx.Item", b)?;
        }
        for b in logs {
            t.insert_bytes("fx.Log", b)?;
        }
        Ok(())
    })
    .wait()
    .unwrap();
    // An update through keel rewrites the columns too.
    let changed = item
        .encode_json(&json!({"id": "i05", "n": 40, "tag": "t5", "score": 2.5}))
        .unwrap();
    db.write(move |t| t.update_bytes("fx.Item", changed).map(|_| ()))
        .wait()
        .unwrap();
    db.close().wait().unwrap();

    let got = py(python, &path, INSPECT);
    assert_eq!(got["integrity"], json!(["ok"]), "{got}");
    assert_eq!(got["keel_functions"], json!([]), "{got}");
    let ix = &got["indexes"];
    let mut n: Vec<i64> = (0..30).map(|i| if i == 5 { 40 } else { i % 4 }).collect();
    n.sort();
    assert_eq!(ix["fx.Item#1"], json!(n));
    assert_eq!(ix["fx.Item#2"].as_array().unwrap().len(), 30);
    // The enum column holds numbers; absent values read the default (Green = 1).
    let mut colors: Vec<i64> = (0..30)
        .map(|i| if i % 3 == 0 && i != 5 { 2 } else { 1 })
        .collect();
    colors.sort();
    assert_eq!(ix["fx.Item#3"], json!(colors));
    // The unique index inside a union member holds NULL for the objects without one.
    let orbs = ix["fx.Item#5:1.0"].as_array().unwrap();
    assert_eq!(orbs.len(), 30);
    assert_eq!(orbs.iter().filter(|v| v.is_string()).count(), 15);
    assert_eq!(ix["fx.Item#6"].as_array().unwrap().len(), 30);
    assert_eq!(ix["fx.Log#0"], json!([6, 7, 8, 9, 10]));
    // The primary key's own unique index is readable too, and so is every table.
    assert_eq!(
        ix["sqlite_autoindex_fx.Item_1"].as_array().unwrap().len(),
        30,
        "{ix}"
    );
    assert_eq!(got["rows"]["fx.Item"], json!(30));
    assert_eq!(got["rows"]["fx.Log"], json!(5));

    let (code, out) = keel(&["check", path.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    assert!(!out.contains("storage format"), "{out}");

    // A stock tool changes an indexed column: the object's bytes still say n = 2.
    let edited = py(
        python,
        &path,
        r#"
import json, sqlite3, sys
c = sqlite3.connect(sys.argv[1])
c.execute('UPDATE "fx.Item" SET f1 = 99 WHERE k0 = ?', ("i02",))
c.commit()
print(json.dumps({"changed": c.total_changes}))
"#,
    );
    assert_eq!(edited["changed"], json!(1));
    let (code, out) = keel(&["check", path.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("column f1 holds 99, the object says 2"),
        "{out}"
    );
    assert!(out.contains("keel check --repair"), "{out}");
    let (code, out) = keel(&["check", path.to_str().unwrap(), "--json"]);
    let j: Json = serde_json::from_str(&out).unwrap();
    assert_eq!(code, 1);
    assert_eq!(
        j["storage_format"],
        json!(keel_query::inspect::STORAGE_FORMAT)
    );
    assert_eq!(
        j["column_mismatches"],
        json!([{"collection": "fx.Item", "rowid": 3, "column": "f1", "stored": 99, "expected": 2}])
    );

    let (code, out) = keel(&["check", path.to_str().unwrap(), "--repair"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("repaired 1 object(s)"), "{out}");
    let (code, out) = keel(&["check", path.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");

    // And keel's indexed query agrees with the bytes again.
    let db = Database::open(&path, schema.clone(), StoreOptions::default()).unwrap();
    let np = item.path("n").unwrap();
    let found = db.query("fx.Item").filter(Expr::eq(np, 2)).count().unwrap();
    assert_eq!(found, (0..30).filter(|i| i % 4 == 2).count() as u64);
    db.close().wait().unwrap();
    let got = py(python, &path, INSPECT);
    assert_eq!(got["integrity"], json!(["ok"]));
}

/// `keel check` on a file an older keel wrote (format 1) says so, and still checks it.
#[test]
fn keel_check_names_a_format_1_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.keel");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/format1.keel"),
        &path,
    )
    .unwrap();
    let (code, out) = keel(&["check", path.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("storage format: 1"), "{out}");
    assert!(out.contains("upgrades it in place"), "{out}");
}

/// A searchable collection: Python's stock `sqlite3` checks the file
/// and queries the full-text index; a row it deletes behind keel's back leaves
/// the index out of step, which `keel check` reports and `--repair` rebuilds.
#[test]
fn keel_check_compares_the_full_text_index_and_repair_rebuilds_it() {
    let Some(python) = python() else {
        println!("skipped: no python3 on this machine");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("search.db");
    let schema = Schema::parse(
        "attribute \"searchable\"; namespace fx;
         table Note { id: string (primary); body: string (searchable); }
         root_type Note;",
        "s.fbs",
    )
    .unwrap();
    let db = Database::open(&path, schema.clone(), StoreOptions::default()).unwrap();
    let r = schema.reader("fx.Note").unwrap();
    let objs: Vec<Vec<u8>> = ["Crème brûlée", "東京都の天気", "rust async"]
        .iter()
        .enumerate()
        .map(|(i, t)| {
            r.encode_json(&json!({"id": format!("n{i}"), "body": t}))
                .unwrap()
        })
        .collect();
    db.write(move |t| {
        for o in objs {
            t.insert_bytes("fx.Note", o)?;
        }
        Ok(())
    })
    .wait()
    .unwrap();
    db.close().wait().unwrap();
    let (code, out) = keel(&["check", path.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    let got = py(
        python,
        &path,
        r#"
import json, sqlite3, sys
c = sqlite3.connect(sys.argv[1])
out = {"integrity": [r[0] for r in c.execute("PRAGMA integrity_check")],
       "hits": [r[0] for r in c.execute('SELECT rowid FROM "fx.Note$fts" WHERE "fx.Note$fts" MATCH ?', ('"京都"',))]}
c.execute('DELETE FROM "fx.Note" WHERE k0 = ?', ("n2",))
c.commit()
print(json.dumps(out))
"#,
    );
    assert_eq!(got["integrity"], json!(["ok"]));
    assert_eq!(got["hits"], json!([2]));
    let (code, out) = keel(&["check", path.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("full-text index entry extra"), "{out}");
    let (code, out) = keel(&["check", path.to_str().unwrap(), "--repair"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("rebuilt the full-text index from 2 object(s)"),
        "{out}"
    );
    let (code, out) = keel(&["check", path.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
}
