//! Full-text search benchmark: keel's `(searchable)` index against raw
//! FTS5 over the same rows, in the same process.
//!
//! `cargo bench -p keel-benches --bench search -- [--quick]` writes
//! `target/keel-bench/search.json` (`cargo xtask bench search` also renders it
//! into BENCHMARKS.md).
//!
//! # Corpus
//! Debian's package descriptions: apt's `Translation-en` files (fetched with
//! `apt-get update -o Acquire::Languages=en,zh_CN,ja,ko` when the image turned
//! them off; read with `apt-helper cat-file`), one document per package — its
//! name (the key), its one-line summary and its long description — plus, as
//! further documents, the Chinese, Japanese and Korean translations Debian has.
//! Text no one here wrote, ≥ 50,000 documents. `--quick` (CI) and machines
//! without apt use the checked-in sample `benches/support/search_sample.txt` (the
//! same format, a few hundred packages in the four languages); the report says
//! which corpus ran (`docs`, `text_mb`).
//!
//! # What is measured
//! * **build**: inserting every document, 1,000 per transaction — keel into a
//!   collection whose `summary` and `description` are `(searchable)` (keel
//!   tokenizes in Rust and writes its FTS5 row in the same transaction), raw
//!   rusqlite into a table plus an FTS5 table (`unicode61 remove_diacritics 2`,
//!   SQLite's best built-in tokenizer) in the same transaction.
//!   `build_ratio` = keel ÷ raw. Goal ≤ 1.3.
//! * **write overhead**: the same keel inserts into the same collection without
//!   `(searchable)`: `write_overhead_ratio` = searchable ÷ plain. Goal ≤ 1.5.
//! * **query**: a fixed set of queries (words, a phrase, a prefix, OR, NOT,
//!   NEAR, and one Chinese, Japanese and Korean word), each fetching the 20 best matches by relevance (bm25 with the
//!   fields' weights) as objects — keel through `filter(search(q))
//!   .order_by(relevance()).limit(20)`, raw through the best hand-written
//!   query: rank and cut to 20 inside the FTS5 subquery, then join those 20
//!   rows (joining every match before sorting took 1.5–5× longer; keel does
//!   the same cut when relevance alone orders a limited search). CJK queries
//!   match more documents in keel than in raw FTS5 (unicode61 keeps a CJK run
//!   as one token), so each side ranks what it matched; the run prints each
//!   query's time and matches. `query_ratio` = keel ÷ raw over the whole set.
//!   Goal ≤ 1.3.
//! * **size**: the file size with the index minus without it, divided by the
//!   bytes of searchable text (`index_size_factor`), for keel and for raw FTS5.
//!
//! Every figure is the median of the repetitions (3; `--quick`: 1). Both sides
//! use WAL and `synchronous=NORMAL` (keel: `SyncPolicy::Normal`).

use std::path::Path;
use std::time::Instant;

use keel::schema::{relevance, Expr, Schema};
use keel::storage::rusqlite;
use keel::storage::{SyncPolicies, SyncPolicy};
use keel::{Database, StoreOptions};

mod support;

const COLL: &str = "deb.Pkg";
const BATCH: usize = 1000;
const QUERIES: &[&str] = &[
    "library",
    "python",
    "documentation",
    "gtk widget",
    "\"command line\"",
    "comp*",
    "server OR daemon",
    "perl NOT module",
    "NEAR(shared library, 3)",
    "kernel module",
    "库",
    "ライブラリ",
    "라이브러리",
];

struct Doc {
    name: String,
    summary: String,
    description: String,
}

/// Documents of an apt `Translation-<lang>` file (`Package:`, `Description-<lang>:`
/// summary, then the long description's lines), keyed `<package>` for English and
/// `<package>@<lang>` for the others.
fn parse_translations(
    text: &str,
    out: &mut Vec<Doc>,
    seen: &mut std::collections::HashSet<String>,
) {
    for para in text.split("\n\n") {
        let mut name = None;
        let mut lang = "";
        let mut summary = String::new();
        let mut long = String::new();
        let mut in_desc = false;
        for line in para.lines() {
            if let Some(v) = line.strip_prefix("Package: ") {
                name = Some(v.trim().to_owned());
                in_desc = false;
            } else if let Some(rest) = line.strip_prefix("Description-") {
                if let Some((l, v)) = rest.split_once(": ") {
                    if l != "md5" {
                        lang = if l == "en" { "" } else { l };
                        summary = v.trim().to_owned();
                        in_desc = true;
                    }
                }
            } else if in_desc && line.starts_with(' ') {
                let l = line.trim();
                if l != "." {
                    long.push_str(l);
                    long.push('\n');
                }
            } else {
                in_desc = false;
            }
        }
        if let Some(n) = name {
            let key = if lang.is_empty() {
                n
            } else {
                format!("{n}@{lang}")
            };
            if !summary.is_empty() && seen.insert(key.clone()) {
                out.push(Doc {
                    name: key,
                    summary,
                    description: long,
                });
            }
        }
    }
}

/// Every `Translation-*` file apt keeps, decompressed by apt's own helper.
fn apt_translations(out: &mut Vec<Doc>) {
    let mut seen = std::collections::HashSet::new();
    let Ok(dir) = std::fs::read_dir("/var/lib/apt/lists") else {
        return;
    };
    let mut files: Vec<std::path::PathBuf> = dir
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().contains("_i18n_Translation-"))
        .collect();
    files.sort();
    for f in files {
        let Ok(o) = std::process::Command::new("/usr/lib/apt/apt-helper")
            .arg("cat-file")
            .arg(&f)
            .output()
        else {
            continue;
        };
        if o.status.success() {
            parse_translations(&String::from_utf8_lossy(&o.stdout), out, &mut seen);
        }
    }
}

/// The corpus and where it came from.
fn corpus(quick: bool) -> (Vec<Doc>, &'static str) {
    let sample = || {
        let mut v = Vec::new();
        parse_translations(
            include_str!("support/search_sample.txt"),
            &mut v,
            &mut Default::default(),
        );
        v
    };
    if quick {
        return (sample(), "checked-in sample (quick mode)");
    }
    let mut docs = Vec::new();
    apt_translations(&mut docs);
    if docs.len() < 50_000 {
        // Package descriptions live in apt's Translation files; images often
        // turn them off (`Acquire::Languages "none"`). Fetch English and the
        // CJK translations where Debian has them.
        eprintln!(
            "search bench: {} descriptions listed; running apt-get update",
            docs.len()
        );
        let _ = std::process::Command::new("apt-get")
            .args(["update", "-qq", "-o", "Acquire::Languages=en,zh_CN,ja,ko"])
            .status();
        docs.clear();
        apt_translations(&mut docs);
    }
    if docs.len() < 1_000 {
        eprintln!(
            "search bench: apt has no package descriptions here; using the checked-in sample"
        );
        return (sample(), "checked-in sample (apt unavailable)");
    }
    (docs, "apt Translation-en/zh_CN/ja/ko (apt-get update)")
}

fn schema(searchable: bool) -> Schema {
    let (s, d) = if searchable {
        ("(searchable: 2.0)", "(searchable)")
    } else {
        ("", "")
    };
    Schema::parse(
        &format!(
            "attribute \"searchable\"; namespace deb;
             table Pkg {{ name: string (primary); summary: string {s}; description: string {d}; }}
             root_type Pkg;"
        ),
        "deb.fbs",
    )
    .unwrap()
}

fn opts() -> StoreOptions {
    StoreOptions::default().sync(SyncPolicies::all(SyncPolicy::Normal))
}

fn file_bytes(path: &Path) -> u64 {
    ["", "-wal"]
        .iter()
        .map(|s| {
            std::fs::metadata(format!("{}{s}", path.display()))
                .map(|m| m.len())
                .unwrap_or(0)
        })
        .sum()
}

/// keel: insert every document; returns (ms, file bytes after close).
fn keel_build(dir: &Path, tag: &str, s: &Schema, objs: &[Vec<u8>]) -> (f64, u64, Database) {
    let path = dir.join(format!("keel-{tag}.db"));
    let db = Database::open(&path, s.clone(), opts()).unwrap();
    let t0 = Instant::now();
    for chunk in objs.chunks(BATCH) {
        let chunk: Vec<Vec<u8>> = chunk.to_vec();
        db.write_blocking(move |t| {
            for o in chunk {
                t.insert_bytes(COLL, o)?;
            }
            Ok(())
        })
        .unwrap();
    }
    let ms = t0.elapsed().as_secs_f64() * 1e3;
    (ms, 0, db)
}

fn raw_open(path: &Path) -> rusqlite::Connection {
    let c = rusqlite::Connection::open(path).unwrap();
    c.execute_batch("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;")
        .unwrap();
    c
}

/// Raw FTS5: a table plus an FTS5 table written in the same transaction.
fn raw_build(
    dir: &Path,
    tag: &str,
    docs: &[Doc],
    with_fts: bool,
) -> (f64, rusqlite::Connection, std::path::PathBuf) {
    let path = dir.join(format!("raw-{tag}.db"));
    let c = raw_open(&path);
    c.execute_batch(
        "CREATE TABLE pkg(rowid INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, summary TEXT, description TEXT);
         CREATE VIRTUAL TABLE pkg_fts USING fts5(summary, description, tokenize = 'unicode61 remove_diacritics 2');",
    )
    .unwrap();
    let t0 = Instant::now();
    for chunk in docs.chunks(BATCH) {
        c.execute_batch("BEGIN").unwrap();
        {
            let mut ins = c
                .prepare_cached("INSERT INTO pkg(name, summary, description) VALUES (?1, ?2, ?3)")
                .unwrap();
            let mut fts = c
                .prepare_cached(
                    "INSERT INTO pkg_fts(rowid, summary, description) VALUES (?1, ?2, ?3)",
                )
                .unwrap();
            for d in chunk {
                ins.execute(rusqlite::params![d.name, d.summary, d.description])
                    .unwrap();
                if with_fts {
                    let id = c.last_insert_rowid();
                    fts.execute(rusqlite::params![id, d.summary, d.description])
                        .unwrap();
                }
            }
        }
        c.execute_batch("COMMIT").unwrap();
    }
    (t0.elapsed().as_secs_f64() * 1e3, c, path)
}

fn checkpointed_size(c: &rusqlite::Connection, path: &Path) -> u64 {
    c.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);").unwrap();
    file_bytes(path)
}

fn main() {
    let quick = support::flag("--quick");
    let reps = if quick { 1 } else { 3 };
    let (docs, source) = corpus(quick);
    let text_bytes: u64 = docs
        .iter()
        .map(|d| (d.summary.len() + d.description.len()) as u64)
        .sum();
    eprintln!(
        "search bench: {} documents from {source}, {:.1} MB of text",
        docs.len(),
        text_bytes as f64 / 1e6
    );
    let searchable = schema(true);
    let plain = schema(false);
    let encode = |s: &Schema| -> Vec<Vec<u8>> {
        let r = s.reader(COLL).unwrap();
        docs.iter()
            .map(|d| {
                r.encode_json(&serde_json::json!({"name": d.name, "summary": d.summary, "description": d.description}))
                    .unwrap()
            })
            .collect()
    };
    let objs = encode(&searchable);
    let (mut build, mut raw_build_ms, mut plain_ms, mut raw_plain_ms) =
        (vec![], vec![], vec![], vec![]);
    let (mut q_keel, mut q_raw) = (vec![], vec![]);
    let (mut keel_index, mut raw_index) = (0u64, 0u64);
    for rep in 0..reps {
        let dir = tempfile::tempdir().unwrap();
        // Plain keel (no index) and plain raw first: the baselines for size and overhead.
        let (ms, _, db) = keel_build(dir.path(), "plain", &plain, &objs);
        plain_ms.push(ms);
        db.close().wait().unwrap();
        let plain_size = file_bytes(&dir.path().join("keel-plain.db"));
        let (ms, c, p) = raw_build(dir.path(), "plain", &docs, false);
        raw_plain_ms.push(ms);
        let raw_plain_size = checkpointed_size(&c, &p);
        drop(c);

        let (ms, _, db) = keel_build(dir.path(), "fts", &searchable, &objs);
        build.push(ms);
        let (ms, c, p) = raw_build(dir.path(), "fts", &docs, true);
        raw_build_ms.push(ms);

        // Queries: the 20 best by relevance, as objects (keel) / rows (raw).
        let mut found = 0usize;
        let t0 = Instant::now();
        for q in QUERIES {
            let rows = db
                .query(COLL)
                .filter(Expr::search(*q))
                .order_by(relevance())
                .limit(20)
                .all()
                .unwrap();
            found += rows.len();
        }
        q_keel.push(t0.elapsed().as_secs_f64() * 1e3);
        let mut raw_found = 0usize;
        let t0 = Instant::now();
        {
            let mut st = c
                .prepare_cached(
                    "SELECT pkg.rowid, pkg.name, pkg.summary, pkg.description FROM
                       (SELECT rowid AS r, bm25(pkg_fts, 2.0, 1.0) AS s FROM pkg_fts WHERE pkg_fts MATCH ?1
                        ORDER BY s LIMIT 20)
                       JOIN pkg ON pkg.rowid = r ORDER BY s",
                )
                .unwrap();
            for q in QUERIES {
                let mut rows = st.query([*q]).unwrap();
                while let Some(r) = rows.next().unwrap() {
                    let _: (i64, String, Option<String>, Option<String>) = (
                        r.get(0).unwrap(),
                        r.get(1).unwrap(),
                        r.get(2).unwrap(),
                        r.get(3).unwrap(),
                    );
                    raw_found += 1;
                }
            }
        }
        q_raw.push(t0.elapsed().as_secs_f64() * 1e3);
        if rep == 0 {
            eprintln!("search bench: {found} results from keel, {raw_found} from raw FTS5");
            // Per query: where the time goes, and how many documents each side
            // matched (keel's tokenizer splits CJK text into words and bigrams;
            // unicode61 keeps a CJK run as one token, so it matches fewer).
            for q in QUERIES {
                let n_keel = db.query(COLL).filter(Expr::search(*q)).count().unwrap();
                let t = Instant::now();
                let rows = db
                    .query(COLL)
                    .filter(Expr::search(*q))
                    .order_by(relevance())
                    .limit(20)
                    .all()
                    .unwrap();
                let keel_ms = t.elapsed().as_secs_f64() * 1e3;
                let n_raw: i64 = c
                    .query_row(
                        "SELECT count(*) FROM pkg_fts WHERE pkg_fts MATCH ?1",
                        [*q],
                        |r| r.get(0),
                    )
                    .unwrap();
                let top = |sql: &str| {
                    let t = Instant::now();
                    let n = c
                        .prepare_cached(sql)
                        .unwrap()
                        .query_map([*q], |r| r.get::<_, i64>(0))
                        .unwrap()
                        .count();
                    (t.elapsed().as_secs_f64() * 1e3, n)
                };
                let (join_first_ms, got) = top(
                    "SELECT pkg.rowid, pkg.name, pkg.summary, pkg.description FROM
                       (SELECT rowid AS r, bm25(pkg_fts, 2.0, 1.0) AS s FROM pkg_fts WHERE pkg_fts MATCH ?1)
                       JOIN pkg ON pkg.rowid = r ORDER BY s LIMIT 20",
                );
                let (raw_ms, _) = top(
                    "SELECT pkg.rowid, pkg.name, pkg.summary, pkg.description FROM
                       (SELECT rowid AS r, bm25(pkg_fts, 2.0, 1.0) AS s FROM pkg_fts WHERE pkg_fts MATCH ?1 ORDER BY s LIMIT 20)
                       JOIN pkg ON pkg.rowid = r ORDER BY s",
                );
                eprintln!(
                    "search bench: {q:<28} top 20: keel {keel_ms:6.2} ms, raw {raw_ms:6.2} ms (joining every match first: {join_first_ms:6.2} ms); matches keel {n_keel} raw {n_raw}; shown {} / {got}",
                    rows.len()
                );
            }
        }
        db.close().wait().unwrap();
        keel_index = file_bytes(&dir.path().join("keel-fts.db")).saturating_sub(plain_size);
        raw_index = checkpointed_size(&c, &p).saturating_sub(raw_plain_size);
    }
    let m = |v: &Vec<f64>| support::median(v.clone());
    let metrics: Vec<(&str, f64)> = vec![
        ("docs", docs.len() as f64),
        ("text_mb", (text_bytes as f64 / 1e6 * 10.0).round() / 10.0),
        ("build_ratio", m(&build) / m(&raw_build_ms)),
        ("write_overhead_ratio", m(&build) / m(&plain_ms)),
        ("raw_write_overhead", m(&raw_build_ms) / m(&raw_plain_ms)),
        ("query_ratio", m(&q_keel) / m(&q_raw)),
        ("keel_build_ms", m(&build)),
        ("raw_build_ms", m(&raw_build_ms)),
        ("keel_plain_insert_ms", m(&plain_ms)),
        ("keel_query_ms_per_query", m(&q_keel) / QUERIES.len() as f64),
        ("raw_query_ms_per_query", m(&q_raw) / QUERIES.len() as f64),
        ("index_size_factor", keel_index as f64 / text_bytes as f64),
        (
            "raw_index_size_factor",
            raw_index as f64 / text_bytes as f64,
        ),
    ];
    let target = |metric: &str, label: &str, v: &Vec<f64>, base: &Vec<f64>, goal: f64| {
        let b = m(base);
        let vals: Vec<f64> = v.iter().map(|x| x / b).collect();
        let mut sorted = vals.clone();
        sorted.sort_by(f64::total_cmp);
        serde_json::json!({
            "metric": metric, "label": label,
            "median": (support::median(vals.clone()) * 1000.0).round() / 1000.0,
            "min": (sorted[0] * 1000.0).round() / 1000.0,
            "max": (sorted[sorted.len() - 1] * 1000.0).round() / 1000.0,
            "repetitions": vals.len(),
            "target": goal, "better": "lower", "unit": "×",
        })
    };
    let targets = vec![
        target(
            "build_ratio",
            "index build vs raw FTS5",
            &build,
            &raw_build_ms,
            1.3,
        ),
        target(
            "query_ratio",
            "top-20 relevance query vs raw FTS5",
            &q_keel,
            &q_raw,
            1.3,
        ),
        target(
            "write_overhead_ratio",
            "searchable insert vs plain insert",
            &build,
            &plain_ms,
            1.5,
        ),
    ];
    support::write_targets_report(
        "search",
        &metrics,
        note,
        targets,
        format!(
            "{} documents ({source}), {:.1} MB of searchable text.",
            docs.len(),
            text_bytes as f64 / 1e6
        ),
        include_str!("search.rs"),
        &["Corpus", "What is measured"],
    );
}

fn note(k: &str) -> &'static str {
    match k {
        "docs" => "documents (packages) in the corpus",
        "text_mb" => "searchable text (summary + description), MB",
        "build_ratio" => "keel insert with its index ÷ raw insert of row + FTS5 row (goal ≤ 1.3)",
        "write_overhead_ratio" => {
            "keel insert, searchable ÷ the same collection without (searchable) (goal ≤ 1.5)"
        }
        "raw_write_overhead" => "raw: row + FTS5 row ÷ row alone (what FTS5 itself costs)",
        "query_ratio" => {
            "keel top-20 relevance fetch ÷ raw FTS5 join, over the query set (goal ≤ 1.3)"
        }
        "keel_build_ms" => "keel: insert every document with its index, ms",
        "raw_build_ms" => "raw: insert every row and FTS5 row, ms",
        "keel_plain_insert_ms" => "keel: insert every document without an index, ms",
        "keel_query_ms_per_query" => "keel: ms per top-20 relevance query",
        "raw_query_ms_per_query" => "raw FTS5: ms per top-20 relevance query",
        "index_size_factor" => "keel: file growth from the index ÷ text bytes",
        "raw_index_size_factor" => {
            "raw FTS5 (stores its own copy of the text): file growth ÷ text bytes"
        }
        _ => "",
    }
}
