//! `spec.template.data` rendering, modeled on Go's text/template tests (exec_test.go,
//! parse_test.go) and Sprig's documented examples. Expected outputs follow Go and Sprig v3
//! semantics unless a comment says kseal deliberately differs.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use kseal_api::template::{MAX_OUTPUT, Template, TemplateError};
use kseal_api::{Error, render_template_data};
use proptest::prelude::*;

/// The data every table case sees as dot.
fn data() -> BTreeMap<String, ByteString> {
    [
        ("a", "A"),
        ("b", ""),
        ("n", "42"),
        ("pw", "p<&>\"\\"),
        ("multi", "l1\nl2"),
        ("db-pass", "dashed"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), ByteString(v.as_bytes().to_vec())))
    .collect()
}

fn render(src: &str) -> Result<String, TemplateError> {
    let t = Template::parse("t", src)?;
    let out = t.render(&data())?;
    Ok(String::from_utf8(out).expect("test outputs are UTF-8"))
}

/// `Ok(output)` or `Err(part of the message)`.
type Case = (&'static str, Result<&'static str, &'static str>);

fn check(cases: &[Case]) {
    let mut failures = Vec::new();
    for (src, want) in cases {
        let got = render(src);
        let ok = match (&got, want) {
            (Ok(out), Ok(w)) => out == w,
            (Err(e), Err(w)) => e.message().contains(w),
            _ => false,
        };
        if !ok {
            failures.push(format!("{src:?}: want {want:?}, got {got:?}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn text_actions_trim_markers_and_comments() {
    check(&[
        ("plain text", Ok("plain text")),
        ("", Ok("")),
        ("{{.a}}", Ok("A")),
        ("{{ .a }}-{{ .b }}-{{ .n }}", Ok("A--42")),
        ("{{ .missing }}", Ok("<no value>")),
        ("{{ .missing.deeper }}", Ok("<no value>")),
        ("{{ index . \"db-pass\" }}", Ok("dashed")),
        ("x  {{- .a -}}  y", Ok("xAy")),
        ("x \n {{- .a }} \n y", Ok("xA \n y")),
        ("x {{ .a -}} \n\t y", Ok("x Ay")),
        ("x {{-3}}", Ok("x -3")),
        ("{{/* a comment */}}z", Ok("z")),
        ("a {{- /* c */ -}} b", Ok("ab")),
        ("a {{/* multi\nline */}} b", Ok("a  b")),
        ("{{/* unclosed", Err("unclosed comment")),
        ("{{/* c */ }}", Err("comment ends before closing delimiter")),
        ("{{ .a }", Err("unrecognized character in action: '}'")),
        ("{{ .a", Err("unclosed action")),
        ("{{\n.a\n}}", Ok("A")),
        ("{{ $.a }}", Ok("A")),
        ("{{ .a.b }}", Err("can't evaluate field b in type string")),
        ("{{ .a \"x\" }}", Err("a is not a method but has arguments")),
        ("{{ }}", Err("missing value for command")),
        ("{{ .a %}}", Err("unrecognized character in action")),
        ("{{ .a-}}", Err("bad character")),
    ]);
}

#[test]
fn literals_follow_go_syntax() {
    check(&[
        (r#"{{ "a\tb\x41\u00e9\101" }}"#, Ok("a\tbAéA")),
        ("{{ `raw\\n{{` }}", Ok("raw\\n{{")),
        ("{{ 'a' }}", Ok("97")),
        (r"{{ '\n' }}", Ok("10")),
        (
            "{{ 0x10 }} {{ 0o17 }} {{ 017 }} {{ 0b101 }} {{ 1_000 }}",
            Ok("16 15 15 5 1000"),
        ),
        ("{{ -7 }} {{ +7 }}", Ok("-7 7")),
        (
            "{{ 1.5 }} {{ 1e3 }} {{ 1e6 }} {{ 0.00001 }} {{ 1.0 }}",
            Ok("1.5 1000 1e+06 1e-05 1"),
        ),
        ("{{ true }} {{ false }}", Ok("true false")),
        ("{{ nil }}", Err("nil is not a command")),
        ("{{ 3x }}", Err("bad number syntax")),
        ("{{ 08 }}", Err("illegal number syntax")),
        ("{{ 99999999999999999999 }}", Err("overflows int")),
        ("{{ 1i }}", Err("complex number")),
        (r#"{{ "\q" }}"#, Err("unknown escape sequence")),
        (r#"{{ "abc }}"#, Err("unterminated quoted string")),
        ("{{ `abc }}", Err("unterminated raw quoted string")),
        (
            "{{ \"x\" \"y\" }}",
            Err("can't give argument to non-function"),
        ),
        (
            "{{ .a | \"x\" }}",
            Err("non executable command in pipeline stage 2"),
        ),
    ]);
}

#[test]
fn variables_pipelines_and_parentheses() {
    check(&[
        ("{{ $x := .a }}{{ $x }}", Ok("A")),
        ("{{ $x := 1 }}{{ $x = 2 }}{{ $x }}", Ok("2")),
        (
            "{{ $x := 1 }}{{ range list 2 3 }}{{ $x = . }}{{ end }}{{ $x }}",
            Ok("3"),
        ),
        ("{{ $y }}", Err("undefined variable \"$y\"")),
        ("{{ $y = 1 }}", Err("undefined variable \"$y\"")),
        (
            "{{ if true }}{{ $y := 1 }}{{ end }}{{ $y }}",
            Err("undefined variable"),
        ),
        ("{{ .a | lower }}", Ok("a")),
        ("{{ \"abc\" | upper | printf \"%s!\" }}", Ok("ABC!")),
        ("{{ len (print .a .a) }}", Ok("2")),
        ("{{ (dict \"k\" \"v\").k }}", Ok("v")),
        ("{{ $d := dict \"k\" (dict \"j\" 1) }}{{ $d.k.j }}", Ok("1")),
        ("{{ ( .a }}", Err("unclosed left paren")),
        ("{{ .a ) }}", Err("unexpected right paren")),
        ("{{ print list }}", Ok("[]")),
    ]);
}

#[test]
fn control_structures() {
    check(&[
        ("{{ if .a }}yes{{ else }}no{{ end }}", Ok("yes")),
        ("{{ if .b }}yes{{ else }}no{{ end }}", Ok("no")),
        (
            "{{ if .missing }}y{{ else if .a }}elif{{ else }}n{{ end }}",
            Ok("elif"),
        ),
        (
            "{{ if 0 }}a{{ else if \"\" }}b{{ else if list }}c{{ else }}d{{ end }}",
            Ok("d"),
        ),
        ("{{ if $x := .a }}{{ $x }}{{ end }}", Ok("A")),
        ("{{ with .a }}{{ . }}{{ end }}", Ok("A")),
        ("{{ with .b }}x{{ else }}empty{{ end }}", Ok("empty")),
        ("{{ with .b }}b{{ else with .a }}{{ . }}{{ end }}", Ok("A")),
        (
            "{{ range $i, $v := list \"x\" \"y\" }}{{ $i }}={{ $v }};{{ end }}",
            Ok("0=x;1=y;"),
        ),
        ("{{ range $v := list 1 2 }}{{ $v }}{{ end }}", Ok("12")),
        ("{{ range list 1 2 }}{{ . }}{{ end }}", Ok("12")),
        (
            "{{ range $k, $v := . }}{{ $k }},{{ end }}",
            Ok("a,b,db-pass,multi,n,pw,"),
        ),
        (
            "{{ range $k, $v := dict \"z\" 1 \"a\" 2 }}{{ $k }}{{ $v }}{{ end }}",
            Ok("a2z1"),
        ),
        ("{{ range list }}x{{ else }}none{{ end }}", Ok("none")),
        ("{{ range .missing }}x{{ else }}none{{ end }}", Ok("none")),
        ("{{ range 3 }}{{ . }}{{ end }}", Ok("012")),
        (
            "{{ range $i := until 5 }}{{ if eq $i 3 }}{{ break }}{{ end }}{{ if eq $i 1 }}{{ continue }}{{ end }}{{ $i }}{{ end }}",
            Ok("02"),
        ),
        (
            "{{ range .a }}{{ end }}",
            Err("range can't iterate over a value of type string"),
        ),
        ("{{ break }}", Err("{{break}} outside {{range}}")),
        (
            "{{ if .a }}{{ continue }}{{ end }}",
            Err("{{continue}} outside {{range}}"),
        ),
        ("{{ end }}", Err("unexpected {{end}}")),
        ("{{ else }}", Err("unexpected {{else}}")),
        ("{{ if .a }}", Err("unexpected EOF")),
        ("{{ if }}{{ end }}", Err("missing value for if")),
        (
            "{{ range $a, $b, $c := . }}{{ end }}",
            Err("range can only initialize variables"),
        ),
        ("{{ $a, $b := . }}", Err("too many declarations")),
        (
            "{{ range list 1 }}{{ else if true }}{{ end }}",
            Err("{{else if}} is not allowed in {{range}}"),
        ),
    ]);
}

#[test]
fn define_template_and_block() {
    check(&[
        ("{{ define \"x\" }}X{{ end }}", Ok("")),
        (
            "{{ define \"x\" }}[{{ . }}]{{ end }}{{ template \"x\" .a }}",
            Ok("[A]"),
        ),
        (
            "{{ template \"x\" .a }}{{ define \"x\" }}[{{ . }}]{{ end }}",
            Ok("[A]"),
        ),
        (
            "{{ define \"x\" }}{{ . }}{{ end }}{{ template \"x\" }}",
            Ok("<no value>"),
        ),
        // A called template sees only `$`, bound to its dot.
        (
            "{{ define \"x\" }}{{ $.a }}{{ end }}{{ template \"x\" (dict \"a\" 1) }}",
            Ok("1"),
        ),
        (
            "{{ $v := 1 }}{{ define \"x\" }}{{ $v }}{{ end }}",
            Err("undefined variable \"$v\""),
        ),
        ("{{ block \"b\" .a }}<{{ . }}>{{ end }}", Ok("<A>")),
        (
            "{{ define \"b\" }}override{{ end }}{{ block \"b\" . }}default{{ end }}",
            Err("multiple definition of template \"b\""),
        ),
        (
            "{{ define \"x\" }} {{ end }}{{ define \"x\" }}X{{ end }}{{ template \"x\" }}",
            Ok("X"),
        ),
        (
            "{{ define \"list\" }}{{ range . }}<{{ . }}>{{ end }}{{ end }}{{ template \"list\" (list 1 2) }}",
            Ok("<1><2>"),
        ),
        // The template's own name (its key) can be called too.
        (
            "{{ if kindIs \"slice\" . }}{{ if . }}{{ first . }}{{ template \"t\" (rest .) }}{{ end }}\
             {{ else }}{{ template \"t\" (list 1 2 3) }}{{ end }}",
            Ok("123"),
        ),
        // A `define` of the template's own name is one more definition of it, as in Go:
        // an error when both bodies have content, else the one with content runs.
        (
            "{{ define \"t\" }}a{{ end }}{{ template \"t\" }}",
            Err("multiple definition of template \"t\""),
        ),
        ("{{ define \"t\" }}defined{{ end }}", Ok("defined")),
        (" \n{{ define \"t\" }}[{{ .a }}]{{ end }}\n", Ok("[A]")),
        ("own{{ define \"t\" }} {{ end }}", Ok("own")),
        ("{{ template \"nope\" }}", Err("no such template \"nope\"")),
        (
            "{{ template .a }}",
            Err("unexpected field \".a\" in template"),
        ),
        (
            "{{ if 1 }}{{ define \"x\" }}{{ end }}{{ end }}",
            Err("only allowed at the top level"),
        ),
        (
            "{{ define \"x\" }}{{ else }}{{ end }}",
            Err("unexpected {{else}}"),
        ),
        ("{{ define \"x\" }}", Err("unexpected EOF")),
        (
            "{{ range list 1 }}{{ define \"x\" }}{{ break }}{{ end }}{{ end }}",
            Err("only allowed at the top level"),
        ),
        (
            "{{ define \"x\" }}{{ break }}{{ end }}",
            Err("{{break}} outside {{range}}"),
        ),
        (
            "{{ define \"r\" }}{{ template \"r\" . }}{{ end }}{{ template \"r\" . }}",
            Err("template calls nested deeper than 300 levels"),
        ),
    ]);
}

#[test]
fn go_builtins() {
    check(&[
        (
            "{{ and .a .b }}|{{ and 1 2 }}|{{ or .b .a }}|{{ or 0 \"\" }}",
            Ok("|2|A|"),
        ),
        ("{{ if and .a .b }}y{{ else }}n{{ end }}", Ok("n")),
        // and/or short-circuit: the failing call is never made.
        (
            "{{ or .a (index list 9) }}{{ and .b (index list 9) }}",
            Ok("A"),
        ),
        ("{{ not .b }} {{ not .a }}", Ok("true false")),
        (
            "{{ len .a }} {{ len (list 1 2 3) }} {{ len . }}",
            Ok("1 3 6"),
        ),
        ("{{ len 3 }}", Err("len of type int")),
        ("{{ index . \"a\" }}", Ok("A")),
        // A missing key of the data (Go's map[string]string) is the zero value "".
        ("[{{ index . \"missing\" }}]", Ok("[]")),
        // ... and of a dict (map[string]interface{}) is nil.
        ("{{ index (dict \"a\" 1) \"b\" }}", Ok("<no value>")),
        ("{{ index (list 1 2) 5 }}", Err("index out of range: 5")),
        ("{{ index (list 1 2) -1 }}", Err("index out of range: -1")),
        ("{{ index \"abc\" 1 }}", Ok("98")),
        ("{{ index (list (list 1 2)) 0 1 }}", Ok("2")),
        (
            "{{ index . 1 }}",
            Err("value has type int; should be string"),
        ),
        ("{{ index nil 1 }}", Err("index of untyped nil")),
        (
            "{{ print 1 2 }}|{{ print \"a\" \"b\" }}|{{ print 1 \"a\" 2 }}",
            Ok("1 2|ab|1a2"),
        ),
        ("{{ print .missing }}", Ok("<nil>")),
        ("{{ println 1 \"a\" }}", Ok("1 a\n")),
        (
            "{{ html \"<a href='x'>&\\\"\" }}",
            Ok("&lt;a href=&#39;x&#39;&gt;&amp;&#34;"),
        ),
        ("{{ html .missing }}", Ok("&lt;no value&gt;")),
        (
            "{{ js \"a'b\\\"<>&=\\n\" }}",
            Ok("a\\'b\\\"\\u003C\\u003E\\u0026\\u003D\\u000A"),
        ),
        ("{{ urlquery \"a b&c=d/é\" }}", Ok("a+b%26c%3Dd%2F%C3%A9")),
        (
            "{{ eq .a \"A\" }} {{ eq .a \"x\" \"y\" \"A\" }} {{ eq 1 1 }} {{ eq 1 2 }}",
            Ok("true true true false"),
        ),
        ("{{ eq .missing \"\" }}", Ok("false")),
        ("{{ eq 1 \"1\" }}", Err("incompatible types for comparison")),
        ("{{ eq (list) (list) }}", Err("non-comparable type")),
        ("{{ eq 1 }}", Err("missing argument for comparison")),
        ("{{ ne 1 2 }} {{ ne \"a\" \"a\" }}", Ok("true false")),
        (
            "{{ lt 1 2 }} {{ lt \"a\" \"b\" }} {{ le 2 2 }} {{ gt 1.5 1.2 }} {{ ge 1 2 }}",
            Ok("true true true true false"),
        ),
        ("{{ lt 1 1.5 }}", Err("incompatible types for comparison")),
        ("{{ lt true false }}", Err("invalid type for comparison")),
        ("{{ lt .missing 1 }}", Err("invalid type for comparison")),
        (
            "{{ upper }}",
            Err("wrong number of args for upper: want 1 got 0"),
        ),
        (
            "{{ upper \"a\" \"b\" }}",
            Err("wrong number of args for upper: want 1 got 2"),
        ),
        (
            "{{ eq }}",
            Err("wrong number of args for eq: want at least 1 got 0"),
        ),
        (
            "{{ call .a }}",
            Err("function \"call\" is not supported by kseal yet"),
        ),
    ]);
}

#[test]
fn printf_verbs_flags_width_and_precision() {
    check(&[
        (
            "{{ printf \"%s|%q|%d|%v|%x|%%\" \"a\" \"b\" 3 4 255 }}",
            Ok("a|\"b\"|3|4|ff|%"),
        ),
        (
            "{{ printf \"%5s|%-5s|%05d|%.2f|%t\" \"ab\" \"cd\" 42 3.14159 true }}",
            Ok("   ab|cd   |00042|3.14|true"),
        ),
        (
            "{{ printf \"%X %#x %o %b %c %U %+d\" 255 255 8 5 65 65 5 }}",
            Ok("FF 0xff 10 101 A U+0041 +5"),
        ),
        (
            "{{ printf \"%5.1f|%e|%g|%g\" 3.14159 1234.5678 0.00001 100000.0 }}",
            Ok("  3.1|1.234568e+03|1e-05|100000"),
        ),
        (
            "{{ printf \"%v\" (dict \"b\" 1 \"a\" \"x\") }}",
            Ok("map[a:x b:1]"),
        ),
        (
            "{{ printf \"%v %s %d\" (list 1 \"a\") (list \"a\" \"b\") (list 1 2) }}",
            Ok("[1 a] [a b] [1 2]"),
        ),
        ("{{ printf \"%q\" \"a\\\"b\\n\" }}", Ok("\"a\\\"b\\n\"")),
        ("{{ printf \"%x\" \"hi\" }}", Ok("6869")),
        ("{{ printf \"%.2s\" \"héllo\" }}", Ok("hé")),
        (
            "{{ printf \"%T %T %T %T %T\" 1 \"s\" 1.5 (list) (dict) }}",
            Ok("int string float64 []interface {} map[string]interface {}"),
        ),
        ("{{ printf \"%T\" . }}", Ok("map[string]string")),
        ("{{ printf \"%s|%v\" nil nil }}", Ok("%!s(<nil>)|<nil>")),
        ("{{ printf \"%d %d\" 1 }}", Ok("1 %!d(MISSING)")),
        ("{{ printf \"%d\" 1 2 }}", Ok("1%!(EXTRA int=2)")),
        ("{{ printf \"%d\" \"x\" }}", Ok("%!d(string=x)")),
        ("{{ printf \"%z\" 1 }}", Ok("%!z(int=1)")),
        ("{{ printf \"%\" }}", Ok("%!(NOVERB)")),
        ("{{ printf \"%*d|%-*d|\" 4 7 3 1 }}", Ok("   7|1  |")),
        ("{{ printf \"%v\" .missing }}", Ok("<nil>")),
        ("{{ printf 5 }}", Err("expected string; got int")),
    ]);
}

#[test]
fn sprig_string_functions() {
    check(&[
        ("{{ trim \"  a b \\n\" }}", Ok("a b")),
        (
            "{{ trimAll \"$\" \"$$5.00$\" }}|{{ trimall \"ab\" \"abxba\" }}",
            Ok("5.00|x"),
        ),
        (
            "{{ trimPrefix \"foo\" \"foobar\" }}|{{ trimSuffix \"bar\" \"foobar\" }}",
            Ok("bar|foo"),
        ),
        (
            "{{ upper \"héllo\" }}|{{ lower \"HÉLLO\" }}",
            Ok("HÉLLO|héllo"),
        ),
        (
            "{{ title \"hello world-foo bar_baz\" }}|{{ untitle \"Hello World\" }}",
            Ok("Hello World-Foo Bar_baz|hello world"),
        ),
        (
            "{{ substr 1 3 \"hello\" }}|{{ substr 0 10 \"hi\" }}|{{ substr -1 2 \"hello\" }}",
            Ok("el|hi|he"),
        ),
        (
            "{{ substr 4 2 \"hello\" }}",
            Err("slice bounds out of range"),
        ),
        ("{{ repeat 3 \"ab\" }}", Ok("ababab")),
        ("{{ repeat -1 \"ab\" }}", Err("negative Repeat count")),
        ("{{ repeat 100000000 \"ab\" }}", Err("larger than 4 MiB")),
        ("{{ nospace \"a b\\tc\" }}", Ok("abc")),
        (
            "{{ trunc 3 \"hello\" }}|{{ trunc -2 \"hello\" }}|{{ trunc 9 \"hi\" }}",
            Ok("hel|lo|hi"),
        ),
        ("{{ abbrev 5 \"hello world\" }}", Ok("he...")),
        (
            "{{ contains \"cat\" \"catch\" }} {{ hasPrefix \"ca\" \"cat\" }} {{ hasSuffix \"x\" \"cat\" }}",
            Ok("true true false"),
        ),
        ("{{ \"catch\" | contains \"cat\" }}", Ok("true")),
        (
            "{{ quote \"a\\\"b\" }}|{{ quote 1 \"a\" }}|{{ quote .missing }}",
            Ok("\"a\\\"b\"|\"1\" \"a\"|"),
        ),
        ("{{ squote \"a\" 2 }}", Ok("'a' '2'")),
        ("{{ cat \"a\" 1 nil \"b\" }}", Ok("a 1 b")),
        (
            "{{ indent 2 \"a\\nb\" }}|{{ nindent 2 \"a\" }}",
            Ok("  a\n  b|\n  a"),
        ),
        ("{{ .multi | indent 4 }}", Ok("    l1\n    l2")),
        (
            "{{ replace \" \" \"-\" \"a b c\" }}|{{ \"a b\" | replace \" \" \"_\" }}|{{ replace \"\" \"-\" \"ab\" }}",
            Ok("a-b-c|a_b|-a-b-"),
        ),
        (
            "{{ plural \"one\" \"many\" 1 }} {{ plural \"one\" \"many\" 2 }}",
            Ok("one many"),
        ),
        (
            "{{ toString 5 }}|{{ toString nil }}|{{ toString 1.5 }}",
            Ok("5|<nil>|1.5"),
        ),
        (
            "{{ join \",\" (list \"a\" 1 nil \"b\") }}|{{ join \",\" \"solo\" }}",
            Ok("a,1,b|solo"),
        ),
        (
            "{{ splitList \",\" \"a,b,,c\" | join \"|\" }}",
            Ok("a|b||c"),
        ),
        ("{{ (split \"$\" \"foo$bar\")._1 }}", Ok("bar")),
        ("{{ split \",\" \"a,b\" }}", Ok("map[_0:a _1:b]")),
        ("{{ (splitn \",\" 2 \"a,b,c\")._1 }}", Ok("b,c")),
        ("{{ list \"b\" \"c\" \"a\" | sortAlpha }}", Ok("[a b c]")),
        (
            "{{ upper 5 }}",
            Err("error calling upper: argument 1: wrong type for value; expected string; got int"),
        ),
        (
            "{{ .missing | upper }}",
            Err("invalid value; expected string"),
        ),
    ]);
}

#[test]
fn sprig_encoding_hashes_and_conversions() {
    check(&[
        (
            "{{ b64enc \"hello\" }}|{{ b64dec \"aGVsbG8=\" }}|{{ .a | b64enc | b64dec }}",
            Ok("aGVsbG8=|hello|A"),
        ),
        // Sprig returns Go's error text as the result.
        (
            "{{ b64dec \"!!\" }}",
            Ok("illegal base64 data at input byte 0"),
        ),
        ("{{ b64dec \"YR==\" }}", Ok("a")),
        ("{{ b64dec \"aGVs\\nbG8=\" }}", Ok("hello")),
        (
            "{{ sha256sum \"hello\" }}",
            Ok("2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"),
        ),
        (
            "{{ sha1sum \"hello\" }}",
            Ok("aaf4c61ddcc5e8a2dabede0f3b482cd9aea9434d"),
        ),
        // FIPS 180-4 examples, and input that spans two blocks.
        (
            "{{ sha1sum \"\" }}|{{ sha1sum \"abc\" }}",
            Ok("da39a3ee5e6b4b0d3255bfef95601890afd80709|a9993e364706816aba3e25717850c26c9cd0d89d"),
        ),
        (
            "{{ sha1sum \"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq\" }}",
            Ok("84983e441c3bd26ebaae4aa1f95129e5e54670f1"),
        ),
        ("{{ adler32sum \"hello\" }}", Ok("103547413")),
        (
            "{{ atoi \"42\" }} {{ atoi \"x\" }} {{ atoi .n }} {{ atoi \"-7\" }}",
            Ok("42 0 42 -7"),
        ),
        (
            "{{ int \"0x10\" }} {{ int \"1.00\" }} {{ int 3.7 }} {{ int64 \"12\" }} {{ int true }}",
            Ok("16 1 3 12 1"),
        ),
        ("{{ float64 \"1.5\" }} {{ float64 2 }}", Ok("1.5 2")),
        (
            "{{ add 1 2 3 }} {{ add1 1 }} {{ sub 5 2 }} {{ mul 2 3 4 }} {{ div 7 2 }} {{ mod 7 2 }}",
            Ok("6 2 3 24 3 1"),
        ),
        (
            "{{ add \"1\" 2 }} {{ max 1 5 3 }} {{ min 4 2 }} {{ biggest 1 9 }}",
            Ok("3 5 2 9"),
        ),
        (
            "{{ div 1 0 }}",
            Err("error calling div: runtime error: integer divide by zero"),
        ),
        ("{{ mod 1 0 }}", Err("integer divide by zero")),
        ("{{ until 3 }}", Ok("[0 1 2]")),
    ]);
}

#[test]
fn sprig_json() {
    check(&[
        // encoding/json: quotes, escapes, HTML-safe by default.
        ("{{ toJson .pw }}", Ok("\"p\\u003c\\u0026\\u003e\\\"\\\\\"")),
        (
            "{{ toJson \"a\\nb\\tc\\u2028\\x01\" }}",
            Ok("\"a\\nb\\tc\\u2028\\u0001\""),
        ),
        ("{{ toRawJson .pw }}", Ok("\"p<&>\\\"\\\\\"")),
        (
            "{{ toJson (dict \"b\" 1 \"a\" (list \"x\" true nil 1.5)) }}",
            Ok("{\"a\":[\"x\",true,null,1.5],\"b\":1}"),
        ),
        (
            "{{ toJson 1e21 }} {{ toJson 0.0000001 }} {{ toJson 0.5 }} {{ toJson 100.0 }}",
            Ok("1e+21 1e-7 0.5 100"),
        ),
        (
            "{{ toJson . }}",
            Ok(
                "{\"a\":\"A\",\"b\":\"\",\"db-pass\":\"dashed\",\"multi\":\"l1\\nl2\",\"n\":\"42\",\"pw\":\"p\\u003c\\u0026\\u003e\\\"\\\\\"}",
            ),
        ),
        (
            "{{ toPrettyJson (dict \"a\" (list 1 2) \"b\" (dict) \"c\" list) }}",
            Ok("{\n  \"a\": [\n    1,\n    2\n  ],\n  \"b\": {},\n  \"c\": []\n}"),
        ),
        (
            "{{ (fromJson \"{\\\"port\\\": 8080, \\\"tags\\\": [\\\"a\\\"]}\").port }}",
            Ok("8080"),
        ),
        (
            "{{ $c := fromJson `{\"db\":{\"user\":\"u\"}}` }}{{ $c.db.user }}",
            Ok("u"),
        ),
        ("{{ fromJson \"bad\" }}", Ok("<no value>")),
        ("{{ mustFromJson \"{bad\" }}", Err("invalid JSON")),
        ("{{ toJson .missing }}", Ok("null")),
    ]);
}

#[test]
fn sprig_defaults_lists_and_dicts() {
    check(&[
        (
            "{{ default \"x\" .missing }}|{{ default \"x\" .b }}|{{ default \"x\" .a }}",
            Ok("x|x|A"),
        ),
        (
            "{{ .missing | default \"d\" }}|{{ default \"x\" 0 }}|{{ default \"x\" false }}|{{ default \"x\" list }}",
            Ok("d|x|x|x"),
        ),
        (
            "{{ empty .b }} {{ empty 0 }} {{ empty dict }} {{ empty .a }} {{ empty .missing }}",
            Ok("true true true false true"),
        ),
        (
            "{{ coalesce .missing .b .a }}|{{ coalesce 0 \"\" }}",
            Ok("A|<no value>"),
        ),
        (
            "{{ ternary \"y\" \"n\" true }}|{{ false | ternary \"y\" \"n\" }}",
            Ok("y|n"),
        ),
        (
            "{{ ternary \"y\" \"n\" \"true\" }}",
            Err("expected bool; got string"),
        ),
        (
            "{{ all 1 \"a\" }} {{ all 1 \"\" }} {{ any 0 \"a\" }} {{ any 0 \"\" }}",
            Ok("true false true false"),
        ),
        (
            "{{ list 1 \"a\" nil }}|{{ tuple 1 }}",
            Ok("[1 a <nil>]|[1]"),
        ),
        (
            "{{ $l := list 1 2 3 }}{{ first $l }} {{ last $l }} {{ rest $l }} {{ initial $l }} {{ reverse $l }}",
            Ok("1 3 [2 3] [1 2] [3 2 1]"),
        ),
        ("{{ first list }}", Ok("<no value>")),
        (
            "{{ append (list 1) 2 }} {{ prepend (list 1) 0 }} {{ concat (list 1) (list 2 3) }}",
            Ok("[1 2] [0 1] [1 2 3]"),
        ),
        (
            "{{ uniq (list 1 2 1 \"a\" \"a\") }} {{ has 2 (list 1 2) }} {{ has 5 (list 1 2) }} {{ without (list 1 2 3 2) 2 }}",
            Ok("[1 2 a] true false [1 3]"),
        ),
        ("{{ compact (list 1 \"\" 0 \"a\") }}", Ok("[1 a]")),
        (
            "{{ slice (list 1 2 3 4) 1 3 }} {{ slice (list 1 2 3) 1 }} {{ slice (list 1 2) }}",
            Ok("[2 3] [2 3] [1 2]"),
        ),
        (
            "{{ slice (list 1 2) 1 5 }}",
            Err("slice bounds out of range"),
        ),
        (
            "{{ slice \"abc\" 1 2 }}",
            Err("list should be type of slice or array but string"),
        ),
        ("{{ append \"x\" 1 }}", Err("cannot append on type string")),
        (
            "{{ $d := dict \"a\" 1 }}{{ $_ := set $d \"b\" 2 }}{{ $d }}",
            Ok("map[a:1 b:2]"),
        ),
        (
            "{{ $d := dict \"a\" 1 \"b\" 2 }}{{ $_ := unset $d \"a\" }}{{ $d }}",
            Ok("map[b:2]"),
        ),
        (
            "{{ get (dict \"a\" \"x\") \"a\" }}|{{ get (dict) \"a\" }}",
            Ok("x|"),
        ),
        // Like Go, Sprig's dict functions take map[string]interface{}: neither the data
        // map nor split's result (both map[string]string) qualify.
        (
            "{{ get . \"a\" }}",
            Err("expected map[string]interface {}; got map[string]string"),
        ),
        (
            "{{ hasKey (split \",\" \"a\") \"_0\" }}",
            Err("got map[string]string"),
        ),
        ("{{ dig \"a\" \"d\" . }}", Err("interface conversion")),
        (
            "{{ hasKey (dict \"a\" 1) \"a\" }} {{ hasKey (dict) \"zzz\" }}",
            Ok("true false"),
        ),
        (
            "{{ keys (dict \"b\" 1 \"a\" 2) | join \",\" }}|{{ values (dict \"b\" 1 \"a\" 2) }}",
            Ok("a,b|[2 1]"),
        ),
        ("{{ dict \"a\" }}", Ok("map[a:]")),
        (
            "{{ pluck \"a\" (dict \"a\" 1) (dict \"b\" 2) (dict \"a\" 3) }}",
            Ok("[1 3]"),
        ),
        (
            "{{ pick (dict \"a\" 1 \"b\" 2) \"a\" }} {{ omit (dict \"a\" 1 \"b\" 2) \"a\" }}",
            Ok("map[a:1] map[b:2]"),
        ),
        (
            "{{ dig \"a\" \"b\" \"def\" (dict \"a\" (dict \"b\" \"x\")) }}|{{ dig \"a\" \"z\" \"def\" (dict \"a\" (dict)) }}",
            Ok("x|def"),
        ),
        (
            "{{ $a := dict \"k\" (list 1) }}{{ $b := deepCopy $a }}{{ $_ := set $a \"k\" 2 }}{{ $b.k }}",
            Ok("[1]"),
        ),
        (
            "{{ typeOf 1 }} {{ kindOf (list) }} {{ typeIs \"string\" .a }} {{ kindIs \"map\" . }} {{ deepEqual (list 1) (list 1) }}",
            Ok("int slice true true true"),
        ),
        (
            "{{ get \"x\" \"a\" }}",
            Err("expected map[string]interface {}; got string"),
        ),
    ]);
}

/// Cases where an earlier kseal differed from Go 1.19 + Sprig 3.2.3 when both ran the
/// same templates side by side.
#[test]
fn matches_go_on_differentially_found_edge_cases() {
    check(&[
        (
            "{{ printf \"%+q|% x|%#x|% #x\" \"é\" \"hi\" \"hi\" \"hi\" }}",
            Ok("\"\\u00e9\"|68 69|0x6869|0x68 0x69"),
        ),
        (
            "{{ printf \"%[2]s %[1]s|%[3]s|%[1]s %s\" \"a\" \"b\" }}",
            Ok("b a|%!s(BADINDEX)|a b"),
        ),
        (
            "{{ b64dec \"aGk=aGk=\" }}",
            Ok("illegal base64 data at input byte 4"),
        ),
        // Sprig's nospace works on bytes: non-ASCII text is mangled as Latin-1.
        ("{{ nospace \"é é\" }}|{{ nospace \"éé\" }}", Ok("Ã©Ã©|éé")),
        (
            "{{ title \"ǆemal\" }} {{ lower \"İ\" }} {{ upper \"ß\" }}",
            Ok("ǅemal i ß"),
        ),
        ("{{ rest (list) }}|{{ initial (list) }}", Ok("[]|[]")),
        ("{{ print 1 | }}", Ok("1")),
        (
            "{{ float64 \"inf\" }} {{ float64 \"-Infinity\" }}",
            Ok("+Inf -Inf"),
        ),
        ("{{ deepCopy nil }}", Err("cannot copy nil")),
        (
            "{{ base \"/a/b/\" }}|{{ dir \"a/b/c\" }}|{{ clean \"a//b/./c/..\" }}|{{ ext \"a/b.tar.gz\" }}|{{ isAbs \"a\" }}",
            Ok("b|a/b|a/b|.gz|false"),
        ),
        (
            "{{ b32enc \"foobar\" }}|{{ b32dec \"MZXW6===\" }}|{{ b32dec \"MY=====A\" }}",
            Ok("MZXW6YTBOI======|foo|illegal base32 data at input byte 6"),
        ),
        (
            "{{ seq 3 }}|{{ seq 10 -3 1 }}|{{ untilStep 0 10 3 }}|{{ chunk 2 (list 1 2 3) }}|{{ initials \"hello big world\" }}",
            Ok("1 2 3|10 7 4 1|[0 3 6 9]|[[1 2] [3]]|hbw"),
        ),
    ]);
}

#[test]
fn unsupported_and_unknown_functions_are_named() {
    check(&[
        (
            "{{ randAlphaNum 5 }}",
            Err(
                "function \"randAlphaNum\" is not supported by kseal: its result is not deterministic",
            ),
        ),
        (
            "{{ uuidv4 }}",
            Err("function \"uuidv4\" is not supported by kseal"),
        ),
        (
            "{{ now }}",
            Err("function \"now\" is not supported by kseal"),
        ),
        ("{{ genPrivateKey \"rsa\" }}", Err("not deterministic")),
        ("{{ htpasswd \"u\" .a }}", Err("not deterministic")),
        // Removed by Bitnami, so undefined as there.
        ("{{ env \"HOME\" }}", Err("function \"env\" not defined")),
        (
            "{{ expandenv \"$HOME\" }}",
            Err("function \"expandenv\" not defined"),
        ),
        (
            "{{ getHostByName \"x\" }}",
            Err("function \"getHostByName\" not defined"),
        ),
        // Helm, not Sprig: undefined in Bitnami too.
        (
            "{{ required \"x\" .a }}",
            Err("function \"required\" not defined (it is a Helm function"),
        ),
        (
            "{{ regexMatch \"a\" .a }}",
            Err("function \"regexMatch\" is not supported by kseal yet"),
        ),
        ("{{ nope }}", Err("function \"nope\" not defined")),
        ("{{ fail \"boom\" }}", Err("error calling fail: boom")),
    ]);
}

#[test]
fn error_positions_name_the_key_line_and_column() {
    let err = Template::parse("config.json", "line1\n  {{ nope }}").unwrap_err();
    assert_eq!(err.key(), "config.json");
    assert_eq!((err.line(), err.column()), (2, 6));
    assert_eq!(
        err.to_string(),
        "template `config.json`: line 2, column 6: function \"nope\" not defined"
    );
    let err = render("ab\n{{ .a }}{{ index (list 1) 3 }}").unwrap_err();
    assert_eq!((err.line(), err.column()), (2, 12));
    assert_eq!(err.message(), "error calling index: index out of range: 3");
}

#[test]
fn errors_never_show_plaintext() {
    let secret = "p<&>\"\\";
    for src in [
        "{{ fail .pw }}",
        "{{ .pw | fail }}",
        "{{ .pw.field }}",
        "{{ eq .pw 1 }}",
        "{{ range .pw }}{{ end }}",
        "{{ index .pw 99 }}",
        "{{ mustFromJson .pw }}",
        "{{ printf 5 .pw }}",
        "{{ upper (list .pw) }}",
        "{{ lt (list .pw) 1 }}",
        "{{ ternary .pw .pw .pw }}",
        "{{ get .pw \"a\" }}",
        "{{ slice .pw 1 }}",
        "{{ int .pw | repeat 99999999 }}",
    ] {
        let err = render(src).expect_err(src);
        let text = err.to_string();
        for needle in [secret, "p<&>"] {
            assert!(!text.contains(needle), "{src}: {text}");
        }
    }
    let err = render("{{ fail .pw }}").unwrap_err();
    assert!(err.message().contains("message not shown"), "{err}");
}

#[test]
fn bitnami_config_template_example_renders_json() {
    // The shape of Bitnami's docs/examples/config-template: a JSON config file whose
    // secret fields come from decrypted items through toJson.
    let items: BTreeMap<String, ByteString> = [("server1", "s3cr3t-1"), ("server2", "pa\"ss<2>")]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), ByteString(v.as_bytes().to_vec())))
        .collect();
    let template = r#"{
  "servers": [
    {"name": "server1", "password": {{ toJson .server1 }}},
    {"name": "server2", "password": {{ toJson .server2 }}}
  ]
}
"#;
    let templates: BTreeMap<String, Option<String>> = [
        ("config.json".to_owned(), Some(template.to_owned())),
        ("server2".to_owned(), None),
    ]
    .into();
    let rendered = render_template_data(&templates, &items).unwrap();
    let config = rendered["config.json"].as_deref().unwrap();
    let parsed: serde_json::Value = serde_json::from_slice(config).unwrap();
    assert_eq!(parsed["servers"][0]["password"], "s3cr3t-1");
    assert_eq!(parsed["servers"][1]["password"], "pa\"ss<2>");
    assert!(
        std::str::from_utf8(config)
            .unwrap()
            .contains(r#""pa\"ss\u003c2\u003e""#)
    );
    // A null template removes the item of that name (Bitnami deletes it).
    assert_eq!(rendered["server2"], None);
}

#[test]
fn render_template_data_aggregates_sorted_errors_by_key() {
    let templates: BTreeMap<String, Option<String>> = [
        ("z".to_owned(), Some("{{ nope }}".to_owned())),
        ("a".to_owned(), Some("{{ .a".to_owned())),
        ("ok".to_owned(), Some("{{ .a }}".to_owned())),
    ]
    .into();
    let err = render_template_data(&templates, &data()).unwrap_err();
    let Error::TemplateData { errors } = &err else {
        panic!("unexpected error {err:?}");
    };
    let keys: Vec<&str> = errors.iter().map(TemplateError::key).collect();
    assert_eq!(keys, ["a", "z"]);
    assert_eq!(
        err.to_string(),
        "failed to render spec.template.data: template `a`: line 1, column 1: unclosed action; \
         template `z`: line 1, column 4: function \"nope\" not defined"
    );
}

#[test]
fn hostile_templates_hit_limits_instead_of_exhausting_resources() {
    // Just inside the limit, deep nesting still renders (and does not overflow the stack).
    let ok_if = format!("{}x{}", "{{ if 1 }}".repeat(99), "{{ end }}".repeat(99));
    assert_eq!(render(&ok_if).unwrap(), "x");
    let ok_parens = format!("{{{{ {}.a{} }}}}", "(print ".repeat(99), ")".repeat(99));
    assert_eq!(render(&ok_parens).unwrap(), "A");
    // Recursion through templates whose bodies nest deeply stays within the stack.
    let nested_recursion = format!(
        "{{{{ define \"r\" }}}}{}{{{{ template \"r\" (list (print (print .))) }}}}{}{{{{ end }}}}{{{{ template \"r\" . }}}}",
        "{{ if 1 }}{{ with 1 }}{{ range list 1 }}".repeat(30),
        "{{ end }}{{ end }}{{ end }}".repeat(30)
    );
    assert!(
        render(&nested_recursion)
            .unwrap_err()
            .message()
            .contains("nested deeper")
    );
    let deep_if = format!("{}{}", "{{ if 1 }}".repeat(150), "{{ end }}".repeat(150));
    assert!(
        render(&deep_if)
            .unwrap_err()
            .message()
            .contains("nested deeper than 100")
    );
    let deep_parens = format!("{{{{ {}1{} }}}}", "(".repeat(500), ")".repeat(500));
    assert!(
        render(&deep_parens)
            .unwrap_err()
            .message()
            .contains("nested deeper")
    );
    let big = "{{ range until 2000 }}{{ repeat 4000 \"x\" }}{{ end }}";
    assert!(
        render(big)
            .unwrap_err()
            .message()
            .contains("output larger than 4 MiB")
    );
    let slow = "{{ range 100000 }}{{ range 100000 }}{{ end }}{{ end }}";
    assert!(
        render(slow)
            .unwrap_err()
            .message()
            .contains("exceeded 10000000 steps")
    );
    let quadratic = "{{ $l := until 100000 }}{{ range $l }}{{ $_ := has -1 $l }}{{ end }}";
    assert!(render(quadratic).unwrap_err().message().contains("steps"));
    let mut many_vars: String = (0..50_000)
        .map(|i| format!("{{{{ $v{i} := 1 }}}}"))
        .collect();
    many_vars.push_str(&"{{ $.a }}".repeat(50_000));
    assert!(render(&many_vars).unwrap_err().message().contains("steps"));
    let hoarding = "{{ range 100000 }}{{ $x := repeat 1000 \"x\" }}{{ end }}";
    assert!(
        render(hoarding)
            .unwrap_err()
            .message()
            .contains("allocated more than 64 MiB")
    );
    let doubling =
        "{{ $s := \"xxxxxxxxxxxxxxxx\" }}{{ range until 40 }}{{ $s = print $s $s }}{{ end }}";
    assert!(
        render(doubling)
            .unwrap_err()
            .message()
            .contains("larger than")
    );
    let cycle = "{{ $d := dict }}{{ $_ := set $d \"self\" $d }}{{ $d }}";
    assert!(
        render(cycle)
            .unwrap_err()
            .message()
            .contains("nested too deeply")
    );
    let cycle_json = "{{ $d := dict }}{{ $_ := set $d \"self\" $d }}{{ toJson $d }}";
    assert!(
        render(cycle_json)
            .unwrap_err()
            .message()
            .contains("nested too deeply")
    );
    let _ = MAX_OUTPUT;
}

#[test]
fn binary_items_pass_through_byte_for_byte() {
    let items: BTreeMap<String, ByteString> =
        [("bin".to_owned(), ByteString(vec![0xff, 0x00, 0xfe]))].into();
    let t = Template::parse("k", "{{ .bin }}").unwrap();
    assert_eq!(t.render(&items).unwrap(), [0xff, 0x00, 0xfe]);
    let t = Template::parse("k", "{{ toJson .bin }}").unwrap();
    assert_eq!(t.render(&items).unwrap(), b"\"\\ufffd\\u0000\\ufffd\"");
    let t = Template::parse("k", "{{ b64enc .bin }}").unwrap();
    assert_eq!(t.render(&items).unwrap(), b"/wD+");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_templates_never_panic(src in "\\PC{0,80}") {
        let _ = render(&src);
    }

    #[test]
    fn template_shaped_input_never_panics(
        parts in proptest::collection::vec(
            proptest::sample::select(vec![
                "{{", "}}", "{{-", "-}}", " ", ".a", ".b", ".missing", "$", "$x", ":=", "=", "|",
                "(", ")", "\"s\"", "`r`", "'c'", "1", "-2", "1.5", "0x1f", "true", "nil", ",",
                "if", "else", "end", "range", "with", "break", "continue", "len", "index",
                "printf", "\"%v %d %q %5.2f %x\"", "toJson", "fromJson", "dict", "list", "set",
                "default", "eq", "lt", "and", "or", "not", "repeat", "substr", "slice", "until",
                "b64dec", "/*", "*/", "\n", "split", "join", "indent", "replace", "trimAll",
            ]),
            0..40,
        )
    ) {
        let _ = render(&parts.concat());
    }
}
