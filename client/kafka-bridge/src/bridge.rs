//! The bridge's loop: consume, submit, wait, publish, commit.
//!
//! Each input message is handled by its own task, at most `--in-flight` at once:
//! 1. [`message::spec`] turns it into a job spec (job id from its position), or says why it
//!    cannot: then it goes to the dead-letter topic with the reason, and is done;
//! 2. the spec is submitted over one `SubmitStream` (following the leader), retried with
//!    backoff while the master is unreachable; a refusal (INVALID_ARGUMENT, PERMISSION_DENIED,
//!    …) dead-letters the message; UNAUTHENTICATED stops the bridge (a wrong token would
//!    otherwise dead-letter everything);
//! 3. once the job is COMPLETED or FAILED, its result goes to the output topic ([`output`]),
//!    retried until the broker takes it; a publish the broker refuses for good (the message
//!    too large, an invalid record: [`is_permanent`]) dead-letters the input message with the
//!    reason instead of holding its partition forever, and a dead letter refused for good is
//!    published again without the input's value (a header says why); one refused even so
//!    stops the bridge, its message uncommitted;
//! 4. only then is the message done; [`Offsets`] commits per partition up to the oldest message
//!    not done, every `--commit-interval`.
//!
//! Nothing is dropped: a message is either published (result or dead letter) or left
//! uncommitted for the next consumer of its partition, which submits it again under the same
//! job id.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use backon::{ExponentialBuilder, Retryable};
use rdkafka::consumer::{CommitMode, Consumer, ConsumerContext, Rebalance, StreamConsumer};
use rdkafka::message::{Header, Headers, OwnedHeaders, OwnedMessage};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientConfig, ClientContext, Message, Offset, TopicPartitionList};
use symcluster_client::{Client, ClientError, SubmitStream, Tls};
use tokio::sync::{Semaphore, mpsc};

use crate::config::BridgeConfig;
use crate::message::{self, Position, header};
use crate::metrics;
use crate::offsets::{Offsets, Partition};
use crate::output;

/// The consumer's context: forgets the offsets of partitions taken away in a rebalance (their
/// next consumer starts from the last commit) and logs failed commits.
struct Context {
    offsets: Arc<Mutex<Offsets>>,
}

impl ClientContext for Context {}

impl ConsumerContext for Context {
    fn pre_rebalance(
        &self,
        consumer: &rdkafka::consumer::BaseConsumer<Self>,
        rebalance: &Rebalance<'_>,
    ) {
        match rebalance {
            Rebalance::Revoke(partitions) => {
                // What is done is committed before the partitions go, so that their next
                // consumer starts after it.
                let mut offsets = lock(&self.offsets);
                let revoked: Vec<Partition> = partitions
                    .elements()
                    .iter()
                    .map(|p| (p.topic().to_owned(), p.partition()))
                    .collect();
                let mut list = TopicPartitionList::new();
                for (partition, point) in offsets.points(&revoked) {
                    let _ =
                        list.add_partition_offset(&partition.0, partition.1, Offset::Offset(point));
                }
                if list.count() > 0
                    && let Err(e) = consumer.commit(&list, CommitMode::Sync)
                {
                    tracing::warn!(error = %e, "committing revoked partitions failed");
                }
                for partition in &revoked {
                    offsets.forget(partition);
                }
                tracing::info!(partitions = partitions.count(), "partitions revoked");
            }
            Rebalance::Assign(partitions) => {
                tracing::info!(partitions = partitions.count(), "partitions assigned")
            }
            Rebalance::Error(e) => tracing::warn!(error = %e, "rebalance failed"),
        }
    }

    fn commit_callback(&self, result: rdkafka::error::KafkaResult<()>, list: &TopicPartitionList) {
        if let Err(e) = result {
            tracing::warn!(error = %e, "offset commit failed; retried at the next interval");
            let mut offsets = lock(&self.offsets);
            for p in list.elements() {
                offsets.retry_commit(&(p.topic().to_owned(), p.partition()));
            }
        }
    }
}

fn lock(offsets: &Mutex<Offsets>) -> std::sync::MutexGuard<'_, Offsets> {
    offsets.lock().unwrap_or_else(|e| e.into_inner())
}

/// What every message task shares.
struct Shared {
    client: Client,
    stream: SubmitStream,
    producer: FutureProducer,
    offsets: Arc<Mutex<Offsets>>,
    config: BridgeConfig,
    /// A fatal error (the bridge must stop): the main loop ends on it.
    fatal: mpsc::UnboundedSender<anyhow::Error>,
}

fn kafka_config(config: &BridgeConfig) -> ClientConfig {
    let mut kafka = ClientConfig::new();
    kafka.set("bootstrap.servers", &config.brokers);
    for (key, value) in &config.kafka_options {
        kafka.set(key, value);
    }
    kafka
}

/// Backoff for retries of the master and the broker: the clients' one policy (200 ms doubling
/// to 5 s, with jitter), for as long as it takes (a message is never dropped because a peer is
/// down).
fn backoff() -> ExponentialBuilder {
    symcluster_client::retry::backoff(Duration::from_secs(5))
}

/// Runs the bridge until `shutdown` resolves (then drains: no new messages, the ones in flight
/// get `--drain-timeout` to finish, done offsets are committed) or a fatal error (a token the
/// master does not accept, a consumer that cannot be created).
pub async fn run(
    config: BridgeConfig,
    shutdown: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    let offsets = Arc::new(Mutex::new(Offsets::default()));
    let consumer: Arc<StreamConsumer<Context>> = Arc::new(
        kafka_config(&config)
            .set("group.id", &config.group)
            .set("enable.auto.commit", "false")
            .set("auto.offset.reset", "earliest")
            .create_with_context(Context {
                offsets: offsets.clone(),
            })?,
    );
    consumer.subscribe(&[&config.input_topic])?;
    let producer: FutureProducer = kafka_config(&config)
        .set("acks", "all")
        .set("compression.type", "lz4")
        .create()?;
    let tls = Tls::from_files(config.tls_ca.as_deref(), None, None)?;
    let client = Client::connect_with(&config.master, &config.token, tls)
        .await?
        .with_project(&config.project);
    check_token(&client).await?;
    let (fatal_tx, mut fatal) = mpsc::unbounded_channel();
    let shared = Arc::new(Shared {
        stream: client.submit_stream(),
        client,
        producer,
        offsets: offsets.clone(),
        config: config.clone(),
        fatal: fatal_tx,
    });
    tokio::spawn(report_lag(consumer.clone(), config.input_topic.clone()));
    let metrics_addr = config.metrics_listen;
    tokio::spawn(async move {
        if let Err(e) = metrics::serve(metrics_addr).await {
            tracing::error!(error = %e, "metrics endpoint failed");
        }
    });
    tracing::info!(brokers = %config.brokers, input = %config.input_topic, output = %config.output_topic,
        dead_letter = %config.dead_letter_topic, group = %config.group, "bridge starting");

    let permits = Arc::new(Semaphore::new(config.in_flight.max(1)));
    let mut commits = tokio::time::interval(config.commit_interval);
    let mut shutdown = std::pin::pin!(shutdown);
    let mut failed = None;
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            error = fatal.recv() => {
                failed = error;
                break;
            }
            _ = commits.tick() => commit(&consumer, &offsets, CommitMode::Async),
            permit = permits.clone().acquire_owned() => {
                let permit = permit?;
                let received = tokio::select! {
                    received = consumer.recv() => received,
                    () = &mut shutdown => break,
                    error = fatal.recv() => {
                        failed = error;
                        break;
                    }
                    _ = commits.tick() => {
                        commit(&consumer, &offsets, CommitMode::Async);
                        continue;
                    }
                };
                let message = match received {
                    Ok(message) => message.detach(),
                    Err(e) => {
                        tracing::warn!(error = %e, "consuming failed");
                        continue;
                    }
                };
                let position = Position {
                    topic: message.topic().to_owned(),
                    partition: message.partition(),
                    offset: message.offset(),
                };
                lock(&offsets).take(&(position.topic.clone(), position.partition), position.offset);
                metrics::IN_FLIGHT.inc();
                let shared = shared.clone();
                tokio::spawn(async move {
                    let started = Instant::now();
                    if handle(&shared, &message, &position).await {
                        lock(&shared.offsets).done(&(position.topic.clone(), position.partition), position.offset);
                        metrics::LATENCY.observe(started.elapsed().as_secs_f64());
                    }
                    metrics::IN_FLIGHT.dec();
                    drop(permit);
                });
            }
        }
    }
    if let Some(error) = failed {
        // Nothing more is committed: what is not done is read again by the next consumer.
        commit(&consumer, &offsets, CommitMode::Sync);
        return Err(error);
    }
    drain(&config, &permits, &consumer, &offsets).await;
    Ok(())
}

/// Fails unless the token may submit and read jobs (an `ingest` or `admin` token): a token
/// the master refuses for every call would otherwise dead-letter every message.
async fn check_token(client: &Client) -> anyhow::Result<()> {
    let request = symcluster_client::api::ListJobsRequest {
        page_size: 1,
        project: client.project().to_owned(),
        ..Default::default()
    };
    let listed = client
        .on_leader(|channel| {
            let request = request.clone();
            async move {
                symcluster_client::api::ingest_client::IngestClient::new(channel)
                    .list_jobs(request)
                    .await
            }
        })
        .await;
    match listed {
        Ok(_) => Ok(()),
        Err(ClientError::Status(status))
            if matches!(
                status.code(),
                tonic::Code::Unauthenticated
                    | tonic::Code::PermissionDenied
                    | tonic::Code::InvalidArgument
            ) =>
        {
            anyhow::bail!(
                "the bridge needs an ingest or admin token serving its project: {}",
                status.message()
            )
        }
        // Unreachable masters are retried per message.
        Err(e) => {
            tracing::warn!(error = %e, "cannot check the token now");
            Ok(())
        }
    }
}

/// After a shutdown: waits for the messages in flight (at most `--drain-timeout`), then commits
/// what is done.
async fn drain(
    config: &BridgeConfig,
    permits: &Arc<Semaphore>,
    consumer: &StreamConsumer<Context>,
    offsets: &Arc<Mutex<Offsets>>,
) {
    let in_flight = lock(offsets).in_flight();
    tracing::info!(in_flight, "stopping: waiting for the messages in flight");
    let all = permits.acquire_many(config.in_flight.max(1) as u32);
    let finished = tokio::time::timeout(config.drain_timeout, all)
        .await
        .is_ok();
    commit(consumer, offsets, CommitMode::Sync);
    let left = lock(offsets).in_flight();
    if finished {
        tracing::info!("stopped: every message in flight is done and committed");
    } else {
        tracing::warn!(
            left,
            "stopped with messages in flight: the next consumer submits them again (same job ids)"
        );
    }
}

/// Commits the commit points that moved.
fn commit(consumer: &StreamConsumer<Context>, offsets: &Mutex<Offsets>, mode: CommitMode) {
    let points = lock(offsets).to_commit();
    if points.is_empty() {
        return;
    }
    let mut list = TopicPartitionList::new();
    for ((topic, partition), offset) in &points {
        if let Err(e) = list.add_partition_offset(topic, *partition, Offset::Offset(*offset)) {
            tracing::warn!(error = %e, topic, partition, "cannot commit");
        }
    }
    if let Err(e) = consumer.commit(&list, mode) {
        tracing::warn!(error = %e, "offset commit failed; retried at the next interval");
        // Hand the points out again next time.
        let mut offsets = lock(offsets);
        for ((topic, partition), _) in points {
            offsets.retry_commit(&(topic, partition));
        }
    }
}

/// Handles one message to its end; `false` when the bridge must stop before it is done (then
/// its offset is never committed).
async fn handle(shared: &Shared, message: &OwnedMessage, position: &Position) -> bool {
    let headers: Vec<(&str, Option<&[u8]>)> = message
        .headers()
        .map(|h| h.iter().map(|h| (h.key, h.value)).collect())
        .unwrap_or_default();
    let spec = match message::spec(
        position,
        &headers,
        message.payload(),
        &shared.config.project,
    ) {
        Ok(spec) => spec,
        Err(reason) => {
            return dead_letter(shared, message, position, &reason.to_string()).await;
        }
    };
    let submitted = (|| async { shared.stream.submit(spec.clone(), true).await })
        .retry(backoff())
        .when(|e| matches!(classify(e), Class::Retry))
        // A master over its budget says how long to wait (`grpc-retry-pushback-ms`).
        .adjust(symcluster_client::retry::adjust)
        .notify(|e, wait| {
            tracing::warn!(job = %spec.job_id, error = %e, ?wait, "submit failed; retrying")
        })
        .await;
    let submitted = match submitted {
        Ok(submitted) => submitted,
        Err(e) => match classify(&e) {
            Class::DeadLetter => {
                return dead_letter(
                    shared,
                    message,
                    position,
                    &format!("refused by the master: {e}"),
                )
                .await;
            }
            _ => {
                let _ = shared.fatal.send(anyhow::anyhow!(
                    "the master refused the bridge's token: {e}"
                ));
                return false;
            }
        },
    };
    let project = submitted
        .response
        .job
        .as_ref()
        .map(|j| j.project.clone())
        .unwrap_or_default();
    metrics::MESSAGES
        .with_label_values(&[if submitted.response.created {
            "submitted"
        } else {
            "duplicate"
        }])
        .inc();
    let job = match submitted.finished().await {
        Ok(job) => job,
        // The stream's watch broke: watch again, as long as it takes.
        Err(_) => {
            let client = shared.client.clone().with_project(&project);
            let waited = (|| async { client.clone().wait(&spec.job_id).await })
                .retry(backoff())
                .when(|e| matches!(classify(e), Class::Retry))
                .adjust(symcluster_client::retry::adjust)
                .await;
            match waited {
                Ok(job) => job,
                Err(e) if matches!(classify(&e), Class::DeadLetter) => {
                    // E.g. purged before it was read: nothing to publish for it.
                    return dead_letter(
                        shared,
                        message,
                        position,
                        &format!("cannot read job {}: {e}", spec.job_id),
                    )
                    .await;
                }
                Err(e) => {
                    let _ = shared
                        .fatal
                        .send(anyhow::anyhow!("cannot watch job {}: {e}", spec.job_id));
                    return false;
                }
            }
        }
    };
    let payload = output::encode(&job, position, shared.config.max_message_bytes);
    let status = output::status(&job);
    let headers = OwnedHeaders::new()
        .insert(Header {
            key: header::JOB_ID,
            value: Some(job.job_id.as_str()),
        })
        .insert(Header {
            key: header::STATUS,
            value: Some(status),
        })
        .insert(Header {
            key: header::SOURCE,
            value: Some(position.to_string().as_str()),
        });
    if let Err(e) = publish(
        shared,
        &shared.config.output_topic,
        Some(job.job_id.as_bytes()),
        &payload,
        headers,
    )
    .await
    {
        return dead_letter(
            shared,
            message,
            position,
            &format!(
                "the result of job {} ({} bytes) was refused by the broker: {e}",
                job.job_id,
                payload.len()
            ),
        )
        .await;
    }
    metrics::RESULTS.with_label_values(&[status]).inc();
    true
}

/// Publishes the message as it came, with `symcluster-reason` and `symcluster-source` headers
/// added, to the dead-letter topic; without its value when the broker refuses it for good
/// (another `symcluster-reason` says why). `false` (and the bridge stops, the message left
/// uncommitted) when even that is refused for good.
async fn dead_letter(
    shared: &Shared,
    message: &OwnedMessage,
    position: &Position,
    reason: &str,
) -> bool {
    tracing::warn!(source = %position, reason, "dead-lettered");
    let mut headers = OwnedHeaders::new();
    if let Some(original) = message.headers() {
        for h in original.iter() {
            headers = headers.insert(h);
        }
    }
    let headers = headers
        .insert(Header {
            key: header::REASON,
            value: Some(reason),
        })
        .insert(Header {
            key: header::SOURCE,
            value: Some(position.to_string().as_str()),
        });
    // A value too large for the topic would be refused forever: it is left out, and said so.
    let value = message.payload().unwrap_or_default();
    let (value, headers) = if value.len() > shared.config.max_message_bytes {
        let note = format!(
            "the value ({} bytes, over --max-message-size {} bytes) is left out; it is at {position}",
            value.len(),
            shared.config.max_message_bytes
        );
        (
            &[][..],
            headers.insert(Header {
                key: header::REASON,
                value: Some(note.as_str()),
            }),
        )
    } else {
        (value, headers)
    };
    let topic = &shared.config.dead_letter_topic;
    let mut sent = publish(shared, topic, message.key(), value, headers.clone()).await;
    if let Err(e) = &sent
        && !value.is_empty()
    {
        let note = format!(
            "the value ({} bytes) is left out: {e}; it is at {position}",
            value.len()
        );
        let headers = headers.insert(Header {
            key: header::REASON,
            value: Some(note.as_str()),
        });
        sent = publish(shared, topic, message.key(), &[], headers).await;
    }
    if let Err(e) = sent {
        let _ = shared.fatal.send(anyhow::anyhow!(
            "the dead-letter topic {topic} refuses the dead letter of {position}: {e}"
        ));
        return false;
    }
    metrics::MESSAGES.with_label_values(&["dead_letter"]).inc();
    true
}

/// Whether the broker (or librdkafka before it) refuses this message for good, whatever the
/// wait: too large, an invalid record. Other errors (brokers unreachable, no leader, timeouts,
/// authorization, which an operator fixes) are retried.
pub fn is_permanent(error: &rdkafka::error::KafkaError) -> bool {
    use rdkafka::error::RDKafkaErrorCode as Code;
    matches!(
        error.rdkafka_error_code(),
        Some(
            Code::MessageSizeTooLarge
                | Code::MessageBatchTooLarge
                | Code::InvalidRecord
                | Code::InvalidMessageSize
        )
    )
}

/// Produces one message, retrying with backoff until the broker acknowledges it; the error
/// when it refuses it for good ([`is_permanent`]).
async fn publish(
    shared: &Shared,
    topic: &str,
    key: Option<&[u8]>,
    payload: &[u8],
    headers: OwnedHeaders,
) -> Result<(), rdkafka::error::KafkaError> {
    let send = || async {
        let mut record = FutureRecord::<[u8], [u8]>::to(topic)
            .payload(payload)
            .headers(headers.clone());
        if let Some(key) = key {
            record = record.key(key);
        }
        shared
            .producer
            .send(record, Duration::from_secs(10))
            .await
            .map_err(|(e, _)| e)
    };
    let sent = send
        .retry(backoff())
        .when(|e| !is_permanent(e))
        .notify(|e, wait| tracing::warn!(topic, error = %e, ?wait, "publishing failed; retrying"))
        .await;
    if let Err(e) = &sent {
        tracing::warn!(topic, error = %e, "the broker refuses the message for good");
    }
    sent.map(|_| ())
}

/// What to do about a failed call to the master.
enum Class {
    /// It may work later (unreachable, no leader, overloaded).
    Retry,
    /// The master refused this message: it will refuse it again.
    DeadLetter,
    /// The bridge cannot work (its token is refused).
    Fatal,
}

fn classify(error: &ClientError) -> Class {
    use tonic::Code;
    match error {
        ClientError::Status(status) => match status.code() {
            Code::InvalidArgument
            | Code::OutOfRange
            | Code::PermissionDenied
            | Code::FailedPrecondition
            | Code::NotFound
            | Code::AlreadyExists
            | Code::DataLoss
            | Code::Unimplemented => Class::DeadLetter,
            Code::Unauthenticated => Class::Fatal,
            _ => Class::Retry,
        },
        ClientError::BadToken => Class::Fatal,
        ClientError::Connect { .. } | ClientError::WatchEnded(_) => Class::Retry,
    }
}

/// Every 5 s: the lag of each assigned input partition (high watermark minus the group's
/// committed offset), as [`metrics::LAG`]; whether the group's coordinator answered, as
/// [`metrics::KAFKA_REACHABLE`]. The librdkafka calls block: they run on the blocking
/// pool.
async fn report_lag(consumer: Arc<StreamConsumer<Context>>, topic: String) {
    let mut tick = tokio::time::interval(Duration::from_secs(5));
    loop {
        tick.tick().await;
        let (consumer, topic) = (consumer.clone(), topic.clone());
        let lags = tokio::task::spawn_blocking(move || -> Vec<(Partition, i64)> {
            let timeout = Duration::from_secs(2);
            let committed = consumer.committed(timeout);
            // `/ready`: the group's coordinator answered within the timeout.
            metrics::KAFKA_REACHABLE.store(committed.is_ok(), std::sync::atomic::Ordering::Relaxed);
            let Ok(committed) = committed else {
                return Vec::new();
            };
            committed
                .elements_for_topic(&topic)
                .iter()
                .filter_map(|p| {
                    let (low, high) = consumer
                        .fetch_watermarks(&topic, p.partition(), timeout)
                        .ok()?;
                    let from = match p.offset() {
                        Offset::Offset(o) => o,
                        _ => low,
                    };
                    Some(((topic.clone(), p.partition()), (high - from).max(0)))
                })
                .collect()
        })
        .await
        .unwrap_or_default();
        for ((topic, partition), lag) in lags {
            metrics::LAG
                .with_label_values(&[topic.as_str(), &partition.to_string()])
                .set(lag);
        }
    }
}
