//! `kseal_api::validation` against apimachinery's rules: the test vectors of
//! `k8s.io/apimachinery` (`validation_test.go`, `content/dns_test.go`, `content/kube_test.go`)
//! and its exact messages.

use kseal_api::validation::{
    is_config_map_key, is_dns1035_label, is_dns1123_label, is_dns1123_subdomain, is_qualified_name,
    is_valid_label_value, validate_annotation_key, validate_namespace_name,
    validate_secret_generate_name, validate_secret_name, validate_service_name,
};

const LABEL_REGEX_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const SUBDOMAIN_REGEX_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const NAME_PART_REGEX_MSG: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const LABEL_VALUE_REGEX_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
const CONFIG_KEY_REGEX_MSG: &str = "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')";

fn problems(r: Result<(), kseal_api::validation::InvalidName>) -> Vec<String> {
    match r {
        Ok(()) => Vec::new(),
        Err(e) => {
            assert!(!e.problems().is_empty(), "an error lists its problems");
            e.problems().to_vec()
        }
    }
}

fn a(n: usize) -> String {
    "a".repeat(n)
}

/// apimachinery's good DNS-1123 labels that start with a letter: good DNS-1035 labels too.
const LETTER_FIRST_LABELS: &[&str] = &["a", "ab", "abc", "a1", "a-1", "a--1--2--b"];
/// apimachinery's good DNS-1123 labels that start with a digit: bad DNS-1035 labels.
const DIGIT_FIRST_LABELS: &[&str] = &["0", "01", "012", "1a", "1-a", "1--a--b--2"];
/// apimachinery's bad DNS-1123 labels (bad DNS-1035 labels too), plus non-ASCII and NUL.
#[rustfmt::skip]
const BAD_LABELS: &[&str] = &[
    "", "A", "ABC", "aBc", "A1", "A-1", "1-A", "-", "a-", "-a", "1-", "-1", "_", "a_", "_a",
    "a_b", "1_", "_1", "1_2", ".", "a.", ".a", "a.b", "1.", ".1", "1.2", " ", "a ", " a",
    "a b", "1 ", " 1", "1 2", "é", "a\u{0}",
];

#[test]
fn dns1123_label_accepts_and_rejects_apimachinery_vectors() {
    let good = LETTER_FIRST_LABELS.iter().chain(DIGIT_FIRST_LABELS);
    for v in good.map(|s| s.to_string()).chain([a(63)]) {
        assert_eq!(is_dns1123_label(&v), Ok(()), "{v:?}");
    }
    for v in BAD_LABELS.iter().map(|s| s.to_string()).chain([a(64)]) {
        assert!(is_dns1123_label(&v).is_err(), "{v:?}");
    }
}

#[test]
fn dns1123_label_messages_match_apimachinery() {
    assert_eq!(problems(is_dns1123_label("My_Name")), [LABEL_REGEX_MSG]);
    // A valid subdomain that is not a label: the dots are named.
    assert_eq!(problems(is_dns1123_label("a.b")), ["must not contain dots"]);
    assert_eq!(
        problems(is_dns1123_label(&a(64))),
        ["must be no more than 63 characters"]
    );
    assert_eq!(
        problems(is_dns1123_label(&format!("{}.b", a(70)))),
        [
            "must be no more than 63 characters",
            "must not contain dots"
        ]
    );
    assert_eq!(
        problems(is_dns1123_label(&format!("-{}", a(70)))),
        ["must be no more than 63 characters", LABEL_REGEX_MSG]
    );
}

#[test]
fn dns1035_label_accepts_and_rejects_apimachinery_vectors() {
    for v in LETTER_FIRST_LABELS
        .iter()
        .map(|s| s.to_string())
        .chain([a(63)])
    {
        assert_eq!(is_dns1035_label(&v), Ok(()), "{v:?}");
        assert_eq!(validate_service_name(&v), Ok(()), "{v:?}");
    }
    let bad = DIGIT_FIRST_LABELS.iter().chain(BAD_LABELS);
    for v in bad.map(|s| s.to_string()).chain([a(64)]) {
        assert!(is_dns1035_label(&v).is_err(), "{v:?}");
    }
}

#[test]
fn dns1035_label_messages_match_apimachinery() {
    const MSG: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";
    assert_eq!(problems(is_dns1035_label("1abc")), [MSG]);
    assert_eq!(
        problems(is_dns1035_label(&a(64))),
        ["must be no more than 63 characters"]
    );
    assert_eq!(
        problems(is_dns1035_label(&format!("9{}", a(70)))),
        ["must be no more than 63 characters", MSG]
    );
}

#[test]
fn dns1123_subdomain_accepts_and_rejects_apimachinery_vectors() {
    let good = [
        "a",
        "ab",
        "abc",
        "a1",
        "a-1",
        "a--1--2--b",
        "0",
        "01",
        "012",
        "1a",
        "1-a",
        "1--a--b--2",
        "a.a",
        "ab.a",
        "abc.a",
        "a1.a",
        "a-1.a",
        "a--1--2--b.a",
        "a.1",
        "ab.1",
        "abc.1",
        "a1.1",
        "a-1.1",
        "a--1--2--b.1",
        "0.a",
        "01.a",
        "012.a",
        "1a.a",
        "1-a.a",
        "0.1",
        "01.1",
        "012.1",
        "1a.1",
        "1-a.1",
        "1--a--b--2.1",
        "a.b.c.d.e",
        "aa.bb.cc.dd.ee",
        "1.2.3.4.5",
        "11.22.33.44.55",
    ];
    // Parts are not limited to 63 characters, only the whole.
    let long_part = format!("{}.b", a(100));
    for v in good
        .iter()
        .map(|s| s.to_string())
        .chain([a(253), long_part])
    {
        assert_eq!(is_dns1123_subdomain(&v), Ok(()), "{v:?}");
    }
    let bad = [
        "",
        "A",
        "ABC",
        "aBc",
        "A1",
        "A-1",
        "1-A",
        "-",
        "a-",
        "-a",
        "1-",
        "-1",
        "_",
        "a_",
        "_a",
        "a_b",
        "1_",
        "_1",
        "1_2",
        ".",
        "a.",
        ".a",
        "a..b",
        "1.",
        ".1",
        "1..2",
        " ",
        "a ",
        " a",
        "a b",
        "1 ",
        " 1",
        "1 2",
        "A.a",
        "aB.a",
        "ab.A",
        "A1.a",
        "a1.A",
        "A.1",
        "aB.1",
        "A1.1",
        "1A.1",
        "0.A",
        "01.A",
        "012.A",
        "1A.a",
        "1a.A",
        "A.B.C.D.E",
        "AA.BB.CC.DD.EE",
        "a.B.c.d.e",
        "aa.bB.cc.dd.ee",
        "a@b",
        "a,b",
        "a;b",
        "a:b",
        "a%b",
        "a?b",
        "a$b",
        "a/b",
        "a-.b",
        "a.-b",
    ];
    for v in bad.iter().map(|s| s.to_string()).chain([a(254)]) {
        assert!(is_dns1123_subdomain(&v).is_err(), "{v:?}");
    }
}

#[test]
fn dns1123_subdomain_messages_match_apimachinery() {
    assert_eq!(problems(is_dns1123_subdomain("a_b")), [SUBDOMAIN_REGEX_MSG]);
    assert_eq!(
        problems(is_dns1123_subdomain(&a(254))),
        ["must be no more than 253 characters"]
    );
    assert_eq!(
        problems(is_dns1123_subdomain(&format!("{}-", a(254)))),
        ["must be no more than 253 characters", SUBDOMAIN_REGEX_MSG]
    );
}

#[test]
fn qualified_name_accepts_and_rejects_apimachinery_vectors() {
    let good = [
        "simple",
        "now-with-dashes",
        "1-starts-with-num",
        "1234",
        "simple/simple",
        "now-with-dashes/simple",
        "now-with-dashes/now-with-dashes",
        "now.with.dots/simple",
        "now-with.dashes-and.dots/simple",
        "1-num.2-num/3-num",
        "1234/5678",
        "1.2.3.4/5678",
        "Uppercase_Is_OK_123",
        "example.com/Uppercase_Is_OK_123",
        "requests.storage-foo",
        "sealedsecrets.bitnami.com/sealed-secrets-key",
    ];
    let long = format!("{}/{}", a(253), "b".repeat(63));
    for v in good.iter().map(|s| s.to_string()).chain([a(63), long]) {
        assert_eq!(is_qualified_name(&v), Ok(()), "{v:?}");
    }
    let bad = [
        "nospecialchars%^=@",
        "cantendwithadash-",
        "-cantstartwithadash-",
        "only/one/slash",
        "Example.com/abc",
        "example_com/abc",
        "example.com/",
        "/simple",
        "",
        "a b",
        "ünïcode",
    ];
    let long_prefix = format!("{}/abc", a(254));
    for v in bad
        .iter()
        .map(|s| s.to_string())
        .chain([a(64), long_prefix])
    {
        assert!(is_qualified_name(&v).is_err(), "{v:?}");
    }
}

#[test]
fn qualified_name_messages_match_apimachinery() {
    assert_eq!(
        problems(is_qualified_name("")),
        ["name part must be non-empty", NAME_PART_REGEX_MSG]
    );
    assert_eq!(
        problems(is_qualified_name(&a(64))),
        ["name part must be no more than 63 characters"]
    );
    assert_eq!(problems(is_qualified_name("-x-")), [NAME_PART_REGEX_MSG]);
    assert_eq!(
        problems(is_qualified_name("/simple")),
        ["prefix part must be non-empty"]
    );
    assert_eq!(
        problems(is_qualified_name("Example.com/")),
        [
            format!("prefix part {SUBDOMAIN_REGEX_MSG}"),
            "name part must be non-empty".to_owned(),
            NAME_PART_REGEX_MSG.to_owned(),
        ]
    );
    assert_eq!(
        problems(is_qualified_name(&format!("{}/ok", a(254)))),
        ["prefix part must be no more than 253 characters"]
    );
    assert_eq!(
        problems(is_qualified_name("only/one/slash")),
        [
            "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    );
}

#[test]
fn label_value_accepts_and_rejects_apimachinery_vectors() {
    let good = [
        "simple",
        "now-with-dashes",
        "1-starts-with-num",
        "end-with-num-1",
        "1234",
        "",
        "Mixed_Case.value",
    ];
    for v in good.iter().map(|s| s.to_string()).chain([a(63)]) {
        assert_eq!(is_valid_label_value(&v), Ok(()), "{v:?}");
    }
    let bad = [
        "nospecialchars%^=@",
        "Tama-nui-te-rā.is.Māori.sun",
        "\\backslashes\\are\\bad",
        "-starts-with-dash",
        "ends-with-dash-",
        ".starts.with.dot",
        "ends.with.dot.",
        "with/slash",
        " ",
    ];
    for v in bad.iter().map(|s| s.to_string()).chain([a(64)]) {
        assert!(is_valid_label_value(&v).is_err(), "{v:?}");
    }
}

#[test]
fn label_value_messages_match_apimachinery() {
    assert_eq!(
        problems(is_valid_label_value("-x")),
        [LABEL_VALUE_REGEX_MSG]
    );
    assert_eq!(
        problems(is_valid_label_value(&a(64))),
        ["must be no more than 63 characters"]
    );
    assert_eq!(
        problems(is_valid_label_value(&format!("{}-", a(64)))),
        ["must be no more than 63 characters", LABEL_VALUE_REGEX_MSG]
    );
}

#[test]
fn config_map_key_accepts_and_rejects_apimachinery_vectors() {
    let good = [
        "a",
        "good",
        "good_key",
        "good-key",
        ".good",
        "good.key",
        "Good.Key_1",
        "_-_",
        "tls.crt",
        "a..b",
    ];
    for v in good.iter().map(|s| s.to_string()).chain([a(253)]) {
        assert_eq!(is_config_map_key(&v), Ok(()), "{v:?}");
    }
    let bad = [
        "", ".", "..", "..bad", "b*d", "bad!&bad", "a/b", "a b", "ключ",
    ];
    for v in bad.iter().map(|s| s.to_string()).chain([a(254)]) {
        assert!(is_config_map_key(&v).is_err(), "{v:?}");
    }
}

#[test]
fn config_map_key_messages_match_apimachinery() {
    assert_eq!(problems(is_config_map_key("a/b")), [CONFIG_KEY_REGEX_MSG]);
    assert_eq!(problems(is_config_map_key("")), [CONFIG_KEY_REGEX_MSG]);
    assert_eq!(problems(is_config_map_key(".")), ["must not be '.'"]);
    assert_eq!(problems(is_config_map_key("..")), ["must not be '..'"]);
    assert_eq!(
        problems(is_config_map_key("..a/")),
        [CONFIG_KEY_REGEX_MSG, "must not start with '..'"]
    );
    assert_eq!(
        problems(is_config_map_key(&a(254))),
        ["must be no more than 253 characters"]
    );
}

#[test]
fn namespaces_are_labels_and_secret_names_are_subdomains() {
    assert_eq!(validate_namespace_name("kube-system"), Ok(()));
    assert!(validate_namespace_name("team.a").is_err());
    assert!(validate_namespace_name("-team").is_err());
    assert!(validate_namespace_name("team-").is_err());
    assert_eq!(validate_secret_name("db.credentials-1"), Ok(()));
    assert!(validate_secret_name("DB").is_err());
    assert!(validate_secret_name("db_credentials").is_err());
    let err = validate_namespace_name("a.b").unwrap_err();
    assert_eq!(err.to_string(), "must not contain dots");
    let err = validate_namespace_name(&format!("-{}", a(70))).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("must be no more than 63 characters; {LABEL_REGEX_MSG}")
    );
}

#[test]
fn annotation_keys_are_checked_lower_cased_as_the_apiserver_does() {
    assert_eq!(validate_annotation_key("Example.COM/Owner"), Ok(()));
    assert!(is_qualified_name("Example.COM/Owner").is_err());
    assert_eq!(
        problems(validate_annotation_key("Example_com/x")),
        [format!("prefix part {SUBDOMAIN_REGEX_MSG}")]
    );
}

#[test]
fn a_generate_name_may_end_with_a_dash_but_is_otherwise_a_subdomain() {
    for ok in [
        "sealed-secrets-key",
        "sealed-secrets-key-",
        "keys.example-",
        "a",
    ] {
        assert_eq!(validate_secret_generate_name(ok), Ok(()), "{ok:?}");
    }
    for bad in ["", "-", "-keys", "Keys-", "keys--.", "keys_"] {
        assert!(validate_secret_generate_name(bad).is_err(), "{bad:?}");
    }
    assert_eq!(
        problems(validate_secret_generate_name("Keys-")),
        [SUBDOMAIN_REGEX_MSG]
    );
}
