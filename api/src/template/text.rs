//! Byte-string helpers with Go's rules: UTF-8 decoding where each invalid byte is one
//! U+FFFD "rune", linear-time substring search, and `strconv.Quote`.

/// One decoded rune: a valid character, or a byte that is not valid UTF-8.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rune {
    Char(char),
    Invalid(u8),
}

impl Rune {
    /// The character Go sees (`utf8.RuneError` for an invalid byte).
    pub(crate) fn char(self) -> char {
        match self {
            Rune::Char(c) => c,
            Rune::Invalid(_) => char::REPLACEMENT_CHARACTER,
        }
    }

    pub(crate) fn len(self) -> usize {
        match self {
            Rune::Char(c) => c.len_utf8(),
            Rune::Invalid(_) => 1,
        }
    }

    pub(crate) fn push_to(self, out: &mut Vec<u8>) {
        match self {
            Rune::Char(c) => push_char(out, c),
            Rune::Invalid(b) => out.push(b),
        }
    }
}

pub(crate) fn push_char(out: &mut Vec<u8>, c: char) {
    let mut buf = [0u8; 4];
    out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
}

/// The runes of `s`, in order.
pub(crate) fn runes(s: &[u8]) -> impl Iterator<Item = Rune> + '_ {
    s.utf8_chunks().flat_map(|chunk| {
        chunk
            .valid()
            .chars()
            .map(Rune::Char)
            .chain(chunk.invalid().iter().map(|&b| Rune::Invalid(b)))
    })
}

/// Number of runes (Go's `utf8.RuneCount`).
pub(crate) fn rune_count(s: &[u8]) -> usize {
    runes(s).count()
}

/// Every start offset of a non-overlapping occurrence of `needle` (non-empty) in `hay`,
/// left to right, at most `limit` of them (`memchr::memmem`, linear time).
pub(crate) fn find_all(hay: &[u8], needle: &[u8], limit: usize) -> Vec<usize> {
    if needle.is_empty() {
        return Vec::new();
    }
    memchr::memmem::find_iter(hay, needle).take(limit).collect()
}

pub(crate) fn contains(hay: &[u8], needle: &[u8]) -> bool {
    memchr::memmem::find(hay, needle).is_some()
}

/// Go's `unicode.IsSpace`.
pub(crate) fn is_space(c: char) -> bool {
    c.is_whitespace()
}

/// An approximation of Go's `strconv.IsPrint`: letters, marks, numbers, punctuation,
/// symbols and the ASCII space. (Unassigned code points count as printable here.)
pub(crate) fn is_print(c: char) -> bool {
    if c == ' ' {
        return true;
    }
    if c.is_control() || c.is_whitespace() {
        return false;
    }
    let u = c as u32;
    let format_or_private = matches!(u,
        0x00AD | 0x0600..=0x0605 | 0x061C | 0x06DD | 0x070F | 0x08E2 | 0x180E
        | 0x200B..=0x200F | 0x202A..=0x202E | 0x2060..=0x2064 | 0x2066..=0x206F
        | 0xE000..=0xF8FF | 0xFEFF | 0xFFF9..=0xFFFB | 0x110BD | 0x110CD
        | 0x1BCA0..=0x1BCA3 | 0x1D173..=0x1D17A | 0xE0001 | 0xE0020..=0xE007F
        | 0xF0000..=0x10FFFF);
    !format_or_private
}

const LOWER_HEX: &[u8; 16] = b"0123456789abcdef";

/// Go's `strconv.Quote` (`%q` on strings).
pub(crate) fn quote(s: &[u8]) -> Vec<u8> {
    quote_with(s, false)
}

/// `strconv.Quote`, or `strconv.QuoteToASCII` when `ascii_only` (`%+q`).
pub(crate) fn quote_with(s: &[u8], ascii_only: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len() + 2);
    out.push(b'"');
    for r in runes(s) {
        match r {
            Rune::Invalid(b) => push_hex_escape(&mut out, b),
            Rune::Char(c) => quote_char_into(&mut out, c, b'"', ascii_only),
        }
    }
    out.push(b'"');
    out
}

/// Go's `strconv.QuoteRune` (`%q` on integers), or `QuoteRuneToASCII`.
pub(crate) fn quote_rune(c: char, ascii_only: bool) -> Vec<u8> {
    let mut out = vec![b'\''];
    quote_char_into(&mut out, c, b'\'', ascii_only);
    out.push(b'\'');
    out
}

fn push_hex_escape(out: &mut Vec<u8>, b: u8) {
    out.extend_from_slice(b"\\x");
    out.push(LOWER_HEX[usize::from(b >> 4)]);
    out.push(LOWER_HEX[usize::from(b & 0xF)]);
}

fn quote_char_into(out: &mut Vec<u8>, c: char, quote: u8, ascii_only: bool) {
    if c as u32 == u32::from(quote) || c == '\\' {
        out.push(b'\\');
        push_char(out, c);
        return;
    }
    if is_print(c) && (c.is_ascii() || !ascii_only) {
        push_char(out, c);
        return;
    }
    let escaped: &[u8] = match c {
        '\u{7}' => b"\\a",
        '\u{8}' => b"\\b",
        '\u{c}' => b"\\f",
        '\n' => b"\\n",
        '\r' => b"\\r",
        '\t' => b"\\t",
        '\u{b}' => b"\\v",
        _ => {
            let u = c as u32;
            if u < 0x20 || u == 0x7F {
                // Fits in one byte by the test above.
                push_hex_escape(out, u as u8);
            } else if u < 0x10000 {
                out.extend_from_slice(format!("\\u{u:04x}").as_bytes());
            } else {
                out.extend_from_slice(format!("\\U{u:08x}").as_bytes());
            }
            return;
        }
    };
    out.extend_from_slice(escaped);
}

/// Go's `strconv.CanBackquote`.
pub(crate) fn can_backquote(s: &[u8]) -> bool {
    runes(s).all(|r| match r {
        Rune::Invalid(_) => false,
        Rune::Char(c) => c == '\t' || !(c < ' ' || c == '`' || c == '\u{7f}' || c == '\u{feff}'),
    })
}

/// Maps every rune with `f` (Go's `strings.Map`; an invalid byte becomes U+FFFD).
pub(crate) fn map_runes(s: &[u8], mut f: impl FnMut(char) -> char) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    for r in runes(s) {
        push_char(&mut out, f(r.char()));
    }
    out
}

/// Go's `unicode.ToUpper` (simple, one-to-one case mapping).
pub(crate) fn upper_char(c: char) -> char {
    single(c.to_uppercase()).unwrap_or(c)
}

/// Go's `unicode.ToLower`. (Only U+0130 has a multi-character full lowercase mapping;
/// its simple mapping is the first character.)
pub(crate) fn lower_char(c: char) -> char {
    c.to_lowercase().next().unwrap_or(c)
}

/// Go's `unicode.ToTitle`: upper case, except for the four digraphs that have a
/// distinct title case.
pub(crate) fn title_char(c: char) -> char {
    match c {
        '\u{1C4}'..='\u{1C6}' => '\u{1C5}',
        '\u{1C7}'..='\u{1C9}' => '\u{1C8}',
        '\u{1CA}'..='\u{1CC}' => '\u{1CB}',
        '\u{1F1}'..='\u{1F3}' => '\u{1F2}',
        c => upper_char(c),
    }
}

fn single(mut it: impl Iterator<Item = char>) -> Option<char> {
    let first = it.next()?;
    it.next().is_none().then_some(first)
}

/// Go's `strings.ToUpper`, keeping ASCII-only input byte for byte.
pub(crate) fn to_upper(s: &[u8]) -> Vec<u8> {
    if s.is_ascii() {
        return s.to_ascii_uppercase();
    }
    map_runes(s, upper_char)
}

/// Go's `strings.ToLower`.
pub(crate) fn to_lower(s: &[u8]) -> Vec<u8> {
    if s.is_ascii() {
        return s.to_ascii_lowercase();
    }
    map_runes(s, lower_char)
}

/// Go's `strings.TrimSpace`.
pub(crate) fn trim_space(s: &[u8]) -> &[u8] {
    trim_func(s, is_space)
}

/// Removes leading and trailing runes for which `f` holds.
pub(crate) fn trim_func(s: &[u8], f: impl Fn(char) -> bool) -> &[u8] {
    let mut start = 0;
    for r in runes(s) {
        if !f(r.char()) {
            break;
        }
        start += r.len();
    }
    let rest = &s[start..];
    let mut end = 0;
    let mut pos = 0;
    for r in runes(rest) {
        pos += r.len();
        if !f(r.char()) {
            end = pos;
        }
    }
    &rest[..end]
}

/// Go's `strings.Trim(s, cutset)`.
pub(crate) fn trim_cutset<'a>(s: &'a [u8], cutset: &[u8]) -> &'a [u8] {
    if cutset.is_ascii() {
        let start = s
            .iter()
            .position(|b| !cutset.contains(b))
            .unwrap_or(s.len());
        let rest = &s[start..];
        let end = rest
            .iter()
            .rposition(|b| !cutset.contains(b))
            .map_or(0, |i| i + 1);
        return &rest[..end];
    }
    let set: Vec<char> = runes(cutset).map(Rune::char).collect();
    trim_func(s, |c| set.contains(&c))
}

/// Go's `strings.Split(s, sep)`, stopping at `max` pieces (the last keeps the rest) when
/// `max > 0`.
pub(crate) fn split(s: &[u8], sep: &[u8], max: usize) -> Vec<Vec<u8>> {
    if max == 1 {
        return vec![s.to_vec()];
    }
    if sep.is_empty() {
        let mut out = Vec::new();
        let mut pos = 0;
        for r in runes(s) {
            if max > 0 && out.len() + 1 == max {
                break;
            }
            out.push(s[pos..pos + r.len()].to_vec());
            pos += r.len();
        }
        if pos < s.len() {
            out.push(s[pos..].to_vec());
        }
        return out;
    }
    let limit = if max > 0 { max - 1 } else { usize::MAX };
    let mut out = Vec::new();
    let mut prev = 0;
    for at in find_all(s, sep, limit) {
        out.push(s[prev..at].to_vec());
        prev = at + sep.len();
    }
    out.push(s[prev..].to_vec());
    out
}
