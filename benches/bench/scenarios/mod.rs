//! One module per section (`--only` names): each has a `run` that measures and adds its figures
//! to the report.

pub mod acquire;
pub mod failover;
pub mod fanout;
pub mod fleet;
pub mod footprint;
pub mod handover;
pub mod load;
pub mod restart;
pub mod rollout;
pub mod run;
pub mod shards;
pub mod tls;
pub mod trio;
