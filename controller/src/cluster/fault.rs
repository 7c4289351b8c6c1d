//! What a failed request to the API server says, decided in one place.
//!
//! Three questions are asked of the same `kube::Error`, by different parts of the controller:
//! was the API server reached at all (`crate::cluster::apihealth`: the outage metric,
//! `/readyz`, the reset of every backoff when it returns), may the same write pass at a retry
//! (the reconciler keeps an unsealed result for it, and retries it on its backoff), and did
//! RBAC refuse it (`crate::cluster::denied` turns a feature off for the life of the process).
//! Each answer once had its own reading of the status code and message, and each attack review
//! found a status one of them read wrong (a webhook's 5xx read as an outage, etcd's refusal of
//! an object too large kept for retries, a namespace being deleted read as a refused
//! permission). [`Fault::of`] sorts an error into one kind; the questions are methods on it,
//! so a new kind of answer is sorted once and every question sees it the same way.
//!
//! The messages matched are the API server's own (1.20 to current): they carry no object data
//! before the markers, and the kinds they pick out only ever make a question's answer more
//! conservative (not an outage, not kept, not a refused permission).
//!
//! This module depends on nothing else in the crate.

/// What kind of failure a request's error is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    /// No answer: a transport error, a connection refused or reset, a body that could not be
    /// read, or no answer within the request's deadline (`apihealth::NoAnswer`, a 504 made on
    /// this side, sorts as [`Fault::Server`]).
    NoAnswer,
    /// A 5xx of the API server or its storage: it is away, restarting or overloaded.
    Server,
    /// A 5xx that an admission webhook or policy caused (`failed calling webhook "…"`, or a
    /// webhook denying with a 5xx of its own choosing): the API server answered; the fault is
    /// the webhook's, for the resources and namespaces it covers.
    Webhook,
    /// etcd's refusal of an object too large to store (`etcdserver: request is too large`, a
    /// 500): the API server answered, and the same object is refused at every retry. A Secret
    /// can be larger than its SealedSecret (a template can repeat a value), so a tenant could
    /// otherwise make writes fail with a 5xx of their own choosing.
    TooLarge,
    /// 409: another writer changed the object first.
    Conflict,
    /// 429: the API server asks to come back later.
    Throttled,
    /// A 403 because the namespace is being deleted (`unable to create new content in
    /// namespace … because it is being terminated`): not about permissions.
    Terminating,
    /// A 403 from an admission webhook's or policy's denial (`admission webhook "…" denied
    /// the request`, `ValidatingAdmissionPolicy '…' … denied request`): not about permissions.
    Denied,
    /// Any other 403: RBAC refused the request.
    NotPermitted,
    /// Any other answer (400, 401, 404, 413, 422, …): the request itself was refused, and is
    /// refused again as it stands.
    Refused(u16),
}

/// A 5xx message that names an admission webhook or policy.
const WEBHOOK_MARKERS: &[&str] = &[
    "failed calling webhook",
    "admission webhook",
    "ValidatingAdmissionPolicy",
];

/// A 403 message of a namespace being deleted.
const TERMINATING_MARKER: &str = "because it is being terminated";

/// A 403 message of an admission denial: a webhook's (`denied the request`) or a
/// ValidatingAdmissionPolicy's (`denied request`). `crate::scrub` withholds what follows
/// these (with `: `) from every message the controller writes.
pub(crate) const DENIAL_MARKERS: &[&str] = &["denied the request", "denied request"];

/// etcd's refusal of an object too large.
const TOO_LARGE_MARKER: &str = "request is too large";

impl Fault {
    /// Sorts `error` into its kind.
    pub(crate) fn of(error: &kube::Error) -> Self {
        let kube::Error::Api(status) = error else {
            return Fault::NoAnswer;
        };
        let message = status.message.as_str();
        match status.code {
            500.. if message.contains(TOO_LARGE_MARKER) => Fault::TooLarge,
            500.. if WEBHOOK_MARKERS.iter().any(|m| message.contains(m)) => Fault::Webhook,
            500.. => Fault::Server,
            409 => Fault::Conflict,
            429 => Fault::Throttled,
            403 if message.contains(TERMINATING_MARKER) => Fault::Terminating,
            403 if DENIAL_MARKERS.iter().any(|m| message.contains(m)) => Fault::Denied,
            403 => Fault::NotPermitted,
            code => Fault::Refused(code),
        }
    }

    /// Whether the API server was not reached: no answer, or a 5xx of its own (not a
    /// webhook's, not etcd's refusal of the object, not a 4xx, which an answering server
    /// sends). This is what counts towards an outage.
    pub(crate) fn unreachable(self) -> bool {
        matches!(self, Fault::NoAnswer | Fault::Server)
    }

    /// Whether the same request may pass at a retry as it stands: no answer, a 5xx (the API
    /// server's or a webhook's), a conflict (the attempts ran out) or throttling. What is
    /// refused for what it is (a denial, a refused permission, a 4xx, an object too large)
    /// fails again. The reconciler keeps an unsealed result only for such a failure, and
    /// calls only such a failure transient (tolerated for a while on a synced object, logged
    /// once per burst).
    pub(crate) fn may_pass_again(self) -> bool {
        matches!(
            self,
            Fault::NoAnswer | Fault::Server | Fault::Webhook | Fault::Conflict | Fault::Throttled
        )
    }

    /// Whether RBAC refused the request (a 403 that is neither a namespace being deleted nor
    /// an admission denial): the one kind that turns a feature off.
    pub(crate) fn not_permitted(self) -> bool {
        self == Fault::NotPermitted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16, message: &str) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure(message, "Reason")
                .with_code(code)
                .boxed(),
        )
    }

    /// Every kind, from the messages the API server writes, with each question's answer:
    /// (unreachable, may pass again, not permitted).
    #[test]
    fn every_kind_answers_each_question_once() {
        let cases: &[(kube::Error, Fault, [bool; 3])] = &[
            (
                kube::Error::Service("connection refused".into()),
                Fault::NoAnswer,
                [true, true, false],
            ),
            (
                api(503, "injected outage"),
                Fault::Server,
                [true, true, false],
            ),
            (
                api(500, "etcdserver: request timed out"),
                Fault::Server,
                [true, true, false],
            ),
            (
                api(504, "no answer from the API server within 10 s"),
                Fault::Server,
                [true, true, false],
            ),
            (
                api(
                    500,
                    "Internal error occurred: failed calling webhook \"v.example.com\": Post \"https://127.0.0.1:1/x\": dial tcp 127.0.0.1:1: connect: connection refused",
                ),
                Fault::Webhook,
                [false, true, false],
            ),
            (
                api(
                    500,
                    "admission webhook \"echo.example.com\" denied the request: no",
                ),
                Fault::Webhook,
                [false, true, false],
            ),
            (
                api(500, "etcdserver: request is too large"),
                Fault::TooLarge,
                [false, false, false],
            ),
            (
                // Too large wins over a webhook's name in the same message.
                api(
                    500,
                    "admission webhook \"w\" said: etcdserver: request is too large",
                ),
                Fault::TooLarge,
                [false, false, false],
            ),
            (api(409, "conflict"), Fault::Conflict, [false, true, false]),
            (
                api(429, "too many requests"),
                Fault::Throttled,
                [false, true, false],
            ),
            (
                api(
                    403,
                    "events.events.k8s.io \"x.1\" is forbidden: unable to create new content in namespace gone because it is being terminated",
                ),
                Fault::Terminating,
                [false, false, false],
            ),
            (
                api(
                    403,
                    "admission webhook \"e.example.com\" denied the request: no",
                ),
                Fault::Denied,
                [false, false, false],
            ),
            (
                api(
                    403,
                    "secrets \"x\" is forbidden: ValidatingAdmissionPolicy 'p' with binding 'b' denied request: no",
                ),
                Fault::Denied,
                [false, false, false],
            ),
            (
                api(403, "events.events.k8s.io is forbidden"),
                Fault::NotPermitted,
                [false, false, true],
            ),
            (
                api(400, "bad request"),
                Fault::Refused(400),
                [false, false, false],
            ),
            (
                api(404, "not found"),
                Fault::Refused(404),
                [false, false, false],
            ),
            (
                api(413, "too large"),
                Fault::Refused(413),
                [false, false, false],
            ),
            (
                api(422, "invalid"),
                Fault::Refused(422),
                [false, false, false],
            ),
            (
                // A 4xx naming a webhook is the webhook's refusal: refused, not a fault.
                api(400, "admission webhook \"w\" denied the request: no"),
                Fault::Refused(400),
                [false, false, false],
            ),
        ];
        for (error, kind, [unreachable, again, not_permitted]) in cases {
            let fault = Fault::of(error);
            assert_eq!(fault, *kind, "{error}");
            assert_eq!(fault.unreachable(), *unreachable, "{error}");
            assert_eq!(fault.may_pass_again(), *again, "{error}");
            assert_eq!(fault.not_permitted(), *not_permitted, "{error}");
        }
    }
}
