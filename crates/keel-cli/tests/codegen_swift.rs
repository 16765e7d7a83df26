//! `keel codegen swift`: writes the generated Swift for a schema (compiled and run
//! by the Swift suite, `cargo xtask swift-test`), and refuses bad schemas with
//! exit code 4.

use std::path::Path;
use std::process::Command;

fn keel(args: &[&std::ffi::OsStr]) -> (i32, String, String) {
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

#[test]
fn writes_the_blog_models() {
    let dir = tempfile::tempdir().unwrap();
    let schema = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/blog/schema/blog.fbs");
    let (code, stdout, stderr) = keel(&[
        "codegen".as_ref(),
        "swift".as_ref(),
        schema.as_os_str(),
        dir.path().as_os_str(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    let file = dir.path().join("Blog.swift");
    assert_eq!(stdout.trim(), file.display().to_string());
    let text = std::fs::read_to_string(file).unwrap();
    assert!(text.contains("import Keel"));
    assert!(text.contains("public struct Post: Sendable, Equatable, Hashable {"));
    assert!(text.contains("public enum BlogSchema: KeelSchema {"));
}

#[test]
fn a_schema_swift_cannot_express_is_exit_4() {
    let dir = tempfile::tempdir().unwrap();
    let schema = dir.path().join("k.fbs");
    // `Key` is the nested key type of every generated record
    std::fs::write(&schema, "table Key { a: int; } root_type Key;").unwrap();
    let (code, _, stderr) = keel(&[
        "codegen".as_ref(),
        "swift".as_ref(),
        schema.as_os_str(),
        dir.path().join("out").as_os_str(),
    ]);
    assert_eq!(code, 4, "{stderr}");
    assert!(stderr.contains("Key"), "{stderr}");
    let bad = dir.path().join("bad.fbs");
    std::fs::write(&bad, "table { oops").unwrap();
    let (code, _, _) = keel(&[
        "codegen".as_ref(),
        "swift".as_ref(),
        bad.as_os_str(),
        dir.path().join("out").as_os_str(),
    ]);
    assert_eq!(code, 4);
}
