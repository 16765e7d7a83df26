//! The `.fbs` parser: text → syntax tree ([`ast`]), with positioned errors.
//!
//! keel accepts the part of the FlatBuffers schema language apps use (see
//! `docs/schema.md`): `include`, `namespace`, `attribute`, `enum` (with an underlying
//! integer type), `union`, `struct`, `table`, `root_type`, `file_identifier`,
//! `file_extension`, field defaults and `= null`, and metadata attributes. Parsing
//! never panics; every error is a [`ParseError`] carrying `file:line:col` and what
//! was expected, e.g. `post.fbs:3:17: expected a type, found ";"`.
//!
//! Most users never call this module directly: [`Schema::parse`](crate::model::Schema::parse)
//! and [`Schema::from_file`](crate::model::Schema::from_file) parse and resolve in one step.

use std::fmt;

/// A schema error at a position in a file: a syntax error, an unknown type, a
/// missing include, or a rule violation (duplicate id, bad default, …).
///
/// ```
/// let err = keel_schema::Schema::parse("table T { a: int }", "t.fbs").unwrap_err();
/// assert_eq!(err.to_string(), "t.fbs:1:18: expected \";\" after the field, found \"}\"");
/// assert_eq!((err.line, err.col), (1, 18));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// File name as given to the parser (or the include path).
    pub file: String,
    /// 1-based line; 0 when the error concerns the whole file (e.g. it cannot be read).
    pub line: u32,
    /// 1-based column, in characters.
    pub col: u32,
    /// What went wrong, phrased as "expected …, found …" where that applies.
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}: {}", self.file, self.message)
        } else {
            write!(
                f,
                "{}:{}:{}: {}",
                self.file, self.line, self.col, self.message
            )
        }
    }
}

impl std::error::Error for ParseError {}

/// A position in a source file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pos {
    /// 1-based line.
    pub line: u32,
    /// 1-based column (characters).
    pub col: u32,
}

/// The syntax tree of one `.fbs` file.
pub mod ast {
    use super::Pos;

    /// A literal or identifier in a default value or attribute.
    #[derive(Debug, Clone, PartialEq)]
    pub enum Literal {
        /// An integer as written (sign included).
        Int(String),
        /// A float as written.
        Float(String),
        /// A string literal (unescaped).
        Str(String),
        /// An identifier: `true`, `false`, `null`, `nan`, `inf` or an enum value name.
        Ident(String),
    }

    /// A type as written.
    #[derive(Debug, Clone, PartialEq)]
    pub enum TypeRef {
        /// A scalar, `string`, or a (possibly qualified) type name.
        Named(String, Pos),
        /// `[T]`.
        Vector(Box<TypeRef>, Pos),
        /// `[T:n]` (fixed-size array; rejected by the resolver).
        Array(Box<TypeRef>, u32, Pos),
    }

    /// `(name: value, …)` metadata.
    #[derive(Debug, Clone, PartialEq)]
    pub struct Attribute {
        /// Attribute name.
        pub name: String,
        /// Value, if given.
        pub value: Option<Literal>,
        /// Position of the name.
        pub pos: Pos,
    }

    /// A table or struct field.
    #[derive(Debug, Clone, PartialEq)]
    pub struct FieldDecl {
        /// Field name.
        pub name: String,
        /// Declared type.
        pub ty: TypeRef,
        /// `= value`, if given.
        pub default: Option<(Literal, Pos)>,
        /// Metadata.
        pub attributes: Vec<Attribute>,
        /// Doc comments.
        pub doc: Vec<String>,
        /// Position of the name.
        pub pos: Pos,
    }

    /// An enum value.
    #[derive(Debug, Clone, PartialEq)]
    pub struct EnumValDecl {
        /// Value name.
        pub name: String,
        /// `= n`, if given.
        pub value: Option<(String, Pos)>,
        /// Doc comments.
        pub doc: Vec<String>,
        /// Position.
        pub pos: Pos,
    }

    /// A union member: `Table` or `Alias: Table`.
    #[derive(Debug, Clone, PartialEq)]
    pub struct UnionMemberDecl {
        /// Alias (or the table name).
        pub name: String,
        /// Referenced table.
        pub ty: String,
        /// Position.
        pub pos: Pos,
    }

    /// What a declaration declares.
    #[derive(Debug, Clone, PartialEq)]
    pub enum DeclKind {
        /// `table` (`is_struct == false`) or `struct`.
        Object {
            /// `struct` rather than `table`.
            is_struct: bool,
            /// Fields.
            fields: Vec<FieldDecl>,
        },
        /// `enum Name : type { … }`.
        Enum {
            /// Underlying type name.
            underlying: String,
            /// Position of the underlying type.
            underlying_pos: Pos,
            /// Values.
            values: Vec<EnumValDecl>,
        },
        /// `union Name { … }`.
        Union {
            /// Members.
            members: Vec<UnionMemberDecl>,
        },
    }

    /// A type declaration.
    #[derive(Debug, Clone, PartialEq)]
    pub struct Decl {
        /// Declared name.
        pub name: String,
        /// Namespace in effect at the declaration.
        pub namespace: String,
        /// What it declares.
        pub kind: DeclKind,
        /// Metadata.
        pub attributes: Vec<Attribute>,
        /// Doc comments.
        pub doc: Vec<String>,
        /// Position of the name.
        pub pos: Pos,
    }

    /// One parsed file.
    #[derive(Debug, Clone, PartialEq, Default)]
    pub struct File {
        /// `include "x.fbs";` paths, with positions.
        pub includes: Vec<(String, Pos)>,
        /// Declarations in order.
        pub decls: Vec<Decl>,
        /// `root_type`, with its namespace context and position.
        pub root_type: Option<(String, String, Pos)>,
        /// `file_identifier`.
        pub file_identifier: Option<(String, Pos)>,
        /// `attribute "name";` declarations.
        pub declared_attributes: Vec<String>,
    }
}

use ast::*;

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Int(String),
    Float(String),
    Str(String),
    Punct(char),
    Eof,
}

impl fmt::Display for Tok {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Tok::Ident(s) => write!(f, "\"{s}\""),
            Tok::Int(s) | Tok::Float(s) => write!(f, "number {s}"),
            Tok::Str(s) => write!(f, "string {s:?}"),
            Tok::Punct(c) => write!(f, "\"{c}\""),
            Tok::Eof => f.write_str("end of file"),
        }
    }
}

struct Lexer<'a> {
    chars: std::iter::Peekable<std::str::Chars<'a>>,
    line: u32,
    col: u32,
    file: &'a str,
    doc: Vec<String>,
}

impl<'a> Lexer<'a> {
    fn bump(&mut self) -> Option<char> {
        let c = self.chars.next()?;
        if c == '\n' {
            self.line += 1;
            self.col = 1;
        } else {
            self.col += 1;
        }
        Some(c)
    }

    fn err(&self, pos: Pos, message: String) -> ParseError {
        ParseError {
            file: self.file.to_owned(),
            line: pos.line,
            col: pos.col,
            message,
        }
    }

    /// Next token, its position, and the doc comments directly before it.
    fn next(&mut self) -> Result<(Tok, Pos, Vec<String>), ParseError> {
        loop {
            let pos = Pos {
                line: self.line,
                col: self.col,
            };
            let Some(&c) = self.chars.peek() else {
                return Ok((Tok::Eof, pos, std::mem::take(&mut self.doc)));
            };
            if c.is_whitespace() {
                self.bump();
                continue;
            }
            if c == '/' {
                self.bump();
                match self.chars.peek() {
                    Some('/') => {
                        self.bump();
                        let mut text = String::new();
                        while let Some(&c) = self.chars.peek() {
                            if c == '\n' {
                                break;
                            }
                            text.push(c);
                            self.bump();
                        }
                        if let Some(doc) = text.strip_prefix('/') {
                            self.doc
                                .push(doc.strip_prefix(' ').unwrap_or(doc).to_owned());
                        } else {
                            self.doc.clear();
                        }
                        continue;
                    }
                    Some('*') => {
                        self.bump();
                        let mut prev = ' ';
                        loop {
                            match self.bump() {
                                None => {
                                    return Err(self.err(
                                        pos,
                                        "expected \"*/\" to close this comment, found end of file"
                                            .into(),
                                    ))
                                }
                                Some('/') if prev == '*' => break,
                                Some(c) => prev = c,
                            }
                        }
                        continue;
                    }
                    _ => {
                        return Err(
                            self.err(pos, "expected a declaration or comment, found \"/\"".into())
                        )
                    }
                }
            }
            let doc = std::mem::take(&mut self.doc);
            if c.is_ascii_alphabetic() || c == '_' {
                let mut s = String::new();
                while let Some(&c) = self.chars.peek() {
                    if c.is_ascii_alphanumeric() || c == '_' {
                        s.push(c);
                        self.bump();
                    } else {
                        break;
                    }
                }
                return Ok((Tok::Ident(s), pos, doc));
            }
            if c.is_ascii_digit() || c == '-' || c == '+' {
                let mut s = String::new();
                s.push(c);
                self.bump();
                let mut is_float = false;
                while let Some(&c) = self.chars.peek() {
                    if c.is_ascii_alphanumeric() || c == '.' || c == '_' {
                        if c == '.' {
                            is_float = true;
                        }
                        s.push(c);
                        self.bump();
                    } else if (c == '-' || c == '+') && s.ends_with(['e', 'E']) && !s.contains("0x")
                    {
                        s.push(c);
                        self.bump();
                    } else {
                        break;
                    }
                }
                if s == "-" || s == "+" {
                    // `-inf`, `-nan`: sign followed by an identifier.
                    if let Some(&c) = self.chars.peek() {
                        if c.is_ascii_alphabetic() {
                            while let Some(&c) = self.chars.peek() {
                                if c.is_ascii_alphanumeric() {
                                    s.push(c);
                                    self.bump();
                                } else {
                                    break;
                                }
                            }
                            return Ok((Tok::Float(s), pos, doc));
                        }
                    }
                    return Err(self.err(pos, format!("expected a number after \"{s}\"")));
                }
                let lower = s.to_ascii_lowercase();
                if !lower.contains("0x")
                    && (lower.contains('e') || lower.contains("inf") || lower.contains("nan"))
                {
                    is_float = true;
                }
                return Ok((if is_float { Tok::Float(s) } else { Tok::Int(s) }, pos, doc));
            }
            if c == '"' {
                self.bump();
                let mut s = String::new();
                loop {
                    match self.bump() {
                        None | Some('\n') => {
                            return Err(self.err(
                                pos,
                                "expected a closing '\"' for this string, found end of line".into(),
                            ))
                        }
                        Some('"') => break,
                        Some('\\') => match self.bump() {
                            Some('n') => s.push('\n'),
                            Some('t') => s.push('\t'),
                            Some(c @ ('"' | '\\' | '/')) => s.push(c),
                            other => {
                                return Err(self.err(
                                    pos,
                                    format!(
                                        "expected a string escape (\\n, \\t, \\\", \\\\), found {}",
                                        other.map_or("end of file".to_string(), |c| format!(
                                            "\\{c}"
                                        ))
                                    ),
                                ))
                            }
                        },
                        Some(c) => s.push(c),
                    }
                }
                return Ok((Tok::Str(s), pos, doc));
            }
            if "{}()[]:;,=.".contains(c) {
                self.bump();
                return Ok((Tok::Punct(c), pos, doc));
            }
            return Err(self.err(
                pos,
                format!("expected a name, number, string or punctuation, found {c:?} (names use ASCII letters, digits and _)"),
            ));
        }
    }
}

/// Parses one file's text into a syntax tree (no include resolution, no type checks).
pub fn parse_file(text: &str, file: &str) -> Result<File, ParseError> {
    let mut p = Parser {
        lex: Lexer {
            chars: text.chars().peekable(),
            line: 1,
            col: 1,
            file,
            doc: Vec::new(),
        },
        tok: Tok::Eof,
        pos: Pos::default(),
        doc: Vec::new(),
        namespace: String::new(),
    };
    p.advance()?;
    p.file()
}

struct Parser<'a> {
    lex: Lexer<'a>,
    tok: Tok,
    pos: Pos,
    doc: Vec<String>,
    namespace: String,
}

/// Nesting limit for vector types (`[[…]]`), so hostile input cannot overflow the stack.
const MAX_TYPE_DEPTH: u32 = 8;

impl<'a> Parser<'a> {
    fn advance(&mut self) -> Result<(), ParseError> {
        let (tok, pos, doc) = self.lex.next()?;
        self.tok = tok;
        self.pos = pos;
        self.doc = doc;
        Ok(())
    }

    fn err<T>(&self, expected: &str) -> Result<T, ParseError> {
        Err(self
            .lex
            .err(self.pos, format!("expected {expected}, found {}", self.tok)))
    }

    fn is_punct(&self, c: char) -> bool {
        self.tok == Tok::Punct(c)
    }

    fn expect_punct(&mut self, c: char, what: &str) -> Result<(), ParseError> {
        if self.is_punct(c) {
            self.advance()
        } else {
            self.err(what)
        }
    }

    fn ident(&mut self, what: &str) -> Result<(String, Pos), ParseError> {
        match &self.tok {
            Tok::Ident(s) => {
                let r = (s.clone(), self.pos);
                self.advance()?;
                Ok(r)
            }
            _ => self.err(what),
        }
    }

    fn qualified_ident(&mut self, what: &str) -> Result<(String, Pos), ParseError> {
        let (mut name, pos) = self.ident(what)?;
        while self.is_punct('.') {
            self.advance()?;
            let (part, _) = self.ident("a name after \".\"")?;
            name.push('.');
            name.push_str(&part);
        }
        Ok((name, pos))
    }

    fn string(&mut self, what: &str) -> Result<(String, Pos), ParseError> {
        match &self.tok {
            Tok::Str(s) => {
                let r = (s.clone(), self.pos);
                self.advance()?;
                Ok(r)
            }
            _ => self.err(what),
        }
    }

    fn file(&mut self) -> Result<File, ParseError> {
        let mut file = File::default();
        loop {
            match self.tok.clone() {
                Tok::Eof => return Ok(file),
                Tok::Punct(';') => self.advance()?,
                Tok::Ident(kw) => match kw.as_str() {
                    "include" | "native_include" => {
                        self.advance()?;
                        let (path, pos) = self.string("a quoted file name after \"include\"")?;
                        self.expect_punct(';', "\";\" after the include")?;
                        if kw == "include" {
                            file.includes.push((path, pos));
                        }
                    }
                    "namespace" => {
                        self.advance()?;
                        if self.is_punct(';') {
                            self.namespace.clear();
                        } else {
                            self.namespace = self.qualified_ident("a namespace name")?.0;
                        }
                        self.expect_punct(';', "\";\" after the namespace")?;
                    }
                    "attribute" => {
                        self.advance()?;
                        let name = match &self.tok {
                            Tok::Str(_) => self.string("an attribute name")?.0,
                            _ => self.ident("a quoted attribute name")?.0,
                        };
                        self.expect_punct(';', "\";\" after the attribute declaration")?;
                        file.declared_attributes.push(name);
                    }
                    "root_type" => {
                        self.advance()?;
                        let (name, pos) = self.qualified_ident("a table name after \"root_type\"")?;
                        self.expect_punct(';', "\";\" after root_type")?;
                        file.root_type = Some((name, self.namespace.clone(), pos));
                    }
                    "file_identifier" => {
                        self.advance()?;
                        let (id, pos) = self.string("a quoted 4-character file identifier")?;
                        if id.len() != 4 {
                            return Err(self.lex.err(
                                pos,
                                format!("expected exactly 4 bytes for file_identifier, found {:?}", id),
                            ));
                        }
                        self.expect_punct(';', "\";\" after file_identifier")?;
                        file.file_identifier = Some((id, pos));
                    }
                    "file_extension" => {
                        self.advance()?;
                        self.string("a quoted file extension")?;
                        self.expect_punct(';', "\";\" after file_extension")?;
                    }
                    "table" | "struct" => {
                        let doc = std::mem::take(&mut self.doc);
                        self.advance()?;
                        let decl = self.object(kw == "struct", doc)?;
                        file.decls.push(decl);
                    }
                    "enum" => {
                        let doc = std::mem::take(&mut self.doc);
                        self.advance()?;
                        let decl = self.enum_decl(doc)?;
                        file.decls.push(decl);
                    }
                    "union" => {
                        let doc = std::mem::take(&mut self.doc);
                        self.advance()?;
                        let decl = self.union_decl(doc)?;
                        file.decls.push(decl);
                    }
                    "rpc_service" => {
                        return Err(self.lex.err(
                            self.pos,
                            "expected a table, struct, enum or union; rpc_service is not supported by keel".into(),
                        ))
                    }
                    _ => {
                        return self.err(
                            "a declaration (table, struct, enum, union, namespace, include, root_type, attribute)",
                        )
                    }
                },
                _ => {
                    return self.err(
                        "a declaration (table, struct, enum, union, namespace, include, root_type, attribute)",
                    )
                }
            }
        }
    }

    fn metadata(&mut self) -> Result<Vec<Attribute>, ParseError> {
        let mut attrs = Vec::new();
        if !self.is_punct('(') {
            return Ok(attrs);
        }
        self.advance()?;
        loop {
            if self.is_punct(')') {
                self.advance()?;
                return Ok(attrs);
            }
            let (name, pos) = self.ident("an attribute name or \")\"")?;
            let value = if self.is_punct(':') {
                self.advance()?;
                Some(self.literal("an attribute value")?.0)
            } else {
                None
            };
            attrs.push(Attribute { name, value, pos });
            if self.is_punct(',') {
                self.advance()?;
            } else if !self.is_punct(')') {
                return self.err("\",\" or \")\" in the attribute list");
            }
        }
    }

    fn literal(&mut self, what: &str) -> Result<(Literal, Pos), ParseError> {
        let pos = self.pos;
        let lit = match &self.tok {
            Tok::Int(s) => Literal::Int(s.clone()),
            Tok::Float(s) => Literal::Float(s.clone()),
            Tok::Str(s) => Literal::Str(s.clone()),
            Tok::Ident(s) => Literal::Ident(s.clone()),
            _ => return self.err(what),
        };
        self.advance()?;
        Ok((lit, pos))
    }

    fn type_ref(&mut self, depth: u32) -> Result<TypeRef, ParseError> {
        let pos = self.pos;
        if self.is_punct('[') {
            if depth >= MAX_TYPE_DEPTH {
                return self.err("an element type (vectors nest too deeply)");
            }
            self.advance()?;
            let inner = self.type_ref(depth + 1)?;
            if self.is_punct(':') {
                self.advance()?;
                let n = match &self.tok {
                    Tok::Int(s) => s.parse::<u32>().ok(),
                    _ => None,
                };
                let Some(n) = n else {
                    return self.err("an array length");
                };
                self.advance()?;
                self.expect_punct(']', "\"]\" to close the array type")?;
                return Ok(TypeRef::Array(Box::new(inner), n, pos));
            }
            self.expect_punct(']', "\"]\" to close the vector type")?;
            return Ok(TypeRef::Vector(Box::new(inner), pos));
        }
        let (name, pos) = self.qualified_ident("a type")?;
        Ok(TypeRef::Named(name, pos))
    }

    fn object(&mut self, is_struct: bool, doc: Vec<String>) -> Result<Decl, ParseError> {
        let what = if is_struct {
            "a struct name"
        } else {
            "a table name"
        };
        let (name, pos) = self.ident(what)?;
        let attributes = self.metadata()?;
        self.expect_punct('{', "\"{\" to start the fields")?;
        let mut fields = Vec::new();
        loop {
            if self.is_punct('}') {
                self.advance()?;
                break;
            }
            let doc = std::mem::take(&mut self.doc);
            let (fname, fpos) = self.ident("a field name or \"}\"")?;
            self.expect_punct(':', "\":\" after the field name")?;
            let ty = self.type_ref(0)?;
            let default = if self.is_punct('=') {
                self.advance()?;
                let (lit, p) = self.literal("a default value")?;
                Some((lit, p))
            } else {
                None
            };
            let attributes = self.metadata()?;
            self.expect_punct(';', "\";\" after the field")?;
            fields.push(FieldDecl {
                name: fname,
                ty,
                default,
                attributes,
                doc,
                pos: fpos,
            });
        }
        Ok(Decl {
            name,
            namespace: self.namespace.clone(),
            kind: DeclKind::Object { is_struct, fields },
            attributes,
            doc,
            pos,
        })
    }

    fn enum_decl(&mut self, doc: Vec<String>) -> Result<Decl, ParseError> {
        let (name, pos) = self.ident("an enum name")?;
        if !self.is_punct(':') {
            return self.err("\":\" and an underlying integer type (enum Color : byte)");
        }
        self.advance()?;
        let (underlying, underlying_pos) = self.ident("an integer type such as byte or int")?;
        let attributes = self.metadata()?;
        self.expect_punct('{', "\"{\" to start the enum values")?;
        let mut values = Vec::new();
        loop {
            if self.is_punct('}') {
                self.advance()?;
                break;
            }
            let doc = std::mem::take(&mut self.doc);
            let (vname, vpos) = self.ident("an enum value name or \"}\"")?;
            let value = if self.is_punct('=') {
                self.advance()?;
                match &self.tok {
                    Tok::Int(s) => {
                        let r = (s.clone(), self.pos);
                        self.advance()?;
                        Some(r)
                    }
                    _ => return self.err("an integer value"),
                }
            } else {
                None
            };
            self.metadata()?;
            values.push(EnumValDecl {
                name: vname,
                value,
                doc,
                pos: vpos,
            });
            if self.is_punct(',') {
                self.advance()?;
            } else if !self.is_punct('}') {
                return self.err("\",\" or \"}\" after the enum value");
            }
        }
        Ok(Decl {
            name,
            namespace: self.namespace.clone(),
            kind: DeclKind::Enum {
                underlying,
                underlying_pos,
                values,
            },
            attributes,
            doc,
            pos,
        })
    }

    fn union_decl(&mut self, doc: Vec<String>) -> Result<Decl, ParseError> {
        let (name, pos) = self.ident("a union name")?;
        let attributes = self.metadata()?;
        self.expect_punct('{', "\"{\" to start the union members")?;
        let mut members = Vec::new();
        loop {
            if self.is_punct('}') {
                self.advance()?;
                break;
            }
            let (first, mpos) = self.qualified_ident("a table name or \"}\"")?;
            let (mname, ty) = if self.is_punct(':') {
                self.advance()?;
                let (ty, _) = self.qualified_ident("a table name after \":\"")?;
                (first, ty)
            } else {
                let short = first.rsplit('.').next().unwrap_or(&first).to_owned();
                (short, first)
            };
            self.metadata()?;
            members.push(UnionMemberDecl {
                name: mname,
                ty,
                pos: mpos,
            });
            if self.is_punct(',') {
                self.advance()?;
            } else if !self.is_punct('}') {
                return self.err("\",\" or \"}\" after the union member");
            }
        }
        Ok(Decl {
            name,
            namespace: self.namespace.clone(),
            kind: DeclKind::Union { members },
            attributes,
            doc,
            pos,
        })
    }
}
