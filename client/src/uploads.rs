//! The `Uploads` service's calls (`proto/symcluster/v1/uploads.proto`), on the leader: what
//! `symctl upload` and build integrations call with an `upload` token.

use crate::{Client, ClientError, api};

impl Client {
    /// `Uploads/PrepareUpload`: which files the bucket holds already, and presigned requests for
    /// the others. Errors: the master's status (PERMISSION_DENIED for another project,
    /// FAILED_PRECONDITION for a master without a bucket, INVALID_ARGUMENT for a malformed
    /// file).
    pub async fn prepare_upload(
        &self,
        request: api::PrepareUploadRequest,
    ) -> Result<api::PrepareUploadResponse, ClientError> {
        self.on_leader(|channel| {
            let request = request.clone();
            async move {
                api::uploads_client::UploadsClient::new(channel)
                    .prepare_upload(request)
                    .await
                    .map(|r| r.into_inner())
            }
        })
        .await
    }

    /// `Uploads/ConfirmUpload`: the files are sent; the leader checks them and queues again the
    /// jobs that lacked them. Errors: FAILED_PRECONDITION naming a file that is absent, holds
    /// other bytes, or whose ticket no master gave.
    pub async fn confirm_upload(
        &self,
        request: api::ConfirmUploadRequest,
    ) -> Result<api::ConfirmUploadResponse, ClientError> {
        self.on_leader(|channel| {
            let request = request.clone();
            async move {
                api::uploads_client::UploadsClient::new(channel)
                    .confirm_upload(request)
                    .await
                    .map(|r| r.into_inner())
            }
        })
        .await
    }

    /// `Uploads/FindDebugFile`: whether the bucket holds a debug file for a debug id.
    pub async fn find_debug_file(
        &self,
        request: api::FindDebugFileRequest,
    ) -> Result<api::FindDebugFileResponse, ClientError> {
        self.on_leader(|channel| {
            let request = request.clone();
            async move {
                api::uploads_client::UploadsClient::new(channel)
                    .find_debug_file(request)
                    .await
                    .map(|r| r.into_inner())
            }
        })
        .await
    }
}
