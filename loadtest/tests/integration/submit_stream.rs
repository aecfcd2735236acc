//! `Ingest/SubmitStream` through the client library's [`SubmitStream`]: many jobs over one call,
//! a refusal that leaves the stream open, and the leader SIGKILLed mid-stream.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use symcluster_client::{ClientError, SubmitStream, api};

use crate::support::{app_frames, groups, result, three_masters_with_demo};

/// A plain (uncompressed) report, so that this path stays tested end to end too.
fn native(job_id: &str, report: Vec<u8>) -> api::JobSpec {
    api::JobSpec {
        job_id: job_id.to_owned(),
        payload: Some(api::job_spec::Payload::Native(api::NativeJob {
            report,
            ..Default::default()
        })),
        project: String::new(),
    }
}

/// Submits `id` over `stream` and waits (bounded) for its end.
async fn symbolicate(stream: &SubmitStream, id: &str, report: Vec<u8>) -> api::Job {
    let submitted = stream
        .submit(native(id, report), true)
        .await
        .unwrap_or_else(|e| panic!("submit {id}: {e}"));
    tokio::time::timeout(Duration::from_secs(90), submitted.finished())
        .await
        .unwrap_or_else(|_| panic!("job {id} did not finish within 90 s"))
        .unwrap_or_else(|e| panic!("job {id}: {e}"))
}

/// Three masters; 60 jobs in flight over one stream, six at a time; the leader is SIGKILLed
/// after 20 are accepted. The stream finds the new leader and resubmits what was not finished:
/// every job ends COMPLETED with DemoApp's exact crashing frame, each once (the crash group
/// counts add up to 60). A job with an invalid id is refused on the same stream, which goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_stream_carries_every_job_through_a_leader_kill() {
    let (cluster, report, leader) = three_masters_with_demo().await;
    let client = cluster.client().await;
    let stream = client.submit_stream();

    // Refused as `Submit` refuses it; the stream stays usable.
    match stream.submit(native("", report.to_vec()), true).await {
        Err(ClientError::Status(status)) => {
            assert_eq!(status.code(), tonic::Code::InvalidArgument);
            assert_eq!(status.message(), "job_id must be 1 to 128 bytes");
        }
        Err(e) => panic!("unexpected error: {e}"),
        Ok(_) => panic!("a job without an id was accepted"),
    }

    const JOBS: usize = 60;
    const KILL_AFTER: usize = 20;
    let accepted = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for task in 0..6 {
        let (stream, report, accepted) = (stream.clone(), report.clone(), accepted.clone());
        tasks.push(tokio::spawn(async move {
            let mut jobs = Vec::new();
            for i in (task..JOBS).step_by(6) {
                let id = format!("stream-{i}");
                let submitted = stream
                    .submit(native(&id, report.to_vec()), true)
                    .await
                    .unwrap_or_else(|e| panic!("submit {id}: {e}"));
                accepted.fetch_add(1, Ordering::SeqCst);
                let job = tokio::time::timeout(Duration::from_secs(90), submitted.finished())
                    .await
                    .unwrap_or_else(|_| panic!("job {id} did not finish within 90 s"))
                    .unwrap_or_else(|e| panic!("job {id}: {e}"));
                assert_eq!(job.job_id, id);
                jobs.push(job);
            }
            jobs
        }));
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while accepted.load(Ordering::SeqCst) < KILL_AFTER {
        assert!(
            tokio::time::Instant::now() < deadline,
            "fewer than {KILL_AFTER} jobs accepted in 60 s"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let mut cluster = cluster;
    cluster.kill_master(leader);

    let mut ids = HashSet::new();
    for task in tasks {
        for job in task.await.unwrap() {
            assert_eq!(
                app_frames(&result(&job), &["DemoApp"])[0],
                ("crash_write_null".to_owned(), "crash.c".to_owned(), 23)
            );
            assert!(
                ids.insert(job.job_id.clone()),
                "{} answered twice",
                job.job_id
            );
        }
    }
    assert_eq!(ids.len(), JOBS);
    assert_ne!(cluster.wait_for_leader().await, leader);

    // After the failover, the same stream still takes jobs.
    let job = symbolicate(&stream, "stream-after", report.to_vec()).await;
    assert_eq!(
        app_frames(&result(&job), &["DemoApp"])[0],
        ("crash_write_null".to_owned(), "crash.c".to_owned(), 23)
    );

    let status = cluster.status().await;
    assert_eq!(
        (
            status.jobs_completed,
            status.jobs_failed,
            status.queue_depth
        ),
        (JOBS as u64 + 1, 0, 0)
    );
    let groups = groups(&cluster.client().await, 100).await;
    assert_eq!(groups.iter().map(|g| g.count).sum::<u64>(), JOBS as u64 + 1);
}
