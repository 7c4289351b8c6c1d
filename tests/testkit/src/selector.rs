//! Label and field selectors (`labelSelector=`, `fieldSelector=`).

use serde_json::Value;

use crate::error::{ApiError, ApiResult};

#[derive(Debug, Clone)]
enum Op {
    Eq(String),
    Ne(String),
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    NotExists,
}

#[derive(Debug, Clone)]
struct Requirement {
    key: String,
    op: Op,
}

impl Requirement {
    fn matches(&self, value: Option<&str>) -> bool {
        match (&self.op, value) {
            (Op::Eq(v), Some(x)) => x == v,
            (Op::Eq(_), None) => false,
            (Op::Ne(v), x) => x != Some(v.as_str()),
            (Op::In(vs), Some(x)) => vs.iter().any(|v| v == x),
            (Op::In(_), None) => false,
            (Op::NotIn(vs), x) => x.is_none_or(|x| !vs.iter().any(|v| v == x)),
            (Op::Exists, x) => x.is_some(),
            (Op::NotExists, x) => x.is_none(),
        }
    }
}

/// Splits on commas that are not inside parentheses.
fn split_top(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out.into_iter()
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect()
}

fn parse_set(rest: &str, whole: &str) -> ApiResult<Vec<String>> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| ApiError::bad_request(format!("unable to parse requirement: {whole}")))?;
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
        .collect())
}

fn parse_requirement(part: &str, allow_sets: bool) -> ApiResult<Requirement> {
    let err = || ApiError::bad_request(format!("unable to parse requirement: found '{part}'"));
    if let Some(key) = part.strip_prefix('!') {
        if !allow_sets {
            return Err(err());
        }
        return Ok(Requirement {
            key: key.trim().to_owned(),
            op: Op::NotExists,
        });
    }
    for (tok, ne) in [("!=", true), ("==", false), ("=", false)] {
        if let Some((k, v)) = part.split_once(tok) {
            let (k, v) = (k.trim().to_owned(), v.trim().to_owned());
            if k.is_empty() {
                return Err(err());
            }
            return Ok(Requirement {
                key: k,
                op: if ne { Op::Ne(v) } else { Op::Eq(v) },
            });
        }
    }
    if allow_sets {
        if let Some((k, rest)) = part.split_once(" notin ") {
            return Ok(Requirement {
                key: k.trim().to_owned(),
                op: Op::NotIn(parse_set(rest, part)?),
            });
        }
        if let Some((k, rest)) = part.split_once(" in ") {
            return Ok(Requirement {
                key: k.trim().to_owned(),
                op: Op::In(parse_set(rest, part)?),
            });
        }
        if !part.contains([' ', '(', ')']) {
            return Ok(Requirement {
                key: part.to_owned(),
                op: Op::Exists,
            });
        }
    }
    Err(err())
}

/// A label selector: all requirements must match.
#[derive(Debug, Clone, Default)]
pub(crate) struct LabelSelector(Vec<Requirement>);

impl LabelSelector {
    pub(crate) fn parse(s: Option<&str>) -> ApiResult<Self> {
        let Some(s) = s else {
            return Ok(Self::default());
        };
        split_top(s)
            .into_iter()
            .map(|p| parse_requirement(p, true))
            .collect::<ApiResult<_>>()
            .map(Self)
    }

    /// Whether the selector is empty (matches everything).
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub(crate) fn matches(&self, obj: &Value) -> bool {
        let labels = &obj["metadata"]["labels"];
        self.0
            .iter()
            .all(|r| r.matches(labels.get(&r.key).and_then(Value::as_str)))
    }
}

/// A field selector: dotted paths to scalars; which paths a type allows is checked with
/// [`FieldSelector::check`].
#[derive(Debug, Clone, Default)]
pub(crate) struct FieldSelector(Vec<Requirement>);

impl FieldSelector {
    pub(crate) fn parse(s: Option<&str>) -> ApiResult<Self> {
        let Some(s) = s else {
            return Ok(Self::default());
        };
        split_top(s)
            .into_iter()
            .map(|p| parse_requirement(p, false))
            .collect::<ApiResult<_>>()
            .map(Self)
    }

    /// Rejects field labels the type does not support, with the apiserver's messages
    /// (`custom`: the type has its own field label conversion).
    pub(crate) fn check(&self, extra: &[&str], custom: bool) -> ApiResult<()> {
        for r in &self.0 {
            let k = r.key.as_str();
            if k == "metadata.name" || k == "metadata.namespace" || extra.contains(&k) {
                continue;
            }
            return Err(ApiError::bad_request(if custom {
                format!("field label not supported: {k}")
            } else {
                format!(
                    "{k:?} is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
                )
            }));
        }
        Ok(())
    }

    /// Whether the selector is empty (matches everything).
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub(crate) fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|r| {
            let mut cur = obj;
            for seg in r.key.split('.') {
                cur = &cur[seg];
            }
            let text = match cur {
                Value::String(s) => Some(s.clone()),
                Value::Bool(b) => Some(b.to_string()),
                Value::Number(n) => Some(n.to_string()),
                // Missing fields compare as the empty string, as in the apiserver's field sets.
                _ => Some(String::new()),
            };
            r.matches(text.as_deref())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_selector_supports_equality_sets_and_existence() {
        let obj = json!({"metadata": {"labels": {"app": "a", "tier": "web"}}});
        for (sel, want) in [
            ("app=a", true),
            ("app==a,tier=web", true),
            ("app!=a", false),
            ("app in (a, b)", true),
            ("app notin (a)", false),
            ("tier", true),
            ("!tier", false),
            ("missing!=x", true),
            ("app in (b),tier", false),
        ] {
            assert_eq!(
                LabelSelector::parse(Some(sel)).unwrap().matches(&obj),
                want,
                "{sel}"
            );
        }
    }

    #[test]
    fn field_selector_matches_metadata_name_and_namespace() {
        let obj = json!({"metadata": {"name": "x", "namespace": "n"}});
        assert!(
            FieldSelector::parse(Some("metadata.name=x,metadata.namespace=n"))
                .unwrap()
                .matches(&obj)
        );
        assert!(
            !FieldSelector::parse(Some("metadata.name!=x"))
                .unwrap()
                .matches(&obj)
        );
        assert!(FieldSelector::parse(Some("bad")).is_err());
    }
}
