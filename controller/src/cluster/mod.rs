//! This replica's place in the cluster: leader election on a `coordination.k8s.io/v1` Lease
//! ([`leader`]), leadership as an event and the fence every write goes through
//! (`leadership`), whether the API server answers (`apihealth`), the features its RBAC
//! refuses, turned off one by one (`denied`), what a failed request's error says (`fault`),
//! and namespace labels for rings bound by a selector ([`namespaces`]).

pub(crate) mod apihealth;
pub(crate) mod denied;
pub(crate) mod fault;
pub mod leader;
pub(crate) mod leadership;
pub mod namespaces;
