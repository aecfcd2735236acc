//! `symctl admin backup FILE`: a master's index streamed into a file, every chunk checked.

use std::fs::{self, File};
use std::io::Write;

use anyhow::{Context, bail};
use sha2::{Digest, Sha256};
use symcluster_client::api;

use crate::cli::BackupArgs;

/// Streams the backup into `FILE.part` (checking each chunk's place and CRC-32, then the whole
/// backup's SHA-256 and length), fsyncs it, renames it to `FILE` and prints what it holds.
pub async fn run(args: BackupArgs) -> anyhow::Result<()> {
    let client = super::cluster::connect(&args.master).await?;
    let mut stream = client
        .admin()
        .backup(api::BackupRequest {})
        .await
        .context("the master refused the backup")?
        .into_inner();
    let part = args.file.with_extension(match args.file.extension() {
        Some(ext) => format!("{}.part", ext.to_string_lossy()),
        None => "part".to_owned(),
    });
    let mut out = std::io::BufWriter::new(
        File::create(&part).with_context(|| format!("cannot create {}", part.display()))?,
    );
    let result = async {
        let mut sha256 = Sha256::new();
        let mut received = 0u64;
        while let Some(chunk) = stream.message().await.context("the backup stream broke")? {
            if chunk.offset != received {
                bail!(
                    "a chunk at byte {} where {received} were received",
                    chunk.offset
                );
            }
            if crc32fast::hash(&chunk.data) != chunk.crc32 {
                bail!("the chunk at byte {} fails its CRC-32", chunk.offset);
            }
            out.write_all(&chunk.data)?;
            sha256.update(&chunk.data);
            received += chunk.data.len() as u64;
            if chunk.last {
                if chunk.total_bytes != received
                    || sha256.finalize().as_slice() != chunk.sha256.as_slice()
                {
                    bail!("the backup of {received} bytes fails its SHA-256 or length");
                }
                return Ok((chunk, received));
            }
        }
        bail!("the backup stream ended before its last chunk ({received} bytes received)")
    }
    .await;
    let (last, bytes) = match result {
        Ok(done) => done,
        Err(e) => {
            drop(out);
            let _ = fs::remove_file(&part);
            return Err(e);
        }
    };
    let file = out.into_inner().map_err(|e| e.into_error())?;
    file.sync_all()?;
    drop(file);
    fs::rename(&part, &args.file).with_context(|| {
        format!(
            "cannot rename {} to {}",
            part.display(),
            args.file.display()
        )
    })?;
    let hex = hex::encode(&last.index_sha256);
    println!(
        "{}: {bytes} bytes, {} jobs, applied index {} (term {}), index digest {hex}",
        args.file.display(),
        last.jobs,
        last.applied_index,
        last.applied_term
    );
    Ok(())
}
