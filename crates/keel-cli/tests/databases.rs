//! The `keel` binary on real database files made by keel itself: a healthy file, a
//! corrupt one (damaged pages, a damaged object, not a database at all), one with a
//! large WAL left by a process that never checkpointed, and one written under an
//! older schema.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use keel_query::{inspect, Database, StoreOptions};
use keel_schema::Schema;
use keel_storage::rusqlite;
use serde_json::{json, Value as Json};

/// Every command that takes a database file.
const FILE_COMMANDS: [&str; 6] = [
    "info",
    "dump",
    "check",
    "checkpoint",
    "vacuum",
    "explain-open",
];

fn evo(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/blog/schema/evolution")
        .join(name)
}

fn blog_schema() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/blog/schema/blog.fbs")
}

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Out {
    fn json(&self) -> Json {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!("not JSON ({e}):\n{}\nstderr:\n{}", self.stdout, self.stderr)
        })
    }
}

impl std::fmt::Debug for Out {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {}\n--- stdout\n{}\n--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

fn keel<S: AsRef<OsStr>>(args: &[S]) -> Out {
    let out = Command::new(env!("CARGO_BIN_EXE_keel"))
        .args(args)
        .output()
        .unwrap();
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Run `keel <cmd> <file> <rest…>`.
fn keel_file(cmd: &str, file: &Path, rest: &[&str]) -> Out {
    let mut args = vec![OsStr::new(cmd), file.as_os_str()];
    args.extend(rest.iter().map(OsStr::new));
    keel(&args)
}

/// Run `keel <cmd> <file> --schema <schema> <rest…>`.
fn keel_with_schema(cmd: &str, file: &Path, schema: &Path, rest: &[&str]) -> Out {
    let mut args = vec![
        OsStr::new(cmd),
        file.as_os_str(),
        OsStr::new("--schema"),
        schema.as_os_str(),
    ];
    args.extend(rest.iter().map(OsStr::new));
    keel(&args)
}

fn note(i: usize, body_len: usize) -> Json {
    json!({
        "id": format!("n{i:05}"),
        "body": "x".repeat(body_len),
        "stars": (i % 5) as i64,
        "mood": if i.is_multiple_of(2) { "Happy" } else { "Calm" },
        "legacy": i as i64,
    })
}

/// Opens `path` with the schema file and inserts `n` notes, `per_txn` per transaction.
fn write_notes(
    path: &Path,
    schema_file: &Path,
    opts: StoreOptions,
    n: usize,
    per_txn: usize,
    body_len: usize,
) -> Database {
    let schema = Schema::from_file(schema_file).unwrap();
    let reader_schema = schema.clone();
    let db = Database::open(path, schema, opts).unwrap();
    let reader = reader_schema.reader("evo.Note").unwrap();
    let mut i = 0;
    while i < n {
        let batch: Vec<Vec<u8>> = (i..(i + per_txn).min(n))
            .map(|k| reader.encode_json(&note(k, body_len)).unwrap())
            .collect();
        i += batch.len();
        db.write(move |txn| {
            for b in batch {
                txn.insert_bytes("evo.Note", b)?;
            }
            Ok(())
        })
        .wait()
        .unwrap();
    }
    db
}

/// A healthy file: 200 notes under the v2 schema (with its index), closed cleanly.
fn healthy(dir: &Path) -> PathBuf {
    let path = dir.join("healthy.db");
    let db = write_notes(
        &path,
        &evo("post_v2.fbs"),
        StoreOptions::default(),
        200,
        50,
        20,
    );
    db.wait_for_indexes().unwrap();
    db.close().wait().unwrap();
    path
}

fn file_bytes(p: &Path) -> Vec<u8> {
    std::fs::read(p).unwrap_or_default()
}

fn wal(p: &Path) -> PathBuf {
    let mut s = p.as_os_str().to_owned();
    s.push("-wal");
    PathBuf::from(s)
}

// ---------------------------------------------------------------------------------
// healthy file

#[test]
fn healthy_file_info() {
    let dir = tempfile::tempdir().unwrap();
    let db = healthy(dir.path());
    let before = file_bytes(&db);

    let out = keel_file("info", &db, &["--json"]);
    assert_eq!(out.code, 0, "{out:?}");
    let v = out.json();
    assert_eq!(v["journal_mode"], "wal");
    assert_eq!(v["auto_vacuum"], "incremental");
    assert_eq!(v["wal_bytes"], 0);
    assert!(v["page_size"].as_u64().unwrap() >= 512);
    assert!(v["page_count"].as_u64().unwrap() > 1);
    assert_eq!(v["freelist_pages"], 0);
    let coll = &v["collections"][0];
    assert_eq!(coll["name"], "evo.Note");
    assert_eq!(coll["rows"], 200);
    assert_eq!(coll["primary_key"], json!(["id"]));
    assert_eq!(coll["indexes"][0]["field"], "stars");
    assert_eq!(coll["indexes"][0]["state"], "ready");
    assert_eq!(v["dictionary_keys"], 0);
    assert_eq!(v["other_tables"], json!([]));
    assert_eq!(
        v["keel"]["schema_fingerprint"],
        format!(
            "{:016x}",
            Schema::from_file(evo("post_v2.fbs")).unwrap().fingerprint()
        )
    );

    let out = keel_file("info", &db, &[]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("journal     wal"), "{out:?}");
    assert!(out.stdout.contains("evo.Note"), "{out:?}");
    assert!(out.stdout.contains("200 rows"), "{out:?}");
    assert!(out.stdout.contains("index stars [ready]"), "{out:?}");
    // Read-only: the database file is byte for byte the same.
    assert_eq!(file_bytes(&db), before);
}

#[test]
fn healthy_file_dump_check() {
    let dir = tempfile::tempdir().unwrap();
    let db = healthy(dir.path());
    let before = file_bytes(&db);

    let out = keel_file("dump", &db, &[]);
    assert_eq!(out.code, 0, "{out:?}");
    let lines: Vec<Json> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 200);
    assert_eq!(lines[0]["collection"], "evo.Note");
    assert_eq!(lines[0]["rowid"], 1);
    assert_eq!(lines[0]["object"]["id"], "n00000");
    assert_eq!(lines[0]["object"]["mood"], "Happy");
    assert_eq!(lines[1]["object"]["stars"], 1);

    // --collection by bare name; an unknown collection is a wrong schema.
    let out = keel_file("dump", &db, &["--collection", "Note"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.stdout.lines().count(), 200);
    let out = keel_file("dump", &db, &["--collection", "evo.Nope"]);
    assert_eq!(out.code, 4, "{out:?}");
    assert!(
        out.stderr.contains("no collection named \"evo.Nope\""),
        "{out:?}"
    );

    let out = keel_file("check", &db, &[]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("integrity: ok"), "{out:?}");
    assert!(
        out.stdout.contains("evo.Note: 200 objects, 0 bad"),
        "{out:?}"
    );
    assert!(out.stdout.trim_end().ends_with("healthy"), "{out:?}");

    let out = keel_file("check", &db, &["--json"]);
    assert_eq!(out.code, 0, "{out:?}");
    let v = out.json();
    assert_eq!(v["ok"], true);
    assert_eq!(v["integrity"], json!(["ok"]));
    assert_eq!(v["collections"][0]["objects"], 200);
    assert_eq!(v["schema"]["source"], "stored");
    assert_eq!(file_bytes(&db), before);
}

#[test]
fn healthy_file_vacuum_checkpoint_explain() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("vac.db");
    // Big objects, then delete most of them: many free pages.
    let db = write_notes(
        &path,
        &evo("post_v2.fbs"),
        StoreOptions::default(),
        400,
        100,
        3000,
    );
    db.write(|txn| {
        for i in 0..350 {
            txn.delete_key("evo.Note", &[format!("n{i:05}").into()])?;
        }
        Ok(())
    })
    .wait()
    .unwrap();
    db.close().wait().unwrap();

    let v = keel_file("info", &path, &["--json"]).json();
    let free = v["freelist_pages"].as_u64().unwrap();
    assert!(free > 100, "{v}");

    // explain-open suggests the vacuum.
    let out = keel_file("explain-open", &path, &["--json"]);
    assert_eq!(out.code, 0, "{out:?}");
    let v = out.json();
    assert_eq!(v["phases"].as_array().unwrap().len(), 6);
    assert_eq!(v["phases"][1]["phase"], "sync_wal");
    let ids: Vec<&str> = v["suggestions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert!(ids.contains(&"free_pages"), "{v}");
    assert!(!ids.contains(&"large_wal"), "{v}");
    assert_eq!(v["closed"], true);

    let size_before = std::fs::metadata(&path).unwrap().len();
    let out = keel_file("vacuum", &path, &["--json"]);
    assert_eq!(out.code, 0, "{out:?}");
    let v = out.json();
    assert_eq!(v["pages_freed"].as_u64().unwrap(), free, "{v}");
    assert_eq!(v["freelist_pages_after"], 0);
    assert!(std::fs::metadata(&path).unwrap().len() < size_before);
    assert_eq!(v["wal_bytes_after"], 0);

    let out = keel_file("vacuum", &path, &[]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("0 free pages reclaimed"), "{out:?}");

    for mode in ["passive", "truncate"] {
        let out = keel_file("checkpoint", &path, &["--mode", mode, "--json"]);
        assert_eq!(out.code, 0, "{out:?}");
        let v = out.json();
        assert_eq!(v["mode"], mode);
        assert_eq!(v["busy"], false);
    }
    let out = keel_file("check", &path, &[]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        out.stdout.contains("evo.Note: 50 objects, 0 bad"),
        "{out:?}"
    );
}

// ---------------------------------------------------------------------------------
// missing, foreign and corrupt files

#[test]
fn missing_file_exits_two_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.db");
    for cmd in FILE_COMMANDS {
        let out = keel_file(cmd, &missing, &[]);
        assert_eq!(out.code, 2, "{cmd}: {out:?}");
        assert!(
            out.stderr.contains("missing.db: no such file"),
            "{cmd}: {out:?}"
        );
        assert!(!missing.exists(), "{cmd} created the file");
    }
    for cmd in FILE_COMMANDS {
        let out = keel_file(cmd, &missing, &["--json"]);
        assert_eq!(out.code, 2, "{cmd}: {out:?}");
        let v = out.json();
        assert_eq!(v["kind"], "io", "{cmd}");
        assert_eq!(v["exit_code"], 2, "{cmd}");
    }
    // A missing schema file is an I/O error too.
    let db = healthy(dir.path());
    let out = keel_with_schema("dump", &db, &dir.path().join("nope.fbs"), &[]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(
        out.stderr.contains("nope.fbs: no such schema file"),
        "{out:?}"
    );
}

#[test]
fn not_a_database_exits_three() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.db");
    std::fs::write(&junk, vec![0x5a_u8; 8192]).unwrap();
    for cmd in FILE_COMMANDS {
        let out = keel_file(cmd, &junk, &[]);
        assert_eq!(out.code, 3, "{cmd}: {out:?}");
        assert!(out.stderr.contains("not a database"), "{cmd}: {out:?}");
    }
    let out = keel_file("check", &junk, &["--json"]);
    assert_eq!(out.code, 3);
    assert_eq!(out.json()["kind"], "corrupt");
    // Untouched.
    assert_eq!(file_bytes(&junk), vec![0x5a_u8; 8192]);
}

#[test]
fn corrupt_pages_exit_three() {
    let dir = tempfile::tempdir().unwrap();
    let db = healthy(dir.path());
    // Overwrite every page after the first two (schema pages survive, b-trees do not).
    let mut bytes = file_bytes(&db);
    let page = u32::from(u16::from_be_bytes([bytes[16], bytes[17]])) as usize;
    let mut x: u32 = 0x1234_5678;
    for b in bytes[2 * page..].iter_mut() {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        *b = x as u8;
    }
    std::fs::write(&db, &bytes).unwrap();

    let out = keel_file("check", &db, &[]);
    assert_eq!(out.code, 3, "{out:?}");
    assert!(out.stdout.contains("the file is corrupt"), "{out:?}");
    let out = keel_file("check", &db, &["--json"]);
    assert_eq!(out.code, 3, "{out:?}");
    let v = out.json();
    assert_eq!(v["ok"], false);
    assert_ne!(v["integrity"], json!(["ok"]));
    // Commands that read the damaged pages say so with the same exit status.
    let out = keel_file("dump", &db, &[]);
    assert_eq!(out.code, 3, "{out:?}");
    assert!(
        out.stderr.contains("corrupt") || out.stderr.contains("malformed"),
        "{out:?}"
    );
}

#[test]
fn corrupt_object_is_named_with_collection_and_rowid() {
    let dir = tempfile::tempdir().unwrap();
    let db = healthy(dir.path());
    {
        // Damage one object's bytes behind keel's back, with plain SQLite (the
        // index on `stars` is a plain column index: no keel function needed).
        let conn = rusqlite::Connection::open(&db).unwrap();
        conn.execute(
            &format!(
                "UPDATE {} SET body = x'0c000000deadbeef01020304' WHERE rowid = 7",
                inspect::table_ident("evo.Note")
            ),
            [],
        )
        .unwrap();
    }
    let out = keel_file("check", &db, &[]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stdout.contains("integrity: ok"), "{out:?}");
    assert!(out.stdout.contains("bad: evo.Note rowid 7: "), "{out:?}");
    assert!(
        out.stdout.contains("evo.Note: 200 objects, 1 bad"),
        "{out:?}"
    );
    let v = keel_file("check", &db, &["--json"]).json();
    assert_eq!(v["bad_objects"][0]["collection"], "evo.Note");
    assert_eq!(v["bad_objects"][0]["rowid"], 7);
    assert_eq!(v["exit_code"], 1);
    // Its columns are not blamed: the object itself is the problem.
    assert_eq!(v["column_mismatches"], json!([]));

    let out = keel_file("dump", &db, &[]);
    assert_eq!(out.code, 1, "{out:?}");
    assert_eq!(out.stdout.lines().count(), 199);
    assert!(
        out.stderr
            .contains("error: evo.Note rowid 7: not a valid object"),
        "{out:?}"
    );
}

// ---------------------------------------------------------------------------------
// large WAL

/// A file whose last writer was killed with ~3 MiB in the WAL: written with
/// checkpoints held off, then copied (db + WAL, no -shm) while the writer still ran.
fn large_wal(dir: &Path) -> PathBuf {
    let src_dir = dir.join("device");
    std::fs::create_dir_all(&src_dir).unwrap();
    let src = src_dir.join("app.db");
    let opts = StoreOptions::default()
        .checkpoint_threshold(1 << 40)
        .idle_checkpoint_after(Duration::from_secs(3600));
    let db = write_notes(&src, &evo("post_v2.fbs"), opts, 600, 10, 4000);
    let dst = dir.join("pulled.db");
    std::fs::copy(&src, &dst).unwrap();
    std::fs::copy(wal(&src), wal(&dst)).unwrap();
    db.close().wait().unwrap();
    assert!(std::fs::metadata(wal(&dst)).unwrap().len() > 2 << 20);
    dst
}

#[test]
fn large_wal_explain_open_suggests_on_background() {
    let dir = tempfile::tempdir().unwrap();
    let db = large_wal(dir.path());
    let wal_len = std::fs::metadata(wal(&db)).unwrap().len();

    // Read-only commands see every object (they live in the WAL) and leave it alone.
    let v = keel_file("info", &db, &["--json"]).json();
    assert_eq!(v["wal_bytes"], wal_len);
    assert!(v["wal_frames"].as_u64().unwrap() > 500, "{v}");
    assert_eq!(v["collections"][0]["rows"], 600);
    let out = keel_file("dump", &db, &[]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.stdout.lines().count(), 600);
    assert_eq!(keel_file("check", &db, &[]).code, 0);
    assert_eq!(std::fs::metadata(wal(&db)).unwrap().len(), wal_len);

    // --keep-wal: repeatable, the WAL stays.
    for _ in 0..2 {
        let out = keel_file("explain-open", &db, &["--keep-wal", "--json"]);
        assert_eq!(out.code, 0, "{out:?}");
        let v = out.json();
        assert_eq!(v["wal_bytes_at_open"], wal_len);
        assert!(v["frames_recovered"].as_u64().unwrap() > 500, "{v}");
        assert_eq!(v["suggestions"][0]["id"], "large_wal", "{v}");
        assert_eq!(v["closed"], false);
        assert_eq!(v["wal_bytes_after"], wal_len);
        assert_eq!(v["io"]["open_barrier_syncs"], 1);
        // Both milestones: readable (the barrier ran beside recovery), then durable.
        let (r, d) = (
            v["readable_ms"].as_f64().unwrap(),
            v["durable_ms"].as_f64().unwrap(),
        );
        assert!(r > 0.0 && r <= d, "{v}");
    }

    // The human report: the tree, and the advice.
    let out = keel_file("explain-open", &db, &[]);
    assert_eq!(out.code, 0, "{out:?}");
    for phase in [
        "prepare",
        "sync_wal",
        "recover",
        "checkpoint",
        "schema",
        "ready",
    ] {
        assert!(out.stdout.contains(phase), "{phase}: {out:?}");
    }
    assert!(out.stdout.contains("frames recovered"), "{out:?}");
    assert!(out.stdout.contains("milestones: readable after"), "{out:?}");
    assert!(out.stdout.contains("durable after"), "{out:?}");
    assert!(out.stdout.contains("MiB at open"), "{out:?}");
    assert!(
        out.stdout
            .contains("Call on_background() before suspension"),
        "{out:?}"
    );
    assert!(out.stdout.contains("WAL now 0 B"), "{out:?}");

    // Closed like an app: the WAL is gone, the objects are in the file.
    let v = keel_file("info", &db, &["--json"]).json();
    assert_eq!(v["wal_bytes"], 0);
    assert_eq!(v["collections"][0]["rows"], 600);
}

#[test]
fn large_wal_checkpoint_modes() {
    let dir = tempfile::tempdir().unwrap();
    let db = large_wal(dir.path());
    let wal_len = std::fs::metadata(wal(&db)).unwrap().len();
    let out = keel_file("checkpoint", &db, &["--mode", "passive", "--json"]);
    assert_eq!(out.code, 0, "{out:?}");
    let v = out.json();
    assert_eq!(v["wal_bytes_before"], wal_len);
    assert!(v["wal_frames"].as_i64().unwrap() > 500);
    assert_eq!(v["checkpointed_frames"], v["wal_frames"]);
    assert_eq!(v["wal_bytes_after"], wal_len, "PASSIVE keeps the WAL file");

    // Another process reading: TRUNCATE cannot finish within its bounded wait.
    {
        let reader = rusqlite::Connection::open(&db).unwrap();
        reader.execute_batch("BEGIN").unwrap();
        let _: i64 = reader
            .query_row("SELECT count(*) FROM sqlite_schema", [], |r| r.get(0))
            .unwrap();
        let out = keel_file("checkpoint", &db, &["--mode", "truncate", "--json"]);
        assert_eq!(out.code, 5, "{out:?}");
        assert_eq!(out.json()["busy"], true);
        reader.execute_batch("COMMIT").unwrap();
    }
    let out = keel_file("checkpoint", &db, &["--mode", "truncate"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.starts_with("TRUNCATE checkpoint of "), "{out:?}");
    assert!(out.stdout.contains("after"), "{out:?}");
    assert_eq!(std::fs::metadata(wal(&db)).map(|m| m.len()).unwrap_or(0), 0);
    assert_eq!(keel_file("check", &db, &[]).code, 0);
}

// ---------------------------------------------------------------------------------
// a file written under an older schema

fn written_under_v1(dir: &Path) -> PathBuf {
    let path = dir.join("v1.db");
    let db = write_notes(
        &path,
        &evo("post_v1.fbs"),
        StoreOptions::default(),
        20,
        20,
        5,
    );
    db.close().wait().unwrap();
    path
}

#[test]
fn older_schema_dumps_with_v1_and_v2() {
    let dir = tempfile::tempdir().unwrap();
    let db = written_under_v1(dir.path());

    // The stored schema (v1): `legacy` is there.
    let out = keel_file("dump", &db, &[]);
    assert_eq!(out.code, 0, "{out:?}");
    let first: Json = serde_json::from_str(out.stdout.lines().next().unwrap()).unwrap();
    assert_eq!(first["object"]["legacy"], 0);
    assert!(first["object"].get("views").is_none());

    // v2, a newer version: new fields read as their defaults, deprecated ones vanish.
    let out = keel_with_schema("dump", &db, &evo("post_v2.fbs"), &[]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        out.stderr.contains("newer version of the stored schema"),
        "{out:?}"
    );
    let lines: Vec<Json> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 20);
    assert_eq!(lines[3]["object"]["views"], 10);
    assert_eq!(lines[3]["object"]["stars"], 3);
    assert!(lines[3]["object"].get("legacy").is_none());

    let out = keel_with_schema("check", &db, &evo("post_v2.fbs"), &["--json"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.json()["schema"]["relation_to_stored"], "newer");

    // The app upgrades: open with v2 (the schema phase adds the index).
    let out = keel_with_schema("explain-open", &db, &evo("post_v2.fbs"), &[]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("schema hook ran"), "{out:?}");
    let v = keel_file("info", &db, &["--json"]).json();
    assert_eq!(v["collections"][0]["indexes"][0]["field"], "stars");

    // Now v1 is the older one: still readable (old readers ignore new fields).
    let out = keel_with_schema("dump", &db, &evo("post_v1.fbs"), &[]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        out.stderr.contains("older version of the stored schema"),
        "{out:?}"
    );
    assert_eq!(out.stdout.lines().count(), 20);
}

#[test]
fn wrong_schema_exits_four() {
    let dir = tempfile::tempdir().unwrap();
    let db = written_under_v1(dir.path());

    // A schema of something else entirely.
    let out = keel_with_schema("dump", &db, &blog_schema(), &[]);
    assert_eq!(out.code, 4, "{out:?}");
    assert!(out.stderr.contains("wrong schema"), "{out:?}");

    // The same table with a field's type changed: neither version fits the other.
    let changed = dir.path().join("v3.fbs");
    std::fs::write(
        &changed,
        std::fs::read_to_string(evo("post_v1.fbs"))
            .unwrap()
            .replace("stars: int = 3;", "stars: string;"),
    )
    .unwrap();
    for cmd in ["dump", "check"] {
        let out = keel_with_schema(cmd, &db, &changed, &[]);
        assert_eq!(out.code, 4, "{cmd}: {out:?}");
        assert!(out.stderr.contains("evo.Note.stars"), "{cmd}: {out:?}");
    }
    let out = keel_with_schema("explain-open", &db, &changed, &[]);
    assert_eq!(out.code, 4, "{out:?}");
    assert!(out.stderr.contains("incompatible"), "{out:?}");

    // A schema file that does not parse.
    let bad = dir.path().join("bad.fbs");
    std::fs::write(&bad, "table T {\n  a: int\n}\n").unwrap();
    let out = keel_with_schema("check", &db, &bad, &["--json"]);
    assert_eq!(out.code, 4, "{out:?}");
    assert_eq!(out.json()["kind"], "wrong_schema");

    // The file is untouched by all of it.
    assert_eq!(keel_file("check", &db, &[]).code, 0);
}

#[test]
fn help_documents_commands_writes_and_exit_codes() {
    let out = keel(&["--help"]);
    assert_eq!(out.code, 0);
    for word in [
        "info",
        "dump",
        "check",
        "checkpoint",
        "vacuum",
        "explain-open",
        "schema",
        "Exit status:",
        "4  wrong schema",
        "open the file read-only",
    ] {
        assert!(out.stdout.contains(word), "{word}: {out:?}");
    }
    let out = keel(&["explain-open", "--help"]);
    assert!(out.stdout.contains("--keep-wal"), "{out:?}");
    assert!(out.stdout.contains("TRUNCATE checkpoint"), "{out:?}");
    let out = keel(&["info", "--help"]);
    assert!(out.stdout.contains("Read-only"), "{out:?}");
    // Usage errors exit 2.
    assert_eq!(keel(&["info"]).code, 2);
    assert_eq!(keel(&["frobnicate"]).code, 2);
}
