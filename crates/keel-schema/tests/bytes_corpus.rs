//! The shared hostile-bytes corpus (`tests/bytes/`): one verdict for bytes in every
//! runtime.
//!
//! `tests/bytes/corpus.txt` holds buffers of the table `corpus.Root`
//! (`tests/bytes/corpus.fbs`), each with the verdict every runtime must reach:
//! `accept:` and the decoded value in a canonical form, or `reject:` and the kind
//! of error (`malformed`, `too_deep`, `budget`, `missing_field`). Rust runs it
//! here (through [`DynamicTable::read`], what `insert_bytes` and the FFI check
//! bytes with), Swift in `bindings/swift/Tests/BytesCorpusTests.swift`, Kotlin in
//! `bindings/kotlin/BytesCorpus.kt`; each fails on any vector where it disagrees.
//!
//! The file is made by [`corpus`] below: hand-made hostile cases (each with the
//! verdict it must have, asserted here), truncations of a valid buffer at every
//! length, and seeded random mutations of it (their verdict is Rust's). The test
//! fails when the checked-in file differs from what the generator makes; run it
//! with `KEEL_BLESS_CORPUS=1` (and `-- --test-threads=1`) to rewrite the file
//! after changing the generator.

use std::fmt::Write as _;
use std::path::PathBuf;

use keel_schema::wire::{self, Builder, Offset, TableRef};
use keel_schema::{DecodeError, Schema};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/bytes")
}

fn schema() -> Schema {
    Schema::from_file(root().join("corpus.fbs")).expect("corpus.fbs parses")
}

// Field slots of corpus.fbs (a union takes two: its type, then its value).
const ID: u16 = 0;
const F: u16 = 1;
const D: u16 = 2;
const N: u16 = 3;
const BIG: u16 = 4;
const NAME: u16 = 5;
const TAGS: u16 = 6;
const NUMS: u16 = 7;
const LEAF: u16 = 8;
const ITEM: u16 = 10;
const ITEMS: u16 = 12;
const NODE: u16 = 13;
const LEAVES: u16 = 14;

/// The verdict of Rust's write-path check (`DynamicTable::read`) on `bytes`.
fn verdict(s: &Schema, bytes: &[u8]) -> String {
    let reader = s.reader("corpus.Root").expect("corpus.Root");
    match reader.read(bytes) {
        Ok(_) => match dump_root(bytes) {
            Ok(d) => format!("accept:{d}"),
            Err(e) => panic!("verified bytes failed to read: {e}"),
        },
        Err(e) => format!("reject:{}", kind(&e)),
    }
}

/// The corpus's error kind of a decode error.
fn kind(e: &DecodeError) -> &'static str {
    match e {
        DecodeError::OutOfBounds { .. } | DecodeError::Invalid { .. } => "malformed",
        DecodeError::TooDeep(_) => "too_deep",
        DecodeError::OverBudget { .. } => "budget",
        DecodeError::Field { .. } => "missing_field",
    }
}

// ---- the canonical dump (the same text Swift and Kotlin print) ----

fn q(s: Option<&str>) -> String {
    let Some(s) = s else {
        return "null".into();
    };
    let mut o = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            ' '..='~' => o.push(c),
            c => {
                let _ = write!(o, "\\u{{{:x}}}", c as u32);
            }
        }
    }
    o.push('"');
    o
}

fn dump_leaf(t: TableRef<'_>) -> Result<String, DecodeError> {
    Ok(format!(
        "{{name={};n={}}}",
        q(t.str(0)?),
        t.get::<i32>(1, 0)?
    ))
}

fn dump_member(tag: u8, t: TableRef<'_>) -> Result<String, DecodeError> {
    Ok(match tag {
        1 => format!("Leaf{}", dump_leaf(t)?),
        2 => format!("Other{{x={}}}", t.get::<i64>(0, 0)?),
        k => format!("unknown({k})"),
    })
}

fn dump_node(t: Option<TableRef<'_>>) -> Result<String, DecodeError> {
    let Some(t) = t else {
        return Ok("null".into());
    };
    Ok(format!(
        "{{left={};right={}}}",
        dump_node(t.table(0)?)?,
        dump_node(t.table(1)?)?
    ))
}

fn dump_root(bytes: &[u8]) -> Result<String, DecodeError> {
    let t = TableRef::root(bytes)?;
    let mut o = String::new();
    let _ = write!(o, "id={}", q(t.str(ID)?));
    let _ = write!(o, ";f={:08x}", t.get::<f32>(F, 0.0)?.to_bits());
    let _ = write!(o, ";d={:016x}", t.get::<f64>(D, 0.0)?.to_bits());
    let _ = write!(o, ";n={}", t.get::<i32>(N, 0)?);
    let _ = write!(o, ";big={}", t.get::<i64>(BIG, 0)?);
    let _ = write!(o, ";name={}", q(t.str(NAME)?));
    let mut tags = Vec::new();
    if let Some(v) = t.vector(TAGS, 4)? {
        for i in 0..v.len() {
            tags.push(q(Some(v.str(i)?)));
        }
    }
    let _ = write!(o, ";tags=[{}]", tags.join(","));
    let mut nums = Vec::new();
    if let Some(v) = t.vector(NUMS, 8)? {
        for i in 0..v.len() {
            nums.push(v.scalar::<i64>(i)?.to_string());
        }
    }
    let _ = write!(o, ";nums=[{}]", nums.join(","));
    let leaf = match t.table(LEAF)? {
        Some(l) => dump_leaf(l)?,
        None => "null".into(),
    };
    let _ = write!(o, ";leaf={leaf}");
    let tag = t.get::<u8>(ITEM - 1, 0)?;
    let item = match (tag, t.table(ITEM)?) {
        (0, _) | (_, None) => "none".into(),
        (tag, Some(m)) => dump_member(tag, m)?,
    };
    let _ = write!(o, ";item={item}");
    let mut items = Vec::new();
    if let Some((tags, values)) = t.union_vector(ITEMS)? {
        for (i, tag) in tags.iter().enumerate() {
            items.push(match tag {
                0 => "unknown(0)".into(),
                k => dump_member(*k, values.table(i)?)?,
            });
        }
    }
    let _ = write!(o, ";items=[{}]", items.join(","));
    let _ = write!(o, ";node={}", dump_node(t.table(NODE)?)?);
    let mut leaves = Vec::new();
    if let Some(v) = t.vector(LEAVES, 4)? {
        for i in 0..v.len() {
            leaves.push(dump_leaf(v.table(i)?)?);
        }
    }
    let _ = write!(o, ";leaves=[{}]", leaves.join(","));
    Ok(o)
}

// ---- building vectors ----

fn leaf(b: &mut Builder, name: &str, n: i32) -> Offset {
    let s = b.create_string(name);
    b.start_table();
    b.add_offset(0, s);
    b.add_scalar::<i32>(1, n, 0);
    b.end_table()
}

fn other(b: &mut Builder, x: i64) -> Offset {
    b.start_table();
    b.add_scalar::<i64>(0, x, 0);
    b.end_table()
}

fn node(b: &mut Builder, a: Option<Offset>, bb: Option<Offset>) -> Offset {
    b.start_table();
    if let Some(a) = a {
        b.add_offset(0, a);
    }
    if let Some(x) = bb {
        b.add_offset(1, x);
    }
    b.end_table()
}

/// A root with only `id` and `node` (the chain or DAG `nodes` builds).
fn with_node(nodes: impl FnOnce(&mut Builder) -> Offset) -> Vec<u8> {
    let mut b = Builder::new();
    let n = nodes(&mut b);
    let id = b.create_string("r");
    b.start_table();
    b.add_offset(ID, id);
    b.add_offset(NODE, n);
    let r = b.end_table();
    b.finish(r, None)
}

/// The valid buffer every truncation and mutation starts from: every field set.
fn base() -> Vec<u8> {
    let mut b = Builder::new();
    let id = b.create_string("r1");
    let name = b.create_string("hello");
    let (a, bc) = (b.create_string("a"), b.create_string("bc"));
    let tags = b.create_offset_vector(&[a, bc]);
    let nums = b.create_scalar_vector::<i64>(&[1, -2]);
    let lf = leaf(&mut b, "lf", 3);
    let item = other(&mut b, 9);
    let (x, o2) = (leaf(&mut b, "x", 1), other(&mut b, 2));
    let item_tags = b.create_scalar_vector::<u8>(&[1, 2]);
    let items = b.create_offset_vector(&[x, o2]);
    let inner = node(&mut b, None, None);
    let mid = node(&mut b, None, Some(inner));
    let top = node(&mut b, Some(mid), None);
    let p = leaf(&mut b, "p", 0);
    let leaves = b.create_offset_vector(&[p]);
    b.start_table();
    b.add_offset(ID, id);
    b.add_scalar::<f32>(F, 1.5, 0.0);
    b.add_scalar::<f64>(D, -2.25, 0.0);
    b.add_scalar::<i32>(N, 7, 0);
    b.add_scalar::<i64>(BIG, 1 << 40, 0);
    b.add_offset(NAME, name);
    b.add_offset(TAGS, tags);
    b.add_offset(NUMS, nums);
    b.add_offset(LEAF, lf);
    b.add_scalar_always::<u8>(ITEM - 1, 2);
    b.add_offset(ITEM, item);
    b.add_offset(ITEMS - 1, item_tags);
    b.add_offset(ITEMS, items);
    b.add_offset(NODE, top);
    b.add_offset(LEAVES, leaves);
    let r = b.end_table();
    b.finish(r, None)
}

/// Where in `buf` the slice `part` (borrowed from it) starts.
fn at(buf: &[u8], part: &[u8]) -> usize {
    part.as_ptr() as usize - buf.as_ptr() as usize
}

/// The position of the vtable entry of `slot` in the root table of `buf`.
fn vt_entry(buf: &[u8], slot: u16) -> usize {
    let t = TableRef::root(buf).unwrap();
    let soff = i32::from_le_bytes(buf[t.pos()..t.pos() + 4].try_into().unwrap());
    (t.pos() as i64 - soff as i64) as usize + 4 + 2 * slot as usize
}

/// The position of the inline field in `slot` of the root table of `buf`.
fn field_at(buf: &[u8], slot: u16) -> usize {
    let t = TableRef::root(buf).unwrap();
    t.field_pos(slot, 1).unwrap().expect("field present")
}

fn put_u32(buf: &mut [u8], p: usize, v: u32) {
    buf[p..p + 4].copy_from_slice(&v.to_le_bytes());
}

/// A buffer from `(position, bytes)` pieces, zero elsewhere.
fn raw(len: usize, parts: &[(usize, &[u8])]) -> Vec<u8> {
    let mut v = vec![0u8; len];
    for (p, b) in parts {
        v[*p..*p + b.len()].copy_from_slice(b);
    }
    v
}

fn le16(xs: &[u16]) -> Vec<u8> {
    xs.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// The hand-made cases: (name, bytes, the verdict they must have).
fn hostile() -> Vec<(String, Vec<u8>, String)> {
    let mut out: Vec<(String, Vec<u8>, String)> = Vec::new();
    let mut case = |name: &str, bytes: Vec<u8>, want: &str| {
        out.push((name.to_owned(), bytes, want.to_owned()))
    };
    let b = base();
    let base_dump = "id=\"r1\";f=3fc00000;d=c002000000000000;n=7;big=1099511627776;name=\"hello\";tags=[\"a\",\"bc\"];nums=[1,-2];leaf={name=\"lf\";n=3};item=Other{x=9};items=[Leaf{name=\"x\";n=1},Other{x=2}];node={left={left=null;right={left=null;right=null}};right=null};leaves=[{name=\"p\";n=0}]";
    case("valid_base", b.clone(), &format!("accept:{base_dump}"));

    // Swift read a string without its NUL terminator (Rust and Kotlin refuse it).
    let mut v = b.clone();
    let nul = v.windows(6).position(|w| w == b"hello\0").unwrap() + 5;
    v[nul] = b'!';
    case("string_without_nul", v, "reject:malformed");

    let mut v = b.clone();
    let h = v.windows(5).position(|w| w == b"hello").unwrap();
    v[h + 1] = 0xff;
    case("string_not_utf8", v, "reject:malformed");

    // A table at byte 10 (not 4-aligned), its `id` offset at 14: Swift read it.
    let v = raw(
        28,
        &[
            (0, &10u32.to_le_bytes()),
            (4, &le16(&[6, 8, 4])),
            (10, &6i32.to_le_bytes()),
            (14, &6u32.to_le_bytes()),
            (20, &2u32.to_le_bytes()),
            (24, b"r1"),
        ],
    );
    case("misaligned_table", v, "reject:malformed");

    // `big` (a long) at byte 28, 4 mod 8: Swift and Kotlin read it.
    let v = raw(
        44,
        &[
            (0, &20u32.to_le_bytes()),
            (4, &le16(&[14, 16, 4, 0, 0, 0, 8])),
            (20, &16i32.to_le_bytes()),
            (24, &12u32.to_le_bytes()),
            (28, &5i64.to_le_bytes()),
            (36, &2u32.to_le_bytes()),
            (40, b"r1"),
        ],
    );
    case("misaligned_long_field", v, "reject:malformed");

    // `nums` ([long]) whose elements start at byte 44, 4 mod 8.
    let v = raw(
        60,
        &[
            (0, &24u32.to_le_bytes()),
            (4, &le16(&[20, 12, 4, 0, 0, 0, 0, 0, 0, 8])),
            (24, &20i32.to_le_bytes()),
            (28, &24u32.to_le_bytes()),
            (32, &8u32.to_le_bytes()),
            (40, &1u32.to_le_bytes()),
            (44, &5i64.to_le_bytes()),
            (52, &2u32.to_le_bytes()),
            (56, b"r1"),
        ],
    );
    case("misaligned_long_vector", v, "reject:malformed");

    // A NONE element (tag 0, offset 0) in a vector of unions: Kotlin refused it.
    let mut v = b.clone();
    let t = TableRef::root(&v).unwrap();
    let (tags, values) = t.union_vector(ITEMS).unwrap().unwrap();
    let (tp, vp) = (at(&v, tags), at(&v, values.bytes()));
    v[tp] = 0;
    put_u32(&mut v, vp, 0);
    let want = base_dump.replace(
        "items=[Leaf{name=\"x\";n=1},Other{x=2}]",
        "items=[unknown(0),Other{x=2}]",
    );
    case("union_vector_none_element", v, &format!("accept:{want}"));

    // An unknown tag in a vector of unions whose value is not a table.
    let mut v = b.clone();
    let t = TableRef::root(&v).unwrap();
    let (tags, values) = t.union_vector(ITEMS).unwrap().unwrap();
    let (tp, vp) = (at(&v, tags), at(&v, values.bytes()));
    v[tp] = 9;
    put_u32(&mut v, vp, 0);
    case(
        "union_vector_unknown_tag_not_a_table",
        v,
        "reject:malformed",
    );

    // The single union's type set to NONE while its value points at a zero word
    // (not a table): a present value must be a table whatever the tag. Kotlin
    // did not look at it.
    let mut v = b.clone();
    let tag_at = field_at(&v, ITEM - 1);
    v[tag_at] = 0;
    let nums = TableRef::root(&v)
        .unwrap()
        .vector(NUMS, 8)
        .unwrap()
        .unwrap();
    let zero_word = at(&v, nums.bytes()) + 4; // the high half of `1i64`
    let val_at = field_at(&v, ITEM);
    put_u32(&mut v, val_at, (zero_word - val_at) as u32);
    case("union_none_value_not_a_table", v, "reject:malformed");

    // An unknown tag with a table value: kept as an unknown member.
    let mut v = b.clone();
    let tag_at = field_at(&v, ITEM - 1);
    v[tag_at] = 7;
    case(
        "union_unknown_tag",
        v,
        &format!(
            "accept:{}",
            base_dump.replace("item=Other{x=9}", "item=unknown(7)")
        ),
    );

    // A union type without its value, and a value without its type: Swift and
    // Kotlin read "no member" (Rust refuses both).
    let mut v = b.clone();
    let e = vt_entry(&v, ITEM);
    v[e..e + 2].fill(0);
    case("union_type_without_value", v, "reject:malformed");
    let mut v = b.clone();
    let e = vt_entry(&v, ITEM - 1);
    v[e..e + 2].fill(0);
    case("union_value_without_type", v, "reject:malformed");

    // `f: float = 0` stored as -0.0 reads back as -0.0.
    let mut bb = Builder::new();
    let id = bb.create_string("z");
    bb.start_table();
    bb.add_offset(ID, id);
    bb.add_scalar::<f32>(F, -0.0, 0.0);
    let r = bb.end_table();
    case(
        "negative_zero_float",
        bb.finish(r, None),
        "accept:id=\"z\";f=80000000;d=0000000000000000;n=0;big=0;name=null;tags=[];nums=[];leaf=null;item=none;items=[];node=null;leaves=[]",
    );

    // No primary key.
    let mut bb = Builder::new();
    bb.start_table();
    bb.add_scalar::<i32>(N, 1, 0);
    let r = bb.end_table();
    case(
        "missing_primary_key",
        bb.finish(r, None),
        "reject:missing_field",
    );

    // The amplification bomb, scaled down: 2,500 offsets to one 8 KB string
    // (18 KB of buffer, 20 MB decoded). The issue's 1 MB / 2 GB one is built by
    // the insert_bytes and FFI tests.
    let mut bb = Builder::new();
    let s = bb.create_string(&"x".repeat(8192));
    let tags = bb.create_offset_vector(&vec![s; 2500]);
    let id = bb.create_string("bomb");
    bb.start_table();
    bb.add_offset(ID, id);
    bb.add_offset(TAGS, tags);
    let r = bb.end_table();
    case("amplification_bomb", bb.finish(r, None), "reject:budget");

    // 61 chained tables whose two children both point at the next: 2^61 visits.
    let v = with_node(|b| {
        let mut next = node(b, None, None);
        for _ in 0..60 {
            next = node(b, Some(next), Some(next));
        }
        next
    });
    case("shared_subtree_dag", v, "reject:budget");

    // Depth: the root plus 63 nodes is 64 levels (allowed); one more is too deep.
    for (levels, want) in [(64usize, "accept"), (65, "reject:too_deep")] {
        let v = with_node(|b| {
            let mut next = node(b, None, None);
            for _ in 0..levels - 2 {
                next = node(b, Some(next), None);
            }
            next
        });
        let want = if want == "accept" {
            let mut d = "null".to_owned();
            for _ in 0..levels - 1 {
                d = format!("{{left={d};right=null}}");
            }
            format!("accept:id=\"r\";f=00000000;d=0000000000000000;n=0;big=0;name=null;tags=[];nums=[];leaf=null;item=none;items=[];node={d};leaves=[]")
        } else {
            want.to_owned()
        };
        case(&format!("depth_{levels}"), v, &want);
    }

    let mut v = b.clone();
    put_u32(&mut v, 0, 0xffff_fff0);
    case("root_offset_past_end", v, "reject:malformed");
    let mut v = b.clone();
    let tags = TableRef::root(&v)
        .unwrap()
        .vector(TAGS, 4)
        .unwrap()
        .unwrap();
    let len_at = at(&v, tags.bytes()) - 4;
    put_u32(&mut v, len_at, u32::MAX);
    case("vector_length_overflow", v, "reject:malformed");
    out
}

/// A small deterministic generator (xorshift64*), so the mutations are the same
/// on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// Every vector of the corpus: (name, bytes, verdict).
fn corpus(s: &Schema) -> Vec<(String, Vec<u8>, String)> {
    let mut out = Vec::new();
    for (name, bytes, want) in hostile() {
        assert_eq!(verdict(s, &bytes), want, "hand-made case {name}");
        out.push((name, bytes, want));
    }
    let b = base();
    for cut in 0..b.len() {
        let v = b[..cut].to_vec();
        let got = verdict(s, &v);
        out.push((format!("truncated_{cut}"), v, got));
    }
    let mut rng = Rng(0x6b65_656c_6279_7465);
    for i in 0..300 {
        let mut v = b.clone();
        for _ in 0..1 + rng.next() % 3 {
            let p = (rng.next() % v.len() as u64) as usize;
            v[p] = (rng.next() & 0xff) as u8;
        }
        let got = verdict(s, &v);
        out.push((format!("mutation_{i}"), v, got));
    }
    out
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

const HEADER: &str = "# keel's shared hostile-bytes corpus: one vector a line, `name<TAB>verdict<TAB>hex`.\n# Made by crates/keel-schema/tests/bytes_corpus.rs (KEEL_BLESS_CORPUS=1 rewrites it);\n# Rust, Swift and Kotlin must each reach every verdict. Schema: corpus.fbs (corpus.Root).\n";

fn render(vectors: &[(String, Vec<u8>, String)]) -> String {
    let mut o = String::from(HEADER);
    for (name, bytes, want) in vectors {
        let _ = writeln!(o, "{name}\t{want}\t{}", hex(bytes));
    }
    o
}

#[test]
fn the_checked_in_corpus_is_what_the_generator_makes() {
    let s = schema();
    let text = render(&corpus(&s));
    let path = root().join("corpus.txt");
    if std::env::var_os("KEEL_BLESS_CORPUS").is_some() {
        std::fs::write(&path, &text).unwrap();
    }
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        on_disk == text,
        "{} is stale: run `KEEL_BLESS_CORPUS=1 cargo test -p keel-schema --test bytes_corpus`",
        path.display()
    );
}

#[test]
fn rust_reaches_every_verdict_of_the_corpus() {
    let s = schema();
    let text = std::fs::read_to_string(root().join("corpus.txt")).unwrap();
    let mut wrong = Vec::new();
    let mut n = 0;
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let mut parts = line.split('\t');
        let (name, want, bytes) = (
            parts.next().unwrap(),
            parts.next().unwrap(),
            unhex(parts.next().unwrap_or("")),
        );
        let got = verdict(&s, &bytes);
        if got != want {
            wrong.push(format!("{name}: want {want}, got {got}"));
        }
        n += 1;
    }
    assert!(n > 500, "the corpus has {n} vectors");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_builder_keeps_negative_zero() {
    let mut b = Builder::new();
    let id = b.create_string("z");
    b.start_table();
    b.add_offset(ID, id);
    b.add_scalar::<f32>(F, -0.0, 0.0);
    b.add_scalar::<f64>(D, -0.0, 0.0);
    let r = b.end_table();
    let bytes = b.finish(r, None);
    let t = TableRef::root(&bytes).unwrap();
    assert!(t.get::<f32>(F, 0.0).unwrap().is_sign_negative());
    assert!(t.get::<f64>(D, 0.0).unwrap().is_sign_negative());
}

#[test]
fn the_generated_verifier_has_the_same_budget() {
    // `wire::verify` (what generated `decode` runs) uses the same options; its
    // apparent-size bound only caps its work, above the decode budget that the
    // budgeted read after it applies (the one size limit of every runtime).
    let o = wire::verifier_options(1000);
    assert_eq!(
        o.max_apparent_size,
        1000 * wire::MAX_EXPANSION * wire::VERIFIER_SLACK
    );
    assert_eq!(
        (o.max_depth, o.max_tables),
        (wire::MAX_DEPTH, wire::MAX_TABLES)
    );
}
