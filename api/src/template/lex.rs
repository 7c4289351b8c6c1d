//! The lexer: template text and the tokens inside `{{ }}` actions, with Go's trim markers
//! (`{{- ` and ` -}}`) and comments (`{{/* */}}`).

use super::Fail;

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Tok {
    Text(Vec<u8>),
    Open,
    Close,
    Ident(String),
    /// `.name` (without the dot).
    Field(String),
    /// `$name`, or `$` alone.
    Var(String),
    Dot,
    Declare,
    Assign,
    Pipe,
    LParen,
    RParen,
    Comma,
    Str(Vec<u8>),
    Num(String),
    Char(char),
    Bool(bool),
    Nil,
    Kw(Kw),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kw {
    If,
    Else,
    End,
    Range,
    With,
    Break,
    Continue,
    Define,
    Template,
    Block,
}

impl Tok {
    /// How the token reads in an error message (template source is not secret).
    pub(crate) fn describe(&self) -> String {
        match self {
            Tok::Text(_) => "text".into(),
            Tok::Open => "\"{{\"".into(),
            Tok::Close => "\"}}\"".into(),
            Tok::Ident(s) => format!("identifier \"{s}\""),
            Tok::Field(s) => format!("field \".{s}\""),
            Tok::Var(s) => format!("variable \"{s}\""),
            Tok::Dot => "\".\"".into(),
            Tok::Declare => "\":=\"".into(),
            Tok::Assign => "\"=\"".into(),
            Tok::Pipe => "\"|\"".into(),
            Tok::LParen => "\"(\"".into(),
            Tok::RParen => "\")\"".into(),
            Tok::Comma => "\",\"".into(),
            Tok::Str(_) => "string".into(),
            Tok::Num(n) => format!("number {n}"),
            Tok::Char(_) => "character constant".into(),
            Tok::Bool(b) => format!("{b}"),
            Tok::Nil => "nil".into(),
            Tok::Kw(k) => format!("{{{{{}}}}}", k.name()),
        }
    }
}

impl Kw {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kw::If => "if",
            Kw::Else => "else",
            Kw::End => "end",
            Kw::Range => "range",
            Kw::With => "with",
            Kw::Break => "break",
            Kw::Continue => "continue",
            Kw::Define => "define",
            Kw::Template => "template",
            Kw::Block => "block",
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Token {
    pub(crate) tok: Tok,
    /// Byte offset in the source.
    pub(crate) pos: usize,
    /// Whitespace separates this token from the previous one in the same action.
    pub(crate) spaced: bool,
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_alnum(c: char) -> bool {
    c == '_' || c.is_alphanumeric()
}

fn find(hay: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    hay.get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|i| i + from)
}

/// Splits a template into tokens.
pub(crate) fn lex(src: &str) -> Result<Vec<Token>, Fail> {
    let b = src.as_bytes();
    let mut toks = Vec::new();
    let mut i = 0;
    let mut trim_next = false;
    loop {
        let open = find(b, i, b"{{");
        let mut text_start = i;
        let mut text_end = open.unwrap_or(b.len());
        if trim_next {
            while text_start < text_end && is_space(b[text_start]) {
                text_start += 1;
            }
        }
        let Some(open) = open else {
            if text_start < text_end {
                toks.push(Token {
                    tok: Tok::Text(b[text_start..text_end].to_vec()),
                    pos: text_start,
                    spaced: false,
                });
            }
            return Ok(toks);
        };
        let mut j = open + 2;
        let trim_left = b.get(j) == Some(&b'-') && b.get(j + 1).is_some_and(|&c| is_space(c));
        if trim_left {
            while text_end > text_start && is_space(b[text_end - 1]) {
                text_end -= 1;
            }
            j += 2;
        }
        if text_start < text_end {
            toks.push(Token {
                tok: Tok::Text(b[text_start..text_end].to_vec()),
                pos: text_start,
                spaced: false,
            });
        }
        trim_next = false;
        if b[j..].starts_with(b"/*") {
            let close = find(b, j + 2, b"*/").ok_or_else(|| Fail::at(open, "unclosed comment"))?;
            let k = close + 2;
            if b[k..].starts_with(b"}}") {
                i = k + 2;
            } else if b.get(k).is_some_and(|&c| is_space(c)) && b[k + 1..].starts_with(b"-}}") {
                trim_next = true;
                i = k + 4;
            } else {
                return Err(Fail::at(open, "comment ends before closing delimiter"));
            }
            continue;
        }
        toks.push(Token {
            tok: Tok::Open,
            pos: open,
            spaced: false,
        });
        i = lex_action(src, j, open, &mut toks, &mut trim_next)?;
    }
}

/// Lexes one action from `start` up to and including its closing delimiter.
fn lex_action(
    src: &str,
    start: usize,
    open: usize,
    toks: &mut Vec<Token>,
    trim_next: &mut bool,
) -> Result<usize, Fail> {
    let b = src.as_bytes();
    let mut i = start;
    let mut spaced = true;
    let mut parens = 0usize;
    loop {
        let Some(&c) = b.get(i) else {
            return Err(Fail::at(open, "unclosed action"));
        };
        if is_space(c) {
            if b[i + 1..].starts_with(b"-}}") {
                toks.push(Token {
                    tok: Tok::Close,
                    pos: i + 1,
                    spaced: true,
                });
                *trim_next = true;
                return close_check(parens, i + 4, open);
            }
            spaced = true;
            i += 1;
            continue;
        }
        if b[i..].starts_with(b"}}") {
            toks.push(Token {
                tok: Tok::Close,
                pos: i,
                spaced,
            });
            return close_check(parens, i + 2, open);
        }
        let pos = i;
        let (tok, next) = lex_token(src, i, &mut parens)?;
        i = next;
        toks.push(Token { tok, pos, spaced });
        spaced = false;
    }
}

/// Lexes the token at `start` (not a space, not the closing delimiter): the token and where
/// the next one starts. Counts open parentheses in `parens`.
fn lex_token(src: &str, start: usize, parens: &mut usize) -> Result<(Tok, usize), Fail> {
    let b = src.as_bytes();
    let mut i = start;
    let c = b[i];
    let pos = i;
    let tok = match c {
        b'"' => {
            let (s, next) = lex_quoted(src, i)?;
            i = next;
            Tok::Str(s)
        }
        b'`' => {
            let end = find(b, i + 1, b"`")
                .ok_or_else(|| Fail::at(pos, "unterminated raw quoted string"))?;
            let raw: Vec<u8> = b[i + 1..end]
                .iter()
                .copied()
                .filter(|&c| c != b'\r')
                .collect();
            i = end + 1;
            Tok::Str(raw)
        }
        b'\'' => {
            let (c, next) = lex_char(src, i)?;
            i = next;
            Tok::Char(c)
        }
        b'.' if !b.get(i + 1).is_some_and(u8::is_ascii_digit) => {
            let end = scan_alnum(src, i + 1);
            let name = &src[i + 1..end];
            i = end;
            check_terminator(src, i)?;
            if name.is_empty() {
                Tok::Dot
            } else {
                Tok::Field(name.to_owned())
            }
        }
        b'$' => {
            let end = scan_alnum(src, i + 1);
            let name = &src[i..end];
            i = end;
            check_terminator(src, i)?;
            Tok::Var(name.to_owned())
        }
        b'.' | b'+' | b'-' | b'0'..=b'9' => {
            let end = scan_number(b, i);
            if let Some(next) = src[end..].chars().next()
                && is_alnum(next)
            {
                return Err(Fail::at(
                    pos,
                    format!("bad number syntax: {:?}", &src[i..end + next.len_utf8()]),
                ));
            }
            let text = &src[i..end];
            i = end;
            Tok::Num(text.to_owned())
        }
        b':' => {
            if b.get(i + 1) != Some(&b'=') {
                return Err(Fail::at(pos, "expected :="));
            }
            i += 2;
            Tok::Declare
        }
        b'=' => {
            i += 1;
            Tok::Assign
        }
        b'|' => {
            i += 1;
            Tok::Pipe
        }
        b'(' => {
            i += 1;
            *parens += 1;
            Tok::LParen
        }
        b')' => {
            if *parens == 0 {
                return Err(Fail::at(pos, "unexpected right paren"));
            }
            *parens -= 1;
            i += 1;
            Tok::RParen
        }
        b',' => {
            i += 1;
            Tok::Comma
        }
        _ => {
            let (tok, next) = lex_word(src, i)?;
            i = next;
            tok
        }
    };
    Ok((tok, i))
}

/// Lexes an identifier, keyword, `true`, `false` or `nil` at `i`: the token and where the
/// next one starts.
fn lex_word(src: &str, i: usize) -> Result<(Tok, usize), Fail> {
    let pos = i;
    let ch = src[i..]
        .chars()
        .next()
        .unwrap_or(char::REPLACEMENT_CHARACTER);
    if !is_alnum(ch) {
        return Err(Fail::at(
            pos,
            format!("unrecognized character in action: {ch:?}"),
        ));
    }
    let end = scan_alnum(src, i);
    let word = &src[i..end];
    check_terminator(src, end)?;
    let tok = match word {
        "true" => Tok::Bool(true),
        "false" => Tok::Bool(false),
        "nil" => Tok::Nil,
        "if" => Tok::Kw(Kw::If),
        "else" => Tok::Kw(Kw::Else),
        "end" => Tok::Kw(Kw::End),
        "range" => Tok::Kw(Kw::Range),
        "with" => Tok::Kw(Kw::With),
        "break" => Tok::Kw(Kw::Break),
        "continue" => Tok::Kw(Kw::Continue),
        "define" => Tok::Kw(Kw::Define),
        "template" => Tok::Kw(Kw::Template),
        "block" => Tok::Kw(Kw::Block),
        _ => Tok::Ident(word.to_owned()),
    };
    Ok((tok, end))
}

fn close_check(parens: usize, next: usize, open: usize) -> Result<usize, Fail> {
    if parens > 0 {
        return Err(Fail::at(open, "unclosed left paren"));
    }
    Ok(next)
}

fn scan_alnum(src: &str, from: usize) -> usize {
    let mut end = from;
    for c in src[from..].chars() {
        if !is_alnum(c) {
            break;
        }
        end += c.len_utf8();
    }
    end
}

/// After an identifier, field or variable: a space, one of `.,|:()`, `}}` or the end.
fn check_terminator(src: &str, i: usize) -> Result<(), Fail> {
    let rest = &src.as_bytes()[i..];
    match rest.first() {
        None => Ok(()),
        Some(&c) if is_space(c) || b".,|:()".contains(&c) => Ok(()),
        Some(_) if rest.starts_with(b"}}") => Ok(()),
        Some(_) => {
            let ch = src[i..]
                .chars()
                .next()
                .unwrap_or(char::REPLACEMENT_CHARACTER);
            Err(Fail::at(i, format!("bad character {ch:?}")))
        }
    }
}

/// Go's number scanner: sign, base prefix, digits, fraction, exponent, `i` suffix.
fn scan_number(b: &[u8], from: usize) -> usize {
    let mut i = from;
    let accept = |i: &mut usize, set: &[u8]| -> bool {
        if b.get(*i).is_some_and(|c| set.contains(c)) {
            *i += 1;
            true
        } else {
            false
        }
    };
    let run = |i: &mut usize, set: &[u8]| {
        while b.get(*i).is_some_and(|c| set.contains(c)) {
            *i += 1;
        }
    };
    accept(&mut i, b"+-");
    let mut digits: &[u8] = b"0123456789_";
    if accept(&mut i, b"0") {
        if accept(&mut i, b"xX") {
            digits = b"0123456789abcdefABCDEF_";
        } else if accept(&mut i, b"oO") {
            digits = b"01234567_";
        } else if accept(&mut i, b"bB") {
            digits = b"01_";
        }
    }
    run(&mut i, digits);
    if accept(&mut i, b".") {
        run(&mut i, digits);
    }
    if digits.len() == 11 && accept(&mut i, b"eE") {
        accept(&mut i, b"+-");
        run(&mut i, b"0123456789_");
    }
    if digits.len() == 23 && accept(&mut i, b"pP") {
        accept(&mut i, b"+-");
        run(&mut i, b"0123456789_");
    }
    accept(&mut i, b"i");
    i
}

/// Lexes and unquotes a `"..."` string starting at `from`.
fn lex_quoted(src: &str, from: usize) -> Result<(Vec<u8>, usize), Fail> {
    let b = src.as_bytes();
    let mut i = from + 1;
    loop {
        match b.get(i) {
            None | Some(b'\n') => return Err(Fail::at(from, "unterminated quoted string")),
            Some(b'\\') => {
                if matches!(b.get(i + 1), None | Some(b'\n')) {
                    return Err(Fail::at(from, "unterminated quoted string"));
                }
                i += 2;
            }
            Some(b'"') => break,
            Some(_) => i += 1,
        }
    }
    let body = &src[from + 1..i];
    let s = unquote(body, '"').map_err(|m| Fail::at(from, m))?;
    Ok((s, i + 1))
}

fn lex_char(src: &str, from: usize) -> Result<(char, usize), Fail> {
    let b = src.as_bytes();
    let mut i = from + 1;
    loop {
        match b.get(i) {
            None | Some(b'\n') => return Err(Fail::at(from, "unterminated character constant")),
            Some(b'\\') => {
                if matches!(b.get(i + 1), None | Some(b'\n')) {
                    return Err(Fail::at(from, "unterminated character constant"));
                }
                i += 2;
            }
            Some(b'\'') => break,
            Some(_) => i += 1,
        }
    }
    let body = &src[from + 1..i];
    let bytes = unquote(body, '\'').map_err(|m| Fail::at(from, m))?;
    let text = std::str::from_utf8(&bytes).ok();
    let mut chars = text.map(str::chars);
    let c = match chars.as_mut().map(|c| (c.next(), c.next())) {
        Some((Some(c), None)) => c,
        _ => {
            // A single \x or octal escape above 0x7f is one byte, i.e. one rune in Go.
            if bytes.len() == 1 {
                char::from(bytes[0])
            } else {
                return Err(Fail::at(from, "malformed character constant"));
            }
        }
    };
    Ok((c, i + 1))
}

/// Go's escape sequences in interpreted strings (`quote` is `"`) and character
/// constants (`'`).
fn unquote(body: &str, quote: char) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(body.len());
    let mut chars = body.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            super::text::push_char(&mut out, c);
            continue;
        }
        let e = chars.next().ok_or("invalid escape sequence")?;
        match e {
            'a' => out.push(7),
            'b' => out.push(8),
            'f' => out.push(12),
            'n' => out.push(b'\n'),
            'r' => out.push(b'\r'),
            't' => out.push(b'\t'),
            'v' => out.push(11),
            '\\' => out.push(b'\\'),
            '"' | '\'' if e == quote => super::text::push_char(&mut out, e),
            'x' => out.push(hex_digits(&mut chars, 2)? as u8),
            'u' | 'U' => {
                let n = hex_digits(&mut chars, if e == 'u' { 4 } else { 8 })?;
                let c = char::from_u32(n).ok_or("invalid unicode escape")?;
                super::text::push_char(&mut out, c);
            }
            '0'..='7' => {
                let mut n = e.to_digit(8).unwrap_or(0);
                for _ in 0..2 {
                    let d = chars
                        .next()
                        .and_then(|c| c.to_digit(8))
                        .ok_or("invalid octal escape")?;
                    n = n * 8 + d;
                }
                out.push(u8::try_from(n).map_err(|_| "octal escape value above 255")?);
            }
            _ => return Err(format!("unknown escape sequence \\{e}")),
        }
    }
    Ok(out)
}

fn hex_digits(chars: &mut std::str::Chars<'_>, n: usize) -> Result<u32, String> {
    let mut v = 0u32;
    for _ in 0..n {
        let d = chars
            .next()
            .and_then(|c| c.to_digit(16))
            .ok_or("invalid hexadecimal escape")?;
        v = v * 16 + d;
    }
    Ok(v)
}
