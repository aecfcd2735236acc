//! `symcluster.v1.Admin`: the cluster's state.

use std::sync::Arc;

use symcluster_proto::v1::{self, admin_server::Admin};
use tonic::{Request, Response, Status};

use crate::scheduler::Scheduler;

/// The admin service.
pub struct AdminService {
    scheduler: Arc<Scheduler>,
    master_id: String,
}

impl AdminService {
    /// Serves `scheduler`; `master_id` is reported as the leader.
    pub fn new(scheduler: Arc<Scheduler>, master_id: String) -> Self {
        AdminService {
            scheduler,
            master_id,
        }
    }
}

#[tonic::async_trait]
impl Admin for AdminService {
    async fn cluster_status(
        &self,
        _request: Request<v1::ClusterStatusRequest>,
    ) -> Result<Response<v1::ClusterStatusResponse>, Status> {
        let mut status = self.scheduler.status();
        status.leader = self.master_id.clone();
        Ok(Response::new(status))
    }
}
