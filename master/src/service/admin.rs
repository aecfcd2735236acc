//! `symcluster.v1.Admin`: the cluster's state (any master answers, with what it knows). Only
//! admin tokens see it; any other token learns where the leader is (how clients find it). The
//! digest of the answering master's own index, to check that replicas agree.

use std::sync::Arc;

use symcluster_proto::v1::{self, admin_server::Admin};
use tonic::{Request, Response, Status};

use super::index_status;
use crate::auth;
use crate::scheduler::Scheduler;

/// The admin service.
pub struct AdminService {
    scheduler: Arc<Scheduler>,
}

impl AdminService {
    /// Serves `scheduler`.
    pub fn new(scheduler: Arc<Scheduler>) -> Self {
        AdminService { scheduler }
    }
}

#[tonic::async_trait]
impl Admin for AdminService {
    async fn cluster_status(
        &self,
        request: Request<v1::ClusterStatusRequest>,
    ) -> Result<Response<v1::ClusterStatusResponse>, Status> {
        if auth::require(&request, auth::ADMIN_ROLES, "the cluster status").is_err() {
            // Every client looks for the leader with this call: other roles learn where the
            // leader is, and nothing else.
            let raft = self.scheduler.raft();
            return Ok(Response::new(v1::ClusterStatusResponse {
                leader: raft.leader_address().unwrap_or_default(),
                from_leader: raft.is_leader(),
                ..Default::default()
            }));
        }
        Ok(Response::new(
            self.scheduler.status().map_err(index_status)?,
        ))
    }

    async fn index_digest(
        &self,
        request: Request<v1::IndexDigestRequest>,
    ) -> Result<Response<v1::IndexDigestResponse>, Status> {
        auth::require(&request, auth::ADMIN_ROLES, "the index digest")?;
        let index = self.scheduler.index().clone();
        let digest = tokio::task::spawn_blocking(move || index.digest())
            .await
            .map_err(|e| Status::internal(format!("the digest task failed: {e}")))?
            .map_err(index_status)?;
        Ok(Response::new(v1::IndexDigestResponse {
            sha256: digest.sha256.to_vec(),
            applied_index: digest.applied_index,
            applied_term: digest.applied_term,
            jobs: digest.jobs,
            master_id: self.scheduler.raft().id,
        }))
    }
}
