//! Storage format 1 → 2 (the file then records the current
//! format, [`inspect::STORAGE_FORMAT`]): a file written by keel before the
//! plain-column layout (`tests/fixtures/format1.keel`, see `format1.md` beside it)
//! opens and is upgraded in place, in the schema transaction, with progress events;
//! and — on keel-storage's simulated disk — a crash at any operation of the
//! upgrading open followed by a power loss leaves the old format or the new one,
//! never a mix. The next open finishes the job.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use keel_query::{inspect, Database, StoreOptions, Value};
use keel_schema::{Expr, Schema};
use keel_storage::sim::{SimDisk, SimRng};
use keel_storage::{OpenPhase, OpenProgress};

/// The schema the fixture was written with (`tests/fixtures/format1.md`).
const FBS: &str = "namespace fx;
enum Color: byte { Red, Green, Blue }
table Orb { name: string (unique); }
table Axe { w: int; }
union Gear { Orb, Axe }
table Item { id: string (primary); n: int (indexed); tag: string (unique); color: Color = Green (indexed); gear: Gear; note: string; }
table Log (entity) { at: long (indexed); msg: string; }
root_type Item;";

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/format1.keel")
}

fn quiet() -> StoreOptions {
    StoreOptions::default().idle_checkpoint_after(Duration::from_secs(3600))
}

fn copy_fixture(dir: &Path, name: &str) -> PathBuf {
    let d = dir.join(name);
    std::fs::create_dir_all(&d).unwrap();
    let p = d.join("app.keel");
    std::fs::copy(fixture(), &p).unwrap();
    p
}

/// `(format, expression indexes, index columns)` of the file, read with plain SQLite.
fn file_state(path: &Path) -> (i64, usize, usize) {
    let c = rusqlite::Connection::open(path).unwrap();
    let format: i64 = c
        .query_row(
            "SELECT value FROM keel_meta WHERE key = 'format'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let expr: i64 = c
        .query_row(
            "SELECT count(*) FROM sqlite_schema WHERE instr(sql, 'keel_field') > 0",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let cols: i64 = c
        .query_row(
            "SELECT (SELECT count(*) FROM pragma_table_info('fx.Item') WHERE name LIKE 'f%')
                  + (SELECT count(*) FROM pragma_table_info('fx.Log') WHERE name LIKE 'f%')",
            [],
            |r| r.get(0),
        )
        .unwrap();
    (format, expr as usize, cols as usize)
}

/// The objects the fixture holds answer queries through every index as they should.
fn assert_contents(db: &Database, schema: &Schema) {
    let item = schema.reader("fx.Item").unwrap();
    let ids = |e: Expr| -> Vec<String> {
        let mut v: Vec<String> = db
            .query("fx.Item")
            .filter(e)
            .all()
            .unwrap()
            .iter()
            .map(
                |o| match item.read(&o.bytes).unwrap().get(&item.path("id").unwrap()) {
                    Value::Text(s) => s,
                    v => panic!("id {v:?}"),
                },
            )
            .collect();
        v.sort();
        v
    };
    let want = |f: &dyn Fn(i64) -> bool| -> Vec<String> {
        (0..40i64)
            .filter(|i| f(*i))
            .map(|i| format!("i{i:02}"))
            .collect()
    };
    let n = |i: i64| if i % 5 == 0 { 0 } else { i % 7 };
    assert_eq!(
        ids(Expr::eq(item.path("n").unwrap(), 3)),
        want(&|i| n(i) == 3)
    );
    assert_eq!(
        ids(Expr::eq(item.path("color").unwrap(), 2)),
        want(&|i| i % 3 == 0)
    );
    assert_eq!(ids(Expr::eq(item.path("tag").unwrap(), "t7")), ["i07"]);
    assert_eq!(
        ids(Expr::eq(item.path("gear.Orb.name").unwrap(), "orb8")),
        ["i08"]
    );
    let log = schema.reader("fx.Log").unwrap();
    assert_eq!(
        db.query("fx.Log")
            .filter(Expr::Cmp {
                path: log.path("at").unwrap(),
                op: keel_schema::CmpOp::Ge,
                value: 95.into()
            })
            .count()
            .unwrap(),
        6
    );
    assert_eq!(db.query("fx.Item").count().unwrap(), 40);
    // A unique index is enforced on the upgraded file.
    let dup = item
        .encode_json(&serde_json::json!({"id": "new", "tag": "t3"}))
        .unwrap();
    assert!(matches!(
        db.write(move |t| t.insert_bytes("fx.Item", dup).map(|_| ()))
            .wait(),
        Err(keel_query::Error::AlreadyExists { .. })
    ));
}

/// What stock SQLite sees: `integrity_check` passes with no keel function, and
/// every column agrees with its object.
fn assert_plain_sqlite(path: &Path, schema: &Schema) {
    let c = rusqlite::Connection::open(path).unwrap();
    let ok: String = c
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(ok, "ok");
    let bad = inspect::column_mismatches(&c, &Arc::new(schema.clone()), 10).unwrap();
    assert!(bad.is_empty(), "{bad:?}");
}

#[test]
fn a_format_1_file_is_upgraded_in_place_in_one_transaction_with_progress() {
    let dir = tempfile::tempdir().unwrap();
    let path = copy_fixture(dir.path(), "up");
    assert_eq!(file_state(&path), (1, 5, 0));
    let schema = Schema::parse(FBS, "fx.fbs").unwrap();
    let events: Arc<Mutex<Vec<OpenProgress>>> = Arc::default();
    let ev = Arc::clone(&events);
    let db = Database::open(
        &path,
        schema.clone(),
        quiet().on_progress(move |p| ev.lock().unwrap().push(p)),
    )
    .unwrap();
    // Every index is complete at once: the upgrade built them in the open.
    let states = db.index_states().unwrap();
    assert_eq!(states.len(), 5);
    assert!(states.iter().all(|(_, s)| s == "ready"), "{states:?}");
    assert_contents(&db, &schema);
    let plan = db
        .query("fx.Item")
        .filter(Expr::eq(
            schema.reader("fx.Item").unwrap().path("n").unwrap(),
            3,
        ))
        .explain()
        .unwrap()
        .join("\n");
    assert!(plan.contains("fx.Item#1"), "{plan}");
    // Progress inside the schema phase, between its start and the next phase's.
    let n = OpenPhase::ALL.len() as f32;
    let lo = OpenPhase::ALL
        .iter()
        .position(|p| *p == OpenPhase::Schema)
        .unwrap() as f32
        / n;
    let inside: Vec<f32> = events
        .lock()
        .unwrap()
        .iter()
        .filter(|p| p.phase == OpenPhase::Schema && p.fraction > lo)
        .map(|p| p.fraction)
        .collect();
    assert!(!inside.is_empty(), "no upgrade progress");
    assert!(inside.iter().all(|f| *f <= lo + 1.0 / n), "{inside:?}");
    assert!(inside.windows(2).all(|w| w[0] <= w[1]), "{inside:?}");
    // The open report says what the schema phase did.
    let report = db.store().open_report();
    let note = &report
        .phases
        .iter()
        .find(|p| p.phase == OpenPhase::Schema)
        .unwrap()
        .note;
    assert!(
        note.contains(&format!("storage format 1 → {}", inspect::STORAGE_FORMAT)),
        "{note}"
    );
    db.close().wait().unwrap();

    assert_eq!(file_state(&path), (inspect::STORAGE_FORMAT, 0, 5));
    assert_plain_sqlite(&path, &schema);
    // A second open finds nothing to upgrade.
    let db = Database::open(&path, schema.clone(), quiet()).unwrap();
    assert!(!db
        .store()
        .open_report()
        .phases
        .iter()
        .any(|p| p.note.contains("storage format")));
    assert_contents(&db, &schema);
    db.close().wait().unwrap();
}

#[test]
fn a_crash_at_any_operation_of_the_upgrading_open_leaves_the_old_format_or_the_new() {
    let dir = tempfile::tempdir().unwrap();
    let schema = Schema::parse(FBS, "fx.fbs").unwrap();

    // How many mutating operations the upgrading open takes, without a crash.
    let probe = copy_fixture(dir.path(), "probe");
    let disk = Arc::new(SimDisk::new());
    let db = Database::open(&probe, schema.clone(), quiet().sim_disk(Arc::clone(&disk))).unwrap();
    let ops = disk.clock();
    db.close().wait().unwrap();
    assert!(ops > 5, "the upgrading open wrote only {ops} times");

    let (mut old_states, mut new_states) = (0, 0);
    for k in 1..=ops + 1 {
        let path = copy_fixture(dir.path(), &format!("run{k}"));
        let disk = Arc::new(SimDisk::new());
        disk.crash_at(k);
        let r = Database::open(&path, schema.clone(), quiet().sim_disk(Arc::clone(&disk)));
        disk.crash_now();
        // Close, not drop: a drop finishes the shutdown in the background, racing
        // the power loss and the reopen.
        if let Ok(db) = r {
            let _ = db.close().wait();
        }
        disk.power_loss(&mut SimRng::new(k));

        match file_state(&path) {
            (1, 5, 0) => old_states += 1,
            (inspect::STORAGE_FORMAT, 0, 5) => new_states += 1,
            other => panic!("crash at op {k}: a mix of formats: {other:?}"),
        }
        let db = Database::open(&path, schema.clone(), quiet())
            .unwrap_or_else(|e| panic!("crash at op {k}: reopen failed: {e}"));
        assert_contents(&db, &schema);
        db.close().wait().unwrap();
        assert_eq!(
            file_state(&path),
            (inspect::STORAGE_FORMAT, 0, 5),
            "crash at op {k}"
        );
        assert_plain_sqlite(&path, &schema);
    }
    println!("{ops} crash points: {old_states} left format 1, {new_states} format 2");
    assert!(old_states > 0, "no crash point left the old format");
    assert!(new_states > 0, "no crash point left the new format");
}
