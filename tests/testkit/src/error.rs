//! API errors rendered as `meta.k8s.io/v1` `Status` bodies, shaped like the apiserver's.

use serde_json::{Value, json};

/// An error response of the test API server.
#[derive(Debug, Clone)]
pub(crate) struct ApiError {
    pub(crate) code: u16,
    pub(crate) reason: &'static str,
    pub(crate) message: String,
    /// `details` of the Status: name, group, kind (the resource, as the apiserver does).
    pub(crate) details: Option<Box<Details>>,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct Details {
    pub(crate) name: String,
    pub(crate) group: String,
    pub(crate) kind: String,
    pub(crate) causes: Vec<Value>,
}

pub(crate) type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    pub(crate) fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    pub(crate) fn with_details(mut self, group: &str, resource: &str, name: &str) -> Self {
        self.details = Some(Box::new(Details {
            name: name.to_owned(),
            group: group.to_owned(),
            kind: resource.to_owned(),
            causes: Vec::new(),
        }));
        self
    }

    /// `404 NotFound` for a named object: `configmaps "x" not found`.
    pub(crate) fn not_found(group: &str, resource: &str, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", qualified(group, resource)),
        )
        .with_details(group, resource, name)
    }

    /// `404` for a path the server does not serve at all.
    pub(crate) fn no_route() -> Self {
        let mut e = Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        );
        e.details = Some(Box::default());
        e
    }

    /// `409 AlreadyExists`.
    pub(crate) fn already_exists(group: &str, resource: &str, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", qualified(group, resource)),
        )
        .with_details(group, resource, name)
    }

    /// `409 Conflict` for a stale resourceVersion.
    pub(crate) fn conflict(group: &str, resource: &str, name: &str) -> Self {
        Self::conflict_msg(
            group,
            resource,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// `409 Conflict` with a custom cause text.
    pub(crate) fn conflict_msg(group: &str, resource: &str, name: &str, msg: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {msg}",
                qualified(group, resource)
            ),
        )
        .with_details(group, resource, name)
    }

    /// `422 Invalid` with field errors, rendered like `field.ErrorList`.
    pub(crate) fn invalid(group: &str, kind: &str, name: &str, errors: &[FieldError]) -> Self {
        let list = if errors.len() == 1 {
            errors[0].to_string()
        } else {
            format!(
                "[{}]",
                errors
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        let mut e = Self::new(
            422,
            "Invalid",
            format!("{} \"{name}\" is invalid: {list}", qualified(group, kind)),
        );
        e.details = Some(Box::new(Details {
            name: name.to_owned(),
            group: group.to_owned(),
            kind: kind.to_owned(),
            causes: errors
                .iter()
                .map(|f| json!({"reason": f.reason, "message": f.detail_message(), "field": f.field}))
                .collect(),
        }));
        e
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    pub(crate) fn method_not_allowed() -> Self {
        let mut e = Self::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        );
        e.details = Some(Box::default());
        e
    }

    pub(crate) fn unsupported_media_type() -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            "the body of the request was in an unknown format - accepted media types include: \
             application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
        )
    }

    /// The apiserver's generic `422` for a JSON patch that cannot be applied.
    pub(crate) fn patch_rejected() -> Self {
        let mut e = Self::new(
            422,
            "Invalid",
            "the server rejected our request due to an error in our request",
        );
        e.details = Some(Box::default());
        e
    }

    /// `410 Expired` for a watch or list from a compacted resourceVersion.
    pub(crate) fn expired(rv: u64, oldest: u64) -> Self {
        Self::new(
            410,
            "Expired",
            format!("too old resource version: {rv} ({oldest})"),
        )
    }

    /// A Status for an injected fault with the given code.
    pub(crate) fn injected(code: u16) -> Self {
        let reason = match code {
            400 => "BadRequest",
            401 => "Unauthorized",
            403 => "Forbidden",
            404 => "NotFound",
            409 => "Conflict",
            410 => "Expired",
            422 => "Invalid",
            429 => "TooManyRequests",
            503 => "ServiceUnavailable",
            504 => "Timeout",
            _ => "InternalError",
        };
        Self::new(code, reason, format!("injected fault: {reason} ({code})"))
    }

    /// The `Status` object.
    pub(crate) fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if self.reason.is_empty()
            && let Some(m) = status.as_object_mut()
        {
            m.remove("reason");
        }
        if let Some(d) = &self.details {
            let mut det = serde_json::Map::new();
            if !d.name.is_empty() {
                det.insert("name".into(), d.name.clone().into());
            }
            if !d.group.is_empty() {
                det.insert("group".into(), d.group.clone().into());
            }
            if !d.kind.is_empty() {
                det.insert("kind".into(), d.kind.clone().into());
            }
            if !d.causes.is_empty() {
                det.insert("causes".into(), Value::Array(d.causes.clone()));
            }
            status["details"] = Value::Object(det);
        }
        status
    }
}

/// `configmaps` or `leases.coordination.k8s.io`.
pub(crate) fn qualified(group: &str, resource: &str) -> String {
    if group.is_empty() {
        resource.to_owned()
    } else {
        format!("{resource}.{group}")
    }
}

/// One `field.Error`, printed as the apiserver does: `metadata.name: Required value: ...`.
#[derive(Debug, Clone)]
pub(crate) struct FieldError {
    pub(crate) field: String,
    pub(crate) reason: &'static str,
    pub(crate) detail: String,
    pub(crate) value: Option<String>,
}

impl FieldError {
    pub(crate) fn required(field: &str, detail: &str) -> Self {
        Self {
            field: field.into(),
            reason: "FieldValueRequired",
            detail: detail.into(),
            value: None,
        }
    }
    pub(crate) fn forbidden(field: &str, detail: &str) -> Self {
        Self {
            field: field.into(),
            reason: "FieldValueForbidden",
            detail: detail.into(),
            value: None,
        }
    }
    pub(crate) fn invalid(field: &str, value: &str, detail: &str) -> Self {
        Self {
            field: field.into(),
            reason: "FieldValueInvalid",
            detail: detail.into(),
            value: Some(value.into()),
        }
    }
    fn type_text(&self) -> &'static str {
        match self.reason {
            "FieldValueRequired" => "Required value",
            "FieldValueForbidden" => "Forbidden",
            "FieldValueTooLong" => "Too long",
            "FieldValueNotSupported" => "Unsupported value",
            _ => "Invalid value",
        }
    }
    fn detail_message(&self) -> String {
        let mut s = match &self.value {
            Some(v) => format!("{}: {v}", self.type_text()),
            None => self.type_text().to_owned(),
        };
        // apimachinery's ErrorBody appends the detail only when there is one.
        if !self.detail.is_empty() {
            s.push_str(": ");
            s.push_str(&self.detail);
        }
        s
    }
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.detail_message())
    }
}
