//! `symcluster.v1.Admin`: the cluster's state (any master answers, with what it knows).

use std::sync::Arc;

use symcluster_proto::v1::{self, admin_server::Admin};
use tonic::{Request, Response, Status};

use super::index_status;
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
        _request: Request<v1::ClusterStatusRequest>,
    ) -> Result<Response<v1::ClusterStatusResponse>, Status> {
        Ok(Response::new(
            self.scheduler.status().map_err(index_status)?,
        ))
    }
}
