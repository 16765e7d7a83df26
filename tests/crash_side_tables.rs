//! Crash campaigns for the side tables keel writes beside a collection's rows:
//! the full-text index of `(searchable)` fields and the packed vector
//! table of `(vector: N)` fields. Writes insert, update, change and
//! delete objects on keel-storage's simulated disk, cut by power losses at random
//! points. After every crash the database reopens, passes `PRAGMA
//! integrity_check` (FTS5's own check included), equals a prefix of the committed
//! history holding every acknowledged write, and its side table equals its rows
//! (`inspect::search_drift`, `inspect::vector_drift`) and answers like a fresh
//! evaluation of the rows (search: the in-memory evaluator; nearest: a naive scan).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use keel::prelude::*;
use keel::storage::sim::{SimDisk, SimRng};
use keel::{eval::Filter, inspect, StoredObject};

const COLL: &str = "c.Note";

const WORDS: &[&str] = &[
    "rust",
    "Crème",
    "東京都",
    "京都",
    "🦀",
    "straße",
    "한국어",
    "go",
];

type State = BTreeMap<String, String>;

#[derive(Debug, Clone)]
enum Op {
    Upsert(String, String),
    Change(String, String),
    Delete(String),
}

/// Checks a side table's answers against a fresh evaluation of every row.
type Answers = fn(&Database, &Arc<Schema>, &[StoredObject]) -> Result<(), String>;

/// Reads a side table's disagreements with the rows (empty when none).
type Drift = fn(
    &keel::storage::rusqlite::Connection,
    &Arc<Schema>,
) -> keel::storage::rusqlite::Result<String>;

/// One side table under test: its collection's schema, how an object is made of
/// a text, which fields a change request rewrites, and the checks of the table
/// against the rows.
struct Side {
    name: &'static str,
    schema: &'static str,
    encode: fn(&Schema, &str, &str) -> Vec<u8>,
    changed: &'static [&'static str],
    /// The table's disagreements with the rows (empty when none), read in one
    /// read transaction with the integrity check.
    drift: Drift,
    /// The table's answers against a fresh evaluation of `all` (every row).
    answers: Answers,
}

const SEARCH: Side = Side {
    name: "search",
    schema: "attribute \"searchable\"; namespace c;
         table Note { id: string (primary); title: string (searchable: 2.0); body: string (searchable); n: int; }
         root_type Note;",
    encode: |s, id, text| {
        s.reader(COLL)
            .unwrap()
            .encode_json(&serde_json::json!({"id": id, "title": text.to_uppercase(), "body": text}))
            .unwrap()
    },
    changed: &["body", "title"],
    drift: |c, s| Ok(debug_unless_empty(&inspect::search_drift(c, s, 10)?)),
    answers: search_answers,
};

const VECTOR: Side = Side {
    name: "vector",
    schema: "namespace c;
         table Note { id: string (primary); body: string; e: [float] (vector: 3, metric: \"l2\"); }
         root_type Note;",
    encode: |s, id, text| {
        s.reader(COLL)
            .unwrap()
            .encode_json(&serde_json::json!({"id": id, "body": text, "e": vector_of(text)}))
            .unwrap()
    },
    changed: &["body", "e"],
    drift: |c, s| Ok(debug_unless_empty(&inspect::vector_drift(c, s, 10)?)),
    answers: nearest_answers,
};

fn debug_unless_empty<T: std::fmt::Debug>(v: &[T]) -> String {
    if v.is_empty() {
        String::new()
    } else {
        format!("{v:?}")
    }
}

/// The vector an object with `text` holds (ties are common: same lengths).
fn vector_of(text: &str) -> [f32; 3] {
    [
        text.len() as f32,
        text.split(' ').count() as f32,
        text.bytes().next().unwrap_or(0) as f32 / 16.0,
    ]
}

fn opts(disk: &Arc<SimDisk>) -> StoreOptions {
    let mut o = StoreOptions::default()
        .readers(1)
        .idle_checkpoint_after(Duration::from_secs(3600))
        .checkpoint_threshold(64 << 10)
        .sim_disk(Arc::clone(disk));
    o.vacuum_min_free_pages = 0;
    o
}

/// The body text of a stored object (empty when absent).
fn body_of(s: &Schema, bytes: &[u8]) -> String {
    let r = s.reader(COLL).unwrap();
    match r.read(bytes).map(|x| x.get(&r.path("body").unwrap())) {
        Ok(Value::Text(t)) => t,
        _ => String::new(),
    }
}

fn read_state(side: &Side, db: &Database, s: &Arc<Schema>) -> Result<State, String> {
    let (integrity, drift) = db
        .store()
        .read(|c| {
            let i: String = c.query_row("PRAGMA integrity_check", [], |r| r.get(0))?;
            let d = (side.drift)(c, s)?;
            Ok::<_, keel::storage::Error>((i, d))
        })
        .map_err(|e| e.to_string())?;
    if integrity != "ok" {
        return Err(format!("integrity_check: {integrity}"));
    }
    if !drift.is_empty() {
        return Err(format!("{} table drifted: {drift}", side.name));
    }
    let r = s.reader(COLL).unwrap();
    let id = r.path("id").unwrap();
    let all = db.query(COLL).all().map_err(|e| e.to_string())?;
    let mut st = State::new();
    for o in &all {
        let obj = r.read(&o.bytes).map_err(|e| e.to_string())?;
        if let Value::Text(k) = obj.get(&id) {
            st.insert(k, body_of(s, &o.bytes));
        }
    }
    (side.answers)(db, s, &all)?;
    Ok(st)
}

/// The index answers every word like the in-memory evaluator on the rows.
fn search_answers(db: &Database, s: &Arc<Schema>, all: &[StoredObject]) -> Result<(), String> {
    for w in WORDS {
        let sql: BTreeSet<i64> = db
            .query(COLL)
            .filter(Expr::search(*w))
            .all()
            .map_err(|e| e.to_string())?
            .iter()
            .map(|o| o.rowid)
            .collect();
        let f = Filter::new(s, COLL, &Expr::search(*w)).map_err(|e| e.to_string())?;
        let mem: BTreeSet<i64> = all
            .iter()
            .filter(|o| f.matches(&o.bytes))
            .map(|o| o.rowid)
            .collect();
        if sql != mem {
            return Err(format!("search {w:?}: index {sql:?}, rows {mem:?}"));
        }
    }
    Ok(())
}

/// Nearest queries answer like a naive scan of the rows.
fn nearest_answers(db: &Database, s: &Arc<Schema>, all: &[StoredObject]) -> Result<(), String> {
    let e = s.reader(COLL).unwrap().path("e").unwrap();
    for q in [[0.0f32, 0.0, 0.0], [12.0, 2.0, 6.0], [30.0, 3.0, 7.0]] {
        let got: Vec<(i64, f32)> = db
            .query(COLL)
            .nearest(e.clone(), &q, 4)
            .all()
            .map_err(|e| e.to_string())?
            .iter()
            .map(|n| (n.rowid, n.distance))
            .collect();
        let mut want: Vec<(i64, f32)> = all
            .iter()
            .map(|o| {
                let v = vector_of(&body_of(s, &o.bytes));
                (o.rowid, keel::schema::Metric::L2.distance(&q, 0.0, &v))
            })
            .collect();
        want.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
        want.truncate(4);
        if got != want {
            return Err(format!("nearest {q:?}: table {got:?}, rows {want:?}"));
        }
    }
    Ok(())
}

fn text(rng: &mut SimRng) -> String {
    (0..rng.range(1, 4))
        .map(|_| WORDS[rng.below(WORDS.len() as u64) as usize])
        .collect::<Vec<_>>()
        .join(" ")
}

fn apply(st: &mut State, ops: &[Op]) {
    for op in ops {
        match op {
            Op::Upsert(k, t) => {
                st.insert(k.clone(), t.clone());
            }
            Op::Change(k, t) => {
                if let Some(v) = st.get_mut(k) {
                    *v = t.clone();
                }
            }
            Op::Delete(k) => {
                st.remove(k);
            }
        }
    }
}

/// One seed: `sessions` crash points. Returns (crash points, acknowledged, failures).
fn campaign(
    side: &Side,
    seed: u64,
    sessions: u64,
    dir: &std::path::Path,
) -> (u64, u64, Vec<String>) {
    let s = Arc::new(Schema::parse(side.schema, "c.fbs").unwrap());
    let mut rng = SimRng::new(seed);
    let path = dir.join(format!("{}-{seed}.db", side.name));
    let disk = Arc::new(SimDisk::new());
    let mut failures = Vec::new();
    Database::open(&path, (*s).clone(), StoreOptions::default())
        .unwrap()
        .close()
        .wait()
        .unwrap();
    let mut base = State::new();
    let (mut acked_total, mut points) = (0, 0);
    for session in 0..sessions {
        disk.crash_at(rng.range(1, 60));
        let db = match Database::open(&path, (*s).clone(), opts(&disk)) {
            Ok(db) => db,
            Err(e) => {
                assert!(
                    disk.crashed(),
                    "seed {seed} session {session}: open failed: {e}"
                );
                disk.power_loss(&mut rng.fork());
                points += 1;
                continue;
            }
        };
        let mut history: Vec<(Vec<Op>, bool)> = Vec::new();
        for _ in 0..rng.range(2, 10) {
            let ops: Vec<Op> = (0..rng.range(1, 5))
                .map(|_| {
                    let k = format!("n{}", rng.below(12));
                    match rng.below(4) {
                        0 => Op::Delete(k),
                        1 => Op::Change(k, text(&mut rng)),
                        _ => Op::Upsert(k, text(&mut rng)),
                    }
                })
                .collect();
            let (o2, s2) = (ops.clone(), Arc::clone(&s));
            let (encode, changed) = (side.encode, side.changed);
            let r = db
                .write(move |t| {
                    for op in &o2 {
                        match op {
                            Op::Upsert(k, x) => {
                                t.upsert_bytes(COLL, encode(&s2, k, x))?;
                            }
                            Op::Change(k, x) => {
                                match t.change_bytes(
                                    COLL,
                                    &[k.as_str().into()],
                                    &encode(&s2, k, x),
                                    changed,
                                ) {
                                    Ok(_) | Err(keel::Error::NotFound { .. }) => {}
                                    Err(e) => return Err(e),
                                }
                            }
                            Op::Delete(k) => {
                                t.delete_key(COLL, &[k.as_str().into()])?;
                            }
                        }
                    }
                    Ok(())
                })
                .wait();
            let ok = r.is_ok();
            history.push((ops, ok));
            if let Err(e) = r {
                assert!(
                    disk.crashed(),
                    "seed {seed} session {session}: failed before the crash point: {e}"
                );
                break;
            }
            acked_total += 1;
            if rng.chance(1, 5) {
                let _ = db
                    .store()
                    .checkpoint(keel::storage::CheckpointMode::Passive);
            }
        }
        disk.crash_now();
        let _ = db.close().wait();
        disk.power_loss(&mut rng.fork());
        points += 1;
        let db = Database::open(&path, (*s).clone(), opts(&disk)).unwrap();
        let got = match read_state(side, &db, &s) {
            Ok(st) => st,
            Err(e) => {
                failures.push(format!("seed {seed} session {session}: CORRUPT: {e}"));
                break;
            }
        };
        let acked = history.iter().take_while(|(_, ok)| *ok).count();
        let mut st = base.clone();
        let mut matched = false;
        for k in 0..=history.len() {
            if k >= acked && st == got {
                matched = true;
                break;
            }
            if k < history.len() {
                apply(&mut st, &history[k].0);
            }
        }
        if !matched {
            failures.push(format!(
                "seed {seed} session {session}: recovered state is no prefix ≥ {acked} of {} steps (lost or corrupt)",
                history.len()
            ));
        }
        base = got;
        db.close().wait().unwrap();
        disk.app_crash();
    }
    (points, acked_total, failures)
}

/// Six seeds of 25 crash points each; nothing lost, nothing corrupt.
fn run(side: &Side) {
    let dir = tempfile::tempdir().unwrap();
    let (mut points, mut acked) = (0, 0);
    let mut failures = Vec::new();
    for seed in 0..6 {
        let (p, a, f) = campaign(side, seed, 25, dir.path());
        points += p;
        acked += a;
        failures.extend(f);
    }
    println!(
        "{}: crash points: {points}, acknowledged: {acked}, lost: {}, corrupt: {}",
        side.name,
        failures.iter().filter(|f| !f.contains("CORRUPT")).count(),
        failures.iter().filter(|f| f.contains("CORRUPT")).count()
    );
    for f in &failures {
        println!("  {f}");
    }
    assert!(failures.is_empty());
    assert!(points >= 150 && acked > 100, "{points} {acked}");
}

#[test]
fn searchable_collection_survives_crashes_with_its_index_in_step() {
    run(&SEARCH);
}

#[test]
fn vector_collection_survives_crashes_with_its_packed_table_in_step() {
    run(&VECTOR);
}
