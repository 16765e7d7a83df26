//! `keel encrypt`, `keel decrypt`, `keel rekey`: move a database file to another
//! key, or between plaintext and encrypted, through keel's crash-safe rotation (a
//! whole new file, synced, renamed over the old one; see `docs/encryption.md`).
//! The file must not be open anywhere else (exit 5 otherwise, nothing changed).

use std::io::IsTerminal;
use std::path::Path;
use std::sync::Mutex;

use keel_storage::rotate::{self, Progress as Event, RotateOptions, RotateReport, Side, Step};
use serde_json::json;

use crate::exit::{Failure, Result, OK, USAGE_OR_IO};
use crate::files::human_bytes;
use crate::keys::FileKey;
use crate::progress::Progress;

/// What the command does, for messages.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    Encrypt,
    Decrypt,
    Rekey,
}

impl Kind {
    fn verb(self) -> &'static str {
        match self {
            Kind::Encrypt => "encrypted",
            Kind::Decrypt => "decrypted",
            Kind::Rekey => "rekeyed",
        }
    }
}

/// The key a migration ends with, and whether the command made it.
pub struct NewKey {
    pub key: Option<FileKey>,
    pub created: bool,
}

/// The database must exist before a key is made for it: exit 2 otherwise.
pub fn existing_file(db: &Path) -> Result<()> {
    match std::fs::metadata(db) {
        Ok(m) if m.is_file() && m.len() > 0 => Ok(()),
        Ok(_) => Err(Failure::new(
            USAGE_OR_IO,
            format!("{}: not a database file", db.display()),
        )),
        Err(e) => Err(Failure::new(USAGE_OR_IO, format!("{}: {e}", db.display()))),
    }
}

/// Run one migration of `db` from `from` to `to`, with progress on stderr: a bar
/// on a terminal, one line per step otherwise (never with `--json`).
pub fn run(db: &Path, kind: Kind, from: Side, to: NewKey, json: bool) -> Result<u8> {
    existing_file(db)?;
    let target = to.key.as_ref().map_or(Side::Plaintext, FileKey::side);
    let bar = Progress::new(json).bar(100, kind.verb(), "%");
    let lines = !json && !std::io::stderr().is_terminal();
    let last = Mutex::new(None::<(Step, u64)>);
    let bar2 = bar.clone();
    let opts = RotateOptions::default().progress(move |p: Event| {
        let pct = (p.fraction * 100.0).round() as u64;
        bar2.set_position(pct);
        if lines {
            // A line per step, and per quarter of the copy.
            let mut l = last.lock().unwrap_or_else(|e| e.into_inner());
            let shown = match *l {
                Some((s, q)) => s != p.step || (p.step == Step::Copy && pct / 25 > q / 25),
                None => true,
            };
            if shown {
                *l = Some((p.step, pct));
                eprintln!(
                    "keel: {:?} {pct}% ({} copied)",
                    p.step,
                    human_bytes(p.bytes)
                );
            }
        }
    });
    let result = rotate::start(db, from, target, opts).wait();
    bar.finish_and_clear();
    let report = result.map_err(Failure::storage)?;
    print_report(db, kind, &report, &to, json);
    Ok(OK)
}

fn print_report(db: &Path, kind: Kind, r: &RotateReport, to: &NewKey, json: bool) {
    let secs = r.duration.as_secs_f64();
    let mb_s = r.bytes as f64 / 1e6 / secs.max(1e-9);
    if json {
        let out = json!({
            "path": db.display().to_string(),
            "from": r.from.to_string(),
            "to": r.to.to_string(),
            "bytes": r.bytes,
            "seconds": secs,
            "mb_per_s": mb_s,
            "key_file": to.key.as_ref().map(|k| k.file.display().to_string()),
            "key_created": to.created,
            "recovered": r.recovered.as_ref().map(|x| json!({
                "outcome": format!("{:?}", x.outcome),
                "key": x.key().to_string(),
            })),
        });
        println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
        return;
    }
    if let Some(x) = &r.recovered {
        println!(
            "settled an interrupted rotation first: {:?}, the file was under {}",
            x.outcome,
            x.key()
        );
    }
    println!(
        "{} {}: {} -> {}, {} in {secs:.2} s ({mb_s:.1} MB/s)",
        kind.verb(),
        db.display(),
        r.from,
        r.to,
        human_bytes(r.bytes)
    );
    match &to.key {
        Some(k) if to.created => println!(
            "a new key was made and stored in {} (keep it apart from the database's backups)",
            k.file.display()
        ),
        Some(k) => println!("it opens with the key in {} now", k.file.display()),
        None => println!("it is a plaintext SQLite file now: it opens without a key"),
    }
}
