//! Snapshots of what the three code generators (Rust, Swift, Kotlin) write for
//! every schema under `examples/blog/schema/`, checked in under
//! `tests/snapshots/`, so that every change in generated output shows in a diff.
//!
//! A test fails when the output differs from the checked-in file. After a change
//! that is meant to alter the output, rewrite the snapshots with
//! `KEEL_UPDATE_SNAPSHOTS=1 cargo test -p keel-schema --test codegen_snapshots`
//! and review the diff.
//!
//! The Rust output is taken unformatted (`Builder::format(false)`): what the
//! generator emits, independent of the installed rustfmt. The crate version in
//! the `@generated` header is replaced by `VERSION`, so a release does not touch
//! every snapshot.

use std::path::{Path, PathBuf};

use keel_schema::{Builder, Schema};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every `.fbs` under `examples/blog/schema`, sorted, as paths relative to it.
fn schemas() -> Vec<PathBuf> {
    fn walk(dir: &Path, base: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, base, out);
            } else if p.extension().is_some_and(|x| x == "fbs") {
                out.push(p.strip_prefix(base).unwrap().to_path_buf());
            }
        }
    }
    let base = repo().join("examples/blog/schema");
    let mut out = Vec::new();
    walk(&base, &base, &mut out);
    out.sort();
    assert!(
        out.len() >= 8,
        "examples/blog/schema lost its schemas: {out:?}"
    );
    out
}

fn normalize(text: &str) -> String {
    text.replace(env!("CARGO_PKG_VERSION"), "VERSION")
}

/// Compares `got` with the snapshot `name`, or writes it when
/// `KEEL_UPDATE_SNAPSHOTS` is set. Returns a description of a mismatch.
fn check(name: &str, got: &str) -> Option<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/snapshots")
        .join(name);
    let got = normalize(got);
    if std::env::var_os("KEEL_UPDATE_SNAPSHOTS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &got).unwrap();
        return None;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_default();
    if want == got {
        return None;
    }
    let line = want
        .lines()
        .zip(got.lines())
        .position(|(a, b)| a != b)
        .unwrap_or_else(|| want.lines().count().min(got.lines().count()));
    Some(format!(
        "{name}: differs from line {} (want {:?}, got {:?})",
        line + 1,
        want.lines().nth(line),
        got.lines().nth(line)
    ))
}

/// Runs `gen` on every schema and checks each result; one failure lists every
/// snapshot that differs.
fn check_all(lang: &str, gen: impl Fn(&Schema, &str) -> String) {
    let base = repo().join("examples/blog/schema");
    let mut bad = Vec::new();
    for rel in schemas() {
        let schema = Schema::from_file(base.join(&rel)).unwrap();
        let stem = rel.file_stem().unwrap().to_str().unwrap();
        let name = format!("{lang}/{}.txt", rel.with_extension("").display());
        bad.extend(check(&name, &gen(&schema, stem)));
    }
    assert!(
        bad.is_empty(),
        "generated {lang} changed (KEEL_UPDATE_SNAPSHOTS=1 rewrites the snapshots):\n{}",
        bad.join("\n")
    );
}

/// An error is part of the snapshot: a schema a language cannot express must
/// keep failing the same way.
fn or_error<T>(r: Result<T, keel_schema::CodegenError>, ok: impl FnOnce(T) -> String) -> String {
    match r {
        Ok(v) => ok(v),
        Err(e) => format!("error: {e}\n"),
    }
}

#[test]
fn rust_output_matches_the_snapshots() {
    check_all("rust", |s, _| {
        or_error(
            Builder::new()
                .runtime_crate("::keel_schema")
                .format(false)
                .generate(s),
            |code| code,
        )
    });
}

#[test]
fn swift_output_matches_the_snapshots() {
    check_all("swift", |s, stem| {
        or_error(keel_schema::swift::generate(s, stem), |code| code)
    });
}

#[test]
fn kotlin_output_matches_the_snapshots() {
    check_all("kotlin", |s, stem| {
        or_error(keel_schema::kotlin::generate(s, stem), |files| {
            files
                .into_iter()
                .map(|(path, text)| format!("//// file: {path}\n{text}"))
                .collect()
        })
    });
}
