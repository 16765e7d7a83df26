//! `keel schema check OLD NEW`: output and exit codes.

use std::path::PathBuf;
use std::process::Command;

fn evo(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/blog/schema/evolution")
        .join(name)
}

fn keel(args: &[&std::ffi::OsStr]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_keel"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn compatible_change_exits_zero_and_explains() {
    let (code, out, _) = keel(&[
        "schema".as_ref(),
        "check".as_ref(),
        evo("post_v1.fbs").as_os_str(),
        evo("post_v2.fbs").as_os_str(),
    ]);
    assert_eq!(code, 0, "{out}");
    assert!(out.starts_with("compatible: "), "{out}");
    assert!(out.contains("  note: evo.Note.legacy: deprecated"), "{out}");
    assert!(
        out.contains("  note: evo.Note.views: field added (id 5)"),
        "{out}"
    );
}

#[test]
fn incompatible_change_exits_one_and_names_the_field() {
    let (code, out, _) = keel(&[
        "schema".as_ref(),
        "check".as_ref(),
        evo("post_v2.fbs").as_os_str(),
        evo("post_v1.fbs").as_os_str(),
    ]);
    assert_eq!(code, 1, "{out}");
    assert!(out.starts_with("incompatible: "), "{out}");
    assert!(
        out.contains(
            "  error: evo.Note.views: field was removed; keep it and mark it (deprecated) instead"
        ),
        "{out}"
    );
}

#[test]
fn json_output() {
    let (code, out, _) = keel(&[
        "schema".as_ref(),
        "check".as_ref(),
        "--json".as_ref(),
        evo("post_v2.fbs").as_os_str(),
        evo("post_v1.fbs").as_os_str(),
    ]);
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["compatible"], false);
    assert!(v["incompatibilities"]
        .as_array()
        .unwrap()
        .iter()
        .any(|i| i["subject"] == "evo.Note.views"));
    assert_eq!(v["old_fingerprint"].as_str().unwrap().len(), 16);
}

#[test]
fn parse_errors_exit_two_with_position() {
    let dir = std::env::temp_dir().join(format!("keel-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.fbs");
    std::fs::write(&bad, "table T {\n  a: int\n}\n").unwrap();
    let (code, _, err) = keel(&[
        "schema".as_ref(),
        "check".as_ref(),
        evo("post_v1.fbs").as_os_str(),
        bad.as_os_str(),
    ]);
    assert_eq!(code, 2);
    assert!(
        err.contains("bad.fbs:3:1: expected \";\" after the field, found \"}\""),
        "{err}"
    );
    let (code, _, err) = keel(&[
        "schema".as_ref(),
        "check".as_ref(),
        dir.join("missing.fbs").as_os_str(),
        bad.as_os_str(),
    ]);
    assert_eq!(code, 2);
    assert!(
        err.contains("missing.fbs: cannot read schema file"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
