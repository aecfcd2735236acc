//! `symcluster.v1.Admin`: the cluster's state (any master answers, with what it knows). Only
//! admin tokens see it; any other token learns where the leader is (how clients find it). The
//! digest of the answering master's own index, to check that replicas agree.

use std::pin::Pin;
use std::sync::Arc;

use symcluster_proto::v1::{self, admin_server::Admin};
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use super::{index_status, members};
use crate::auth;
use crate::scheduler::Scheduler;

/// The admin service.
pub struct AdminService {
    scheduler: Arc<Scheduler>,
    /// Bytes per chunk of a backup.
    chunk_bytes: usize,
    /// Whether the masters serve TLS (an address added without a scheme is `https://`).
    tls: bool,
}

impl AdminService {
    /// Serves `scheduler`; backups go in chunks of `chunk_bytes`; `tls`: whether the masters
    /// serve TLS.
    pub fn new(scheduler: Arc<Scheduler>, chunk_bytes: usize, tls: bool) -> Self {
        AdminService {
            scheduler,
            chunk_bytes,
            tls,
        }
    }
}

type BackupStream = Pin<Box<dyn Stream<Item = Result<v1::BackupChunk, Status>> + Send>>;

#[tonic::async_trait]
impl Admin for AdminService {
    type BackupStream = BackupStream;

    async fn backup(
        &self,
        request: Request<v1::BackupRequest>,
    ) -> Result<Response<Self::BackupStream>, Status> {
        auth::require(&request, auth::ADMIN_ROLES, "a backup")?;
        let index = self.scheduler.index().clone();
        // The digest first, from the same read transaction the backup is written from.
        let (source, digest) = tokio::task::spawn_blocking(move || {
            let source = index.snapshot_source()?;
            let digest = source.digest()?;
            Ok::<_, crate::index::IndexError>((source, digest))
        })
        .await
        .map_err(|e| Status::internal(format!("the backup task failed: {e}")))?
        .map_err(index_status)?;
        tracing::info!(
            applied_index = digest.applied_index,
            jobs = digest.jobs,
            "backup started"
        );
        let chunks = crate::raft::snapshot::send(Box::new(source), 0, Vec::new(), self.chunk_bytes)
            .map_err(|e| Status::internal(format!("cannot start the backup thread: {e}")))?;
        let stream = tokio_stream::StreamExt::map(
            tokio_stream::wrappers::ReceiverStream::new(chunks),
            move |chunk| {
                let last = chunk.last;
                Ok(v1::BackupChunk {
                    offset: chunk.offset,
                    data: chunk.data,
                    crc32: chunk.crc32,
                    last,
                    sha256: chunk.sha256,
                    total_bytes: chunk.total_bytes,
                    applied_index: digest.applied_index,
                    applied_term: digest.applied_term,
                    index_sha256: if last {
                        digest.sha256.to_vec()
                    } else {
                        Vec::new()
                    },
                    jobs: digest.jobs,
                })
            },
        );
        Ok(Response::new(Box::pin(stream)))
    }

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

    async fn list_members(
        &self,
        request: Request<v1::ListMembersRequest>,
    ) -> Result<Response<v1::ListMembersResponse>, Status> {
        auth::require(&request, auth::ADMIN_ROLES, "the group's members")?;
        let mut answer = members::list(self.scheduler.raft());
        answer.restored_from = self
            .scheduler
            .index()
            .restored_from()
            .map_err(index_status)?;
        Ok(Response::new(answer))
    }

    async fn add_member(
        &self,
        request: Request<v1::AddMemberRequest>,
    ) -> Result<Response<v1::ListMembersResponse>, Status> {
        auth::require(&request, auth::ADMIN_ROLES, "a membership change")?;
        let request = request.into_inner();
        let address = crate::config::with_scheme(&request.address, self.tls);
        tracing::info!(id = request.id, %address, "adding a member");
        let change = crate::raft::MemberChange::Add {
            id: request.id,
            address,
        };
        members::change(self.scheduler.raft(), change)
            .await
            .map(Response::new)
    }

    async fn remove_member(
        &self,
        request: Request<v1::RemoveMemberRequest>,
    ) -> Result<Response<v1::ListMembersResponse>, Status> {
        auth::require(&request, auth::ADMIN_ROLES, "a membership change")?;
        let v1::RemoveMemberRequest { ids, force } = request.into_inner();
        tracing::info!(?ids, force, "removing members");
        members::change(
            self.scheduler.raft(),
            crate::raft::MemberChange::Remove { ids, force },
        )
        .await
        .map(Response::new)
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
