//! This replica's place in the cluster: leader election on a `coordination.k8s.io/v1` Lease
//! ([`leader`]), leadership as an event and the fence every write goes through
//! (`leadership`), and whether the API server answers (`apihealth`).

pub(crate) mod apihealth;
pub mod leader;
pub(crate) mod leadership;
