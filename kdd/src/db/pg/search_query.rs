//! `search.query`'s language (SQLite FTS5's query syntax) read into a tree
//! and written as PostgreSQL `to_tsquery` text, so that both engines accept
//! and refuse the same queries. No SQL runs here.
//!
//! FTS5's syntax: strings (bare words of letters, digits, `_` and non-ASCII
//! characters, or `"quoted"` with `""` for a quote), a `*` after a string
//! (a prefix), `+` joining strings into one phrase, `NEAR(a b, N)`, `AND`,
//! `OR`, `NOT` (binding tightest: `NOT` > `AND` > `OR`; adjacent phrases
//! are `AND`ed), parentheses, and column filters `col:`, `{c1 c2}:`,
//! `-col:` before a phrase, a `NEAR` or a parenthesised query.
//!
//! Written for `to_tsquery('kd', …)`: each string is one quoted operand
//! (its words become a phrase, `<->`), a prefix `:*`, a column filter the
//! weight of that column in the index (threads: title `A`, summary `B`),
//! `NOT` `& !`, and `NEAR(a b, N)` the alternatives `a <k> b | b <k> a` for
//! k in 1..=N+1 (with more than two phrases: all of them, anywhere — an
//! approximation).

use std::fmt::Write as _;

/// Columns a filter names.
#[derive(Debug, Clone, PartialEq)]
enum Cols {
    Only(Vec<String>),
    Except(Vec<String>),
}

/// One string of a phrase: its text and whether it is a prefix.
#[derive(Debug, Clone, PartialEq)]
struct Term {
    text: String,
    prefix: bool,
}

#[derive(Debug, Clone, PartialEq)]
enum Node {
    /// Strings joined by `+` (or one string), under column filters.
    Phrase {
        terms: Vec<Term>,
        cols: Vec<Cols>,
    },
    Near {
        phrases: Vec<Vec<Term>>,
        distance: u32,
        cols: Vec<Cols>,
    },
    And(Box<Node>, Box<Node>),
    Or(Box<Node>, Box<Node>),
    Not(Box<Node>, Box<Node>),
}

/// A query read from FTS5 syntax.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Query(Node);

/// An index the query is written for: its columns and their weights (none:
/// one unweighted column).
pub(crate) struct Index {
    pub columns: &'static [(&'static str, Option<char>)],
}

pub(crate) const MESSAGES: Index = Index { columns: &[("body", None)] };
pub(crate) const THREADS: Index = Index { columns: &[("title", Some('A')), ("summary", Some('B'))] };

/// What writing a query for an index gave.
#[derive(Debug, PartialEq)]
pub(crate) enum Written {
    /// `to_tsquery` text.
    Text(String),
    /// The query can match nothing in this index.
    Nothing,
    /// It names a column this index does not have (FTS5's words).
    NoSuchColumn(String),
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Word(String),
    Quoted(String),
    Open,
    Close,
    Colon,
    Star,
    Plus,
    Caret,
    OpenBrace,
    CloseBrace,
    Comma,
    Minus,
}

impl Token {
    fn text(&self) -> String {
        match self {
            Token::Word(w) => w.clone(),
            Token::Quoted(q) => format!("\"{q}\""),
            Token::Open => "(".into(),
            Token::Close => ")".into(),
            Token::Colon => ":".into(),
            Token::Star => "*".into(),
            Token::Plus => "+".into(),
            Token::Caret => "^".into(),
            Token::OpenBrace => "{".into(),
            Token::CloseBrace => "}".into(),
            Token::Comma => ",".into(),
            Token::Minus => "-".into(),
        }
    }
}

fn bare(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '\u{1a}' || !c.is_ascii()
}

fn syntax_error(near: &str) -> String {
    format!("fts5: syntax error near \"{near}\"")
}

fn lex(q: &str) -> Result<Vec<Token>, String> {
    let mut out = Vec::new();
    let mut chars = q.chars().peekable();
    while let Some(c) = chars.next() {
        let token = match c {
            c if c.is_whitespace() => continue,
            '"' => {
                let mut s = String::new();
                loop {
                    match chars.next() {
                        None => return Err("unterminated string".into()),
                        Some('"') if chars.peek() == Some(&'"') => {
                            chars.next();
                            s.push('"');
                        }
                        Some('"') => break,
                        Some(c) => s.push(c),
                    }
                }
                Token::Quoted(s)
            }
            '(' => Token::Open,
            ')' => Token::Close,
            ':' => Token::Colon,
            '*' => Token::Star,
            '+' => Token::Plus,
            '^' => Token::Caret,
            '{' => Token::OpenBrace,
            '}' => Token::CloseBrace,
            ',' => Token::Comma,
            '-' => Token::Minus,
            c if bare(c) => {
                let mut w = String::from(c);
                while let Some(c) = chars.next_if(|c| bare(*c)) {
                    w.push(c);
                }
                Token::Word(w)
            }
            other => return Err(syntax_error(&other.to_string())),
        };
        out.push(token);
    }
    Ok(out)
}

struct Parser {
    tokens: Vec<Token>,
    at: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at)
    }

    fn peek_at(&self, n: usize) -> Option<&Token> {
        self.tokens.get(self.at + n)
    }

    fn next(&mut self) -> Option<Token> {
        let t = self.tokens.get(self.at).cloned();
        self.at += 1;
        t
    }

    fn error_here(&self) -> String {
        match self.peek() {
            Some(t) => syntax_error(&t.text()),
            None => syntax_error(""),
        }
    }

    fn keyword(&self, k: &str) -> bool {
        matches!(self.peek(), Some(Token::Word(w)) if w == k)
    }

    fn or(&mut self) -> Result<Node, String> {
        let mut left = self.and()?;
        while self.keyword("OR") {
            self.next();
            left = Node::Or(Box::new(left), Box::new(self.and()?));
        }
        Ok(left)
    }

    fn and(&mut self) -> Result<Node, String> {
        let mut left = self.not()?;
        loop {
            if self.keyword("AND") {
                self.next();
            } else if !self.starts_primary() {
                return Ok(left);
            }
            left = Node::And(Box::new(left), Box::new(self.not()?));
        }
    }

    fn not(&mut self) -> Result<Node, String> {
        let mut left = self.primary()?;
        while self.keyword("NOT") {
            self.next();
            left = Node::Not(Box::new(left), Box::new(self.primary()?));
        }
        Ok(left)
    }

    /// Whether the next token begins a phrase, a NEAR, a group or a filter
    /// (an implicit AND follows).
    fn starts_primary(&self) -> bool {
        match self.peek() {
            Some(Token::Word(w)) => !matches!(w.as_str(), "AND" | "OR" | "NOT"),
            Some(Token::Quoted(_) | Token::Open | Token::OpenBrace | Token::Minus | Token::Caret) => true,
            _ => false,
        }
    }

    fn primary(&mut self) -> Result<Node, String> {
        let cols = self.colspec()?;
        let node = match self.peek() {
            Some(Token::Open) => {
                self.next();
                let inner = self.or()?;
                match self.next() {
                    Some(Token::Close) => inner,
                    _ => {
                        self.at -= 1;
                        return Err(self.error_here());
                    }
                }
            }
            Some(Token::Word(w)) if w == "NEAR" && self.peek_at(1) == Some(&Token::Open) => self.near()?,
            Some(Token::Word(w)) if matches!(w.as_str(), "AND" | "OR" | "NOT") => return Err(self.error_here()),
            Some(Token::Word(_) | Token::Quoted(_) | Token::Caret) => {
                Node::Phrase { terms: self.phrase()?, cols: vec![] }
            }
            _ => return Err(self.error_here()),
        };
        Ok(match cols {
            Some(c) => with_cols(node, &c),
            None => node,
        })
    }

    /// `col :`, `{c1 c2} :`, `- …` before a primary, if there.
    fn colspec(&mut self) -> Result<Option<Cols>, String> {
        let start = self.at;
        let minus = self.peek() == Some(&Token::Minus);
        if minus {
            self.next();
        }
        let names = match self.peek() {
            Some(Token::Word(w)) if self.peek_at(1) == Some(&Token::Colon) => {
                let w = w.clone();
                self.next();
                vec![w]
            }
            Some(Token::OpenBrace) => {
                self.next();
                let mut names = Vec::new();
                while let Some(Token::Word(w)) = self.peek() {
                    names.push(w.clone());
                    self.next();
                }
                if self.next() != Some(Token::CloseBrace) || names.is_empty() {
                    self.at -= 1;
                    return Err(self.error_here());
                }
                if self.peek() != Some(&Token::Colon) {
                    return Err(self.error_here());
                }
                names
            }
            _ if minus => return Err(self.error_here()),
            _ => {
                self.at = start;
                return Ok(None);
            }
        };
        self.next(); // the colon
        let names = names.into_iter().map(|n| n.to_lowercase()).collect();
        Ok(Some(if minus { Cols::Except(names) } else { Cols::Only(names) }))
    }

    /// `[^] string [*] (+ string [*])*`
    fn phrase(&mut self) -> Result<Vec<Term>, String> {
        if self.peek() == Some(&Token::Caret) {
            // Initial-token queries: read as a plain phrase.
            self.next();
        }
        let mut terms = vec![self.term()?];
        while self.peek() == Some(&Token::Plus) {
            self.next();
            terms.push(self.term()?);
        }
        Ok(terms)
    }

    fn term(&mut self) -> Result<Term, String> {
        let text = match self.next() {
            Some(Token::Word(w)) => w,
            Some(Token::Quoted(q)) => q,
            _ => {
                self.at -= 1;
                return Err(self.error_here());
            }
        };
        let prefix = self.peek() == Some(&Token::Star);
        if prefix {
            self.next();
        }
        Ok(Term { text, prefix })
    }

    /// `NEAR ( phrase phrase … [, N] )`
    fn near(&mut self) -> Result<Node, String> {
        self.next();
        self.next();
        let mut phrases = Vec::new();
        while matches!(self.peek(), Some(Token::Word(_) | Token::Quoted(_) | Token::Caret)) {
            phrases.push(self.phrase()?);
        }
        let mut distance = 10;
        if self.peek() == Some(&Token::Comma) {
            self.next();
            distance = match self.next() {
                Some(Token::Word(n)) => n.parse().map_err(|_| syntax_error(&n))?,
                _ => {
                    self.at -= 1;
                    return Err(self.error_here());
                }
            };
        }
        if phrases.is_empty() || self.next() != Some(Token::Close) {
            self.at -= 1;
            return Err(self.error_here());
        }
        Ok(Node::Near { phrases, distance, cols: vec![] })
    }
}

/// `node` under one more column filter.
fn with_cols(node: Node, c: &Cols) -> Node {
    match node {
        Node::Phrase { terms, mut cols } => {
            cols.push(c.clone());
            Node::Phrase { terms, cols }
        }
        Node::Near { phrases, distance, mut cols } => {
            cols.push(c.clone());
            Node::Near { phrases, distance, cols }
        }
        Node::And(a, b) => Node::And(Box::new(with_cols(*a, c)), Box::new(with_cols(*b, c))),
        Node::Or(a, b) => Node::Or(Box::new(with_cols(*a, c)), Box::new(with_cols(*b, c))),
        Node::Not(a, b) => Node::Not(Box::new(with_cols(*a, c)), Box::new(with_cols(*b, c))),
    }
}

impl Query {
    /// Reads FTS5 query syntax; the error is FTS5's kind of words.
    pub(crate) fn parse(q: &str) -> Result<Query, String> {
        let tokens = lex(q)?;
        if tokens.is_empty() {
            return Err(syntax_error(""));
        }
        let mut p = Parser { tokens, at: 0 };
        let node = p.or()?;
        if p.peek().is_some() {
            return Err(p.error_here());
        }
        Ok(Query(node))
    }

    /// The query as `to_tsquery` text for `index`.
    pub(crate) fn write(&self, index: &Index) -> Written {
        if let Some(name) = self.columns().into_iter().find(|n| !index.columns.iter().any(|(c, _)| c == n)) {
            return Written::NoSuchColumn(format!("no such column: {name}"));
        }
        match write(&self.0, index) {
            Some(text) => Written::Text(text),
            None => Written::Nothing,
        }
    }

    /// Whether a hit may come from `column` (a filter may leave it out).
    pub(crate) fn may_match(&self, column: &str) -> bool {
        fn any(n: &Node, column: &str) -> bool {
            match n {
                Node::Phrase { cols, .. } | Node::Near { cols, .. } => allows(cols, column),
                Node::And(a, b) | Node::Or(a, b) | Node::Not(a, b) => any(a, column) || any(b, column),
            }
        }
        any(&self.0, column)
    }

    /// Every column a filter names.
    fn columns(&self) -> Vec<String> {
        fn walk(n: &Node, out: &mut Vec<String>) {
            match n {
                Node::Phrase { cols, .. } | Node::Near { cols, .. } => {
                    for c in cols {
                        let (Cols::Only(names) | Cols::Except(names)) = c;
                        out.extend(names.iter().cloned());
                    }
                }
                Node::And(a, b) | Node::Or(a, b) | Node::Not(a, b) => {
                    walk(a, out);
                    walk(b, out);
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.0, &mut out);
        out
    }
}

fn allows(cols: &[Cols], column: &str) -> bool {
    cols.iter().all(|c| match c {
        Cols::Only(names) => names.iter().any(|n| n == column),
        Cols::Except(names) => !names.iter().any(|n| n == column),
    })
}

/// `None`: matches nothing in this index.
fn write(n: &Node, index: &Index) -> Option<String> {
    match n {
        Node::Phrase { terms, cols } => phrase(terms, &weights(cols, index)?),
        Node::Near { phrases, distance, cols } => {
            let w = weights(cols, index)?;
            let written: Vec<String> = phrases.iter().filter_map(|p| phrase(p, &w)).map(|p| format!("({p})")).collect();
            Some(match written.as_slice() {
                [] => return None,
                [one] => one.clone(),
                [a, b] => {
                    let mut alternatives = Vec::new();
                    for k in 1..=distance.saturating_add(1).min(100) {
                        alternatives.push(format!("{a} <{k}> {b}"));
                        alternatives.push(format!("{b} <{k}> {a}"));
                    }
                    format!("({})", alternatives.join(" | "))
                }
                many => format!("({})", many.join(" & ")),
            })
        }
        Node::And(a, b) => Some(format!("({} & {})", write(a, index)?, write(b, index)?)),
        Node::Or(a, b) => match (write(a, index), write(b, index)) {
            (Some(a), Some(b)) => Some(format!("({a} | {b})")),
            (one, None) | (None, one) => one,
        },
        Node::Not(a, b) => {
            let a = write(a, index)?;
            Some(match write(b, index) {
                Some(b) => format!("({a} & !{b})"),
                None => a,
            })
        }
    }
}

/// The weight letters a filter leaves of `index` (`""`: every column,
/// unweighted); `None` when it leaves none.
fn weights(cols: &[Cols], index: &Index) -> Option<String> {
    let kept: Vec<&(&str, Option<char>)> = index.columns.iter().filter(|(c, _)| allows(cols, c)).collect();
    if kept.is_empty() {
        return None;
    }
    if kept.len() == index.columns.len() {
        return Some(String::new());
    }
    Some(kept.iter().filter_map(|(_, w)| *w).collect())
}

/// `None`: no term has a word (`to_tsquery` refuses an empty operand).
fn phrase(terms: &[Term], weights: &str) -> Option<String> {
    let mut out = String::new();
    for (i, t) in terms.iter().filter(|t| !t.text.trim().is_empty()).enumerate() {
        if i > 0 {
            out.push_str(" <-> ");
        }
        out.push('\'');
        for c in t.text.chars() {
            match c {
                '\'' => out.push_str("''"),
                '\\' => out.push_str("\\\\"),
                c => out.push(c),
            }
        }
        out.push('\'');
        if t.prefix || !weights.is_empty() {
            let _ = write!(out, ":{}{weights}", if t.prefix { "*" } else { "" });
        }
    }
    (!out.is_empty()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(q: &str, index: &Index) -> String {
        match Query::parse(q).map(|q| q.write(index)) {
            Ok(Written::Text(t)) => t,
            other => panic!("{q}: {other:?}"),
        }
    }

    #[test]
    fn words_phrases_prefixes_and_operators_are_written_for_to_tsquery() {
        assert_eq!(text("shard", &MESSAGES), "'shard'");
        assert_eq!(text("shard keys", &MESSAGES), "('shard' & 'keys')");
        assert_eq!(text("\"orders table\"", &MESSAGES), "'orders table'");
        assert_eq!(text("creat*", &MESSAGES), "'creat':*");
        assert_eq!(text("a + b*", &MESSAGES), "'a' <-> 'b':*");
        assert_eq!(text("a OR b c", &MESSAGES), "('a' | ('b' & 'c'))");
        assert_eq!(text("a NOT b AND c", &MESSAGES), "(('a' & !'b') & 'c')");
        assert_eq!(text("(a OR b) NOT c", &MESSAGES), "(('a' | 'b') & !'c')");
        assert_eq!(text("\"it's \\ \"\"q\"\"\"", &MESSAGES), "'it''s \\\\ \"q\"'");
        assert_eq!(
            text("NEAR(a b, 1)", &MESSAGES),
            "(('a') <1> ('b') | ('b') <1> ('a') | ('a') <2> ('b') | ('b') <2> ('a'))"
        );
        assert_eq!(text("NEAR(a)", &MESSAGES), "('a')");
        assert_eq!(text("café naïve", &MESSAGES), "('café' & 'naïve')");
    }

    #[test]
    fn column_filters_pick_an_index_and_its_weights() {
        assert_eq!(text("title:shard", &THREADS), "'shard':A");
        assert_eq!(text("summary:shard*", &THREADS), "'shard':*B");
        assert_eq!(text("{title summary}:cache", &THREADS), "'cache'");
        assert_eq!(text("-title:cache", &THREADS), "'cache':B");
        assert_eq!(text("body:shard", &MESSAGES), "'shard'");
        assert_eq!(text("TITLE:(a OR b)", &THREADS), "('a':A | 'b':A)");
        let q = Query::parse("title:shard").unwrap();
        assert_eq!(q.write(&MESSAGES), Written::NoSuchColumn("no such column: title".into()));
        assert!(q.may_match("title") && !q.may_match("summary"));
        let q = Query::parse("body:shard OR title:shard").unwrap();
        assert!(matches!(q.write(&MESSAGES), Written::NoSuchColumn(_)));
        assert!(matches!(q.write(&THREADS), Written::NoSuchColumn(_)));
        assert_eq!(Query::parse("-body:x").unwrap().write(&MESSAGES), Written::Nothing);
        assert_eq!(text("-body:x OR y", &MESSAGES), "'y'");
        assert_eq!(Query::parse("\"\" + \" \"").unwrap().write(&MESSAGES), Written::Nothing);
        assert_eq!(text("\"\" OR a", &MESSAGES), "'a'");
    }

    #[test]
    fn what_fts5_cannot_read_is_refused_in_its_words() {
        for (q, error) in [
            ("\"unclosed", "unterminated string"),
            ("*", "fts5: syntax error near \"*\""),
            ("AND", "fts5: syntax error near \"AND\""),
            ("a AND", "fts5: syntax error near \"\""),
            ("a.b", "fts5: syntax error near \".\""),
            ("(a", "fts5: syntax error near \"\""),
            ("a)", "fts5: syntax error near \")\""),
            ("", "fts5: syntax error near \"\""),
            ("NEAR(a b, x)", "fts5: syntax error near \"x\""),
            ("{title}", "fts5: syntax error near \"\""),
        ] {
            assert_eq!(Query::parse(q).unwrap_err(), error, "{q}");
        }
        let q = Query::parse("nosuch:shard").unwrap();
        assert_eq!(q.write(&THREADS), Written::NoSuchColumn("no such column: nosuch".into()));
    }
}
