//! `keel schema check OLD NEW`: can NEW replace OLD without rewriting stored objects?
//! `keel codegen LANG S.fbs OUT_DIR`: typed models for an app.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use keel_schema::{compat, CodegenError, Schema};

use crate::exit::{Failure, PROBLEMS as EXIT_INCOMPATIBLE, USAGE_OR_IO as EXIT_ERROR};

pub fn schema_check(old: &std::path::Path, new: &std::path::Path, json: bool) -> ExitCode {
    let load = |p: &std::path::Path| Schema::from_file(p);
    let (old_s, new_s) = match (load(old), load(new)) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => {
            if json {
                println!(
                    "{}",
                    serde_json::json!({ "error": e.to_string(), "file": e.file, "line": e.line, "col": e.col })
                );
            } else {
                eprintln!("error: {e}");
            }
            return ExitCode::from(EXIT_ERROR);
        }
    };
    let result = compat::check(&old_s, &new_s);
    if json {
        let (notes, problems) = match &result {
            Ok(n) => (
                n.iter()
                    .map(|n| (n.subject.clone(), n.message.clone()))
                    .collect(),
                Vec::new(),
            ),
            Err(e) => (
                Vec::new(),
                e.iter()
                    .map(|e| (e.subject.clone(), e.message.clone()))
                    .collect::<Vec<_>>(),
            ),
        };
        let items = |v: Vec<(String, String)>| {
            v.into_iter()
                .map(|(s, m)| serde_json::json!({ "subject": s, "message": m }))
                .collect::<Vec<_>>()
        };
        let out = serde_json::json!({
            "compatible": result.is_ok(),
            "old": old.display().to_string(),
            "new": new.display().to_string(),
            "old_fingerprint": format!("{:016x}", old_s.fingerprint()),
            "new_fingerprint": format!("{:016x}", new_s.fingerprint()),
            "notes": items(notes),
            "incompatibilities": items(problems),
        });
        println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
    } else {
        match &result {
            Ok(notes) if notes.is_empty() => {
                println!(
                    "compatible: {} can replace {} (no changes that affect stored data)",
                    new.display(),
                    old.display()
                );
            }
            Ok(notes) => {
                println!(
                    "compatible: {} can replace {}",
                    new.display(),
                    old.display()
                );
                for n in notes {
                    println!("  note: {n}");
                }
            }
            Err(problems) => {
                println!(
                    "incompatible: {} cannot replace {} ({} problem{})",
                    new.display(),
                    old.display(),
                    problems.len(),
                    if problems.len() == 1 { "" } else { "s" }
                );
                for p in problems {
                    println!("  error: {p}");
                }
            }
        }
    }
    match result {
        Ok(_) => ExitCode::SUCCESS,
        Err(_) => ExitCode::from(EXIT_INCOMPATIBLE),
    }
}

/// `keel codegen swift|kotlin S.fbs OUT_DIR`: writes the generated `sources`
/// (paths relative to `out_dir`, texts) and prints each path; with `check`, writes
/// nothing and prints each file of `out_dir` that differs from its source (or is
/// missing), exiting 1 when there is one.
pub fn codegen(
    sources: Result<Vec<(String, String)>, CodegenError>,
    out_dir: &Path,
    check: bool,
) -> Result<u8, Failure> {
    let sources = match sources {
        Ok(s) => s,
        Err(e @ CodegenError::Io { .. }) => return Err(Failure::new(EXIT_ERROR, e.to_string())),
        Err(e) => return Err(Failure::new(crate::exit::WRONG_SCHEMA, e.to_string())),
    };
    let io =
        |p: &Path, e: std::io::Error| Failure::new(EXIT_ERROR, format!("{}: {e}", p.display()));
    let mut stale = 0;
    for (rel, text) in sources {
        let path: PathBuf = out_dir.join(rel);
        if check {
            match std::fs::read(&path) {
                Ok(old) if old == text.as_bytes() => {}
                Ok(_) => {
                    stale += 1;
                    println!("stale: {}", path.display());
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    stale += 1;
                    println!("missing: {}", path.display());
                }
                Err(e) => return Err(io(&path, e)),
            }
            continue;
        }
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
        }
        std::fs::write(&path, text).map_err(|e| io(&path, e))?;
        println!("{}", path.display());
    }
    if stale > 0 {
        eprintln!(
            "{stale} generated file(s) differ from the schema; run `keel codegen` without --check"
        );
        return Ok(crate::exit::PROBLEMS);
    }
    Ok(crate::exit::OK)
}
