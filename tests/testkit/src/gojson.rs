//! What Go's `json.Unmarshal(data, &map[string]interface{}{})` says about `data`, word for
//! word: the kube-apiserver validates `kubernetes.io/dockercfg` and
//! `kubernetes.io/dockerconfigjson` Secrets that way and puts the error into its answer
//! (`invalid character 'H' looking for beginning of value`). A port of the states of Go's
//! `encoding/json/scanner.go` that produce an error; checked against kube-apiserver 1.20.2
//! (Go 1.19) for each message below.

/// `None` when Go unmarshals `data` into a map (an object or `null`), else Go's error text.
pub(crate) fn unmarshal_map_error(data: &[u8]) -> Option<String> {
    let mut scanner = Scanner::default();
    for &c in data {
        if let Err(e) = scanner.step(c) {
            return Some(e);
        }
    }
    if let Err(e) = scanner.eof() {
        return Some(e);
    }
    let first = data.iter().copied().find(|c| !is_space(*c))?;
    let kind = match first {
        b'{' | b'n' => return None,
        b'[' => "array",
        b'"' => "string",
        b't' | b'f' => "bool",
        _ => "number",
    };
    Some(format!(
        "json: cannot unmarshal {kind} into Go value of type map[string]interface {{}}"
    ))
}

/// Go's `quoteChar`: how a syntax error shows the byte.
pub(crate) fn quote_char(c: u8) -> String {
    let inner = match c {
        b'\'' => return "'\\''".to_owned(),
        b'"' => return "'\"'".to_owned(),
        b'\\' => "\\\\".to_owned(),
        0x07 => "\\a".to_owned(),
        0x08 => "\\b".to_owned(),
        0x0c => "\\f".to_owned(),
        b'\n' => "\\n".to_owned(),
        b'\r' => "\\r".to_owned(),
        b'\t' => "\\t".to_owned(),
        0x0b => "\\v".to_owned(),
        0x00..=0x1f | 0x7f => format!("\\x{c:02x}"),
        // Go's `string(c)` is the rune U+00XX; strconv.Quote escapes what is not printable.
        0x80..=0xa0 | 0xad => format!("\\u{c:04x}"),
        _ => char::from(c).to_string(),
    };
    format!("'{inner}'")
}

fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\r' | b'\n')
}

#[derive(Clone, Copy, Default)]
enum State {
    #[default]
    BeginValue,
    BeginValueOrEmpty,
    BeginStringOrEmpty,
    BeginString,
    EndValue,
    EndTop,
    InString,
    InStringEsc,
    InStringEscU(u8),
    Neg,
    One,
    Zero,
    Dot,
    Dot0,
    E,
    ESign,
    E0,
    Literal(&'static str, usize),
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Parse {
    ObjectKey,
    ObjectValue,
    ArrayValue,
}

#[derive(Default)]
struct Scanner {
    state: State,
    stack: Vec<Parse>,
}

type Step = Result<(), String>;

fn error(c: u8, context: &str) -> Step {
    Err(format!("invalid character {} {context}", quote_char(c)))
}

impl Scanner {
    fn eof(&mut self) -> Step {
        if matches!(self.state, State::EndTop) {
            return Ok(());
        }
        self.step(b' ')?;
        if matches!(self.state, State::EndTop) {
            return Ok(());
        }
        Err("unexpected end of JSON input".to_owned())
    }

    fn step(&mut self, c: u8) -> Step {
        match self.state {
            State::BeginValueOrEmpty => {
                if is_space(c) {
                    return Ok(());
                }
                if c == b']' {
                    return self.end_value(c);
                }
                self.begin_value(c)
            }
            State::BeginValue => self.begin_value(c),
            State::BeginStringOrEmpty => {
                if is_space(c) {
                    return Ok(());
                }
                if c == b'}' {
                    if let Some(top) = self.stack.last_mut() {
                        *top = Parse::ObjectValue;
                    }
                    return self.end_value(c);
                }
                self.begin_string(c)
            }
            State::BeginString => self.begin_string(c),
            State::EndValue => self.end_value(c),
            State::EndTop => {
                if is_space(c) {
                    Ok(())
                } else {
                    error(c, "after top-level value")
                }
            }
            State::InString => {
                match c {
                    b'"' => self.state = State::EndValue,
                    b'\\' => self.state = State::InStringEsc,
                    0x00..=0x1f => return error(c, "in string literal"),
                    _ => {}
                }
                Ok(())
            }
            State::InStringEsc => match c {
                b'b' | b'f' | b'n' | b'r' | b't' | b'\\' | b'/' | b'"' => {
                    self.state = State::InString;
                    Ok(())
                }
                b'u' => {
                    self.state = State::InStringEscU(0);
                    Ok(())
                }
                _ => error(c, "in string escape code"),
            },
            State::InStringEscU(n) => {
                if !c.is_ascii_hexdigit() {
                    return error(c, "in \\u hexadecimal character escape");
                }
                self.state = if n == 3 {
                    State::InString
                } else {
                    State::InStringEscU(n + 1)
                };
                Ok(())
            }
            State::Neg => match c {
                b'0' => {
                    self.state = State::Zero;
                    Ok(())
                }
                b'1'..=b'9' => {
                    self.state = State::One;
                    Ok(())
                }
                _ => error(c, "in numeric literal"),
            },
            State::One if c.is_ascii_digit() => Ok(()),
            State::One | State::Zero => match c {
                b'.' => {
                    self.state = State::Dot;
                    Ok(())
                }
                b'e' | b'E' => {
                    self.state = State::E;
                    Ok(())
                }
                _ => self.end_value(c),
            },
            State::Dot => {
                if c.is_ascii_digit() {
                    self.state = State::Dot0;
                    Ok(())
                } else {
                    error(c, "after decimal point in numeric literal")
                }
            }
            State::Dot0 => match c {
                b'0'..=b'9' => Ok(()),
                b'e' | b'E' => {
                    self.state = State::E;
                    Ok(())
                }
                _ => self.end_value(c),
            },
            State::E if matches!(c, b'+' | b'-') => {
                self.state = State::ESign;
                Ok(())
            }
            State::E | State::ESign => {
                if c.is_ascii_digit() {
                    self.state = State::E0;
                    Ok(())
                } else {
                    error(c, "in exponent of numeric literal")
                }
            }
            State::E0 => {
                if c.is_ascii_digit() {
                    Ok(())
                } else {
                    self.end_value(c)
                }
            }
            State::Literal(word, at) => {
                let want = word.as_bytes()[at];
                if c != want {
                    return error(
                        c,
                        &format!("in literal {word} (expecting {})", quote_char(want)),
                    );
                }
                self.state = if at + 1 == word.len() {
                    State::EndValue
                } else {
                    State::Literal(word, at + 1)
                };
                Ok(())
            }
        }
    }

    fn begin_value(&mut self, c: u8) -> Step {
        self.state = match c {
            _ if is_space(c) => return Ok(()),
            b'{' => {
                self.stack.push(Parse::ObjectKey);
                State::BeginStringOrEmpty
            }
            b'[' => {
                self.stack.push(Parse::ArrayValue);
                State::BeginValueOrEmpty
            }
            b'"' => State::InString,
            b'-' => State::Neg,
            b'0' => State::Zero,
            b'1'..=b'9' => State::One,
            b't' => State::Literal("true", 1),
            b'f' => State::Literal("false", 1),
            b'n' => State::Literal("null", 1),
            _ => return error(c, "looking for beginning of value"),
        };
        Ok(())
    }

    fn begin_string(&mut self, c: u8) -> Step {
        if is_space(c) {
            return Ok(());
        }
        if c == b'"' {
            self.state = State::InString;
            return Ok(());
        }
        error(c, "looking for beginning of object key string")
    }

    fn pop(&mut self) {
        self.stack.pop();
        self.state = if self.stack.is_empty() {
            State::EndTop
        } else {
            State::EndValue
        };
    }

    fn end_value(&mut self, c: u8) -> Step {
        let Some(&top) = self.stack.last() else {
            self.state = State::EndTop;
            return self.step(c);
        };
        if is_space(c) {
            self.state = State::EndValue;
            return Ok(());
        }
        match (top, c) {
            (Parse::ObjectKey, b':') => {
                if let Some(t) = self.stack.last_mut() {
                    *t = Parse::ObjectValue;
                }
                self.state = State::BeginValue;
                Ok(())
            }
            (Parse::ObjectKey, _) => error(c, "after object key"),
            (Parse::ObjectValue, b',') => {
                if let Some(t) = self.stack.last_mut() {
                    *t = Parse::ObjectKey;
                }
                self.state = State::BeginString;
                Ok(())
            }
            (Parse::ObjectValue, b'}') => {
                self.pop();
                Ok(())
            }
            (Parse::ObjectValue, _) => error(c, "after object key:value pair"),
            (Parse::ArrayValue, b',') => {
                self.state = State::BeginValue;
                Ok(())
            }
            (Parse::ArrayValue, b']') => {
                self.pop();
                Ok(())
            }
            (Parse::ArrayValue, _) => error(c, "after array element"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::unmarshal_map_error;

    /// Each input with what kube-apiserver 1.20.2 (Go 1.19) said about it as a
    /// `kubernetes.io/dockerconfigjson` value.
    #[test]
    fn messages_are_go_s() {
        for (input, want) in [
            (
                &b"Hunter2secret"[..],
                Some("invalid character 'H' looking for beginning of value"),
            ),
            (
                b"{\"auths\":{\"a\":{\"password\":\"p4ss\"",
                Some("unexpected end of JSON input"),
            ),
            (b"", Some("unexpected end of JSON input")),
            (b" ", Some("unexpected end of JSON input")),
            (b"{\"a\" x}", Some("invalid character 'x' after object key")),
            (
                b"{\"a\":1}Zq",
                Some("invalid character 'Z' after top-level value"),
            ),
            (
                b"\"str\\u12",
                Some("invalid character ' ' in \\u hexadecimal character escape"),
            ),
            (
                b"[1,2]",
                Some("json: cannot unmarshal array into Go value of type map[string]interface {}"),
            ),
            (
                b"5",
                Some("json: cannot unmarshal number into Go value of type map[string]interface {}"),
            ),
            (
                b"true",
                Some("json: cannot unmarshal bool into Go value of type map[string]interface {}"),
            ),
            (
                b"\"x\"",
                Some("json: cannot unmarshal string into Go value of type map[string]interface {}"),
            ),
            (
                b"tru",
                Some("invalid character ' ' in literal true (expecting 'e')"),
            ),
            (b"-", Some("invalid character ' ' in numeric literal")),
            (
                b"1.",
                Some("invalid character ' ' after decimal point in numeric literal"),
            ),
            (
                b"1e",
                Some("invalid character ' ' in exponent of numeric literal"),
            ),
            (
                b"{\"a\":1,}",
                Some("invalid character '}' looking for beginning of object key string"),
            ),
            (b"[1 2]", Some("invalid character '2' after array element")),
            (
                b"{\"a\":1 \"b\"}",
                Some("invalid character '\"' after object key:value pair"),
            ),
            (b"{\"a\"}", Some("invalid character '}' after object key")),
            (
                b"\x01",
                Some("invalid character '\\x01' looking for beginning of value"),
            ),
            (
                "é".as_bytes(),
                Some("invalid character 'Ã' looking for beginning of value"),
            ),
            (
                b"\x80",
                Some("invalid character '\\u0080' looking for beginning of value"),
            ),
            (
                b"{\"a\":\"b\\q\"}",
                Some("invalid character 'q' in string escape code"),
            ),
            (
                b"'",
                Some("invalid character '\\'' looking for beginning of value"),
            ),
            (
                b"\\",
                Some("invalid character '\\\\' looking for beginning of value"),
            ),
            (b"null", None),
            (b"{}", None),
            (b" {\"auths\":\"s3cretval\"} ", None),
            (
                b"{\"auths\":{\"r\":{\"auth\":12345,\"x\":[1.5e-3,true,null,\"\\u00e9\"]}}}",
                None,
            ),
        ] {
            assert_eq!(
                unmarshal_map_error(input).as_deref(),
                want,
                "{:?}",
                String::from_utf8_lossy(input)
            );
        }
    }
}
