//! Byte compatibility with `flatc`: buffers written by flatc 2.0.8 (committed under
//! `tests/fixtures`, see its README) decode with the generated types and with the
//! runtime schema; Rust re-encodings read identically through the runtime schema.

use keel_example_blog::blog::{Color, Content, Post, Vec2, SCHEMA_FBS};
use keel_schema::{Schema, Value};

const FULL: &[u8] = include_bytes!("../../../tests/fixtures/post_full.bin");
const MINIMAL: &[u8] = include_bytes!("../../../tests/fixtures/post_minimal.bin");
const VIDEO: &[u8] = include_bytes!("../../../tests/fixtures/post_video.bin");

fn schema() -> Schema {
    Schema::parse(SCHEMA_FBS, "blog.fbs").unwrap()
}

#[test]
fn flatc_full_object_decodes_with_generated_types() {
    assert_eq!(&FULL[4..8], b"BLOG", "file identifier");
    let p = Post::decode(FULL).unwrap();
    assert_eq!(p.id, "full");
    assert_eq!(p.priority, 42);
    assert_eq!(p.color, Color::Blue);
    assert_eq!(p.title.as_deref(), Some("Everything set — ünïcødé ✓"));
    let author = p.author.as_ref().unwrap();
    assert_eq!(
        (author.name.as_deref(), author.age),
        (Some("Ada Lovelace"), 36)
    );
    match p.content.as_ref().unwrap() {
        Content::Image(img) => {
            assert_eq!(img.url.as_deref(), Some("https://example.invalid/cat.png"));
            assert_eq!((img.width, img.height), (640, 480));
        }
        other => panic!("expected an image, got {other:?}"),
    }
    assert_eq!(p.pos, Some(Vec2 { x: 1.5, y: -2.25 }));
    let frame = p.frame.unwrap();
    assert_eq!(frame.origin, Vec2 { x: 0.0, y: 10.0 });
    assert_eq!(frame.size, Vec2 { x: 100.0, y: 50.5 });
    assert_eq!(frame.layer, -7);
    assert_eq!(p.tags, vec!["intro", "rust", ""]);
    assert_eq!(p.scores, vec![1, -2, i32::MAX, i32::MIN]);
    assert_eq!(
        p.points,
        vec![Vec2 { x: 1.0, y: 2.0 }, Vec2 { x: 3.0, y: 4.0 }]
    );
    assert_eq!(p.attachments.len(), 2);
    assert_eq!(p.attachments[1].url.as_deref(), Some("b.png"));
    assert_eq!(p.attachments[1].width, 0);
    assert_eq!(p.colors, vec![Color::Red, Color::Blue, Color::Green]);
    assert_eq!(p.rating, Some(4.75));
    assert_eq!(p.slug.as_deref(), Some("everything-set"));
    assert!(!p.published);
    assert_eq!(p.views, u64::MAX);
    assert_eq!(p.delta, -128);
    assert_eq!(p.flags, vec![0, 1, 255]);
}

#[test]
fn flatc_minimal_object_reads_schema_defaults() {
    let p = Post::decode(MINIMAL).unwrap();
    assert_eq!(p.id, "minimal");
    assert_eq!(p.priority, 1);
    assert_eq!(p.color, Color::Green);
    assert_eq!(p.title, None);
    assert_eq!(p.author, None);
    assert_eq!(p.content, None);
    assert_eq!(p.pos, None);
    assert!(p.tags.is_empty());
    assert_eq!(p.rating, None);
    assert!(p.published);
    assert_eq!(p.delta, -3);
    assert_eq!(p, Post::builder().id("minimal").build());
}

#[test]
fn flatc_video_union_and_explicit_defaults() {
    let p = Post::decode(VIDEO).unwrap();
    match p.content.as_ref().unwrap() {
        Content::Video(v) => {
            assert_eq!(v.url.as_deref(), Some("clip.mp4"));
            assert_eq!(v.seconds, 1.5);
        }
        other => panic!("expected a video, got {other:?}"),
    }
    // an optional scalar explicitly set to 0.0 is present, not null
    assert_eq!(p.rating, Some(0.0));
    assert_eq!(p.tags, Vec::<String>::new());
}

#[test]
fn runtime_schema_reads_flatc_bytes_like_generated_types() {
    let s = schema();
    let r = s.reader("blog.Post").unwrap();
    let full = r.read(FULL).unwrap();
    let get = |o: &keel_schema::Object<'_, '_>, p: &str| o.get(&r.path(p).unwrap());
    assert_eq!(get(&full, "id"), Value::from("full"));
    assert_eq!(get(&full, "priority"), Value::Int(42));
    assert_eq!(get(&full, "color"), Value::Int(2));
    assert_eq!(get(&full, "author.name"), Value::from("Ada Lovelace"));
    assert_eq!(get(&full, "content"), Value::Int(1));
    assert_eq!(get(&full, "content.Image.width"), Value::Int(640));
    assert_eq!(get(&full, "content.Video.url"), Value::Null);
    assert_eq!(get(&full, "pos.y"), Value::Float(-2.25));
    assert_eq!(get(&full, "frame.size.y"), Value::Float(50.5));
    assert_eq!(get(&full, "frame.layer"), Value::Int(-7));
    assert_eq!(get(&full, "rating"), Value::Float(4.75));
    assert_eq!(get(&full, "published"), Value::Bool(false));
    assert_eq!(
        get(&full, "views"),
        Value::Int(-1),
        "ulong keeps its bit pattern"
    );
    assert_eq!(get(&full, "flags"), Value::Blob(vec![0, 1, 255]));

    let min = r.read(MINIMAL).unwrap();
    assert_eq!(get(&min, "priority"), Value::Int(1));
    assert_eq!(get(&min, "rating"), Value::Null);
    assert_eq!(get(&min, "title"), Value::Null);
    assert_eq!(get(&min, "author.name"), Value::Null);
    assert_eq!(get(&min, "content"), Value::Null);
    assert_eq!(get(&min, "content.Image.width"), Value::Null);
    assert_eq!(get(&min, "pos.x"), Value::Null);
    assert_eq!(get(&min, "published"), Value::Bool(true));
}

#[test]
fn rust_reencoding_reads_identically_through_runtime_schema() {
    let s = schema();
    let r = s.reader("blog.Post").unwrap();
    for (name, bin) in [("full", FULL), ("minimal", MINIMAL), ("video", VIDEO)] {
        // flatc may write empty vectors that Rust omits; both read as empty
        let from_flatc = without_empty_arrays(r.read(bin).unwrap().to_json().unwrap());
        let ours = Post::decode(bin).unwrap().encode();
        assert_eq!(&ours[4..8], b"BLOG");
        let from_rust = r.read(&ours).unwrap().to_json().unwrap();
        assert_eq!(from_flatc, from_rust, "{name}");
        // and the dynamic builder makes the same object from that JSON
        let dynamic = r.encode_json(&from_flatc).unwrap();
        assert_eq!(
            Post::decode(&dynamic).unwrap(),
            Post::decode(bin).unwrap(),
            "{name}"
        );
    }
}

/// When `flatc` is installed, it must read what Rust writes (skipped otherwise; CI
/// has no flatc, the committed fixtures cover the other direction).
#[test]
fn flatc_reads_rust_encoded_bytes_when_installed() {
    let Ok(out) = std::process::Command::new("flatc")
        .arg("--version")
        .output()
    else {
        eprintln!("flatc not installed; skipping");
        return;
    };
    assert!(out.status.success());
    let dir = tempfile_dir();
    let schema_path = concat!(env!("CARGO_MANIFEST_DIR"), "/schema/blog.fbs");
    let post = Post::decode(FULL).unwrap();
    let bin = dir.join("rust.bin");
    std::fs::write(&bin, post.encode()).unwrap();
    let status = std::process::Command::new("flatc")
        .args(["--json", "--strict-json", "--raw-binary", "-o"])
        .arg(&dir)
        .arg(schema_path)
        .arg("--")
        .arg(&bin)
        .status()
        .unwrap();
    assert!(status.success());
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("rust.json")).unwrap()).unwrap();
    assert_eq!(json["id"], "full");
    assert_eq!(json["author"]["name"], "Ada Lovelace");
    assert_eq!(json["content_type"], "Image");
    assert_eq!(json["content"]["width"], 640);
    assert_eq!(json["frame"]["origin"]["y"], 10.0);
    assert_eq!(json["views"], u64::MAX);
    assert_eq!(json["colors"], serde_json::json!(["Red", "Blue", "Green"]));
    let _ = std::fs::remove_dir_all(&dir);
}

fn without_empty_arrays(mut j: serde_json::Value) -> serde_json::Value {
    if let Some(m) = j.as_object_mut() {
        m.retain(|_, v| v.as_array().is_none_or(|a| !a.is_empty()));
    }
    j
}

fn tempfile_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("keel-flatc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
