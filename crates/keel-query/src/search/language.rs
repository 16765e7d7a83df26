//! Full-text search: the query language, its translation to an FTS5 `MATCH`, its
//! evaluation in memory (for filters keel evaluates itself and for
//! subscriptions), and [`highlight`] / [`snippet`], which answer with byte
//! ranges into the caller's text rather than markup.
//!
//! A collection with `(searchable)` fields has one FTS5 table beside its own,
//! named `<collection>$fts`, with one column per searchable field (`f<id>`).
//! keel writes each row's token stream into it (see keel's tokenizer, `search/tokenizer.rs`) in the
//! same statement sequence as the row, never through triggers (`layout/fts.rs` keeps it;
//! `docs/search.md` states the guarantees).
//!
//! # The query language
//!
//! FTS5's, over keel's tokens:
//!
//! * `rust async` — both words (implicit `AND`); `rust AND async` is the same;
//! * `rust OR go`, `rust NOT go` (binary, as in FTS5), parentheses;
//! * `"async runtime"` — a phrase; `asy*` — a prefix;
//! * `NEAR(rust async, 5)` — all phrases within 5 tokens (default 10).
//!
//! Operators are upper case; lower-case `and` is a word. Every word goes through
//! the same tokenizer as the text, so `Crème` finds `creme`, `東京` finds `東京都`
//! and `京` finds `東京`. Malformed query text is an [`Error::InvalidSearch`]
//! naming the byte offset, never an SQL error.

use std::ops::Range;

use keel_schema::{FieldType, Table};

use crate::base::error::{Error, Result};
use crate::search::tokenizer::{self, Kind, ELEMENT_BREAK};

/// The tokenizer version: part of each index's signature, so a build that
/// tokenizes differently rebuilds the index at open.
pub(crate) const TOKENIZER_VERSION: u32 = 1;

/// One searchable field: its FTS5 column.
#[derive(Debug, Clone)]
pub(crate) struct SearchField {
    /// The field's id (vtable slot) in the collection's table.
    pub(crate) id: u16,
    /// The FTS5 column (`f<id>`).
    pub(crate) column: String,
    /// bm25 weight.
    pub(crate) weight: f64,
    /// A `[string]` field.
    pub(crate) list: bool,
}

/// A collection's FTS5 table and the SQL keel maintains it with.
#[derive(Debug, Clone)]
pub(crate) struct SearchSql {
    /// The table's name (`blog.Note$fts`).
    pub(crate) name: String,
    /// Its name as an SQL identifier.
    pub(crate) ident: String,
    /// The searchable fields, in column order.
    pub(crate) fields: Vec<SearchField>,
    /// `CREATE VIRTUAL TABLE …`.
    pub(crate) create: String,
    /// `INSERT OR REPLACE INTO … (rowid, f…) VALUES (?1, ?2, …)`.
    pub(crate) upsert: String,
    /// `DELETE FROM … WHERE rowid = ?1`.
    pub(crate) delete: String,
    /// What the stored table must have been built with (columns, tokenizer): a
    /// change rebuilds it at open. Weights are not part of it (applied per query).
    pub(crate) sig: String,
}

/// SQL identifier quoting (as `layout::ident`; repeated here so this module stays
/// below the layout).
fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

impl SearchSql {
    /// The FTS5 table of collection `collection` whose table is `table`, if it has
    /// searchable fields.
    pub(crate) fn of(collection: &str, table: &Table) -> Option<SearchSql> {
        let fields: Vec<SearchField> = table
            .fields
            .iter()
            .filter_map(|f| {
                let w = f.searchable?;
                Some(SearchField {
                    id: f.id,
                    column: format!("f{}", f.id),
                    weight: w,
                    list: matches!(&f.ty, FieldType::Vector(_)),
                })
            })
            .collect();
        if fields.is_empty() {
            return None;
        }
        let name = format!("{collection}$fts");
        let ident = quote(&name);
        let cols: Vec<String> = fields.iter().map(|f| f.column.clone()).collect();
        let create = format!(
            "CREATE VIRTUAL TABLE {ident} USING fts5({}, tokenize = 'ascii')",
            cols.join(", ")
        );
        let qs: Vec<String> = (0..=cols.len()).map(|i| format!("?{}", i + 1)).collect();
        Some(SearchSql {
            upsert: format!(
                "INSERT OR REPLACE INTO {ident}(rowid, {}) VALUES ({})",
                cols.join(", "),
                qs.join(", ")
            ),
            delete: format!("DELETE FROM {ident} WHERE rowid = ?1"),
            sig: format!("tokenizer {TOKENIZER_VERSION}; columns {}", cols.join(",")),
            create,
            name,
            ident,
            fields,
        })
    }

    /// The field with id `id`, if searchable.
    pub(crate) fn field(&self, id: u16) -> Option<&SearchField> {
        self.fields.iter().find(|f| f.id == id)
    }

    /// `bm25(<table>, w1, w2, …)`: relevance with the field weights (lower is
    /// better, as FTS5's rank).
    pub(crate) fn bm25(&self) -> String {
        let w: Vec<String> = self
            .fields
            .iter()
            .map(|f| format!("{:?}", f.weight))
            .collect();
        format!("bm25({}, {})", self.ident, w.join(", "))
    }

    /// The token stream of each searchable field of the object in `bytes` (the
    /// whole buffer, key string included), in column order. A field that is
    /// absent, or bytes that do not open, give an empty stream.
    pub(crate) fn streams(&self, bytes: &[u8]) -> Vec<String> {
        let root = keel_schema::wire::TableRef::root(bytes).ok();
        self.fields
            .iter()
            .map(|f| {
                let mut out = String::new();
                if let Some(t) = root {
                    for_each_text(t, f, &mut |s, first| {
                        if !first && !out.is_empty() {
                            out.push(' ');
                            out.push_str(ELEMENT_BREAK);
                        }
                        tokenizer::stream_into(s, &mut out);
                    });
                }
                out
            })
            .collect()
    }
}

/// Calls `f` with each text of field `field` of the root table `t` (one for a
/// string, each element for a `[string]`; `first` for the first one). Damaged
/// fields are skipped: the search index never fails a write the verifier passed.
fn for_each_text<'a>(
    t: keel_schema::wire::TableRef<'a>,
    field: &SearchField,
    f: &mut dyn FnMut(&'a str, bool),
) {
    if field.list {
        if let Ok(Some(v)) = t.vector(field.id, 4) {
            for i in 0..v.len() {
                if let Ok(s) = v.str(i) {
                    f(s, i == 0);
                }
            }
        }
    } else if let Ok(Some(s)) = t.str(field.id) {
        f(s, true);
    }
}

/// The texts of the searchable fields `ids` (all of `search`'s when `None`) of
/// the object in `bytes`, tokenized: one token list per field (a `[string]`
/// field's elements separated by a break token that matches nothing).
pub(crate) fn token_columns(
    search: &SearchSql,
    ids: Option<&[u16]>,
    bytes: &[u8],
) -> Vec<Vec<String>> {
    let root = keel_schema::wire::TableRef::root(bytes).ok();
    search
        .fields
        .iter()
        .filter(|f| ids.is_none_or(|ids| ids.contains(&f.id)))
        .map(|f| {
            let mut toks = Vec::new();
            if let Some(t) = root {
                for_each_text(t, f, &mut |s, first| {
                    if !first && !toks.is_empty() {
                        toks.push(ELEMENT_BREAK.to_owned());
                    }
                    tokenizer::tokens(s, &mut |tk| toks.push(tk.text));
                });
            }
            toks
        })
        .collect()
}

/// The id of the searchable field `path` names, or a typed error: the path must
/// be one `(searchable)` field of the collection's own table.
pub(crate) fn searched_field(
    search: &SearchSql,
    collection: &str,
    path: &keel_schema::FieldPath,
) -> Result<u16> {
    match path.steps() {
        [keel_schema::PathStep::Field { id, .. }] if search.field(*id).is_some() => Ok(*id),
        _ => Err(Error::TypeMismatch {
            op: "compile filter",
            collection: collection.to_owned(),
            message: format!(
                "{path} is not a (searchable) field of the collection: full-text search reads only those"
            ),
        }),
    }
}

// ---- the query language ----

/// One query token: indexed text, matched whole or as a prefix.
#[derive(Debug, Clone, PartialEq)]
struct QTok {
    text: String,
    prefix: bool,
}

impl QTok {
    fn matches(&self, doc: &str) -> bool {
        if self.prefix {
            doc.starts_with(self.text.as_str())
        } else {
            doc == self.text
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Q {
    Phrase(Vec<QTok>),
    Near(Vec<Vec<QTok>>, u32),
    And(Box<Q>, Box<Q>),
    Or(Box<Q>, Box<Q>),
    Not(Box<Q>, Box<Q>),
}

/// A parsed search query (see the module docs for the language).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SearchQuery {
    root: Q,
}

#[derive(Debug, Clone, PartialEq)]
enum Lx {
    Text(String, bool),
    LParen,
    RParen,
    Star,
    Comma,
    And,
    Or,
    Not,
    Near,
}

fn invalid(query: &str, offset: usize, message: impl Into<String>) -> Error {
    Error::InvalidSearch {
        query: query.to_owned(),
        offset,
        message: message.into(),
    }
}

fn lex(q: &str) -> Result<Vec<(Lx, usize)>> {
    let mut out = Vec::new();
    let mut it = q.char_indices().peekable();
    while let Some((i, c)) = it.next() {
        match c {
            c if c.is_whitespace() => {}
            '(' => out.push((Lx::LParen, i)),
            ')' => out.push((Lx::RParen, i)),
            '*' => out.push((Lx::Star, i)),
            ',' => out.push((Lx::Comma, i)),
            '"' => {
                let mut s = String::new();
                let mut closed = false;
                while let Some((_, d)) = it.next() {
                    if d == '"' {
                        if it.peek().is_some_and(|(_, e)| *e == '"') {
                            it.next();
                            s.push('"');
                            continue;
                        }
                        closed = true;
                        break;
                    }
                    s.push(d);
                }
                if !closed {
                    return Err(invalid(q, i, "a phrase opened with \" is not closed"));
                }
                out.push((Lx::Text(s, true), i));
            }
            _ => {
                let mut s = String::from(c);
                while let Some(&(_, d)) = it.peek() {
                    if d.is_whitespace() || matches!(d, '(' | ')' | '*' | ',' | '"') {
                        break;
                    }
                    s.push(d);
                    it.next();
                }
                let t = match s.as_str() {
                    "AND" => Lx::And,
                    "OR" => Lx::Or,
                    "NOT" => Lx::Not,
                    "NEAR" if it.peek().is_some_and(|(_, d)| *d == '(') => Lx::Near,
                    _ => Lx::Text(s, false),
                };
                out.push((t, i));
            }
        }
    }
    Ok(out)
}

/// The query tokens of one phrase text (see the module docs of `tokenize`: a CJK
/// run is matched by its bigrams, and its last character only where the phrase
/// goes on after it, since only then must the run end there).
fn phrase_tokens(text: &str, star: bool) -> Vec<QTok> {
    let toks = tokenizer::all(text);
    let mut out: Vec<QTok> = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        let t = &toks[i];
        if t.kind != Kind::Cjk {
            out.push(QTok {
                text: t.text.clone(),
                prefix: false,
            });
            i += 1;
            continue;
        }
        // One CJK run: tokens up to and including the one marked `run_end`.
        let mut j = i;
        while !toks[j].run_end {
            j += 1;
        }
        let chars = j - i + 1;
        let last_in_phrase = j + 1 == toks.len();
        for t in &toks[i..j] {
            out.push(QTok {
                text: t.text.clone(),
                prefix: false,
            });
        }
        if !last_in_phrase {
            out.push(QTok {
                text: toks[j].text.clone(),
                prefix: false,
            });
        } else if chars == 1 {
            // A one-character word: the start of any token of a run.
            out.push(QTok {
                text: toks[j].text.clone(),
                prefix: true,
            });
        }
        i = j + 1;
    }
    if star {
        if let Some(l) = out.last_mut() {
            l.prefix = true;
        }
    }
    out
}

struct Parser<'q> {
    q: &'q str,
    toks: Vec<(Lx, usize)>,
    at: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Lx> {
        self.toks.get(self.at).map(|(t, _)| t)
    }
    fn pos(&self) -> usize {
        self.toks.get(self.at).map_or(self.q.len(), |(_, p)| *p)
    }
    fn err(&self, m: &str) -> Error {
        invalid(self.q, self.pos(), m)
    }

    fn or(&mut self) -> Result<Option<Q>> {
        let mut left = self.and()?;
        while self.peek() == Some(&Lx::Or) {
            self.at += 1;
            if !self.starts_operand() {
                return Err(self.err("OR needs a word, phrase or group after it"));
            }
            let right = self.and()?;
            left = match (left, right) {
                (Some(a), Some(b)) => Some(Q::Or(Box::new(a), Box::new(b))),
                (a, b) => a.or(b),
            };
        }
        Ok(left)
    }

    fn starts_operand(&self) -> bool {
        matches!(self.peek(), Some(Lx::Text(..) | Lx::LParen | Lx::Near))
    }

    fn and(&mut self) -> Result<Option<Q>> {
        if !self.starts_operand() {
            return Err(self.err(match self.peek() {
                None => "expected a word, phrase or group",
                Some(Lx::And | Lx::Or | Lx::Not) => {
                    "an operator needs a word, phrase or group on its left"
                }
                Some(Lx::Star) => "* must follow a word or phrase directly",
                Some(Lx::RParen) => "unbalanced \")\"",
                _ => "expected a word, phrase or group",
            }));
        }
        let mut left = self.not()?;
        loop {
            if self.peek() == Some(&Lx::And) {
                self.at += 1;
                if !self.starts_operand() {
                    return Err(self.err("AND needs a word, phrase or group after it"));
                }
            } else if !self.starts_operand() {
                break;
            }
            let right = self.not()?;
            left = match (left, right) {
                (Some(a), Some(b)) => Some(Q::And(Box::new(a), Box::new(b))),
                (a, b) => a.or(b),
            };
        }
        Ok(left)
    }

    fn not(&mut self) -> Result<Option<Q>> {
        let mut left = self.primary()?;
        while self.peek() == Some(&Lx::Not) {
            let at = self.pos();
            self.at += 1;
            if !self.starts_operand() {
                return Err(self.err("NOT needs a word, phrase or group after it"));
            }
            let right = self.primary()?;
            left = match (left, right) {
                (Some(a), Some(b)) => Some(Q::Not(Box::new(a), Box::new(b))),
                (Some(a), None) => Some(a),
                (None, _) => {
                    return Err(invalid(
                        self.q,
                        at,
                        "NOT needs searchable words on its left (it means \"and not\")",
                    ))
                }
            };
        }
        Ok(left)
    }

    fn phrase(&mut self) -> Result<Vec<QTok>> {
        let Some((Lx::Text(s, _), _)) = self.toks.get(self.at).cloned() else {
            return Err(self.err("expected a word or phrase"));
        };
        self.at += 1;
        let star = self.peek() == Some(&Lx::Star);
        if star {
            self.at += 1;
        }
        Ok(phrase_tokens(&s, star))
    }

    fn primary(&mut self) -> Result<Option<Q>> {
        match self.peek() {
            Some(Lx::LParen) => {
                let open = self.pos();
                self.at += 1;
                if self.peek() == Some(&Lx::RParen) {
                    return Err(self.err("empty parentheses"));
                }
                let inner = self.or()?;
                if self.peek() != Some(&Lx::RParen) {
                    return Err(invalid(self.q, open, "\"(\" is not closed"));
                }
                self.at += 1;
                Ok(inner)
            }
            Some(Lx::Near) => {
                self.at += 2; // NEAR (
                let mut phrases = Vec::new();
                while matches!(self.peek(), Some(Lx::Text(..))) {
                    let p = self.phrase()?;
                    if !p.is_empty() {
                        phrases.push(p);
                    }
                }
                let mut dist = 10u32;
                if self.peek() == Some(&Lx::Comma) {
                    self.at += 1;
                    dist = match self.toks.get(self.at) {
                        Some((Lx::Text(n, false), _)) => n
                            .parse()
                            .map_err(|_| self.err("NEAR's distance must be a whole number"))?,
                        _ => return Err(self.err("NEAR's distance must be a whole number")),
                    };
                    self.at += 1;
                }
                if self.peek() != Some(&Lx::RParen) {
                    return Err(self.err("NEAR(…) expects phrases, an optional \", N\" and \")\""));
                }
                self.at += 1;
                Ok(match phrases.len() {
                    0 => None,
                    1 => Some(Q::Phrase(phrases.remove(0))),
                    _ => Some(Q::Near(phrases, dist)),
                })
            }
            Some(Lx::Text(..)) => {
                let p = self.phrase()?;
                Ok((!p.is_empty()).then_some(Q::Phrase(p)))
            }
            _ => Err(self.err("expected a word, phrase or group")),
        }
    }
}

impl SearchQuery {
    /// Parses `query`; malformed text, or text without one searchable word, is an
    /// [`Error::InvalidSearch`].
    pub(crate) fn parse(query: &str) -> Result<SearchQuery> {
        let toks = lex(query)?;
        let mut p = Parser {
            q: query,
            toks,
            at: 0,
        };
        if p.toks.is_empty() {
            return Err(invalid(query, 0, "the query is empty"));
        }
        let root = p.or()?;
        if p.at < p.toks.len() {
            return Err(p.err(match p.peek() {
                Some(Lx::RParen) => "unbalanced \")\"",
                Some(Lx::Star) => "* must follow a word or phrase directly",
                _ => "unexpected text",
            }));
        }
        match root {
            Some(root) => Ok(SearchQuery { root }),
            None => Err(invalid(
                query,
                0,
                "the query has no searchable word (only punctuation or symbols)",
            )),
        }
    }

    /// The FTS5 `MATCH` text, restricted to `columns` (all when empty).
    pub(crate) fn fts(&self, columns: &[&str]) -> String {
        let mut s = String::new();
        if !columns.is_empty() {
            s.push('{');
            s.push_str(&columns.join(" "));
            s.push_str("} : (");
        }
        fts_q(&self.root, &mut s);
        if !columns.is_empty() {
            s.push(')');
        }
        s
    }

    /// Whether an object whose searched fields hold `cols` (token lists, see
    /// [`token_columns`]) matches — what FTS5 answers for the same row.
    pub(crate) fn matches(&self, cols: &[Vec<String>]) -> bool {
        eval_q(&self.root, cols)
    }

    /// Every query token outside the right side of a NOT (what highlighting
    /// marks).
    fn positive(&self) -> Vec<&QTok> {
        fn walk<'a>(q: &'a Q, out: &mut Vec<&'a QTok>) {
            match q {
                Q::Phrase(p) => out.extend(p.iter()),
                Q::Near(ps, _) => out.extend(ps.iter().flatten()),
                Q::And(a, b) | Q::Or(a, b) => {
                    walk(a, out);
                    walk(b, out);
                }
                Q::Not(a, _) => walk(a, out),
            }
        }
        let mut v = Vec::new();
        walk(&self.root, &mut v);
        v
    }
}

fn fts_phrase(p: &[QTok], s: &mut String) {
    for (i, t) in p.iter().enumerate() {
        if i > 0 {
            s.push_str(" + ");
        }
        s.push('"');
        s.push_str(&t.text.replace('"', "\"\""));
        s.push('"');
        if t.prefix {
            s.push_str(" *");
        }
    }
}

fn fts_q(q: &Q, s: &mut String) {
    let bin = |a: &Q, op: &str, b: &Q, s: &mut String| {
        s.push('(');
        fts_q(a, s);
        s.push_str(") ");
        s.push_str(op);
        s.push_str(" (");
        fts_q(b, s);
        s.push(')');
    };
    match q {
        Q::Phrase(p) => fts_phrase(p, s),
        Q::Near(ps, d) => {
            s.push_str("NEAR(");
            for (i, p) in ps.iter().enumerate() {
                if i > 0 {
                    s.push(' ');
                }
                fts_phrase(p, s);
            }
            s.push_str(&format!(", {d})"));
        }
        Q::And(a, b) => bin(a, "AND", b, s),
        Q::Or(a, b) => bin(a, "OR", b, s),
        Q::Not(a, b) => bin(a, "NOT", b, s),
    }
}

/// Start positions of phrase `p` in `doc`.
fn phrase_at(p: &[QTok], doc: &[String]) -> Vec<usize> {
    if p.is_empty() || p.len() > doc.len() {
        return Vec::new();
    }
    (0..=doc.len() - p.len())
        .filter(|&s| p.iter().enumerate().all(|(i, t)| t.matches(&doc[s + i])))
        .collect()
}

fn eval_q(q: &Q, cols: &[Vec<String>]) -> bool {
    match q {
        Q::Phrase(p) => cols.iter().any(|d| !phrase_at(p, d).is_empty()),
        Q::Near(ps, n) => cols.iter().any(|d| near(ps, *n as usize, d)),
        Q::And(a, b) => eval_q(a, cols) && eval_q(b, cols),
        Q::Or(a, b) => eval_q(a, cols) || eval_q(b, cols),
        Q::Not(a, b) => eval_q(a, cols) && !eval_q(b, cols),
    }
}

/// FTS5's NEAR: some instance of each phrase such that, with `max` the largest
/// start, every phrase's instance ends no more than `n` tokens before `max`.
fn near(ps: &[Vec<QTok>], n: usize, doc: &[String]) -> bool {
    let at: Vec<Vec<usize>> = ps.iter().map(|p| phrase_at(p, doc)).collect();
    if at.iter().any(Vec::is_empty) {
        return false;
    }
    at.iter().flatten().any(|&max| {
        ps.iter()
            .zip(&at)
            .all(|(p, starts)| starts.iter().any(|&s| s <= max && s + p.len() + n >= max))
    })
}

// ---- highlighting ----

/// The byte ranges of `text` that `query` matches, in order and merged where
/// they touch or overlap: every token of `text` equal to (or, for a prefix,
/// starting with) a query token outside the right side of a NOT. Phrases and
/// NEAR are not required to hold at each marked place: any occurrence of their
/// words is marked, as a reader scanning for them expects.
///
/// ```
/// use keel_query::search::highlight;
/// let text = "Crème brûlée in 東京都";
/// let r = highlight(text, "creme 京都")?;
/// assert_eq!(r.iter().map(|r| &text[r.clone()]).collect::<Vec<_>>(), ["Crème", "京都"]);
/// # Ok::<(), keel_query::Error>(())
/// ```
pub fn highlight(text: &str, query: &str) -> Result<Vec<Range<usize>>> {
    let q = SearchQuery::parse(query)?;
    let want = q.positive();
    let mut out: Vec<Range<usize>> = Vec::new();
    tokenizer::tokens(text, &mut |t| {
        if !want.iter().any(|w| w.matches(&t.text)) {
            return;
        }
        // A prefix match of a one-character CJK query marks that character only.
        let mut r = t.range.clone();
        if t.kind == Kind::Cjk && !t.run_end {
            let one = want
                .iter()
                .filter(|w| w.matches(&t.text))
                .all(|w| w.prefix && w.text.chars().count() == 1);
            if one {
                let first = text[r.clone()].chars().next().map_or(0, char::len_utf8);
                r.end = r.start + first;
            }
        }
        match out.last_mut() {
            Some(l) if r.start <= l.end => l.end = l.end.max(r.end),
            _ => out.push(r),
        }
    });
    Ok(out)
}

/// A passage of a text around what a query matched: see [`snippet`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snippet {
    /// The passage's byte range in the text.
    pub range: Range<usize>,
    /// The matches inside it ([`highlight`]'s ranges), in the text's offsets.
    pub highlights: Vec<Range<usize>>,
}

/// The passage of at most `max_chars` characters of `text` with the first match
/// of `query` in it (a little context before it), and the matches inside it —
/// ranges, not markup, so the app styles them as it likes. Without a match, the
/// start of the text.
///
/// ```
/// use keel_query::search::snippet;
/// let text = "A long text about many things, and then: async Rust runtimes compared.";
/// let s = snippet(text, "async", 24)?;
/// assert!(text[s.range.clone()].contains("async"));
/// assert_eq!(&text[s.highlights[0].clone()], "async");
/// # Ok::<(), keel_query::Error>(())
/// ```
pub fn snippet(text: &str, query: &str, max_chars: usize) -> Result<Snippet> {
    let hl = highlight(text, query)?;
    let anchor = hl.first().map_or(0, |r| r.start);
    // About a fifth of the passage before the first match.
    let before = max_chars / 5;
    let start_char = text[..anchor].chars().count().saturating_sub(before);
    let mut start = text
        .char_indices()
        .nth(start_char)
        .map_or(text.len(), |(i, _)| i);
    // Start at a word boundary when one is near.
    if start > 0 {
        if let Some(sp) = text[start..anchor].find(char::is_whitespace) {
            start += sp;
            start += text[start..].chars().next().map_or(0, char::len_utf8);
        }
    }
    let end = text[start..]
        .char_indices()
        .nth(max_chars)
        .map_or(text.len(), |(i, _)| start + i);
    let highlights = hl
        .into_iter()
        .filter(|r| r.start >= start && r.end <= end)
        .collect();
    Ok(Snippet {
        range: start..end,
        highlights,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cols(texts: &[&str]) -> Vec<Vec<String>> {
        texts
            .iter()
            .map(|t| tokenizer::all(t).into_iter().map(|t| t.text).collect())
            .collect()
    }

    #[test]
    fn parses_the_fts5_subset_and_translates_it() {
        let q = SearchQuery::parse("rust async").unwrap();
        assert_eq!(q.fts(&[]), "(\"rust\") AND (\"async\")");
        let q = SearchQuery::parse("\"async runtime\" OR asy* NOT go").unwrap();
        assert_eq!(
            q.fts(&["f1"]),
            "{f1} : ((\"async\" + \"runtime\") OR ((\"asy\" *) NOT (\"go\")))"
        );
        let q = SearchQuery::parse("NEAR(rust async, 3)").unwrap();
        assert_eq!(q.fts(&[]), "NEAR(\"rust\" \"async\", 3)");
        let q = SearchQuery::parse("京").unwrap();
        assert_eq!(q.fts(&[]), "\"京\" *");
        let q = SearchQuery::parse("東京 tower").unwrap();
        assert_eq!(q.fts(&[]), "(\"東京\") AND (\"tower\")");
        let q = SearchQuery::parse("\"東京tower\"").unwrap();
        assert_eq!(q.fts(&[]), "\"東京\" + \"京\" + \"tower\"");
    }

    #[test]
    fn malformed_queries_are_typed_errors_with_offsets() {
        for (q, at) in [
            ("", 0),
            ("\"open", 0),
            ("(rust", 0),
            ("rust)", 4),
            ("AND rust", 0),
            ("rust OR", 7),
            ("NOT rust", 0),
            ("NEAR(a b, x)", 10),
            ("*", 0),
            ("!!!", 0),
        ] {
            match SearchQuery::parse(q) {
                Err(Error::InvalidSearch { offset, .. }) => assert_eq!(offset, at, "{q}"),
                other => panic!("{q}: {other:?}"),
            }
        }
    }

    #[test]
    fn evaluation_follows_fts5() {
        let doc = cols(&["Rust async runtimes", "東京都の天気"]);
        let m = |q: &str| SearchQuery::parse(q).unwrap().matches(&doc);
        assert!(m("rust async"));
        assert!(m("\"rust async\""));
        assert!(!m("\"async rust\""));
        assert!(m("run*"));
        assert!(!m("rust NOT async"));
        assert!(m("go OR rust"));
        assert!(m("京"));
        assert!(m("京都"));
        assert!(m("天気"));
        assert!(!m("大阪"));
        assert!(m("NEAR(rust runtimes, 1)"));
        assert!(!m("NEAR(rust runtimes, 0)"));
        // A phrase never spans two columns.
        assert!(!m("\"runtimes 東京\""));
    }

    #[test]
    fn highlight_returns_ranges_into_the_original() {
        let text = "Über die Straße";
        let r = highlight(text, "uber strasse").unwrap();
        let got: Vec<&str> = r.iter().map(|r| &text[r.clone()]).collect();
        assert_eq!(got, ["Über", "Straße"]);
        let text = "我爱北京天安门";
        let r = highlight(text, "北京").unwrap();
        assert_eq!(&text[r[0].clone()], "北京");
        let r = highlight(text, "天").unwrap();
        assert_eq!(&text[r[0].clone()], "天");
    }
}
