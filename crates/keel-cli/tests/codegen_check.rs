//! `keel codegen --check`: exits 1 when the checked-in
//! generated models differ from what the generator makes, 0 when they match, and
//! writes nothing. `--package` puts Kotlin models in the app's package without
//! changing the stored collection names.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

fn keel(args: &[&OsStr]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_keel"))
        .args(args)
        .output()
        .expect("run keel");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn blog() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/blog/schema/blog.fbs")
}

fn codegen(lang: &str, out: &Path, extra: &[&str]) -> (i32, String, String) {
    let schema = blog();
    let mut args: Vec<&OsStr> = vec![
        "codegen".as_ref(),
        lang.as_ref(),
        schema.as_os_str(),
        out.as_os_str(),
    ];
    args.extend(extra.iter().map(OsStr::new));
    keel(&args)
}

#[test]
fn check_fails_on_stale_or_missing_models_and_passes_on_fresh_ones() {
    for (lang, file) in [("kotlin", "blog/Blog.kt"), ("swift", "Blog.swift")] {
        let dir = tempfile::tempdir().unwrap();
        // nothing generated yet: missing, and --check writes nothing
        let (code, stdout, stderr) = codegen(lang, dir.path(), &["--check"]);
        assert_eq!(code, 1, "{lang}: {stdout}{stderr}");
        assert!(stdout.contains("missing: "), "{stdout}");
        assert!(!dir.path().join(file).exists());

        let (code, _, stderr) = codegen(lang, dir.path(), &[]);
        assert_eq!(code, 0, "{stderr}");
        let (code, stdout, stderr) = codegen(lang, dir.path(), &["--check"]);
        assert_eq!(code, 0, "{lang}: {stdout}{stderr}");

        // a hand edit (or a schema change not regenerated) makes it stale
        let path = dir.path().join(file);
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str("// edited\n");
        std::fs::write(&path, &text).unwrap();
        let (code, stdout, _) = codegen(lang, dir.path(), &["--check"]);
        assert_eq!(code, 1, "{lang}");
        assert!(
            stdout.contains(&format!("stale: {}", path.display())),
            "{stdout}"
        );
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            text,
            "--check wrote"
        );
    }
}

#[test]
fn kotlin_package_is_the_apps_and_the_collection_name_stays() {
    let dir = tempfile::tempdir().unwrap();
    let (code, stdout, stderr) = codegen("kotlin", dir.path(), &["--package", "com.example.feed"]);
    assert_eq!(code, 0, "{stderr}");
    let file = dir.path().join("com/example/feed/Blog.kt");
    assert_eq!(stdout.trim(), file.display().to_string());
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("package com.example.feed\n"));
    assert!(text.contains("public const val COLLECTION: String = \"blog.Post\""));
    let (code, _, _) = codegen(
        "kotlin",
        dir.path(),
        &["--package", "com.example.feed", "--check"],
    );
    assert_eq!(code, 0);

    let (code, _, stderr) = codegen("kotlin", dir.path(), &["--package", "1bad"]);
    assert_eq!(code, 4, "{stderr}");
    let (code, _, stderr) = codegen("swift", dir.path(), &["--package", "a.b"]);
    assert_eq!(code, 2, "{stderr}");
}
