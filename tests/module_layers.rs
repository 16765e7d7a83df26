//! Inside each crate the modules are layered: a module's imports point down, never
//! in a circle (see `docs/architecture.md`). This test reads every crate's source
//! (`crates/*`, the root crate and `xtask`, whose commands call each other too),
//! collects which module each file reaches (`crate::…`, `super::…`, `self::…`, in
//! `use` items and written inline in code, a child module named in a `use`, and
//! `crate::Name` through the root's `pub use`), and fails on any dependency cycle,
//! naming its edges and the paths that make them. A path through another module's
//! `pub use` (`crate::dictionary::DictValue`) reaches both that module and the one
//! defining the item: the re-export is that module's code (the crate root's facade
//! excepted, and a module's own parent, whose re-exports of siblings it may use).
//!
//! Only production code counts: `#[cfg(test)]` modules may reach anything.
//! A module's own submodules count as separate modules, so a parent that imports a
//! child while the child reaches back with `super::Item` is a cycle too.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

/// Cycles known and not yet broken: `(crate, modules, why)`. A cycle among these
/// modules only is tolerated; each entry must still hold a cycle (remove it once
/// it is broken). Add an entry only with the reason and the way out.
const KNOWN: &[(&str, &[&str], &str)] = &[];

type Graph = BTreeMap<String, BTreeMap<String, BTreeSet<String>>>;

#[test]
fn module_imports_form_no_cycle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut failures = Vec::new();
    let mut crates: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))
        .unwrap()
        .map(|e| e.unwrap().path().join("src"))
        .filter(|p| p.join("lib.rs").exists() || p.join("main.rs").exists())
        .collect();
    crates.push(root.join("src"));
    // xtask is a crate like the others (it was left out, and its
    // bindings, ffi, swift and swift_package modules called each other in a circle).
    crates.push(root.join("xtask/src"));
    crates.sort();
    for src in &crates {
        let name = src
            .parent()
            .unwrap()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let graph = module_graph(src);
        let sccs = cycles(&graph);
        let known: Vec<&[&str]> = KNOWN.iter().filter(|k| k.0 == name).map(|k| k.1).collect();
        for k in &known {
            assert!(
                sccs.iter()
                    .any(|c| c.iter().filter(|m| k.contains(&m.as_str())).count() > 1),
                "{name}: the known cycle among {k:?} is gone: remove it from KNOWN"
            );
        }
        for scc in sccs {
            if known
                .iter()
                .any(|k| scc.iter().all(|m| k.contains(&m.as_str())))
            {
                continue;
            }
            let mut msg = format!(
                "{name}: modules in a cycle: {} — make the imports point one way \
                 (move the small shared type or trait down, see docs/architecture.md)\n",
                scc.join(", ")
            );
            for from in &scc {
                for (to, why) in &graph[from] {
                    if scc.contains(to) {
                        let why: Vec<&str> = why.iter().map(String::as_str).take(3).collect();
                        msg += &format!("  {from} -> {to}  ({})\n", why.join(", "));
                    }
                }
            }
            failures.push(msg);
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

/// The module graph of one crate: module path (`""` is the root, `a::b`) → the
/// modules it reaches → the paths that reach them.
fn module_graph(src: &Path) -> Graph {
    let mut files = BTreeMap::new();
    collect_files(src, src, &mut files);
    // `#[cfg(test)] mod x;` makes file `x` test-only.
    let mut test_only = BTreeSet::new();
    for (m, text) in &files {
        let code = strip(text);
        for name in cfg_test_mods(&code) {
            test_only.insert(join(m, &name));
        }
    }
    files.retain(|m, _| {
        !test_only
            .iter()
            .any(|t| m == t || m.starts_with(&format!("{t}::")))
    });
    let modules: BTreeSet<String> = files.keys().cloned().collect();
    let codes: BTreeMap<String, String> = files
        .iter()
        .map(|(m, t)| (m.clone(), drop_test_blocks(&strip(t))))
        .collect();
    let reexports: HashMap<String, HashMap<String, Vec<String>>> = codes
        .iter()
        .map(|(m, code)| (m.clone(), reexports_of(code, m, &modules)))
        .collect();

    let mut graph = Graph::new();
    for (m, code) in &codes {
        let deps = graph.entry(m.clone()).or_default();
        for path in paths_in(code, m, &modules) {
            let segs: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
            let Some(abs) = absolute(&segs, m) else {
                continue;
            };
            // A path through a module's `pub use` (not the crate root's facade)
            // depends on that module too: its code is what the path names.
            let via = longest_module(&abs, &modules);
            let target = defining_module(abs, &modules, &reexports);
            if !via.is_empty() && via != *m && via != target && !m.starts_with(&format!("{via}::"))
            {
                deps.entry(via).or_default().insert(path.clone());
            }
            if target.is_empty() || target == *m {
                continue;
            }
            deps.entry(target).or_default().insert(path.clone());
        }
    }
    graph
}

fn collect_files(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            collect_files(root, &p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            let rel = p.strip_prefix(root).unwrap().with_extension("");
            let mut parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if parts.last().is_some_and(|l| l == "mod") {
                parts.pop();
            }
            if parts.len() == 1 && (parts[0] == "lib" || parts[0] == "main") {
                parts.clear();
            }
            if parts.first().is_some_and(|f| f == "bin") {
                continue;
            }
            out.insert(parts.join("::"), std::fs::read_to_string(&p).unwrap());
        }
    }
}

fn join(parent: &str, child: &str) -> String {
    if parent.is_empty() {
        child.to_owned()
    } else {
        format!("{parent}::{child}")
    }
}

/// The source without comments, string and char literals (so neither doc links
/// nor SQL text count as imports).
fn strip(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if c == b'r'
            && (b.get(i + 1) == Some(&b'"') || b.get(i + 1) == Some(&b'#'))
            && (i == 0 || !is_ident(b[i - 1]))
        {
            // Raw string r"…", r#"…"#.
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&b'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&b'"') {
                out.push('r');
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= b.len() {
                    break;
                }
                if b[j] == b'"' && (0..hashes).all(|h| b.get(j + 1 + h) == Some(&b'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j;
        } else if c == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == b'\'' {
            // A char literal ('x', '\n', '"') or a lifetime ('a).
            if b.get(i + 1) == Some(&b'\\') {
                let mut j = i + 2;
                while j < b.len() && b[j] != b'\'' {
                    j += 1;
                }
                i = j + 1;
                out.push_str("' '");
            } else if b.get(i + 2) == Some(&b'\'') {
                i += 3;
                out.push_str("' '");
            } else {
                out.push('\'');
                i += 1;
            }
        } else {
            let ch = s[i..].chars().next().unwrap();
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// Names of `#[cfg(test)] mod name;` declarations.
fn cfg_test_mods(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(p) = rest.find("#[cfg(test)]") {
        rest = &rest[p + "#[cfg(test)]".len()..];
        let t = rest.trim_start();
        let t = t.strip_prefix("pub(crate) ").unwrap_or(t);
        let t = t.strip_prefix("pub ").unwrap_or(t);
        if let Some(t) = t.strip_prefix("mod ") {
            let name: String = t
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if t[name.len()..].trim_start().starts_with(';') {
                out.push(name);
            }
        }
    }
    out
}

/// The code without the `#[cfg(test)]` items written inline (a `mod tests { … }`,
/// a function, an `impl`).
fn drop_test_blocks(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(p) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..p]);
        let after = &rest[p..];
        // The item ends at its `;` or at the `}` closing its first `{`.
        let mut depth = 0i32;
        let mut end = after.len();
        for (i, ch) in after.char_indices() {
            match ch {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = i + 1;
                        break;
                    }
                }
                ';' if depth == 0 => {
                    end = i + 1;
                    break;
                }
                _ => {}
            }
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// Every path the code names that may reach another module: the trees of `use`
/// items (expanded), and `crate::`/`super::`/`self::` paths anywhere.
fn paths_in(code: &str, me: &str, modules: &BTreeSet<String>) -> Vec<String> {
    let mut out = Vec::new();
    let b = code.as_bytes();
    // `use` trees.
    let mut i = 0;
    while let Some(p) = code[i..].find("use ") {
        let at = i + p;
        i = at + 4;
        if at > 0 && is_ident(b[at - 1]) {
            continue;
        }
        let Some(end) = code[i..].find(';') else {
            break;
        };
        let tree = normalize_tree(&code[i..i + end]);
        for path in expand(&tree) {
            let first = path.split("::").next().unwrap_or("");
            let path = path.trim_start_matches("::").to_owned();
            if matches!(first, "crate" | "super" | "self") {
                out.push(path);
            } else if modules.contains(&join(me, first)) {
                // A child module named relative to this one.
                out.push(format!("self::{path}"));
            }
        }
    }
    // Paths in expressions and types.
    for kw in ["crate::", "super::", "self::"] {
        let mut i = 0;
        while let Some(p) = code[i..].find(kw) {
            let at = i + p;
            i = at + kw.len();
            if at > 0 && (is_ident(b[at - 1]) || b[at - 1] == b':') {
                continue;
            }
            let mut j = at;
            while j < b.len() && (is_ident(b[j]) || b[j] == b':') {
                j += 1;
            }
            out.push(code[at..j].trim_end_matches(':').to_owned());
        }
    }
    out
}

/// `a::{b, c::{d, e}}` → `a::b`, `a::c::d`, `a::c::e` (the tree has no
/// whitespace and no `as` renames left).
fn expand(tree: &str) -> Vec<String> {
    let Some(open) = tree.find('{') else {
        return vec![tree.to_owned()];
    };
    let prefix = &tree[..open];
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let mut items = Vec::new();
    let mut depth = 0;
    let mut cur = String::new();
    for ch in inner.chars() {
        match ch {
            '{' => depth += 1,
            '}' => depth -= 1,
            _ => {}
        }
        if ch == ',' && depth == 0 {
            items.push(std::mem::take(&mut cur));
        } else {
            cur.push(ch);
        }
    }
    items.push(cur);
    let mut out = Vec::new();
    for it in items.iter().filter(|s| !s.is_empty()) {
        // `self` inside braces names the prefix itself.
        if it == "self" {
            out.push(prefix.trim_end_matches("::").to_owned());
            continue;
        }
        for e in expand(it) {
            out.push(format!("{prefix}{e}"));
        }
    }
    out
}

/// A `use` tree as written → the same without whitespace and `as` renames.
fn normalize_tree(tree: &str) -> String {
    let words: Vec<&str> = tree.split_whitespace().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < words.len() {
        if words[i] == "as" {
            // Drop `as Alias`; keep any `,` or `}` glued to the alias.
            let alias = words.get(i + 1).copied().unwrap_or("");
            out.push_str(alias.trim_start_matches(|c: char| is_ident(c as u8)));
            i += 2;
        } else {
            out.push_str(words[i]);
            i += 1;
        }
    }
    out
}

/// `segs` made absolute from module `me` (`None` for external crates).
fn absolute(segs: &[&str], me: &str) -> Option<Vec<String>> {
    let mut cur: Vec<String> = if me.is_empty() {
        Vec::new()
    } else {
        me.split("::").map(str::to_owned).collect()
    };
    let mut rest = segs;
    match rest.first() {
        Some(&"crate") => {
            cur.clear();
            rest = &rest[1..];
        }
        Some(&"super") | Some(&"self") => {
            while let Some(s) = rest.first() {
                match *s {
                    "super" => {
                        cur.pop();
                    }
                    "self" => {}
                    _ => break,
                }
                rest = &rest[1..];
            }
        }
        _ => return None,
    }
    cur.extend(rest.iter().map(|s| s.to_string()));
    Some(cur)
}

fn longest_module(abs: &[String], modules: &BTreeSet<String>) -> String {
    let mut best = String::new();
    for n in 1..=abs.len() {
        let m = abs[..n].join("::");
        if modules.contains(&m) {
            best = m;
        }
    }
    best
}

/// The module that defines what `abs` names: the longest module prefix, then
/// through that module's `pub use` of the next segment, as far as they lead.
fn defining_module(
    mut abs: Vec<String>,
    modules: &BTreeSet<String>,
    reexports: &HashMap<String, HashMap<String, Vec<String>>>,
) -> String {
    let mut m = longest_module(&abs, modules);
    for _ in 0..8 {
        let depth = if m.is_empty() {
            0
        } else {
            m.split("::").count()
        };
        let Some(next) = abs.get(depth) else {
            break;
        };
        let Some(to) = reexports.get(&m).and_then(|r| r.get(next)) else {
            break;
        };
        let mut followed = to.clone();
        followed.extend(abs[depth + 1..].iter().cloned());
        abs = followed;
        let t = longest_module(&abs, modules);
        if t == m {
            break;
        }
        m = t;
    }
    m
}

/// `Name` → the absolute path a `pub use …::Name` (any `pub(…)`) of module `me`
/// points to.
fn reexports_of(code: &str, me: &str, modules: &BTreeSet<String>) -> HashMap<String, Vec<String>> {
    let mut out = HashMap::new();
    let mut i = 0;
    while let Some(p) = code[i..].find("use ") {
        let at = i + p;
        i = at + 4;
        let before = code[..at].trim_end();
        let visibility = match before.strip_suffix(')') {
            Some(b) => b.rfind('(').map_or("", |open| b[..open].trim_end()),
            None => before,
        };
        if !visibility.ends_with("pub") || at > 0 && is_ident(code.as_bytes()[at - 1]) {
            continue;
        }
        let Some(end) = code[i..].find(';') else {
            break;
        };
        let tree = normalize_tree(&code[i..i + end]);
        for path in expand(&tree) {
            let first = path.split("::").next().unwrap_or("");
            let path = if matches!(first, "crate" | "super" | "self") {
                path
            } else if modules.contains(&join(me, first)) {
                format!("self::{path}")
            } else {
                continue;
            };
            let segs: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
            if let (Some(abs), Some(name)) = (absolute(&segs, me), segs.last()) {
                if *name != "*" {
                    out.insert(name.to_string(), abs);
                }
            }
        }
    }
    out
}

/// The strongly connected components with more than one module (Tarjan).
fn cycles(g: &Graph) -> Vec<Vec<String>> {
    struct St<'a> {
        g: &'a Graph,
        index: HashMap<&'a str, usize>,
        low: HashMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        next: usize,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut St<'a>, v: &'a str) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on.insert(v);
        if let Some(deps) = s.g.get(v) {
            for w in deps.keys() {
                let w = w.as_str();
                if !s.index.contains_key(w) {
                    visit(s, w);
                    let lw = s.low[w];
                    let lv = s.low.get_mut(v).unwrap();
                    *lv = (*lv).min(lw);
                } else if s.on.contains(w) {
                    let iw = s.index[w];
                    let lv = s.low.get_mut(v).unwrap();
                    *lv = (*lv).min(iw);
                }
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            loop {
                let w = s.stack.pop().unwrap();
                s.on.remove(w);
                comp.push(w.to_owned());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                s.out.push(comp);
            }
        }
    }
    let mut s = St {
        g,
        index: HashMap::new(),
        low: HashMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in g.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.out
}

/// The checker itself, on a small crate: it sees `crate::`, `super::` and
/// re-exported paths, and ignores comments, strings and test-only code.
#[test]
fn the_checker_finds_a_cycle_and_only_real_edges() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    let files = [
        (
            "lib.rs",
            "mod a;\nmod b;\nmod c;\nmod d;\nmod f;\n#[cfg(test)]\nmod t;\npub use c::Thing;\n",
        ),
        (
            "a.rs",
            "use crate::b::B; // crate::d::D only in a comment\n\
             const S: &str = \"crate::d::D\";\npub struct A(B);\n\
             fn go() {\n    crate::d::start(&S, 1)\n        .unwrap();\n}\n\
             fn via(_: crate::f::D) {}\n",
        ),
        (
            "b.rs",
            "pub struct B(crate::Thing);\nfn f() -> super::a::A { todo!() }\n",
        ),
        (
            "c.rs",
            "pub struct Thing;\n#[cfg(test)]\nmod tests {\n    use crate::a::A;\n}\n",
        ),
        ("d.rs", "pub struct D;\npub fn start(_: &str, _: i32) {}\n"),
        ("t.rs", "use crate::d::D;\n"),
        ("f.rs", "pub use crate::d::D;\n"),
    ];
    for (name, text) in files {
        std::fs::write(src.join(name), text).unwrap();
    }
    let g = module_graph(src);
    let edges: Vec<(String, String)> = g
        .iter()
        .flat_map(|(from, to)| to.keys().map(move |t| (from.clone(), t.clone())))
        .collect();
    // `a -> d` comes from a path written inline in an expression, not a `use`;
    // `a -> f` from a path through `f`'s re-export of `d::D` (which also reaches d).
    let want: Vec<(String, String)> = [
        ("", "c"),
        ("a", "b"),
        ("a", "d"),
        ("a", "f"),
        ("b", "a"),
        ("b", "c"),
        ("f", "d"),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    assert_eq!(edges, want);
    assert_eq!(cycles(&g), vec![vec!["a".to_string(), "b".to_string()]]);
}

/// The checker reads xtask too, and sees its paths written inline
/// (`crate::ffi::test()` in an expression): before, xtask was never read and its
/// `bindings -> ffi -> swift -> swift_package -> swift` calls formed a cycle.
#[test]
fn xtask_is_checked_and_its_modules_form_no_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("xtask/src");
    let g = module_graph(&src);
    assert!(
        g.contains_key("swift_package") && g.contains_key("ffi"),
        "{g:?}"
    );
    // An inline path in an expression is an edge (swift.rs calls
    // `crate::swift_package::assemble(…)` without a `use`).
    assert!(
        g["swift"]
            .get("swift_package")
            .is_some_and(|why| why.iter().any(|p| p == "crate::swift_package::assemble")),
        "{:?}",
        g["swift"]
    );
    assert_eq!(cycles(&g), Vec::<Vec<String>>::new());
}

/// Crates whose code names the module that defines a thing, never the crate root
/// (`crate::error::Error`, not `crate::Error`): the root's `pub use` list is the
/// public face, and code that reaches an item through it hides where the item
/// lives. `lib.rs` itself, and doc links, may name the root.
const NAMES_THE_DEFINING_MODULE: &[&str] = &["keel-query", "keel-storage"];

/// Crates whose files write every import in their `use` block, so that a file's
/// first lines say what it depends on: no `crate::…` path inside a function body,
/// a type or an expression.
const IMPORTS_AT_THE_TOP: &[&str] = &["keel-query", "keel-storage"];

fn crate_files(name: &str) -> BTreeMap<String, String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("crates")
        .join(name)
        .join("src");
    let mut files = BTreeMap::new();
    collect_files(&src, &src, &mut files);
    files
}

/// `crate::Name` paths (a capitalised first segment, or one inside a
/// `crate::{…}` group) in the code of one file, as `line: text`.
fn crate_root_names(text: &str) -> Vec<String> {
    let code = strip(text);
    let mut out = Vec::new();
    for (n, line) in code.lines().enumerate() {
        let mut rest = line;
        while let Some(p) = rest.find("crate::") {
            let before = &rest[..p];
            let after = &rest[p + "crate::".len()..];
            rest = after;
            if before.ends_with(|c: char| c == '_' || c.is_alphanumeric() || c == ':') {
                continue;
            }
            let root_name = after.starts_with(|c: char| c.is_ascii_uppercase())
                || (after.starts_with('{')
                    && after[1..]
                        .split([',', '}'])
                        .any(|s| s.trim().starts_with(|c: char| c.is_ascii_uppercase())));
            if root_name {
                out.push(format!("{}: {}", n + 1, line.trim()));
            }
        }
    }
    out
}

/// `crate::…` paths outside the file's `use` items (test blocks aside), as
/// `line: text`.
fn inline_crate_paths(text: &str) -> Vec<String> {
    let code = drop_test_blocks(&strip(text));
    let b = code.as_bytes();
    let mut in_use = vec![false; b.len()];
    let mut i = 0;
    while i < b.len() {
        let starts_use = b[i..].starts_with(b"use ") && (i == 0 || !is_ident(b[i - 1]));
        if starts_use {
            let end = b[i..]
                .iter()
                .position(|&c| c == b';')
                .map_or(b.len(), |e| i + e + 1);
            in_use[i..end].iter_mut().for_each(|x| *x = true);
            i = end;
            continue;
        }
        i += 1;
    }
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(p) = find_bytes(&b[from..], b"crate::") {
        let at = from + p;
        from = at + 1;
        if in_use[at] || (at > 0 && (is_ident(b[at - 1]) || b[at - 1] == b':')) {
            continue;
        }
        let line = b[..at].iter().filter(|&&c| c == b'\n').count();
        out.push(format!(
            "{}: {}",
            line + 1,
            code.lines().nth(line).unwrap_or("").trim()
        ));
    }
    out
}

fn find_bytes(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[test]
fn code_names_the_defining_module_never_the_crate_root() {
    let mut failures = Vec::new();
    for name in NAMES_THE_DEFINING_MODULE {
        for (m, text) in crate_files(name) {
            if m.is_empty() {
                continue;
            }
            for hit in crate_root_names(&text) {
                failures.push(format!("{name} {m} line {hit}"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "these lines reach an item through the crate root; name the module that \
         defines it (`crate::error::Error`, not `crate::Error`):\n{}",
        failures.join("\n")
    );
}

#[test]
fn imports_are_written_at_the_top_of_each_file() {
    let mut failures = Vec::new();
    for name in IMPORTS_AT_THE_TOP {
        for (m, text) in crate_files(name) {
            for hit in inline_crate_paths(&text) {
                failures.push(format!("{name} {m} line {hit}"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "these lines write a crate path inside the code; import it in the file's \
         `use` block instead:\n{}",
        failures.join("\n")
    );
}

/// The bands of one crate, bottom to top, from the table under `heading` in
/// `docs/architecture.md`: the first cell of each row names a folder (`base/`)
/// or a file (`engine.rs`) at the crate's root.
fn bands_from_architecture(heading: &str) -> Vec<String> {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/architecture.md"))
            .unwrap();
    let at = doc
        .find(heading)
        .unwrap_or_else(|| panic!("docs/architecture.md has no heading {heading:?}"));
    let mut bands = Vec::new();
    for line in doc[at..].lines().skip(1) {
        let line = line.trim();
        if line.starts_with('#') {
            break;
        }
        let Some(row) = line.strip_prefix('|') else {
            continue;
        };
        let cell = row.split('|').next().unwrap_or("").trim();
        let Some(name) = cell.strip_prefix('`').and_then(|c| c.strip_suffix('`')) else {
            continue;
        };
        let name = name.trim_end_matches('/').trim_end_matches(".rs");
        bands.push(name.to_string());
    }
    bands
}

/// Every edge of `g` that runs from a lower band up to a higher one, and every
/// module in no band.
fn band_violations(g: &Graph, bands: &[String]) -> Vec<String> {
    let band_of = |m: &str| {
        let top = m.split("::").next().unwrap_or("");
        bands.iter().position(|b| b == top)
    };
    let mut out = Vec::new();
    for (from, deps) in g {
        if from.is_empty() {
            continue;
        }
        let Some(low) = band_of(from) else {
            out.push(format!("{from} is in no band"));
            continue;
        };
        for (to, why) in deps {
            if to.is_empty() {
                continue;
            }
            if let Some(high) = band_of(to) {
                if high > low {
                    let why: Vec<&str> = why.iter().map(String::as_str).take(3).collect();
                    out.push(format!(
                        "{from} ({}) -> {to} ({})  ({})",
                        bands[low],
                        bands[high],
                        why.join(", ")
                    ));
                }
            }
        }
    }
    out
}

/// keel-query is built in bands (folders), with the engine as the waist: a band
/// imports only from itself and the bands below it, in the order
/// `docs/architecture.md` lists them.
#[test]
fn keel_query_bands_import_only_downward() {
    let bands = bands_from_architecture("### keel-query's bands");
    assert!(
        bands.len() >= 10 && bands.contains(&"engine".to_string()),
        "the band table in docs/architecture.md reads as {bands:?}"
    );
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/keel-query/src");
    let g = module_graph(&src);
    let bad = band_violations(&g, &bands);
    assert!(
        bad.is_empty(),
        "imports that run up the bands (bottom to top: {}):\n{}",
        bands.join(" < "),
        bad.join("\n")
    );
    // At most a handful of files at the crate's root: everything else sits in a
    // band folder.
    let root_files: Vec<String> = std::fs::read_dir(&src)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert!(root_files.len() <= 6, "{root_files:?}");
}

/// The band and naming checkers themselves, on a small crate.
#[test]
fn the_band_and_naming_checkers_see_what_they_refuse() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    std::fs::create_dir(src.join("low")).unwrap();
    std::fs::create_dir(src.join("high")).unwrap();
    let files = [
        ("lib.rs", "mod low;\nmod high;\npub use low::a::A;\n"),
        ("low/mod.rs", "pub mod a;\n"),
        (
            "low/a.rs",
            "pub struct A;\nfn up() { crate::high::h::go() }\n",
        ),
        ("high/mod.rs", "pub mod h;\n"),
        (
            "high/h.rs",
            "use crate::low::a::A;\npub fn go() { let _ = A; }\n",
        ),
    ];
    for (name, text) in files {
        std::fs::write(src.join(name), text).unwrap();
    }
    let g = module_graph(src);
    let bands = vec!["low".to_string(), "high".to_string()];
    let bad = band_violations(&g, &bands);
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert!(
        bad[0].starts_with("low::a (low) -> high::h (high)"),
        "{bad:?}"
    );
    assert_eq!(
        crate_root_names("use crate::Error;\n/// [`x`](crate::Doc)\nfn f(_: crate::low::A, _: crate::{X, y::Z}) {}\n"),
        vec![
            "1: use crate::Error;".to_string(),
            "3: fn f(_: crate::low::A, _: crate::{X, y::Z}) {}".to_string()
        ]
    );
    assert_eq!(
        inline_crate_paths(
            "use crate::a::{\n    B,\n};\nfn f() { crate::a::g() }\n#[cfg(test)]\nmod tests {\n    fn t() { crate::a::g() }\n}\n"
        ),
        vec!["4: fn f() { crate::a::g() }".to_string()]
    );
}
